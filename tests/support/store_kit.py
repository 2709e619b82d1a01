"""Test-only paths into the store: the four-call drain cycle (``acquire`` / ``head`` / commit / the release that
keeps the lease when inputs arrived), ``note_attempt``, ``held`` and ``put_state``, and the raw client.

Production drains through ``begin`` and the always-advancing ``commit``; these older, finer steps stay useful to
tests that stage a race (a lease that runs out between the read and the commit, a producer pushing while the
drainer releases), so they live here, over the store's own keys and client, and not in the store's API.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from worker.errors import StaleLeaseError
from worker.store.lua import NEXT_TOKEN
from worker.store.redis_store import ConversationStore, Snapshot, split_entry

# KEYS: lease, fence   ARGV: lease_ms -> the new token, or 0 when the lease is held
_ACQUIRE = NEXT_TOKEN + """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = next_token(KEYS[2])
redis.call('SET', KEYS[1], t, 'PX', ARGV[1])
return t
"""

# KEYS: inbox, state, blob -> {head entry, blob (joined), version}
_HEAD = """
local head = redis.call('LINDEX', KEYS[1], 0)
local s = redis.call('HMGET', KEYS[2], 'blob', 'version')
local parts = redis.call('LRANGE', KEYS[3], 0, -1)
return {head, #parts > 0 and table.concat(parts) or s[1], s[2] or '0'}
"""

# KEYS: fence, attempts   ARGV: token, field -> attempts so far, or -1 when the fence moved
_NOTE_ATTEMPT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
return redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
"""

# KEYS: fence, lease, inbox   ARGV: token -> 1 ("keep draining") when inputs arrived while we were finishing:
# the producer who pushed saw our lease and did not start a drain, so giving the lease up would strand it.
_RELEASE_UNLESS_MORE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('LLEN', KEYS[3]) > 0 then return 1 end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 0
"""

# KEYS: state, blob   ARGV: expected_version, blob ('' clears), tag -> {new version, 0} or {-2, current version}
_PUT_STATE = """
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return {-2, v} end
redis.call('HDEL', KEYS[1], 'blob')
redis.call('DEL', KEYS[2])
if ARGV[2] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  redis.call('HSET', KEYS[1], 'tag', ARGV[3], 'blen', #ARGV[2])
else redis.call('HDEL', KEYS[1], 'tag', 'blen') end
redis.call('HSET', KEYS[1], 'version', v + 1)
return {v + 1, 0}
"""


@dataclass(frozen=True)
class Lease:
    cid: str
    token: int


def raw(store: ConversationStore) -> Any:
    """The store's own client, for tests that inspect or age keys directly."""
    return store._client


def settled(store: ConversationStore, cid: str) -> bool:
    """Nothing is left to happen to ``cid`` until a new input comes: no input waiting, no reply waiting to go out,
    no drain or delivery under way (neither lease held). A test that checks something did NOT happen (a reply sent
    twice) checks it once this holds, not after a guessed pause."""
    k = store.keys(cid)
    return store.inbox_depth(cid) == 0 and store.outbox_depth(cid) == 0 and not raw(store).exists(k.lease, k.dlease)


class StoreKit:
    """The test-only steps, over ``store``'s client and keys."""

    def __init__(self, store: ConversationStore) -> None:
        self.store = store
        self.r = raw(store)
        s = self.r.register_script
        self._acquire, self._head, self._attempt = s(_ACQUIRE), s(_HEAD), s(_NOTE_ATTEMPT)
        self._release, self._put = s(_RELEASE_UNLESS_MORE), s(_PUT_STATE)

    def acquire(self, cid: str, lease_ms: int) -> Lease | None:
        """Take the conversation's lease, or ``None`` when another worker holds it."""
        k = self.store.keys(cid)
        token = int(self._acquire(keys=[k.lease, k.fence], args=[lease_ms]))
        return Lease(cid, token) if token > 0 else None

    def head(self, cid: str) -> Snapshot:
        """The next input and the current state."""
        k = self.store.keys(cid)
        entry, blob, version = self._head(keys=[k.inbox, k.state, k.blob])
        if entry is None:
            return Snapshot(None, None, blob, int(version))
        input_id, payload = split_entry(entry)
        return Snapshot(payload, input_id, blob, int(version))

    def note_attempt(self, cid: str, token: int, input_id: str) -> int:
        """Count an attempt at ``input_id`` under the lease, as ``begin`` does at the head."""
        k = self.store.keys(cid)
        n = int(self._attempt(keys=[k.fence, k.attempts], args=[token, input_id]))
        if n < 0:
            raise StaleLeaseError(f"lease on {cid} was taken over")
        return n

    def release_unless_more(self, cid: str, token: int) -> bool:
        """Give the lease up unless inputs wait; ``True`` (lease kept) means the caller must keep draining."""
        k = self.store.keys(cid)
        return int(self._release(keys=[k.fence, k.lease, k.inbox], args=[token])) == 1

    def held(self, cid: str) -> bool:
        return bool(self.r.exists(self.store.keys(cid).hold))

    def put_state(self, cid: str, *, expected_version: int, new_state: bytes | None) -> int:
        """Compare-and-set the state. Raises :class:`StaleLeaseError` on a version mismatch."""
        code, extra = self._put(keys=[self.store.keys(cid).state, self.store.keys(cid).blob],
                                args=[expected_version, new_state or b"", f"kit:{uuid.uuid4().hex}"])
        if int(code) < 0:
            raise StaleLeaseError(f"state of {cid} is at version {int(extra)}, not {expected_version}")
        return int(code)
