"""The game's live context for each turn, from settings alone (docs/game.md, "Live game context").

An edge package like :mod:`worker.tools`: it reads the tool manifest's ``context`` entry or imports
``PARLEY_CONTEXT``; :func:`load_context_source` runs when the worker's service is built, and everything wrong with
the configuration fails there as a :class:`~worker.errors.ConfigurationError`.
"""

from __future__ import annotations

import inspect
from typing import Any

from worker.errors import ConfigurationError
from worker.game_context.sources import CallableContext, HttpContext, answer_text, takes_input_id
from worker.tools.manifest import expand_headers, load_manifest
from worker.tools.python_source import import_reference

__all__ = ["CallableContext", "HttpContext", "answer_text", "load_context_source", "takes_input_id"]


def load_context_source(settings: Any) -> HttpContext | CallableContext | None:
    """The source the settings name (the manifest's ``context`` entry or ``PARLEY_CONTEXT``), or None. Its timeout
    must be under the drain's lease: the heartbeat keeps the lease while a fetch waits, but a fetch must never be
    the reason a turn holds a conversation long."""
    knobs = settings.game_context
    spec = load_manifest(settings.tooling.tools_file).context if settings.tooling.tools_file else None
    if spec is not None and knobs.source:
        raise ConfigurationError(f"PARLEY_CONTEXT={knobs.source} and the context entry of PARLEY_TOOLS_FILE "
                                 f"{settings.tooling.tools_file}: set one of the two")
    if spec is None and not knobs.source:
        return None
    where = f"PARLEY_TOOLS_FILE {settings.tooling.tools_file}: context" if spec is not None else "PARLEY_CONTEXT_TIMEOUT"
    timeout = (spec.timeout if spec is not None else None) or knobs.timeout
    if timeout >= settings.drain.lease_seconds:
        raise ConfigurationError(f"{where}: the context timeout ({timeout:g} s) must be under PARLEY_LEASE_SECONDS "
                                 f"({settings.drain.lease_seconds:g} s)")
    if spec is not None:
        return HttpContext(spec.url, headers=expand_headers(spec.headers, f"{where}.headers"), timeout=timeout,
                           max_chars=knobs.max_chars)
    fn = import_reference(knobs.source, f"PARLEY_CONTEXT={knobs.source}")
    if not callable(fn):
        raise ConfigurationError(f"PARLEY_CONTEXT={knobs.source}: expected a callable taking the conversation id, "
                                 f"got {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        # Called on a thread, it would return a coroutine on every turn: each turn without its context.
        raise ConfigurationError(f"PARLEY_CONTEXT={knobs.source}: an async function; give a plain function "
                                 f"(run the coroutine inside it, e.g. with asyncio.run)")
    return CallableContext(fn, timeout=timeout)
