"""The precision a pruned set will have on fresh judgments, and whether pruning can help at all.

**Cross-fitted SE ratio.** Ranking prompts by information estimated on the same judgments
that then measure the kept set's precision is a winner's curse: on a log the pruning had
not seen, the in-sample expected SE ratio printed 1.08 where fresh judgments gave 1.58.
Here the judgments are split in two folds by annotator within each cell
(:func:`~adaptive.prompts.prune_folds.split_folds`); the whole pruning (fit, tiers, tier
refits, redundancy, information ranking, coverage) runs on one fold, and the kept set's
SE ratio (:mod:`~adaptive.prompts.prune_folds`: SNR of the full set over SNR of the kept
prompts, per comparison) is measured on the other fold's judgments; then the folds swap,
on ``num_splits`` random splits. The estimand is **the kept prompts' own average**
against the full set's, on judgments the selection never saw: per comparison the
geometric mean over the 2 x ``num_splits`` evaluations, summarised as the median over
the tier's clearly signed comparisons, with a bootstrap interval over those comparisons.
Selection on half the judgments is a little noisier than on all of them, so the figure
leans pessimistic.

**Can pruning help?** Per comparison, the variance of a single judgment splits into the
prompts' true spread tau^2 (between-prompt) and the annotators' noise s^2 (within a cell,
from cells with several judgments). With prompt effects normal, the best any k of n
prompts could do for one comparison, knowing every prompt's effect, is to keep the
top k/n of the effects in the comparison's direction; their SNR squared over a random
k's is the **best gain** (:func:`best_gain`). When the between-prompt share is nil the
best gain is 1: no subset beats random (Lee 2026: with the signal spread evenly,
proportional allocation is minimax-optimal).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from adaptive.prompts.prune_folds import (
    CLEAR_SNR,
    CellTable,
    cell_table,
    clearly_signed,
    prompt_mask,
    se_ratios,
    snr,
)

#: random splits of the judgments into two folds for the cross-fitted figure
DEFAULT_SPLITS = 2
#: random prompt sets per evaluation fold for the kept set's worth in random prompts
RANDOM_DRAWS = 200
#: below this best gain (in random prompts per kept prompt) pruning cannot beat random
MIN_GAIN = 1.25
#: a 90% interval
INTERVAL = (5.0, 95.0)


@dataclass(frozen=True)
class Evaluation:
    """One kept set measured on one evaluation fold, per comparison of its tier."""

    se_ratio: np.ndarray  # (C_t,) SNR_full / SNR_kept
    worth: np.ndarray  # (C_t,) (SNR_kept / median random SNR)^2
    full_snr: np.ndarray  # (C_t,) the evaluation fold's full-set SNR


def evaluate_kept(
    table: CellTable,
    kept: np.ndarray,
    comparisons: np.ndarray,
    rng: np.random.Generator,
    *,
    num_random: int = RANDOM_DRAWS,
) -> Evaluation:
    """The kept prompts' SE ratio and worth in random prompts on ``table``'s judgments."""
    num_p = table.count.shape[0]
    sub = CellTable(
        table.total[:, comparisons], table.squares[:, comparisons], table.count[:, comparisons]
    )
    full = snr(sub, np.ones(num_p, dtype=bool))
    mine = snr(sub, prompt_mask(kept, num_p))
    k = min(len(kept), num_p)
    draws = np.argsort(rng.random((num_random, num_p)), axis=1)[:, :k]
    masks = np.zeros((num_random, num_p), dtype=bool)
    np.put_along_axis(masks, draws, True, axis=1)
    random = np.full(len(comparisons), np.nan)
    if k:
        draws_snr = np.sign(full) * snr(sub, masks)
        some = ~np.isnan(draws_snr).all(axis=0)  # nanmedian warns on a column of NaN only
        random[some] = np.nanmedian(draws_snr[:, some], axis=0)
    aligned = np.sign(full) * mine
    with np.errstate(invalid="ignore", divide="ignore"):
        worth = np.where((aligned > 0) & (random > 0), (aligned / random) ** 2, 0.0)
    return Evaluation(se_ratios(full, mine), worth, full)


@dataclass(frozen=True)
class Precision:
    """A tier's cross-fitted SE ratio, its interval, and what pruning can gain there."""

    se_ratio: float  # median over clearly signed comparisons, on fresh judgments
    low: float
    high: float
    worth_random: float  # kept prompts' worth in random prompts each, median
    num_comparisons: int  # comparisons the median is over
    evaluations: int  # fold evaluations behind each comparison's figure
    between_share: float  # median between-prompt share of a judgment's variance
    best_gain: float  # median best gain any subset could give, in random prompts each
    in_sample: float  # the model's in-sample expected SE ratio, for reference
    #: the best gain on systems not in the judgments (only the prompts' shared effect
    #: carries over; adaptive.prompts.prune_shrinkage.new_system_gain)
    new_system_gain: float = float("nan")

    @property
    def verdict(self) -> str:
        """``prune``, ``prune at random`` (selection does no better than chance on fresh
        judgments) or ``keep them all`` (no subset can beat random here)."""
        if np.isfinite(self.best_gain) and self.best_gain < MIN_GAIN:
            return "keep them all"
        if np.isfinite(self.se_ratio) and not self.worth_random > 1.0:
            return "prune at random"
        return "prune"


def summarize(
    ratios: np.ndarray,
    worth: np.ndarray,
    clear: np.ndarray,
    rng: np.random.Generator,
    *,
    num_boot: int = 2000,
) -> tuple[float, float, float, float, int]:
    """Median over the clear comparisons (all, if none is clear) and its bootstrap interval.

    Args:
        ratios: (E, C) SE ratios of E fold evaluations; worth likewise.
        clear: (C,) clearly signed comparisons.

    Returns:
        (median, low, high, median worth, comparisons used).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.exp(np.mean(np.log(ratios), axis=0))  # geometric mean; inf stays inf
    per_worth = np.median(worth, axis=0)
    use = clear & ~np.isnan(per)
    if not use.any():
        use = ~np.isnan(per)
    if not use.any():
        return (np.nan, np.nan, np.nan, np.nan, 0)
    values, worths = per[use], per_worth[use]
    boot = rng.integers(0, len(values), size=(num_boot, len(values)))
    medians = np.median(values[boot], axis=1)
    low, high = np.percentile(medians, INTERVAL, method="inverted_cdf")
    return (
        float(np.median(values)),
        float(low),
        float(high),
        float(np.median(worths)),
        int(use.sum()),
    )


def variance_split(table: CellTable, comparisons: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per comparison the prompts' true spread tau^2 and a judgment's noise s^2 (method of moments).

    s^2 pools the within-cell variance of the cells with several judgments (NaN when no
    cell has two); tau^2 is the variance of the cell means less their mean noise
    s^2 / n (at least 0).
    """
    count = table.count[:, comparisons]
    total = table.total[:, comparisons]
    squares = table.squares[:, comparisons]
    within = np.where(count > 1, squares - total**2 / np.maximum(count, 1), 0.0).sum(axis=0)
    dof = np.where(count > 1, count - 1, 0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        noise = within / dof
        obs = count > 0
        mean = np.where(obs, total / np.maximum(count, 1), 0.0)
        n = obs.sum(axis=0)
        centre = mean.sum(axis=0) / n
        spread = (np.where(obs, (mean - centre) ** 2, 0.0).sum(axis=0)) / (n - 1)
        noise_of_means = np.where(obs, noise / np.maximum(count, 1), 0.0).sum(axis=0) / n
    tau2 = np.maximum(spread - noise_of_means, 0.0)
    tau2[dof == 0] = np.nan
    return tau2, noise


def best_gain(
    centre: np.ndarray, tau2: np.ndarray, noise: np.ndarray, share_kept: float
) -> np.ndarray:
    """The largest SNR^2 gain over random prompts any ``share_kept`` of the prompts can give.

    With prompt effects N(centre, tau2) and cell-mean noise ``noise``, keeping the top
    share q of the effects in the comparison's direction raises the mean to
    |centre| + tau phi(z) / q and leaves the variance tau2 (1 + z phi(z)/q - (phi(z)/q)^2)
    + noise (a truncated normal, z = Phi^-1(1 - q)); the gain is the ratio of the
    mean^2 / variance of those prompts to a random set's.
    """
    q = float(np.clip(share_kept, 1e-6, 1.0))
    if q >= 1.0:
        return np.ones_like(np.asarray(centre, dtype=np.float64))
    z = stats.norm.ppf(1.0 - q)
    lam = stats.norm.pdf(z) / q
    tau = np.sqrt(tau2)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_sel = np.abs(centre) + tau * lam
        var_sel = tau2 * (1.0 + z * lam - lam**2) + noise
        gain = (mean_sel**2 / var_sel) / (centre**2 / (tau2 + noise))
    return gain


def headroom(table: CellTable, comparisons: np.ndarray, share_kept: float) -> tuple[float, float]:
    """A tier's median between-prompt share of a judgment's variance and its median best gain.

    The share over the comparisons where it is measurable (cells with several judgments),
    the gain over the clearly signed ones (NaN if none), from all the judgments.
    """
    if not len(comparisons):
        return (np.nan, np.nan)
    tau2, noise = variance_split(table, comparisons)
    sub = CellTable(
        table.total[:, comparisons], table.squares[:, comparisons], table.count[:, comparisons]
    )
    every = np.ones(table.count.shape[0], dtype=bool)
    full = snr(sub, every)
    obs = sub.observed
    n = obs.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = sub.mean.sum(axis=0) / n
        cell_noise = np.where(obs, noise / np.maximum(sub.count, 1), 0.0).sum(axis=0) / n
        share = tau2 / (tau2 + noise)
    gain = best_gain(centre, tau2, cell_noise, share_kept)
    # the gain of a comparison near a tie is unbounded (its random SNR is ~0): clear ones only
    use = clearly_signed(full, CLEAR_SNR) & np.isfinite(gain)
    measured = np.isfinite(share)
    median_share = float(np.median(share[measured])) if measured.any() else np.nan
    return (median_share, float(np.median(gain[use])) if use.any() else np.nan)


__all__ = [
    "DEFAULT_SPLITS",
    "Evaluation",
    "MIN_GAIN",
    "Precision",
    "best_gain",
    "cell_table",
    "evaluate_kept",
    "headroom",
    "summarize",
    "variance_split",
]
