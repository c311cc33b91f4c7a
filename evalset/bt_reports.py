"""The command line's Bradley-Terry reports (``evalset bt``, ``annotators``, ``damr``): each
dimension's fit, its rows by report, the annotator screen and the tutors' ranking from graded
labels (:mod:`adaptive.leaderboards.bt`, :mod:`adaptive.leaderboards.damr`,
:mod:`adaptive.annotation.annotators`).

Example:
    >>> import polars as pl
    >>> r = pl.DataFrame({"item_id": ["d1", "d2"], "system": ["T", "T"],
    ...     "dimension": ["Tutor_Tone", "Tutor_Tone"], "label": ["Encouraging", "Neutral"]})
    >>> damr_rows(r)[0]["damr"], damr_rows(r, tone="non-offensive")[0]["damr"]
    (50.0, 100.0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

    from adaptive.annotation.annotators import ScreenConfig
    from adaptive.leaderboards.bt import BTConfig, BTFit

__all__ = [
    "anchored_rows",
    "damr_rows",
    "fit_dimension",
    "flagged_by_screen",
    "ranked_abilities",
    "read_ratings",
    "report_rows",
    "screen_annotators",
    "to_pairwise",
    "tutor_judgments",
]


def fit_dimension(
    judgments: pl.DataFrame, dimension: str, config: BTConfig, weight: Any = None
) -> BTFit:
    """One dimension's Bradley-Terry fit (:func:`adaptive.leaderboards.bt.fit_dimension`)."""
    from adaptive.leaderboards import bt

    return bt.fit_dimension(judgments, dimension, config, weight=weight)


def screen_annotators(
    judgments: pl.DataFrame, config: ScreenConfig
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per annotator: position bias and agreement, with flags and reasons, and the screen's
    notes (:func:`adaptive.annotation.annotators.screen_annotators`)."""
    from adaptive.annotation import annotators

    return annotators.screen_annotators(judgments, config)


def anchored_rows(fit: Any, reference: str | None) -> list[dict[str, Any]]:
    """Pooled abilities sum-to-zero, or relative to ``reference``; the ``scale`` column says
    which. Abilities are identified only up to a constant: unanchored, every interval
    carries that constant's uncertainty while the differences are tight."""

    from adaptive.leaderboards import bt

    rows = bt.ability_rows(fit)
    names = [r["system"] for r in rows]
    if reference is not None and reference not in names:
        raise ValueError(f"reference system {reference!r} not in {names}")
    if fit.posterior is None:  # mle: the pinned system is the reference already
        pinned = next(r["system"] for r in rows if r.get("reference"))
        for r in rows:
            r["scale"] = f"relative to {pinned}"
        return sorted(rows, key=lambda r: -r["mean"])
    draws = fit.ability_draws()
    if reference is None:
        draws = draws - draws.mean(axis=1, keepdims=True)
        scale = "sum-to-zero"
    else:
        draws = draws - draws[:, [names.index(reference)]]
        scale = f"relative to {reference}"
    low, high = bt.hdi(draws, fit.config.prob)
    for i, r in enumerate(rows):
        r.update(
            mean=float(draws[:, i].mean()),
            sd=float(draws[:, i].std(ddof=1)),
            ci_low=float(low[i]),
            ci_high=float(high[i]),
            p_positive=float((draws[:, i] > 0).mean()),
            scale=scale,
        )
    return sorted(rows, key=lambda r: (r["dimension"], -r["mean"]))


def report_rows(
    fits: list[Any], report: str, *, by: str, reference: str | None = None
) -> list[dict[str, Any]]:
    """The rows of one of :data:`REPORTS` over the dimensions' fits (pooled abilities
    anchored as :func:`anchored_rows` says)."""
    from adaptive.leaderboards import bt

    if report == "abilities":
        if by == "pooled":
            return [r for f in fits for r in anchored_rows(f, reference)]
        return [r for f in fits for r in bt.ability_rows(f)]
    if report == "summary":
        return bt.summary_rows(fits)
    if report == "differences":
        return [r for f in fits for r in bt.difference_rows(f)]
    if report == "intercepts":
        return [r for f in fits for r in bt.intercept_rows(f)]
    return bt.diagnostics_rows(fits)


def flagged_by_screen(
    judgments: pl.DataFrame, *, seed: int, assume_a_first: bool
) -> tuple[list[str], dict[str, Any]]:
    """The annotators the fast screen flags (position bias or disagreement), and its notes."""
    from adaptive.annotation.annotators import ScreenConfig, flagged_annotators

    rows, info = screen_annotators(
        judgments, ScreenConfig(method="laplace", seed=seed, assume_a_first=assume_a_first)
    )
    return flagged_annotators(rows), info


def read_ratings(
    path: str, *, subset: str = "all", items: str | None = None, dimension: str | None = None
) -> pl.DataFrame:
    """Graded tutor labels (MRBench's ratings), only ``dimension``'s when one is named."""
    from adaptive.leaderboards import damr

    ratings: pl.DataFrame = damr.read_ratings(path, subset=subset, items=items)
    if dimension:
        ratings = ratings.filter(ratings["dimension"] == dimension)
    return ratings


def to_pairwise(ratings: pl.DataFrame, *, weighting: str = "per_label") -> pl.DataFrame:
    """Graded labels as pairwise judgments (:func:`adaptive.leaderboards.damr.to_pairwise`)."""
    from adaptive.leaderboards import damr

    return damr.to_pairwise(ratings, weighting=weighting)


def damr_rows(
    ratings: pl.DataFrame, *, tone: str = "encouraging", compare_paper: bool = False
) -> list[dict[str, Any]]:
    """The desired-annotation match rate per tutor and dimension; ``tone="non-offensive"``
    also counts a Neutral Tutor_Tone as desired; ``compare_paper`` adds MRBench Table 3."""
    from adaptive.leaderboards import damr

    desired = {"Tutor_Tone": ("Encouraging", "Neutral")} if tone == "non-offensive" else None
    rows = damr.damr(ratings, desired=desired)
    return damr.compare_with_paper(rows) if compare_paper else rows


def tutor_judgments(ratings: pl.DataFrame, *, weighting: str) -> tuple[pl.DataFrame, np.ndarray]:
    """The labels' pairwise judgments, validated, and each one's weight."""
    from adaptive.core.data import validate_judgments
    from adaptive.leaderboards import damr

    pairs = damr.to_pairwise(ratings, weighting=weighting)
    judgments = validate_judgments(pairs, source="<pairwise from ratings>")
    return judgments, damr.pairwise_weights(pairs)


def ranked_abilities(
    judgments: pl.DataFrame, dimension: str, config: BTConfig, weight: Any = None
) -> list[dict[str, Any]]:
    """One dimension's Bradley-Terry abilities, best first."""
    from adaptive.leaderboards import bt

    fit = bt.fit_dimension(judgments, dimension, config, weight=weight)
    return sorted(bt.ability_rows(fit), key=lambda r: -r["mean"])
