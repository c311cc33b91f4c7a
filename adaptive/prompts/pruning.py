"""Prune the evaluation set per model tier, with a reason for every dropped prompt.

For each tier (systems split by ability, :mod:`adaptive.prompts.tiers`):

1. item parameters are re-estimated from the comparisons inside the tier
   (global ones when the tier has fewer than ``min_tier_comparisons``);
2. redundant prompts (judgments correlate > threshold with another prompt on at least
   ``redundancy_min_shared`` shared comparisons, :mod:`adaptive.prompts.redundancy`) are
   dropped except the most informative member of each group: reason
   ``(REDUNDANT, representative)``, worded as what was measured (how many comparisons the
   two share and their correlation), not as a duplicate;
3. the rest are ranked by Fisher information at the tier's ability draws;
4. the kept set is the top ``keep`` prompts, or the smallest top-k whose
   expected SE stays within ``target_se_ratio`` of the full set; the others
   get ``(LOW_INFORMATION, tier)``;
5. every comparison of the tier keeps at least one prompt that was judged
   for it: if none of the kept prompts covers a comparison, its best-ranked
   covering prompt is added back (so a prompt that is the only one covering
   some comparison is never dropped).

Expected SE of a comparison with ability theta and prompt set S is
1 / sqrt(1 + sum_{j in S} I_j(theta)) (prior precision 1 plus the Fisher
information of one net rating per prompt), averaged over the tier's
ability draws. "The full set" is every non-redundant prompt: a redundant
prompt's information is already counted through its representative.

Comparisons across tiers are evaluated with the prompt set of the weaker
system's tier (the tier whose prompts separate lower-quality systems); their
judgments do not enter the within-tier item fits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import jax
import numpy as np

from adaptive.prompts.loco_data import DEFAULT_ABILITY, DEFAULT_TIERS, LocoData
from adaptive.prompts.redundancy import DEFAULT_FDR, DEFAULT_THRESHOLD
from adaptive.prompts.selection import (
    LOW_INFORMATION,
    REDUNDANT,
    Reason,
    chain,
    drop_redundant,
    rank_by_information,
    select_prompts,
)
from adaptive.prompts.tier_plan import (
    fit_items_masked,
    fit_tier,
    redundancy_groups,
    split_by_options,
)
from adaptive.prompts.tiers import Tiers
from stan_free_models.information import information_matrix

#: reason code of a kept prompt added back for coverage: (COVERS, comparison)
COVERS = 4
#: reason code of a kept prompt chosen for its information: (SELECTED, rank)
SELECTED = 5
#: comparisons two prompts must share before their correlation can make them redundant: on
#: a sparse log (prompts judged on 4-10 of 10 pairs) every prompt that ranks the systems the
#: consensus way correlates ~1 with every other on the few pairs they share
MIN_SHARED_COMPARISONS = 10
#: seed of the key :func:`plan_tier` hands its ranking; the ranking's steps (drop_redundant,
#: rank_by_information) draw nothing, so every key gives the same plan (a test checks this)
RANKING_SEED = 0


@dataclass(frozen=True)
class TierPlan:
    """Kept and dropped prompts of one tier, and the expected SE of the choice."""

    tier: int
    kept: np.ndarray  # prompt indices, ranked
    reasons: dict[int, Reason]  # every prompt -> why kept or dropped
    order: np.ndarray  # non-redundant prompts, best first
    information: np.ndarray  # (P,) expected information at the tier's abilities
    se_curve: np.ndarray  # (len(order),) expected SE of the top-k, k = 1..
    se_full: float
    se_kept: float
    comparisons: np.ndarray  # comparisons evaluated with this tier's prompts
    info: dict[str, float] = field(default_factory=dict)

    @property
    def se_ratio(self) -> float:
        return self.se_kept / self.se_full


def expected_se(information: np.ndarray, subset: np.ndarray) -> float:
    """Mean over abilities of 1 / sqrt(1 + sum of information over ``subset``); info is (T, P)."""
    total = information[:, subset].sum(axis=1)
    return float(np.mean(1.0 / np.sqrt(1.0 + total)))


def expected_se_curve(information: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Expected SE of the top-k prompts of ``order`` for every k = 1..len(order)."""
    if len(order) == 0:
        return np.zeros(0)
    cum = np.cumsum(information[:, order], axis=1)  # (T, n)
    return np.mean(1.0 / np.sqrt(1.0 + cum), axis=0)


def plan_tier(
    information: np.ndarray,
    groups: list[list[int]],
    coverage: np.ndarray,
    *,
    tier: int,
    keep: int | None = None,
    target_se_ratio: float | None = None,
    comparisons: np.ndarray | None = None,
    score: np.ndarray | None = None,
) -> TierPlan:
    """Choose the kept prompts of one tier.

    Args:
        information: (T, P) Fisher information of every prompt at T ability
            draws of the tier.
        groups: redundancy groups (prompt indices).
        coverage: (C_t, P) True where prompt p was judged for the tier's comparison c.
        tier: the tier index (used in reasons).
        keep: keep exactly this many (before coverage additions), or
        target_se_ratio: keep the smallest top-k with expected SE <= ratio x full.
        comparisons: the original indices of the coverage rows (for reasons).
        score: (P,) what to rank by (default: the information averaged over the draws).

    Returns:
        The :class:`TierPlan`.
    """
    if (keep is None) == (target_se_ratio is None):
        raise ValueError("give exactly one of keep and target_se_ratio")
    num_p = information.shape[1]
    score = information.mean(axis=0) if score is None else np.asarray(score, dtype=np.float64)
    ranking = select_prompts(
        chain(drop_redundant(groups, score), rank_by_information(score)),
        jax.random.PRNGKey(RANKING_SEED),
        num_p,
    )
    order = ranking.order
    curve = expected_se_curve(information, order)
    se_full = float(curve[-1]) if len(curve) else 1.0
    if keep is not None:
        k = int(min(max(keep, 0), len(order)))
    else:
        assert target_se_ratio is not None  # exactly one of the two is given
        within = np.flatnonzero(curve <= target_se_ratio * se_full * (1 + 1e-12))
        k = int(within[0] + 1) if len(within) else len(order)
    kept = list(order[:k].tolist())
    reasons: dict[int, Reason] = {int(p): r for p, r in ranking.dropped.items()}
    for rank, p in enumerate(kept):
        reasons[int(p)] = (SELECTED, rank)
    for p in order[k:].tolist():
        reasons[int(p)] = (LOW_INFORMATION, tier)
    comparisons = np.arange(coverage.shape[0]) if comparisons is None else comparisons
    position = np.full(num_p, num_p + 1, dtype=np.int64)
    position[order] = np.arange(len(order))
    kept_mask = np.zeros(num_p, dtype=bool)
    kept_mask[kept] = True
    added = 0
    for row, c in enumerate(comparisons):
        covering = np.flatnonzero(coverage[row])
        if covering.size == 0 or kept_mask[covering].any():
            continue
        # best-ranked covering prompt; redundant ones (not in order) by their score
        best = min(covering.tolist(), key=lambda p: (position[p], -score[p], p))
        kept.append(best)
        kept_mask[best] = True
        reasons[int(best)] = (COVERS, int(c))
        added += 1
    kept_arr = np.asarray(kept, dtype=np.int64)
    se_kept = expected_se(information, kept_arr) if len(kept_arr) else float(curve[0] * 0 + 1)
    return TierPlan(
        tier=tier,
        kept=kept_arr,
        reasons=reasons,
        order=order,
        information=score,
        se_curve=curve,
        se_full=se_full,
        se_kept=se_kept,
        comparisons=np.asarray(comparisons),
        info={"k_selected": float(k), "k_added_for_coverage": float(added)},
    )


@dataclass(frozen=True)
class PruneConfig:
    keep: int | None = None
    target_se_ratio: float | None = None
    num_tiers: int = DEFAULT_TIERS
    tier_sizes: tuple[int, ...] | None = None
    ability_method: str = DEFAULT_ABILITY
    min_tier_comparisons: int = 2
    redundancy_threshold: float | None = DEFAULT_THRESHOLD
    redundancy_fdr: float | None = DEFAULT_FDR
    redundancy_min_shared: int = MIN_SHARED_COMPARISONS
    num_draws: int = 400
    num_info_draws: int = 100
    seed: int = 0
    #: ``shared`` (each prompt's shrunk effect shared by the tier's comparisons,
    #: adaptive.prompts.prune_predict: better on fresh judgments and on new systems in the
    #: held-out check) or ``information`` (Fisher information at the tier's abilities)
    rank: str = "shared"


@dataclass(frozen=True)
class PruneFits:
    """What planning needs from the fits: tiers, redundancy groups, each tier's information."""

    tiers: Tiers
    groups: list[list[int]]
    information: list[np.ndarray]  # per tier, (T, P) at the tier's ability draws
    assigned: np.ndarray  # (C,) the tier whose prompts evaluate each comparison
    from_tier: list[bool]  # item parameters re-estimated inside the tier
    inside: list[int]  # comparisons inside each tier
    coverage: np.ndarray  # (C, P) prompt judged for the comparison
    converged: bool
    scores: list[np.ndarray] | None = None  # per tier, (P,) to rank by instead of information


def fit_tiers(
    data: LocoData,
    config: PruneConfig,
    rng_key: jax.Array,
    *,
    cell_weight: np.ndarray | None = None,
) -> PruneFits:
    """Fit, tier, refit per tier and take each tier's information (steps 1-3 of the module doc).

    Every fit is :func:`~adaptive.prompts.tier_plan.fit_items_masked` at the shape of all
    of ``data``'s cells, so the global fit, the tiers' and those of any fold of the same
    cells share one compiled program. ``cell_weight`` (M,) 0 marks cells without
    judgments (in a fold).
    """
    weight = np.ones(len(data.cell_y)) if cell_weight is None else cell_weight
    judged = np.unique(data.cell_comparison[weight > 0])
    fit = fit_items_masked(
        data, judged, jax.random.fold_in(rng_key, 0), config.num_draws, cell_weight=weight
    )
    tiers = split_by_options(data, fit, config)
    groups = redundancy_groups(
        data,
        judged,
        threshold=config.redundancy_threshold,
        fdr=config.redundancy_fdr,
        min_overlap=config.redundancy_min_shared,
    )
    # comparisons evaluated with each tier's prompts: within-tier, and across tiers the weaker one's
    ta, tb = tiers.system_tier[data.pair_a], tiers.system_tier[data.pair_b]
    assigned = np.where(tiers.comparison_tier >= 0, tiers.comparison_tier, np.maximum(ta, tb))
    information, from_tier, inside_counts = [], [], []
    for t in range(config.num_tiers):
        key = jax.random.fold_in(rng_key, 1 + t)
        inside = tiers.comparisons_in(t, among=fit.comparisons)
        usable = config.num_tiers > 1 and len(inside) >= config.min_tier_comparisons
        refitted = (
            fit_items_masked(data, inside, key, config.num_draws, cell_weight=weight)
            if usable
            else None
        )
        tier_fit = fit_tier(
            data,
            fit,
            tiers,
            t,
            key,
            min_tier_comparisons=config.min_tier_comparisons,
            num_draws=config.num_draws,
            refitted=refitted,
        )
        if tier_fit.refit is not None:
            thetas = tier_fit.refit.theta_draws[: config.num_info_draws]
        else:
            position = np.full(data.num_comparisons, -1)
            position[fit.comparisons] = np.arange(len(fit.comparisons))
            cols = inside if len(inside) else np.flatnonzero(assigned == t)
            cols = position[cols][position[cols] >= 0]
            cols = cols if len(cols) else np.arange(len(fit.comparisons))
            thetas = fit.theta_draws[: config.num_info_draws][:, cols]
        info = information_matrix(np.ravel(thetas), tier_fit.alpha, tier_fit.b)
        information.append(np.asarray(info, dtype=np.float64))
        from_tier.append(tier_fit.refit is not None)
        inside_counts.append(len(inside))
    return PruneFits(
        tiers=tiers,
        groups=groups,
        information=information,
        assigned=assigned,
        from_tier=from_tier,
        inside=inside_counts,
        coverage=data.rating_mask.T,
        converged=fit.converged,
    )


def plan_tiers(
    fits: PruneFits, *, keep: int | Sequence[int] | None, target_se_ratio: float | None
) -> list[TierPlan]:
    """Every tier's :class:`TierPlan` from the fits (steps 4-5 of the module doc).

    ``keep`` is one number for every tier, or one per tier.
    """
    plans = []
    for t, information in enumerate(fits.information):
        tier_keep = keep if keep is None or isinstance(keep, int) else keep[t]
        mine = np.flatnonzero(fits.assigned == t)
        plan = plan_tier(
            information,
            fits.groups,
            fits.coverage[mine],
            tier=t,
            keep=tier_keep,
            target_se_ratio=target_se_ratio,
            comparisons=mine,
            score=None if fits.scores is None else fits.scores[t],
        )
        plan.info["item_parameters_from_tier"] = float(fits.from_tier[t])
        plan.info["ranked_by_shared"] = float(fits.scores is not None)
        plan.info["tier_comparisons"] = float(fits.inside[t])
        plans.append(plan)
    return plans


def prune(data: LocoData, config: PruneConfig) -> tuple[list[TierPlan], Tiers, dict]:
    """Fit, tier, and plan every tier (see module doc), ranking by information.

    ``config.rank`` must be ``information`` here: the shared ranking needs the judgments
    themselves (:func:`evalset.pruning.prune_judgments`).

    Returns:
        (plans, tiers, info): one :class:`TierPlan` per tier, the tiers, and
        diagnostics (convergence, redundancy groups).
    """
    if config.rank != "information":
        raise ValueError("prune ranks by information; rank='shared' needs the judgments")
    fits = fit_tiers(data, config, jax.random.PRNGKey(config.seed))
    plans = plan_tiers(fits, keep=config.keep, target_se_ratio=config.target_se_ratio)
    return plans, fits.tiers, {"converged": fits.converged, "groups": fits.groups, "fits": fits}


def plan_rows(
    plans: list[TierPlan],
    *,
    dimension: str,
    prompts: tuple[str, ...] | list[str],
    comparison_names: list[tuple[str, str]],
    num_tiers: int,
    se_ratios: Sequence[float] | None = None,
    shared: Callable[[int, int], tuple[int, float]] | None = None,
) -> list[dict]:
    """One row per tier and prompt: kept or dropped, and why in words.

    Keys: ``dimension, item_id, tier, kept, reason, rank, information, se_ratio``;
    ``se_ratio`` is the tier's entry of ``se_ratios`` (the fresh-judgment figure of
    :mod:`adaptive.prompts.prune_predict`) where finite, else the plan's in-sample one;
    ``shared(p, q)`` gives the comparisons two prompts share and their correlation, for the
    reason of a prompt dropped as redundant.
    """
    from adaptive.prompts.selection import describe_reason
    from adaptive.prompts.tiers import tier_names

    names = tier_names(num_tiers)
    rows: list[dict] = []
    for i, plan in enumerate(plans):
        tier = names[plan.tier]
        se_ratio = plan.se_ratio
        if se_ratios is not None and np.isfinite(se_ratios[i]):
            se_ratio = float(se_ratios[i])
        rank = {int(p): i + 1 for i, p in enumerate(plan.order)}
        for p in range(len(prompts)):
            kind, arg = plan.reasons.get(p, (0, -1))
            if kind == SELECTED:
                by = (
                    "information"
                    if plan.info.get("ranked_by_shared", 0.0) == 0
                    else "shared effect"
                )
                reason = f"top {int(plan.info['k_selected'])} by {by} for tier {tier}"
            elif kind == COVERS:
                a, b = comparison_names[arg]
                reason = f"only kept prompt judged for {a} vs {b}"
            elif kind == REDUNDANT and shared is not None:
                n, r = shared(p, arg)
                reason = (
                    f"ranks the {n} comparisons it shares with {prompts[arg]} like it "
                    f"(r = {r:.2f} with each comparison's mean removed; {prompts[arg]} is kept "
                    "for the group)"
                )
            else:
                reason = describe_reason((kind, arg), prompts, names)
            rows.append(
                {
                    "dimension": dimension,
                    "item_id": prompts[p],
                    "tier": tier,
                    "kept": kind in (SELECTED, COVERS),
                    "reason": reason,
                    "rank": rank.get(p),
                    "information": float(plan.information[p]),
                    "se_ratio": float(se_ratio),
                }
            )
    return rows


__all__ = [
    "COVERS",
    "LOW_INFORMATION",
    "REDUNDANT",
    "SELECTED",
    "PruneConfig",
    "PruneFits",
    "TierPlan",
    "expected_se",
    "expected_se_curve",
    "plan_rows",
    "fit_tiers",
    "plan_tier",
    "plan_tiers",
    "prune",
]
