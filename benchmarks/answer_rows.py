"""What the live significance rows cost, and the share of it that is the Monte Carlo error.

``services.answers.pair_rows`` answers ``GET /projects/{id}/significance`` from a snapshot's
draws; each row's ``ci_mcse`` / ``verdict_settled`` is ArviZ's quantile MCSE of the row's
interval end nearest 0, computed for all rows at once (``stan_free_models.mcse``). This
times ``pair_rows`` on synthetic snapshots of the service's size (1,000 draws) for the
compared pairs and for every pair; in the same run, the MCSE step alone on the same draws,
and ArviZ's own ``az.mcse`` on them (the baseline: ``speedup`` = ArviZ / ours).

    python benchmarks/answer_rows.py [--systems 10 30] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from adaptive.estimation.significance import interval_end_mcse
from adaptive.estimation.snapshot import Snapshot
from services.answers import pair_rows


def synthetic(num_systems: int, *, draws: int = 1000, seed: int = 0) -> Snapshot:
    """A snapshot whose systems form a chain of compared neighbours plus every third pair."""
    rng = np.random.default_rng(seed)
    strength = np.linspace(-1.0, 1.0, num_systems)
    skill = (strength + 0.15 * rng.standard_normal((draws, num_systems))).astype(np.float32)
    pairs = [(i, j) for i in range(num_systems) for j in range(i + 1, num_systems)]
    pairs = [p for k, p in enumerate(pairs) if p[1] == p[0] + 1 or k % 3 == 0]
    a, b = np.array(pairs).T
    observed = np.clip(0.4 * (strength[b] - strength[a]), -1, 1)
    return Snapshot(
        dimension="overall",
        version=1,
        num_judgments=100 * len(pairs),
        last_seq=100 * len(pairs),
        method="laplace",
        created_at=0.0,
        fit_seconds=0.0,
        diagnostics={},
        systems=tuple(f"s{i}" for i in range(num_systems)),
        items=("p0",),
        pair_a=a,
        pair_b=b,
        pair_judgments=np.full(len(pairs), 100),
        pair_prompts=np.full(len(pairs), 50),
        skill=skill,
        alpha=np.ones((1, 1), np.float32),
        b=np.zeros((1, 1, 2), np.float32),
        pair_observed=observed,
        pair_observed_p=np.full(len(pairs), 0.01),
        pair_observed_se=np.full(len(pairs), 0.05),
    )


def arviz_end_mcse(draws: np.ndarray, level: float = 0.95) -> np.ndarray:
    """The same numbers from ArviZ's Dataset interface (a Python loop over columns)."""
    from stan_free_models.arviz_safe import import_arviz

    az = import_arviz()
    tail = (1.0 - level) / 2.0
    data = az.convert_to_dataset({"theta": draws})
    low = np.asarray(az.mcse(data, method="quantile", prob=tail)["theta"])
    high = np.asarray(az.mcse(data, method="quantile", prob=1.0 - tail)["theta"])
    return np.where(draws.reshape(-1, draws.shape[2]).mean(axis=0) > 0, low, high)


def best_of(repeats: int, fn, *args, **kwargs) -> float:
    """The fastest of ``repeats`` calls, seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, nargs="+", default=[10, 30])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    pair_rows(synthetic(4))  # imports and first calls out of the timing
    for num in args.systems:
        snap = synthetic(num)
        for all_pairs in (False, True):
            rows = pair_rows(snap, all_pairs=all_pairs)
            index = {s: i for i, s in enumerate(snap.systems)}
            theta = np.stack(
                [
                    snap.skill[:, index[r["system_b"]]].astype(np.float64)
                    - snap.skill[:, index[r["system_a"]]]
                    for r in rows
                ],
                axis=1,
            )
            ours = interval_end_mcse(theta[None])
            np.testing.assert_allclose(ours, arviz_end_mcse(theta[None]), rtol=1e-9)
            total = best_of(args.repeats, pair_rows, snap, all_pairs=all_pairs)
            mcse = best_of(args.repeats, interval_end_mcse, theta[None])
            arviz = best_of(1, arviz_end_mcse, theta[None])
            print(
                json.dumps(
                    {
                        "systems": num,
                        "all_pairs": all_pairs,
                        "rows": len(rows),
                        "pair_rows_ms": round(total * 1000, 1),
                        "mcse_ms": round(mcse * 1000, 1),
                        "mcse_share": round(mcse / total, 2),
                        "arviz_mcse_ms": round(arviz * 1000, 1),
                        "speedup": round(arviz / mcse, 1),
                        "ms_per_row": round(total * 1000 / len(rows), 2),
                    }
                )
            )


if __name__ == "__main__":
    main()
