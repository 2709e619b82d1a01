"""The Grafana dashboard and compose's "observability" profile, read as Grafana and compose would (neither runs
here): the dashboard answers the questions docs/operations.md lists, from a chosen Prometheus data source; the
profile mounts files that exist, where the provisioning and Prometheus's config look for them, and Prometheus
scrapes the ports compose's Parley processes serve their metrics on."""

from __future__ import annotations

import pathlib
import re

import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tests.support.observability import (
    DASHBOARD,
    OBSERVABILITY,
    ROOT,
    dashboard,
    dashboard_exprs,
    exported_series,
)

COMPOSE = ROOT / "docker" / "compose.yaml"


def test_the_dashboard_answers_every_question_from_its_data_source() -> None:
    board = dashboard()
    assert board["uid"] == "parley-overview" and board["title"] == "Parley"
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
    queries = [p for p in board["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${datasource}" and p["targets"] for p in queries)
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    exprs = [expr for _, expr in dashboard_exprs()]
    # The questions of docs/operations.md ("Dashboard and alerts"), each with the series a panel reads to answer it
    # (a panel's, not an alert's: an alert naming the metric does not stand in for its panel).
    for question, metric in [
        ("turns per second", "parley_turn_seconds_count"), ("replies per second", "parley_deliveries_total"),
        ("latency from webhook to send", "parley_reply_latency_seconds_bucket"),
        ("model latency by provider", "parley_model_request_seconds_bucket"),
        ("model errors by provider", "parley_model_errors_total"), ("tokens and cached tokens", "parley_tokens_total"),
        ("queue depth", "parley_queue_waiting_conversations"),
        ("oldest input age", "parley_queue_oldest_input_age_seconds"),
        ("dead letters by reason", "parley_dead_letters_total"),
        ("duplicates avoided", "parley_duplicate_sends_avoided_total"), ("pacing waits", "parley_pace_waits_total"),
        ("window/template use", "parley_outside_window_total"), ("exporter lag", "parley_record_lag_seconds"),
        ("webhook outcomes", "parley_webhooks_total"),
        ("wake-ups that failed", "parley_wakeups_failed_total"),
        ("inlet entries by outcome", "parley_inlet_entries_total"),
        ("the API's 429 and 404", 'parley_api_requests_total{status=~"429|404"}'),
        ("tokens file loaded or refused", "parley_api_tokens_file_loads_total"),
        ("webhook changes skipped", "parley_webhook_changes_skipped_total"),
        ("opt-outs and opt-ins", "parley_opt_outs_total"),
        ("not sent: opted out", "parley_opted_out_sends_total"),
        ("identity conflicts", "parley_identity_conflicts_total"),
    ]:
        assert any(re.search(rf"\b{re.escape(metric)}(?![a-z0-9_])", expr) for expr in exprs), question
    for title, expr in dashboard_exprs():
        assert "parley_" in expr and expr.count("(") == expr.count(")"), (title, expr)


def test_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for p in dashboard()["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, p["title"]
        cells |= mine


def _mounts(service: dict[str, object]) -> dict[str, pathlib.Path]:
    """Container path -> the file or folder of this repository a service mounts there (named volumes left out)."""
    found = {}
    for volume in service.get("volumes", []):  # type: ignore[attr-defined]
        source, target = str(volume).split(":")[:2]
        if source.startswith("."):
            found[target] = (COMPOSE.parent / source).resolve()
    return found


def test_the_observability_profile_mounts_what_exists_where_it_is_looked_for() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert services["prometheus"]["profiles"] == ["observability"] == services["grafana"]["profiles"]
    assert {"prometheus-data", "grafana-data"} <= set(compose["volumes"])
    prometheus, grafana = _mounts(services["prometheus"]), _mounts(services["grafana"])
    for path in [*prometheus.values(), *grafana.values()]:
        assert path.exists(), path
    config_path = next(a.split("=", 1)[1] for a in services["prometheus"]["command"] if a.startswith("--config.file="))
    config = yaml.safe_load(prometheus[config_path].read_text())
    assert [prometheus[f] for f in config["rule_files"]] == [OBSERVABILITY / "prometheus" / "rules.yml"]
    provisioning = grafana["/etc/grafana/provisioning"]
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    assert source["url"] == "http://prometheus:9090" and source["type"] == "prometheus"
    boards = yaml.safe_load((provisioning / "dashboards" / "parley.yml").read_text())["providers"][0]
    assert grafana[boards["options"]["path"]] == DASHBOARD.parent


def test_prometheus_scrapes_every_parley_process_on_the_port_compose_serves_its_metrics_on() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    config = yaml.safe_load((OBSERVABILITY / "prometheus" / "prometheus.yml").read_text())
    scraped = {sd["names"][0]: sd["port"] for job in config["scrape_configs"] for sd in job["dns_sd_configs"]}
    expected = {name: int(services[name]["environment"]["PARLEY_METRICS_PORT"])
                for name in ("worker", "exporter", "inlet")}
    expected["webhook"] = int(services["webhook"]["command"][services["webhook"]["command"].index("--port") + 1])
    assert scraped == expected


def test_a_scrape_exports_a_histogram_by_its_series_and_a_labelled_counter_before_its_first_count() -> None:
    """What the end-to-end check compares the dashboard's and the rules' names with (tests/e2e)."""
    registry = CollectorRegistry()
    Counter("parley_things_total", "Things.", ["outcome"], registry=registry)  # no child yet: no sample
    Histogram("parley_wait_seconds", "Waits.", registry=registry)
    Gauge("parley_depth", "Depth.", registry=registry)
    names = exported_series(generate_latest(registry).decode())
    assert {"parley_things_total", "parley_wait_seconds_bucket", "parley_wait_seconds_sum",
            "parley_wait_seconds_count", "parley_depth"} <= names
    assert not {"parley_things", "parley_wait_seconds", "parley_depth_total"} & names
