"""``evalset replay``: a logged campaign replayed per allocation policy, judgments spent
against decisions closed (registered with ``evalset recommend``'s group,
:mod:`services.cli.recommend`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from adaptive.stopping.rule import DEFAULT_FAMILY
from services.cli.common import FORMATS, add_map_arg, dimensions_of, emit, log
from services.cli.decisions import add_rule_args
from services.cli.errors import CliError

REPLAY_COLUMNS = (
    "dimension",
    "data",
    "policy",
    "seeds",
    "judgments_mean",
    "judgments_sd",
    "share_of_log",
    "ratio_to_uniform",
    "closed_mean",
    "comparisons",
    "half_closed_judgments",
    "reversals_max",
    "agreement_clear",
    "wrong_sign_rate",
    "wrong_equivalence_rate",
)
#: with --question: how often, how soon and what it answered
QUESTION_COLUMNS = (
    "question",
    "answered_share",
    "answered_judgments_mean",
    "answer",
    "answer_share",
    "wrong_answers",
    "ratio_to_oracle",
    "lower_bound",
)
#: every policy a replay compares by default
DEFAULT_POLICIES = ("adaptive", "uniform", "round_robin", "arena")


def run_replay(args: argparse.Namespace) -> int:
    from evalset.files import read_judgments
    from evalset.replays import replay_rows
    from services.cli.decisions import parse_question, rule_from_args

    if args.judge_data:
        if args.question:
            raise CliError("--question replays human judgments only: leave out --judge-data")
        return _replay_with_judge(args)
    policies = []
    for part in args.policy or list(DEFAULT_POLICIES):
        policies += [p.strip() for p in part.split(",") if p.strip()]
    question = parse_question(args.question) if args.question else None
    judgments = read_judgments(args.data)
    rule = rule_from_args(args)
    try:
        rows = replay_rows(
            judgments,
            policies=policies,
            seeds=args.seeds,
            seed=args.seed,
            batch_size=args.batch_size,
            budget=args.budget,
            rule=rule,
            question=question,
            semi_synthetic=args.semi_synthetic,
            prompts_factor=args.prompts_factor,
            dimensions=args.dimension or dimensions_of(judgments),
            progress=lambda label, total: _progress(label, total, args.quiet),
            say=None if args.quiet else log,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    if args.format == "json":
        emit(rows, "json")
    else:
        columns = REPLAY_COLUMNS + (QUESTION_COLUMNS if question else ())
        emit(rows, args.format, columns=columns)
    if not args.quiet and rows:
        log(f"rule: {rows[0]['rule']}")
    if args.plot:
        from evalset.plots_campaign import plot_anytime

        plot_anytime(rows, args.plot, title=Path(args.data).parent.name)
    return 0


def _replay_with_judge(args: argparse.Namespace) -> int:
    """Human-only vs hybrid decisions on a human log and a judge's verdicts (adaptive.judge.hybrid)."""
    from evalset.hybrid_replays import replay_with_judge
    from services.cli.decisions import rule_from_args

    rule = rule_from_args(args)
    # the verdicts' one reader and the judge's choice, as every other door
    rows = replay_with_judge(
        args.data, args.judge_data, judge=args.judge, seed=args.seed, seeds=args.seeds,
        alpha=rule.alpha, margin=rule.margin,
    )  # fmt: skip
    columns = ["dimension", "policy", "human_judgments_mean", "closed_mean", "reversals_max"]
    emit(rows, args.format, columns=None if args.format == "json" else columns)
    return 0


def _progress(label: str, total: int, quiet: bool) -> Callable[[], None]:
    """A step function that prints ``label k/total`` on stderr (nothing when quiet)."""
    state = {"k": 0}

    def step() -> None:
        state["k"] += 1
        if not quiet:
            end = "\n" if state["k"] == total else "\r"
            print(f"  {label}: seed {state['k']}/{total}", end=end, file=sys.stderr, flush=True)

    return step


def register_replay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser(
        "replay",
        help="replay a logged campaign: judgments each policy spends until the decisions close",
        description=(
            "Leopard/White replay: each policy may only ask for judgments that exist in the log; "
            "every policy runs with the same anytime-valid decision rule (evalset decisions) and "
            "stops when every comparison is closed or its log cannot move it any more. Reports "
            "judgments used, comparisons closed, reversals against the full log's own sign, and "
            "with --semi-synthetic (fresh outcomes from a fit to the log, known truth) the "
            "wrong-sign and wrong-equivalence rates. See docs/replay.md."
        ),
    )
    r.add_argument("--data", required=True, help="judgments file (CSV, JSONL or Parquet)")
    add_map_arg(r)
    r.add_argument("--dimension", action="append", help="only this dimension (repeatable)")
    r.add_argument(
        "--policy",
        action="append",
        help="adaptive, uniform, round_robin, arena, and oracle with --semi-synthetic "
        "(repeatable or comma-separated; default: the first four)",
    )
    r.add_argument(
        "--question",
        help="replay until the campaign's question is answered: top-k:K, ranking, "
        "versus:REF,..., equivalence:A,B (default: every comparison's sign; docs/replay.md)",
    )
    r.add_argument("--seeds", type=int, default=20, help="replays per policy (default: 20)")
    r.add_argument("--seed", type=int, default=0, help="first seed (default: 0)")
    r.add_argument("--budget", type=int, help="stop after this many judgments (default: the log)")
    r.add_argument("--batch-size", type=int, default=100, help="judgments per batch (default: 100)")
    r.add_argument(
        "--semi-synthetic",
        action="store_true",
        help="replay fresh campaigns simulated from a fit to the log (known truth)",
    )
    r.add_argument(
        "--prompts-factor",
        type=int,
        default=1,
        help="with --semi-synthetic: k times the log's prompts, same design (default: 1)",
    )
    add_rule_args(r)
    r.add_argument(
        "--family",
        choices=["compared", "all-pairs"],
        default=DEFAULT_FAMILY,
        help="the comparisons alpha is split over: those in the log (compared) or every pair "
        "of its systems (all-pairs), to see what a larger family costs (default: %(default)s)",
    )
    r.add_argument("--plot", help="write the anytime curves (judgments until k closed) to this PNG")
    r.add_argument("--format", choices=list(FORMATS), default="table", help="output format")
    r.add_argument("--quiet", action="store_true", help="no progress on stderr")
    r.add_argument(
        "--judge-data",
        help="an automatic judge's verdicts (judgments schema, annotator_id naming the judge): "
        "compare human-only, hybrid_uniform and hybrid_routed (docs/hybrid.md)",
    )
    r.add_argument(
        "--judge",
        help="with --judge-data naming several judges: the one to use (default: the only one)",
    )
    r.set_defaults(func=run_replay)
