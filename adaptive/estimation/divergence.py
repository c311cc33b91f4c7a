"""How far the live snapshot is from a full refit: the check on the fast path's shortcuts.

Between full refits the live snapshot comes from shortcuts: a fit warm-started from
the previous mode, skill-only updates on held item parameters, a Laplace approximation
instead of NUTS. When a full refit finishes, :func:`snapshot_divergence` says how far
the live snapshot's answers are from it, on what answers are made of: every pair of
systems' skill difference (a location-free quantity, so the two fits need not share a
reference level). A difference is measured in the full refit's posterior sd of that
pair, so 0.1 means the live answer is a tenth of its own uncertainty away; a *flip* is
a pair the full refit decides (|mean| > 2 sd) that the live snapshot puts on the other
side of zero.

The two snapshots may cover a different number of judgments (the live one moves on
while a refit runs); ``live_judgments`` and ``full_judgments`` say so, and only the
systems both know are compared.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> full = rng.normal([0.0, 0.5, 1.0], 0.1, size=(4000, 3))
    >>> live = full + [0.0, 0.02, 0.0]  # system 1 moved by a fifth of its sd
    >>> d = pair_divergence(full, live)
    >>> round(d["max_sd"], 1), d["flips"]
    (0.1, 0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from adaptive.estimation.snapshot import Snapshot

#: a live snapshot further than this (in the full refit's sd of a pair) from the full refit
#: is *diverging*: its answers would move by more than half their own uncertainty
DIVERGING_SD = 0.5


def pair_divergence(full: np.ndarray, live: np.ndarray) -> dict[str, Any]:
    """Largest and median gap between two fits' pairwise skill differences.

    Args:
        full: (D, S) skill draws of the full refit.
        live: (D', S) skill draws of the live snapshot, the same S systems in order.

    Returns:
        ``max_sd`` and ``median_sd`` (gap of the posterior means over the full refit's sd,
        over all S(S-1)/2 pairs), ``pairs``, ``flips`` (pairs the full refit decides at
        2 sd that the live means put the other way) and ``worst`` (index pair of max_sd).
    """
    full = np.asarray(full, np.float64)
    live = np.asarray(live, np.float64)
    s = full.shape[1]
    if live.shape[1] != s:
        raise ValueError(f"full has {s} systems, live {live.shape[1]}: align them first")
    a, b = np.triu_indices(s, k=1)
    if a.size == 0:
        return {"max_sd": 0.0, "median_sd": 0.0, "pairs": 0, "flips": 0, "worst": None}
    d_full = full[:, b] - full[:, a]
    m_full, sd_full = d_full.mean(axis=0), d_full.std(axis=0)
    m_live = (live[:, b] - live[:, a]).mean(axis=0)
    gap = np.abs(m_live - m_full) / np.maximum(sd_full, 1e-12)
    worst = int(np.argmax(gap))
    flips = int(np.sum((np.abs(m_full) > 2 * sd_full) & (np.sign(m_live) != np.sign(m_full))))
    return {
        "max_sd": float(gap[worst]),
        "median_sd": float(np.median(gap)),
        "pairs": int(a.size),
        "flips": flips,
        "worst": (int(a[worst]), int(b[worst])),
    }


def snapshot_divergence(full: Snapshot, live: Snapshot) -> dict[str, Any]:
    """:func:`pair_divergence` of two snapshots of one dimension, on the systems both know.

    Returns its fields (``worst`` as the two systems' names, ``max_sd`` and ``median_sd``
    rounded to 3 decimals), plus ``diverging`` (max_sd above :data:`DIVERGING_SD`), the
    two fits' methods and judgment counts.
    """
    if full.dimension != live.dimension:
        raise ValueError(f"snapshots of {full.dimension!r} and {live.dimension!r}")
    names = [n for n in full.systems if n in set(live.systems)]
    fi = [full.systems.index(n) for n in names]
    li = [live.systems.index(n) for n in names]
    d = pair_divergence(full.skill[:, fi], live.skill[:, li])
    worst = d["worst"]
    return {
        "max_sd": round(d["max_sd"], 3),
        "median_sd": round(d["median_sd"], 3),
        "pairs": d["pairs"],
        "flips": d["flips"],
        "worst": None if worst is None else [names[worst[0]], names[worst[1]]],
        "diverging": bool(d["max_sd"] > DIVERGING_SD),
        "full_method": full.method,
        "full_judgments": full.num_judgments,
        "live_method": live.method,
        "live_judgments": live.num_judgments,
    }


__all__ = ["DIVERGING_SD", "pair_divergence", "snapshot_divergence"]
