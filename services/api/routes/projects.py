"""The HTTP routes of the service, projects, tokens, catalogue and judgments: thin functions
from validated requests to store calls (the answers from snapshots are in
:mod:`services.api.routes.analysis`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, NamedTuple

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.exc import SQLAlchemyError

from services import schemas as s
from services.api.deps import ProjectId, SettingsDep, State, _bearer
from services.api.errors import ApiError, error_responses
from services.api.limits import admin_token_ok
from services.runtime.fit_checks import ChecksPublic, checks_public
from services.runtime.fit_health import (
    FitFailurePublic,
    ServiceHealth,
    fit_failures,
    fits_public,
)
from services.runtime.store_health import write_failure
from services.store import repository as repo

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pydantic import BaseModel
    from sqlalchemy import Connection

    from services.runtime.state import ServiceState

router = APIRouter()

# ---------------------------------------------------------------- health, projects


def snapshot_public(meta: repo.SnapshotMeta) -> s.SnapshotPublic:
    """A stored snapshot's metadata as the API shows it."""
    return s.SnapshotPublic(
        dimension=meta["dimension"],
        version=meta["version"],
        num_judgments=meta["num_judgments"],
        method=meta["method"],
        created_at=meta["created_at"],
        fit_seconds=meta["fit_seconds"],
        diagnostics=meta["diagnostics"],
    )


def _freshness(conn: Connection, project_id: str, now: datetime) -> s.ProjectFreshness:
    """How old a project's newest snapshot is and how many judgments it does not include."""
    total = 0
    behind = 0
    newest: datetime | None = None
    counts = repo.judgment_counts_by_dimension(conn=conn, project_id=project_id)
    for dimension, (count, _) in counts.items():
        total += count
        meta = repo.latest_snapshot_meta(conn=conn, project_id=project_id, dimension=dimension)
        if meta is None:
            behind += count
            continue
        newest = meta["created_at"] if newest is None else max(newest, meta["created_at"])
        behind += repo.count_judgments(
            conn=conn,
            project_id=project_id,
            dimension=dimension,
            after_seq=int(meta["last_seq"]),
        )
    return s.ProjectFreshness(
        project_id=project_id,
        num_judgments=total,
        last_snapshot_at=newest,
        last_snapshot_age_seconds=(
            None if newest is None else round((now - newest).total_seconds(), 3)
        ),
        judgments_behind=behind,
    )


def _health_audience(state: ServiceState, token: str | None) -> tuple[bool, str | None]:
    """(admin token?, the project of a project token): who may see per-project detail.

    An unknown token, or none, is anonymous (the guard counted it against the address)."""
    if not token:
        return False, None
    if state.settings.admin_token and admin_token_ok(state.settings.admin_token, token):
        return True, None
    return False, state.tokens.get(state.store, token, state.settings.token_cache_seconds)


class _HealthReads(NamedTuple):
    reachable: bool
    admin: bool
    failures: list[FitFailurePublic]
    projects: list[s.ProjectFreshness] | None
    checks: ChecksPublic


def _health_reads(state: ServiceState, token: str | None) -> _HealthReads:
    """What ``/health`` reads from the store: whether it answered, whether the token is the
    admin's, the failed fits, the projects the token may see (None: none) and the checks."""
    now = datetime.now(UTC)
    admin = False
    try:
        admin, own = _health_audience(state, token)
        with state.store.read() as conn:
            failures = fit_failures(conn)
            checks = checks_public(conn, detail=admin)
            ids = repo.list_project_ids(conn=conn) if admin else [own] if own is not None else []
            projects = None
            if admin or own is not None:
                projects = [_freshness(conn, project_id, now) for project_id in ids]
    except SQLAlchemyError:
        return _HealthReads(False, admin, [], None, ChecksPublic(compared=0, diverging=0))
    return _HealthReads(True, admin, failures, projects, checks)


@router.get(
    "/health",
    operation_id="health",
    tags=["service"],
)
def health(
    request: Request,
    state: State,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ServiceHealth:
    """Whether the store answers and takes this replica's writes (``store_writable``), the
    re-estimation worker runs, and how many fits failed (``fits``), for anyone; which
    projects exist and how old each one's newest snapshot is (``judgments_behind``:
    judgments it does not include) only with a token: a project's token shows that
    project, the admin token every project (and which fits failed)."""
    token = credentials.credentials if credentials else None
    reachable, admin, failures, projects, checks = _health_reads(state, token)
    alive = state.worker_alive()
    mode = state.settings.worker if state.streaming else "off"
    fits = fits_public(failures, detail=admin)
    failed_write = write_failure(state.store)
    ok = reachable and not failed_write and (alive or not state.streaming) and not fits.failing
    return ServiceHealth(
        status="ok" if ok else "degraded",
        version=request.app.version,
        database="sqlite" if state.store.is_sqlite else "postgresql",
        store_reachable=reachable,
        store_writable=failed_write is None,
        last_write_failure=failed_write,
        streaming=state.streaming,
        worker=s.WorkerPublic(
            mode=mode,
            alive=alive,
            restarts=state.restarts,
            last_restart_at=state.last_restart_at,
        ),
        projects=projects,
        fits=fits,
        checks=checks,
        catching_up=state.starting or any(p.judgments_behind > 0 for p in projects or ()),
    )


@router.post(
    "/projects",
    operation_id="create_project",
    status_code=201,
    tags=["projects"],
    responses=error_responses(409),
)
def create_project(
    body: s.ProjectCreate,
    state: State,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> s.ProjectCreated:
    """Create a campaign; the answer holds its bearer token (shown once)."""
    if not admin_token_ok(settings.admin_token, credentials.credentials if credentials else None):
        raise ApiError(401, "unauthorized", "creating a project needs the admin token")
    dimensions = [d.model_dump() for d in body.dimensions] or [
        {"dimension_id": "overall", "description": ""}
    ]
    with state.store.write() as conn:
        row = repo.create_project(
            conn=conn,
            project_id=body.project_id,
            name=body.name or body.project_id,
            description=body.description,
            dimensions=dimensions,
        )
        token = repo.create_token(conn=conn, project_id=body.project_id, label="initial")
    return s.ProjectCreated(project=s.ProjectPublic(**row), token=token)


@router.get(
    "/projects/{project_id}",
    operation_id="get_project",
    tags=["projects"],
    responses=error_responses(404),
)
def get_project(project_id: ProjectId, state: State) -> s.ProjectStatus:
    """The campaign: counts, dimensions and the newest snapshots."""
    with state.store.read() as conn:
        row = repo.get_project(conn=conn, project_id=project_id)
        if row is None:
            raise ApiError(404, "not_found", f"no project {project_id!r}")
        dims = repo.list_dimensions(conn=conn, project_id=project_id)
        snaps = [
            m
            for d in dims
            if (
                m := repo.latest_snapshot_meta(
                    conn=conn, project_id=project_id, dimension=d["dimension_id"]
                )
            )
        ]
        return s.ProjectStatus(
            project=s.ProjectPublic(**row),
            num_systems=len(repo.list_systems(conn=conn, project_id=project_id)),
            num_prompts=repo.count_prompts(conn=conn, project_id=project_id),
            num_annotators=len(repo.list_annotators(conn=conn, project_id=project_id)),
            num_judgments=repo.count_judgments(conn=conn, project_id=project_id),
            dimensions=[s.DimensionPublic(**d) for d in dims],
            snapshots=[snapshot_public(m) for m in snaps],
        )


@router.post(
    "/projects/{project_id}/tokens", operation_id="create_token", status_code=201, tags=["tokens"]
)
def create_token(project_id: ProjectId, body: s.TokenCreate, state: State) -> s.TokenPublic:
    """Another bearer token for the same project (e.g. one per annotation tool; ``scope``
    ``write`` for one that only posts judgments and results)."""
    with state.store.write() as conn:
        token = repo.create_token(
            conn=conn, project_id=project_id, label=body.label, scope=body.scope
        )
    return s.TokenPublic(
        token=token,
        token_id=repo.token_id(repo.hash_token(token)),
        label=body.label,
        scope=body.scope,
    )


@router.get("/projects/{project_id}/tokens", operation_id="list_tokens", tags=["tokens"])
def list_tokens(project_id: ProjectId, state: State) -> s.TokensPublic:
    """The project's tokens by id and label (the tokens themselves are not stored)."""
    with state.store.read() as conn:
        rows = repo.list_tokens(conn=conn, project_id=project_id)
    return s.TokensPublic(tokens=[s.TokenInfoPublic(**r) for r in rows])


TokenId = Annotated[
    str,
    Path(
        min_length=16,
        max_length=16,
        pattern="^[0-9a-f]{16}$",
        description="token_id from list_tokens (16 hexadecimal digits)",
    ),
]


def _revoke(
    conn: Connection, project_id: str, token_id: str
) -> tuple[repo.TokenRow, datetime | None]:
    """Revoke the token: (it, when it was revoked before or None); 404 if it never was."""
    found = repo.revoke_token(conn=conn, project_id=project_id, token_id=token_id)
    if found is None:
        raise ApiError(404, "not_found", f"no token {token_id!r} in project {project_id!r}")
    return found


@router.delete(
    "/projects/{project_id}/tokens/{token_id}",
    operation_id="revoke_token",
    tags=["tokens"],
    responses=error_responses(404),
)
def revoke_token(project_id: ProjectId, token_id: TokenId, state: State) -> s.TokenRevoked:
    """Revoke a token: every replica refuses it within ``token_cache_seconds``.

    Revoking a revoked token (again, or after a rotation) answers the same, with
    ``revoked_before`` set. A project may revoke the token the request was made with
    (its last one too: the project is then reachable again only through a token made
    with ``evalset token``).
    """
    with state.store.write() as conn:
        row, before = _revoke(conn, project_id, token_id)
    state.tokens.forget(token_id)
    return s.TokenRevoked(
        revoked=s.TokenInfoPublic(**row),
        revoked_before=before,
        effective_within_seconds=state.settings.token_cache_seconds,
    )


@router.post(
    "/projects/{project_id}/tokens/{token_id}/rotate",
    operation_id="rotate_token",
    status_code=201,
    tags=["tokens"],
    responses=error_responses(404, 409),
)
def rotate_token(project_id: ProjectId, token_id: TokenId, state: State) -> s.TokenPublic:
    """Replace a token by a new one with the same label, in one transaction (409 when it
    was revoked already: create a new token instead)."""
    with state.store.write() as conn:
        old, before = _revoke(conn, project_id, token_id)
        if before is not None:
            raise ApiError(
                409,
                "token_revoked",
                f"token {token_id!r} was revoked at {before.isoformat()}; "
                "create a new one with POST /projects/{project_id}/tokens",
            )
        token = repo.create_token(
            conn=conn, project_id=project_id, label=old["label"], scope=old["scope"]
        )
    state.tokens.forget(token_id)
    return s.TokenPublic(
        token=token,
        token_id=repo.token_id(repo.hash_token(token)),
        label=old["label"],
        scope=old["scope"],
    )


# ---------------------------------------------------------------- catalogue


def _bulk(count_new: int, total: int) -> s.BulkResult:
    return s.BulkResult(created=count_new, updated=total - count_new)


def refuse_repeated(ids: list[str], what: str) -> None:
    problems = [
        {"row": i, "field": what, "message": f"duplicate {what} {x!r} (first in row {first})"}
        for i, first, x in s.repeated_ids(ids)
    ]
    if problems:
        raise ApiError(
            422,
            "validation_error",
            f"duplicate {what}s in the request; nothing was stored",
            problems,
        )


def _register(
    state: ServiceState,
    project_id: str,
    upsert: Callable[..., int],
    plural: str,
    entries: Sequence[BaseModel],
) -> s.BulkResult:
    """Register catalogue entries in bulk (``plural``: systems, prompts or dimensions): a
    repeated id refuses the request, the others are upserted; counts new and updated."""
    rows = [x.model_dump() for x in entries]  # ids unique: the request model's validator
    with state.store.write() as conn:
        new = upsert(conn=conn, project_id=project_id, **{plural: rows})
    return _bulk(new, len(rows))


@router.post("/projects/{project_id}/systems", operation_id="register_systems", tags=["catalogue"])
def register_systems(project_id: ProjectId, body: s.SystemsCreate, state: State) -> s.BulkResult:
    """Register systems in bulk (existing ones get the new description)."""
    return _register(state, project_id, repo.upsert_systems, "systems", body.systems)


@router.get("/projects/{project_id}/systems", operation_id="list_systems", tags=["catalogue"])
def list_systems(project_id: ProjectId, state: State) -> list[s.SystemPublic]:
    with state.store.read() as conn:
        return [s.SystemPublic(**r) for r in repo.list_systems(conn=conn, project_id=project_id)]


@router.post("/projects/{project_id}/prompts", operation_id="register_prompts", tags=["catalogue"])
def register_prompts(project_id: ProjectId, body: s.PromptsCreate, state: State) -> s.BulkResult:
    """Register prompts with their text and each system's response, in bulk."""
    return _register(state, project_id, repo.upsert_prompts, "prompts", body.prompts)


@router.get("/projects/{project_id}/prompts", operation_id="list_prompts", tags=["catalogue"])
def list_prompts(
    project_id: ProjectId,
    state: State,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[s.PromptPublic]:
    with state.store.read() as conn:
        rows = repo.list_prompts(conn=conn, project_id=project_id, offset=offset, limit=limit)
    return [s.PromptPublic(**r) for r in rows]


@router.post(
    "/projects/{project_id}/dimensions", operation_id="register_dimensions", tags=["catalogue"]
)
def register_dimensions(
    project_id: ProjectId, body: s.DimensionsCreate, state: State
) -> s.BulkResult:
    return _register(state, project_id, repo.upsert_dimensions, "dimensions", body.dimensions)


@router.get("/projects/{project_id}/dimensions", operation_id="list_dimensions", tags=["catalogue"])
def list_dimensions(project_id: ProjectId, state: State) -> list[s.DimensionPublic]:
    with state.store.read() as conn:
        return [
            s.DimensionPublic(**r) for r in repo.list_dimensions(conn=conn, project_id=project_id)
        ]
