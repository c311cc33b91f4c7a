"""The no-cell potential's Hessian blocks and cluster scores from per-observation
derivatives equal the dense Hessian and the autodiff scores of the potential itself."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stan_free_models.grm_potential import grm_hessian_blocks, grm_scores
from stan_free_models.inference import (
    GRMData,
    _dynamic_args,
    _potential_fn,
    _split_params,
    _static_key,
    default_init,
    pad_data,
)
from stan_free_models.model_key import Priors
from stan_free_models.robust import _autodiff_scores

#: the 7-category variants (the compile costs the default suite most) run in the slow suite
VARIANTS = [
    (3, False, False),
    (3, True, True),
    pytest.param(7, False, False, marks=pytest.mark.slow),
    pytest.param(7, False, True, marks=pytest.mark.slow),
]


def _problem(num_categories: int, per_system: bool, symmetric: bool):
    rng = np.random.default_rng(num_categories + 10 * per_system + 100 * symmetric)
    n, c, p = 90, 5, 12
    data = GRMData(
        comparison=rng.integers(0, c, n),
        item=rng.integers(0, p, n),
        y=rng.integers(0, num_categories, n),
        weight=rng.choice([1.0, 0.5, 3.0], n),
        num_comparisons=c,
        num_items=p,
        num_categories=num_categories,
    )
    if per_system:
        pairs = np.array([(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)])
        data = GRMData(
            **{**data.__dict__, "pair_a": pairs[:, 0], "pair_b": pairs[:, 1], "num_systems": 4}
        )
    padded = pad_data(data)
    priors = Priors(alpha_scale=1.3, b_scale=2.0, theta_scale=1.5, symmetric=symmetric)
    static = _static_key(padded, priors)
    x0 = default_init(padded, priors)
    g = jnp.asarray(x0["global"] + rng.normal(0, 0.5, x0["global"].shape), jnp.float32)
    items = jnp.asarray(x0["items"] + rng.normal(0, 0.3, x0["items"].shape), jnp.float32)
    potential = _potential_fn(static)
    args = _dynamic_args(padded)

    def objective(a, b, arguments=args):
        return potential(_split_params(static, a, b), *arguments)

    return static, g, items, args, objective


@pytest.mark.parametrize("num_categories, per_system, symmetric", VARIANTS)
def test_the_blocks_are_the_dense_hessians(num_categories, per_system, symmetric):
    static, g, items, args, objective = _problem(num_categories, per_system, symmetric)
    h_gg, h_ig, d_blocks = grm_hessian_blocks(static, g, items, args)
    flat = lambda v: objective(v[: g.size], v[g.size :].reshape(items.shape))  # noqa: E731
    dense = np.asarray(jax.hessian(flat)(jnp.concatenate([g, items.ravel()])))
    num_g, width = g.size, items.shape[1]
    np.testing.assert_allclose(h_gg, dense[:num_g, :num_g], rtol=1e-4, atol=1e-4)
    cross = dense[:num_g, num_g:].reshape(num_g, *items.shape)
    np.testing.assert_allclose(h_ig, cross, rtol=1e-4, atol=1e-4)
    for j in range(items.shape[0]):
        block = dense[num_g + j * width : num_g + (j + 1) * width][:, num_g:]
        np.testing.assert_allclose(d_blocks[j], block[:, j * width : (j + 1) * width], atol=1e-4)
        # nothing couples two items but the global block
        others = np.delete(block, np.s_[j * width : (j + 1) * width], axis=1)
        assert np.all(others == 0.0)


@pytest.mark.parametrize("num_categories, per_system, symmetric", VARIANTS)
def test_the_scores_are_the_potentials_own(num_categories, per_system, symmetric):
    static, g, items, args, objective = _problem(num_categories, per_system, symmetric)
    rng = np.random.default_rng(7)
    xg = jnp.asarray(rng.normal(size=g.shape), jnp.float32)
    xi = jnp.asarray(rng.normal(size=items.shape), jnp.float32)
    score, prior = grm_scores(static, g, items, args)
    auto_score, auto_prior = _autodiff_scores(objective, g, items, args)
    np.testing.assert_allclose(score(xg, xi), auto_score(xg, xi), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(prior(xg, xi), auto_prior(xg, xi), rtol=1e-4)


@pytest.mark.parametrize("num_categories, per_system, symmetric", VARIANTS)
def test_category_counts_give_the_judgments_potential_blocks_and_cluster_scores(
    num_categories, per_system, symmetric
):
    """Merged into per-(cluster, comparison, item) category counts, the observations give
    the same potential, gradient, Hessian blocks and cluster scores as one by one."""
    from stan_free_models.inference import collapse_observations

    static, g, items, args, objective = _problem(num_categories, per_system, symmetric)
    rng = np.random.default_rng(3)
    num_real = 90
    cluster = np.asarray(args[0][:num_real]) % 3  # units of several cells each
    data = GRMData(
        comparison=np.asarray(args[0][:num_real]),
        item=np.asarray(args[1][:num_real]),
        y=np.asarray(args[2][:num_real]),
        weight=np.asarray(args[3][:num_real]),
        num_comparisons=5,
        num_items=12,
        num_categories=num_categories,
    )
    if per_system:
        pairs = np.array([(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)])
        data = GRMData(
            **{**data.__dict__, "pair_a": pairs[:, 0], "pair_b": pairs[:, 1], "num_systems": 4}
        )
    merged, unit = collapse_observations(data, cluster)
    assert merged.num_obs < data.num_obs and merged.judgments == num_real
    np.testing.assert_allclose(merged.weight.sum(), data.weight.sum(), rtol=1e-6)
    padded = pad_data(merged)
    assert _static_key(padded, static.priors)._replace(num_obs=static.num_obs) == static
    m_args = _dynamic_args(padded)
    m_objective = lambda a, b: _potential_fn(static._replace(num_obs=padded.num_obs))(  # noqa: E731
        _split_params(static, a, b), *m_args
    )
    np.testing.assert_allclose(m_objective(g, items), objective(g, items), rtol=1e-5)
    grads = jax.grad(m_objective, argnums=(0, 1))(g, items)
    for got, want in zip(grads, jax.grad(objective, argnums=(0, 1))(g, items)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    m_static = static._replace(num_obs=padded.num_obs)
    for got, want in zip(
        grm_hessian_blocks(m_static, g, items, m_args), grm_hessian_blocks(static, g, items, args)
    ):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    xg = jnp.asarray(rng.normal(size=g.shape), jnp.float32)
    xi = jnp.asarray(rng.normal(size=items.shape), jnp.float32)
    merged_score = grm_scores(m_static, g, items, m_args)[0](xg, xi)[: merged.num_obs]
    score = grm_scores(static, g, items, args)[0](xg, xi)[:num_real]
    np.testing.assert_allclose(
        np.bincount(unit, weights=np.asarray(merged_score, np.float64), minlength=3),
        np.bincount(cluster, weights=np.asarray(score, np.float64), minlength=3),
        rtol=1e-4,
        atol=1e-4,
    )
