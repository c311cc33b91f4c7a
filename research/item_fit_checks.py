"""Item fit flags on seeded simulations with planted misfitting prompts, and their cost.

Each row: one campaign of ``stan_free_models.simulate.simulate_planted_misfits`` (20
comparisons, 200 prompts, 3 annotators; a share of prompts reversed or random), fitted
with the default fast path, checked by ``adaptive.estimation.item_fit.analysis_item_fit``: recall
of the planted prompts and the share of the other prompts flagged. The row with
``scenario: ncm-cost`` times the check on the bundled ChatEval NCM log.

``--sparse`` runs the recall and false-flag scenarios again on subsampled campaigns (each
judgment kept with probability 0.6, 0.3 or 0.1, or one judgment of each comparison-by-prompt
cell) and appends those rows, each with its command, to the same file (replacing the
sparse rows of an earlier run).

    .venv/bin/python research/item_fit_checks.py            # 5 seeds per scenario
    .venv/bin/python research/item_fit_checks.py --seeds 2
    .venv/bin/python research/item_fit_checks.py --sparse   # sparse rows, 5 seeds each
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from adaptive.core.data import read_judgments
from adaptive.estimation.fitting import preset_config
from adaptive.estimation.item_fit import DEFAULT_LEVEL, analysis_item_fit
from adaptive.estimation.pipeline import analyze
from stan_free_models.simulate import simulate_planted_misfits

OUT = Path(__file__).parent / "item_fit" / "checks.jsonl"
NCM = Path(__file__).parents[1] / "data" / "chateval_ncm" / "judgments.csv"

#: name -> simulator options
SCENARIOS: dict[str, dict[str, Any]] = {
    "reversed": dict(planted=0.1, kind="reversed"),
    "null": dict(planted=0.0),
    "misspecified-null": dict(planted=0.0, cell_sd=0.7, random_annotators=0.2),
    "misspecified-reversed": dict(planted=0.1, kind="reversed", cell_sd=0.7, random_annotators=0.2),
    "random": dict(planted=0.1, kind="random"),
}
#: the scenarios run again on sparse campaigns: recall, and false flags with and without
#: dependent, noisy judgments
SPARSE_SCENARIOS = ("reversed", "null", "misspecified-null", "misspecified-reversed")
#: name -> how a campaign is thinned: a share of judgments kept, or one judgment per cell
SUBSAMPLES: dict[str, dict[str, Any]] = {
    "keep-60%": dict(keep=0.6),
    "keep-30%": dict(keep=0.3),
    "one-per-cell": dict(per_cell=1),
    "keep-10%": dict(keep=0.1),
}
SPARSE_COMMAND = "python research/item_fit_checks.py --sparse"


def subsample(rng: np.random.Generator, rows: list[dict], num_annotators: int = 3,
              keep: float | None = None, per_cell: int | None = None) -> list[dict]:  # fmt: skip
    """``rows`` thinned: each kept with probability ``keep``, or ``per_cell`` of each cell's
    judgments kept (the simulator writes a cell's ``num_annotators`` judgments in a row)."""
    if keep is not None:
        return [r for r, u in zip(rows, rng.uniform(size=len(rows))) if u < keep]
    assert per_cell is not None
    cells = len(rows) // num_annotators
    order = rng.random((cells, num_annotators)).argsort(axis=1)[:, :per_cell]
    chosen = (np.arange(cells)[:, None] * num_annotators + order).ravel()
    return [rows[i] for i in np.sort(chosen)]


def check(scenario: str, seed: int, thinning: str | None = None) -> dict[str, Any]:
    options = dict(SCENARIOS[scenario])
    rows, planted = simulate_planted_misfits(np.random.default_rng(seed), **options)
    sparse: dict[str, Any] = {}
    if thinning is not None:
        num_full = len(rows)
        rows = subsample(np.random.default_rng([seed, 1]), rows, **SUBSAMPLES[thinning])
        sparse = {"subsample": thinning, **SUBSAMPLES[thinning], "num_judgments": len(rows),
                  "num_judgments_full": num_full}  # fmt: skip
    analysis = analyze(pl.DataFrame(rows), config=preset_config("default"), group_redundant=False)
    start = time.perf_counter()
    info = analysis_item_fit(analysis, seed=seed)
    seconds = time.perf_counter() - start
    items = np.array([m[0] for m in analysis.cells.item_members])
    bad = np.isin(items, planted)
    return {
        "scenario": scenario,
        "seed": seed,
        **options,
        **sparse,
        "num_items": int(items.shape[0]),
        "level": DEFAULT_LEVEL,
        "num_planted": int(bad.sum()),
        "recall": float(info.flagged[bad].mean()) if bad.any() else None,
        "false_flag_rate": float(info.flagged[~bad].mean()),
        "num_false_flags": int(info.flagged[~bad].sum()),
        "check_seconds": round(seconds, 2),
        **({"command": SPARSE_COMMAND} if thinning is not None else {}),
    }


def ncm_cost() -> dict[str, Any]:
    judgments = read_judgments(NCM)
    analysis = analyze(judgments, config=preset_config("default"))
    start = time.perf_counter()
    info = analysis_item_fit(analysis)
    return {
        "scenario": "ncm-cost",
        "num_judgments": analysis.cells.num_judgments,
        "num_items": analysis.cells.num_items,
        "num_draws": info.num_draws,
        "num_flagged": int(info.flagged.sum()),
        "check_seconds": round(time.perf_counter() - start, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--sparse", action="store_true", help="the sparse rows (appended)")
    args = parser.parse_args()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    if args.sparse:
        run_sparse(args.seeds)
        return
    rows = [check(s, seed) for s in SCENARIOS for seed in range(args.seeds)]
    rows.append(ncm_cost())
    sparse = [line + "\n" for line in _lines() if '"subsample"' in line]  # kept: --sparse's
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(sparse))
    for name in SCENARIOS:
        mine = [r for r in rows if r["scenario"] == name]
        recall = [r["recall"] for r in mine if r["recall"] is not None]
        print(
            f"{name}: recall {np.mean(recall) if recall else float('nan'):.3f}, false flags "
            f"{np.mean([r['false_flag_rate'] for r in mine]):.3f} "
            f"(max {max(r['false_flag_rate'] for r in mine):.3f}) over {len(mine)} campaigns"
        )
    print(rows[-1])


def _lines() -> list[str]:
    return OUT.read_text().splitlines() if OUT.exists() else []


def _rate(values: list[float]) -> str:
    if not values:
        return "-"
    return f"mean {np.mean(values):.3f}, min {min(values):.3f}, max {max(values):.3f}"


def run_sparse(num_seeds: int) -> None:
    """The sparse rows, appended to :data:`OUT` in place of an earlier run's."""
    rows = []
    for thinning in SUBSAMPLES:
        for scenario in SPARSE_SCENARIOS:
            for seed in range(num_seeds):
                start = time.perf_counter()
                rows.append(check(scenario, seed, thinning))
                print(f"{thinning} {scenario} seed {seed}: recall {rows[-1]['recall']}, false "
                      f"flags {rows[-1]['false_flag_rate']:.3f} "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
    kept = [line for line in _lines() if '"subsample"' not in line]
    OUT.write_text(
        "".join(line + "\n" for line in kept) + "".join(json.dumps(r) + "\n" for r in rows)
    )
    for thinning in SUBSAMPLES:
        for scenario in SPARSE_SCENARIOS:
            mine = [r for r in rows if r["subsample"] == thinning and r["scenario"] == scenario]
            recall = [r["recall"] for r in mine if r["recall"] is not None]
            print(
                f"{thinning} {scenario} ({mine[0]['num_judgments']} judgments): recall "
                f"{_rate(recall)}; false flags {_rate([r['false_flag_rate'] for r in mine])}"
            )


if __name__ == "__main__":
    main()
