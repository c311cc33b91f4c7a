"""CSV written for people escapes cells a spreadsheet would run as a formula; JSON stays raw.

Worker-controlled ids (a survey's PROLIFIC_PID, Label Studio's completed_by, a webhook's body)
and texts reach the CSV files a team opens in a spreadsheet: every CSV the product writes puts
an apostrophe in front of a text cell starting with ``= + - @``, a tab or a carriage return
(adaptive/core/csv_safe.py); numbers, JSONL and Parquet are written as they are.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adaptive.core.csv_safe import (
    FORMULA_STARTS,
    csv_text,
    escape_text,
    unescape_frame,
    unescape_text,
    write_csv,
)
from services.cli import main
from services.crowd import read_tasks, write_export

FIX = Path(__file__).parents[2] / "fixtures" / "crowd"

#: ids a worker can choose, each a formula to a spreadsheet (the store refuses control
#: characters in ids, so the tab and the carriage return are tried in texts below)
FORMULA_IDS = ("=cmd|' /C calc'!A0", "+SUM(1+1)", "=NOW()", "@x", "-2+3")


def _cells(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _file_cells(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:  # a carriage return inside a cell stays one
        return list(csv.DictReader(f))


def test_formula_cells_get_an_apostrophe_and_numbers_do_not():
    for value in (*FORMULA_IDS, "\tx", "\r=1+1"):
        assert escape_text(value) == "'" + value
    for value in ("-2", "+0.5", "-1e-3", "ok", "", "'quoted", "a=b"):
        assert escape_text(value) == value
    assert escape_text(-2) == -2 and escape_text(-0.5) == -0.5 and escape_text(None) is None
    # an apostrophe before a formula character gets one more, so reading back is exact
    assert escape_text("'=x") == "''=x" and unescape_text("''=x") == "'=x"


@given(st.text(alphabet=st.sampled_from(list(FORMULA_STARTS + "'a1.e \n")), min_size=1))
def test_escaping_is_reversed_exactly_and_never_leaves_a_formula(value):
    escaped = escape_text(value)
    assert unescape_text(escaped) == value
    if escaped[0] in FORMULA_STARTS:
        float(escaped)  # only a plain number is left as it is
    # a frame's cells are escaped alike, and read back as they were
    written = csv_text(pl.DataFrame({"v": [value]}))
    assert _cells(written)[0]["v"] == escaped
    back = unescape_frame(pl.read_csv(io.StringIO(written), infer_schema=False))
    assert back["v"].to_list() == [value]


def _formula_judgments(path: Path) -> pl.DataFrame:
    rows = []
    for k, wid in enumerate(FORMULA_IDS * 4):
        a, b = ("=NOW()", "@x") if k % 2 else ("sys-ok", "+SUM(1+1)")
        rows.append((f"j{k}", FORMULA_IDS[k % 5], a, b, wid, ("a", "b", "tie")[k % 3]))
    frame = pl.DataFrame(
        rows,
        schema=["judgment_id", "item_id", "system_a", "system_b", "annotator_id", "winner"],
        orient="row",
    )
    frame.write_ndjson(path)
    return frame


def test_export_escapes_formula_ids_and_jsonl_keeps_them(database_url, tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    original = _formula_judgments(source)
    db = ["--database-url", database_url]
    assert main(["import", str(source), "--project", "inj", "--create", *db]) == 0
    capsys.readouterr()
    assert main(["export", "--project", "inj", *db]) == 0
    stdout = _cells(capsys.readouterr().out)
    out_csv, out_jsonl = tmp_path / "out.csv", tmp_path / "out.jsonl"
    assert main(["export", "--project", "inj", *db, "-o", str(out_csv)]) == 0
    assert main(["export", "--project", "inj", *db, "-o", str(out_jsonl)]) == 0
    assert _file_cells(out_csv) == stdout
    by_id = {r["judgment_id"]: r for r in stdout}
    raw = {r["judgment_id"]: r for r in map(json.loads, out_jsonl.read_text().splitlines())}
    for want in original.iter_rows(named=True):
        for column in ("item_id", "system_a", "system_b", "annotator_id"):
            value = want[column]
            expected = value if value == "sys-ok" else "'" + value
            assert by_id[want["judgment_id"]][column] == expected
            assert raw[want["judgment_id"]][column] == value


def test_format_csv_of_a_command_escapes_text_not_numbers(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    _formula_judgments(source)
    argv = ["decisions", "--data", str(source)]
    assert main([*argv, "--format", "csv"]) == 0
    rows = _cells(capsys.readouterr().out)
    assert main([*argv, "--format", "json"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert {(r["system_a"], r["system_b"]) for r in rows} == {
        ("'" + r["system_a"] if r["system_a"] != "sys-ok" else "sys-ok", "'" + r["system_b"])
        for r in raw
    }
    negative = [
        r for r in raw if isinstance(r["net_preference"], float) and r["net_preference"] < 0
    ]
    assert negative, "a negative number to check"
    for r in rows:  # numbers are written as numbers, a minus sign included
        assert not r["net_preference"].startswith("'") and not r["cs_low"].startswith("'")


def test_crowd_tasks_and_results_are_escaped_and_read_back(tmp_path, capsys):
    tasks = read_tasks(FIX / "tasks.csv").with_columns(
        pl.Series("item_id", ["=NOW()", "@x", "-2+3", "+SUM(1+1)"]),
        pl.Series("prompt", ["\tcell", "\r=1+1", "-5 degrees", "plain"]),
    )
    paths = write_export(tasks, "survey", tmp_path / "out")
    written = _file_cells(paths[0])
    assert [r["item_id"] for r in written] == ["'=NOW()", "'@x", "'-2+3", "'+SUM(1+1)"]
    assert [r["prompt"] for r in written] == ["'\tcell", "'\r=1+1", "'-5 degrees", "plain"]
    assert read_tasks(paths[0]).equals(tasks)  # crowd import maps answers back exactly
    # a survey's worker ids come back escaped in the judgments CSV, raw in JSONL
    answers = pl.read_csv(FIX / "prolific_results.csv", infer_schema=False).with_columns(
        pl.lit("=cmd|' /C calc'!A0").alias("PROLIFIC_PID"),
        pl.Series("task_id", [f"{tasks['batch_id'][0]}-000{k}" for k in (1, 2, 3, 4)]),
    )
    answers.write_csv(tmp_path / "answers.csv")
    argv = ["crowd", "import", str(tmp_path / "answers.csv"), "--tasks", str(paths[0])]
    assert main([*argv, "--platform", "survey"]) == 0
    got = _cells(capsys.readouterr().out)
    assert {r["annotator_id"] for r in got} == {"'=cmd|' /C calc'!A0"}
    assert {r["item_id"] for r in got} == {"'=NOW()", "'@x", "'-2+3", "'+SUM(1+1)"}
    assert main([*argv, "--platform", "survey", "-o", str(tmp_path / "j.jsonl")]) == 0
    raw = [json.loads(line) for line in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert {r["annotator_id"] for r in raw} == {"=cmd|' /C calc'!A0"}


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_the_judgments_file_of_crowd_import_keeps_numbers(tmp_path, suffix, capsys):
    answers = tmp_path / "answers.csv"
    pl.read_csv(FIX / "prolific_results.csv", infer_schema=False).with_columns(
        pl.lit("-1").alias("PROLIFIC_PID")
    ).write_csv(answers)
    out = tmp_path / f"j{suffix}"
    argv = ["crowd", "import", str(answers), "--tasks", str(FIX / "tasks.csv"), "-o", str(out)]
    assert main(argv) == 0
    frame = pl.read_csv(out, infer_schema=False) if suffix == ".csv" else pl.read_parquet(out)
    assert set(frame["annotator_id"]) == {"-1"}  # a number is not a formula


def test_an_exported_csv_imports_back_as_it_was_stored(tmp_path):
    """The escape is for spreadsheets: reading the product's own CSV restores every value."""
    from adaptive.core.data import read_judgments

    ids = ["=cmd|' /C calc'!A0", "+SUM(1+1)", "@x", "'=kept", "-2+3"]
    frame = pl.DataFrame(
        {
            "item_id": ids,
            "system_a": ["a"] * 5,
            "system_b": ["b"] * 5,
            "annotator_id": ["w"] * 5,
            "winner": ["a", "b", "tie", "a", "b"],
        }
    )
    path = tmp_path / "out.csv"
    write_csv(frame, path)
    assert "'=cmd" in path.read_text()  # escaped on disk
    assert read_judgments(path)["item_id"].to_list() == ids
