"""The Lua scripts, one file per script in this folder, loaded once at import.

Each script touches only the keys of one conversation (one hash tag), so each runs atomically on a standalone Redis
and on a Cluster. One script per job; each has one wrapper in :mod:`worker.store.scripts` that names its arguments
and parses its result. Every script returns an array of one fixed shape (fields that do not apply are padded with
``false`` or 0), so the parser never guesses from the length. A negative first element is a refusal (the codes of
``include/codes.lua``, named for Python by :mod:`worker.store.codes`).

A script file starts with its signature: a header comment naming its KEYS and ARGV in order and what it returns,
then the ``--! include NAME`` lines of the fragments it uses, then every key and argument bound to a named local
(``local fence = KEYS[1]``; a list of variable length as ``local rest = tail(KEYS, 5)``). Nothing below that reads
KEYS or ARGV (tests/store/test_lua_files.py checks every file).

The include mechanism: ``--! include NAME`` (alone on its line) is replaced, when the scripts are loaded, by the
text of ``include/NAME.lua``, itself resolved the same way. A fragment comes in once per script, at its first
include; later includes of it, direct or through another fragment, add nothing. Redis thus still receives one
self-contained script per call (EVALSHA and the fast path of :mod:`worker.store.fast_scripts` are unchanged), and a
fragment defines local functions and constants only.
"""

from __future__ import annotations

import re
from importlib.resources import files
from importlib.resources.abc import Traversable

_INCLUDE = re.compile(r"^--! include ([a-z_][a-z0-9_]*)[ \t]*$", re.MULTILINE)
_HERE: Traversable = files(__name__)


def _read(folder: Traversable, name: str) -> str:
    return folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")


def resolve(text: str, seen: set[str] | None = None, chain: tuple[str, ...] = ()) -> str:
    """``text`` with its ``--! include`` lines replaced by the fragments' resolved text, each fragment once."""
    done = set() if seen is None else seen

    def expand(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in chain:
            raise ValueError(f"Lua include cycle: {' -> '.join((*chain, name))}")
        if name in done:
            return f"-- (include {name}: above)"
        done.add(name)
        return resolve(_read(_HERE / "include", name), done, (*chain, name)).rstrip("\n")

    return _INCLUDE.sub(expand, text)


def load(name: str) -> str:
    """The script ``NAME.lua`` of this folder, its includes resolved: the text Redis receives."""
    return resolve(_read(_HERE, name))


def fragment(name: str) -> str:
    """The fragment ``include/NAME.lua``, resolved: for test-only scripts built on the same helpers."""
    return resolve(f"--! include {name}\n")


def script_names() -> list[str]:
    """The names of every script file in this folder (fragments excluded)."""
    return sorted(p.name.removesuffix(".lua") for p in _HERE.iterdir() if p.is_file() and p.name.endswith(".lua"))


SCRIPTS: dict[str, str] = {name: load(name) for name in script_names()}

ACCEPT = SCRIPTS["accept"]
BEGIN = SCRIPTS["begin"]
DEFER = SCRIPTS["defer"]
COMMIT = SCRIPTS["commit"]
RECORD_STEP = SCRIPTS["record_step"]
RELEASE = SCRIPTS["release"]
RENEW_LEASE = SCRIPTS["renew_lease"]
NOTE_RETRY = SCRIPTS["note_retry"]
QUARANTINE = SCRIPTS["quarantine"]
MARK_INFLIGHT = SCRIPTS["mark_inflight"]
CLEAR_INFLIGHT = SCRIPTS["clear_inflight"]
MARK_SENT = SCRIPTS["mark_sent"]
BEGIN_DELIVERY = SCRIPTS["begin_delivery"]
CLAIM_NEXT = SCRIPTS["claim_next"]
SENT_LAST_CLAIM_NEXT = SCRIPTS["sent_last_claim_next"]
DEAD_REPLY = SCRIPTS["dead_reply"]
NOTE_DELIVERY_FAILURE = SCRIPTS["note_delivery_failure"]
REPLAY = SCRIPTS["replay"]
ZREM_IF_SCORE = SCRIPTS["zrem_if_score"]
DELETE_KEEPING_TOMBSTONE = SCRIPTS["delete_keeping_tombstone"]
RECORD_STATUS = SCRIPTS["record_status"]
INFLIGHT_OUTCOME = SCRIPTS["inflight_outcome"]
PACE = SCRIPTS["pace"]
SCHEDULE = SCRIPTS["schedule"]
CANCEL_TIMER = SCRIPTS["cancel_timer"]
FIRE_TIMERS = SCRIPTS["fire_timers"]
SET_IF_SCORE = SCRIPTS["set_if_score"]
KEEP_CONTEXT = SCRIPTS["keep_context"]
READ_STATE = SCRIPTS["read_state"]

NEXT_TOKEN = fragment("next_token")  # tests/support/store_kit.py builds its test-only scripts on it
