"""Every figure is written as PNG and SVG, from the Python API and from the command line."""

from __future__ import annotations

import math

import polars as pl
import pytest

import evalset
from evalset import plots
from services.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def df() -> pl.DataFrame:
    return evalset.example(num_systems=4, num_prompts=12, seed=3)


def _check(path):
    data = path.read_bytes()
    if path.suffix == ".png":
        assert data.startswith(PNG) and len(data) > 5_000
    else:
        assert b"<svg" in data[:2000]


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_leaderboard_progress_and_matrices(df, tmp_path, suffix):
    board, dec = evalset.leaderboard(df), evalset.decisions(df)
    for path in (
        plots.plot_leaderboard(board, dec, tmp_path / f"board{suffix}"),
        plots.plot_progress(dec, tmp_path / f"progress{suffix}", cost_per_judgment=0.1),
        plots.plot_matrices(df, tmp_path / f"matrices{suffix}"),
    ):
        _check(path)


def test_leader_decisions_follow_the_decisions_of_the_pairs():
    board = [{"system": "x"}, {"system": "y"}, {"system": "z"}, {"system": "w"}]
    dec = [
        {"system_a": "y", "system_b": "x", "decision": "B better"},  # x (leader) better
        {"system_a": "x", "system_b": "z", "decision": "undecided"},
    ]
    assert plots.leader_decisions(board, dec) == {
        "x": "leader",
        "y": "below the leader",
        "z": "undecided",
        "w": "not compared",
    }


def test_items_and_annotators(df, tmp_path):
    _check(evalset.plot_item_information(df, tmp_path / "items.png"))
    _check(evalset.plot_annotators(df, tmp_path / "annotators.svg"))


def test_a_figure_is_png_or_svg(df, tmp_path):
    with pytest.raises(ValueError, match=".png or .svg"):
        plots.plot_matrices(df, tmp_path / "m.pdf")


def test_se_curve_band_stays_above_zero(tmp_path, monkeypatch):
    rows = [{"policy": "random", "k": k, "se_mean": 0.1, "draw_sd": 0.2} for k in (10, 20)] + [
        {"policy": "full", "k": 20, "se_mean": 0.1, "draw_sd": 0.0}
    ]
    seen = {}
    real = plots.plt.Axes.fill_between

    def spy(self, x, lo, hi, **kw):
        seen["lo"] = list(lo)
        return real(self, x, lo, hi, **kw)

    monkeypatch.setattr(plots.plt.Axes, "fill_between", spy)
    _check(plots.plot_se_curve(rows, tmp_path / "se.png"))
    assert min(seen["lo"]) >= 0 and not any(math.isnan(v) for v in seen["lo"])


def test_cli_plot_and_bt_plot(df, tmp_path, capsys):
    data = tmp_path / "j.csv"
    df.drop("row").write_csv(data)
    out = tmp_path / "progress.svg"
    assert main(["plot", "progress", "--data", str(data), "--plot", str(out), "--quiet",
                 "--format", "csv"]) == 0  # fmt: skip
    _check(out)
    assert capsys.readouterr().out.startswith("dimension,system_a,system_b,decision")
    out = tmp_path / "board.png"
    assert main(["bt", "--data", str(data), "--by", "pooled", "--method", "fast",
                 "--reference", "s0", "--plot", str(out), "--format", "csv", "--quiet"]) == 0  # fmt: skip
    _check(out)
    table = pl.read_csv(capsys.readouterr().out.encode())
    assert table["scale"].unique().to_list() == ["relative to s0"]
    assert table["mean"].is_sorted(descending=True)
    assert table.filter(pl.col("system") == "s0")["mean"][0] == 0


def test_evidence_crosses_the_boundary_where_the_decision_closed(df, tmp_path):
    ev = evalset.evidence(df)
    dec = evalset.decisions(df)
    for (a, b), rows in ev.group_by(["system_a", "system_b"], maintain_order=True):
        d = dec.filter((pl.col("system_a") == a) & (pl.col("system_b") == b)).row(0, named=True)
        crossed = rows.filter(
            (pl.col("log10_e_b") >= pl.col("threshold"))
            | (pl.col("log10_e_a") >= pl.col("threshold"))
        )
        if d["decision"] in ("B better", "A better"):
            assert crossed["judgments"][0] == d["closed_at"]
        elif d["decision"] == "undecided":
            assert crossed.height == 0
        assert rows["cs_low"][-1] == pytest.approx(d["cs_low"])
    _check(plots.plot_evidence(ev, tmp_path / "evidence.png"))
