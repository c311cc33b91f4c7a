"""One inference engine for every model: L-BFGS, the dense Laplace step and cached NUTS.

A model enters as a :class:`ModelSpec`: a name and a function from a static key
(a hashable tuple of padded sizes and prior scales) to its NumPyro model. The
engine compiles once per (model, static key, settings) and reuses the program
for every data set padded to the same shapes:

* :func:`lbfgs_minimise`: optax's L-BFGS until the gradient norm falls below
  ``tol`` (traced: call it inside a jitted function). ``tol`` is a runtime value
  for every model, so a new tolerance never recompiles; ``max_iter`` is static.
* :func:`gaussian_draws`: the Laplace step for a dense Hessian: the Cholesky
  factor at the mode and Gaussian draws with covariance H^-1.
* :func:`fit_dense_laplace`: both, for a model with a few hundred parameters
  (the Bradley-Terry fast path), compiled per ``(spec, static, max_iter,
  num_draws)``.
* :func:`run_nuts`: a NUTS sampler cached per ``(spec, static, NutsSettings)``.

Importing the engine makes NumPyro's effect-handler stack per-thread
(:mod:`stan_free_models.threadsafe`), so fits may trace and run models on several
threads at once. A cached sampler is one mutable object, so runs of it hold
:data:`MODEL_LOCK`. :data:`TRACE_COUNTS` counts traces and sampler builds (tests
check reuse).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu
from jax.flatten_util import ravel_pytree
from numpyro.infer import MCMC, NUTS
from numpyro.infer.util import potential_energy

from stan_free_models import threadsafe
from stan_free_models.fit_settings import NutsSettings
from stan_free_models.posterior import Diagnostics, bulk_ess, rank_rhat

# NumPyro's effect-handler stack is one process-wide list: two threads tracing a model
# at once would corrupt each other's traces ("all sites must have unique names"). One
# stack per thread instead, before any model is traced.
threadsafe.install()

#: Held while a cached sampler runs (an MCMC object keeps its state between runs, so
#: two threads must not run the same one at once). Tracing a model needs no lock: the
#: handler stack is per-thread (:mod:`stan_free_models.threadsafe`); a fit that still
#: holds it around a compiled call only waits for the others (and a sampler's whole run).
MODEL_LOCK = threading.RLock()

#: counts how often each compiled function is traced (a test checks reuse)
TRACE_COUNTS: dict[str, int] = {"laplace": 0, "nuts": 0}


@dataclass(frozen=True)
class ModelSpec:
    """A model as the engine sees it.

    ``model(static)`` returns the NumPyro model with every static setting bound, so
    that it takes only the data arrays as keyword arguments. Specs are compared by
    identity of ``model``: define one per model at module level.
    """

    name: str
    model: Callable[[Any], Callable[..., Any]]

    def potential(self, static: tuple) -> Callable[[Any, dict], jax.Array]:
        """The potential energy (negative log joint, unconstrained) of ``(params, arrays)``."""
        model = self.model(static)
        return lambda params, arrays: potential_energy(model, (), arrays, params)


# ------------------------------------------------------------------ L-BFGS + Laplace


def lbfgs_minimise(fun: Callable, x0: Any, *, max_iter: int, tol: Any) -> tuple[Any, jax.Array]:
    """Minimise ``fun`` from ``x0`` (any pytree) by L-BFGS: (minimiser, number of steps).

    Stops when the gradient norm falls below ``tol`` or after ``max_iter`` steps
    (at least one). Runs inside a traced function; ``tol`` may be a traced value.
    """
    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(fun)

    def step(carry):
        params, state = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
        return optax.apply_updates(params, updates), state

    def keep_going(carry):
        _, state = carry
        count = otu.tree_get(state, "count")
        err = otu.tree_norm(otu.tree_get(state, "grad"))
        return (count == 0) | ((count < max_iter) & (err >= tol))

    params, state = jax.lax.while_loop(keep_going, step, (x0, opt.init(x0)))
    return params, otu.tree_get(state, "count")


def gaussian_draws(
    rng_key: jax.Array, fun: Callable, mode: jax.Array, num_draws: int
) -> tuple[jax.Array, jax.Array]:
    """Draws from the Laplace approximation at ``mode`` (flat): (draws (N, D), Cholesky of H).

    H is the dense Hessian of ``fun`` at the mode, symmetrised; ``mode + L^-T z`` has
    covariance (L L^T)^-1 = H^-1.
    """
    hess = jax.hessian(fun)(mode)
    hess = 0.5 * (hess + hess.T)
    chol = jnp.linalg.cholesky(hess)
    z = jax.random.normal(rng_key, (num_draws, mode.shape[0]), dtype=mode.dtype)
    draws = mode + jax.scipy.linalg.solve_triangular(chol.T, z.T, lower=False).T
    return draws, chol


@functools.lru_cache(maxsize=32)
def compiled_dense_laplace(spec: ModelSpec, static: tuple, max_iter: int, num_draws: int):
    """The jitted MAP + dense Laplace fit ``fit(rng_key, x0, arrays, tol)`` of one model."""
    potential = spec.potential(static)

    def fit(rng_key, x0, arrays, tol):
        TRACE_COUNTS["laplace"] += 1  # runs at trace time only
        flat0, unravel = ravel_pytree(x0)

        def fun(flat):
            return potential(unravel(flat), arrays)

        flat, num_steps = lbfgs_minimise(fun, flat0, max_iter=max_iter, tol=tol)
        grad_norm = jnp.linalg.norm(jax.grad(fun)(flat))
        draws, chol = gaussian_draws(rng_key, fun, flat, num_draws)
        return {
            "mode": unravel(flat),
            "draws": jax.vmap(unravel)(draws),
            "grad_norm": grad_norm,
            "num_steps": num_steps,
            "finite": jnp.all(jnp.isfinite(chol)),
        }

    return jax.jit(fit)


def fit_dense_laplace(
    spec: ModelSpec,
    static: tuple,
    rng_key: jax.Array,
    x0: dict[str, np.ndarray],
    arrays: dict[str, jax.Array],
    *,
    max_iter: int,
    tol: float,
    num_draws: int,
) -> dict[str, Any]:
    """MAP by L-BFGS from ``x0``, then ``num_draws`` Gaussian draws (host arrays).

    Returns ``mode`` and ``draws`` (dicts like ``x0``), ``grad_norm``, ``num_steps``
    and ``finite`` (the Hessian's Cholesky factor is finite).
    """
    fit = compiled_dense_laplace(spec, static, int(max_iter), int(num_draws))
    return jax.device_get(
        fit(
            rng_key,
            {k: jnp.asarray(v) for k, v in x0.items()},
            arrays,
            jnp.asarray(tol, jnp.float32),
        )
    )


# ------------------------------------------------------------------------------ NUTS


def chain_method_for(num_chains: int) -> str:
    """Parallel chains when JAX sees enough devices (``numpyro.set_host_device_count``), else vectorised."""
    return "parallel" if jax.local_device_count() >= num_chains else "vectorized"


def new_mcmc(model_fn, settings: NutsSettings) -> MCMC:
    """A NUTS sampler whose model arguments are jitted, so a cached sampler is reused per shape."""
    return MCMC(
        NUTS(model_fn, target_accept_prob=settings.target_accept),
        num_warmup=settings.num_warmup,
        num_samples=settings.num_samples,
        num_chains=settings.num_chains,
        chain_method=settings.chain_method or chain_method_for(settings.num_chains),
        progress_bar=settings.progress,
        jit_model_args=True,
    )


def cached_mcmc(spec: ModelSpec, static: tuple, settings: NutsSettings) -> MCMC:
    """The sampler of one model, static key and settings (built once, then reused): the
    compile key is the key beside the settings a sampler depends on."""
    method = settings.chain_method or chain_method_for(settings.num_chains)
    return _cached_mcmc(spec, static, settings.sampler(method))


@functools.lru_cache(maxsize=16)
def _cached_mcmc(spec: ModelSpec, static: tuple, settings: NutsSettings) -> MCMC:
    TRACE_COUNTS["nuts"] += 1
    return new_mcmc(spec.model(static), settings)


def sample_mcmc(
    mcmc: MCMC, rng_key: jax.Array, arrays: dict
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Run a sampler under the model lock: (draws by chain as float64, divergence flags)."""
    with MODEL_LOCK:
        mcmc.run(rng_key, extra_fields=("diverging",), **arrays)
        samples = {
            k: np.asarray(v, dtype=np.float64)
            for k, v in mcmc.get_samples(group_by_chain=True).items()
        }
        diverging = np.asarray(mcmc.get_extra_fields()["diverging"])
    return samples, diverging


def run_nuts(
    spec: ModelSpec, static: tuple, rng_key: jax.Array, arrays: dict, settings: NutsSettings
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """NUTS on the padded ``arrays`` with the cached sampler: (draws by chain, divergences)."""
    return sample_mcmc(cached_mcmc(spec, static, settings), rng_key, arrays)


def nuts_diagnostics(
    checked: dict[str, np.ndarray], diverging: np.ndarray, num_samples: int, start: float
) -> Diagnostics:
    """R-hat and bulk ESS of the checked sites, divergences, and the wall time since ``start``."""
    return Diagnostics(
        rhat={k: rank_rhat(v) for k, v in checked.items()},
        ess_bulk={k: bulk_ess(v) for k, v in checked.items()},
        num_divergences=int(diverging.sum()),
        converged=True,
        num_steps=num_samples,
        seconds=time.perf_counter() - start,
    )


__all__ = [
    "MODEL_LOCK",
    "TRACE_COUNTS",
    "ModelSpec",
    "NutsSettings",
    "cached_mcmc",
    "chain_method_for",
    "compiled_dense_laplace",
    "fit_dense_laplace",
    "gaussian_draws",
    "lbfgs_minimise",
    "new_mcmc",
    "nuts_diagnostics",
    "run_nuts",
    "sample_mcmc",
]
