"""NUTS efficiency: the product's sampler against a plain NumPyro run of the same model, same data, same run.

    python benchmarks/nuts.py [--comparisons 20] [--prompts 200] [--fraction 1.0]
                              [--chains 4] [--warmup 1000] [--samples 1000] [--product-warmup 500]
                              [--preset default|paper] [--product-samples N] [--product-min-ess 400]
                              [--product-gaps log|softplus]

The model is the default one (every judgment a 3-category response, a
prompt-by-comparison effect integrated out of each cell), or with ``--preset paper``
the paper's (each cell's net rating, 7 categories, free thresholds, no cell effect).
Both sides run cold in their own process, so compile time is included:

* ``plain``: ``numpyro.infer.NUTS`` on ``graded_response`` written the
  straightforward way (one likelihood term per judgment), its default start and
  diagonal mass-matrix adaptation;
* ``product``: ``adaptive.estimation.fitting`` with ``method="nuts"``: the cells'
  sufficient statistics and NUTS on Laplace-whitened coordinates
  (``stan_free_models.whitened_nuts``), ``--product-warmup`` warm-up iterations;
  with ``--product-min-ess`` it samples in blocks of ``--product-samples`` draws per
  chain until every parameter has bulk and tail ESS >= that and R-hat <= 1.01.

Prints one JSON object per side and the ratio of min bulk ESS per second (ArviZ's
``ess(method="bulk")`` over theta, log alpha, the thresholds and tau), max
R-hat, and the largest difference of posterior means of theta in posterior sds and in
Monte Carlo standard errors of that difference (from each side's bulk ESS: a difference
within about 2 of them is what two exact samplers' finite runs give), also split into
the common shift of every theta (the direction only the priors fix, the slowest for
plain NUTS, so it moves every comparison's gap at once) and the centred thetas.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue as queue_module
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _data(args):
    import numpy as np
    import polars as pl

    from adaptive.core.cells import build_cells
    from adaptive.estimation.fitting import model_data
    from stan_free_models.simulate import simulate_campaign

    camp = simulate_campaign(
        np.random.default_rng(args["seed"]),
        num_comparisons=args["comparisons"],
        num_prompts=args["prompts"],
    )
    frame = pl.DataFrame(camp.rows)
    if args["fraction"] < 1.0:
        rng = np.random.default_rng(10_000 + args["seed"])
        keep = rng.choice(frame.height, size=round(args["fraction"] * frame.height), replace=False)
        frame = frame[np.sort(keep)]
    cells = build_cells(frame)
    if args["preset"] == "paper":
        return model_data(cells, likelihood="net", parameterization="comparison", cell_effect=False)
    return model_data(cells, likelihood="judgment", parameterization="comparison", cell_effect=True)


def _side(side: str, args: dict, queue) -> None:
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args['chains']}"
    sys.path.insert(0, str(ROOT))
    import jax
    import jax.numpy as jnp
    import numpy as np

    from stan_free_models.arviz_safe import import_arviz

    az = import_arviz()
    data = _data(args)
    sites = ("theta", "log_alpha", "b") + (("tau",) if data.has_cells else ())
    start = time.perf_counter()
    if side == "plain":
        from numpyro.infer import MCMC, NUTS

        from stan_free_models.graded_response import graded_response

        cell_args = {}
        if data.has_cells:
            cell_args = dict(cell=jnp.asarray(data.cell), num_cells=data.num_cells)
        mcmc = MCMC(
            NUTS(graded_response),
            num_warmup=args["warmup"],
            num_samples=args["samples"],
            num_chains=args["chains"],
            progress_bar=False,
        )
        mcmc.run(
            jax.random.PRNGKey(args["seed"]),
            comparison=jnp.asarray(data.comparison),
            item=jnp.asarray(data.item),
            num_comparisons=data.num_comparisons,
            num_items=data.num_items,
            num_categories=data.num_categories,
            y=jnp.asarray(data.y),
            weight=jnp.asarray(data.weight),
            **cell_args,
            extra_fields=("diverging", "num_steps"),
        )
        samples = {k: np.asarray(v, np.float64) for k, v in mcmc.get_samples(True).items()}
        samples.pop("theta", None)
        draws = {k: samples[k] for k in sites if k != "theta"}
        draws["theta"] = np.asarray(mcmc.get_samples(True)["theta"], np.float64)
        divergences = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
        steps = float(np.asarray(mcmc.get_extra_fields()["num_steps"]).mean())
        blocks = None
    else:
        from stan_free_models.whitened_nuts import fit_nuts_whitened

        post = fit_nuts_whitened(
            data,
            rng_key=jax.random.PRNGKey(args["seed"]),
            num_chains=args["chains"],
            num_warmup=args["product_warmup"],
            num_samples=args["product_samples"] or args["samples"],
            min_ess=args["product_min_ess"],
            gaps=args.get("product_gaps", "softplus"),
        )
        draws = {k: post.draws[k] for k in sites}
        divergences = post.diagnostics.num_divergences
        steps = post.info["mean_leapfrog_steps"]
        blocks = post.info["blocks"]
    seconds = time.perf_counter() - start
    ess, tail, rhat = {}, {}, {}
    for name, x in draws.items():
        x = x.reshape(x.shape[:2] + (-1,))
        ess[name] = float(min(az.ess(x[..., i], method="bulk") for i in range(x.shape[-1])))
        tail[name] = float(min(az.ess(x[..., i], method="tail") for i in range(x.shape[-1])))
        rhat[name] = float(max(az.rhat(x[..., i]) for i in range(x.shape[-1])))
    theta = draws["theta"].reshape(-1, draws["theta"].shape[-1])
    # theta's weakest direction is the common shift (theta and every threshold together,
    # fixed only by the priors): its average apart from the comparisons' differences
    shift = draws["theta"].mean(-1, keepdims=True)
    centred = draws["theta"] - shift

    def mean_and_mcse(x):  # (chains, draws, k) -> ArviZ's mean and its Monte Carlo error
        return [
            [float(x[..., i].mean()), float(az.mcse(x[..., i], method="mean"))]
            for i in range(x.shape[-1])
        ]

    queue.put(
        {
            "side": side,
            "seconds": round(seconds, 1),
            "draws_per_chain": int(draws["theta"].shape[1]),
            "blocks": blocks,
            "min_bulk_ess": round(min(ess.values()), 1),
            "min_tail_ess": round(min(tail.values()), 1),
            "min_ess_per_second": min(ess.values()) / seconds,
            "max_rhat": round(max(rhat.values()), 4),
            "ess_by_site": {k: round(v, 1) for k, v in ess.items()},
            "divergences": divergences,
            "mean_leapfrog_steps": steps,
            "theta_mean": theta.mean(0).tolist(),
            "mcse": {
                "theta": mean_and_mcse(draws["theta"]),
                "shift": mean_and_mcse(shift),
                "centred": mean_and_mcse(centred),
            },
            "theta_sd": theta.std(0).tolist(),
        }
    )


def measure(side: str, args: dict) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_side, args=(side, args, queue))
    proc.start()
    while True:
        try:
            out = queue.get(timeout=5)
        except queue_module.Empty:
            if not proc.is_alive():
                raise RuntimeError(f"the {side} run failed (exit code {proc.exitcode})") from None
            continue
        proc.join()
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--product-warmup", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", choices=["default", "paper"], default="default")
    parser.add_argument("--product-samples", type=int, default=None, help="default: --samples")
    parser.add_argument("--product-min-ess", type=float, default=None)
    parser.add_argument(
        "--product-gaps",
        choices=["log", "softplus"],
        default="softplus",
        help="coordinates of the gaps between free thresholds in the product's sampler",
    )
    parser.add_argument(
        "--sides",
        nargs="+",
        choices=["plain", "product"],
        default=["plain", "product"],
        help="run only these (the ratio needs both)",
    )
    parser.add_argument(
        "--save", type=Path, default=None, help="write every side's full result (JSON) here"
    )
    args = vars(parser.parse_args())
    save = args.pop("save")
    results = {side: measure(side, args) for side in args["sides"]}
    if save is not None:
        save.write_text(json.dumps(results))
    hidden = ("theta_", "mcse")
    for r in results.values():
        print(json.dumps({k: v for k, v in r.items() if not k.startswith(hidden)}))
    if len(results) < 2:
        return 0
    import numpy as np

    plain, product = results["plain"], results["product"]
    gap = np.abs(np.array(plain["theta_mean"]) - np.array(product["theta_mean"])) / np.array(
        plain["theta_sd"]
    )

    def z(name: str) -> np.ndarray:  # difference of the two means in their Monte Carlo errors
        a, b = np.array(plain["mcse"][name]), np.array(product["mcse"][name])
        return np.abs(a[:, 0] - b[:, 0]) / np.hypot(a[:, 1], b[:, 1])

    theta_z, centred_z = z("theta"), z("centred")
    print(
        json.dumps(
            {
                "setting": args,
                "ess_per_second_ratio": product["min_ess_per_second"] / plain["min_ess_per_second"],
                "max_theta_mean_gap_in_sd": float(gap.max()),
                "max_theta_mean_gap_in_mcse": float(theta_z.max()),
                "theta_mean_gaps_over_2_mcse": int(np.sum(theta_z > 2)),
                "num_theta": len(theta_z),
                "common_shift_gap_in_mcse": float(z("shift")[0]),
                "max_centred_theta_gap_in_mcse": float(centred_z.max()),
                "centred_theta_gaps_over_2_mcse": int(np.sum(centred_z > 2)),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
