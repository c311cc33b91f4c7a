"""Inter-annotator agreement for notebooks: alpha and kappa per dimension, each annotator
against the others (:mod:`adaptive.annotation.agreement`)."""

from __future__ import annotations

from typing import Any

import polars as pl

from evalset._common import read


def agreement(
    data: Any,
    *,
    dimension: str | None = None,
    report: str = "dimensions",
    test_level: float = 0.05,
    self_repeats: str = "drop",
) -> pl.DataFrame:
    """Agreement on the cells (prompt, pair of systems in either order, dimension) judged
    more than once: the rows of ``evalset agreement --format json``.

    Args:
        data: judgments (frame or file).
        dimension: only this one (default: every dimension).
        report: ``dimensions`` (per dimension: Krippendorff's nominal alpha, observed and
            expected agreement, Fleiss' kappa where every cell has the same number of
            judgments, a note when a figure is missing) or ``annotators`` (per annotator
            and dimension: share of its judgments matching the others' majority, chance,
            one-sided p-value, flag).
        test_level: level of the annotators' test against chance.
        self_repeats: ``drop`` (an annotator's first judgment of a cell is its value; its
            later ones, intra-annotator repeats, are counted in ``n_self_repeats`` only) or
            ``keep`` (every judgment is a value of its cell).

    Raises:
        adaptive.annotation.agreement.NoRepeatedCells: no cell was judged twice (a ``ValueError``).

    Example:
        >>> from evalset import example
        >>> table = agreement(example(num_systems=3, num_prompts=10))
        >>> table.select("n_cells", "per_cell_max").row(0), round(table["alpha"][0], 3)
        ((30, 2), -0.023)
    """
    from adaptive.annotation.agreement import agreement_rows
    from adaptive.core.data import filter_judgments

    judgments = read(data)
    if dimension is not None:
        judgments = filter_judgments(judgments, dimensions=[dimension])
    rows = agreement_rows(
        judgments, report=report, test_level=test_level, self_repeats=self_repeats
    )
    return pl.DataFrame(rows, infer_schema_length=None)
