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

The abilities themselves still come from the Gaussian at the joint mode, which on
sparse data sits outside the posterior mean (each prompt's parameters fitted to its few
judgments at the mode let the abilities spread). :func:`refine_draws` corrects them by a
few Gibbs sweeps from every draw: each comparison's theta given the items (independent
across comparisons, random-walk Metropolis) and the items given theta (i-SIR: the
current value is one of the candidates, which makes the step exact for its conditional;
Andrieu, Lee & Vihola 2018), and, with free thresholds, the common shift of every theta
and threshold (which the likelihood does not see; Gaussian given the rest, drawn
exactly). Each step leaves the exact posterior (given tau) invariant, so the sweeps can
only move the draws towards it.

Everything here is numbers: arrays in, arrays out.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from stan_free_models.fit_settings import REFINE_BELOW as REFINE_BELOW
from stan_free_models.fit_settings import REFINE_SWEEPS as REFINE_SWEEPS
from stan_free_models.graded_response import (
    NUM_CELL_NODES,
    cell_counts_log_lik,
    symmetric_from_half,
)
from stan_free_models.model_key import Priors

#: candidates per prompt and draw, and how much wider than the Laplace conditional they are
NUM_CANDIDATES = 8
PROPOSAL_SCALE = 1.3


def item_log_prior(
    items: jax.Array, priors: Priors, num_categories: int
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
    if priors.symmetric:
        half = jnp.exp(ordered)
        log_jac = log_jac + jnp.sum(ordered, axis=-1)
        b = symmetric_from_half(half, num_categories)
    else:
        b = ordered
    lp = -0.5 * (log_alpha / priors.alpha_scale) ** 2 - 0.5 * jnp.sum(
        (b / priors.b_scale) ** 2, axis=-1
    )
    return lp + log_jac, jnp.exp(log_alpha), b


def candidate_weights(
    z: jax.Array,
    mean: jax.Array,
    chol: jax.Array,
    scale: float,
    theta: jax.Array,
    tau: jax.Array,
    cells: tuple[jax.Array, jax.Array, jax.Array],
    num_items: int,
    num_categories: int,
    priors: Priors,
    num_nodes: int = NUM_CELL_NODES,
    lapse: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Candidates for every prompt from N(mean, (scale chol)(scale chol)ᵀ) and their SIR weights.

    z: (S, P, m) standard normal coordinates of the candidates; cells: the cells'
    comparison, item and category counts; priors: the model's (:class:`Priors`); num_nodes: quadrature nodes of the cell effect (1 when tau = 0);
    lapse: the draw's lapse rate (None: judgments do not lapse).
    Returns the (S, P, m) candidates, (S, P) log weights (exact conditional given theta
    and tau over proposal, up to a constant per prompt), and the candidates' alpha (S, P)
    and thresholds (S, P, K - 1).
    """
    cell_comp, cell_item, counts = cells
    cand = mean[None] + scale * jnp.einsum("jkl,sjl->sjk", chol, z)
    lp, alpha, b = item_log_prior(cand, priors, num_categories)

    def loglik(alpha_s, b_s):
        per_cell = cell_counts_log_lik(
            theta[cell_comp], alpha_s[cell_item], b_s[cell_item], tau, counts, num_nodes, lapse
        )
        return jax.ops.segment_sum(per_cell, cell_item, num_segments=num_items)

    log_w = lp + jax.vmap(loglik)(alpha, b) + 0.5 * jnp.sum(z**2, axis=-1)
    return cand, log_w, alpha, b


def _num_nodes(tau: np.ndarray) -> int:
    """Quadrature nodes of the cell effect: one when every draw's tau is 0 (no cells).

    With tau = 0 all nodes give the same value, so one node is the same likelihood (to
    rounding) at 1 / ``NUM_CELL_NODES`` of the work.
    """
    return NUM_CELL_NODES if bool(np.any(np.asarray(tau) > 0)) else 1


@functools.lru_cache(maxsize=16)
def _compiled(
    num_items: int,
    num_categories: int,
    priors: Priors,
    num_candidates: int,
    scale: float,
    num_nodes: int,
):

    def one(draw, cell_comp, cell_item, counts):
        # (C,), (), () or None (judgments do not lapse), (P, m), (P, m, m)
        theta, tau, lapse, mean, chol, key = draw
        z = jax.random.normal(key, (num_candidates,) + mean.shape, mean.dtype)
        cand, log_w, _, _ = candidate_weights(
            z,
            mean,
            chol,
            scale,
            theta,
            tau,
            (cell_comp, cell_item, counts),
            num_items,
            num_categories,
            priors,
            num_nodes,
            lapse,
        )
        pick = jax.random.categorical(jax.random.fold_in(key, 1), log_w, axis=0)  # (P,)
        chosen = jnp.take_along_axis(cand, pick[None, :, None], axis=0)[0]
        w = jax.nn.softmax(log_w, axis=0)
        ess = 1.0 / jnp.sum(w**2, axis=0)  # per prompt, in 1..S
        return chosen, ess

    def run(theta, tau, lapse, mean, chol, keys, cell_comp, cell_item, counts):
        return jax.lax.map(
            lambda d: one(d, cell_comp, cell_item, counts),
            (theta, tau, lapse, mean, chol, keys),
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
    priors: Priors,
    num_categories: int,
    num_candidates: int = NUM_CANDIDATES,
    scale: float = PROPOSAL_SCALE,
    lapse: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Draws of every prompt's unconstrained parameters from their conditional given theta and tau.

    Args:
        theta: (D, C) abilities per draw (padded as the data); tau: (D,) (0 without cells).
        cond_mean, cond_chol: (D, P, m) and (D, P, m, m): the Laplace conditional of the
            items given each draw's abilities (the proposal).
        cell_comparison, cell_item, counts: the cells' sufficient statistics
            (:func:`stan_free_models.graded_response.cell_counts`).
        priors: the model's priors of the items (:class:`Priors`).
        lapse: (D,) each draw's lapse rate, or None (judgments do not lapse).

    Returns:
        (D, P, m) resampled items, and (D, P) the importance weights' effective number
        of candidates (near ``num_candidates``: the proposal was close; near 1: it was not).
    """
    fn = _compiled(
        int(cond_mean.shape[1]),
        int(num_categories),
        priors.canonical(),
        int(num_candidates),
        float(scale),
        _num_nodes(tau),
    )
    keys = jax.random.split(rng_key, theta.shape[0])
    chosen, ess = fn(
        jnp.asarray(theta, jnp.float32),
        jnp.asarray(tau, jnp.float32),
        None if lapse is None else jnp.asarray(lapse, jnp.float32),
        jnp.asarray(cond_mean, jnp.float32),
        jnp.asarray(cond_chol, jnp.float32),
        keys,
        jnp.asarray(cell_comparison, jnp.int32),
        jnp.asarray(cell_item, jnp.int32),
        jnp.asarray(counts, jnp.float32),
    )
    return np.asarray(chosen, np.float64), np.asarray(ess, np.float64)


#: Metropolis steps for theta within each sweep of :func:`refine_draws` (its sweeps and when
#: the fast path refines: :mod:`stan_free_models.fit_settings`)
THETA_STEPS = 4
#: random-walk step for theta, in units of its conditional sd given the items (about
#: optimal for a one-dimensional Gaussian target: acceptance near 0.44)
THETA_STEP_SCALE = 2.4


@functools.lru_cache(maxsize=16)
def _compiled_refine(
    num_items: int,
    num_comparisons: int,
    num_categories: int,
    priors: Priors,
    num_candidates: int,
    scale: float,
    sweeps: int,
    theta_steps: int,
    num_nodes: int,
):
    theta_scale, b_scale = priors.theta_scale, priors.b_scale

    def one(draw, cells, proposal):
        theta, items, tau, lapse, comp, key = draw  # lapse: () or None
        cell_comp, cell_item, counts = cells
        gain, theta_mode, items_mode = proposal[0][comp], proposal[1][comp], proposal[2][comp]
        chol, step = proposal[3][comp], proposal[4][comp]

        def per_cell(th, alpha, b):
            return cell_counts_log_lik(
                th[cell_comp], alpha[cell_item], b[cell_item], tau, counts, num_nodes, lapse
            )

        def theta_target(th, alpha, b):  # (C,): each comparison's log density given the items
            lik = jax.ops.segment_sum(
                per_cell(th, alpha, b), cell_comp, num_segments=num_comparisons
            )
            return lik - 0.5 * (th / theta_scale) ** 2

        def sweep(carry, key):
            # items first: a draw's items start from the Gaussian, whose thresholds sit off
            # the posterior where the ordering transform bends, and theta given such items
            # would follow them along the direction (common shift of theta and thresholds)
            # that the data leave to the priors and that the sweeps cross slowly
            theta, items = carry
            key_t, key_z, key_pick, key_c = jax.random.split(key, 4)
            # items | theta: the Laplace conditional's mean moves linearly with theta
            mean = items_mode - jnp.einsum("jkg,g->jk", gain, theta - theta_mode)
            z_new = jax.random.normal(key_z, (num_candidates,) + mean.shape, mean.dtype)
            z_now = jax.vmap(lambda low, r: jax.scipy.linalg.solve_triangular(low, r, lower=True))(
                chol, (items - mean) / scale
            )
            z = jnp.concatenate([z_now[None], z_new], axis=0)  # (S + 1, P, m)
            cand, log_w, alpha_c, b_c = candidate_weights(
                z,
                mean,
                chol,
                scale,
                theta,
                tau,
                cells,
                num_items,
                num_categories,
                priors,
                num_nodes,
                lapse,
            )
            pick = jax.random.categorical(key_pick, log_w, axis=0)  # (P,)
            items = jnp.take_along_axis(cand, pick[None, :, None], axis=0)[0]
            alpha = jnp.take_along_axis(alpha_c, pick[None, :], axis=0)[0]
            b = jnp.take_along_axis(b_c, pick[None, :, None], axis=0)[0]
            if not priors.symmetric:
                # free thresholds: moving every theta and every threshold by the same c
                # leaves the likelihood unchanged, so the data leave c to the priors and the
                # two steps above cross it slowly; c given the rest is Gaussian, drawn exactly
                precision = theta.shape[0] / theta_scale**2 + b.size / b_scale**2
                centre = -(jnp.sum(theta) / theta_scale**2 + jnp.sum(b) / b_scale**2) / precision
                c = centre + jax.random.normal(key_c, (), theta.dtype) / jnp.sqrt(precision)
                theta, b = theta + c, b + c
                items = items.at[:, 1].add(c)  # the first threshold; the others are increments

            def metropolis(state, k):
                th, lp = state
                prop = th + step * jax.random.normal(k, th.shape, th.dtype)
                lp_prop = theta_target(prop, alpha, b)
                u = jax.random.uniform(jax.random.fold_in(k, 1), th.shape, th.dtype)
                accept = jnp.log(u) < lp_prop - lp
                return (jnp.where(accept, prop, th), jnp.where(accept, lp_prop, lp)), accept

            (theta, _), accepted = jax.lax.scan(
                metropolis,
                (theta, theta_target(theta, alpha, b)),
                jax.random.split(key_t, theta_steps),
            )
            return (theta, items), (jnp.mean(accepted), jnp.mean(pick > 0))

        (theta, items), (accept, moved) = jax.lax.scan(
            sweep, (theta, items), jax.random.split(key, sweeps)
        )
        return theta, items, accept, moved

    def run(theta, items, tau, lapse, comp, keys, cells, proposal):
        return jax.lax.map(
            lambda d: one(d, cells, proposal),
            (theta, items, tau, lapse, comp, keys),
            batch_size=16,
        )

    return jax.jit(run)


def refine_draws(
    rng_key: jax.Array,
    theta: np.ndarray,
    items: np.ndarray,
    tau: np.ndarray,
    component: np.ndarray,
    cell_comparison: np.ndarray,
    cell_item: np.ndarray,
    counts: np.ndarray,
    *,
    gain: np.ndarray,
    theta_mode: np.ndarray,
    items_mode: np.ndarray,
    item_chol: np.ndarray,
    theta_step: np.ndarray,
    priors: Priors,
    num_categories: int,
    sweeps: int = REFINE_SWEEPS,
    theta_steps: int = THETA_STEPS,
    num_candidates: int = NUM_CANDIDATES,
    scale: float = PROPOSAL_SCALE,
    lapse: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Gibbs sweeps from every draw towards the exact posterior of abilities and items given tau.

    Per-comparison abilities only: given the items, theta_i depends on comparison i's
    cells alone, so every comparison takes its own Metropolis steps at once.

    Args:
        theta: (D, C) starting abilities; items: (D, P, m) starting unconstrained items;
            tau: (D,) each draw's tau (0 without cells); component: (D,) which Laplace
            component (tau grid point) each draw came from.
        cell_comparison, cell_item, counts: the cells' sufficient statistics.
        gain, theta_mode, items_mode, item_chol, theta_step: per component (first axis),
            the Laplace conditional of the items given theta, N(items_mode - gain
            (theta - theta_mode), item_chol item_cholᵀ), shapes (K, P, m, C), (K, C),
            (K, P, m), (K, P, m, m); and theta's random-walk step per comparison (K, C).
        priors: the model's (:class:`Priors`): the items' and theta's.
        lapse: (D,) each draw's lapse rate, held fixed by the sweeps (the exact
            posterior given tau and it), or None (judgments do not lapse).

    Returns:
        (D, C) abilities, (D, P, m) items, and per sweep the Metropolis acceptance rate
        (``accept``) and the share of prompts whose parameters changed (``moved``).
    """
    fn = _compiled_refine(
        int(items.shape[1]),
        int(theta.shape[1]),
        int(num_categories),
        priors.canonical(),
        int(num_candidates),
        float(scale),
        int(sweeps),
        int(theta_steps),
        _num_nodes(tau),
    )
    keys = jax.random.split(rng_key, theta.shape[0])
    f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
    cells = (
        jnp.asarray(cell_comparison, jnp.int32),
        jnp.asarray(cell_item, jnp.int32),
        f32(counts),
    )
    proposal = (f32(gain), f32(theta_mode), f32(items_mode), f32(item_chol), f32(theta_step))
    lapse_d = None if lapse is None else f32(lapse)
    out_theta, out_items, accept, moved = fn(
        f32(theta),
        f32(items),
        f32(tau),
        lapse_d,
        jnp.asarray(component, jnp.int32),
        keys,
        cells,
        proposal,
    )
    diagnostics = {
        "accept": np.asarray(accept, np.float64).mean(axis=0),
        "moved": np.asarray(moved, np.float64).mean(axis=0),
    }
    return np.asarray(out_theta, np.float64), np.asarray(out_items, np.float64), diagnostics


#: candidates per prompt for the item integrals of :func:`item_log_marginal_correction`
MARGINAL_CANDIDATES = 64


@functools.lru_cache(maxsize=16)
def _compiled_correction(
    num_items: int,
    num_categories: int,
    priors: Priors,
    num_candidates: int,
    scale: float,
    num_nodes: int,
):

    def run(key, theta, tau, lapse, mean, chol, cell_comp, cell_item, counts):
        z = jax.random.normal(key, (num_candidates,) + mean.shape, mean.dtype)
        z = jnp.concatenate([jnp.zeros_like(z[:1]), z], axis=0)  # the mode first
        _, log_w, _, _ = candidate_weights(
            z,
            mean,
            chol,
            scale,
            theta,
            tau,
            (cell_comp, cell_item, counts),
            num_items,
            num_categories,
            priors,
            num_nodes,
            lapse,
        )
        at_mode = log_w[0]
        sampled = jax.nn.logsumexp(log_w[1:], axis=0) - jnp.log(num_candidates)
        return sampled - at_mode  # (P,)

    return jax.jit(run)


def item_log_marginal_correction(
    rng_key: jax.Array,
    theta: np.ndarray,
    tau: float,
    lapse: float | None,
    mode: np.ndarray,
    chol: np.ndarray,
    cell_comparison: np.ndarray,
    cell_item: np.ndarray,
    counts: np.ndarray,
    *,
    priors: Priors,
    num_categories: int,
    num_candidates: int = MARGINAL_CANDIDATES,
    scale: float = PROPOSAL_SCALE,
) -> np.ndarray:
    """(P,) log of each prompt's exact integral over its parameters, minus Laplace's.

    Given the abilities ``theta`` (C,), each prompt's integral
    I_j = ∫ p(y_j, item_j | theta, tau, lapse) d item_j is what the Laplace marginal
    approximates by the Gaussian at the conditional mode ``mode`` (P, m) with covariance
    ``chol chol^T``; importance sampling from that Gaussian widened by ``scale``
    estimates it: log I_j - log I_j^Laplace = logmeanexp_s(log w_s) - log w(mode)
    + m log(scale), with w the exact density over the proposal's standard-normal
    density (:func:`candidate_weights`). Summed over prompts, it corrects a grid point's
    Laplace marginal where the prompts' posteriors are skewed or heavy-tailed (with a
    lapse rate, a prompt's likelihood no longer falls to 0 for extreme parameters).
    """
    fn = _compiled_correction(
        int(mode.shape[0]),
        int(num_categories),
        priors.canonical(),
        int(num_candidates),
        float(scale),
        _num_nodes(np.asarray([tau])),
    )
    f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
    out = fn(
        rng_key,
        f32(theta),
        f32(tau),
        None if lapse is None else f32(lapse),
        f32(mode),
        f32(chol),
        jnp.asarray(cell_comparison, jnp.int32),
        jnp.asarray(cell_item, jnp.int32),
        f32(counts),
    )
    return np.asarray(out, np.float64) + mode.shape[1] * np.log(scale)


__all__ = [
    "candidate_weights",
    "item_log_marginal_correction",
    "item_log_prior",
    "refine_draws",
    "resample_items",
]
