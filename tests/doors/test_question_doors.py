"""A campaign's question gets the same rows through the command line, ``import evalset`` and
the service (``GET .../answer``, ``GET .../decisions?question=``, ``POST .../next-batch`` with
a ``question``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest

import evalset
from services.cli import main
from services.settings import Settings
from tests.doors.test_decisions_doors_http import _load
from tests.factories import ThreadServer, same_rows

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "data" / "mtbench" / "judgments.csv"


def _json(capsys) -> list[dict]:
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "question", ["top-k:3", "ranking", "versus:gpt-4", "equivalence:gpt-4,claude-v1"]
)
def test_the_answer_is_the_same_through_every_door(question, capsys):
    assert main(["answer", "--data", str(MTBENCH), "--question", question, "--format", "json"]) == 0
    same_rows(_json(capsys), evalset.answer(MTBENCH, question).to_dicts())
    argv = ["decisions", "--data", str(MTBENCH), "--question", question, "--format", "json"]
    assert main(argv) == 0
    rows = _json(capsys)
    same_rows(rows, evalset.decisions(MTBENCH, question=question).to_dicts())
    assert {r["question_role"] for r in rows} <= {"claim", "pending", ""}


def test_top_3_of_mtbench_is_answered_by_decisions_of_its_nine_cross_pairs(capsys):
    row = evalset.answer(MTBENCH, "top-3").row(0, named=True)
    assert row["answered"] and sorted(row["top"]) == ["claude-v1", "gpt-3.5-turbo", "gpt-4"]
    decisions = evalset.decisions(MTBENCH, question="top-3")
    claims = decisions.filter(decisions["question_role"] == "claim")
    assert claims.height == 9  # 3 x 3 cross pairs, each decided for the top three
    top = set(row["top"])
    for r in claims.iter_rows(named=True):
        winner = r["system_b"] if r["decision"] == "B better" else r["system_a"]
        assert r["decision"] in ("A better", "B better") and winner in top
    assert row["family_size"] == 15  # every pair of the 6 systems shares alpha


def test_the_replay_by_question_is_the_same_through_every_door(capsys):
    argv = ["replay", "--data", str(MTBENCH), "--question", "top-1", "--seeds", "2"]
    argv += ["--policy", "adaptive,uniform", "--format", "json", "--quiet"]
    assert main(argv) == 0
    cli = [{k: v for k, v in r.items() if k != "curve"} for r in _json(capsys)]
    rows = evalset.replay(MTBENCH, question="top-1", seeds=2).to_dicts()
    same_rows(cli, rows)
    assert cli[0]["ratio_to_uniform"] < 1.0 and cli[0]["wrong_answers"] == 0


@pytest.mark.parametrize(
    "argv, words",
    [
        (["answer", "--question", "top-k"], "top-k needs k"),
        (["answer", "--question", "versus:nobody"], "unknown system"),
        (["replay", "--question", "best"], "must be one of"),
        (["replay", "--question", "top-1", "--policy", "oracle"], "oracle needs semi_synthetic"),
    ],
)
def test_a_bad_question_is_a_one_line_error(argv, words, capsys):
    assert (
        main(
            [argv[0], "--data", str(MTBENCH), *argv[1:], "--quiet"]
            if argv[0] == "replay"
            else [argv[0], "--data", str(MTBENCH), *argv[1:]]
        )
        == 2
    )
    assert words in capsys.readouterr().err


def test_a_batch_for_a_question_serves_only_its_pending_comparisons(capsys):
    pending = evalset.decisions(MTBENCH, question="top-1")
    pending = pending.filter(pending["question_role"] == "pending")
    want = {frozenset((r["system_a"], r["system_b"])) for r in pending.iter_rows(named=True)}
    assert want == {frozenset(("gpt-4", "claude-v1")), frozenset(("gpt-4", "gpt-3.5-turbo"))}
    argv = ["recommend", "--data", str(MTBENCH), "--question", "top-1"]
    assert main([*argv, "--size", "12", "--format", "json", "--draws", "50"]) == 0
    out = capsys.readouterr()
    tasks = json.loads(out.out)
    assert len(tasks) == 12
    assert {frozenset((t["system_a"], t["system_b"])) for t in tasks} <= want
    assert "question top-k:1 (overall): top 1 not yet separated" in out.err
    # the same batch from Python
    rows = evalset.recommend(MTBENCH, question="top-1", size=12, draws=50).to_dicts()
    same_rows(tasks, rows)
    # an answered question serves nothing
    answered = ["recommend", "--data", str(MTBENCH), "--question", "top-3", "--size", "5"]
    assert main([*answered, "--format", "json", "--draws", "50"]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[httpx.Client, str, dict]]:
    """MT-Bench's judgments in a project of a running service (no re-estimation)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('questions') / 'questions.db'}"
    with ThreadServer(Settings(database_url=url, streaming=False)) as server:
        with httpx.Client(base_url=server.url, timeout=120) as api:
            project_id, headers = _load(api, pl.read_csv(MTBENCH))
            yield api, project_id, headers


def _without_rule(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "rule"} for r in rows]


@pytest.mark.parametrize(
    "question, options",
    [
        ("top-k:3", {}),
        ("top-1", {"alpha": 0.1}),
        ("ranking", {}),
        ("versus:gpt-4", {}),
        ("equivalence:gpt-4,claude-v1", {"margin": 0.2}),
        ("all-pairs", {}),
    ],
)
def test_the_answer_and_its_decisions_are_the_same_over_http(served, question, options, capsys):
    api, project_id, headers = served
    flags = [f"--{k}={v}" for k, v in options.items()]
    argv = ["answer", "--data", str(MTBENCH), "--question", question, "--format", "json"]
    assert main([*argv, *flags]) == 0
    cli = _json(capsys)
    same_rows(cli, evalset.answer(MTBENCH, question, **options).to_dicts())
    params = {"question": question, **options}
    r = api.get(f"/projects/{project_id}/answer", params=params, headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    same_rows(body["rows"], cli)
    argv = ["decisions", "--data", str(MTBENCH), "--question", question, "--format", "json"]
    assert main([*argv, *flags]) == 0
    decisions = _json(capsys)
    r = api.get(f"/projects/{project_id}/decisions", params=params, headers=headers)
    assert r.status_code == 200, r.text
    same_rows(r.json()["rows"], _without_rule(decisions))
    assert r.json()["rule"] == decisions[0]["rule"] == body["rule"]
    pending = [r for r in _without_rule(decisions) if r["question_role"] == "pending"]
    same_rows(body["pending"], pending)
    assert len(pending) == sum(row["pending"] for row in cli)


def test_decisions_without_a_question_have_no_question_role(served):
    api, project_id, headers = served
    r = api.get(f"/projects/{project_id}/decisions", headers=headers)
    assert r.status_code == 200 and "question_role" not in r.json()["rows"][0]
    r = api.get(f"/projects/{project_id}/answer", params={"dimension": "overall"}, headers=headers)
    assert r.status_code == 200 and r.json()["question"] == "all-pairs"


@pytest.mark.parametrize(
    "params, words",
    [
        ({"question": "top-k"}, "top-k needs k"),
        ({"question": "versus:nobody"}, "unknown system"),
        ({"question": "best"}, "must be one of"),
        ({"question": "top-6"}, "k must be below the 6 systems"),
        ({"question": "ranking", "alpha": 2}, "alpha"),
    ],
)
def test_a_bad_question_over_http_is_a_422_in_the_command_lines_words(
    served, params, words, capsys
):
    api, project_id, headers = served
    for route in ("answer", "decisions"):
        r = api.get(f"/projects/{project_id}/{route}", params=params, headers=headers)
        assert r.status_code == 422, r.text
        assert words in (r.json()["error"]["message"] if "alpha" not in params else r.text)
    if "alpha" not in params:
        argv = ["answer", "--data", str(MTBENCH), "--question", params["question"]]
        assert main(argv) == 2
        assert words in capsys.readouterr().err
