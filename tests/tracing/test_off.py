"""Tracing off (no OTLP endpoint, or ``OTEL_SDK_DISABLED=true``) costs an import of nothing: through a whole turn --
the producer's accept, the drain, a tool call, the commit, the send, and a webhook through the ingress app -- no
module of Parley imports anything of OpenTelemetry, and its tracing SDK and exporter are never loaded.

(redis-py 8 loads ``opentelemetry.sdk.metrics`` by itself whenever the SDK is installed, for its own optional
metrics: that is redis-py's, not Parley's, so the probe records who asks for each OpenTelemetry module.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import hashlib, hmac, json, os, sys, time

    OURS = tuple(os.path.join(os.getcwd(), d) + os.sep for d in ("worker", "tasks"))
    asked = []


    class Probe:
        # Records an OpenTelemetry module whose import statement is in Parley's own code; finds nothing itself.
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "opentelemetry":
                frame = sys._getframe(1)
                while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
                    frame = frame.f_back  # the import machinery: the importer is the first frame outside it
                if frame is not None and frame.f_code.co_filename.startswith(OURS):
                    asked.append(name)
            return None


    sys.meta_path.insert(0, Probe())

    from starlette.testclient import TestClient

    from tests.configs import bare_config
    from tests.worker.conftest import make_harness
    from worker import ScriptedModel
    from worker.observability import tracing
    from worker.conversation.scripted import Reply
    from worker.conversation.tools import Tool
    from worker.ingress.app import create_app

    look = Tool("look", "Look around.", {"type": "object", "properties": {}}, lambda: "a quiet room")
    h = make_harness(ScriptedModel([Reply(tool_calls=(("look", {}),)), "done"]), tools=[look],
                     config=bare_config(system_prompt="You are a test."))
    h.client.send_message("447700900123", "hi", message_id="m1")
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["done"], h.channel.sent
    body = json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": "messages",
        "value": {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "1"},
                  "contacts": [{"wa_id": "447700900124"}],
                  "messages": [{"from": "447700900124", "id": "wamid.w1", "timestamp": str(int(time.time())),
                                "type": "text", "text": {"body": "hello"}}]}}]}]}).encode()
    sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    http = TestClient(create_app(h.client, h.store, app_secret="s3cret", verify_token="v"))
    r = http.post("/webhook", content=body, headers={"X-Hub-Signature-256": sig})
    assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
    h.run()
    assert len(h.channel.sent) == 2, h.channel.sent
    assert not tracing.enabled()
    tracing_modules = ("worker.observability.tracing.otel", "worker.observability.tracing.genai", "opentelemetry.sdk.trace",
                       "opentelemetry.exporter.otlp.proto.http.trace_exporter")
    print(json.dumps({"asked": sorted(set(asked)), "loaded": [m for m in tracing_modules if m in sys.modules]}))
""")


@pytest.mark.parametrize("env", [{}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}],
                         ids=["no-endpoint", "sdk-disabled"])
def test_with_tracing_off_a_turn_imports_nothing_of_opentelemetry(env: dict[str, str]) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={**clean, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"asked": [], "loaded": []}


def test_the_probe_would_see_opentelemetry_when_tracing_is_on() -> None:
    """The check above is not vacuous: with an endpoint set, the same turn loads the SDK."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_BSP_EXPORT_TIMEOUT": "200",
          "OTEL_EXPORTER_OTLP_TIMEOUT": "0.2"}
    script = SCRIPT.replace("assert not tracing.enabled()", "assert tracing.enabled()")
    done = subprocess.run([sys.executable, "-c", script], env={**clean, **on}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert "opentelemetry.sdk.trace" in probe["loaded"] and "worker.observability.tracing.otel" in probe["loaded"]
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in probe["asked"]
