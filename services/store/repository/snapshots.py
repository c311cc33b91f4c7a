"""Posterior snapshots: saved per project and dimension, read back, pruned."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import IntegrityError

from services.store import tables as t
from services.store.repository._common import (
    StoreError,
    as_utc,
    utcnow,
)
from services.store.repository.leases import _transaction_lock
from services.store.repository.rows import SnapshotMeta


def save_snapshot(
    *,
    conn: Connection,
    project_id: str,
    dimension: str,
    num_judgments: int,
    last_seq: int,
    method: str,
    fit_seconds: float,
    diagnostics: dict[str, Any],
    payload: bytes,
    created_at: datetime | None = None,
) -> int | None:
    """Store an immutable snapshot under the next version number of its dimension.

    Returns the new version, or None when the snapshot is *superseded*: it covers
    older judgments (a lower ``last_seq``) than the newest stored snapshot of the same
    method, and is not stored. With several replicas fitting one project, a slower
    replica's fit must not turn that method's answers back in time.
    """
    # one snapshot writer per dimension at a time
    _transaction_lock(conn, f"evalset-snapshot:{project_id}:{dimension}")
    for _ in range(20):
        newest = conn.execute(
            select(t.snapshots.c.version, t.snapshots.c.last_seq)
            .where(
                t.snapshots.c.project_id == project_id,
                t.snapshots.c.dimension == dimension,
                t.snapshots.c.method == method,
            )
            .order_by(t.snapshots.c.version.desc())
            .limit(1)
        ).first()
        if newest is not None and int(newest.last_seq) > last_seq:
            return None
        version = 1 + int(
            conn.scalar(
                select(func.coalesce(func.max(t.snapshots.c.version), 0)).where(
                    t.snapshots.c.project_id == project_id, t.snapshots.c.dimension == dimension
                )
            )
            or 0
        )
        try:
            with conn.begin_nested():
                conn.execute(
                    t.snapshots.insert().values(
                        project_id=project_id,
                        dimension=dimension,
                        version=version,
                        num_judgments=num_judgments,
                        last_seq=last_seq,
                        method=method,
                        created_at=created_at or utcnow(),
                        fit_seconds=fit_seconds,
                        diagnostics=diagnostics,
                        payload=payload,
                    )
                )
            return version
        except IntegrityError:  # another replica took this version number
            continue
    raise StoreError("snapshot_conflict", "could not allocate a snapshot version")


_SNAPSHOT_META = (
    t.snapshots.c.project_id,
    t.snapshots.c.dimension,
    t.snapshots.c.version,
    t.snapshots.c.num_judgments,
    t.snapshots.c.last_seq,
    t.snapshots.c.method,
    t.snapshots.c.created_at,
    t.snapshots.c.fit_seconds,
    t.snapshots.c.diagnostics,
)


def _meta(row: Any) -> SnapshotMeta:
    out = cast(SnapshotMeta, row._asdict())
    out["created_at"] = as_utc(out["created_at"])
    return out


def latest_snapshot_meta(
    *, conn: Connection, project_id: str, dimension: str, method: str | None = None
) -> SnapshotMeta | None:
    """Metadata (no payload) of the newest snapshot of a dimension, or None."""
    stmt = (
        select(*_SNAPSHOT_META)
        .where(t.snapshots.c.project_id == project_id, t.snapshots.c.dimension == dimension)
        .order_by(t.snapshots.c.version.desc())
        .limit(1)
    )
    if method is not None:
        stmt = stmt.where(t.snapshots.c.method == method)
    row = conn.execute(stmt).first()
    return None if row is None else _meta(row)


def snapshot_payload(*, conn: Connection, project_id: str, dimension: str, version: int) -> bytes:
    payload = conn.scalar(
        select(t.snapshots.c.payload).where(
            t.snapshots.c.project_id == project_id,
            t.snapshots.c.dimension == dimension,
            t.snapshots.c.version == version,
        )
    )
    if payload is None:
        raise StoreError("snapshot_not_found", f"no snapshot version {version} of {dimension!r}")
    return bytes(payload)


def prune_snapshots(
    *, conn: Connection, project_id: str, dimension: str, keep_fast: int = 10
) -> int:
    """Delete fast snapshots older than the newest ``keep_fast`` (full NUTS ones are kept)."""
    versions = list(
        conn.scalars(
            select(t.snapshots.c.version)
            .where(
                t.snapshots.c.project_id == project_id,
                t.snapshots.c.dimension == dimension,
                t.snapshots.c.method != "nuts",
            )
            .order_by(t.snapshots.c.version.desc())
            .offset(keep_fast)
        )
    )
    if not versions:
        return 0
    conn.execute(
        t.snapshots.delete().where(
            t.snapshots.c.project_id == project_id,
            t.snapshots.c.dimension == dimension,
            t.snapshots.c.version.in_(versions),
        )
    )
    return len(versions)


def list_snapshots(*, conn: Connection, project_id: str, limit: int = 100) -> list[SnapshotMeta]:
    rows = conn.execute(
        select(*_SNAPSHOT_META)
        .where(t.snapshots.c.project_id == project_id)
        .order_by(t.snapshots.c.dimension, t.snapshots.c.version.desc())
        .limit(limit)
    )
    return [_meta(r) for r in rows]
