"""Every tier's plan and the precision its kept prompts will have on fresh judgments.

:func:`predict_precision` plans each tier from the fits of all the judgments and predicts
the kept set's SE ratio on a fresh round of judgments laid out like this log (every cell
judged as often, by new annotators) with :func:`~adaptive.prompts.prune_shrinkage.fresh_se_ratio`:
the kept prompts' cell means shrunk toward what the tier's prompts share, which corrects
the winner's curse of a selection made on the same judgments. With ``target_se_ratio``
the number kept per tier is the fewest whose predicted ratio meets the target (a bisection
over k: the predicted ratio falls as k grows), so the target is a promise about fresh
judgments too. No model is refitted: the prediction costs array work only.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from adaptive.prompts.prune_folds import CellTable
from adaptive.prompts.prune_precision import Precision, headroom
from adaptive.prompts.prune_shrinkage import (
    NUM_DRAWS,
    fit_shrinkage,
    fresh_se_ratio,
    new_system_gain,
)
from adaptive.prompts.pruning import PruneConfig, PruneFits, TierPlan, plan_tiers

#: the draws behind a figure the target bisection compares: the printed figure's, with the
#: same seed, so the figure printed for the chosen k is the one that met the target
SEARCH_DRAWS = NUM_DRAWS


def _ratio(table: CellTable, plan_of_k, k: int, seed: int, draws: int) -> float:  # type: ignore[no-untyped-def]
    plan = plan_of_k(k)
    rng = np.random.default_rng(seed)
    return fresh_se_ratio(table, plan.comparisons, plan.kept, rng, num_draws=draws).se_ratio


def target_keep(table: CellTable, fits: PruneFits, tier: int, target: float, seed: int) -> int:
    """The fewest top-ranked prompts of ``tier`` whose predicted fresh SE ratio is within ``target``."""

    def plan_of_k(k: int) -> TierPlan:
        return plan_tiers(fits, keep=k, target_se_ratio=None)[tier]

    n = len(plan_of_k(1).order)
    low, high = 1, max(n, 1)
    while low < high:
        mid = (low + high) // 2
        ratio = _ratio(table, plan_of_k, mid, seed, SEARCH_DRAWS)
        if np.isfinite(ratio) and ratio <= target:
            high = mid
        else:
            low = mid + 1
    return high


def shared_scores(table: CellTable, fits: PruneFits) -> PruneFits:
    """``fits`` ranking each tier's prompts by their shrunk shared effect v_p.

    v_p is the posterior mean of what a prompt does on every comparison of the tier
    (:func:`~adaptive.prompts.prune_shrinkage.fit_shrinkage`): a discrimination shrunk
    toward the tier's prior, so a prompt with a few lucky cells does not rank first, and
    the part of a prompt's behaviour that carries over to systems not yet judged.
    """
    scores = []
    for t in range(len(fits.information)):
        comparisons = np.flatnonzero(fits.assigned == t)
        if len(comparisons):
            scores.append(fit_shrinkage(table, comparisons).v_mean)
        else:
            scores.append(fits.information[t].mean(axis=0))
    return replace(fits, scores=scores)


def predict_precision(
    table: CellTable, config: PruneConfig, fits: PruneFits
) -> tuple[list[TierPlan], list[Precision]]:
    """Every tier's plan and its predicted :class:`Precision` on fresh judgments (module doc).

    Args:
        table: every judgment of the dimension, per (prompt, comparison) cell.
        config: the pruning's options (``keep`` or ``target_se_ratio``).
        fits: :func:`~adaptive.prompts.pruning.fit_tiers` of the same judgments.
    """
    num_tiers = len(fits.information)
    if config.rank == "shared":
        fits = shared_scores(table, fits)
    elif config.rank != "information":
        raise ValueError(f"rank must be information or shared, not {config.rank!r}")
    if config.keep is not None:
        keeps = [config.keep] * num_tiers
    else:
        assert config.target_se_ratio is not None
        keeps = [
            target_keep(table, fits, t, config.target_se_ratio, config.seed)
            for t in range(num_tiers)
        ]
    plans = plan_tiers(fits, keep=keeps, target_se_ratio=None)
    num_p = table.count.shape[0]
    precisions = []
    for plan in plans:
        rng = np.random.default_rng(config.seed)
        fresh = fresh_se_ratio(table, plan.comparisons, plan.kept, rng)
        share, gain = headroom(table, plan.comparisons, len(plan.kept) / num_p)
        precisions.append(
            Precision(
                se_ratio=fresh.se_ratio,
                low=fresh.low,
                high=fresh.high,
                worth_random=fresh.worth_random,
                num_comparisons=len(plan.comparisons),
                evaluations=NUM_DRAWS,
                between_share=share,
                best_gain=gain,
                in_sample=plan.se_ratio,
                new_system_gain=new_system_gain(table, plan.comparisons, len(plan.kept) / num_p),
            )
        )
    return plans, precisions


__all__ = ["SEARCH_DRAWS", "predict_precision", "shared_scores", "target_keep"]
