"""The graded-response analysis of a judgments file, for the command line: the fit's
configuration from a preset and the user's choices, one analysis per dimension, its rows
per prompt (:mod:`adaptive.estimation.pipeline`).

Example:
    >>> preset_config("paper", method="fast").likelihood
    'net'
"""

from __future__ import annotations

from adaptive.estimation.fitting import preset_config as preset_config
from adaptive.estimation.pipeline import analysis_item_rows as analysis_item_rows
from adaptive.estimation.pipeline import analyze as analyze

__all__ = ["analysis_item_rows", "analyze", "preset_config"]
