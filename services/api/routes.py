"""The HTTP routes of the service, projects, tokens, catalogue and judgments: thin functions
from validated requests to store calls (the answers from snapshots are in
:mod:`services.api.analysis`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.exc import SQLAlchemyError

from services import schemas as s
from services.api.analysis import snapshot_public
from services.api.deps import ProjectId, SettingsDep, State, WriteProjectId, _bearer
from services.api.errors import ApiError, error_responses
from services.api.idempotency import Idempotent, idempotent
from services.api.limits import admin_token_ok
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


def _health_reads(
    state: ServiceState, token: str | None
) -> tuple[bool, bool, list[FitFailurePublic], list[s.ProjectFreshness] | None]:
    """What ``/health`` reads from the store: whether it answered, whether the token is the
    admin's, the failed fits, and the projects the token may see (None: none)."""
    now = datetime.now(UTC)
    admin = False
    try:
        admin, own = _health_audience(state, token)
        with state.store.read() as conn:
            failures = fit_failures(conn)
            ids = repo.list_project_ids(conn=conn) if admin else [own] if own is not None else []
            projects = None
            if admin or own is not None:
                projects = [_freshness(conn, project_id, now) for project_id in ids]
    except SQLAlchemyError:
        return False, admin, [], None
    return True, admin, failures, projects


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
    reachable, admin, failures, projects = _health_reads(state, token)
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


def _refuse_repeated(ids: list[str], what: str) -> None:
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


# ---------------------------------------------------------------- judgments


@router.post(
    "/projects/{project_id}/judgments",
    operation_id="add_judgments",
    tags=["judgments"],
    responses=error_responses(422),
)
def add_judgments(
    project_id: WriteProjectId,
    body: s.JudgmentsCreate,
    state: State,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> s.JudgmentBatchResult:
    """Append a batch, all or nothing; a ``judgment_id`` already stored is a no-op (retry).

    The whole batch is rejected, with one problem per bad row, if any row names an
    unknown system, prompt or dimension, compares a system with itself, has a bad
    winner, or reuses a ``judgment_id`` for a different judgment. With an
    ``Idempotency-Key`` header, the same key and batch again get the first answer
    (header ``Idempotent-Replayed: true``; nothing is stored twice), and the key with
    another batch is a 422 ``idempotency_key_reused``.
    """
    rows = [j.model_dump() for j in body.judgments]
    _refuse_repeated([r["judgment_id"] for r in rows], "judgment_id")
    once = idempotent(
        idempotency_key, _batch_content(body), field="Idempotency-Key", name="Idempotency-Key"
    )
    with state.store.write() as conn:
        if once.key:
            repo.lock_judgments(conn=conn, project_id=project_id)
            stored = repo.get_batch_by_key(
                conn=conn, project_id=project_id, idempotency_key=once.key
            )
            if stored is not None:
                return _replayed_batch(once, stored, response)
        result = repo.add_judgments(conn=conn, project_id=project_id, judgments=rows)
        answer = _batch_answer(conn, project_id, result, sorted({r["dimension"] for r in rows}))
        if once.key:
            repo.save_batch_key(
                conn=conn,
                project_id=project_id,
                idempotency_key=once.key,
                request_hash=once.fingerprint,
                response=answer.model_dump(mode="json"),
            )
    # re-estimation happens on the worker thread, never in the request
    state.notify(project_id, result.dimensions, result.last_seq)
    return answer


def _batch_content(body: s.JudgmentsCreate) -> dict[str, Any]:
    """The request an Idempotency-Key is bound to."""
    # the fields judgments gained in 0007 count only when given: a batch keyed before them
    # and sent again unchanged is the same request
    later = ("screen_id", "lease_id")
    return {
        "judgments": [
            {k: v for k, v in j.items() if not (k in later and v is None)}
            for j in body.model_dump(mode="json")["judgments"]
        ]
    }


def _batch_answer(
    conn: Connection, project_id: str, result: repo.IngestResult, dims: list[str]
) -> s.JudgmentBatchResult:
    """A stored batch's answer (announced to the re-estimation worker when it added any)."""
    if result.inserted:
        repo.announce_judgments(conn=conn, project_id=project_id)
    # gold judgments counted too: an answer that counted only the ordinary ones would
    # tell, one judgment at a time, which cells are gold
    total = repo.count_judgments(conn=conn, project_id=project_id) + repo.count_gold_judgments(
        conn=conn, project_id=project_id
    )
    metas = [repo.latest_snapshot_meta(conn=conn, project_id=project_id, dimension=d) for d in dims]
    return s.JudgmentBatchResult(
        accepted=result.inserted,
        duplicates=result.duplicates,
        num_judgments=total,
        snapshots=[snapshot_public(m) for m in metas if m is not None],
    )


def _replayed_batch(
    once: Idempotent, stored: tuple[str, dict[str, object]], response: Response
) -> s.JudgmentBatchResult:
    """The first answer of the key, if it was given to this same batch (else a 422)."""
    request_hash, answer = stored
    once.check(
        request_hash,
        f"Idempotency-Key {once.key!r} was used for another batch; use a new key for a new batch",
    )
    response.headers["Idempotent-Replayed"] = "true"
    return s.JudgmentBatchResult.model_validate(answer)


@router.get("/projects/{project_id}/judgments", operation_id="list_judgments", tags=["judgments"])
def list_judgments(
    project_id: ProjectId,
    state: State,
    after_seq: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=50_000)] = 10_000,
) -> s.JudgmentsPublic:
    """All judgments in arrival order, a page at a time (for export)."""
    with state.store.read() as conn:
        rows = repo.fetch_judgments(
            conn=conn, project_id=project_id, after_seq=after_seq, limit=limit
        )
    return s.JudgmentsPublic(
        judgments=[s.JudgmentPublic.model_construct(**r) for r in rows],
        next_after_seq=rows[-1]["seq"] if len(rows) == limit else None,
    )
