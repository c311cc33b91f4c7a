"""Many fast (MAP + Laplace) fits of the same model through one compiled program.

:func:`fit_laplace_batch` runs the fit of :func:`stan_free_models.laplace.fit_laplace`
(``exact_items=False``, no prompt-by-comparison cell effect, no warm start) on several
data sets at one common padded shape: observations of weight 0, comparisons and prompts
that only see their prior, as ``pad_data`` already does within a shape bucket. One at a
time, data sets of different sizes fall into different shape buckets and each bucket
compiles its own program (about 20 s each for leave-one-comparison-out on ChatEval NCM,
against 0.2 s to run one fit); at one shape the whole batch compiles once.

Two ways to run the batch, both compiled once per common shape:

* default: the one compiled fit, called for each data set in turn. A data set whose own
  padded shape is the common one gets ``fit_laplace``'s numbers bit for bit;
* ``vmap=True``: ``jax.vmap`` of the fit over the batch, one call. On 2 cores it
  compiled in about twice the time of the plain fit and saved less than that in running
  time, and batched reductions round differently, so L-BFGS stops a few steps away and
  every fit moves within its tolerance (1e-5 to 1e-3 in the draws; docs/performance.md).

Either way:

* each fit's standard normals are drawn from its key at the shapes of its *own*
  padded fit (what ``fit_laplace`` draws) and padded with zeros, so a fit's draws do
  not depend on the batch or on the common shape;
* a padded comparison or prompt is independent of the real ones under the potential
  and its Hessian (no observation touches it), so the real block of the mode and of
  the draws is the own-shape fit's in exact arithmetic. In float32 the padded sums
  round differently, and a fit padded up from a smaller bucket agrees with its own-shape
  fit to the optimiser's tolerance, not bit for bit;
* given the common shape (``shape``), a fit's numbers do not depend on which fits share
  its batch (nor, without ``vmap``, on the batch size): Ray groups of LOCO folds get
  the serial batched run's numbers.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np

from stan_free_models.fit_settings import LaplaceSettings
from stan_free_models.inference import (
    DEFAULT_PRIORS,
    MODEL_LOCK,
    GRMData,
    _constrain_items,
    _dynamic_args,
    _global_start,
    _static_key,
    default_init,
    pad_data,
)
from stan_free_models.laplace_program import _compiled_laplace
from stan_free_models.model_key import ModelKey, Priors
from stan_free_models.posterior import Diagnostics, Posterior


@dataclass(frozen=True)
class BatchShape:
    """The common padded shape of a batch: fits, observations, comparisons, prompts."""

    batch: int
    num_obs: int
    num_comparisons: int
    num_items: int

    def covering(self, other: BatchShape) -> BatchShape:
        """The smallest shape that holds both."""
        return BatchShape(
            max(self.batch, other.batch),
            max(self.num_obs, other.num_obs),
            max(self.num_comparisons, other.num_comparisons),
            max(self.num_items, other.num_items),
        )


def batch_shape(datas: Sequence[GRMData]) -> BatchShape:
    """The shape that holds every data set of ``datas`` after its own padding."""
    padded = [pad_data(d) for d in datas]
    return BatchShape(
        len(datas),
        max(p.num_obs for p in padded),
        max(p.num_comparisons for p in padded),
        max(p.num_items for p in padded),
    )


@functools.lru_cache(maxsize=8)
def _program(static: ModelKey, settings: LaplaceSettings, vmap: bool):
    """The fast fit at the common shape, from a key and the fit's own padded sizes."""
    num_draws = settings.num_draws
    fit = _compiled_laplace(static, settings)
    num_cat, symmetric = static.num_categories, static.priors.symmetric
    width = 1 + ((num_cat - 1) // 2 if symmetric else num_cat - 1)

    def run(rng_key, c_own, p_own, g0, items0, args, tol, log_tau):
        normals = own_shape_normals(
            rng_key, c_own, p_own, num_draws, static.num_comparisons, (static.num_items, width)
        )
        return fit(normals, g0, items0, args, tol, log_tau)

    if vmap:
        return jax.jit(jax.vmap(run, in_axes=(0, 0, 0, None, None, 0, 0, None)))
    return jax.jit(run)


def own_shape_normals(
    rng_key: jax.Array,
    c_own: jax.Array,
    p_own: jax.Array,
    num_draws: int,
    c_common: int,
    item_shape: tuple[int, int],
) -> tuple[jax.Array, jax.Array]:
    """The fast fit's standard normals at its own sizes (c_own, p_own), zero-padded.

    What ``fit_laplace`` draws from ``rng_key`` for a fit of ``c_own`` padded comparisons
    and ``p_own`` padded prompts, placed in the common shape. With partitionable
    threefry (JAX's default, checked by the caller) element i of ``normal(key, shape)``
    depends on the key and the flat index i only, so every own size is read off one
    flat draw at the common size: one program serves all sizes (``tests/adaptive/prompts/test_loco.py``
    checks the values against ``jax.random.normal`` at the own shape).
    """
    key_g, key_i = jax.random.split(rng_key)
    p_common, width = item_shape
    flat_g = jax.random.normal(key_g, (num_draws * c_common,), dtype=jnp.float32)
    d, j = jnp.arange(num_draws)[:, None], jnp.arange(c_common)[None, :]
    z_g = jnp.where(j < c_own, flat_g[jnp.minimum(d * c_own + j, flat_g.size - 1)], 0.0)
    flat_i = jax.random.normal(key_i, (num_draws * p_common * width,), dtype=jnp.float32)
    d3 = jnp.arange(num_draws)[:, None, None]
    p, k = jnp.arange(p_common)[None, :, None], jnp.arange(width)[None, None, :]
    index = jnp.minimum((d3 * p_own + p) * width + k, flat_i.size - 1)
    return z_g, jnp.where(p < p_own, flat_i[index], 0.0)


def _pad_to(padded: GRMData, num_obs: int) -> GRMData:
    extra = num_obs - padded.num_obs

    def pad(x: np.ndarray, value: float | int = 0) -> np.ndarray:
        return np.concatenate([x, np.full(extra, value, dtype=x.dtype)])

    return replace(
        padded,
        comparison=pad(padded.comparison),
        item=pad(padded.item),
        y=pad(padded.y),
        weight=pad(padded.weight, 0.0),
    )


def fit_laplace_batch(
    datas: Sequence[GRMData],
    rng_keys: Sequence[jax.Array],
    *,
    num_draws: int = LaplaceSettings.num_draws,
    max_iter: int = LaplaceSettings.max_iter,
    tol: float = LaplaceSettings.tol,
    priors: Priors = DEFAULT_PRIORS,
    shape: BatchShape | None = None,
    vmap: bool = False,
) -> tuple[list[Posterior], BatchShape]:
    """``fit_laplace(d, rng_key=k, num_draws=...)`` (Gaussian item draws) for every (d, k), batched.

    Args:
        datas: observations without cells (no prompt-by-comparison effect), per
            comparison (no per-system abilities); any sizes.
        rng_keys: one key per data set (the key ``fit_laplace`` would get).
        num_draws, max_iter, tol, priors: as :func:`stan_free_models.laplace.fit_laplace`
            (no lapse: there are no cells).
        shape: pad to at least this shape (with ``vmap``, the batch size too: unused
            slots repeat the first fit and are dropped), so that later calls reuse one
            program.
        vmap: one vmapped program for the whole batch; without it (default) one compiled
            fit at the common shape runs each data set in turn, and a data set whose own
            padded shape is the common one gets ``fit_laplace``'s numbers bit for bit.

    Returns:
        (one :class:`Posterior` per data set, as ``fit_laplace`` builds it without
        tau grid or exact items, the shape the program ran at).
    """
    start = time.perf_counter()
    if len(datas) != len(rng_keys) or not datas:
        raise ValueError("fit_laplace_batch needs one key per data set, and some data")
    if any(d.has_cells or d.per_system for d in datas):
        raise ValueError("fit_laplace_batch fits per-comparison abilities without cells")
    num_cat = {d.num_categories for d in datas}
    if len(num_cat) != 1:
        raise ValueError("every data set of a batch needs the same number of categories")
    if not getattr(jax.config, "jax_threefry_partitionable", False):
        raise RuntimeError("fit_laplace_batch needs jax_threefry_partitionable (JAX's default)")
    own = [pad_data(d) for d in datas]
    common = batch_shape(datas) if shape is None else shape.covering(batch_shape(datas))
    template = replace(
        _pad_to(own[0], common.num_obs),
        num_comparisons=common.num_comparisons,
        num_items=common.num_items,
    )
    static = _static_key(template, priors)
    x0 = default_init(template, static.priors)
    g0, items0 = jnp.asarray(_global_start(x0)), jnp.asarray(x0["items"])
    slots = list(range(len(datas))) + [0] * (common.batch - len(datas))
    args = [_dynamic_args(_pad_to(own[i], common.num_obs)) for i in slots]
    scales = [max(1.0, math.sqrt(datas[i].num_obs / 1000)) for i in slots]
    tols = jnp.asarray([tol * s for s in scales], dtype=jnp.float32)
    c_own = jnp.asarray([own[i].num_comparisons for i in slots], jnp.int32)
    p_own = jnp.asarray([own[i].num_items for i in slots], jnp.int32)
    keys = [rng_keys[i] for i in slots]
    log_tau = jnp.asarray(0.0, jnp.float32)
    program = _program(
        static, LaplaceSettings(num_draws=num_draws, max_iter=max_iter).program(), vmap
    )
    with MODEL_LOCK:
        if vmap:
            stacked = tuple(jnp.stack(column) for column in zip(*args))
            out = jax.device_get(
                program(jnp.stack(keys), c_own, p_own, g0, items0, stacked, tols, log_tau)
            )
        else:
            outs = [
                jax.device_get(
                    program(keys[b], c_own[b], p_own[b], g0, items0, args[b], tols[b], log_tau)
                )
                for b in range(len(datas))
            ]
            out = {k: [o[k] for o in outs] for k in outs[0]}
    seconds = (time.perf_counter() - start) / len(datas)
    posts = [
        _posterior(
            datas[i],
            own[i],
            {k: v[i] for k, v in out.items()},
            grad_limit=max(tol * 10, 1e-2) * scales[i],
            priors=static.priors,
            seconds=seconds,
        )
        for i in range(len(datas))
    ]
    return posts, common


def _posterior(
    data: GRMData,
    own: GRMData,
    out: dict,
    *,
    grad_limit: float,
    priors: Priors,
    seconds: float,
) -> Posterior:
    """``fit_laplace``'s posterior of one fit (one component, Gaussian item draws)."""
    c, p, k = data.num_comparisons, data.num_items, data.num_categories
    c_own, p_own = own.num_comparisons, own.num_items
    g = np.asarray(out["g"])[:c_own]
    items = np.asarray(out["items"])[:p_own]
    g_draws = np.asarray(out["g_draws"], np.float64)
    item_draws = np.asarray(out["item_draws"], np.float64)
    log_alpha, b = _constrain_items(item_draws[:, :p], priors, k)
    draws = {
        "log_alpha": log_alpha[None],
        "alpha": np.exp(log_alpha)[None],
        "b": b[None],
        "theta": g_draws[:, :c][None],
    }
    la_mode, b_mode = _constrain_items(np.asarray(items, np.float64)[:p], priors, k)
    converged = bool(out["finite"]) and float(out["grad_norm"]) < grad_limit
    info = {
        "grad_norm": float(out["grad_norm"]),
        "potential": float(out["potential"]),
        "restarted_cold": False,
        "padded_shape": _static_key(own, priors).sizes,
        "cov_global": np.asarray(out["cov_g"], np.float64)[:c, :c],
        "mode_values": {
            "theta": np.asarray(g, np.float64)[:c],
            "alpha": np.exp(la_mode),
            "b": b_mode,
        },
    }
    return Posterior(
        draws=draws,
        method="laplace",
        diagnostics=Diagnostics(
            converged=converged, num_steps=int(out["num_steps"]), seconds=seconds
        ),
        mode={"global": g, "items": items},
        info=info,
    )


__all__ = ["BatchShape", "batch_shape", "fit_laplace_batch", "own_shape_normals"]
