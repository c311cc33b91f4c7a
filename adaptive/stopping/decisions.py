"""A decision for every comparison, valid at every look, from the comparison's own judgments.

Each comparison "A vs B" ends in one of four states:

* ``B better`` / ``A better``: the sign of the net preference is established;
* ``equivalent``: the net preference lies inside the region of practical
  equivalence ``|Δ| < margin``;
* ``undecided``: not yet, with an estimate of the judgments likely still needed.

**The effect.** Δ is the expected signed judgment (+1 B, -1 A, 0 tie) averaged
over the comparison's prompts, in [-1, 1]. It is defined on the data, so it
means the same at 5% of a campaign as at its end, whatever model is fitted.

**Why not the model's verdict.** With the graded-response model's shared prompt
parameters, a comparison's posterior moves when *other* comparisons get more or
fewer judgments, and on real logs the model can disagree in sign with a
comparison's own judgments. A decision here is a function of the comparison's
own judgments only, in the order they arrived.

**The tests** (all anytime-valid: the error bound holds however often anyone
looks and whenever they stop, by Ville's inequality):

* *Sign.* Among non-tie judgments, q = P(B | not a tie); B better <=> q > 1/2
  <=> Δ > 0. Two one-sided beta-mixture e-processes on the non-tie judgments,
  H0: q <= 1/2 and H0: q >= 1/2 (Robbins 1970; the mixture of likelihood ratios
  against q = 1/2 over a Beta(a, a) prior restricted to the alternative side,
  a supermartingale under every q of the null). Each rejects at ``2 / alpha_c``,
  i.e. at level ``alpha_c / 2``. Ties carry no information on the sign and are
  not used by it.
* *Equivalence.* A two-sided confidence sequence for Δ at level ``alpha_c``
  (each side ``alpha_c / 2``): the predictable plug-in empirical-Bernstein CS
  of Waudby-Smith & Ramdas (2023, Theorem 2), running intersection. Equivalent
  when it lies inside ``(-margin, margin)``; when Δ >= margin only its upper
  side can make that wrong (``alpha_c / 2``), and symmetrically.

So each comparison errs with probability at most ``alpha_c``: when Δ = 0 only a
sign can be wrong (two tests at ``alpha_c / 2``); when |Δ| >= margin only the
opposite sign (``alpha_c / 2``) or equivalence (``alpha_c / 2``).

**Across the campaign** (``correction``): ``bonferroni`` (default) splits
``alpha`` evenly, ``alpha_c = alpha / num_tests``, so the probability that *any*
comparison of the campaign ever gets a wrong decision is at most ``alpha``
(family-wise, at every look). ``num_tests`` should be fixed when the campaign
is planned: it is the size of the comparison family the team declares
(:mod:`adaptive.stopping.rule`; default: the comparisons present). ``e-holm`` closes what
Bonferroni closes and, at every look (each :func:`update`), what closed testing with
the comparisons' e-values adds (:func:`adaptive.stopping.rule.e_holm_rejections`): family-wise
at every look too; its decisions depend on when one looks (a look is a batch), so
``decide`` on all judgments at once is one look. ``none`` uses ``alpha`` per comparison.

**The unit of replication** (``unit``):

* ``prompt`` (default): the first judgment of each (comparison, prompt) cell,
  in arrival order; later judgments of a cell are kept for the model but not
  used by the decision. Judgments of one cell share the same two responses and
  are correlated; one per prompt makes the observations independent draws over
  prompts and annotators, so the claim holds for *new prompts* drawn like
  these. The recommender serves a fresh prompt per judgment, so a served
  campaign loses nothing until its prompts run out.
* ``judgment``: every judgment counts. Valid for the *prompts in this set*
  when cells are drawn at random (each judgment an independent draw of a
  random cell); anti-conservative for new prompts when cells are judged
  several times (design effects of 1.35-3.9 on the bundled logs).

References:
    Ville (1939); Robbins (1970), "Statistical methods related to the law of the
    iterated logarithm"; Howard, Ramdas, McAuliffe & Sekhon (2021), Ann. Statist.
    49(2); Waudby-Smith & Ramdas (2023), "Estimating means of bounded random
    variables by betting", JRSS-B 86(1), Theorem 2 (PrPl-EB).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from adaptive.stopping.cell_tally import CellTally, tally_cells
from adaptive.stopping.evidence import log_share_evalue, log_sign_evalue, share_lower_bound
from adaptive.stopping.needed import NEEDED_HORIZON as NEEDED_HORIZON  # the horizon of ``needed``
from adaptive.stopping.needed import needed_equivalence, needed_sign
from adaptive.stopping.rule import CORRECTIONS as CORRECTIONS
from adaptive.stopping.rule import DEFAULT_UNIT, e_holm_rejections
from adaptive.stopping.rule import LOG_E_CAP as LOG_E_CAP
from adaptive.stopping.rule import UNITS as UNITS
from adaptive.stopping.rule import DecisionRule as DecisionRule

#: outcome codes
UNDECIDED, B_BETTER, A_BETTER, EQUIVALENT = 0, 1, 2, 3
OUTCOME_NAMES = ("undecided", "B better", "A better", "equivalent")
#: the optimistic need (:attr:`Decisions.needed_optimistic`) continues the counts with the
#: leading side's share at this upper quantile of its Beta(1 + lead, 1 + trail) posterior
OPTIMISM = 0.8


class Decisions(NamedTuple):
    """Decisions of C comparisons at the current look (arrays of shape (C,)).

    Attributes:
        outcome: UNDECIDED, B_BETTER, A_BETTER or EQUIVALENT (final once closed).
        closed_at: judgments of the comparison (all of them, the cost) when it
            closed; 0 while undecided.
        net: Δ estimate from all the comparison's judgments: the mean over its
            prompts of each cell's mean signed judgment (:func:`net_preference`).
        cs_low, cs_high: anytime-valid confidence sequence for Δ (miss alpha_each / 2 each
            side): the interval of an ``equivalent`` decision.
        net_used: Δ estimate from the observations the decision used (``num_obs``), the
            centre of ``cs_low, cs_high``.
        b_share: B's share of the non-tie observations the sign test used (nan: none yet).
        share_low, share_high: the sign test's own confidence sequence for that share (each
            side alpha_each / 2): a comparison closes ``B better`` when ``share_low``
            reaches 1/2 (``A better``: ``share_high`` falls to it), and an open one's holds
            1/2 (with ``bonferroni`` or ``none``; e-Holm can close sooner). After a close
            the statistics keep running: an ``equivalent`` comparison may go on to show a
            share on one side of 1/2 (a difference inside the margin).
        e_b, e_a: current e-values against "B not better" / "A not better"
            (capped at exp(:data:`LOG_E_CAP`), about 1e300).
        num_obs: observations the decision used (one per prompt with unit=prompt).
        num_judgments: all judgments of the comparison.
        num_prompts: distinct prompts judged.
        needed: judgments likely still needed to close (0 when closed; inf when
            out of sight, e.g. Δ near 0 with a margin not reachable).
        alpha_each: error bound of each comparison.
        rule: the rule in words.
        needed_possible: the same in the best case (every further judgment decisive for
            the leading side, or Δ = 0 for equivalence; <= ``needed_optimistic``): a
            comparison whose unused prompts are fewer cannot close on them, and the
            recommender leaves it out.
        needed_optimistic: the same if the leading side's share of non-ties is at
            its upper :data:`OPTIMISM` posterior quantile (<= ``needed``). The
            recommender orders open comparisons by it (an upper confidence bound
            on how soon each could close, so that one which looked weak by chance
            early is not starved); ``needed`` is the estimate users read.
    """

    outcome: np.ndarray
    closed_at: np.ndarray
    net: np.ndarray
    cs_low: np.ndarray
    cs_high: np.ndarray
    e_b: np.ndarray
    e_a: np.ndarray
    num_obs: np.ndarray
    num_judgments: np.ndarray
    num_prompts: np.ndarray
    needed: np.ndarray
    alpha_each: float
    rule: str
    needed_optimistic: np.ndarray | None = None
    net_used: np.ndarray | None = None
    needed_possible: np.ndarray | None = None
    b_share: np.ndarray | None = None
    share_low: np.ndarray | None = None
    share_high: np.ndarray | None = None

    @property
    def closed(self) -> np.ndarray:
        return self.outcome != UNDECIDED

    def names(self) -> list[str]:
        return [OUTCOME_NAMES[int(o)] for o in self.outcome]


# ------------------------------------------------------------------ decisions


def decision_observations(
    comparison: np.ndarray, prompt: np.ndarray, unit: str = DEFAULT_UNIT
) -> np.ndarray:
    """(N,) True for the judgments a decision uses (arrival order is the array order).

    Example:
        >>> decision_observations(np.array([0, 0, 1, 0]), np.array([3, 3, 3, 4])).tolist()
        [True, False, True, True]
    """
    comparison = np.asarray(comparison, dtype=np.int64)
    prompt = np.asarray(prompt, dtype=np.int64)
    if unit == "judgment" or comparison.shape[0] == 0:
        return np.ones(comparison.shape[0], bool)
    if unit != "prompt":
        raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")
    key = comparison * (int(prompt.max()) + 1) + prompt
    _, first = np.unique(key, return_index=True)
    used = np.zeros(comparison.shape[0], bool)
    used[first] = True
    return used


class DecisionState(NamedTuple):
    """Running sufficient statistics of every comparison's decision ((C,) arrays).

    :func:`update` folds new judgments in (in arrival order) without revisiting old
    ones, so a replay or a streaming service pays for each judgment once, and for
    each batch in proportion to the batch (the judged cells are a sparse
    :class:`CellTally`); :func:`decisions_of` reads the :class:`Decisions` off the
    state in proportion to the comparisons. ``decide`` on all judgments at once gives
    the same numbers as any split into batches.
    """

    rule: DecisionRule
    num_tests: int
    outcome: np.ndarray
    closed_at: np.ndarray
    num_judgments: np.ndarray
    n: np.ndarray  # observations used
    k: np.ndarray  # B among them
    m: np.ndarray  # non-ties among them
    sum_x: np.ndarray  # x = (signed + 1) / 2 in [0, 1]
    sum_sq: np.ndarray  # sum of (x_i - regularised mean_i)^2
    sum_lam: np.ndarray
    sum_lam_x: np.ndarray
    sum_vpsi_low: np.ndarray
    sum_vpsi_high: np.ndarray
    low01: np.ndarray  # running lower bound of E[x]
    high01: np.ndarray  # running upper bound of E[x]
    log_eb: np.ndarray
    log_ea: np.ndarray
    share_low: np.ndarray  # running lower bound of q, B's share of the non-ties
    share_high: np.ndarray  # running upper bound of q
    num_prompts: np.ndarray  # distinct prompts judged
    cell_mean_sum: np.ndarray  # sum over judged prompts of the cell's mean signed judgment
    cells: CellTally  # the judged cells (shared by the lineage; see CellTally)
    version: int  # which update of the tally this state is


def start(
    num_comparisons: int,
    num_prompts: int,
    rule: DecisionRule | None = None,
    *,
    num_tests: int | None = None,
) -> DecisionState:
    """The state before any judgment."""
    C, P = int(num_comparisons), int(num_prompts)
    zeros = np.zeros(C)
    return DecisionState(
        rule=rule or DecisionRule(),
        num_tests=C if num_tests is None else int(num_tests),
        outcome=np.zeros(C, np.int64),
        closed_at=np.zeros(C, np.int64),
        num_judgments=np.zeros(C, np.int64),
        n=np.zeros(C, np.int64),
        k=zeros.copy(),
        m=zeros.copy(),
        sum_x=zeros.copy(),
        sum_sq=zeros.copy(),
        sum_lam=zeros.copy(),
        sum_lam_x=zeros.copy(),
        sum_vpsi_low=zeros.copy(),
        sum_vpsi_high=zeros.copy(),
        low01=zeros.copy(),
        high01=np.ones(C),
        log_eb=zeros.copy(),
        log_ea=zeros.copy(),
        share_low=zeros.copy(),
        share_high=np.ones(C),
        num_prompts=np.zeros(C, np.int64),
        cell_mean_sum=zeros.copy(),
        cells=CellTally(P),
        version=0,
    )


def _check(comparison, prompt, signed, num_comparisons: int, num_prompts: int):
    comparison = np.asarray(comparison, dtype=np.int64)
    prompt = np.asarray(prompt, dtype=np.int64)
    signed = np.asarray(signed, dtype=np.float64)
    if not (comparison.shape == prompt.shape == signed.shape):
        raise ValueError("comparison, prompt and signed must have the same length")
    if signed.size:
        if not np.isin(signed, (-1.0, 0.0, 1.0)).all():
            raise ValueError("signed judgments must be -1, 0 or +1")
        if comparison.min() < 0 or comparison.max() >= num_comparisons:
            raise ValueError(f"comparison indices must be in [0, {num_comparisons})")
        if prompt.min() < 0 or prompt.max() >= num_prompts:
            raise ValueError(f"prompt indices must be in [0, {num_prompts})")
    return comparison, prompt, signed


def update(
    state: DecisionState, comparison: np.ndarray, prompt: np.ndarray, signed: np.ndarray
) -> DecisionState:
    """Fold new judgments (in arrival order) into the state; returns a new state.

    A comparison closes at the first observation where a sign e-process reaches
    ``2 / alpha_c`` or the confidence sequence fits inside the margin; once closed
    it stays closed (its statistics keep running for display).
    """
    rule = state.rule
    tally = state.cells
    C, P = state.outcome.shape[0], tally.num_prompts
    comparison, prompt, signed = _check(comparison, prompt, signed, C, P)
    if state.version != tally.version:
        raise ValueError(
            "this DecisionState was already updated (its judged cells moved on): "
            "update the state that update() returned"
        )
    new = {f: np.array(getattr(state, f), copy=True) for f in state._fields[2:-2]}
    fresh_cell = tally_cells(tally, comparison, prompt, signed, new)
    tally.version += 1  # the tally has moved on: from here the given state is spent
    each = rule.alpha_each(state.num_tests)
    side = each / 2.0
    threshold = np.log(1.0 / side)
    # the confidence sequence: each one-sided bound at each / 2
    log_term = np.log(2.0 / each)
    counts: list[tuple[int, np.ndarray, np.ndarray]] = []  # (c, B so far, non-ties so far)
    order = np.argsort(comparison, kind="stable")
    present = np.flatnonzero(np.bincount(comparison, minlength=C))  # sorted, O(N + C)
    bounds = np.searchsorted(comparison[order], np.concatenate([present, [C]]))
    for idx, c in enumerate(present.tolist()):
        rows = order[bounds[idx] : bounds[idx + 1]]
        p, s = prompt[rows], signed[rows]
        cost = new["num_judgments"][c] + np.arange(1, len(rows) + 1)
        if rule.unit == "prompt":
            _, first = np.unique(p, return_index=True)
            keep = np.zeros(len(rows), bool)
            keep[first] = True
            keep &= fresh_cell[rows]
        else:
            keep = np.ones(len(rows), bool)
        new["num_judgments"][c] += len(rows)
        s, cost = s[keep], cost[keep]
        L = s.shape[0]
        if L == 0:
            continue
        x = (s + 1.0) / 2.0
        n0, sum_x0, sum_sq0 = int(new["n"][c]), new["sum_x"][c], new["sum_sq"][c]
        # sign: beta-mixture e-processes on the non-ties
        b_cum = new["k"][c] + np.cumsum(s > 0)
        m_cum = new["m"][c] + np.cumsum(s != 0)
        log_eb = log_sign_evalue(b_cum, m_cum, rule.mixture)
        log_ea = log_sign_evalue(m_cum - b_cum, m_cum, rule.mixture)
        counts.append((c, b_cum, m_cum))
        # confidence sequence (Waudby-Smith & Ramdas 2023, Thm 2), continued from the sums
        t = n0 + np.arange(1, L + 1, dtype=np.float64)
        cum_x = sum_x0 + np.cumsum(x)
        mu_reg = (0.5 + cum_x) / (t + 1.0)
        sq = sum_sq0 + np.cumsum((x - mu_reg) ** 2)
        sigma2 = (0.25 + sq) / (t + 1.0)
        sigma2_prev = np.concatenate([[(0.25 + sum_sq0) / (n0 + 1.0)], sigma2[:-1]])
        lam = np.minimum(np.sqrt(2.0 * log_term / (t * np.log1p(t) * sigma2_prev)), 0.5)
        first_x = sum_x0 / n0 if n0 else 0.0
        first_y = (n0 - sum_x0) / n0 if n0 else 0.0
        prev_x = np.concatenate([[first_x], (cum_x / t)[:-1]])
        prev_y = np.concatenate([[first_y], ((t - cum_x) / t)[:-1]])
        psi = -np.log1p(-lam) - lam
        s_lam = new["sum_lam"][c] + np.cumsum(lam)
        s_lam_x = new["sum_lam_x"][c] + np.cumsum(lam * x)
        v_low = new["sum_vpsi_low"][c] + np.cumsum((x - prev_x) ** 2 * psi)
        v_high = new["sum_vpsi_high"][c] + np.cumsum(((1.0 - x) - prev_y) ** 2 * psi)
        low = np.maximum((s_lam_x - log_term - v_low) / s_lam, 0.0)
        low = np.maximum.accumulate(np.maximum(low, new["low01"][c]))
        low_y = np.maximum((s_lam - s_lam_x - log_term - v_high) / s_lam, 0.0)
        low_y = np.maximum.accumulate(np.maximum(low_y, 1.0 - new["high01"][c]))
        high = np.minimum(1.0 - low_y, 1.0)
        if new["outcome"][c] == UNDECIDED:
            lo, hi = 2.0 * low - 1.0, 2.0 * high - 1.0
            hits = [
                (np.flatnonzero(log_eb >= threshold), B_BETTER),
                (np.flatnonzero(log_ea >= threshold), A_BETTER),
                (np.flatnonzero((lo > -rule.margin) & (hi < rule.margin)), EQUIVALENT),
            ]
            firsts = [(h[0] if len(h) else L, what) for h, what in hits]
            # earliest closing wins; a sign wins a tie with equivalence (it says more)
            when, what = min(firsts, key=lambda f: (f[0], f[1] == EQUIVALENT))
            if when < L:
                new["outcome"][c] = what
                new["closed_at"][c] = int(cost[when])
        new["n"][c] = n0 + L
        new["k"][c], new["m"][c] = b_cum[-1], m_cum[-1]
        new["sum_x"][c], new["sum_sq"][c] = cum_x[-1], sq[-1]
        new["sum_lam"][c], new["sum_lam_x"][c] = s_lam[-1], s_lam_x[-1]
        new["sum_vpsi_low"][c], new["sum_vpsi_high"][c] = v_low[-1], v_high[-1]
        new["low01"][c], new["high01"][c] = low[-1], high[-1]
        new["log_eb"][c], new["log_ea"][c] = log_eb[-1], log_ea[-1]
    _share_bounds(new, counts, rule.mixture, side)
    if rule.correction.closes_by_e_holm:
        _close_by_e_holm(new, rule, state.num_tests)
    return DecisionState(rule, state.num_tests, **new, cells=tally, version=tally.version)


def _share_bounds(new: dict, counts: list, mixture: float, side: float) -> None:
    """The sign tests inverted (in place): the running confidence sequence of B's share of
    the non-ties, which excludes 1/2 exactly when a sign e-process reaches ``1 / side``."""
    if not counts:
        return
    b = np.concatenate([k for _, k, _ in counts])
    m = np.concatenate([n for _, _, n in counts])
    lengths = np.array([k.shape[0] for _, k, _ in counts])
    which = np.array([c for c, _, _ in counts])
    seg = np.repeat(np.arange(len(counts)), lengths)
    low = _running_bound(b, m, seg, new["share_low"][which], mixture, side)
    high = 1.0 - _running_bound(m - b, m, seg, 1.0 - new["share_high"][which], mixture, side)
    new["share_low"][which], new["share_high"][which] = low, high


def _running_bound(k, m, seg, prior, mixture: float, side: float) -> np.ndarray:
    """Each segment's largest :func:`share_lower_bound` over its looks and ``prior``, as
    bisecting every look would give, bisecting few: a look can raise a bound ``x`` only if
    its e-value at ``x`` reaches the threshold (the rejected shares are an interval from
    0), so a first bound from every 16th look (and the last) leaves few looks to bisect."""
    bound = prior.astype(np.float64).copy()
    if seg.shape[0] <= 16 * bound.shape[0]:  # a few looks per segment: bisect them all
        np.maximum.at(bound, seg, share_lower_bound(k, m, mixture, side))
        return bound
    starts = np.concatenate([[0], np.flatnonzero(np.diff(seg)) + 1])
    coarse = (np.arange(seg.shape[0]) - starts[seg]) % 16 == 0
    coarse[np.concatenate([starts[1:] - 1, [seg.shape[0] - 1]])] = True
    np.maximum.at(bound, seg[coarse], share_lower_bound(k[coarse], m[coarse], mixture, side))
    more = log_share_evalue(k, m, mixture, bound[seg]) >= np.log(1.0 / side)
    if more.any():
        np.maximum.at(bound, seg[more], share_lower_bound(k[more], m[more], mixture, side))
    return bound


def equivalence_log_evalues(state, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """log e-values against "Δ <= -margin" and "Δ >= margin" now ((C,) each; state or dict).

    The capital of the confidence sequence's own bets at the margin: the sequence's lower
    bound passes -margin exactly when the first reaches ``2 / alpha_each`` (and its upper
    bound +margin with the second); 0 (e = 1) before any observation.
    """
    get = state.__getitem__ if isinstance(state, dict) else state.__getattribute__
    edge = (1.0 - margin) / 2.0  # Δ = -margin on the [0, 1] scale of x (and of 1 - x)
    lam, lam_x = get("sum_lam"), get("sum_lam_x")
    low = lam_x - edge * lam - get("sum_vpsi_low")
    high = (lam - lam_x) - edge * lam - get("sum_vpsi_high")
    return low, high


def _close_by_e_holm(new: dict, rule: DecisionRule, num_tests: int) -> None:
    """Close (in place) the comparisons closed testing with e-values decides at this look."""
    low, high = equivalence_log_evalues(new, rule.margin)
    log_e = np.stack([new["log_eb"], new["log_ea"], low, high], axis=1)
    rejected = e_holm_rejections(log_e, num_tests, rule.alpha, margin=rule.margin)
    open_ = new["outcome"] == UNDECIDED
    outcome = np.where(rejected[:, 0], B_BETTER, np.where(rejected[:, 1], A_BETTER, UNDECIDED))
    outcome = np.where(
        (outcome == UNDECIDED) & rejected[:, 2] & rejected[:, 3], EQUIVALENT, outcome
    )
    closing = open_ & (outcome != UNDECIDED)
    new["outcome"][closing] = outcome[closing]
    new["closed_at"][closing] = new["num_judgments"][closing]


def decisions_of(state: DecisionState) -> Decisions:
    """The :class:`Decisions` of a state (with Δ and the judgments likely still needed)."""
    rule = state.rule
    each = rule.alpha_each(state.num_tests)
    num_prompts = state.num_prompts
    net = np.full(num_prompts.shape[0], np.nan)
    np.divide(state.cell_mean_sum, num_prompts, out=net, where=num_prompts > 0)
    low, high = 2.0 * state.low01 - 1.0, 2.0 * state.high01 - 1.0
    needed = np.where(state.outcome != UNDECIDED, 0.0, np.inf)
    optimistic = needed.copy()
    open_ = np.flatnonzero((state.outcome == UNDECIDED) & (state.n > 0))
    # a comparison's estimate depends on its observations only: within a lineage the same
    # count means the same observations, so only those a batch touched are recomputed
    cache = state.cells.needed_cache
    if cache is None or cache[0] != (rule, state.num_tests):
        cache = ((rule, state.num_tests), np.full(len(needed), -1), *(needed.copy(),) * 3)
    _, n_at, was_needed, was_optimistic, was_possible = cache
    todo = open_[n_at[open_] != state.n[open_]]
    if todo.size:
        n = state.n[todo].astype(np.float64)
        sign = needed_sign(state.k[todo], state.m[todo], n, rule.mixture, each / 2.0)
        used_mean = 2.0 * state.sum_x[todo] / n - 1.0
        sigma2 = (0.25 + state.sum_sq[todo]) / (n + 1.0)
        eq = needed_equivalence(used_mean, sigma2, n, rule.margin, each)
        soon = needed_sign(state.k[todo], state.m[todo], n, rule.mixture, each / 2.0, OPTIMISM)
        # the best case of the sign: every further judgment decisive for the leader; the
        # equivalence part (Δ = 0 with the variance seen so far) is an estimate
        best = np.minimum(
            needed_sign(state.k[todo], state.m[todo], n, rule.mixture, each / 2.0, best=True),
            needed_equivalence(np.zeros_like(n), sigma2, n, rule.margin, each),
        )
        n_at, was_needed = n_at.copy(), was_needed.copy()
        was_optimistic, was_possible = was_optimistic.copy(), was_possible.copy()
        n_at[todo] = state.n[todo]
        was_needed[todo] = np.minimum(sign, eq)
        was_optimistic[todo] = np.minimum(np.minimum(soon, eq), was_needed[todo])
        was_possible[todo] = np.minimum(best, was_optimistic[todo])
    state.cells.needed_cache = (cache[0], n_at, was_needed, was_optimistic, was_possible)
    needed[open_] = was_needed[open_]
    optimistic[open_] = was_optimistic[open_]
    possible = needed.copy()
    possible[open_] = was_possible[open_]
    return Decisions(
        outcome=state.outcome.copy(),
        closed_at=state.closed_at.copy(),
        net=net,
        cs_low=low,
        cs_high=high,
        e_b=np.exp(np.minimum(state.log_eb, LOG_E_CAP)),
        e_a=np.exp(np.minimum(state.log_ea, LOG_E_CAP)),
        num_obs=state.n.copy(),
        num_judgments=state.num_judgments.copy(),
        num_prompts=num_prompts.astype(np.int64),
        needed=needed,
        alpha_each=each,
        rule=rule.describe(state.num_tests),
        needed_optimistic=optimistic,
        net_used=_ratio(2.0 * state.sum_x - state.n, state.n),
        needed_possible=possible,
        b_share=_ratio(state.k, state.m),
        share_low=state.share_low.copy(),
        share_high=state.share_high.copy(),
    )


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den where den > 0, else nan."""
    out = np.full(np.shape(den), np.nan)
    np.divide(num, den, out=out, where=np.asarray(den) > 0)
    return out


def decide(
    comparison: np.ndarray,
    prompt: np.ndarray,
    signed: np.ndarray,
    num_comparisons: int,
    rule: DecisionRule | None = None,
    *,
    num_tests: int | None = None,
) -> Decisions:
    """Decisions of every comparison from its own judgments, in arrival order.

    Args:
        comparison, prompt: (N,) integer indices of each judgment.
        signed: (N,) +1 (B chosen), -1 (A chosen), 0 (tie), oriented to the comparison.
        num_comparisons: C.
        rule: the :class:`DecisionRule` (default: its defaults, :mod:`adaptive.stopping.rule`).
        num_tests: comparisons the campaign's alpha is split over (default C).

    Returns:
        :class:`Decisions`.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> signed = rng.choice([-1, 0, 1], size=400, p=[0.15, 0.2, 0.65])
        >>> d = decide(np.zeros(400, int), np.arange(400), signed, 1)
        >>> d.names(), int(d.closed_at[0]) < 100
        (['B better'], True)
    """
    prompt = np.asarray(prompt, dtype=np.int64)
    num_prompts = int(prompt.max()) + 1 if prompt.size else 1
    state = start(num_comparisons, num_prompts, rule, num_tests=num_tests)
    return decisions_of(update(state, comparison, prompt, signed))


def decide_cells(
    cells, rule: DecisionRule | None = None, *, num_tests: int | None = None
) -> Decisions:
    """:func:`decide` on one dimension's :class:`adaptive.core.cells.CellData` (row order = arrival order)."""
    return decide(
        cells.judgment_comparison,
        cells.judgment_prompt,
        cells.judgment_y.astype(np.float64) - 1.0,
        cells.num_comparisons,
        rule,
        num_tests=num_tests,
    )
