"""The rows every answer is made of, from a posterior snapshot: pairs, leaderboard, items.

Names at the edge: a :class:`adaptive.estimation.snapshot.Snapshot` holds integer-indexed
draws and the names they stand for; these turn it into the rows the API returns
(and the dashboard shows), one dict per pair, system or prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from adaptive.estimation.snapshot import Snapshot


def pair_rows(
    snapshot: Snapshot,
    pairs: Sequence[tuple[str, str]] | None = None,
    *,
    all_pairs: bool = False,
    rule: str = "holm",
    alpha: float = 0.05,
    level: float = 0.95,
) -> list[dict[str, Any]]:
    """Significance of system pairs, theta = s_B - s_A (> 0: B better), in the orientation asked.

    The multiplicity adjustment is applied over the family of every compared pair
    (or every pair of systems with ``all_pairs``) plus the pairs asked for, and
    the rows of ``pairs`` (or of the whole family) are returned.

    The verdict is the one `evalset significance` gives (``adaptive.estimation.significance``):
    ``significant_adjusted`` needs the model's adjusted verdict on theta
    (``model_adjusted``) and the data's, a prompts-as-units t-test of the pair's own
    mean signed judgment adjusted over the same family (``data_adjusted``), in the same
    direction. Each row carries the data's own Δ, ``observed_net``, with its
    prompts-as-units t interval at ``level`` (``observed_ci_low``, ``observed_ci_high``;
    :func:`adaptive.stopping.evidence.net_preference`), the effect users read. The model alone
    flagged a null campaign (every system equal) in 33-35% of campaigns
    (docs/statistics.md). A pair never compared has no data of its own:
    ``data_adjusted`` is None and it is never ``significant_adjusted`` (its
    ``model_adjusted`` is the leaderboard's indirect evidence alone). A snapshot stored
    before it kept the observed values answers with the model alone
    (``data_adjusted`` None); the next re-estimation replaces it. The model's
    ``p_two_sided`` is :func:`tail_probability` of the draws. ``ci_mcse`` and
    ``verdict_settled`` say whether the snapshot's finite draws settle ``significant``
    (:func:`adaptive.estimation.significance.settled_verdicts`).

    Args:
        snapshot: a per-system snapshot.
        pairs: (A, B) to report; default: the family.
        all_pairs: make the family every unordered pair of systems, not only compared ones.
        rule: ``holm``, ``bonferroni`` or ``none`` (see ``adaptive.estimation.significance``).
    """
    family, wanted, by_key = _pair_family(snapshot, pairs, all_pairs)
    out_pairs = wanted if pairs is not None else family
    if not family or not out_pairs:
        return []
    fam = np.array(family, dtype=np.int64).reshape(-1, 2)
    v = _verdicts(snapshot, fam, rule, alpha, level)
    keys = np.array([by_key[frozenset(p)] for p in out_pairs], dtype=np.int64)
    signs = np.array([1.0 if tuple(fam[k]) == p else -1.0 for k, p in zip(keys, out_pairs)])
    oriented, end_mcse, settled = _oriented(v.theta, v.stats, keys, signs, level)
    counts = _pair_counts(snapshot)
    rows = []
    for r, (a, b) in enumerate(out_pairs):
        k, sign = int(keys[r]), float(signs[r])
        p_b = v.stats["p_b_better"][k] if sign > 0 else 1.0 - v.stats["p_b_better"][k]
        nj, npr = counts.get(frozenset((a, b)), (0, 0))
        rows.append(
            {
                "dimension": snapshot.dimension,
                "system_a": snapshot.systems[a],
                "system_b": snapshot.systems[b],
                "mean": float(oriented["mean"][r]),
                "sd": float(v.stats["sd"][k]),
                "ci_low": float(oriented["ci_low"][r]),
                "ci_high": float(oriented["ci_high"][r]),
                "p_b_better": float(p_b),
                "significant": bool(v.stats["significant"][k]),
                "ci_mcse": float(end_mcse[r]) if np.isfinite(end_mcse[r]) else None,
                "verdict_settled": bool(settled[r]),
                "p_two_sided": float(v.stats["p_two_sided"][k]),
                "significant_adjusted": bool(v.adjusted[k]),
                "model_adjusted": bool(v.model_adjusted[k]),
                **_data_fields(v.data, k, sign),
                "adjust_rule": rule if v.data is None else f"{rule} on the model and on the data",
                "family_size": int(len(family)),
                "n_judgments": nj,
                "n_prompts": npr,
            }
        )
    return rows


def _pair_counts(snapshot: Snapshot) -> dict[frozenset[int], tuple[int, int]]:
    """Each compared pair's judgments and prompts in the snapshot."""
    return {
        frozenset((int(a), int(b))): (int(nj), int(npr))
        for a, b, nj, npr in zip(
            snapshot.pair_a, snapshot.pair_b, snapshot.pair_judgments, snapshot.pair_prompts
        )
    }


class _Verdicts(NamedTuple):
    """The family's draws of theta, their summaries and the adjusted verdicts."""

    theta: np.ndarray  # (D, F) s_B - s_A of each family pair, oriented as the family
    stats: dict[str, np.ndarray]  # adaptive.estimation.significance.summarize_draws
    model_adjusted: np.ndarray  # (F,) the model's adjusted verdict
    data: _DataHalf | None  # the data's half (None: a snapshot without observed values)
    adjusted: np.ndarray  # (F,) the model's and the data's, in the same direction


def _verdicts(
    snapshot: Snapshot, fam: np.ndarray, rule: str, alpha: float, level: float
) -> _Verdicts:
    """The family's verdicts: the model's on theta and (when the snapshot kept them) the
    data's, adjusted over the family ``fam`` ((F, 2) system indices)."""
    from adaptive.estimation.significance import adjusted_verdicts, summarize_draws

    theta = snapshot.skill[:, fam[:, 1]].astype(np.float64) - snapshot.skill[:, fam[:, 0]]
    stats = summarize_draws(theta, level)
    stats["p_two_sided"] = tail_probability(theta, stats["p_two_sided"])
    model_adjusted = adjusted_verdicts(stats["p_two_sided"], rule, alpha)
    data = _data_verdicts(snapshot, fam, rule, alpha, level)
    if data is None:
        return _Verdicts(theta, stats, model_adjusted, None, model_adjusted)
    same_sign = np.sign(stats["mean"]) == np.sign(data.observed)
    return _Verdicts(theta, stats, model_adjusted, data, model_adjusted & data.adjusted & same_sign)


def _oriented(
    theta: np.ndarray,
    stats: dict[str, np.ndarray],
    keys: np.ndarray,
    signs: np.ndarray,
    level: float,
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """The rows' mean and interval in the orientation asked, the Monte Carlo error of the
    interval end nearest 0 (as `evalset significance` computes it; the snapshot's draws as
    one chain: a full fit's are thinned across its chains) and whether it settles the verdict."""
    from adaptive.estimation.significance import interval_end_mcse, settled_verdicts

    low_k, high_k = stats["ci_low"][keys], stats["ci_high"][keys]
    oriented = {
        "mean": signs * stats["mean"][keys],
        "ci_low": np.where(signs > 0, low_k, -high_k),
        "ci_high": np.where(signs > 0, high_k, -low_k),
    }
    end_mcse = interval_end_mcse((theta[:, keys] * signs)[None], level)
    return oriented, end_mcse, settled_verdicts(oriented, end_mcse)


def _pair_family(
    snapshot: Snapshot, pairs: Sequence[tuple[str, str]] | None, all_pairs: bool
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], dict[frozenset[int], int]]:
    """:func:`pair_rows`' family (the compared pairs as stored, then every other pair with
    ``all_pairs``, then the pairs asked for that it lacks), the pairs asked for as indices,
    and each pair's place in the family.

    Raises:
        KeyError: a pair names an unknown system.
        ValueError: a system compared with itself.
    """
    index = {s: i for i, s in enumerate(snapshot.systems)}
    family: list[tuple[int, int]] = [
        (int(a), int(b)) for a, b in zip(snapshot.pair_a, snapshot.pair_b)
    ]
    if all_pairs:
        n = len(snapshot.systems)
        seen = {frozenset(p) for p in family}
        family += [
            (i, j) for i in range(n) for j in range(i + 1, n) if frozenset((i, j)) not in seen
        ]
    wanted: list[tuple[int, int]] = []
    for a, b in pairs or ():
        for name in (a, b):
            if name not in index:
                raise KeyError(f"unknown system {name!r}")
        if a == b:
            raise ValueError("a system compared with itself")
        wanted.append((index[a], index[b]))
    by_key = {frozenset(p): k for k, p in enumerate(family)}
    for p in wanted:
        if frozenset(p) not in by_key:
            by_key[frozenset(p)] = len(family)
            family.append(p)
    return family, wanted, by_key


#: fewer draws than this on the smaller side of 0 leave the tail to the normal approximation
MIN_TAIL_DRAWS = 5


def tail_probability(theta: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """(F,) two-sided tail probability of 0 under each column of (D, F) draws.

    ``counted`` is the share of draws on the smaller side (twice it), which cannot fall
    below 1 / (D + 1): with a snapshot's 500-1,000 draws Holm at 0.05 could then flag
    nothing once a family has more than 25-50 pairs. Where fewer than
    :data:`MIN_TAIL_DRAWS` draws lie on the smaller side, the count says little, and the
    tail comes from the normal approximation of the same draws, 2 Phi(-|mean| / sd) (a
    fast snapshot's draws are Gaussian up to the mixture over its grids).

    Example:
        >>> d = np.random.default_rng(0).normal([0.2, 5.0], 1.0, (1000, 2))
        >>> p = tail_probability(d, np.array([0.84, 1 / 1001]))
        >>> float(p[0]), bool(1e-8 < p[1] < 1e-5)
        (0.84, True)
    """
    from scipy import stats as sps

    smaller = np.minimum((theta > 0).sum(axis=0), (theta < 0).sum(axis=0))
    sd = theta.std(axis=0, ddof=1) if theta.shape[0] > 1 else np.zeros(theta.shape[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sd > 0, np.abs(theta.mean(axis=0)) / sd, 0.0)
    return np.where(smaller < MIN_TAIL_DRAWS, 2.0 * sps.norm.sf(z), counted)


class _DataHalf(NamedTuple):
    """The data's half of every family pair's row (oriented as the family; NaN: no data)."""

    adjusted: np.ndarray
    observed: np.ndarray
    p: np.ndarray
    se: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray


def _data_verdicts(
    snapshot: Snapshot, fam: np.ndarray, rule: str, alpha: float, level: float
) -> _DataHalf | None:
    """The data's adjusted verdicts over the family ``fam`` ((F, 2) system indices), and each
    pair's observed net preference (oriented as ``fam``; NaN: never compared), p-value,
    standard error and ``level`` t interval (NaN: fewer than two prompts, or a snapshot
    stored before it kept the standard errors).

    None for a snapshot without the observed values. A pair never compared enters the
    family with p = 1, so it is never significant and the adjustment is the family's.
    ``fam`` is :func:`pair_rows`' family: the stored pairs first, as stored.
    """
    from adaptive.estimation.significance import adjusted_verdicts
    from adaptive.stopping.evidence import t_interval

    if snapshot.pair_observed is None or snapshot.pair_observed_p is None:
        return None
    # the family starts with the snapshot's compared pairs, in their stored orientation; the
    # pairs after them were never compared
    num = len(snapshot.pair_a)
    judged = snapshot.pair_judgments > 0
    observed = np.full(len(fam), np.nan)
    p = np.ones(len(fam))
    se = np.full(len(fam), np.nan)
    prompts = np.zeros(len(fam))
    observed[:num] = np.where(judged, snapshot.pair_observed, np.nan)
    p[:num] = np.where(judged, snapshot.pair_observed_p, 1.0)
    if snapshot.pair_observed_se is not None:
        se[:num] = np.where(judged, snapshot.pair_observed_se, np.nan)
    prompts[:num] = snapshot.pair_prompts
    low, high = t_interval(observed, se, prompts, level)
    return _DataHalf(adjusted_verdicts(p, rule, alpha), observed, p, se, low, high)


def _data_fields(data: _DataHalf | None, k: int, sign: float) -> dict[str, Any]:
    """The data's half of row ``k`` in the orientation asked (None where there are no data)."""

    def number(x: float) -> float | None:
        return float(x) if np.isfinite(x) else None

    if data is None or np.isnan(data.observed[k]):
        return {
            "data_adjusted": None,
            "observed_net": None,
            "observed_se": None,
            "observed_ci_low": None,
            "observed_ci_high": None,
            "observed_p": None,
        }
    low, high = data.ci_low[k], data.ci_high[k]
    if sign < 0:
        low, high = -high, -low
    return {
        "data_adjusted": bool(data.adjusted[k]),
        "observed_net": float(sign * data.observed[k]),
        "observed_se": number(data.se[k]),
        "observed_ci_low": number(low),
        "observed_ci_high": number(high),
        "observed_p": float(data.p[k]),
    }


def leaderboard_rows(snapshot: Snapshot, *, level: float = 0.95) -> list[dict[str, Any]]:
    """Per-system skill with its interval, mean rank and P(best), best first.

    A system with no judgments yet is listed last, unranked (rank, mean rank
    and P(best) null): its skill is only the prior.
    """
    skill = snapshot.skill.astype(np.float64)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(skill, [tail, 1.0 - tail], axis=0)
    compared = set(snapshot.pair_a.tolist()) | set(snapshot.pair_b.tolist())
    judged = np.array(sorted(compared), np.int64)
    # rank 1 = best, per draw, among the systems with judgments
    ranks = np.full(skill.shape, np.nan)
    if judged.size:
        ranks[:, judged] = (-skill[:, judged]).argsort(axis=1).argsort(axis=1) + 1
    rows: list[dict[str, Any]] = [
        {
            "dimension": snapshot.dimension,
            "system_id": name,
            "mean": float(skill[:, i].mean()),
            "sd": float(skill[:, i].std(ddof=1)) if skill.shape[0] > 1 else 0.0,
            "ci_low": float(low[i]),
            "ci_high": float(high[i]),
            "mean_rank": float(ranks[:, i].mean()) if i in compared else None,
            "p_best": float((ranks[:, i] == 1).mean()) if i in compared else None,
            "judged": i in compared,
        }
        for i, name in enumerate(snapshot.systems)
    ]
    rows.sort(key=lambda r: (not r["judged"], -r["mean"]))
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank if row["judged"] else None
    return rows


def item_rows(snapshot: Snapshot) -> list[dict[str, Any]]:
    """Per prompt (or redundancy group): discrimination alpha and thresholds b, mean and sd."""
    alpha = snapshot.alpha.astype(np.float64)
    b = snapshot.b.astype(np.float64)
    ddof = 1 if alpha.shape[0] > 1 else 0
    rows: list[dict[str, Any]] = []
    for j, name in enumerate(snapshot.items):
        rows.append(
            {
                "dimension": snapshot.dimension,
                "item_id": name,
                "alpha_mean": float(alpha[:, j].mean()),
                "alpha_sd": float(alpha[:, j].std(ddof=ddof)),
                "b_mean": [float(x) for x in b[:, j].mean(axis=0)],
                "b_sd": [float(x) for x in b[:, j].std(axis=0, ddof=ddof)],
            }
        )
    rows.sort(key=lambda r: -r["alpha_mean"])
    return rows


__all__ = ["item_rows", "leaderboard_rows", "pair_rows"]
