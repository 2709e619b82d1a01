"""One REDIS_URL for Sentinel: parsed for the store, turned into kombu's form for the broker, bad ones refused."""

from __future__ import annotations

import pytest

from worker.errors import ConfigurationError
from worker.queue import sentinel
from worker.queue.broker import broker_conf
from worker.settings import Settings


def test_sentinels_master_db_and_password() -> None:
    s = sentinel.parse("redis+sentinel://:s3cret@h1:26379,h2:26380,h3/mymaster/2")
    assert s.sentinels == (("h1", 26379), ("h2", 26380), ("h3", 26379))
    assert (s.master, s.db, s.password, s.sentinel_password) == ("mymaster", 2, "s3cret", None)


def test_the_broker_gets_kombus_sentinel_form_and_the_master_name() -> None:
    url = "redis+sentinel://:pw@h1:26379,h2:26379/mymaster/0"
    conf = broker_conf(Settings(_env_file=None, redis_url=url))  # type: ignore[call-arg]
    assert conf["broker_url"] == "sentinel://:pw@h1:26379/0;sentinel://:pw@h2:26379/0"
    assert conf["broker_transport_options"]["master_name"] == "mymaster"
    assert conf["broker_transport_options"]["visibility_timeout"] > 0  # still the Redis transport


@pytest.mark.parametrize("url", ["redis+sentinel://h1:26379", "redis+sentinel:///mymaster",
                                 "redis+sentinel://h1:x/mymaster", "redis+sentinel://h1/mymaster/zero",
                                 "redis://h1/0"])
def test_a_bad_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError):
        sentinel.parse(url)
