"""Crowd round trip on fixture files with the platforms' real column names and structure."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

from adaptive.core.data import DataError
from services.cli import main
from services.crowd import read_results, read_tasks, write_export
from services.crowd.tasks import SHOWN_COLUMNS

FIX = Path(__file__).parents[2] / "fixtures" / "crowd"
BATCH = "4f1c2a9be07d4a5c"


@pytest.fixture()
def tasks() -> pl.DataFrame:
    return read_tasks(FIX / "tasks.csv")


def test_task_table_is_in_display_order(tasks):
    for r in tasks.iter_rows(named=True):
        first = r["system_a"] if r["shown_first"] == "a" else r["system_b"]
        assert r["system_first"] == first and r["system_second"] != first
        assert r["prompt"] and r["response_first"] and r["response_second"]
    assert tasks["batch_id"].unique().to_list() == [BATCH]


@pytest.mark.parametrize("platform", ["labelstudio", "mturk", "survey"])
def test_export_files_are_blind_and_in_display_order(tmp_path, tasks, platform):
    paths = write_export(tasks, platform, tmp_path)
    assert paths[0].name == "tasks.csv" and read_tasks(paths[0]).equals(tasks)
    systems = set(tasks["system_a"]) | set(tasks["system_b"])
    for path in paths[1:]:
        text = path.read_text()
        # annotators never see which system wrote a response
        assert not any(f'"{s}"' in text or f",{s}," in text for s in systems), path
    if platform == "labelstudio":
        data = json.loads(paths[1].read_text())
        assert [d["data"]["task_id"] for d in data] == tasks["task_id"].to_list()
        assert set(data[0]["data"]) == set(SHOWN_COLUMNS)
        assert data[1]["data"]["response_first"] == tasks["response_first"][1]
        config = ET.fromstring(paths[2].read_text())
        names = [e.get("name") for e in config.iter("Text")]
        assert names == ["prompt", "response_first", "response_second"]
        choices = config.find("Choices")
        assert choices.get("name") == "preference" and choices.get("choice") == "single"
        assert [c.get("value") for c in choices] == ["First", "Second", "Tie"]
    elif platform == "mturk":
        frame = pl.read_csv(paths[1], infer_schema=False)
        assert frame.columns == list(SHOWN_COLUMNS) and frame.equals(tasks.select(SHOWN_COLUMNS))
        html = paths[2].read_text()
        assert "crowd-html-elements.js" in html and 'name="preference"' in html
        assert html.index("${response_first}") < html.index("${response_second}")
        root = ET.fromstring(paths[3].read_text())
        assert root.tag.endswith("HTMLQuestion") and "${prompt}" in root[0].text
    else:
        assert pl.read_csv(paths[1], infer_schema=False).equals(tasks.select(SHOWN_COLUMNS))
        assert paths[2].read_text().startswith("PROLIFIC_PID,STUDY_ID,SESSION_ID,task_id,choice")


def _winners(result) -> list[tuple]:
    return [
        (r["item_id"], r["annotator_id"], r["winner"])
        for r in result.judgments.iter_rows(named=True)
    ]


def test_mturk_batch_results(tasks):
    got = read_results(FIX / "mturk_batch_results.csv", tasks)
    assert got.platform == "mturk" and got.num_rows == 5
    assert got.skipped == {"rejected assignment": 1}
    # First on a task shown a-first is a; Second on one shown b-first is a as well
    assert _winners(got) == [
        ("ncm-001", "A3E6VS4JQ4XQUO", "a"),
        ("ncm-002", "A1BH1ZR8XGJG7Y", "a"),
        ("ncm-003", "A3E6VS4JQ4XQUO", "tie"),
        ("ncm-004", "A2ZBQJ9R8M1N8C", "b"),
    ]
    row = got.judgments.row(1, named=True)
    assert row["judgment_id"] == f"mturk:3TMFV4NEP8EN0DXTGRM8ABMI1O7W8L:{BATCH}-0002"
    assert (row["system_a"], row["system_b"], row["shown_first"]) == ("Cakechat", "NCM", "b")
    assert got.unanswered == ()
    # a pandas frame of the same file reads the same
    frame = pd.read_csv(FIX / "mturk_batch_results.csv", dtype=str)
    assert read_results(frame, tasks, "mturk").judgments.equals(got.judgments)


def test_label_studio_export(tasks):
    got = read_results(FIX / "labelstudio_export.json", tasks)
    assert got.platform == "labelstudio" and got.num_rows == 5
    assert got.skipped == {"cancelled annotation": 1}
    assert _winners(got) == [
        ("ncm-001", "ls_3", "a"),
        ("ncm-001", "ls_5", "b"),
        ("ncm-002", "ls_5", "a"),
        ("ncm-004", "ls_3", "tie"),
    ]
    assert got.unanswered == (f"{BATCH}-0003",)
    assert got.judgments["judgment_id"][0] == f"labelstudio:101:{BATCH}-0001"


def test_prolific_survey_results(tasks):
    got = read_results(FIX / "prolific_results.csv", tasks)
    assert got.platform == "survey"
    assert _winners(got) == [
        ("ncm-001", "5f2b9c1e8a7d4e0012ab34cd", "a"),
        ("ncm-002", "5f2b9c1e8a7d4e0012ab34cd", "a"),
        ("ncm-002", "60c7d2a9b1e3f40018cd56ef", "tie"),
        ("ncm-004", "60c7d2a9b1e3f40018cd56ef", "a"),
    ]
    assert got.judgments["timestamp"][3] == "2024-05-03T14:03:00Z"
    assert got.unanswered == (f"{BATCH}-0003",)


def test_time_on_task_comes_back_beside_the_judgments(tasks, capsys):
    """MTurk's WorkTimeInSeconds and Label Studio's lead_time, by judgment id; a missing or
    unreadable time is null, never a refused answer; the survey records none."""
    frame = pl.read_csv(FIX / "mturk_batch_results.csv", infer_schema=False).with_columns(
        pl.Series("WorkTimeInSeconds", ["23", "41.5", "", "soon", "9"])
    )
    got = read_results(frame, tasks, "mturk")
    assert got.seconds["judgment_id"].to_list() == got.judgments["judgment_id"].to_list()
    assert got.seconds["seconds"].to_list() == [23.0, 41.5, None, None]  # the 5th was rejected
    export = json.loads((FIX / "labelstudio_export.json").read_text())
    export[0]["annotations"][1]["lead_time"] = 30.25
    del export[1]["annotations"][1]["lead_time"]  # 104; 103 was cancelled
    got = read_results(export, tasks, "labelstudio")
    assert got.seconds["judgment_id"].to_list() == got.judgments["judgment_id"].to_list()
    assert got.seconds["seconds"].to_list() == [12.4, 30.25, None, 12.4]
    survey = read_results(FIX / "prolific_results.csv", tasks)
    assert survey.seconds.height == 4 and survey.seconds["seconds"].null_count() == 4
    argv = ["crowd", "import", str(FIX / "mturk_batch_results.csv"), "--tasks"]
    assert main([*argv, str(FIX / "tasks.csv")]) == 0
    assert "time on task: median 23.0 s over 4 timed answers" in capsys.readouterr().err


def test_a_repeated_file_is_counted_once(tasks, tmp_path):
    text = (FIX / "prolific_results.csv").read_text()
    lines = text.splitlines()
    (tmp_path / "twice.csv").write_text("\n".join(lines + lines[1:]) + "\n")
    got = read_results(tmp_path / "twice.csv", tasks)
    once = read_results(FIX / "prolific_results.csv", tasks)
    assert got.judgments.equals(once.judgments) and got.duplicates == 4


def test_bad_rows_are_each_named_and_the_file_is_refused(tasks, tmp_path):
    frame = pl.read_csv(FIX / "mturk_batch_results.csv", infer_schema=False)
    frame = frame.with_columns(
        pl.Series("Input.task_id", [f"{BATCH}-0001", "other-0001", *frame["Input.task_id"][2:]]),
        pl.Series("Answer.preference.label", ["First", "Second", "maybe", "Second", "First"]),
        pl.Series("Input.item_id", ["ncm-001", "ncm-002", "ncm-003", "ncm-999", "ncm-001"]),
    )
    with pytest.raises(DataError) as err:
        read_results(frame, tasks, "mturk")
    problems = [(p.row, p.column) for p in err.value.problems]
    assert problems == [
        (2, "task_id"),
        (3, "Answer.preference.label"),
        (4, "item_id"),
    ]
    assert "other-0001" in str(err.value) and "'maybe'" in str(err.value)
    # the same judgment id with a different answer is refused
    changed = pl.concat(
        [
            pl.read_csv(FIX / "prolific_results.csv", infer_schema=False),
            pl.read_csv(FIX / "prolific_results.csv", infer_schema=False)
            .head(1)
            .with_columns(pl.lit("Second").alias("choice")),
        ]
    )
    with pytest.raises(DataError, match="the same answer as its first row"):
        read_results(changed, tasks, "survey")
    with pytest.raises(DataError, match="missing"):
        read_results(pl.DataFrame({"HITId": ["x"]}), tasks, "mturk")


def test_cli_export_and_import(tmp_path, capsys):
    shutil.copy(FIX / "tasks.csv", tmp_path / "batch.csv")
    out = tmp_path / "mt"
    assert (
        main(
            [
                "crowd",
                "export",
                "--platform",
                "mturk",
                "--tasks",
                str(tmp_path / "batch.csv"),
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert (out / "mturk_input.csv").exists() and (out / "mturk_template.html").exists()
    capsys.readouterr()
    judgments = tmp_path / "j.csv"
    assert (
        main(
            [
                "crowd",
                "import",
                str(FIX / "mturk_batch_results.csv"),
                "--tasks",
                str(out / "tasks.csv"),
                "-o",
                str(judgments),
            ]
        )
        == 0
    )
    assert "4 judgments from 5 answers" in capsys.readouterr().err
    # the output is a judgments file every command reads
    from adaptive.core.data import read_judgments

    assert read_judgments(judgments).height == 4
    assert (
        main(["crowd", "import", str(FIX / "missing.csv"), "--tasks", str(out / "tasks.csv")]) == 2
    )


def test_an_evalset_recommend_batch_goes_out_and_comes_back(tmp_path, capsys):
    data = Path(__file__).resolve().parents[3] / "data" / "chateval_ncm" / "judgments.csv"
    # every judgment as the unit: NCM's prompts cannot close its open comparisons otherwise
    assert main(["recommend", "--data", str(data), "--size", "12", "--format", "csv",
                 "--quiet", "--unit", "judgment"]) == 0  # fmt: skip
    (tmp_path / "batch.csv").write_text(capsys.readouterr().out)
    paths = write_export(read_tasks(tmp_path / "batch.csv"), "survey", tmp_path / "out")
    tasks = read_tasks(paths[0])
    assert tasks.height == 12 and (tasks["response_first"] != "").all()
    answers = pl.DataFrame(
        {
            "PROLIFIC_PID": ["p1"] * 12,
            "SESSION_ID": ["s1"] * 12,
            "task_id": tasks["task_id"],
            "choice": ["First", "Second", "Tie"] * 4,
        }
    )
    got = read_results(answers, tasks, "survey")
    want = [
        {"First": t["shown_first"], "Second": "b" if t["shown_first"] == "a" else "a",
         "Tie": "tie"}[c]
        for t, c in zip(tasks.iter_rows(named=True), answers["choice"])
    ]  # fmt: skip
    assert got.judgments["winner"].to_list() == want
    # the batch id is a stable hash of the cells when the file has none
    assert tasks["batch_id"][0] == read_tasks(tmp_path / "batch.csv")["batch_id"][0]
