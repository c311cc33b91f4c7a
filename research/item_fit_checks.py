"""Item fit flags on seeded simulations with planted misfitting prompts, and their cost.

Each row: one campaign of ``stan_free_models.simulate.simulate_planted_misfits`` (20
comparisons, 200 prompts, 3 annotators; a share of prompts reversed or random), fitted
with the default fast path, checked by ``adaptive.item_fit.analysis_item_fit``: recall
of the planted prompts and the share of the other prompts flagged. The last row times
the check on the bundled ChatEval NCM log.

    .venv/bin/python research/item_fit_checks.py            # 5 seeds per scenario
    .venv/bin/python research/item_fit_checks.py --seeds 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from adaptive.data import read_judgments
from adaptive.fitting import preset_config
from adaptive.item_fit import DEFAULT_LEVEL, analysis_item_fit
from adaptive.pipeline import analyze
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


def check(scenario: str, seed: int) -> dict[str, Any]:
    options = dict(SCENARIOS[scenario])
    rows, planted = simulate_planted_misfits(np.random.default_rng(seed), **options)
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
        "level": DEFAULT_LEVEL,
        "num_planted": int(bad.sum()),
        "recall": float(info.flagged[bad].mean()) if bad.any() else None,
        "false_flag_rate": float(info.flagged[~bad].mean()),
        "num_false_flags": int(info.flagged[~bad].sum()),
        "check_seconds": round(seconds, 2),
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
    args = parser.parse_args()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    rows = [check(s, seed) for s in SCENARIOS for seed in range(args.seeds)]
    rows.append(ncm_cost())
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in SCENARIOS:
        mine = [r for r in rows if r["scenario"] == name]
        recall = [r["recall"] for r in mine if r["recall"] is not None]
        print(
            f"{name}: recall {np.mean(recall) if recall else float('nan'):.3f}, false flags "
            f"{np.mean([r['false_flag_rate'] for r in mine]):.3f} "
            f"(max {max(r['false_flag_rate'] for r in mine):.3f}) over {len(mine)} campaigns"
        )
    print(rows[-1])


if __name__ == "__main__":
    main()
