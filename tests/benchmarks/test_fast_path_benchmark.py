"""benchmarks/fast_path.py runs end to end at a tiny size and prints every side and ratio."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "fast_path.py"


def test_scale_log_has_the_documented_shape():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from fast_path import scale_prompts, simulate_scale
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert scale_prompts(100_000) == 2300 and scale_prompts(3000) == 69
    frame = simulate_scale(3000)
    assert frame.height == 3000
    assert frame["item_id"].n_unique() == 69
    assert (frame["system_a"] != frame["system_b"]).all()
    systems = np.sort(np.stack([frame["system_a"], frame["system_b"]], axis=1), axis=1)
    pairs = {tuple(p) for p in systems}
    assert len(pairs) == 78 and len({s for p in pairs for s in p}) == 13  # every pair of 13
    # both orders are shown
    assert 0.4 < (frame["system_a"] < frame["system_b"]).mean() < 0.6
    assert set(frame["winner"].unique()) == {"a", "b", "tie"}
    cells = frame.with_columns(lo=systems[:, 0], hi=systems[:, 1]).group_by("lo", "hi", "item_id")
    counts = cells.len()["len"]
    assert (counts == 1).mean() > 0.6  # most judged cells judged once


@pytest.mark.slow
def test_benchmark_runs_at_a_tiny_size():
    cmd = [sys.executable, str(SCRIPT), "--comparisons", "3", "--prompts", "12"]
    # its own process group: a timeout stops the sides' processes too
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=1200)  # ~1 min on an idle 2-core machine
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, stderr
    lines = stdout.splitlines()
    sides = [json.loads(line) for line in lines if line.startswith("{")]
    assert [s["side"] for s in sides] == ["plain", "product-default", "product-paper"]
    for s in sides:
        assert s["exit_code"] == 0
        assert math.isfinite(s["seconds"]) and s["seconds"] > 0
        assert math.isfinite(s["peak_rss_mb"]) and s["peak_rss_mb"] > 0
    for name in ("product-default / plain", "product-paper / plain"):
        (line,) = [line for line in lines if line.startswith(name)]
        ratio = float(re.search(r"([0-9.]+)x", line).group(1))
        assert math.isfinite(ratio) and ratio > 0
    assert "largest gap" in stderr  # the paper preset's theta against the plain side's
