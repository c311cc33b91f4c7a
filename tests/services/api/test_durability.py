"""Durability: stream judgments over HTTP while SIGKILLing and restarting the server.

The client sends batches of 50 and retries a batch until it is acknowledged. A
kill lands at a random moment inside a request (before, during or after its
commit), so some batches are stored without their acknowledgement reaching the
client; the retry must then be a no-op. At the end every judgment is stored
exactly once, with the content that was sent.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import httpx
import polars as pl
import pytest

from adaptive.core.data import read_judgments
from tests.factories import ProcessServer, fresh_pg_database, simulate

NCM = Path(__file__).resolve().parents[3] / "data" / "chateval_ncm" / "judgments.csv"
BATCH = 50


def stream_with_kills(
    database_url: str,
    frame: pl.DataFrame,
    *,
    num_kills: int,
    seed: int,
    env: dict[str, str],
) -> dict:
    rng = random.Random(seed)
    rows = [
        {
            "judgment_id": f"d{i}",
            **{k: row[k] for k in ("item_id", "system_a", "system_b", "annotator_id", "winner")},
        }
        for i, row in enumerate(frame.to_dicts())
    ]
    batches = [rows[i : i + BATCH] for i in range(0, len(rows), BATCH)]
    kill_at = set(rng.sample(range(1, len(batches)), num_kills))
    server = ProcessServer(database_url, env=env)
    server.start()
    kills = retries = 0
    stats: dict = {}
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            r = client.post("/projects", json={"project_id": "durable"})
            headers = {"Authorization": f"Bearer {r.json()['token']}"}
            systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
            prompts = sorted(set(frame["item_id"]))
            client.post(
                "/projects/durable/systems",
                json={"systems": [{"system_id": s} for s in systems]},
                headers=headers,
            ).raise_for_status()
            client.post(
                "/projects/durable/prompts",
                json={"prompts": [{"prompt_id": p} for p in prompts]},
                headers=headers,
            ).raise_for_status()
            acked: list[str] = []
            for index, batch in enumerate(batches):
                timer = None
                if index in kill_at:
                    # a kill at a random moment while this batch is in flight
                    timer = threading.Timer(rng.uniform(0.0, 0.03), server.kill)
                    timer.start()
                while True:
                    try:
                        r = client.post(
                            "/projects/durable/judgments",
                            json={"judgments": batch},
                            headers=headers,
                        )
                        assert r.status_code == 200, r.text
                        acked += [j["judgment_id"] for j in batch]
                        ok = True
                    except httpx.TransportError:
                        retries += 1
                        ok = False
                    if timer is not None:
                        timer.join()
                    if server.proc is not None and server.proc.poll() is not None:
                        kills += 1
                        server.start()
                    if ok:
                        break
            # every acknowledged judgment is stored once, as sent
            stored: list[dict] = []
            after = 0
            while True:
                page = client.get(
                    "/projects/durable/judgments",
                    params={"after_seq": after, "limit": 5000},
                    headers=headers,
                ).json()
                stored += page["judgments"]
                if page["next_after_seq"] is None:
                    break
                after = page["next_after_seq"]
            status = client.get("/projects/durable", headers=headers).json()
    finally:
        server.stop()
    ids = [j["judgment_id"] for j in stored]
    sent = {r["judgment_id"]: r for r in rows}
    stats.update(
        sent=len(rows),
        acked=len(acked),
        stored=len(stored),
        unique_stored=len(set(ids)),
        kills=kills,
        retries=retries,
        count=status["num_judgments"],
        mismatched=sum(
            1 for j in stored if {k: j[k] for k in sent[j["judgment_id"]]} != sent[j["judgment_id"]]
        ),
    )
    return stats


def check(stats: dict, num: int, num_kills: int) -> None:
    assert stats["kills"] == num_kills, stats
    assert stats["acked"] == stats["sent"] == num, stats
    assert stats["stored"] == stats["unique_stored"] == stats["count"] == num, stats
    assert stats["mismatched"] == 0, stats


QUICK_ENV = {"EVALSET_STREAMING": "false"}


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_kills_lose_and_duplicate_nothing(backend: str, tmp_path: Path) -> None:
    frame = simulate(1000, seed=5)
    if backend == "sqlite":
        stats = stream_with_kills(
            f"sqlite:///{tmp_path / 'd.db'}", frame, num_kills=2, seed=1, env=QUICK_ENV
        )
    else:
        with fresh_pg_database() as url:
            stats = stream_with_kills(url, frame, num_kills=2, seed=1, env=QUICK_ENV)
    check(stats, 1000, 2)


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_ten_thousand_judgments_with_kills_and_reestimation(backend: str, tmp_path: Path) -> None:
    """The NCM release (first 10,000 judgments), 12 kills, re-estimation running."""
    frame = read_judgments(NCM).head(10_000)
    env = {
        "EVALSET_STREAMING": "true",
        "EVALSET_NUTS": "false",
        "EVALSET_JAX_CACHE_DIR": str(tmp_path / "jax-cache"),
    }
    if backend == "sqlite":
        stats = stream_with_kills(
            f"sqlite:///{tmp_path / 'd.db'}", frame, num_kills=12, seed=2, env=env
        )
    else:
        with fresh_pg_database() as url:
            stats = stream_with_kills(url, frame, num_kills=12, seed=2, env=env)
    print(f"durability[{backend}]: {stats}")
    check(stats, 10_000, 12)
