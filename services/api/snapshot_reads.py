"""What the routes answering from posterior snapshots share: the dimension a request names
(or the project's default one), the newest snapshot of it, and a background answer or the
409 that says why it is not ready yet."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from adaptive.estimation.snapshot import Snapshot
from services import schemas as s
from services.api.deps import State
from services.api.errors import ApiError
from services.runtime.background import Pending
from services.store import repository as repo


def from_snapshot(snap: Snapshot) -> s.SnapshotPublic:
    """The snapshot an answer came from, as the answer names it."""
    return s.SnapshotPublic(
        dimension=snap.dimension,
        version=snap.version,
        num_judgments=snap.num_judgments,
        method=snap.method,
        created_at=datetime.fromtimestamp(snap.created_at, UTC),
        fit_seconds=snap.fit_seconds,
        diagnostics=snap.diagnostics,
    )


def resolve_dimension(state: State, project_id: str, dimension: str | None) -> str:
    """The dimension asked (404 when the project has no such one), else the project's only
    one or ``overall`` (422 when neither)."""
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


def snapshot_of(state: State, project_id: str, dimension: str, method: str | None) -> Snapshot:
    """The newest snapshot of ``dimension`` (of ``method``), or the 409 before there is one."""
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


def newest_snapshot(
    state: State, project_id: str, dimension: str | None, method: str | None
) -> Snapshot:
    """The snapshot a request answers from: of the dimension asked (or the default one),
    the newest of ``method``."""
    return snapshot_of(state, project_id, resolve_dimension(state, project_id, dimension), method)


def computed_answer(result: Any, dim: str, code: str, what: str) -> Any:
    """A background answer (services/runtime/background.py), or the 409 that says why not yet."""
    if result is None:
        raise ApiError(409, "no_snapshot", f"no judgments of dimension {dim!r} yet")
    if isinstance(result, Pending):
        raise ApiError(
            409,
            code,
            f"{what} of {dim!r} with {result.num_judgments} judgments is being computed; "
            "try again shortly",
        )
    return result
