"""The producers' API tokens in force: ``PARLEY_API_TOKENS`` and ``PARLEY_API_TOKENS_FILE`` together (the two add
up), the file read again when it changes, so a leaked token is revoked without a restart.

The file is looked at (its modification time, size and inode) at most once a second per process, on the request
that comes after; a change is read before that request is answered, so a revoked token gets 401 from then on. A
change that cannot be read or is not valid keeps the last good tokens (an error logged and counted in
``parley_api_tokens_file_loads_total{outcome="refused"}``): a broken edit neither opens nor closes the API.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from worker.errors import ConfigurationError
from worker.ingress import metrics as ingress_metrics
from worker.runtime.api_tokens_file import load_grants
from worker.settings.api_tokens import TOKENS_FILE, Grant

log = logging.getLogger("parley.api")

#: Seconds between two looks at the file's modification time.
CHECK_EVERY = 1.0

_Stamp = tuple[int, int, int]
_GONE: _Stamp = (-1, -1, -1)


class TokenSource:
    """The tokens of ``PARLEY_API_TOKENS`` (``fixed``) and of the file at ``path`` (``None``: no file). A file
    that is bad at start raises :class:`ConfigurationError`; later, the last good one stays."""

    def __init__(self, fixed: tuple[Grant, ...], path: str | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._fixed = fixed
        self._path = Path(path) if path else None
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: _Stamp | None = None
        self._refused: _Stamp | None = None
        self._checked = clock()
        self._grants = fixed
        if self._path is not None:
            self._stamp = _stamp(self._path)
            self._grants = self._combined(load_grants(self._path))
            # Both outcomes exported from 0: a series that first appears at 1 shows Prometheus no increase, and the
            # alert on a refused read would miss the first one after a start.
            for outcome in ("loaded", "refused"):
                ingress_metrics.API_TOKENS_FILE_LOADS.labels(outcome)

    @property
    def on(self) -> bool:
        """Whether the API is on: a token is configured, or a file that may list some."""
        return bool(self._fixed) or self._path is not None

    def grants(self) -> tuple[Grant, ...]:
        """The tokens in force, the file looked at again when a second has passed since the last look."""
        if self._path is not None and self._clock() - self._checked >= CHECK_EVERY and self._lock.acquire(False):
            try:
                self._checked = self._clock()
                self._reload(self._path)
            finally:
                self._lock.release()
        return self._grants

    def find(self, authorization: str | None) -> Grant | None:
        """The grant of the request's bearer token, ``None`` when it has none or an unknown one. Every configured
        token is compared (in constant time), so the answer's timing says nothing about which one came close."""
        grants = self.grants()
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        candidate = given.strip().encode("utf-8", "replace")
        found: Grant | None = None
        for grant in grants:
            if hmac.compare_digest(candidate, grant.token) and (found is None or grant.role == "operator"):
                found = grant
        return found

    def _reload(self, path: Path) -> None:
        stamp = _stamp(path)
        if stamp in (self._stamp, self._refused):  # unchanged, or the bad version already logged
            return
        try:
            grants = self._combined(load_grants(path))
        except ConfigurationError as exc:
            self._refused = stamp
            ingress_metrics.API_TOKENS_FILE_LOADS.labels("refused").inc()
            log.error("%s changed but is not valid, the last good tokens stay: %s", TOKENS_FILE, exc)
            return
        self._stamp, self._refused, self._grants = stamp, None, grants
        ingress_metrics.API_TOKENS_FILE_LOADS.labels("loaded").inc()
        log.warning("%s read again: %d token(s) from the file, %d from PARLEY_API_TOKENS", TOKENS_FILE,
                    len(grants) - len(self._fixed), len(self._fixed))

    def _combined(self, from_file: tuple[Grant, ...]) -> tuple[Grant, ...]:
        fixed = {g.token for g in self._fixed}
        for grant in from_file:
            if grant.token in fixed:
                raise ConfigurationError(f"{TOKENS_FILE}: {grant.name} is also in PARLEY_API_TOKENS (one token, "
                                         "one set of limits: list it in one place)")
        return self._fixed + from_file


def _stamp(path: Path) -> _Stamp:
    """What tells a changed file (a rename over it too); :data:`_GONE` when it cannot be looked at."""
    try:
        st = os.stat(path)
    except OSError:
        return _GONE
    return st.st_mtime_ns, st.st_size, st.st_ino
