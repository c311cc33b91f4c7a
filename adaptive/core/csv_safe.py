"""CSV cells a spreadsheet would run as a formula, escaped on writing and restored on reading.

A text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is
written with a leading apostrophe (OWASP's rule against CSV injection), so Excel,
LibreOffice and Google Sheets show it as text and never evaluate it. Numbers are not
formulas: numeric cells, and text cells that are a plain decimal number (``-2``,
``+0.5``, ``1e-3``), are written as they are. A text cell that already starts with an
apostrophe before one of those characters gets one more, so the escape is reversed
exactly: :func:`unescape_text` of a written cell is the value that was written, and a
spreadsheet shows that value too (it hides one leading apostrophe). JSON, JSONL and
Parquet are written raw.

References:
    OWASP, "CSV Injection", https://owasp.org/www-community/attacks/CSV_Injection
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

#: the first characters that make a spreadsheet read a cell as a formula
FORMULA_STARTS = "=+-@\t\r"
#: what is put in front of such a cell
ESCAPE = "'"

# the same patterns serve Python's re and polars' (Rust) regex engine
_FORMULA = r"[=+\-@\t\r]"
_ESCAPABLE = r"[=+\-@\t\r']"
#: a cell that needs the escape (an apostrophe counts only before a character that would)
_NEEDS = rf"^(?:{_FORMULA}|'{_ESCAPABLE})"
#: a cell that was escaped
_ESCAPED = rf"^'{_ESCAPABLE}"
#: a plain decimal number: not a formula, written as it is
_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"


def escape_text(value: Any) -> Any:
    """One cell as it is written to CSV: text that would start a formula gets an apostrophe.

    Example:
        >>> [escape_text(v) for v in ("=NOW()", "-2+3", "-2", -2, "ok", "'=x")]
        ["'=NOW()", "'-2+3", '-2', -2, 'ok', "''=x"]
    """
    if not isinstance(value, str) or re.match(_NEEDS, value) is None:
        return value
    return value if re.fullmatch(_NUMBER, value) else ESCAPE + value


def unescape_text(value: Any) -> Any:
    """The value a written cell stands for (the inverse of :func:`escape_text`).

    Example:
        >>> [unescape_text(v) for v in ("'=NOW()", "''=x", "'quoted", "-2")]
        ['=NOW()', "'=x", "'quoted", '-2']
    """
    if isinstance(value, str) and re.match(_ESCAPED, value):
        return value[1:]
    return value


def _text_columns(frame: pl.DataFrame) -> list[str]:
    return [c for c, dtype in frame.schema.items() if dtype in (pl.Utf8, pl.Categorical)]


def escape_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every text cell escaped as :func:`escape_text` does (numbers untouched)."""
    exprs = []
    for name in _text_columns(frame):
        col = pl.col(name).cast(pl.Utf8)
        needs = col.str.contains(_NEEDS) & ~col.str.contains(f"^(?:{_NUMBER})$")
        exprs.append(pl.when(needs).then(pl.lit(ESCAPE) + col).otherwise(col).alias(name))
    return frame.with_columns(exprs) if exprs else frame


def unescape_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (as read from a CSV) with every escaped text cell restored."""
    exprs = [
        pl.when(pl.col(name).str.contains(_ESCAPED))
        .then(pl.col(name).str.slice(1))
        .otherwise(pl.col(name))
        .alias(name)
        for name in _text_columns(frame)
    ]
    return frame.with_columns(exprs) if exprs else frame


def csv_text(frame: pl.DataFrame) -> str:
    """``frame`` as CSV text, its text cells escaped."""
    return escape_frame(frame).write_csv()


def write_csv(frame: pl.DataFrame, path: str | Path) -> None:
    """``frame`` as a CSV file at ``path``, its text cells escaped."""
    escape_frame(frame).write_csv(path)


def rows_to_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Flat dicts as CSV text (header first), text cells escaped, numbers as they are."""
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    for row in rows:
        writer.writerow({c: escape_text(row.get(c)) for c in columns})
    return buf.getvalue()
