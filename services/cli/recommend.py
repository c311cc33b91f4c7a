"""``evalset recommend`` (the next annotation batch) and ``evalset replay`` (effort vs outcome;
its command: :mod:`services.cli.replay`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from adaptive.recommend.state import DEFAULT_BURN_IN
from adaptive.stopping.rule import DEFAULT_FAMILY
from evalset.plan import DEFAULT_DRAWS, RecommendRequest
from services.cli.common import FORMATS, add_map_arg, emit, log
from services.cli.decisions import add_rule_args
from services.cli.errors import CliError
from services.cli.replay import register_replay
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
    from evalset.batch import recommend_batch, side_tables
    from evalset.files import read_dimensions
    from evalset.plan import RecommendRequest
    from services.cli.decisions import parse_question, rule_from_args

    judgments = read_dimensions(args.data, args.dimension)
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


def _project_body(args: argparse.Namespace) -> dict[str, Any]:
    """The next-batch request of ``--project``: the size, the rule and what to serve."""
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
    return body


def recommend_from_project(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Ask a running service for the next batch."""
    import httpx

    body = _project_body(args)
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
    texts = _lease_texts(args, headers, payload["lease_id"])
    return _task_rows(payload.get("cells", []), texts)


def _lease_texts(
    args: argparse.Namespace, headers: dict[str, str], lease_id: str
) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """The texts, in display order, from the lease's tasks, by (item, a, b, dimension)."""
    import httpx

    texts: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    lease_url = f"{args.url.rstrip('/')}/projects/{args.project}/leases/{lease_id}/tasks"
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
    return texts


def _task_rows(
    cells: list[dict[str, Any]], texts: dict[tuple[str, str, str, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """One task per leased cell, its systems and texts in display order."""
    rows = []
    for k, cell in enumerate(cells):
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


# ---------------------------------------------------------------------- register


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_recommend(sub)
    register_replay(sub)


def _register_recommend(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
