"""The terms of a text for lexical search: case and accents folded, words split, scripts written without spaces cut
into character bigrams.

Why bigrams: Chinese, Japanese and Thai put no space between words, so a word splitter sees a whole sentence as one
"word" that no query matches. Overlapping pairs of characters are the usual answer of full-text engines without a
dictionary (Lucene's CJK analyzer): a query's pairs must all be present, in any order, which finds a phrase written
inside a longer run. Emoji are terms of their own (players search "the 🏰 one").
"""

from __future__ import annotations

import re
import unicodedata

#: Scripts written without spaces between words: Han, kana, Thai, Lao, Khmer, Myanmar.
_UNSPACED = "\u0e00-\u0e7f\u0e80-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_EMOJI = "\u2600-\u27bf\U0001f300-\U0001faff"
#: Letters' marks that ``\w`` does not match but that belong inside a word: Indic vowel signs and viramas, Arabic
#: vowels (without them ``नमस्ते`` would split in two).
_WORD_MARKS = "\u0900-\u0dff\u064b-\u065f\u0670"
_MARKS = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")
_TERM = re.compile(rf"(?P<run>[{_UNSPACED}]+)|(?P<emoji>[{_EMOJI}])|(?P<word>(?:[^\W{_UNSPACED}]|[{_WORD_MARKS}])+)")


def fold(text: str) -> str:
    """``text`` without case or Latin/Greek/Cyrillic accents (``Café`` and ``cafe`` fold alike). Only the combining
    diacritics are dropped: the marks that are letters' vowels in Devanagari or Thai are kept."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return unicodedata.normalize("NFC", _MARKS.sub("", decomposed))


def terms(text: str) -> list[str]:
    """The search terms of ``text``, in order, repeats kept (a term's frequency counts in ranking)."""
    out: list[str] = []
    for match in _TERM.finditer(fold(text)):
        run = match["run"]
        if run is None:
            out.append(match.group())
        elif len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i:i + 2] for i in range(len(run) - 1))
    return out
