"""Campaigns with known truth for pruning: prompts of varying discrimination, systems to hold out.

A prompt p has a discrimination a_p (log-normal) and a comparison c of systems A and B a
gap d_c = skill_B - skill_A; the true mean judgment of the cell is

    mu_pc = (1 - ties) tanh((a_p d_c + u_pc) / 2),   u_pc ~ N(0, interaction^2),

and a judgment is +1 (B better), -1 or 0 (tie, with probability ``ties``) with that mean.
The full set's net preference of a comparison is the mean of mu_pc over the prompts, known
exactly, so an estimate from a few prompts can be scored against the truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from adaptive.prompts.prune_folds import Judged


@dataclass(frozen=True)
class KnownTruth:
    """The prompts, the systems and every comparison's true cell means."""

    discrimination: np.ndarray  # (P,)
    skill: np.ndarray  # (S,)
    pair_a: np.ndarray  # (C,)
    pair_b: np.ndarray  # (C,)
    mu: np.ndarray  # (P, C)
    ties: float

    @property
    def full_set(self) -> np.ndarray:
        """(C,) every comparison's full-set net preference."""
        return self.mu.mean(axis=0)


def simulate_truth(
    rng: np.random.Generator,
    *,
    num_prompts: int = 200,
    num_systems: int = 11,
    spread: float = 0.6,
    interaction: float = 0.3,
    ties: float = 0.2,
) -> KnownTruth:
    """Prompts, systems (skills evenly spaced over [0, 2]) and all their pairs' cell means."""
    a = rng.lognormal(0.0, spread, num_prompts)
    skill = rng.permutation(np.linspace(0.0, 2.0, num_systems))
    pairs = np.array(list(combinations(range(num_systems), 2)))
    gap = skill[pairs[:, 1]] - skill[pairs[:, 0]]
    u = rng.normal(0.0, interaction, (num_prompts, len(pairs)))
    mu = (1 - ties) * np.tanh((np.outer(a, gap) + u) / 2)
    return KnownTruth(a, skill, pairs[:, 0], pairs[:, 1], mu, ties)


def judge(
    rng: np.random.Generator, truth: KnownTruth, comparisons: np.ndarray, per_cell: int
) -> Judged:
    """``per_cell`` judgments of every prompt on each of ``comparisons`` (indices into truth)."""
    num_p = truth.mu.shape[0]
    prompt, comp = np.meshgrid(np.arange(num_p), np.asarray(comparisons), indexing="ij")
    prompt, comp = np.repeat(prompt.ravel(), per_cell), np.repeat(comp.ravel(), per_cell)
    m = truth.mu[prompt, comp]
    decided = 1 - truth.ties
    u = rng.random(len(m))
    x = np.where(u < (decided + m) / 2, 1.0, np.where(u < decided, -1.0, 0.0))
    annotator = np.tile(np.arange(per_cell), len(m) // per_cell)
    return Judged(comp, prompt, x, annotator, num_p, len(truth.pair_a))


__all__ = ["KnownTruth", "judge", "simulate_truth"]
