"""The SE ratio ``evalset prune`` prints against fresh judgments drawn from a known truth.

    python research/prune_precision_known_truth.py --seeds 3

Each seed draws a campaign of the issue's size (:func:`adaptive.prompts.prune_simulate.simulate_truth`:
377 prompts, 10 systems, 3 judgments a cell, ~51,000 judgments), prunes it with the product
(``fit_tiers`` + ``predict_precision``, ``--rank shared`` and ``information``), then draws
``--fresh`` new campaigns from the same truth with the same layout and measures each tier's
SE ratio on them (median over the clearly signed comparisons; the figure is the median
over the fresh campaigns). Rows are appended to research/prune/precision_known_truth.jsonl.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import jax
import numpy as np

from adaptive.core.cells import build_cells
from adaptive.prompts.loco_data import loco_data
from adaptive.prompts.prune_folds import cell_table, judged_from_cells
from adaptive.prompts.prune_predict import predict_precision
from adaptive.prompts.prune_simulate import judge, simulate_truth
from adaptive.prompts.pruning import PruneConfig, fit_tiers

sys.path.insert(0, str(Path(__file__).parent))
from prune_precision_checks import held_out_ratio  # noqa: E402

ROWS = Path(__file__).parent / "prune" / "precision_known_truth.jsonl"


def frame(truth, judged):  # type: ignore[no-untyped-def]
    import polars as pl

    winner = np.where(judged.x > 0, "b", np.where(judged.x < 0, "a", "tie"))
    return pl.DataFrame(
        {
            "item_id": [f"p{p:03d}" for p in judged.prompt],
            "system_a": [f"s{truth.pair_a[c]}" for c in judged.comparison],
            "system_b": [f"s{truth.pair_b[c]}" for c in judged.comparison],
            "annotator_id": [f"r{(a + p) % 40}" for a, p in zip(judged.annotator, judged.prompt)],
            "winner": winner.tolist(),
            "dimension": "overall",
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--fresh", type=int, default=20)
    parser.add_argument("--keep", type=int, nargs="*", default=[60, 94, 188])
    parser.add_argument("--out", default=str(ROWS))
    args = parser.parse_args()
    command = " ".join(shlex.quote(a) for a in ["python", *sys.argv])
    rows = []
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        truth = simulate_truth(rng, num_prompts=377, num_systems=10)
        comps = np.arange(len(truth.pair_a))
        cells = build_cells(frame(truth, judge(rng, truth, comps, 3)))
        # the cells' order of prompts and comparisons, to lay fresh judgments out alike
        prompt_of = np.array([int(p[1:]) for p in cells.prompts])
        system_of = np.array([int(s[1:]) for s in cells.systems])
        pair = {(a, b): c for c, (a, b) in enumerate(zip(truth.pair_a, truth.pair_b))}
        comp_of = np.array(
            [pair[(system_of[a], system_of[b])] for a, b in zip(cells.pair_a, cells.pair_b)]
        )
        table = cell_table(judged_from_cells(cells))
        data = loco_data(cells)
        fits = fit_tiers(data, PruneConfig(keep=60, seed=seed), jax.random.PRNGKey(seed))
        fresh_tables = []
        for _ in range(args.fresh):
            fresh = judge(rng, truth, comps, 3)
            t = cell_table(fresh)
            fresh_tables.append(
                type(t)(*(a[np.ix_(prompt_of, comp_of)] for a in (t.total, t.squares, t.count)))
            )
        for rank in ("shared", "information"):
            for k in args.keep:
                config = PruneConfig(keep=k, seed=seed, rank=rank)
                plans, precisions = predict_precision(table, config, fits)
                for plan, precision in zip(plans, precisions):
                    measured = [
                        held_out_ratio(t, plan, len(cells.prompts))[0] for t in fresh_tables
                    ]
                    truth_ratio = float(np.median(measured))
                    rows.append(
                        {
                            "seed": seed,
                            "rank": rank,
                            "tier": plan.tier,
                            "keep": k,
                            "comparisons": len(plan.comparisons),
                            "fresh": truth_ratio,
                            "fresh_range": [float(np.min(measured)), float(np.max(measured))],
                            "printed": precision.se_ratio,
                            "low": precision.low,
                            "high": precision.high,
                            "in_sample": precision.in_sample,
                            "command": command,
                        }
                    )
                    r = rows[-1]
                    print(
                        f"seed {seed} {rank} tier {plan.tier} k {k}: fresh {truth_ratio:.2f} "
                        f"printed {r['printed']:.2f} ({r['low']:.2f}-{r['high']:.2f}) "
                        f"in-sample {r['in_sample']:.2f} error {r['printed'] / truth_ratio - 1:+.0%}"
                    )
    errors = np.array([r["printed"] / r["fresh"] - 1 for r in rows])
    print(
        f"within 15%: {np.mean(np.abs(errors) <= 0.15):.0%} of {len(rows)}; "
        f"median |error| {np.median(np.abs(errors)):.1%}"
    )
    if args.out:
        with Path(args.out).open("a") as out:
            for r in rows:
                out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
