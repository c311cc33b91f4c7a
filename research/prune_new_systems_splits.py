"""Kept prompts on new systems and held-out annotators, over many splits, against the bound.

    python research/prune_new_systems_splits.py                     # ncm mtbench ai_teacher
    python research/prune_new_systems_splits.py --logs ncm --splits 40 --seeds 20

Issue 53's target: at k = 25% and 50% of the prompts, the kept set is worth >= 2x as many
random prompts on comparisons with a system the pruning has not seen, and >= 3x on
held-out annotators of the same systems. One split of 5-7 new comparisons is too noisy to
decide that (``research/prune_holdout.py``, ``research/prune_new_systems.py``), so here

* **new systems**: per log, ``--splits`` random sets of a quarter of the systems (rounded;
  every distinct set when there are fewer, which on MT-Bench's 6 systems means all 6 sets
  of one and all 15 of two) leave, and the two fixed protocols of ``prune_holdout``
  (``systems-every-4th``, ``systems-weakest``) are kept as rows. Each split prunes with the
  product's own path (:func:`~adaptive.prompts.pruning.fit_tiers` on the comparisons among
  the remaining systems, then :func:`~adaptive.prompts.prune_predict.predict_precision`:
  ``shared_scores`` + ``plan_tiers`` for ``rank="shared"``, and ``rank="information"``),
  and measures every comparison with a left-out system on all its judgments, with its
  tier's kept set (:func:`~adaptive.prompts.prune_precision.evaluate_kept`: worth =
  (SNR_kept / median SNR of ``--draws`` random sets of the same size)^2). The split's
  worth is the median over its new comparisons the full set clearly signs (|SNR| >= 2).
  Beside it: ``one_tier``, the top k of the shared effect fitted on all the old comparisons
  as one tier (``prune_new_systems.py``'s ``worth_top``), and the bounds on the new
  comparisons' judgments: ``bound`` = :func:`~adaptive.prompts.prune_shrinkage.new_system_gain`
  (only the shared effect carries over), ``bound_all`` =
  :func:`~adaptive.prompts.prune_precision.headroom` (every prompt's own effect known),
  and ``printed`` = the ``new_system_gain`` ``evalset prune`` prints per tier on the
  training judgments.
* **held-out annotators**: ``--seeds`` seeds of ``prune_holdout``'s ``annotators``
  protocol (one annotator of every cell with several is held out), pruned on the rest,
  measured on the held-out judgments (every comparison); its bound is
  :func:`~adaptive.prompts.prune_precision.best_gain` per comparison with the full
  judgments' between-prompt spread and the held-out layout's cell noise (``bound``), and
  the ``best_gain`` ``evalset prune`` prints per tier (``printed``).

Pooled per log, protocol and k: the median over splits (seeds), a bootstrap 90% interval
over splits (the splits share systems, so the interval is if anything narrow), the share
of splits at >= 2x (>= 3x for annotators), the same for the bound. Rows go to
``research/prune/new_systems_splits.jsonl`` (``kind``: ``split`` or ``pooled``, with the
command that made them); the figure to ``research/img/prune_new_systems_splits.png``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from adaptive.core.cells import build_cells
from adaptive.core.data import read_judgments
from adaptive.prompts.loco_data import loco_data
from adaptive.prompts.prune_crossfit import fold_data
from adaptive.prompts.prune_folds import (
    CellTable,
    cell_table,
    clearly_signed,
    judged_from_cells,
)
from adaptive.prompts.prune_precision import (
    INTERVAL,
    best_gain,
    evaluate_kept,
    headroom,
    variance_split,
)
from adaptive.prompts.prune_predict import predict_precision
from adaptive.prompts.prune_shrinkage import fit_shrinkage, new_system_gain
from adaptive.prompts.pruning import PruneConfig, TierPlan, fit_tiers

sys.path.insert(0, str(Path(__file__).parent))
from prune_holdout import LOGS, held_out_annotators, left_out_systems  # noqa: E402

ROOT = Path(__file__).parent
ROWS = ROOT / "prune" / "new_systems_splits.jsonl"
FIGURE = ROOT / "img" / "prune_new_systems_splits.png"
RANKS = ("shared", "information")
#: the issue's targets, in random prompts per kept prompt
TARGET = {"systems": 2.0, "annotators": 3.0}
NUM_BOOT = 4000


def system_splits(num_s: int, count: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Distinct sets of a quarter of the systems (every one when fewer than ``count`` exist).

    With fewer than ``count`` distinct quarter-sets (e.g. 6 systems: 15 pairs), the sets
    one system smaller are added too (6 singles), all of them.
    """
    size = max(1, int(np.floor(num_s / 4 + 0.5)))
    sizes = [size] + ([size - 1] if size > 1 else [])
    every = [c for s in sizes for c in itertools.combinations(range(num_s), s)]
    if len(list(itertools.combinations(range(num_s), size))) >= count:
        every = list(itertools.combinations(range(num_s), size))
        picks = rng.choice(len(every), count, replace=False)
        return [every[i] for i in sorted(picks)]
    return every


def _sub(table: CellTable, comps: np.ndarray) -> CellTable:
    return CellTable(table.total[:, comps], table.squares[:, comps], table.count[:, comps])


def annotator_bound(full: CellTable, test: CellTable, share: float) -> np.ndarray:
    """(C,) best gain of ``share`` of the prompts, each prompt's effect known, at ``test``'s layout.

    The between-prompt spread tau^2 and a judgment's noise come from all the judgments
    (``full``); a cell mean's noise is that over the held-out judgments' count.
    """
    comps = np.arange(full.count.shape[1])
    tau2, noise = variance_split(full, comps)
    obs = test.count > 0
    n = np.maximum(obs.sum(axis=0), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = test.mean.sum(axis=0) / n
        cell_noise = np.where(obs, noise / np.maximum(test.count, 1), 0.0).sum(axis=0) / n
    return best_gain(centre, tau2, cell_noise, share)


def new_system_gains(table: CellTable, comps: np.ndarray, share: float) -> np.ndarray:
    """(C_t,) :func:`~adaptive.prompts.prune_shrinkage.new_system_gain` per comparison.

    The library function's median, per comparison (NaN where it is not finite), so the
    bound can be summarised over the same comparisons as the measured worth.
    """
    model = fit_shrinkage(table, comps)
    obs = model.count > 0
    n = np.maximum(obs.sum(axis=0), 1)
    cell_noise = np.where(obs, model.noise / np.maximum(model.count, 1), 0.0).sum(axis=0) / n
    gain = best_gain(
        model.centre, model.prompt_var * model.loading**2, model.cell_var + cell_noise, share
    )
    return np.where(np.isfinite(gain), gain, np.nan)


def tier_bounds(
    plans: list[TierPlan], table: CellTable, comps: np.ndarray, share: float
) -> np.ndarray:
    """Per measured comparison (in :func:`measure_plans`' order) its tier's new-system bound.

    Each tier's shared effect is fitted on the tier's measured comparisons (as the product
    fits it per tier), not on every new comparison at once.
    """
    out = []
    for plan in plans:
        mine = np.intersect1d(plan.comparisons, comps)
        if len(mine):
            out.append(new_system_gains(table, mine, share))
    return np.concatenate(out) if out else np.zeros(0)


def measure_plans(
    plans: list[TierPlan],
    eval_table: CellTable,
    comps: np.ndarray,
    draws: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Per measured comparison: worth of its tier's kept set, full-set SNR, tier."""
    worth, full, tier, kept = [], [], [], []
    for plan in plans:
        mine = np.intersect1d(plan.comparisons, comps)
        if not len(mine):
            continue
        ev = evaluate_kept(eval_table, plan.kept, mine, rng, num_random=draws)
        worth.append(ev.worth)
        full.append(ev.full_snr)
        tier.append(np.full(len(mine), plan.tier))
        kept.append(len(plan.kept))

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0)

    return {"worth": cat(worth), "full": cat(full), "tier": cat(tier), "kept": kept}


def median_clear(worth: np.ndarray, full: np.ndarray) -> tuple[float, int]:
    clear = clearly_signed(full)
    return (float(np.median(worth[clear])) if clear.any() else float("nan"), int(clear.sum()))


def one_tier_worth(
    table: CellTable,
    old: np.ndarray,
    new: np.ndarray,
    k: int,
    draws: int,
    rng: np.random.Generator,
) -> float:
    """Top k of the shared effect fitted on every old comparison as one tier, on ``new``."""
    score = fit_shrinkage(table, old).v_mean
    ev = evaluate_kept(table, np.argsort(-score)[:k], new, rng, num_random=draws)
    return median_clear(ev.worth, ev.full_snr)[0]


def run_split(
    ctx: dict[str, Any], split: dict[str, Any], ks: list[int], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Prune on the training judgments of one split and measure at every k, both rankings."""
    cells, judged, data, full_table = ctx["cells"], ctx["judged"], ctx["data"], ctx["table"]
    num_p = len(cells.prompts)
    rng = np.random.default_rng(split["seed"])
    if split["protocol"] == "annotators":
        test = held_out_annotators(judged, rng)
        comps = np.arange(cells.num_comparisons)
        eval_table = cell_table(judged.subset(test))
        old = comps
    else:
        gone = np.asarray(split["left_out"])
        new = np.isin(cells.pair_a, gone) | np.isin(cells.pair_b, gone)
        if new.all() or not new.any():
            return []
        test = new[judged.comparison]
        comps, old = np.flatnonzero(new), np.flatnonzero(~new)
        eval_table = full_table
    train_data, weight = fold_data(data, judged, ~test)
    train_table = cell_table(judged.subset(~test))
    start = time.perf_counter()
    fits = fit_tiers(
        train_data,
        PruneConfig(seed=split["seed"]),
        jax.random.PRNGKey(split["seed"]),
        cell_weight=weight,
    )
    fit_seconds = time.perf_counter() - start
    rows = []
    for k in ks:
        share = k / num_p
        row = {
            "kind": "split",
            "log": ctx["log"],
            **{key: split[key] for key in ("protocol", "split", "seed", "left_out")},
            "k": k,
            "share": round(share, 3),
            "prompts": num_p,
            "systems": cells.num_systems,
            "measured": len(comps),
            "old_comparisons": len(old),
        }
        for rank in RANKS:
            plans, precisions = predict_precision(
                train_table, PruneConfig(keep=k, seed=split["seed"], rank=rank), fits
            )
            got = measure_plans(plans, eval_table, comps, args.draws, rng)
            row[f"worth_{rank}"], row["clear"] = median_clear(got["worth"], got["full"])
            row[f"worth_{rank}_per_comparison"] = [
                round(float(w), 4) for w in got["worth"][clearly_signed(got["full"])]
            ]
            row[f"kept_{rank}"] = got["kept"]
            if rank == "shared":
                tiers = sorted({int(t) for t in got["tier"]})
                row["tiers_measured"] = tiers
                key = "new_system_gain" if split["protocol"] != "annotators" else "best_gain"
                row["printed"] = [float(getattr(precisions[t], key)) for t in tiers]
        clear = clearly_signed(got["full"])
        if split["protocol"] == "annotators":
            gain = annotator_bound(full_table, eval_table, share)
            row["bound"] = float(np.median(gain[clear])) if clear.any() else float("nan")
            row["bound_all"] = row["bound"]
        else:
            row["one_tier"] = one_tier_worth(full_table, old, comps, k, args.draws, rng)
            row["bound"] = new_system_gain(full_table, comps, share)
            gains = tier_bounds(plans, full_table, comps, share)[clear]
            gains = gains[np.isfinite(gains)]
            row["bound_tiers"] = float(np.median(gains)) if len(gains) else float("nan")
            row["bound_all"] = headroom(full_table, comps, share)[1]
        row["fit_seconds"] = round(fit_seconds, 2)
        row["command"] = ctx["command"]
        rows.append(row)
    return rows


def bootstrap(values: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """Median and its bootstrap 90% interval over the splits."""
    values = values[np.isfinite(values)]
    if not len(values):
        return (float("nan"),) * 3
    boot = np.median(values[rng.integers(0, len(values), (NUM_BOOT, len(values)))], axis=1)
    low, high = np.percentile(boot, INTERVAL)
    return float(np.median(values)), float(low), float(high)


def pool(rows: list[dict[str, Any]], command: str) -> list[dict[str, Any]]:
    """Per log, protocol family (random splits; every seed) and k: the pooled figures."""
    out = []
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        family = "annotators" if r["protocol"] == "annotators" else r["protocol"]
        groups.setdefault((r["log"], family, r["k"]), []).append(r)
    for (log, family, k), mine in sorted(groups.items()):
        target = TARGET["annotators" if family == "annotators" else "systems"]
        rng = np.random.default_rng(0)
        row = {
            "kind": "pooled",
            "log": log,
            "protocol": family,
            "k": k,
            "share": mine[0]["share"],
            "splits": len(mine),
            "target": target,
        }
        keys = (
            "worth_shared",
            "worth_information",
            "one_tier",
            "bound",
            "bound_tiers",
            "bound_all",
        )
        for key in keys:
            if key not in mine[0]:
                continue
            values = np.array([r[key] for r in mine], dtype=float)
            med, low, high = bootstrap(values, rng)
            finite = values[np.isfinite(values)]
            row[key] = {
                "median": med,
                "low": low,
                "high": high,
                "share_at_target": float(np.mean(finite >= target)) if len(finite) else None,
                "splits": int(len(finite)),
                "spread": [float(q) for q in np.percentile(finite, INTERVAL)]
                if len(finite)
                else None,
            }
        for num, den in (
            ("worth_shared", "worth_information"),
            ("worth_shared", "one_tier"),
            ("worth_shared", "bound"),
        ):
            if den in mine[0]:
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = np.array([r[num] / r[den] for r in mine], dtype=float)
                row[f"{num}_over_{den}"] = dict(
                    zip(("median", "low", "high"), bootstrap(ratio, rng), strict=True)
                )
        every = np.concatenate([r["worth_shared_per_comparison"] for r in mine] or [[]])
        row["comparisons"] = int(len(every))
        row["worth_shared_over_comparisons"] = float(np.median(every)) if len(every) else None
        printed = [p for r in mine for p in r["printed"] if np.isfinite(p)]
        row["printed_median"] = float(np.median(printed)) if printed else None
        row["command"] = command
        out.append(row)
    return out


def plot(rows: list[dict[str, Any]], pooled: list[dict[str, Any]]) -> None:
    """Per log and k, worth of the kept set by split (sorted by the bound) with the bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    logs = sorted({r["log"] for r in rows}, key=list(LOGS).index)
    panels = [(fam, i) for fam in ("systems", "annotators") for i in (0, 1)]
    fig, axes = plt.subplots(
        len(logs), len(panels), figsize=(3.3 * len(panels), 2.8 * len(logs)), squeeze=False
    )
    for row_axes, log in zip(axes, logs):
        for ax, (family, i) in zip(row_axes, panels):
            mine = [
                r
                for r in rows
                if r["log"] == log and (r["protocol"] == "annotators") == (family == "annotators")
            ]
            ks = sorted({r["k"] for r in mine})
            if len(ks) <= i:
                ax.axis("off")
                continue
            k = ks[i]
            mine = sorted((r for r in mine if r["k"] == k), key=lambda r: np.nan_to_num(r["bound"]))
            x = np.arange(len(mine))
            fixed = np.array(
                [r["protocol"] in ("systems-every-4th", "systems-weakest") for r in mine]
            )
            for key, style, label in (
                (
                    "bound",
                    "k_",
                    "bound (new_system_gain)" if family == "systems" else "bound (best gain)",
                ),
                ("bound_tiers", "C2_", "bound, per tier"),
                ("worth_information", "C1.", "kept, information"),
                ("worth_shared", "C0o", "kept, shared (default)"),
            ):
                if key not in mine[0]:
                    continue
                y = np.array([r[key] for r in mine], dtype=float)
                ax.plot(x, np.maximum(y, 0.05), style, ms=4, label=label)
            if fixed.any():
                y = np.array([r["worth_shared"] for r in mine], dtype=float)[fixed]
                ax.plot(
                    x[fixed], np.maximum(y, 0.05), "rs", mfc="none", ms=8, label="fixed protocol"
                )
            target = TARGET["annotators" if family == "annotators" else "systems"]
            ax.axhline(target, color="grey", linestyle=":")
            med = next(
                p
                for p in pooled
                if p["log"] == log
                and p["k"] == k
                and (p["protocol"] == "annotators") == (family == "annotators")
                and p["protocol"] != "systems-every-4th"
                and p["protocol"] != "systems-weakest"
            )
            ax.axhline(med["worth_shared"]["median"], color="C0", linewidth=0.8)
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 3.0, 5.0)))
            ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
            what = "new systems" if family == "systems" else "held-out annotators"
            ax.set_title(f"{log}: {what}, k = {k} ({mine[0]['share']:.0%})", fontsize=8)
            ax.set_xlabel(
                "split (sorted by bound)" if family == "systems" else "seed (sorted by bound)",
                fontsize=7,
            )
            ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("worth in random prompts each", fontsize=7)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=110)
    plt.close(fig)


def load_log(log: str, command: str) -> dict[str, Any]:
    path, dim = LOGS[log]
    judgments = read_judgments(path)
    cells = build_cells(judgments, dimension=dim or judgments["dimension"][0])
    judged = judged_from_cells(cells)
    return {
        "log": log,
        "cells": cells,
        "judged": judged,
        "data": loco_data(cells),
        "table": cell_table(judged),
        "command": command,
    }


def splits_of(ctx: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    cells = ctx["cells"]
    rng = np.random.default_rng(args.seed)
    out = [
        {"protocol": "systems-random", "split": i, "seed": args.seed + i, "left_out": list(s)}
        for i, s in enumerate(system_splits(cells.num_systems, args.splits, rng))
    ]
    for protocol in ("systems-every-4th", "systems-weakest"):
        gone = left_out_systems(cells, protocol)
        out.append(
            {"protocol": protocol, "split": -1, "seed": args.seed, "left_out": gone.tolist()}
        )
    out += [
        {"protocol": "annotators", "split": s, "seed": args.seed + s, "left_out": []}
        for s in range(args.seeds)
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logs", nargs="*", default=["ncm", "mtbench", "ai_teacher"])
    parser.add_argument("--splits", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROWS))
    parser.add_argument("--replot", action="store_true", help="only redraw from --out's rows")
    args = parser.parse_args()
    if args.replot:
        saved = [json.loads(line) for line in Path(args.out).open()]
        plot(
            [r for r in saved if r["kind"] == "split"], [r for r in saved if r["kind"] == "pooled"]
        )
        return
    command = " ".join(shlex.quote(a) for a in ["python", *sys.argv])
    rows: list[dict[str, Any]] = []
    for log in args.logs:
        ctx = load_log(log, command)
        num_p = len(ctx["cells"].prompts)
        ks = [max(3, num_p // 4), num_p // 2]
        for split in splits_of(ctx, args):
            got = run_split(ctx, split, ks, args)
            rows += got
            for r in got:
                print(
                    log,
                    r["protocol"],
                    r["split"],
                    r["left_out"],
                    r["k"],
                    r["clear"],
                    *(
                        f"{r.get(key, float('nan')):.2f}"
                        for key in ("worth_shared", "worth_information", "one_tier", "bound")
                    ),
                    flush=True,
                )
    pooled = pool(rows, command)
    for p in pooled:
        print(json.dumps({key: p[key] for key in p if key != "command"}))
    if args.out:
        with Path(args.out).open("a") as out:
            for r in rows + pooled:
                out.write(json.dumps(r) + "\n")
        plot(rows, pooled)


if __name__ == "__main__":
    main()
