"""``evalset decisions``: every comparison's anytime-valid decision from its own judgments."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from adaptive.stopping.rule import (
    CORRECTIONS,
    DEFAULT_CORRECTION,
    DEFAULT_FAMILY,
    DEFAULT_LEVEL,
    DEFAULT_MARGIN,
    DEFAULT_UNIT,
    FAMILIES,
    UNITS,
)
from services.cli.common import FORMATS, add_map_arg, emit, log
from services.cli.errors import CliError

if TYPE_CHECKING:
    import polars as pl

    from adaptive.stopping.questions import Question
    from adaptive.stopping.rule import DecisionRule

DECISION_COLUMNS = (
    "dimension",
    "system_a",
    "system_b",
    "decision",
    "net_preference",
    "cs_low",
    "cs_high",
    "b_share",
    "b_share_low",
    "b_share_high",
    "n_used",
    "n_judgments",
    "closed_at",
    "needed",
    "needs_new_prompts",
)
#: with --question: which decisions the answer rests on
QUESTION_DECISION_COLUMNS = (*DECISION_COLUMNS, "question_role")
#: the table of hybrid decisions (``--judge-data``)
HYBRID_DECISION_COLUMNS = (
    "dimension",
    "system_a",
    "system_b",
    "decision",
    "net_preference",
    "cs_low",
    "cs_high",
    "n_used",
    "n_judgments",
    "closed_at",
    "judge_agreement",
    "effective_humans",
)


def add_rule_args(parser: argparse.ArgumentParser, *, with_family: bool = False) -> None:
    """The decision rule's flags, shared by ``decisions``, ``recommend`` and ``replay``;
    their defaults are :class:`adaptive.stopping.rule.DecisionRule`'s. ``with_family``: the comparison
    family's flags too (``decisions`` and ``recommend``, with a file or a served project;
    ``replay`` takes its own ``--family``)."""
    parser.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_LEVEL,
        help="decision level: campaign-wide error bound, shared by the comparison family "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help="equivalence region |net preference| < margin, in [-1, 1] units "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--unit",
        choices=list(UNITS),
        default=DEFAULT_UNIT,
        help=(
            "prompt: the first judgment of each (comparison, prompt) cell, a claim about new "
            "prompts; judgment: every judgment, a claim about these prompts "
            "(default: %(default)s)"
        ),
    )
    parser.add_argument(
        "--correction",
        choices=list(CORRECTIONS),
        default=DEFAULT_CORRECTION,
        help="multiplicity rule across the family: bonferroni, e-holm (closed testing with "
        "e-values: decides at least what bonferroni does) or none (default: %(default)s)",
    )
    if with_family:
        parser.add_argument(
            "--family",
            choices=list(FAMILIES),
            default=DEFAULT_FAMILY,
            help="comparisons that share alpha: compared (those with judgments), registered "
            "(--pairs) or all-pairs (every pair of the systems) (default: %(default)s)",
        )
        parser.add_argument(
            "--pairs",
            help="the registered family: A:B,C:D (implies --family registered)",
        )


def rule_from_args(args: argparse.Namespace) -> DecisionRule:
    from evalset.batch import as_pairs
    from evalset.decide import rule_of

    pairs = [p for p in (getattr(args, "pairs", None) or "").split(",") if p.strip()]
    try:
        return rule_of(
            alpha=args.alpha,
            margin=args.margin,
            unit=args.unit,
            correction=args.correction,
            family=getattr(args, "family", DEFAULT_FAMILY),
            pairs=as_pairs(pairs),
        )
    except ValueError as exc:
        raise CliError(f"{exc.args[0]} (--pairs wants SYSTEM_A:SYSTEM_B pairs)") from exc


def parse_question(text: str | None) -> Question:
    """The question of ``--question``, or a one-line error."""
    from adaptive.stopping.questions import Question

    try:
        return Question.parse(text)
    except ValueError as exc:
        raise CliError(f"--question: {exc}") from exc


def run_decisions(args: argparse.Namespace) -> int:
    from adaptive.core.data import filter_judgments, read_judgments
    from evalset.decide import decide_judgments

    judgments = read_judgments(args.data)
    if args.dimension:
        judgments = filter_judgments(judgments, dimensions=[args.dimension])
    if args.judge_data:
        if args.question:
            raise CliError("--question reads human decisions only: leave out --judge-data")
        return _hybrid_decisions(args, judgments)
    if args.question:
        from evalset.questions import answer_judgments

        try:
            asked = answer_judgments(judgments, rule_from_args(args), parse_question(args.question))
        except ValueError as exc:
            raise CliError(str(exc)) from exc
        report = asked.decisions
        for row in asked.answers:
            log(f"question {row['question']} ({row['dimension']}): {row['answer']}")
    else:
        report = decide_judgments(judgments, rule_from_args(args))
    rows = report.rows
    log(f"family: {report.family.describe()}")
    if report.outside:
        log(f"note: {len(report.outside)} compared comparisons are outside the family: no decision")
    if rows:
        log(f"rule: {rows[0]['rule']}")
        closed = sum(r["decision"] != "undecided" for r in rows)
        log(f"{closed} of {len(rows)} comparisons decided")
        short = sum(r["needs_new_prompts"] for r in rows)
        if short:
            log(
                f"note: {short} undecided comparisons likely need more judgments than they have "
                "unused prompts (needs_new_prompts): closing them needs new prompts"
            )
    columns = QUESTION_DECISION_COLUMNS if args.question else DECISION_COLUMNS
    emit(rows, args.format, columns=columns if args.format == "table" else None)
    return 0


def _hybrid_decisions(args: argparse.Namespace, judgments: pl.DataFrame) -> int:
    """Hybrid decisions: the human judgments and a judge's verdicts (evalset.hybrid)."""
    from evalset.hybrid import decide_with_judge, read_verdicts

    verdicts = read_verdicts(args.judge_data)
    if args.dimension:
        verdicts = verdicts.filter(verdicts["dimension"] == args.dimension)
    report = decide_with_judge(judgments, verdicts, rule_from_args(args), judge=args.judge)
    rows = report.rows
    log(f"family: {report.family.describe()}")
    if rows:
        log(f"rule: {rows[0]['rule']}")
        closed = sum(r["decision"] != "undecided" for r in rows)
        log(f"{closed} of {len(rows)} comparisons decided; judge {report.judge!r}")
    emit(rows, args.format, columns=HYBRID_DECISION_COLUMNS if args.format == "table" else None)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "decisions",
        help="B better / A better / equivalent / undecided for every comparison, valid at every look",
        description=(
            "Each comparison's decision from its own judgments, in file order (the order they "
            "arrived): beta-mixture e-processes for the sign, an empirical-Bernstein confidence "
            "sequence of the net preference for equivalence, alpha shared by the comparison family "
            "(--family). See docs/decisions.md."
        ),
    )
    p.add_argument("--data", required=True, help="judgments file (CSV, JSONL or Parquet)")
    add_map_arg(p)
    p.add_argument("--dimension", help="only this dimension (default: every dimension)")
    p.add_argument("--format", choices=list(FORMATS), default="table", help="output format")
    p.add_argument(
        "--judge-data",
        help="an automatic judge's verdicts (judgments schema, annotator_id naming the judge, "
        "optional inconsistent column): hybrid decisions, Δ still the humans' "
        "(docs/hybrid.md)",
    )
    p.add_argument(
        "--judge",
        help="with --judge-data naming several judges: the one to use (default: the only one)",
    )
    p.add_argument(
        "--question",
        help="the campaign's question (top-k:K, ranking, versus:REF,..., equivalence:A,B): its "
        "family's decisions, each row's question_role (claim / pending), the answer on stderr "
        "(evalset answer; docs/decisions.md, 'Questions')",
    )
    add_rule_args(p, with_family=True)
    p.set_defaults(func=run_decisions)
