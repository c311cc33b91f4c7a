"""The model-assisted net preference's draw-by-draw cell means: the fast route gives the
numbers of the plain one bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from stan_free_models.net_estimate import DRAW_CHUNK, cell_fit, cell_means, cell_moments


def _draws(rng, num_draws: int, num_cells: int, num_thresholds: int):
    theta = rng.normal(size=(num_draws, num_cells))
    alpha = np.exp(rng.normal(size=(num_draws, num_cells)))
    b = np.sort(rng.normal(0.0, 2.0, size=(num_draws, num_cells, num_thresholds)), axis=-1)
    return theta, alpha, b


@pytest.mark.parametrize("num_thresholds", [2, 6])
def test_cell_means_are_cell_moments_means_bit_for_bit(num_thresholds):
    theta, alpha, b = _draws(np.random.default_rng(1), 30, 5000, num_thresholds)
    b[0, :10] = 40.0  # probabilities at 0 and 1
    fast = cell_means(theta, alpha, b)
    np.testing.assert_array_equal(fast, cell_moments(theta, alpha, b)[0])
    assert fast.flags["C_CONTIGUOUS"]  # so that sums over draws add in the same order


def _plain_cell_fit(comp, item, k, num_comparisons, theta_draws, alpha_draws, b_draws):
    """The chunked loop with the full moments, on one thread (as it was written first)."""
    num_draws = theta_draws.shape[0]
    sum_m, sum_m2 = np.zeros(len(comp)), np.zeros(len(comp))
    model = np.empty((num_draws, num_comparisons))
    for lo in range(0, num_draws, DRAW_CHUNK):
        hi = min(lo + DRAW_CHUNK, num_draws)
        m, _ = cell_moments(
            theta_draws[lo:hi, comp], alpha_draws[lo:hi, item], b_draws[lo:hi, item]
        )
        sum_m += m.sum(axis=0)
        sum_m2 += (m**2).sum(axis=0)
        model[lo:hi] = [np.bincount(comp, weights=r, minlength=num_comparisons) for r in m]
    return sum_m / num_draws, model


@pytest.mark.parametrize("cell_block", [700, 100_000])
def test_cell_fit_on_threads_is_the_plain_loop_bit_for_bit(monkeypatch, cell_block):
    from stan_free_models import net_estimate

    monkeypatch.setattr(net_estimate, "CELL_BLOCK", cell_block)  # blocks of cells, or one
    rng = np.random.default_rng(2)
    num_cells, num_comparisons, num_items, num_draws = 3000, 7, 40, 3 * DRAW_CHUNK + 4
    comp = rng.integers(num_comparisons, size=num_cells)
    item = rng.integers(num_items, size=num_cells)
    k = rng.integers(1, 6, size=num_cells).astype(float)
    theta = rng.normal(size=(num_draws, num_comparisons))
    alpha = np.exp(rng.normal(size=(num_draws, num_items)))
    b = np.sort(rng.normal(size=(num_draws, num_items, 2)), axis=-1)
    fit = cell_fit(comp, item, k, num_comparisons, theta, alpha, b, None)
    mean_m, model = _plain_cell_fit(comp, item, k, num_comparisons, theta, alpha, b)
    np.testing.assert_array_equal(fit.fitted, mean_m)
    np.testing.assert_array_equal(fit.model_draws, model)
