"""Selection steps and pruning: ordering, reasons, zero-information and coverage guarantees."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from adaptive.prompts import selection
from adaptive.prompts.pruning import COVERS, SELECTED, expected_se_curve, plan_rows, plan_tier
from adaptive.prompts.selection import (
    LOW_INFORMATION,
    REDUNDANT,
    UNAVAILABLE,
    chain,
    describe_reason,
    drop_redundant,
    permutation,
    prefix_masks,
    rank_by_information,
    rank_random,
    restrict,
    select_prompts,
    top_k,
)
from adaptive.prompts.tiers import assign_tiers, split_tiers, system_ability
from stan_free_models.information import information_matrix

KEY = jax.random.PRNGKey(0)


def graded_information(alpha: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    b = np.tile(np.linspace(-1.5, 1.5, 6), (len(alpha), 1))
    return np.asarray(information_matrix(thetas, alpha, b), dtype=np.float64)


def test_zero_information_prompt_is_never_kept_before_an_informative_one():
    rng = np.random.default_rng(0)
    alpha = np.exp(rng.normal(0, 0.5, 12))
    alpha[[0, 5]] = 0.0  # prompts whose responses do not depend on ability
    info = graded_information(alpha, rng.normal(0, 1, 50))
    assert info[:, 0].max() == 0.0
    score = info.mean(axis=0)
    ranking = select_prompts(chain(rank_by_information(score), top_k(10)), KEY, 12)
    assert set(ranking.order.tolist()).isdisjoint({0, 5})
    assert ranking.dropped[0] == (LOW_INFORMATION, 0)
    for keep in range(1, 11):
        plan = plan_tier(info, [], np.zeros((0, 12), bool), tier=0, keep=keep)
        assert not {0, 5} & set(plan.kept.tolist())
    plan = plan_tier(info, [], np.zeros((0, 12), bool), tier=0, target_se_ratio=1.0)
    assert not {0, 5} & set(plan.kept.tolist())  # the full-set SE needs no uninformative prompt
    # even one informative prompt comes first whatever the index order
    full = select_prompts(rank_by_information(score), KEY, 12)
    assert full.order[-2:].tolist() == [0, 5]


def test_chain_restrict_redundant_top_k_and_reasons():
    score = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.5])
    available = np.array([True, True, True, True, False, True])
    policy = chain(
        restrict(available),
        drop_redundant([[0, 2], [3, 4]], score),
        rank_by_information(score),
        top_k(2, tier=1),
    )
    ranking = select_prompts(policy, KEY, 6)
    assert ranking.order.tolist() == [0, 1]
    assert ranking.dropped[4] == (UNAVAILABLE, -1)
    assert ranking.dropped[2] == (REDUNDANT, 0)
    assert ranking.dropped[3] == (LOW_INFORMATION, 1)  # its group partner was unavailable
    assert ranking.dropped[5] == (LOW_INFORMATION, 1)
    names = [f"p{i}" for i in range(6)]
    assert describe_reason(ranking.dropped[2], names, ["better", "rest"]) == "redundant with p0"
    assert (
        describe_reason(ranking.dropped[5], names, ["better", "rest"])
        == "low information for tier rest"
    )


def test_random_ranking_is_reproducible_and_a_permutation():
    a = select_prompts(rank_random(), jax.random.PRNGKey(3), 30).order
    b = select_prompts(rank_random(), jax.random.PRNGKey(3), 30).order
    c = select_prompts(rank_random(), jax.random.PRNGKey(4), 30).order
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
    assert sorted(a.tolist()) == list(range(30))


@pytest.mark.parametrize("n", [2, 3, 30, 113, 199, 256, 257, 1625, 1626, 2100])
def test_permutation_is_jax_permutation(n):
    # 1625 -> 1626 is where JAX's shuffle goes from one sort round to two
    for seed in range(4):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), n)
        expected = np.asarray(jax.random.permutation(key, n))
        np.testing.assert_array_equal(permutation(key, n), expected)
    typed = jax.random.key(5)
    np.testing.assert_array_equal(permutation(typed, n), jax.random.permutation(typed, n))


def test_permutation_compiles_once_for_many_sizes():
    before = selection._padded_shuffle._cache_size()
    orders = [permutation(jax.random.PRNGKey(n), n) for n in (101, 113, 156, 188, 194, 199)]
    assert selection._padded_shuffle._cache_size() - before <= 1
    assert all(sorted(o.tolist()) == list(range(len(o))) for o in orders)


def test_prefix_masks():
    masks = prefix_masks(np.array([4, 1, 3]), [1, 2, 5], 6)
    assert masks.tolist() == [
        [False, False, False, False, True, False],
        [False, True, False, False, True, False],
        [False, True, False, True, True, False],
    ]


def test_pruning_keeps_the_only_prompt_covering_a_comparison():
    rng = np.random.default_rng(1)
    alpha = np.exp(rng.normal(0, 0.5, 20))
    alpha[7] = 0.05  # nearly uninformative ...
    info = graded_information(alpha, rng.normal(0, 1, 40))
    coverage = np.ones((4, 20), dtype=bool)
    coverage[2] = False
    coverage[2, 7] = True  # ... but the only prompt judged for comparison 2
    for keep in (1, 5, 10):
        plan = plan_tier(
            info, [], coverage, tier=0, keep=keep, comparisons=np.array([10, 11, 12, 13])
        )
        assert 7 in plan.kept.tolist()
        assert plan.reasons[7] == (COVERS, 12)
    # and never as "redundant": the representative of its group cannot cover comparison 2
    plan = plan_tier(info, [[7, 8]], coverage, tier=0, target_se_ratio=1.1)
    assert 7 in plan.kept.tolist()


def test_plan_rows_say_why_each_prompt_is_kept_or_dropped():
    rng = np.random.default_rng(1)
    alpha = np.exp(rng.normal(0, 0.5, 6))
    info = graded_information(alpha, rng.normal(0, 1, 40))
    coverage = np.ones((2, 6), dtype=bool)
    coverage[1] = False
    coverage[1, 5] = True  # prompt 5 is the only one judged for comparison 1
    plan = plan_tier(info, [[0, 1]], coverage, tier=0, keep=2, comparisons=np.array([0, 1]))
    prompts = [f"q{i}" for i in range(6)]
    rows = plan_rows(
        [plan],
        dimension="overall",
        prompts=prompts,
        comparison_names=[("A", "B"), ("A", "C")],
        num_tiers=1,
    )
    assert [r["item_id"] for r in rows] == prompts
    by_id = {r["item_id"]: r for r in rows}
    assert by_id["q5"]["kept"] and by_id["q5"]["reason"] == "only kept prompt judged for A vs C"
    kept = [r for r in rows if r["kept"] and r["item_id"] != "q5"]
    assert len(kept) == 2 and all(r["reason"].startswith("top 2 by information") for r in kept)
    # one member of the redundant pair is dropped, naming the other one
    dropped = [by_id[q] for q in ("q0", "q1") if "redundant" in by_id[q]["reason"]]
    assert len(dropped) == 1 and not dropped[0]["kept"]
    assert ({"q0", "q1"} - {dropped[0]["item_id"]}).pop() in dropped[0]["reason"]
    assert all(r["se_ratio"] == plan.se_ratio for r in rows)


def test_target_ratio_is_met_with_the_fewest_prompts():
    rng = np.random.default_rng(2)
    info = graded_information(np.exp(rng.normal(0, 1, 60)), rng.normal(0, 1, 30))
    plan = plan_tier(info, [], np.zeros((0, 60), bool), tier=0, target_se_ratio=1.05)
    k = len(plan.kept)
    assert plan.se_ratio <= 1.05
    curve = expected_se_curve(info, plan.order)
    assert curve[k - 2] / curve[-1] > 1.05  # one fewer would miss the target
    assert all(plan.reasons[p][0] == SELECTED for p in plan.kept.tolist())
    assert np.all(np.diff(curve) <= 1e-12)  # adding prompts never raises the expected SE


def test_system_ability_and_tiers():
    skill = np.array([2.0, 1.0, 0.0, -1.0, -2.0, 0.5])
    pair_a = np.array([0, 1, 2, 3, 0, 1, 2])
    pair_b = np.array([1, 2, 3, 4, 2, 3, 5])
    theta = skill[pair_b] - skill[pair_a]
    est = system_ability(theta, pair_a, pair_b, 6, method="lstsq")
    np.testing.assert_allclose(est - est.mean(), skill - skill.mean(), atol=1e-9)
    tiers = split_tiers(theta, pair_a, pair_b, 6, num_tiers=2)
    assert tiers.system_tier.tolist() == [0, 0, 1, 1, 1, 0]
    assert tiers.comparison_tier.tolist() == [0, -1, 1, 1, -1, -1, -1]
    # a system without any training comparison joins its opponent's tier
    ability = est.copy()
    ability[5] = np.nan
    t2 = assign_tiers(ability, pair_a, pair_b, num_tiers=2, sizes=[2])
    assert t2.system_tier[5] == t2.system_tier[2]
    with pytest.raises(ValueError):
        assign_tiers(ability, pair_a, pair_b, num_tiers=2, sizes=[9])
