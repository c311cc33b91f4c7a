"""Parameter recovery at the paper's size (slow): 20 comparisons x 200 prompts x 3 annotators.

Truth is drawn from the priors (theta ~ N(0,1), log alpha ~ N(0,1), b ~ sorted N(0,2));
each cell's 3 annotators give a net rating in [-3, 3]: r(theta) >= 0.95, r(alpha) >= 0.8
and 90% intervals of theta covering the truth 75-95% of the time. The Laplace fit is checked
on 5 seeds; NUTS on the first 2 (about 2.5 minutes a seed on 2 cores, the slow suite's longest
test when it ran all 5). The full measurement, both methods on all 5 seeds, is
``python research/recovery.py``.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from stan_free_models.laplace import fit_laplace
from stan_free_models.nuts import fit_nuts
from stan_free_models.simulate import draw_truth, simulate_net_ratings

#: the key every fit here used before keys were required
KEY = jax.random.PRNGKey(0)

SEEDS = (11, 12, 13, 14, 15)
#: the seeds NUTS is checked on here (research/recovery.py runs it on all of SEEDS)
NUTS_SEEDS = SEEDS[:2]


def recovery(method: str) -> dict:
    r_theta, r_alpha, covered = [], [], []
    for seed in NUTS_SEEDS if method == "nuts" else SEEDS:
        rng = np.random.default_rng(seed)
        truth = draw_truth(rng, 20, 200, 7)
        data = simulate_net_ratings(rng, truth)
        if method == "nuts":
            post = fit_nuts(
                data,
                rng_key=KEY,
                # 2 x (500 + 500): 1,000 draws pin the 5% and 95% quantiles; the shipped
                # 4 x (1000 + 1000) took 4x as long (about 4 min a seed on 2 cores)
                num_chains=2,
                num_warmup=500,
                num_samples=500,
            )
            assert post.diagnostics.max_rhat() < 1.05
        else:
            # the Gaussian Laplace, as live snapshots use it (the exact item draws serve Δ)
            post = fit_laplace(data, rng_key=KEY, num_draws=1000)
        theta = post.flat("theta")
        low, high = np.quantile(theta, [0.05, 0.95], axis=0)
        r_theta.append(np.corrcoef(theta.mean(0), truth.theta)[0, 1])
        r_alpha.append(np.corrcoef(post.mean("alpha"), truth.alpha)[0, 1])
        covered.extend((low <= truth.theta) & (truth.theta <= high))
    return {
        "r_theta": float(np.mean(r_theta)),
        "r_theta_min": float(np.min(r_theta)),
        "r_alpha": float(np.mean(r_alpha)),
        "coverage90": float(np.mean(covered)),
    }


@pytest.mark.slow
@pytest.mark.parametrize("method", ["nuts", "fast"])
def test_recovery_at_paper_size(method):
    result = recovery(method)
    print(method, result)
    assert result["r_theta_min"] >= 0.95
    assert result["r_alpha"] >= 0.8
    # theta's unit is set by the priors (docs/statistics.md, "The unit"), so raw intervals of
    # theta cover the simulated theta less than nominally; measured over these seeds: 0.80 for
    # NUTS at 2 x (500 + 500) and for the Laplace approximation (centred on the joint mode).
    # The calibrated quantity is the net preference (tests/adaptive/estimation/test_calibration.py); this band
    # catches a fit whose theta is off in scale or sign (coverage far below 0.75)
    assert 0.75 <= result["coverage90"] <= 0.95
