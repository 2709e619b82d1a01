"""Tool calls happen once: real Celery workers SIGKILLed between tool calls and commits (and inside tool calls),
a loopback game engine counting every call per identity, a loopback model that answers with tool calls.

Checked, per input: the engine saw exactly one identity (a retried turn replays its recorded model round instead
of asking the model again, which would bring a new one); that identity arrived once, or more only when a kill of
the worker that made the call fell inside the call (its result was never recorded); the input was answered once
(beyond the delivery window's own crash allowance), in order, with a reply quoting that identity's receipt.

Run twice: with the side-effecting tool as a Python tool (identity: a ``nonce`` argument the model draws) and as
an HTTP tool from a ``PARLEY_TOOLS_FILE`` manifest (identity: the ``Idempotency-Key`` header, which must also be
``idempotency_key(conversation id, input id, call id)`` of the call the body names).

``PARLEY_CHAOS_SCALE`` scales the load (CI: 1).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.chaos import harness
from tests.chaos.harness import WINDOW_LOG
from tests.e2e.conftest import Cluster
from tests.support.tool_kill_peers import Call, GameEngine, ToolCallingModel
from tests.support.workers import WorkerProcess, wait_until
from worker.tools.http_source import idempotency_key

pytestmark = pytest.mark.e2e

SCALE = float(os.environ.get("PARLEY_CHAOS_SCALE", "1"))


class Killer:
    """Kills the worker that made a call, right inside the call or once its result is recorded (between the tool
    result and the commit: in the model's final round), then starts it again, as a supervisor would.

    Just before each kill it notes which calls of that worker had no recorded result (their turn dies inside
    them): exactly those may reach the engine again, under the same identity."""

    def __init__(self, cluster: Cluster, *, chance: float) -> None:
        self.cluster, self.chance = cluster, chance
        self.store = cluster.store()
        self.engine: GameEngine | None = None
        self.kills: list[tuple[int, str]] = []  # (pid, where)
        self.unrecorded: set[str] = set()  # nonces whose result was not recorded when their worker was killed
        self.per_item: dict[str, int] = {}
        self.lock = threading.Lock()

    def _pick(self, call: Call) -> bool:
        with self.lock:
            if self.per_item.get(call.item, 0) >= 2 or random.random() >= self.chance:
                return False  # at most two kills per input: stay far from the poison-input budget
            self.per_item[call.item] = self.per_item.get(call.item, 0) + 1
            return True

    def inside(self, call: Call) -> None:
        if random.random() < 0.3 and self._pick(call):
            self._kill(call.pid, "inside")

    def after(self, call: Call) -> None:
        if not self._pick(call):
            return
        if wait_until(lambda: self._recorded(call) is not False, 5, interval=0.01) and self._recorded(call):
            time.sleep(random.uniform(0.0, 0.4))  # the model's final round is under way
            self._kill(call.pid, "after")

    def _recorded(self, call: Call) -> bool | None:
        """Whether ``call``'s result is in its input's journal; ``None`` once the input was applied."""
        cid, _, n = call.item.partition(" q")
        if self.store.inbox_depth(cid) == 0 or self.store.inbox(cid)[0][0] != f"{cid}-{n}":
            return None
        return (0, call.call_id) in self.store.read_journal(cid, f"{cid}-{n}").results

    def _kill(self, pid: int, where: str) -> None:
        for w in self.cluster.workers:
            if w.proc is not None and w.proc.pid == pid and w.alive():
                assert self.engine is not None
                w.kill(signal.SIGKILL)
                w.proc.wait(5)
                time.sleep(0.2)  # requests it wrote before dying reach the engine; nobody takes its 5 s leases yet
                mine = [c for c in list(self.engine.calls) if c.pid == pid]
                with self.lock:
                    self.kills.append((pid, where))
                    self.unrecorded.update(c.nonce for c in mine if self._recorded(c) is False)
                w.start()
                return


def test_workers_killed_between_tool_calls_and_commits_call_each_tool_once(cluster: Cluster) -> None:
    _run(cluster, http_manifest=None)


_GIVE_PARAMS = {"type": "object", "properties": {"item": {"type": "string"}, "nonce": {"type": "string"}},
                "required": ["item", "nonce"]}


def test_workers_killed_around_http_tool_calls_send_each_idempotency_key_once(cluster: Cluster,
                                                                               tmp_path: Path) -> None:
    _run(cluster, http_manifest=tmp_path / "tools.json")


def _run(cluster: Cluster, *, http_manifest: Path | None) -> None:
    engine = GameEngine(delay=0.3).start()
    model = ToolCallingModel(tool_delay=0.05, final_delay=1.0).start()
    killer = Killer(cluster, chance=0.35)
    killer.engine = engine
    engine.on_call, engine.on_answered = killer.inside, killer.after
    engine.pid_of = lambda name: next((w.proc.pid for w in cluster.workers if w.name == name and w.proc), 0)
    cluster.env.update(OPENAI_BASE_URL=model.base_url,
                       PARLEY_MAX_ATTEMPTS="20")  # a kill takes every turn of its worker: not poison inputs
    if http_manifest is None:
        cluster.env.update(PARLEY_TOOLS="tests.support.game_tools:tools", PARLEY_TEST_GAME_URL=engine.url)
    else:
        # The worker's name rides in a header (expanded from its own environment) so the test kills the right one.
        http_manifest.write_text(json.dumps({"tools": [
            {"name": "give_item", "description": "Give the player an item in the game.", "url": f"{engine.url}/give",
             "parameters": _GIVE_PARAMS, "timeout": 10, "headers": {"X-Worker": "${PARLEY_TEST_WORKER}"},
             "idempotent": True}]}))  # the engine answers a repeated Idempotency-Key with the same receipt
        cluster.env.update(PARLEY_TOOLS_FILE=str(http_manifest))
    try:
        for i in range(2):
            name = f"tools{i}"
            cluster.workers.append(WorkerProcess(name, {**cluster.env, "PARLEY_TEST_WORKER": name},
                                                 concurrency=8).start())
        started = time.monotonic()
        client = cluster.client()
        cids = [f"4478{i:08d}" for i in range(max(2, int(4 * SCALE)))]
        inputs = max(2, int(3 * SCALE))
        sent: dict[str, list[str]] = {c: [] for c in cids}
        for n in range(inputs):
            for cid in cids:
                text = f"{cid} q{n}"
                client.send_message(cid, text, message_id=f"{cid}-{n}")
                sent[cid].append(text)
        store = cluster.store()
        settled = wait_until(lambda: all(len(cluster.whatsapp.texts_for(c)) >= inputs for c in cids)
                             and all(store.inbox_depth(c) == 0 for c in cids), 90 + 60 * SCALE, interval=0.25)
        time.sleep(0.5)
        logs = "".join(w.log() for w in cluster.workers)
        assert settled, (f"kills={killer.kills} waiting={[store.inbox_depth(c) for c in cids]} "
                         f"replies={[len(cluster.whatsapp.texts_for(c)) for c in cids]} "
                         f"dead={[len(store.dead_letters(c)) for c in cids]}")
        _check(cluster, engine, killer, sent, logs, http=http_manifest is not None)
        print(f"[chaos] tool-calls-once ({'http manifest' if http_manifest else 'python'}): "
              f"seconds={time.monotonic() - started:.1f} inputs={sum(map(len, sent.values()))} engine_calls={len(engine.calls)} "
              f"kills={len(killer.kills)} (inside={sum(1 for k in killer.kills if k[1] == 'inside')}) "
              f"model_tool_rounds={sum(model.rounds.values())}")
        assert len(killer.kills) >= 1, "no kill landed: the test proved nothing"
    finally:
        engine.stop()
        model.stop()


def _check(cluster: Cluster, engine: GameEngine, killer: Killer, sent: dict[str, list[str]], logs: str, *,
           http: bool = False) -> None:
    by_item = engine.by_item()
    window_hits = logs.count(WINDOW_LOG)
    duplicates = 0
    for cid, texts in sent.items():
        got = cluster.whatsapp.texts_for(cid)
        dedup = [t for i, t in enumerate(got) if t not in got[:i]]
        duplicates += len(got) - len(dedup)
        assert len(dedup) == len(texts), (cid, got)
        for text, reply in zip(texts, dedup, strict=True):
            calls = by_item.get(text, [])
            nonces = {c.nonce for c in calls}
            assert len(nonces) == 1, f"{text}: the engine saw {len(nonces)} identities; kills={killer.kills}"
            (nonce,) = nonces
            if http:  # the key is the one the three ids derive, and every arrival named the same call
                assert {(c.conversation_id, c.input_id, c.call_id) for c in calls} == {
                    (cid, f"{cid}-{texts.index(text)}", calls[0].call_id)}, (text, calls)
                assert nonce == idempotency_key(cid, f"{cid}-{texts.index(text)}", calls[0].call_id), (text, calls)
            if len(calls) > 1:
                assert nonce in killer.unrecorded, (
                    f"{text}: called {len(calls)} times, but no kill fell inside the call; calls={calls} "
                    f"kills={killer.kills}\n" + "\n".join(ln for ln in logs.splitlines() if cid in ln)[-6000:])
            assert reply.startswith(f"done:{text}:") and f"r-{nonce}" in reply, (text, reply)  # in order, used it
    assert duplicates <= window_hits, f"{duplicates} replies sent twice, {window_hits} crashes in the send window"
    resent = harness.window_hits([logs])
    # Part by part: a part sent twice was resent from the send window, by the log line that names it.
    assert [p for cid in sent for p in harness.part_duplicates_beyond_resends(
        cid, cluster.whatsapp.parts_for(cid), resent)] == []
