"""Recall's pure foundation: archived messages and their bytes, the byte bound, the search index and the in-memory
archive."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worker.conversation.recall import (
    SPEAKERS,
    Archive,
    ArchivedMessage,
    InMemoryArchive,
    SearchIndex,
    bound_newest,
    decode_archive,
    encode_batch,
    new_messages,
    recall,
    stable_id,
)
from worker.conversation.recall.codec import count_archive
from worker.conversation.recall.terms import fold, terms
from worker.conversation.tokens import EstimateCounter
from worker.errors import ArchiveDecodeError, InvalidMessageError, StateError

_times = st.one_of(st.none(), st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                                           timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5, minutes=-30))])))
_messages = st.lists(
    st.builds(lambda i, s, t, at: ArchivedMessage(f"{i}:{s}", s, t, at),
              st.integers(0, 10**6), st.sampled_from(SPEAKERS), st.text(max_size=200), _times),
    max_size=30,
)
_SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _msg(n: int, speaker: str, text: str) -> ArchivedMessage:
    at = datetime(2026, 9, 1, tzinfo=UTC) + timedelta(minutes=n)
    return ArchivedMessage(stable_id("c", n, speaker, text), speaker, text, at)  # type: ignore[arg-type]


@_SLOW
@given(_messages, _messages)
def test_batches_round_trip_and_concatenate_in_order(first: list[ArchivedMessage], second: list[ArchivedMessage]) -> None:
    assert decode_archive(encode_batch(first)) == first
    assert decode_archive(encode_batch(first) + encode_batch(second)) == first + second
    assert count_archive(encode_batch(first) + encode_batch(second)) == len(first) + len(second)


@_SLOW
@given(_messages, st.integers(0, 3000))
def test_the_bound_keeps_the_newest_that_fit(messages: list[ArchivedMessage], max_bytes: int) -> None:
    kept = bound_newest(messages, max_bytes)
    assert kept == messages[len(messages) - len(kept):]  # a suffix: the oldest went first
    if kept:
        assert len(encode_batch(kept)) <= max_bytes
    if len(kept) < len(messages):  # one more of the older ones would not have fitted
        assert len(encode_batch(messages[len(messages) - len(kept) - 1:])) > max_bytes


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_decode_or_raise_the_archive_error(data: bytes) -> None:
    try:
        decode_archive(data)
    except ArchiveDecodeError as exc:
        if exc.reason != "invalid":  # the count reads each batch's frame and row count, not the rows themselves
            with pytest.raises(ArchiveDecodeError):
                count_archive(data)
        assert exc.reason in {"corrupt", "version", "invalid"}
        assert isinstance(exc, StateError)


@pytest.mark.parametrize("damage", ["truncate", "flip", "version", "length"])
def test_corrupt_archive_bytes_raise_a_clear_error(damage: str) -> None:
    data = bytearray(encode_batch([_msg(i, "player", f"message number {i} about the castle") for i in range(50)]))
    if damage == "truncate":
        data = data[:-7]
    elif damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "version":
        data[4] = 99
    else:
        data[0] = 0xFF
    with pytest.raises(ArchiveDecodeError):
        decode_archive(bytes(data))
    with pytest.raises(ArchiveDecodeError):
        count_archive(bytes(data))


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic"])
def test_corrupt_index_bytes_raise_a_clear_error(damage: str) -> None:
    data = bytearray(SearchIndex.of([_msg(i, "player", f"message {i} at the harbour") for i in range(200)]).to_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        data[0] ^= 0xFF
    with pytest.raises(ArchiveDecodeError):
        SearchIndex.from_bytes(bytes(data))


def test_an_archived_message_needs_an_aware_time_a_known_speaker_and_an_id() -> None:
    with pytest.raises(InvalidMessageError):
        ArchivedMessage("1:a", "player", "hi", datetime(2026, 1, 1))
    with pytest.raises(InvalidMessageError):
        ArchivedMessage("1:a", "narrator", "hi")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        ArchivedMessage("", "player", "hi")


def test_stable_ids_depend_on_the_message_not_on_when_they_are_computed() -> None:
    assert stable_id("c", 7, "player", "hi") == stable_id("c", 7, "player", "hi")
    others = {stable_id("c", 8, "player", "hi"), stable_id("d", 7, "player", "hi"),
              stable_id("c", 7, "assistant", "hi"), stable_id("c", 7, "player", "hi!")}
    assert stable_id("c", 7, "player", "hi") not in others and len(others) == 4


@_SLOW
@given(st.lists(st.lists(st.integers(0, 40), max_size=12), max_size=6))
def test_appending_is_idempotent_by_id(batches: list[list[int]]) -> None:
    archive = InMemoryArchive()
    archived: list[ArchivedMessage] = []
    for batch in batches:
        messages = [_msg(n, "player", f"fact {n} zorblat") for n in batch]
        added = archive.append("c", messages)
        assert added == new_messages(archived, messages)
        archived += added
    assert len({m.id for m in archived}) == len(archived)
    results = archive.search("c", "zorblat", max_tokens=100_000)
    shown = [r["text"] for r in results] + [c["text"] for r in results for c in r["context"]]
    assert len(shown) == len(set(shown)) <= len(archived)


def _chatter(size: int, seed: int) -> list[ArchivedMessage]:
    rng = random.Random(seed)
    common = ["where", "is", "the", "clue", "castle", "church", "key", "map", "ok", "lol", "we", "go", "now", "next", "hint", "team", "points", "café"]
    rare = [f"w{n:05d}" for n in range(20_000)]
    return [_msg(n, rng.choice(("player", "assistant")),
                 " ".join(rng.choice(common if rng.random() < 0.6 else rare) for _ in range(rng.randint(1, 25))))
            for n in range(size)]


@pytest.fixture(scope="module")
def big_archive() -> tuple[InMemoryArchive, list[ArchivedMessage]]:
    messages = _chatter(10_000, 1)
    messages[4_321] = _msg(4_321, "player", "what was the clue at the church?")
    messages[4_322] = _msg(4_322, "assistant", "The clue at the church is the word Quillfeather, under the bell.")
    messages[7_000] = _msg(7_000, "player", "宝の地図は神社の裏にあります")
    messages[7_001] = _msg(7_001, "player", "กุญแจอยู่ที่สะพานเก่า")
    messages[7_002] = _msg(7_002, "player", "钥匙在博物馆的二楼")
    messages[8_000] = _msg(8_000, "player", "Meet me at the Café Élysée on Saturday 🏰")
    archive = InMemoryArchive()
    assert len(archive.append("c", messages)) == 10_000
    return archive, messages


def test_search_finds_a_planted_fact_among_ten_thousand_messages_with_its_answer(big_archive: tuple[InMemoryArchive, list[ArchivedMessage]]) -> None:
    archive, _ = big_archive
    results = archive.search("c", "what was the clue at the church again", max_tokens=500)
    top = results[0]
    assert top["text"] == "what was the clue at the church?" and top["speaker"] == "player"
    assert top["at"] == (datetime(2026, 9, 1, tzinfo=UTC) + timedelta(minutes=4_321)).isoformat()
    assert "Quillfeather" in " ".join(c["text"] for c in top["context"])  # the answer came with the question


@pytest.mark.parametrize(("query", "expected"), [
    ("地図は神社", "宝の地図は神社の裏にあります"),
    ("กุญแจอยู่ที่สะพาน", "กุญแจอยู่ที่สะพานเก่า"),
    ("钥匙在博物馆", "钥匙在博物馆的二楼"),
    ("cafe elysee", "Meet me at the Café Élysée on Saturday 🏰"),
    ("CAFÉ ÉLYSÉE", "Meet me at the Café Élysée on Saturday 🏰"),
    ("the 🏰 one", "Meet me at the Café Élysée on Saturday 🏰"),
    ("meeting at the cafe", "Meet me at the Café Élysée on Saturday 🏰"),
])
def test_queries_without_spaces_accents_or_case_find_their_message(
        big_archive: tuple[InMemoryArchive, list[ArchivedMessage]], query: str, expected: str) -> None:
    archive, _ = big_archive
    assert archive.search("c", query, max_tokens=300)[0]["text"] == expected


@pytest.mark.parametrize("query", ['"', "NOT AND OR", "NEAR(a b)", "clue*", "a:b", "^church", "-", "", "   ", "😀"])
def test_any_query_is_words_never_an_fts_expression(big_archive: tuple[InMemoryArchive, list[ArchivedMessage]], query: str) -> None:
    archive, _ = big_archive
    assert isinstance(archive.search("c", query, max_tokens=200), list)


def test_a_paragraph_long_query_still_answers(big_archive: tuple[InMemoryArchive, list[ArchivedMessage]]) -> None:
    archive, _ = big_archive
    query = " ".join(f"w{n:05d}" for n in range(0, 20_000, 40)) + " Quillfeather"
    assert archive.search("c", query, max_tokens=300)


@pytest.mark.parametrize("budget", [0, 10, 40, 120, 1000])
def test_results_stay_within_the_token_budget(big_archive: tuple[InMemoryArchive, list[ArchivedMessage]], budget: int) -> None:
    archive, _ = big_archive
    counter = EstimateCounter()
    results = archive.search("c", "clue church castle", max_tokens=budget)
    shown = [*results, *(c for r in results for c in r["context"])]
    assert sum(4 + counter.count_text(m["speaker"]) + counter.count_text(m["text"]) for m in shown) <= budget


def test_an_index_stored_and_loaded_answers_alike_and_goes_on_appending() -> None:
    index = SearchIndex.of([_msg(n, "player", f"note {n} plumbrick") for n in range(30)])
    loaded = SearchIndex.from_bytes(index.to_bytes())
    assert loaded.rank("plumbrick", 50) == index.rank("plumbrick", 50) and len(loaded) == 30
    assert loaded.add([_msg(30, "tool", "the dragon ate the plumbrick"), _msg(3, "player", "note 3 plumbrick")]) == [
        _msg(30, "tool", "the dragon ate the plumbrick")]
    assert loaded.messages(30, 30)[30].speaker == "tool"
    assert recall(loaded, "dragon", max_tokens=200)[0]["text"] == "the dragon ate the plumbrick"


def test_erase_forgets_the_conversation_only() -> None:
    archive = InMemoryArchive()
    assert isinstance(archive, Archive)
    archive.append("a", [_msg(1, "player", "secret grumbleweed")])
    archive.append("b", [_msg(1, "player", "secret grumbleweed")])
    archive.erase("a")
    assert archive.search("a", "grumbleweed", max_tokens=100) == []
    assert archive.search("b", "grumbleweed", max_tokens=100)[0]["text"] == "secret grumbleweed"


def test_terms_fold_case_and_accents_and_cut_unspaced_scripts_into_bigrams() -> None:
    assert fold("Ça VA, Élysée") == "ca va, elysee"
    assert terms("次の目的地") == ["次の", "の目", "目的", "的地"]
    assert terms("नमस्ते दोस्त") == ["नमस्ते", "दोस्त"]  # Indic vowel signs stay inside their word
    assert terms("a 👍 b") == ["a", "👍", "b"]


def test_english_inflections_find_each_other() -> None:
    archive = InMemoryArchive()
    archive.append("c", [_msg(0, "assistant", "The lanterns are guarded by Oswin."), _msg(1, "player", "ok"),
                         _msg(2, "player", "ok"), _msg(3, "player", "the guard said hi"), _msg(4, "player", "ok")])
    assert archive.search("c", "lantern guard", max_tokens=200)[0]["text"] == "The lanterns are guarded by Oswin."


def test_every_damaged_byte_of_a_batch_is_an_error_never_other_text() -> None:
    messages = [_msg(i, "player", f"message {i} about the castle gate") for i in range(5)]
    data = encode_batch(messages)
    for at in range(4, len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0x20
        try:
            decoded = decode_archive(bytes(damaged))
        except ArchiveDecodeError:
            continue
        assert decoded == messages, at  # a bit the decoder never reads (padding) changes nothing


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 9_998), st.sampled_from(["Zephyrine", "Ölmühle", "灯台守", "ประภาคาร", "🦉"]))
def test_a_fact_planted_anywhere_among_ten_thousand_is_found_first(position: int, word: str) -> None:
    messages = _chatter(10_000, 2)
    messages[position] = _msg(position, "player", f"the password is {word}")
    messages[position + 1] = _msg(position + 1, "assistant", "Noted, I will remember it.")
    results = recall(SearchIndex.of(messages), f"password {word}", max_tokens=200)
    assert results[0]["text"] == f"the password is {word}"
    assert "Noted, I will remember it." in [c["text"] for c in results[0]["context"]]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_any_index_bytes_load_or_raise_the_archive_error(tail: bytes) -> None:
    for data in (tail, b"PRI1" + tail):
        try:
            SearchIndex.from_bytes(data)
        except ArchiveDecodeError:
            pass
