"""Wiring: builds the model, chat, channel and service from :class:`~worker.settings.Settings` (the Redis client and
the store come from :mod:`worker.queue.connections`).

Shared by the Celery tasks, the CLI and the demo, so that all of them agree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from worker.channels.channel import Channel, ConsoleChannel, WebhookChannel
from worker.channels.window import ServiceWindow, Template
from worker.conversation.chat import Chat
from worker.conversation.compaction import Compactor
from worker.conversation.model import Model
from worker.conversation.recall.archive import Archive
from worker.conversation.recall.reading import Recall, default_mode
from worker.conversation.resident import ResidentCache
from worker.conversation.tokens import CalibratingModel, UsageCalibratedCounter
from worker.conversation.tools import Tool
from worker.http.pool import use_lean_transport
from worker.queue.connections import build_store
from worker.queue.connections import redis_client as redis_client  # an entry point others import from here
from worker.runtime import compaction_chain
from worker.runtime.numbers_file import numbers_from_settings
from worker.service import ConversationService, MediaPreparer, Presence, ServiceConfig, Wake
from worker.settings import Settings
from worker.store.interfaces import PaceStore
from worker.store.limits import PaceLimits
from worker.store.redis_store import ConversationStore

DEFAULT_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-haiku-4-5", "local": "SmolLM2-135M-Instruct"}


def build_model_from_settings(settings: Settings) -> Model:
    from worker.llm import build_model

    provider = settings.llm.effective_provider()
    options: dict[str, Any] = {
        "timeout": settings.llm.timeout,
        "connect_timeout": settings.llm.connect_timeout,
        "max_retries": settings.llm.max_retries,
        "max_tokens": settings.llm.max_tokens,
        "breaker_threshold": settings.llm.breaker_threshold,
        "breaker_reset": settings.llm.breaker_reset,
    }
    if provider == "openai":
        # max_completion_tokens vs max_tokens is chosen by the model's family in the provider.
        key = settings.llm.openai_api_key.get_secret_value() if settings.llm.openai_api_key else None
        return build_model("openai", model=settings.llm.model or DEFAULT_MODELS["openai"],
                           base_url=settings.llm.openai_base_url, api_key=key, **options)
    if provider == "anthropic":
        key = settings.llm.anthropic_api_key.get_secret_value() if settings.llm.anthropic_api_key else None
        return build_model("anthropic", model=settings.llm.model or DEFAULT_MODELS["anthropic"],
                           base_url=settings.llm.anthropic_base_url, api_key=key,
                           prompt_cache=settings.llm.anthropic_prompt_cache,
                           thinking_budget=settings.llm.anthropic_thinking_budget, **options)
    options.pop("breaker_threshold")
    options.pop("breaker_reset")
    if "max_tokens" not in settings.llm.model_fields_set:
        # The hosted models' default (1,024) lets the 135M local model run on in a loop for a minute when it does
        # not stop by itself (the demo's first answer did): it keeps its own, shorter default unless one is set.
        options.pop("max_tokens")
    return build_model("local", model=settings.llm.model or DEFAULT_MODELS["local"], **options)


def build_compactor(settings: Settings, model: Model) -> Compactor:
    """The compactor chain the settings choose (see :func:`worker.runtime.compaction_chain.build_compactor`)."""
    return compaction_chain.build_compactor(settings, model)


def build_archive(settings: Settings, store: ConversationStore, model: Model) -> Recall | None:
    """How the worker's chat reads the conversations' archives in Redis (``PARLEY_RECALL``, unset: by the model's
    provider); None when recall is off. The search counts its results by the four characters a token estimate (a
    count of each message by the chat's counter would cost a tokenizer pass per message); the quoted block is
    counted again by the chat's own counter."""
    from worker.store.recall_reader import RedisArchiveReader

    mode = settings.memory.recall or default_mode(model.provider)
    if mode == "off":
        return None
    return Recall(RedisArchiveReader(store.client, store.keys), mode,
                  settings.memory.recall_max_tokens)


def build_chat(settings: Settings, model: Model | None = None, *, tools: Any = (),
               tool_source: Callable[[], Sequence[Tool]] | None = None, archive: Archive | None = None) -> Chat:
    """The chat the worker runs: the model, the memory policy of the settings (counter, compactor chain, a
    budget that leaves the answer room in the context window), the fixed tools, and ``tool_source`` for tools
    offered turn by turn (MCP servers, which may come and go).

    With the ``usage`` counter, the model is wrapped so that every reported usage calibrates the counter."""
    model = model or build_model_from_settings(settings)
    counter = compaction_chain.build_counter(settings, model.provider, model.model_name)
    if isinstance(counter, UsageCalibratedCounter):
        model = CalibratingModel(model, counter)
    return Chat(
        model=model,
        compactor=build_compactor(settings, model),
        counter=counter,
        tools=tools,
        tool_source=tool_source,
        tool_timeout=settings.tooling.tool_timeout,
        max_tool_iterations=settings.tooling.max_tool_iterations,
        max_reply_parts=settings.tooling.max_reply_parts,
        auto_compact=False,  # the worker compacts in a follow-up task
        idle_gap_seconds=settings.memory.idle_gap_seconds,
        reset_phrases=settings.memory.reset_phrases,
        max_state_bytes=settings.memory.max_state_bytes,
        state_format=settings.memory.state_format,
        max_pinned=settings.memory.max_pinned,
        facts_placement=settings.memory.facts_placement,
        max_input_chars=settings.memory.max_input_chars,
        max_tokens=settings.llm.max_tokens,
        archive=archive,
    )


def build_channel(settings: Settings) -> Channel:
    """WhatsApp when configured (several numbers with ``PARLEY_WHATSAPP_NUMBERS_FILE``), else a generic webhook
    when configured, else the console."""
    numbers = numbers_from_settings(settings.whatsapp)
    if numbers is not None:
        from worker.channels.by_number import NumbersChannel
        from worker.channels.whatsapp import WhatsAppSender

        return NumbersChannel(numbers, lambda n, token: WhatsAppSender(
            base_url=settings.whatsapp.api_base_url, phone_number_id=n.phone_number_id,
            access_token=n.access_token, window=service_window(settings), token=token))
    if settings.whatsapp.phone_number_id and settings.whatsapp.access_token:
        from worker.channels.whatsapp import WhatsAppSender

        return WhatsAppSender(
            base_url=settings.whatsapp.api_base_url,
            phone_number_id=settings.whatsapp.phone_number_id,
            access_token=settings.whatsapp.access_token.get_secret_value(),
            window=service_window(settings),
        )
    if settings.delivery.reply_webhook_url:
        return WebhookChannel(settings.delivery.reply_webhook_url)
    return ConsoleChannel(sys.stdout)


def service_window(settings: Settings) -> ServiceWindow:
    """WhatsApp's customer-service window and the template sent outside it, from the settings."""
    template = None
    wa = settings.whatsapp
    if wa.template:
        template = Template(wa.template, wa.template_language, wa.template_parameter, wa.template_text,
                            wa.template_header_image, tuple(wa.template_more_parameters),
                            tuple(wa.template_quick_replies))
    return ServiceWindow(settings.whatsapp.window_seconds, template)


def pace_channel(settings: Settings, store: PaceStore, channel: Channel) -> None:
    """Give each WhatsApp sender of ``channel`` the pace the fleet shares for its number (with several numbers, each
    its own); the other channels have no such limits."""
    from worker.channels.by_number import NumbersChannel
    from worker.channels.pacing import Pacer
    from worker.channels.whatsapp import WhatsAppSender

    if settings.whatsapp.messages_per_second <= 0 and settings.whatsapp.recipient_per_minute <= 0:
        return  # both limits off: no round trip to Redis per send
    senders = (list(channel.senders.values()) if isinstance(channel, NumbersChannel)
               else [channel] if isinstance(channel, WhatsAppSender) else [])
    limits = PaceLimits(per_second=settings.whatsapp.messages_per_second, burst=settings.whatsapp.burst,
                        recipient_per_second=settings.whatsapp.recipient_per_second,
                        recipient_burst=settings.whatsapp.recipient_burst)
    for sender in senders:
        sender.pacer = Pacer(store, sender.phone_number_id, limits, max_sleep=settings.whatsapp.pace_max_sleep)


def build_media_preparer(settings: Settings, model: Model) -> MediaPreparer:
    """Photos for the model: fetched through the Cloud API when WhatsApp's access token is set and the model reads
    images (``reads_images``), with the token of the number the player wrote to; otherwise the caption, or
    ``PARLEY_UNSUPPORTED_REPLY`` without one."""
    from worker.channels.media_download import CloudMediaFetcher, MediaHosts
    from worker.channels.token import TokenHealth, for_number

    reads = bool(getattr(model, "reads_images", False))  # a model from outside may predate the attribute
    wa = settings.whatsapp
    hosts = MediaHosts.of(settings.media.hosts, settings.media.allow_http)

    def fetcher(token: str, health: TokenHealth | None) -> CloudMediaFetcher:
        return CloudMediaFetcher(wa.api_base_url, token, settings.media.max_bytes, hosts=hosts, token=health)

    def prepared(one: CloudMediaFetcher | None = None, by_number: Any = None) -> MediaPreparer:
        return MediaPreparer(one, reads_images=reads, unsupported_reply=settings.webhook.unsupported_reply,
                             turn_max_bytes=settings.media.turn_max_bytes, fetcher_for=by_number)

    if not reads:
        return prepared()
    numbers = numbers_from_settings(wa)
    if numbers is not None:
        from worker.channels.by_number import fetcher_for

        return prepared(by_number=fetcher_for(numbers, lambda n, health: fetcher(n.access_token, health)))
    if not wa.access_token:
        return prepared()
    return prepared(fetcher(wa.access_token.get_secret_value(),
                            for_number(wa.phone_number_id) if wa.phone_number_id else None))


def service_config(settings: Settings) -> ServiceConfig:
    """The service's knobs: the settings' groups it reads; a turn may run as long as a task may (the heartbeat's
    bound)."""
    from worker.game_context import load_context_source

    numbers = numbers_from_settings(settings.whatsapp)
    turns = None
    if numbers is not None:
        from worker.service.number_turns import NumberTurns
        from worker.tools import number_tools

        turns = NumberTurns(numbers, number_tools(numbers, settings))
    return ServiceConfig(drain=settings.drain, delivery=settings.delivery, burst=settings.burst,
                         budget=settings.budget, system_prompt=settings.llm.prompt(),
                         model_name=settings.llm.model, record=settings.record.enabled,
                         max_hold_ms=settings.broker.task_time_limit_ms,
                         game_context=settings.game_context, context_source=load_context_source(settings),
                         numbers=turns, opt_out=settings.opt_out,
                         archive_max_bytes=settings.store.recall_max_bytes,
                         # PARLEY_RECALL=off writes no archive; any other mode, or none set, archives.
                         archive_on=settings.memory.recall != "off")


def offered_reply_tools(settings: Settings, channel: Channel, taken: set[str]) -> list[Any]:
    """The model's reply tools (send_location, send_buttons, ...) on the WhatsApp channel unless
    PARLEY_WHATSAPP_REPLY_TOOLS=false; a game tool of the same name keeps its name."""
    from worker.channels.by_number import NumbersChannel
    from worker.channels.whatsapp import WhatsAppSender
    from worker.tools.reply_tools import reply_tools

    if not isinstance(channel, WhatsAppSender | NumbersChannel) or not settings.whatsapp.reply_tools:
        return []
    return [t for t in reply_tools() if t.name not in taken]


def build_service(settings: Settings, wake: Wake, *, model: Model | None = None, channel: Channel | None = None,
                  tools: Any = None) -> ConversationService:
    """``tools=None`` (the worker's case) loads the deployment's tools from the settings (worker.tools)."""
    source = None
    use_lean_transport(settings.llm.http_client == "lean")
    channel = channel or build_channel(settings)
    if tools is None:
        from worker.tools import load_tools

        loaded = load_tools(settings)
        tools, source = loaded.fixed, (loaded.mcp.tools if loaded.mcp is not None else None)
        tools = [*tools, *offered_reply_tools(settings, channel, {t.name for t in tools})]
    store = build_store(settings)
    model = model or build_model_from_settings(settings)
    chat = build_chat(settings, model, tools=tools, tool_source=source,
                      archive=build_archive(settings, store, model))
    pace_channel(settings, store, channel)
    return ConversationService(
        store,
        chat,
        channel,
        wake,
        service_config(settings),
        presence=build_presence(settings, channel),
        media=build_media_preparer(settings, chat.model),
        residents=ResidentCache(settings.store.state_cache_bytes),
    )


def build_presence(settings: Settings, channel: Channel) -> Presence:
    """Read marks and the typing indicator (``PARLEY_TYPING_INDICATOR``); a no-op for channels without them."""
    return Presence(channel, enabled=settings.delivery.typing_indicator)
