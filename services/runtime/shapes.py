"""The sizes a fast fit's compiled programs are keyed by, and judgments that reach the next one.

The default model's fit merges a cell's judgments into one observation (their category
counts: :func:`stan_free_models.inference.collapse_observations`), so its programs are
compiled for the number of judged cells, not of judgments; the model with the
prompt-by-comparison effect fits every judgment. :func:`fit_rows` counts what the fit
will see; :func:`grow_to` makes a stand-in campaign that reaches a given number of rows
and prompts, so the worker can compile the next padded size before the real campaign
gets there (the stand-in's fit is thrown away: only its compiled programs are kept).

Example:
    >>> import polars as pl
    >>> frame = pl.DataFrame({"system_a": ["x", "y", "x"], "system_b": ["y", "x", "z"],
    ...                       "item_id": ["p1", "p1", "p1"], "winner": ["a", "b", "tie"]})
    >>> fit_rows(frame, merged=True), fit_rows(frame, merged=False)
    (2, 3)
    >>> grown = grow_to(frame, rows=4, prompts=2, merged=True, seed=0)
    >>> fit_rows(grown, merged=True), grown["item_id"].n_unique()
    (4, 2)
"""

from __future__ import annotations

import numpy as np
import polars as pl

#: a prompt name no campaign uses, for the stand-in's new prompts
NEW_PROMPT = "evalset-next-shape-{}"


def _cells(frame: pl.DataFrame) -> pl.DataFrame:
    """Each judgment's cell: its unordered pair of systems and its prompt."""
    return frame.select(
        pl.min_horizontal("system_a", "system_b").alias("low"),
        pl.max_horizontal("system_a", "system_b").alias("high"),
        pl.col("item_id"),
    )


def fit_rows(frame: pl.DataFrame, *, merged: bool) -> int:
    """The observations a fast fit of ``frame`` compiles for: its judged cells when the
    fit merges a cell's judgments (``merged``, the default model), else its judgments."""
    if not merged:
        return frame.height
    return _cells(frame).unique().height


def _free_cells(
    cells: pl.DataFrame, pairs: pl.DataFrame, num: int, rng: np.random.Generator
) -> list[tuple[str, str, str]]:
    """Up to ``num`` distinct cells of known pairs and known prompts nobody judged: random
    draws, judged ones left out (a few rounds; what they do not find, new prompts give)."""
    prompts = cells["item_id"].unique().sort()
    found = pl.DataFrame(schema=cells.schema)
    for _ in range(8):
        if found.height >= num:
            break
        draws = 2 * (num - found.height) + 16
        pair = rng.integers(0, pairs.height, draws)
        candidates = pl.DataFrame(
            {
                "low": pairs["low"].gather(pair),
                "high": pairs["high"].gather(pair),
                "item_id": prompts.gather(rng.integers(0, prompts.len(), draws)),
            }
        )
        fresh = candidates.unique(maintain_order=True).join(
            pl.concat([cells, found]), on=["low", "high", "item_id"], how="anti"
        )
        found = pl.concat([found, fresh])
    return list(found.head(num).iter_rows())


def grow_to(
    frame: pl.DataFrame, *, rows: int, prompts: int, merged: bool, seed: int = 0
) -> pl.DataFrame:
    """``frame`` with judgments added until a fit sees at least ``rows`` observations and
    ``prompts`` prompts: copies of its own judgments (their winners and annotators) moved
    to cells nobody judged yet (known pairs, known prompts first, then new prompts).

    Without ``merged`` any copy adds an observation; with it only a copy on a new cell does.
    """
    rng = np.random.default_rng(seed)
    have_prompts = frame["item_id"].n_unique()
    extra_prompts = max(0, prompts - have_prompts)
    need = max(0, rows - fit_rows(frame, merged=merged), extra_prompts)
    if need == 0:
        return frame
    copies = frame.sample(n=need, with_replacement=True, seed=seed)
    if not merged:
        items = copies["item_id"].to_list()
        for i in range(extra_prompts):
            items[i] = NEW_PROMPT.format(i)
        return frame.vstack(copies.with_columns(pl.Series("item_id", items)))
    cells = _cells(frame).unique()
    pairs = cells.select("low", "high").unique().sort("low", "high")
    targets = _free_cells(cells, pairs, max(0, need - extra_prompts), rng)
    # past the free cells of known prompts, new prompts, each taking the known pairs in turn
    # (distinct cells: the new prompts are enough for the rows left, and each is used)
    left = need - len(targets)
    num_new = max(extra_prompts, -(-left // pairs.height)) if left else 0
    for k in range(left):
        low, high = pairs.row((k // num_new) % pairs.height)
        targets.append((low, high, NEW_PROMPT.format(k % num_new)))
    low, high, item = zip(*targets, strict=True)
    moved = copies.with_columns(
        pl.Series("system_a", list(low), dtype=pl.Utf8),
        pl.Series("system_b", list(high), dtype=pl.Utf8),
        pl.Series("item_id", list(item), dtype=pl.Utf8),
    )
    return frame.vstack(moved.select(frame.columns))


__all__ = ["NEW_PROMPT", "fit_rows", "grow_to"]
