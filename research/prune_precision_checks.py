"""The SE ratio ``evalset prune`` prints against the one held-out annotators give, over seeds.

    python research/prune_precision_checks.py --logs ncm mtbench ai_teacher screens --seeds 3

For every log, seed and k: one annotator of every cell with several is held out (as in
``research/prune_holdout.py``, protocol ``annotators``); the product prunes the rest
(``fit_tiers`` + ``plan_tiers``, ``--keep k``) and predicts the kept set's SE ratio on
fresh judgments; the held-out judgments then measure it. Rows (appended to
research/prune/precision.jsonl), per tier:

* ``held_out``: SNR_full / SNR_kept on the held-out judgments, median over the comparisons
  they clearly sign (the truth the prediction is checked against);
* ``shrinkage``: :func:`adaptive.prompts.prune_shrinkage.fresh_se_ratio` on the training
  judgments, for fresh judgments laid out like the held-out ones (one a cell), with its
  90% interval (``shrinkage_low``, ``shrinkage_high``); ``shrinkage_design``: the same for
  a repeat of the training design (what ``evalset prune`` prints on the training log);
* ``crossfit`` (with ``--crossfit``): the previous cross-fitted figure
  (:mod:`adaptive.prompts.prune_crossfit`);
* ``in_sample``: the model's expected SE ratio.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import jax
import numpy as np

from adaptive.core.cells import build_cells
from adaptive.core.data import read_judgments
from adaptive.prompts.loco_data import loco_data
from adaptive.prompts.prune_crossfit import crossfit, fold_data
from adaptive.prompts.prune_folds import (
    cell_table,
    clearly_signed,
    judged_from_cells,
    prompt_mask,
    se_ratios,
    snr,
)
from adaptive.prompts.prune_predict import shared_scores
from adaptive.prompts.prune_shrinkage import fresh_se_ratio
from adaptive.prompts.pruning import PruneConfig, fit_tiers, plan_tiers

sys.path.insert(0, str(Path(__file__).parent))
from prune_holdout import LOGS, held_out_annotators  # noqa: E402

ROWS = Path(__file__).parent / "prune" / "precision.jsonl"


def held_out_ratio(table, plan, num_p: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Median over the clearly signed comparisons of the tier's SNR_full / SNR_kept."""
    sub = type(table)(*(a[:, plan.comparisons] for a in (table.total, table.squares, table.count)))
    full = snr(sub, np.ones(num_p, dtype=bool))
    kept = snr(sub, prompt_mask(plan.kept, num_p))
    clear = clearly_signed(full)
    use = clear if clear.any() else np.isfinite(full)
    if not use.any():
        return (np.nan, 0)
    return (float(np.median(se_ratios(full, kept)[use])), int(clear.sum()))


def run_log(log: str, args) -> list[dict]:  # type: ignore[no-untyped-def]
    path, dim = LOGS[log]
    judgments = read_judgments(path)
    cells = build_cells(judgments, dimension=dim or judgments["dimension"][0])
    judged, data = judged_from_cells(cells), loco_data(cells)
    num_p = len(cells.prompts)
    ks = sorted({k for k in (25, 50, 100) if k < num_p} | {max(3, num_p // 4), num_p // 2})
    rows = []
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        test = held_out_annotators(judged, rng)
        train_data, weight = fold_data(data, judged, ~test)
        train_judged = judged.subset(~test)
        train_table, eval_table = cell_table(train_judged), cell_table(judged.subset(test))
        config = PruneConfig(keep=ks[0], seed=seed)
        fits = fit_tiers(train_data, config, jax.random.PRNGKey(seed), cell_weight=weight)
        ranked = shared_scores(train_table, fits) if args.rank == "shared" else fits
        for k in ks:
            start = time.perf_counter()
            plans = plan_tiers(ranked, keep=k, target_se_ratio=None)
            cross = None
            if args.crossfit:
                cross = crossfit(train_data, train_judged, PruneConfig(keep=k, seed=seed), fits)[1]
            for t, plan in enumerate(plans):
                truth, clear = held_out_ratio(eval_table, plan, num_p)
                if clear < args.min_clear:
                    continue
                fresh = eval_table.count[:, plan.comparisons]
                eb = fresh_se_ratio(
                    train_table, plan.comparisons, plan.kept, rng, fresh_count=fresh
                )
                design = fresh_se_ratio(train_table, plan.comparisons, plan.kept, rng)
                variants = {
                    f"shrinkage_{v}": fresh_se_ratio(
                        train_table,
                        plan.comparisons,
                        plan.kept,
                        rng,
                        fresh_count=fresh,
                        prompt_effect=v,
                    ).se_ratio
                    for v in ("additive", "none")
                }
                variants["shrinkage_normal"] = fresh_se_ratio(
                    train_table, plan.comparisons, plan.kept, rng, fresh_count=fresh, prior="normal"
                ).se_ratio
                rows.append(
                    {
                        "log": log,
                        "seed": seed,
                        "rank": args.rank,
                        "tier": plan.tier,
                        "keep": k,
                        "kept": len(plan.kept),
                        "clear": clear,
                        "held_out": truth,
                        "shrinkage": eb.se_ratio,
                        "shrinkage_low": eb.low,
                        "shrinkage_high": eb.high,
                        "shrinkage_design": design.se_ratio,
                        "prompt_share": eb.prompt_share,
                        **variants,
                        "crossfit": None if cross is None else cross[t].se_ratio,
                        "in_sample": plan.se_ratio,
                        "seconds": round(time.perf_counter() - start, 2),
                        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
                    }
                )
    return rows


def summary(rows: list[dict]) -> None:
    print("log | tier | k | held_out (seeds) | shrinkage | crossfit | in_sample | within 15%")
    keys = sorted({(r["log"], r["tier"], r["keep"]) for r in rows})
    for log, tier, k in keys:
        mine = [r for r in rows if (r["log"], r["tier"], r["keep"]) == (log, tier, k)]
        truth = np.median([r["held_out"] for r in mine])
        eb = np.median([r["shrinkage"] for r in mine])
        cf = [r["crossfit"] for r in mine if r["crossfit"] is not None]
        cf_txt = f"{np.median(cf):.2f}" if cf else "-"
        insample = np.median([r["in_sample"] for r in mine])
        ok = abs(eb / truth - 1) <= 0.15
        print(
            f"{log} | {tier} | {k} | {truth:.2f} ({len(mine)}) | {eb:.2f} | {cf_txt} | "
            f"{insample:.2f} | {'yes' if ok else 'no'} ({eb / truth - 1:+.0%})"
        )
    for key in (
        "shrinkage",
        "shrinkage_normal",
        "shrinkage_additive",
        "shrinkage_none",
        "crossfit",
        "in_sample",
    ):
        errs = [np.log(r[key] / r["held_out"]) for r in rows if r.get(key) is not None]
        errs = [e for e in errs if np.isfinite(e)]
        if errs:
            print(
                f"{key}: median |log error| per row {np.median(np.abs(errs)):.3f}, "
                f"median log error {np.median(errs):+.3f}, rows {len(errs)}"
            )
    inside = [r["shrinkage_low"] <= r["held_out"] <= r["shrinkage_high"] for r in rows]
    print(f"held-out figure inside the 90% interval: {np.mean(inside):.0%} of {len(rows)} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logs", nargs="*", default=["ncm", "mtbench", "ai_teacher", "screens"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--min-clear", type=int, default=1)
    parser.add_argument("--crossfit", action="store_true")
    parser.add_argument("--rank", choices=["information", "shared"], default="information")
    parser.add_argument("--out", default=str(ROWS))
    args = parser.parse_args()
    rows = []
    for log in args.logs:
        rows += run_log(log, args)
    if args.out:
        with Path(args.out).open("a") as out:
            for row in rows:
                out.write(json.dumps(row) + "\n")
    summary(rows)


if __name__ == "__main__":
    main()
