"""Spans and span-linked log lines show a player's conversation id (their phone number) as a pseudonym: a keyed
hash with a key every process of the deployment shares (``PARLEY_TRACE_ID_KEY``, else one kept in Redis), so one
player is one pseudonym fleet-wide; ``parley pseudonym ID`` prints it; ``PARLEY_TRACE_PLAIN_IDS`` shows plain ids."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.configs import bare_config
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.redis_server import RedisServer, redis_of_its_own
from tests.worker.conftest import make_harness
from worker import ScriptedModel
from worker.conversation.scripted import Reply
from worker.conversation.tools import Tool
from worker.observability import tracing
from worker.observability.logs import JsonFormatter
from worker.observability.tracing.pseudonyms import pseudonym
from worker.queue.connections import build_store
from worker.settings import Settings
from worker.store.trace_ids import fleet_trace_key

CID = "447700900555"
server = pytest.fixture(redis_of_its_own)
log = logging.getLogger("parley.test.pseudonyms")


@pytest.fixture
def prefix() -> str:
    return f"ps{uuid.uuid4().hex[:6]}"


@pytest.fixture
def lines() -> Iterator[list[str]]:
    """Every line Parley's JSON formatter writes meanwhile."""
    out: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            out.append(self.format(record))

    handler = Keep()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


def _turn(server: RedisServer, prefix: str, receiver: OtlpReceiver, **settings: object) -> list[ReceivedSpan]:
    """One message through the service, its store built as every process builds it; the spans it exported. Its
    tool logs a line (inside its span) naming the conversation, as Parley's own lines do."""
    client = redis.Redis.from_url(server.url)
    build_store(Settings(_env_file=None, redis_url=server.url, key_prefix=prefix, **settings), client)

    def look() -> str:
        log.info("looked around", extra={"conversation_id": CID})
        return "a quiet room"

    tool = Tool("look", "Look around.", {"type": "object", "properties": {}}, look)
    model = ScriptedModel([Reply(tool_calls=(("look", {}),)), Reply(text="A quiet room.")], model_name="gpt-4o-mini")
    h = make_harness(model, tools=[tool], redis_client=client, config=bare_config(system_prompt="You are a test."))
    h.client.send_message(CID, "hello", message_id="wamid.p1")
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["A quiet room."]
    tracing.flush()
    names = {"accept", "turn", "chat gpt-4o-mini", "execute_tool look", "send"}
    assert receiver.wait_for(lambda: names <= {s.name for s in receiver.spans}, 10), [s.name for s in receiver.spans]
    return list(receiver.spans)


def _shown(spans: list[ReceivedSpan]) -> set[str]:
    return {s.attributes["gen_ai.conversation.id"] for s in spans if "gen_ai.conversation.id" in s.attributes}


def _linked(lines: list[str]) -> list[dict[str, object]]:
    return [line for line in map(json.loads, lines) if "trace_id" in line]


def test_spans_and_linked_log_lines_show_the_fleet_pseudonym_never_the_number(
        server: RedisServer, prefix: str, traced: OtlpReceiver, lines: list[str]) -> None:
    spans = _turn(server, prefix, traced)
    expected = pseudonym(CID, fleet_trace_key(redis.Redis.from_url(server.url), prefix))
    assert expected.startswith("p_") and len(expected) == 26
    assert not [s.name for s in spans if CID in json.dumps(s.attributes)]
    assert _shown(spans) == {expected}
    assert {s.name for s in spans if "gen_ai.conversation.id" in s.attributes} >= {
        "accept", "turn", "chat gpt-4o-mini", "execute_tool look", "send"}
    linked = _linked(lines)
    assert any(line.get("conversation_id") == expected for line in linked), linked
    assert not [line for line in linked if CID in json.dumps(line)]


def test_plain_ids_when_asked(server: RedisServer, prefix: str, traced: OtlpReceiver, lines: list[str]) -> None:
    spans = _turn(server, prefix, traced, trace_plain_ids=True)
    assert _shown(spans) == {CID}
    assert any(line.get("conversation_id") == CID for line in _linked(lines))


def test_the_key_setting_makes_the_pseudonym(server: RedisServer, prefix: str, traced: OtlpReceiver) -> None:
    spans = _turn(server, prefix, traced, trace_id_key="a-key-every-process-has")
    assert _shown(spans) == {pseudonym(CID, b"a-key-every-process-has")}


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PARLEY_", "OTEL_")) and k != "REDIS_URL"}
    return subprocess.run([sys.executable, "-m", "worker.cli", *args], env={**clean, **env}, capture_output=True,
                          text=True, timeout=60)


def test_two_processes_agree_and_the_cli_prints_it(server: RedisServer, prefix: str) -> None:
    """The first process creates the fleet's key, every other reads the same one: the same player, the same
    pseudonym, in every process on that Redis (and another under another deployment's key)."""
    env = {"REDIS_URL": server.url, "PARLEY_KEY_PREFIX": prefix}
    first, second = _cli("pseudonym", CID, **env), _cli("pseudonym", CID, **env)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.strip() == second.stdout.strip() == pseudonym(
        CID, fleet_trace_key(redis.Redis.from_url(server.url), prefix))
    other = _cli("pseudonym", CID, REDIS_URL=server.url, PARLEY_KEY_PREFIX=prefix + "x")
    assert other.stdout.strip().startswith("p_") and other.stdout.strip() != first.stdout.strip()
    keyed = _cli("pseudonym", CID, PARLEY_TRACE_ID_KEY="k1", REDIS_URL="redis://127.0.0.1:1/0")
    assert keyed.stdout.strip() == pseudonym(CID, b"k1"), keyed.stderr  # the setting's key: no Redis needed


def test_the_cli_refuses_a_bad_id_clearly(server: RedisServer) -> None:
    done = _cli("pseudonym", "a*b", REDIS_URL=server.url)
    assert done.returncode == 2 and "error:" in done.stderr and not done.stdout
