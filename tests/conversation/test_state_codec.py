"""The state codec: round trips, golden blobs, bounded decoding, and never raising to a turn."""

from __future__ import annotations

import itertools
import pathlib
from dataclasses import fields, replace
from datetime import UTC, datetime

import msgpack
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.conversation.messages import MediaRef, Message, ToolCall
from worker.conversation.model import Usage
from worker.conversation.state import (
    FLAG_ZSTD,
    FOLD_AT,
    FORMAT_VERSION,
    MAGIC,
    MIGRATIONS,
    ConversationState,
    Fact,
    Memo,
    Meta,
    decode_state,
    decode_with_memo,
    encode_state,
    encode_with_memo,
    load_state,
)
from worker.conversation.state_encode import encode_message, encode_usage
from worker.errors import StateDecodeError

GOLDEN = pathlib.Path(__file__).parent / "golden"
LEGACY = 3  # the last format before frames: the rest of the blob is the base (tests of bounded decoding use it)


def _v4(body: bytes, flags: int = 0, frames: bytes = b"") -> bytes:
    """A blob of the current container: the base's length, the base, then frames."""
    return MAGIC + bytes([FORMAT_VERSION, flags]) + len(body).to_bytes(4, "big") + body + frames


def test_golden_v1_small_still_decodes() -> None:
    s = decode_state((GOLDEN / "v1_small.bin").read_bytes())
    assert s.provider == "openai"
    assert [m.role for m in s.messages] == ["event", "user", "assistant", "tool", "assistant"]
    assert s.messages[2].tool_calls == (ToolCall("call_1", "lookup", '{"place": "Harrogate Theatre"}'),)
    assert s.messages[2].raw is not None and s.messages[2].raw["refusal"] is None
    assert s.messages[0].pinned and s.pinned[0].content == "Team name is Owls"
    assert s.summary.startswith("The user is playing") and s.summary_seq == 2
    assert (s.next_seq, s.seen_seq, s.generation) == (8, 6, 1)
    assert s.last_usage == Usage(120, 8, 64, 0)
    assert s.meta == Meta("0123456789abcdef", 1800000000.0, 1800000100.5, 2, 2, 1)


def test_golden_v1_compressed_still_decodes() -> None:
    blob = (GOLDEN / "v1_compressed.bin").read_bytes()
    assert blob[4] & FLAG_ZSTD
    s = decode_state(blob)
    assert s.provider == "anthropic" and len(s.messages) == 40 and s.meta.turns == 20


def test_golden_v4_with_frames_decodes() -> None:
    """A base (two messages, a summary) and two appended frames: a tool exchange with usage and metadata, then a fact
    and one more message."""
    blob = (GOLDEN / "v4_frames.bin").read_bytes()
    s = decode_state(blob)
    assert [m.role for m in s.messages] == ["event", "user", "assistant", "tool", "assistant", "user"]
    assert [m.seq for m in s.messages] == [1, 2, 3, 4, 5, 6] and s.next_seq == 7 and s.seen_seq == 5
    assert s.messages[2].tool_calls == (ToolCall("call_1", "lookup", '{"place": "Harrogate Theatre"}'),)
    assert s.messages[0].pinned and s.summary == "The user is playing" and s.last_usage == Usage(120, 8, 64, 0)
    assert s.facts == (Fact("target", "The current target is Harrogate Theatre"),)
    assert s.meta == Meta("fedcba9876543210", 1800000000.0, 1800000100.5, 1, 0, 0)


def test_golden_v5_with_the_preambles_facts_decodes() -> None:
    """A base holding the facts as of the preamble's last rewrite (the score then) beside the current facts, and a
    frame after it that changed the score: the frame carries the current facts, the preamble's stay."""
    s = decode_state((GOLDEN / "v5_preamble_facts.bin").read_bytes())
    assert [m.role for m in s.messages] == ["user", "assistant", "event", "user", "assistant"]
    assert s.summary == "The user is playing" and s.generation == 1 and s.next_seq == 8
    assert s.preamble_facts == (Fact("target", "The current target is Harrogate Theatre"),
                                Fact("score", "The team has 40 points"))
    assert s.facts == (Fact("target", "The current target is Harrogate Theatre"), Fact("score", "The team has 50 points"))
def test_golden_v5_with_a_run_decodes_and_its_next_fold_takes_only_the_loose_frames() -> None:
    """The v4 golden blob with its first frame folded into a run (format 5): the same state; the frame after the run
    is the only loose one, so a fold made on the decoded blob replaces that frame alone and keeps the run."""
    v5 = (GOLDEN / "v5_runs.bin").read_bytes()
    assert v5[3] == 5 and decode_state(v5) == decode_state((GOLDEN / "v4_frames.bin").read_bytes())
    memo = decode_with_memo(v5)
    assert 9 < memo.loose < len(v5) and msgpack.unpackb(v5[memo.loose:])["m"][0]["r"] == "user"
    grown = memo.state.append(Message(role="assistant", content="x" * FOLD_AT))
    blob, after = encode_with_memo(grown, memo, version=5)
    assert after.written_from == memo.loose and after.replaced == v5[memo.loose:] and after.basis == len(v5)
    assert blob.startswith(v5[:memo.loose]) and after.loose == len(blob) and decode_state(blob) == grown


def _turns(n: int) -> list[tuple[bytes, Memo]]:
    """``n`` turns of about 300 bytes of varied text each, encoded one after the other: (blob, memo) of each."""
    state = ConversationState.fresh("openai")
    blob, memo = encode_with_memo(state)
    out = []
    for t in range(n):
        state = state.append(Message(role="user", content=f"turn {t} " + " ".join(f"w{t * 7 + i}" for i in range(12))),
                             Message(role="assistant", content=f"answer {t} " + "the theatre opens at seven " * 7))
        blob, memo = encode_with_memo(state, memo)
        out.append((blob, memo))
    return out


def test_loose_frames_are_folded_into_a_compressed_run_and_a_write_stays_bounded() -> None:
    """Past FOLD_AT bytes of loose frames, the write that would add one more folds them all into one compressed run:
    it replaces bytes from where the loose frames start (``replaced``: the stored bytes it drops) and sends at most
    a run's worth; every blob decodes to its state; the history in the blob ends well under its frames' size."""
    turns = _turns(200)
    folds = 0
    for (before, _), (blob, memo) in itertools.pairwise(turns):
        assert memo.basis == len(before) and blob[:memo.written_from] == before[:memo.written_from]
        assert before[memo.written_from:] == memo.replaced
        assert len(blob) - memo.written_from < FOLD_AT  # what the store is sent: a frame, or one run
        folds += bool(memo.replaced)
    last_blob, last = turns[-1]
    assert folds >= 10 and decode_state(last_blob) == last.state
    frames = sum(len(b) - m.written_from for b, m in turns if not m.replaced and m.written_from)
    assert len(last_blob) < 0.6 * frames
    again = decode_with_memo(last_blob)
    assert again.loose == last.loose  # a decoded blob folds where its writer would


def test_a_run_in_a_blob_of_format_4_is_refused_and_a_run_bomb_is_bounded() -> None:
    v5 = (GOLDEN / "v5_runs.bin").read_bytes()
    with pytest.raises(StateDecodeError) as e:
        decode_state(v5[:3] + bytes([4]) + v5[4:])
    assert e.value.reason == "invalid"
    base = _v4(msgpack.packb({"p": "openai", "m": []}))
    bomb = msgpack.packb(zstandard.ZstdCompressor().compress(b"\x90" * (2 << 20)), use_bin_type=True)
    with pytest.raises(StateDecodeError) as e:
        decode_state(base + bomb, max_bytes=64 << 10)
    assert e.value.reason == "oversize"
    junk = msgpack.packb(zstandard.ZstdCompressor().compress(msgpack.packb([1, 2])), use_bin_type=True)
    with pytest.raises(StateDecodeError):
        decode_state(base + junk)


@pytest.mark.parametrize("name", ["v1_small.bin", "v1_compressed.bin", "v3_facts.bin", "v4_frames.bin"])
def test_a_state_of_an_older_format_loads_and_its_next_write_migrates_it(name: str) -> None:
    """A blob of an older format (before frames, or before runs and the preamble's facts: version 4) takes no frame:
    the first write after it is whole, in the current format; the write after that appends."""
    old = (GOLDEN / name).read_bytes()
    memo = decode_with_memo(old)
    grown = memo.state.append(Message(role="user", content="and now?"))
    blob, after = encode_with_memo(grown, memo)
    assert blob[3] == FORMAT_VERSION and after.written_from == 0 and decode_state(blob) == grown
    again = grown.append(Message(role="assistant", content="now this"))
    blob2, after2 = encode_with_memo(again, after)
    assert after2.written_from == len(blob) and blob2.startswith(blob) and decode_state(blob2) == again


def test_every_older_format_has_a_migration() -> None:
    # When FORMAT_VERSION goes up, a migration from each older version must exist and a golden blob of
    # the old version must be kept next to this test.
    assert all(v in MIGRATIONS for v in range(1, FORMAT_VERSION))
    assert any(p.name.startswith(f"v{FORMAT_VERSION}_") for p in GOLDEN.iterdir())


def test_round_trip_and_compression() -> None:
    s = ConversationState.fresh("openai").append(
        *[Message(role="user", content="word " * 1000), Message(role="assistant", content="ok", raw={"x": 1})]
    )
    blob = encode_state(s)
    assert blob[:3] == MAGIC and blob[3] == FORMAT_VERSION == 6
    assert blob[4] & FLAG_ZSTD
    assert decode_state(blob) == s


@pytest.mark.parametrize(
    ("blob", "reason"),
    [
        (b"", "corrupt"),
        (b"hello world", "corrupt"),
        (MAGIC + bytes([FORMAT_VERSION + 1, 0]) + msgpack.packb({}), "version"),
        (MAGIC + bytes([0, 0]) + msgpack.packb({}), "version"),
        (MAGIC + bytes([LEGACY, 0x80]) + msgpack.packb({}), "corrupt"),
        (MAGIC + bytes([LEGACY, 0]) + b"\xc1", "corrupt"),
        (MAGIC + bytes([LEGACY, 0]) + msgpack.packb([1, 2]), "invalid"),
        (MAGIC + bytes([LEGACY, 0]) + msgpack.packb({"p": "openai", "m": [{"r": "wizard"}]}), "invalid"),
        (MAGIC + bytes([LEGACY, FLAG_ZSTD]) + b"not zstd", "corrupt"),
        (MAGIC + bytes([FORMAT_VERSION, 0]) + b"\x00\x00", "corrupt"),  # no room for the base's length
        (_v4(msgpack.packb({"p": "openai"}))[:-1], "corrupt"),  # the base runs past the blob
        (_v4(msgpack.packb({"p": "openai"}), frames=b"\xc1"), "corrupt"),
        (_v4(msgpack.packb({"p": "openai"}), frames=msgpack.packb([1])), "invalid"),  # a frame that is no map
        (_v4(msgpack.packb({"p": "openai"}), frames=msgpack.packb({"m": [{"r": "user", "s": 5}], "ns": 2,
                                                                    "meta": [0.0, 0, 0, 0]})), "invalid"),
        (_v4(msgpack.packb({"p": "openai"}), frames=msgpack.packb({"ns": 2, "meta": ["", 0.0, 0.0, 0, 0, 0]})),
         "invalid"),  # a frame's metadata holds no epoch
        (_v4(msgpack.packb({"p": "openai"}), frames=msgpack.packb({"ns": 2})), "invalid"),  # no meta
        (_v4(b"not zstd", FLAG_ZSTD), "corrupt"),
    ],
)
def test_bad_blobs_have_a_reason(blob: bytes, reason: str) -> None:
    with pytest.raises(StateDecodeError) as info:
        decode_state(blob)
    assert info.value.reason == reason
    loaded = load_state(blob, provider="openai")
    # Empty bytes mean "no conversation yet", which is not a problem.
    assert (loaded.problem is not None) == bool(blob) and loaded.state.messages == ()


def test_oversize_blob_is_refused_before_decoding() -> None:
    s = ConversationState.fresh("openai").append(Message(role="user", content="x" * 5000))
    blob = encode_state(s)
    with pytest.raises(StateDecodeError) as info:
        decode_state(blob, max_bytes=len(blob) - 1)
    assert info.value.reason == "oversize"


def test_zstd_bomb_is_bounded() -> None:
    payload = msgpack.packb({"p": "openai", "m": [], "sum": "a" * (50 << 20)})
    blob = MAGIC + bytes([LEGACY, FLAG_ZSTD]) + zstandard.ZstdCompressor().compress(payload)
    assert len(blob) < 100_000
    with pytest.raises(StateDecodeError) as info:
        decode_state(blob, max_bytes=1 << 20)
    assert info.value.reason == "oversize"


def test_msgpack_bombs_are_refused() -> None:
    deep = b"\x91" * 100_000 + b"\xc0"  # 100k nested one-element arrays
    with pytest.raises(StateDecodeError):
        decode_state(MAGIC + bytes([LEGACY, 0]) + deep)
    lying = b"\xdd\xff\xff\xff\xff"  # array32 declaring 4 billion items, then nothing
    with pytest.raises(StateDecodeError):
        decode_state(MAGIC + bytes([LEGACY, 0]) + lying)
    lying_str = b"\xdb\x7f\xff\xff\xff" + b"a" * 10
    with pytest.raises(StateDecodeError):
        decode_state(MAGIC + bytes([LEGACY, 0]) + lying_str)


def test_provider_lock() -> None:
    blob = encode_state(ConversationState.fresh("anthropic"))
    with pytest.raises(StateDecodeError) as info:
        decode_state(blob, provider="openai")
    assert info.value.reason == "provider"
    assert decode_state(blob, provider="anthropic").provider == "anthropic"


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_load_state_never_raises_on_random_bytes(blob: bytes) -> None:
    load_state(blob, provider="openai")
    load_state(MAGIC + bytes([LEGACY, 0]) + blob, provider="openai")
    load_state(MAGIC + bytes([LEGACY, FLAG_ZSTD]) + blob, provider="openai")
    load_state(MAGIC + bytes([FORMAT_VERSION, 0]) + blob, provider="openai")
    load_state(_v4(msgpack.packb({"p": "openai"}), frames=blob), provider="openai")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["p", "m", "sum", "sums", "pin", "ns", "seen", "u", "g", "meta", "zz"]), json_values))
def test_load_state_never_raises_on_random_payloads(payload: dict[str, object]) -> None:
    blob = MAGIC + bytes([LEGACY, 0]) + msgpack.packb(payload)
    load_state(blob, provider="openai")


messages_strategy = st.lists(
    st.builds(
        Message,
        role=st.sampled_from(["user", "assistant", "tool", "system", "event"]),
        content=st.text(max_size=50),
        tool_calls=st.lists(st.builds(ToolCall, id=st.text(min_size=1, max_size=5), name=st.text(min_size=1, max_size=5),
                                      arguments=st.text(max_size=10)), max_size=2).map(tuple),
        tool_call_id=st.none() | st.text(max_size=5),
        name=st.none() | st.text(max_size=5),
        is_error=st.booleans(),
        pinned=st.booleans(),
        raw=st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=3),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(messages_strategy, st.text(max_size=100))
def test_encode_decode_round_trips(messages: list[Message], summary: str) -> None:
    s = replace(ConversationState.fresh("openai").append(*messages), summary=summary)
    assert decode_state(encode_state(s)) == s


# --- the direct constructions of the turn's hot path are dataclasses.replace ----------------------------------------

def _every_field_set() -> tuple[Message, ConversationState]:
    """A message and a state with every field away from its default, so a field a fast path drops shows."""
    m = Message(role="user", content="hi", tool_calls=(ToolCall("c", "f"),), tool_call_id="t", name="n",
                is_error=True, pinned=True, seq=3, raw={"k": 1}, media=MediaRef("img", "image/png"),
                facts=(("target", "Harrogate Theatre"),), reply_parts=({"type": "reaction", "emoji": "x"},),
                at=datetime(2026, 11, 28, 12, 0, 5, tzinfo=UTC))
    s = ConversationState(provider="openai", messages=(m,), summary="s", summary_seq=2, pinned=(m,), next_seq=9,
                          seen_seq=4, last_usage=Usage(5, 6), generation=7,
                          meta=Meta("e", 1.0, 2.0, 3, 4, 5), facts=(Fact("target", "the theatre"),),
                          preamble_facts=(Fact("target", "the hall"),))
    return m, s


def test_fast_paths_know_every_field() -> None:
    """``Message.with_seq``, ``Meta.after_turn`` and the state's ``append``/``with_usage``/``with_meta`` pass every
    field by position: one added to a class must be added there too (then add it here)."""
    assert [f.name for f in fields(Message)] == ["role", "content", "tool_calls", "tool_call_id", "name",
                                                 "is_error", "pinned", "seq", "raw", "media", "facts", "reply_parts", "at"]
    assert [f.name for f in fields(ConversationState)] == ["provider", "messages", "summary", "summary_seq",
                                                           "pinned", "next_seq", "seen_seq", "last_usage",
                                                           "generation", "meta", "facts", "preamble_facts"]
    assert [f.name for f in fields(Meta)] == ["epoch", "started_at", "last_activity", "turns", "events",
                                              "compactions"]


def test_fast_paths_equal_replace() -> None:
    m, s = _every_field_set()
    renumbered = m.with_seq(11)
    assert renumbered == replace(m, seq=11) and renumbered.raw is m.raw  # raw is not compared by ==
    assert s.append(m) == replace(s, messages=(m, replace(m, seq=9)), next_seq=10)
    assert s.with_usage(Usage(8, 9), 8) == replace(s, last_usage=Usage(8, 9), seen_seq=8)
    meta = Meta("f", 2.0, 3.0, 4, 5, 6)
    assert s.with_meta(meta) == replace(s, meta=meta)
    assert s.meta.after_turn(9.5) == replace(s.meta, turns=4, last_activity=9.5)


def test_the_base_is_one_packb_of_the_whole_map_and_a_turn_appends_one_frame() -> None:
    """A whole write is the base alone: the msgpack map of every field (set and not); a state grown at its end is the
    stored blob byte for byte plus one frame (the new messages, counters, usage, metadata; the facts only when they
    changed), and it decodes to the grown state."""
    _, s = _every_field_set()
    for state in (s, ConversationState(provider="anthropic"),
                  replace(s, last_usage=None, pinned=(), facts=(), preamble_facts=())):
        meta = state.meta
        whole = {"p": state.provider, "m": [encode_message(x) for x in state.messages], "sum": state.summary,
                 "sums": state.summary_seq, "pin": [encode_message(x) for x in state.pinned], "ns": state.next_seq,
                 "seen": state.seen_seq, "u": encode_usage(state.last_usage), "g": state.generation,
                 "meta": [meta.epoch, meta.started_at, meta.last_activity, meta.turns, meta.events,
                          meta.compactions]}
        if state.facts:
            whole["f"] = [[f.key, f.text] for f in state.facts]
        if state.preamble_facts:
            whole["pf"] = [[f.key, f.text] for f in state.preamble_facts]
        blob, memo = encode_with_memo(state)
        assert blob == _v4(msgpack.packb(whole, use_bin_type=True)) and memo.written_from == 0
        added = Message(role="assistant", content="more")
        grown = state.append(added).with_usage(Usage(5, 6), state.next_seq)
        frame = {"m": [encode_message(added.with_seq(state.next_seq))], "ns": grown.next_seq, "seen": grown.seen_seq,
                 "u": [5, 6, 0, 0], "meta": whole["meta"][2:]}  # the epoch and start only change in a whole write
        appended, after = encode_with_memo(grown, memo)
        assert appended == blob + msgpack.packb(frame, use_bin_type=True) and after.written_from == len(blob)
        assert decode_state(appended) == grown
        with_fact = grown.with_fact("target", "The theatre")
        again, _ = encode_with_memo(with_fact, after)
        assert again.startswith(appended) and decode_state(again) == with_fact
        assert msgpack.unpackb(again[len(appended):])["f"] == [[f.key, f.text] for f in with_fact.facts]
        new_life = replace(with_fact, meta=replace(with_fact.meta, epoch="another"))  # a reset: written whole
        assert encode_with_memo(new_life, after)[1].written_from == 0
        # The preamble takes the facts only when a compaction rewrites it: never in a frame, always a whole write.
        settled = replace(grown, preamble_facts=with_fact.facts)
        rewritten, written = encode_with_memo(settled, after)
        assert written.written_from == 0 and decode_state(rewritten) == settled
