"""The Label Studio connector's logic against an in-memory Label Studio (no server).

The fake answers the few routes the connector uses with the shapes Label Studio 1.23
answers them (recorded from a running server: tests/services/crowd/test_labelstudio_server.py runs the
real one, in the slow suite).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from services.cli import main
from services.crowd import read_results, read_tasks
from services.crowd.labelstudio_api import (
    LabelStudio,
    LabelStudioError,
    export_by_lease,
    pull_results,
    push_tasks,
)
from services.settings import Settings
from tests.factories import ThreadServer, free_port

FIX = Path(__file__).parents[2] / "fixtures" / "crowd"
TOKEN = "secret-token-1234567"


class FakeLabelStudio:
    """Projects, tasks and annotations in dicts, served through ``httpx.MockTransport``."""

    def __init__(self) -> None:
        self.projects: dict[int, dict] = {}
        self.tasks: dict[int, dict] = {}
        self.next_annotation = 100

    def annotate(self, task_id: int, choice: str, *, user: int = 3, cancelled: bool = False):
        self.next_annotation += 1
        self.tasks[task_id]["annotations"].append(
            {
                "id": self.next_annotation,
                "completed_by": user,
                "result": [
                    {
                        "from_name": "preference",
                        "to_name": "prompt",
                        "type": "choices",
                        "value": {"choices": [choice]},
                    }
                ],
                "was_cancelled": cancelled,
                "created_at": "2026-11-28T13:36:04.910409Z",
                "lead_time": 4.2,
                "task": task_id,
            }
        )

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("Authorization") != f"Token {TOKEN}":
            return httpx.Response(401, json={"status_code": 401, "detail": "Invalid token."})
        path, method = request.url.path, request.method
        if path == "/api/projects/" and method == "GET":
            return httpx.Response(
                200,
                json={
                    "count": len(self.projects),
                    "next": None,
                    "results": [*self.projects.values()],
                },
            )
        if path == "/api/projects/" and method == "POST":
            body = json.loads(request.content)
            pid = len(self.projects) + 1
            self.projects[pid] = {"id": pid, **body}
            return httpx.Response(201, json=self.projects[pid])
        m = re.fullmatch(r"/api/projects/(\d+)/(|import|export)", path)
        if not m or int(m[1]) not in self.projects:
            return httpx.Response(404, json={"detail": "No Project matches the given query."})
        pid, action = int(m[1]), m[2]
        if action == "":
            return httpx.Response(200, json=self.projects[pid])
        if action == "import":
            for task in json.loads(request.content):
                tid = len(self.tasks) + 1
                self.tasks[tid] = {"id": tid, "project": pid, "annotations": [], **task}
            return httpx.Response(201, json={"task_count": len(json.loads(request.content))})
        every = request.url.params.get("download_all_tasks") == "true"
        rows = [
            t for t in self.tasks.values() if t["project"] == pid and (every or t["annotations"])
        ]
        return httpx.Response(200, json=rows)

    def client(self, token: str = TOKEN) -> LabelStudio:
        return LabelStudio("http://ls.test", token, transport=httpx.MockTransport(self.handle))


@pytest.fixture
def tasks():
    return read_tasks(FIX / "tasks.csv")


def test_push_creates_the_project_once_and_imports_each_task_once(tasks):
    fake = FakeLabelStudio()
    ls = fake.client()
    first = push_tasks(ls, tasks)
    assert (first.created, first.imported, first.already) == (True, tasks.height, 0)
    project = fake.projects[first.project_id]
    assert project["title"] == f"evalset {tasks['batch_id'][0]}"
    assert '<Choices name="preference"' in project["label_config"]
    # blind: the pushed tasks carry the texts and the ids that map back, never system names
    data = [t["data"] for t in fake.tasks.values()]
    assert [d["task_id"] for d in data] == tasks["task_id"].to_list()
    assert {d["batch_id"] for d in data} == set(tasks["batch_id"])
    names = set(tasks["system_a"]) | set(tasks["system_b"])
    assert not any(set(d) & {"system_a", "system_b", "system_first", "shown_first"} for d in data)
    assert not any(v in names for d in data for v in d.values())
    again = push_tasks(ls, tasks)
    assert (again.project_id, again.created, again.imported) == (first.project_id, False, 0)
    assert again.already == tasks.height and len(fake.tasks) == tasks.height


def test_pull_reads_the_api_export_like_the_exported_file(tasks, tmp_path):
    fake = FakeLabelStudio()
    ls = fake.client()
    pushed = push_tasks(ls, tasks, title="campaign")
    fake.annotate(1, "First")
    fake.annotate(2, "Second", user=4)
    fake.annotate(3, "Tie", cancelled=True)
    got = pull_results(ls, pushed.project_id, tasks)
    rows = got.judgments.to_dicts()
    # ids from Label Studio's annotation ids; the winner from the task table's shown_first
    assert [r["judgment_id"] for r in rows] == [
        f"labelstudio:101:{tasks['task_id'][0]}",
        f"labelstudio:102:{tasks['task_id'][1]}",
    ]
    shown = tasks["shown_first"].to_list()
    assert rows[0]["winner"] == shown[0]
    assert rows[1]["winner"] == ("b" if shown[1] == "a" else "a")
    assert [r["annotator_id"] for r in rows] == ["ls_3", "ls_4"]
    assert got.skipped == {"cancelled annotation": 1}
    assert got.unanswered == tuple(tasks["task_id"][2:].to_list())
    # the same export written to a file reads to the same judgments
    path = tmp_path / "export.json"
    path.write_text(json.dumps(ls.export(pushed.project_id)))
    assert read_results(path, tasks).judgments.equals(got.judgments)
    assert pull_results(ls, pushed.project_id, tasks).judgments.equals(got.judgments)


def test_export_rows_are_grouped_by_lease():
    rows = [
        {"id": 1, "data": {"batch_id": "L1", "task_id": "L1-0001"}},
        {"id": 2, "data": {"batch_id": "L2", "task_id": "L2-0001"}},
        {"id": 3, "data": {"text": "someone else's task"}},
        {"id": 4, "data": {"batch_id": "L1", "task_id": "L1-0002"}},
    ]
    groups = export_by_lease(rows)
    assert {k: [t["id"] for t in v] for k, v in groups.items()} == {
        "L1": [1, 4],
        "L2": [2],
        "": [3],
    }


def test_errors_say_what_is_wrong_and_never_show_the_token(tasks):
    fake = FakeLabelStudio()
    with pytest.raises(LabelStudioError, match="refused the token \\(401") as bad:
        push_tasks(fake.client("wrong-token-98765"), tasks)
    assert "LABEL_STUDIO_TOKEN" in str(bad.value) and "wrong-token-98765" not in str(bad.value)
    with pytest.raises(LabelStudioError, match="has no project 99"):
        push_tasks(fake.client(), tasks, project_id=99)
    fake.projects[5] = {"id": 5, "title": "other", "label_config": "<View><Text/></View>"}
    with pytest.raises(LabelStudioError, match='no <Choices name="preference">'):
        push_tasks(fake.client(), tasks, project_id=5)
    with pytest.raises(LabelStudioError, match="no Label Studio token"):
        LabelStudio("http://ls.test", "")
    closed = LabelStudio(f"http://127.0.0.1:{free_port()}", TOKEN, timeout=5)
    with pytest.raises(LabelStudioError, match="cannot reach Label Studio at http://127.0.0.1"):
        closed.projects()
    assert TOKEN not in repr(closed)


def test_the_command_line_pull_writes_judgments_and_hides_the_token(
    tasks, tmp_path, monkeypatch, capsys
):
    fake = FakeLabelStudio()
    monkeypatch.setattr(
        "services.crowd.labelstudio_api.LabelStudio",
        lambda url, token: LabelStudio(url, token, transport=httpx.MockTransport(fake.handle)),
    )
    monkeypatch.setenv("LABEL_STUDIO_TOKEN", TOKEN)
    common = ["--tasks", str(FIX / "tasks.csv"), "--ls-url", "http://ls.test"]
    assert main(["crowd", "push", *common]) == 0
    assert json.loads(capsys.readouterr().out)["imported"] == tasks.height
    fake.annotate(2, "First")
    out = tmp_path / "new.csv"
    assert main(["crowd", "pull", *common, "--ls-project", "1", "-o", str(out)]) == 0
    assert f"labelstudio:101:{tasks['task_id'][1]}" in out.read_text()
    capsys.readouterr()
    assert main(["crowd", "pull", *common, "--ls-project", "1", "--ls-token", "nope-12345"]) == 2
    err = capsys.readouterr().err
    assert "refused the token (401" in err and "nope-12345" not in err
    assert main(["crowd", "pull", *common, "--ls-project", "7"]) == 2
    assert "has no project 7" in capsys.readouterr().err


def test_the_webhook_route_refuses_what_it_cannot_map(tmp_path):
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'w.db'}", nuts=False)
    with ThreadServer(settings) as server, httpx.Client(base_url=server.url) as api:
        token = api.post("/projects", json={"project_id": "w"}).json()["token"]
        h = {"Authorization": f"Bearer {token}"}
        url = "/projects/w/labelstudio/webhook"
        annotation = {"id": 5, "completed_by": 1, "result": []}
        body = {"action": "ANNOTATION_CREATED", "annotation": annotation, "task": {"id": 1}}
        r = api.post(url, headers=h, json=body)
        assert r.status_code == 422 and "data.batch_id" in r.json()["error"]["message"]
        body["task"] = {"id": 1, "data": {"batch_id": "L9", "task_id": "L9-0001"}}
        r = api.post(url, headers=h, json=body)
        assert r.status_code == 404 and "no lease 'L9'" in r.text
        r = api.post(url, headers=h, json={**body, "action": "ANNOTATION_UPDATED"})
        assert r.status_code == 422
        assert api.post(url, json=body).status_code == 401  # the project's token is required
