"""The per-address limit on token guessing: whose address counts, and what a flood of
addresses does to the limiter's table.

``evalset serve`` trusts ``X-Forwarded-For`` only from the proxies named in
``EVALSET_FORWARDED_ALLOW_IPS`` (none by default); the limiter keeps a bounded table that
forgets the least recently seen address first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from services.api.limits import RateLimiter
from tests.factories import ProcessServer

GUESSES = 12
LIMITS = {
    "EVALSET_STREAMING": "false",
    "EVALSET_RATE_LIMIT_PER_SECOND": "0.5",
    "EVALSET_RATE_LIMIT_BURST": "3",
}


@pytest.fixture()
def serve(tmp_path: Path) -> Iterator[Callable[..., str]]:
    servers: list[ProcessServer] = []

    def start(**env: str) -> str:
        server = ProcessServer(f"sqlite:///{tmp_path / f'{len(servers)}.db'}", env=LIMITS | env)
        servers.append(server)
        server.start()
        return server.url

    yield start
    for server in servers:
        server.stop()


def _guess(client: httpx.Client, i: int, forwarded_for: str) -> int:
    """One guessed token on a project's route, claiming to come from ``forwarded_for``."""
    return client.get(
        "/projects/p/rankings",
        headers={"Authorization": f"Bearer guess-{i}", "X-Forwarded-For": forwarded_for},
    ).status_code


def test_a_varying_forwarded_for_from_loopback_is_limited_as_one_address(serve) -> None:  # noqa: ANN001
    """Was: uvicorn's default trusted X-Forwarded-For from a loopback peer, so each guess
    claiming a new address had a bucket of its own and none was ever limited."""
    with httpx.Client(base_url=serve(), timeout=60) as client:
        codes = [_guess(client, i, f"10.0.{i // 250}.{i % 250}") for i in range(GUESSES)]
    # the server's start-up health checks came from the same address and spent part of it
    assert codes[0] == 401 and codes.count(429) >= GUESSES - 3, codes


def test_a_configured_proxy_names_the_client(serve) -> None:  # noqa: ANN001
    """Behind a proxy named in EVALSET_FORWARDED_ALLOW_IPS, each forwarded client has its
    own budget: one client guessing is limited, another one is not."""
    with httpx.Client(base_url=serve(EVALSET_FORWARDED_ALLOW_IPS="127.0.0.1"), timeout=60) as c:
        guesser = [_guess(c, i, "10.9.9.9") for i in range(GUESSES)]
        others = [_guess(c, i, f"10.1.0.{i}") for i in range(3)]
    assert guesser[0] == 401 and guesser.count(429) >= GUESSES - 3, guesser
    assert others == [401] * 3, others


def test_many_new_keys_do_not_reset_a_busy_key() -> None:
    """Was: past 50,000 keys the whole table was cleared, so a flood of addresses gave
    every limited client a full bucket again."""
    limiter = RateLimiter()
    rate, burst = 1e-6, 3  # nothing refills during the test
    assert [limiter.wait("addr:guesser", rate, burst) for _ in range(burst)] == [0.0] * burst
    for i in range(120_000):
        limiter.wait(f"addr:flood-{i}", rate, burst)
        if i % 1000 == 0:  # the guesser keeps asking (and keeps being refused)
            assert limiter.wait("addr:guesser", rate, burst) > 0, i
    assert limiter.wait("addr:guesser", rate, burst) > 0


def test_the_table_forgets_the_least_recently_seen_key_first() -> None:
    limiter = RateLimiter(max_keys=3)
    rate, burst = 1e-6, 1
    for key in ("a", "b", "c"):
        assert limiter.wait(key, rate, burst) == 0.0  # each spends its one request
    assert limiter.wait("a", rate, burst) > 0  # "a" is now the most recently seen
    assert limiter.wait("d", rate, burst) == 0.0  # evicts "b", the least recently seen
    assert limiter.wait("a", rate, burst) > 0 and limiter.wait("c", rate, burst) > 0
    assert limiter.wait("b", rate, burst) == 0.0  # forgotten: a new bucket
