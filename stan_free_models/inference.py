"""The graded response model's data, padding, potential and starting point, shared by its fits.

* :mod:`stan_free_models.laplace` (``fit_laplace``): the fast path. MAP by L-BFGS in the
  unconstrained space, then a Laplace approximation whose block structure (a small global
  block of abilities, one K x K block per item) makes the Hessian cheap: G + K
  Hessian-vector products and a Schur complement. It warm-starts from a previous solution.
* :mod:`stan_free_models.nuts` (``fit_nuts``): NUTS with numpyro's diagonal adaptation;
  :mod:`stan_free_models.whitened_nuts`: NUTS on Laplace-whitened coordinates (the default).

All pad the data to shape buckets so that a compiled function is reused for
every data set whose sizes fall in the same bucket (padding has weight 0, a
padded comparison or item only sees its prior and is cut off the result).
The L-BFGS loop, the model lock, the trace counter and the cached sampler are the
engine's (:mod:`stan_free_models.engine`), shared with the Bradley-Terry fits;
:data:`GRM_SPEC` is this model's entry into it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
import numpy as np

from stan_free_models.engine import MODEL_LOCK as MODEL_LOCK  # the fits' lock, re-exported
from stan_free_models.engine import TRACE_COUNTS as TRACE_COUNTS  # one counter, every model
from stan_free_models.engine import ModelSpec
from stan_free_models.engine import lbfgs_minimise as lbfgs_minimise  # the fast path's optimiser
from stan_free_models.graded_response import cell_counts, graded_response, symmetric_from_half
from stan_free_models.model_key import DEFAULT_PRIORS as DEFAULT_PRIORS
from stan_free_models.model_key import ModelKey as ModelKey  # the compile key, re-exported
from stan_free_models.model_key import Priors as Priors  # the model's priors, re-exported


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
    #: the judgments the observations stand for when several were merged into one
    #: (:func:`collapse_observations`); None: one observation each
    num_judgments: int | None = None

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

    @property
    def judgments(self) -> int:
        """The judgments behind the observations (the fit's tolerance grows with them)."""
        return self.num_obs if self.num_judgments is None else int(self.num_judgments)

    def validate(self) -> None:
        n = self.num_obs
        for name in ("comparison", "item"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have shape ({n},)")
        if self.weight.shape not in ((n,), (n, self.num_categories)):
            raise ValueError(f"weight must have shape ({n},) or ({n}, {self.num_categories})")
        if self.weight.ndim == 2 and self.has_cells:
            raise ValueError("category counts (2-d weights) need data without cells")
        if n and (self.y.min() < 0 or self.y.max() >= self.num_categories):
            raise ValueError(f"y must lie in 0..{self.num_categories - 1}")
        if n and (
            self.comparison.max() >= self.num_comparisons or self.item.max() >= self.num_items
        ):
            raise ValueError("comparison or item index out of range")
        if self.cell is not None and (
            self.cell.shape != (n,)
            or self.num_cells is None
            or (n and self.cell.max() >= self.num_cells)
        ):
            raise ValueError("cell must have shape (n,) with indices below num_cells")
        if self.pair_a is not None and (
            self.pair_a.shape != (self.num_comparisons,) or self.num_systems is None
        ):
            raise ValueError("pair_a/pair_b need one entry per comparison and num_systems")


def collapse_observations(data: GRMData, cluster: np.ndarray) -> tuple[GRMData, np.ndarray]:
    """One observation per (cluster, comparison, item) whose weight is its weighted count of
    each category ((M, K) weights), and the observations' clusters.

    Without cells the likelihood depends on a cluster's judgments only through their
    weighted category counts per (comparison, item): the potential, its derivatives and each
    cluster's score (:mod:`stan_free_models.robust`) are the same sums, grouped, so memory and
    time grow with the cells, not with the judgments (a cell judged 20 times is one row).
    ``cluster``: (N,) each observation's independent unit. The potential
    (:func:`stan_free_models.grm_potential.grm_potential`) reads (M, K) weights as counts.

    Example:
        >>> d = GRMData(comparison=np.zeros(3, np.int32), item=np.zeros(3, np.int32),
        ...     y=np.array([2, 0, 2], np.int32), weight=np.ones(3, np.float32),
        ...     num_comparisons=1, num_items=1, num_categories=3)
        >>> merged, unit = collapse_observations(d, np.zeros(3, np.int32))
        >>> merged.weight.tolist(), merged.judgments, unit.tolist()
        ([[1.0, 0.0, 2.0]], 3, [0])
    """
    if data.has_cells or data.weight.ndim != 1:
        raise ValueError("only per-judgment observations without cells are merged")
    cluster = np.asarray(cluster, np.int64)
    if cluster.shape != (data.num_obs,):
        raise ValueError(f"cluster must have shape ({data.num_obs},)")
    num_clusters = int(cluster.max()) + 1 if data.num_obs else 1
    radix = (num_clusters, data.num_comparisons, data.num_items)
    if np.prod(np.asarray(radix, np.float64)) >= 2.0**62:
        raise ValueError("too many clusters, comparisons and items to merge observations")
    key = (cluster * radix[1] + data.comparison) * radix[2] + data.item
    _, first, row = np.unique(key, return_index=True, return_inverse=True)
    row = row.reshape(-1)
    k = data.num_categories
    counts = np.bincount(
        row * k + data.y, weights=data.weight.astype(np.float64), minlength=len(first) * k
    )
    merged = replace(
        data,
        comparison=data.comparison[first],
        item=data.item[first],
        y=np.zeros(len(first), data.y.dtype),  # unused: the weights hold the categories
        weight=counts.reshape(len(first), k).astype(data.weight.dtype),
        num_judgments=data.judgments,
    )
    return merged, cluster[first].astype(np.int32)


#: the smallest padded number of observations
OBS_BUCKET_MINIMUM = 64


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
    n_pad = bucket(data.num_obs, OBS_BUCKET_MINIMUM) - data.num_obs

    def pad(x: np.ndarray, value: float | int = 0) -> np.ndarray:
        return np.concatenate([x, np.full((n_pad,) + x.shape[1:], value, dtype=x.dtype)])

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
        assert data.cell is not None and data.num_cells is not None  # validate() checked
        out = replace(out, cell=pad(data.cell.astype(np.int32)), num_cells=bucket(data.num_cells))
    if data.per_system:
        assert data.num_systems is not None  # validate() checked
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


def _static_key(data: GRMData, priors: Priors = DEFAULT_PRIORS) -> ModelKey:
    """The :class:`ModelKey` of padded ``data`` and the model's priors."""
    if priors.lapse and not data.has_cells:
        raise ValueError("lapse needs the cells of the judgment likelihood (the cell effect)")
    return ModelKey(
        num_obs=data.num_obs,
        num_comparisons=data.num_comparisons,
        num_items=data.num_items,
        num_categories=data.num_categories,
        num_systems=data.num_systems if data.per_system else None,
        num_cells=data.num_cells if data.has_cells else None,
        priors=priors.canonical(),
    )


_CELL_STATS = ("cell_comparison", "cell_item", "cell_y_counts")


def _cell_stats(data: GRMData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells' sufficient statistics: comparison, item and weighted category counts."""
    assert data.cell is not None and data.num_cells is not None, "the data have no cells"
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


def _grm_model(static: ModelKey):
    """The graded response model with the key's sizes and priors bound."""
    sizes = static._asdict()
    del sizes["num_obs"]
    if static.num_systems is None:
        del sizes["num_systems"]
    if static.num_cells is None:
        del sizes["num_cells"]
    return functools.partial(graded_response, **sizes)


#: the graded response model for the engine (static key: :func:`_static_key`)
GRM_SPEC = ModelSpec("graded_response", _grm_model)


def _model_arrays(
    static: ModelKey, comparison, item, y, weight, pair_a, pair_b, cell, *stats
) -> dict[str, jax.Array]:
    """The model's data keywords from :func:`_dynamic_args` (placeholders dropped)."""
    arrays = dict(comparison=comparison, item=item, y=y, weight=weight)
    if static.num_systems is not None:
        arrays.update(pair_a=pair_a, pair_b=pair_b)
    if static.num_cells is not None:
        arrays.update(cell=cell)
        arrays.update(zip(_CELL_STATS, stats))
    return arrays


def _potential_fn(static: ModelKey):
    """The potential of ``(params, *_dynamic_args(padded))`` for the static key.

    Without cells it is written directly in JAX (:mod:`stan_free_models.grm_potential`,
    the same value, several times cheaper to trace); with cells it is NumPyro's.
    """
    if static.num_cells is None:
        from stan_free_models.grm_potential import grm_potential

        return lambda params, *args: grm_potential(static, params, args)
    potential = GRM_SPEC.potential(static)

    def fn(params, *args):
        return potential(params, _model_arrays(static, *args))

    return fn


def _global_name(static: ModelKey) -> str:
    return "theta" if static.num_systems is None else "skill"


def _split_params(static: ModelKey, g: jax.Array, items: jax.Array) -> dict:
    """The global block is the abilities (or skills), then logit lapse when judgments may
    lapse, then log tau when cells are modelled."""
    symmetric, lapse = static.priors.symmetric, static.priors.lapse
    params = {"log_alpha": items[:, 0], ("b_half" if symmetric else "b"): items[:, 1:]}
    end = g.shape[0] - (static.num_cells is not None) - bool(lapse)
    params[_global_name(static)] = g[:end]
    if lapse:
        params["lapse"] = g[end]  # unconstrained: logit lapse
    if static.num_cells is not None:
        params["tau"] = g[-1]  # unconstrained: log tau
    return params


#: where a fit without data starts the lapse rate (the prior's median is 0.074)
LAPSE_START = 0.05


def default_init(data: GRMData, priors: Priors = DEFAULT_PRIORS) -> dict[str, np.ndarray]:
    """A deterministic starting point: abilities 0, alpha 1, thresholds spread over [-1, 1]."""
    k = data.num_categories - 1
    if priors.symmetric:
        # positive ordered half d = exp(ordered(x)): d spread over [0.25, 1]
        d = np.linspace(0.25, 1.0, k // 2) if k // 2 > 1 else np.full(k // 2, 0.5)
        logd = np.log(d)
        b_u = np.concatenate([logd[:1], np.log(np.diff(logd))]) if len(logd) > 1 else logd
    else:
        b0 = np.linspace(-1.0, 1.0, k) if k > 1 else np.zeros(1)
        # unconstrained ordered vector: first value, then log of increments
        b_u = np.concatenate([b0[:1], np.log(np.diff(b0))]) if k > 1 else b0
    g_size = data.num_systems if data.per_system else data.num_comparisons
    assert g_size is not None, "per-system data need num_systems"
    out = {
        "global": np.zeros(g_size, np.float32),
        "items": np.concatenate(
            [np.zeros((data.num_items, 1)), np.tile(b_u, (data.num_items, 1))], axis=1
        ).astype(np.float32),
    }
    if data.has_cells:
        out["log_tau"] = np.full(1, np.log(0.3), np.float32)
        if priors.lapse:
            out["logit_lapse"] = np.full(1, np.log(LAPSE_START / (1 - LAPSE_START)), np.float32)
    return out


def _global_start(x0: dict[str, np.ndarray]) -> np.ndarray:
    """The global block's starting point: abilities, then logit lapse when judgments may
    lapse, then log tau when cells are modelled."""
    parts = [x0["global"]]
    for name in ("logit_lapse", "log_tau"):
        if name in x0:
            parts.append(x0[name])
    return np.concatenate(parts)


def _ordered(raw: np.ndarray) -> np.ndarray:
    """numpyro's OrderedTransform: first value, then cumulative exp increments."""
    if raw.shape[-1] <= 1:
        return raw
    return np.concatenate([raw[..., :1], np.exp(raw[..., 1:])], axis=-1).cumsum(axis=-1)


def _constrain_items(
    items: np.ndarray, priors: Priors, num_categories: int
) -> tuple[np.ndarray, np.ndarray]:
    """Unconstrained item vectors (..., 1 + m) -> (log_alpha, ordered b)."""
    log_alpha = items[..., 0]
    raw = items[..., 1:]
    if priors.symmetric:
        return log_alpha, symmetric_from_half(np.exp(_ordered(raw)), num_categories)
    return log_alpha, _ordered(raw)
