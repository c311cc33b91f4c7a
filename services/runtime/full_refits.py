"""The scheduled full refits and their checks: NUTS refits up to ``nuts_max_judgments``,
above it a fast fit from no warm start every ``check_every_seconds``, each compared with
the live snapshot (:mod:`services.runtime.refit_checks`). The base of
:class:`~services.runtime.refresher.Refresher`, whose NUTS thread runs :meth:`_nuts_loop`.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import replace
from typing import cast

import polars as pl

from adaptive.estimation.snapshot import FULL, Snapshot
from services.runtime.refit_checks import NUTS, SCRATCH, compared_event
from services.runtime.refresh_base import RefreshBase
from services.runtime.refresh_event import RefreshEvent
from services.runtime.schedule import nuts_due, nuts_too_large, scratch_due


class FullRefits(RefreshBase):
    """The NUTS thread's work (the arguments: :class:`RefreshBase`)."""

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
        live = state.fast  # the live snapshot of (about) the judgments this refit reads
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
            snapshot = self._fit(source, "nuts", options, key=key)
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
            self._compare(key, snapshot, NUTS, live)
            return snapshot
        finally:
            state.nuts_running = False

    def scratch(self, key: Hashable) -> Snapshot | None:
        """The scheduled check above ``nuts_max_judgments``: a fast fit from no warm start
        of exactly the judgments the live snapshot saw, compared with it, not published."""
        state = self._state(key)
        state.nuts_running = True
        live = state.fast
        try:
            source = self.load_fn(key)
            if source is None or live is None:
                return None
            frame = source.judgments
            if "seq" in frame.columns:
                frame = frame.filter(pl.col("seq") <= live.last_seq)
            source = replace(
                source, judgments=frame, num_judgments=frame.height, last_seq=live.last_seq
            )
            options = {"num_draws": self.config.fast_num_draws}
            snapshot = cast(Snapshot, self._fit(source, "fast", options, None, key=key))
            if not self._compare(key, snapshot, SCRATCH, live):
                self._record(RefreshEvent(key, "checked", SCRATCH, 0, source.num_judgments, 0.0))
            return snapshot
        finally:
            # a failed check waits for the next one like a passed one
            state.nuts_judgments = max(state.nuts_judgments, state.published_judgments)
            state.nuts_at = time.monotonic()
            state.nuts_running = False

    def _compare(self, key: Hashable, full: Snapshot, kind: str, live: Snapshot | None) -> bool:
        """Record how far the live snapshot is from ``full`` (a ``compared`` event): ``live``
        (taken when the refit started) or the live snapshot now, whichever saw the number
        of judgments nearer ``full``'s. False when nothing was compared."""
        now = self._state(key).fast
        nearest = min(
            (c for c in (live, now) if c is not None),
            key=lambda c: abs(c.num_judgments - full.num_judgments),
            default=None,
        )
        try:
            event = compared_event(key, full, nearest, kind)
        except Exception as exc:  # the check failed, not the refit: reported, not raised
            event = RefreshEvent(key, "check_failed", kind, 0, full.num_judgments, 0.0, repr(exc))
        if event is not None:
            self._record(event)
        return event is not None and event.kind == "compared"


__all__ = ["FullRefits"]
