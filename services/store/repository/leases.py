"""Leases of the next-batch recommender: cells handed out and not yet judged."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import cast

from sqlalchemy import Connection, and_, select, text

from services.lru import LRU
from services.store import LEASE_CELLS_KEY
from services.store import tables as t
from services.store.repository._common import (
    _insert,
    as_utc,
    check_rows,
    utcnow,
)
from services.store.repository.rows import LeasedCellRow, LeaseRow


def _transaction_lock(conn: Connection, key: str) -> None:
    """A named lock held until the transaction ends (PostgreSQL advisory lock; SQLite's
    write transactions, ``BEGIN IMMEDIATE``, are serialised already)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": key})


def lock_leases(*, conn: Connection, project_id: str) -> None:
    """Hold the project's lease lock until the transaction ends (call in a write transaction).

    Checking the active leases and storing a new lease under this lock means two
    requests never lease one cell at once.
    """
    _transaction_lock(conn, f"evalset-lease:{project_id}")


def create_lease(
    *,
    conn: Connection,
    project_id: str,
    idempotency_key: str,
    annotator_id: str,
    cells: Sequence[LeasedCellRow],
    expires_at: datetime,
    now: datetime | None = None,
    lease_id: str | None = None,
    request_hash: str | None = None,
) -> LeaseRow:
    """Lease cells to an annotator; the same ``idempotency_key`` returns the first lease."""
    check_rows(
        [{"idempotency_key": idempotency_key, "annotator_id": annotator_id}],
        "the lease",
        ids=("idempotency_key",),
        optional_ids=("annotator_id",),
    )
    row = {
        "lease_id": lease_id or uuid.uuid4().hex,
        "project_id": project_id,
        "idempotency_key": idempotency_key,
        "annotator_id": annotator_id,
        "cells": list(cells),
        "created_at": now or utcnow(),
        "expires_at": expires_at,
        "request_hash": request_hash,
    }
    stmt = (
        _insert(conn, t.leases)
        .values(**row)
        .on_conflict_do_nothing(index_elements=["project_id", "idempotency_key"])
    )
    conn.execute(stmt)
    lease = get_lease_by_key(conn=conn, project_id=project_id, idempotency_key=idempotency_key)
    assert lease is not None
    return lease


def get_lease_by_key(*, conn: Connection, project_id: str, idempotency_key: str) -> LeaseRow | None:
    row = conn.execute(
        select(t.leases).where(
            t.leases.c.project_id == project_id, t.leases.c.idempotency_key == idempotency_key
        )
    ).first()
    if row is None:
        return None
    out = cast(LeaseRow, row._asdict())
    out["created_at"] = as_utc(out["created_at"])
    out["expires_at"] = as_utc(out["expires_at"])
    return out


def active_leased_cells(*, conn: Connection, project_id: str, now: datetime) -> list[LeasedCellRow]:
    """Cells of every lease of the project that has not expired at ``now`` (flattened).

    Only the active leases' ids are read each time; the cells of a lease not seen
    before are read once and kept.
    """
    c = t.leases.c
    ids = [
        lease_id
        for (lease_id,) in conn.execute(
            select(c.lease_id).where(and_(c.project_id == project_id, c.expires_at > now))
        )
    ]
    # a lease's cells never change once stored, and a next-batch request reads every active
    # lease twice: the store's connections carry its cache of them (Store.read, Store.write)
    kept: LRU[str, list[LeasedCellRow]] | None = conn.info.get(LEASE_CELLS_KEY)
    have = {i: kept.get(i) if kept is not None else None for i in ids}
    missing = [i for i, value in have.items() if value is None]
    for start in range(0, len(missing), 500):  # bounded IN lists (SQLite's variable limit)
        part = missing[start : start + 500]
        for lease_id, value in conn.execute(
            select(c.lease_id, c.cells).where(c.lease_id.in_(part))
        ):
            have[lease_id] = value
            if kept is not None:
                kept[lease_id] = value
    cells: list[LeasedCellRow] = []
    for i in ids:
        cells.extend(have[i] or ())
    return cells
