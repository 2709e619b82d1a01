from __future__ import annotations

import io
import json
import logging

from tests.worker.conftest import make_harness
from worker.observability.logs import JsonFormatter


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


def test_httpx_request_lines_are_quiet_unless_debugging() -> None:
    from worker.observability.logs import configure_logging
    from worker.settings import Settings

    root = logging.getLogger()
    saved = (root.level, list(root.handlers), logging.getLogger("httpx").level)
    try:
        for h in [h for h in root.handlers if getattr(h, "_parley", False)]:
            root.removeHandler(h)
        configure_logging(Settings(log_level="INFO"))
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert logging.getLogger("parley.service").isEnabledFor(logging.INFO)
        for h in [h for h in root.handlers if getattr(h, "_parley", False)]:
            root.removeHandler(h)
        logging.getLogger("httpx").setLevel(logging.NOTSET)
        configure_logging(Settings(log_level="DEBUG"))
        assert logging.getLogger("httpx").isEnabledFor(logging.DEBUG)
    finally:
        for h in [h for h in root.handlers if getattr(h, "_parley", False)]:
            root.removeHandler(h)
        root.setLevel(saved[0])
        for h in saved[1]:
            if h not in root.handlers:
                root.addHandler(h)
        logging.getLogger("httpx").setLevel(saved[2])
