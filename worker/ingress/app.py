"""The WhatsApp webhook ingress: a small Starlette app.

    uvicorn worker.ingress.app:app --host 0.0.0.0 --port 8080

``GET /webhook`` answers Meta's verification handshake (200 + the raw ``hub.challenge``, else 403).
``POST /webhook`` reads the body up to ``PARLEY_WEBHOOK_MAX_BODY_BYTES`` (413 as soon as it passes), then, in a
worker thread (a large body never stalls the event loop), checks ``X-Hub-Signature-256`` over the raw bytes
(missing or wrong: 401, nothing queued), decodes and parses the batch (not JSON or not a webhook: 400; far more
updates than Meta batches: 413) and gives every player message an outcome through
:class:`~worker.client.ConversationClient` (deduplicated on the wamid, so Meta's retries are harmless): chat turns
(text, taps on buttons and list rows, images, shared locations), reactions (added without a reply; locations
too with ``PARLEY_LOCATION_AS=event``), the configured short answer for what Parley cannot read (voice notes, video, documents, stickers, contacts, unsupported and unknown types) and
for what it must refuse as it is (text over the input limit: ``PARLEY_REFUSED_REPLY``). It records delivery
statuses (each message's status only moves forward, and a status naming a reply part still in flight is kept with
it). A message or status older than ``PARLEY_WEBHOOK_MAX_AGE_SECONDS`` is not applied (a replay). The answer is
200 with a summary ``{"accepted", "events", "notices", "duplicates", "statuses", "ignored"}`` (``accepted`` counts
chat turns). Redis unavailable, or a conversation's mailbox full: 503, so Meta retries the whole batch (what was
already queued deduplicates; the rest of the batch is still applied first).

``GET /healthz``: 200 when Redis answers, 503 otherwise; it also says whether the newest signature check failed.
``GET /metrics``: the Prometheus metrics, every POST and every record counted by outcome (summed over uvicorn's
worker processes, see :mod:`worker.ingress.multiproc`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar, cast

import anyio
import anyio.to_thread
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from worker import metrics
from worker.client import ConversationClient, Submitted
from worker.durable_record import entries
from worker.envelopes.inputs import MAX_SENT_AT
from worker.errors import InboxFullError, InputError, StoreError, WebhookTooLargeError
from worker.ingress import metrics as ingress_metrics
from worker.ingress.api import endpoints, fixed_grants
from worker.ingress.api_tokens import TokenSource
from worker.ingress.body import TooLarge, read_body
from worker.ingress.business_number import UNKNOWN_NUMBER, SkippedChange, skipped_changes
from worker.ingress.fast_inputs import FastInputs
from worker.ingress.parse import (
    IdentityChange,
    InboundEvent,
    InboundMessage,
    InboundNotice,
    LocationAs,
    MarketingPreference,
    Record,
    StatusUpdate,
    Unsupported,
    check_update_count,
    decode_webhook,
    parse_webhook,
    record_age,
    sent_at,
    verify_handshake,
    verify_signature,
)
from worker.observability import tracing
from worker.settings.business_numbers import SETTING, Numbers
from worker.store.answers import StatusRecorded

log = logging.getLogger("parley.ingress")

_Linkable = TypeVar("_Linkable", bound=InboundMessage | InboundEvent | InboundNotice | StatusUpdate)


class IngressStore(Protocol):
    """What the ingress needs of the store (``ConversationStore`` has it)."""

    def record_status(self, cid: str, provider_id: str, status: str, detail: str = "", *,
                      reply_id: str | None = None, part: int = 0, record: bytes | None = None) -> StatusRecorded: ...

    def ping(self) -> bool: ...

    def link_identity(self, phone: str | None, user_id: str | None) -> str: ...

    def move_identity(self, field: str, old: str, new: str) -> str: ...

    def set_opt_out(self, cid: str, what: str, on: bool) -> bool: ...


@dataclass(frozen=True)
class _Replies:
    """The configured short answers: ``unsupported`` (what Parley cannot read) and ``refused`` (what it must refuse
    as it is); empty = the deployment chose silence. ``numbers``: the business numbers the webhooks are routed by
    (several numbers only; a number's own system prompt is the turn's to apply, see
    :mod:`worker.service.number_turns`)."""

    unsupported: str
    refused: str
    numbers: Numbers | None = None


def _submit(client: ConversationClient, rec: InboundMessage | InboundEvent | InboundNotice,
            unsupported_reply: str) -> Submitted:
    # Through the client's two steps rather than its methods: the record's conversation is resolved already.
    inputs, accept = client.inputs, client.intake.accept
    if isinstance(rec, InboundMessage):
        return accept(inputs.message(rec.conversation_id, rec.text, message_id=rec.wamid, reply_to=rec.thread,
                                     recipient=rec.sender, media=rec.media, sent_at=_sent_at(rec)))
    if isinstance(rec, InboundEvent):
        # Not pinned: where the player stood or what they thought of one reply matters now, not forever.
        return accept(inputs.event(rec.conversation_id, rec.text, message_id=rec.wamid, from_player=True,
                                   sent_at=_sent_at(rec)))
    return accept(inputs.notice(rec.conversation_id, unsupported_reply, message_id=rec.wamid, reply_to=rec.wamid,
                                recipient=rec.sender))


def _sent_at(rec: InboundMessage | InboundEvent) -> int | None:
    """WhatsApp's time of the player's message, kept with it in the state; none when it does not read as one."""
    sent = sent_at(rec)
    return sent if sent is not None and sent <= MAX_SENT_AT else None


_OUTCOME = {InboundMessage: "accepted", InboundEvent: "event", InboundNotice: "notice"}
#: The metric's outcomes as the response's summary counts them (kept as it was for Meta and the logs): an identity
#: change and a marketing preference queue nothing, so they count as ignored there (the metric names them).
_SUMMARY = {"accepted": "accepted", "event": "events", "notice": "notices", "refused": "notices",
            "identity": "ignored", "preference": "ignored",

            "duplicate": "duplicates", "status": "statuses", "ignored": "ignored", "too_old": "ignored",
            "status_too_old": "ignored", UNKNOWN_NUMBER: "ignored"}


def _input(client: ConversationClient, rec: InboundMessage | InboundEvent | InboundNotice,
           replies: _Replies) -> str:
    """Queue one player's message; its outcome. Raises :class:`InboxFullError` (the caller answers 503)."""
    if isinstance(rec, InboundNotice) and not replies.unsupported.strip():
        # PARLEY_UNSUPPORTED_REPLY set empty: the deployment chose silence for what Parley cannot read.
        _report(Unsupported(kind=rec.type, wamid=rec.wamid, reason=f"{rec.reason}; no short answer configured"))
        return "ignored"
    try:
        r = _submit(client, rec, replies.unsupported)
    except InboxFullError:  # an InputError too, but retrying later does help: never drop it
        raise
    except InputError as exc:  # oversize text, a lone surrogate, ...: retrying the batch would not help
        return _refuse(client, rec, replies.refused, exc)
    if isinstance(rec, InboundNotice) and not r.duplicate:
        log.info("inbound %s answered with the short answer: %s", rec.type, rec.reason,
                 extra={"message_id": rec.wamid, "message_type": rec.type})
    return "duplicate" if r.duplicate else _OUTCOME[type(rec)]


def _refuse(client: ConversationClient, rec: InboundMessage | InboundEvent | InboundNotice, reply: str,
            exc: InputError) -> str:
    """The player's message cannot be queued as it is: they get the configured short answer instead (in order with
    the other replies, deduplicated on their message's id like the message would have been)."""
    extra = {"message_id": rec.wamid, "message_type": rec.type, "error": type(exc).__name__}
    if not reply.strip():
        log.warning("inbound %s refused, no short answer configured: %s", rec.type, exc, extra=extra)
        return "ignored"
    log.warning("inbound %s refused, answered with the short answer: %s", rec.type, exc, extra=extra)
    recipient = rec.conversation_id if isinstance(rec, InboundEvent) else rec.sender
    r = client.intake.accept(client.inputs.notice(rec.conversation_id, reply, message_id=rec.wamid, reply_to=rec.wamid,
                                                  recipient=recipient))
    return "duplicate" if r.duplicate else "refused"


def _too_old(rec: Record, now: float, max_age: float) -> bool:
    age = record_age(rec, now) if max_age > 0 else None
    if age is None or age <= max_age:
        return False
    log.warning("webhook %s older than PARLEY_WEBHOOK_MAX_AGE_SECONDS (%.0f s > %.0f s) not applied",
                "status" if isinstance(rec, StatusUpdate) else "message", age, max_age,
                extra={"message_id": getattr(rec, "wamid", None)})
    return True


def _linked(store: IngressStore, rec: _Linkable) -> _Linkable:
    """``rec`` in the conversation its ids lead to (:mod:`worker.store.identities`): a player keyed by phone whose
    webhook names only the BSUID, or a number the player moved to, stays in one conversation."""
    if rec.phone is None and rec.user_id is None:
        return rec
    cid = store.link_identity(rec.phone, rec.user_id)
    return rec if cid == rec.conversation_id else cast(_Linkable, rec.model_copy(update={"conversation_id": cid}))


def _changed(store: IngressStore, rec: IdentityChange | MarketingPreference) -> str:
    """A player's number or user id moved (the link follows), or their marketing preference changed."""
    if isinstance(rec, IdentityChange):
        cid = store.move_identity(rec.field, rec.old, rec.new)
        log.info("a player's %s changed; the conversation follows", rec.field, extra={"conversation_id": cid})
        return "identity"
    cid = store.link_identity(rec.phone, rec.user_id)
    if store.set_opt_out(cid, "marketing", rec.stop):
        metrics.OPT_OUTS.labels("marketing_stop" if rec.stop else "marketing_resume").inc()
    return "preference"


def _record(client: ConversationClient, store: IngressStore, rec: Record, replies: _Replies, now: float,
            max_age: float) -> str:
    if isinstance(rec, InboundMessage | InboundEvent | InboundNotice):
        return "too_old" if _too_old(rec, now, max_age) else _input(client, _linked(store, rec), replies)
    if isinstance(rec, IdentityChange | MarketingPreference):
        return _changed(store, rec)
    if isinstance(rec, StatusUpdate):
        if _too_old(rec, now, max_age):
            return "status_too_old"
        if rec.reply_id is None:
            rec = _linked(store, rec)
        # Forward only (a late `delivered` never hides a `read`); a status naming a reply part still in flight
        # is also kept with the part, so a deliverer recovering from a crash does not send it twice.
        with tracing.span(f"status {rec.status}", parent=rec.traceparent, attributes={
                "gen_ai.conversation.id": rec.conversation_id, "parley.reply.id": rec.reply_id or "",
                "parley.reply.part": rec.part}):
            cid, detail = rec.conversation_id, rec.detail()
            store.record_status(cid, rec.wamid, rec.status, detail, reply_id=rec.reply_id, part=rec.part,
                                record=entries.status(cid, provider_id=rec.wamid, status=rec.status, detail=detail,
                                                      reply_id=rec.reply_id, part=rec.part))
        return "status"
    _report(rec)
    return UNKNOWN_NUMBER if rec.kind == UNKNOWN_NUMBER else "ignored"


def _apply(client: ConversationClient, store: IngressStore, records: list[Record], *, replies: _Replies,
           max_age: float = 0.0, now: float | None = None) -> tuple[dict[str, int], list[str]]:
    """Queue the inputs and record the statuses of one batch (blocking; runs in the thread pool).

    Returns the summary and the wamids a full mailbox refused: the whole batch is walked all the same (other
    players are not held up), and the caller answers 503 so Meta sends the batch again (what was queued now
    deduplicates then)."""
    summary = {"accepted": 0, "events": 0, "notices": 0, "duplicates": 0, "statuses": 0, "ignored": 0}
    full: list[str] = []
    at = time.time() if now is None else now
    for rec in records:
        try:
            outcome = _record(client, store, rec, replies, at, max_age)
        except InboxFullError as exc:
            wamid = getattr(rec, "wamid", None) or ""
            log.warning("inbound %s refused, mailbox full: %s", getattr(rec, "type", "input"), exc,
                        extra={"message_id": wamid, "message_type": getattr(rec, "type", None)})
            full.append(wamid)
            outcome = "mailbox_full"
        ingress_metrics.WEBHOOK_RECORDS.labels(outcome).inc()
        if outcome in _SUMMARY:
            summary[_SUMMARY[outcome]] += 1
    return summary, full


def _default(setting: str, given: Any) -> Any:
    from worker.settings import Webhook

    return getattr(Webhook(), setting) if given is None else given


def _report(rec: Unsupported) -> None:
    # A record for a number not served is logged with its change, once per number (_SkipLog): Meta sends every
    # number of the account, so a warning per record would flood the log.
    level = logging.WARNING if rec.reason.startswith(("invalid conversation id", "no sender")) else logging.DEBUG
    log.log(level, "webhook record ignored: %s: %s", rec.kind, rec.reason, extra={"message_id": rec.wamid})


class _SkipLog:
    """Counts the changes skipped for their number, and logs the first of each number (per process): a number of the
    account the deployment does not serve sends all day, and one line says what to change."""

    #: Numbers remembered as logged; past it a number is logged again (bounded, whatever a signed body names).
    MAX_NUMBERS = 1000

    def __init__(self) -> None:
        self._logged: set[str | None] = set()
        self._lock = threading.Lock()

    def skipped(self, changes: list[SkippedChange]) -> None:
        for change in changes:
            metrics.WEBHOOK_CHANGES_SKIPPED.labels(change.reason).inc()
            with self._lock:
                first = change.phone_number_id not in self._logged
                if first:
                    if len(self._logged) >= self.MAX_NUMBERS:
                        self._logged.clear()
                    self._logged.add(change.phone_number_id)
            if first:
                log.warning("webhook changes for business number %s skipped (answered 200, not applied): the "
                            "deployment serves only WHATSAPP_PHONE_NUMBER_ID and %s; logged once per number, "
                            "counted in parley_webhook_changes_skipped_total", change.phone_number_id or "(none named)",
                            SETTING, extra={"phone_number_id": change.phone_number_id, "reason": change.reason})


@dataclass(frozen=True)
class _Ingress:
    """What one POST needs, bound at start-up."""

    client: ConversationClient
    store: IngressStore
    app_secret: str
    location_as: LocationAs
    replies: _Replies
    max_age: float
    skips: _SkipLog = field(default_factory=_SkipLog)

    def handle(self, raw: bytes | bytearray, signature: str | None) -> Response:
        """Verify, parse and apply one webhook body (blocking: runs in a worker thread, never on the event loop,
        so a large body does not stall the other requests)."""
        with tracing.span("POST /webhook", kind="server") as span:
            response = self._handle(raw, signature)
            span.set("http.response.status_code", response.status_code)
        return response

    def _handle(self, raw: bytes | bytearray, signature: str | None) -> Response:
        valid = verify_signature(raw, signature, self.app_secret)
        ingress_metrics.signature_checked(valid)
        if not valid:
            log.warning("webhook with a missing or wrong X-Hub-Signature-256 refused")
            return _answer("bad_signature", {"error": "missing or invalid X-Hub-Signature-256"}, 401)
        try:
            records = self.records(raw)
        except WebhookTooLargeError as exc:
            return _answer("too_large", {"error": f"webhook body too large: {exc}"}, 413)
        except ValueError as exc:
            return _answer("invalid", {"error": f"malformed webhook body: {exc}"}, 400)
        try:
            summary, full = _apply(self.client, self.store, records, replies=self.replies, max_age=self.max_age)
        except StoreError as exc:
            # Redis down, failing over or refusing writes. Meta retries for about a day and a half; whatever
            # this batch already queued is deduplicated on the retry.
            log.error("webhook batch not stored, answering 503: %s", exc)
            return _answer("unavailable", {"error": "storage unavailable, retry later"}, 503)
        if full:
            # Answering 200 would lose those messages for good; Meta retries a 5xx for about a day and a half,
            # by which time the workers have drained the mailbox. The rest of the batch is queued already.
            log.error("webhook batch partly refused (%d input(s) found a full mailbox), answering 503", len(full),
                      extra={"message_ids": full})
            return _answer("mailbox_full", {"error": "a conversation's mailbox is full, retry later", **summary}, 503)
        return _answer("ok", summary, 200)


    def records(self, raw: bytes | bytearray) -> list[Record]:
        """The records of a signed body. Raises :class:`WebhookTooLargeError` past Meta's batch sizes, and
        ``ValueError`` when it is not JSON or not a webhook."""
        try:
            body: Any = decode_webhook(raw)
        except WebhookTooLargeError:
            raise
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise ValueError(f"not JSON ({exc})") from None
        check_update_count(body)
        if self.replies.numbers is not None:
            self.skips.skipped(skipped_changes(body, self.replies.numbers))
        return parse_webhook(body, location_as=self.location_as, numbers=self.replies.numbers)


def _answer(outcome: str, body: dict[str, Any], status: int) -> Response:
    ingress_metrics.WEBHOOKS.labels(outcome).inc()
    return JSONResponse(body, status_code=status)


#: Bodies above this are handled two at a time at most, so a burst of them cannot hold many decoded copies.
LARGE_BODY_BYTES = 256 * 1024


def create_app(client: ConversationClient, store: IngressStore, *, app_secret: str, verify_token: str,
               max_body_bytes: int | None = None, location_as: LocationAs | None = None,
               unsupported_reply: str | None = None, refused_reply: str | None = None,
               max_age_seconds: float | None = None, api_tokens: str = "", api_tokens_file: str | None = None,
               numbers: Numbers | None = None, fast_inputs: bool = True) -> Starlette:
    """An ingress bound to a producer client and a store (tests pass fakeredis-backed ones). ``location_as``,
    ``unsupported_reply``, ``refused_reply``, ``max_age_seconds`` and ``max_body_bytes`` are ``PARLEY_LOCATION_AS``,
    ``PARLEY_UNSUPPORTED_REPLY``, ``PARLEY_REFUSED_REPLY``, ``PARLEY_WEBHOOK_MAX_AGE_SECONDS`` and
    ``PARLEY_WEBHOOK_MAX_BODY_BYTES`` (default: the settings' defaults; a max age of 0 turns the age check off).
    ``api_tokens`` (``PARLEY_API_TOKENS``) and ``api_tokens_file`` (``PARLEY_API_TOKENS_FILE``, read again when it
    changes; a bad one raises :class:`ConfigurationError`) turn the producers' API under ``/v1/`` on
    (:mod:`worker.ingress.api`).
    ``numbers`` (``PARLEY_WHATSAPP_NUMBERS_FILE``) routes each change to its business number's conversations.
    ``fast_inputs``: the API's messages and events answered ahead of the router (:mod:`worker.ingress.fast_inputs`;
    off only to compare the answers and the cost with the routes')."""
    body_limit = int(_default("max_body_bytes", max_body_bytes))
    replies = _Replies(_default("unsupported_reply", unsupported_reply), _default("refused_reply", refused_reply),
                       numbers)
    ingress = _Ingress(client, store, app_secret, _default("location_as", location_as), replies,
                       float(_default("max_age_seconds", max_age_seconds)))
    large_bodies = anyio.CapacityLimiter(2)
    if not app_secret:
        log.error("no WhatsApp app secret configured: every webhook POST will be refused (401)")
    if numbers is None:
        log.warning("no WhatsApp business number configured (WHATSAPP_PHONE_NUMBER_ID, %s): webhooks for every "
                    "number are accepted and answered", SETTING)

    async def handshake(request: Request) -> Response:
        q = request.query_params
        challenge = verify_handshake(q.get("hub.mode"), q.get("hub.verify_token"), q.get("hub.challenge"),
                                     verify_token)
        if challenge is None:
            log.warning("webhook verification handshake refused")
            return PlainTextResponse("verification failed", status_code=403)
        return PlainTextResponse(challenge)

    async def receive(request: Request) -> Response:
        try:
            raw = await read_body(request, body_limit)
        except TooLarge:
            return _answer("too_large", {"error": f"body larger than {body_limit} bytes"}, 413)
        except ClientDisconnect:
            return Response(status_code=400)
        handle = partial(ingress.handle, raw, request.headers.get("x-hub-signature-256"))
        if len(raw) > LARGE_BODY_BYTES:
            return await anyio.to_thread.run_sync(handle, limiter=large_bodies)
        return await run_in_threadpool(handle)

    async def healthz(request: Request) -> Response:
        signatures = await run_in_threadpool(_signature_health)
        try:
            ok = await run_in_threadpool(store.ping)
        except Exception as exc:  # the detail (host, port) goes to the log, not to an unauthenticated caller
            log.warning("health check failed: %s", exc)
            return JSONResponse({"ok": False, "error": type(exc).__name__, **signatures}, status_code=503)
        return JSONResponse({"ok": bool(ok), **signatures}, status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        return Response(await run_in_threadpool(ingress_metrics.exposition), media_type=CONTENT_TYPE_LATEST)

    api = endpoints(client, TokenSource(fixed_grants(api_tokens), api_tokens_file), body_limit, numbers)
    return Starlette(routes=[
        Route("/webhook", handshake, methods=["GET"]),
        Route("/webhook", receive, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *(api.routes if api is not None else []),
    ], middleware=[Middleware(FastInputs, endpoints=api)] if api is not None and fast_inputs else None)


def _signature_health() -> dict[str, Any]:
    """What ``/healthz`` says of signatures, never its status code: anyone can POST a bad signature, and a probe
    failing on that would let them take the ingress out of service (and a restart cannot fix a wrong secret).
    ``failing``: the newest signature check (over every worker) was refused, as when the app secret is wrong."""
    valid, bad = ingress_metrics.signature_times()
    state = "unknown" if not valid and not bad else ("failing" if bad > valid else "ok")
    return {"webhook_signatures": state, "last_valid_signature_at": valid or None, "last_bad_signature_at": bad or None}


def _from_env() -> Starlette:
    from worker.observability.logs import configure_logging
    from worker.runtime.numbers_file import served_numbers
    from worker.settings import get_settings

    s = get_settings()
    configure_logging(s)
    secret = s.whatsapp.app_secret.get_secret_value() if s.whatsapp.app_secret else ""
    token = s.whatsapp.verify_token.get_secret_value() if s.whatsapp.verify_token else ""
    # from_env() builds its store with worker.queue.connections.build_store(settings); statuses and health checks share
    # it (one Redis connection pool, not two).
    client = ConversationClient.from_env()
    # Workers left with PARLEY_STATUS_WEBHOOKS=auto wait for a status before resending a crashed send.
    client.store.announce_status_ingress()
    return create_app(client, client.store, app_secret=secret, verify_token=token, location_as=s.webhook.location_as,
                      unsupported_reply=s.webhook.unsupported_reply, refused_reply=s.webhook.refused_reply,
                      max_age_seconds=s.webhook.max_age_seconds, max_body_bytes=s.webhook.max_body_bytes,
                      api_tokens=s.producers.api_tokens.get_secret_value() if s.producers.api_tokens else "",
                      api_tokens_file=s.producers.api_tokens_file,
                      numbers=served_numbers(s.whatsapp))


class _LazyApp:
    """Builds the app from the environment on first use (uvicorn's lifespan startup), so importing this
    module has no side effects and needs no configuration."""

    def __init__(self) -> None:
        self._app: Starlette | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            self._app = _from_env()
        await self._app(scope, receive, send)


app = _LazyApp()
