"""Diagnostics: our rank-normalised R-hat and bulk ESS against ArviZ's; importing ArviZ safely."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stan_free_models.posterior import Diagnostics, bulk_ess, rank_rhat

az = pytest.importorskip("arviz")


def test_bulk_ess_and_rhat_match_arviz():
    rng = np.random.default_rng(0)
    # autocorrelated chains (AR(1)) with one shifted chain
    x = np.zeros((4, 500, 3))
    for t in range(1, 500):
        x[:, t] = 0.8 * x[:, t - 1] + rng.normal(size=(4, 3))
    x[3] += 0.5
    ours_ess = bulk_ess(x)
    ours_rhat = rank_rhat(x)
    for k in range(3):
        ref_ess = float(az.ess(x[:, :, k], method="bulk"))
        ref_rhat = float(az.rhat(x[:, :, k], method="rank"))
        assert ours_ess[k] == pytest.approx(ref_ess, rel=0.02)
        assert ours_rhat[k] == pytest.approx(ref_rhat, rel=0.01)
    assert np.all(ours_rhat > 1.01)  # the shifted chain is detected


def test_diagnostics_pass_rules():
    good = Diagnostics(rhat={"theta": np.array([1.001, 1.004])}, num_divergences=0)
    assert good.passed()
    assert not Diagnostics(rhat={"theta": np.array([1.2])}).passed()
    assert not Diagnostics(rhat={"theta": np.array([1.0])}, num_divergences=3).passed()
    assert Diagnostics(rhat={"theta": np.array([1.0])}, num_divergences=3).passed(max_divergences=5)
    assert not Diagnostics(converged=False).passed()


_IMPORT = """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    {how}
print(any("ArviZ is undergoing" in str(w.message) for w in caught))
"""


def _import_in(cache: Path, how: str, processes: int = 1) -> list[subprocess.CompletedProcess]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    code = _IMPORT.format(how=how)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(processes)
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append(
            subprocess.CompletedProcess(p.args, p.returncode, stdout.decode(), stderr.decode())
        )
    return out


def test_arviz_imports_after_todays_stamp_and_processes_do_not_race(tmp_path):
    """ArviZ's first import of a day writes a stamp through one fixed temporary file, which
    made two test workers fail together (arviz-devs/arviz#2530); a stamp written first stops it."""
    # the reference: a plain import on a fresh cache warns (so it writes its stamp)
    (plain,) = _import_in(tmp_path / "plain", "import arviz")
    assert plain.returncode == 0 and plain.stdout.strip() == "True", plain.stderr
    # through import_arviz: today's stamp is there first, ArviZ neither warns nor writes
    runs = _import_in(
        tmp_path / "safe",
        "from stan_free_models.arviz_safe import import_arviz; import_arviz()",
        processes=4,
    )
    assert all(r.returncode == 0 for r in runs), [r.stderr[-500:] for r in runs]
    assert [r.stdout.strip() for r in runs] == ["False"] * 4
    stamp = tmp_path / "safe" / "arviz" / "daily_warning"
    assert stamp.read_text() == datetime.date.today().isoformat()
    assert not list(stamp.parent.glob("*.tmp"))  # no temporary file left behind
