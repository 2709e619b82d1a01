"""The memory bench (bench/memory.py): its generator is seeded and varied, its check sees what a prompt holds, and a
quick run prints every question kind and recall mode."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.memory import Player, in_prompt
from bench.memory_chat import KINDS, conversation
from tests.support.redis_server import RedisServer, start_redis

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = start_redis()
    yield server
    server.stop()


def test_the_generator_is_a_function_of_its_seed_and_varied() -> None:
    chats = [conversation(seed) for seed in range(10)]
    assert [t.text for t in conversation(3).turns] == [t.text for t in chats[3].turns]
    assert len({c.language for c in chats}) >= 3
    assert {q.kind for c in chats for q in c.questions} == set(KINDS)
    for chat in chats:
        assert 20 <= max(t.session for t in chat.turns) + 1 <= 60
        assert len(chat.turns) >= 200
        seen: set[str] = set()
        for turn in chat.turns:  # a question's evidence is said before it
            if turn.question is not None:
                assert set(turn.question.evidence) <= seen
            seen |= {turn.id, turn.reply_id}
    texts = [t.text for c in chats for t in c.turns]
    assert any(re.search("[\u4e00-\u9fff\u3040-\u30ff]", t) for t in texts)  # a script written without spaces
    assert len(set(texts)) > len(texts) // 2


def test_the_check_finds_what_the_prompt_holds_and_the_gist_quotes_nothing(redis_server: RedisServer) -> None:
    chat = conversation(5)
    played = Player(redis_server.url, 1000, auto=False).play(chat)  # no mode: the emulated archive
    assert played.asked and played.mismatched == 0 and played.summaries > 0
    for asked in played.asked:  # the question itself is in the prompt it is answered from
        assert in_prompt(asked.question.text, asked.request)
    # The preamble holds the game's keyed facts; no other message's words (the summary is a gist).
    said = [text for t in chat.turns if t.kind != "fact" for text in (t.text, t.reply) if len(text) > 40]
    assert not any(t in (r.system or "") for r in played.requests for t in said)
    assert played.archived > 0 and played.store_bytes > 0


def test_the_tool_mode_reads_the_services_own_archive(redis_server: RedisServer) -> None:
    chat = conversation(5)
    played = Player(redis_server.url, 800, mode="tool").play(chat)
    assert played.asked and played.mismatched == 0 and played.summaries > 0
    # The commits wrote the archive; each question's prompt holds the search the model made, its results read back.
    assert played.archived > 0 and played.keys["recall"][2] > 0 and played.keys["recall_index"][1] > 0
    for asked in played.asked:
        last = asked.request.messages[-1]
        assert last.role == "tool" and in_prompt(asked.question.text, asked.request)
    found = [a for a in played.asked if a.results]
    assert found and all(r["at"] for a in found for r in a.results if r["speaker"] == "player")  # format 6: dated


def test_the_auto_mode_quotes_the_archive_in_the_request(redis_server: RedisServer) -> None:
    chat = conversation(5)
    played = Player(redis_server.url, 800, mode="auto").play(chat)
    quoted = [a for a in played.asked if a.request.recalled]
    assert quoted and not any(a.results for a in played.asked)
    texts = chat.texts()
    assert any(in_prompt(texts[e], a.request) and not any(m.content == texts[e] for m in a.request.messages)
               for a in quoted for e in a.question.evidence)


def test_a_quick_run_prints_every_kind_and_mode() -> None:
    out = subprocess.run([sys.executable, "bench/memory.py", "--quick"], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert "EMULATED" not in out and "the service's archive" in out
    for kind in (*KINDS, "answerable"):
        assert re.search(rf"^{kind}\s+\d+(\s+(\d+%|-)){{3}}(\s+\d+\.\d%){{3}}$", out, re.M), (kind, out)
    for mode in ("off", "tool", "auto"):
        assert re.search(rf"^recall {mode}\s*: cached prefix \d+\.\d% of prompt tokens", out, re.M), (mode, out)
    assert re.search(r"recall_index [\d,]+ B per input .*MEMORY USAGE", out), out


def test_the_emulated_run_and_the_grid_still_print() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "bench/memory.py", "--quick", "--emulate"], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=240, env=env).stdout
    assert "EMULATED archive" in out
    out = subprocess.run([sys.executable, "bench/memory.py", "--quick", "--grid"], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=240, env=env).stdout
    assert re.search(r"^default policy\s+\d+%\s+\d+%", out, re.M) and re.search(r"^keep_last=4\s", out, re.M), out
