"""An automatic judge's verdicts: validated batch ingestion (all or nothing, idempotent) and reads.

Verdicts have the judgments' schema and are checked by the same validator
(:func:`services.store.repository.batch_checks.check_judgment_fields`, hence
:mod:`services.store.validation`), with ``annotator_id`` naming the judge (required) and an
``inconsistent`` flag. They live in their own table: no human count, snapshot or human-only
decision ever reads them. A judge has one verdict per cell (dimension, prompt, pair of systems
either way round).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict

from sqlalchemy import Connection, func, select

from services.store import tables as t
from services.store.repository._common import (
    IngestResult,
    _chunks,
    _insert,
    lock_judgments,
    utcnow,
)
from services.store.repository.batch_checks import (
    Problem,
    check_catalogue,
    check_judgment_fields,
    collector,
    names_in,
    refuse,
)

#: one verdict as the service stores and lists it (in this order)
VERDICT_FIELDS = (
    "judgment_id",
    "item_id",
    "system_a",
    "system_b",
    "annotator_id",
    "winner",
    "dimension",
    "inconsistent",
)


class VerdictRow(TypedDict):
    seq: int
    judgment_id: str
    item_id: str
    system_a: str
    system_b: str
    annotator_id: str
    winner: str
    dimension: str
    inconsistent: bool


#: (judge, dimension, prompt, pair of systems either way round)
_Cell = tuple[str, str, str, frozenset[str]]


def _cell(r: dict[str, Any]) -> _Cell:
    return (
        r["annotator_id"],
        r["dimension"],
        r["item_id"],
        frozenset((r["system_a"], r["system_b"])),
    )


def add_verdicts(
    *,
    conn: Connection,
    project_id: str,
    verdicts: Sequence[dict[str, Any]],
    now: datetime | None = None,
    register_unknown: bool = False,
) -> IngestResult:
    """Append a batch of judge verdicts, all or nothing, idempotent by ``judgment_id``.

    ``register_unknown`` (bulk import) registers the systems, prompts and dimensions the
    batch names that the project does not have yet, as :func:`add_judgments` does.

    Raises:
        StoreError: ``validation_error`` (a bad id, winner or flag, a missing judge name) or
            ``invalid_batch`` (an unknown system, prompt or dimension, a system compared with
            itself, a ``judgment_id`` stored with another verdict, a second verdict of a judge
            on one cell), one problem per bad row; nothing was written.
    """
    now = now or utcnow()
    check_judgment_fields(verdicts)
    _check_verdict_fields(verdicts)
    lock_judgments(conn=conn, project_id=project_id)
    rows: list[dict[str, Any]] = [{k: v.get(k) for k in VERDICT_FIELDS} for v in verdicts]
    for r in rows:
        r["inconsistent"] = bool(r["inconsistent"])
    problems: list[dict[str, Any]] = []
    problem = collector(problems, rows)
    check_catalogue(conn, project_id, rows, problem, register_unknown=register_unknown, now=now)
    _check_not_humans(conn, project_id, rows, problem)
    existing, cells = _stored_verdicts(conn, project_id, rows)
    new_rows = _new_verdicts(rows, existing, cells, problem)
    refuse(problems, "invalid_batch", "problem(s)")
    last_seq = 0
    if new_rows:
        stmt = (
            _insert(conn, t.judge_verdicts)
            .on_conflict_do_nothing(index_elements=["project_id", "judgment_id"])
            .returning(t.judge_verdicts.c.seq)
        )
        params = [{**r, "project_id": project_id, "received_at": now} for r in new_rows]
        last_seq = max((int(s) for (s,) in conn.execute(stmt, params)), default=0)
    return IngestResult(
        inserted=len(new_rows),
        duplicates=len(rows) - len(new_rows),
        dimensions=tuple(sorted({r["dimension"] for r in new_rows})),
        last_seq=last_seq,
    )


def _check_verdict_fields(verdicts: Sequence[dict[str, Any]]) -> None:
    """Each verdict names its judge and has a true, false or missing ``inconsistent`` flag
    (before anything touches the database)."""
    problems: list[dict[str, Any]] = []
    for i, v in enumerate(verdicts):
        if not v.get("annotator_id"):
            problems.append(
                {
                    "row": i,
                    "judgment_id": v.get("judgment_id"),
                    "field": "annotator_id",
                    "message": "a verdict's annotator_id names its judge",
                }
            )
        if v.get("inconsistent") not in (None, True, False):
            problems.append(
                {
                    "row": i,
                    "judgment_id": v.get("judgment_id"),
                    "field": "inconsistent",
                    "message": "inconsistent must be true or false",
                }
            )
    refuse(problems, "validation_error", "invalid field(s)")


def _check_not_humans(
    conn: Connection, project_id: str, rows: Sequence[dict[str, Any]], problem: Problem
) -> None:
    """A name that judged as a human is not a judge's (judgments are never verdicts)."""
    names = {r["annotator_id"] for r in rows}
    humans = names_in(conn, t.judgments, project_id, names)
    humans |= names_in(conn, t.gold_judgments, project_id, names)
    for i, r in enumerate(rows):
        if r["annotator_id"] in humans:
            problem(
                i,
                "annotator_id",
                f"{r['annotator_id']!r} has human judgments in this project: name the "
                "automatic judge differently",
            )


def _stored_verdicts(
    conn: Connection, project_id: str, rows: Sequence[dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], dict[_Cell, str]]:
    """The stored verdicts the batch may meet: by ``judgment_id`` (those of the batch's
    prompts and ids), and the id of each judge's verdict per cell (of the batch's prompts)."""
    c = t.judge_verdicts.c
    existing: dict[str, dict[str, Any]] = {}
    cells: dict[_Cell, str] = {}
    for chunk in _chunks(sorted({r["item_id"] for r in rows})):
        for row in conn.execute(
            select(*[c[k] for k in VERDICT_FIELDS]).where(
                c.project_id == project_id, c.item_id.in_(chunk)
            )
        ):
            stored = row._asdict()
            existing[stored["judgment_id"]] = stored
            cells[_cell(stored)] = stored["judgment_id"]
    for chunk in _chunks([r["judgment_id"] for r in rows]):
        for row in conn.execute(
            select(*[c[k] for k in VERDICT_FIELDS]).where(
                c.project_id == project_id, c.judgment_id.in_(chunk)
            )
        ):
            existing[row.judgment_id] = row._asdict()
    return existing, cells


def _new_verdicts(
    rows: Sequence[dict[str, Any]],
    existing: dict[str, dict[str, Any]],
    cells: dict[_Cell, str],
    problem: Problem,
) -> list[dict[str, Any]]:
    """The verdicts not stored yet: a stored id must be a retry of the same verdict, and a
    judge gives one verdict per cell (``problem`` otherwise; ``existing`` and ``cells`` take
    the new ones in, so a repeat within the batch is caught too)."""
    new_rows = []
    for i, r in enumerate(rows):
        old = existing.get(r["judgment_id"])
        if old is not None:
            if old != r:
                differs = [k for k in VERDICT_FIELDS if old[k] != r[k]]
                problem(
                    i,
                    "judgment_id",
                    f"judgment_id {r['judgment_id']!r} was already stored "
                    f"with different {', '.join(differs)}; a verdict cannot be changed",
                )
            continue
        other = cells.get(_cell(r))
        if other is not None:
            problem(
                i,
                "item_id",
                f"judge {r['annotator_id']!r} already has a verdict on this "
                f"cell ({other!r}); a judge gives one verdict per cell",
            )
            continue
        cells[_cell(r)] = r["judgment_id"]
        existing[r["judgment_id"]] = r
        new_rows.append(r)
    return new_rows


def fetch_verdicts(
    *, conn: Connection, project_id: str, judge: str | None = None
) -> list[VerdictRow]:
    """The project's verdicts in arrival order (one judge's, if named)."""
    c = t.judge_verdicts.c
    stmt = (
        select(c.seq, *[c[k] for k in VERDICT_FIELDS])
        .where(c.project_id == project_id)
        .order_by(c.seq)
    )
    if judge is not None:
        stmt = stmt.where(c.annotator_id == judge)
    return [VerdictRow(**r._asdict()) for r in conn.execute(stmt)]  # type: ignore[typeddict-item]


def judge_counts(*, conn: Connection, project_id: str) -> dict[str, int]:
    """judge -> verdicts stored."""
    c = t.judge_verdicts.c
    rows = conn.execute(
        select(c.annotator_id, func.count())
        .where(c.project_id == project_id)
        .group_by(c.annotator_id)
    )
    return {str(j): int(n) for j, n in rows}


def last_verdict_seq(*, conn: Connection, project_id: str) -> int:
    """The newest verdict's sequence number (0: none)."""
    c = t.judge_verdicts.c
    return int(conn.scalar(select(func.max(c.seq)).where(c.project_id == project_id)) or 0)


def count_routes(*, conn: Connection, project_id: str) -> int:
    """The project's leases (each may hold cells the hybrid's routing chose)."""
    c = t.leases.c
    return int(
        conn.scalar(select(func.count()).select_from(t.leases).where(c.project_id == project_id))
        or 0
    )


def fetch_routes(*, conn: Connection, project_id: str) -> list[dict[str, Any]]:
    """Every leased cell the hybrid's routing chose, with the rates it was drawn with:
    ``lease_id, annotator_id, dimension, item_id, system_a, system_b, judge, rates`` (oldest lease
    first; expired leases too, since their judgments may still arrive)."""
    c = t.leases.c
    out = []
    rows = conn.execute(
        select(c.lease_id, c.annotator_id, c.cells)
        .where(c.project_id == project_id)
        .order_by(c.created_at)
    )
    for lease_id, annotator, cells in rows:
        for cell in cells or ():
            rates = cell.get("routing_rates")
            if rates is None:
                continue
            out.append(
                {
                    "lease_id": lease_id,
                    "annotator_id": annotator,
                    "dimension": cell["dimension"],
                    "item_id": cell["item_id"],
                    "system_a": cell["system_a"],
                    "system_b": cell["system_b"],
                    "judge": cell.get("judge", ""),
                    "rates": [float(x) for x in rates],
                }
            )
    return out


def cells_judged_by(
    *, conn: Connection, project_id: str, annotator_id: str
) -> set[tuple[str, str, frozenset[str]]]:
    """(dimension, item_id, {system_a, system_b}) of every human judgment of ``annotator_id``
    (none for an anonymous annotator)."""
    if not annotator_id:
        return set()
    c = t.judgments.c
    rows = conn.execute(
        select(c.dimension, c.item_id, c.system_a, c.system_b).where(
            c.project_id == project_id, c.annotator_id == annotator_id
        )
    )
    return {(d, i, frozenset((a, b))) for d, i, a, b in rows}
