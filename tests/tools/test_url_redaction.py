"""A credential in an MCP server's URL (a password, a token in the query string) never reaches a log line, an error
or a metric label: every URL shown goes through worker.http.urls.redact_url. And PARLEY_MCP_HEADERS carries headers for
the servers of PARLEY_MCP_SERVERS, so a token need not be in the URL at all."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY, generate_latest

from tests.support.loopback import LoopbackServer
from tests.support.mcp_game_server import McpProcess, free_port
from worker.conversation import turn_context
from worker.conversation.messages import ToolCall
from worker.conversation.tools import run_tool
from worker.errors import ConfigurationError
from worker.http.urls import redact_url, redact_urls
from worker.settings import Settings
from worker.tools import fixed_tools, load_tools

SECRET = "s3cret-token"


@pytest.mark.parametrize(("url", "shown"), [
    (f"https://bot:{SECRET}@mcp.example:8443/mcp?key={SECRET}#frag", "https://***@mcp.example:8443/mcp?***"),
    (f"http://127.0.0.1:9/mcp?token={SECRET}", "http://127.0.0.1:9/mcp?***"),
    ("http://127.0.0.1:9/mcp", "http://127.0.0.1:9/mcp"),
    (f"http://[::1]:80/a?{SECRET}", "http://[::1]:80/a?***"),
    (f"{SECRET}", "***"),
    (f"http://host:{SECRET}/x", "***"),  # not a URL (the port is no number): hidden whole
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_urls_in_a_message() -> None:
    text = f"Client error '401 Unauthorized' for url 'https://mcp.example/mcp?key={SECRET}' (see https://x.test/)"
    assert redact_urls(text) == "Client error '401 Unauthorized' for url 'https://mcp.example/mcp?***' (see https://x.test/)"


def test_an_mcp_servers_credentials_stay_out_of_logs_errors_and_metrics(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://bot:{SECRET}@127.0.0.1:{free_port()}/mcp?token={SECRET}"  # nothing listens there
    with caplog.at_level(logging.WARNING):
        lt = load_tools(Settings(mcp_servers=url, tool_timeout=1.0, mcp_refresh_seconds=60), mcp_start_wait=2.0)
        try:
            assert lt.mcp is not None and lt.mcp.tools() == []  # down: counted under its redacted URL
        finally:
            lt.close()
    shown = f"http://***@127.0.0.1:{url.split(':')[3].split('/')[0]}/mcp?***"
    assert REGISTRY.get_sample_value("parley_mcp_server_unavailable_total", {"server": shown}) == 1.0
    assert SECRET not in generate_latest(REGISTRY).decode()
    assert caplog.records and all(SECRET not in r.getMessage() for r in caplog.records)
    assert any(shown in r.getMessage() for r in caplog.records)


def test_a_bad_mcp_url_is_refused_without_showing_its_secret() -> None:
    with pytest.raises(ConfigurationError) as caught:
        fixed_tools(Settings(mcp_servers=f"ftp://bot:{SECRET}@host/mcp"))
    assert SECRET not in str(caught.value) and "ftp://***@host/mcp" in str(caught.value)


def test_an_mcp_servers_refusal_naming_its_url_is_logged_redacted(caplog: pytest.LogCaptureFixture) -> None:
    # The SDK raises httpx's status error, whose message quotes the URL, token and all.
    refusing = LoopbackServer(lambda path, headers, body: (401, {"error": "bad token"}, {})).start()
    url = f"{refusing.url}/mcp?token={SECRET}"
    try:
        with caplog.at_level(logging.WARNING):
            lt = load_tools(Settings(mcp_servers=url, tool_timeout=1.0, mcp_refresh_seconds=60), mcp_start_wait=5.0)
            lt.close()
    finally:
        refusing.stop()
    unavailable = [r.getMessage() for r in caplog.records if "is unavailable" in r.getMessage()]
    assert unavailable and all(SECRET not in m for m in unavailable)
    assert any("401" in m and "/mcp?***" in m for m in unavailable), unavailable


@pytest.fixture()
def server() -> Iterator[McpProcess]:
    p = McpProcess().start()
    yield p
    p.stop()


def test_parley_mcp_headers_reach_the_server_with_variables_from_the_environment(
        server: McpProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TOKEN", SECRET)
    monkeypatch.setenv("PARLEY_MCP_SERVERS", server.url)
    monkeypatch.setenv("PARLEY_MCP_HEADERS", json.dumps({server.url: {"Authorization": "Bearer ${MCP_TOKEN}"}}))
    lt = load_tools(Settings(tool_timeout=5.0, mcp_refresh_seconds=60))
    try:
        assert lt.mcp is not None
        tools = {t.name: t for t in lt.mcp.tools()}
        with turn_context("c", "i"):
            m = run_tool(tools, ToolCall(id="call_1", name="bearer", arguments="{}"), default_timeout=10,
                         max_chars=1000)
        assert (m.content, m.is_error) == (f"Bearer {SECRET}", False)
    finally:
        lt.close()


def test_headers_for_a_server_not_in_the_list_or_an_unset_variable_fail_the_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCP_TOKEN", raising=False)
    with pytest.raises(ConfigurationError, match=r"PARLEY_MCP_HEADERS: http://b\.example/mcp\?\*\*\* is not one of"):
        fixed_tools(Settings(mcp_servers="http://a.example/mcp",
                             mcp_headers={f"http://b.example/mcp?k={SECRET}": {"X": "1"}}))
    with pytest.raises(ConfigurationError, match=r"uses \$\{MCP_TOKEN\}, which is not set"):
        fixed_tools(Settings(mcp_servers="http://a.example/mcp",
                             mcp_headers={"http://a.example/mcp": {"Authorization": "Bearer ${MCP_TOKEN}"}}))
