"""``evalset gold``: each annotator scored on the gold (attention-check) cells, with an
anytime-valid flag for one below a careful annotator's accuracy (:mod:`adaptive.annotation.gold`)."""

from __future__ import annotations

import argparse

from adaptive.annotation.gold import DEFAULT_CAREFUL, DEFAULT_CARELESS, DEFAULT_GOLD_LEVEL
from services.cli.common import add_data_args, emit, log

COLUMNS = (
    "annotator_id",
    "n_gold",
    "n_right",
    "accuracy",
    "accuracy_low",
    "accuracy_high",
    "max_ratio",
    "flagged",
    "flagged_after",
    "reason",
)


def run_gold(args: argparse.Namespace) -> int:
    import evalset

    table = evalset.gold(
        args.data,
        args.gold,
        dimension=args.dimension,
        careful=args.careful,
        careless=args.careless,
        level=args.level,
    )
    rows = table.to_dicts()
    if not args.quiet:
        flagged = sum(bool(r["flagged"]) for r in rows)
        log(
            f"flagged {flagged} of {len(rows)} annotators with gold judgments (accuracy below "
            f"{args.careful:g}, level {args.level:g})"
        )
    emit(rows, args.format, columns=COLUMNS if args.format == "table" else None)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "gold",
        help="each annotator scored on gold cells (known answers), flagged when a sequential "
        "test rejects a careful annotator's accuracy",
    )
    add_data_args(p)
    p.add_argument(
        "--gold",
        required=True,
        help="CSV of the gold cells: item_id, system_a, system_b, answer (a, b or tie for "
        "that order), optionally dimension",
    )
    p.add_argument(
        "--careful",
        type=float,
        default=DEFAULT_CAREFUL,
        help="accuracy a careful annotator reaches at least (default: %(default)s)",
    )
    p.add_argument(
        "--careless",
        type=float,
        default=DEFAULT_CARELESS,
        help="accuracy of a careless annotator, the test's alternative (default: %(default)s: "
        "random clicks on A or B)",
    )
    p.add_argument(
        "--level",
        type=float,
        default=DEFAULT_GOLD_LEVEL,
        help="chance, at most, that a careful annotator is ever flagged (default: %(default)s)",
    )
    p.add_argument("--quiet", action="store_true", help="no summary on stderr")
    p.set_defaults(func=run_gold)
