"""The served campaign: decisions over HTTP, and next batches that respect them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from adaptive.estimation.streaming import Snapshot as StreamSnapshot
from adaptive.stopping.decisions import DecisionRule, decide
from services.settings import Settings
from tests.factories import ThreadServer

SYSTEMS = ["s0", "s1", "s2", "mute"]
NUM_PROMPTS = 40


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Iterator[httpx.Client]:
    db = tmp_path_factory.mktemp("dec") / "dec.db"
    settings = Settings(database_url=f"sqlite:///{db}", streaming=False)
    with ThreadServer(settings) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        c.server = server  # type: ignore[attr-defined]
        yield c


def _campaign(client: httpx.Client) -> tuple[str, dict, list[dict]]:
    """s0 vs s1: s1 wins everything (closes); s0 vs s2: a coin (open); 'mute' has no responses."""
    project_id = f"d{time.monotonic_ns() % 10**9}"
    r = client.post("/projects", json={"project_id": project_id})
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    client.post(
        f"/projects/{project_id}/systems",
        json={"systems": [{"system_id": s} for s in SYSTEMS]},
        headers=headers,
    )
    prompts = []
    for i in range(NUM_PROMPTS):
        responses = {"s0": f"zero {i}", "s1": f"one {i}", "s2": f"two {i}"}
        if i < 5:
            responses["s2"] = f"ZERO  {i}"  # the same text as s0's, up to case and spacing
        prompts.append({"prompt_id": f"q{i:02d}", "text": f"question {i}", "responses": responses})
    r = client.post(f"/projects/{project_id}/prompts", json={"prompts": prompts}, headers=headers)
    assert r.status_code < 300, r.text
    rng = np.random.default_rng(0)
    rows = []
    for k in range(30):
        rows.append(
            {
                "judgment_id": f"a{k}",
                "item_id": f"q{k:02d}",
                "system_a": "s0",
                "system_b": "s1",
                "annotator_id": f"w{k % 3}",
                "winner": "b",
            }
        )
        rows.append(
            {
                "judgment_id": f"c{k}",
                "item_id": f"q{k + 5:02d}",
                "system_a": "s2",
                "system_b": "s0",
                "annotator_id": f"w{k % 3}",
                "winner": str(rng.choice(["a", "b", "tie"])),
            }
        )
    r = client.post(f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers)
    assert r.status_code < 300, r.text
    draws = 100
    snap = StreamSnapshot(
        dimension="overall",
        version=0,
        num_judgments=len(rows),
        last_seq=len(rows),
        method="laplace",
        created_at=time.time(),
        fit_seconds=0.1,
        diagnostics={},
        systems=("s0", "s1", "s2"),
        items=tuple(f"q{i:02d}" for i in range(NUM_PROMPTS)),
        pair_a=np.array([0, 2], np.int32),
        pair_b=np.array([1, 0], np.int32),
        pair_judgments=np.array([30, 30]),
        pair_prompts=np.array([30, 30]),
        skill=rng.normal([0.0, 1.0, 0.0], 0.3, size=(draws, 3)).astype(np.float32),
        alpha=np.exp(rng.normal(0, 0.2, size=(draws, NUM_PROMPTS))).astype(np.float32),
        b=np.sort(rng.normal(0, 1, size=(draws, NUM_PROMPTS, 2)), axis=-1).astype(np.float32),
    )
    client.server.state.publish((project_id, "overall"), snap)
    return project_id, headers, rows


def test_decisions_match_the_library_on_the_same_judgments(client):
    project_id, headers, rows = _campaign(client)
    r = client.get(f"/projects/{project_id}/decisions", headers=headers)
    assert r.status_code == 200, r.text
    body = r.json()
    got = {}
    for x in body["rows"]:
        got[(x["system_a"], x["system_b"])] = got[(x["system_b"], x["system_a"])] = x
    # the family is the two compared pairs (before: every pair of the four systems, 6 tests)
    assert len(body["rows"]) == 2 and "2 comparisons" in body["rule"]
    assert body["family"] == "2 comparisons (the comparisons with judgments)"
    assert got[("s0", "s1")]["decision"] == "B better"
    assert got[("s2", "s0")]["decision"] == "undecided"
    every = client.get(
        f"/projects/{project_id}/decisions?family=all-pairs", headers=headers
    ).json()["rows"]
    mute = [x for x in every if "mute" in (x["system_a"], x["system_b"])]
    assert len(every) == 6 and all(x["family_size"] == 6 for x in every)
    assert mute[0]["n_judgments"] == 0 and mute[0]["net_preference"] is None
    # the same numbers from the library on the raw judgments, in arrival order
    comp = np.array([0 if r["system_b"] == "s1" else 1 for r in rows])
    prompt = np.array([int(r["item_id"][1:]) for r in rows])
    sign = {"a": -1.0, "b": 1.0, "tie": 0.0}
    signed = np.array([sign[r["winner"]] for r in rows])
    ref = decide(comp, prompt, signed, 2, DecisionRule(), num_tests=2)
    assert got[("s0", "s1")]["closed_at"] == ref.closed_at[0]
    assert got[("s2", "s0")]["needed"] == int(round(ref.needed[1]))
    assert got[("s2", "s0")]["cs_low"] == pytest.approx(ref.cs_low[1])
    for query in ("unit=cell", "alpha=5e-324", "alpha=1", "margin=-0.1"):
        bad = client.get(f"/projects/{project_id}/decisions?{query}", headers=headers)
        assert bad.status_code == 422, query


def test_next_batch_skips_closed_comparisons_and_unannotatable_cells(client):
    project_id, headers, _ = _campaign(client)
    r = client.post(f"/projects/{project_id}/next-batch", json={"size": 200}, headers=headers)
    assert r.status_code == 200, r.text
    # the open comparison s0-s2 has five fresh prompts: not enough to close it even in the
    # best case, so it is named, not served
    assert r.json()["cells"] == []
    (left,) = r.json()["not_served"]
    assert {left["system_a"], left["system_b"]} == {"s0", "s2"} and left["servable_prompts"] == 5
    # named as a target, it is served: fresh, annotatable prompts only
    r = client.post(
        f"/projects/{project_id}/next-batch",
        json={"size": 200, "targets": [["s0", "s2"]]},
        headers=headers,
    )
    cells = r.json()["cells"]
    assert len(cells) == 5
    for cell in cells:
        pair = {cell["system_a"], cell["system_b"]}
        assert pair != {"s0", "s1"}, "a closed comparison got a cell"
        assert "mute" not in pair, "a system without responses was served"
        if pair == {"s0", "s2"}:
            assert int(cell["item_id"][1:]) >= 5, "two identical responses were served"
            assert cell["reason"] == "targeted"
    # fresh prompts only: no cell that already has a judgment, none twice
    keys = [(c["item_id"], c["system_a"], c["system_b"]) for c in cells]
    assert len(keys) == len(set(keys))
    judged_s0_s2 = {f"q{k + 5:02d}" for k in range(30)}
    assert not any(
        c["item_id"] in judged_s0_s2 and {c["system_a"], c["system_b"]} == {"s0", "s2"}
        for c in cells
    )


def test_recommend_from_a_served_project_carries_the_texts(client, capsys):
    import json

    from services.cli import main

    project_id, headers, _ = _campaign(client)
    token = headers["Authorization"].split()[1]
    argv = ["recommend", "--project", project_id, "--url", str(client.base_url), "--token", token]
    argv += ["--targets", "s0:s2"]  # its five fresh prompts cannot close it: named, it is served
    assert main(argv + ["--size", "6", "--format", "json", "--quiet"]) == 0
    tasks = json.loads(capsys.readouterr().out)
    # the family's one open comparison, s0-s2, has five annotatable fresh prompts left
    assert len(tasks) == 5
    for t in tasks:
        i = int(t["item_id"][1:])
        assert t["prompt"] == f"question {i}"
        first = t["system_first"]
        expected = {
            "s0": f"zero {i}",
            "s1": f"one {i}",
            "s2": f"two {i}" if i >= 5 else f"ZERO  {i}",
        }
        assert t["response_first"] == expected[first]
        assert t["response_first"] != t["response_second"] and t["response_second"]


def test_recommend_from_a_served_project_sends_its_decision_rule(client, capsys):
    from services.cli import main

    project_id, headers, _ = _campaign(client)
    token = headers["Authorization"].split()[1]
    argv = ["recommend", "--project", project_id, "--url", str(client.base_url), "--token", token]
    # the service checks the rule it is sent: a level below its range is refused
    assert main(argv + ["--size", "2", "--format", "json", "--quiet", "--alpha", "1e-13"]) == 2
    assert "alpha" in capsys.readouterr().err
    assert main(argv + ["--size", "2", "--format", "json", "--quiet", "--alpha", "0.2"]) == 0
