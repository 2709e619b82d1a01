"""A reply part a crashed deliverer left in flight: resend it, or mark it sent because it already reached WhatsApp.

Delivery marks a part in flight before the send and sent after it. A worker killed between the two leaves the
mark, and whoever delivers next cannot tell from Redis whether the send happened. Resending at once (the behaviour
without status webhooks) puts the message on the player's phone twice when it had.

Every part goes out with callback data naming it (:func:`worker.envelopes.inputs.part_callback`), which WhatsApp hands
back in the part's status webhooks; the ingress keeps such a status with the part while it is in flight. So with
``status_webhooks`` on, the deliverer that finds a part left in flight looks there first:

- a status came (sent, delivered, read, or even failed: WhatsApp accepted the send and gave it a message id): the
  part is marked sent with that id, not resent, and delivery goes on (counted in
  ``parley_duplicate_sends_avoided_total``). A ``failed`` one is treated like a send answered 200 that failed
  later, which is never resent either;
- none yet, and the grace period (``resend_grace_ms``) since a deliverer first found the part has not run out: no
  worker waits for it; :class:`RetryLater` schedules another look and gives the delivery lease up, leaving the mark
  in place (so the sweeper wakes the conversation too, should that task be lost);
- none within the grace: the send most likely never happened (the worker died before it) or its statuses were lost;
  the part is resent and counted in ``parley_duplicate_send_window_total``, as without status webhooks.

The grace runs from the first look, which comes at least a delivery lease after the crash (the dead worker's lease
has to run out first): WhatsApp's ``sent`` status usually arrives within seconds of the send.
"""

from __future__ import annotations

import logging

from worker import metrics
from worker.errors import RetryLater
from worker.service.config import ServiceConfig
from worker.store.interfaces import DeliveryStore

log = logging.getLogger("parley.service")

#: Logged once per resend of a part whose send outcome is unknown (the chaos suite counts these lines).
RESEND_LOG = "resending a part whose send outcome is unknown"
#: Logged once per part marked sent instead of resent.
SAVED_LOG = "a part left in flight reached WhatsApp (a status webhook says so): marked sent, not resent"


class CrashedSends:
    """Decides what becomes of a part found in flight after a crash (see the module docstring)."""

    def __init__(self, store: DeliveryStore, config: ServiceConfig) -> None:
        self.store = store
        self.config = config

    def settle(self, cid: str, token: int, reply_id: str, part: int) -> str | None:
        """The provider message id to mark the part sent with when a status webhook showed it reached WhatsApp,
        or ``None`` to resend it now. Raises :class:`RetryLater` while the grace period for its status runs."""
        extra = {"conversation_id": cid, "message_id": reply_id, "part": part}
        if not self._statuses_recorded():
            return self._resend(extra, "no status webhooks to wait for")
        seen = self.store.inflight_outcome(cid, token, reply_id, part)
        if seen.status is not None:
            metrics.DUPLICATE_SENDS_AVOIDED.inc()
            log.info(SAVED_LOG, extra={**extra, "status": seen.status, "provider_id": seen.provider_id})
            return seen.provider_id or ""
        left_ms = self.config.delivery.resend_grace_ms - seen.waited_ms
        if left_ms > 0:
            metrics.INFLIGHT_RECHECKS.inc()
            # Look again a few times within the grace: a status that comes early ends the wait early.
            countdown = min(left_ms, max(500, self.config.delivery.resend_grace_ms // 4)) / 1000
            raise RetryLater(f"part {part} of {reply_id} was left in flight; waiting {left_ms} ms more for a status "
                             "webhook before resending it", countdown)
        return self._resend(extra, f"no status webhook within {seen.waited_ms} ms")

    def _statuses_recorded(self) -> bool:
        """PARLEY_STATUS_WEBHOOKS true or false, or with auto whether an ingress announced it records them."""
        if self.config.delivery.statuses is not None:
            return self.config.delivery.statuses
        return self.store.status_ingress_announced()

    @staticmethod
    def _resend(extra: dict[str, object], why: str) -> None:
        metrics.DUPLICATE_WINDOW.inc()
        log.warning(RESEND_LOG, extra={**extra, "reason": why})
        return None
