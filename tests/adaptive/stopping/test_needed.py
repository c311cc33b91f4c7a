"""The search behind ``needed``: the same first size as trying every size of the grid."""

import numpy as np
import pytest
from scipy import special

from adaptive.stopping import needed
from adaptive.stopping.evidence import log_sign_evalue


def every_size(k, m, t, a, level, quantile=None, best=False):
    """needed_sign as the plain scan over every continuation size of the grid."""
    k, m, t = (np.asarray(v, np.float64) for v in (k, m, t))
    q = (k + 1.0) / (m + 2.0)
    lead = np.where(q >= 0.5, k, m - k)
    q = np.maximum(q, 1.0 - q)
    if quantile is not None:
        q = np.maximum(special.betaincinv(lead + 1.0, m - lead + 1.0, quantile), 0.5)
    if best:
        q = np.ones_like(q)
    non_tie = np.ones_like(m) if best else np.maximum((m + 1.0) / (t + 2.0), 1e-3)
    extra = needed._EXTRA[None, :]
    reached = log_sign_evalue(lead[:, None] + q[:, None] * extra, m[:, None] + extra, a) >= np.log(
        1.0 / level
    )
    first = np.argmax(reached, axis=1)
    return np.where(reached.any(axis=1), extra[0, first] / non_tie, np.inf)


@pytest.mark.parametrize("variant", [{}, {"quantile": 0.8}, {"quantile": 0.2}, {"best": True}])
def test_needed_sign_finds_the_first_size_every_size_would(variant):
    rng = np.random.default_rng(7)
    for trial in range(40):
        m = rng.integers(0, [10, 100, 1000, 20000][trial % 4], 150).astype(float)
        share = rng.uniform(0.3, 0.7) if trial % 2 else rng.uniform(0.47, 0.53)
        k = rng.binomial(m.astype(int), share).astype(float)
        t = m + rng.integers(0, 50, m.shape[0])
        a = [0.5, 1.0, 5.0][trial % 3]
        level = [0.025, 1e-4, 0.05 / 78][trial % 3]
        got = needed.needed_sign(k, m, t, a, level, **variant)
        want = every_size(k, m, t, a, level, **variant)
        np.testing.assert_array_equal(got, want)
        # the draws reach both ends: sizes in sight and out of it
        assert trial < 4 or np.isfinite(want).any()


def test_needed_sign_out_of_sight_and_already_there():
    # no lead at all: never in sight; an overwhelming lead: the first size of the grid
    k, m, t = np.array([50.0, 400.0]), np.array([100.0, 400.0]), np.array([100.0, 400.0])
    got = needed.needed_sign(k, m, t, 1.0, 0.01)
    assert np.isinf(got[0])
    assert got[1] == needed._EXTRA[0] * 402 / 401  # ties expected at the observed (+1/+2) rate
    assert needed.needed_sign(k, m, t, 1.0, 0.01, best=True)[1] == 1.0
    assert needed.needed_sign(np.zeros(0), np.zeros(0), np.zeros(0), 1.0, 0.01).shape == (0,)
