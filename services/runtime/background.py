"""Answers computed on a background thread, one job at a time, and cached per judgments
seen and options: pruning (fast item fits per tier), the default model's significance
table and item fit (one fit of the default model shared by both). A request that finds its
job still running gets :class:`Pending` (a 409).

A job's key is (project, dimension, the judgments seen, options...), the judgments seen
being :func:`seen`: the last sequence number and the count, since on PostgreSQL a lower
sequence number can commit late and add judgments without moving the last one."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from adaptive.estimation.streaming import Source

#: results kept (oldest dropped first)
MAX_JOBS = 64


@dataclass(frozen=True)
class Pending:
    """A result still being computed on a background thread; ``previous``: the newest
    finished answer to the same question for fewer judgments (``previous_judgments``), if
    any, for a page that shows it meanwhile (the routes answer 409: they promise the
    answer for the judgments stored now)."""

    num_judgments: int
    previous: Any = None
    previous_judgments: int | None = None


def prune_rows(
    source: Source, keep: int | None, target_se_ratio: float | None, num_tiers: int, seed: int
) -> Any:
    from adaptive.prompts.pruning import PruneConfig
    from evalset.pruning import prune_judgments
    from services.schemas import PruningPublic, PruningRow

    config = PruneConfig(keep=keep, target_se_ratio=target_se_ratio, num_tiers=num_tiers, seed=seed)
    rows = prune_judgments(source.judgments, config, dimension=source.dimension)
    return PruningPublic(
        dimension=source.dimension,
        num_judgments=source.num_judgments,
        rows=[PruningRow(**row) for row in rows],
    )


def seen(source: Source) -> tuple[int, int]:
    """The judgments ``source`` holds, as a job's key says it: its last sequence number and
    its count (a late commit of a lower number adds judgments, not a newer last one)."""
    return (source.last_seq, source.num_judgments)


def significance_fits(source: Source) -> Any:
    """The default model's fits of the stored judgments, as ``evalset.significance`` makes
    them (its method and seed): fitted once per judgments seen, whatever rows are asked."""
    from evalset import significance_fits as fits
    from evalset.verdicts import DEFAULT_METHOD, DEFAULT_SEED

    judgments = source.judgments.drop("seq")
    return fits(judgments, dimension=source.dimension, method=DEFAULT_METHOD, seed=DEFAULT_SEED)


def default_fits(jobs: BackgroundJobs, project_id: str, source: Source) -> Any:
    """:func:`significance_fits` of ``source`` from ``jobs``, or :class:`Pending`: one job per
    judgments seen, which ``GET .../significance?model=default`` and ``GET .../item-fit`` share
    (the second answer finds the fit the first one made)."""
    key = (project_id, source.dimension, seen(source), "significance")
    return jobs.result(key, source.num_judgments, significance_fits, source)


def default_fits_now(jobs: BackgroundJobs, project_id: str, source: Source) -> Any:
    """:func:`default_fits`'s fits, for a job on the worker thread: the finished fit if there
    is one, else fitted here and kept where :func:`default_fits` finds it."""
    key = (project_id, source.dimension, seen(source), "significance")
    return jobs.shared(key, source.num_judgments, significance_fits, source)


def significance_table(source: Source, fits: Any, adjust: str, alpha: float, level: float) -> Any:
    """The rows ``evalset significance --format json`` gives for the same judgments (NaN as
    null), from :func:`significance_fits`'s fits."""
    from evalset.verdicts import significance_rows
    from services.schemas import SignificanceTablePublic, SignificanceTableRow

    rows = significance_rows(fits, adjust=adjust, alpha=alpha, level=level)
    return SignificanceTablePublic(
        dimension=source.dimension,
        num_judgments=source.num_judgments,
        model="default",
        rows=[
            SignificanceTableRow.model_validate(
                {
                    k: None if isinstance(v, float) and not math.isfinite(v) else v
                    for k, v in row.items()
                }
            )  # fmt: skip
            for row in rows
        ],
    )


def elo_rows(source: Source, options: dict[str, Any]) -> Any:
    """``evalset.elo`` of the stored judgments (the command line's rows for them)."""
    import evalset
    from services.schemas import EloPublic, EloRow

    board = evalset.elo(source.judgments.drop("seq"), dimension=source.dimension, **options)
    return EloPublic(
        dimension=source.dimension,
        num_judgments=source.num_judgments,
        rows=[EloRow.model_validate(r) for r in board.drop("dimension").to_dicts()],
    )


@dataclass
class BackgroundJobs:
    """One worker thread and the jobs it ran or runs, by key."""

    _pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="answers")
    )
    _jobs: dict[tuple[Any, ...], Future[Any]] = field(default_factory=dict)
    #: each job's question (its key but the judgments seen) and its judgments
    _groups: dict[tuple[Any, ...], tuple[tuple[Any, ...], int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def result(
        self, key: tuple[Any, ...], num_judgments: int, fn: Callable[..., Any], *args: Any
    ) -> Any:
        """``fn(*args)`` for ``key`` (project, dimension, the judgments seen, options),
        computed once; :class:`Pending` until it is done. Its exception, if any, is raised
        to the request that finds it, and the job is forgotten.

        A new job cancels the queued (not yet started) jobs of the same question (the key
        but the judgments seen): a client that asks again while judgments stream in does
        not queue a computation for each batch.
        """
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                group = _group(key)
                older = [
                    k for k, (g, n) in self._groups.items() if g == group and n <= num_judgments
                ]
                for old in older:
                    if self._jobs[old].cancel():  # queued: dropped; running: kept
                        del self._jobs[old], self._groups[old]
                self._groups[key] = (group, num_judgments)
                job = self._pool.submit(fn, *args)
                self._jobs[key] = job
                self._trim()
        if job.cancelled() or not job.done():  # cancelled: a newer question replaced it
            return self._pending(key, num_judgments)
        if job.exception() is not None:  # raised to this request; the next one tries again
            with self._lock:
                if self._jobs.get(key) is job:
                    del self._jobs[key]
                    self._groups.pop(key, None)
        return job.result()

    def shared(
        self, key: tuple[Any, ...], num_judgments: int, fn: Callable[..., Any], *args: Any
    ) -> Any:
        """``fn(*args)`` for ``key``, called by a job on the worker thread: the finished
        result of ``key``'s job if there is one, else computed here and kept under ``key``
        (in place of its job if that is queued behind this one), so a job that needs another
        job's answer neither waits for a request to queue it nor computes it twice."""
        with self._lock:
            job = self._jobs.get(key)
        if job is not None and job.done() and not job.cancelled() and job.exception() is None:
            return job.result()
        value = fn(*args)
        done: Future[Any] = Future()
        done.set_result(value)
        with self._lock:
            old = self._jobs.get(key)
            if old is None or old.done() or old.cancel():  # not running: one worker, this job
                self._jobs[key] = done
                self._groups[key] = (_group(key), num_judgments)
                self._trim()
        return value

    def _trim(self) -> None:
        """Drop the oldest jobs beyond :data:`MAX_JOBS` (not run if still queued); under the lock."""
        while len(self._jobs) > MAX_JOBS:
            oldest = next(iter(self._jobs))
            self._jobs.pop(oldest).cancel()
            self._groups.pop(oldest, None)

    def _pending(self, key: tuple[Any, ...], num_judgments: int) -> Pending:
        """:class:`Pending`, with the newest finished answer to the same question."""
        group = _group(key)
        best: tuple[int, Any] | None = None
        with self._lock:
            done = [
                (n, self._jobs[k])
                for k, (g, n) in self._groups.items()
                if g == group and k != key and self._jobs[k].done()
            ]
        for n, job in done:
            if job.cancelled() or job.exception() is not None:
                continue
            if best is None or n > best[0]:
                best = (n, job.result())
        if best is None:
            return Pending(num_judgments)
        return Pending(num_judgments, previous=best[1], previous_judgments=best[0])

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _group(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A job's question: its key but the judgments seen (its third element)."""
    return (key[0], key[1], *key[3:])


# ---------------------------------------------------------------- the analyses requests ask for


def pruning(
    jobs: BackgroundJobs,
    project_id: str,
    source: Source | None,
    *,
    keep: int | None,
    target_se_ratio: float | None,
    num_tiers: int,
    seed: int,
) -> Any:
    """Kept and dropped prompts per tier of ``source`` (a dimension's stored judgments), or
    :class:`Pending` while :func:`evalset.pruning.prune_judgments` runs.

    It fits item parameters per tier, which takes seconds (more on first use, when the fits
    compile), so it runs on a background thread, one job at a time, and the answer is kept
    per (judgments, options).

    Returns:
        A ``PruningPublic``, None when there are no judgments, or a :class:`Pending`.

    Raises:
        ValueError: the data cannot be pruned with these options (from the job).
    """
    if source is None:
        return None
    key = (project_id, source.dimension, seen(source), "pruning", keep, target_se_ratio, num_tiers)
    return jobs.result(
        key, source.num_judgments, prune_rows, source, keep, target_se_ratio, num_tiers, seed
    )


def elo(
    jobs: BackgroundJobs, project_id: str, source: Source | None, options: dict[str, Any]
) -> Any:
    """``evalset.elo`` of ``source``, or :class:`Pending` while it runs (its bootstrap refits
    every resample) on the background thread; None without judgments."""
    if source is None:
        return None
    key = (project_id, source.dimension, seen(source), "elo", tuple(sorted(options.items())))
    return jobs.result(key, source.num_judgments, elo_rows, source, options)


def significance(
    jobs: BackgroundJobs,
    project_id: str,
    source: Source | None,
    *,
    adjust: str,
    alpha: float,
    level: float,
) -> Any:
    """``evalset.significance`` of ``source`` (the command line's rows), or :class:`Pending`
    while the default model is fitted on a background thread.

    Returns:
        A ``SignificanceTablePublic``, None when there are no judgments, or a
        :class:`Pending`.
    """
    if source is None:
        return None
    fits = default_fits(jobs, project_id, source)
    if isinstance(fits, Pending):
        return fits
    return significance_table(source, fits, adjust, alpha, level)
