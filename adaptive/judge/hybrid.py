"""Hybrid decisions: an automatic judge's verdict on every cell, humans on some; Δ stays the humans'.

**The estimand** is the one of :mod:`adaptive.stopping.decisions`, the humans' net preference of a
comparison, over *the cells in its design* (the prompts the judge saw): Δ = mean over those
cells of the expected signed human judgment (+1 B, -1 A, 0 tie). The judge never stands in
for a human; it only predicts what the humans would say.

**One observation.** Before a human judgment arrives, from earlier human judgments only:

* a calibration ``h[k]``: the humans' mean signed judgment on the cells where the judge said
  ``k`` (A, tie, B, ...), shrunk towards the pooled human mean (a judge that says nothing
  learns ``h`` = that mean; an adversarial one learns to read its verdicts backwards);
* sampling rates ``rel[k]`` (probability of a cell of verdict k over the uniform 1/N):
  uniform, or with routing proportional to sqrt of the residual second moment
  E[(Y - h[k])^2 | k] (active statistical inference), mixed with a ``floor`` share at random.

A cell is drawn with probability rel[k] / N and a human judges it (Y). Then

    Z = H + (Y - h[k]) / rel[k],    H = mean over the design's cells of h[verdict]

has conditional mean Δ whatever h, rel and the judge are (inverse-probability weighting of
the rectifier, as prediction-powered inference), and lies in predictable bounds [L, U].

**The confidence sequence** is the predictable plug-in empirical-Bernstein CS of
Waudby-Smith & Ramdas (2023, Theorem 2) on these Z, each step rescaled by its predictable
range S = U - L (so (Z - X) / S >= -1 for the predictable centre X in [L, U], which Fan's
inequality needs) and bet lam < 1 on the scaled value: exp(lam (Z - m) / S - psi(lam)
((Z - X) / S)^2) is a supermartingale at m = Δ for any judge, so the CS covers Δ at every
look with probability >= 1 - alpha (Ville). With no judge (h = 0, uniform) and
``scale="range"`` Z = Y and this is confseq's ``predmix_empbern_twosided_cs`` (the CS
:mod:`adaptive.stopping.decisions` decides equivalence with). The bets per unit of Δ are the same as
there (capped at ``trunc / 2``), so a judge changes the CS only through the Z. It decides
equivalence; the sign e-processes below decide signs.

**The sign e-processes** are the human-only sign test's with Z in place of Y. That test
(:func:`adaptive.stopping.evidence.log_sign_evalue`) is a mixture over constant bets b in (0, 1] of
prod (1 + b Y_i) against H0: Δ <= 0 (a tie's factor is 1; q = (1 + b) / 2 ~ Beta(a, a) on
q > 1/2), and prod (1 - b Y_i) against H0: Δ >= 0. Here the factors are 1 + beta_i Z_i and
1 - beta_i Z_i with beta_i = min(b, b_max / max(-L_i, 1)) (and U_i on the other side): the
bet per unit of Δ is b, capped so that the capital stays positive on Z's predictable range.
E[1 + beta_i Z_i | past] = 1 + beta_i Δ <= 1 under the null, for any judge and routing, so
each product is a test supermartingale and so is their mixture over b (a discrete prior: the
Beta(a, a) mass of ``NUM_BETS`` equal cells of b at their midpoints). Without a judge (h = 0,
uniform) Z = Y, the range is [-1, 1] and this *is* the human-only sign test up to the
discretisation; with a useless judge Z is Y plus the noise of a calibration learnt to be
flat, so the hybrid needs about the human-only rule's human judgments; with a good judge
E[Z^2] < E[Y^2] and the capital grows faster (growth about Δ^2 / (2 E[Z^2]) per judgment).

**Decisions** are the rule of :mod:`adaptive.stopping.decisions`: B better when the e-process against
Δ <= 0 has reached ``2 / alpha_each`` at some human judgment (A better: the other one), so
each side errs with probability <= alpha_each / 2 (Ville); equivalent when the CS fits in
(-margin, margin). ``HybridConfig(sign="sequence")`` decides signs by the CS instead (the
rule before the e-processes, kept to compare with).

References:
    Angelopoulos, Bates, Fannjiang, Jordan & Zrnic (2023), "Prediction-powered inference", Science;
    Angelopoulos, Duchi & Zrnic (2023), "PPI++", arXiv:2311.01453 (power tuning);
    Zrnic & Candès (2024), "Active statistical inference", ICML (sqrt-variance sampling);
    Waudby-Smith & Ramdas (2023), JRSS-B 86(1), Theorem 2; Fan, Grama & Liu (2015).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import special

from adaptive.stopping.decisions import A_BETTER, B_BETTER, EQUIVALENT, UNDECIDED
from adaptive.stopping.rule import DEFAULT_LEVEL, DEFAULT_MIXTURE

#: judge verdict codes; a fourth, "tie (inconsistent)" (the judge disagreed with itself when the
#: two answers swapped sides), is a tie with a calibration of its own
VERDICTS = ("A", "tie", "B", "tie (inconsistent)")
#: signed value of each verdict code (oriented to the comparison: +1 B)
VERDICT_SIGN = np.array([-1.0, 0.0, 1.0, 0.0])
#: the scaled bets stay below this (Fan's inequality needs them < 1)
MAX_SCALED_BET = 0.8
SCALES = ("tight", "range")
#: what decides a sign: the mixture e-processes on Z, or the confidence sequence
SIGNS = ("mixture", "sequence")
#: constant bets in the sign e-processes' discrete mixture
NUM_BETS = 32


def bet_grid(mixture: float, num: int = NUM_BETS) -> tuple[np.ndarray, np.ndarray]:
    """The bets b (per unit of Δ) of the sign e-processes and the log of their prior masses.

    The human-only sign test's prior, q = (1 + b) / 2 ~ Beta(a, a) restricted to q > 1/2
    (:func:`adaptive.stopping.evidence.log_sign_evalue`), on ``num`` equal cells of b in (0, 1), each
    at its midpoint with the cell's prior mass (the masses sum to 1: any discrete prior gives
    a test supermartingale; this one approximates the continuous test's e-value, within 1%
    on the sizes ``tests/adaptive/judge/test_hybrid.py`` checks).
    """
    edges = np.linspace(0.0, 1.0, num + 1)
    mass = 2.0 * np.diff(special.betainc(mixture, mixture, (1.0 + edges) / 2.0))
    with np.errstate(divide="ignore"):
        return (edges[:-1] + edges[1:]) / 2.0, np.log(mass)


@dataclass(frozen=True)
class HybridConfig:
    """How the judge is used.

    Attributes:
        use_judge: False gives the human-only rule (h = 0, uniform sampling) on the same CS.
        routing: sample cells with rates proportional to sqrt(residual second moment).
        floor: share of human judgments sent to cells at random (routing only), so the
            judge's reliability keeps being measured on every verdict.
        prior_count: pseudo-judgments shrinking each verdict's calibration to the pooled mean.
        burn_in: human judgments before routing leaves uniform sampling.
        scale: ``range`` (S = U - L, confseq's CS without a judge) or ``tight`` (S = X - L
            below and U - X above a centre X kept in the middle half of [L, U]).
        trunc: cap of the bets on a human judgment's range (1/2 as in Waudby-Smith & Ramdas).
        sign: ``mixture`` (the sign e-processes decide signs) or ``sequence`` (the CS does,
            as equivalence; the earlier rule).
    """

    use_judge: bool = True
    routing: bool = False
    floor: float = 0.3
    prior_count: float = 2.0
    burn_in: int = 20
    scale: str = "tight"
    trunc: float = 0.5
    sign: str = "mixture"

    def __post_init__(self) -> None:
        if self.sign not in SIGNS:
            raise ValueError(f"sign must be one of {SIGNS}, not {self.sign!r}")
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, not {self.scale!r}")
        if not 0.0 < self.floor <= 1.0:
            raise ValueError(f"floor must be in (0, 1], not {self.floor}")
        if not 0.0 < self.trunc < 1.0:
            raise ValueError(f"trunc must be in (0, 1), not {self.trunc}")
        if self.prior_count <= 0:
            raise ValueError(f"prior_count must be > 0, not {self.prior_count}")


HUMAN_ONLY = HybridConfig(use_judge=False)


class HybridState(NamedTuple):
    """Running statistics of R comparisons ((R,) arrays, (R, K) per judge verdict).

    ``share[r, k]`` is the fraction of comparison r's cells where the judge said k (the design,
    fixed); everything else is learnt from the human judgments folded in so far.
    """

    share: np.ndarray
    log_term: float  # log(1 / (alpha_each / 2)): each side's threshold
    n: np.ndarray
    cat_n: np.ndarray  # human judgments by the judged cell's verdict
    cat_sum: np.ndarray
    cat_sq: np.ndarray
    w_sum: np.ndarray  # inverse-rate weighted human statistics (over cells, as if uniform)
    w_y: np.ndarray
    w_y2: np.ndarray
    w_agree: np.ndarray
    sum_z: np.ndarray
    sum_dev2: np.ndarray  # sum of (Z_i - regularised mean_i)^2 (the bets' variance)
    sum_z2: np.ndarray
    lo_a: np.ndarray  # sums of lam / S, lam / S * Z and psi(lam) w^2 of the lower side
    lo_az: np.ndarray
    lo_v: np.ndarray
    hi_a: np.ndarray
    hi_az: np.ndarray
    hi_v: np.ndarray
    low: np.ndarray  # running intersection of the CS (Δ scale)
    high: np.ndarray
    outcome: np.ndarray
    closed_at: np.ndarray  # human judgments of the comparison when it closed (0: open)
    bets: np.ndarray  # (G,) the sign e-processes' constant bets b and their log prior masses
    log_prior: np.ndarray
    cap_b: np.ndarray  # (R, G) log capital of each bet against Δ <= 0 (B not better)
    cap_a: np.ndarray  # (R, G) and against Δ >= 0 (A not better)
    log_eb: np.ndarray  # log of the mixtures now
    log_ea: np.ndarray
    peak_b: np.ndarray  # their running maxima (a sign closes when one reaches log_term)
    peak_a: np.ndarray


class Plan(NamedTuple):
    """What is fixed before the next human judgment of each comparison ((R,) or (R, K))."""

    h: np.ndarray
    center: np.ndarray  # H
    rel: np.ndarray  # sampling rate of each verdict's cells over uniform
    prob: np.ndarray  # probability that the next cell has verdict k (share * rel)
    lower: np.ndarray  # bounds of Z
    upper: np.ndarray
    x_lo: np.ndarray  # the predictable centres X of the two sides
    x_hi: np.ndarray
    s_lo: np.ndarray  # and their scales S: (Z - X) / S >= -1 below, (X - Z) / S >= -1 above
    s_hi: np.ndarray
    lam_lo: np.ndarray  # the scaled bets (< 1)
    lam_hi: np.ndarray


def start(share: np.ndarray, alpha_each: float, mixture: float = DEFAULT_MIXTURE) -> HybridState:
    """The state before any human judgment.

    Args:
        share: (R, K) share of each comparison's cells per judge verdict (rows sum to 1).
        alpha_each: error bound of each comparison (two-sided; each side half of it).
        mixture: a of the sign e-processes' Beta(a, a) prior (the rule's ``mixture``).
    """
    share = np.asarray(share, dtype=np.float64)
    if share.ndim != 2 or np.any(share < 0) or not np.allclose(share.sum(axis=1), 1.0):
        raise ValueError("share: (R, K), non-negative, each row summing to 1")
    R, K = share.shape
    z = np.zeros(R)
    zk = np.zeros((R, K))
    bets = bet_grid(mixture)
    G = bets[0].shape[0]
    return HybridState(
        share, float(np.log(2.0 / alpha_each)), np.zeros(R, np.int64),
        zk.copy(), zk.copy(), zk.copy(), z.copy(), z.copy(), z.copy(), z.copy(),
        z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), z.copy(),
        np.full(R, -1.0), np.ones(R), np.zeros(R, np.int64), np.zeros(R, np.int64),
        *bets, np.zeros((R, G)), np.zeros((R, G)), z.copy(), z.copy(), z.copy(), z.copy(),
    )  # fmt: skip


def _calibration(state: HybridState, config: HybridConfig) -> tuple[np.ndarray, np.ndarray]:
    """(R, K) calibration h and (R,) pooled human mean, from the human judgments so far."""
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled = np.where(state.w_sum > 0, state.w_y / state.w_sum, 0.0)
    if not config.use_judge:
        return np.zeros_like(state.share), pooled
    kappa = config.prior_count
    h = (state.cat_sum + kappa * pooled[:, None]) / (state.cat_n + kappa)
    return h, pooled


def plan(state: HybridState, config: HybridConfig, rel: np.ndarray | None = None) -> Plan:
    """The calibration, sampling rates, bounds and bets for the next human judgment.

    ``rel``: (R, K) the rates the next cell was actually drawn with, when they were fixed
    elsewhere (recorded when the cell was served; before its judgment arrived): they replace
    the config's, so Z divides by the rate its cell really had and stays unbiased.
    """
    share = state.share
    h, pooled = _calibration(state, config)
    if rel is not None:
        return _plan_at(state, config, h, np.asarray(rel, np.float64))
    rel = np.ones_like(share)
    if config.use_judge and config.routing:
        kappa = config.prior_count
        with np.errstate(invalid="ignore", divide="ignore"):
            var_pool = np.where(state.w_sum > 0, state.w_y2 / state.w_sum - pooled**2, 1.0)
        second = state.cat_sq - 2.0 * h * state.cat_sum + h**2 * state.cat_n
        v = (second + kappa * np.maximum(var_pool, 0.05)[:, None]) / (state.cat_n + kappa)
        root = np.sqrt(np.maximum(v, 0.01))
        raw = root / np.sum(share * root, axis=1, keepdims=True)
        routed = config.floor + (1.0 - config.floor) * raw
        rel = np.where((state.n >= config.burn_in)[:, None], routed, 1.0)
    return _plan_at(state, config, h, rel)


def _plan_at(state: HybridState, config: HybridConfig, h: np.ndarray, rel: np.ndarray) -> Plan:
    """The bounds and bets of the next human judgment given its calibration and rates."""
    share = state.share
    present = share > 0
    center = np.sum(share * h, axis=1)
    big = np.where(present, 0.0, np.inf)
    lower = center + np.min((-1.0 - h) / rel + big, axis=1)
    upper = center + np.max((1.0 - h) / rel - big, axis=1)
    n = state.n.astype(np.float64)
    width = upper - lower
    mean_prev = state.sum_z / np.maximum(n, 1.0)
    if config.scale == "range":
        x_lo = np.where(n > 0, mean_prev, lower)
        x_hi = np.where(n > 0, mean_prev, upper)
        s_lo = s_hi = width
    else:
        x_lo = x_hi = np.clip(
            np.where(n > 0, mean_prev, center), lower + 0.25 * width, upper - 0.25 * width
        )
        s_lo, s_hi = x_lo - lower, upper - x_hi
    t = n + 1.0
    sigma2 = (1.0 + state.sum_dev2) / t  # the regularised variance of the Z so far
    bet = np.sqrt(2.0 * state.log_term / (sigma2 * t * np.log1p(t)))
    # the bet per unit of Δ is Waudby-Smith & Ramdas's on a human judgment's range (width 2),
    # whatever the judge: a wider range of Z must not change how boldly the CS bets early
    bet = np.minimum(bet, config.trunc / 2.0)
    lam_lo = np.minimum(bet * s_lo, MAX_SCALED_BET)
    lam_hi = np.minimum(bet * s_hi, MAX_SCALED_BET)
    prob = share * rel
    return Plan(h, center, rel, prob, lower, upper, x_lo, x_hi, s_lo, s_hi, lam_lo, lam_hi)


def _psi(lam: np.ndarray) -> np.ndarray:
    return -np.log1p(-lam) - lam


def fold(
    state: HybridState, p: Plan, verdict: np.ndarray, y: np.ndarray, active: np.ndarray
) -> HybridState:
    """Fold one human judgment into each active comparison (the cell's verdict k, its Y)."""
    R = state.n.shape[0]
    rows = np.arange(R)
    verdict = np.asarray(verdict, dtype=np.int64)
    y = np.asarray(y, dtype=np.float64)
    act = np.asarray(active, bool).astype(np.float64)
    h_k, rel_k = p.h[rows, verdict], p.rel[rows, verdict]
    z = p.center + (y - h_k) / rel_k
    n1 = state.n + act.astype(np.int64)
    mu_reg = (state.sum_z + z) / (n1 + 1.0)
    one = np.zeros_like(state.cat_n)
    one[rows, verdict] = act
    w = act / rel_k
    agree = (VERDICT_SIGN[verdict] == y).astype(np.float64)
    a_lo, a_hi = p.lam_lo / p.s_lo, p.lam_hi / p.s_hi
    v_lo = _psi(p.lam_lo) * ((z - p.x_lo) / p.s_lo) ** 2
    v_hi = _psi(p.lam_hi) * ((p.x_hi - z) / p.s_hi) ** 2
    new = state._replace(
        n=n1,
        cat_n=state.cat_n + one,
        cat_sum=state.cat_sum + one * y[:, None],
        cat_sq=state.cat_sq + one * (y**2)[:, None],
        w_sum=state.w_sum + w,
        w_y=state.w_y + w * y,
        w_y2=state.w_y2 + w * y**2,
        w_agree=state.w_agree + w * agree,
        sum_z=state.sum_z + act * z,
        sum_dev2=state.sum_dev2 + act * (z - mu_reg) ** 2,
        sum_z2=state.sum_z2 + act * z**2,
        lo_a=state.lo_a + act * a_lo,
        lo_az=state.lo_az + act * a_lo * z,
        lo_v=state.lo_v + act * v_lo,
        hi_a=state.hi_a + act * a_hi,
        hi_az=state.hi_az + act * a_hi * z,
        hi_v=state.hi_v + act * v_hi,
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        low = (new.lo_az - state.log_term - new.lo_v) / new.lo_a
        high = (new.hi_az + state.log_term + new.hi_v) / new.hi_a
    low = np.where(new.lo_a > 0, np.clip(low, -1.0, 1.0), -1.0)
    high = np.where(new.hi_a > 0, np.clip(high, -1.0, 1.0), 1.0)
    new = new._replace(low=np.maximum(state.low, low), high=np.minimum(state.high, high))
    return _fold_signs(new, p, z, np.flatnonzero(act))


def _log_mixture(x: np.ndarray) -> np.ndarray:
    """log sum exp over the bets (rows); by hand: scipy's logsumexp costs 3x in this loop."""
    top = np.max(x, axis=1)
    return top + np.log(np.sum(np.exp(x - top[:, None]), axis=1))


def _fold_signs(state: HybridState, p: Plan, z: np.ndarray, idx: np.ndarray) -> HybridState:
    """The sign e-processes after Z on the comparisons ``idx`` (the module's docstring)."""
    if idx.size == 0:
        return state
    bets, top = state.bets[None, :], state.bets[-1]
    # a bet b per unit of Δ, capped so that 1 + beta Z > 0 on Z's predictable range (L <= -1)
    beta_b = np.minimum(bets, (top / np.maximum(-p.lower[idx], 1.0))[:, None])
    beta_a = np.minimum(bets, (top / np.maximum(p.upper[idx], 1.0))[:, None])
    cap_b, cap_a = state.cap_b.copy(), state.cap_a.copy()
    cap_b[idx] += np.log1p(beta_b * z[idx, None])
    cap_a[idx] += np.log1p(-beta_a * z[idx, None])
    log_eb, log_ea = state.log_eb.copy(), state.log_ea.copy()
    log_eb[idx] = _log_mixture(state.log_prior + cap_b[idx])
    log_ea[idx] = _log_mixture(state.log_prior + cap_a[idx])
    return state._replace(
        cap_b=cap_b,
        cap_a=cap_a,
        log_eb=log_eb,
        log_ea=log_ea,
        peak_b=np.maximum(state.peak_b, log_eb),
        peak_a=np.maximum(state.peak_a, log_ea),
    )


def close(state: HybridState, margin: float, sign: str = "mixture") -> HybridState:
    """Close the open comparisons decided now (a look: call it after each batch).

    A sign when its e-process has reached ``2 / alpha_each`` at some human judgment so far
    (``sign="sequence"``: when the CS excludes 0); equivalence when the CS fits in the margin.
    """
    if sign not in SIGNS:
        raise ValueError(f"sign must be one of {SIGNS}, not {sign!r}")
    if sign == "mixture":
        b_wins, a_wins = state.peak_b >= state.log_term, state.peak_a >= state.log_term
    else:
        b_wins, a_wins = state.low > 0.0, state.high < 0.0
    open_ = state.outcome == UNDECIDED
    what = np.where(
        b_wins,
        B_BETTER,
        np.where(
            a_wins,
            A_BETTER,
            np.where((state.low > -margin) & (state.high < margin), EQUIVALENT, UNDECIDED),
        ),
    )
    now = open_ & (what != UNDECIDED)
    return state._replace(
        outcome=np.where(now, what, state.outcome),
        closed_at=np.where(now, state.n, state.closed_at),
    )


class HybridReport(NamedTuple):
    """What a user reads per comparison ((R,) arrays)."""

    estimate: np.ndarray  # mean of the Z (unbiased for Δ)
    low: np.ndarray
    high: np.ndarray
    num_human: np.ndarray
    agreement: np.ndarray  # share of human judgments equal to the judge's verdict (over cells)
    effective_humans: np.ndarray  # n * Var(Y) / Var(Z): humans alone would need this many
    judge_weight: np.ndarray  # slope of the calibration h on the verdict's sign (0: ignored)
    log_eb: np.ndarray  # the sign e-processes now (against "B not better", "A not better")
    log_ea: np.ndarray


def report(state: HybridState, config: HybridConfig) -> HybridReport:
    """Estimate, CS, agreement and the effective human sample size of each comparison."""
    n = state.n.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = np.where(n > 0, state.sum_z / n, np.nan)
        var_z = (state.sum_z2 - n * est**2) / (n - 1.0)
        mean_y = state.w_y / state.w_sum
        var_y = state.w_y2 / state.w_sum - mean_y**2
        eff = np.where((n > 1) & (var_z > 0), n * var_y / var_z, n)
        agreement = np.where(state.w_sum > 0, state.w_agree / state.w_sum, np.nan)
    h, _ = _calibration(state, config)
    K = state.share.shape[1]
    s = VERDICT_SIGN[:K]
    ms = np.sum(state.share * s, axis=1, keepdims=True)
    mh = np.sum(state.share * h, axis=1, keepdims=True)
    cov = np.sum(state.share * (s - ms) * (h - mh), axis=1)
    var = np.sum(state.share * (s - ms) ** 2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = np.where(var > 0, cov / var, 0.0)
    return HybridReport(
        est, state.low, state.high, state.n.copy(), agreement, eff, slope,
        state.log_eb.copy(), state.log_ea.copy(),
    )  # fmt: skip


# ------------------------------------------------------------------- fixed look (PPI++)


class PPIMean(NamedTuple):
    estimate: float
    low: float
    high: float
    lam: float


def ppi_mean(
    y: np.ndarray,
    judge_labeled: np.ndarray,
    judge_all: np.ndarray,
    alpha: float = DEFAULT_LEVEL,
) -> PPIMean:
    """PPI++'s power-tuned mean and its normal interval at one look (no anytime guarantee).

    lam = Cov(Y, f) / ((1 + n / N) Var(f)), clipped to [0, 1] (Angelopoulos, Duchi & Zrnic
    2023, eq. for the mean); estimate = lam mean(f_all) + mean(Y - lam f); variance
    lam^2 Var(f_all) / N + Var(Y - lam f) / n. Written here, not imported, so the product does
    not depend on ppi_py's numba/statsmodels/scikit-learn; ``tests/adaptive/judge/test_hybrid.py`` checks it
    against ppi_py 0.2.3's ``ppi_mean_ci``.
    """
    y = np.asarray(y, np.float64)
    f = np.asarray(judge_labeled, np.float64)
    fu = np.asarray(judge_all, np.float64)
    n, N = y.shape[0], fu.shape[0]
    cov = np.mean((y - y.mean()) * (f - f.mean()))
    var_f = np.var(np.concatenate([f, fu]), ddof=1)
    lam = float(np.clip(cov / ((1.0 + n / N) * var_f), 0.0, 1.0)) if var_f > 0 else 0.0
    est = lam * fu.mean() + np.mean(y - lam * f)
    se = np.sqrt(lam**2 * np.var(fu) / N + np.var(y - lam * f) / n)
    z = special.ndtri(1.0 - alpha / 2.0)
    return PPIMean(float(est), float(est - z * se), float(est + z * se), lam)
