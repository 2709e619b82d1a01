"""The OpenAPI 3.1 document of the producers' API, generated from the operations and the pydantic bodies (never
written by hand, so it cannot drift from what the API accepts; a test and the Schemathesis fuzz hold it to that)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from worker.envelopes.addresses import ID_PATTERN, MAX_ID_LENGTH
from worker.envelopes.inputs import MAX_ID_CHARS
from worker.envelopes.producer_bodies import (
    HANDOFF,
    KINDS,
    PAUSE_KINDS,
    Accepted,
    Cancelled,
    Operation,
    PauseState,
    Problem,
    Summary,
)
from worker.envelopes.reply_parts import TextPart

_REF = "#/components/schemas/{model}"
_BODIES: tuple[type[BaseModel], ...] = (*KINDS.values(), *HANDOFF.values(), TextPart)
_BODY_NAMES = {body.__name__ for body in _BODIES}
_RETRY = {"Retry-After": {"description": "Seconds to wait before sending the same request again.",
                          "schema": {"type": "integer", "minimum": 0}}}
_OUT_OF_REACH = ("The token is limited (PARLEY_API_TOKENS_FILE: `conversation_prefixes`, `numbers`) and this "
                 "conversation is outside it: answered exactly as a conversation that does not exist.")
_ERRORS: dict[str, tuple[str, dict[str, Any]]] = {
    "401": ("No bearer token, or not one of PARLEY_API_TOKENS and PARLEY_API_TOKENS_FILE (a token removed from the "
            "file is refused within a second).",
            {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}}),
    "403": ("The token's scope does not allow this operation.", {}),
    "404": (_OUT_OF_REACH, {}),
    "422": ("A field is wrong (`field` names it; `conversation_id` for the path; `recipient` when it is outside the "
            "conversations the token is limited to).", {}),
    "429": ("The conversation's mailbox is full, or the token's `per_second` (counted over every ingress process) is "
            "spent: send the same request (same message_id) again after Retry-After seconds.", _RETRY),
    "503": ("Redis is unavailable: send the same request (same message_id) again later.", _RETRY),
}
_BODY_ERRORS: dict[str, tuple[str, dict[str, Any]]] = {
    "400": ("The body is not JSON.", {}),
    "413": ("The body is larger than PARLEY_WEBHOOK_MAX_BODY_BYTES, or holds more JSON objects than any valid "
            "body (16).", {}),
}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _json(model: type[BaseModel]) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(model)}}


def _responses(op: Operation) -> dict[str, Any]:
    if op.kind in PAUSE_KINDS:
        ok = {"200": {"description": "The conversation's pause now.", "content": _json(PauseState)}}
    elif op.kind is not None:
        ok = {"202": {"description": "Accepted (or a duplicate of an input accepted before).",
                      "content": _json(Accepted)}}
    elif op.operation_id == "cancel_scheduled":
        ok = {"200": {"description": "Cancelled: it will never be applied.", "content": _json(Cancelled)},
              "404": {"description": "No input with this message id is held (never scheduled, cancelled before, or "
                                     "already due and accepted), or the conversation is outside the token's reach.",
                      "content": _json(Problem)}}
    elif op.method == "DELETE":
        ok = {"204": {"description": "Deleted."}}
    else:
        ok = {"200": {"description": "The conversation's summary.", "content": _json(Summary)},
              "404": {"description": "Parley knows nothing of this conversation, or it is outside the token's "
                                     "reach (the same answer).", "content": _json(Problem)}}
    errors = {**_ERRORS, **(_BODY_ERRORS if op.kind is not None else {})}
    for status, (text, headers) in sorted(errors.items()):
        if status in ok:  # the operation's own 404 says it already
            continue
        ok[status] = {"description": text, "content": _json(Problem), **({"headers": headers} if headers else {})}
    return ok


def _operation(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": op.operation_id, "summary": op.summary,
        "description": f"Scope: {op.scope}" + (" (or operator)." if op.scope == "producer" else "."),
        "parameters": [{"name": "conversation_id", "in": "path", "required": True,
                        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH,
                                   "pattern": f"^{ID_PATTERN.pattern}$"}}],
        "responses": _responses(op),
    }
    if "{message_id}" in op.path:
        out["parameters"].append({"name": "message_id", "in": "path", "required": True,
                                  "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS}})
    if op.body is not None:
        # Required when a field is (a reset, a pause or a resume may come without a body).
        required = any(f.is_required() for f in op.body.model_fields.values())
        out["requestBody"] = {"required": required, "content": _json(op.body)}
    return out


def document(operations: tuple[Operation, ...], *, max_text_chars: int | None = None) -> dict[str, Any]:
    """The OpenAPI document of ``operations``; ``max_text_chars`` (the client's ``PARLEY_MAX_INPUT_CHARS``) is the
    bodies' ``text`` ``maxLength``."""
    models: list[type[BaseModel]] = [Accepted, Cancelled, Problem, Summary, PauseState,
                                      *(op.body for op in operations if op.body)]
    _, defs = models_json_schema([(m, "validation") for m in dict.fromkeys(models)], ref_template=_REF)
    for schema in defs.get("$defs", {}).values():
        text = schema.get("properties", {}).get("text")
        if text is not None and max_text_chars is not None and schema["title"] in _BODY_NAMES:
            text["maxLength"] = max_text_chars
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Parley producers' API", "version": "1",
                 "description": "Queue chat turns, game events and resets for Parley's workers from any language. "
                                "See docs/producers.md."},
        "paths": paths,
        "components": {"schemas": defs.get("$defs", {}),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
