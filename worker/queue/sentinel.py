"""Redis Sentinel: one URL for state and broker, parsed once.

``REDIS_URL=redis+sentinel://[:password@]host1:26379,host2:26379/<master name>[/<db>]`` names the sentinels and
the master they watch. The state store asks the sentinels for the current master (redis-py's
:class:`redis.sentinel.Sentinel`) and follows a failover by asking again when a connection fails or the old
master, now a replica, refuses a write. Celery's Redis transport has its own sentinel form
(``sentinel://h1:26379;sentinel://h2:26379/<db>`` with the ``master_name`` transport option): :func:`kombu_url`
derives it, so one variable configures both.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from worker.errors import ConfigurationError

SCHEME = "redis+sentinel"


@dataclass(frozen=True)
class SentinelURL:
    """The sentinels (host, port), the master's name, the database and the password (for the master and replicas;
    sentinels are asked without one unless ``sentinel_password`` is given as the URL's user name)."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    password: str | None = None
    sentinel_password: str | None = None


def is_sentinel(url: str) -> bool:
    return url.startswith(SCHEME + "://")


def parse(url: str) -> SentinelURL:
    """Raises :class:`~worker.errors.ConfigurationError` when ``url`` is not a usable sentinel URL."""
    if not is_sentinel(url):
        raise ConfigurationError(f"not a {SCHEME}:// URL")
    rest = url[len(SCHEME) + 3:]
    auth, _, hosts_and_path = rest.rpartition("@")
    hosts, _, path = hosts_and_path.partition("/")
    parts = [p for p in path.split("/") if p]
    if not hosts or not parts:
        raise ConfigurationError(f"{SCHEME} URL needs host:port[,host:port...]/<master name>[/<db>]")
    sentinels = []
    for item in hosts.split(","):
        split = urlsplit("//" + item)
        if not split.hostname:
            raise ConfigurationError(f"{SCHEME} URL has an empty sentinel address in {hosts!r}")
        try:
            port = split.port or 26379
        except ValueError as exc:
            raise ConfigurationError(f"{SCHEME} URL has a bad port in {item!r}") from exc
        sentinels.append((split.hostname, port))
    try:
        db = int(parts[1]) if len(parts) > 1 else 0
    except ValueError as exc:
        raise ConfigurationError(f"{SCHEME} URL database must be a number, not {parts[1]!r}") from exc
    user, _, password = auth.partition(":")
    return SentinelURL(tuple(sentinels), unquote(parts[0]), db, unquote(password) or None, unquote(user) or None)


def kombu_url(url: str) -> tuple[str, str]:
    """The Celery broker URL in kombu's sentinel form and the master's name (its ``master_name`` option)."""
    parsed = parse(url)
    auth = f":{parsed.password}@" if parsed.password else ""
    return ";".join(f"sentinel://{auth}{host}:{port}/{parsed.db}" for host, port in parsed.sentinels), parsed.master
