"""The data of a LOCO run: one dimension's cells as plain arrays (:func:`loco_data`).

:mod:`adaptive.prompts.loco` runs the folds on it; :mod:`adaptive.prompts.tier_plan`,
:mod:`adaptive.prompts.loco_batch` and :mod:`adaptive.prompts.pruning` fit and pad from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptive.core.cells import RATING_HALF_RANGE, CellData, prompt_rating_matrix

#: model tiers, and how a system's ability is found to split them (LOCO and pruning, every door)
DEFAULT_TIERS = 2
DEFAULT_ABILITY = "lstsq"
#: LOCO's defaults (adaptive.prompts.loco.LocoConfig and the loco command): policies, prompts per
#: fold, random draws per fold, and where the held-out ability and the information come from
LOCO_POLICIES = ("random", "prompt", "prompt_model", "discrimination")
DEFAULT_POLICIES = ("random", "prompt", "prompt_model")
DEFAULT_GRID = (10, 25, 50, 100, 150, 200)
DEFAULT_RANDOM = 20
DEFAULT_TIER_ESTIMATE = "global"
DEFAULT_TIER_INFORMATION = "refit"


@dataclass(frozen=True)
class LocoData:
    """The cells of one dimension as plain arrays (net-rating likelihood, 7 categories)."""

    cell_comparison: np.ndarray  # (M,)
    cell_prompt: np.ndarray  # (M,)
    cell_y: np.ndarray  # (M,) categories 0..K-1
    pair_a: np.ndarray  # (C,)
    pair_b: np.ndarray  # (C,)
    num_systems: int
    num_prompts: int
    num_categories: int
    rating: np.ndarray  # (P, C) rescaled net ratings for the redundancy filter
    rating_mask: np.ndarray  # (P, C)

    @property
    def num_comparisons(self) -> int:
        return int(self.pair_a.shape[0])


def loco_data(cells: CellData) -> LocoData:
    """Per-prompt cells of one dimension (redundancy groups are the filter's job here)."""
    if cells.num_items != len(cells.prompts):
        raise ValueError("LOCO needs ungrouped cells (build_cells without groups)")
    rating, mask = prompt_rating_matrix(cells)
    return LocoData(
        cell_comparison=cells.cell_comparison.astype(np.int32),
        cell_prompt=cells.cell_item.astype(np.int32),
        cell_y=(cells.cell_rating + RATING_HALF_RANGE).astype(np.int32),
        pair_a=cells.pair_a.astype(np.int64),
        pair_b=cells.pair_b.astype(np.int64),
        num_systems=cells.num_systems,
        num_prompts=len(cells.prompts),
        num_categories=2 * RATING_HALF_RANGE + 1,
        rating=rating,
        rating_mask=mask,
    )
