"""Issue 39: the Python API does what its docs say and calls the library, not the command line."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import polars as pl
import pytest

import evalset
from services.cli import main

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "data" / "mtbench" / "judgments.csv"


@pytest.fixture(scope="module")
def df() -> pl.DataFrame:
    return evalset.example(num_systems=3, num_prompts=12, seed=4)


def test_plot_item_information_draws_the_fit_it_is_given(df, tmp_path, monkeypatch):
    result = evalset.fit(df, num_draws=100)

    def no_refit(*args, **kwargs):
        raise AssertionError("plot_item_information refitted")

    monkeypatch.setattr(evalset, "fit", no_refit)
    out = evalset.plot_item_information(result, tmp_path / "items.png", num_curves=2)
    assert out.exists() and out.stat().st_size > 1000


def test_plot_annotators_takes_assume_a_first_as_the_command_line_does(df, tmp_path, monkeypatch):
    import evalset.plots

    seen = {}

    def capture(table, path, **options):
        seen["table"] = table
        return Path(path)

    monkeypatch.setattr(evalset.plots, "plot_annotators", capture)
    frame = df.drop("shown_first")
    evalset.plot_annotators(frame, tmp_path / "a.png", assume_a_first=True)
    screened = seen["table"]["position_intercept"]
    assert screened.is_not_null().any()  # without the flag the position is not screened
    evalset.plot_annotators(frame, tmp_path / "a.png")
    assert seen["table"]["position_intercept"].is_null().all()


def test_needed_is_an_integer_as_on_the_command_line(df):
    rows = evalset.decisions(df)
    assert rows["needed"].dtype == pl.Int64


def test_needed_beyond_the_campaign_s_prompts_says_new_prompts_are_needed(capsys):
    rows = evalset.decisions(MTBENCH)
    row = rows.filter(
        (pl.col("system_a") == "gpt-3.5-turbo") & (pl.col("system_b") == "claude-v1")
    ).row(0, named=True)
    assert row["decision"] == "undecided"
    assert row["unused_prompts"] == 32 and row["needed"] > 1000
    assert row["needs_new_prompts"] is True
    closed = rows.filter(pl.col("decision") != "undecided")
    assert not closed["needs_new_prompts"].any()
    # the command line says so too, in a note
    assert main(["decisions", "--data", str(MTBENCH), "--format", "csv"]) == 0
    err = capsys.readouterr().err
    assert "needs_new_prompts" in err and "new prompts" in err
    assert "family: 15 comparisons" in err
    # with every judgment counted, repeats of the campaign's cells can close it
    judged = evalset.decisions(MTBENCH, unit="judgment")
    assert not judged["needs_new_prompts"].any()


def test_evalset_does_not_import_the_command_line():
    for path in sorted((ROOT / "evalset").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("services.cli"), path
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("services.cli") for a in node.names), path


def test_recommend_calls_the_library_and_gives_the_command_line_s_batch(
    df, tmp_path, monkeypatch, capsys
):
    path = tmp_path / "judgments.csv"
    df.drop("row").write_csv(path)
    assert main(["recommend", "--data", str(path), "--size", "5", "--format", "json",
                 "--quiet", "--seed", "3"]) == 0  # fmt: skip
    cli = json.loads(capsys.readouterr().out)
    import tempfile

    import services.cli

    def refuse(*args, **kwargs):
        raise AssertionError("evalset.recommend went through a temporary file or argv")

    monkeypatch.setattr(services.cli, "build_parser", refuse)
    monkeypatch.setattr(tempfile, "TemporaryDirectory", refuse)
    got = evalset.recommend(df, size=5, seed=3)
    assert got.to_dicts() == cli
    assert evalset.recommend(path, size=5, seed=3).to_dicts() == cli
    with pytest.raises(ValueError, match="nobody"):
        evalset.recommend(df, size=5, targets=["s0:nobody"])
