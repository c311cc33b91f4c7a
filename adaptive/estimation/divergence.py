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
#: fits further apart than this share of the judgments are compared but never *diverging*:
#: a posterior mean moves by about sqrt(share) sd from the new judgments alone
MAX_JUDGMENTS_GAP = 0.02


def pair_divergence(
    full: np.ndarray, live: np.ndarray, *, full_ess: float | None = None
) -> dict[str, Any]:
    """Largest and median gap between two fits' pairwise skill differences.

    The pairs' means and sds come from the systems' mean vector and covariance (S x S),
    not from D x S(S-1)/2 differences, so 500 systems cost what 500 columns cost.

    Args:
        full: (D, S) skill draws of the full refit.
        live: (D', S) skill draws of the live snapshot, the same S systems in order.
        full_ess: effective draws of ``full`` when they are autocorrelated (NUTS's bulk
            ESS); default: D, independent draws.

    Returns:
        ``max_sd`` and ``median_sd`` (gap of the posterior means over the full refit's sd,
        over all S(S-1)/2 pairs), ``pairs``, ``flips`` (pairs the full refit decides at
        2 sd that the live means put strictly the other way), ``worst`` (index pair of
        max_sd) and ``mc_sd``: the Monte Carlo error of a gap in the same units
        (sqrt(1/ESS_full + r/D_live), r the live over the full variance at the worst
        pair): two fits of one posterior differ by about that much from their draws alone.
    """
    full = np.asarray(full, np.float64)
    live = np.asarray(live, np.float64)
    s = full.shape[1]
    if live.shape[1] != s:
        raise ValueError(f"full has {s} systems, live {live.shape[1]}: align them first")
    a, b = np.triu_indices(s, k=1)
    if a.size == 0:
        return {
            "max_sd": 0.0,
            "median_sd": 0.0,
            "pairs": 0,
            "flips": 0,
            "worst": None,
            "mc_sd": 0.0,
        }
    mean_full, mean_live = full.mean(axis=0), live.mean(axis=0)
    cov_full = np.atleast_2d(np.cov(full, rowvar=False, bias=True))
    var_full = np.diag(cov_full)[a] + np.diag(cov_full)[b] - 2 * cov_full[a, b]
    sd_full = np.sqrt(np.maximum(var_full, 0.0))
    m_full = mean_full[b] - mean_full[a]
    m_live = mean_live[b] - mean_live[a]
    gap = np.abs(m_live - m_full) / np.maximum(sd_full, 1e-12)
    worst = int(np.argmax(gap))
    flips = int(np.sum((np.abs(m_full) > 2 * sd_full) & (m_live * m_full < 0)))
    wa, wb = int(a[worst]), int(b[worst])
    var_live = float(np.var(live[:, wb] - live[:, wa]))
    ratio = var_live / max(float(var_full[worst]), 1e-24)
    ess = float(full.shape[0] if full_ess is None else max(full_ess, 1.0))
    return {
        "max_sd": float(gap[worst]),
        "median_sd": float(np.median(gap)),
        "pairs": int(a.size),
        "flips": flips,
        "worst": (wa, wb),
        "mc_sd": float(np.sqrt(1.0 / ess + ratio / live.shape[0])),
    }


def snapshot_divergence(full: Snapshot, live: Snapshot) -> dict[str, Any]:
    """:func:`pair_divergence` of two snapshots of one dimension, on the systems both know.

    Returns its fields (``worst`` as the two systems' names, ``max_sd``, ``median_sd`` and
    ``mc_sd`` rounded to 3 decimals), ``judgments_gap`` (how many more or fewer judgments
    the live snapshot saw, as a share of the full refit's), ``diverging`` (max_sd above
    :data:`DIVERGING_SD` plus three ``mc_sd``, with the two fits at most
    :data:`MAX_JUDGMENTS_GAP` apart: further apart, new judgments alone move the answers),
    the two fits' methods and judgment counts. A full refit's draws count as independent
    unless its diagnostics give ``min_ess_bulk`` (NUTS).
    """
    if full.dimension != live.dimension:
        raise ValueError(f"snapshots of {full.dimension!r} and {live.dimension!r}")
    names = [n for n in full.systems if n in set(live.systems)]
    fi = [full.systems.index(n) for n in names]
    li = [live.systems.index(n) for n in names]
    ess = full.diagnostics.get("min_ess_bulk")
    d = pair_divergence(
        full.skill[:, fi], live.skill[:, li], full_ess=None if ess is None else float(ess)
    )
    worst = d["worst"]
    gap = abs(live.num_judgments - full.num_judgments) / max(full.num_judgments, 1)
    return {
        "max_sd": round(d["max_sd"], 3),
        "median_sd": round(d["median_sd"], 3),
        "mc_sd": round(d["mc_sd"], 3),
        "pairs": d["pairs"],
        "flips": d["flips"],
        "worst": None if worst is None else [names[worst[0]], names[worst[1]]],
        "judgments_gap": round(gap, 4),
        "diverging": bool(d["max_sd"] > DIVERGING_SD + 3 * d["mc_sd"] and gap <= MAX_JUDGMENTS_GAP),
        "full_method": full.method,
        "full_judgments": full.num_judgments,
        "live_method": live.method,
        "live_judgments": live.num_judgments,
    }


__all__ = ["DIVERGING_SD", "MAX_JUDGMENTS_GAP", "pair_divergence", "snapshot_divergence"]
