"""Failed fits in ``GET /health``, read from the stored refit events.

The worker records every fit's outcome (:class:`~services.runtime.refresher.RefreshEvent`)
and the service stores it (``GET /projects/{p}/events``); a fit that raised is a
``failed`` event. Each (project, dimension) has four kinds of fit, each with its
own newest outcome: the fast update (method ``laplace``), the items refresh
(``items``: kind ``items`` when it succeeded), the NUTS refit (``nuts``) and, past
``nuts_max_judgments``, the scheduled check from no warm start (``scratch``). One
whose newest outcome is a failure is *failing*, and makes ``/health`` say
``degraded`` until a fit of that kind succeeds again.

Anyone may call ``/health`` (probes, load balancers), so it gives the failures as
aggregate counts; which projects they are, and their errors, only to the admin
token (when one is configured). A project's own token reads them at
``GET /projects/{p}/events?kind=failed``.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field
from sqlalchemy import Connection, func, select

from services import schemas as s
from services.runtime.fit_checks import ChecksPublic
from services.runtime.store_health import WriteFailurePublic
from services.store import tables as t
from services.store.repository import as_utc

#: kinds of event that end a fit (``superseded``: published by another writer first;
#: ``compared`` and ``checked``: a scheduled check that ran)
OUTCOMES = ("published", "superseded", "rejected", "failed", "items", "compared", "checked")


class FitFailurePublic(BaseModel):
    """One dimension and kind of fit with failed fits in the event log."""

    project_id: str
    dimension: str
    method: str = Field(
        description="laplace (fast update), items (items refresh), nuts, or scratch (the "
        "scheduled check from no warm start)"
    )
    failed: int = Field(description="its failed fits in the event log")
    failing: bool = Field(description="its newest fit failed")
    last_failed_at: datetime
    last_error: str = Field(description="the newest failure's error")


class FitsPublic(BaseModel):
    """Failed fits in the stored event log (every replica's; the newest 10,000 events of
    each project are kept)."""

    failed: int = Field(description="failed fits in the event log")
    failing: int = Field(
        description="dimensions and kinds of fit (fast update, items refresh, NUTS refit) "
        "whose newest fit failed"
    )
    last_failed_at: datetime | None = None
    keys: list[FitFailurePublic] | None = Field(
        default=None,
        description="each dimension and kind of fit with failures, newest first; only for "
        "the admin token (null otherwise)",
    )


class ServiceHealth(s.HealthPublic):
    status: Literal["ok", "degraded"] = Field(
        description="degraded: the store does not answer or refused a write "
        "(store_writable), streaming is on and the worker is not alive, or the newest "
        "fit of some dimension and kind failed (fits.failing)"
    )
    fits: FitsPublic
    checks: ChecksPublic = Field(
        default_factory=lambda: ChecksPublic(compared=0, diverging=0),
        description="the live snapshots against full refits, and the fits' slowest compile",
    )
    store_writable: bool = Field(
        default=True,
        description="false while a write of this replica failed because the store could "
        "not take it (disk full, locked, stopped) in the last 60 s and none committed since",
    )
    last_write_failure: WriteFailurePublic | None = None
    catching_up: bool = Field(
        default=False,
        description="this replica answers but is not current yet: it is still loading its "
        "running decision tallies after a start, or a project shown has judgments its newest "
        "snapshot does not include (judgments_behind > 0)",
    )


def fit_failures(conn: Connection) -> list[FitFailurePublic]:
    """Every (project, dimension, kind of fit) with a failed fit in the event log."""
    e = t.events.c
    groups = conn.execute(
        select(
            e.project_id,
            e.dimension,
            e.method,
            e.kind,
            func.max(e.seq).label("newest"),
            func.count().label("num"),
        )
        .where(e.kind.in_(OUTCOMES))
        .group_by(e.project_id, e.dimension, e.method, e.kind)
    ).all()
    # per (project, dimension, kind of fit): (newest seq, its kind), failures, newest failure
    newest: dict[tuple[str, str, str], tuple[int, str]] = {}
    failed: dict[tuple[str, str, str], tuple[int, int]] = defaultdict(lambda: (0, 0))
    for row in groups:
        key = (row.project_id, row.dimension, "items" if row.kind == "items" else row.method)
        if key not in newest or row.newest > newest[key][0]:
            newest[key] = (int(row.newest), row.kind)
        if row.kind == "failed":
            count, seq = failed[key]
            failed[key] = (count + int(row.num), max(seq, int(row.newest)))
    if not failed:
        return []
    last = {
        int(r.seq): r
        for r in conn.execute(
            select(e.seq, e.created_at, e.detail).where(
                e.seq.in_([seq for _, seq in failed.values()])
            )
        )
    }
    out = [
        FitFailurePublic(
            project_id=project_id,
            dimension=dimension,
            method=method,
            failed=count,
            failing=newest[(project_id, dimension, method)][1] == "failed",
            last_failed_at=as_utc(last[seq].created_at),
            last_error=last[seq].detail,
        )
        for (project_id, dimension, method), (count, seq) in failed.items()
        if seq in last
    ]
    return sorted(out, key=lambda f: f.last_failed_at, reverse=True)


def fits_public(failures: list[FitFailurePublic], *, detail: bool) -> FitsPublic:
    """The aggregate (and, with ``detail``, the per-key list) of ``failures``."""
    return FitsPublic(
        failed=sum(f.failed for f in failures),
        failing=sum(f.failing for f in failures),
        last_failed_at=max((f.last_failed_at for f in failures), default=None),
        keys=failures if detail else None,
    )


__all__ = ["FitFailurePublic", "FitsPublic", "ServiceHealth", "fit_failures", "fits_public"]
