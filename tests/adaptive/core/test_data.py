"""Reading judgments: formats, validation errors that name the row, nothing half-read."""

from __future__ import annotations

import json

import polars as pl
import pytest

from adaptive.core.data import DataError, filter_judgments, read_judgments, validate_judgments

ROWS = [
    {
        "item_id": "p1",
        "system_a": "x",
        "system_b": "y",
        "annotator_id": "w1",
        "winner": "a",
        "dimension": "overall",
    },
    {
        "item_id": "p1",
        "system_a": "y",
        "system_b": "x",
        "annotator_id": "w2",
        "winner": "B",
        "dimension": "overall",
    },
    {
        "item_id": "p2",
        "system_a": "x",
        "system_b": "y",
        "annotator_id": "w1",
        "winner": "tie",
        "dimension": "help",
    },
]


def write(tmp_path, rows, suffix):
    path = tmp_path / f"judgments{suffix}"
    frame = pl.DataFrame(rows)
    if suffix == ".csv":
        frame.write_csv(path)
    elif suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    else:
        frame.write_parquet(path)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_every_format_reads_the_same_rows(tmp_path, suffix):
    df = read_judgments(write(tmp_path, ROWS, suffix))
    assert df.height == 3
    assert df["winner"].to_list() == ["a", "b", "tie"]  # normalised to lower case
    assert df["dimension"].to_list() == ["overall", "overall", "help"]
    assert df["row"].to_list() == [1, 2, 3]


def test_missing_dimension_column_defaults_to_overall(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "dimension"} for r in ROWS]
    df = read_judgments(write(tmp_path, rows, ".csv"))
    assert set(df["dimension"]) == {"overall"}


def test_bad_rows_fail_whole_with_row_column_and_expectation(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[1]["winner"] = "left"
    rows[2]["system_b"] = "x"  # compared with itself
    path = write(tmp_path, rows, ".csv")
    with pytest.raises(DataError) as info:
        read_judgments(path)
    err = info.value
    assert err.source == str(path)
    # file lines: the header is line 1, the second record line 3
    assert [(p.row, p.column) for p in err.problems] == [(3, "winner"), (4, "system_b")]
    assert "line 3, column 'winner'" in str(err)
    assert "one of 'a', 'b', 'tie'" in str(err)
    assert "compared with itself" in str(err)


def test_missing_column_is_named(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "winner"} for r in ROWS]
    with pytest.raises(DataError, match="missing column"):
        read_judgments(write(tmp_path, rows, ".csv"))


def test_empty_ids_and_duplicate_judgment_ids_are_rejected():
    frame = pl.DataFrame(
        {
            "item_id": ["p1", ""],
            "system_a": ["x", "x"],
            "system_b": ["y", "y"],
            "annotator_id": ["w", "w"],
            "winner": ["a", "b"],
            "judgment_id": ["j1", "j1"],
        }
    )
    with pytest.raises(DataError) as info:
        validate_judgments(frame)
    columns = {(p.row, p.column) for p in info.value.problems}
    assert (2, "item_id") in columns
    assert (1, "judgment_id") in columns and (2, "judgment_id") in columns


def test_bad_shown_first_is_rejected_and_good_one_kept():
    frame = pl.DataFrame(
        {
            "item_id": ["p1", "p1"],
            "system_a": ["x", "x"],
            "system_b": ["y", "y"],
            "annotator_id": ["w", "v"],
            "winner": ["a", "b"],
            "shown_first": ["B", "left"],
        }
    )
    with pytest.raises(DataError) as info:
        validate_judgments(frame)
    assert [(p.row, p.column) for p in info.value.problems] == [(2, "shown_first")]
    ok = validate_judgments(frame.head(1))
    assert ok["shown_first"].to_list() == ["b"]


def test_unparseable_and_unknown_files(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text('item_id,system_a\n"unterminated,\n')
    with pytest.raises(DataError):
        read_judgments(bad)
    with pytest.raises(DataError, match="unknown file type"):
        read_judgments(write(tmp_path, ROWS, ".csv").rename(tmp_path / "j.xlsx"))
    with pytest.raises(DataError, match="file not found"):
        read_judgments(tmp_path / "nope.csv")


def test_filter_by_dimension_and_annotator(tmp_path):
    df = read_judgments(write(tmp_path, ROWS, ".csv"))
    assert filter_judgments(df, dimensions=["help"]).height == 1
    assert filter_judgments(df, exclude_annotators=["w1"]).height == 1
    with pytest.raises(DataError, match="unknown dimension"):
        filter_judgments(df, dimensions=["nope"])


def test_bundled_chateval_counts_match_its_readme():
    df = read_judgments("data/chateval_ncm/judgments.csv")
    assert df.height == 10212
    counts = df["winner"].value_counts().sort("winner")
    assert dict(counts.iter_rows()) == {"a": 3878, "b": 4029, "tie": 2305}
