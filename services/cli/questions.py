"""``evalset answer``: the campaign's question (top-k, ranking, versus, ...) from its judgments."""

from __future__ import annotations

import argparse

from adaptive.stopping.questions import QUESTION_FORMS
from services.cli.common import FORMATS, add_map_arg, emit, log
from services.cli.decisions import add_rule_args, parse_question, rule_from_args
from services.cli.errors import CliError

#: the table's columns (``--format json`` and ``csv`` give every column)
TABLE_COLUMNS = ("dimension", "question", "answered", "pending", "needed", "answer")


def add_question_arg(parser: argparse.ArgumentParser, *, default: str | None = None) -> None:
    """``--question``, the one spelling every command shares."""
    parser.add_argument(
        "--question",
        default=default,
        help=f"the campaign's question: {QUESTION_FORMS} (docs/decisions.md, 'Questions')"
        + (" (default: %(default)s)" if default else ""),
    )


def run_answer(args: argparse.Namespace) -> int:
    from evalset.files import read_dimensions
    from evalset.questions import answer_judgments

    question = parse_question(args.question)
    judgments = read_dimensions(args.data, args.dimension)
    try:
        report = answer_judgments(judgments, rule_from_args(args), question)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    log(f"family: {report.decisions.family.describe()}")
    if report.decisions.rows:
        log(f"rule: {report.decisions.rows[0]['rule']}")
    rows = report.answers
    if args.format == "table":
        for row in rows:
            log(f"{row['dimension']}: {row['answer']}")
        emit(rows, "table", columns=TABLE_COLUMNS)
    else:
        emit(rows, args.format)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "answer",
        help="the campaign's question (top-k, ranking, versus, equivalence), valid at every look",
        description=(
            "Answers the campaign's question from the pairwise decisions of every pair it may "
            "need (each valid at every look, the family's error bound shared): the top k, a "
            "ranking in tied groups, each system against references, or one equivalence. "
            "`evalset decisions --question Q` gives the decisions it rests on. "
            "See docs/decisions.md, 'Questions'."
        ),
    )
    p.add_argument("--data", required=True, help="judgments file (CSV, JSONL or Parquet)")
    add_map_arg(p)
    add_question_arg(p, default="all-pairs")
    p.add_argument("--dimension", help="only this dimension (default: every dimension)")
    p.add_argument("--format", choices=list(FORMATS), default="table", help="output format")
    add_rule_args(p)
    p.set_defaults(func=run_answer)
