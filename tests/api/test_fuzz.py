"""Schemathesis fuzzes the producers' API from its own OpenAPI document, against the app backed by a real Redis
(a redis-server of the test's own on a free port): no answer is a 5xx, and every answer (status, headers, body)
conforms to the document. The number of examples is bounded so CI stays fast."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, settings
from starlette.applications import Starlette

from tests.support.redis_server import free_port, redis_binary, skip_or_fail, start_redis
from worker.client import ConversationClient
from worker.ingress.app import create_app
from worker.store.limits import StoreLimits
from worker.store.redis_store import ConversationStore

TOKEN = "fuzz-operator-token"


def _app(r: redis.Redis) -> Starlette:
    # A small mailbox, so the fuzz also reaches the 429 answer.
    store = ConversationStore(r, prefix="fuzz", limits=StoreLimits(max_inbox=3))
    client = ConversationClient(store, wake=lambda cid: None, max_text_chars=200)
    return create_app(client, store, app_secret="s", verify_token="v", api_tokens=f"operator:{TOKEN}",
                      max_body_bytes=4096)


class _Swappable:
    """The ASGI app Schemathesis calls: loaded at import (the document needs no Redis; a pytest fixture cannot feed
    Schemathesis under pytest 9), pointed at a real Redis by the fixture below before any case runs."""

    def __init__(self) -> None:
        self.app = _app(redis.Redis(port=free_port(), socket_connect_timeout=0.2))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


APP = _Swappable()
# A 413 (a body past the size or JSON-object bound, documented) rejects malformed data as a 4xx does.
# An operator's message may be refused (422, or 413 past the JSON-object bound) though its body fits the document: a
# rich part's rules across fields (unique button and row ids, at most 10 rows in all, an image's link or media id)
# are more than JSON Schema says. So may a producer's input whose `at` is more than 366 days from now (JSON Schema has
# no bound relative to the present; the document's description says it).
_REFUSED_PAST_THE_SCHEMA = {"positive_data_acceptance": {
    "expected-statuses": ["2xx", 401, 403, 404, 409, 413, 422, 429]}}
_CONFIG = schemathesis.config.SchemathesisConfig.from_dict({
    "checks": {"negative_data_rejection": {
        "expected-statuses": [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429, "5xx"]}},
    "operations": [{"include-path-regex": "operator-messages$", "checks": _REFUSED_PAST_THE_SCHEMA},
                   {"include-path-regex": "/(messages|events|reset)$", "checks": _REFUSED_PAST_THE_SCHEMA}],
})
schema = schemathesis.openapi.from_asgi("/v1/openapi.json", APP, config=_CONFIG)


@pytest.fixture(scope="module", autouse=True)
def real_redis_behind_the_app() -> Iterator[None]:
    if redis_binary() is None:
        skip_or_fail("no redis-server binary")
    server = start_redis()
    APP.app = _app(server.client())
    yield
    server.stop()


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_answers_as_its_document_says(case: Any) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"})
