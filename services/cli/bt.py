"""``evalset bt``, ``evalset annotators`` and ``evalset damr``.

* ``bt``: Bayesian Bradley-Terry with a position intercept (Tack & Piech, eq. 2),
  per item (abilities and rank posteriors per dialogue item) or pooled (a
  leaderboard), every dimension separately.
* ``annotators``: the annotator screen (position bias, agreement), one row per
  annotator with its evidence.
* ``damr``: MRBench's desired-annotation match rate per tutor and dimension,
  optionally next to the paper's Table 3, and the conversion of graded labels
  into pairwise judgments (written out, or ranked with Bradley-Terry).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.cli.common import FORMATS, add_data_args, dimensions_of, emit, log
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


def _bt_method(method: str) -> str:
    """The fitting method's internal name: ``fast`` is the Laplace path."""
    return "laplace" if method == "fast" else method


def anchored_rows(fit: Any, reference: str | None) -> list[dict[str, Any]]:
    """Pooled abilities sum-to-zero, or relative to ``reference``; the ``scale`` column says
    which. Abilities are identified only up to a constant: unanchored, every interval
    carries that constant's uncertainty while the differences are tight."""

    from adaptive.leaderboards import bt

    rows = bt.ability_rows(fit)
    names = [r["system"] for r in rows]
    if reference is not None and reference not in names:
        raise ValueError(f"reference system {reference!r} not in {names}")
    if fit.posterior is None:  # mle: the pinned system is the reference already
        pinned = next(r["system"] for r in rows if r.get("reference"))
        for r in rows:
            r["scale"] = f"relative to {pinned}"
        return sorted(rows, key=lambda r: -r["mean"])
    draws = fit.ability_draws()
    if reference is None:
        draws = draws - draws.mean(axis=1, keepdims=True)
        scale = "sum-to-zero"
    else:
        draws = draws - draws[:, [names.index(reference)]]
        scale = f"relative to {reference}"
    low, high = bt.hdi(draws, fit.config.prob)
    for i, r in enumerate(rows):
        r.update(
            mean=float(draws[:, i].mean()),
            sd=float(draws[:, i].std(ddof=1)),
            ci_low=float(low[i]),
            ci_high=float(high[i]),
            p_positive=float((draws[:, i] > 0).mean()),
            scale=scale,
        )
    return sorted(rows, key=lambda r: (r["dimension"], -r["mean"]))


def _read(args: argparse.Namespace) -> pl.DataFrame:
    from adaptive.core.data import filter_judgments, read_judgments

    judgments = read_judgments(args.data)
    if getattr(args, "dimension", None):
        judgments = filter_judgments(judgments, dimensions=[args.dimension])
    return judgments


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
        from adaptive.annotation.annotators import (
            ScreenConfig,
            flagged_annotators,
            screen_annotators,
        )

        rows, info = screen_annotators(
            judgments,
            ScreenConfig(method="laplace", seed=args.seed, assume_a_first=args.assume_a_first),
        )
        flagged = flagged_annotators(rows)
        if not args.quiet:
            log(f"annotator screen flagged {len(flagged)}: {', '.join(flagged) or '-'}")
            if "position_note" in info:
                log(f"  {info['position_note']}")
        out += flagged
    return sorted(set(out))


def run_bt(args: argparse.Namespace) -> int:
    import numpy as np

    from adaptive.leaderboards import bt

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
    config = bt.BTConfig(
        by=args.by,
        ties=args.ties,
        method=_bt_method(args.method),
        position=not args.no_position,
        num_chains=args.chains,
        num_warmup=args.warmup,
        num_samples=args.draws,
        seed=args.seed,
        reference=args.reference if args.method == "mle" else None,
    )
    fits = []
    for dim in dimensions_of(judgments):
        if not args.quiet:
            log(f"fitting {dim!r}: {args.by}, ties={args.ties}, {args.method} ...")
        w = None
        if weight is not None:
            w = np.asarray(weight)
        fit = bt.fit_dimension(judgments, dim, config, weight=w)
        if not args.quiet and fit.posterior is not None:
            d = fit.posterior.diagnostics.summary()
            log(
                f"  {fit.input.num_judgments} judgments, {len(fit.input.players)} abilities; "
                f"max R-hat {d['max_rhat']:.3f}, min bulk ESS {d['min_ess_bulk']:.0f}, "
                f"divergences {d['num_divergences']}, {d['seconds']:.1f} s; "
                f"position from {fit.input.position_source}"
            )
        fits.append(fit)
    report = args.report
    columns = None
    if report == "abilities":
        if args.by == "pooled":
            rows = [r for f in fits for r in anchored_rows(f, args.reference)]
            if not args.quiet and rows:
                log(f"abilities: {rows[0]['scale']} (--reference SYSTEM to anchor on a system)")
        else:
            rows = [r for f in fits for r in bt.ability_rows(f)]
        if args.format == "table":
            columns = [c for c in ABILITY_COLUMNS if not (c == "item_id" and args.by == "pooled")]
            if args.by == "pooled":
                columns.append("scale")
            if args.method == "mle":
                columns = [c for c in columns if not c.startswith("rank")]
    elif report == "summary":
        rows = bt.summary_rows(fits)
    elif report == "differences":
        rows = [r for f in fits for r in bt.difference_rows(f)]
    elif report == "intercepts":
        rows = [r for f in fits for r in bt.intercept_rows(f)]
    else:
        rows = bt.diagnostics_rows(fits)
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
    from adaptive.annotation.annotators import ScreenConfig, screen_annotators

    judgments = _read(args)
    config = ScreenConfig(
        ties=args.ties,
        method=_bt_method(args.method),
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


def run_damr(args: argparse.Namespace) -> int:
    from adaptive.core.csv_safe import write_csv
    from adaptive.leaderboards import damr

    ratings = damr.read_ratings(args.data, subset=args.subset, items=args.items)
    if args.dimension:
        ratings = ratings.filter(ratings["dimension"] == args.dimension)
    if args.pairwise_out:
        pairs = damr.to_pairwise(ratings, weighting=args.weighting)
        write_csv(pairs, args.pairwise_out)
        if not args.quiet:
            log(f"wrote {pairs.height} pairwise judgments to {args.pairwise_out}")
    if args.rank:
        return _rank_tutors(args, ratings)
    desired = {"Tutor_Tone": ("Encouraging", "Neutral")} if args.tone == "non-offensive" else None
    rows = damr.damr(ratings, desired=desired)
    if args.compare_paper:
        rows = damr.compare_with_paper(rows)
    if args.format == "table":
        rows = _wide(rows, "difference" if args.compare_paper else "damr")
        if not args.quiet and args.compare_paper:
            log("cells: ours - paper (MRBench Table 3), percentage points")
    emit(rows, args.format)
    return 0


def _wide(rows: list[dict[str, Any]], value: str) -> list[dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    for r in rows:
        table.setdefault(r["system"], {"system": r["system"], "n": r["n"]})[r["dimension"]] = r[
            value
        ]
    return list(table.values())


def _rank_tutors(args: argparse.Namespace, ratings: pl.DataFrame) -> int:
    from adaptive.core.data import validate_judgments
    from adaptive.leaderboards import bt, damr

    pairs = damr.to_pairwise(ratings, weighting=args.weighting)
    judgments = validate_judgments(pairs, source="<pairwise from ratings>")
    weight = damr.pairwise_weights(pairs)
    config = bt.BTConfig(
        by="pooled",
        ties="davidson",
        method=_bt_method(args.method),
        position=False,
        num_chains=args.chains,
        num_warmup=args.warmup,
        num_samples=args.draws,
        seed=args.seed,
    )
    rows = []
    for dim in dimensions_of(judgments):
        if not args.quiet:
            log(f"ranking tutors on {dim!r} ({args.method}) ...")
        fit = bt.fit_dimension(judgments, dim, config, weight=weight)
        rows += sorted(bt.ability_rows(fit), key=lambda r: -r["mean"])
    columns = None
    if args.format == "table":
        columns = ["dimension", "system", "mean", "sd", "ci_low", "ci_high"]
        if args.method != "mle":
            columns += ["rank_mean", "rank_ci_low", "rank_ci_high"]
    emit(rows, args.format, columns=columns)
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

    p = sub.add_parser("damr", help="desired-annotation match rate of graded tutor labels")
    p.add_argument("--data", required=True, help="ratings CSV (item_id, system, dimension, label)")
    p.add_argument("--dimension", help="only this dimension")
    p.add_argument("--format", choices=list(FORMATS), default="table")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--subset", choices=["all", "v1"], default="all", help="v1: MRBench_V1 dialogues only"
    )
    p.add_argument("--items", help="items CSV with in_v1 (default: items.csv next to --data)")
    p.add_argument(
        "--compare-paper", action="store_true", help="add MRBench Table 3 and the difference"
    )
    p.add_argument(
        "--tone",
        choices=["encouraging", "non-offensive"],
        default="encouraging",
        help="desired Tutor_Tone: Encouraging (Table 4, default) or Encouraging/Neutral",
    )
    p.add_argument("--pairwise-out", metavar="CSV", help="write the pairwise judgments here")
    p.add_argument(
        "--weighting",
        choices=["per_label", "none"],
        default="per_label",
        help="pair weight 1/(k-1) so each label counts once (default), or 1",
    )
    p.add_argument(
        "--rank", action="store_true", help="rank tutors per dimension with Bradley-Terry"
    )
    p.add_argument(
        "--method",
        choices=["nuts", "fast", "laplace", "mle"],
        default="nuts",
        help="nuts, fast (MAP + Laplace; 'laplace' is the old name), mle (default: %(default)s)",
    )
    p.add_argument("--chains", type=int, default=SHORT_NUTS.num_chains)
    p.add_argument("--warmup", type=int, default=SHORT_NUTS.num_warmup)
    p.add_argument("--draws", type=int, default=SHORT_NUTS.num_samples)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_damr)
