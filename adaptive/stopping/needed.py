"""How many more judgments a decision likely needs (the estimates behind ``Decisions.needed``).

Both continue a comparison's counts so far with what its data suggest and find the first
size at which the decision's test would close: the sign e-process
(:func:`needed_sign`) or the equivalence confidence sequence
(:func:`needed_equivalence`). They are estimates for ordering work and for display, not
part of any error guarantee.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from adaptive.stopping.evidence import log_sign_evalue

#: "needed" estimates beyond this many judgments are reported as out of sight (inf)
NEEDED_HORIZON = 1_000_000
#: the continuation sizes m' - m that :func:`needed_sign` tries (a geometric grid, 1% steps)
_EXTRA = np.unique(np.round(np.geomspace(1.0, NEEDED_HORIZON, 1400)))
#: every _STRIDE-th of them (and the last): the first pass of the search
_STRIDE = 16
_COARSE = np.unique(np.append(np.arange(0, _EXTRA.shape[0], _STRIDE), _EXTRA.shape[0] - 1))


def needed_sign(
    k, m, t, a: float, level: float, quantile: float | None = None, *, best: bool = False
) -> np.ndarray:
    """Judgments likely still needed for a sign e-process to reach 1/level ((n,) arrays in).

    Continues the counts so far with the observed share q of the leading side among
    non-ties (with a +1/+1 prior) and the observed tie share: the first m' > m where
    the e-value at k' = k + q (m' - m) reaches the threshold (m' - m on a geometric
    grid, 1% steps), converted to judgments. Progress already made counts, so a
    comparison whose evidence is near the boundary comes first. With ``quantile``,
    q is that quantile of the leading share's Beta(1 + lead, 1 + trail) posterior
    (at least 1/2) instead of its mean. ``best``: the best case, every further judgment
    decisive and for the leading side (q = 1, no ties).
    """
    k, m, t = (np.atleast_1d(np.asarray(v, np.float64)) for v in (k, m, t))
    q = (k + 1.0) / (m + 2.0)
    # continue from the counts so far on the side they lean to: progress already made counts
    lead = np.where(q >= 0.5, k, m - k)
    q = np.maximum(q, 1.0 - q)
    if quantile is not None:
        # the Beta quantile (scipy.stats.beta.ppf; scipy.stats costs the CLI 0.6 s to import)
        q = np.maximum(special.betaincinv(lead + 1.0, m - lead + 1.0, quantile), 0.5)
    if best:
        q = np.ones_like(q)
    non_tie = np.ones_like(m) if best else np.maximum((m + 1.0) / (t + 2.0), 1e-3)
    first = _first_reached(lead, q, m, a, np.log(1.0 / level))
    reached = first < _EXTRA.shape[0]
    more = _EXTRA[np.minimum(first, _EXTRA.shape[0] - 1)] / non_tie
    return np.where(reached, more, np.inf)


def _first_reached(lead, q, m, a: float, threshold: float) -> np.ndarray:
    """(n,) the first index into _EXTRA where the continued e-value reaches ``threshold``
    (len(_EXTRA) where none does).

    Along a continuation (k' = lead + q x, m' = m + x, q >= 1/2) the log e-value falls at
    most until the leading share's evidence starts to pay and rises from there, so the
    sizes that reach the threshold are every size from the first one on: the first coarse
    size that reaches it bounds the search, and only the sizes since the coarse one before
    are tried one by one (len(_COARSE) + _STRIDE evaluations per comparison instead of
    len(_EXTRA); the same answer, tests/adaptive/stopping/test_decisions.py compares with every size tried).
    """
    size = _EXTRA.shape[0]
    if lead.shape[0] == 0:
        return np.zeros(0, np.int64)
    coarse = _EXTRA[_COARSE][None, :]
    hit = log_sign_evalue(lead[:, None] + q[:, None] * coarse, m[:, None] + coarse, a) >= threshold
    j = np.argmax(hit, axis=1)
    found = hit[np.arange(hit.shape[0]), j]
    first = np.full(lead.shape[0], size, np.int64)
    rows = np.flatnonzero(found)
    if rows.shape[0] == 0:
        return first
    top = _COARSE[j[rows]]  # reached
    start = np.where(j[rows] > 0, _COARSE[np.maximum(j[rows] - 1, 0)] + 1, 0)
    offsets = np.arange(_STRIDE)[None, :]
    index = np.minimum(start[:, None] + offsets, top[:, None])
    extra = _EXTRA[index]
    fine = (
        log_sign_evalue(lead[rows, None] + q[rows, None] * extra, m[rows, None] + extra, a)
        >= threshold
    )
    fine[:, -1] |= index[:, -1] == top  # the coarse size reached
    first[rows] = index[np.arange(rows.shape[0]), np.argmax(fine, axis=1)]
    return first


_GRID = np.unique(np.round(np.geomspace(1.0, NEEDED_HORIZON, 400)))


def needed_equivalence(net, sigma2, n, margin: float, each: float) -> np.ndarray:
    """Judgments likely still needed for the confidence sequence to fit inside (-margin, margin).

    The half-width the sequence would have after N observations of variance
    ``sigma2`` (on [0, 1]) centred at the current estimate: (log(2 / each) +
    sigma2 sum psi(lambda_i)) / sum lambda_i with the sequence's own bets
    lambda_i, the sums integrated over a geometric grid; the first N where twice
    it (the Δ scale) is below margin - |net|. Slower than 1 / sqrt(N) by a log
    factor, as the sequence is. ((n,) arrays in, (n,) out; inf beyond the horizon.)
    """
    net, sigma2, n = (np.atleast_1d(np.asarray(v, np.float64)) for v in (net, sigma2, n))
    log_term = np.log(2.0 / each)
    g = _GRID[None, :]
    s2 = np.maximum(sigma2, 1e-4)[:, None]
    lam = np.minimum(np.sqrt(2.0 * log_term / (s2 * g * np.log1p(g))), 0.5)
    psi = -np.log1p(-lam) - lam
    width = np.diff(g, axis=1, prepend=0.0)
    sum_lam = np.cumsum(lam * width, axis=1)
    sum_psi = np.cumsum(psi * width, axis=1)
    half = 2.0 * (log_term + s2 * sum_psi) / sum_lam
    gap = margin - np.abs(net)
    ok = (half < gap[:, None]) & (g > n[:, None])
    first = np.argmax(ok, axis=1)
    more = np.maximum(_GRID[first] - n, 1.0)
    return np.where(ok.any(axis=1) & (gap > 0), more, np.inf)
