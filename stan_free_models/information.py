"""Fisher information of the graded response model (Samejima 1969).

For an item with discrimination alpha and ordered thresholds b_1 < ... < b_(K-1)
the cumulative probabilities are P*_c(theta) = sigmoid(alpha (theta - b_c)),
with P*_0 = 1 and P*_K = 0, and the category probabilities are
P_c = P*_c - P*_(c+1). Since dP*_c / dtheta = alpha P*_c (1 - P*_c) = alpha W_c,

    I(theta) = sum_c (dP_c / dtheta)^2 / P_c = alpha^2 sum_c (W_c - W_(c+1))^2 / P_c,

the expected curvature of the log-likelihood of one response. Information is
additive over items, so the information of a prompt set at theta is the sum,
and 1 / sqrt(prior precision + sum) approximates the standard error of theta.

With K = 2 this is the 2PL information alpha^2 p (1 - p) (Embretson & Reise
2013, eq. 7.3); ``tests/stan_free_models/test_information.py`` checks both that and the
expected negative second derivative of :func:`graded_log_prob`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

#: categories rarer than this contribute (numerically) nothing; avoids 0/0
_TINY = 1e-30


def item_information(
    theta: np.ndarray | jax.Array, alpha: np.ndarray | jax.Array, b: np.ndarray | jax.Array
) -> jax.Array:
    """Fisher information of graded-response items at abilities theta.

    Args:
        theta: abilities, shape (...) broadcastable against ``alpha``.
        alpha: discriminations, shape (...).
        b: ordered thresholds, shape (..., K-1).

    Returns:
        I(theta), the broadcast shape of theta and alpha.

    Example:
        >>> float(item_information(jnp.array(0.0), jnp.array(2.0), jnp.array([0.0])))
        1.0

    References:
        Samejima (1969); Sedoc & Ungar (2020), section 4.1 (the model).
    """
    theta = jnp.asarray(theta, dtype=jnp.result_type(float))
    alpha = jnp.asarray(alpha, dtype=theta.dtype)
    b = jnp.asarray(b, dtype=theta.dtype)
    cum = jax.nn.sigmoid(alpha[..., None] * (theta[..., None] - b))  # (..., K-1)
    w = cum * (1.0 - cum)
    ones = jnp.ones(cum.shape[:-1] + (1,), cum.dtype)
    zeros = jnp.zeros_like(ones)
    upper = jnp.concatenate([ones, cum], axis=-1)
    lower = jnp.concatenate([cum, zeros], axis=-1)
    w_upper = jnp.concatenate([zeros, w], axis=-1)
    w_lower = jnp.concatenate([w, zeros], axis=-1)
    probs = upper - lower
    dprob = w_upper - w_lower  # d P_c / d theta, divided by alpha
    safe = probs > _TINY
    terms = jnp.where(safe, dprob**2 / jnp.where(safe, probs, 1.0), 0.0)
    return alpha**2 * terms.sum(axis=-1)


def information_matrix(
    theta: np.ndarray | jax.Array, alpha: np.ndarray | jax.Array, b: np.ndarray | jax.Array
) -> jax.Array:
    """Information of every item at every ability: (T,) x items (P,), (P, K-1) -> (T, P)."""
    theta = jnp.asarray(theta)
    return item_information(theta[:, None], jnp.asarray(alpha)[None, :], jnp.asarray(b)[None])


@jax.jit
def expected_information(
    theta_draws: np.ndarray | jax.Array, alpha: np.ndarray | jax.Array, b: np.ndarray | jax.Array
) -> jax.Array:
    """Item information averaged over a sample of abilities (e.g. a tier's posterior draws).

    This is where selection evaluates a prompt: at the abilities of the
    comparisons it will be used for, not at theta = 0.

    Args:
        theta_draws: any shape; flattened into one sample of abilities.
        alpha: (P,) discriminations; b: (P, K-1) thresholds.

    Returns:
        (P,) mean information per item.

    Compiled as one program per shape: op by op, each of its dozen operations compiled
    for every new number of draws (about 1 s per shape on 2 cores, where a LOCO fold's
    tier refits bring new ones), against 0.1-0.3 s for the whole program. The two agree
    to float32 rounding (relative 2e-7), not bit for bit.
    """
    flat = jnp.ravel(jnp.asarray(theta_draws))
    return information_matrix(flat, alpha, b).mean(axis=0)


def set_information(
    theta: np.ndarray | jax.Array, alpha: np.ndarray | jax.Array, b: np.ndarray | jax.Array
) -> jax.Array:
    """Test information of a set of items (a prompt set) at every ability, averaged over parameter draws.

    Args:
        theta: (T,) abilities.
        alpha: (D, P) draws of the set's discriminations; b: (D, P, K-1) of its thresholds.

    Returns:
        (T,) mean over draws of sum_j I_j(theta): the set's information curve; with a
        prior precision of 1, 1 / sqrt(1 + it) is the expected SE of theta.

    Example:
        >>> a, b = jnp.ones((1, 2)) * 2.0, jnp.zeros((1, 2, 1))
        >>> float(set_information(jnp.array([0.0]), a, b)[0])
        2.0
    """
    theta = jnp.asarray(theta, dtype=jnp.result_type(float))
    info = item_information(theta[:, None, None], jnp.asarray(alpha)[None], jnp.asarray(b)[None])
    return info.sum(axis=-1).mean(axis=-1)


def standard_error(
    theta: np.ndarray | jax.Array,
    alpha: np.ndarray | jax.Array,
    b: np.ndarray | jax.Array,
    *,
    prior_precision: float = 1.0,
) -> jax.Array:
    """Expected SE of theta from items (P,) at ability theta: 1 / sqrt(prior + sum I_j)."""
    info = item_information(jnp.asarray(theta)[..., None], alpha, b).sum(axis=-1)
    return 1.0 / jnp.sqrt(prior_precision + info)


__all__ = [
    "expected_information",
    "information_matrix",
    "item_information",
    "set_information",
    "standard_error",
]
