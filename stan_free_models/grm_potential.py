"""The graded response model's potential written directly in JAX, for the fits without cells.

The potential (negative log joint in the unconstrained space) of
:func:`stan_free_models.graded_response.graded_response` without a cell effect, term
by term as NumPyro computes it from the model: the priors of theta (or the skills)
and log alpha, the ordered thresholds' transform (numpyro's ``OrderedTransform``:
first value, then cumulative exp increments; symmetric thresholds' positive half
also exp'd) with its log-Jacobian, their normal prior factor, and the weighted
likelihood of every observation. The value is the same
(``tests/stan_free_models/test_grm_potential.py`` checks it against ``numpyro.infer.util.potential_energy``
on every variant); what it saves is NumPyro's tracing of the model's effect handlers,
which is most of a warm fit's time (each gradient, HVP and Hessian block traces the
model again).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from stan_free_models.graded_response import (
    graded_log_prob,
    graded_log_probs_all,
    symmetric_from_half,
)
from stan_free_models.model_key import ModelKey


def _normal_log_prob(x: jax.Array, scale: float) -> jax.Array:
    return -0.5 * (x / scale) ** 2 - math.log(scale) - 0.5 * math.log(2 * math.pi)


def _ordered(raw: jax.Array) -> tuple[jax.Array, jax.Array]:
    """numpyro's OrderedTransform of the last axis, and the log|det J| of each row."""
    if raw.shape[-1] <= 1:
        return raw, jnp.zeros(raw.shape[:-1], raw.dtype)
    increments = jnp.concatenate([raw[..., :1], jnp.exp(raw[..., 1:])], axis=-1)
    return jnp.cumsum(increments, axis=-1), raw[..., 1:].sum(-1)


def _log_lik(y: jax.Array, cum_logits: jax.Array, weight: jax.Array) -> jax.Array:
    """log P(y) of each observation, or log P(c) of every category when the weights are
    category counts ((..., K), :func:`stan_free_models.inference.collapse_observations`)."""
    if weight.ndim > y.ndim:
        return graded_log_probs_all(cum_logits)
    return graded_log_prob(y, cum_logits)


def grm_potential(static: ModelKey, params: dict, args: tuple) -> jax.Array:
    """The potential of the no-cell graded response model.

    Args:
        static: the fit's static key (:func:`stan_free_models.inference._static_key`) with
            no cells (``num_cells`` None).
        params: unconstrained ``theta`` or ``skill``, ``log_alpha``, ``b`` or ``b_half``
            (:func:`stan_free_models.inference._split_params`).
        args: :func:`stan_free_models.inference._dynamic_args` of the padded data.
    """
    assert static.num_cells is None, "the direct potential has no cell effect"
    num_categories, per_system = static.num_categories, static.num_systems is not None
    priors = static.priors
    comparison, item, y, weight, pair_a, pair_b = args[:6]
    log_joint = jnp.asarray(0.0)
    if per_system:
        skill = params["skill"]
        theta = skill[pair_b] - skill[pair_a]
        log_joint += _normal_log_prob(skill, priors.theta_scale).sum()
    else:
        theta = params["theta"]
        log_joint += _normal_log_prob(theta, priors.theta_scale).sum()
    log_alpha = params["log_alpha"]
    log_joint += _normal_log_prob(log_alpha, priors.alpha_scale).sum()
    if priors.symmetric:
        ordered, log_det = _ordered(params["b_half"])
        half = jnp.exp(ordered)
        log_joint += log_det.sum() + ordered.sum()  # the exp's Jacobian too
        b = symmetric_from_half(half, num_categories)
    else:
        b, log_det = _ordered(params["b"])
        log_joint += log_det.sum()
    log_joint += _normal_log_prob(b, priors.b_scale).sum()
    cum_logits = jnp.exp(log_alpha)[item][:, None] * (theta[comparison][:, None] - b[item])
    log_lik = _log_lik(y, cum_logits, weight)
    log_joint += jnp.sum(jnp.where(weight > 0, log_lik * weight, 0.0))
    return -log_joint


# ------------------------------------------------------------------ per observation
#
# The potential is a sum of one term per observation, each depending on one ability (a
# comparison's theta, a difference of two skills per system) and one item's parameters, and
# a prior that is separable by parameter. Its Hessian by blocks (the global block, each
# item's block and the cross terms) and each cluster's score are therefore sums of small
# per-observation derivatives: one vectorised pass over the observations instead of a
# Hessian-vector product over all of them per global direction.


def _item_terms(static: ModelKey, item_vec: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(log alpha, thresholds b, the item's log prior with its transforms' Jacobians) of
    an unconstrained item vector (..., 1 + m): :func:`grm_potential`'s item terms."""
    priors = static.priors
    log_alpha = item_vec[..., 0]
    log_prior = _normal_log_prob(log_alpha, priors.alpha_scale)
    if priors.symmetric:
        ordered, log_det = _ordered(item_vec[..., 1:])
        log_prior += log_det + ordered.sum(-1)
        b = symmetric_from_half(jnp.exp(ordered), static.num_categories)
    else:
        b, log_det = _ordered(item_vec[..., 1:])
        log_prior += log_det
    return log_alpha, b, log_prior + _normal_log_prob(b, priors.b_scale).sum(-1)


def _observation_log_lik(static: ModelKey, z: jax.Array, y: jax.Array, w: jax.Array):
    """One observation's weighted log-likelihood at z = (theta, its item's vector)."""
    log_alpha, b, _ = _item_terms(static, z[1:])
    log_lik = _log_lik(y, jnp.exp(log_alpha) * (z[0] - b), w)
    return jnp.sum(jnp.where(w > 0, log_lik * w, 0.0))


def _observation_points(static: ModelKey, g: jax.Array, items: jax.Array, args: tuple):
    """(N, 1 + m): each observation's theta and its item's vector."""
    comparison, item = args[0], args[1]
    theta = g[args[5]] - g[args[4]] if static.num_systems is not None else g
    return jnp.concatenate([theta[comparison][:, None], items[item]], axis=1)


def _pair_matrix(static: ModelKey, args: tuple, num_global: int) -> jax.Array:
    """(C, S): theta = A @ skills (+1 at each comparison's B, -1 at its A)."""
    rows = jnp.arange(static.num_comparisons)
    a = jnp.zeros((static.num_comparisons, num_global))
    return a.at[rows, args[5]].add(1.0).at[rows, args[4]].add(-1.0)


def grm_hessian_blocks(static: ModelKey, g: jax.Array, items: jax.Array, args: tuple):
    """The no-cell potential's Hessian by blocks at (g, items): the global block (G, G),
    the cross terms (G, P, 1 + m) and each item's block (P, 1 + m, 1 + m), from one pass
    of per-observation second derivatives and the priors' (the same matrix as the
    Hessian-vector products of :func:`grm_potential` give, summed in another order)."""
    comparison, item, y, weight = args[:4]
    num_c, num_p, width = static.num_comparisons, static.num_items, items.shape[1]
    z = _observation_points(static, g, items, args)
    minus = lambda zz, yy, ww: -_observation_log_lik(static, zz, yy, ww)  # noqa: E731
    h = jax.vmap(jax.hessian(minus))(z, y, weight)  # (N, 1 + m, 1 + m)
    h_tt = jax.ops.segment_sum(h[:, 0, 0], comparison, num_c)
    h_ti = jnp.zeros((num_c, num_p, width), h.dtype).at[comparison, item].add(h[:, 0, 1:])
    item_prior = jax.vmap(jax.hessian(lambda v: -_item_terms(static, v)[2]))(items)
    d_blocks = jax.ops.segment_sum(h[:, 1:, 1:], item, num_p) + item_prior
    prior_g = jnp.eye(g.shape[0], dtype=g.dtype) / static.priors.theta_scale**2
    if static.num_systems is None:
        return jnp.diag(h_tt) + prior_g, h_ti, d_blocks
    pairs = _pair_matrix(static, args, g.shape[0])
    h_gg = pairs.T @ (h_tt[:, None] * pairs) + prior_g
    return h_gg, jnp.einsum("cs,cpk->spk", pairs, h_ti), d_blocks


def grm_scores(static: ModelKey, g: jax.Array, items: jax.Array, args: tuple):
    """``score(xg, xi)``: every observation's weighted log-likelihood gradient dotted with
    the direction (xg, xi) (N,), the gradients computed once; and ``prior(xg, xi)``: the
    priors' curvature along it, x^T H_prior x."""
    comparison, item, y, weight = args[:4]
    z = _observation_points(static, g, items, args)
    lik = lambda zz, yy, ww: _observation_log_lik(static, zz, yy, ww)  # noqa: E731
    grads = jax.vmap(jax.grad(lik))(z, y, weight)  # (N, 1 + m)
    item_prior = jax.vmap(jax.hessian(lambda v: -_item_terms(static, v)[2]))(items)
    per_system = static.num_systems is not None

    def score(xg: jax.Array, xi: jax.Array) -> jax.Array:
        xt = xg[args[5]] - xg[args[4]] if per_system else xg
        return grads[:, 0] * xt[comparison] + jnp.sum(grads[:, 1:] * xi[item], axis=1)

    def prior(xg: jax.Array, xi: jax.Array) -> jax.Array:
        curvature = jnp.einsum("pk,pkl,pl->", xi, item_prior, xi)
        return jnp.sum(xg**2) / static.priors.theta_scale**2 + curvature

    return score, prior


__all__ = ["grm_hessian_blocks", "grm_potential", "grm_scores"]
