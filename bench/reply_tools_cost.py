"""What WhatsApp's reply tools add to each model request: tokens of their schemas against a typical request without
them, in one run.

    python bench/reply_tools_cost.py

The reply tools (``send_image``, ``send_location``, ``request_location``, ``send_buttons``, ``send_list``,
``react``; ``worker/tools/reply_tools.py``) are offered on every request of a WhatsApp deployment unless
``PARLEY_WHATSAPP_REPLY_TOOLS=false``. Each request below is the body the OpenAI provider sends
(``worker.llm.openai_chat.build_body``), serialised as JSON and counted with tiktoken (``o200k_base``, the
GPT-4o family's, and ``cl100k_base``); the cost is the body with the tools minus the body without them. OpenAI
renders tool schemas into the prompt in a form of its own, so the JSON count is an estimate (close, usually a
little over); Anthropic's tokenizer is not public, and ``cl100k_base`` stands in for it.

Typical requests (the deployment's default system prompt, WhatsApp-length texts): a first turn; a game ten turns
in; a long game held at the compaction budget (``PARLEY_COMPACTION_MAX_TOKENS``, its default); and the
ten-turn game with three game tools already offered (HTTP tools such as a game's ``look``/``tag``/``hint``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.conversation import messages as msgs
from worker.conversation.messages import Message
from worker.conversation.model import ModelRequest, ToolSpec
from worker.conversation.tokens import TiktokenCounter
from worker.llm.openai_chat import build_body
from worker.settings import Llm, Memory
from worker.tools.reply_tools import reply_tools

PLAYER = ["where next?", "I'm at the clock tower, what now", "ok found it!", "hint please",
          "is it the old theatre on the corner?", "skip this one", "how many points do I have", "going there now"]
ASSISTANT = [
    "Head north along Parliament Street to the clock tower; the next clue is carved above its door.",
    "Nice work! Look for the bronze plaque by the fountain: it names the year the spa opened.",
    "Correct, 1842! You earn 10 points. Your next landmark is a theatre with a green dome.",
    "Here's a hint: it faces the Valley Gardens, and the box office sells ice cream in summer.",
    "Yes, Harrogate Theatre it is. Tag it when you're at the door and I'll check your location.",
]
GAME_TOOLS = [
    ToolSpec("look", "What the player sees where they stand: the room or street, objects, other players.",
             {"type": "object", "properties": {"player": {"type": "string", "description": "The player's id."}},
              "required": ["player"]}),
    ToolSpec("tag", "Tag a landmark the player has reached; answers the points earned.",
             {"type": "object", "properties": {"player": {"type": "string"}, "landmark": {"type": "string"}},
              "required": ["player", "landmark"]}),
    ToolSpec("hint", "A hint for the player's current target, easier each time it is asked.",
             {"type": "object", "properties": {"player": {"type": "string"}}, "required": ["player"]}),
]


def history(turns: int) -> list[Message]:
    out: list[Message] = []
    for i in range(turns):
        out.append(msgs.user(PLAYER[i % len(PLAYER)]))
        out.append(Message(role="assistant", content=ASSISTANT[i % len(ASSISTANT)]))
    out.append(msgs.user(PLAYER[turns % len(PLAYER)]))
    return out


def tokens(counter: TiktokenCounter, body: dict[str, Any]) -> int:
    return counter.count_text(json.dumps(body, ensure_ascii=False))


def body(system: str, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
    return build_body("gpt-4o-mini", ModelRequest(system=system, messages=messages, tools=tools), max_tokens=1024,
                      temperature=None)


def at_budget(counter: TiktokenCounter, system: str, budget: int) -> list[Message]:
    """The longest history whose request stays within ``budget`` tokens (a game held there by compaction)."""
    turns = 1
    while tokens(counter, body(system, history(turns + 1), [])) <= budget:
        turns += 1
    return history(turns)


def main() -> None:
    system, budget = Llm().system_prompt, Memory().compaction_max_tokens
    specs = [t.spec for t in reply_tools()]
    for encoding in ("o200k_base", "cl100k_base"):
        counter = TiktokenCounter(encoding=encoding)
        print(f"\n{encoding}")
        print(f"{'request':<34}{'without':>9}{'with':>9}{'added':>8}{'ratio':>8}")
        cases = [("first turn", history(0), []), ("ten turns in", history(10), []),
                 (f"at the {budget:,}-token budget", at_budget(counter, system, budget), []),
                 ("ten turns in, 3 game tools", history(10), GAME_TOOLS)]
        for name, messages, game in cases:
            without = tokens(counter, body(system, messages, game))
            with_ = tokens(counter, body(system, messages, [*game, *specs]))
            print(f"{name:<34}{without:>9,}{with_:>9,}{with_ - without:>8,}{with_ / without:>7.2f}x")
        base = tokens(counter, body(system, history(10), []))
        each = ", ".join(f"{s.name} {tokens(counter, body(system, history(10), [s])) - base}" for s in specs)
        print(f"each tool alone (ten turns in): {each}")


if __name__ == "__main__":
    main()
