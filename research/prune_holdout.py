"""Pruning on judgments and systems it has not seen: kept prompts against random ones.

    python research/prune_holdout.py            # every bundled log with several judgments a cell
    python research/prune_holdout.py --logs ncm --draws 200

Rows are appended to research/prune/holdout.jsonl (with the command that made them); the
curves go to research/img/prune_holdout_<log>.png.

Protocols, each pruning with the product (``fit_tiers`` + ``predict_precision`` of
``evalset prune``, default options or ``--rank shared``, ``--keep k``) on the training
judgments only:

* ``annotators``: one annotator of every cell with several is held out (chosen per prompt
  in a random order, so a ranked screen stays whole); prune on the rest, measure every
  comparison on the held-out judgments;
* ``systems-every-4th``: systems 3, 7, 11, ... (system 0 when fewer than four) leave;
  prune on the comparisons among the others, measure the comparisons with a left-out
  system on all of their judgments;
* ``systems-weakest``: the same with the last quarter by ability (full-set net preference,
  least-squares skills).

Measures, per k (25, 50, 100, 200 and 25% / 50% of the prompts, below their number), each
comparison measured with its tier's kept prompts:

* ``se_ratio``: SNR_full / SNR_kept (:mod:`adaptive.prompts.prune_folds`), median over the
  clearly signed comparisons (|SNR_full| >= 2 on the measuring judgments);
* ``random_se_ratio``: the same for random sets of the kept set's size (median of
  ``--draws`` draws per comparison), ``stratified_se_ratio``: random within quartiles of
  the training judgments' mean |net preference| per prompt;
* ``worth``: the number of random prompts giving the same SNR^2 as the kept k, divided by
  k: (SNR_kept / SNR_random)^2 per comparison (random prompts keep the mean, and their
  SNR^2 grows in proportion to their number), median over the clearly signed ones;
* ``net_rmse``: RMSE over the comparisons of the kept prompts' net preference against the
  full set's (same judgments), and ``random_net_rmse`` (median over draws);
* ``tau``: Kendall tau of the systems' least-squares abilities from the kept prompts'
  net preferences against the full set's, and ``random_tau`` (median over draws);
* ``printed``: the SE ratio ``evalset prune`` prints for that tier (predicted for a
  repeat of the training judgments' layout), beside the ``se_ratio`` the held-out
  judgments give (``research/prune_precision_checks.py`` compares the two at the held-out
  layout, over seeds).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import jax
import numpy as np
from scipy import stats

from adaptive.core.cells import build_cells
from adaptive.core.data import read_judgments
from adaptive.prompts.loco_data import loco_data
from adaptive.prompts.prune_crossfit import fold_data
from adaptive.prompts.prune_folds import (
    CellTable,
    cell_table,
    clearly_signed,
    judged_from_cells,
    net_preference,
    prompt_mask,
    se_ratios,
    snr,
)
from adaptive.prompts.prune_predict import predict_precision
from adaptive.prompts.pruning import PruneConfig, fit_tiers
from adaptive.prompts.tiers import system_ability

ROOT = Path(__file__).parent
ROWS = ROOT / "prune" / "holdout.jsonl"
LOGS = {
    "ncm": ("data/chateval_ncm/judgments.csv", None),
    "mtbench": ("data/mtbench/judgments.csv", None),
    "ai_teacher": ("data/ai_teacher_test/judgments.csv", "helpfulness"),
    "dbdc": ("data/chateval_dbdc/judgments.csv", None),
    "screens": ("tests/fixtures/rankings/rankings.csv", None),
}
PROTOCOLS = ("annotators", "systems-every-4th", "systems-weakest")


def held_out_annotators(judged, rng: np.random.Generator) -> np.ndarray:  # type: ignore[no-untyped-def]
    """(N,) True for a judgment of the annotator held out of its cell (cells with several)."""
    num_a = int(judged.annotator.max()) + 1
    priority = rng.random((judged.num_prompts, num_a))  # per prompt: screens stay whole
    score = priority[judged.prompt, judged.annotator]
    cell = judged.comparison * judged.num_prompts + judged.prompt
    out = np.zeros(len(cell), dtype=bool)
    order = np.lexsort((score, cell))
    first = np.r_[True, np.diff(cell[order]) != 0]
    annotators_in_cell = {}
    for c, a in zip(cell, judged.annotator):
        annotators_in_cell.setdefault(int(c), set()).add(int(a))
    chosen = {int(cell[i]): int(judged.annotator[i]) for i in order[first]}
    for i, (c, a) in enumerate(zip(cell.tolist(), judged.annotator.tolist())):
        out[i] = len(annotators_in_cell[c]) > 1 and chosen[c] == a
    return out


def left_out_systems(cells, protocol: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    """System indices a systems protocol leaves out."""
    num_s = cells.num_systems
    if protocol == "systems-every-4th":
        out = np.arange(3, num_s, 4)
        return out if len(out) else np.array([0])
    table = cell_table(judged_from_cells(cells))
    net = net_preference(table, np.ones(len(cells.prompts), dtype=bool))
    ability = system_ability(np.nan_to_num(net), cells.pair_a, cells.pair_b, num_s)
    return np.argsort(ability)[: max(1, num_s // 4)]


def random_masks(num_p: int, k: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    picks = np.argsort(rng.random((draws, num_p)), axis=1)[:, :k]
    masks = np.zeros((draws, num_p), dtype=bool)
    np.put_along_axis(masks, picks, True, axis=1)
    return masks


def stratified_masks(
    strata: np.ndarray, k: int, draws: int, rng: np.random.Generator
) -> np.ndarray:
    """Random sets of k prompts, k/4 (rounded) from each quartile ``strata`` (P,) in 0..3."""
    masks = np.zeros((draws, len(strata)), dtype=bool)
    per = np.diff(np.round(np.linspace(0, k, 5)).astype(int))
    for s, n in enumerate(per):
        members = np.flatnonzero(strata == s)
        picks = np.argsort(rng.random((draws, len(members))), axis=1)[:, : min(n, len(members))]
        masks[np.arange(draws)[:, None], members[picks]] = True
    return masks


def taus(cells, table: CellTable, sets: np.ndarray, full_net: np.ndarray, comps) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Kendall tau of abilities from each set's net preferences against the full set's."""
    pa, pb = cells.pair_a[comps], cells.pair_b[comps]
    ref = system_ability(np.nan_to_num(full_net[comps]), pa, pb, cells.num_systems)
    seen = ~np.isnan(ref)
    out = []
    for net in np.atleast_2d(net_preference(table, sets)):
        mine = system_ability(np.nan_to_num(net[comps]), pa, pb, cells.num_systems)
        out.append(stats.kendalltau(ref[seen], mine[seen]).statistic if seen.sum() > 2 else 1.0)
    return np.array(out)


def measure(cells, table: CellTable, plan, comps, strata, draws, rng) -> dict:  # type: ignore[no-untyped-def]
    """The kept set of one tier against random and stratified random sets on ``comps``."""
    num_p = len(cells.prompts)
    every = np.ones(num_p, dtype=bool)
    full = snr(table, every)[comps]
    kept = prompt_mask(plan.kept, num_p)
    k = int(kept.sum())
    rand = random_masks(num_p, k, draws, rng)
    strat = stratified_masks(strata, k, draws, rng)
    sign = np.sign(full)
    kept_snr = sign * snr(table, kept)[comps]
    with np.errstate(all="ignore"):
        rand_snr = np.nanmedian(sign * snr(table, rand)[:, comps], axis=0)
        strat_snr = np.nanmedian(sign * snr(table, strat)[:, comps], axis=0)
        worth = np.where(kept_snr > 0, (kept_snr / rand_snr) ** 2, 0.0)
        worth_strat = np.where(strat_snr > 0, (strat_snr / rand_snr) ** 2, 0.0)
    clear = clearly_signed(full)
    use = clear if clear.any() else np.isfinite(full)
    full_net = net_preference(table, every)
    rmse = lambda net: float(np.sqrt(np.nanmean((net[..., comps] - full_net[comps]) ** 2, axis=-1)))  # noqa: E731
    rand_rmse = np.sqrt(
        np.nanmean((net_preference(table, rand)[:, comps] - full_net[comps]) ** 2, 1)
    )
    return {
        "k": k,
        "comparisons": int(len(comps)),
        "clear": int(clear.sum()),
        "se_ratio": float(np.median(se_ratios(full, kept_snr * sign)[use])) if use.any() else None,
        "random_se_ratio": float(np.median(se_ratios(full, rand_snr * sign)[use]))
        if use.any()
        else None,
        "stratified_se_ratio": float(np.median(se_ratios(full, strat_snr * sign)[use]))
        if use.any()
        else None,
        "worth": float(np.median(worth[use])) if use.any() else None,
        "stratified_worth": float(np.median(worth_strat[use])) if use.any() else None,
        "net_rmse": rmse(net_preference(table, kept)),
        "random_net_rmse": float(np.median(rand_rmse)),
        "tau": float(taus(cells, table, kept, full_net, comps)[0]),
        "random_tau": float(np.median(taus(cells, table, rand[:50], full_net, comps))),
    }


def run_protocol(log: str, cells, protocol: str, ks, args, rng) -> list[dict]:  # type: ignore[no-untyped-def]
    judged = judged_from_cells(cells)
    data = loco_data(cells)
    if protocol == "annotators":
        test = held_out_annotators(judged, rng)
        measure_comps = np.arange(cells.num_comparisons)
    else:
        gone = left_out_systems(cells, protocol)
        new = np.isin(cells.pair_a, gone) | np.isin(cells.pair_b, gone)
        if new.all() or not new.any():
            return []
        test = new[judged.comparison]
        measure_comps = np.flatnonzero(new)
    train = ~test
    train_data, weight = fold_data(data, judged, train)
    train_judged = judged.subset(train)
    eval_table = cell_table(judged.subset(test) if protocol == "annotators" else judged)
    train_table = cell_table(train_judged)
    decisive = np.abs(train_table.mean).sum(1) / np.maximum(train_table.observed.sum(1), 1)
    strata = np.searchsorted(np.quantile(decisive, [0.25, 0.5, 0.75]), decisive, side="right")
    rows = []
    fits = None
    for k in ks:
        start = time.perf_counter()
        config = PruneConfig(keep=k, seed=args.seed, rank=args.rank)
        if fits is None:  # the fits do not depend on k
            fits = fit_tiers(train_data, config, jax.random.PRNGKey(args.seed), cell_weight=weight)
        plans, precisions = predict_precision(train_table, config, fits)
        for plan, precision in zip(plans, precisions):
            comps = np.intersect1d(plan.comparisons, measure_comps)
            if not len(comps):
                continue
            row = measure(cells, eval_table, plan, comps, strata, args.draws, rng)
            rows.append(
                {
                    "log": log,
                    "protocol": protocol,
                    "rank": args.rank,
                    "tier": plan.tier,
                    "keep": k,
                    "prompts": len(cells.prompts),
                    **row,
                    "printed": precision.se_ratio,
                    "printed_low": precision.low,
                    "printed_high": precision.high,
                    "in_sample": precision.in_sample,
                    "printed_worth": precision.worth_random,
                    "best_gain": precision.best_gain,
                    "between_share": precision.between_share,
                    "verdict": precision.verdict,
                    "seconds": round(time.perf_counter() - start, 2),
                    "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
                }
            )
    return rows


def plot(log: str, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PROTOCOLS), figsize=(4 * len(PROTOCOLS), 3.4), sharey=True)
    for ax, protocol in zip(axes, PROTOCOLS):
        for tier, style in ((0, "-"), (1, "--")):
            mine = [r for r in rows if r["protocol"] == protocol and r["tier"] == tier]
            if not mine:
                continue
            ks = [r["k"] for r in mine]
            for key, colour in (("se_ratio", "C0"), ("random_se_ratio", "C1"), ("printed", "C2")):
                ax.plot(
                    ks,
                    [r[key] for r in mine],
                    style,
                    color=colour,
                    marker="o",
                    label=f"{key} tier {tier}",
                )
        ax.set_title(f"{log}: {protocol}")
        ax.set_xlabel("kept prompts per tier")
    axes[0].set_ylabel("SE ratio vs all prompts (SNR_full / SNR_set)")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    suffix = "" if rows[0]["rank"] == "information" else f"_{rows[0]['rank']}"
    out = ROOT / "img" / f"prune_holdout_{log}{suffix}.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)


def print_table(rows: list[dict]) -> None:
    cols = (
        "log",
        "protocol",
        "tier",
        "k",
        "clear",
        "se_ratio",
        "printed",
        "random_se_ratio",
        "stratified_se_ratio",
        "worth",
        "net_rmse",
        "random_net_rmse",
        "tau",
        "random_tau",
    )
    print(" | ".join(cols))
    for r in rows:
        cells = [f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        print(" | ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logs", nargs="*", default=list(LOGS))
    parser.add_argument("--protocols", nargs="*", default=list(PROTOCOLS))
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rank", choices=["information", "shared"], default="information")
    args = parser.parse_args()
    ROWS.parent.mkdir(exist_ok=True)
    for log in args.logs:
        path, dim = LOGS[log]
        judgments = read_judgments(path)
        cells = build_cells(judgments, dimension=dim or judgments["dimension"][0])
        num_p = len(cells.prompts)
        ks = sorted({k for k in (25, 50, 100, 200) if k < num_p} | {max(3, num_p // 4), num_p // 2})
        rows: list[dict] = []
        for protocol in args.protocols:
            rng = np.random.default_rng(args.seed)
            rows += run_protocol(log, cells, protocol, ks, args, rng)
        with ROWS.open("a") as out:
            for row in rows:
                out.write(json.dumps(row) + "\n")
        print_table(rows)
        if rows:
            plot(log, rows)


if __name__ == "__main__":
    main()
