"""Latency of one next-batch recommendation with a warm snapshot.

A campaign of ``--prompts`` prompts x ``--systems`` systems (every pair
compared, per-system posterior) is simulated; the posterior snapshot is
prepared once (what the service does when a snapshot is published) and then
``--repeats`` requests of ``--size`` cells are timed, each with a different
seed and an annotator's exclusion mask. Prints JSON with p50/p95 (ms) of the
request and the one-off preparation time.

    python benchmarks/recommend_latency.py                 # 1,000 x 30, batch 100
    python benchmarks/recommend_latency.py --prompts 50 --systems 5 --repeats 5   # smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import polars as pl
from named_snapshots import snapshot_from_posteriors

from adaptive.core.cells import build_cells
from adaptive.recommend import CellState, Request, recommend
from stan_free_models.posterior import Diagnostics, Posterior


def simulated_campaign(num_prompts: int, num_systems: int, *, seed: int = 0, share: float = 0.05):
    """Judgments on a share of the (pair, prompt) cells and a posterior of the right shapes."""
    rng = np.random.default_rng(seed)
    systems = [f"sys{i:02d}" for i in range(num_systems)]
    prompts = [f"p{j:04d}" for j in range(num_prompts)]
    pairs = [(a, b) for i, a in enumerate(systems) for b in systems[i + 1 :]]
    rows = []
    for a, b in pairs:
        for j in np.flatnonzero(rng.random(num_prompts) < share):
            rows.append((prompts[j], a, b, f"w{rng.integers(50)}", rng.choice(["a", "b", "tie"])))
    judgments = pl.DataFrame(
        rows, schema=["item_id", "system_a", "system_b", "annotator_id", "winner"], orient="row"
    ).with_columns(pl.lit("overall").alias("dimension"))
    cells = build_cells(judgments, systems=systems)
    num_draws = 400
    skill = rng.normal(np.linspace(-1.5, 1.5, num_systems), 0.15, size=(num_draws, num_systems))
    theta = skill[:, cells.pair_b] - skill[:, cells.pair_a]
    log_alpha = rng.normal(0.0, 0.3, size=(num_draws, cells.num_items))
    b = np.sort(rng.normal(0.0, 1.0, size=(num_draws, cells.num_items, 2)), axis=-1)
    posterior = Posterior(
        draws={
            "skill": skill[None],
            "theta": theta[None],
            "log_alpha": log_alpha[None],
            "alpha": np.exp(log_alpha)[None],
            "b": b[None],
        },
        method="laplace",
        diagnostics=Diagnostics(),
    )
    return cells, posterior, judgments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--systems", type=int, default=30)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args(argv)

    cells, posterior, judgments = simulated_campaign(args.prompts, args.systems)
    start = time.perf_counter()
    snapshot, maps = snapshot_from_posteriors([posterior], [cells], version=1)
    prepare_ms = 1000 * (time.perf_counter() - start)
    state = CellState.open(snapshot.num_comparisons, snapshot.num_prompts)
    rng = np.random.default_rng(1)
    times = []
    sizes = []
    for r in range(args.repeats + 2):
        exclude = rng.random(state.available.shape) < 0.02  # an annotator's judged cells
        request = Request(size=args.size, exclude=exclude)
        start = time.perf_counter()
        batch, _ = recommend(r, snapshot, state, request)
        elapsed = 1000 * (time.perf_counter() - start)
        if r >= 2:  # the first calls warm numpy/JAX caches
            times.append(elapsed)
            sizes.append(len(batch))
    result = {
        "prompts": args.prompts,
        "systems": args.systems,
        "comparisons": snapshot.num_comparisons,
        "candidate_cells": int(snapshot.num_comparisons * snapshot.num_prompts),
        "batch_size": args.size,
        "returned": int(min(sizes)),
        "repeats": args.repeats,
        "p50_ms": float(np.percentile(times, 50)),
        "p95_ms": float(np.percentile(times, 95)),
        "max_ms": float(np.max(times)),
        "prepare_snapshot_ms": prepare_ms,
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
