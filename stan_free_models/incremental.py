"""Skill-only Laplace updates: new judgments move the abilities, item parameters stay.

Between two full fits (MAP + Laplace of every parameter, :func:`fit_laplace`) a
streaming service re-estimates only the per-system skills ``s``, with the item
parameters (alpha, b) held at the last full fit's mode:

* **Mode.** Newton's method on ``U(s) = |s|^2 / (2 v) - sum_n w_n log p(y_n | s_B - s_A)``
  (prior ``s ~ N(0, v)``, ``v = theta_scale^2``). The graded-response likelihood is
  log-concave in theta (logistic cumulative links), so ``U`` is strictly convex and Newton
  steps from the previous mode converge in a few iterations.
* **Derivatives, exactly and cheaply.** Each observation depends on one
  comparison's ``theta``, so the theta-Hessian of the log likelihood is
  diagonal: one gradient and one Hessian-vector product with a vector of ones
  give it. With the (C, S) incidence ``A`` (``theta = A s``):
  ``grad = s - A^T g`` and ``H = I - A^T diag(h) A``. Each step is two passes
  over the observations, whatever the number of prompts.
* **Covariance.** The conditional covariance ``H^-1`` ignores the uncertainty of
  the item parameters. The full fit's marginal skill covariance is
  ``Sigma_full = (H_ss - B D^-1 B^T)^-1`` (Schur complement), which exceeds its
  conditional covariance ``H_ss^-1`` by a positive semi-definite term: the
  share of skill variance that comes from not knowing the items. That term is
  carried over: ``Sigma = H^-1 + (Sigma_full - H_full^-1)``. It is held fixed
  until the next full fit, which is why updates should span a small share of
  the data (the streaming worker refreshes the items every few percent).

On the same data as the full fit an update reproduces the full fit's skill
mode and covariance (a test checks this); on 5% more data it tracks a full
refit to within a small fraction of a posterior sd.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from stan_free_models.graded_response import graded_log_prob
from stan_free_models.inference import GRMData, _constrain_items, pad_data
from stan_free_models.model_key import DEFAULT_PRIORS, Priors

#: counts how often the compiled update is traced (a test checks reuse across batches)
TRACE_COUNTS: dict[str, int] = {"skills": 0}


@dataclass(frozen=True)
class ItemPoint:
    """Item parameters held fixed: discrimination and ordered thresholds per item."""

    alpha: np.ndarray  # (P,)
    b: np.ndarray  # (P, K-1)

    @classmethod
    def from_mode(cls, items_mode: np.ndarray, *, priors: Priors, num_categories: int) -> ItemPoint:
        """From the unconstrained item block of :attr:`Posterior.mode` (``mode["items"]``)
        of a fit with ``priors``."""
        log_alpha, b = _constrain_items(
            np.asarray(items_mode, dtype=np.float64), priors, num_categories
        )
        return cls(alpha=np.exp(log_alpha), b=b)


@dataclass(frozen=True)
class SkillFit:
    """The result of :func:`update_skills` (real systems only, no padding)."""

    mode: np.ndarray  # (S,)
    cov: np.ndarray  # (S, S) conditional covariance + item-uncertainty term
    conditional_cov: np.ndarray  # (S, S) H^-1 at the mode
    draws: np.ndarray  # (D, S)
    grad_norm: float
    num_steps: int
    converged: bool


@functools.lru_cache(maxsize=16)
def _compiled_newton(num_systems: int, priors: Priors):
    """Newton's method for the skills of one padded shape (jit re-traces per bucket only)."""
    theta_scale = priors.theta_scale

    def derivatives(s, alpha, b, comparison, item, y, weight, pair_a, pair_b):
        def loglik(theta):
            cum = alpha[item][:, None] * (theta[comparison][:, None] - b[item])
            return jnp.sum(weight * graded_log_prob(y, cum))

        theta = s[pair_b] - s[pair_a]
        g, h = jax.jvp(jax.grad(loglik), (theta,), (jnp.ones_like(theta),))
        incidence = jax.nn.one_hot(pair_b, num_systems) - jax.nn.one_hot(pair_a, num_systems)
        precision = 1.0 / theta_scale**2
        grad = precision * s - incidence.T @ g
        hess = precision * jnp.eye(num_systems, dtype=s.dtype) - incidence.T @ (
            h[:, None] * incidence
        )
        return grad, 0.5 * (hess + hess.T)

    def run(s0, alpha, b, comparison, item, y, weight, pair_a, pair_b, tol, max_steps):
        TRACE_COUNTS["skills"] += 1  # runs at trace time only
        args = (alpha, b, comparison, item, y, weight, pair_a, pair_b)

        def keep_going(carry):
            _, k, decrement = carry
            return (k < max_steps) & (decrement > tol)

        def step(carry):
            s, k, _ = carry
            grad, hess = derivatives(s, *args)
            delta = jnp.linalg.solve(hess, grad)
            return s - delta, k + 1, jnp.dot(grad, delta)

        s, steps, _ = jax.lax.while_loop(keep_going, step, (s0, 0, jnp.asarray(jnp.inf, s0.dtype)))
        grad, hess = derivatives(s, *args)
        return s, hess, jnp.linalg.norm(grad), steps

    return jax.jit(run)


def _padded(data: GRMData, items: ItemPoint):
    if not data.per_system:
        raise ValueError("skill updates need the per-system parameterisation (pair_a, pair_b)")
    if len(items.alpha) != data.num_items or items.b.shape != (
        data.num_items,
        data.num_categories - 1,
    ):
        raise ValueError(
            f"item parameters for {len(items.alpha)} items, the data has {data.num_items}"
        )
    padded = pad_data(data)
    p_pad = padded.num_items - data.num_items
    # padding items are never observed with a nonzero weight
    alpha = np.concatenate([items.alpha, np.ones(p_pad)]).astype(np.float32)
    b = np.concatenate([items.b, np.zeros((p_pad, items.b.shape[1]))]).astype(np.float32)
    return padded, alpha, b


def update_skills(
    data: GRMData,
    items: ItemPoint,
    *,
    init: np.ndarray | None = None,
    item_term: np.ndarray | None = None,
    rng_key: jax.Array,
    num_draws: int = 1000,
    max_steps: int = 25,
    tol: float = 1e-9,
    priors: Priors = DEFAULT_PRIORS,
) -> SkillFit:
    """Mode, covariance and draws of the skills given fixed item parameters.

    Args:
        data: per-system observations (``pair_a``/``pair_b`` set).
        items: the item parameters to hold (one entry per item of ``data``).
        init: (S,) starting skills (e.g. the previous mode); default zeros.
        item_term: (S, S) item-uncertainty covariance to add (:func:`item_uncertainty`);
            default none (a purely conditional posterior).
        rng_key: key of the draws.
        num_draws: draws of the Gaussian approximation.
        max_steps, tol: Newton limits (stops when the Newton decrement
            ``grad^T H^-1 grad`` falls below ``tol``).
        priors: the full fit's (:class:`Priors`); the skills' prior sd is its ``theta_scale``.
    """
    padded, alpha, b = _padded(data, items)
    s_real = data.num_systems
    assert s_real is not None  # per-system data (checked by _padded)
    s0 = np.zeros(padded.num_systems, np.float32)
    if init is not None:
        n = min(len(init), s_real)
        s0[:n] = np.asarray(init, np.float32)[:n]
    # the step limit is a runtime value: evaluating at a given point (max_steps=0) reuses
    # the compiled update instead of compiling a second one
    run = _compiled_newton(int(padded.num_systems), priors.canonical())
    s, hess, grad_norm, steps = jax.device_get(
        run(
            jnp.asarray(s0),
            jnp.asarray(alpha),
            jnp.asarray(b),
            *(
                jnp.asarray(x)
                for x in (
                    padded.comparison,
                    padded.item,
                    padded.y,
                    padded.weight,
                    padded.pair_a,
                    padded.pair_b,
                )
            ),
            jnp.asarray(tol, jnp.float32),
            jnp.asarray(max_steps, jnp.int32),
        )
    )
    hess = np.asarray(hess, np.float64)[:s_real, :s_real]
    conditional = np.linalg.inv(hess)
    conditional = 0.5 * (conditional + conditional.T)
    cov = conditional if item_term is None else conditional + np.asarray(item_term, np.float64)
    mode = np.asarray(s, np.float64)[:s_real]
    chol = np.linalg.cholesky(cov)
    z = np.asarray(jax.random.normal(rng_key, (num_draws, s_real)), np.float64)
    finite = bool(np.isfinite(mode).all() and np.isfinite(chol).all())
    # the decrement test is scale-free; the gradient check guards the last step
    converged = (
        finite
        and int(steps) < max_steps
        and float(grad_norm) < 1e-2 * max(1.0, np.sqrt(data.num_obs / 1000))
    )
    return SkillFit(
        mode=mode,
        cov=cov,
        conditional_cov=conditional,
        draws=mode + z @ chol.T,
        grad_norm=float(grad_norm),
        num_steps=int(steps),
        converged=converged,
    )


def item_uncertainty(marginal_cov: np.ndarray, conditional_cov: np.ndarray) -> np.ndarray:
    """``Sigma_full - H_full^-1``, the skill variance due to item uncertainty (made PSD)."""
    diff = np.asarray(marginal_cov, np.float64) - np.asarray(conditional_cov, np.float64)
    diff = 0.5 * (diff + diff.T)
    values, vectors = np.linalg.eigh(diff)
    return (vectors * np.clip(values, 0.0, None)) @ vectors.T


__all__ = ["TRACE_COUNTS", "ItemPoint", "SkillFit", "item_uncertainty", "update_skills"]
