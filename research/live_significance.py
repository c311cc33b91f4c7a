"""Calibration of the service's live significance answer (`GET /projects/{p}/significance`).

The service answers from its newest snapshot: a per-system fast fit of every judgment so far
(``adaptive.estimation.streaming.stream_config``, the cell effect on, Gaussian item draws), turned into
rows by ``services.answers.pair_rows``. This script fits simulated campaigns the way the
service does and counts, per share of the data kept:

* null campaigns (every system equal): the share of campaigns with any adjusted-significant
  comparison, by the model alone (the live answer until it took the data's half) and by the
  model and the data together (the live answer now, as `evalset significance`);
* campaigns in the paper's setting or the varied one: adjusted flags, and flags whose sign is
  against the true Δ.

    python research/live_significance.py --kind null --campaigns 40 --fractions 1 0.3 0.15 --jsonl research/calibration/live_null.jsonl

``--jsonl FILE`` appends one line per fit; a fit already in FILE is not run again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from calibration import KINDS, campaign, fitted_truth, record, subsample  # noqa: E402

from adaptive.estimation.significance import adjusted_verdicts, observed_p_values  # noqa: E402


def live_rows(frame: pl.DataFrame, systems, seed: int) -> tuple[list[dict], object, bool]:
    """The rows `GET /significance` would answer with after a re-estimation on ``frame``,
    the cells, and whether the fit passed the diagnostics the service publishes on."""
    from adaptive.core.cells import build_cells
    from adaptive.estimation.streaming import fit_snapshot, stream_config
    from services.answers import pair_rows

    snap = fit_snapshot(
        frame,
        dimension="overall",
        systems=list(systems),
        config=stream_config("fast", seed=seed),
        last_seq=frame.height,
    )
    assert not isinstance(snap, tuple)
    cells = build_cells(frame, dimension="overall", systems=list(systems))
    return pair_rows(snap), cells, bool(snap.diagnostics.get("passed"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(KINDS), default="null")
    parser.add_argument("--campaigns", type=int, default=40)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.3, 0.15])
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--jsonl", default=None)
    parser.add_argument(
        "--summarize", nargs="+", default=None, help="re-print earlier --jsonl files"
    )
    args = parser.parse_args()

    records: list[dict] = []
    done: set[tuple] = set()
    for path in args.summarize or (
        [args.jsonl] if args.jsonl and os.path.exists(args.jsonl) else []
    ):
        for line in open(path):
            rec = json.loads(line)
            done.add((rec["kind"], rec["seed"], rec["fraction"]))
            if args.summarize or rec["kind"] == args.kind:
                records.append(rec)
    seeds = [] if args.summarize else range(args.first_seed, args.first_seed + args.campaigns)
    for seed in seeds:
        todo = [f for f in args.fractions if (args.kind, seed, f) not in done]
        if not todo:
            continue
        camp = campaign(args.kind, seed, args.comparisons, args.prompts)
        full = pl.DataFrame(camp.rows)
        for fraction in todo:
            frame = subsample(full, fraction, seed)
            start = time.perf_counter()
            rows, cells, passed = live_rows(frame, camp.systems, seed)
            seconds = time.perf_counter() - start
            # the true Δ of each pair over its judged prompts (rows are in the cells' order)
            truth = fitted_truth(camp, cells)
            truth[np.abs(truth) < 1e-9] = 0.0  # a null's exact 0 (rounding leaves ~1e-17)
            sign = np.sign([r["mean"] for r in rows])
            # the model alone (the live answer before it took the data's half), and the rule of
            # `evalset significance`: the model's and the data's adjusted verdicts in the same
            # direction, recomputed here from the cells (the snapshot's pairs are the cells'
            # comparisons, in order) as a check of the service's own answer
            flagged = adjusted_verdicts(np.array([r["p_two_sided"] for r in rows]))
            obs_mean, obs_p = observed_p_values(cells)
            both = flagged & adjusted_verdicts(obs_p) & (sign == np.sign(obs_mean))
            if "model_adjusted" in rows[0]:
                served = np.array([r["significant_adjusted"] for r in rows])
                assert np.array_equal(served, both), (served, both)
            rec = {
                "kind": args.kind,
                "seed": seed,
                "fraction": fraction,
                "seconds": seconds,
                "comparisons": len(rows),
                "judgments": frame.height,
                "num_adjusted": int(flagged.sum()),
                "any_adjusted": bool(flagged.any()),
                # a flag on a comparison whose true Δ is 0 or of the other sign
                "wrong_flags": int(np.sum(flagged & (sign * truth <= 0))),
                "passed": bool(passed),
                "num_both": int(both.sum()),
                "any_both": bool(both.any()),
                "wrong_both": int(np.sum(both & (sign * truth <= 0))),
                "z": [r["mean"] / r["sd"] for r in rows],
                "truth": truth.tolist(),
            }
            records.append(rec)
            record(
                args.jsonl,
                rec,
                f"seed {seed} {fraction:.2f}: adjusted flags {rec['num_adjusted']}, "
                f"wrong {rec['wrong_flags']} ({seconds:.1f} s)",
            )
    print(
        "kind  fraction  campaigns  passed  with_flag  with_wrong_flag  flags  "
        "| model_and_data: with_flag  with_wrong_flag  flags  seconds"
    )
    for kind in sorted({r["kind"] for r in records}):
        for fraction in sorted({r["fraction"] for r in records if r["kind"] == kind}, reverse=True):
            recs = [r for r in records if r["kind"] == kind and r["fraction"] == fraction]
            print(
                f"{kind:5s}  {fraction:8.2f}  {len(recs):9d}  "
                f"{np.mean([r['passed'] for r in recs]):6.3f}  "
                f"{np.mean([r['any_adjusted'] for r in recs]):9.3f}  "
                f"{np.mean([r['wrong_flags'] > 0 for r in recs]):15.3f}  "
                f"{sum(r['num_adjusted'] for r in recs):5d}  "
                f"| {np.mean([r['any_both'] for r in recs]):24.3f}  "
                f"{np.mean([r['wrong_both'] > 0 for r in recs]):15.3f}  "
                f"{sum(r['num_both'] for r in recs):5d}  "
                f"{np.mean([r['seconds'] for r in recs]):7.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
