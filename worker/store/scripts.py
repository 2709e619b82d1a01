"""One Python wrapper per Lua script of :mod:`worker.store.lua` (the files of worker/store/lua/).

The wrappers are the only place that knows a script's KEYS order, ARGV order and result layout: callers pass
named arguments (:mod:`worker.store.script_args`) and get a typed result back (:mod:`worker.store.script_replies`),
so adding an argument cannot silently shift the others, and a result is parsed by position in one fixed shape rather
than guessed from its length. The wrappers come in groups by who runs them: the mailbox and the drain
(:mod:`worker.store.mailbox_scripts`), delivery (:mod:`worker.store.outbox_scripts`), timers
(:mod:`worker.store.timer_scripts`) and the rest (:mod:`worker.store.admin_scripts`).
"""

from __future__ import annotations

from typing import Any

from worker.store.admin_scripts import AdminScripts
from worker.store.fast_scripts import register
from worker.store.mailbox_scripts import MailboxScripts
from worker.store.outbox_scripts import OutboxScripts
from worker.store.replication import Replication
from worker.store.timer_scripts import TimerScripts


class Scripts(MailboxScripts, OutboxScripts, TimerScripts, AdminScripts):
    """The registered scripts of one client, shared by every part of the store."""

    def __init__(self, client: Any, replication: Replication | None = None) -> None:
        self._client = client
        self._replication = replication or Replication()
        for group in type(self).__mro__:
            for attribute, text in vars(group).get("SCRIPTS", {}).items():
                setattr(self, attribute, register(client, text))

    @property
    def replication(self) -> Replication:
        """How writes wait for replicas (the event loop's accept waits the same way)."""
        return self._replication
