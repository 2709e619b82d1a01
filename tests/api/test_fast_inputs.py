"""The fast path for messages and events (worker/ingress/fast_inputs.py) answers every request exactly as the
Starlette route does: a table of requests goes to an app with the fast path and to one without (``fast_inputs=False``),
each over a store of its own, and the answers (status, every header, the body) and the metric's counts must be the
same. The requests are raw ASGI calls, so a body in chunks, a client that disconnects and percent-encoded paths are
sent exactly alike to both. Against a real Redis (the accept on the event loop) and fakeredis (the accept in a worker
thread); and with Redis unavailable."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

import fakeredis
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from starlette.applications import Starlette
from starlette.responses import JSONResponse

from tests.support.redis_server import RedisServer, free_port, redis_of_its_own
from worker.client import ConversationClient, Submitted
from worker.envelopes.producer_bodies import Accepted
from worker.ingress import api as api_module
from worker.ingress import metrics as ingress_metrics
from worker.ingress.api import MAX_BODY_OBJECTS, SMALL_BODY_BYTES
from worker.ingress.app import create_app
from worker.store.limits import StoreLimits
from worker.store.redis_store import ConversationStore


def _in_a_month() -> str:
    """An ``at`` well ahead yet within the year ahead an ``at`` may be."""
    return (datetime.now(UTC) + timedelta(days=30)).isoformat()


BODY_LIMIT = 2 * SMALL_BODY_BYTES
MAX_INBOX = 4
TOKENS = "game-token,operator:ops-token"
GAME = [(b"authorization", b"Bearer game-token")]
JSON = [(b"content-type", b"application/json")]

#: A request: method, the raw path as sent (percent-encoded), headers, and the ASGI messages of its body.
Call = tuple[str, str, list[tuple[bytes, bytes]], list[dict[str, Any]]]
server = pytest.fixture(redis_of_its_own)


def _body(*chunks: bytes) -> list[dict[str, Any]]:
    return [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]


def post(path: str, body: Any = None, *, raw: bytes | None = None, headers: list[tuple[bytes, bytes]] | None = None,
         chunks: int = 1, length: bool = True) -> Call:
    data = raw if raw is not None else json.dumps(body).encode() if body is not None else b""
    size = -(-len(data) // chunks) or 1
    declared = [(b"content-length", str(len(data)).encode())] if length else []
    return ("POST", path, [*(GAME if headers is None else headers), *JSON, *declared],
            _body(*[data[i:i + size] for i in range(0, max(len(data), 1), size)]))


def _nested(depth: int) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for _ in range(depth):
        obj = {"a": obj}
    return obj


def _requests(cid: str) -> list[Call]:
    """The table. Every accepted input names its message id, but one (a fresh id: compared by its shape)."""
    m, e = f"/v1/conversations/{cid}/messages", f"/v1/conversations/{cid}/events"
    return [
        post(m, {"text": "Where next?", "message_id": "m1", "reply_to": "wamid.X", "system": "Be brief."}),
        post(m, {"text": "Where next?", "message_id": "m1"}),  # a duplicate
        post(e, {"text": "Tagged the theatre", "message_id": "e1", "pinned": True, "key": "target"}),
        post(f"/v1/conversations/{cid}-2/events", {"text": "no id"}),
        post(f"/v1/conversations/{cid}-2/events", {"text": "answer it", "respond": True, "message_id": "r1"}),
        post(f"/v1/conversations/{cid}-2/messages", {"text": "later", "message_id": "l1",
                                                     "at": _in_a_month()}),
        post(f"/v1/conversations/{cid}-3/messages", {"text": "in chunks", "message_id": "c1"}, chunks=3, length=False),
        post(f"/v1/conversations/{cid}-3/events?source=game", {"text": "a query", "message_id": "q1"}),
        post(f"/v1/conversations/{cid}-3/events", raw=b'{"text": "padded", ' + b" " * SMALL_BODY_BYTES
             + b'"message_id": "big"}'),  # parsed in a worker thread
        post(f"/v1/conversations/{cid}-4/events", {"text": "ops", "message_id": "o1"},
             headers=[(b"authorization", b"Bearer ops-token")]),
        post(f"/v1/conversations/{cid}-4/events", {"text": "case", "message_id": "o2"},
             headers=[(b"authorization", b"bearer  game-token ")]),
        # Tokens and scopes (both hot operations are a producer's: a 403 is another route's, through the router).
        post(m, {"text": "hi"}, headers=[]),
        post(m, {"text": "hi"}, headers=[(b"authorization", b"Bearer nope")]),
        post(m, {"text": "hi"}, headers=[(b"authorization", b"Basic game-token")]),
        post(m, {"text": "hi"}, headers=[(b"authorization", b"Bearer nope"), (b"authorization", b"Bearer game-token")]),
        post(f"/v1/conversations/{cid}/pause", {}),
        # Bodies.
        post(m, raw=b"not json"), post(m, raw=b'\xff\xfe{"text": "hi"}'), post(m, raw=b""), post(m, raw=b"   "),
        post(m, [1, 2]), post(m, {}), post(m, {"text": ""}), post(m, {"text": "   "}), post(m, {"text": 5}),
        post(m, {"text": "hi", "extra": 1}), post(m, {"text": "x" * 101}), post(m, {"text": "hi", "message_id": "a\nb"}),
        post(m, {"text": "hi", "at": "tomorrow"}), post(e, {"text": "hi", "key": ""}),
        post(m, raw=b'{"text": "\\ud800"}'), post(m, {"text": "hi", "system": _nested(MAX_BODY_OBJECTS)}),
        post(m, raw=b'{"text": "' + b"y" * BODY_LIMIT + b'"}'),
        post(m, raw=b'{"text": "' + b"y" * BODY_LIMIT + b'"}', length=False, chunks=4),
        ("POST", m, [*GAME, (b"content-length", b"100")], [{"type": "http.request", "body": b'{"te', "more_body": True},
                                                          {"type": "http.disconnect"}]),
        ("POST", m, [*GAME, (b"content-length", b"many")], _body(b'{"text": "an odd length"}')),
        ("POST", m, [*GAME, (b"content-length", str(BODY_LIMIT + 1).encode())], _body(b'{"text": "never read"}')),
        # Paths and methods the fast path leaves to the router.
        post("/v1/conversations/bad%20id/messages", {"text": "hi"}), post(f"/v1/conversations/{'9' * 129}/events",
                                                                          {"text": "hi"}),
        post("/v1/conversations/caf%C3%A9/messages", {"text": "hi"}), post("/v1/conversations/a%2Fb/messages", {}),
        post("/v1/conversations/%34%34%37/events", {"text": "encoded digits", "message_id": "d1"}),
        post(m + "/", {"text": "hi"}), post(m + "/more", {"text": "hi"}), post("/v1/conversations//messages", {}),
        ("HEAD", m, GAME, _body(b"")), ("GET", m, GAME, _body(b"")), ("PUT", e, GAME, _body(b"{}")),
        ("DELETE", m, GAME, _body(b"")),
        # A full mailbox: MAX_INBOX inputs, then one more.
        *[post(f"/v1/conversations/{cid}-full/events", {"text": f"fill {i}", "message_id": f"f{i}"})
          for i in range(MAX_INBOX + 1)],
    ]


async def _asgi(app: Starlette, call: Call,
                sent: list[dict[str, Any]] | None = None) -> tuple[int, list[tuple[bytes, bytes]], Any]:
    """The answer to one request, as uvicorn would hand it to the app (``path`` percent-decoded); what the app sent
    goes to ``sent`` too, when given (kept when the app raises)."""
    method, raw_path, headers, messages = call
    path, _, query = raw_path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": unquote(path), "raw_path": path.encode(),
             "query_string": query.encode(), "root_path": "", "client": ("127.0.0.1", 50000),
             "server": ("testserver", 80), "headers": [(b"host", b"testserver"), *headers]}
    pending = list(messages)
    sent = [] if sent is None else sent

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent[1:])
    # A fresh message id (32 hex digits) differs by nature: its shape is compared.
    return sent[0]["status"], sent[0]["headers"], re.sub(rb'"input_id":"[0-9a-f]{32}"', b'"input_id":"<fresh>"', body)


def _counts() -> dict[tuple[str, ...], float]:
    return {tuple(s.labels.values()): s.value for metric in ingress_metrics.API_REQUESTS.collect()
            for s in metric.samples if s.name.endswith("_total")}


def _answers(app: Starlette, calls: list[Call]) -> tuple[list[Any], dict[tuple[str, ...], float]]:
    """Every answer, and what the metric counted meanwhile."""
    before = _counts()

    async def run() -> list[Any]:  # one loop throughout, as in uvicorn
        return [await _asgi(app, call) for call in calls]

    answers = asyncio.run(run())
    counted = {k: v - before.get(k, 0) for k, v in _counts().items() if v != before.get(k, 0)}
    return answers, counted


def _app(store: ConversationStore, *, fast: bool) -> Starlette:
    client = ConversationClient(store, wake=lambda cid: None, max_text_chars=100)
    return create_app(client, store, app_secret="s", verify_token="v", api_tokens=TOKENS, max_body_bytes=BODY_LIMIT,
                      fast_inputs=fast)


def _real(server: RedisServer, prefix: str) -> ConversationStore:
    return ConversationStore(server.client(), prefix=prefix, limits=StoreLimits(max_inbox=MAX_INBOX))


def _fake(prefix: str) -> ConversationStore:
    return ConversationStore(fakeredis.FakeRedis(), prefix=prefix, limits=StoreLimits(max_inbox=MAX_INBOX))


@pytest.fixture(params=["redis", "fakeredis"])
def stores(request: pytest.FixtureRequest) -> Iterator[tuple[ConversationStore, ConversationStore]]:
    """Two stores alike, one for each app: a real Redis's (the accept on the loop) or fakeredis (in a thread)."""
    if request.param == "redis":
        server = next(redis_of_its_own())
        yield _real(server, "fast"), _real(server, "routed")
        server.stop()
    else:
        yield _fake("fast"), _fake("routed")


def _compare(fast: Starlette, routed: Starlette, calls: list[Call]) -> list[Any]:
    fast_answers, fast_counted = _answers(fast, calls)
    routed_answers, routed_counted = _answers(routed, calls)
    for call, got, expected in zip(calls, fast_answers, routed_answers, strict=True):
        assert got == expected, f"{call[0]} {call[1]}: {call[3][:1]}"
    assert fast_counted == routed_counted
    return fast_answers


def test_the_fast_path_answers_as_the_route_does(stores: tuple[ConversationStore, ConversationStore]) -> None:
    calls = _requests("447700900123")
    answers = _compare(_app(stores[0], fast=True), _app(stores[1], fast=False), calls)
    statuses = [status for status, _, _ in answers]
    # The table covers what it says it does (a change that left a case unreached would pass silently otherwise).
    assert {202, 400, 401, 403, 404, 405, 307, 413, 422, 429} <= set(statuses)
    assert statuses[-1] == 429 and statuses[1] == 202 and b'"duplicate":true' in answers[1][2]
    assert (b"www-authenticate", b"Bearer") in answers[11][1]


def test_with_redis_unavailable_the_fast_path_answers_as_the_route_does() -> None:
    def down(prefix: str) -> ConversationStore:  # a port nothing listens on: the accept fails, on the loop too
        r = redis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
        return ConversationStore(r, prefix=prefix)

    fake = fakeredis.FakeServer()
    fake.connected = False
    gone = [ConversationStore(fakeredis.FakeRedis(server=fake), prefix=p) for p in ("fast", "routed")]
    calls = [post("/v1/conversations/447700900123/messages", {"text": "hi", "message_id": "m1"}),
             post("/v1/conversations/447700900123/events", {"text": "hi"}),
             post("/v1/conversations/447700900123/events", {"text": "hi"}, headers=[]),
             post("/v1/conversations/447700900123/events", {"text": ""})]
    for fast, routed in ((down("fast"), down("routed")), gone):
        answers = _compare(_app(fast, fast=True), _app(routed, fast=False), calls)
        assert [status for status, _, _ in answers] == [503, 503, 401, 422]
        assert (b"retry-after", b"2") in answers[0][1]


def test_the_fast_path_answers_without_the_router() -> None:
    """Without this, the comparison above could be comparing the router with itself."""
    app = _app(_fake("alone"), fast=True)
    app.router.routes.clear()  # the router now answers 404 to everything
    [(status, _, body)], _ = _answers(app, [post("/v1/conversations/447700900123/events", {"text": "hi"})])
    assert status == 202 and b"input_id" in body
    [(status, _, _)], _ = _answers(app, [post("/v1/conversations/447700900123/reset", {})])
    assert status == 404


@pytest.mark.parametrize("message_id", ["m1", "ünïcode ✓ 😀", 'quote " and \\ backslash', "tab\t \x01 \u2028 /",
                                        "x" * 200])
@pytest.mark.parametrize("duplicate", [False, True])
def test_the_202_is_what_the_model_in_a_json_response_writes(message_id: str, duplicate: bool) -> None:
    made = api_module._accepted(Submitted("c", message_id, duplicate, 1))
    model = JSONResponse(Accepted(input_id=message_id, duplicate=duplicate).model_dump(), status_code=202)
    assert (made.status_code, made.body, made.raw_headers) == (model.status_code, model.body, model.raw_headers)


def test_an_unexpected_error_is_the_same_500(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path runs inside Starlette's ServerErrorMiddleware: a bug answers the route's 500, then raises."""
    async def broken(*args: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(api_module, "_in_thread", lambda fn: broken)  # fakeredis: every input runs in a thread
    answers: list[list[dict[str, Any]]] = []
    for fast in (True, False):
        answers.append([])
        with pytest.raises(RuntimeError, match="a bug"):
            asyncio.run(_asgi(_app(_fake("bug"), fast=fast), post("/v1/conversations/447700900123/events",
                                                                  {"text": "hi"}), answers[-1]))
    assert answers[0] == answers[1] and answers[0][0]["status"] == 500
