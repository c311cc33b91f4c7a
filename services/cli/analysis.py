"""``evalset significance`` and ``evalset items`` (with ``--fit``, each prompt's fit): the
graded-response analysis of a judgments file."""

from __future__ import annotations

import argparse
import math
from typing import Any

from evalset._common import NUTS_DRAWS, NUTS_MIN_ESS, NUTS_WARMUP
from evalset.verdicts import DEFAULT_ADJUST
from services.cli.common import add_data_args, dimensions_of, emit, log
from services.cli.errors import CliError
from services.cli.notes import STRONG_NET as STRONG_NET  # re-exported: research reads it
from services.cli.notes import strong_note
from stan_free_models.fit_settings import REFINED, LaplaceSettings, NutsSettings

SIGNIFICANCE_COLUMNS = (
    "dimension",
    "system_a",
    "system_b",
    "mean",
    "sd",
    "ci_low",
    "ci_high",
    "p_b_better",
    "significant",
    "significant_adjusted",
    "model_agrees",
    "net_preference",
    "net_ci_low",
    "net_ci_high",
    "observed_net",
    "n_judgments",
    "n_prompts",
    "note",
)


def _add_fit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        choices=["default", "paper"],
        default="default",
        help="default: every judgment a 3-category response, abilities with cluster-robust "
        "intervals (each prompt of a comparison one unit), and the net preference from each "
        "comparison's own judgments with the model's residuals (docs/statistics.md); paper: "
        "Sedoc & Ungar's model (net rating in [-3, 3], free thresholds), which reproduces "
        "their Table 3",
    )
    parser.add_argument(
        "--method",
        choices=["nuts", "fast"],
        default="fast",
        help="fast: MAP + Laplace approximation, seconds (default); nuts: full posterior, "
        "minutes (--preset paper reproduces the paper's Table 3 with it)",
    )
    parser.add_argument(
        "--likelihood",
        choices=["net", "judgment"],
        default=None,
        help="net: the paper's net rating per cell in [-3, 3]; judgment: 3-category per "
        "judgment (default: the preset's)",
    )
    parser.add_argument(
        "--parameterization",
        choices=["comparison", "system"],
        default="comparison",
        help="one theta per comparison (paper) or theta = s_B - s_A per system",
    )
    parser.add_argument("--chains", type=int, default=NutsSettings.num_chains)
    parser.add_argument(
        "--warmup",
        type=int,
        default=NUTS_WARMUP,
        help=f"nuts: warm-up iterations per chain (default {NUTS_WARMUP}: the sampler starts at "
        "the fast fit's mode with its Hessian as the metric)",
    )
    parser.add_argument(
        "--draws",
        type=int,
        default=None,
        help=f"posterior draws kept (nuts: per chain and block, default {NUTS_DRAWS}; fast: in "
        f"all, default {LaplaceSettings.num_draws})",
    )
    parser.add_argument(
        "--min-ess",
        type=float,
        default=None,
        help=f"nuts: after warm-up, keep sampling in blocks of --draws per chain until every "
        f"parameter has bulk and tail ESS >= this and R-hat <= 1.01 (at most 8 blocks; default "
        f"{NUTS_MIN_ESS:g}; 0: one block)",
    )
    parser.add_argument(
        "--no-grouping",
        action="store_true",
        help="do not group prompts whose judgments correlate > --group-threshold",
    )
    parser.add_argument("--group-threshold", type=float, default=0.6)
    _add_model_args(parser)


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    """The model's options of :func:`_add_fit_args`: priors, thresholds, cells, lapse."""
    parser.add_argument(
        "--b-scale",
        type=float,
        default=None,
        help="prior sd of the thresholds b (it also pins where theta = 0 lies; see "
        "docs/statistics.md); default: the model's, 2",
    )
    parser.add_argument(
        "--thresholds",
        choices=["free", "symmetric"],
        default=None,
        help="free: the paper's ordered thresholds (the paper preset); "
        "symmetric: b_c = -b_(K-c), so theta = 0 means no preference (default: the preset's)",
    )
    cells = parser.add_mutually_exclusive_group()
    cells.add_argument(
        "--cell-effect",
        action="store_true",
        help="model the dependence of a cell's judgments (a prompt-by-comparison effect "
        "integrated over a grid of its sd) instead of the default's cluster-robust intervals; "
        "many times slower",
    )
    cells.add_argument(
        "--no-cell-effect",
        action="store_true",
        help="no prompt-by-comparison effect in the model (the default; kept for scripts)",
    )
    lapse = parser.add_mutually_exclusive_group()
    lapse.add_argument(
        "--no-lapse",
        action="store_true",
        help="no random answers in the model: every judgment a graded response (the default)",
    )
    lapse.add_argument(
        "--lapse",
        action="store_true",
        help="learn the share of judgments answered at random (e.g. by inattentive "
        "annotators); implies --cell-effect; refused with --preset paper, --likelihood net "
        "or --no-cell-effect",
    )
    parser.add_argument(
        "--alpha-scale",
        type=float,
        default=None,
        help="prior sd of log alpha; default: the model's, 1",
    )
    parser.add_argument(
        "--theta-scale",
        type=float,
        default=None,
        help="prior sd of theta (per system: of each skill); default: the preset's "
        "(docs/statistics.md, 'The prior of theta')",
    )
    parser.add_argument(
        "--refine-always",
        action="store_true",
        help="fast path: Gibbs sweeps towards the exact posterior at every campaign size (by "
        "default only below 30 judgments a prompt); about 2-3x the time, and closer to NUTS "
        "where judgments are nearly unanimous (docs/statistics.md, 'The prior of theta')",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def fit_config(args: argparse.Namespace) -> Any:
    """The FitConfig of ``significance`` / ``items`` arguments (exits with the reason when
    they do not make one). Only what the user chose goes to the resolver
    (:func:`adaptive.estimation.fitting.preset_config`), which fills in the rest from the preset."""
    from evalset.analyses import preset_config

    overrides: dict[str, Any] = {}
    for name in ("likelihood", "thresholds", "b_scale", "alpha_scale"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.no_cell_effect:
        overrides["cell_effect"] = False
    elif args.cell_effect:
        overrides["cell_effect"] = True
    draws: dict[str, int] = {}  # the preset's (NUTS: adaptive/estimation/run_sizes.py)
    if args.draws is not None:
        if args.draws < 1:
            raise SystemExit("evalset: --draws must be at least 1")
        draws = {"num_samples" if args.method == "nuts" else "num_draws": args.draws}
    if args.lapse:
        if args.no_cell_effect or args.preset == "paper" or overrides.get("likelihood") == "net":
            raise SystemExit(
                "evalset: --lapse needs the default model's cell effect "
                "(not --preset paper, --likelihood net or --no-cell-effect)"
            )
        overrides["lapse"] = True
    elif args.no_lapse:
        overrides["lapse"] = False
    if args.theta_scale is not None:
        overrides["theta_scale"] = args.theta_scale
    if args.refine_always:
        if args.method != "fast":
            raise SystemExit("evalset: --refine-always applies to --method fast")
        # the refinement draws from the model's exact conditionals: the model-based path
        overrides.update(
            refine_below=math.inf,
            exact_items=REFINED.exact_items,
            refine_sweeps=REFINED.refine_sweeps,
        )
    if args.min_ess is not None:
        if args.method != "nuts":
            raise SystemExit("evalset: --min-ess applies to --method nuts")
        if args.min_ess < 0:
            raise SystemExit("evalset: --min-ess must be 0 (one block) or positive")
        overrides["min_ess"] = args.min_ess if args.min_ess > 0 else None
    if args.method == "nuts":  # the fast path has no warm-up
        overrides["num_warmup"] = args.warmup
    try:
        config = preset_config(
            args.preset,
            method=args.method,
            parameterization=args.parameterization,
            num_chains=args.chains,
            **draws,
            seed=args.seed,
            progress=not args.quiet,
            **overrides,
        )
    except ValueError as exc:
        raise SystemExit(f"evalset: {exc}") from None
    return config


def fit_cache() -> Any:
    """The fit cache of ``EVALSET_FIT_CACHE_DIR`` (:mod:`evalset.fit_cache`; None: off)."""
    from evalset.fit_cache import default_cache

    try:
        return default_cache()
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _analyses(args: argparse.Namespace, config: Any) -> Any:
    import numpy as np

    from evalset.analyses import analyze
    from evalset.files import read_judgments

    judgments = read_judgments(args.data)
    cache = fit_cache()
    dims = dimensions_of(judgments, args.dimension)
    for dim in dims:
        if not args.quiet:
            log(
                f"fitting dimension {dim!r} ({args.method}, {args.preset} preset: "
                f"{config.likelihood} likelihood, "
                f"{'symmetric' if config.priors.symmetric else 'free'} thresholds"
                f"{', prompt-by-comparison effect' if config.cell_effect else ''}"
                f"{', random answers at a learned rate' if config.priors.lapse else ''}"
                f"{', cluster-robust intervals' if config.robust else ''}) ..."
            )
        result = analyze(
            judgments,
            dimension=dim,
            config=config,
            group_redundant=not args.no_grouping,
            group_threshold=args.group_threshold,
            cache=cache,
            log=None if args.quiet else lambda message: log(f"  {message}"),
        )
        if not args.quiet:
            if result.grouping_skipped:
                log(
                    f"  note: {len(result.cells.prompts)} prompts: redundancy grouping skipped (it "
                    "compares every pair of prompts, in memory that grows with their square; "
                    "--no-grouping says so without this note)"
                )
            d = result.posterior.diagnostics.summary()
            if config.method == "fast":
                widen = result.posterior.info.get("robust_widen")
                fit = (
                    f"MAP {'converged' if result.posterior.diagnostics.converged else 'NOT converged'}"
                    f" in {result.posterior.diagnostics.num_steps} L-BFGS steps"
                    + (
                        f", cluster-robust sd up to {float(widen.max()):.2f}x the model's"
                        if widen is not None and len(widen)
                        else ""
                    )
                )
            else:
                fit = (
                    f"max R-hat {d['max_rhat']:.3f}, min bulk ESS {d['min_ess_bulk']:.0f}, "
                    f"divergences {d['num_divergences']}"
                )
            log(
                f"  {result.cells.num_comparisons} comparisons, {len(result.cells.prompts)} prompts "
                f"({len(result.groups)} redundancy groups), {result.cells.num_judgments} judgments; "
                f"{fit}, {d['seconds']:.1f} s"
            )
            if "lapse" in result.posterior.draws:
                rate = result.posterior.flat("lapse")
                low, high = np.quantile(rate, [0.05, 0.95])
                log(
                    f"  lapse rate (share of judgments answered at random) {rate.mean():.3f}, "
                    f"90% interval {low:.3f}-{high:.3f}"
                )
        yield result


def run_significance(args: argparse.Namespace) -> int:
    from evalset.verdicts import significance_rows

    config = fit_config(args)
    rows = significance_rows(_analyses(args, config), adjust=args.adjust)
    columns = SIGNIFICANCE_COLUMNS if args.format == "table" else None
    emit(rows, args.format, columns=columns)
    priors = config.priors
    note = strong_note(rows, priors.theta_scale, lapse=priors.lapse, robust=config.robust)
    if note and not args.quiet:
        log(note)
    if args.format == "table":
        log(
            f"significant: 95% interval excludes 0; significant_adjusted: {args.adjust} on posterior tail "
            "probabilities; net_preference: the expected signed judgment (+1 B, -1 A) over the "
            "judged prompts with its 95% interval (default model: the comparison's own judgments, "
            "the interval from the model's residuals; model_net in --format json is the model's); "
            "model_agrees: the model's theta and net preference lean the judgments' way and "
            "predict them (disagreement in --format json says why not)"
        )
    return 0


def run_items(args: argparse.Namespace) -> int:
    from evalset.analyses import analysis_item_rows

    rows: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    fits: list[tuple[Any, Any]] = []
    checking = args.fit or args.information or args.plot
    if not 0.0 < args.level < 1.0:
        raise CliError(f"--level must be between 0 and 1, not {args.level}")
    for result in _analyses(args, fit_config(args)):
        item_rows = analysis_item_rows(result)
        if checking:
            item_rows, curve, info = _item_fit(args, result, item_rows)
            curves.extend(curve)
            fits.append((result, info))
        rows.extend(item_rows)
    emit(curves if args.information else rows, args.format)
    if args.plot:
        from evalset.plots import plot_item_fit

        result, info = fits[0]
        plot_item_fit(result, info, curves, args.plot)
        if not args.quiet:
            log(f"wrote {args.plot}")
    return 0


def _item_fit(
    args: argparse.Namespace, result: Any, item_rows: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """``items --fit``: each row with its fit columns, the information curves, the check."""
    from evalset.item_fit import item_fit_check

    fitted, curves, info = item_fit_check(result, seed=args.seed, level=args.level)
    if args.fit:
        item_rows = fitted
    if not args.quiet:
        log(
            f"  item fit: {int(info.flagged.sum())} of {len(info.flagged)} prompts flagged "
            f"(posterior predictive p < {args.level:g} per prompt, {info.num_draws} draws)"
        )
    return item_rows, curves, info


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "significance",
        help="ability difference and significance of every comparison (the paper's Table 2/3)",
    )
    add_data_args(p)
    _add_fit_args(p)
    p.add_argument(
        "--adjust",
        choices=["holm", "bonferroni", "none"],
        default=DEFAULT_ADJUST,
        help="multiplicity adjustment of the second verdict",
    )
    p.set_defaults(func=run_significance)

    p = sub.add_parser(
        "items",
        help="per prompt: discrimination, thresholds and redundancy group; --fit: item fit",
    )
    add_data_args(p)
    _add_fit_args(p)
    p.add_argument(
        "--fit",
        action="store_true",
        help="add each prompt's fit: fit_p (posterior predictive p-value of its judgments' "
        "trend over the abilities), misfit (fit_p < --level) and misfit_reason "
        "(docs/selection.md, 'Item fit')",
    )
    p.add_argument(
        "--level",
        type=float,
        default=0.05,
        help="--fit: flag a prompt when fit_p is below this, per prompt (default: %(default)s)",
    )
    p.add_argument(
        "--information",
        action="store_true",
        help="print the test information curve (every prompt, and those --fit does not flag) "
        "instead of the per-prompt rows",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="the figure (.png or .svg) of the first dimension: the test information "
        "curves and each prompt's fit",
    )
    p.set_defaults(func=run_items)
