"""The lapse model's likelihood: the mixture in probability space against the log-space one, same run.

    python benchmarks/lapse_likelihood.py [--cells 4096] [--repeats 20]
                                          [--fit] [--kind varied] [--fractions 1 0.05] [--seed 0]

With a lapse rate every judgment's probability is (1 - lapse) P_grm(c) + lapse / K.
``stan_free_models.graded_response.lapse_log_probs`` forms it from products of sigmoids
and takes one log per category; the baseline is the log-space mixture the lapse fits
used before (log-space category probabilities, then a logaddexp with log(lapse / K)),
defined here. Both are what a fit differentiates: the value and gradient of a cell
log-likelihood sum (``cell_counts_log_lik``, eleven quadrature nodes) over ``--cells``
cells, jitted, compiled first, then ``--repeats`` alternating timings. Prints one JSON
line: median milliseconds of each side, their ratio (> 1: the probability-space mixture
is faster) and the largest absolute difference of the cell log-likelihoods.

``--fit`` also times a whole fast fit of the default model with ``lapse=True`` on a
simulated campaign (``--kind``: ``varied`` has 20% random annotators, ``paper`` none) at
each of ``--fractions``, each side in its own process (the compiled programs are
cached per process), compile and one warm fit per side; one JSON line per fraction with
the warm seconds, their ratio, and the largest difference of Δ between the sides in
units of Δ's sd.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "research"))  # the calibration's simulators and subsample


def log_space_mixture(cum_logits, lapse):
    """The baseline: log((1 - lapse) P(c) + lapse / K) as logaddexp of log-space terms."""
    import jax.numpy as jnp

    from stan_free_models.graded_response import graded_log_probs_all

    logp = graded_log_probs_all(cum_logits)
    if lapse is None:
        return logp
    k = logp.shape[-1]
    return jnp.logaddexp(jnp.log1p(-lapse) + logp, jnp.log(lapse / k))


def kernel(args) -> dict:
    import jax
    import jax.numpy as jnp

    import stan_free_models.graded_response as gr

    rng = np.random.default_rng(args.seed)
    m = args.cells
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    eta, alpha = f32(rng.normal(size=m)), f32(np.exp(rng.normal(size=m)))
    b = f32(np.sort(rng.normal(0.0, 2.0, (m, 2)), axis=1))
    counts = f32(rng.multinomial(3, [0.3, 0.4, 0.3], size=m))
    tau, lapse = jnp.float32(0.5), jnp.float32(0.1)
    implementations = {"log_space": log_space_mixture, "probability_space": gr.lapse_log_probs}

    def program(impl):
        def total(eta, alpha, b):
            with mixture(impl):  # read at trace time only
                return gr.cell_counts_log_lik(eta, alpha, b, tau, counts, lapse=lapse).sum()

        return jax.jit(jax.value_and_grad(total, argnums=(0, 1, 2)))

    programs = {name: program(impl) for name, impl in implementations.items()}
    values = {}
    for name, fn in programs.items():
        jax.block_until_ready(fn(eta, alpha, b))  # compile
        with mixture(implementations[name]):
            values[name] = np.asarray(
                gr.cell_counts_log_lik(eta, alpha, b, tau, counts, lapse=lapse)
            )
    times: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(args.repeats):
        for name, fn in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(eta, alpha, b))
            times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    return {
        "cells": m,
        "log_space_ms": round(med["log_space"], 3),
        "probability_space_ms": round(med["probability_space"], 3),
        "ratio": round(med["log_space"] / med["probability_space"], 2),
        "max_abs_diff_cell_loglik": float(
            np.abs(values["log_space"] - values["probability_space"]).max()
        ),
    }


@contextlib.contextmanager
def mixture(impl):
    """``stan_free_models.graded_response.lapse_log_probs`` is ``impl`` inside the block
    (the cell likelihood reads it when it runs or is traced)."""
    import stan_free_models.graded_response as gr

    saved = gr.lapse_log_probs
    gr.lapse_log_probs = impl
    try:
        yield
    finally:
        gr.lapse_log_probs = saved


def one_side(side: str, kind: str, fraction: float, seed: int) -> dict:
    """In a fresh process: compile and one warm lapse fit with ``side``'s mixture."""
    import polars as pl
    from calibration import campaign, subsample

    from adaptive.estimation.fitting import preset_config
    from adaptive.estimation.pipeline import analyze
    from adaptive.estimation.significance import compare

    frame = subsample(pl.DataFrame(campaign(kind, seed, 20, 200).rows), fraction, seed)
    config = preset_config("default", method="fast", lapse=True, seed=seed, num_draws=1000)
    seconds = []
    with mixture(log_space_mixture) if side == "log_space" else contextlib.nullcontext():
        for _ in range(2):  # compile, then warm
            start = time.perf_counter()
            result = analyze(frame, config=config, group_redundant=False)
            seconds.append(time.perf_counter() - start)
    rows = compare(result.posterior, result.cells)
    return {
        "compile_s": seconds[0],
        "warm_s": seconds[1],
        "net": [r["net_preference"] for r in rows],
        "sd": [r["net_sd"] for r in rows],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fit", action="store_true", help="also time whole lapse fits")
    parser.add_argument("--kind", choices=["varied", "paper"], default="varied")
    parser.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.05])
    parser.add_argument("--side", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(one_side(args.side, args.kind, args.fractions[0], args.seed)))
        return 0
    print(json.dumps(kernel(args)), flush=True)
    if not args.fit:
        return 0
    for fraction in args.fractions:
        out = {}
        for side in ("log_space", "probability_space"):
            cmd = [sys.executable, __file__, "--side", side, "--kind", args.kind]
            cmd += ["--fractions", str(fraction), "--seed", str(args.seed)]
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            out[side] = json.loads(done.stdout.strip().splitlines()[-1])
        a, b = out["log_space"], out["probability_space"]
        gap = np.abs(np.array(a["net"]) - np.array(b["net"])) / np.array(a["sd"])
        print(
            json.dumps(
                {
                    "kind": args.kind,
                    "fraction": fraction,
                    "log_space_warm_s": round(a["warm_s"], 1),
                    "probability_space_warm_s": round(b["warm_s"], 1),
                    "ratio": round(a["warm_s"] / b["warm_s"], 2),
                    "log_space_compile_s": round(a["compile_s"], 1),
                    "probability_space_compile_s": round(b["compile_s"], 1),
                    "max_net_diff_in_sd": round(float(gap.max()), 3),
                    "sd_ratio_median": round(float(np.median(np.array(b["sd"]) / a["sd"])), 3),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
