"""Replay: a captured signed webhook posted again after its message id left the dedupe memory is refused by the
age of its messages and statuses (PARLEY_WEBHOOK_MAX_AGE_SECONDS), while Meta's own retries still get in."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import ValidationError
from starlette.testclient import TestClient

from tests.ingress.test_ingress import SECRET, VERIFY, Rig, meta_bytes, sign, text_value
from worker.ingress.app import create_app
from worker.settings import Settings, Webhook

HOUR = 3600.0
DEFAULT_AGE = Webhook().max_age_seconds


def body(*, age: float | None, status_age: float | None = None, wamid: str = "wamid.R1") -> bytes:
    value: dict[str, Any] = text_value(wamid, "447700900123", "the secret word")
    if age is None:
        del value["messages"][0]["timestamp"]
    else:
        value["messages"][0]["timestamp"] = str(int(time.time() - age))
    if status_age is not None:
        value["statuses"] = [{"id": "wamid.OUT", "status": "read", "recipient_id": "447700900123",
                              "timestamp": str(int(time.time() - status_age))}]
    return meta_bytes({"entry": [{"changes": [{"field": "messages", "value": value}]}]})


def test_a_replay_after_the_dedupe_window_is_refused_and_nothing_is_queued() -> None:
    rig = Rig()
    # Five days on, the wamid has left the dedupe memory (four days): only the age tells it from a new message.
    r = rig.post(body(age=5 * 24 * HOUR))
    assert r.status_code == 200  # 200: a retry would not make it younger
    assert r.json() == {"accepted": 0, "events": 0, "notices": 0, "duplicates": 0, "statuses": 0, "ignored": 1}
    assert rig.inputs("447700900123") == [] and rig.woken == []


def test_meta_retrying_a_message_never_accepted_for_36_hours_still_gets_in() -> None:
    rig = Rig()
    r = rig.post(body(age=36 * HOUR + 600))  # Meta's last retry, a little late
    assert r.json()["accepted"] == 1 and rig.inputs("447700900123") == [("wamid.R1", "the secret word")]


def test_the_default_lies_between_metas_retries_and_the_dedupe_memory() -> None:
    s = Settings()
    assert 36 * HOUR * 1.5 <= s.webhook.max_age_seconds <= s.store.dedupe_seconds


def test_a_longer_age_than_the_dedupe_memory_is_refused_at_start() -> None:
    with pytest.raises(ValidationError, match="PARLEY_DEDUPE_SECONDS"):
        Settings(webhook_max_age_seconds=5 * 86400, dedupe_seconds=4 * 86400)
    Settings(webhook_max_age_seconds=0, dedupe_seconds=60)  # 0: the check is off


def test_an_old_status_is_not_recorded_and_a_fresh_one_is() -> None:
    rig = Rig()
    old = rig.post(body(age=60, status_age=DEFAULT_AGE + HOUR)).json()
    assert old["accepted"] == 1 and old["statuses"] == 0 and old["ignored"] == 1
    assert rig.store.statuses("447700900123") == []
    fresh = rig.post(body(age=60, status_age=60, wamid="wamid.R2")).json()
    assert fresh["statuses"] == 1 and [s.status for s in rig.store.statuses("447700900123")] == ["read"]


def test_a_message_without_a_timestamp_is_not_held_against_the_player() -> None:
    rig = Rig()
    assert rig.post(body(age=None)).json()["accepted"] == 1


def test_the_age_is_configurable_and_zero_turns_it_off() -> None:
    rig = Rig()
    strict = TestClient(create_app(rig.client, rig.store, app_secret=SECRET, verify_token=VERIFY,
                                   max_age_seconds=HOUR))
    raw = body(age=2 * HOUR)
    assert strict.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)}).json()["ignored"] == 1
    off = TestClient(create_app(rig.client, rig.store, app_secret=SECRET, verify_token=VERIFY, max_age_seconds=0))
    assert off.post("/webhook", content=raw, headers={"X-Hub-Signature-256": sign(raw)}).json()["accepted"] == 1
