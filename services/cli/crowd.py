"""``evalset crowd export`` and ``evalset crowd import``: a batch out to a crowd platform and back.

A batch is a task table: the output of ``evalset recommend --format csv`` (or
JSON), or a lease of a served project (``--project P --lease ID``). ``evalset crowd push``
and ``evalset crowd pull`` do the same with a running Label Studio, over its API.
See docs/crowd.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.cli.common import DefaultsHelp, log
from services.cli.errors import CliError

if TYPE_CHECKING:
    import polars as pl


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--project", help="a served project (with --lease)")
    p.add_argument("--lease", help="the lease id of a next-batch answer (with --project)")
    p.add_argument(
        "--url",
        default=os.environ.get("EVALSET_URL", "http://127.0.0.1:8000"),
        help="the service (default: $EVALSET_URL or %(default)s)",
    )
    p.add_argument("--token", help="the project's token (default: $EVALSET_TOKEN)")


def _request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    import httpx

    token = args.token or os.environ.get("EVALSET_TOKEN")
    if not token:
        raise CliError("--project needs the project's token: --token or EVALSET_TOKEN")
    url = f"{args.url.rstrip('/')}/projects/{args.project}{path}"
    try:
        response = httpx.request(
            method, url, headers={"Authorization": f"Bearer {token}"}, timeout=120.0, **kwargs
        )
    except httpx.HTTPError as exc:
        raise CliError(f"cannot reach the service at {args.url}: {exc}") from exc
    if response.status_code >= 400:
        raise CliError(f"the service answered {response.status_code}: {response.text[:300]}")
    return response.json()


def _tasks(args: argparse.Namespace) -> pl.DataFrame:
    import polars as pl

    from services.crowd import TASK_COLUMNS, normalize_tasks, read_tasks

    if (args.tasks is None) == (args.project is None):
        raise CliError("give exactly one of --tasks FILE or --project P --lease ID")
    if args.tasks:
        return read_tasks(args.tasks)
    lease = args.lease
    if not lease and getattr(args, "size", None):
        body = {"size": args.size, "lease_seconds": args.lease_seconds}
        if args.annotator:
            body["annotator_id"] = args.annotator
        if args.idempotency_key:
            body["idempotency_key"] = args.idempotency_key
        if args.targets:
            body["targets"] = [
                [a.strip(), b.strip()]
                for a, b in (p.split(":", 1) for p in args.targets.split(",") if ":" in p)
            ]
        batch = _request(args, "POST", "/next-batch", json=body)
        lease = batch["lease_id"]
        log(
            f"leased {len(batch['cells'])} cells until {batch['expires_at']}: lease {lease} "
            f"(import the results with --lease {lease})"
        )
    if not lease:
        raise CliError(
            "--project needs --lease ID (the lease_id of a next-batch answer) or --size N "
            "(lease a new batch)"
        )
    payload = _request(args, "GET", f"/leases/{lease}/tasks")
    for task in payload.get("incomplete", []):
        log(
            f"left out task {task['task_id']} ({task['item_id']}: {task['system_a']} vs "
            f"{task['system_b']}): no registered {', '.join(task['missing'])}"
        )
    if not payload["tasks"]:
        raise CliError(f"lease {args.lease}: no task has every text registered")
    frame = pl.DataFrame(payload["tasks"], schema={c: pl.Utf8 for c in TASK_COLUMNS})
    return normalize_tasks(frame, batch_id=payload["lease_id"])


def run_crowd_export(args: argparse.Namespace) -> int:
    from services.crowd import write_export

    tasks = _tasks(args)
    paths = write_export(tasks, args.platform, args.out, survey_format=args.survey_format)
    log(f"{tasks.height} tasks of batch {tasks['batch_id'][0]} for {args.platform}:")
    for p in paths:
        print(p)
    return 0


def run_crowd_import(args: argparse.Namespace) -> int:
    from evalset.files import csv_text, write_csv
    from services.crowd import read_results

    if args.project:
        if not args.lease:
            raise CliError("--project needs --lease ID")
        path = Path(args.results)
        if not path.exists():
            raise CliError(f"{path}: file not found")
        body = {"platform": args.platform, "content": path.read_text()}
        if path.suffix.lower() in (".jsonl", ".ndjson"):
            body["survey_format"] = "jsonl"
        result = _request(args, "POST", f"/leases/{args.lease}/results", json=body)
        print(json.dumps(result, indent=1))
        return 0
    tasks = _tasks(args)
    got = read_results(args.results, tasks, args.platform)
    log(
        f"{got.judgments.height} judgments from {got.num_rows} answers ({got.platform}); "
        f"duplicates {got.duplicates}; skipped {got.skipped or 'none'}; "
        f"{len(got.unanswered)} of {tasks.height} tasks unanswered"
    )
    timed = got.seconds["seconds"].drop_nulls().to_list()
    if timed:
        median = statistics.median(timed)
        log(f"time on task: median {median:.1f} s over {len(timed)} timed answers")
    if args.output:
        out = Path(args.output)
        if out.suffix.lower() == ".parquet":
            got.judgments.write_parquet(out)
        elif out.suffix.lower() in (".jsonl", ".ndjson"):
            got.judgments.write_ndjson(out)
        else:
            write_csv(got.judgments, out)
    else:
        sys.stdout.write(csv_text(got.judgments))
    return 0


def _label_studio(args: argparse.Namespace) -> Any:
    from services.crowd.labelstudio_api import TOKEN_ENV, LabelStudio, LabelStudioError

    try:  # the token comes from the flag or the environment and is never printed
        return LabelStudio(args.ls_url, args.ls_token or os.environ.get(TOKEN_ENV, ""))
    except LabelStudioError as exc:
        raise CliError(str(exc)) from exc


def run_crowd_push(args: argparse.Namespace) -> int:
    from services.crowd.labelstudio_api import LabelStudioError, push_tasks

    tasks = _tasks(args)
    title = args.ls_title or (
        f"evalset {args.project}" if args.project else f"evalset {tasks['batch_id'][0]}"
    )
    ls = _label_studio(args)
    try:
        got = push_tasks(ls, tasks, project_id=args.ls_project, title=title)
    except LabelStudioError as exc:
        raise CliError(str(exc)) from exc
    finally:
        ls.close()
    log(
        f"Label Studio project {got.project_id}{' (created)' if got.created else ''} at "
        f"{args.ls_url}: {got.imported} tasks of batch {tasks['batch_id'][0]} imported, "
        f"{got.already} there already (pull with --ls-project {got.project_id})"
    )
    print(json.dumps(got._asdict()))
    return 0


def run_crowd_pull(args: argparse.Namespace) -> int:
    from evalset.files import csv_text, write_csv
    from services.crowd.labelstudio_api import (
        LabelStudioError,
        export_by_lease,
        pull_export,
        pull_results,
    )

    ls = _label_studio(args)
    try:
        if not args.project:  # a batch file: read the answers here, like crowd import
            tasks = _tasks(args)
            got = pull_results(ls, args.ls_project, tasks)
        else:
            groups = export_by_lease(pull_export(ls, args.ls_project))
    except LabelStudioError as exc:
        raise CliError(str(exc)) from exc
    finally:
        ls.close()
    if not args.project:
        log(
            f"{got.judgments.height} judgments from {got.num_rows} annotations of Label Studio "
            f"project {args.ls_project}; skipped {got.skipped or 'none'}; "
            f"{len(got.unanswered)} of {tasks.height} tasks unanswered"
        )
        if args.output:
            write_csv(got.judgments, args.output)
        else:
            sys.stdout.write(csv_text(got.judgments))
        return 0
    if "" in groups:
        log(f"left out {len(groups.pop(''))} annotated tasks without a batch_id (not evalset's)")
    if args.lease:
        groups = {args.lease: groups.get(args.lease, [])}
    results = {}
    for lease, rows in groups.items():  # the file path's route: same checks, same ids
        body = {"platform": "labelstudio", "content": rows}
        results[lease] = got_lease = _request(args, "POST", f"/leases/{lease}/results", json=body)
        log(
            f"lease {lease}: {got_lease['accepted']} stored, {got_lease['duplicates']} "
            f"already stored, {len(got_lease['unanswered'])} tasks unanswered"
        )
    print(json.dumps(results, indent=1))
    return 0


def _ls_args(p: argparse.ArgumentParser) -> None:
    from services.crowd.labelstudio_api import TOKEN_ENV, URL_ENV

    p.add_argument(
        "--ls-url",
        default=os.environ.get(URL_ENV, "http://localhost:8080"),
        help=f"the Label Studio server (default: ${URL_ENV} or %(default)s)",
    )
    p.add_argument("--ls-token", help=f"a Label Studio API token (default: ${TOKEN_ENV})")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from services.crowd import PLATFORMS

    crowd = sub.add_parser(
        "crowd",
        help="export a batch to a crowd platform and import its results",
        description=__doc__,
        formatter_class=DefaultsHelp,
    )
    inner = crowd.add_subparsers(dest="crowd_command", metavar="ACTION")
    inner.required = True

    ex = inner.add_parser(
        "export",
        help="write a batch's tasks for Label Studio, MTurk or a survey (plus tasks.csv)",
        formatter_class=DefaultsHelp,
    )
    ex.add_argument("--platform", required=True, choices=PLATFORMS)
    ex.add_argument("--tasks", help="the batch: evalset recommend output (CSV, JSON, JSONL)")
    _client_args(ex)
    ex.add_argument(
        "--size", type=int, help="with --project and no --lease: lease a new batch of N tasks"
    )
    ex.add_argument("--annotator", help="the new lease's annotator (e.g. the platform's name)")
    ex.add_argument(
        "--lease-seconds", type=float, default=86400.0, help="how long the new lease holds"
    )
    ex.add_argument("--idempotency-key", help="repeat the new lease request safely")
    ex.add_argument(
        "--targets", metavar="A:B,C:D", help="the new lease: spend on these system pairs only"
    )
    ex.add_argument("-o", "--out", default="crowd_batch", help="folder to write into")
    ex.add_argument(
        "--survey-format", choices=("csv", "jsonl"), default="csv", help="survey task file"
    )
    ex.set_defaults(func=run_crowd_export)
    _register_import(inner)
    _register_push(inner)
    _register_pull(inner)


def _register_import(inner: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from services.crowd import PLATFORMS

    im = inner.add_parser(
        "import",
        help="read a platform's results back as judgments (mapped to a/b through the batch)",
        formatter_class=DefaultsHelp,
    )
    im.add_argument("results", help="MTurk results CSV, Label Studio JSON export, survey CSV")
    im.add_argument("--platform", choices=PLATFORMS, help="default: guessed from the file")
    im.add_argument("--tasks", help="the batch's tasks.csv (written by crowd export)")
    _client_args(im)
    im.add_argument(
        "-o", "--output", help="judgments file (.csv, .jsonl, .parquet; default: CSV on stdout)"
    )
    im.set_defaults(func=run_crowd_import)


def _register_push(inner: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    push = inner.add_parser(
        "push",
        help="import a batch's tasks into a running Label Studio (its API; project made if absent)",
        formatter_class=DefaultsHelp,
    )
    push.add_argument("--platform", choices=("labelstudio",), default="labelstudio")
    push.add_argument("--tasks", help="the batch: evalset recommend output (CSV, JSON, JSONL)")
    _client_args(push)
    push.add_argument(
        "--size", type=int, help="with --project and no --lease: lease a new batch of N tasks"
    )
    push.add_argument("--annotator", help="the new lease's annotator")
    push.add_argument(
        "--lease-seconds", type=float, default=86400.0, help="how long the new lease holds"
    )
    push.add_argument("--idempotency-key", help="repeat the new lease request safely")
    push.add_argument("--targets", metavar="A:B,C:D", help="the new lease: these pairs only")
    _ls_args(push)
    push.add_argument("--ls-project", type=int, help="an existing Label Studio project id")
    push.add_argument(
        "--ls-title", help="the project found or created (default: 'evalset <project or batch>')"
    )
    push.set_defaults(func=run_crowd_push)


def _register_pull(inner: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pull = inner.add_parser(
        "pull",
        help="read a Label Studio project's annotations back as judgments (stored once)",
        formatter_class=DefaultsHelp,
    )
    pull.add_argument("--platform", choices=("labelstudio",), default="labelstudio")
    pull.add_argument("--tasks", help="the batch's tasks.csv (without --project)")
    _client_args(pull)
    _ls_args(pull)
    pull.add_argument("--ls-project", type=int, required=True, help="the Label Studio project")
    pull.add_argument("-o", "--output", help="judgments CSV without --project (default: stdout)")
    pull.set_defaults(func=run_crowd_pull)
