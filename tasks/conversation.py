"""The tasks: thin wrappers that call the service and turn its exceptions into retries.

Every task takes only a conversation id: the inputs themselves live in the conversation's mailbox in Redis
(and a reply's failed sends are counted there too), so a duplicated or reordered Celery message cannot apply
anything twice or out of order — it only wakes a drainer up.
"""

from __future__ import annotations

import gc
import logging
import random
import sys
import threading
from typing import Any

from celery import signals
from celery.concurrency.prefork import TaskPool as PreforkPool

from tasks import app
from tasks.app import QUEUE
from worker import metrics
from worker.errors import ParleyError, RetryLater, StoreUnavailableError
from worker.service import ConversationService
from worker.settings import get_settings

log = logging.getLogger("parley.tasks")

_service: ConversationService | None = None
_lock = threading.Lock()


def wake(kind: str, cid: str, *, countdown: float = 0.0) -> None:
    """Ask for follow-up work on a conversation (sent as a Celery task)."""
    task = {"drain": drain, "deliver": deliver, "compact": compact}[kind]
    task.apply_async(args=[cid], countdown=countdown or None)


def service() -> ConversationService:
    """The process's service, built on first use (after fork, so each process has its own connections)."""
    global _service
    if _service is None:
        with _lock:
            if _service is None:
                from worker.runtime import build_service

                _service = build_service(get_settings(), wake)
    return _service


# The cyclic collector's thresholds for a worker process (Python's default: 700, 10, 10). A turn lives about as long
# as its model call (seconds) and allocates thousands of objects meanwhile; at the defaults the youngest generation
# is collected every few hundred net allocations, so every turn in flight is promoted to the oldest generation, and
# the full collections that promotion sets off walk the whole heap (the decoded states kept between turns included):
# at 400 turns/s they took more of a worker's CPU than all its Redis calls. With these, a turn's objects are
# mostly freed before a collection looks at them; the garbage they leave in cycles waits for at most one pass of
# the youngest generation.
GC_THRESHOLDS = (50_000, 20, 10)


def _warm_up() -> None:
    """Build the service before the first task and move everything alive now out of the collector's sight.

    Otherwise the first turn of a process pays for the imports and set-up, and every full collection walks
    the many long-lived objects that Celery, pydantic and the providers leave behind, stalling every turn in
    flight. Then the collector is set to :data:`GC_THRESHOLDS`."""
    try:
        service()
    except Exception:  # Redis may be down at start-up: the first task builds it instead
        log.exception("could not build the service at start-up; the first task will")
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _backoff(retries: int, cap: float = 60.0) -> float:
    return float(min(cap, 0.5 * 2.0**retries) * (0.5 + random.random() / 2))


@app.task(name="parley.drain", bind=True, max_retries=None, acks_late=True)
def drain(self: Any, conversation_id: str) -> int:
    """Apply every waiting input of one conversation, in order."""
    try:
        return service().drain(conversation_id)
    except RetryLater as exc:
        raise self.retry(countdown=exc.countdown) from None
    except StoreUnavailableError:
        if self.request.retries >= 20:
            raise  # the sweeper resumes the conversation once Redis is back; nothing is lost
        raise self.retry(countdown=_backoff(self.request.retries)) from None


@app.task(name="parley.deliver", bind=True, max_retries=None, acks_late=True)
def deliver(self: Any, conversation_id: str, attempt: int = 0) -> int:
    """Send the waiting replies of one conversation, in order.

    ``attempt`` is ignored: the failures of a reply are counted in Redis. It stays so that messages queued
    by an earlier version still run."""
    del attempt
    try:
        return service().deliver(conversation_id)
    except RetryLater as exc:
        raise self.retry(args=[conversation_id], countdown=exc.countdown) from None
    except StoreUnavailableError:
        if self.request.retries >= 20:
            raise
        raise self.retry(countdown=_backoff(self.request.retries)) from None


@app.task(name="parley.compact", bind=True, max_retries=3, acks_late=True)
def compact(self: Any, conversation_id: str) -> bool:
    """Compute a compaction off to the side and queue it for splicing. A failure changes nothing."""
    try:
        return service().queue_compaction(conversation_id)
    except StoreUnavailableError:
        raise self.retry(countdown=_backoff(self.request.retries)) from None
    except ParleyError as exc:  # Redis refused, or a state or model failure the compactor did not absorb
        metrics.COMPACTIONS.labels("failed").inc()
        log.warning("compaction failed; the state is unchanged",
                    extra={"conversation_id": conversation_id, "error": f"{type(exc).__name__}: {exc}"})
        return False
    except Exception:
        metrics.UNEXPECTED_ERRORS.labels("compaction").inc()
        log.exception("compaction hit an unexpected error; the state is unchanged",
                      extra={"conversation_id": conversation_id})
        return False


@app.task(name="parley.sweep", acks_late=True)
def sweep(limit: int = 1000) -> int:
    """Wake conversations that have waiting inputs or replies but no worker (e.g. after a SIGKILL)."""
    svc = service()
    settings = get_settings()
    woken = 0
    # A conversation whose worker died (an attempt counted, a reply claimed, no lease) is found one lease plus one
    # or two intervals after the death. Work with no such evidence is most likely waiting behind a backlog of
    # wake-ups: it is woken again only after six intervals, so a backlog is not doubled by the sweeper.
    interval_ms = settings.drain.sweep_ms
    for cid in svc.store.stranded(limit, interval_ms, backlog_ms=6 * interval_ms):
        drain.apply_async(args=[cid])
        deliver.apply_async(args=[cid])
        woken += 1
    if woken:
        log.warning("sweeper woke stranded conversations", extra={"count": woken})
    return woken


def _sweeper_loop(stop: threading.Event) -> None:
    settings = get_settings()
    while not stop.wait(settings.drain.sweep_interval):
        try:
            # One sweep per interval across all workers: whoever takes the lock sends it.
            if service().store.try_lock("sweep", settings.drain.sweep_ms):
                sweep.apply_async()
        except Exception:
            log.exception("sweeper tick failed")


def _timer_loop(stop: threading.Event) -> None:
    from worker.service.timer_loop import TimerLoop

    while not stop.is_set():  # Redis may be down at start-up: the loop starts once the service can be built
        try:
            store = service().store
            break
        except Exception:
            log.exception("timer loop cannot start yet")
            stop.wait(5.0)
    else:
        return
    TimerLoop(store, lambda cid: drain.apply_async(args=[cid])).run(stop, get_settings().drain.timer_poll_seconds)


_stop = threading.Event()


@signals.worker_init.connect
def _lighter_greenlets(**_: Any) -> None:
    """Under the gevent pool, a greenlet per task no longer records who spawned it: gevent's default keeps the
    spawning greenlet, its locals and the spawning stack (ten frames) of every greenlet, for debugging tools
    Parley does not use; that is CPU at every task's spawn and objects the cyclic collector has to free."""
    gevent = sys.modules.get("gevent")
    if gevent is not None:
        gevent.config.track_greenlet_tree = False


@signals.worker_init.connect
def _check_tools(**_: Any) -> None:
    """A bad tool configuration (manifest, PARLEY_TOOLS, entry points, PARLEY_CONTEXT) stops the worker at start,
    before any turn runs; a signal handler's ordinary exception would only be logged, hence SystemExit."""
    from worker.errors import ConfigurationError
    from worker.game_context import load_context_source
    from worker.tools import fixed_tools

    try:
        fixed_tools(get_settings())
        load_context_source(get_settings())  # the game's live context (PARLEY_CONTEXT, the manifest's entry)
    except ConfigurationError as exc:
        log.critical("invalid tool configuration: %s", exc)
        raise SystemExit(1) from exc


@signals.worker_init.connect
def _check_numbers(**_: Any) -> None:
    """A bad PARLEY_WHATSAPP_NUMBERS_FILE stops the worker at start, naming the entry (as a bad tool
    configuration does), instead of failing every delivery later."""
    from worker.errors import ConfigurationError
    from worker.runtime.numbers_file import numbers_from_settings
    from worker.tools import number_tools

    try:
        numbers = numbers_from_settings(get_settings().whatsapp)
        if numbers is not None:
            number_tools(numbers, get_settings())  # a header's ${VAR} unset, two tools of one name
    except ConfigurationError as exc:
        log.critical("invalid WhatsApp numbers: %s", exc)
        raise SystemExit(1) from exc


@signals.worker_init.connect
def _preload_token_counter(**_: Any) -> None:
    """Load the tiktoken encoding the worker's counter will use (about 0.3 s) in the main process, before the
    pool starts: prefork children then inherit it instead of each loading its own."""
    from worker.runtime import DEFAULT_MODELS, compaction_chain

    settings = get_settings()
    provider = settings.llm.effective_provider()
    if provider in DEFAULT_MODELS:
        compaction_chain.build_counter(settings, provider, settings.llm.model or DEFAULT_MODELS[provider])


@signals.worker_process_init.connect
def _warm_up_pool_process(**_: Any) -> None:  # prefork: each child builds its own, after the fork
    _warm_up()


@signals.worker_ready.connect
def _start_sweeper(sender: Any = None, **_: Any) -> None:
    # The threads and gevent pools run tasks in this process; prefork children warm themselves up.
    if not isinstance(getattr(sender, "pool", None), PreforkPool):
        _warm_up()
    threading.Thread(target=_sweeper_loop, args=(_stop,), name="parley-sweeper", daemon=True).start()
    threading.Thread(target=_timer_loop, args=(_stop,), name="parley-timers", daemon=True).start()
    port = get_settings().observability.metrics_port
    if port:
        from prometheus_client import REGISTRY, start_http_server

        from worker.service.backlog import BacklogCollector
        from worker.service.paused_gauge import PausedCollector

        REGISTRY.register(BacklogCollector(service().store, QUEUE, get_settings().observability.backlog_sample))
        REGISTRY.register(PausedCollector(service().store))
        start_http_server(port)
        log.info("serving Prometheus metrics", extra={"port": port})


@signals.worker_shutdown.connect
def _stop_sweeper(**_: Any) -> None:
    _stop.set()


@signals.worker_shutdown.connect
@signals.worker_process_shutdown.connect
def _stop_mcp_processes(**_: Any) -> None:
    """The stdio MCP servers this process started end with it (a prefork child, or the threads/gevent worker)."""
    from worker.tools import stop_mcp_processes

    stop_mcp_processes()


@app.task(name="parley.noop", acks_late=True)
def noop(*_: Any) -> None:
    """Does nothing: the baseline the benchmarks compare Parley's path with."""


@app.task(name="parley.ping", acks_late=True)
def ping(key: str, sent_at: float) -> None:
    """Records when it ran (benchmark round trips and health probes)."""
    import time

    service().store.push_mark(key, f"{sent_at}:{time.time()}")
