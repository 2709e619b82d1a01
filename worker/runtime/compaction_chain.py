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
    Hysteresis,
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
HIGH_WATER_SHARE = 0.18
"""The default chain's high-water mark for the history kept verbatim, as a share of the compaction budget (1,080 of
6,000 tokens). Between compactions the prompt only grows at its end (the providers' caches reuse all of it); a
compaction rewrites it from the summary on. With the summary and the last two exchanges left after a compaction,
this keeps the total of the prompts of a 300-turn game below that of the earlier policy (which summarised every
five exchanges) while compacting half as often (``bench/prompt_cache.py``)."""
DEFAULT_KEEP_LAST = 2
"""Exchanges the default chain keeps verbatim when it compacts (it compacts in large steps: the summary holds the
rest)."""
NAMED_KEEP_LAST = 6
"""Exchanges the summarize and keep_last steps of a chain ``PARLEY_COMPACTION`` names keep, unless set."""

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
    """The chain ``PARLEY_COMPACTION`` names, in its order; unset, the default (:func:`default_chain`).

    ``budget`` is the prompt size to keep under (default: :func:`compaction_budget` for ``model``)."""
    if budget is None:
        budget = compaction_budget(settings, model.provider, model.model_name)
    target = settings.memory.compaction_target_tokens
    if target is not None and target > budget:
        target = None  # the default 70% of the lowered budget
    if settings.memory.compaction is None:
        return default_chain(settings, model, budget, target)
    keep_last = settings.memory.compaction_keep_last
    keep_last = NAMED_KEEP_LAST if keep_last is None else keep_last
    steps: list[Compactor] = []
    for name in settings.memory.compaction:
        if name == "tools":
            steps.append(CompressToolExchanges(keep_recent=settings.memory.compress_tool_outputs_after))
        elif name == "summarize":
            steps.append(Summarize(model, keep_last=keep_last, trigger_tokens=int(budget * 0.8)))
        elif name == "keep_last":
            if keep_last < 1:
                raise ConfigurationError("the keep_last compaction step needs PARLEY_COMPACTION_KEEP_LAST >= 1")
            steps.append(KeepLastExchanges(keep_last))
        elif name == "budget":
            steps.append(TokenBudget(budget, target))
        else:  # the settings' Literal refuses these; a Settings built by hand might not
            raise ConfigurationError(f"unknown compaction step {name!r}; expected tools, summarize, keep_last, budget")
    return Compose(*steps)


def default_chain(settings: Settings, model: Model, budget: int, target: int | None) -> Compactor:
    """The default: nothing until the stored conversation is over the high-water mark
    (``PARLEY_COMPACTION_HIGH_WATER``, default :data:`HIGH_WATER_SHARE` of the budget), then in one step: compress
    old tool outputs, fold all but the last :data:`DEFAULT_KEEP_LAST` exchanges into the rolling summary (when
    ``PARLEY_COMPACTION_SUMMARIZE``), trim to the budget's target. The whole prompt over the budget (a long system
    prompt) triggers it too. Without the summary the step is the budget's own: at the budget, down to its target.

    Compacting rarely, in large steps, keeps the prompt's start unchanged between compactions, so the providers'
    prompt caches reuse it (:class:`~worker.conversation.compaction.Hysteresis`)."""
    tools = CompressToolExchanges(keep_recent=settings.memory.compress_tool_outputs_after)
    trim = TokenBudget(budget, target)
    if not settings.memory.compaction_summarize:
        return Hysteresis(budget, tools, trim, max_prompt_tokens=budget)
    keep_last = settings.memory.compaction_keep_last
    keep_last = DEFAULT_KEEP_LAST if keep_last is None else max(1, keep_last)
    high = settings.memory.compaction_high_water or max(1, int(budget * HIGH_WATER_SHARE))
    return Hysteresis(min(high, budget), tools, Summarize(model, keep_last=keep_last), trim, max_prompt_tokens=budget)
