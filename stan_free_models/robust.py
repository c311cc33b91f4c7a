"""Cluster-robust Laplace: ability intervals that hold when a cell's judgments are dependent.

The fast path's Gaussian has covariance H^-1 (H: the potential's Hessian at the mode).
It is right when the model is right. When the judgments of one cell (a comparison's
prompt) are dependent in a way the model does not say (annotators who judge the same
two responses; a net rating split among a cell's annotators, as in Sedoc & Ungar's
story), H^-1 is too narrow. The sandwich H^-1 J H^-1, with J the sum over cells of the
outer products of each cell's score, is not (Huber 1967; White 1982; Liang & Zeger
1986, the cluster-robust variance): each cell counts as one independent unit, whatever
happens inside it.

For a parameter with unit vector e the two variances are

    model:   e^T H^-1 e,
    robust:  sum_c (s_c^T x)^2 + x^T H_prior x,  x = H^-1 e,  s_c = the cell's score,

the sandwich posterior's H^-1 (J + H_prior) H^-1 (Mueller 2013): the prior's curvature
stays in, since directions that only the prior fixes (a common shift of every skill, or
of every ability with every prompt's thresholds) have no scores at all; where the model
is right (J = H_lik) the two are equal.

and s_c^T x for every cell comes from one forward-over-reverse pass: the potential is
linear in each judgment's likelihood weight w_n, so d/dw_n of its directional
derivative along x is -(that judgment's log-likelihood gradient) . x. H^-1 x uses the
fast path's block structure (a global block, one small block per prompt).

The fit widens each ability's draws about the mode to the larger of the two sds: where
the model holds both agree and the sandwich's small-sample noise cannot narrow an
interval; where it does not, the sandwich widens it (Müller 2013, the sandwich
posterior). The net preference's interval does not come from here
(:mod:`stan_free_models.net_estimate`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from stan_free_models.grm_potential import grm_scores
from stan_free_models.inference import _potential_fn, _split_params
from stan_free_models.model_key import ModelKey

#: abilities whose cells' scores are computed together: memory holds this many copies
#: of the per-judgment intermediates
DIRECTION_CHUNK = 16


class RobustMoments(NamedTuple):
    """Per real global parameter (ability or skill): model and cluster-robust variances."""

    global_var: np.ndarray
    global_robust_var: np.ndarray


def _autodiff_scores(objective, g, items, args):
    """Every observation's score along a direction and the priors' curvature along it, by
    differentiating the potential (traced; any model): as :func:`grm_scores`."""

    def per_obs(xg, xi):
        weight = args[3]

        def directional(w):
            new_args = args[:3] + (w,) + args[4:]
            return jax.jvp(lambda a, b: objective(a, b, new_args), (g, items), (xg, xi))[1]

        return -jax.grad(directional)(weight) * weight

    def prior_curvature(xg, xi):
        # x^T H_prior x: the potential's curvature along x with every judgment's weight 0
        no_data = args[:3] + (jnp.zeros_like(args[3]),) + args[4:]

        def grad_fn(a, b):
            return jax.grad(objective, argnums=(0, 1))(a, b, no_data)

        hg, hi = jax.jvp(grad_fn, (g, items), (xg, xi))[1]
        return jnp.sum(hg * xg) + jnp.sum(hi * xi)

    return per_obs, prior_curvature


@functools.lru_cache(maxsize=16)
def _compiled(static: ModelKey, num_clusters: int):
    potential = _potential_fn(static)

    def objective(g, items, args):
        return potential(_split_params(static, g, items), *args)

    def run(g, items, args, cov_g, gain, real_g, cluster):
        # one direction per real global parameter (the abilities or skills)
        e_g = jnp.eye(g.shape[0], dtype=g.dtype) * real_g[:, None]

        if static.num_cells is None:
            # the observations' log-likelihood gradients once, each direction a dot product
            per_obs, prior_curvature = grm_scores(static, g, items, args)
        else:
            per_obs, prior_curvature = _autodiff_scores(objective, g, items, args)

        def scores(xg, xi):
            return jax.ops.segment_sum(per_obs(xg, xi), cluster, num_clusters)

        def one(e):
            # H^-1 (e, 0) by blocks: the Schur complement's inverse cov_g for the global
            # part, then the items' conditional shift -D^-1 B x_g (gain = D^-1 B)
            xg = cov_g @ e
            xi = -(gain @ xg)
            # the sandwich posterior H^-1 (J + H_prior) H^-1 (Mueller 2013): the prior's
            # share stays as the model has it (directions only the prior fixes, such as a
            # common shift of every skill, have no scores); equal to H^-1 when J = H_lik
            return e @ xg, jnp.sum(scores(xg, xi) ** 2) + prior_curvature(xg, xi)

        return jax.lax.map(one, e_g, batch_size=DIRECTION_CHUNK)

    return jax.jit(run)


def robust_moments(
    static: ModelKey, args: tuple, out: dict, cluster: np.ndarray, num_real_global: int
) -> RobustMoments:
    """Model and cluster-robust variances of the abilities (or skills).

    Args:
        static, args: the fit's static key and dynamic arrays (padded).
        out: the compiled fit's output with ``g, items, cov_g, item_gain``.
        cluster: the cell (0..M-1) of each real observation, in the order of ``args``;
            the padding observations (weight 0) go to a cluster of their own.
        num_real_global: the global parameters without padding.
    """
    num_pad = int(args[0].shape[0])
    cluster = np.asarray(cluster, np.int32)
    # as many clusters as padded observations (and one for the padding), never fewer cells
    # than that: the compiled program depends on the observations' padded size alone, so
    # a campaign whose cells grow with its judgments compiles once per size, not per cells
    num_clusters = num_pad + 1
    full = np.full(num_pad, num_clusters - 1, np.int32)
    full[: len(cluster)] = cluster
    size_g = int(np.asarray(out["g"]).shape[0])
    real_g = np.zeros(size_g, np.float32)
    real_g[:num_real_global] = 1.0
    model_var, robust_var = jax.device_get(
        _compiled(static, num_clusters)(
            jnp.asarray(out["g"]),
            jnp.asarray(out["items"]),
            args,
            jnp.asarray(out["cov_g"]),
            jnp.asarray(out["item_gain"]),
            jnp.asarray(real_g),
            jnp.asarray(full),
        )
    )
    return RobustMoments(
        global_var=np.asarray(model_var, np.float64)[:num_real_global],
        global_robust_var=np.asarray(robust_var, np.float64)[:num_real_global],
    )


__all__ = ["DIRECTION_CHUNK", "RobustMoments", "robust_moments"]
