"""NUTS on Laplace-whitened coordinates: the coloured Hessian is exact, the posterior is the model's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest
from jax.flatten_util import ravel_pytree

from adaptive.core.cells import build_cells
from adaptive.estimation.fitting import model_data
from stan_free_models.inference import _dynamic_args, _potential_fn, _static_key, pad_data
from stan_free_models.model_key import Priors
from stan_free_models.nuts import fit_nuts
from stan_free_models.simulate import simulate_campaign
from stan_free_models.whitened_nuts import (
    _example_params,
    _mode_vector,
    apply_arrowhead,
    arrowhead_whitening,
    fit_nuts_whitened,
    laplace_hessian,
    whitening,
)


def campaign_data(
    seed: int,
    comparisons: int,
    prompts: int,
    parameterization: str = "comparison",
    random_annotators: float = 0.0,
):
    camp = simulate_campaign(
        np.random.default_rng(seed),
        num_comparisons=comparisons,
        num_prompts=prompts,
        random_annotators=random_annotators,
    )
    cells = build_cells(pl.DataFrame(camp.rows))
    return model_data(
        cells, likelihood="judgment", parameterization=parameterization, cell_effect=True
    )


@pytest.mark.parametrize("parameterization,symmetric", [("comparison", False), ("system", True)])
def test_coloured_hessian_equals_the_dense_hessian(parameterization, symmetric):
    data = campaign_data(3, 4, 12, parameterization)
    padded = pad_data(data)
    static = _static_key(padded, Priors(symmetric=symmetric))
    x0 = _mode_vector(data, static)
    args = _dynamic_args(padded)
    coloured = laplace_hessian(static, x0, args)
    # reference: jax.hessian, one column per parameter (compiled: op by op, its hundreds of
    # small programs took longer to compile than the whole rest of the test)
    potential = _potential_fn(static)
    _, unravel = ravel_pytree(_example_params(static))
    dense = np.asarray(
        jax.jit(jax.hessian(lambda x: potential(unravel(x), *args)))(jnp.asarray(x0, jnp.float32)),
        np.float64,
    )
    assert coloured.shape == dense.shape
    scale = np.abs(dense).max()
    assert np.max(np.abs(coloured - dense)) < 1e-4 * scale
    # and L L^T inverts it where it is positive definite
    chol = whitening(dense)
    assert np.allclose(chol @ chol.T @ dense, np.eye(len(x0)), atol=1e-3)
    # the sampler's factor, applied through the prompts' blocks, inverts it too
    assert np.linalg.eigvalsh(coloured).min() > 1e-2  # no floor: the factor is exact
    arrow = arrowhead_whitening(coloured, static)
    lower = arrow.dense()
    assert np.allclose(lower @ lower.T @ dense, np.eye(len(x0)), atol=1e-3)
    # and the traced product is the same map as numpy's
    w = np.random.default_rng(0).normal(size=(3, len(x0)))
    traced = np.stack(
        [np.asarray(apply_arrowhead(jnp.asarray(v, jnp.float32), *arrow.arrays())) for v in w]
    )
    assert np.allclose(traced, arrow.apply(w), atol=1e-4 * np.abs(arrow.apply(w)).max())


def test_arrowhead_whitening_floors_a_prompt_block_that_is_not_positive_definite():
    """A flat or concave prompt block gets curvature ``MIN_CURVATURE``: the factor stays finite."""
    data = campaign_data(3, 4, 12)
    padded = pad_data(data)
    static = _static_key(padded)
    x0 = _mode_vector(data, static)
    hess = laplace_hessian(static, x0, _dynamic_args(padded))
    arrow = arrowhead_whitening(hess, static)
    first = arrow.item_index[0]
    hess[np.ix_(first, first)] = -np.eye(len(first))  # concave in prompt 0's coordinates
    floored = arrowhead_whitening(hess, static)
    lower = floored.dense()
    assert np.all(np.isfinite(lower))
    # prompt 0's block of L L^T is at most 1 / MIN_CURVATURE = 100 per coordinate
    cov = lower @ lower.T
    assert np.all(np.diag(cov)[first] <= 100 * (1 + 1e-6))
    # ... because the floored block is decoupled from the globals
    assert np.all(floored.f[0] == 0.0) and np.any(arrow.f[0] != 0.0)
    # a Schur complement that is not positive definite is floored: the globals'
    # variances in L L^T are then at most 1 / MIN_CURVATURE
    hess = laplace_hessian(static, x0, _dynamic_args(padded))
    glob = arrow.global_index
    hess[np.ix_(glob, glob)] -= 1e3 * np.eye(len(glob))
    schur = arrowhead_whitening(hess, static)
    assert np.all(np.isfinite(schur.dense()))
    assert np.all(np.diag(schur.m @ schur.m.T) <= 100 * (1 + 1e-6))


@pytest.mark.slow
@pytest.mark.parametrize("lapse", [False, True])
def test_whitened_and_diagonal_nuts_give_the_same_posterior(lapse):
    """The default model's NUTS (whitened) against numpyro's diagonal sampler from its default
    start; with the lapse (the default model), on a campaign with 25% random annotators."""
    data = campaign_data(5, 5, 40, random_annotators=0.25 if lapse else 0.0)
    key = jax.random.PRNGKey(2)
    opts = dict(
        rng_key=key, num_chains=2, num_warmup=300, num_samples=300, priors=Priors(lapse=lapse)
    )
    plain = fit_nuts(data, **opts)
    white = fit_nuts_whitened(data, **opts)
    assert white.diagnostics.max_rhat() < 1.05
    assert white.diagnostics.min_ess_bulk() > 50
    assert white.draws["theta"].shape == plain.draws["theta"].shape
    assert ("lapse" in white.draws) == lapse == ("lapse" in plain.draws)
    for site in ("theta", "tau") + (("lapse",) if lapse else ()):
        sd = plain.sd(site)
        assert np.all(np.abs(white.mean(site) - plain.mean(site)) < 0.35 * sd), site
        ratio = white.sd(site) / sd
        assert np.all((ratio > 0.75) & (ratio < 1.33)), (site, ratio)


def test_sampling_until_an_ess_target_continues_the_chains_and_leaves_the_cache_clean():
    """Blocks of draws until bulk and tail ESS and R-hat meet the target, then stop.

    The reference for the stopping figures is ArviZ on the returned draws; a fixed-length
    fit with the same key must give the same draws before and after an extended fit (the
    cached sampler must not keep the extended fit's state and skip its warm-up).
    """
    import arviz as az

    # the coloured Hessian tests' campaign: its mode and Hessian programs are compiled already
    data = campaign_data(3, 4, 12)
    key = jax.random.PRNGKey(2)
    kwargs = dict(num_chains=2, num_warmup=150, num_samples=60)
    before = fit_nuts_whitened(data, rng_key=key, **kwargs)
    assert before.info["blocks"] == 1 and before.info["stopped"] == "fixed"
    long = fit_nuts_whitened(
        data, rng_key=key, min_ess=100, max_rhat=1.05, max_samples=1200, **kwargs
    )
    assert long.info["stopped"] == "target", long.info
    assert long.info["blocks"] >= 2
    theta = long.draws["theta"]
    assert theta.shape[1] == 60 * long.info["blocks"] == long.diagnostics.num_steps
    # the first block is the fixed fit's draws: the blocks continue one chain
    np.testing.assert_array_equal(theta[:, :60], before.draws["theta"])
    for site in ("theta", "log_alpha", "b", "tau"):
        x = np.asarray(long.draws[site]).reshape(theta.shape[:2] + (-1,))
        for method in ("bulk", "tail"):
            assert min(float(az.ess(x[..., i], method=method)) for i in range(x.shape[-1])) >= 100
        assert max(float(az.rhat(x[..., i])) for i in range(x.shape[-1])) <= 1.05
    after = fit_nuts_whitened(data, rng_key=key, **kwargs)
    np.testing.assert_array_equal(after.draws["theta"], before.draws["theta"])
    # an unreachable target stops at max_samples
    capped = fit_nuts_whitened(data, rng_key=key, min_ess=1e6, max_samples=120, **kwargs)
    assert capped.info["stopped"] == "max_samples" and capped.info["blocks"] == 2


def test_an_ess_target_needs_the_whitened_sampler_and_a_positive_number():
    from adaptive.estimation.fitting import FitConfig

    assert FitConfig(method="nuts", min_ess=400).nuts.min_ess == 400
    for bad in (dict(min_ess=0), dict(min_ess=400, sampler="diagonal")):
        with pytest.raises(ValueError, match="min_ess"):
            FitConfig(method="nuts", **bad)


def paper_data(seed: int, comparisons: int, prompts: int):
    camp = simulate_campaign(
        np.random.default_rng(seed), num_comparisons=comparisons, num_prompts=prompts
    )
    cells = build_cells(pl.DataFrame(camp.rows))
    return model_data(cells, likelihood="net", parameterization="comparison", cell_effect=False)


def test_softplus_gaps_are_a_change_of_variables_of_the_same_density():
    """exp(-U_y(y)) = exp(-U_x(x(y))) |dx/dy|: the log-Jacobian against finite differences."""
    from stan_free_models.whitened_nuts import _flat_potential, gap_index, to_model, to_sampler

    data = paper_data(1, 4, 12)
    padded = pad_data(data)
    static = _static_key(padded)
    index = gap_index(static)
    params = _example_params(static)
    assert len(index) == params["b"][:, 1:].size and len(index) > 0
    # the gap coordinates are b's columns 1.. in the flat layout
    flat, unravel = ravel_pytree(params)
    marked = np.zeros(len(flat))
    marked[index] = 1.0
    assert np.all(np.asarray(unravel(jnp.asarray(marked))["b"])[:, 1:] == 1.0)
    assert np.sum(marked) == np.sum(np.asarray(unravel(jnp.asarray(marked))["b"]))
    x = _mode_vector(data, static)
    y = to_sampler(x, static, "softplus")
    assert np.allclose(to_model(y, static, "softplus"), x, atol=1e-9)
    # extreme gaps: tiny (log gap -30) and wide (log gap 3) survive the round trip
    x_ext = x.copy()
    x_ext[index[0]], x_ext[index[1]] = -30.0, 3.0
    assert np.allclose(to_model(to_sampler(x_ext, static, "softplus"), static, "softplus"), x_ext)
    args = _dynamic_args(padded)
    # compiled once each (op by op, the potential is dozens of small programs)
    u_log = jax.jit(_flat_potential(static, "log"))
    u_soft = jax.jit(_flat_potential(static, "softplus"))
    y32 = jnp.asarray(y, jnp.float32)
    # log|dx/dy| by central differences of the map, one gap coordinate at a time
    eps = 1e-4
    log_jac = 0.0
    for i in index:
        hi, lo = y.copy(), y.copy()
        hi[i] += eps
        lo[i] -= eps
        log_jac += np.log(
            (to_model(hi, static, "softplus")[i] - to_model(lo, static, "softplus")[i]) / (2 * eps)
        )
    expected = float(u_log(jnp.asarray(x, jnp.float32), args)) - log_jac
    assert abs(float(u_soft(y32, args)) - expected) < 1e-3 * max(1.0, abs(expected))
    # symmetric thresholds have no free gaps: the sampler's coordinates are the model's
    sym = _static_key(padded, Priors(symmetric=True))
    assert len(gap_index(sym)) == 0


@pytest.mark.slow
def test_softplus_gaps_sample_the_paper_model_as_the_diagonal_sampler_does():
    data = paper_data(5, 5, 40)
    key = jax.random.PRNGKey(4)
    plain = fit_nuts(data, rng_key=key, num_chains=2, num_warmup=400, num_samples=400)
    soft = fit_nuts_whitened(
        data, rng_key=key, num_chains=2, num_warmup=300, num_samples=400, gaps="softplus"
    )
    assert soft.info["gaps"] == "softplus"
    assert soft.diagnostics.max_rhat() < 1.05
    for site in ("theta", "b", "log_alpha"):
        sd = plain.sd(site)
        assert np.all(np.abs(soft.mean(site) - plain.mean(site)) < 0.35 * sd), site
        ratio = soft.sd(site) / sd
        assert np.all((ratio > 0.7) & (ratio < 1.4)), (site, ratio.min(), ratio.max())
    with pytest.raises(ValueError, match="gaps"):
        fit_nuts_whitened(data, rng_key=key, gaps="cube")


def test_softplus_coordinates_at_the_extremes():
    """The traced map and numpy's agree everywhere, its gradient is right at the switch to
    the linear branch, and nothing is infinite for any float32 y."""
    from stan_free_models.whitened_nuts import SOFTPLUS_LINEAR_BELOW, _log_softplus

    ys = np.array([-1e30, -746.0, -100.0, -20.5, -20.0, -19.5, -1.0, 0.0, 3.0, 88.0, 1e30])
    out = np.asarray(_log_softplus(jnp.asarray(ys, jnp.float32)))
    assert np.all(np.isfinite(out))
    # reference: log(log1p(exp(y))) in float64 where it is representable
    mid = (ys > -700) & (ys < 700)
    ref = np.log(np.logaddexp(0.0, ys[mid]))
    assert np.allclose(out[mid], ref, rtol=1e-5, atol=1e-6)
    grad = jax.vmap(jax.grad(_log_softplus))(jnp.asarray(ys, jnp.float32))
    # d/dy log(softplus(y)) = sigmoid(y) / softplus(y): 1 far below, 0 far above
    ref_grad = 1.0 / (1.0 + np.exp(-ys[mid])) / np.logaddexp(0.0, ys[mid])
    assert np.allclose(np.asarray(grad)[mid], ref_grad, rtol=1e-3, atol=1e-6)
    assert abs(float(jax.grad(_log_softplus)(jnp.float32(SOFTPLUS_LINEAR_BELOW))) - 1.0) < 1e-6
    # numpy's maps agree with the traced one and invert each other
    from stan_free_models.whitened_nuts import gap_index, to_model, to_sampler

    data = paper_data(1, 4, 12)
    static = _static_key(pad_data(data))
    index = gap_index(static)
    y = np.zeros(len(_mode_vector(data, static)))
    y[index[: len(ys)]] = ys[: len(index)]
    x = to_model(y, static, "softplus")
    assert np.all(np.isfinite(x))
    traced = np.asarray(_log_softplus(jnp.asarray(y[index], jnp.float32)), np.float64)
    finite = np.abs(y[index]) < 1e29
    assert np.allclose(x[index][finite], traced[finite], rtol=1e-5, atol=1e-5)
    back = to_sampler(x, static, "softplus")
    rt = np.abs(y[index]) < 700
    assert np.allclose(back[index][rt], y[index][rt], rtol=1e-9, atol=1e-6)


def test_the_sampler_in_softplus_coordinates_has_its_own_hessian_and_compiled_sampler():
    """The coloured Hessian of the softplus potential against jax.hessian (7 categories),
    and the cache keeps the two coordinate systems' samplers apart."""
    from stan_free_models.engine import NutsSettings, cached_mcmc
    from stan_free_models.whitened_nuts import (
        WHITENED_SPEC,
        WhitenedKey,
        _flat_potential,
        to_sampler,
    )

    data = paper_data(1, 4, 12)  # the other softplus tests' data: their mode fit is compiled
    padded = pad_data(data)
    static = _static_key(padded)
    args = _dynamic_args(padded)
    y0 = to_sampler(_mode_vector(data, static), static, "softplus")
    coloured = laplace_hessian(static, y0, args, "softplus")
    flat = _flat_potential(static, "softplus")
    dense = np.asarray(
        jax.jit(jax.hessian(lambda y: flat(y, args)))(jnp.asarray(y0, jnp.float32)), np.float64
    )
    assert np.max(np.abs(coloured - dense)) < 1e-4 * np.abs(dense).max()
    # the log-coordinates Hessian at the same point is a different matrix
    assert np.max(np.abs(laplace_hessian(static, y0, args, "log") - coloured)) > 1e-2
    settings = NutsSettings(num_chains=1, num_warmup=5, num_samples=5)
    soft = cached_mcmc(WHITENED_SPEC, WhitenedKey(static, "softplus"), settings)
    log = cached_mcmc(WHITENED_SPEC, WhitenedKey(static, "log"), settings)
    assert soft is not log
    assert cached_mcmc(WHITENED_SPEC, WhitenedKey(static, "softplus"), settings) is soft
    key = jax.random.PRNGKey(0)
    fits = {
        g: fit_nuts_whitened(
            data, rng_key=key, num_chains=2, num_warmup=100, num_samples=30, gaps=g
        )
        for g in ("log", "softplus")
    }
    assert {g: f.info["gaps"] for g, f in fits.items()} == {"log": "log", "softplus": "softplus"}
    assert not np.allclose(fits["log"].draws["theta"], fits["softplus"].draws["theta"])
    # symmetric thresholds have no free gaps: the model's coordinates, and it says so (on
    # the symmetric coloured Hessian test's campaign, whose mode and Hessian are compiled)
    sym = fit_nuts_whitened(
        campaign_data(3, 4, 12, "system"),
        rng_key=key,
        num_chains=2,
        num_warmup=100,
        num_samples=30,
        priors=Priors(symmetric=True),
    )
    assert sym.info["gaps"] == "log"
