"""``/health``'s checks: the newest comparison of each refit kind, the slowest compile."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from itertools import count
from pathlib import Path

import httpx

from services.runtime.fit_checks import COMPILE_LIMIT_SECONDS, checks_public
from services.settings import Settings
from services.store import Store
from tests.factories import ThreadServer, add_event

ADMIN = "admin-token-for-checks-0123456789"


def _adder(store: Store) -> Callable[..., None]:
    seq: Iterator[int] = count(1)

    def add(dimension: str, kind: str, method: str, detail: str = "", seconds: float = 1.0) -> None:
        add_event(
            store,
            dimension=dimension,
            kind=kind,
            method=method,
            second=next(seq),
            detail=detail,
            seconds=seconds,
        )

    return add


def _compared(max_sd: float, *, live: int = 120) -> str:
    return json.dumps(
        {
            "max_sd": max_sd,
            "median_sd": max_sd / 3,
            "pairs": 6,
            "flips": int(max_sd > 2),
            "worst": ["a", "b"],
            "diverging": max_sd > 0.5,
            "full_method": "nuts",
            "full_judgments": 100,
            "live_method": "laplace",
            "live_judgments": live,
        }
    )


def test_the_newest_comparison_of_each_kind_counts_and_compiles_are_summed(
    tmp_path: Path,
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'checks.db'}")
    store.migrate()
    add = _adder(store)
    with store.read() as conn:
        empty = checks_public(conn, detail=True)
    assert (empty.compared, empty.diverging, empty.slowest_compile_s, empty.keys) == (
        0,
        0,
        None,
        [],
    )
    add("d", "compared", "nuts", _compared(0.9))
    add("d", "compared", "nuts", _compared(0.2))  # newer: no longer diverging
    add("e", "compared", "nuts", _compared(0.7))
    add("e", "compared", "scratch", _compared(0.1))
    add("e", "compared", "nuts", "not json")  # skipped, the older one is not read either
    add("d", "compiled", "laplace", "jit_fit", seconds=7.5)
    add("d", "compiled", "nuts", "jit_run", seconds=COMPILE_LIMIT_SECONDS + 1)
    with store.read() as conn:
        checks = checks_public(conn, detail=True)
        anonymous = checks_public(conn, detail=False)
    assert checks.compared == 2 and checks.diverging == 0
    assert checks.largest_divergence_sd == 0.2
    assert {(k.dimension, k.full_method, k.max_sd) for k in checks.keys or []} == {
        ("d", "nuts", 0.2),
        ("e", "scratch", 0.1),
    }
    assert checks.slowest_compile_s == COMPILE_LIMIT_SECONDS + 1
    assert checks.compiles_over_limit == 1
    assert anonymous.keys is None and anonymous.compared == 2
    add("e", "compared", "nuts", _compared(3.0, live=150))
    with store.read() as conn:
        checks = checks_public(conn, detail=True)
    assert checks.diverging == 1 and checks.largest_divergence_sd == 3.0
    assert checks.keys is not None and checks.keys[0].flips == 1


def test_health_shows_the_checks_by_name_only_to_the_admin(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'health.db'}"
    settings = Settings(database_url=url, admin_token=ADMIN, streaming=False)
    with ThreadServer(settings) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/health").json()["checks"]["compared"] == 0
        add = _adder(Store(url))
        add("d", "compared", "nuts", _compared(0.8))
        anonymous = client.get("/health").json()
        admin = client.get("/health", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert anonymous["checks"]["diverging"] == 1 and anonymous["checks"]["keys"] is None
    [key] = admin["checks"]["keys"]
    assert (key["project_id"], key["dimension"], key["max_sd"], key["worst"]) == (
        "p",
        "d",
        0.8,
        ["a", "b"],
    )
    assert admin["status"] == "ok"  # a divergence is reported, not a failure
