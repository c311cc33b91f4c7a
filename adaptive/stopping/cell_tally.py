"""The judged cells of a lineage of decision states: each (comparison, prompt) cell's
signed-judgment sum and count, kept sparsely so that a batch costs its own cells
(:mod:`adaptive.stopping.decisions`)."""

from __future__ import annotations

import numpy as np


class CellTally:
    """Signed-judgment sum and count of every judged (comparison, prompt) cell, keyed sparsely.

    Shared by a lineage of :class:`DecisionState`: :func:`update` adds a batch's cells
    in place (its cost is the batch's, not the table's) and moves the tally on to the
    state it returns; the state it was given can no longer be updated (a second update
    of it raises), but its :class:`Decisions` stay readable.
    """

    __slots__ = ("cells", "needed_cache", "num_prompts", "version")

    def __init__(self, num_prompts: int) -> None:
        self.cells: dict[int, tuple[float, int]] = {}
        self.num_prompts = int(num_prompts)
        self.version = 0
        #: (rule key, observations at, needed, optimistic) of the last :func:`decisions_of`
        self.needed_cache: tuple | None = None

    def __len__(self) -> int:
        return len(self.cells)

    def get(self, comparison: int, prompt: int) -> tuple[float, int]:
        """(sum of signed judgments, judgments) of one cell; (0, 0) if never judged."""
        return self.cells.get(int(comparison) * self.num_prompts + int(prompt), (0.0, 0))


def tally_cells(tally: CellTally, comparison, prompt, signed, new: dict) -> np.ndarray:
    """Add a batch to the judged cells and the per-comparison cell-mean sums (in place).

    Returns (N,) True for the rows whose cell had no judgment before this batch.
    Costs the batch's distinct cells, not the (comparison x prompt) table.
    """
    if comparison.shape[0] == 0:
        return np.zeros(0, bool)
    key = comparison * tally.num_prompts + prompt
    keys, inv = np.unique(key, return_inverse=True)
    add_sum = np.bincount(inv, weights=signed, minlength=keys.shape[0])
    add_count = np.bincount(inv, minlength=keys.shape[0])
    cells = tally.cells
    if cells:
        before = [cells.get(k, (0.0, 0)) for k in keys.tolist()]
        old_sum = np.array([b[0] for b in before], np.float64)
        old_count = np.array([b[1] for b in before], np.int64)
    else:  # the first batch (all of them, for decide): nothing to look up
        old_sum, old_count = np.zeros(keys.shape[0]), np.zeros(keys.shape[0], np.int64)
    new_sum, new_count = old_sum + add_sum, old_count + add_count
    cells.update(zip(keys.tolist(), zip(new_sum.tolist(), new_count.tolist())))
    cell_comp = keys // tally.num_prompts
    was_new = old_count == 0
    old_mean = np.where(was_new, 0.0, old_sum / np.maximum(old_count, 1))
    np.add.at(new["cell_mean_sum"], cell_comp, new_sum / new_count - old_mean)
    np.add.at(new["num_prompts"], cell_comp, was_new.astype(np.int64))
    return was_new[inv]
