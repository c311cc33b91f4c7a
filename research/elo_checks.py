"""The Elo leaderboard (``evalset.elo``) on null arenas, sparse subsamples and raw signs.

* Null arenas: 5 systems of equal rating, 600 battles (20% ties), 200 resamples: how often do
  the simultaneous rank intervals separate any two systems (a system's interval excludes rank
  1 or rank 5: a difference flagged where there is none)?
* Sparse subsamples of MT-Bench's human judgments (5-30%, 50 each): does each system's rank
  interval hold its rank on the full log, and does every pair the rank intervals separate
  (one's worst rank above the other's best) agree in sign with the pair's own raw judgments
  (net preference over all their battles in the full log)?

Run: ``nice -n 10 .venv/bin/python research/elo_checks.py`` (about a minute); rows go to
``research/elo/checks.jsonl`` (rewritten).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).parent / "elo" / "checks.jsonl"


def null_arenas(arenas: int = 200) -> dict:
    import evalset

    rng = np.random.default_rng(0)
    flagged = 0
    for k in range(arenas):
        n = 600
        a = rng.integers(0, 5, n)
        b = (a + rng.integers(1, 5, n)) % 5
        u = rng.random(n)
        winner = np.where(u < 0.2, "tie", np.where(rng.random(n) < 0.5, "a", "b"))
        frame = pl.DataFrame(
            {
                "item_id": [f"q{i}" for i in range(n)],
                "system_a": [f"s{i}" for i in a],
                "system_b": [f"s{i}" for i in b],
                "annotator_id": ["sim"] * n,
                "winner": winner.tolist(),
            }
        )
        board = evalset.elo(frame, rounds=200, seed=k)
        flagged += bool(((board["rank_best"] > 1) | (board["rank_worst"] < 5)).any())
    return {"check": "null arenas", "arenas": arenas, "level": 0.95,
            "share_with_any_separation": flagged / arenas}  # fmt: skip


def raw_net(frame: pl.DataFrame) -> dict[tuple[str, str], float]:
    """Net preference of the first system over the second in their own battles."""
    out: dict[tuple[str, str], float] = {}
    y = {"a": 1.0, "b": -1.0, "tie": 0.0}
    for sa, sb, w in frame.select("system_a", "system_b", "winner").iter_rows():
        out[(sa, sb)] = out.get((sa, sb), 0.0) + y[w]
        out[(sb, sa)] = out.get((sb, sa), 0.0) - y[w]
    return out


def sparse(seeds: int = 50) -> list[dict]:
    import evalset

    humans = evalset.read(ROOT / "data/mtbench/judgments.csv")
    full = evalset.elo(humans, rounds=200, seed=0)
    full_rank = dict(zip(full["system"], full["rank"], strict=True))
    net = raw_net(humans)
    rows = []
    for fraction in (0.05, 0.1, 0.2, 0.3):
        held = separated = against = 0
        for seed in range(seeds):
            sub = humans.sample(fraction=fraction, seed=seed)
            board = evalset.elo(sub, rounds=200, seed=seed)
            ranks = {r["system"]: r for r in board.iter_rows(named=True)}
            held += all(r["rank_best"] <= full_rank[s] <= r["rank_worst"] for s, r in ranks.items())
            for s, r in ranks.items():
                for t, q in ranks.items():
                    if r["rank_worst"] < q["rank_best"]:  # s separated above t
                        separated += 1
                        against += net.get((s, t), 0.0) <= 0
        rows.append(
            {
                "check": "sparse MT-Bench",
                "fraction": fraction,
                "seeds": seeds,
                "share_of_runs_holding_every_full_rank": held / seeds,
                "separated_pairs_per_run": separated / seeds,
                "separated_against_raw_sign": against,
            }
        )
    return rows


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    rows = [null_arenas(), *sparse()]
    with open(OUT, "w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
            print(row, flush=True)


if __name__ == "__main__":
    main()
