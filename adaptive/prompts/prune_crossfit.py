"""Cross-fitted pruning: select on one fold of the judgments, measure on the other.

:func:`crossfit` runs :func:`adaptive.prompts.pruning.fit_tiers` on each fold of
``num_splits`` random two-fold splits (:func:`~adaptive.prompts.prune_folds.split_folds`),
plans every tier as the full data's plan does, and measures each fold's kept prompts on
the other fold's judgments (:mod:`adaptive.prompts.prune_precision` says what and why).
With ``target_se_ratio`` the number kept per tier is the fewest whose cross-fitted SE
ratio meets the target, so the target is a promise about fresh judgments too.

Every fit is at the shape of all the cells (a fold's missing cells have weight 0), so the
folds reuse the full fit's compiled program.
"""

from __future__ import annotations

from dataclasses import replace

import jax
import numpy as np

from adaptive.core.cells import RATING_HALF_RANGE, rescale_net_rating
from adaptive.prompts.loco_data import LocoData
from adaptive.prompts.prune_folds import (
    CLEAR_SNR,
    CellTable,
    Judged,
    cell_table,
    clearly_signed,
    se_ratios,
    snr,
    split_folds,
)
from adaptive.prompts.prune_precision import (
    DEFAULT_SPLITS,
    Precision,
    evaluate_kept,
    headroom,
    summarize,
)
from adaptive.prompts.pruning import PruneConfig, PruneFits, TierPlan, fit_tiers, plan_tiers
from adaptive.prompts.selection import prefix_masks

#: the folds' keys are folded in after the full fit's (0 .. num_tiers)
FOLD_KEY_OFFSET = 1000


def fold_data(data: LocoData, judged: Judged, keep: np.ndarray) -> tuple[LocoData, np.ndarray]:
    """``data``'s cells rated from the judgments where ``keep``; (data, cell weight 0 or 1)."""
    table = cell_table(judged.subset(keep))
    observed = table.observed
    rating = np.where(observed, rescale_net_rating(table.total, table.count), 0).astype(float)
    y = rating[data.cell_prompt, data.cell_comparison] + RATING_HALF_RANGE
    weight = observed[data.cell_prompt, data.cell_comparison].astype(np.float64)
    out = replace(data, cell_y=y.astype(np.int32), rating=rating, rating_mask=observed)
    return out, weight


def fold_fits(
    data: LocoData, judged: Judged, config: PruneConfig, num_splits: int
) -> list[tuple[PruneFits, CellTable]]:
    """Each fold's fits and the other fold's judgments, over ``num_splits`` random splits."""
    rng = np.random.default_rng(config.seed)
    base = jax.random.PRNGKey(config.seed)
    out = []
    for r in range(num_splits):
        side = split_folds(judged, rng)
        for f in (0, 1):
            train, weight = fold_data(data, judged, side == f)
            key = jax.random.fold_in(base, FOLD_KEY_OFFSET + 2 * r + f)
            fits = fit_tiers(train, config, key, cell_weight=weight)
            out.append((fits, cell_table(judged.subset(side != f))))
    return out


def _sub(table: CellTable, comparisons: np.ndarray) -> CellTable:
    return CellTable(
        table.total[:, comparisons], table.squares[:, comparisons], table.count[:, comparisons]
    )


def target_keeps(
    folds: list[tuple[PruneFits, CellTable]],
    full_plans: list[TierPlan],
    target: float,
    clear: list[np.ndarray],
) -> list[int]:
    """Per tier the fewest top-ranked prompts whose cross-fitted SE ratio is within ``target``."""
    keeps = []
    for t, plan in enumerate(full_plans):
        curves = []
        for fits, table in folds:
            order = plan_tiers(fits, keep=1, target_se_ratio=None)[t].order  # any keep: one order
            n = len(plan.order)
            masks = prefix_masks(order, range(1, n + 1), table.count.shape[0])
            sub = _sub(table, plan.comparisons)
            every = np.ones(table.count.shape[0], dtype=bool)
            curves.append(se_ratios(snr(sub, every)[None, :], snr(sub, masks)))
        stacked = np.stack(curves)  # (E, n, C_t)
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.exp(np.mean(np.log(stacked), axis=0))  # (n, C_t)
        use = clear[t] if clear[t].any() else np.ones(per.shape[1], dtype=bool)
        curve = np.median(per[:, use], axis=1) if per.shape[1] else np.ones(per.shape[0])
        within = np.flatnonzero(curve <= target)
        keeps.append(int(within[0] + 1) if len(within) else len(plan.order))
    return keeps


def crossfit(
    data: LocoData,
    judged: Judged,
    config: PruneConfig,
    fits: PruneFits,
    *,
    num_splits: int = DEFAULT_SPLITS,
) -> tuple[list[TierPlan], list[Precision]]:
    """Every tier's plan and its cross-fitted :class:`Precision` (module doc).

    Args:
        data: the dimension's cells; ``judged`` its judgments, indexed alike.
        config: the pruning's options (``keep`` or ``target_se_ratio``).
        fits: :func:`fit_tiers` of all the judgments.
        num_splits: random two-fold splits.
    """
    folds = fold_fits(data, judged, config, num_splits)
    full_table = cell_table(judged)
    every = np.ones(data.num_prompts, dtype=bool)
    in_sample = plan_tiers(fits, keep=config.keep, target_se_ratio=config.target_se_ratio)
    # a fold has about half the judgments: its SNR is about 1/sqrt(2) of the full data's
    clear = [
        clearly_signed(snr(_sub(full_table, p.comparisons), every), CLEAR_SNR * np.sqrt(2))
        for p in in_sample
    ]
    if config.keep is not None:
        keeps = [config.keep] * len(in_sample)
    else:
        assert config.target_se_ratio is not None
        keeps = target_keeps(folds, in_sample, config.target_se_ratio, clear)
    plans = plan_tiers(fits, keep=keeps, target_se_ratio=None)
    rng = np.random.default_rng(config.seed + 1)
    fold_plans = [plan_tiers(f, keep=keeps, target_se_ratio=None) for f, _ in folds]
    precisions = []
    for t, plan in enumerate(plans):
        evals = [
            evaluate_kept(table, fp[t].kept, plan.comparisons, rng)
            for fp, (_, table) in zip(fold_plans, folds)
        ]
        ratios = np.stack([e.se_ratio for e in evals])
        worth = np.stack([e.worth for e in evals])
        median, low, high, worth_random, used = summarize(ratios, worth, clear[t], rng)
        share, gain = headroom(full_table, plan.comparisons, len(plan.kept) / data.num_prompts)
        precisions.append(
            Precision(
                se_ratio=median,
                low=low,
                high=high,
                worth_random=worth_random,
                num_comparisons=used,
                evaluations=len(evals),
                between_share=share,
                best_gain=gain,
                in_sample=plan.se_ratio,
            )
        )
    return plans, precisions


__all__ = ["crossfit", "fold_data", "fold_fits", "target_keeps"]
