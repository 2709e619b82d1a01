"""The WhatsApp webhook ingress: a small Starlette app.

    uvicorn worker.ingress.app:app --host 0.0.0.0 --port 8080

``GET /webhook`` answers Meta's verification handshake (200 + the raw ``hub.challenge``, else 403).
``POST /webhook`` checks ``X-Hub-Signature-256`` over the raw body (missing or wrong: 401, nothing queued),
parses the batch, queues every text turn through :class:`~worker.client.ConversationClient` (deduplicated on the
wamid, so Meta's retries are harmless) and records delivery statuses, then answers 200 with a summary
``{"accepted", "duplicates", "statuses", "ignored"}``. A body that is not JSON or not a webhook: 400. Redis
unavailable: 503, so Meta retries the whole batch (what was already queued deduplicates). ``GET /healthz``:
200 when Redis answers, 503 otherwise.

Redis calls are blocking, so they run in Starlette's thread pool and never stall the event loop.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from worker.client import ConversationClient
from worker.errors import InputError, StoreError
from worker.ingress.parse import (
    InboundMessage,
    Record,
    StatusUpdate,
    Unsupported,
    parse_webhook,
    verify_handshake,
    verify_signature,
)

log = logging.getLogger("parley.ingress")

#: Meta batches at most 1000 updates per POST; a body far above that is not Meta.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


class IngressStore(Protocol):
    """What the ingress needs of the store (``ConversationStore`` has it)."""

    def record_status(self, cid: str, provider_id: str, status: str, detail: str = "") -> None: ...

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


def _apply(client: ConversationClient, store: IngressStore, records: list[Record]) -> dict[str, int]:
    """Queue the turns and record the statuses of one batch (blocking; runs in the thread pool)."""
    summary = {"accepted": 0, "duplicates": 0, "statuses": 0, "ignored": 0}
    for rec in records:
        if isinstance(rec, InboundMessage):
            try:
                r = client.send_message(rec.conversation_id, rec.text, message_id=rec.wamid,
                                        reply_to=rec.wamid, recipient=rec.sender)
            except InputError as exc:  # oversize text, full mailbox, ...: retrying the batch would not help
                log.warning("inbound message refused: %s", exc,
                            extra={"message_id": rec.wamid, "error": type(exc).__name__})
                summary["ignored"] += 1
                continue
            summary["duplicates" if r.duplicate else "accepted"] += 1
        elif isinstance(rec, StatusUpdate):
            store.record_status(rec.conversation_id, rec.wamid, rec.status, rec.detail())
            summary["statuses"] += 1
        else:
            _report(rec)
            summary["ignored"] += 1
    return summary


def _report(rec: Unsupported) -> None:
    level = logging.WARNING if rec.reason.startswith(("invalid conversation id", "no sender")) else logging.DEBUG
    log.log(level, "webhook record ignored: %s: %s", rec.kind, rec.reason, extra={"message_id": rec.wamid})


def create_app(client: ConversationClient, store: IngressStore, *, app_secret: str, verify_token: str,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> Starlette:
    """An ingress bound to a producer client and a store (tests pass fakeredis-backed ones)."""
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
            records = parse_webhook(body)
        except ValueError as exc:
            return JSONResponse({"error": f"malformed webhook body: {exc}"}, status_code=400)
        try:
            summary = await run_in_threadpool(_apply, client, store, records)
        except StoreError as exc:
            # Redis down, failing over or refusing writes. Meta retries for about a day and a half; whatever
            # this batch already queued is deduplicated on the retry.
            log.error("webhook batch not stored, answering 503: %s", exc)
            return JSONResponse({"error": "storage unavailable, retry later"}, status_code=503)
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
    return create_app(client, client.store, app_secret=secret, verify_token=token)


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
