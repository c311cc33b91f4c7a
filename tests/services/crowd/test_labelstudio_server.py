"""The Label Studio connector against a REAL Label Studio server (slow suite).

A session fixture installs Label Studio into its own virtualenv (never the product's:
``$EVALSET_LABEL_STUDIO_VENV``, default ``~/.cache/evalset/label-studio-venv``) when it is
missing, and starts ``label-studio start`` on a free port with a fresh data directory and
a user and legacy API token created from environment variables. The test pushes a
next-batch lease of a served project with ``evalset crowd push``, annotates the tasks
through Label Studio's own API (``POST /api/tasks/{id}/annotations/``, as an annotator's
work lands), pulls them back with ``evalset crowd pull`` and checks that each answer is
stored exactly once, with the winner mapped through the lease, and that a second pull
stores nothing; then, with Label Studio's ANNOTATION_CREATED webhook pointed at the
service, that an annotation is stored as it is made and the next pull stores nothing.
Timings are printed (``-s``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest

from services.crowd.labelstudio_api import LabelStudio, pull_results
from services.crowd.tasks import normalize_tasks
from services.settings import Settings
from tests.factories import SYSTEMS, ThreadServer, free_port, judgments, missing

pytestmark = pytest.mark.slow

LS_SPEC = "label-studio>=1.20,<2"
LS_TOKEN = "evalset-test-token-0123456789"
TIMES: dict[str, float] = {}


def _venv() -> Path:
    default = Path.home() / ".cache" / "evalset" / "label-studio-venv"
    return Path(os.environ.get("EVALSET_LABEL_STUDIO_VENV") or default).expanduser()


def _install(venv: Path) -> Path:
    """``<venv>/bin/label-studio``, installing Label Studio there first if it is missing."""
    exe = venv / "bin" / "label-studio"
    if exe.exists():
        return exe
    start = time.monotonic()
    try:
        venv.parent.mkdir(parents=True, exist_ok=True)
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", LS_SPEC],
            check=True,
            timeout=1800,
            capture_output=True,
            text=True,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        tail = getattr(exc, "stderr", "") or ""
        missing(f"could not install {LS_SPEC} into {venv}: {exc} {tail[-500:]}")
    TIMES["install_s"] = time.monotonic() - start
    return exe


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a fresh Label Studio whose admin has the API token :data:`LS_TOKEN`."""
    exe = _install(_venv())
    data = tmp_path_factory.mktemp("label-studio")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {
        "LABEL_STUDIO_USERNAME": "evalset@example.com",
        "LABEL_STUDIO_PASSWORD": "evalset-test-password",
        "LABEL_STUDIO_USER_TOKEN": LS_TOKEN,
        # since 1.20 new organizations take JWT tokens only, unless legacy tokens are enabled
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
        "LABEL_STUDIO_BASE_DATA_DIR": str(data),
        # the webhook leg posts to the service on 127.0.0.1, which Label Studio's SSRF guard
        # refuses by default; and its 1 s webhook timeout is short for a loaded machine
        "SSRF_PROTECTION_ENABLED": "false",
        "WEBHOOK_TIMEOUT": "30",
        "LATEST_VERSION_CHECK": "false",
        "COLLECT_ANALYTICS": "false",
    }
    url = f"http://127.0.0.1:{port}"
    start = time.monotonic()
    log = (data / "server.log").open("w")
    proc = subprocess.Popen(
        [str(exe), "start", "--no-browser", "--port", str(port), "--data-dir", str(data)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopped whole at the end
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                missing(
                    f"label-studio exited {proc.returncode}: {(data / 'server.log').read_text()[-800:]}"
                )
            try:
                r = httpx.get(
                    f"{url}/api/projects/", headers={"Authorization": f"Token {LS_TOKEN}"}
                )
                if r.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                missing(
                    f"label-studio did not answer in 300 s: {(data / 'server.log').read_text()[-800:]}"
                )
            time.sleep(0.5)
        TIMES["server_start_s"] = time.monotonic() - start
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        log.close()


CHOICES = ("First", "Second", "Tie")


def answer(choice: str) -> dict:
    """One result of the product's labelling config, as Label Studio's editor saves it."""
    return {
        "from_name": "preference",
        "to_name": "prompt",
        "type": "choices",
        "value": {"choices": [choice]},
    }


def _evalset(*argv: str) -> subprocess.CompletedProcess:
    """The command line in its own process (as a user runs it; no capture in this one)."""
    env = {**os.environ, "LABEL_STUDIO_TOKEN": LS_TOKEN}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert LS_TOKEN not in done.stdout + done.stderr
    return done


def test_push_annotate_pull_round_trip_through_a_real_label_studio(label_studio, tmp_path):
    start = time.monotonic()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ls.db'}", nuts=False, skill_updates=False
    )
    judged = SYSTEMS[:5]
    with ThreadServer(settings) as server, httpx.Client(base_url=server.url, timeout=300) as api:
        r = api.post("/projects", json={"project_id": "ls"})
        assert r.status_code == 201, r.text
        token = r.json()["token"]
        h = {"Authorization": f"Bearer {token}"}
        api.post(
            "/projects/ls/systems", headers=h, json={"systems": [{"system_id": s} for s in judged]}
        )
        prompts = [
            {
                "prompt_id": f"q{i}",
                "text": f"prompt {i}?",
                "responses": {s: f"{s} says {i}" for s in judged},
            }
            for i in range(12)
        ]
        assert (
            api.post("/projects/ls/prompts", headers=h, json={"prompts": prompts}).status_code < 300
        )
        seed = judgments(60)
        assert (
            api.post("/projects/ls/judgments", headers=h, json={"judgments": seed}).json()[
                "accepted"
            ]
            == 60
        )
        deadline = time.monotonic() + 240
        while not api.get("/projects/ls", headers=h).json()["snapshots"]:
            assert time.monotonic() < deadline, "no snapshot"
            time.sleep(0.2)
        r = api.post("/projects/ls/next-batch", headers=h, json={"size": 8, "annotator_id": "ls"})
        assert r.status_code == 200, r.text
        lease = r.json()["lease_id"]
        served = api.get(f"/projects/ls/leases/{lease}/tasks", headers=h).json()["tasks"]
        assert len(served) == 8

        client = [
            "--project",
            "ls",
            "--url",
            server.url,
            "--token",
            token,
            "--ls-url",
            label_studio,
        ]
        pushed = _evalset("crowd", "push", "--lease", lease, *client)
        ls_project = int(pushed.stdout.split('"project_id": ')[1].split(",")[0])
        # a second push imports nothing
        assert '"imported": 0' in _evalset("crowd", "push", "--lease", lease, *client).stdout

        # an annotator's work, through Label Studio's own API: 6 answers, 1 skip, 1 untouched
        ls_api = {"Authorization": f"Token {LS_TOKEN}"}
        listed = httpx.get(
            f"{label_studio}/api/tasks/",
            params={"project": ls_project, "page_size": 100},
            headers=ls_api,
        ).json()["tasks"]
        assert sorted(t["data"]["task_id"] for t in listed) == sorted(t["task_id"] for t in served)
        by_task = {t["task_id"]: t for t in served}
        expected = {}
        for k, task in enumerate(sorted(listed, key=lambda t: t["data"]["task_id"])):
            if k == 7:
                continue  # answered later, when the webhook is on
            choice = CHOICES[k % 3]
            r = httpx.post(
                f"{label_studio}/api/tasks/{task['id']}/annotations/",
                headers=ls_api,
                json={
                    "result": [answer(choice)],
                    "was_cancelled": k == 6,
                    "lead_time": 3.5 + k,
                },
            )
            assert r.status_code == 201, r.text
            if k == 6:
                continue  # skipped in the tool: not a judgment
            tid = task["data"]["task_id"]
            shown = by_task[tid]["shown_first"]
            winner = {"First": shown, "Second": "b" if shown == "a" else "a", "Tie": "tie"}[choice]
            expected[f"labelstudio:{r.json()['id']}:{tid}"] = winner

        # the library door reads the same answers as a results file would be read
        tasks = normalize_tasks(pl.DataFrame(served), batch_id=lease)
        ls = LabelStudio(label_studio, LS_TOKEN)
        got = pull_results(ls, ls_project, tasks)
        ls.close()
        assert dict(zip(got.judgments["judgment_id"], got.judgments["winner"])) == expected
        assert got.skipped == {"cancelled annotation": 1} and len(got.unanswered) == 2

        for round_ in range(2):  # the service door, twice: the second stores nothing
            out = _evalset("crowd", "pull", "--ls-project", str(ls_project), *client)
            result = json.loads(out.stdout)[lease]
            assert result["accepted"] == (len(expected) if round_ == 0 else 0)
            assert result["duplicates"] == (0 if round_ == 0 else len(expected))
            assert result["skipped"] == {"cancelled annotation": 1}

        # Label Studio's webhook stores an annotation as it is made; a pull then stores nothing
        r = httpx.post(
            f"{label_studio}/api/webhooks/",
            headers=ls_api,
            json={
                "project": ls_project,
                "url": f"{server.url}/projects/ls/labelstudio/webhook",
                "send_payload": True,
                "send_for_all_actions": False,
                "actions": ["ANNOTATION_CREATED"],
                "headers": {"Authorization": f"Bearer {token}"},
            },
        )
        assert r.status_code == 201, r.text
        last = sorted(listed, key=lambda t: t["data"]["task_id"])[7]
        r = httpx.post(
            f"{label_studio}/api/tasks/{last['id']}/annotations/",
            headers=ls_api,
            json={"result": [answer("First")]},
            timeout=60,
        )
        assert r.status_code == 201, r.text
        tid = last["data"]["task_id"]
        expected[f"labelstudio:{r.json()['id']}:{tid}"] = by_task[tid]["shown_first"]
        assert api.get("/projects/ls", headers=h).json()["num_judgments"] == 60 + len(expected)
        out = _evalset("crowd", "pull", "--ls-project", str(ls_project), *client)
        result = json.loads(out.stdout)[lease]
        assert (result["accepted"], result["duplicates"]) == (0, len(expected))

        stored = api.get("/projects/ls/judgments", headers=h, params={"limit": 10_000}).json()
    rows = [r for r in stored["judgments"] if r["judgment_id"].startswith("labelstudio:")]
    assert sorted(r["judgment_id"] for r in rows) == sorted(expected)  # each exactly once
    assert {r["judgment_id"]: r["winner"] for r in rows} == expected
    assert all(r["annotator_id"] == "ls_1" for r in rows)  # the token's user, Label Studio's id 1
    assert len(stored["judgments"]) == 60 + len(expected)
    TIMES["test_s"] = time.monotonic() - start
    print(f"\nLabel Studio timings: {TIMES}")
