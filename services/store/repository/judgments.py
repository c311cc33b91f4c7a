"""Judgments: validated batch ingestion (all or nothing, idempotent) and reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, func, select, text

from adaptive.core.data import JUDGMENT_FIELDS
from services.store import tables as t
from services.store.repository._common import (
    IngestResult,
    _chunks,
    _insert,
    utcnow,
)
from services.store.repository._common import (
    lock_judgments as lock_judgments,  # moved there (gold cells take it too); named here still
)
from services.store.repository.batch_checks import (
    Problem,
    check_catalogue,
    check_judgment_fields,
    check_leases,
    check_not_judges,
    check_repeated_ids,
    check_screens,
    collector,
    refuse,
)
from services.store.repository.gold import GoldKey, add_gold_judgments, gold_keys, is_gold
from services.store.repository.rows import JudgmentRow


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
    check_judgment_fields(judgments)
    lock_judgments(conn=conn, project_id=project_id)
    rows = _judgment_rows(judgments)
    problems: list[dict[str, Any]] = []
    problem = collector(problems, rows)
    check_catalogue(conn, project_id, rows, problem, register_unknown=register_unknown, now=now)
    check_screens(conn, project_id, rows, problem)
    check_leases(conn, project_id, rows, problem)
    check_not_judges(conn, project_id, rows, problem)
    check_repeated_ids(rows, problem)
    existing = _stored_judgments(conn, project_id, [r["judgment_id"] for r in rows])
    gold = gold_keys(conn=conn, project_id=project_id)
    new_rows, new_gold = _new_judgments(rows, existing, gold, problem)
    refuse(problems, "invalid_batch", "problem(s)")
    inserted, last_seq = _insert_judgments(conn, project_id, new_rows, new_gold, now)
    return IngestResult(
        inserted=inserted,
        duplicates=len(rows) - inserted,
        dimensions=tuple(sorted({r["dimension"] for r in new_rows})),
        last_seq=last_seq,
    )


def _judgment_rows(judgments: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The batch's rows in the stored columns; an empty optional field is a missing one
    (CSV round trips)."""
    rows: list[dict[str, Any]] = [{k: j.get(k) for k in JUDGMENT_FIELDS} for j in judgments]
    for r in rows:
        r["shown_first"] = r["shown_first"] or None
        r["timestamp"] = r["timestamp"] or None
        r["screen_id"] = r["screen_id"] or None
        r["lease_id"] = r["lease_id"] or None
        r["annotator_id"] = r["annotator_id"] or ""
    return rows


def _stored_judgments(
    conn: Connection, project_id: str, ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """The stored judgments of ``ids``, by id: a judgment_id is one judgment whichever table
    holds it (gold cells' are apart)."""
    existing: dict[str, dict[str, Any]] = {}
    for table in (t.judgments, t.gold_judgments):
        cols = [table.c[k] for k in JUDGMENT_FIELDS]
        for chunk in _chunks(ids):
            for row in conn.execute(
                select(*cols).where(
                    table.c.project_id == project_id, table.c.judgment_id.in_(chunk)
                )
            ):
                existing[row.judgment_id] = row._asdict()
    return existing


def _new_judgments(
    rows: Sequence[dict[str, Any]],
    existing: dict[str, dict[str, Any]],
    gold: set[GoldKey],
    problem: Problem,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows not stored yet, ordinary and of gold cells; a stored id must be a retry of
    the same judgment (``problem`` otherwise)."""
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
    return new_rows, new_gold


def _insert_judgments(
    conn: Connection,
    project_id: str,
    new_rows: Sequence[dict[str, Any]],
    new_gold: Sequence[dict[str, Any]],
    now: datetime,
) -> tuple[int, int]:
    """Store the new rows (their annotators first); returns (rows inserted, highest ``seq``
    of the ordinary ones, 0 if none)."""
    if not (new_rows or new_gold):
        return 0, 0
    annotators = sorted({r["annotator_id"] for r in [*new_rows, *new_gold]})
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
    # judgments of gold cells: apart, read by no decision or fit (repository.gold)
    gold = add_gold_judgments(conn=conn, project_id=project_id, rows=new_gold, now=now)
    return len(seqs) + gold, max(seqs, default=0)


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
