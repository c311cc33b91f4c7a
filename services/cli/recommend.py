"""``evalset recommend`` (the next annotation batch) and ``evalset replay`` (effort vs outcome)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adaptive.recommend.state import DEFAULT_BURN_IN
from adaptive.stopping.rule import DEFAULT_FAMILY
from evalset.plan import DEFAULT_DRAWS, RecommendRequest
from services.cli.common import FORMATS, add_map_arg, dimensions_of, emit, log
from services.cli.decisions import add_rule_args
from services.cli.errors import CliError
from services.crowd.tasks import TASK_COLUMNS as CROWD_TASK_COLUMNS

#: a recommended task: the crowd round trip's task columns (without the batch id, given at export)
#: and why the cell was chosen
RECOMMEND_COLUMNS = tuple(c for c in CROWD_TASK_COLUMNS if c != "batch_id") + ("reason", "needed")


# --------------------------------------------------------------------- recommend


def _pairs(text: str | None) -> list[tuple[str, str]]:
    out = []
    for part in (text or "").split(","):
        if part.strip():
            if ":" not in part:
                raise CliError(f"--targets wants SYSTEM_A:SYSTEM_B pairs, got {part!r}")
            a, b = part.split(":", 1)
            out.append((a.strip(), b.strip()))
    return out


def recommend_from_file(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Fit each dimension of a judgments file (fast path) and recommend a batch
    (:func:`evalset.batch.recommend_batch`)."""
    from adaptive.core.data import filter_judgments, read_judgments
    from evalset.batch import recommend_batch, side_tables
    from evalset.plan import RecommendRequest
    from services.cli.decisions import parse_question, rule_from_args

    judgments = read_judgments(args.data)
    if args.dimension:
        judgments = filter_judgments(judgments, dimensions=args.dimension)
    folder = Path(args.data).parent
    prompt_text, responses = side_tables(folder)
    if not args.quiet and not prompt_text:
        log(
            f"note: no prompt texts ({folder / 'items.csv'} with columns item_id, prompt); "
            "the prompt column of the tasks is empty"
        )
    if not args.quiet and not responses:
        log(
            f"note: no responses ({folder / 'responses.csv'} with columns item_id, system, "
            "response); the response columns of the tasks are empty"
        )
    rule = rule_from_args(args)
    if rule.family != DEFAULT_FAMILY:
        # the file's batch decides and serves the comparisons it has judgments of
        raise CliError(
            f"--family {rule.family} (and --pairs) is served with --project; with --data the "
            "batch serves the comparisons compared: name the pairs that matter with --targets"
        )
    request = RecommendRequest(
        size=args.size,
        seed=args.seed,
        rule=rule,
        targets=tuple(_pairs(args.targets)),
        adjacent=args.adjacent,
        tier=tuple(s.strip() for s in (args.tier or "").split(",") if s.strip()),
        burn_in=args.burn_in,
        max_per_cell=args.max_per_cell,
        annotator=args.annotator,
        parameterization=args.parameterization,
        draws=args.draws,
        question=str(parse_question(args.question)) if args.question else "",
    )
    try:
        return recommend_batch(
            judgments,
            request,
            prompt_text=prompt_text,
            responses=responses,
            log=None if args.quiet else log,
        )
    except ValueError as exc:
        raise CliError(exc.args[0]) from exc


def recommend_from_project(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Ask a running service for the next batch."""
    import httpx

    from services.cli.decisions import rule_from_args

    # the decision rule the batch serves, its family too (the service's defaults are the
    # same type's): the flags of `evalset decisions`, parsed by the same helper
    rule = rule_from_args(args)
    body: dict[str, Any] = {
        "size": args.size,
        "alpha": rule.alpha,
        "margin": rule.margin,
        "unit": rule.unit,
        "correction": rule.correction,
        "family": rule.family,
    }
    if rule.pairs:
        body["pairs"] = [list(p) for p in rule.pairs]
    if args.annotator:
        body["annotator_id"] = args.annotator
    if args.dimension:
        body["dimensions"] = args.dimension
    if args.question:
        raise CliError(
            "--question works with --data; a served project's next batch does not take a "
            "question yet (serve every open comparison, or name them with --targets)"
        )
    if args.targets:
        body["targets"] = [list(p) for p in _pairs(args.targets)]
    if args.idempotency_key:
        body["idempotency_key"] = args.idempotency_key
    url = f"{args.url.rstrip('/')}/projects/{args.project}/next-batch"
    token = args.token or os.environ.get("EVALSET_TOKEN")
    if not token:
        raise CliError("--project needs the project's token: --token or EVALSET_TOKEN")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        response = httpx.post(url, json=body, headers=headers, timeout=60.0)
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach the service at {args.url}: {exc}") from exc
    if response.status_code >= 400:
        raise CliError(f"the service answered {response.status_code}: {response.text[:200]}")
    payload = response.json()
    if not args.quiet:
        log(f"lease {payload.get('lease_id')} expires at {payload.get('expires_at')}")
    # the texts, in display order, from the lease's tasks
    texts: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    lease_url = f"{args.url.rstrip('/')}/projects/{args.project}/leases/{payload['lease_id']}/tasks"
    try:
        tasks = httpx.get(lease_url, headers=headers, timeout=60.0)
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach the service at {args.url}: {exc}") from exc
    if tasks.status_code == 200:
        body_tasks = tasks.json()
        for t in body_tasks.get("tasks", []):
            texts[(t["item_id"], t["system_a"], t["system_b"], t["dimension"])] = t
        if body_tasks.get("incomplete") and not args.quiet:
            log(
                f"note: {len(body_tasks['incomplete'])} leased cells lack a registered prompt or "
                "response text (register them with POST /projects/P/prompts)"
            )
    elif not args.quiet:
        log(f"note: no texts for the lease (the service answered {tasks.status_code})")
    rows = []
    for k, cell in enumerate(payload.get("cells", [])):
        first = cell["system_a"] if cell["shown_first"] == "a" else cell["system_b"]
        second = cell["system_b"] if cell["shown_first"] == "a" else cell["system_a"]
        text = texts.get(
            (cell["item_id"], cell["system_a"], cell["system_b"], cell["dimension"]), {}
        )
        rows.append(
            {
                "task_id": f"t{k + 1:05d}",
                "item_id": cell["item_id"],
                "dimension": cell["dimension"],
                "prompt": text.get("prompt", ""),
                "system_first": first,
                "response_first": text.get("response_first", ""),
                "system_second": second,
                "response_second": text.get("response_second", ""),
                "system_a": cell["system_a"],
                "system_b": cell["system_b"],
                "shown_first": cell["shown_first"],
                "reason": cell.get("reason"),
                "needed": cell.get("needed"),
            }
        )
    return rows


def run_recommend(args: argparse.Namespace) -> int:
    if (args.data is None) == (args.project is None):
        raise CliError("give exactly one of --data FILE or --project P")
    if args.size <= 0:
        raise CliError("--size must be positive")
    rows = recommend_from_file(args) if args.data else recommend_from_project(args)
    emit(rows, args.format, columns=RECOMMEND_COLUMNS)
    return 0


# ------------------------------------------------------------------------ replay


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
    from adaptive.core.data import read_judgments
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
        plot_anytime(rows, args.plot, title=Path(args.data).parent.name)
    return 0


def _replay_with_judge(args: argparse.Namespace) -> int:
    """Human-only vs hybrid decisions on a human log and a judge's verdicts (adaptive.judge.hybrid)."""
    import polars as pl

    from adaptive.simulation.hybrid_replay import replay_files
    from evalset.hybrid import choose_judge, read_verdicts
    from services.cli.decisions import rule_from_args

    rule = rule_from_args(args)
    # the verdicts' one reader and the judge's choice, as every other door
    verdicts = read_verdicts(args.judge_data)
    name = choose_judge(verdicts["annotator_id"].to_list(), args.judge)
    rows = replay_files(
        args.data, verdicts.filter(pl.col("annotator_id") == name), seed=args.seed,
        seeds=args.seeds, alpha=rule.alpha, margin=rule.margin,
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


def plot_anytime(rows: list[dict[str, Any]], path: str, title: str = "") -> None:
    """Judgments until k comparisons are closed, one panel per dimension, one line per policy.

    A step is drawn only for the k that every seed reached (mean over seeds).
    """
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = list(dict.fromkeys(r["dimension"] for r in rows))
    fig, axes = plt.subplots(1, len(dims), figsize=(5.5 * len(dims), 4), squeeze=False)
    styles = {"adaptive": "-", "uniform": "--", "round_robin": "-.", "arena": ":"}
    for ax, dim in zip(axes[0], dims):
        for r in (r for r in rows if r["dimension"] == dim):
            # only the k every seed reached, so each point averages the same replays
            pts = [
                (c["judgments_mean"], c["closed"])
                for c in r["curve"]
                if c["judgments_mean"] and c["share_of_seeds"] == 1.0
            ]
            if pts:
                xs, y = zip(*pts)
                x = np.maximum.accumulate(np.asarray(xs))
                ax.step(
                    x,
                    y,
                    where="post",
                    linestyle=styles.get(r["policy"], "-"),
                    lw=1.8,
                    label=f"{r['policy']} (all closed/exhausted: {r['judgments_mean']:.0f})",
                )
        ax.set_title(f"{title} {dim} ({rows[0]['data']}, {rows[0]['unit']} unit)", fontsize=10)
        ax.set_xlabel("judgments used")
        ax.set_ylabel("comparisons closed")
        ax.set_ylim(0, max(r["comparisons"] for r in rows) + 0.5)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize=7, framealpha=0.9)
        else:
            ax.text(
                0.5,
                0.5,
                "no comparison closed in every replay",
                ha="center",
                transform=ax.transAxes,
            )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------- register


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "recommend",
        help="the next annotation batch: open comparisons only, closest to a decision first",
        description=(
            "Recommend the next batch of (prompt, system pair, dimension) tasks. With --data the "
            "judgments file is fitted here (fast path) and the batch written as one row per task "
            "with the prompt and both responses in display order (items.csv / responses.csv "
            "next to the file supply the texts). With --project a running service is asked "
            "(POST /projects/P/next-batch) and the batch is leased."
        ),
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--data", help="judgments file (CSV, JSONL or Parquet)")
    source.add_argument("--project", help="a served project id")
    add_map_arg(p)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="service URL (with --project)")
    p.add_argument("--token", help="the project's API token (default: $EVALSET_TOKEN)")
    p.add_argument("--idempotency-key", help="repeat a request safely (with --project)")
    p.add_argument("--size", type=int, required=True, help="tasks in the batch")
    p.add_argument("--annotator", help="never give this annotator a cell they already judged")
    p.add_argument("--dimension", action="append", help="only this dimension (repeatable)")
    p.add_argument("--targets", help="comparisons that matter: A:B,C:D (default: the undecided)")
    p.add_argument(
        "--question",
        help="serve only what can still change the campaign's answer: top-k:K, ranking, "
        "versus:REF,..., equivalence:A,B (with --data; docs/decisions.md, 'Questions')",
    )
    p.add_argument("--adjacent", action="store_true", help="target leaderboard neighbours")
    p.add_argument("--tier", help="target the comparisons within this tier: SYS1,SYS2,...")
    p.add_argument(
        "--burn-in",
        type=int,
        default=DEFAULT_BURN_IN,
        help=f"judgments every open comparison gets before the closest-first order "
        f"(default: {DEFAULT_BURN_IN})",
    )
    p.add_argument(
        "--max-per-cell",
        type=int,
        default=RecommendRequest.max_per_cell,
        help="tasks of one cell per batch (default: 1)",
    )
    add_rule_args(p, with_family=True)
    p.add_argument(
        "--parameterization",
        choices=["comparison", "system"],
        default=RecommendRequest.parameterization,
    )
    p.add_argument("--draws", type=int, default=DEFAULT_DRAWS, help="Laplace draws of the fit")
    p.add_argument("--format", choices=list(FORMATS), default="csv")
    p.add_argument("--seed", type=int, default=0, help="same data, request and seed: same batch")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run_recommend)

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
