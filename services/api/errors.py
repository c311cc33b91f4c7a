"""Every error is JSON: ``{"error": {"code", "message", "problems": [...]}}`` with a stable code.

Codes: ``unauthorized`` (401), ``forbidden`` (403), ``not_found`` (404),
``method_not_allowed`` (405), ``project_exists`` (409), ``no_snapshot`` (409),
``payload_too_large`` (413), ``invalid_batch`` (422: a row refers to something
unknown or changes a stored judgment), ``validation_error`` (422: the request
does not match the schema; one problem per bad field, ``row`` = position in the
batch), ``not_implemented`` (501), ``internal_error`` (500).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.store.repository import StoreError

STATUS_OF_CODE = {
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
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    501: "not_implemented",
}


class ApiError(Exception):
    """An error the API reports as is."""

    def __init__(
        self, status: int, code: str, message: str, problems: list[dict] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.problems = problems or []


def error_body(code: str, message: str, problems: list[dict] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "problems": problems or []}}


def _validation_problems(exc: RequestValidationError) -> list[dict]:
    problems = []
    for err in exc.errors():
        loc = [p for p in err.get("loc", ()) if p != "body"]
        row = None
        field = None
        # body.judgments.<row>.<field>, body.systems.<row>.<field>, query.<name>
        if len(loc) >= 2 and isinstance(loc[1], int):
            row = loc[1]
            field = ".".join(str(p) for p in loc[2:]) or None
        elif loc:
            field = ".".join(str(p) for p in loc)
        message = str(err.get("msg", "invalid"))
        problems.append({"row": row, "field": field, "message": message})
    return problems


def install(app: FastAPI) -> None:
    """Register the JSON error handlers on the app."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.problems), status_code=exc.status)

    @app.exception_handler(StoreError)
    async def _store_error(_: Request, exc: StoreError) -> JSONResponse:
        status = STATUS_OF_CODE.get(exc.code, 400)
        return JSONResponse(error_body(exc.code, exc.message, exc.problems), status_code=status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = _validation_problems(exc)
        rows = sorted({p["row"] for p in problems if p["row"] is not None})
        where = f" in row(s) {rows[:10]}" if rows else ""
        message = f"the request does not match the schema{where}; nothing was stored"
        return JSONResponse(error_body("validation_error", message, problems), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = CODE_OF_STATUS.get(exc.status_code, "http_error")
        return JSONResponse(
            error_body(code, str(exc.detail)),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            error_body("internal_error", f"unexpected error: {type(exc).__name__}"),
            status_code=500,
        )
