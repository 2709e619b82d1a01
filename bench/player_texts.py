"""Text for the benches as varied as real players' messages: made-up words drawn by frequency, lengths from a greeting
to a paragraph, some emoji, some other scripts, numbers and punctuation.

Why: a bench that sends "hi 1", "hi 2"... measures one size of message, in ASCII, whose JSON, msgpack, token counts
and prompt prefixes are all alike; the figures then describe that text, not players'. Every text here is a pure
function of its seed, so old and new code in one run (and two runs) see the same messages.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import random

VOCABULARY = 20_000
#: A few of the messages are in another script or carry emoji, as on a WhatsApp game's chats.
EMOJI = ("😀", "👍", "🎉", "📍", "🏰", "😅", "🔥", "❤️", "🤔", "🙏")
OTHER_SCRIPTS = ("Привет, где следующая цель?", "¿Dónde está el castillo?", "次の目的地はどこですか",
                 "أين الهدف التالي؟", "Wo ist das Theater?", "नमस्ते, अगला लक्ष्य कहाँ है?")


@functools.cache
def vocabulary() -> tuple[tuple[str, ...], list[float]]:
    """20,000 distinct made-up words (syllables; the most frequent the shortest, as in English) and the cumulative
    Zipf weights (s = 1) to draw them by."""
    rng = random.Random(33)
    onsets, vowels = [*"bcdfghjklmnprstvwyz", "br", "ch", "cl", "dr", "fl", "gr", "pl", "sh", "st", "th", "tr"], "aeiou"
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < VOCABULARY:
        syllables = 1 + min(4, int(rng.expovariate(1.0) + len(words) / 6000))
        word = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(syllables))
        word += rng.choice(("", "", "n", "s", "t", "r", "ng"))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return tuple(words), list(itertools.accumulate(1 / (rank + 1) for rank in range(VOCABULARY)))


def varied(rng: random.Random, length: int) -> str:
    """Words drawn from the vocabulary until the text is ``length`` characters long."""
    words, cumulative = vocabulary()
    out: list[str] = []
    size = 0
    while size < length:
        word = words[min(VOCABULARY - 1, bisect.bisect(cumulative, rng.random() * cumulative[-1]))]
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def player_message(seed: str | int) -> str:
    """One player's message: lengths log-normal around 40 characters (a greeting to a paragraph of ~1,500), one in
    ten with an emoji, one in twenty in another script, one in eight with a number."""
    rng = random.Random(f"player:{seed}")
    length = max(2, min(1500, int(rng.lognormvariate(3.6, 0.9))))
    text = varied(rng, length)
    if rng.random() < 0.05:
        text = rng.choice(OTHER_SCRIPTS) + " " + text
    if rng.random() < 0.125:
        text += f" {rng.randint(1, 9999)}"
    text += rng.choice(("", "", "?", "!", ".", "??", "..."))
    if rng.random() < 0.1:
        text += " " + rng.choice(EMOJI)
    return text
