"""Prune: kept and dropped prompts per model tier of a judgments frame, for every door.

``evalset prune``, :func:`evalset.prune` and ``GET /projects/{id}/pruning`` all call
:func:`prune_judgments` with a :class:`adaptive.prompts.pruning.PruneConfig` (whose field
defaults are the defaults of every door), so the same judgments and options give the
same rows, in the same order, through each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from evalset._common import _dims

if TYPE_CHECKING:  # adaptive.prompts.pruning loads JAX: imported where it is used
    from adaptive.prompts.pruning import PruneConfig


def prune_judgments(
    judgments: pl.DataFrame,
    config: PruneConfig,
    *,
    dimension: str | None = None,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Every tier's kept and dropped prompts, with reasons, of each dimension.

    Args:
        judgments: validated judgments in arrival order (:func:`evalset.read`).
        config: what to keep (``keep`` or ``target_se_ratio``), tiers, redundancy, seed.
        dimension: only this one (default: every dimension, in order of appearance).
        log: where each tier's summary goes (default: nowhere).

    Returns:
        :func:`adaptive.prompts.pruning.plan_rows` of every dimension: the kept prompts first, most
        informative first, then the dropped ones by name (per dimension and tier).
    """
    from adaptive.core.cells import build_cells
    from adaptive.prompts.loco import loco_data
    from adaptive.prompts.pruning import plan_rows, prune
    from adaptive.prompts.tiers import tier_names

    say = log or (lambda _: None)
    names = tier_names(config.num_tiers)
    rows: list[dict[str, Any]] = []
    for dim in _dims(judgments, dimension):
        cells = build_cells(judgments, dimension=dim)
        data = loco_data(cells)
        say(f"prune {dim!r}: fitting, tiers and information ...")
        plans, tiers, _ = prune(data, config)
        for plan in plans:
            members = [s for s, t in zip(cells.systems, tiers.system_tier) if t == plan.tier]
            say(
                f"prune {dim!r} tier {names[plan.tier]} ({', '.join(members)}): keep "
                f"{len(plan.kept)} of {data.num_prompts} prompts for {len(plan.comparisons)} "
                f"comparisons; expected SE ratio vs the full set {plan.se_ratio:.3f}"
            )
        rows += plan_rows(
            plans,
            dimension=dim,
            prompts=cells.prompts,
            comparison_names=cells.comparison_names(),
            num_tiers=config.num_tiers,
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
