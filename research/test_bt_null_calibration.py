"""Checks of research/bt_null_calibration.py's simulator and frequentist tests (cheap), and of
`evalset bt --report differences` on its campaigns: the verdict needs the items as well as
the model (tests/test_research.py runs this file in its own process)."""

from __future__ import annotations

import bt_null_calibration as null
import numpy as np
import polars as pl
import pytest
from scipy.stats import norm

from adaptive.leaderboards import bt


def test_one_seed_is_one_skeleton_in_every_design():
    flat = null.simulate(4, 0.0)
    dependent = null.simulate(4, 1.0)
    cols = ["item_id", "system_a", "system_b", "annotator_id", "shown_first"]
    assert flat.judgments.select(cols).equals(dependent.judgments.select(cols))
    assert flat.judgments.height == 20 * 5 * 6  # items x annotators x pairs of 4 responders
    assert set(flat.quality.values()) == {0.0}
    assert null.finite_truth(flat, "s0", "s1") == 0.0
    # with item-by-system variation the mean over a campaign's items is not 0
    assert null.finite_truth(dependent, "s0", "s1") != 0.0


def test_naive_wald_matches_the_products_mle():
    """The scipy fit (ties dropped, position intercept) gives the same p-values as
    `fit_mle`, which is tested against R's BradleyTerry2."""
    camp = null.simulate(3, 1.0)
    config = bt.BTConfig(by="pooled", ties="drop", method="mle", reference="s0")
    rows = {
        r["system"]: r for r in bt.ability_rows(bt.fit_dimension(camp.judgments, "overall", config))
    }
    pairs = [("s0", s) for s in ("s1", "s2", "s3", "s4")]
    naive, robust = null.pooled_wald_p(camp.judgments, pairs)
    expected = [2 * norm.sf(abs(rows[s]["mean"]) / rows[s]["sd"]) for _, s in pairs]
    np.testing.assert_allclose(naive, expected, rtol=1e-5)
    # dependent judgments within items: the clustered errors are wider
    assert all(r > n for r, n in zip(robust, naive))


def test_item_t_test_and_holm():
    camp = null.simulate(0, 0.0)
    p = null.item_t_p(camp.judgments, "s0", "s1")
    assert 0.0 < p <= 1.0
    assert null.holm_any([0.01, 0.04, 0.03, 0.2]) == (True, 1)  # 0.01 <= 0.05 / 4 only
    assert null.upper95(0, 40) == pytest.approx(1 - 0.05 ** (1 / 40))


def _s1_wins_every_judgment_against_s0(j: pl.DataFrame) -> tuple[pl.Series, pl.DataFrame]:
    """(which rows are the pair s0-s1, the judgments with s1 winning every one of them)."""
    involved = pl.Series(
        ((j["system_a"] == "s0") & (j["system_b"] == "s1"))
        | ((j["system_a"] == "s1") & (j["system_b"] == "s0"))
    )
    winner = pl.Series(np.where(j["system_a"] == "s1", "a", "b"))
    clear = j.with_columns(winner=pl.when(involved).then(winner).otherwise(pl.col("winner")))
    return involved, clear


def test_the_verdict_needs_the_items_as_well_as_the_model():
    """Dependent judgments within items (every annotator of an item sees the same
    responses): the pooled model alone flags pairs of equal systems, the verdict does not;
    a real difference is flagged by both."""
    camp = null.simulate(0, 1.0)
    config = bt.BTConfig(by="pooled", method="laplace")
    rows = bt.difference_rows(bt.fit_dimension(camp.judgments, "overall", config))
    assert any(r["model_adjusted"] for r in rows)  # measured: 2 of the 10 pairs
    assert not any(r["significant_adjusted"] or r["data_adjusted"] for r in rows)
    for r in rows:
        p = null.item_t_p(camp.judgments, r["system_a"], r["system_b"])
        assert r["observed_p"] == pytest.approx(p)  # scipy's t-test, items as units
        assert r["n_items"] >= 2 and r["adjust_rule"] == "holm on the model and on the data"
    # s1 wins every judgment against s0 that it is part of, on every item: both views agree
    _, clear = _s1_wins_every_judgment_against_s0(camp.judgments)
    rows = bt.difference_rows(bt.fit_dimension(clear, "overall", config))
    (pair,) = [r for r in rows if {r["system_a"], r["system_b"]} == {"s0", "s1"}]
    sign = 1.0 if pair["system_b"] == "s1" else -1.0
    assert pair["significant_adjusted"] and pair["model_adjusted"] and pair["data_adjusted"]
    assert sign * pair["mean"] > 0 and sign * pair["observed_net"] == pytest.approx(1.0)


def test_the_data_check_reads_pairs_stored_either_way_round():
    """The pair s0-s1 with s1 winning every judgment, once stored (s0, s1) and once
    (s1, s0) with the winner and the screen order flipped: the same pair, the same sign."""
    camp = null.simulate(0, 0.0)
    j = camp.judgments
    involved, clear = _s1_wins_every_judgment_against_s0(j)
    flip = {"a": "b", "b": "a", "tie": "tie"}
    swapped = clear.with_columns(
        system_a=pl.when(involved).then(pl.col("system_b")).otherwise(pl.col("system_a")),
        system_b=pl.when(involved).then(pl.col("system_a")).otherwise(pl.col("system_b")),
        winner=pl.when(involved)
        .then(pl.col("winner").replace_strict(flip))
        .otherwise(pl.col("winner")),
        shown_first=pl.when(involved)
        .then(pl.col("shown_first").replace_strict({"a": "b", "b": "a"}))
        .otherwise(pl.col("shown_first")),
    )
    config = bt.BTConfig(by="pooled", method="laplace")
    for frame in (clear, swapped):
        rows = bt.difference_rows(bt.fit_dimension(frame, "overall", config))
        (pair,) = [r for r in rows if {r["system_a"], r["system_b"]} == {"s0", "s1"}]
        toward_s1 = 1.0 if pair["system_b"] == "s1" else -1.0
        assert toward_s1 * pair["observed_net"] == pytest.approx(1.0)
        assert toward_s1 * pair["mean"] > 0 and pair["significant_adjusted"]
