"""NUTS in coordinates whitened by the Laplace approximation (the default sampler).

The graded response posterior is badly scaled for NUTS with a diagonal mass
matrix: each prompt's thresholds and discrimination are strongly correlated
(the centre of a prompt's thresholds is well determined, their spread much
less), and the abilities share a direction with all thresholds (a common shift
that only the priors fix). On a paper-size campaign (20 comparisons x 200
prompts x 3 judgments) the diagonally scaled condition number is about 60,000,
so every draw took 255 leapfrog steps at step size 0.02 after warm-up.

Here the sampler runs on ``w`` with ``x = x0 + L w``, where ``x`` is the
model's unconstrained vector, ``x0`` the joint mode and ``L L^T`` the inverse
of the potential's Hessian there (a dense mass matrix, written as a
reparameterisation so that the compiled sampler is reused across data of the
same padded shape; an affine map has a constant Jacobian, so the posterior is
exactly the model's). The Hessian costs one vectorised batch of
Hessian-vector products, not one per parameter: prompts interact only through
the global parameters, so a direction that sets one role (say, every
prompt's first threshold) at once recovers all prompt blocks of that role
(graph colouring; Curtis, Powell & Reid 1974).

The same structure makes ``L`` cheap to apply (:func:`arrowhead_whitening`):
with the prompts' coordinates first and the global ones last the Hessian is an
arrowhead, ``[[A, B], [B^T, C]]`` with ``A`` block diagonal (one small block per
prompt), so its block Cholesky factor ``R`` keeps that pattern and
``L = R^{-T}`` is applied as one small matrix per prompt plus a prompts-by-globals
and a globals-by-globals product: ``P m^2 + P m G + G^2`` multiplications per
leapfrog step instead of ``(P m + G)^2`` for a dense ``L`` (56,000 against 3.3
million at paper size with 7 categories, where the dense product cost more than
the model's gradient).

Free thresholds (the default model's and the paper's) are sampled with each gap between
neighbouring thresholds written as ``softplus(y)`` instead of the model's
``exp(y)`` (:func:`_flat_potential`): a prompt whose extreme category no rating
reached has that gap bounded only by the thresholds' Gaussian prior, a wall of
curvature growing like ``exp(2y)`` in log coordinates that kept the step size
small everywhere; in softplus coordinates the wall is Gaussian. Same posterior
(a change of variables with its Jacobian); at paper size it cut the leapfrog
steps per draw from 253 to 93 (docs/performance.md). ``x0`` is then the mode mapped
to the sampler's coordinates and the Hessian is the sampler's potential's there
(near, not at, that potential's own mode: the Jacobian moves it; the whitening only
needs the local scale).

Warm-up then adapts the step size and a diagonal correction of the mass
matrix, where the posterior is not Gaussian. Chains start at independent draws
from the Laplace approximation, so R-hat still compares dispersed starts.
"""

from __future__ import annotations

import functools
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.flatten_util import ravel_pytree
from numpyro.distributions import constraints

from stan_free_models.engine import ModelSpec, cached_mcmc
from stan_free_models.fit_settings import LaplaceSettings, NutsSettings
from stan_free_models.inference import (
    DEFAULT_PRIORS,
    MODEL_LOCK,
    GRMData,
    _constrain_items,
    _dynamic_args,
    _global_start,
    _potential_fn,
    _split_params,
    _static_key,
    pad_data,
)
from stan_free_models.laplace import fit_laplace
from stan_free_models.model_key import ModelKey, Priors
from stan_free_models.nuts import checked_sites, nuts_diagnostics
from stan_free_models.posterior import Posterior
from stan_free_models.whitening import Arrowhead, apply_arrowhead, whitening

#: per-prompt sites of the unconstrained parameter dict (leading axis: the prompt)
ITEM_SITES = ("log_alpha", "b", "b_half")


def _example_params(static: ModelKey) -> dict[str, jax.Array]:
    """Zero parameters of the padded model, for the layout of the flat vector."""
    num_items, num_cat, num_systems, symmetric = (
        static.num_items,
        static.num_categories,
        static.num_systems,
        static.priors.symmetric,
    )
    width = (num_cat - 1) // 2 if symmetric else num_cat - 1
    g_size = (
        (num_systems if num_systems is not None else static.num_comparisons)
        + (1 if static.num_cells is not None else 0)
        + (1 if static.priors.lapse else 0)
    )
    return _split_params(static, jnp.zeros(g_size), jnp.zeros((num_items, 1 + width)))


def colouring(static: ModelKey) -> tuple[np.ndarray, np.ndarray]:
    """(D,) colour and prompt of every coordinate of the flat vector (prompt -1: global).

    Global coordinates get a colour each; a prompt's coordinates share the colours of
    their roles with every other prompt, so one Hessian-vector product per colour gives
    every column of the Hessian (prompts never interact directly).
    """
    params = _example_params(static)
    colours, items = [], []
    next_colour = 0
    for name in sorted(params):  # ravel_pytree's order
        value = np.asarray(params[name])
        if name in ITEM_SITES:
            per_item = int(np.prod(value.shape[1:], dtype=int))
            roles = np.tile(np.arange(per_item), value.shape[0]) + next_colour
            colours.append(roles)
            items.append(np.repeat(np.arange(value.shape[0]), per_item))
            next_colour += per_item
        else:
            n = int(value.size)
            colours.append(np.arange(n) + next_colour)
            items.append(np.full(n, -1))
            next_colour += n
    return np.concatenate(colours), np.concatenate(items)


#: how the sampler writes the gaps between a prompt's free thresholds: "log" as the
#: model (numpyro's ordered transform, gap = exp(y)) or "softplus" (gap = log(1 + exp(y)))
GAPS = ("log", "softplus")


def gap_index(static: ModelKey) -> np.ndarray:
    """Flat coordinates that are log gaps between free thresholds (none when symmetric)."""
    if static.priors.symmetric:
        return np.zeros(0, np.int64)
    params = _example_params(static)
    start = 0
    for name in sorted(params):  # ravel_pytree's order
        value = np.asarray(params[name])
        if name == "b":
            flat = np.arange(value.size).reshape(value.shape) + start
            return flat[:, 1:].ravel()
        start += value.size
    raise AssertionError("free thresholds without a b site")


#: below this, log(softplus(y)) is taken as y (they differ by about exp(y) / 2)
SOFTPLUS_LINEAR_BELOW = -20.0


def _log_softplus(y):
    """log(log(1 + exp(y))), finite for every float32 y (it is y where exp(y) underflows)."""
    low = y < SOFTPLUS_LINEAR_BELOW
    safe = jnp.where(low, SOFTPLUS_LINEAR_BELOW, y)  # the gradient flows through one branch only
    return jnp.where(low, y, jnp.log(jax.nn.softplus(safe)))


def _flat_potential(static: ModelKey, gaps: str):
    """potential(y, args) on the sampler's flat coordinates (see :data:`GAPS`).

    With ``"softplus"`` a gap g between two free thresholds is sampled as y with
    g = softplus(y) instead of g = exp(y): the same posterior of the thresholds
    (a change of variables, its log-Jacobian added), with a linear instead of an
    exponential right tail. An extreme category that no rating reached leaves its gap
    bounded only by the thresholds' Gaussian prior; in log coordinates that bound is
    a wall whose curvature grows like exp(2y), in softplus coordinates it is Gaussian.
    """
    potential = _potential_fn(static)
    _, unravel = ravel_pytree(_example_params(static))
    if gaps == "log":
        return lambda y, args: potential(unravel(y), *args)
    if gaps != "softplus":
        raise ValueError(f"unknown gaps {gaps!r}; expected one of {GAPS}")
    index = jnp.asarray(gap_index(static))

    def fn(y, args):
        g = y[index]
        x = y.at[index].set(_log_softplus(g))
        log_jac = jnp.sum(jax.nn.log_sigmoid(g) - _log_softplus(g))  # d log(softplus) / dy
        return potential(unravel(x), *args) - log_jac

    return fn


def _map_gaps(v: np.ndarray, static: ModelKey, gaps: str, fn) -> np.ndarray:
    """``v`` with ``fn`` applied to its gap coordinates (identity below the linear switch)."""
    if gaps == "log":
        return v
    index = gap_index(static)
    out = np.array(v, dtype=np.float64, copy=True)
    u = out[..., index]
    out[..., index] = np.where(
        u < SOFTPLUS_LINEAR_BELOW, u, fn(np.maximum(u, SOFTPLUS_LINEAR_BELOW))
    )
    return out


def _softplus_inverse_of_exp(log_gap: np.ndarray) -> np.ndarray:
    """softplus^{-1}(exp(log_gap)), stable for small and large gaps."""
    g = np.exp(log_gap)
    return g + np.log(-np.expm1(-g))


def to_sampler(x: np.ndarray, static: ModelKey, gaps: str) -> np.ndarray:
    """Model coordinates -> the sampler's (the inverse of :func:`to_model`)."""
    return _map_gaps(x, static, gaps, _softplus_inverse_of_exp)


def to_model(y: np.ndarray, static: ModelKey, gaps: str) -> np.ndarray:
    """The sampler's coordinates (..., D) -> the model's unconstrained ones."""
    return _map_gaps(y, static, gaps, lambda u: np.log(np.logaddexp(0.0, u)))


@functools.lru_cache(maxsize=8)
def _compiled_hvps(static: ModelKey, gaps: str = "log"):
    """jit(x, colour_vectors, *data) -> (colours, D) products of the Hessian with each colour."""
    flat_potential = _flat_potential(static, gaps)

    @jax.jit
    def hvps(x, vectors, args):
        grad = jax.grad(flat_potential)
        return jax.vmap(lambda v: jax.jvp(lambda y: grad(y, args), (x,), (v,))[1])(vectors)

    return hvps


def laplace_hessian(static: ModelKey, x0: np.ndarray, args: tuple, gaps: str = "log") -> np.ndarray:
    """The dense Hessian of the potential at ``x0`` from one batch of coloured products.

    ``gaps``: in the sampler's coordinates (:func:`_flat_potential`); ``x0`` is in them too.
    """
    colours, items = colouring(static)
    num_colours = int(colours.max()) + 1
    vectors = np.zeros((num_colours, len(colours)), np.float32)
    vectors[colours, np.arange(len(colours))] = 1.0
    prods = np.asarray(
        _compiled_hvps(static, gaps)(jnp.asarray(x0, jnp.float32), jnp.asarray(vectors), args),
        np.float64,
    )
    d = len(colours)
    hess = np.zeros((d, d))
    glob = np.flatnonzero(items < 0)
    hess[:, glob] = prods[colours[glob]].T  # global columns are exact
    hess[glob, :] = hess[:, glob].T
    local = np.flatnonzero(items >= 0)
    order = local[np.argsort(items[local], kind="stable")]
    per_item = len(order) // max(1, int(items.max()) + 1)
    blocks = order.reshape(-1, per_item)  # (P, m) coordinates of each prompt
    for r in range(per_item):
        for s in range(per_item):
            rows, cols = blocks[:, r], blocks[:, s]
            hess[rows, cols] = prods[colours[cols], rows]
    return (hess + hess.T) / 2


def arrowhead_whitening(hess: np.ndarray, static: ModelKey) -> Arrowhead:
    """``L`` with ``L L^T`` = inverse Hessian, applied through the prompts' blocks.

    Exact where every prompt block and the globals' Schur complement are positive
    definite. A prompt block with an eigenvalue below ``MIN_CURVATURE`` is floored
    there and decoupled from the globals, and the Schur complement's eigenvalues are
    floored too (a preconditioner either way: the posterior does not depend on ``L``).
    """
    return Arrowhead(hess, *colouring(static))


class WhitenedKey(NamedTuple):
    """The whitened sampler's compile key: the model's, and the coordinates of the gaps."""

    static: ModelKey
    gaps: str


def _whitened_model(key: WhitenedKey):
    static, gaps = key.static, key.gaps
    flat_potential = _flat_potential(static, gaps)
    size = len(colouring(static)[0])

    def model(x0, t, f, m_glob, gather, *args):
        w = numpyro.sample("w", dist.ImproperUniform(constraints.real_vector, (), (size,)))
        with numpyro.handlers.block():  # the inner model's sites stay its own
            energy = flat_potential(x0 + apply_arrowhead(w, t, f, m_glob, gather), args)
        numpyro.factor("log_density", -energy)

    return model


#: the whitened model as the engine sees it (key: :class:`WhitenedKey`): its compiled sampler is cached per padded shape and settings like
#: every other NUTS fit's
WHITENED_SPEC = ModelSpec("graded_response_whitened", _whitened_model)


def _mode_vector(data: GRMData, static: ModelKey) -> np.ndarray:
    """The joint mode (log tau and logit lapse included) in the model's unconstrained coordinates."""
    lap = fit_laplace(
        data,
        rng_key=jax.random.PRNGKey(0),  # no draws are used: only the mode
        settings=LaplaceSettings(num_draws=8, integrate_tau=False),
        priors=static.priors,
    )
    mode = lap.mode
    assert mode is not None  # the fast path always returns its mode
    g = np.asarray(_global_start(mode), np.float32)
    params = _split_params(static, jnp.asarray(g), jnp.asarray(mode["items"], jnp.float32))
    return np.asarray(ravel_pytree(params)[0], np.float64)


def fit_nuts_whitened(
    data: GRMData,
    *,
    rng_key: jax.Array,
    settings: NutsSettings = NutsSettings(),
    gaps: str = "softplus",
    priors: Priors = DEFAULT_PRIORS,
    **overrides: Any,
) -> Posterior:
    """Full posterior by NUTS on Laplace-whitened coordinates (see the module docstring).

    The same model and output as :func:`stan_free_models.nuts.fit_nuts`;
    ``info`` adds ``prep_seconds`` (mode and Hessian) and the mean leapfrog steps.

    ``settings``: the run (:class:`stan_free_models.fit_settings.NutsSettings`), with
    ``overrides`` of its fields on top. With ``min_ess``, sampling goes on after warm-up in
    blocks of ``num_samples`` draws per chain until every checked parameter has bulk and
    tail ESS >= ``min_ess`` and R-hat <= ``max_rhat`` (:func:`stop_rule`), or
    ``max_samples`` draws per chain (default 8 blocks); ``info["blocks"]`` and
    ``info["stopped"]`` say how it ended.
    Each block continues every chain from its last state with the adapted step size
    and mass matrix, so the blocks are one chain cut in pieces.

    ``gaps``: the coordinates of the gaps between free thresholds the sampler moves in
    (:data:`GAPS`, :func:`_flat_potential`); the posterior is the same either way.
    ``priors``: the model's priors and variants (:class:`stan_free_models.model_key.Priors`).
    """
    if gaps not in GAPS:
        raise ValueError(f"unknown gaps {gaps!r}; expected one of {GAPS}")
    start = time.perf_counter()
    settings = settings.replace(**overrides)
    num_chains, num_samples, min_ess = settings.num_chains, settings.num_samples, settings.min_ess
    padded = pad_data(data)
    static = _static_key(padded, priors)
    if len(gap_index(static)) == 0:
        gaps = "log"  # no free gaps (symmetric thresholds): the model's own coordinates
    x0 = to_sampler(_mode_vector(data, static), static, gaps)
    args = _dynamic_args(padded)
    chol = arrowhead_whitening(laplace_hessian(static, x0, args, gaps), static)
    prep_seconds = time.perf_counter() - start
    mcmc = cached_mcmc(WHITENED_SPEC, WhitenedKey(static, gaps), settings)
    key_init, key_run = jax.random.split(rng_key)
    size = chol.size
    w_init = jax.random.normal(key_init, (num_chains, size) if num_chains > 1 else (size,))
    limit = 8 * num_samples if settings.max_samples is None else settings.max_samples
    run_args = (jnp.asarray(x0, jnp.float32), *chol.arrays(), *args)
    blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    stopped = "fixed"
    with MODEL_LOCK:
        try:
            mcmc.run(
                key_run,
                *run_args,
                init_params={"w": w_init},
                extra_fields=("diverging", "num_steps"),
            )
            blocks.append(_block(mcmc))
            while min_ess is not None:
                draws = _constrained_draws(static, data, _whole(blocks, x0, chol, static, gaps))
                stopped = stop_rule(
                    checked_sites(draws, priors), min_ess=min_ess, max_rhat=settings.max_rhat
                )
                if stopped == "target":
                    break
                if (len(blocks) + 1) * num_samples > limit:
                    stopped = "max_samples"
                    break
                # the next block: every chain from its last state, no warm-up
                mcmc.post_warmup_state = mcmc.last_state
                mcmc.run(
                    mcmc.post_warmup_state.rng_key,
                    *run_args,
                    extra_fields=("diverging", "num_steps"),
                )
                blocks.append(_block(mcmc))
        finally:
            # the sampler is cached: the next fit must start with its own warm-up
            mcmc.post_warmup_state = None
    x = _whole(blocks, x0, chol, static, gaps)  # (chains, draws, D)
    diverging = np.concatenate([b[1] for b in blocks], axis=1)
    num_steps = np.concatenate([b[2] for b in blocks], axis=1)
    draws = _constrained_draws(static, data, x)
    checked = checked_sites(draws, priors)
    diagnostics = nuts_diagnostics(checked, diverging, x.shape[1], start)
    return Posterior(
        draws=draws,
        method="nuts",
        diagnostics=diagnostics,
        info={
            "padded_shape": static.sizes,
            "sampler": "nuts-whitened",
            "gaps": gaps,
            "prep_seconds": prep_seconds,
            "mean_leapfrog_steps": float(num_steps.mean()),
            "blocks": len(blocks),
            "stopped": stopped,
        },
    )


def _block(mcmc) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One run's whitened draws, divergence flags and leapfrog steps, by chain."""
    w = np.asarray(mcmc.get_samples(group_by_chain=True)["w"], np.float64)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    return w, np.asarray(extra["diverging"]), np.asarray(extra["num_steps"])


def _whole(
    blocks: list, y0: np.ndarray, chol: Arrowhead, static: ModelKey, gaps: str
) -> np.ndarray:
    """The blocks' draws joined along each chain, in the model's unconstrained coordinates."""
    w = np.concatenate([b[0] for b in blocks], axis=1)
    return to_model(y0 + chol.apply(w), static, gaps)


def stop_rule(checked: dict[str, np.ndarray], *, min_ess: float, max_rhat: float) -> str:
    """``"target"`` when every parameter has bulk and tail ESS >= min_ess and R-hat <= max_rhat.

    ESS and R-hat are ArviZ's (rank-normalised, Vehtari et al. 2021); otherwise the
    name of the first criterion missed (``"ess_bulk"``, ``"ess_tail"`` or ``"rhat"``).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> stop_rule({"x": rng.normal(size=(4, 1000, 3))}, min_ess=400, max_rhat=1.01)
        'target'
        >>> stop_rule({"x": rng.normal(size=(4, 50, 3))}, min_ess=400, max_rhat=1.01)
        'ess_bulk'
    """
    from stan_free_models.arviz_safe import import_arviz

    az = import_arviz()
    dataset = az.convert_to_dataset({k: np.asarray(v) for k, v in checked.items()})
    for method, name in (("bulk", "ess_bulk"), ("tail", "ess_tail")):
        ess = az.ess(dataset, method=method)
        if min(float(np.nanmin(ess[k].values)) for k in checked) < min_ess:
            return name
    rhat = az.rhat(dataset)
    if max(float(np.nanmax(rhat[k].values)) for k in checked) > max_rhat:
        return "rhat"
    return "target"


def _constrained_draws(static: ModelKey, data: GRMData, x: np.ndarray) -> dict[str, np.ndarray]:
    """Flat unconstrained draws (chains, draws, D) -> the model's sites, padding removed."""
    example = _example_params(static)
    offsets, start = {}, 0
    for name in sorted(example):
        n = int(np.size(example[name]))
        offsets[name] = (start, start + n, np.shape(example[name]))
        start += n

    def site(name):
        lo, hi, shape = offsets[name]
        return x[..., lo:hi].reshape(x.shape[:-1] + shape)

    symmetric = bool(static.priors.symmetric)
    c, p = data.num_comparisons, data.num_items
    b_name = "b_half" if symmetric else "b"
    items = np.concatenate([site("log_alpha")[..., None], site(b_name)], axis=-1)
    log_alpha, b = _constrain_items(items, static.priors, data.num_categories)
    draws = {
        "log_alpha": log_alpha[..., :p],
        "alpha": np.exp(log_alpha[..., :p]),
        "b": b[..., :p, :],
    }
    if symmetric:
        draws["b_half"] = b[..., :p, b.shape[-1] - site("b_half").shape[-1] :]
    if data.per_system:
        skill = site("skill")[..., : data.num_systems]
        draws["skill"] = skill
        draws["theta"] = skill[..., data.pair_b] - skill[..., data.pair_a]
    else:
        draws["theta"] = site("theta")[..., :c]
    if data.has_cells:
        draws["tau"] = np.exp(site("tau"))
    if static.priors.lapse:
        draws["lapse"] = 1.0 / (1.0 + np.exp(-site("lapse")))
    return draws


__all__ = [
    "Arrowhead",
    "apply_arrowhead",
    "arrowhead_whitening",
    "colouring",
    "fit_nuts_whitened",
    "gap_index",
    "laplace_hessian",
    "stop_rule",
    "to_model",
    "to_sampler",
    "whitening",
]
