"""One name <-> index adapter: ``evalset recommend --data`` and the API give the same batch."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import numpy as np
import polars as pl
import pytest

from adaptive.core.cells import build_cells
from adaptive.core.data import read_judgments
from adaptive.estimation.streaming import Snapshot as StreamSnapshot
from evalset.recommend_adapter import CellNames, canonical
from services.settings import Settings
from tests.factories import ThreadServer

SYSTEMS = ["s2", "s0", "s1"]  # not in name order: the adapter sorts every name space
DIMENSIONS = ["overall", "fluency"]  # file order; the service lists them by name
NUM_PROMPTS = 26  # every prompt judged: the CLI knows only the prompts of the file
SEED = 7


def _judgments() -> list[dict]:
    """Twelve prompts per pair and dimension, some rows written the other way round."""
    rng = np.random.default_rng(5)
    pairs = [("s0", "s1"), ("s2", "s0"), ("s1", "s2")]
    rows = []
    for dim in DIMENSIONS:
        for i, (a, b) in enumerate(pairs):
            for k in range(12):
                x, y = (b, a) if k % 5 == 4 else (a, b)
                rows.append(
                    {
                        "judgment_id": f"j{len(rows)}",
                        "dimension": dim,
                        "item_id": f"q{(7 * i + k) % NUM_PROMPTS:02d}",
                        "system_a": x,
                        "system_b": y,
                        "annotator_id": f"w{k % 3}",
                        "winner": str(rng.choice(["a", "b", "b", "tie"])),
                        "shown_first": "a" if k % 2 else "b",
                    }
                )
    return rows


def _responses() -> dict[tuple[str, str], str]:
    """Every system answers every prompt; s0 and s1 give the same answer to q03 (never served)."""
    out = {(f"q{p:02d}", s): f"{s} answers q{p:02d}" for p in range(NUM_PROMPTS) for s in SYSTEMS}
    out[("q03", "s1")] = out[("q03", "s0")].upper()
    return out


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Iterator:
    folder = tmp_path_factory.mktemp("adapter")
    pl.DataFrame(_judgments()).write_csv(folder / "judgments.csv")
    prompts = [f"q{p:02d}" for p in range(NUM_PROMPTS)]
    pl.DataFrame({"item_id": prompts, "prompt": [f"text {p}" for p in prompts]}).write_csv(
        folder / "items.csv"
    )
    pl.DataFrame(
        [(item, s, text) for (item, s), text in _responses().items()],
        schema=["item_id", "system", "response"],
        orient="row",
    ).write_csv(folder / "responses.csv")
    yield folder


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Iterator[httpx.Client]:
    db = tmp_path_factory.mktemp("adapter-api") / "a.db"
    settings = Settings(database_url=f"sqlite:///{db}", streaming=False)
    with ThreadServer(settings) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        c.server = server  # type: ignore[attr-defined]
        yield c


def _served_project(client: httpx.Client, data_dir) -> tuple[str, dict]:
    """The same data in the service, with a posterior per dimension as the worker publishes it."""
    project_id = f"a{time.monotonic_ns() % 10**9}"
    r = client.post(
        "/projects",
        json={"project_id": project_id, "dimensions": [{"dimension_id": d} for d in DIMENSIONS]},
    )
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    responses = _responses()
    r = client.post(
        f"/projects/{project_id}/systems",
        json={"systems": [{"system_id": s} for s in SYSTEMS]},
        headers=headers,
    )
    assert r.status_code < 300, r.text
    prompts = [
        {
            "prompt_id": f"q{p:02d}",
            "text": f"text q{p:02d}",
            "responses": {s: responses[(f"q{p:02d}", s)] for s in SYSTEMS},
        }
        for p in range(NUM_PROMPTS)
    ]
    r = client.post(f"/projects/{project_id}/prompts", json={"prompts": prompts}, headers=headers)
    assert r.status_code < 300, r.text
    r = client.post(
        f"/projects/{project_id}/judgments", json={"judgments": _judgments()}, headers=headers
    )
    assert r.status_code < 300, r.text
    judgments = read_judgments(data_dir / "judgments.csv")
    rng = np.random.default_rng(0)
    for dim in DIMENSIONS:
        # the worker's cells of the same rows: same systems and orientation; the draws do not
        # matter here (three systems: no pairing restriction, and no leaderboard targets)
        cd = build_cells(judgments, dimension=dim)
        snap = StreamSnapshot(
            dimension=dim,
            version=0,
            num_judgments=cd.num_judgments,
            last_seq=len(_judgments()),
            method="laplace",
            created_at=time.time(),
            fit_seconds=0.1,
            diagnostics={},
            systems=tuple(cd.systems),
            items=tuple(cd.prompts),
            pair_a=np.asarray(cd.pair_a, np.int32),
            pair_b=np.asarray(cd.pair_b, np.int32),
            pair_judgments=np.full(3, 12),
            pair_prompts=np.full(3, 12),
            skill=rng.normal(0.0, 0.5, size=(200, 3)).astype(np.float32),
            alpha=np.ones((50, len(cd.prompts)), np.float32),
            b=np.tile(np.array([-1.0, 1.0], np.float32), (50, len(cd.prompts), 1)),
        )
        client.server.state.publish((project_id, dim), snap)  # type: ignore[attr-defined]
    return project_id, headers


KEYS = ("item_id", "dimension", "system_a", "system_b", "shown_first", "reason", "needed")


@pytest.mark.parametrize("annotator", [None, "w1"])
def test_cli_and_api_give_the_same_batch_for_the_same_data_and_seed(
    client, data_dir, capsys, annotator
):
    from services.cli import main

    # the judgment as the unit: twelve prompts per pair cannot close a comparison with the
    # prompt as the unit, and the recommender would serve nothing (both doors agree on that)
    argv = ["recommend", "--data", str(data_dir / "judgments.csv"), "--size", "20"]
    argv += ["--seed", str(SEED), "--draws", "100", "--format", "json", "--quiet"]
    argv += ["--unit", "judgment"]
    if annotator:
        argv += ["--annotator", annotator]
    assert main(argv) == 0
    from_cli = [{k: t[k] for k in KEYS} for t in json.loads(capsys.readouterr().out)]

    project_id, headers = _served_project(client, data_dir)
    body: dict = {"size": 20, "seed": SEED, "unit": "judgment"}
    if annotator:
        body["annotator_id"] = annotator
    r = client.post(f"/projects/{project_id}/next-batch", json=body, headers=headers)
    assert r.status_code == 200, r.text
    from_api = [{k: c[k] for k in KEYS} for c in r.json()["cells"]]

    assert len(from_cli) == 20
    assert from_cli == from_api
    # the identical responses are never served, and the batch mixes both dimensions
    assert not [
        c
        for c in from_cli
        if c["item_id"] == "q03" and {c["system_a"], c["system_b"]} == {"s0", "s1"}
    ]
    assert {c["dimension"] for c in from_cli} == set(DIMENSIONS)
    if annotator:
        own = {
            (r["dimension"], r["item_id"], frozenset((r["system_a"], r["system_b"])))
            for r in _judgments()
            if r["annotator_id"] == annotator
        }
        got = {
            (c["dimension"], c["item_id"], frozenset((c["system_a"], c["system_b"])))
            for c in from_cli
        }
        assert not own & got


def test_another_seed_gives_another_batch(data_dir, capsys):
    from services.cli import main

    argv = ["recommend", "--data", str(data_dir / "judgments.csv"), "--size", "20"]
    argv += ["--draws", "100", "--format", "json", "--quiet", "--unit", "judgment"]
    batches = []
    for seed in (SEED, SEED, SEED + 1):
        assert main([*argv, "--seed", str(seed)]) == 0
        batches.append(json.loads(capsys.readouterr().out))
    assert batches[0] == batches[1]
    assert batches[0] != batches[2]


def test_cell_names_locate_cells_in_either_orientation():
    names = CellNames(
        dimensions=("overall",),
        systems=tuple(canonical(["y", "x"])),
        prompts=("p1", "p2"),
        comparisons=(("overall", "x", "y"),),
    )
    assert names.locate("overall", "p2", "x", "y") == (0, 1, False)
    assert names.locate("overall", "p1", "y", "x") == (0, 0, True)
    assert names.locate("overall", "p3", "x", "y") is None
    assert names.locate("fluency", "p1", "x", "y") is None
