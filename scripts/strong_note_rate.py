#!/usr/bin/env python
"""How often evalset significance's strong-comparison note fires on simulated campaigns
(observed |net| >= STRONG_NET for any comparison), by share of the data; no fit needed."""

import sys

sys.path.insert(0, "scripts")
import numpy as np
import polars as pl
from calibration import campaign, subsample

from services.cli.analysis import STRONG_NET


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
            full = pl.DataFrame(campaign(kind, seed, 20, 200).rows)
            net = observed_net(subsample(full, frac, seed))
            fired += bool((np.abs(net) >= STRONG_NET).any())
            strong += int((np.abs(net) >= STRONG_NET).sum())
            total += net.size
        out.append(f"{frac:.2f}: {fired}/{n} campaigns, {strong}/{total} comparisons")
    print(kind, "; ".join(out))
