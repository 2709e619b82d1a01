"""A rejected WhatsApp access token holds deliveries and photo fetches, through the service and the real sender and
fetcher against the loopback WhatsApp stand-in: nothing is dead-lettered, a gauge and one log line per change of
state say so, and once the stand-in accepts the token again the held replies go out by themselves, once each, in
order. Also a send that timed out after it went out: settled like a part a crash left in flight, not resent at once."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from tests.configs import bare_config
from tests.support.fake_whatsapp import FakeWhatsApp
from tests.support.store_kit import raw
from tests.worker.conftest import Harness, make_harness
from worker import ScriptedModel
from worker.channels.media_download import CloudMediaFetcher, MediaHosts
from worker.channels.token import ACCEPTED_LOG, REJECTED_LOG, TokenHealth
from worker.channels.whatsapp import WhatsAppSender
from worker.channels.window import ServiceWindow
from worker.conversation.model import ModelRequest
from worker.envelopes.inputs import Media
from worker.service import RetryLater, ServiceConfig
from worker.service.deliver.inflight import RESEND_LOG
from worker.service.drain import Drainer
from worker.service.drain.media import MediaPreparer

CIDS = ("447700900123", "447700900456")
PHOTO = b"\xff\xd8\xff\xe0 pixels"


@pytest.fixture
def api() -> Iterator[FakeWhatsApp]:
    a = FakeWhatsApp().start()
    yield a
    a.stop()


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def echo(req: ModelRequest) -> str:
    return "ack:" + req.messages[-1].content


def whatsapp(api: FakeWhatsApp, health: TokenHealth, config: ServiceConfig | None = None,
             timeout: float = 15.0) -> Harness:
    sender = WhatsAppSender(phone_number_id="106540352242922", access_token="tok", base_url=api.base_url,
                            window=ServiceWindow(0), token=health, timeout=timeout)
    return make_harness(ScriptedModel(default=echo), channel=sender,
                        config=config or bare_config(system_prompt="test", max_retry_delay=30.0))


def run_until_quiet(h: Harness, rounds: int = 100) -> list[float]:
    """Run wake-ups; each RetryLater is a retry that fires later (as Celery would run it): time passes, it is
    queued again. Returns the countdowns asked for."""
    countdowns = []
    for _ in range(rounds):
        try:
            h.run()
        except RetryLater as exc:
            countdowns.append(exc.countdown)
            for cid in CIDS:
                raw(h.store).delete(h.store.keys(cid).hold)
            h.woken.extend(("deliver", cid) for cid in CIDS)
            h.woken.extend(("drain", cid) for cid in CIDS)
            continue
        if not any(h.store.outbox_depth(cid) for cid in CIDS) and not h.woken:
            return countdowns
    raise AssertionError("still held after every retry")


def dead(h: Harness) -> list[bytes]:
    return [d for cid in CIDS for d in h.store.dead_letters(cid)]


def test_a_rejected_token_holds_every_reply_then_they_go_out_once_in_order(
        api: FakeWhatsApp, caplog: pytest.LogCaptureFixture) -> None:
    health = TokenHealth()
    # Far more refusals than a reply may fail (delivery_max_attempts 3): none of them may dead-letter a reply.
    h = whatsapp(api, health, bare_config(system_prompt="test", delivery_max_attempts=3, max_retry_delay=30.0))
    api.fail(190, status=401, times=12, message="Error validating access token: Session has expired")
    held = sample("parley_deliveries_total", outcome="held")
    with caplog.at_level(logging.INFO, logger="parley.delivery"):
        for i in range(3):
            for cid in CIDS:
                h.client.send_message(cid, f"m{i}", message_id=f"{cid}-m{i}")
        try:
            h.run()
        except RetryLater:
            pass
        assert sample("parley_whatsapp_token_rejected", phone_number_id="") == 1
        countdowns = run_until_quiet(h)
    assert dead(h) == []
    for cid in CIDS:  # each reply once, in the order of the messages
        assert api.texts_for(cid) == ["ack:m0", "ack:m1", "ack:m2"]
        assert h.store.outbox_depth(cid) == 0
    assert len(api.received) == 12 + 6  # the refused tries and one accepted send per reply
    assert sample("parley_whatsapp_token_rejected", phone_number_id="") == 0
    assert sample("parley_deliveries_total", outcome="held") == held + 12
    said = [r.getMessage() for r in caplog.records if r.name == "parley.delivery"]
    assert len(said) == 2 and said[0].startswith(REJECTED_LOG) and said[1].startswith(ACCEPTED_LOG)
    assert countdowns and max(countdowns) <= 30.0


def test_a_401_without_a_code_holds_too(api: FakeWhatsApp) -> None:
    health = TokenHealth()
    h = whatsapp(api, health, bare_config(system_prompt="test", delivery_max_attempts=1))
    for _ in range(3):
        api.errors.append((401, {"error": {"message": "Unauthorized"}}, {}))
    h.client.send_message(CIDS[0], "hi", message_id="m1")
    run_until_quiet(h)
    assert dead(h) == [] and api.texts_for(CIDS[0]) == ["ack:hi"]


def photo_harness(api: FakeWhatsApp, health: TokenHealth) -> Harness:
    model = ScriptedModel(default=lambda req: f"saw {len(req.attachments)} photo(s): {req.messages[-1].content}",
                          reads_images=True)
    h = make_harness(model, config=bare_config(system_prompt="test", max_model_retries=2, max_attempts=2))
    fetcher = CloudMediaFetcher(api.base_url, "test-token", hosts=MediaHosts.of(["127.0.0.1"], allow_http=True),
                                token=health)
    media = MediaPreparer(fetcher, reads_images=True)
    h.service.media = media
    h.service.drainer = Drainer(h.store, h.service.chat, h.service.wake, h.service.config, h.service.heartbeat,
                                deliverer=h.service.deliverer, media=media)
    return h


def test_a_photo_refused_for_the_token_holds_the_turn_instead_of_using_the_caption(api: FakeWhatsApp) -> None:
    health = TokenHealth()
    h = photo_harness(api, health)
    api.add_media("1003", PHOTO)
    api.access_token = "the new token"  # the worker's token no longer works
    h.client.send_message(CIDS[0], "the stage door?", message_id="m1", media=Media(id="1003"))
    h.client.send_message(CIDS[0], "and now?", message_id="m2")
    held = sample("parley_inputs_total", kind="message", outcome="held")
    for _ in range(6):  # three times the retry budget of an outage: still held, not dead-lettered
        with pytest.raises(RetryLater):
            h.run()
        assert sample("parley_whatsapp_token_rejected", phone_number_id="") == 1
        raw(h.store).delete(h.store.keys(CIDS[0]).hold)
        h.woken.append(("drain", CIDS[0]))
    assert h.model.requests == [] and h.channel.sent == [] and dead(h) == []
    assert sample("parley_inputs_total", kind="message", outcome="held") == held + 6
    api.access_token = "test-token"  # fixed
    h.run()
    assert [t for _, t, _ in h.channel.sent] == ["saw 1 photo(s): the stage door?", "saw 0 photo(s): and now?"]
    assert sample("parley_whatsapp_token_rejected", phone_number_id="") == 0 and dead(h) == []


def test_a_send_that_timed_out_is_settled_as_a_crash_window_part_not_resent_at_once(
        api: FakeWhatsApp, caplog: pytest.LogCaptureFixture) -> None:
    """Without status webhooks: the part keeps its in-flight mark; the next attempt resends it, counted as a
    send-window hit and logged as such (the stand-in had it: the player sees it twice, and ops can see why)."""
    h = whatsapp(api, TokenHealth(), bare_config(system_prompt="test", deliver_inline=False), timeout=0.3)
    h.client.send_message(CIDS[0], "hi", message_id="m1")
    h.run(defer=("deliver",))
    window = sample("parley_duplicate_send_window_total")
    api.delay = 0.6  # past the client's timeout: the stand-in records the send, the answer comes too late
    with pytest.raises(RetryLater) as info:
        h.service.deliver(CIDS[0])
    assert info.value.countdown >= 1.0  # not at once
    time.sleep(0.5)  # the stand-in answers (and records) the send after its delay
    assert len(api.sent) == 1 and raw(h.store).hget(h.store.keys(CIDS[0]).sent, "inflight") is not None
    api.delay = 0.0
    with caplog.at_level(logging.WARNING, logger="parley.service"):
        h.service.deliver(CIDS[0])
    assert sample("parley_duplicate_send_window_total") == window + 1
    assert [r.getMessage() for r in caplog.records].count(RESEND_LOG) == 1
    assert api.texts_for(CIDS[0]) == ["ack:hi", "ack:hi"] and dead(h) == []


def test_a_send_that_timed_out_is_marked_sent_when_a_status_webhook_shows_it_arrived(api: FakeWhatsApp) -> None:
    h = whatsapp(api, TokenHealth(), bare_config(system_prompt="test", deliver_inline=False, status_webhooks=True,
                                                   resend_grace_ms=60_000), timeout=0.3)
    h.client.send_message(CIDS[0], "hi", message_id="m1")
    h.run(defer=("deliver",))
    avoided = sample("parley_duplicate_sends_avoided_total")
    api.delay = 0.6
    with pytest.raises(RetryLater):
        h.service.deliver(CIDS[0])
    time.sleep(0.5)
    api.delay = 0.0
    with pytest.raises(RetryLater):  # no status yet: wait for one (no resend)
        h.service.deliver(CIDS[0])
    sent = api.sent[0]
    ref = sent["body"]["biz_opaque_callback_data"].split("|")
    h.store.record_status(CIDS[0], sent["wamid"], "sent", reply_id=ref[1], part=int(ref[2]))
    h.service.deliver(CIDS[0])
    assert len(api.sent) == 1 and h.store.outbox_depth(CIDS[0]) == 0
    assert h.store.delivered(CIDS[0])[0][1] == [sent["wamid"]]
    assert sample("parley_duplicate_sends_avoided_total") == avoided + 1
