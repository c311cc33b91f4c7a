"""The graded-response likelihood: properties, a hand-computed golden value, extreme values."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest

from stan_free_models.graded_response import GradedResponse, category_probs, graded_log_prob


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_hand_computed_three_category_probabilities():
    theta, alpha, b = 0.3, 1.5, [-1.0, 0.5]
    p_ge1 = sigmoid(alpha * (theta - b[0]))
    p_ge2 = sigmoid(alpha * (theta - b[1]))
    expected = [1 - p_ge1, p_ge1 - p_ge2, p_ge2]  # = 0.12456, 0.44988, 0.42556
    got = np.asarray(category_probs(jnp.array(theta), jnp.array(alpha), jnp.array(b)))
    assert np.allclose(got, expected, atol=1e-6)
    logp = graded_log_prob(jnp.arange(3), jnp.broadcast_to(alpha * (theta - jnp.array(b)), (3, 2)))
    assert np.allclose(np.exp(np.asarray(logp)), expected, atol=1e-6)
    assert expected[0] == pytest.approx(0.124561, abs=1e-5)


@pytest.mark.parametrize("num_categories", [2, 3, 7])
def test_probabilities_sum_to_one_and_match_numpyro_ordered_logistic(num_categories):
    rng = np.random.default_rng(num_categories)
    theta = jnp.asarray(rng.normal(size=50))
    alpha = jnp.asarray(np.exp(rng.normal(size=50)))
    b = jnp.asarray(np.sort(rng.normal(0, 2, size=(50, num_categories - 1)), axis=1))
    probs = np.asarray(category_probs(theta, alpha, b))
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    assert (probs >= 0).all()
    reference = dist.OrderedLogistic(alpha * theta, alpha[:, None] * b)
    for k in range(num_categories):
        y = jnp.full(50, k)
        ours = GradedResponse(alpha[:, None] * (theta[:, None] - b)).log_prob(y)
        # compare probabilities: numpyro's version loses log accuracy where they underflow
        assert np.allclose(np.exp(ours), np.exp(reference.log_prob(y)), atol=1e-5)


def test_reversing_a_comparison_mirrors_the_categories():
    # theta -> -theta with thresholds mirrored (b -> -reversed b) gives P(y = k) -> P(y = K-1-k)
    theta, alpha = jnp.array(0.7), jnp.array(1.3)
    b = jnp.array([-2.0, -0.5, 0.4, 1.0, 2.5, 3.0])
    p = np.asarray(category_probs(theta, alpha, b))
    q = np.asarray(category_probs(-theta, alpha, -b[::-1]))
    assert np.allclose(p, q[::-1], atol=1e-6)


def test_log_prob_is_finite_with_finite_gradients_at_extreme_values():
    y = jnp.array([0, 1, 2, 6, 3])
    logits = jnp.array(
        [
            [80.0, 70.0, 60.0, 50.0, 40.0, 30.0],  # y=0 when almost surely y=6: log p ~ -80
            [-40.0, -41.0, -42.0, -43.0, -44.0, -45.0],
            [1e-7, 0.0, -1e-7, -2e-7, -3e-7, -4e-7],  # nearly equal thresholds
            [-90.0, -91.0, -92.0, -93.0, -94.0, -95.0],
            [0.1, 0.05, 0.0, -0.05, -0.1, -0.15],
        ],
        dtype=jnp.float32,
    )
    logp = np.asarray(graded_log_prob(y, logits))
    keep = np.array([0, 1, 3, 4])
    assert np.all(np.isfinite(logp[keep]))
    assert float(logp[0]) == pytest.approx(-80.0, abs=1e-3)
    assert float(logp[3]) == pytest.approx(-95.0, abs=1e-3)
    grad = jax.grad(lambda x: graded_log_prob(y[keep], x).sum())(logits[keep])
    assert np.all(np.isfinite(np.asarray(grad)))


def test_sampling_matches_probabilities():
    cum = jnp.array([1.0, -0.5])
    draws = GradedResponse(cum).sample(jax.random.PRNGKey(0), (20000,))
    freq = np.bincount(np.asarray(draws), minlength=3) / 20000
    assert np.allclose(freq, np.asarray(GradedResponse(cum).probs), atol=0.01)


def test_symmetric_thresholds_make_theta_zero_a_tie_in_expectation():
    from stan_free_models.graded_response import symmetric_from_half

    half = jnp.array([[0.3, 1.1, 2.0]])
    b = symmetric_from_half(half, 7)
    assert np.allclose(np.asarray(b), [[-2.0, -1.1, -0.3, 0.3, 1.1, 2.0]])
    assert np.allclose(np.asarray(symmetric_from_half(jnp.array([0.5]), 3)), [-0.5, 0.5])
    assert np.allclose(np.asarray(symmetric_from_half(jnp.array([0.5]), 4)), [-0.5, 0.0, 0.5])
    p = np.asarray(category_probs(jnp.array(0.0), jnp.array(1.7), b[0]))
    assert np.allclose(p, p[::-1], atol=1e-7)  # A and B equally likely at theta = 0


@pytest.mark.parametrize("num_categories", [2, 3, 7])
def test_all_category_log_probs_match_the_one_category_formula(num_categories):
    from stan_free_models.graded_response import graded_log_probs_all

    rng = np.random.default_rng(num_categories)
    # decreasing cumulative logits, from near-ties to far-apart extremes
    cum = -np.sort(rng.normal(0.0, 4.0, (500, num_categories - 1)), axis=1)
    cum = jnp.asarray(cum * rng.exponential(2.0, (500, 1)), jnp.float32)
    got = np.asarray(graded_log_probs_all(cum))
    want = np.stack(
        [np.asarray(graded_log_prob(jnp.full(500, c), cum)) for c in range(num_categories)],
        axis=-1,
    )
    finite = np.isfinite(want)
    assert np.abs(got - want)[finite].max() < 1e-4
    np.testing.assert_allclose(np.exp(got).sum(-1), 1.0, atol=1e-5)


def test_cell_likelihood_from_category_counts_equals_the_sum_over_judgments():
    from stan_free_models.graded_response import cell_counts, cell_counts_log_lik, cell_log_lik

    rng = np.random.default_rng(3)
    n, num_cells = 40, 9
    cell = rng.integers(0, num_cells, n)
    comparison = cell % 4  # a cell belongs to one comparison and one item
    item = cell % 5
    y = rng.integers(0, 3, n)
    weight = rng.choice([1.0, 0.5, 1.0 / 3.0], n).astype(np.float32)
    theta = jnp.asarray(rng.normal(size=4), jnp.float32)
    alpha = jnp.asarray(np.exp(rng.normal(size=5)), jnp.float32)
    b = jnp.asarray(np.sort(rng.normal(0, 2, (5, 2)), axis=1), jnp.float32)
    tau = 0.7
    per_judgment = cell_log_lik(
        theta[comparison],
        alpha[item],
        b[item],
        tau,
        jnp.asarray(y),
        jnp.asarray(weight),
        jnp.asarray(cell),
        num_cells,
    )
    cc, ci, counts = cell_counts(cell, comparison, item, y, weight, num_cells, 3)
    per_cell = cell_counts_log_lik(theta[cc], alpha[ci], b[ci], tau, jnp.asarray(counts))
    np.testing.assert_allclose(np.asarray(per_cell), np.asarray(per_judgment), atol=2e-4)
    assert counts.sum() == pytest.approx(weight.sum(), rel=1e-5)


def test_one_quadrature_node_is_the_likelihood_without_a_cell_effect():
    """With tau = 0 the fast path evaluates one node, not eleven: the same numbers.

    The reference is GradedResponse's own log-probability summed per cell; eleven nodes
    at tau = 0 agree with it to rounding, one node as well.
    """
    from stan_free_models.graded_response import (
        GradedResponse,
        cell_counts,
        cell_counts_log_lik,
    )

    rng = np.random.default_rng(5)
    n, num_cells = 60, 12
    cell = rng.integers(0, num_cells, n)
    comparison, item = cell % 4, cell % 6
    y = rng.integers(0, 7, n)
    weight = rng.choice([1.0, 0.5], n).astype(np.float32)
    theta = jnp.asarray(rng.normal(size=4), jnp.float32)
    alpha = jnp.asarray(np.exp(rng.normal(size=6)), jnp.float32)
    b = jnp.asarray(np.sort(rng.normal(0, 2, (6, 6)), axis=1), jnp.float32)
    logp = GradedResponse(alpha[item][:, None] * (theta[comparison][:, None] - b[item])).log_prob(
        jnp.asarray(y)
    )
    want = np.zeros(num_cells)
    np.add.at(want, cell, np.asarray(logp) * weight)
    cc, ci, counts = cell_counts(cell, comparison, item, y, weight, num_cells, 7)
    args = (theta[cc], alpha[ci], b[ci], 0.0, jnp.asarray(counts))
    one = np.asarray(cell_counts_log_lik(*args, num_nodes=1))
    eleven = np.asarray(cell_counts_log_lik(*args))
    np.testing.assert_allclose(one, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(one, eleven, rtol=1e-6, atol=1e-5)
    # and with a cell effect one node is not the integral: the flag must follow tau
    with_tau = np.asarray(
        cell_counts_log_lik(theta[cc], alpha[ci], b[ci], 0.8, jnp.asarray(counts))
    )
    assert np.abs(with_tau - one).max() > 1e-2


def test_a_lapsing_cell_likelihood_is_the_per_judgment_mixture_with_a_uniform_answer():
    """With lapse, each judgment is (1 - lapse) P_grm(y | eps) + lapse / K inside the cell's
    integral; the reference sums the mixture per judgment at every node by hand (numpy)."""
    from stan_free_models.graded_response import (
        category_probs,
        cell_counts,
        cell_counts_log_lik,
        cell_nodes,
    )

    rng = np.random.default_rng(11)
    n, num_cells = 50, 10
    cell = rng.integers(0, num_cells, n)
    comparison, item = cell % 3, cell % 5
    y = rng.integers(0, 3, n)
    theta = rng.normal(size=3)
    alpha = np.exp(rng.normal(size=5))
    b = np.sort(rng.normal(0, 2, (5, 2)), axis=1)
    tau, lapse = 0.6, 0.25
    x, log_w = cell_nodes()
    want = np.full(num_cells, -np.inf)
    for m in range(num_cells):
        obs = np.flatnonzero(cell == m)
        if not len(obs):
            want[m] = 0.0
            continue
        j = item[obs[0]]
        per_node = []
        for q in range(len(x)):
            eta = jnp.asarray(theta[comparison[obs[0]]] + tau * x[q])
            probs = np.asarray(category_probs(eta, jnp.asarray(alpha[j]), jnp.asarray(b[j])))
            mix = (1 - lapse) * probs[y[obs]] + lapse / 3
            per_node.append(np.log(mix).sum())
        want[m] = np.logaddexp.reduce(np.array(per_node) + log_w)
    cc, ci, counts = cell_counts(cell, comparison, item, y, np.ones(n), num_cells, 3)
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    got = cell_counts_log_lik(
        f32(theta)[cc], f32(alpha)[ci], f32(b)[ci], tau, f32(counts), lapse=jnp.float32(lapse)
    )
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-4)
    # and without the lapse, a different number (the mixture is not ignored)
    plain = cell_counts_log_lik(f32(theta)[cc], f32(alpha)[ci], f32(b)[ci], tau, f32(counts))
    assert np.max(np.abs(np.asarray(plain) - want)) > 0.05


@pytest.mark.parametrize("num_categories", [3, 7])
def test_lapse_log_probs_match_a_float64_mixture_at_extreme_logits_and_tiny_rates(num_categories):
    """The lapse mixture is formed in probability space (for speed): against the float64
    mixture of the exact category probabilities (scipy's expit), from near-ties to logits of
    +-60, at rates from 1e-6 to 0.6, values and gradients."""
    from scipy.special import expit

    from stan_free_models.graded_response import lapse_log_probs

    rng = np.random.default_rng(num_categories)
    cum64 = -np.sort(rng.normal(0.0, 4.0, (400, num_categories - 1)), axis=1)
    cum64 *= rng.exponential(3.0, (400, 1))
    cum64 = np.clip(cum64, -60.0, 60.0)
    cum = jnp.asarray(cum64, jnp.float32)
    cum64 = np.asarray(cum, np.float64)  # the same numbers the float32 path sees
    ge = np.concatenate([np.ones((400, 1)), expit(cum64)], axis=1)  # P(y >= c)
    gt = np.concatenate([expit(cum64), np.zeros((400, 1))], axis=1)  # P(y >= c + 1)
    probs = ge - gt
    for lapse in (1e-6, 1e-3, 0.05, 0.6):
        want = np.log((1 - lapse) * probs + lapse / num_categories)
        got = np.asarray(lapse_log_probs(cum, jnp.float32(lapse)), np.float64)
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
    # gradients of a count-weighted sum (what the fits differentiate) against float64 jax
    counts = rng.integers(0, 3, (400, num_categories)).astype(np.float32)

    def total(c, lapse):
        return jnp.sum(lapse_log_probs(c, lapse) * counts)

    with jax.enable_x64(True):
        ref = jax.grad(total)(jnp.asarray(cum64), jnp.float64(0.05))
        ref_lapse = jax.grad(total, argnums=1)(jnp.asarray(cum64), jnp.float64(0.05))
    got = jax.grad(total)(cum, jnp.float32(0.05))
    got_lapse = jax.grad(total, argnums=1)(cum, jnp.float32(0.05))
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=1e-4, rtol=1e-4)
    assert float(got_lapse) == pytest.approx(float(ref_lapse), rel=1e-4)
    # no lapse: the log-space probabilities, unchanged
    from stan_free_models.graded_response import graded_log_probs_all

    np.testing.assert_array_equal(
        np.asarray(lapse_log_probs(cum, None)), np.asarray(graded_log_probs_all(cum))
    )


def test_lapse_log_probs_stay_finite_where_the_rate_and_a_category_underflow():
    from stan_free_models.graded_response import lapse_log_probs

    cum = jnp.array([[200.0, 150.0]], jnp.float32)  # P(y = 0) underflows in float32
    for rate in (0.0, 1e-30):
        out = lapse_log_probs(cum, jnp.float32(rate))
        assert bool(jnp.all(jnp.isfinite(out)))
        grad = jax.grad(lambda c, r=rate: lapse_log_probs(c, jnp.float32(r)).sum())(cum)
        assert bool(jnp.all(jnp.isfinite(grad)))
