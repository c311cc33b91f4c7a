"""Issue 39: ranked screens through the service, as through a file. A pair keeps its
``screen_id`` in the store, in reads and in exports; a screen is checked as the files' reader
checks it (one prompt, one annotator, one dimension, each pair once), across batches too; and
the service's default-model significance of a ranked campaign is the command line's, whose
intervals take each screen's pairs as one unit."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import polars as pl
import pytest

from adaptive.core.data import read_judgments
from services.cli import main
from services.settings import Settings
from tests.factories import ThreadServer, when_ready

FIXTURE = Path(__file__).parents[2] / "fixtures" / "rankings" / "rankings.csv"


def _pairs() -> list[dict]:
    frame = read_judgments(FIXTURE).drop("row")
    return [{"judgment_id": f"j{i}", **r} for i, r in enumerate(frame.to_dicts())]


def _project(api: httpx.Client, pairs: list[dict]) -> tuple[str, dict]:
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    token = api.post("/projects", json={"project_id": project_id}).json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    systems = sorted({p["system_a"] for p in pairs} | {p["system_b"] for p in pairs})
    prompts = sorted({p["item_id"] for p in pairs})
    for path, body in (
        ("systems", {"systems": [{"system_id": s} for s in systems]}),
        ("prompts", {"prompts": [{"prompt_id": p} for p in prompts]}),
    ):
        r = api.post(f"/projects/{project_id}/{path}", json=body, headers=headers)
        assert r.is_success, r.text
    return project_id, headers


def test_a_screen_enters_the_service_whole_and_is_checked_across_batches(database_url):
    pairs = _pairs()
    with ThreadServer(Settings(database_url=database_url, streaming=False)) as server:
        with httpx.Client(base_url=server.url, timeout=60) as api:
            project_id, headers = _project(api, pairs)
            url = f"/projects/{project_id}/judgments"
            # a screen's rows in two batches: the second is checked against the stored first
            first, rest = pairs[:5], pairs[5:]
            assert api.post(url, json={"judgments": first}, headers=headers).status_code == 200
            # a pair of a stored screen by another annotator: refused, with its row and field
            other = {**rest[0], "judgment_id": "x1", "annotator_id": "someone-else"}
            bad = api.post(url, json={"judgments": [rest[1], other]}, headers=headers)
            assert bad.status_code == 422, bad.text
            problems = bad.json()["error"]["problems"]
            assert [(p["row"], p["field"]) for p in problems] == [(1, "annotator_id")]
            assert "its stored rows" in problems[0]["message"]
            # a pair the screen already holds, in the batch: refused as a repeated pair
            again = {**first[0], "judgment_id": "x2"}
            bad = api.post(url, json={"judgments": [again]}, headers=headers)
            assert bad.status_code == 422 and bad.json()["error"]["problems"][0]["field"] == (
                "screen_id"
            )
            # a screen that changes prompt within one batch: the files' message
            moved = {**rest[1], "judgment_id": "x3", "item_id": pairs[-1]["item_id"]}
            bad = api.post(url, json={"judgments": [rest[0], moved]}, headers=headers)
            assert bad.status_code == 422
            problem = bad.json()["error"]["problems"][0]
            assert (problem["row"], problem["field"]) == (1, "item_id")
            assert "the item_id of its screen" in problem["message"]
            # nothing of the refused batches was stored; the rest goes in, a retry is a no-op
            for _ in range(2):
                r = api.post(url, json={"judgments": rest}, headers=headers)
                assert r.status_code == 200, r.text
            stored = api.get(url, params={"limit": 1000}, headers=headers).json()["judgments"]
            assert len(stored) == len(pairs)
            got = {j["judgment_id"]: j["screen_id"] for j in stored}
            assert got == {p["judgment_id"]: p["screen_id"] for p in pairs}


def test_a_ranked_campaign_gets_the_command_lines_significance(tmp_path, capsys):
    pairs = _pairs()
    assert main(["significance", "--data", str(FIXTURE), "--format", "json", "--quiet"]) == 0
    cli = json.loads(capsys.readouterr().out)
    url = f"sqlite:///{tmp_path / 'ranked.db'}"
    with ThreadServer(Settings(database_url=url, streaming=False)) as server:
        with httpx.Client(base_url=server.url, timeout=60) as api:
            project_id, headers = _project(api, pairs)
            r = api.post(
                f"/projects/{project_id}/judgments", json={"judgments": pairs}, headers=headers
            )
            assert r.status_code == 200, r.text
            r = when_ready(
                lambda: api.get(
                    f"/projects/{project_id}/significance",
                    params={"model": "default"},
                    headers=headers,
                ),
                "significance_pending",
            )
            assert r.status_code == 200, r.text
            rows = r.json()["rows"]
    assert len(rows) == len(cli)
    for got, want in zip(rows, cli):
        assert list(got) == list(want)
        for key, value in want.items():
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
            else:
                assert got[key] == value, key
    # the screens are what the intervals cluster on: without them the rows differ
    unscreened = pl.DataFrame(pairs).drop("screen_id", "judgment_id")
    import evalset

    plain = evalset.significance(unscreened).to_dicts()
    assert any(a["ci_low"] != pytest.approx(b["ci_low"], rel=1e-6) for a, b in zip(plain, cli)), (
        "the screens made no difference: this test would not see them dropped"
    )
