"""The autoscaling examples in docker/autoscaling/ agree with what the workers export: the metric names and the
queue label exist, the target is the worker, fleet-wide gauges are aggregated with max() (a sum() would count each
worker's copy), and the bounds keep a worker to take over from a lost host."""

from __future__ import annotations

import pathlib
import re

import yaml

from tasks.app import QUEUE
from worker.service.backlog import OLDEST, WAITING

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPORTED = {WAITING, OLDEST}


def _load(name: str) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker" / "autoscaling" / name).read_text())


def test_the_keda_scaled_object_queries_the_exported_gauges_with_max() -> None:
    doc = _load("keda-scaledobject.yaml")
    assert doc["kind"] == "ScaledObject" and doc["apiVersion"].startswith("keda.sh/")
    spec = doc["spec"]
    assert spec["scaleTargetRef"]["name"] == "parley-worker"
    assert 2 <= spec["minReplicaCount"] < spec["maxReplicaCount"]
    queried = set()
    for trigger in spec["triggers"]:
        assert trigger["type"] == "prometheus"
        query = trigger["metadata"]["query"]
        m = re.fullmatch(r'max\((\w+)\{queue="(\w+)"\}\)', query)
        assert m, query
        assert m.group(2) == QUEUE
        queried.add(m.group(1))
        assert float(trigger["metadata"]["threshold"]) > 0
    assert queried == EXPORTED


def test_the_hpa_targets_the_worker_on_the_exported_gauges() -> None:
    doc = _load("hpa.yaml")
    assert doc["kind"] == "HorizontalPodAutoscaler" and doc["apiVersion"] == "autoscaling/v2"
    spec = doc["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "parley-worker"}
    assert 2 <= spec["minReplicas"] < spec["maxReplicas"]
    names = set()
    for metric in spec["metrics"]:
        ext = metric["external"]
        names.add(ext["metric"]["name"])
        assert ext["metric"]["selector"]["matchLabels"] == {"queue": QUEUE}
        assert float(ext["target"]["value"]) > 0
    assert names == EXPORTED
