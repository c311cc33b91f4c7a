"""The live snapshot against a NUTS refit on public logs, whole and subsampled.

For each log and share of its judgments (a random subsample of judgments, seeded), the
service's fast fit (the live path: MAP + Laplace with robust intervals) and its NUTS refit
(the service's settings: 2 chains) are compared as the worker compares them
(:func:`adaptive.estimation.divergence.snapshot_divergence`); the live snapshot's sign on
each pair the NUTS refit decides is checked against that pair's own raw judgments (the
observed net preference).

    python research/live_vs_nuts.py   # rows: research/checks/live_vs_nuts.jsonl
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from adaptive.core.data import read_judgments
from adaptive.estimation.divergence import snapshot_divergence
from adaptive.estimation.streaming import fit_snapshot, stream_config

ROOT = Path(__file__).resolve().parents[1]
LOGS = {
    "mtbench": ROOT / "data/mtbench/judgments.csv",
    "ncm": ROOT / "data/chateval_ncm/judgments.csv",
}


def _fit(frame, method: str, systems: tuple[str, ...]):  # noqa: ANN001, ANN202
    options = {"num_chains": 2} if method == "nuts" else {"num_draws": 500}
    return fit_snapshot(
        frame,
        dimension=frame["dimension"][0],
        systems=systems,
        config=stream_config(method, seed=0, **options),
        last_seq=frame.height,
    )


def _slope(nuts, live) -> float:  # noqa: ANN001
    """Least-squares slope (through 0) of the live snapshot's pairwise skill differences on
    the NUTS refit's, over every pair of systems."""
    a, b = np.triu_indices(nuts.skill.shape[1], k=1)
    order = [list(live.systems).index(n) for n in nuts.systems]
    m_nuts = nuts.skill.mean(0)
    m_live = live.skill[:, order].mean(0)
    x, y = m_nuts[b] - m_nuts[a], m_live[b] - m_live[a]
    return round(float(x @ y / (x @ x)), 3)


def main() -> None:
    rows = []
    for log, path in LOGS.items():
        whole = read_judgments(path)
        dimension = whole["dimension"].value_counts(sort=True)["dimension"][0]
        whole = whole.filter(whole["dimension"] == dimension)
        systems = tuple(sorted(set(whole["system_a"]) | set(whole["system_b"])))
        for share in (0.1, 0.3, 1.0):
            frame = whole.sample(fraction=share, seed=1) if share < 1 else whole
            t = time.perf_counter()
            live = _fit(frame, "fast", systems)
            nuts = _fit(frame, "nuts", systems)
            d = snapshot_divergence(nuts, live)
            # the live sign of each pair NUTS decides, against the pair's own judgments
            names = list(live.systems)
            agree = checked = 0
            for k in range(len(live.pair_a)):
                a, b = int(live.pair_a[k]), int(live.pair_b[k])
                na, nb = names.index(live.systems[a]), names.index(live.systems[b])
                diff_nuts = nuts.skill[:, nb] - nuts.skill[:, na]
                if abs(diff_nuts.mean()) <= 2 * diff_nuts.std() or live.pair_observed is None:
                    continue
                observed = float(live.pair_observed[k])
                if observed == 0:
                    continue
                live_diff = float((live.skill[:, nb] - live.skill[:, na]).mean())
                checked += 1
                agree += np.sign(live_diff) == np.sign(observed)
            row = {
                "log": log,
                "dimension": dimension,
                "share": share,
                "judgments": frame.height,
                **{
                    k: d[k] for k in ("max_sd", "median_sd", "mc_sd", "flips", "pairs", "diverging")
                },
                "nuts_rhat": nuts.diagnostics.get("max_rhat"),
                # live pairwise means regressed on NUTS's: a slope off 1 is a scale gap
                "slope_live_on_nuts": _slope(nuts, live),
                "decided_pairs_sign_agree": f"{agree} of {checked}",
                "seconds": round(time.perf_counter() - t, 1),
            }
            rows.append(row)
            print(row, flush=True)
    out = ROOT / "research/checks/live_vs_nuts.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
