"""The alert rules (docker/observability/prometheus/rules.yml) under the real promtool: `promtool check rules`, and
`promtool test rules` on rules_test.yml, whose cases fire each alert on the series that should fire it and on no
healthy fleet. A rule broken on purpose makes those cases fail, so they do test the rules. promtool is Debian's
prometheus package (scripts/install-promtool in CI)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest
import yaml

from tests.docs.test_links import _anchors
from tests.support import observability
from tests.support.observability import OBSERVABILITY, ROOT, RULES, RULES_TEST, alert_rules, promtool


def _run(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules() -> None:
    done = _run("check", "rules", str(RULES), cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in done.stdout


def test_every_alert_case_passes_promtool_test_rules() -> None:
    done = _run("test", "rules", RULES_TEST.name, cwd=RULES_TEST.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_case_that_fires_it_and_one_that_does_not() -> None:
    cases = [c for t in yaml.safe_load(RULES_TEST.read_text())["tests"] for c in t["alert_rule_test"]]
    for rule in alert_rules():
        mine = [c for c in cases if c["alertname"] == rule["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"no case fires {rule['alert']}"
        assert any(not c["exp_alerts"] for c in mine), f"no case shows {rule['alert']} quiet"


# Each rule broken one way: too blunt (fires on the healthy fleet) or too dull (never fires).
BROKEN = [
    ("max(parley_provider_auth_failing) > 0", "max(parley_provider_auth_failing) >= 0"),
    ("max by (phone_number_id) (parley_whatsapp_token_rejected) > 0",
     "max by (phone_number_id) (parley_whatsapp_token_rejected) > 1"),
    ("increase(parley_dead_letters_total[15m])) >= 3", "increase(parley_dead_letters_total[15m])) >= 1"),
    ("(parley_queue_oldest_input_age_seconds) > 120", "(parley_queue_oldest_input_age_seconds) > 1200"),
    ("max(parley_record_lag_seconds) > 600", "max(parley_record_lag_seconds) > 10"),
    ('{outcome="bad_signature"}[15m])) > 0', '{outcome="bad_signature"}[15m])) >= 0 or vector(1)'),
    ("(parley_model_breaker_open) > 0", "(parley_model_breaker_open) > 0 unless on() vector(1)"),
    ("parley_wakeups_failed_total[3m]", "parley_wakeups_failed_total[10m]"),
    ("\n          > (max_over_time", "\n          < (max_over_time"),
    ('{outcome="dead"}[15m])) >= 3', '{outcome="dead"}[15m])) >= 1'),
    ("increase(parley_identity_conflicts_total[1h])) > 0", "increase(parley_identity_conflicts_total[1h])) > 1"),
]


@pytest.mark.parametrize(("good", "bad"), BROKEN, ids=[r["alert"] for r in alert_rules()])
def test_a_broken_rule_fails_its_cases(tmp_path: pathlib.Path, good: str, bad: str) -> None:
    text = RULES.read_text()
    assert text.count(good) == 1, good
    (tmp_path / "rules.yml").write_text(text.replace(good, bad))
    shutil.copy(RULES_TEST, tmp_path / RULES_TEST.name)
    assert _run("check", "rules", "rules.yml", cwd=tmp_path).returncode == 0  # still a valid rule
    done = _run("test", "rules", RULES_TEST.name, cwd=tmp_path)
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr, done.stdout


def test_every_alert_says_what_and_points_at_its_runbook() -> None:
    anchors = _anchors(ROOT / "docs" / "operations.md")
    for rule in alert_rules():
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], rule["alert"]
        page, _, anchor = notes["runbook_url"].partition("#")
        assert page == "docs/operations.md" and anchor in anchors, (rule["alert"], notes["runbook_url"])
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]


def test_promtool_checks_the_compose_prometheus_config(tmp_path: pathlib.Path) -> None:
    """compose's prometheus.yml, with the rules where compose mounts them pointed at the file here."""
    config = yaml.safe_load((OBSERVABILITY / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules.yml"]
    config["rule_files"] = [str(RULES)]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    done = _run("check", "config", "prometheus.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_without_promtool_ci_installs_it_and_fails_when_it_cannot(monkeypatch: pytest.MonkeyPatch, ci: str,
                                                                   outcome: type[BaseException]) -> None:
    ran: list[list[str]] = []
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(observability.shutil, "which", lambda name: None)
    monkeypatch.setattr(observability.subprocess, "run", lambda argv, **kw: ran.append(argv))
    with pytest.raises(outcome):
        promtool()
    assert ran == ([[str(ROOT / "scripts" / "install-promtool")]] if ci else [])
