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
from worker.channels.media_download import CloudMediaFetcher, MediaHosts
from worker.channels.token import TokenHealth
from worker.errors import MediaRejectedError, MediaTokenError, MediaUnavailableError, ModelUnavailableError

PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40  # 10 KiB and a bit
LIMIT = 64 * 1024


@pytest.fixture
def wa() -> Iterator[FakeWhatsApp]:
    fake = FakeWhatsApp().start()
    yield fake
    fake.stop()


# The stand-in serves downloads over plain http on 127.0.0.1: allowed here explicitly, as a test configuration.
LOOPBACK = MediaHosts.of(["127.0.0.1"], allow_http=True)


def fetcher(wa: FakeWhatsApp, **kw: object) -> CloudMediaFetcher:
    """``token`` is the access token; ``token_health`` the alarm it reports to."""
    kw.setdefault("hosts", LOOPBACK)
    access = kw.pop("token", "test-token")
    if "token_health" in kw:
        kw["token"] = kw.pop("token_health")
    return CloudMediaFetcher(wa.base_url, access, kw.pop("max_bytes", LIMIT), **kw)  # type: ignore[arg-type]


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


def test_a_rejected_token_is_held_and_raises_the_alarm(wa: FakeWhatsApp) -> None:
    wa.add_media("1", PHOTO)
    health = TokenHealth()
    with pytest.raises(MediaTokenError) as info:
        fetcher(wa, token="wrong", token_health=health).fetch("1")
    assert info.value.status == 401 and info.value.retryable and health.rejected_since is not None
    assert fetcher(wa, token_health=health).fetch("1").data == PHOTO  # the token fixed: accepted again
    assert health.rejected_since is None


def test_a_download_refused_for_the_token_is_held_too(wa: FakeWhatsApp) -> None:
    wa.add_media("1", PHOTO, download_error=(401, b"Unauthorized"))
    with pytest.raises(MediaTokenError):
        fetcher(wa).fetch("1")


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


@pytest.mark.parametrize("bad", ["../phone/messages", "1?x=1", "", "a/b", "..", ".", "1\n", "1\r\n", "a..b",
                                 ".1", "1.", "1%2F", "1#x", "a:b", " 1", "1" * 129, "１２３"])
def test_an_id_that_could_change_the_path_is_refused_unsent(wa: FakeWhatsApp, bad: str) -> None:
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch(bad)
    assert info.value.reason == "bad_id" and wa.gets == []


@pytest.fixture
def elsewhere() -> Iterator[FakeWhatsApp]:
    """Another loopback server, named ``localhost`` (not on the allowlist): where the token must never go."""
    fake = FakeWhatsApp().start()
    yield fake
    fake.stop()


def _elsewhere_url(other: FakeWhatsApp) -> str:
    return other.http.url.replace("127.0.0.1", "localhost") + "/download/1"


@pytest.mark.parametrize("how", ["url", "redirect"])
def test_a_download_off_the_allowlist_gets_no_request(wa: FakeWhatsApp, elsewhere: FakeWhatsApp, how: str) -> None:
    """The media endpoint names another host, or the allowed host redirects to one: refused before it is sent."""
    elsewhere.add_media("1", PHOTO)
    wa.add_media("1", PHOTO, **{how: _elsewhere_url(elsewhere)})
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch("1")
    assert info.value.reason == "bad_host" and elsewhere.gets == []
    assert [p for p, _ in wa.gets] == (["/v21.0/1"] if how == "url" else ["/v21.0/1", "/download/1"])


def test_plain_http_is_refused_unless_the_test_configuration_allows_it(wa: FakeWhatsApp) -> None:
    wa.add_media("1", PHOTO)
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa, hosts=MediaHosts.of(["127.0.0.1"])).fetch("1")
    assert info.value.reason == "bad_host" and [p for p, _ in wa.gets] == ["/v21.0/1"]
    with pytest.raises(MediaRejectedError):  # the default: Meta's media host, https only
        fetcher(wa, hosts=MediaHosts()).fetch("1")


@pytest.mark.parametrize(("hosts", "url", "allowed"), [
    ((), "https://lookaside.fbsbx.com/whatsapp_business/attachments/?mid=1", True),
    ((), "http://lookaside.fbsbx.com/whatsapp_business/attachments/?mid=1", False),
    ((), "https://lookaside.fbsbx.com.evil.example/x", False),
    ((), "https://evil.example/lookaside.fbsbx.com", False),
    ((), "https://graph.facebook.com/v21.0/1", False),
    (("*.fbsbx.com",), "https://scontent.fbsbx.com/x", True),
    (("*.fbsbx.com",), "https://fbsbx.com.evil.example/x", False),
    (("*.fbsbx.com",), "https://evilfbsbx.com/x", False),
    (("example.com", "127.0.0.1"), "http://example.com/x", False),  # allow_http: loopback addresses only
    (("127.0.0.1",), "http://127.0.0.1:8080/x", True),
    (("127.0.0.1",), "ftp://127.0.0.1/x", False),
])
def test_media_hosts(hosts: tuple[str, ...], url: str, allowed: bool) -> None:
    import httpx

    rule = MediaHosts.of(hosts, allow_http=True) if hosts and "127.0.0.1" in hosts else (
        MediaHosts.of(hosts) if hosts else MediaHosts())
    assert rule.allows(httpx.URL(url)) is allowed


def test_an_api_redirect_off_its_origin_is_not_followed(wa: FakeWhatsApp, elsewhere: FakeWhatsApp) -> None:
    elsewhere.add_media("1", PHOTO)
    wa.add_media("1", PHOTO, info_error=(302, b""), redirect=elsewhere.base_url.replace("127.0.0.1", "localhost")
                 + "/1")
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch("1")
    assert info.value.reason == "bad_host" and elsewhere.gets == []


def test_a_media_url_that_does_not_parse_is_a_bad_answer_not_a_crash(wa: FakeWhatsApp) -> None:
    wa.add_media("1", PHOTO, url="https://lookaside.fbsbx.com:99999999/x")
    with pytest.raises(MediaRejectedError) as info:
        fetcher(wa).fetch("1")
    assert info.value.reason in ("bad_answer", "bad_host")
