"""PARLEY_WHATSAPP_NUMBERS_FILE: a good file in YAML or JSON, and every bad one a clear error at start naming the
entry; how a conversation id names its number (the default number's ids unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.errors import ConfigurationError
from worker.runtime import build_channel
from worker.runtime.numbers_file import load_numbers
from worker.settings import Settings
from worker.settings.business_numbers import route

MAIN, QUIZ = "106540352242922", "106540352242923"
ENV = {"WA_MAIN": "token-main", "WA_QUIZ": "token-quiz"}
PLAYER_ID = "16505551234"

GOOD_YAML = f"""
numbers:
  - phone_number_id: "{MAIN}"
    access_token: ${{WA_MAIN}}
  - phone_number_id: {QUIZ}
    access_token: Bearer-less-${{WA_QUIZ}}
    system_prompt: You are the quiz master.
"""


def write(tmp_path: Path, text: str, name: str = "numbers.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_yaml_file_reads_every_number_with_its_token_from_the_environment(tmp_path: Path) -> None:
    numbers = load_numbers(write(tmp_path, GOOD_YAML), env=ENV)
    assert [n.phone_number_id for n in numbers.all] == [MAIN, QUIZ]  # an unquoted id is read as the digits
    assert numbers.default.access_token == "token-main"
    assert numbers.others[0].access_token == "Bearer-less-token-quiz"
    assert numbers.others[0].system_prompt == "You are the quiz master." and numbers.default.system_prompt is None
    assert "token" not in repr(numbers)  # tokens never in a log line


def test_a_json_file_reads_the_same(tmp_path: Path) -> None:
    body = {"numbers": [{"phone_number_id": MAIN, "access_token": "${WA_MAIN}"},
                        {"phone_number_id": QUIZ, "access_token": "${WA_QUIZ}", "tools_file": None}]}
    numbers = load_numbers(write(tmp_path, json.dumps(body), "numbers.json"), env=ENV)
    assert [(n.phone_number_id, n.access_token) for n in numbers.all] == [(MAIN, "token-main"),
                                                                           (QUIZ, "token-quiz")]


@pytest.mark.parametrize(("text", "names"), [
    (GOOD_YAML.replace("${WA_QUIZ}", "${WA_GONE}"), ["numbers[1] (106540352242923)", "access_token", "WA_GONE"]),
    (GOOD_YAML.replace(f"{QUIZ}", "+44 7700"), ["numbers[1] (+44 7700)", "phone_number_id", "digits"]),
    (GOOD_YAML.replace("system_prompt", "system_promt"), ["numbers[1] (106540352242923)", "system_promt"]),
    (GOOD_YAML.replace("    access_token: ${WA_MAIN}\n", ""), ["numbers[0] (106540352242922)", "access_token"]),
    (GOOD_YAML.replace(QUIZ, MAIN), ["106540352242922", "more than once"]),
    ("numbers: []\n", ["numbers", "at least 1"]),
    ("numbers: [\n", ["not valid YAML"]),
    (GOOD_YAML + "    tools_file: /nowhere/tools.yaml\n", ["numbers[1] (106540352242923)", "tools_file",
                                                         "cannot read"]),
])
def test_a_bad_file_is_a_clear_error_naming_the_entry(tmp_path: Path, text: str, names: list[str]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_numbers(write(tmp_path, text), env=ENV)
    message = str(caught.value)
    assert "PARLEY_WHATSAPP_NUMBERS_FILE" in message
    assert all(name in message for name in names), message


def test_a_numbers_tools_file_gives_it_its_own_http_tools_and_lists_no_mcp_server(tmp_path: Path) -> None:
    from worker.tools import number_tools

    tools = write(tmp_path, json.dumps({"tools": [{"name": "hint", "description": "a hint", "parameters": {
        "type": "object"}, "url": "http://127.0.0.1:9/hint"}]}), "quiz-tools.json")
    numbers = load_numbers(write(tmp_path, GOOD_YAML + f"    tools_file: {tools}\n"), env=ENV)
    got = number_tools(numbers, Settings())
    assert list(got) == [QUIZ] and [t.name for t in got[QUIZ]] == ["hint"]
    tools.write_text(json.dumps({"tools": [], "mcp_servers": [{"url": "http://127.0.0.1:9/mcp"}]}), encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"numbers\[1\] \(106540352242923\): tools_file .*HTTP tools only"):
        load_numbers(write(tmp_path, GOOD_YAML + f"    tools_file: {tools}\n"), env=ENV)


def test_an_empty_token_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"numbers\[0\] \(106540352242922\): access_token is empty"):
        load_numbers(write(tmp_path, GOOD_YAML), env={**ENV, "WA_MAIN": " "})


def test_a_missing_file_names_itself(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"PARLEY_WHATSAPP_NUMBERS_FILE .*absent\.yaml: cannot read it"):
        load_numbers(tmp_path / "absent.yaml")


def test_the_environment_number_is_the_default_and_is_added_when_the_file_leaves_it_out(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD_YAML)
    assert load_numbers(path, default_id=QUIZ, env=ENV).default.phone_number_id == QUIZ  # moved first
    added = load_numbers(path, default_id="999", default_token="env-token", env=ENV)
    assert (added.default.phone_number_id, added.default.access_token) == ("999", "env-token")
    assert [n.phone_number_id for n in added.others] == [MAIN, QUIZ]
    with pytest.raises(ConfigurationError, match="WHATSAPP_PHONE_NUMBER_ID 999 is not in the file"):
        load_numbers(path, default_id="999", env=ENV)


def test_a_worker_with_a_bad_file_does_not_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WA_QUIZ", raising=False)
    monkeypatch.setenv("WA_MAIN", "token-main")
    settings = Settings(whatsapp_numbers_file=str(write(tmp_path, GOOD_YAML)))
    with pytest.raises(ConfigurationError, match=r"numbers\[1\] \(106540352242923\): access_token uses \$\{WA_QUIZ\}"):
        build_channel(settings)


def test_ids_on_the_default_number_are_unchanged_and_others_carry_their_number(tmp_path: Path) -> None:
    numbers = load_numbers(write(tmp_path, GOOD_YAML), env=ENV)
    assert numbers.address(MAIN, "16505551234") == "16505551234"
    assert numbers.address(QUIZ, "16505551234") == f"{QUIZ}.16505551234"
    assert numbers.address(QUIZ, "US.13491208655302741918") == f"{QUIZ}.US.13491208655302741918"
    for pnid in (MAIN, QUIZ):
        for player in ("16505551234", "US.13491208655302741918"):
            assert numbers.route(numbers.address(pnid, player)) == (pnid, player)
    # A BSUID on the default number is never read as a number: its prefix is a country code, not digits.
    assert route("US.13491208655302741918", MAIN) == (MAIN, "US.13491208655302741918")


def test_one_number_without_a_file_keeps_todays_channel() -> None:
    from worker.channels.whatsapp import WhatsAppSender

    channel = build_channel(Settings(whatsapp_phone_number_id=MAIN, whatsapp_access_token="t"))
    assert isinstance(channel, WhatsAppSender) and channel.url.endswith(f"/{MAIN}/messages")


class _SeeingModel:
    reads_images = True


def test_each_numbers_photo_fetcher_has_its_token_and_shares_its_senders_token_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.channels.by_number import NumbersChannel
    from worker.channels.media_download import CloudMediaFetcher
    from worker.channels.whatsapp import WhatsAppSender
    from worker.runtime import build_media_preparer

    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    settings = Settings(whatsapp_numbers_file=str(write(tmp_path, GOOD_YAML)))
    channel = build_channel(settings)
    media = build_media_preparer(settings, _SeeingModel())  # type: ignore[arg-type]
    assert isinstance(channel, NumbersChannel) and media.fetcher_for is not None
    for cid, pnid, token in ((PLAYER_ID, MAIN, "token-main"), (f"{QUIZ}.{PLAYER_ID}", QUIZ, "Bearer-less-token-quiz")):
        fetcher = media.fetcher_for(cid)
        assert isinstance(fetcher, CloudMediaFetcher)
        with fetcher._api.lease() as client:
            assert client.headers["authorization"] == f"Bearer {token}"
        assert fetcher.token is channel.senders[pnid].token  # one alarm per number: a refusal holds both
    assert media.fetcher_for(f"555000.{PLAYER_ID}") is None  # a number no longer configured: the caption only
    # One number, no file: the sender and the fetcher share that number's state too.
    one = Settings(whatsapp_phone_number_id=MAIN, whatsapp_access_token="t")
    sender, single = build_channel(one), build_media_preparer(one, _SeeingModel()).fetcher  # type: ignore[arg-type]
    assert isinstance(sender, WhatsAppSender) and isinstance(single, CloudMediaFetcher)
    assert single.token is sender.token and sender.token.phone_number_id == MAIN

