"""Significance verdicts: Holm's procedure, orientation, and a leaderboard ordering on real data."""

from __future__ import annotations

import numpy as np

from adaptive.cells import build_cells
from adaptive.data import read_judgments
from adaptive.fitting import FitConfig, fit_cells
from adaptive.significance import compare, holm, summarize_draws


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
