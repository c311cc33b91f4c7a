"""A scripted crowd campaign on the bundled ChatEval NCM judgments, through the service.

Create a project, register the systems and the prompts with their texts, seed it,
then for each platform (MTurk, Label Studio, a Prolific survey): lease a batch from
next-batch, export it, answer every task with a *logged* NCM judgment of that cell
written in the platform's own result format, import it (twice: the second stores
nothing), and finally take decisions from the store. Nothing may be lost or counted
twice: the store must hold exactly the seed plus one judgment per answered task, each
with the logged winner, and the decisions must equal those computed from the same
logged judgments directly.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections import defaultdict
from pathlib import Path

import httpx
import numpy as np
import polars as pl
import pytest

from adaptive.core.cells import build_cells
from adaptive.core.data import validate_judgments
from adaptive.stopping.decisions import OUTCOME_NAMES, decide
from services.cli import main
from services.crowd import read_tasks, write_export
from services.settings import Settings
from tests.factories import ThreadServer

DATA = Path(__file__).resolve().parents[3] / "data" / "chateval_ncm"
SEED_PROMPTS = 30  # logged judgments per comparison posted before the first batch
BATCH = 40
MTURK_HEAD = (
    "HITId,HITTypeId,Title,Description,Keywords,Reward,CreationTime,MaxAssignments,"
    "RequesterAnnotation,AssignmentDurationInSeconds,AutoApprovalDelayInSeconds,Expiration,"
    "NumberOfSimilarHITs,LifetimeInSeconds,AssignmentId,WorkerId,AssignmentStatus,AcceptTime,"
    "SubmitTime,AutoApprovalTime,ApprovalTime,RejectionTime,RequesterFeedback,"
    "WorkTimeInSeconds,LifetimeApprovalRate,Last30DaysApprovalRate,Last7DaysApprovalRate"
).split(",")


@pytest.fixture(scope="module")
def log() -> pl.DataFrame:
    judgments = pl.read_csv(DATA / "judgments.csv", infer_schema=False).with_row_index("log_row")
    return judgments


def _choice(logged: dict, task: dict) -> str:
    """The logged answer as the platform's annotator would have given it."""
    if logged["winner"] == "tie":
        return "Tie"
    chosen = logged["system_a"] if logged["winner"] == "a" else logged["system_b"]
    return "First" if chosen == task["system_first"] else "Second"


def _mturk_results(shown: list[dict], answers: list[tuple[dict, dict]]) -> str:
    """An MTurk batch results CSV: the input columns echoed as Input.*, the answer."""
    inputs = list(shown[0])
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL)
    writer.writerow(
        MTURK_HEAD
        + [f"Input.{c}" for c in inputs]
        + ["Answer.preference.label", "Approve", "Reject"]
    )
    by_task = {s["task_id"]: s for s in shown}
    for k, (task, logged) in enumerate(answers):
        meta = {
            "HITId": f"3HIT{k:026d}",
            "AssignmentId": f"3ASG{int(logged['log_row']):026d}",
            "WorkerId": logged["annotator_id"],
            "AssignmentStatus": "Submitted",
            "SubmitTime": "Fri Mar 16 04:58:03 PDT 2018",
            "Reward": "$0.05",
            "MaxAssignments": "1",
        }
        row = [meta.get(c, "") for c in MTURK_HEAD]
        row += [by_task[task["task_id"]][c] for c in inputs] + [_choice(logged, task), "", ""]
        writer.writerow(row)
    return buf.getvalue()


def _label_studio_export(imported: list[dict], answers: list[tuple[dict, dict]]) -> list[dict]:
    """A Label Studio JSON export of the imported tasks, one annotation per answer."""
    by_task = defaultdict(list)
    for k, (task, logged) in enumerate(answers):
        by_task[task["task_id"]].append(
            {
                "id": 1000 + int(logged["log_row"]),
                "completed_by": {"id": 7, "email": f"{logged['annotator_id']}@example.org"},
                "result": [
                    {
                        "value": {"choices": [_choice(logged, task)]},
                        "id": f"r{k}",
                        "from_name": "preference",
                        "to_name": "prompt",
                        "type": "choices",
                        "origin": "manual",
                    }
                ],
                "was_cancelled": False,
                "ground_truth": False,
                "created_at": "2024-05-02T10:16:08.728353Z",
                "lead_time": 9.1,
                "task": 500 + k,
            }
        )
    return [
        {
            "id": 500 + k,
            "data": t["data"],
            "annotations": by_task.get(t["data"]["task_id"], []),
            "predictions": [],
            "meta": {},
            "project": 3,
        }
        for k, t in enumerate(imported)
    ]


def _survey_results(answers: list[tuple[dict, dict]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["PROLIFIC_PID", "STUDY_ID", "SESSION_ID", "task_id", "choice", "timestamp"])
    for task, logged in answers:
        writer.writerow(
            [
                logged["annotator_id"],
                "65a1f0c2d3e4b5a6c7d8e9f0",
                f"sess-{logged['annotator_id']}",
                task["task_id"],
                _choice(logged, task),
                "",
            ]
        )
    return buf.getvalue()


def names_of(outcome: np.ndarray) -> list[str]:
    return [OUTCOME_NAMES[int(o)] for o in outcome]


def _decisions(rows: list[dict]) -> tuple[list[tuple[str, str]], np.ndarray, np.ndarray]:
    frame = validate_judgments(
        pl.DataFrame(rows, infer_schema_length=None).select(
            "item_id", "system_a", "system_b", "annotator_id", "winner"
        )
    )
    cells = build_cells(frame)
    d = decide(
        cells.judgment_comparison,
        cells.judgment_prompt,
        cells.judgment_y.astype(np.int64) - 1,
        cells.num_comparisons,
    )
    return cells.comparison_names(), d.outcome, d.num_obs


def test_ncm_campaign_round_trip_for_every_platform(tmp_path, log):
    items = dict(pl.read_csv(DATA / "items.csv").iter_rows())
    responses = defaultdict(dict)
    for item, system, text in pl.read_csv(DATA / "responses.csv").iter_rows():
        if text:  # a few responses are empty in the release: such cells cannot be served
            responses[item][system] = text
    systems = sorted(set(log["system_a"]) | set(log["system_b"]))
    pairs = sorted({(a, b) for a, b in log.select("system_a", "system_b").unique().iter_rows()})
    # the log's judgments of each cell, in file order: the answers annotators will give
    pool: dict[tuple, list[dict]] = defaultdict(list)
    for r in log.iter_rows(named=True):
        pool[(r["item_id"], frozenset((r["system_a"], r["system_b"])))].append(r)

    used: list[dict] = []  # logged judgments posted, in arrival order
    seed = []
    for a, b in pairs:
        cell_rows = log.filter((pl.col("system_a") == a) & (pl.col("system_b") == b))
        for item in cell_rows["item_id"].unique(maintain_order=True).to_list()[:SEED_PROMPTS]:
            logged = pool[(item, frozenset((a, b)))].pop(0)
            used.append(logged)
            seed.append(
                {
                    **{
                        k: logged[k]
                        for k in ("item_id", "system_a", "system_b", "annotator_id", "winner")
                    },
                    "judgment_id": f"ncm-log-{logged['log_row']}",
                }
            )

    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'campaign.db'}", nuts=False, skill_updates=False
    )
    with ThreadServer(settings) as server, httpx.Client(base_url=server.url, timeout=300) as api:
        r = api.post("/projects", json={"project_id": "ncm"})
        assert r.status_code == 201, r.text
        h = {"Authorization": f"Bearer {r.json()['token']}"}
        assert (
            api.post(
                "/projects/ncm/systems",
                headers=h,
                json={"systems": [{"system_id": s} for s in systems]},
            ).status_code
            < 300
        )
        prompts = [{"prompt_id": i, "text": items[i], "responses": responses[i]} for i in items]
        assert (
            api.post("/projects/ncm/prompts", headers=h, json={"prompts": prompts}).status_code
            < 300
        )
        r = api.post("/projects/ncm/judgments", headers=h, json={"judgments": seed})
        assert r.json()["accepted"] == len(seed), r.text
        deadline = time.monotonic() + 240
        while not api.get("/projects/ncm", headers=h).json()["snapshots"]:
            assert time.monotonic() < deadline, "no snapshot"
            time.sleep(0.2)

        answered, skipped_cells = {}, 0
        for platform in ("mturk", "labelstudio", "survey"):
            r = api.post(
                "/projects/ncm/next-batch",
                headers=h,
                json={
                    "size": BATCH,
                    "annotator_id": f"crowd-{platform}",
                    "targets": [list(p) for p in pairs],
                    "idempotency_key": platform,
                },
            )
            assert r.status_code == 200, r.text
            lease = r.json()
            r = api.get(f"/projects/ncm/leases/{lease['lease_id']}/tasks", headers=h)
            assert r.status_code == 200, r.text
            tasks, incomplete = r.json()["tasks"], r.json()["incomplete"]
            assert len(tasks) + len(incomplete) == len(lease["cells"]) and tasks
            # a cell whose response was never registered cannot be shown; it is listed apart
            for task in incomplete:
                assert not (
                    task["system_a"] in responses[task["item_id"]]
                    and task["system_b"] in responses[task["item_id"]]
                )
            skipped_cells += len(incomplete)
            complete = [
                c
                for c in lease["cells"]
                if {c["system_a"], c["system_b"]} <= set(responses[c["item_id"]])
            ]
            for task, cell in zip(tasks, complete):  # display order and texts
                first = cell["system_a"] if cell["shown_first"] == "a" else cell["system_b"]
                assert task["response_first"] == responses[cell["item_id"]][first]
                assert task["prompt"] == items[cell["item_id"]]
            frame = pl.DataFrame(tasks, schema={k: pl.Utf8 for k in tasks[0]})
            paths = write_export(frame, platform, tmp_path / platform)
            # annotate from what the platform was given, with the log's answers
            answers = []
            for task in tasks:
                key = (task["item_id"], frozenset((task["system_a"], task["system_b"])))
                if pool[key]:
                    answers.append((task, pool[key].pop(0)))
            assert len(answers) >= BATCH // 2, "the batch should mostly hit logged cells"
            if platform == "mturk":
                shown = list(pl.read_csv(paths[1], infer_schema=False).iter_rows(named=True))
                content = _mturk_results(shown, answers)
            elif platform == "labelstudio":
                content = json.dumps(
                    _label_studio_export(json.loads(paths[1].read_text()), answers)
                )
            else:
                content = _survey_results(answers)
            url = f"/projects/ncm/leases/{lease['lease_id']}/results"
            body = {"platform": platform, "content": content}
            r = api.post(url, headers=h, json=body)
            assert r.status_code == 200, r.text
            got = r.json()
            assert got["accepted"] == len(answers) and got["duplicates"] == 0
            assert len(got["unanswered"]) == len(tasks) + len(incomplete) - len(answers)
            again = api.post(url, headers=h, json=body).json()
            assert again["accepted"] == 0 and again["duplicates"] == len(answers)
            # a bad file is refused whole, one problem per bad row, nothing stored
            before = again["num_judgments"]
            bad = {
                "platform": "survey",
                "content": "PROLIFIC_PID,task_id,choice\n"
                f"w1,{tasks[0]['task_id']},maybe\nw1,nope,First\nw2,{tasks[1]['task_id']},First\n",
            }
            r = api.post(url, headers=h, json=bad)
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_batch"
            assert [p["row"] for p in r.json()["error"]["problems"]] == [0, 1]
            assert api.get("/projects/ncm", headers=h).json()["num_judgments"] == before
            answered[platform] = len(answers)
            used += [logged for _, logged in answers]

        # the same through the command line: lease and export in one step, import by lease
        token = h["Authorization"].split()[1]
        client = ["--project", "ncm", "--url", server.url, "--token", token]
        out = tmp_path / "cli"
        targets = ",".join(f"{a}:{b}" for a, b in pairs)
        assert main(["crowd", "export", "--platform", "survey", "--size", "10",
                     "--annotator", "crowd-cli", "--targets", targets, *client,
                     "-o", str(out)]) == 0  # fmt: skip
        cli_tasks = read_tasks(out / "tasks.csv")
        answers = []
        for task in cli_tasks.iter_rows(named=True):
            key = (task["item_id"], frozenset((task["system_a"], task["system_b"])))
            if pool[key]:
                answers.append((task, pool[key].pop(0)))
        (out / "results.csv").write_text(_survey_results(answers))
        lease_id = cli_tasks["batch_id"][0]
        for _ in range(2):  # the second import stores nothing
            assert main(["crowd", "import", str(out / "results.csv"), "--platform", "survey",
                         "--lease", lease_id, *client]) == 0  # fmt: skip
        assert answers, "the command-line batch should hit logged cells"
        answered["cli"] = len(answers)
        used += [logged for _, logged in answers]

        stored = api.get("/projects/ncm/judgments", headers=h, params={"limit": 50_000}).json()
    rows = stored["judgments"]
    assert len(rows) == len(seed) + sum(answered.values()) == len(used)
    assert len({r["judgment_id"] for r in rows}) == len(rows)

    # every stored judgment is its logged judgment: same cell, annotator and winning system
    def winner_system(r: dict) -> str:
        return {"a": r["system_a"], "b": r["system_b"]}.get(r["winner"], "tie")

    assert sorted(
        (r["item_id"], r["annotator_id"].removeprefix("ls_").split("@")[0], winner_system(r))
        for r in rows
    ) == sorted((u["item_id"], u["annotator_id"], winner_system(u)) for u in used)
    # decisions from the store equal decisions from the same logged judgments, in order
    names, outcome, num_obs = _decisions(rows)
    names_log, outcome_log, num_obs_log = _decisions(used)
    assert names == names_log
    np.testing.assert_array_equal(outcome, outcome_log)
    np.testing.assert_array_equal(num_obs, num_obs_log)
    assert (outcome != 0).any(), "the campaign should close some comparisons"
    print(
        f"\ncampaign: {skipped_cells} leased cells without a registered response; "
        f"seed {len(seed)}, imported {answered}, stored {len(rows)}, "
        f"decisions {dict(zip(*np.unique(names_of(outcome), return_counts=True)))}"
    )
