"""The one place that configures inference for the graded response model.

* :func:`fit_nuts`: NUTS with configurable chains, warm-up and draws; R-hat,
  bulk ESS and divergences come back with every fit.
* :func:`fit_laplace`: the fast path. MAP by L-BFGS in the unconstrained
  space, then a Laplace approximation whose block structure (a small global
  block of abilities, one K x K block per item) makes the Hessian cheap:
  G + K Hessian-vector products and a Schur complement. It warm-starts from a
  previous solution.

Both pad the data to shape buckets so that a compiled function is reused for
every data set whose sizes fall in the same bucket (padding has weight 0, a
padded comparison or item only sees its prior and is cut off the result).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu
from numpyro.infer import MCMC, NUTS
from numpyro.infer.util import potential_energy

from stan_free_models.graded_response import (
    DEFAULT_ALPHA_SCALE,
    DEFAULT_B_SCALE,
    DEFAULT_TAU_SCALE,
    cell_counts,
    graded_response,
    symmetric_from_half,
)
from stan_free_models.posterior import Diagnostics, Posterior, bulk_ess, rank_rhat


@dataclass(frozen=True)
class GRMData:
    """Observations for the graded response model, integer-indexed.

    ``pair_a``/``pair_b``/``num_systems`` are set for the per-system
    parameterisation (theta_i = s[pair_b[i]] - s[pair_a[i]]) and None otherwise.
    """

    comparison: np.ndarray
    item: np.ndarray
    y: np.ndarray
    weight: np.ndarray
    num_comparisons: int
    num_items: int
    num_categories: int
    pair_a: np.ndarray | None = None
    pair_b: np.ndarray | None = None
    num_systems: int | None = None
    cell: np.ndarray | None = None
    num_cells: int | None = None

    @property
    def has_cells(self) -> bool:
        """Observations are grouped into cells (a comparison's prompt) for the cell effect."""
        return self.cell is not None

    @property
    def per_system(self) -> bool:
        return self.pair_a is not None

    @property
    def num_obs(self) -> int:
        return int(self.y.shape[0])

    def validate(self) -> None:
        n = self.num_obs
        for name in ("comparison", "item", "weight"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have shape ({n},)")
        if n and (self.y.min() < 0 or self.y.max() >= self.num_categories):
            raise ValueError(f"y must lie in 0..{self.num_categories - 1}")
        if n and (
            self.comparison.max() >= self.num_comparisons or self.item.max() >= self.num_items
        ):
            raise ValueError("comparison or item index out of range")
        if self.has_cells and (
            self.cell.shape != (n,)
            or self.num_cells is None
            or (n and self.cell.max() >= self.num_cells)
        ):
            raise ValueError("cell must have shape (n,) with indices below num_cells")
        if self.per_system and (
            self.pair_a.shape != (self.num_comparisons,) or self.num_systems is None
        ):
            raise ValueError("pair_a/pair_b need one entry per comparison and num_systems")


def bucket(n: int, minimum: int = 8) -> int:
    """The smallest bucket >= n in the sequence 8, 12, 16, 24, 32, 48, ... (<= 50% padding)."""
    if minimum < 2:
        raise ValueError("bucket minimum must be at least 2")
    size = minimum
    while size < n:
        size = size * 3 // 2 if (size & (size - 1)) == 0 else (size // 3) * 4
    return size


def pad_data(data: GRMData) -> GRMData:
    """Pad observations, comparisons, items and systems to their buckets."""
    data.validate()
    n_pad = bucket(data.num_obs, 64) - data.num_obs

    def pad(x: np.ndarray, value: float | int = 0) -> np.ndarray:
        return np.concatenate([x, np.full(n_pad, value, dtype=x.dtype)])

    out = GRMData(
        comparison=pad(data.comparison.astype(np.int32)),
        item=pad(data.item.astype(np.int32)),
        y=pad(data.y.astype(np.int32)),
        weight=pad(data.weight.astype(np.float32), 0.0),
        num_comparisons=bucket(data.num_comparisons),
        num_items=bucket(data.num_items),
        num_categories=data.num_categories,
    )
    if data.has_cells:
        out = replace(out, cell=pad(data.cell.astype(np.int32)), num_cells=bucket(data.num_cells))
    if data.per_system:
        c_pad = out.num_comparisons - data.num_comparisons
        num_systems = bucket(data.num_systems + 1, 4)
        # padded comparisons compare two padding systems, so they leave real skills alone
        out = replace(
            out,
            pair_a=np.concatenate([data.pair_a, np.full(c_pad, num_systems - 1)]).astype(np.int32),
            pair_b=np.concatenate([data.pair_b, np.full(c_pad, num_systems - 2)]).astype(np.int32),
            num_systems=num_systems,
        )
    return out


def _model_kwargs(
    data: GRMData, alpha_scale: float, b_scale: float, symmetric: bool, tau_scale: float
) -> dict:
    kwargs = dict(
        comparison=jnp.asarray(data.comparison),
        item=jnp.asarray(data.item),
        y=jnp.asarray(data.y),
        weight=jnp.asarray(data.weight),
        num_comparisons=data.num_comparisons,
        num_items=data.num_items,
        num_categories=data.num_categories,
        alpha_scale=alpha_scale,
        b_scale=b_scale,
        symmetric_thresholds=symmetric,
    )
    if data.has_cells:
        kwargs.update(cell=jnp.asarray(data.cell), num_cells=data.num_cells, tau_scale=tau_scale)
        kwargs.update(zip(_CELL_STATS, (jnp.asarray(x) for x in _cell_stats(data))))
    if data.per_system:
        kwargs.update(
            pair_a=jnp.asarray(data.pair_a),
            pair_b=jnp.asarray(data.pair_b),
            num_systems=data.num_systems,
        )
    return kwargs


def _static_key(
    data: GRMData, alpha_scale: float, b_scale: float, symmetric: bool, tau_scale: float = 1.0
) -> tuple:
    """Everything a compiled fit depends on; index 8 is the number of cells (None: no cell effect)."""
    return (
        data.num_obs,
        data.num_comparisons,
        data.num_items,
        data.num_categories,
        data.num_systems if data.per_system else None,
        float(alpha_scale),
        float(b_scale),
        bool(symmetric),
        data.num_cells if data.has_cells else None,
        float(tau_scale),
    )


_CELL_STATS = ("cell_comparison", "cell_item", "cell_y_counts")


def _cell_stats(data: GRMData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells' sufficient statistics: comparison, item and weighted category counts."""
    return cell_counts(
        data.cell,
        data.comparison,
        data.item,
        data.y,
        data.weight,
        data.num_cells,
        data.num_categories,
    )


def _dynamic_args(data: GRMData) -> tuple:
    pair_a = data.pair_a if data.per_system else np.zeros(1, np.int32)
    pair_b = data.pair_b if data.per_system else np.zeros(1, np.int32)
    cell = data.cell if data.has_cells else np.zeros(1, np.int32)
    if data.has_cells:
        stats = _cell_stats(data)
    else:
        stats = (np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros((1, 1), np.float32))
    return tuple(
        jnp.asarray(x)
        for x in (data.comparison, data.item, data.y, data.weight, pair_a, pair_b, cell, *stats)
    )


def _potential_fn(static: tuple):
    num_obs, num_comp, num_items, num_cat, num_systems, alpha_scale, b_scale, symmetric = static[:8]
    num_cells, tau_scale = static[8], static[9]

    def potential(params, comparison, item, y, weight, pair_a, pair_b, cell, *stats):
        kwargs = dict(
            comparison=comparison,
            item=item,
            y=y,
            weight=weight,
            num_comparisons=num_comp,
            num_items=num_items,
            num_categories=num_cat,
            alpha_scale=alpha_scale,
            b_scale=b_scale,
            symmetric_thresholds=symmetric,
        )
        if num_systems is not None:
            kwargs.update(pair_a=pair_a, pair_b=pair_b, num_systems=num_systems)
        if num_cells is not None:
            kwargs.update(cell=cell, num_cells=num_cells, tau_scale=tau_scale)
            kwargs.update(zip(_CELL_STATS, stats))
        return potential_energy(graded_response, (), kwargs, params)

    return potential


def _global_name(static: tuple) -> str:
    return "theta" if static[4] is None else "skill"


def _split_params(static: tuple, g: jax.Array, items: jax.Array) -> dict:
    """The global block is the abilities (or skills), then log tau when cells are modelled."""
    params = {"log_alpha": items[:, 0], ("b_half" if static[7] else "b"): items[:, 1:]}
    if static[8] is not None:
        params[_global_name(static)] = g[:-1]
        params["tau"] = g[-1]  # unconstrained: log tau
    else:
        params[_global_name(static)] = g
    return params


def default_init(data: GRMData, symmetric: bool = False) -> dict[str, np.ndarray]:
    """A deterministic starting point: abilities 0, alpha 1, thresholds spread over [-1, 1]."""
    k = data.num_categories - 1
    if symmetric:
        # positive ordered half d = exp(ordered(x)): d spread over [0.25, 1]
        d = np.linspace(0.25, 1.0, k // 2) if k // 2 > 1 else np.full(k // 2, 0.5)
        logd = np.log(d)
        b_u = np.concatenate([logd[:1], np.log(np.diff(logd))]) if len(logd) > 1 else logd
    else:
        b0 = np.linspace(-1.0, 1.0, k) if k > 1 else np.zeros(1)
        # unconstrained ordered vector: first value, then log of increments
        b_u = np.concatenate([b0[:1], np.log(np.diff(b0))]) if k > 1 else b0
    g_size = data.num_systems if data.per_system else data.num_comparisons
    out = {
        "global": np.zeros(g_size, np.float32),
        "items": np.concatenate(
            [np.zeros((data.num_items, 1)), np.tile(b_u, (data.num_items, 1))], axis=1
        ).astype(np.float32),
    }
    if data.has_cells:
        out["log_tau"] = np.full(1, np.log(0.3), np.float32)
    return out


def _global_start(x0: dict[str, np.ndarray]) -> np.ndarray:
    """The global block's starting point: abilities, then log tau when cells are modelled."""
    if "log_tau" in x0:
        return np.concatenate([x0["global"], x0["log_tau"]])
    return x0["global"]


#: NumPyro's effect-handler stack is one process-wide list, so two threads tracing a
#: model at once corrupt each other's traces ("all sites must have unique names").
#: Every fit that runs NumPyro code (a trace, a compile, MCMC initialisation) holds it.
MODEL_LOCK = threading.RLock()

#: counts how often each compiled function is traced (a test checks reuse)
TRACE_COUNTS: dict[str, int] = {"laplace": 0, "nuts": 0}


@functools.lru_cache(maxsize=32)
def _compiled_laplace(static: tuple, max_iter: int, num_draws: int, fixed_tau: bool = False):
    """MAP + Laplace; with ``fixed_tau`` the cell effect's log tau is an argument, not fitted.

    The fixed-tau fit also returns the Laplace estimate of log p(y, log tau) (up to a
    constant): -U at the conditional mode - 0.5 log det of its Hessian.
    """
    potential = _potential_fn(static)
    num_cat = static[3]
    num_item_params = 1 + ((num_cat - 1) // 2 if static[7] else num_cat - 1)

    def objective(g, items, args, log_tau):
        if fixed_tau:
            g = jnp.concatenate([g, jnp.reshape(log_tau, (1,)).astype(g.dtype)])
        return potential(_split_params(static, g, items), *args)

    def fit(rng_key, g0, items0, args, tol, log_tau):
        TRACE_COUNTS["laplace"] += 1  # runs at trace time only
        fun = lambda p: objective(p[0], p[1], args, log_tau)  # noqa: E731
        opt = optax.lbfgs()
        value_and_grad = optax.value_and_grad_from_state(fun)

        def step(carry):
            params, state = carry
            value, grad = value_and_grad(params, state=state)
            updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
            return optax.apply_updates(params, updates), state

        def keep_going(carry):
            _, state = carry
            count = otu.tree_get(state, "count")
            grad = otu.tree_get(state, "grad")
            err = otu.tree_norm(grad)
            return (count == 0) | ((count < max_iter) & (err >= tol))

        params, state = jax.lax.while_loop(keep_going, step, ((g0, items0), opt.init((g0, items0))))
        g, items = params
        grad_norm = otu.tree_norm(jax.grad(fun)(params))
        num_steps = otu.tree_get(state, "count")

        # Hessian blocks via Hessian-vector products
        grad_fn = jax.grad(objective, argnums=(0, 1))

        def hvp(vg, vi):
            return jax.jvp(lambda a, b: grad_fn(a, b, args, log_tau), (g, items), (vg, vi))[1]

        size_g = g.shape[0]
        eye_g = jnp.eye(size_g, dtype=g.dtype)
        h_gg, h_ig = jax.vmap(lambda e: hvp(e, jnp.zeros_like(items)))(eye_g)
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

        key_g, key_i = jax.random.split(rng_key)
        z_g = jax.random.normal(key_g, (num_draws, size_g), dtype=g.dtype)
        g_draws = g + jax.scipy.linalg.solve_triangular(chol_s.T, z_g.T, lower=False).T
        # items | global: N(mu_i - D^-1 B (g - mu_g), D^-1)
        shift = jnp.einsum("jkl,jlg,ng->njk", d_inv, b_cross, g_draws - g)
        chol_d = jnp.linalg.cholesky(d_inv)
        z_i = jax.random.normal(key_i, (num_draws,) + items.shape, dtype=g.dtype)
        i_draws = items - shift + jnp.einsum("jkl,njl->njk", chol_d, z_i)
        # marginal sd of the global block and of each item block (exact block inverse)
        item_cov = d_inv + jnp.einsum(
            "jkl,jlg,gh,jmh,jmn->jkn", d_inv, b_cross, cov_g, b_cross, d_inv
        )
        return {
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


def _ordered(raw: np.ndarray) -> np.ndarray:
    """numpyro's OrderedTransform: first value, then cumulative exp increments."""
    if raw.shape[-1] <= 1:
        return raw
    return np.concatenate([raw[..., :1], np.exp(raw[..., 1:])], axis=-1).cumsum(axis=-1)


def _constrain_items(
    items: np.ndarray, symmetric: bool = False, num_categories: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Unconstrained item vectors (..., 1 + m) -> (log_alpha, ordered b)."""
    log_alpha = items[..., 0]
    raw = items[..., 1:]
    if symmetric:
        return log_alpha, symmetric_from_half(np.exp(_ordered(raw)), num_categories)
    return log_alpha, _ordered(raw)


#: the coarse grid of tau (sd of the prompt-by-comparison effect) that the fast path
#: integrates over: log-uniform from "no cell effect" to well past HalfNormal(1)'s bulk
TAU_GRID = tuple(float(t) for t in np.exp(np.linspace(np.log(0.05), np.log(3.0), 8)))
#: refinement rounds: halve the spacing around the heaviest grid point while it holds
#: more than ``REFINE_ABOVE`` of the weight
TAU_REFINE_ROUNDS = 2
REFINE_ABOVE = 0.4
#: a grid point this far (in log marginal) below the best is not worth extending past
NEGLIGIBLE_LOG_WEIGHT = 7.0


def _tau_weights(log_taus: np.ndarray, log_marginal: np.ndarray) -> np.ndarray:
    """Posterior weights of grid points of log tau: Laplace marginal x the width each point stands for."""
    order = np.argsort(log_taus)
    x = log_taus[order]
    if len(x) == 1:
        return np.ones(1)
    edges = np.concatenate(
        [[x[0] - (x[1] - x[0]) / 2], (x[1:] + x[:-1]) / 2, [x[-1] + (x[-1] - x[-2]) / 2]]
    )
    logw = log_marginal[order] + np.log(np.diff(edges))
    logw = np.where(np.isfinite(logw), logw, -np.inf)
    w = np.exp(logw - logw.max())
    out = np.empty_like(w)
    out[order] = w / w.sum()
    return out


def _allocate(weights: np.ndarray, total: int) -> np.ndarray:
    """Integer counts summing to ``total`` in proportion to ``weights`` (largest remainder)."""
    raw = weights * total
    counts = np.floor(raw).astype(int)
    rest = total - counts.sum()
    if rest > 0:
        counts[np.argsort(-(raw - counts), kind="stable")[:rest]] += 1
    return counts


def fit_laplace(
    data: GRMData,
    *,
    rng_key: jax.Array | None = None,
    init: dict[str, np.ndarray] | None = None,
    num_draws: int = 1000,
    max_iter: int = 500,
    tol: float = 1e-3,
    alpha_scale: float = DEFAULT_ALPHA_SCALE,
    b_scale: float = DEFAULT_B_SCALE,
    symmetric_thresholds: bool = False,
    tau_scale: float = DEFAULT_TAU_SCALE,
    integrate_tau: bool = True,
    exact_items: bool = True,
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

    Returns:
        A :class:`Posterior` with ``method="laplace"``; ``mode`` is the warm start
        for the next call. With the tau grid, draws are a mixture: ``info["components"]``
        lists each grid point's weight, its slice of the draws and its mode.

    References:
        Rue, Martino & Chopin (2009), integrated nested Laplace approximations (the
        grid over a hyperparameter, weighted by Laplace marginals).
    """
    start = time.perf_counter()
    rng_key = jax.random.PRNGKey(0) if rng_key is None else rng_key
    padded = pad_data(data)
    static = _static_key(padded, alpha_scale, b_scale, symmetric_thresholds, tau_scale)
    x0 = default_init(padded, symmetric_thresholds)
    if init is not None:
        g_prev, i_prev = np.asarray(init["global"]), np.asarray(init["items"])
        ng = min(len(g_prev), len(x0["global"]))
        ni = min(len(i_prev), len(x0["items"]))
        x0["global"][:ng] = g_prev[:ng]
        if i_prev.shape[1] == x0["items"].shape[1]:
            x0["items"][:ni] = i_prev[:ni]
        if "log_tau" in x0 and "log_tau" in init:
            x0["log_tau"] = np.asarray(init["log_tau"], np.float32).reshape(1)
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

    fit = _compiled_laplace(static, int(max_iter), int(num_draws), grid)

    def run(key, g0, items0, log_tau):
        with MODEL_LOCK:
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

    restarted = False
    if not grid:
        out = run(rng_key, _global_start(x0), x0["items"], 0.0)
        if init is not None and not usable(out):
            # a warm start that lands somewhere unusable: start again from the default point
            x0 = default_init(padded, symmetric_thresholds)
            out = run(rng_key, _global_start(x0), x0["items"], 0.0)
            restarted = True
        components = [(1.0, out, None)]
    else:
        fits: dict[float, dict] = {}

        def fit_at(log_tau: float, g0, items0, key):
            nonlocal restarted
            out = run(key, g0, items0, log_tau)
            if not usable(out):
                cold = default_init(padded, symmetric_thresholds)
                out = run(key, cold["global"], cold["items"], log_tau)
                restarted = True
            fits[log_tau] = out
            return out

        keys = iter(jax.random.split(rng_key, len(TAU_GRID) + 4 * TAU_REFINE_ROUNDS))
        log_grid = np.log(np.asarray(TAU_GRID))
        # sweep outwards from the grid point nearest the warm start, each fit warm-starting
        # the next, until the marginal has fallen far below the best point seen
        first = int(np.argmin(np.abs(log_grid - float(x0["log_tau"][0]))))
        base = fit_at(float(log_grid[first]), x0["global"], x0["items"], next(keys))
        for direction in (range(first - 1, -1, -1), range(first + 1, len(log_grid))):
            prev = base
            for k in direction:
                best = max(float(o["log_marginal"]) for o in fits.values())
                if float(prev["log_marginal"]) < best - NEGLIGIBLE_LOG_WEIGHT:
                    break
                prev = fit_at(float(log_grid[k]), prev["g"], prev["items"], next(keys))
        step = float(log_grid[1] - log_grid[0])
        for _ in range(TAU_REFINE_ROUNDS):
            lt = np.array(sorted(fits))
            w = _tau_weights(lt, np.array([float(fits[t]["log_marginal"]) for t in lt]))
            if w.max() <= REFINE_ABOVE:
                break
            top = float(lt[int(np.argmax(w))])
            step /= 2
            for new in (top - step, top + step):
                if new not in fits:
                    fit_at(new, fits[top]["g"], fits[top]["items"], next(keys))
        lt = np.array(sorted(fits))
        w = _tau_weights(lt, np.array([float(fits[t]["log_marginal"]) for t in lt]))
        components = [(float(wk), fits[t], float(t)) for wk, t in zip(w, lt) if wk > 0]
    c, p = data.num_comparisons, data.num_items
    g_real = data.num_systems if data.per_system else c
    counts = _allocate(np.array([wk for wk, _, _ in components]), int(num_draws))
    g_parts, i_parts, tau_parts, comp_info = [], [], [], []
    cursor = 0
    for (wk, out, log_tau), n_k in zip(components, counts):
        g_parts.append(np.asarray(out["g_draws"], np.float64)[:n_k])
        i_parts.append(np.asarray(out["item_draws"], np.float64)[:n_k])
        if log_tau is not None:
            tau_parts.append(np.full(n_k, np.exp(log_tau)))
        comp_info.append((wk, cursor, cursor + int(n_k), out, log_tau))
        cursor += int(n_k)
    g_draws = np.concatenate(g_parts)
    item_draws = np.concatenate(i_parts)
    ess = None
    if exact_items:
        item_draws, ess = _exact_item_draws(
            padded,
            comp_info,
            g_draws,
            tau_parts,
            jax.random.fold_in(rng_key, 7),
            alpha_scale=alpha_scale,
            b_scale=b_scale,
            symmetric=symmetric_thresholds,
        )
    log_alpha, b = _constrain_items(item_draws[:, :p], symmetric_thresholds, data.num_categories)
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

    def mode_values_of(out, log_tau):
        g_mode = np.asarray(out["g"], np.float64)
        la_mode, b_mode = _constrain_items(
            np.asarray(out["items"], dtype=np.float64)[:p],
            symmetric_thresholds,
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
        return values

    # the heaviest component stands for the mode (the warm start of the next fit)
    top = max(range(len(comp_info)), key=lambda k: comp_info[k][0])
    _, _, _, out, top_log_tau = comp_info[top]
    g_mode = np.asarray(out["g"])
    mode: dict[str, np.ndarray] = {"global": g_mode, "items": np.asarray(out["items"])}
    if data.has_cells:
        if grid:
            mode["log_tau"] = np.full(1, top_log_tau, np.float32)
        else:
            mode = {"global": g_mode[:-1], "items": mode["items"], "log_tau": g_mode[-1:]}
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
        "padded_shape": static[:5],
        "cov_global": cov_global,
        # the mode in the model's own terms: a plug-in for functions of the parameters, whose
        # mean over the Gaussian draws shifts where the transforms (exp, ordering) bend
        "mode_values": mode_values_of(out, top_log_tau),
    }
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
                "mode_values": mode_values_of(o, lt),
            }
            for wk, lo, hi, o, lt in comp_info
        ]
    return Posterior(draws=draws, method="laplace", diagnostics=diagnostics, mode=mode, info=info)


def _exact_item_draws(
    padded: GRMData,
    comp_info: list,
    g_draws: np.ndarray,
    tau_parts: list,
    rng_key: jax.Array,
    *,
    alpha_scale: float,
    b_scale: float,
    symmetric: bool,
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
    if padded.has_cells:
        tau = np.concatenate(tau_parts) if tau_parts else np.exp(g_draws[:, -1])
        stats = _cell_stats(padded)
    else:
        tau = np.zeros(len(g_draws))
        stats = cell_counts(
            np.arange(padded.num_obs),
            padded.comparison,
            padded.item,
            padded.y,
            padded.weight,
            padded.num_obs,
            padded.num_categories,
        )
    return resample_items(
        rng_key,
        theta,
        tau,
        np.concatenate(means),
        np.concatenate(chols),
        *stats,
        alpha_scale=alpha_scale,
        b_scale=b_scale,
        symmetric=symmetric,
        num_categories=padded.num_categories,
    )


def chain_method_for(num_chains: int) -> str:
    """Parallel chains when JAX sees enough devices (``numpyro.set_host_device_count``), else vectorised."""
    return "parallel" if jax.local_device_count() >= num_chains else "vectorized"


def new_mcmc(
    model_fn,
    *,
    num_chains: int,
    num_warmup: int,
    num_samples: int,
    chain_method: str,
    progress: bool,
    target_accept: float,
) -> MCMC:
    """A NUTS sampler whose model arguments are jitted, so a cached sampler is reused per shape."""
    return MCMC(
        NUTS(model_fn, target_accept_prob=target_accept),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=chain_method,
        progress_bar=progress,
        jit_model_args=True,
    )


def sample_mcmc(
    mcmc: MCMC, rng_key: jax.Array, arrays: dict
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Run a sampler under the model lock: (draws by chain as float64, divergence flags)."""
    with MODEL_LOCK:
        mcmc.run(rng_key, extra_fields=("diverging",), **arrays)
        samples = {
            k: np.asarray(v, dtype=np.float64)
            for k, v in mcmc.get_samples(group_by_chain=True).items()
        }
        diverging = np.asarray(mcmc.get_extra_fields()["diverging"])
    return samples, diverging


def nuts_diagnostics(
    checked: dict[str, np.ndarray], diverging: np.ndarray, num_samples: int, start: float
) -> Diagnostics:
    """R-hat and bulk ESS of the checked sites, divergences, and the wall time since ``start``."""
    return Diagnostics(
        rhat={k: rank_rhat(v) for k, v in checked.items()},
        ess_bulk={k: bulk_ess(v) for k, v in checked.items()},
        num_divergences=int(diverging.sum()),
        converged=True,
        num_steps=num_samples,
        seconds=time.perf_counter() - start,
    )


@functools.lru_cache(maxsize=8)
def _cached_mcmc(
    static: tuple,
    num_chains: int,
    num_warmup: int,
    num_samples: int,
    chain_method: str,
    progress: bool,
    target_accept: float,
):
    TRACE_COUNTS["nuts"] += 1
    num_obs, num_comp, num_items, num_cat, num_systems, alpha_scale, b_scale, symmetric = static[:8]
    sizes = dict(
        num_comparisons=num_comp,
        num_items=num_items,
        num_categories=num_cat,
        alpha_scale=alpha_scale,
        b_scale=b_scale,
        symmetric_thresholds=symmetric,
    )
    if num_systems is not None:
        sizes["num_systems"] = num_systems
    if static[8] is not None:
        sizes.update(num_cells=static[8], tau_scale=static[9])
    return new_mcmc(
        functools.partial(graded_response, **sizes),
        num_chains=num_chains,
        num_warmup=num_warmup,
        num_samples=num_samples,
        chain_method=chain_method,
        progress=progress,
        target_accept=target_accept,
    )


def fit_nuts(
    data: GRMData,
    *,
    rng_key: jax.Array | None = None,
    num_chains: int = 4,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    progress: bool = False,
    target_accept: float = 0.8,
    alpha_scale: float = DEFAULT_ALPHA_SCALE,
    b_scale: float = DEFAULT_B_SCALE,
    symmetric_thresholds: bool = False,
    chain_method: str | None = None,
    tau_scale: float = DEFAULT_TAU_SCALE,
) -> Posterior:
    """Full posterior by NUTS, with split R-hat, bulk ESS and divergences.

    Chains run in parallel when JAX sees at least ``num_chains`` devices
    (``numpyro.set_host_device_count``), otherwise vectorised.
    """
    start = time.perf_counter()
    rng_key = jax.random.PRNGKey(0) if rng_key is None else rng_key
    padded = pad_data(data)
    static = _static_key(padded, alpha_scale, b_scale, symmetric_thresholds, tau_scale)
    chain_method = chain_method or chain_method_for(num_chains)
    mcmc = _cached_mcmc(
        static, num_chains, num_warmup, num_samples, chain_method, progress, target_accept
    )
    kwargs = _model_kwargs(padded, alpha_scale, b_scale, symmetric_thresholds, tau_scale)
    arrays = {k: v for k, v in kwargs.items() if isinstance(v, jax.Array)}
    samples, diverging = sample_mcmc(mcmc, rng_key, arrays)
    c, p = data.num_comparisons, data.num_items
    draws = {
        "theta": samples["theta"][:, :, :c],
        "log_alpha": samples["log_alpha"][:, :, :p],
        "alpha": np.exp(samples["log_alpha"][:, :, :p]),
        "b": samples["b"][:, :, :p],
    }
    if data.per_system:
        draws["skill"] = samples["skill"][:, :, : data.num_systems]
    if symmetric_thresholds:
        draws["b_half"] = samples["b_half"][:, :, :p]
    if data.has_cells:
        draws["tau"] = samples["tau"]
    checked = {
        k: v for k, v in draws.items() if k in ("theta", "log_alpha", "b_half", "skill", "tau")
    }
    if not symmetric_thresholds:
        checked["b"] = draws["b"]
    diagnostics = nuts_diagnostics(checked, diverging, num_samples, start)
    return Posterior(
        draws=draws, method="nuts", diagnostics=diagnostics, info={"padded_shape": static[:5]}
    )
