"""``POST /judgments`` honours an ``Idempotency-Key`` header (issue 40, item 7): the same key
and batch get the first answer again, nothing stored twice; the key with another batch is a
422. Real HTTP, both stores."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from services.settings import Settings
from tests.factories import ThreadServer, fresh_pg_database, judgments, new_project


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(request, tmp_path_factory) -> Iterator[httpx.Client]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('idem') / 'i.db'}"
        with ThreadServer(Settings(database_url=url, streaming=False)) as s:
            with httpx.Client(base_url=s.url, timeout=60) as c:
                yield c
    else:
        with (
            fresh_pg_database() as url,
            ThreadServer(Settings(database_url=url, streaming=False)) as s,
        ):
            with httpx.Client(base_url=s.url, timeout=60) as c:
                yield c


def _count(api: httpx.Client, project_id: str, headers: dict) -> int:
    return api.get(f"/projects/{project_id}", headers=headers).json()["num_judgments"]


def test_the_same_key_and_batch_answer_the_first_answer(api):
    project_id, headers = new_project(api)
    url = f"/projects/{project_id}/judgments"
    body = {"judgments": judgments(5)}
    keyed = {**headers, "Idempotency-Key": "batch-1"}
    first = api.post(url, json=body, headers=keyed)
    assert first.status_code == 200, first.text
    assert first.json()["accepted"] == 5 and "Idempotent-Replayed" not in first.headers
    # judgments stored in between do not change the replayed answer
    api.post(url, json={"judgments": judgments(3, start=5)}, headers=headers)
    again = api.post(url, json=body, headers=keyed)
    assert again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert _count(api, project_id, headers) == 8


def test_the_same_key_with_another_batch_is_refused(api):
    project_id, headers = new_project(api)
    url = f"/projects/{project_id}/judgments"
    keyed = {**headers, "Idempotency-Key": "batch-1"}
    assert api.post(url, json={"judgments": judgments(5)}, headers=keyed).status_code == 200
    other = api.post(url, json={"judgments": judgments(4, start=5)}, headers=keyed)
    assert other.status_code == 422, other.text
    error = other.json()["error"]
    assert error["code"] == "idempotency_key_reused" and "another batch" in error["message"]
    assert _count(api, project_id, headers) == 5
    # the key is per project, and a new key stores the new batch
    fresh = {**headers, "Idempotency-Key": "batch-2"}
    assert (
        api.post(url, json={"judgments": judgments(4, start=5)}, headers=fresh).json()["accepted"]
        == 4
    )
    assert _count(api, project_id, headers) == 9


def test_concurrent_retries_and_reuses_of_one_key(api):
    """Racing requests with one key: one batch stored, the same batch answered alike, the
    other batch refused."""
    project_id, headers = new_project(api)
    url = f"/projects/{project_id}/judgments"
    keyed = {**headers, "Idempotency-Key": "race"}
    same = {"judgments": judgments(6)}
    other = {"judgments": judgments(6, start=100)}
    bodies = [same, same, other, same, other, same]
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda b: api.post(url, json=b, headers=keyed), bodies))
    codes = {(b is same, r.status_code) for b, r in zip(bodies, answers)}
    stored = _count(api, project_id, headers)
    assert stored == 6
    winner_is_same = (True, 200) in codes
    assert codes == ({(True, 200), (False, 422)} if winner_is_same else {(False, 200), (True, 422)})
    ok = [r.json() for r in answers if r.status_code == 200]
    assert all(a == ok[0] for a in ok) and ok[0]["accepted"] == 6


def test_a_bad_key_is_refused(api):
    project_id, headers = new_project(api)
    r = api.post(
        f"/projects/{project_id}/judgments",
        json={"judgments": judgments(1)},
        headers={**headers, "Idempotency-Key": "bad key\x7f"},
    )
    assert r.status_code == 422 and _count(api, project_id, headers) == 0


def test_a_batch_keyed_before_screens_and_leases_is_replayed_unchanged(tmp_path):
    """Judgments gained ``screen_id`` and ``lease_id`` (0007): a batch stored with a key
    before them, sent again unchanged, is the same request (was: 422 key reused)."""
    import hashlib
    import json

    from services.store import repository as repo

    url = f"sqlite:///{tmp_path / 'old.db'}"
    with ThreadServer(Settings(database_url=url, streaming=False)) as server:
        with httpx.Client(base_url=server.url, timeout=60) as api:
            project_id, headers = new_project(api)
            rows = judgments(3)
            old_fields = ("judgment_id", "item_id", "system_a", "system_b", "annotator_id",
                          "winner", "dimension", "shown_first", "timestamp")  # fmt: skip
            before = {"judgments": [{k: r.get(k) for k in old_fields} for r in rows]}
            for r in before["judgments"]:
                r["annotator_id"] = r["annotator_id"] or ""
                r["dimension"] = r["dimension"] or "overall"
            answer = {"accepted": 3, "duplicates": 0, "num_judgments": 3, "snapshots": []}
            with server.state.store.write() as conn:
                repo.save_batch_key(
                    conn=conn,
                    project_id=project_id,
                    idempotency_key="old-key",
                    request_hash=hashlib.sha256(
                        json.dumps(before, sort_keys=True).encode()
                    ).hexdigest(),
                    response=answer,
                )
            keyed = {**headers, "Idempotency-Key": "old-key"}
            again = api.post(
                f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=keyed
            )
            assert again.status_code == 200, again.text
            assert again.headers["Idempotent-Replayed"] == "true"
