"""LOCO folds: the held-out SE computation, determinism, and the shape of the results."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive.prompts.loco import LocoConfig, heldout_se, run_fold, summarize_folds
from stan_free_models.information import information_matrix
from tests.factories import TINY_LOCO, tiny_loco_data, two_tier_data


def test_heldout_se_without_prompts_is_the_prior_sd():
    alpha, b = np.ones(3), np.tile([-1.0, 0.0, 1.0], (3, 1))
    se = heldout_se(np.zeros(3, int), alpha, b, np.zeros((1, 3), bool))
    assert se[0] == pytest.approx(1.0, abs=1e-3)


def test_heldout_se_matches_direct_quadrature_and_laplace():
    rng = np.random.default_rng(0)
    alpha = np.exp(rng.normal(0, 0.5, 40))
    b = np.sort(rng.normal(0, 1.5, (40, 6)), axis=1)
    theta_true = 0.8
    cum = 1 / (1 + np.exp(-alpha[:, None] * (theta_true - b)))
    y = (rng.uniform(size=40)[:, None] < cum).sum(axis=1)
    mask = np.zeros((2, 40), bool)
    mask[0, :10] = True
    mask[1] = True
    se = heldout_se(y, alpha, b, mask)
    # independent computation: a fine float64 grid with numpy only
    grid = np.linspace(-10, 10, 20001)
    cumg = 1 / (1 + np.exp(-alpha[None, :, None] * (grid[:, None, None] - b[None])))
    upper = np.concatenate([np.ones(cumg.shape[:2] + (1,)), cumg], axis=-1)
    lower = np.concatenate([cumg, np.zeros(cumg.shape[:2] + (1,))], axis=-1)
    probs = np.take_along_axis(upper - lower, y[None, :, None], axis=-1)[..., 0]
    for row in range(2):
        logp = np.log(probs[:, mask[row]]).sum(axis=1) - 0.5 * grid**2
        w = np.exp(logp - logp.max())
        w /= w.sum()
        m = w @ grid
        sd = np.sqrt(w @ (grid - m) ** 2)
        assert se[row] == pytest.approx(sd, rel=1e-3)
    # and, with 40 prompts, close to the Fisher-information approximation at the posterior mode
    info = np.asarray(information_matrix(np.array([theta_true]), alpha, b))[0]
    assert se[1] == pytest.approx(1 / np.sqrt(1 + info.sum()), rel=0.15)
    assert se[1] < se[0]


def test_fold_is_deterministic_and_shaped():
    data = tiny_loco_data(num_prompts=10)
    a = run_fold(data, TINY_LOCO, 2)
    b = run_fold(data, TINY_LOCO, 2)
    for policy in TINY_LOCO.policies:
        np.testing.assert_array_equal(a.se[policy], b.se[policy])
    assert a.se["random"].shape == (3, 3)
    assert a.se["prompt"].shape == (1, 3)
    # k beyond the available prompts means all of them: the full-set SE
    assert a.se["random"][:, 2] == pytest.approx(np.full(3, a.se_full))
    assert a.se["prompt"][0, 2] == pytest.approx(a.se_full)  # all prompts, no redundant ones here
    # the informed order puts the most informative available prompts first
    assert len(a.order["prompt"]) == a.num_available
    assert (
        a.se["random"][0, 0] != a.se["random"][1, 0] or a.se["random"][1, 0] != a.se["random"][2, 0]
    )
    assert a.num_available == int(data.rating_mask[:, 2].sum())


def test_summary_rows():
    data = tiny_loco_data(num_prompts=10)
    results = [run_fold(data, TINY_LOCO, f) for f in (0, 3)]
    rows = summarize_folds(results, TINY_LOCO)
    assert rows[0]["policy"] == "full" and rows[0]["se_ratio"] == 1.0
    keys = {"policy", "k", "se_mean", "se_sd", "n_folds"}
    assert all(keys <= set(r) for r in rows)
    assert len(rows) == 1 + len(TINY_LOCO.policies) * len(TINY_LOCO.grid)
    rand = [r for r in rows if r["policy"] == "random"]
    assert rand[0]["se_mean"] == pytest.approx(
        np.mean([r.se["random"][:, 0].mean() for r in results])
    )
    assert all(r["n_folds"] == 2 for r in rows)


@pytest.mark.slow
def test_chateval_ncm_informed_selection_beats_random():
    """Figure 2 on the bundled data: all 17 folds (several minutes on two cores)."""
    from pathlib import Path

    from adaptive.core.cells import build_cells
    from adaptive.core.data import read_judgments
    from adaptive.prompts.loco import loco_data, run_loco

    path = Path(__file__).resolve().parents[3] / "data" / "chateval_ncm" / "judgments.csv"
    data = loco_data(build_cells(read_judgments(path)))
    config = LocoConfig(grid=(100, 150), policies=("random", "prompt"), num_random=20)
    results, _ = run_loco(data, config, workers=1)
    rows = {(r["policy"], r["k"]): r for r in summarize_folds(results, config)}
    rand, prompt = rows[("random", 100)], rows[("prompt", 100)]
    assert rand["se_mean"] - prompt["se_mean"] > 5 * rand["draw_sd"]
    assert prompt["se_ratio"] < 1.2
    assert rows[("prompt", 150)]["se_ratio"] < 1.06


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_located_tier_information_picks_prompts_that_discriminate_where_the_tier_sits(seed):
    """A held-out comparison of two close systems: information at the tier's abilities puts the
    near-zero prompts first and gives a smaller SE than the global ranking, which averages over
    the across-tier comparisons. (The tier *refit* rests on two comparisons here and is not
    reliable: docs/selection.md.)"""
    config = LocoConfig(
        grid=(6,),
        policies=("prompt", "prompt_model"),
        num_draws=100,
        num_info_draws=50,
        min_tier_comparisons=1,
        redundancy_threshold=None,
        tier_information="located",
    )
    result = run_fold(two_tier_data(seed), config, 0)
    assert result.tier == 0
    assert len(set(range(12)) & set(result.order["prompt_model"][:6].tolist())) >= 4
    assert result.se["prompt_model"][0, 0] < result.se["prompt"][0, 0]


def test_located_tier_information_needs_the_global_estimate():
    with pytest.raises(ValueError, match="located"):
        LocoConfig(tier_information="located", tier_estimate="tier")
    with pytest.raises(ValueError, match="tier_information"):
        LocoConfig(tier_information="nearby")


def test_batched_folds_equal_one_fold_at_a_time():
    """All folds at one padded shape (one compiled fit) give each fold's numbers alone.

    The training fits already have the batch's shape, so every policy that uses them alone
    is bit for bit run_fold's (wrongly masked padding would move them); the tier refits
    are padded up and agree to the optimiser's tolerance. A fold's batched numbers do not
    depend on which folds share its batch."""
    from adaptive.prompts.loco import run_folds
    from adaptive.prompts.loco_batch import loco_shape

    data = tiny_loco_data(num_prompts=10)
    folds = list(range(data.num_comparisons))
    batched = run_folds(data, TINY_LOCO, folds)
    alone = [run_folds(data, TINY_LOCO, [f])[0] for f in (0, 4)]
    serial = [run_fold(data, TINY_LOCO, f) for f in folds]
    own = loco_shape(data)
    assert (own.num_comparisons, own.num_items) == (8, 12)
    for b, a in zip([batched[0], batched[4]], alone):
        assert b.se_full == a.se_full and b.tier == a.tier
        for policy in TINY_LOCO.policies:
            np.testing.assert_allclose(b.se[policy], a.se[policy], rtol=0, atol=1e-6)
            np.testing.assert_allclose(b.estimate[policy], a.estimate[policy], rtol=0, atol=1e-6)
    for b, s in zip(batched, serial):
        assert b.fold == s.fold and b.tier == s.tier and b.num_available == s.num_available
        assert abs(b.se_full - s.se_full) <= 1e-6
        assert abs(b.estimate_full - s.estimate_full) <= 1e-6
        for policy in ("random", "prompt"):
            np.testing.assert_allclose(b.se[policy], s.se[policy], rtol=0, atol=1e-6)
            np.testing.assert_allclose(b.estimate[policy], s.estimate[policy], rtol=0, atol=1e-6)
            np.testing.assert_array_equal(b.order.get(policy), s.order.get(policy))
        # tier refits: padded up from their own shape; the same SEs up to the fit's tolerance
        np.testing.assert_allclose(b.se["prompt_model"], s.se["prompt_model"], atol=0.02)


def test_batched_fit_matches_the_fast_fit_and_pads_exactly():
    """fit_laplace_batch at a fit's own shape is fit_laplace; padded to a bigger shape (more
    observations, comparisons and prompts, all of weight 0) it moves within the tolerance."""
    import jax

    from adaptive.prompts.tier_plan import _grm_data
    from stan_free_models.laplace import fit_laplace
    from stan_free_models.laplace_batch import BatchShape, fit_laplace_batch

    data = tiny_loco_data(num_prompts=10)
    grm, _ = _grm_data(data, np.arange(6))
    small, _ = _grm_data(data, np.array([0, 1, 2]))
    keys = [jax.random.PRNGKey(3), jax.random.PRNGKey(4)]
    ref = [
        fit_laplace(d, rng_key=k, num_draws=50, exact_items=False)
        for d, k in zip([grm, small], keys)
    ]
    posts, shape = fit_laplace_batch([grm, small], keys, num_draws=50)
    assert shape == BatchShape(2, 64, 8, 12)
    for name in ("theta", "log_alpha", "b"):
        np.testing.assert_array_equal(posts[0].draws[name], ref[0].draws[name])
    again, _ = fit_laplace_batch([small, grm], keys[::-1], num_draws=50, shape=shape)
    np.testing.assert_array_equal(again[0].draws["theta"], posts[1].draws["theta"])  # any order
    big, _ = fit_laplace_batch([small], keys[1:], num_draws=50, shape=BatchShape(1, 192, 16, 24))
    assert big[0].draws["theta"].shape == ref[1].draws["theta"].shape
    for name in ("theta", "log_alpha", "b"):
        np.testing.assert_allclose(big[0].mean(name), ref[1].mean(name), atol=2e-3)
    assert big[0].diagnostics.converged


def test_own_shape_normals_are_the_fast_fits_draws_at_its_own_shape():
    """One flat draw at the common size gives each own size's normals (what the fit draws)."""
    import jax

    from stan_free_models.laplace_batch import own_shape_normals

    key = jax.random.PRNGKey(7)
    key_g, key_i = jax.random.split(key)
    for c_own, p_own in ((8, 12), (12, 24), (16, 12)):
        z_g, z_i = own_shape_normals(key, c_own, p_own, 30, 16, (24, 7))
        np.testing.assert_array_equal(z_g[:, :c_own], jax.random.normal(key_g, (30, c_own)))
        np.testing.assert_array_equal(z_i[:, :p_own], jax.random.normal(key_i, (30, p_own, 7)))
        assert not np.any(z_g[:, c_own:]) and not np.any(z_i[:, p_own:])
