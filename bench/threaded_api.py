"""The webhook app with the producers' API accepting as it did before issue 29's async accept: every input's
parse, validation and accept in a worker thread (the blocking client). Only for bench/producers_accept.py's
old-against-new figure: ``uvicorn bench.threaded_api:app``."""

from __future__ import annotations

from worker.client.async_client import AsyncClient
from worker.ingress.app import app


def _never(client: object) -> None:
    return None


AsyncClient.for_client = staticmethod(_never)  # type: ignore[method-assign, assignment]

__all__ = ["app"]
