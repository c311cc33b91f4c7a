"""Skill-only Laplace updates (item parameters held) against full MAP + Laplace fits."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import polars as pl
import pytest

from adaptive.core.cells import build_cells
from adaptive.estimation.fitting import model_data
from stan_free_models.fit_settings import REFINED
from stan_free_models.incremental import (
    TRACE_COUNTS,
    ItemPoint,
    item_uncertainty,
    update_skills,
)
from stan_free_models.laplace import fit_laplace
from stan_free_models.model_key import Priors
from stan_free_models.simulate import simulate_judgments

SYSTEMS = [f"s{i}" for i in range(6)]
KEY = jax.random.PRNGKey(0)


@pytest.fixture(scope="module")
def log() -> pl.DataFrame:
    rng = np.random.default_rng(1)
    pairs = list(itertools.combinations(range(len(SYSTEMS)), 2))
    rows, _ = simulate_judgments(
        rng, systems=SYSTEMS, pairs=pairs, num_prompts=60, num_annotators=2
    )
    return pl.DataFrame(rows).sample(fraction=1.0, shuffle=True, seed=3)


def _data(frame: pl.DataFrame):
    cells = build_cells(frame, systems=SYSTEMS)
    return cells, model_data(cells, likelihood="judgment", parameterization="system")


def _base(frame: pl.DataFrame, symmetric: bool, theta_scale: float = 1.0):
    cells, data = _data(frame)
    priors = Priors(symmetric=symmetric, theta_scale=theta_scale)
    full = fit_laplace(data, rng_key=KEY, settings=REFINED.replace(num_draws=200), priors=priors)
    items = ItemPoint.from_mode(
        full.mode["items"][: data.num_items], priors=priors, num_categories=3
    )
    s = len(SYSTEMS)
    at_mode = update_skills(
        data,
        items,
        init=full.mode["global"][:s],
        rng_key=KEY,
        max_steps=0,
        priors=priors,
    )
    term = item_uncertainty(full.info["cov_global"], at_mode.conditional_cov)
    return cells, data, full, items, term


@pytest.mark.parametrize(("symmetric", "theta_scale"), [(True, 1.0), (False, 1.0), (True, 3.0)])
def test_on_the_full_fits_data_an_update_reproduces_its_mode_and_covariance(
    log, symmetric, theta_scale
):
    _, data, full, items, term = _base(log, symmetric, theta_scale)
    s = len(SYSTEMS)
    # from a cold start: Newton has to find the mode itself
    fit = update_skills(
        data,
        items,
        init=np.zeros(s),
        item_term=term,
        rng_key=KEY,
        priors=Priors(symmetric=symmetric, theta_scale=theta_scale),
    )
    assert fit.converged and fit.num_steps >= 2
    np.testing.assert_allclose(fit.mode, full.mode["global"][:s], atol=1e-4)
    np.testing.assert_allclose(fit.cov, full.info["cov_global"], rtol=1e-3, atol=1e-6)
    # the item term is a real share of the variance, and positive semi-definite
    assert np.linalg.eigvalsh(term).min() >= -1e-12
    # of the skills' differences (their common level is the prior's alone)
    contrast = np.eye(s) - 1.0 / s
    assert np.trace(contrast @ term @ contrast) > 0.01 * np.trace(
        contrast @ full.info["cov_global"] @ contrast
    )
    # draws follow the covariance
    np.testing.assert_allclose(
        fit.draws.mean(axis=0), fit.mode, atol=4 * np.sqrt(fit.cov.max()) / 30
    )


@pytest.mark.parametrize("symmetric", [True, False])
def test_with_five_percent_more_judgments_an_update_tracks_a_full_refit(log, symmetric):
    n0 = int(0.95 * log.height)
    cells0, _, base, items, term = _base(log.head(n0), symmetric)
    cells1, data1 = _data(log)
    assert cells1.items == cells0.items and cells1.systems == cells0.systems
    assert (cells1.pair_a == cells0.pair_a).all() and (cells1.pair_b == cells0.pair_b).all()
    s = len(SYSTEMS)
    update = update_skills(data1, items, init=base.mode["global"][:s], item_term=term, rng_key=KEY)
    refit = fit_laplace(
        data1,
        rng_key=KEY,
        settings=REFINED.replace(num_draws=200),
        priors=Priors(symmetric=symmetric),
    )
    sd = np.sqrt(np.diag(refit.info["cov_global"]))
    shift = (update.mode - refit.mode["global"][:s]) / sd
    assert np.abs(shift).max() < 0.1, shift
    np.testing.assert_allclose(np.sqrt(np.diag(update.cov)), sd, rtol=0.03)
    # and it moved: the base's skills are not simply returned
    assert np.abs(update.mode - base.mode["global"][:s]).max() > 1e-3


def test_batches_of_one_bucket_reuse_the_compiled_update(log):
    _, _, base, items, term = _base(log.head(1000), True)
    s = len(SYSTEMS)
    update_skills(
        _data(log.head(1000))[1], items, init=base.mode["global"][:s], item_term=term, rng_key=KEY
    )
    traces = TRACE_COUNTS["skills"]
    for n in (1005, 1010, 1020):  # 1000..1024: one padded bucket
        update_skills(
            _data(log.head(n))[1],
            items,
            init=base.mode["global"][:s],
            item_term=term,
            rng_key=KEY,
        )
    assert TRACE_COUNTS["skills"] == traces, "a batch in the same bucket recompiled the update"


def test_wrong_item_count_and_per_comparison_data_are_rejected(log):
    cells, data, _, items, _ = _base(log.head(400), True)
    short = ItemPoint(alpha=items.alpha[:-1], b=items.b[:-1])
    with pytest.raises(ValueError, match="item parameters for"):
        update_skills(data, short, rng_key=KEY)
    per_comparison = model_data(cells, likelihood="judgment", parameterization="comparison")
    with pytest.raises(ValueError, match="per-system"):
        update_skills(per_comparison, items, rng_key=KEY)
