"""The trace context as stored: a W3C traceparent in the envelope, the reply record and a part's callback data; an
entry written without one (before tracing, or with it off) still decodes, and a bad one is dropped, never an
error."""

from __future__ import annotations

import msgpack
import pytest

from worker.envelopes.inputs import (
    Envelope,
    ReplyRecord,
    decode_envelope,
    decode_reply,
    parse_part_callback,
    part_callback,
)
from worker.envelopes.trace_context import stored_trace, trace_id, valid_traceparent
from worker.observability.tracing import wanted

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("value", [
    TP, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later-fields"])
def test_a_valid_traceparent_is_kept(value: str) -> None:
    assert valid_traceparent(value) == value


@pytest.mark.parametrize("value", [
    None, 7, "", "garbage", TP.upper(), TP + "-extra",  # version 00 has four fields, lower-case hex
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff is invalid
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero span id
    "00-" + "a" * 200])
def test_an_unusable_traceparent_is_dropped(value: object) -> None:
    assert valid_traceparent(value) is None


def test_the_trace_id_is_read_from_the_traceparent() -> None:
    assert trace_id(TP) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id("nonsense") is None


def test_the_envelope_carries_the_traceparent_and_the_drain_reads_it_before_deciding() -> None:
    env = Envelope(kind="message", conversation_id="447700900123", text="hi", traceparent=TP)
    raw = env.to_bytes()
    assert decode_envelope(raw).traceparent == TP
    assert stored_trace(raw) == (TP, env.accepted_at)


def test_an_envelope_stored_without_a_trace_still_decodes() -> None:
    old = {"v": 1, "kind": "message", "conversation_id": "447700900123", "message_id": "m1", "text": "hi",
           "accepted_at": 1.5}  # what every envelope before tracing held
    raw = msgpack.packb(old, use_bin_type=True)
    assert decode_envelope(raw).traceparent is None
    assert stored_trace(raw) == (None, 1.5)
    # Tracing off: nothing is written, so the bytes are those of an envelope before tracing.
    assert b"traceparent" not in Envelope(kind="message", conversation_id="447700900123", text="hi").to_bytes()


def test_a_bad_stored_trace_is_no_trace_and_the_envelope_still_decodes() -> None:
    raw = Envelope(kind="message", conversation_id="447700900123", text="hi", traceparent="not-a-trace").to_bytes()
    assert decode_envelope(raw).text == "hi"
    assert stored_trace(raw)[0] is None
    assert stored_trace(b"\xc1 not msgpack") == (None, None)
    assert stored_trace(msgpack.packb([1, 2])) == (None, None)


def test_the_reply_record_carries_the_trace_and_an_old_record_decodes() -> None:
    record = ReplyRecord(reply_id="m1", conversation_id="447700900123", recipient="447700900123", parts=["hi"],
                         traceparent=TP)
    assert decode_reply(record.to_bytes()).traceparent == TP
    old = {"v": 1, "reply_id": "m1", "conversation_id": "447700900123", "recipient": "447700900123",
           "parts": ["hi"], "created_at": 1.0}
    assert decode_reply(msgpack.packb(old, use_bin_type=True)).traceparent is None


def test_callback_data_carries_the_send_trace_and_old_callbacks_still_parse() -> None:
    data = part_callback("447700900123", "wamid.a|b", 2, TP)
    assert data == f"447700900123|wamid.a|b|2|{TP}"
    ref = parse_part_callback(data)
    assert ref is not None and (ref.conversation_id, ref.reply_id, ref.part, ref.traceparent) == (
        "447700900123", "wamid.a|b", 2, TP)
    legacy = parse_part_callback("447700900123|wamid.a|b|2")  # sent before tracing, or with it off
    assert legacy is not None and (legacy.reply_id, legacy.part, legacy.traceparent) == ("wamid.a|b", 2, None)
    assert part_callback("447700900123", "m1", 0, None) == "447700900123|m1|0"
    assert part_callback("447700900123", "m1", 0, "bogus") == "447700900123|m1|0"


def test_the_trace_is_left_off_callback_data_it_would_not_fit() -> None:
    reply_id = "r" * (512 - len("447700900123||0") - 10)
    assert part_callback("447700900123", reply_id, 0, TP) == f"447700900123|{reply_id}|0"


@pytest.mark.parametrize(("env", "on"), [
    ({}, False), ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "TRUE "}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "false"}, True)])
def test_tracing_is_on_when_an_endpoint_is_set_and_the_sdk_is_not_disabled(env: dict[str, str], on: bool) -> None:
    assert wanted(env) is on
