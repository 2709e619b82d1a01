"""HTTP tools: each manifest entry becomes a :class:`Tool` whose handler POSTs to the game engine.

The body is ``{"conversation_id", "input_id", "call_id", "arguments"}``; the ``Idempotency-Key`` header is derived
from those three ids, so a retried turn that calls the same tool again for the same input sends the same key and
the engine can apply it once. A 2xx JSON answer is the result; anything else raises :class:`ToolError`, which the
core turns into an error result the model reads (never a crashed turn).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx

from worker.conversation.tools import Tool, current_call
from worker.errors import ToolError
from worker.http.pool import ClientPool, single_connection, tls_context
from worker.metrics import TOOL_CALLS
from worker.tools.manifest import HttpToolSpec, expand_headers

# How much of a failed answer's body the model sees: enough for the engine's error message, not a whole page.
_ERROR_BODY_CHARS = 500


def idempotency_key(conversation_id: str, input_id: str, call_id: str) -> str:
    """The same on every retry of the same call of the same input (sha256 hex of the three ids)."""
    raw = json.dumps([conversation_id, input_id, call_id], separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


def _pool() -> ClientPool:
    # No read timeout here: each request passes its tool's own.
    return ClientPool(lambda: httpx.Client(limits=single_connection(), verify=tls_context()))


_POOL = _pool()


class HttpTool:
    """The handler of one manifest tool (a callable object so tests and the bench can reach its spec)."""

    def __init__(self, spec: HttpToolSpec, *, headers: dict[str, str], timeout: float,
                 pool: ClientPool | None = None) -> None:
        self.spec = spec
        self.headers = headers
        self.timeout = timeout
        self.pool = pool or _POOL

    def __call__(self, **arguments: Any) -> Any:
        call = current_call()
        body = {"conversation_id": call.conversation_id, "input_id": call.input_id, "call_id": call.call_id,
                "arguments": arguments}
        headers = {**self.headers, "Idempotency-Key": idempotency_key(call.conversation_id, call.input_id,
                                                                      call.call_id)}
        try:
            with self.pool.lease() as client:
                response = client.post(self.spec.url, json=body, headers=headers, timeout=self.timeout)
                status, text, ctype = response.status_code, response.text, response.headers.get("content-type", "")
        except httpx.TimeoutException as exc:
            TOOL_CALLS.labels("http", "timeout").inc()
            raise ToolError(f"the game engine did not answer within {self.timeout:g} s") from exc
        except httpx.HTTPError as exc:
            TOOL_CALLS.labels("http", "unreachable").inc()
            raise ToolError(f"the game engine is unreachable ({type(exc).__name__})") from exc
        if not 200 <= status < 300:
            TOOL_CALLS.labels("http", "http_error").inc()
            raise ToolError(f"the game engine answered HTTP {status}: {text[:_ERROR_BODY_CHARS]}")
        try:
            result = json.loads(text)
        except ValueError as exc:
            TOOL_CALLS.labels("http", "not_json").inc()
            raise ToolError(f"the game engine's answer is not JSON ({ctype or 'no content type'}): "
                            f"{text[:_ERROR_BODY_CHARS]}") from exc
        TOOL_CALLS.labels("http", "ok").inc()
        return result


def http_tools(specs: list[HttpToolSpec], *, where: str, default_timeout: float,
               pool: ClientPool | None = None) -> list[Tool]:
    """One :class:`Tool` per manifest entry; headers are expanded now, so a missing variable fails the start."""
    tools = []
    for i, spec in enumerate(specs):
        timeout = spec.timeout or default_timeout
        headers = expand_headers(spec.headers, f"{where}: tools.{i}.headers")
        handler = HttpTool(spec, headers=headers, timeout=timeout, pool=pool)
        # The core's own timeout a little above the HTTP one: the HTTP timeout's clearer message wins.
        tools.append(Tool(name=spec.name, description=spec.description, parameters=spec.parameters,
                          handler=handler, timeout=timeout + 1.0, idempotent=spec.idempotent))
    return tools
