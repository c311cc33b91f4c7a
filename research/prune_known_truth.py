"""New systems' full-set net preference from a few prompts, on campaigns with known truth.

    python research/prune_known_truth.py                 # about a minute
    python research/prune_known_truth.py --reps 200 --per-cell 1 3 10

Each replicate draws a campaign (:func:`adaptive.prompts.prune_simulate.simulate_truth`:
200 prompts of log-normal discrimination, 11 systems); 3 systems are new. The old
systems' comparisons are judged on every prompt (``--per-cell`` judgments a cell); each
prompt's shared effect v_p is its posterior mean under
:func:`adaptive.prompts.prune_shrinkage.fit_shrinkage` on those judgments. k prompts are
kept by one of

* ``anchors``: the medoids of k equal slices of v_p (:func:`~adaptive.prompts.prune_anchors.anchor_prompts`);
* ``top``: the k largest v_p (the most discriminating, as information ranking keeps);
* ``random``: k at random;

then only the kept prompts are judged on every comparison with a new system, and its
full-set net preference (the mean of the true cell means over all 200 prompts) is
estimated by ``regression`` (:func:`~adaptive.prompts.prune_anchors.regression_estimate`
on v_p) or by the kept prompts' ``mean`` (:func:`~adaptive.prompts.prune_anchors.mean_estimate`),
with a 95% interval. Rows (appended to research/prune/known_truth.jsonl): per judgments a
cell, k, selection and estimator, the RMSE over replicates and new comparisons, the
coverage of the interval, and the RMSE over random prompts' mean (``error_ratio``), with
the bound on that ratio the cell means' noise sets (``bound``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from adaptive.prompts.prune_anchors import (
    anchor_prompts,
    error_ratio_bound,
    mean_estimate,
    regression_estimate,
)
from adaptive.prompts.prune_folds import cell_table
from adaptive.prompts.prune_shrinkage import fit_shrinkage
from adaptive.prompts.prune_simulate import judge, simulate_truth

ROWS = Path(__file__).parent / "prune" / "known_truth.jsonl"
METHODS = (
    ("anchors", "regression"),
    ("top", "regression"),
    ("random", "regression"),
    ("top", "mean"),
    ("random", "mean"),
)


def cell_noise(table, comparison: int, kept: np.ndarray, per_cell: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """(k,) each kept cell mean's noise variance: pooled within-cell variance over n."""
    count = table.count[kept, comparison]
    total, squares = table.total[kept, comparison], table.squares[kept, comparison]
    if per_cell > 1:
        within = float(np.sum(squares - total**2 / count) / np.sum(count - 1))
    else:  # one judgment a cell: a judgment's variance about the comparison's mean
        within = float(np.mean(squares / count) - np.mean(total / count) ** 2)
    return np.full(len(kept), max(within, 0.02) / per_cell)


def replicate(rng: np.random.Generator, per_cell: int, ks, num_new: int, args) -> list[dict]:  # type: ignore[no-untyped-def]
    truth = simulate_truth(rng, spread=args.spread, interaction=args.interaction)
    num_s = len(truth.skill)
    new = rng.choice(num_s, num_new, replace=False)
    is_new = np.isin(truth.pair_a, new) | np.isin(truth.pair_b, new)
    old_comps, new_comps = np.flatnonzero(~is_new), np.flatnonzero(is_new)
    old = cell_table(judge(rng, truth, old_comps, per_cell))
    model = fit_shrinkage(old, old_comps)
    score = model.v_mean
    fresh = cell_table(judge(rng, truth, new_comps, per_cell))
    num_p = len(score)
    between = float(np.mean(np.var(truth.mu[:, new_comps], axis=0)))
    noise = float(np.mean([cell_noise(fresh, c, np.arange(num_p), per_cell)[0] for c in new_comps]))
    out = []
    for k in ks:
        sets = {
            "anchors": anchor_prompts(score, k),
            "top": np.argsort(-score)[:k],
            "random": rng.choice(num_p, k, replace=False),
        }
        for selection, estimator in METHODS:
            kept = sets[selection]
            for c in new_comps:
                y = fresh.total[kept, c] / fresh.count[kept, c]
                noise_k = cell_noise(fresh, c, kept, per_cell)
                est = (
                    regression_estimate(y, score[kept], score, noise_k)
                    if estimator == "regression"
                    else mean_estimate(y, num_p, noise_k)
                )
                low, high = est.interval(0.95)
                target = truth.full_set[c]
                out.append(
                    {
                        "per_cell": per_cell,
                        "k": k,
                        "selection": selection,
                        "estimator": estimator,
                        "error": est.estimate - target,
                        "covered": bool(low <= target <= high),
                        "between": between,
                        "noise": noise,
                    }
                )
    return out


def summarize(raw: list[dict]) -> list[dict]:
    rows = []
    keys = sorted({(r["per_cell"], r["k"]) for r in raw})
    for per_cell, k in keys:
        mine = [r for r in raw if (r["per_cell"], r["k"]) == (per_cell, k)]
        base = np.sqrt(
            np.mean(
                [
                    r["error"] ** 2
                    for r in mine
                    if r["selection"] == "random" and r["estimator"] == "mean"
                ]
            )
        )
        bound = error_ratio_bound(
            np.mean([r["between"] for r in mine]), np.mean([r["noise"] for r in mine])
        )
        for selection, estimator in METHODS:
            sel = [r for r in mine if (r["selection"], r["estimator"]) == (selection, estimator)]
            rmse = float(np.sqrt(np.mean([r["error"] ** 2 for r in sel])))
            rows.append(
                {
                    "per_cell": per_cell,
                    "k": k,
                    "selection": selection,
                    "estimator": estimator,
                    "rmse": rmse,
                    "coverage": float(np.mean([r["covered"] for r in sel])),
                    "error_ratio": rmse / base,
                    "bound": bound,
                    "estimates": len(sel),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--per-cell", type=int, nargs="*", default=[1, 3, 10])
    parser.add_argument("--keep", type=int, nargs="*", default=[25, 50])
    parser.add_argument("--new", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spread", type=float, default=0.6, help="sd of log discrimination")
    parser.add_argument("--interaction", type=float, default=0.3, help="sd of u_pc")
    parser.add_argument("--out", default=str(ROWS))
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    raw = []
    for per_cell in args.per_cell:
        for _ in range(args.reps):
            raw += replicate(rng, per_cell, args.keep, args.new, args)
    rows = summarize(raw)
    command = " ".join(shlex.quote(a) for a in ["python", *sys.argv])
    print("per_cell | k | selection | estimator | rmse | coverage | error_ratio | bound")
    for r in rows:
        print(
            f"{r['per_cell']} | {r['k']} | {r['selection']} | {r['estimator']} | {r['rmse']:.4f} | "
            f"{r['coverage']:.3f} | {r['error_ratio']:.2f} | {r['bound']:.2f}"
        )
    if args.out:
        with Path(args.out).open("a") as out:
            for r in rows:
                out.write(
                    json.dumps(
                        {
                            **r,
                            "reps": args.reps,
                            "spread": args.spread,
                            "interaction": args.interaction,
                            "command": command,
                        }
                    )
                    + "\n"
                )


if __name__ == "__main__":
    main()
