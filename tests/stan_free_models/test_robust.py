"""Cluster-robust abilities and the model-assisted net preference, against references."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest

from adaptive.core.cells import build_cells
from adaptive.estimation.fitting import cell_of_observations, model_data, preset_config
from adaptive.estimation.pipeline import analyze
from adaptive.estimation.significance import compare
from adaptive.stopping.evidence import net_preference
from stan_free_models.fit_settings import LaplaceSettings
from stan_free_models.graded_response import graded_log_prob
from stan_free_models.inference import _dynamic_args, _global_start, _static_key, pad_data
from stan_free_models.inference import default_init as start_of
from stan_free_models.laplace import _compiled_laplace, fit_laplace
from stan_free_models.net_estimate import cell_moments, estimate_net
from stan_free_models.robust import robust_moments
from stan_free_models.simulate import (
    expected_signed,
    simulate_campaign,
    simulate_net_split_campaign,
)


def _split_cells(seed: int = 0, num_comparisons: int = 3, num_prompts: int = 12):
    camp = simulate_net_split_campaign(
        np.random.default_rng(seed), num_comparisons=num_comparisons, num_prompts=num_prompts
    )
    return camp, build_cells(pl.DataFrame(camp.rows))


def _dense_sandwich(static, padded, g, items, num_real_obs, cluster):
    """H^-1 J H^-1 with a dense Hessian and per-cell scores of a likelihood written apart."""
    args = _dynamic_args(padded)
    from stan_free_models.inference import _potential_fn, _split_params

    potential = _potential_fn(static)
    size_g = g.shape[0]

    def unflat(x):
        return x[:size_g], x[size_g:].reshape(items.shape)

    def u(x):
        gg, ii = unflat(x)
        return potential(_split_params(static, gg, ii), *args)

    x0 = jnp.concatenate([g, items.ravel()])
    hess = np.asarray(jax.hessian(u)(x0), np.float64)
    comparison = np.asarray(padded.comparison[:num_real_obs])
    item = np.asarray(padded.item[:num_real_obs])
    y = np.asarray(padded.y[:num_real_obs])

    def log_lik(x):
        gg, ii = unflat(x)
        alpha = jnp.exp(ii[:, 0])
        b = jnp.cumsum(jnp.concatenate([ii[:, 1:2], jnp.exp(ii[:, 2:])], axis=1), axis=1)
        cum = alpha[item][:, None] * (gg[comparison][:, None] - b[item])
        return graded_log_prob(jnp.asarray(y), cum)

    per_obs = np.asarray(jax.jacrev(log_lik)(x0), np.float64)  # (N, D)
    scores = np.zeros((int(cluster.max()) + 1, per_obs.shape[1]))
    np.add.at(scores, cluster, per_obs)
    # the priors' curvature: the whole Hessian less the likelihood's (the negative
    # Hessian of the summed log-likelihood written above)
    lik_hess = -np.asarray(jax.hessian(lambda x: log_lik(x).sum())(x0), np.float64)
    prior_hess = hess - lik_hess
    cov = np.linalg.inv(0.5 * (hess + hess.T))
    return cov, cov @ (scores.T @ scores + prior_hess) @ cov


@pytest.mark.slow
def test_the_sandwich_of_the_block_solve_matches_a_dense_one():
    """Per-comparison abilities: the model variance is diag(H^-1) of a dense Hessian and the
    robust one diag(H^-1 (J + H_prior) H^-1) with J from per-cell scores of an independently
    written likelihood and H_prior the Hessian less that likelihood's (no weight trick, no
    block algebra)."""
    _, cells = _split_cells()
    data = model_data(cells, likelihood="judgment")
    padded = pad_data(data)
    static = _static_key(padded)
    x0 = start_of(padded)
    args = _dynamic_args(padded)
    fit = _compiled_laplace(static, LaplaceSettings(num_draws=4), False, True)
    out = jax.device_get(
        fit(
            jax.random.PRNGKey(0),
            jnp.asarray(_global_start(x0)),
            jnp.asarray(x0["items"]),
            args,
            jnp.asarray(1e-4, jnp.float32),
            jnp.asarray(0.0, jnp.float32),
        )
    )
    cluster = cell_of_observations(cells, "judgment")
    c = data.num_comparisons
    moments = robust_moments(static, args, out, cluster, c)
    cov, sandwich = _dense_sandwich(
        static, padded, jnp.asarray(out["g"]), jnp.asarray(out["items"]), data.num_obs, cluster
    )
    np.testing.assert_allclose(moments.global_var, np.diag(cov)[:c], rtol=0.02)
    np.testing.assert_allclose(moments.global_robust_var, np.diag(sandwich)[:c], rtol=0.03)


def test_the_fast_fit_widens_abilities_to_the_larger_sd_and_never_narrows_them():
    _, cells = _split_cells(seed=3, num_comparisons=4, num_prompts=30)
    data = model_data(cells, likelihood="judgment")
    cluster = cell_of_observations(cells, "judgment")
    key = jax.random.PRNGKey(1)
    plain = fit_laplace(data, rng_key=key, num_draws=400, exact_items=False, refine_sweeps=0)
    robust = fit_laplace(
        data,
        rng_key=key,
        num_draws=400,
        exact_items=False,
        refine_sweeps=0,
        robust_cluster=cluster,
    )
    widen = robust.info["robust_widen"]
    assert widen.shape == (data.num_comparisons,) and np.all(widen >= 1.0)
    np.testing.assert_allclose(robust.sd("theta") / plain.sd("theta"), widen, rtol=1e-4)
    # the same draws spread about the same mode
    mode = plain.info["mode_values"]["theta"]
    np.testing.assert_allclose(robust.info["mode_values"]["theta"], mode, atol=1e-6)
    np.testing.assert_allclose(
        robust.mean("theta") - mode, (plain.mean("theta") - mode) * widen, atol=1e-4
    )
    # on a split net rating the judgments of a cell move together: some ability widens
    assert widen.max() > 1.05
    with pytest.raises(ValueError, match="cluster-robust intervals need"):
        fit_laplace(data, rng_key=key, num_draws=10, exact_items=True, robust_cluster=cluster)


def test_cell_moments_match_the_simulators_expected_judgment_and_sum_to_one():
    rng = np.random.default_rng(0)
    theta, alpha = rng.normal(0, 2, 50), np.exp(rng.normal(0, 1, 50))
    b3 = np.sort(rng.normal(0, 2, (50, 2)), axis=1)
    mean, var = cell_moments(theta, alpha, b3)
    np.testing.assert_allclose(mean, expected_signed(theta, alpha, b3), atol=1e-12)
    # var = E[s^2] - mean^2 with E[s^2] = P(A) + P(B) for -1, 0, +1
    p_b = 1 / (1 + np.exp(-alpha * (theta - b3[:, 1])))
    p_a = 1 - 1 / (1 + np.exp(-alpha * (theta - b3[:, 0])))
    np.testing.assert_allclose(var, p_a + p_b - mean**2, atol=1e-12)
    # seven categories: the net rating of three over 3, E[u] / 3 = (sum_c P(y >= c) - 3) / 3
    b7 = np.sort(rng.normal(0, 2, (50, 6)), axis=1)
    cum = 1 / (1 + np.exp(-alpha[:, None] * (theta[:, None] - b7)))
    np.testing.assert_allclose(cell_moments(theta, alpha, b7)[0], (cum.sum(1) - 3) / 3, atol=1e-12)


def _cells_of(seed: int, num_cells: int = 40):
    rng = np.random.default_rng(seed)
    comp = rng.integers(0, 3, num_cells)
    item = rng.integers(0, 5, num_cells)
    count = rng.integers(1, 4, num_cells).astype(float)
    mean = rng.choice([-1.0, 0.0, 1.0], num_cells)
    return comp, item, mean, count


def test_the_estimate_is_the_comparisons_own_net_preference_over_its_prompts():
    comp, item, mean, count = _cells_of(0)
    draws = np.zeros((5, 3)), np.ones((5, 5)), np.tile([-0.5, 0.5], (5, 5, 1))
    est = estimate_net(comp, item, mean, count, 3, *draws, point=None)
    # each cell one prompt: the raw prompt-level mean of adaptive.stopping.evidence
    raw = net_preference(comp, np.arange(len(comp)), mean, 3)
    np.testing.assert_allclose(est.delta, raw.mean, atol=1e-12)
    np.testing.assert_array_equal(est.num_cells, np.bincount(comp, minlength=3))


def test_without_posterior_spread_the_sd_is_the_residuals_and_spread_only_widens_it():
    comp, item, mean, count = _cells_of(1)
    theta, alpha = np.array([0.3, -0.2, 0.0]), np.array([1.0, 0.5, 2.0, 1.5, 0.8])
    b = np.tile([-0.7, 0.9], (5, 1))
    still = estimate_net(comp, item, mean, count, 3, theta[None], alpha[None], b[None])
    m, _ = cell_moments(theta[comp], alpha[item], b[item])
    by_hand = np.sqrt(np.bincount(comp, weights=(mean - m) ** 2)) / np.bincount(comp)
    np.testing.assert_allclose(still.sd, by_hand, atol=1e-12)
    rng = np.random.default_rng(2)
    spread = estimate_net(
        comp,
        item,
        mean,
        count,
        3,
        theta + rng.normal(0, 0.3, (200, 3)),
        alpha * np.exp(rng.normal(0, 0.2, (200, 5))),
        np.broadcast_to(b, (200, 5, 2)),
        point=(theta, alpha, b),
    )
    assert np.all(spread.sd >= still.sd) and np.any(spread.sd > still.sd)
    # the model's own Δ is the plug-in at the point, its interval around it
    np.testing.assert_allclose(spread.model_delta, np.bincount(comp, weights=m) / np.bincount(comp))
    assert np.all(
        (spread.model_low <= spread.model_delta) & (spread.model_delta <= spread.model_high)
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "simulate",
    [
        lambda rng: simulate_net_split_campaign(rng, num_comparisons=10, num_prompts=60),
        lambda rng: simulate_campaign(
            rng, num_comparisons=10, num_prompts=60, cell_sd=0.5, random_annotators=0.2
        ),
    ],
    ids=["net-split", "varied"],
)
def test_the_default_covers_the_true_net_preference_where_judgments_of_a_cell_are_dependent(
    simulate,
):
    """4 campaigns, 40 comparisons: the default's Δ interval covers the truth over the judged
    prompts, while the model's own interval (the joint mode's) is narrower; the estimate is
    each comparison's own observed net preference."""
    hits, model_hits = [], []
    for seed in range(4):
        camp = simulate(np.random.default_rng(seed))
        result = analyze(
            pl.DataFrame(camp.rows),
            config=preset_config("default", method="fast", num_draws=400),
            group_redundant=False,
        )
        rows = compare(result.posterior, result.cells)
        truth = camp.delta[
            [camp.pairs.index(_pair(camp, n)) for n in result.cells.comparison_names()]
        ]
        for r, t in zip(rows, truth):
            assert r["net_preference"] == pytest.approx(r["observed_net"], abs=1e-9)
            hits.append(r["net_ci_low"] <= t <= r["net_ci_high"])
            model_hits.append(r["model_net_ci_low"] <= t <= r["model_net_ci_high"])
    # 40 intervals at 95%: fewer than 34 hits has probability < 0.01
    assert np.sum(hits) >= 34
    assert np.mean(hits) >= np.mean(model_hits)


def _pair(camp, names):
    a, b = names
    return (camp.systems.index(a), camp.systems.index(b))


def test_widening_a_sampled_posterior_keeps_its_centre_and_recomputes_theta_from_skills():
    from types import SimpleNamespace

    from adaptive.estimation.fitting import widen_abilities
    from stan_free_models.posterior import Diagnostics, Posterior

    rng = np.random.default_rng(0)
    skill = rng.normal(0, 1, (2, 300, 3))
    pairs = SimpleNamespace(pair_a=np.array([0, 0, 1]), pair_b=np.array([1, 2, 2]))
    post = Posterior(
        draws={"skill": skill, "theta": skill[..., pairs.pair_b] - skill[..., pairs.pair_a]},
        method="nuts",
        diagnostics=Diagnostics(),
    )
    widen = np.array([1.0, 2.0, 1.5])
    wide = widen_abilities(post, widen, pairs)
    np.testing.assert_allclose(wide.sd("skill") / post.sd("skill"), widen, rtol=1e-12)
    np.testing.assert_allclose(wide.mean("skill"), post.mean("skill"), atol=1e-12)
    s = wide.draws["skill"]
    np.testing.assert_allclose(wide.draws["theta"], s[..., [1, 2, 2]] - s[..., [0, 0, 1]])
    assert np.array_equal(wide.info["robust_widen"], widen)
