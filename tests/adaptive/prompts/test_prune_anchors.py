"""Anchors, the regression estimate of a full set's net preference, and the known-truth campaign."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive.prompts.prune_anchors import (
    anchor_prompts,
    error_ratio_bound,
    mean_estimate,
    regression_estimate,
)
from adaptive.prompts.prune_folds import cell_table
from adaptive.prompts.prune_simulate import judge, simulate_truth


def test_anchors_are_the_medoids_of_equal_slices():
    score = np.array([9.0, 0, 8, 1, 7, 2, 6, 3, 5, 4])  # prompt i has rank score[i]
    anchors = anchor_prompts(score, 5)
    np.testing.assert_array_equal(np.sort(score[anchors]), [0, 2, 4, 6, 8])
    assert len(set(anchor_prompts(score, 10).tolist())) == 10


def test_regression_on_the_covariate_is_unbiased_where_the_kept_mean_is_not():
    """Keep the 25 prompts with the largest covariate: their mean overshoots the full set's,
    the regression does not, and its 95% interval covers the truth about 95% of the time."""
    rng = np.random.default_rng(0)
    errors, covered, naive = [], [], []
    for _ in range(300):
        x = rng.normal(0, 1, 200)
        mu = 0.2 + 0.15 * x + rng.normal(0, 0.05, 200)
        kept = np.argsort(-x)[:25]
        noise = np.full(25, 0.02)
        y = mu[kept] + rng.normal(0, np.sqrt(0.02), 25)
        est = regression_estimate(y, x[kept], x, noise)
        low, high = est.interval()
        errors.append(est.estimate - mu.mean())
        covered.append(low <= mu.mean() <= high)
        naive.append(mean_estimate(y, 200, noise).estimate - mu.mean())
    assert abs(np.mean(errors)) < 0.2 * np.std(errors)
    assert 0.92 <= np.mean(covered) <= 0.98
    assert np.mean(naive) > 0.2  # 0.15 x the mean covariate of the top 25 of 200 (~1.65)


def test_simulated_judgments_have_the_true_means():
    rng = np.random.default_rng(1)
    truth = simulate_truth(rng, num_prompts=30, num_systems=4)
    table = cell_table(judge(rng, truth, np.arange(6), 400))
    np.testing.assert_allclose(table.mean, truth.mu, atol=0.12)
    assert np.all(np.abs(truth.mu) <= 1 - truth.ties)


def test_the_bound_is_the_noise_share():
    assert error_ratio_bound(0.0, 1.0) == 1.0
    assert error_ratio_bound(3.0, 1.0) == pytest.approx(0.5)
