"""Prune: kept and dropped prompts per model tier of a judgments frame, for every door.

``evalset prune``, :func:`evalset.prune` and ``GET /projects/{id}/pruning`` all call
:func:`prune_judgments` with a :class:`adaptive.prompts.pruning.PruneConfig` (whose field
defaults are the defaults of every door), so the same judgments and options give the
same rows, in the same order, through each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from evalset._common import _dims

if TYPE_CHECKING:  # adaptive.prompts.pruning loads JAX: imported where it is used
    from adaptive.prompts.pruning import PruneConfig
    from evalset.fit_cache import FitCache

#: the PruneConfig fields that plan from the tiers' fits, not fit them: one cached fit
#: serves every ``--keep`` and ``--target-se-ratio``
PLANNED = {"keep": None, "target_se_ratio": None, "rank": "shared"}


def prune_config(
    keep: int | None, target_se_ratio: float | None, *, tiers: int, seed: int, rank: str
) -> PruneConfig:
    """The :class:`~adaptive.prompts.pruning.PruneConfig` of :func:`evalset.prune`'s keywords."""
    from adaptive.prompts.pruning import PruneConfig

    if (keep is None) == (target_se_ratio is None):
        raise ValueError("give exactly one of keep or target_se_ratio")
    if rank not in ("shared", "information"):
        raise ValueError(f"rank must be 'shared' or 'information', not {rank!r}")
    return PruneConfig(
        keep=keep, target_se_ratio=target_se_ratio, num_tiers=tiers, seed=seed, rank=rank
    )


def prune_judgments(
    judgments: pl.DataFrame,
    config: PruneConfig,
    *,
    dimension: str | None = None,
    log: Callable[[str], None] | None = None,
    cache: FitCache | None = None,
) -> list[dict[str, Any]]:
    """Every tier's kept and dropped prompts, with reasons, of each dimension.

    Args:
        judgments: validated judgments in arrival order (:func:`evalset.read`).
        config: what to keep (``keep`` or ``target_se_ratio``), tiers, redundancy, seed.
        dimension: only this one (default: every dimension, in order of appearance).
        log: where each tier's summary goes (default: nowhere).
        cache: where the tiers' fits are kept (:func:`evalset.fit_cache.default_cache`; None,
            the default and the service's: fit).

    Returns:
        :func:`adaptive.prompts.pruning.plan_rows` of every dimension: the kept prompts first, most
        informative first, then the dropped ones by name (per dimension and tier).
    """
    from adaptive.core.cells import build_cells
    from adaptive.prompts.loco import loco_data
    from adaptive.prompts.prune_folds import cell_table, judged_from_cells
    from adaptive.prompts.prune_predict import predict_precision
    from adaptive.prompts.pruning import plan_rows
    from adaptive.prompts.tiers import tier_names

    say = log or (lambda _: None)
    names = tier_names(config.num_tiers)
    rows: list[dict[str, Any]] = []
    for dim in _dims(judgments, dimension):
        cells = build_cells(judgments, dimension=dim)
        data = loco_data(cells)
        say(f"prune {dim!r}: fitting, tiers and information ...")
        fits = _tier_fits(data, dim, config, cache, say)
        table = cell_table(judged_from_cells(cells))
        plans, precisions = predict_precision(table, config, fits)
        kept: set[int] = set()
        for plan, precision in zip(plans, precisions):
            members = [s for s, t in zip(cells.systems, fits.tiers.system_tier) if t == plan.tier]
            kept |= set(plan.kept.tolist())
            say(
                f"prune {dim!r} tier {names[plan.tier]} ({', '.join(members)}): keep "
                f"{len(plan.kept)} of {data.num_prompts} prompts for {len(plan.comparisons)} "
                f"comparisons; {describe_precision(precision)}"
            )
            say(f"prune {dim!r} tier {names[plan.tier]}: {describe_headroom(precision)}")
        say(
            f"prune {dim!r}: {len(kept)} of {data.num_prompts} prompts kept in some tier: "
            + ", ".join(sorted(cells.prompts[p] for p in kept))
        )
        rows += plan_rows(
            plans,
            dimension=dim,
            prompts=cells.prompts,
            comparison_names=cells.comparison_names(),
            num_tiers=config.num_tiers,
            se_ratios=[p.se_ratio for p in precisions],
            shared=_shared_comparisons(data, config),
        )
    rows.sort(
        key=lambda r: (
            r["dimension"],
            r["tier"],
            not r["kept"],
            r["rank"] if r["kept"] and r["rank"] is not None else 0,
            r["item_id"],
        )
    )
    return rows


def _tier_fits(
    data: Any, dim: str, config: PruneConfig, cache: FitCache | None, say: Callable[[str], None]
) -> Any:
    """:func:`adaptive.prompts.pruning.fit_tiers` of one dimension's cells, or the same fit
    from ``cache`` (keyed by the cells' arrays and the fitting part of ``config``)."""
    import jax

    from adaptive.prompts.pruning import fit_tiers
    from evalset.fit_cache import arrays_digest, config_repr, fetch

    return fetch(
        cache,
        "prune fits",
        lambda: (arrays_digest(data), dim, config_repr(config, **PLANNED), config.seed),
        lambda: fit_tiers(data, config, jax.random.PRNGKey(config.seed)),
        log=lambda message: say(f"prune {dim!r}: {message}"),
    )


def describe_precision(precision: Any) -> str:
    """The predicted fresh SE ratio of a tier's kept prompts, its interval and estimand, in words."""
    p = precision
    if not np.isfinite(p.se_ratio):
        return (
            "SE ratio vs the full set on fresh judgments not measurable here (too few prompts "
            "or comparisons to measure a comparison's SE); the model's in-sample figure "
            f"{p.in_sample:.2f}"
        )
    return (
        f"SE ratio vs the full set on fresh judgments {p.se_ratio:.2f} (90% interval "
        f"{p.low:.2f}-{p.high:.2f}; each comparison's SNR with all prompts over its SNR with "
        "the kept ones, median over the clearly signed of its "
        f"{p.num_comparisons} comparisons, for a new round of judgments laid out like this "
        "one, the kept prompts' cell means shrunk for their selection on these judgments; "
        f"the model's in-sample figure {p.in_sample:.2f}); the kept prompts are worth "
        f"{p.worth_random:.1f} random prompts each"
    )


def describe_headroom(precision: Any) -> str:
    """What pruning can gain in a tier, and the verdict when it cannot help."""
    p = precision
    share = "not measurable" if not np.isfinite(p.between_share) else f"{p.between_share:.0%}"
    text = f"between-prompt share of a judgment's variance {share}; " + (
        "the best subset's gain not measurable (no clearly signed comparison)"
        if not np.isfinite(p.best_gain)
        else f"the best subset of this size could be worth {p.best_gain:.1f} random prompts each"
    )
    if np.isfinite(p.new_system_gain):
        gain = round(p.new_system_gain, 1)  # the figure as printed decides the verdict
        text += (
            "; on systems not in these judgments (only what a prompt does on every comparison "
            f"carries over) at most {gain:.1f} as these systems' judgments estimate it (on new "
            "systems' own judgments the bound came out 1.2-1.4x lower in held-out checks)"
        )
        if gain < 2:
            text += " (below 2: no subset is worth twice as many random prompts on new systems)"
    if p.verdict == "keep them all":
        return text + (
            "; pruning cannot help here (the prompts differ by little more than their noise): "
            "keep them all, or prune at random (the SE grows as sqrt(all / kept))"
        )
    if p.verdict == "prune at random":
        return text + (
            "; the kept prompts do no better than random ones on fresh judgments: prune at random"
        )
    return text


def _shared_comparisons(data: Any, config: PruneConfig) -> Callable[[int, int], tuple[int, float]]:
    """(comparisons two prompts share, their centred correlation), for redundancy reasons."""
    from adaptive.prompts.redundancy import matrix_correlation

    r, n = matrix_correlation(
        data.rating, data.rating_mask, min_overlap=config.redundancy_min_shared
    )
    return lambda p, q: (int(n[p, q]), float(r[p, q]))
