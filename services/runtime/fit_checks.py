"""The live path's checks in ``GET /health``: its divergence from full refits, its compiles.

Between full refits the live snapshot comes from shortcuts (a warm-started fast fit,
skill-only updates on held items, a Laplace approximation). When a full refit of a
dimension finishes, the worker compares it with the live snapshot
(:func:`adaptive.estimation.divergence.snapshot_divergence`) and stores a ``compared``
event whose detail is that comparison as JSON; a fit that spent more than
:data:`COMPILE_EVENT_SECONDS` compiling stores a ``compiled`` event (seconds: the
longest single compile; detail: the program). ``/health`` reads the newest comparison of
each (project, dimension, kind of refit) and the slowest compile from the event log, so
every replica reports what any worker found. Like ``fits``, anyone sees the aggregates;
which projects, only the admin token.
"""

from __future__ import annotations

import json
from datetime import datetime

from pydantic import BaseModel, Field
from sqlalchemy import Connection, case, func, select

from adaptive.estimation.divergence import DIVERGING_SD
from services.runtime.refit_checks import COMPILE_EVENT_SECONDS, COMPILE_LIMIT_SECONDS
from services.store import tables as t
from services.store.repository import as_utc


class DivergencePublic(BaseModel):
    """One dimension's newest comparison of a full refit with the live snapshot."""

    project_id: str
    dimension: str
    full_method: str = Field(
        description="the full refit: nuts (scheduled NUTS), items (items refresh of the "
        "skill-only updates) or scratch (a fast fit from no warm start)"
    )
    max_sd: float = Field(
        description="largest gap between the two fits' pairwise skill differences, in the "
        "full refit's posterior sd of that pair"
    )
    median_sd: float
    mc_sd: float = Field(
        default=0.0, description="the Monte Carlo error of a gap from the two fits' draws alone"
    )
    judgments_gap: float = Field(
        default=0.0,
        description="how many more or fewer judgments the live snapshot saw, as a share of the "
        "full refit's (past 0.02 a comparison is never diverging: new judgments move answers)",
    )
    flips: int = Field(description="pairs the full refit decides that the live snapshot reverses")
    worst: list[str] | None = Field(default=None, description="the pair of max_sd")
    diverging: bool = Field(
        description=f"max_sd above {DIVERGING_SD} plus three mc_sd, the fits at most 0.02 apart"
    )
    full_judgments: int
    live_judgments: int
    compared_at: datetime


class ChecksPublic(BaseModel):
    """How close the live snapshots are to full refits, and how long fits compiled."""

    compared: int = Field(description="dimensions and kinds of full refit with a comparison")
    diverging: int = Field(
        description=f"of those, whose newest comparison is more than {DIVERGING_SD} sd apart"
    )
    largest_divergence_sd: float | None = None
    slowest_compile_s: float | None = Field(
        default=None,
        description=f"the longest single compile of a fit in the event log (those over "
        f"{COMPILE_EVENT_SECONDS:g} s are logged)",
    )
    compiles_over_limit: int = Field(
        default=0, description=f"compiles over {COMPILE_LIMIT_SECONDS:g} s in the event log"
    )
    keys: list[DivergencePublic] | None = Field(
        default=None, description="each dimension's newest comparison; only for the admin token"
    )


#: the fields of :class:`DivergencePublic` a ``compared`` event's detail gives
_FROM_DETAIL = (
    "mc_sd",
    "judgments_gap",
    "max_sd",
    "median_sd",
    "flips",
    "worst",
    "diverging",
    "full_judgments",
    "live_judgments",
)


def divergences(conn: Connection) -> list[DivergencePublic]:
    """The newest ``compared`` event of every (project, dimension, kind of full refit)."""
    e = t.events.c
    newest = (
        select(func.max(e.seq))
        .where(e.kind == "compared")
        .group_by(e.project_id, e.dimension, e.method)
    )
    rows = conn.execute(
        select(e.project_id, e.dimension, e.method, e.created_at, e.detail).where(e.seq.in_(newest))
    ).all()
    out = []
    for row in rows:
        try:
            detail = json.loads(row.detail)
            out.append(
                DivergencePublic(
                    project_id=row.project_id,
                    dimension=row.dimension,
                    full_method=row.method,
                    compared_at=as_utc(row.created_at),
                    **{k: detail[k] for k in _FROM_DETAIL if k in detail},
                )
            )
        except (ValueError, TypeError, KeyError):
            continue  # an event of another shape is not a comparison this reads
    return sorted(out, key=lambda d: d.max_sd, reverse=True)


def checks_public(conn: Connection, *, detail: bool) -> ChecksPublic:
    """The aggregate (and, with ``detail``, the per-dimension list) of the checks."""
    found = divergences(conn)
    e = t.events.c
    slowest, over = conn.execute(
        select(
            func.max(e.seconds),
            func.count(case((e.seconds > COMPILE_LIMIT_SECONDS, 1))),
        ).where(e.kind == "compiled")
    ).one()
    return ChecksPublic(
        compared=len(found),
        diverging=sum(d.diverging for d in found),
        largest_divergence_sd=max((d.max_sd for d in found), default=None),
        slowest_compile_s=None if slowest is None else round(float(slowest), 2),
        compiles_over_limit=int(over or 0),
        keys=found if detail else None,
    )


__all__ = [
    "COMPILE_EVENT_SECONDS",
    "COMPILE_LIMIT_SECONDS",
    "ChecksPublic",
    "DivergencePublic",
    "checks_public",
    "divergences",
]
