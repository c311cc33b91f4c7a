"""Every error is JSON: ``{"error": {"code", "message", "problems": [...]}}`` with a stable code.

Codes: ``unauthorized`` (401), ``forbidden`` (403), ``not_found`` (404),
``method_not_allowed`` (405), ``request_timeout`` (408), ``project_exists`` (409),
``no_snapshot`` (409), ``pruning_pending`` (409), ``significance_pending`` (409), ``elo_pending`` (409),
``item_fit_pending`` (409), ``recommendation_pending`` (409),
``no_repeated_cells`` (409), ``token_revoked`` (409), ``payload_too_large`` (413),
``invalid_batch`` (422: a row refers to something unknown or changes a stored
judgment), ``validation_error`` (422: the request does not match the schema, or an
id or text breaks :mod:`services.store.validation`; one problem per bad field,
``row`` = position in the batch), ``idempotency_key_reused`` (422), ``cannot_prune``
(422), ``cannot_fit`` (422), ``rate_limited`` (429, with ``Retry-After``), ``internal_error`` (500),
``unavailable`` (503, with ``Retry-After``: the store cannot take the request now, e.g. its
disk is full, its file locked, its server stopped; :func:`services.store.unavailable_reason`).

Every operation declares the codes it can return with this one body
(:func:`declare_errors`), so a generated client can read every error.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from services.store import unavailable_reason
from services.store.repository import StoreError

log = logging.getLogger("evalset.store")

#: seconds a client is told to wait (``Retry-After``) before sending again what a store
#: that could not take it refused (503)
RETRY_AFTER_SECONDS = 5

STATUS_OF_CODE = {
    "validation_error": 422,
    "project_exists": 409,
    "invalid_batch": 422,
    "snapshot_not_found": 404,
    "snapshot_conflict": 503,
}
CODE_OF_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    501: "not_implemented",
    503: "unavailable",
}

#: what each error status means, as the OpenAPI description says it
DESCRIPTIONS = {
    400: "the request line and headers exceed 16 KiB, or are not HTTP: refused by the HTTP "
    "server before the service reads the request, with a plain-text body",
    401: "missing or invalid bearer token (`unauthorized`)",
    403: "the token is another project's, or the project does not exist (`forbidden`)",
    404: "something the request names does not exist (`not_found`)",
    408: "the body did not arrive in time (`request_timeout`)",
    409: "not possible yet or any more (`project_exists`, `no_snapshot`, `pruning_pending`, "
    "`significance_pending`, `elo_pending`, `item_fit_pending`, `recommendation_pending`, "
    "`no_repeated_cells`, `token_revoked`)",
    413: "the body is larger than the limit (`payload_too_large`)",
    422: "the request is invalid (`validation_error`, `invalid_batch`, "
    "`idempotency_key_reused`, `cannot_prune`, `cannot_fit`), one problem per bad field",
    429: "too many requests (`rate_limited`); see the Retry-After header",
    500: "an unexpected error (`internal_error`)",
    503: "the store cannot take the request now: not reachable, busy, locked or its disk "
    "full (`unavailable`, `snapshot_conflict`); nothing was stored, send it again after "
    "Retry-After seconds (a batch sent again is stored once)",
}

#: the Retry-After header a 429 and a 503 declare
RETRY_AFTER_HEADER = {
    "Retry-After": {
        "description": "seconds to wait before trying again",
        "schema": {"type": "integer"},
    }
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` declaring the common error body for these status codes."""
    from services.schemas import ErrorPublic

    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        entry: dict[str, Any] = {"model": ErrorPublic, "description": DESCRIPTIONS[code]}
        if code in (429, 503):
            entry["headers"] = RETRY_AFTER_HEADER
        out[code] = entry
    return out


def declare_errors(app: FastAPI, *, admin_token: bool = True) -> None:
    """Declare on every operation the error codes the middleware and handlers can send.

    Every request can be refused by the HTTP server for an oversized head (400, plain
    text), meet the rate limit (429), an unexpected error (500) or an
    unreachable store (503); routes under ``/projects/{project_id}`` need the
    project's token (401, 403); a request with a body can be too large (413),
    too slow (408) or invalid (422); ``POST /projects`` needs the admin token when
    one is set (401). Codes a route adds itself (404, 409, ...) are declared on it;
    FastAPI's own 422 body (never sent: the handler below answers validation errors)
    is replaced by the common one.
    """
    from fastapi.openapi.utils import get_openapi

    from services.schemas import ErrorPublic

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        error_schema = ErrorPublic.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(error_schema.pop("$defs", {}))
        components["ErrorPublic"] = error_schema
        ref = {"$ref": "#/components/schemas/ErrorPublic"}
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                codes = {400, 429, 500, 503}
                params = operation.get("parameters", [])
                if path.startswith("/projects/{project_id}"):
                    codes |= {401, 403, 422}  # 422: a project id over 200 characters
                if path == "/health":  # the token is optional: without one, aggregates only
                    operation["security"] = [{}, {"HTTPBearer": []}]
                if path == "/projects" and method == "post":
                    if admin_token:
                        codes |= {401}
                    else:  # an open service (no admin token): anyone may create a project
                        operation["security"] = [{}]
                if method in ("post", "put", "patch", "delete"):
                    codes |= {408, 413, 422}
                if any(p.get("in") in ("query", "path", "header") for p in params):
                    codes |= {422}
                responses = operation.setdefault("responses", {})
                for code in sorted(codes | {int(c) for c in responses if c[0] in "45"}):
                    entry = responses.get(str(code), {})
                    entry["description"] = DESCRIPTIONS.get(code, entry.get("description", ""))
                    if code == 400:  # the HTTP server's answer (uvicorn/h11), not the service's
                        entry["content"] = {"text/plain": {"schema": {"type": "string"}}}
                    else:
                        entry["content"] = {"application/json": {"schema": ref}}
                    if code in (429, 503):
                        entry["headers"] = RETRY_AFTER_HEADER
                    responses[str(code)] = entry
        text = repr(schema["paths"])
        for unused in ("HTTPValidationError", "ValidationError"):
            if f"/{unused}'" not in text:
                components.pop(unused, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


class ApiError(Exception):
    """An error the API reports as is."""

    def __init__(
        self, status: int, code: str, message: str, problems: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.problems = problems or []


def error_body(
    code: str, message: str, problems: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "problems": problems or []}}


def _line_column(doc: Any, pos: int) -> tuple[int, int]:
    """1-based line and column of character ``pos`` of ``doc`` (the body's text)."""
    text = doc.decode("utf-8", "replace") if isinstance(doc, bytes) else str(doc or "")
    before = text[:pos]
    line = before.count("\n") + 1
    return line, pos - (before.rfind("\n") + 1) + 1


def _validation_problems(exc: RequestValidationError) -> list[dict[str, Any]]:
    problems = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            # FastAPI's loc is ("body", <character offset>): say where, as a person would
            pos = next((p for p in err.get("loc", ()) if isinstance(p, int)), 0)
            line, column = _line_column(getattr(exc, "body", None), pos)
            reason = str((err.get("ctx") or {}).get("error", "invalid JSON"))
            problems.append(
                {
                    "row": None,
                    "field": "body",
                    "message": f"not JSON: {reason} at line {line} column {column} "
                    f"(character {pos})",
                }
            )
            continue
        loc = [p for p in err.get("loc", ()) if p != "body"]
        row = None
        field = None
        # body.judgments.<row>.<field>, body.systems.<row>.<field>, query.<name>, and
        # body.content.tasks.<row>.<field> (a crowd import's Label Studio tasks)
        at = next((i for i, p in enumerate(loc) if isinstance(p, int) and i >= 1), None)
        if at is not None:
            row = loc[at]
            field = ".".join(str(p) for p in loc[at + 1 :]) or None
        elif loc:
            field = ".".join(str(p) for p in loc)
        message = str(err.get("msg", "invalid"))
        problems.append({"row": row, "field": field, "message": message})
    return problems


def retry_after_headers() -> dict[str, str]:
    return {"Retry-After": str(RETRY_AFTER_SECONDS)}


def unavailable_response(reason: str) -> JSONResponse:
    """503 ``unavailable`` with ``Retry-After``: the store cannot take the request now."""
    message = (
        f"the store cannot take the request now ({reason}); send it again after "
        f"{RETRY_AFTER_SECONDS} s (a batch sent again is stored once)"
    )
    return JSONResponse(
        error_body("unavailable", message), status_code=503, headers=retry_after_headers()
    )


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path (Starlette's 405 names only
    the first route's, though GET and POST of one path are separate routes)."""
    methods = []
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in request.app.router.routes):
            methods.append(method)
    return methods


def install(app: FastAPI) -> None:
    """Register the JSON error handlers on the app."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.problems), status_code=exc.status)

    @app.exception_handler(StoreError)
    async def _store_error(_: Request, exc: StoreError) -> JSONResponse:
        status = STATUS_OF_CODE.get(exc.code, 400)
        return JSONResponse(
            error_body(exc.code, exc.message, exc.problems),
            status_code=status,
            headers=retry_after_headers() if status == 503 else None,
        )

    @app.exception_handler(SQLAlchemyError)
    async def _store_unavailable(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        reason = unavailable_reason(exc)
        if reason is None:
            raise exc  # a defect: the 500 below, and the server logs it
        log.warning("%s %s: 503, %s (%s)", request.method, request.url.path, reason, exc.code)
        return unavailable_response(reason)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = _validation_problems(exc)
        rows = sorted({p["row"] for p in problems if p["row"] is not None})
        where = f" in row(s) {rows[:10]}" if rows else ""
        message = f"the request does not match the schema{where}; nothing was stored"
        if problems and problems[0]["field"] == "body" and problems[0]["message"][:8] == "not JSON":
            message = f"the body is {problems[0]['message']}; nothing was stored"
        return JSONResponse(error_body("validation_error", message, problems), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # a body that is not JSON (or not UTF-8): invalid like any other request
            reason = str(exc.detail)
            cause = exc.__cause__
            if isinstance(cause, UnicodeDecodeError):
                reason = f"not UTF-8: byte {cause.start} ({cause.reason})"
            elif isinstance(cause, RecursionError):
                reason = "JSON nested too deeply to parse"
            return JSONResponse(
                error_body(
                    "validation_error",
                    f"the body cannot be read: {reason}",
                    [{"field": "body", "message": reason}],
                ),
                status_code=422,
            )
        code = CODE_OF_STATUS.get(exc.status_code, "http_error")
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        return JSONResponse(
            error_body(code, str(exc.detail)),
            status_code=exc.status_code,
            headers=headers or None,
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            error_body("internal_error", f"unexpected error: {type(exc).__name__}"),
            status_code=500,
        )
