"""The HTTP API (FastAPI): projects, catalogue, judgments, and answers from snapshots.

``create_app(settings)`` builds the app from the routers :func:`_routers` names; each
module exposes ``router`` (a ``fastapi.APIRouter``) and gets the store, settings and
snapshots through the dependencies of :mod:`services.api.deps`, e.g.::

    from fastapi import APIRouter
    from services.api.deps import ProjectId, State

    router = APIRouter()

    @router.get("/projects/{project_id}/next-batch", operation_id="next_batch")
    def next_batch(project_id: ProjectId, state: State) -> dict:
        snap = state.snapshot(project_id, "overall")        # newest snapshot or None
        with state.store.write() as conn:                   # one transaction
            ...                                             # services.store.repository.*
        return {...}

Errors raised as :class:`services.api.errors.ApiError` become the common JSON error body.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI

from services.api import docs_ui, errors
from services.api.limits import Guard
from services.api.routes import analysis, dashboard
from services.api.routes.judgments import router as judgments_router
from services.api.routes.projects import router as core_router
from services.jax_cache import configure_jax
from services.runtime.state import ServiceState
from services.runtime.worker import WorkerProcess
from services.settings import Settings

__all__ = ["create_app"]


def _routers() -> list[APIRouter]:
    """The routers beside the core and analysis ones, in the order the API lists them
    (imported when an app is built, not when this package is)."""
    from services.api.routes import (
        agreement,
        crowd,
        decisions,
        gold,
        hybrid,
        item_fit,
        next_batch,
        questions,
    )

    return [
        next_batch.router,
        crowd.router,
        decisions.router,
        questions.router,
        agreement.router,
        gold.router,
        hybrid.router,
        item_fit.router,
        dashboard.router,
    ]


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API over the store named by ``settings`` (default: from ``EVALSET_*``)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_jax()
        # the worker process, when there is one, is only a notifier to the state
        state = ServiceState.create(settings, worker_fn=WorkerProcess)
        app.state.service = state
        state.start()
        try:
            yield
        finally:
            state.stop()

    app = FastAPI(
        title="evalset",
        summary="Adaptive evaluation-set optimizer for human pairwise evaluation",
        description=(
            "Post pairwise judgments as they come in and ask where the comparisons stand. "
            "Every answer names the posterior snapshot it came from. Errors are "
            '`{"error": {"code", "message", "problems"}}`.'
        ),
        version="0.1.0",
        lifespan=lifespan,
        # served by docs_ui from vendored files: the default pages load them from a CDN
        docs_url=None,
        redoc_url=None,
    )
    errors.install(app)
    # authentication, rate limit and a bounded body read before any route parses anything
    app.add_middleware(Guard)
    # in front of the Guard: the dashboard's ?token= or cookie becomes its bearer header
    dashboard.install(app)
    docs_ui.install(app)
    app.include_router(core_router)
    app.include_router(judgments_router)
    app.include_router(analysis.router)
    for router in _routers():
        app.include_router(router)
    errors.declare_errors(app, admin_token=bool(settings.admin_token))
    return app
