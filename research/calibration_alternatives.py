"""Two alternatives to the then default model's Δ, measured on the varied simulator and not adopted.

Each fits the same campaigns and subsamples as ``research/calibration.py`` and writes rows in
its format (``python research/calibration.py --summarize FILE`` prints them, with the slope of
the true Δ on its estimate and the sd of z). research/how_the_defaults_were_chosen.md ("What
the varied simulator's miss is") gives the figures and why neither was adopted.

- ``--variant learned-theta-scale`` (NUTS, diagonal sampler): theta ~ N(0, sigma) with
  sigma ~ HalfNormal(1) in place of theta ~ N(0, 1), so the shrinkage of the comparisons
  follows their spread in the campaign.
- ``--variant cells-at-prior`` (fast path): Δ with every judged cell's effect at its prior
  N(0, tau) instead of at its posterior given the cell's own judgments (the structural
  expectation plus the spread of realised cell effects). Each fit is scored both ways; the
  rows say which in ``cells``.

Both change the model by wrapping the shipped functions in this process only; the package
is not changed.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import sys
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import calibration as cal  # noqa: E402
import polars as pl  # noqa: E402

from stan_free_models.conditional import REFINE_SWEEPS  # noqa: E402

#: the default model when these were measured (before the cluster-robust intervals):
#: a prompt-by-comparison effect integrated over a grid of its sd, exact item draws and
#: Gibbs sweeps below 30 judgments a prompt, no lapse
MODEL_OF_THE_TIME = dict(
    cell_effect=True, lapse=False, exact_items=True, refine_sweeps=REFINE_SWEEPS
)


def learned_theta_scale() -> None:
    """Swap the model function the engine binds for one with a learned scale of theta."""
    import numpyro
    import numpyro.distributions as dist

    import stan_free_models.inference as inference
    from stan_free_models.graded_response import graded_response

    def model(*args, **kwargs):
        scale = numpyro.sample("theta_sd", dist.HalfNormal(1.0))
        trace = numpyro.handlers.trace(graded_response).get_trace(*args, **kwargs)
        theta = trace["theta"]["value"]
        # replace the model's N(0, 1) by N(0, scale)
        numpyro.factor(
            "theta_scale",
            dist.Normal(0.0, scale).log_prob(theta).sum()
            - dist.Normal(0.0, 1.0).log_prob(theta).sum(),
        )

    inference.graded_response = model  # type: ignore[assignment]


def cells_at_prior():
    """The predictive function with each cell's effect weighted by its prior, not posterior."""
    import stan_free_models.predictive as predictive

    source = textwrap.dedent(inspect.getsource(predictive._compiled.__wrapped__))
    posterior = "post_w = jax.nn.softmax(lik + log_w, axis=-1)  # (M, Q)"
    if posterior not in source:
        raise SystemExit("stan_free_models.predictive changed: update cells_at_prior()")
    source = source.replace(
        posterior, "post_w = jnp.broadcast_to(jnp.exp(log_w)[None, :], lik.shape)"
    ).replace("@functools.lru_cache(maxsize=16)\n", "")
    namespace = dict(vars(predictive))
    exec(source, namespace)  # noqa: S102 - the shipped function, one line changed
    return functools.lru_cache(maxsize=16)(namespace["_compiled"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--variant", required=True, choices=["learned-theta-scale", "cells-at-prior"]
    )
    parser.add_argument("--kind", choices=list(cal.KINDS), default="varied")
    parser.add_argument("--campaigns", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--fraction", type=float, default=0.05)
    parser.add_argument("--jsonl", required=True)
    args = parser.parse_args()

    import stan_free_models.predictive as predictive
    from adaptive.estimation.fitting import preset_config
    from adaptive.estimation.pipeline import analyze
    from adaptive.estimation.significance import compare

    shipped = predictive._compiled
    scorings = {"posterior": shipped}
    if args.variant == "learned-theta-scale":
        learned_theta_scale()
        config_of = functools.partial(
            preset_config,
            "default",
            method="nuts",
            sampler="diagonal",
            # the alternatives were measured against the model-based default of the time,
            # without random answers: the cell effect, exact item draws and sweeps
            **MODEL_OF_THE_TIME,
            num_chains=2,
            num_warmup=300,
            num_samples=500,
        )
    else:
        scorings["prior"] = cells_at_prior()
        config_of = functools.partial(
            preset_config, "default", method="fast", num_draws=1000, **MODEL_OF_THE_TIME
        )
    for seed in range(args.first_seed, args.first_seed + args.campaigns):
        camp = cal.campaign(args.kind, seed, 20, 200)
        frame = cal.subsample(pl.DataFrame(camp.rows), args.fraction, seed)
        start = time.perf_counter()
        result = analyze(frame, config=config_of(seed=seed), group_redundant=False)
        truth = cal.fitted_truth(camp, result.cells)
        for name, compiled in scorings.items():
            predictive._compiled = compiled  # type: ignore[assignment]
            rows = compare(result.posterior, result.cells, effect=True)
            predictive._compiled = shipped  # type: ignore[assignment]
            rec = {
                "kind": args.kind,
                "variant": args.variant,
                "cells": name,
                "seed": seed,
                "fraction": args.fraction,
                "method": ("nuts" if args.variant == "learned-theta-scale" else "fast")
                + ("" if name == "posterior" else "-" + name),
                "seconds": time.perf_counter() - start,
                "tau_mean": float(result.posterior.flat("tau").mean()),
                "any_adjusted": any(r["significant_adjusted"] for r in rows),
                **cal.coverage_fields(rows, truth),
            }
            cal.record(
                args.jsonl,
                rec,
                f"seed {seed} {rec['method']}: covered {rec['covered']}/{rec['num']}, "
                f"|z| {rec['abs_z']:.2f}, tau {rec['tau_mean']:.2f}",
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
