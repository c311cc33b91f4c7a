"""The catalogue of a project: systems, prompts and dimensions, upserted idempotently."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, func, select

from services.store import tables as t
from services.store.repository._common import (
    _chunks,
    _insert,
    check_rows,
    utcnow,
)
from services.store.repository.rows import DimensionRow, PromptRow, SystemRow


def _upsert(
    conn: Connection, table: Table, key: str, rows: list[dict[str, Any]], update: Sequence[str]
) -> int:
    """Insert rows, updating ``update`` columns of existing keys; returns how many were new."""
    if not rows:
        return 0
    # one row per key, the last one winning (PostgreSQL refuses to upsert a row twice)
    rows = list({r[key]: r for r in rows}.values())
    project_id = rows[0]["project_id"]
    # first, so that this write holds the project's row the way a judgment batch does
    # (lock_judgments) and the two always take their locks in the same order
    conn.execute(
        t.projects.update()
        .where(t.projects.c.project_id == project_id)
        .values(catalogue_version=t.projects.c.catalogue_version + 1)
    )
    ids = [r[key] for r in rows]
    existing = _known(conn, table, key, project_id, set(ids))
    for chunk in _chunks(rows, 200):
        stmt = _insert(conn, table).values(list(chunk))
        stmt = stmt.on_conflict_do_update(
            index_elements=["project_id", key], set_={c: stmt.excluded[c] for c in update}
        )
        conn.execute(stmt)
    return len(set(ids) - existing)


def _upsert_described(
    conn: Connection,
    table: Table,
    key: str,
    project_id: str,
    entries: Sequence[dict[str, Any]],
    now: datetime | None,
) -> int:
    """Register entries of ``key`` and ``description`` (systems, dimensions)."""
    now = now or utcnow()
    check_rows(entries, f"the {table.name}", ids=(key,), texts=("description",))
    rows = [
        {
            "project_id": project_id,
            key: e[key],
            "description": e.get("description", ""),
            "created_at": now,
        }
        for e in entries
    ]
    return _upsert(conn, table, key, rows, ["description"])


def upsert_systems(
    *,
    conn: Connection,
    project_id: str,
    systems: Sequence[dict[str, Any]],
    now: datetime | None = None,
) -> int:
    """Register systems (``system_id``, ``description``); existing ones are updated."""
    return _upsert_described(conn, t.systems, "system_id", project_id, systems, now)


def upsert_prompts(
    *,
    conn: Connection,
    project_id: str,
    prompts: Sequence[dict[str, Any]],
    now: datetime | None = None,
) -> int:
    """Register prompts (``prompt_id``, ``text``, ``responses`` by system id)."""
    now = now or utcnow()
    check_rows(
        prompts, "the prompts", ids=("prompt_id",), texts=("text",), text_maps=("responses",)
    )
    rows = [
        {
            "project_id": project_id,
            "prompt_id": p["prompt_id"],
            "text": p.get("text", ""),
            "responses": dict(p.get("responses") or {}),
            "created_at": now,
        }
        for p in prompts
    ]
    return _upsert(conn, t.prompts, "prompt_id", rows, ["text", "responses"])


def upsert_dimensions(
    *,
    conn: Connection,
    project_id: str,
    dimensions: Sequence[dict[str, Any]],
    now: datetime | None = None,
) -> int:
    """Register dimensions (``dimension_id``, ``description``)."""
    return _upsert_described(conn, t.dimensions, "dimension_id", project_id, dimensions, now)


def list_systems(*, conn: Connection, project_id: str) -> list[SystemRow]:
    rows = conn.execute(
        select(t.systems.c.system_id, t.systems.c.description)
        .where(t.systems.c.project_id == project_id)
        .order_by(t.systems.c.system_id)
    )
    return [SystemRow(system_id=r.system_id, description=r.description) for r in rows]


def list_dimensions(*, conn: Connection, project_id: str) -> list[DimensionRow]:
    rows = conn.execute(
        select(t.dimensions.c.dimension_id, t.dimensions.c.description)
        .where(t.dimensions.c.project_id == project_id)
        .order_by(t.dimensions.c.dimension_id)
    )
    return [DimensionRow(dimension_id=r.dimension_id, description=r.description) for r in rows]


def list_prompts(
    *, conn: Connection, project_id: str, offset: int = 0, limit: int | None = None
) -> list[PromptRow]:
    stmt = (
        select(t.prompts.c.prompt_id, t.prompts.c.text, t.prompts.c.responses)
        .where(t.prompts.c.project_id == project_id)
        .order_by(t.prompts.c.prompt_id)
        .offset(offset)
    )
    if limit is not None:
        stmt = stmt.limit(limit)
    return [
        PromptRow(prompt_id=r.prompt_id, text=r.text, responses=r.responses)
        for r in conn.execute(stmt)
    ]


def catalogue_version(*, conn: Connection, project_id: str) -> int:
    """A number that changes with every write to the project's systems, prompts or
    dimensions (0 for a project that has none; -1 for an unknown project)."""
    found = conn.scalar(
        select(t.projects.c.catalogue_version).where(t.projects.c.project_id == project_id)
    )
    return -1 if found is None else int(found)


def count_prompts(*, conn: Connection, project_id: str) -> int:
    return int(conn.scalar(select(func.count()).where(t.prompts.c.project_id == project_id)) or 0)


def _known(conn: Connection, table: Table, key: str, project_id: str, ids: set[str]) -> set[str]:
    found: set[str] = set()
    values = sorted(ids)
    for chunk in _chunks(values):
        found.update(
            conn.scalars(
                select(table.c[key]).where(
                    table.c.project_id == project_id, table.c[key].in_(chunk)
                )
            )
        )
    return found
