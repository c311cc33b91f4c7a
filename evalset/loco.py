"""Leave-one-comparison-out (``evalset loco``): each dimension's fold data, the folds' run and
their rows, with the top-k's ratio on the held-out comparison's own judgments beside the
model's (:mod:`adaptive.prompts.loco`, :mod:`adaptive.prompts.loco_heldout`).

Example:
    >>> from evalset import example
    >>> [(dim, data.num_prompts) for dim, _, data in loco_dimensions(example(num_prompts=6))]
    [('overall', 6)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from adaptive.prompts.loco import run_loco as run_loco

if TYPE_CHECKING:
    import polars as pl

    from adaptive.core.cells import CellData
    from adaptive.prompts.loco import FoldResult, LocoConfig
    from adaptive.prompts.loco_data import LocoData
    from evalset.fit_cache import FitCache

__all__ = ["loco_dimensions", "loco_folds", "loco_rows", "run_loco"]


def loco_dimensions(
    judgments: pl.DataFrame, dimensions: Sequence[str] | None = None
) -> Iterator[tuple[str, CellData, LocoData]]:
    """Each dimension's cells and fold data (every dimension in order of appearance, or
    ``dimensions``), built as it is asked for."""
    from adaptive.core.cells import build_cells
    from adaptive.prompts.loco import loco_data

    if dimensions is None:
        dimensions = judgments["dimension"].unique(maintain_order=True).to_list()
    for dim in dimensions:
        cells = build_cells(judgments, dimension=dim)
        yield dim, cells, loco_data(cells)


def loco_folds(
    data: LocoData,
    config: LocoConfig,
    *,
    workers: int = 1,
    progress: Any = None,
    cache: FitCache | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[list[FoldResult], Any]:
    """:func:`adaptive.prompts.loco.run_loco` of every fold (the same results serially or on
    Ray), or the same folds from ``cache`` (keyed by the cells' arrays and ``config``;
    :func:`evalset.fit_cache.default_cache`; None: fit), which ``log`` is told of."""
    from evalset.fit_cache import arrays_digest, fetch

    folds: tuple[list[FoldResult], Any] = fetch(
        cache,
        "loco folds",
        lambda: (arrays_digest(data), repr(config), config.seed),
        lambda: run_loco(data, config, workers=workers, progress=progress),
        log=log,
    )
    return folds


def _heldout(
    cells: CellData, results: list[FoldResult], config: LocoConfig
) -> dict[tuple[str, int], dict[str, Any]]:
    """(policy, k) -> the curve on the held-out comparisons' own judgments."""
    import numpy as np

    from adaptive.prompts.loco_heldout import heldout_curve
    from adaptive.prompts.prune_folds import cell_table, judged_from_cells

    table = cell_table(judged_from_cells(cells))
    rows = heldout_curve(
        results, table, config.policies, config.grid, np.random.default_rng(config.seed)
    )
    return {
        (r["policy"], r["k"]): {k: r[k] for k in ("heldout_se_ratio", "heldout_folds")}
        for r in rows
    }


def loco_rows(
    dimension: str, cells: CellData, results: list[FoldResult], config: LocoConfig
) -> list[dict[str, Any]]:
    """One dimension's rows per (policy, k): the folds' summary and the held-out columns."""
    from adaptive.prompts.loco import summarize_folds

    heldout = _heldout(cells, results, config)
    rows = []
    for row in summarize_folds(results, config):
        fresh = heldout.get((row["policy"], row["k"]), {"heldout_se_ratio": 1.0})
        rows.append({"dimension": dimension, **row, **fresh})
    return rows
