"""The archive in the store, on every backend: the commit that takes messages out of the history appends their batch
and index segment in the same fenced step (a refused commit writes none, a landed one cannot land twice), the bound
drops the oldest batches with their segments, the idle TTL covers both keys and a delete or an erase takes them."""

from __future__ import annotations

import pytest
import redis

from worker.conversation.messages import Message
from worker.conversation.recall.codec import decode_archive
from worker.conversation.recall.index import SearchIndex
from worker.errors import StaleLeaseError
from worker.service.drain.archiving import archive_write
from worker.store.redis_store import ConversationStore, StoreLimits
from worker.store.script_args import NO_ARCHIVE, ArchiveWrite

CID = "447700900444"


def _said(seq: int, text: str) -> Message:
    return Message(role="user", content=text, seq=seq)


def _write(*texts: str, first: int = 1) -> ArchiveWrite:
    return archive_write(CID, [_said(first + i, t) for i, t in enumerate(texts)])


def _commit(store: ConversationStore, n: int, archive: ArchiveWrite = NO_ARCHIVE) -> None:
    store.accept(CID, f"p{n}".encode(), f"id-{n}")
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None
    store.commit(CID, begin.token, expected_version=begin.snapshot.version, input_id=f"id-{n}",
                 new_state=f"s{n}".encode(), archive=archive)


def _archived(client: redis.Redis, store: ConversationStore) -> list[str]:
    return [m.text for m in decode_archive(b"".join(client.lrange(store.keys(CID).recall, 0, -1)))]


def test_a_commit_archives_its_batch_once_and_a_refused_one_nothing(store: ConversationStore,
                                                                    client: redis.Redis) -> None:
    _commit(store, 0, _write("the lantern is under the bridge"))
    store.accept(CID, b"p1", "id-1")
    begin = store.begin(CID, 10_000)
    assert begin.snapshot is not None
    again = dict(expected_version=begin.snapshot.version, input_id="id-1", new_state=b"s1",
                 archive=_write("meet at the mill", first=2))
    store.commit(CID, begin.token, **again)  # type: ignore[arg-type]
    with pytest.raises(StaleLeaseError):  # the same commit retried after it landed (a crash before the ack)
        store.commit(CID, begin.token, **again)  # type: ignore[arg-type]
    with pytest.raises(StaleLeaseError):  # a fenced-out worker's (another took the conversation over)
        store.commit(CID, begin.token - 1, **again)  # type: ignore[arg-type]
    assert _archived(client, store) == ["the lantern is under the bridge", "meet at the mill"]
    segments = client.lrange(store.keys(CID).recall_index, 0, -1)
    assert len(segments) == 2 and SearchIndex.from_bytes(segments[1]).rank("mill", 5) == [0]


def test_the_bound_keeps_the_newest_batches_with_their_segments(client: redis.Redis, prefix: str) -> None:
    writes = [_write(f"message number {n} " + "x" * 20, first=n + 1) for n in range(6)]
    bound = sum(len(w.batch) for w in writes[-3:])  # the last three fit exactly, four do not
    s = ConversationStore(client, prefix=prefix, limits=StoreLimits(recall_max_bytes=bound))
    for n in range(6):
        s.accept(CID, b"p", f"id-{n}")
        begin = s.begin(CID, 10_000)
        assert begin.snapshot is not None
        s.commit(CID, begin.token, expected_version=begin.snapshot.version, input_id=f"id-{n}", new_state=b"s",
                 archive=writes[n])
    kept = _archived(client, s)
    assert [t.split()[2] for t in kept] == ["3", "4", "5"]
    assert client.llen(s.keys(CID).recall_index) == 3
    assert sum(len(b) for b in client.lrange(s.keys(CID).recall, 0, -1)) == int(client.hget(s.keys(CID).state,
                                                                                            "rbytes") or 0)
    s.delete(CID)


def test_an_erase_takes_the_archive_and_a_delete_too(store: ConversationStore, client: redis.Redis) -> None:
    k = store.keys(CID)
    _commit(store, 0, _write("a secret"))
    _commit(store, 1, ArchiveWrite(erase=True))
    assert not client.exists(k.recall) and not client.exists(k.recall_index)
    assert client.hget(k.state, "rbytes") is None
    _commit(store, 2, _write("another"))
    assert _archived(client, store) == ["another"]
    store.delete(CID)
    assert not client.exists(k.recall) and not client.exists(k.recall_index)


def test_the_idle_ttl_covers_the_archive(client: redis.Redis, prefix: str) -> None:
    s = ConversationStore(client, prefix=prefix, limits=StoreLimits(idle_ttl_ms=60_000))
    s.accept(CID, b"x", "id-0")
    begin = s.begin(CID, 10_000)
    assert begin.snapshot is not None
    s.commit(CID, begin.token, expected_version=begin.snapshot.version, input_id="id-0", new_state=b"s",
             archive=_write("kept a while"))
    assert 0 < client.pttl(s.keys(CID).recall) <= 60_000 and 0 < client.pttl(s.keys(CID).recall_index) <= 60_000
    s.delete(CID)


def test_recall_off_writes_nothing_but_still_erases() -> None:
    assert archive_write(CID, [_said(1, "hello")], on=False) == NO_ARCHIVE
    assert archive_write(CID, [_said(1, "hello")], on=False, erase=True) == ArchiveWrite(erase=True)


def test_a_batch_over_the_bound_keeps_its_newest_messages() -> None:
    texts = [f"{n} " + "".join(chr(0x4E00 + (n * 37 + i) % 2000) for i in range(60)) for n in range(20)]
    write = archive_write(CID, [_said(i + 1, t) for i, t in enumerate(texts)], max_bytes=600)
    kept = [m.text for m in decode_archive(write.batch)]
    assert 0 < len(kept) < 20 and kept == texts[-len(kept):] and len(write.batch) <= 600
