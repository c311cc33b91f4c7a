"""The annotation policies a replay compares (:mod:`adaptive.simulation.replay` runs them).

A policy is ``policy(rng, view, size) -> (comparison, prompt)``: the cells it asks
for next, given what it may see after a batch (:class:`View`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from adaptive.recommend import allocate
from adaptive.stopping.decisions import Decisions

if TYPE_CHECKING:
    from adaptive.simulation.replay_config import ReplayConfig

POLICIES = ("adaptive", "uniform", "round_robin", "arena")


class View(NamedTuple):
    """What a policy sees after a batch (read-only: the replay keeps the arrays running)."""

    decisions: Decisions
    useful: np.ndarray  # (C, P) cells whose next judgment can move a decision
    left: np.ndarray  # (C, P) judgments left in the log
    judged: np.ndarray  # (C, P) judgments drawn so far
    stats: np.ndarray  # (C, 3): observations, sum, sum of squares of the signed judgments
    step: int
    useful_count: np.ndarray  # (C,) useful cells per comparison
    relevant: np.ndarray | None = None  # (C,) with a question: what can change its answer


def _random_useful(rng, view: View, size: int, rows: np.ndarray | None = None):
    mask = view.useful.copy()
    if rows is not None:
        keep = np.zeros(mask.shape[0], bool)
        keep[rows] = True
        mask &= keep[:, None]
    flat = np.flatnonzero(mask)
    picks = rng.permutation(flat)[:size]
    return np.unravel_index(picks.astype(np.int64), mask.shape)


def _servable(view: View) -> np.ndarray:
    """(C,) open comparisons with useful cells (with a question, only those it needs)."""
    rows = ~view.decisions.closed & (view.useful_count > 0)
    return rows if view.relevant is None else rows & view.relevant


def uniform_policy(rng, view: View, size: int):
    """Cells at random over every comparison (closed ones too)."""
    return _random_useful(rng, view, size)


def round_robin_policy(rng, view: View, size: int):
    """The open comparisons in turn, a random fresh cell of each."""
    open_ = np.flatnonzero(_servable(view))
    comps: list[int] = []
    prompts: list[int] = []
    taken = np.zeros_like(view.useful)
    start = (view.step * size) % max(len(open_), 1)
    turn = 0
    while len(comps) < size and len(open_):
        c = int(open_[(start + turn) % len(open_)])
        turn += 1
        options = np.flatnonzero(view.useful[c] & ~taken[c])
        if len(options) == 0:
            open_ = open_[open_ != c]
            continue
        p = int(rng.choice(options))
        taken[c, p] = True
        comps.append(c)
        prompts.append(p)
    return np.asarray(comps, np.int64), np.asarray(prompts, np.int64)


def arena_policy(rng, view: View, size: int):
    """Chatbot Arena's rule: comparisons by expected interval-width reduction, over all."""
    n, s1, s2 = view.stats[:, 0], view.stats[:, 1], view.stats[:, 2]
    var = np.where(n > 1, (s2 - s1**2 / np.maximum(n, 1)) / np.maximum(n - 1, 1), 1.0)
    var = np.maximum(var, 1e-3)
    n_ = np.maximum(n, 1.0)
    weight = np.sqrt(var / n_) - np.sqrt(var / (n_ + 1.0))
    taken = np.zeros_like(view.useful)
    comps, prompts = [], []
    for _ in range(size):
        ok = (view.useful & ~taken).any(axis=1)
        if not ok.any():
            break
        w = np.where(ok, weight, 0.0)
        w = w / w.sum() if w.sum() > 0 else ok / ok.sum()
        c = int(rng.choice(len(w), p=w))
        p = int(rng.choice(np.flatnonzero(view.useful[c] & ~taken[c])))
        taken[c, p] = True
        comps.append(c)
        prompts.append(p)
    return np.asarray(comps, np.int64), np.asarray(prompts, np.int64)


def adaptive_policy(config: ReplayConfig) -> Callable:
    """The recommender's allocation (:func:`adaptive.recommend.allocate`)."""

    def policy(rng, view: View, size: int):
        # the useful cells of the open comparisons (allocate reads only the rows it serves)
        comp, prompt, _, _ = allocate(
            rng,
            view.decisions,
            view.useful,
            view.judged,
            size,
            burn_in=config.burn_in,
            allow_repeats=config.rule.unit == "judgment",
            available=view.left,
            need_share=config.need_share,
            rows=_servable(view),
        )
        return comp, prompt

    return policy


def oracle_policy(true_net: np.ndarray) -> Callable:
    """The reference that knows the truth: largest true |Δ| first, each until it closes."""
    order = np.argsort(-np.abs(np.asarray(true_net, np.float64)), kind="stable")

    def policy(rng, view: View, size: int):
        comps: list[int] = []
        prompts: list[int] = []
        serve = _servable(view)
        for c in order:
            if not serve[c] or len(comps) >= size:
                continue
            options = rng.permutation(np.flatnonzero(view.useful[c]))[: size - len(comps)]
            comps += [int(c)] * len(options)
            prompts += options.tolist()
        return np.asarray(comps, np.int64), np.asarray(prompts, np.int64)

    return policy


def policy_fn(name: str, config: ReplayConfig) -> Callable:
    if name == "adaptive":
        return adaptive_policy(config)
    table = {"uniform": uniform_policy, "round_robin": round_robin_policy, "arena": arena_policy}
    if name not in table:
        raise ValueError(f"unknown policy {name!r}; expected one of {POLICIES}")
    return table[name]
