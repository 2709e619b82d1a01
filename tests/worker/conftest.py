from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import fakeredis
import pytest

from tests.configs import bare_config
from worker import Chat, KeepLastExchanges, ScriptedModel
from worker.client import ConversationClient
from worker.conversation.model import ModelRequest
from worker.service import ConversationService, ServiceConfig
from worker.store.redis_store import ConversationStore, StoreLimits
from worker.testing import RecordingChannel

# The service method each wake-up kind runs (what tasks/conversation.py's tasks call).
_ENTRY = {"drain": "drain", "deliver": "deliver", "compact": "queue_compaction"}


@dataclass
class Harness:
    """The service with an in-memory Redis, a scripted model and a recording channel; wake-ups are queued
    and run by hand (``run()``), like a Celery worker would."""

    store: ConversationStore
    model: ScriptedModel
    channel: RecordingChannel
    service: ConversationService
    client: ConversationClient
    woken: list[tuple[str, str]] = field(default_factory=list)
    scheduled: list[tuple[str, str, float]] = field(default_factory=list)  # every wake: kind, id, countdown

    def run(self, max_steps: int = 10_000, *, defer: tuple[str, ...] = ()) -> list[tuple[str, str]]:
        """Run queued wake-ups until none is left; kinds in ``defer`` are set aside and returned."""
        steps = 0
        deferred: list[tuple[str, str]] = []
        while self.woken and steps < max_steps:
            kind, cid = self.woken.pop(0)
            if kind in defer:
                deferred.append((kind, cid))
                continue
            getattr(self.service, _ENTRY[kind])(cid)
            steps += 1
        return deferred


def make_harness(model: ScriptedModel | None = None, *, compactor: object = None, config: ServiceConfig | None = None,
                 channel: object = None, redis_client: object = None, limits: StoreLimits | None = None,
                 **chat_kw: object) -> Harness:
    r = redis_client if redis_client is not None else fakeredis.FakeRedis(server=fakeredis.FakeServer())
    store = ConversationStore(r, prefix=f"h{uuid.uuid4().hex[:6]}", limits=limits or StoreLimits())
    model = model or ScriptedModel(default=lambda req: "ack:" + req.messages[-1].content)
    chat = Chat(model=model, compactor=compactor, auto_compact=False, **chat_kw)  # type: ignore[arg-type]
    ch = channel or RecordingChannel()
    woken: list[tuple[str, str]] = []
    scheduled: list[tuple[str, str, float]] = []

    def wake(kind: str, cid: str, *, countdown: float = 0.0) -> None:
        woken.append((kind, cid))
        scheduled.append((kind, cid, countdown))

    svc = ConversationService(store, chat, ch, wake, config or bare_config(system_prompt="You are a test."))
    client = ConversationClient(store, lambda cid: woken.append(("drain", cid)))
    return Harness(store, model, ch, svc, client, woken, scheduled)  # type: ignore[arg-type]


@pytest.fixture
def harness_factory() -> Callable[..., Harness]:
    return make_harness


__all__ = ["Harness", "KeepLastExchanges", "make_harness"]


def echo_all(req: ModelRequest) -> str:
    """Answer with every message of the turn (what a burst or an answered event shows the model) after the last
    assistant one, as ``role:text`` joined by `` | ``."""
    tail: list[str] = []
    for m in reversed(req.messages):
        if m.role == "assistant":
            break
        tail.insert(0, f"{m.role}:{m.content}")
    return " | ".join(tail)
