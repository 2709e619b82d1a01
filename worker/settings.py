"""Every setting in one place, read from the environment (and a ``.env`` file when present).

Standard names where the ecosystem has them (``REDIS_URL``, ``OPENAI_API_KEY``, ``WHATSAPP_ACCESS_TOKEN``,
...); everything else under ``PARLEY_``. ``parley config`` prints the table docs/configuration.md is generated from.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CompactionStep = Literal["tools", "summarize", "keep_last", "budget"]


def _std(name: str) -> AliasChoices:
    return AliasChoices(name, f"PARLEY_{name}")


class Settings(BaseSettings):
    """Parley's configuration. Field descriptions are the documentation (docs/configuration.md)."""

    model_config = SettingsConfigDict(env_prefix="PARLEY_", env_file=".env", extra="ignore", populate_by_name=True)

    # --- Redis and Celery ---
    redis_url: str | None = Field(None, validation_alias=_std("REDIS_URL"),
                                  description="Redis for conversation state, mailboxes and outboxes. Unset: "
                                              "`parley demo` starts an embedded Redis; workers use redis://127.0.0.1:6379/0.")
    broker_url: str | None = Field(None, description="Celery broker: Redis (standalone or Sentinel) or RabbitMQ "
                                  "(amqp://...: a quorum queue, publisher confirms). Default: REDIS_URL.")
    redis_wait_replicas: int = Field(0, ge=0, description="Replicas that must acknowledge each accepted input, "
                                     "each commit and each delivery claim and sent mark before it counts as done "
                                     "(Redis WAIT). Set 1 with Sentinel, so a failover cannot lose what a player was "
                                     "already answered; 0 = do not wait.")
    redis_wait_timeout: float = Field(1.0, gt=0, description="Seconds a write waits for PARLEY_REDIS_WAIT_REPLICAS; "
                                      "past it the write counts as an unknown outcome (the caller retries; "
                                      "parley_redis_wait_short_total).")
    broker_sentinel_master: str | None = Field(None, description="The master's name when PARLEY_BROKER_URL is a "
                                               "redis+sentinel:// URL naming another (default: the URL's).")
    key_prefix: str = Field("parley", description="Prefix of every Redis key Parley writes.")
    redis_cluster: bool = Field(False, description="Treat REDIS_URL as a Redis Cluster for conversation state.")
    redis_max_connections: int = Field(200, description="Connections a process keeps to Redis for state; threads "
                                       "beyond that wait for a free one (redis-py's own default fails at 100).")

    # --- the model ---
    llm_provider: Literal["auto", "openai", "anthropic", "local"] = Field(
        "auto", description="openai | anthropic | local. auto: openai if OPENAI_API_KEY is set, else anthropic if "
                            "ANTHROPIC_API_KEY is set, else the embedded local model.")
    llm_model: str | None = Field(None, description="Model name. Default: gpt-4o-mini, claude-haiku-4-5, or SmolLM2-135M.")
    openai_api_key: SecretStr | None = Field(None, validation_alias=_std("OPENAI_API_KEY"),
                                             description="API key for OpenAI or an OpenAI-compatible server.")
    openai_base_url: str | None = Field(None, validation_alias=_std("OPENAI_BASE_URL"),
                                        description="Base URL of an OpenAI-compatible server (vLLM, Ollama, llama.cpp).")
    anthropic_api_key: SecretStr | None = Field(None, validation_alias=_std("ANTHROPIC_API_KEY"),
                                                description="API key for Anthropic.")
    anthropic_base_url: str | None = Field(None, validation_alias=_std("ANTHROPIC_BASE_URL"),
                                           description="Base URL for the Anthropic Messages API.")
    llm_timeout: float = Field(60.0, description="Seconds to wait for a model answer (read timeout).")
    llm_connect_timeout: float = Field(5.0, description="Seconds to wait for a connection to the model.")
    llm_max_retries: int = Field(2, description="Retries of one model call on 429/5xx before the turn is retried later.")
    llm_breaker_threshold: int = Field(5, description="Consecutive provider failures that open the circuit breaker.")
    llm_breaker_reset: float = Field(30.0, description="Seconds the breaker stays open before one probe call.")
    max_retry_delay: float = Field(60.0, description="Longest wait between retries of an input while the model is "
                                                     "unavailable.")
    llm_max_tokens: int = Field(1024, description="Most tokens the model may write in one answer (sent as "
                                "max_completion_tokens to OpenAI o-series and gpt-5 models, which refuse max_tokens).")
    context_window: int | None = Field(None, gt=0, description="Tokens the model reads and writes in one call. "
                                       "Default by model family (gpt-4o 128k, gpt-4.1 1M, gpt-5 400k, o-series and "
                                       "Claude 200k, the local model 4k, others 8k). The compaction budget is kept "
                                       "below it minus the answer's room (max tokens plus the thinking budget).")
    anthropic_prompt_cache: bool = Field(True, description="Mark the stable prefix (system prompt with summary and "
                                         "pinned items, older history) with Anthropic cache_control breakpoints, so "
                                         "repeated prefixes are read from the cache.")
    anthropic_thinking_budget: int = Field(0, ge=0, description="Tokens Claude may think before answering (extended "
                                           "thinking, at least 1024); 0 = off. Added to the answer's max tokens.")
    system_prompt: str = Field("You are a friendly, concise game assistant chatting over WhatsApp.",
                               description="Default system prompt; a turn may carry its own.")
    max_tool_iterations: int = Field(10, description="Most rounds of tool calls in one turn.")

    # --- the game's tools ---
    tools: str | None = Field(None, description="Python tools: `package.module:attribute`, a list of Tools or a "
                              "factory called with the settings. Packages' `parley.tools` entry points are "
                              "loaded too.")
    tools_file: str | None = Field(None, description="Manifest (YAML or JSON) of HTTP tools and MCP servers; "
                                   "see docs/tools.md.")
    mcp_servers: str | None = Field(None, description="MCP servers (streamable HTTP), comma-separated URLs; "
                                    "added to the manifest's.")
    mcp_headers: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Headers for the servers of PARLEY_MCP_SERVERS, as JSON: "
        "`{\"<server URL>\": {\"Authorization\": \"Bearer ${MCP_TOKEN}\"}}`; `${VAR}` is read from the environment. "
        "Keeps a token out of the URL, which logs and metrics show (redacted).")
    tool_timeout: float = Field(30.0, description="Seconds a tool call may take unless its manifest entry says "
                                "otherwise; a slower call becomes an error result the model reads.")
    mcp_refresh_seconds: float = Field(60.0, description="Re-list an MCP server's tools this often even without "
                                       "a tools/list_changed notification, and retry a server that was down.")

    # --- the conversation ---
    compaction_max_tokens: int = Field(6000, description="Compact when the prompt is over this many tokens.")
    compaction_target_tokens: int | None = Field(None, description="Trim to this many tokens (default 70% of the max).")
    # NoDecode: a comma list, as a person writes it ("tools,summarize,budget"), not JSON.
    compaction: Annotated[list[CompactionStep] | None, NoDecode] = Field(
        None, description="The compactor chain, in order, as a comma list of: tools (compress old tool outputs), "
                          "summarize (rolling LLM summary), keep_last (keep the last PARLEY_COMPACTION_KEEP_LAST "
                          "exchanges), budget (drop the oldest exchanges over PARLEY_COMPACTION_MAX_TOKENS). "
                          "Unset: tools,summarize,budget (summarize only with PARLEY_COMPACTION_SUMMARIZE).")
    token_counter: Literal["auto", "tiktoken", "estimate", "usage"] = Field(
        "auto", description="How prompts are counted for compaction: tiktoken (exact, offline; o200k_base for "
                            "gpt-4o/4.1/5 and o-series, cl100k_base for older), estimate (4 characters a token), "
                            "usage (the estimate calibrated by the prompt tokens the provider reports). auto: "
                            "tiktoken for OpenAI models, usage for the others.")
    compaction_summarize: bool = Field(True, description="Fold old exchanges into a rolling LLM summary (when "
                                       "PARLEY_COMPACTION is unset).")
    compaction_keep_last: int = Field(6, description="Exchanges kept verbatim when summarising, and by the "
                                      "keep_last step.")
    compress_tool_outputs_after: int = Field(3, description="Keep this many recent tool outputs whole; compress older.")
    idle_gap_seconds: float | None = Field(None, description="A player's message after this long without one "
                                           "starts a fresh conversation (game events are not the player's "
                                           "activity: those that came meanwhile are kept). Off when unset.")
    # NoDecode: without it the environment source decodes the value as JSON before the validator runs, so the comma
    # form a person writes ("start over, reset") failed as bad JSON.
    reset_phrases: Annotated[list[str], NoDecode] = Field(default_factory=list,
                                     description='Texts that start over, e.g. ["start over","new topic","reset"]. '
                                                 "Off when empty.")
    max_input_chars: int = Field(16_000, description="Longest accepted user text or event.")
    max_state_bytes: int = Field(1 << 20, description="Largest state blob; larger ones are trimmed or quarantined.")
    max_pinned: int = Field(50, ge=0, description="Most pinned items a conversation keeps once their exchanges are "
                                                 "compacted away; beyond it the oldest go (counted in "
                                                 "parley_pinned_dropped_total).")

    # --- the worker ---
    lease_seconds: float = Field(10.0, description="How long a conversation (or its delivery) stays owned by a "
                                 "worker that stopped renewing it. A running turn renews it every third of this, "
                                 "so it bounds how soon a dead worker's conversations are taken over.")
    max_inbox: int = Field(1000, description="Most pending inputs per conversation; more are refused.")
    state_cache_mb: int = Field(64, ge=0, description="Each worker process keeps the states it last wrote decoded, "
                                "so the next turn of the conversation on the same process neither fetches nor "
                                "decodes them: about this many MiB of memory, least recently used out (a short "
                                "conversation takes about 3 KB, a compacted one 15-60 KB). 0 turns it off.")
    max_attempts: int = Field(5, description="Attempts at one input that end in a crash before it is dead-lettered "
                                             "(poison input).")
    max_model_retries: int = Field(30, description="Retries of one input while the model is unavailable (backoff up "
                                                   "to a minute) before it is dead-lettered.")
    max_bad_response_retries: int = Field(3, description="Retries of one input whose model answer could not be read "
                                          "(a malformed body) before it is dead-lettered, counted apart from its "
                                          "retries while the model is unavailable.")
    dedupe_max_ids: int = Field(10_000, description="Message ids remembered per conversation for dedupe.")
    dedupe_seconds: float = Field(4 * 86400.0, description="How long message ids are remembered (WhatsApp retries "
                                                             "for about 36 hours).")
    delete_tombstone_seconds: float = Field(2 * 86400.0, ge=0, description="How long a deleted conversation's "
                                            "message ids are remembered, so WhatsApp's retries of its old webhooks "
                                            "(for about 36 hours) cannot bring it back; new ids start afresh. "
                                            "0 = no tombstone.")
    trace_max: int = Field(2000, description="Trace entries kept per conversation.")
    idle_ttl_seconds: float | None = Field(None, description="Expire every key of a conversation idle this long. "
                                                             "Off when unset.")
    task_time_limit: float = Field(600.0, description="Hard time limit of one task (seconds).")
    visibility_timeout: float = Field(900.0, description="Broker visibility timeout; above the hard time limit.")
    broker_restore_interval: int = Field(10, description="Seconds between the broker's scans for messages whose "
                                                         "worker died (kombu unacked_restore_interval).")
    broker_restore_throttle: int = Field(10, description="Scan on every Nth restore tick (kombu "
                                                         "unacked_restore_throttle); 1 scans on every tick.")
    broker_max_connections: int = Field(2000, description="Redis connections a worker process may open to the "
                                        "broker (kombu's default of 10 fails publishes and acks under a large "
                                        "threads or gevent concurrency); keep it above the concurrency.")
    remote_control: bool = Field(False, description="Answer `celery inspect` / `celery control` (a pub/sub "
                                 "connection per worker). Off: on a broker restart that connection's reconnect "
                                 "crashed workers (\"Unrecoverable error\", seen in the chaos suite); "
                                 "`parley health` and the metrics cover probing.")
    task_events: bool = Field(False, description="Send Celery task events (for Flower and `celery events`); each "
                              "task then costs three more broker publishes. Parley's Prometheus metrics do not "
                              "need them. `celery worker -E` turns them on too.")
    sweep_interval: float = Field(5.0, description="How often the sweeper looks for stranded conversations (waiting "
                                  "inputs or replies whose worker's lease ran out), in seconds; it wakes those idle "
                                  "this long or more.")

    # --- players' bursts and media ---
    burst_quiet_seconds: float = Field(1.5, ge=0, description="Chat messages of one conversation that arrive within "
                                       "this quiet period are answered by one turn that sees each of them, in order "
                                       "(the reply threads to the last). 0 = off: one turn and one reply per message.")
    burst_max_wait_seconds: float = Field(8.0, ge=0, description="Longest a burst waits from its first message: a "
                                          "player who keeps typing still gets answers.")
    burst_max_messages: int = Field(20, ge=1, description="Most inputs one burst turn takes in.")
    double_text: Literal["queue", "merge"] = Field("queue", description="Chat messages that arrive while the model "
                                                   "answers: queue = answered in order by the next turn; merge = the "
                                                   "stale answer is not sent and the turn runs again with them.")
    double_text_max_merges: int = Field(2, ge=0, description="With merge: most re-runs of one turn; after that the "
                                        "answer goes out.")
    location_as: Literal["event", "turn"] = Field("event", description="A shared location pin is added without a "
                                                  "reply (the model knows where the player is on its next turn; it "
                                                  "reads the pin as the player's words, never as a game event) or "
                                                  "becomes a chat turn (answered).")
    media_max_bytes: int = Field(5 * 1024 * 1024, gt=0, description="Largest image fetched from the Cloud API for "
                                 "the model; larger ones are refused and answered with unsupported_reply.")
    media_turn_max_bytes: int = Field(8 * 1024 * 1024, gt=0, description="Bytes of photos one turn may fetch and "
                                      "hold (a burst may carry many); the photos past it are not fetched and the "
                                      "model reads that a photo came that could not be loaded.")
    # NoDecode: a comma list, as a person writes it, not JSON.
    media_hosts: Annotated[list[str], NoDecode] = Field(["lookaside.fbsbx.com"], min_length=1, description="Hosts "
                                                        "a photo is downloaded from (the access token goes with the "
                                                        "download), comma-separated; `*.example.com` for "
                                                        "subdomains. Over https only; any other host is refused.")
    media_allow_http: bool = Field(False, description="Tests only: let photo downloads use plain http to a loopback "
                                   "address (a local stand-in for Meta). Never to any other address.")
    unsupported_reply: str = Field("Sorry, I can only read text messages, locations and photos.",
                                   description="Short answer to a voice note, video, document, sticker, contact, "
                                               "unsupported or unknown message (and a photo the model cannot read "
                                               "that has no caption).")
    refused_reply: str = Field("Sorry, I couldn't read that message: it is too long. Please send a shorter one.",
                               description="Short answer to a player's message Parley must refuse as it is (text "
                                           "over PARLEY_MAX_INPUT_CHARS, a location whose name is as long, a "
                                           "character that cannot be stored); empty = none (the message is dropped, "
                                           "counted).")
    dead_letter_reply: str = Field("Sorry, something went wrong on my side and I couldn't answer that message. "
                                   "Please try again.", description="Apology sent when a player's message is "
                                   "dead-lettered (it stays replayable); empty = none.")
    typing_indicator: bool = Field(True, description="Mark a player's messages read and show WhatsApp's typing "
                                   "indicator while a burst waits and the model thinks (refreshed for slow turns).")

    # --- delivery ---
    whatsapp_api_base_url: str = Field("https://graph.facebook.com/v21.0",
                                       validation_alias=_std("WHATSAPP_API_BASE_URL"),
                                       description="WhatsApp Cloud API base URL.")
    whatsapp_phone_number_id: str | None = Field(None, validation_alias=_std("WHATSAPP_PHONE_NUMBER_ID"),
                                                 description="Sender phone number id. WhatsApp is off when unset.")
    whatsapp_access_token: SecretStr | None = Field(None, validation_alias=_std("WHATSAPP_ACCESS_TOKEN"),
                                                    description="Cloud API access token.")
    whatsapp_app_secret: SecretStr | None = Field(None, validation_alias=_std("WHATSAPP_APP_SECRET"),
                                                  description="App secret for X-Hub-Signature-256 on webhooks.")
    whatsapp_verify_token: SecretStr | None = Field(None, validation_alias=_std("WHATSAPP_VERIFY_TOKEN"),
                                                    description="Token for the webhook verification handshake.")
    webhook_max_age_seconds: float = Field(3 * 86400.0, ge=0, description="The webhook ingress refuses (200, "
                                           "counted as too_old, not applied) a message or status whose timestamp is "
                                           "older than this, so a captured signed webhook cannot be replayed once its "
                                           "message id left the dedupe memory. Above Meta's retry period (about 36 "
                                           "hours), at most PARLEY_DEDUPE_SECONDS; 0 = off.")
    webhook_max_body_bytes: int = Field(8 * 1024 * 1024, gt=0, description="Largest webhook body the ingress reads "
                                        "(413 past it, checked while reading).")
    # --- The producers' API over HTTP and the inlet (docs/producers.md) ---
    api_tokens: SecretStr | None = Field(None, description="Bearer tokens of the producers' HTTP API under /v1/ on "
                                         "the webhook process, comma-separated: `token` (scope producer: queue "
                                         "inputs, read a summary) or `operator:token` (also delete). Several tokens "
                                         "let producers rotate them. Unset or empty: the API is off (404).")
    inlet_stream: str = Field("parley:inlet", min_length=1, description="Redis stream `parley inlet` consumes: each "
                              "entry one field `envelope` holding the JSON of a queue message (docs/producers.md).")
    inlet_group: str = Field("parley-inlet", min_length=1, description="The inlet's consumer group on "
                             "PARLEY_INLET_STREAM (every inlet process of a deployment joins it).")
    inlet_queue: str = Field("parley.inlet", min_length=1, description="Durable RabbitMQ queue the inlet also "
                             "consumes when the broker is RabbitMQ.")
    inlet_batch: int = Field(100, ge=1, description="Stream entries one inlet reads at a time.")
    inlet_claim_idle_seconds: float = Field(30.0, gt=0, description="An entry another inlet read and left "
                                            "unacknowledged this long (it crashed, or its mailbox was full) is "
                                            "claimed and tried again.")
    delivery_max_attempts: int = Field(8, description="Failed sends of one reply (throttling, 5xx) before it is "
                                       "dead-lettered; counted in Redis with the reply, whichever worker sends it.")
    delivery_part_interval: float = Field(0.0, description="Seconds between the parts of one split reply.")
    status_webhooks: Literal["auto"] | bool = Field(
        "auto", description="Whether a webhook ingress records WhatsApp's status webhooks (Meta's webhook subscribes "
                            "to `messages` and the `webhook` process runs). Then a reply part a crashed worker left "
                            "in flight is resent only when no status shows it reached WhatsApp within "
                            "PARLEY_RESEND_GRACE_SECONDS; false: it is resent at once (it may reach the player "
                            "twice). auto: true while an ingress says so in Redis (it does when it starts and as "
                            "statuses come; the word holds a day).")
    resend_grace_seconds: float = Field(10.0, ge=0, description="With PARLEY_STATUS_WEBHOOKS: how long a reply part "
                                        "found in flight after a crash waits for a status webhook before it is "
                                        "resent (no worker waits meanwhile: the delivery checks again later).")
    deliver_inline: bool = Field(True, description="Deliver a drain's last reply in the drain task itself (one "
                                 "Celery hop fewer per turn); false hands every reply to a parley.deliver task.")
    drain_max_turns: int = Field(100, ge=0, description="Inputs one drain applies before it hands the "
                                 "conversation back to the queue (behind the other conversations' wake-ups), so a "
                                 "flooding conversation or game engine cannot hold a worker slot while quiet "
                                 "conversations wait. 0 = no bound.")
    drain_max_seconds: float = Field(1.0, ge=0, description="Seconds one drain applies inputs before it hands the "
                                     "conversation back to the queue (checked after each commit, so a long turn "
                                     "finishes first). 0 = no bound.")
    reply_webhook_url: str | None = Field(None, description="Deliver replies as JSON POSTs here instead of WhatsApp.")
    whatsapp_window_hours: float = Field(24.0, ge=0, description="WhatsApp's customer-service window: free-form "
                                         "replies go only this long after the player's last message; later ones go "
                                         "as PARLEY_WHATSAPP_TEMPLATE or are dead-lettered (outside_window) before "
                                         "any API call. 0 = not checked before sending (a 131047 answer still is).")
    whatsapp_template: str | None = Field(None, description="Approved template sent instead of a reply outside the "
                                          "window (the rest of the reply, once). Unset: such replies are "
                                          "dead-lettered.")
    whatsapp_template_language: str = Field("en_US", description="Language code the template was approved in.")
    whatsapp_template_parameter: Literal["reply", "fixed", "none"] = Field(
        "reply", description="How the template's one body parameter is filled: reply (the reply's text on one line, "
                             "cut to 1,024 characters), fixed (PARLEY_WHATSAPP_TEMPLATE_TEXT), none (no parameter).")
    whatsapp_template_text: str = Field("", description="The parameter's text with "
                                        "PARLEY_WHATSAPP_TEMPLATE_PARAMETER=fixed.")
    whatsapp_messages_per_second: float = Field(80.0, ge=0, description="Messages a second the sender number may "
                                                "send, shared by every worker through Redis (Meta's default "
                                                "throughput; higher tiers allow up to 1,000, and inbound messages "
                                                "count towards it too). 0 = off.")
    whatsapp_burst: int = Field(10, ge=1, description="Messages the sender number may send at once after a quiet "
                                "spell, within its rate.")
    whatsapp_recipient_per_minute: float = Field(10.0, ge=0, description="Messages a minute to one player (Meta's "
                                                 "pair rate is about one every 6 seconds; 131056 above it), shared "
                                                 "by every worker and conversation writing to them. 0 = off.")
    whatsapp_recipient_burst: int = Field(20, ge=1, description="Messages one player may get at once after a quiet "
                                          "spell (Meta allows bursts of up to about 45), within the pair rate.")
    whatsapp_pace_max_sleep: float = Field(2.0, ge=0, description="Longest wait for the pace a worker sleeps through; "
                                           "a longer one hands the reply to a later delivery task, holding no "
                                           "worker meanwhile.")

    # --- the durable record (PostgreSQL) ---
    database_url: str | None = Field(None, validation_alias=_std("DATABASE_URL"),
                                     description="PostgreSQL for the durable record (postgresql://user@host/db). "
                                     "Set: every commit, delivery, status and delete is also appended to a capped "
                                     "Redis stream that `parley exporter` copies here. Unset: no record.")
    record_stream_max: int = Field(100_000, ge=1, description="Entries a record stream keeps for the exporter; "
                                   "past it the oldest are dropped and counted (parley_record_dropped_total), so "
                                   "an exporter that is down never makes Redis grow without bound.")
    exporter_batch: int = Field(500, ge=1, description="Record entries the exporter writes per database "
                                "transaction.")
    exporter_idle_seconds: float = Field(0.5, gt=0, description="How long the exporter sleeps when the streams are "
                                         "empty.")
    export_every_seconds: float = Field(0.0, ge=0, description="Run the exporter as a Celery beat entry this often "
                                        "(`celery -A tasks beat`, or a worker with -B) instead of the Procfile's "
                                        "exporter process. 0 = no beat entry.")
    daily_token_budget: int = Field(0, ge=0, description="Tokens (prompt + completion) one conversation (a "
                                    "player) may use per UTC day, its turns' and its compactions' summaries; over it the player gets PARLEY_TOKEN_BUDGET_REPLY "
                                    "and the model is not called. Counted in Redis, so it works without a "
                                    "database. 0 = no budget.")
    token_budget_reply: str = Field("We've chatted a lot today! Let's pick this up again tomorrow.",
                                    description="The answer a player over the daily token budget gets.")

    # --- observability ---
    log_json: bool = Field(False, description="Log JSON lines instead of text.")
    log_level: str = Field("INFO", description="Log level.")
    metrics_port: int | None = Field(None, description="Serve Prometheus metrics on this port in each worker.")
    backlog_sample: int = Field(1000, ge=1, description="Conversations probed per metrics scrape for the autoscaling "
                                "gauges (parley_queue_waiting_conversations, parley_queue_oldest_input_age_seconds): "
                                "bounds a scrape's cost; above it the count is scaled from the sample.")

    @model_validator(mode="after")
    def _webhook_age(self) -> Settings:
        # Past the dedupe memory a replayed message id is new again: only the age check would still refuse it.
        if self.webhook_max_age_seconds > self.dedupe_seconds:
            raise ValueError(f"PARLEY_WEBHOOK_MAX_AGE_SECONDS ({self.webhook_max_age_seconds:g}) must not exceed "
                             f"PARLEY_DEDUPE_SECONDS ({self.dedupe_seconds:g}): a webhook replayed in between would "
                             f"be applied again")
        return self

    @model_validator(mode="after")
    def _template_text(self) -> Settings:
        if self.whatsapp_template and self.whatsapp_template_parameter == "fixed" and not self.whatsapp_template_text:
            raise ValueError("PARLEY_WHATSAPP_TEMPLATE_PARAMETER=fixed needs PARLEY_WHATSAPP_TEMPLATE_TEXT")
        return self

    @field_validator("compaction", mode="before")
    @classmethod
    def _split_steps(cls, v: object) -> object:
        """``tools, summarize ,budget`` -> ``["tools", "summarize", "budget"]``; empty means the default chain.
        An unknown step name is refused by the ``Literal`` check, naming the allowed ones."""
        if not isinstance(v, str):
            return v
        steps = [p.strip().lower() for p in v.split(",") if p.strip()]
        return steps or None

    @field_validator("media_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, v: object) -> object:
        """``lookaside.fbsbx.com, *.example.com`` -> a list of host names."""
        if not isinstance(v, str):
            return v
        return [p.strip() for p in v.split(",") if p.strip()]

    @field_validator("reset_phrases", mode="before")
    @classmethod
    def _split_phrases(cls, v: object) -> object:
        """A JSON list (``["start over", "new topic"]``) or comma-separated texts (``start over, new topic``)."""
        if not isinstance(v, str):
            return v
        if v.strip().startswith("["):
            return json.loads(v)  # a ValueError here is reported by pydantic as a validation error
        return [p.strip() for p in v.split(",") if p.strip()]

    def effective_redis_url(self) -> str:
        return self.redis_url or "redis://127.0.0.1:6379/0"

    def effective_broker_url(self) -> str:
        return self.broker_url or self.effective_redis_url()

    def effective_provider(self) -> str:
        if self.llm_provider != "auto":
            return self.llm_provider
        if self.openai_api_key is not None or self.openai_base_url:
            return "openai"
        if self.anthropic_api_key is not None:
            return "anthropic"
        return "local"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once."""
    return Settings()
