"""Skill-only updates: a new snapshot from new judgments with the item parameters held.

A full fast fit of every judgment takes seconds at 100k judgments, too slow for a
snapshot per batch. :func:`skill_base` keeps what a full fit knows about the
items (:class:`SkillBase`); :func:`skill_snapshot` then re-estimates only the
skills on every judgment so far (:mod:`stan_free_models.incremental`, Newton
steps on the skills, covariance carried over from the full fit), in tens of
milliseconds. Judgments on a prompt or pair the base has not seen are held back
until the next full fit.

The updates assume independent judgments: a fit with the prompt-by-comparison
effect (``FitConfig.cell_effect``, the default model) gives no base.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from adaptive.estimation.snapshot import Snapshot

if TYPE_CHECKING:  # JAX is imported on first fit, so a process that only reads starts fast
    from adaptive.core.cells import CellData
    from adaptive.estimation.fitting import FitConfig
    from adaptive.estimation.source import Source
    from stan_free_models.model_key import Priors
    from stan_free_models.posterior import Posterior


@dataclass(frozen=True)
class SkillBase:
    """What a skill-only update holds fixed: the last full fast fit of one dimension.

    See :mod:`stan_free_models.incremental`. ``pair_table`` and ``item_table``
    turn new judgment rows into indices without rebuilding cells.
    """

    snapshot: Snapshot
    items: Any  # stan_free_models.incremental.ItemPoint
    item_term: np.ndarray  # (S, S)
    pair_table: pl.DataFrame  # system_a, system_b -> comparison, sign (both orientations)
    item_table: pl.DataFrame  # item_id -> item
    priors: Priors  # the full fit's (FitConfig.priors): its thresholds and skills' prior

    @property
    def num_judgments(self) -> int:
        return self.snapshot.num_judgments


def skill_base(
    snapshot: Snapshot, cells: CellData, posterior: Posterior, config: FitConfig
) -> SkillBase | None:
    """The :class:`SkillBase` of a per-system fast fit, or None if it cannot serve as one."""
    import jax

    from adaptive.estimation.fitting import model_data
    from stan_free_models.incremental import ItemPoint, item_uncertainty, update_skills

    if (
        posterior.mode is None
        or config.cell_effect  # skill-only updates assume independent judgments
        or "cov_global" not in posterior.info
        or not posterior.diagnostics.converged
        or cells.num_items != len(cells.prompts)  # redundancy groups: items are not prompts
    ):
        return None
    priors = config.priors
    data = model_data(cells, likelihood="judgment", parameterization="system")
    items = ItemPoint.from_mode(
        posterior.mode["items"][: cells.num_items],
        priors=priors,
        num_categories=data.num_categories,
    )
    s_real = len(cells.systems)
    # the conditional covariance at the full fit's own mode and data (its one draw is unused)
    at_mode = update_skills(
        data,
        items,
        init=posterior.mode["global"][:s_real],
        rng_key=jax.random.PRNGKey(config.seed),
        max_steps=0,
        num_draws=1,
        priors=priors,
    )
    names = np.asarray(cells.systems, dtype=object)
    a, b = names[cells.pair_a], names[cells.pair_b]
    idx = np.arange(cells.num_comparisons)
    pair_table = pl.DataFrame(
        {
            "system_a": np.concatenate([a, b]).tolist(),
            "system_b": np.concatenate([b, a]).tolist(),
            "_comparison": np.concatenate([idx, idx]),
            "_sign": np.concatenate([np.ones_like(idx), -np.ones_like(idx)]),
        },
        schema={
            "system_a": pl.Utf8,
            "system_b": pl.Utf8,
            "_comparison": pl.Int64,
            "_sign": pl.Int64,
        },
    )
    item_table = pl.DataFrame(
        {"item_id": list(cells.items), "_item": np.arange(cells.num_items)},
        schema={"item_id": pl.Utf8, "_item": pl.Int64},
    )
    return SkillBase(
        snapshot=snapshot,
        items=items,
        item_term=item_uncertainty(posterior.info["cov_global"], at_mode.conditional_cov),
        pair_table=pair_table,
        item_table=item_table,
        priors=priors,
    )


def encode_judgments(base: SkillBase, judgments: pl.DataFrame) -> dict[str, np.ndarray]:
    """Per-judgment indices on the base's axes.

    Returns ``comparison``, ``item``, ``y`` for the judgments whose pair and prompt the
    base knows, ``known`` (a mask over the input rows) and, when the frame has a
    ``seq`` column, ``seq`` of every input row.
    """
    cols = ["item_id", "system_a", "system_b", "winner"]
    if "seq" in judgments.columns:
        cols.append("seq")
    joined = (
        judgments.select(cols)
        .with_row_index("_row")
        .join(base.pair_table, on=["system_a", "system_b"], how="left")
        .join(base.item_table, on="item_id", how="left")
        .sort("_row")
    )
    known = (joined["_comparison"].is_not_null() & joined["_item"].is_not_null()).to_numpy()
    winner = joined["winner"].to_numpy()[known]
    raw = np.where(winner == "a", -1, np.where(winner == "b", 1, 0))
    out = {
        "comparison": joined["_comparison"].to_numpy()[known].astype(np.int32),
        "item": joined["_item"].to_numpy()[known].astype(np.int32),
        "y": (raw * joined["_sign"].to_numpy()[known] + 1).astype(np.int32),
        "known": known,
    }
    if "seq" in joined.columns:
        out["seq"] = joined["seq"].to_numpy().astype(np.int64)
    return out


def skill_snapshot(
    base: SkillBase,
    source: Source,
    *,
    init: np.ndarray | None = None,
    num_draws: int = 1000,
    seed: int = 0,
) -> Snapshot | None:
    """A fast snapshot of ``source`` with the base's item parameters held (None: refit fully).

    Judgments on a prompt or pair the base has not seen cannot use held item
    parameters: they are *held back* (``diagnostics["held_back"]``) until the next
    items refresh, and the snapshot's ``last_seq`` stops just before the first of
    them (it needs a ``seq`` column for that; without one the answer is None).

    Args:
        base: the last full fast fit of the dimension.
        source: every judgment of the dimension now.
        init: starting skills (the previous snapshot's mode).
        num_draws: skill draws.
        seed: key of the draws.
    """
    import jax

    from adaptive.estimation.significance import observed_net
    from stan_free_models.incremental import update_skills
    from stan_free_models.inference import GRMData

    start = time.perf_counter()
    snap = base.snapshot
    if tuple(source.systems) != snap.systems:
        return None
    encoded = encode_judgments(base, source.judgments)
    held_back = int((~encoded["known"]).sum())
    last_seq = source.last_seq
    if held_back:
        # judgments on prompts (or pairs) the held items do not cover wait for the next
        # items refresh; the snapshot then claims only what precedes the first of them
        if "seq" not in encoded:
            return None
        last_seq = int(encoded["seq"][~encoded["known"]].min()) - 1
    num_c, num_p = len(snap.pair_a), len(snap.items)
    data = GRMData(
        comparison=encoded["comparison"],
        item=encoded["item"],
        y=encoded["y"],
        weight=np.ones(len(encoded["y"]), np.float32),
        num_comparisons=num_c,
        num_items=num_p,
        num_categories=3,
        pair_a=snap.pair_a.astype(np.int32),
        pair_b=snap.pair_b.astype(np.int32),
        num_systems=len(snap.systems),
    )
    fit = update_skills(
        data,
        base.items,
        init=init,
        item_term=base.item_term,
        rng_key=jax.random.PRNGKey(seed),
        num_draws=num_draws,
        priors=base.priors,
    )
    if not fit.converged:
        return None
    # distinct prompts per comparison from the judged cells (no comparison x prompt table;
    # a sort, not np.unique, whose hash path takes ~1 s for 1M distinct int64 keys)
    keys = np.sort(encoded["comparison"].astype(np.int64) * num_p + encoded["item"])
    judged_cells = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if keys.size else keys
    observed = observed_net(encoded["comparison"], encoded["item"], encoded["y"] - 1, num_c)
    mode = None
    if snap.mode is not None:
        g = np.array(snap.mode["global"], dtype=np.float32)
        g[: len(fit.mode)] = fit.mode
        mode = {"global": g, "items": snap.mode["items"]}
    seconds = time.perf_counter() - start
    return replace(
        snap,
        version=0,
        num_judgments=len(encoded["y"]),
        last_seq=last_seq,
        created_at=time.time(),
        fit_seconds=seconds,
        diagnostics={
            "update": "skills",
            "items_from_version": snap.version,
            "items_num_judgments": snap.num_judgments,
            "held_back": held_back,
            "converged": True,
            "num_steps": fit.num_steps,
            "grad_norm": fit.grad_norm,
            "seconds": seconds,
            "passed": True,
        },
        pair_judgments=np.bincount(encoded["comparison"], minlength=num_c).astype(np.int64),
        pair_observed=observed.mean,
        pair_observed_p=observed.p,
        pair_observed_se=observed.se,
        pair_prompts=np.bincount(judged_cells // num_p, minlength=num_c).astype(np.int64),
        skill=fit.draws.astype(np.float32),
        mode=mode,
    )


__all__ = ["SkillBase", "encode_judgments", "skill_base", "skill_snapshot"]
