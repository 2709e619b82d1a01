"""The reply a drain ended with, handed straight to the deliverer: the commit that emptied the mailbox also took the
delivery lease and claimed that reply, so the deliverer starts from the claim (no round trip to start) and sends it
from the record the turn built (no decode). A lone chat turn costs three round trips in all this way
(docs/architecture.md, "What a turn costs").

A failure here never fails the drain, which has committed: it becomes a scheduled delivery (and the sweeper is the
net under that). With ``deliver_inline`` off, the commit claimed nothing and a deliver task is asked for instead.
"""

from __future__ import annotations

import logging
from typing import Protocol

from worker import metrics
from worker.errors import DeliveryError, RetryLater, StoreError
from worker.service.config import Wake
from worker.service.drain.run import Claimed, DrainRun, Written
from worker.service.presence import Presence

log = logging.getLogger("parley.service")


class Delivers(Protocol):
    """What the drain needs of the deliverer (:class:`~worker.service.deliver.deliverer.Deliverer` has it)."""

    def deliver(self, cid: str, claimed: Claimed | None = None, reply: Written | None = None) -> int: ...


class Handover:
    """Delivers a drain's last reply in the drain's own task (one Celery hop fewer per turn), or asks for a deliver
    task when ``inline`` is off."""

    def __init__(self, deliverer: Delivers, wake: Wake, *, inline: bool) -> None:
        self.deliverer, self.wake, self.inline = deliverer, wake, inline

    def hand_over(self, run: DrainRun, presence: Presence) -> None:
        """Deliver what ``run`` ended with: its claim and its reply, when its last commit queued one."""
        if not run.replied:
            return
        cid = run.cid
        if not self.inline:
            self.wake("deliver", cid)
            return
        try:
            # A typing indicator still on its way would show again after the reply: let it land first.
            presence.settle(cid)
            self.deliverer.deliver(cid, run.delivery, run.reply)
            return
        except RetryLater as exc:
            self._wake_delivery(cid, exc.countdown)
            return
        except (StoreError, DeliveryError) as exc:  # Redis trouble, a lost delivery lease, a channel error
            log.warning("inline delivery failed; handing it to a deliver task",
                        extra={"conversation_id": cid, "error": f"{type(exc).__name__}: {exc}"})
        except Exception:
            metrics.UNEXPECTED_ERRORS.labels("inline_delivery").inc()
            log.exception("inline delivery hit an unexpected error; handing it to a deliver task",
                          extra={"conversation_id": cid})
        self._wake_delivery(cid, 1.0)

    def _wake_delivery(self, cid: str, countdown: float) -> None:
        try:
            self.wake("deliver", cid, countdown=countdown)
        except Exception:  # the broker is down: nothing is lost, the reply waits in the outbox
            log.exception("could not schedule delivery; the sweeper will", extra={"conversation_id": cid})
