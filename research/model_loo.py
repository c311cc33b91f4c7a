"""PSIS-LOO (ArviZ) of the default model against the paper preset on ChatEval NCM.

The two models describe different observations: the default every judgment (3
categories), the paper each cell's net rating (7 categories, rescaled 3u/n). They are
compared on what both predict: the net rating u = #B - #A of each cell judged exactly
three times. The default's P(u) is that of three independent judgments from its
category probabilities. Both are sampled with NUTS (the product's whitened sampler, the
model's own posterior: no cluster-robust widening), every prompt its own item.

    .venv/bin/python research/model_loo.py     # about 5 minutes on 2 cores
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import arviz as az
import numpy as np

from adaptive.core.data import read_judgments
from adaptive.estimation.fitting import preset_config
from adaptive.estimation.item_fit import _category_probs
from adaptive.estimation.pipeline import analyze

NCM = Path(__file__).parents[1] / "data" / "chateval_ncm" / "judgments.csv"
OUT = Path(__file__).parent / "item_fit" / "loo.jsonl"


def default_log_lik(analysis: Any, three: np.ndarray) -> np.ndarray:
    """(chain, draw, cells) log P(net rating) of three independent judgments."""
    cells = analysis.cells
    comp, item = cells.cell_comparison[three], cells.cell_item[three]
    theta, alpha, b = (analysis.posterior.draws[n] for n in ("theta", "alpha", "b"))
    p = _category_probs(theta[:, :, comp], alpha[:, :, item], b[:, :, item])  # (c, d, M, 3)
    pa, pt, pb = p[..., 0], p[..., 1], p[..., 2]
    by_net = {
        -3: pa**3,
        -2: 3 * pa**2 * pt,
        -1: 3 * pa * pt**2 + 3 * pa**2 * pb,
        0: pt**3 + 6 * pa * pt * pb,
        1: 3 * pb * pt**2 + 3 * pb**2 * pa,
        2: 3 * pb**2 * pt,
        3: pb**3,
    }
    net = cells.cell_net[three].astype(int)
    prob = np.select([net == u for u in by_net], list(by_net.values()))
    return np.asarray(np.log(np.maximum(prob, 1e-300)))


def paper_log_lik(analysis: Any, three: np.ndarray) -> np.ndarray:
    cells = analysis.cells
    comp, item = cells.cell_comparison[three], cells.cell_item[three]
    theta, alpha, b = (analysis.posterior.draws[n] for n in ("theta", "alpha", "b"))
    p = _category_probs(theta[:, :, comp], alpha[:, :, item], b[:, :, item])  # (c, d, M, 7)
    y = cells.cell_rating[three] + 3
    prob = np.take_along_axis(p, y[None, None, :, None], axis=-1)[..., 0]
    return np.asarray(np.log(np.maximum(prob, 1e-300)))


def main() -> None:
    judgments = read_judgments(NCM)
    fits = {}
    seconds = {}
    for name, config in (
        ("default", preset_config("default", method="nuts", robust=False)),
        ("paper", preset_config("paper", method="nuts")),
    ):
        start = time.perf_counter()
        fits[name] = analyze(judgments, config=config, group_redundant=False)
        seconds[name] = round(time.perf_counter() - start, 1)
    cells = fits["default"].cells
    three = np.flatnonzero(cells.cell_count == 3)
    assert np.array_equal(fits["paper"].cells.cell_net, cells.cell_net)
    log_lik = {
        "default": default_log_lik(fits["default"], three),
        "paper": paper_log_lik(fits["paper"], three),
    }
    data = {
        name: az.from_dict(
            posterior={"theta": fits[name].posterior.draws["theta"]}, log_likelihood={"net": ll}
        )  # fmt: skip
        for name, ll in log_lik.items()
    }
    table = az.compare(data, ic="loo")
    print(table)
    rows = []
    for name in data:
        loo = az.loo(data[name], pointwise=True)  # type: ignore[no-untyped-call]
        rows.append(
            {
                "model": name,
                "num_cells": int(three.shape[0]),
                "elpd_loo": round(float(loo.elpd_loo), 2),
                "se": round(float(loo.se), 2),
                "p_loo": round(float(loo.p_loo), 2),
                "pareto_k_above_0.7": int((loo.pareto_k.values > 0.7).sum()),
                "elpd_diff": round(float(table.loc[name, "elpd_diff"]), 2),
                "dse": round(float(table.loc[name, "dse"]), 2),
                "fit_seconds": seconds[name],
                "max_rhat": fits[name].posterior.diagnostics.summary()["max_rhat"],
            }
        )
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
