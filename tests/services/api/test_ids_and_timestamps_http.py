"""POST /judgments and the store follow the rule files follow: an ISO 8601 timestamp, ids
without bidirectional controls or zero-width characters, in NFC; rows stored before the
rule stay readable. Real HTTP against a real store (SQLite, and PostgreSQL when reachable)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from services.settings import Settings
from services.store import repository as repo
from services.store import tables as t
from tests.factories import ThreadServer, fresh_pg_database

ADMIN = "admin-" + "5" * 40


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def server(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[ThreadServer]:  # noqa: ANN001
    def serve(url: str) -> ThreadServer:
        return ThreadServer(Settings(database_url=url, streaming=False, admin_token=ADMIN))

    if request.param == "sqlite":
        with serve(f"sqlite:///{tmp_path_factory.mktemp('ids') / 'ids.db'}") as s:
            yield s
    else:
        with fresh_pg_database() as url, serve(url) as s:
            yield s


@pytest.fixture
def project(server: ThreadServer) -> Iterator[tuple[httpx.Client, str, dict]]:
    with httpx.Client(base_url=server.url, timeout=30) as api:
        project_id = f"p-{uuid.uuid4().hex[:8]}"
        r = api.post(
            "/projects",
            json={"project_id": project_id},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        headers = {"Authorization": f"Bearer {r.json()['token']}"}
        systems = {"systems": [{"system_id": "s0"}, {"system_id": "s1"}]}
        assert api.post(f"/projects/{project_id}/systems", json=systems, headers=headers).is_success
        prompts = {"prompts": [{"prompt_id": "q0"}]}
        assert api.post(f"/projects/{project_id}/prompts", json=prompts, headers=headers).is_success
        yield api, project_id, headers


def _judgment(**fields: str) -> dict:
    return {"judgment_id": "j0", "item_id": "q0", "system_a": "s0", "system_b": "s1",
            "annotator_id": "w", "winner": "a", **fields}  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"timestamp": "not a time"}, "timestamp", "ISO 8601"),
        ({"timestamp": "2024-13-01T00:00:00Z"}, "timestamp", "ISO 8601"),
        ({"annotator_id": "bob\u202e"}, "annotator_id", "bidirectional control (U+202E)"),
        ({"annotator_id": "b\u200dob"}, "annotator_id", "zero-width character (U+200D)"),
        ({"judgment_id": "Jose\u0301"}, "judgment_id", "not in Unicode NFC form"),
    ],
)
def test_a_bad_timestamp_or_spoofing_id_is_refused_with_its_row(project, fields, field, reason):
    api, project_id, headers = project
    rows = [_judgment(judgment_id="ok", timestamp="2024-05-03T14:03:00Z"), _judgment(**fields)]
    r = api.post(f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers)
    assert r.status_code == 422, r.text
    problems = r.json()["error"]["problems"]
    assert any(p["row"] == 1 and field in p["field"] and reason in p["message"] for p in problems)
    # the batch is refused whole
    got = api.get(f"/projects/{project_id}/judgments", headers=headers).json()["judgments"]
    assert got == []


def test_the_store_refuses_what_the_api_refuses(server: ThreadServer, project):
    """The path that skips the API (evalset import) gets the same answer."""
    _, project_id, _ = project
    with pytest.raises(repo.StoreError) as info, server.state.store.write() as conn:
        repo.add_judgments(
            conn=conn,
            project_id=project_id,
            judgments=[_judgment(timestamp="yesterday", dimension="overall")],
        )
    (problem,) = info.value.problems
    assert problem["field"] == "timestamp" and "ISO 8601" in problem["message"]


def test_rows_stored_before_the_rule_stay_readable(server: ThreadServer, project):
    api, project_id, headers = project
    r = api.post(
        f"/projects/{project_id}/judgments", json={"judgments": [_judgment()]}, headers=headers
    )
    assert r.status_code == 200, r.text
    with server.state.store.write() as conn:  # as an older version stored them
        conn.execute(
            sa.update(t.judgments)
            .where(t.judgments.c.project_id == project_id)
            .values(timestamp="not a time", annotator_id="w\u202e")
        )
    r = api.get(f"/projects/{project_id}/judgments", headers=headers)
    assert r.status_code == 200, r.text
    (row,) = r.json()["judgments"]
    assert (row["timestamp"], row["annotator_id"]) == ("not a time", "w\u202e")
