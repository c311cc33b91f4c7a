"""``evalset bt``, ``evalset annotators`` and ``evalset damr``.

* ``bt``: Bayesian Bradley-Terry with a position intercept (Tack & Piech, eq. 2),
  per item (abilities and rank posteriors per dialogue item) or pooled (a
  leaderboard), every dimension separately.
* ``annotators``: the annotator screen (position bias, agreement), one row per
  annotator with its evidence.
* ``damr``: MRBench's desired-annotation match rate per tutor and dimension (its
  command: :mod:`services.cli.damr`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.cli.common import add_data_args, bt_method, dimensions_of, emit, log
from services.cli.damr import register_damr
from stan_free_models.fit_settings import SHORT_NUTS, NutsSettings

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

ABILITY_COLUMNS = (
    "dimension",
    "item_id",
    "system",
    "mean",
    "sd",
    "ci_low",
    "ci_high",
    "rank_mean",
    "rank_sd",
    "rank_ci_low",
    "rank_ci_high",
    "n_judgments",
)
ANNOTATOR_COLUMNS = (
    "annotator_id",
    "n_judgments",
    "share_first_chosen",
    "position_intercept",
    "position_ci_low",
    "position_ci_high",
    "position_dims_flagged",
    "agreement_r",
    "agreement_p",
    "agreement_n",
    "flagged",
    "reasons",
)
REPORTS = ("abilities", "summary", "differences", "intercepts", "diagnostics")


def _add_fit_args(p: argparse.ArgumentParser, *, default_method: str = "nuts") -> None:
    p.add_argument(
        "--ties",
        choices=["davidson", "random", "drop"],
        default="davidson",
        help="davidson: explicit tie model (default); random: the paper's coin flip per tie "
        "(reproducible under --seed); drop: leave ties out",
    )
    p.add_argument(
        "--method",
        choices=["nuts", "fast", "laplace", "mle"],
        default=default_method,
        help="nuts: full posterior; fast: MAP + Gaussian (Laplace; 'laplace' is the old name, "
        "still accepted); mle: flat priors, --reference (default: the first system) pinned "
        "to 0 (default: %(default)s)",
    )
    nuts = NutsSettings()
    p.add_argument(
        "--chains", type=int, default=nuts.num_chains, help="NUTS chains (default: %(default)s)"
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=nuts.num_warmup,
        help="NUTS warm-up per chain (default: %(default)s)",
    )
    p.add_argument(
        "--draws",
        type=int,
        default=nuts.num_samples,
        help="NUTS draws per chain (default: %(default)s)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _read(args: argparse.Namespace) -> pl.DataFrame:
    from evalset.files import read_dimensions

    return read_dimensions(args.data, getattr(args, "dimension", None))


def _weights(path: str, judgments: pl.DataFrame) -> np.ndarray | None:
    """The optional ``weight`` column of a CSV (read_judgments keeps only the common schema)."""
    import numpy as np
    import polars as pl

    if Path(path).suffix.lower() != ".csv":
        return None
    header = pl.read_csv(path, n_rows=0).columns
    if "weight" not in header:
        return None
    w = pl.read_csv(path, columns=["weight"])["weight"].cast(pl.Float64).to_numpy()
    return np.asarray(w[judgments["row"].to_numpy() - 1])


def _exclusions(args: argparse.Namespace, judgments: pl.DataFrame) -> list[str]:
    """Annotators to leave out: --exclude-annotators (ids or a CSV) and --exclude-flagged."""
    import polars as pl

    out: list[str] = []
    spec = getattr(args, "exclude_annotators", None)
    if spec:
        path = Path(spec)
        if path.exists():
            frame = pl.read_csv(path, infer_schema=False)
            flag = next((c for c in ("flagged", "outlier_flag") if c in frame.columns), None)
            if flag is None or "annotator_id" not in frame.columns:
                raise ValueError(
                    f"{path}: expected columns annotator_id and flagged (or outlier_flag)"
                )
            bad = frame.filter(~pl.col(flag).str.to_lowercase().is_in(["0", "false", "", "no"]))
            out += bad["annotator_id"].to_list()
        else:
            out += [s.strip() for s in spec.split(",") if s.strip()]
    if getattr(args, "exclude_flagged", False):
        from evalset.bt_reports import flagged_by_screen

        flagged, info = flagged_by_screen(
            judgments, seed=args.seed, assume_a_first=args.assume_a_first
        )
        if not args.quiet:
            log(f"annotator screen flagged {len(flagged)}: {', '.join(flagged) or '-'}")
            if "position_note" in info:
                log(f"  {info['position_note']}")
        out += flagged
    return sorted(set(out))


def _bt_config(args: argparse.Namespace) -> Any:
    from adaptive.leaderboards.bt import BTConfig

    return BTConfig(
        by=args.by,
        ties=args.ties,
        method=bt_method(args.method),
        position=not args.no_position,
        num_chains=args.chains,
        num_warmup=args.warmup,
        num_samples=args.draws,
        seed=args.seed,
        reference=args.reference if args.method == "mle" else None,
    )


def _fits(args: argparse.Namespace, judgments: pl.DataFrame, weight: Any) -> list[Any]:
    """Each dimension's fit, with its diagnostics on stderr."""
    import numpy as np

    from evalset.bt_reports import fit_dimension

    config = _bt_config(args)
    fits = []
    for dim in dimensions_of(judgments):
        if not args.quiet:
            log(f"fitting {dim!r}: {args.by}, ties={args.ties}, {args.method} ...")
        w = None
        if weight is not None:
            w = np.asarray(weight)
        fit = fit_dimension(judgments, dim, config, weight=w)
        if not args.quiet and fit.posterior is not None:
            d = fit.posterior.diagnostics.summary()
            log(
                f"  {fit.input.num_judgments} judgments, {len(fit.input.players)} abilities; "
                f"max R-hat {d['max_rhat']:.3f}, min bulk ESS {d['min_ess_bulk']:.0f}, "
                f"divergences {d['num_divergences']}, {d['seconds']:.1f} s; "
                f"position from {fit.input.position_source}"
            )
        fits.append(fit)
    return fits


def _ability_columns(args: argparse.Namespace) -> list[str]:
    """The table's columns of ``--report abilities``."""
    columns = [c for c in ABILITY_COLUMNS if not (c == "item_id" and args.by == "pooled")]
    if args.by == "pooled":
        columns.append("scale")
    if args.method == "mle":
        columns = [c for c in columns if not c.startswith("rank")]
    return columns


def run_bt(args: argparse.Namespace) -> int:
    from evalset.bt_reports import anchored_rows, report_rows

    judgments = _read(args)
    weight = _weights(args.data, judgments)
    excluded = _exclusions(args, judgments)
    if excluded:
        keep = ~judgments["annotator_id"].is_in(excluded)
        if weight is not None:
            weight = weight[keep.to_numpy()]
        judgments = judgments.filter(keep)
        if not args.quiet:
            log(f"excluding {len(excluded)} annotator(s); {judgments.height} judgments remain")
    if args.plot and args.by != "pooled":
        raise ValueError("--plot draws the leaderboard: use it with --by pooled")
    fits = _fits(args, judgments, weight)
    report = args.report
    rows = report_rows(fits, report, by=args.by, reference=args.reference)
    columns = None
    if report == "abilities":
        if args.by == "pooled" and not args.quiet and rows:
            log(f"abilities: {rows[0]['scale']} (--reference SYSTEM to anchor on a system)")
        if args.format == "table":
            columns = _ability_columns(args)
    if args.format == "table" and report == "abilities" and args.by == "item":
        rows = sorted(rows, key=lambda r: (r["dimension"], r["item_id"], r["rank_mean"]))
    if args.plot:
        import evalset
        from evalset.plots import plot_leaderboard

        pooled = [r for f in fits for r in anchored_rows(f, args.reference)]
        plot_leaderboard(pooled, evalset.decisions(judgments), args.plot)
        if not args.quiet:
            log(f"wrote {args.plot}")
    emit(rows, args.format, columns=columns)
    return 0


def run_annotators(args: argparse.Namespace) -> int:
    from adaptive.annotation.annotators import ScreenConfig
    from evalset.bt_reports import screen_annotators

    judgments = _read(args)
    config = ScreenConfig(
        ties=args.ties,
        method=bt_method(args.method),
        num_chains=args.chains,
        num_warmup=args.warmup,
        num_samples=args.draws,
        seed=args.seed,
        alpha=args.test_level,
        assume_a_first=args.assume_a_first,
    )
    rows, info = screen_annotators(judgments, config)
    if not args.quiet:
        for key, value in info.items():
            log(f"{key}: {value}")
        log(f"flagged {sum(r['flagged'] for r in rows)} of {len(rows)} annotators")
    if args.plot:
        from evalset.plots import plot_annotators

        plot_annotators(rows, args.plot)
        if not args.quiet:
            log(f"wrote {args.plot}")
    emit(rows, args.format, columns=ANNOTATOR_COLUMNS if args.format == "table" else None)
    return 0


def run_elo(args: argparse.Namespace) -> int:
    import evalset

    anchor = None
    if args.anchor:
        name, _, value = args.anchor.rpartition("=")
        try:
            anchor = (name, float(value))
        except ValueError:
            raise SystemExit(f"evalset: --anchor is SYSTEM=RATING (got {args.anchor!r})") from None
    board = evalset.elo(
        args.data, dimension=args.dimension, rounds=args.rounds, level=args.level,
        seed=args.seed, anchor=anchor, bootstrap=args.bootstrap,
    )  # fmt: skip
    emit(board.to_dicts(), args.format)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_bt(sub)
    _register_elo(sub)
    _register_annotators(sub)
    register_damr(sub)


def _register_bt(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bt",
        help="Bayesian Bradley-Terry with position intercept: per-item or pooled abilities, ranks",
    )
    add_data_args(p)
    p.add_argument(
        "--by",
        choices=["item", "pooled"],
        default="item",
        help="item: abilities per (item, system) and a position intercept per item "
        "(Tack & Piech); pooled: one ability per system (a leaderboard)",
    )
    _add_fit_args(p)
    p.add_argument(
        "--report",
        choices=list(REPORTS),
        default="abilities",
        help="abilities (with rank posteriors), summary (dimensions side by side), "
        "differences (system pairs, significance per dimension), intercepts, diagnostics",
    )
    p.add_argument("--no-position", action="store_true", help="fit without the position intercept")
    p.add_argument(
        "--exclude-flagged",
        action="store_true",
        help="run the annotator screen first and leave the flagged annotators out",
    )
    p.add_argument(
        "--exclude-annotators",
        metavar="IDS_OR_CSV",
        help="comma-separated annotator ids, or a CSV with annotator_id and flagged/outlier_flag",
    )
    p.add_argument(
        "--assume-a-first",
        action="store_true",
        help="for --exclude-flagged without shown_first: treat response a as shown first",
    )
    p.add_argument(
        "--reference",
        metavar="SYSTEM",
        help="--by pooled: report abilities relative to this system (default: sum-to-zero, "
        "the average system at 0); with --method mle the system pinned to 0",
    )
    p.add_argument(
        "--plot", metavar="FILE", help="--by pooled: leaderboard forest plot (.png or .svg)"
    )
    p.set_defaults(func=run_bt)


def _register_elo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "elo",
        help="Arena-style Elo leaderboard: maximum-likelihood ratings (ties half a win), "
        "bootstrap intervals and rank intervals (Chatbot Arena's method)",
        description="Arena-style Elo leaderboard (Chatbot Arena's method), with the decisions' "
        "ranking beside each row (decided_group, decided_ranks, and a note where the two "
        "differ). The service gives "
        "the same rows for its stored judgments: GET /projects/P/elo, or "
        "GET /projects/P/leaderboard?scale=elo with the same options (anchor_system and "
        "anchor_rating for --anchor); its dashboard shows them with the defaults.",
    )
    add_data_args(p)
    p.add_argument("--rounds", type=int, default=1000, help="bootstrap resamples (default: 1000)")
    p.add_argument("--level", type=float, default=0.95, help="interval level (default: 0.95)")
    p.add_argument(
        "--anchor", metavar="SYSTEM=RATING", help="shift the ratings so SYSTEM has RATING"
    )
    p.add_argument(
        "--bootstrap",
        choices=["judgment", "prompt"],
        default="prompt",
        help="resample whole prompts with all their judgments (the decisions' unit) or single "
        "battles (Arena's notebook) (default: %(default)s)",
    )
    p.set_defaults(func=run_elo)


def _register_annotators(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "annotators", help="annotator screen: position bias and agreement, with flags and reasons"
    )
    add_data_args(p)
    _add_fit_args(p, default_method="nuts")
    p.set_defaults(warmup=SHORT_NUTS.num_warmup)  # one fit per annotator
    p.add_argument(
        "--test-level",
        "--alpha",
        dest="test_level",
        type=float,
        default=0.05,
        help="level of the agreement test (--alpha: its former name)",
    )
    p.add_argument(
        "--assume-a-first",
        action="store_true",
        help="without a shown_first column, treat response a as the one shown first",
    )
    p.add_argument(
        "--plot", metavar="FILE", help="position bias and agreement figure (.png or .svg)"
    )
    p.set_defaults(func=run_annotators)
