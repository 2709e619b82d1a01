"""End to end with several business numbers: real webhook payloads through the ingress, a Celery worker process and
the loopback WhatsApp. Each number's players get their replies from that number with its token; the same player on
two numbers has two conversations (each with its own history and its number's system prompt); a rejected token on
one number holds that number's replies only (nothing dead-lettered) while the other's go out."""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from tests.e2e.conftest import Cluster
from tests.ingress.test_ingress import SECRET, fixture_payload, sign
from tests.support.game_engine import GameEngine
from tests.support.redis_server import free_port
from tests.support.whatsapp_fixtures import needs_fixtures
from tests.support.workers import wait_until
from worker.conversation.state import decode_state
from worker.envelopes.inputs import Media
from worker.ingress.app import create_app
from worker.runtime.numbers_file import load_numbers

pytestmark = [pytest.mark.e2e, needs_fixtures]

MAIN, QUIZ = "106540352242922", "106540352242923"
PLAYER, OTHER = "16505551234", "447700900777"
TOKENS = {"WA_MAIN": "token-main", "WA_QUIZ": "token-quiz"}
QUIZ_PROMPT = "You are the quiz master."


def message(pnid: str, player: str, wamid: str, text: str) -> dict[str, Any]:
    """The shared fixture inbound_text.json as Meta sends it to ``pnid`` from ``player``."""
    entry = copy.deepcopy(fixture_payload("inbound_text.json")["entry"][0])
    value = entry["changes"][0]["value"]
    value["metadata"]["phone_number_id"] = pnid
    value["contacts"][0]["wa_id"] = player
    msg = value["messages"][0]
    msg.update({"from": player, "id": wamid})
    msg["text"]["body"] = text
    return entry


def post(http: TestClient, *entries: dict[str, Any]) -> dict[str, Any]:
    raw = json.dumps({"object": "whatsapp_business_account", "entry": list(entries)}).encode()
    r = http.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw),
                                                    "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def sends(cluster: Cluster) -> list[tuple[str, str, str, str]]:
    """(number, token, to, text) of every accepted send."""
    wa = cluster.whatsapp
    with wa.lock:
        return [(s["path"].split("/")[2], h["authorization"].removeprefix("Bearer "), s["body"]["to"],
                 s["body"]["text"]["body"]) for s, h in zip(wa.sent, wa.headers, strict=True)]


def start(cluster: Cluster, tmp_path: Path, quiz_extra: str = "", env: dict[str, str] | None = None) -> TestClient:
    """The worker (``env``: its own settings) and the ingress on MAIN and QUIZ; ``quiz_extra``: more YAML lines of
    QUIZ's entry."""
    path = tmp_path / "numbers.yaml"
    path.write_text(f"""numbers:
  - phone_number_id: "{MAIN}"
    access_token: ${{WA_MAIN}}
  - phone_number_id: "{QUIZ}"
    access_token: ${{WA_QUIZ}}
    system_prompt: {QUIZ_PROMPT}
{quiz_extra}""", encoding="utf-8")
    cluster.start_worker("w1", env={"PARLEY_WHATSAPP_NUMBERS_FILE": str(path), **TOKENS, **(env or {})})
    client = cluster.client()
    numbers = load_numbers(path, default_id=MAIN, env=TOKENS)
    return TestClient(create_app(client, client.store, app_secret=SECRET, verify_token="v", numbers=numbers))


def test_two_numbers_each_reply_from_their_own_number_with_their_own_token(cluster: Cluster, tmp_path: Path) -> None:
    http = start(cluster, tmp_path)
    summary = post(http, message(MAIN, PLAYER, "wamid.e2e.1", "main one"),
                   message(QUIZ, PLAYER, "wamid.e2e.2", "quiz one"),
                   message(QUIZ, OTHER, "wamid.e2e.3", "other quiz one"))
    assert summary["accepted"] == 3
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 3, 60), cluster.workers[0].log()
    post(http, message(QUIZ, PLAYER, "wamid.e2e.4", "quiz two"), message(MAIN, PLAYER, "wamid.e2e.5", "main two"))
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 5, 60), cluster.workers[0].log()
    got = sends(cluster)
    assert len(got) == 5
    by_number = {n: [(tok, to, text) for n2, tok, to, text in got if n2 == n] for n in (MAIN, QUIZ)}
    assert by_number[MAIN] == [("token-main", PLAYER, "ack:main one"), ("token-main", PLAYER, "ack:main two")]
    assert sorted(by_number[QUIZ]) == [("token-quiz", PLAYER, "ack:quiz one"), ("token-quiz", PLAYER, "ack:quiz two"),
                                       ("token-quiz", OTHER, "ack:other quiz one")]
    # Two conversations for the same player: each history holds only what was said on its number.
    store = cluster.store()
    main_texts = [m.content for m in decode_state(store.read_state(PLAYER).blob).messages]
    quiz_texts = [m.content for m in decode_state(store.read_state(f"{QUIZ}.{PLAYER}").blob).messages]
    assert "main two" in main_texts and "quiz one" not in main_texts
    assert "quiz two" in quiz_texts and "main one" not in quiz_texts
    systems = {str(r["messages"][0]["content"]) for r in cluster.llm.requests
               if any("quiz" in str(m.get("content")) for m in r["messages"][1:])}
    assert systems == {QUIZ_PROMPT}  # the quiz number's own prompt, on every turn of its conversations


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def requests_saying(cluster: Cluster, text: str) -> list[dict[str, Any]]:
    return [r for r in list(cluster.llm.requests) if any(text in str(m.get("content")) for m in r["messages"][1:])]


def test_a_numbers_own_tools_and_prompt_serve_every_turn_of_its_conversations(cluster: Cluster,
                                                                               tmp_path: Path) -> None:
    engine = GameEngine().start()
    try:
        tools = tmp_path / "quiz-tools.json"
        tools.write_text(json.dumps({"tools": [{"name": "look", "description": "the player's room",
                                                "url": f"{engine.url}/look", "parameters": {"type": "object"}}]}),
                         encoding="utf-8")
        cluster.llm.plan_tools = lambda body: [("look", {"player": "ann"})]
        http = start(cluster, tmp_path, f"    tools_file: {tools}\n")
        post(http, message(MAIN, PLAYER, "wamid.e2e.t1", "main asks"), message(QUIZ, PLAYER, "wamid.e2e.t2", "quiz asks"))
        assert wait_until(lambda: len(cluster.whatsapp.sent) >= 2, 60), cluster.workers[0].log()
        client, quiz = cluster.client(), f"{QUIZ}.{PLAYER}"
        client.send_event(quiz, "The player reached the quiz hall", respond=True)
        client.send_event(quiz, "The quiz clock ran out", respond=True, at=datetime.now(UTC) + timedelta(seconds=1))
        client.send_event(PLAYER, "The player reached the main square", respond=True)
        assert wait_until(lambda: len(cluster.whatsapp.sent) >= 5, 60), cluster.workers[0].log()
    finally:
        engine.stop()
    got = {text: (number, to) for number, _, to, text in sends(cluster)}
    # Only the quiz number's turns are offered (and call) its tool; the main number's are not.
    assert got["ack:main asks"] == (MAIN, PLAYER)
    assert any(t.startswith("ack:quiz asks | ") and "the Rusty Anchor tavern" in t for t in got), got
    assert engine.calls and {c[0] for c in engine.calls} == {"/look"}
    for text in ("quiz asks", "quiz hall", "quiz clock"):  # a chat turn, an answered event, a timer's event
        [first, *_] = requests_saying(cluster, text)
        assert str(first["messages"][0]["content"]) == QUIZ_PROMPT, text
        assert {"look", "send_location", "send_buttons"} <= offered(first), (text, offered(first))
    for text in ("main asks", "main square"):
        [first, *_] = requests_saying(cluster, text)
        assert str(first["messages"][0]["content"]) != QUIZ_PROMPT
        assert "look" not in offered(first) and "send_location" in offered(first), (text, offered(first))


def token_gauges(port: int) -> dict[str, float]:
    """``parley_whatsapp_token_rejected`` of the worker's metrics, by phone number id."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text
    except httpx.HTTPError:
        return {}
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^parley_whatsapp_token_rejected\{phone_number_id="(\d*)"\} (\S+)$', text, re.M)}


def test_a_rejected_token_on_one_number_holds_only_its_replies(cluster: Cluster, tmp_path: Path) -> None:
    port = free_port()
    http = start(cluster, tmp_path, env={"PARLEY_METRICS_PORT": str(port)})
    assert wait_until(lambda: token_gauges(port) == {MAIN: 0.0, QUIZ: 0.0}, 30), token_gauges(port)
    cluster.whatsapp.send_tokens[QUIZ] = "rotated at Meta, not yet in the numbers file"
    post(http, message(QUIZ, PLAYER, "wamid.e2e.q", "held"), message(MAIN, PLAYER, "wamid.e2e.m", "not held"))
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 1, 60), cluster.workers[0].log()
    assert wait_until(lambda: len(cluster.whatsapp.received) >= 3, 60)  # the quiz reply refused, retried
    assert token_gauges(port) == {MAIN: 0.0, QUIZ: 1.0}  # the alert names the number whose token to fix
    assert sends(cluster) == [(MAIN, "token-main", PLAYER, "ack:not held")]
    store = cluster.store()
    assert store.dead_letters(f"{QUIZ}.{PLAYER}") == [] and store.outbox_depth(f"{QUIZ}.{PLAYER}") == 1
    assert f"until the access_token of number {QUIZ} in PARLEY_WHATSAPP_NUMBERS_FILE is fixed" in \
        cluster.workers[0].log()
    cluster.whatsapp.send_tokens[QUIZ] = "token-quiz"  # fixed
    assert wait_until(lambda: len(cluster.whatsapp.sent) >= 2, 60), cluster.workers[0].log()
    assert sends(cluster)[1] == (QUIZ, "token-quiz", PLAYER, "ack:held")
    assert wait_until(lambda: token_gauges(port) == {MAIN: 0.0, QUIZ: 0.0}, 10), token_gauges(port)


def test_a_photo_sent_to_a_number_is_fetched_with_that_numbers_token(cluster: Cluster, tmp_path: Path) -> None:
    start(cluster, tmp_path)
    wa = cluster.whatsapp
    wa.add_media("1003383421387257", b"\xff\xd8\xff\xe0 a quiz card", token="token-quiz")
    cluster.client().send_message(f"{QUIZ}.{PLAYER}", "which card is this?", message_id="wamid.e2e.photo",
                                  media=Media(id="1003383421387257", mime_type="image/jpeg"))
    assert wait_until(lambda: len(wa.sent) >= 1, 60), cluster.workers[0].log()
    assert sends(cluster) == [(QUIZ, "token-quiz", PLAYER, "ack:which card is this?")]
    [request] = cluster.llm.requests
    assert "image_url" in str(request["messages"])  # fetched (with the default number's token it would be refused)
    assert {h["authorization"] for _, h in wa.gets} == {"Bearer token-quiz"}


def test_an_operators_reaction_reacts_to_the_players_latest_message_from_their_number(cluster: Cluster,
                                                                                      tmp_path: Path) -> None:
    http = start(cluster, tmp_path)
    post(http, message(QUIZ, PLAYER, "wamid.e2e.r1", "first"), message(QUIZ, PLAYER, "wamid.e2e.r2", "second"))
    wa = cluster.whatsapp
    assert wait_until(lambda: len(wa.sent) >= 2, 60), cluster.workers[0].log()
    cluster.client().send_operator_message(f"{QUIZ}.{PLAYER}", "Well played", message_id="op1",
                                           parts=[{"type": "reaction", "emoji": "🎉"}])
    assert wait_until(lambda: len(wa.sent) >= 4, 60), cluster.workers[0].log()
    with wa.lock:
        text, reaction = (s["body"] for s in wa.sent[2:])
        paths = {s["path"] for s in wa.sent[2:]}
    assert paths == {f"/v21.0/{QUIZ}/messages"} and text["text"]["body"] == "Well played"
    assert reaction["type"] == "reaction" and reaction["reaction"] == {"message_id": "wamid.e2e.r2", "emoji": "🎉"}


def test_a_worker_with_a_bad_numbers_file_stops_at_start_naming_the_entry(cluster: Cluster, tmp_path: Path) -> None:
    path = tmp_path / "numbers.yaml"
    path.write_text(f'numbers:\n  - phone_number_id: "{MAIN}"\n    access_token: ${{WA_MAIN}}\n'
                    f'  - phone_number_id: "{QUIZ}"\n    access_token: ${{WA_UNSET}}\n', encoding="utf-8")
    worker = cluster.start_worker("bad", env={"PARLEY_WHATSAPP_NUMBERS_FILE": str(path), **TOKENS})
    assert wait_until(lambda: not worker.alive(), 60), worker.log()
    assert worker.proc is not None and worker.proc.returncode != 0
    assert f"invalid WhatsApp numbers: PARLEY_WHATSAPP_NUMBERS_FILE {path}: numbers[1] ({QUIZ}): access_token " \
           "uses ${WA_UNSET}, which is not set" in worker.log()
