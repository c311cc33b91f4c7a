"""The next-batch recommender: properties that must hold for every batch."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from adaptive.recommend import (
    BURN_IN,
    CLOSEST,
    REPEAT,
    SHOW_A,
    TARGETED,
    CellState,
    RecommenderState,
    Request,
    assign_order,
    new_system_mask,
    recommend,
    recommend_key,
    system_strength,
)
from adaptive.stopping.decisions import UNDECIDED, decide


def judgments(nets, counts, num_prompts, seed=0):
    """Signed judgments of each comparison with P(B) - P(A) = net (no ties), fresh prompts."""
    rng = np.random.default_rng(seed)
    comp, prompt, signed = [], [], []
    for c, (net, n) in enumerate(zip(nets, counts)):
        comp += [c] * n
        prompt += list(rng.permutation(num_prompts)[:n])
        signed += list(np.where(rng.random(n) < (1 + net) / 2, 1.0, -1.0))
    return np.array(comp, np.int64), np.array(prompt, np.int64), np.array(signed)


def make_snapshot(
    nets,
    counts,
    num_prompts=12,
    *,
    pairs=None,
    num_systems=None,
    seed=0,
    system_judgments=None,
    strength=None,
) -> RecommenderState:
    """A snapshot whose decisions come from simulated judgments of each comparison."""
    num_c = len(nets)
    comp, prompt, signed = judgments(nets, counts, num_prompts, seed)
    judged = np.zeros((num_c, num_prompts), np.int64)
    np.add.at(judged, (comp, prompt), 1)
    if pairs is None:
        pairs = [(i, i + 1) for i in range(num_c)]
    pa = np.array([a for a, _ in pairs])
    pb = np.array([b for _, b in pairs])
    num_s = num_systems or int(max(pa.max(), pb.max()) + 1)
    return RecommenderState(
        version=3,
        theta_mean=np.asarray(nets, float),
        pair_a=pa,
        pair_b=pb,
        dimension=np.zeros(num_c, np.int64),
        strength=np.asarray(strength if strength is not None else np.zeros((1, num_s)), float),
        system_judgments=np.asarray(
            system_judgments if system_judgments is not None else np.full((1, num_s), 1000)
        ),
        num_judgments=int(len(comp)),
        decisions=decide(comp, prompt, signed, num_c),
        judged=judged,
    )


# ---------------------------------------------------------------- decisions


def test_closed_comparison_gets_no_cell_unless_targeted():
    # comparison 0 is clearly decided (B wins everything), 1 and 2 are open
    snap = make_snapshot([1.0, 0.0, 0.1], [120, 40, 40], num_prompts=200)
    assert snap.decisions.closed.tolist() == [True, False, False]
    batch, info = recommend(
        recommend_key(0, snap.version), snap, CellState.open(3, 200), Request(size=60)
    )
    assert len(batch) == 60 and 0 not in batch.comparison.tolist()
    assert info.decided.tolist() == [True, False, False]
    named, _ = recommend(
        recommend_key(0, snap.version), snap, CellState.open(3, 200), Request(size=10, targets=(0,))
    )
    assert set(named.comparison.tolist()) == {0}
    assert (named.reason == TARGETED).all()


def test_burn_in_first_then_closest_to_a_decision():
    # 0: strong effect with 25 judgments (near a decision), 1: no effect with 25,
    # 2: only 5 judgments (in burn-in)
    snap = make_snapshot([0.5, 0.0, 0.3], [25, 25, 5], num_prompts=400, seed=3)
    d = snap.decisions
    assert (d.outcome == UNDECIDED).all()
    assert d.needed[0] < d.needed[1]
    batch, _ = recommend(
        recommend_key(1, snap.version), snap, CellState.open(3, 400), Request(size=30, burn_in=20)
    )
    comps = batch.comparison.tolist()
    # the burn-in of comparison 2 (15 more) comes first, then the closest one
    assert comps[:15] == [2] * 15 and (batch.reason[:15] == BURN_IN).all()
    assert comps[15] == 0 and batch.reason[15] == CLOSEST
    assert comps.count(0) > comps.count(1)


def test_a_fresh_prompt_per_judgment_and_repeats_only_when_allowed():
    snap = make_snapshot([0.0], [8], num_prompts=10)
    fresh = snap.judged[0] == 0
    batch, _ = recommend(
        recommend_key(0, snap.version), snap, CellState.open(1, 10), Request(size=10)
    )
    # without repeats only the unjudged prompts are served, once each
    assert sorted(batch.prompt.tolist()) == sorted(np.flatnonzero(fresh).tolist())
    more, _ = recommend(
        recommend_key(0, snap.version),
        snap,
        CellState.open(1, 10),
        Request(size=10, allow_repeats=True),
    )
    picked = more.prompt.tolist()
    k = int(fresh.sum())
    assert set(picked[:k]) == set(np.flatnonzero(fresh).tolist())
    assert all(snap.judged[0, p] > 0 for p in picked[k:]) and (more.reason[k:] == REPEAT).all()


def test_unannotatable_cells_are_never_served():
    snap = make_snapshot([0.0, 0.1], [0, 0], num_prompts=30)
    rng = np.random.default_rng(4)
    ok = rng.random((2, 30)) < 0.4
    cells = CellState.open(2, 30)._replace(annotatable=ok)
    batch, info = recommend(recommend_key(0, snap.version), snap, cells, Request(size=100))
    assert len(batch) == int(ok.sum()) and info.unannotatable == int((~ok).sum())
    assert ok[batch.comparison, batch.prompt].all()


# ---------------------------------------------------------------- batches


def test_annotator_never_gets_a_cell_twice():
    snap = make_snapshot([0.1, 0.2, -0.3], [0, 0, 0], num_prompts=10)
    cells = CellState.open(3, 10)
    rng = np.random.default_rng(0)
    judged = rng.random((3, 10)) < 0.5  # what this annotator already judged
    seen = judged.copy()
    for round_ in range(3):
        request = Request(size=4, exclude=seen, max_per_cell=1)
        batch, _ = recommend(recommend_key(round_, snap.version), snap, cells, request)
        picked = list(zip(batch.comparison.tolist(), batch.prompt.tolist()))
        assert len(picked) == len(set(picked)), "a cell twice in one batch"
        assert not any(seen[c, p] for c, p in picked), "a cell the annotator already judged"
        for c, p in picked:
            seen[c, p] = True
    # when every cell is judged, nothing is handed out
    batch, _ = recommend(
        recommend_key(9, snap.version), snap, cells, Request(size=5, exclude=np.ones((3, 10), bool))
    )
    assert len(batch) == 0


def test_same_seed_same_batch_and_other_seed_other_order():
    snap = make_snapshot(np.zeros(6), [10] * 6, num_prompts=30)
    cells = CellState.open(6, 30)
    # with repeats (the judgment as the unit): 30 prompts cannot close a null comparison
    request = Request(size=25, allow_repeats=True)
    key = recommend_key(7, snap.version)
    a, _ = recommend(key, snap, cells, request)
    b, _ = recommend(key, snap, cells, request)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    c, _ = recommend(recommend_key(8, snap.version), snap, cells, request)
    assert not (np.array_equal(a.shown_first, c.shown_first) and np.array_equal(a.prompt, c.prompt))


def test_shown_first_balanced_within_one_per_cell():
    snap = make_snapshot([0.0, 0.1], [0, 0], num_prompts=3)
    cells = CellState.open(2, 3)
    shown_a = np.zeros((2, 3), np.int64)
    shown_b = np.zeros((2, 3), np.int64)
    for round_ in range(15):
        state = cells._replace(shown_a=shown_a.copy(), shown_b=shown_b.copy())
        batch, _ = recommend(
            recommend_key(round_, snap.version),
            snap,
            state,
            Request(size=4, max_per_cell=2, allow_repeats=True),
        )
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
    snap = make_snapshot([0.0, 0.0], [0, 0], num_prompts=5)
    available = np.array([[0, 2, 0, 1, 0], [1, 0, 0, 0, 0]])
    cells = CellState(available, np.zeros_like(available), np.zeros_like(available))
    batch, _ = recommend(
        recommend_key(1, snap.version),
        snap,
        cells,
        Request(size=10, max_per_cell=5, allow_repeats=True),
    )
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
        np.zeros(6), [0] * 6, pairs=pairs, strength=strength, system_judgments=counts
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
    batch, _ = recommend(recommend_key(0, snap2.version), snap2, CellState.open(6, 12), request)
    assert set(snap.pair_a[batch.comparison].tolist()) <= {2, 3, 4}


def test_system_strength_recovers_a_leaderboard():
    s = np.array([0.0, 1.0, -0.5, 2.0])
    pairs = [(0, 1), (1, 2), (2, 3), (0, 3)]
    pa = np.array([a for a, _ in pairs])
    pb = np.array([b for _, b in pairs])
    est = system_strength(s[pb] - s[pa], pa, pb, 5)
    np.testing.assert_allclose(est[:4], s - s.mean(), atol=1e-9)
    assert np.isnan(est[4])


def test_latency_benchmark_runs_with_tiny_settings():
    """As a user runs it (its folder on the path: benchmarks/named_snapshots.py)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "recommend_latency.py"
    argv = ["--prompts", "30", "--systems", "4", "--size", "10", "--repeats", "3"]
    done = subprocess.run([sys.executable, str(path), *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert 1 <= result["comparisons"] <= 6 and result["returned"] == 10
    assert 0 < result["p50_ms"] <= result["p95_ms"]


def test_the_key_is_folded_from_the_seed_and_the_snapshot_version():
    """STYLE.md rule 2, and the derivation the CLI and the API use (evalset.recommend_adapter)."""
    from evalset.recommend_adapter import rng_key as adapter_key

    snap = make_snapshot(np.zeros(2), [4, 4], num_prompts=6)
    key = recommend_key(5, snap.version)
    expected = jax.random.fold_in(jax.random.PRNGKey(5), snap.version)
    np.testing.assert_array_equal(np.asarray(key), np.asarray(expected))
    np.testing.assert_array_equal(np.asarray(adapter_key(5, snap)), np.asarray(key))
    assert not np.array_equal(np.asarray(recommend_key(5, snap.version + 1)), np.asarray(key))


@pytest.mark.parametrize("seed, version", [(0, 0), (2**31 - 1, 2**31 - 1), (2**31, 3), (7, 2**31)])
def test_the_compiled_key_is_the_eager_fold_in_and_past_int32_too(seed, version):
    """recommend_key compiles the fold-in for int32 inputs; either way it is the same key."""
    expected = jax.random.fold_in(jax.random.PRNGKey(seed), version)
    np.testing.assert_array_equal(np.asarray(recommend_key(seed, version)), np.asarray(expected))


def test_an_int_seed_still_works_but_is_deprecated():
    """The old path (benchmarks still pass ints): numpy seeded with the int, as before."""
    snap = make_snapshot(np.zeros(4), [6] * 4, num_prompts=20)
    cells, request = CellState.open(4, 20), Request(size=12)
    with pytest.warns(DeprecationWarning, match="recommend_key"):
        old, _ = recommend(3, snap, cells, request)
    with pytest.warns(DeprecationWarning):
        again, _ = recommend(np.int64(3), snap, cells, request)
    for x, y in zip(old, again):
        np.testing.assert_array_equal(x, y)
    keyed, _ = recommend(recommend_key(3, snap.version), snap, cells, request)
    assert len(keyed) == len(old)


class _RowLog(np.ndarray):
    """A (C, P) mask that records which comparison rows are read one at a time."""

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            self.rows_read.add(int(index))
        return np.ndarray.__getitem__(self, index)


def test_allocate_reads_only_the_rows_of_the_comparisons_it_serves():
    from adaptive.recommend import allocate

    num_c, num_p = 40, 500
    decisions = decide(*judgments([0.2] * num_c, [30] * num_c, num_p), num_c)
    candidates = np.ones((num_c, num_p), bool).view(_RowLog)
    candidates.rows_read = set()
    judged = np.zeros((num_c, num_p), np.int64)
    rows = np.ones(num_c, bool)
    comp, prompt, _, _ = allocate(
        np.random.default_rng(0), decisions, candidates, judged, 12, rows=rows, allow_repeats=False
    )
    assert len(comp) == 12 and len(set(zip(comp.tolist(), prompt.tolist()))) == 12
    assert candidates.rows_read == set(comp.tolist()) and len(candidates.rows_read) < num_c
    # ``rows`` only skips the pass that finds them: the same batch without it
    again = allocate(
        np.random.default_rng(0),
        decisions,
        candidates.view(np.ndarray),
        judged,
        12,
        allow_repeats=False,
    )
    np.testing.assert_array_equal(again[0], comp)
    np.testing.assert_array_equal(again[1], prompt)


def test_allocate_skips_a_named_row_without_candidates():
    from adaptive.recommend import allocate

    decisions = decide(*judgments([0.0, 0.0], [0, 0], 6), 2)
    candidates = np.zeros((2, 6), bool)
    candidates[1, :3] = True
    comp, prompt, _, _ = allocate(
        np.random.default_rng(1),
        decisions,
        candidates,
        np.zeros((2, 6), np.int64),
        5,
        rows=np.array([True, True]),
        allow_repeats=False,
    )
    assert comp.tolist() == [1, 1, 1] and sorted(prompt.tolist()) == [0, 1, 2]


def test_a_comparison_its_prompts_cannot_close_is_not_served_and_named():
    """Was: an open comparison with a few unused prompts and a need of hundreds of
    judgments took the batch (11 of 14 cells on NCM), though they could not close it."""
    snap = make_snapshot([0.0, 0.0], [60, 60], num_prompts=65)
    judged = np.zeros((2, 65), np.int64)
    judged[:, :60] = 1  # 5 fresh prompts each: even five B wins cannot decide a 50:50 split
    snap = snap._replace(judged=judged)
    cells = CellState.open(2, 65)
    batch, info = recommend(recommend_key(0, snap.version), snap, cells, Request(size=10))
    assert len(batch.comparison) == 0
    assert info.unclosable.tolist() == [5, 5]
    assert (snap.decisions.needed_possible > 5).all()
    # a comparison its fresh prompts can still close in the best case is served
    wide = snap._replace(judged=np.zeros((2, 65), np.int64))
    batch, info = recommend(recommend_key(0, wide.version), wide, cells, Request(size=10))
    assert len(batch.comparison) == 10 and info.unclosable.tolist() == [-1, -1]
    # named as a target it is served all the same (the other is no target: not checked);
    # with repeats the check does not apply
    batch, info = recommend(
        recommend_key(0, snap.version), snap, cells, Request(size=10, targets=(1,))
    )
    assert set(batch.comparison.tolist()) == {1} and info.unclosable.tolist() == [-1, -1]
    batch, _ = recommend(
        recommend_key(0, snap.version), snap, cells, Request(size=10, allow_repeats=True)
    )
    assert len(batch.comparison) == 10
