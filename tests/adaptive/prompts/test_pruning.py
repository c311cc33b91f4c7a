"""The tier-planning step shared by LOCO and pruning, and pruning's fixed ranking key."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from adaptive.prompts.pruning import RANKING_SEED, PruneConfig, prune
from adaptive.prompts.selection import chain, drop_redundant, rank_by_information, select_prompts
from adaptive.prompts.tier_plan import fit_items, fit_tier, redundancy_groups, split_by_fit
from adaptive.prompts.tiers import assign_tiers
from tests.factories import two_tier_data


def test_comparisons_in_a_tier_among_a_subset():
    tiers = assign_tiers(
        np.array([3.0, 2.0, 1.0, 0.0]), np.array([0, 2, 0, 1, 2]), np.array([1, 3, 2, 0, 3])
    )
    np.testing.assert_array_equal(tiers.comparisons_in(0), [0, 3])
    np.testing.assert_array_equal(tiers.comparisons_in(1), [1, 4])
    np.testing.assert_array_equal(tiers.comparisons_in(0, among=np.array([1, 2, 3])), [3])
    np.testing.assert_array_equal(tiers.comparisons_in(-1, among=np.array([2, 4])), [2])


def test_the_ranking_key_does_not_matter():
    """plan_tier's steps draw nothing: the ranking is the same under any key.

    RANKING_SEED is only the key it is handed.
    """
    rng = np.random.default_rng(0)
    score = rng.exponential(size=30)
    groups = [[0, 5, 9], [3, 4]]
    policy = chain(drop_redundant(groups, score), rank_by_information(score))
    rankings = [
        select_prompts(policy, jax.random.PRNGKey(seed), 30) for seed in (RANKING_SEED, 1, 99)
    ]
    for other in rankings[1:]:
        np.testing.assert_array_equal(other.order, rankings[0].order)
        assert other.dropped == rankings[0].dropped
    assert len(rankings[0].order) == 30 - 3


@pytest.fixture(scope="module")
def global_fit():
    data = two_tier_data(0)
    fit = fit_items(data, np.arange(data.num_comparisons), jax.random.PRNGKey(0), 100)
    return data, fit


def test_tiers_from_a_fit_split_the_two_groups(global_fit):
    data, fit = global_fit
    tiers = split_by_fit(data, fit, num_tiers=2)
    assert tiers.system_tier.tolist() == [0, 0, 0, 1, 1, 1]
    np.testing.assert_array_equal(tiers.comparisons_in(0), [0, 1, 2])
    np.testing.assert_array_equal(tiers.comparisons_in(1), [3, 4, 5])
    assert (tiers.comparison_tier[6:] == -1).all()


def test_fit_tier_refits_inside_the_tier_and_merges(global_fit):
    data, fit = global_fit
    tiers = split_by_fit(data, fit, num_tiers=2)
    key = jax.random.PRNGKey(1)
    tier_fit = fit_tier(data, fit, tiers, 1, key, min_tier_comparisons=2, num_draws=100)
    assert tier_fit.usable and tier_fit.refit is not None
    np.testing.assert_array_equal(tier_fit.comparisons, [3, 4, 5])
    # the refit is the plain fit on the tier's comparisons, under the same key
    alone = fit_items(data, np.array([3, 4, 5]), key, 100)
    np.testing.assert_array_equal(tier_fit.refit.alpha, alone.alpha)
    seen = tier_fit.refit.has_data
    assert seen.all()  # every prompt judged for every comparison in two_tier_data
    np.testing.assert_array_equal(tier_fit.alpha, alone.alpha)
    np.testing.assert_array_equal(tier_fit.b, alone.b)
    assert not np.allclose(tier_fit.alpha, fit.alpha)


def test_fit_tier_keeps_the_global_parameters_when_the_tier_is_not_usable(global_fit):
    data, fit = global_fit
    tiers = split_by_fit(data, fit, num_tiers=2)
    key = jax.random.PRNGKey(1)
    too_small = fit_tier(data, fit, tiers, 0, key, min_tier_comparisons=4, num_draws=100)
    across = fit_tier(data, fit, tiers, -1, key, min_tier_comparisons=1, num_draws=100)
    asked_not = fit_tier(
        data, fit, tiers, 0, key, min_tier_comparisons=2, num_draws=100, refit=False
    )
    one = split_by_fit(data, fit, num_tiers=1)
    single = fit_tier(data, fit, one, 0, key, min_tier_comparisons=1, num_draws=100)
    assert [t.usable for t in (too_small, across, asked_not, single)] == [False, False, True, False]
    for t in (too_small, across, asked_not, single):
        assert t.refit is None
        assert t.alpha is fit.alpha and t.b is fit.b
    assert len(single.comparisons) == data.num_comparisons


def test_redundancy_groups_without_a_threshold_are_empty():
    data = two_tier_data(0)
    assert redundancy_groups(data, np.arange(15), threshold=None, fdr=None) == []


def test_prune_reports_where_each_tier_took_its_item_parameters():
    data = two_tier_data(0)
    config = PruneConfig(
        keep=4, num_draws=60, num_info_draws=20, min_tier_comparisons=3, rank="information"
    )
    plans, tiers, _ = prune(data, config)
    assert [p.info["item_parameters_from_tier"] for p in plans] == [1.0, 1.0]
    assert [p.info["tier_comparisons"] for p in plans] == [3.0, 3.0]
    strict = PruneConfig(
        keep=4, num_draws=60, num_info_draws=20, min_tier_comparisons=4, rank="information"
    )
    plans, _, _ = prune(data, strict)
    assert [p.info["item_parameters_from_tier"] for p in plans] == [0.0, 0.0]


def test_prune_prints_the_information_of_every_prompt_and_of_the_kept_ones(tmp_path, capsys):
    """evalset prune --information: the kept prompts' curve is below the full set's at every
    ability (information adds over prompts) and counts the kept items."""
    import json
    from pathlib import Path

    import polars as pl

    from services.cli import main

    data = Path(__file__).resolve().parents[3] / "data" / "mtbench" / "judgments.csv"
    frame = pl.read_csv(data)
    first = frame["item_id"].unique(maintain_order=True).head(30).to_list()
    frame.filter(pl.col("item_id").is_in(first)).write_csv(tmp_path / "j.csv")
    argv = ["prune", "--data", str(tmp_path / "j.csv"), "--keep", "5", "--format", "json"]
    assert main([*argv, "--quiet"]) == 0
    kept = {r["item_id"] for r in json.loads(capsys.readouterr().out) if r["kept"]}
    assert main([*argv, "--quiet", "--information"]) == 0
    curves = json.loads(capsys.readouterr().out)
    full = {r["theta"]: r for r in curves if r["prompts"] == "all"}
    some = {r["theta"]: r for r in curves if r["prompts"] == "kept"}
    assert full.keys() == some.keys() and len(full) > 10
    assert 0 < next(iter(some.values()))["num_prompts"] <= len(kept)
    for theta, row in some.items():
        assert 0 < row["information"] <= full[theta]["information"]
        assert row["se"] >= full[theta]["se"]
