"""Inputs a route parses itself (query pairs, JSON inside a string) go through the shared
validators: a pair naming an unknown system and JSON nested thousands of levels deep are
422s naming what is wrong, never 500s, and the connection stays usable after them. Real
HTTP against a server with a real store (SQLite, and PostgreSQL when reachable)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from adaptive.core.json_text import MAX_DEPTH, JsonTextError, parse_json_lines, parse_json_text
from services.settings import Settings
from services.store import repository as repo
from tests.factories import ThreadServer, fresh_pg_database

DEEP = 3_000


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def server(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[ThreadServer]:  # noqa: ANN001
    settings = {"streaming": False}
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('parsed') / 'parsed.db'}"
        with ThreadServer(Settings(database_url=url, **settings)) as srv:
            yield srv
    else:
        with (
            fresh_pg_database() as url,
            ThreadServer(Settings(database_url=url, **settings)) as srv,
        ):
            yield srv


@pytest.fixture
def api(server: ThreadServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _project(api: httpx.Client) -> tuple[str, dict]:
    """Systems s0, s1, s2; prompt q0; one human judgment and one verdict of s0 vs s1."""
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = api.post("/projects", json={"project_id": project_id})
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    for path, body in (
        ("systems", {"systems": [{"system_id": f"s{k}"} for k in range(3)]}),
        ("prompts", {"prompts": [{"prompt_id": "q0", "responses": {"s0": "a", "s1": "b"}}]}),
    ):
        r = api.post(f"/projects/{project_id}/{path}", json=body, headers=headers)
        assert r.status_code == 200, r.text
    row = {"item_id": "q0", "system_a": "s0", "system_b": "s1", "winner": "a"}
    for path, key, extra in (
        ("judgments", "judgments", {"judgment_id": "j1", "annotator_id": "w1"}),
        ("judge-verdicts", "verdicts", {"judgment_id": "v1", "annotator_id": "judge"}),
    ):
        body = {key: [{**row, **extra, "dimension": "overall"}]}
        r = api.post(f"/projects/{project_id}/{path}", json=body, headers=headers)
        assert r.status_code == 200, r.text
    return project_id, headers


def _still_serves(api: httpx.Client, project_id: str, headers: dict) -> None:
    """The next request on the same client (the same keep-alive connection) is answered:
    a 500 from an exception made the server drop the connection, and this one failed."""
    r = api.get(f"/projects/{project_id}/judgments", headers=headers)
    assert r.status_code == 200 and len(r.json()["judgments"]) == 1, r.text


# ---------------------------------------------------------------- query pairs


@pytest.mark.parametrize("pairs", [["x:y"], ["s0:s1", "s0:nope"]])
def test_hybrid_decisions_refuse_pairs_of_unknown_systems_as_decisions_do(
    api: httpx.Client, pairs: list[str]
) -> None:
    """Was: ``500 internal_error (IndexError)`` where ``/decisions`` answers 422."""
    project_id, headers = _project(api)
    answers = {}
    for route in ("decisions", "hybrid-decisions"):
        r = api.get(f"/projects/{project_id}/{route}", params={"pairs": pairs}, headers=headers)
        assert r.status_code == 422, (route, r.text)
        error = r.json()["error"]
        assert error["code"] == "validation_error" and "does not have" in error["message"], error
        answers[route] = error["problems"]
    assert answers["decisions"] == answers["hybrid-decisions"], answers
    assert answers["decisions"][0]["field"] == "pairs"
    _still_serves(api, project_id, headers)


def test_hybrid_decisions_of_registered_pairs_without_judgments_are_undecided(
    api: httpx.Client,
) -> None:
    """Was: ``500 IndexError`` in adaptive/judge/hybrid_decisions.py when no comparison of
    the registered family had a human judgment."""
    project_id, headers = _project(api)
    r = api.get(
        f"/projects/{project_id}/hybrid-decisions", params={"pairs": "s0:s2"}, headers=headers
    )
    assert r.status_code == 200, r.text
    [row] = r.json()["rows"]
    assert (row["system_a"], row["system_b"], row["decision"]) == ("s0", "s2", "undecided")
    assert row["n_judgments"] == 0


# ---------------------------------------------------------------- JSON inside a string


def _lease(server: ThreadServer, project_id: str) -> str:
    with server.state.store.write() as conn:
        lease = repo.create_lease(
            conn=conn,
            project_id=project_id,
            idempotency_key=uuid.uuid4().hex,
            annotator_id="w2",
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


def _task(lease_id: str, data: object = None) -> str:
    task = {"data": {"task_id": f"{lease_id}-0001", "item_id": "q0"}, "annotations": []}
    if data is not None:
        task["data"]["extra"] = "__DATA__"
    text = json.dumps(task)
    return text if data is None else text.replace('"__DATA__"', str(data))


def test_label_studio_content_nested_thousands_deep_is_422_naming_task_and_reason(
    server: ThreadServer, api: httpx.Client
) -> None:
    """Was: ``500 RecursionError`` at the ``json.loads`` of the content, after which the
    server dropped the keep-alive connection and the client's next request failed too."""
    project_id, headers = _project(api)
    lease_id = _lease(server, project_id)
    url = f"/projects/{project_id}/leases/{lease_id}/results"
    deep = "[" * DEEP + "]" * DEEP
    content = f"[{_task(lease_id)}, {_task(lease_id, deep)}]"
    r = api.post(url, json={"platform": "labelstudio", "content": content}, headers=headers)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "validation_error", error
    [problem] = error["problems"]
    assert problem["row"] == 1 and problem["field"] == "content", problem
    assert f"nested more than {MAX_DEPTH} levels deep" in problem["message"], problem
    assert "task 1" in error["message"], error
    _still_serves(api, project_id, headers)
    # the same export nested within the limit is read (and names its unknown task row)
    shallow = "[" * 50 + "]" * 50
    content = f"[{_task(lease_id)}, {_task(lease_id, shallow)}]"
    r = api.post(url, json={"platform": "labelstudio", "content": content}, headers=headers)
    assert r.status_code == 200, r.text


def test_survey_json_lines_nested_thousands_deep_are_422_naming_the_line(
    server: ThreadServer, api: httpx.Client
) -> None:
    project_id, headers = _project(api)
    lease_id = _lease(server, project_id)
    url = f"/projects/{project_id}/leases/{lease_id}/results"
    good = json.dumps({"PROLIFIC_PID": "p1", "task_id": f"{lease_id}-0001", "choice": "first"})
    deep = json.dumps({"PROLIFIC_PID": "p2", "task_id": f"{lease_id}-0001", "choice": "x"})
    deep = deep[:-1] + ', "extra": ' + "[" * DEEP + "]" * DEEP + "}"
    body = {"platform": "survey", "survey_format": "jsonl", "content": f"{good}\n{deep}\n"}
    r = api.post(url, json=body, headers=headers)
    assert r.status_code == 422, r.text
    [problem] = r.json()["error"]["problems"]
    assert problem["row"] == 1 and "line 2" in problem["message"], problem
    assert f"nested more than {MAX_DEPTH} levels deep" in problem["message"], problem
    _still_serves(api, project_id, headers)


def test_every_json_reader_of_a_crowd_file_is_bounded(tmp_path) -> None:  # noqa: ANN001
    """The command line's readers of a Label Studio export and of a task list share the
    parser: a deep file is a DataError naming why, not a RecursionError."""
    from adaptive.core.data import DataError
    from services.crowd.results import _load_label_studio_file
    from services.crowd.tasks import read_tasks

    deep = tmp_path / "deep.json"
    deep.write_text('[{"task_id": "t1"}, {"x": ' + "[" * DEEP + "]" * DEEP + "}]")
    for read in (lambda: _load_label_studio_file(deep, "deep.json"), lambda: read_tasks(deep)):
        with pytest.raises(DataError, match=f"nested more than {MAX_DEPTH} levels deep"):
            read()


def test_the_parser_names_where_and_which_element() -> None:
    with pytest.raises(JsonTextError) as caught:
        parse_json_text('["é", {"a": 1},\n {"b": tru}]')
    assert (caught.value.line, caught.value.row) == (2, 2), caught.value
    with pytest.raises(JsonTextError) as caught:
        parse_json_text('{"a": ' + "[" * DEEP)
    assert caught.value.row is None and "levels deep" in caught.value.reason
    assert parse_json_text("[" * MAX_DEPTH + "]" * MAX_DEPTH) == json.loads(
        "[" * MAX_DEPTH + "]" * MAX_DEPTH
    )
    assert parse_json_lines('{"a": 1}\n\n{"b": [2]}\n') == [{"a": 1}, {"b": [2]}]
    with pytest.raises(JsonTextError) as caught:
        parse_json_lines('{"a": 1}\n\n{"b": ' + "[" * DEEP)
    assert (caught.value.line, caught.value.row) == (3, 2), caught.value
