"""The key every process of a deployment hashes conversation ids with for its traces, kept in Redis.

Without ``PARLEY_TRACE_ID_KEY`` the first process to need the key creates a random one with ``SET NX`` and every
process reads the same one back: one player is one pseudonym fleet-wide with nothing to configure, and the key is
as secret as the data it hides (whoever reads this Redis reads the conversations themselves).
"""

from __future__ import annotations

import secrets
from typing import Any

from worker.store.keys import GlobalKeys
from worker.store.redis_errors import store_errors


@store_errors
def fleet_trace_key(client: Any, prefix: str) -> bytes:
    """The deployment's trace-id key: the one in Redis, created (32 random bytes) when there is none yet."""
    name = GlobalKeys(prefix).trace_id_key
    client.set(name, secrets.token_hex(32), nx=True)
    stored = client.get(name)
    return bytes.fromhex(stored.decode() if isinstance(stored, bytes) else str(stored))
