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

from stan_free_models.graded_response import graded_log_prob, symmetric_from_half
from stan_free_models.model_key import ModelKey


def _normal_log_prob(x: jax.Array, scale: float) -> jax.Array:
    return -0.5 * (x / scale) ** 2 - math.log(scale) - 0.5 * math.log(2 * math.pi)


def _ordered(raw: jax.Array) -> tuple[jax.Array, jax.Array]:
    """numpyro's OrderedTransform of the last axis, and the log|det J| of each row."""
    if raw.shape[-1] <= 1:
        return raw, jnp.zeros(raw.shape[:-1], raw.dtype)
    increments = jnp.concatenate([raw[..., :1], jnp.exp(raw[..., 1:])], axis=-1)
    return jnp.cumsum(increments, axis=-1), raw[..., 1:].sum(-1)


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
    log_lik = graded_log_prob(y, cum_logits)
    log_joint += jnp.sum(jnp.where(weight > 0, log_lik * weight, 0.0))
    return -log_joint


__all__ = ["grm_potential"]
