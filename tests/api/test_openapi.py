"""The OpenAPI document at GET /v1/openapi.json says what the API does: every /v1/ route and method is in it and
nothing else, each body is the schema of the model the API validates with, and an example that the document's
body schema refuses is refused by the API too (the fuzz in test_fuzz.py checks the answers)."""

from __future__ import annotations

from typing import Any

import fakeredis
import jsonschema
from starlette.routing import Route
from starlette.testclient import TestClient

from worker.client import ConversationClient
from worker.envelopes.producer_bodies import KINDS
from worker.ingress.api import OPERATIONS
from worker.ingress.app import create_app
from worker.store.redis_store import ConversationStore

HEADERS = {"Authorization": "Bearer t"}


def _app() -> Any:
    store = ConversationStore(fakeredis.FakeRedis(), prefix="doc")
    return create_app(ConversationClient(store, wake=lambda cid: None), store, app_secret="s", verify_token="v",
                      api_tokens="t")


def _doc() -> dict[str, Any]:
    r = TestClient(_app()).get("/v1/openapi.json")
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


def test_every_route_under_v1_is_documented_and_nothing_else() -> None:
    app, doc = _app(), _doc()
    served = {(r.path, m) for r in app.routes if isinstance(r, Route) and r.path.startswith("/v1/")
              and r.path != "/v1/openapi.json" for m in (r.methods or ()) if m != "HEAD"}
    documented = {(path, m.upper()) for path, ops in doc["paths"].items() for m in ops}
    assert served == documented
    assert {op["operationId"] for ops in doc["paths"].values() for op in ops.values()} == {
        op.operation_id for op in OPERATIONS}


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    name = schema["$ref"].rsplit("/", 1)[1]
    return {**doc["components"]["schemas"][name], "components": doc["components"]}


def test_each_body_is_the_schema_of_its_model() -> None:
    doc = _doc()
    for op in OPERATIONS:
        documented = doc["paths"][op.path][op.method.lower()].get("requestBody")
        if op.body is None:
            assert documented is None
            continue
        schema = _resolve(doc, documented["content"]["application/json"]["schema"])
        model = op.body.model_json_schema(ref_template="#/components/schemas/{model}")  # a nested part, by name
        if "text" in model["properties"]:  # the client's PARLEY_MAX_INPUT_CHARS, as the document says it
            model["properties"]["text"]["maxLength"] = ConversationClient(store=None, wake=print).max_text_chars  # type: ignore[arg-type]
        assert schema["properties"] == model["properties"]
        assert schema.get("required", []) == model.get("required", [])
        assert schema["additionalProperties"] is False  # the 422 for a field the engine cannot honour


def test_the_document_and_the_api_agree_on_examples() -> None:
    doc, http = _doc(), TestClient(_app())
    examples: list[tuple[str, dict[str, Any]]] = [
        ("message", {"text": "hi"}), ("message", {"text": "hi", "system": "s", "reply_to": "w", "recipient": "r"}),
        ("message", {"text": ""}), ("message", {"text": "hi", "at": "tomorrow"}), ("event", {"text": "e", "pinned": 1}),
        ("event", {"text": "e", "key": "score"}), ("event", {"text": "e", "key": "score", "respond": True}),
        ("event", {"text": "e", "key": " "}), ("event", {"text": "e", "key": "a\nb"}), ("event", {"text": "e", "respond": 1}),
        ("event", {"text": "x" * 16_000}), ("event", {"text": "x" * 16_001}), ("message", {"text": "m", "message_id": "a\nb"}), ("reset", {}), ("reset", {"message_id": 7}),
    ]
    path = {"message": "messages", "event": "events", "reset": "reset"}
    for kind, body in examples:
        schema = _resolve(doc, {"$ref": f"#/components/schemas/{KINDS[kind].__name__}"})
        valid = jsonschema.Draft202012Validator(schema).is_valid(body)
        r = http.post(f"/v1/conversations/c1/{path[kind]}", headers=HEADERS, json=body)
        assert (r.status_code == 202) == valid, (kind, body, r.text)


def test_the_error_answers_carry_the_documented_headers() -> None:
    doc = _doc()
    for ops in doc["paths"].values():
        for op in ops.values():
            assert "WWW-Authenticate" in op["responses"]["401"]["headers"]
            assert "Retry-After" in op["responses"]["429"]["headers"]
            assert "Retry-After" in op["responses"]["503"]["headers"]


def test_each_operation_summary_names_the_fields_that_change_what_it_does() -> None:
    """A reader of the document alone learns that an event can be answered, set a fact or wait (not "no model
    call", which ``respond`` contradicts)."""
    summary = next(op.summary for op in OPERATIONS if op.operation_id == "send_event")
    assert all(f"`{field}`" in summary for field in ("respond", "key", "at")) and "no model call" not in summary
