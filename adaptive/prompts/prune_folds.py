"""Judgments per (prompt, comparison) cell, split into folds, and each comparison's signal-to-noise.

The measures pruning is judged by, on any set of judgments (a fold, held-out annotators,
the comparisons of a new system), all integer-indexed:

* a comparison's **net preference on a prompt set S** is the mean over the prompts of S
  judged for it of the prompt's mean judgment (-1 A better, 0 tie, +1 B better);
* its **signal-to-noise ratio** (SNR) is that mean over its standard error across the
  prompts (sd / sqrt(number of prompts)): how many standard errors the comparison's
  answer lies from a tie;
* the **SE ratio** of S against the full set F is SNR_F / SNR_S for one comparison (the
  factor by which S's standard error, in units of the net preference it measures, is
  larger), summarised as the median over the comparisons whose sign is clear
  (``|SNR_F| >= CLEAR_SNR``);
* S is **worth w random prompts per prompt** when a random set would need w x |S| prompts
  to reach S's SNR squared: random prompts keep the mean and shrink the SE as one over the
  square root of their number, so w = (SNR_S / SNR_random(|S|))^2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: a comparison counts as clearly signed when its full set's |SNR| reaches this
CLEAR_SNR = 2.0


@dataclass(frozen=True)
class Judged:
    """One dimension's judgments as arrays indexed like its :class:`~adaptive.core.cells.CellData`."""

    comparison: np.ndarray  # (N,)
    prompt: np.ndarray  # (N,)
    x: np.ndarray  # (N,) -1 A better, 0 tie, +1 B better
    annotator: np.ndarray  # (N,)
    num_prompts: int
    num_comparisons: int

    def subset(self, keep: np.ndarray) -> Judged:
        """The judgments where ``keep`` (N,) is True, same indexing."""
        return Judged(
            self.comparison[keep],
            self.prompt[keep],
            self.x[keep],
            self.annotator[keep],
            self.num_prompts,
            self.num_comparisons,
        )


def judged_from_cells(cells) -> Judged:  # type: ignore[no-untyped-def]
    """The per-judgment view of ungrouped cells (prompts are items)."""
    return Judged(
        comparison=np.asarray(cells.judgment_comparison, dtype=np.int64),
        prompt=np.asarray(cells.judgment_prompt, dtype=np.int64),
        x=np.asarray(cells.judgment_y, dtype=np.float64) - 1.0,
        annotator=np.asarray(cells.judgment_annotator, dtype=np.int64),
        num_prompts=len(cells.prompts),
        num_comparisons=cells.num_comparisons,
    )


@dataclass(frozen=True)
class CellTable:
    """(P, C) sums of judgments, their squares, and counts per cell."""

    total: np.ndarray
    squares: np.ndarray
    count: np.ndarray

    @property
    def observed(self) -> np.ndarray:
        return self.count > 0

    @property
    def mean(self) -> np.ndarray:
        """(P, C) each cell's mean judgment, 0 where unobserved."""
        return np.where(self.observed, self.total / np.maximum(self.count, 1), 0.0)


def cell_table(judged: Judged) -> CellTable:
    """Sums and counts of ``judged`` per (prompt, comparison) cell."""
    shape = (judged.num_prompts, judged.num_comparisons)
    flat = judged.prompt * judged.num_comparisons + judged.comparison
    size = shape[0] * shape[1]
    total = np.bincount(flat, weights=judged.x, minlength=size).reshape(shape)
    squares = np.bincount(flat, weights=judged.x**2, minlength=size).reshape(shape)
    count = np.bincount(flat, minlength=size).reshape(shape).astype(np.float64)
    return CellTable(total, squares, count)


def split_folds(judged: Judged, rng: np.random.Generator) -> np.ndarray:
    """(N,) fold 0 or 1 of every judgment: within each cell its annotators alternate folds.

    An annotator's judgments of one cell stay together; the annotators of a cell are put
    in a random order and dealt to the folds in turn from a random first fold, so a cell
    of two annotators gives one to each fold and a cell of one annotator goes to either.
    """
    cell = judged.comparison * judged.num_prompts + judged.prompt
    groups, group_of = np.unique(np.stack([cell, judged.annotator]), axis=1, return_inverse=True)
    group_of = np.ravel(group_of)
    group_cell = groups[0]
    order = np.lexsort((rng.random(len(group_cell)), group_cell))
    sorted_cell = group_cell[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_cell)) + 1]
    run = np.repeat(starts, np.diff(np.r_[starts, len(sorted_cell)]))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order)) - run
    _, cell_index = np.unique(group_cell, return_inverse=True)
    offset = rng.integers(0, 2, size=cell_index.max() + 1 if len(cell_index) else 0)
    fold_of_group = (rank + offset[np.ravel(cell_index)]) % 2
    return fold_of_group[group_of]


def snr(table: CellTable, masks: np.ndarray) -> np.ndarray:
    """SNR of every comparison on every prompt set.

    Args:
        table: the judgments' cells.
        masks: (P,) or (D, P) boolean prompt sets.

    Returns:
        (C,) or (D, C) mean over the set's judged prompts of the cell means over its
        standard error across them; NaN with fewer than two prompts or no spread.
    """
    m = np.atleast_2d(masks).astype(np.float64)
    obs = table.observed.astype(np.float64)
    mean = table.mean
    n = m @ obs
    s1 = m @ mean
    s2 = m @ (mean**2)
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = s1 / n
        var = (s2 - n * centre**2) / (n - 1)
        out = centre / np.sqrt(var / n)
    out[(n < 2) | ~(var > 1e-12)] = np.nan
    return out[0] if np.ndim(masks) == 1 else out


def net_preference(table: CellTable, masks: np.ndarray) -> np.ndarray:
    """(C,) or (D, C) mean over the set's judged prompts of the cell means (NaN if none)."""
    m = np.atleast_2d(masks).astype(np.float64)
    n = m @ table.observed.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (m @ table.mean) / n
    return out[0] if np.ndim(masks) == 1 else out


def se_ratios(full: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Per comparison SNR_full / SNR_kept with the kept SNR signed by the full set's answer.

    A kept set that points the other way (or nowhere) has an infinite ratio.
    """
    aligned = np.sign(full) * kept
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(aligned > 0, np.abs(full) / aligned, np.inf)


def clearly_signed(full: np.ndarray, threshold: float = CLEAR_SNR) -> np.ndarray:
    """Comparisons whose full-set |SNR| reaches ``threshold``."""
    return np.nan_to_num(np.abs(full), nan=0.0) >= threshold


def prompt_mask(prompts: np.ndarray, num_prompts: int) -> np.ndarray:
    """(P,) True at ``prompts``."""
    mask = np.zeros(num_prompts, dtype=bool)
    mask[np.asarray(prompts, dtype=np.int64)] = True
    return mask


__all__ = [
    "CLEAR_SNR",
    "CellTable",
    "Judged",
    "cell_table",
    "clearly_signed",
    "judged_from_cells",
    "net_preference",
    "prompt_mask",
    "se_ratios",
    "snr",
    "split_folds",
]
