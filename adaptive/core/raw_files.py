"""Judgment files as records of text, and where each record starts in its file.

Every reader here keeps every column of the file (so an error can name the columns the
file has) and knows the file line each record starts on, so a problem is reported at
its line: in a CSV the header is line 1 and the first record line 2 (a quoted field may
span lines); in JSONL a record's line; in a JSON array the line its object opens on.
Parquet files and in-memory frames have no lines: their problems name the 1-based row.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

#: (1-based record, column, the value as given, what was expected)
Problem = tuple[int, str, str, str]


class RawFileError(ValueError):
    """A file that cannot be read as records; ``line`` where it breaks (when known)."""

    def __init__(self, message: str, line: int | None = None):
        self.line = line
        super().__init__(message)


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def json_records(path: Path) -> list[Any]:
    """The elements of a JSON array file."""
    text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RawFileError(f"line {exc.lineno} is not JSON: {exc.msg}", exc.lineno) from exc
    if not isinstance(data, list):
        raise RawFileError(f"a .json file must hold an array of objects, not {_kind(data)}")
    return data


def json_lines(path: Path) -> list[int]:
    """The line each element of a JSON array file starts on."""
    text = path.read_text()
    decoder = json.JSONDecoder()
    lines: list[int] = []
    at = text.index("[") + 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return lines
        lines.append(_line_of(text, at))
        _, at = decoder.raw_decode(text, at)


def jsonl_records(path: Path) -> tuple[list[Any], list[int]]:
    """The records of a JSON Lines file (blank lines skipped) and their lines."""
    records: list[Any] = []
    lines: list[int] = []
    with path.open() as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise RawFileError(f"line {number} is not JSON: {exc.msg}", number) from exc
            lines.append(number)
    return records, lines


def csv_lines(path: Path, separator: str) -> list[int]:
    """The line each record of a CSV starts on (the header is line 1)."""
    with path.open(newline="") as handle:
        reader = csv.reader(handle, delimiter=separator)
        starts, end = [], 0
        for k, _ in enumerate(reader):
            if k:
                starts.append(end + 1)
            end = reader.line_num
    return starts


def csv_junk(path: Path, separator: str) -> RawFileError | None:
    """The first record whose field count differs from the header's, or None."""
    try:
        with path.open(newline="") as handle:
            reader = csv.reader(handle, delimiter=separator)
            header, end = next(reader, []), reader.line_num
            for fields in reader:
                if fields and len(fields) != len(header):
                    return RawFileError(
                        f"line {end + 1} has {len(fields)} field(s) where the header "
                        f"(line 1) names {len(header)}: {header}",
                        end + 1,
                    )
                end = reader.line_num
    except (csv.Error, UnicodeDecodeError) as exc:
        return RawFileError(f"not a CSV file: {exc}")
    return None


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def scalar_text(value: Any) -> str | None:
    """A JSON scalar as the text a CSV would hold (None, NaN: missing).

    Example:
        >>> [scalar_text(v) for v in (3, 2.0, 2.5, True, None, float("nan"), " x ")]
        ['3', '2', '2.5', 'true', None, None, ' x ']
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def ranking_text(value: Any) -> Any:
    """A ranking given as a list (``["x", "y = z"]`` or ``[["x"], ["y", "z"]]``) as its
    text, ``"x > y = z"``; anything else as it is.

    Example:
        >>> ranking_text([["x"], ["y", "z"]]), ranking_text("x > y")
        ('x > y = z', 'x > y')
    """
    if not isinstance(value, list):
        return value
    return " > ".join(
        " = ".join(map(str, rank)) if isinstance(rank, list) else str(rank) for rank in value
    )


def records_frame(
    records: Sequence[Any],
    *,
    wanted: Callable[[str], bool],
    rows: Sequence[int] | None = None,
) -> tuple[pl.DataFrame, list[Problem]]:
    """Records (objects) as a frame of text columns, every key a column, with ``row`` (the
    1-based record, or ``rows``). A nested value (an object, a list) is dropped from a
    column nobody reads and is a problem in a column ``wanted`` says is read (an id given
    as an object is refused, never stored as its text)."""
    problems: list[Problem] = []
    for k, r in enumerate(records, start=1):
        if not isinstance(r, dict):
            problems.append((k, "record", json.dumps(r, default=str)[:80], "an object"))
    if problems:
        return pl.DataFrame(), problems
    keys = list(dict.fromkeys(key for r in records for key in r))
    rows = list(rows) if rows is not None else list(range(1, len(records) + 1))
    columns: dict[str, list[str | None]] = {}
    for key in keys:
        values: list[str | None] = []
        for row, r in zip(rows, records):
            value = r.get(key)
            if key == "ranking":  # a ranking file's list form (adaptive.core.rankings)
                value = ranking_text(value)
            if isinstance(value, dict | list):
                if wanted(key):
                    shown = json.dumps(value, default=str)
                    problems.append((row, key, shown if len(shown) <= 80 else shown[:77] + "...",
                                     f"a string or a number, not {_kind(value)}"))  # fmt: skip
                values.append(None)
            else:
                values.append(scalar_text(value))
        columns[key] = values
    frame = pl.DataFrame(columns, schema={k: pl.Utf8 for k in keys})
    return frame.with_columns(pl.Series("row", rows, dtype=pl.UInt32)), problems
