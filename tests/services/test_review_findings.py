"""Findings of a review of the questions over HTTP: each test fails on the code it was written
against and says what the contract asks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest

import evalset
from services.settings import Settings
from tests.factories import ThreadServer

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "data" / "mtbench" / "judgments.csv"


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[httpx.Client]:
    url = f"sqlite:///{tmp_path_factory.mktemp('review') / 'review.db'}"
    with ThreadServer(Settings(database_url=url, streaming=False)) as server:
        with httpx.Client(base_url=server.url, timeout=600) as client:
            yield client


def _project(api: httpx.Client, frame: pl.DataFrame | None, systems: list[str]) -> tuple[str, dict]:
    """A project with ``systems`` and (when given) ``frame``'s prompts, dimensions, judgments."""
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = api.post("/projects", json={"project_id": project_id})
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    r = api.post(
        f"/projects/{project_id}/systems",
        json={"systems": [{"system_id": s} for s in systems]},
        headers=headers,
    )
    assert r.status_code < 300, r.text
    if frame is None:
        return project_id, headers
    catalogue = {
        "prompts": [{"prompt_id": p} for p in frame["item_id"].unique(maintain_order=True)],
        "dimensions": [
            {"dimension_id": d}
            for d in frame["dimension"].unique(maintain_order=True)
            if d != "overall"
        ],
    }
    for what, rows in catalogue.items():
        if not rows:
            continue
        r = api.post(f"/projects/{project_id}/{what}", json={what: rows}, headers=headers)
        assert r.status_code < 300, r.text
    rows = [{"judgment_id": f"j{i}", **r} for i, r in enumerate(frame.to_dicts())]
    r = api.post(f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers)
    assert r.status_code == 200, r.text
    return project_id, headers


def test_decisions_of_a_project_without_judgments_still_state_the_rule(api):
    """GET .../decisions answered the rule in words (``Decisions.rule``) before 144b123; it
    now reads the first row's ``rule``, so a family without comparisons answers ``""``."""
    project_id, headers = _project(api, None, ["a", "b", "c"])
    r = api.get(f"/projects/{project_id}/decisions", headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["family_size"] == 0
    assert r.json()["rule"].startswith("anytime-valid"), r.json()


def test_a_batch_for_one_dimensions_question_reads_that_dimensions_answer(api, tmp_path):
    """``dimensions: [D]`` with a question: the command line's batch (``evalset recommend
    --dimension D --question Q``) answers Q on D's judgments alone, D's own family, as
    ``GET .../answer?dimension=D`` and ``evalset answer --dimension D`` do. Once that answer
    is reached the batch is empty (the route read the question over every dimension's
    family, one family across both, and kept serving)."""
    frame = pl.read_csv(MTBENCH)
    second = frame.gather_every(2).with_columns(pl.lit("helpfulness").alias("dimension"))
    frame = pl.concat([frame, second])
    path = tmp_path / "two.csv"
    frame.write_csv(path)
    systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
    project_id, headers = _project(api, frame, systems)
    question = "top-k:3"
    own = evalset.answer(path, question, dimension="helpfulness").to_dicts()
    assert [r["answered"] for r in own] == [True]  # helpfulness alone: answered
    r = api.get(
        f"/projects/{project_id}/answer",
        params={"question": question, "dimension": "helpfulness"},
        headers=headers,
    )
    assert r.status_code == 200 and [x["answered"] for x in r.json()["rows"]] == [True]
    body = {"size": 8, "question": question, "dimensions": ["helpfulness"]}
    r = api.post(f"/projects/{project_id}/next-batch", json=body, headers=headers)
    assert r.status_code == 200, r.text
    served = r.json()["question"]
    assert (served["pending_served"], r.json()["cells"]) == (0, []), served["status"]


def test_a_registered_dimension_without_judgments_is_refused_as_the_command_line_does(api):
    """``answer?dimension=D`` for a registered D nobody judged yet: 404 naming the judged
    dimensions (``evalset answer --dimension D`` refuses D on the same judgments)."""
    frame = pl.read_csv(MTBENCH).head(200)
    systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
    project_id, headers = _project(api, frame, systems)
    r = api.post(
        f"/projects/{project_id}/dimensions",
        json={"dimensions": [{"dimension_id": "later"}]},
        headers=headers,
    )
    assert r.status_code < 300, r.text
    r = api.get(
        f"/projects/{project_id}/answer",
        params={"question": "top-k:1", "dimension": "later"},
        headers=headers,
    )
    assert r.status_code == 404, r.text
    message = r.json()["error"]["message"]
    assert "'later'" in message and "'overall'" in message, message
