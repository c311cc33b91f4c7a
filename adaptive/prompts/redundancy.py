"""Redundant prompts: judgment correlation between prompts, and groups above a threshold.

Sedoc & Ungar (section 4.2, footnote 3) correlate the net ratings u_j^i of every
pair of prompts "over all annotators and evaluations" and group prompts whose
correlation exceeds 0.6; a group's ratings are averaged so that near-duplicate
prompts ("my name is david. what is my name?" / "my name is john. ...") do not
count as independent evidence. The paper reports that this removes 6 of 200
prompts.

Our reading, and what it adds (see docs/selection.md for the measurements):

* **Correlation basis.** ``"raw"`` is the literal definition: the Pearson
  correlation of two prompts' net ratings across comparisons. When
  comparisons differ in their mean (one system much better), every pair of
  prompts correlates through that shared comparison effect: on ChatEval NCM
  1,893 of 19,900 pairs exceed 0.6. ``"centered"`` (default) removes each
  comparison's mean rating first (the interaction residual of a two-way
  layout), so only prompt-specific agreement counts: 316 pairs exceed 0.6.
* **Chance.** With ~17 comparisons a correlation of 0.6 is what unrelated
  prompts reach by chance about once in 150 pairs; among 19,900 pairs that is
  ~180 expected chance exceedances (a permutation of each prompt's residuals
  gives the same figure), so most of the 316 are noise, and the top pairs are
  semantically unrelated ("could you please leave me alone?" / "is madrid
  the capital of spain?"). A pair is therefore redundant only when r exceeds
  the threshold **and** the correlation is significantly positive after
  Benjamini-Hochberg control of the false discovery rate over all pairs
  (``fdr=0.05`` by default; one-sided t test of r with the pair's overlap).
  ``fdr=None`` restores the threshold-only rule.

Groups are formed by complete linkage (every pair inside a group is
redundant), which keeps one chance correlation from chaining unrelated
prompts. Pairs observed together in fewer than ``min_overlap`` comparisons
are ignored. Every function below works on integer-indexed arrays; only
:func:`find_redundant_groups` maps indices back to prompt ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from adaptive.core.cells import CellData, prompt_rating_matrix

DEFAULT_THRESHOLD = 0.6
DEFAULT_MIN_OVERLAP = 5
DEFAULT_FDR = 0.05
BASES = ("centered", "raw")


@dataclass(frozen=True)
class RedundancyInfo:
    """Correlation matrix and the pairs above threshold, for reports."""

    correlation: np.ndarray  # (P, P), NaN where the overlap is too small
    overlap: np.ndarray  # (P, P) number of comparisons both prompts were judged in
    pairs: list[tuple[int, int, float]]  # (p, q, r) redundant pairs, p < q, largest r first
    above_threshold: int = 0  # pairs with r > threshold, significant or not
    expected_by_chance: float = float("nan")  # of those, expected under no association
    q_value: np.ndarray | None = None  # (P, P) BH-adjusted one-sided p-values
    basis: str = "centered"
    fdr: float | None = DEFAULT_FDR


def pairwise_correlation(
    values: np.ndarray, mask: np.ndarray, min_overlap: int = DEFAULT_MIN_OVERLAP
) -> tuple[np.ndarray, np.ndarray]:
    """Pearson correlation of rows over their commonly observed columns.

    Args:
        values: (P, C) ratings.
        mask: (P, C) True where observed.
        min_overlap: pairs with fewer common columns get NaN.

    Returns:
        (correlation, overlap), both (P, P); the diagonal is NaN.
    """
    m = mask.astype(np.float64)
    x = np.where(mask, values, 0.0)
    n = m @ m.T
    sx = x @ m.T
    sxx = (x * x) @ m.T
    sxy = x @ x.T
    cov = n * sxy - sx * sx.T
    var = (n * sxx - sx**2) * (n * sxx.T - sx.T**2)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = cov / np.sqrt(var)
    r[(n < min_overlap) | (var <= 1e-12)] = np.nan
    np.fill_diagonal(r, np.nan)
    return r, n.astype(np.int64)


def center_by_comparison(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Ratings minus their comparison's (column's) mean over observed prompts; 0 where unobserved."""
    counts = mask.sum(axis=0)
    col_mean = np.where(mask, values, 0.0).sum(axis=0) / np.maximum(counts, 1)
    return np.where(mask, values - col_mean, 0.0)


def matrix_correlation(
    values: np.ndarray,
    mask: np.ndarray,
    *,
    basis: str = "centered",
    min_overlap: int = DEFAULT_MIN_OVERLAP,
) -> tuple[np.ndarray, np.ndarray]:
    """Correlation between the rows (prompts) of a (P, C) rating matrix; see module doc."""
    if basis == "centered":
        values = center_by_comparison(values, mask)
    elif basis != "raw":
        raise ValueError(f"unknown correlation basis {basis!r}; expected one of {BASES}")
    return pairwise_correlation(values, mask, min_overlap)


def correlation_q_values(correlation: np.ndarray, overlap: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values of H0: rho <= 0 for every pair (one-sided t test of r).

    Returns a symmetric (P, P) array, NaN where the correlation is NaN.
    """
    num = correlation.shape[0]
    iu = np.triu_indices(num, 1)
    r = correlation[iu]
    n = overlap[iu].astype(np.float64)
    ok = ~np.isnan(r) & (n > 3)
    # exact null distribution of r for independent normal data: a t with n - 2 df
    rr = np.clip(r[ok], -1 + 1e-12, 1 - 1e-12)
    t = rr * np.sqrt(n[ok] - 2.0) / np.sqrt(1.0 - rr**2)
    p = special.stdtr(n[ok] - 2.0, -t)
    m = p.size
    q = np.full(r.shape, np.nan)
    if m:
        order = np.argsort(p)
        adjusted = p[order] * m / np.arange(1, m + 1)
        adjusted = np.minimum.accumulate(adjusted[::-1])[::-1]
        q_ok = np.empty(m)
        q_ok[order] = np.minimum(adjusted, 1.0)
        q[ok] = q_ok
    out = np.full((num, num), np.nan)
    out[iu] = q
    out.T[iu] = q
    return out


def expected_chance_exceedances(overlap: np.ndarray, threshold: float, min_overlap: int) -> float:
    """Expected number of pairs with r > threshold if no two prompts were associated.

    Under independence (normal data) r with n observations has
    P(r > t) = P(T_(n-2) > t sqrt(n-2) / sqrt(1-t^2)).
    """
    iu = np.triu_indices(overlap.shape[0], 1)
    n = overlap[iu].astype(np.float64)
    n = n[n >= max(min_overlap, 4)]
    if not n.size or threshold >= 1:
        return 0.0
    t = threshold * np.sqrt(n - 2) / np.sqrt(1 - threshold**2)
    return float(special.stdtr(n - 2, -t).sum())


def complete_linkage_groups(correlation: np.ndarray, threshold: float) -> list[list[int]]:
    """Greedy complete-linkage clustering: merge while every cross pair exceeds threshold.

    Returns groups of size >= 2 (indices), largest correlation first.
    """
    r = np.where(np.isnan(correlation), -np.inf, correlation)
    np.fill_diagonal(r, -np.inf)
    # only prompts with a pair above the threshold can ever merge: clustering the
    # sub-matrix of those is the same and costs its size, not the campaign's (the rows
    # keep their order, so ties resolve as on the whole matrix)
    members = np.flatnonzero((r > threshold).any(axis=1))
    num = len(members)
    clusters: dict[int, list[int]] = {i: [int(members[i])] for i in range(num)}
    # linkage between clusters = minimum pairwise correlation; merged-away rows are -inf
    link = r[np.ix_(members, members)]
    while num:
        flat = int(np.argmax(link))
        i, j = divmod(flat, num)
        if link[i, j] <= threshold:
            break
        clusters[i].extend(clusters.pop(j))
        link[i, :] = np.minimum(link[i, :], link[j, :])
        link[:, i] = link[i, :]
        link[i, i] = -np.inf
        link[j, :] = -np.inf
        link[:, j] = -np.inf
    groups = [sorted(group) for group in clusters.values() if len(group) > 1]
    groups.sort(key=lambda g: (-len(g), g[0]))
    return groups


def redundant_pairs_matrix(
    values: np.ndarray,
    mask: np.ndarray,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    basis: str = "centered",
    min_overlap: int = DEFAULT_MIN_OVERLAP,
    fdr: float | None = DEFAULT_FDR,
) -> tuple[list[list[int]], RedundancyInfo]:
    """Redundancy groups (prompt indices) of a (P, C) rating matrix; see module doc."""
    r, n = matrix_correlation(values, mask, basis=basis, min_overlap=min_overlap)
    linked = np.nan_to_num(r, nan=-np.inf) > threshold
    q = None
    if fdr is not None:
        q = correlation_q_values(r, n)
        linked &= np.nan_to_num(q, nan=np.inf) <= fdr
    link = np.where(linked, r, -np.inf)
    groups = complete_linkage_groups(link, threshold)
    iu = np.triu_indices(r.shape[0], 1)
    upper = r[iu]  # once: indexing it per pair cost O(prompts^2) a pair
    hits = np.where(linked[iu])[0]
    pairs = sorted(
        ((int(iu[0][k]), int(iu[1][k]), float(upper[k])) for k in hits), key=lambda t: -t[2]
    )
    info = RedundancyInfo(
        correlation=r,
        overlap=n,
        pairs=pairs,
        above_threshold=int(np.sum(np.nan_to_num(upper, nan=-np.inf) > threshold)),
        expected_by_chance=expected_chance_exceedances(n, threshold, min_overlap),
        q_value=q,
        basis=basis,
        fdr=fdr,
    )
    return groups, info


def find_redundant_groups(
    cells: CellData,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    basis: str = "centered",
    min_overlap: int = DEFAULT_MIN_OVERLAP,
    fdr: float | None = DEFAULT_FDR,
) -> tuple[list[list[str]], RedundancyInfo]:
    """Groups of prompt ids whose judgments correlate above ``threshold``.

    Args:
        cells: the cells of one dimension (ungrouped or grouped; prompts are used).
        threshold: a pair is redundant when its correlation exceeds this ...
        basis: ``"centered"`` (default) or ``"raw"`` (the paper's literal rule).
        min_overlap: ... and both prompts were judged in at least this many comparisons ...
        fdr: ... and the correlation is significantly positive at this false
            discovery rate (Benjamini-Hochberg); None drops this condition.

    Returns:
        (groups, info): groups as lists of prompt ids (size >= 2), and the
        correlation matrix with the redundant pairs.

    References:
        Sedoc & Ungar (2020), section 4.2 (footnote 3) and section 6.2.
    """
    values, mask = prompt_rating_matrix(cells)
    groups, info = redundant_pairs_matrix(
        values, mask, threshold=threshold, basis=basis, min_overlap=min_overlap, fdr=fdr
    )
    return [[cells.prompts[i] for i in g] for g in groups], info
