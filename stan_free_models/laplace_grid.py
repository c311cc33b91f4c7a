"""The fast path's grids and draws: what ``fit_laplace`` does around its Gaussian fits.

* the grids of tau and of the lapse rate, and their weights (Laplace marginals, each
  grid point standing for its width; with a lapse rate, corrected by importance
  sampling of the prompts' integrals);
* the draws: how many each grid point gives, each draw's tau and lapse rate, and the
  prompts' parameters from their exact conditional (one resampling, or Gibbs sweeps).

Everything here is numbers around :mod:`stan_free_models.laplace`'s compiled fits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from stan_free_models.graded_response import cell_counts
from stan_free_models.inference import GRMData, _cell_stats
from stan_free_models.model_key import Priors

#: the coarse grid of tau (sd of the prompt-by-comparison effect) that the fast path
#: integrates over: log-uniform from "no cell effect" to well past HalfNormal(1)'s bulk
TAU_GRID = tuple(float(t) for t in np.exp(np.linspace(np.log(0.05), np.log(3.0), 8)))
#: refinement rounds: halve the spacing around the heaviest grid point while it holds
#: more than ``REFINE_ABOVE`` of the weight
TAU_REFINE_ROUNDS = 2
REFINE_ABOVE = 0.4
#: a grid point this far (in log marginal) below the best is not worth extending past
NEGLIGIBLE_LOG_WEIGHT = 7.0
#: with a lapse rate, the grid of its logit (0.005 to 0.6; refinement around an end point
#: reaches half a step past it, 0.0037 to 0.68) that the fast path integrates over, each
#: point with its own grid of tau
LAPSE_GRID = tuple(float(v) for v in np.linspace(np.log(0.005 / 0.995), np.log(0.6 / 0.4), 9))
LAPSE_REFINE_ROUNDS = 2
#: a grid point's Gaussian is not used when its abilities' covariance has a variance
#: above this times their prior's (theta_scale squared): its Hessian is near singular, the
#: mode sits on a ridge and the Gaussian's draws fly off (sd 13 seen, at a grid point of
#: weight 0.003)
MAX_GLOBAL_VARIANCE = 4.0


def _widths(x: np.ndarray) -> np.ndarray:
    """The width each of the sorted grid points ``x`` stands for (midpoints between them;
    the end points reach as far out as in)."""
    if len(x) == 1:
        return np.ones(1)
    edges = np.concatenate(
        [[x[0] - (x[1] - x[0]) / 2], (x[1:] + x[:-1]) / 2, [x[-1] + (x[-1] - x[-2]) / 2]]
    )
    return np.diff(edges)


def _tau_weights(log_taus: np.ndarray, log_marginal: np.ndarray) -> np.ndarray:
    """Posterior weights of grid points (of log tau, or of logit lapse): marginal x the
    width each point stands for, normalised."""
    order = np.argsort(log_taus)
    x = log_taus[order]
    if len(x) == 1:
        return np.ones(1)
    logw = log_marginal[order] + np.log(_widths(x))
    logw = np.where(np.isfinite(logw), logw, -np.inf)
    w = np.exp(logw - logw.max())
    out = np.empty_like(w)
    out[order] = w / w.sum()
    return out


def sweep_grid(
    grid: np.ndarray,
    start: float,
    evaluate: Callable[[float, float | None], float],
    refine_rounds: int,
) -> dict[float, float]:
    """Log weights of the grid points worth evaluating: ``{point: evaluate(point, near)}``.

    From the point of ``grid`` (evenly spaced) nearest ``start``, outwards in both
    directions, each point evaluated from its neighbour (``near``; None for the first),
    until a point falls ``NEGLIGIBLE_LOG_WEIGHT`` below the best seen; then up to
    ``refine_rounds`` times, while the heaviest point holds more than ``REFINE_ABOVE`` of
    the weight (value x width), the spacing around it is halved (its new neighbours are
    evaluated from it). Used for log tau (a value is a fit's Laplace marginal) and, one
    level up, for logit lapse (a value is a column of tau fits' mass). A value of -inf
    (a point whose fit is not to be used) neither stops the sweep nor draws the refinement.
    """
    values: dict[float, float] = {}

    def add(x: float, near: float | None) -> float:
        values[x] = evaluate(x, near)
        return values[x]

    first = int(np.argmin(np.abs(grid - start)))
    base = add(float(grid[first]), None)
    for direction in (range(first - 1, -1, -1), range(first + 1, len(grid))):
        prev_x, prev = float(grid[first]), base
        for k in direction:
            if np.isfinite(prev) and prev < max(values.values()) - NEGLIGIBLE_LOG_WEIGHT:
                break
            prev_x, prev = float(grid[k]), add(float(grid[k]), prev_x)
    step = float(grid[1] - grid[0])
    for _ in range(refine_rounds):
        if not np.isfinite(max(values.values())):
            break
        xs = np.array(sorted(values))
        w = _tau_weights(xs, np.array([values[x] for x in xs]))
        if w.max() <= REFINE_ABOVE:
            break
        top = float(xs[int(np.argmax(w))])
        step /= 2
        for new in (top - step, top + step):
            if new not in values:
                add(new, top)
    return values


def log_mass(x: np.ndarray, log_values: np.ndarray) -> float:
    """log of sum_i exp(log_values_i) x width_i over the sorted grid points ``x``."""
    terms = log_values + np.log(_widths(x))
    terms = terms[np.isfinite(terms)]
    return float(np.logaddexp.reduce(terms)) if len(terms) else -np.inf


def _allocate(weights: np.ndarray, total: int) -> np.ndarray:
    """Integer counts summing to ``total`` in proportion to ``weights`` (largest remainder)."""
    raw = weights * total
    counts = np.floor(raw).astype(int)
    rest = total - counts.sum()
    if rest > 0:
        counts[np.argsort(-(raw - counts), kind="stable")[:rest]] += 1
    return counts


def _item_correction(
    padded: GRMData,
    stats: tuple[np.ndarray, np.ndarray, np.ndarray],
    out: dict,
    log_tau: float,
    logit_lapse: float,
    priors: Priors,
) -> float:
    """The grid point's Laplace marginal's error in the prompts' integrals, estimated by
    importance sampling at its mode (:func:`stan_free_models.conditional.item_log_marginal_correction`).

    With a lapse rate the prompts' posteriors have heavy tails (a judgment's probability
    never falls below lapse / K), which the Gaussian misses more at high rates: uncorrected,
    the marginal put the rate at 0.02 where NUTS puts it at 0.15 (5% of a varied campaign).
    The same standard normals at every grid point (each scaled by its own conditional),
    so the estimates' noise varies smoothly across the grid. ``stats``: the cells'
    sufficient statistics (:func:`stan_free_models.inference._cell_stats`), made once per fit.
    """
    from stan_free_models.conditional import item_log_marginal_correction

    g = np.asarray(out["g"], np.float64)
    if padded.per_system:
        theta = g[padded.pair_b] - g[padded.pair_a]
    else:
        theta = g[: padded.num_comparisons]
    correction = item_log_marginal_correction(
        jax.random.PRNGKey(17),
        theta,
        float(np.exp(log_tau)),
        float(_expit(logit_lapse)),
        np.asarray(out["items"], np.float64),
        np.asarray(out["item_chol"], np.float64),
        *stats,
        priors=priors,
        num_categories=padded.num_categories,
    )
    return float(correction.sum())


def _gaussian_sound(out: dict, g_real: int, priors: Priors) -> bool:
    """The grid point's Gaussian has no direction of the abilities with a variance above
    ``MAX_GLOBAL_VARIANCE`` times their prior's (the covariance's largest eigenvalue)."""
    cov = np.asarray(out["cov_g"], np.float64)[:g_real, :g_real]
    limit = MAX_GLOBAL_VARIANCE * priors.theta_scale**2
    return bool(np.all(np.isfinite(cov)) and np.linalg.eigvalsh(cov).max() <= limit)


def _expit(x: Any) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def _draw_tau_and_cells(
    padded: GRMData, g_draws: np.ndarray, tau_parts: list[np.ndarray]
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each draw's tau (0 without cells) and the cells' sufficient statistics.

    tau comes from the grid components' values, or from the draws' last global entry
    when tau was fitted at the joint mode; without cells every observation is a cell.
    """
    if padded.has_cells:
        tau = np.concatenate(tau_parts) if tau_parts else np.exp(g_draws[:, -1])
        return tau, _cell_stats(padded)
    stats = cell_counts(
        np.arange(padded.num_obs),
        padded.comparison,
        padded.item,
        padded.y,
        padded.weight,
        padded.num_obs,
        padded.num_categories,
    )
    return np.zeros(len(g_draws)), stats


def _refined_draws(
    padded: GRMData,
    comp_info: list,
    g_draws: np.ndarray,
    item_draws: np.ndarray,
    tau_parts: list,
    rng_key: jax.Array,
    *,
    priors: Priors,
    sweeps: int,
    lapse: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Every draw's abilities and items after Gibbs sweeps towards the exact posterior."""
    from stan_free_models.conditional import refine_draws

    c = padded.num_comparisons
    component = np.concatenate(
        [np.full(hi - lo, k) for k, (_, lo, hi, _, _) in enumerate(comp_info)]
    )
    tau, stats = _draw_tau_and_cells(padded, g_draws, tau_parts)
    outs = [out for *_, out, _ in comp_info]
    theta, items, diagnostics = refine_draws(
        rng_key,
        g_draws[:, :c],
        item_draws,
        tau,
        component,
        *stats,
        gain=np.stack([np.asarray(o["item_gain"])[..., :c] for o in outs]),
        theta_mode=np.stack([np.asarray(o["g"])[:c] for o in outs]),
        items_mode=np.stack([np.asarray(o["items"]) for o in outs]),
        item_chol=np.stack([np.asarray(o["item_chol"]) for o in outs]),
        theta_step=np.stack([np.asarray(o["g_step"])[:c] for o in outs]),
        priors=priors,
        num_categories=padded.num_categories,
        sweeps=sweeps,
        lapse=lapse,
    )
    g_draws = np.array(g_draws, np.float64)
    g_draws[:, :c] = theta
    return g_draws, items, diagnostics


def _exact_item_draws(
    padded: GRMData,
    comp_info: list,
    g_draws: np.ndarray,
    tau_parts: list,
    rng_key: jax.Array,
    *,
    priors: Priors,
    lapse: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every draw's items from their exact conditional (SIR from the Laplace conditional)."""
    from stan_free_models.conditional import resample_items

    means, chols = [], []
    for _, lo, hi, out, _ in comp_info:
        means.append(np.asarray(out["item_cond_mean"])[: hi - lo])
        chols.append(
            np.broadcast_to(np.asarray(out["item_chol"]), (hi - lo,) + out["item_chol"].shape)
        )
    if padded.per_system:
        skill = g_draws[:, : padded.num_systems]
        theta = skill[:, padded.pair_b] - skill[:, padded.pair_a]
    else:
        theta = g_draws[:, : padded.num_comparisons]
    tau, stats = _draw_tau_and_cells(padded, g_draws, tau_parts)
    return resample_items(
        rng_key,
        theta,
        tau,
        np.concatenate(means),
        np.concatenate(chols),
        *stats,
        priors=priors,
        num_categories=padded.num_categories,
        lapse=lapse,
    )
