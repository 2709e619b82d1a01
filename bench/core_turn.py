"""Core cost per turn: decode, build the request, apply the reply, encode — for histories of 10, 100 and
1,000 messages, with the state size in bytes. Baseline in the same run: msgpack encode+decode of the same
history as plain dicts (the floor for any serialised state). A last line measures the 100-message history with 10
keyed facts against the same history without (the cost of the facts, state format 3).

    python bench/core_turn.py
"""

from __future__ import annotations

import statistics
import time

import msgpack

from worker import Chat, ScriptedModel
from worker.conversation.messages import Message
from worker.conversation.state import ConversationState, decode_state, encode_state


def history(n: int, facts: int = 0) -> bytes:
    st = ConversationState.fresh("scripted")
    for i in range(facts):
        st = st.with_fact(f"fact{i}", f"The player's current target number {i} is Harrogate Theatre")
    msgs = []
    for i in range(n):
        if i % 2 == 0:
            msgs.append(Message(role="user", content=f"Question {i}: where is the next clue near Harrogate Theatre?"))
        else:
            text = f"Answer {i}: look behind the blue door on Oxford Street, then count the lamp posts."
            msgs.append(Message(role="assistant", content=text, raw={"role": "assistant", "content": text}))
    return encode_state(st.append(*msgs))


def timeit(fn, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    model = ScriptedModel(default="The clue is under the bench.")
    chat = Chat(model=model, auto_compact=False)
    print(f"{'messages':>8} {'state bytes':>11} {'turn p50 us':>11} {'turn p99 us':>11} {'baseline p50 us':>15} {'ratio':>6}")
    for n in (10, 100, 1000):
        blob = history(n)
        plain = [{"role": "user", "content": "x" * 60}] * n
        repeat = 2000 if n < 1000 else 300

        def turn(blob: bytes = blob) -> None:
            chat.run_turn(blob, user="Where next?")
            model.requests.clear()

        def baseline(plain: list[dict[str, str]] = plain) -> None:
            msgpack.unpackb(msgpack.packb(plain))

        t = sorted(timeit(turn, repeat))
        b = sorted(timeit(baseline, repeat))
        p50, p99 = statistics.median(t), t[int(len(t) * 0.99) - 1]
        print(f"{n:>8} {len(blob):>11} {p50 * 1e6:>11.0f} {p99 * 1e6:>11.0f} {statistics.median(b) * 1e6:>15.1f} "
              f"{p50 / statistics.median(b):>6.1f}")
    with_facts, without = history(100, facts=10), history(100)
    runs = {}
    for name, blob in (("without", without), ("with", with_facts)):
        runs[name] = statistics.median(timeit(lambda blob=blob: chat.run_turn(blob, user="Where next?"), 2000))
        model.requests.clear()
    print(f"100 messages + 10 facts: {len(with_facts)} bytes, turn p50 {runs['with'] * 1e6:.0f} us; without facts "
          f"{len(without)} bytes, {runs['without'] * 1e6:.0f} us; ratio {runs['with'] / runs['without']:.2f}")
    codec = {}
    for name, blob in (("without", without), ("with", with_facts)):
        # The codec alone (decode, then encode the decoded state afresh), best of 5 batches: less noise than a turn.
        codec[name] = min(sum(timeit(lambda blob=blob: encode_state(decode_state(blob)), 1000)) / 1000
                          for _ in range(5))
    print(f"codec (decode + encode), 100 messages: with 10 facts {codec['with'] * 1e6:.1f} us, without "
          f"{codec['without'] * 1e6:.1f} us; ratio {codec['with'] / codec['without']:.2f}")


if __name__ == "__main__":
    main()
