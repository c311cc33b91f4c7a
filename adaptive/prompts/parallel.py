"""Fan independent folds out: serially, on a local Ray runtime, or on a Ray cluster.

The one module that imports Ray (a test enforces it). The pattern follows
Ray's own pattern pages: a pure function ``fn(shared, item)``, one
module-level ``@ray.remote`` task, the large shared input ``ray.put`` once,
results collected with ``ray.wait`` as they finish (no blocking ``ray.get``
on unfinished work). ``workers=1`` runs the same function with a plain loop,
so results are identical under the same seed; it is all that runs without Ray
(the ``ray`` extra).

Where Ray runs: an already initialised runtime is used as is; otherwise
``ray.init(address=RAY_ADDRESS)`` joins a cluster when that variable is
set, and starts a local runtime with ``workers`` CPUs when it is not. At
most ``workers`` tasks are in flight; the SPREAD strategy places them on
different nodes when a cluster has several.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import ray
except ModuleNotFoundError:  # without the `ray` extra, workers=1 runs and more raise
    ray = None  # type: ignore[assignment]

#: why more than one worker cannot run here
RAY_MISSING = (
    "running on several workers needs Ray: pip install 'adaptive-evalset[ray]' (or use 1 worker)"
)


@dataclass(frozen=True)
class MapInfo:
    """Where and how long each item ran (diagnostics, in item order)."""

    backend: str  # "serial" or "ray"
    workers: int
    seconds: float
    node_ids: list[str] = field(default_factory=list)
    node_ips: list[str] = field(default_factory=list)
    hostnames: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    item_seconds: list[float] = field(default_factory=list)


ProgressFn = Callable[[int, int], None]


if ray is not None:

    @ray.remote(num_cpus=1)
    def _run_item(
        fn: Callable[[Any, Any], Any], shared: Any, item: Any
    ) -> tuple[Any, str, str, str, int, float]:
        start = time.perf_counter()
        result = fn(shared, item)
        node = ray.get_runtime_context().get_node_id()
        # hosts that share a kernel (network namespaces, containers) differ by node IP, not name
        ip = ray.util.get_node_ip_address()
        return result, node, ip, socket.gethostname(), os.getpid(), time.perf_counter() - start


def _ensure_ray(workers: int) -> None:
    if ray is None:
        raise ModuleNotFoundError(RAY_MISSING, name="ray")
    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        # Ray lowers its workers' priority by default; folds are the job, not background work
        os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)


def map_items(
    fn: Callable[[Any, Any], Any],
    shared: Any,
    items: Sequence[Any],
    *,
    workers: int = 1,
    progress: ProgressFn | None = None,
) -> tuple[list[Any], MapInfo]:
    """``[fn(shared, item) for item in items]``, in parallel when ``workers > 1``.

    Args:
        fn: a pure, picklable (module-level) function.
        shared: the input every call needs; sent to the object store once.
        items: one entry per task (e.g. fold indices).
        workers: 1 runs serially in this process; more uses Ray.
        progress: called with (done, total) after each finished item.

    Returns:
        (results in item order, :class:`MapInfo`).
    """
    start = time.perf_counter()
    total = len(items)
    if workers <= 1:
        results, secs = [], []
        pid = os.getpid()
        for i, item in enumerate(items):
            t0 = time.perf_counter()
            results.append(fn(shared, item))
            secs.append(time.perf_counter() - t0)
            if progress is not None:
                progress(i + 1, total)
        info = MapInfo(
            backend="serial",
            workers=1,
            seconds=time.perf_counter() - start,
            node_ids=["local"] * total,
            node_ips=["local"] * total,
            hostnames=[socket.gethostname()] * total,
            pids=[pid] * total,
            item_seconds=secs,
        )
        return results, info

    _ensure_ray(workers)
    shared_ref = ray.put(shared)
    fn_ref = ray.put(fn)
    # each task is named after its item ("fold_task[3]") in the Ray dashboard and state API
    name = getattr(fn, "__name__", "item")
    slots: list[Any] = [None] * total
    index_of: dict[Any, int] = {}
    pending: list[Any] = []
    next_item = 0
    done = 0
    while next_item < total or pending:
        while next_item < total and len(pending) < workers:
            task = _run_item.options(scheduling_strategy="SPREAD", name=f"{name}[{next_item}]")
            ref = task.remote(fn_ref, shared_ref, items[next_item])
            index_of[ref] = next_item
            pending.append(ref)
            next_item += 1
        ready, pending = ray.wait(pending, num_returns=1)
        for ref, value in zip(ready, ray.get(ready)):
            slots[index_of.pop(ref)] = value
            done += 1
            if progress is not None:
                progress(done, total)
    info = MapInfo(
        backend="ray",
        workers=workers,
        seconds=time.perf_counter() - start,
        node_ids=[s[1] for s in slots],
        node_ips=[s[2] for s in slots],
        hostnames=[s[3] for s in slots],
        pids=[s[4] for s in slots],
        item_seconds=[s[5] for s in slots],
    )
    return [s[0] for s in slots], info


def serial_info(seconds: float, item_seconds: Sequence[float]) -> MapInfo:
    """The :class:`MapInfo` of items run in this process (e.g. batched by the caller)."""
    total = len(item_seconds)
    return MapInfo(
        backend="serial",
        workers=1,
        seconds=seconds,
        node_ids=["local"] * total,
        node_ips=["local"] * total,
        hostnames=[socket.gethostname()] * total,
        pids=[os.getpid()] * total,
        item_seconds=list(item_seconds),
    )


def map_groups(
    fn: Callable[[Any, list[Any]], list[Any]],
    shared: Any,
    items: Sequence[Any],
    *,
    workers: int = 1,
    progress: ProgressFn | None = None,
) -> tuple[list[Any], MapInfo]:
    """``fn(shared, group)`` over consecutive groups of ``items``, one group per worker.

    For work that runs better together on one machine (LOCO folds share one compiled
    fit): ``workers`` groups of nearly equal size (one with ``workers=1``, run in this
    process), each a Ray task placed by :func:`map_items` (SPREAD across nodes).

    Returns:
        (``fn``'s results flattened, in item order; :class:`MapInfo` with one entry per
        item: its group's node, process and seconds divided by the group's size).
    """
    if not items:
        return [], serial_info(0.0, [])
    groups = [
        list(g) for g in np.array_split(np.arange(len(items)), max(1, min(workers, len(items))))
    ]
    groups_items = [[items[i] for i in g] for g in groups]
    total = len(items)

    def group_progress(done: int, num_groups: int) -> None:
        if progress is not None:
            progress(sum(len(g) for g in groups[:done]), total)

    out, info = map_items(fn, shared, groups_items, workers=workers, progress=group_progress)
    results = [r for group in out for r in group]
    if len(results) != total:
        raise RuntimeError(f"a group returned {len(results)} results for {total} items")

    def per_item(values: list[Any]) -> list[Any]:
        return [v for v, g in zip(values, groups) for _ in g]

    return results, MapInfo(
        backend=info.backend,
        workers=info.workers,
        seconds=info.seconds,
        node_ids=per_item(info.node_ids),
        node_ips=per_item(info.node_ips),
        hostnames=per_item(info.hostnames),
        pids=per_item(info.pids),
        item_seconds=[s / len(g) for s, g in zip(info.item_seconds, groups) for _ in g],
    )


def shutdown() -> None:
    """Stop the Ray runtime this process started (no-op when none is running)."""
    if ray is not None and ray.is_initialized():
        ray.shutdown()
