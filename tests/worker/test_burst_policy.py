"""The burst decision alone (pure): what one turn takes in, and when it waits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.configs import bare_burst
from worker.envelopes.inputs import Envelope, Media
from worker.service.drain.burst import Pending, decide, extend, recorded

CID = "447700900999"
NOW = 1_000_000.0


def item(i: int, kind: str, at: float = NOW - 100, *, photo: bool = False) -> Pending:
    text = None if photo else f"t{i}"
    env = Envelope(kind=kind, conversation_id=CID, message_id=f"id-{i}", accepted_at=at, text=text,  # type: ignore[arg-type]
                   media=Media(id="m") if photo else None)
    return Pending(f"id-{i}", env)


kinds = st.lists(st.sampled_from(["message", "event", "reset", "notice", None, "photo"]), max_size=25)


@given(kinds, st.integers(min_value=1, max_value=8), st.booleans())
def test_a_burst_is_a_prefix_of_burstable_inputs_that_ends_at_a_chat_message(tail: list[str | None], limit: int,
                                                                              complete: bool) -> None:
    after = [None if k is None else item(i + 1, "message" if k == "photo" else k, photo=k == "photo")
             for i, k in enumerate(tail)]
    head = item(0, "message")
    d = decide(head, after, bare_burst(quiet=1.0, max_messages=limit), NOW, complete=complete)
    assert d.wait == 0  # every input is old: nothing to wait for
    assert d.inputs[0] is head and len(d.inputs) <= limit
    assert d.inputs[-1].env.kind == "message"
    assert list(d.inputs[1:]) == after[: len(d.inputs) - 1]  # contiguous, in order
    assert all(p.env.kind in ("message", "event") and p.env.text for p in d.inputs)


def test_an_open_burst_waits_out_the_quiet_period_but_not_past_the_maximum_wait() -> None:
    policy = bare_burst(quiet=1.5, max_wait=8.0)
    head = item(0, "message", NOW - 1.0)
    assert decide(head, [], policy, NOW, complete=True).wait == 0.5
    old_head = item(0, "message", NOW - 7.9)
    d = decide(old_head, [item(1, "message", NOW - 0.2)], policy, NOW, complete=True)
    assert abs(d.wait - 0.1) < 1e-9 and len(d.inputs) == 2  # the maximum wait is nearer than the quiet end
    assert decide(head, [], policy, NOW, complete=False).wait == 0  # the mailbox holds more than a burst
    assert decide(head, [item(1, "reset")], policy, NOW, complete=True).wait == 0  # closed


def test_coalescing_off_takes_one_message() -> None:
    d = decide(item(0, "message", NOW), [item(1, "message", NOW)], bare_burst(quiet=0), NOW, complete=True)
    assert d.inputs == (item(0, "message", NOW),) and d.wait == 0


def test_a_photo_alone_is_burstable_only_when_the_model_sees_it() -> None:
    after = [item(1, "message", photo=True), item(2, "message")]
    head = item(0, "message")
    assert len(decide(head, after, bare_burst(quiet=1.0), NOW, complete=True).inputs) == 1
    assert len(decide(head, after, bare_burst(quiet=1.0, reads_images=True), NOW, complete=True).inputs) == 3


def test_extend_takes_new_messages_and_the_events_before_them() -> None:
    burst = (item(0, "message"),)
    policy = bare_burst(quiet=1.0, max_messages=4)
    assert extend(burst, [item(1, "event"), item(2, "message"), item(3, "event")], policy) == (
        burst[0], item(1, "event"), item(2, "message"))
    assert extend(burst, [item(1, "event")], policy) == burst  # no new chat message: nothing to merge
    assert len(extend(burst, [item(i, "message") for i in range(1, 9)], policy)) == 4


def test_recorded_rebuilds_the_burst_only_when_the_queue_still_holds_it() -> None:
    head, after = item(0, "message"), [item(1, "message"), item(2, "message")]
    assert recorded(head, after, ["id-0", "id-1"]) == (head, after[0])
    assert recorded(head, after, ["id-0", "id-2"]) is None
    assert recorded(head, after, ["id-9"]) is None
    assert recorded(head, after[:1], ["id-0", "id-1", "id-2"]) is None
