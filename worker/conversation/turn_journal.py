"""The turn journal: what a turn's tool loop already did, so a retried turn does not do it twice.

A turn that crashed after a tool call (SIGKILL, lost lease, redelivery) is run again from the same state. A side-
effecting tool must not see the same call twice, and a fresh model call would not help: models are not
deterministic, so a new call would bring new call ids and new arguments. So the loop records, before the model sees
a result, each model round that asked for tools and each tool result; a retried turn replays the recorded rounds
instead of calling the model, uses the recorded results instead of calling the tools, and goes on live after the
last recorded step. A call whose result was not recorded (the crash fell inside the tool call) runs again with the
same call id, so an idempotency key derived from it is the same too.

The core does no I/O: :class:`TurnJournal` is injected (the worker's is backed by Redis, written under the
conversation's fenced lease); the library's default is no journal. Entries are msgpack (never pickle): the
codecs here turn a round or a result into bytes and back, and a record that does not decode is treated as absent
(the turn goes on live from there) rather than failing the turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import msgpack

from worker.conversation.messages import Message
from worker.conversation.model import ModelResponse, Usage
from worker.conversation.state_decode import decode_message
from worker.conversation.state_encode import encode_message, encode_usage
from worker.errors import StateDecodeError

_FINISH = frozenset({"stop", "tool_calls", "length", "content_filter", "refusal", "other"})


class TurnJournal(Protocol):
    """What one turn (one input) has recorded, and how to record more.

    ``step`` numbers the model rounds of the turn from 0. :meth:`recorded_rounds` lists the recorded rounds in
    step order, without gaps (a round is recorded before its tools run, so a later step implies the earlier
    ones); :meth:`recorded_results` maps ``(step, call id)`` to the recorded result message. The record methods
    return only once the entry is durable; they raise (e.g. :class:`~worker.errors.StaleLeaseError`) when the
    turn may no longer write, which ends the turn before the model sees anything unrecorded.
    """

    def recorded_rounds(self) -> Sequence[ModelResponse]: ...

    def recorded_results(self) -> Mapping[tuple[int, str], Message]: ...

    def record_round(self, step: int, response: ModelResponse) -> None: ...

    def record_result(self, step: int, result: Message) -> None: ...


class NoJournal:
    """The default: nothing recorded, nothing kept (a library turn that crashes is simply run again)."""

    def recorded_rounds(self) -> Sequence[ModelResponse]:
        return ()

    def recorded_results(self) -> Mapping[tuple[int, str], Message]:
        return {}

    def record_round(self, step: int, response: ModelResponse) -> None:
        return None

    def record_result(self, step: int, result: Message) -> None:
        return None


def encode_round(response: ModelResponse) -> bytes:
    """A model round as the provider returned it: the assistant message (with its wire form), finish and usage."""
    body = {"m": encode_message(response.message), "f": response.finish_reason, "u": encode_usage(response.usage),
            "rf": response.raw_finish_reason, "model": response.model}
    return bytes(msgpack.packb(body, use_bin_type=True))


def decode_round(data: bytes) -> ModelResponse:
    """The inverse of :func:`encode_round`; raises :class:`~worker.errors.StateDecodeError` on anything else."""
    fields = _unpack(data)
    message = decode_message(fields.get("m"))
    finish, usage, raw_finish, model = fields.get("f"), fields.get("u"), fields.get("rf"), fields.get("model")
    if message.role != "assistant" or finish not in _FINISH:
        raise StateDecodeError("invalid", "journal round is not an assistant answer")
    if usage is not None and not (isinstance(usage, list) and len(usage) == 4 and all(type(x) is int for x in usage)):
        raise StateDecodeError("invalid", "journal round has a bad usage")
    if not all(x is None or isinstance(x, str) for x in (raw_finish, model)):
        raise StateDecodeError("invalid", "journal round has a bad finish reason or model")
    return ModelResponse(message=message, finish_reason=finish, usage=Usage(*usage) if usage else None,
                         raw_finish_reason=raw_finish, model=model)


def encode_result(result: Message) -> bytes:
    """A tool result message (``role="tool"``)."""
    return bytes(msgpack.packb(encode_message(result), use_bin_type=True))


def decode_result(data: bytes) -> Message:
    """The inverse of :func:`encode_result`; raises :class:`~worker.errors.StateDecodeError` on anything else."""
    message = decode_message(_unpack(data))
    if message.role != "tool" or not message.tool_call_id:
        raise StateDecodeError("invalid", "journal result is not a tool result")
    return message


def _unpack(data: bytes) -> Any:
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises many types; all of them mean "corrupt"
        raise StateDecodeError("invalid", f"journal entry does not decode: {exc}") from exc
    if not isinstance(value, dict):
        raise StateDecodeError("invalid", "journal entry is not a map")
    return value
