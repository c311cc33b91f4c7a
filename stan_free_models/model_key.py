"""The graded response model's specification: its priors and variants, and the compile key.

:class:`Priors` is the one place that defines the model's prior scales and variant
choices, with the defaults written once; every fit and helper below
:class:`adaptive.estimation.fitting.FitConfig` takes it whole. :class:`ModelKey` (padded sizes and
the priors) is the compile key of every fit.
"""

from __future__ import annotations

from typing import NamedTuple


class Priors(NamedTuple):
    """The graded response model's priors and variant choices (hashable; read by name).

    Example:
        >>> Priors(theta_scale=2.0).b_scale
        2.0
    """

    alpha_scale: float = 1.0  # prior sd of log alpha
    b_scale: float = 2.0  # prior sd of every threshold
    theta_scale: float = 1.0  # prior sd of theta (per system: of each skill); the paper's is 1
    tau_scale: float = 1.0  # prior scale of tau, the cell effect's sd (theta's unit)
    symmetric: bool = False  # symmetric thresholds, b_c = -b_(K-c): theta = 0 is no preference
    lapse: bool = False  # judgments may be random answers at a learned rate (cells only)

    def canonical(self) -> Priors:
        """The same priors with fixed types, so that equal settings are one compile key
        (``1`` and ``1.0`` hash alike but trace differently)."""
        return Priors(
            alpha_scale=float(self.alpha_scale),
            b_scale=float(self.b_scale),
            theta_scale=float(self.theta_scale),
            tau_scale=float(self.tau_scale),
            symmetric=bool(self.symmetric),
            lapse=bool(self.lapse),
        )


#: the model's priors unless a user asks otherwise
DEFAULT_PRIORS = Priors()


class ModelSizes(NamedTuple):
    """The padded sizes a compiled fit depends on."""

    num_obs: int
    num_comparisons: int
    num_items: int
    num_categories: int
    num_systems: int | None  # per-system abilities; None: one theta per comparison
    num_cells: int | None  # the cell effect's cells; None: no cell effect


class ModelKey(NamedTuple):
    """Everything a compiled fit of the graded response model depends on: the padded sizes
    and the priors. Hashable: it is the compile key (read its fields by name)."""

    num_obs: int
    num_comparisons: int
    num_items: int
    num_categories: int
    num_systems: int | None  # per-system abilities; None: one theta per comparison
    num_cells: int | None  # the cell effect's cells; None: no cell effect
    priors: Priors

    @property
    def sizes(self) -> ModelSizes:
        """The padded sizes alone (what a fit reports as its ``padded_shape``)."""
        return ModelSizes(
            self.num_obs,
            self.num_comparisons,
            self.num_items,
            self.num_categories,
            self.num_systems,
            self.num_cells,
        )


__all__ = ["DEFAULT_PRIORS", "ModelKey", "ModelSizes", "Priors"]
