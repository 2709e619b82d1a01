"""Several `parley inlet` processes (real subprocesses) share the stream of a real Redis: every entry reaches its
conversation's mailbox once and in stream order, while one inlet is SIGKILLed mid-batch and another takes its place."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.support.inlet_processes import assert_each_once_in_order, start_inlet, stop_inlets
from tests.support.redis_server import RedisServer, redis_of_its_own
from worker.store.redis_store import ConversationStore

server = pytest.fixture(redis_of_its_own)
CONVERSATIONS, PER_CONVERSATION = 8, 60


def test_inlets_keep_each_conversations_order_through_a_sigkill(server: RedisServer) -> None:
    env = {**os.environ, "REDIS_URL": server.url, "PARLEY_INLET_BATCH": "7", "PARLEY_INLET_CLAIM_IDLE_SECONDS": "1",
           "PARLEY_LOG_LEVEL": "WARNING"}
    r = server.client()
    procs = [start_inlet(env, f"inlet-{i}") for i in range(3)]
    try:
        for i in range(PER_CONVERSATION):
            pipe = r.pipeline(transaction=False)
            for c in range(CONVERSATIONS):
                body = {"kind": "event", "conversation_id": f"c{c}", "text": f"{i}"}
                if i % 2:
                    body["message_id"] = f"c{c}-{i}"  # the other half get the entry's id
                pipe.xadd("parley:inlet", {"envelope": json.dumps(body)})
            pipe.execute()
            if i == PER_CONVERSATION // 3:
                procs[0].send_signal(signal.SIGKILL)  # mid-stream, likely mid-batch
                procs[0].wait(10)
                procs.append(start_inlet(env, "inlet-3"))
            time.sleep(0.01)
        store = ConversationStore(r)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sum(store.inbox_depth(f"c{c}") for c in range(CONVERSATIONS)) >= CONVERSATIONS * PER_CONVERSATION \
                    and int(r.xpending("parley:inlet", "parley-inlet")["pending"]) == 0:
                break
            time.sleep(0.2)
    finally:
        stop_inlets(procs)
    assert_each_once_in_order(store, CONVERSATIONS, PER_CONVERSATION)
    assert r.xlen("parley:inlet:dead") == 0
    assert int(r.xpending("parley:inlet", "parley-inlet")["pending"]) == 0
