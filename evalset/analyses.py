"""The graded-response analysis of a judgments file, for the command line: the fit's
configuration from a preset and the user's choices, one analysis per dimension, its rows
per prompt (:mod:`adaptive.estimation.pipeline`); with a :class:`evalset.fit_cache.FitCache`,
an analysis fitted once serves every later command on the same judgments and settings
(``evalset significance`` then ``evalset items``).

Example:
    >>> preset_config("paper", method="fast").likelihood
    'net'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from adaptive.estimation.fitting import preset_config as preset_config
from adaptive.estimation.pipeline import analysis_item_rows as analysis_item_rows
from adaptive.estimation.pipeline import analyze as fit_analysis
from adaptive.prompts.redundancy import DEFAULT_THRESHOLD

if TYPE_CHECKING:
    import polars as pl

    from adaptive.estimation.fitting import FitConfig
    from adaptive.estimation.pipeline import Analysis
    from evalset.fit_cache import FitCache

__all__ = ["analysis_item_rows", "analyze", "fit_analysis", "preset_config"]


def analyze(
    judgments: pl.DataFrame,
    *,
    dimension: str | None = None,
    config: FitConfig | None = None,
    group_redundant: bool = True,
    group_threshold: float = DEFAULT_THRESHOLD,
    cache: FitCache | None = None,
    log: Callable[[str], None] | None = None,
) -> Analysis:
    """:func:`adaptive.estimation.pipeline.analyze` of one dimension, from ``cache`` when it
    holds the analysis of the same rows of that dimension with the same settings (and code).

    Args:
        judgments: validated judgments in arrival order (:func:`evalset.read`).
        dimension: which one (None: the only one).
        config: the fit's configuration (default: the default model's).
        group_redundant, group_threshold: group prompts whose judgments correlate above it.
        cache: where fits are kept (:func:`evalset.fit_cache.default_cache`; None: fit).
        log: told when the fit came from the cache.
    """
    import polars as pl

    from adaptive.estimation.fitting import FitConfig
    from evalset.fit_cache import config_repr, fetch, frame_digest

    config = FitConfig() if config is None else config
    options: dict[str, Any] = {
        "group_redundant": group_redundant,
        "group_threshold": group_threshold,
    }
    dims = judgments["dimension"].unique(maintain_order=True).to_list()
    if dimension is None and len(dims) == 1:
        dimension = dims[0]
    if dimension is None or dimension not in dims:  # the pipeline's error
        cache = None

    def parts() -> tuple[Any, ...]:
        rows = judgments.filter(pl.col("dimension") == dimension)
        # the progress bar does not change the fit
        setting = config_repr(config, nuts=config.nuts.replace(progress=False))
        return frame_digest(rows), dimension, setting, config.seed, sorted(options.items())

    return fetch(
        cache,
        "analysis",
        parts,
        lambda: fit_analysis(judgments, dimension=dimension, config=config, **options),
        log=log,
    )
