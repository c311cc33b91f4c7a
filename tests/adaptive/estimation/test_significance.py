"""Significance verdicts: Holm's procedure, orientation, and a leaderboard ordering on real data."""

from __future__ import annotations

import numpy as np

from adaptive.core.cells import build_cells
from adaptive.core.data import read_judgments
from adaptive.estimation.fitting import FitConfig, fit_cells
from adaptive.estimation.significance import compare, holm, interval_end_mcse, summarize_draws
from stan_free_models.posterior import Diagnostics, Posterior


def test_holm_step_down_by_hand():
    # sorted p: 0.001 <= 0.05/4, 0.011 <= 0.05/3, 0.03 > 0.05/2 -> stop
    p = np.array([0.03, 0.001, 0.5, 0.011])
    assert holm(p).tolist() == [False, True, False, True]
    assert holm(np.array([0.2, 0.3])).tolist() == [False, False]


def test_summaries_of_known_draws():
    rng = np.random.default_rng(0)
    draws = np.stack([rng.normal(1.0, 0.2, 40000), rng.normal(-0.1, 0.5, 40000)], axis=1)
    s = summarize_draws(draws)
    assert np.allclose(s["mean"], [1.0, -0.1], atol=0.01)
    assert np.allclose(s["sd"], [0.2, 0.5], atol=0.01)
    assert np.allclose(s["ci_low"], [1.0 - 1.96 * 0.2, -0.1 - 1.96 * 0.5], atol=0.02)
    assert s["significant"].tolist() == [True, False]
    assert s["p_b_better"][0] > 0.999 and 0.3 < s["p_b_better"][1] < 0.5


def test_per_system_leaderboard_orders_the_ai_teacher_test_as_the_raw_wins_do():
    """Teacher > Blender > GPT-3 on helpfulness (raw win shares 0.65 / 0.46 / 0.38; Tack & Piech)."""
    judgments = read_judgments("data/ai_teacher_test/judgments.csv")
    cells = build_cells(judgments, dimension="helpfulness")
    config = FitConfig(
        method="fast",
        likelihood="judgment",
        parameterization="system",
        thresholds="symmetric",
        num_draws=1000,  # the default keeps 4000; the order needs far fewer
    )
    post = fit_cells(cells, config)
    skill = dict(zip(cells.systems, post.mean("skill"), strict=True))
    assert skill["Teacher"] > skill["blender_9B"] > skill["GPT-3 Davinci"]
    rows = compare(post, cells, orientation=[("blender_9B", "GPT-3 Davinci")])
    row = next(
        r for r in rows if r["system_a"] == "blender_9B" and r["system_b"] == "GPT-3 Davinci"
    )
    assert row["mean"] < 0  # reported in the orientation asked: A (Blender) better


def test_interval_end_mcse_against_the_iid_quantile_error_and_autocorrelation():
    """iid draws: the asymptotic sd of a sample quantile, sqrt(q(1-q)/n) / pdf(x_q)."""
    from scipy import stats as sps

    rng = np.random.default_rng(1)
    n = 4000
    iid = rng.normal(size=(1, n, 2)) + np.array([1.0, -1.0])
    mcse = interval_end_mcse(iid)
    reference = np.sqrt(0.025 * 0.975 / n) / sps.norm.pdf(1.96)  # 0.042
    assert np.allclose(mcse, reference, rtol=0.3), (mcse, reference)
    # AR(1) with rho 0.9: the same marginal, ~sqrt((1 + rho) / (1 - rho)) = 4.4x the error
    rho, x = 0.9, np.zeros((4, n, 1))
    x[:, 0] = rng.normal(size=(4, 1))
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho**2) * rng.normal(size=(4, 1))
    ratio = interval_end_mcse(x)[0] / (np.sqrt(0.025 * 0.975 / (4 * n)) / sps.norm.pdf(1.96))
    assert 2.5 < ratio < 7.0, ratio


def test_a_verdict_on_the_edge_of_monte_carlo_error_is_unsettled():
    judgments = read_judgments("data/chateval_ncm/judgments.csv")
    cells = build_cells(judgments)
    num = cells.num_comparisons
    rng = np.random.default_rng(2)
    z = rng.normal(size=(2, 500, num))
    # comparison 0: interval end at 0.001 (its MCSE ~0.1): unsettled;
    # comparison 1: interval [2.6, 6.5]: settled; the rest centred on 0 or constant 0: settled
    # (not significant)
    theta = z.copy()
    theta[..., 0] = z[..., 0] - np.quantile(z[..., 0], 0.025) + 0.001
    theta[..., 1] = z[..., 1] + 4.5
    theta[..., 2] = 0.0  # constant draws: no Monte Carlo error, nothing to settle
    post = Posterior(draws={"theta": theta}, method="nuts", diagnostics=Diagnostics())
    rows = compare(post, cells, effect=False)
    assert 0.04 < rows[0]["ci_mcse"] < 0.25  # iid: 0.085, ArviZ noisy with 25 draws in the tail
    assert rows[0]["significant"] and not rows[0]["verdict_settled"]
    assert rows[1]["significant"] and rows[1]["verdict_settled"]
    assert all(r["verdict_settled"] and not r["significant"] for r in rows[2:])


def test_the_interval_ends_monte_carlo_error_is_the_same_in_either_orientation():
    from adaptive.estimation.significance import interval_end_mcse

    rng = np.random.default_rng(0)
    draws = rng.normal(0.3, 1.0, (1, 200, 6)) * np.array([1, 2, 3, -1, -2, -3])
    np.testing.assert_allclose(interval_end_mcse(draws), interval_end_mcse(-draws), rtol=1e-12)
    assert np.all(interval_end_mcse(draws) > 0)
