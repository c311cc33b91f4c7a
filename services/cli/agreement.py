"""``evalset agreement``: inter-annotator agreement on the cells judged more than once.

``--report dimensions`` (default): per dimension, Krippendorff's nominal alpha, observed and
expected agreement, Fleiss' kappa where every repeated cell has the same number of
judgments, and a note where a figure is missing; ``--report annotators``: per annotator and
dimension, the share of its judgments that match the other annotators' majority, against
chance, with a one-sided test and a flag (:mod:`adaptive.annotation.agreement`).
"""

from __future__ import annotations

import argparse

from services.cli.common import add_data_args, emit, log

DIMENSION_COLUMNS = (
    "dimension",
    "n_cells",
    "n_judgments",
    "per_cell_min",
    "per_cell_max",
    "n_self_repeats",
    "n_single_cells",
    "observed_agreement",
    "expected_agreement",
    "alpha",
    "fleiss_kappa",
    "note",
)
ANNOTATOR_COLUMNS = (
    "dimension",
    "annotator_id",
    "n_judgments",
    "n_shared",
    "n_compared",
    "agree_majority",
    "chance_agreement",
    "kappa_majority",
    "p_value",
    "flagged",
    "note",
)


def run_agreement(args: argparse.Namespace) -> int:
    import evalset

    table = evalset.agreement(
        args.data,
        dimension=args.dimension,
        report=args.report,
        test_level=args.test_level,
        self_repeats=args.self_repeats,
    )
    rows = table.to_dicts()
    if not args.quiet:
        if args.report == "dimensions":
            for r in rows:
                if r["alpha"] is not None:
                    log(
                        f"{r['dimension']}: alpha {r['alpha']:.3f} over {r['n_cells']} cells "
                        f"judged {r['per_cell_min']}-{r['per_cell_max']} times"
                    )
        else:
            flagged = sum(r["flagged"] for r in rows)
            log(f"flagged {flagged} of {len(rows)} annotator rows (not above chance)")
    columns = DIMENSION_COLUMNS if args.report == "dimensions" else ANNOTATOR_COLUMNS
    emit(rows, args.format, columns=columns if args.format == "table" else None)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "agreement",
        help="inter-annotator agreement on repeated cells: Krippendorff's alpha and Fleiss' "
        "kappa per dimension, or each annotator against the others' majority",
    )
    add_data_args(p)
    p.add_argument(
        "--report",
        choices=["dimensions", "annotators"],
        default="dimensions",
        help="one row per dimension, or per annotator and dimension (default: %(default)s)",
    )
    p.add_argument(
        "--test-level",
        type=float,
        default=0.05,
        help="level of each annotator's one-sided test against chance (default: %(default)s)",
    )
    p.add_argument(
        "--self-repeats",
        choices=["drop", "keep"],
        default="drop",
        help="an annotator's later judgments of a cell it already judged: left out (its "
        "first is its value) or counted as values of the cell (default: %(default)s)",
    )
    p.add_argument("--quiet", action="store_true", help="no summary on stderr")
    p.set_defaults(func=run_agreement)
