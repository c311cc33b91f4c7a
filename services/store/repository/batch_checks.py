"""The checks of a batch of judgments or verdicts, before it is stored: each row's fields, then
what needs the store (its catalogue, screens, leases and annotators). Each check that needs
the store reports through ``problem(row, column, message)`` (:func:`collector`), so one batch
collects every problem before :func:`refuse` refuses it whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import polars as pl
from sqlalchemy import Connection, Table, select

from adaptive.core.data import screen_problems
from services.store import tables as t
from services.store.repository._common import StoreError, _chunks
from services.store.repository.catalogue import (
    _known,
    upsert_dimensions,
    upsert_prompts,
    upsert_systems,
)
from services.store.validation import row_problems

#: ``problem(row, column, message)``: one reason the batch is refused, at a 0-based row
Problem = Callable[[int, str, str], None]


def collector(problems: list[dict[str, Any]], rows: Sequence[dict[str, Any]]) -> Problem:
    """The ``problem`` callback the checks report to: appends to ``problems``, naming the
    row's ``judgment_id``."""

    def problem(i: int, column: str, message: str) -> None:
        problems.append(
            {"row": i, "judgment_id": rows[i]["judgment_id"], "field": column, "message": message}
        )

    return problem


def refuse(problems: list[dict[str, Any]], code: str, what: str) -> None:
    """Raise ``code`` with the problems in row order, if there are any: nothing is stored."""
    if problems:
        problems.sort(key=lambda p: p["row"])
        raise StoreError(
            code,
            f"{len(problems)} {what} in the batch; nothing was stored",
            problems=problems,
        )


def check_judgment_fields(judgments: Sequence[dict[str, Any]]) -> None:
    """Ids, texts and enumerations of every row (before anything touches the database)."""
    problems = row_problems(
        judgments,
        ids=("judgment_id", "item_id", "system_a", "system_b", "dimension"),
        optional_ids=("annotator_id", "timestamp", "screen_id", "lease_id"),
        key="judgment_id",
    )
    bad_fields = {(p["row"], p["field"]) for p in problems}
    for i, j in enumerate(judgments):
        jid = j.get("judgment_id") if (i, "judgment_id") not in bad_fields else None
        if j.get("winner") not in ("a", "b", "tie"):
            problems.append(
                {
                    "row": i,
                    "judgment_id": jid,
                    "field": "winner",
                    "message": f"winner must be a, b or tie (got {j.get('winner')!r})",
                }
            )
        if j.get("shown_first") not in (None, "", "a", "b"):
            problems.append(
                {
                    "row": i,
                    "judgment_id": jid,
                    "field": "shown_first",
                    "message": f"shown_first must be a or b (got {j.get('shown_first')!r})",
                }
            )
    refuse(problems, "validation_error", "invalid field(s)")


def check_catalogue(
    conn: Connection,
    project_id: str,
    rows: Sequence[dict[str, Any]],
    problem: Problem,
    *,
    register_unknown: bool,
    now: datetime,
) -> None:
    """Each row's systems, prompt and dimension registered (registers those missing with
    ``register_unknown``, bulk import), and no system compared with itself; ``problem(row,
    column, message)`` for each that is not. Judgments and verdicts alike."""
    systems_used: set[str] = {r["system_a"] for r in rows} | {r["system_b"] for r in rows}
    prompts_used: set[str] = {r["item_id"] for r in rows}
    dims_used: set[str] = {r["dimension"] for r in rows}
    if register_unknown:
        for kind, table, key, used in (
            ("systems", t.systems, "system_id", systems_used),
            ("prompts", t.prompts, "prompt_id", prompts_used),
            ("dimensions", t.dimensions, "dimension_id", dims_used),
        ):
            missing = used - _known(conn, table, key, project_id, used)
            entries = [{key: m} for m in sorted(missing)]
            if entries and kind == "systems":
                upsert_systems(conn=conn, project_id=project_id, systems=entries, now=now)
            elif entries and kind == "prompts":
                upsert_prompts(conn=conn, project_id=project_id, prompts=entries, now=now)
            elif entries:
                upsert_dimensions(conn=conn, project_id=project_id, dimensions=entries, now=now)
    known_systems = _known(conn, t.systems, "system_id", project_id, systems_used)
    known_prompts = _known(conn, t.prompts, "prompt_id", project_id, prompts_used)
    known_dims = _known(conn, t.dimensions, "dimension_id", project_id, dims_used)
    for i, r in enumerate(rows):
        for column in ("system_a", "system_b"):
            if r[column] not in known_systems:
                problem(i, column, f"unknown system {r[column]!r}; register it first")
        if r["item_id"] not in known_prompts:
            problem(i, "item_id", f"unknown prompt {r['item_id']!r}; register it first")
        if r["dimension"] not in known_dims:
            problem(i, "dimension", f"unknown dimension {r['dimension']!r}; register it first")
        if r["system_a"] == r["system_b"]:
            problem(i, "system_b", "a system compared with itself")


def check_screens(
    conn: Connection,
    project_id: str,
    rows: Sequence[dict[str, Any]],
    problem: Problem,
) -> None:
    """The rows of each ranked screen share its prompt, annotator and dimension and hold
    each pair of systems once (:func:`adaptive.core.data.screen_problems`, the files' check),
    in the batch and together with the screen's rows stored before (a screen's pairs may
    arrive in several batches; a retried judgment is not a second one)."""
    screens = sorted({r["screen_id"] for r in rows if r["screen_id"]})
    if not screens:
        return
    c = t.judgments.c
    stored: list[dict[str, Any]] = []
    for chunk in _chunks(screens):
        stored += [
            r._asdict()
            for r in conn.execute(
                select(
                    c.judgment_id,
                    c.screen_id,
                    c.item_id,
                    c.system_a,
                    c.system_b,
                    c.annotator_id,
                    c.dimension,
                )
                .where(c.project_id == project_id, c.screen_id.in_(chunk))
                .order_by(c.seq)
            )
        ]
    ids = {r["judgment_id"] for r in rows}
    # stored rows first (negative rows: their problems are the new rows')
    columns = ["screen_id", "item_id", "system_a", "system_b", "annotator_id", "dimension"]
    frame = pl.DataFrame(
        [
            {"row": -1 - i, **{k: s[k] for k in columns}}
            for i, s in enumerate(r for r in stored if r["judgment_id"] not in ids)
        ]
        + [{"row": i, **{k: r[k] for k in columns}} for i, r in enumerate(rows) if r["screen_id"]],
        schema={"row": pl.Int64, **dict.fromkeys(columns, pl.Utf8)},
    )
    for p in screen_problems(frame):
        if p.row >= 0:
            message = f"got {p.value!r}, expected {p.expected}"
            if " first row, -" in message:  # the screen's first row is a stored judgment
                message = message.split(" (screen_id's first row")[0] + " (its stored rows)"
            problem(p.row, p.column, message)


def check_leases(
    conn: Connection,
    project_id: str,
    rows: Sequence[dict[str, Any]],
    problem: Problem,
) -> None:
    """Each row's ``lease_id`` names a lease of the project that served the row's cell (its
    dimension, prompt and pair, in either order)."""
    leases = sorted({r["lease_id"] for r in rows if r["lease_id"]})
    if not leases:
        return
    c = t.leases.c
    served: dict[str, set[tuple[str, str, frozenset[str]]]] = {}
    for chunk in _chunks(leases):
        for lease_id, cells in conn.execute(
            select(c.lease_id, c.cells).where(c.project_id == project_id, c.lease_id.in_(chunk))
        ):
            served[lease_id] = {
                (x["dimension"], x["item_id"], frozenset((x["system_a"], x["system_b"])))
                for x in cells or ()
            }
    for i, r in enumerate(rows):
        lease = r["lease_id"]
        if not lease:
            continue
        if lease not in served:
            problem(i, "lease_id", f"unknown lease {lease!r} in this project")
        elif (r["dimension"], r["item_id"], frozenset((r["system_a"], r["system_b"]))) not in (
            served[lease]
        ):
            problem(
                i,
                "lease_id",
                f"lease {lease!r} did not serve this cell ({r['item_id']!r}, "
                f"{r['system_a']!r} vs {r['system_b']!r}, {r['dimension']!r})",
            )


def names_in(conn: Connection, table: Table, project_id: str, names: set[str]) -> set[str]:
    """Those of ``names`` that ``table`` (judgments or judge_verdicts) has as an annotator."""
    found: set[str] = set()
    for chunk in _chunks(sorted(names)):
        found.update(
            conn.scalars(
                select(table.c.annotator_id)
                .where(table.c.project_id == project_id, table.c.annotator_id.in_(chunk))
                .distinct()
            )
        )
    return found


def check_not_judges(
    conn: Connection, project_id: str, rows: Sequence[dict[str, Any]], problem: Problem
) -> None:
    """No human judgment names an automatic judge of the project (an annotator with verdicts):
    its verdicts are never human judgments (judge_verdicts, 0005)."""
    judges = names_in(conn, t.judge_verdicts, project_id, {r["annotator_id"] for r in rows} - {""})
    for i, r in enumerate(rows):
        if r["annotator_id"] in judges:
            problem(
                i,
                "annotator_id",
                f"{r['annotator_id']!r} is an automatic judge of this project (it has verdicts): "
                "its verdicts go to the judge's verdicts (POST .../judge-verdicts, evalset "
                "import --verdicts), never among the human judgments",
            )


def check_repeated_ids(rows: Sequence[dict[str, Any]], problem: Problem) -> None:
    """Each ``judgment_id`` once in the batch: one id twice could land in both tables (a gold
    and an ordinary cell), and POST .../judgments refuses it too, so it is refused here for
    every entry point."""
    first: dict[str, int] = {}
    for i, r in enumerate(rows):
        x = r["judgment_id"]
        if first.setdefault(x, i) != i:
            problem(i, "judgment_id", f"duplicate judgment_id {x!r} (first in row {first[x]})")
