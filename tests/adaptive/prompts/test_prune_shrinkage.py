"""The kept set's precision on fresh judgments, predicted from the judgments that selected it."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive.prompts.prune_folds import Judged, cell_table, clearly_signed, se_ratios, snr
from adaptive.prompts.prune_shrinkage import fit_shrinkage, fresh_se_ratio

NUM_P, NUM_C = 80, 6


def _truth(rng: np.random.Generator, shared: float = 0.3) -> np.ndarray:
    """(P, C) true cell means: a comparison effect, a prompt effect shared by all, and noise."""
    v = rng.normal(0.0, 1.0, NUM_P)
    gap = np.linspace(0.1, 0.4, NUM_C)
    mu = gap + shared * np.outer(v, gap / gap.mean()) * 0.4 + rng.normal(0, 0.1, (NUM_P, NUM_C))
    return np.clip(mu, -0.75, 0.75)


def _judge(rng: np.random.Generator, mu: np.ndarray, per_cell: int) -> Judged:
    """Ternary judgments with mean ``mu`` and mean square 0.8 (20% ties)."""
    prompt, comp = np.meshgrid(np.arange(NUM_P), np.arange(NUM_C), indexing="ij")
    prompt, comp = np.repeat(prompt.ravel(), per_cell), np.repeat(comp.ravel(), per_cell)
    m = mu[prompt, comp]
    u = rng.random(len(m))
    x = np.where(u < (0.8 + m) / 2, 1.0, np.where(u < 0.8, -1.0, 0.0))
    annotator = np.tile(np.arange(per_cell), NUM_P * NUM_C)
    return Judged(comp, prompt, x, annotator, NUM_P, NUM_C)


def _ratio(table, kept: np.ndarray) -> float:  # type: ignore[no-untyped-def]
    full = snr(table, np.ones(NUM_P, dtype=bool))
    mask = np.zeros(NUM_P, dtype=bool)
    mask[kept] = True
    clear = clearly_signed(full)
    return float(np.median(se_ratios(full, snr(table, mask))[clear]))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_prediction_corrects_the_winners_curse(seed):
    """Keep the 20 prompts that looked best: on the same judgments they look far better
    than fresh judgments show; the prediction is within 15% of the fresh figure."""
    rng = np.random.default_rng(seed)
    mu = _truth(rng)
    table = cell_table(_judge(rng, mu, 2))
    kept = np.argsort(-table.mean.mean(axis=1))[:20]
    fresh = np.median([_ratio(cell_table(_judge(rng, mu, 2)), kept) for _ in range(40)])
    in_sample = _ratio(table, kept)
    figure = fresh_se_ratio(table, np.arange(NUM_C), kept, rng)
    assert in_sample < fresh / 1.15  # the curse the prediction must undo
    assert figure.se_ratio == pytest.approx(fresh, rel=0.15)
    assert figure.low < fresh < figure.high


def test_prompt_effect_is_recovered():
    """The moment estimate finds a planted shared prompt spread, and none where there is none."""
    rng = np.random.default_rng(2)
    with_shared = fit_shrinkage(cell_table(_judge(rng, _truth(rng), 4)), np.arange(NUM_C))
    without = fit_shrinkage(cell_table(_judge(rng, _truth(rng, 0.0), 4)), np.arange(NUM_C))
    assert with_shared.prompt_var > 0.5 * (0.3 * 0.4) ** 2
    assert without.prompt_var < 0.2 * (0.3 * 0.4) ** 2
    assert np.corrcoef(with_shared.v_mean, with_shared.residual.mean(axis=1))[0, 1] > 0.9


def test_no_prompt_signal_means_random_worth():
    """Prompts alike: any kept 20 of 80 lose sqrt(80/20) = 2 in SNR and are worth 1 random each."""
    rng = np.random.default_rng(3)
    mu = np.full((NUM_P, NUM_C), 0.3)
    table = cell_table(_judge(rng, mu, 3))
    kept = np.argsort(-table.mean.mean(axis=1))[:20]
    figure = fresh_se_ratio(table, np.arange(NUM_C), kept, rng)
    assert figure.se_ratio == pytest.approx(2.0, rel=0.15)
    assert figure.worth_random == pytest.approx(1.0, abs=0.3)


def _frame(seed: int):  # type: ignore[no-untyped-def]
    """A known-truth campaign (40 prompts, 5 systems, 2 judgments a cell) as judgments."""
    import polars as pl

    from adaptive.prompts.prune_simulate import judge, simulate_truth

    rng = np.random.default_rng(seed)
    truth = simulate_truth(rng, num_prompts=40, num_systems=5, spread=1.0, interaction=0.1)
    judged = judge(rng, truth, np.arange(len(truth.pair_a)), 2)
    winner = np.where(judged.x > 0, "b", np.where(judged.x < 0, "a", "tie"))
    frame = pl.DataFrame(
        {
            "item_id": [f"p{p:02d}" for p in judged.prompt],
            "system_a": [f"s{truth.pair_a[c]}" for c in judged.comparison],
            "system_b": [f"s{truth.pair_b[c]}" for c in judged.comparison],
            "annotator_id": [f"r{a}" for a in judged.annotator],
            "winner": winner.tolist(),
            "dimension": "overall",
        }
    )
    return frame, truth


def test_rank_shared_keeps_the_prompts_with_the_largest_shrunk_shared_effect():
    from adaptive.core.cells import build_cells
    from adaptive.prompts.prune_folds import judged_from_cells
    from adaptive.prompts.pruning import PruneConfig
    from evalset.pruning import prune_judgments

    frame, truth = _frame(0)
    config = PruneConfig(keep=10, num_tiers=1, rank="shared", redundancy_threshold=None)
    rows = prune_judgments(frame, config)
    kept = {r["item_id"] for r in rows if r["kept"] and r["reason"].startswith("top")}
    cells = build_cells(frame)
    table = cell_table(judged_from_cells(cells))
    v = fit_shrinkage(table, np.arange(cells.num_comparisons)).v_mean
    assert kept == {cells.prompts[p] for p in np.argsort(-v)[:10]}
    # the prompts it keeps are the discriminating ones
    a = dict(zip([f"p{p:02d}" for p in range(40)], truth.discrimination))
    assert np.mean([a[p] for p in kept]) > np.quantile(truth.discrimination, 0.6)
    with pytest.raises(ValueError, match="rank must be"):
        prune_judgments(frame, PruneConfig(keep=10, num_tiers=1, rank="alpha"))


def test_only_the_shared_effect_carries_over_to_new_systems():
    """Prompts that differ per comparison only (no shared effect) can be pruned for these
    systems (best gain > 1.5) but not for new ones (gain ~1); a shared effect carries over."""
    from adaptive.prompts.prune_precision import headroom
    from adaptive.prompts.prune_shrinkage import new_system_gain

    rng = np.random.default_rng(4)
    own = np.clip(0.3 + rng.normal(0, 0.3, (NUM_P, NUM_C)), -0.75, 0.75)
    table = cell_table(_judge(rng, own, 10))
    comps = np.arange(NUM_C)
    assert headroom(table, comps, 0.25)[1] > 1.5
    assert new_system_gain(table, comps, 0.25) < 1.2
    shared = cell_table(_judge(rng, _truth(rng, shared=1.0), 10))
    assert new_system_gain(shared, comps, 0.25) > 1.5


@pytest.mark.parametrize("target", [1.2, 1.35, 1.5])
def test_the_target_is_met_by_the_figure_printed(target):
    """--target-se-ratio keeps the fewest prompts whose printed fresh SE ratio meets it."""
    from adaptive.prompts.pruning import PruneConfig
    from evalset.pruning import prune_judgments

    frame, _ = _frame(1)
    rows = prune_judgments(
        frame, PruneConfig(target_se_ratio=target, num_tiers=1, redundancy_threshold=None)
    )
    assert rows[0]["se_ratio"] <= target
    kept = sum(r["kept"] for r in rows)
    assert kept < 40
