"""``POST .../next-batch`` before a dimension's first snapshot: served on the running decisions.

A fresh service fits a dimension's first posterior minutes after its first judgments; the
batch's order comes from the decisions, which need no model (issue 56, item 1). The server
here never re-estimates (``streaming=False``): snapshots exist only when a test publishes one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

from adaptive.estimation.streaming import Snapshot as StreamSnapshot
from services.api.next_batch_decisions import decisions_fit, waiting_note
from services.runtime.tally import ProjectTally
from services.settings import Settings
from services.store import repository as repo
from tests.factories import ThreadServer

SYSTEMS = ("s0", "s1", "s2", "s3")
NUM_PROMPTS = 30
#: (system_a, system_b, prompts, winners in turn): s1 beats s0 on every prompt (decided),
#: s1-s2 split (open), s2-s3 barely judged (open, burn-in); s0-s2, s0-s3, s1-s3 never judged
PLAN = (("s0", "s1", 20, "b"), ("s1", "s2", 10, "ab"), ("s2", "s3", 4, "b"))
NUM_JUDGMENTS = sum(n for _, _, n, _ in PLAN)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ThreadServer]:
    db = tmp_path_factory.mktemp("first") / "first.db"
    with ThreadServer(Settings(database_url=f"sqlite:///{db}", streaming=False)) as s:
        yield s


@pytest.fixture(scope="module")
def api(server: ThreadServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def _project(api: httpx.Client, *, dimensions: tuple[str, ...] = ("overall",)) -> tuple[str, dict]:
    """Four systems, thirty prompts with a response of each system; no judgments."""
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = api.post(
        "/projects",
        json={"project_id": project_id, "dimensions": [{"dimension_id": d} for d in dimensions]},
    )
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    r = api.post(
        f"/projects/{project_id}/systems",
        json={"systems": [{"system_id": s} for s in SYSTEMS]},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    prompts = [
        {"prompt_id": f"q{i}", "text": f"t{i}", "responses": {s: f"{s} on {i}" for s in SYSTEMS}}
        for i in range(NUM_PROMPTS)
    ]
    r = api.post(f"/projects/{project_id}/prompts", json={"prompts": prompts}, headers=headers)
    assert r.status_code < 300, r.text
    return project_id, headers


def _judge(api: httpx.Client, project_id: str, headers: dict, dimension: str = "overall") -> None:
    rows = [
        {
            "judgment_id": f"{dimension}-{a}-{b}-{i}",
            "item_id": f"q{i}",
            "system_a": a,
            "system_b": b,
            "annotator_id": f"w{i % 3}",
            "winner": winners[i % len(winners)],
            "shown_first": "ab"[i % 2],
            "dimension": dimension,
        }
        for a, b, num, winners in PLAN
        for i in range(num)
    ]
    r = api.post(f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers)
    assert r.status_code < 300 and r.json()["accepted"] == len(rows), r.text


def _publish(server: ThreadServer, project_id: str, dimension: str = "overall") -> None:
    """A posterior snapshot as the worker would publish it (no fit in a test)."""
    rng = np.random.default_rng(0)
    draws = 100
    snap = StreamSnapshot(
        dimension=dimension,
        version=0,
        num_judgments=NUM_JUDGMENTS,
        last_seq=NUM_JUDGMENTS,
        method="laplace",
        created_at=time.time(),
        fit_seconds=0.1,
        diagnostics={},
        systems=SYSTEMS,
        items=tuple(f"q{i}" for i in range(NUM_PROMPTS)),
        pair_a=np.array([0, 1, 2], np.int32),
        pair_b=np.array([1, 2, 3], np.int32),
        pair_judgments=np.array([n for _, _, n, _ in PLAN]),
        pair_prompts=np.array([n for _, _, n, _ in PLAN]),
        skill=rng.normal([-1.0, 1.0, 0.5, 0.0], 0.3, size=(draws, 4)).astype(np.float32),
        alpha=np.ones((draws, NUM_PROMPTS), np.float32),
        b=np.sort(rng.normal(0, 1, size=(draws, NUM_PROMPTS, 2)), axis=-1).astype(np.float32),
    )
    assert server.state.publish((project_id, dimension), snap) is not None


def _batch(api: httpx.Client, project_id: str, headers: dict, **body) -> dict:
    r = api.post(f"/projects/{project_id}/next-batch", json={"size": 12, **body}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def _rows(api: httpx.Client, project_id: str, headers: dict, **params) -> dict[tuple, dict]:
    r = api.get(f"/projects/{project_id}/decisions", params=params, headers=headers)
    assert r.status_code == 200, r.text
    return {
        (row["dimension"], frozenset((row["system_a"], row["system_b"]))): row
        for row in r.json()["rows"]
    }


def _key(cell: dict) -> tuple:
    return cell["dimension"], frozenset((cell["system_a"], cell["system_b"]))


def test_a_fresh_project_is_served_on_its_decisions_before_any_snapshot(api):
    """No snapshot yet: a 200 that says so, cells of the open comparisons only, each with the
    need GET /decisions gives it; the decided comparison is never served."""
    project_id, headers = _project(api)
    _judge(api, project_id, headers)
    rows = _rows(api, project_id, headers)
    open_ = {k for k, row in rows.items() if row["decision"] == "undecided"}
    assert rows[("overall", frozenset(("s0", "s1")))]["decision"] == "B better"
    assert len(open_) == 2
    got = _batch(api, project_id, headers)
    assert got["basis"] == "decisions"
    assert f"{NUM_JUDGMENTS} judgments waiting" in got["basis_note"]
    assert "streaming off" in got["basis_note"] and "overall" in got["basis_note"]
    assert len(got["cells"]) == 12
    assert {_key(c) for c in got["cells"]} == open_
    for cell in got["cells"]:
        assert cell["snapshot_version"] == 0
        assert cell["needed"] == rows[_key(cell)]["needed"]
        assert cell["reason"] in ("burn_in", "closest_to_decision", "open")
    # the barely judged comparison gets its burn-in first
    assert any(c["reason"] == "burn_in" for c in got["cells"] if "s3" in _key(c)[1])


def test_the_batch_on_the_decisions_is_the_batch_a_snapshot_gives(api, server):
    """The same judgments and seed, where the systems' strengths play no part (no new
    system to pair, no adjacent targets): the same cells on the decisions as on a
    snapshot; once the snapshot exists the basis says so."""
    fresh, fresh_headers = _project(api)
    fitted, fitted_headers = _project(api)
    for project_id, headers in ((fresh, fresh_headers), (fitted, fitted_headers)):
        _judge(api, project_id, headers)
    _publish(server, fitted)
    before = _batch(api, fresh, fresh_headers, seed=5)
    after = _batch(api, fitted, fitted_headers, seed=5)
    assert before["basis"] == "decisions" and after["basis"] == "snapshot"
    assert after["basis_note"] is None
    assert {c["snapshot_version"] for c in after["cells"]} == {1}
    drop = ("snapshot_version",)
    assert [{k: v for k, v in c.items() if k not in drop} for c in before["cells"]] == [
        {k: v for k, v in c.items() if k not in drop} for c in after["cells"]
    ]


def test_replays_leases_and_annotators_hold_on_the_decisions(api):
    project_id, headers = _project(api)
    _judge(api, project_id, headers)
    body = {"idempotency_key": "first-1", "lease_seconds": 60, "annotator_id": "w0"}
    first = _batch(api, project_id, headers, **body)
    again = _batch(api, project_id, headers, **body)
    assert again["replayed"] and again["lease_id"] == first["lease_id"]
    assert again["cells"] == first["cells"] and again["basis"] is None
    # w0's own cells are never served to w0; the leased cells go to nobody else
    mine = {(f"q{i}", frozenset((a, b))) for a, b, n, _ in PLAN for i in range(n) if i % 3 == 0}
    assert not {(c["item_id"], _key(c)[1]) for c in first["cells"]} & mine
    other = _batch(api, project_id, headers, size=40)
    cells = {(c["item_id"], _key(c)) for c in first["cells"]}
    assert not cells & {(c["item_id"], _key(c)) for c in other["cells"]}


def test_a_question_is_served_on_the_decisions_with_its_unjudged_pairs(api):
    """top-1 decides every pair of the systems, most never judged: served before any
    snapshot, its pending comparisons only."""
    project_id, headers = _project(api)
    _judge(api, project_id, headers)
    rows = _rows(api, project_id, headers, question="top-1")
    pending = {k for k, row in rows.items() if row["question_role"] == "pending"}
    assert pending - {
        _key({"dimension": "overall", "system_a": a, "system_b": b}) for a, b, *_ in PLAN
    }
    got = _batch(api, project_id, headers, question="top-1", size=30)
    assert got["basis"] == "decisions" and got["question"]["pending_served"] > 0
    assert got["cells"] and {_key(c) for c in got["cells"]} <= pending


def test_gold_cells_are_mixed_in_on_the_decisions(api, server):
    project_id, headers = _project(api)
    _judge(api, project_id, headers)
    gold = [
        {"item_id": f"q{i}", "system_a": a, "system_b": b, "answer": "a"}
        for a, b in (("s1", "s2"), ("s2", "s3"))
        for i in range(25, 30)
    ]
    r = api.post(f"/projects/{project_id}/gold", json={"cells": gold}, headers=headers)
    assert r.status_code == 200, r.text
    body = {"size": 10, "annotator_id": "w9", "gold_share": 0.3, "idempotency_key": "g"}
    got = _batch(api, project_id, headers, **body)
    assert got["basis"] == "decisions" and got["gold_unserved"] == 0
    with server.state.store.read() as conn:
        lease = repo.get_lease_by_key(conn=conn, project_id=project_id, idempotency_key="g")
    assert lease is not None
    marked = [c for c in lease["cells"] if c.get("gold")]
    assert len(marked) == 3
    assert {c["item_id"] for c in marked} <= {g["item_id"] for g in gold}


def test_a_routed_batch_is_drawn_on_the_decisions(api, server):
    """route_by: the cells of the comparisons the judge saw are drawn by its routing, the
    rates kept in the lease, before any snapshot as after."""
    from services.store.repository.verdicts import fetch_routes

    project_id, headers = _project(api)
    _judge(api, project_id, headers)
    verdicts = [
        {
            "judgment_id": f"v{a}{b}{i}",
            "item_id": f"q{i}",
            "system_a": a,
            "system_b": b,
            "annotator_id": "judge",
            "winner": "ab"[i % 2],
            "inconsistent": False,
        }
        for a, b in (("s1", "s2"), ("s2", "s3"))
        for i in range(NUM_PROMPTS)
    ]
    r = api.post(
        f"/projects/{project_id}/judge-verdicts", json={"verdicts": verdicts}, headers=headers
    )
    assert r.status_code == 200, r.text
    got = _batch(api, project_id, headers, size=10, unit="judgment", route_by="judge")
    assert got["basis"] == "decisions"
    routed = [c for c in got["cells"] if c["reason"] == "routed"]
    assert routed and all(c["snapshot_version"] == 0 for c in got["cells"])
    with server.state.store.read() as conn:
        assert len(fetch_routes(conn=conn, project_id=project_id)) == len(routed)


def test_a_dimension_without_a_snapshot_is_served_beside_one_with(api, server):
    project_id, headers = _project(api, dimensions=("overall", "style"))
    for dimension in ("overall", "style"):
        _judge(api, project_id, headers, dimension)
    _publish(server, project_id, "overall")
    got = _batch(api, project_id, headers, size=40)
    assert got["basis"] == "decisions"
    assert "of style" in got["basis_note"] and f"{NUM_JUDGMENTS} judgments" in got["basis_note"]
    versions = {(c["dimension"], c["snapshot_version"]) for c in got["cells"]}
    assert versions == {("overall", 1), ("style", 0)}


def test_nothing_judged_is_still_a_409_that_says_why(api):
    project_id, headers = _project(api)
    r = api.post(f"/projects/{project_id}/next-batch", json={"size": 3}, headers=headers)
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == "no_snapshot"
    assert "no judgments yet in overall" in error["message"]


def test_the_stand_in_strengths_order_the_systems_as_their_judgments_do():
    """Least squares on the observed means: s1 beats s0 on every prompt and splits with
    s2, s3 beats s2; a registered system nobody judged sits in the middle (0)."""
    tally = ProjectTally(systems=(*SYSTEMS, "s9"))
    from services.runtime.tally import DimensionTally

    dim = tally.dimensions.setdefault("overall", DimensionTally())
    dim.register(sorted(tally.systems))
    dim.fold(
        [
            {
                "seq": k + 1,
                "item_id": f"q{k}",
                "system_a": a,
                "system_b": b,
                "winner": w,
                "annotator_id": "w",
                "shown_first": "a",
            }
            for k, (a, b, w) in enumerate(
                [("s0", "s1", "b")] * 4 + [("s2", "s1", "a"), ("s2", "s1", "b"), ("s3", "s2", "a")]
            )
        ]
    )
    fit = decisions_fit(tally, "overall")
    assert fit.version == 0 and fit.num_judgments == 7 and fit.skill.shape == (1, 5)
    strength = dict(zip(fit.systems, fit.skill[0].tolist()))
    assert strength["s9"] == 0.0
    # s1 - s0 = 1, s1 - s2 = 0, s2 - s3 = -1 (s3 won): exact, the design has full rank
    assert strength["s1"] - strength["s0"] == pytest.approx(1.0)
    assert strength["s1"] - strength["s2"] == pytest.approx(0.0, abs=1e-12)
    assert strength["s3"] - strength["s2"] == pytest.approx(1.0)
    note = waiting_note(SimpleNamespace(streaming=True), tally, ["overall"])  # type: ignore[arg-type]
    assert note.startswith("first fit running, 7 judgments waiting")
