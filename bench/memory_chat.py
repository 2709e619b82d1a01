"""Generated long game conversations for the memory bench: a GPS city game played on WhatsApp over weeks, with facts
planted early, changed later and asked about much later.

A conversation is 20 to 60 sessions over several weeks (an evening's walk, a Saturday's hunt, a two-line check-in),
hundreds of turns: the player's messages (in one of several languages, Chinese and Japanese among them, with typos,
slang, emoji, one-word replies, voice-note-like run-ons and the player's own asides), the guide's answers, and the
game's events (a tag, a move; keyed facts the game keeps current: the target, the score). Facts of several sorts are
planted in it: things the player says (the team's name, when the team meets, a sister's age), things the guide says
(a riddle, a café with the bonus stamp, a box's code), things the game reports (a tag); some are changed later (the
team renamed, the meeting moved, the code reset by the game). Questions come sessions later, in other words than the
planting, as the player's own messages:

- ``single``: one fact, said once;
- ``updated``: a fact that changed: its latest value (the evidence is the change);
- ``temporal``: "when did we tag ...", "what did you tell me on Saturday about ...";
- ``multi``: two facts from different sessions combined;
- ``unanswerable``: about something never said (no evidence).

Each question carries the ids of its evidence messages. Every text is a pure function of the seed. The chatter shares
the facts' common words ("café", "team", "code", "meet") so finding a fact takes its rare words.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

from bench.player_texts import EMOJI, player_message, varied
from bench.recall_chat import CHATTER_EN, MASTER, PLACES, SHORT, THINGS

Kind = Literal["single", "updated", "temporal", "multi", "unanswerable"]
KINDS: tuple[Kind, ...] = ("single", "updated", "temporal", "multi", "unanswerable")
LANGUAGES = ("en", "en", "en", "es", "fr", "de", "zh", "ja")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
LANDMARKS = ("Harrogate Theatre", "the Royal Pump Room", "Valley Gardens", "the Mercer Gallery", "Bettys corner",
             "the Stray fountain", "Montpellier Quarter", "the Old Swan", "Christ Church", "the bandstand",
             "the Turkish Baths", "Crescent Gardens", "the Cenotaph", "the Kursaal", "Ripon Road bridge")
ANIMALS = ("Wombats", "Foxes", "Otters", "Ravens", "Badgers", "Lynxes", "Herons", "Moles", "Geckos", "Yaks")
COLOURS = ("Purple", "Crimson", "Lazy", "Sneaky", "Golden", "Midnight", "Turbo", "Soggy", "Cosmic", "Feral")
SLANG = ("ngl", "tbh", "fr", "lowkey", "bruh", "idk", "omw", "rn", "imo", "lmao", "istg", "smh")
FOREIGN = {
    "es": ("¿dónde está la próxima pista?", "jajaja no puede ser", "vamos al {p} ahora", "¿cuántos puntos tenemos?",
           "estoy cansadísimo la verdad", "el {t} no tiene sentido", "ok vale", "¡qué guay!"),
    "fr": ("on est perdus lol", "c'est où le {p} ?", "trop dur ce {t}", "on a combien de points ?", "j'arrive",
           "merci beaucoup !", "attends on cherche encore", "ça marche"),
    "de": ("wo ist das nächste Ziel?", "haha ok", "wir sind am {p}", "das Rätsel ist echt schwer", "wie viele Punkte?",
           "moment noch", "alles klar danke", "boah bin müde"),
    "zh": ("下一个目标在哪里", "我们到了", "哈哈哈好难啊", "这个线索看不懂", "我们现在多少分", "等一下我们在找",
           "谢谢你！", "走吧走吧"),
    "ja": ("次の目的地はどこ？", "着いたよ", "むずかしすぎる笑", "このヒントわからない", "今何ポイント？", "ちょっと待って",
           "ありがとう！", "疲れた〜"),
}
RUN_ON = ("so um yeah we just got to the {p} and theres like a {t} thing on the wall but {friend} thinks its not it and "
          "then we walked all the way round and i think we missed the turn by the {p2} so basically were a bit lost "
          "but its fine its nice out", "ok so voice note basically we found nothing at the {p} the {t} wasnt there "
          "and my phone is on 8 percent so if i go quiet thats why anyway {friend} says hi and we are getting coffee "
          "first", "right so what happened was we went to the {p} first because {friend} wanted to see it and "
          "then the app glitched and showed the old target and we were like wait what and now were by the {p2}")
FRIENDS = ("Maya", "Tomás", "Aiko", "Jonas", "Priya", "Lukas", "Chloé", "Wei", "Sam", "Nadia", "Olu", "Femke")
_UNSET = datetime(2000, 1, 1, tzinfo=UTC)  # a turn's time until its session is laid out
#: Small spots the game has players tag all the time (the landmarks are the big ones).
MINOR_SPOTS = ("the red postbox", "the sundial", "the old tram stop", "the blue door", "the fountain steps",
               "the drinking trough", "the painted bench", "the clock tower gate", "the stone lion", "the mile marker")
STREETS = ("Cold Bath Road", "Parliament Street", "Station Parade", "Kings Road", "Oxford Street", "James Street")


@dataclass(frozen=True)
class Question:
    """A later question and the ids of the messages that answer it (none for an unanswerable one)."""

    kind: Kind
    text: str
    evidence: tuple[str, ...]
    #: For an ``updated`` fact: the messages with its earlier value (a prompt holding them alone answers stale).
    superseded: tuple[str, ...] = ()


@dataclass
class Turn:
    """One input of the conversation: a player's message (answered by ``reply``), a silent game event, or a keyed
    fact the game keeps current. ``id`` names the input's message, ``reply_id`` the guide's answer."""

    id: str
    at: datetime
    session: int
    kind: Literal["message", "event", "fact"]
    text: str
    reply: str = ""
    key: str | None = None
    question: Question | None = None

    @property
    def reply_id(self) -> str:
        return f"{self.id}r"


@dataclass
class GameChat:
    conversation_id: str
    language: str
    turns: list[Turn] = field(default_factory=list)

    @property
    def questions(self) -> list[Question]:
        return [t.question for t in self.turns if t.question is not None]

    def texts(self) -> dict[str, str]:
        """Every message's text by its id (the players' and events' inputs, the guide's answers)."""
        out: dict[str, str] = {}
        for t in self.turns:
            out[t.id] = t.text
            if t.reply:
                out[t.reply_id] = t.reply
        return out


# --- the player's voice ------------------------------------------------------------------------------


@dataclass
class Voice:
    """How one player writes: their language, how often they slip, shorten, add emoji or send a voice note."""

    rng: random.Random
    language: str
    typos: float
    emoji: float
    short: float
    voice: float
    lowercase: bool

    def style(self, text: str) -> str:
        """The player's habits applied to a text they type (never to the rare words: a typo there is in the
        question's words only when the player makes it)."""
        rng = self.rng
        if self.lowercase and text.isascii():
            text = text.lower()
        if rng.random() < self.typos and len(text) > 8:
            i = rng.randrange(1, len(text) - 2)
            if text[i].isalpha() and text[i + 1].isalpha():
                text = text[:i] + text[i + 1] + text[i] + text[i + 2:]
        if rng.random() < self.emoji:
            text += " " + rng.choice(EMOJI) * rng.choice((1, 1, 2, 3))
        if rng.random() < 0.08 and self.language == "en":
            text = f"{rng.choice(SLANG)} {text}"
        return text

    def chatter(self, seed: int) -> str:
        """A message that carries no planted fact but often shares the facts' common words."""
        rng = self.rng
        fill = {"p": rng.choice(PLACES + LANDMARKS), "p2": rng.choice(PLACES), "t": rng.choice(THINGS),
                "friend": rng.choice(FRIENDS), "when": rng.choice(WHEN), "n": rng.randint(2, 30)}
        roll = rng.random()
        if roll < self.short:
            return rng.choice(SHORT)
        if roll < self.short + self.voice:
            return rng.choice(RUN_ON).format(**fill)
        if self.language != "en" and roll < 0.75:
            return self.style(rng.choice(FOREIGN[self.language]).format(**fill) + rng.choice(("", "", " " + fill["p"])))
        if roll < 0.6:
            body = rng.choice(CHATTER_EN + DISTRACTORS).format(**fill)
            return self.style(rng.choice(OPENERS) + body + rng.choice(TAILS))
        return self.style(player_message(seed))


#: Chatter with the facts' common words and none of their values.
DISTRACTORS = ("is the café by the {p} open {when}", "what time do we meet {when}?", "the code didnt work at the {p}",
               "our team is so slow {when}", "we should rename the team lol", "any cafés near the {p}?",
               "did the riddle for the {p} change?", "who's got the {t}", "{friend} is late again", "meet u at the {p}",
               "the box by the {p} was locked", "where's the stamp card", "when did we start this game haha",
               "{friend} wants to meet at the {p} {when}", "is the {p} box code still the same", "{n} min away",
               "can we skip the {p} {when}", "the team chat is dead lol", "{friend} says the {t} is fake")
OPENERS = ("", "", "", "hey ", "ok so ", "sorry ", "guys ", "quick q: ", "lol ", "wait ", "hmm ", "yo ")
TAILS = ("", "", "", "?", "??", " pls", " haha", " 🙈", " rn", "!!", " tbh", "...")
WHEN = ("today", "tomorrow", "on sunday", "later", "next week", "tonight", "this weekend", "after lunch")


def guide_chatter(rng: random.Random) -> str:
    fill = {"p": rng.choice(PLACES), "t": rng.choice(THINGS), "n": rng.randint(2, 99)}
    if rng.random() < 0.6:
        return rng.choice(MASTER).format(**fill) + " " + varied(rng, rng.randint(0, 160))
    return varied(rng, rng.randint(30, 320)).capitalize() + rng.choice((".", "!", " 🙂"))


# --- the facts ---------------------------------------------------------------------------------------


def _pick(rng: random.Random, language: str, options: dict[str, tuple[str, ...]]) -> str:
    return rng.choice(options.get(language, options["en"]))


@dataclass
class Plan:
    """Where a fact's messages go: ``(session, turn)`` pairs, each added to that session, and the question's."""

    rng: random.Random
    voice: Voice
    sessions: int
    placed: list[tuple[int, Turn]] = field(default_factory=list)
    counter: int = 0

    def early(self) -> int:
        return self.rng.randrange(0, max(1, self.sessions * 2 // 5))

    def middle(self, after: int) -> int:
        return self.rng.randrange(after + 2, max(after + 3, self.sessions * 3 // 4))

    def late(self, after: int) -> int:
        """A session for the question: at least three sessions after its last evidence, in the last part."""
        lo = max(after + 3, self.sessions * 3 // 5)
        return self.rng.randrange(min(lo, self.sessions - 1), self.sessions)

    def put(self, session: int, kind: Literal["message", "event", "fact"], text: str, reply: str = "",
            key: str | None = None, question: Question | None = None) -> Turn:
        self.counter += 1
        turn = Turn(f"f{self.counter}", _UNSET, session, kind, text, reply, key, question)
        self.placed.append((session, turn))
        return turn

    def ask(self, session: int, kind: Kind, text: str, evidence: tuple[str, ...],
            superseded: tuple[str, ...] = ()) -> None:
        question = Question(kind, text if "{day}" in text else self.voice.style(text), evidence, superseded)
        self.put(session, "message", question.text, self.rng.choice(HOLDING) + " " + varied(self.rng, 60),
                 question=question)


HOLDING = ("Let me think about that.", "Good question!", "Hmm, let me check.", "Here's what I have.",
           "One sec.", "Sure.")


def team(plan: Plan) -> None:
    rng, lang = plan.rng, plan.voice.language
    old = f"{rng.choice(COLOURS)} {rng.choice(ANIMALS)}"
    new = f"{rng.choice([c for c in COLOURS if not old.startswith(c)])} {rng.choice(ANIMALS)}"
    s1 = plan.early()
    first = plan.put(s1, "message", plan.voice.style(_pick(rng, lang, {
        "en": (f"btw we're team {old} now", f"we called our team {old} lol", f"team name = {old} 🦊"),
        "es": (f"nuestro equipo se llama {old}",), "fr": (f"notre équipe s'appelle {old}",),
        "de": (f"unser Team heißt {old}",), "zh": (f"我们的队名叫{old}",), "ja": (f"チーム名は{old}にした",)})),
        f"Love it, {old}! " + guide_chatter(rng))
    s2 = plan.middle(s1)
    renamed = plan.put(s2, "message", plan.voice.style(_pick(rng, lang, {
        "en": (f"we renamed the team to {new}, {old} was cringe", f"new team name!! {new}",
               f"ok {rng.choice(FRIENDS)} made us change it, we're {new} from now on"),
        "es": (f"cambiamos el nombre del equipo: ahora somos {new}",), "fr": (f"on a changé de nom : {new}",),
        "de": (f"wir heißen jetzt {new}",), "zh": (f"我们改名了，现在叫{new}",), "ja": (f"チーム名を{new}に変えた",)})),
        f"{new} it is! " + guide_chatter(rng))
    plan.ask(plan.late(s2), "updated", _pick(rng, lang, {
        "en": ("what's our team called now?", "remind me our current team name", "whats the team name again"),
        "es": ("¿cómo se llama nuestro equipo ahora?",), "fr": ("c'est quoi le nom de notre équipe déjà ?",),
        "de": ("wie heißt unser Team nochmal?",), "zh": ("我们现在的队名是什么？",), "ja": ("今のチーム名なんだっけ？",)}),
        (renamed.id,), (first.id,))
    if rng.random() < 0.5:
        plan.ask(plan.late(s2), "temporal", _pick(rng, lang, {
            "en": ("what was our team called before we renamed it?", "what was our very first team name"),
            "es": ("¿cómo se llamaba nuestro equipo antes?",), "fr": ("c'était quoi notre premier nom d'équipe ?",),
            "de": ("wie hieß unser Team am Anfang?",), "zh": ("我们一开始的队名叫什么？",), "ja": ("最初のチーム名なんだっけ？",)}),
            (first.id,))


def meeting(plan: Plan) -> None:
    rng, lang = plan.rng, plan.voice.language
    day, day2 = rng.sample(WEEKDAYS, 2)
    hour, hour2 = rng.sample(range(8, 20), 2)
    place, place2 = rng.sample(LANDMARKS, 2)
    s1 = plan.early()
    first = plan.put(s1, "message", plan.voice.style(_pick(rng, lang, {
        "en": (f"we always meet {day.lower()}s at {hour}:00 at {place}", f"meeting point is {place}, {day} {hour}h"),
        "es": (f"quedamos los {day} a las {hour}:00 en {place}",), "fr": (f"rdv le {day} à {hour}h devant {place}",),
        "de": (f"wir treffen uns {day}s um {hour} Uhr bei {place}",), "zh": (f"我们每周{day} {hour}点在{place}集合",),
        "ja": (f"毎週{day}の{hour}時に{place}で集合ね",)})), guide_chatter(rng))
    s2 = plan.middle(s1)
    moved = plan.put(s2, "message", plan.voice.style(_pick(rng, lang, {
        "en": (f"change of plan: from now on we meet {day2} at {hour2}:30 by {place2}",
               f"meeting moved!! {day2} {hour2}:30, {place2}"),
        "es": (f"cambio de planes: ahora quedamos el {day2} a las {hour2}:30 en {place2}",),
        "fr": (f"changement : on se retrouve le {day2} à {hour2}h30 à {place2}",),
        "de": (f"neuer Treffpunkt: {day2} um {hour2}:30 bei {place2}",), "zh": (f"改时间了：{day2} {hour2}:30 在{place2}",),
        "ja": (f"集合変更：{day2}の{hour2}:30に{place2}",)})), guide_chatter(rng))
    plan.ask(plan.late(s2), "updated", _pick(rng, lang, {
        "en": ("when and where do we meet now?", "wait what time is our meetup these days", "where do we meet again?"),
        "es": ("¿dónde quedamos ahora?",), "fr": ("on se retrouve où maintenant ?",), "de": ("wo treffen wir uns jetzt?",),
        "zh": ("我们现在在哪里集合？",), "ja": ("今どこで集合するんだっけ？",)}), (moved.id,), (first.id,))


def riddle(plan: Plan) -> None:
    rng = plan.rng
    place = rng.choice(LANDMARKS)
    answer = f"'{varied(rng, 12).split()[0]} {rng.choice(('sleeps', 'waits', 'hides', 'sings'))} where the " \
             f"{rng.choice(('water', 'stone', 'clock', 'lion'))} {rng.choice(('turns', 'weeps', 'points', 'counts'))}'"
    s1 = plan.early()
    plan.put(s1, "message", plan.voice.style(f"whats the riddle for {place}?"),
             f"Here's the riddle for {place}: {answer}. Take your time!")
    told = plan.placed[-1][1]
    plan.ask(plan.late(s1), "single", rng.choice((f"remind me the riddle from {place}?",
             f"what did the {place} riddle say", f"can u repeat the {place} clue")), (told.reply_id,))


def cafe(plan: Plan) -> None:
    rng, lang = plan.rng, plan.voice.language
    name = f"Café {varied(rng, 9).split()[0].title()}"
    street = rng.choice(STREETS)
    s1 = plan.early()
    told = plan.put(s1, "message", plan.voice.style(_pick(rng, lang, {
        "en": ("where do we get the bonus stamp", "is there a café for the stamp card?", "bonus stamp where??"),
        "es": ("¿dónde nos sellan la tarjeta?",), "zh": ("在哪里盖章？",), "ja": ("スタンプはどこでもらえる？",)})),
        _pick(rng, lang, {  # the guide answers in the player's language, mostly
            "en": (f"{name} on {street} stamps your card for the bonus: ask for the hunt stamp at the counter.",),
            "es": (f"En {name}, en {street}, te sellan la tarjeta del bonus: pide el sello de la búsqueda.",),
            "zh": (f"{street}上的{name}可以给你的卡盖章，拿到奖励：在柜台要寻宝印章。",),
            "ja": (f"{street}の{name}でボーナスのスタンプを押してもらえるよ。カウンターで頼んでね。",)}))
    plan.ask(plan.late(s1), "single", _pick(rng, lang, {
        "en": ("which cafe did the bonus stamp again?", "what was that café with the stamp", "where was the stamp café"),
        "es": ("¿cuál era el café del sello?",), "zh": ("盖章的咖啡馆是哪家？",), "ja": ("スタンプのカフェどこだっけ？",)}),
        (told.reply_id,))


def box_code(plan: Plan) -> None:
    rng = plan.rng
    place = rng.choice(LANDMARKS)
    code, code2 = (f"{rng.randint(1000, 9999)}" for _ in range(2))
    s1 = plan.early()
    first = plan.put(s1, "message", plan.voice.style(f"how do we open the box at {place}"),
                     f"The lock on the box at {place} opens with {code}.")
    s2 = plan.middle(s1)
    changed = plan.put(s2, "event", f"The lock code of the box at {place} was reset to {code2}.")
    plan.ask(plan.late(s2), "updated", rng.choice((f"what's the code for the box at {place}?",
             f"box code at {place} pls", f"the {place} lock, what are the numbers")), (changed.id,), (first.reply_id,))


def personal(plan: Plan) -> None:
    rng, lang = plan.rng, plan.voice.language
    sister, age = rng.choice(FRIENDS), rng.randint(6, 14)
    allergy = rng.choice(("peanuts", "gluten", "cats", "bee stings", "shellfish"))
    s1 = plan.early()
    if rng.random() < 0.5:
        said = plan.put(s1, "message", plan.voice.style(_pick(rng, lang, {
            "en": (f"my little sister {sister} is coming today, she's {age}", f"bringing my sis {sister} ({age}) along"),
            "es": (f"hoy viene mi hermana {sister}, tiene {age} años",), "zh": (f"我妹妹{sister}今天也来，她{age}岁",),
            "ja": (f"妹の{sister}も来るよ、{age}歳",)})), guide_chatter(rng))
        plan.ask(plan.late(s1), "single", _pick(rng, lang, {"en": ("how old is my sister again?",),
                 "es": ("¿cuántos años tiene mi hermana?",), "zh": ("我妹妹几岁？",), "ja": ("妹って何歳だっけ？",)}),
                 (said.id,))
    else:
        said = plan.put(s1, "message", plan.voice.style(f"heads up im allergic to {allergy} so no stops with that pls"),
                        guide_chatter(rng))
        plan.ask(plan.late(s1), "single", rng.choice(("what am i allergic to, do you remember?",
                 "remember my allergy?")), (said.id,))


def tagged(plan: Plan) -> None:
    rng, lang = plan.rng, plan.voice.language
    place = rng.choice(LANDMARKS)
    s1 = rng.randrange(0, max(1, plan.sessions * 3 // 5))
    event = plan.put(s1, "event", f"The player tagged {place} (+{rng.choice((50, 100, 150))} points).")
    if rng.random() < 0.4:  # the other way round: the day is what the question knows
        plan.ask(plan.late(s1), "temporal", rng.choice(("which landmark did we tag on {day}?",
                 "what did we tag on {day} again")), (event.id,))
        return
    plan.ask(plan.late(s1), "temporal", _pick(rng, lang, {
        "en": (f"when did we tag {place}?", f"what day did we get {place}", f"{place} — when was that?"),
        "es": (f"¿cuándo marcamos {place}?",), "de": (f"wann haben wir {place} getaggt?",),
        "zh": (f"我们什么时候打卡了{place}？",), "ja": (f"{place}をタグしたのいつ？",)}), (event.id,))


def told_on_a_day(plan: Plan) -> None:
    rng = plan.rng
    place = rng.choice(LANDMARKS)
    detail = rng.choice(("its roof terrace opens only on the first Sunday of the month",
                         f"the hidden plaque is round the back, under the {rng.choice(('ivy', 'drainpipe', 'bench'))}",
                         f"it was a {rng.choice(('spa', 'chapel', 'bank', 'cinema'))} until {rng.randint(1890, 1975)}"))
    s1 = plan.early() + rng.randrange(0, 3)
    told = plan.put(s1, "message", plan.voice.style(rng.choice((f"anything cool about {place}?",
                    f"tell me smth about {place}", f"{place} history?"))), f"About {place}: {detail}.")
    plan.ask(plan.late(s1), "temporal", "what did you tell me on {day} about " + place + "?", (told.reply_id,))


def found_and_opens(plan: Plan) -> None:
    rng = plan.rng
    friend, item = rng.choice(FRIENDS), rng.choice(("brass key", "blue token", "silver coin", "old map"))
    place = rng.choice(LANDMARKS)
    s1 = plan.early()
    found = plan.put(s1, "message", plan.voice.style(rng.choice((f"{friend} found a {item}!!", f"omg {friend} just "
                     f"picked up a {item} by the bins"))), guide_chatter(rng))
    s2 = plan.middle(s1)
    opens = plan.put(s2, "message", plan.voice.style(f"what is the {item} for"),
                     f"The {item} opens the chest under {place}: bring it on your next walk.")
    plan.ask(plan.late(s2), "multi", rng.choice((f"what does the thing {friend} found open?",
             f"{friend}'s find, where do we use it")), (found.id, opens.reply_id))


def cafe_near_meeting(plan: Plan) -> None:
    """Two facts of two sessions: the meeting place the player set and the guide's lunch tip near it."""
    rng = plan.rng
    place, snack = rng.choice(LANDMARKS), rng.choice(("scones", "ramen", "churros", "waffles", "dumplings"))
    friend = rng.choice(FRIENDS)
    s1 = plan.early()
    meet = plan.put(s1, "message", plan.voice.style(f"{friend} wants to start from {place} next time"),
                    guide_chatter(rng))
    s2 = plan.middle(s1)
    lunch = plan.put(s2, "message", plan.voice.style(f"where can we get {snack} around here"),
                     f"For {snack}, {varied(rng, 8).split()[0].title()}'s on {rng.choice(STREETS)} is five minutes "
                     f"from {place}.")
    plan.ask(plan.late(s2), "multi", f"the {snack} place you mentioned, how far is it from where {friend} "
             "wanted to start?", (meet.id, lunch.reply_id))


def unanswerable(plan: Plan) -> None:
    rng = plan.rng
    plan.ask(rng.randrange(plan.sessions * 3 // 5, plan.sessions), "unanswerable", rng.choice((
        "what's the wifi password at the library?", "did you tell me when the zoo closes?",
        "what was the clue at the lighthouse?", "what's my brother's phone number?",
        "which bus did we take on the first day?")), ())


FACTS: tuple[Callable[[Plan], None], ...] = (team, meeting, riddle, cafe, box_code, personal, tagged, told_on_a_day,
                                             found_and_opens, cafe_near_meeting, unanswerable)


# --- the conversation --------------------------------------------------------------------------------


def conversation(seed: int) -> GameChat:
    """One player's game: sessions over weeks, the facts placed in them, and the questions."""
    rng = random.Random(f"memory:{seed}")
    language = rng.choice(LANGUAGES)
    voice = Voice(random.Random(f"voice:{seed}"), language, typos=rng.uniform(0.05, 0.35),
                  emoji=rng.uniform(0.02, 0.3), short=rng.uniform(0.1, 0.35), voice=rng.uniform(0.0, 0.12),
                  lowercase=rng.random() < 0.5)
    sessions = rng.randint(20, 60)
    plan = Plan(rng, voice, sessions)
    for fact in FACTS:
        for _ in range(rng.choice((1, 1, 2))):
            fact(plan)
    by_session: dict[int, list[Turn]] = {}
    for session, turn in plan.placed:
        by_session.setdefault(min(session, sessions - 1), []).append(turn)
    chat = GameChat(f"4477{seed:08d}", language)
    day = datetime(2026, 9, 1, tzinfo=UTC) + timedelta(days=rng.randrange(0, 60))
    n = 0
    for session in range(sessions):
        day += timedelta(days=rng.choice((0, 1, 1, 1, 2, 2, 3, 4, 7)))
        at = day.replace(hour=rng.choice((8, 10, 12, 14, 16, 17, 18, 19, 20)), minute=rng.randrange(60))
        planted = by_session.get(session, [])
        inputs: list[Turn | None] = [None] * rng.randint(3, 16) + planted
        rng.shuffle(inputs)
        if any(t is not None and t.question is not None for t in planted):  # questions come after the small talk
            inputs.sort(key=lambda t: t is not None and t.question is not None)
        for item in inputs:
            at += timedelta(minutes=rng.choice((1, 1, 2, 3, 5, 8, 15)), seconds=rng.randrange(60))
            n += 1
            item = item or _filler(rng, voice, session, n)
            item.at = at
            chat.turns.append(item)
    _settle_questions(chat)
    return chat


def _settle_questions(chat: GameChat) -> None:
    """Name the day in "what did you tell me on {day}" questions, and drop a question whose evidence did not land
    before it (a fact placed in the question's own session, after it)."""
    seen: dict[str, Turn] = {}
    for turn in chat.turns:
        q = turn.question
        if q is not None:
            if not all(e in seen for e in q.evidence):
                turn.question = None
            elif "{day}" in q.text:
                told = seen[q.evidence[0]]
                turn.text = q.text.format(day=f"{WEEKDAYS[told.at.weekday()]} {told.at.day}")
                turn.question = Question(q.kind, turn.text, q.evidence, q.superseded)
        seen[turn.id] = seen[turn.reply_id] = turn


def _filler(rng: random.Random, voice: Voice, session: int, n: int) -> Turn:
    roll = rng.random()
    ident = f"m{n}"
    if roll < 0.12:
        return Turn(ident, _UNSET, session, "event", f"The player moved {rng.randint(20, 600)} m "
                    f"{rng.choice(('north', 'south', 'east', 'west'))} towards {rng.choice(LANDMARKS)}.")
    if roll < 0.15:
        return Turn(ident, _UNSET, session, "event", f"The player tagged {rng.choice(MINOR_SPOTS)} "
                    f"(+{rng.choice((10, 20, 25))} points).")
    if roll < 0.17:
        return Turn(ident, _UNSET, session, "fact", f"The player's current target is {rng.choice(LANDMARKS)}.",
                    key="target")
    if roll < 0.19:
        return Turn(ident, _UNSET, session, "fact", f"The team has {rng.randint(0, 40) * 50} points.",
                    key="score")
    return Turn(ident, _UNSET, session, "message", voice.chatter(rng.randrange(1 << 30)), guide_chatter(rng))
