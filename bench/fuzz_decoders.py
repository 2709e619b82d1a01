"""Fuzz the state decoder and the envelope parser with hypothesis, outside the normal test run.

    python bench/fuzz_decoders.py [--examples 100000]

Inputs: random bytes, random msgpack values, and valid blobs with random byte flips, truncations and
insertions. A crash is any exception other than the decoder's own clear error (``StateDecodeError`` is
never even raised by ``load_state``; ``EnvelopeError`` by ``decode_envelope``). Prints the counts.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker import Chat, ScriptedModel
from worker.conversation.state import load_state
from worker.envelopes.inputs import Envelope, decode_envelope
from worker.errors import EnvelopeError

counts = {"state": 0, "envelope": 0, "crashes": 0}
crashes: list[str] = []


def seeds() -> list[bytes]:
    chat = Chat(model=ScriptedModel(default="answer " * 50), auto_compact=False)
    state = chat.append_to_state(None, "tagged Harrogate Theatre", pinned=True)
    small = state
    for i in range(30):
        _, state = chat.chat_with_state(state, user=f"question {i} " * 10)
    env = Envelope(kind="message", conversation_id="447700900123", text="hello", system="s", reply_to="wamid.1")
    return [small, state, env.to_bytes()]


SEEDS = seeds()

values = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text() | st.binary(),
                      lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=10), c, max_size=5),
                      max_leaves=20)


@st.composite
def mutated(draw):  # type: ignore[no-untyped-def]
    blob = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = draw(st.integers(0, max(0, len(blob) - 1)))
        if op == "flip" and blob:
            blob[pos] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del blob[pos:pos + draw(st.integers(1, 64))]
        else:
            blob[pos:pos] = draw(st.binary(min_size=1, max_size=16))
    return bytes(blob)


envelope_like = st.fixed_dictionaries(
    {"kind": st.sampled_from(["message", "event", "reset", "splice"]) | values,
     "conversation_id": st.sampled_from(["447700900123", "a:b", ""]) | values},
    optional={k: values for k in ("v", "message_id", "text", "pinned", "system", "reply_to", "recipient",
                                  "accepted_at", "state")})
state_like = st.fixed_dictionaries({"p": st.just("scripted") | values},
                                   optional={k: values for k in ("m", "sum", "sums", "pin", "ns", "seen", "u", "g", "meta")})

inputs = st.one_of(st.binary(max_size=2000), values.map(lambda v: msgpack.packb(v, use_bin_type=True)),
                   envelope_like.map(lambda v: msgpack.packb(v, use_bin_type=True)),
                   state_like.map(lambda v: b"PLY\x01\x00" + msgpack.packb(v, use_bin_type=True)),
                   mutated(), st.just(b"PLY\x01\x00").flatmap(lambda h: st.binary(max_size=500).map(lambda b: h + b)))


def check(blob: bytes) -> None:
    try:
        load_state(blob, provider="scripted")
        counts["state"] += 1
    except Exception as exc:  # pragma: no cover - a crash is what we are looking for
        counts["crashes"] += 1
        crashes.append(f"state {type(exc).__name__}: {exc} :: {blob[:40]!r}")
    try:
        decode_envelope(blob)
    except EnvelopeError:
        pass
    except Exception as exc:
        counts["crashes"] += 1
        crashes.append(f"envelope {type(exc).__name__}: {exc} :: {blob[:40]!r}")
    counts["envelope"] += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=100_000)
    args = ap.parse_args()
    tracemalloc.start()
    started = time.monotonic()
    run = settings(max_examples=args.examples, deadline=None, database=None, derandomize=False,
                   suppress_health_check=list(HealthCheck))(given(inputs)(check))
    run()
    _, peak = tracemalloc.get_traced_memory()
    print(f"inputs: state decoder {counts['state']}, envelope parser {counts['envelope']}; "
          f"crashes: {counts['crashes']}; peak traced memory {peak / 1e6:.1f} MB; {time.monotonic() - started:.0f} s")
    for c in crashes[:10]:
        print("  ", c)


if __name__ == "__main__":
    main()
