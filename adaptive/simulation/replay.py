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
them much sooner, so its anytime curve bounds what ordering can buy. With a question
(``ReplayConfig.question``) the oracle is the recommender told the true order: it serves only
the pairs the true answer needs, so its cost is what not knowing the order costs.

Uniform and arena keep spending on closed comparisons; that, not the order, is
what the adaptive policy saves. The order decides how early decisions arrive:
the anytime curve (judgments until k comparisons are closed) shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from adaptive.core.cells import CellData
from adaptive.simulation.campaigns import CampaignTruth as CampaignTruth
from adaptive.simulation.campaigns import fit_truth as fit_truth
from adaptive.simulation.campaigns import semi_synthetic as semi_synthetic
from adaptive.simulation.campaigns import simulate_log as simulate_log
from adaptive.simulation.campaigns import synthetic_campaign as synthetic_campaign
from adaptive.simulation.campaigns import system_campaign as system_campaign
from adaptive.simulation.replay_config import (
    ReplayConfig as ReplayConfig,  # re-exported (policies read it)
)
from adaptive.simulation.replay_log import CLEAR_Z as CLEAR_Z
from adaptive.simulation.replay_log import Log as Log
from adaptive.simulation.replay_log import decision_sign as decision_sign
from adaptive.simulation.replay_log import full_log_sign as full_log_sign
from adaptive.simulation.replay_policies import (
    POLICIES as POLICIES,  # the policies a replay compares
)
from adaptive.simulation.replay_policies import View, oracle_policy, policy_fn
from adaptive.simulation.replay_questions import QuestionReplay, QuestionTrace, summarize_question
from adaptive.stopping.decisions import (
    EQUIVALENT,
    DecisionRule,
    decisions_of,
    start,
    update,
)

#: the reference that knows the truth (simulated logs only; not offered as a policy)
ORACLE = "oracle"


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
        # with a question the oracle is the recommender told the true order: it serves the
        # pairs the true answer needs (QuestionReplay.look), by the recommender's allocation
        choose = policy_fn("adaptive", config) if config.question else oracle_policy(log.true_net)
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
    late_mask = np.zeros(C, bool)
    late_mask[list(config.late)] = True
    opened = False
    budget = config.budget if config.budget is not None else log.num_judgments
    steps, closed_counts = [], []
    step = spent_on_closed = 0
    while True:
        rows = np.asarray(fresh_rows, np.int64)
        state = update(state, log.comparison[rows], log.prompt[rows], log.signed[rows])
        fresh_rows = []
        dec = decisions_of(state)
        waiting = late_mask if len(seq) < config.late_after and not opened else None
        if waiting is not None:
            # a late system's cells cannot be asked for yet; its comparisons will open
            useful_now, count_now = useful & ~waiting[:, None], useful_count * ~waiting
        else:
            useful_now, count_now = useful, useful_count
        movable = ~dec.closed & (count_now > 0)
        if step > 0:
            steps.append(len(seq))
            closed_counts.append(int(dec.closed.sum()))
        closable = movable if waiting is None else movable | (~dec.closed & waiting)
        relevant = None if asking is None else asking.look(dec, closable, len(seq), useful_count)
        if relevant is not None:
            movable &= relevant
        if waiting is not None and relevant is not None and (relevant & waiting).any():
            movable |= relevant & waiting  # keep going: the late comparisons will open
        if not movable.any() or len(seq) >= budget:
            break
        view = View(dec, useful_now, left, judged, stats, step, count_now, relevant)
        size = min(config.batch_size, budget - len(seq))
        comp, prompt = choose(rng, view, size)
        if len(comp) == 0 and waiting is not None:
            opened = True  # nothing else to ask for: the campaign waits for the late system
            continue
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
