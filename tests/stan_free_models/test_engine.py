"""The inference engine: one L-BFGS loop, one Laplace step, one sampler cache for every model."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stan_free_models import bt_inference, engine, inference, laplace, nuts
from stan_free_models.bt_inference import BT_SPEC, BTData
from stan_free_models.engine import NutsSettings
from stan_free_models.inference import GRM_SPEC
from stan_free_models.simulate import draw_truth, simulate_net_ratings

KEY = jax.random.PRNGKey(3)


def bt_data(seed: int = 0, n: int = 120, players: int = 5) -> BTData:
    rng = np.random.default_rng(seed)
    first = rng.integers(0, players, n)
    second = (first + rng.integers(1, players, n)) % players
    return BTData(
        first=first,
        second=second,
        group=np.zeros(n, np.int64),
        y=rng.choice([0, 2], n),
        weight=np.ones(n),
        num_players=players,
    )


def grm_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    return simulate_net_ratings(rng, draw_truth(rng, 4, 20, 7))


def test_every_model_shares_one_lock_and_one_counter():
    assert inference.MODEL_LOCK is engine.MODEL_LOCK
    assert inference.TRACE_COUNTS is engine.TRACE_COUNTS is bt_inference.TRACE_COUNTS
    assert nuts.new_mcmc is engine.new_mcmc and nuts.sample_mcmc is engine.sample_mcmc


def test_lbfgs_and_the_dense_laplace_step_are_exact_on_a_gaussian():
    a = jnp.array([[3.0, 1.0], [1.0, 2.0]])
    centre = jnp.array([0.5, -1.0])

    def fun(x):
        return 0.5 * (x - centre) @ a @ (x - centre)

    mode, steps = jax.jit(
        lambda x0: engine.lbfgs_minimise(fun, x0, max_iter=50, tol=jnp.float32(1e-6))
    )(jnp.zeros(2))
    np.testing.assert_allclose(mode, centre, atol=1e-5)
    assert 0 < int(steps) < 50
    draws, chol = engine.gaussian_draws(KEY, fun, mode, 20000)
    np.testing.assert_allclose(chol @ chol.T, a, atol=1e-5)
    np.testing.assert_allclose(np.cov(np.asarray(draws).T), np.linalg.inv(a), atol=0.02)


def _laplace_traces(fit, data, **settings) -> int:
    before = engine.TRACE_COUNTS["laplace"]
    fit(data, rng_key=KEY, num_draws=16, **settings)
    return engine.TRACE_COUNTS["laplace"] - before


@pytest.mark.parametrize("model", ["bradley_terry", "graded_response"])
def test_compiled_fast_path_is_keyed_the_same_way_for_every_model(model):
    """Same shapes: no recompile; a new tolerance (a runtime value): none either; a new
    iteration limit (static): one. Bradley-Terry used to recompile for every tolerance."""
    if model == "bradley_terry":
        fit, data, extra = bt_inference.fit_laplace, bt_data(), {}
    else:
        fit, data = laplace.fit_laplace, grm_data()
        extra = {"exact_items": False}
    _laplace_traces(fit, data, max_iter=97, **extra)  # compiles (or already has)
    assert _laplace_traces(fit, data, max_iter=97, **extra) == 0
    assert _laplace_traces(fit, data, max_iter=97, tol=0.5, **extra) == 0
    assert _laplace_traces(fit, data, max_iter=98, tol=0.5, **extra) == 1


def test_sampler_cache_builds_once_per_model_shape_and_settings():
    static_bt = bt_inference._static_key(bt_inference.pad_data(bt_data()), 1.0, 1.0)
    static_grm = inference._static_key(inference.pad_data(grm_data()))
    settings = NutsSettings(num_chains=1, num_warmup=10, num_samples=10)
    before = engine.TRACE_COUNTS["nuts"]
    bt_mcmc = engine.cached_mcmc(BT_SPEC, static_bt, settings)
    grm_mcmc = engine.cached_mcmc(GRM_SPEC, static_grm, settings)
    assert engine.TRACE_COUNTS["nuts"] - before == 2
    assert (
        engine.cached_mcmc(
            BT_SPEC, static_bt, NutsSettings(num_chains=1, num_warmup=10, num_samples=10)
        )
        is bt_mcmc
    )
    assert engine.cached_mcmc(GRM_SPEC, static_grm, settings) is grm_mcmc
    assert engine.TRACE_COUNTS["nuts"] - before == 2
    for spec, static in ((BT_SPEC, static_bt), (GRM_SPEC, static_grm)):
        new = NutsSettings(num_chains=1, num_warmup=10, num_samples=10, target_accept=0.9)
        assert engine.cached_mcmc(spec, static, new) is not engine.cached_mcmc(
            spec, static, settings
        )
    assert engine.TRACE_COUNTS["nuts"] - before == 4


def test_nuts_reuses_its_sampler_for_the_same_shapes():
    data = bt_data(1)
    run = dict(rng_key=KEY, num_chains=1, num_warmup=30, num_samples=30)
    first = bt_inference.fit_nuts(data, **run)
    before = engine.TRACE_COUNTS["nuts"]
    again = bt_inference.fit_nuts(data, **run)
    assert engine.TRACE_COUNTS["nuts"] == before
    np.testing.assert_array_equal(first.draws["ability"], again.draws["ability"])
    bt_inference.fit_nuts(data, target_accept=0.9, **run)
    assert engine.TRACE_COUNTS["nuts"] == before + 1


@pytest.mark.parametrize(
    "fit",
    [bt_inference.fit_laplace, bt_inference.fit_nuts, nuts.fit_nuts],
    ids=lambda f: f.__module__,
)
def test_fits_require_a_key(fit):
    param = inspect.signature(fit).parameters["rng_key"]
    assert param.kind is inspect.Parameter.KEYWORD_ONLY
    assert param.default is inspect.Parameter.empty
