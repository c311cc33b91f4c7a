#!/usr/bin/env python
"""How often evalset significance's strong-comparison note fires on simulated campaigns
(observed |net| >= STRONG_NET for any comparison), by share of the data; no fit needed.

The note was about theta's N(0, 1) prior pulling a strong comparison's model Δ towards 0;
the default reads Δ from each comparison's own judgments and gives it only with the
model-based options (``--cell-effect``, ``--lapse``).

    python research/strong_note_rate.py
"""

import numpy as np
import polars as pl

from services.cli.analysis import STRONG_NET
from stan_free_models.simulate import simulate_kind, subsample_index


def observed_net(frame):
    sign = (
        pl.when(pl.col("winner") == "b").then(1).when(pl.col("winner") == "a").then(-1).otherwise(0)
    )
    return (
        frame.with_columns(s=sign)
        .group_by("system_a", "system_b")
        .agg(pl.col("s").mean())["s"]
        .to_numpy()
    )


for kind, n in (("null", 40), ("paper", 20), ("varied", 20), ("rough", 10)):
    out = []
    for frac in (1.0, 0.3, 0.15, 0.05):
        fired = 0
        strong = 0
        total = 0
        for seed in range(n):
            full = pl.DataFrame(simulate_kind(kind, seed).rows)
            net = observed_net(full[subsample_index(full.height, frac, seed)])
            fired += bool((np.abs(net) >= STRONG_NET).any())
            strong += int((np.abs(net) >= STRONG_NET).sum())
            total += net.size
        out.append(f"{frac:.2f}: {fired}/{n} campaigns, {strong}/{total} comparisons")
    print(kind, "; ".join(out))
