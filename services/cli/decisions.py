"""``evalset decisions``: every comparison's anytime-valid decision from its own judgments."""

from __future__ import annotations

import argparse
from enum import Enum, EnumMeta
from typing import TYPE_CHECKING, Any, Literal, cast, get_args, get_origin

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
    """The decision rule's flags, shared by ``decisions``, ``recommend`` and ``replay``, made
    from :class:`adaptive.stopping.rule.DecisionRule`'s fields (their types, defaults and
    meaning; :data:`adaptive.stopping.rule_options.RULE_OPTIONS`). ``with_family``: the
    comparison family's flags too (``decisions`` and ``recommend``, with a file or a served
    project; ``replay`` takes its own ``--family``)."""
    from adaptive.stopping.rule_options import RULE_FIELDS, RULE_OPTIONS

    for name in RULE_OPTIONS:
        if name in ("family", "pairs") and not with_family:
            continue
        info = RULE_FIELDS[name]
        kind = info.annotation
        options: dict[str, Any] = {"help": f"{info.description} (default: %(default)s)"}
        if name == "pairs":
            options = {"help": f"{info.description}: A:B,C:D"}
        elif get_origin(kind) is Literal or (isinstance(kind, type) and issubclass(kind, Enum)):
            options |= {"choices": [str(v) for v in _values(kind)], "default": info.default}
        else:
            options |= {"type": kind, "default": info.default}
        parser.add_argument(f"--{name}", **options)


def _values(kind: Any) -> list[Any]:
    """The values a Literal or an Enum allows."""
    if isinstance(kind, EnumMeta):
        return [member.value for member in cast("type[Enum]", kind)]
    return list(get_args(kind))


def rule_from_args(args: argparse.Namespace) -> DecisionRule:
    """The rule of the flags :func:`add_rule_args` added, or a one-line error naming the flag."""
    from pydantic import ValidationError

    from adaptive.stopping.rule_options import RULE_OPTIONS, RuleKeywords
    from evalset.rules import rule_problems

    given = {k: getattr(args, k) for k in RULE_OPTIONS if getattr(args, k, None) is not None}
    try:
        return RuleKeywords(**given).build_rule()
    except ValidationError as exc:
        problems = rule_problems(exc)
        raise CliError("; ".join(f"--{field}: {message}" for field, message in problems)) from exc


def parse_question(text: str | None) -> Question:
    """The question of ``--question``, or a one-line error."""
    from adaptive.stopping.questions import Question

    try:
        return Question.parse(text)
    except ValueError as exc:
        raise CliError(f"--question: {exc}") from exc


def run_decisions(args: argparse.Namespace) -> int:
    from evalset.decide import decide_judgments
    from evalset.files import read_dimensions

    judgments = read_dimensions(args.data, args.dimension)
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
