"""The turn's model and what it reads: the provider, the game's tools, the conversation's memory, the daily
token budget and the game's live context."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from worker.errors import ConfigurationError
from worker.settings.group import STANDARD, Group, split_commas

CompactionStep = Literal["tools", "summarize", "keep_last", "budget"]


class Llm(Group):
    """The model: which provider, how it is called, and how long it may answer."""

    heading: ClassVar[str] = "The model"
    provider: Literal["auto", "openai", "anthropic", "local"] = Field(
        default="auto", validation_alias="llm_provider", description="openai | anthropic | local. auto: openai if "
        "OPENAI_API_KEY is set, else anthropic if ANTHROPIC_API_KEY is set, else the embedded local model.")
    model: str | None = Field(default=None, validation_alias="llm_model",
                              description="Model name. Default: gpt-4o-mini, claude-haiku-4-5, or SmolLM2-135M.")
    openai_api_key: SecretStr | None = Field(default=None, json_schema_extra=STANDARD,
                                             description="API key for OpenAI or an OpenAI-compatible server.")
    openai_base_url: str | None = Field(default=None, json_schema_extra=STANDARD, description="Base URL of an "
                                        "OpenAI-compatible server (vLLM, Ollama, llama.cpp).")
    anthropic_api_key: SecretStr | None = Field(default=None, json_schema_extra=STANDARD, description="API key for Anthropic.")
    anthropic_base_url: str | None = Field(default=None, json_schema_extra=STANDARD,
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
    system_prompt_file: str | None = Field(default=None, description="A UTF-8 text file holding the default system "
                                           "prompt, read once at start; it takes the place of PARLEY_SYSTEM_PROMPT "
                                           "(a game's prompt runs to many lines, which an environment variable "
                                           "holds badly).")

    def prompt(self) -> str:
        """The default system prompt: the file's text when PARLEY_SYSTEM_PROMPT_FILE is set, else
        PARLEY_SYSTEM_PROMPT. Raises ConfigurationError when the file cannot be read or holds nothing."""
        if not self.system_prompt_file:
            return self.system_prompt
        try:
            text = Path(self.system_prompt_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"PARLEY_SYSTEM_PROMPT_FILE: cannot read {self.system_prompt_file}: {exc}") from None
        if not text:
            raise ConfigurationError(f"PARLEY_SYSTEM_PROMPT_FILE: {self.system_prompt_file} is empty")
        return text

    def effective_provider(self) -> str:
        if self.provider != "auto":
            return self.provider
        if self.openai_api_key is not None or self.openai_base_url:
            return "openai"
        if self.anthropic_api_key is not None:
            return "anthropic"
        return "local"


class Tooling(Group):
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
    max_reply_parts: int = Field(default=10, ge=1, description="Most parts one reply holds (each a WhatsApp message of "
                                 "its own), its final text included, counted before a long text is split: past it a "
                                 "tool call that adds parts (a reply tool, a game tool's `reply_parts`) is an error "
                                 "result the model reads, and its parts are not sent.")


class Memory(Group):
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
    recall: Literal["tool", "auto", "both", "off"] | None = Field(
        default=None, description="How the model reads what left the conversation's history (its archive): tool (the "
        "built-in tool search_conversation), auto (the turn's input is searched and what matches is quoted after the "
        "history as past conversation), both, or off (no archive written). Unset: auto with the embedded local "
        "model, tool with any other provider.")
    recall_max_tokens: int = Field(default=800, ge=1, description="Most tokens one search of the archive answers "
                                   "(the tool's results, or the block auto recall quotes): a few matches with the "
                                   "messages around each, small beside the compaction budget.")
    max_state_bytes: int = Field(default=1 << 20, description="Largest state blob; larger ones are trimmed or quarantined.")
    state_format: int = Field(default=5, ge=5, le=6, description="The state format workers write: 5 while any worker "
                              "of the release before this one may still read the states (it sets a state of format 6 "
                              "aside), then 6 (each message's time: WhatsApp's for a player's message, the write's for "
                              "the rest); every worker of this release reads both. A new deployment sets 6 at once "
                              "(docs/operations.md, Upgrading).")
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
        return [p.lower() for p in split_commas(v)] or None  # type: ignore[attr-defined]

    @field_validator("reset_phrases", mode="before")
    @classmethod
    def _split_phrases(cls, v: object) -> object:
        """A JSON list (``["start over", "new topic"]``) or comma-separated texts (``start over, new topic``)."""
        if isinstance(v, str) and v.strip().startswith("["):
            return json.loads(v)  # a ValueError here is reported by pydantic as a validation error
        return split_commas(v)

class Budget(Group):
    """A player's daily token budget."""

    heading: ClassVar[str] = "The daily token budget"
    daily_token_budget: int = Field(default=0, ge=0, description="Tokens (prompt + completion) one conversation (a "
                                    "player) may use per UTC day, its turns' and its compactions' summaries; over it the player gets PARLEY_TOKEN_BUDGET_REPLY "
                                    "and the model is not called. Counted in Redis, so it works without a "
                                    "database. 0 = no budget.")
    token_budget_reply: str = Field(default="We've chatted a lot today! Let's pick this up again tomorrow.",
                                    description="The answer a player over the daily token budget gets.")


class GameContext(Group):
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
