"""The default model's net preference Δ and its calibration on simulated campaigns with known truth.

Fast tests check the pieces (the integrated cell likelihood, the simulator's truth,
the implied Δ); the slow ones measure, on fewer campaigns than research/calibration.py,
what docs/statistics.md reports: the share of null campaigns with any Holm flag,
the coverage of Δ's 95% interval, and that a sparse snapshot does not exaggerate.
The suite's own tables and command line are tested in research/ (tests/test_research.py
runs those tests).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest
from scipy import integrate, stats

from adaptive.estimation.fitting import preset_config
from adaptive.estimation.pipeline import analyze
from adaptive.estimation.significance import compare
from stan_free_models.graded_response import cell_log_lik, graded_log_prob
from stan_free_models.inference import GRMData
from stan_free_models.laplace_grid import _expit
from stan_free_models.predictive import implied_net_preference
from stan_free_models.simulate import (
    expected_signed,
    simulate_campaign,
    simulate_kind,
    subsample_index,
)


def _cell(y, eta=0.4, alpha=1.3, b=(-0.5, 0.8)):
    n = len(y)
    return (
        jnp.full(n, eta),
        jnp.full(n, alpha),
        jnp.tile(jnp.asarray(b), (n, 1)),
        jnp.asarray(y),
        jnp.ones(n),
        jnp.zeros(n, jnp.int32),
    )


def test_without_a_cell_effect_the_cell_likelihood_is_the_product_of_its_judgments():
    eta, alpha, b, y, w, cell = _cell([2, 2, 0])
    got = cell_log_lik(eta, alpha, b, 0.0, y, w, cell, 1)[0]
    want = graded_log_prob(y, alpha[:, None] * (eta[:, None] - b)).sum()
    assert float(got) == pytest.approx(float(want), abs=1e-5)


def test_the_cell_effect_is_integrated_as_a_reference_quadrature_does():
    eta, alpha, b, y, w, cell = _cell([2, 2, 1])
    tau = 0.8

    def integrand(e):
        lp = graded_log_prob(y, alpha[:, None] * (eta[:, None] + e - b)).sum()
        return float(np.exp(lp)) * stats.norm.pdf(e, scale=tau)

    want = np.log(integrate.quad(integrand, -8 * tau, 8 * tau)[0])
    got = float(cell_log_lik(eta, alpha, b, tau, y, w, cell, 1)[0])
    assert got == pytest.approx(want, abs=2e-3)
    # agreeing judgments are more likely together than apart when they share an effect
    assert got > float(cell_log_lik(eta, alpha, b, 0.0, y, w, cell, 1)[0])


def test_an_exchangeable_null_has_true_net_preference_zero_and_the_data_converge_to_the_truth():
    rng = np.random.default_rng(0)
    null = simulate_campaign(rng, num_comparisons=3, num_prompts=20, null=True)
    assert np.allclose(null.cell_delta, 0.0, atol=1e-12)
    camp = simulate_campaign(
        rng,
        num_comparisons=3,
        num_prompts=10,
        num_annotators=400,
        cell_sd=0.5,
        random_annotators=0.2,
    )
    frame = pl.DataFrame(camp.rows)
    signed = frame["winner"].replace_strict({"a": -1, "tie": 0, "b": 1}).to_numpy()
    comp = np.repeat(np.arange(3), 10 * 400)
    observed = np.bincount(comp, weights=signed) / np.bincount(comp)
    # 4,000 judgments per comparison: the share of random annotators in the pool is
    # what scales the truth, so the observed mean is within a few standard errors
    assert np.all(np.abs(observed - camp.delta) < 0.06)


def test_the_rough_simulator_truth_is_what_its_pool_says_on_average():
    """The rough simulator's cell truth is the pool's average expected judgment: with every
    annotator of the pool judging every cell, each cell's and each comparison's mean signed
    judgment is within its sampling error of the truth; and its design is as documented
    (missing cells, unequal judgments per cell, distinct annotators within a cell)."""
    from stan_free_models.simulate import simulate_rough_campaign

    rng = np.random.default_rng(3)
    # annotators far apart (sensitivity and tie readiness), many of them random, so that a
    # truth that ignored either would be seen
    camp = simulate_rough_campaign(
        rng,
        num_comparisons=3,
        num_prompts=300,
        mean_judgments=1e6,
        random_annotators=0.5,
        sensitivity_sd=1.5,
        tie_sd=1.5,
    )
    frame = pl.DataFrame(camp.rows)
    signed = frame["winner"].replace_strict({"a": -1, "tie": 0, "b": 1}).to_numpy()
    index = {(camp.systems[a], camp.systems[b]): i for i, (a, b) in enumerate(camp.pairs)}
    comp = np.array([index[k] for k in zip(frame["system_a"], frame["system_b"])])
    prompt = np.array([int(p[1:]) for p in frame["item_id"]])
    # every annotator of the pool judged each judged cell once
    per_cell = frame.group_by("system_a", "system_b", "item_id").agg(
        pl.len(), pl.col("annotator_id").n_unique().alias("distinct")
    )
    assert (per_cell["len"] == 40).all() and (per_cell["distinct"] == 40).all()
    # cell by cell: the squared error over the sample variance of the mean is at most 1 on
    # average (the pool's spread between annotators only inflates the variance); a truth
    # that ignored the annotators' sensitivity and tie readiness gives 1.57 here
    cells = (
        frame.with_columns(s=pl.Series(signed, dtype=pl.Float64))
        .group_by("system_a", "system_b", "item_id")
        .agg(m=pl.col("s").mean(), v=pl.col("s").var(), n=pl.len())
    )
    c = np.array([index[k] for k in zip(cells["system_a"], cells["system_b"])])
    p = np.array([int(x[1:]) for x in cells["item_id"]])
    err = (cells["m"].to_numpy() - camp.cell_delta[c, p]) ** 2
    assert np.mean(err / (cells["v"].to_numpy() / cells["n"].to_numpy())) < 1.1
    truth = camp.true_delta(comp, prompt)
    observed = np.bincount(comp, weights=signed) / np.bincount(comp)
    # about 10,000 judgments per comparison, sd <= 1 each: 4 standard errors is < 0.04
    assert np.all(np.abs(observed - truth) < 4 / np.sqrt(np.bincount(comp))), (observed, truth)
    # and the random annotators count: the others alone say more
    assert np.abs(truth).max() > 0.15
    sensible = ~np.isin(frame["annotator_id"].to_numpy(), camp.random_annotators)
    alone = np.bincount(comp[sensible], weights=signed[sensible]) / np.bincount(comp[sensible])
    assert np.abs(alone - truth).max() > 8 / np.sqrt(np.bincount(comp[sensible]).min())
    # the default design: about 15% of cells unjudged, 1 + Poisson(2) judgments in the others
    camp = simulate_rough_campaign(np.random.default_rng(4), num_comparisons=10, num_prompts=200)
    cells = pl.DataFrame(camp.rows).group_by("system_a", "system_b", "item_id").len()
    assert 0.80 < cells.height / 2000 < 0.90
    assert cells["len"].min() == 1 and cells["len"].max() >= 6
    assert 2.8 < cells["len"].mean() < 3.2


def test_true_delta_averages_over_the_judged_prompts_only():
    rng = np.random.default_rng(1)
    camp = simulate_campaign(rng, num_comparisons=2, num_prompts=5)
    got = camp.true_delta(np.array([0, 0, 1]), np.array([1, 3, 4]))
    assert got[0] == pytest.approx(camp.cell_delta[0, [1, 3]].mean())
    assert got[1] == pytest.approx(camp.cell_delta[1, 4])


def test_implied_net_preference_without_cells_is_the_mean_expected_judgment():
    data = GRMData(
        comparison=np.array([0, 0, 1]),
        item=np.array([0, 1, 1]),
        y=np.array([2, 1, 0]),
        weight=np.ones(3),
        num_comparisons=2,
        num_items=2,
        num_categories=3,
    )
    theta = np.array([[0.5, -1.0]])
    alpha = np.array([[1.0, 2.0]])
    b = np.array([[[-1.0, 0.5], [-0.2, 0.3]]])
    out = implied_net_preference(
        data, theta, alpha, b, None, noise=False, rng_key=jax.random.PRNGKey(0)
    )
    want0 = expected_signed(np.array([0.5, 0.5]), alpha[0], b[0]).mean()
    want1 = expected_signed(np.array([-1.0]), alpha[0, 1:], b[0, 1:]).mean()
    assert out.delta[0].tolist() == pytest.approx([want0, want1], abs=1e-5)


def test_significance_rows_carry_the_net_preference_and_flip_it_with_the_orientation():
    rng = np.random.default_rng(2)
    camp = simulate_campaign(rng, num_comparisons=3, num_prompts=30)
    frame = pl.DataFrame(camp.rows)
    config = preset_config("default", method="fast", num_draws=1000)  # the default keeps 4000
    result = analyze(frame, config=config, group_redundant=False)
    rows = compare(result.posterior, result.cells)
    a, b = rows[0]["system_a"], rows[0]["system_b"]
    flipped = compare(result.posterior, result.cells, orientation=[(b, a)])[0]
    for key in ("net_preference", "observed_net"):
        assert flipped[key] == pytest.approx(-rows[0][key])
    assert flipped["net_ci_low"] == pytest.approx(-rows[0]["net_ci_high"])
    for r in rows:
        assert -1 <= r["net_ci_low"] <= r["net_preference"] <= r["net_ci_high"] <= 1
        assert r["sign_agrees"] in (True, False) and isinstance(r["note"], str)
    truth = camp.delta[[camp.pairs.index(p) for p in _pairs(result.cells, camp)]]
    est = np.array([r["net_preference"] for r in rows])
    assert np.corrcoef(est, truth)[0, 1] > 0.9


def _pairs(cells, camp):
    index = {n: i for i, n in enumerate(camp.systems)}
    return [(index[a], index[b]) for a, b in cells.comparison_names()]


# ------------------------------------------------------------------ slow: calibration


def _campaign_rows(kind: str, seed: int, fraction: float, method: str = "fast"):
    camp = simulate_kind(kind, seed)
    frame = pl.DataFrame(camp.rows)
    frame = frame[subsample_index(frame.height, fraction, seed)]
    config = preset_config("default", method=method, num_draws=1000)
    result = analyze(frame, config=config, group_redundant=False)
    rows = compare(result.posterior, result.cells, effect=not kind.startswith("null"))
    cells = result.cells
    comp = np.array([camp.pairs.index(p) for p in _pairs(cells, camp)])
    prompt = np.array([camp.prompts.index(p) for p in cells.prompts])
    truth = camp.true_delta(comp[cells.judgment_comparison], prompt[cells.judgment_prompt])[comp]
    return rows, truth


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [1.0, 0.15])
def test_null_campaigns_rarely_get_an_adjusted_flag(fraction):
    """12 null campaigns (thresholds as in the paper, all systems equal): at most 1 flagged.

    The paper's model on the fast path flagged 17% at full size and 42% at 15% of the data,
    and the model-based default's posterior alone 27.5-60% at 15%, depending on the round
    (research/the_first_fast_path.md); a 5% rate gives at most 1 of 12 with probability 0.88.
    """
    flagged = sum(
        any(r["significant_adjusted"] for r in _campaign_rows("null-asym", seed, fraction)[0])
        for seed in range(100, 112)
    )
    assert flagged <= 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["paper", "varied", "rough", "net-split"])
def test_net_preference_intervals_cover_and_a_sparse_snapshot_does_not_exaggerate(kind):
    """3 campaigns (60 comparisons) at 100% and 5% of the data."""
    cover, absz = {}, {}
    for fraction in (1.0, 0.05):
        hits, zs = [], []
        for seed in range(200, 203):
            rows, truth = _campaign_rows(kind, seed, fraction)
            est = np.array([r["net_preference"] for r in rows])
            sd = np.array([r["net_sd"] for r in rows])
            low = np.array([r["net_ci_low"] for r in rows])
            high = np.array([r["net_ci_high"] for r in rows])
            hits.extend((low <= truth) & (truth <= high))
            zs.extend(np.abs(est - truth) / sd)
        cover[fraction], absz[fraction] = np.mean(hits), np.mean(zs)
    print(kind, cover, absz)
    # measured on 20 campaigns a share (research/calibration/*_robust_fast.jsonl): the
    # model's own Δ at the joint mode covered 0.71-0.93 on these simulators; 3 campaigns
    # of 20 comparisons at 0.95 fall below 0.8 with probability < 0.001
    assert all(0.8 <= c <= 1.0 for c in cover.values())
    if kind in ("paper", "varied"):
        # on 20 campaigns 1.07 and 1.16; net-split 1.11 and rough 1.23 vary more over three
        # (net-split's three at 1.47), so the bound is checked where three campaigns hold it
        assert 0.75 <= absz[0.05] / absz[1.0] <= 1.3


def test_with_a_lapse_the_expected_judgment_shrinks_by_the_share_of_random_answers():
    """A random answer's signed mean is 0: the structural Δ is (1 - lapse) times the graded
    response's, and a cell's Δ given its judgments moves towards the data less."""
    data = GRMData(
        comparison=np.array([0, 0, 1, 1]),
        item=np.array([0, 1, 0, 1]),
        y=np.array([2, 2, 0, 1]),
        weight=np.ones(4),
        num_comparisons=2,
        num_items=2,
        num_categories=3,
        cell=np.array([0, 1, 2, 3]),
        num_cells=4,
    )
    theta = np.array([[0.5, -1.0]])
    alpha = np.array([[1.0, 2.0]])
    b = np.array([[[-1.0, 0.5], [-0.2, 0.3]]])
    tau = np.array([0.5])
    key = jax.random.PRNGKey(0)
    base = implied_net_preference(data, theta, alpha, b, tau, noise=False, rng_key=key)
    lapsed = implied_net_preference(
        data, theta, alpha, b, tau, lapse=np.array([0.3]), noise=False, rng_key=key
    )
    np.testing.assert_allclose(lapsed.structural, 0.7 * base.structural, rtol=1e-5)
    # a cell's effect given its judgments is not the no-lapse one scaled: its judgments
    # weigh less when they may be random
    assert not np.allclose(lapsed.delta, 0.7 * base.delta, atol=1e-4)


def _lapse_fit(frame: pl.DataFrame, **extra):
    config = preset_config("default", method="fast", lapse=True, num_draws=1000, **extra)
    return analyze(frame, config=config, group_redundant=False)


def test_the_fast_path_integrates_the_lapse_rate_over_a_grid_and_warm_starts_from_it():
    camp = simulate_campaign(
        np.random.default_rng(4), num_comparisons=4, num_prompts=20, random_annotators=0.3
    )
    result = _lapse_fit(pl.DataFrame(camp.rows))
    post = result.posterior
    lapse = post.draws["lapse"]
    assert lapse.shape == post.draws["tau"].shape and np.all((lapse > 0) & (lapse < 1))
    comps = post.info["components"]
    # the draws are split among the grid points by weight
    assert sum(c["stop"] - c["start"] for c in comps) == 1000
    heaviest = max(comps, key=lambda c: c["weight"])
    assert heaviest["stop"] - heaviest["start"] == pytest.approx(1000 * heaviest["weight"], abs=1)
    # more than one lapse rate carries weight: the rate is integrated, not plugged in
    assert len({c["lapse"] for c in comps if c["weight"] > 0.01}) > 1
    # the heaviest grid point stands for the mode (the next fit's warm start)
    assert post.info["mode_values"]["lapse"] == pytest.approx(heaviest["lapse"])
    assert float(_expit(post.mode["logit_lapse"][0])) == pytest.approx(heaviest["lapse"], rel=1e-5)
    rows = compare(post, result.cells)
    assert all(-1 <= r["net_ci_low"] <= r["net_preference"] <= r["net_ci_high"] <= 1 for r in rows)
    # the fit's own mode is a warm start that leads back to the same rate
    again = analyze(
        pl.DataFrame(camp.rows),
        config=preset_config("default", method="fast", lapse=True, num_draws=1000),
        group_redundant=False,
        init=post.mode,
    ).posterior
    assert float(again.draws["lapse"].mean()) == pytest.approx(float(lapse.mean()), abs=0.03)


@pytest.mark.slow
def test_the_lapse_rate_recovers_the_share_of_random_judgments():
    """Reference: the simulation's own record of which annotators answered at random."""
    for seed, share in ((3, 0.3), (5, 0.0)):
        camp = simulate_campaign(
            np.random.default_rng(seed),
            num_comparisons=6,
            num_prompts=40,
            cell_sd=0.5,
            random_annotators=share,
        )
        frame = pl.DataFrame(camp.rows)
        realized = frame["annotator_id"].is_in(list(camp.random_annotators)).mean()
        lapse = _lapse_fit(frame).posterior.draws["lapse"]
        assert float(lapse.mean()) == pytest.approx(realized, abs=0.08), (seed, realized)
        low, high = np.quantile(lapse, [0.025, 0.975])
        # the grid of the rate starts at 0.005: no random judgments sit at its lowest point
        target = max(realized, 0.005)
        assert low - 1e-9 <= target <= high, (seed, realized, low, high)


def test_the_default_preset_is_robust_and_the_model_based_treatment_is_asked_for():
    for method in ("fast", "nuts"):
        default = preset_config("default", method=method)
        assert default.robust and not default.cell_effect and not default.priors.lapse
        assert not default.laplace.exact_items and default.laplace.refine_sweeps == 0
    assert preset_config("default", parameterization="system").robust
    # asking for the lapse brings the cells it lives in, and the model-based intervals
    lapse = preset_config("default", lapse=True)
    assert lapse.priors.lapse and lapse.cell_effect and not lapse.robust
    cells = preset_config("default", cell_effect=True)
    assert cells.cell_effect and not cells.priors.lapse and not cells.robust
    assert not preset_config("default", exact_items=True).robust
    assert not preset_config("paper").robust and not preset_config("paper").priors.lapse
    with pytest.raises(ValueError, match="robust intervals replace"):
        preset_config("default", robust=True, cell_effect=True)
    # the live snapshots' configuration is its own (adaptive.estimation.streaming.stream_config)
    from adaptive.estimation.streaming import stream_config

    assert not stream_config("fast").priors.lapse


def test_a_lapse_rate_is_refused_where_it_would_be_dropped_or_collapse():
    from stan_free_models.inference import Priors, _static_key, pad_data

    data = GRMData(
        comparison=np.array([0, 1]),
        item=np.array([0, 0]),
        y=np.array([2, 0]),
        weight=np.ones(2),
        num_comparisons=2,
        num_items=1,
        num_categories=3,
    )
    with pytest.raises(ValueError, match="lapse needs the cells"):
        _static_key(pad_data(data), Priors(lapse=True))
    with pytest.raises(ValueError, match="lapse needs cell_effect=True"):
        preset_config("paper", lapse=True)
    with pytest.raises(ValueError, match="needs integrate_tau=True"):
        preset_config("default", method="fast", lapse=True, integrate_tau=False)
    assert preset_config("default", method="nuts", lapse=True).priors.lapse
    # the model function itself refuses it too
    from numpyro.handlers import seed as seeded

    from stan_free_models.graded_response import graded_response

    with pytest.raises(ValueError, match="lapse needs cells"):
        seeded(graded_response, 0)(
            np.array([0]), np.array([0]), 1, 1, 3, y=np.array([1]), priors=Priors(lapse=True)
        )
