"""Replay of a logged campaign: policies only get logged judgments; effort and outcome are recorded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from adaptive.cells import build_cells
from adaptive.data import read_judgments
from adaptive.replay import (
    POLICIES,
    Fitter,
    ReplayConfig,
    ReplayTrace,
    curve,
    headline,
    judgments_to_reach,
    replay,
    verdicts,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "ai_teacher_test" / "judgments.csv"


@pytest.fixture(scope="module")
def small_log():
    judgments = read_judgments(DATA).filter(pl.col("dimension") == "helpfulness")
    items = judgments["item_id"].unique(maintain_order=True).to_list()[:14]
    cells = build_cells(judgments.filter(pl.col("item_id").is_in(items)))
    config = ReplayConfig(batch_size=120, num_draws=300)
    fitter = Fitter(cells, config)
    reference = verdicts(fitter.fit(np.ones(cells.num_judgments, bool)))
    return cells, config, fitter, reference


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_uses_only_logged_judgments_and_ends_at_the_full_verdict(small_log, policy):
    cells, config, fitter, reference = small_log
    trace = replay(3, cells, policy, reference, config, fitter=fitter)
    steps = np.diff(trace.judgments)
    assert trace.judgments[0] == 0
    assert np.all(steps > 0) and np.all(steps <= config.batch_size)
    assert trace.judgments[-1] <= cells.num_judgments
    assert np.all((trace.agreement >= 0) & (trace.agreement <= 1))
    if policy != "adaptive":
        # a non-stopping policy ends with the whole log, hence the reference verdicts
        assert trace.judgments[-1] == cells.num_judgments
        assert trace.agreement[-1] == 1.0


def test_budget_is_respected_and_replay_is_deterministic(small_log):
    cells, config, fitter, reference = small_log
    budget = 250
    cfg = ReplayConfig(batch_size=100, num_draws=300, budget=budget)
    a = replay(5, cells, "uniform", reference, cfg, fitter=fitter)
    b = replay(5, cells, "uniform", reference, cfg, fitter=fitter)
    assert a.judgments.tolist() == [0, 100, 200, 250]
    np.testing.assert_array_equal(a.agreement, b.agreement)


def test_unknown_policy_is_rejected(small_log):
    cells, config, fitter, reference = small_log
    with pytest.raises(ValueError, match="unknown policy"):
        replay(0, cells, "greedy", reference, config, fitter=fitter)


def test_symmetric_thresholds_reach_the_fit(small_log):
    cells = small_log[0]
    used = np.ones(cells.num_judgments, bool)
    free = Fitter(cells, ReplayConfig(num_draws=50)).fit(used).mean("b")
    sym = Fitter(cells, ReplayConfig(num_draws=50, thresholds="symmetric")).fit(used).mean("b")
    # 3 categories: two thresholds, mirror images of each other only when symmetric
    np.testing.assert_allclose(sym[:, 0], -sym[:, 1], atol=1e-5)
    assert np.abs(free[:, 0] + free[:, 1]).max() > 1e-2


def test_unknown_thresholds_are_rejected():
    with pytest.raises(ValueError, match="thresholds"):
        ReplayConfig(thresholds="mirrored")


def _trace(judgments, agreement, policy="p", seed=0):
    return ReplayTrace(
        policy, seed, np.asarray(judgments), np.asarray(agreement, float), np.zeros(len(judgments))
    )


def test_judgments_to_reach_requires_staying_above_the_level():
    t = _trace([0, 100, 200, 300, 400], [0.5, 0.96, 0.9, 0.97, 1.0])
    assert judgments_to_reach(t, 0.95) == 300
    assert judgments_to_reach(_trace([0, 100], [0.5, 0.9]), 0.95) is None
    assert judgments_to_reach(_trace([0, 100], [1.0, 1.0]), 0.95) == 0


def test_curve_and_headline_over_seeds():
    a = _trace([0, 100, 200, 250], [0.5, 0.8, 1.0, 1.0], seed=0)
    b = _trace([0, 100, 150], [0.5, 1.0, 1.0], seed=1)  # stopped early: carried forward
    rows = curve([a, b], batch_size=100, total=250)
    assert [r["judgments"] for r in rows] == [0, 100, 200, 250]
    assert rows[1]["agreement_mean"] == pytest.approx(0.9)
    assert rows[1]["agreement_sd"] == pytest.approx(np.std([0.8, 1.0], ddof=1))
    assert rows[2]["agreement_mean"] == 1.0
    head = headline([a, b, _trace([0, 100], [0.2, 0.4], seed=2)], 0.95, total=250)
    assert head["num_not_reached"] == 1
    assert head["judgments_mean"] == pytest.approx((200 + 100 + 250) / 3)


@pytest.mark.slow
def test_cli_replay_and_recommend_end_to_end(tmp_path, capsys):
    import json

    from services.cli import main

    judgments = read_judgments(DATA).filter(pl.col("dimension") == "helpfulness")
    items = judgments["item_id"].unique(maintain_order=True).to_list()[:10]
    small = tmp_path / "judgments.csv"
    judgments.filter(pl.col("item_id").is_in(items)).drop("row").write_csv(small)
    plot = tmp_path / "curve.png"
    head = tmp_path / "head.json"
    argv = ["replay", "--data", str(small), "--seeds", "2", "--batch-size", "100"]
    argv += ["--policy", "uniform,adaptive", "--format", "json", "--quiet"]
    argv += ["--plot", str(plot), "--headline", str(head), "--draws", "200"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["policy"] for r in rows} == {"uniform", "adaptive"}
    assert set(rows[0]) >= {"policy", "judgments", "agreement_mean", "agreement_sd"}
    assert plot.stat().st_size > 1000
    assert {h["policy"] for h in json.loads(head.read_text())} == {"uniform", "adaptive"}

    argv = ["recommend", "--data", str(small), "--size", "7", "--format", "json", "--quiet"]
    assert main(argv + ["--annotator", judgments["annotator_id"][0]]) == 0
    tasks = json.loads(capsys.readouterr().out)
    assert len(tasks) == 7
    for t in tasks:
        first, second = t["system_first"], t["system_second"]
        assert {first, second} == {t["system_a"], t["system_b"]}
        assert (first == t["system_a"]) == (t["shown_first"] == "a")
