"""The chaos checker can fail: each of its checks, fed synthetic records of a run with one defect, rejects it.

No workers, no Redis: ``check_conversation`` reads only what a run left behind (see harness.py). One test (marked
e2e) runs real workers with two defects planted, a message lost into the dead letters and a part WhatsApp got
twice without a resend, which the checker before issue 27 passed.
"""

from __future__ import annotations

import io
import json
import logging
from collections import Counter
from typing import Any

import pytest

from tests.chaos.harness import (
    Load,
    Observed,
    Outcome,
    PartKey,
    check_conversation,
    no_dead_letters,
    run_scenario,
    window_hits,
)
from tests.e2e.conftest import Cluster
from tests.support.fake_whatsapp import SentPart
from worker.envelopes.inputs import DeadLetter, ReplyRecord
from worker.observability.logs import JsonFormatter, TextFormatter
from worker.service.deliver.inflight import CrashedSends

CID = "447700000001"
ACCEPTED = [("m0", "message", f"{CID} q0"), ("m1", "event", f"{CID} event 1"), ("m2", "message", f"{CID} q2"),
            ("m3", "message", f"{CID} q3")]


def history(*mids: str, pinned: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """A state's history holding the accepted inputs ``mids`` in this order, each user message answered."""
    text = {mid: (kind, t) for mid, kind, t in ACCEPTED}
    out: list[dict[str, Any]] = []
    for mid in mids:
        kind, t = text[mid]
        out.append({"seq": len(out) + 1, "role": "user" if kind == "message" else "event", "content": t,
                    **({"pinned": True} if mid in pinned else {})})
        if kind == "message":
            out.append({"seq": len(out) + 1, "role": "assistant", "content": f"ack:{t}"})
    return out


def state(*mids: str, summary: str = "", compactions: int = 0) -> dict[str, Any]:
    return {"ok": True, "summary": summary, "compactions": compactions, "pinned": [], "history": history(*mids)}


def clean() -> Observed:
    return Observed(accepted=list(ACCEPTED), trace=[{"id": mid} for mid, _, _ in ACCEPTED],
                    state=state("m0", "m1", "m2", "m3"),
                    sent=[SentPart(mid, 0, f"ack:{t}") for mid, kind, t in ACCEPTED if kind == "message"], dead=[])


def check(seen: Observed, windows: Counter[PartKey] | None = None, expect_dead: Any = no_dead_letters) -> Outcome:
    windows = windows or Counter()
    out = Outcome(window_hits=sum(windows.values()))
    check_conversation(CID, seen, windows, expect_dead, out)
    return out


def test_a_clean_run_passes() -> None:
    out = check(clean())
    out.assert_safe()
    assert (out.applied, out.replies, out.dead) == (4, 3, 0)


def test_a_dead_lettered_input_fails_the_run_with_its_reason() -> None:
    seen = clean()
    seen.trace[2] = {"id": "m2", "dead": "too_many_attempts", "detail": "the model failed 5 times"}
    seen.dead = [DeadLetter(what="input", id="m2", reason="too_many_attempts", detail="the model failed 5 times")]
    seen.state = state("m0", "m1", "m3")
    seen.sent = [s for s in seen.sent if s.reply_id != "m2"]
    out = check(seen)
    with pytest.raises(AssertionError, match="m2: too_many_attempts"):
        out.assert_safe()
    assert out.lost == 0  # the old checker counted it as seen, and passed
    # The same dead letter, stated by the scenario, passes.
    check(seen, expect_dead=lambda cid, d: (cid, d.id) == (CID, "m2")).assert_safe()


def test_an_input_dead_lettered_only_in_the_trace_still_fails() -> None:
    seen = clean()
    seen.trace[2] = {"id": "m2", "dead": "invalid_input"}
    seen.state = state("m0", "m1", "m3")
    seen.sent = [s for s in seen.sent if s.reply_id != "m2"]
    with pytest.raises(AssertionError, match="m2: invalid_input"):
        check(seen).assert_safe()


def test_a_dead_lettered_reply_fails_unless_expected() -> None:
    seen = clean()
    record = ReplyRecord(reply_id="m3", conversation_id=CID, recipient=CID, parts=[f"ack:{CID} q3"])
    seen.dead = [DeadLetter(what="reply", id="m3", reason="delivery_failed:500", payload=record.to_bytes())]
    seen.sent = seen.sent[:-1]
    with pytest.raises(AssertionError, match="reply m3: delivery_failed:500"):
        check(seen).assert_safe()
    check(seen, expect_dead=lambda cid, d: d.what == "reply").assert_safe()


def test_a_part_sent_twice_needs_a_window_hit_of_that_very_part() -> None:
    seen = clean()
    seen.sent.insert(2, SentPart("m2", 0, f"ack:{CID} q2"))
    with pytest.raises(AssertionError, match="part 0 of reply m2 reached WhatsApp 2 times"):
        check(seen).assert_safe()
    # A window hit elsewhere in the fleet (the old checker compared totals) does not explain it.
    other = Counter({(CID, "m0", 0): 1, ("447700000002", "m2", 0): 1, (CID, "m2", 1): 1})
    with pytest.raises(AssertionError, match="resent it 0 times"):
        check(seen, other).assert_safe()
    out = check(seen, Counter({(CID, "m2", 0): 1}))
    out.assert_safe()
    assert out.parts_duplicated == 1


def test_a_send_that_names_no_part_fails() -> None:
    seen = clean()
    seen.sent[0] = SentPart(None, None, seen.sent[0].text)
    with pytest.raises(AssertionError, match="without callback data"):
        check(seen).assert_safe()


@pytest.mark.parametrize(("mids", "match"), [
    (("m0", "m1", "m3"), r"lacks inputs \['m2'\]"),  # an input dropped from the state
    (("m0", "m1", "m2", "m2", "m3"), "holds input m2 2 times"),
    (("m0", "m2", "m1", "m3"), "in the order"),
])
def test_the_committed_state_is_checked(mids: tuple[str, ...], match: str) -> None:
    seen = clean()
    seen.state = state(*mids)
    out = check(seen)
    assert (out.lost, out.duplicated, out.reordered) == (0, 0, 0)  # the trace is fine: only the state shows it
    with pytest.raises(AssertionError, match=match):
        out.assert_safe()


def test_a_state_holding_something_never_accepted_fails() -> None:
    seen = clean()
    seen.state["history"].append({"seq": 99, "role": "user", "content": "from nowhere"})
    with pytest.raises(AssertionError, match="from nowhere"):
        check(seen).assert_safe()


def test_an_unreadable_state_fails() -> None:
    seen = clean()
    seen.state = {"ok": False, "problem": "bad_magic", "bytes": 3}
    with pytest.raises(AssertionError, match="unreadable"):
        check(seen).assert_safe()


def test_a_compacted_state_keeps_a_contiguous_tail_in_order() -> None:
    seen = clean()
    seen.state = state("m2", "m3", summary="they talked", compactions=1)  # m0 and m1 became the summary
    out = check(seen)
    out.assert_safe()
    assert out.compacted == 1
    seen.state = {**state("m1", "m3", summary="they talked", compactions=1)}  # m2 vanished from the kept tail
    with pytest.raises(AssertionError, match=r"lacks inputs \['m2'\]"):
        check(seen).assert_safe()
    seen.state = state("m3", "m2", summary="they talked", compactions=1)
    with pytest.raises(AssertionError, match="in the order"):
        check(seen).assert_safe()
    # A pinned message kept from before the tail does not start it.
    seen.state = {**state(summary="s", compactions=2), "pinned": history("m0")[:1],
                  "history": [{**m, "seq": m["seq"] + 10} for m in history("m2", "m3")]}
    check(seen).assert_safe()
    seen.state["history"] = seen.state["history"][:2]  # m3 missing after the kept m2
    with pytest.raises(AssertionError, match=r"lacks inputs \['m3'\]"):
        check(seen).assert_safe()


def test_compaction_keeps_the_first_applied_user_message_before_the_tail() -> None:
    accepted = [(f"k{i}", "message", f"{CID} k{i}") for i in range(6)]
    dead = [DeadLetter(what="input", id="k0", reason="model_rejected")]  # the first message never made the state

    def view(*ids: str) -> dict[str, Any]:
        return {"ok": True, "summary": "s", "compactions": 1, "pinned": [],
                "history": [{"seq": i, "role": "user", "content": f"{CID} {mid}"} for i, mid in enumerate(ids)]}

    seen = Observed(accepted=accepted, trace=[{"id": "k0", "dead": "model_rejected"}] + [
        {"id": f"k{i}"} for i in range(1, 6)], state=view("k1", "k4", "k5"),
        sent=[SentPart(f"k{i}", 0, f"ack:{CID} k{i}") for i in range(1, 6)], dead=dead)
    check(seen, expect_dead=lambda cid, d: d.id == "k0").assert_safe()  # k1 kept as the first; k2, k3 summarised
    seen.state = view("k1", "k3", "k5")  # k4 missing from the kept tail
    with pytest.raises(AssertionError, match=r"lacks inputs \['k4'\]"):
        check(seen, expect_dead=lambda cid, d: d.id == "k0").assert_safe()


@pytest.mark.parametrize("formatter", [TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"),
                                       JsonFormatter()], ids=["text", "json"])
def test_window_hits_are_read_per_part_from_the_workers_own_log_line(formatter: logging.Formatter) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger("parley.service")
    logger.addHandler(handler)
    try:
        CrashedSends._resend({"conversation_id": CID, "message_id": "m2", "part": 1}, "no status webhooks")
        CrashedSends._resend({"conversation_id": CID, "message_id": "m2", "part": 1}, "no status webhooks")
        CrashedSends._resend({"conversation_id": CID, "message_id": "m|3", "part": 0}, "no status webhooks")
    finally:
        logger.removeHandler(handler)
    assert window_hits([stream.getvalue()]) == Counter({(CID, "m2", 1): 2, (CID, "m|3", 0): 1})


@pytest.mark.e2e
def test_a_real_run_with_a_message_lost_to_the_dead_letters_and_a_part_sent_twice_fails(cluster: Cluster) -> None:
    rejected = "447700000001 q1"

    def fault(body: dict[str, Any]) -> object:  # the provider refuses one message for good: it is dead-lettered
        if rejected in json.dumps(body.get("messages", [])[-1:]):
            return (400, {"error": {"message": "rejected by the test", "type": "invalid_request_error"}}, {})
        return None

    doubled: list[dict[str, Any]] = []

    def on_sent(sent: dict[str, Any]) -> None:  # WhatsApp delivers the first part it gets twice; no worker resent it
        with cluster.whatsapp.lock:
            if not doubled:
                doubled.append(sent)
                cluster.whatsapp.sent.append(sent)

    cluster.llm.fault = fault
    cluster.whatsapp.on_sent = on_sent
    out = run_scenario(cluster, Load(conversations=3, inputs_per=3, event_every=0, workers=1, ready_first=True))
    # The checker before issue 27 passed the dead letter (it counted it as seen, its reply as not expected); it
    # caught the double only because no resend happened anywhere in the fleet (it compared fleet-wide totals).
    assert (out.lost, out.duplicated, out.reordered, out.stranded, out.replies_lost) == (0, 0, 0, 0, 0), out.line()
    with pytest.raises(AssertionError, match="447700000001 input 447700000001-1: model_rejected"):
        out.assert_safe()
    out.unexpected_dead.clear()
    with pytest.raises(AssertionError, match="reached WhatsApp 2 times; the workers resent it 0 times"):
        out.assert_safe()
    assert doubled and out.parts_unexplained == 1


def paused_run(may_withhold: int) -> Observed:
    """A run where m2 was withheld by a pause (no reply) and an operator's message o2 followed it."""
    seen = clean()
    seen.accepted.insert(3, ("o2", "operator", "a person says hi"))
    seen.trace[2] = {"id": "m2", "paused": True}
    seen.trace.insert(3, {"id": "o2", "operator": True})
    seen.sent = [s for s in seen.sent if s.reply_id != "m2"]
    seen.sent.insert(1, SentPart("o2", 0, "a person says hi"))
    seen.may_withhold = may_withhold
    h = history("m0", "m1", "m2", "m3")
    del h[4]  # m2's answer: withheld
    h.insert(4, {"seq": 0, "role": "assistant", "content": "a person says hi", "by": "operator"})
    seen.state = {**state(), "history": [{**m, "seq": i + 1} for i, m in enumerate(h)]}
    return seen


def test_a_withheld_input_passes_only_inside_a_pause() -> None:
    out = check(paused_run(may_withhold=3))  # m2 was accepted before the resume
    out.assert_safe()
    assert (out.withheld, out.silenced, out.replies_lost) == (1, 0, 0)
    for outside in (0, 2):  # never paused; or m2 came after the resume
        with pytest.raises(AssertionError, match="m2 got no reply"):
            check(paused_run(may_withhold=outside)).assert_safe()


def test_an_operator_message_missing_from_the_state_fails() -> None:
    seen = paused_run(may_withhold=3)
    seen.state["history"] = [m for m in seen.state["history"] if m.get("by") != "operator"]
    with pytest.raises(AssertionError, match=r"lacks inputs \['o2'\]"):
        check(seen).assert_safe()


def test_an_operator_message_lost_or_out_of_order_fails() -> None:
    seen = paused_run(may_withhold=3)
    seen.sent = [s for s in seen.sent if s.reply_id != "o2"]
    assert check(seen).replies_lost == 1
    seen = paused_run(may_withhold=3)
    seen.sent.append(seen.sent.pop(1))  # the person's message after the reply to m3, accepted after it
    with pytest.raises(AssertionError, match="replies_reordered=1"):
        check(seen).assert_safe()


def test_the_archive_check_fails_on_a_lost_or_twice_archived_input() -> None:
    compacted = state("m0", "m3", summary="s", compactions=1)
    good = clean()
    good.state = compacted
    good.archive = [("1:a", f"{CID} event 1"), ("2:b", f"{CID} q2"), ("3:c", f"ack:{CID} q2")]
    out = check(good)
    out.assert_safe()
    lost = clean()
    lost.state = compacted
    lost.archive = [("1:a", f"{CID} event 1")]  # q2 left the history and never reached the archive
    out = check(lost)
    assert out.archive_lost == 1 and out.archive_duplicated == 0
    with pytest.raises(AssertionError):
        out.assert_safe()
    twice = clean()
    twice.state = compacted
    twice.archive = [*good.archive, ("2:b", f"{CID} q2")]  # a retried commit archived its batch again
    out = check(twice)
    assert out.archive_duplicated == 2 and out.archive_lost == 0
    kept_and_archived = clean()
    kept_and_archived.archive = [("3:d", f"{CID} q3")]  # still in the history, archived all the same
    assert check(kept_and_archived).archive_duplicated == 1
