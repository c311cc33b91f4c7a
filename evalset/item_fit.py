"""Item fit and the information of a prompt set, for notebooks and ``evalset item-fit``.

Both take judgments (fitted first, as :func:`evalset.fit` fits them) or a fit already
made, and return polars frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from adaptive.item_fit import DEFAULT_LEVEL

#: abilities the information curve is drawn at (theta, the IRT scale of a comparison)
DEFAULT_GRID = tuple(np.round(np.linspace(-4.0, 4.0, 33), 2))
#: parameter draws the information curve averages over
CURVE_DRAWS = 200
#: the columns ``evalset items --fit`` adds to each prompt's row
FIT_COLUMNS = ("fit_p", "misfit", "misfit_reason", "trend_observed", "trend_model")


def _fits(
    data: Any, dimension: str | None, method: str, seed: int, **fit_options: Any
) -> list[Any]:
    """The fits of ``data``: itself when it is one, else one per dimension."""
    import evalset
    from evalset._common import _dims, read

    if hasattr(data, "posterior") and hasattr(data, "cells"):
        return [data]
    judgments = read(data)
    return [
        evalset.fit(judgments, dimension=dim, method=method, seed=seed, **fit_options)
        for dim in _dims(judgments, dimension)
    ]


def item_fit(
    data: Any,
    *,
    dimension: str | None = None,
    method: str = "fast",
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    **fit_options: Any,
) -> pl.DataFrame:
    """Per prompt (or redundancy group): the posterior predictive check of its trend over the
    comparisons' abilities, ``fit_p``, and ``misfit`` where ``fit_p < level``, with
    ``misfit_reason`` in words; worst fit first (docs/selection.md, "Item fit").

    Example:
        >>> import evalset
        >>> table = item_fit(evalset.example(num_systems=4, num_prompts=12), num_draws=200)
        >>> {"fit_p", "misfit", "misfit_reason"} <= set(table.columns)
        True
    """
    from adaptive.item_fit import analysis_item_fit, item_fit_rows

    rows: list[dict[str, Any]] = []
    for result in _fits(data, dimension, method, seed, **fit_options):
        info = analysis_item_fit(result, seed=seed, level=level)
        rows += item_fit_rows(result, info, level=level)
    return pl.DataFrame(rows, infer_schema_length=None)


def item_fit_check(
    result: Any, *, seed: int = 0, level: float = DEFAULT_LEVEL
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """``evalset items --fit`` of one fit: each prompt's row
    (:func:`adaptive.pipeline.analysis_item_rows`) with the :data:`FIT_COLUMNS`, the test
    information curves of every prompt and of those not flagged (rows with a ``set``:
    ``all``, ``without misfits``), and the check (:class:`adaptive.item_fit.ItemFitInfo`).
    The service's ``GET .../item-fit`` answers the same."""
    from adaptive.item_fit import analysis_item_fit, item_fit_rows
    from adaptive.pipeline import analysis_item_rows

    info = analysis_item_fit(result, seed=seed, level=level)
    fit_rows = {r["item_id"]: r for r in item_fit_rows(result, info, level=level)}
    rows = [
        r | {c: fit_rows[r["item_id"]][c] for c in FIT_COLUMNS} for r in analysis_item_rows(result)
    ]
    fitting = [p for p, r in fit_rows.items() if not r["misfit"]]
    curves: list[dict[str, Any]] = []
    for name, prompts in (("all", None), ("without misfits", fitting)):
        curve = information_curve(result, prompts=prompts, seed=seed).to_dicts()
        curves.extend({"set": name, **r} for r in curve)
    return rows, curves, info


def information_curve(
    data: Any,
    *,
    prompts: Sequence[str] | None = None,
    dimension: str | None = None,
    method: str = "fast",
    seed: int = 0,
    grid: Sequence[float] = DEFAULT_GRID,
    **fit_options: Any,
) -> pl.DataFrame:
    """The test information of a set of prompts at every ability on ``grid``.

    Information sum_j I_j(theta) over the prompts of ``prompts`` (default: every prompt;
    a redundancy group counts once, through any of its prompts), averaged over the fit's
    draws of alpha and b, with ``se`` = 1 / sqrt(1 + information), the standard error of
    theta it implies under theta's N(0, 1) prior.

    Example:
        >>> import evalset
        >>> curve = information_curve(evalset.example(num_systems=3, num_prompts=10),
        ...                           num_draws=200, grid=[0.0])
        >>> curve.columns
        ['dimension', 'num_prompts', 'theta', 'information', 'se']
    """
    from stan_free_models.information import set_information

    theta = np.asarray(grid, dtype=float)
    rows: list[dict[str, Any]] = []
    for result in _fits(data, dimension, method, seed, **fit_options):
        cells, post = result.cells, result.posterior
        if prompts is None:
            chosen = np.arange(cells.num_items)
        else:
            index = {p: k for k, p in enumerate(cells.prompts)}
            unknown = [p for p in prompts if p not in index]
            if unknown:
                raise ValueError(f"unknown prompts in {cells.dimension!r}: {unknown[:5]}")
            chosen = np.unique(cells.item_of_prompt[[index[p] for p in prompts]])
        alpha, b = post.flat("alpha"), post.flat("b")
        rng = np.random.default_rng(seed)
        keep = rng.choice(alpha.shape[0], size=min(CURVE_DRAWS, alpha.shape[0]), replace=False)
        info = np.asarray(set_information(theta, alpha[keep][:, chosen], b[keep][:, chosen]))
        for t, i in zip(theta, info):
            rows.append(
                {
                    "dimension": cells.dimension,
                    "num_prompts": int(chosen.shape[0]),
                    "theta": float(t),
                    "information": float(i),
                    "se": float(1.0 / np.sqrt(1.0 + i)),
                }
            )
    return pl.DataFrame(rows)
