"""``POST .../next-batch`` with a question: one look of the tally, the dimensions asked, and an
empty question that is no question at every door."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest

import evalset
from services.runtime.tally import Tallies
from services.settings import Settings
from tests.factories import ThreadServer

ROOT = Path(__file__).resolve().parents[3]
MTBENCH = ROOT / "data" / "mtbench" / "judgments.csv"
#: MT-Bench's first judgments leave top-k:3 open (2 pending comparisons), all of them answer it
EARLY = 2000
QUESTION = "top-k:3"
CELL = ("item_id", "dimension", "system_a", "system_b", "shown_first", "reason", "needed")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ThreadServer]:
    url = f"sqlite:///{tmp_path_factory.mktemp('nbq') / 'nbq.db'}"
    with ThreadServer(Settings(database_url=url, streaming=False)) as running:
        yield running


@pytest.fixture(scope="module")
def api(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


def _judgments(frame: pl.DataFrame, start: int = 0) -> list[dict]:
    return [{"judgment_id": f"j{start + i}", **r} for i, r in enumerate(frame.to_dicts())]


def _project(
    api: httpx.Client, frame: pl.DataFrame, systems: list[str], prompts: pl.DataFrame | None = None
) -> tuple[str, dict]:
    """A project with ``systems``, ``frame``'s (or ``prompts``') prompts, ``frame``'s
    dimensions and judgments."""
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = api.post("/projects", json={"project_id": project_id})
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    catalogue = {
        "systems": [{"system_id": s} for s in systems],
        "prompts": [
            {"prompt_id": p}
            for p in (frame if prompts is None else prompts)["item_id"].unique(maintain_order=True)
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
    r = api.post(
        f"/projects/{project_id}/judgments",
        json={"judgments": _judgments(frame)},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    return project_id, headers


def _batch(response: httpx.Response) -> tuple[list[dict], dict]:
    """A next-batch answer's cells (without lease fields) and its question."""
    assert response.status_code == 200, response.text
    got = response.json()
    return [{k: c[k] for k in CELL} for c in got["cells"]], got["question"]


def test_the_question_and_the_batch_are_read_at_one_look(server, api, monkeypatch):
    """Judgments stored while a batch is being prepared (here: right after the request's
    look of the tally, the ones that answer the question) are not half-seen: the question's
    answer, its pending set and the batch's decisions all come from that one look. Read
    under two holds of the tally's lock, the status said 'open' from the first look while the
    batch was planned on the second, where the question is answered."""
    frame = pl.read_csv(MTBENCH)
    systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
    early, late = frame.head(EARLY), frame.slice(EARLY)
    body = {"size": 8, "question": QUESTION, "seed": 3}
    # the batch of the first judgments alone, nothing stored meanwhile
    plain_id, plain_headers = _project(api, early, systems, frame)
    url = f"/projects/{plain_id}/next-batch"
    want_cells, want_question = _batch(api.post(url, json=body, headers=plain_headers))
    assert want_question["pending_served"] > 0 and want_cells  # open at this look
    # the same judgments, and the rest stored just after the request's (first) look
    project_id, headers = _project(api, early, systems, frame)
    armed = {project_id}
    advance = Tallies.advance

    def advance_then_store(self, store, pid):  # noqa: ANN001, ANN202
        tally = advance(self, store, pid)
        if pid in armed:
            armed.discard(pid)
            with httpx.Client(base_url=server.url, timeout=120) as other:
                r = other.post(
                    f"/projects/{pid}/judgments",
                    json={"judgments": _judgments(late, start=EARLY)},
                    headers=headers,
                )
                assert r.status_code == 200, r.text
        return tally

    monkeypatch.setattr(Tallies, "advance", advance_then_store)
    got_cells, got_question = _batch(
        api.post(f"/projects/{project_id}/next-batch", json=body, headers=headers)
    )
    assert not armed  # the judgments were stored mid-request
    assert (got_cells, got_question) == (want_cells, want_question)
    # the next request's look has them: answered, nothing to serve
    cells, question = _batch(
        api.post(f"/projects/{project_id}/next-batch", json=body, headers=headers)
    )
    assert (cells, question["pending_served"]) == ([], 0), question["status"]


def test_several_dimensions_asked_share_one_family_over_exactly_them(api, tmp_path):
    """``dimensions: [D1, D2]`` with a question: one family over exactly D1 and D2, as
    ``evalset recommend --dimension D1 --dimension D2 --question Q`` reads the file's
    judgments of those two (``evalset.answer`` on them); a third judged dimension is not in it."""
    frame = pl.read_csv(MTBENCH)
    second = frame.gather_every(2).with_columns(pl.lit("helpfulness").alias("dimension"))
    third = frame.gather_every(3).with_columns(pl.lit("honesty").alias("dimension"))
    frame = pl.concat([frame, second, third])
    systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
    project_id, headers = _project(api, frame, systems)
    asked = ["overall", "honesty"]
    path = tmp_path / "two.csv"
    frame.filter(pl.col("dimension").is_in(asked)).write_csv(path)
    keep = ("dimension", "answered", "pending", "family_size", "top")
    want = [{k: r[k] for k in keep} for r in evalset.answer(path, "ranking").to_dicts()]
    assert [r["family_size"] for r in want] == [30, 30]  # 15 pairs in each of the two
    body = {"size": 4, "question": "ranking", "dimensions": asked}
    r = api.post(f"/projects/{project_id}/next-batch", json=body, headers=headers)
    _, question = _batch(r)
    assert [{k: a[k] for k in keep} for a in question["answers"]] == want
    assert {c["dimension"] for c in r.json()["cells"]} <= set(asked)


def test_an_empty_question_is_no_question_at_every_door(api):
    """``"question": ""`` is a body without a question: beside targets, and under the
    idempotency key of the same body without it; ``?question=`` is the parameter left out on
    ``GET .../answer`` (its default question) and ``GET .../decisions`` (no question), as
    ``evalset decisions --question ''`` asks none."""
    frame = pl.read_csv(MTBENCH).head(600)
    systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
    project_id, headers = _project(api, frame, systems)
    url = f"/projects/{project_id}/next-batch"
    pair = [frame["system_a"][0], frame["system_b"][0]]
    body = {"size": 3, "targets": [pair], "idempotency_key": "k-empty"}
    r = api.post(url, json={**body, "question": ""}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["question"] is None and r.json()["cells"]
    again = api.post(url, json=body, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["replayed"] and again.json()["cells"] == r.json()["cells"]
    for door in ("answer", "decisions"):
        left_out = api.get(f"/projects/{project_id}/{door}", headers=headers)
        empty = api.get(f"/projects/{project_id}/{door}", params={"question": ""}, headers=headers)
        assert left_out.status_code == empty.status_code == 200, (door, empty.text)
        assert empty.json() == left_out.json(), door
    rows = api.get(f"/projects/{project_id}/decisions", headers=headers).json()["rows"]
    assert rows and all(r.get("question_role") is None for r in rows)
