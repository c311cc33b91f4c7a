"""Item fit per prompt (adaptive/estimation/item_fit.py) and the information of a prompt set."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import polars as pl
import pytest

from adaptive.estimation.fitting import preset_config
from adaptive.estimation.item_fit import analysis_item_fit, benjamini_hochberg, item_fit
from adaptive.estimation.pipeline import analyze
from stan_free_models.information import item_information, set_information
from stan_free_models.simulate import sample_graded, simulate_planted_misfits

ROOT = Path(__file__).resolve().parents[3]


def test_benjamini_hochberg_is_the_step_up_procedure():
    p = np.array([0.01, 0.04, 0.03, 0.2, 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04, 0.2 against 0.01, 0.02, 0.03, 0.04, 0.05: the 4th passes
    assert benjamini_hochberg(p, 0.05).tolist() == [True, True, True, False, True]
    assert not benjamini_hochberg(np.array([0.5, 0.9]), 0.05).any()


def test_set_information_is_the_mean_over_draws_of_the_summed_item_information():
    rng = np.random.default_rng(0)
    alpha = np.exp(rng.normal(size=(5, 4)))
    b = np.sort(rng.normal(size=(5, 4, 2)), axis=-1)
    theta = np.linspace(-2, 2, 7)
    got = np.asarray(set_information(theta, alpha, b))
    by_hand = np.mean(
        [
            sum(
                np.asarray(item_information(theta, jnp.asarray(alpha[d, j]), b[d, j]))
                for j in range(4)
            )
            for d in range(5)
        ],
        axis=0,
    )
    np.testing.assert_allclose(got, by_hand, rtol=1e-5)
    # the 2PL golden value: alpha^2 p (1 - p) = 4 * 1/4 at theta = b
    two = set_information(np.array([0.0]), np.full((1, 1), 2.0), np.zeros((1, 1, 1)))
    assert float(two[0]) == pytest.approx(1.0)


def _draws_at_truth(rng, num_c=30, num_p=120, num_k=3, reversed_share=0.1, draws=400):
    """Judgments from known parameters, a share of prompts reversed, and draws = the truth."""
    theta = rng.normal(0.0, 1.0, num_c)
    alpha = np.exp(rng.normal(0.5, 0.3, num_p))
    b = np.sort(rng.normal(0.0, 1.0, (num_p, 2)), axis=1)
    bad = np.zeros(num_p, dtype=bool)
    bad[: round(reversed_share * num_p)] = True
    comp = np.repeat(np.arange(num_c), num_p * num_k)
    item = np.tile(np.repeat(np.arange(num_p), num_k), num_c)
    sign = np.where(bad[item], -1.0, 1.0)
    y = sample_graded(rng, sign * theta[comp], alpha[item], b[item])
    # the model fitted to a reversed prompt: its judgments barely depend on theta
    fitted_alpha = np.where(bad, 0.1, alpha)
    return (
        np.broadcast_to(theta, (draws, num_c)),
        np.broadcast_to(fitted_alpha, (draws, num_p)),
        np.broadcast_to(b, (draws, num_p, 2)),
        comp,
        item,
        y,
        bad,
    )


def test_reversed_prompts_are_flagged_and_the_others_at_about_the_level():
    theta, alpha, b, comp, item, y, bad = _draws_at_truth(np.random.default_rng(1))
    info = item_fit(np.random.default_rng(2), theta, alpha, b, comp, item, y)
    assert info.flagged[bad].mean() >= 0.9
    # at the true parameters the p-values are uniform: about 5% of the others flagged
    assert info.flagged[~bad].mean() <= 0.12
    assert (info.trend_observed[bad] < 0).all()
    assert info.num_comparisons.tolist() == [30] * 120


def _flags(seed: int, **options) -> tuple[np.ndarray, np.ndarray]:
    rows, planted = simulate_planted_misfits(
        np.random.default_rng(seed), num_comparisons=20, num_prompts=100, **options
    )
    analysis = analyze(pl.DataFrame(rows), config=preset_config("default", num_draws=1000),
                       group_redundant=False)  # fmt: skip
    info = analysis_item_fit(analysis, seed=seed)
    items = np.array([m[0] for m in analysis.cells.item_members])
    return info.flagged, np.isin(items, planted)


def test_planted_reversed_prompts_found_by_the_default_fit():
    """Done-means (fast version of research/item_fit_checks.py): >= 80% of the planted
    prompts flagged, <= 10% of the others."""
    flagged, bad = _flags(1, planted=0.1, kind="reversed")
    assert bad.sum() == 10
    assert flagged[bad].mean() >= 0.8
    assert flagged[~bad].mean() <= 0.10


def test_few_false_flags_without_planted_prompts_and_with_dependent_noisy_judgments():
    flagged, _ = _flags(2, planted=0.0)
    assert flagged.mean() <= 0.05
    flagged, _ = _flags(3, planted=0.0, cell_sd=0.7, random_annotators=0.2)
    assert flagged.mean() <= 0.10


def test_items_fit_prints_flags_and_the_information_curve(tmp_path):
    rows, planted = simulate_planted_misfits(
        np.random.default_rng(4), num_comparisons=6, num_prompts=30, planted=0.1
    )
    data = tmp_path / "judgments.csv"
    pl.DataFrame(rows).write_csv(data)
    figure = tmp_path / "fit.png"
    base = [sys.executable, "-m", "services.cli", "items", "--data", str(data), "--quiet"]
    run = subprocess.run(
        [*base, "--draws", "400", "--format", "json", "--fit", "--plot", str(figure)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    table = json.loads(run.stdout)
    assert len(table) == 30
    assert {"alpha_mean", "b1_mean", "fit_p", "misfit", "misfit_reason"} <= set(table[0])
    assert all(bool(r["misfit_reason"]) == r["misfit"] for r in table)
    assert figure.stat().st_size > 1000
    run = subprocess.run(
        [*base, "--draws", "400", "--format", "json", "--information"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    curve = json.loads(run.stdout)
    everything = [r for r in curve if r["set"] == "all"]
    assert everything[0]["num_prompts"] == 30
    # more prompts, more information, at every ability
    fewer = {r["theta"]: r["information"] for r in curve if r["set"] != "all"}
    assert all(r["information"] >= fewer[r["theta"]] - 1e-9 for r in everything)


def test_a_fit_with_a_cell_effect_or_a_lapse_is_refused_and_the_level_checked(capsys):
    """Replicates from the plain model would be sharper than such a fit: refused, saying why."""
    from types import SimpleNamespace

    from adaptive.estimation.item_fit import analysis_item_fit
    from services.cli import main

    for extra in ("tau", "lapse"):
        fitted = SimpleNamespace(posterior=SimpleNamespace(draws={extra: None}), cells=None)
        with pytest.raises(ValueError, match=f"this fit has \\['{extra}'\\]"):
            analysis_item_fit(fitted)
    argv = ["items", "--fit", "--data", "data/chateval_ncm/judgments.csv", "--level", "1.5"]
    assert main(argv) != 0
    assert "--level must be between 0 and 1" in capsys.readouterr().err
