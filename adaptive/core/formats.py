"""Raw public formats recognised by their columns and turned into the common schema.

* **PandaLM-style records** (``idx, cmp_key, instruction, input, response1, response2,
  annotator1, annotator2, annotator3``; values ``0`` tie, ``1`` response1 wins, ``2``
  response2 wins): one judgment per annotator column (``annotator_id`` = the column's
  name; an empty vote is no judgment). ``system_a`` / ``system_b`` come from
  ``cmp_key`` (``<system_a>_<system_b>``, one underscore) unless the file (or ``--map``)
  has them. The prompt: ``item_id`` when the file (or ``--map``) has it, else
  ``question_id``, else the ``idx`` of the first record with the same ``instruction``
  and ``input`` (the records of one prompt share it).
* **Label Studio JSON exports** (``[{"id", "data": {...}, "annotations": [{"id",
  "completed_by", "result", "was_cancelled", "created_at"}]}]``): one row per annotation
  that was not cancelled, the task's ``data`` keys as columns, ``annotator_id`` =
  ``completed_by`` (an email or id), ``timestamp`` = ``created_at``, ``judgment_id`` =
  ``labelstudio:<annotation id>:<task id>``, and each control's answer (a ``choices``
  label, a ``pairwise`` ``left``/``right``) in a column named by the control; with one
  control that column is ``choice`` too.
* **MTurk batch results** (``HITId, AssignmentId, WorkerId, AssignmentStatus,
  SubmitTime, Input.<column>, Answer.<name>``): ``Input.`` columns without the prefix,
  ``annotator_id`` = ``WorkerId``, ``judgment_id`` = ``mturk:<AssignmentId>[:<task_id>]``,
  ``timestamp`` = ``SubmitTime`` (as ISO 8601), the one ``Answer.`` column as ``choice``;
  rejected assignments are left out.
* A **choice** column (without ``winner``): ``a``/``b``/``tie``, ``First``/``Second``
  (``1``/``2``, ``response 1``/``response 2``, ``left``/``right``: the side shown first,
  ``shown_first`` when the file has it, else ``a``), ``Tie`` (``same``, ``equal``);
  case-insensitive.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import polars as pl

from adaptive.core.raw_files import Problem

ANNOTATOR_COLUMN = re.compile(r"annotator\d+")
PANDALM_VOTES: dict[str, str] = {"0": "tie", "1": "a", "2": "b", "a": "a", "b": "b", "tie": "tie"}
_FIRST, _SECOND = "first", "second"
CHOICES: dict[str, str] = {
    "a": "a", "b": "b", "tie": "tie", "same": "tie", "equal": "tie",
    "first": _FIRST, "1": _FIRST, "response 1": _FIRST, "left": _FIRST,
    "second": _SECOND, "2": _SECOND, "response 2": _SECOND, "right": _SECOND,
}  # fmt: skip
MTURK_COLUMNS: tuple[str, ...] = ("HITId", "AssignmentId", "WorkerId")


def annotator_columns(columns: Sequence[str]) -> list[str]:
    """PandaLM's vote columns (``annotator1``, ``annotator2``, ...) in number order."""
    found = [c for c in columns if ANNOTATOR_COLUMN.fullmatch(c)]
    return sorted(found, key=lambda c: int(c[len("annotator") :]))


def is_pandalm(columns: Sequence[str]) -> bool:
    return bool(annotator_columns(columns)) and "winner" not in columns


def pandalm_to_judgments(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[Problem]]:
    """PandaLM-style records (text columns, ``row``) as judgments in the common schema.

    Example:
        >>> out, _ = pandalm_to_judgments(pl.DataFrame({"idx": ["0", "1"],
        ...     "cmp_key": ["x_y", "x_z"], "instruction": ["say hi", "say hi"], "input": [None, None],
        ...     "annotator1": ["1", "0"], "annotator2": ["2", None], "row": [1, 2]}))
        >>> out.select("item_id", "system_b", "annotator_id", "winner").rows()
        [('0', 'y', 'annotator1', 'a'), ('0', 'y', 'annotator2', 'b'), ('0', 'z', 'annotator1', 'tie')]
    """  # noqa: E501
    votes = annotator_columns(frame.columns)
    problems: list[Problem] = []
    frame = _pandalm_systems(frame, problems).with_columns(_pandalm_item(frame))
    keep = [c for c in ("item_id", "system_a", "system_b", "dimension", "timestamp")
            if c in frame.columns]  # fmt: skip
    long = frame.select(keep + ["row"] + votes).unpivot(
        index=keep + ["row"], on=votes, variable_name="annotator_id", value_name="given"
    )
    order = {c: k for k, c in enumerate(votes)}
    long = long.filter(pl.col("given").is_not_null() & (pl.col("given").str.strip_chars() != ""))
    long = long.with_columns(
        pl.col("annotator_id").replace_strict(order, return_dtype=pl.Int64).alias("_k"),
        pl.col("given")
        .str.strip_chars()
        .str.to_lowercase()
        .replace_strict(PANDALM_VOTES, default=None)
        .alias("winner"),  # fmt: skip
    ).sort("row", "_k")
    for row, column, given in (
        long.filter(pl.col("winner").is_null()).select("row", "annotator_id", "given").iter_rows()
    ):
        problems.append((row, column, given, "0 (tie), 1 (response1 wins) or 2 (response2 wins)"))
    return long.drop("_k", "given"), problems


def _pandalm_systems(frame: pl.DataFrame, problems: list[Problem]) -> pl.DataFrame:
    if {"system_a", "system_b"} <= set(frame.columns) or "cmp_key" not in frame.columns:
        return frame  # the missing columns are named by the schema's check
    parts = frame["cmp_key"].str.split("_")
    for row, key, split in zip(frame["row"], frame["cmp_key"], parts):
        if split is None or len(split) != 2 or not all(split):
            problems.append((row, "cmp_key", str(key) if key is not None else "<empty>",
                             "<system_a>_<system_b> with one underscore (else map system_a "
                             "and system_b with --map)"))  # fmt: skip
    return frame.with_columns(
        parts.list.get(0, null_on_oob=True).alias("system_a"),
        parts.list.get(1, null_on_oob=True).alias("system_b"),
    )


def _pandalm_item(frame: pl.DataFrame) -> pl.Expr:
    if "item_id" in frame.columns:
        return pl.col("item_id")
    if "question_id" in frame.columns:
        return pl.col("question_id").alias("item_id")
    first = pl.col("idx") if "idx" in frame.columns else pl.col("row").cast(pl.Utf8)
    prompt = [c for c in ("instruction", "input") if c in frame.columns]
    if not prompt:
        return first.alias("item_id")
    return first.first().over([pl.col(c).fill_null("") for c in prompt]).alias("item_id")


def label_studio_rows(tasks: list[Any]) -> tuple[list[dict[str, Any]], list[int], list[Problem]]:
    """One record per annotation of a Label Studio export (cancelled ones left out), with
    its task's 1-based position; problems of tasks that are not export tasks."""
    out: list[dict[str, Any]] = []
    rows: list[int] = []
    problems: list[Problem] = []
    for t, task in enumerate(tasks, start=1):
        data, annotations = task.get("data"), task.get("annotations")
        if not isinstance(data, dict) or not isinstance(annotations, list):
            problems.append((t, "task", str(task)[:80], "a task with data and annotations"))
            continue
        for ann in annotations:
            if not isinstance(ann, dict):
                problems.append((t, "annotations", str(ann)[:80], "an annotation object"))
            elif not ann.get("was_cancelled"):
                out.append({**data, **_annotation(ann, task.get("id"))})
                rows.append(t)
    return out, rows, problems


def _annotation(ann: dict[str, Any], task_id: Any) -> dict[str, Any]:
    who = ann.get("completed_by")
    if isinstance(who, dict):
        who = who.get("email") or who.get("id")
    record: dict[str, Any] = {"annotator_id": "" if who is None else who}
    if ann.get("id") is not None:
        record["judgment_id"] = f"labelstudio:{ann['id']}:{'' if task_id is None else task_id}"
    if ann.get("created_at") is not None:
        record["timestamp"] = ann["created_at"]
    answers = {}
    for result in ann.get("result") or []:
        value = result.get("value") if isinstance(result, dict) else None
        if not isinstance(value, dict):
            continue
        picked = value.get("choices", value.get("selected"))
        if isinstance(picked, list):
            picked = picked[0] if len(picked) == 1 else "|".join(map(str, picked))
        if picked is not None:
            answers[str(result.get("from_name") or "choice")] = picked
    record.update(answers)
    if len(answers) == 1:
        record["choice"] = next(iter(answers.values()))
    return record


def is_label_studio(records: list[Any]) -> bool:
    return bool(records) and all(isinstance(r, dict) and "annotations" in r for r in records)


def is_mturk(columns: Sequence[str]) -> bool:
    return set(MTURK_COLUMNS) <= set(columns)


_MTURK_ZONES = {"PST": -8, "PDT": -7, "MST": -7, "MDT": -6, "CST": -6, "CDT": -5,
                "EST": -5, "EDT": -4, "UTC": 0, "GMT": 0}  # fmt: skip


def mturk_time(value: str | None) -> str | None:
    """MTurk's ``Fri Mar 16 04:58:03 PDT 2018`` as ISO 8601 (an ISO value as given).

    Example:
        >>> mturk_time("Fri Mar 16 04:58:03 PDT 2018")
        '2018-03-16T04:58:03-07:00'
    """
    parts = (value or "").split()
    if len(parts) != 6 or parts[4] not in _MTURK_ZONES:
        return value
    try:
        when = datetime.strptime(" ".join(parts[:4] + parts[5:]), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return value
    return when.replace(tzinfo=timezone(timedelta(hours=_MTURK_ZONES[parts[4]]))).isoformat()


def mturk_to_records(frame: pl.DataFrame) -> pl.DataFrame:
    """MTurk batch results (text columns, ``row``) in the names of the common schema."""
    if "AssignmentStatus" in frame.columns:
        frame = frame.filter(pl.col("AssignmentStatus").fill_null("") != "Rejected")
    inputs = {c: c[len("Input.") :] for c in frame.columns if c.startswith("Input.")}
    answers = [c for c in frame.columns if c.startswith("Answer.")]
    out = frame.rename({c: n for c, n in inputs.items() if n not in frame.columns})
    named = {"WorkerId": "annotator_id", "SubmitTime": "timestamp"}
    out = out.rename({c: n for c, n in named.items() if c in out.columns and n not in out.columns})
    key = pl.lit("mturk:") + pl.col("AssignmentId")
    if "task_id" in out.columns:
        key = key + pl.lit(":") + pl.col("task_id")
    out = out.with_columns(key.alias("judgment_id")) if "judgment_id" not in out.columns else out
    if "timestamp" in out.columns:
        out = out.with_columns(pl.col("timestamp").map_elements(mturk_time, return_dtype=pl.Utf8))
    if len(answers) == 1 and "choice" not in out.columns and "winner" not in out.columns:
        out = out.rename({answers[0]: "choice"})
    return out


def choice_to_winner(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[Problem]]:
    """A ``choice`` column (First/Second, left/right, a/b, Tie) as ``winner``."""
    side = pl.col("choice").str.strip_chars().str.to_lowercase().replace_strict(
        CHOICES, default=None)  # fmt: skip
    first = pl.col("shown_first").str.strip_chars().str.to_lowercase() if (
        "shown_first" in frame.columns) else pl.lit("a")  # fmt: skip
    other = pl.when(first == "b").then(pl.lit("a")).otherwise(pl.lit("b"))
    winner = pl.when(side == _FIRST).then(first).when(side == _SECOND).then(other).otherwise(side)
    out = frame.with_columns(winner.alias("winner"), side.alias("_side"))
    bad = out.filter(pl.col("_side").is_null()).select("row", "choice")
    problems = [
        (row, "choice", "<empty>" if v is None else v, "First, Second or Tie (left/right, a/b)")
        for row, v in bad.iter_rows()
    ]
    return out.drop("_side", "choice"), problems
