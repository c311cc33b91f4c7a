"""``evalset decisions``: every comparison's anytime-valid decision from its own judgments."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from services.cli.common import FORMATS, dimensions_of, emit, log

if TYPE_CHECKING:
    import polars as pl

    from adaptive.decisions import DecisionRule

DECISION_COLUMNS = (
    "dimension",
    "system_a",
    "system_b",
    "decision",
    "net_preference",
    "cs_low",
    "cs_high",
    "n_judgments",
    "n_used",
    "n_prompts",
    "closed_at",
    "needed",
)


def add_rule_args(parser: argparse.ArgumentParser) -> None:
    """The decision rule's flags, shared by ``decisions``, ``recommend`` and ``replay``."""
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="campaign-wide error bound, split over the comparisons (default: 0.05)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=0.1,
        help="equivalence region |net preference| < margin, in [-1, 1] units (default: 0.1)",
    )
    parser.add_argument(
        "--unit",
        choices=["prompt", "judgment"],
        default="prompt",
        help=(
            "prompt: the first judgment of each (comparison, prompt) cell, a claim about new "
            "prompts (default); judgment: every judgment, a claim about these prompts"
        ),
    )
    parser.add_argument(
        "--correction",
        choices=["bonferroni", "none"],
        default="bonferroni",
        help="how alpha is split across comparisons (default: bonferroni)",
    )


def rule_from_args(args: argparse.Namespace) -> DecisionRule:
    from adaptive.decisions import DecisionRule

    return DecisionRule(
        alpha=args.alpha, margin=args.margin, unit=args.unit, correction=args.correction
    )


def decision_table(
    judgments: pl.DataFrame, dims: list[str], rule: DecisionRule
) -> list[dict[str, Any]]:
    """Rows of :func:`adaptive.decisions.decision_rows` for every dimension (one family)."""
    from adaptive.cells import build_cells
    from adaptive.decisions import decide_cells, decision_rows

    cells = [build_cells(judgments, dimension=d) for d in dims]
    num_tests = sum(c.num_comparisons for c in cells)
    rows = []
    for cd in cells:
        names = [(cd.dimension, a, b) for a, b in cd.comparison_names()]
        rows += decision_rows(decide_cells(cd, rule, num_tests=num_tests), names)
    return rows


def run_decisions(args: argparse.Namespace) -> int:
    from adaptive.data import filter_judgments, read_judgments

    judgments = read_judgments(args.data)
    if args.dimension:
        judgments = filter_judgments(judgments, dimensions=[args.dimension])
    rule = rule_from_args(args)
    rows = decision_table(judgments, dimensions_of(judgments), rule)
    if rows:
        log(f"rule: {rows[0]['rule']}")
        closed = sum(r["decision"] != "undecided" for r in rows)
        log(f"{closed} of {len(rows)} comparisons decided")
    emit(rows, args.format, columns=None if args.format == "json" else DECISION_COLUMNS)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "decisions",
        help="B better / A better / equivalent / undecided for every comparison, valid at every look",
        description=(
            "Each comparison's decision from its own judgments, in file order (the order they "
            "arrived): beta-mixture e-processes for the sign, an empirical-Bernstein confidence "
            "sequence of the net preference for equivalence, alpha split across comparisons. "
            "See docs/statistics.md#decisions."
        ),
    )
    p.add_argument("--data", required=True, help="judgments file (CSV, JSONL or Parquet)")
    p.add_argument("--dimension", help="only this dimension (default: every dimension)")
    p.add_argument("--format", choices=list(FORMATS), default="table", help="output format")
    add_rule_args(p)
    p.set_defaults(func=run_decisions)
