"""What every re-estimation thread shares: the keys' states, the fits, publishing and the
events (:class:`RefreshBase`, the base of :class:`~services.runtime.refresher.Refresher`).

Nothing here starts a thread, touches a database or the web: the fits are
:func:`adaptive.estimation.streaming.fit_snapshot`, seeded by the judgment count, and a
snapshot is stored by the ``publish_fn`` the refresher is handed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from adaptive.estimation.compile_clock import CompileClock
from adaptive.estimation.skill_update import SkillBase
from adaptive.estimation.snapshot import FAST, FULL, Snapshot
from adaptive.estimation.streaming import Source, fit_snapshot, stream_config, with_diagnostics
from services.runtime.refit_checks import compiled_event
from services.runtime.refresh_event import RefreshEvent
from services.runtime.schedule import KeyState
from services.settings import Settings


class RefreshBase:
    """The state of the keys (e.g. (project, dimension)) a refresher re-estimates, and what
    it did: the fits' freshness and recent events.

    Args:
        load_fn: key -> :class:`Source` (current judgments), or None when there are none.
        publish_fn: (key, snapshot) -> version; stores the snapshot, or returns None when
            the store keeps a newer snapshot of that method instead (another replica's).
        latest_fn: key -> newest stored fast :class:`Snapshot` or None (restores
            warm starts after a restart instead of refitting from scratch).
        config: the service's :class:`~services.settings.Settings` (re-estimation fields).
    """

    def __init__(
        self,
        *,
        load_fn: Callable[[Any], Source | None],
        publish_fn: Callable[[Any, Snapshot], int | None],
        latest_fn: Callable[[Any], Snapshot | None],
        config: Settings | None = None,
    ) -> None:
        self.load_fn = load_fn
        self.publish_fn = publish_fn
        self.latest_fn = latest_fn
        self.config = config if config is not None else Settings()
        self._states: dict[Hashable, KeyState] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._item_threads: list[threading.Thread] = []
        self._connect_lock = threading.Lock()  # joins Ray once (refits="ray")
        #: (seconds from accepted batch to a published snapshot that includes it, method)
        self.freshness: list[tuple[float, str]] = []
        #: recent events, newest last (bounded)
        self.events: list[RefreshEvent] = []
        self.busy = False

    def notify(self, key: Hashable, *, last_seq: int = 0, accepted_at: float | None = None) -> None:
        """A batch up to ``last_seq`` was stored for ``key``: refit soon (never blocks)."""
        with self._wake:
            state = self._states.setdefault(key, KeyState())
            state.pending.append(
                (last_seq, time.monotonic() if accepted_at is None else accepted_at)
            )
            state.dirty = True
            self._wake.notify_all()

    def idle(self) -> bool:
        with self._lock:
            return not self.busy and not any(
                s.dirty or s.items_running for s in self._states.values()
            )

    def wait_idle(self, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.idle():
                return True
            time.sleep(0.01)
        return False

    def _record(self, event: RefreshEvent) -> None:
        with self._lock:
            self.events.append(event)
            del self.events[:-200]

    def _state(self, key: Hashable) -> KeyState:
        with self._lock:
            return self._states.setdefault(key, KeyState())

    def _publish(self, key: Hashable, snapshot: Snapshot, started: float) -> int | None:
        version = self.publish_fn(key, snapshot)
        now = time.monotonic()
        if version is None:
            self._record(
                RefreshEvent(
                    key,
                    "superseded",
                    snapshot.method,
                    0,
                    snapshot.num_judgments,
                    now - started,
                    "the store holds a snapshot of newer judgments (another replica's)",
                )
            )
            return None
        state = self._state(key)
        with self._lock:
            if snapshot.last_seq >= state.published_seq:
                state.published_seq = snapshot.last_seq
                state.published_judgments = snapshot.num_judgments
            done = [p for p in state.pending if p[0] <= snapshot.last_seq]
            state.pending = [p for p in state.pending if p[0] > snapshot.last_seq]
            self.freshness.extend((now - at, snapshot.method) for _, at in done)
            del self.freshness[:-100_000]
        self._record(
            RefreshEvent(
                key, "published", snapshot.method, version, snapshot.num_judgments, now - started
            )
        )
        return version

    def _fast_fit(
        self, source: Source, previous: Snapshot | None, key: Hashable = None
    ) -> tuple[Snapshot, SkillBase | None]:
        """A full MAP + Laplace fit of every judgment, warm-started from ``previous``."""
        options = {"num_draws": self.config.fast_num_draws}
        return self._fit(source, "fast", options, previous, with_base=True, key=key)  # type: ignore[return-value]

    def _fit(
        self,
        source: Source,
        method: str,
        options: dict[str, Any],
        previous: Snapshot | None = None,
        *,
        with_base: bool = False,
        key: Hashable = None,
    ) -> Snapshot | tuple[Snapshot, SkillBase | None]:
        """Fit every judgment of ``source`` with ``method`` (seeded by the judgment count):
        :func:`fit_source` here, or as a Ray task with ``refits="ray"``
        (:func:`services.runtime.ray_fits.fit_on_ray`: the same result, and the node it
        ran on as ``diagnostics["fitted_on"]``). A compile past
        :data:`~services.runtime.refit_checks.COMPILE_EVENT_SECONDS` is recorded under ``key``."""
        result = self._dispatch(source, method, options, previous, with_base)
        if key is not None:
            snapshot = result if isinstance(result, Snapshot) else result[0]
            event = compiled_event(key, snapshot, FULL if method == "nuts" else FAST)
            if event is not None:
                self._record(event)
        return result

    def _dispatch(
        self,
        source: Source,
        method: str,
        options: dict[str, Any],
        previous: Snapshot | None,
        with_base: bool,
    ) -> Snapshot | tuple[Snapshot, SkillBase | None]:
        cfg = self.config
        kwargs: dict[str, Any] = {
            "source": source,
            "method": method,
            "options": options,
            "previous": previous,
            "with_base": with_base,
            "seed": (cfg.seed + source.num_judgments) % 2**31,
            "cell_effect": cfg.cell_effect,
            "max_draws": cfg.snapshot_max_draws,
        }
        if cfg.refits == "ray":
            from services.runtime.ray_fits import fit_on_ray

            self._join_ray()
            return fit_on_ray(fit_source, **kwargs)
        return fit_source(**kwargs)

    def fit_parallel(self) -> int:
        """Keys fitted at once: ``refit_parallel``, or by default 1 with ``refits="local"``
        and the Ray cluster's CPUs with ``refits="ray"`` (joining it)."""
        cfg = self.config
        if cfg.refits != "ray":
            return max(1, cfg.refit_parallel)
        from services.runtime.ray_fits import cluster_cpus

        self._join_ray()
        return cfg.refit_parallel or cluster_cpus()

    def _join_ray(self) -> None:
        """Join the Ray cluster of ``ray_address`` once (:func:`services.runtime.ray_fits.connect`)."""
        from services.runtime.ray_fits import connect

        cfg = self.config
        with self._connect_lock:
            connect(cfg.ray_address, num_cpus=cfg.refit_parallel or None)


def fit_source(
    *,
    source: Source,
    method: str,
    options: dict[str, Any],
    previous: Snapshot | None,
    with_base: bool,
    seed: int,
    cell_effect: bool,
    max_draws: int,
) -> Snapshot | tuple[Snapshot, SkillBase | None]:
    """The refresher's fit: every judgment of ``source`` with ``method`` (``"fast"`` or
    ``"nuts"``, its ``options``), warm-started from ``previous``; a module-level function of
    picklable arguments, so that a Ray worker runs the same one
    (:mod:`services.runtime.ray_fits`).

    Returns:
        the snapshot (at most ``max_draws`` draws), and with ``with_base`` its
        :class:`SkillBase` (None when the fit cannot serve as one). The snapshot's
        diagnostics say how long the fit compiled (:meth:`CompileClock.summary`:
        ``compile_s``, ``compiles``, ``longest_compile``).
    """
    with CompileClock() as clock:
        result = fit_snapshot(
            source.judgments,
            dimension=source.dimension,
            systems=source.systems,
            config=stream_config(method, cell_effect=cell_effect, seed=seed, **options),
            last_seq=source.last_seq,
            previous=previous,
            max_draws=max_draws,
            with_base=with_base,
        )
    return with_diagnostics(result, **clock.summary())


__all__ = ["RefreshBase", "RefreshEvent", "fit_source"]
