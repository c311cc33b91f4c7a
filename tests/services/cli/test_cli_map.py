"""``--map`` on the command line: raw public files through ``evalset decisions`` and
``evalset import`` with one map or none, and errors at the file's lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BYOD = ROOT / "tests" / "fixtures" / "byod"
LS_MAP = "item_id=question_id,system_a=model_left,system_b=model_right"


def evalset(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    ("name", "extra", "pairs"),
    [
        ("pandalm_testset.json", [], 6),
        ("arena_battles.json", [], 3),
        ("labelstudio_pairwise.json", ["--map", LS_MAP], 3),
    ],
)
def test_decisions_read_raw_files_with_one_map_or_none(name, extra, pairs):
    out = evalset("decisions", "--data", str(BYOD / name), *extra, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) == pairs


def test_the_map_can_come_in_parts_and_before_the_data():
    parts = LS_MAP.split(",")
    args = ["--map", parts[0], "--map", ",".join(parts[1:])]
    out = evalset("decisions", *args, "--data", str(BYOD / "labelstudio_pairwise.json"))
    assert out.returncode == 0, out.stderr


def test_import_stores_pandalm_and_label_studio_files_once(tmp_path):
    db = f"sqlite:///{tmp_path / 'byod.db'}"
    common = ["--database-url", db, "--format", "json"]
    out = evalset(
        "import", str(BYOD / "pandalm_testset.json"), "--project", "p", "--create", *common
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["inserted"] == 144
    again = evalset("import", str(BYOD / "pandalm_testset.json"), "--project", "p", *common)
    assert json.loads(again.stdout)["duplicates"] == 144
    ls = BYOD / "labelstudio_pairwise.json"
    out = evalset("import", str(ls), "--map", LS_MAP, "--project", "ls", "--create", *common)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["inserted"] == 23


def test_import_and_decisions_name_the_line_and_the_value_as_given(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "item_id,system_a,system_b,annotator_id,winner,timestamp\n"
        "p1,x,y,w,a,2024-05-03T10:00:00Z\np2,x,y,w,Maybe,not a time\n"
    )
    db = f"sqlite:///{tmp_path / 'bad.db'}"
    for args in (
        ["import", str(bad), "--project", "p", "--create", "--database-url", db],
        ["decisions", "--data", str(bad)],
    ):
        out = evalset(*args)
        assert out.returncode == 2
        assert "line 3, column 'timestamp': got 'not a time'" in out.stderr
        assert "line 3, column 'winner': got 'Maybe'" in out.stderr


def test_a_map_naming_a_missing_column_lists_the_file_columns(tmp_path):
    out = evalset(
        "decisions", "--data", str(BYOD / "labelstudio_pairwise.json"), "--map", "system_a=model_9"
    )
    assert out.returncode == 2
    assert "['model_9']" in out.stderr and "'model_left'" in out.stderr


def test_import_names_the_line_of_a_row_the_store_refuses(tmp_path):
    """--strict: a system the project does not have, at the file's line."""
    db = f"sqlite:///{tmp_path / 'strict.db'}"
    good = tmp_path / "good.csv"
    good.write_text("item_id,system_a,system_b,annotator_id,winner\np1,x,y,w,a\n")
    assert (
        evalset("import", str(good), "--project", "p", "--create", "--database-url", db).returncode
        == 0
    )
    new = tmp_path / "new.csv"
    new.write_text("item_id,system_a,system_b,annotator_id,winner\np1,x,y,w,a\np1,x,z,w,b\n")
    out = evalset("import", str(new), "--project", "p", "--strict", "--database-url", db)
    assert out.returncode == 2
    assert "line 3" in out.stderr, out.stderr


def test_a_map_without_a_file_is_refused_not_ignored():
    out = evalset("recommend", "--project", "p", "--size", "3", "--map", "item_id=idx")
    assert out.returncode == 2
    assert "--map maps the columns of a file: give it with --data" in out.stderr
