"""Anchor prompts that cover the prompts' spread, and the full set's net preference from them.

A pruned set is used on new systems to estimate what the full set would have said. Kept
prompts chosen as the most informative sit in one tail of the prompts' effects, so their
own average is not the full set's. Here the prompts are placed on one axis, the posterior
mean of their shared effect v_p (:func:`~adaptive.prompts.prune_shrinkage.fit_shrinkage`
on the judgments already made), and:

* :func:`anchor_prompts` keeps the medoid of each of k equal slices of that axis (one
  dimension's k-medoids: the anchors span the prompts as tinyBenchmarks' anchor points
  span their item embeddings, Polo et al. 2024);
* :func:`regression_estimate` predicts a new comparison's full-set net preference from the
  anchors' cell means by least squares on v_p: mean = c + lambda x mean of v_p over all
  prompts. v_p's posterior mean is E[v | old judgments], so E[new cell mean | v_p] is
  linear in it and a selection made on v_p does not bias the fit (a regression is
  conditional on its covariate). Its standard error adds the anchors' residual spread,
  their judgments' noise and the prompts left out (module code: ``_error_variance``).

What it can gain over a random subset is bounded by the noise: a cell mean's judgment
noise is part of every estimator's error, so the error ratio to random is at least
sqrt(noise / (noise + between-prompt variance)) per cell mean (:func:`error_ratio_bound`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats


def anchor_prompts(score: np.ndarray, k: int) -> np.ndarray:
    """The medoid of each of ``k`` equal slices of ``score`` (P,): k prompts spanning it."""
    order = np.argsort(score, kind="stable")
    k = int(min(max(k, 1), len(order)))
    edges = np.round(np.linspace(0, len(order), k + 1)).astype(int)
    return np.array([order[(lo + hi - 1) // 2] for lo, hi in zip(edges[:-1], edges[1:])])


@dataclass(frozen=True)
class FullSetEstimate:
    """A comparison's full-set net preference predicted from a few prompts, with its SE."""

    estimate: float
    se: float
    dof: int

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        half = stats.t.ppf(0.5 + level / 2, max(self.dof, 1)) * self.se
        return (self.estimate - half, self.estimate + half)


def _error_variance(
    weights: np.ndarray, residual_var: float, noise: np.ndarray, num_all: int
) -> float:
    """Var of sum_kept w_p (r_p + noise_p) - mean over all prompts of r_p.

    r_p is a prompt's true departure from the line (variance ``residual_var``), noise_p
    its cell mean's judgment noise (variance ``noise``); the prompts not kept enter the
    full set's mean only through r.
    """
    k = len(weights)
    own = residual_var * (np.sum((weights - 1.0 / num_all) ** 2) + (num_all - k) / num_all**2)
    return float(own + np.sum(weights**2 * noise))


def regression_estimate(
    y: np.ndarray, x: np.ndarray, x_all: np.ndarray, noise: np.ndarray
) -> FullSetEstimate:
    """The full-set mean of a comparison from its kept prompts' cell means (module doc).

    Args:
        y: (k,) the kept prompts' cell means on the comparison.
        x: (k,) their covariate; ``x_all`` (P,) every prompt's.
        noise: (k,) each cell mean's judgment noise variance.
    """
    k, num_all = len(y), len(x_all)
    centre = float(np.mean(x_all))
    design = np.column_stack([np.ones(k), x - centre])
    gram = design.T @ design
    if k < 3 or np.linalg.cond(gram) > 1e12:
        weights = np.full(k, 1.0 / k)  # too few or alike prompts for a slope: their mean
        dof = max(k - 1, 1)
    else:
        weights = np.linalg.solve(gram, design.T)[0]  # intercept at the full set's centre
        dof = k - 2
    estimate = float(weights @ y)
    fitted = design @ np.linalg.lstsq(design, y, rcond=None)[0] if dof == k - 2 else estimate
    total = float(np.sum((y - fitted) ** 2) / dof)
    residual_var = max(total - float(np.mean(noise)), 0.0)
    return FullSetEstimate(
        estimate, np.sqrt(_error_variance(weights, residual_var, noise, num_all)), dof
    )


def mean_estimate(y: np.ndarray, num_all: int, noise: np.ndarray) -> FullSetEstimate:
    """The plain mean of a random subset's cell means; the prompts' spread has the
    finite-population correction, the judgments' noise does not."""
    k = len(y)
    if k < 2:
        return FullSetEstimate(float(np.mean(y)), np.inf, 1)
    spread = max(float(np.var(y, ddof=1)) - float(np.mean(noise)), 0.0)
    var = spread / k * (1 - k / num_all) + float(np.mean(noise)) / k
    return FullSetEstimate(float(np.mean(y)), np.sqrt(var), k - 1)


def error_ratio_bound(between: float, noise: float) -> float:
    """The least error ratio to a random subset's mean when the covariate explains every
    between-prompt difference: the noise of the cell means remains."""
    total = between + noise
    return float(np.sqrt(noise / total)) if total > 0 else 1.0


__all__ = [
    "FullSetEstimate",
    "anchor_prompts",
    "error_ratio_bound",
    "mean_estimate",
    "regression_estimate",
]
