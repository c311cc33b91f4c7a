"""Re-estimation fits on Ray (``refits="ray"``): the same snapshots as local fits, spread over
the cluster's nodes, several keys at once and never one key twice at once.

The cluster test starts a real two-node local Ray cluster (``ray.cluster_utils.Cluster``: a
head and one more node, one CPU each) and is slow (about 20 s: two nodes start and each
node's worker compiles the fit once). The tests without Ray check the scheduling of several
fast-update threads and what the Ray wrapper adds to a result.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Hashable, Iterator
from typing import Any

import numpy as np
import polars as pl
import pytest

from adaptive.estimation import streaming as st
from services.runtime.ray_fits import to_host, with_node
from services.runtime.refresher import Refresher
from services.settings import Settings
from tests.factories import STUCK_SECONDS, SYSTEMS, simulate

#: two keys of simulated judgments (5 judged systems, 12 prompts); both rounds' sizes share
#: one padded shape (200..256 judgments), so each process compiles the fit once
KEYS = (("p1", "overall"), ("p2", "overall"))
ROUNDS = (200, 240)
FAST = {"nuts": False, "fast_num_draws": 200, "snapshot_max_draws": 200}
#: what differs between two fits of the same judgments: when and how long, and where
UNCOMPARED = {"created_at", "fit_seconds"}
UNCOMPARED_DIAGNOSTICS = {"seconds", "fitted_on", "compile_s", "compiles", "longest_compile"}
#: Ray and its dependencies emit these at start-up on some platforms (and JAX's fork warning
#: when Ray starts its processes after JAX has); nothing else is allowed
RAY_WARNINGS = [
    "ignore::UserWarning:ray",
    "ignore:.*pkg_resources.*:UserWarning",
    "ignore::pytest.PytestUnraisableExceptionWarning",
]


class Memory:
    """An in-memory stand-in for the store of several keys (the store has its own tests)."""

    def __init__(self) -> None:
        self.frames = {key: simulate(ROUNDS[-1], seed=i) for i, key in enumerate(KEYS)}
        self.visible = dict.fromkeys(KEYS, 0)
        self.published: dict[Hashable, list[st.Snapshot]] = {key: [] for key in KEYS}

    def load(self, key: Any) -> st.Source | None:
        n = self.visible[key]
        if n == 0:
            return None
        frame = self.frames[key].head(n)
        return st.Source(frame, key[1], SYSTEMS, frame.height, n)

    def publish(self, key: Any, snapshot: st.Snapshot) -> int:
        self.published[key].append(snapshot)
        return len(self.published[key])

    def latest(self, key: Any) -> st.Snapshot | None:
        return self.published[key][-1] if self.published[key] else None


class Watched(Refresher):
    """A refresher that records when each update of a key ran, and (once armed) marks a key
    dirty again as its update starts: a batch arriving during the fit, which a free thread
    would take at once if nothing stopped it."""

    def __init__(self, memory: Memory, config: Settings) -> None:
        super().__init__(
            load_fn=memory.load, publish_fn=memory.publish, latest_fn=memory.latest, config=config
        )
        self.memory = memory
        self.calls: list[tuple[Hashable, float, float]] = []  # (key, started, ended)
        self.renotify: set[Hashable] = set()  # keys to mark dirty once at their next update
        self._calls_lock = threading.Lock()

    def update(self, key: Hashable) -> st.Snapshot | None:
        started = time.monotonic()
        with self._calls_lock:
            again = key in self.renotify
            self.renotify.discard(key)
        if again:
            self.notify(key, last_seq=self.memory.visible[key])
        try:
            return super().update(key)
        finally:
            with self._calls_lock:
                self.calls.append((key, started, time.monotonic()))


def same_key_overlaps(calls: list[tuple[Hashable, float, float]]) -> list[tuple[Hashable, ...]]:
    """Updates of one key that ran at the same time (each pair once)."""
    found = []
    for key in {c[0] for c in calls}:
        spans = sorted((s, e) for k, s, e in calls if k == key)
        found += [(key, a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    return found


def keys_overlapped(calls: list[tuple[Hashable, float, float]]) -> bool:
    """Whether updates of two different keys ran at the same time."""
    return any(k1 != k2 and s1 < e2 and s2 < e1 for k1, s1, e1 in calls for k2, s2, e2 in calls)


def max_difference(a: st.Snapshot, b: st.Snapshot) -> float:
    """The largest absolute difference between two snapshots' numbers (inf when anything
    else, a name, a shape, a flag, differs)."""
    worst = 0.0
    for field in dataclasses.fields(st.Snapshot):
        if field.name in UNCOMPARED:
            continue
        x, y = getattr(a, field.name), getattr(b, field.name)
        if field.name == "diagnostics":
            x = {k: v for k, v in x.items() if k not in UNCOMPARED_DIAGNOSTICS}
            y = {k: v for k, v in y.items() if k not in UNCOMPARED_DIAGNOSTICS}
        if isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return float("inf")
            pairs = [(x[k], y[k]) for k in x]
        else:
            pairs = [(x, y)]
        for u, v in pairs:
            if isinstance(u, np.ndarray) or isinstance(u, float):
                u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
                if u.shape != v.shape or not np.array_equal(np.isnan(u), np.isnan(v)):
                    return float("inf")
                if u.size:
                    worst = max(worst, float(np.nanmax(np.abs(u - v))))
            elif u != v:
                return float("inf")
    return worst


# ---------------------------------------------------------------- without Ray


class Sleeper(Watched):
    """A fit that only takes time: the scheduling of several fast-update threads alone."""

    def _fit(self, source, method, options, previous=None, *, with_base=False, key=None):  # noqa: ANN001
        time.sleep(0.1)
        return _fake_snapshot(source), None


def _fake_snapshot(source: st.Source) -> st.Snapshot:
    empty = np.zeros((1, 0), np.float32)
    return st.Snapshot(
        dimension=source.dimension,
        version=0,
        num_judgments=source.num_judgments,
        last_seq=source.last_seq,
        method=st.FAST,
        created_at=0.0,
        fit_seconds=0.0,
        diagnostics={"converged": True},
        systems=source.systems,
        items=(),
        pair_a=np.zeros(0, np.int32),
        pair_b=np.zeros(0, np.int32),
        pair_judgments=np.zeros(0, np.int64),
        pair_prompts=np.zeros(0, np.int64),
        skill=empty,
        alpha=empty,
        b=np.zeros((1, 0, 2), np.float32),
    )


def test_parallel_threads_fit_keys_at_once_and_never_one_key_twice() -> None:
    memory = Memory()
    config = Settings(**FAST, refit_parallel=2, prepare_next_shape=False)
    refresher = Sleeper(memory, config).start()
    try:
        assert sum(t.name.startswith("refresh-fast") for t in refresher._threads) == 2
        for n in ROUNDS:
            refresher.renotify = set(KEYS) if n == ROUNDS[-1] else set()
            for key in KEYS:
                memory.visible[key] = n
                refresher.notify(key, last_seq=n)
            assert refresher.wait_idle(STUCK_SECONDS)
    finally:
        refresher.stop()
    assert same_key_overlaps(refresher.calls) == []
    assert keys_overlapped(refresher.calls), "two threads never fitted two keys at once"
    # every key's batches published, and each key's renotified update found nothing new
    assert {k: [s.num_judgments for s in v] for k, v in memory.published.items()} == {
        key: list(ROUNDS) for key in KEYS
    }
    assert len(refresher.calls) == 2 * len(KEYS) * len(ROUNDS) - len(KEYS)


def test_one_fast_thread_by_default() -> None:
    refresher = Refresher(
        load_fn=lambda key: None,
        publish_fn=lambda key, snapshot: None,
        latest_fn=lambda key: None,
        config=Settings(**FAST),
    )
    assert refresher.fit_parallel() == 1
    assert Settings(refit_parallel=3).refits == "local"
    refresher.config = Settings(**FAST, refit_parallel=3)
    assert refresher.fit_parallel() == 3


def test_with_node_names_the_node_in_the_snapshot_and_its_base() -> None:
    source = st.Source(pl.DataFrame(), "overall", SYSTEMS, 10, 10)
    snapshot = _fake_snapshot(source)
    assert with_node(snapshot, "n1").diagnostics == {"converged": True, "fitted_on": "n1"}
    assert snapshot.diagnostics == {"converged": True}  # a new snapshot, not an edit
    fitted, base = with_node((snapshot, None), "n2")
    assert fitted.diagnostics["fitted_on"] == "n2" and base is None


def test_to_host_turns_jax_arrays_into_numpy_arrays() -> None:
    import jax.numpy as jnp

    value = {"mode": {"global": jnp.arange(3.0)}, "draws": [jnp.ones(2)], "n": 3}
    host = to_host(value)
    assert type(host["mode"]["global"]) is np.ndarray and type(host["draws"][0]) is np.ndarray
    np.testing.assert_array_equal(host["mode"]["global"], [0.0, 1.0, 2.0])
    assert host["n"] == 3
    plain = {"a": [np.ones(2), ("x", 1.0)]}
    assert to_host(plain) is plain  # nothing to convert: the value itself, not a copy


# ---------------------------------------------------------------- on a two-node Ray cluster


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Any]:
    """A head and one more node, one CPU each, joined by this process."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    address = os.environ.pop("RAY_ADDRESS", None)
    ray.shutdown()
    local = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        local.add_node(num_cpus=1)
        local.wait_for_nodes()
        ray.init(address=local.address, log_to_driver=False)
        yield ray
    finally:
        ray.shutdown()
        local.shutdown()
        if address is not None:
            os.environ["RAY_ADDRESS"] = address


def _published_by(refresher: Watched, memory: Memory) -> dict[Hashable, list[st.Snapshot]]:
    """Both rounds through a started refresher: every key's batch at once, then (armed to
    see a batch arrive during each fit) the next."""
    refresher.start()
    try:
        for n in ROUNDS:
            refresher.renotify = set(KEYS) if n == ROUNDS[-1] else set()
            for key in KEYS:
                memory.visible[key] = n
                refresher.notify(key, last_seq=n)
            assert refresher.wait_idle(STUCK_SECONDS)
    finally:
        refresher.stop()
    return memory.published


# about 20 s on an idle 2-core machine: two nodes start, and each node's worker compiles the fit
@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(1800)
@pytest.mark.filterwarnings(*RAY_WARNINGS)
def test_ray_refits_match_local_fits_and_spread_over_both_nodes(two_nodes: Any) -> None:
    nodes = {n["NodeID"] for n in two_nodes.nodes() if n["Alive"]}
    assert len(nodes) == 2
    config = Settings(**FAST, refits="ray", refit_parallel=2, prepare_next_shape=False)
    remote = Watched(memory := Memory(), config)
    on_ray = _published_by(remote, memory)
    local = Watched(local_memory := Memory(), Settings(**FAST, prepare_next_shape=False))
    here = _published_by(local, local_memory)

    for key in KEYS:
        assert [s.num_judgments for s in on_ray[key]] == list(ROUNDS)
        assert [s.num_judgments for s in here[key]] == list(ROUNDS)
        # (a) the same judgments, the same seed, the same warm start: the same snapshot
        for a, b in zip(on_ray[key], here[key]):
            assert max_difference(a, b) == 0.0, key
            assert "fitted_on" not in b.diagnostics
    # (b) the two keys' fits ran at once, so on both nodes (one CPU each)
    fitted_on = {s.diagnostics["fitted_on"] for snaps in on_ray.values() for s in snaps}
    assert fitted_on == nodes
    assert keys_overlapped(remote.calls)
    # (c) a batch arrived during every second-round fit, and no key was fitted twice at once
    assert same_key_overlaps(remote.calls) == []
    assert len(remote.calls) == 2 * len(KEYS) * len(ROUNDS) - len(KEYS)
