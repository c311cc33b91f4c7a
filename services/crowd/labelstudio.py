"""The shape of a Label Studio JSON export, checked before anything reads it.

One pydantic model serves both edges: the HTTP route declares ``content`` with it
(so the OpenAPI schema says what a Label Studio import holds) and the reader
(:func:`services.crowd.results.read_results`) validates the parsed export with it,
whether it came from a request or from a file named on the command line. Fields
that become part of a judgment (``data.task_id``, ``data.item_id``, ``data.batch_id``,
the annotator, the annotation id) follow the one rule for ids of
:mod:`services.store.validation` (through :data:`services.schemas.Name`).

Everything else Label Studio writes (``lead_time``, ``updated_by``, ...) is allowed
and ignored. A task or an annotation that is not an object is a problem of its row
(0-based task), never an error of the server.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from adaptive.core.data import DataError, RowProblem
from services.schemas import Name

__all__ = [
    "LabelStudioAnnotation",
    "LabelStudioTask",
    "export_problems",
    "parse_export",
]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class LabelStudioValue(_Open):
    choices: list[str] | None = Field(default=None, description="the chosen labels")


class LabelStudioResult(_Open):
    from_name: str | None = Field(default=None, description="the control's name (preference)")
    type: str = "choices"
    value: LabelStudioValue = Field(default_factory=LabelStudioValue)


class LabelStudioAnnotation(_Open):
    """One annotator's answer to a task."""

    id: int | Name | None = Field(default=None, description="part of the judgment id")
    completed_by: int | Name | dict[str, Any] | None = Field(
        default=None, description="the annotator: an id, or an object with email or id"
    )
    result: list[LabelStudioResult] | None = None
    was_cancelled: bool | None = False
    created_at: Name | None = None


class LabelStudioData(_Open):
    """The task's data: what ``evalset crowd export`` wrote (texts and ids)."""

    task_id: Name | None = None
    item_id: Name | None = None
    batch_id: Name | None = None


class LabelStudioTask(_Open):
    """One task of the export with its annotations."""

    id: int | Name | None = None
    data: LabelStudioData | None = None
    annotations: list[LabelStudioAnnotation] | None = None


EXPORT = TypeAdapter(list[LabelStudioTask])
EXPECTED = "a Label Studio JSON export: a list of task objects"


def export_problems(exc: ValidationError) -> list[tuple[int | None, str, str, str]]:
    """``(0-based task, field, what was found, message)`` for each error of :data:`EXPORT`."""
    out = []
    for err in exc.errors():
        loc = list(err.get("loc", ()))
        row = loc[0] if loc and isinstance(loc[0], int) else None
        field = ".".join(str(p) for p in loc[1:]) or "task"
        message = str(err.get("msg", "invalid"))
        if field == "task":
            message += " (a task is an object with data and annotations)"
        found = json.dumps(err.get("input"), default=str)
        out.append((row, field, found if len(found) <= 80 else found[:77] + "...", message))
    return out


def parse_export(data: Any, source: str) -> list[LabelStudioTask]:
    """The export's tasks, or :class:`DataError` naming each bad task (1-based row)."""
    if not isinstance(data, list):
        raise DataError(source, message=f"expected {EXPECTED}, got {type(data).__name__}")
    try:
        return EXPORT.validate_python(data)
    except ValidationError as exc:
        raise DataError(
            source,
            [
                RowProblem((row if row is not None else -1) + 1, field, found, message)
                for row, field, found, message in export_problems(exc)
            ],
        ) from exc
