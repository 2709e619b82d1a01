"""The compactor chain a deployment's settings choose (:func:`build_compactor`), with what it is built from: the
token counter (:func:`build_counter`) and the prompt budget the model's context window leaves once the answer has
its room (:func:`compaction_budget`).

Kept apart from :mod:`worker.runtime` (which wires processes together) because these are decisions about the
model, each with a reason: tiktoken counts exactly only for OpenAI's own models; a budget that ignores the
context window lets a long conversation grow into a provider's "prompt is too long" error.
"""

from __future__ import annotations

import logging

from worker.conversation.compaction import (
    Compactor,
    Compose,
    CompressToolExchanges,
    KeepLastExchanges,
    Summarize,
    TokenBudget,
)
from worker.conversation.model import Model
from worker.conversation.tokens import EstimateCounter, TiktokenCounter, TokenCounter, UsageCalibratedCounter
from worker.errors import ConfigurationError
from worker.settings import Settings

log = logging.getLogger("parley.compaction")

DEFAULT_CHAIN = ("tools", "summarize", "budget")

# Context windows by model-name prefix, longest prefix first wins. Sources: the providers' model pages.
_WINDOWS: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 1_047_576), ("gpt-5", 400_000), ("gpt-4o", 128_000), ("chatgpt-4o", 128_000),
    ("gpt-4-turbo", 128_000), ("gpt-4.5", 128_000), ("gpt-4", 8_192), ("gpt-3.5", 16_385),
    ("o1-mini", 128_000), ("o1", 200_000), ("o3", 200_000), ("o4", 200_000), ("claude", 200_000),
    ("smollm2", 4_096),
)
UNKNOWN_WINDOW = 8_192
"""For a model we do not know (an open model behind an OpenAI-compatible server): small, so that compaction
errs on the side of a shorter prompt; set ``PARLEY_CONTEXT_WINDOW`` for the real figure."""

SAFETY_MARGIN = 0.05
"""Share of the window kept free beyond the answer: counts are estimates (the tools' schemas and the
providers' framing are not all counted)."""


def is_openai_family(model: str) -> bool:
    """Whether ``model`` is one of OpenAI's own models (tokenized by cl100k_base or o200k_base)."""
    name = model.lower()
    return name.startswith(("gpt-", "chatgpt-", "o1", "o3", "o4", "text-embedding-", "davinci", "babbage"))


def context_window(settings: Settings, model: str) -> int:
    """``PARLEY_CONTEXT_WINDOW``, else the family default of ``model``."""
    if settings.llm.context_window:
        return settings.llm.context_window
    name = model.lower()
    for prefix, window in sorted(_WINDOWS, key=lambda pw: -len(pw[0])):
        if name.startswith(prefix) or (prefix == "smollm2" and prefix in name):
            return window
    return UNKNOWN_WINDOW


def answer_room(settings: Settings, provider: str) -> int:
    """Tokens an answer may take: the max tokens, plus the thinking budget when Claude thinks first."""
    thinking = settings.llm.anthropic_thinking_budget if provider == "anthropic" else 0
    return settings.llm.max_tokens + thinking


def compaction_budget(settings: Settings, provider: str, model: str) -> int:
    """The prompt size compaction keeps under: ``PARLEY_COMPACTION_MAX_TOKENS``, lowered when the context
    window would not leave the answer its room (and a small margin for what the counts miss).

    Raises :class:`ConfigurationError` when the window cannot even hold the answer."""
    window = context_window(settings, model)
    room = window - answer_room(settings, provider) - int(window * SAFETY_MARGIN)
    if room < 256:
        raise ConfigurationError(f"the context window of {model} ({window} tokens) leaves no room for a prompt "
                                 f"once {answer_room(settings, provider)} tokens are kept for the answer; lower "
                                 "PARLEY_LLM_MAX_TOKENS / PARLEY_ANTHROPIC_THINKING_BUDGET or set "
                                 "PARLEY_CONTEXT_WINDOW")
    budget = min(settings.memory.compaction_max_tokens, room)
    if budget < settings.memory.compaction_max_tokens:
        log.info("compaction budget lowered to fit the context window",
                 extra={"model": model, "window": window, "budget": budget})
    return budget


def build_counter(settings: Settings, provider: str, model: str) -> TokenCounter:
    """The token counter ``PARLEY_TOKEN_COUNTER`` names (``auto``: tiktoken for OpenAI's models, else usage)."""
    kind = settings.memory.token_counter
    if kind == "auto":
        kind = "tiktoken" if provider == "openai" and is_openai_family(model) else "usage"
    if kind == "tiktoken":
        return TiktokenCounter(model=model)
    if kind == "usage":
        return UsageCalibratedCounter()
    return EstimateCounter()


def build_compactor(settings: Settings, model: Model, *, budget: int | None = None) -> Compactor:
    """The chain ``PARLEY_COMPACTION`` names, in its order; unset, today's default: compress old tool outputs,
    fold old exchanges into a rolling summary (when ``PARLEY_COMPACTION_SUMMARIZE``), keep a hard budget.

    ``budget`` is the prompt size to keep under (default: :func:`compaction_budget` for ``model``)."""
    if budget is None:
        budget = compaction_budget(settings, model.provider, model.model_name)
    target = settings.memory.compaction_target_tokens
    if target is not None and target > budget:
        target = None  # the default 70% of the lowered budget
    names: list[str] | None = list(settings.memory.compaction) if settings.memory.compaction is not None else None
    if names is None:
        names = [s for s in DEFAULT_CHAIN if s != "summarize" or settings.memory.compaction_summarize]
    steps: list[Compactor] = []
    for name in names:
        if name == "tools":
            steps.append(CompressToolExchanges(keep_recent=settings.memory.compress_tool_outputs_after))
        elif name == "summarize":
            steps.append(Summarize(model, keep_last=settings.memory.compaction_keep_last, trigger_tokens=int(budget * 0.8)))
        elif name == "keep_last":
            if settings.memory.compaction_keep_last < 1:
                raise ConfigurationError("the keep_last compaction step needs PARLEY_COMPACTION_KEEP_LAST >= 1")
            steps.append(KeepLastExchanges(settings.memory.compaction_keep_last))
        elif name == "budget":
            steps.append(TokenBudget(budget, target))
        else:  # the settings' Literal refuses these; a Settings built by hand might not
            raise ConfigurationError(f"unknown compaction step {name!r}; expected tools, summarize, keep_last, budget")
    return Compose(*steps)
