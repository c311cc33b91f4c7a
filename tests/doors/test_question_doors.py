"""A campaign's question gets the same rows through the command line and ``import evalset``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evalset
from services.cli import main
from tests.factories import same_rows

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
