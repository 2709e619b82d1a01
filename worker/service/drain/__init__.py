"""The drain: a conversation's inputs applied in order under its lease.

The turn decides, the drain applies: :mod:`~worker.service.drain.decide` and :mod:`~worker.service.drain.turn`
come to an outcome (:mod:`~worker.service.drain.outcomes`), what to do about a model failure is one pure function
(:mod:`~worker.service.drain.failures`), :mod:`~worker.service.drain.apply` makes an outcome happen (its commit
written by :mod:`~worker.service.drain.commit`), and :class:`Drainer` holds the lease loop. The features are hooks
(:mod:`~worker.service.drain.hooks`).
"""

from __future__ import annotations

from worker.service.drain.drainer import Drained, Drainer
from worker.service.drain.run import Claimed, DrainRun, Written

__all__ = ["Claimed", "DrainRun", "Drained", "Drainer", "Written"]
