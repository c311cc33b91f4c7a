"""Dependencies of the routes (``Annotated[..., Depends(...)]``).

A router (every one :func:`services.api._routers` names)
gets what it needs by declaring parameters of these types:

* ``State``: the :class:`services.runtime.state.ServiceState` (``.store``,
  ``.settings``, ``.refresher``, ``.snapshot(project_id, dimension)``);
* ``StoreDep`` / ``SettingsDep``: the store and the settings alone;
* ``ProjectId``: the ``{project_id}`` path parameter, checked against the
  request's bearer token (401 without a valid token, 403 for another project's, and
  403 for a write-only token);
* ``WriteProjectId``: the same for the routes that post judgments and results (the
  judgments, a lease's results, the Label Studio webhook), which a write-only token
  opens too;
* ``PageProjectId``: the same for a page a browser opens (the dashboard), whose
  token may also come from ``?token=`` or the page's cookie.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.api.errors import ApiError
from services.api.limits import PAGE_TOKEN_COOKIE, admin_token_ok
from services.runtime.state import ServiceState
from services.settings import Settings
from services.store import Store
from services.store import repository as repo
from services.store.repository.projects import token_scope

_bearer = HTTPBearer(auto_error=False, description="the project's API token")


def get_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


def get_store(request: Request) -> Store:
    store: Store = request.app.state.service.store
    return store


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.service.settings
    return settings


State = Annotated[ServiceState, Depends(get_state)]
StoreDep = Annotated[Store, Depends(get_store)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def token_project(credentials: Credentials, state: State) -> str:
    """The project of the request's bearer token.

    Checked against the store at most every ``token_cache_seconds`` per token, so a
    revoked token stops working on every replica within that time.
    """
    if credentials is None or not credentials.credentials:
        raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer <token>)")
    project_id = state.tokens.get(
        state.store, credentials.credentials, state.settings.token_cache_seconds
    )
    if project_id is None:
        raise ApiError(401, "unauthorized", "invalid bearer token")
    return project_id


def writing_project(
    project_id: Annotated[str, Path(min_length=1, max_length=200)],
    token_of: Annotated[str, Depends(token_project)],
) -> str:
    """The path's project, when the token (of either scope) belongs to it."""
    if token_of != project_id:
        # the same answer whether or not the other project exists
        raise ApiError(403, "forbidden", "this token does not give access to that project")
    return project_id


def authorized_project(
    project_id: Annotated[str, Path(min_length=1, max_length=200)],
    token_of: Annotated[str, Depends(token_project)],
    credentials: Credentials,
) -> str:
    """The path's project, when the token belongs to it and is not write-only."""
    writing_project(project_id, token_of)
    _refuse_write_only(credentials.credentials if credentials is not None else "")
    return project_id


def _refuse_write_only(token: str) -> None:
    if token_scope(token) == "write":
        raise ApiError(
            403,
            "forbidden",
            "a write-only token posts judgments and results and reads nothing; "
            "use the project's token",
        )


ProjectId = Annotated[str, Depends(authorized_project)]
WriteProjectId = Annotated[str, Depends(writing_project)]


def gold_project(
    project_id: Annotated[str, Path(min_length=1, max_length=200)],
    credentials: Credentials,
    state: State,
) -> str:
    """The path's project for the gold routes: with an admin token set, only that token
    opens them (the project's token is the one an annotation tool holds, and these routes
    answer the gold cells' answers); without one, the project's token as elsewhere."""
    admin = state.settings.admin_token
    if not admin:
        return authorized_project(project_id, token_project(credentials, state), credentials)
    given = credentials.credentials if credentials is not None else None
    if not given:
        raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer <token>)")
    if not admin_token_ok(admin, given):
        raise ApiError(
            403, "forbidden", "the gold routes need the admin token, not a project's token"
        )
    with state.store.read() as conn:
        if repo.get_project(conn=conn, project_id=project_id) is None:
            raise ApiError(404, "not_found", f"no project {project_id!r}")
    return project_id


GoldProjectId = Annotated[str, Depends(gold_project)]


def request_page_token(request: Request) -> str | None:
    """The token of a page a browser opens: the bearer header, else ``?token=``, else the cookie.

    A browser sends no Authorization header when it navigates, so a page takes the
    token from the query string once and keeps it in a cookie of that page's path
    (see :mod:`services.api.routes.dashboard`). API routes keep taking the header only.
    """
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return request.query_params.get("token") or request.cookies.get(PAGE_TOKEN_COOKIE) or None


def page_project(
    project_id: Annotated[str, Path(min_length=1, max_length=200)],
    request: Request,
    state: State,
) -> str:
    """The path's project, when the page's token (:func:`request_page_token`) belongs to it.

    The token is looked up by its SHA-256 (never compared character by character) and
    the project ids are compared with ``hmac.compare_digest``; 401 and 403 as for
    :data:`ProjectId`.
    """
    token = request_page_token(request)
    if not token:
        raise ApiError(
            401, "unauthorized", "missing token (Authorization: Bearer <token>, or ?token=<token>)"
        )
    owner = state.tokens.get(state.store, token, state.settings.token_cache_seconds)
    if owner is None:
        raise ApiError(401, "unauthorized", "invalid token")
    if not hmac.compare_digest(owner.encode(), project_id.encode()):
        raise ApiError(403, "forbidden", "this token does not give access to that project")
    _refuse_write_only(token)
    return project_id


PageProjectId = Annotated[str, Depends(page_project)]
