"""Delivery status webhooks, built from the shared fixtures, delivered out of order to the real ingress app against
the machine's Redis: a message's status only moves forward (sent -> delivered -> read; failed is final), whatever
order they arrive in and however often Meta retries them; a status carrying the callback data a reply part was sent
with is kept with that part while it is in flight; ``parley show`` shows the latest status of each message."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.ingress.test_outcomes import RedisRig, payload_of, real_redis
from tests.support.store_kit import StoreKit, raw
from tests.support.whatsapp_fixtures import needs_fixtures
from worker import cli
from worker.envelopes.inputs import ReplyRecord, part_callback

__all__ = ["real_redis"]

pytestmark = needs_fixtures

CID = "447700900123"
WAMID = "wamid.HBgLNDQ3NzAwOTAwMTIzFQIAERgSQzZGNUVFOTgxMUUyMkI3MzVBAA=="
FORWARD = {"sent": "status_sent.json", "delivered": "status_delivered.json", "read": "status_read.json"}
FAILED = ["status_failed_131047.json", "status_failed_131049.json", "status_failed_131026_in_the_wild.json",
          "status_failed_130472_pywa.json"]


@pytest.fixture
def rig(real_redis: redis.Redis) -> Iterator[RedisRig]:
    rig = RedisRig(real_redis)
    yield rig
    rig.cleanup()


def status_body(name: str, *, wamid: str = WAMID, recipient: str = CID, callback: str | None = None) -> dict[str, Any]:
    """A fixture's body, about our message ``wamid`` to ``recipient`` (Meta's samples each name another message)."""
    payload = copy.deepcopy(payload_of(name))
    for st in payload["entry"][0]["changes"][0]["value"]["statuses"]:
        st["id"] = wamid
        st["recipient_id"] = recipient
        st.pop("recipient_user_id", None)
        if callback is not None:
            st["biz_opaque_callback_data"] = callback
    return payload


def latest(rig: RedisRig, cid: str = CID) -> dict[str, str]:
    return {s.provider_id: s.status for s in rig.store.statuses(cid)}


@pytest.mark.parametrize("order", list(itertools.permutations(FORWARD)))
def test_statuses_move_forward_whatever_order_they_arrive_in(rig: RedisRig, order: tuple[str, ...]) -> None:
    for status in order:
        r = rig.post(status_body(FORWARD[status]))
        assert r.status_code == 200 and r.json()["statuses"] == 1
    assert latest(rig) == {WAMID: "read"}
    for status in order:  # Meta retries every one of them, later
        assert rig.post(status_body(FORWARD[status])).status_code == 200
    assert latest(rig) == {WAMID: "read"}


@pytest.mark.parametrize("failed", FAILED)
@pytest.mark.parametrize("at", [0, 1, 2, 3])
def test_failed_is_final(rig: RedisRig, failed: str, at: int) -> None:
    """``failed`` lands anywhere in the sequence; whatever comes after it, the message stays failed, with the
    error the failure carried."""
    order = [FORWARD["sent"], FORWARD["delivered"], FORWARD["read"]]
    order.insert(at, failed)
    for name in order:
        assert rig.post(status_body(name)).status_code == 200
    [st] = rig.store.statuses(CID)
    assert st.status == "failed"
    code = payload_of(failed)["entry"][0]["changes"][0]["value"]["statuses"][0]["errors"][0]["code"]
    assert st.detail.startswith(f"{code}: ")


def test_one_batch_out_of_order(rig: RedisRig) -> None:
    """Meta batches statuses of several messages into one POST, in no particular order."""
    other = WAMID.replace("QzZG", "QzZH")
    body = status_body(FORWARD["read"])
    statuses = body["entry"][0]["changes"][0]["value"]["statuses"]
    for name, wamid in [(FORWARD["delivered"], WAMID), (FORWARD["delivered"], other), (FORWARD["sent"], WAMID),
                        (FORWARD["sent"], other)]:
        statuses.extend(status_body(name, wamid=wamid)["entry"][0]["changes"][0]["value"]["statuses"])
    r = rig.post(body)
    assert r.status_code == 200 and r.json()["statuses"] == 5
    assert latest(rig) == {WAMID: "read", other: "delivered"}


def test_a_status_naming_a_part_in_flight_is_kept_with_the_part(rig: RedisRig) -> None:
    """The reply went to another recipient than the conversation id: the callback data names the conversation, so
    the status lands with the reply's own keys, and with the part still marked in flight."""
    store = rig.store
    reply_id = "wamid.in-1"
    queue_reply(rig, reply_id)
    token, head = store.begin_delivery(CID, 10_000)
    assert token and head is not None and (head.reply_id, head.part) == (reply_id, 0)
    callback = part_callback(CID, reply_id, 0)
    # `read` before anything else: the part is known to have reached WhatsApp, and keeps the best status.
    for name in (FORWARD["read"], FORWARD["sent"]):
        assert rig.post(status_body(name, recipient="447700900999", callback=callback)).status_code == 200
    progress = raw(store).hgetall(store.keys(CID).sent)
    assert (progress[b"seen_part"], progress[b"seen"], progress[b"seen_id"]) == (
        f"{reply_id}:0".encode(), b"read", WAMID.encode())
    assert latest(rig) == {WAMID: "read"} and latest(rig, "447700900999") == {}


def test_callback_data_set_by_someone_else_is_left_alone(rig: RedisRig) -> None:
    """Another sender on the same number may use the field for its own JSON: the recipient decides, as before."""
    foreign = json.dumps({"source": "api", "uuid": "fuif-0deu"})
    for name in (FORWARD["sent"], FORWARD["delivered"]):
        assert rig.post(status_body(name, callback=foreign)).status_code == 200
    assert latest(rig) == {WAMID: "delivered"}


def test_parley_show_shows_the_latest_status_of_each_message(rig: RedisRig, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    other = WAMID.replace("QzZG", "QzZH")
    for name, wamid in [(FORWARD["read"], WAMID), (FORWARD["sent"], other), (FORWARD["delivered"], WAMID),
                        ("status_failed_131047.json", other), (FORWARD["delivered"], other)]:
        assert rig.post(status_body(name, wamid=wamid)).status_code == 200
    monkeypatch.setattr(cli, "_store", lambda: rig.store)
    assert cli.main(["show", CID]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {s["provider_id"]: s["status"] for s in shown["statuses"]} == {WAMID: "read", other: "failed"}
    assert next(s for s in shown["statuses"] if s["provider_id"] == other)["detail"].startswith("131047: ")


def queue_reply(rig: RedisRig, reply_id: str) -> None:
    """A reply waiting in the outbox (to another recipient), committed the way a turn commits one."""
    store = rig.store
    store.accept(CID, b"x", reply_id)
    kit = StoreKit(store)
    lease = kit.acquire(CID, 10_000)
    assert lease
    snap = kit.head(CID)
    record = ReplyRecord(reply_id=reply_id, conversation_id=CID, recipient="447700900999", parts=["hello"])
    store.commit(CID, lease.token, expected_version=snap.version, input_id=reply_id, new_state=b"s",
                 reply=record.to_bytes())
    store.release(CID, lease.token)
