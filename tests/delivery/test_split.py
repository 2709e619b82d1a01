from __future__ import annotations

import itertools
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.channels.split import WHATSAPP_TEXT_LIMIT, split_message


def words(text: str) -> list[str]:
    return text.split()


def test_short_text_is_one_part() -> None:
    assert split_message("  Hello there!  ") == ["Hello there!"]


def test_ten_thousand_characters_split_at_paragraphs() -> None:
    paras = [f"Paragraph {i}. " + ("The clue is near the old theatre. " * 30).strip() for i in range(10)]
    text = "\n\n".join(paras)
    assert len(text) > 10_000
    parts = split_message(text)
    assert len(parts) == 4  # three paragraphs (~1,050 characters each) fit in a part, four do not
    assert all(len(p) <= WHATSAPP_TEXT_LIMIT for p in parts)
    assert all(p.startswith("Paragraph") for p in parts)  # every cut is at a paragraph boundary
    assert words(" ".join(parts)) == words(text)


def test_sentence_boundaries_when_no_paragraphs() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(500))
    parts = split_message(text, limit=300)
    assert all(len(p) <= 300 and p.endswith(".") for p in parts)
    assert words(" ".join(parts)) == words(text)


def test_hard_cut_never_splits_a_combining_sequence() -> None:
    text = "e\u0301" * 100  # e + combining acute, no spaces at all
    parts = split_message(text, limit=15)
    for p in parts:
        assert not unicodedata.combining(p[0])
        assert len(p) <= 15
    assert "".join(parts) == text


def test_invalid_limit() -> None:
    with pytest.raises(ValueError):
        split_message("x", limit=0)


@settings(max_examples=400, deadline=None)
@given(st.text(min_size=1, max_size=3000), st.integers(min_value=5, max_value=500))
def test_split_properties(text: str, limit: int) -> None:
    parts = split_message(text, limit=limit)
    assert parts
    assert all(0 < len(p) <= limit for p in parts)
    if text.strip():
        assert all(p == p.strip() for p in parts)
        assert "".join("".join(p.split()) for p in parts) == "".join(text.split())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="abc de.\n", min_size=1, max_size=60), min_size=1, max_size=40))
def test_parts_are_as_few_as_greedy_packing_allows(chunks: list[str]) -> None:
    text = "".join(chunks)
    parts = split_message(text, limit=80)
    # Greedy: each part (but the last) could not have taken the next word too.
    for a, b in itertools.pairwise(parts):
        nxt = b.split()[0] if b.split() else ""
        assert len(a) + 1 + len(nxt) > 80 or "\n" in text
