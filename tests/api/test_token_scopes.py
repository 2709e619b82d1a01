"""Token scopes of the producers' API (PARLEY_API_TOKENS_FILE): a token limited to some conversations is answered as
if the others did not exist, a recipient outside them is refused, a rate is counted over the whole fleet, and the file
is read again when it changes (a broken change keeps the last good tokens)."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
from starlette.testclient import TestClient

from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.client import ConversationClient
from worker.errors import ConfigurationError
from worker.ingress import api_tokens
from worker.ingress import metrics as ingress_metrics
from worker.ingress.api_tokens import TokenSource
from worker.ingress.app import create_app
from worker.runtime.api_tokens_file import load_grants
from worker.settings.business_numbers import Number, Numbers
from worker.store.redis_store import ConversationStore

server = pytest.fixture(redis_of_its_own)

GAME_A = {"Authorization": "Bearer game-a-token"}
WIDE = {"Authorization": "Bearer wide-token"}
A_CID, B_CID = "game-a.alice", "game-b.bob"


def _write(path: Path, tokens: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"tokens": tokens}), encoding="utf-8")
    return path


def _app(store: ConversationStore, *, tokens: str = "wide-token", file: Path | None = None,
         numbers: Numbers | None = None) -> TestClient:
    client = ConversationClient(store, wake=lambda _cid: None, max_text_chars=100)
    return TestClient(create_app(client, store, app_secret="s", verify_token="v", api_tokens=tokens,
                                 api_tokens_file=str(file) if file else None, numbers=numbers))


def _fake_store() -> ConversationStore:
    return ConversationStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="scopes")


@pytest.fixture
def game_a_file(tmp_path: Path) -> Path:
    return _write(tmp_path / "tokens.json", [{"token": "game-a-token", "name": "game-a", "scope": "producer",
                                             "conversation_prefixes": ["game-a."]}])


def _requests(cid: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every way a producer's token touches a conversation: read, reset, events, messages, cancel a timer."""
    base = f"/v1/conversations/{cid}"
    return [("GET", base, None), ("POST", base + "/reset", {}), ("POST", base + "/events", {"text": "Boom"}),
            ("POST", base + "/messages", {"text": "Hi", "system": "Obey game A."}),
            ("DELETE", base + "/scheduled/later-1", None)]


def test_a_prefix_limited_token_finds_no_other_conversation(game_a_file: Path) -> None:
    store = _fake_store()
    http = _app(store, file=game_a_file)
    at = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    assert http.post(f"/v1/conversations/{B_CID}/events", headers=WIDE,
                     json={"text": "B's secret", "message_id": "later-1", "at": at}).status_code == 202
    assert http.post(f"/v1/conversations/{B_CID}/messages", headers=WIDE, json={"text": "hello"}).status_code == 202
    assert http.get(f"/v1/conversations/{B_CID}", headers=WIDE).status_code == 200  # it exists
    missing = http.get("/v1/conversations/nobody-here", headers=WIDE)
    assert missing.status_code == 404
    inbox_before = store.inbox(B_CID)
    for method, path, body in _requests(B_CID):
        r = http.request(method, path, headers=GAME_A, json=body)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json() == {**missing.json(), "error": f"no conversation {B_CID}"}, (method, path)
        assert "B's secret" not in r.text
    assert store.inbox(B_CID) == inbox_before  # nothing queued, reset or cancelled
    assert http.get(f"/v1/conversations/{B_CID}", headers=WIDE).json()["scheduled"] == 1
    for method, path, body in _requests(A_CID):  # its own game: as any token
        assert http.request(method, path, headers=GAME_A, json=body).status_code in (200, 202, 404)
    assert http.post(f"/v1/conversations/{A_CID}/events", headers=GAME_A, json={"text": "x"}).status_code == 202
    assert http.get(f"/v1/conversations/{A_CID}", headers=GAME_A).status_code == 200


@pytest.mark.parametrize("fast", [True, False])
def test_a_recipient_outside_the_scope_is_422_naming_it(game_a_file: Path, fast: bool) -> None:
    store = _fake_store()
    client = ConversationClient(store, wake=lambda _cid: None, max_text_chars=100)
    http = TestClient(create_app(client, store, app_secret="s", verify_token="v", api_tokens="wide-token",
                                 api_tokens_file=str(game_a_file), fast_inputs=fast))
    for path, body in [("/messages", {"text": "Hi", "recipient": "447700900123"}),
                       ("/events", {"text": "Boom", "respond": True, "recipient": "game-b.bob"})]:
        r = http.post(f"/v1/conversations/{A_CID}{path}", headers=GAME_A, json=body)
        assert (r.status_code, r.json()["field"]) == (422, "recipient"), r.text
    assert store.inbox(A_CID) == []
    ok = http.post(f"/v1/conversations/{A_CID}/messages", headers=GAME_A, json={"text": "Hi", "recipient": "game-a.x"})
    assert ok.status_code == 202
    wide = http.post(f"/v1/conversations/{A_CID}/messages", headers=WIDE, json={"text": "Hi", "recipient": "4477009"})
    assert wide.status_code == 202


def test_an_operator_limited_by_prefix_cannot_send_a_persons_message_elsewhere(tmp_path: Path) -> None:
    file = _write(tmp_path / "t.json", [{"token": "ops-a", "scope": "operator", "conversation_prefixes": ["game-a."]}])
    http = _app(_fake_store(), file=file)
    ops = {"Authorization": "Bearer ops-a"}
    assert http.post(f"/v1/conversations/{B_CID}/pause", headers=ops).status_code == 404
    assert http.delete(f"/v1/conversations/{B_CID}", headers=ops).status_code == 404
    r = http.post(f"/v1/conversations/{A_CID}/operator-messages", headers=ops, json={"text": "hi", "recipient": "4477"})
    assert (r.status_code, r.json()["field"]) == (422, "recipient")
    assert http.post(f"/v1/conversations/{A_CID}/pause", headers=ops).status_code == 200


def test_a_numbers_limited_token_reaches_the_conversations_its_numbers_name(tmp_path: Path) -> None:
    numbers = Numbers(Number("111", "t1"), (Number("222", "t2"),))
    file = _write(tmp_path / "t.yaml", [{"token": "quiz", "scope": "producer", "numbers": [222]}])
    quiz = {"Authorization": "Bearer quiz"}
    http = _app(_fake_store(), file=file, numbers=numbers)
    assert http.post("/v1/conversations/222.447700/events", headers=quiz, json={"text": "x"}).status_code == 202
    assert http.post("/v1/conversations/447700/events", headers=quiz, json={"text": "x"}).status_code == 404
    assert http.post("/v1/conversations/111.447700/events", headers=quiz, json={"text": "x"}).status_code == 404
    r = http.post("/v1/conversations/222.447700/messages", headers=quiz, json={"text": "x", "recipient": "447799"})
    assert (r.status_code, r.json()["field"]) == (422, "recipient")  # on the default number, 111
    # No business number configured: no conversation's number is known, the token reaches none.
    blind = _app(_fake_store(), file=file)
    assert blind.post("/v1/conversations/222.447700/events", headers=quiz, json={"text": "x"}).status_code == 404


def _real_store(server: RedisServer) -> ConversationStore:
    return ConversationStore(redis.Redis(port=server.port), prefix="fleet")


def test_a_tokens_rate_is_counted_over_the_fleet(server: RedisServer, tmp_path: Path) -> None:
    file = _write(tmp_path / "t.json", [{"token": "game-a-token", "scope": "producer", "per_second": 2}])
    apps = [_app(_real_store(server), file=file), _app(_real_store(server), file=file)]
    body = {"text": "x"}
    accepted: list[int] = []
    refused = None
    start = time.monotonic()
    for i in range(12):  # the two instances in turn, until one refuses
        r = apps[i % 2].post(f"/v1/conversations/{A_CID}/events", headers=GAME_A, json=body)
        if r.status_code == 429:
            refused, at = r, time.monotonic()
            break
        assert r.status_code == 202, r.text
        accepted.append(i % 2)
    assert refused is not None, "never refused"
    # GCRA: a burst of 2, then one every 0.5 s, over both instances together (each counting alone would take 4).
    assert len(accepted) <= 2 + int(2 * (at - start)), accepted
    assert set(accepted) == {0, 1}
    assert refused.headers["Retry-After"].isdigit() and int(refused.headers["Retry-After"]) >= 1
    assert refused.json() == {"error": "this token's rate (2 a second) is spent, retry later", "field": None}
    again = apps[1].get(f"/v1/conversations/{A_CID}", headers=GAME_A)
    if time.monotonic() - at < 0.25:  # still inside the wait: any request counts, a read too
        assert again.status_code == 429
    assert apps[0].post(f"/v1/conversations/{A_CID}/events", headers=WIDE, json=body).status_code == 202  # its own
    keys = [k.decode() for k in redis.Redis(port=server.port).scan_iter("fleet:{api:*")]
    assert len(keys) == 1 and "game-a-token" not in keys[0]


def test_rewriting_the_file_revokes_a_token_without_a_restart(game_a_file: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_tokens, "CHECK_EVERY", 0.0)
    http = _app(_fake_store(), file=game_a_file)
    assert http.get(f"/v1/conversations/{A_CID}", headers=GAME_A).status_code == 404  # known token, no conversation
    _write(game_a_file, [{"token": "game-a-new-token", "scope": "producer", "conversation_prefixes": ["game-a."]}])
    r = http.get(f"/v1/conversations/{A_CID}", headers=GAME_A)
    assert r.status_code == 401
    assert http.get(f"/v1/conversations/{A_CID}", headers={"Authorization": "Bearer game-a-new-token"}
                    ).status_code == 404
    assert http.get(f"/v1/conversations/{A_CID}", headers=WIDE).status_code == 404  # PARLEY_API_TOKENS stays


def _refused() -> float:
    return sum(s.value for m in ingress_metrics.API_TOKENS_FILE_LOADS.collect() for s in m.samples
               if s.labels.get("outcome") == "refused" and s.name.endswith("_total"))


@pytest.mark.parametrize("broken", ["{not json", '{"tokens": [{"token": "x", "scope": "admin"}]}',
                                    '{"tokens": [{"token": "${NOT_SET_ANYWHERE}", "scope": "producer"}]}', None])
def test_a_broken_rewrite_keeps_the_last_good_tokens(game_a_file: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture, broken: str | None) -> None:
    monkeypatch.setattr(api_tokens, "CHECK_EVERY", 0.0)
    http = _app(_fake_store(), file=game_a_file)
    before = _refused()
    if broken is None:
        game_a_file.unlink()
    else:
        game_a_file.write_text(broken, encoding="utf-8")
    for _ in range(3):  # still the old tokens, scope included; the bad version logged once
        assert http.get(f"/v1/conversations/{B_CID}", headers=GAME_A).status_code == 404
        assert http.get(f"/v1/conversations/{A_CID}", headers={"Authorization": "Bearer x"}).status_code == 401
    assert _refused() == before + 1
    assert "PARLEY_API_TOKENS_FILE changed but is not valid" in caplog.text
    _write(game_a_file, [{"token": "fixed", "scope": "producer"}])
    assert http.get(f"/v1/conversations/{A_CID}", headers={"Authorization": "Bearer fixed"}).status_code == 404
    assert http.get(f"/v1/conversations/{A_CID}", headers=GAME_A).status_code == 401


def test_a_file_set_exports_both_read_outcomes_from_zero(game_a_file: Path) -> None:
    """So the first refused read after a start is an increase Prometheus sees (the alert on it counts on that)."""
    ingress_metrics.API_TOKENS_FILE_LOADS.clear()
    TokenSource((), str(game_a_file))
    samples = {s.labels["outcome"]: s.value for m in ingress_metrics.API_TOKENS_FILE_LOADS.collect()
               for s in m.samples if s.name.endswith("_total")}
    assert samples == {"loaded": 0.0, "refused": 0.0}


def test_the_file_is_looked_at_once_a_second_at_most(game_a_file: Path) -> None:
    now = [100.0]
    source = TokenSource((), str(game_a_file), clock=lambda: now[0])
    _write(game_a_file, [{"token": "other", "scope": "producer"}])
    now[0] += 0.5
    assert [g.name for g in source.grants()] == ["game-a"]
    now[0] += 0.5
    assert [g.token for g in source.grants()] == [b"other"]


def test_the_environments_tokens_and_the_files_add_up(game_a_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_TOKEN_FOR_TEST", "ops-from-env-var")
    file = _write(game_a_file, [{"token": "game-a-token", "scope": "producer", "conversation_prefixes": ["game-a."]},
                                {"token": "${OPS_TOKEN_FOR_TEST}", "scope": "operator", "name": "ops"}])
    http = _app(_fake_store(), tokens="wide-token,operator:env-ops", file=file)
    for headers in (GAME_A, WIDE, {"Authorization": "Bearer env-ops"}, {"Authorization": "Bearer ops-from-env-var"}):
        assert http.post(f"/v1/conversations/{A_CID}/events", headers=headers, json={"text": "x"}).status_code == 202
    assert http.delete(f"/v1/conversations/{A_CID}", headers={"Authorization": "Bearer ops-from-env-var"}
                       ).status_code == 204
    assert http.delete(f"/v1/conversations/{A_CID}", headers=WIDE).status_code == 403
    assert http.get(f"/v1/conversations/{A_CID}", headers={"Authorization": "Bearer ${OPS_TOKEN_FOR_TEST}"}
                    ).status_code == 401


def test_a_file_alone_turns_the_api_on(game_a_file: Path) -> None:
    http = _app(_fake_store(), tokens="", file=game_a_file)
    assert http.post(f"/v1/conversations/{A_CID}/events", headers=GAME_A, json={"text": "x"}).status_code == 202


@pytest.mark.parametrize(("tokens", "says"), [
    ([{"token": "s3cr3t-value", "scope": "producer", "conversation_prefixes": ["game-a:"]}], "cannot start a conversation id"),
    ([{"token": "s3cr3t-value", "scope": "producer", "conversation_prefixes": [""]}], "empty prefix"),
    ([{"token": "s3cr3t-value", "scope": "producer", "numbers": []}], "numbers"),
    ([{"token": "s3cr3t-value", "scope": "producer", "numbers": ["12a"]}], "digits only"),
    ([{"token": "s3cr3t-value", "scope": "producer", "per_second": 0}], "per_second"),
    ([{"token": "s3cr3t-value", "scope": "producer"}, {"token": "s3cr3t-value", "scope": "operator", "name": "twice"}], "same token"),
    ([{"token": "s3cr3t-value", "scope": "producer", "scopes": "x"}], "scopes"),
])
def test_a_bad_file_at_start_is_a_clear_error_that_never_shows_the_token(tmp_path: Path, tokens: list[dict[str, Any]],
                                                                       says: str) -> None:
    with pytest.raises(ConfigurationError, match=says) as caught:
        load_grants(_write(tmp_path / "t.json", tokens))
    assert "PARLEY_API_TOKENS_FILE" in str(caught.value) and "s3cr3t-value" not in str(caught.value)


def test_a_token_in_both_sources_is_refused_at_start(game_a_file: Path) -> None:
    with pytest.raises(ConfigurationError, match="also in PARLEY_API_TOKENS"):
        _app(_fake_store(), tokens="game-a-token", file=game_a_file)


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.settings import Settings

    monkeypatch.setenv("PARLEY_API_TOKENS_FILE", os.devnull)
    assert Settings(_env_file=None).producers.api_tokens_file == os.devnull  # type: ignore[call-arg]


def test_the_openapi_document_names_the_answers_of_a_limited_token(game_a_file: Path) -> None:
    doc = _app(_fake_store(), file=game_a_file).get("/v1/openapi.json").json()
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            responses = op["responses"]
            assert "outside" in responses["404"]["description"], (path, method)
            assert "Retry-After" in responses["429"]["headers"], (path, method)
            assert "per_second" in responses["429"]["description"]
            assert "recipient" in responses["422"]["description"]


def test_a_limited_tokens_reach_is_decided_on_the_conversation_a_players_other_id_leads_to(game_a_file: Path) -> None:
    """A player's phone number and user id lead to one conversation: an id that looks inside a token's reach but is
    linked to a conversation outside it is answered 404, and the player of a conversation inside it may be named by
    their other id."""
    store = _fake_store()
    http = _app(store, file=game_a_file)
    assert http.post(f"/v1/conversations/{B_CID}/events", headers=WIDE, json={"text": "B's secret"}).status_code == 202
    store.link_identity(B_CID, None)
    assert store.link_identity(B_CID, "game-a.sneaky") == B_CID  # the older conversation stays the player's
    inbox_before = store.inbox(B_CID)
    for method, path, body in _requests("game-a.sneaky"):
        r = http.request(method, path, headers=GAME_A, json=body)
        assert r.status_code == 404, (method, path, r.text)
        assert "B's secret" not in r.text
    assert store.inbox(B_CID) == inbox_before
    store.link_identity(A_CID, None)
    assert store.link_identity(A_CID, "US.7001") == A_CID
    assert http.post("/v1/conversations/US.7001/events", headers=GAME_A, json={"text": "x"}).status_code == 202
    assert [e for e in store.inbox(A_CID)], "the event went to the conversation the user id leads to"
