"""Generated game chat for the recall bench: many sessions of players and the game master talking, in several
languages and registers, with facts planted early and asked about much later.

Why generated this way: a lexical ranking looks good on text whose every message shares no word with the others
(made-up vocabulary alone) and bad on text where every message says "clue" and "church". The chatter here mixes
made-up words (bench/player_texts.py), real words that recur all over a game (place names, "clue", "where"), short
replies ("ok", "lol", "👍"), typos, accents, and messages in Spanish, French, German, Russian, Japanese, Chinese and
Thai; the planted facts use the same common words as the chatter, so the ranking has to find the rare ones.
Every text is a pure function of its seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bench.player_texts import player_message, varied
from worker.conversation.recall.archived import ArchivedMessage, Speaker, stable_id

PLACES = ("church", "café", "castle", "harbour", "market", "station", "museum", "bridge", "library", "theatre", "park")
THINGS = ("clue", "key", "map", "riddle", "code", "box", "letter", "coin", "lantern", "photo")
SHORT = ("ok", "k", "lol", "yes", "no", "ya", "thx", "thanks!", "👍", "😂😂", "hmm", "wait", "what?", "ok ok", "next",
         "haha", "sure", "🙏", "got it", "omg", "brb", "done", "hello?", "yess", "nope")
CHATTER_EN = ("where do we go now", "i think the {t} was at the {p}", "is the {p} open on sunday?",
              "we lost the {t} again lol", "my friend says the {p} is closed", "can u give me a hint",
              "how many points do we have", "the {t} doesnt make sense", "going to the {p} now",
              "wait which {p}?", "this {t} is too hard", "did we already solve the {p} one?")
CHATTER_OTHER = ("¿Dónde está el {p}? no encuentro la pista", "On est devant le musée, c'est fermé", "Wo ist das Theater?",
                 "Привет, где следующая цель?", "次の目的地はどこですか", "我们在火车站等你", "ตอนนี้เราอยู่ที่ตลาด",
                 "la pista del café era difícil", "Das Rätsel ist zu schwer für uns", "merci pour l'indice !")
MASTER = ("Good question! Look around the {p} for anything unusual.", "Your team has {n} points so far.",
          "Nice work! The next step waits near the {p}.", "Remember: every {t} leads somewhere.",
          "Take your time. The {p} is open until {n} o'clock.", "That is not quite it, try again with the {t}.")


@dataclass(frozen=True)
class Fact:
    """A fact planted in the chat: the messages that hold it and a later question about it."""

    evidence_ids: tuple[str, ...]
    query: str
    kind: str


def _typo(rng: random.Random, text: str) -> str:
    if len(text) < 5 or rng.random() > 0.3:
        return text
    i = rng.randrange(1, len(text) - 1)
    return text[:i] + text[i + 1] + text[i] + text[i + 2:]


def _chatter(rng: random.Random, speaker: Speaker, seed: int) -> str:
    roll = rng.random()
    fill = {"p": rng.choice(PLACES), "t": rng.choice(THINGS), "n": rng.randint(2, 99)}
    if speaker == "player":
        if roll < 0.3:
            return rng.choice(SHORT)
        if roll < 0.55:
            return _typo(rng, rng.choice(CHATTER_EN).format(**fill))
        if roll < 0.65:
            return rng.choice(CHATTER_OTHER).format(**fill)
        return player_message(seed)
    if roll < 0.5:
        return rng.choice(MASTER).format(**fill) + " " + varied(rng, rng.randint(0, 80))
    return varied(rng, rng.randint(20, 300))


# Each planted fact: the player's question, the master's answer (with {x}: a rare made-up name), the question asked
# much later (in other words), its kind, and the fillers of {k} that tell one such fact from the next.
_FACTS = (
    ("what was the {k} at the {p}?", "The {k} at the {p} is the word {x}, carved under the bell.",
     "what was the {k} at the {p} again", "lexical", THINGS),
    ("which café should we go to on {k}", "Go to Café {X} on the corner on {k}, they know the password.",
     "which cafe did you tell me about on {k}", "accents", ("monday", "tuesday", "wednesday", "friday", "saturday")),
    ("where is the {k} hidden?", "The {k} is hidden behind the {x} statue near the {p}.",
     "WHERE was the {k} hidden", "case", THINGS),
    ("¿cuál es la contraseña del {k}?", "La contraseña del {k} es «{x}».", "contrasena del {k}", "spanish",
     ("museo", "castillo", "puerto", "mercado", "teatro")),
    ("宝の{k}はどこですか", "宝の{k}は{x}神社の裏にあります", "{k}はどこ", "japanese", ("地図", "鍵", "手紙", "写真", "箱")),
    ("{k}在哪里", "{k}在{x}博物馆的二楼", "{k}在哪", "chinese", ("钥匙", "地图", "信封", "照片", "硬币")),
    ("{k}อยู่ที่ไหน", "{k}อยู่ที่สะพาน {x}", "{k}อยู่ไหน", "thai", ("กุญแจ", "แผนที่", "จดหมาย", "รูปถ่าย", "เหรียญ")),
    ("remember my {k} is {x} 🐉", "Got it, {k} {X} 🐉!", "what is my {k}", "vague",
     ("team name", "nickname", "favourite colour", "code word", "lucky number")),
    # Other forms of the same words: what a stemmer would help with.
    ("we should look for {k}s in the old lighthouse", "Yes! The {k}s in the lighthouse are guarded by {x}.",
     "looking for the {k} lighthouse guard", "inflection", ("lantern", "coin", "letter", "painting", "bottle")),
    # A typo in the question's rare word: what no lexical ranking can mend.
    ("how do we open the {k} door", "The {k} door opens with the word {x}.", "how to opn the {kt} dor", "typo",
     ("crimson", "cobalt", "iron", "secret", "northern")),
)


def conversation(size: int, seed: int, facts: int = 50) -> tuple[list[ArchivedMessage], list[Fact]]:
    """``size`` archived messages of one conversation over weeks, with ``facts`` facts planted in its first half."""
    rng = random.Random(f"recall:{seed}")
    start = datetime(2026, 9, 1, 18, tzinfo=UTC)
    plant_at = {rng.randrange(0, max(1, size // 2)): i for i in range(facts)}
    messages: list[ArchivedMessage] = []
    planted: list[Fact] = []
    speaker: Speaker = "player"

    def add(who: Speaker, text: str) -> str:
        ordinal = len(messages)
        ident = stable_id(f"game-{seed}", ordinal, who, text)
        messages.append(ArchivedMessage(ident, who, text, start + timedelta(minutes=7 * ordinal)))
        return ident

    while len(messages) < size:
        which = plant_at.pop(len(messages), None)
        if which is not None:
            question, answer, query, kind, fillers = _FACTS[which % len(_FACTS)]
            filler = fillers[which // len(_FACTS) % len(fillers)]
            fill = {"p": rng.choice(PLACES), "k": filler, "kt": filler[:-2] + filler[-1]}
            name = varied(rng, 8).split()[-1] + str(rng.randint(10, 99))
            fill.update(x=name, X=name.title())
            ids = (add("player", question.format(**fill)), add("assistant", answer.format(**fill)))
            planted.append(Fact(ids, query.format(**fill), kind))
            continue
        who: Speaker = rng.choices(("player", "assistant", "game", "operator"), (10, 10, 1, 0.2))[0]
        add(who, _chatter(rng, who if who == "player" else "assistant", rng.randrange(1 << 30)))
        speaker = who
    del speaker
    return messages[:size], planted
