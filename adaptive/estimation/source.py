"""What a snapshot is fitted from: one key's validated judgments and the names around them.

:mod:`adaptive.estimation.streaming` fits a snapshot from a :class:`Source` and
:mod:`adaptive.estimation.skill_update` updates one from it; the worker's ``load_fn`` returns it.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Source:
    """Validated judgments of one key and the names around them (what the worker's ``load_fn`` returns)."""

    judgments: pl.DataFrame
    dimension: str
    systems: tuple[str, ...]
    num_judgments: int
    last_seq: int
