"""Issue 40: what an adversarial run found at the HTTP edge. A crowd import that named a
file on the server, 500s from a malformed Label Studio export, lax winners and
next-batch fields, JSON errors without a position. Every test goes through real HTTP
against a server with a real store (SQLite, and PostgreSQL when reachable) and failed
before the change.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from services.settings import Settings
from services.store import repository as repo
from tests.factories import ThreadServer, fresh_pg_database

ADMIN = "admin-" + "7" * 40
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
        with serve(f"sqlite:///{tmp_path_factory.mktemp('input') / 'input.db'}") as srv:
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


def _export(lease_id: str, choice: str = "First") -> list[dict]:
    return [
        {
            "id": 1,
            "data": {"task_id": f"{lease_id}-0001", "item_id": "q0"},
            "annotations": [
                {
                    "id": 7,
                    "completed_by": 3,
                    "result": [
                        {
                            "from_name": "preference",
                            "type": "choices",
                            "value": {"choices": [choice]},
                        }
                    ],
                }
            ],
        }
    ]


def _count(api: httpx.Client, project_id: str, headers: dict) -> int:
    r = api.get(f"/projects/{project_id}/judgments", headers=headers)
    assert r.status_code == 200, r.text
    return len(r.json()["judgments"])


# ---------------------------------------------------------------- item 1: no server paths


def test_a_crowd_import_never_opens_a_file_the_request_names(
    server: ThreadServer, api: httpx.Client, tmp_path: Path
) -> None:
    """Was: ``content`` ``"\\"/path\\""`` made the Label Studio reader open that path on the
    server: a JSON list anywhere on its disk was imported (200), ``/etc/passwd`` answered
    "not JSON", a missing file "file not found"."""
    project_id, headers = _project(api)
    lease_id = _lease(server, project_id)
    on_disk = tmp_path / "export.json"
    on_disk.write_text(json.dumps(_export(lease_id)))
    url = f"/projects/{project_id}/leases/{lease_id}/results"
    answers = set()
    for path in (str(on_disk), "/etc/passwd", "/nonexistent/file.json", server.state.store.url):
        r = api.post(
            url, json={"platform": "labelstudio", "content": json.dumps(path)}, headers=headers
        )
        assert r.status_code == 422, (path, r.text)
        error = r.json()["error"]
        assert error["code"] == "validation_error"
        assert (
            "a list of task objects" in error["message"] and "got a JSON string" in error["message"]
        )
        answers.add(r.text)
    # the same answer whatever the path: nothing says whether a file exists
    assert len(answers) == 1, answers
    assert _count(api, project_id, headers) == 0
    # the export itself, as text or as the array, is imported
    r = api.post(
        url,
        json={"platform": "labelstudio", "content": on_disk.read_text()},
        headers=headers,
    )
    assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
    r = api.post(
        url, json={"platform": "labelstudio", "content": _export(lease_id)}, headers=headers
    )
    assert r.status_code == 200 and r.json()["duplicates"] == 1, r.text


def test_the_service_cannot_reach_the_path_reader() -> None:
    """The reader that opens paths (``read_results``) is the command line's; the route
    calls ``read_parsed_results``, which refuses a string."""
    import polars as pl

    from adaptive.core.data import DataError
    from services.api.routes import crowd
    from services.crowd import read_parsed_results

    assert not hasattr(crowd, "read_results")
    tasks = pl.DataFrame(schema={c: pl.Utf8 for c in ("task_id", "batch_id")})
    for platform in ("labelstudio", "mturk", "survey"):
        with pytest.raises(DataError):
            read_parsed_results("/etc/passwd", tasks, platform)


def test_the_schema_declares_what_content_holds(api: httpx.Client) -> None:
    schema = api.get("/openapi.json").json()
    body = schema["components"]["schemas"]["CrowdResultsCreate"]["properties"]["content"]
    kinds = json.dumps(body)
    assert '"type": "string"' in kinds and "LabelStudioTask" in kinds, kinds


# ---------------------------------------------------------------- item 2: no 500s


@pytest.mark.parametrize(
    ("content", "row", "field"),
    [
        ("[1]", 0, None),
        ('[{"data": 5, "annotations": []}]', 0, "data"),
        ('[{"data": {}, "annotations": [5]}]', 0, "annotations.0"),
        ('[{"data": {}, "annotations": [{"result": [7]}]}]', 0, "annotations.0.result.0"),
        (
            '[{"data": {}, "annotations": [{"result": [{"value": 1}]}]}]',
            0,
            "annotations.0.result.0.value",
        ),
        ('[{"data": {"task_id": 5}}]', 0, "data.task_id"),
        ('[{"data": {"task_id": "t\\u0000"}}]', 0, "data.task_id"),
        ('[{"data": {}}, {"annotations": {"x": 1}}]', 1, "annotations"),
    ],
)
def test_a_malformed_label_studio_export_is_422_naming_task_and_field(
    server: ThreadServer, api: httpx.Client, content: str, row: int, field: str | None
) -> None:
    """Was: 500 ``unexpected error: AttributeError`` for a task or annotation that is not
    an object."""
    project_id, headers = _project(api)
    lease_id = _lease(server, project_id)
    url = f"/projects/{project_id}/leases/{lease_id}/results"
    for body in (
        {"platform": "labelstudio", "content": content},
        {"platform": "labelstudio", "content": json.loads(content)},  # the array itself
    ):
        r = api.post(url, json=body, headers=headers)
        assert r.status_code == 422, (body, r.text)
        error = r.json()["error"]
        assert error["code"] == "validation_error", error
        problems = [(p["row"], p["field"]) for p in error["problems"]]
        assert any(p[0] == row for p in problems), problems
        assert (row, field) in problems, problems
    assert _count(api, project_id, headers) == 0


def test_a_good_task_next_to_a_bad_one_is_not_stored(
    server: ThreadServer, api: httpx.Client
) -> None:
    project_id, headers = _project(api)
    lease_id = _lease(server, project_id)
    content = [*_export(lease_id), 5]
    r = api.post(
        f"/projects/{project_id}/leases/{lease_id}/results",
        json={"platform": "labelstudio", "content": json.dumps(content)},
        headers=headers,
    )
    assert r.status_code == 422 and r.json()["error"]["problems"][0]["row"] == 1, r.text
    assert _count(api, project_id, headers) == 0


# ---------------------------------------------------------------- item 7: strict input


@pytest.mark.parametrize("winner", ["A ", "B", " b", "TIE", "Tie", "a\n"])
def test_a_winner_outside_the_enum_is_refused_naming_row_and_values(
    api: httpx.Client, winner: str
) -> None:
    """Was: accepted, stripped and lowercased, though the schema's enum is a, b, tie."""
    project_id, headers = _project(api)
    rows = [
        {"judgment_id": "j0", "item_id": "q0", "system_a": "s0", "system_b": "s1", "winner": "a"},
        {
            "judgment_id": "j1",
            "item_id": "q0",
            "system_a": "s0",
            "system_b": "s1",
            "winner": winner,
        },
    ]
    r = api.post(f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers)
    assert r.status_code == 422, r.text
    [problem] = r.json()["error"]["problems"]
    assert (problem["row"], problem["field"]) == (1, "winner"), problem
    assert all(f"'{w}'" in problem["message"] for w in ("a", "b", "tie")), problem
    assert _count(api, project_id, headers) == 0


def test_shown_first_is_strict_too(api: httpx.Client) -> None:
    project_id, headers = _project(api)
    row = {
        "judgment_id": "j0",
        "item_id": "q0",
        "system_a": "s0",
        "system_b": "s1",
        "winner": "a",
        "shown_first": "A",
    }
    r = api.post(f"/projects/{project_id}/judgments", json={"judgments": [row]}, headers=headers)
    assert r.status_code == 422 and r.json()["error"]["problems"][0]["field"] == "shown_first"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("size", "5"),
        ("size", 5.5),
        ("size", True),
        ("adjacent", 0),
        ("seed", False),
        ("seed", "1"),
        ("burn_in", "2"),
    ],
)
def test_next_batch_numbers_are_numbers(api: httpx.Client, field: str, value: object) -> None:
    """Was: ``size: "5"`` and ``seed: false`` were accepted (coerced to 5 and 0)."""
    project_id, headers = _project(api)
    body = {"size": 2, field: value}
    r = api.post(f"/projects/{project_id}/next-batch", json=body, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["problems"][0]["field"] == field


def test_a_whole_float_is_a_json_integer(api: httpx.Client) -> None:
    """JSON Schema's integer admits 5.0: the schema said so while the service refused it."""
    project_id, headers = _project(api)
    r = api.post(f"/projects/{project_id}/next-batch", json={"size": 2.0}, headers=headers)
    assert r.status_code != 422, r.text


def test_revoking_again_or_after_a_rotation_answers_the_revocation(api: httpx.Client) -> None:
    """Was: DELETE of a rotated token was a 404, as if the project never had it."""
    project_id, headers = _project(api)
    path = f"/projects/{project_id}/tokens"
    made = api.post(path, json={"label": "tool"}, headers=headers).json()
    old = {"Authorization": f"Bearer {made['token']}"}
    assert api.get(f"/projects/{project_id}", headers=old).status_code == 200
    rotated = api.post(f"{path}/{made['token_id']}/rotate", headers=headers)
    assert rotated.status_code == 201, rotated.text
    again = api.delete(f"{path}/{made['token_id']}", headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["revoked"]["label"] == "tool"
    assert again.json()["revoked_before"] is not None
    # a revoked token stays refused, is not listed and cannot be rotated
    time.sleep(1.2)  # token_cache_seconds
    assert api.get(f"/projects/{project_id}", headers=old).status_code == 401
    listed = {t["token_id"] for t in api.get(path, headers=headers).json()["tokens"]}
    assert made["token_id"] not in listed and rotated.json()["token_id"] in listed
    refused = api.post(f"{path}/{made['token_id']}/rotate", headers=headers)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "token_revoked"
    fresh = api.delete(f"{path}/{rotated.json()['token_id']}", headers=headers).json()
    assert fresh["revoked_before"] is None
    assert api.delete(f"{path}/{'0' * 16}", headers=headers).status_code == 404


def test_a_405_lists_every_method_of_the_path(api: httpx.Client) -> None:
    """Was: ``Allow: POST`` on a path that also serves GET (Starlette names one route's)."""
    project_id, headers = _project(api)
    r = api.request("OPTIONS", f"/projects/{project_id}/systems", headers=headers)
    assert r.status_code == 405
    assert {"GET", "POST"} <= {m.strip() for m in r.headers["allow"].split(",")}


def test_the_schema_states_what_the_validators_refuse(api: httpx.Client) -> None:
    """What schemathesis' positive-data check found: the schema admitted control
    characters in ids, an optional token on /health looked required, and the HTTP
    server's 400 for an oversized head was undeclared."""
    schema = api.get("/openapi.json").json()
    systems = schema["components"]["schemas"]["SystemCreate"]["properties"]["system_id"]
    # no control characters, bidirectional controls or zero-width characters
    assert systems["pattern"] == (
        r"^[^\u0000-\u001f\u007f\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]*$"
    )
    responses = schema["components"]["schemas"]["PromptCreate"]["properties"]["responses"]
    assert "patternProperties" not in responses and "pattern" in responses["propertyNames"]
    assert schema["paths"]["/health"]["get"]["security"] == [{}, {"HTTPBearer": []}]
    for operations in schema["paths"].values():
        for operation in operations.values():
            assert "text/plain" in operation["responses"]["400"]["content"]
    rotate = schema["paths"]["/projects/{project_id}/tokens/{token_id}/rotate"]["post"]
    assert "409" in rotate["responses"]
    # this server has an admin token: creating a project is not open
    assert "401" in schema["paths"]["/projects"]["post"]["responses"]


@pytest.mark.parametrize(
    ("body", "line", "column"),
    [
        (b'{"judgments": [', 1, 16),
        (b'{\n  "judgments": [\n    {"judgment_id": "j0",,}\n  ]\n}', 3, 26),
        (b"{'judgments': []}", 1, 2),
    ],
)
def test_malformed_json_says_line_and_column(
    api: httpx.Client, body: bytes, line: int, column: int
) -> None:
    """Was: 422 with ``field`` the character offset (or ``body``) and no line or column."""
    project_id, headers = _project(api)
    r = api.post(
        f"/projects/{project_id}/judgments",
        content=body,
        headers={**headers, "Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    [problem] = error["problems"]
    assert problem["field"] == "body", problem
    assert f"line {line} column {column}" in problem["message"], problem
    assert f"line {line} column {column}" in error["message"], error


def test_deeply_nested_or_non_utf8_json_says_why(api: httpx.Client) -> None:
    project_id, headers = _project(api)
    url = f"/projects/{project_id}/judgments"
    json_headers = {**headers, "Content-Type": "application/json"}
    r = api.post(url, content=b"[" * 100_000 + b"]" * 100_000, headers=json_headers)
    assert r.status_code == 422 and "nested too deeply" in r.json()["error"]["message"], r.text
    r = api.post(url, content=b'{"judgments": "\xff"}', headers=json_headers)
    assert r.status_code == 422 and "not UTF-8" in r.json()["error"]["message"], r.text


# ---------------------------------------------------------------- item 3: /health


def test_health_shows_projects_only_to_their_token_or_the_admin(api: httpx.Client) -> None:
    """Was: ``GET /health`` listed every project (id, judgments, snapshot age) to anyone,
    which undid the rule that another project's token and a missing project look the
    same."""
    mine, my_headers = _project(api)
    other, other_headers = _project(api)
    row = {"judgment_id": "j0", "item_id": "q0", "system_a": "s0", "system_b": "s1", "winner": "a"}
    r = api.post(f"/projects/{mine}/judgments", json={"judgments": [row]}, headers=my_headers)
    assert r.status_code == 200, r.text
    for headers in ({}, {"Authorization": "Bearer evs_not-a-token"}):
        r = api.get("/health", headers=headers)
        assert r.status_code == 200, r.text
        anonymous = r.json()
        assert anonymous["projects"] is None, anonymous
        assert mine not in r.text and other not in r.text
        assert anonymous["status"] == "ok" and anonymous["store_reachable"] is True
        assert anonymous["version"] and anonymous["database"] in ("sqlite", "postgresql")
        assert set(anonymous["fits"]) >= {"failed", "failing"}
        assert anonymous["fits"]["keys"] is None
    [own] = api.get("/health", headers=my_headers).json()["projects"]
    assert own["project_id"] == mine and own["num_judgments"] == 1
    r = api.get("/health", headers=other_headers)
    assert [p["project_id"] for p in r.json()["projects"]] == [other] and mine not in r.text
    everything = api.get("/health", headers=ADMIN_HEADERS).json()
    assert {mine, other} <= {p["project_id"] for p in everything["projects"]}
    assert everything["fits"]["keys"] == []


def test_health_says_when_the_store_does_not_answer(
    server: ThreadServer, api: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    def unreachable() -> None:
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    monkeypatch.setattr(server.state.store, "read", unreachable)
    r = api.get("/health")
    assert r.status_code == 200, r.text
    assert r.json()["store_reachable"] is False and r.json()["status"] == "degraded"


# ---------------------------------------------------------------- item 4: token guessing


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'guess.db'}"
    else:
        with fresh_pg_database() as url:
            yield url


def test_guessing_tokens_is_rate_limited_per_address(
    fresh_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: the 401 for an unknown token was sent before the rate limiter ran, so 700
    distinct wrong tokens got 700 x 401 (each a store lookup) and never a 429."""
    settings = Settings(
        database_url=fresh_url,
        streaming=False,
        admin_token=ADMIN,
        rate_limit_per_second=1.0,
        rate_limit_burst=5,
        token_cache_seconds=60.0,
    )
    with ThreadServer(settings) as srv, httpx.Client(base_url=srv.url, timeout=30) as client:
        r = client.post("/projects", json={"project_id": "mine"}, headers=ADMIN_HEADERS)
        assert r.status_code == 201, r.text
        mine = {"Authorization": f"Bearer {r.json()['token']}"}
        assert client.get("/projects/mine", headers=mine).status_code == 200  # now cached
        lookups = []
        real_get = srv.state.tokens.get

        def counted(*args: object) -> str | None:
            lookups.append(args[1])
            return real_get(*args)

        monkeypatch.setattr(srv.state.tokens, "get", counted)
        answers = [
            client.get("/projects/mine", headers={"Authorization": f"Bearer evs_guess{i}"})
            for i in range(30)
        ]
        codes = [a.status_code for a in answers]
        # the burst of 5 (plus what refills while they run), then 429s
        assert codes[:5] == [401] * 5, codes
        assert codes.count(401) <= 7 and codes.count(429) >= 23, codes
        assert len(lookups) == codes.count(401)  # a 429 costs no store lookup
        limited = answers[-1]
        assert limited.json()["error"]["code"] == "rate_limited"
        assert int(limited.headers["retry-after"]) >= 1
        # no token at all counts the same, as does a wrong admin token
        assert client.get("/projects/mine").status_code == 429
        assert client.post("/projects", json={"project_id": "x"}).status_code == 429
        assert (
            client.post(
                "/projects", json={"project_id": "x"}, headers={"Authorization": "Bearer no"}
            ).status_code
            == 429
        )
        # a token this replica knows is not held up by the guesses from its address
        assert client.get("/projects/mine", headers=mine).status_code == 200
        # another project's token and a missing project still look the same
        other = client.get("/projects/nope", headers=mine)
        r = client.post("/projects", json={"project_id": "theirs"}, headers=ADMIN_HEADERS)
        assert r.status_code == 201, r.text
        theirs = client.get("/projects/theirs", headers=mine)
        assert other.status_code == theirs.status_code == 403
        assert other.json() == theirs.json()
        # after Retry-After the address may try again
        time.sleep(float(limited.headers["retry-after"]) + 0.1)
        assert (
            client.get("/projects/mine", headers={"Authorization": "Bearer x"}).status_code == 401
        )
