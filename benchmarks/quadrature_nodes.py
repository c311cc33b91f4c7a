"""The paper preset's fast fit: one quadrature node (no cell effect) against eleven, same run.

    python benchmarks/quadrature_nodes.py [--comparisons 20] [--prompts 200] [--fractions 1 0.15]
                                          [--repeats 3] [--draws 1000]

Without a prompt-by-comparison effect (the paper preset, tau = 0) every node of the
cell effect's Gauss-Hermite quadrature gives the same value, so the fast path's exact
item draws (``stan_free_models.conditional.resample_items``) evaluate one node. The
baseline forces the eleven nodes a fit with a cell effect uses. Both sides fit the
same simulated campaign in one process, compile first (reported apart), then
``--repeats`` warm fits each, alternating. Prints one JSON line per fraction: the
median warm seconds of each side, their ratio (> 1: one node is faster), and the
largest absolute difference of theta's draws and of Δ between the sides.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.15])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draws", type=int, default=1000, help="posterior draws per fit")
    args = parser.parse_args()

    import polars as pl

    import stan_free_models.conditional as conditional
    from adaptive.estimation.fitting import preset_config
    from adaptive.estimation.pipeline import analyze
    from adaptive.estimation.significance import compare
    from stan_free_models.graded_response import NUM_CELL_NODES
    from stan_free_models.simulate import simulate_campaign

    one_node = conditional._num_nodes
    camp = simulate_campaign(
        np.random.default_rng(args.seed),
        num_comparisons=args.comparisons,
        num_prompts=args.prompts,
    )
    full = pl.DataFrame(camp.rows)
    config = preset_config("paper", method="fast", seed=args.seed, num_draws=args.draws)
    for fraction in args.fractions:
        frame = full
        if fraction < 1.0:
            rng = np.random.default_rng(10_000 + args.seed)
            keep = rng.choice(full.height, size=round(fraction * full.height), replace=False)
            frame = full[np.sort(keep)]

        def fit(nodes: int, frame: pl.DataFrame = frame):
            conditional._num_nodes = one_node if nodes == 1 else (lambda tau: NUM_CELL_NODES)
            try:
                start = time.perf_counter()
                result = analyze(frame, config=config, group_redundant=False)
                return time.perf_counter() - start, result
            finally:
                conditional._num_nodes = one_node

        compile_s = {n: fit(n)[0] for n in (11, 1)}
        warm: dict[int, list[float]] = {11: [], 1: []}
        results = {}
        for _ in range(args.repeats):
            for n in (11, 1):
                seconds, results[n] = fit(n)
                warm[n].append(seconds)
        theta = {n: results[n].posterior.draws["theta"] for n in (11, 1)}
        delta = {
            n: np.array(
                [row["net_preference"] for row in compare(results[n].posterior, results[n].cells)]
            )
            for n in (11, 1)
        }
        median = {n: statistics.median(v) for n, v in warm.items()}
        print(
            json.dumps(
                {
                    "fraction": fraction,
                    "judgments": frame.height,
                    "first_fit_s": {"eleven": compile_s[11], "one": compile_s[1]},
                    "warm_s": {"eleven": median[11], "one": median[1]},
                    "ratio_eleven_over_one": median[11] / median[1],
                    "max_abs_diff_theta_draws": float(np.abs(theta[11] - theta[1]).max()),
                    "max_abs_diff_delta": float(np.abs(delta[11] - delta[1]).max()),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
