"""Name-keyed preparation of a recommender snapshot from fitted posteriors, for the
benchmarks (benchmarks/scale.py, benchmarks/recommend_latency.py). The service and the
command line map names through :mod:`evalset.recommend_adapter`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adaptive.core.cells import CellData
from adaptive.recommend.prepare import DimensionDraws, snapshot_from_draws
from adaptive.recommend.state import RecommenderState
from adaptive.stopping.decisions import DecisionRule
from stan_free_models.posterior import Posterior


def snapshot_from_posteriors(
    posteriors: Sequence[Posterior],
    cells: Sequence[CellData],
    *,
    prompts: Sequence[str] | None = None,
    systems: Sequence[str] | None = None,
    version: int = 0,
    observed: Sequence[np.ndarray] | None = None,
    rule: DecisionRule | None = None,
) -> tuple[RecommenderState, dict]:
    """Prepare a :class:`RecommenderState` from one fitted posterior per dimension.

    Comparisons are the ones of each dimension's cells, stacked in dimension
    order; prompts are ``prompts`` (default: every prompt of the cells).

    Args:
        posteriors, cells: a fit of each dimension's cells.
        prompts, systems: the name spaces (default: union over the cells).
        version: the snapshot version.
        observed: per dimension, a (N,) mask of the judgments of ``cells``
            the posterior saw (default: all; a replay fits on a subset).

    Returns:
        The snapshot and the name maps ``{"dimensions", "systems", "prompts",
        "comparisons"}`` (comparisons as (dimension, system_a, system_b)).
    """
    prompt_names = list(prompts) if prompts is not None else _union(c.prompts for c in cells)
    system_names = list(systems) if systems is not None else _union(c.systems for c in cells)
    sys_index = {s: i for i, s in enumerate(system_names)}
    prompt_index = {p: i for i, p in enumerate(prompt_names)}
    blocks, names = [], []
    for d, (post, cd) in enumerate(zip(posteriors, cells, strict=True)):
        seen_j = np.ones(cd.num_judgments, bool) if observed is None else np.asarray(observed[d])
        local_sys = np.array([sys_index[s] for s in cd.systems], np.int64)
        local_prompt = np.array([prompt_index[p] for p in cd.prompts], np.int64)
        skill = None
        if "skill" in post.draws:
            local = post.flat("skill")
            skill = np.zeros((local.shape[0], len(system_names)))
            skill[:, local_sys] = local
        blocks.append(
            DimensionDraws(
                dimension=cd.dimension,
                theta=post.flat("theta"),
                pair_a=local_sys[cd.pair_a],
                pair_b=local_sys[cd.pair_b],
                skill=skill,
                judgment_comparison=cd.judgment_comparison[seen_j],
                judgment_prompt=local_prompt[cd.judgment_prompt[seen_j]],
                judgment_signed=cd.judgment_y[seen_j].astype(np.float64) - 1.0,
            )
        )
        names += [
            (cd.dimension, system_names[local_sys[a]], system_names[local_sys[b_]])
            for a, b_ in zip(cd.pair_a, cd.pair_b)
        ]
    snapshot = snapshot_from_draws(
        blocks,
        num_prompts=len(prompt_names),
        num_systems=len(system_names),
        version=version,
        rule=rule,
    )
    maps = {
        "dimensions": [c.dimension for c in cells],
        "systems": system_names,
        "prompts": prompt_names,
        "comparisons": names,
    }
    return snapshot, maps


def _union(groups) -> list[str]:
    return list(dict.fromkeys(x for g in groups for x in g))
