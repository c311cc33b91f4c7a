"""A logged campaign as index arrays, and its own signs (the replay's and the simulators' type)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from adaptive.stopping.decisions import A_BETTER, B_BETTER
from adaptive.stopping.evidence import net_preference

#: a full-log comparison is decided clearly when its prompt-level |z| is at least this (two-sided 0.001)
CLEAR_Z = 3.2905267314919255


class Log(NamedTuple):
    """One dimension's judgments as index arrays (row order = arrival order).

    ``true_net`` is the known Δ of each comparison in a simulated log, else None;
    ``true_ties`` its known share of ties (a fresh prompt's judgment).
    """

    comparison: np.ndarray
    prompt: np.ndarray
    signed: np.ndarray
    num_comparisons: int
    num_prompts: int
    true_net: np.ndarray | None = None
    pair_a: np.ndarray | None = None  # (C,) systems of each comparison (questions need them)
    pair_b: np.ndarray | None = None
    systems: tuple[str, ...] = ()
    true_ties: np.ndarray | None = None

    @property
    def num_judgments(self) -> int:
        return int(self.comparison.shape[0])

    @property
    def num_systems(self) -> int:
        if self.systems:
            return len(self.systems)
        if self.pair_a is None or self.pair_b is None or not len(self.pair_a):
            return 0
        return int(max(self.pair_a.max(), self.pair_b.max())) + 1


def full_log_sign(log: Log) -> tuple[np.ndarray, np.ndarray]:
    """(C,) the full log's own prompt-level sign of Δ and |z| (mean of cell means / se)."""
    ref = net_preference(log.comparison, log.prompt, log.signed, log.num_comparisons)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(ref.se > 0, ref.mean / ref.se, np.where(ref.mean != 0, np.inf, 0.0))
    return np.sign(np.nan_to_num(ref.mean)), np.abs(np.nan_to_num(z))


def decision_sign(outcome: np.ndarray) -> np.ndarray:
    return np.where(outcome == B_BETTER, 1, np.where(outcome == A_BETTER, -1, 0))
