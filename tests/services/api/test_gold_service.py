"""Gold (attention-check) cells in the service (issue 42, item 3): registered per project,
their judgments stored apart from the ones decisions and fits read, mixed blind into the
next batch, and scored with the rows ``evalset gold`` gives. Real HTTP against a server on
SQLite and on PostgreSQL (when reachable)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
import polars as pl
import pytest

from adaptive.estimation.streaming import Snapshot as StreamSnapshot
from services.api.routes import next_batch as nb
from services.settings import Settings
from services.store import repository as repo
from tests.factories import ThreadServer, fresh_pg_database, same_rows

SYSTEMS = ("s0", "s1", "s2")
NUM_PROMPTS = 12
#: six cells with known answers on prompts nobody judged (q6..q11): one in the other order,
#: one for every dimension
GOLD = [
    {"item_id": "q6", "system_a": "s0", "system_b": "s1", "answer": "a"},
    {"item_id": "q7", "system_a": "s0", "system_b": "s1", "answer": "b"},
    {"item_id": "q8", "system_a": "s0", "system_b": "s2", "answer": "a"},
    {"item_id": "q9", "system_a": "s0", "system_b": "s2", "answer": "b"},
    {"item_id": "q10", "system_a": "s2", "system_b": "s0", "answer": "a", "dimension": "overall"},
    {"item_id": "q11", "system_a": "s0", "system_b": "s1", "answer": "tie", "dimension": None},
]


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def server(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[ThreadServer]:  # noqa: ANN001
    def serve(url: str) -> ThreadServer:
        return ThreadServer(Settings(database_url=url, streaming=False))

    if request.param == "sqlite":
        with serve(f"sqlite:///{tmp_path_factory.mktemp('gold') / 'gold.db'}") as srv:
            yield srv
    else:
        with fresh_pg_database() as url, serve(url) as srv:
            yield srv


@pytest.fixture
def api(server: ThreadServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def _judgment(k: int, item: str, a: str, b: str, who: str, winner: str, **extra) -> dict:
    return {
        "judgment_id": f"j{k}",
        "item_id": item,
        "system_a": a,
        "system_b": b,
        "annotator_id": who,
        "winner": winner,
        **extra,
    }


#: eight judgments of s0 against s1 and s2 on q0..q5 (six cells)
ORDINARY = [
    _judgment(k, f"q{k % 6}", "s0", "s1" if k % 2 else "s2", "w1" if k < 4 else "w2", "b")
    for k in range(8)
]


def _project(api: httpx.Client) -> tuple[str, dict]:
    """Three systems, twelve prompts with three different responses each, eight judgments."""
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = api.post("/projects", json={"project_id": project_id})
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
    assert r.status_code == 200, r.text
    r = api.post(f"/projects/{project_id}/judgments", json={"judgments": ORDINARY}, headers=headers)
    assert r.status_code == 200, r.text
    return project_id, headers


def _publish(server: ThreadServer, project_id: str) -> None:
    """A posterior snapshot of s0-s1 and s0-s2 as the worker would publish it (no fit)."""
    rng = np.random.default_rng(0)
    draws = 200
    snap = StreamSnapshot(
        dimension="overall",
        version=0,
        num_judgments=8,
        last_seq=8,
        method="laplace",
        created_at=time.time(),
        fit_seconds=0.1,
        diagnostics={},
        systems=SYSTEMS,
        items=tuple(f"q{i}" for i in range(NUM_PROMPTS)),
        pair_a=np.array([0, 0], np.int32),
        pair_b=np.array([1, 2], np.int32),
        pair_judgments=np.array([4, 4]),
        pair_prompts=np.array([4, 4]),
        skill=rng.normal([0.0, 0.1, -0.1], 0.5, size=(draws, 3)).astype(np.float32),
        alpha=np.exp(rng.normal(0, 0.2, size=(draws // 4, NUM_PROMPTS))).astype(np.float32),
        b=np.sort(rng.normal(0, 1, size=(draws // 4, NUM_PROMPTS, 2)), axis=-1).astype(np.float32),
    )
    server.state.publish((project_id, "overall"), snap)


def _register(api: httpx.Client, project_id: str, headers: dict, cells: list[dict]):
    return api.post(f"/projects/{project_id}/gold", json={"cells": cells}, headers=headers)


def _cell(c: dict) -> tuple:
    return c["item_id"], frozenset((c["system_a"], c["system_b"]))


GOLD_CELLS = {_cell(c) for c in GOLD}


# ---------------------------------------------------------------- registering


def test_gold_cells_are_registered_once_and_listed(api):
    project_id, headers = _project(api)
    r = _register(api, project_id, headers, GOLD)
    assert r.status_code == 200, r.text
    assert r.json() == {"created": 6, "unchanged": 0}
    # the same set again, and a cell in the other order with its answer turned: no-ops
    assert _register(api, project_id, headers, GOLD).json() == {"created": 0, "unchanged": 6}
    turned = {"item_id": "q6", "system_a": "s1", "system_b": "s0", "answer": "B "}
    assert _register(api, project_id, headers, [turned]).json() == {"created": 0, "unchanged": 1}
    listed = api.get(f"/projects/{project_id}/gold", headers=headers).json()["cells"]
    assert listed == [{"dimension": None, **c} for c in GOLD]


def test_a_bad_gold_row_refuses_the_whole_request_naming_row_and_reason(api):
    project_id, headers = _project(api)
    good = GOLD[0]
    cases = [
        # the gold file's own checks (adaptive.annotation.gold.read_gold), through the HTTP door
        ({**GOLD[1], "answer": "maybe"}, "answer", "gold row 2: answer 'maybe' is not one of"),
        ({**GOLD[1], "system_b": "s0"}, "system_b", "gold row 2: a pair of one system"),
        ({**good, "system_a": "s1", "system_b": "s0"}, "item_id", "gold row 2: the cell of row 1"),
        ({**good, "dimension": "overall"}, "dimension", "holds for every dimension"),
    ]
    for bad, field, message in cases:
        r = _register(api, project_id, headers, [good, bad])
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "validation_error"
        [problem] = error["problems"]
        assert problem["row"] == 1 and problem["field"] == field, problem
        assert message in problem["message"], problem
    r = _register(api, project_id, headers, [good, {**GOLD[1], "system_b": "nobody"}])
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_batch"
    assert r.json()["error"]["problems"][0]["row"] == 1
    assert "unknown system 'nobody'" in r.json()["error"]["problems"][0]["message"]
    # nothing of a refused request was stored
    assert api.get(f"/projects/{project_id}/gold", headers=headers).json()["cells"] == []
    # a registered cell's answer cannot change, nor its dimension widen
    assert _register(api, project_id, headers, [good]).status_code == 200
    r = _register(api, project_id, headers, [GOLD[1], {**good, "answer": "tie"}])
    assert r.status_code == 422, r.text
    [problem] = r.json()["error"]["problems"]
    assert problem["row"] == 1 and problem["field"] == "answer"
    assert (
        "('q6', 's0' vs 's1', every dimension) is registered with answer 'a'"
        in (problem["message"])
    )
    r = _register(api, project_id, headers, [{**good, "dimension": "overall"}])
    assert r.status_code == 422 and "every dimension" in r.text
    assert len(api.get(f"/projects/{project_id}/gold", headers=headers).json()["cells"]) == 1


def test_a_judged_cell_cannot_become_gold(api):
    """The running tallies counted its judgments as ordinary ones: refused, naming the cell,
    whichever order the judgment or the gold row names the pair in."""
    project_id, headers = _project(api)
    judged = {"item_id": "q1", "system_a": "s1", "system_b": "s0", "answer": "a"}
    for cell in (judged, {**judged, "dimension": "overall"}):
        r = _register(api, project_id, headers, [GOLD[0], cell])
        assert r.status_code == 422, r.text
        [problem] = r.json()["error"]["problems"]
        assert problem["row"] == 1
        assert "the cell ('q1', 's1' vs 's0'" in problem["message"]
        assert "2 stored judgment(s)" in problem["message"]
    assert api.get(f"/projects/{project_id}/gold", headers=headers).json()["cells"] == []


# ---------------------------------------------------------------- judgments of gold cells


def _reads(server: ThreadServer, project_id: str) -> tuple:
    """What every read that feeds decisions and fits gives."""
    with server.state.store.read() as conn:
        return (
            repo.count_judgments(conn=conn, project_id=project_id),
            repo.count_judgments(conn=conn, project_id=project_id, dimension="overall"),
            repo.judgment_counts_by_dimension(conn=conn, project_id=project_id),
            [r["judgment_id"] for r in repo.fetch_judgments(conn=conn, project_id=project_id)],
            repo.fetch_judgment_columns(conn=conn, project_id=project_id, dimension="overall"),
        )


def test_judgments_of_gold_cells_are_stored_apart_and_idempotently(api, server):
    project_id, headers = _project(api)
    before = _reads(server, project_id)
    assert _register(api, project_id, headers, GOLD).status_code == 200
    url = f"/projects/{project_id}/judgments"
    gold = [
        _judgment(100, "q6", "s1", "s0", "w3", "b"),  # the pair in the other order
        _judgment(101, "q11", "s0", "s1", "w3", "tie"),  # every dimension's gold cell
    ]
    ordinary = _judgment(102, "q2", "s1", "s2", "w3", "a")
    # all or nothing: one bad row and neither the gold nor the ordinary ones are stored
    r = api.post(
        url,
        json={
            "judgments": [*gold, ordinary, {**ordinary, "judgment_id": "x", "item_id": "nowhere"}]
        },
        headers=headers,
    )
    assert r.status_code == 422, r.text
    assert _reads(server, project_id) == before
    r = api.post(url, json={"judgments": [*gold, ordinary]}, headers=headers)
    assert r.status_code == 200, r.text
    # the answer counts gold judgments as it counts the others: nothing tells them apart
    assert r.json()["accepted"] == 3 and r.json()["num_judgments"] == len(ORDINARY) + 3
    after = _reads(server, project_id)
    assert after[0] == before[0] + 1 and after[1] == before[1] + 1
    assert after[3] == [*before[3], "j102"]
    assert [row[1] for row in after[4][0]] == [row[1] for row in before[4][0]] + ["q2"]
    listed = api.get(url, headers=headers).json()["judgments"]
    assert {j["judgment_id"] for j in listed}.isdisjoint({"j100", "j101"})
    with server.state.store.read() as conn:
        stored = repo.fetch_gold_judgments(conn=conn, project_id=project_id)
    assert [j["judgment_id"] for j in stored] == ["j100", "j101"]
    # a judgment id is a duplicate whichever table holds it, and cannot change
    r = api.post(url, json={"judgments": [*gold, ordinary]}, headers=headers)
    assert r.json()["accepted"] == 0 and r.json()["duplicates"] == 3
    r = api.post(url, json={"judgments": [{**gold[0], "winner": "a"}]}, headers=headers)
    assert r.status_code == 422 and "already stored with different winner" in r.text
    # the decisions read the ordinary judgments only
    decisions = api.get(f"/projects/{project_id}/decisions", headers=headers)
    assert decisions.status_code == 200, decisions.text
    assert sum(row["n_judgments"] for row in decisions.json()["rows"]) == len(ORDINARY) + 1


def test_the_hybrid_decisions_do_not_read_verdicts_on_gold_cells(api):
    """Humans never draw a gold cell as an ordinary one, so a judge's verdict there must not
    enter the hybrid estimate (its human judgments are uniform draws over the cells with a
    verdict): the decisions are those of the same project without those verdicts."""

    def verdict(k: int, item: str, a: str, b: str) -> dict:
        return {**_judgment(k, item, a, b, "judge", "a"), "dimension": "overall"}

    ordinary = [
        verdict(300 + 2 * k + i, f"q{k}", "s0", s)
        for k in range(6)
        for i, s in enumerate(("s1", "s2"))
    ]
    on_gold = [
        verdict(400 + k, c["item_id"], c["system_a"], c["system_b"]) for k, c in enumerate(GOLD)
    ]
    answers = []
    for verdicts in (ordinary, ordinary + on_gold):
        project_id, headers = _project(api)
        assert _register(api, project_id, headers, GOLD).status_code == 200
        r = api.post(
            f"/projects/{project_id}/judge-verdicts", json={"verdicts": verdicts}, headers=headers
        )
        assert r.status_code == 200, r.text
        r = api.get(f"/projects/{project_id}/hybrid-decisions", headers=headers)
        assert r.status_code == 200, r.text
        answers.append(r.json()["rows"])
    assert answers[0] == answers[1]


def test_decisions_do_not_count_gold_prompts_as_unused(api):
    """A comparison's gold cells are never served as ordinary ones: not unused prompts."""
    project_id, headers = _project(api)
    url = f"/projects/{project_id}/decisions"

    def unused() -> dict:
        r = api.get(url, headers=headers)
        assert r.status_code == 200, r.text
        return {
            (row["system_a"], row["system_b"]): row["unused_prompts"] for row in r.json()["rows"]
        }

    before = unused()
    assert _register(api, project_id, headers, GOLD).status_code == 200
    # s0-s1: q6, q7 and q11 (every dimension); s0-s2: q8, q9 and q10 (overall)
    assert unused() == {pair: n - 3 for pair, n in before.items()}


# ---------------------------------------------------------------- the next batch


def _lease(server: ThreadServer, project_id: str, key: str) -> repo.LeaseRow:
    with server.state.store.read() as conn:
        lease = repo.get_lease_by_key(conn=conn, project_id=project_id, idempotency_key=key)
    assert lease is not None
    return lease


def test_gold_cells_are_never_recommended(api, server):
    project_id, headers = _project(api)
    _publish(server, project_id)
    assert _register(api, project_id, headers, GOLD).status_code == 200
    r = api.post(f"/projects/{project_id}/next-batch", json={"size": 24}, headers=headers)
    assert r.status_code == 200, r.text
    got = {_cell(c) for c in r.json()["cells"]}
    # 24 cells of s0-s1 and s0-s2, six judged, six gold: twelve left to recommend
    assert len(got) == 12 and not got & GOLD_CELLS
    assert r.json()["gold_unserved"] == 0


def test_next_batch_mixes_gold_cells_in_blind_and_records_them_in_the_lease(api, server):
    project_id, headers = _project(api)
    _publish(server, project_id)
    assert _register(api, project_id, headers, GOLD).status_code == 200
    url = f"/projects/{project_id}/next-batch"
    body = {"size": 10, "annotator_id": "w9", "gold_share": 0.3, "idempotency_key": "g1"}
    r = api.post(url, json=body, headers=headers)
    assert r.status_code == 200, r.text
    first = r.json()
    assert len(first["cells"]) == 10 and first["gold_unserved"] == 0
    lease = _lease(server, project_id, "g1")
    marked = [c for c in lease["cells"] if c.get("gold")]
    assert len(marked) == 3 and {_cell(c) for c in marked} <= GOLD_CELLS
    assert not {_cell(c) for c in lease["cells"] if not c.get("gold")} & GOLD_CELLS
    # blind: the answer is the lease's cells in the same order, and no field tells gold
    fields = set(first["cells"][0])
    assert "gold" not in fields
    assert [{k: c[k] for k in fields} for c in lease["cells"]] == first["cells"]
    reasons = {c["reason"] for c in first["cells"]}
    assert reasons <= {"burn_in", "closest_to_decision", "open"}
    # a gold cell is oriented as the recommender names its pair (s0 first here)
    assert all(c["system_a"] == "s0" for c in marked)
    # a replay gives the same batch
    again = api.post(url, json=body, headers=headers).json()
    assert again["replayed"] and again["cells"] == first["cells"]
    # the same annotator's next batch: the three gold cells it holds are not served again,
    # three remain for a share of five (three reserved, seven ordinary cells asked for)
    body = {"size": 10, "annotator_id": "w9", "gold_share": 0.5, "idempotency_key": "g2"}
    second = api.post(url, json=body, headers=headers).json()
    cells2 = _lease(server, project_id, "g2")["cells"]
    marked2 = [c for c in cells2 if c.get("gold")]
    assert not {_cell(c) for c in marked} & {_cell(c) for c in marked2}
    assert {_cell(c) for c in marked2} <= GOLD_CELLS
    assert second["gold_unserved"] == 5 - len(marked2)
    _assert_gold_rule(cells2, reserve=3, asked=7, left=GOLD_CELLS - {_cell(c) for c in marked})
    # another annotator: the rule again, on whatever cells are left; the gold cells w9 holds
    # are not among them (a gold cell goes to one annotator, as an ordinary one does)
    held = {_cell(c) for c in [*marked, *marked2]}
    body = {"size": 4, "annotator_id": "w8", "gold_share": 0.5, "idempotency_key": "g3"}
    third = api.post(url, json=body, headers=headers).json()
    cells3 = _lease(server, project_id, "g3")["cells"]
    assert not {_cell(c) for c in cells3} & held
    assert third["gold_unserved"] == 2 - sum(bool(c.get("gold")) for c in cells3)
    reserve = min(2, len(GOLD_CELLS - held))
    _assert_gold_rule(cells3, reserve=reserve, asked=4 - reserve, left=GOLD_CELLS - held)


def _assert_gold_rule(cells: list, *, reserve: int, asked: int, left: set) -> None:
    """The lease's gold cells follow docs/gold.md's rule: only in comparisons the batch serves
    ordinary cells of, as many as round-half-up(reserve x served / asked) allows, and every
    candidate taken when fewer remain."""
    ordinary = [c for c in cells if not c.get("gold")]
    gold = [c for c in cells if c.get("gold")]
    served = {(c["dimension"], frozenset((c["system_a"], c["system_b"]))) for c in ordinary}
    assert all((c["dimension"], _cell(c)[1]) in served for c in gold)
    open_ = [g for g in left if g[1] in {pair for _, pair in served}]
    cap = int(reserve * len(ordinary) / asked + 0.5)
    assert len(gold) == min(reserve, cap, len(open_))


def _gold_batch(api: httpx.Client, server: ThreadServer, key: str, **extra) -> list:
    """A fresh project's next batch of ten with gold_share 0.3: its lease's cells."""
    project_id, headers = _project(api)
    _publish(server, project_id)
    assert _register(api, project_id, headers, GOLD).status_code == 200
    body = {"size": 10, "annotator_id": "w9", "gold_share": 0.3, "idempotency_key": key}
    r = api.post(f"/projects/{project_id}/next-batch", json={**body, **extra}, headers=headers)
    assert r.status_code == 200, r.text
    return _lease(server, project_id, key)["cells"]


def test_the_request_does_not_tell_where_the_gold_cells_are(api, server):
    """The seed and the idempotency key are in the request: positions drawn from them (as
    default_rng((seed, sha256(key))) did) would let a client compute the gold cells."""
    import hashlib

    matches = 0
    for k in range(5):
        key = f"secret-{k}"
        cells = _gold_batch(api, server, key, seed=7)
        where = {i for i, c in enumerate(cells) if c.get("gold")}
        assert len(where) == 3
        salt = int(hashlib.sha256(key.encode()).hexdigest()[:15], 16)
        guess = np.random.default_rng((7, salt)).choice(len(cells), size=3, replace=False)
        matches += set(guess.tolist()) == where
    # one guess in C(10, 3) = 120 is right by chance
    assert matches <= 1


def test_a_gold_cell_reads_as_a_cell_of_its_own_comparison(api, server):
    """Each gold cell's comparison, orientation, reason and need are those of an ordinary
    cell of the same batch and comparison, and the batch is shuffled as a whole."""
    firsts = set()
    for k in range(4):
        cells = _gold_batch(api, server, f"like-{k}")
        ordinary = {
            (c["dimension"], c["system_a"], c["system_b"], c["reason"], c["needed"])
            for c in cells
            if not c.get("gold")
        }
        for c in cells:
            if c.get("gold"):
                key = (c["dimension"], c["system_a"], c["system_b"], c["reason"], c["needed"])
                assert key in ordinary
        firsts.add(tuple(c["item_id"] for c in cells if not c.get("gold")))
    assert len(firsts) > 1  # the ordinary cells' order is not the recommender's fixed one


def test_a_judged_gold_cell_is_not_served_to_its_annotator_again(api, server, monkeypatch):
    project_id, headers = _project(api)
    _publish(server, project_id)
    assert _register(api, project_id, headers, GOLD[:2]).status_code == 200
    url = f"/projects/{project_id}/next-batch"
    body = {"size": 2, "annotator_id": "w9", "gold_share": 0.5, "idempotency_key": "h1"}
    body["targets"] = [["s0", "s1"]]  # the gold cells' comparison, to hide them among
    assert api.post(url, json=body, headers=headers).status_code == 200
    [served] = [c for c in _lease(server, project_id, "h1")["cells"] if c.get("gold")]
    lease_id = _lease(server, project_id, "h1")["lease_id"]
    # its judgment names the lease (the lease served the cell) and is stored apart
    judgment = _judgment(
        200, served["item_id"], served["system_a"], served["system_b"], "w9", "a", lease_id=lease_id
    )
    r = api.post(
        f"/projects/{project_id}/judgments", json={"judgments": [judgment]}, headers=headers
    )
    assert r.status_code == 200 and r.json()["accepted"] == 1
    assert r.json()["num_judgments"] == len(ORDINARY) + 1
    # once the lease expired, the other gold cell is served, and then none is left
    later = datetime.now(UTC) + timedelta(hours=2)
    monkeypatch.setattr(nb, "_now", lambda: later)
    body = {"size": 4, "annotator_id": "w9", "gold_share": 0.5, "targets": [["s0", "s1"]]}
    r = api.post(url, json=body, headers=headers).json()
    assert r["gold_unserved"] == 1
    gold_served = {_cell(c) for c in r["cells"]} & {_cell(c) for c in GOLD[:2]}
    assert gold_served == {_cell(c) for c in GOLD[:2]} - {_cell(served)}


def test_a_cell_served_under_a_lease_expired_too_cannot_become_gold(api, server):
    project_id, headers = _project(api)
    _publish(server, project_id)
    body = {"size": 1, "annotator_id": "w9", "idempotency_key": "l1", "lease_seconds": 1}
    assert api.post(f"/projects/{project_id}/next-batch", json=body, headers=headers).is_success
    [held] = _lease(server, project_id, "l1")["cells"]
    cell = {k: held[k] for k in ("item_id", "system_a", "system_b")}
    time.sleep(1.2)  # expired: a late judgment of it is still accepted as an ordinary one
    r = _register(api, project_id, headers, [{**cell, "answer": "a"}])
    assert r.status_code == 422 and "served under a lease" in r.text
    assert api.get(f"/projects/{project_id}/gold", headers=headers).json()["cells"] == []


def test_gold_share_needs_an_annotator_and_defaults_to_none(api, server):
    project_id, headers = _project(api)
    _publish(server, project_id)
    url = f"/projects/{project_id}/next-batch"
    r = api.post(url, json={"size": 4, "gold_share": 0.5}, headers=headers)
    assert r.status_code == 422 and "gold_share needs annotator_id" in r.text
    r = api.post(url, json={"size": 4, "gold_share": 1.5, "annotator_id": "w"}, headers=headers)
    assert r.status_code == 422
    # no gold cells registered: the share cannot be served, and the answer says so
    body = {"size": 4, "annotator_id": "w9", "gold_share": 0.5, "idempotency_key": "n1"}
    r = api.post(url, json=body, headers=headers)
    assert r.status_code == 200 and r.json()["gold_unserved"] == 2 and len(r.json()["cells"]) == 4
    assert not any(c.get("gold") for c in _lease(server, project_id, "n1")["cells"])


# ---------------------------------------------------------------- scores


def test_scores_are_the_rows_evalset_gold_gives(api, server, tmp_path, capsys):
    from services.cli import main

    project_id, headers = _project(api)
    assert _register(api, project_id, headers, GOLD).status_code == 200
    rng = np.random.default_rng(7)
    truth = {_cell(c): (c["system_a"], c["answer"]) for c in GOLD}
    flip = {"a": "b", "b": "a", "tie": "tie"}
    rows = []
    for who, accuracy in (("careful", 0.95), ("careless", 0.0), ("middling", 0.7)):
        for c in GOLD:
            first, answer = truth[_cell(c)]
            said = answer if rng.random() < accuracy else flip[answer]
            swap = rng.random() < 0.5
            a, b = (c["system_b"], c["system_a"]) if swap else (c["system_a"], c["system_b"])
            winner = flip[said] if (a != first) else said
            rows.append(_judgment(300 + len(rows), c["item_id"], a, b, who, winner))
    # a repeat (not scored), an anonymous one (not scored) and an ordinary one
    rows.append({**rows[0], "judgment_id": "j-repeat", "winner": flip[rows[0]["winner"]]})
    rows.append({**rows[1], "judgment_id": "j-anonymous", "annotator_id": ""})
    rows.append(_judgment(399, "q3", "s1", "s2", "careful", "a"))
    for start in range(0, len(rows), 7):  # several batches, as they arrive
        r = api.post(
            f"/projects/{project_id}/judgments",
            json={"judgments": rows[start : start + 7]},
            headers=headers,
        )
        assert r.status_code == 200, r.text
    scores = api.get(f"/projects/{project_id}/gold/scores", headers=headers)
    assert scores.status_code == 200, scores.text
    assert scores.json()["num_gold_judgments"] == len(rows) - 1
    # the same judgments (in arrival order, every one) and gold cells as files, on the CLI
    pl.DataFrame(
        [{**ORDINARY[0], "dimension": "overall"} | r for r in [*ORDINARY, *rows]]
    ).write_csv(tmp_path / "judgments.csv")
    pl.DataFrame([{"dimension": None, **c} for c in GOLD]).write_csv(tmp_path / "gold.csv")
    argv = ["gold", "--data", str(tmp_path / "judgments.csv"), "--gold", str(tmp_path / "gold.csv")]
    assert main([*argv, "--format", "json"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert [r["annotator_id"] for r in want] == ["careful", "careless", "middling"]
    assert any(r["flagged"] for r in want) and not all(r["flagged"] for r in want)
    same_rows(scores.json()["rows"], want)
    # the rule's options, the command line's
    stricter = api.get(
        f"/projects/{project_id}/gold/scores",
        params={"careful": 0.9, "careless": 0.6, "level": 0.01},
        headers=headers,
    ).json()
    assert (
        main(
            [*argv, "--careful", "0.9", "--careless", "0.6", "--level", "0.01", "--format", "json"]
        )
        == 0
    )
    same_rows(stricter["rows"], json.loads(capsys.readouterr().out))
    r = api.get(
        f"/projects/{project_id}/gold/scores",
        params={"careful": 0.5, "careless": 0.6},
        headers=headers,
    )
    assert r.status_code == 422 and "careless < careful" in r.text


def test_no_scores_before_a_gold_judgment(api):
    project_id, headers = _project(api)
    r = api.get(f"/projects/{project_id}/gold/scores", headers=headers)
    assert r.status_code == 200 and r.json()["rows"] == [] and r.json()["num_gold_judgments"] == 0
    assert _register(api, project_id, headers, GOLD).status_code == 200
    r = api.get(
        f"/projects/{project_id}/gold/scores", params={"dimension": "nope"}, headers=headers
    )
    assert r.status_code == 404


def test_the_migration_builds_the_gold_tables_as_declared(database_url):
    """0008 on SQLite and PostgreSQL gives the tables tables.py declares (alembic's
    autogenerate finds nothing to change in them)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import inspect

    from services.store import Store
    from services.store.tables import metadata

    store = Store(database_url)
    try:
        store.migrate()
        with store.read() as conn:
            tables = set(inspect(conn).get_table_names())
            diffs = compare_metadata(MigrationContext.configure(conn), metadata)
    finally:
        store.dispose()
    assert {"gold_cells", "gold_judgments"} <= tables
    assert [d for d in diffs if "gold" in repr(d)] == []
