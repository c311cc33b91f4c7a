"""The live-vs-full divergence: zero for the same fit, a known gap, location-free, flips."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from adaptive.estimation.divergence import DIVERGING_SD, pair_divergence, snapshot_divergence
from adaptive.estimation.snapshot import Snapshot


def _draws(means: list[float], sd: float, n: int = 20_000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(means, sd, size=(n, len(means)))


def _snapshot(skill: np.ndarray, systems: tuple[str, ...], n: int = 100) -> Snapshot:
    c = np.zeros(0, np.int64)
    return Snapshot(
        dimension="overall",
        version=1,
        num_judgments=n,
        last_seq=n,
        method="nuts",
        created_at=0.0,
        fit_seconds=0.0,
        diagnostics={},
        systems=systems,
        items=(),
        pair_a=c,
        pair_b=c,
        pair_judgments=c,
        pair_prompts=c,
        skill=skill,
        alpha=np.zeros((1, 0)),
        b=np.zeros((1, 0, 2)),
    )


def test_the_same_draws_do_not_diverge() -> None:
    draws = _draws([0.0, 0.4, 1.1], 0.2)
    d = pair_divergence(draws, draws)
    assert d["max_sd"] == 0.0 and d["flips"] == 0 and d["pairs"] == 3


def test_a_known_shift_is_measured_in_the_full_fits_sd() -> None:
    full = _draws([0.0, 0.0, 1.0], 0.1, seed=1)
    live = full.copy()
    live[:, 2] += 0.3  # pairs (0,2), (1,2) move by 0.3; their sd is 0.1 * sqrt(2)
    d = pair_divergence(full, live)
    assert d["max_sd"] == pytest.approx(0.3 / (0.1 * np.sqrt(2)), rel=0.02)
    assert d["worst"][1] == 2


def test_a_common_shift_of_every_skill_is_no_divergence() -> None:
    full = _draws([0.0, 0.5, 1.0], 0.1, seed=2)
    assert pair_divergence(full, full + 7.0)["max_sd"] == pytest.approx(0.0, abs=1e-9)


def test_a_decided_pair_on_the_other_side_is_a_flip() -> None:
    full = _draws([0.0, 1.0], 0.1, seed=3)  # decided: 1.0 / 0.14 sd
    live = _draws([1.0, 0.0], 0.1, seed=4)
    d = pair_divergence(full, live)
    assert d["flips"] == 1 and d["max_sd"] > 10


def test_snapshots_are_compared_on_the_systems_both_know_by_name() -> None:
    full = _snapshot(_draws([0.0, 0.5, 1.0], 0.1, seed=5), ("a", "b", "c"), n=100)
    # the live snapshot lists them in another order and knows a fourth system
    live_skill = full.skill[:, [2, 0, 1]]
    live_skill = np.column_stack([live_skill, np.zeros(len(live_skill))])
    live = replace(_snapshot(live_skill, ("c", "a", "b", "d"), n=120), method="laplace")
    d = snapshot_divergence(full, live)
    assert d["max_sd"] == 0.0 and d["pairs"] == 3 and not d["diverging"]
    assert (d["full_judgments"], d["live_judgments"], d["live_method"]) == (100, 120, "laplace")
    moved = replace(live, skill=live.skill + np.array([0.5, 0.0, 0.0, 0.0]), num_judgments=101)
    d = snapshot_divergence(full, moved)
    assert d["diverging"] and d["max_sd"] > DIVERGING_SD and set(d["worst"]) >= {"c"}
    assert d["judgments_gap"] == 0.01
    # 20% more judgments: new judgments alone move answers that far, so it is not a fault
    d = snapshot_divergence(full, replace(moved, num_judgments=120))
    assert d["max_sd"] > DIVERGING_SD and not d["diverging"] and d["judgments_gap"] == 0.2


def test_two_draw_sets_of_one_posterior_differ_by_their_monte_carlo_error() -> None:
    """50 systems, 200 full draws against 500 live ones: the largest of 1,225 gaps is a few
    mc_sd, below the diverging line, and mc_sd follows the draws (or a NUTS ESS)."""
    means = list(np.linspace(-1, 1, 50))
    full = _snapshot(_draws(means, 0.3, n=200, seed=7), tuple(f"s{i}" for i in range(50)))
    live = replace(full, skill=_draws(means, 0.3, n=500, seed=8), method="laplace")
    d = snapshot_divergence(full, live)
    assert d["mc_sd"] == pytest.approx(np.sqrt(1 / 200 + 1 / 500), rel=0.15)
    assert d["mc_sd"] < d["max_sd"] < 5 * d["mc_sd"] and not d["diverging"], d
    nuts = replace(full, diagnostics={"min_ess_bulk": 50.0})
    assert snapshot_divergence(nuts, live)["mc_sd"] == pytest.approx(
        np.sqrt(1 / 50 + 1 / 500), rel=0.15
    )


def test_the_covariance_form_equals_the_pairwise_draws() -> None:
    rng = np.random.default_rng(9)
    full = rng.normal(size=(3000, 6)) @ rng.normal(size=(6, 6))  # correlated skills
    live = full[::-1] + rng.normal(0, 0.05, size=6)
    a, b = np.triu_indices(6, k=1)
    diffs = full[:, b] - full[:, a]
    gap = np.abs((live[:, b] - live[:, a]).mean(0) - diffs.mean(0)) / diffs.std(0)
    d = pair_divergence(full, live)
    assert d["max_sd"] == pytest.approx(gap.max(), rel=1e-9)
    assert d["median_sd"] == pytest.approx(np.median(gap), rel=1e-9)


def test_snapshots_of_two_dimensions_are_refused() -> None:
    full = _snapshot(_draws([0.0, 1.0], 0.1), ("a", "b"))
    with pytest.raises(ValueError, match="snapshots of"):
        snapshot_divergence(full, replace(full, dimension="style"))
