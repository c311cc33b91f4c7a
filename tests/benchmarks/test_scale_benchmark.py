"""benchmarks/scale.py runs end to end at tiny sizes and reports every figure with its ratio."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "scale.py"


def test_simulated_campaign_has_the_documented_shape():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from scale import ring_pairs, simulate
    finally:
        sys.path.remove(str(SCRIPT.parent))
    pairs = ring_pairs(np.random.default_rng(0), 200)
    assert pairs.shape == (1000, 2) and (pairs[:, 0] < pairs[:, 1]).all()
    assert len({tuple(p) for p in pairs}) == 1000  # each system with 10 distinct neighbours
    assert np.bincount(pairs.ravel(), minlength=200).tolist() == [10] * 200
    frame = simulate(5000)
    assert frame.height == 5000 and frame["item_id"].n_unique() <= 100
    assert set(frame["winner"].unique()) == {"a", "b", "tie"}
    assert (frame["system_a"] != frame["system_b"]).all()


@pytest.mark.slow
def test_benchmark_runs_at_tiny_sizes(tmp_path):
    out = tmp_path / "scale.json"
    cmd = [sys.executable, str(SCRIPT), "--sizes", "1000,2000", "--seeds", "1", "--json", str(out)]
    # its own process group: a timeout stops the per-size child processes too
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=1800)  # ~2 min on an idle 2-core machine
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, stderr
    assert "ratio" in stdout and "replay: per batch of 100 (s)" in stdout
    small, large = json.loads(out.read_text())
    assert (small["judgments"], large["judgments"]) == (1000, 2000)
    for r in (small, large):
        assert r["fit_converged"] and r["skill_update_ok"] and r["batch_size"] == 100
        assert r["replay_batches"] == 5 and r["fit_peak_gb"] > 0
