"""NUTS on Laplace-whitened coordinates: the coloured Hessian is exact, the posterior is the model's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest
from jax.flatten_util import ravel_pytree

from adaptive.cells import build_cells
from adaptive.fitting import model_data
from stan_free_models.inference import _dynamic_args, _potential_fn, _static_key, pad_data
from stan_free_models.nuts import fit_nuts
from stan_free_models.simulate import simulate_campaign
from stan_free_models.whitened_nuts import (
    _example_params,
    _mode_vector,
    fit_nuts_whitened,
    laplace_hessian,
    whitening,
)


def campaign_data(seed: int, comparisons: int, prompts: int, parameterization: str = "comparison"):
    camp = simulate_campaign(
        np.random.default_rng(seed), num_comparisons=comparisons, num_prompts=prompts
    )
    cells = build_cells(pl.DataFrame(camp.rows))
    return model_data(
        cells, likelihood="judgment", parameterization=parameterization, cell_effect=True
    )


@pytest.mark.parametrize("parameterization,symmetric", [("comparison", False), ("system", True)])
def test_coloured_hessian_equals_the_dense_hessian(parameterization, symmetric):
    data = campaign_data(3, 4, 12, parameterization)
    padded = pad_data(data)
    static = _static_key(padded, 1.0, 2.0, symmetric, 1.0)
    x0 = _mode_vector(data, static, symmetric_thresholds=symmetric)
    args = _dynamic_args(padded)
    coloured = laplace_hessian(static, x0, args)
    # reference: jax.hessian, one column per parameter
    potential = _potential_fn(static)
    _, unravel = ravel_pytree(_example_params(static))
    dense = np.asarray(
        jax.hessian(lambda x: potential(unravel(x), *args))(jnp.asarray(x0, jnp.float32)),
        np.float64,
    )
    assert coloured.shape == dense.shape
    scale = np.abs(dense).max()
    assert np.max(np.abs(coloured - dense)) < 1e-4 * scale
    # and L L^T inverts it where it is positive definite
    chol = whitening(dense)
    assert np.allclose(chol @ chol.T @ dense, np.eye(len(x0)), atol=1e-3)


@pytest.mark.slow
def test_whitened_and_diagonal_nuts_give_the_same_posterior():
    data = campaign_data(5, 5, 40)
    key = jax.random.PRNGKey(2)
    plain = fit_nuts(data, rng_key=key, num_chains=2, num_warmup=300, num_samples=300)
    white = fit_nuts_whitened(data, rng_key=key, num_chains=2, num_warmup=300, num_samples=300)
    assert white.diagnostics.max_rhat() < 1.05
    assert white.diagnostics.min_ess_bulk() > 50
    assert white.draws["theta"].shape == plain.draws["theta"].shape
    for site in ("theta", "tau"):
        sd = plain.sd(site)
        assert np.all(np.abs(white.mean(site) - plain.mean(site)) < 0.35 * sd), site
        ratio = white.sd(site) / sd
        assert np.all((ratio > 0.75) & (ratio < 1.33)), (site, ratio)
