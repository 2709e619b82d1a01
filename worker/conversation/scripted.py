"""A scripted model: answers from a list, for tests (yours and ours) and demos without a provider."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from worker.conversation.messages import Message, ToolCall
from worker.conversation.model import FinishReason, ModelRequest, ModelResponse, Usage

_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    """One scripted answer: text and/or tool calls (``(name, arguments_dict)`` pairs), a finish reason and
    optional usage. With ``usage=None`` the model reports an estimate (characters / 4)."""

    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    finish_reason: FinishReason | None = None
    usage: Usage | None = None
    raw_extra: dict[str, Any] = field(default_factory=dict)


Step = str | Reply | BaseException | Callable[[ModelRequest], ModelResponse | str | Reply]


class ScriptedModel:
    """A :class:`~worker.conversation.model.Model` that plays a script.

    Each call takes the next step: a ``str`` (a text answer), a :class:`Reply`, an exception instance (raised,
    e.g. ``RateLimitedError("slow down")``) or a callable ``request -> response | str | Reply``. When the script
    runs out, ``default`` answers (a step, or ``None`` to raise ``IndexError``). Every request is kept in
    ``requests`` so tests can assert what the model saw. Thread-safe.
    """

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        provider: str = "scripted",
        model_name: str = "scripted-1",
        default: Step | None = "OK.",
        reads_images: bool = False,
    ) -> None:
        self._script = list(script)
        self._provider = provider
        self._model_name = model_name
        self.default = default
        self.reads_images = reads_images  # a test sets it to play a model that takes pictures
        self.requests: list[ModelRequest] = []
        self._lock = threading.Lock()

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def model_name(self) -> str:
        return self._model_name

    def push(self, *steps: Step) -> None:
        with self._lock:
            self._script.extend(steps)

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.requests.append(request)
            if self._script:
                step: Step | None = self._script.pop(0)
            else:
                step = self.default
        if step is None:
            raise IndexError("the scripted model ran out of steps")
        if isinstance(step, BaseException):
            raise step
        if callable(step) and not isinstance(step, Reply):
            out = step(request)
            if isinstance(out, ModelResponse):
                return out
            step = out
        reply = Reply(text=step) if isinstance(step, str) else step
        return self._respond(request, reply)

    def _respond(self, request: ModelRequest, reply: Reply) -> ModelResponse:
        calls = tuple(
            ToolCall(id=f"call_{next(_ids)}", name=name, arguments=json.dumps(args)) for name, args in reply.tool_calls
        )
        raw: dict[str, Any] = {"role": "assistant", "content": reply.text or None, **reply.raw_extra}
        if calls:
            raw["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
            ]
        message = Message(role="assistant", content=reply.text, tool_calls=calls, raw=raw)
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        usage = reply.usage
        if usage is None:
            prompt_chars = len(request.system or "") + sum(
                len(m.content) + sum(len(c.arguments) for c in m.tool_calls) for m in request.messages
            )
            usage = Usage(prompt_tokens=prompt_chars // 4 + 4 * len(request.messages), completion_tokens=len(reply.text) // 4)
        return ModelResponse(message=message, finish_reason=finish, usage=usage, raw_finish_reason=finish,
                             model=self._model_name)
