"""Replay of a logged campaign: every policy under one decision rule; effort and outcome."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from adaptive.core.cells import build_cells
from adaptive.core.data import read_judgments
from adaptive.simulation.replay import (
    ORACLE,
    POLICIES,
    CampaignTruth,
    Log,
    ReplayConfig,
    ReplayTrace,
    fit_truth,
    log_from_cells,
    replay,
    semi_synthetic,
    summarize_replays,
    synthetic_campaign,
)
from adaptive.stopping.decisions import A_BETTER, B_BETTER, DecisionRule

DATA = Path(__file__).resolve().parents[3] / "data"


@pytest.fixture(scope="module")
def ncm_log() -> Log:
    return log_from_cells(build_cells(read_judgments(DATA / "chateval_ncm" / "judgments.csv")))


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_only_gets_logged_judgments_and_is_deterministic(policy):
    rng = np.random.default_rng(0)
    log = synthetic_campaign(rng, [0.5, 0.0, -0.3, 0.1], num_prompts=60, per_cell=2)
    config = ReplayConfig(batch_size=40, rule=DecisionRule(unit="judgment"))
    a = replay(3, log, policy, config)
    b = replay(3, log, policy, config)
    assert a.used == b.used and (a.outcome == b.outcome).all()
    assert a.used <= log.num_judgments
    assert (np.diff(a.judgments) >= 0).all() and a.judgments[-1] == a.used
    # it stopped because everything is closed or nothing is left that could move a decision
    assert a.num_closed[-1] == (a.outcome != 0).sum()


def test_adaptive_spends_nothing_on_closed_comparisons_and_less_than_uniform():
    rng = np.random.default_rng(1)
    log = synthetic_campaign(rng, [0.6, 0.5, -0.5, 0.3, 0.05, 0.0], num_prompts=800)
    config = ReplayConfig(batch_size=50)
    adaptive = [replay(s, log, "adaptive", config) for s in range(3)]
    uniform = [replay(s, log, "uniform", config) for s in range(3)]
    assert all(t.spent_on_closed == 0 for t in adaptive)
    assert all(t.spent_on_closed > 0 for t in uniform)
    mean = lambda traces: np.mean([t.used for t in traces])  # noqa: E731
    assert mean(adaptive) < 0.8 * mean(uniform)


def test_closest_first_closes_half_the_comparisons_sooner_than_round_robin():
    # heterogeneous effects: ordering by need must beat taking turns, and the oracle
    # (which knows the truth) closes the largest effect first and bounds both
    logs = []
    for seed in range(10):
        rng = np.random.default_rng([seed, 9])
        effects = rng.uniform(0.05, 0.6, 10) * rng.choice([-1, 1], 10)
        logs.append(synthetic_campaign(rng, effects, num_prompts=600, random_share=0.1))
    config = ReplayConfig(batch_size=50)
    half = {}
    for policy in ("adaptive", "round_robin", ORACLE):
        traces = [replay(s, log, policy, config) for s, log in enumerate(logs)]
        half[policy] = summarize_replays(traces, logs)["half_closed_judgments"]
        if policy == ORACLE:
            for t, log in zip(traces, logs):
                assert np.argmin(t.closed_total) == np.argmax(np.abs(log.true_net))
    assert half[ORACLE] < half["adaptive"] < 0.85 * half["round_robin"]


def test_the_oracle_needs_known_truth(ncm_log):
    with pytest.raises(ValueError, match="simulated log"):
        replay(0, ncm_log, ORACLE)


def test_summary_counts_reversals_against_the_full_logs_own_sign():
    log = Log(
        np.array([0, 0, 0, 1, 1, 1]),
        np.array([0, 1, 2, 0, 1, 2]),
        np.array([1.0, 1.0, 0.0, -1.0, -1.0, 1.0]),
        2,
        3,
    )
    trace = ReplayTrace(
        "adaptive",
        0,
        np.array([6]),
        np.array([2]),
        6,
        np.array([A_BETTER, A_BETTER]),
        np.array([4.0, 6.0]),
        0,
    )
    row = summarize_replays([trace], log)
    # comparison 0 leans B on the full log, so "A better" is a reversal; 1 leans A: none
    assert row["reversals_max"] == 1
    assert row["curve"][0]["judgments_mean"] == 4.0 and row["curve"][1]["judgments_mean"] == 6.0
    assert row["wrong_sign_rate"] is None
    truth = log._replace(true_net=np.array([0.2, -0.3]))
    row = summarize_replays([trace._replace(outcome=np.array([B_BETTER, B_BETTER]))], truth)
    assert row["wrong_sign_rate"] == 0.5 and row["campaigns_with_error"] == 1.0


def test_synthetic_truth_has_the_requested_net_preference():
    rng = np.random.default_rng(2)
    log = synthetic_campaign(rng, [0.3, -0.1, 0.0], num_prompts=20000, tie_share=0.3, spread=0.8)
    np.testing.assert_allclose(log.true_net, [0.3, -0.1, 0.0], atol=1e-6)
    observed = [log.signed[log.comparison == c].mean() for c in range(3)]
    np.testing.assert_allclose(observed, log.true_net, atol=0.02)


def test_fit_truth_recovers_a_known_campaign():
    truth = CampaignTruth(
        np.array([0.8, -0.3, 0.0]), np.array([0.9, 0.5, 1.4]), np.array([0.6, 1.0, 0.3])
    )
    rng = np.random.default_rng(3)
    comp = np.repeat(np.arange(3), 3000 * 3)
    prompt = np.tile(np.repeat(np.arange(3000), 3), 3)
    from adaptive.simulation.replay import simulate_log

    log = simulate_log(rng, truth, comp, prompt, 3000)
    fitted = fit_truth(log)
    np.testing.assert_allclose(fitted.net(), truth.net(), atol=0.03)
    np.testing.assert_allclose(fitted.tie_share(), truth.tie_share(), atol=0.03)
    np.testing.assert_allclose(fitted.spread, truth.spread, atol=0.3)


def test_semi_synthetic_keeps_the_design_of_the_log(ncm_log):
    rng = np.random.default_rng(4)
    sim = semi_synthetic(rng, ncm_log)
    np.testing.assert_array_equal(sim.comparison, ncm_log.comparison)
    np.testing.assert_array_equal(sim.prompt, ncm_log.prompt)
    assert sim.true_net is not None and not np.array_equal(sim.signed, ncm_log.signed)
    bigger = semi_synthetic(rng, ncm_log, prompts_factor=2)
    assert bigger.num_judgments == 2 * ncm_log.num_judgments and bigger.num_prompts == 400


def test_null_campaign_replayed_in_batches_rarely_errs():
    # all comparisons equal; the adaptive policy checks decisions after every batch
    campaigns, errors = 60, 0
    for seed in range(campaigns):
        rng = np.random.default_rng(100 + seed)
        log = synthetic_campaign(rng, [0.0] * 8, num_prompts=150, spread=0.5)
        trace = replay(seed, log, "adaptive", ReplayConfig(batch_size=30))
        errors += bool(np.isin(trace.outcome, (A_BETTER, B_BETTER)).any())
    assert errors <= stats.binom.ppf(0.99, campaigns, 0.05)


def test_real_log_replay_has_no_reversals(ncm_log):
    config = ReplayConfig(batch_size=200, rule=DecisionRule(unit="judgment"))
    traces = {p: [replay(s, ncm_log, p, config) for s in range(2)] for p in ("adaptive", "uniform")}
    rows = {p: summarize_replays(t, ncm_log, config.rule) for p, t in traces.items()}
    assert rows["adaptive"]["reversals_max"] == 0 and rows["uniform"]["reversals_max"] == 0
    assert rows["adaptive"]["judgments_mean"] < 0.7 * rows["uniform"]["judgments_mean"]
    assert rows["adaptive"]["closed_mean"] >= rows["uniform"]["closed_mean"] - 1


def test_cli_replay_and_recommend_end_to_end(tmp_path, capsys):
    from services.cli import main

    judgments = read_judgments(DATA / "ai_teacher_test" / "judgments.csv").filter(
        pl.col("dimension") == "helpfulness"
    )
    small = tmp_path / "judgments.csv"
    judgments.drop("row").write_csv(small)
    plot = tmp_path / "anytime.png"
    argv = ["replay", "--data", str(small), "--seeds", "2", "--batch-size", "50"]
    argv += ["--policy", "uniform,adaptive", "--format", "json", "--quiet", "--plot", str(plot)]
    assert main(argv + ["--semi-synthetic"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["policy"] for r in rows} == {"uniform", "adaptive"}
    need = {"policy", "judgments_mean", "judgments_sd", "share_of_log", "closed_mean"}
    need |= {"reversals_max", "wrong_sign_rate", "curve", "ratio_to_uniform"}
    assert need <= set(rows[0])
    assert all(r["wrong_sign_rate"] is not None for r in rows)
    assert plot.stat().st_size > 1000
    assert {(r["family"], r["family_size"]) for r in rows} == {("compared", 3)}

    # a larger family splits alpha wider: NCM's 17 compared pairs, or all 55 of its 11 systems
    ncm = DATA / "chateval_ncm" / "judgments.csv"
    argv = ["replay", "--data", str(ncm), "--seeds", "1", "--batch-size", "200"]
    argv += ["--policy", "adaptive", "--format", "json", "--quiet", "--unit", "judgment"]
    assert main(argv) == 0
    compared = json.loads(capsys.readouterr().out)[0]
    assert main(argv + ["--family", "all-pairs"]) == 0
    wide = json.loads(capsys.readouterr().out)[0]
    assert (compared["family_size"], wide["family_size"]) == (17, 55)
    assert wide["closed_mean"] <= compared["closed_mean"]

    argv = ["recommend", "--data", str(small), "--size", "7", "--format", "json", "--quiet"]
    # every comparison of this log is decided: only a named one gets tasks
    argv += ["--unit", "judgment", "--targets", "GPT-3 Davinci:blender_9B"]
    assert main(argv + ["--annotator", judgments["annotator_id"][0]]) == 0
    tasks = json.loads(capsys.readouterr().out)
    assert len(tasks) == 7
    for t in tasks:
        first, second = t["system_first"], t["system_second"]
        assert {first, second} == {t["system_a"], t["system_b"]}
        assert (first == t["system_a"]) == (t["shown_first"] == "a")
        assert t["reason"] == "targeted"
        assert {t["system_a"], t["system_b"]} == {"GPT-3 Davinci", "blender_9B"}


def test_recommend_never_serves_identical_or_missing_responses(tmp_path, capsys):
    from services.cli import main

    rows = [
        ("p1", "x", "y", "a"),
        ("p2", "x", "y", "b"),
        ("p3", "x", "z", "tie"),
    ]
    pl.DataFrame(
        rows, schema=["item_id", "system_a", "system_b", "winner"], orient="row"
    ).with_columns(annotator_id=pl.lit("w1")).write_csv(tmp_path / "judgments.csv")
    prompts = [f"p{i}" for i in range(1, 9)]
    pl.DataFrame({"item_id": prompts, "prompt": [f"question {p}" for p in prompts]}).write_csv(
        tmp_path / "items.csv"
    )
    responses = []
    for p in prompts:
        responses.append((p, "x", f"answer of x to {p}"))
        # y repeats x's answer on p4..p5 (up to case and spacing); z has no answer on p6..p8
        responses.append((p, "y", f"ANSWER of x  to {p}" if p in ("p4", "p5") else f"y on {p}"))
        if p not in ("p6", "p7", "p8"):
            responses.append((p, "z", f"z on {p}"))
    pl.DataFrame(responses, schema=["item_id", "system", "response"], orient="row").write_csv(
        tmp_path / "responses.csv"
    )
    argv = ["recommend", "--data", str(tmp_path / "judgments.csv"), "--size", "50"]
    assert main(argv + ["--format", "json", "--quiet"]) == 0
    tasks = json.loads(capsys.readouterr().out)
    served = {(t["item_id"], t["system_a"], t["system_b"]) for t in tasks}
    assert served and len(served) == len(tasks)
    for item, a, b in served:
        assert {a, b} != {"x", "y"} or item not in ("p4", "p5")
        assert "z" not in (a, b) or item not in ("p6", "p7", "p8")
    for t in tasks:
        assert t["response_first"] and t["response_second"]
        assert t["response_first"].casefold() != t["response_second"].casefold()


def test_fresh_campaigns_are_each_judged_against_their_own_truth():
    base = Log(np.array([0, 0]), np.array([0, 1]), np.array([1.0, 1.0]), 1, 2)
    up = base._replace(true_net=np.array([0.3]))
    down = base._replace(signed=np.array([-1.0, -1.0]), true_net=np.array([-0.3]))
    right = [
        ReplayTrace("adaptive", 0, np.array([2]), np.array([1]), 2, np.array([B_BETTER]),
                    np.array([2.0])),
        ReplayTrace("adaptive", 1, np.array([2]), np.array([1]), 2, np.array([A_BETTER]),
                    np.array([2.0])),
    ]  # fmt: skip
    row = summarize_replays(right, [up, down])
    assert row["wrong_sign_rate"] == 0.0 and row["reversals_max"] == 0
    # judged against one campaign's truth, the other's right answer would look wrong
    assert summarize_replays(right, down)["wrong_sign_rate"] == 0.5
    with pytest.raises(ValueError, match="one log per trace"):
        summarize_replays(right, [up])


@pytest.mark.parametrize("unit", ["prompt", "judgment"])
def test_the_running_view_equals_the_view_recomputed_from_the_draws(ncm_log, monkeypatch, unit):
    # the replay keeps left / useful / their per-comparison counts running at the drawn
    # cells; after every batch they must equal what the log and the draws so far give
    import adaptive.simulation.replay as replay_module

    C, P = ncm_log.num_comparisons, ncm_log.num_prompts
    total = np.bincount(ncm_log.comparison * P + ncm_log.prompt, minlength=C * P).reshape(C, P)
    config = ReplayConfig(batch_size=150, rule=DecisionRule(unit=unit))
    inner = replay_module.policy_fn("adaptive", config)
    checked = []

    def checking(rng, view, size):
        np.testing.assert_array_equal(view.left, total - view.judged)
        useful = (view.left > 0) & (view.judged == 0) if unit == "prompt" else view.left > 0
        np.testing.assert_array_equal(view.useful, useful)
        np.testing.assert_array_equal(view.useful_count, useful.sum(axis=1))
        checked.append(view.step)
        return inner(rng, view, size)

    monkeypatch.setattr(replay_module, "policy_fn", lambda name, config: checking)
    trace = replay(3, ncm_log, "adaptive", config)
    assert len(checked) >= 3 and trace.used > 0
