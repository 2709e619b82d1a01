"""What a group of script wrappers is: the scripts it registers and the client and replication they run with.
:class:`~worker.store.scripts.Scripts` is every group at once, registering each group's scripts on one client."""

from __future__ import annotations

from typing import Any, ClassVar

from worker.store.replication import Replication


class ScriptGroup:
    """A group of wrappers. ``SCRIPTS``: the attribute each registered script is kept under -> the script's Lua text
    (:mod:`worker.store.lua`)."""

    SCRIPTS: ClassVar[dict[str, str]] = {}
    _client: Any
    _replication: Replication
