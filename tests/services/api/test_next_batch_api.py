"""``POST /projects/{id}/next-batch``: leases, idempotency, annotators, expiry."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
import polars as pl
import pytest

import evalset
from adaptive.estimation.streaming import Snapshot as StreamSnapshot
from services.api.routes import next_batch as nb
from services.settings import Settings
from tests.factories import ThreadServer, fresh_pg_database, when_ready

SYSTEMS = ["s0", "s1", "s2"]
NUM_PROMPTS = 6
#: cells without a judgment yet (the batch serves a fresh prompt per judgment) in the default
#: family, the two compared pairs (s1-s2 is never compared): two pairs x six prompts, minus
#: the six cells the eight judgments of _project fall in
FRESH = NUM_PROMPTS * 2 - 6


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Iterator[httpx.Client]:
    """A live server on SQLite without re-estimation; snapshots are published by the tests."""
    db = tmp_path_factory.mktemp("nb") / "nb.db"
    settings = Settings(database_url=f"sqlite:///{db}", streaming=False)
    with (
        ThreadServer(settings) as server,
        httpx.Client(base_url=server.url, timeout=60) as c,
    ):
        c.server = server  # type: ignore[attr-defined]
        yield c


def _project(client: httpx.Client) -> tuple[str, dict]:
    project_id = f"p{time.monotonic_ns() % 10**9}"
    r = client.post("/projects", json={"project_id": project_id})
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    client.post(
        f"/projects/{project_id}/systems",
        json={"systems": [{"system_id": s} for s in SYSTEMS]},
        headers=headers,
    )
    client.post(
        f"/projects/{project_id}/prompts",
        json={"prompts": [{"prompt_id": f"q{i}", "text": f"t{i}"} for i in range(NUM_PROMPTS)]},
        headers=headers,
    )
    rows = [
        {
            "judgment_id": f"j{k}",
            "item_id": f"q{k % NUM_PROMPTS}",
            "system_a": "s0",
            "system_b": "s1" if k % 2 else "s2",
            "annotator_id": "w1" if k < 4 else "w2",
            "winner": "b",
            "shown_first": "a",
        }
        for k in range(8)
    ]
    r = client.post(f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers)
    assert r.status_code < 300, r.text
    # a posterior snapshot as the background worker would publish it (no fit in a test)
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
        systems=tuple(SYSTEMS),
        items=tuple(f"q{i}" for i in range(NUM_PROMPTS)),
        pair_a=np.array([0, 0], np.int32),
        pair_b=np.array([1, 2], np.int32),
        pair_judgments=np.array([4, 4]),
        pair_prompts=np.array([4, 4]),
        skill=rng.normal([0.0, 0.1, -0.1], 0.5, size=(draws, 3)).astype(np.float32),
        # item parameters thinned more than the skills, as the service stores them
        alpha=np.exp(rng.normal(0, 0.2, size=(draws // 4, NUM_PROMPTS))).astype(np.float32),
        b=np.sort(rng.normal(0, 1, size=(draws // 4, NUM_PROMPTS, 2)), axis=-1).astype(np.float32),
    )
    client.server.state.publish((project_id, "overall"), snap)
    return project_id, headers


def _cells(response) -> set[tuple]:
    return {(c["item_id"], c["system_a"], c["system_b"], c["dimension"]) for c in response["cells"]}


def test_batch_fields_and_idempotency(client):
    project_id, headers = _project(client)
    url = f"/projects/{project_id}/next-batch"
    r = client.post(url, json={"size": 5, "idempotency_key": "k1"}, headers=headers)
    assert r.status_code == 200, r.text
    first = r.json()
    assert len(first["cells"]) == 5 and not first["replayed"]
    for cell in first["cells"]:
        assert cell["shown_first"] in ("a", "b")
        assert {cell["system_a"], cell["system_b"]} <= set(SYSTEMS)
        assert cell["reason"] in ("burn_in", "closest_to_decision", "open")
    assert datetime.fromisoformat(first["expires_at"]) > datetime.now(UTC)
    again = client.post(url, json={"size": 5, "idempotency_key": "k1"}, headers=headers).json()
    assert again["replayed"] and again["lease_id"] == first["lease_id"]
    assert again["cells"] == first["cells"]
    # the key may also come as a header
    h = client.post(url, json={"size": 2}, headers={**headers, "Idempotency-Key": "k2"}).json()
    h2 = client.post(url, json={"size": 2}, headers={**headers, "Idempotency-Key": "k2"}).json()
    assert h2["lease_id"] == h["lease_id"] and h2["cells"] == h["cells"]


def test_leased_cells_go_to_nobody_else_until_the_lease_expires(client, monkeypatch):
    project_id, headers = _project(client)
    url = f"/projects/{project_id}/next-batch"
    total = FRESH
    a = client.post(url, json={"size": 6, "lease_seconds": 60}, headers=headers).json()
    b = client.post(url, json={"size": total, "lease_seconds": 60}, headers=headers).json()
    assert not (_cells(a) & _cells(b)), "a leased cell was handed out twice"
    assert len(a["cells"]) + len(b["cells"]) <= total
    # two minutes later both leases have expired: every cell is available again
    later = datetime.now(UTC) + timedelta(minutes=2)
    monkeypatch.setattr(nb, "_now", lambda: later)
    c = client.post(url, json={"size": total}, headers=headers).json()
    assert _cells(a) <= _cells(c)
    assert len(c["cells"]) == total


def test_annotator_never_gets_a_cell_they_judged(client):
    project_id, headers = _project(client)
    url = f"/projects/{project_id}/next-batch"
    judged = {(f"q{k % NUM_PROMPTS}", "s0", "s1" if k % 2 else "s2") for k in range(4)}
    r = client.post(url, json={"size": 18, "annotator_id": "w1"}, headers=headers).json()
    got = {(c["item_id"], *sorted((c["system_a"], c["system_b"]))) for c in r["cells"]}
    assert not {(i, *sorted((a, b))) for i, a, b in judged} & got
    # fresh cells only: none that anybody judged
    assert len(r["cells"]) == FRESH


def test_a_catalogue_write_between_two_batches_is_seen(client):
    """Nothing judged and no new snapshot between the two batches: only the catalogue moved
    (the route keeps what it prepared from the catalogue until a write raises its version)."""
    project_id, headers = _project(client)
    url = f"/projects/{project_id}/next-batch"
    before = client.post(url, json={"size": FRESH}, headers=headers).json()
    assert any({c["system_a"], c["system_b"]} == {"s0", "s1"} for c in before["cells"])
    # s0 and s1 give the same response to every prompt: their cells cannot be annotated
    prompts = [
        {
            "prompt_id": f"q{i}",
            "text": f"t{i}",
            "responses": {"s0": "same", "s1": "same", "s2": "other"},
        }
        for i in range(NUM_PROMPTS)
    ]
    r = client.post(f"/projects/{project_id}/prompts", json={"prompts": prompts}, headers=headers)
    assert r.status_code < 300, r.text
    later = datetime.now(UTC) + timedelta(hours=2)  # the first batch's lease has expired
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nb, "_now", lambda: later)
        after = client.post(url, json={"size": FRESH}, headers=headers).json()
    assert after["cells"], after
    assert not any({c["system_a"], c["system_b"]} == {"s0", "s1"} for c in after["cells"])


def test_errors_are_reported(client):
    project_id, headers = _project(client)
    url = f"/projects/{project_id}/next-batch"
    assert client.post(url, json={"size": 0}, headers=headers).status_code == 422
    # a seed beyond what the random generators take is a client error, not a crash
    r = client.post(url, json={"size": 3, "seed": 2**70}, headers=headers)
    assert r.status_code == 422, r.text
    r = client.post(url, json={"size": 3, "dimensions": ["nope"]}, headers=headers)
    assert r.status_code == 404
    r = client.post(url, json={"size": 3, "targets": [["s0", "zz"]]}, headers=headers)
    assert r.status_code == 404
    assert client.post(url, json={"size": 3}).status_code == 401


def test_the_default_model_batch_serves_the_command_lines_family_without_routing(client):
    """model=default is the command line's batch: another family or a routing is a 422
    that names the field, before any fit; a project without judgments is a 409."""
    project_id, headers = _project(client)
    url = f"/projects/{project_id}/next-batch"
    for extra in ({"family": "all-pairs"}, {"pairs": [["s0", "s1"]]}, {"route_by": "gpt-4"}):
        r = client.post(url, json={"size": 3, "model": "default", **extra}, headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["problems"][0]["field"] == "model", r.text
    empty = f"e-{uuid.uuid4().hex[:8]}"
    token = client.post("/projects", json={"project_id": empty}).json()["token"]
    r = client.post(
        f"/projects/{empty}/next-batch",
        json={"size": 3, "model": "default"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "no_snapshot", r.text


def test_targets_restrict_the_batch(client):
    project_id, headers = _project(client)
    url = f"/projects/{project_id}/next-batch"
    # a target outside the declared family is refused: s1-s2 was never compared
    r = client.post(url, json={"size": 4, "targets": [["s1", "s2"]]}, headers=headers)
    assert r.status_code == 422 and "family" in r.json()["error"]["message"]
    # named targets get the whole batch, each cell marked as targeted
    body = {"size": 4, "targets": [["s1", "s2"]], "family": "all-pairs"}
    r = client.post(url, json=body, headers=headers).json()
    pairs = [tuple(sorted((c["system_a"], c["system_b"]))) for c in r["cells"]]
    assert pairs == [("s1", "s2")] * 4
    assert {c["reason"] for c in r["cells"]} == {"targeted"}
    r = client.post(url, json={"size": 4, "tier": ["s0", "s2"]}, headers=headers).json()
    pairs = [tuple(sorted((c["system_a"], c["system_b"]))) for c in r["cells"]]
    # s0-s2 has three fresh prompts left
    assert pairs == [("s0", "s2")] * 3
    r = client.post(url, json={"size": 3, "tier": ["s0", "zz"]}, headers=headers)
    assert r.status_code == 404


@pytest.fixture(scope="module")
def pg_client() -> Iterator[httpx.Client]:
    with fresh_pg_database() as url:
        settings = Settings(database_url=url, streaming=False)
        with (
            ThreadServer(settings) as server,
            httpx.Client(base_url=server.url, timeout=60) as c,
        ):
            c.server = server  # type: ignore[attr-defined]
            yield c


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_concurrent_requests_never_lease_one_cell_twice(store, request):
    """Requests that arrive together are served one after the other: each sees the others' leases."""
    from concurrent.futures import ThreadPoolExecutor

    client = request.getfixturevalue("client" if store == "sqlite" else "pg_client")
    project_id, headers = _project(client)
    url = f"/projects/{project_id}/next-batch"
    total = FRESH

    def ask(i: int) -> dict:
        r = client.post(url, json={"size": 3, "lease_seconds": 60, "seed": i}, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()

    with ThreadPoolExecutor(4) as pool:
        batches = list(pool.map(ask, range(4)))
    cells = [cell for batch in batches for cell in _cells(batch)]
    assert len(cells) == len(set(cells)) == total, "a cell was leased to two requests at once"


def test_the_default_model_batch_is_the_command_lines_on_two_dimensions_with_display_order(
    client,
):
    """model=default on judgments with a recorded display order, two dimensions and an
    annotator to spare: the batch evalset.recommend gives for the same judgments."""
    project_id = f"d{time.monotonic_ns() % 10**9}"
    dims = [{"dimension_id": d} for d in ("overall", "clarity")]
    r = client.post("/projects", json={"project_id": project_id, "dimensions": dims})
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    rng = np.random.default_rng(5)
    systems = ["s0", "s1", "s2", "s3"]
    body = {"systems": [{"system_id": x} for x in systems]}
    assert client.post(f"/projects/{project_id}/systems", json=body, headers=headers).is_success
    body = {"prompts": [{"prompt_id": f"q{i}", "text": f"t{i}"} for i in range(8)]}
    assert client.post(f"/projects/{project_id}/prompts", json=body, headers=headers).is_success
    rows = []
    for k in range(160):
        a, b = rng.choice(4, size=2, replace=False)
        rows.append(
            {
                "judgment_id": f"j{k}",
                "item_id": f"q{rng.integers(8)}",
                "system_a": systems[a],
                "system_b": systems[b],
                "annotator_id": f"w{rng.integers(4)}",
                "winner": ["a", "b", "tie"][
                    rng.choice(3, p=[0.3 + 0.1 * (a < b), 0.5, 0.2 - 0.1 * (a < b)])
                ],
                "dimension": ["overall", "clarity"][k % 2],
                "shown_first": ["a", "b", None][rng.integers(3)],
            }
        )
    r = client.post(f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers)
    assert r.status_code == 200, r.text
    frame = pl.DataFrame(rows).drop("judgment_id")
    want = evalset.recommend(frame, size=10, seed=2, unit="judgment", annotator="w1").to_dicts()
    body = {"size": 10, "seed": 2, "unit": "judgment", "annotator_id": "w1", "model": "default"}
    url = f"/projects/{project_id}/next-batch"
    r = when_ready(lambda: client.post(url, json=body, headers=headers), "recommendation_pending")
    assert r.status_code == 200, r.text
    columns = ("item_id", "dimension", "system_a", "system_b", "shown_first", "reason", "needed")
    got = [{k: c[k] for k in columns} for c in r.json()["cells"]]
    assert len(want) == 10 and got == [{k: w[k] for k in columns} for w in want]


def test_a_body_without_a_question_has_the_fingerprint_it_had_before_questions():
    """An idempotency key stored before ``question`` existed still names the same request;
    a question is part of the request it binds."""
    from pydantic import ValidationError

    from services.api.next_batch_schemas import NextBatchCreate
    from services.api.routes.next_batch import _request_content, _request_hash

    plain = NextBatchCreate(size=5, seed=2)
    assert "question" not in _request_content(plain)
    asked = NextBatchCreate(size=5, seed=2, question="top-1")
    assert _request_content(asked)["question"] == "top-1"
    assert _request_hash(asked) != _request_hash(plain)
    with pytest.raises(ValidationError, match="a question chooses the comparisons"):
        NextBatchCreate(size=5, question="ranking", targets=[("a", "b")])
