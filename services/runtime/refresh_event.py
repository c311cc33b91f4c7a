"""One thing the re-estimation worker did: :class:`RefreshEvent` (its own module, so that
what builds events, :mod:`services.runtime.refit_checks`, and the worker that records them,
:mod:`services.runtime.refresh_base`, do not import each other)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True)
class RefreshEvent:
    """One thing the worker did (returned diagnostics; the service decides what to log)."""

    key: Hashable
    # "published", "superseded" (the store kept a newer one), "rejected", "failed",
    # "skipped", "items" (a new base fitted), "prepared" (the next padded size compiled),
    # "compared" (a full refit against the live snapshot), "compiled" (a slow compile)
    kind: str
    method: str
    version: int
    num_judgments: int
    seconds: float
    detail: str = ""


__all__ = ["RefreshEvent"]
