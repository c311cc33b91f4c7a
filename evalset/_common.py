"""What every notebook function shares: reading judgments, the method names, an example campaign."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from adaptive.core.data import read_judgments

# NUTS's run sizes, one definition for every door (re-exported for the command line)
from adaptive.estimation.run_sizes import NUTS_DRAWS as NUTS_DRAWS
from adaptive.estimation.run_sizes import NUTS_MIN_ESS as NUTS_MIN_ESS
from adaptive.estimation.run_sizes import NUTS_WARMUP as NUTS_WARMUP

METHOD_ALIASES = {"fast": "fast", "laplace": "fast", "nuts": "nuts"}


def _method(method: str) -> str:
    try:
        return METHOD_ALIASES[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; expected 'fast' or 'nuts'") from None


def read(data: Any, *, column_map: Any = None) -> pl.DataFrame:
    """Validated judgments from a polars/pandas DataFrame or a file (see :mod:`adaptive.core.data`).

    ``column_map`` names the file's own columns (and values) for the schema's, as
    ``--map`` does on the command line: ``{"item_id": "idx", "system_a": "model_1"}``,
    ``"item_id=idx,winner:1=a"`` or a mapping file (:mod:`adaptive.core.column_map`).

    Example:
        >>> import pandas as pd
        >>> read(pd.DataFrame({"item_id": ["p1"], "system_a": ["x"], "system_b": ["y"],
        ...     "annotator_id": ["w1"], "winner": ["B"]}))["winner"].to_list()
        ['b']
    """
    if (
        column_map is None
        and isinstance(data, pl.DataFrame)
        and "row" in data.columns
        and "dimension" in data.columns
    ):
        return data  # already validated
    return read_judgments(data, column_map=column_map)


def _dims(judgments: pl.DataFrame, dimension: str | None) -> list[str]:
    if dimension is not None:
        return [dimension]
    return judgments["dimension"].unique(maintain_order=True).to_list()


def example(num_systems: int = 4, num_prompts: int = 30, *, seed: int = 0) -> pl.DataFrame:
    """A small simulated campaign (all pairs, 2 annotators per cell; later systems are better).

    Example:
        >>> example(num_systems=3, num_prompts=5).height
        30
    """
    rng = np.random.default_rng(seed)
    skill = np.linspace(0.0, 3.0, num_systems)
    rows = []
    for a in range(num_systems):
        for b in range(a + 1, num_systems):
            for p in range(num_prompts):
                for w in range(2):
                    d = skill[b] - skill[a] + rng.normal(0, 0.3)
                    probs = np.array([np.exp(-d), 0.6, np.exp(d)])
                    winner = rng.choice(["a", "tie", "b"], p=probs / probs.sum())
                    first = "a" if rng.random() < 0.5 else "b"
                    rows.append((f"p{p:03d}", f"s{a}", f"s{b}", f"w{(p + w) % 5}", winner, first))
    frame = pl.DataFrame(
        rows,
        schema=["item_id", "system_a", "system_b", "annotator_id", "winner", "shown_first"],
        orient="row",
    )
    return read_judgments(frame)
