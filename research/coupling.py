"""Does a comparison's verdict move when *other* comparisons get fewer judgments?

The audit behind the decisions: fit the graded-response model (fast path) on the full ChatEval
NCM log, thin the clearly decided comparisons (|z| > 3) to a share of their judgments while
keeping every judgment of the others, refit, and compare the others' z; then the same for the
decisions (adaptive.stopping.decisions), which use each comparison's own judgments only.
``--model default`` is the per-judgment model with a prompt-by-comparison effect and symmetric
thresholds (the model-based default when this was measured), ``paper`` the paper's model.

Usage:
    python research/coupling.py [--share 0.2] [--model paper|default]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adaptive.core.cells import build_cells  # noqa: E402
from adaptive.core.data import read_judgments  # noqa: E402
from adaptive.estimation.fitting import FitConfig, fit_cells  # noqa: E402
from adaptive.stopping.decisions import decide_cells  # noqa: E402
from stan_free_models.conditional import REFINE_SWEEPS  # noqa: E402


def z_of(posterior):
    theta = posterior.flat("theta")
    return theta.mean(axis=0) / theta.std(axis=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--share", type=float, default=0.2)
    parser.add_argument("--model", choices=["paper", "default"], default="paper")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    judgments = read_judgments(ROOT / "data" / "chateval_ncm" / "judgments.csv")
    rng = np.random.default_rng(args.seed)
    # the model-based fast path of the time: exact item draws and Gibbs sweeps, no robust
    # intervals (FitConfig's defaults are the default model's, which has neither)
    model_based = dict(exact_items=True, refine_sweeps=REFINE_SWEEPS, robust=False)
    if args.model == "paper":
        config = FitConfig(method="fast", likelihood="net", num_draws=2000, **model_based)
    else:
        config = FitConfig(
            method="fast",
            likelihood="judgment",
            thresholds="symmetric",
            cell_effect=True,
            num_draws=2000,
            **model_based,
        )
    full_cells = build_cells(judgments)
    z_full = z_of(fit_cells(full_cells, config))
    clear = np.abs(z_full) > 3
    comp = full_cells.judgment_comparison
    keep = ~clear[comp] | (rng.random(len(comp)) < args.share)
    # rebuild from the kept rows so the cells (net ratings) match the judgments
    thin = build_cells(
        judgments.filter(keep.tolist()) if hasattr(judgments, "filter") else judgments
    )
    z_thin = z_of(fit_cells(thin, config))
    # the same comparisons, matched by names
    names_full = full_cells.comparison_names()
    index = {n: i for i, n in enumerate(thin.comparison_names())}
    moved = []
    for c in np.flatnonzero(~clear):
        moved.append(abs(z_thin[index[names_full[c]]] - z_full[c]))
    d_full = decide_cells(full_cells)
    d_thin = decide_cells(thin)
    same = all(
        d_thin.outcome[index[names_full[c]]] == d_full.outcome[c]
        and d_thin.closed_at[index[names_full[c]]] == d_full.closed_at[c]
        for c in np.flatnonzero(~clear)
    )
    print(f"model: {args.model}; clear comparisons (|z| > 3) thinned to {args.share:.0%}")
    print(f"{int(clear.sum())} clear, {int((~clear).sum())} kept whole")
    print(
        f"mean |change of z| of the kept comparisons: {np.mean(moved):.2f} (max {np.max(moved):.2f})"
    )
    print(f"decisions of the kept comparisons unchanged: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
