"""Projects and their API tokens (create, look up, rotate, revoke)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from services.store import tables as t
from services.store.repository._common import (
    StoreError,
    _insert,
    as_utc,
    check_rows,
    hash_token,
    utcnow,
)
from services.store.repository.catalogue import upsert_dimensions
from services.store.repository.rows import ProjectRow, TokenRow


def create_project(
    *,
    conn: Connection,
    project_id: str,
    name: str,
    description: str = "",
    dimensions: Sequence[dict[str, Any]] = (),
    now: datetime | None = None,
) -> ProjectRow:
    """Create a project and its dimensions; ``project_exists`` if the id is taken."""
    now = now or utcnow()
    check_rows(
        [{"project_id": project_id, "name": name, "description": description}],
        "the project",
        ids=("project_id",),
        optional_ids=("name",),
        texts=("description",),
    )
    row = ProjectRow(project_id=project_id, name=name, description=description, created_at=now)
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


def get_project(*, conn: Connection, project_id: str) -> ProjectRow | None:
    row = conn.execute(select(t.projects).where(t.projects.c.project_id == project_id)).first()
    if row is None:
        return None
    return ProjectRow(
        project_id=row.project_id,
        name=row.name,
        description=row.description,
        created_at=as_utc(row.created_at),
    )


def list_project_ids(*, conn: Connection) -> list[str]:
    return list(conn.scalars(select(t.projects.c.project_id).order_by(t.projects.c.project_id)))


#: a token's prefix names its scope: ``full`` opens every route of its project, ``write``
#: only posts judgments and results (webhooks, annotation tools). The prefix is part of the
#: secret whose hash is stored, so changing it gives a token the store does not know, and
#: the store keeps the scope too (:func:`project_for_token` checks that both agree)
TOKEN_PREFIXES: dict[str, str] = {"full": "evs_", "write": "evw_"}
SCOPES: tuple[str, ...] = tuple(TOKEN_PREFIXES)


def token_scope(token: str) -> str:
    """The scope a token's prefix names (``full`` for any other token, which then matches
    no stored write-only token)."""
    return "write" if token.startswith(TOKEN_PREFIXES["write"]) else "full"


def create_token(
    *,
    conn: Connection,
    project_id: str,
    label: str = "",
    scope: str = "full",
    now: datetime | None = None,
) -> str:
    """A new bearer token for the project; only its hash is stored, the token is returned once.

    ``scope`` is ``full`` (every route of the project) or ``write`` (post judgments and
    results, read nothing: for a webhook or an annotation tool).
    """
    check_rows([{"label": label}], "the token", optional_ids=("label",))
    if scope not in TOKEN_PREFIXES:
        raise StoreError("invalid_scope", f"token scope {scope!r}: expected one of {SCOPES}")
    token = TOKEN_PREFIXES[scope] + secrets.token_urlsafe(32)
    conn.execute(
        t.api_tokens.insert().values(
            token_hash=hash_token(token),
            project_id=project_id,
            label=label,
            scope=scope,
            created_at=now or utcnow(),
        )
    )
    return token


def project_for_token(*, conn: Connection, token: str) -> str | None:
    """The project a bearer token belongs to (its scope is :func:`token_scope`), or None."""
    c = t.api_tokens.c
    return conn.scalar(
        select(c.project_id).where(
            c.token_hash == hash_token(token),
            c.revoked_at.is_(None),
            c.scope == token_scope(token),
        )
    )


def token_id(token_hash: str) -> str:
    """The public name of a token: the first 16 hex digits of its hash (shows nothing of it)."""
    return token_hash[:16]


def list_tokens(*, conn: Connection, project_id: str) -> list[TokenRow]:
    """The project's tokens (``token_id``, ``label``, ``created_at``, ``scope``), oldest first."""
    c = t.api_tokens.c
    rows = conn.execute(
        select(c.token_hash, c.label, c.created_at, c.scope)
        .where(c.project_id == project_id, c.revoked_at.is_(None))
        .order_by(c.created_at, c.token_hash)
    )
    return [
        TokenRow(
            token_id=token_id(r.token_hash),
            label=r.label,
            created_at=as_utc(r.created_at),
            scope=r.scope,
        )
        for r in rows
    ]


def revoke_token(
    *, conn: Connection, project_id: str, token_id: str, now: datetime | None = None
) -> tuple[TokenRow, datetime | None] | None:
    """Revoke the project's token named ``token_id``: (the token, when it was revoked
    before or None), or None if the project never had it.

    A token id of fewer than 16 hex digits names nothing (a prefix must not match several).
    """
    if len(token_id) != 16 or any(c not in "0123456789abcdef" for c in token_id):
        return None
    c = t.api_tokens.c
    row = conn.execute(
        select(c.token_hash, c.label, c.created_at, c.revoked_at, c.scope).where(
            c.project_id == project_id, c.token_hash.startswith(token_id, autoescape=True)
        )
    ).first()
    if row is None:
        return None
    token = TokenRow(
        token_id=token_id, label=row.label, created_at=as_utc(row.created_at), scope=row.scope
    )
    if row.revoked_at is not None:
        return token, as_utc(row.revoked_at)
    conn.execute(
        t.api_tokens.update()
        .where(c.token_hash == row.token_hash)
        .values(revoked_at=now or utcnow())
    )
    return token, None
