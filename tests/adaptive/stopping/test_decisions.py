"""Anytime-valid decisions: golden values, references, and the error guarantee on null campaigns."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

from adaptive.stopping.decision_rows import decision_rows
from adaptive.stopping.decisions import (
    A_BETTER,
    B_BETTER,
    EQUIVALENT,
    UNDECIDED,
    DecisionRule,
    decide,
    decision_observations,
)
from adaptive.stopping.evidence import (
    eb_confidence_sequence,
    log_share_evalue,
    log_sign_evalue,
    net_preference,
    share_lower_bound,
)

REFERENCE = Path(__file__).resolve().parents[2] / "reference"


# ------------------------------------------------------------------ the pieces


@pytest.mark.parametrize(
    "k,m,a", [(0, 0, 5.0), (7, 10, 5.0), (60, 100, 5.0), (40, 100, 1.0), (600, 1000, 20.0)]
)
def test_sign_evalue_matches_numerical_integration_of_the_mixture(k, m, a):
    def integrand(q):
        return (2 * q) ** k * (2 * (1 - q)) ** (m - k) * 2 * stats.beta.pdf(q, a, a)

    reference = integrate.quad(integrand, 0.5, 1.0, limit=400, epsabs=0)[0]
    assert np.exp(log_sign_evalue(k, m, a)) == pytest.approx(reference, rel=1e-7)


def test_sign_evalue_is_never_nan_deep_in_the_tail():
    # 3 B-wins in 3,000 non-ties: evidence for A, none for B (log E -inf or hugely negative)
    value = log_sign_evalue(np.array(3), np.array(3000), 5.0)
    assert not np.isnan(value) and value < -1000
    assert log_sign_evalue(np.array(2997), np.array(3000), 5.0) > 1000


@pytest.mark.parametrize("q0", [0.5, 0.4, 0.2])
def test_sign_evalue_is_a_supermartingale_under_every_null_q(q0):
    k = np.arange(0, 60)[:, None]
    m = np.arange(0, 60)[None, :]
    ok = k <= m
    k, m = np.broadcast_arrays(k, m)
    now = log_sign_evalue(k[ok], m[ok], 5.0)
    nxt = q0 * np.exp(log_sign_evalue(k[ok] + 1, m[ok] + 1, 5.0) - now) + (1 - q0) * np.exp(
        log_sign_evalue(k[ok], m[ok] + 1, 5.0) - now
    )
    assert (nxt <= 1 + 1e-9).all()
    if q0 == 0.5:  # a martingale at the boundary of the null
        np.testing.assert_allclose(nxt, 1.0, rtol=1e-9)


@pytest.mark.parametrize(
    "k,m,q0", [(7, 10, 0.3), (60, 100, 0.55), (40, 100, 0.2), (600, 1000, 0.58), (3, 3, 0.9)]
)
def test_share_evalue_matches_numerical_integration_and_the_sign_test(k, m, q0):
    a = 5.0

    def integrand(q):
        ratio = (q / q0) ** k * ((1 - q) / (1 - q0)) ** (m - k)
        return ratio * stats.beta.pdf(q, a, a) / stats.beta.sf(q0, a, a)

    reference = integrate.quad(integrand, q0, 1.0, limit=400, epsabs=0)[0]
    assert np.exp(log_share_evalue(k, m, a, q0)) == pytest.approx(reference, rel=1e-7)
    assert log_share_evalue(k, m, a, 0.5) == pytest.approx(log_sign_evalue(k, m, a), abs=1e-9)


def test_the_rejected_shares_are_an_interval_from_zero():
    """What the bisection of share_lower_bound assumes: wherever e >= 1 / level, every
    smaller q0 is rejected too (the e-value may wiggle only far below 1)."""
    q0 = np.linspace(0.0005, 0.9995, 1999)
    for m in (1, 5, 20, 80, 300):
        for k in range(0, m + 1, max(1, m // 10)):
            log_e = log_share_evalue(np.full_like(q0, k), np.full_like(q0, m), 5.0, q0)
            for level in (0.05, 0.001):
                rejected = log_e >= np.log(1 / level)
                assert not (np.diff(rejected.astype(int)) > 0).any(), (k, m, level)
                bound = share_lower_bound(np.array(k), np.array(m), 5.0, level)
                assert (rejected == (q0 < bound)).mean() > 0.998


def test_the_running_share_bound_equals_bisecting_every_look():
    """decisions._running_bound bisects only the looks that can raise a bound; it must give
    what bisecting every look gives, to the last bit."""
    from adaptive.stopping.decisions import _running_bound

    rng = np.random.default_rng(2)
    for _ in range(60):
        lens = rng.integers(1, 600, rng.integers(1, 6))
        seg = np.repeat(np.arange(len(lens)), lens)
        k, m = [], []
        for n in lens:
            start = rng.integers(0, 30)
            k.append(start + np.cumsum(rng.random(n) < rng.uniform(0.2, 0.8)))
            m.append(start + rng.integers(0, 30) + np.arange(1, n + 1))
        k, m = np.concatenate(k).astype(float), np.concatenate(m).astype(float)
        prior = rng.uniform(0, 0.6, len(lens)) * (rng.random(len(lens)) < 0.5)
        every = prior.copy()
        np.maximum.at(every, seg, share_lower_bound(k, m, 5.0, 0.001))
        np.testing.assert_array_equal(_running_bound(k, m, seg, prior, 5.0, 0.001), every)


def test_the_share_sequence_covers_at_every_look():
    """Running bounds of B's share miss the true share at some look in at most `level`
    of the campaigns (here 2 x 0.05 each side), on 300 seeded campaigns of 400."""
    rng = np.random.default_rng(3)
    misses = 0
    for _ in range(300):
        wins = rng.random(400) < 0.6
        k, m = np.cumsum(wins), np.arange(1, 401)
        low = np.maximum.accumulate(share_lower_bound(k, m, 5.0, 0.05))
        high = 1 - np.maximum.accumulate(share_lower_bound(m - k, m, 5.0, 0.05))
        misses += bool(((low > 0.6) | (high < 0.6)).any())
    assert misses / 300 <= 0.1


@pytest.mark.parametrize("seed", range(4))
def test_a_sign_decision_and_its_interval_tell_one_story(seed):
    """A B-better row's share interval reaches 1/2 (A better: falls to it) and an open
    row's holds it, at the end of campaigns where some comparisons close and some do not
    (an equivalent row may show either: a difference inside the margin)."""
    rng = np.random.default_rng(seed)
    C, N = 12, 3000
    p_b = rng.uniform(0.3, 0.7, C)
    comparison = rng.integers(0, C, N)
    signed = np.where(rng.random(N) < 0.2, 0, np.where(rng.random(N) < p_b[comparison], 1, -1))
    for correction in ("bonferroni", "none"):
        d = decide(comparison, np.arange(N), signed, C, DecisionRule(correction=correction))
        rows = decision_rows(d, [("d", f"a{c}", f"b{c}") for c in range(C)])
        for row in rows:
            if row["decision"] == "B better":
                assert row["b_share_low"] >= 0.5
            elif row["decision"] == "A better":
                assert row["b_share_high"] <= 0.5
            elif row["decision"] == "undecided":  # the sign's interval still holds 1/2
                assert row["b_share_low"] < 0.5 < row["b_share_high"]
            assert row["b_share_low"] <= row["b_share"] <= row["b_share_high"]
        # the campaign has both kinds, so each branch above was checked
        seen = {r["decision"] for r in rows}
        assert seen & {"B better", "A better"} and "undecided" in seen, seen


def test_confidence_sequence_matches_confseq():
    sys.path.insert(0, str(REFERENCE))
    try:
        from confseq.predmix import predmix_empbern_twosided_cs
    finally:
        sys.path.remove(str(REFERENCE))
    rng = np.random.default_rng(1)
    for x in (rng.random(400) ** 2, rng.integers(0, 3, 300) / 2.0, np.ones(50)):
        for alpha in (0.05, 0.001):
            low, high = predmix_empbern_twosided_cs(
                x, alpha=alpha, truncation=0.5, running_intersection=True
            )
            mine_low, mine_high = eb_confidence_sequence(x, alpha)
            np.testing.assert_allclose(mine_low, low, atol=1e-12)
            np.testing.assert_allclose(mine_high, np.minimum(high, 1.0), atol=1e-12)


def test_confidence_sequence_covers_at_every_look():
    # a skewed three-point distribution like signed judgments, mean 0.62 on [0, 1]
    rng = np.random.default_rng(2)
    misses = 0
    for _ in range(300):
        x = rng.choice([0.0, 0.5, 1.0], size=500, p=[0.2, 0.36, 0.44])
        low, high = eb_confidence_sequence(x, 0.1)
        misses += bool(((low > 0.62) | (high < 0.62)).any())
    assert misses / 300 <= 0.1


def test_prompt_unit_keeps_the_first_judgment_of_each_cell():
    comp = np.array([0, 0, 1, 0, 1, 1])
    prompt = np.array([5, 5, 5, 2, 5, 0])
    assert decision_observations(comp, prompt, "prompt").tolist() == [1, 0, 1, 1, 0, 1]
    assert decision_observations(comp, prompt, "judgment").all()


def test_net_preference_is_the_mean_of_cell_means_with_a_prompt_level_interval():
    comp = np.array([0, 0, 0, 0, 0, 1])
    prompt = np.array([0, 0, 1, 2, 2, 0])
    signed = np.array([1, -1, 1, 1, 1, -1])
    r = net_preference(comp, prompt, signed, 2)
    cells = np.array([0.0, 1.0, 1.0])
    assert r.mean[0] == pytest.approx(cells.mean())
    half = stats.t.ppf(0.975, 2) * cells.std(ddof=1) / np.sqrt(3)
    assert r.ci_high[0] == pytest.approx(min(cells.mean() + half, 1.0))
    assert r.num_prompts.tolist() == [3, 1] and np.isnan(r.se[1])


@pytest.mark.parametrize("value, prompts", [(1 / 3, 7), (0.2, 6), (1.0, 6), (-2 / 3, 5), (0.5, 3)])
def test_prompts_with_one_mean_have_no_spread_and_the_sign_tests_p(value, prompts):
    """Equal prompt means (1/3 from 3 judgments each, ...) leave no spread: the t statistic is
    undefined (rounding once made it 1e16 and p 1e-48), and p is the sign test's."""
    from fractions import Fraction

    from adaptive.estimation.significance import observed_from_judgments

    f = Fraction(value).limit_denominator(10)
    k, m = abs(f.numerator), f.denominator
    per_prompt = [int(np.sign(value))] * k + [0] * (m - k)
    signed = np.array(per_prompt * prompts)
    prompt = np.repeat(np.arange(prompts), m)
    comp = np.zeros(len(signed), dtype=int)
    r = net_preference(comp, prompt, signed, 1)
    assert r.mean[0] == pytest.approx(value) and r.se[0] == 0.0
    mean, p = observed_from_judgments(comp, prompt, signed, 1)
    assert p[0] == pytest.approx(stats.binomtest(prompts, prompts, 0.5).pvalue)
    # one prompt leaning the other way: an ordinary t-test again
    flipped = signed.copy()
    flipped[prompt == 0] *= -1
    _, p_t = observed_from_judgments(comp, prompt, flipped, 1)
    cells = np.full(prompts, value)
    cells[0] = -value
    assert p_t[0] == pytest.approx(stats.ttest_1samp(cells, 0.0).pvalue)


def test_weighted_net_preference_weighs_within_a_prompt_and_drops_weight_zero():
    comp = np.array([0, 0, 0, 0, 0, 1])
    prompt = np.array([0, 0, 1, 2, 2, 0])
    signed = np.array([1, -1, 1, 1, -1, -1])
    # prompt 0: (3 * 1 - 1) / 4; prompt 1 dropped (weight 0); prompt 2: (1 * 1 - 1 * 1) / 2
    r = net_preference(comp, prompt, signed, 2, weight=np.array([3, 1, 0, 1, 1, 0]))
    assert r.mean[0] == pytest.approx(np.mean([0.5, 0.0]))
    assert r.num_prompts.tolist() == [2, 0] and np.isnan(r.mean[1])
    plain = net_preference(comp, prompt, signed, 2)
    same = net_preference(comp, prompt, signed, 2, weight=np.full(6, 2.5))
    np.testing.assert_allclose(same.mean, plain.mean)
    with pytest.raises(ValueError, match="weight"):
        net_preference(comp, prompt, signed, 2, weight=-np.ones(6))


def test_weighted_judgments_that_cancel_have_no_sign():
    """+1 at weights 0.1 and 0.2 against -1 at 0.3 cancel, up to 1e-17 of rounding: the
    mean is 0 and p is 1, not the sign test's p of a non-zero mean."""
    from adaptive.estimation.significance import observed_from_judgments

    prompts = 12
    signed = np.tile([1.0, 1.0, -1.0], prompts)
    weight = np.tile([0.1, 0.2, 0.3], prompts)
    prompt = np.repeat(np.arange(prompts), 3)
    comp = np.zeros(signed.shape[0], dtype=int)
    assert np.sum(signed[:3] * weight[:3]) != 0.0  # the rounding this is about
    r = net_preference(comp, prompt, signed, 1, weight=weight)
    assert r.mean[0] == 0.0 and r.se[0] == 0.0
    mean, p = observed_from_judgments(comp, prompt, signed, 1, weight=weight)
    assert mean[0] == 0.0 and p[0] == 1.0


def test_rule_is_validated_and_named():
    with pytest.raises(ValueError, match="unit"):
        DecisionRule(unit="cell")
    with pytest.raises(ValueError, match="alpha"):
        DecisionRule(alpha=1.5)
    rule = DecisionRule(alpha=0.05)
    assert rule.alpha_each(10) == pytest.approx(0.005)
    assert "bonferroni" in rule.describe(10) and "0.005" in rule.describe(10)
    assert DecisionRule(correction="none").alpha_each(10) == 0.05


# ------------------------------------------------------------------- decisions


def simulate(rng, nets, n, *, tie=0.25, spread=0.0, per_cell=1, num_prompts=None):
    """Judgments of each comparison, prompts with their own preference (a misspecified world)."""
    num_prompts = num_prompts or n
    comp, prompt, signed = [], [], []
    for c, net in enumerate(nets):
        # each prompt shifts the B share; Δ over the prompt population stays `net`
        shift = spread * rng.standard_normal(num_prompts)
        shift -= shift.mean()
        p_b = np.clip((1 - tie) / 2 + net / 2 + shift, 0, 1 - tie)
        cells = rng.permutation(np.repeat(np.arange(num_prompts), per_cell))[:n]
        r = rng.random(n)
        s = np.where(r < p_b[cells], 1.0, np.where(r < 1 - tie, -1.0, 0.0))
        comp += [c] * n
        prompt += cells.tolist()
        signed += s.tolist()
    order = rng.permutation(len(comp))
    return np.array(comp)[order], np.array(prompt)[order], np.array(signed)[order]


def test_clear_effects_are_decided_with_the_right_sign():
    rng = np.random.default_rng(3)
    comp, prompt, signed = simulate(rng, [0.4, -0.4, 0.0], 600)
    d = decide(comp, prompt, signed, 3)
    assert d.outcome[0] == B_BETTER and d.outcome[1] == A_BETTER
    assert d.outcome[2] in (UNDECIDED, EQUIVALENT)
    assert 0 < d.closed_at[0] < 600 and d.needed[0] == 0
    assert d.cs_low[0] > 0 and d.cs_high[1] < 0
    assert d.needed[2] > 0


def test_equivalence_needs_a_tight_sequence_inside_the_margin():
    rng = np.random.default_rng(4)
    comp, prompt, signed = simulate(rng, [0.0], 6000, tie=0.6)
    d = decide(comp, prompt, signed, 1, DecisionRule(margin=0.1))
    assert d.outcome[0] == EQUIVALENT
    assert -0.1 < d.cs_low[0] and d.cs_high[0] < 0.1


def test_sparse_data_stays_undecided_with_an_estimate_of_what_is_needed():
    # five B-wins out of five: far from enough at alpha / 20 per comparison
    d = decide(np.zeros(5, int), np.arange(5), np.ones(5), 20)
    assert d.outcome[0] == UNDECIDED and 1 <= d.needed[0] < 100
    empty = decide(np.zeros(0, int), np.zeros(0, int), np.zeros(0), 2)
    assert (empty.outcome == UNDECIDED).all() and np.isinf(empty.needed).all()


def test_the_optimistic_need_is_an_upper_bound_that_fades_with_data():
    # the same 60% lead among non-ties, seen on 10, 40 and 160 prompts; and a 50/50 split
    comp, prompt, signed = [], [], []
    for c, (m, b) in enumerate([(10, 6), (40, 24), (160, 96), (40, 20)]):
        comp += [c] * m
        prompt += list(range(m))
        # evenly interleaved, so that no early run of one side closes the sign
        signed += [1.0 if (i * b) % m < b else -1.0 for i in range(m)]
    d = decide(np.array(comp), np.array(prompt), np.array(signed), 4)
    assert (d.outcome == UNDECIDED).all()
    assert (d.needed_optimistic <= d.needed).all()
    # optimism buys most where the data are fewest, and less as they accrue
    ratio = d.needed_optimistic[:3] / d.needed[:3]
    assert ratio[0] < ratio[1] < ratio[2] < 1.0
    # with no lead at all the point estimate sees no closure soon; optimism still does
    assert np.isfinite(d.needed_optimistic[3]) and d.needed_optimistic[3] < d.needed[3]


def test_overwhelming_evidence_stays_a_finite_json_number():
    # 4,000 B-wins: the e-value's log passes 700, beyond a float's range
    n = 4000
    d = decide(np.zeros(n, int), np.arange(n), np.ones(n), 1)
    assert d.outcome[0] == B_BETTER
    assert np.isfinite(d.e_b).all() and np.isfinite(d.e_a).all() and d.e_b[0] > 1e299
    rows = decision_rows(d, [("overall", "A", "B")])
    json.dumps(rows, allow_nan=False)


def test_a_decision_never_depends_on_other_comparisons_data():
    rng = np.random.default_rng(5)
    comp, prompt, signed = simulate(rng, [0.15, 0.3, -0.05, 0.0], 500, per_cell=3, num_prompts=200)
    full = decide(comp, prompt, signed, 4)
    for _ in range(5):
        # thin the others to a random share, keep every judgment of comparison 0 in order
        keep = (comp == 0) | (rng.random(len(comp)) < rng.uniform(0.05, 0.9))
        part = decide(comp[keep], prompt[keep], signed[keep], 4)
        for field in ("outcome", "closed_at", "net", "cs_low", "cs_high", "e_b", "e_a", "needed"):
            np.testing.assert_array_equal(getattr(part, field)[0], getattr(full, field)[0])
        for field in ("net_used", "b_share", "share_low", "share_high"):
            np.testing.assert_array_equal(getattr(part, field)[0], getattr(full, field)[0])


@pytest.mark.parametrize(
    "unit,per_cell,spread",
    [("prompt", 1, 0.0), ("prompt", 3, 0.15), ("judgment", 1, 0.15)],
)
def test_null_campaigns_rarely_get_any_wrong_decision_at_any_look(unit, per_cell, spread):
    # 10 comparisons with no true difference, decisions checked after every judgment
    # (the first crossing counts): a campaign errs when any comparison gets a sign.
    rng = np.random.default_rng(6)
    rule = DecisionRule(alpha=0.05, unit=unit)
    campaigns, errors = 120, 0
    for _ in range(campaigns):
        comp, prompt, signed = simulate(
            rng, [0.0] * 10, 300, spread=spread, per_cell=per_cell, num_prompts=300 // per_cell
        )
        d = decide(comp, prompt, signed, 10, rule)
        errors += bool(np.isin(d.outcome, (A_BETTER, B_BETTER)).any())
    # alpha = 0.05; a rule without the split or with a fixed-look test fails this by far
    assert errors <= stats.binom.ppf(0.99, campaigns, 0.05)


def test_without_the_split_the_same_campaigns_err_more_often():
    # the test above can fail: at alpha 0.05 per comparison, 10 null comparisons err far more
    rng = np.random.default_rng(7)
    rule = DecisionRule(alpha=0.05, correction="none")
    split = DecisionRule(alpha=0.05)
    loose = strict = 0
    for _ in range(120):
        comp, prompt, signed = simulate(rng, [0.0] * 10, 300)
        loose += bool(np.isin(decide(comp, prompt, signed, 10, rule).outcome, (1, 2)).any())
        strict += bool(np.isin(decide(comp, prompt, signed, 10, split).outcome, (1, 2)).any())
    assert loose > strict


def test_batches_give_the_same_decisions_as_all_at_once():
    from adaptive.stopping.decisions import decisions_of, start, update

    rng = np.random.default_rng(8)
    comp, prompt, signed = simulate(rng, [0.2, 0.0, -0.35], 400, per_cell=2, num_prompts=200)
    for unit in ("prompt", "judgment"):
        rule = DecisionRule(unit=unit)
        whole = decide(comp, prompt, signed, 3, rule)
        state = start(3, 200, rule)
        cuts = np.sort(rng.choice(len(comp), 12, replace=False))
        for part in np.split(np.arange(len(comp)), cuts):
            state = update(state, comp[part], prompt[part], signed[part])
        parts = decisions_of(state)
        for field in ("outcome", "closed_at", "num_obs", "num_judgments", "num_prompts"):
            np.testing.assert_array_equal(getattr(parts, field), getattr(whole, field))
        for field in ("net", "cs_low", "cs_high", "e_b", "e_a", "needed", "net_used", "b_share"):
            np.testing.assert_allclose(getattr(parts, field), getattr(whole, field), rtol=1e-9)
        # the share's sequence is a running bound over every look, whatever the batches
        for field in ("share_low", "share_high"):
            np.testing.assert_array_equal(getattr(parts, field), getattr(whole, field))


def test_the_running_net_preference_is_the_mean_of_cell_means_of_the_raw_judgments():
    from adaptive.stopping.decisions import decisions_of, start, update

    rng = np.random.default_rng(11)
    comp, prompt, signed = simulate(rng, [0.3, -0.1, 0.0, 0.5], 300, per_cell=3, num_prompts=150)
    state = start(4, 150)
    for part in np.array_split(np.arange(len(comp)), 37):
        state = update(state, comp[part], prompt[part], signed[part])
        # the needs are cached per comparison between looks: the same as from scratch
        upto = part[-1] + 1
        fresh = decide(comp[:upto], prompt[:upto], signed[:upto], 4)
        d = decisions_of(state)
        np.testing.assert_array_equal(d.needed, fresh.needed)
        np.testing.assert_array_equal(d.needed_optimistic, fresh.needed_optimistic)
    # a batch that touches one comparison: the other three needs come from the cache
    extra = np.array([0] * 6), np.arange(144, 150), np.array([1.0, 1, -1, 0, 1, 1])
    state = update(state, *extra)
    comp, prompt, signed = (np.concatenate([a, b]) for a, b in zip((comp, prompt, signed), extra))
    d, fresh = decisions_of(state), decide(comp, prompt, signed, 4)
    np.testing.assert_array_equal(d.needed, fresh.needed)
    np.testing.assert_array_equal(d.needed_optimistic, fresh.needed_optimistic)
    reference = net_preference(comp, prompt, signed, 4)
    np.testing.assert_allclose(d.net, reference.mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(d.num_prompts, reference.num_prompts)
    # the tally holds the judged cells only, each with its raw sum and count
    assert len(state.cells) == len(np.unique(comp * 150 + prompt))
    c, p = int(comp[0]), int(prompt[0])
    cell = (comp == c) & (prompt == p)
    assert state.cells.get(c, p) == (float(signed[cell].sum()), int(cell.sum()))
    unjudged = int(np.setdiff1d(np.arange(150), prompt[comp == 0])[0])
    assert state.cells.get(0, unjudged) == (0.0, 0)


def test_a_state_that_was_updated_cannot_be_updated_again():
    from adaptive.stopping.decisions import decisions_of, start, update

    first = start(2, 5)
    # a batch rejected whole (a prompt out of range) leaves the state as it was
    with pytest.raises(ValueError, match="prompt indices"):
        update(first, np.array([0, 1]), np.array([1, 9]), np.array([1.0, 0.0]))
    second = update(first, np.array([0]), np.array([1]), np.array([1.0]))
    with pytest.raises(ValueError, match="already updated"):
        update(first, np.array([1]), np.array([2]), np.array([-1.0]))
    # the older state's decisions stay readable; the newer one goes on
    assert decisions_of(first).num_judgments.tolist() == [0, 0]
    third = update(second, np.array([1]), np.array([2]), np.array([-1.0]))
    assert decisions_of(third).net.tolist() == [1.0, -1.0]


def test_the_decisions_sequence_is_the_reference_checked_one():
    # the running sums inside decide give the confidence sequence that matches confseq
    rng = np.random.default_rng(9)
    comp, prompt, signed = simulate(rng, [0.1], 500)
    rule = DecisionRule()
    d = decide(comp, prompt, signed, 1, rule)
    used = decision_observations(comp, prompt, rule.unit)
    low, high = eb_confidence_sequence((signed[used] + 1) / 2, d.alpha_each)
    assert d.cs_low[0] == pytest.approx(2 * low[-1] - 1, abs=1e-12)
    assert d.cs_high[0] == pytest.approx(2 * high[-1] - 1, abs=1e-12)


def test_t_interval_is_scipys_student_t_interval():
    """adaptive.stopping.evidence.t_interval (scipy.special's t quantile) against scipy.stats.t.interval,
    clipped to Δ's range [-1, 1]; one prompt counts as two (the quantile of 1 dof)."""
    from scipy import stats

    from adaptive.stopping.evidence import t_interval

    mean = np.array([0.1, -0.3, 0.5, 0.0, 0.9])
    se = np.array([0.05, 0.2, 0.1, 0.01, 0.3])
    n = np.array([2, 3, 11, 200, 1])
    for level in (0.9, 0.95, 0.99):
        low, high = t_interval(mean, se, n, level=level)
        want_low, want_high = stats.t.interval(level, np.maximum(n - 1, 1), loc=mean, scale=se)
        np.testing.assert_allclose(low, np.clip(want_low, -1, 1), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(high, np.clip(want_high, -1, 1), rtol=1e-12, atol=1e-12)


def test_needed_sign_takes_the_beta_quantile_of_the_leading_share(monkeypatch):
    """The optimistic count uses the quantile of Beta(1 + lead, 1 + trail): the same numbers
    with scipy.stats.beta.ppf as the quantile function (the reference), different ones with
    the shape parameters swapped."""
    from types import SimpleNamespace

    from scipy import stats

    import adaptive.stopping.needed as needed

    k, m, t = np.array([3, 10, 40, 7]), np.array([5, 16, 70, 9]), np.array([6, 20, 90, 9])
    got = needed.needed_sign(k, m, t, 1.0, 0.025, quantile=0.8)
    monkeypatch.setattr(
        needed, "special", SimpleNamespace(betaincinv=lambda a, b, p: stats.beta.ppf(p, a, b))
    )
    np.testing.assert_array_equal(got, needed.needed_sign(k, m, t, 1.0, 0.025, quantile=0.8))
    monkeypatch.setattr(
        needed, "special", SimpleNamespace(betaincinv=lambda a, b, p: stats.beta.ppf(p, b, a))
    )
    assert not np.array_equal(got, needed.needed_sign(k, m, t, 1.0, 0.025, quantile=0.8))
