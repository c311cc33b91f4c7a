"""The crowd round trip over HTTP: a lease's tasks with their texts, and results back in.

* ``GET /projects/{p}/leases/{lease_id}/tasks``: the leased cells as tasks in display
  order, with the prompt text and both responses (what a crowd platform shows);
* ``POST /projects/{p}/leases/{lease_id}/results``: a platform's results file (MTurk
  batch results CSV, Label Studio JSON export, survey CSV/JSONL) mapped to a/b
  through the lease and stored like ``POST /judgments`` (all or nothing,
  idempotent by judgment id);
* ``POST /projects/{p}/labelstudio/webhook``: Label Studio's ``ANNOTATION_CREATED``
  webhook, one annotation stored through the same path (its lease is the task's
  ``data.batch_id``).

The logic lives in :mod:`services.crowd`; this module only reads and writes the store.
"""

from __future__ import annotations

import io
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

import polars as pl
from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError
from sqlalchemy import select

from adaptive.core.data import DataError
from evalset.json_text import JsonTextError, parse_json_lines, parse_json_text
from services import schemas as s
from services.api.deps import ProjectId, State, WriteProjectId
from services.api.errors import ApiError
from services.crowd import TASK_COLUMNS, read_parsed_results, tasks_from_lease
from services.crowd.export import Platform
from services.crowd.labelstudio import (
    EXPECTED,
    EXPORT,
    LabelStudioAnnotation,
    LabelStudioTask,
    export_problems,
)
from services.store import repository as repo
from services.store import tables as t

if TYPE_CHECKING:
    from services.runtime.state import ServiceState

router = APIRouter()

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": s.ErrorPublic} for code in (401, 403, 404, 422)
}


class CrowdTask(BaseModel):
    """One task in display order (the annotator sees prompt, first and second response)."""

    batch_id: str
    task_id: str
    item_id: str
    dimension: str
    prompt: str
    system_first: str
    response_first: str
    system_second: str
    response_second: str
    system_a: str
    system_b: str
    shown_first: str


class IncompleteTask(BaseModel):
    task_id: str
    item_id: str
    system_a: str
    system_b: str
    missing: list[str] = Field(description="prompt, response_first and/or response_second")


class LeaseTasksPublic(BaseModel):
    lease_id: str
    annotator_id: str
    expires_at: datetime
    tasks: list[CrowdTask] = Field(description="tasks with every text, in display order")
    incomplete: list[IncompleteTask] = Field(
        description="leased cells that cannot be shown: a text was never registered"
    )


def _content_kind(value: Any) -> str:
    return "text" if isinstance(value, str) else "tasks"


class CrowdResultsCreate(BaseModel):
    """A platform's results file, as text (or Label Studio's export as parsed JSON)."""

    model_config = ConfigDict(extra="forbid")

    platform: Platform
    content: Annotated[
        Annotated[str, Tag("text")] | Annotated[list[LabelStudioTask], Tag("tasks")],
        Discriminator(_content_kind),
    ] = Field(
        description="the file's text: MTurk batch results CSV, Label Studio JSON export (a "
        "JSON array of task objects, as text or as the array itself), survey CSV (or JSONL "
        "with survey_format=jsonl). Never a file name: the server opens no file"
    )
    survey_format: Literal["csv", "jsonl"] = "csv"


class CrowdResultsPublic(BaseModel):
    accepted: int = Field(description="judgments newly stored")
    duplicates: int = Field(description="judgments already stored, or repeated in the file")
    num_rows: int = Field(description="answers in the file")
    skipped: dict[str, int] = Field(description="answers not imported on purpose, by reason")
    unanswered: list[str] = Field(description="task ids of the lease with no answer in the file")
    num_judgments: int = Field(
        description="judgments of the project after this import, those of gold "
        "(attention-check) cells included"
    )


LeaseId = Annotated[str, Path(min_length=1, max_length=200)]


def _lease_tasks(
    state: ServiceState, project_id: str, lease_id: str
) -> tuple[dict[str, Any], pl.DataFrame]:
    with state.store.read() as conn:
        row = conn.execute(
            select(t.leases).where(
                t.leases.c.project_id == project_id, t.leases.c.lease_id == lease_id
            )
        ).first()
        if row is None:
            raise ApiError(404, "not_found", f"no lease {lease_id!r} in this project")
        lease = row._asdict()
        wanted = {c["item_id"] for c in lease["cells"]}
        prompts = [
            p
            for p in repo.list_prompts(conn=conn, project_id=project_id)
            if p["prompt_id"] in wanted
        ]
    return lease, tasks_from_lease(lease, prompts, require_texts=False)


def _missing(task: dict[str, Any]) -> list[str]:
    return [c for c in ("prompt", "response_first", "response_second") if not task[c]]


@router.get(
    "/projects/{project_id}/leases/{lease_id}/tasks",
    operation_id="lease_tasks",
    tags=["recommendation"],
    summary="A lease's cells as crowd tasks, with prompt and response texts",
    responses=ERRORS,
)
def lease_tasks(project_id: ProjectId, lease_id: LeaseId, state: State) -> LeaseTasksPublic:
    """The leased cells in display order with the prompt and both responses; cells whose
    prompt text or response was never registered are listed apart (``incomplete``)."""
    lease, tasks = _lease_tasks(state, project_id, lease_id)
    rows = list(tasks.select(TASK_COLUMNS).iter_rows(named=True))
    return LeaseTasksPublic(
        lease_id=lease["lease_id"],
        annotator_id=lease["annotator_id"],
        expires_at=repo.as_utc(lease["expires_at"]),
        tasks=[CrowdTask(**r) for r in rows if not _missing(r)],
        incomplete=[
            IncompleteTask(
                **{k: r[k] for k in ("task_id", "item_id", "system_a", "system_b")},
                missing=_missing(r),
            )  # fmt: skip
            for r in rows
            if _missing(r)
        ],
    )


def _json_kind(value: Any) -> str:
    kinds = {str: "string", dict: "object", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _label_studio_tasks(content: str | list[LabelStudioTask]) -> list[LabelStudioTask]:
    """The export's tasks: the array itself, or the JSON text of one (never a path)."""
    if isinstance(content, list):
        return content
    try:
        data = parse_json_text(content)
    except JsonTextError as exc:
        task = "" if exc.row is None else f" (task {exc.row}, 0-based)"
        where = f"{exc.reason} at line {exc.line} column {exc.column}{task}"
        raise ApiError(
            422,
            "validation_error",
            f"content is not JSON: {where}; nothing was stored",
            [{"row": exc.row, "field": "content", "message": where}],
        ) from exc
    if not isinstance(data, list):
        raise ApiError(
            422,
            "validation_error",
            f"content of a Label Studio import is {EXPECTED}; got a JSON {_json_kind(data)}",
            [{"field": "content", "message": f"expected {EXPECTED}"}],
        )
    try:
        return EXPORT.validate_python(data)
    except ValidationError as exc:
        problems = [
            {"row": row, "field": None if field == "task" else field, "message": message}
            for row, field, _, message in export_problems(exc)
        ]
        rows = sorted({p["row"] for p in problems if p["row"] is not None})
        raise ApiError(
            422,
            "validation_error",
            f"content is not {EXPECTED} (task(s) {rows[:10]}, 0-based); nothing was stored",
            problems,
        ) from exc


def _parse(body: CrowdResultsCreate) -> Any:
    if body.platform == "labelstudio":
        return _label_studio_tasks(body.content)
    if not isinstance(body.content, str):
        raise ApiError(422, "validation_error", f"{body.platform} results are text (CSV)")
    data = io.BytesIO(body.content.encode())
    try:
        if body.platform == "survey" and body.survey_format == "jsonl":
            parse_json_lines(body.content)  # bounded depth, and the line of a bad one
            return pl.read_ndjson(data, infer_schema_length=None)
        return pl.read_csv(data, infer_schema=False)
    except JsonTextError as exc:
        raise ApiError(
            422,
            "validation_error",
            f"content is not JSON lines: {exc}; nothing was stored",
            [{"row": exc.row, "field": "content", "message": str(exc)}],
        ) from exc
    except Exception as exc:  # polars raises several error types for malformed text
        raise ApiError(422, "validation_error", f"content could not be parsed: {exc}") from exc


def _read_results(body: CrowdResultsCreate, tasks: Any) -> Any:
    """The platform's answers read through the lease's tasks (a 422 ``invalid_batch`` with
    one problem per bad row: ``row`` = 0-based answer)."""
    try:
        return read_parsed_results(_parse(body), tasks, body.platform, source_name="content")
    except DataError as exc:
        raise ApiError(
            422,
            "invalid_batch",
            exc.message,
            problems=[
                {
                    "row": p.row - 1,
                    "field": p.column,
                    "message": f"got {p.value!r}, expected {p.expected}",
                }
                for p in exc.problems
            ],
        ) from exc


@router.post(
    "/projects/{project_id}/leases/{lease_id}/results",
    operation_id="import_crowd_results",
    tags=["judgments"],
    summary="A crowd platform's results for a lease, stored as judgments",
    responses=ERRORS,
)
def import_crowd_results(
    project_id: WriteProjectId, lease_id: LeaseId, body: CrowdResultsCreate, state: State
) -> CrowdResultsPublic:
    """Map each answer's first/second to a/b through the lease and store the judgments,
    all or nothing; importing the same file again stores nothing new. A bad file is
    refused whole (``422 invalid_batch``) with one problem per bad row (``row`` = 0-based
    answer)."""
    _, tasks = _lease_tasks(state, project_id, lease_id)
    got = _read_results(body, tasks)
    # each answer is a draw of its cell by this lease (a routed cell's rates are this draw's)
    rows = [
        {**{k: (v or None) if k == "timestamp" else v for k, v in r.items()}, "lease_id": lease_id}
        for r in got.judgments.iter_rows(named=True)
    ]
    accepted = duplicates = 0
    with state.store.write() as conn:
        if rows:
            result = repo.add_judgments(conn=conn, project_id=project_id, judgments=rows)
            accepted, duplicates = result.inserted, result.duplicates
        # gold judgments counted too: an answer that counted only the ordinary ones would
        # tell, one judgment at a time, which cells are gold
        total = repo.count_judgments(conn=conn, project_id=project_id) + repo.count_gold_judgments(
            conn=conn, project_id=project_id
        )
    if rows and accepted:
        state.notify(project_id, result.dimensions, result.last_seq)
    return CrowdResultsPublic(
        accepted=accepted,
        duplicates=duplicates + got.duplicates,
        num_rows=got.num_rows,
        skipped=got.skipped,
        unanswered=list(got.unanswered),
        num_judgments=total,
    )


class LabelStudioWebhook(BaseModel):
    """Label Studio's webhook body for ``ANNOTATION_CREATED`` (the webhook's *send payload* on)."""

    model_config = ConfigDict(extra="allow")

    action: Literal["ANNOTATION_CREATED"] = Field(
        description="the only action stored; configure the webhook for it alone"
    )
    annotation: LabelStudioAnnotation
    task: LabelStudioTask = Field(description="the annotated task; data.batch_id is the lease")


@router.post(
    "/projects/{project_id}/labelstudio/webhook",
    operation_id="label_studio_webhook",
    tags=["judgments"],
    summary="Label Studio's ANNOTATION_CREATED webhook, stored as a judgment of its lease",
    responses=ERRORS,
)
def label_studio_webhook(
    project_id: WriteProjectId, body: LabelStudioWebhook, state: State
) -> CrowdResultsPublic:
    """The annotation goes the way of a results file of one task (``import_crowd_results``):
    judgment id ``labelstudio:<annotation id>:<task_id>``, so a later ``evalset crowd pull``
    of the same annotation stores nothing. Label Studio sends the project's token as the
    webhook's ``Authorization: Bearer`` header."""
    lease = body.task.data.batch_id if body.task.data else None
    if not lease:
        raise ApiError(
            422,
            "validation_error",
            "the task has no data.batch_id (the lease id evalset crowd push puts there)",
            [{"field": "task.data.batch_id", "message": "required"}],
        )
    task = body.task.model_copy(update={"annotations": [body.annotation]})
    results = CrowdResultsCreate(platform="labelstudio", content=[task])
    return import_crowd_results(project_id, lease, results, state)
