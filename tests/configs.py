"""The service as the tests build it: bare, unless a test says otherwise.

:class:`~worker.service.ServiceConfig` defaults to the settings' documented defaults (bursts wait 1.5 s, a drain
hands back after 100 turns or a second, a dead-lettered message gets an apology). Most tests want the service alone:
no burst wait, no drain bound, no apology, status webhooks off, no budget reply, no system prompt. ``bare_config``
builds that, taking the service's knobs by flat names (``lease_ms``, ``drain_max_turns``...) and putting each in its
group.
"""

from __future__ import annotations

from typing import Any, Literal

from worker.service import ServiceConfig
from worker.settings import Budget, Burst, Delivery, Drain

BARE_DRAIN = Drain(max_turns=0, max_seconds=0.0, dead_letter_reply="")
BARE_DELIVERY = Delivery(status_webhooks=False)
BARE_BUDGET = Budget(token_budget_reply="")

_DRAIN = {"max_attempts": "max_attempts", "max_model_retries": "max_model_retries",
          "max_bad_response_retries": "max_bad_response_retries", "max_retry_delay": "max_retry_delay",
          "drain_max_turns": "max_turns", "drain_max_seconds": "max_seconds", "dead_letter_reply": "dead_letter_reply"}
_DELIVERY = {"delivery_max_attempts": "max_attempts", "delivery_part_interval": "part_interval",
             "deliver_inline": "deliver_inline"}
_BUDGET = {"daily_token_budget": "daily_token_budget", "token_budget_reply": "token_budget_reply"}


def bare_burst(quiet: float = 0.0, max_wait: float = 8.0, max_messages: int = 20, merge: bool = False,
               max_merges: int = 2, reads_images: bool = False) -> Burst:
    """A burst policy by the names the drain reads (``quiet`` 0: no coalescing)."""
    double_text: Literal["queue", "merge"] = "merge" if merge else "queue"
    return Burst(quiet_seconds=quiet, max_wait_seconds=max_wait, max_messages=max_messages, double_text=double_text,
                 double_text_max_merges=max_merges, reads_images=reads_images)


def bare_config(*, lease_ms: int | None = None, resend_grace_ms: int | None = None,
                status_webhooks: bool | None = False, burst: Burst | None = None, **knobs: Any) -> ServiceConfig:
    """The bare service with ``knobs`` changed (``system_prompt``, ``record``, ``model_name``, ``max_hold_ms`` as
    ServiceConfig takes them; the rest by flat name, put in their group)."""
    drain = {_DRAIN[k]: knobs.pop(k) for k in list(knobs) if k in _DRAIN}
    delivery: dict[str, Any] = {_DELIVERY[k]: knobs.pop(k) for k in list(knobs) if k in _DELIVERY}
    budget = {_BUDGET[k]: knobs.pop(k) for k in list(knobs) if k in _BUDGET}
    if lease_ms is not None:
        drain["lease_seconds"] = lease_ms / 1000
    if resend_grace_ms is not None:
        delivery["resend_grace_seconds"] = resend_grace_ms / 1000
    delivery["status_webhooks"] = "auto" if status_webhooks is None else status_webhooks
    return ServiceConfig(drain=BARE_DRAIN.model_copy(update=drain), delivery=BARE_DELIVERY.model_copy(update=delivery),
                         budget=BARE_BUDGET.model_copy(update=budget), burst=burst or bare_burst(), **knobs)
