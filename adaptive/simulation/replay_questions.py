"""A replay that asks a question (:mod:`adaptive.stopping.questions`): when to stop, what it said.

:func:`adaptive.simulation.replay.replay` with ``ReplayConfig(question=...)`` reads the
answer after every batch (:class:`QuestionReplay`), stops when it is settled (answered,
or nothing the log still holds can change it) and hands question-aware policies the
comparisons that can still change it. Every statement made at any look is kept
(:attr:`QuestionTrace.claims`), so a wrong answer at any look counts, not only the last.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from adaptive.simulation.replay_log import Log, decision_sign, full_log_sign
from adaptive.stopping.answers import Answer, answer_question
from adaptive.stopping.decisions import A_BETTER, B_BETTER, EQUIVALENT, OUTCOME_NAMES, Decisions
from adaptive.stopping.questions import Resolved, resolve

if TYPE_CHECKING:
    from adaptive.simulation.replay_config import ReplayConfig


class QuestionTrace(NamedTuple):
    """One replay's answer to its question.

    Attributes:
        answered: the question was answered before the replay stopped.
        answered_at: judgments used when it was first answered (inf: never).
        claims: (C,) comparisons whose decisions any look's statement rested on.
        answer: the final answer in words (system names), for counting across seeds.
        lower_bound: :func:`lower_bound` of the question on this log.
        needs: (judgments used, judgments the answer said it still needed) at each look
            before it was answered, to check the printed figure against what followed.
    """

    answered: bool
    answered_at: float
    claims: np.ndarray
    answer: str
    lower_bound: float | None = None
    needs: tuple[tuple[float, float], ...] = ()


def true_order(log: Log) -> np.ndarray:
    """(K,) systems by their mean true net preference over their comparisons (best first)."""
    assert log.true_net is not None and log.pair_a is not None and log.pair_b is not None
    K = log.num_systems
    net = np.asarray(log.true_net, np.float64)
    total = np.bincount(log.pair_b, weights=net, minlength=K) - np.bincount(
        log.pair_a, weights=net, minlength=K
    )
    seen = np.bincount(log.pair_a, minlength=K) + np.bincount(log.pair_b, minlength=K)
    return np.lexsort((np.arange(K), -total / np.maximum(seen, 1))).astype(np.int64)


def summary(answer: Answer, decisions: Decisions, log: Log, names: Sequence[str]) -> str:
    """A short, comparable account of an answer (the same answer gives the same text)."""
    if answer.kind == "top-k":
        if answer.answered:
            return "{" + ", ".join(sorted(names[i] for i in answer.top)) + "}"
        among = ", ".join(sorted(names[i] for i in answer.among))
        return f"not answered (among {{{among}}})" if among else "not answered"
    if answer.kind == "ranking":
        return " > ".join(
            "{" + ", ".join(sorted(names[i] for i in g)) + "}" if len(g) > 1 else names[g[0]]
            for g in answer.groups
        )
    assert log.pair_a is not None and log.pair_b is not None
    if answer.kind == "all-pairs":
        return f"{int(decisions.closed.sum())} of {len(decisions.outcome)} decided"
    parts = [
        f"{names[log.pair_a[c]]} vs {names[log.pair_b[c]]}: {OUTCOME_NAMES[int(decisions.outcome[c])]}"
        for c in np.flatnonzero(answer.claims | answer.relevant)
    ]
    return "; ".join(parts) if parts else "nothing decided"


class QuestionReplay:
    """The question's side of one replay: read the answer at each look, keep what it said."""

    def __init__(self, log: Log, config: ReplayConfig, *, oracle: bool = False) -> None:
        assert config.question is not None
        if log.pair_a is None or log.pair_b is None:
            raise ValueError("a question needs a log that knows its systems (Log.pair_a/pair_b)")
        self.log = log
        self.names = log.systems or tuple(str(i) for i in range(log.num_systems))
        self.question = resolve(config.question, self.names)
        self.oracle_order = true_order(log) if oracle else None
        self.claims = np.zeros(log.num_comparisons, bool)
        self.answered_at = np.inf
        self.needs: list[tuple[float, float]] = []
        self.last: tuple[Answer, Decisions] | None = None
        self.unit = config.rule.unit
        self.alpha = config.rule.alpha
        self.burn_in = config.burn_in

    @classmethod
    def of(cls, log: Log, config: ReplayConfig, *, oracle: bool = False) -> QuestionReplay | None:
        return None if config.question is None else cls(log, config, oracle=oracle)

    def look(
        self, decisions: Decisions, movable: np.ndarray, used: int, fresh: np.ndarray
    ) -> np.ndarray:
        """Read the answer after a batch; the (C,) comparisons a policy may still serve.

        ``fresh``: (C,) cells each comparison can still draw. With the prompt as the unit, a
        comparison past its burn-in whose best-case need exceeds them cannot close (the
        recommender's own test, :func:`adaptive.recommend.allocate`): the answer then looks
        for the next statement it can still make (top-k: the smallest separable set above k).
        """
        log = self.log
        if self.unit == "prompt" and decisions.needed_possible is not None:
            best = np.asarray(decisions.needed_possible, np.float64)
            past = decisions.num_obs >= self.burn_in
            movable = movable & ~(past & (np.ceil(best * 0.99) > fresh))
        assert log.pair_a is not None and log.pair_b is not None
        K = log.num_systems
        answer = answer_question(
            self.question, decisions, log.pair_a, log.pair_b, K, closable=movable
        )
        self.last = (answer, decisions)
        self.claims |= answer.claims
        if answer.answered and not np.isfinite(self.answered_at):
            self.answered_at = float(used)
        elif not answer.answered:
            self.needs.append((float(used), float(answer.needed)))
        if answer.settled:
            return np.zeros_like(movable)
        if self.oracle_order is not None:
            known = answer_question(
                self.question,
                decisions,
                log.pair_a,
                log.pair_b,
                K,
                closable=movable,
                order=self.oracle_order,
            )
            if known.relevant.any():
                return known.relevant
        return answer.relevant

    def trace(self) -> QuestionTrace:
        assert self.last is not None
        answer, decisions = self.last
        return QuestionTrace(
            bool(answer.answered),
            self.answered_at,
            self.claims.copy(),
            summary(answer, decisions, self.log, self.names),
            lower_bound(self.question, self.log, self.alpha),
            tuple(self.needs),
        )


def wrong_claims(outcome: np.ndarray, claims: np.ndarray, log: Log, margin: float) -> int:
    """Claimed decisions that contradict the truth (simulated logs) or the full log's sign.

    With known truth a sign is wrong unless the true Δ is on its side (Δ = 0 makes every
    sign wrong), an equivalence is wrong when |Δ| >= margin. On a real log a sign is wrong
    when the full log's own prompt-level sign is the other one; equivalence is not judged.
    """
    got = decision_sign(outcome)
    if log.true_net is not None:
        truth = np.sign(log.true_net)
        signs = claims & np.isin(outcome, (A_BETTER, B_BETTER)) & (got * truth <= 0)
        equal = claims & (outcome == EQUIVALENT) & (np.abs(log.true_net) >= margin)
        return int(signs.sum() + equal.sum())
    sign, _ = full_log_sign(log)
    return int((claims & (got * sign < 0)).sum())


def summarize_question(
    traces, logs: Sequence[Log], margin: float, bound: float | None = None
) -> dict:
    """The question's columns of a replay row: answered share, answer, wrong answers
    (and ``lower_bound``, :func:`lower_bound` averaged over the logs, when given)."""
    answers = [t.answer for t in traces]
    wrong = [
        wrong_claims(t.outcome, a.claims, log, margin) for t, a, log in zip(traces, answers, logs)
    ]
    bounds = [a.lower_bound for a in answers if a.lower_bound is not None]
    if bound is None and bounds:
        bound = float(np.mean(bounds))
    at = np.array([a.answered_at for a in answers], np.float64)
    common, count = Counter(a.answer for a in answers).most_common(1)[0]
    return {
        "answered_share": float(np.mean([a.answered for a in answers])),
        "answered_judgments_mean": float(at[np.isfinite(at)].mean())
        if np.isfinite(at).any()
        else None,
        "answer": common,
        "answer_share": count / len(answers),
        "wrong_answers": int(sum(w > 0 for w in wrong)),
        "wrong_answer_rate": float(np.mean([w > 0 for w in wrong])),
        "lower_bound": bound,
    }


def lower_bound(question: Resolved, log: Log, alpha: float) -> float | None:
    """Judgments any policy needs, in expectation, to state the true answer at level ``alpha``.

    The true answer rests on the sign of each pair it states (top-k: the true cross pairs;
    ranking: the pairs across its true cuts; versus: the named pairs), and flipping any one
    of those signs makes it false, so by the change-of-measure argument of Kaufmann, Cappé &
    Garivier (2016, Lemma 1) each such pair c needs, in expectation, at least
    ``log(1 / (2.4 alpha)) / KL_c`` judgments of fresh prompts, where ``KL_c = (1 - t_c)
    kl(q_c, 1/2)`` is the divergence of a judgment (A, tie, B; ties ``t_c``, B's share of the
    others ``q_c``) from the closest law with no preference. Their sum bounds any policy
    that learns from pairwise judgments; the product's rule pays more (its per-pair level is
    ``alpha / (2 x family)``, and it does not know the effects). None without a known truth
    or for ``all-pairs`` / ``equivalence`` (whose equivalence outcomes are other tests).
    """
    from adaptive.stopping.decisions import Decisions

    if (
        log.true_net is None
        or log.true_ties is None
        or question.kind in ("all-pairs", "equivalence")
    ):
        return None
    assert log.pair_a is not None and log.pair_b is not None
    net = np.asarray(log.true_net, np.float64)
    C = len(net)
    zeros = np.zeros(C)
    outcome = np.where(net > 0, B_BETTER, np.where(net < 0, A_BETTER, 0)).astype(np.int64)
    known = Decisions(
        outcome, zeros.astype(np.int64), net, zeros, zeros, zeros, zeros,
        zeros.astype(np.int64), zeros.astype(np.int64), zeros.astype(np.int64), zeros, alpha, "",
    )  # fmt: skip
    truth = answer_question(question, known, log.pair_a, log.pair_b, log.num_systems)
    if not truth.answered:
        return float("inf")
    ties = np.asarray(log.true_ties, np.float64)
    decisive = 1.0 - ties
    q = np.clip(0.5 + net / (2.0 * np.maximum(decisive, 1e-12)), 1e-12, 1 - 1e-12)
    kl = decisive * (q * np.log(2 * q) + (1 - q) * np.log(2 * (1 - q)))
    stated = truth.claims
    if (kl[stated] <= 0).any():
        return float("inf")
    return float((np.log(1.0 / (2.4 * alpha)) / kl[stated]).sum())
