"""NUTS for the graded response model with numpyro's diagonal adaptation.

``fit_nuts`` returns split R-hat, bulk ESS and divergences with every fit. The
cached sampler and its diagnostics are :mod:`stan_free_models.engine`'s, shared
with :mod:`stan_free_models.whitened_nuts` (the default sampler) and the
Bradley-Terry fits; they stay importable from here.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

from stan_free_models.engine import (
    chain_method_for,
    new_mcmc,
    nuts_diagnostics,
    run_nuts,
    sample_mcmc,
)
from stan_free_models.fit_settings import NutsSettings
from stan_free_models.inference import (
    DEFAULT_PRIORS,
    GRM_SPEC,
    GRMData,
    _dynamic_args,
    _model_arrays,
    _static_key,
    pad_data,
)
from stan_free_models.model_key import Priors
from stan_free_models.posterior import Posterior


def checked_sites(draws: dict[str, np.ndarray], priors: Priors) -> dict[str, np.ndarray]:
    """The sampled sites whose R-hat and ESS a fit reports (b only when it is sampled freely)."""
    checked = {
        k: v
        for k, v in draws.items()
        if k in ("theta", "log_alpha", "b_half", "skill", "tau", "lapse")
    }
    if not priors.symmetric:
        checked["b"] = draws["b"]
    return checked


def fit_nuts(
    data: GRMData,
    *,
    rng_key: jax.Array,
    settings: NutsSettings = NutsSettings(),
    priors: Priors = DEFAULT_PRIORS,
    **overrides: Any,
) -> Posterior:
    """Full posterior by NUTS, with split R-hat, bulk ESS and divergences.

    ``settings``: the run (:class:`stan_free_models.fit_settings.NutsSettings`), with
    ``overrides`` of its fields (``num_warmup=...``) on top.
    ``priors``: the model's priors and variants (:class:`stan_free_models.model_key.Priors`;
    with ``lapse`` and cells, judgments may be given at random at a learned rate,
    :func:`stan_free_models.graded_response.graded_response`).

    Chains run in parallel when JAX sees at least ``num_chains`` devices
    (``numpyro.set_host_device_count``), otherwise vectorised.
    """
    start = time.perf_counter()
    settings = settings.replace(**overrides)
    padded = pad_data(data)
    static = _static_key(padded, priors)
    arrays = _model_arrays(static, *_dynamic_args(padded))
    samples, diverging = run_nuts(GRM_SPEC, static, rng_key, arrays, settings)
    c, p = data.num_comparisons, data.num_items
    draws = {
        "theta": samples["theta"][:, :, :c],
        "log_alpha": samples["log_alpha"][:, :, :p],
        "alpha": np.exp(samples["log_alpha"][:, :, :p]),
        "b": samples["b"][:, :, :p],
    }
    if data.per_system:
        draws["skill"] = samples["skill"][:, :, : data.num_systems]
    if priors.symmetric:
        draws["b_half"] = samples["b_half"][:, :, :p]
    if data.has_cells:
        draws["tau"] = samples["tau"]
    if priors.lapse:
        draws["lapse"] = samples["lapse"]
    checked = checked_sites(draws, priors)
    diagnostics = nuts_diagnostics(checked, diverging, settings.num_samples, start)
    return Posterior(
        draws=draws, method="nuts", diagnostics=diagnostics, info={"padded_shape": static.sizes}
    )


#: the sampler plumbing lives in :mod:`stan_free_models.engine`; these stay importable here
__all__ = [
    "chain_method_for",
    "checked_sites",
    "fit_nuts",
    "new_mcmc",
    "nuts_diagnostics",
    "sample_mcmc",
]
