"""Text from players and models made safe to print on an operator's terminal.

A player's message, a model's reply, a tool's result or an id a producer chose can hold terminal escapes
("\\x1b[2J" clears the screen, OSC sequences set the title or write to the clipboard), a carriage return that
overwrites what came before on the line, other C0/C1 controls, or Unicode bidi overrides that show a line in an
order other than the bytes'. What the ``parley`` commands print from such text goes through this module:

- :func:`for_terminal` (plain text): every control character but the newline, and every bidi control, is shown
  as its escape (``\\x1b``, ``\\r``, ``\\t``, ``\\u202e``); a newline inside the text stays a newline and the lines
  after it are indented, so a message cannot pass one of its lines off as a line of the command's own output.
- :func:`json_for_terminal`: JSON (``ensure_ascii=False``, so readable non-Latin text) in which the same characters
  are written as ``\\uXXXX`` escapes: still valid JSON meaning the same thing (JSON already escapes C0 controls;
  C1 controls and bidi controls it would write as they are).
"""

from __future__ import annotations

import json
import re
from typing import Any

# C0 (but the newline), DEL and C1 controls; the bidi embeddings, overrides, isolates and marks; the line and
# paragraph separators. Zero-width joiners and variation selectors are left alone: emoji are built from them.
_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def for_terminal(text: object, indent: str = "    ") -> str:
    """``text`` (anything: it is ``str()``-ed) with its controls shown escaped and its later lines indented."""
    return _UNSAFE.sub(_escape, str(text)).replace("\n", "\n" + indent)


def json_for_terminal(obj: Any, **dumps: Any) -> str:
    """``json.dumps(obj, ensure_ascii=False, **dumps)`` with C1 and bidi controls escaped as ``\\uXXXX``."""
    text = json.dumps(obj, ensure_ascii=False, **dumps)
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
