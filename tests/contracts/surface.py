"""What the public surface is, read off the code: every name others import, with its signature, the CLI's commands
and options, the Celery task names, the environment variables and the metrics' names.

``python -m tests.contracts.surface > tests/contracts/surface.json`` writes the pinned copy; a change to it is a
decision made in review, never a side effect of a move.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
from typing import Any

# (module, attribute) pairs others import: ../shared/DESIGN.md's contracts and internal entry points, the Procfile's
# names, and the producers' API. A class lists its public methods with theirs.
ENTRY_POINTS: list[tuple[str, str]] = [
    ("worker.client", "ConversationClient"),
    ("worker.ingress.app", "app"),
    ("worker.ingress.app", "create_app"),
    ("worker.ingress.protocol", "NoDelayHTTP"),
    ("worker.runtime", "build_service"),
    ("worker.runtime", "build_channel"),
    ("worker.runtime", "offered_reply_tools"),
    ("worker.runtime", "redis_client"),
    ("worker.settings", "Settings"),
    ("worker.ingress.parse", "parse_webhook"),
    ("worker.ingress.parse", "InboundMessage"),
    ("worker.ingress.parse", "InboundEvent"),
    ("worker.ingress.parse", "InboundNotice"),
    ("worker.ingress.parse", "StatusUpdate"),
    ("worker.ingress.parse", "Unsupported"),
    ("worker.store.keys", "ConversationKeys"),
    ("worker.conversation.messages", "Message"),
    ("worker.conversation.messages", "ToolCall"),
    ("worker.conversation.model", "ModelResponse"),
    ("worker.conversation.model", "Usage"),
    ("worker.conversation.scripted", "ScriptedModel"),
    ("worker.conversation.scripted", "Reply"),
    ("worker.conversation.tools", "Tool"),
    ("worker.llm", "build_model"),
    ("worker.cli", "main"),
    ("worker.testing", "RecordingChannel"),
    ("worker.testing", "check_history"),
    ("worker.conversation.turn_journal", "TurnJournal"),
    ("tasks", "app"),
]


def _signature(obj: Any) -> str | None:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return None


def _describe(obj: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": type(obj).__name__ if not inspect.isclass(obj) else "class"}
    if inspect.isclass(obj):
        methods = {}
        for name, member in sorted(vars(obj).items()):
            if name.startswith("_") and name != "__init__":
                continue
            fn = member.__func__ if isinstance(member, classmethod | staticmethod) else member
            if callable(fn):
                methods[name] = _signature(fn)
        entry["methods"] = methods
        if hasattr(obj, "model_fields"):  # pydantic: the field names are the keywords
            entry["fields"] = sorted(obj.model_fields)
        elif hasattr(obj, "__dataclass_fields__"):
            entry["fields"] = sorted(obj.__dataclass_fields__)
    elif callable(obj):
        entry["signature"] = _signature(obj)
    return entry


def _cli_commands() -> dict[str, list[str]]:
    from worker import cli

    parser = cli._build_parser()
    commands: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                commands[name] = sorted(opt for a in sub._actions for opt in (a.option_strings or [a.dest])
                                        if opt not in ("-h", "--help", "help"))
    return commands


def _environment_names() -> list[str]:
    from worker.settings import GROUPS, env_name, knobs

    return sorted(env_name(flat, info) for group in GROUPS.values() for flat, (_, info) in knobs(group).items())


def _flat_keywords() -> list[str]:
    """``Settings(burst_quiet_seconds=...)``: the flat keyword names a deployment's code may pass."""
    from worker.settings import GROUPS, knobs

    return sorted(flat for group in GROUPS.values() for flat in knobs(group))


def _metric_names() -> list[str]:
    from prometheus_client.metrics import MetricWrapperBase

    import worker.metrics as metrics

    return sorted(value._name for value in vars(metrics).values() if isinstance(value, MetricWrapperBase))


def _task_names() -> list[str]:
    import tasks
    import tasks.conversation  # registers the tasks

    return sorted(name for name in tasks.app.tasks if name.startswith("parley."))


def surface() -> dict[str, Any]:
    """The whole surface as one JSON-able value."""
    import worker

    entries: dict[str, Any] = {}
    for module, attribute in ENTRY_POINTS:
        entries[f"{module}:{attribute}"] = _describe(getattr(importlib.import_module(module), attribute))
    for name in worker.__all__:
        entries[f"worker:{name}"] = _describe(getattr(worker, name))
    return {
        "entries": entries,
        "cli": _cli_commands(),
        "tasks": _task_names(),
        "environment": _environment_names(),
        "settings_keywords": _flat_keywords(),
        "metrics": _metric_names(),
    }


if __name__ == "__main__":
    print(json.dumps(surface(), indent=1, sort_keys=True))
