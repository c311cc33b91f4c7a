"""What a fitted graded response model implies for the data: the net preference and checks.

The effect users read is the net preference of a comparison, Δ: the expected
signed judgment (+1 B better, -1 A better, 0 tie) averaged over the prompts the
comparison was judged on, in [-1, 1]. A fit implies, for every posterior draw,

* the *cell* expectation: a cell's expected signed judgment given its own
  judgments, E[m(theta + eps) | cell's judgments], with the prompt-by-comparison
  effect eps at its posterior given the cell (Gauss-Hermite nodes reweighted by
  the cell's likelihood), plus its conditional variance;
* the *structural* expectation: E[m(theta + eps)] with eps ~ N(0, tau), what the
  model predicts for a cell before seeing it (for the posterior predictive check).

Δ per draw is the mean over the comparison's judged cells of the cell
expectations, plus a normal term with the cells' conditional variance, so the
interval of Δ carries what remains uncertain about each cell's own effect.

Everything here is numbers: (draws, ...) arrays in, arrays out.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from stan_free_models.graded_response import (
    GradedResponse,
    cell_counts,
    cell_nodes,
    lapse_log_probs,
)
from stan_free_models.inference import GRMData, bucket


class Implied(NamedTuple):
    """Model-implied net preference per draw, (D, C) arrays.

    Attributes:
        delta: draws of Δ (cells at their posterior given their own judgments).
        structural: draws of the structural Δ (cells at the model's prediction).
        replicate_var: variance of the observed Δ of replicated data around
            ``structural`` (new cell effects and new judgments, same design).
    """

    delta: np.ndarray
    structural: np.ndarray
    replicate_var: np.ndarray


def signed_moments(cum_logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean and variance of the signed judgment of a K-category response.

    Categories 0..K-1 map to signed values (c - h) / h with h = (K - 1) / 2: for
    K = 3 that is -1, 0, +1; for the paper's net rating (K = 7) it is the rating
    divided by 3, the mean signed judgment of a cell of three.
    """
    probs = GradedResponse(cum_logits).probs
    k = probs.shape[-1]
    h = (k - 1) / 2.0
    values = (jnp.arange(k, dtype=probs.dtype) - h) / h
    mean = (probs * values).sum(-1)
    var = (probs * values**2).sum(-1) - mean**2
    return mean, jnp.maximum(var, 0.0)


@functools.lru_cache(maxsize=16)
def _compiled(
    num_cells: int,
    num_comparisons: int,
    num_categories: int,
    cells_modelled: bool,
    noise: bool,
):
    x_np, log_w_np = cell_nodes()
    h = (num_categories - 1) / 2.0
    # E[s^2] of a random judgment: the signed values' mean square, uniform over categories
    random_sq = float(np.mean(((np.arange(num_categories) - h) / h) ** 2))

    def one(draw, counts, cell_comp, cell_item, cell_n):
        theta, alpha, b, tau, lapse, key = draw  # lapse: () or None (judgments do not lapse)
        x = jnp.asarray(x_np, theta.dtype)
        log_w = jnp.asarray(log_w_np, theta.dtype)
        tau = tau if cells_modelled else jnp.zeros_like(tau)
        eta = theta[cell_comp][:, None] + tau * x[None, :]  # (M, Q)
        cum = alpha[cell_item][:, None, None] * (eta[..., None] - b[cell_item][:, None, :])
        # node weights of each cell: the prior's, times the cell's likelihood at each node
        # (from its category counts, the sufficient statistics of its judgments)
        logp = lapse_log_probs(cum, lapse)  # (M, Q, K)
        lik = jnp.sum(jnp.where(counts[:, None, :] > 0, logp * counts[:, None, :], 0.0), -1)
        post_w = jax.nn.softmax(lik + log_w, axis=-1)  # (M, Q)
        m, v = signed_moments(cum)  # (M, Q)
        if lapse is not None:
            # a judgment is random (signed mean 0) with probability lapse
            second = (1.0 - lapse) * (v + m**2) + lapse * random_sq
            m = (1.0 - lapse) * m
            v = jnp.maximum(second - m**2, 0.0)
        prior_w = jnp.exp(log_w)[None, :]
        cell_mean = (post_w * m).sum(-1)
        cell_var = (post_w * m**2).sum(-1) - cell_mean**2
        struct_mean = (prior_w * m).sum(-1)
        struct_var = (prior_w * m**2).sum(-1) - struct_mean**2
        within = (prior_w * v).sum(-1)
        # padded cells belong to comparison ``num_comparisons``, cut off the result
        count = jax.ops.segment_sum(jnp.ones_like(cell_mean), cell_comp, num_comparisons + 1)
        count = jnp.maximum(count, 1.0)

        def avg(z):
            return jax.ops.segment_sum(z, cell_comp, num_comparisons + 1) / count

        noise_var = avg(jnp.maximum(cell_var, 0.0)) / count
        delta = avg(cell_mean)
        if noise:
            delta = delta + jnp.sqrt(noise_var) * jax.random.normal(key, count.shape)
        rep_var = avg(jnp.maximum(struct_var, 0.0) + within / cell_n) / count
        return delta[:-1], avg(struct_mean)[:-1], rep_var[:-1]

    def run(theta, alpha, b, tau, lapse, keys, *args):
        return jax.lax.map(
            lambda d: one(d, *args), (theta, alpha, b, tau, lapse, keys), batch_size=64
        )

    return jax.jit(run)


def cell_index(data: GRMData) -> np.ndarray:
    """The cell of every observation: ``data.cell``, or one cell per observation."""
    if data.has_cells:
        return np.asarray(data.cell, np.int32)
    return np.arange(data.num_obs, dtype=np.int32)


def implied_net_preference(
    data: GRMData,
    theta: np.ndarray,
    alpha: np.ndarray,
    b: np.ndarray,
    tau: np.ndarray | None = None,
    *,
    lapse: np.ndarray | None = None,
    rng_key: jax.Array,
    max_draws: int = 1000,
    noise: bool = True,
) -> Implied:
    """Draws of Δ, the structural Δ and the replicate variance of every comparison.

    Args:
        data: the fitted observations (unpadded). With ``data.cell`` a cell is a
            comparison's prompt; without, every observation is its own cell (the
            paper's net rating: one observation per cell).
        theta: (D, C) ability differences; alpha: (D, P); b: (D, P, K-1).
        tau: (D,) sd of the prompt-by-comparison effect, or None (no such effect).
        lapse: (D,) the share of judgments given at random, or None (none are): a cell's
            expected signed judgment is then (1 - lapse) times the graded response's.
        rng_key: key of the cells' noise (split into one key per kept draw).
        max_draws: draws used (evenly thinned).
        noise: add the cells' conditional variance to the draws of Δ (False: their mean).
    """
    num_draws = theta.shape[0]
    keep = np.linspace(0, num_draws - 1, min(num_draws, max_draws)).round().astype(np.int64)
    # shapes padded to buckets, so streaming snapshots reuse the compiled function
    cell = cell_index(data)
    num_real = int(cell.max()) + 1 if len(cell) else 1
    num_cells = bucket(num_real)
    num_c, num_p = bucket(data.num_comparisons), bucket(data.num_items)
    cell_comp, cell_item, counts = cell_counts(
        cell, data.comparison, data.item, data.y, data.weight, num_cells, data.num_categories
    )
    # padded cells belong to comparison ``num_c``, cut off the result
    cell_comp[:] = num_c
    cell_comp[cell] = data.comparison
    cell_item[cell] = data.item
    cell_n = np.bincount(cell, minlength=num_cells).astype(np.float32)
    fn = _compiled(num_cells, num_c, data.num_categories, tau is not None, bool(noise))

    def pad(x, n, value=0):
        widths = [(0, 0)] * x.ndim
        widths[1 if x.ndim > 1 else 0] = (0, n)
        return np.pad(x, widths, constant_values=value)

    theta = pad(np.asarray(theta), num_c - data.num_comparisons)
    alpha = pad(np.asarray(alpha), num_p - data.num_items, 1.0)
    b = pad(np.asarray(b), num_p - data.num_items)
    tau_d = np.zeros(len(keep)) if tau is None else np.asarray(tau)[keep]
    lapse_d = None if lapse is None else jnp.asarray(np.asarray(lapse)[keep], jnp.float32)
    keys = jax.random.split(rng_key, len(keep))
    out = fn(
        jnp.asarray(theta[keep], jnp.float32),
        jnp.asarray(alpha[keep], jnp.float32),
        jnp.asarray(b[keep], jnp.float32),
        jnp.asarray(tau_d, jnp.float32),
        lapse_d,
        keys,
        jnp.asarray(counts, jnp.float32),
        jnp.asarray(cell_comp),
        jnp.asarray(cell_item),
        jnp.asarray(np.maximum(cell_n, 1.0)),
    )
    c = data.num_comparisons
    delta, structural, rep_var = (np.asarray(o, np.float64)[:, :c] for o in out)
    return Implied(delta=delta, structural=structural, replicate_var=rep_var)


__all__ = ["Implied", "cell_index", "implied_net_preference", "signed_moments"]
