"""Answers computed on a background thread, one job at a time, and cached per judgments
seen and options: pruning (fast item fits per tier) and the default model's significance
table. A request that finds its job still running gets :class:`Pending` (a 409)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from adaptive.streaming import Source

#: results kept (oldest dropped first)
MAX_JOBS = 64


@dataclass(frozen=True)
class Pending:
    """A result still being computed on a background thread."""

    num_judgments: int


def prune_rows(
    source: Source, keep: int | None, target_se_ratio: float | None, num_tiers: int, seed: int
) -> Any:
    from adaptive.pruning import PruneConfig
    from evalset.pruning import prune_judgments
    from services.schemas import PruningPublic, PruningRow

    config = PruneConfig(keep=keep, target_se_ratio=target_se_ratio, num_tiers=num_tiers, seed=seed)
    rows = prune_judgments(source.judgments, config, dimension=source.dimension)
    return PruningPublic(
        dimension=source.dimension,
        num_judgments=source.num_judgments,
        rows=[PruningRow(**row) for row in rows],
    )


def significance_table(source: Source, adjust: str, alpha: float, level: float) -> Any:
    """``evalset.significance`` of the stored judgments: the rows the command line and Python
    give for the same judgments (the default model fitted afresh, the use-case layer's seed)."""
    import evalset
    from services.schemas import SignificanceTablePublic, SignificanceTableRow

    frame = evalset.significance(
        source.judgments.drop("seq"),
        dimension=source.dimension,
        adjust=adjust,
        alpha=alpha,
        level=level,
    )
    rows = [
        {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
        for row in frame.to_dicts()
    ]
    return SignificanceTablePublic(
        dimension=source.dimension,
        num_judgments=source.num_judgments,
        model="default",
        rows=[SignificanceTableRow.model_validate(row) for row in rows],
    )


@dataclass
class BackgroundJobs:
    """One worker thread and the jobs it ran or runs, by key."""

    _pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="answers")
    )
    _jobs: dict[tuple[Any, ...], Future[Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def result(
        self, key: tuple[Any, ...], num_judgments: int, fn: Callable[..., Any], *args: Any
    ) -> Any:
        """``fn(*args)`` for ``key`` (project, dimension, the judgments' last sequence number,
        options), computed once; :class:`Pending` until it is done. Its exception, if any,
        is raised to every request that asks."""
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                job = self._pool.submit(fn, *args)
                self._jobs[key] = job
                while len(self._jobs) > MAX_JOBS:
                    self._jobs.pop(next(iter(self._jobs)))
        if not job.done():
            return Pending(num_judgments)
        return job.result()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
