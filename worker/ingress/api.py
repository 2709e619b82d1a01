"""The producers' HTTP API under ``/v1/``, on the webhook process: a game engine in any language queues messages,
events and resets, deletes a conversation and reads its summary, with the Python client's guarantees.

Authentication: ``Authorization: Bearer <token>``, the tokens from ``PARLEY_API_TOKENS`` (see :func:`parse_tokens`),
compared in constant time against every configured token. No tokens: the API is off (404).

Answers (the OpenAPI document at ``GET /v1/openapi.json`` says the same, see :mod:`worker.ingress.openapi`): 202
``{"input_id", "duplicate"}``; 401 (no or unknown token, with ``WWW-Authenticate: Bearer``); 403 (the token's scope
does not cover the operation); 400 (not JSON); 422 (a field is wrong: ``{"error", "field"}``); 413 (body over
``PARLEY_WEBHOOK_MAX_BODY_BYTES``); 429 (the conversation's mailbox is full) and 503 (Redis unavailable), both with
``Retry-After``: the same request with the same message id can be sent again safely.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cache, partial
from json.encoder import encode_basestring
from typing import Any

from prometheus_client import Counter
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from worker.client import CheckedInput, ConversationClient, Submitted
from worker.client.async_client import AsyncClient
from worker.client.summary import known, plain, summary
from worker.envelopes.producer_bodies import (
    OPERATIONS,
    PAUSE_KINDS,
    Cancelled,
    Operation,
    PauseState,
    ProducerBody,
    Scope,
    field_of,
)
from worker.errors import (
    ConfigurationError,
    EnvelopeTooLargeError,
    InboxFullError,
    InputError,
    StoreError,
    WebhookTooLargeError,
)
from worker.ingress import metrics as ingress_metrics
from worker.ingress.body import TooLarge, read_body
from worker.ingress.parse import decode_webhook
from worker.observability import tracing
from worker.store.answers import Pause

log = logging.getLogger("parley.api")

SCOPES: tuple[Scope, ...] = ("producer", "operator")
#: Seconds a client is asked to wait after a 429 (a full mailbox drains at the model's pace) or a 503 (an outage).
RETRY_AFTER_FULL = 5
RETRY_AFTER_UNAVAILABLE = 2
#: The most JSON objects any endpoint's valid body holds (each endpoint refuses past its own body's ``max_objects``).
MAX_BODY_OBJECTS = max(op.body.max_objects for op in OPERATIONS if op.body is not None)
#: A body up to this size is parsed on the event loop (tens of microseconds); a larger one in a worker thread.
SMALL_BODY_BYTES = 8 * 1024
_SCOPE_PREFIX = re.compile(r"[a-z]+")


def parse_tokens(raw: str) -> list[tuple[bytes, Scope]]:
    """``PARLEY_API_TOKENS``: comma-separated tokens, each ``token`` (scope ``producer``: queue inputs, read a
    summary) or ``operator:token`` (also delete a conversation, and the handoff operations: pause, resume, a
    person's messages).
    ``producer:token`` is allowed too. Several tokens of a scope let producers rotate them. A prefix of lower-case
    letters before ``:`` that is not a scope is refused (a misspelt scope must not become a producer's token); a
    token is otherwise whatever is left, colons included. Raises :class:`ConfigurationError`."""
    out: list[tuple[bytes, Scope]] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        prefix, sep, rest = item.partition(":")
        scope: Scope = "producer"
        if sep and _SCOPE_PREFIX.fullmatch(prefix):
            if prefix not in SCOPES:
                raise ConfigurationError(f"PARLEY_API_TOKENS: unknown scope {prefix!r} (known: {', '.join(SCOPES)})")
            scope, item = prefix, rest  # type: ignore[assignment]  # checked against SCOPES just above
        if not item:
            raise ConfigurationError("PARLEY_API_TOKENS: an empty token")
        out.append((item.encode(), scope))
    return out


def _scope_of(header: str | None, tokens: list[tuple[bytes, Scope]]) -> Scope | None:
    """The scope of the request's bearer token, ``None`` when it has none or an unknown one. Every configured token
    is compared (in constant time), so the answer's timing says nothing about which one came close."""
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    candidate = given.strip().encode("utf-8", "replace")
    found: Scope | None = None
    for token, scope in tokens:
        if hmac.compare_digest(candidate, token) and found != "operator":
            found = scope
    return found


def _allows(held: Scope, needed: Scope) -> bool:
    return held == "operator" or needed == "producer"


def problem(status: int, error: str, field: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "field": field}, status_code=status, headers=headers)


def pause_state(cid: str, done: Pause | bool) -> PauseState:
    """The answer to a pause (``done`` the pause in force) or a resume (``done``: whether it was paused)."""
    if isinstance(done, Pause):
        return PauseState(conversation_id=cid, paused=True, until=done.until)
    return PauseState(conversation_id=cid, paused=False, until=None, was_paused=done)


def _input_error(exc: InputError) -> JSONResponse:
    if isinstance(exc, InboxFullError):
        return problem(429, f"the conversation's mailbox is full, retry later: {exc}",
                       headers={"Retry-After": str(RETRY_AFTER_FULL)})
    if isinstance(exc, EnvelopeTooLargeError):
        return problem(413, str(exc))
    return problem(422, str(exc), exc.field)


def _accepted(done: Submitted) -> Response:
    """202 :class:`Accepted`, byte for byte what ``JSONResponse(Accepted(...).model_dump(), 202)`` writes (a test holds
    them equal: the string as JSONResponse's encoder writes it, ``ensure_ascii`` off), without the model and the
    encoder: nearly every request of a busy producer ends here (~1 µs of the ~4 µs it took)."""
    body = b'{"input_id":%s,"duplicate":%s}' % (encode_basestring(done.message_id).encode(),
                                                  b"true" if done.duplicate else b"false")
    return Response(body, status_code=202, media_type=JSONResponse.media_type)


@dataclass(frozen=True)
class ProducerApi:
    """The handlers, bound to a client and the configured tokens. ``on_loop``: the client's accept awaited on the
    event loop (``None`` when the store cannot: the blocking client then runs in a worker thread)."""

    client: ConversationClient
    tokens: list[tuple[bytes, Scope]]
    body_limit: int
    on_loop: AsyncClient | None = None

    def body(self, op: Operation, raw: bytes | bytearray) -> ProducerBody | Response:
        """The body parsed and validated (CPU only), or the answer that refuses it."""
        assert op.body is not None
        try:
            obj: Any = (decode_webhook(raw, max_objects=op.body.max_objects,
                                       endpoint=f"{op.method} {op.path} (the most a valid body holds)")
                        if raw.strip() else {})
        except WebhookTooLargeError as exc:
            return problem(413, str(exc))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return problem(400, f"the body is not JSON: {exc}")
        try:
            return op.body.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            return problem(422, f"{field_of(err['loc']) or 'body'}: {err['msg']}", field_of(err["loc"]))

    def input(self, op: Operation, cid: str, raw: bytes | bytearray) -> Response:
        """Validate one body and queue its input (blocking: runs in a worker thread)."""
        body = self.body(op, raw)
        return body if isinstance(body, Response) else self.submit(op, cid, body)

    def submit(self, op: Operation, cid: str, body: ProducerBody) -> Response:
        """Queue the body's input through the client's two steps, or pause or resume (blocking)."""
        assert op.kind is not None
        try:
            if op.kind in PAUSE_KINDS:  # a pause or a resume: not an input, it answers the pause in force
                pause = getattr(self.client, op.kind)(cid, **body.arguments())
                return JSONResponse(pause_state(cid, pause).model_dump())
            # A player's phone number and user id name one conversation (ConversationClient.resolve).
            return self.accept(self.client.inputs.build(op.kind, self.client.resolve(cid), body.arguments()))
        except InputError as exc:
            return _input_error(exc)

    def accept(self, checked: CheckedInput) -> Response:
        """Accept a built input (blocking)."""
        try:
            return _accepted(self.client.intake.accept(checked))
        except InputError as exc:
            return _input_error(exc)

    async def input_on_loop(self, op: Operation, cid: str, raw: bytes | bytearray) -> Response:
        """:meth:`input` with a plain input (:attr:`~worker.client.builder.CheckedInput.plain`) accepted on the loop;
        a body past :data:`SMALL_BODY_BYTES` is parsed in a worker thread, so a large one never holds the loop. What is
        not a plain input (a reset, a scheduled input, an answered event) is accepted in a worker thread, and so are a
        pause and a resume."""
        assert op.kind is not None and self.on_loop is not None
        body = self.body(op, raw) if len(raw) <= SMALL_BODY_BYTES else await run_in_threadpool(self.body, op, raw)
        if isinstance(body, Response):
            return body
        if op.kind in PAUSE_KINDS:
            return await run_in_threadpool(self.submit, op, cid, body)
        try:
            # A player's phone number and user id name one conversation: resolved on the loop's own connection.
            checked = self.client.inputs.build(op.kind, await self.on_loop.resolve(cid), body.arguments())
            if checked.plain:
                return _accepted(await self.on_loop.accept(checked))
        except InputError as exc:
            return _input_error(exc)
        return await run_in_threadpool(self.accept, checked)

    def delete(self, cid: str) -> Response:
        try:
            self.client.delete(cid)
        except InputError as exc:
            return _input_error(exc)
        return Response(status_code=204)

    def cancel_scheduled(self, cid: str, message_id: str) -> Response:
        try:
            cancelled = self.client.cancel_scheduled(cid, message_id)
        except InputError as exc:
            return _input_error(exc)
        if not cancelled:
            return problem(404, f"no input {message_id!r} is held for {cid} (never scheduled, cancelled, or due)")
        return JSONResponse(Cancelled(message_id=message_id, cancelled=True).model_dump())

    def summary(self, cid: str) -> Response:
        try:
            view = summary(self.client.store, self.client.resolve(cid))
        except InputError as exc:
            return _input_error(exc)
        if not known(view):
            return problem(404, f"no conversation {cid}")
        return Response(json.dumps(view, default=plain), media_type="application/json")


Handler = Callable[[Request], Awaitable[Response]]


#: An endpoint's work: the conversation id, the raw body and the path's other parameters (``message_id``).
Run = Callable[..., Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Call:
    """What an endpoint reads of one request: taken from Starlette's :class:`Request` (:meth:`of`) or straight from
    the ASGI scope (the fast path, :mod:`worker.ingress.fast_inputs`), so both are answered by the same
    :func:`serve`. ``params``: the path's parameters (``conversation_id``; ``message_id`` for DELETE
    .../scheduled/{message_id}); ``read(limit)``: the body within ``limit`` (raises :class:`TooLarge` or
    ``ClientDisconnect``)."""

    method: str
    authorization: str | None
    traceparent: str | None
    params: Mapping[str, Any]
    read: Callable[[int], Awaitable[bytearray]]

    @classmethod
    def of(cls, request: Request) -> Call:
        headers = request.headers
        return cls(request.method, headers.get("authorization"), headers.get("traceparent"), request.path_params,
                   partial(read_body, request))


def _in_thread(fn: Callable[..., Response]) -> Run:
    async def run(cid: str, raw: bytes | bytearray, **params: str) -> Response:
        return await run_in_threadpool(partial(fn, cid, raw, **params))

    return run


async def serve(api: ProducerApi, op: Operation, run: Run, call: Call) -> Response:
    """One request's answer: authenticate, read the body within the limit, ``run`` it (on the loop or in a worker
    thread), map a store outage to 503; in a span that goes on with the producer's own trace, when its request
    carries one (W3C traceparent) and a known token, through the input's; the outcome counted.

    The token is checked before the span starts: a caller without one must not place spans in a trace of its
    choosing (nor have them sampled by its flag), so its request's span starts a trace of its own."""
    scope = _scope_of(call.authorization, api.tokens)
    parent = call.traceparent if scope is not None else None
    with tracing.span(f"{call.method} {op.operation_id}", parent=parent, kind="server",
                      attributes={"http.request.method": call.method}) as span:
        response = await _answer(api, op, run, call, scope)
        span.set("http.response.status_code", response.status_code)
    _counted(op.operation_id, response.status_code).inc()
    return response


@cache
def _counted(operation: str, status: int) -> Counter:
    """The metric's child for an operation and a status (``labels()`` takes a lock and checks the labels each time)."""
    return ingress_metrics.API_REQUESTS.labels(operation, str(status))


async def _answer(api: ProducerApi, op: Operation, run: Run, call: Call, scope: Scope | None) -> Response:
    if scope is None:
        return problem(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})
    if not _allows(scope, op.scope):
        return problem(403, f"this token's scope ({scope}) does not allow {op.operation_id}")
    try:
        raw = await call.read(api.body_limit) if op.body is not None else b""
    except TooLarge:
        return problem(413, f"body larger than {api.body_limit} bytes")
    except ClientDisconnect:
        return Response(status_code=400)
    try:
        extra = {k: v for k, v in call.params.items() if k != "conversation_id"}
        return await run(call.params["conversation_id"], raw, **extra)
    except StoreError as exc:  # Redis down, failing over, refusing writes: the same request can be sent again
        log.error("API %s not done, answering 503: %s", op.operation_id, exc)
        return problem(503, "storage unavailable, retry later", headers={"Retry-After": str(RETRY_AFTER_UNAVAILABLE)})


def _guarded(api: ProducerApi, op: Operation, run: Run) -> Handler:
    async def endpoint(request: Request) -> Response:
        return await serve(api, op, run, Call.of(request))

    return endpoint


def _by_method(handlers: dict[str, Handler]) -> Handler:
    async def endpoint(request: Request) -> Response:
        # HEAD is answered as GET (Starlette adds it to a GET route).
        return await (handlers.get(request.method) or handlers["GET"])(request)

    return endpoint


@dataclass(frozen=True)
class Endpoints:
    """The ``/v1/`` routes, and what the fast path (:mod:`worker.ingress.fast_inputs`) needs to answer an operation
    exactly as its route does: the handlers' state and each operation's work (``runs``, by operation id)."""

    api: ProducerApi
    routes: list[Route]
    runs: dict[str, Run]


def _run(api: ProducerApi, op: Operation) -> Run:
    if op.kind is not None:
        return partial(api.input_on_loop, op) if api.on_loop is not None else _in_thread(partial(api.input, op))
    fn = {"cancel_scheduled": api.cancel_scheduled, "delete": api.delete}.get(op.operation_id, api.summary)
    return _in_thread(partial(lambda f, cid, _raw, **params: f(cid, **params), fn))


def endpoints(client: ConversationClient, tokens: list[tuple[bytes, Scope]], body_limit: int) -> Endpoints | None:
    """The producers' API (``None`` when no token is configured: the API is off and ``/v1/`` answers 404)."""
    if not tokens:
        return None
    from worker.ingress.openapi import document

    api = ProducerApi(client, tokens, body_limit, AsyncClient.for_client(client))
    runs = {op.operation_id: _run(api, op) for op in OPERATIONS}
    by_path: dict[str, dict[str, Handler]] = {}
    for op in OPERATIONS:
        by_path.setdefault(op.path, {})[op.method] = _guarded(api, op, runs[op.operation_id])
    # One route per path, so a 405 lists in `Allow` every method the path has (a route per method lists its own).
    routes = [Route(path, _by_method(handlers), methods=list(handlers)) for path, handlers in by_path.items()]
    doc = document(OPERATIONS, max_text_chars=client.max_text_chars)

    async def openapi(request: Request) -> Response:
        return JSONResponse(doc)

    routes.append(Route("/v1/openapi.json", openapi, methods=["GET"]))
    return Endpoints(api, routes, runs)
