"""The compile key of the graded response model's fits: the padded sizes and the settings."""

from __future__ import annotations

from typing import NamedTuple


class ModelKey(NamedTuple):
    """Everything a compiled fit of the graded response model depends on: the padded sizes
    and the model's settings. Hashable: it is the compile key (read its fields by name)."""

    num_obs: int
    num_comparisons: int
    num_items: int
    num_categories: int
    num_systems: int | None  # per-system abilities; None: one theta per comparison
    alpha_scale: float
    b_scale: float
    symmetric: bool  # symmetric thresholds
    num_cells: int | None  # the cell effect's cells; None: no cell effect
    tau_scale: float
    lapse: bool  # judgments may be random answers (cells only)
    theta_scale: float  # prior sd of theta (per system: of each skill)


__all__ = ["ModelKey"]
