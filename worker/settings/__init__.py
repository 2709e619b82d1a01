"""Every setting in one place, read from the environment (and a ``.env`` file when present).

Standard names where the ecosystem has them (``REDIS_URL``, ``OPENAI_API_KEY``, ``WHATSAPP_ACCESS_TOKEN``,
...); everything else under ``PARLEY_``. ``parley config`` prints the table docs/configuration.md is generated from.

The settings come in groups, each a small frozen object a component takes as it is (as httpx's ``Timeout`` and
``Limits`` are): :class:`Redis`, :class:`Broker`, :class:`Llm`, :class:`Tooling`, :class:`Memory`, :class:`Store`,
:class:`Drain`, :class:`Burst`, :class:`PhotoLimits`, :class:`Webhook`, :class:`Producers`, :class:`Delivery`, :class:`WhatsApp`,
:class:`Record`, :class:`Budget`, :class:`Observability` and :class:`GameContext`. A knob is declared once, in its group; a unit a component
wants (milliseconds, a flag) is a property of the group. The environment stays flat: a field's variable is
``PARLEY_`` + its flat name (the field's ``validation_alias``, else its name), or a standard name, and
``Settings(lease_seconds=5)`` takes the same flat names.
"""

from __future__ import annotations

import json
import warnings
from copy import copy
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, cast

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

CompactionStep = Literal["tools", "summarize", "keep_last", "budget"]

# populate_by_name: code builds a group by field name (``Redis(url=...)``), the environment by flat name.
_GROUP = ConfigDict(populate_by_name=True, extra="forbid")


class _Group(BaseModel):
    """A group of settings: frozen, built by field name in code and by flat name from the environment. A model
    rather than a dataclass where nothing needs :func:`dataclasses.replace`, and its validator built on first use
    (``defer_build``; the settings' own validator covers the groups): fifteen classes built at import cost every
    process's start-up about 30 ms more otherwise (bench: import plus the first ``Settings()``)."""

    model_config = ConfigDict(frozen=True, defer_build=True, **_GROUP)


_STANDARD: dict[str, Any] = {"standard": True}  # a field read from its standard name (REDIS_URL) as well as PARLEY_REDIS_URL


def _split(v: object) -> object:
    """``a, b ,,c`` -> ``["a", "b", "c"]``: the comma form a person writes; anything else as it is."""
    if not isinstance(v, str):
        return v
    return [p.strip() for p in v.split(",") if p.strip()]


class Redis(_Group):
    """Redis for conversation state."""

    heading: ClassVar[str] = "Redis"
    url: str | None = Field(default=None, validation_alias="redis_url", json_schema_extra=_STANDARD,
                            description="Redis for conversation state, mailboxes and outboxes. Unset: "
                                        "`parley demo` starts an embedded Redis; workers use redis://127.0.0.1:6379/0.")
    wait_replicas: int = Field(default=0, ge=0, validation_alias="redis_wait_replicas", description="Replicas that must "
                               "acknowledge each accepted input, each commit and each delivery claim and sent mark "
                               "before it counts as done (Redis WAIT). Set 1 with Sentinel, so a failover cannot lose "
                               "what a player was already answered; 0 = do not wait.")
    wait_timeout: float = Field(default=1.0, gt=0, validation_alias="redis_wait_timeout", description="Seconds a write waits "
                                "for PARLEY_REDIS_WAIT_REPLICAS; past it the write counts as an unknown outcome (the "
                                "caller retries; parley_redis_wait_short_total).")
    key_prefix: str = Field(default="parley", description="Prefix of every Redis key Parley writes.")
    cluster: bool = Field(default=False, validation_alias="redis_cluster",
                          description="Treat REDIS_URL as a Redis Cluster for conversation state.")
    max_connections: int = Field(default=200, validation_alias="redis_max_connections", description="Connections a process "
                                 "keeps to Redis for state; threads beyond that wait for a free one (redis-py's own "
                                 "default fails at 100).")

    def effective_url(self) -> str:
        return self.url or "redis://127.0.0.1:6379/0"

    @property
    def wait_timeout_ms(self) -> int:
        return int(self.wait_timeout * 1000)


class Broker(_Group):
    """The Celery broker and the worker's Celery options."""

    heading: ClassVar[str] = "Celery and its broker"
    url: str | None = Field(default=None, validation_alias="broker_url", description="Celery broker: Redis (standalone or "
                            "Sentinel) or RabbitMQ (amqp://...: a quorum queue, publisher confirms). Default: REDIS_URL.")
    sentinel_master: str | None = Field(default=None, validation_alias="broker_sentinel_master", description="The master's "
                                        "name when PARLEY_BROKER_URL is a redis+sentinel:// URL naming another "
                                        "(default: the URL's).")
    task_time_limit: float = Field(default=600.0, description="Hard time limit of one task (seconds).")
    visibility_timeout: float = Field(default=900.0, description="Broker visibility timeout; above the hard time limit.")
    restore_interval: int = Field(default=10, validation_alias="broker_restore_interval", description="Seconds between the "
                                  "broker's scans for messages whose worker died (kombu unacked_restore_interval).")
    restore_throttle: int = Field(default=10, validation_alias="broker_restore_throttle", description="Scan on every Nth "
                                  "restore tick (kombu unacked_restore_throttle); 1 scans on every tick.")
    max_connections: int = Field(default=2000, validation_alias="broker_max_connections", description="Redis connections a "
                                 "worker process may open to the broker (kombu's default of 10 fails publishes and "
                                 "acks under a large threads or gevent concurrency); keep it above the concurrency.")
    fetch_batch: int = Field(default=100, ge=0, validation_alias="broker_fetch_batch", description="On a redis:// "
                             "broker, the most wake-ups a worker takes in one round trip when it has that many free "
                             "slots (one LMPOP after each BRPOP); 0 takes one message per BRPOP, as kombu does.")
    wake_in_accept: bool = Field(default=True, validation_alias="broker_wake_in_accept", description="When the broker is "
                                 "the same plain redis:// server and database as REDIS_URL (the default), a producer's "
                                 "accept script pushes the workers' wake-up message onto the broker's queue itself, in "
                                 "the same round trip, instead of a second publish through kombu (issue 33: about 1 ms "
                                 "less per first input). Off, or with another broker (Sentinel, RabbitMQ, another "
                                 "server) or a Redis Cluster store: the wake-up is published through kombu.")
    remote_control: bool = Field(default=False, description="Answer `celery inspect` / `celery control` (a pub/sub "
                                 "connection per worker). Off: on a broker restart that connection's reconnect "
                                 "crashed workers (\"Unrecoverable error\", seen in the chaos suite); "
                                 "`parley health` and the metrics cover probing.")
    task_events: bool = Field(default=False, description="Send Celery task events (for Flower and `celery events`); each "
                              "task then costs three more broker publishes. Parley's Prometheus metrics do not "
                              "need them. `celery worker -E` turns them on too.")

    @property
    def task_time_limit_ms(self) -> int:
        return int(self.task_time_limit * 1000)


class Llm(_Group):
    """The model: which provider, how it is called, and how long it may answer."""

    heading: ClassVar[str] = "The model"
    provider: Literal["auto", "openai", "anthropic", "local"] = Field(
        default="auto", validation_alias="llm_provider", description="openai | anthropic | local. auto: openai if "
        "OPENAI_API_KEY is set, else anthropic if ANTHROPIC_API_KEY is set, else the embedded local model.")
    model: str | None = Field(default=None, validation_alias="llm_model",
                              description="Model name. Default: gpt-4o-mini, claude-haiku-4-5, or SmolLM2-135M.")
    openai_api_key: SecretStr | None = Field(default=None, json_schema_extra=_STANDARD,
                                             description="API key for OpenAI or an OpenAI-compatible server.")
    openai_base_url: str | None = Field(default=None, json_schema_extra=_STANDARD, description="Base URL of an "
                                        "OpenAI-compatible server (vLLM, Ollama, llama.cpp).")
    anthropic_api_key: SecretStr | None = Field(default=None, json_schema_extra=_STANDARD, description="API key for Anthropic.")
    anthropic_base_url: str | None = Field(default=None, json_schema_extra=_STANDARD,
                                           description="Base URL for the Anthropic Messages API.")
    timeout: float = Field(default=60.0, validation_alias="llm_timeout",
                           description="Seconds to wait for a model answer (read timeout).")
    http_client: Literal["lean", "httpx"] = Field(
        default="lean", validation_alias="http_client", description="The transport under httpx for a turn's own "
        "requests (the model call, the WhatsApp send and read mark). lean: the standard library's http.client, one "
        "keep-alive HTTP/1.1 connection per pooled client (about half the CPU a request); httpx: httpx's default "
        "transport (httpcore). Proxies from the environment apply either way.")
    connect_timeout: float = Field(default=5.0, validation_alias="llm_connect_timeout",
                                   description="Seconds to wait for a connection to the model.")
    max_retries: int = Field(default=2, validation_alias="llm_max_retries", description="Retries of one model call on 429/5xx "
                             "before the turn is retried later.")
    breaker_threshold: int = Field(default=5, validation_alias="llm_breaker_threshold",
                                   description="Consecutive provider failures that open the circuit breaker.")
    breaker_reset: float = Field(default=30.0, validation_alias="llm_breaker_reset",
                                 description="Seconds the breaker stays open before one probe call.")
    max_tokens: int = Field(default=1024, validation_alias="llm_max_tokens", description="Most tokens the model may write in "
                            "one answer (sent as max_completion_tokens to OpenAI o-series and gpt-5 models, which "
                            "refuse max_tokens). Unset, the local model keeps its own 160 (a 135M model that does not stop "
                            "by itself would otherwise write on for a minute).")
    context_window: int | None = Field(default=None, gt=0, description="Tokens the model reads and writes in one call. "
                                       "Default by model family (gpt-4o 128k, gpt-4.1 1M, gpt-5 400k, o-series and "
                                       "Claude 200k, the local model 4k, others 8k). The compaction budget is kept "
                                       "below it minus the answer's room (max tokens plus the thinking budget).")
    anthropic_prompt_cache: bool = Field(default=True, description="Mark the stable prefix (system prompt with summary and "
                                         "pinned items, older history) with Anthropic cache_control breakpoints, so "
                                         "repeated prefixes are read from the cache.")
    anthropic_thinking_budget: int = Field(default=0, ge=0, description="Tokens Claude may think before answering (extended "
                                           "thinking, at least 1024); 0 = off. Added to the answer's max tokens.")
    system_prompt: str = Field(default="You are a friendly, concise game assistant chatting over WhatsApp.",
                               description="Default system prompt; a turn may carry its own.")

    def effective_provider(self) -> str:
        if self.provider != "auto":
            return self.provider
        if self.openai_api_key is not None or self.openai_base_url:
            return "openai"
        if self.anthropic_api_key is not None:
            return "anthropic"
        return "local"


class Tooling(_Group):
    """The game's tools: Python, HTTP and MCP."""

    heading: ClassVar[str] = "The game's tools"
    tools: str | None = Field(default=None, description="Python tools: `package.module:attribute`, a list of Tools or a "
                              "factory called with the settings. Packages' `parley.tools` entry points are "
                              "loaded too.")
    tools_file: str | None = Field(default=None, description="Manifest (YAML or JSON) of HTTP tools and MCP servers; "
                                   "see docs/tools.md.")
    mcp_servers: str | None = Field(default=None, description="MCP servers (streamable HTTP), comma-separated URLs; "
                                    "added to the manifest's.")
    mcp_headers: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Headers for the servers of PARLEY_MCP_SERVERS, as JSON: "
        "`{\"<server URL>\": {\"Authorization\": \"Bearer ${MCP_TOKEN}\"}}`; `${VAR}` is read from the environment. "
        "Keeps a token out of the URL, which logs and metrics show (redacted).")
    tool_timeout: float = Field(default=30.0, description="Seconds a tool call may take unless its manifest entry says "
                                "otherwise; a slower call becomes an error result the model reads.")
    mcp_refresh_seconds: float = Field(default=60.0, description="Re-list an MCP server's tools this often even without "
                                       "a tools/list_changed notification, and retry a server that was down.")
    max_tool_iterations: int = Field(default=10, description="Most rounds of tool calls in one turn.")


class Memory(_Group):
    """What a conversation keeps: compaction, resets and the bounds of its state."""

    heading: ClassVar[str] = "The conversation's memory"
    compaction_max_tokens: int = Field(default=6000, description="Compact when the prompt is over this many tokens.")
    compaction_target_tokens: int | None = Field(default=None, description="Trim to this many tokens (default 70% of the max).")
    # NoDecode: a comma list, as a person writes it ("tools,summarize,budget"), not JSON.
    compaction: Annotated[list[CompactionStep] | None, NoDecode] = Field(
        default=None, description="The compactor chain, in order, as a comma list of: tools (compress old tool outputs), "
                          "summarize (rolling LLM summary), keep_last (keep the last PARLEY_COMPACTION_KEEP_LAST "
                          "exchanges), budget (drop the oldest exchanges over PARLEY_COMPACTION_MAX_TOKENS). "
                          "Each step runs when its own trigger fires. Unset: the same three steps all at once, only "
                          "when the history is over PARLEY_COMPACTION_HIGH_WATER or the prompt over the budget "
                          "(summarize only with PARLEY_COMPACTION_SUMMARIZE).")
    token_counter: Literal["auto", "tiktoken", "estimate", "usage"] = Field(
        default="auto", description="How prompts are counted for compaction: tiktoken (exact, offline; o200k_base for "
                            "gpt-4o/4.1/5 and o-series, cl100k_base for older), estimate (4 characters a token), "
                            "usage (the estimate calibrated by the prompt tokens the provider reports). auto: "
                            "tiktoken for OpenAI models, usage for the others.")
    compaction_summarize: bool = Field(default=True, description="Fold old exchanges into a rolling LLM summary (when "
                                       "PARLEY_COMPACTION is unset).")
    compaction_keep_last: int | None = Field(default=None, description="Exchanges kept verbatim when summarising, and "
                                             "by the keep_last step (default: 2 in the default chain, which compacts "
                                             "in large steps; 6 in a chain PARLEY_COMPACTION names).")
    compaction_high_water: int | None = Field(default=None, gt=0, description="The default chain compacts only when "
                                              "the history kept verbatim is over this many tokens (or the prompt over "
                                              "the budget), then in one step: fewer rewrites of the prompt, more of it "
                                              "reused by the providers' prompt caches. Default: 18% of the compaction "
                                              "budget (1,080 tokens of 6,000).")
    compress_tool_outputs_after: int = Field(default=3, description="Keep this many recent tool outputs whole; compress older.")
    facts_placement: Literal["changes_after_history", "after_history", "preamble"] = Field(
        default="changes_after_history", description="Where the game's keyed facts go in the prompt: "
        "changes_after_history (the facts as of the last compaction in the system prompt, those changed since after "
        "the history, each with its key and marked as replacing the earlier value: sent again only while changed), "
        "after_history (all of them after the history, with every request: a change costs the prompt cache only the "
        "facts' own tokens) or preamble (with the pinned items: a change makes the providers' caches miss the whole "
        "history after it).")
    idle_gap_seconds: float | None = Field(default=None, description="A player's message after this long without one "
                                           "starts a fresh conversation (game events are not the player's "
                                           "activity: those that came meanwhile are kept). Off when unset.")
    # NoDecode: without it the environment source decodes the value as JSON before the validator runs, so the comma
    # form a person writes ("start over, reset") failed as bad JSON.
    reset_phrases: Annotated[list[str], NoDecode] = Field(default_factory=list,
                                     description='Texts that start over, e.g. ["start over","new topic","reset"]. '
                                                 "Off when empty.")
    max_input_chars: int = Field(default=16_000, description="Longest accepted user text or event.")
    max_state_bytes: int = Field(default=1 << 20, description="Largest state blob; larger ones are trimmed or quarantined.")
    max_pinned: int = Field(default=50, ge=0, description="Most pinned items a conversation keeps once their exchanges are "
                                                 "compacted away, keyed facts included; beyond it the oldest go, "
                                                 "pinned items before facts (counted in "
                                                 "parley_pinned_dropped_total).")

    @field_validator("compaction", mode="before")
    @classmethod
    def _split_steps(cls, v: object) -> object:
        """``tools, summarize ,budget`` -> ``["tools", "summarize", "budget"]``; empty means the default chain.
        An unknown step name is refused by the ``Literal`` check, naming the allowed ones."""
        if not isinstance(v, str):
            return v
        return [p.lower() for p in _split(v)] or None  # type: ignore[attr-defined]

    @field_validator("reset_phrases", mode="before")
    @classmethod
    def _split_phrases(cls, v: object) -> object:
        """A JSON list (``["start over", "new topic"]``) or comma-separated texts (``start over, new topic``)."""
        if isinstance(v, str) and v.strip().startswith("["):
            return json.loads(v)  # a ValueError here is reported by pydantic as a validation error
        return _split(v)


class Store(_Group):
    """Bounds on what Redis keeps per conversation, and the worker's cache of states."""

    heading: ClassVar[str] = "What Redis keeps"
    max_inbox: int = Field(default=1000, description="Most pending inputs per conversation; more are refused.")
    state_cache_mb: int = Field(default=64, ge=0, description="Each worker process keeps the states it last wrote decoded, "
                                "so the next turn of the conversation on the same process neither fetches nor "
                                "decodes them: about this many MiB of memory, least recently used out (a short "
                                "conversation takes about 3 KB, a compacted one 15-60 KB). 0 turns it off.")
    dedupe_max_ids: int = Field(default=10_000, description="Message ids remembered per conversation for dedupe.")
    dedupe_seconds: float = Field(default=4 * 86400.0, description="How long message ids are remembered (WhatsApp retries "
                                                             "for about 36 hours).")
    delete_tombstone_seconds: float = Field(default=2 * 86400.0, ge=0, description="How long a deleted conversation's "
                                            "message ids are remembered, so WhatsApp's retries of its old webhooks "
                                            "(for about 36 hours) cannot bring it back; new ids start afresh. "
                                            "0 = no tombstone.")
    trace_max: int = Field(default=2000, description="Trace entries kept per conversation.")
    max_timers: int = Field(default=1000, ge=1, description="Most inputs one conversation may hold until they are due "
                            "(`at=`); more are refused.")
    idle_ttl_seconds: float | None = Field(default=None, description="Expire every key of a conversation idle this long. "
                                                             "Off when unset.")

    @property
    def dedupe_ms(self) -> int:
        return int(self.dedupe_seconds * 1000)

    @property
    def tombstone_ms(self) -> int:
        return int(self.delete_tombstone_seconds * 1000)

    @property
    def idle_ttl_ms(self) -> int:
        """0 when off."""
        return int(self.idle_ttl_seconds * 1000) if self.idle_ttl_seconds else 0

    @property
    def state_cache_bytes(self) -> int:
        return self.state_cache_mb << 20


class Drain(_Group):
    """How a worker holds a conversation and retries its inputs."""

    heading: ClassVar[str] = "The drain: leases, retries, fairness"
    lease_seconds: float = Field(default=10.0, description="How long a conversation (or its delivery) stays owned by a "
                                 "worker that stopped renewing it. A running turn renews it every third of this, "
                                 "so it bounds how soon a dead worker's conversations are taken over.")
    max_attempts: int = Field(default=5, description="Attempts at one input that end in a crash before it is dead-lettered "
                                             "(poison input).")
    max_model_retries: int = Field(default=30, description="Retries of one input while the model is unavailable (backoff up "
                                                   "to a minute) before it is dead-lettered.")
    max_bad_response_retries: int = Field(default=3, description="Retries of one input whose model answer could not be read "
                                          "(a malformed body) before it is dead-lettered, counted apart from its "
                                          "retries while the model is unavailable.")
    max_retry_delay: float = Field(default=60.0, description="Longest wait between retries of an input while the model is "
                                                     "unavailable.")
    max_turns: int = Field(default=100, ge=0, validation_alias="drain_max_turns", description="Inputs one drain applies "
                           "before it hands the conversation back to the queue (behind the other conversations' "
                           "wake-ups), so a flooding conversation or game engine cannot hold a worker slot while "
                           "quiet conversations wait. 0 = no bound.")
    max_seconds: float = Field(default=1.0, ge=0, validation_alias="drain_max_seconds", description="Seconds one drain "
                               "applies inputs before it hands the conversation back to the queue (checked after "
                               "each commit, so a long turn finishes first). 0 = no bound.")
    dead_letter_reply: str = Field(default="Sorry, something went wrong on my side and I couldn't answer that message. "
                                   "Please try again.", description="Apology sent when a player's message is "
                                   "dead-lettered (it stays replayable); empty = none.")
    sweep_interval: float = Field(default=5.0, description="How often the sweeper looks for stranded conversations (waiting "
                                  "inputs or replies whose worker's lease ran out), in seconds; it wakes those idle "
                                  "this long or more.")

    timer_poll_seconds: float = Field(default=0.2, gt=0, description="How often each worker process looks for "
                                      "timers that came due (inputs sent with `at=`): a timer fires this late at "
                                      "most, plus the time to fire those before it.")

    @property
    def lease_ms(self) -> int:
        return int(self.lease_seconds * 1000)

    @property
    def sweep_ms(self) -> int:
        return int(self.sweep_interval * 1000)


@dataclass(frozen=True, config=_GROUP)
class Burst:
    """A player's burst of messages answered by one turn (``PARLEY_BURST_*``, ``PARLEY_DOUBLE_TEXT*``); the drain's
    :mod:`worker.service.drain.burst` reads it as its policy. ``quiet_seconds`` 0 turns coalescing off."""

    heading: ClassVar[str] = "Players' bursts"
    quiet_seconds: float = Field(default=1.5, ge=0, validation_alias="burst_quiet_seconds", description="Chat messages of one "
                                 "conversation that arrive within this quiet period are answered by one turn that "
                                 "sees each of them, in order (the reply threads to the last). 0 = off: one turn and "
                                 "one reply per message.")
    max_wait_seconds: float = Field(default=8.0, ge=0, validation_alias="burst_max_wait_seconds", description="Longest a "
                                    "burst waits from its first message: a player who keeps typing still gets "
                                    "answers.")
    max_messages: int = Field(default=20, ge=1, validation_alias="burst_max_messages",
                              description="Most inputs one burst turn takes in.")
    double_text: Literal["queue", "merge"] = Field(default="queue", description="Chat messages that arrive while the model "
                                                   "answers: queue = answered in order by the next turn; merge = the "
                                                   "stale answer is not sent and the turn runs again with them.")
    double_text_max_merges: int = Field(default=2, ge=0, description="With merge: most re-runs of one turn; after that the "
                                        "answer goes out.")
    # Not a setting: the model reads pictures (and they can be fetched), so a bare photo can join a burst.
    reads_images: bool = Field(default=False, exclude=True)

    @property
    def quiet(self) -> float:
        return self.quiet_seconds

    @property
    def max_wait(self) -> float:
        return self.max_wait_seconds

    @property
    def merge(self) -> bool:
        return self.double_text == "merge"

    @property
    def max_merges(self) -> int:
        return self.double_text_max_merges

    @property
    def peek(self) -> int:
        """How many inputs after the head the drain needs to see to decide: enough to fill a burst."""
        return self.max_messages - 1 if self.quiet_seconds > 0 or self.merge else 0


class PhotoLimits(_Group):
    """Photos players send, fetched for a model that reads images."""

    heading: ClassVar[str] = "Photos"
    max_bytes: int = Field(default=5 * 1024 * 1024, gt=0, validation_alias="media_max_bytes", description="Largest image "
                           "fetched from the Cloud API for the model; larger ones are refused and answered with "
                           "unsupported_reply.")
    turn_max_bytes: int = Field(default=8 * 1024 * 1024, gt=0, validation_alias="media_turn_max_bytes", description="Bytes "
                                "of photos one turn may fetch and hold (a burst may carry many); the photos past it "
                                "are not fetched and the model reads that a photo came that could not be loaded.")
    # NoDecode: a comma list, as a person writes it, not JSON.
    hosts: Annotated[list[str], NoDecode] = Field(default=["lookaside.fbsbx.com"], min_length=1, validation_alias="media_hosts",
                                                  description="Hosts a photo is downloaded from (the access token "
                                                  "goes with the download), comma-separated; `*.example.com` for "
                                                  "subdomains. Over https only; any other host is refused.")
    allow_http: bool = Field(default=False, validation_alias="media_allow_http", description="Tests only: let photo downloads "
                             "use plain http to a loopback address (a local stand-in for Meta). Never to any other "
                             "address.")

    @field_validator("hosts", mode="before")
    @classmethod
    def _split_hosts(cls, v: object) -> object:
        """``lookaside.fbsbx.com, *.example.com`` -> a list of host names."""
        return _split(v)


class Webhook(_Group):
    """What the webhook ingress accepts from WhatsApp, and the short answers it gives at once."""

    heading: ClassVar[str] = "The webhook ingress"
    location_as: Literal["event", "turn"] = Field(default="turn", description="A shared location pin becomes a chat "
                                                  "turn (answered: the player may be answering a location request), "
                                                  "or with `event` is added without a reply (the model knows where the "
                                                  "player is on its next turn). Either way the model reads the pin as "
                                                  "the player's words, never as a game event.")
    unsupported_reply: str = Field(default="Sorry, I can only read text messages, locations and photos.",
                                   description="Short answer to a voice note, video, document, sticker, contact, "
                                               "unsupported or unknown message (and a photo the model cannot read "
                                               "that has no caption).")
    refused_reply: str = Field(default="Sorry, I couldn't read that message: it is too long. Please send a shorter one.",
                               description="Short answer to a player's message Parley must refuse as it is (text "
                                           "over PARLEY_MAX_INPUT_CHARS, a location whose name is as long, a "
                                           "character that cannot be stored); empty = none (the message is dropped, "
                                           "counted).")
    max_age_seconds: float = Field(default=3 * 86400.0, ge=0, validation_alias="webhook_max_age_seconds", description="The "
                                   "webhook ingress refuses (200, counted as too_old, not applied) a message or status "
                                   "whose timestamp is older than this, so a captured signed webhook cannot be "
                                   "replayed once its message id left the dedupe memory. Above Meta's retry period "
                                   "(about 36 hours), at most PARLEY_DEDUPE_SECONDS; 0 = off.")
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0, validation_alias="webhook_max_body_bytes", description="Largest "
                                "webhook body the ingress reads (413 past it, checked while reading).")


class Producers(_Group):
    """The producers' API over HTTP and the inlet (docs/producers.md)."""

    heading: ClassVar[str] = "The producers' API over HTTP and the inlet"
    api_tokens: SecretStr | None = Field(default=None, description="Bearer tokens of the producers' HTTP API under /v1/ "
                                         "on the webhook process, comma-separated: `token` (scope producer: queue "
                                         "inputs, read a summary) or `operator:token` (also delete). Several tokens "
                                         "let producers rotate them. Unset or empty: the API is off (404).")
    inlet_stream: str = Field(default="parley:inlet", min_length=1, description="Redis stream `parley inlet` consumes: "
                              "each entry one field `envelope` holding the JSON of a queue message (docs/producers.md).")
    inlet_group: str = Field(default="parley-inlet", min_length=1, description="The inlet's consumer group on "
                             "PARLEY_INLET_STREAM (every inlet process of a deployment joins it).")
    inlet_queue: str = Field(default="parley.inlet", min_length=1, description="Durable RabbitMQ queue the inlet also "
                             "consumes when the broker is RabbitMQ.")
    inlet_batch: int = Field(default=100, ge=1, description="Stream entries one inlet reads at a time.")
    inlet_claim_idle_seconds: float = Field(default=30.0, gt=0, description="An entry another inlet read and left "
                                            "unacknowledged this long (it crashed, or its mailbox was full) is "
                                            "claimed and tried again.")


class Delivery(_Group):
    """How replies leave: where to, how often a send is retried, what a crash in the middle of one means."""

    heading: ClassVar[str] = "Delivery"
    typing_indicator: bool = Field(default=True, description="Mark a player's messages read and show WhatsApp's typing "
                                   "indicator while a burst waits and the model thinks (refreshed for slow turns).")
    max_attempts: int = Field(default=8, validation_alias="delivery_max_attempts", description="Failed sends of one reply "
                              "(throttling, 5xx) before it is dead-lettered; counted in Redis with the reply, "
                              "whichever worker sends it.")
    part_interval: float = Field(default=0.0, validation_alias="delivery_part_interval",
                                 description="Seconds between the parts of one split reply.")
    status_webhooks: Literal["auto"] | bool = Field(
        default="auto", description="Whether a webhook ingress records WhatsApp's status webhooks (Meta's webhook subscribes "
                            "to `messages` and the `webhook` process runs). Then a reply part a crashed worker left "
                            "in flight is resent only when no status shows it reached WhatsApp within "
                            "PARLEY_RESEND_GRACE_SECONDS; false: it is resent at once (it may reach the player "
                            "twice). auto: true while an ingress says so in Redis (it does when it starts and as "
                            "statuses come; the word holds a day).")
    resend_grace_seconds: float = Field(default=10.0, ge=0, description="With PARLEY_STATUS_WEBHOOKS: how long a reply part "
                                        "found in flight after a crash waits for a status webhook before it is "
                                        "resent (no worker waits meanwhile: the delivery checks again later).")
    deliver_inline: bool = Field(default=True, description="Deliver a drain's last reply in the drain task itself (one "
                                 "Celery hop fewer per turn); false hands every reply to a parley.deliver task.")
    reply_webhook_url: str | None = Field(default=None, description="Deliver replies as JSON POSTs here instead of WhatsApp.")

    @property
    def statuses(self) -> bool | None:
        """Whether status webhooks are recorded; None: whenever an ingress says so in Redis (``auto``)."""
        return None if self.status_webhooks == "auto" else self.status_webhooks

    @property
    def resend_grace_ms(self) -> int:
        return int(self.resend_grace_seconds * 1000)


class WhatsApp(_Group):
    """The WhatsApp Cloud API: the sender number, its window, its template and its pace."""

    heading: ClassVar[str] = "WhatsApp"
    api_base_url: str = Field(default="https://graph.facebook.com/v21.0", validation_alias="whatsapp_api_base_url",
                              json_schema_extra=_STANDARD, description="WhatsApp Cloud API base URL.")
    phone_number_id: str | None = Field(default=None, validation_alias="whatsapp_phone_number_id", json_schema_extra=_STANDARD,
                                        description="Sender phone number id. WhatsApp is off when unset.")
    access_token: SecretStr | None = Field(default=None, validation_alias="whatsapp_access_token", json_schema_extra=_STANDARD,
                                           description="Cloud API access token.")
    app_secret: SecretStr | None = Field(default=None, validation_alias="whatsapp_app_secret", json_schema_extra=_STANDARD,
                                         description="App secret for X-Hub-Signature-256 on webhooks.")
    verify_token: SecretStr | None = Field(default=None, validation_alias="whatsapp_verify_token", json_schema_extra=_STANDARD,
                                           description="Token for the webhook verification handshake.")
    window_hours: float = Field(default=24.0, ge=0, validation_alias="whatsapp_window_hours", description="WhatsApp's "
                                "customer-service window: free-form replies go only this long after the player's last "
                                "message; later ones go as PARLEY_WHATSAPP_TEMPLATE or are dead-lettered "
                                "(outside_window) before any API call. 0 = not checked before sending (a 131047 "
                                "answer still is).")
    template: str | None = Field(default=None, validation_alias="whatsapp_template", description="Approved template sent "
                                 "instead of a reply outside the window (the rest of the reply, once). Unset: such "
                                 "replies are dead-lettered.")
    template_language: str = Field(default="en_US", validation_alias="whatsapp_template_language",
                                   description="Language code the template was approved in.")
    template_parameter: Literal["reply", "fixed", "none"] = Field(
        default="reply", validation_alias="whatsapp_template_parameter", description="How the template's one body parameter "
        "is filled: reply (the reply's text on one line, cut to 1,024 characters), fixed "
        "(PARLEY_WHATSAPP_TEMPLATE_TEXT), none (no parameter).")
    template_text: str = Field(default="", validation_alias="whatsapp_template_text", description="The parameter's text with "
                               "PARLEY_WHATSAPP_TEMPLATE_PARAMETER=fixed.")
    template_header_image: str | None = Field(default=None, pattern=r"^https://\S+$", validation_alias="whatsapp_template_header_image",
                                              description="Link (https) of the image in the template's header, for a "
                                              "template approved with an image header. Unset: no header.")
    template_more_parameters: list[str] = Field(default_factory=list, validation_alias="whatsapp_template_more_parameters",
                                                description='Fixed texts of the body parameters after the first, as a '
                                                'JSON list, e.g. ["Harrogate", "3 clues left"]. Empty: none.')
    # NoDecode: a comma list, as a person writes it, not JSON.
    template_quick_replies: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias="whatsapp_template_quick_replies", description="Payloads of the "
        "template's quick-reply buttons, in order, comma-separated (handed back when the player taps one). Empty: the "
        "template has no quick-reply buttons.")
    reply_tools: bool = Field(default=True, validation_alias="whatsapp_reply_tools", description="Offer the model the "
                              "reply tools (send_image, send_location, request_location, send_buttons, send_list, "
                              "react) on the WhatsApp channel.")
    messages_per_second: float = Field(default=80.0, ge=0, validation_alias="whatsapp_messages_per_second", description="Messages "
                                       "a second the sender number may send, shared by every worker through Redis "
                                       "(Meta's default throughput; higher tiers allow up to 1,000, and inbound "
                                       "messages count towards it too). 0 = off.")
    burst: int = Field(default=10, ge=1, validation_alias="whatsapp_burst", description="Messages the sender number may send "
                       "at once after a quiet spell, within its rate.")
    recipient_per_minute: float = Field(default=10.0, ge=0, validation_alias="whatsapp_recipient_per_minute", description="Messages "
                                        "a minute to one player (Meta's pair rate is about one every 6 seconds; 131056 "
                                        "above it), shared by every worker and conversation writing to them. 0 = off.")
    recipient_burst: int = Field(default=20, ge=1, validation_alias="whatsapp_recipient_burst", description="Messages one player "
                                 "may get at once after a quiet spell (Meta allows bursts of up to about 45), within "
                                 "the pair rate.")
    pace_max_sleep: float = Field(default=2.0, ge=0, validation_alias="whatsapp_pace_max_sleep", description="Longest wait for "
                                  "the pace a worker sleeps through; a longer one hands the reply to a later delivery "
                                  "task, holding no worker meanwhile.")
    numbers_file: str | None = Field(default=None, validation_alias="whatsapp_numbers_file", description="YAML or JSON "
                                     "file of several business numbers (`numbers: [{phone_number_id, access_token, "
                                     "system_prompt, tools_file}]`, `${VAR}` read from the environment): replies go "
                                     "from the number the player wrote to, paced per number. See docs/whatsapp.md.")

    @property
    def window_seconds(self) -> float:
        return self.window_hours * 3600

    @property
    def recipient_per_second(self) -> float:
        return self.recipient_per_minute / 60

    @field_validator("template_quick_replies", mode="before")
    @classmethod
    def _split_quick_replies(cls, v: object) -> object:
        return _split(v)

    @model_validator(mode="after")
    def _template_text(self) -> WhatsApp:
        if self.template and self.template_parameter == "fixed" and not self.template_text:
            raise ValueError("PARLEY_WHATSAPP_TEMPLATE_PARAMETER=fixed needs PARLEY_WHATSAPP_TEMPLATE_TEXT")
        return self


class Record(_Group):
    """The durable record in PostgreSQL, and the exporter that fills it."""

    heading: ClassVar[str] = "The durable record (PostgreSQL)"
    database_url: str | None = Field(default=None, json_schema_extra=_STANDARD,
                                     description="PostgreSQL for the durable record (postgresql://user@host/db). "
                                     "Set: every commit, delivery, status and delete is also appended to a capped "
                                     "Redis stream that `parley exporter` copies here. Unset: no record.")
    stream_max: int = Field(default=100_000, ge=1, validation_alias="record_stream_max", description="Entries a record stream "
                            "keeps for the exporter; past it the oldest are dropped and counted "
                            "(parley_record_dropped_total), so an exporter that is down never makes Redis grow "
                            "without bound.")
    exporter_batch: int = Field(default=500, ge=1, description="Record entries the exporter writes per database "
                                "transaction.")
    exporter_idle_seconds: float = Field(default=0.5, gt=0, description="How long the exporter sleeps when the streams are "
                                         "empty.")
    export_every_seconds: float = Field(default=0.0, ge=0, description="Run the exporter as a Celery beat entry this often "
                                        "(`celery -A tasks beat`, or a worker with -B) instead of the Procfile's "
                                        "exporter process. 0 = no beat entry.")

    @property
    def enabled(self) -> bool:
        return bool(self.database_url)

    @property
    def stream_limit(self) -> int:
        """Entries a record stream keeps; 0 when there is no record (nothing is appended)."""
        return self.stream_max if self.database_url else 0


class Budget(_Group):
    """A player's daily token budget."""

    heading: ClassVar[str] = "The daily token budget"
    daily_token_budget: int = Field(default=0, ge=0, description="Tokens (prompt + completion) one conversation (a "
                                    "player) may use per UTC day, its turns' and its compactions' summaries; over it the player gets PARLEY_TOKEN_BUDGET_REPLY "
                                    "and the model is not called. Counted in Redis, so it works without a "
                                    "database. 0 = no budget.")
    token_budget_reply: str = Field(default="We've chatted a lot today! Let's pick this up again tomorrow.",
                                    description="The answer a player over the daily token budget gets.")


class GameContext(_Group):
    """The game's live context, added to each turn's system prompt (docs/game.md)."""

    heading: ClassVar[str] = "Live game context"
    source: str | None = Field(default=None, validation_alias="context", description="A Python callable, "
                               "`package.module:attribute`, called at the start of every turn with the conversation "
                               "id (and the input id, when it takes a second argument); the text it returns (or None) "
                               "is added to that turn's system prompt. The tool manifest's `context` entry is the HTTP "
                               "way; set one of the two.")
    timeout: float = Field(default=2.0, gt=0, validation_alias="context_timeout", description="Seconds a context "
                           "fetch may take (the callable's, and the manifest's when its entry names none); must be "
                           "under PARLEY_LEASE_SECONDS. A slower fetch counts as failed (see PARLEY_CONTEXT_MAX_AGE_SECONDS).")
    max_age_seconds: float = Field(default=300.0, ge=0, validation_alias="context_max_age_seconds", description="A turn "
                                   "whose fetch failed uses the conversation's last good context when it is at most "
                                   "this old (kept in Redis, never in the state), else goes on without. 0 = never.")
    max_chars: int = Field(default=4000, gt=0, validation_alias="context_max_chars", description="Longest context "
                           "text; a longer one counts as a failed fetch (it is not cut: half a game state misleads).")
    placement: Literal["system", "after_history"] = Field(
        default="system", validation_alias="context_placement", description="Where the context goes: system (after "
        "the system prompt) or after_history (after the conversation, with the keyed facts). A context that changes "
        "every turn in the system prompt changes the start of every request, so the providers' prompt caches reuse "
        "none of the history; after the history they reuse all of it (docs/known-limits.md).")


class Observability(_Group):
    """Logs and metrics."""

    heading: ClassVar[str] = "Logs and metrics"
    log_json: bool = Field(default=False, description="Log JSON lines instead of text.")
    log_level: str = Field(default="INFO", description="Log level.")
    metrics_port: int | None = Field(default=None, description="Serve Prometheus metrics on this port in each worker.")
    backlog_sample: int = Field(default=1000, ge=1, description="Conversations probed per metrics scrape for the autoscaling "
                                "gauges (parley_queue_waiting_conversations, parley_queue_oldest_input_age_seconds): "
                                "bounds a scrape's cost; above it the count is scaled from the sample.")


GROUPS: dict[str, type[Any]] = {
    "redis": Redis, "broker": Broker, "llm": Llm, "tooling": Tooling, "memory": Memory, "store": Store,
    "drain": Drain, "burst": Burst, "media": PhotoLimits, "webhook": Webhook, "producers": Producers,
    "delivery": Delivery, "whatsapp": WhatsApp,
    "record": Record, "budget": Budget, "observability": Observability,
    "game_context": GameContext,
}


def knobs(group: type[Any]) -> dict[str, tuple[str, FieldInfo]]:
    """A group's settings by flat name (``burst_quiet_seconds``): its field's name and info."""
    out = {}
    for name, info in group.__pydantic_fields__.items():
        if not info.exclude:
            alias = info.validation_alias
            out[alias if isinstance(alias, str) else name] = (name, info)
    return out


def env_name(flat: str, info: FieldInfo) -> str:
    """The variable a setting is documented under: its standard name, or PARLEY_ + its flat name."""
    return flat.upper() if info.json_schema_extra == _STANDARD else f"PARLEY_{flat.upper()}"


# Flat name -> (group, field): where an environment variable or a flat keyword argument goes.
_ROUTE: dict[str, tuple[str, str]] = {flat: (group, name) for group, cls in GROUPS.items()
                                      for flat, (name, _) in knobs(cls).items()}


_ROUTE_INFO: dict[str, FieldInfo] = {flat: GROUPS[g].__pydantic_fields__[n] for flat, (g, n) in _ROUTE.items()}


def _flat_field(flat: str, info: FieldInfo) -> FieldInfo:
    """The field the environment sources look ``flat`` up by: the group's (so JSON and NoDecode are as there), under
    PARLEY_ + its flat name, or for a standard name that name with and without PARLEY_."""
    std = env_name(flat, info)
    field = copy(info)
    field.validation_alias = AliasChoices(std, f"PARLEY_{std}") if not std.startswith("PARLEY_") else None
    return field


class _Flat:
    """The settings by flat name, for the environment sources, which read only a settings class's ``model_config``
    and ``model_fields``: a catalogue, never a model (building one of 106 fields is a start-up cost every process
    would pay for nothing)."""

    # populate_by_name: a value found under a field's own name is taken as it is (not looked up a second time).
    model_config = SettingsConfigDict(env_prefix="PARLEY_", env_file=".env", extra="ignore", populate_by_name=True)
    model_fields = {flat: _flat_field(flat, info) for flat, info in _ROUTE_INFO.items()}


_FLAT = cast(type[BaseSettings], _Flat)


def _grouped(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"lease_seconds": 5, "burst": Burst(...)}`` -> ``{"drain": {"lease_seconds": 5}, "burst": Burst(...)}``."""
    out = {key: value for key, value in flat.items() if key.lower() not in _ROUTE}  # groups, _env_file, unknowns
    for key, value in flat.items():
        if (route := _ROUTE.get(key.lower())) is None:
            continue
        group, name = route
        given = out.get(group)
        if given is None:
            out[group] = {name: value}
        elif isinstance(given, dict):
            out[group] = {**given, name: value}
        else:  # a group object and one of its settings by flat name: the flat one wins, as in a dict
            out[group] = {**{f: getattr(given, f) for f in type(given).__pydantic_fields__}, name: value}
    return out


# Any key an environment source hands back (a flat name, a standard name with or without PARLEY_) -> the flat name.
_FLAT_NAME = {a.lower(): flat for flat, info in _ROUTE_INFO.items()
              for a in (flat, env_name(flat, info), f"PARLEY_{env_name(flat, info)}")}


class _Regrouped(PydanticBaseSettingsSource):
    """An environment source over the flat names, its values handed on by group."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self.inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ reads the inner source whole

    def __call__(self) -> dict[str, Any]:
        return _grouped({_FLAT_NAME.get(k.lower(), k): v for k, v in self.inner().items()})




_VARIABLE: dict[tuple[str, str], str] = {(g, n): env_name(flat, _ROUTE_INFO[flat]) for flat, (g, n) in _ROUTE.items()}


def _by_variable(exc: ValidationError) -> ValidationError:
    """``exc`` with each error located at the variable (``PARLEY_BURST_MAX_MESSAGES``), not the group's field."""
    errors: list[InitErrorDetails] = []
    for e in exc.errors():
        loc = e["loc"]
        variable = _VARIABLE.get((str(loc[0]), str(loc[1]))) if len(loc) >= 2 else None
        errors.append(InitErrorDetails(type=e["type"], loc=(variable, *loc[2:]) if variable else loc,  # type: ignore[typeddict-item]
                                       input=e["input"], ctx=e.get("ctx", {})))
    return ValidationError.from_exception_data(exc.title, errors)


class Settings(BaseSettings):
    """Parley's configuration: one group per concern. Field descriptions are the documentation
    (docs/configuration.md)."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_", env_file=".env", extra="ignore")

    redis: Redis = Field(default_factory=lambda: Redis())
    broker: Broker = Field(default_factory=lambda: Broker())
    llm: Llm = Field(default_factory=lambda: Llm())
    tooling: Tooling = Field(default_factory=lambda: Tooling())
    memory: Memory = Field(default_factory=lambda: Memory())
    store: Store = Field(default_factory=lambda: Store())
    drain: Drain = Field(default_factory=lambda: Drain())
    burst: Burst = Field(default_factory=lambda: Burst())
    media: PhotoLimits = Field(default_factory=lambda: PhotoLimits())
    webhook: Webhook = Field(default_factory=lambda: Webhook())
    producers: Producers = Field(default_factory=lambda: Producers())
    delivery: Delivery = Field(default_factory=lambda: Delivery())
    whatsapp: WhatsApp = Field(default_factory=lambda: WhatsApp())
    record: Record = Field(default_factory=lambda: Record())
    budget: Budget = Field(default_factory=lambda: Budget())
    observability: Observability = Field(default_factory=lambda: Observability())
    game_context: GameContext = Field(default_factory=lambda: GameContext())

    def __init__(self, **values: Any) -> None:
        """Takes a group (``burst=Burst(...)``) or a setting by its flat name (``burst_quiet_seconds=2``), as the
        environment names it without PARLEY_; ``_env_file=None`` reads no ``.env``."""
        # An empty group is validated by the settings' own validator; a default_factory would build the group's.
        try:
            super().__init__(**{**{group: {} for group in GROUPS}, **_grouped(values)})
        except ValidationError as exc:
            raise _by_variable(exc) from None

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        assert isinstance(dotenv_settings, DotEnvSettingsSource)
        env = EnvSettingsSource(_FLAT)
        dotenv = DotEnvSettingsSource(_FLAT, env_file=dotenv_settings.env_file,
                                      env_file_encoding=dotenv_settings.env_file_encoding)
        return init_settings, _Regrouped(settings_cls, env), _Regrouped(settings_cls, dotenv)

    @model_validator(mode="after")
    def _webhook_age(self) -> Settings:
        # Past the dedupe memory a replayed message id is new again: only the age check would still refuse it.
        if self.webhook.max_age_seconds > self.store.dedupe_seconds:
            raise ValueError(f"PARLEY_WEBHOOK_MAX_AGE_SECONDS ({self.webhook.max_age_seconds:g}) must not exceed "
                             f"PARLEY_DEDUPE_SECONDS ({self.store.dedupe_seconds:g}): a webhook replayed in between "
                             f"would be applied again")
        return self

    if not TYPE_CHECKING:  # hidden from mypy, so Parley's own code must use the groups (a typo stays an error)
        def __getattr__(self, name: str) -> Any:
            """``settings.llm_model`` as before the groups: a deployment's tool factory (``PARLEY_TOOLS``) may read
            a setting by its flat name; it gets the group's value and a DeprecationWarning naming the new path."""
            route = _ROUTE.get(name)
            if route is None:
                return super().__getattr__(name)
            group, field = route
            warnings.warn(f"settings.{name} is settings.{group}.{field} now", DeprecationWarning, stacklevel=2)
            return getattr(getattr(self, group), field)

    def effective_broker_url(self) -> str:
        return self.broker.url or self.redis.effective_url()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once."""
    return Settings()
