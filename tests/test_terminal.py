"""What the ``parley`` commands print of players' and models' text cannot drive the operator's terminal: terminal
escapes, carriage returns, other C0/C1 controls and bidi controls are shown escaped (worker.cli.terminal)."""

from __future__ import annotations

import json
import unicodedata

import pytest

from worker.cli.terminal import for_terminal, json_for_terminal

#: Clears the screen, sets the window title, returns to the line's start to overwrite it, reverses the text's
#: direction, an 8-bit CSI and NEL, a DEL, a tab; then a second line.
HOSTILE = "hi\x1b[2J\x1b]0;owned\x07\rfake line\u202eevil\u2066\x9b31m\x85\x7f\tdone\nsecond line"
BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029")


def unsafe(printed: str, *, newlines: bool = True) -> list[str]:
    """The characters of ``printed`` a terminal would act on (the newline, where allowed, aside)."""
    return [c for c in printed if (unicodedata.category(c) == "Cc" and not (newlines and c == "\n")) or c in BIDI]


def test_unsafe_catches_what_it_must() -> None:
    assert unsafe(HOSTILE) == ["\x1b", "\x1b", "\x07", "\r", "\u202e", "\u2066", "\x9b", "\x85", "\x7f", "\t"]


def test_plain_text_shows_every_control_escaped_and_indents_later_lines() -> None:
    shown = for_terminal(HOSTILE, indent="  ")
    assert unsafe(shown) == []
    assert shown == ("hi\\x1b[2J\\x1b]0;owned\\x07\\rfake line\\u202eevil\\u2066\\x9b31m\\x85\\x7f\\tdone\n"
                     "  second line")


@pytest.mark.parametrize("text", ["Harrogate \U0001f3ad théâtre", "\U0001f468\u200d\U0001f469\u200d\U0001f467",
                                  "\u0645\u0631\u062d\u0628\u0627", "\u2764\ufe0f", "a\\x1b literally"])
def test_readable_text_is_left_as_it_is(text: str) -> None:
    assert for_terminal(text) == text
    assert json_for_terminal(text) == json.dumps(text, ensure_ascii=False)


def test_json_stays_valid_and_means_the_same() -> None:
    obj = {"reply": HOSTILE, HOSTILE: [HOSTILE, 1, None]}
    shown = json_for_terminal(obj, indent=2)
    assert unsafe(shown) == []
    assert json.loads(shown) == obj
