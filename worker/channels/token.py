"""Whether WhatsApp accepts the access token, as this process's sends and photo fetches last saw it.

A rejected token (error code 190, or a 401 without a code) is the operator's mistake, not the replies': the
deliverer and the drain hold their work and retry it with backoff instead of dead-lettering it (see
:mod:`worker.service.deliver.deliverer` and :mod:`worker.service.drain.media`). This module keeps the one signal an alert
watches: the gauge ``parley_whatsapp_token_rejected{phone_number_id}`` and one log line per change of state
(rejected, accepted again), however many replies and photos hit the refusal meanwhile. Each business number has its
own state (:func:`for_number`), shared by its sender and its photo fetcher, and its own gauge series: with several
numbers (:mod:`worker.settings.business_numbers`) the alert names the number whose token to fix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from worker import metrics

log = logging.getLogger("parley.delivery")

#: Logged once when the token starts being refused (an alert may match it).
REJECTED_LOG = "WhatsApp rejects the access token"
#: Logged once when a call is accepted again after refusals.
ACCEPTED_LOG = "WhatsApp accepts the access token again"


class TokenHealth:
    """The token's state for this process: ``refused`` after a call the API refused for the token, ``accepted``
    after a call it answered (cheap when nothing changed: one attribute read)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, name: str = "WHATSAPP_ACCESS_TOKEN",
                 phone_number_id: str = "") -> None:
        self.clock = clock
        self.name = name  # what the operator fixes, in the log line (one number's token of several)
        self.phone_number_id = phone_number_id
        if phone_number_id:  # a number's series is there from the start (0), for dashboards and absent() alerts
            self._alarm(0)
        self.rejected_since: float | None = None
        self.refusals = 0
        self._lock = threading.Lock()

    def refused(self, what: str, detail: str) -> int:
        """Count one refusal of ``what`` (``send`` or ``media``); returns the refusals in a row so far."""
        metrics.WHATSAPP_TOKEN_REFUSALS.labels(what).inc()
        with self._lock:
            self.refusals += 1
            refusals, first = self.refusals, self.rejected_since is None
            if first:
                self.rejected_since = self.clock()
        if first:
            self._alarm(1)
            log.error("%s (%s): replies and photo fetches are held and retried with backoff, nothing is "
                      "dead-lettered, until %s is fixed", REJECTED_LOG, detail, self.name,
                      extra={"what": what, "error": detail, "phone_number_id": self.phone_number_id})
        return refusals

    def _alarm(self, value: int) -> None:
        # Looked up when it changes (rarely): a state never refused adds no series with an empty number.
        metrics.WHATSAPP_TOKEN_REJECTED.labels(self.phone_number_id).set(value)

    def accepted(self) -> None:
        """The API answered a call with the token: clear the alarm if it was raised."""
        if self.rejected_since is None:
            return
        with self._lock:
            since, refusals = self.rejected_since, self.refusals
            if since is None:
                return
            self.rejected_since, self.refusals = None, 0
        self._alarm(0)
        log.warning("%s after %.0f s and %d refusals: held replies and photos resume", ACCEPTED_LOG,
                    self.clock() - since, refusals, extra={"refusals": refusals})


TOKEN = TokenHealth()
"""The token state of a sender or fetcher not told its number (a library caller's): its gauge series has an empty
``phone_number_id``. The worker gives each its number's (:func:`for_number`)."""

_BY_NUMBER: dict[str, TokenHealth] = {}
_BY_NUMBER_LOCK = threading.Lock()


def for_number(phone_number_id: str, *, name: str = "WHATSAPP_ACCESS_TOKEN") -> TokenHealth:
    """The process's token state of business number ``phone_number_id``, made on first use (``name``: the setting
    that holds its token, for the log line): the number's sender and photo fetcher share it, as they share the
    token."""
    with _BY_NUMBER_LOCK:
        health = _BY_NUMBER.get(phone_number_id)
        if health is None:
            health = _BY_NUMBER[phone_number_id] = TokenHealth(name=name, phone_number_id=phone_number_id)
        return health
