"""The fast path: MAP + Laplace approximation of the graded response model (``fit_laplace``).

MAP by L-BFGS in the unconstrained space, then a Gaussian whose block structure
(a small global block of abilities, one K x K block per item) makes the Hessian
cheap: G + K Hessian-vector products and a Schur complement; tau integrated over
a grid and each prompt's parameters drawn from their exact conditional
(docs/statistics.md, "The fast path"). It warm-starts from a previous solution.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax.tree_utils as otu

from stan_free_models.conditional import REFINE_BELOW, REFINE_SWEEPS, THETA_STEP_SCALE
from stan_free_models.inference import (
    DEFAULT_PRIORS,
    TRACE_COUNTS,
    GRMData,
    _cell_stats,
    _constrain_items,
    _dynamic_args,
    _global_start,
    _potential_fn,
    _split_params,
    _static_key,
    default_init,
    lbfgs_minimise,
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
from stan_free_models.model_key import ModelKey, Priors
from stan_free_models.posterior import Diagnostics, Posterior
from stan_free_models.robust import robust_moments

#: global directions whose Hessian-vector products run together (memory: this many copies
#: of the per-judgment intermediates instead of one per global parameter)
HVP_CHUNK = 16


@functools.lru_cache(maxsize=32)
def _compiled_laplace(
    static: ModelKey,
    max_iter: int,
    num_draws: int,
    fixed_tau: bool = False,
    with_gain: bool = False,
):
    """MAP + Laplace; with ``fixed_tau`` the cell effect's log tau (with a lapse rate: logit
    lapse and log tau) is an argument, not fitted.

    ``with_gain`` also returns what :func:`stan_free_models.conditional.refine_draws`
    needs: how the items' conditional mean moves with the global block (P, K, G), and
    a random-walk step per global parameter from its conditional sd given the items.

    The fixed-tau fit also returns the Laplace estimate of log p(y, log tau) (or of
    log p(y, logit lapse, log tau)) (up to a
    constant): -U at the conditional mode - 0.5 log det of its Hessian. ``rng_key`` may be
    the draws' standard normals ``(z_g, z_i)`` instead (:mod:`stan_free_models.laplace_batch`).
    """
    potential = _potential_fn(static)
    num_cat = static.num_categories
    num_item_params = 1 + ((num_cat - 1) // 2 if static.priors.symmetric else num_cat - 1)

    def objective(g, items, args, log_tau):
        if fixed_tau:
            # log tau, or (logit lapse, log tau) when judgments may lapse: the global
            # block's last entries
            g = jnp.concatenate([g, jnp.reshape(log_tau, (-1,)).astype(g.dtype)])
        return potential(_split_params(static, g, items), *args)

    def fit(rng_key, g0, items0, args, tol, log_tau):
        TRACE_COUNTS["laplace"] += 1  # runs at trace time only
        fun = lambda p: objective(p[0], p[1], args, log_tau)  # noqa: E731
        params, num_steps = lbfgs_minimise(fun, (g0, items0), max_iter=max_iter, tol=tol)
        g, items = params
        grad_norm = otu.tree_norm(jax.grad(fun)(params))

        # Hessian blocks via Hessian-vector products
        grad_fn = jax.grad(objective, argnums=(0, 1))

        def hvp(vg, vi):
            return jax.jvp(lambda a, b: grad_fn(a, b, args, log_tau), (g, items), (vg, vi))[1]

        size_g = g.shape[0]
        eye_g = jnp.eye(size_g, dtype=g.dtype)
        # one Hessian-vector product per global direction, HVP_CHUNK at a time: a vmap of
        # all G at once holds G copies of every per-judgment intermediate (14 KB per
        # judgment with 200 systems), the chunks hold HVP_CHUNK; the numbers are the same
        h_gg, h_ig = jax.lax.map(
            lambda e: hvp(e, jnp.zeros_like(items)), eye_g, batch_size=HVP_CHUNK
        )
        # h_gg: (G, G); h_ig: (G, P, K) = d2U / (d g, d item)
        slot_dirs = jnp.broadcast_to(
            jnp.eye(num_item_params, dtype=g.dtype)[:, None, :], (num_item_params,) + items.shape
        )
        _, h_ii = jax.vmap(lambda v: hvp(jnp.zeros_like(g), v))(slot_dirs)
        # h_ii[k, j, l] = d2U / (d item_j,l d item_j,k): blocks (P, K, K)
        d_blocks = jnp.transpose(h_ii, (1, 2, 0))
        d_blocks = 0.5 * (d_blocks + jnp.swapaxes(d_blocks, 1, 2))
        d_inv = jnp.linalg.inv(d_blocks)
        b_cross = jnp.transpose(h_ig, (1, 2, 0))  # (P, K, G)
        schur = h_gg - jnp.einsum("jkg,jkl,jlh->gh", b_cross, d_inv, b_cross)
        schur = 0.5 * (schur + schur.T)
        chol_s = jnp.linalg.cholesky(schur)
        cov_g = jax.scipy.linalg.cho_solve((chol_s, True), eye_g)

        if isinstance(rng_key, tuple):
            z_g, z_i = rng_key
        else:
            key_g, key_i = jax.random.split(rng_key)
            z_g = jax.random.normal(key_g, (num_draws, size_g), dtype=g.dtype)
            z_i = jax.random.normal(key_i, (num_draws,) + items.shape, dtype=g.dtype)
        g_draws = g + jax.scipy.linalg.solve_triangular(chol_s.T, z_g.T, lower=False).T
        # items | global: N(mu_i - D^-1 B (g - mu_g), D^-1)
        shift = jnp.einsum("jkl,jlg,ng->njk", d_inv, b_cross, g_draws - g)
        chol_d = jnp.linalg.cholesky(d_inv)
        i_draws = items - shift + jnp.einsum("jkl,njl->njk", chol_d, z_i)
        # marginal sd of the global block and of each item block (exact block inverse)
        item_cov = d_inv + jnp.einsum(
            "jkl,jlg,gh,jmh,jmn->jkn", d_inv, b_cross, cov_g, b_cross, d_inv
        )
        extra = {}
        if with_gain:
            extra["item_gain"] = jnp.einsum("jkl,jlg->jkg", d_inv, b_cross)
            extra["g_step"] = THETA_STEP_SCALE / jnp.sqrt(
                jnp.maximum(jnp.diagonal(h_gg), jnp.finfo(g.dtype).tiny)
            )
        return extra | {
            "g": g,
            "items": items,
            "g_draws": g_draws,
            "item_draws": i_draws,
            "item_cond_mean": items - shift,
            "item_chol": chol_d,
            "cov_g": cov_g,
            "item_cov": item_cov,
            "grad_norm": grad_norm,
            "num_steps": num_steps,
            "finite": jnp.all(jnp.isfinite(chol_s)) & jnp.all(jnp.isfinite(chol_d)),
            "potential": fun(params),
            # Laplace's log marginal: -U(mode) - 0.5 log det H, H = blockdiag(D) with Schur S
            "log_marginal": -fun(params)
            - jnp.sum(jnp.log(jnp.diagonal(chol_s)))
            - 0.5 * jnp.sum(jnp.linalg.slogdet(d_blocks)[1]),
        }

    return jax.jit(fit)


def fit_laplace(
    data: GRMData,
    *,
    rng_key: jax.Array,
    init: dict[str, np.ndarray] | None = None,
    num_draws: int = 1000,
    max_iter: int = 500,
    tol: float = 1e-3,
    priors: Priors = DEFAULT_PRIORS,
    integrate_tau: bool = True,
    exact_items: bool = True,
    refine_sweeps: int = REFINE_SWEEPS,
    refine_below: float = REFINE_BELOW,
    robust_cluster: np.ndarray | None = None,
) -> Posterior:
    """MAP + Laplace approximation, warm-started from ``init`` (a previous ``Posterior.mode``).

    Args:
        data: the observations.
        rng_key: for the approximate posterior draws.
        init: unconstrained ``{"global": (G,), "items": (P, K)}``; entries for
            comparisons/items/systems beyond the previous sizes start at the default.
        num_draws: draws from the Gaussian approximation.
        max_iter, tol: L-BFGS limits; it stops when the gradient norm of the
            potential falls below ``tol * max(1, sqrt(num_obs / 1000))``.
        priors: the model's priors and variants (:class:`stan_free_models.model_key.Priors`).
            With ``lapse`` and cells, judgments may be given at random at a learned rate
            (:func:`stan_free_models.graded_response.graded_response`), integrated on a
            grid of its logit (``LAPSE_GRID``), each point with its own column of tau grid
            fits; each fit's Laplace marginal is corrected by importance sampling of the
            prompts' integrals (:func:`stan_free_models.laplace_grid._item_correction`);
            every draw's items and refinement use that draw's rate (needs the tau grid).
        integrate_tau: with a cell effect, integrate tau out over a grid (nested
            Laplace: a conditional mode and Gaussian at every grid value of tau,
            weighted by the Laplace estimate of p(y | tau) p(tau)) instead of fixing it
            at the joint mode. The joint mode of tau collapses towards 0 when most cells
            have one judgment (tau then trades off with every prompt's discrimination,
            and hundreds of discrimination priors outvote tau's one), which made the
            intervals of Δ too narrow; NUTS puts tau near its prior there.
        exact_items: replace each draw's prompt parameters by a draw from their exact
            conditional given that draw's abilities and tau
            (:func:`stan_free_models.conditional.resample_items`), instead of the
            Gaussian's: a prompt's few judgments leave its parameters skewed, and the
            mode's plug-in exaggerated the net preference (by 0.6 sd at full size).
        refine_sweeps: with ``exact_items``, per-comparison abilities, and tau on its grid
            (or no cells), take this many Gibbs sweeps from every draw
            (:func:`stan_free_models.conditional.refine_draws`) instead of one resampling of
            the items: the abilities then come from the posterior too, not from the
            Gaussian at the joint mode, which on sparse data put the net preference
            0.2 sd outside NUTS's (docs/statistics.md). 0 turns it off.
        refine_below: refine only while the prompts have fewer judgments than this on
            average: with more, each prompt's Gaussian is close to its posterior and the
            joint mode's bias is small against the interval (coverage of Δ 0.96-0.97 at
            60 judgments per prompt unrefined), while the sweeps cost about 3x the fit.
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
    padded = pad_data(data)
    static = _static_key(padded, priors)
    priors = static.priors
    lapse = priors.lapse
    x0 = default_init(padded, priors)
    if init is not None:
        g_prev, i_prev = np.asarray(init["global"]), np.asarray(init["items"])
        ng = min(len(g_prev), len(x0["global"]))
        ni = min(len(i_prev), len(x0["items"]))
        x0["global"][:ng] = g_prev[:ng]
        if i_prev.shape[1] == x0["items"].shape[1]:
            x0["items"][:ni] = i_prev[:ni]
        for name in ("log_tau", "logit_lapse"):
            if name in x0 and name in init:
                x0[name] = np.asarray(init[name], np.float32).reshape(1)
    args = _dynamic_args(padded)
    # The potential sums over observations, so its gradient grows like sqrt(n) at a
    # fixed accuracy of the estimates: the tolerance scales with it (a runtime value,
    # so a new batch does not recompile).
    scale = max(1.0, math.sqrt(data.num_obs / 1000))
    tol_now = jnp.asarray(tol * scale, dtype=jnp.float32)
    grad_limit = max(tol * 10, 1e-2) * scale
    grid = data.has_cells and integrate_tau

    def usable(out) -> bool:
        return bool(out["finite"]) and float(out["grad_norm"]) < grad_limit

    refine = (
        refine_sweeps > 0
        and data.num_obs < refine_below * max(data.num_items, 1)
        and exact_items
        and not data.per_system
        and (grid or not data.has_cells)
    )
    robust = robust_cluster is not None
    if robust and (data.has_cells or refine or exact_items):
        raise ValueError(
            "cluster-robust intervals need the joint mode's Gaussian without cells "
            "(no cell effect, no exact items, no refinement)"
        )
    fit = _compiled_laplace(static, int(max_iter), int(num_draws), grid, refine or robust)

    def run(key, g0, items0, log_tau, logit_lapse=None):
        if grid and lapse:
            log_tau = [logit_lapse, log_tau]
        # no lock: tracing is safe on any thread (per-thread handler stacks, engine.py)
        return jax.device_get(
            fit(
                key,
                jnp.asarray(g0),
                jnp.asarray(items0),
                args,
                tol_now,
                jnp.asarray(log_tau, jnp.float32),
            )
        )

    g_real = data.num_systems if data.per_system else data.num_comparisons
    assert g_real is not None
    restarted = False
    if not grid:
        out = run(rng_key, _global_start(x0), x0["items"], 0.0)
        if init is not None and not usable(out):
            # a warm start that lands somewhere unusable: start again from the default point
            x0 = default_init(padded, priors)
            out = run(rng_key, _global_start(x0), x0["items"], 0.0)
            restarted = True
        components: list[tuple[float, Any, float | None]] = [(1.0, out, None)]
        lapse_of: list[float | None] = [None]
    else:
        # the cells' statistics, for the lapse's correction at every grid point
        stats = _cell_stats(padded) if lapse else None
        if lapse:
            # as many fits as the two sweeps take; apart from the keys of the draws' later
            # steps (fold_in(rng_key, 7) and 11)
            grid_key = jax.random.fold_in(rng_key, 1000)
            keys: Any = (jax.random.fold_in(grid_key, k) for k in itertools.count())
        else:
            keys = iter(jax.random.split(rng_key, len(TAU_GRID) + 4 * TAU_REFINE_ROUNDS))

        def tau_column(logit_lapse, log_tau0: float, g0, items0) -> dict[float, dict]:
            """Fits over the grid of log tau (at one lapse rate when judgments may lapse)."""
            fits: dict[float, dict] = {}

            def fit_at(log_tau: float, g0, items0, key):
                nonlocal restarted
                out = run(key, g0, items0, log_tau, logit_lapse)
                if not usable(out):
                    cold = default_init(padded, priors)
                    out = run(key, cold["global"], cold["items"], log_tau, logit_lapse)
                    restarted = True
                if stats is not None:
                    out["log_marginal"] = out["log_marginal"] + _item_correction(
                        padded,
                        stats,
                        out,
                        log_tau,
                        logit_lapse,
                        priors,
                    )
                fits[log_tau] = out
                return out

            def evaluate(log_tau: float, near: float | None) -> float:
                warm = (g0, items0) if near is None else (fits[near]["g"], fits[near]["items"])
                out = fit_at(log_tau, *warm, next(keys))
                # a point whose Gaussian is not used does not steer the sweep either
                return (
                    float(out["log_marginal"]) if _gaussian_sound(out, g_real, priors) else -np.inf
                )

            log_grid = np.log(np.asarray(TAU_GRID))
            sweep_grid(log_grid, log_tau0, evaluate, TAU_REFINE_ROUNDS)
            return fits

        def column_weights(fits: dict[float, dict]) -> tuple[np.ndarray, np.ndarray, float]:
            """Grid points, their weights, and log of the column's mass (its integral over log tau)."""
            lt = np.array(sorted(fits))
            lm = np.array([float(fits[t]["log_marginal"]) for t in lt])
            sound = np.array([_gaussian_sound(fits[t], g_real, priors) for t in lt])
            if sound.any():  # (none sound: every point keeps its weight, as before)
                lm = np.where(sound, lm, -np.inf)
            return lt, _tau_weights(lt, lm), log_mass(lt, lm)

        # on the grid the global block is the abilities alone (tau and lapse are fixed)
        start_point = (x0["global"], x0["items"])
        if not lapse:
            fits = tau_column(None, float(x0["log_tau"][0]), *start_point)
            lt, w, _ = column_weights(fits)
            components = [(float(wk), fits[t], float(t)) for wk, t in zip(w, lt) if wk > 0]
            lapse_of = [None] * len(components)
        else:
            # one level up: a column of tau fits per logit lapse, warm-started from its
            # neighbour column's heaviest fit, weighted by its mass
            columns: dict[float, dict[float, dict]] = {}

            def column_mass(logit_lapse: float, near: float | None) -> float:
                if near is None:
                    columns[logit_lapse] = tau_column(
                        logit_lapse, float(x0["log_tau"][0]), *start_point
                    )
                else:
                    lt, w, _ = column_weights(columns[near])
                    top = float(lt[int(np.argmax(w))])
                    fit = columns[near][top]
                    columns[logit_lapse] = tau_column(logit_lapse, top, fit["g"], fit["items"])
                return column_weights(columns[logit_lapse])[2]

            masses = sweep_grid(
                np.asarray(LAPSE_GRID),
                float(x0["logit_lapse"][0]),
                column_mass,
                LAPSE_REFINE_ROUNDS,
            )
            lls = np.array(sorted(masses))
            outer = _tau_weights(lls, np.array([masses[v] for v in lls]))
            components, lapse_of = [], []
            for wl, ll in zip(outer, lls):
                fits = columns[ll]
                lt, w, _ = column_weights(fits)
                for wk, t in zip(w, lt):
                    if wl * wk > 0:
                        components.append((float(wl * wk), fits[t], float(t)))
                        lapse_of.append(float(ll))
    c, p = data.num_comparisons, data.num_items
    # the global block: abilities (padded), then logit lapse, then log tau (joint mode only)
    g_pad = padded.num_systems if padded.per_system else padded.num_comparisons
    assert g_pad is not None
    counts = _allocate(np.array([wk for wk, _, _ in components]), int(num_draws))
    g_parts: list[np.ndarray] = []
    i_parts: list[np.ndarray] = []
    tau_parts: list[np.ndarray] = []
    lapse_parts: list[np.ndarray] = []
    comp_info: list[tuple[float, int, int, Any, float | None]] = []
    cursor = 0
    for (wk, out, log_tau), ll, n_k in zip(components, lapse_of, counts):
        g_parts.append(np.asarray(out["g_draws"], np.float64)[:n_k])
        i_parts.append(np.asarray(out["item_draws"], np.float64)[:n_k])
        if log_tau is not None:
            tau_parts.append(np.full(n_k, np.exp(log_tau)))
        if ll is not None:
            lapse_parts.append(np.full(n_k, _expit(ll)))
        comp_info.append((wk, cursor, cursor + int(n_k), out, log_tau))
        cursor += int(n_k)
    g_draws = np.concatenate(g_parts)
    item_draws = np.concatenate(i_parts)
    moments = None
    if robust:
        assert robust_cluster is not None
        out = comp_info[0][3]
        moments = robust_moments(static, args, out, robust_cluster, g_real)
        # each ability's draws widened about the mode to its larger sd (never narrowed)
        widen = np.sqrt(
            np.maximum(1.0, moments.global_robust_var / np.maximum(moments.global_var, 1e-30))
        )
        g_mode = np.asarray(out["g"], np.float64)[:g_real]
        g_draws[:, :g_real] = g_mode + (g_draws[:, :g_real] - g_mode) * widen
    # each draw's lapse rate: its grid point's, or its global block's entry (joint mode)
    lapse_draws = None
    if lapse:
        lapse_draws = np.concatenate(lapse_parts) if grid else _expit(g_draws[:, g_pad])
    ess = None
    refine_info = None
    if refine:
        g_draws, item_draws, refine_info = _refined_draws(
            padded,
            comp_info,
            g_draws,
            item_draws,
            tau_parts,
            jax.random.fold_in(rng_key, 11),
            priors=priors,
            sweeps=int(refine_sweeps),
            lapse=lapse_draws,
        )
    elif exact_items:
        item_draws, ess = _exact_item_draws(
            padded,
            comp_info,
            g_draws,
            tau_parts,
            jax.random.fold_in(rng_key, 7),
            priors=priors,
            lapse=lapse_draws,
        )
    log_alpha, b = _constrain_items(item_draws[:, :p], priors, data.num_categories)
    draws: dict[str, np.ndarray] = {
        "log_alpha": log_alpha[None],
        "alpha": np.exp(log_alpha)[None],
        "b": b[None],
    }
    if data.per_system:
        s = data.num_systems
        skill = g_draws[:, :s]
        draws["skill"] = skill[None]
        draws["theta"] = (skill[:, data.pair_b] - skill[:, data.pair_a])[None]
    else:
        draws["theta"] = g_draws[:, :c][None]
    if data.has_cells:
        draws["tau"] = (np.concatenate(tau_parts) if grid else np.exp(g_draws[:, -1]))[None]
    if lapse_draws is not None:
        draws["lapse"] = lapse_draws[None]

    def mode_values_of(out, log_tau, logit_lapse):
        g_mode = np.asarray(out["g"], np.float64)
        la_mode, b_mode = _constrain_items(
            np.asarray(out["items"], dtype=np.float64)[:p],
            priors,
            data.num_categories,
        )
        if data.per_system:
            s_mode = g_mode[: data.num_systems]
            theta_mode = s_mode[data.pair_b] - s_mode[data.pair_a]
        else:
            theta_mode = g_mode[:c]
        values = {"theta": theta_mode, "alpha": np.exp(la_mode), "b": b_mode}
        if data.has_cells:
            values["tau"] = float(np.exp(g_mode[-1] if log_tau is None else log_tau))
        if lapse:
            values["lapse"] = float(_expit(g_mode[g_pad] if logit_lapse is None else logit_lapse))
        return values

    # the heaviest component stands for the mode (the warm start of the next fit)
    top = max(range(len(comp_info)), key=lambda k: comp_info[k][0])
    _, _, _, out, top_log_tau = comp_info[top]
    g_mode = np.asarray(out["g"])
    mode: dict[str, np.ndarray] = {"global": g_mode[:g_pad], "items": np.asarray(out["items"])}
    if data.has_cells:
        mode["log_tau"] = np.full(1, top_log_tau, np.float32) if grid else g_mode[-1:]
    if lapse:
        top_ll = lapse_of[top]
        mode["logit_lapse"] = (
            g_mode[g_pad : g_pad + 1] if top_ll is None else np.full(1, top_ll, np.float32)
        )
    # marginal covariance of the global block (skills or abilities), no padding: within
    # each component plus between their means
    means = [np.asarray(o["g"], np.float64)[:g_real] for _, _, _, o, _ in comp_info]
    weights = np.array([wk for wk, *_ in comp_info])
    weights = weights / weights.sum()
    centre = sum(wk * m for wk, m in zip(weights, means))
    cov_global = sum(
        wk
        * (np.asarray(o["cov_g"], np.float64)[:g_real, :g_real] + np.outer(m - centre, m - centre))
        for wk, m, (_, _, _, o, _) in zip(weights, means, comp_info)
    )
    converged = all(usable(o) for wk, _, _, o, _ in comp_info if wk > 0.01)
    diagnostics = Diagnostics(
        converged=converged,
        num_steps=int(sum(int(o["num_steps"]) for *_, o, _ in comp_info)),
        seconds=time.perf_counter() - start,
    )
    info = {
        "grad_norm": float(out["grad_norm"]),
        "potential": float(out["potential"]),
        "restarted_cold": restarted,
        "padded_shape": static.sizes,
        "cov_global": cov_global,
        # the mode in the model's own terms: a plug-in for functions of the parameters, whose
        # mean over the Gaussian draws shifts where the transforms (exp, ordering) bend
        "mode_values": mode_values_of(out, top_log_tau, lapse_of[top]),
    }
    if moments is not None:
        info["robust_widen"] = widen
    if refine_info is not None:
        info["items_exact"] = True
        info["refine"] = refine_info
    if ess is not None:
        # the items come from their conditional, so functions of them need no re-centring
        info["items_exact"] = True
        info["item_ess"] = ess[:, :p].mean(axis=0)
    if grid:
        info["components"] = [
            {
                "weight": wk,
                "start": lo,
                "stop": hi,
                "tau": float(np.exp(lt)),
                **({"lapse": float(_expit(ll))} if ll is not None else {}),
                "mode_values": mode_values_of(o, lt, ll),
            }
            for (wk, lo, hi, o, lt), ll in zip(comp_info, lapse_of)
            if lt is not None
        ]
    return Posterior(draws=draws, method="laplace", diagnostics=diagnostics, mode=mode, info=info)
