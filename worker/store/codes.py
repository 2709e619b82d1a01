"""The codes the Lua scripts answer with in their first element, named (``include/codes.lua`` holds the same
numbers for the scripts; tests/store/test_lua_files.py keeps the two in step), and the one place that maps a
refusal to what the store's caller sees."""

from __future__ import annotations

from enum import IntEnum

from worker.errors import StaleLeaseError


class Refusal(IntEnum):
    """A fenced script changed nothing."""

    FENCE_MOVED = -1  # another worker took a newer token on the fence (the lease was taken over)
    VERSION_MOVED = -2  # the state's version is not the one the caller read
    NOT_HEAD = -3  # the input (or reply) is no longer at the head of its list
    JOURNAL_FULL = -4  # the turn journal is at its bound; the entry was not kept (not an error: the turn goes on)


class Idle(IntEnum):
    """No lease taken by BEGIN or by a delivery's start (a positive code there is the new token)."""

    EMPTY = 0
    BUSY = -1
    HELD = -2


class AcceptCode(IntEnum):
    """ACCEPT's answer (and SCHEDULE's)."""

    ACCEPTED = 1
    DUPLICATE = 0
    FULL = -1


def refused(code: int, *, cid: str, lease: str = "lease", step: str = "", item: str = "",
            version: int = 0) -> StaleLeaseError:
    """The error for a refusal ``code`` (a :class:`Refusal`) of a script run on ``cid``.

    ``lease``: what was taken over when the fence moved ("lease", "delivery lease", "delivery of r1"); ``step``: the
    step refused, named in the message; ``item``: the input whose turn it was (a mailbox refusal names it when it
    left the head; outbox refusals name the reply in ``lease``); ``version``: the current version (VERSION_MOVED).
    """
    refusal = Refusal(code)
    suffix = f"; {step} refused" if step else ""
    if refusal is Refusal.VERSION_MOVED:
        return StaleLeaseError(f"state of {cid} moved to version {version}{suffix}")
    if refusal is Refusal.NOT_HEAD and item:
        return StaleLeaseError(f"input {item} of {cid} is no longer at the head of the mailbox")
    return StaleLeaseError(f"{lease} on {cid} was taken over{suffix}")
