"""``parley_paused_conversations``: how many conversations a person has taken over, read from Redis when scraped.

Counted from the global ``paused`` index (:meth:`~worker.store.pauses.PauseStore.paused_count`), not in any one
process: every worker exports the same fleet-wide figure, so a dashboard takes ``max()`` over the workers' series, as
for the backlog gauges (:mod:`worker.service.backlog`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from worker.errors import ParleyError
from worker.store.interfaces import SweeperStore

log = logging.getLogger("parley.metrics")

PAUSED = "parley_paused_conversations"


class PausedCollector(Collector):
    """Reads the count on each scrape (two commands: drop the timed pauses that ended, count the rest)."""

    def __init__(self, store: SweeperStore) -> None:
        self.store = store

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter([self._family()])  # described without reading Redis

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            count = self.store.paused_count()
        except ParleyError as exc:  # Redis down: the scrape still answers, without this series
            log.warning("paused-conversations metric unavailable", extra={"error": f"{type(exc).__name__}: {exc}"})
            return iter(())
        return iter([self._family(count)])

    @staticmethod
    def _family(count: int | None = None) -> GaugeMetricFamily:
        family = GaugeMetricFamily(PAUSED, "Conversations a person has taken over (paused), fleet-wide (read from "
                                   "Redis): take max() over workers.")
        if count is not None:
            family.add_metric([], count)
        return family
