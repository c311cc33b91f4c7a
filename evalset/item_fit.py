"""Item fit and the information of a prompt set, for notebooks and ``evalset items --fit``.

:func:`item_fit` (the check's rows, worst fit first), :func:`fit_items` (the rows of
``evalset items --fit``) and :func:`information_curve` take judgments (fitted first, as
:func:`evalset.fit` fits them) or a fit already made, and return polars frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from adaptive.estimation.item_fit import DEFAULT_LEVEL

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
    from adaptive.estimation.item_fit import analysis_item_fit, item_fit_rows

    rows: list[dict[str, Any]] = []
    for result in _fits(data, dimension, method, seed, **fit_options):
        info = analysis_item_fit(result, seed=seed, level=level)
        rows += item_fit_rows(result, info, level=level)
    return pl.DataFrame(rows, infer_schema_length=None)


class ItemFitCheck(NamedTuple):
    """One fit's item-fit check before a level is applied (:func:`check_items`): what
    every level shares.

    Attributes:
        result: the fit (:class:`adaptive.estimation.pipeline.Analysis`).
        info: the check (:class:`adaptive.estimation.item_fit.ItemFitInfo`), flagged at the default level.
        item_rows: each prompt's ``evalset items`` row.
        curve: the test information curve of every prompt (rows with ``set`` ``all``).
        seed: the seed of its random numbers (and of the curves').
    """

    result: Any
    info: Any
    item_rows: list[dict[str, Any]]
    curve: list[dict[str, Any]]
    seed: int


def check_items(result: Any, *, seed: int = 0) -> ItemFitCheck:
    """The posterior predictive check of every prompt of one fit, for any level
    (:func:`flag_items`): its p-values and random numbers do not depend on the level."""
    from adaptive.estimation.item_fit import analysis_item_fit
    from adaptive.estimation.pipeline import analysis_item_rows

    info = analysis_item_fit(result, seed=seed)
    curve = information_curve(result, seed=seed).to_dicts()
    return ItemFitCheck(
        result=result,
        info=info,
        item_rows=analysis_item_rows(result),
        curve=[{"set": "all", **r} for r in curve],
        seed=seed,
    )


def flag_items(
    check: ItemFitCheck, level: float = DEFAULT_LEVEL
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """:func:`item_fit_check`'s rows, curves and check at ``level``, from :func:`check_items`
    (the flags, their reasons and the curve of the prompts not flagged)."""
    from adaptive.estimation.item_fit import flag_at, item_fit_rows

    info = flag_at(check.info, level)
    fit_rows = {r["item_id"]: r for r in item_fit_rows(check.result, info, level=level)}
    rows = [r | {c: fit_rows[r["item_id"]][c] for c in FIT_COLUMNS} for r in check.item_rows]
    fitting = [p for p, r in fit_rows.items() if not r["misfit"]]
    curve = information_curve(check.result, prompts=fitting, seed=check.seed).to_dicts()
    return rows, [*check.curve, *({"set": "without misfits", **r} for r in curve)], info


def item_fit_check(
    result: Any, *, seed: int = 0, level: float = DEFAULT_LEVEL
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """``evalset items --fit`` of one fit: each prompt's row
    (:func:`adaptive.estimation.pipeline.analysis_item_rows`) with the :data:`FIT_COLUMNS`, the test
    information curves of every prompt and of those not flagged (rows with a ``set``:
    ``all``, ``without misfits``), and the check (:class:`adaptive.estimation.item_fit.ItemFitInfo`).
    The service's ``GET .../item-fit`` answers the same (:func:`check_items` once per
    judgments seen, then :func:`flag_items` per level)."""
    return flag_items(check_items(result, seed=seed), level)


def fit_items(
    data: Any,
    *,
    dimension: str | None = None,
    method: str = "fast",
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    **fit_options: Any,
) -> pl.DataFrame:
    """The rows of ``evalset items --fit``: each prompt's ``evalset items`` row (as
    :func:`evalset.items` gives it) with its fit, the :data:`FIT_COLUMNS`.

    Example:
        >>> import evalset
        >>> rows = fit_items(evalset.example(num_systems=4, num_prompts=12), num_draws=200)
        >>> {"alpha_mean", "group_size", "fit_p", "misfit", "misfit_reason"} <= set(rows.columns)
        True
    """
    rows: list[dict[str, Any]] = []
    for result in _fits(data, dimension, method, seed, **fit_options):
        rows += item_fit_check(result, seed=seed, level=level)[0]
    return pl.DataFrame(rows, infer_schema_length=None)


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
