"""Parameter recovery at the paper's size, in full: both fits on all five seeds.

20 comparisons x 200 prompts x 3 annotators, truth drawn from the priors, as
tests/stan_free_models/test_recovery.py (which checks NUTS on the first two seeds only, to keep the slow
suite short). NUTS takes about 2.5 minutes a seed on 2 cores.

    python research/recovery.py [--methods nuts,fast]
"""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np

from stan_free_models.laplace import fit_laplace
from stan_free_models.nuts import fit_nuts
from stan_free_models.simulate import draw_truth, simulate_net_ratings

KEY = jax.random.PRNGKey(0)
SEEDS = (11, 12, 13, 14, 15)


def recovery(method: str, seeds: tuple[int, ...] = SEEDS) -> dict:
    """r(theta), its minimum over seeds, r(alpha) and the 90% intervals' coverage of theta."""
    r_theta, r_alpha, covered = [], [], []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        truth = draw_truth(rng, 20, 200, 7)
        data = simulate_net_ratings(rng, truth)
        if method == "nuts":
            post = fit_nuts(data, rng_key=KEY, num_chains=2, num_warmup=500, num_samples=500)
        else:
            post = fit_laplace(data, rng_key=KEY, num_draws=1000)
        theta = post.flat("theta")
        low, high = np.quantile(theta, [0.05, 0.95], axis=0)
        r_theta.append(np.corrcoef(theta.mean(0), truth.theta)[0, 1])
        r_alpha.append(np.corrcoef(post.mean("alpha"), truth.alpha)[0, 1])
        covered.extend((low <= truth.theta) & (truth.theta <= high))
    return {
        "method": method,
        "seeds": list(seeds),
        "r_theta": float(np.mean(r_theta)),
        "r_theta_min": float(np.min(r_theta)),
        "r_alpha": float(np.mean(r_alpha)),
        "coverage90": float(np.mean(covered)),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="nuts,fast")
    for name in parser.parse_args().methods.split(","):
        print(json.dumps(recovery(name)))
