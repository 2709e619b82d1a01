"""Keeping states decoded between turns (worker.conversation.resident): a turn on a state this worker wrote
decodes nothing, and a worker never answers from a state another worker has since replaced."""

from __future__ import annotations

import itertools

import fakeredis
import pytest

from tests.configs import bare_config
from worker import Chat, ScriptedModel
from worker.client import ConversationClient
from worker.conversation import chat as chat_module
from worker.conversation.model import ModelRequest
from worker.conversation.resident import ResidentCache
from worker.service import ConversationService
from worker.store.redis_store import ConversationStore
from worker.testing import RecordingChannel

CID = "447700900999"


def _history(req: ModelRequest) -> str:
    """The model answers with what it was shown, so a test can tell which state a turn started from."""
    return "|".join(m.content for m in req.messages if m.role == "user")


def _workers(n: int, *, cache_bytes: int = 64 << 20) -> tuple[ConversationClient, list[ConversationService],
                                                               RecordingChannel]:
    """``n`` services over one store, as ``n`` worker processes would be; each keeps its own residents."""
    store = ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="r")
    channel = RecordingChannel()
    services = [ConversationService(store, Chat(model=ScriptedModel(default=_history), auto_compact=False), channel,
                                    lambda *a, **k: None, bare_config(), residents=ResidentCache(cache_bytes))
                for _ in range(n)]
    return ConversationClient(store, lambda cid: None), services, channel


def _decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = chat_module.load_state

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(chat_module, "load_state", counting)
    return calls


def test_a_turn_on_the_state_this_worker_wrote_decodes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    client, (worker,), channel = _workers(1)
    decodes = _decodes(monkeypatch)
    for i in range(5):
        client.send_message(CID, f"m{i}", message_id=f"id-{i}")
        worker.drain(CID)
    assert channel.sent[-1][1] == "m0|m1|m2|m3|m4"
    assert len(decodes) == 1  # the first turn's (no state yet); the other four took the state kept decoded
    assert len(worker.residents) == 1


def test_a_worker_never_answers_from_a_state_another_worker_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    client, (a, b), channel = _workers(2)
    decodes = _decodes(monkeypatch)
    client.send_message(CID, "m0", message_id="id-0")
    a.drain(CID)  # a keeps the state after m0
    client.send_message(CID, "m1", message_id="id-1")
    b.drain(CID)  # b writes the state after m1
    client.send_message(CID, "m2", message_id="id-2")
    a.drain(CID)  # a's kept state is stale: the store must send b's
    assert [text for _, text, _ in channel.sent] == ["m0", "m0|m1", "m0|m1|m2"]
    assert len(decodes) == 3  # the first turn, b's (it held nothing), a's stale one
    client.send_message(CID, "m3", message_id="id-3")
    a.drain(CID)  # now a holds the latest again
    assert channel.sent[-1][1] == "m0|m1|m2|m3" and len(decodes) == 3


def test_events_and_resets_keep_the_kept_state_right() -> None:
    client, (a, b), channel = _workers(2)
    client.send_message(CID, "m0", message_id="id-0")
    a.drain(CID)
    client.send_event(CID, "event on b", message_id="e-1")
    b.drain(CID)
    client.reset(CID)
    a.drain(CID)  # a applies the reset: nothing kept
    assert len(a.residents) == 0
    client.send_message(CID, "after reset", message_id="id-2")
    b.drain(CID)  # b held the state with the event, which the reset cleared
    assert channel.sent[-1][1] == "after reset"


def test_without_room_to_keep_states_every_turn_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    client, (worker,), channel = _workers(1, cache_bytes=0)
    decodes = _decodes(monkeypatch)
    for i in range(3):
        client.send_message(CID, f"m{i}", message_id=f"id-{i}")
        worker.drain(CID)
    assert channel.sent[-1][1] == "m0|m1|m2" and len(decodes) == 3 and len(worker.residents) == 0


def test_the_cache_keeps_the_most_recently_used_within_its_bytes() -> None:
    client, (worker,), _ = _workers(1)
    worker.residents.max_bytes = 3 * 4100  # about three of these conversations (4,001 bytes each)
    for i in range(6):
        cid = f"44770090{i:04d}"
        client.send_message(cid, "a message of some length " * 2, message_id=f"id-{i}")
        worker.drain(cid)
    assert len(worker.residents) == 3 and worker.residents.bytes <= 3 * 4100
    assert worker.residents.entry("447700900005") is not None  # the newest stays
    assert worker.residents.entry("447700900000") is None  # the oldest went first


def test_turns_append_to_the_stored_blob_whichever_worker_runs_them() -> None:
    """A turn writes what it adds (issue 33): after the first write each turn's stored blob is the one before with
    bytes appended, whether the worker held the state decoded or was sent it (another worker wrote it), and the
    blob decodes to the whole history."""
    from worker.conversation.state import decode_state

    client, (a, b), channel = _workers(2)
    blobs: list[bytes] = []
    for i, worker in enumerate((a, a, b, a, b, b)):
        client.send_message(CID, f"m{i}", message_id=f"id-{i}")
        worker.drain(CID)
        blob = a.store.read_state(CID).blob
        assert blob is not None
        blobs.append(blob)
    assert all(later.startswith(earlier) and len(later) > len(earlier) for earlier, later in itertools.pairwise(blobs))
    assert channel.sent[-1][1] == "m0|m1|m2|m3|m4|m5"
    assert [m.content for m in decode_state(blobs[-1]).messages if m.role == "user"] == [f"m{i}" for i in range(6)]


def test_loose_frames_fold_into_runs_whichever_worker_runs_the_turn() -> None:
    """Format 5: once the loose frames reach FOLD_AT bytes, a turn replaces them with one compressed run; the store
    keeps the bytes before the cut and takes the run, whether the worker held the state decoded (its resident says
    what it folded) or was sent the blob; every turn still writes less than a run, and the blob decodes to the whole
    history."""
    from worker.conversation.state import FOLD_AT, decode_state, decode_with_memo

    client, (a, b), channel = _workers(2)
    sent: list[int] = []
    real = a.store._scripts.commit  # type: ignore[attr-defined]

    def commit(**kw: object) -> object:
        sent.append(len(kw["blob"]))  # type: ignore[arg-type]
        return real(**kw)

    a.store._scripts.commit = commit  # type: ignore[attr-defined]  # one store: both workers' commits
    said = [f"message {i}: " + " ".join(f"w{i * 13 + j}" for j in range(40)) for i in range(60)]
    folds = 0
    for i, worker in enumerate(itertools.islice(itertools.cycle((a, a, b, a, b, b, b)), 60)):
        before = decode_with_memo(a.store.read_state(CID).blob) if i else None
        client.send_message(CID, said[i], message_id=f"id-{i}")
        worker.drain(CID)
        blob = a.store.read_state(CID).blob
        assert blob is not None
        if before is not None and not blob.startswith(before.stored):  # a fold: the bytes before the loose ones stay
            folds += 1
            assert blob[:before.loose] == before.stored[:before.loose]
    assert folds >= 3 and max(sent[1:]) < FOLD_AT
    history = decode_state(blob).messages
    assert [m.content for m in history if m.role == "user"] == said
    assert history[-1].content == "|".join(said)  # the last turn's model was shown every message
    assert channel.sent and sum(len(m.content) for m in history) > 1.5 * len(blob)  # less than its texts, in Redis
