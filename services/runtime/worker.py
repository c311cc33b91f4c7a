"""Re-estimation in a process of its own (``EVALSET_WORKER=process``).

In the API process a fit competes with the request threads for the GIL: tracing
and compiling a new shape bucket holds it for seconds, and on a 2-core machine
the requests wait behind it. Here the worker is a child process with its own
store connection and its own :class:`~services.runtime.state.ServiceState` (thread
mode); to the API process it is a :class:`~services.runtime.supervisor.Notifier`, built
by ``create_app`` and supervised by
:class:`~services.runtime.supervisor.WorkerSupervisor`. The API process only sends it
``(project, dimensions, last_seq, accepted_at)`` over a pipe after each stored batch;
answers are read from the snapshots the worker stores, as before. The child dies with its parent
(``PR_SET_PDEATHSIG`` on Linux) and is started with ``spawn`` (JAX and forked
threads do not mix).

The child also keeps off the request path's CPU (:func:`yield_cpu`): a fast fit of
the default model (with its prompt-by-comparison effect) takes seconds and XLA
spreads it over every core, so without limits it took both cores of a 2-core
machine and the POST p99 went past 100 ms at 500 judgments/s. It runs on all
CPUs but one (``worker_cpus``), at a lower priority (``worker_nice``) and under
``SCHED_BATCH`` (a CPU-bound process that does not preempt request threads on
wake-up).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import threading
from multiprocessing.connection import Connection

from services.jax_cache import configure_jax
from services.runtime.state import ServiceState
from services.settings import Settings

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def worker_cpu_set(available: set[int], worker_cpus: int) -> set[int]:
    """The CPUs the worker may use: ``worker_cpus`` of them (0: all but one), at least one.

    The highest-numbered ones, so the request threads keep CPU 0 to themselves on a
    2-core machine.

    Example:
        >>> sorted(worker_cpu_set({0, 1}, 0)), sorted(worker_cpu_set({0, 1, 2, 3}, 2))
        ([1], [2, 3])
    """
    cpus = sorted(available)
    n = worker_cpus if worker_cpus > 0 else len(cpus) - 1
    return set(cpus[-max(1, min(n, len(cpus))) :])


def yield_cpu(settings: Settings) -> None:
    """Leave the request threads a CPU: fewer CPUs, a lower priority, batch scheduling.

    Called in the child before JAX starts, so that XLA sizes its thread pools to the
    CPUs it may use and every thread it starts inherits all three (each is per thread
    on Linux). A platform without one of them skips it.
    """
    with contextlib.suppress(OSError):
        os.nice(settings.worker_nice)
    if hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            cpus = worker_cpu_set(os.sched_getaffinity(0), settings.worker_cpus)
            os.sched_setaffinity(0, cpus)
    if hasattr(os, "SCHED_BATCH"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def _main(settings_json: str, conn: Connection, parent_pid: int) -> None:
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before the line above
        return
    settings = Settings.model_validate_json(settings_json).model_copy(update={"worker": "thread"})
    yield_cpu(settings)  # before JAX is imported (on the first fit)
    configure_jax()
    state = ServiceState.create(settings)
    state.start(warm=False)  # it answers no requests
    try:
        while True:
            message = conn.recv()
            if message is None:
                break
            project_id, dimensions, last_seq, accepted_at = message
            state.notify(project_id, tuple(dimensions), last_seq, accepted_at=accepted_at)
    except (EOFError, OSError):
        pass  # the parent is gone
    finally:
        state.stop()


class WorkerProcess:
    """The parent's handle on the worker: start, notify, stop."""

    def __init__(self, settings: Settings) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._lock = threading.Lock()
        self.process = ctx.Process(
            target=_main,
            args=(settings.model_dump_json(), child, os.getpid()),
            name="evalset-worker",
            daemon=True,
        )

    def start(self) -> None:
        self.process.start()

    def alive(self) -> bool:
        return self.process.is_alive()

    def exitcode(self) -> int | None:
        return self.process.exitcode

    def notify(
        self, project_id: str, dimensions: tuple[str, ...], last_seq: int, accepted_at: float
    ) -> None:
        """Tell the worker a batch was stored (never blocks on a fit; drops it if the worker died:
        its replacement catches up from the store)."""
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._conn.send((project_id, list(dimensions), last_seq, accepted_at))

    def stop(self, timeout: float = 30.0) -> None:
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._conn.send(None)
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self._conn.close()


__all__ = ["WorkerProcess", "worker_cpu_set", "yield_cpu"]
