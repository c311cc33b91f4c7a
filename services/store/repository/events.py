"""The re-estimation event log of each project (refits, their outcomes, rejections)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Connection, func, select

from services.store import tables as t
from services.store.repository._common import (
    as_utc,
)
from services.store.repository.rows import EventRow


def add_events(*, conn: Connection, events: Sequence[dict[str, Any]]) -> None:
    """Append re-estimation events (``project_id``, ``dimension``, ``kind``, ``method``, ...)."""
    if events:
        conn.execute(t.events.insert(), list(events))


def list_events(
    *, conn: Connection, project_id: str, after_seq: int = 0, limit: int = 200
) -> list[EventRow]:
    """The project's events after ``after_seq``, oldest first."""
    rows = conn.execute(
        select(t.events)
        .where(t.events.c.project_id == project_id, t.events.c.seq > after_seq)
        .order_by(t.events.c.seq)
        .limit(limit)
    )
    out = []
    for r in rows:
        d = cast(EventRow, r._asdict())
        d["created_at"] = as_utc(d["created_at"])
        out.append(d)
    return out


def latest_event_seq(*, conn: Connection, project_id: str) -> int:
    return int(
        conn.scalar(select(func.max(t.events.c.seq)).where(t.events.c.project_id == project_id))
        or 0
    )


def prune_events(*, conn: Connection, project_id: str, keep: int = 10_000) -> None:
    """Keep the newest ``keep`` events of a project."""
    newest = latest_event_seq(conn=conn, project_id=project_id)
    if newest > keep:
        conn.execute(
            t.events.delete().where(
                t.events.c.project_id == project_id, t.events.c.seq <= newest - keep
            )
        )
