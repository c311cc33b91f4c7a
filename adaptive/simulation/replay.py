"""Judge an annotation policy by the judgments it spends until the decisions close.

Leopard/White: an adaptive policy is judged by the *effort* it spends and the
*outcome* it reaches, replayed counterfactually on logged data. Here:

* the *log* is every judgment of one dimension of a campaign (or a
  semi-synthetic campaign with known truth, :func:`semi_synthetic`);
* a *policy* asks for cells (comparison, prompt); it may only ask for
  judgments that exist in the log: a request draws, without replacement, one
  logged judgment of that cell (in an order fixed by the seed);
* every policy runs with the **same decision and stopping rule**
  (:func:`adaptive.stopping.decisions.decide`, checked after every batch): the replay
  stops when every comparison is closed or can no longer move (with the prompt
  as the unit, when its prompts are used up; with the judgment, when its
  judgments are);
* *effort* = judgments used until then; *outcome* = comparisons closed,
  **reversals** (a decision whose sign contradicts the full log's own
  prompt-level sign; must be 0), agreement on the comparisons the full log
  decides clearly, and with known truth the wrong-sign and wrong-equivalence
  rates.

Policies (``policy(rng, view, size) -> (comparison, prompt)``, view: :class:`View`):

* ``adaptive``: :func:`adaptive.recommend.allocate`: open comparisons only,
  closest to a decision first after a burn-in, a fresh prompt per judgment;
* ``uniform``: cells at random over every comparison, closed or not (what a
  fixed design does), fresh prompts first;
* ``round_robin``: the open comparisons in turn, a fresh prompt of each;
* ``arena``: Chatbot Arena's active sampling (Chiang et al. 2024, eq. 9),
  comparison c with probability proportional to the expected reduction of its
  interval width, sqrt(S_c / n_c) - sqrt(S_c / (n_c + 1)) with S_c = n_c var_c,
  over every comparison (it does not know about decisions), then a random
  fresh cell of it.

A reference, not a policy: ``oracle`` (simulated logs only) knows the true Δ and
serves the open comparisons largest |Δ| first, each until it closes, with no
burn-in: no policy that has to learn the effects can close the first half of
them much sooner, so its anytime curve bounds what ordering can buy.

Uniform and arena keep spending on closed comparisons; that, not the order, is
what the adaptive policy saves. The order decides how early decisions arrive:
the anytime curve (judgments until k comparisons are closed) shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy import optimize, special

from adaptive.core.cells import CellData
from adaptive.simulation.replay_config import (
    ReplayConfig as ReplayConfig,  # re-exported (policies read it)
)
from adaptive.simulation.replay_policies import (
    POLICIES as POLICIES,  # the policies a replay compares
)
from adaptive.simulation.replay_policies import View, oracle_policy, policy_fn
from adaptive.simulation.replay_questions import QuestionReplay, QuestionTrace, summarize_question
from adaptive.stopping.decisions import (
    A_BETTER,
    B_BETTER,
    EQUIVALENT,
    DecisionRule,
    decisions_of,
    start,
    update,
)
from adaptive.stopping.evidence import net_preference

#: the reference that knows the truth (simulated logs only; not offered as a policy)
ORACLE = "oracle"
#: a full-log comparison is decided clearly when its prompt-level |z| is at least this (two-sided 0.001)
CLEAR_Z = 3.2905267314919255


class Log(NamedTuple):
    """One dimension's judgments as index arrays (row order = arrival order).

    ``true_net`` is the known Δ of each comparison in a simulated log, else None.
    """

    comparison: np.ndarray
    prompt: np.ndarray
    signed: np.ndarray
    num_comparisons: int
    num_prompts: int
    true_net: np.ndarray | None = None
    pair_a: np.ndarray | None = None  # (C,) systems of each comparison (questions need them)
    pair_b: np.ndarray | None = None
    systems: tuple[str, ...] = ()

    @property
    def num_judgments(self) -> int:
        return int(self.comparison.shape[0])

    @property
    def num_systems(self) -> int:
        if self.systems:
            return len(self.systems)
        if self.pair_a is None or self.pair_b is None or not len(self.pair_a):
            return 0
        return int(max(self.pair_a.max(), self.pair_b.max())) + 1


def log_from_cells(cells: CellData) -> Log:
    """The :class:`Log` of one dimension's cells."""
    return Log(
        cells.judgment_comparison.astype(np.int64),
        cells.judgment_prompt.astype(np.int64),
        cells.judgment_y.astype(np.float64) - 1.0,
        cells.num_comparisons,
        len(cells.prompts),
        pair_a=np.asarray(cells.pair_a, np.int64),
        pair_b=np.asarray(cells.pair_b, np.int64),
        systems=tuple(cells.systems),
    )


class ReplayTrace(NamedTuple):
    """One policy, one seed."""

    policy: str
    seed: int
    judgments: np.ndarray  # (T,) judgments used after each batch
    num_closed: np.ndarray  # (T,) comparisons closed after each batch
    used: int  # judgments used when the replay stopped
    outcome: np.ndarray  # (C,) final decisions
    closed_total: np.ndarray  # (C,) campaign judgments when each closed (inf: never)
    spent_on_closed: int = 0  # judgments asked for comparisons already closed when asked
    answer: QuestionTrace | None = None  # with a question: its answer (replay_questions)


# --------------------------------------------------------------------- replay


def replay(seed: int, log: Log, policy: str, config: ReplayConfig | None = None) -> ReplayTrace:
    """Replay one policy on a log until every decision is closed or cannot move.

    Deterministic for a seed: the order in which each cell's logged judgments
    come out, and the policy's random choices, derive from it.
    """
    config = config or ReplayConfig()
    if policy == ORACLE:
        if log.true_net is None:
            raise ValueError("the oracle needs a simulated log (one with true_net)")
        choose = oracle_policy(log.true_net)
    else:
        choose = policy_fn(policy, config)
    asking = QuestionReplay.of(log, config, oracle=policy == ORACLE)
    rng = np.random.default_rng(seed)
    C, P = log.num_comparisons, log.num_prompts
    # each cell's judgments in a seeded random order: queue[c, p] -> row indices
    perm = rng.permutation(log.num_judgments)
    key = log.comparison[perm] * P + log.prompt[perm]
    order = perm[np.argsort(key, kind="stable")]
    cell_key = log.comparison[order] * P + log.prompt[order]
    keys, first, counts = np.unique(cell_key, return_index=True, return_counts=True)
    starts = np.zeros((C, P), np.int64)
    starts.reshape(-1)[keys] = first
    # running per cell (updated at the drawn cells only, so a batch costs its draws)
    left = np.zeros((C, P), np.int64)
    left.reshape(-1)[keys] = counts
    judged = np.zeros((C, P), np.int64)
    useful = left > 0
    useful_count = useful.sum(axis=1)
    by_prompt = config.rule.unit == "prompt"
    seq: list[int] = []
    stats = np.zeros((C, 3))
    num_tests = C if config.num_tests is None else max(int(config.num_tests), C)
    state = start(C, P, config.rule, num_tests=num_tests)
    fresh_rows: list[int] = []
    budget = config.budget if config.budget is not None else log.num_judgments
    steps, closed_counts = [], []
    step = spent_on_closed = 0
    while True:
        rows = np.asarray(fresh_rows, np.int64)
        state = update(state, log.comparison[rows], log.prompt[rows], log.signed[rows])
        fresh_rows = []
        dec = decisions_of(state)
        movable = ~dec.closed & (useful_count > 0)
        if step > 0:
            steps.append(len(seq))
            closed_counts.append(int(dec.closed.sum()))
        relevant = None if asking is None else asking.look(dec, movable, len(seq))
        if relevant is not None:
            movable &= relevant
        if not movable.any() or len(seq) >= budget:
            break
        view = View(dec, useful, left, judged, stats, step, useful_count, relevant)
        size = min(config.batch_size, budget - len(seq))
        comp, prompt = choose(rng, view, size)
        if len(comp) == 0:
            break
        for c, p in zip(comp.tolist(), prompt.tolist()):
            if left[c, p] <= 0:
                continue
            spent_on_closed += bool(dec.closed[c])
            row = int(order[starts[c, p] + judged[c, p]])
            judged[c, p] += 1
            left[c, p] -= 1
            now = left[c, p] > 0 and not by_prompt
            if useful[c, p] != now:
                useful_count[c] += int(now) - int(useful[c, p])
                useful[c, p] = now
            seq.append(row)
            fresh_rows.append(row)
            s = log.signed[row]
            stats[c] += (1.0, s, s * s)
        step += 1
    rows = np.asarray(seq, np.int64)
    closed_total = np.full(C, np.inf)
    comp_seq = log.comparison[rows]
    for c in np.flatnonzero(dec.closed):
        positions = np.flatnonzero(comp_seq == c)
        closed_total[c] = float(positions[dec.closed_at[c] - 1] + 1)
    return ReplayTrace(
        policy,
        seed,
        np.asarray(steps, np.int64),
        np.asarray(closed_counts, np.int64),
        len(seq),
        dec.outcome.copy(),
        closed_total,
        spent_on_closed,
        None if asking is None else asking.trace(),
    )


# -------------------------------------------------------------------- summary


def full_log_sign(log: Log) -> tuple[np.ndarray, np.ndarray]:
    """(C,) the full log's own prompt-level sign of Δ and |z| (mean of cell means / se)."""
    ref = net_preference(log.comparison, log.prompt, log.signed, log.num_comparisons)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(ref.se > 0, ref.mean / ref.se, np.where(ref.mean != 0, np.inf, 0.0))
    return np.sign(np.nan_to_num(ref.mean)), np.abs(np.nan_to_num(z))


def decision_sign(outcome: np.ndarray) -> np.ndarray:
    return np.where(outcome == B_BETTER, 1, np.where(outcome == A_BETTER, -1, 0))


def summarize_replays(
    traces: Sequence[ReplayTrace], logs: Log | Sequence[Log], rule: DecisionRule | None = None
) -> dict:
    """Effort and outcome of one policy over seeds (the replay's JSON row).

    ``logs``: the log every trace replayed, or one log per trace (fresh simulated
    campaigns); each trace is judged against its own log's sign and truth.
    """
    rule = rule or DecisionRule()
    per_trace = [logs] * len(traces) if isinstance(logs, Log) else list(logs)
    if len(per_trace) != len(traces):
        raise ValueError("give one log, or one log per trace")
    used = np.array([t.used for t in traces], np.float64)
    closed = np.array([int((t.outcome != 0).sum()) for t in traces], np.float64)
    reversals, agreement, clear_counts = [], [], []
    wrong_sign, wrong_eq = [], []
    for t, log in zip(traces, per_trace):
        sign, absz = full_log_sign(log)
        got = decision_sign(t.outcome)
        reversals.append(int(((got * sign) < 0).sum()))
        clear = absz >= CLEAR_Z
        clear_counts.append(int(clear.sum()))
        if clear.any():
            agreement.append(float((got[clear] == sign[clear]).mean()))
        if log.true_net is not None:
            wrong_sign.append(int(((got * np.sign(log.true_net)) < 0).sum()))
            far = np.abs(log.true_net) >= rule.margin
            wrong_eq.append(int(((t.outcome == EQUIVALENT) & far).sum()))
    C = per_trace[0].num_comparisons
    # anytime curve: judgments until k comparisons are closed (mean over seeds reaching k)
    curve = []
    for k in range(1, C + 1):
        at = [np.sort(t.closed_total)[k - 1] for t in traces]
        reached = [a for a in at if np.isfinite(a)]
        curve.append(
            {
                "closed": k,
                "judgments_mean": float(np.mean(reached)) if reached else None,
                "share_of_seeds": len(reached) / len(traces),
            }
        )
    size = np.mean([log.num_judgments for log in per_trace])
    row = {
        "policy": traces[0].policy,
        "seeds": len(traces),
        "judgments_mean": float(used.mean()),
        "judgments_sd": float(used.std(ddof=1)) if len(used) > 1 else 0.0,
        "share_of_log": float(used.mean() / max(size, 1)),
        "comparisons": C,
        "closed_mean": float(closed.mean()),
        "reversals_max": int(max(reversals)),
        "agreement_clear": float(np.mean(agreement)) if agreement else None,
        "clear_comparisons": float(np.mean(clear_counts)),
        "wrong_sign_rate": None,
        "wrong_equivalence_rate": None,
        "campaigns_with_error": None,
        "half_closed_judgments": curve[(C + 1) // 2 - 1]["judgments_mean"] if C else None,
        "spent_on_closed_mean": float(np.mean([t.spent_on_closed for t in traces])),
        "curve": curve,
    }
    if len(wrong_sign) == len(traces):
        ws, we = np.array(wrong_sign, float), np.array(wrong_eq, float)
        row["wrong_sign_rate"] = float(ws.sum() / (len(traces) * C))
        row["wrong_equivalence_rate"] = float(we.sum() / (len(traces) * C))
        row["campaigns_with_error"] = float(((ws + we) > 0).mean())
    if traces[0].answer is not None:
        row.update(summarize_question(traces, per_trace, rule.margin))
    return row


# ------------------------------------------------------------ known truth


_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(24)
_GH_W = _GH_W / _GH_W.sum()


def _cell_probs(z: np.ndarray, kappa: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(B), P(A) of a cell with latent preference z and tie threshold kappa >= 0."""
    return special.expit(z - kappa), special.expit(-z - kappa)


class CampaignTruth(NamedTuple):
    """Per comparison: location theta, tie threshold kappa, prompt-by-comparison sd."""

    theta: np.ndarray
    kappa: np.ndarray
    spread: np.ndarray

    def net(self) -> np.ndarray:
        """(C,) true Δ: expected signed judgment over the prompt population."""
        z = self.theta[:, None] + self.spread[:, None] * _GH_X[None, :]
        pb, pa = _cell_probs(z, self.kappa[:, None])
        return ((pb - pa) * _GH_W).sum(axis=1)

    def tie_share(self) -> np.ndarray:
        z = self.theta[:, None] + self.spread[:, None] * _GH_X[None, :]
        pb, pa = _cell_probs(z, self.kappa[:, None])
        return ((1.0 - pb - pa) * _GH_W).sum(axis=1)


def fit_truth(log: Log) -> CampaignTruth:
    """Per comparison, (theta, kappa, spread) matching the log's Δ, tie share and prompt spread.

    The spread is the between-prompt sd of the cells' expected signed judgment
    beyond what the within-cell binomial noise explains (method of moments); a
    comparison with one judgment per cell gets the mean spread of the others.
    """
    C = log.num_comparisons
    theta, kappa, spread = np.zeros(C), np.ones(C), np.zeros(C)
    between = np.full(C, np.nan)
    for c in range(C):
        m = log.comparison == c
        s, p = log.signed[m], log.prompt[m]
        if len(s) == 0:
            continue
        uniq, inv, counts = np.unique(p, return_inverse=True, return_counts=True)
        cell_mean = np.bincount(inv, weights=s) / counts
        cell_sq = np.bincount(inv, weights=s * s) / counts
        within = np.where(
            counts > 1, (cell_sq - cell_mean**2) * counts / np.maximum(counts - 1, 1), 0
        )
        multi = counts > 1
        if multi.sum() >= 5 and len(uniq) > 5:
            between[c] = max(cell_mean.var(ddof=1) - np.mean(within[multi] / counts[multi]), 0.0)
    fill = np.nanmean(between) if np.isfinite(between).any() else 0.05
    between = np.where(np.isfinite(between), between, fill)
    for c in range(C):
        m = log.comparison == c
        if not m.any():
            continue
        s = log.signed[m]
        target = np.array([s.mean(), (s == 0).mean(), between[c]])

        def resid(x, target=target):
            t = CampaignTruth(np.array([x[0]]), np.array([np.exp(x[1])]), np.array([np.exp(x[2])]))
            z = t.theta[:, None] + t.spread[:, None] * _GH_X[None, :]
            pb, pa = _cell_probs(z, t.kappa[:, None])
            d = pb - pa
            mean = (d * _GH_W).sum()
            var = ((d - mean) ** 2 * _GH_W).sum()
            return [
                mean - target[0],
                t.tie_share()[0] - target[1],
                np.sqrt(var) - np.sqrt(target[2]),
            ]

        tie = min(max(target[1], 0.02), 0.9)
        x0 = [2.0 * target[0], np.log(max(-np.log(1.0 - tie) + 0.1, 0.05)), np.log(0.5)]
        sol = optimize.least_squares(resid, x0, bounds=([-8, -6, -6], [8, 3, 2]))
        theta[c], kappa[c], spread[c] = sol.x[0], np.exp(sol.x[1]), np.exp(sol.x[2])
    return CampaignTruth(theta, kappa, spread)


def simulate_log(
    rng: np.random.Generator,
    truth: CampaignTruth,
    comparison: np.ndarray,
    prompt: np.ndarray,
    num_prompts: int,
    *,
    random_share: float = 0.0,
) -> Log:
    """Fresh outcomes for a design (one row per judgment) from a :class:`CampaignTruth`.

    Each (comparison, prompt) cell draws its own latent preference
    theta_c + spread_c * N(0, 1) once, so judgments of one cell are correlated
    as on real logs; a share ``random_share`` of judgments comes from
    annotators who answer at random (A, tie, B with equal probability), which
    the true Δ includes.
    """
    C = truth.theta.shape[0]
    u = rng.normal(size=(C, num_prompts))
    z = truth.theta[comparison] + truth.spread[comparison] * u[comparison, prompt]
    pb, pa = _cell_probs(z, truth.kappa[comparison])
    r = rng.random(comparison.shape[0])
    signed = np.where(r < pb, 1.0, np.where(r < pb + pa, -1.0, 0.0))
    if random_share > 0:
        noisy = rng.random(comparison.shape[0]) < random_share
        signed = np.where(noisy, rng.integers(-1, 2, size=comparison.shape[0]), signed)
    true_net = truth.net() * (1.0 - random_share)
    return Log(
        comparison.astype(np.int64),
        prompt.astype(np.int64),
        signed.astype(np.float64),
        C,
        num_prompts,
        true_net,
    )


def semi_synthetic(
    rng: np.random.Generator, log: Log, truth: CampaignTruth | None = None, prompts_factor: int = 1
) -> Log:
    """A campaign with the log's design and fresh outcomes from a fit to it (known truth).

    ``prompts_factor`` k > 1 adds (k - 1) times as many new prompts, each judged
    as often as the log's cells, so a comparison can go on past the log's size.
    """
    truth = truth or fit_truth(log)
    comp, prompt = log.comparison, log.prompt
    if prompts_factor > 1:
        comp = np.concatenate([log.comparison] * prompts_factor)
        prompt = np.concatenate([log.prompt + k * log.num_prompts for k in range(prompts_factor)])
    return simulate_log(rng, truth, comp, prompt, log.num_prompts * prompts_factor)


def synthetic_campaign(
    rng: np.random.Generator,
    net: Sequence[float] | np.ndarray,
    *,
    num_prompts: int = 500,
    per_cell: int = 1,
    tie_share: float = 0.25,
    spread: float = 0.5,
    random_share: float = 0.0,
) -> Log:
    """A campaign with given true Δ per comparison (a regime study).

    theta of each comparison is solved so that the true Δ (with the given tie
    share and prompt spread) equals ``net``.
    """
    net = np.asarray(net, np.float64)
    C = net.shape[0]
    kappa0 = np.log((1.0 + tie_share) / (1.0 - tie_share))  # tie share at theta = 0, no spread
    theta = np.zeros(C)

    def gap(t: float, target: float) -> float:
        one = CampaignTruth(np.array([t]), np.array([kappa0]), np.array([spread]))
        return float(one.net()[0]) - target

    for c in range(C):
        if net[c] != 0:
            theta[c] = optimize.brentq(gap, -20, 20, args=(net[c] / (1.0 - random_share),))
    truth = CampaignTruth(theta, np.full(C, kappa0), np.full(C, spread))
    comp = np.repeat(np.arange(C), num_prompts * per_cell)
    prompt = np.tile(np.repeat(np.arange(num_prompts), per_cell), C)
    perm = rng.permutation(comp.shape[0])
    return simulate_log(
        rng, truth, comp[perm], prompt[perm], num_prompts, random_share=random_share
    )
