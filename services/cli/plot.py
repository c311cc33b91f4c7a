"""``evalset plot KIND --data FILE --plot OUT``: the report figures from a judgments file.

Kinds: ``leaderboard`` (forest plot with decision colours), ``annotators`` (position
bias and agreement), ``items`` (information curves and discrimination), ``matrices``
(win rates and judgment counts), ``progress`` (closed / open comparisons, judgments
spent and likely still needed), ``evidence`` (each comparison's e-values over its
judgments, the decision boundary and where it closed). ``OUT`` ends in ``.png`` or ``.svg``. The table the
figure is drawn from goes to stdout (``--format``), as every analysis does.
"""

from __future__ import annotations

import argparse
from typing import Any

from services.cli.common import DefaultsHelp, add_data_args, emit, log

KINDS = ("leaderboard", "annotators", "items", "matrices", "progress", "evidence")


def run_plot(args: argparse.Namespace) -> int:
    import evalset
    from evalset import plots

    judgments = evalset.read(args.data)
    dim = args.dimension
    table: Any  # a frame or a list of rows, per kind
    if args.kind == "leaderboard":
        table = evalset.leaderboard(
            judgments, dimension=dim, method=args.method, reference=args.reference, seed=args.seed
        )
        plots.plot_leaderboard(table, evalset.decisions(judgments, dimension=dim), args.plot)
    elif args.kind == "annotators":
        table = evalset.annotators(
            judgments,
            dimension=dim,
            method=args.method,
            assume_a_first=args.assume_a_first,
            seed=args.seed,
        )
        plots.plot_annotators(table, args.plot)
    elif args.kind == "items":
        result = evalset.fit(judgments, dimension=dim, method=args.method, seed=args.seed)
        from evalset.analyses import analysis_item_rows

        table = analysis_item_rows(result)
        plots.plot_item_information(result, args.plot)
    elif args.kind == "matrices":
        table = None
        plots.plot_matrices(judgments, args.plot, dimension=dim)
    elif args.kind == "evidence":
        table = evalset.decisions(judgments, dimension=dim)
        plots.plot_evidence(evalset.evidence(judgments, dimension=dim), args.plot, dimension=dim)
    else:
        table = evalset.decisions(judgments, dimension=dim)
        plots.plot_progress(table, args.plot, cost_per_judgment=args.cost, dimension=dim)
    if not args.quiet:
        log(f"wrote {args.plot}")
    if table is not None:
        rows = table if isinstance(table, list) else table.to_dicts()
        emit(rows, args.format)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plot",
        help="report figures: leaderboard, annotators, items, matrices, progress (PNG or SVG)",
        description=__doc__,
        formatter_class=DefaultsHelp,
    )
    p.add_argument("kind", choices=KINDS, help="which figure")
    add_data_args(p)
    p.add_argument("--plot", required=True, metavar="FILE", help="the figure: .png or .svg")
    p.add_argument(
        "--method",
        choices=["fast", "nuts", "laplace"],
        default="fast",
        help="fast: MAP + Laplace (default; laplace is the same); nuts: full posterior",
    )
    p.add_argument(
        "--reference",
        help="leaderboard: abilities relative to this system (default: sum-to-zero)",
    )
    p.add_argument(
        "--cost", type=float, help="progress: cost of one judgment, to price what is left"
    )
    p.add_argument(
        "--assume-a-first",
        action="store_true",
        help="annotators: without shown_first, treat response a as shown first",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run_plot)
