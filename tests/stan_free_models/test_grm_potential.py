"""The directly written potential equals NumPyro's on every variant without cells."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from stan_free_models.engine import ModelSpec
from stan_free_models.inference import (
    GRM_SPEC,
    GRMData,
    _dynamic_args,
    _model_arrays,
    _potential_fn,
    _split_params,
    _static_key,
    pad_data,
)
from stan_free_models.model_key import Priors


def _data(rng, num_categories: int, per_system: bool) -> GRMData:
    n, c, p = 90, 5, 12
    data = GRMData(
        comparison=rng.integers(0, c, n),
        item=rng.integers(0, p, n),
        y=rng.integers(0, num_categories, n),
        weight=rng.choice([1.0, 0.5, 1.0 / 3.0], n),
        num_comparisons=c,
        num_items=p,
        num_categories=num_categories,
    )
    if per_system:
        pairs = np.array([(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)])
        data = GRMData(
            **{**data.__dict__, "pair_a": pairs[:, 0], "pair_b": pairs[:, 1], "num_systems": 4}
        )
    return data


@pytest.mark.parametrize(
    "num_categories, per_system, symmetric, scales",
    [
        (3, False, False, (1.0, 2.0, 1.0)),
        (3, True, True, (0.7, 1.5, 2.0)),
        (7, False, False, (1.0, 5.0, 1.0)),
        (7, False, True, (1.3, 2.0, 3.0)),
        (3, False, True, (1.0, 2.0, 1.0)),
    ],
)
def test_the_direct_potential_is_numpyros(num_categories, per_system, symmetric, scales):
    rng = np.random.default_rng(num_categories + 10 * per_system + 100 * symmetric)
    padded = pad_data(_data(rng, num_categories, per_system))
    alpha_scale, b_scale, theta_scale = scales
    priors = Priors(
        alpha_scale=alpha_scale, b_scale=b_scale, theta_scale=theta_scale, symmetric=symmetric
    )
    static = _static_key(padded, priors)
    args = _dynamic_args(padded)
    reference = GRM_SPEC.potential(static)
    assert isinstance(GRM_SPEC, ModelSpec)
    g_size = padded.num_systems if per_system else padded.num_comparisons
    k = 1 + ((num_categories - 1) // 2 if symmetric else num_categories - 1)
    for _ in range(3):
        g = jnp.asarray(rng.normal(0, 1.5, g_size), jnp.float32)
        items = jnp.asarray(rng.normal(0, 0.8, (padded.num_items, k)), jnp.float32)
        params = _split_params(static, g, items)
        want = float(reference(params, _model_arrays(static, *args)))
        got = float(_potential_fn(static)(params, *args))
        assert got == pytest.approx(want, rel=2e-5, abs=2e-3)
