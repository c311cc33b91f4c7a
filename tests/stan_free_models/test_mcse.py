"""stan_free_models.mcse against ArviZ's own quantile MCSE, column by column."""

from __future__ import annotations

import numpy as np
import pytest

from stan_free_models.arviz_safe import import_arviz
from stan_free_models.mcse import quantile_mcse


def arviz_mcse(draws: np.ndarray, prob: float) -> np.ndarray:
    az = import_arviz()
    with np.errstate(all="ignore"):
        return np.array(
            [
                float(az.mcse(draws[:, :, f], method="quantile", prob=prob))
                for f in range(draws.shape[2])
            ]
        )


def ar1(rng: np.random.Generator, phi: float, shape: tuple[int, int, int]) -> np.ndarray:
    noise = rng.standard_normal(shape)
    out = np.empty(shape)
    out[:, 0] = noise[:, 0]
    for t in range(1, shape[1]):
        out[:, t] = phi * out[:, t - 1] + np.sqrt(1 - phi**2) * noise[:, t]
    return out


def cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "iid one chain": rng.normal(0.3, 1.0, (1, 1000, 12)),
        "odd draw count": rng.normal(size=(1, 999, 6)),
        "autocorrelated": ar1(rng, 0.9, (1, 800, 8)),
        "anticorrelated": ar1(rng, -0.6, (1, 600, 6)),
        "four chains, shifted": ar1(rng, 0.5, (4, 300, 6)) + rng.normal(0, 0.3, (4, 1, 6)),
        "heavy tails": rng.standard_t(2, (2, 400, 6)),
        "ties": np.round(rng.normal(size=(1, 500, 6)), 1),
        "few draws": rng.normal(size=(1, 9, 5)),
        "float32 snapshot": rng.normal(size=(1, 1000, 5)).astype(np.float32),
    }


@pytest.mark.parametrize("name", list(cases()))
@pytest.mark.parametrize("prob", [0.025, 0.975, 0.1, 0.5])
def test_every_column_matches_arviz(name: str, prob: float) -> None:
    draws = cases()[name]
    # ArviZ subtracts float32 order statistics in float32
    rtol = 1e-6 if draws.dtype == np.float32 else 1e-9
    np.testing.assert_allclose(quantile_mcse(draws, prob), arviz_mcse(draws, prob), rtol=rtol)


def test_constant_nan_and_too_few_draws_are_arviz_too() -> None:
    rng = np.random.default_rng(1)
    draws = rng.normal(size=(1, 200, 4))
    draws[:, :, 1] = 2.5  # constant: ArviZ takes the ESS as the draw count
    draws[0, 17, 2] = np.nan
    np.testing.assert_allclose(
        quantile_mcse(draws, 0.025), arviz_mcse(draws, 0.025), rtol=1e-9, equal_nan=True
    )
    assert np.isnan(quantile_mcse(draws, 0.025)[2])
    assert np.isnan(quantile_mcse(rng.normal(size=(1, 3, 2)), 0.5)).all()
    with pytest.raises(ValueError, match="chain, draw, F"):
        quantile_mcse(rng.normal(size=(10, 2)), 0.5)


def test_a_quantile_per_column_is_each_columns_own() -> None:
    draws = cases()["autocorrelated"]
    probs = np.array([0.025, 0.975] * 4)
    expected = [arviz_mcse(draws[:, :, f : f + 1], p)[0] for f, p in enumerate(probs)]
    np.testing.assert_allclose(quantile_mcse(draws, probs), expected, rtol=1e-9)
