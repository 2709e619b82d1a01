"""One player, whatever id a webhook names them by: the links from phone numbers (``wa_id``) and business-scoped
user ids (BSUIDs, ``user_id``) to the conversation they belong to, the player's current ids (where a reply goes when
it is sent), and the opt-out markers.

Every key here shares the ``ids`` hash tag (:class:`~worker.store.keys.IdentityKeys`), so one transaction reads and
moves the links of a phone number and a BSUID together, on a Cluster too. The conversation's own keys are in another
slot: a link is written before the accept it routes, in a separate step (docs/known-limits.md, "Identity links").

A conversation that existed before links did (keyed by a phone number) has none: an id with no link is its own
conversation, so a phone-only player costs one read here and no write. A BSUID seen alone gets a link to itself, so
that a later webhook carrying both ids knows it already has a conversation: then the older of the two stays the
player's (the link made first; a phone-keyed conversation with no link predates every link) and the other is kept
apart for inspection, never merged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker import metrics
from worker.store.core import StoreCore
from worker.store.fast_scripts import fast_call
from worker.store.keys import IdentityKeys
from worker.store.redis_errors import store_errors

log = logging.getLogger("parley.store")

#: Ids a player's address remembers as replaced (a reply queued before a change still finds the player).
MAX_WAS = 8


@dataclass(frozen=True)
class Link:
    """Where an id leads: the conversation, and since when (ms) the link exists."""

    cid: str
    since_ms: int

    @classmethod
    def stored(cls, raw: bytes | None) -> Link | None:
        if not raw:
            return None
        since, _, cid = raw.decode().partition("\t")
        return cls(cid, int(since)) if cid and since.isdigit() else None

    def encoded(self) -> str:
        return f"{self.since_ms}\t{self.cid}"


@dataclass(frozen=True)
class Linked:
    """What linking a webhook's ids came to: the conversation, the links to write, and a conversation kept apart
    (both ids had one; ``apart`` is the newer, left as it is)."""

    cid: str
    writes: Mapping[str, Link]
    apart: str | None = None


def decide_link(phone: str | None, user_id: str | None, by_phone: Link | None, by_user: Link | None, *,
                phone_has_conversation: bool, now_ms: int) -> Linked:
    """The conversation of a webhook naming ``phone`` and/or ``user_id`` (pure; see the module). ``by_phone`` and
    ``by_user``: their links; ``phone_has_conversation``: the phone's own conversation exists (asked only when it
    matters: both ids given, the BSUID linked elsewhere and the phone not linked)."""
    if user_id is None:
        return Linked(by_phone.cid if by_phone else phone or "", {})
    if phone is None:
        if by_user is not None:
            return Linked(by_user.cid, {})
        return Linked(user_id, {user_id: Link(user_id, now_ms)})
    on_phone = by_phone or Link(phone, -1)  # an unlinked phone conversation predates every link
    if by_user is None or by_user.cid == on_phone.cid:
        writes = {} if by_user is not None else {user_id: Link(on_phone.cid, max(on_phone.since_ms, 0) or now_ms)}
        return Linked(on_phone.cid, writes)
    if by_phone is None and not phone_has_conversation:
        return Linked(by_user.cid, {phone: by_user})
    older, newer = (on_phone, by_user) if on_phone.since_ms <= by_user.since_ms else (by_user, on_phone)
    kept = Link(older.cid, max(older.since_ms, 0) or now_ms)
    return Linked(older.cid, {phone: kept, user_id: kept}, apart=newer.cid)


@dataclass(frozen=True)
class _Plan:
    """Linking's decision and what it writes: the player's ids to set in the address, the ids the webhook named,
    and whether anything is written at all."""

    linked: Linked
    address: dict[str, str]
    named: list[str]
    writes: bool

    @property
    def cid(self) -> str:
        return self.linked.cid


def _read(pipe: Any, ids: IdentityKeys, phone: str | None, user_id: str | None) -> None:
    for ident in (phone, user_id):
        if ident is not None:
            pipe.get(ids.link(ident))


def _links(phone: str | None, user_id: str | None, raw: list[Any]) -> tuple[Link | None, Link | None]:
    """The links of ``phone`` and ``user_id`` from their GETs (made in that order, each only when the id is given)."""
    it = iter(raw)
    by_phone = Link.stored(next(it)) if phone is not None else None
    by_user = Link.stored(next(it)) if user_id is not None else None
    return by_phone, by_user


def _fields(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in raw.items()}


class IdentityStore(StoreCore):
    """Identity links, addresses and opt-out markers (see the module)."""

    @property
    def identity_keys(self) -> IdentityKeys:
        return IdentityKeys(self.prefix)

    @store_errors
    def resolve_identity(self, ident: str) -> str:
        """The conversation ``ident`` (a phone number, a BSUID or a conversation id) belongs to: its link's, or
        itself."""
        link = Link.stored(self._client.get(self.identity_keys.link(ident)))
        return link.cid if link is not None else ident

    @store_errors
    def resolve_identities(self, idents: list[str]) -> dict[str, str]:
        """:meth:`resolve_identity` of several ids in one round trip (one MGET: every link shares the ``ids`` slot)."""
        if not idents:
            return {}
        raw = self._client.mget([self.identity_keys.link(i) for i in idents])
        return {i: (link.cid if (link := Link.stored(r)) is not None else i) for i, r in zip(idents, raw, strict=True)}

    @store_errors
    def link_identity(self, phone: str | None, user_id: str | None) -> str:
        """The conversation of a webhook naming ``phone`` and/or ``user_id``, linking them when it names both, and
        the player's current ids kept for the reply's recipient. One pipelined read when nothing changes (the common
        case: a player seen before); otherwise one optimistic transaction over the ``ids`` slot."""
        if phone is None and user_id is None:
            raise ValueError("a webhook record names neither a phone number nor a user id")
        ids = self.identity_keys
        pipe = self._client.pipeline(transaction=False)
        _read(pipe, ids, phone, user_id)
        pipe.hgetall(ids.address(phone or user_id or ""))
        *links, address = pipe.execute()
        found = _links(phone, user_id, links)
        plan = self._plan(phone, user_id, *found, _fields(address), exists=None)
        if plan is not None and plan.cid != (phone or user_id) and not plan.linked.writes:
            # Linked elsewhere (a BSUID-only webhook of a phone-keyed player): that conversation's address.
            plan = self._plan(phone, user_id, *found, _fields(self._client.hgetall(ids.address(plan.cid))),
                              exists=None)
        if plan is not None and not plan.writes:
            return plan.cid
        linked: Linked = self._watching(lambda p: self._linking(p, phone, user_id),
                                        [ids.link(i) for i in (phone, user_id) if i is not None])
        if linked.apart is not None:
            metrics.IDENTITY_CONFLICTS.inc()
            log.warning("a webhook names a phone number and a user id that each have a conversation: the older stays "
                        "the player's, the other is kept apart (not merged)",
                        extra={"conversation_id": linked.cid, "kept_apart": linked.apart})
        return linked.cid

    def _plan(self, phone: str | None, user_id: str | None, by_phone: Link | None, by_user: Link | None,
              address: dict[str, str], *, exists: bool | None) -> _Plan | None:
        """What linking comes to, given what was read (``address``: the linked conversation's); None when it turns
        on whether the phone's conversation exists and ``exists`` is not known."""
        if exists is None and phone is not None and by_user is not None and by_phone is None and by_user.cid != phone:
            return None
        linked = decide_link(phone, user_id, by_phone, by_user, phone_has_conversation=bool(exists),
                             now_ms=self._now_ms())
        wanted = {k: v for k, v in (("phone", phone), ("user_id", user_id)) if v is not None}
        new_address = {k: v for k, v in wanted.items() if address.get(k) != v} \
            if (user_id is not None or by_phone is not None or address) else {}
        refresh = bool(self.limits.idle_ttl_ms) and bool(address or by_phone or by_user)
        writes = bool(linked.writes or new_address or refresh)
        return _Plan(linked, new_address, list(wanted.values()), writes)

    def _linking(self, pipe: Any, phone: str | None, user_id: str | None) -> Linked:
        """The watched transaction of :meth:`link_identity`."""
        ids, ttl = self.identity_keys, self.limits.idle_ttl_ms
        by_phone, by_user = _links(phone, user_id, [pipe.get(ids.link(i)) for i in (phone, user_id) if i is not None])
        exists = False
        if phone is not None and by_user is not None and by_phone is None and by_user.cid != phone:
            exists = bool(pipe.exists(self.keys(phone).state, self.keys(phone).seen))
        first = decide_link(phone, user_id, by_phone, by_user, phone_has_conversation=exists, now_ms=self._now_ms())
        plan = self._plan(phone, user_id, by_phone, by_user, _fields(pipe.hgetall(ids.address(first.cid))),
                          exists=exists)
        assert plan is not None
        if not plan.writes:
            return plan.linked
        linked = plan.linked
        pipe.multi()
        for ident, link in linked.writes.items():
            pipe.set(ids.link(ident), link.encoded(), px=ttl or None)
        if plan.address:
            pipe.hset(ids.address(linked.cid), mapping=plan.address)
        if ttl:
            for ident in plan.named:
                if ident not in linked.writes:
                    pipe.pexpire(ids.link(ident), ttl)
            pipe.pexpire(ids.address(linked.cid), ttl)
        return linked

    @store_errors
    def move_identity(self, field: str, old: str, new: str) -> str:
        """A player's ``field`` (``phone`` or ``user_id``) changed from ``old`` to ``new`` (Meta's system message):
        ``new`` now leads to ``old``'s conversation, which is returned, and replies go to ``new``."""
        ids = self.identity_keys

        def body(pipe: Any) -> str:
            link = Link.stored(pipe.get(ids.link(old)))
            cid = link.cid if link is not None else old
            was = pipe.hget(ids.address(cid), "was")
            kept = [w for w in (was.decode().split() if was else []) if w != old][-(MAX_WAS - 1):]
            ttl = self.limits.idle_ttl_ms or None
            pipe.multi()
            pipe.set(ids.link(new), Link(cid, link.since_ms if link else self._now_ms()).encoded(), px=ttl)
            if field == "phone":  # a number given up may be given to someone else: it leads nowhere now
                pipe.delete(ids.link(old))
            pipe.hset(ids.address(cid), mapping={field: new, "was": " ".join([*kept, old])})
            if ttl:
                pipe.pexpire(ids.address(cid), ttl)
            return cid

        cid: str = self._watching(body, [ids.link(old), ids.link(new)])
        return cid

    @store_errors
    def recipient_now(self, cid: str, recipient: str) -> str:
        """Where a reply of ``cid`` queued for ``recipient`` goes now: the player's current phone number, else their
        BSUID, when ``recipient`` is one of the player's ids; else ``recipient`` as it is (one HGETALL)."""
        address = fast_call(self._client, "HGETALL", self.identity_keys.address(cid))  # every reply: the lean path
        if not address:
            return recipient
        if isinstance(address, list):  # the raw reply: field, value, field, value...
            address = dict(zip(address[::2], address[1::2], strict=True))
        fields = _fields(address)
        known = {cid, fields.get("phone"), fields.get("user_id"), *fields.get("was", "").split()}
        return (fields.get("phone") or fields.get("user_id") or recipient) if recipient in known else recipient

    @store_errors
    def templates_allowed(self, cid: str) -> bool:
        """Whether a template may go to the player: they did not opt out, of everything or of marketing (asked only
        when a reply would go as one)."""
        return not self._client.hlen(self.keys(cid).opt_out)

    @store_errors
    def opt_outs(self, cid: str) -> dict[str, int]:
        """The player's opt-outs in force: ``stop`` (everything business-initiated) and ``marketing`` (templates),
        each the ms it was made."""
        return {k.decode(): int(v) for k, v in self._client.hgetall(self.keys(cid).opt_out).items()}

    @store_errors
    def opted_out(self, cid: str) -> bool:
        """Whether the player opted out of everything business-initiated (one HEXISTS)."""
        return bool(self._client.hexists(self.keys(cid).opt_out, "stop"))

    @store_errors
    def set_opt_out(self, cid: str, what: str, on: bool) -> bool:
        """Set (``on``) or clear the opt-out ``what`` (``stop`` or ``marketing``); True when that changed it."""
        key = self.keys(cid).opt_out
        if on:
            return bool(self._client.hsetnx(key, what, self._now_ms()))
        return bool(self._client.hdel(key, what))

    @store_errors
    def forget_identities(self, cid: str) -> None:
        """Drop the links that lead to ``cid`` and its address (a delete); its opt-out stays."""
        ids = self.identity_keys
        fields = {k.decode(): v.decode() for k, v in self._client.hgetall(ids.address(cid)).items()}
        for ident in {cid, fields.get("phone"), fields.get("user_id"), *fields.get("was", "").split()}:
            if not ident:
                continue
            key = ids.link(ident)
            link = Link.stored(self._client.get(key))
            if link is not None and link.cid == cid:
                self._client.delete(key)
        self._client.delete(ids.address(cid))

    def _watching(self, body: Any, watch: list[str]) -> Any:
        """``body(pipe)`` as an optimistic transaction over ``watch`` (retried when a watched key changed under
        it); on a Cluster client, whose pipelines take no WATCH, run against the client itself."""
        if self._cluster:
            return body(_Immediate(self._client))
        return self._client.transaction(body, *watch, value_from_callable=True)


class _Immediate:
    """A client standing in for a watched pipeline: ``multi()`` does nothing, commands run at once."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def multi(self) -> None:
        """Commands after it run at once, like those before."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
