"""Snapshots for the recommender from posterior draws and the judgments, integer-indexed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from adaptive.recommend.state import RecommenderState
from adaptive.stopping.decisions import DecisionRule, decide


def system_strength(
    theta_mean: np.ndarray, pair_a: np.ndarray, pair_b: np.ndarray, num_systems: int
) -> np.ndarray:
    """Leaderboard strengths s (mean 0) from comparison means theta ~ s_b - s_a (least squares).

    Systems that appear in no comparison get NaN.
    """
    strength = np.full(num_systems, np.nan)
    if len(theta_mean) == 0:
        return strength
    design = np.zeros((len(theta_mean), num_systems))
    design[np.arange(len(theta_mean)), pair_b] += 1.0
    design[np.arange(len(theta_mean)), pair_a] -= 1.0
    seen = np.abs(design).sum(axis=0) > 0
    sol, *_ = np.linalg.lstsq(design[:, seen], theta_mean, rcond=None)
    strength[seen] = sol - sol.mean()
    return strength


class DimensionDraws(NamedTuple):
    """One dimension's posterior draws and observed judgments, on global indices.

    Attributes:
        theta: (D, C) draws of the ability differences of the dimension's comparisons.
        pair_a, pair_b: (C,) global system indices of each comparison.
        skill: (D, S) per-system draws on global system indices, or None for
            the per-comparison parameterisation (then the covariance of theta is
            taken as diagonal and strengths come from least squares).
        judgment_comparison, judgment_prompt, judgment_signed: (N,) the
            judgments in arrival order (signed: +1 B better, -1 A, 0 tie).
    """

    dimension: str
    theta: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    skill: np.ndarray | None
    judgment_comparison: np.ndarray
    judgment_prompt: np.ndarray
    judgment_signed: np.ndarray


def snapshot_from_draws(
    dimensions: Sequence[DimensionDraws],
    *,
    num_prompts: int,
    num_systems: int,
    version: int = 0,
    rule: DecisionRule | None = None,
) -> RecommenderState:
    """Prepare a :class:`RecommenderState` (all dimensions stacked) from posterior draws.

    The draws give each system's estimated strength (for pairing new systems and
    for leaderboard-adjacent targets); decisions use every comparison's own
    judgments in the order given (arrival order) under ``rule``, all dimensions'
    comparisons one family.
    """
    num_p, num_s = num_prompts, num_systems
    means, pa, pb, dims = [], [], [], []
    judged, dec_comp, dec_prompt, dec_signed = [], [], [], []
    strength = np.full((len(dimensions), num_s), np.nan)
    sys_judg = np.zeros((len(dimensions), num_s), np.int64)
    total = 0
    for d, dd in enumerate(dimensions):
        theta = np.asarray(dd.theta, np.float64)
        if not np.isfinite(theta).all():
            raise ValueError(f"the posterior of dimension {dd.dimension!r} has non-finite draws")
        num_c = theta.shape[1]
        means.append(theta.mean(axis=0))
        if dd.skill is not None:
            skill = np.asarray(dd.skill, np.float64).mean(axis=0)
            seen_sys = np.zeros(num_s, bool)
            seen_sys[dd.pair_a] = seen_sys[dd.pair_b] = True
            strength[d, seen_sys] = skill[seen_sys] - skill[seen_sys].mean()
        else:
            strength[d] = system_strength(means[-1], dd.pair_a, dd.pair_b, num_s)
        pa.append(np.asarray(dd.pair_a, np.int64))
        pb.append(np.asarray(dd.pair_b, np.int64))
        dims.append(np.full(num_c, d, np.int64))
        j_comp = np.asarray(dd.judgment_comparison, np.int64)
        j_prompt = np.asarray(dd.judgment_prompt, np.int64)
        sys_judg[d] = np.bincount(pa[-1][j_comp], minlength=num_s)
        sys_judg[d] += np.bincount(pb[-1][j_comp], minlength=num_s)
        total += len(j_comp)
        dec_comp.append(j_comp + sum(len(m) for m in means[:-1]))
        dec_prompt.append(j_prompt)
        dec_signed.append(np.asarray(dd.judgment_signed, np.float64))
        counts = np.zeros((num_c, num_p), np.int64)
        np.add.at(counts, (j_comp, j_prompt), 1)
        judged.append(counts)
    num_c = sum(len(m) for m in means)
    judged_all = np.concatenate(judged, axis=0)
    decisions = decide(
        np.concatenate(dec_comp),
        np.concatenate(dec_prompt),
        np.concatenate(dec_signed),
        num_c,
        rule,
    )
    return RecommenderState(
        version=int(version),
        theta_mean=np.concatenate(means),
        pair_a=np.concatenate(pa),
        pair_b=np.concatenate(pb),
        dimension=np.concatenate(dims),
        strength=strength,
        system_judgments=sys_judg,
        num_judgments=total,
        decisions=decisions,
        judged=judged_all,
    )
