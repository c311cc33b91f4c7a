"""Inference for the Bradley-Terry model: NUTS, a fast MAP + Laplace path, and the MLE.

* :func:`fit_nuts`: the full posterior (the paper's 4 chains x 1,000 draws by
  default), with rank-normalised R-hat, bulk ESS and divergences.
* :func:`fit_laplace`: the fast path for streaming use: MAP by L-BFGS, then a
  Gaussian at the mode from the dense Hessian (a few hundred parameters at
  most per dimension, so the dense Hessian is cheap), warm-started from a
  previous mode.
* :func:`fit_mle`: flat priors, one player pinned to 0 (the reference, as R's
  BradleyTerry2 does), standard errors from the observed information. Used to
  check the model against an independent maximum-likelihood implementation.

NUTS and the fast path run on :mod:`stan_free_models.engine` (the model enters
as :data:`BT_SPEC`) and pad the data to shape buckets (as
:mod:`stan_free_models.inference` does) so a compiled function is reused for
every data set whose sizes fall in the same bucket; padded observations have
weight 0 and padded players/groups only see their prior and are cut off.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from stan_free_models.bradley_terry import TIE, TIE_MODELS, bradley_terry, log_likelihood
from stan_free_models.engine import TRACE_COUNTS as TRACE_COUNTS  # one counter for every model
from stan_free_models.engine import (
    ModelSpec,
    fit_dense_laplace,
    nuts_diagnostics,
    run_nuts,
)
from stan_free_models.fit_settings import NutsSettings
from stan_free_models.inference import bucket
from stan_free_models.posterior import Diagnostics, Posterior


@dataclass(frozen=True)
class BTData:
    """Paired-comparison outcomes, integer-indexed (0 second, 1 tie, 2 first preferred)."""

    first: np.ndarray
    second: np.ndarray
    group: np.ndarray
    y: np.ndarray
    weight: np.ndarray
    num_players: int
    num_groups: int = 1
    position: bool = True
    tie_model: str = "none"

    @property
    def num_obs(self) -> int:
        return int(self.y.shape[0])

    def validate(self) -> None:
        n = self.num_obs
        for name in ("first", "second", "group", "weight"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have shape ({n},)")
        if self.tie_model not in TIE_MODELS:
            raise ValueError(f"unknown tie model {self.tie_model!r}; expected one of {TIE_MODELS}")
        if n == 0:
            raise ValueError("no comparisons to fit")
        if self.y.min() < 0 or self.y.max() > 2:
            raise ValueError("y must be 0 (second), 1 (tie) or 2 (first)")
        if self.tie_model == "none" and np.any((self.y == TIE) & (self.weight > 0)):
            raise ValueError("the data has ties: resolve them first or use tie_model='davidson'")
        if max(self.first.max(), self.second.max()) >= self.num_players:
            raise ValueError("player index out of range")
        if self.group.max() >= self.num_groups:
            raise ValueError("group index out of range")


def pad_data(data: BTData) -> BTData:
    """Pad observations, players and groups to their buckets."""
    data.validate()
    n_pad = bucket(data.num_obs, 64) - data.num_obs

    def pad(x: np.ndarray, dtype) -> np.ndarray:
        return np.concatenate([x.astype(dtype), np.zeros(n_pad, dtype=dtype)])

    return replace(
        data,
        first=pad(data.first, np.int32),
        second=pad(data.second, np.int32),
        group=pad(data.group, np.int32),
        y=pad(data.y, np.int32),
        weight=pad(data.weight, np.float32),
        num_players=bucket(data.num_players, 4),
        num_groups=bucket(data.num_groups, 4) if data.num_groups > 1 else 1,
    )


def _static_key(data: BTData, prior_scale: float, intercept_scale: float) -> tuple:
    return (
        data.num_obs,
        data.num_players,
        data.num_groups,
        bool(data.position),
        data.tie_model,
        float(prior_scale),
        float(intercept_scale),
    )


def _model_fn(static: tuple):
    _, num_players, num_groups, position, tie_model, prior_scale, intercept_scale = static
    return functools.partial(
        bradley_terry,
        num_players=num_players,
        num_groups=num_groups,
        position=position,
        tie_model=tie_model,
        prior_scale=prior_scale,
        intercept_scale=intercept_scale,
    )


#: the Bradley-Terry model for the engine (static key: :func:`_static_key`)
BT_SPEC = ModelSpec("bradley_terry", _model_fn)


def _arrays(data: BTData) -> dict[str, jax.Array]:
    return dict(
        first=jnp.asarray(data.first),
        second=jnp.asarray(data.second),
        group=jnp.asarray(data.group),
        y=jnp.asarray(data.y),
        weight=jnp.asarray(data.weight),
    )


def _init_params(data: BTData) -> dict[str, np.ndarray]:
    params = {"ability": np.zeros(data.num_players, np.float32)}
    if data.position:
        params["intercept"] = np.zeros(data.num_groups, np.float32)
    if data.tie_model == "davidson":
        params["log_nu"] = np.asarray(-1.0, np.float32)
    return params


def _cut(data: BTData, draws: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Drop padded players and groups; add nu."""
    out = {"ability": draws["ability"][..., : data.num_players]}
    if "intercept" in draws:
        out["intercept"] = draws["intercept"][..., : data.num_groups]
    if "log_nu" in draws:
        out["log_nu"] = draws["log_nu"]
        out["nu"] = np.exp(draws["log_nu"])
    return out


def fit_laplace(
    data: BTData,
    *,
    rng_key: jax.Array,
    init: dict[str, np.ndarray] | None = None,
    num_draws: int = 4000,
    max_iter: int = 500,
    tol: float = 1e-4,
    prior_scale: float = 1.0,
    intercept_scale: float = 1.0,
) -> Posterior:
    """MAP + Laplace approximation, warm-started from ``init`` (a previous ``Posterior.mode``).

    Returns:
        A :class:`Posterior` with draws ``ability`` (1, D, P), ``intercept``
        (1, D, G) when the position intercept is on, ``log_nu``/``nu`` for
        Davidson ties; ``mode`` is the warm start for the next call.
    """
    start = time.perf_counter()
    padded = pad_data(data)
    static = _static_key(padded, prior_scale, intercept_scale)
    x0 = _init_params(padded)
    for name, prev in (init or {}).items():
        if name in x0:
            prev = np.asarray(prev, np.float32)
            if prev.ndim == 0:
                x0[name] = prev
            else:
                k = min(prev.shape[0], x0[name].shape[0])
                x0[name][:k] = prev[:k]
    out = fit_dense_laplace(
        BT_SPEC,
        static,
        rng_key,
        x0,
        _arrays(padded),
        max_iter=max_iter,
        tol=tol,
        num_draws=num_draws,
    )
    draws = {k: np.asarray(v, np.float64)[None] for k, v in out["draws"].items()}
    grad_norm = float(out["grad_norm"])
    diagnostics = Diagnostics(
        converged=bool(out["finite"]) and grad_norm < max(10 * tol, 1e-2),
        num_steps=int(out["num_steps"]),
        seconds=time.perf_counter() - start,
    )
    mode = {k: np.asarray(v) for k, v in out["mode"].items()}
    return Posterior(
        draws=_cut(data, draws),
        method="laplace",
        diagnostics=diagnostics,
        mode=mode,
        info={"grad_norm": grad_norm, "padded_shape": static[:3]},
    )


def fit_nuts(
    data: BTData,
    *,
    rng_key: jax.Array,
    settings: NutsSettings = NutsSettings(),
    prior_scale: float = 1.0,
    intercept_scale: float = 1.0,
    **overrides: Any,
) -> Posterior:
    """Full posterior by NUTS with split R-hat, bulk ESS and divergences.

    ``settings``: the run (:class:`stan_free_models.fit_settings.NutsSettings`), with
    ``overrides`` of its fields (``num_warmup=...``) on top. Chains run in parallel when
    JAX sees at least ``num_chains`` devices, otherwise vectorised.
    """
    start = time.perf_counter()
    settings = settings.replace(**overrides)
    padded = pad_data(data)
    static = _static_key(padded, prior_scale, intercept_scale)
    samples, diverging = run_nuts(BT_SPEC, static, rng_key, _arrays(padded), settings)
    draws = _cut(data, samples)
    checked = {k: v for k, v in draws.items() if k in ("ability", "intercept", "log_nu")}
    diagnostics = nuts_diagnostics(checked, diverging, settings.num_samples, start)
    return Posterior(
        draws=draws, method="nuts", diagnostics=diagnostics, info={"padded_shape": static[:3]}
    )


@dataclass(frozen=True)
class MLEResult:
    """Maximum-likelihood estimates with standard errors from the observed information.

    ``ability[reference] == 0`` and its se is 0 (the identifiability constraint).
    """

    ability: np.ndarray
    ability_se: np.ndarray
    intercept: np.ndarray | None
    intercept_se: np.ndarray | None
    log_nu: float | None
    log_likelihood: float
    reference: int
    grad_norm: float


def _unpack(x, free_idx, num_players, num_groups, position, tie_model):
    num_free = num_players - 1
    ability = jnp.zeros(num_players, x.dtype).at[free_idx].set(x[:num_free])
    rest = x[num_free:]
    intercept = rest[:num_groups] if position else None
    log_nu = rest[-1] if tie_model == "davidson" else None
    return ability, intercept, log_nu


@functools.lru_cache(maxsize=16)
def _mle_functions(num_players: int, num_groups: int, position: bool, tie_model: str):
    """Jitted negative log-likelihood, gradient and Hessian of ``x`` (free parameters)."""

    def nll(x, arrays):
        ability, intercept, log_nu = _unpack(
            x, arrays["free_idx"], num_players, num_groups, position, tie_model
        )
        obs = {k: arrays[k] for k in ("first", "second", "group", "y", "weight")}
        return -log_likelihood(ability, intercept, log_nu, **obs)

    return jax.jit(nll), jax.jit(jax.grad(nll)), jax.jit(jax.hessian(nll))


def fit_mle(
    data: BTData, *, reference: int = 0, max_iter: int = 100, tol: float = 1e-9
) -> MLEResult:
    """Maximum likelihood with flat priors and ``ability[reference] = 0``.

    Runs in float64 (a reference computation, not the streaming path).
    """
    data.validate()
    num_free = data.num_players - 1
    size = num_free + (data.num_groups if data.position else 0)
    size += int(data.tie_model == "davidson")
    free = np.ones(data.num_players, bool)
    free[reference] = False
    # pad the observations (weight 0) so data sets of one bucket share the compiled functions
    n_pad = bucket(data.num_obs, 64) - data.num_obs
    arrays: dict[str, np.ndarray | jax.Array] = {
        k: np.concatenate([getattr(data, k), np.zeros(n_pad, getattr(data, k).dtype)])
        for k in ("first", "second", "group", "y", "weight")
    }
    arrays["free_idx"] = np.flatnonzero(free)
    with jax.enable_x64(True):
        arrays = {k: jnp.asarray(v) for k, v in arrays.items()}
        arrays["weight"] = arrays["weight"].astype(jnp.float64)
        value_fn, grad_fn, hess_fn = _mle_functions(
            data.num_players, data.num_groups, data.position, data.tie_model
        )

        def unpack(x):
            return _unpack(x, arrays["free_idx"], data.num_players, data.num_groups,
                           data.position, data.tie_model)  # fmt: skip

        def nll(x):
            return value_fn(x, arrays)

        x = jnp.zeros(size, jnp.float64)
        if data.tie_model == "davidson":
            x = x.at[-1].set(-1.0)
        value = float(value_fn(x, arrays))
        for _ in range(max_iter):
            g = np.asarray(grad_fn(x, arrays))
            if np.linalg.norm(g) < tol:
                break
            step = np.linalg.solve(np.asarray(hess_fn(x, arrays)), g)
            scale = 1.0
            while scale > 1e-6:
                candidate = x - scale * step
                new_value = float(value_fn(candidate, arrays))
                if np.isfinite(new_value) and new_value <= value:
                    break
                scale *= 0.5
            x, value = candidate, new_value
        cov = np.linalg.inv(np.asarray(hess_fn(x, arrays)))
        se = np.sqrt(np.diag(cov))
        grad_norm = float(np.linalg.norm(np.asarray(grad_fn(x, arrays))))
        ability, intercept, log_nu = (None if v is None else np.asarray(v) for v in unpack(x))
        assert ability is not None  # only the intercept and log_nu are optional
        ability_se = np.zeros(data.num_players)
        ability_se[free] = se[:num_free]
        rest_se = se[num_free:]
        return MLEResult(
            ability=ability,
            ability_se=ability_se,
            intercept=intercept,
            intercept_se=rest_se[: data.num_groups] if data.position else None,
            log_nu=None if log_nu is None else float(log_nu),
            log_likelihood=-float(nll(x)),
            reference=reference,
            grad_norm=grad_norm,
        )
