"""The notebook API (``import evalset``): frames in, polars frames out, docstring examples run."""

from __future__ import annotations

import doctest

import numpy as np
import pandas as pd
import polars as pl
import pytest

import evalset
from adaptive.core.cells import build_cells
from adaptive.stopping.decisions import decide


def test_docstring_examples_run():
    result = doctest.testmod(evalset, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8 and result.failed == 0


@pytest.fixture(scope="module")
def df() -> pl.DataFrame:
    return evalset.example(num_systems=3, num_prompts=20, seed=1)


def test_pandas_and_polars_give_the_same_answers(df):
    pandas_frame = pd.DataFrame({c: df[c].to_list() for c in df.columns if c != "row"})
    assert evalset.read(pandas_frame).equals(df)
    assert evalset.decisions(pandas_frame).equals(evalset.decisions(df))


def test_decisions_are_those_of_adaptive_decisions_in_row_order(df):
    got = evalset.decisions(df)
    cells = build_cells(df)
    d = decide(
        cells.judgment_comparison,
        cells.judgment_prompt,
        cells.judgment_y.astype(np.int64) - 1,
        cells.num_comparisons,
    )
    want = {
        (a, b): (name, float(net))
        for (a, b), name, net in zip(cells.comparison_names(), d.names(), d.net_used)
    }
    assert {(r[0], r[1]): (r[2], r[3]) for r in
            got.select("system_a", "system_b", "decision", "net_preference").rows()} == want  # fmt: skip
    # undecided comparisons say how many judgments they likely still need, as an integer
    open_ = got.filter(pl.col("decision") == "undecided")
    assert open_["closed_at"].is_null().all() and got["needed"].dtype == pl.Int64


def test_leaderboard_sum_to_zero_or_relative_to_a_reference(df):
    board = evalset.leaderboard(df)
    assert abs(board["ability"].sum()) < 1e-6 and set(board["scale"]) == {"sum-to-zero"}
    rel = evalset.leaderboard(df, reference="s0", method="laplace")  # the old name still works
    s0 = rel.filter(pl.col("system") == "s0").row(0, named=True)
    assert s0["ability"] == 0 and s0["sd"] == 0 and rel["scale"][0] == "relative to s0"
    # differences do not depend on the anchor
    a = dict(zip(board["system"], board["ability"]))
    r = dict(zip(rel["system"], rel["ability"]))
    assert a["s2"] - a["s1"] == pytest.approx(r["s2"] - r["s1"], abs=1e-9)
    with pytest.raises(ValueError, match="reference system 'nope'"):
        evalset.leaderboard(df, reference="nope")


def test_inference_data_of_a_bradley_terry_fit(df):
    from evalset.bradley_terry import _bt_fit

    fit = _bt_fit(evalset.read(df), "overall", "fast", "davidson", 0)
    idata = evalset.inference_data(fit)
    assert list(idata.posterior["ability"].coords["system"].values) == ["s0", "s1", "s2"]
    assert idata.posterior["ability"].dims == ("chain", "draw", "system")


def test_an_arena_frame_gives_a_leaderboard():
    battles = pd.DataFrame(
        {
            "model_a": ["x", "y", "x", "z"] * 30,
            "model_b": ["y", "z", "z", "x"] * 30,
            "winner": ["model_b", "model_b", "tie (bothbad)", "model_a"] * 30,
            "judge": [f"u{k}" for k in range(120)],
        }
    )
    board = evalset.leaderboard(battles)
    assert board["system"].to_list()[0] == "z" and board.height == 3


def test_prune_python_and_command_line_agree_and_are_sorted(tmp_path, capsys):
    from services.cli import main

    data = evalset.example(num_systems=4, num_prompts=12, seed=2)
    kept = evalset.prune(data, keep=5)
    assert kept.filter(pl.col("kept")).group_by("tier").len()["len"].min() >= 5
    path = tmp_path / "j.csv"
    data.drop("row").write_csv(path)
    assert main(["prune", "--data", str(path), "--keep", "5", "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["dimension", "item_id", "tier", "kept"]  # a table by default
    assert main(["prune", "--data", str(path), "--keep", "5", "--quiet", "--format", "csv"]) == 0
    table = pl.read_csv(capsys.readouterr().out.encode())
    for _, tier in table.group_by("tier", maintain_order=True):
        flags = tier["kept"].to_list()
        assert flags == sorted(flags, reverse=True)  # kept first
        ranks = tier.filter(pl.col("kept"))["rank"].to_list()
        assert ranks == sorted(ranks)  # most informative first
    assert sorted(table.rows()) == sorted(
        kept.select(table.columns).with_columns(pl.col("kept")).rows()
    )


def test_replay_wrapper_reports_each_policy():
    df = evalset.example(num_systems=3, num_prompts=30, seed=1)
    out = evalset.replay(df, seeds=2, batch_size=20)
    assert out["policy"].to_list() == ["adaptive", "uniform"]
    assert (out["judgments_mean"] <= df.height).all()
