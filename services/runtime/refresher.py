"""The re-estimation worker: refits (project, dimension) keys on background threads.

After every stored batch the service calls :meth:`Refresher.notify`; a thread
runs one fast update per key with new judgments (a skill-only update on held
item parameters, or a full MAP + Laplace fit: :mod:`adaptive.estimation.streaming`,
:mod:`adaptive.estimation.skill_update`), another runs the scheduled NUTS refits. Nothing
here touches a database or the web: the refresher is handed a ``load_fn``
(judgments of a key), a ``publish_fn`` (store a snapshot, return its version)
and a ``latest_fn`` (the newest stored snapshot, for warm starts after a
restart). Its configuration is the service's :class:`~services.settings.Settings`.

When to do what is decided by the pure functions of :mod:`services.runtime.schedule`; the
keys' states, the fits and publishing are :class:`~services.runtime.refresh_base.RefreshBase`'s,
the scheduled full refits and their checks :class:`~services.runtime.full_refits.FullRefits`'.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from dataclasses import replace

import polars as pl

from adaptive.estimation.skill_update import SkillBase, skill_snapshot
from adaptive.estimation.snapshot import FAST, Snapshot
from adaptive.estimation.streaming import Source
from services.runtime.full_refits import FullRefits
from services.runtime.refit_checks import ITEMS
from services.runtime.refresh_base import RefreshEvent
from services.runtime.schedule import (
    PREPARE_SHARE,
    KeyState,
    Shape,
    next_key,
    next_shapes,
    padded,
    plan_update,
)
from services.runtime.shapes import fit_rows, grow_to


class Refresher(FullRefits):
    """Re-estimates keys (e.g. (project, dimension)) on background threads after each batch:
    a fast update per key with new judgments, the held items' refreshes, the scheduled NUTS
    refits, and the next padded shape's compilation (the arguments: :class:`RefreshBase`)."""

    # -- control

    def start(self) -> Refresher:
        if self._threads:
            return self
        self._stop.clear()
        # refit_parallel fast-update threads (one by default; with refits="ray", this joins
        # the cluster and defaults to its CPUs); next_key gives each a key no other is fitting
        self._threads = [
            threading.Thread(
                target=self._fast_loop, name="refresh-fast" + (f"-{i}" if i else ""), daemon=True
            )
            for i in range(self.fit_parallel())
        ]
        if self.config.nuts:
            self._threads.append(
                threading.Thread(target=self._nuts_loop, name="refresh-nuts", daemon=True)
            )
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        for thread in self._threads + self._item_threads:
            thread.join(timeout)
        self._threads = []
        self._item_threads = []

    def _next_dirty(self) -> Hashable | None:
        with self._wake:
            while not self._stop.is_set():
                key = next_key(
                    self._states,
                    now=time.monotonic(),
                    min_interval=self.config.fast_min_interval_seconds,
                )
                if key is not None:
                    self._states[key].dirty = False
                    self._states[key].fitting = True
                    self.busy = True
                    return key
                # a dirty key being fitted wakes the threads when its fit ends (_fast_loop)
                waiting = any(s.dirty and not s.fitting for s in self._states.values())
                self._wake.wait(timeout=0.05 if waiting else 1.0)
        return None

    def _fast_loop(self) -> None:
        while not self._stop.is_set():
            key = self._next_dirty()
            if key is None:
                return
            try:
                self.update(key)
            except Exception as exc:  # keep the worker alive; the error is reported
                self._record(RefreshEvent(key, "failed", FAST, 0, 0, 0.0, repr(exc)))
            finally:
                with self._wake:
                    self._states[key].fitting = False
                    self.busy = any(s.fitting for s in self._states.values())
                    self._wake.notify_all()  # another thread may take this key now

    def update(self, key: Hashable) -> Snapshot | None:
        """One fast update of ``key`` (also callable directly, e.g. in tests and benchmarks)."""
        started = time.monotonic()
        state = self._state(key)
        state.last_fast_at = started
        if state.published_seq < 0:
            self._restore(key, state)
        source = self.load_fn(key)
        if source is None:
            return None
        with self._lock:
            base, base_fresh = state.base, state.base_fresh
        if source.last_seq <= state.published_seq and not base_fresh:
            with self._lock:
                state.pending = [p for p in state.pending if p[0] > source.last_seq]
            return None
        cfg = self.config
        seed = (cfg.seed + source.num_judgments) % 2**31
        snapshot = None
        plan = plan_update(
            cfg,
            base_judgments=None if base is None else base.num_judgments,
            num_judgments=source.num_judgments,
            items_running=state.items_running,
        )
        if plan.refresh_items and base is not None:
            self._start_items_refresh(key, base)
        if plan.skills and base is not None:
            init = None
            if state.fast is not None and state.fast.mode is not None:
                init = state.fast.mode["global"][: len(source.systems)]
            snapshot = skill_snapshot(
                base, source, init=init, num_draws=cfg.fast_num_draws, seed=seed
            )
            if snapshot is not None and snapshot.diagnostics.get("held_back"):
                if base.num_judgments < cfg.items_sync_below:
                    snapshot = None  # a full fit is cheap here: include everything now
                else:
                    self._start_items_refresh(key, base)  # new prompts: refit items now
        new_base = None
        if snapshot is None:
            snapshot, new_base = self._fast_fit(source, state.fast, key)
        if not snapshot.diagnostics.get("converged", True):
            # an unconverged optimum is still published (it is the best guess) but says so,
            # and the next update starts from the default, not from it
            state.fast = None
        version = self._publish(key, snapshot, started)
        if version is None:
            self._superseded(key, state, base, new_base, snapshot)
            return None
        snapshot = replace(snapshot, version=version)
        with self._lock:
            if base is state.base:
                state.base_fresh = False
            if new_base is not None or snapshot.diagnostics.get("update") != "skills":
                state.base = (
                    replace(new_base, snapshot=snapshot)
                    if new_base is not None and cfg.skill_updates
                    else None
                )
        if snapshot.diagnostics.get("converged", True):
            state.fast = snapshot
        if self.config.prepare_next_shape and not self._stop.is_set():
            self._prepare_next(key, state, source)
        return snapshot

    def _restore(self, key: Hashable, state: KeyState) -> None:
        """The first look at ``key`` since the start: restore the stored snapshot (a warm
        start and what is published), do not refit."""
        latest = self.latest_fn(key)
        if latest is not None:
            state.fast = latest
            state.published_seq = latest.last_seq
            state.published_judgments = latest.num_judgments
            state.nuts_judgments = latest.num_judgments

    def _prepare_next(self, key: Hashable, state: KeyState, source: Source) -> None:
        """Compile the next padded sizes ``source`` grows into, on a thread of their own,
        when it is close to its own (:func:`~services.runtime.schedule.next_shapes`)."""
        frame = source.judgments
        now = Shape(self._rows(state, frame), frame["item_id"].n_unique())
        growing, state.prompts = now.prompts > state.prompts > 0, now.prompts
        targets = next_shapes(now, state.prepared, prompts_growing=growing)
        if not targets:
            return
        state.prepared.update(padded(t) for t in targets)
        thread = threading.Thread(
            target=self._prepare_shapes,
            args=(key, source, now, targets),
            name="prepare-shape",
            # not a daemon: a process that exits waits for the compile under way
            # (a daemon thread killed inside XLA aborts the interpreter)
            daemon=False,
        )
        with self._lock:  # several fast-update threads may start one
            self._item_threads = [t for t in self._item_threads if t.is_alive()] + [thread]
        thread.start()

    def _rows(self, state: KeyState, frame: pl.DataFrame) -> int:
        """The rows the fit of ``frame`` sees (:func:`fit_rows`), counted again only when
        they may have reached the share of their padded size that prepares the next: each
        new judgment adds at most one row (counting takes 0.3 s at 1M judgments)."""
        merged = not self.config.cell_effect
        if not merged:
            return int(frame.height)
        judgments, rows = state.rows_at
        bound = rows + frame.height - judgments  # at most this many rows now
        if judgments and bound < PREPARE_SHARE * padded(Shape(rows, 1)).judgments:
            return rows  # a lower bound, below the share either way
        rows = fit_rows(frame, merged=True)
        state.rows_at = (frame.height, rows)
        return rows

    def _prepare_shapes(
        self, key: Hashable, source: Source, now: Shape, targets: list[Shape]
    ) -> None:
        for target in targets:
            if not self._stop.is_set():
                self._prepare_shape(key, source, now, target)

    def _prepare_shape(self, key: Hashable, source: Source, now: Shape, target: Shape) -> None:
        """Compile the fits of the ``target`` shape (rows the fit sees, prompts): fit this
        key's judgments grown onto unjudged cells and new prompts until they reach it
        (:func:`~services.runtime.shapes.grow_to`), and throw the result away (the compiled
        programs stay)."""
        started = time.monotonic()
        detail = f"{target.judgments} rows, {target.prompts} prompts"
        try:
            grown = grow_to(
                source.judgments,
                rows=target.judgments,
                prompts=target.prompts,
                merged=not self.config.cell_effect,
            )
            source = replace(source, judgments=grown, num_judgments=grown.height)
            # off the update path by design: its compile time is the prepared event's, not
            # a 'compiled' event's (those say what an update waited for)
            self._fit(source, "fast", {"num_draws": self.config.fast_num_draws})
            compiled = Shape(
                fit_rows(grown, merged=not self.config.cell_effect), grown["item_id"].n_unique()
            )
            state = self._state(key)
            with self._lock:  # the size compiled, if the stand-in overshot the target
                state.prepared.add(padded(compiled))
            seconds = time.monotonic() - started
            self._record(RefreshEvent(key, "prepared", FAST, 0, grown.height, seconds, detail))
        except Exception as exc:  # a later update compiles it instead; reported
            self._record(
                RefreshEvent(
                    key, "prepared", FAST, 0, target.judgments, 0.0, f"{detail}: not: {exc!r}"
                )
            )

    def _superseded(
        self,
        key: Hashable,
        state: KeyState,
        base: SkillBase | None,
        new_base: SkillBase | None,
        snapshot: Snapshot,
    ) -> None:
        """Another writer stored newer judgments' snapshot first: go on from that one."""
        latest = self.latest_fn(key)
        with self._lock:
            if base is state.base:
                state.base_fresh = False
            if new_base is not None and self.config.skill_updates:
                # still a valid base (items of fewer judgments); version 0: never stored
                state.base = replace(new_base, snapshot=replace(snapshot, version=0))
            if latest is not None and latest.last_seq >= state.published_seq:
                state.published_seq = latest.last_seq
                state.published_judgments = latest.num_judgments
                state.pending = [p for p in state.pending if p[0] > latest.last_seq]
        if latest is not None:
            state.fast = latest

    def _start_items_refresh(self, key: Hashable, base: SkillBase) -> None:
        """Refit everything (a new base) on a thread of its own; skill updates go on meanwhile."""
        state = self._state(key)
        with self._lock:
            if state.items_running or self._stop.is_set():
                return
            state.items_running = True
        thread = threading.Thread(
            target=self._refresh_items, args=(key, base), name="refresh-items", daemon=True
        )
        with self._lock:
            self._item_threads = [t for t in self._item_threads if t.is_alive()] + [thread]
        thread.start()

    def _refresh_items(self, key: Hashable, base: SkillBase) -> None:
        started = time.monotonic()
        state = self._state(key)
        try:
            source = self.load_fn(key)
            if source is None:
                return
            live = state.fast
            _, new_base = self._fast_fit(source, base.snapshot, key)
            if new_base is not None:  # the full fit against the skill-only live snapshot
                self._compare(key, new_base.snapshot, ITEMS, live)
            if new_base is None:
                detail = "the full fit did not converge; the previous items stay"
                self._record(
                    RefreshEvent(key, "rejected", "items", 0, source.num_judgments, 0.0, detail)
                )
                return
            with self._wake:
                # an update published meanwhile may have started a newer base already
                if state.base is None or state.base.num_judgments <= new_base.num_judgments:
                    state.base = new_base
                    state.base_fresh = True
                    state.dirty = True
                    self._wake.notify_all()
            self._record(
                RefreshEvent(
                    key,
                    "items",
                    FAST,
                    0,
                    source.num_judgments,
                    time.monotonic() - started,
                )
            )
        except Exception as exc:  # keep the service alive; the error is reported
            self._record(RefreshEvent(key, "failed", "items", 0, 0, 0.0, repr(exc)))
        finally:
            with self._lock:
                state.items_running = False


__all__ = ["RefreshEvent", "Refresher"]
