"""The tier-planning step shared by LOCO and pruning: fit, split into tiers, refit, merge.

Sedoc & Ungar (section 6.2, "Different prompts for better students"): fit the
graded response model on some comparisons, split the systems into tiers by
the abilities of that fit (:mod:`adaptive.prompts.tiers`), re-estimate the item
parameters from the comparisons inside one tier, and use the global
parameters for the prompts the tier never judged. :mod:`adaptive.prompts.loco` runs
the sequence on a fold's training comparisons for the held-out comparison's
tier; :mod:`adaptive.prompts.pruning` runs it on every comparison for every tier.

Example::

    fit = fit_items(data, comparisons, fold_in(rng_key, 0), num_draws)
    tiers = split_by_fit(data, fit, num_tiers=2)
    tier_fit = fit_tier(data, fit, tiers, 0, fold_in(rng_key, 1), min_tier_comparisons=2,
                        num_draws=num_draws)
    alpha, b = tier_fit.alpha, tier_fit.b  # the tier's, or the global ones
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import jax
import numpy as np

from adaptive.prompts.redundancy import DEFAULT_MIN_OVERLAP, redundant_pairs_matrix
from adaptive.prompts.tiers import Tiers, split_tiers
from stan_free_models.inference import GRMData
from stan_free_models.information import expected_information
from stan_free_models.laplace import fit_laplace
from stan_free_models.laplace_batch import BatchShape, fit_laplace_batch

if TYPE_CHECKING:
    from adaptive.prompts.loco_data import LocoData


@dataclass(frozen=True)
class ItemFit:
    """Point estimates of a fit restricted to some comparisons."""

    alpha: np.ndarray  # (P,)
    b: np.ndarray  # (P, K-1)
    theta_draws: np.ndarray  # (D, C_fit)
    comparisons: np.ndarray  # (C_fit,) original comparison indices
    has_data: np.ndarray  # (P,) prompt judged in at least one of the comparisons
    converged: bool
    log_alpha_draws: np.ndarray  # (D, P) Laplace draws, for item-uncertainty checks
    b_draws: np.ndarray  # (D, P, K-1)


def _grm_data(data: LocoData, comparisons: np.ndarray) -> tuple[GRMData, np.ndarray]:
    """The cells of ``comparisons`` only, renumbered, and which cells those are."""
    comparisons = np.asarray(comparisons, dtype=np.int64)
    remap = np.full(data.num_comparisons, -1, dtype=np.int64)
    remap[comparisons] = np.arange(len(comparisons))
    keep = remap[data.cell_comparison] >= 0
    grm = GRMData(
        comparison=remap[data.cell_comparison[keep]].astype(np.int32),
        item=data.cell_prompt[keep].astype(np.int32),
        y=data.cell_y[keep].astype(np.int32),
        weight=np.ones(int(keep.sum()), np.float32),
        num_comparisons=len(comparisons),
        num_items=data.num_prompts,
        num_categories=data.num_categories,
    )
    return grm, keep


def _item_fit(data: LocoData, comparisons: np.ndarray, keep: np.ndarray, post) -> ItemFit:
    has_data = np.zeros(data.num_prompts, dtype=bool)
    has_data[data.cell_prompt[keep]] = True
    return ItemFit(
        alpha=np.exp(post.mean("log_alpha")),
        b=post.mean("b"),
        theta_draws=post.flat("theta"),
        comparisons=np.asarray(comparisons, dtype=np.int64),
        has_data=has_data,
        converged=bool(post.diagnostics.converged),
        log_alpha_draws=post.flat("log_alpha"),
        b_draws=post.flat("b"),
    )


def fit_items(
    data: LocoData, comparisons: np.ndarray, rng_key: jax.Array, num_draws: int
) -> ItemFit:
    """Fast (MAP + Laplace) graded-response fit on the given comparisons only."""
    grm, keep = _grm_data(data, comparisons)
    # the items' Gaussian draws suffice here (their means and the abilities are what LOCO
    # uses); the exact conditional draws are for the net preference's intervals
    post = fit_laplace(grm, rng_key=rng_key, num_draws=num_draws, exact_items=False)
    return _item_fit(data, comparisons, keep, post)


def fit_items_masked(
    data: LocoData,
    comparisons: np.ndarray,
    rng_key: jax.Array,
    num_draws: int,
    *,
    cell_y: np.ndarray | None = None,
    cell_weight: np.ndarray | None = None,
) -> ItemFit:
    """:func:`fit_items` on ``comparisons`` at the shape of every cell of ``data``.

    The cells outside ``comparisons`` (and those of zero ``cell_weight``) stay in the
    data with weight 0: their comparisons see only their prior, so the items' posterior
    is :func:`fit_items`'s (to the optimiser's tolerance), while every subset of the
    cells, a tier's or a fold's, reuses one compiled program instead of one per shape.

    Args:
        cell_y: (M,) the cells' categories (default ``data.cell_y``), e.g. a fold's.
        cell_weight: (M,) 1 for a cell with judgments, 0 without (default all 1).
    """
    comparisons = np.asarray(comparisons, dtype=np.int64)
    inside = np.zeros(data.num_comparisons, dtype=bool)
    inside[comparisons] = True
    weight = np.ones(len(data.cell_y)) if cell_weight is None else np.asarray(cell_weight)
    weight = np.where(inside[data.cell_comparison], weight, 0.0).astype(np.float32)
    grm = GRMData(
        comparison=data.cell_comparison.astype(np.int32),
        item=data.cell_prompt.astype(np.int32),
        y=(data.cell_y if cell_y is None else cell_y).astype(np.int32),
        weight=weight,
        num_comparisons=data.num_comparisons,
        num_items=data.num_prompts,
        num_categories=data.num_categories,
    )
    post = fit_laplace(grm, rng_key=rng_key, num_draws=num_draws, exact_items=False)
    fit = _item_fit(data, comparisons, weight > 0, post)
    return replace(fit, theta_draws=fit.theta_draws[:, comparisons])


def fit_items_batch(
    data: LocoData,
    comparison_sets: Sequence[np.ndarray],
    rng_keys: Sequence[jax.Array],
    num_draws: int,
    *,
    shape: BatchShape | None = None,
    vmap: bool = False,
) -> tuple[list[ItemFit], BatchShape]:
    """:func:`fit_items` on every comparison set, all at one padded ``shape`` (one program).

    See :func:`stan_free_models.laplace_batch.fit_laplace_batch`: a set whose own padded
    shape is ``shape`` gets :func:`fit_items`'s numbers exactly (``vmap=False``); a
    smaller one is padded up and agrees with it to the optimiser's tolerance.
    """
    built = [_grm_data(data, c) for c in comparison_sets]
    posts, used = fit_laplace_batch(
        [g for g, _ in built], rng_keys, num_draws=num_draws, shape=shape, vmap=vmap
    )
    fits = [
        _item_fit(data, c, keep, post) for c, (_, keep), post in zip(comparison_sets, built, posts)
    ]
    return fits, used


def information_score(fit: ItemFit, num_info_draws: int) -> np.ndarray:
    """(P,) information averaged over the fit's comparisons' ability draws."""
    draws = fit.theta_draws[:num_info_draws]
    return np.asarray(expected_information(draws, fit.alpha, fit.b), dtype=np.float64)


def redundancy_groups(
    data: LocoData,
    comparisons: np.ndarray,
    *,
    threshold: float | None,
    fdr: float | None,
    min_overlap: int = DEFAULT_MIN_OVERLAP,
) -> list[list[int]]:
    """Redundant prompt groups from the judgments of ``comparisons`` only; none without a threshold."""
    if threshold is None:
        return []
    groups, _ = redundant_pairs_matrix(
        data.rating[:, comparisons],
        data.rating_mask[:, comparisons],
        threshold=threshold,
        fdr=fdr,
        min_overlap=min_overlap,
    )
    return groups


def split_by_fit(
    data: LocoData,
    fit: ItemFit,
    *,
    num_tiers: int,
    method: str = "lstsq",
    sizes: tuple[int, ...] | None = None,
) -> Tiers:
    """Tiers of every system and comparison from the posterior mean abilities of ``fit``."""
    return split_tiers(
        fit.theta_draws.mean(axis=0),
        data.pair_a,
        data.pair_b,
        data.num_systems,
        num_tiers=num_tiers,
        method=method,
        sizes=list(sizes) if sizes else None,
        theta_comparisons=fit.comparisons,
    )


class TierOptions(Protocol):
    """How to split into tiers: the fields :class:`adaptive.prompts.loco.LocoConfig` and
    :class:`adaptive.prompts.pruning.PruneConfig` share."""

    @property
    def num_tiers(self) -> int: ...

    @property
    def ability_method(self) -> str: ...

    @property
    def tier_sizes(self) -> tuple[int, ...] | None: ...


def split_by_options(data: LocoData, fit: ItemFit, options: TierOptions) -> Tiers:
    """:func:`split_by_fit` with a LOCO or pruning config's tier options."""
    return split_by_fit(
        data,
        fit,
        num_tiers=options.num_tiers,
        method=options.ability_method,
        sizes=options.tier_sizes,
    )


@dataclass(frozen=True)
class TierFit:
    """Item parameters for one tier: refitted inside it, or the global ones."""

    tier: int
    comparisons: np.ndarray  # the tier's comparisons among the global fit's
    usable: bool  # enough comparisons for tier-specific item parameters
    refit: ItemFit | None  # the fit on ``comparisons`` alone (None: not usable or not asked)
    alpha: np.ndarray  # (P,) the refit's where the tier judged the prompt, else global
    b: np.ndarray  # (P, K-1) likewise


def fit_tier(
    data: LocoData,
    fit: ItemFit,
    tiers: Tiers,
    tier: int,
    rng_key: jax.Array,
    *,
    min_tier_comparisons: int,
    num_draws: int,
    refit: bool = True,
    refitted: ItemFit | None = None,
) -> TierFit:
    """Refit the item parameters on tier ``tier``'s comparisons and merge them with ``fit``'s.

    Args:
        data: the dimension's cells.
        fit: the global fit; its comparisons are the pool the tier's are drawn from.
        tiers: from :func:`split_by_fit` on ``fit``.
        tier: the tier (-1, across tiers, is never usable).
        rng_key: the refit's key.
        min_tier_comparisons: fewer than this (or a single tier) keeps the global parameters.
        num_draws: Laplace draws of the refit.
        refit: False to only decide whether the tier is usable (no fit; global parameters).
        refitted: the fit on the tier's comparisons, when the caller already made it
            (a batch of folds' tier fits); ``rng_key`` and ``num_draws`` are then unused.

    Returns:
        The :class:`TierFit`.
    """
    inside = tiers.comparisons_in(tier, among=fit.comparisons)
    usable = tiers.num_tiers > 1 and tier >= 0 and len(inside) >= min_tier_comparisons
    if not (usable and refit):
        return TierFit(tier, inside, usable, None, fit.alpha, fit.b)
    tfit = fit_items(data, inside, rng_key, num_draws) if refitted is None else refitted
    alpha = np.where(tfit.has_data, tfit.alpha, fit.alpha)
    b = np.where(tfit.has_data[:, None], tfit.b, fit.b)
    return TierFit(tier, inside, usable, tfit, alpha, b)


__all__ = [
    "ItemFit",
    "TierFit",
    "TierOptions",
    "fit_items",
    "fit_items_batch",
    "fit_items_masked",
    "fit_tier",
    "information_score",
    "redundancy_groups",
    "split_by_fit",
    "split_by_options",
]
