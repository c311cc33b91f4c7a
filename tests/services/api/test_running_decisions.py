"""Decisions and next batches from running tallies: a read costs the new judgments, not the
campaign, and gives what a recomputation from every judgment gives (issue 40, item 5)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import numpy as np
import polars as pl
import pytest

from adaptive.estimation.streaming import Snapshot as StreamSnapshot
from adaptive.stopping.decisions import DecisionRule
from evalset.decide import decide_judgments
from evalset.recommend_adapter import NamedFit, cell_state, prepare
from services.api import next_batch_prepare as nbp
from services.settings import Settings
from services.store import repository as repo
from tests.factories import SYSTEMS, ThreadServer, fresh_pg_database, judgments, new_project

DIMENSIONS = ("overall", "style")
#: the store read itself, for references (the tests count the service's calls)
FETCH = repo.fetch_judgments


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request, tmp_path_factory) -> Iterator[ThreadServer]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('running') / 'r.db'}"
        with ThreadServer(Settings(database_url=url, streaming=False)) as s:
            yield s
    else:
        with (
            fresh_pg_database() as url,
            ThreadServer(Settings(database_url=url, streaming=False)) as s,
        ):
            yield s


def _rows(num: int, start: int) -> list[dict]:
    """Judgments over two dimensions, some shown B first, some pairs judged both ways round."""
    rows = judgments(num, start=start, seed=3)
    for k, r in enumerate(rows, start):
        r["dimension"] = DIMENSIONS[k % 2]
        r["shown_first"] = "ab"[k % 3 == 0]
    return rows


class _Counter:
    """Counts the judgment rows the service reads from the store."""

    def __init__(self, monkeypatch) -> None:
        self.rows = 0

        def counted(**kwargs):
            out = FETCH(**kwargs)
            self.rows += len(out)
            return out

        monkeypatch.setattr(repo, "fetch_judgments", counted)


def _reference(state, project_id: str, rule: DecisionRule) -> list[dict]:
    """The rows ``evalset decisions`` gives on every stored judgment, in arrival order."""
    with state.store.read() as conn:
        rows = [r for d in DIMENSIONS for r in FETCH(conn=conn, project_id=project_id, dimension=d)]
    rows.sort(key=lambda r: r["seq"])
    columns = ["item_id", "system_a", "system_b", "annotator_id", "winner", "dimension"]
    frame = pl.DataFrame([{k: r[k] for k in columns} for r in rows], schema=columns)
    report = decide_judgments(frame, rule)
    # a file knows each dimension's judged prompts, the service the registered ones
    drop = ("rule", "unused_prompts", "needs_new_prompts")
    return [{k: v for k, v in r.items() if k not in drop} for r in report.rows]


def _same(served: list[dict], expected: list[dict]) -> None:
    assert len(served) == len(expected)
    for s, e in zip(served, expected):
        for key, value in e.items():
            if isinstance(value, float):
                assert s[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (key, s, e)
            else:
                assert s[key] == value, (key, s, e)


def test_decisions_read_only_new_judgments_and_match_a_recomputation(server, monkeypatch):
    with httpx.Client(base_url=server.url, timeout=60) as api:
        project_id, headers = new_project(api)
        r = api.post(
            f"/projects/{project_id}/dimensions",
            json={"dimensions": [{"dimension_id": "style"}]},
            headers=headers,
        )
        assert r.status_code == 200, r.text
        url = f"/projects/{project_id}/decisions"
        assert api.get(url, headers=headers).json()["rows"] == []
        counter = _Counter(monkeypatch)
        sent = 0
        for size in (40, 1, 300, 60, 200):
            rows = _rows(size, sent)
            r = api.post(
                f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers
            )
            assert r.json()["accepted"] == size, r.text
            sent += size
            before = counter.rows
            for query, rule in (
                ({}, DecisionRule()),
                (
                    {"alpha": 0.2, "margin": 0.3, "unit": "judgment"},
                    DecisionRule(0.2, 0.3, "judgment"),
                ),
            ):
                got = api.get(url, params=query, headers=headers).json()
                assert got["num_judgments"] == sent
                _same(got["rows"], _reference(server.state, project_id, rule))
                assert all(r["unused_prompts"] == 12 - r["n_prompts"] for r in got["rows"])
            # the old route read all `sent` judgments on each of the two reads
            assert counter.rows - before <= size, (counter.rows - before, size, sent)
        decided = {r["decision"] for r in got["rows"]}
        assert decided - {"undecided"}, "the campaign should close some comparisons"


def _publish(state, project_id: str, dimension: str, pairs: list[tuple[int, int]]) -> None:
    """A posterior snapshot as the worker would publish it (no fit in a test)."""
    rng = np.random.default_rng(1)
    draws, systems = 200, SYSTEMS[:5]
    snap = StreamSnapshot(
        dimension=dimension,
        version=0,
        num_judgments=10,
        last_seq=10,
        method="laplace",
        created_at=time.time(),
        fit_seconds=0.1,
        diagnostics={},
        systems=tuple(systems),
        items=tuple(f"q{i}" for i in range(12)),
        pair_a=np.array([a for a, _ in pairs], np.int32),
        pair_b=np.array([b for _, b in pairs], np.int32),
        pair_judgments=np.ones(len(pairs)),
        pair_prompts=np.ones(len(pairs)),
        skill=rng.normal(0.0, 0.5, size=(draws, len(systems))).astype(np.float32),
        alpha=np.exp(rng.normal(0, 0.2, size=(draws // 4, 12))).astype(np.float32),
        b=np.sort(rng.normal(0, 1, size=(draws // 4, 12, 2)), axis=-1).astype(np.float32),
    )
    state.publish((project_id, dimension), snap)


def test_next_batch_state_from_the_tally_equals_the_one_from_every_judgment(server, monkeypatch):
    state = server.state
    with httpx.Client(base_url=server.url, timeout=60) as api:
        project_id, headers = new_project(api)
        api.post(
            f"/projects/{project_id}/dimensions",
            json={"dimensions": [{"dimension_id": "style"}]},
            headers=headers,
        )
        rows = _rows(400, 0)
        r = api.post(f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers)
        assert r.json()["accepted"] == 400
    # orientations the snapshots chose differently from the first judgments on some pairs
    _publish(state, project_id, "overall", [(1, 0), (0, 2), (3, 2), (1, 4)])
    _publish(state, project_id, "style", [(0, 1), (2, 0), (2, 3), (4, 1)])
    dims = list(DIMENSIONS)
    snapshot, maps = nbp._prepare(state, project_id, dims, 7, "w3", DecisionRule())
    with state.store.read() as conn:
        stored = {d: FETCH(conn=conn, project_id=project_id, dimension=d) for d in dims}
        prompts = [p["prompt_id"] for p in repo.list_prompts(conn=conn, project_id=project_id)]
    snaps = {d: state.snapshot(project_id, d) for d in dims}
    expected, names = prepare(
        [NamedFit(d, s.systems, s.pair_a, s.pair_b, None, s.skill) for d, s in snaps.items()],
        stored,
        systems=SYSTEMS,
        prompts=prompts,
        all_pairs=True,
        prior_seed=7,
    )
    all_rows = [r for d in dims for r in stored[d]]
    cells, exclude = cell_state(names, all_rows, annotator="w3")
    assert maps["names"] == names
    assert snapshot.version == expected.version == 400
    np.testing.assert_array_equal(snapshot.judged, expected.judged)
    np.testing.assert_array_equal(snapshot.system_judgments, expected.system_judgments)
    np.testing.assert_array_equal(snapshot.theta_mean, expected.theta_mean)
    np.testing.assert_array_equal(maps["cells"].shown_a, cells.shown_a)
    np.testing.assert_array_equal(maps["cells"].shown_b, cells.shown_b)
    np.testing.assert_array_equal(maps["exclude"], exclude)
    # the decisions are the family's (GET .../decisions' rows), read as the snapshot orients
    # each comparison; comparisons outside the family are never served
    family = {
        (r["dimension"], r["system_a"], r["system_b"]): r
        for r in _reference(state, project_id, DecisionRule())
    }
    got = snapshot.decisions
    swap = {"B better": "A better", "A better": "B better"}
    seen = 0
    for g, (d, a, b) in enumerate(names.comparisons):
        row, sign = family.get((d, a, b)), 1.0
        if row is None and (d, b, a) in family:
            row, sign = family[(d, b, a)], -1.0
        if row is None:
            # never compared in this dimension: outside the family, never served
            assert not maps["cells"].available[g].any() and got.num_judgments[g] == 0
            continue
        seen += 1
        assert maps["cells"].available[g].any()
        decision = got.names()[g]
        assert (swap.get(decision, decision) if sign < 0 else decision) == row["decision"]
        assert int(got.closed_at[g]) == (row["closed_at"] or 0)
        assert (
            int(got.num_obs[g]) == row["n_used"] and int(got.num_judgments[g]) == row["n_judgments"]
        )
        assert sign * got.net_used[g] == pytest.approx(row["net_preference"], rel=1e-9)
        assert sign * (got.b_share[g] - 0.5) + 0.5 == pytest.approx(row["b_share"], rel=1e-9)
        low = got.share_low[g] if sign > 0 else 1.0 - got.share_high[g]
        assert low == pytest.approx(row["b_share_low"], rel=1e-9)
        needed = got.needed[g]
        assert (int(round(needed)) if np.isfinite(needed) else None) == row["needed"]
    assert seen == len(family) == 10  # five pairs judged in each dimension
    # a later request reads only the judgments stored since
    counter = _Counter(monkeypatch)
    with httpx.Client(base_url=server.url, timeout=60) as api:
        r = api.post(
            f"/projects/{project_id}/judgments", json={"judgments": _rows(20, 400)}, headers=headers
        )
        r = api.post(f"/projects/{project_id}/next-batch", json={"size": 5}, headers=headers)
        assert r.status_code == 200, r.text
    assert counter.rows <= 20
