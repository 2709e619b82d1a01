"""A business number's own system prompt is decided in the turn, the one place that sees every input (a player's
message, an answered event, a timer): the number's prompt takes the place of the deployment's, and a message's own
``system`` still wins."""

from __future__ import annotations

from tests.configs import bare_config
from tests.worker.conftest import make_harness
from worker.service.number_turns import NumberTurns
from worker.settings.business_numbers import Number, Numbers

MAIN, QUIZ = "106540352242922", "106540352242923"
PLAYER = "16505551234"
QUIZ_PROMPT = "You are the quiz master."
NUMBERS = NumberTurns(Numbers(Number(MAIN, "token-main"), (Number(QUIZ, "token-quiz", system_prompt=QUIZ_PROMPT),)))


def test_each_number_s_conversations_get_its_prompt_and_a_message_s_own_system_still_wins() -> None:
    h = make_harness(config=bare_config(system_prompt="You are a test.", numbers=NUMBERS))
    quiz = f"{QUIZ}.{PLAYER}"
    h.client.send_message(quiz, "first", message_id="m1")
    h.client.send_message(PLAYER, "on the main line", message_id="m2")
    h.client.send_event(quiz, "the quiz began", message_id="e1", respond=True)
    h.client.send_message(quiz, "and now", message_id="m3", system="Score is 150.")
    h.run()
    systems = {r.messages[-1].content: r.system for r in h.model.requests}
    assert systems == {"first": QUIZ_PROMPT, "on the main line": "You are a test.", "the quiz began": QUIZ_PROMPT,
                       "and now": "Score is 150."}
