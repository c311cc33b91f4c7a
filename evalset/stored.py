"""Use cases on the rows a store holds: its judgments as the files' validated frame, the gold
scores of its gold judgments, and the agreement of repeated cells.

The service's routes read the rows and call these, so a stored judgment is read as the same
row of a file would be and every door gives the same rows (``evalset gold``,
``evalset agreement``, ``evalset hybrid``).

Example:
    >>> rows = [{"item_id": "p1", "system_a": "x", "system_b": "y", "annotator_id": "w",
    ...          "winner": "b", "dimension": "overall", "lease_id": None}]
    >>> judgments_frame(rows).select("item_id", "winner", "dimension").row(0)
    ('p1', 'b', 'overall')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from adaptive.annotation.agreement import NoRepeatedCells as NoRepeatedCells
from adaptive.annotation.agreement import agreement_rows as agreement_rows
from adaptive.annotation.gold import GoldRule

__all__ = ["NoRepeatedCells", "agreement_rows", "score_gold", "judgments_frame"]

#: the columns of a stored judgment the use cases read
_JUDGMENT_COLUMNS = ("item_id", "system_a", "system_b", "annotator_id", "winner", "dimension")
_GOLD_CELL_COLUMNS = ("item_id", "system_a", "system_b", "dimension", "answer")


def judgments_frame(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """Stored judgments as :func:`adaptive.core.data.validate_judgments` reads a file of them,
    with ``lease_id`` (which next batch served each cell) when any row has one.

    Raises:
        adaptive.core.data.DataError: a row a judgments file could not hold.
    """
    from adaptive.core.data import validate_judgments

    columns: tuple[str, ...] = _JUDGMENT_COLUMNS
    if any(r["lease_id"] for r in rows):
        columns += ("lease_id",)
    table = pl.DataFrame(
        [{c: r[c] for c in columns} for r in rows], schema=dict.fromkeys(columns, pl.Utf8)
    )
    return validate_judgments(table, source="<store>")


def score_gold(
    judgments: Sequence[Mapping[str, Any]], cells: Sequence[Mapping[str, Any]], rule: GoldRule
) -> list[dict[str, Any]]:
    """Each annotator scored on the stored judgments of gold cells (in arrival order) under
    ``rule``: the rows of ``evalset gold --format json``; none while there is no gold cell or
    no named annotator's judgment of one (:func:`adaptive.annotation.gold.gold_rows`)."""
    from adaptive.annotation.gold import gold_rows

    if not cells or not any(j["annotator_id"] for j in judgments):
        return []
    frame = pl.DataFrame(
        [{k: j[k] for k in _JUDGMENT_COLUMNS} for j in judgments],
        schema=dict.fromkeys(_JUDGMENT_COLUMNS, pl.Utf8),
    )
    gold = pl.DataFrame(
        [{k: c[k] for k in _GOLD_CELL_COLUMNS} for c in cells],
        schema=dict.fromkeys(_GOLD_CELL_COLUMNS, pl.Utf8),
    )
    return gold_rows(frame, gold, rule)
