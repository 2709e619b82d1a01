"""``parley demo`` (what ``scripts/demo`` runs once its virtual environment is set up), end to end: a real
subprocess with its embedded Redis, its own Celery worker and its printed replies.

CI has no local model (installing it is the demo's first-run step, not CI's): there the model is a scripted
OpenAI-compatible server on loopback, whose answers name the question they answer (``ack:<question>``), so the
test can tell each reply arrived, whole and in order. Where the local model is installed, a second test runs
the demo on it, with nothing configured, as a new user would.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.fake_openai import FakeOpenAI
from worker.cli.demo import GAME_SCRIPT
from worker.llm import local_model

pytestmark = pytest.mark.e2e

PARLEY = os.path.join(os.path.dirname(sys.executable), "parley")
QUESTIONS = [text for kind, text in GAME_SCRIPT if kind == "message"]


def _run_demo(env: dict[str, str], timeout: float) -> list[str]:
    """The demo's printed lines; it fails the test when the demo exits non-zero."""
    # Nothing of the caller's configuration: the demo starts from its embedded defaults.
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("PARLEY_", "OPENAI_", "ANTHROPIC_", "WHATSAPP_", "REDIS_"))}
    done = subprocess.run([PARLEY, "demo"], env={**clean, **env}, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"demo exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


def _answers(lines: list[str]) -> list[tuple[str, str]]:
    """(question, the first reply line after it) for every question the demo asked."""
    out = []
    for i, line in enumerate(lines):
        if line.startswith("you> "):
            reply = next((x for x in lines[i + 1:] if x.startswith(("parley> ", "you> "))), "")
            out.append((line[len("you> "):], reply[len("parley> "):] if reply.startswith("parley> ") else ""))
    return out


def test_the_demo_answers_every_question_of_its_scripted_game() -> None:
    model = FakeOpenAI().start()
    try:
        lines = _run_demo({"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test-key"}, timeout=180)
    finally:
        model.stop()
    assert _answers(lines) == [(q, f"ack:{q}") for q in QUESTIONS]
    assert any("[game event] The player has just tagged Harrogate Theatre" in line for line in lines)
    # The game's events reached the model with the question that asks about them.
    asked = next(body for body in model.requests if f"{body['messages'][-1].get('content')}" == QUESTIONS[1])
    assert "Harrogate Theatre" in str(asked["messages"])


@pytest.mark.local_model
@pytest.mark.skipif(not local_model.installed(), reason="the local model is not installed (scripts/demo installs it)")
def test_the_demo_answers_on_the_local_model_with_nothing_configured() -> None:
    lines = _run_demo({}, timeout=600)
    assert "model provider: local" in lines[0]
    answers = _answers(lines)
    assert [q for q, _ in answers] == QUESTIONS
    assert all(reply.strip() for _, reply in answers), answers
