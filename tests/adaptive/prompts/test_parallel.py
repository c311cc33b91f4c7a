"""Fan-out of folds: only adaptive/prompts/parallel.py imports Ray; serial and Ray give identical results."""

from __future__ import annotations

import ast
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from adaptive.prompts import parallel

ROOT = Path(__file__).resolve().parents[3]

# Ray and its dependencies emit these at start-up on some platforms; nothing else is allowed
RAY_WARNINGS = [
    "ignore::UserWarning:ray",
    "ignore:.*pkg_resources.*:UserWarning",
    "ignore::pytest.PytestUnraisableExceptionWarning",
]


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_parallel_imports_ray():
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("adaptive", "stan_free_models")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "parallel.py" and "ray" in imports_of(path)
    ]
    assert offenders == []
    assert "ray" in imports_of(ROOT / "adaptive" / "prompts" / "parallel.py")


def noisy_stat(shared: np.ndarray, item: int) -> float:
    """A deterministic function of (shared, item), standing in for a fold."""
    rng = np.random.default_rng(item)
    return float(np.sum(shared * rng.normal(size=shared.shape)))


def test_serial_map_and_progress():
    seen = []
    results, info = parallel.map_items(
        noisy_stat, np.arange(5.0), [3, 1, 2], workers=1, progress=lambda d, t: seen.append((d, t))
    )
    assert results == [noisy_stat(np.arange(5.0), i) for i in (3, 1, 2)]
    assert info.backend == "serial" and seen == [(1, 3), (2, 3), (3, 3)]


@pytest.fixture
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.ray
@pytest.mark.filterwarnings(*RAY_WARNINGS)
def test_ray_matches_serial(local_ray):
    shared = np.linspace(0, 1, 1000)
    items = list(range(7))
    serial, _ = parallel.map_items(noisy_stat, shared, items, workers=1)
    done = []
    remote, info = parallel.map_items(
        noisy_stat, shared, items, workers=2, progress=lambda d, t: done.append(d)
    )
    assert remote == serial  # bit for bit, in item order
    assert info.backend == "ray" and done == list(range(1, 8))
    # where each item ran, for diagnostics: one entry per item, an address of this machine
    assert len(info.node_ids) == len(info.node_ips) == len(info.hostnames) == len(items)
    assert all(ip.count(".") == 3 for ip in info.node_ips)
    assert set(info.hostnames) == {socket.gethostname()}


@pytest.mark.ray
@pytest.mark.filterwarnings(*RAY_WARNINGS)
def test_folds_run_on_both_nodes_of_a_cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)

        def slow_fold(shared: float, item: int) -> int:  # pickled by value: a closure
            time.sleep(shared)
            return item * item

        results, info = parallel.map_items(slow_fold, 0.5, list(range(6)), workers=2)
        assert results == [i * i for i in range(6)]
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert len(alive) == 2
        assert set(info.node_ids) == alive  # every node ran some folds
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.filterwarnings(*RAY_WARNINGS)
def test_loco_folds_identical_serial_and_ray(local_ray):
    from adaptive.prompts.loco import run_loco
    from tests.factories import TINY_LOCO, tiny_loco_data

    data = tiny_loco_data(num_prompts=10)
    serial, _ = run_loco(data, TINY_LOCO, workers=1, folds=[0, 2, 5])
    remote, info = run_loco(data, TINY_LOCO, workers=2, folds=[0, 2, 5])
    assert info.backend == "ray"
    for s, r in zip(serial, remote):
        assert s.fold == r.fold and s.se_full == r.se_full
        for policy in TINY_LOCO.policies:
            np.testing.assert_array_equal(s.se[policy], r.se[policy])


@pytest.mark.filterwarnings(*RAY_WARNINGS)
def test_ray_up_config_passes_rays_own_checks():
    """deploy/ray-cluster.yaml as `ray up` prepares and validates it (no hosts contacted)."""
    yaml = pytest.importorskip("yaml")
    pytest.importorskip("jsonschema")
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = prepare_config(yaml.safe_load((ROOT / "deploy" / "ray-cluster.yaml").read_text()))
    validate_config(config)
    node = config["available_node_types"][config["head_node_type"]]
    assert node["min_workers"] == len(config["provider"]["worker_ips"])
    # every host installs this checkout and starts Ray from its venv: the CLI's fold code is there
    assert any("pip install -q -e ." in c for c in config["setup_commands"])
    assert "--address=$RAY_HEAD_IP:6379" in " ".join(config["worker_start_ray_commands"])
