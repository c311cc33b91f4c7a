"""Judgments: validated batch ingestion (all or nothing, idempotent) and reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, cast

import polars as pl
from sqlalchemy import Connection, Table, func, select, text

from adaptive.core.data import JUDGMENT_FIELDS, screen_problems
from services.store import tables as t
from services.store.repository._common import (
    IngestResult,
    StoreError,
    _chunks,
    _insert,
    utcnow,
)
from services.store.repository._common import (
    lock_judgments as lock_judgments,  # moved there (gold cells take it too); named here still
)
from services.store.repository.catalogue import (
    _known,
    upsert_dimensions,
    upsert_prompts,
    upsert_systems,
)
from services.store.repository.gold import add_gold_judgments, gold_keys, is_gold
from services.store.repository.rows import JudgmentRow
from services.store.validation import row_problems


def _refuse(problems: list[dict[str, Any]], code: str, what: str) -> None:
    """Raise ``code`` with the problems in row order, if there are any: nothing is stored."""
    if problems:
        problems.sort(key=lambda p: p["row"])
        raise StoreError(
            code,
            f"{len(problems)} {what} in the batch; nothing was stored",
            problems=problems,
        )


def _check_judgments(judgments: Sequence[dict[str, Any]]) -> None:
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
    _refuse(problems, "validation_error", "invalid field(s)")


def check_catalogue(
    conn: Connection,
    project_id: str,
    rows: Sequence[dict[str, Any]],
    problem: Callable[[int, str, str], None],
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
    problem: Callable[[int, str, str], None],
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
    problem: Callable[[int, str, str], None],
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


def get_batch_by_key(
    *, conn: Connection, project_id: str, idempotency_key: str
) -> tuple[str, dict[str, Any]] | None:
    """(request hash, stored answer) of the batch first posted with this key, or None."""
    b = t.judgment_batches.c
    row = conn.execute(
        select(b.request_hash, b.response).where(
            b.project_id == project_id, b.idempotency_key == idempotency_key
        )
    ).first()
    return None if row is None else (str(row.request_hash), dict(row.response))


def save_batch_key(
    *,
    conn: Connection,
    project_id: str,
    idempotency_key: str,
    request_hash: str,
    response: dict[str, Any],
    now: datetime | None = None,
) -> None:
    """Bind a key to its batch and answer (with :func:`lock_judgments` held)."""
    conn.execute(
        t.judgment_batches.insert().values(
            project_id=project_id,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
            response=response,
            created_at=now or utcnow(),
        )
    )


def add_judgments(
    *,
    conn: Connection,
    project_id: str,
    judgments: Sequence[dict[str, Any]],
    now: datetime | None = None,
    register_unknown: bool = False,
) -> IngestResult:
    """Append a batch of judgments, all or nothing, idempotent by ``judgment_id``.

    Rows must already be well-formed (``adaptive.core.data.validate_judgments`` or the
    API schema checked winners and self-comparisons). This checks what needs the
    store: systems, prompts and dimensions must be registered (unless
    ``register_unknown``, used by bulk import), and a ``judgment_id`` seen before
    must carry the same judgment (a retry), not a different one.

    Raises:
        StoreError: ``invalid_batch`` with one problem per bad row (0-based ``row``);
            nothing was written.
    """
    now = now or utcnow()
    _check_judgments(judgments)
    lock_judgments(conn=conn, project_id=project_id)
    rows: list[dict[str, Any]] = [{k: j.get(k) for k in JUDGMENT_FIELDS} for j in judgments]
    for r in rows:
        # an empty optional field is a missing one (CSV round trips)
        r["shown_first"] = r["shown_first"] or None
        r["timestamp"] = r["timestamp"] or None
        r["screen_id"] = r["screen_id"] or None
        r["lease_id"] = r["lease_id"] or None
        r["annotator_id"] = r["annotator_id"] or ""
    problems: list[dict[str, Any]] = []

    def problem(i: int, column: str, message: str) -> None:
        problems.append(
            {"row": i, "judgment_id": rows[i]["judgment_id"], "field": column, "message": message}
        )

    check_catalogue(conn, project_id, rows, problem, register_unknown=register_unknown, now=now)
    check_screens(conn, project_id, rows, problem)
    check_leases(conn, project_id, rows, problem)
    # an automatic judge's verdicts are never human judgments (judge_verdicts, 0005)
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

    ids = [r["judgment_id"] for r in rows]
    # one id twice in a batch could land in both tables (a gold and an ordinary cell), and
    # POST .../judgments refuses it too: refused here for every entry point
    first: dict[str, int] = {}
    for i, x in enumerate(ids):
        if first.setdefault(x, i) != i:
            problem(i, "judgment_id", f"duplicate judgment_id {x!r} (first in row {first[x]})")
    existing: dict[str, dict[str, Any]] = {}
    # a judgment_id is one judgment whichever table holds it (gold cells' are apart)
    for table in (t.judgments, t.gold_judgments):
        cols = [table.c[k] for k in JUDGMENT_FIELDS]
        for chunk in _chunks(ids):
            for row in conn.execute(
                select(*cols).where(
                    table.c.project_id == project_id, table.c.judgment_id.in_(chunk)
                )
            ):
                existing[row.judgment_id] = row._asdict()
    gold = gold_keys(conn=conn, project_id=project_id)
    new_rows: list[dict[str, Any]] = []
    new_gold: list[dict[str, Any]] = []
    for i, r in enumerate(rows):
        old = existing.get(r["judgment_id"])
        if old is None:
            cell = (r["dimension"], r["item_id"], r["system_a"], r["system_b"])
            (new_gold if gold and is_gold(gold, *cell) else new_rows).append(r)
            continue
        # a judgment stored before 0007 has neither: its retry may name them (kept as stored)
        later = {k: old[k] if old[k] is None else r[k] for k in ("screen_id", "lease_id")}
        if old != {**r, **later}:
            differs = [k for k in JUDGMENT_FIELDS if old[k] != {**r, **later}[k]]
            problem(
                i,
                "judgment_id",
                f"judgment_id {r['judgment_id']!r} was already stored with different "
                f"{', '.join(differs)}; a judgment cannot be changed",
            )
    _refuse(problems, "invalid_batch", "problem(s)")
    inserted = 0
    last_seq = 0
    if new_rows or new_gold:
        annotators = sorted({r["annotator_id"] for r in new_rows + new_gold})
        # one constant statement each, executed with many parameter sets: SQLAlchemy
        # compiles it once per process ("insertmanyvalues" batches the rows, RETURNING
        # included), where a .values([...]) of N rows was compiled anew for every batch
        conn.execute(
            _insert(conn, t.annotators).on_conflict_do_nothing(),
            [{"project_id": project_id, "annotator_id": a, "created_at": now} for a in annotators],
        )
        stmt = (
            _insert(conn, t.judgments)
            .on_conflict_do_nothing(index_elements=["project_id", "judgment_id"])
            .returning(t.judgments.c.seq)
        )
        params = [{**r, "project_id": project_id, "received_at": now} for r in new_rows]
        seqs = [int(s) for (s,) in conn.execute(stmt, params)] if params else []
        inserted = len(seqs)
        last_seq = max(seqs, default=0)
        # judgments of gold cells: apart, read by no decision or fit (repository.gold)
        inserted += add_gold_judgments(conn=conn, project_id=project_id, rows=new_gold, now=now)
    return IngestResult(
        inserted=inserted,
        duplicates=len(rows) - inserted,
        dimensions=tuple(sorted({r["dimension"] for r in new_rows})),
        last_seq=last_seq,
    )


#: PostgreSQL channel on which a stored batch names its project (wakes the leading replica)
JUDGMENTS_CHANNEL = "evalset_judgments"


def announce_judgments(*, conn: Connection, project_id: str) -> None:
    """Tell listening replicas (at commit) that the project has new judgments; PostgreSQL only."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            text("SELECT pg_notify(:channel, :project)"),
            {"channel": JUDGMENTS_CHANNEL, "project": project_id},
        )


def count_judgments(
    *, conn: Connection, project_id: str, dimension: str | None = None, after_seq: int = 0
) -> int:
    stmt = (
        select(func.count()).select_from(t.judgments).where(t.judgments.c.project_id == project_id)
    )
    if after_seq:
        stmt = stmt.where(t.judgments.c.seq > after_seq)
    if dimension is not None:
        stmt = stmt.where(t.judgments.c.dimension == dimension)
    return int(conn.scalar(stmt) or 0)


def judgment_counts_by_dimension(
    *, conn: Connection, project_id: str
) -> dict[str, tuple[int, int]]:
    """dimension -> (number of judgments, last seq)."""
    rows = conn.execute(
        select(t.judgments.c.dimension, func.count(), func.max(t.judgments.c.seq))
        .where(t.judgments.c.project_id == project_id)
        .group_by(t.judgments.c.dimension)
    )
    return {d: (int(n), int(s)) for d, n, s in rows}


def fetch_judgments(
    *,
    conn: Connection,
    project_id: str,
    dimension: str | None = None,
    after_seq: int = 0,
    limit: int | None = None,
) -> list[JudgmentRow]:
    """Judgments in arrival order (with ``seq``), optionally after a sequence number."""
    cols = [t.judgments.c.seq] + [t.judgments.c[k] for k in JUDGMENT_FIELDS]
    stmt = (
        select(*cols)
        .where(t.judgments.c.project_id == project_id, t.judgments.c.seq > after_seq)
        .order_by(t.judgments.c.seq)
    )
    if dimension is not None:
        stmt = stmt.where(t.judgments.c.dimension == dimension)
    if limit is not None:
        stmt = stmt.limit(limit)
    return [cast(JudgmentRow, r._asdict()) for r in conn.execute(stmt)]


def fetch_judgment_columns(
    *, conn: Connection, project_id: str, dimension: str, after_seq: int = 0
) -> tuple[list[tuple[Any, ...]], int]:
    """Rows (seq, item_id, system_a, system_b, annotator_id, winner, screen_id, shown_first)
    after ``after_seq``, fast."""
    c = t.judgments.c
    rows = conn.execute(
        select(
            c.seq,
            c.item_id,
            c.system_a,
            c.system_b,
            c.annotator_id,
            c.winner,
            c.screen_id,
            c.shown_first,
        )
        .where(c.project_id == project_id, c.dimension == dimension, c.seq > after_seq)
        .order_by(c.seq)
    ).all()
    last = int(rows[-1][0]) if rows else after_seq
    return [tuple(r) for r in rows], last


def list_annotators(*, conn: Connection, project_id: str) -> list[str]:
    return list(
        conn.scalars(
            select(t.annotators.c.annotator_id)
            .where(t.annotators.c.project_id == project_id)
            .order_by(t.annotators.c.annotator_id)
        )
    )
