"""The webhook app with the producers' API answered by its Starlette routes only, as before the fast path for
messages and events (worker/ingress/fast_inputs.py). Only for bench/producers_accept.py's old-against-new figure:
``uvicorn bench.routed_api:app``."""

from __future__ import annotations

from functools import partial

from worker.ingress import app as app_module
from worker.ingress.app import app

app_module.create_app = partial(app_module.create_app, fast_inputs=False)  # type: ignore[assignment]

__all__ = ["app"]
