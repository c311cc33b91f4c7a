"""A leased batch as a task table: one row per judgment to collect, in display order.

The task table is the batch's own record of what each annotator will see: which
system's response is shown first and second. Crowd platforms only see the texts
(the annotator stays blind to system names); answers come back as *first*,
*second* or *tie* and are mapped to a/b through this table, never through
anything the platform echoes.

Columns (:data:`TASK_COLUMNS`): ``batch_id, task_id, item_id, dimension, prompt,
system_first, response_first, system_second, response_second, system_a,
system_b, shown_first``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from adaptive.core.csv_safe import unescape_frame
from adaptive.core.data import DataError, RowProblem, as_polars
from adaptive.core.json_text import parse_json_text

TASK_COLUMNS: tuple[str, ...] = (
    "batch_id",
    "task_id",
    "item_id",
    "dimension",
    "prompt",
    "system_first",
    "response_first",
    "system_second",
    "response_second",
    "system_a",
    "system_b",
    "shown_first",
)

#: what a platform may show an annotator (no system names: the annotator stays blind)
SHOWN_COLUMNS: tuple[str, ...] = (
    "batch_id",
    "task_id",
    "item_id",
    "dimension",
    "prompt",
    "response_first",
    "response_second",
)


def _frame(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(
        {c: [("" if r.get(c) is None else str(r.get(c))) for r in rows] for c in TASK_COLUMNS},
        schema={c: pl.Utf8 for c in TASK_COLUMNS},
    )


def tasks_from_lease(
    lease: Mapping[str, Any], prompts: Iterable[Mapping[str, Any]], *, require_texts: bool = True
) -> pl.DataFrame:
    """The task table of a next-batch lease, with the prompt and both responses.

    Args:
        lease: a stored lease (``lease_id`` and ``cells``: item_id, system_a,
            system_b, dimension, shown_first), as the next-batch route returns it.
        prompts: the project's prompts (``prompt_id``, ``text``, ``responses``:
            system -> response), as ``GET /projects/{p}/prompts`` lists them.
        require_texts: refuse a batch with a missing prompt text or response
            (a task the annotator could not judge).

    Returns:
        The task table (:data:`TASK_COLUMNS`), task ids ``<lease_id>-0001`` ...

    Example:
        >>> lease = {"lease_id": "L1", "cells": [{"item_id": "q1", "system_a": "x",
        ...     "system_b": "y", "dimension": "overall", "shown_first": "b"}]}
        >>> prompts = [{"prompt_id": "q1", "text": "hi?", "responses": {"x": "hey", "y": "yo"}}]
        >>> tasks_from_lease(lease, prompts).select("task_id", "system_first",
        ...     "response_first").row(0)
        ('L1-0001', 'y', 'yo')
    """
    by_id = {p["prompt_id"]: p for p in prompts}
    batch_id = str(lease["lease_id"])
    rows, problems = [], []
    for k, cell in enumerate(lease["cells"]):
        prompt = by_id.get(cell["item_id"], {})
        responses = prompt.get("responses") or {}
        a, b = cell["system_a"], cell["system_b"]
        first, second = (a, b) if cell["shown_first"] == "a" else (b, a)
        row = {
            "batch_id": batch_id,
            "task_id": f"{batch_id}-{k + 1:04d}",
            "item_id": cell["item_id"],
            "dimension": cell["dimension"],
            "prompt": prompt.get("text") or "",
            "system_first": first,
            "response_first": responses.get(first) or "",
            "system_second": second,
            "response_second": responses.get(second) or "",
            "system_a": a,
            "system_b": b,
            "shown_first": cell["shown_first"],
        }
        for column in ("prompt", "response_first", "response_second"):
            if require_texts and not row[column]:
                problems.append(
                    RowProblem(k + 1, column, "", f"a registered text for {cell['item_id']!r}")
                )
        rows.append(row)
    if problems:
        raise DataError(f"lease {batch_id}", problems)
    return _frame(rows)


def batch_id_of(rows: Sequence[Mapping[str, Any]]) -> str:
    """A stable id for a batch without a lease: a hash of its cells in order."""
    key = json.dumps(
        [
            [r.get(c, "") for c in ("item_id", "system_a", "system_b", "dimension", "shown_first")]
            for r in rows
        ]
    )
    return "b" + hashlib.sha256(key.encode()).hexdigest()[:12]


def normalize_tasks(
    frame: Any, *, batch_id: str | None = None, source: str = "<tasks>"
) -> pl.DataFrame:
    """Validate a task table (e.g. ``evalset recommend --format csv`` output) and complete it.

    ``system_first``/``system_second`` are derived from ``shown_first`` when missing;
    ``batch_id`` is kept, or set from ``batch_id``, or a hash of the cells; task ids
    must be unique. A row whose display order disagrees with ``shown_first`` is refused.
    """
    frame = as_polars(frame)  # a pandas frame too
    required = ("task_id", "item_id", "system_a", "system_b", "shown_first")
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise DataError(source, message=f"missing task column(s) {missing}; has {frame.columns}")
    rows = [dict(r) for r in frame.with_columns(pl.all().cast(pl.Utf8)).iter_rows(named=True)]
    problems = []
    seen: set[str] = set()
    for k, r in enumerate(rows, start=1):
        r = {c: ("" if v is None else v) for c, v in r.items()}
        rows[k - 1] = r
        if r["shown_first"] not in ("a", "b"):
            problems.append(RowProblem(k, "shown_first", r["shown_first"], "'a' or 'b'"))
            continue
        first, second = (
            (r["system_a"], r["system_b"])
            if r["shown_first"] == "a"
            else (r["system_b"], r["system_a"])
        )
        for column, want in (("system_first", first), ("system_second", second)):
            if r.get(column) and r[column] != want:
                problems.append(RowProblem(k, column, r[column], f"{want!r} (from shown_first)"))
            r[column] = want
        if not r["task_id"] or r["task_id"] in seen:
            problems.append(RowProblem(k, "task_id", r["task_id"], "a unique task id"))
        seen.add(r["task_id"])
        r.setdefault("dimension", "overall")
        r["dimension"] = r["dimension"] or "overall"
    if problems:
        raise DataError(source, problems)
    given = {r.get("batch_id", "") for r in rows} - {""}
    if batch_id is None:
        batch_id = given.pop() if len(given) == 1 else batch_id_of(rows)
    for r in rows:
        r["batch_id"] = r.get("batch_id") or batch_id
    return _frame(rows)


def read_tasks(path: str | Path, *, batch_id: str | None = None) -> pl.DataFrame:
    """Read a task table from CSV, JSON (array), JSONL or Parquet; see :func:`normalize_tasks`."""
    path = Path(path)
    if not path.exists():
        raise DataError(str(path), message="file not found")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            frame = unescape_frame(pl.read_csv(path, infer_schema=False))  # as written
        elif suffix in (".jsonl", ".ndjson"):
            frame = pl.read_ndjson(path, infer_schema_length=None)
        elif suffix == ".json":
            frame = pl.DataFrame(parse_json_text(path.read_bytes()), infer_schema_length=None)
        elif suffix in (".parquet", ".pq"):
            frame = pl.read_parquet(path)
        else:
            raise DataError(str(path), message=f"unknown task file type {suffix!r}")
    except DataError:
        raise
    except Exception as exc:  # polars and json raise several error types for bad files
        raise DataError(str(path), message=f"could not read the tasks: {exc}") from exc
    if frame.height == 0:
        raise DataError(str(path), message="no tasks in the file")
    return normalize_tasks(frame, batch_id=batch_id, source=str(path))
