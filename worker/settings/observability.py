"""Logs, metrics and what traces show of a player."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr

from worker.settings.group import Group


class Observability(Group):
    """Logs and metrics."""

    heading: ClassVar[str] = "Logs and metrics"
    log_json: bool = Field(default=False, description="Log JSON lines instead of text.")
    log_level: str = Field(default="INFO", description="Log level.")
    metrics_port: int | None = Field(default=None, description="Serve Prometheus metrics on this port in each worker.")
    backlog_sample: int = Field(default=1000, ge=1, description="Conversations probed per metrics scrape for the autoscaling "
                                "gauges (parley_queue_waiting_conversations, parley_queue_oldest_input_age_seconds): "
                                "bounds a scrape's cost; above it the count is scaled from the sample.")
    trace_id_key: SecretStr | None = Field(
        default=None, description="Key of the keyed hash (HMAC-SHA256) that turns a conversation id (a player's phone "
        "number) into the pseudonym spans and span-linked log lines show (`p_` and 24 hex digits; `parley pseudonym "
        "ID` prints one). Give every process the same key. Unset: a random key created once in Redis and shared by "
        "every process of that Redis.")
    trace_plain_ids: bool = Field(default=False, description="Show plain conversation ids in spans and span-linked "
                                  "log lines instead of pseudonyms.")
