"""How a fit runs: the approximation's settings, each default written once.

:class:`LaplaceSettings` (the fast path, :func:`stan_free_models.laplace.fit_laplace`) and
:class:`NutsSettings` (every NUTS sampler of :mod:`stan_free_models.engine`) are hashable
values that travel whole from :class:`adaptive.estimation.fitting.FitConfig` to the fit,
and sit beside :class:`stan_free_models.model_key.ModelKey` in the compile keys. Their
field defaults are the default model's; the other run sizes the product uses are named
here too (:data:`DOOR_NUTS`, :data:`SHORT_NUTS`, :data:`REFINED`), so that changing a
default is one line of one file. No JAX here: the command line reads these for its help.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

#: Gibbs sweeps of :func:`stan_free_models.conditional.refine_draws` when the refinement is
#: asked for (measured: docs/statistics.md, "The fast path")
REFINE_SWEEPS = 4
#: the fast path refines while the prompts have fewer judgments than this on average
#: (the paper's full campaign has 60)
REFINE_BELOW = 30.0


@dataclass(frozen=True)
class LaplaceSettings:
    """The fast path's settings: MAP, tau grid, draws and refinement (hashable).

    The defaults are the default model's: one MAP + Laplace fit, tau integrated over its
    grid when the model has cells, Gaussian item draws, no Gibbs sweeps.

    Attributes:
        num_draws: draws from the approximation (a mixture over the grid).
        max_iter, tol: L-BFGS limits; it stops when the gradient norm of the potential falls
            below ``tol * max(1, sqrt(num_obs / 1000))``.
        integrate_tau: with a cell effect, integrate tau over a grid (nested Laplace) instead
            of fixing it at the joint mode.
        exact_items: draw each prompt's parameters from their exact conditional given each
            draw's abilities (and tau) instead of the Gaussian's.
        refine_sweeps: with ``exact_items``, Gibbs sweeps from every draw towards the
            posterior (0: off; :data:`REFINE_SWEEPS` is the measured number).
        refine_below: refine only while the prompts have fewer judgments than this on
            average (``math.inf``: always).

    Why each exists (docs/statistics.md, "The fast path"): the joint mode of tau collapses
    towards 0 when most cells have one judgment (tau then trades off with every prompt's
    discrimination), which made the intervals of Δ too narrow; NUTS puts tau near its prior
    there. A prompt's few judgments leave its parameters skewed, and the mode's plug-in
    exaggerated the net preference (by 0.6 sd at full size). Refined, the abilities come
    from the posterior too, not from the Gaussian at the joint mode, which on sparse data
    put the net preference 0.2 sd outside NUTS's; above ``refine_below`` the joint mode's
    bias is small against the interval (coverage of Δ 0.96-0.97 at 60 judgments per prompt
    unrefined), while the sweeps cost about 3x the fit.

    Example:
        >>> LaplaceSettings().replace(num_draws=400).num_draws
        400
    """

    num_draws: int = 4000
    max_iter: int = 500
    tol: float = 1e-3
    integrate_tau: bool = True
    exact_items: bool = False
    refine_sweeps: int = 0
    refine_below: float = REFINE_BELOW

    def __post_init__(self) -> None:
        if self.num_draws < 1 or self.max_iter < 1:
            raise ValueError(
                f"num_draws and max_iter must be at least 1, got {self.num_draws}, {self.max_iter}"
            )
        if self.refine_sweeps < 0:
            raise ValueError(f"refine_sweeps must be >= 0, got {self.refine_sweeps!r}")
        if not self.refine_below >= 0:
            raise ValueError(f"refine_below must be >= 0, got {self.refine_below!r}")
        if not (self.tol > 0 and math.isfinite(self.tol)):
            raise ValueError(f"tol must be a positive number, got {self.tol!r}")

    def replace(self, **changes: Any) -> LaplaceSettings:
        """These settings with ``changes`` (field names; an unknown one is a TypeError)."""
        return dataclasses.replace(self, **changes)

    def program(self) -> LaplaceSettings:
        """The part a compiled fit depends on (draws and L-BFGS steps; the rest at their
        defaults), so that settings read on the host never recompile."""
        return LaplaceSettings(num_draws=int(self.num_draws), max_iter=int(self.max_iter))


@dataclass(frozen=True)
class NutsSettings:
    """A NUTS run's settings (hashable): the sampler's and when to stop.

    The defaults are a full run (4 chains of 1,000 warm-up iterations and 1,000 draws, the
    papers' Bradley-Terry and graded-response runs); the product's doors run
    :data:`DOOR_NUTS`.

    Attributes:
        chain_method: ``None``: parallel chains when JAX sees enough devices, else
            vectorised (:func:`stan_free_models.engine.chain_method_for`).
        min_ess: the whitened sampler samples on in blocks of ``num_samples`` draws per
            chain until every checked parameter has bulk and tail ESS >= this and R-hat
            <= ``max_rhat``, or ``max_samples`` draws per chain (default 8 blocks);
            ``None``: one block.
    """

    num_chains: int = 4
    num_warmup: int = 1000
    num_samples: int = 1000
    target_accept: float = 0.8
    chain_method: str | None = None
    progress: bool = False
    min_ess: float | None = None
    max_rhat: float = 1.01
    max_samples: int | None = None

    def __post_init__(self) -> None:
        if self.num_chains < 1 or self.num_warmup < 0 or self.num_samples < 1:
            raise ValueError(
                "NUTS needs num_chains >= 1, num_warmup >= 0 and num_samples >= 1, got "
                f"{self.num_chains}, {self.num_warmup}, {self.num_samples}"
            )
        if self.min_ess is not None and not self.min_ess > 0:
            raise ValueError(f"min_ess={self.min_ess!r} needs a positive number")

    def replace(self, **changes: Any) -> NutsSettings:
        """These settings with ``changes`` (field names; an unknown one is a TypeError)."""
        return dataclasses.replace(self, **changes)

    def sampler(self, chain_method: str) -> NutsSettings:
        """The part a compiled sampler depends on (the stopping rule left at its defaults),
        with ``chain_method`` resolved."""
        return NutsSettings(
            num_chains=int(self.num_chains),
            num_warmup=int(self.num_warmup),
            num_samples=int(self.num_samples),
            target_accept=float(self.target_accept),
            chain_method=chain_method,
            progress=bool(self.progress),
        )


#: the fast path with the model's exact conditionals: exact item draws and Gibbs sweeps
REFINED = LaplaceSettings(exact_items=True, refine_sweeps=REFINE_SWEEPS)

#: NUTS in every door of the graded-response analysis (command line, ``import evalset``, the
#: service's scheduled refits) where the user chose no sizes: a short warm-up (the whitened
#: sampler starts at the fast fit's mode with its Hessian as the metric), then blocks of
#: draws per chain until every parameter has this bulk and tail ESS (paper size: about 80 s)
DOOR_NUTS = NutsSettings(num_warmup=300, num_samples=250, min_ess=400.0)

#: NUTS with a shorter warm-up, for many small Bradley-Terry fits: the annotators' position
#: screen (one fit per annotator) and the DAMR tutor ranking
SHORT_NUTS = NutsSettings(num_warmup=500)

__all__ = [
    "DOOR_NUTS",
    "REFINED",
    "REFINE_BELOW",
    "REFINE_SWEEPS",
    "SHORT_NUTS",
    "LaplaceSettings",
    "NutsSettings",
]
