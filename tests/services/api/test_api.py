"""The HTTP API over real HTTP (uvicorn on loopback) on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest
from sqlalchemy import select

from services.cli import main as cli_main
from services.schemas import MAX_BATCH
from services.settings import Settings
from services.store import tables as t
from tests.factories import (
    STUCK_SECONDS,
    SYSTEMS,
    ProcessServer,
    ThreadServer,
    fresh_pg_database,
    judgments,
    new_project,
    simulate,
    wait_for,
    when_ready,
)


def _serve(url: str, **overrides: object) -> Iterator[httpx.Client]:
    # the same fit shapes as tests/adaptive/estimation/test_streaming.py, so the compiled fit is shared
    settings = Settings(
        database_url=url, nuts=False, fast_num_draws=200, poll_seconds=0.5, **overrides
    )
    with (
        ThreadServer(settings) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        client.server = server  # type: ignore[attr-defined]
        yield client


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """One live server per backend for the module, without re-estimation (tests of the
    request path); each test makes its own projects."""
    if request.param == "sqlite":
        yield from _serve(f"sqlite:///{tmp_path_factory.mktemp('api') / 'api.db'}", streaming=False)
    else:
        with fresh_pg_database() as url:
            yield from _serve(url, streaming=False)


@pytest.fixture
def streaming_api(database_url: str) -> Iterator[httpx.Client]:
    """A live server with background re-estimation."""
    yield from _serve(database_url)


def count(api: httpx.Client, project_id: str, headers: dict) -> int:
    return api.get(f"/projects/{project_id}", headers=headers).json()["num_judgments"]


def wait_for_snapshot(api: httpx.Client, project_id: str, headers: dict, num: int) -> dict:
    def published() -> dict | None:
        snaps = api.get(f"/projects/{project_id}", headers=headers).json()["snapshots"]
        return snaps[0] if snaps and snaps[0]["num_judgments"] >= num else None

    return wait_for(published, f"a snapshot of {num} judgments")


def test_openapi_and_docs(api: httpx.Client) -> None:
    assert api.get("/docs").status_code == 200
    spec = api.get("/openapi.json").json()
    ops = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    assert {
        "create_project",
        "register_systems",
        "register_prompts",
        "register_dimensions",
        "add_judgments",
        "significance",
        "significance_pair",
        "leaderboard",
        "prompt_parameters",
        "pruning",
    } <= ops


def test_create_project_twice_is_a_conflict(api: httpx.Client) -> None:
    project_id, _ = new_project(api)
    r = api.post("/projects", json={"project_id": project_id})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "project_exists"


def test_an_id_named_twice_in_one_request_is_refused(api: httpx.Client) -> None:
    """Found by the fuzzer: on PostgreSQL a project with one dimension listed twice was a 500."""
    dims = [{"dimension_id": "d1"}, {"dimension_id": "d2"}, {"dimension_id": "d1"}]
    r = api.post("/projects", json={"project_id": f"p-{uuid.uuid4().hex[:8]}", "dimensions": dims})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "validation_error"
    assert "'d1' appears twice (entries 0 and 2)" in r.text
    project_id, headers = new_project(api)
    for path, body in (
        ("systems", {"systems": [{"system_id": "s0"}, {"system_id": "s0"}]}),
        ("prompts", {"prompts": [{"prompt_id": "q0"}, {"prompt_id": "q0"}]}),
        ("dimensions", {"dimensions": [{"dimension_id": "x"}, {"dimension_id": "x"}]}),
    ):
        r = api.post(f"/projects/{project_id}/{path}", json=body, headers=headers)
        assert r.status_code == 422 and "appears twice" in r.text, (path, r.text)
    assert count(api, project_id, headers) == 0


def test_batch_is_idempotent(api: httpx.Client) -> None:
    project_id, headers = new_project(api)
    batch = judgments(50)
    first = api.post(
        f"/projects/{project_id}/judgments", json={"judgments": batch}, headers=headers
    )
    again = api.post(
        f"/projects/{project_id}/judgments", json={"judgments": batch[10:]}, headers=headers
    )
    assert first.status_code == again.status_code == 200
    assert (first.json()["accepted"], first.json()["duplicates"]) == (50, 0)
    assert (again.json()["accepted"], again.json()["duplicates"]) == (0, 40)
    assert again.json()["num_judgments"] == 50 == count(api, project_id, headers)


@pytest.mark.parametrize(
    "change, status, code, field",
    [
        ({"system_a": "unregistered"}, 422, "invalid_batch", "system_a"),
        ({"system_b": "unregistered"}, 422, "invalid_batch", "system_b"),
        ({"item_id": "unregistered"}, 422, "invalid_batch", "item_id"),
        ({"dimension": "unregistered"}, 422, "invalid_batch", "dimension"),
        ({"system_a": "s1", "system_b": "s1"}, 422, "validation_error", "system_b"),
        ({"winner": "left"}, 422, "validation_error", "winner"),
        ({"winner": None}, 422, "validation_error", "winner"),
        ({"judgment_id": ""}, 422, "validation_error", "judgment_id"),
        ({"judgment_id": "j0"}, 422, "validation_error", "judgment_id"),  # twice in the batch
        ({"shown_first": "c"}, 422, "validation_error", "shown_first"),
        ({"unexpected": 1}, 422, "validation_error", "unexpected"),
    ],
)
def test_one_bad_row_rejects_the_batch_with_its_reason(
    api: httpx.Client, change: dict, status: int, code: str, field: str
) -> None:
    project_id, headers = new_project(api)
    batch = judgments(20)
    batch[7] = {**batch[7], **change}
    r = api.post(f"/projects/{project_id}/judgments", json={"judgments": batch}, headers=headers)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and "nothing was stored" in error["message"]
    assert [(p["row"], p["field"]) for p in error["problems"]] == [(7, field)]
    assert error["problems"][0]["message"]
    assert count(api, project_id, headers) == 0


def test_a_stored_judgment_cannot_be_rewritten(api: httpx.Client) -> None:
    project_id, headers = new_project(api)
    batch = judgments(5)
    api.post(f"/projects/{project_id}/judgments", json={"judgments": batch}, headers=headers)
    changed = {**batch[2], "winner": "tie" if batch[2]["winner"] != "tie" else "a"}
    r = api.post(
        f"/projects/{project_id}/judgments",
        json={"judgments": judgments(3, start=5) + [changed]},
        headers=headers,
    )
    assert r.status_code == 422
    problem = r.json()["error"]["problems"][0]
    assert (problem["row"], problem["judgment_id"]) == (3, "j2")
    assert "different winner" in problem["message"]
    assert count(api, project_id, headers) == 5


def test_batch_limits(api: httpx.Client) -> None:
    project_id, headers = new_project(api)
    empty = api.post(f"/projects/{project_id}/judgments", json={"judgments": []}, headers=headers)
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "validation_error"
    one = judgments(1)[0]
    big = [{**one, "judgment_id": f"big{i}"} for i in range(MAX_BATCH + 1)]
    r = api.post(f"/projects/{project_id}/judgments", json={"judgments": big}, headers=headers)
    assert r.status_code == 422
    ok = api.post(
        f"/projects/{project_id}/judgments", json={"judgments": big[:MAX_BATCH]}, headers=headers
    )
    assert ok.status_code == 200 and ok.json()["accepted"] == MAX_BATCH


def test_malformed_requests_get_json_errors(api: httpx.Client) -> None:
    project_id, headers = new_project(api)
    r = api.post(
        f"/projects/{project_id}/judgments",
        content=b"{not json",
        headers={**headers, "Content-Type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    r = api.get("/no/such/route")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = api.delete(f"/projects/{project_id}/judgments", headers=headers)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_cross_project_access_is_refused(api: httpx.Client) -> None:
    mine, my_headers = new_project(api)
    theirs, their_headers = new_project(api)
    api.post(
        f"/projects/{theirs}/judgments", json={"judgments": judgments(10)}, headers=their_headers
    )
    reads = [
        f"/projects/{theirs}",
        f"/projects/{theirs}/systems",
        f"/projects/{theirs}/prompts",
        f"/projects/{theirs}/judgments",
        f"/projects/{theirs}/significance",
        f"/projects/{theirs}/significance/s0/s1",
        f"/projects/{theirs}/leaderboard",
        f"/projects/{theirs}/prompt-parameters",
        f"/projects/{theirs}/snapshots",
    ]
    for path in reads:
        r = api.get(path, headers=my_headers)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", path
        assert api.get(path).status_code == 401, path
        assert api.get(path, headers={"Authorization": "Bearer evs_guess"}).status_code == 401
    writes = [
        (f"/projects/{theirs}/judgments", {"judgments": judgments(5, start=10)}),
        (f"/projects/{theirs}/systems", {"systems": [{"system_id": "intruder"}]}),
        (f"/projects/{theirs}/prompts", {"prompts": [{"prompt_id": "intruder"}]}),
        (f"/projects/{theirs}/dimensions", {"dimensions": [{"dimension_id": "intruder"}]}),
        (f"/projects/{theirs}/tokens", {"label": "intruder"}),
    ]
    for path, body in writes:
        r = api.post(path, json=body, headers=my_headers)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", path
    # a project that does not exist looks the same as another's
    assert api.get("/projects/nobody", headers=my_headers).status_code == 403
    status = api.get(f"/projects/{theirs}", headers=their_headers).json()
    assert status["num_judgments"] == 10 and status["num_systems"] == len(SYSTEMS)
    assert [d["dimension_id"] for d in status["dimensions"]] == ["overall"]


def test_tokens_are_not_stored_in_clear(api: httpx.Client) -> None:
    project_id, headers = new_project(api)
    extra = api.post(f"/projects/{project_id}/tokens", json={"label": "tool"}, headers=headers)
    assert extra.status_code == 201
    tokens = [headers["Authorization"].split()[1], extra.json()["token"]]
    assert api.get(f"/projects/{project_id}", headers={"Authorization": f"Bearer {tokens[1]}"})
    store = api.server.state.store  # type: ignore[attr-defined]
    with store.read() as conn:
        rows = [tuple(map(str, r)) for r in conn.execute(select(t.api_tokens))]
    dump = repr(rows)
    assert all(token not in dump for token in tokens)
    if store.is_sqlite:
        path = Path(store.engine.url.database)
        raw = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
        assert all(token.encode() not in raw for token in tokens)


def test_answers_come_from_a_named_snapshot(streaming_api: httpx.Client) -> None:
    api = streaming_api
    project_id, headers = new_project(api)
    r = api.get(f"/projects/{project_id}/significance", headers=headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "no_snapshot"
    for start, num in ((0, 200), (200, 40)):  # both in one padded shape bucket
        r = api.post(
            f"/projects/{project_id}/judgments",
            json={"judgments": judgments(num, start=start)},
            headers=headers,
        )
        assert r.status_code == 200
    snap = wait_for_snapshot(api, project_id, headers, 240)
    assert snap["num_judgments"] == 240 and snap["method"] == "laplace" and snap["version"] >= 1

    sig = api.get(f"/projects/{project_id}/significance", headers=headers).json()
    assert sig["snapshot"]["num_judgments"] == 240
    assert len(sig["rows"]) == 10
    assert all(r["adjust_rule"] == "holm on the model and on the data" for r in sig["rows"])
    everything = api.get(
        f"/projects/{project_id}/significance",
        params={"all_pairs": True, "rule": "bonferroni"},
        headers=headers,
    ).json()
    assert len(everything["rows"]) == 15
    assert everything["rows"][0]["adjust_rule"] == "bonferroni on the model and on the data"

    ab = api.get(f"/projects/{project_id}/significance/s0/s4", headers=headers).json()["rows"][0]
    ba = api.get(f"/projects/{project_id}/significance/s4/s0", headers=headers).json()["rows"][0]
    assert (ab["system_a"], ab["system_b"]) == ("s0", "s4") and ab["mean"] > 0
    assert ab["mean"] == pytest.approx(-ba["mean"])
    assert ab["observed_net"] > 0 and ab["observed_net"] == pytest.approx(-ba["observed_net"])
    assert ab["observed_p"] == pytest.approx(ba["observed_p"])
    # Δ's interval over HTTP: around observed_net, flipped with the orientation
    assert ab["observed_ci_low"] < ab["observed_net"] < ab["observed_ci_high"]
    assert (ab["observed_ci_low"], ab["observed_ci_high"]) == pytest.approx(
        (-ba["observed_ci_high"], -ba["observed_ci_low"])
    )
    # the draws' Monte Carlo error of the end nearest 0, in either orientation
    assert 0 < ab["ci_mcse"] < ab["sd"] and ab["ci_mcse"] == pytest.approx(ba["ci_mcse"], rel=0.1)
    assert ab["verdict_settled"] and ba["verdict_settled"]
    never = api.get(f"/projects/{project_id}/significance/s1/never_judged", headers=headers).json()[
        "rows"
    ][0]
    assert never["n_judgments"] == 0 and not never["significant"]
    assert never["data_adjusted"] is None and never["observed_net"] is None
    assert never["observed_ci_low"] is None and never["observed_ci_high"] is None
    assert not never["significant_adjusted"]
    assert (
        api.get(f"/projects/{project_id}/significance/s1/ghost", headers=headers).status_code == 404
    )

    board = api.get(f"/projects/{project_id}/leaderboard", headers=headers).json()
    judged = [r["system_id"] for r in board["rows"] if r["judged"]]
    assert judged[0] == "s4" and judged[-1] == "s0"
    assert all(r["ci_low"] < r["mean"] < r["ci_high"] for r in board["rows"])
    items = api.get(f"/projects/{project_id}/prompt-parameters", headers=headers).json()
    assert len(items["rows"]) == 12 and items["snapshot"]["version"] == board["snapshot"]["version"]
    pending = api.get(f"/projects/{project_id}/pruning", headers=headers)
    assert pending.status_code in (200, 409)
    if pending.status_code == 409:  # computed in the background; first use compiles its fits
        assert pending.json()["error"]["code"] == "pruning_pending"
    bad = api.get(f"/projects/{project_id}/leaderboard?dimension=nope", headers=headers)
    assert bad.status_code == 404 and bad.json()["error"]["code"] == "not_found"


@pytest.mark.slow  # each worker process imports JAX and compiles its fits afresh (~1 min a store)
def test_a_worker_process_re_estimates_outside_the_api_process(database_url: str) -> None:
    for api in _serve(database_url, worker="process"):
        state = api.server.state  # type: ignore[attr-defined]
        worker = state.worker
        assert worker is not None and state.refresher is None
        wait_for(worker.alive, "the worker process")  # it starts a moment after the service
        assert worker.process.pid != os.getpid()
        assert api.get("/health").json()["streaming"] is True
        project_id, headers = new_project(api)
        api.post(
            f"/projects/{project_id}/judgments", json={"judgments": judgments(240)}, headers=headers
        )
        assert wait_for_snapshot(api, project_id, headers, 240)["method"] == "laplace"
        # a worker that dies is replaced at the next batch, and the new one catches up
        worker.process.kill()
        worker.process.join(10)
        api.post(
            f"/projects/{project_id}/judgments",
            json={"judgments": judgments(10, start=240)},
            headers=headers,
        )
        wait_for_snapshot(api, project_id, headers, 250)
        assert state.worker is not worker and state.worker.alive()
    # stopping the server stops its worker
    assert not state.worker.alive()


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc (Linux)")
def test_served_worker_process_dies_with_a_killed_server(tmp_path: Path) -> None:
    """``evalset serve`` re-estimates in a child process; SIGKILL of the server takes it along."""
    server = ProcessServer(f"sqlite:///{tmp_path / 'kill.db'}", env={"EVALSET_NUTS": "false"})
    server.start()
    try:
        assert httpx.get(server.url + "/health").json()["streaming"] is True
        pid = server.proc.pid  # type: ignore[union-attr]
        children = wait_for(lambda: _children(pid), "the worker process", every=0.1)
        server.kill()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(Path(f"/proc/{c}").exists() for c in children):
            time.sleep(0.1)
        # a reaped or zombie child is gone; a live one would still have a status line
        alive = [
            c
            for c in children
            if Path(f"/proc/{c}/stat").exists()
            and Path(f"/proc/{c}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        ]
        assert not alive, f"worker {alive} outlived its server"
    finally:
        server.stop()


def test_restart_restores_the_latest_snapshot(database_url: str) -> None:
    """A new server on the same store answers from the stored snapshot without refitting."""
    for api in _serve(database_url):
        project_id, headers = new_project(api)
        api.post(
            f"/projects/{project_id}/judgments", json={"judgments": judgments(240)}, headers=headers
        )
        before = wait_for_snapshot(api, project_id, headers, 240)
        board = api.get(f"/projects/{project_id}/leaderboard", headers=headers).json()
    for api in _serve(database_url):
        state = api.server.state  # type: ignore[attr-defined]
        time.sleep(0.3)
        assert state.refresher.wait_idle(STUCK_SECONDS)
        after = api.get(f"/projects/{project_id}/leaderboard", headers=headers).json()
        snaps = api.get(f"/projects/{project_id}/snapshots", headers=headers).json()["snapshots"]
        # the restored warm start: the next batch is a warm update, not a cold fit
        api.post(
            f"/projects/{project_id}/judgments",
            json={"judgments": judgments(10, start=240)},
            headers=headers,
        )
        newer = wait_for_snapshot(api, project_id, headers, 250)
    assert after["snapshot"] == board["snapshot"] and after["rows"] == board["rows"]
    assert [s["version"] for s in snaps] == [before["version"]]
    assert newer["version"] == before["version"] + 1
    assert newer["diagnostics"]["num_steps"] < before["diagnostics"]["num_steps"]


def test_cli_import_export_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    source = tmp_path / "judgments.csv"
    simulate(60).write_csv(source)
    assert (
        cli_main(["import", str(source), "--project", "c", "--create", "--database-url", db]) == 0
    )
    assert "inserted: 60" in capsys.readouterr().out
    assert cli_main(["import", str(source), "--project", "c", "--database-url", db]) == 0
    assert "duplicates: 60" in capsys.readouterr().out
    out = tmp_path / "out.parquet"
    assert cli_main(["export", "--project", "c", "--database-url", db, "-o", str(out)]) == 0
    exported = pl.read_parquet(out)
    assert exported.height == 60 and exported["judgment_id"].n_unique() == 60
    original = simulate(60).select("item_id", "system_a", "system_b", "annotator_id", "winner")
    assert exported.select(original.columns).equals(original)
    # a second project from the export; --strict refuses what is not registered
    assert (
        cli_main(
            ["import", str(out), "--project", "d", "--create", "--strict", "--database-url", db]
        )
        == 2
    )
    assert "unknown system" in capsys.readouterr().err
    # an export whose judgments name their next batches imports elsewhere without them (the
    # leases stay in the project that served them)
    leased = tmp_path / "leased.csv"
    pl.read_parquet(out).with_columns(pl.lit("lease-1").alias("lease_id")).write_csv(leased)
    argv = ["import", str(leased), "--project", "e", "--create", "--database-url", db]
    assert cli_main(argv) == 0
    assert "lease_id left out" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    simulate(5).with_columns(pl.lit("maybe").alias("winner")).write_csv(bad)
    assert cli_main(["import", str(bad), "--project", "c", "--database-url", db]) == 2
    assert "winner" in capsys.readouterr().err


@pytest.mark.slow
def test_pruning_runs_in_the_background(streaming_api: httpx.Client) -> None:
    api = streaming_api
    project_id, headers = new_project(api)
    api.post(
        f"/projects/{project_id}/judgments", json={"judgments": judgments(240)}, headers=headers
    )
    both = api.get(
        f"/projects/{project_id}/pruning",
        params={"keep": 4, "target_se_ratio": 1.1},
        headers=headers,
    )
    assert both.status_code == 422
    r = when_ready(
        lambda: api.get(f"/projects/{project_id}/pruning", params={"keep": 4}, headers=headers),
        "pruning_pending",
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["num_judgments"] == 240
    kept = [row for row in body["rows"] if row["kept"]]
    assert {row["tier"] for row in body["rows"]} and len(kept) >= 4
    assert all(row["reason"] for row in body["rows"])
