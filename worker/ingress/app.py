"""The WhatsApp webhook ingress: a small Starlette app.

    uvicorn worker.ingress.app:app --host 0.0.0.0 --port 8080

GET /webhook answers Meta's verification handshake; POST /webhook checks ``X-Hub-Signature-256`` over the raw
body, enqueues text turns through :class:`~worker.client.ConversationClient` (deduplicated on the wamid, so
Meta's retries are harmless) and records delivery statuses, then answers 200 at once. GET /healthz is a probe.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from worker.errors import InputError, StoreUnavailableError
from worker.ingress.parse import InboundMessage, StatusUpdate, parse_webhook, verify_handshake, verify_signature

log = logging.getLogger("parley.ingress")


def create_app(client: Any, store: Any, *, app_secret: str, verify_token: str) -> Starlette:
    """An ingress bound to a producer client and a store (tests pass in-memory ones)."""

    async def handshake(request: Request) -> Response:
        q = request.query_params
        challenge = verify_handshake(q.get("hub.mode"), q.get("hub.verify_token"), q.get("hub.challenge"),
                                     verify_token)
        if challenge is None:
            return PlainTextResponse("verification failed", status_code=403)
        return PlainTextResponse(challenge)

    async def receive(request: Request) -> Response:
        raw = await request.body()
        if not verify_signature(raw, request.headers.get("x-hub-signature-256"), app_secret):
            log.warning("webhook with a missing or wrong signature refused")
            return JSONResponse({"error": "invalid signature"}, status_code=401)
        try:
            records = parse_webhook(json.loads(raw))
        except ValueError as exc:
            return JSONResponse({"error": f"malformed webhook body: {exc}"}, status_code=400)
        summary = {"accepted": 0, "duplicates": 0, "statuses": 0, "ignored": 0}
        try:
            for rec in records:
                if isinstance(rec, InboundMessage):
                    try:
                        r = client.send_message(rec.conversation_id, rec.text, message_id=rec.wamid,
                                                reply_to=rec.wamid, recipient=rec.conversation_id)
                    except InputError as exc:
                        log.warning("inbound message refused", extra={"message_id": rec.wamid, "error": str(exc)})
                        summary["ignored"] += 1
                        continue
                    summary["duplicates" if r.duplicate else "accepted"] += 1
                elif isinstance(rec, StatusUpdate):
                    detail = "; ".join(f"{c}: {t}" for c, t in rec.errors)
                    store.record_status(rec.conversation_id, rec.wamid, rec.status, detail)
                    summary["statuses"] += 1
                else:
                    summary["ignored"] += 1
        except StoreUnavailableError:
            # Meta retries for about a day and a half; nothing was lost.
            return JSONResponse({"error": "storage unavailable, retry later"}, status_code=503)
        return JSONResponse(summary)

    async def healthz(request: Request) -> Response:
        try:
            store.ping()
        except Exception as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, status_code=503)
        return JSONResponse({"ok": True})

    return Starlette(routes=[
        Route("/webhook", handshake, methods=["GET"]),
        Route("/webhook", receive, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ])


def _from_env() -> Starlette:
    from worker.client import ConversationClient
    from worker.logs import configure_logging
    from worker.runtime import build_store
    from worker.settings import get_settings

    s = get_settings()
    configure_logging(s)
    secret = s.whatsapp_app_secret.get_secret_value() if s.whatsapp_app_secret else ""
    token = s.whatsapp_verify_token.get_secret_value() if s.whatsapp_verify_token else ""
    if not secret:
        log.error("WHATSAPP_APP_SECRET is not set: every POST will be refused")
    return create_app(ConversationClient.from_env(), build_store(s), app_secret=secret, verify_token=token)


class _LazyApp:
    """Builds the app from the environment on first use, so importing this module has no side effects."""

    def __init__(self) -> None:
        self._app: Starlette | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            self._app = _from_env()
        await self._app(scope, receive, send)


app = _LazyApp()
