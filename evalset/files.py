"""Judgment files in and out, for the doors: one reader (one validation) and CSV written safely.

The command line reads a judgments file here (:func:`read_judgments`, with
:func:`read_dimensions` for its ``--dimension`` flags), writes CSV here (text cells that
would start a spreadsheet formula escaped, :mod:`adaptive.core.csv_safe`) and points a
store's problem at the file's line (:func:`record_lines`).

Example:
    >>> import polars as pl
    >>> csv_text(pl.DataFrame({"item_id": ["p1"], "note": ["=1+1"]})).splitlines()[1]
    "p1,'=1+1"
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adaptive.core.csv_safe import csv_text as csv_text
from adaptive.core.csv_safe import rows_to_csv as rows_to_csv
from adaptive.core.csv_safe import write_csv as write_csv
from adaptive.core.data import read_judgments as read_judgments
from adaptive.core.data import record_lines as record_lines
from adaptive.core.data import validate_judgments as validate_judgments

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "csv_text",
    "read_dimensions",
    "read_judgments",
    "record_lines",
    "rows_to_csv",
    "validate_judgments",
    "write_csv",
]


def read_dimensions(
    source: str | Path | Any, dimensions: str | Sequence[str] | None = None
) -> pl.DataFrame:
    """The validated judgments of a file, only those of ``dimensions`` when some are named
    (one name or several; none or empty: every dimension)."""
    from adaptive.core.data import filter_judgments

    judgments = read_judgments(source)
    if dimensions:
        named = [dimensions] if isinstance(dimensions, str) else list(dimensions)
        judgments = filter_judgments(judgments, dimensions=named)
    return judgments
