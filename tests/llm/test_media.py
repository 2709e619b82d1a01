"""Photos on the wire: the exact request bodies the providers send for a photo of this turn (content parts,
image blocks) and for an older one (text), against the loopback servers; and which models read pictures."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.llm.servers import ScriptedServer, anthropic_blocks, openai_text, openai_tools
from tests.llm.validation import check_anthropic, check_openai
from tests.support.fake_openai import FakeOpenAI
from worker import Chat, Tool
from worker.conversation import messages as msgs
from worker.conversation.messages import MediaRef
from worker.conversation.model import Attachment
from worker.llm import build_model
from worker.llm.transport import RetryPolicy

PIXELS = b"\x89PNG\r\n\x1a\n tiny"
B64 = base64.b64encode(PIXELS).decode()
OLD, NEW = MediaRef(id="m-old", mime_type="image/jpeg"), MediaRef(id="m-new", mime_type="image/png")
FILES = {NEW.id: Attachment("image/png", PIXELS)}
TOOL = Tool(name="where", description="Where the player is", parameters={"type": "object", "properties": {}},
            handler=lambda: "Harrogate")


def _openai(url: str, **kw: Any) -> Any:
    return build_model("openai", model=kw.pop("model", "gpt-4o-mini"), base_url=url, api_key="sk-test",
                       retry=RetryPolicy(max_retries=0), breaker_threshold=100, **kw)


def _anthropic(server: ScriptedServer, **kw: Any) -> Any:
    return build_model("anthropic", model=kw.pop("model", "claude-haiku-4-5"), base_url=server.url,
                       api_key="ak-test", retry=RetryPolicy(max_retries=0), breaker_threshold=100,
                       prompt_cache=False, **kw)


def _two_photo_turns(chat: Chat) -> None:
    """Turn 1 answers the old photo (no caption); turn 2 a new one with a caption, where the old photo is only a
    reference in the state."""
    state = chat.run_turn(None, user=msgs.user("", media=OLD), attachments={OLD.id: Attachment("image/jpeg", b"x")})
    chat.run_turn(state.state, system="Be brief.", user=msgs.user("Is this the stage door?", media=NEW),
                  attachments=FILES)


def test_openai_sends_this_turns_photo_as_content_parts_and_an_older_one_as_text() -> None:
    fake = FakeOpenAI().start()
    try:
        _two_photo_turns(Chat(model=_openai(fake.base_url)))
        body = fake.requests[-1]
    finally:
        fake.stop()
    check_openai(body)
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "[The player sent a photo]"},
        {"role": "assistant", "content": "ack:", "refusal": None},
        {"role": "user", "content": [
            {"type": "text", "text": "Is this the stage door?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}},
        ]},
    ]


def test_openai_photo_without_caption_is_the_picture_alone(server: ScriptedServer) -> None:
    server.push(openai_text("A theatre."))
    Chat(model=_openai(server.url + "/v1")).run_turn(None, user=msgs.user("", media=NEW), attachments=FILES)
    check_openai(server.requests[0])
    assert server.requests[0]["messages"] == [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64}"}}]}]


def test_openai_every_round_of_a_tool_loop_carries_the_picture(server: ScriptedServer) -> None:
    server.push(openai_tools(("c1", "where", {})), openai_text("The theatre in Harrogate."))
    Chat(model=_openai(server.url + "/v1"), tools=[TOOL]).run_turn(
        None, user=msgs.user("where?", media=NEW), attachments=FILES)
    assert len(server.requests) == 2
    for body in server.requests:
        check_openai(body)
        assert body["messages"][0]["content"][1]["type"] == "image_url"


def test_openai_text_model_gets_the_photo_as_words(server: ScriptedServer) -> None:
    server.push(openai_text("ok"))
    model = _openai(server.url + "/v1", model="llama3")
    assert model.reads_images is False
    Chat(model=model).run_turn(None, user=msgs.user("look", media=NEW), attachments=FILES)
    assert server.requests[0]["messages"] == [{"role": "user", "content": "[The player sent a photo] look"}]


def test_anthropic_sends_an_image_block_then_the_caption_and_an_older_photo_as_text(server: ScriptedServer) -> None:
    server.push(anthropic_blocks({"type": "text", "text": "A theatre."}),
                anthropic_blocks({"type": "text", "text": "Yes."}))
    _two_photo_turns(Chat(model=_anthropic(server)))
    body = server.requests[-1]
    check_anthropic(body)
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "[The player sent a photo]"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A theatre."}]},
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
            {"type": "text", "text": "Is this the stage door?"},
        ]},
    ]
    first = server.requests[0]["messages"][0]["content"]
    assert first == [{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                                  "data": base64.b64encode(b"x").decode()}}]


def test_anthropic_caches_past_an_image_block(server: ScriptedServer) -> None:
    server.push(anthropic_blocks({"type": "text", "text": "ok"}))
    model = build_model("anthropic", model="claude-sonnet-4-5", base_url=server.url, api_key="k",
                        retry=RetryPolicy(max_retries=0))
    Chat(model=model).run_turn(None, user=msgs.user("", media=NEW), attachments=FILES)
    block = server.requests[0]["messages"][0]["content"][-1]
    assert block["type"] == "image" and block["cache_control"] == {"type": "ephemeral"}


@pytest.mark.parametrize(("name", "reads"), [
    ("gpt-4o-mini", True), ("gpt-4.1-nano", True), ("gpt-5", True), ("o1", True), ("o3", True),
    ("o4-mini", True), ("openai/gpt-4o", True), ("o3-mini", False), ("o1-mini", False), ("gpt-3.5-turbo", False),
    ("llama3.1:8b", False), ("gpt-4", False),
])
def test_openai_reads_images_by_name(name: str, reads: bool) -> None:
    assert build_model("openai", model=name).reads_images is reads


def test_openai_vision_option_overrides_the_name() -> None:
    assert build_model("openai", model="llava", vision=True).reads_images is True
    assert build_model("openai", model="gpt-4o", vision=False).reads_images is False


@pytest.mark.parametrize(("name", "reads"), [
    ("claude-haiku-4-5", True), ("claude-3-haiku-20240307", True), ("claude-3-5-sonnet-latest", True),
    ("claude-opus-4-1", True), ("claude-2.1", False), ("claude-instant-1.2", False),
])
def test_anthropic_reads_images_from_claude_3(name: str, reads: bool) -> None:
    assert build_model("anthropic", model=name).reads_images is reads


def test_local_model_reads_no_images() -> None:
    from worker.conversation.model import ModelRequest
    from worker.llm.local_model import LocalModel, _render_plain

    assert build_model("local", model="SmolLM2-135M-Instruct", vision=True).reads_images is False
    assert isinstance(build_model("local", model="x"), LocalModel)
    rendered = _render_plain(ModelRequest(system=None, messages=[msgs.user("hi", media=NEW)], attachments=FILES))
    assert rendered == [{"role": "user", "content": "[The player sent a photo] hi"}]
