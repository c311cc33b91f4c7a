"""NUTS for the graded response model with numpyro's diagonal adaptation, and the sampler plumbing.

``fit_nuts`` returns split R-hat, bulk ESS and divergences with every fit;
:mod:`stan_free_models.whitened_nuts` (the default sampler) and the Bradley-Terry
engine reuse the cached sampler and diagnostics here.
"""

from __future__ import annotations

import functools
import time

import jax
import numpy as np
from numpyro.infer import MCMC, NUTS

from stan_free_models.graded_response import (
    DEFAULT_ALPHA_SCALE,
    DEFAULT_B_SCALE,
    DEFAULT_TAU_SCALE,
    graded_response,
)
from stan_free_models.inference import (
    MODEL_LOCK,
    TRACE_COUNTS,
    GRMData,
    _model_kwargs,
    _static_key,
    pad_data,
)
from stan_free_models.posterior import Diagnostics, Posterior, bulk_ess, rank_rhat


def chain_method_for(num_chains: int) -> str:
    """Parallel chains when JAX sees enough devices (``numpyro.set_host_device_count``), else vectorised."""
    return "parallel" if jax.local_device_count() >= num_chains else "vectorized"


def new_mcmc(
    model_fn,
    *,
    num_chains: int,
    num_warmup: int,
    num_samples: int,
    chain_method: str,
    progress: bool,
    target_accept: float,
) -> MCMC:
    """A NUTS sampler whose model arguments are jitted, so a cached sampler is reused per shape."""
    return MCMC(
        NUTS(model_fn, target_accept_prob=target_accept),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=chain_method,
        progress_bar=progress,
        jit_model_args=True,
    )


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


def checked_sites(draws: dict[str, np.ndarray], symmetric: bool) -> dict[str, np.ndarray]:
    """The sampled sites whose R-hat and ESS a fit reports (b only when it is sampled freely)."""
    checked = {
        k: v for k, v in draws.items() if k in ("theta", "log_alpha", "b_half", "skill", "tau")
    }
    if not symmetric:
        checked["b"] = draws["b"]
    return checked


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


@functools.lru_cache(maxsize=8)
def _cached_mcmc(
    static: tuple,
    num_chains: int,
    num_warmup: int,
    num_samples: int,
    chain_method: str,
    progress: bool,
    target_accept: float,
):
    TRACE_COUNTS["nuts"] += 1
    num_obs, num_comp, num_items, num_cat, num_systems, alpha_scale, b_scale, symmetric = static[:8]
    sizes = dict(
        num_comparisons=num_comp,
        num_items=num_items,
        num_categories=num_cat,
        alpha_scale=alpha_scale,
        b_scale=b_scale,
        symmetric_thresholds=symmetric,
    )
    if num_systems is not None:
        sizes["num_systems"] = num_systems
    if static[8] is not None:
        sizes.update(num_cells=static[8], tau_scale=static[9])
    return new_mcmc(
        functools.partial(graded_response, **sizes),
        num_chains=num_chains,
        num_warmup=num_warmup,
        num_samples=num_samples,
        chain_method=chain_method,
        progress=progress,
        target_accept=target_accept,
    )


def fit_nuts(
    data: GRMData,
    *,
    rng_key: jax.Array,
    num_chains: int = 4,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    progress: bool = False,
    target_accept: float = 0.8,
    alpha_scale: float = DEFAULT_ALPHA_SCALE,
    b_scale: float = DEFAULT_B_SCALE,
    symmetric_thresholds: bool = False,
    chain_method: str | None = None,
    tau_scale: float = DEFAULT_TAU_SCALE,
) -> Posterior:
    """Full posterior by NUTS, with split R-hat, bulk ESS and divergences.

    Chains run in parallel when JAX sees at least ``num_chains`` devices
    (``numpyro.set_host_device_count``), otherwise vectorised.
    """
    start = time.perf_counter()
    padded = pad_data(data)
    static = _static_key(padded, alpha_scale, b_scale, symmetric_thresholds, tau_scale)
    chain_method = chain_method or chain_method_for(num_chains)
    mcmc = _cached_mcmc(
        static, num_chains, num_warmup, num_samples, chain_method, progress, target_accept
    )
    kwargs = _model_kwargs(padded, alpha_scale, b_scale, symmetric_thresholds, tau_scale)
    arrays = {k: v for k, v in kwargs.items() if isinstance(v, jax.Array)}
    samples, diverging = sample_mcmc(mcmc, rng_key, arrays)
    c, p = data.num_comparisons, data.num_items
    draws = {
        "theta": samples["theta"][:, :, :c],
        "log_alpha": samples["log_alpha"][:, :, :p],
        "alpha": np.exp(samples["log_alpha"][:, :, :p]),
        "b": samples["b"][:, :, :p],
    }
    if data.per_system:
        draws["skill"] = samples["skill"][:, :, : data.num_systems]
    if symmetric_thresholds:
        draws["b_half"] = samples["b_half"][:, :, :p]
    if data.has_cells:
        draws["tau"] = samples["tau"]
    checked = checked_sites(draws, symmetric_thresholds)
    diagnostics = nuts_diagnostics(checked, diverging, num_samples, start)
    return Posterior(
        draws=draws, method="nuts", diagnostics=diagnostics, info={"padded_shape": static[:5]}
    )
