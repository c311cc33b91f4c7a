"""Replay by question: stop when the question is settled, spend only where it can change."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from adaptive.simulation.replay import (
    ORACLE,
    Log,
    ReplayConfig,
    replay,
    summarize_replays,
    system_campaign,
)
from adaptive.simulation.replay_questions import lower_bound, true_order, wrong_claims
from adaptive.stopping.decisions import A_BETTER, B_BETTER, EQUIVALENT, UNDECIDED
from adaptive.stopping.questions import Question, resolve
from adaptive.stopping.rule import DecisionRule

SPREAD = [0.6, 0.35, 0.05, -0.05, -0.2, -0.3]


def _config(question: str, systems: int, batch: int = 100) -> ReplayConfig:
    q = Question.parse(question)
    names = tuple(f"s{i}" for i in range(systems))
    rule = q.rule_for(DecisionRule(family="all-pairs"), names)
    tests = len(rule.pairs) if rule.family == "registered" else systems * (systems - 1) // 2
    return ReplayConfig(batch_size=batch, rule=rule, num_tests=tests, question=q)


def _runs(question: str, policy: str, strengths, seeds=range(6), prompts=800):
    config = _config(question, len(strengths))
    logs = [
        system_campaign(np.random.default_rng([s, 3]), strengths, num_prompts=prompts)
        for s in seeds
    ]
    traces = [replay(s, log, policy, config) for s, log in zip(seeds, logs)]
    return summarize_replays(traces, logs, config.rule), traces


def test_top_1_spends_a_fraction_of_uniform_and_names_the_best():
    adaptive, traces = _runs("top-1", "adaptive", SPREAD)
    uniform, _ = _runs("top-1", "uniform", SPREAD)
    assert adaptive["answered_share"] == uniform["answered_share"] == 1.0
    assert adaptive["answer"] == uniform["answer"] == "{s0}"
    assert adaptive["wrong_answers"] == 0
    # the best against the other five: 5 of 15 pairs, the easy ones closing early
    assert adaptive["judgments_mean"] < 0.4 * uniform["judgments_mean"]
    # it stopped as soon as the answer came: nothing spent after it
    assert all(t.used == t.answer.answered_at for t in traces)


def test_the_oracle_serves_only_the_true_answers_pairs():
    oracle, traces = _runs("top-2", ORACLE, SPREAD)
    adaptive, _ = _runs("top-2", "adaptive", SPREAD)
    assert oracle["answer"] == adaptive["answer"] == "{s0, s1}"
    # the top two against the other four: 8 pairs; the others are never asked for
    for t in traces:
        claimed = np.flatnonzero(t.answer.claims)
        assert len(claimed) == 8
    assert adaptive["judgments_mean"] <= 1.5 * oracle["judgments_mean"]


def test_a_near_tie_leaves_top_1_unanswered_but_names_the_separated_pair():
    strengths = [0.3, 0.3, 0.0, -0.1, -0.2]  # the best two equal
    row, traces = _runs("top-1", "adaptive", strengths, seeds=range(3), prompts=400)
    assert row["answered_share"] == 0.0
    assert row["wrong_answers"] == 0
    assert all(t.answer.answer == "not answered (among {s0, s1})" for t in traces)


def test_a_null_campaign_answers_nothing_wrong():
    row, traces = _runs("ranking", "adaptive", [0.0] * 5, seeds=range(4), prompts=300)
    assert row["wrong_answers"] == 0
    assert row["answered_share"] == 0.0


def test_versus_reads_only_the_references_pairs():
    config = _config("versus:s1,s2,s3", 4)
    assert config.num_tests == 3
    log = system_campaign(np.random.default_rng(0), [0.0, -0.3, 0.3, 0.35], num_prompts=800)
    trace = replay(0, log, "adaptive", config)
    assert trace.answer.answered
    # the pairs between references (1, 2), (1, 3), (2, 3) are never judged by the replay
    assert set(np.flatnonzero(trace.answer.claims).tolist()) == {0, 1, 2}
    assert "s0 vs s2: A better" not in trace.answer.answer


def test_wrong_claims_judge_signs_and_equivalence_against_the_truth():
    log = Log(
        np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), 4, 1,
        true_net=np.array([0.2, -0.2, 0.0, 0.05]),
    )  # fmt: skip
    outcome = np.array([B_BETTER, B_BETTER, A_BETTER, EQUIVALENT])
    claims = np.ones(4, bool)
    # B better on -0.2 is wrong; any sign on 0 is wrong; equivalence inside 0.1 is right
    assert wrong_claims(outcome, claims, log, 0.1) == 2
    assert wrong_claims(np.full(4, UNDECIDED), claims, log, 0.1) == 0


def test_the_true_order_follows_the_strengths():
    log = system_campaign(np.random.default_rng(1), [0.0, 0.3, -0.2, 0.1], num_prompts=5)
    assert true_order(log).tolist() == [1, 3, 0, 2]


def test_a_question_needs_a_log_that_knows_its_systems():
    log = Log(np.array([0]), np.array([0]), np.array([1.0]), 1, 1)
    with pytest.raises(ValueError, match="knows its systems"):
        replay(0, log, "adaptive", _config("top-1", 2))


def test_the_lower_bound_sums_each_stated_pairs_divergence_from_no_preference():
    log = system_campaign(np.random.default_rng(2), [0.3, 0.0, -0.3], num_prompts=5)
    q = resolve(Question.parse("top-1"), log.systems)
    bound = lower_bound(q, log, 0.05)
    # by hand: the best (s0) against s1 and s2, each pair's KL from "no preference"
    total = 0.0
    for c in (0, 1):  # pairs (0, 1) and (0, 2)
        d, t = log.true_net[c], log.true_ties[c]
        p = 0.5 + d / (2 * (1 - t))
        kl = (1 - t) * (p * np.log(2 * p) + (1 - p) * np.log(2 * (1 - p)))
        total += np.log(1 / (2.4 * 0.05)) / kl
    assert bound == pytest.approx(total)
    # every policy in the replay pays at least that (here, far more: Bonferroni's level)
    row, _ = _runs("top-1", ORACLE, [0.3, 0.0, -0.3], seeds=range(3), prompts=600)
    assert row["lower_bound"] < row["judgments_mean"]
    tie = system_campaign(np.random.default_rng(2), [0.3, 0.3, -0.3], num_prompts=5)
    assert lower_bound(q, tie, 0.05) == float("inf")  # the top 1 does not exist


def test_a_system_entering_late_is_waited_for_and_can_take_the_top():
    # s3 is the best, but its comparisons open only after 200 judgments
    strengths = [0.2, 0.0, -0.2, 0.5]
    log = system_campaign(np.random.default_rng(5), strengths, num_prompts=1500)
    late = tuple(int(c) for c in np.flatnonzero((log.pair_a == 3) | (log.pair_b == 3)))
    config = replace(_config("top-1", 4), late=late, late_after=200)
    trace = replay(0, log, "adaptive", config)
    assert trace.answer.answered and trace.answer.answer == "{s3}"
    # nothing of s3 was asked for before it entered: its pairs closed after the 200th judgment
    closed = trace.closed_total[list(late)]
    assert np.all(closed[np.isfinite(closed)] > 200) and np.isfinite(closed).sum() == 3
    assert wrong_claims(trace.outcome, trace.answer.claims, log, 0.1) == 0


def test_each_look_before_the_answer_keeps_what_it_said_was_still_needed():
    _, traces = _runs("top-1", "adaptive", SPREAD, seeds=range(3))
    for t in traces:
        needs = t.answer.needs
        assert needs, "the answer came at the first look"
        used = [u for u, _ in needs]
        assert used == sorted(used) and used[-1] < t.answer.answered_at
        # a pending answer needs judgments (inf: out of sight)
        assert all(n > 0 for _, n in needs)
