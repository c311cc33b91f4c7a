"""Calibration of `evalset significance` on simulated campaigns with known truth.

Prints, per simulator, method and share of the data kept:

* null campaigns: the share of campaigns with any Holm-adjusted significant comparison;
* non-null campaigns: coverage of the 95% interval of the net preference Δ (the
  true Δ over each comparison's judged prompts), the mean |Δ estimate - true Δ| / sd,
  and the mean posterior sd of Δ (to compare fast with NUTS on the same data).

    python scripts/calibration.py --kind null --campaigns 40 --fractions 1 0.3 0.15 --method fast
    python scripts/calibration.py --kind paper --campaigns 20 --fractions 1 0.3 0.15 0.05 --method fast nuts
    python scripts/calibration.py --kind varied --campaigns 20 --fractions 1 0.3 0.15 0.05 --method fast nuts

``--kind``: ``null`` (all systems equal, A/B-exchangeable prompts: every true Δ is 0),
``null-asym`` (all systems equal, thresholds drawn as in the paper), ``paper`` (the
paper's setting), ``varied`` (prompt-by-comparison effects, sd 0.5, and 20% random
annotators), ``varied-cells`` / ``varied-random`` (each of the two alone), and ``rough``
(per-system heavy-tailed skills, heavy-tailed cell effects, annotators who differ in
sensitivity and tie readiness, 10% random annotators, missing cells and 1 + Poisson(2)
judgments per cell: ``simulate_rough_campaign``, a simulator the model was not tuned on),
``net-split`` (the paper's own story: a cell's net rating is one graded response, split
among its annotators: ``simulate_net_split_campaign``). ``--preset paper`` measures the
paper's model instead of the default; ``--cell-effect`` (with ``--lapse``) the model-based
treatment of dependent judgments that the default's robust intervals replaced.
``--gaussian-items`` skips the exact item draws of the model-based path.
``--jsonl FILE`` appends one line per fit, for tables made later; a fit already in FILE
(same kind, preset, seed, share and row label: method, lapse, sampler) is not run again, so a long measurement can be
stopped and resumed, and grown by later runs. The measured rows are kept in
``docs/calibration/`` (one file per simulator and method; see its README).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

KINDS = {
    "null": dict(null=True),
    "null-asym": dict(null=True, symmetric_null=False),
    "paper": dict(),
    "varied": dict(cell_sd=0.5, random_annotators=0.2),
    # the varied simulator's two departures from the model, one at a time
    "varied-cells": dict(cell_sd=0.5),
    "varied-random": dict(random_annotators=0.2),
    # everything at once, on stan_free_models.simulate.simulate_rough_campaign's defaults
    "rough": dict(simulator="rough"),
    # the paper's story: a cell's net rating is the graded response, split among its
    # annotators (stan_free_models.simulate.simulate_net_split_campaign)
    "net-split": dict(simulator="net-split"),
    # the rough simulator's strong effects alone (theta sd 2.5, leaning prompts, its design):
    # no cell effects, no random or differing annotators
    "rough-strong": dict(
        simulator="rough",
        sensitivity_sd=0.0,
        tie_sd=0.0,
        random_annotators=0.0,
        cell_scale=0.0,
        skill_df=1e9,
        skill_scale=1.8,
    ),
}


def campaign(kind: str, seed: int, num_comparisons: int, num_prompts: int):
    from stan_free_models.simulate import (
        simulate_campaign,
        simulate_net_split_campaign,
        simulate_rough_campaign,
    )

    rng = np.random.default_rng(seed)
    options = dict(KINDS[kind])
    simulate = {"rough": simulate_rough_campaign, "net-split": simulate_net_split_campaign}.get(
        options.pop("simulator", ""), simulate_campaign
    )
    return simulate(rng, num_comparisons=num_comparisons, num_prompts=num_prompts, **options)


def subsample(frame: pl.DataFrame, fraction: float, seed: int) -> pl.DataFrame:
    if fraction >= 1.0:
        return frame
    rng = np.random.default_rng(10_000 + seed)
    keep = np.sort(rng.choice(frame.height, size=round(fraction * frame.height), replace=False))
    return frame[keep]


def fitted_truth(camp, cells) -> np.ndarray:
    """(C,) the true Δ of each fitted comparison over the prompts it was judged on.

    The fit's comparison order is the first-seen order; it is mapped to the campaign's.
    """
    index = {(camp.systems[a], camp.systems[b]): i for i, (a, b) in enumerate(camp.pairs)}
    prompt_of = {p: j for j, p in enumerate(camp.prompts)}
    comp_true = np.array([index[n] for n in cells.comparison_names()])
    prompt_true = np.array([prompt_of[p] for p in cells.prompts])
    return camp.true_delta(
        comp_true[cells.judgment_comparison], prompt_true[cells.judgment_prompt]
    )[comp_true]


def coverage_fields(rows: list[dict], truth: np.ndarray) -> dict:
    """A row's coverage count, mean abs z and each comparison's estimate, sd and truth, and
    (where the fit ran it) each comparison's posterior predictive check and whether its
    interval covered the truth."""
    est = np.array([r["net_preference"] for r in rows])
    sd = np.array([r["net_sd"] for r in rows])
    low = np.array([r["net_ci_low"] for r in rows])
    high = np.array([r["net_ci_high"] for r in rows])
    inside = (low <= truth) & (truth <= high)
    fields = dict(
        covered=int(np.sum(inside)),
        num=len(rows),
        abs_z=float(np.mean(np.abs(est - truth) / sd)),
        mean_sd=float(np.mean(sd)),
        sd=sd.tolist(),
        est=est.tolist(),
        truth=truth.tolist(),
    )
    if all("ppc_z" in r for r in rows):
        fields |= dict(
            inside=inside.tolist(),
            ppc_z=[float(r["ppc_z"]) for r in rows],
            ppc_flag=[bool(r["ppc_flag"]) for r in rows],
        )
    return fields


def fit_rows(
    frame: pl.DataFrame, method: str, preset: str, seed: int, args
) -> tuple[list, object, object]:
    """The comparisons' rows of one fit, its analysis and the FitConfig it ran with."""
    from adaptive.pipeline import analyze
    from adaptive.significance import compare

    config = run_config(args, method, preset=preset, seed=seed)
    result = analyze(frame, config=config, group_redundant=False)
    rows = compare(result.posterior, result.cells, effect=not args.kind.startswith("null"))
    return rows, result, config


def model_overrides(args: argparse.Namespace) -> dict:
    """The lapse and sampler a run asks for: ``--lapse`` keeps the diagonal sampler its stored
    NUTS rows were measured with (``--sampler whitened`` for the default's), ``--no-lapse``
    measures the model without random answers; neither, the preset's own."""
    overrides: dict = {}
    if args.lapse:
        overrides.update(lapse=True, sampler="diagonal")
    elif args.no_lapse:
        overrides["lapse"] = False
    if args.sampler:
        overrides["sampler"] = args.sampler
    return overrides


def run_config(args: argparse.Namespace, method: str, *, preset: str | None = None, seed: int = 0):
    """The FitConfig of this run's fits with ``method`` (one place, so that a run's rows and
    the label it resumes by cannot disagree)."""
    from adaptive.fitting import preset_config

    overrides: dict = {}
    if args.thresholds:
        overrides["thresholds"] = args.thresholds
    if args.no_cell_effect:
        overrides["cell_effect"] = False
    elif getattr(args, "cell_effect", False):
        overrides["cell_effect"] = True
    if args.gaussian_items:
        overrides["exact_items"] = False
    if args.theta_scale is not None:
        overrides["theta_scale"] = args.theta_scale
    if args.refine_always:
        from stan_free_models.conditional import REFINE_SWEEPS

        overrides.update(refine_below=math.inf, exact_items=True, refine_sweeps=REFINE_SWEEPS)
    overrides.update(model_overrides(args))
    return preset_config(
        preset or args.preset,
        **overrides,
        method=method,
        seed=seed,
        num_chains=args.chains,
        num_warmup=args.warmup,
        num_samples=args.draws,
        num_draws=1000,
    )


def run_label(args: argparse.Namespace, method: str) -> str:
    """The row label (:func:`row_label`) of the rows this run writes for ``method``."""
    config = run_config(args, method)
    return row_label(
        {
            "method": method,
            "lapse": config.lapse,
            "sampler": config.sampler,
            "cell_effect": config.cell_effect,
            "robust": config.robust,
            "preset": args.preset,
            "theta_scale": config.theta_scale,
            "refine_always": math.isinf(config.refine_below),
        }
    )


def data_half(args: argparse.Namespace) -> int:
    """``--data-half``: the seeds on which the verdict can flag anything, whatever the model.

    The verdict is the model's adjusted flag *and* the data's, in one direction
    (``adaptive.significance.compare``); the data's half is a prompts-as-units test of each
    comparison's own judgments, which no model enters. A campaign whose data half flags
    nothing is unflagged by every model and sampler, so a null campaign's count of flagged
    campaigns over N seeds is bounded by (and, fitted on these seeds alone, equal to) the
    count over the seeds printed here.
    """
    from adaptive.cells import build_cells
    from adaptive.significance import data_verdicts

    flagged: dict[float, list[int]] = {f: [] for f in args.fractions}
    seeds = campaign_seeds(args)
    for seed in seeds:
        full = pl.DataFrame(campaign(args.kind, seed, args.comparisons, args.prompts).rows)
        for fraction in args.fractions:
            # compare()'s data half, with the rule and level fit_rows gives it (its defaults)
            if data_verdicts(build_cells(subsample(full, fraction, seed)))[1].any():
                flagged[fraction].append(seed)
    stored: dict[tuple[int, float], bool] = {}
    # (row label, share) -> seed -> the verdict's flag, from the file's fits
    verdicts: dict[tuple[str, float], dict[int, bool]] = {}
    if args.jsonl and os.path.exists(args.jsonl):
        for line in open(args.jsonl):
            rec = json.loads(line)
            if rec["kind"] == args.kind and rec["fraction"] in flagged and rec["seed"] in seeds:
                stored[(rec["seed"], rec["fraction"])] = bool(rec["any_data_adjusted"])
                if "any_adjusted" in rec and rec.get("preset", "default") == args.preset:
                    by_seed = verdicts.setdefault((row_label(rec), rec["fraction"]), {})
                    by_seed[rec["seed"]] = bool(rec["any_adjusted"])
    mismatch = 0
    for fraction, these in flagged.items():
        print(
            f"kind={args.kind} share {fraction:.2f}: data half flags {len(these)} of "
            f"{len(seeds)} campaigns, seeds {these}; no model can flag the other "
            f"{len(seeds) - len(these)}"
        )
        for (seed, f), was in sorted(stored.items()):
            if f == fraction and was != (seed in these):
                mismatch += 1
                print(f"  seed {seed}: the file's data half says {was}", file=sys.stderr)
    if stored:
        print(f"{len(stored)} rows of {args.jsonl} checked, {mismatch} disagree")
    for (label, fraction), by_seed in sorted(verdicts.items()):
        missing = [seed for seed in flagged[fraction] if seed not in by_seed]
        if missing:
            print(f"{label} {fraction:.2f}: no fit yet of the data-flagged seeds {missing}")
            continue
        hits = sorted(seed for seed in flagged[fraction] if by_seed[seed])
        print(
            f"{label} {fraction:.2f}: the verdict flags {len(hits)} of {len(seeds)} campaigns "
            f"(seeds {hits}; exact: the other seeds' data half flags nothing)"
        )
    return 1 if mismatch else 0


def campaign_seeds(args: argparse.Namespace) -> list[int]:
    """--seeds, or --campaigns seeds from --first-seed."""
    if args.seeds is not None:
        return list(args.seeds)
    return list(range(args.first_seed, args.first_seed + args.campaigns))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=list(KINDS), default="null")
    parser.add_argument("--campaigns", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="these seeds instead of --first-seed and --campaigns (e.g. the seeds --data-half "
        "prints, to fit only the campaigns a verdict can flag)",
    )
    parser.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.3, 0.15])
    parser.add_argument("--method", nargs="+", default=["fast"], choices=["fast", "nuts"])
    parser.add_argument("--preset", default="default", choices=["default", "paper"])
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--jsonl", default=None)
    parser.add_argument("--thresholds", default=None, choices=["free", "symmetric"])
    cells = parser.add_mutually_exclusive_group()
    cells.add_argument("--no-cell-effect", action="store_true")
    # the model-based cell effect (the tau grid) in place of the default's robust intervals
    cells.add_argument("--cell-effect", action="store_true")
    parser.add_argument(
        "--theta-scale", type=float, default=None, help="prior sd of theta (default: the preset's)"
    )
    parser.add_argument(
        "--refine-always",
        action="store_true",
        help="fast path: refinement sweeps at every share (default: below 30 judgments a prompt)",
    )
    lapse = parser.add_mutually_exclusive_group()
    lapse.add_argument(
        "--lapse",
        action="store_true",
        help="the default model's random judgments at a learned rate, with NUTS on the diagonal "
        "sampler, as docs/calibration/*_lapse_nuts.jsonl were measured (without either flag the "
        "default preset has the lapse too, on its own sampler)",
    )
    lapse.add_argument(
        "--no-lapse",
        action="store_true",
        help="the default model without random answers (the default before the lapse; the "
        "rows of docs/calibration/ without 'lapse' in the name)",
    )
    parser.add_argument(
        "--sampler",
        choices=["whitened", "diagonal"],
        default=None,
        help="NUTS sampler (default: the preset's, whitened; --lapse: diagonal)",
    )
    parser.add_argument(
        "--gaussian-items",
        action="store_true",
        help="draw the prompts' parameters from the Gaussian (as live snapshots do); the "
        "verdicts are unchanged (they read theta's draws and the data), the fit is faster",
    )
    parser.add_argument(
        "--summarize", nargs="+", default=None, help="print the tables of earlier --jsonl files"
    )
    parser.add_argument(
        "--pool-samplers",
        action="store_true",
        help="with --summarize: pool NUTS rows of one model measured with different samplers "
        "(a campaign measured with both counts once, with the whitened sampler's row)",
    )
    parser.add_argument(
        "--plot",
        default=None,
        help="with --summarize: also draw each row's coverage by share, one panel per simulator "
        "(a .png or .svg path)",
    )
    parser.add_argument(
        "--data-half",
        action="store_true",
        help="no fits: print, per share, the seeds whose data half (each comparison's own "
        "judgments, Holm) flags a comparison. The verdict needs both halves, so on every "
        "other seed no model can flag anything; with --jsonl, check the file's rows agree",
    )
    args = parser.parse_args()
    if args.pool_samplers and not args.summarize:
        parser.error("--pool-samplers reads stored rows: give it with --summarize FILES")
    if args.seeds is not None:
        args.campaigns = len(args.seeds)
    if args.data_half:
        return data_half(args)

    results: dict[tuple[str, float], list[dict]] = {}
    if args.summarize:
        results = read_rows(args.summarize, pool_samplers=args.pool_samplers)
    seeds = [] if args.summarize else campaign_seeds(args)
    done: set[tuple] = set()
    if args.jsonl and os.path.exists(args.jsonl) and not args.summarize:
        labels = {run_label(args, method) for method in args.method}
        for line in open(args.jsonl):
            rec = json.loads(line)
            label = row_label(rec)
            done.add((rec["kind"], rec["preset"], rec["seed"], rec["fraction"], label))
            if rec["kind"] == args.kind and rec["preset"] == args.preset and label in labels:
                results.setdefault((label, rec["fraction"]), []).append(rec)
    for seed in seeds:
        todo = [
            (fraction, method)
            for fraction in args.fractions
            for method in args.method
            if (args.kind, args.preset, seed, fraction, run_label(args, method)) not in done
        ]
        if not todo:
            continue
        camp = campaign(args.kind, seed, args.comparisons, args.prompts)
        full = pl.DataFrame(camp.rows)
        for fraction in args.fractions:
            frame = subsample(full, fraction, seed)
            for method in args.method:
                if (fraction, method) not in todo:
                    continue
                start = time.perf_counter()
                rows, result, config = fit_rows(frame, method, args.preset, seed, args)
                seconds = time.perf_counter() - start
                true_delta = fitted_truth(camp, result.cells)
                rec = {
                    "kind": args.kind,
                    "preset": args.preset,
                    "thresholds": result.posterior.info.get("thresholds", args.thresholds),
                    "seed": seed,
                    "fraction": fraction,
                    "method": method,
                    "seconds": seconds,
                    "comparisons": args.comparisons,
                    "prompts": args.prompts,
                    "gaussian_items": bool(args.gaussian_items),
                    "lapse": bool(config.lapse),
                    "cell_effect": bool(config.cell_effect),
                    "robust": bool(config.robust),
                    "theta_scale": float(config.theta_scale),
                    "refine_always": math.isinf(config.refine_below),
                    **(
                        {
                            "sampler": config.sampler,
                            "chains": args.chains,
                            "warmup": args.warmup,
                            "draws": args.draws,
                            "max_rhat": result.posterior.diagnostics.max_rhat(),
                            "min_ess_bulk": result.posterior.diagnostics.min_ess_bulk(),
                            "divergences": result.posterior.diagnostics.num_divergences,
                        }
                        if method == "nuts"
                        else {}
                    ),
                    "any_adjusted": any(r["significant_adjusted"] for r in rows),
                    "num_adjusted": sum(r["significant_adjusted"] for r in rows),
                    "any_model_adjusted": any(r["model_adjusted"] for r in rows),
                    "any_data_adjusted": any(r["data_adjusted"] for r in rows),
                }
                if "net_preference" in rows[0]:
                    rec.update(coverage_fields(rows, true_delta))
                results.setdefault((row_label(rec), fraction), []).append(rec)
                record(
                    args.jsonl,
                    rec,
                    f"seed {seed} {method} {fraction:.2f}: adjusted flags {rec['num_adjusted']}"
                    + (
                        f", covered {rec['covered']}/{rec['num']}, |z| {rec['abs_z']:.2f}"
                        if "covered" in rec
                        else ""
                    )
                    + f" ({seconds:.1f} s)",
                )
    groups = sorted(
        {(r["kind"], r.get("preset", "default")) for recs in results.values() for r in recs}
    )
    for kind, preset in groups:
        # one table per simulator and preset: their campaigns are never pooled together
        these = {
            key: [r for r in recs if (r["kind"], r.get("preset", "default")) == (kind, preset)]
            for key, recs in results.items()
        }
        print_tables({key: recs for key, recs in these.items() if recs}, kind, preset)
    if args.plot:
        print(f"wrote {plot_coverage(results, args.plot)}")
    return 0


def read_rows(
    paths: list[str], *, pool_samplers: bool = False
) -> dict[tuple[str, float], list[dict]]:
    """The rows of --jsonl files, by (row label, share).

    ``pool_samplers``: NUTS rows of one model measured with different samplers are pooled
    under one label ending in ``[samplers pooled]`` (both sample the same posterior: the slow
    test ``test_whitened_and_diagonal_nuts_give_the_same_posterior``). A campaign measured with
    both counts once, with the default (whitened) sampler's row.
    """
    by_key: dict[tuple[str, float], dict[tuple[str, int], dict]] = {}
    for path in paths:
        for line in open(path):
            rec = json.loads(line)
            label = row_label(rec)
            if pool_samplers and rec["method"] == "nuts":
                label = row_label({**rec, "sampler": None}) + "[samplers pooled]"
            rows = by_key.setdefault((label, rec["fraction"]), {})
            key = (rec["kind"], rec.get("preset", "default"), rec["seed"])
            # rows from before NUTS rows said their sampler: lapse rows diagonal, others whitened
            sampler = rec.get("sampler") or ("diagonal" if rec.get("lapse") else "whitened")
            if key not in rows or sampler == "whitened":
                rows[key] = rec
    return {key: list(rows.values()) for key, rows in by_key.items()}


def print_tables(results: dict[tuple[str, float], list[dict]], kind: str, preset: str) -> None:
    """The table of one simulator's rows, then their intervals and paired comparisons."""
    campaigns = max(len(recs) for recs in results.values())
    print(f"kind={kind} preset={preset} campaigns={campaigns}")
    width = max([6] + [len(m) for m, _ in results])
    print(
        f"{'method':{width}s}  fraction    n  campaigns_with_flag  (model alone)  (data alone)  coverage_95  "
        "mean_abs_z  mean_sd  seconds"
    )
    for (method, fraction), recs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        flag = np.mean([r["any_adjusted"] for r in recs])
        flag_model = np.mean([r.get("any_model_adjusted", np.nan) for r in recs])
        flag_data = np.mean([r.get("any_data_adjusted", np.nan) for r in recs])
        cov = (
            sum(r["covered"] for r in recs) / sum(r["num"] for r in recs)
            if "covered" in recs[0]
            else float("nan")
        )
        absz = np.mean([r.get("abs_z", np.nan) for r in recs])
        msd = np.mean([r.get("mean_sd", np.nan) for r in recs])
        # a row whose fit was paused has no meaningful time (null)
        secs = np.nanmean([np.nan if r["seconds"] is None else r["seconds"] for r in recs])
        print(
            f"{method:{width}s}  {fraction:8.2f}  {len(recs):3d}  {flag:19.3f}  {flag_model:13.3f}  {flag_data:12.3f}  "
            f"{cov:11.3f}  {absz:10.2f}  {msd:7.4f}  {secs:7.1f}"
        )
    for line in (
        interval_lines(results)
        + shrinkage_lines(results)
        + size_lines(results)
        + ppc_lines(results)
    ):
        print(line)
    for line in paired_lines(results):
        print(line)


def record(path: str | None, rec: dict, progress: str) -> None:
    """Append one fit's row to the --jsonl file (if any) and say so on stderr."""
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    print(progress, file=sys.stderr, flush=True)


def row_label(rec: dict) -> str:
    """The method of a stored row, with what sets its model apart (a lapse, an alternative's
    variant), so --summarize never pools or pairs rows of different models."""
    label = rec["method"]
    if rec.get("lapse"):
        label += "+lapse"
    # NUTS rows say their sampler since the lapse became the default; before that, the lapse
    # rows were measured with the diagonal sampler and the rest with the whitened one
    sampler = rec.get("sampler")
    if (
        rec["method"] == "nuts"
        and sampler
        and sampler != ("diagonal" if rec.get("lapse") else "whitened")
    ):
        label += f"[{sampler}]"
    if rec.get("variant"):
        label += f"[{rec['variant']}]"
    if rec.get("robust"):
        label += "[robust]"  # the default since the cluster-robust intervals
    elif rec.get("cell_effect") is False and rec.get("preset", "default") == "default":
        label += "[no-cells]"  # --no-cell-effect (rows before it was recorded had the effect)
    if rec.get("theta_scale", 1.0) != 1.0:  # rows before it was recorded had the prior N(0, 1)
        label += f"[theta~N(0,{rec['theta_scale']:g})]"
    if rec.get("refine_always"):
        label += "[refined]"
    return label


def campaign_interval(data: tuple, statistic, level: float = 0.9) -> tuple[float, float]:
    """scipy's percentile bootstrap over campaigns (paired arrays, one entry per campaign);
    nan with fewer than 3 campaigns."""
    from scipy.stats import bootstrap

    if len(data[0]) < 3:
        return float("nan"), float("nan")
    ci = bootstrap(
        data,
        statistic,
        paired=True,
        vectorized=True,
        confidence_level=level,
        method="percentile",
        n_resamples=4000,
        random_state=np.random.default_rng(0),
    ).confidence_interval
    return float(ci.low), float(ci.high)


def coverage(recs: list[dict], level: float = 0.9) -> tuple[float, float, float]:
    """Pooled coverage of Δ's 95% intervals over campaigns, with its campaign-bootstrap
    interval."""
    covered = np.array([r["covered"] for r in recs], dtype=float)
    num = np.array([r["num"] for r in recs], dtype=float)
    low, high = campaign_interval(
        (covered, num), lambda c, n, axis: c.sum(axis=axis) / n.sum(axis=axis), level
    )
    return covered.sum() / num.sum(), low, high


def plot_coverage(results: dict, path: str) -> str:
    """One panel per simulator: each row label's coverage against the share of the data kept,
    with 90% campaign-bootstrap bars and the 93-97% goal shaded; the count of campaigns is
    written at each point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_kind: dict[str, dict[str, list[tuple[float, list[dict]]]]] = {}

    def panel(rec: dict) -> str:
        preset = rec.get("preset", "default")
        return rec["kind"] if preset == "default" else f"{rec['kind']}, {preset} preset"

    for (label, fraction), recs in results.items():
        for kind in sorted({panel(r) for r in recs if "covered" in r}):
            these = [r for r in recs if panel(r) == kind and "covered" in r]
            by_kind.setdefault(kind, {}).setdefault(label, []).append((fraction, these))
    if not by_kind:
        raise SystemExit("--plot: no rows with coverage (non-null campaigns) to draw")
    fig, axes = plt.subplots(
        1, len(by_kind), figsize=(5.2 * len(by_kind), 3.8), sharey=True, squeeze=False
    )
    shares = sorted({f for _, f in results})
    for ax, (kind, labels) in zip(axes[0], sorted(by_kind.items())):
        ax.axhspan(0.93, 0.97, color="#d9f0d3", label="goal 93-97%")
        ax.axhline(0.95, color="#7fbf7b", lw=0.8)
        for i, (label, points) in enumerate(sorted(labels.items())):
            points.sort()
            offset = (i - (len(labels) - 1) / 2) * 0.12
            xs = [shares.index(f) + offset for f, _ in points]
            stats = [coverage(recs) for _, recs in points]
            mid = np.array([c for c, _, _ in stats])
            err = np.array([[c - lo, hi - c] for c, lo, hi in stats]).T
            err = np.where(np.isfinite(err), err, 0.0)
            ax.errorbar(xs, mid, yerr=err, fmt="o-", capsize=3, lw=1.2, label=label)
            for x, y, (_, recs) in zip(xs, mid, points):
                ax.annotate(str(len(recs)), (x, y), xytext=(3, 3), textcoords="offset points",
                            fontsize=7)  # fmt: skip
        ax.set_xticks(range(len(shares)), [f"{f:.0%}" for f in shares])
        ax.set_xlabel("share of the campaign's judgments")
        ax.set_title(f"{kind} simulator")
        ax.set_ylim(0.85, 1.0)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("coverage of Δ's 95% intervals")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle("Calibration on simulated campaigns (numbers: campaigns; bars: 90% bootstrap)",
                 fontsize=9)  # fmt: skip
    fig.savefig(path, bbox_inches="tight", dpi=110)
    plt.close(fig)
    return path


def interval_lines(results: dict, level: float = 0.9) -> list[str]:
    """Campaign-bootstrap intervals of each row's coverage, and of the sparse exaggeration.

    Comparisons of one campaign share its prompts, so their errors are not independent
    (a campaign can miss together): the unit of resampling is the campaign. The sparse
    exaggeration is mean abs z at the smallest fraction over mean abs z at 100%, on the
    campaigns measured at both (paired by seed).
    """

    def interval(data: tuple, statistic) -> tuple[float, float]:
        return campaign_interval(data, statistic, level)

    lines = []
    for (method, fraction), recs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        recs = [r for r in recs if "covered" in r]
        if not recs:
            continue
        cov, low, high = coverage(recs, level)
        lines.append(
            f"{method} {fraction:.2f}: coverage {cov:.3f}, "
            f"{level:.0%} campaign-bootstrap interval {low:.3f}-{high:.3f} ({len(recs)} campaigns)"
        )
    for method in sorted({m for m, _ in results}):
        full = {r["seed"]: r["abs_z"] for r in results.get((method, 1.0), []) if "abs_z" in r}
        sparse_fractions = sorted(f for m, f in results if m == method and f < 1.0)
        if not full or not sparse_fractions:
            continue
        smallest = sparse_fractions[0]
        sparse = {r["seed"]: r["abs_z"] for r in results[(method, smallest)] if "abs_z" in r}
        seeds = sorted(set(full) & set(sparse))
        if not seeds:
            continue
        a = np.array([sparse[s] for s in seeds])
        b = np.array([full[s] for s in seeds])
        low, high = interval((a, b), lambda x, y, axis: x.mean(axis=axis) / y.mean(axis=axis))
        lines.append(
            f"{method} sparse exaggeration (mean abs z at {smallest:.2f} / at 1.00, {len(seeds)} "
            f"campaigns at both): {a.mean():.2f} / {b.mean():.2f} = {a.mean() / b.mean():.2f}, "
            f"{level:.0%} campaign-bootstrap interval {low:.2f}-{high:.2f}"
        )
    return lines


def paired_lines(results: dict) -> list[str]:
    """Two models or methods on the same campaigns, comparison by comparison.

    For every two row labels at one fraction (``fast`` and ``nuts``, ``fast`` and
    ``fast+lapse``, ...), on the campaigns both measured (the same kind and seed): the ratio
    of their sds of Δ (first / second, in label order), each one's coverage there, and how
    far apart the estimates are in the second's sds. Null campaigns (rows without sds): how
    often the two verdicts agree, campaign by campaign, and each one's share flagged there, so
    a model measured on fewer null campaigns is read against one measured on more.
    """
    lines = []
    for fraction in sorted({f for _, f in results}, reverse=True):
        labels = sorted(m for m, f in results if f == fraction)
        for i, first in enumerate(labels):
            for second in labels[i + 1 :]:
                lines += _paired_null_line(results, first, second, fraction)
                a, b = (
                    {(r["kind"], r["seed"]): r for r in results[(m, fraction)] if "sd" in r}
                    for m in (first, second)
                )
                both = sorted(set(a) & set(b))
                if not both:
                    continue
                ratio = np.concatenate([np.array(a[k]["sd"]) / np.array(b[k]["sd"]) for k in both])
                line = (
                    f"{first}/{second} sd of Δ at {fraction:.2f} ({len(both)} campaigns, "
                    f"{len(ratio)} comparisons): mean {ratio.mean():.3f}, "
                    f"median {np.median(ratio):.3f}, "
                    f"5-95% {np.quantile(ratio, 0.05):.2f}-{np.quantile(ratio, 0.95):.2f}"
                )
                if all("covered" in a[k] and "covered" in b[k] for k in both):
                    num = sum(b[k]["num"] for k in both)
                    line += (
                        f"; coverage {sum(a[k]['covered'] for k in both) / num:.3f} / "
                        f"{sum(b[k]['covered'] for k in both) / num:.3f}"
                    )
                if all("est" in a[k] and "est" in b[k] for k in both):
                    shift = np.concatenate(
                        [
                            (np.array(a[k]["est"]) - np.array(b[k]["est"])) / np.array(b[k]["sd"])
                            for k in both
                        ]
                    )
                    line += (
                        f"; mean abs ({first} - {second} estimate) / {second} sd "
                        f"{np.abs(shift).mean():.2f}"
                    )
                lines.append(line)
    return lines


def _paired_null_line(results: dict, first: str, second: str, fraction: float) -> list[str]:
    """The verdicts of two row labels on the null campaigns both measured (rows without sds)."""
    a, b = (
        {(r["kind"], r["seed"]): r for r in results[(m, fraction)] if "sd" not in r}
        for m in (first, second)
    )
    both = sorted(set(a) & set(b))
    if not both:
        return []
    flags = np.array([[a[k]["any_adjusted"], b[k]["any_adjusted"]] for k in both], dtype=bool)
    return [
        f"{first}/{second} null verdicts at {fraction:.2f} ({len(both)} campaigns): the same in "
        f"{int((flags[:, 0] == flags[:, 1]).sum())}; campaigns flagged {int(flags[:, 0].sum())} / "
        f"{int(flags[:, 1].sum())}"
    ]


def shrinkage_lines(results: dict) -> list[str]:
    """Per row: the least-squares slope of the true Δ on its estimate, and the sd of z.

    A calibrated posterior mean is the expected truth given the data, so the slope is 1
    (the regression of the estimate on the truth is below 1 whenever the data are sparse:
    that is shrinkage, as it should be). Below 1 the estimates are too far from 0 (the
    posterior shrinks too little); above 1, too close. sd of z above 1 with a slope of 1:
    the sds are too small. Pooled over the row's comparisons.
    """
    lines = []
    for (method, fraction), recs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        recs = [r for r in recs if "est" in r]
        if not recs:
            continue
        est = np.concatenate([r["est"] for r in recs])
        truth = np.concatenate([r["truth"] for r in recs])
        sd = np.concatenate([r["sd"] for r in recs])
        ok = np.isfinite(est) & np.isfinite(truth) & (sd > 0)
        est, truth, sd = est[ok], truth[ok], sd[ok]
        if est.size < 3 or np.ptp(est) == 0:
            continue
        centred = est - est.mean()
        slope = float(centred @ (truth - truth.mean()) / (centred @ centred))
        lines.append(
            f"{method} {fraction:.2f}: slope of true Δ on estimate {slope:.3f}, "
            f"sd of z {float(np.std((est - truth) / sd)):.3f} ({est.size} comparisons)"
        )
    return lines


#: edges of the bins of |true Δ| in :func:`size_lines`
SIZE_EDGES = (0.0, 0.2, 0.4, 0.6, 1.0)


def size_lines(results: dict) -> list[str]:
    """Per row: coverage and the mean signed z by the size of the true Δ.

    The signed z is (estimate - truth) / sd times the truth's sign: positive where the
    estimate is further from 0 than the truth (exaggerated), negative where it is closer
    (shrunk). A prior shrinks the largest effects most, so pooled coverage can hide a miss
    concentrated on strong comparisons, the ones a user acts on first.
    """
    lines = []
    for (method, fraction), recs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        recs = [r for r in recs if "est" in r]
        if not recs:
            continue
        est, truth, sd = (np.concatenate([r[k] for r in recs]) for k in ("est", "truth", "sd"))
        ok = np.isfinite(est) & np.isfinite(truth) & (sd > 0)
        z = (est[ok] - truth[ok]) / sd[ok] * np.sign(truth[ok])
        size = np.abs(truth[ok])
        parts = []
        for low, high in zip(SIZE_EDGES[:-1], SIZE_EDGES[1:]):
            inside = (size >= low) & ((size < high) | (high == SIZE_EDGES[-1]))
            if inside.any():
                parts.append(
                    f"{low:.1f}-{high:.1f}: {int(inside.sum())}, coverage "
                    f"{float(np.mean(np.abs(z[inside]) <= 1.96)):.2f}, signed z "
                    f"{float(z[inside].mean()):+.2f}"
                )
        lines.append(f"{method} {fraction:.2f} by |true Δ|: " + "; ".join(parts))
    return lines


def ppc_lines(results: dict) -> list[str]:
    """Per row whose fits stored it: how often the posterior predictive check (the model's
    implied Δ against each comparison's own judgments, ``ppc_flag``) flags a comparison, and
    how many of the intervals that miss the true Δ it flags.

    On a simulator the model fits, the flags are false alarms; on one it does not, the share
    of misses flagged is the check's power to warn of them.
    """
    lines = []
    for (method, fraction), recs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        recs = [r for r in recs if "ppc_flag" in r]
        if not recs:
            continue
        flag = np.concatenate([r["ppc_flag"] for r in recs]).astype(bool)
        missed = ~np.concatenate([r["inside"] for r in recs]).astype(bool)
        lines.append(
            f"{method} {fraction:.2f} posterior predictive check ({len(recs)} campaigns): flags "
            f"{int(flag.sum())} of {flag.size} comparisons ({float(flag.mean()):.3f}); of the "
            f"{int(missed.sum())} intervals that miss the true Δ it flags {int((flag & missed).sum())}"
        )
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
