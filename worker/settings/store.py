"""Where Parley keeps things: Redis for conversation state, the Celery broker, the bounds on what Redis keeps,
and the durable record in PostgreSQL."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from worker.settings.group import STANDARD, Group


class Redis(Group):
    """Redis for conversation state."""

    heading: ClassVar[str] = "Redis"
    url: str | None = Field(default=None, validation_alias="redis_url", json_schema_extra=STANDARD,
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


class Broker(Group):
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
                                 "the same round trip, instead of a second publish through kombu (an input can no longer "
                                 "be accepted with its wake-up lost, and a first input costs less). Off, or with another broker (Sentinel, RabbitMQ, another "
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

class Store(Group):
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
    recall_max_bytes: int = Field(default=1_048_576, ge=0, description="Most bytes of one conversation's archive "
                                  "(the compressed messages that left its verbatim history); the oldest go first. "
                                  "0 = unbounded.")

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

class Record(Group):
    """The durable record in PostgreSQL, and the exporter that fills it."""

    heading: ClassVar[str] = "The durable record (PostgreSQL)"
    database_url: str | None = Field(default=None, json_schema_extra=STANDARD,
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
