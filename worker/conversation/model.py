"""The model protocol: what the chat loop asks of a language model, and what it gets back.

Providers in :mod:`worker.llm` implement :class:`Model` over HTTP; :class:`worker.conversation.scripted.ScriptedModel`
implements it from a script for tests. The core never sees a wire format: providers turn
:class:`ModelRequest` into their request body and their response into :class:`ModelResponse`, keeping the
provider's own form of the assistant message in ``Message.raw``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from worker.conversation.messages import Message

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "refusal", "other"]
Purpose = Literal["chat", "summarize"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: a name, a description and a JSON schema for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by the provider for one round trip."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_creation_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Attachment:
    """The bytes of a photo for one turn, fetched at the edge: never stored, only sent."""

    mime_type: str
    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One round trip's input. ``system`` is the preamble (the caller's system prompt plus the rendered
    summary and pinned items); ``messages`` never contains a leading system message."""

    system: str | None
    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    purpose: Purpose = "chat"
    # "none" asks the model to answer in text although tools are declared (Anthropic requires the tool
    # definitions whenever the history holds tool_use blocks, so we cannot just drop them).
    tool_choice: Literal["auto", "none"] = "auto"
    # Media id -> bytes, for the photos of this turn: a user message whose ``media.id`` is here is sent with
    # the picture; one whose id is not (an older turn) is sent as text (messages.unseen_media_text).
    attachments: Mapping[str, Attachment] = field(default_factory=dict)
    # Context for this request only, rendered after the history (after the newest message): what changes between
    # requests (the game's keyed facts, a live context placed there). Kept out of ``system`` so that the prompt's
    # start stays the same from one request to the next and the providers' prompt caches can reuse it.
    after_history: str | None = None
    # Past conversation quoted for this request only (``auto`` recall, :mod:`worker.conversation.recall.reading`):
    # rendered after the history in the user role, never the system role, since it holds the player's own words.
    recalled: str | None = None
    # How many characters at the start of ``system`` are the caller's prompt (the rest, pinned items and summary,
    # changes when compaction runs): a provider that caches at breakpoints (Anthropic) marks the end of both, so the
    # prompt is still read from the cache after a compaction. 0: not known.
    system_stable: int = 0


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One round trip's output.

    ``message`` is an assistant message (with ``raw`` set by the provider); ``finish_reason`` is normalised
    across providers, ``raw_finish_reason`` is what the provider said.
    """

    message: Message
    finish_reason: FinishReason = "stop"
    usage: Usage | None = None
    raw_finish_reason: str | None = None
    model: str | None = None


@runtime_checkable
class Model(Protocol):
    """A language model the chat loop can call.

    ``provider`` locks conversation state: a blob written with one provider is not replayed to another
    (its messages carry that provider's wire form). ``complete`` raises only :class:`worker.errors.ModelError`
    subclasses. ``reads_images``: whether the model takes pictures (the worker fetches a player's photo only
    for such a model; others get the caption).
    """

    @property
    def provider(self) -> str: ...

    @property
    def reads_images(self) -> bool: ...

    @property
    def model_name(self) -> str: ...

    def complete(self, request: ModelRequest) -> ModelResponse: ...
