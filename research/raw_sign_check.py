"""Each comparison's model Δ against its own raw judgments, on subsamples of a real log.

For every share of the judgments kept (uniformly at random, per seed), fits the default
model (with ``--lapse``, the model-based one) on the fast path and reports per comparison
whether the model's net preference has the sign of the observed one (mean over prompts of
each cell's mean signed judgment), how many comparisons are adjusted-significant, and how
many posterior predictive checks flag.

    python research/raw_sign_check.py --data data/chateval_ncm/judgments.csv --fractions 1 0.3 0.15 --seeds 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def main() -> int:
    from adaptive.core.data import read_judgments
    from adaptive.estimation.fitting import preset_config
    from adaptive.estimation.pipeline import analyze
    from adaptive.estimation.significance import compare

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT / "data/chateval_ncm/judgments.csv"))
    parser.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.3, 0.15])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--refine-sweeps", type=int, default=None)
    lapse = parser.add_mutually_exclusive_group()
    lapse.add_argument(
        "--lapse",
        action="store_true",
        help="random answers at a learned rate (the model-based path: brings the cell effect; "
        "the default when research/how_the_defaults_were_chosen.md measured it)",
    )
    lapse.add_argument(
        "--no-lapse",
        action="store_true",
        help="no random answers: today the default as it is without either flag (the robust "
        "intervals); the history's --no-lapse figures are the model-based default of the time",
    )
    args = parser.parse_args()
    full = read_judgments(args.data)
    print(
        "fraction  seed  comparisons  sign_agrees  sign_agrees_where_observed_clear  adjusted  ppc_flags  refined  seconds"
        + ("" if args.no_lapse else "  lapse")
    )
    for fraction in args.fractions:
        for seed in range(args.seeds if fraction < 1 else 1):
            frame = full
            if fraction < 1:
                rng = np.random.default_rng(20_000 + seed)
                keep = np.sort(
                    rng.choice(full.height, round(fraction * full.height), replace=False)
                )
                frame = full[keep]
            overrides: dict[str, Any] = (
                {} if args.refine_sweeps is None else {"refine_sweeps": args.refine_sweeps}
            )
            if args.no_lapse:
                overrides["lapse"] = False
            config = preset_config("default", method="fast", seed=seed, **overrides)
            start = time.perf_counter()
            result = analyze(frame, config=config)
            rows = compare(result.posterior, result.cells)
            seconds = time.perf_counter() - start
            agree = [r["sign_agrees"] for r in rows]
            # comparisons whose observed Δ is at least 2 standard errors from 0
            clear = [
                r["sign_agrees"] for r in rows if abs(r["observed_net"]) >= 2 * r["observed_se"]
            ]
            print(
                f"{fraction:8.2f}  {seed:4d}  {len(rows):11d}  {sum(agree):5d}/{len(agree):<5d}  "
                f"{sum(clear):15d}/{len(clear):<16d}  {sum(r['significant_adjusted'] for r in rows):8d}  "
                f"{sum(bool(r['ppc_flag']) for r in rows):9d}  {'refine' in result.posterior.info!s:7s}  {seconds:7.1f}"
                + (f"  {rate:.3f}" if (rate := _lapse_rate(result)) is not None else ""),
                flush=True,
            )
    return 0


def _lapse_rate(result: Any) -> float | None:
    """The fitted share of judgments answered at random (None with --no-lapse)."""
    draws = result.posterior.draws.get("lapse")
    return None if draws is None else float(draws.mean())


if __name__ == "__main__":
    raise SystemExit(main())
