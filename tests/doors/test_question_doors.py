"""A campaign's question gets the same rows through the command line, ``import evalset`` and
the service (``GET .../answer``, ``GET .../decisions?question=``, ``POST .../next-batch`` with
a ``question``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest

import evalset
from services.cli import main
from services.settings import Settings
from tests.factories import ThreadServer, same_rows, when_ready

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


def _load(api: httpx.Client, frame: pl.DataFrame) -> tuple[str, dict]:
    """A project holding ``frame``'s systems, prompts, dimensions and judgments (file order)."""
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = api.post("/projects", json={"project_id": project_id})
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    catalogue = {
        "systems": [
            {"system_id": s} for s in sorted(set(frame["system_a"]) | set(frame["system_b"]))
        ],
        "prompts": [
            {"prompt_id": p, "text": p} for p in frame["item_id"].unique(maintain_order=True)
        ],
        "dimensions": [
            {"dimension_id": d}
            for d in frame["dimension"].unique(maintain_order=True)
            if d != "overall"
        ],
    }
    for what, rows in catalogue.items():
        if rows:
            r = api.post(f"/projects/{project_id}/{what}", json={what: rows}, headers=headers)
            assert r.status_code < 300, r.text
    rows = [{"judgment_id": f"j{i}", **r} for i, r in enumerate(frame.to_dicts())]
    for lo in range(0, len(rows), 10_000):
        batch = {"judgments": rows[lo : lo + 10_000]}
        r = api.post(f"/projects/{project_id}/judgments", json=batch, headers=headers)
        assert r.status_code == 200, r.text
    return project_id, headers


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


def _publish(server: ThreadServer, project_id: str, frame: pl.DataFrame) -> None:
    """A posterior snapshot of the frame's systems, as the worker would publish it (no fit)."""
    import numpy as np

    from adaptive.estimation.streaming import Snapshot as StreamSnapshot

    systems = tuple(sorted(set(frame["system_a"]) | set(frame["system_b"])))
    items = tuple(frame["item_id"].unique(maintain_order=True).to_list())
    rng = np.random.default_rng(0)
    draws = 100
    server.state.publish(
        (project_id, "overall"),
        StreamSnapshot(
            dimension="overall",
            version=0,
            num_judgments=frame.height,
            last_seq=frame.height,
            method="laplace",
            created_at=time.time(),
            fit_seconds=0.1,
            diagnostics={},
            systems=systems,
            items=items,
            pair_a=np.array([0], np.int32),
            pair_b=np.array([1], np.int32),
            pair_judgments=np.array([1]),
            pair_prompts=np.array([1]),
            skill=rng.normal(0.0, 0.3, size=(draws, len(systems))).astype(np.float32),
            alpha=np.exp(rng.normal(0, 0.2, size=(draws, len(items)))).astype(np.float32),
            b=np.sort(rng.normal(0, 1, size=(draws, len(items), 2)), axis=-1).astype(np.float32),
        ),
    )


@pytest.fixture(scope="module")
def batch_server(tmp_path_factory) -> Iterator[ThreadServer]:
    url = f"sqlite:///{tmp_path_factory.mktemp('batches') / 'batches.db'}"
    with ThreadServer(Settings(database_url=url, streaming=False)) as server:
        yield server


def test_a_batch_for_a_question_over_http_is_the_command_lines(batch_server, capsys):
    """``POST .../next-batch`` with a question: with ``model: "default"`` the command line's
    batch cell for cell and its status lines; the live batch serves only the pending
    comparisons of the question's family, none once it is answered."""
    frame = pl.read_csv(MTBENCH)
    with httpx.Client(base_url=batch_server.url, timeout=600) as api:
        project_id, headers = _load(api, frame)
        url = f"/projects/{project_id}/next-batch"
        argv = ["recommend", "--data", str(MTBENCH), "--question", "top-1", "--size", "12"]
        assert main([*argv, "--format", "json", "--seed", "4"]) == 0
        out = capsys.readouterr()
        cli = json.loads(out.out)
        status = [line for line in out.err.splitlines() if line.startswith("question ")]
        body = {"size": 12, "seed": 4, "question": "top-1", "lease_seconds": 1}
        r = when_ready(
            lambda: api.post(url, json={**body, "model": "default"}, headers=headers),
            "recommendation_pending",
        )
        assert r.status_code == 200, r.text
        columns = ("item_id", "dimension", "system_a", "system_b", "shown_first", "reason")
        same_rows(r.json()["cells"], cli, columns=(*columns, "needed"))
        served = r.json()["question"]
        assert served["question"] == "top-k:1" and served["status"] == status
        assert status[0].startswith("question top-k:1 (overall): top 1 not yet separated")
        same_rows(served["answers"], evalset.answer(MTBENCH, "top-1").to_dicts())
        assert served["pending_served"] == 2
        # the live batch: the pending comparisons only (decided in the question's family)
        _publish(batch_server, project_id, frame)
        time.sleep(1.1)  # the lease of 1 s has expired
        r = api.post(url, json={**body, "seed": 0}, headers=headers)
        assert r.status_code == 200, r.text
        want = {frozenset(("gpt-4", "claude-v1")), frozenset(("gpt-4", "gpt-3.5-turbo"))}
        cells = r.json()["cells"]
        assert (
            len(cells) == 12 and {frozenset((c["system_a"], c["system_b"])) for c in cells} <= want
        )
        assert r.json()["question"]["status"] == status
        # an answered question serves nothing, and says so
        r = api.post(url, json={"size": 5, "question": "top-3"}, headers=headers)
        assert r.status_code == 200 and r.json()["cells"] == []
        served = r.json()["question"]
        assert served["pending_served"] == 0 and served["answers"][0]["answered"]
        # without a question: today's batch, no question in the answer
        r = api.post(url, json={"size": 5, "seed": 2}, headers=headers)
        assert r.status_code == 200 and r.json()["question"] is None and r.json()["cells"]
        for bad, words in (
            ({"question": "top-k"}, "top-k needs k"),
            ({"question": "versus:nobody"}, "unknown system"),
            ({"question": "top-1", "adjacent": True}, "a question chooses the comparisons"),
        ):
            r = api.post(url, json={"size": 5, **bad}, headers=headers)
            assert r.status_code == 422 and words in r.text, r.text


def test_a_pending_pair_nobody_compared_is_named_by_every_door(batch_server, tmp_path, capsys):
    """The command line's batch (and model=default's) serves compared pairs only: both say
    which pending pairs nobody compared yet."""
    frame = pl.read_csv(MTBENCH)
    pair = pl.col("system_a").is_in(["gpt-4", "claude-v1"]) & pl.col("system_b").is_in(
        ["gpt-4", "claude-v1"]
    )
    frame = frame.filter(~pair)
    path = tmp_path / "judgments.csv"
    frame.write_csv(path)
    argv = ["recommend", "--data", str(path), "--question", "top-1", "--size", "6"]
    assert main([*argv, "--format", "json"]) == 0
    err = capsys.readouterr().err
    note = next(line for line in err.splitlines() if line.startswith("note: the question"))
    assert "claude-v1 vs gpt-4" in note or "gpt-4 vs claude-v1" in note
    with httpx.Client(base_url=batch_server.url, timeout=600) as api:
        project_id, headers = _load(api, frame)
        url = f"/projects/{project_id}/next-batch"
        body = {"size": 6, "question": "top-1", "model": "default"}
        r = when_ready(lambda: api.post(url, json=body, headers=headers), "recommendation_pending")
        assert r.status_code == 200, r.text
        status = r.json()["question"]["status"]
        assert status[-1] == note.replace("a batch from a file", "model=default")


def test_one_dimension_is_answered_with_its_own_family_at_every_door(
    batch_server, tmp_path, capsys
):
    """Two dimensions: without ``dimension`` one family spans both (each answer row its
    dimension's); ``dimension=D`` is ``evalset answer --dimension D``, D's own family."""
    frame = pl.read_csv(MTBENCH)
    second = frame.gather_every(2).with_columns(pl.lit("helpfulness").alias("dimension"))
    frame = pl.concat([frame, second])
    path = tmp_path / "two.csv"
    frame.write_csv(path)
    with httpx.Client(base_url=batch_server.url, timeout=600) as api:
        project_id, headers = _load(api, frame)
        url = f"/projects/{project_id}/answer"
        for dimension in (None, "helpfulness", "overall"):
            argv = ["answer", "--data", str(path), "--question", "ranking", "--format", "json"]
            assert main([*argv, *(["--dimension", dimension] if dimension else [])]) == 0
            cli = _json(capsys)
            params = {"question": "ranking", **({"dimension": dimension} if dimension else {})}
            r = api.get(url, params=params, headers=headers)
            assert r.status_code == 200, r.text
            same_rows(r.json()["rows"], cli)
            # every pair of the 6 systems in each dimension the family spans
            assert [row["family_size"] for row in cli] == ([15] if dimension else [30, 30])
        r = api.get(url, params={"question": "ranking", "dimension": "nope"}, headers=headers)
        assert r.status_code == 404 and "nope" in r.json()["error"]["message"]
