"""The dashboard and the alert rules under docker/observability, read as the tests need them: the metric names
their PromQL expressions name, and the series names a process's ``/metrics`` text exports."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
from typing import Any

import yaml

from tests.support.redis_server import in_ci, skip_or_fail

ROOT = pathlib.Path(__file__).resolve().parents[2]
OBSERVABILITY = ROOT / "docker" / "observability"
DASHBOARD = OBSERVABILITY / "grafana" / "dashboards" / "parley.json"
RULES = OBSERVABILITY / "prometheus" / "rules.yml"
RULES_TEST = OBSERVABILITY / "prometheus" / "rules_test.yml"

_METRIC = re.compile(r"\b(parley_[a-z0-9_]+)\b")
_TYPE = re.compile(r"^# TYPE (\S+) (\w+)$", re.M)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", re.M)


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, expression) of every query of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def named_metrics() -> dict[str, set[str]]:
    """Every metric name the dashboard's queries and the rules' expressions use, with where each is used."""
    where: dict[str, set[str]] = {}
    used = [(f"dashboard: {title}", expr) for title, expr in dashboard_exprs()]
    used += [(f"rule: {r['alert']}", r["expr"]) for r in alert_rules()]
    for place, expr in used:
        for name in _METRIC.findall(expr):
            where.setdefault(name, set()).add(place)
    return where


def exported_series(exposition: str) -> set[str]:
    """The series names a ``/metrics`` text lets PromQL name: every sample's, and for each declared family those it
    exports once observed (a counter's ``_total``, a histogram's ``_bucket``/``_sum``/``_count``), since a labelled
    family shows no sample before its first labels()."""
    names = set(_SAMPLE.findall(exposition))
    for name, kind in _TYPE.findall(exposition):
        if kind == "counter":
            names.add(name if name.endswith("_total") else f"{name}_total")
        elif kind in ("histogram", "summary"):
            names.update({f"{name}_sum", f"{name}_count"} | ({f"{name}_bucket"} if kind == "histogram" else set()))
        else:
            names.add(name)
    return names


def promtool() -> str:
    """promtool: Debian's prometheus package, installed by scripts/install-promtool in CI when it is missing;
    skipped elsewhere, failed in CI when it cannot be had."""
    found = shutil.which("promtool")
    if found is None and in_ci():
        subprocess.run([str(ROOT / "scripts" / "install-promtool")], check=True, timeout=900)
        found = shutil.which("promtool")
    if found is None:
        skip_or_fail("no promtool (CI installs Debian's prometheus package with scripts/install-promtool)")
        raise AssertionError("unreachable")  # pragma: no cover
    return found
