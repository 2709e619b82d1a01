"""The service's media glue: what a message envelope becomes for its turn (a seen photo, its caption, a short
answer, or a retry), built from the settings, and a prepared photo carried through a turn."""

from __future__ import annotations

import pytest

from tests.support.fake_whatsapp import MEDIA_SETTINGS, FakeWhatsApp
from worker import metrics
from worker.channels.media_download import CloudMediaFetcher, MediaHosts
from worker.conversation import messages as msgs
from worker.conversation.chat import Chat
from worker.conversation.messages import MediaRef
from worker.conversation.model import Attachment
from worker.conversation.scripted import ScriptedModel
from worker.conversation.state import decode_state
from worker.envelopes.inputs import Envelope, Media
from worker.errors import InputError, MediaRejectedError, MediaUnavailableError, ModelUnavailableError
from worker.runtime import build_media_preparer
from worker.service import ConversationService
from worker.service.drain.media import UNSEEN_CAPTION_PREFIX, MediaPreparer, Prepared
from worker.settings import Settings

LOOPBACK = {"hosts": ["127.0.0.1"], "allow_http": True}  # the stand-in serves plain http on loopback
JPEG = Attachment("image/jpeg", b"\xff\xd8 pixels")
SORRY = "I can only read text."


def photo(caption: str | None = None, media_id: str = "777") -> Envelope:
    return Envelope(kind="message", conversation_id="447700900123", message_id="wamid.1", text=caption,
                    media=Media(id=media_id, mime_type="image/jpeg"))


class Fetcher:
    def __init__(self, outcome: Attachment | Exception) -> None:
        self.outcome = outcome
        self.asked: list[str] = []

    def fetch(self, media_id: str, max_bytes: int | None = None) -> Attachment:
        self.asked.append(media_id)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def count(outcome: str, reason: str) -> float:
    return metrics.MEDIA.labels(outcome, reason)._value.get()


def test_plain_text_is_a_plain_user_message() -> None:
    env = Envelope(kind="message", conversation_id="447700900123", text="hello")
    prepared = MediaPreparer(Fetcher(JPEG), reads_images=True).prepare(env)
    assert prepared.message is not None and prepared.message.content == "hello" and prepared.message.media is None
    assert prepared.attachment is None and prepared.notice is None


def test_a_photo_for_a_model_that_reads_images_is_fetched_and_attached() -> None:
    fetcher = Fetcher(JPEG)
    before = count("attached", "")
    prepared = MediaPreparer(fetcher, reads_images=True, unsupported_reply=SORRY).prepare(photo("the stage door?"))
    assert fetcher.asked == ["777"]
    assert prepared.message is not None and prepared.message.content == "the stage door?"
    assert prepared.message.media == MediaRef(id="777", mime_type="image/jpeg")
    assert prepared.attachment == ("777", JPEG) and prepared.notice is None
    assert count("attached", "") == before + 1


@pytest.mark.parametrize(("preparer", "reason"), [
    (MediaPreparer(Fetcher(JPEG), reads_images=False, unsupported_reply=SORRY), "model"),
    (MediaPreparer(None, reads_images=True, unsupported_reply=SORRY), "no_fetcher"),
    (MediaPreparer(Fetcher(MediaRejectedError("big", reason="too_large")), reads_images=True,
                   unsupported_reply=SORRY), "too_large"),
])
def test_a_photo_the_model_cannot_see_becomes_its_caption_or_the_short_answer(preparer: MediaPreparer,
                                                                              reason: str) -> None:
    before = count("caption", reason), count("notice", reason)
    with_caption = preparer.prepare(photo("is this the theatre?"))
    assert with_caption.message is not None and with_caption.attachment is None
    assert with_caption.message.content == UNSEEN_CAPTION_PREFIX + "is this the theatre?"
    assert with_caption.message.media is None  # nothing the model could be shown later either
    assert preparer.prepare(photo(None)) == Prepared(notice=SORRY)
    assert preparer.prepare(photo("  ")) == Prepared(notice=SORRY)
    assert (count("caption", reason), count("notice", reason)) == (before[0] + 1, before[1] + 2)


def test_a_transient_fetch_failure_is_raised_for_the_drain_to_retry() -> None:
    error = MediaUnavailableError("timed out", provider="whatsapp-media")
    with pytest.raises(ModelUnavailableError):  # the drain's outage path: retried with backoff
        MediaPreparer(Fetcher(error), reads_images=True).prepare(photo("x"))


def test_only_messages_are_prepared() -> None:
    with pytest.raises(InputError):
        MediaPreparer().prepare(Envelope(kind="event", conversation_id="447700900123", text="at the theatre"))


def test_built_from_settings_with_the_real_fetcher_against_the_fake_cloud_api() -> None:
    wa = FakeWhatsApp(access_token="tok").start()
    try:
        wa.add_media("777", b"\x89PNG pixels", "image/png")
        settings = Settings(_env_file=None, whatsapp_api_base_url=wa.base_url, whatsapp_access_token="tok",  # type: ignore[call-arg]
                            media_max_bytes=1024, unsupported_reply=SORRY, **MEDIA_SETTINGS)
        preparer = build_media_preparer(settings, ScriptedModel(reads_images=True))
        assert isinstance(preparer.fetcher, CloudMediaFetcher) and preparer.fetcher.max_bytes == 1024
        prepared = preparer.prepare(photo(""))
        assert prepared.attachment == ("777", Attachment("image/png", b"\x89PNG pixels"))
        assert prepared.message is not None and prepared.message.media == MediaRef("777", "image/png")
        # An expired id (the fake answers 400, code 100): the short answer, not a retry.
        assert preparer.prepare(photo("", media_id="999")) == Prepared(notice=SORRY)
    finally:
        wa.stop()


@pytest.mark.parametrize(("token", "reads", "fetches"), [("tok", True, True), (None, True, False),
                                                         ("tok", False, False)])
def test_settings_choose_whether_to_fetch(token: str | None, reads: bool, fetches: bool) -> None:
    settings = Settings(_env_file=None, whatsapp_access_token=token)  # type: ignore[call-arg]
    preparer = build_media_preparer(settings, ScriptedModel(reads_images=reads))
    assert (preparer.fetcher is not None) is fetches and preparer.reads_images is reads
    assert preparer.unsupported_reply == settings.webhook.unsupported_reply


def test_a_prepared_photo_goes_through_a_turn_and_only_its_reference_is_stored() -> None:
    model = ScriptedModel(["A theatre."], reads_images=True)
    prepared = MediaPreparer(Fetcher(JPEG), reads_images=True).prepare(photo("what is this?"))
    assert prepared.message is not None and prepared.attachment is not None
    result = Chat(model=model).run_turn(None, user=prepared.message, attachments=dict([prepared.attachment]))
    assert model.requests[0].attachments == {"777": JPEG}
    assert decode_state(result.state).messages[0].media == MediaRef("777", "image/jpeg")
    assert JPEG.data not in result.state


def test_the_service_has_a_preparer_that_fetches_nothing_by_default() -> None:
    service = ConversationService(None, Chat(model=ScriptedModel()), None, lambda *a, **k: None)  # type: ignore[arg-type]
    assert isinstance(service.media, MediaPreparer) and service.media.fetcher is None
    assert service.media.prepare(photo(None)).notice == Settings(_env_file=None).webhook.unsupported_reply  # type: ignore[call-arg]


@pytest.mark.parametrize("bad", ["1\n", "..", "../me"])
def test_a_bad_media_id_from_any_producer_is_a_clear_outcome_not_a_crashed_turn(bad: str) -> None:
    """An envelope queued by a producer (or before the ingress checked ids): the fetcher refuses the id before any
    request; the turn goes on with the caption (or the short answer), counted under reason bad_id."""
    wa = FakeWhatsApp().start()
    try:
        fetcher = CloudMediaFetcher(wa.base_url, "test-token", hosts=MediaHosts.of(**LOOPBACK))
        preparer = MediaPreparer(fetcher, reads_images=True, unsupported_reply=SORRY)
        before = count("caption", "bad_id"), count("notice", "bad_id")
        assert preparer.prepare(photo("where?", media_id=bad)).message == msgs.user(UNSEEN_CAPTION_PREFIX + "where?")
        assert preparer.prepare(photo(None, media_id=bad)) == Prepared(notice=SORRY)
        assert (count("caption", "bad_id"), count("notice", "bad_id")) == (before[0] + 1, before[1] + 1)
        assert wa.gets == []
    finally:
        wa.stop()


def test_photos_past_the_turn_budget_are_described_as_not_loaded_not_dropped() -> None:
    """A burst of photos: the ones that fit the turn's bytes are fetched; the rest are not downloaded, and the
    model reads that a photo came (its caption marked, or the 'could not be loaded' line), counted as turn_budget."""
    wa = FakeWhatsApp().start()
    try:
        for i in range(5):
            wa.add_media(f"{i}", bytes([i]) * 3000)
        fetcher = CloudMediaFetcher(wa.base_url, "test-token", 4000, hosts=MediaHosts.of(**LOOPBACK))
        preparer = MediaPreparer(fetcher, reads_images=True, unsupported_reply=SORRY, turn_max_bytes=7000)
        photos = preparer.turn_photos()
        before = count("caption", "turn_budget") + count("notice", "turn_budget")
        got = [preparer.prepare(photo(f"p{i}", media_id=f"{i}"), photos) for i in range(5)]
        assert [g.attachment is not None for g in got] == [True, True, False, False, False]
        assert photos.held == 6000
        # The others did not fit what was left (1000 bytes, by their declared size): never downloaded.
        assert [p for p, _ in wa.gets if p.startswith("/download/")] == ["/download/0", "/download/1"]
        assert [g.message.content for g in got[2:] if g.message] == [UNSEEN_CAPTION_PREFIX + f"p{i}" for i in (2, 3, 4)]
        assert count("caption", "turn_budget") + count("notice", "turn_budget") == before + 3
    finally:
        wa.stop()


def test_by_default_photos_come_only_over_https_from_metas_media_host() -> None:
    """The stand-in's plain-http loopback download is refused unless the test configuration says otherwise: the
    default is no hole."""
    wa = FakeWhatsApp(access_token="tok").start()
    try:
        wa.add_media("777", b"\x89PNG pixels", "image/png")
        settings = Settings(_env_file=None, whatsapp_api_base_url=wa.base_url, whatsapp_access_token="tok",  # type: ignore[call-arg]
                            unsupported_reply=SORRY)
        assert settings.media.hosts == ["lookaside.fbsbx.com"] and not settings.media.allow_http
        before = count("notice", "bad_host")
        assert build_media_preparer(settings, ScriptedModel(reads_images=True)).prepare(photo("")) == Prepared(
            notice=SORRY)
        assert count("notice", "bad_host") == before + 1
        assert [p for p, _ in wa.gets] == ["/v21.0/777"]  # the download was never requested
    finally:
        wa.stop()


def test_media_hosts_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_MEDIA_HOSTS", "lookaside.fbsbx.com, *.fbcdn.net")
    assert Settings(_env_file=None).media.hosts == ["lookaside.fbsbx.com", "*.fbcdn.net"]  # type: ignore[call-arg]
    monkeypatch.setenv("PARLEY_MEDIA_HOSTS", " ")
    with pytest.raises(ValueError):
        Settings(_env_file=None)  # type: ignore[call-arg]
