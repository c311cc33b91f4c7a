"""Read crowd results back as judgments, mapped to a/b through the batch's task table.

Three formats:

* **MTurk** batch results CSV (``HITId, AssignmentId, WorkerId, AssignmentStatus,
  SubmitTime, ..., Input.<column>, Answer.preference.label``). Rejected
  assignments are skipped. ``judgment_id = mturk:<AssignmentId>:<task_id>``.
* **Label Studio** JSON export (``[{"id", "data": {...}, "annotations": [{"id",
  "completed_by", "result": [{"from_name": "preference", "type": "choices",
  "value": {"choices": ["First"]}}], "was_cancelled", "created_at"}]}]``).
  Cancelled (skipped) annotations are skipped. ``judgment_id =
  labelstudio:<annotation id>:<task_id>``.
* **Survey** CSV/JSONL (``PROLIFIC_PID`` or ``annotator_id``, optional ``STUDY_ID``,
  ``SESSION_ID``, ``timestamp``; ``task_id``, ``choice``). ``judgment_id =
  survey:<SESSION_ID or participant>:<task_id>``.

A choice is ``First``/``Second``/``Tie`` (case-insensitive; ``1``/``2``,
``response 1``/``response 2``, ``left``/``right`` also accepted). The winner is
read from the task table's ``shown_first``, never from anything the platform
echoes; echoed ``Input.item_id`` / ``data.item_id`` must agree with the table.

**Time on task**, where the platform records it per answer: MTurk's ``WorkTimeInSeconds``
(one task per assignment) and Label Studio's ``lead_time``; the survey format has none.
It comes back beside the judgments (:attr:`CrowdImport.seconds`, by judgment id), not as a
column of them: the store keeps judgments, not their timing.

Idempotent: judgment ids come from the platform's own ids, so importing a file
twice (or a file that repeats rows) stores each judgment once; a repeated id
with a different answer is an error. A file with any bad row is refused whole,
with one problem per bad row.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from adaptive.core.data import (
    JUDGMENT_FIELDS,
    DataError,
    RowProblem,
    as_polars,
    validate_judgments,
)
from adaptive.core.formats import mturk_time
from adaptive.core.json_text import JsonTextError, parse_json_text
from services.crowd.export import ANSWER_NAME
from services.crowd.labelstudio import LabelStudioData, parse_export

FIRST, SECOND, TIE = "first", "second", "tie"
_CHOICES = {
    "first": FIRST,
    "1": FIRST,
    "response 1": FIRST,
    "left": FIRST,
    "second": SECOND,
    "2": SECOND,
    "response 2": SECOND,
    "right": SECOND,
    "tie": TIE,
    "same": TIE,
    "equal": TIE,
}


class CrowdImport(NamedTuple):
    """Judgments read from one results file, and what was not turned into one."""

    judgments: pl.DataFrame  #: validated, in the common schema, in file order
    platform: str
    num_rows: int  #: answers read (rows of a CSV, annotations of a Label Studio export)
    skipped: dict[str, int]  #: reason -> answers not imported on purpose
    duplicates: int  #: answers repeated in the file (same judgment id, same answer)
    unanswered: tuple[str, ...]  #: task ids of the batch with no judgment in the file
    #: judgment_id, seconds (Float64, null when not recorded): time on task, in file order
    seconds: pl.DataFrame


class _Answer(NamedTuple):
    row: int
    column: str
    task_id: str
    choice: str
    annotator: str
    key: str
    timestamp: str
    echoed_item: str | None
    echoed_batch: str | None
    seconds: float | None = None


#: the columns of a results table that hold ids (a worker, a session, a task, ...)
_ID_COLUMNS = ("PROLIFIC_PID", "annotator_id", "STUDY_ID", "SESSION_ID", "task_id", "item_id",
               "batch_id", "HITId", "AssignmentId", "WorkerId", "Input.task_id",
               "Input.item_id", "Input.batch_id")  # fmt: skip


def _refuse_nested_ids(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    """``frame``, unless an id column holds objects or lists (refused by row: an object is
    never an id, and its text, e.g. ``{[1]}``, is not one either)."""
    problems = [
        RowProblem(k, column, str(value)[:80], "an id (a string), not an object or a list")
        for column in _ID_COLUMNS
        if column in frame.columns and frame.schema[column].is_nested()
        for k, value in enumerate(frame[column].to_list(), start=1)
        if value is not None
    ]
    if problems:
        raise DataError(name, sorted(problems, key=lambda p: (p.row, p.column)))
    return frame


def _to_frame(source: Any) -> pl.DataFrame:
    """A CSV/JSONL path named on this machine as an all-text polars frame."""
    path = Path(source)
    if not path.exists():
        raise DataError(str(path), message="file not found")
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        frame = pl.read_ndjson(path, infer_schema_length=None)
        return _refuse_nested_ids(frame, str(path)).with_columns(pl.all().cast(pl.Utf8))
    return pl.read_csv(path, infer_schema=False)


def _frame(source: Any, name: str) -> pl.DataFrame:
    """A polars or a pandas frame as an all-text polars frame (never a path)."""
    if isinstance(source, pl.DataFrame) or hasattr(source, "columns"):  # polars or pandas
        frame = _refuse_nested_ids(as_polars(source), name)
        return frame.with_columns(pl.all().cast(pl.Utf8))
    raise DataError(name, message=f"expected a table of results, got {type(source).__name__}")


def _source_name(source: Any) -> str:
    return str(source) if isinstance(source, str | Path) else f"<{type(source).__name__}>"


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _seconds(value: Any) -> float | None:
    """A recorded time on task in seconds; None when absent or not a number >= 0 (timing is
    information about an answer, never a reason to refuse it)."""
    try:
        seconds = float(_text(value))
    except ValueError:
        return None
    return seconds if seconds >= 0 and seconds != float("inf") else None


def _mturk_answers(frame: pl.DataFrame, source: str) -> tuple[list[_Answer], dict[str, int]]:
    answer_col = next(
        (
            c
            for c in (f"Answer.{ANSWER_NAME}.label", f"Answer.{ANSWER_NAME}", "Answer.choice")
            if c in frame.columns
        ),
        None,
    )
    need = ["HITId", "AssignmentId", "WorkerId", "Input.task_id"]
    missing = [c for c in need if c not in frame.columns] + (
        [] if answer_col else [f"Answer.{ANSWER_NAME}.label"]
    )
    if missing:
        raise DataError(
            source,
            message=f"not an MTurk batch results file for this template: missing {missing}",
        )
    assert answer_col is not None  # else it is missing (above)
    skipped: dict[str, int] = {}
    out = []
    for k, r in enumerate(frame.iter_rows(named=True), start=1):
        if _text(r.get("AssignmentStatus")) == "Rejected":
            skipped["rejected assignment"] = skipped.get("rejected assignment", 0) + 1
            continue
        task = _text(r["Input.task_id"])
        out.append(
            _Answer(
                row=k,
                column=answer_col,
                task_id=task,
                choice=_text(r[answer_col]),
                annotator=_text(r["WorkerId"]),
                key=f"mturk:{_text(r['AssignmentId'])}:{task}",
                timestamp=mturk_time(_text(r.get("SubmitTime"))) or "",
                echoed_item=_text(r["Input.item_id"]) if "Input.item_id" in r else None,
                echoed_batch=_text(r["Input.batch_id"]) if "Input.batch_id" in r else None,
                seconds=_seconds(r.get("WorkTimeInSeconds")),
            )
        )
    return out, skipped


def _load_label_studio_file(source: str | Path, name: str) -> Any:
    """The parsed JSON of an export file named on this machine (the command line's path)."""
    path = Path(source)
    if not path.exists():
        raise DataError(name, message="file not found")
    try:
        return parse_json_text(path.read_bytes())
    except JsonTextError as exc:
        raise DataError(name, message=f"not JSON: {exc}") from exc


def _label_studio_answers(data: Any, name: str) -> tuple[list[_Answer], dict[str, int]]:
    skipped: dict[str, int] = {}
    out: list[_Answer] = []
    k = 0
    for t, task in enumerate(parse_export(data, name), start=1):
        fields = task.data or LabelStudioData()
        task_id = _text(fields.task_id)
        for ann in task.annotations or []:
            k += 1
            if ann.was_cancelled:
                skipped["cancelled annotation"] = skipped.get("cancelled annotation", 0) + 1
                continue
            picks = [
                r.value.choices or []
                for r in ann.result or []
                if r.from_name == ANSWER_NAME and r.type == "choices"
            ]
            choice = (
                picks[0][0]
                if picks and len(picks[0]) == 1
                else ("|".join(picks[0]) if picks else "")
            )
            who = ann.completed_by
            if isinstance(who, Mapping):
                who = who.get("email") or who.get("id")
            out.append(
                _Answer(
                    row=k,
                    column=f"tasks[{t - 1}].annotations.result.value.choices",
                    task_id=task_id,
                    choice=_text(choice),
                    annotator=f"ls_{_text(who)}" if _text(who) else "",
                    key=f"labelstudio:{_text(ann.id)}:{task_id}",
                    timestamp=_text(ann.created_at),
                    echoed_item=None if fields.item_id is None else _text(fields.item_id),
                    echoed_batch=None if fields.batch_id is None else _text(fields.batch_id),
                    seconds=_seconds((ann.model_extra or {}).get("lead_time")),
                )
            )
    return out, skipped


def _survey_answers(frame: pl.DataFrame, source: str) -> tuple[list[_Answer], dict[str, int]]:
    who_col = "PROLIFIC_PID" if "PROLIFIC_PID" in frame.columns else "annotator_id"
    missing = [c for c in ("task_id", "choice", who_col) if c not in frame.columns]
    if missing:
        raise DataError(
            source,
            message=f"missing survey column(s) {missing}; expected PROLIFIC_PID (or "
            "annotator_id), task_id, choice and optionally STUDY_ID, SESSION_ID, timestamp",
        )
    out = []
    for k, r in enumerate(frame.iter_rows(named=True), start=1):
        task = _text(r["task_id"])
        session = _text(r.get("SESSION_ID")) or _text(r[who_col])
        out.append(
            _Answer(
                row=k,
                column="choice",
                task_id=task,
                choice=_text(r["choice"]),
                annotator=_text(r[who_col]),
                key=f"survey:{session}:{task}",
                timestamp=_text(r.get("timestamp")),
                echoed_item=_text(r["item_id"]) if "item_id" in r else None,
                echoed_batch=_text(r["batch_id"]) if "batch_id" in r else None,
            )
        )
    return out, {}


def _judgments(
    answers: list[_Answer], tasks: pl.DataFrame, source: str
) -> tuple[list[dict[str, Any]], list[RowProblem], int]:
    by_task = {r["task_id"]: r for r in tasks.iter_rows(named=True)}
    batches = sorted(set(tasks["batch_id"].to_list()))
    problems: list[RowProblem] = []
    rows: dict[str, dict[str, Any]] = {}
    duplicates = 0
    for a in answers:
        task = by_task.get(a.task_id)
        if task is None:
            problems.append(
                RowProblem(a.row, "task_id", a.task_id, f"a task of batch {', '.join(batches)}")
            )
            continue
        if a.echoed_batch not in (None, "", task["batch_id"]):
            problems.append(RowProblem(a.row, "batch_id", a.echoed_batch, task["batch_id"]))
        if a.echoed_item not in (None, "", task["item_id"]):
            problems.append(
                RowProblem(
                    a.row, "item_id", a.echoed_item, f"{task['item_id']!r} (task {a.task_id})"
                )
            )
        choice = _CHOICES.get(a.choice.lower())
        if choice is None:
            problems.append(RowProblem(a.row, a.column, a.choice, "'First', 'Second' or 'Tie'"))
            continue
        if not a.annotator:
            problems.append(RowProblem(a.row, "annotator", "", "a worker/participant id"))
            continue
        first_side = task["shown_first"]
        winner = (
            "tie"
            if choice == TIE
            else first_side
            if choice == FIRST
            else ("b" if first_side == "a" else "a")
        )
        row = {
            "judgment_id": a.key,
            "item_id": task["item_id"],
            "system_a": task["system_a"],
            "system_b": task["system_b"],
            "annotator_id": a.annotator,
            "winner": winner,
            "dimension": task["dimension"],
            "shown_first": first_side,
            "timestamp": a.timestamp,
        }
        if a.key in rows:
            if rows[a.key] == row:
                duplicates += 1
            else:
                problems.append(
                    RowProblem(a.row, "judgment_id", a.key, "the same answer as its first row")
                )
            continue
        rows[a.key] = row
    return list(rows.values()), problems, duplicates


def read_results(source: Any, tasks: pl.DataFrame, platform: str | None = None) -> CrowdImport:
    """Read one results file of a batch and turn it into judgments.

    The one reader that opens a path: for files named on this machine (``evalset crowd
    import``, notebooks). The service never calls it; it hands
    :func:`read_parsed_results` what the request holds.

    Args:
        source: a path (``.csv``/``.jsonl``/``.json``), a polars or pandas frame
            (MTurk, survey), or the parsed Label Studio export (a list).
        tasks: the batch's task table (``tasks.csv`` of the export, or
            :func:`services.crowd.tasks.tasks_from_lease`).
        platform: ``mturk``, ``labelstudio`` or ``survey``; guessed when omitted
            (a ``.json`` file or a list is Label Studio, ``HITId`` columns MTurk).

    Returns:
        A :class:`CrowdImport`.

    Raises:
        DataError: the file is not of the platform, or any answer is bad (one
            problem per bad row; nothing is returned).
    """
    name = _source_name(source)
    if isinstance(source, str | Path):
        if platform == "labelstudio" or (
            platform is None and Path(source).suffix.lower() == ".json"
        ):
            platform = "labelstudio"
            source = _load_label_studio_file(source, name)
        else:
            source = _to_frame(source)
    return read_parsed_results(source, tasks, platform, source_name=name)


def read_parsed_results(
    data: Any, tasks: pl.DataFrame, platform: str | None = None, *, source_name: str = ""
) -> CrowdImport:
    """:func:`read_results` of results already in memory; never opens a file.

    ``data`` is the parsed Label Studio export (a list of task objects) or a polars or
    pandas frame (MTurk, survey); anything else, a string included, is a
    :class:`DataError`.
    """
    name = source_name or f"<{type(data).__name__}>"
    if platform is None:
        if isinstance(data, list):
            platform = "labelstudio"
        else:
            platform = "mturk" if "HITId" in _frame(data, name).columns else "survey"
    if platform == "labelstudio":
        answers, skipped = _label_studio_answers(data, name)
    elif platform == "mturk":
        answers, skipped = _mturk_answers(_frame(data, name), name)
    elif platform == "survey":
        answers, skipped = _survey_answers(_frame(data, name), name)
    else:
        raise ValueError(f"unknown platform {platform!r}; expected mturk, labelstudio or survey")
    rows, problems, duplicates = _judgments(answers, tasks, name)
    timed: dict[str, float | None] = {}
    for a in answers:
        timed.setdefault(a.key, a.seconds)
    if problems:
        problems.sort(key=lambda p: (p.row, p.column))
        raise DataError(name, problems)
    done = {a.task_id for a in answers if a.key in {r["judgment_id"] for r in rows}}
    unanswered = tuple(t for t in tasks["task_id"].to_list() if t not in done)
    if rows:
        frame = pl.DataFrame(rows, schema={c: pl.Utf8 for c in JUDGMENT_FIELDS})
        judgments = validate_judgments(frame, source=name).drop("row")
    else:
        judgments = pl.DataFrame(schema={c: pl.Utf8 for c in JUDGMENT_FIELDS})
    return CrowdImport(
        judgments=judgments,
        platform=platform,
        num_rows=len(answers) + sum(skipped.values()),
        skipped=skipped,
        duplicates=duplicates,
        unanswered=unanswered,
        seconds=pl.DataFrame(
            {
                "judgment_id": [r["judgment_id"] for r in rows],
                "seconds": [timed.get(r["judgment_id"]) for r in rows],
            },
            schema={"judgment_id": pl.Utf8, "seconds": pl.Float64},
        ),
    )
