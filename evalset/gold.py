"""Gold cells for notebooks: each annotator scored on cells with a known answer, with an
anytime-valid flag (:mod:`adaptive.annotation.gold`)."""

from __future__ import annotations

from typing import Any

import polars as pl

from adaptive.annotation.gold import DEFAULT_CAREFUL, DEFAULT_CARELESS, DEFAULT_GOLD_LEVEL, GoldRule
from evalset._common import read


def gold(
    data: Any,
    cells: Any,
    *,
    dimension: str | None = None,
    careful: float = DEFAULT_CAREFUL,
    careless: float = DEFAULT_CARELESS,
    level: float = DEFAULT_GOLD_LEVEL,
) -> pl.DataFrame:
    """Each annotator's answers on the gold cells: the rows of ``evalset gold --format json``.

    Args:
        data: judgments (frame or file), in arrival order.
        cells: the gold cells (polars or pandas frame, or CSV file): ``item_id``, ``system_a``, ``system_b``,
            ``answer`` (``a``, ``b`` or ``tie`` for that order), optionally ``dimension``.
        dimension: score only this dimension's judgments (default: every dimension).
        careful: accuracy a careful annotator reaches at least.
        careless: accuracy of a careless one (the test's alternative).
        level: chance, at most, that an annotator at least as accurate as ``careful`` is
            ever flagged, however often the scores are read.

    Raises:
        ValueError: bad gold cells (naming the row) or a rule outside its range.
    """
    from adaptive.annotation.gold import gold_rows
    from adaptive.core.data import as_polars, filter_judgments

    rule = GoldRule(careful=careful, careless=careless, level=level)
    if hasattr(cells, "columns"):  # a polars or pandas frame
        frame = as_polars(cells)
    else:
        frame = pl.read_csv(cells, infer_schema=False)
    judgments = read(data)
    if dimension is not None:
        judgments = filter_judgments(judgments, dimensions=[dimension])
    rows = gold_rows(judgments, frame, rule)
    return pl.DataFrame(rows, infer_schema_length=None)
