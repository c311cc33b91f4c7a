"""Redundancy filter: duplicated prompts group together, chance and comparison effects do not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from adaptive.core.cells import build_cells
from adaptive.core.data import read_judgments, validate_judgments
from adaptive.prompts.redundancy import (
    complete_linkage_groups,
    correlation_q_values,
    expected_chance_exceedances,
    find_redundant_groups,
    redundant_pairs_matrix,
)

NCM = Path(__file__).resolve().parents[3] / "data" / "chateval_ncm" / "judgments.csv"


def noise_matrix(seed: int, num_prompts: int = 40, num_comparisons: int = 17):
    rng = np.random.default_rng(seed)
    values = rng.integers(-3, 4, size=(num_prompts, num_comparisons)).astype(float)
    mask = np.ones_like(values, dtype=bool)
    return values, mask


def test_duplicated_prompts_land_in_one_group():
    values, mask = noise_matrix(0)
    values[17] = values[3]  # an exact duplicate
    values[29] = values[3]  # and another one
    groups, info = redundant_pairs_matrix(values, mask)
    assert [3, 17, 29] in groups
    assert sum(3 in g for g in groups) == 1
    assert any({p, q} == {3, 17} for p, q, _ in info.pairs)


def test_duplicated_prompt_through_cells():
    rng = np.random.default_rng(1)
    rows = []
    systems = [f"s{i}" for i in range(8)]
    pairs = [(systems[i], systems[j]) for i in range(8) for j in range(i + 1, 8)][:17]
    for a, b in pairs:
        for p in range(12):
            for k in range(3):
                rows.append((f"p{p}", a, b, f"w{k}", str(rng.choice(["a", "b", "tie"]))))
    frame = pl.DataFrame(
        rows, schema=["item_id", "system_a", "system_b", "annotator_id", "winner"], orient="row"
    )
    dup = frame.filter(pl.col("item_id") == "p4").with_columns(pl.lit("p4-copy").alias("item_id"))
    cells = build_cells(validate_judgments(pl.concat([frame, dup])))
    groups, _ = find_redundant_groups(cells)
    assert ["p4", "p4-copy"] in groups
    assert len(groups) == 1


def test_comparison_effect_needs_centering():
    # unrelated prompts over comparisons with very different means: raw r is high, centered is not
    rng = np.random.default_rng(2)
    comp_mean = np.repeat([-2.5, 2.5], 9)[:17]
    values = np.clip(np.round(comp_mean + rng.normal(0, 0.7, (30, 17))), -3, 3)
    mask = np.ones_like(values, dtype=bool)
    raw_groups, raw = redundant_pairs_matrix(values, mask, basis="raw", fdr=None)
    centered_groups, centered = redundant_pairs_matrix(values, mask, basis="centered")
    assert raw.above_threshold > 300  # of 435 pairs
    assert len(raw_groups) > 0
    assert centered_groups == []


def test_fdr_keeps_chance_correlations_out():
    values, mask = noise_matrix(3, num_prompts=120)
    groups_thr, info_thr = redundant_pairs_matrix(values, mask, fdr=None)
    assert info_thr.above_threshold > 0  # pure noise does cross 0.6 by chance ...
    # ... about as often as the null distribution of r says
    assert info_thr.above_threshold == pytest.approx(info_thr.expected_by_chance, rel=0.5)
    assert len(groups_thr) > 0
    # with the FDR condition, global-null data rarely yields any pair (BH: P(any) <= 5%)
    with_pairs = 0
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        noise = rng.normal(size=(80, 17))
        _, info = redundant_pairs_matrix(noise, np.ones_like(noise, dtype=bool))
        with_pairs += bool(info.pairs)
    assert with_pairs <= 2


def test_q_values_are_bh_adjusted():
    r = np.array([[np.nan, 0.9, 0.1], [0.9, np.nan, 0.5], [0.1, 0.5, np.nan]])
    n = np.full((3, 3), 20)
    q = correlation_q_values(r, n)
    assert np.allclose(q, q.T, equal_nan=True)
    assert q[0, 1] < q[1, 2] < q[0, 2] <= 1.0
    assert expected_chance_exceedances(n, 0.6, 5) == pytest.approx(
        3 * expected_chance_exceedances(np.full((2, 2), 20), 0.6, 5)
    )


def test_complete_linkage_does_not_chain():
    r = np.full((3, 3), np.nan)
    r[0, 1] = r[1, 0] = 0.9
    r[1, 2] = r[2, 1] = 0.8
    r[0, 2] = r[2, 0] = 0.1  # 0 and 2 unrelated: no group of three
    assert complete_linkage_groups(r, 0.6) == [[0, 1]]


def test_chateval_ncm_counts():
    cells = build_cells(read_judgments(NCM))
    groups, info = find_redundant_groups(cells)
    raw_groups, raw = find_redundant_groups(cells, basis="raw", fdr=None)
    assert raw.above_threshold == 1893
    assert info.above_threshold == 316
    assert 150 < info.expected_by_chance < 220
    assert len(groups) == 2 and sum(len(g) for g in groups) == 4
    i, j = cells.prompts.index("ncm-008"), cells.prompts.index("ncm-009")
    assert raw.correlation[i, j] == pytest.approx(0.64, abs=0.01)
    assert info.correlation[i, j] == pytest.approx(0.56, abs=0.01)


def _complete_linkage_on_the_whole_matrix(correlation, threshold):
    """The clustering as it ran before it was restricted to prompts with a linked pair."""
    num = correlation.shape[0]
    r = np.where(np.isnan(correlation), -np.inf, correlation)
    clusters = {i: [i] for i in range(num)}
    link = r.copy()
    np.fill_diagonal(link, -np.inf)
    active = np.ones(num, dtype=bool)
    while True:
        masked = np.where(active[:, None] & active[None, :], link, -np.inf)
        i, j = divmod(int(np.argmax(masked)), num)
        if masked[i, j] <= threshold:
            break
        clusters[i].extend(clusters.pop(j))
        active[j] = False
        link[i, :] = np.minimum(link[i, :], link[j, :])
        link[:, i] = link[i, :]
        link[i, i] = -np.inf
    groups = [sorted(m) for m in clusters.values() if len(m) > 1]
    groups.sort(key=lambda g: (-len(g), g[0]))
    return groups


def test_complete_linkage_on_the_linked_prompts_alone_is_the_same_as_on_all():
    from adaptive.prompts.redundancy import complete_linkage_groups

    rng = np.random.default_rng(0)
    for trial in range(20):
        num = int(rng.integers(2, 60))
        corr = np.clip(rng.normal(0.2, 0.35, (num, num)), -1, 1)
        corr = (corr + corr.T) / 2
        corr[rng.uniform(size=(num, num)) < 0.1] = np.nan
        corr = np.where(np.isnan(corr) | np.isnan(corr.T), np.nan, corr)
        np.fill_diagonal(corr, np.nan)
        if trial % 3 == 0:
            corr = np.round(corr, 1)  # ties
        assert complete_linkage_groups(corr, 0.6) == _complete_linkage_on_the_whole_matrix(
            corr, 0.6
        )


def test_too_many_prompts_skip_the_grouping_and_say_so(monkeypatch):
    import polars as pl

    import adaptive.estimation.pipeline as pipeline
    from adaptive.estimation.fitting import preset_config
    from stan_free_models.simulate import simulate_campaign

    camp = simulate_campaign(np.random.default_rng(0), num_comparisons=3, num_prompts=12)
    config = preset_config("default", method="fast", num_draws=50)
    monkeypatch.setattr(pipeline, "MAX_GROUPING_PROMPTS", 11)
    skipped = pipeline.analyze(pl.DataFrame(camp.rows), config=config)
    assert skipped.grouping_skipped and skipped.groups == []
    assert skipped.cells.num_items == 12  # every prompt its own item
    monkeypatch.setattr(pipeline, "MAX_GROUPING_PROMPTS", 12)
    assert not pipeline.analyze(pl.DataFrame(camp.rows), config=config).grouping_skipped
