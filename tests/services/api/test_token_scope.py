"""A write-only token for webhooks and annotation tools: it posts judgments, a lease's results
and Label Studio's webhook, and every read answers 403. Real HTTP against a real store
(SQLite, and PostgreSQL when reachable); the scope is kept by rotation, listed, and set by
``evalset token create --scope write``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from alembic import command
from alembic.config import Config

from services.cli import main
from services.settings import Settings
from services.store import MIGRATIONS, Store
from services.store import repository as repo
from tests.factories import ThreadServer, fresh_pg_database

ADMIN = "admin-" + "5" * 40
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def server(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[ThreadServer]:  # noqa: ANN001
    def serve(url: str) -> ThreadServer:
        return ThreadServer(
            Settings(database_url=url, streaming=False, token_cache_seconds=1.0, admin_token=ADMIN)
        )

    if request.param == "sqlite":
        with serve(f"sqlite:///{tmp_path_factory.mktemp('scope') / 'scope.db'}") as srv:
            yield srv
    else:
        with fresh_pg_database() as url, serve(url) as srv:
            yield srv


@pytest.fixture
def api(server: ThreadServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _project(api: httpx.Client) -> tuple[str, dict]:
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = api.post("/projects", json={"project_id": project_id}, headers=ADMIN_HEADERS)
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    r = api.post(
        f"/projects/{project_id}/systems",
        json={"systems": [{"system_id": "s0"}, {"system_id": "s1"}]},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    r = api.post(
        f"/projects/{project_id}/prompts",
        json={"prompts": [{"prompt_id": "q0", "text": "hi?", "responses": {"s0": "a", "s1": "b"}}]},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    return project_id, headers


def _write_token(api: httpx.Client, project_id: str, headers: dict) -> dict:
    r = api.post(
        f"/projects/{project_id}/tokens",
        json={"label": "webhook", "scope": "write"},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    return r.json()


def _lease(server: ThreadServer, project_id: str) -> str:
    """A lease of one cell (q0, s0 vs s1, s0 shown first): task ``<lease>-0001``."""
    with server.state.store.write() as conn:
        lease = repo.create_lease(
            conn=conn,
            project_id=project_id,
            idempotency_key=uuid.uuid4().hex,
            annotator_id="w1",
            cells=[
                {
                    "item_id": "q0",
                    "system_a": "s0",
                    "system_b": "s1",
                    "dimension": "overall",
                    "shown_first": "a",
                    "snapshot_version": 0,
                }
            ],
            expires_at=datetime.now(UTC) + timedelta(hours=1),
        )
    return lease["lease_id"]


def _annotation(annotation_id: int, choice: str = "First") -> dict:
    result = [{"from_name": "preference", "type": "choices", "value": {"choices": [choice]}}]
    return {"id": annotation_id, "completed_by": 3, "result": result}


def _judgment(k: int) -> dict:
    return {
        "judgment_id": f"j{k}",
        "item_id": "q0",
        "system_a": "s0",
        "system_b": "s1",
        "annotator_id": f"w{k}",
        "winner": "b",
    }


def test_a_write_only_token_posts_judgments_and_results_and_reads_nothing(
    server: ThreadServer, api: httpx.Client
) -> None:
    project_id, full = _project(api)
    made = _write_token(api, project_id, full)
    assert made["scope"] == "write" and made["token"].startswith("evw_")
    write = {"Authorization": f"Bearer {made['token']}"}
    base = f"/projects/{project_id}"
    # what it may do: post judgments, a lease's results and Label Studio's webhook
    r = api.post(f"{base}/judgments", json={"judgments": [_judgment(0)]}, headers=write)
    assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
    lease_id = _lease(server, project_id)
    task = {"id": 1, "data": {"task_id": f"{lease_id}-0001", "item_id": "q0"}}
    export = [{**task, "annotations": [_annotation(7)]}]
    r = api.post(
        f"{base}/leases/{lease_id}/results",
        json={"platform": "labelstudio", "content": json.dumps(export)},
        headers=write,
    )
    assert r.status_code == 200, r.text
    body = {
        "action": "ANNOTATION_CREATED",
        "annotation": _annotation(8, "Second"),
        "task": {"id": 1, "data": {**task["data"], "batch_id": lease_id}},
    }
    r = api.post(f"{base}/labelstudio/webhook", json=body, headers=write)
    assert r.status_code == 200, r.text
    # what it may not: every read, the next batch, and making or listing tokens
    refused = [
        ("GET", base, None),
        ("GET", f"{base}/judgments", None),
        ("GET", f"{base}/decisions", None),
        ("GET", f"{base}/snapshots", None),
        ("GET", f"{base}/systems", None),
        ("GET", f"{base}/tokens", None),
        ("POST", f"{base}/tokens", {"label": "mine"}),
        ("POST", f"{base}/next-batch", {"size": 1}),
        ("GET", f"{base}/leases/{lease_id}/tasks", None),
        ("POST", f"{base}/systems", {"systems": [{"system_id": "s9"}]}),
    ]
    for method, url, payload in refused:
        r = api.request(method, url, json=payload, headers=write)
        assert r.status_code == 403, (method, url, r.status_code, r.text)
        assert "write-only" in r.json()["error"]["message"]
    page = api.get(f"{base}/dashboard", params={"token": made["token"]})
    assert page.status_code == 403
    # the project's token reads what the write-only one stored: 1 + 1 + 1 judgments
    r = api.get(f"{base}/judgments", headers=full)
    assert r.status_code == 200 and len(r.json()["judgments"]) == 3
    # another project's write-only token opens nothing here
    other_id, other_full = _project(api)
    other = {"Authorization": f"Bearer {_write_token(api, other_id, other_full)['token']}"}
    r = api.post(f"{base}/judgments", json={"judgments": [_judgment(9)]}, headers=other)
    assert r.status_code == 403


def test_the_scope_is_listed_kept_by_rotation_and_cannot_be_forged(api: httpx.Client) -> None:
    project_id, full = _project(api)
    made = _write_token(api, project_id, full)
    base = f"/projects/{project_id}"
    listed = {
        t["token_id"]: t["scope"] for t in api.get(f"{base}/tokens", headers=full).json()["tokens"]
    }
    assert listed[made["token_id"]] == "write" and "full" in listed.values()
    r = api.post(f"{base}/tokens/{made['token_id']}/rotate", headers=full)
    assert r.status_code == 201 and r.json()["scope"] == "write", r.text
    rotated = r.json()["token"]
    assert rotated.startswith("evw_")
    write = {"Authorization": f"Bearer {rotated}"}
    assert api.get(f"{base}/judgments", headers=write).status_code == 403
    r = api.post(f"{base}/judgments", json={"judgments": [_judgment(0)]}, headers=write)
    assert r.status_code == 200, r.text
    # the prefix is part of the secret: another prefix is another (unknown) token
    forged = "evs_" + rotated.removeprefix("evw_")
    assert api.get(base, headers={"Authorization": f"Bearer {forged}"}).status_code == 401
    full_token = full["Authorization"].removeprefix("Bearer ")
    narrowed = "evw_" + full_token.removeprefix("evs_")
    r = api.post(
        f"{base}/judgments",
        json={"judgments": [_judgment(1)]},
        headers={"Authorization": f"Bearer {narrowed}"},
    )
    assert r.status_code == 401
    r = api.post(f"{base}/tokens", json={"scope": "admin"}, headers=full)
    assert r.status_code == 422


def test_evalset_token_creates_lists_and_rotates_a_write_only_token(
    database_url: str, capsys: pytest.CaptureFixture
) -> None:
    store = Store(database_url)
    store.migrate()
    with store.write() as conn:
        repo.create_project(conn=conn, project_id="cli", name="cli")
    store.dispose()
    db = ["--project", "cli", "--database-url", database_url, "--format", "json"]
    assert main(["token", "create", "--scope", "write", "--label", "ls", *db]) == 0
    made = json.loads(capsys.readouterr().out)[0]
    assert made["scope"] == "write" and made["token"].startswith("evw_")
    assert main(["token", "list", *db]) == 0
    assert [t["scope"] for t in json.loads(capsys.readouterr().out)] == ["write"]
    assert main(["token", "rotate", "--token-id", made["token_id"], *db]) == 0
    rotated = json.loads(capsys.readouterr().out)[0]
    assert rotated["scope"] == "write" and rotated["token"].startswith("evw_")
    store = Store(database_url)
    try:
        with store.read() as conn:
            assert repo.project_for_token(conn=conn, token=rotated["token"]) == "cli"
            assert repo.project_for_token(conn=conn, token=made["token"]) is None
    finally:
        store.dispose()


def test_tokens_made_before_the_scope_existed_stay_full(database_url: str) -> None:
    store = Store(database_url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    try:
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "0008")
            conn.exec_driver_sql(
                "INSERT INTO projects (project_id, name, description, created_at) "
                "VALUES ('old', 'old', '', CURRENT_TIMESTAMP)"
            )
            conn.exec_driver_sql(
                "INSERT INTO api_tokens (token_hash, project_id, label, created_at) "
                f"VALUES ('{repo.hash_token('evs_old')}', 'old', '', CURRENT_TIMESTAMP)"
            )
        store.migrate()
        with store.read() as conn:
            assert repo.project_for_token(conn=conn, token="evs_old") == "old"
            assert [t["scope"] for t in repo.list_tokens(conn=conn, project_id="old")] == ["full"]
    finally:
        store.dispose()
