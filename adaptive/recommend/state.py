"""The recommender's state: what it reads from a posterior, the cells, the request, the batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from adaptive.stopping.decisions import Decisions

#: observations every open comparison gets before it is ordered by its need
DEFAULT_BURN_IN = 10
#: share of a comparison's estimated remaining need it gets in one batch
DEFAULT_NEED_SHARE = 1.0
#: shown_first codes
SHOW_A, SHOW_B = 0, 1
#: why a cell was chosen (Batch.reason indexes this)
BURN_IN, CLOSEST, OUT_OF_SIGHT, TARGETED, REPEAT = range(5)
REASONS = (
    "burn-in: every open comparison first gets a few judgments",
    "closest to a decision",
    "open, no decision in sight yet; spent after the closer ones",
    "named as a target",
    "prompts ran out: a judged cell again",
)
REASON_CODES = ("burn_in", "closest_to_decision", "open", "targeted", "repeat")


class RecommenderState(NamedTuple):
    """What the recommender needs from a posterior, integer-indexed.

    Attributes:
        version: snapshot version (fold it into the rng key for replayable batches).
        theta_mean: (C,) posterior mean ability difference (> 0: B better).
        pair_a, pair_b: (C,) system indices; dimension: (C,) dimension index.
        strength: (D, S) estimated system strength per dimension (NaN: no data).
        system_judgments: (D, S) judgments per system and dimension.
        num_judgments: judgments the posterior saw.
        decisions: the decision of every comparison from its own judgments
            (:func:`adaptive.stopping.decisions.decide`, all comparisons of all dimensions
            one family).
        judged: (C, P) judgments each cell already has.
    """

    version: int
    theta_mean: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    dimension: np.ndarray
    strength: np.ndarray
    system_judgments: np.ndarray
    num_judgments: int = 0
    decisions: Decisions | None = None
    judged: np.ndarray | None = None

    @property
    def num_comparisons(self) -> int:
        return int(self.theta_mean.shape[0])

    @property
    def num_prompts(self) -> int:
        return int(self.judged.shape[1]) if self.judged is not None else 0


class CellState(NamedTuple):
    """State of every cell (C, P): what may be asked and how it was shown so far.

    Attributes:
        available: judgments that may still be requested (0: not a candidate;
            in a replay the logged judgments left, in a campaign a large number
            for every cell to be judged).
        shown_a, shown_b: how often response a (resp. b) was shown first,
            counting judgments received and cells under an active lease.
        annotatable: (C, P) False where the cell cannot be annotated (a system
            has no response to the prompt, or both responses are identical);
            None = every cell can be.
    """

    available: np.ndarray
    shown_a: np.ndarray
    shown_b: np.ndarray
    annotatable: np.ndarray | None = None

    @classmethod
    def open(cls, num_comparisons: int, num_prompts: int, per_cell: int = 1_000_000) -> CellState:
        shape = (num_comparisons, num_prompts)
        return cls(
            np.full(shape, per_cell, np.int64), np.zeros(shape, np.int64), np.zeros(shape, np.int64)
        )


@dataclass(frozen=True)
class Request:
    """What the caller asks for.

    Attributes:
        size: number of judgments (tasks) in the batch.
        targets: comparison indices to spend on, closed or not; None = every open one.
        exclude: (C, P) cells not to hand out (e.g. the annotator already judged them).
        dimensions: restrict to these dimension indices (None = all).
        burn_in: observations every open comparison gets before it is ordered by its need.
        allow_repeats: serve a judged cell again when a comparison's fresh
            prompts run out. Off by default: with the prompt as the decision's
            unit a repeat informs the model, not the decision; turn it on with
            the judgment as the unit.
        max_per_cell: how often one cell may appear in one batch.
        new_system_judgments: a system with fewer judgments (in a dimension) is
            only paired with ``new_system_opponents`` systems of similar strength.
        new_system_opponents: how many opponents a new system gets.
    """

    size: int
    targets: tuple[int, ...] | None = None
    exclude: np.ndarray | None = None
    dimensions: tuple[int, ...] | None = None
    burn_in: int = DEFAULT_BURN_IN
    allow_repeats: bool = False
    max_per_cell: int = 1
    new_system_judgments: int = 20
    new_system_opponents: int = 3


class Batch(NamedTuple):
    """The chosen cells, in order of choice."""

    comparison: np.ndarray
    prompt: np.ndarray
    shown_first: np.ndarray  # SHOW_A or SHOW_B
    reason: np.ndarray  # index into REASONS / REASON_CODES
    need: (
        np.ndarray
    )  # judgments the comparison likely still needs, before this batch (inf: unknown)

    def __len__(self) -> int:
        return int(self.comparison.shape[0])


class RecommendInfo(NamedTuple):
    """Diagnostics of one recommendation (the caller decides what to keep)."""

    snapshot_version: int
    targets: np.ndarray  # (C,) bool
    decided: np.ndarray  # (C,) bool
    num_candidates: int
    unannotatable: int  # cells that cannot be annotated (missing or identical responses)
    #: (C,) int: for an open comparison not served because even its optimistic need
    #: exceeds its fresh prompts (the campaign's prompts cannot close it), those fresh
    #: prompts; -1 for every other comparison (None: not computed)
    unclosable: np.ndarray | None = None
