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
