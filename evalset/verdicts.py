"""Significance: every comparison's graded-response verdicts from fits, for every door.

``evalset significance`` and :func:`evalset.significance` fit each dimension with one
:class:`adaptive.estimation.fitting.FitConfig` (resolved by :func:`adaptive.estimation.fitting.preset_config`)
and hand the fits to :func:`significance_rows`, so the same judgments, options and seed
give the same rows, in the same order, through either door.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from adaptive.stopping.rule import DEFAULT_LEVEL

if TYPE_CHECKING:  # adaptive.estimation.pipeline loads JAX: imported where it is used
    from adaptive.estimation.pipeline import Analysis

#: the multiplicity adjustment of the significance verdicts (``holm``, ``bonferroni``, ``none``)
DEFAULT_ADJUST: Final = "holm"
#: the posterior interval level of the significance rows
DEFAULT_INTERVAL = 0.95
#: how :func:`evalset.significance` fits by default (the service's ``model=default`` too)
DEFAULT_METHOD: Final = "fast"
DEFAULT_SEED: Final = 0


def significance_rows(
    fits: Iterable[Analysis],
    *,
    adjust: str = DEFAULT_ADJUST,
    alpha: float = DEFAULT_LEVEL,
    level: float = DEFAULT_INTERVAL,
) -> list[dict[str, Any]]:
    """The rows of :func:`adaptive.estimation.significance.compare` of each fit, one per comparison.

    Args:
        fits: one :class:`adaptive.estimation.pipeline.Analysis` per dimension.
        adjust: multiplicity adjustment of ``significant_adjusted`` (``holm``,
            ``bonferroni`` or ``none``) over each dimension's comparisons.
        alpha: its family-wise error rate.
        level: the posterior interval level.

    Returns:
        Rows sorted by dimension, then by ``mean`` (the largest preference for B first).
    """
    from adaptive.estimation.significance import compare

    rows: list[dict[str, Any]] = []
    for result in fits:
        rows += compare(result.posterior, result.cells, rule=adjust, alpha=alpha, level=level)
    return sorted(rows, key=lambda r: (r["dimension"], -r["mean"]))
