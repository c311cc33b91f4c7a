"""The fast path: MAP + Laplace approximation of the graded response model (``fit_laplace``).

MAP by L-BFGS in the unconstrained space, then a Gaussian whose block structure
(a small global block of abilities, one K x K block per item) makes the Hessian
cheap: G + K Hessian-vector products and a Schur complement; tau integrated over
a grid and each prompt's parameters drawn from their exact conditional
(docs/statistics.md, "The fast path"). It warm-starts from a previous solution.

``fit_laplace`` is a few named steps, each taking the fit's plan (its compile key
:class:`stan_free_models.model_key.ModelKey` and its
:class:`stan_free_models.fit_settings.LaplaceSettings`): the mode or the grid of modes,
the mixture's draws, the cluster-robust widening, the items' exact draws or refinement.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from stan_free_models.fit_settings import LaplaceSettings
from stan_free_models.inference import (
    DEFAULT_PRIORS,
    GRMData,
    _cell_stats,
    _constrain_items,
    _dynamic_args,
    _global_start,
    _static_key,
    default_init,
    pad_data,
)
from stan_free_models.laplace_grid import (
    LAPSE_GRID,
    LAPSE_REFINE_ROUNDS,
    TAU_GRID,
    TAU_REFINE_ROUNDS,
    _allocate,
    _exact_item_draws,
    _expit,
    _gaussian_sound,
    _item_correction,
    _refined_draws,
    _tau_weights,
    log_mass,
    sweep_grid,
)
from stan_free_models.laplace_program import _compiled_laplace as _compiled_laplace
from stan_free_models.model_key import ModelKey, Priors
from stan_free_models.posterior import Diagnostics, Posterior
from stan_free_models.robust import robust_moments


class _Plan(NamedTuple):
    """One fast fit: its data padded, its compile key and settings, and which steps run."""

    data: GRMData
    padded: GRMData
    static: ModelKey
    settings: LaplaceSettings
    grid: bool  # tau integrated over its grid (nested Laplace)
    refine: bool  # Gibbs sweeps from every draw
    robust: bool  # abilities widened to their cluster-robust sd
    g_real: int  # abilities (or skills) in the global block, without padding
    g_pad: int  # the same, padded: logit lapse and log tau follow (joint mode)


def _plan(data: GRMData, priors: Priors, settings: LaplaceSettings, robust: bool) -> _Plan:
    """The steps a fit of ``data`` takes with ``settings`` (refused: robust intervals with a
    model-based treatment of dependent judgments)."""
    padded = pad_data(data)
    static = _static_key(padded, priors)
    grid = data.has_cells and settings.integrate_tau
    refine = (
        settings.refine_sweeps > 0
        and data.judgments < settings.refine_below * max(data.num_items, 1)
        and settings.exact_items
        and not data.per_system
        and (grid or not data.has_cells)
    )
    if robust and (data.has_cells or refine or settings.exact_items):
        raise ValueError(
            "cluster-robust intervals need the joint mode's Gaussian without cells "
            "(no cell effect, no exact items, no refinement)"
        )
    g_real = data.num_systems if data.per_system else data.num_comparisons
    g_pad = padded.num_systems if padded.per_system else padded.num_comparisons
    assert g_real is not None and g_pad is not None
    return _Plan(data, padded, static, settings, grid, refine, robust, g_real, g_pad)


class _Runner:
    """The compiled fit of a plan on its data, with the tolerances; notes cold restarts."""

    def __init__(self, plan: _Plan):
        self.plan = plan
        self.args = _dynamic_args(plan.padded)
        # The potential sums over observations, so its gradient grows like sqrt(n) at a
        # fixed accuracy of the estimates: the tolerance scales with it (a runtime value,
        # so a new batch does not recompile).
        scale = max(1.0, math.sqrt(plan.data.judgments / 1000))
        tol = plan.settings.tol
        self.tol = jnp.asarray(tol * scale, dtype=jnp.float32)
        self.grad_limit = max(tol * 10, 1e-2) * scale
        self.fit = _compiled_laplace(
            plan.static,
            plan.settings,
            plan.grid,
            plan.refine or plan.robust,
            with_cond_mean=plan.settings.exact_items or plan.refine,
        )
        self.restarted = False

    def __call__(self, key, g0, items0, log_tau, logit_lapse=None) -> dict:
        if self.plan.grid and self.plan.static.priors.lapse:
            log_tau = [logit_lapse, log_tau]
        # no lock: tracing is safe on any thread (per-thread handler stacks, engine.py)
        return jax.device_get(
            self.fit(
                key,
                jnp.asarray(g0),
                jnp.asarray(items0),
                self.args,
                self.tol,
                jnp.asarray(log_tau, jnp.float32),
            )
        )

    def usable(self, out: dict) -> bool:
        return bool(out["finite"]) and float(out["grad_norm"]) < self.grad_limit

    def cold(self, key, log_tau, logit_lapse=None) -> dict:
        """A fit from the default point (after a warm start that landed somewhere unusable)."""
        self.restarted = True
        x0 = default_init(self.plan.padded, self.plan.static.priors)
        g0 = _global_start(x0) if log_tau is None else x0["global"]
        return self(key, g0, x0["items"], 0.0 if log_tau is None else log_tau, logit_lapse)


class _Component(NamedTuple):
    """One Gaussian of the mixture: its weight, its fit, and its grid point (None: fitted)."""

    weight: float
    out: dict
    log_tau: float | None
    logit_lapse: float | None


def _warm_start(padded: GRMData, priors: Priors, init: dict | None) -> dict[str, np.ndarray]:
    """The default start with ``init`` (a previous mode) copied in where the sizes overlap."""
    x0 = default_init(padded, priors)
    if init is None:
        return x0
    g_prev, i_prev = np.asarray(init["global"]), np.asarray(init["items"])
    ng = min(len(g_prev), len(x0["global"]))
    ni = min(len(i_prev), len(x0["items"]))
    x0["global"][:ng] = g_prev[:ng]
    if i_prev.shape[1] == x0["items"].shape[1]:
        x0["items"][:ni] = i_prev[:ni]
    for name in ("log_tau", "logit_lapse"):
        if name in x0 and name in init:
            x0[name] = np.asarray(init[name], np.float32).reshape(1)
    return x0


def _joint_mode(run: _Runner, rng_key, x0: dict, warm: bool) -> list[_Component]:
    """The mode step without the grid: one Gaussian at the joint mode (tau fitted with it)."""
    out = run(rng_key, _global_start(x0), x0["items"], 0.0)
    if warm and not run.usable(out):
        out = run.cold(rng_key, None)
    return [_Component(1.0, out, None, None)]


def _fit_at(run: _Runner, stats, log_tau: float, logit_lapse, g0, items0, key) -> dict:
    """The conditional mode and Gaussian at one grid point, its Laplace marginal corrected
    for the lapse (:func:`stan_free_models.laplace_grid._item_correction`) when it lives."""
    out = run(key, g0, items0, log_tau, logit_lapse)
    if not run.usable(out):
        out = run.cold(key, log_tau, logit_lapse)
    if stats is not None:
        plan = run.plan
        out["log_marginal"] = out["log_marginal"] + _item_correction(
            plan.padded, stats, out, log_tau, logit_lapse, plan.static.priors
        )
    return out


def _tau_column(run: _Runner, keys, stats, logit_lapse, log_tau0: float, g0, items0) -> dict:
    """Fits over the grid of log tau (at one lapse rate when judgments may lapse), each
    warm-started from its neighbour: ``{log tau: fit}``."""
    plan = run.plan
    fits: dict[float, dict] = {}

    def evaluate(log_tau: float, near: float | None) -> float:
        warm = (g0, items0) if near is None else (fits[near]["g"], fits[near]["items"])
        out = fits[log_tau] = _fit_at(run, stats, log_tau, logit_lapse, *warm, next(keys))
        # a point whose Gaussian is not used does not steer the sweep either
        sound = _gaussian_sound(out, plan.g_real, plan.static.priors)
        return float(out["log_marginal"]) if sound else -np.inf

    sweep_grid(np.log(np.asarray(TAU_GRID)), log_tau0, evaluate, TAU_REFINE_ROUNDS)
    return fits


def _column_weights(fits: dict[float, dict], plan: _Plan) -> tuple[np.ndarray, np.ndarray, float]:
    """Grid points, their weights, and log of the column's mass (its integral over log tau)."""
    lt = np.array(sorted(fits))
    lm = np.array([float(fits[t]["log_marginal"]) for t in lt])
    sound = np.array([_gaussian_sound(fits[t], plan.g_real, plan.static.priors) for t in lt])
    if sound.any():  # (none sound: every point keeps its weight, as before)
        lm = np.where(sound, lm, -np.inf)
    return lt, _tau_weights(lt, lm), log_mass(lt, lm)


def _grid_fits(run: _Runner, rng_key, x0: dict) -> list[_Component]:
    """The grid step: tau integrated over its grid (on the grid the global block is the
    abilities alone); with a lapse rate, one level up too (:func:`_lapse_grid`)."""
    if run.plan.static.priors.lapse:
        return _lapse_grid(run, rng_key, x0)
    keys = iter(jax.random.split(rng_key, len(TAU_GRID) + 4 * TAU_REFINE_ROUNDS))
    fits = _tau_column(run, keys, None, None, float(x0["log_tau"][0]), x0["global"], x0["items"])
    lt, w, _ = _column_weights(fits, run.plan)
    return [_Component(float(wk), fits[t], float(t), None) for wk, t in zip(w, lt) if wk > 0]


def _lapse_grid(run: _Runner, rng_key, x0: dict) -> list[_Component]:
    """A column of tau fits per logit lapse, warm-started from its neighbour column's
    heaviest fit, weighted by its mass."""
    plan = run.plan
    stats = _cell_stats(plan.padded)  # the cells' statistics, for the lapse's correction
    # as many fits as the two sweeps take; apart from the keys of the draws' later steps
    # (fold_in(rng_key, 7) and 11)
    grid_key = jax.random.fold_in(rng_key, 1000)
    keys = (jax.random.fold_in(grid_key, k) for k in itertools.count())
    columns: dict[float, dict[float, dict]] = {}

    def column_mass(logit_lapse: float, near: float | None) -> float:
        if near is None:
            start = (float(x0["log_tau"][0]), x0["global"], x0["items"])
        else:
            lt, w, _ = _column_weights(columns[near], plan)
            top = float(lt[int(np.argmax(w))])
            start = (top, columns[near][top]["g"], columns[near][top]["items"])
        columns[logit_lapse] = _tau_column(run, keys, stats, logit_lapse, *start)
        return _column_weights(columns[logit_lapse], plan)[2]

    masses = sweep_grid(
        np.asarray(LAPSE_GRID), float(x0["logit_lapse"][0]), column_mass, LAPSE_REFINE_ROUNDS
    )
    lls = np.array(sorted(masses))
    outer = _tau_weights(lls, np.array([masses[v] for v in lls]))
    parts = []
    for wl, ll in zip(outer, lls):
        lt, w, _ = _column_weights(columns[ll], plan)
        for wk, t in zip(w, lt):
            if wl * wk > 0:
                parts.append(_Component(float(wl * wk), columns[ll][t], float(t), float(ll)))
    return parts


class _Mixture(NamedTuple):
    """The draws of the mixture: each component's share, in order."""

    g_draws: np.ndarray
    item_draws: np.ndarray
    tau_parts: list[np.ndarray]  # each grid component's tau, per draw (none: fitted)
    lapse_parts: list[np.ndarray]
    comp_info: list[
        tuple[float, int, int, Any, float | None]
    ]  # (weight, start, stop, fit, log tau)


def _mixture(parts: list[_Component], num_draws: int) -> _Mixture:
    """The draws step: each component's share of the draws (by weight)."""
    counts = _allocate(np.array([c.weight for c in parts]), int(num_draws))
    g_parts, i_parts, tau_parts, lapse_parts, comp_info = [], [], [], [], []
    cursor = 0
    for (wk, out, log_tau, ll), n_k in zip(parts, counts):
        g_parts.append(np.asarray(out["g_draws"], np.float64)[:n_k])
        # the component's share alone, as the fit gave it (float32: the fit's largest array
        # is not copied; the steps that read it convert to float64, which is exact)
        i_parts.append(np.asarray(out["item_draws"])[:n_k])
        if log_tau is not None:
            tau_parts.append(np.full(n_k, np.exp(log_tau)))
        if ll is not None:
            lapse_parts.append(np.full(n_k, _expit(ll)))
        comp_info.append((wk, cursor, cursor + int(n_k), out, log_tau))
        cursor += int(n_k)
    item_draws = i_parts[0] if len(i_parts) == 1 else np.concatenate(i_parts)  # no copy of one
    return _Mixture(np.concatenate(g_parts), item_draws, tau_parts, lapse_parts, comp_info)


def _widen(run: _Runner, mix: _Mixture, cluster: np.ndarray) -> np.ndarray:
    """The widening step: each ability's draws (in place) widened about the mode to the
    larger of its model and cluster-robust sd (never narrowed); returns the factors."""
    plan, out = run.plan, mix.comp_info[0][3]
    g_real = plan.g_real
    moments = robust_moments(plan.static, run.args, out, cluster, g_real)
    widen = np.sqrt(
        np.maximum(1.0, moments.global_robust_var / np.maximum(moments.global_var, 1e-30))
    )
    g_mode = np.asarray(out["g"], np.float64)[:g_real]
    mix.g_draws[:, :g_real] = g_mode + (mix.g_draws[:, :g_real] - g_mode) * widen
    return widen


def _item_step(plan: _Plan, mix: _Mixture, lapse_draws, rng_key) -> tuple[_Mixture, dict]:
    """The refinement step: Gibbs sweeps from every draw, or each draw's items from their
    exact conditional, or the Gaussian's items as they are; with what it reports."""
    priors, p = plan.static.priors, plan.data.num_items
    if plan.refine:
        g_draws, item_draws, refine_info = _refined_draws(
            plan.padded,
            mix.comp_info,
            mix.g_draws,
            np.asarray(mix.item_draws, np.float64),
            mix.tau_parts,
            jax.random.fold_in(rng_key, 11),
            priors=priors,
            sweeps=int(plan.settings.refine_sweeps),
            lapse=lapse_draws,
        )
        return mix._replace(g_draws=g_draws, item_draws=item_draws), {
            "items_exact": True,
            "refine": refine_info,
        }
    if not plan.settings.exact_items:
        return mix, {}
    item_draws, ess = _exact_item_draws(
        plan.padded,
        mix.comp_info,
        mix.g_draws,
        mix.tau_parts,
        jax.random.fold_in(rng_key, 7),
        priors=priors,
        lapse=lapse_draws,
    )
    # the items come from their conditional, so functions of them need no re-centring
    return mix._replace(item_draws=item_draws), {
        "items_exact": True,
        "item_ess": ess[:, :p].mean(axis=0),
    }


#: draws whose items are constrained at once (memory: this many float64 copies of a draw)
ITEM_CHUNK = 256


def _item_values(items: np.ndarray, priors: Priors, num_categories: int):
    """(log alpha, b) of the item draws (D, P, 1 + m), in float64 (exact from float32),
    a chunk of draws at a time: the numbers of :func:`_constrain_items` of the float64
    draws, without a float64 copy of every draw, and log alpha its own array (not a view
    that would keep every item draw alive)."""
    num_draws, num_items = items.shape[:2]
    log_alpha = np.empty((num_draws, num_items))
    b = None
    for lo in range(0, num_draws, ITEM_CHUNK):
        la, bb = _constrain_items(
            np.asarray(items[lo : lo + ITEM_CHUNK], np.float64), priors, num_categories
        )
        if b is None:
            b = np.empty((num_draws,) + bb.shape[1:])
        log_alpha[lo : lo + ITEM_CHUNK], b[lo : lo + ITEM_CHUNK] = la, bb
    if b is None:  # no draws
        return _constrain_items(np.asarray(items, np.float64), priors, num_categories)
    return log_alpha, b


def _named_draws(plan: _Plan, mix: _Mixture, lapse_draws) -> dict[str, np.ndarray]:
    """The draws in the model's own terms, one chain: (1, draws, ...)."""
    data, priors = plan.data, plan.static.priors
    g_draws, p = mix.g_draws, data.num_items
    log_alpha, b = _item_values(mix.item_draws[:, :p], priors, data.num_categories)
    draws: dict[str, np.ndarray] = {
        "log_alpha": log_alpha[None],
        "alpha": np.exp(log_alpha)[None],
        "b": b[None],
    }
    if data.per_system:
        skill = g_draws[:, : data.num_systems]
        draws["skill"] = skill[None]
        draws["theta"] = (skill[:, data.pair_b] - skill[:, data.pair_a])[None]
    else:
        draws["theta"] = g_draws[:, : data.num_comparisons][None]
    if data.has_cells:
        tau = np.concatenate(mix.tau_parts) if plan.grid else np.exp(g_draws[:, -1])
        draws["tau"] = tau[None]
    if lapse_draws is not None:
        draws["lapse"] = lapse_draws[None]
    return draws


def _mode_values(plan: _Plan, out: dict, log_tau, logit_lapse) -> dict:
    """A component's mode in the model's terms: a plug-in for functions of the parameters,
    whose mean over the Gaussian draws shifts where the transforms (exp, ordering) bend."""
    data, priors = plan.data, plan.static.priors
    g_mode = np.asarray(out["g"], np.float64)
    la_mode, b_mode = _constrain_items(
        np.asarray(out["items"], dtype=np.float64)[: data.num_items],
        priors,
        data.num_categories,
    )
    if data.per_system:
        s_mode = g_mode[: data.num_systems]
        theta_mode = s_mode[data.pair_b] - s_mode[data.pair_a]
    else:
        theta_mode = g_mode[: data.num_comparisons]
    values = {"theta": theta_mode, "alpha": np.exp(la_mode), "b": b_mode}
    if data.has_cells:
        values["tau"] = float(np.exp(g_mode[-1] if log_tau is None else log_tau))
    if priors.lapse:
        g_lapse = g_mode[plan.g_pad] if logit_lapse is None else logit_lapse
        values["lapse"] = float(_expit(g_lapse))
    return values


def _mode(plan: _Plan, top: _Component) -> dict[str, np.ndarray]:
    """The heaviest component's mode, unconstrained: the warm start of the next fit."""
    g_mode, g_pad = np.asarray(top.out["g"]), plan.g_pad
    mode: dict[str, np.ndarray] = {"global": g_mode[:g_pad], "items": np.asarray(top.out["items"])}
    if plan.data.has_cells:
        mode["log_tau"] = np.full(1, top.log_tau, np.float32) if plan.grid else g_mode[-1:]
    if plan.static.priors.lapse:
        mode["logit_lapse"] = (
            g_mode[g_pad : g_pad + 1]
            if top.logit_lapse is None
            else np.full(1, top.logit_lapse, np.float32)
        )
    return mode


def _cov_global(plan: _Plan, parts: list[_Component]) -> np.ndarray:
    """Marginal covariance of the global block (skills or abilities), no padding: within
    each component plus between their means."""
    g_real = plan.g_real
    means = [np.asarray(c.out["g"], np.float64)[:g_real] for c in parts]
    weights = np.array([c.weight for c in parts])
    weights = weights / weights.sum()
    centre = sum(wk * m for wk, m in zip(weights, means))
    return sum(
        wk
        * (
            np.asarray(c.out["cov_g"], np.float64)[:g_real, :g_real]
            + np.outer(m - centre, m - centre)
        )
        for wk, m, c in zip(weights, means, parts)
    )


def _summary(run: _Runner, parts: list[_Component], mix: _Mixture, start: float) -> tuple:
    """The fit's mode, diagnostics and info (what every fit reports; the steps add theirs)."""
    plan = run.plan
    top = parts[max(range(len(parts)), key=lambda k: parts[k].weight)]
    diagnostics = Diagnostics(
        converged=all(run.usable(c.out) for c in parts if c.weight > 0.01),
        num_steps=int(sum(int(c.out["num_steps"]) for c in parts)),
        seconds=time.perf_counter() - start,
    )
    info: dict[str, Any] = {
        "grad_norm": float(top.out["grad_norm"]),
        "potential": float(top.out["potential"]),
        "restarted_cold": run.restarted,
        "padded_shape": plan.static.sizes,
        "cov_global": _cov_global(plan, parts),
        "mode_values": _mode_values(plan, top.out, top.log_tau, top.logit_lapse),
    }
    if plan.grid:
        info["components"] = [
            {
                "weight": c.weight,
                "start": lo,
                "stop": hi,
                "tau": float(np.exp(c.log_tau)),
                **({"lapse": float(_expit(c.logit_lapse))} if c.logit_lapse is not None else {}),
                "mode_values": _mode_values(plan, c.out, c.log_tau, c.logit_lapse),
            }
            for c, (_, lo, hi, _, _) in zip(parts, mix.comp_info)
            if c.log_tau is not None
        ]
    return _mode(plan, top), diagnostics, info


def fit_laplace(
    data: GRMData,
    *,
    rng_key: jax.Array,
    settings: LaplaceSettings = LaplaceSettings(),
    priors: Priors = DEFAULT_PRIORS,
    init: dict[str, np.ndarray] | None = None,
    robust_cluster: np.ndarray | None = None,
    **overrides: Any,
) -> Posterior:
    """MAP + Laplace approximation, warm-started from ``init`` (a previous ``Posterior.mode``).

    The steps: the mode (:func:`_joint_mode`) or, with cells and ``integrate_tau``, a grid
    of conditional modes over tau (and the lapse rate) (:func:`_grid_fits`); the mixture's
    draws (:func:`_mixture`); the cluster-robust widening (:func:`_widen`); the items' exact
    draws or Gibbs refinement (:func:`_item_step`).

    Args:
        data: the observations.
        rng_key: for the approximate posterior draws.
        settings: the approximation (:class:`stan_free_models.fit_settings.LaplaceSettings`:
            draws, L-BFGS limits, tau grid, exact items, refinement), with ``overrides`` of
            its fields (``num_draws=...``) on top.
        priors: the model's priors and variants (:class:`stan_free_models.model_key.Priors`).
            With ``lapse`` and cells, judgments may be given at random at a learned rate
            (:func:`stan_free_models.graded_response.graded_response`), integrated on a
            grid of its logit (``LAPSE_GRID``), each point with its own column of tau grid
            fits (:func:`_lapse_grid`); every draw's items use that draw's rate.
        init: unconstrained ``{"global": (G,), "items": (P, K)}``; entries for
            comparisons/items/systems beyond the previous sizes start at the default.
        robust_cluster: (N,) the cell (a comparison's prompt) of every observation, for
            cluster-robust intervals (:mod:`stan_free_models.robust`): every ability's
            draws are widened about the mode to the larger of its model and sandwich sd
            (the factors in ``info["robust_widen"]``). Needs a model without cells, the
            joint mode's Gaussian (no exact items, no refinement).

    Returns:
        A :class:`Posterior` with ``method="laplace"``; ``mode`` is the warm start
        for the next call. With the tau grid, draws are a mixture: ``info["components"]``
        lists each grid point's weight, its slice of the draws, its tau (and lapse rate)
        and its mode.

    References:
        Rue, Martino & Chopin (2009), integrated nested Laplace approximations (the
        grid over a hyperparameter, weighted by Laplace marginals).
    """
    start = time.perf_counter()
    settings = settings.replace(**overrides)
    plan = _plan(data, priors, settings, robust_cluster is not None)
    run = _Runner(plan)
    x0 = _warm_start(plan.padded, plan.static.priors, init)
    if plan.grid:
        parts = _grid_fits(run, rng_key, x0)
    else:
        parts = _joint_mode(run, rng_key, x0, init is not None)
    mix = _mixture(parts, settings.num_draws)
    widen = None if robust_cluster is None else _widen(run, mix, robust_cluster)
    # each draw's lapse rate: its grid point's, or its global block's entry (joint mode)
    lapse_draws = None
    if plan.static.priors.lapse:
        lapse_draws = (
            np.concatenate(mix.lapse_parts) if plan.grid else _expit(mix.g_draws[:, plan.g_pad])
        )
    mix, item_info = _item_step(plan, mix, lapse_draws, rng_key)
    mode, diagnostics, info = _summary(run, parts, mix, start)
    if widen is not None:
        info["robust_widen"] = widen
    info |= item_info
    if "components" in info:  # keep the components last, as they always were
        info["components"] = info.pop("components")
    return Posterior(
        draws=_named_draws(plan, mix, lapse_draws),
        method="laplace",
        diagnostics=diagnostics,
        mode=mode,
        info=info,
    )
