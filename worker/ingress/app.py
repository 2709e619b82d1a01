"""The WhatsApp webhook ingress: a small Starlette app.

    uvicorn worker.ingress.app:app --host 0.0.0.0 --port 8080

``GET /webhook`` answers Meta's verification handshake (200 + the raw ``hub.challenge``, else 403).
``POST /webhook`` checks ``X-Hub-Signature-256`` over the raw body (missing or wrong: 401, nothing queued),
parses the batch and gives every player message an outcome through :class:`~worker.client.ConversationClient`
(deduplicated on the wamid, so Meta's retries are harmless): chat turns (text, buttons, interactive replies,
images), game events (locations, reactions), the configured short answer for what Parley cannot read (voice
notes, video, documents, stickers, contacts, unsupported and unknown types); it records delivery statuses (each
message's status only moves forward, and a status naming a reply part still in flight is kept with it), then
answers 200 with a summary ``{"accepted", "events", "notices", "duplicates", "statuses", "ignored"}``
(``accepted`` counts chat turns). A body that is not JSON or not a webhook: 400. Redis unavailable, or a
conversation's mailbox full: 503, so Meta retries the whole batch (what was already queued deduplicates; the
rest of the batch is still applied first). ``GET /healthz``: 200 when Redis answers, 503 otherwise.

Redis calls are blocking, so they run in Starlette's thread pool and never stall the event loop.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from worker.client import ConversationClient, Submitted
from worker.errors import InboxFullError, InputError, StoreError
from worker.ingress.parse import (
    InboundEvent,
    InboundMessage,
    InboundNotice,
    LocationAs,
    Record,
    StatusUpdate,
    Unsupported,
    parse_webhook,
    verify_handshake,
    verify_signature,
)
from worker.store.base import StatusRecorded

log = logging.getLogger("parley.ingress")

#: Meta batches at most 1000 updates per POST; a body far above that is not Meta.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


class IngressStore(Protocol):
    """What the ingress needs of the store (``ConversationStore`` has it)."""

    def record_status(self, cid: str, provider_id: str, status: str, detail: str = "", *,
                      reply_id: str | None = None, part: int = 0) -> StatusRecorded: ...

    def ping(self) -> bool: ...


class _TooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _submit(client: ConversationClient, rec: InboundMessage | InboundEvent | InboundNotice,
            unsupported_reply: str) -> Submitted:
    if isinstance(rec, InboundMessage):
        return client.send_message(rec.conversation_id, rec.text, message_id=rec.wamid, reply_to=rec.wamid,
                                   recipient=rec.sender, media=rec.media)
    if isinstance(rec, InboundEvent):
        # Not pinned: where the player stood or what they thought of one reply matters now, not forever.
        return client.send_event(rec.conversation_id, rec.text, message_id=rec.wamid, from_player=True)
    return client.send_notice(rec.conversation_id, unsupported_reply, message_id=rec.wamid, reply_to=rec.wamid,
                              recipient=rec.sender)


_COUNTER = {InboundMessage: "accepted", InboundEvent: "events", InboundNotice: "notices"}


def _apply(client: ConversationClient, store: IngressStore, records: list[Record], *,
           unsupported_reply: str) -> tuple[dict[str, int], list[str]]:
    """Queue the inputs and record the statuses of one batch (blocking; runs in the thread pool).

    Returns the summary and the wamids a full mailbox refused: the whole batch is walked all the same (other
    players are not held up), and the caller answers 503 so Meta sends the batch again (what was queued now
    deduplicates then)."""
    summary = {"accepted": 0, "events": 0, "notices": 0, "duplicates": 0, "statuses": 0, "ignored": 0}
    full: list[str] = []
    for rec in records:
        if isinstance(rec, InboundNotice) and not unsupported_reply.strip():
            # PARLEY_UNSUPPORTED_REPLY set empty: the deployment chose silence for what Parley cannot read.
            _report(Unsupported(kind=rec.type, wamid=rec.wamid, reason=f"{rec.reason}; no short answer configured"))
            summary["ignored"] += 1
        elif isinstance(rec, InboundMessage | InboundEvent | InboundNotice):
            try:
                r = _submit(client, rec, unsupported_reply)
            except InboxFullError as exc:  # an InputError too, but retrying later does help: never drop it
                log.warning("inbound %s refused, mailbox full: %s", rec.type, exc,
                            extra={"message_id": rec.wamid, "message_type": rec.type})
                full.append(rec.wamid)
                continue
            except InputError as exc:  # oversize text, a lone surrogate, ...: retrying the batch would not help
                log.warning("inbound %s refused: %s", rec.type, exc,
                            extra={"message_id": rec.wamid, "message_type": rec.type, "error": type(exc).__name__})
                summary["ignored"] += 1
                continue
            outcome = "duplicates" if r.duplicate else _COUNTER[type(rec)]
            summary[outcome] += 1
            if isinstance(rec, InboundNotice) and not r.duplicate:
                log.info("inbound %s answered with the short answer: %s", rec.type, rec.reason,
                         extra={"message_id": rec.wamid, "message_type": rec.type})
        elif isinstance(rec, StatusUpdate):
            # Forward only (a late `delivered` never hides a `read`); a status naming a reply part still in flight
            # is also kept with the part, so a deliverer recovering from a crash does not send it twice.
            store.record_status(rec.conversation_id, rec.wamid, rec.status, rec.detail(), reply_id=rec.reply_id,
                                part=rec.part)
            summary["statuses"] += 1
        else:
            _report(rec)
            summary["ignored"] += 1
    return summary, full


def _default_unsupported_reply() -> str:
    from worker.settings import Settings

    return str(Settings.model_fields["unsupported_reply"].default)


def _report(rec: Unsupported) -> None:
    level = logging.WARNING if rec.reason.startswith(("invalid conversation id", "no sender")) else logging.DEBUG
    log.log(level, "webhook record ignored: %s: %s", rec.kind, rec.reason, extra={"message_id": rec.wamid})


def create_app(client: ConversationClient, store: IngressStore, *, app_secret: str, verify_token: str,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, location_as: LocationAs = "event",
               unsupported_reply: str | None = None) -> Starlette:
    """An ingress bound to a producer client and a store (tests pass fakeredis-backed ones). ``location_as`` and
    ``unsupported_reply`` are ``PARLEY_LOCATION_AS`` and ``PARLEY_UNSUPPORTED_REPLY`` (default: the settings'
    defaults)."""
    reply = unsupported_reply if unsupported_reply is not None else _default_unsupported_reply()
    if not app_secret:
        log.error("no WhatsApp app secret configured: every webhook POST will be refused (401)")

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
            raw = await _read_body(request, max_body_bytes)
        except _TooLarge:
            return JSONResponse({"error": f"body larger than {max_body_bytes} bytes"}, status_code=413)
        except ClientDisconnect:
            return Response(status_code=400)
        if not verify_signature(raw, request.headers.get("x-hub-signature-256"), app_secret):
            log.warning("webhook with a missing or wrong X-Hub-Signature-256 refused")
            return JSONResponse({"error": "missing or invalid X-Hub-Signature-256"}, status_code=401)
        try:
            body: Any = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return JSONResponse({"error": f"malformed webhook body: not JSON ({exc})"}, status_code=400)
        try:
            records = parse_webhook(body, location_as=location_as)
        except ValueError as exc:
            return JSONResponse({"error": f"malformed webhook body: {exc}"}, status_code=400)
        try:
            summary, full = await run_in_threadpool(partial(_apply, unsupported_reply=reply), client, store, records)
        except StoreError as exc:
            # Redis down, failing over or refusing writes. Meta retries for about a day and a half; whatever
            # this batch already queued is deduplicated on the retry.
            log.error("webhook batch not stored, answering 503: %s", exc)
            return JSONResponse({"error": "storage unavailable, retry later"}, status_code=503)
        if full:
            # Answering 200 would lose those messages for good; Meta retries a 5xx for about a day and a half,
            # by which time the workers have drained the mailbox. The rest of the batch is queued already.
            log.error("webhook batch partly refused (%d input(s) found a full mailbox), answering 503", len(full),
                      extra={"message_ids": full})
            return JSONResponse({"error": "a conversation's mailbox is full, retry later", **summary},
                                status_code=503)
        return JSONResponse(summary)

    async def healthz(request: Request) -> Response:
        try:
            ok = await run_in_threadpool(store.ping)
        except Exception as exc:  # the detail (host, port) goes to the log, not to an unauthenticated caller
            log.warning("health check failed: %s", exc)
            return JSONResponse({"ok": False, "error": type(exc).__name__}, status_code=503)
        return JSONResponse({"ok": bool(ok)}, status_code=200 if ok else 503)

    return Starlette(routes=[
        Route("/webhook", handshake, methods=["GET"]),
        Route("/webhook", receive, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ])


def _from_env() -> Starlette:
    from worker.logs import configure_logging
    from worker.settings import get_settings

    s = get_settings()
    configure_logging(s)
    secret = s.whatsapp_app_secret.get_secret_value() if s.whatsapp_app_secret else ""
    token = s.whatsapp_verify_token.get_secret_value() if s.whatsapp_verify_token else ""
    # from_env() builds its store with worker.runtime.build_store(settings); statuses and health checks share
    # it (one Redis connection pool, not two).
    client = ConversationClient.from_env()
    # Workers left with PARLEY_STATUS_WEBHOOKS=auto wait for a status before resending a crashed send.
    client.store.announce_status_ingress()
    return create_app(client, client.store, app_secret=secret, verify_token=token, location_as=s.location_as,
                      unsupported_reply=s.unsupported_reply)


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
