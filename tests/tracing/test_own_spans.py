"""A deployment's own tool may add spans with OpenTelemetry's API: the provider Parley sets up is the global one, and
the tool's span is a child of its ``execute_tool`` span (the handler's thread runs in the turn's context). In a
process of its own, since the global provider can be set once per process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.support.otlp_receiver import OtlpReceiver, otel_env

SCRIPT = textwrap.dedent("""
    from opentelemetry import trace

    from tests.configs import bare_config
    from tests.worker.conftest import make_harness
    from worker import ScriptedModel
    from worker.observability import tracing
    from worker.conversation.scripted import Reply
    from worker.conversation.tools import Tool


    def lookup():
        with trace.get_tracer("game").start_as_current_span("game lookup"):
            return "a quiet room"


    look = Tool("look", "Look around.", {"type": "object", "properties": {}}, lookup)
    h = make_harness(ScriptedModel([Reply(tool_calls=(("look", {}),)), "done"]), tools=[look],
                     config=bare_config(system_prompt="You are a test."))
    h.client.send_message("447700900123", "hi", message_id="m1")
    h.run()
    tracing.flush()
""")


def test_a_tools_own_span_is_a_child_of_its_execute_tool_span(receiver: OtlpReceiver) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={**clean, **otel_env(receiver, "parley-tools")},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert receiver.wait_for(lambda: bool(receiver.named("game lookup")), 10), [s.name for s in receiver.spans]
    [own] = receiver.named("game lookup")
    [tool] = receiver.named("execute_tool look")
    assert own.parent == tool.span_id and own.trace_id == tool.trace_id


APP = textwrap.dedent("""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.worker.conftest import make_harness
    from worker.observability import tracing

    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    trace.set_tracer_provider(provider)  # the producer's own set-up, before Parley's first span
    h = make_harness()
    with trace.get_tracer("app").start_as_current_span("handle order"):
        h.client.send_message("447700900123", "hi", message_id="m1")
    tracing.flush()
    print(sorted(s.name for s in exported.get_finished_spans()))
""")


def test_an_application_with_its_own_provider_gets_parleys_spans_through_it(receiver: OtlpReceiver) -> None:
    """A producer's service that set up OpenTelemetry itself: Parley's spans go through its provider (its exporter,
    its sampler), not a second export."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", APP], env={**clean, **otel_env(receiver, "parley-app")},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "['accept', 'handle order']"
    assert receiver.requests == 0

