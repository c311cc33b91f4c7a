"""Each prompt's parameters from their exact conditional given the abilities, by SIR.

The fast path's Gaussian (a Laplace approximation in the unconstrained space) is good
for the abilities, which hundreds of judgments pin down, and poor for a prompt's own
discrimination and thresholds, which a few dozen judgments leave skewed and bounded
(a prompt whose judgments all fall in one category). Given the abilities (and tau),
the prompts are independent: p(items | theta, tau, y) = prod_j p(item_j | theta, tau, y_j),
each a 2-4 dimensional density. So for every posterior draw of the abilities we propose
a few candidates for every prompt from the Laplace conditional N(mu_j | theta, D_j^-1)
(widened), weight them by exact density / proposal density, and keep one per prompt
(sampling-importance-resampling; Rubin 1988). As the candidates grow this samples the
exact conditional; the net preference's draws then need no re-centring on the mode.

Everything here is numbers: arrays in, arrays out.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from stan_free_models.graded_response import cell_counts_log_lik, symmetric_from_half

#: candidates per prompt and draw, and how much wider than the Laplace conditional they are
NUM_CANDIDATES = 8
PROPOSAL_SCALE = 1.3


def item_log_prior(
    items: jax.Array, alpha_scale: float, b_scale: float, symmetric: bool, num_categories: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(log prior density in the unconstrained space up to a constant, alpha, b) of item vectors.

    items: (..., 1 + m) unconstrained (log alpha, then numpyro's ordered transform of
    the thresholds, or of their log positive half when symmetric). The density is the
    model's: log alpha ~ N(0, alpha_scale), every threshold N(0, b_scale), with the
    transforms' log Jacobians.
    """
    log_alpha, raw = items[..., 0], items[..., 1:]
    steps = jnp.concatenate([raw[..., :1], jnp.exp(raw[..., 1:])], axis=-1)
    ordered = jnp.cumsum(steps, axis=-1)
    log_jac = jnp.sum(raw[..., 1:], axis=-1)
    if symmetric:
        half = jnp.exp(ordered)
        log_jac = log_jac + jnp.sum(ordered, axis=-1)
        b = symmetric_from_half(half, num_categories)
    else:
        b = ordered
    lp = -0.5 * (log_alpha / alpha_scale) ** 2 - 0.5 * jnp.sum((b / b_scale) ** 2, axis=-1)
    return lp + log_jac, jnp.exp(log_alpha), b


@functools.lru_cache(maxsize=16)
def _compiled(
    num_items: int,
    num_categories: int,
    alpha_scale: float,
    b_scale: float,
    symmetric: bool,
    num_candidates: int,
    scale: float,
):
    def one(draw, cell_comp, cell_item, counts):
        theta, tau, mean, chol, key = draw  # (C,), (), (P, m), (P, m, m)
        z = jax.random.normal(key, (num_candidates,) + mean.shape, mean.dtype)
        cand = mean[None] + scale * jnp.einsum("jkl,sjl->sjk", chol, z)  # (S, P, m)
        lp, alpha, b = item_log_prior(cand, alpha_scale, b_scale, symmetric, num_categories)

        def loglik(alpha_s, b_s):
            per_cell = cell_counts_log_lik(
                theta[cell_comp], alpha_s[cell_item], b_s[cell_item], tau, counts
            )
            return jax.ops.segment_sum(per_cell, cell_item, num_segments=num_items)

        lik = jax.vmap(loglik)(alpha, b)  # (S, P)
        log_w = lp + lik + 0.5 * jnp.sum(z**2, axis=-1)  # target / proposal, up to a constant
        pick = jax.random.categorical(jax.random.fold_in(key, 1), log_w, axis=0)  # (P,)
        chosen = jnp.take_along_axis(cand, pick[None, :, None], axis=0)[0]
        w = jax.nn.softmax(log_w, axis=0)
        ess = 1.0 / jnp.sum(w**2, axis=0)  # per prompt, in 1..S
        return chosen, ess

    def run(theta, tau, mean, chol, keys, cell_comp, cell_item, counts):
        return jax.lax.map(
            lambda d: one(d, cell_comp, cell_item, counts),
            (theta, tau, mean, chol, keys),
            batch_size=16,
        )

    return jax.jit(run)


def resample_items(
    rng_key: jax.Array,
    theta: np.ndarray,
    tau: np.ndarray,
    cond_mean: np.ndarray,
    cond_chol: np.ndarray,
    cell_comparison: np.ndarray,
    cell_item: np.ndarray,
    counts: np.ndarray,
    *,
    alpha_scale: float,
    b_scale: float,
    symmetric: bool,
    num_categories: int,
    num_candidates: int = NUM_CANDIDATES,
    scale: float = PROPOSAL_SCALE,
) -> tuple[np.ndarray, np.ndarray]:
    """Draws of every prompt's unconstrained parameters from their conditional given theta and tau.

    Args:
        theta: (D, C) abilities per draw (padded as the data); tau: (D,) (0 without cells).
        cond_mean, cond_chol: (D, P, m) and (D, P, m, m): the Laplace conditional of the
            items given each draw's abilities (the proposal).
        cell_comparison, cell_item, counts: the cells' sufficient statistics
            (:func:`stan_free_models.graded_response.cell_counts`).

    Returns:
        (D, P, m) resampled items, and (D, P) the importance weights' effective number
        of candidates (near ``num_candidates``: the proposal was close; near 1: it was not).
    """
    fn = _compiled(
        int(cond_mean.shape[1]),
        int(num_categories),
        float(alpha_scale),
        float(b_scale),
        bool(symmetric),
        int(num_candidates),
        float(scale),
    )
    keys = jax.random.split(rng_key, theta.shape[0])
    chosen, ess = fn(
        jnp.asarray(theta, jnp.float32),
        jnp.asarray(tau, jnp.float32),
        jnp.asarray(cond_mean, jnp.float32),
        jnp.asarray(cond_chol, jnp.float32),
        keys,
        jnp.asarray(cell_comparison, jnp.int32),
        jnp.asarray(cell_item, jnp.int32),
        jnp.asarray(counts, jnp.float32),
    )
    return np.asarray(chosen, np.float64), np.asarray(ess, np.float64)


__all__ = ["item_log_prior", "resample_items"]
