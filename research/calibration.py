"""Calibration of `evalset significance` on simulated campaigns with known truth.

Prints, per simulator, method and share of the data kept:

* null campaigns: the share of campaigns with any Holm-adjusted significant comparison;
* non-null campaigns: coverage of the 95% interval of the net preference Δ (the
  true Δ over each comparison's judged prompts), the mean |Δ estimate - true Δ| / sd,
  and the mean sd of Δ (to compare fast with NUTS on the same data).

The suite (the default model on every simulator, resumed from the rows in
research/calibration/, then the table of the goals):

    python research/calibration.py --suite

One simulator at a time:

    python research/calibration.py --kind null --campaigns 40 --fractions 1 0.3 0.15 --method fast
    python research/calibration.py --kind paper --campaigns 20 --fractions 1 0.3 0.15 0.05 --method fast nuts
    python research/calibration.py --summarize research/calibration/paper_robust_fast.jsonl

``--kind`` (``stan_free_models.simulate.SIMULATOR_KINDS``): ``null`` (all systems equal,
A/B-exchangeable prompts: every true Δ is 0), ``null-asym`` (all systems equal, thresholds
drawn as in the paper), ``paper`` (the paper's setting), ``varied`` (prompt-by-comparison
effects, sd 0.5, and 20% random annotators), ``varied-cells`` / ``varied-random`` (each of
the two alone), ``rough`` (per-system heavy-tailed skills, heavy-tailed cell effects,
annotators who differ in sensitivity and tie readiness, 10% random annotators, missing
cells and 1 + Poisson(2) judgments per cell: ``simulate_rough_campaign``, a simulator the
model was not tuned on), ``net-split`` (the paper's own story: a cell's net rating is one
graded response, split among its annotators: ``simulate_net_split_campaign``).
``--preset paper`` measures the paper's model instead of the default; ``--cell-effect``
(with ``--lapse``) the model-based treatment of dependent judgments that the default's
robust intervals replaced. ``--gaussian-items`` skips the exact item draws of the
model-based path.
``--jsonl FILE`` appends one line per fit, for tables made later; a fit already in FILE
(same kind, preset, seed, share and row label: method, lapse, sampler) is not run again, so
a long measurement can be stopped and resumed, and grown by later runs. The measured rows
are kept in ``research/calibration/`` (one file per simulator and model; see its README).
The tables of stored rows are made by :mod:`calibration_summary`.
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
from calibration_summary import goal_lines, plot_coverage, print_tables, read_rows, row_label  # noqa: E402

from stan_free_models.simulate import SIMULATOR_KINDS as KINDS  # noqa: E402
from stan_free_models.simulate import simulate_kind, subsample_index  # noqa: E402

#: the suite: the default model's fast path on every simulator, one row file each
#: (kind, campaigns, shares)
SUITE = (
    ("null", 40, (1.0, 0.3, 0.15)),
    ("paper", 20, (1.0, 0.3, 0.15, 0.05)),
    ("net-split", 20, (1.0, 0.3, 0.15, 0.05)),
    ("varied", 20, (1.0, 0.3, 0.15, 0.05)),
    ("rough", 20, (1.0, 0.3, 0.15, 0.05)),
)
SUITE_ROWS = ROOT / "research" / "calibration"


def suite_file(kind: str) -> Path:
    """The suite's row file of ``kind``."""
    return SUITE_ROWS / f"{kind}_robust_fast.jsonl"


def campaign(kind: str, seed: int, num_comparisons: int, num_prompts: int):
    """Campaign ``seed`` of simulator ``kind`` (``stan_free_models.simulate.simulate_kind``)."""
    return simulate_kind(kind, seed, num_comparisons=num_comparisons, num_prompts=num_prompts)


def subsample(frame: pl.DataFrame, fraction: float, seed: int) -> pl.DataFrame:
    """The share ``fraction`` of campaign ``seed``'s judgments (``subsample_index``)."""
    if fraction >= 1.0:
        return frame
    return frame[subsample_index(frame.height, fraction, seed)]


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
    from adaptive.estimation.pipeline import analyze
    from adaptive.estimation.significance import compare

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
    from adaptive.estimation.fitting import preset_config

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
            "lapse": config.priors.lapse,
            "sampler": config.sampler,
            "cell_effect": config.cell_effect,
            "robust": config.robust,
            "preset": args.preset,
            "theta_scale": config.priors.theta_scale,
            "refine_always": math.isinf(config.laplace.refine_below),
        }
    )


def data_half(args: argparse.Namespace) -> int:
    """``--data-half``: the seeds on which the verdict can flag anything, whatever the model.

    The verdict is the model's adjusted flag *and* the data's, in one direction
    (``adaptive.estimation.significance.compare``); the data's half is a prompts-as-units test of each
    comparison's own judgments, which no model enters. A campaign whose data half flags
    nothing is unflagged by every model and sampler, so a null campaign's count of flagged
    campaigns over N seeds is bounded by (and, fitted on these seeds alone, equal to) the
    count over the seeds printed here.
    """
    from adaptive.core.cells import build_cells
    from adaptive.estimation.significance import data_verdicts

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


def parser() -> argparse.ArgumentParser:
    """The command line (one function, so that its help and the suite's settings agree)."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
        "sampler, as research/calibration/*_lapse_nuts.jsonl were measured (without either flag the "
        "default preset has the lapse too, on its own sampler)",
    )
    lapse.add_argument(
        "--no-lapse",
        action="store_true",
        help="the default model without random answers (the default before the lapse; the "
        "rows of research/calibration/ without 'lapse' in the name)",
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
        "--suite",
        action="store_true",
        help="the calibration suite: the default model's fast path on every simulator "
        "(null, paper, net-split, varied, rough), each resumed from its row file in "
        "research/calibration/, then the table of the goals",
    )
    parser.add_argument(
        "--data-half",
        action="store_true",
        help="no fits: print, per share, the seeds whose data half (each comparison's own "
        "judgments, Holm) flags a comparison. The verdict needs both halves, so on every "
        "other seed no model can flag anything; with --jsonl, check the file's rows agree",
    )
    return parser


def measure(args: argparse.Namespace) -> dict[tuple[str, float], list[dict]]:
    """Fit every campaign of ``args`` not yet in ``--jsonl`` and append its rows; the rows of
    this kind, preset and model (stored and new) by (row label, share)."""
    results: dict[tuple[str, float], list[dict]] = {}
    seeds = campaign_seeds(args)
    done: set[tuple] = set()
    if args.jsonl and os.path.exists(args.jsonl):
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
                    "lapse": bool(config.priors.lapse),
                    "cell_effect": bool(config.cell_effect),
                    "robust": bool(config.robust),
                    "theta_scale": float(config.priors.theta_scale),
                    "refine_always": math.isinf(config.laplace.refine_below),
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
    return results


def suite(args: argparse.Namespace) -> int:
    """Run (or resume) every simulator of :data:`SUITE` into its row file, then print the
    goals: the default model's fast path, 20 comparisons x 200 prompts x 3 judgments."""
    for kind, campaigns, fractions in SUITE:
        run = argparse.Namespace(**vars(args))
        run.kind, run.campaigns, run.first_seed, run.seeds = kind, campaigns, 0, None
        run.fractions, run.method, run.preset = list(fractions), ["fast"], "default"
        run.jsonl = str(suite_file(kind))
        # the default model as it ships, whatever else the command line asked for
        run.lapse = run.no_lapse = run.cell_effect = run.no_cell_effect = False
        run.gaussian_items = run.refine_always = False
        run.theta_scale = run.sampler = run.thresholds = None
        print(f"== {kind}: {campaigns} campaigns, shares {list(fractions)}", file=sys.stderr)
        measure(run)
    rows = read_rows([str(suite_file(kind)) for kind, _, _ in SUITE])
    for line in goal_lines(rows):
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if args.pool_samplers and not args.summarize:
        cli.error("--pool-samplers reads stored rows: give it with --summarize FILES")
    if args.seeds is not None:
        args.campaigns = len(args.seeds)
    if args.data_half:
        return data_half(args)
    if args.suite:
        return suite(args)

    results: dict[tuple[str, float], list[dict]] = {}
    if args.summarize:
        results = read_rows(args.summarize, pool_samplers=args.pool_samplers)
    else:
        results = measure(args)
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


def record(path: str | None, rec: dict, progress: str) -> None:
    """Append one fit's row to the --jsonl file (if any) and say so on stderr."""
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    print(progress, file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
