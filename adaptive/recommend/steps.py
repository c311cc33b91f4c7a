"""The steps of a recommendation, each a small function on integer-indexed arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from adaptive.recommend.state import (
    BURN_IN,
    CLOSEST,
    DEFAULT_BURN_IN,
    DEFAULT_NEED_SHARE,
    OUT_OF_SIGHT,
    REPEAT,
    SHOW_A,
    SHOW_B,
    TARGETED,
    CellState,
    RecommenderState,
    Request,
)
from adaptive.stopping.decisions import Decisions


def decided_mask(snapshot: RecommenderState) -> np.ndarray:
    """(C,) True where the comparison's decision is closed (:mod:`adaptive.stopping.decisions`)."""
    assert snapshot.decisions is not None, "the snapshot carries no decisions"
    return snapshot.decisions.closed


def target_mask(snapshot: RecommenderState, request: Request) -> np.ndarray:
    """(C,) the comparisons to spend on: named targets, else every open one."""
    if request.targets is not None:
        mask = np.zeros(snapshot.num_comparisons, bool)
        mask[np.asarray(request.targets, np.int64)] = True
    else:
        mask = ~decided_mask(snapshot)
    if request.dimensions is not None:
        mask &= np.isin(snapshot.dimension, np.asarray(request.dimensions))
    return mask


def adjacent_comparisons(snapshot: RecommenderState) -> tuple[int, ...]:
    """Comparisons of systems adjacent in each dimension's leaderboard (by estimated strength)."""
    out = []
    for d in range(snapshot.strength.shape[0]):
        s = snapshot.strength[d]
        ranked = [int(i) for i in np.argsort(-np.nan_to_num(s, nan=-np.inf)) if np.isfinite(s[i])]
        for hi, lo in zip(ranked[:-1], ranked[1:]):
            out += _find_pairs(snapshot, d, [(hi, lo)])
    return tuple(sorted(set(out)))


def tier_comparisons(snapshot: RecommenderState, tier: Sequence[int]) -> tuple[int, ...]:
    """Comparisons between two systems of one tier (system indices), in every dimension."""
    tier = list(tier)
    pairs = [(a, b) for i, a in enumerate(tier) for b in tier[i + 1 :]]
    out = []
    for d in range(snapshot.strength.shape[0]):
        out += _find_pairs(snapshot, d, pairs)
    return tuple(sorted(set(out)))


def _find_pairs(snapshot: RecommenderState, dim: int, pairs) -> list[int]:
    out = []
    for a, b in pairs:
        hit = np.flatnonzero(
            (snapshot.dimension == dim)
            & (
                ((snapshot.pair_a == a) & (snapshot.pair_b == b))
                | ((snapshot.pair_a == b) & (snapshot.pair_b == a))
            )
        )
        out += [int(h) for h in hit]
    return out


def new_system_mask(snapshot: RecommenderState, request: Request) -> np.ndarray:
    """(C,) False for pairings of a new system that are not among its allowed opponents.

    A system with fewer than ``new_system_judgments`` judgments in a dimension
    is paired only with the ``new_system_opponents`` established systems
    closest in estimated strength; with no strength estimate (no data), with
    systems spread evenly over the strength range.
    """
    allowed = np.ones(snapshot.num_comparisons, bool)
    k = request.new_system_opponents
    for d in range(snapshot.strength.shape[0]):
        in_dim = snapshot.dimension == d
        counts = snapshot.system_judgments[d]
        strength = snapshot.strength[d]
        present = np.unique(np.concatenate([snapshot.pair_a[in_dim], snapshot.pair_b[in_dim]]))
        new = [s for s in present if counts[s] < request.new_system_judgments]
        established = np.array([s for s in present if s not in new], np.int64)
        if not new or len(established) <= k:
            continue
        est_strength = np.nan_to_num(strength[established], nan=0.0)
        order = established[np.argsort(est_strength, kind="stable")]
        for s in new:
            if counts[s] == 0 or not np.isfinite(strength[s]):
                pos = np.unique(np.round(np.linspace(0, len(order) - 1, k)).astype(np.int64))
                opponents = set(order[pos].tolist())
            else:
                dist = np.abs(np.nan_to_num(strength[order], nan=0.0) - strength[s])
                opponents = set(order[np.argsort(dist, kind="stable")[:k]].tolist())
            involves = in_dim & ((snapshot.pair_a == s) | (snapshot.pair_b == s))
            other = np.where(snapshot.pair_a == s, snapshot.pair_b, snapshot.pair_a)
            # two new systems may meet each other; an established opponent must be allowed
            ok = np.isin(other, list(opponents)) | np.isin(other, new)
            allowed &= ~involves | ok
    return allowed


def candidate_mask(
    snapshot: RecommenderState, cells: CellState, request: Request, targets: np.ndarray
) -> np.ndarray:
    """(C, P) cells that may be handed out: available, annotatable, of a target comparison."""
    comparison_ok = targets & new_system_mask(snapshot, request)
    mask = (cells.available > 0) & comparison_ok[:, None]
    if cells.annotatable is not None:
        mask &= cells.annotatable
    if request.exclude is not None:
        mask &= ~request.exclude
    return mask


def allocate(
    rng: np.random.Generator,
    decisions: Decisions,
    candidates: np.ndarray,
    judged: np.ndarray,
    size: int,
    *,
    targeted: np.ndarray | None = None,
    burn_in: int = DEFAULT_BURN_IN,
    allow_repeats: bool = True,
    max_per_cell: int = 1,
    available: np.ndarray | None = None,
    need_share: float = DEFAULT_NEED_SHARE,
    rows: np.ndarray | None = None,
    unclosable: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split a batch over the open comparisons, closest to a decision first (LUCB-style).

    Each comparison has a remaining need for this batch: ``burn_in`` minus its
    observations while it has fewer (so every open comparison gets an
    estimate), else the judgments its decision could still need if its lead is
    as large as its data plausibly allow (``decisions.needed_optimistic``, an
    upper confidence bound on how soon it closes: LUCB's optimism, so that a
    comparison that looked weak by chance early is not starved; ``needed`` when
    absent). One judgment at a time goes to the comparison with
    the smallest remaining need (burn-in first); a comparison whose need is met
    for this batch gets more only when every other need is met, and those with
    no closure in sight (``needed`` infinite) come last, least observed first.
    Within a comparison, a fresh prompt (a cell nobody judged yet, in random
    order) per judgment; judged cells only when fresh ones run out and
    ``allow_repeats``.

    Only the rows of the comparisons picked are read (their prompts are put in
    order when a comparison is first picked), so a batch costs its picks and the
    comparisons, not the (comparison x prompt) table: pass ``rows``, the (C,)
    comparisons that may be served (``candidates`` then only needs to be right
    on those rows), to skip the one pass that finds them.

    Without ``allow_repeats`` (the prompt is the decision's unit), a comparison past its
    burn-in whose need at its most favourable plausible share
    (``decisions.needed_possible``) exceeds its fresh prompts is not served: the campaign's
    prompts cannot close it (a targeted one still is). Pass ``unclosable``, a (C,) int
    array of -1, to learn which: each such comparison's fresh prompts are written in place.

    Returns:
        (comparison, prompt, reason, need) of the picks, in order of choice;
        ``reason`` codes index :data:`REASONS`, ``need`` is the comparison's
        estimated remaining judgments before this batch (inf: not in sight).
    """
    num_c = candidates.shape[0]
    per_cell = max_per_cell if allow_repeats else 1  # without repeats a cell appears at most once
    has: np.ndarray = np.array(candidates.any(axis=1) if rows is None else rows, bool)
    tie_break = cast(np.ndarray, rng.random(num_c))  # (C,): a size is given
    order: dict[int, np.ndarray] = {}  # per comparison picked, its prompts in order of use
    left: dict[tuple[int, int], int] = {}  # judgments a cell may still take in this batch

    def prompts_of(c: int) -> np.ndarray:
        row = candidates[c]
        is_fresh = row & (judged[c] == 0)
        f = np.flatnonzero(is_fresh)
        r = np.flatnonzero(row & ~is_fresh) if allow_repeats else np.zeros(0, np.int64)
        # repeats: least judged first
        r = r[np.lexsort((rng.random(len(r)), judged[c, r]))]
        return np.concatenate([rng.permutation(f), r]).astype(np.int64)

    pos = np.zeros(num_c, np.int64)
    obs = decisions.num_obs.astype(np.float64)
    needed = decisions.needed.astype(np.float64)
    soon = needed if decisions.needed_optimistic is None else decisions.needed_optimistic
    soon = np.asarray(soon, np.float64)
    in_burn = obs < burn_in
    # the need is an estimate: give a comparison part of it per batch, so that a batch
    # does not overshoot a decision that closes sooner than estimated
    need = np.where(in_burn, burn_in - obs, np.ceil(soon * need_share))
    stage = np.where(in_burn, 0, np.where(np.isfinite(soon), 1, 2)).astype(np.int64)
    given = np.zeros(num_c, np.float64)
    targeted = np.zeros(num_c, bool) if targeted is None else targeted
    if not allow_repeats:
        # never serve what the remaining prompts cannot close (say so through ``unclosable``)
        best = decisions.needed_possible
        best = soon if best is None else np.asarray(best, np.float64)
        check = np.flatnonzero(has & ~in_burn & ~targeted)
        fresh = (candidates[check] & (judged[check] == 0)).sum(axis=1)
        # the need is read off a grid of 1% steps: give it that much benefit of the doubt
        short = np.ceil(best[check] * 0.99) > fresh
        has[check[short]] = False
        if unclosable is not None:
            unclosable[check[short]] = fresh[short]
    comps: list[int] = []
    prompts: list[int] = []
    reasons: list[int] = []
    needs: list[float] = []
    picked: set[tuple[int, int]] = set()
    while len(comps) < size:
        if not has.any():
            break
        remaining = need - given
        met = (stage < 2) & (remaining <= 0)
        # key: burn-in, then finite needs, then more of the closest (needs met for this
        # batch), then those with no decision in sight
        tier = np.where(met, 2, np.where(stage == 2, 3, stage))
        within = np.where(stage == 2, obs + given, np.where(met, given, remaining))
        key = np.lexsort((tie_break, within, tier, ~has))
        c = int(key[0])
        if c not in order:
            order[c] = prompts_of(c)
        if pos[c] >= len(order[c]):  # ``rows`` named a comparison without candidates
            has[c] = False
            continue
        p = int(order[c][pos[c]])
        if (c, p) not in left:
            cap = per_cell if available is None else min(per_cell, int(available[c, p]))
            left[c, p] = cap
        left[c, p] -= 1
        if left[c, p] <= 0:
            pos[c] += 1
            has[c] = pos[c] < len(order[c])
        repeat = judged[c, p] > 0 or (c, p) in picked
        picked.add((c, p))
        if targeted[c]:
            reason = TARGETED
        elif repeat:
            reason = REPEAT
        else:
            reason = (BURN_IN, CLOSEST, CLOSEST, OUT_OF_SIGHT)[int(tier[c])]
        comps.append(c)
        prompts.append(p)
        reasons.append(reason)
        needs.append(float(needed[c]))
        given[c] += 1.0
        if stage[c] == 0 and given[c] >= need[c]:
            # burn-in filled for this batch: its need is unknown until the data arrive
            stage[c] = 3
    return (
        np.asarray(comps, np.int64),
        np.asarray(prompts, np.int64),
        np.asarray(reasons, np.int64),
        np.asarray(needs, np.float64),
    )


def assign_order(
    rng: np.random.Generator, cells: CellState, comparison: np.ndarray, prompt: np.ndarray
) -> np.ndarray:
    """Which response each pick shows first, keeping the two orders balanced per cell.

    A cell shows first the response it has shown first less often so far
    (counting earlier picks of this batch); cells with equal counts take
    sides from a shuffled, alternating sequence, so the batch as a whole is
    balanced too.
    """
    counts: dict[tuple[int, int], list[int]] = {}
    out = np.zeros(len(comparison), np.int64)
    ties = np.resize(np.array([SHOW_A, SHOW_B]), len(comparison))
    rng.shuffle(ties)
    for k, (c, p) in enumerate(zip(comparison.tolist(), prompt.tolist())):
        ab = counts.setdefault((c, p), [int(cells.shown_a[c, p]), int(cells.shown_b[c, p])])
        side = SHOW_A if ab[0] < ab[1] else SHOW_B if ab[1] < ab[0] else int(ties[k])
        out[k] = side
        ab[side] += 1
    return out
