"""research/screen_clustering.py's claim, small: with dependent ranked screens the intervals
that take a screen's pairs as one unit cover more than per-cell units do (tests/test_research.py
runs this file in its own process)."""

from __future__ import annotations

import numpy as np
import pytest
import screen_clustering as sc


def test_the_simulators_judgments_keep_the_models_marginal():
    judgments = sc.simulate(np.random.default_rng(0), num_prompts=400, shift_sd=1.5)
    # s0 vs s4 (theta 1.2): P(b) = expit(1.2 * 0.6), P(a) = 1 - expit(1.2 * 1.8)
    pair = judgments.filter((judgments["system_a"] == "s0") & (judgments["system_b"] == "s4"))
    share_b = float((pair["winner"] == "b").mean())
    assert abs(share_b - 1 / (1 + np.exp(-0.72))) < 0.06
    assert judgments["screen_id"].n_unique() == 400


@pytest.mark.slow
def test_screen_units_cover_more_than_cells_when_a_screens_pairs_are_dependent():
    rows = sc.run(parameterization="comparison", shift_sd=1.5, campaigns=12, num_prompts=40)
    cover = sc.coverage(rows)
    cell, screen = cover[("comparison", 1.5, "cell")], cover[("comparison", 1.5, "screen")]
    assert screen > cell + 0.02, (cell, screen)
    sd = {u: np.mean([r["sd"] for r in rows if r["units"] == u]) for u in ("cell", "screen")}
    assert sd["screen"] > 1.05 * sd["cell"]
