"""Prometheus metrics. Each worker process serves them when ``PARLEY_METRICS_PORT`` is set.

Celery's prefork children are separate processes: set ``PROMETHEUS_MULTIPROC_DIR`` to aggregate them, or
run the threads/gevent pool (one process) as docs/scaling.md recommends.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

INPUTS = Counter("parley_inputs_total", "Inputs applied, by kind and outcome.", ["kind", "outcome"])
TURN_SECONDS = Histogram("parley_turn_seconds", "Time to apply one chat turn (LLM included).",
                         buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
LLM_SECONDS = Histogram("parley_llm_seconds", "Time of one model round trip.", ["purpose"],
                        buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
TOKENS = Counter("parley_tokens_total", "Tokens reported by the provider, by kind: in (all prompt tokens), out, "
                 "cached (prompt tokens read from the provider's cache, part of in), cache_write (prompt tokens "
                 "written to Anthropic's cache, part of in).", ["direction"])
MODEL_REQUEST_SECONDS = Histogram("parley_model_request_seconds", "One HTTP request to a model provider (each retry "
                                  "apart), answered or not, by provider.", ["provider"],
                                  buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
MODEL_ERRORS = Counter("parley_model_errors_total", "Model requests that failed, by provider and error: auth (401/403), "
                       "rate_limited, unavailable (5xx, unreachable), timeout, context_length, request (another 4xx), "
                       "response (an answer that did not parse), circuit_open (not sent: the breaker is open).",
                       ["provider", "error"])
BREAKER_OPEN = Gauge("parley_model_breaker_open", "1 while the circuit breaker of a model endpoint is open (or lets one "
                     "probe through): its calls fail at once without reaching the provider; 0 once a call succeeds.",
                     ["provider", "endpoint"])
REPLY_LATENCY = Histogram("parley_reply_latency_seconds", "From the accept of the first input a reply answers (the "
                          "webhook's POST or the producer's call) to the send of its first part: what the player waited.",
                          buckets=(0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60, 120, 300, 900))
PROVIDER_AUTH_FAILING = Gauge("parley_provider_auth_failing",
                              "1 while the provider rejects the API key (401/403): every conversation is held until "
                              "it is fixed; 0 again after the next call it accepts.")
PROVIDER_AUTH_FAILURES = Counter("parley_provider_auth_failures_total",
                                 "Model calls the provider refused for the API key (401/403).")
CONTEXT_OVERFLOWS = Counter("parley_context_overflows_total",
                            "Turns the provider refused as longer than the context window, by outcome: recovered "
                            "(compacted and retried) or dead (still too long).", ["outcome"])
COMPACTIONS = Counter("parley_compactions_total", "Compactions, by outcome.", ["outcome"])
PINNED_DROPPED = Counter("parley_pinned_dropped_total",
                         "Pinned items dropped because the PARLEY_MAX_PINNED cap or the state size limit bit.")
COMPACTION_SAVED = Counter("parley_compaction_saved_tokens_total", "Prompt tokens removed by compaction.")
QUARANTINED = Counter("parley_quarantined_states_total", "State blobs set aside, by reason.", ["reason"])
WAKEUPS_FAILED = Counter("parley_wakeups_failed_total",
                         "Wake-ups whose publish failed after their input was accepted (the broker unreachable): the "
                         "input waits in its mailbox until the sweeper wakes a worker for it.")
DEAD_LETTERS = Counter("parley_dead_letters_total", "Inputs and replies dead-lettered, by reason.", ["what", "reason"])
DELIVERIES = Counter("parley_deliveries_total", "Reply parts sent, by outcome.", ["outcome"])
OUTSIDE_WINDOW = Counter("parley_outside_window_total",
                         "WhatsApp replies outside the 24-hour customer-service window, by outcome (template: the rest "
                         "of the reply went as the configured template; dead: dead-lettered, no template) and why "
                         "(window: known before the send; 131047: the API said so).", ["outcome", "why"])
PACE_WAITS = Counter("parley_pace_waits_total",
                     "WhatsApp sends held back by the shared pace, by the limit that held them (number: the sender "
                     "number's throughput; recipient: the pair rate) and how (sleep: waited in the worker; retry: "
                     "handed to a later delivery task).", ["limit", "how"])
PACE_WAIT_SECONDS = Histogram("parley_pace_wait_seconds", "How long a paced send waited (or was put off).",
                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
DUPLICATE_WINDOW = Counter("parley_duplicate_send_window_total",
                           "Reply parts resent because a crash hit between the send and the sent mark (with "
                           "PARLEY_STATUS_WEBHOOKS: no status webhook showed the part had reached WhatsApp within "
                           "the grace period).")
DUPLICATE_SENDS_AVOIDED = Counter("parley_duplicate_sends_avoided_total",
                                  "Reply parts left in flight by a crash that were marked sent instead of resent, "
                                  "because a status webhook showed they had reached WhatsApp (PARLEY_STATUS_WEBHOOKS).")
INFLIGHT_RECHECKS = Counter("parley_inflight_rechecks_total",
                            "Later checks scheduled for a reply part left in flight by a crash while the grace "
                            "period for its status webhook runs (PARLEY_RESEND_GRACE_SECONDS).")
STALE_COMMITS = Counter("parley_stale_commits_total", "Commits refused by the fencing check.")
JOURNAL_REPLAYS = Counter("parley_journal_replays_total",
                          "Turns resumed from their journal (a retried turn reusing recorded model rounds or tool results).")
JOURNAL_UNRECORDED = Counter("parley_journal_unrecorded_total",
                             "Turn journal entries not kept (full) or not usable (damaged): those steps may run twice.",
                             ["reason"])
MAILBOX_DEPTH = Gauge("parley_mailbox_depth", "Inputs waiting in the mailbox seen at the last commit.")
UNEXPECTED_ERRORS = Counter("parley_unexpected_errors_total",
                            "Errors no code path expects (bugs), by where they surfaced; each is logged with its stack.",
                            ["where"])
TOOL_CALLS = Counter("parley_tool_calls_total", "Calls of deployment tools (HTTP and MCP), by source and outcome.",
                     ["source", "outcome"])
GAME_CONTEXT = Counter("parley_game_context_total", "Turns' live game context, by outcome: ok (fetched), "
                       "stale_used (the fetch failed; the last good one was young enough), missing (the turn went "
                       "on without).", ["outcome"])
GAME_CONTEXT_FAILURES = Counter("parley_game_context_failures_total", "Failed live game context fetches, by reason "
                                "(timeout, unreachable, http_error, not_json, bad_system, oversize, error).",
                                ["reason"])
MCP_UNAVAILABLE = Counter("parley_mcp_server_unavailable_total",
                          "Turns that ran without an MCP server's tools because the server was down, by server.",
                          ["server"])
BURST_INPUTS = Histogram("parley_burst_inputs", "Inputs (chat messages and the events among them) one chat turn "
                         "took in: 1 without coalescing.", buckets=(1, 2, 3, 4, 5, 8, 12, 20, 50))
BURST_DEFERRALS = Counter("parley_burst_deferrals_total",
                          "Turns put off because the player was still typing (a scheduled wake-up, no worker waits).")
DRAIN_YIELDS = Counter("parley_drain_yields_total",
                       "Drains that handed their conversation back to the queue with inputs still waiting "
                       "(PARLEY_DRAIN_MAX_TURNS / PARLEY_DRAIN_MAX_SECONDS), so other conversations got a turn.")
REPLICATION_SHORT = Counter("parley_redis_wait_short_total",
                            "Writes (accept, commit, delivery claim, sent mark) that fewer replicas than "
                            "PARLEY_REDIS_WAIT_REPLICAS acknowledged within PARLEY_REDIS_WAIT_TIMEOUT: reported to the "
                            "caller as an unknown outcome (retried).", ["what"])
DOUBLE_TEXT_MERGES = Counter("parley_double_text_merges_total",
                             "Turns run again because chat messages arrived while the model answered (merge mode).")
DISCARDED_MODEL_CALLS = Counter("parley_discarded_model_calls_total",
                                "Model calls whose answer was thrown away by a double-text merge.")
DISCARDED_TOKENS = Counter("parley_discarded_tokens_total",
                           "Tokens (prompt and completion, as reported) of answers thrown away by a merge.")
NOTICES = Counter("parley_notices_total", "Fixed short answers queued instead of a model turn, by why.", ["why"])
PRESENCE = Counter("parley_presence_total",
                   "Read receipts and typing indicators (best effort, never fail a turn), by outcome: sent, "
                   "rejected (the API answered an error), timeout, unreachable, dropped (too many in flight), "
                   "unexpected (a bug, logged with its stack).", ["outcome"])
MEDIA = Counter("parley_media_total",
                "Photos players sent, by outcome: attached (the model saw it), caption (the caption alone went to the "
                "model), notice (no caption: the short answer went back), retry (a fetch that can pass failed); "
                "reason says why when the model did not see it (model, no_fetcher, too_large, not_image, refused, ...).",
                ["outcome", "reason"])
BUDGET_REFUSALS = Counter("parley_token_budget_refusals_total",
                          "Chat turns answered with PARLEY_TOKEN_BUDGET_REPLY because the conversation used its daily "
                          "token budget (the model was not called).")
# The durable record's exporter (parley exporter). The gauges are set by each export pass.
RECORDS_EXPORTED = Counter("parley_records_exported_total", "Record entries written to PostgreSQL (rows committed, "
                           "then deleted from the stream).")
RECORDS_UNREADABLE = Counter("parley_records_unreadable_total",
                             "Record entries that did not decode: kept in the database's raw form, never lost.")
RECORD_BACKLOG = Gauge("parley_record_backlog_entries", "Record entries waiting in the Redis streams for the exporter.")
RECORD_LAG = Gauge("parley_record_lag_seconds", "Age of the oldest record entry not yet exported (0 when none waits): "
                   "how far behind the database is.")
RECORD_DROPPED = Gauge("parley_record_dropped_total", "Record entries the stream cap dropped before they were exported "
                       "(PARLEY_RECORD_STREAM_MAX; the exporter was down or behind), since the streams began.")
EXPORT_ERRORS = Counter("parley_exporter_errors_total", "Export passes that failed (database or Redis unavailable); the "
                        "stream is left as it was and the pass is tried again.", ["what"])
WHATSAPP_TOKEN_REJECTED = Gauge("parley_whatsapp_token_rejected",
                                "1 while WhatsApp rejects the access token (error code 190, or a 401 without a "
                                "code): replies and photo fetches are held, nothing is dead-lettered; 0 again after "
                                "the next send or fetch it accepts. One series per business number.",
                                ["phone_number_id"])
WHATSAPP_TOKEN_REFUSALS = Counter("parley_whatsapp_token_refusals_total",
                                  "WhatsApp calls refused for the access token, by what was held: send (a reply "
                                  "part), media (a photo fetch) or receipt (a read receipt, dropped).", ["what"])
TIMERS_FIRED = Counter("parley_timers_fired_total",
                       "Held inputs accepted into their mailbox when due (counted by the worker that fired them).")
TIMERS_DROPPED = Counter("parley_timers_dropped_total",
                         "Due timers dropped when fired: their message id was accepted before, or a reset fired first.")
TIMERS_HELD_FULL = Counter("parley_timers_held_full_total",
                           "Firing passes that found a conversation's mailbox full: its due timers stay held and are "
                           "retried.")
TIMER_LATENESS = Histogram("parley_timer_lateness_seconds", "How late a timer was accepted into its mailbox after its "
                           "due time.", buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 30, 300))
TIMER_CONVERSATIONS = Gauge("parley_timer_conversations",
                            "Conversations holding timers (read from Redis by the timer loop about every 10 s).")
PAUSED_TURNS = Counter("parley_paused_turns_total", "Turns of paused conversations (a person took over), by what became "
                       "of them: withheld (applied with no model call and no reply) or finished (it had started "
                       "answering before the pause).", ["outcome"])
OPT_OUTS = Counter("parley_opt_outs_total",
                   "Players' opt-outs and opt-ins, by change: stop (an opt-out phrase), start (an opt-in phrase), "
                   "message (any message while PARLEY_OPT_OUT_UNTIL_MESSAGE), cli (parley optout / optin), "
                   "marketing_stop and marketing_resume (Meta's user_preferences webhook).", ["change"])
OPTED_OUT_SENDS = Counter("parley_opted_out_sends_total",
                          "Business-initiated messages for an opted-out player applied without anything sent, by "
                          "kind: event (an answered game event or its timer), operator, template.", ["kind"])
IDENTITY_CONFLICTS = Counter("parley_identity_conflicts_total",
                             "Webhooks naming a phone number and a user id that each had a conversation: the older "
                             "stayed the player's, the other was kept apart (not merged).")
OPERATOR_MESSAGES = Counter("parley_operator_messages_total",
                            "Operators' messages applied (queued to be sent, and added to the state).")
WEBHOOK_CHANGES_SKIPPED = Counter("parley_webhook_changes_skipped_total",
                                  "Changes of signed webhooks skipped, their messages and statuses not applied (the "
                                  "POST is answered 200), by reason: unknown_number (for a business number the "
                                  "deployment does not serve: neither WHATSAPP_PHONE_NUMBER_ID nor one of "
                                  "PARLEY_WHATSAPP_NUMBERS_FILE) or no_number (names none while a number is "
                                  "configured).", ["reason"])
