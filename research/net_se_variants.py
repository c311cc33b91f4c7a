"""Which standard error of Δ holds on sparse data: the cell-residual variants side by side.

Δ users read is each comparison's mean over its cells of the cell's mean signed judgment
(``stan_free_models/net_estimate.py``); its variance is a sum over cells of an estimate of
var(ȳ_c). On every simulator the default's HC2 estimate, (ȳ_c - m̂_c)^2 / (1 - h_c) with
h_c capped at 0.8, gave |z| spreads of 1.14-1.17 at 5% of the data (research/calibration/).
This fits the default model once per campaign and share and scores, from the same fit,
each variant of var(ȳ_c):

* ``hc2``: the default (leverage capped at ``MAX_LEVERAGE``);
* ``hc3``: (ȳ_c - m̂_c)^2 / (1 - h_c)^2 (Long & Ervin 2000's small-sample choice), same cap;
* ``blend``: (ȳ_c - m̂_c)^2 + h_c v̂_c / k_c: unbiased under the model (E resid^2 =
  (1 - h) v / k), the residual where the data can speak and the model's variance for the
  share of the cell's noise the fit absorbed;
* ``blend3``: (ȳ_c - m̂_c)^2 / (1 - h_c) over the uncapped part plus the model's variance
  beyond the cap;
* ``hc25``: (ȳ_c - m̂_c)^2 / (1 - h_c)^1.5, between the two;
* ``hc2_cap95``: HC2 with leverages capped at 0.95;
* ``hc2_satt``: HC2 with the Student t's degrees of freedom of a sum of independent
  one-degree terms (Welch-Satterthwaite: (sum a_c)^2 / sum a_c^2, a_c the cells' terms)
  instead of cells - 1.

    python research/net_se_variants.py --kinds rough net-split varied paper \\
        --fractions 0.05 0.15 --campaigns 20 --jsonl research/calibration/net_se_variants.jsonl
    python research/net_se_variants.py --summarize research/calibration/net_se_variants.jsonl

Each row: kind, seed, share and, per comparison, the estimate, truth, cells and each
variant's sd. Fits already in the file are not run again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

VARIANTS = ("hc2", "hc3", "blend", "blend3", "hc25", "hc2_cap95", "hc2_satt")


def variant_sds(y, k, comp, num_comparisons, fit, cap) -> dict[str, np.ndarray]:  # noqa: ANN001
    """Each variant's sd of Δ per comparison from one fit's cell pieces."""
    resid_sq = (y - fit.fitted) ** 2
    h = np.clip(fit.leverage, 0.0, 1.0)
    hc = np.minimum(h, cap)
    model_var = fit.variance / k
    per_cell = {
        "hc2": resid_sq / (1.0 - hc),
        "hc3": resid_sq / (1.0 - hc) ** 2,
        "blend": resid_sq + h * model_var,
        "blend3": resid_sq / (1.0 - hc) + np.maximum(h - hc, 0.0) * model_var,
        "hc25": resid_sq / (1.0 - hc) ** 1.5,
        "hc2_cap95": resid_sq / (1.0 - np.minimum(h, 0.95)),
    }
    n = np.bincount(comp, minlength=num_comparisons).astype(float)
    out = {
        name: np.sqrt(np.bincount(comp, weights=v, minlength=num_comparisons)) / np.maximum(n, 1)
        for name, v in per_cell.items()
    }
    a = per_cell["hc2"]
    total = np.bincount(comp, weights=a, minlength=num_comparisons)
    squares = np.bincount(comp, weights=a**2, minlength=num_comparisons)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["df_satt"] = np.nan_to_num(total**2 / squares, nan=1.0)
    out["hc2_satt"] = out["hc2"]
    return out


def one_fit(kind: str, seed: int, fraction: float, comparisons: int, prompts: int) -> dict:
    from calibration import campaign, fitted_truth, subsample

    from adaptive.estimation.fitting import cell_of_observations, preset_config
    from adaptive.estimation.pipeline import analyze
    from stan_free_models.net_estimate import MAX_LEVERAGE, cell_fit

    camp = campaign(kind, seed, comparisons, prompts)
    frame = subsample(pl.DataFrame(camp.rows), fraction, seed)
    # as research/calibration.py's fast rows: the default model, 1000 draws, seeded
    config = preset_config("default", method="fast", seed=seed, num_draws=1000)
    start = time.perf_counter()
    result = analyze(frame, config=config, group_redundant=False)
    cells, post = result.cells, result.posterior
    cell = cell_of_observations(cells, "judgment")
    num_cells = int(cell.max()) + 1
    count = np.bincount(cell, minlength=num_cells).astype(float)
    signed = cells.judgment_y.astype(float) - 1.0
    y = np.bincount(cell, weights=signed, minlength=num_cells) / np.maximum(count, 1.0)
    comp = np.zeros(num_cells, np.int64)
    item = np.zeros(num_cells, np.int64)
    comp[cell] = cells.judgment_comparison
    item[cell] = cells.judgment_item
    mode = post.info["mode_values"]
    fit = cell_fit(
        comp,
        item,
        count,
        cells.num_comparisons,
        post.flat("theta"),
        post.flat("alpha"),
        post.flat("b"),
        (mode["theta"], mode["alpha"], mode["b"]),
    )
    sds = variant_sds(y, count, comp, cells.num_comparisons, fit, MAX_LEVERAGE)
    n = np.bincount(comp, minlength=cells.num_comparisons)
    est = np.bincount(comp, weights=y, minlength=cells.num_comparisons) / np.maximum(n, 1)
    return {
        "kind": kind,
        "seed": seed,
        "fraction": fraction,
        "seconds": round(time.perf_counter() - start, 2),
        "est": est.tolist(),
        "truth": fitted_truth(camp, cells).tolist(),
        "cells": n.tolist(),
        "high_leverage_share": float(np.mean(fit.leverage > MAX_LEVERAGE)),
        **{f"sd_{name}": v.tolist() for name, v in sds.items() if name != "df_satt"},
        "df_satt": sds["df_satt"].tolist(),
    }


def summarize(path: str) -> None:
    from scipy import stats

    rows = [json.loads(line) for line in open(path)]
    keys = sorted({(r["kind"], r["fraction"]) for r in rows})
    print(f"{'kind':10} {'share':>6} {'fits':>4} " + " ".join(f"{v:>16}" for v in VARIANTS))
    rows = [r for r in rows if "df_satt" in r]
    for kind, frac in keys:
        rr = [r for r in rows if r["kind"] == kind and r["fraction"] == frac]
        est = np.concatenate([r["est"] for r in rr])
        truth = np.concatenate([r["truth"] for r in rr])
        n = np.concatenate([r["cells"] for r in rr])
        q_cells = stats.t.ppf(0.975, np.maximum(n - 1, 1))
        df_satt = np.concatenate([r["df_satt"] for r in rr])
        cols = []
        for v in VARIANTS:
            sd = np.concatenate([r[f"sd_{v}"] for r in rr])
            q = stats.t.ppf(0.975, np.maximum(df_satt, 1)) if v.endswith("satt") else q_cells
            z = (est - truth) / sd
            cover = np.mean(np.abs(z) <= q)
            cols.append(f"{cover:.3f} sdz {np.std(z):.2f}")
        print(f"{kind:10} {frac:>6} {len(rr):>4} " + " ".join(f"{c:>16}" for c in cols))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", nargs="+", default=["rough", "net-split", "varied", "paper"])
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.05, 0.15])
    parser.add_argument("--campaigns", type=int, default=20)
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--jsonl", default=None)
    parser.add_argument("--summarize", default=None)
    args = parser.parse_args(argv)
    if args.summarize:
        summarize(args.summarize)
        return 0
    sys.path.insert(0, str(ROOT / "research"))
    done = set()
    if args.jsonl and os.path.exists(args.jsonl):
        done = {
            (r["kind"], r["seed"], r["fraction"])
            for r in (json.loads(line) for line in open(args.jsonl))
        }
    for kind in args.kinds:
        for seed in range(args.campaigns):
            for fraction in args.fractions:
                if (kind, seed, fraction) in done:
                    continue
                row = one_fit(kind, seed, fraction, args.comparisons, args.prompts)
                print(f"{kind} seed {seed} share {fraction}: {row['seconds']} s", file=sys.stderr)
                if args.jsonl:
                    with open(args.jsonl, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
    if args.jsonl:
        summarize(args.jsonl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
