from __future__ import annotations

import io
import json
import logging

from tests.worker.conftest import make_harness
from worker.logs import JsonFormatter


def test_json_lines_carry_conversation_and_message_ids_but_no_text() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.INFO)
    try:
        h = make_harness()
        h.client.send_message("447700900123", "my secret address is 1 Oxford Street", message_id="wamid.S1")
        h.run()
    finally:
        root.removeHandler(handler)
        root.setLevel(old)
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    turn = [x for x in lines if x["event"] == "turn applied"]
    assert turn and turn[0]["conversation_id"] == "447700900123" and turn[0]["message_id"] == "wamid.S1"
    assert turn[0]["level"] == "info" and turn[0]["ts"].endswith("Z")
    assert "Oxford Street" not in stream.getvalue()
