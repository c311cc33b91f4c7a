"""The LOCO curve on the held-out comparison's own judgments."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from adaptive.prompts.loco_heldout import heldout_curve
from adaptive.prompts.prune_folds import Judged, cell_table


def _table(rng: np.random.Generator, num_p: int = 100, num_c: int = 3) -> Judged:
    """Prompts 0-19 decide every comparison for B, the rest are coin flips; 3 judgments a cell."""
    prompt, comp = np.meshgrid(np.arange(num_p), np.arange(num_c), indexing="ij")
    prompt, comp = np.repeat(prompt.ravel(), 3), np.repeat(comp.ravel(), 3)
    p_b = np.where(prompt < 20, 0.95, 0.5)
    x = np.where(rng.random(len(prompt)) < p_b, 1.0, -1.0)
    x[comp == 2] = np.where(rng.random(int((comp == 2).sum())) < 0.5, 1.0, -1.0)  # no signal
    return Judged(comp, prompt, x, np.tile(np.arange(3), num_p * num_c), num_p, num_c)


def test_the_curve_measures_the_policys_top_k_on_the_folds_judgments():
    rng = np.random.default_rng(0)
    table = cell_table(_table(rng))
    good = np.arange(100)  # the decisive prompts first
    bad = good[::-1]
    results = [SimpleNamespace(fold=c, order={"prompt": good, "worst": bad}) for c in range(3)]
    rows = heldout_curve(results, table, ("prompt", "worst", "random"), (20, 100), rng)
    by = {(r["policy"], r["k"]): r for r in rows}
    assert by[("prompt", 20)]["heldout_folds"] == 2  # comparison 2 is not clearly signed
    assert by[("prompt", 20)]["heldout_se_ratio"] < 0.8  # the decisive 20 beat all 100
    assert by[("worst", 20)]["heldout_se_ratio"] > 3.0  # coin flips: no signal
    assert by[("random", 20)]["heldout_se_ratio"] == pytest.approx(np.sqrt(5), rel=0.3)
    for policy in ("prompt", "worst", "random"):
        assert by[(policy, 100)]["heldout_se_ratio"] == pytest.approx(1.0)
