"""The events of the live path's checks: a full refit against the live snapshot, a slow compile.

The worker calls :func:`compared_event` when a full refit finishes (a scheduled NUTS
refit, the items refresh of skill-only updates, or a fast fit from no warm start) with
the live snapshot it would have replaced, and :func:`compiled_event` after every fit
with the fit's own compile time (``diagnostics["longest_compile"]``, set by
:func:`services.runtime.refresh_base.fit_source`). The events are stored like every
other refit event and read back by :mod:`services.runtime.fit_checks` for ``/health``.
"""

from __future__ import annotations

import json
from collections.abc import Hashable

from adaptive.estimation.divergence import snapshot_divergence
from adaptive.estimation.snapshot import Snapshot
from services.runtime.refresh_event import RefreshEvent

#: a fit that compiled longer than this (s) in one program stores a ``compiled`` event
COMPILE_EVENT_SECONDS = 5.0
#: a compile longer than this (s) is a fault: the log says so as a warning
COMPILE_LIMIT_SECONDS = 30.0

#: the kinds of full refit a live snapshot is compared with (the event's method)
NUTS, ITEMS, SCRATCH = "nuts", "items", "scratch"


def compared_event(
    key: Hashable, full: Snapshot, live: Snapshot | None, kind: str
) -> RefreshEvent | None:
    """A ``compared`` event of ``full`` against ``live`` (None without a live snapshot
    or systems to compare); detail: :func:`snapshot_divergence` as JSON."""
    if live is None or live is full or len(full.systems) < 2:
        return None
    divergence = snapshot_divergence(full, live)
    if divergence["pairs"] == 0:
        return None
    return RefreshEvent(
        key, "compared", kind, full.version, full.num_judgments, 0.0, json.dumps(divergence)
    )


def compiled_event(key: Hashable, snapshot: Snapshot, method: str) -> RefreshEvent | None:
    """A ``compiled`` event when the fit of ``snapshot`` compiled one program for longer
    than :data:`COMPILE_EVENT_SECONDS` (seconds: that compile; detail: the program and
    the fit's total compile time)."""
    longest = snapshot.diagnostics.get("longest_compile")
    if not longest or float(longest[1]) <= COMPILE_EVENT_SECONDS:
        return None
    total = float(snapshot.diagnostics.get("compile_s") or longest[1])
    detail = f"{longest[0]} ({total:.1f} s compiling in this fit)"
    return RefreshEvent(
        key, "compiled", method, 0, snapshot.num_judgments, float(longest[1]), detail
    )


__all__ = [
    "COMPILE_EVENT_SECONDS",
    "COMPILE_LIMIT_SECONDS",
    "ITEMS",
    "NUTS",
    "SCRATCH",
    "compared_event",
    "compiled_event",
]
