"""The next-batch recommender: properties that must hold for every batch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from adaptive.recommend import (
    DECIDE_Z,
    SHOW_A,
    CellState,
    Request,
    Snapshot,
    anytime_boundary,
    assign_order,
    decided_mask,
    decision_weights,
    greedy_information,
    grm_information,
    new_system_mask,
    prompt_level_z,
    recommend,
    system_strength,
)
from stan_free_models.graded_response import category_probs


def make_snapshot(
    theta_mean,
    theta_sd,
    num_prompts=12,
    *,
    pairs=None,
    num_systems=None,
    seed=0,
    system_judgments=None,
    strength=None,
) -> Snapshot:
    rng = np.random.default_rng(seed)
    theta_mean = np.asarray(theta_mean, float)
    num_c = len(theta_mean)
    if pairs is None:
        pairs = [(i, i + 1) for i in range(num_c)]
    pa = np.array([a for a, _ in pairs])
    pb = np.array([b for _, b in pairs])
    num_s = num_systems or int(max(pa.max(), pb.max()) + 1)
    info = rng.uniform(0.05, 0.6, size=(num_c, num_prompts))
    return Snapshot(
        version=3,
        theta_mean=theta_mean,
        theta_cov=np.diag(np.asarray(theta_sd, float) ** 2 * np.ones(num_c)),
        info=info,
        item_sd=rng.uniform(0.1, 1.0, size=(num_c, num_prompts)),
        pair_a=pa,
        pair_b=pb,
        dimension=np.zeros(num_c, np.int64),
        strength=np.asarray(strength if strength is not None else np.zeros((1, num_s)), float),
        system_judgments=np.asarray(
            system_judgments if system_judgments is not None else np.full((1, num_s), 1000)
        ),
    )


# ---------------------------------------------------------------- information


def test_grm_information_matches_finite_differences_of_category_probs():
    """I(theta) = sum_c (dP_c/dtheta)^2 / P_c, with P_c from the model's own category_probs."""
    theta = np.array([-1.3, 0.0, 0.4, 2.2])
    alpha = np.array([0.5, 1.7, 1.0, 2.5])
    b = np.array([[-0.8, 0.3], [-0.1, 0.2], [-1.5, 1.5], [0.0, 1.0]])
    h = 1e-3
    probs = lambda t: np.asarray(category_probs(jnp.asarray(t), jnp.asarray(alpha), jnp.asarray(b)))  # noqa: E731
    jax.config.update("jax_enable_x64", True)
    try:
        dp = (probs(theta + h) - probs(theta - h)) / (2 * h)
        expected = (dp**2 / probs(theta)).sum(axis=-1)
    finally:
        jax.config.update("jax_enable_x64", False)
    np.testing.assert_allclose(grm_information(theta, alpha, b), expected, rtol=1e-4)


def test_grm_information_two_categories_is_2pl():
    p = 1 / (1 + np.exp(-1.5 * (0.3 - 0.1)))
    assert grm_information(0.3, 1.5, np.array([0.1])) == pytest.approx(1.5**2 * p * (1 - p))


# ---------------------------------------------------------------- decisions


def test_decided_comparison_gets_no_cells_unless_targeted():
    snap = make_snapshot([3.0, 0.1, -0.2], [0.5, 0.5, 0.5])  # z = 6, 0.2, -0.4
    assert decided_mask(snap).tolist() == [True, False, False]
    cells = CellState.open(3, 12)
    batch, info = recommend(0, snap, cells, Request(size=20, explore_share=0.2))
    assert len(batch) == 20
    assert 0 not in batch.comparison
    assert info.decided.tolist() == [True, False, False]
    # named as a target, the decided comparison does get cells
    batch, _ = recommend(0, snap, cells, Request(size=10, targets=(0,), explore_share=0.0))
    assert len(batch) == 10 and set(batch.comparison.tolist()) == {0}


def test_margin_is_stricter_than_the_95_interval():
    # |z| = 2.2 is significant at 95% but not decided for allocation
    snap = make_snapshot([2.2, 2.7], [1.0, 1.0])
    assert decided_mask(snap).tolist() == [False, True]
    assert DECIDE_Z == pytest.approx(2.5758, abs=1e-4)


def test_prompt_level_evidence_must_also_pass_its_anytime_boundary():
    snap = make_snapshot([3.0], [0.5])  # model z = 6
    weak = snap._replace(evidence_z=np.array([2.9]), evidence_prompts=np.array([50]))
    strong = snap._replace(evidence_z=np.array([4.0]), evidence_prompts=np.array([50]))
    assert anytime_boundary(np.array([50]))[0] > 2.9
    assert decided_mask(weak).tolist() == [False]
    assert decided_mask(strong).tolist() == [True]


def test_prompt_level_z_counts_prompts_not_judgments():
    # 6 prompts, each judged 3 times B-better except one prompt A-better
    comparison = np.zeros(18, np.int64)
    prompt = np.repeat(np.arange(6), 3)
    signed = np.where(prompt == 0, -1.0, 1.0)
    z = prompt_level_z(comparison, prompt, signed, 1)[0]
    means = np.array([-1, 1, 1, 1, 1, 1.0])
    assert z == pytest.approx(means.mean() / (means.std(ddof=1) / np.sqrt(6)))
    assert np.isnan(prompt_level_z(comparison[:6], prompt[:6], signed[:6], 1)[0])


# ---------------------------------------------------------------- batches


def test_annotator_never_gets_a_cell_twice():
    snap = make_snapshot([0.1, 0.2, -0.3], [0.5, 0.5, 0.5], num_prompts=10)
    cells = CellState.open(3, 10)
    rng = np.random.default_rng(0)
    judged = rng.random((3, 10)) < 0.5  # what this annotator already judged
    seen = judged.copy()
    for round_ in range(3):
        request = Request(size=4, exclude=seen, max_per_cell=1)
        batch, _ = recommend(round_, snap, cells, request)
        picked = list(zip(batch.comparison.tolist(), batch.prompt.tolist()))
        assert len(picked) == len(set(picked)), "a cell twice in one batch"
        assert not any(seen[c, p] for c, p in picked), "a cell the annotator already judged"
        for c, p in picked:
            seen[c, p] = True
    # when every cell is judged, nothing is handed out
    batch, _ = recommend(9, snap, cells, Request(size=5, exclude=np.ones((3, 10), bool)))
    assert len(batch) == 0


def test_same_seed_same_batch_and_other_seed_other_order():
    snap = make_snapshot(np.zeros(6), np.ones(6), num_prompts=30)
    cells = CellState.open(6, 30)
    request = Request(size=25)
    key = jax.random.fold_in(jax.random.PRNGKey(7), snap.version)
    a, _ = recommend(key, snap, cells, request)
    b, _ = recommend(key, snap, cells, request)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    c, _ = recommend(jax.random.fold_in(jax.random.PRNGKey(8), snap.version), snap, cells, request)
    assert not (np.array_equal(a.shown_first, c.shown_first) and np.array_equal(a.prompt, c.prompt))


def test_batch_spreads_over_cells_with_fantasised_updates():
    # one cell far more informative than all others: without fantasised updates
    # and the per-cell cap the whole batch would go there
    snap = make_snapshot([0.0, 0.0], [1.0, 1.0], num_prompts=8)
    info = np.full((2, 8), 0.1)
    info[0, 0] = 5.0
    snap = snap._replace(info=info)
    comp, prompt, gain, var = greedy_information(
        snap, np.ones((2, 8), bool), np.ones(2, bool), 10, max_per_cell=1
    )
    assert len(set(zip(comp.tolist(), prompt.tolist()))) == 10
    assert (comp == 0).sum() < 10 and (comp == 1).sum() > 0  # comparison 1 gets its share
    assert np.all(np.diff(gain) <= 1e-12)  # each pick is worth no more than the one before
    # the fantasised covariance is what the picks' information implies (diagonal case)
    added = np.bincount(comp, weights=info[comp, prompt], minlength=2)
    np.testing.assert_allclose(var, 1.0 / (1.0 + added))


def test_per_system_covariance_lets_a_cell_inform_another_comparison():
    # theta_0 = s1 - s0, theta_1 = s2 - s1 share system 1: negatively correlated
    cov = np.array([[1.0, -0.5], [-0.5, 1.0]])
    snap = make_snapshot([0.0, 0.0], [1.0, 1.0], num_prompts=4)._replace(
        theta_cov=cov, info=np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    )
    candidates = np.array([[True] * 4, [False] * 4])
    comp, _, gain, var = greedy_information(snap, candidates, np.array([False, True]), 3)
    # only comparison 1 is a target, yet judgments of comparison 0 reduce its variance;
    # exact Gaussian update after three picks of information 1 on theta_0:
    # var_1 = 1 - 0.25 * 3 / (1 + 3)
    assert gain[0] == pytest.approx(0.25 / 2.0)
    assert comp.tolist() == [0, 0, 0]
    assert var[1] == pytest.approx(1.0 - 0.25 * 3 / 4)
    assert var[0] == pytest.approx(1.0 / 4)
    assert gain.sum() == pytest.approx(1.0 - var[1])


def test_calibration_share_goes_to_uncertain_prompts():
    snap = make_snapshot([0.0, 0.0], [1.0, 1.0], num_prompts=20)
    item_sd = np.full((2, 20), 0.1)
    item_sd[:, [3, 11]] = 5.0  # two prompts with very uncertain parameters
    info = np.full((2, 20), 0.5)
    info[:, [3, 11]] = 0.01  # ... and, at the estimates, little information
    snap = snap._replace(item_sd=item_sd, info=info)
    batch, _ = recommend(0, snap, CellState.open(2, 20), Request(size=20, explore_share=0.1))
    assert batch.explore.sum() == 2
    assert set(batch.prompt[batch.explore].tolist()) == {3, 11}
    batch, _ = recommend(0, snap, CellState.open(2, 20), Request(size=20, explore_share=0.0))
    assert not batch.explore.any() and not np.isin(batch.prompt, [3, 11]).any()


def test_shown_first_balanced_within_one_per_cell():
    snap = make_snapshot([0.0, 0.1], [1.0, 1.0], num_prompts=3)
    cells = CellState.open(2, 3)
    shown_a = np.zeros((2, 3), np.int64)
    shown_b = np.zeros((2, 3), np.int64)
    for round_ in range(15):
        state = cells._replace(shown_a=shown_a.copy(), shown_b=shown_b.copy())
        batch, _ = recommend(round_, snap, state, Request(size=4, max_per_cell=2))
        for c, p, s in zip(batch.comparison, batch.prompt, batch.shown_first):
            if s == SHOW_A:
                shown_a[c, p] += 1
            else:
                shown_b[c, p] += 1
        assert np.abs(shown_a - shown_b).max() <= 1
    assert shown_a.sum() + shown_b.sum() == 60
    # an existing imbalance is repaired first
    state = cells._replace(shown_a=np.full((2, 3), 3), shown_b=np.zeros((2, 3), np.int64))
    order = assign_order(np.random.default_rng(0), state, np.array([0, 0, 1]), np.array([1, 1, 2]))
    assert order.tolist() == [1, 1, 1]


def test_exhausted_cells_are_never_chosen():
    snap = make_snapshot([0.0, 0.0], [1.0, 1.0], num_prompts=5)
    available = np.array([[0, 2, 0, 1, 0], [1, 0, 0, 0, 0]])
    cells = CellState(available, np.zeros_like(available), np.zeros_like(available))
    batch, _ = recommend(1, snap, cells, Request(size=10, max_per_cell=5, explore_share=0.0))
    counts = np.zeros_like(available)
    np.add.at(counts, (batch.comparison, batch.prompt), 1)
    assert (counts <= available).all() and counts.sum() == available.sum()


# ---------------------------------------------------------------- new systems


def test_new_system_is_paired_with_similar_strength_or_a_spread():
    # systems 0..5 established with strengths; system 6 is new
    pairs = [(i, 6) for i in range(6)]
    strength = np.array([[-2.0, -1.0, 0.0, 1.0, 2.0, 3.0, np.nan]])
    counts = np.array([[500, 500, 500, 500, 500, 500, 0]])
    snap = make_snapshot(
        np.zeros(6), np.ones(6), pairs=pairs, strength=strength, system_judgments=counts
    )
    request = Request(size=5, new_system_opponents=3)
    allowed = new_system_mask(snap, request)
    # no data: a spread over the strength range (weakest, middle, strongest)
    assert sorted(snap.pair_a[allowed].tolist()) == [0, 2, 5]
    # a little data and an estimate near system 3: its nearest neighbours
    strength2 = strength.copy()
    strength2[0, 6] = 1.1
    counts2 = counts.copy()
    counts2[0, 6] = 6
    snap2 = snap._replace(strength=strength2, system_judgments=counts2)
    allowed = new_system_mask(snap2, request)
    assert sorted(snap.pair_a[allowed].tolist()) == [2, 3, 4]
    batch, _ = recommend(0, snap2, CellState.open(6, 12), request)
    assert set(snap.pair_a[batch.comparison].tolist()) <= {2, 3, 4}


def test_system_strength_recovers_a_leaderboard():
    s = np.array([0.0, 1.0, -0.5, 2.0])
    pairs = [(0, 1), (1, 2), (2, 3), (0, 3)]
    pa = np.array([a for a, _ in pairs])
    pb = np.array([b for _, b in pairs])
    est = system_strength(s[pb] - s[pa], pa, pb, 5)
    np.testing.assert_allclose(est[:4], s - s.mean(), atol=1e-9)
    assert np.isnan(est[4])


def test_decision_weighting_favours_comparisons_near_the_boundary():
    # three undecided comparisons: |z| = 0, 2, 2.4; the one at the boundary comes first
    snap = make_snapshot([0.0, 1.0, 1.2], [0.5, 0.5, 0.5], num_prompts=10)
    snap = snap._replace(info=np.full((3, 10), 0.4))
    w = decision_weights(snap)
    assert w[1] == pytest.approx(1.0, abs=2e-3) and w[0] < 0.15 and w[2] > w[0]
    cells = CellState.open(3, 10)
    batch, _ = recommend(0, snap, cells, Request(size=6, explore_share=0.0))
    counts = np.bincount(batch.comparison, minlength=3)
    assert counts[1] > counts[0]
    equal, _ = recommend(0, snap, cells, Request(size=6, explore_share=0.0, weighting="variance"))
    # with equal weights and equal variances the batch is spread evenly
    assert np.bincount(equal.comparison, minlength=3).tolist() == [2, 2, 2]


def test_latency_benchmark_runs_with_tiny_settings(capsys):
    import json
    import runpy
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "recommend_latency.py"
    argv = sys.argv
    sys.argv = [str(path), "--prompts", "30", "--systems", "4", "--size", "10", "--repeats", "3"]
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = argv
    assert done.value.code == 0
    result = json.loads(capsys.readouterr().out)
    assert 1 <= result["comparisons"] <= 6 and result["returned"] == 10
    assert 0 < result["p50_ms"] <= result["p95_ms"]
