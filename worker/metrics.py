"""Prometheus metrics. Each worker process serves them when ``PARLEY_METRICS_PORT`` is set.

Celery's prefork children are separate processes: set ``PROMETHEUS_MULTIPROC_DIR`` to aggregate them, or
run the threads/gevent pool (one process) as the README recommends.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

INPUTS = Counter("parley_inputs_total", "Inputs applied, by kind and outcome.", ["kind", "outcome"])
TURN_SECONDS = Histogram("parley_turn_seconds", "Time to apply one chat turn (LLM included).",
                         buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
LLM_SECONDS = Histogram("parley_llm_seconds", "Time of one model round trip.", ["purpose"],
                        buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
TOKENS = Counter("parley_tokens_total", "Tokens reported by the provider.", ["direction"])
COMPACTIONS = Counter("parley_compactions_total", "Compactions, by outcome.", ["outcome"])
PINNED_DROPPED = Counter("parley_pinned_dropped_total",
                         "Pinned items dropped because the PARLEY_MAX_PINNED cap or the state size limit bit.")
COMPACTION_SAVED = Counter("parley_compaction_saved_tokens_total", "Prompt tokens removed by compaction.")
QUARANTINED = Counter("parley_quarantined_states_total", "State blobs set aside, by reason.", ["reason"])
DEAD_LETTERS = Counter("parley_dead_letters_total", "Inputs and replies dead-lettered, by reason.", ["what", "reason"])
DELIVERIES = Counter("parley_deliveries_total", "Reply parts sent, by outcome.", ["outcome"])
DUPLICATE_WINDOW = Counter("parley_duplicate_send_window_total",
                           "Reply parts resent because a crash hit between the send and the sent mark.")
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
