"""`parley inlet` as real subprocesses for the inlet's crash tests, and what those tests check at the end."""

from __future__ import annotations

import signal
import subprocess
import sys

from worker.envelopes.inputs import decode_envelope
from worker.store.redis_store import ConversationStore


def start_inlet(env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "worker.cli", "inlet"], env={**env, "HOSTNAME": name},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_inlets(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(15)


def assert_each_once_in_order(store: ConversationStore, conversations: int, per_conversation: int) -> None:
    """Conversation ``c<n>``'s mailbox holds the texts ``0`` ... ``per_conversation - 1``, each once, in order."""
    for c in range(conversations):
        texts = [decode_envelope(payload).text for _, payload in store.inbox(f"c{c}")]
        assert texts == [str(i) for i in range(per_conversation)], f"c{c} holds {texts}"
