"""Samejima's graded response model for paired comparisons (Sedoc & Ungar, section 4.1).

For comparison i ("A vs B", ability difference theta_i, > 0 when B is better)
and item j (a prompt, or a group of redundant prompts) with discrimination
alpha_j and ordered thresholds b_j1 < ... < b_j(K-1), the response y in
{0, ..., K-1} (a net rating shifted to start at 0) follows

    P(y >= c) = sigmoid(alpha_j * (theta_i - b_jc)),    c = 1..K-1,
    P(y = c)  = P(y >= c) - P(y >= c + 1),

with P(y >= 0) = 1 and P(y >= K) = 0. Priors (:class:`stan_free_models.model_key.Priors`):
theta ~ N(0, theta_scale) (or, per system, s ~ N(0, theta_scale) with
theta_(A vs B) = s_B - s_A), log alpha ~ N(0, alpha_scale), b ~ N(0, b_scale)
restricted to ordered vectors (Stan's ``ordered`` type with a normal prior).

The likelihood is evaluated in log space (log-sigmoid differences, as Stan's
``ordered_logistic``) because ``numpyro.distributions.OrderedLogistic`` works
with probabilities that underflow at NUTS's random initial points.
"""

from __future__ import annotations

from typing import overload

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.distributions.util import validate_sample

from stan_free_models.model_key import DEFAULT_PRIORS, Priors

#: Gauss-Hermite nodes that integrate the prompt-by-comparison effect out of a cell
NUM_CELL_NODES = 11
#: prior of the lapse rate (the share of judgments given at random): Beta(1, 9), mean 0.1
LAPSE_PRIOR = (1.0, 9.0)


def cell_nodes(num_nodes: int = NUM_CELL_NODES) -> tuple[np.ndarray, np.ndarray]:
    """Nodes x and log weights of E[f(z)], z ~ N(0, 1), by Gauss-Hermite quadrature.

    Example:
        >>> x, lw = cell_nodes(5)
        >>> round(float((np.exp(lw) * x**2).sum()), 6)
        1.0
    """
    x, w = np.polynomial.hermite_e.hermegauss(num_nodes)
    return x, np.log(w / w.sum())


def log1m_exp(x: jax.Array) -> jax.Array:
    """log(1 - exp(x)) for x <= 0, accurate on both ends (Maechler 2012)."""
    x = jnp.minimum(x, 0.0)
    return jnp.where(x > -0.6931471805599453, jnp.log(-jnp.expm1(x)), jnp.log1p(-jnp.exp(x)))


def graded_log_prob(y: jax.Array, cum_logits: jax.Array) -> jax.Array:
    """Log P(y) of a graded response, stable in float32.

    Args:
        y: integer categories in 0..K-1, shape (...).
        cum_logits: (..., K-1) logits of P(y >= c), c = 1..K-1, decreasing in c
            (alpha * (theta - b_c) with b increasing).

    Returns:
        log P(y), shape (...).

    Uses log(sigmoid(u) - sigmoid(l)) = log_sigmoid(u) + log_sigmoid(-l) + log1m_exp(l - u)
    with u = +inf for the lowest category and l = -inf for the highest.
    """
    num_cut = cum_logits.shape[-1]
    y = jnp.asarray(y, dtype=jnp.int32)
    upper_idx = jnp.clip(y - 1, 0, num_cut - 1)
    lower_idx = jnp.clip(y, 0, num_cut - 1)
    upper_raw = jnp.take_along_axis(cum_logits, upper_idx[..., None], axis=-1)[..., 0]
    lower_raw = jnp.take_along_axis(cum_logits, lower_idx[..., None], axis=-1)[..., 0]
    has_upper = y > 0
    has_lower = y < num_cut
    # Safe values in the unused branch keep gradients finite.
    upper = jnp.where(has_upper, upper_raw, 0.0)
    lower = jnp.where(has_lower, lower_raw, 0.0)
    term_upper = jnp.where(has_upper, jax.nn.log_sigmoid(upper), 0.0)
    term_lower = jnp.where(has_lower, jax.nn.log_sigmoid(-lower), 0.0)
    gap = jnp.where(has_upper & has_lower, lower - upper, -jnp.inf)
    term_gap = jnp.where(
        has_upper & has_lower, log1m_exp(jnp.where(has_upper & has_lower, gap, -1.0)), 0.0
    )
    return term_upper + term_lower + term_gap


class GradedResponse(dist.Distribution):
    """Categorical over 0..K-1 given the K-1 cumulative logits of a graded response."""

    arg_constraints = {"cum_logits": constraints.real_vector}
    pytree_data_fields = ("cum_logits",)

    def __init__(self, cum_logits: jax.Array, *, validate_args: bool | None = None):
        self.cum_logits = cum_logits
        self.num_categories = cum_logits.shape[-1] + 1
        super().__init__(batch_shape=cum_logits.shape[:-1], validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.num_categories - 1)

    def sample(self, key, sample_shape=()):
        shape = sample_shape + self.batch_shape
        u = jax.random.uniform(key, shape + (1,))
        return jnp.sum(u < jax.nn.sigmoid(self.cum_logits), axis=-1).astype(jnp.int32)

    @validate_sample
    def log_prob(self, value):
        value, logits = value, self.cum_logits
        value = jnp.broadcast_to(value, jnp.broadcast_shapes(jnp.shape(value), self.batch_shape))
        logits = jnp.broadcast_to(logits, value.shape + logits.shape[-1:])
        return graded_log_prob(value, logits)

    @property
    def probs(self) -> jax.Array:
        """(..., K) category probabilities."""
        cum = jax.nn.sigmoid(self.cum_logits)
        ones = jnp.ones(cum.shape[:-1] + (1,), cum.dtype)
        zeros = jnp.zeros_like(ones)
        upper = jnp.concatenate([ones, cum], axis=-1)
        lower = jnp.concatenate([cum, zeros], axis=-1)
        return upper - lower


@overload
def symmetric_from_half(half: jax.Array, num_categories: int) -> jax.Array: ...


@overload
def symmetric_from_half(half: np.ndarray, num_categories: int) -> np.ndarray: ...


def symmetric_from_half(
    half: jax.Array | np.ndarray, num_categories: int
) -> jax.Array | np.ndarray:
    """Thresholds symmetric about 0 from their positive half: (..., m) -> (..., K-1).

    Example: half (d1 < d2 < d3), K = 7 -> (-d3, -d2, -d1, d1, d2, d3); K even adds a 0.
    """
    xp = jnp if isinstance(half, jax.Array) else __import__("numpy")
    parts = [-xp.flip(half, axis=-1)]
    if (num_categories - 1) % 2 == 1:
        parts.append(xp.zeros(half.shape[:-1] + (1,), dtype=half.dtype))
    parts.append(half)
    return xp.concatenate(parts, axis=-1)


def category_probs(theta: jax.Array, alpha: jax.Array, b: jax.Array) -> jax.Array:
    """(..., K) probabilities of every category at ability theta for item (alpha, b)."""
    cum_logits = alpha[..., None] * (theta[..., None] - b)
    return GradedResponse(cum_logits).probs


def node_log_probs(
    eta: jax.Array, alpha: jax.Array, b: jax.Array, tau: jax.Array, y: jax.Array, weight: jax.Array
) -> jax.Array:
    """(N, Q) weighted log P(y) of each observation at every quadrature node eps = tau x_q."""
    x, _ = cell_nodes()
    shifted = eta[:, None] + tau * jnp.asarray(x, dtype=eta.dtype)[None, :]  # (N, Q)
    cum_logits = alpha[:, None, None] * (shifted[..., None] - b[:, None, :])  # (N, Q, K-1)
    logp = graded_log_prob(jnp.broadcast_to(y[:, None], shifted.shape), cum_logits)
    return jnp.where(weight[:, None] > 0, logp * weight[:, None], 0.0)


def cell_log_lik(
    eta: jax.Array,
    alpha: jax.Array,
    b: jax.Array,
    tau: jax.Array,
    y: jax.Array,
    weight: jax.Array,
    cell: jax.Array,
    num_cells: int,
) -> jax.Array:
    """(M,) log-likelihood of each cell with its prompt-by-comparison effect integrated out.

    log integral prod_k P(y_k | eta_k + eps) N(eps; 0, tau) d eps, by Gauss-Hermite
    quadrature over eps = tau x (``NUM_CELL_NODES`` nodes). Per-observation args are
    (N,) (b: (N, K-1)); an empty cell contributes 0.
    """
    _, log_w = cell_nodes()
    per_cell = jax.ops.segment_sum(
        node_log_probs(eta, alpha, b, tau, y, weight), cell, num_segments=num_cells
    )
    return jax.nn.logsumexp(per_cell + jnp.asarray(log_w, dtype=per_cell.dtype), axis=-1)


def graded_log_probs_all(cum_logits: jax.Array) -> jax.Array:
    """(..., K) log P(y = c) of every category, from the (..., K-1) cumulative logits.

    log P(c) = log(sigmoid(u) - sigmoid(l)) = log_sigmoid(u) + log_sigmoid(-l) + log(1 - exp(l - u))
    with u, l the logits at c and c + 1, as :func:`graded_log_prob`, but each log_sigmoid
    is computed once for all categories (log_sigmoid(-x) = log_sigmoid(x) - x), which
    halves the transcendental functions of the likelihood's inner loop.
    """
    ls_pos = jax.nn.log_sigmoid(cum_logits)  # log P(y >= c)
    ls_neg = ls_pos - cum_logits  # log P(y < c)
    first = ls_neg[..., :1]
    last = ls_pos[..., -1:]
    upper, lower = cum_logits[..., :-1], cum_logits[..., 1:]
    # log(-expm1(x)) is accurate to ~1e-7 in absolute terms for every x < 0, which is
    # all a log-likelihood needs; the clip keeps tied thresholds finite
    gap = jnp.minimum(lower - upper, -1e-6)
    middle = ls_pos[..., :-1] + ls_neg[..., 1:] + jnp.log(-jnp.expm1(gap))
    return jnp.concatenate([first, middle, last], axis=-1)


def cell_counts_log_lik(
    eta: jax.Array,
    alpha: jax.Array,
    b: jax.Array,
    tau: jax.Array,
    counts: jax.Array,
    num_nodes: int = NUM_CELL_NODES,
    lapse: jax.Array | None = None,
) -> jax.Array:
    """(M,) cell log-likelihoods from each cell's (weighted) count of every category.

    The same integral as :func:`cell_log_lik`, from sufficient statistics: the judgments
    of a cell differ only in their category, so sum_k w_k log P(y_k | eps) =
    sum_c n_c log P(c | eps), and the cost is O(cells x nodes x K) rather than
    O(judgments x nodes). Per-cell args: eta (M,), alpha (M,), b (M, K-1), counts (M, K).
    ``num_nodes=1`` is the likelihood without a cell effect (the one node sits at eps = 0),
    exactly, at a fraction of the cost: what a fit without cells (tau = 0) should use.
    ``lapse`` (a scalar in (0, 1)): each judgment is, with that probability, given at
    random (every category equally likely) instead of by the graded response; the
    counts stay sufficient, since every judgment of a category has the same mixture
    probability.
    """
    x, log_w = cell_nodes(num_nodes)
    shifted = eta[:, None] + tau * jnp.asarray(x, dtype=eta.dtype)[None, :]  # (M, Q)
    cum_logits = alpha[:, None, None] * (shifted[..., None] - b[:, None, :])  # (M, Q, K-1)
    logp = lapse_log_probs(cum_logits, lapse)  # (M, Q, K)
    per_node = jnp.sum(jnp.where(counts[:, None, :] > 0, logp * counts[:, None, :], 0.0), axis=-1)
    return jax.nn.logsumexp(per_node + jnp.asarray(log_w, dtype=per_node.dtype), axis=-1)


def lapse_log_probs(cum_logits: jax.Array, lapse: jax.Array | None) -> jax.Array:
    """(..., K) log P(y = c) of a judgment that is random (uniform) with probability ``lapse``.

    log((1 - lapse) P_grm(c) + lapse / K) from the (..., K-1) cumulative logits;
    ``lapse=None`` is :func:`graded_log_probs_all`. With a lapse the mixture is at least
    lapse / K, so it is formed in probability space, with every category's probability
    a product of sigmoids (P(c) = sigmoid(u) sigmoid(-l) (1 - exp(l - u)), no cancellation)
    and one log per category: value and gradient cost about half the log-space
    mixture's (the lapse fits spend most of their time here; docs/performance.md), equal
    to it to float rounding (tested against a float64 reference at rates down to 1e-6).

    Example:
        >>> cum = jnp.array([[1.0, -1.0]])  # P_grm = 0.269, 0.462, 0.269
        >>> [round(float(v), 4) for v in jnp.exp(lapse_log_probs(cum, jnp.float32(0.3)))[0]]
        [0.2883, 0.4235, 0.2883]
    """
    if lapse is None:
        return graded_log_probs_all(cum_logits)
    k = cum_logits.shape[-1] + 1
    s_pos = jax.nn.sigmoid(cum_logits)  # P(y >= c)
    s_neg = jax.nn.sigmoid(-cum_logits)  # P(y < c), accurate where P(y >= c) is near 1
    upper, lower = cum_logits[..., :-1], cum_logits[..., 1:]
    gap = jnp.minimum(lower - upper, -1e-6)  # as graded_log_probs_all: tied thresholds
    middle = s_pos[..., :-1] * s_neg[..., 1:] * -jnp.expm1(gap)
    probs = jnp.concatenate([s_neg[..., :1], middle, s_pos[..., -1:]], axis=-1)
    mixture = (1.0 - lapse) * probs + lapse / k
    # finite even where a rate near 0 (NUTS may visit one) meets a category that underflows
    return jnp.log(jnp.maximum(mixture, jnp.finfo(mixture.dtype).tiny))


def cell_counts(
    cell: np.ndarray,
    comparison: np.ndarray,
    item: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray,
    num_cells: int,
    num_categories: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-cell comparison, item and weighted category counts (M,), (M,), (M, K) of observations."""
    cell = np.asarray(cell, np.int64)
    counts = np.zeros((num_cells, num_categories), np.float32)
    np.add.at(counts, (cell, np.asarray(y, np.int64)), np.asarray(weight, np.float32))
    cell_comparison = np.zeros(num_cells, np.int32)
    cell_item = np.zeros(num_cells, np.int32)
    # padding (weight 0) shares cell 0 with real observations: it must not relabel it
    real = np.asarray(weight) > 0
    cell_comparison[cell[real]] = np.asarray(comparison)[real]
    cell_item[cell[real]] = np.asarray(item)[real]
    return cell_comparison, cell_item, counts


def graded_response(
    comparison: jax.Array,
    item: jax.Array,
    num_comparisons: int,
    num_items: int,
    num_categories: int,
    y: jax.Array | None = None,
    weight: jax.Array | None = None,
    pair_a: jax.Array | None = None,
    pair_b: jax.Array | None = None,
    num_systems: int | None = None,
    cell: jax.Array | None = None,
    num_cells: int | None = None,
    cell_comparison: jax.Array | None = None,
    cell_item: jax.Array | None = None,
    cell_y_counts: jax.Array | None = None,
    priors: Priors = DEFAULT_PRIORS,
) -> None:
    """The graded response model as a NumPyro function.

    Args:
        comparison: (N,) comparison index of each observation.
        item: (N,) item index of each observation.
        num_comparisons, num_items, num_categories: sizes (K = num_categories).
        y: (N,) observed categories, or None to sample from the prior predictive.
        weight: (N,) likelihood weights; 0 removes an observation (padding),
            1/m counts a group of m redundant prompts as one.
        pair_a, pair_b, num_systems: give all three for the per-system
            parameterisation theta_i = s[pair_b[i]] - s[pair_a[i]].
        cell, num_cells: (N,) the cell (a comparison's prompt) of each observation.
            Given, the judgments of a cell share a prompt-by-comparison effect
            eps ~ N(0, tau) added to theta (they judge the same two responses), and
            eps is integrated out of each cell's likelihood by Gauss-Hermite
            quadrature, so the fit has one extra parameter (tau ~ HalfNormal(tau_scale)),
            not one per cell. Observations are then required (no prior predictive).
        cell_comparison, cell_item, cell_y_counts: the cells' sufficient statistics
            (:func:`cell_counts`); given with ``cell``, the likelihood is computed per
            cell from them (the same value, at a cost that does not grow with the
            judgments per cell).
        priors: the model's priors and variants (:class:`Priors`):

            * ``alpha_scale``, ``b_scale``: prior sds of log alpha and of the thresholds.
            * ``symmetric``: constrain b_jc = -b_j(K-c), so that theta = 0 means A and B
              are equally likely to win every prompt (A/B exchangeability). The paper's
              model (False) leaves the thresholds free; then where theta = 0 lies is set by
              the priors rather than by the data.
            * ``tau_scale``: with cells, tau ~ HalfNormal(tau_scale).
            * ``lapse``: with cells, each judgment is given at random (uniform over the
              categories) with a learned probability ``lapse ~ Beta(LAPSE_PRIOR)``, and by
              the graded response otherwise: an inattentive or random annotator's
              judgments then neither pull theta nor look like a flat prompt.
            * ``theta_scale``: theta ~ N(0, theta_scale) (per system: each skill). The
              paper's is 1; the prior pulls a strong comparison, whose judgments are
              nearly unanimous and tell little about how strong it is, towards 0.

    References:
        Samejima (1969); Sedoc & Ungar (2020), section 4.1.
    """
    lapse, theta_scale = priors.lapse, priors.theta_scale
    if lapse and cell is None:
        raise ValueError(
            "lapse needs cells (cell, num_cells): the lapse lives in the cell likelihood"
        )
    if pair_a is not None:
        skill = numpyro.sample(
            "skill", dist.Normal(0.0, theta_scale).expand([num_systems]).to_event(1)
        )
        theta = numpyro.deterministic("theta", skill[pair_b] - skill[pair_a])
    else:
        theta = numpyro.sample(
            "theta", dist.Normal(0.0, theta_scale).expand([num_comparisons]).to_event(1)
        )
    log_alpha = numpyro.sample(
        "log_alpha", dist.Normal(0.0, priors.alpha_scale).expand([num_items]).to_event(1)
    )
    if priors.symmetric:
        half = numpyro.sample(
            "b_half",
            dist.ImproperUniform(
                constraints.positive_ordered_vector, (), (num_items, (num_categories - 1) // 2)
            ),
        )
        b = numpyro.deterministic("b", symmetric_from_half(half, num_categories))
    else:
        b = numpyro.sample(
            "b",
            dist.ImproperUniform(constraints.ordered_vector, (), (num_items, num_categories - 1)),
        )
    numpyro.factor("b_prior", dist.Normal(0.0, priors.b_scale).log_prob(b).sum())
    alpha = jnp.exp(log_alpha)
    if cell is not None:
        tau = numpyro.sample("tau", dist.HalfNormal(priors.tau_scale))
        rate = numpyro.sample("lapse", dist.Beta(*LAPSE_PRIOR)) if lapse else None
        if cell_y_counts is not None:
            lik = cell_counts_log_lik(
                theta[cell_comparison],
                alpha[cell_item],
                b[cell_item],
                tau,
                cell_y_counts,
                lapse=rate,
            )
        else:
            assert not lapse, "the lapse needs the cells' counts"
            w = jnp.ones(comparison.shape[0]) if weight is None else weight
            assert y is not None and num_cells is not None, "cells need observations"
            lik = cell_log_lik(theta[comparison], alpha[item], b[item], tau, y, w, cell, num_cells)
        numpyro.factor("y_cells", lik.sum())
        return
    cum_logits = alpha[item][:, None] * (theta[comparison][:, None] - b[item])
    with numpyro.plate("obs", comparison.shape[0]):
        if weight is None:
            numpyro.sample("y", GradedResponse(cum_logits), obs=y)
        else:
            with (
                numpyro.handlers.mask(mask=weight > 0),
                numpyro.handlers.scale(scale=jnp.where(weight > 0, weight, 1.0)),
            ):
                numpyro.sample("y", GradedResponse(cum_logits), obs=y)


__all__ = [
    "GradedResponse",
    "cell_counts",
    "cell_counts_log_lik",
    "cell_log_lik",
    "graded_log_probs_all",
    "cell_nodes",
    "node_log_probs",
    "category_probs",
    "graded_log_prob",
    "graded_response",
    "log1m_exp",
    "symmetric_from_half",
    "lapse_log_probs",
]
