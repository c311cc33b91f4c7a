"""Issue 39 over HTTP: the same decisions question of the same judgments gets the same rows
through the command line, ``import evalset`` and the service; the service's family is the
declared one (default: the comparisons with judgments), and next-batch and the dashboard
serve and count that family only."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import polars as pl
import pytest

import evalset
from adaptive.estimation.streaming import Snapshot as StreamSnapshot
from services.cli import main
from services.settings import Settings
from tests.factories import ThreadServer

ROOT = Path(__file__).resolve().parents[2]
NCM = ROOT / "data" / "chateval_ncm" / "judgments.csv"
#: two pairs ChatEval NCM compares and one it never does
REGISTERED = [("Cakechat", "S2SAttn_Twitter"), ("Cakechat", "Human1")]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ThreadServer]:
    url = f"sqlite:///{tmp_path_factory.mktemp('doors') / 'doors.db'}"
    with ThreadServer(Settings(database_url=url, streaming=False)) as s:
        yield s


def _load(api: httpx.Client, frame: pl.DataFrame) -> tuple[str, dict]:
    """A project holding ``frame``'s systems, prompts, dimensions and judgments (file order)."""
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = api.post("/projects", json={"project_id": project_id})
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
    r = api.post(
        f"/projects/{project_id}/systems",
        json={"systems": [{"system_id": s} for s in systems]},
        headers=headers,
    )
    assert r.status_code < 300, r.text
    prompts = frame["item_id"].unique(maintain_order=True).to_list()
    r = api.post(
        f"/projects/{project_id}/prompts",
        json={"prompts": [{"prompt_id": p, "text": p} for p in prompts]},
        headers=headers,
    )
    assert r.status_code < 300, r.text
    dims = [d for d in frame["dimension"].unique(maintain_order=True).to_list() if d != "overall"]
    if dims:
        r = api.post(
            f"/projects/{project_id}/dimensions",
            json={"dimensions": [{"dimension_id": d} for d in dims]},
            headers=headers,
        )
        assert r.status_code < 300, r.text
    rows = [{"judgment_id": f"j{i}", **r} for i, r in enumerate(frame.to_dicts())]
    for lo in range(0, len(rows), 10_000):
        r = api.post(
            f"/projects/{project_id}/judgments",
            json={"judgments": rows[lo : lo + 10_000]},
            headers=headers,
        )
        assert r.status_code == 200, r.text
    return project_id, headers


@pytest.fixture(scope="module")
def ncm(server) -> Iterator[tuple[httpx.Client, str, dict]]:
    with httpx.Client(base_url=server.url, timeout=120) as api:
        project_id, headers = _load(api, pl.read_csv(NCM))
        yield api, project_id, headers


def _cli(path: Path, options: dict, capsys) -> list[dict]:
    argv = ["decisions", "--data", str(path), "--format", "json"]
    for key, value in options.items():
        if key == "pairs":
            value = ",".join(f"{a}:{b}" for a, b in value)
        argv += [f"--{key}", str(value)]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _http(api: httpx.Client, project_id: str, headers: dict, options: dict) -> dict:
    query = {k: v for k, v in options.items() if k != "pairs"}
    if "pairs" in options:
        query["pairs"] = [f"{a}:{b}" for a, b in options["pairs"]]
    r = api.get(f"/projects/{project_id}/decisions", params=query, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def _same_rows(body: dict, expected: list[dict], *, besides: tuple[str, ...] = ()) -> None:
    """The HTTP rows are ``expected`` (the CLI's): same columns, same numbers to 1e-9
    (but the columns ``besides``)."""
    assert len(body["rows"]) == len(expected)
    assert {r["rule"] for r in expected} == {body["rule"]}
    for got, want in zip(body["rows"], expected):
        want = {k: v for k, v in want.items() if k != "rule"}
        assert list(got) == list(want)
        for key, value in want.items():
            if key in besides:
                continue
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (key, got, want)
            else:
                assert got[key] == value, (key, got, want)


@pytest.mark.parametrize(
    "options",
    [{}, {"unit": "judgment"}, {"family": "all-pairs"}, {"pairs": REGISTERED}],
    ids=["default", "judgment-unit", "all-pairs", "registered"],
)
def test_ncm_gets_the_same_rows_through_the_command_line_python_and_http(ncm, options, capsys):
    api, project_id, headers = ncm
    cli = _cli(NCM, options, capsys)
    python = evalset.decisions(NCM, **options).to_dicts()
    assert python == cli
    body = _http(api, project_id, headers, options)
    _same_rows(body, cli)
    size = {"family": 55, "pairs": 2}.get(next(iter(options), ""), 17)
    assert body["family_size"] == size and f"{size} comparisons" in body["family"]
    assert [r["alpha_each"] for r in body["rows"]] == pytest.approx([0.05 / size] * size)


def test_the_default_family_is_the_compared_pairs_not_every_pair_of_the_systems(ncm):
    api, project_id, headers = ncm
    body = _http(api, project_id, headers, {})
    # 11 systems, 17 compared pairs: before, 55 rows and Bonferroni at 0.05 / 55
    assert len(body["rows"]) == 17 and all(r["n_judgments"] > 0 for r in body["rows"])
    assert {r["family"] for r in body["rows"]} == {"compared"}
    assert all(r["unused_prompts"] == 200 - r["n_prompts"] for r in body["rows"])
    # a registered pair nobody judged yet is a row of its own: undecided, no judgments
    body = _http(api, project_id, headers, {"pairs": REGISTERED})
    never = body["rows"][1]
    assert (never["system_a"], never["system_b"]) == REGISTERED[1]
    assert never["decision"] == "undecided" and never["n_judgments"] == 0
    assert never["unused_prompts"] == 200


def test_a_rule_that_is_not_one_is_a_422(ncm):
    api, project_id, headers = ncm
    url = f"/projects/{project_id}/decisions"
    for query in (
        {"correction": "holm"},
        {"family": "some"},
        {"pairs": "Cakechat"},
        {"pairs": "Cakechat:nobody"},
        {"family": "all-pairs", "pairs": "Cakechat:S2SAttn_Twitter"},
        {"family": "registered"},
    ):
        r = api.get(url, params=query, headers=headers)
        assert r.status_code == 422, (query, r.text)


def _two_dimensions() -> pl.DataFrame:
    """fluency: s1 ahead of s0 by a small margin on 400 prompts (its nulls but one carry
    evidence); helpful: 13 straight wins for s1 (e = 78, Bonferroni needs 80 for 2 tests)."""
    rng = np.random.default_rng(0)
    rows = [
        (f"p{i}", "s0", "s1", f"w{i % 5}", str(w), "fluency")
        for i, w in enumerate(rng.choice(["b", "a", "tie"], size=400, p=[0.325, 0.175, 0.5]))
    ]
    rows += [(f"p{i}", "s0", "s1", f"w{i % 5}", "b", "helpful") for i in range(13)]
    schema = ["item_id", "system_a", "system_b", "annotator_id", "winner", "dimension"]
    return pl.DataFrame(rows, schema=schema, orient="row")


def test_e_holm_looks_at_the_whole_family_across_dimensions_and_its_decisions_stay(
    server, tmp_path, capsys
):
    frame = _two_dimensions()
    path = tmp_path / "two.csv"
    frame.write_csv(path)
    options = {"margin": 0.3, "correction": "e-holm"}
    cli = _cli(path, options, capsys)
    bonferroni = evalset.decisions(frame, margin=0.3).to_dicts()
    assert [r["decision"] for r in bonferroni] == ["equivalent", "undecided"]
    # one look at both dimensions closes helpful (a look per dimension could not)
    assert [r["decision"] for r in cli] == ["equivalent", "B better"]
    with httpx.Client(base_url=server.url, timeout=60) as api:
        project_id, headers = _load(api, frame)
        body = _http(api, project_id, headers, options)
        # a file knows a dimension's prompts from its judgments, the service the campaign's
        # registered prompts: helpful's 13 judged of the 400 leave 387 unused, not 0
        _same_rows(body, cli, besides=("unused_prompts",))
        assert [r["unused_prompts"] for r in body["rows"]] == [0, 387]
        # later judgments against it, and the state dropped: the decision stays
        late = [
            {"judgment_id": f"late{i}", "item_id": f"p{13 + i}", "system_a": "s0",
             "system_b": "s1", "annotator_id": "w9", "winner": "a", "dimension": "helpful"}
            for i in range(6)
        ]  # fmt: skip
        r = api.post(f"/projects/{project_id}/judgments", json={"judgments": late}, headers=headers)
        assert r.status_code == 200, r.text
        server.state.tallies.project(project_id).families.clear()
        after = _http(api, project_id, headers, options)["rows"][1]
        assert after["decision"] == "B better" and after["n_judgments"] == 19
        assert after["closed_at"] == 13
        # one look at every judgment now would not close it: the decision is the first look's
        assert evalset.decisions(
            pl.concat([frame, pl.DataFrame(late).drop("judgment_id")], how="diagonal"), **options
        )["decision"].to_list()[1] == ("undecided")


def _publish_ncm(server: ThreadServer, project_id: str) -> None:
    """A posterior snapshot of NCM's 11 systems, as the worker would publish it (no fit)."""
    frame = pl.read_csv(NCM)
    systems = tuple(sorted(set(frame["system_a"]) | set(frame["system_b"])))
    items = tuple(frame["item_id"].unique(maintain_order=True).to_list())
    rng = np.random.default_rng(0)
    draws = 100
    server.state.publish(
        (project_id, "overall"),
        StreamSnapshot(
            dimension="overall",
            version=0,
            num_judgments=frame.height,
            last_seq=frame.height,
            method="laplace",
            created_at=time.time(),
            fit_seconds=0.1,
            diagnostics={},
            systems=systems,
            items=items,
            pair_a=np.array([0], np.int32),
            pair_b=np.array([1], np.int32),
            pair_judgments=np.array([1]),
            pair_prompts=np.array([1]),
            skill=rng.normal(0.0, 0.3, size=(draws, len(systems))).astype(np.float32),
            alpha=np.exp(rng.normal(0, 0.2, size=(draws, len(items)))).astype(np.float32),
            b=np.sort(rng.normal(0, 1, size=(draws, len(items), 2)), axis=-1).astype(np.float32),
        ),
    )


def test_next_batch_serves_the_declared_family_only(server, ncm):
    api, project_id, headers = ncm
    _publish_ncm(server, project_id)
    compared = {
        frozenset((r["system_a"], r["system_b"])): r
        for r in _http(api, project_id, headers, {})["rows"]
    }
    url = f"/projects/{project_id}/next-batch"
    r = api.post(url, json={"size": 20}, headers=headers)
    assert r.status_code == 200, r.text
    cells = r.json()["cells"]
    # before: all 20 went to burn-in on pairs nobody compared
    left_out = {frozenset((c["system_a"], c["system_b"])) for c in r.json()["not_served"]}
    for cell in cells:
        row = compared[frozenset((cell["system_a"], cell["system_b"]))]
        assert row["decision"] == "undecided" and row["unused_prompts"] > 0
        assert cell["needed"] == row["needed"]
    # what is left out cannot close on its unused prompts, and the decisions say so too
    for cell in r.json()["not_served"]:
        row = compared[frozenset((cell["system_a"], cell["system_b"]))]
        assert row["decision"] == "undecided" and row["needs_new_prompts"]
        assert cell["servable_prompts"] <= row["unused_prompts"]
    assert not left_out & {frozenset((c["system_a"], c["system_b"])) for c in cells}
    # with every judgment as the unit, repeats count: the open comparisons are served
    r = api.post(url, json={"size": 20, "unit": "judgment"}, headers=headers)
    cells = r.json()["cells"]
    assert len(cells) == 20
    for cell in cells:
        row = compared[frozenset((cell["system_a"], cell["system_b"]))]
        assert row["decision"] == "undecided"
    # the rule travels with the request: a round robin serves the never-compared pairs too
    r = api.post(url, json={"size": 20, "family": "all-pairs", "seed": 1}, headers=headers)
    pairs = {frozenset((c["system_a"], c["system_b"])) for c in r.json()["cells"]}
    assert pairs - set(compared)
    r = api.post(url, json={"size": 5, "targets": [list(REGISTERED[1])]}, headers=headers)
    assert r.status_code == 422 and "family" in r.json()["error"]["message"]
    r = api.post(
        url,
        json={"size": 5, "targets": [list(REGISTERED[1])], "pairs": REGISTERED},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert {c["reason"] for c in r.json()["cells"]} == {"targeted"}


def test_the_dashboard_counts_the_family_only(ncm):
    api, project_id, headers = ncm
    rows = _http(api, project_id, headers, {})["rows"]
    page = api.get(f"/projects/{project_id}/dashboard?refresh=0", headers=headers).text
    closed = sum(r["decision"] != "undecided" for r in rows)
    assert f'<b id="kpi-closed">{closed} / 17</b>' in page
    needed = sum(r["needed"] or 0 for r in rows if r["decision"] == "undecided")
    assert re.search(r'data-needed="(\d+)"', page).group(1) == str(needed)  # type: ignore[union-attr]
    assert "17 comparisons (the comparisons with judgments)" in page
