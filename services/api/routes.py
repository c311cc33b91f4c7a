"""The HTTP routes: thin functions from validated requests to store calls and snapshot reads."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query
from fastapi.security import HTTPAuthorizationCredentials

from adaptive.streaming import Snapshot, item_rows, leaderboard_rows, pair_rows
from services import schemas as s
from services.api.deps import ProjectId, SettingsDep, State, _bearer
from services.api.errors import ApiError, error_responses
from services.api.limits import admin_token_ok
from services.api.state import Pending
from services.store import repository as repo

router = APIRouter()

Rule = Annotated[
    Literal["holm", "bonferroni", "none"], Query(description="multiplicity adjustment")
]
Level = Annotated[float, Query(gt=0.5, lt=1.0, description="posterior interval level")]
Alpha = Annotated[float, Query(gt=0.0, lt=0.5, description="family-wise error rate")]
Method = Annotated[
    Literal["latest", "laplace", "nuts"] | None,
    Query(description="latest snapshot (default), or the latest of one method"),
]
Dimension = Annotated[
    str | None,
    Query(max_length=200, description="default: the project's only dimension, or 'overall'"),
]


# ---------------------------------------------------------------- helpers


def _snapshot_public(meta: dict) -> s.SnapshotPublic:
    return s.SnapshotPublic(
        dimension=meta["dimension"],
        version=meta["version"],
        num_judgments=meta["num_judgments"],
        method=meta["method"],
        created_at=meta["created_at"],
        fit_seconds=meta["fit_seconds"],
        diagnostics=meta["diagnostics"],
    )


def _from_snapshot(snap: Snapshot) -> s.SnapshotPublic:
    return s.SnapshotPublic(
        dimension=snap.dimension,
        version=snap.version,
        num_judgments=snap.num_judgments,
        method=snap.method,
        created_at=datetime.fromtimestamp(snap.created_at, UTC),
        fit_seconds=snap.fit_seconds,
        diagnostics=snap.diagnostics,
    )


def _dimension(state: State, project_id: str, dimension: str | None) -> str:
    with state.store.read() as conn:
        known = [d["dimension_id"] for d in repo.list_dimensions(conn=conn, project_id=project_id)]
    if dimension is None:
        if len(known) == 1:
            return known[0]
        if "overall" in known:
            return "overall"
        raise ApiError(
            422, "validation_error", f"the project has several dimensions {known}; name one"
        )
    if dimension not in known:
        raise ApiError(
            404, "not_found", f"unknown dimension {dimension!r}; the project has {known}"
        )
    return dimension


def _snapshot(state: State, project_id: str, dimension: str, method: str | None) -> Snapshot:
    snap = state.snapshot(project_id, dimension, None if method in (None, "latest") else method)
    if snap is None:
        with state.store.read() as conn:
            n = repo.count_judgments(conn=conn, project_id=project_id, dimension=dimension)
        which = "" if method in (None, "latest") else f" {method}"
        raise ApiError(
            409,
            "no_snapshot",
            f"no{which} snapshot of dimension {dimension!r} yet ({n} judgments stored); "
            "re-estimation runs after each accepted batch, try again shortly",
        )
    return snap


# ---------------------------------------------------------------- health, projects


@router.get("/health", operation_id="health", tags=["service"])
def health(state: State) -> s.HealthPublic:
    """Whether the store answers and the re-estimation worker runs, and how old each
    project's newest snapshot is (``judgments_behind``: judgments it does not include)."""
    now = datetime.now(UTC)
    projects = []
    with state.store.read() as conn:
        for project_id in repo.list_project_ids(conn=conn):
            total = 0
            behind = 0
            newest: datetime | None = None
            counts = repo.judgment_counts_by_dimension(conn=conn, project_id=project_id)
            for dimension, (count, _) in counts.items():
                total += count
                meta = repo.latest_snapshot_meta(
                    conn=conn, project_id=project_id, dimension=dimension
                )
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
            projects.append(
                s.ProjectFreshness(
                    project_id=project_id,
                    num_judgments=total,
                    last_snapshot_at=newest,
                    last_snapshot_age_seconds=(
                        None if newest is None else round((now - newest).total_seconds(), 3)
                    ),
                    judgments_behind=behind,
                )
            )
    alive = state.worker_alive()
    mode = state.settings.worker if state.streaming else "off"
    return s.HealthPublic(
        status="ok" if alive or not state.streaming else "degraded",
        database="sqlite" if state.store.is_sqlite else "postgresql",
        streaming=state.streaming,
        worker=s.WorkerPublic(
            mode=mode,
            alive=alive,
            restarts=state.restarts,
            last_restart_at=state.last_restart_at,
        ),
        projects=projects,
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
    if not admin_token_ok(settings.admin_token, credentials and credentials.credentials):
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
            snapshots=[_snapshot_public(m) for m in snaps],
        )


@router.post(
    "/projects/{project_id}/tokens", operation_id="create_token", status_code=201, tags=["tokens"]
)
def create_token(project_id: ProjectId, body: s.TokenCreate, state: State) -> s.TokenPublic:
    """Another bearer token for the same project (e.g. one per annotation tool)."""
    with state.store.write() as conn:
        token = repo.create_token(conn=conn, project_id=project_id, label=body.label)
    return s.TokenPublic(
        token=token, token_id=repo.token_id(repo.hash_token(token)), label=body.label
    )


@router.get("/projects/{project_id}/tokens", operation_id="list_tokens", tags=["tokens"])
def list_tokens(project_id: ProjectId, state: State) -> s.TokensPublic:
    """The project's tokens by id and label (the tokens themselves are not stored)."""
    with state.store.read() as conn:
        rows = repo.list_tokens(conn=conn, project_id=project_id)
    return s.TokensPublic(tokens=[s.TokenInfoPublic(**r) for r in rows])


TokenId = Annotated[
    str, Path(min_length=16, max_length=16, description="token_id from list_tokens")
]


def _revoke(state: State, conn, project_id: str, token_id: str) -> dict:  # noqa: ANN001
    row = repo.revoke_token(conn=conn, project_id=project_id, token_id=token_id)
    if row is None:
        raise ApiError(404, "not_found", f"no token {token_id!r} in project {project_id!r}")
    return row


@router.delete(
    "/projects/{project_id}/tokens/{token_id}",
    operation_id="revoke_token",
    tags=["tokens"],
    responses=error_responses(404),
)
def revoke_token(project_id: ProjectId, token_id: TokenId, state: State) -> s.TokenRevoked:
    """Revoke a token: every replica refuses it within ``token_cache_seconds``.

    A project may revoke the token the request was made with (its last one too: the
    project is then reachable again only through a token made with ``evalset token``).
    """
    with state.store.write() as conn:
        row = _revoke(state, conn, project_id, token_id)
    state.tokens.forget(token_id)
    return s.TokenRevoked(
        revoked=s.TokenInfoPublic(**row),
        effective_within_seconds=state.settings.token_cache_seconds,
    )


@router.post(
    "/projects/{project_id}/tokens/{token_id}/rotate",
    operation_id="rotate_token",
    status_code=201,
    tags=["tokens"],
    responses=error_responses(404),
)
def rotate_token(project_id: ProjectId, token_id: TokenId, state: State) -> s.TokenPublic:
    """Replace a token by a new one with the same label, in one transaction."""
    with state.store.write() as conn:
        old = _revoke(state, conn, project_id, token_id)
        token = repo.create_token(conn=conn, project_id=project_id, label=old["label"])
    state.tokens.forget(token_id)
    return s.TokenPublic(
        token=token, token_id=repo.token_id(repo.hash_token(token)), label=old["label"]
    )


# ---------------------------------------------------------------- catalogue


def _bulk(count_new: int, total: int) -> s.BulkResult:
    return s.BulkResult(created=count_new, updated=total - count_new)


def _unique(ids: list[str], what: str) -> None:
    seen: set[str] = set()
    problems = []
    for i, x in enumerate(ids):
        if x in seen:
            problems.append({"row": i, "field": what, "message": f"duplicate {what} {x!r}"})
        seen.add(x)
    if problems:
        raise ApiError(
            422,
            "validation_error",
            f"duplicate {what}s in the request; nothing was stored",
            problems,
        )


@router.post("/projects/{project_id}/systems", operation_id="register_systems", tags=["catalogue"])
def register_systems(project_id: ProjectId, body: s.SystemsCreate, state: State) -> s.BulkResult:
    """Register systems in bulk (existing ones get the new description)."""
    _unique([x.system_id for x in body.systems], "system_id")
    with state.store.write() as conn:
        new = repo.upsert_systems(
            conn=conn, project_id=project_id, systems=[x.model_dump() for x in body.systems]
        )
    return _bulk(new, len(body.systems))


@router.get("/projects/{project_id}/systems", operation_id="list_systems", tags=["catalogue"])
def list_systems(project_id: ProjectId, state: State) -> list[s.SystemPublic]:
    with state.store.read() as conn:
        return [s.SystemPublic(**r) for r in repo.list_systems(conn=conn, project_id=project_id)]


@router.post("/projects/{project_id}/prompts", operation_id="register_prompts", tags=["catalogue"])
def register_prompts(project_id: ProjectId, body: s.PromptsCreate, state: State) -> s.BulkResult:
    """Register prompts with their text and each system's response, in bulk."""
    _unique([x.prompt_id for x in body.prompts], "prompt_id")
    with state.store.write() as conn:
        new = repo.upsert_prompts(
            conn=conn, project_id=project_id, prompts=[x.model_dump() for x in body.prompts]
        )
    return _bulk(new, len(body.prompts))


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
    _unique([x.dimension_id for x in body.dimensions], "dimension_id")
    with state.store.write() as conn:
        new = repo.upsert_dimensions(
            conn=conn, project_id=project_id, dimensions=[x.model_dump() for x in body.dimensions]
        )
    return _bulk(new, len(body.dimensions))


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
)
def add_judgments(
    project_id: ProjectId, body: s.JudgmentsCreate, state: State
) -> s.JudgmentBatchResult:
    """Append a batch, all or nothing; a ``judgment_id`` already stored is a no-op (retry).

    The whole batch is rejected, with one problem per bad row, if any row names an
    unknown system, prompt or dimension, compares a system with itself, has a bad
    winner, or reuses a ``judgment_id`` for a different judgment.
    """
    rows = [j.model_dump() for j in body.judgments]
    _unique([r["judgment_id"] for r in rows], "judgment_id")
    dims = sorted({r["dimension"] for r in rows})
    with state.store.write() as conn:
        result = repo.add_judgments(conn=conn, project_id=project_id, judgments=rows)
        if result.inserted:
            repo.announce_judgments(conn=conn, project_id=project_id)
        total = repo.count_judgments(conn=conn, project_id=project_id)
        metas = [
            repo.latest_snapshot_meta(conn=conn, project_id=project_id, dimension=d) for d in dims
        ]
    # re-estimation happens on the worker thread, never in the request
    state.notify(project_id, result.dimensions, result.last_seq)
    return s.JudgmentBatchResult(
        accepted=result.inserted,
        duplicates=result.duplicates,
        num_judgments=total,
        snapshots=[_snapshot_public(m) for m in metas if m is not None],
    )


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


# ---------------------------------------------------------------- answers from snapshots


@router.get("/projects/{project_id}/snapshots", operation_id="list_snapshots", tags=["analysis"])
def list_snapshots(project_id: ProjectId, state: State) -> s.SnapshotsPublic:
    """Stored snapshots, newest first per dimension (older fast ones are pruned)."""
    with state.store.read() as conn:
        metas = repo.list_snapshots(conn=conn, project_id=project_id)
    return s.SnapshotsPublic(snapshots=[_snapshot_public(m) for m in metas])


@router.get(
    "/projects/{project_id}/significance",
    operation_id="significance",
    tags=["analysis"],
    responses=error_responses(404, 409),
)
def significance(
    project_id: ProjectId,
    state: State,
    dimension: Dimension = None,
    all_pairs: Annotated[
        bool, Query(description="every pair of systems, not only compared ones")
    ] = False,
    rule: Rule = "holm",
    alpha: Alpha = 0.05,
    level: Level = 0.95,
    method: Method = None,
) -> s.SignificancePublic:
    """Every comparison: theta = s_B - s_A (> 0: B better), interval, P(B better), verdicts."""
    dim = _dimension(state, project_id, dimension)
    snap = _snapshot(state, project_id, dim, method)
    rows = pair_rows(snap, all_pairs=all_pairs, rule=rule, alpha=alpha, level=level)
    return s.SignificancePublic(
        snapshot=_from_snapshot(snap), rows=[s.SignificanceRow(**r) for r in rows]
    )


@router.get(
    "/projects/{project_id}/significance/{system_a}/{system_b}",
    operation_id="significance_pair",
    tags=["analysis"],
    responses=error_responses(404, 409),
)
def significance_pair(
    project_id: ProjectId,
    system_a: str,
    system_b: str,
    state: State,
    dimension: Dimension = None,
    all_pairs: bool = False,
    rule: Rule = "holm",
    alpha: Alpha = 0.05,
    level: Level = 0.95,
    method: Method = None,
) -> s.SignificancePublic:
    """One pair in the orientation asked (A vs B); works for pairs never compared too."""
    if system_a == system_b:
        raise ApiError(422, "validation_error", "system_b must differ from system_a")
    dim = _dimension(state, project_id, dimension)
    snap = _snapshot(state, project_id, dim, method)
    for name in (system_a, system_b):
        if name not in snap.systems:
            raise ApiError(404, "not_found", f"unknown system {name!r} in snapshot {snap.version}")
    rows = pair_rows(
        snap, [(system_a, system_b)], all_pairs=all_pairs, rule=rule, alpha=alpha, level=level
    )
    return s.SignificancePublic(
        snapshot=_from_snapshot(snap), rows=[s.SignificanceRow(**r) for r in rows]
    )


@router.get(
    "/projects/{project_id}/leaderboard",
    operation_id="leaderboard",
    tags=["analysis"],
    responses=error_responses(404, 409),
)
def leaderboard(
    project_id: ProjectId,
    state: State,
    dimension: Dimension = None,
    level: Level = 0.95,
    method: Method = None,
) -> s.LeaderboardPublic:
    """Per-system skill with its interval, mean rank and P(best), best first."""
    dim = _dimension(state, project_id, dimension)
    snap = _snapshot(state, project_id, dim, method)
    return s.LeaderboardPublic(
        snapshot=_from_snapshot(snap),
        rows=[s.LeaderboardRow(**r) for r in leaderboard_rows(snap, level=level)],
    )


@router.get(
    "/projects/{project_id}/prompt-parameters",
    operation_id="prompt_parameters",
    tags=["analysis"],
    responses=error_responses(404, 409),
)
def prompt_parameters(
    project_id: ProjectId, state: State, dimension: Dimension = None, method: Method = None
) -> s.PromptParametersPublic:
    """Per prompt: discrimination alpha and thresholds b (mean, sd), most discriminating first."""
    dim = _dimension(state, project_id, dimension)
    snap = _snapshot(state, project_id, dim, method)
    return s.PromptParametersPublic(
        snapshot=_from_snapshot(snap),
        rows=[s.PromptParameterRow(**r) for r in item_rows(snap)],
    )


@router.get(
    "/projects/{project_id}/pruning",
    operation_id="pruning",
    tags=["analysis"],
    responses=error_responses(404, 409),
)
def pruning(
    project_id: ProjectId,
    state: State,
    settings: SettingsDep,
    dimension: Dimension = None,
    keep: Annotated[
        int | None, Query(ge=1, le=100_000, description="prompts to keep per tier")
    ] = None,
    target_se_ratio: Annotated[
        float | None,
        Query(
            ge=1.0,
            le=10.0,
            description="keep the fewest prompts whose expected SE stays within this ratio "
            "of the full set's (default 1.05 when keep is not given)",
        ),
    ] = None,
    tiers: Annotated[int, Query(ge=1, le=5, description="model tiers")] = 2,
) -> s.PruningPublic:
    """Which prompts to keep or drop for each model tier, with a reason for every prompt.

    Runs ``adaptive.pruning`` (fast item fits per tier) on the stored judgments on a
    background thread: the first request answers 409 ``pruning_pending``, later ones
    the result (cached per judgments seen and options).
    """
    if (keep is None) == (target_se_ratio is None):
        if keep is not None:
            raise ApiError(422, "validation_error", "give keep or target_se_ratio, not both")
        target_se_ratio = 1.05
    dim = _dimension(state, project_id, dimension)
    try:
        result = state.pruning(
            project_id,
            dim,
            keep=keep,
            target_se_ratio=target_se_ratio,
            num_tiers=tiers,
            seed=settings.seed,
        )
    except (ValueError, KeyError, IndexError) as exc:
        raise ApiError(422, "cannot_prune", f"cannot prune {dim!r}: {exc}") from None
    if result is None:
        raise ApiError(409, "no_snapshot", f"no judgments of dimension {dim!r} yet")
    if isinstance(result, Pending):
        raise ApiError(
            409,
            "pruning_pending",
            f"pruning of {dim!r} with {result.num_judgments} judgments is being computed; "
            "try again shortly",
        )
    return result


# ---------------------------------------------------------------- re-estimation events


@router.get("/projects/{project_id}/events", operation_id="list_events", tags=["analysis"])
def list_events(
    project_id: ProjectId,
    state: State,
    after_seq: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    kind: Annotated[
        str | None, Query(max_length=32, description="only events of this kind, e.g. rejected")
    ] = None,
) -> s.EventsPublic:
    """What re-estimation did, oldest first: every fast update and NUTS refit, its
    outcome and, for a rejected or failed one, why (e.g. max R-hat, divergences)."""
    with state.store.read() as conn:
        rows = repo.list_events(conn=conn, project_id=project_id, after_seq=after_seq, limit=limit)
    page_full = len(rows) == limit
    last = rows[-1]["seq"] if rows else None
    if kind is not None:
        rows = [r for r in rows if r["kind"] == kind]
    return s.EventsPublic(
        events=[s.EventPublic(**{k: v for k, v in r.items() if k != "project_id"}) for r in rows],
        next_after_seq=last if page_full else None,
    )
