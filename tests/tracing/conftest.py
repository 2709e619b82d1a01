from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.otlp_receiver import OtlpReceiver, otel_env
from worker.observability import tracing
from worker.testing import reset_tracing


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver().start()
    yield r
    r.stop()


@pytest.fixture
def traced(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """Tracing on in this process, exporting to ``receiver``; off again afterwards."""
    for key, value in otel_env(receiver, "parley-test").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    reset_tracing()
    assert tracing.enabled()
    yield receiver
    reset_tracing()
    monkeypatch.undo()
    reset_tracing()
