"""Keyword-only functions over the store's tables; each takes the connection as ``conn``.

Functions that write expect to run inside :meth:`services.store.Store.write`, so
that a caller's whole request is one transaction.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Table, and_, func, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from services.store import tables as t
from services.store.validation import row_problems

#: columns of a judgment as the common schema names them (adaptive.data)
JUDGMENT_FIELDS: tuple[str, ...] = (
    "judgment_id",
    "item_id",
    "system_a",
    "system_b",
    "annotator_id",
    "winner",
    "dimension",
    "shown_first",
    "timestamp",
)
#: chunk size for IN (...) lookups and multi-row inserts (SQLite's variable limit)
CHUNK = 500


class StoreError(Exception):
    """A request the store refuses; ``code`` is stable, ``message`` says why."""

    def __init__(self, code: str, message: str, *, problems: list[dict] | None = None) -> None:
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


def check_rows(rows: Sequence[dict], what: str, **fields: Any) -> None:
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


# ---------------------------------------------------------------- projects, tokens


def create_project(
    *,
    conn: Connection,
    project_id: str,
    name: str,
    description: str = "",
    dimensions: Sequence[dict] = (),
    now: datetime | None = None,
) -> dict:
    """Create a project and its dimensions; ``project_exists`` if the id is taken."""
    now = now or utcnow()
    check_rows(
        [{"project_id": project_id, "name": name, "description": description}],
        "the project",
        ids=("project_id",),
        optional_ids=("name",),
        texts=("description",),
    )
    row = {"project_id": project_id, "name": name, "description": description, "created_at": now}
    stmt = (
        _insert(conn, t.projects)
        .values(**row)
        .on_conflict_do_nothing()
        .returning(t.projects.c.project_id)
    )
    # rowcount is not reliable for INSERT .. ON CONFLICT on every driver; RETURNING is
    if conn.execute(stmt).first() is None:
        raise StoreError("project_exists", f"project {project_id!r} already exists")
    upsert_dimensions(conn=conn, project_id=project_id, dimensions=dimensions, now=now)
    return row


def get_project(*, conn: Connection, project_id: str) -> dict | None:
    row = conn.execute(select(t.projects).where(t.projects.c.project_id == project_id)).first()
    return None if row is None else {**row._asdict(), "created_at": as_utc(row.created_at)}


def list_project_ids(*, conn: Connection) -> list[str]:
    return list(conn.scalars(select(t.projects.c.project_id).order_by(t.projects.c.project_id)))


def create_token(
    *, conn: Connection, project_id: str, label: str = "", now: datetime | None = None
) -> str:
    """A new bearer token for the project; only its hash is stored, the token is returned once."""
    check_rows([{"label": label}], "the token", optional_ids=("label",))
    token = "evs_" + secrets.token_urlsafe(32)
    conn.execute(
        t.api_tokens.insert().values(
            token_hash=hash_token(token),
            project_id=project_id,
            label=label,
            created_at=now or utcnow(),
        )
    )
    return token


def project_for_token(*, conn: Connection, token: str) -> str | None:
    """The project a bearer token belongs to, or None."""
    return conn.scalar(
        select(t.api_tokens.c.project_id).where(t.api_tokens.c.token_hash == hash_token(token))
    )


def token_id(token_hash: str) -> str:
    """The public name of a token: the first 16 hex digits of its hash (shows nothing of it)."""
    return token_hash[:16]


def list_tokens(*, conn: Connection, project_id: str) -> list[dict]:
    """The project's tokens (``token_id``, ``label``, ``created_at``), oldest first."""
    rows = conn.execute(
        select(t.api_tokens.c.token_hash, t.api_tokens.c.label, t.api_tokens.c.created_at)
        .where(t.api_tokens.c.project_id == project_id)
        .order_by(t.api_tokens.c.created_at, t.api_tokens.c.token_hash)
    )
    return [
        {"token_id": token_id(r.token_hash), "label": r.label, "created_at": as_utc(r.created_at)}
        for r in rows
    ]


def revoke_token(*, conn: Connection, project_id: str, token_id: str) -> dict | None:
    """Delete the project's token named ``token_id``; returns it (or None if there is none).

    A token id of fewer than 16 hex digits names nothing (a prefix must not match several).
    """
    if len(token_id) != 16 or any(c not in "0123456789abcdef" for c in token_id):
        return None
    row = conn.execute(
        select(t.api_tokens.c.token_hash, t.api_tokens.c.label, t.api_tokens.c.created_at).where(
            t.api_tokens.c.project_id == project_id,
            t.api_tokens.c.token_hash.startswith(token_id, autoescape=True),
        )
    ).first()
    if row is None:
        return None
    conn.execute(t.api_tokens.delete().where(t.api_tokens.c.token_hash == row.token_hash))
    return {"token_id": token_id, "label": row.label, "created_at": as_utc(row.created_at)}


# ---------------------------------------------------------------- events (re-estimation)


def add_events(*, conn: Connection, events: Sequence[dict]) -> None:
    """Append re-estimation events (``project_id``, ``dimension``, ``kind``, ``method``, ...)."""
    if events:
        conn.execute(t.events.insert(), list(events))


def list_events(
    *, conn: Connection, project_id: str, after_seq: int = 0, limit: int = 200
) -> list[dict]:
    """The project's events after ``after_seq``, oldest first."""
    rows = conn.execute(
        select(t.events)
        .where(t.events.c.project_id == project_id, t.events.c.seq > after_seq)
        .order_by(t.events.c.seq)
        .limit(limit)
    )
    out = []
    for r in rows:
        d = r._asdict()
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


# ---------------------------------------------------------------- catalogue


def _upsert(
    conn: Connection, table: Table, key: str, rows: list[dict], update: Sequence[str]
) -> int:
    """Insert rows, updating ``update`` columns of existing keys; returns how many were new."""
    if not rows:
        return 0
    # one row per key, the last one winning (PostgreSQL refuses to upsert a row twice)
    rows = list({r[key]: r for r in rows}.values())
    project_id = rows[0]["project_id"]
    ids = [r[key] for r in rows]
    existing: set[str] = set()
    for chunk in _chunks(ids):
        existing.update(
            conn.scalars(
                select(table.c[key]).where(
                    table.c.project_id == project_id, table.c[key].in_(chunk)
                )
            )
        )
    for chunk in _chunks(rows, 200):
        stmt = _insert(conn, table).values(list(chunk))
        stmt = stmt.on_conflict_do_update(
            index_elements=["project_id", key], set_={c: stmt.excluded[c] for c in update}
        )
        conn.execute(stmt)
    return len(set(ids) - existing)


def upsert_systems(
    *, conn: Connection, project_id: str, systems: Sequence[dict], now: datetime | None = None
) -> int:
    """Register systems (``system_id``, ``description``); existing ones are updated."""
    now = now or utcnow()
    check_rows(systems, "the systems", ids=("system_id",), texts=("description",))
    rows = [
        {
            "project_id": project_id,
            "system_id": s["system_id"],
            "description": s.get("description", ""),
            "created_at": now,
        }
        for s in systems
    ]
    return _upsert(conn, t.systems, "system_id", rows, ["description"])


def upsert_prompts(
    *, conn: Connection, project_id: str, prompts: Sequence[dict], now: datetime | None = None
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
    *, conn: Connection, project_id: str, dimensions: Sequence[dict], now: datetime | None = None
) -> int:
    """Register dimensions (``dimension_id``, ``description``)."""
    now = now or utcnow()
    check_rows(dimensions, "the dimensions", ids=("dimension_id",), texts=("description",))
    rows = [
        {
            "project_id": project_id,
            "dimension_id": d["dimension_id"],
            "description": d.get("description", ""),
            "created_at": now,
        }
        for d in dimensions
    ]
    return _upsert(conn, t.dimensions, "dimension_id", rows, ["description"])


def list_systems(*, conn: Connection, project_id: str) -> list[dict]:
    rows = conn.execute(
        select(t.systems.c.system_id, t.systems.c.description)
        .where(t.systems.c.project_id == project_id)
        .order_by(t.systems.c.system_id)
    )
    return [r._asdict() for r in rows]


def list_dimensions(*, conn: Connection, project_id: str) -> list[dict]:
    rows = conn.execute(
        select(t.dimensions.c.dimension_id, t.dimensions.c.description)
        .where(t.dimensions.c.project_id == project_id)
        .order_by(t.dimensions.c.dimension_id)
    )
    return [r._asdict() for r in rows]


def list_prompts(
    *, conn: Connection, project_id: str, offset: int = 0, limit: int | None = None
) -> list[dict]:
    stmt = (
        select(t.prompts.c.prompt_id, t.prompts.c.text, t.prompts.c.responses)
        .where(t.prompts.c.project_id == project_id)
        .order_by(t.prompts.c.prompt_id)
        .offset(offset)
    )
    if limit is not None:
        stmt = stmt.limit(limit)
    return [r._asdict() for r in conn.execute(stmt)]


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


# ---------------------------------------------------------------- judgments


def _check_judgments(judgments: Sequence[dict]) -> None:
    """Ids, texts and enumerations of every row (before anything touches the database)."""
    problems = row_problems(
        judgments,
        ids=("judgment_id", "item_id", "system_a", "system_b", "dimension"),
        optional_ids=("annotator_id", "timestamp"),
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
    if problems:
        problems.sort(key=lambda p: p["row"])
        raise StoreError(
            "validation_error",
            f"{len(problems)} invalid field(s) in the batch; nothing was stored",
            problems=problems,
        )


def add_judgments(
    *,
    conn: Connection,
    project_id: str,
    judgments: Sequence[dict],
    now: datetime | None = None,
    register_unknown: bool = False,
) -> IngestResult:
    """Append a batch of judgments, all or nothing, idempotent by ``judgment_id``.

    Rows must already be well-formed (``adaptive.data.validate_judgments`` or the
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
    # One writer per project at a time: sequence numbers are then committed in order, so a
    # reader tailing by ``seq`` never sees a later batch before an earlier one (PostgreSQL
    # hands out numbers at insert, not at commit), and a judgment_id raced by two batches
    # is checked against the stored one. SQLite's BEGIN IMMEDIATE already serialises.
    # FOR NO KEY UPDATE: inserts that reference the project (snapshots, leases) go on
    conn.execute(
        select(t.projects.c.project_id)
        .where(t.projects.c.project_id == project_id)
        .with_for_update(key_share=True)
    )
    rows: list[dict[str, Any]] = [{k: j.get(k) for k in JUDGMENT_FIELDS} for j in judgments]
    for r in rows:
        # an empty optional field is a missing one (CSV round trips)
        r["shown_first"] = r["shown_first"] or None
        r["timestamp"] = r["timestamp"] or None
        r["annotator_id"] = r["annotator_id"] or ""
    problems: list[dict] = []

    def problem(i: int, column: str, message: str) -> None:
        problems.append(
            {"row": i, "judgment_id": rows[i]["judgment_id"], "field": column, "message": message}
        )

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

    ids = [r["judgment_id"] for r in rows]
    existing: dict[str, dict] = {}
    cols = [t.judgments.c[k] for k in JUDGMENT_FIELDS]
    for chunk in _chunks(ids):
        for row in conn.execute(
            select(*cols).where(
                t.judgments.c.project_id == project_id, t.judgments.c.judgment_id.in_(chunk)
            )
        ):
            existing[row.judgment_id] = row._asdict()
    new_rows = []
    for i, r in enumerate(rows):
        old = existing.get(r["judgment_id"])
        if old is None:
            new_rows.append(r)
        elif old != r:
            differs = [k for k in JUDGMENT_FIELDS if old[k] != r[k]]
            problem(
                i,
                "judgment_id",
                f"judgment_id {r['judgment_id']!r} was already stored with different "
                f"{', '.join(differs)}; a judgment cannot be changed",
            )
    if problems:
        problems.sort(key=lambda p: p["row"])
        raise StoreError(
            "invalid_batch",
            f"{len(problems)} problem(s) in the batch; nothing was stored",
            problems=problems,
        )
    inserted = 0
    last_seq = 0
    if new_rows:
        annotators = sorted({r["annotator_id"] for r in new_rows})
        conn.execute(
            _insert(conn, t.annotators)
            .values(
                [
                    {"project_id": project_id, "annotator_id": a, "created_at": now}
                    for a in annotators
                ]
            )
            .on_conflict_do_nothing()
        )
        for chunk in _chunks(new_rows, 400):
            stmt = (
                _insert(conn, t.judgments)
                .values([{**r, "project_id": project_id, "received_at": now} for r in chunk])
                .on_conflict_do_nothing(index_elements=["project_id", "judgment_id"])
                .returning(t.judgments.c.seq)
            )
            seqs = [int(s) for (s,) in conn.execute(stmt)]
            inserted += len(seqs)
            last_seq = max([last_seq, *seqs])
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
) -> list[dict]:
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
    return [r._asdict() for r in conn.execute(stmt)]


def fetch_judgment_columns(
    *, conn: Connection, project_id: str, dimension: str, after_seq: int = 0
) -> tuple[list[tuple], int]:
    """Rows (seq, item_id, system_a, system_b, annotator_id, winner) after ``after_seq``, fast."""
    c = t.judgments.c
    rows = conn.execute(
        select(c.seq, c.item_id, c.system_a, c.system_b, c.annotator_id, c.winner)
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


# ---------------------------------------------------------------- snapshots


def save_snapshot(
    *,
    conn: Connection,
    project_id: str,
    dimension: str,
    num_judgments: int,
    last_seq: int,
    method: str,
    fit_seconds: float,
    diagnostics: dict,
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


def _meta(row: Any) -> dict:
    out = row._asdict()
    out["created_at"] = as_utc(out["created_at"])
    return out


def latest_snapshot_meta(
    *, conn: Connection, project_id: str, dimension: str, method: str | None = None
) -> dict | None:
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


def list_snapshots(*, conn: Connection, project_id: str, limit: int = 100) -> list[dict]:
    rows = conn.execute(
        select(*_SNAPSHOT_META)
        .where(t.snapshots.c.project_id == project_id)
        .order_by(t.snapshots.c.dimension, t.snapshots.c.version.desc())
        .limit(limit)
    )
    return [_meta(r) for r in rows]


# ---------------------------------------------------------------- leases (next-batch recommender)


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
    cells: list,
    expires_at: datetime,
    now: datetime | None = None,
    lease_id: str | None = None,
    request_hash: str | None = None,
) -> dict:
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
        "cells": cells,
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


def get_lease_by_key(*, conn: Connection, project_id: str, idempotency_key: str) -> dict | None:
    row = conn.execute(
        select(t.leases).where(
            t.leases.c.project_id == project_id, t.leases.c.idempotency_key == idempotency_key
        )
    ).first()
    if row is None:
        return None
    out = row._asdict()
    out["created_at"] = as_utc(out["created_at"])
    out["expires_at"] = as_utc(out["expires_at"])
    return out


def active_leased_cells(*, conn: Connection, project_id: str, now: datetime) -> list:
    """Cells of every lease of the project that has not expired at ``now`` (flattened)."""
    cells: list = []
    for (value,) in conn.execute(
        select(t.leases.c.cells).where(
            and_(t.leases.c.project_id == project_id, t.leases.c.expires_at > now)
        )
    ):
        cells.extend(value)
    return cells


__all__ = [
    "IngestResult",
    "StoreError",
    "active_leased_cells",
    "add_events",
    "add_judgments",
    "announce_judgments",
    "list_events",
    "list_tokens",
    "revoke_token",
    "token_id",
    "check_rows",
    "count_judgments",
    "create_lease",
    "create_project",
    "create_token",
    "fetch_judgment_columns",
    "fetch_judgments",
    "get_lease_by_key",
    "get_project",
    "hash_token",
    "judgment_counts_by_dimension",
    "latest_snapshot_meta",
    "list_annotators",
    "list_dimensions",
    "list_project_ids",
    "list_prompts",
    "list_snapshots",
    "list_systems",
    "project_for_token",
    "prune_snapshots",
    "save_snapshot",
    "snapshot_payload",
    "upsert_dimensions",
    "upsert_prompts",
    "upsert_systems",
]
