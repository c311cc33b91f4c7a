"""Fast path: ``evalset significance --method fast`` against a plain NumPyro MAP + Laplace.

Every side is a fresh process with an empty JAX compilation cache (a new temporary
directory in ``EVALSET_JAX_CACHE_DIR`` and ``JAX_COMPILATION_CACHE_DIR``, or with
``--cold-cache none`` neither set), and its wall time is measured around the whole
process (interpreter start, imports, reading the data, compiling, fitting, printing).
Peak memory is the child's peak resident set (``ru_maxrss`` from ``os.wait4`` in a
small launcher process, see :data:`LAUNCHER`).
The data are a paper-size campaign (``--comparisons`` 20 x ``--prompts`` 200 x 3
judgments, ``stan_free_models.simulate.simulate_campaign``) written to a CSV file:

* ``plain``: the paper's model (Sedoc & Ungar: each cell's net rating u = #B - #A of
  its annotators, shifted to 7 categories 0..6; free ordered thresholds b_j ~ N(0, 2),
  log alpha_j ~ N(0, 1), theta_i ~ N(0, 1); P(y >= c) = sigmoid(alpha_j (theta_i - b_jc)))
  written plainly in NumPyro below (:func:`plain_side`, no import from the product;
  the likelihood in log space, as NumPyro's ``OrderedLogistic`` underflows in float32):
  optax L-BFGS on the potential energy (``initialize_model``) for the MAP, a dense
  ``jax.hessian`` at the mode, its Cholesky factor, 1000 Gaussian draws, and theta's
  posterior mean and sd printed;
* ``product-default``: ``evalset significance --data FILE --method fast --format json``
  (the default model);
* ``product-paper``: the same with ``--preset paper`` (the plain side's model).

With ``--ncm`` the default model also runs on data/chateval_ncm/judgments.csv twice
with one cache directory: ``ncm-cold`` fills it and ``ncm-warm`` is the warm figure.
With ``--scale N[,N...]`` it runs cold on a synthetic log of N judgments
(:func:`simulate_scale`: 13 systems, all 78 pairs, 23 prompts per 1,000 judgments, most
cells judged once) as ``scale-N``.

Prints one JSON line per side (``side``, ``seconds``, ``cpu_s``, ``peak_rss_mb``,
``longest_compile_s`` (from ``JAX_LOG_COMPILES``), ``exit_code``)
as it finishes, then a table of the ratios to the plain side and the absolute figures
against their targets: product-default / plain <= 2x, product-paper / plain <= 1.5x;
NCM warm < 5 s; cold scale runs 3,000 < 10 s, 100,000 < 90 s and < 2 GB, 1,000,000
< 30 s and < 2 GB (with ``--scale-prompts 2300``), 10,000,000 < 16 GB. A side that fails prints its stderr tail and the script exits 1.

    nice python benchmarks/fast_path.py                             # paper size, a few minutes
    nice python benchmarks/fast_path.py --ncm                       # and the NCM warm run
    nice python benchmarks/fast_path.py --sides --scale 3000,100000,1000000
    nice python benchmarks/fast_path.py --sides plain --scale 1000000 --scale-prompts 2300
    python benchmarks/fast_path.py --sides plain                    # the baseline alone, ~25 s
    python benchmarks/fast_path.py --comparisons 3 --prompts 12     # smoke (a test runs this)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NCM = ROOT / "data" / "chateval_ncm" / "judgments.csv"
SIDES = ("plain", "product-default", "product-paper")
#: (numerator, denominator, largest ratio)
RATIO_TARGETS = (("product-default", "plain", 2.0), ("product-paper", "plain", 1.5))
#: judgments -> (seconds, peak MB or None), cold, default model (issue 56: 1,000,000
#: judgments of 13 systems on 2,300 prompts under 30 s and 2 GB on 2 cores, 10,000,000
#: under 16 GB; with prompts growing with the judgments the item draws grow too)
SCALE_TARGETS = {
    3_000: (10.0, None),
    100_000: (90.0, 2048.0),
    1_000_000: (30.0, 2048.0),
    10_000_000: (None, 16384.0),
}
NCM_WARM_TARGET = 5.0
#: environment variables that could point a child at a cache it did not start with
CACHE_VARIABLES = ("EVALSET_JAX_CACHE", "JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE")
#: JAX's log of each XLA compile (``JAX_LOG_COMPILES=1`` in every side's environment)
COMPILE_LINE = re.compile(r"Finished XLA compilation of .* in ([0-9.eE+-]+) sec")


# ------------------------------------------------------------------ the data


def paper_campaign(path: Path, *, comparisons: int, prompts: int, seed: int) -> int:
    """Write the paper-size campaign to ``path`` (CSV); returns its number of judgments."""
    import polars as pl

    from stan_free_models.simulate import simulate_campaign

    camp = simulate_campaign(
        np.random.default_rng(seed), num_comparisons=comparisons, num_prompts=prompts
    )
    pl.DataFrame(camp.rows).write_csv(path)
    return len(camp.rows)


def scale_prompts(num_judgments: int) -> int:
    """Prompts of the scale log: 23 per 1,000 judgments (about one per 43; 2,300 at 100k)."""
    return max(2, (23 * num_judgments + 500) // 1000)


def simulate_scale(
    num_judgments: int, *, num_systems: int = 13, seed: int = 0, num_prompts: int | None = None
):
    """A log of ``num_judgments`` judgments in the common schema, vectorised.

    ``num_systems`` systems and every pair of them (78 for 13), ``num_prompts`` prompts
    (default :func:`scale_prompts`: growing with the judgments), every judgment a uniformly random (pair, prompt) cell (about 0.56
    judgments a cell, so about 3 in 4 judged cells are judged once), the system shown
    first at random, annotators from a pool of 500. Outcomes are graded responses with
    truth drawn from the priors: skills ~ N(0, 1/2) (so theta = s_B - s_A ~ N(0, 1)),
    log alpha ~ N(0, 1) and ordered thresholds ~ N(0, 2) per prompt, 3 categories.
    """
    import polars as pl

    rng = np.random.default_rng(seed)
    num_prompts = num_prompts or scale_prompts(num_judgments)
    first, second = np.triu_indices(num_systems, k=1)
    skill = rng.normal(0.0, math.sqrt(0.5), num_systems)
    alpha = np.exp(rng.normal(0.0, 1.0, num_prompts))
    b = np.sort(rng.normal(0.0, 2.0, (num_prompts, 2)), axis=1)
    pair = rng.integers(len(first), size=num_judgments)
    prompt = rng.integers(num_prompts, size=num_judgments)
    a, bb = first[pair], second[pair]
    swap = rng.random(num_judgments) < 0.5
    a, bb = np.where(swap, bb, a), np.where(swap, a, bb)
    eta = alpha[prompt, None] * ((skill[bb] - skill[a])[:, None] - b[prompt])
    p_at_least = 1.0 / (1.0 + np.exp(-eta))  # P(y >= 1), P(y >= 2): decreasing
    y = (rng.random(num_judgments)[:, None] < p_at_least).sum(axis=1)
    names = np.array([f"sys{i:02d}" for i in range(num_systems)])
    return pl.DataFrame(
        {
            "item_id": np.char.add("p", prompt.astype(str)),
            "system_a": names[a],
            "system_b": names[bb],
            "annotator_id": np.char.add("w", rng.integers(500, size=num_judgments).astype(str)),
            "winner": np.array(["a", "tie", "b"])[y],
            "dimension": "overall",
        }
    )


# ------------------------------------------------------------------ the plain side


def plain_side(path: str, seed: int, num_draws: int = 1000, max_iter: int = 1000) -> dict:
    """The paper's model in plain NumPyro: MAP (L-BFGS), dense Laplace, theta's mean and sd."""
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    import optax
    import polars as pl
    from jax.flatten_util import ravel_pytree
    from numpyro.distributions import constraints
    from numpyro.infer.util import initialize_model

    start = time.perf_counter()
    # each cell's net rating u = #B - #A, a comparison being an unordered pair of systems
    rows = pl.read_csv(path)
    flip = rows["system_a"] > rows["system_b"]
    rows = rows.with_columns(
        lo=pl.when(flip).then(pl.col("system_b")).otherwise(pl.col("system_a")),
        hi=pl.when(flip).then(pl.col("system_a")).otherwise(pl.col("system_b")),
        s=pl.col("winner").replace_strict({"a": -1, "tie": 0, "b": 1}, return_dtype=pl.Int64)
        * pl.when(flip).then(-1).otherwise(1),
    )
    cells = rows.group_by("lo", "hi", "item_id").agg(u=pl.col("s").sum(), n=pl.len())
    pairs = cells.select("lo", "hi").unique().sort("lo", "hi")
    prompts = cells["item_id"].unique().sort()
    cells = cells.join(pairs.with_row_index("comp"), on=["lo", "hi"]).join(
        pl.DataFrame({"item_id": prompts}).with_row_index("prompt"), on="item_id"
    )
    # u in [-n, n] rescaled to [-3, 3] (the identity for 3 judgments), then 0..6
    y = np.rint(3 * cells["u"].to_numpy() / cells["n"].to_numpy()).astype(np.int32) + 3
    comp = jnp.asarray(cells["comp"].to_numpy().astype(np.int32))
    prompt = jnp.asarray(cells["prompt"].to_numpy().astype(np.int32))
    num_c, num_p, k = pairs.height, len(prompts), 7

    def log_graded(eta, cut, y):
        """log P(y) = log(sigmoid(eta - c_(y-1)) - sigmoid(eta - c_y)), c_(-1) = -inf, c_(K-1)
        = inf, in log space: log sigmoid(eta - lo) + log sigmoid(hi - eta) + log(1 - e^(lo - hi))
        (NumPyro's OrderedLogistic takes the log of a difference of probabilities, which is
        -inf in float32 once a threshold is 17 logits away)."""
        inf = jnp.full((len(y), 1), jnp.inf)
        cut = jnp.concatenate([-inf, cut, inf], axis=-1)
        lo = jnp.take_along_axis(cut, y[:, None], axis=-1)[:, 0]
        hi = jnp.take_along_axis(cut, y[:, None] + 1, axis=-1)[:, 0]
        gap = jnp.log(-jnp.expm1(lo - hi))
        return jax.nn.log_sigmoid(eta - lo) + jax.nn.log_sigmoid(hi - eta) + gap

    def model(comp, prompt, y):
        with numpyro.plate("comparisons", num_c):
            theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
        with numpyro.plate("prompts", num_p):
            log_alpha = numpyro.sample("log_alpha", dist.Normal(0.0, 1.0))
            b = numpyro.sample(
                "b", dist.ImproperUniform(constraints.ordered_vector, (num_p,), (k - 1,))
            )
            # ordered thresholds, each N(0, 2): the sorted normals' density up to a constant
            numpyro.factor("b_prior", dist.Normal(0.0, 2.0).log_prob(b).sum(-1))
        alpha = jnp.exp(log_alpha)[prompt]
        # P(y >= c) = sigmoid(alpha (theta - b_c)): eta = alpha theta, cutpoints alpha b
        numpyro.factor("y", log_graded(alpha * theta[comp], alpha[:, None] * b[prompt], y).sum())

    key_init, key_draws = jax.random.split(jax.random.PRNGKey(seed))
    info = initialize_model(key_init, model, model_args=(comp, prompt, jnp.asarray(y)))
    potential_fn, postprocess_fn = info.potential_fn, info.postprocess_fn
    x0, unravel = ravel_pytree(info.param_info.z)

    def f(x):
        return potential_fn(unravel(x))

    # MAP in the unconstrained coordinates: optax L-BFGS until the gradient is small
    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(f)

    def step(carry):
        x, state = carry
        value, grad = value_and_grad(x, state=state)
        updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=f)
        return optax.apply_updates(x, updates), state

    def going(carry):
        _, state = carry
        count = optax.tree_utils.tree_get(state, "count")
        grad = optax.tree_utils.tree_get(state, "grad")
        return (count == 0) | ((count < max_iter) & (optax.tree_utils.tree_norm(grad) >= 1e-3))

    @jax.jit
    def fit(x0):
        x, state = jax.lax.while_loop(going, step, (x0, opt.init(x0)))
        return x, optax.tree_utils.tree_get(state, "count"), jnp.linalg.norm(jax.grad(f)(x))

    x_map, iterations, grad_norm = fit(x0)
    map_seconds = time.perf_counter() - start

    # dense Laplace: precision = Hessian at the mode, draws = mode + L^-T z
    hess = jax.jit(jax.hessian(f))(x_map)
    hess = 0.5 * (hess + hess.T)
    chol = jnp.linalg.cholesky(hess)
    z = jax.random.normal(key_draws, (x_map.size, num_draws))
    draws = x_map[:, None] + jax.scipy.linalg.solve_triangular(chol, z, lower=True, trans="T")
    theta = jax.vmap(lambda x: postprocess_fn(unravel(x))["theta"])(draws.T)
    theta = np.asarray(theta, np.float64)
    if not np.isfinite(theta).all():
        raise FloatingPointError("the Hessian at the mode is not positive definite")
    return {
        "comparisons": pairs.rows(),
        "theta_mean": theta.mean(0).tolist(),
        "theta_sd": theta.std(0).tolist(),
        "num_params": int(x_map.size),
        "num_cells": len(y),
        "map_iterations": int(iterations),
        "map_grad_norm": float(grad_norm),
        "data_and_map_seconds": round(map_seconds, 2),
        "laplace_seconds": round(time.perf_counter() - start - map_seconds, 2),
    }


# ------------------------------------------------------------------ running a side


def child_env(cache: Path | None) -> dict[str, str]:
    """This process's environment without any compilation cache, then ``cache`` if given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(CACHE_VARIABLES)}
    env["JAX_LOG_COMPILES"] = "1"  # the longest compile, from the side's stderr
    env["EVALSET_FIT_CACHE_DIR"] = ""  # no fit results from an earlier run (evalset.fit_cache)
    if cache is not None:
        env["EVALSET_JAX_CACHE_DIR"] = env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    return env


def evalset() -> list[str]:
    beside = Path(sys.executable).with_name("evalset")
    return [str(beside if beside.exists() else ROOT / ".venv" / "bin" / "evalset")]


#: runs argv[2:] and writes its wall time, peak resident set and exit code to argv[1].
#: A child's ru_maxrss includes the resident set its parent had when it forked (Linux
#: keeps the old memory's high-water mark across exec), so the sides are started from
#: this small process rather than from the benchmark, which may hold a large campaign.
LAUNCHER = """
import json, os, signal, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[2:])
signal.signal(signal.SIGTERM, lambda *_: proc.kill())
_, status, usage = os.wait4(proc.pid, 0)
seconds = time.perf_counter() - start
with open(sys.argv[1], "w") as f:
    cpu = usage.ru_utime + usage.ru_stime
    json.dump([seconds, usage.ru_maxrss, os.waitstatus_to_exitcode(status), cpu], f)
"""


def run(side: str, cmd: list[str], env: dict[str, str], timeout: float) -> dict:
    """Run ``cmd``: wall time around the whole process, its peak resident set, its output."""
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryDirectory() as tmp,
    ):
        figures = Path(tmp) / "figures.json"
        launcher = [sys.executable, "-c", LAUNCHER, str(figures), *cmd]
        proc = subprocess.Popen(launcher, stdout=out, stderr=err, env=env, cwd=ROOT)
        timed_out = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also on KeyboardInterrupt: the launcher stops the side
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
        if figures.exists():
            seconds, max_rss_kib, exit_code, cpu = json.loads(figures.read_text())
        else:
            seconds, max_rss_kib, exit_code, cpu = math.nan, 0, proc.returncode or 1, math.nan
    if timed_out:
        stderr += f"\n(stopped after {timeout:.0f} s)"
        exit_code = exit_code or 1
    compiles = [float(t) for t in COMPILE_LINE.findall(stderr)]
    return {
        "side": side,
        "seconds": round(seconds, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_mb": round(max_rss_kib / 1024, 1),  # KiB on Linux
        "longest_compile_s": round(max(compiles), 2) if compiles else None,
        "exit_code": exit_code,
        "_stdout": stdout,
        "_stderr": stderr,
    }


def report(result: dict) -> None:
    """One JSON line (stdout); a failed side's stderr tail (stderr)."""
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("_")}), flush=True)
    if result["exit_code"] != 0:
        tail = result["_stderr"].strip().splitlines()[-25:]
        print(f"--- {result['side']} failed; stderr tail:", file=sys.stderr)
        print("\n".join(tail), file=sys.stderr, flush=True)


def theta_gap(plain: dict, product: dict) -> float | None:
    """Largest |difference| of theta's posterior means, plain vs the product, in plain sds."""
    try:
        fit = json.loads(plain["_stdout"].strip().splitlines()[-1])
        rows = json.loads(product["_stdout"])
        means = {}
        for r in rows:
            means[(r["system_a"], r["system_b"])] = r["mean"]
            means[(r["system_b"], r["system_a"])] = -r["mean"]
        gaps = [
            abs(means[tuple(pair)] - m) / s
            for pair, m, s in zip(fit["comparisons"], fit["theta_mean"], fit["theta_sd"])
        ]
        return max(gaps)
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def table(results: dict[str, dict]) -> list[str]:
    """The ratio lines and the absolute figures against their targets."""
    lines = [f"{'figure':<34}{'value':>10}  {'target':<14}ok"]
    ok = {True: "yes", False: "NO"}
    for num, den, target in RATIO_TARGETS:
        a, b = results.get(num), results.get(den)
        if a and b and a["exit_code"] == b["exit_code"] == 0:
            ratio = a["seconds"] / b["seconds"]
            name = f"{num} / {den}"
            lines.append(
                f"{name:<34}{ratio:>9.2f}x  {'<= ' + str(target) + 'x':<14}{ok[ratio <= target]}"
            )
    warm = results.get("ncm-warm")
    if warm and warm["exit_code"] == 0:
        s = warm["seconds"]
        lines.append(f"{'ncm-warm (s)':<34}{s:>10.1f}  {'< 5 s':<14}{ok[s < NCM_WARM_TARGET]}")
    for side, r in results.items():
        if not side.startswith("scale-") or r["exit_code"] != 0:
            continue
        n = int(side.removeprefix("scale-"))
        seconds, mb = SCALE_TARGETS.get(n, (None, None))
        s = r["seconds"]
        target = f"< {seconds:.0f} s" if seconds else "-"
        lines.append(
            f"{side + ' (s)':<34}{s:>10.1f}  {target:<14}{ok[s < seconds] if seconds else ''}"
        )
        if "cpu_s" in r:
            lines.append(f"{side + ' CPU (s)':<34}{r['cpu_s']:>10.1f}  {'-':<14}")
        plain = results.get("plain")
        if plain and plain["exit_code"] == 0:  # the baseline measured in this run
            ratio = s / plain["seconds"]
            lines.append(f"{side + ' / plain (time)':<34}{ratio:>9.2f}x  {'-':<14}")
        if mb:
            m = r["peak_rss_mb"]
            lines.append(f"{side + ' peak (MB)':<34}{m:>10.0f}  {f'< {mb:.0f} MB':<14}{ok[m < mb]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sides",
        nargs="*",
        choices=SIDES,
        default=list(SIDES),
        help="paper-size sides to run (default: all; none with a bare --sides)",
    )
    parser.add_argument("--ncm", action="store_true", help="add the warm-cache run on the NCM log")
    parser.add_argument(
        "--scale",
        type=lambda s: [int(float(n)) for n in s.split(",")],
        default=[],
        help="N[,N...]: the default fast path, cold, on a synthetic log of N judgments",
    )
    parser.add_argument(
        "--scale-prompts",
        type=int,
        default=None,
        help="prompts of every --scale log (default: 23 per 1,000 judgments)",
    )
    parser.add_argument(
        "--cold-cache",
        choices=["fresh", "none"],
        default="fresh",
        help="a cold side's cache: a new empty directory (default) or none",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="per side, seconds")
    parser.add_argument("--plain-side", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.plain_side:  # the child process of the plain side
        print(json.dumps(plain_side(args.plain_side, args.seed)))
        return 0

    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="fast_path-") as tmp:
        tmp_dir = Path(tmp)

        def cold() -> Path | None:
            if args.cold_cache == "none":
                return None
            return Path(tempfile.mkdtemp(prefix="jax-cache-", dir=tmp_dir))

        def product(data: Path, *extra: str) -> list[str]:
            fast = ["significance", "--data", str(data), "--method", "fast", "--format", "json"]
            return [*evalset(), *fast, "--seed", str(args.seed), "--quiet", *extra]

        def side(name: str, cmd: list[str], cache: Path | None) -> None:
            results[name] = run(name, cmd, child_env(cache), args.timeout)
            report(results[name])

        if args.sides:
            data = tmp_dir / "campaign.csv"
            n = paper_campaign(
                data, comparisons=args.comparisons, prompts=args.prompts, seed=args.seed
            )
            print(f"paper-size campaign: {n:,} judgments", file=sys.stderr, flush=True)
            commands = {
                "plain": [
                    sys.executable,
                    __file__,
                    "--plain-side",
                    str(data),
                    "--seed",
                    str(args.seed),
                ],
                "product-default": product(data),
                "product-paper": product(data, "--preset", "paper"),
            }
            for name in args.sides:
                side(name, commands[name], cold())
            if name == "plain" and results[name]["exit_code"] == 0:
                fit = json.loads(results[name]["_stdout"].strip().splitlines()[-1])
                keep = ("num_params", "num_cells", "map_iterations", "map_grad_norm")
                keep += ("data_and_map_seconds", "laplace_seconds")
                print(f"plain: {json.dumps({k: fit[k] for k in keep})}", file=sys.stderr)
        if args.ncm:
            shared = tmp_dir / "jax-cache-ncm"
            shared.mkdir()
            side("ncm-cold", product(NCM), shared)
            side("ncm-warm", product(NCM), shared)
        for n in args.scale:
            data = tmp_dir / f"scale-{n}.csv"
            simulate_scale(n, seed=args.seed, num_prompts=args.scale_prompts).write_csv(data)
            side(f"scale-{n}", product(data), cold())

    if "plain" in results and "product-paper" in results:
        gap = theta_gap(results["plain"], results["product-paper"])
        if gap is not None:
            print(
                f"theta means, product-paper vs plain: largest gap {gap:.3f} plain posterior sds",
                file=sys.stderr,
            )
    print("\n".join(table(results)))
    return 0 if all(r["exit_code"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
