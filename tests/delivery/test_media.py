"""Fetching a player's photo through the Cloud API media endpoints, against the loopback fake WhatsApp: the
token on both GETs, the size bounds (declared, Content-Length, and what is actually served), and each failure
typed as permanent or transient."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.support.fake_whatsapp import FakeWhatsApp
from tests.support.workers import wait_until
from worker.delivery.media import CloudMediaFetcher
from worker.errors import MediaRejectedError, MediaUnavailableError, ModelUnavailableError

PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40  # 10 KiB and a bit
LIMIT = 64 * 1024


@pytest.fixture
def wa() -> Iterator[FakeWhatsApp]:
    fake = FakeWhatsApp().start()
    yield fake
    fake.stop()


def fetcher(wa: FakeWhatsApp, **kw: object) -> CloudMediaFetcher:
    return CloudMediaFetcher(wa.base_url, kw.pop("token", "test-token"), kw.pop("max_bytes", LIMIT), **kw)  # type: ignore[arg-type]


def test_fetch_returns_the_bytes_and_sends_the_token_on_both_gets(wa: FakeWhatsApp) -> None:
    wa.add_media("1234", PHOTO, "image/jpeg")
    got = fetcher(wa).fetch("1234")
    assert got.data == PHOTO and got.mime_type == "image/jpeg"
    assert [p for p, _ in wa.gets] == ["/v21.0/1234", "/download/1234"]
    assert all(h["authorization"] == "Bearer test-token" for _, h in wa.gets)


def test_declared_size_over_the_limit_is_refused_before_downloading(wa: FakeWhatsApp) -> None:
    wa.add_media("big", PHOTO, declared_size=LIMIT + 1)
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch("big")
    assert info.value.reason == "too_large" and not info.value.retryable
    assert [p for p, _ in wa.gets] == ["/v21.0/big"]


def test_content_length_over_the_limit_is_refused_unread(wa: FakeWhatsApp) -> None:
    # The JSON says small; the download's honest Content-Length says otherwise.
    wa.add_media("cl", b"x" * (LIMIT + 10), declared_size=100)
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch("cl")
    assert info.value.reason == "too_large"


def test_a_server_that_lies_and_streams_without_end_is_cut_off(wa: FakeWhatsApp) -> None:
    # 128 MiB offered with no Content-Length and a file_size of 100: we stop reading just past the limit.
    wa.add_media("liar", b"y" * 65536, declared_size=100, stream=True, repeat=2048)
    started = time.monotonic()
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch("liar")
    assert info.value.reason == "too_large"
    assert time.monotonic() - started < 5
    assert wait_until(lambda: wa.streams_ended == 1, 10)  # the server's stream is over: its count is final
    assert 0 < wa.streamed < 32 * 1024 * 1024  # the server gave up long before its 128 MiB: we hung up


def test_a_lying_content_length_under_the_truth_reads_no_more_than_it_says(wa: FakeWhatsApp) -> None:
    wa.add_media("short", b"z" * (LIMIT * 4), declared_size=10, content_length="10")
    assert fetcher(wa).fetch("short").data == b"z" * 10


def test_not_an_image_is_refused(wa: FakeWhatsApp) -> None:
    wa.add_media("voice", b"OggS", "audio/ogg; codecs=opus")
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch("voice")
    assert info.value.reason == "not_image"


def test_unknown_or_expired_media_id_is_permanent(wa: FakeWhatsApp) -> None:
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch("404404")
    assert info.value.reason == "refused" and info.value.status == 400


def test_a_download_404_is_permanent(wa: FakeWhatsApp) -> None:
    wa.add_media("gone", PHOTO, download_error=(404, b"gone"))
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch("gone")
    assert info.value.status == 404


def test_a_rejected_token_is_permanent(wa: FakeWhatsApp) -> None:
    wa.add_media("1", PHOTO)
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa, token="wrong").fetch("1")
    assert info.value.status == 401


@pytest.mark.parametrize("where", ["info_error", "download_error"])
def test_a_500_is_transient_and_retried_like_a_model_outage(wa: FakeWhatsApp, where: str) -> None:
    wa.add_media("1", PHOTO, **{where: (500, {"error": {"message": "oops", "code": 2}})})
    with pytest.raises(MediaUnavailableError) as info:
        fetcher(wa).fetch("1")
    assert info.value.retryable and isinstance(info.value, ModelUnavailableError)


def test_throttling_is_transient(wa: FakeWhatsApp) -> None:
    wa.add_media("1", PHOTO, info_error=(429, {"error": {"message": "slow down", "code": 80007}}))
    with pytest.raises(MediaUnavailableError):
        fetcher(wa).fetch("1")


def test_a_timeout_is_transient(wa: FakeWhatsApp) -> None:
    wa.add_media("slow", PHOTO, delay=1.0)
    with pytest.raises(MediaUnavailableError, match="timed out"):
        fetcher(wa, timeout=0.2).fetch("slow")


def test_a_refused_connection_is_transient() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(MediaUnavailableError, match="unreachable"):
        CloudMediaFetcher(f"http://127.0.0.1:{port}/v21.0", "t", LIMIT).fetch("1")


@pytest.mark.parametrize("bad", ["../phone/messages", "1?x=1", "", "a/b"])
def test_an_id_that_could_change_the_path_is_refused_unsent(wa: FakeWhatsApp, bad: str) -> None:
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch(bad)
    assert info.value.reason == "bad_id" and wa.gets == []
