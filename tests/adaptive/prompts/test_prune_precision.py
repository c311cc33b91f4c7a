"""Pruning's honest precision: folds, SNR, masked fits, and the cross-fitted SE ratio."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import polars as pl
import pytest

import evalset
from adaptive.prompts.prune_folds import (
    Judged,
    cell_table,
    se_ratios,
    snr,
    split_folds,
)
from adaptive.prompts.prune_precision import best_gain, variance_split
from adaptive.prompts.tier_plan import fit_items, fit_items_masked
from tests.factories import two_tier_data


def _judged(cells: list[tuple[int, int, list[float]]], num_p: int, num_c: int) -> Judged:
    comp, prompt, x, ann = [], [], [], []
    for c, p, xs in cells:
        for i, v in enumerate(xs):
            comp.append(c)
            prompt.append(p)
            x.append(v)
            ann.append(i)
    return Judged(np.array(comp), np.array(prompt), np.array(x, float), np.array(ann), num_p, num_c)


def test_folds_deal_a_cells_annotators_in_turn():
    rng = np.random.default_rng(0)
    judged = _judged([(0, p, [1, -1, 0, 1][: 2 + p % 3]) for p in range(40)], 40, 1)
    fold = split_folds(judged, rng)
    for p in range(40):
        in_cell = fold[judged.prompt == p]
        n = len(in_cell)
        assert abs(int(in_cell.sum()) * 2 - n) <= 1  # 2 -> 1/1, 3 -> 2/1 or 1/2, 4 -> 2/2
    assert set(fold.tolist()) == {0, 1}


def test_snr_by_hand():
    # comparison 0: prompts 0..2 with cell means 1, 0.5, 0 -> mean 0.5, sd 0.5, se 0.5/sqrt(3)
    judged = _judged([(0, 0, [1, 1]), (0, 1, [1, 0]), (0, 2, [0])], 3, 1)
    table = cell_table(judged)
    assert snr(table, np.ones(3, bool))[0] == pytest.approx(0.5 / (0.5 / np.sqrt(3)))
    assert np.isnan(snr(table, np.array([True, False, False]))[0])  # one prompt: no SE
    two = snr(table, np.array([[True, True, False], [False, True, True]]))
    assert two.shape == (2, 1)
    assert two[0, 0] == pytest.approx(0.75 / (np.sqrt(0.125) / np.sqrt(2)))


def test_se_ratio_is_infinite_when_the_kept_set_points_the_other_way():
    ratios = se_ratios(np.array([4.0, -4.0, 4.0]), np.array([2.0, -1.0, -3.0]))
    np.testing.assert_allclose(ratios, [2.0, 4.0, np.inf])


def test_the_best_gain_is_one_without_between_prompt_spread():
    gain = best_gain(np.array([0.3, -0.3]), np.array([0.0, 0.0]), np.array([0.2, 0.2]), 0.25)
    np.testing.assert_allclose(gain, 1.0)
    assert best_gain(np.array([0.3]), np.array([0.1]), np.array([0.2]), 0.25)[0] > 1.5


def test_variance_split_finds_the_planted_spread():
    rng = np.random.default_rng(1)
    effects = rng.normal(0.0, 0.4, size=400)
    cells = [(0, p, list(np.clip(effects[p] + rng.normal(0, 0.3, 6), -5, 5))) for p in range(400)]
    tau2, noise = variance_split(cell_table(_judged(cells, 400, 1)), np.array([0]))
    assert noise[0] == pytest.approx(0.09, rel=0.15)
    assert tau2[0] == pytest.approx(0.16, rel=0.25)


def test_a_masked_fit_is_the_compact_fit():
    data = two_tier_data(0)
    inside = np.array([0, 1, 2])
    compact = fit_items(data, inside, jax.random.PRNGKey(0), 50)
    masked = fit_items_masked(data, inside, jax.random.PRNGKey(0), 50)
    seen = compact.has_data
    np.testing.assert_array_equal(masked.has_data, seen)
    np.testing.assert_allclose(masked.alpha[seen], compact.alpha[seen], rtol=0.05)
    assert masked.theta_draws.shape[1] == len(inside)
    np.testing.assert_allclose(masked.theta_draws.mean(0), compact.theta_draws.mean(0), atol=0.1)


def _no_prompt_signal(seed: int = 0, num_prompts: int = 60) -> pl.DataFrame:
    """Four systems, every pair, three annotators a cell; prompts differ in nothing."""
    rng = np.random.default_rng(seed)
    skill = np.array([0.0, 0.6, 1.2, 1.8])
    rows = []
    for (a, b), p, k in itertools.product(
        itertools.combinations(range(4), 2), range(num_prompts), range(3)
    ):
        d = skill[b] - skill[a]
        probs = np.array([1.0, 0.6, np.exp(d)])
        winner = rng.choice(["a", "tie", "b"], p=probs / probs.sum())
        rows.append(
            {
                "item_id": f"p{p:03d}",
                "system_a": f"s{a}",
                "system_b": f"s{b}",
                "annotator_id": f"r{(p + k) % 7}",
                "winner": winner,
                "dimension": "overall",
            }
        )
    return pl.DataFrame(rows)


def test_the_printed_ratio_is_what_fresh_judgments_give_when_prompts_are_alike():
    """Prompts that differ by noise alone: any 15 of 60 lose sqrt(60/15) = 2 in SNR.

    The in-sample figure (the model's information at its own estimates) promised about
    1.2; the cross-fitted one must say about 2, and the tier's verdict that pruning
    cannot help.
    """
    messages: list[str] = []
    from adaptive.prompts.pruning import PruneConfig
    from evalset.pruning import prune_judgments

    rows = prune_judgments(
        _no_prompt_signal(), PruneConfig(keep=15, num_tiers=1), log=messages.append
    )
    ratio = rows[0]["se_ratio"]
    assert 1.6 < ratio < 2.6, ratio
    assert any("pruning cannot help here" in m for m in messages), messages
    assert any("60 prompts kept in some tier" in m or "of 60 prompts kept" in m for m in messages)
    assert evalset is not None


def _twins(shared: int):  # type: ignore[no-untyped-def]
    """Prompts 0 and 1 rate identically on ``shared`` of 12 comparisons; 18 others at random."""
    from dataclasses import replace

    from tests.factories import tiny_loco_data

    rng = np.random.default_rng(3)
    rating = rng.integers(-3, 4, size=(20, 12)).astype(float)
    rating[1] = rating[0]
    mask = np.ones((20, 12), dtype=bool)
    mask[0, shared:] = False
    base = tiny_loco_data(0)
    return replace(base, rating=rating, rating_mask=mask)


@pytest.mark.parametrize("shared, grouped", [(6, False), (12, True)])
def test_a_redundant_group_needs_enough_shared_comparisons(shared, grouped):
    from adaptive.prompts.pruning import PruneConfig
    from adaptive.prompts.tier_plan import redundancy_groups

    data = _twins(shared)
    groups = redundancy_groups(
        data,
        np.arange(12),
        threshold=0.6,
        fdr=0.05,
        min_overlap=PruneConfig().redundancy_min_shared,
    )
    assert ([0, 1] in groups) == grouped
    if shared == 6:  # the filter's old minimum of 5 shared comparisons grouped them
        assert [0, 1] in redundancy_groups(data, np.arange(12), threshold=0.6, fdr=0.05)


def test_a_redundant_prompts_reason_says_what_was_measured():
    from adaptive.prompts.pruning import REDUNDANT, SELECTED, TierPlan, plan_rows

    plan = TierPlan(
        tier=0,
        kept=np.array([0]),
        reasons={0: (SELECTED, 0), 1: (REDUNDANT, 0)},
        order=np.array([0]),
        information=np.array([1.0, 0.5]),
        se_curve=np.array([1.0]),
        se_full=1.0,
        se_kept=1.0,
        comparisons=np.array([0]),
        info={"k_selected": 1.0},
    )
    rows = plan_rows(
        [plan],
        dimension="d",
        prompts=("p084", "p101"),
        comparison_names=[("a", "b")],
        num_tiers=1,
        shared=lambda p, q: (6, 0.97),
    )
    assert rows[1]["reason"].startswith("ranks the 6 comparisons it shares with p084 like it")
    assert "r = 0.97" in rows[1]["reason"]


def test_prune_lists_the_kept_prompts_of_every_tier(capsys):
    from services.cli import main

    argv = ["prune", "--data", "tests/fixtures/rankings/rankings.csv", "--keep", "4"]
    assert main([*argv, "--format", "json", "--quiet"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert main([*argv, "--format", "list", "--quiet"]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == sorted({r["item_id"] for r in rows if r["kept"]})
    assert len(listed) > 4  # the union over the two tiers
