"""``evalset damr``: MRBench's desired-annotation match rate per tutor and dimension,
optionally next to the paper's Table 3, and the conversion of graded labels into pairwise
judgments (written out, or ranked with Bradley-Terry). Registered with ``evalset bt``'s
group (:mod:`services.cli.bt`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from services.cli.common import FORMATS, bt_method, dimensions_of, emit, log
from stan_free_models.fit_settings import SHORT_NUTS

if TYPE_CHECKING:
    import polars as pl


def run_damr(args: argparse.Namespace) -> int:
    from evalset.bt_reports import damr_rows, read_ratings, to_pairwise
    from evalset.files import write_csv

    ratings = read_ratings(
        args.data, subset=args.subset, items=args.items, dimension=args.dimension
    )
    if args.pairwise_out:
        pairs = to_pairwise(ratings, weighting=args.weighting)
        write_csv(pairs, args.pairwise_out)
        if not args.quiet:
            log(f"wrote {pairs.height} pairwise judgments to {args.pairwise_out}")
    if args.rank:
        return _rank_tutors(args, ratings)
    rows = damr_rows(ratings, tone=args.tone, compare_paper=args.compare_paper)
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
    from adaptive.leaderboards.bt import BTConfig
    from evalset.bt_reports import ranked_abilities, tutor_judgments

    judgments, weight = tutor_judgments(ratings, weighting=args.weighting)
    config = BTConfig(
        by="pooled",
        ties="davidson",
        method=bt_method(args.method),
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
        rows += ranked_abilities(judgments, dim, config, weight=weight)
    columns = None
    if args.format == "table":
        columns = ["dimension", "system", "mean", "sd", "ci_low", "ci_high"]
        if args.method != "mle":
            columns += ["rank_mean", "rank_ci_low", "rank_ci_high"]
    emit(rows, args.format, columns=columns)
    return 0


def register_damr(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
