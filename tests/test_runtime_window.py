"""The window, the template and the pace as the settings build them: WhatsApp gets all three, other channels none."""

from __future__ import annotations

import fakeredis
import pytest
from pydantic import ValidationError

from worker.channels.channel import ConsoleChannel
from worker.channels.pacing import Pacer
from worker.channels.whatsapp import WhatsAppSender
from worker.channels.window import Template
from worker.queue.connections import build_store
from worker.runtime import build_channel, pace_channel
from worker.settings import Settings
from worker.store.interfaces import PaceStore
from worker.store.limits import PaceLimits

WHATSAPP = {"whatsapp_phone_number_id": "106540352242922", "whatsapp_access_token": "tok"}


def test_the_whatsapp_sender_keeps_the_configured_window_and_template() -> None:
    s = Settings(**WHATSAPP, whatsapp_window_hours=12, whatsapp_template="game_update",
                 whatsapp_template_language="de", whatsapp_template_parameter="fixed",
                 whatsapp_template_text="Neue Antwort")
    channel = build_channel(s)
    assert isinstance(channel, WhatsAppSender)
    assert channel.window.seconds == 12 * 3600
    assert channel.window.template == Template("game_update", "de", "fixed", "Neue Antwort")


def test_defaults_are_a_day_and_no_template() -> None:
    channel = build_channel(Settings(**WHATSAPP))
    assert isinstance(channel, WhatsAppSender)
    assert channel.window.seconds == 86_400 and channel.window.template is None


def test_a_fixed_parameter_needs_its_text() -> None:
    with pytest.raises(ValidationError, match="PARLEY_WHATSAPP_TEMPLATE_TEXT"):
        Settings(**WHATSAPP, whatsapp_template="t", whatsapp_template_parameter="fixed")


def test_only_a_whatsapp_sender_is_paced() -> None:
    s = Settings(**WHATSAPP, whatsapp_messages_per_second=200, whatsapp_burst=20, whatsapp_recipient_per_minute=30,
                 whatsapp_recipient_burst=5, whatsapp_pace_max_sleep=1.5)
    store = build_store(s, fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    channel, console = build_channel(s), ConsoleChannel()
    assert isinstance(channel, WhatsAppSender)
    pace_channel(s, store, channel)
    pace_channel(s, store, console)
    pacer = channel.pacer
    assert isinstance(pacer, Pacer) and pacer.sender == "106540352242922" and pacer.max_sleep == 1.5
    assert pacer.limits == PaceLimits(per_second=200, burst=20, recipient_per_second=0.5, recipient_burst=5)
    assert getattr(console, "pacer", None) is None


def test_with_both_limits_off_there_is_no_pacer_and_no_round_trip() -> None:
    s = Settings(**WHATSAPP, whatsapp_messages_per_second=0, whatsapp_recipient_per_minute=0)
    store = build_store(s, fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    assert paced(s, store).pacer is None
    one = Settings(**WHATSAPP, whatsapp_messages_per_second=0, whatsapp_recipient_per_minute=6)
    assert paced(one, store).pacer is not None


def paced(s: Settings, store: PaceStore) -> WhatsAppSender:
    """The settings' WhatsApp sender, given its pace as the service is."""
    channel = build_channel(s)
    assert isinstance(channel, WhatsAppSender)
    pace_channel(s, store, channel)
    return channel
