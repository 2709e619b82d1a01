"""Reading players' bursts out of what the loopback model was asked."""

from __future__ import annotations

from typing import Any


def introduced(request: dict[str, Any]) -> list[str]:
    """The user messages a chat request brings in: those after its last assistant message (what the turn adds to
    the history; earlier ones were answered by earlier turns). A burst turn brings in several."""
    messages = request.get("messages", [])
    last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    return [str(m.get("content", "")) for m in messages[last_assistant + 1:] if m.get("role") == "user"]


def is_summary(request: dict[str, Any]) -> bool:
    """A compaction's summarising request (the loopback model's summariser mode), not a chat turn."""
    system = next((m.get("content", "") for m in request.get("messages", []) if m.get("role") == "system"), "") or ""
    return "running summary" in str(system)
