"""Hybrid decisions (adaptive/judge/hybrid.py): validity whatever the judge, PPI++ and confseq as references."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from adaptive.judge.hybrid import (
    HUMAN_ONLY,
    HybridConfig,
    bet_grid,
    close,
    fold,
    plan,
    ppi_mean,
    report,
    start,
)
from adaptive.simulation.hybrid_replay import population, run, run_human_only, wrong
from adaptive.stopping.evidence import eb_confidence_sequence, log_sign_evalue

REFERENCE = Path(__file__).parents[2] / "reference"


def _reference(module: str):
    sys.path.insert(0, str(REFERENCE))
    try:
        return __import__(module, fromlist=["*"])
    finally:
        sys.path.remove(str(REFERENCE))


def _null_population(rng, rows: int, cells: int, judge: str):
    """Comparisons with Δ exactly 0 (cells in mirrored pairs) and a judge of the given kind."""
    half = cells // 2
    v = rng.choice(3, size=(rows, half), p=[0.35, 0.3, 0.35])
    v = np.concatenate([v, 2 - v], axis=1)
    if judge == "adversarial":  # always "B": pushes towards a wrong sign
        j = np.full_like(v, 2)
    else:  # an 80% judge
        j = np.where(rng.random(v.shape) < 0.8, v, (v + rng.integers(1, 3, v.shape)) % 3)
    human = np.full((3, 3), 0.1)
    np.fill_diagonal(human, 0.8)
    row = np.repeat(np.arange(rows), cells)
    return population(row, j.reshape(-1), human[v.reshape(-1)], rows, 400)


@pytest.mark.parametrize("judge", ["adversarial", "agree_80"])
@pytest.mark.parametrize("routing", [False, True])
def test_null_comparisons_err_within_alpha_whatever_the_judge(judge, routing):
    rng = np.random.default_rng(3)
    pop = _null_population(rng, 300, 40, judge)
    assert np.all(pop.truth == 0.0)
    res = run(1, pop, HybridConfig(routing=routing), alpha_each=0.1, margin=0.1, batch=5)
    bad = wrong(res.outcome, pop.truth, 0.1)
    # each comparison errs with probability <= 0.1 (two sides at 0.05); 300 draws
    assert bad.mean() <= 0.1 + 2.5 * np.sqrt(0.1 * 0.9 / 300)


@pytest.mark.parametrize("routing", [False, True])
def test_null_signs_err_within_alpha_with_an_adversarial_judge(routing):
    """Margin 0: only the sign e-processes can close; a judge that always says B on Δ = 0
    comparisons (seeded, 300 comparisons, 400 human judgments each) gets at most alpha of them
    a sign, and the e-processes see the humans (a comparison with Δ = 0.3 closes B better)."""
    rng = np.random.default_rng(9)
    pop = _null_population(rng, 300, 40, "adversarial")
    res = run(2, pop, HybridConfig(routing=routing), alpha_each=0.1, margin=0.0, batch=5)
    signs = np.isin(res.outcome, (1, 2))
    assert signs.mean() <= 0.1 + 2.5 * np.sqrt(0.1 * 0.9 / 300)
    shifted = population(pop.cell_row, pop.cell_verdict, pop.cell_prob @ np.array(
        [[0.5, 0.0, 0.5], [0.0, 0.5, 0.5], [0.0, 0.0, 1.0]]), 300, 400)  # fmt: skip
    assert np.all(shifted.truth > 0.25)
    res = run(2, shifted, HybridConfig(routing=routing), alpha_each=0.1, margin=0.0, batch=5)
    assert np.mean(res.outcome == 1) > 0.95


def test_without_a_judge_the_confidence_sequence_is_confseqs():
    predmix = _reference("confseq.predmix")
    rng = np.random.default_rng(1)
    y = rng.choice([-1.0, 0.0, 1.0], size=300, p=[0.2, 0.3, 0.5])
    config = HybridConfig(use_judge=False, scale="range")
    state = start(np.ones((1, 1)), 0.01)
    lows, highs = [], []
    for t in range(y.shape[0]):
        state = fold(state, plan(state, config), np.zeros(1, int), y[t : t + 1], np.ones(1, bool))
        lows.append(state.low[0])
        highs.append(state.high[0])
    low, high = predmix.predmix_empbern_twosided_cs(
        (y + 1) / 2, alpha=0.01, truncation=0.5, running_intersection=True
    )
    np.testing.assert_allclose(lows, 2 * np.asarray(low) - 1, atol=1e-10)
    np.testing.assert_allclose(highs, 2 * np.minimum(high, 1.0) - 1, atol=1e-10)
    mine_low, _ = eb_confidence_sequence((y + 1) / 2, 0.01)
    np.testing.assert_allclose(lows, 2 * mine_low - 1, atol=1e-10)


def test_ppi_mean_is_ppi_pys():
    ppi = _reference("ppi_py")
    rng = np.random.default_rng(2)
    n_all, n = 2000, 150
    f_all = rng.choice([-1.0, 0.0, 1.0], size=n_all, p=[0.3, 0.2, 0.5])
    labeled = rng.choice(n_all, size=n, replace=False)
    y = np.where(rng.random(n) < 0.75, f_all[labeled], rng.choice([-1.0, 0.0, 1.0], size=n))
    mine = ppi_mean(y, f_all[labeled], f_all, alpha=0.05)
    low, high = ppi.ppi_mean_ci(y, f_all[labeled], f_all, alpha=0.05)
    point = ppi.ppi_mean_pointestimate(y, f_all[labeled], f_all)
    assert mine.low == pytest.approx(float(low[0]), abs=1e-12)
    assert mine.high == pytest.approx(float(high[0]), abs=1e-12)
    assert mine.estimate == pytest.approx(float(np.ravel(point)[0]), abs=1e-12)
    assert 0.3 < mine.lam <= 1.0


def test_the_hybrid_estimate_agrees_with_ppi_at_a_fixed_look():
    """The online estimate (learnt calibration, uniform sampling) against PPI++ on the same draws."""
    ppi = _reference("ppi_py")
    rng = np.random.default_rng(4)
    cells, n = 4000, 1500
    v = rng.choice(3, size=cells, p=[0.3, 0.2, 0.5])
    j = np.where(rng.random(cells) < 0.8, v, (v + rng.integers(1, 3, cells)) % 3)
    share = np.bincount(j, minlength=3)[None, :] / cells
    state = start(share, 0.05)
    config = HybridConfig()
    ys, js = [], []
    for _ in range(n):
        p = plan(state, config)
        cell = rng.integers(cells)
        y = v[cell] - 1.0 if rng.random() < 0.8 else rng.integers(3) - 1.0
        state = fold(state, p, j[cell : cell + 1], np.array([y]), np.ones(1, bool))
        ys.append(y)
        js.append(j[cell] - 1.0)
    rep = report(state, config)
    # PPI++ on the same draws, with the judge's verdicts read through the calibration learnt;
    # the cells' verdicts repeated 100 times: Δ here is over these cells, whose mean verdict is
    # known exactly, where PPI++ counts the unlabeled mean's sampling variance
    h = plan(state, config).h[0]
    f_all = np.tile(h[j], 100)
    low, high = ppi.ppi_mean_ci(np.array(ys), h[np.array(js, int) + 1], f_all, alpha=0.05)
    half = (high[0] - low[0]) / 2
    assert abs(rep.estimate[0] - (low[0] + high[0]) / 2) < half / 4
    # the effective sample size is what PPI++'s variance reduction says, within 10%
    var_y = np.var(ys)
    ppi_gain = var_y / (n * (half / 1.959964) ** 2)
    assert rep.effective_humans[0] / n == pytest.approx(ppi_gain, rel=0.1)
    # and the CS covers the truth, wider than the fixed-look interval (the price of every look)
    truth = np.mean(np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])[v] @ [-1, 0, 1])
    assert rep.low[0] <= truth <= rep.high[0]
    assert rep.high[0] - rep.low[0] > high[0] - low[0]


def test_routing_records_probabilities_and_stays_unbiased():
    """Rates follow sqrt(residual second moment), keep the floor, sum to one over cells; the
    inverse-probability-weighted Z is unbiased for Δ under them."""
    rng = np.random.default_rng(5)
    cells = 600
    v = rng.choice(3, size=cells, p=[0.3, 0.2, 0.5])
    # a judge sure of B (right), unsure elsewhere: residuals small on its B cells
    j = np.where(v == 2, 2, rng.integers(0, 2, cells))
    human = np.array([[0.6, 0.2, 0.2], [0.3, 0.4, 0.3], [0.02, 0.03, 0.95]])
    counts = np.bincount(j, minlength=3)
    share = (counts / cells)[None, :]
    config = HybridConfig(routing=True, floor=0.3, burn_in=10)
    state = start(share, 0.05)
    zs = []
    order = np.argsort(j, kind="stable")
    for _ in range(3000):
        p = plan(state, config)
        assert np.sum(p.prob) == pytest.approx(1.0)
        assert np.all(p.rel >= 0.3 - 1e-12)
        k = rng.choice(3, p=p.prob[0])
        cell = order[np.sum(counts[:k]) + rng.integers(counts[k])]
        y = rng.choice([-1.0, 0.0, 1.0], p=human[v[cell]])
        zs.append(p.center[0] + (y - p.h[0, k]) / p.rel[0, k])
        state = fold(state, p, np.array([k]), np.array([y]), np.ones(1, bool))
    assert p.rel[0, 2] < 0.8 < p.rel[0, 0]  # fewer humans where the judge is reliable
    truth = np.mean(human[v] @ [-1.0, 0.0, 1.0])
    se = np.std(zs) / np.sqrt(len(zs))
    assert abs(np.mean(zs) - truth) < 3.5 * se
    assert report(state, config).estimate[0] == pytest.approx(np.mean(zs))


def _campaign(rng, rows: int, cells: int, judge: str, effect: float = 0.3):
    """Comparisons of net preference ``effect`` (20% of cells tie), humans 90% on the cell's
    verdict, and a judge: ``random``, or ``agree_80`` (the cell's verdict on 80% of cells)."""
    v = rng.choice(3, size=(rows, cells), p=[(0.8 - effect) / 2, 0.2, (0.8 + effect) / 2])
    if judge == "random":
        j = rng.integers(0, 3, v.shape)
    else:
        j = np.where(rng.random(v.shape) < 0.8, v, (v + rng.integers(1, 3, v.shape)) % 3)
    human = np.full((3, 3), 0.05)
    np.fill_diagonal(human, 0.9)
    row = np.repeat(np.arange(rows), cells)
    return population(row, j.reshape(-1), human[v.reshape(-1)], rows, 3000)


def test_a_useless_judge_needs_about_the_human_only_rules_judgments():
    """Against the product's human-only decisions (adaptive.stopping.decisions, the same level): a
    random judge within 5%, an 80% judge well below (seeded, 300 comparisons each)."""
    rng = np.random.default_rng(6)
    kw = {"alpha_each": 0.01, "margin": 0.05}
    pop = _campaign(rng, 300, 200, "random")
    human = run_human_only(7, pop, **kw)
    assert np.all(human.outcome == 1)  # B better everywhere: the sign tests decide
    hybrid = run(7, pop, HybridConfig(), **kw)
    assert np.all(hybrid.outcome == 1)
    assert hybrid.used.sum() <= 1.05 * human.used.sum()
    # the earlier rule (the CS decides signs too) needed clearly more than human-only
    before = run(7, pop, HybridConfig(sign="sequence"), **kw)
    assert before.used.sum() > 1.1 * human.used.sum()
    good = run(7, _campaign(rng, 300, 200, "agree_80"), HybridConfig(), **kw)
    assert good.used.sum() <= 0.8 * human.used.sum()


def test_without_a_judge_the_sign_e_processes_are_the_sign_test():
    """Z = Y: the mixture over the bet grid is the beta-mixture sign test (within 1% where the
    e-value is >= 1), and the decisions on the same draws are the product's."""
    from adaptive.stopping.decisions import start as start_decisions
    from adaptive.stopping.decisions import update
    from adaptive.stopping.rule import DecisionRule

    bets, log_prior = bet_grid(5.0)
    assert np.exp(log_prior).sum() == pytest.approx(1.0)
    assert 0.0 < bets.min() and bets.max() < 1.0
    rng = np.random.default_rng(8)
    R, T = 60, 1500
    y = rng.choice([-1.0, 0.0, 1.0], size=(R, T), p=[0.36, 0.2, 0.44])
    y[R // 2 :] = -y[R // 2 :]  # half of them A better
    state = start(np.ones((R, 1)), 0.01)
    log_eb = np.zeros((R, T))
    for t in range(T):
        state = fold(state, plan(state, HUMAN_ONLY), np.zeros(R, int), y[:, t], state.outcome == 0)
        log_eb[:, t] = state.log_eb
        if (t + 1) % 10 == 0:
            state = close(state, 0.05)
    k, m = np.cumsum(y > 0, axis=1), np.cumsum(y != 0, axis=1)
    exact = log_sign_evalue(k, m, 5.0)
    live = (exact >= 0.0) & (
        np.arange(T)[None, :] < np.where(state.closed_at > 0, state.closed_at, T)[:, None]
    )
    assert live.sum() > 1000
    assert np.max(np.abs(log_eb - exact)[live]) < 1e-2
    rule = DecisionRule(alpha=0.01, margin=0.05, unit="judgment", correction="none")
    d = update(
        start_decisions(R, 1, rule), np.repeat(np.arange(R), T), np.zeros(R * T, int), y.ravel()
    )
    assert np.array_equal(d.outcome, state.outcome)
    closed = d.outcome > 0
    assert closed.sum() >= R // 3
    np.testing.assert_array_equal(-(-d.closed_at[closed] // 10) * 10, state.closed_at[closed])


def test_the_sign_rule_changes_only_signs_on_mtbench():
    """The estimate, the confidence sequence, agreement and effective humans do not depend on
    what decides signs; with the CS deciding them (the rule before) the 12 closed comparisons
    close at 1,358 human judgments summed, as documented; with the e-processes no later, and
    with the same outcomes as the human-only rows (1,143)."""
    from evalset import read
    from evalset.hybrid import decide_with_judge, read_verdicts

    root = Path(__file__).resolve().parents[3] / "data" / "mtbench"
    humans, judge = read(root / "judgments.csv"), read_verdicts(root / "judge_gpt4.csv")
    new = decide_with_judge(humans, judge).decisions
    old = decide_with_judge(humans, judge, config=HybridConfig(sign="sequence")).decisions
    for field in ("estimate", "low", "high", "num_used", "agreement", "effective_humans"):
        np.testing.assert_array_equal(getattr(new, field), getattr(old, field))
    assert int(old.closed_at.sum()) == 1358
    np.testing.assert_array_equal(new.outcome, old.outcome)
    assert int(new.closed_at.sum()) <= 1143


def test_mtbench_replay_with_gpt4_prints_the_policies_and_reverses_nothing():
    from adaptive.simulation.hybrid_replay import replay_files
    from evalset.hybrid import read_verdicts

    root = Path(__file__).resolve().parents[3] / "data" / "mtbench"
    rows = replay_files(
        str(root / "judgments.csv"), read_verdicts(root / "judge_gpt4.csv"), seeds=3
    )
    assert [r["policy"] for r in rows] == ["human_only", "hybrid_uniform", "hybrid_routed"]
    for r in rows:
        assert r["reversals_max"] == 0
        assert 0 < r["human_judgments_mean"] <= r["log_judgments"]
        assert 0 <= r["closed_mean"] <= 15
    assert 0.6 < rows[1]["agreement_mean"] < 0.75  # GPT-4 and single human judgments


def test_a_judges_second_verdict_on_a_cell_is_refused_by_every_file_door(tmp_path, capsys):
    """One verdict per judge and cell, as the service's store refuses a second one: before,
    the file doors kept the first of two conflicting verdicts and the replay door read every
    judge's verdicts as one judge's."""
    import polars as pl

    from evalset.hybrid import JudgeError, read_verdicts
    from services.cli import main

    root = Path(__file__).resolve().parents[3] / "data" / "mtbench"
    judge = pl.read_csv(root / "judge_gpt4.csv", infer_schema=False)
    swapped = judge.head(1).with_columns(
        pl.col("system_b").alias("system_a"),
        pl.col("system_a").alias("system_b"),
        winner=pl.lit("a"),
    )
    path = tmp_path / "judge.csv"
    pl.concat([judge, swapped]).write_csv(path)
    with pytest.raises(JudgeError, match=rf"row {judge.height + 1}: judge 'gpt4_pair' already has"):
        read_verdicts(path)
    data = str(root / "judgments.csv")
    for argv in (
        ["decisions", "--data", data, "--judge-data", str(path)],
        ["replay", "--data", data, "--judge-data", str(path), "--seeds", "1"],
    ):
        assert main(argv) != 0
        assert "already has a verdict on this cell" in capsys.readouterr().err
    # two judges in one file: the replay door asks which, as the decisions door does
    other = judge.with_columns(annotator_id=pl.lit("another_judge"))
    pl.concat([judge, other]).write_csv(path)
    assert main(["replay", "--data", data, "--judge-data", str(path), "--seeds", "1"]) != 0
    assert "choose one" in capsys.readouterr().err
