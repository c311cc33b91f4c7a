"""The posterior that crosses the boundary: draws with a (chain, draw, ...) layout and diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin
from scipy.special import ndtri


@dataclass(frozen=True)
class Diagnostics:
    """Convergence diagnostics of a fit (NaN where a method has none).

    Attributes:
        rhat: name -> split R-hat (rank-normalised) per element.
        ess_bulk: name -> bulk effective sample size per element.
        num_divergences: divergent transitions after warm-up (NUTS only).
        converged: whether the fast optimiser met its tolerance (fast path only).
        num_steps: optimiser iterations (fast path) or draws per chain (NUTS).
    """

    rhat: dict[str, np.ndarray] = field(default_factory=dict)
    ess_bulk: dict[str, np.ndarray] = field(default_factory=dict)
    num_divergences: int = 0
    converged: bool = True
    num_steps: int = 0
    seconds: float = float("nan")

    def max_rhat(self) -> float:
        values = [np.nanmax(v) for v in self.rhat.values() if np.size(v)]
        return float(max(values)) if values else float("nan")

    def min_ess_bulk(self) -> float:
        values = [np.nanmin(v) for v in self.ess_bulk.values() if np.size(v)]
        return float(min(values)) if values else float("nan")

    def passed(self, *, max_rhat: float = 1.01, max_divergences: int = 0) -> bool:
        """True when the fit can be trusted under the given thresholds."""
        if not self.converged:
            return False
        rhat = self.max_rhat()
        if not np.isnan(rhat) and rhat > max_rhat:
            return False
        return self.num_divergences <= max_divergences

    def summary(self) -> dict[str, float | int | bool]:
        return {
            "max_rhat": self.max_rhat(),
            "min_ess_bulk": self.min_ess_bulk(),
            "num_divergences": int(self.num_divergences),
            "converged": bool(self.converged),
            "num_steps": int(self.num_steps),
            "seconds": float(self.seconds),
        }


@dataclass(frozen=True)
class Posterior:
    """Draws of the graded response model.

    ``draws`` maps a site name to an array of shape (chain, draw, ...): always
    ``theta`` (comparisons), ``alpha`` and ``log_alpha`` (items), ``b`` (items x
    thresholds); ``skill`` (systems) for the per-system parameterisation.
    ``mode`` holds the unconstrained optimum (fast path) for warm starts.
    """

    draws: dict[str, np.ndarray]
    method: str
    diagnostics: Diagnostics
    mode: dict[str, np.ndarray] | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def flat(self, name: str) -> np.ndarray:
        """Draws of a site with chains merged: (chain * draw, ...)."""
        x = self.draws[name]
        return x.reshape((-1,) + x.shape[2:])

    def mean(self, name: str) -> np.ndarray:
        return self.flat(name).mean(axis=0)

    def sd(self, name: str) -> np.ndarray:
        return self.flat(name).std(axis=0, ddof=1)

    @property
    def num_draws(self) -> int:
        return int(self.draws["theta"].shape[0] * self.draws["theta"].shape[1])


def rank_normalize(x: np.ndarray) -> np.ndarray:
    """Rank-normalise draws (chain, draw, ...) over chains and draws jointly (Vehtari et al. 2021)."""
    c, d = x.shape[:2]
    flat = x.reshape(c * d, -1)
    from scipy.stats import rankdata  # here: scipy.stats costs every command 0.6 s to import

    ranks = rankdata(flat, axis=0, method="average")
    z = ndtri((ranks - 3.0 / 8.0) / (c * d + 1.0 / 4.0))
    return z.reshape(x.shape)


def _split(x: np.ndarray) -> np.ndarray:
    c, d = x.shape[:2]
    half = d // 2
    return np.concatenate([x[:, :half], x[:, d - half :]], axis=0)


def bulk_ess(x: np.ndarray) -> np.ndarray:
    """Bulk effective sample size: ESS of rank-normalised split chains."""
    if x.shape[1] < 4:
        return np.full(x.shape[2:], np.nan)
    return np.asarray(effective_sample_size(_split(rank_normalize(x))))


def rank_rhat(x: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat, the maximum of bulk and folded (Vehtari et al. 2021)."""
    if x.shape[0] * x.shape[1] < 8 or x.shape[1] < 4:
        return np.full(x.shape[2:], np.nan)
    bulk = np.asarray(split_gelman_rubin(rank_normalize(x)))
    folded = np.abs(x - np.median(x.reshape((-1,) + x.shape[2:]), axis=0))
    tail = np.asarray(split_gelman_rubin(rank_normalize(folded)))
    return np.maximum(bulk, tail)
