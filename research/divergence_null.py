"""How often the live-vs-full check flags `diverging` when nothing diverged (a null study).

Two draw sets of one posterior (correlated skills, like a fit's) stand for the full refit
and the live snapshot; the check's false-alarm rate is the share of repetitions flagged.
Settings: systems 5 / 13 / 50; full draws independent (Laplace, 500) or autocorrelated
(NUTS: AR(1) chains with rho 0.9, ESS estimated by ArviZ and passed as min_ess_bulk).

    python research/divergence_null.py   # rows: research/checks/divergence_null.jsonl
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import arviz as az
import numpy as np

from adaptive.estimation.divergence import snapshot_divergence
from adaptive.estimation.snapshot import Snapshot


def _snapshot(skill: np.ndarray, diagnostics: dict) -> Snapshot:
    z = np.zeros(0, np.int64)
    s = skill.shape[1]
    return Snapshot(
        "d",
        1,
        1000,
        1000,
        "nuts",
        0.0,
        0.0,
        diagnostics,
        tuple(f"s{i}" for i in range(s)),
        (),
        z,
        z,
        z,
        z,
        skill,
        np.zeros((1, 0)),
        np.zeros((1, 0, 2)),
    )


def _ar1(rng: np.random.Generator, n: int, s: int, rho: float) -> np.ndarray:
    x = np.empty((n, s))
    x[0] = rng.normal(size=s)
    for t in range(1, n):
        x[t] = rho * x[t - 1] + np.sqrt(1 - rho**2) * rng.normal(size=s)
    return x


def main() -> None:
    rows = []
    for systems in (5, 13, 50):
        for kind in ("laplace", "nuts"):
            flagged, max_sd = 0, []
            for rep in range(200):
                rng = np.random.default_rng(1000 * systems + rep)
                mix = rng.normal(size=(systems, systems)) / np.sqrt(systems)
                means = np.linspace(-1, 1, systems)
                if kind == "nuts":  # 2 chains x 500, autocorrelated
                    z = np.concatenate([_ar1(rng, 500, systems, 0.9) for _ in range(2)])
                    draws = z @ mix * 0.2 + means
                    idata = az.convert_to_dataset(draws.reshape(2, 500, systems))
                    ess = float(az.ess(idata, method="bulk").to_array().values.min())
                    diag = {"min_ess_bulk": ess}
                else:
                    draws = rng.normal(size=(500, systems)) @ mix * 0.2 + means
                    diag = {}
                live = rng.normal(size=(500, systems)) @ mix * 0.2 + means
                full = _snapshot(draws, diag)
                d = snapshot_divergence(full, replace(full, skill=live, method="laplace"))
                flagged += d["diverging"]
                max_sd.append(d["max_sd"])
            rows.append(
                {
                    "systems": systems,
                    "full_draws": kind,
                    "reps": 200,
                    "flagged": flagged,
                    "max_sd_median": round(float(np.median(max_sd)), 3),
                    "max_sd_p95": round(float(np.quantile(max_sd, 0.95)), 3),
                }
            )
            print(rows[-1])
    out = Path(__file__).parent / "checks" / "divergence_null.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
