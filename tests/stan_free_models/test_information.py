"""Fisher information of the graded response model: golden values, numerical derivatives, properties."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stan_free_models.graded_response import category_probs, graded_log_prob
from stan_free_models.information import (
    expected_information,
    information_matrix,
    item_information,
    standard_error,
)


def numerical_information(theta: float, alpha: float, b: np.ndarray, h: float = 1e-5) -> float:
    """sum_c P_c'(theta)^2 / P_c(theta) with P_c' by central differences (float64 numpy)."""

    def probs(t: float) -> np.ndarray:
        cum = 1.0 / (1.0 + np.exp(-alpha * (t - np.asarray(b, dtype=np.float64))))
        upper = np.concatenate([[1.0], cum])
        lower = np.concatenate([cum, [0.0]])
        return upper - lower

    p = probs(theta)
    dp = (probs(theta + h) - probs(theta - h)) / (2 * h)
    return float(np.sum(dp**2 / p))


def test_two_categories_is_the_2pl_information():
    # K = 2: I = alpha^2 p (1 - p); at theta = b it is alpha^2 / 4
    assert float(
        item_information(jnp.array(0.0), jnp.array(2.0), jnp.array([0.0]))
    ) == pytest.approx(1.0)
    theta, alpha, b = 0.7, 1.3, -0.4
    p = 1.0 / (1.0 + np.exp(-alpha * (theta - b)))
    got = float(item_information(jnp.array(theta), jnp.array(alpha), jnp.array([b])))
    assert got == pytest.approx(alpha**2 * p * (1 - p), rel=1e-5)


def test_hand_computed_three_categories():
    # alpha = 1, b = (-1, 1), theta = 0: P*_1 = s(1), P*_2 = s(-1); W = s(1)s(-1) for both
    s1 = 1 / (1 + np.exp(-1.0))
    w = s1 * (1 - s1)
    p0, p1, p2 = 1 - s1, s1 - (1 - s1), 1 - s1
    expected = w**2 / p0 + 0.0 / p1 + w**2 / p2  # dP_1 = W_1 - W_2 = 0 at the symmetric point
    got = float(item_information(jnp.array(0.0), jnp.array(1.0), jnp.array([-1.0, 1.0])))
    assert got == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(
    "theta, alpha, b",
    [
        (0.0, 1.0, [-2.0, -1.0, -0.3, 0.2, 1.0, 2.5]),
        (1.7, 2.4, [-1.5, -0.5, 0.0, 0.4, 0.9, 1.2]),
        (-2.2, 0.4, [-3.0, -1.0, 1.0, 3.0]),
        (0.3, 1.5, [-1.0, 0.5]),
    ],
)
def test_matches_numerical_derivative_and_expected_hessian(theta, alpha, b):
    b = np.asarray(b)
    got = float(item_information(jnp.array(theta), jnp.array(alpha), jnp.asarray(b)))
    assert got == pytest.approx(numerical_information(theta, alpha, b), rel=2e-3)

    # I(theta) = E[-d^2/dtheta^2 log P(y | theta)] with the model's own log-likelihood
    num_cat = len(b) + 1

    def loglik(t, y):
        return graded_log_prob(y, alpha * (t - jnp.asarray(b)))

    probs = np.asarray(category_probs(jnp.array(theta), jnp.array(alpha), jnp.asarray(b)))
    hess = [float(-jax.hessian(loglik)(jnp.array(theta), jnp.array(c))) for c in range(num_cat)]
    assert got == pytest.approx(float(np.dot(probs, hess)), rel=2e-3)


def test_properties():
    theta = jnp.linspace(-4, 4, 41)
    info = item_information(
        theta, jnp.full(41, 1.2), jnp.tile(jnp.array([-1.0, 0.0, 1.5]), (41, 1))
    )
    assert bool(jnp.all(info >= 0))
    # alpha = 0: the response does not depend on theta, so no information
    zero = item_information(theta, jnp.zeros(41), jnp.tile(jnp.array([-1.0, 0.0, 1.5]), (41, 1)))
    assert float(jnp.max(jnp.abs(zero))) == 0.0
    # information scales with alpha^2 at the thresholds' centre only through the curve: doubling
    # alpha doubles the peak height of a 2-category item (alpha^2 / 4)
    peak1 = item_information(jnp.array(0.0), jnp.array(1.0), jnp.array([0.0]))
    peak2 = item_information(jnp.array(0.0), jnp.array(2.0), jnp.array([0.0]))
    assert float(peak2 / peak1) == pytest.approx(4.0)
    # far from the thresholds information vanishes, and stays finite
    far = item_information(jnp.array(40.0), jnp.array(3.0), jnp.array([-1.0, 1.0]))
    assert np.isfinite(float(far)) and float(far) < 1e-10


def test_matrix_expected_and_standard_error():
    alpha = jnp.array([0.5, 1.0, 2.0])
    b = jnp.array([[-1.0, 1.0], [-0.5, 0.5], [0.0, 2.0]])
    thetas = jnp.array([-1.0, 0.0, 2.0])
    mat = information_matrix(thetas, alpha, b)
    assert mat.shape == (3, 3)
    for i, t in enumerate(thetas):
        for j in range(3):
            assert float(mat[i, j]) == pytest.approx(
                float(item_information(t, alpha[j], b[j])), rel=1e-6
            )
    np.testing.assert_allclose(expected_information(thetas, alpha, b), mat.mean(axis=0), rtol=1e-6)
    se = float(standard_error(jnp.array(0.0), alpha, b))
    assert se == pytest.approx(1.0 / np.sqrt(1.0 + float(mat[1].sum())), rel=1e-6)
