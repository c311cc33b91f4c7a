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
keys' states, the fits and publishing are :class:`~services.runtime.refresh_base.RefreshBase`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from dataclasses import replace
from typing import cast

from adaptive.estimation.skill_update import SkillBase, skill_snapshot
from adaptive.estimation.snapshot import FAST, FULL, Snapshot
from adaptive.estimation.streaming import Source
from services.runtime.refit_checks import ITEMS, NUTS, SCRATCH, compared_event
from services.runtime.refresh_base import RefreshBase, RefreshEvent
from services.runtime.schedule import (
    KeyState,
    Shape,
    next_key,
    next_shapes,
    nuts_due,
    nuts_too_large,
    padded,
    plan_update,
    scratch_due,
)
from services.runtime.shapes import fit_rows, grow_to


class Refresher(RefreshBase):
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
        now = Shape(
            fit_rows(frame, merged=not self.config.cell_effect), frame["item_id"].n_unique()
        )
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
            self._fit(source, "fast", {"num_draws": self.config.fast_num_draws}, key=key)
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
            _, new_base = self._fast_fit(source, base.snapshot, key)
            if new_base is not None:  # the full fit against the skill-only live snapshot
                self._compare(key, new_base.snapshot, ITEMS)
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

    def _nuts_loop(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                now = time.monotonic()
                due = [
                    k for k, s in self._states.items() if nuts_due(s, now=now, config=self.config)
                ]
                scratch = [
                    k
                    for k, s in self._states.items()
                    if scratch_due(s, now=now, config=self.config)
                ]
                too_large = [
                    (k, s.published_judgments)
                    for k, s in self._states.items()
                    if not s.nuts_skip_noted and nuts_too_large(s, self.config)
                ]
                for k, _ in too_large:
                    self._states[k].nuts_skip_noted = True
            for key, n in too_large:
                detail = (
                    f"{n} judgments: past nuts_max_judgments ({self.config.nuts_max_judgments}),"
                    " so no scheduled NUTS refits; the fast updates' robust intervals stand"
                )
                self._record(RefreshEvent(key, "skipped", FULL, 0, n, 0.0, detail))
            for key, fit in [(k, self.refit) for k in due] + [(k, self.scratch) for k in scratch]:
                if self._stop.is_set():
                    return
                try:
                    fit(key)
                except Exception as exc:
                    method = FULL if fit == self.refit else SCRATCH
                    self._record(RefreshEvent(key, "failed", method, 0, 0, 0.0, repr(exc)))

    def refit(self, key: Hashable) -> Snapshot | None:
        """One full NUTS refit of ``key``; published only when its diagnostics pass."""
        started = time.monotonic()
        state = self._state(key)
        state.nuts_running = True
        try:
            source = self.load_fn(key)
            if source is None:
                return None
            cfg = self.config
            options = {
                "num_chains": cfg.nuts_chains,
                "num_warmup": cfg.nuts_warmup,
                "num_samples": cfg.nuts_samples,
                "min_ess": cfg.nuts_min_ess or None,
            }
            snapshot = self._fit(source, "nuts", options)
            snapshot = cast(Snapshot, snapshot)  # with_base=False: the snapshot alone
            diag = snapshot.diagnostics
            max_rhat = diag.get("max_rhat")
            passed = (max_rhat is None or max_rhat <= cfg.nuts_max_rhat) and int(
                diag.get("num_divergences", 0)
            ) <= cfg.nuts_max_divergences
            snapshot = replace(snapshot, diagnostics={**diag, "passed": passed})
            state.nuts_judgments = source.num_judgments
            state.nuts_at = time.monotonic()
            if not passed:
                self._record(
                    RefreshEvent(
                        key,
                        "rejected",
                        FULL,
                        0,
                        source.num_judgments,
                        time.monotonic() - started,
                        f"max R-hat {max_rhat}, {diag.get('num_divergences')} divergences",
                    )
                )
                return None
            version = self._publish(key, snapshot, started)
            if version is None:
                return None
            snapshot = replace(snapshot, version=version)
            self._compare(key, snapshot, NUTS)
            return snapshot
        finally:
            state.nuts_running = False

    def scratch(self, key: Hashable) -> Snapshot | None:
        """The scheduled full refit above ``nuts_max_judgments``: a fast fit of every
        judgment from no warm start, compared with the live snapshot and not published."""
        state = self._state(key)
        state.nuts_running = True
        try:
            source = self.load_fn(key)
            if source is None:
                return None
            options = {"num_draws": self.config.fast_num_draws}
            snapshot = cast(Snapshot, self._fit(source, "fast", options, None, key=key))
            state.nuts_judgments = source.num_judgments
            state.nuts_at = time.monotonic()
            self._compare(key, snapshot, SCRATCH)
            return snapshot
        finally:
            state.nuts_running = False

    def _compare(self, key: Hashable, full: Snapshot, kind: str) -> None:
        """Record how far the live snapshot is from ``full`` (a ``compared`` event)."""
        event = compared_event(key, full, self._state(key).fast, kind)
        if event is not None:
            self._record(event)


__all__ = ["RefreshEvent", "Refresher"]
