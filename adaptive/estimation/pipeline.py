"""The standard analysis of one dimension: cells, redundancy groups, fit.

Used by the command line, the service and the selection code alike, so that
every entry point fits the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from adaptive.core.cells import CellData, build_cells
from adaptive.estimation.fitting import FitConfig, fit_cells
from adaptive.prompts.redundancy import DEFAULT_THRESHOLD, find_redundant_groups
from stan_free_models.posterior import Posterior

#: above this many prompts the redundancy grouping is skipped: it compares every pair of
#: prompts, in memory that grows with their square (23,000 prompts: over 20 GB)
MAX_GROUPING_PROMPTS = 4000


@dataclass(frozen=True)
class Analysis:
    """A fitted dimension: the cells, the redundancy groups used, the posterior.

    ``grouping_skipped``: the grouping was asked for but the prompts were too many
    (:data:`MAX_GROUPING_PROMPTS`); every prompt is its own item.
    """

    cells: CellData
    groups: list[list[str]]
    posterior: Posterior
    grouping_skipped: bool = False


def analyze(
    judgments: pl.DataFrame,
    *,
    dimension: str | None = None,
    config: FitConfig = FitConfig(),
    group_redundant: bool = True,
    group_threshold: float = DEFAULT_THRESHOLD,
    orientation: Iterable[tuple[str, str]] | None = None,
    init: dict | None = None,
) -> Analysis:
    """Group redundant prompts (optional), then fit the graded response model."""
    orientation = list(orientation or [])
    cells = build_cells(judgments, dimension=dimension, orientation=orientation)
    groups: list[list[str]] = []
    skipped = group_redundant and len(cells.prompts) > MAX_GROUPING_PROMPTS
    if group_redundant and not skipped:
        groups, _ = find_redundant_groups(cells, threshold=group_threshold)
        if groups:
            cells = build_cells(
                judgments, dimension=cells.dimension, orientation=orientation, groups=groups
            )
    posterior = fit_cells(cells, config, init=init)
    return Analysis(cells=cells, groups=groups, posterior=posterior, grouping_skipped=skipped)


def analysis_item_rows(analysis: Analysis) -> list[dict]:
    """Per item (prompt or group): discrimination and thresholds, mean and sd."""
    post, cells = analysis.posterior, analysis.cells
    alpha = post.flat("alpha")
    b = post.flat("b")
    # a cell is one (comparison, item) with judgments: comparisons per item are its cells
    n_comparisons = np.bincount(cells.cell_item, minlength=len(cells.item_members))
    rows = []
    for j, members in enumerate(cells.item_members):
        row: dict[str, Any] = {
            "dimension": cells.dimension,
            "item_id": members[0],
            "group": "+".join(members) if len(members) > 1 else "",
            "group_size": len(members),
            "alpha_mean": float(alpha[:, j].mean()),
            "alpha_sd": float(alpha[:, j].std(ddof=1)),
        }
        for k in range(b.shape[-1]):
            row[f"b{k + 1}_mean"] = float(b[:, j, k].mean())
            row[f"b{k + 1}_sd"] = float(b[:, j, k].std(ddof=1))
        row["n_comparisons"] = int(n_comparisons[j])
        rows.append(row)
    rows.sort(key=lambda r: -r["alpha_mean"])
    return rows
