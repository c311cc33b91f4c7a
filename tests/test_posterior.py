"""Diagnostics: our rank-normalised R-hat and bulk ESS against ArviZ's."""

from __future__ import annotations

import numpy as np
import pytest

from stan_free_models.posterior import Diagnostics, bulk_ess, rank_rhat

az = pytest.importorskip("arviz")


def test_bulk_ess_and_rhat_match_arviz():
    rng = np.random.default_rng(0)
    # autocorrelated chains (AR(1)) with one shifted chain
    x = np.zeros((4, 500, 3))
    for t in range(1, 500):
        x[:, t] = 0.8 * x[:, t - 1] + rng.normal(size=(4, 3))
    x[3] += 0.5
    ours_ess = bulk_ess(x)
    ours_rhat = rank_rhat(x)
    for k in range(3):
        ref_ess = float(az.ess(x[:, :, k], method="bulk"))
        ref_rhat = float(az.rhat(x[:, :, k], method="rank"))
        assert ours_ess[k] == pytest.approx(ref_ess, rel=0.02)
        assert ours_rhat[k] == pytest.approx(ref_rhat, rel=0.01)
    assert np.all(ours_rhat > 1.01)  # the shifted chain is detected


def test_diagnostics_pass_rules():
    good = Diagnostics(rhat={"theta": np.array([1.001, 1.004])}, num_divergences=0)
    assert good.passed()
    assert not Diagnostics(rhat={"theta": np.array([1.2])}).passed()
    assert not Diagnostics(rhat={"theta": np.array([1.0])}, num_divergences=3).passed()
    assert Diagnostics(rhat={"theta": np.array([1.0])}, num_divergences=3).passed(max_divergences=5)
    assert not Diagnostics(converged=False).passed()
