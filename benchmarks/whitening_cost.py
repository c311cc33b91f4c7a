"""The cost of one NUTS gradient: the model alone, whitened by a dense factor, and by the arrowhead one.

    python benchmarks/whitening_cost.py [--preset paper|default] [--comparisons 20] [--prompts 200]
                                        [--fraction 1.0] [--repeats 300]

NUTS pays one gradient of the potential per leapfrog step. The whitened sampler
(``stan_free_models.whitened_nuts``) evaluates the model at ``x0 + L w``; this times,
in one process on one simulated campaign, the compiled gradient of

* ``model``: the model's potential in its own coordinates (what plain NUTS pays);
* ``dense``: through a dense ``L`` (``whitening``, a D x D product);
* ``arrowhead``: through the block factor the sampler uses (``arrowhead_whitening``),
  in the sampler's coordinates (softplus gaps);
* ``arrowhead_log_gaps``: the same in the model's coordinates (``gaps="log"``);

each compiled first, then ``--repeats`` calls, and prints one JSON line: D, the
milliseconds per gradient of each and the ratios to ``model``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["default", "paper"], default="paper")
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--fraction", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=300)
    args = vars(parser.parse_args())

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.flatten_util import ravel_pytree
    from nuts import _data

    from stan_free_models import whitened_nuts as wn
    from stan_free_models.inference import _dynamic_args, _potential_fn, _static_key, pad_data

    data = _data(args)
    padded = pad_data(data)
    static = _static_key(padded)
    x0 = wn._mode_vector(data, static)
    dyn = _dynamic_args(padded)
    y0 = wn.to_sampler(x0, static, "softplus")
    potential = _potential_fn(static)
    _, unravel = ravel_pytree(wn._example_params(static))
    soft = wn._flat_potential(static, "softplus")
    dense = jnp.asarray(wn.whitening(wn.laplace_hessian(static, x0, dyn)), jnp.float32)
    arrow = wn.arrowhead_whitening(wn.laplace_hessian(static, y0, dyn, "softplus"), static)
    factors = arrow.arrays()
    arrow_log = wn.arrowhead_whitening(wn.laplace_hessian(static, x0, dyn), static).arrays()
    x0j, y0j = jnp.asarray(x0, jnp.float32), jnp.asarray(y0, jnp.float32)
    w = jnp.full(len(x0), 0.1, jnp.float32)
    sides = {
        "model": (jax.jit(jax.grad(lambda x, a: potential(unravel(x), *a))), (x0j, dyn)),
        "dense": (
            jax.jit(jax.grad(lambda w, lower, a: potential(unravel(x0j + lower @ w), *a))),
            (w, dense, dyn),
        ),
        "arrowhead": (
            jax.jit(jax.grad(lambda w, f, a: soft(y0j + wn.apply_arrowhead(w, *f), a))),
            (w, factors, dyn),
        ),
        "arrowhead_log_gaps": (
            jax.jit(
                jax.grad(lambda w, f, a: potential(unravel(x0j + wn.apply_arrowhead(w, *f)), *a))
            ),
            (w, arrow_log, dyn),
        ),
    }
    ms = {}
    for name, (fn, fargs) in sides.items():
        fn(*fargs).block_until_ready()  # compile
        start = time.perf_counter()
        for _ in range(args["repeats"]):
            out = fn(*fargs)
        out.block_until_ready()
        ms[name] = (time.perf_counter() - start) / args["repeats"] * 1e3
    print(
        json.dumps(
            {
                "setting": args,
                "D": int(len(x0)),
                "ms_per_gradient": {k: round(v, 4) for k, v in ms.items()},
                "dense_over_model": ms["dense"] / ms["model"],
                "arrowhead_over_model": ms["arrowhead"] / ms["model"],
                "dense_over_arrowhead": ms["dense"] / ms["arrowhead"],
                "num_judgments": int(np.asarray(data.weight).size),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
