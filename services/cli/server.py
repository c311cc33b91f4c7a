"""``evalset serve``, ``evalset import`` and ``evalset export``: the service and its store.

``import`` reads a judgments file through the same validation as every other
command (:func:`evalset.files.read_judgments`) and writes it in one transaction,
idempotently: rows without a ``judgment_id`` get one derived from their content
(and their occurrence among identical rows), so importing a file twice stores it
once. A running server notices imported judgments within a few seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.cli.common import add_map_arg, log
from services.cli.errors import CliError

if TYPE_CHECKING:
    from services.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_serve(sub)
    _register_token(sub)
    _register_import(sub)
    _register_export(sub)


def _register_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the HTTP API (OpenAPI docs at /docs)")
    serve.add_argument("--host", help="interface (default: EVALSET_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: EVALSET_PORT or 8000)")
    _add_db(serve)
    serve.add_argument(
        "--no-streaming", action="store_true", help="do not run background re-estimation"
    )
    serve.add_argument("--no-nuts", action="store_true", help="fast updates only, no NUTS refits")
    serve.add_argument(
        "--worker",
        choices=["thread", "process"],
        help="re-estimate in a thread of the API process or in a process of its own "
        "(default: EVALSET_WORKER, else process)",
    )
    serve.add_argument(
        "--open",
        action="store_true",
        help="serve without an admin token (EVALSET_ADMIN_TOKEN): anyone who reaches the "
        "service can create projects; without it (or EVALSET_OPEN=true) serve refuses to start",
    )
    serve.add_argument("--log-level", default="warning")
    serve.set_defaults(func=run_serve)


def _register_token(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tok = sub.add_parser(
        "token", help="create, list, rotate or revoke a project's API tokens (in the store)"
    )
    tok.add_argument("action", choices=["create", "list", "rotate", "revoke"])
    tok.add_argument("--project", required=True, help="project id")
    tok.add_argument("--token-id", help="the token to rotate or revoke (from `token list`)")
    tok.add_argument("--label", default="", help="label of a new token (default: empty)")
    tok.add_argument(
        "--scope",
        choices=["full", "write"],
        default="full",
        help="a new token's scope: full (the whole project) or write (posts judgments and "
        "results, reads nothing: for a webhook or an annotation tool); rotate keeps the scope",
    )
    _add_db(tok)
    tok.add_argument("--format", choices=["table", "json"], default="table")
    tok.set_defaults(func=run_token)


def _register_import(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    imp = sub.add_parser(
        "import", help="bulk-load a judgments file (CSV, TSV, JSON, JSONL or Parquet)"
    )
    imp.add_argument(
        "file",
        help="judgments: the common schema, a Chatbot Arena or MT-Bench log, PandaLM-style "
        "records, a Label Studio export or MTurk results (other columns: --map)",
    )
    add_map_arg(imp, dest="file")
    imp.add_argument("--project", required=True, help="project id")
    _add_db(imp)
    imp.add_argument(
        "--create", action="store_true", help="create the project if missing (prints its token)"
    )
    imp.add_argument(
        "--strict",
        action="store_true",
        help="refuse systems, prompts and dimensions not registered yet (as the API does); "
        "by default the file's ones are registered",
    )
    imp.add_argument(
        "--verdicts",
        action="store_true",
        help="the file holds an automatic judge's verdicts (annotator_id naming the judge, "
        "optional inconsistent column): stored apart, never as human judgments (docs/hybrid.md)",
    )
    imp.add_argument("--format", choices=["table", "json"], default="table")
    imp.set_defaults(func=run_judgments_import)


def _register_export(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    exp = sub.add_parser("export", help="write all judgments (or judge verdicts) of a project")
    exp.add_argument("--project", required=True, help="project id")
    exp.add_argument(
        "--verdicts",
        action="store_true",
        help="the automatic judges' verdicts (with inconsistent), as evalset import --verdicts "
        "reads them, instead of the human judgments",
    )
    _add_db(exp)
    exp.add_argument(
        "--output", "-o", help="file (.csv, .jsonl or .parquet); default: CSV on stdout"
    )
    exp.set_defaults(func=run_judgments_export)


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        help="store URL (default: EVALSET_DATABASE_URL or sqlite:///evalset.db)",
    )


def _settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    from services.settings import Settings

    values: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    if getattr(args, "database_url", None):
        values["database_url"] = args.database_url
    return Settings(**values)


def run_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from services.api import create_app

    overrides: dict[str, object] = {"host": args.host, "port": args.port}
    if args.no_streaming:
        overrides["streaming"] = False
    if args.no_nuts:
        overrides["nuts"] = False
    if args.worker:
        overrides["worker"] = args.worker
    elif "EVALSET_WORKER" not in os.environ:
        # a served campaign re-estimates in its own process: fits and compiles then never
        # hold the request threads' GIL (docs/service.md, load measurements)
        overrides["worker"] = "process"
    if args.open:
        overrides["open"] = True
    settings = _settings(args, **overrides)
    from services.api.limits import describe

    if not settings.admin_token and settings.create_project_per_minute is None:
        # open to anyone: creations are anonymous, so they are limited per client address
        settings = settings.model_copy(update={"create_project_per_minute": 30.0})
    if not settings.admin_token and not settings.open:
        raise CliError(
            "no admin token: set EVALSET_ADMIN_TOKEN (creating a project will need it), "
            "or pass --open to let anyone who reaches the service create projects"
        )
    log(f"evalset serve: http://{settings.host}:{settings.port} (docs at /docs)")
    if not settings.admin_token:
        log(
            "evalset serve: OPEN: no admin token, anyone who reaches this service can create "
            "projects (--open / EVALSET_OPEN)"
        )
    log(f"evalset serve: limits: {describe(settings)}")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=10,
        # X-Forwarded-For/-Proto name the client only when a configured proxy sent them:
        # otherwise any peer could pick the address its requests are limited under
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=settings.forwarded_allow_ips or None,
    )
    return 0


def derive_judgment_ids(rows: list[dict[str, Any]]) -> list[str]:
    """Content-derived ids: the same rows always get the same ids (re-import is a no-op)."""
    seen: dict[str, int] = {}
    ids = []
    for r in rows:
        content = "\x1f".join(
            str(r.get(c) or "")
            for c in ("item_id", "system_a", "system_b", "annotator_id", "winner", "dimension")
        )
        k = seen.get(content, 0)
        seen[content] = k + 1
        ids.append("imp-" + hashlib.sha1(f"{content}\x1e{k}".encode()).hexdigest()[:24])
    return ids


def run_judgments_import(args: argparse.Namespace) -> int:
    from evalset.files import read_judgments
    from services.store import Store
    from services.store import repository as repo

    if args.verdicts:
        from evalset.hybrid import read_verdicts

        frame = read_verdicts(args.file)
    else:
        frame = read_judgments(args.file)
        if "lease_id" in frame.columns:
            # leases are not exported: a lease_id names a next batch of the project it came
            # from, which the store here does not have (and would refuse the rows for)
            if frame["lease_id"].drop_nulls().len():
                log("evalset import: lease_id left out (a next batch of the exporting project)")
            frame = frame.drop("lease_id")
    rows = frame.drop("row").to_dicts()
    if "judgment_id" not in frame.columns:
        for r, jid in zip(rows, derive_judgment_ids(rows)):
            r["judgment_id"] = jid
    settings = _settings(args)
    store = Store(settings.database_url, synchronous=settings.sqlite_synchronous)
    store.migrate()
    token = None
    try:
        with store.write() as conn:
            token, result, total = _import_rows(args, conn, frame, rows)
    except repo.StoreError as exc:
        raise CliError(f"{args.file}: {exc.message}: {_where(args.file, frame, exc)}") from None
    finally:
        store.dispose()
    out = {
        "project": args.project,
        "file": str(args.file),
        "rows": len(rows),
        "inserted": result.inserted,
        "duplicates": result.duplicates,
        ("num_verdicts" if args.verdicts else "num_judgments"): total,
    }
    if token:
        out["token"] = token
    if args.format == "json":
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


def _where(path: str, frame: Any, exc: Any) -> str:
    """The store's problems at the file's lines (its rows are the batch's, 0-based)."""
    from evalset.files import record_lines

    lines = record_lines(path) if str(path).lower().endswith(tuple(SUFFIXES)) else None
    records = frame["row"].to_list()
    shown = []
    for p in exc.problems[:5]:
        if p.get("row") is None or not 0 <= p["row"] < len(records):
            shown.append(f"{p['field']}: {p['message']}")
            continue
        record = records[p["row"]]
        where = f"line {lines[record - 1]}" if lines else f"row {record}"
        shown.append(f"{where}, column {p['field']!r}: {p['message']}")
    return "; ".join(shown)


SUFFIXES = (".csv", ".tsv", ".json", ".jsonl", ".ndjson")


def _import_rows(
    args: argparse.Namespace, conn: Any, frame: Any, rows: list[dict[str, Any]]
) -> tuple[str | None, Any, int]:
    """Create the project if asked and store the rows; (token or None, result, total)."""
    from services.store import repository as repo

    token = None
    if repo.get_project(conn=conn, project_id=args.project) is None:
        if not args.create:
            raise CliError(f"no project {args.project!r} (use --create to create it)")
        repo.create_project(
            conn=conn,
            project_id=args.project,
            name=args.project,
            dimensions=[{"dimension_id": d} for d in sorted(set(frame["dimension"]))],
        )
        token = repo.create_token(conn=conn, project_id=args.project, label="import")
    # the store checks every id and text (services.store.validation) as the API does
    if args.verdicts:
        from services.store.repository.verdicts import add_verdicts, judge_counts

        result = add_verdicts(
            conn=conn, project_id=args.project, verdicts=rows, register_unknown=not args.strict
        )
        return token, result, sum(judge_counts(conn=conn, project_id=args.project).values())
    result = repo.add_judgments(
        conn=conn,
        project_id=args.project,
        judgments=rows,
        register_unknown=not args.strict,
    )
    if result.inserted:  # a leading replica listening on PostgreSQL re-estimates at once
        repo.announce_judgments(conn=conn, project_id=args.project)
    total = repo.count_judgments(conn=conn, project_id=args.project)
    return token, result, total


def run_token(args: argparse.Namespace) -> int:
    """Tokens straight in the store (no server needed): a replica stops accepting a revoked
    token within ``EVALSET_TOKEN_CACHE_SECONDS``."""
    from services.store import Store
    from services.store import repository as repo

    settings = _settings(args)
    store = Store(settings.database_url, synchronous=settings.sqlite_synchronous)
    store.migrate()
    out: list[dict[str, Any]] = []
    try:
        with store.write() as conn:
            if repo.get_project(conn=conn, project_id=args.project) is None:
                raise CliError(f"no project {args.project!r}")
            if args.action == "list":
                out = [
                    {**r, "created_at": r["created_at"].isoformat()}
                    for r in repo.list_tokens(conn=conn, project_id=args.project)
                ]
            elif args.action == "create":
                token = repo.create_token(
                    conn=conn, project_id=args.project, label=args.label, scope=args.scope
                )
                tid = repo.token_id(repo.hash_token(token))
                out = [{"token_id": tid, "label": args.label, "scope": args.scope, "token": token}]
            else:
                if not args.token_id:
                    raise CliError(f"token {args.action} needs --token-id (see `token list`)")
                found = repo.revoke_token(
                    conn=conn, project_id=args.project, token_id=args.token_id
                )
                if found is None:
                    raise CliError(f"no token {args.token_id!r} in project {args.project!r}")
                old, before = found
                if before is not None and args.action != "revoke":
                    raise CliError(
                        f"token {args.token_id!r} was revoked at {before.isoformat()}; "
                        "create a new one with `evalset token create`"
                    )
                if args.action == "revoke":
                    out = [{"token_id": args.token_id, "label": old["label"], "revoked": True}]
                else:
                    token = repo.create_token(
                        conn=conn, project_id=args.project, label=old["label"], scope=old["scope"]
                    )
                    tid = repo.token_id(repo.hash_token(token))
                    out = [
                        {
                            "token_id": tid,
                            "label": old["label"],
                            "scope": old["scope"],
                            "token": token,
                            "replaces": args.token_id,
                        }
                    ]
    except repo.StoreError as exc:
        raise CliError(f"{exc.message}: {exc.problems[:3]}") from None
    finally:
        store.dispose()
    if args.format == "json":
        print(json.dumps(out))
    else:
        for row in out:
            print("  ".join(f"{k}: {v}" for k, v in row.items()))
    if args.action in ("revoke", "rotate"):
        log(
            f"evalset token: running replicas refuse the old token within "
            f"{settings.token_cache_seconds:g} s"
        )
    return 0


def run_judgments_export(args: argparse.Namespace) -> int:
    import polars as pl

    from adaptive.core.data import JUDGMENT_FIELDS
    from evalset.files import csv_text, write_csv
    from services.store import Store
    from services.store import repository as repo
    from services.store.repository.verdicts import VERDICT_FIELDS, fetch_verdicts

    settings = _settings(args)
    store = Store(settings.database_url)
    try:
        with store.read() as conn:
            if repo.get_project(conn=conn, project_id=args.project) is None:
                raise CliError(f"no project {args.project!r}")
            rows: Sequence[Mapping[str, Any]] = (
                fetch_verdicts(conn=conn, project_id=args.project)
                if args.verdicts
                else repo.fetch_judgments(conn=conn, project_id=args.project)
            )
    finally:
        store.dispose()
    fields = VERDICT_FIELDS if args.verdicts else JUDGMENT_FIELDS
    schema = {c: pl.Boolean if c == "inconsistent" else pl.Utf8 for c in fields}
    frame = pl.DataFrame([{c: r[c] for c in fields} for r in rows], schema=schema)
    if not args.output:
        sys.stdout.write(csv_text(frame))
        return 0
    path = Path(args.output)
    suffix = path.suffix.lower()
    if suffix == ".csv":  # for people: formula-leading text escaped (JSONL, Parquet raw)
        write_csv(frame, path)
    elif suffix in (".jsonl", ".ndjson"):
        frame.write_ndjson(path)
    elif suffix in (".parquet", ".pq"):
        frame.write_parquet(path)
    else:
        raise CliError(f"unknown output type {suffix!r}; expected .csv, .jsonl or .parquet")
    log(f"evalset export: {frame.height} {'verdicts' if args.verdicts else 'judgments'} -> {path}")
    return 0
