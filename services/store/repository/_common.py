"""What every part of the repository shares: errors, results, row checks, time, SQL helpers."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Table, select
from sqlalchemy.dialects import postgresql, sqlite

from services.store import tables as t
from services.store.validation import row_problems

#: chunk size for IN (...) lookups and multi-row inserts (SQLite's variable limit)
CHUNK = 500


class StoreError(Exception):
    """A request the store refuses; ``code`` is stable, ``message`` says why."""

    def __init__(
        self, code: str, message: str, *, problems: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.problems = problems or []


@dataclass(frozen=True)
class IngestResult:
    """What a batch of judgments did to the store."""

    inserted: int
    duplicates: int
    dimensions: tuple[str, ...] = field(default_factory=tuple)
    last_seq: int = 0  # the highest sequence number written (0 if none)


def check_rows(rows: Sequence[dict[str, Any]], what: str, **fields: Any) -> None:
    """Refuse rows with a bad id or text (:mod:`services.store.validation`), naming row and field.

    Raises:
        StoreError: ``validation_error``; nothing was written.
    """
    problems = row_problems(rows, **fields)
    if problems:
        rows_hit = sorted({p["row"] for p in problems})
        raise StoreError(
            "validation_error",
            f"{len(problems)} invalid field(s) in {what} (row(s) {rows_hit[:10]}); "
            "nothing was stored",
            problems=problems,
        )


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """Datetimes read back from SQLite have no zone; they were written in UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def hash_token(token: str) -> str:
    """The stored form of an API token: its SHA-256 (tokens are 256-bit random, no salt needed)."""
    return hashlib.sha256(token.encode()).hexdigest()


def _insert(conn: Connection, table: Table) -> Any:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def _chunks(values: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def lock_judgments(*, conn: Connection, project_id: str) -> None:
    """Be the project's one judgment writer until the transaction ends (in a write transaction).

    One writer per project at a time: sequence numbers are then committed in order, so a
    reader tailing by ``seq`` never sees a later batch before an earlier one (PostgreSQL
    hands out numbers at insert, not at commit), and a judgment_id (or an idempotency key)
    raced by two batches is checked against the stored one. SQLite's BEGIN IMMEDIATE
    already serialises. FOR NO KEY UPDATE: inserts that reference the project (snapshots,
    leases) go on.
    """
    conn.execute(
        select(t.projects.c.project_id)
        .where(t.projects.c.project_id == project_id)
        .with_for_update(key_share=True)
    )
