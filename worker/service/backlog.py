"""Autoscaling signals as Prometheus gauges, read from Redis when scraped.

Worker CPU says little about a Parley fleet (a turn mostly waits on the model); what says "add workers" is work
waiting without a worker: ``parley_queue_waiting_conversations`` and ``parley_queue_oldest_input_age_seconds``,
labelled by Celery queue. Every worker process exports the same fleet-wide figures (they are read from Redis, not
counted locally), so an autoscaler takes ``max()`` over the workers' series, never ``sum()``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from worker.errors import ParleyError
from worker.store.answers import Backlog
from worker.store.interfaces import SweeperStore

log = logging.getLogger("parley.metrics")

WAITING = "parley_queue_waiting_conversations"
OLDEST = "parley_queue_oldest_input_age_seconds"


class BacklogCollector(Collector):
    """Reads :meth:`~worker.store.autoscaling.AutoscalingStore.backlog` on each scrape (two round trips and at most ``sample`` probes)."""

    def __init__(self, store: SweeperStore, queue: str, sample: int) -> None:
        self.store = store
        self.queue = queue
        self.sample = sample

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Described without reading Redis, so registering the collector never touches the network.
        return iter(self._families(None))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            backlog = self.store.backlog(self.sample)
        except ParleyError as exc:  # Redis down: the scrape still answers, without these two series
            log.warning("backlog metrics unavailable", extra={"error": f"{type(exc).__name__}: {exc}"})
            return iter(())
        return iter(self._families(backlog))

    def _families(self, backlog: Backlog | None) -> list[GaugeMetricFamily]:
        waiting = GaugeMetricFamily(WAITING, "Conversations with inputs waiting for a worker, fleet-wide (read from "
                                    "Redis; sampled above PARLEY_BACKLOG_SAMPLE): autoscale on max() over workers.",
                                    labels=["queue"])
        oldest = GaugeMetricFamily(OLDEST, "Age of the oldest waiting input, fleet-wide (sampled among the least "
                                   "recently touched conversations): autoscale on max() over workers.",
                                   labels=["queue"])
        if backlog is not None:
            waiting.add_metric([self.queue], backlog.waiting)
            oldest.add_metric([self.queue], backlog.oldest_age_s)
        return [waiting, oldest]
