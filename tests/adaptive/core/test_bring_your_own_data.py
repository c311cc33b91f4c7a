"""Bring your own data: raw public formats read by name, other columns with a map, and
errors that name the file's columns, its lines and the values as given."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import evalset
from adaptive.core.data import DataError, read_judgments
from services.crowd.results import read_parsed_results

BYOD = Path(__file__).resolve().parents[2] / "fixtures" / "byod"
PANDALM = BYOD / "pandalm_testset.json"
ARENA = BYOD / "arena_battles.json"
LABEL_STUDIO = BYOD / "labelstudio_pairwise.json"
MTBENCH_HUMAN = Path(__file__).resolve().parents[3] / "data" / "mtbench" / "raw" / "human.jsonl"
HEADER = "item_id,system_a,system_b,annotator_id,winner\n"


def test_pandalm_records_load_without_a_map_one_judgment_per_annotator_column():
    records = json.loads(PANDALM.read_text())
    frame = read_judgments(PANDALM)
    assert frame.height == 3 * len(records) == 144
    assert set(frame["annotator_id"]) == {"annotator1", "annotator2", "annotator3"}
    first = records[0]
    a, b = first["cmp_key"].split("_")
    got = frame.filter(pl.col("row") == 1).select("system_a", "system_b", "winner").rows()
    votes = {0: "tie", 1: "a", 2: "b"}
    assert got == [(a, b, votes[first[f"annotator{k}"]]) for k in (1, 2, 3)]
    # the records of one instruction and input are one prompt: 8 prompts, 6 pairs each
    assert frame["item_id"].n_unique() == 8
    assert (
        frame.group_by("item_id")
        .agg(pl.struct("system_a", "system_b").n_unique())["system_a"]
        .to_list()
        == [6] * 8
    )
    # one map makes each record its own item
    assert read_judgments(PANDALM, column_map="item_id=idx")["item_id"].n_unique() == 48


def test_an_arena_battle_log_loads_without_a_map():
    battles = json.loads(ARENA.read_text())
    frame = read_judgments(ARENA)
    assert frame.height == len(battles)
    assert frame["timestamp"][0] == "2023-06-29T00:53:20.250Z"
    assert frame.filter(pl.col("both_bad") == "true")["winner"].unique().to_list() == ["tie"]


@pytest.mark.skipif(not MTBENCH_HUMAN.exists(), reason="MT-Bench human judgments not bundled")
def test_mt_bench_human_judgments_load_by_name():
    frame = read_judgments(MTBENCH_HUMAN)
    assert frame.height == 3355 and frame["item_id"][0] == "81-t1"


def test_a_label_studio_export_loads_with_one_map():
    tasks = json.loads(LABEL_STUDIO.read_text())
    mapping = "item_id=question_id,system_a=model_left,system_b=model_right"
    frame = read_judgments(LABEL_STUDIO, column_map=mapping)
    kept = [(t, a) for t in tasks for a in t["annotations"] if not a["was_cancelled"]]
    assert frame.height == len(kept) == 23
    task, ann = kept[0]
    row = frame.row(0, named=True)
    assert row["system_a"] == task["data"]["model_left"]
    assert row["winner"] == {"left": "a", "right": "b"}[ann["result"][0]["value"]["selected"]]
    assert row["annotator_id"] == ann["completed_by"]["email"]
    assert row["judgment_id"] == f"labelstudio:{ann['id']}:{task['id']}"
    # the Python API takes the same map
    assert evalset.read(LABEL_STUDIO, column_map=mapping).equals(frame)


def test_without_the_map_the_export_names_the_columns_it_has():
    with pytest.raises(DataError) as info:
        read_judgments(LABEL_STUDIO)
    message = str(info.value)
    assert "missing column(s) ['item_id', 'system_a', 'system_b']" in message
    assert "'model_left'" in message and "'question_id'" in message and "--map" in message


def test_a_raw_json_names_its_columns_not_an_empty_list(tmp_path):
    path = tmp_path / "raw.json"
    path.write_text(json.dumps([{"idx": 0, "model_1": "x", "model_2": "y", "label": 1}]))
    with pytest.raises(DataError, match=r"the file has \['idx', 'model_1', 'model_2', 'label'\]"):
        read_judgments(path)


def test_a_map_renames_columns_and_values_inline_or_from_a_file(tmp_path):
    path = tmp_path / "raw.json"
    path.write_text(
        json.dumps(
            [
                {"idx": 0, "model_1": "x", "model_2": "y", "who": "w1", "label": 1},
                {"idx": 1, "model_1": "x", "model_2": "y", "who": "w2", "label": 0},
            ]
        )
    )
    inline = (
        "item_id=idx,system_a=model_1,system_b=model_2,annotator_id=who,winner=label,"
        "winner:1=a,winner:2=b,winner:0=tie"
    )
    want = [("0", "x", "y", "w1", "a"), ("1", "x", "y", "w2", "tie")]
    got = read_judgments(path, column_map=inline)
    assert got.select("item_id", "system_a", "system_b", "annotator_id", "winner").rows() == want
    toml = tmp_path / "map.toml"
    toml.write_text(
        '[columns]\nitem_id = "idx"\nsystem_a = "model_1"\nsystem_b = "model_2"\n'
        'annotator_id = "who"\nwinner = "label"\n[values.winner]\n"1" = "a"\n"0" = "tie"\n'
    )
    assert read_judgments(path, column_map=str(toml)).equals(got)
    with pytest.raises(DataError, match=r"--map names column\(s\) \['model_9'\].*'model_1'"):
        read_judgments(path, column_map="system_a=model_9")


def test_a_junk_csv_names_its_line(tmp_path):
    path = tmp_path / "junk.csv"
    path.write_text(HEADER + "p1,x,y,w,a\np2,x,y,w,b,extra,fields\n")
    with pytest.raises(DataError, match=r"line 3 has 7 field\(s\) where the header \(line 1\)"):
        read_judgments(path)


def test_problems_name_file_lines_and_values_as_given(tmp_path):
    path = tmp_path / "j.csv"
    header = HEADER.replace("winner", "winner,note")
    path.write_text(header + "p1,x,y,w,a,\n" + 'p2,x,y,w,Model_A,"a note\non two lines"\n')
    with pytest.raises(DataError) as info:
        read_judgments(path)
    (problem,) = info.value.problems
    # the quoted field spans lines 3-4: the record starts on line 3
    assert (problem.unit, problem.row, problem.value) == ("line", 3, "Model_A")
    assert "line 3, column 'winner': got 'Model_A'" in str(info.value)
    pretty = tmp_path / "j.json"
    rows = [
        dict(zip(HEADER.strip().split(","), r))
        for r in (
            ("p1", "x", "y", "w", "a"),
            ("p2", "x", "y", "w", "B "),
            ("p3", "x", "y", "w", "Both"),
        )
    ]
    pretty.write_text(json.dumps(rows, indent=2))
    with pytest.raises(DataError, match=r"line 16, column 'winner': got 'Both'"):
        read_judgments(pretty)


def test_a_bad_arena_winner_is_echoed_as_given(tmp_path):
    path = tmp_path / "battles.jsonl"
    path.write_text(
        '{"model_a": "x", "model_b": "y", "winner": "model_a"}\n\n'
        '{"model_a": "x", "model_b": "y", "winner": "Model_C"}\n'
    )
    with pytest.raises(DataError, match=r"line 3, column 'winner': got 'Model_C'"):
        read_judgments(path)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("ev\u202eil", "bidirectional control (U+202E) at position 2"),
        ("a\u200bb", "zero-width character (U+200B) at position 1"),
        ("\ufeffw", "zero-width character (U+FEFF) at position 0"),
        ("Jose\u0301", "not in Unicode NFC form"),
    ],
)
def test_spoofing_ids_are_refused_with_their_line(tmp_path, value, reason):
    path = tmp_path / "j.csv"
    path.write_text(HEADER + f"p1,x,y,{value},a\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2, column 'annotator_id'") as info:
        read_judgments(path)
    assert reason in str(info.value)


def test_an_object_valued_id_is_refused_not_stored_as_text(tmp_path):
    path = tmp_path / "j.jsonl"
    good = {"item_id": "p1", "system_a": "x", "system_b": "y", "winner": "a"}
    path.write_text(
        json.dumps({**good, "annotator_id": "w1"})
        + "\n"
        + json.dumps({**good, "annotator_id": {"id": [1]}})
        + "\n"
    )
    with pytest.raises(DataError, match=r"line 2, column 'annotator_id'.*not an object"):
        read_judgments(path)


def test_a_timestamp_must_be_iso_8601(tmp_path):
    path = tmp_path / "j.csv"
    path.write_text(
        "item_id,system_a,system_b,annotator_id,winner,timestamp\n"
        "p1,x,y,w,a,2024-05-03T14:03:00Z\np2,x,y,w,b,\np3,x,y,w,b,not a time\n"
    )
    with pytest.raises(DataError, match=r"line 4, column 'timestamp': got 'not a time'"):
        read_judgments(path)
    path.write_text(path.read_text().replace("not a time", "2024-05-03 14:05:00+02:00"))
    assert read_judgments(path)["timestamp"].to_list()[::2] == [
        "2024-05-03T14:03:00Z",
        "2024-05-03 14:05:00+02:00",
    ]


def test_a_survey_participant_given_as_an_object_is_refused():
    tasks = pl.DataFrame(
        {
            "task_id": ["t1"],
            "batch_id": ["b1"],
            "item_id": ["p1"],
            "system_a": ["x"],
            "system_b": ["y"],
            "dimension": ["overall"],
            "shown_first": ["a"],
        }
    )
    results = pl.DataFrame({"PROLIFIC_PID": [{"id": [1]}], "task_id": ["t1"], "choice": ["First"]})
    with pytest.raises(DataError, match=r"row 1, column 'PROLIFIC_PID'.*not an object"):
        read_parsed_results(results, tasks, "survey")


def test_mturk_results_with_the_systems_as_inputs_load_without_a_map(tmp_path):
    path = tmp_path / "Batch_1_batch_results.csv"
    path.write_text(
        "HITId,AssignmentId,WorkerId,AssignmentStatus,SubmitTime,Input.item_id,"
        "Input.system_a,Input.system_b,Input.shown_first,Answer.preference.label\n"
        "H1,A1,W1,Approved,Fri Mar 16 04:58:03 PDT 2018,p1,x,y,b,First\n"
        "H1,A2,W2,Rejected,Fri Mar 16 04:59:03 PDT 2018,p1,x,y,b,Second\n"
        "H2,A3,W1,Submitted,Fri Mar 16 05:00:00 PST 2018,p2,x,y,a,Tie\n"
    )
    frame = read_judgments(path)
    assert frame.select("item_id", "annotator_id", "winner", "judgment_id", "row").rows() == [
        ("p1", "W1", "b", "mturk:A1", 1),  # First = the side shown first, b
        ("p2", "W1", "tie", "mturk:A3", 3),  # the rejected assignment is left out
    ]
    assert frame["timestamp"].to_list() == [
        "2018-03-16T04:58:03-07:00",
        "2018-03-16T05:00:00-08:00",
    ]
    path.write_text(path.read_text().replace(",Tie\n", ",Maybe\n"))
    with pytest.raises(DataError, match=r"line 4, column 'choice': got 'Maybe'"):
        read_judgments(path)
