"""The pruning's ranking (``--rank``) is one option with one default in every door."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import evalset
from services.cli import main
from tests.factories import same_rows

NCM = Path(__file__).resolve().parents[2] / "data" / "chateval_ncm" / "judgments.csv"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:  # noqa: ANN001
    frame = pl.read_csv(NCM)
    first = frame["item_id"].unique(maintain_order=True).head(40)
    path = tmp_path_factory.mktemp("ncm") / "judgments.csv"
    frame.filter(pl.col("item_id").is_in(first.to_list())).write_csv(path)
    return path


def _cli(argv: list[str], capsys) -> list[dict]:  # noqa: ANN001
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_the_ranking_is_chosen_the_same_way_on_the_command_line_and_in_python(data, capsys):  # noqa: ANN001
    args = ["prune", "--data", str(data), "--keep", "8", "--format", "json", "--quiet"]
    default = _cli(args, capsys)
    same_rows(evalset.prune(data, keep=8).to_dicts(), default)
    information = _cli([*args, "--rank", "information"], capsys)
    same_rows(evalset.prune(data, keep=8, rank="information").to_dicts(), information)
    kept = {r["item_id"] for r in default if r["kept"]}
    assert kept != {r["item_id"] for r in information if r["kept"]}, "the option did nothing"


def test_an_unknown_ranking_is_refused_with_its_name(data):  # noqa: ANN001
    with pytest.raises(ValueError, match="'entropy'"):
        evalset.prune(data, keep=8, rank="entropy")
