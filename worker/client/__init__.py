"""The producer API: webhook handlers and game engines put inputs on a conversation's mailbox.

    client = ConversationClient.from_env()
    client.send_message("447700900123", "Where is the next clue?", message_id=wamid)
    client.send_event("447700900123", "User has just tagged Harrogate Theatre", message_id=event_id)

Each call validates the input (a bad one raises :class:`~worker.errors.InputError` at once and nothing is
queued), appends it to the conversation's mailbox (a resubmitted ``message_id`` is ignored), and wakes a
worker. The inputs of one conversation are applied in the order these calls returned.

With ``at=`` (an aware datetime) an input is validated the same way and held in Redis until then; when due it is
accepted into the mailbox as if it were sent at that moment (see :mod:`worker.store.timers` and docs/producers.md,
"Timers"): ``cancel_scheduled`` drops one not yet due.

Every input comes in one way, in two public steps that the HTTP API, the inlet and these methods all take:
``client.inputs`` builds and checks it (:mod:`worker.client.builder`, no I/O), ``client.intake`` accepts it and wakes
a worker by the one rule (:mod:`worker.client.intake`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from worker import metrics
from worker.client.builder import CheckedInput, InputBuilder
from worker.client.intake import Intake, Submitted
from worker.durable_record import entries
from worker.envelopes import operator_input
from worker.envelopes.addresses import validate_conversation_id
from worker.envelopes.inputs import Media
from worker.errors import InputError
from worker.queue.connections import build_store
from worker.queue.wakeup import AcceptWake, Waker, accept_wake, celery_waker
from worker.settings import Settings, get_settings
from worker.store.answers import Pause, WakePush
from worker.store.redis_store import ConversationStore

__all__ = ["CheckedInput", "ConversationClient", "Submitted"]


class ConversationClient:
    """Enqueue chat turns, game events, resets and deletions for Parley's workers.

    ``wake`` is called with the conversation id when a worker should look at it; ``from_url`` and ``from_env``
    send the workers' ``parley.drain`` task (see :mod:`worker.queue.wakeup`), tests and other brokers pass their own.
    ``accept_wake``: the broker is the store's Redis, and the accept script pushes the wake-up itself, in the same
    round trip (``from_url`` and ``from_env`` set it up when they may: :func:`worker.queue.wakeup.accept_wake`); ``wake``
    then serves only where the script did not (a Cluster store).

    ``inputs`` and ``intake`` are the two steps every input takes (see the module): a caller that accepts inputs its
    own way (a batch, on an event loop) builds them with ``inputs`` and accepts them through ``intake``.
    """

    def __init__(self, store: ConversationStore, wake: Waker, *, max_text_chars: int = 16_000,
                 coalesce_wakeups: bool = True, accept_wake: AcceptWake | None = None) -> None:
        self.store = store
        self._wake = wake
        self._accept_wake = accept_wake
        self.max_text_chars = max_text_chars
        self.coalesce_wakeups = coalesce_wakeups
        self.inputs = InputBuilder(self)
        self.intake = Intake(self)

    @classmethod
    def from_url(cls, redis_url: str, *, broker_url: str | None = None, wake: Waker | None = None,
                 **settings: Any) -> ConversationClient:
        """A client for the Redis at ``redis_url`` (also the Celery broker unless ``broker_url`` is given)."""
        configured = Settings(redis_url=redis_url, broker_url=broker_url, **settings)
        return cls._from_settings(configured, wake)

    @classmethod
    def from_env(cls, *, wake: Waker | None = None) -> ConversationClient:
        """A client configured from the environment (``REDIS_URL``, ``PARLEY_*``)."""
        return cls._from_settings(get_settings(), wake)

    @classmethod
    def _from_settings(cls, settings: Settings, wake: Waker | None = None) -> ConversationClient:
        # A waker of the caller's own is theirs to call: the accept pushes no wake-up of its own then.
        return cls(build_store(settings), wake or celery_waker(settings), max_text_chars=settings.memory.max_input_chars,
                   accept_wake=None if wake else accept_wake(settings))

    def accept_wake_push(self, conversation_id: str) -> WakePush | None:
        """What an accept of an input of ``conversation_id`` is handed to push the worker's wake-up itself, in its
        own round trip, when the input needs one; None when this client's wake-ups are published by its waker
        (:meth:`publish_wake`) instead. For a caller that runs the store's accept itself (the HTTP API on its loop)."""
        if self._accept_wake is None:
            return None
        return self._accept_wake.push(conversation_id, every=not self.coalesce_wakeups)

    def resolve(self, conversation_id: str) -> str:
        """The conversation ``conversation_id`` names: a player's phone number and business-scoped user id lead to
        the same one once a webhook linked them (:mod:`worker.store.identities`); any other id is its own. Every
        method here names the player by either id (one read)."""
        return self.store.resolve_identity(validate_conversation_id(conversation_id))

    def resolve_many(self, conversation_ids: Sequence[str]) -> dict[str, str]:
        """:meth:`resolve` of several ids in one round trip; an invalid id maps to itself (what is built with it
        refuses it)."""
        valid = []
        for cid in dict.fromkeys(conversation_ids):
            try:
                valid.append(validate_conversation_id(cid))
            except InputError:
                continue
        resolved = self.store.resolve_identities(valid)
        return {cid: resolved.get(cid, cid) for cid in conversation_ids}

    def opt_out(self, conversation_id: str, *, opted_out: bool = True) -> bool:
        """Opt the player out of everything business-initiated (``parley optout``), or back in (``opted_out`` False:
        ``parley optin``); True when that changed it. See docs/identity.md."""
        changed = self.store.set_opt_out(self.resolve(conversation_id), "stop", opted_out)
        if changed:
            metrics.OPT_OUTS.labels("cli").inc()
        return changed

    def publish_wake(self, conversation_id: str) -> None:
        """Wake a worker for ``conversation_id`` through this client's waker (a Celery publish: blocking), for an
        accepted input that needs a wake-up its accept did not push (see :meth:`accept_wake_push`)."""
        self._wake(conversation_id)

    def send_message(self, conversation_id: str, text: str, *, message_id: str | None = None,
                     reply_to: str | None = None, system: str | None = None,
                     recipient: str | None = None, media: Media | None = None,
                     at: datetime | None = None) -> Submitted:
        """Queue a chat turn. ``message_id`` (e.g. WhatsApp's wamid) makes resubmission harmless;
        ``reply_to`` threads the reply; ``system`` replaces the configured system prompt for this turn;
        ``recipient`` is where the reply goes (default: the conversation id). With ``media`` (a picture the
        player sent) ``text`` is its caption and may be empty. ``at``: hold it until then (an aware datetime; now
        or past: at once)."""
        return self.intake.accept(self.inputs.message(self.resolve(conversation_id), text, message_id=message_id,
                                                      reply_to=reply_to,
                                                      system=system, recipient=recipient, media=media, at=at))

    def send_notice(self, conversation_id: str, text: str, *, message_id: str | None = None,
                    reply_to: str | None = None, recipient: str | None = None) -> Submitted:
        """Queue a fixed short answer (``text``), sent in order with the other replies without a model call and
        without changing the state: what a player gets for a message Parley cannot read (a voice note, ...)."""
        return self.intake.accept(self.inputs.notice(self.resolve(conversation_id), text, message_id=message_id, reply_to=reply_to,
                                                     recipient=recipient))

    def send_event(self, conversation_id: str, text: str, *, message_id: str | None = None,
                   pinned: bool = False, from_player: bool = False, key: str | None = None,
                   respond: bool = False, at: datetime | None = None, recipient: str | None = None) -> Submitted:
        """Queue a game event ("User has just tagged Harrogate Theatre"); no model call, no reply. The model
        reads it as context on the next turn; ``pinned`` events survive compaction. ``from_player``: the text is
        something the player sent on WhatsApp (a location pin, a reaction): it reaches the model as the player's
        words, never as the game's (its name and address are the player's to choose), and it opens the 24-hour
        window as a message does. ``at``: hold it until then (an aware datetime; now or past: at once), e.g. a
        nudge for a player who stopped moving, cancelled with :meth:`cancel_scheduled` when they move.

        ``key``: the text is a fact ("Your target is Harrogate Theatre") that replaces the conversation's fact of
        that key (latest wins); facts survive every compaction. ``respond``: the model answers the event itself
        (no player message) and the answer goes out like any reply: inside WhatsApp's 24-hour window as it is,
        outside it as the configured template (or dead-lettered with the reason when none is configured). Both
        may be given together. Neither goes with ``from_player``: a player's words never set a fact. ``recipient``:
        where the answer goes (default: the conversation id), as for :meth:`send_message`, for a game whose
        conversation ids are its own."""
        return self.intake.accept(self.inputs.event(self.resolve(conversation_id), text, message_id=message_id, pinned=pinned,
                                                    from_player=from_player, key=key, respond=respond, at=at,
                                                    recipient=recipient))

    def reset(self, conversation_id: str, *, message_id: str | None = None, at: datetime | None = None,
              forget: bool = False) -> Submitted:
        """Queue a reset: inputs before it are applied first; the conversation then starts fresh. The timers the
        conversation holds when the reset joins its order (now, or at ``at``) are dropped. The history it closes
        goes to the conversation's archive (the model can still search it); ``forget`` erases the archive too."""
        return self.intake.accept(self.inputs.reset(self.resolve(conversation_id), message_id=message_id, at=at,
                                                    forget=forget))

    def cancel_scheduled(self, conversation_id: str, message_id: str) -> bool:
        """Cancel an input held with ``at=`` that is not yet due: ``True`` if one was held and is now dropped;
        ``False`` if none with that id is held (never scheduled, cancelled before, or already due and accepted)."""
        return self.store.cancel_scheduled(self.resolve(conversation_id), message_id)

    def pause(self, conversation_id: str, *, seconds: float | None = None) -> Pause:
        """A person takes the conversation over, at once: until :meth:`resume`, or for ``seconds`` (then it ends by
        itself). Meanwhile the player's messages (and the game's events) enter the state in order with no model call
        and no reply; :meth:`send_operator_message` answers. A turn whose model call had started goes out. Pausing
        again replaces the pause. Returns the pause in force (``until``: when it ends, None for a resume)."""
        return self.store.pause(self.resolve(conversation_id), operator_input.pause_seconds(seconds))

    def resume(self, conversation_id: str) -> bool:
        """Hand the conversation back to the model, at once; True when it was paused. Nothing is answered by itself:
        the player's next message gets a turn whose request holds what was said meanwhile."""
        return self.store.resume(self.resolve(conversation_id))

    def send_operator_message(self, conversation_id: str, text: str, *, message_id: str | None = None,
                              parts: Sequence[dict[str, Any]] | None = None,
                              recipient: str | None = None) -> Submitted:
        """Queue a person's message to the player: sent in order with the replies, through the outbox (once,
        paced, inside the 24-hour window or as its template, like a reply), and added to the state as the
        assistant's side, marked as a person's. ``parts``: more messages after ``text``, each
        ``{"type": "text", "text": ...}`` or a rich part of any kind (:mod:`worker.envelopes.reply_parts`). Paused or not.
        ``recipient``: where it goes (default: the conversation id), as for :meth:`send_message`."""
        return self.intake.accept(self.inputs.operator(self.resolve(conversation_id), text, message_id=message_id, parts=parts,
                                                       recipient=recipient))

    def delete(self, conversation_id: str) -> None:
        """Delete everything of the conversation now: state, trace, inbox, outbox, quarantine, dead letters, timers,
        identity links. An opt-out marker stays (only an opt-in clears it).

        The message ids it had accepted are kept in a tombstone for ``PARLEY_DELETE_TOMBSTONE_SECONDS`` (two days),
        so WhatsApp's retries of old webhooks are ignored as duplicates instead of starting it again; new message
        ids start a fresh conversation."""
        cid = self.resolve(conversation_id)
        self.store.delete(cid, record=entries.deleted(cid))  # kept only where the deployment keeps a record
