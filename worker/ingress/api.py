"""The producers' HTTP API under ``/v1/``, on the webhook process: a game engine in any language queues messages,
events and resets, deletes a conversation and reads its summary, with the Python client's guarantees.

Authentication: ``Authorization: Bearer <token>``, the tokens from ``PARLEY_API_TOKENS`` (see :func:`parse_tokens`)
and ``PARLEY_API_TOKENS_FILE`` (:mod:`worker.ingress.api_tokens`), compared in constant time against every configured
token. No tokens: the API is off (404). A token of the file may be limited to some conversations (by id prefix, by
business number, :meth:`~worker.settings.api_tokens.Grant.allows`): any other conversation is answered 404 as one that
does not exist, and a ``recipient`` outside them 422; and to a rate, counted over every ingress process (429).

Answers (the OpenAPI document at ``GET /v1/openapi.json`` says the same, see :mod:`worker.ingress.openapi`): 202
``{"input_id", "duplicate"}``; 401 (no or unknown token, with ``WWW-Authenticate: Bearer``); 403 (the token's scope
does not cover the operation); 400 (not JSON); 422 (a field is wrong: ``{"error", "field"}``); 413 (body over
``PARLEY_WEBHOOK_MAX_BODY_BYTES``); 429 (the conversation's mailbox is full, or the token's rate is spent) and 503
(Redis unavailable), both with ``Retry-After``: the same request with the same message id can be sent again safely.
"""

from __future__ import annotations

import json
import logging
import math
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
from worker.ingress.api_tokens import TokenSource
from worker.ingress.body import TooLarge, read_body
from worker.ingress.parse import decode_webhook
from worker.observability import tracing
from worker.settings.api_tokens import Grant
from worker.settings.business_numbers import Numbers
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


def fixed_grants(raw: str) -> tuple[Grant, ...]:
    """The tokens of ``PARLEY_API_TOKENS`` (:func:`parse_tokens`): each reaches every conversation, at any rate."""
    return tuple(Grant(token, scope, f"PARLEY_API_TOKENS[{i}]") for i, (token, scope) in enumerate(parse_tokens(raw)))


def _allows(held: Scope, needed: Scope) -> bool:
    return held == "operator" or needed == "producer"


def no_conversation(cid: str) -> JSONResponse:
    """404 for a conversation Parley knows nothing of, and the same for one the token does not reach (so a token
    cannot tell another game's conversations from ones that do not exist)."""
    return problem(404, f"no conversation {cid}")


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
    tokens: TokenSource
    body_limit: int
    on_loop: AsyncClient | None = None
    numbers: Numbers | None = None

    def reaches(self, grant: Grant, address: str) -> bool:
        """Whether ``grant`` reaches the conversation (or the reply recipient) ``address``, on the business number
        its id names (none known when no number is configured)."""
        number = None
        if grant.numbers is not None and self.numbers is not None:  # only a token limited to numbers needs it
            number = self.numbers.route(address)[0]
        return grant.allows(address, number)

    def reaches_player(self, grant: Grant, named: str) -> bool:
        """Whether ``grant`` reaches the conversation the id ``named`` leads to (blocking: one read for a limited
        token). A player named by their phone number or their user id is the one conversation the two lead to
        (:meth:`~worker.client.ConversationClient.resolve`), so the reach is decided on that conversation: an id
        inside the token's reach that leads elsewhere is refused, and another id of a player it reaches is not."""
        if not grant.limited:
            return True
        try:
            cid = self.client.resolve(named)
        except InputError:  # not a conversation id: the operation refuses it as it would for any token
            cid = named
        return self.reaches(grant, cid)

    def rate_wait(self, grant: Grant) -> float:
        """0 when the token may make this request, else the seconds until it may (blocking: one round trip)."""
        return self.client.store.api_slot(grant.digest, grant.per_second) if grant.per_second else 0.0

    def body(self, op: Operation, raw: bytes | bytearray, grant: Grant) -> ProducerBody | Response:
        """The body parsed and validated (CPU only), or the answer that refuses it (a ``recipient`` the token does
        not reach too)."""
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
            body = op.body.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            return problem(422, f"{field_of(err['loc']) or 'body'}: {err['msg']}", field_of(err["loc"]))
        recipient = getattr(body, "recipient", None)
        if recipient is not None and not self.reaches(grant, recipient):
            return problem(422, "recipient: outside the conversations this token may reach", "recipient")
        return body

    def input(self, op: Operation, cid: str, raw: bytes | bytearray, grant: Grant) -> Response:
        """Validate one body and queue its input (blocking: runs in a worker thread)."""
        body = self.body(op, raw, grant)
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

    async def input_on_loop(self, op: Operation, cid: str, raw: bytes | bytearray, grant: Grant) -> Response:
        """:meth:`input` with a plain input (:attr:`~worker.client.builder.CheckedInput.plain`) accepted on the loop;
        a body past :data:`SMALL_BODY_BYTES` is parsed in a worker thread, so a large one never holds the loop. What is
        not a plain input (a reset, a scheduled input, an answered event) is accepted in a worker thread, and so are a
        pause and a resume."""
        assert op.kind is not None and self.on_loop is not None
        body = (self.body(op, raw, grant) if len(raw) <= SMALL_BODY_BYTES
                else await run_in_threadpool(self.body, op, raw, grant))
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
            return no_conversation(cid)
        return Response(json.dumps(view, default=plain), media_type="application/json")


Handler = Callable[[Request], Awaitable[Response]]


#: An endpoint's work: the conversation id, the raw body, the request's token and the path's other parameters
#: (``message_id``).
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
    async def run(cid: str, raw: bytes | bytearray, grant: Grant, **params: str) -> Response:
        return await run_in_threadpool(partial(fn, cid, raw, grant, **params))

    return run


async def serve(api: ProducerApi, op: Operation, run: Run, call: Call) -> Response:
    """One request's answer: authenticate, read the body within the limit, ``run`` it (on the loop or in a worker
    thread), map a store outage to 503; in a span that goes on with the producer's own trace, when its request
    carries one (W3C traceparent) and a known token, through the input's; the outcome counted.

    The token is checked before the span starts: a caller without one must not place spans in a trace of its
    choosing (nor have them sampled by its flag), so its request's span starts a trace of its own."""
    grant = api.tokens.find(call.authorization)
    parent = call.traceparent if grant is not None else None
    attributes = {"http.request.method": call.method, **({"parley.api.token": grant.name} if grant else {})}
    with tracing.span(f"{call.method} {op.operation_id}", parent=parent, kind="server",
                      attributes=attributes) as span:
        response = await _answer(api, op, run, call, grant)
        span.set("http.response.status_code", response.status_code)
    _counted(op.operation_id, response.status_code).inc()
    return response


@cache
def _counted(operation: str, status: int) -> Counter:
    """The metric's child for an operation and a status (``labels()`` takes a lock and checks the labels each time)."""
    return ingress_metrics.API_REQUESTS.labels(operation, str(status))


async def _answer(api: ProducerApi, op: Operation, run: Run, call: Call, grant: Grant | None) -> Response:
    if grant is None:
        return problem(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})
    try:
        # Counted before anything else is looked at: a token probing for conversations spends its rate too.
        wait = await run_in_threadpool(api.rate_wait, grant) if grant.per_second else 0.0
        if wait > 0:
            return problem(429, f"this token's rate ({grant.per_second:g} a second) is spent, retry later",
                           headers={"Retry-After": str(max(1, math.ceil(wait)))})
        if not _allows(grant.role, op.scope):
            return problem(403, f"this token's scope ({grant.role}) does not allow {op.operation_id}")
        cid = call.params["conversation_id"]
        # Only a limited token pays the read (and the thread hop) that finds where the id leads.
        if grant.limited and not await run_in_threadpool(api.reaches_player, grant, cid):
            log.info("API token %s asked for %s on %s, outside its reach: answered 404", grant.name, op.operation_id,
                     cid, extra={"conversation_id": cid})
            return no_conversation(cid)
        try:
            raw = await call.read(api.body_limit) if op.body is not None else b""
        except TooLarge:
            return problem(413, f"body larger than {api.body_limit} bytes")
        except ClientDisconnect:
            return Response(status_code=400)
        extra = {k: v for k, v in call.params.items() if k != "conversation_id"}
        return await run(cid, raw, grant, **extra)
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
    return _in_thread(partial(lambda f, cid, _raw, _grant, **params: f(cid, **params), fn))


def endpoints(client: ConversationClient, tokens: TokenSource, body_limit: int,
              numbers: Numbers | None = None) -> Endpoints | None:
    """The producers' API (``None`` when no token is configured: the API is off and ``/v1/`` answers 404).
    ``numbers``: the business numbers, which a token limited to numbers is checked against."""
    if not tokens.on:
        return None
    from worker.ingress.openapi import document

    api = ProducerApi(client, tokens, body_limit, AsyncClient.for_client(client), numbers)
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
