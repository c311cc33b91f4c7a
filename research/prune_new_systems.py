"""New systems on the bundled logs: anchors and a regression estimate against random prompts.

    python research/prune_new_systems.py --logs ncm mtbench

For each log and systems protocol of ``research/prune_holdout.py`` (every 4th system out;
the weakest quarter out), the prompts' shared effect v_p is fitted on the comparisons
among the remaining systems (:func:`adaptive.prompts.prune_shrinkage.fit_shrinkage`, one
tier). Then for k prompts, each comparison with a left-out system has its full-set net
preference (the mean over every prompt judged for it, on all its judgments) estimated by

* ``anchors + regression``: medoids of k slices of v_p, regression on v_p
  (:mod:`adaptive.prompts.prune_anchors`), with a 95% interval (``coverage``);
* ``random + regression``, ``random + mean`` (median RMSE over ``--draws`` draws),
  ``top + mean`` (the k largest v_p, the kept set's own average).

Rows (appended to research/prune/new_systems.jsonl) give each RMSE over the new
comparisons, the anchors' error over the random mean's (``error_ratio``), the noise bound
on that ratio, and the best gain in SNR any subset chosen on the old systems could give on
the new ones (:func:`~adaptive.prompts.prune_shrinkage.new_system_gain`) beside the one
with every prompt's effect known (``best_gain_all``, :func:`~adaptive.prompts.prune_precision.headroom`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from adaptive.core.cells import build_cells
from adaptive.core.data import read_judgments
from adaptive.prompts.prune_anchors import (
    anchor_prompts,
    error_ratio_bound,
    mean_estimate,
    regression_estimate,
)
from adaptive.prompts.prune_folds import (
    cell_table,
    clearly_signed,
    judged_from_cells,
    prompt_mask,
    snr,
)
from adaptive.prompts.prune_precision import headroom, variance_split
from adaptive.prompts.prune_shrinkage import fit_shrinkage, new_system_gain

sys.path.insert(0, str(Path(__file__).parent))
from prune_holdout import LOGS, left_out_systems  # noqa: E402

ROWS = Path(__file__).parent / "prune" / "new_systems.jsonl"


def noise_of(table, c: int, prompts: np.ndarray, noise_c: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    return noise_c / np.maximum(table.count[prompts, c], 1)


def estimates(table, c, kept, score, noise_c):  # type: ignore[no-untyped-def]
    judged = np.flatnonzero(table.count[:, c] > 0)
    mine = np.intersect1d(kept, judged)
    if len(mine) < 3:
        return None
    y = table.total[mine, c] / table.count[mine, c]
    return y, mine, judged, noise_of(table, c, mine, noise_c)


def worth_of_top(table, comps, score, k, draws, rng) -> float:  # type: ignore[no-untyped-def]
    """(SNR of the k largest v_p / median SNR of random k)^2, median over clear comparisons."""
    num_p = len(score)
    sub = type(table)(*(a[:, comps] for a in (table.total, table.squares, table.count)))
    full = snr(sub, np.ones(num_p, dtype=bool))
    top = prompt_mask(np.argsort(-score)[:k], num_p)
    picks = np.argsort(rng.random((draws, num_p)), axis=1)[:, :k]
    masks = np.zeros((draws, num_p), dtype=bool)
    np.put_along_axis(masks, picks, True, axis=1)
    sign = np.sign(full)
    rand = np.nanmedian(sign * snr(sub, masks), axis=0)
    mine = sign * snr(sub, top)
    clear = clearly_signed(full)
    with np.errstate(invalid="ignore", divide="ignore"):
        worth = np.where(mine > 0, (mine / rand) ** 2, 0.0)
    return float(np.median(worth[clear])) if clear.any() else float("nan")


def run(log: str, protocol: str, args, rng) -> list[dict]:  # type: ignore[no-untyped-def]
    path, dim = LOGS[log]
    judgments = read_judgments(path)
    cells = build_cells(judgments, dimension=dim or judgments["dimension"][0])
    table = cell_table(judged_from_cells(cells))
    gone = left_out_systems(cells, protocol)
    new = np.isin(cells.pair_a, gone) | np.isin(cells.pair_b, gone)
    old_comps, new_comps = np.flatnonzero(~new), np.flatnonzero(new)
    score = fit_shrinkage(table, old_comps).v_mean
    num_p = len(score)
    _, noise = variance_split(table, new_comps)
    noise = np.where(np.isfinite(noise), noise, np.nanmean(noise))
    tau2, _ = variance_split(table, new_comps)
    rows = []
    for k in sorted({k for k in (25, 50, 100) if k < num_p} | {num_p // 4, num_p // 2}):
        errs = {key: [] for key in ("anchors", "random_reg", "random_mean", "top_mean")}
        covered = []
        for c, noise_c in zip(new_comps, noise):
            full = table.total[:, c].sum() / table.count[:, c].sum() if False else None
            judged = np.flatnonzero(table.count[:, c] > 0)
            target = float(np.mean(table.total[judged, c] / table.count[judged, c]))
            got = estimates(table, c, anchor_prompts(score[judged], k), score, noise_c)
            if got is None:
                continue
            # anchors among the judged prompts: indices into ``judged``
            anchors = judged[anchor_prompts(score[judged], k)]
            y, mine, _, nz = estimates(table, c, anchors, score, noise_c)
            est = regression_estimate(y, score[mine], score[judged], nz)
            low, high = est.interval()
            errs["anchors"].append(est.estimate - target)
            covered.append(low <= target <= high)
            reg, mean = [], []
            for _ in range(args.draws):
                pick = rng.choice(judged, min(k, len(judged)), replace=False)
                y, mine, _, nz = estimates(table, c, pick, score, noise_c)
                reg.append(regression_estimate(y, score[mine], score[judged], nz).estimate - target)
                mean.append(mean_estimate(y, len(judged), nz).estimate - target)
            errs["random_reg"].append(np.sqrt(np.mean(np.square(reg))))
            errs["random_mean"].append(np.sqrt(np.mean(np.square(mean))))
            top = judged[np.argsort(-score[judged])[:k]]
            y, mine, _, nz = estimates(table, c, top, score, noise_c)
            errs["top_mean"].append(float(np.mean(y)) - target)
            del full
        if not covered:
            continue
        rmse = {key: float(np.sqrt(np.mean(np.square(v)))) for key, v in errs.items()}
        worth = worth_of_top(table, new_comps, score, k, args.draws, rng)
        cell_noise = float(
            np.nanmean(
                noise
                / np.maximum(np.mean(table.count[:, new_comps][table.count[:, new_comps] > 0]), 1)
            )
        )
        share = k / num_p
        rows.append(
            {
                "log": log,
                "protocol": protocol,
                "k": k,
                "prompts": num_p,
                "new_comparisons": len(covered),
                **{f"rmse_{key}": v for key, v in rmse.items()},
                "coverage": float(np.mean(covered)),
                "error_ratio": rmse["anchors"] / rmse["random_mean"],
                "bound": error_ratio_bound(float(np.nanmean(tau2)), cell_noise),
                "worth_top": worth,
                "best_gain_new": new_system_gain(table, new_comps, share),
                "best_gain_all": headroom(table, new_comps, share)[1],
                "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
            }
        )
    return rows


def plot(rows: list[dict]) -> None:
    """Worth of the top-v_p prompts on new systems against the bounds, per log and protocol."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["log"], r["protocol"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2), sharey=True)
    for ax, (log, protocol) in zip(np.atleast_1d(axes), panels):
        mine = [r for r in rows if (r["log"], r["protocol"]) == (log, protocol)]
        share = [r["k"] / r["prompts"] for r in mine]
        for key, label in (
            ("worth_top", "kept (top shared effect), measured"),
            ("best_gain_new", "bound on new systems"),
            ("best_gain_all", "bound, every prompt's effect known"),
        ):
            ax.plot(share, [r[key] for r in mine], marker="o", label=label)
        ax.axhline(2.0, color="grey", linestyle=":")
        ax.set_title(f"{log}: {protocol}", fontsize=8)
        ax.set_xlabel("share of prompts kept")
    np.atleast_1d(axes)[0].set_ylabel("worth in random prompts each")
    np.atleast_1d(axes)[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(Path(__file__).parent / "img" / "prune_new_systems.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logs", nargs="*", default=["ncm", "mtbench"])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROWS))
    args = parser.parse_args()
    rows = []
    for log in args.logs:
        for protocol in ("systems-every-4th", "systems-weakest"):
            rows += run(log, protocol, args, np.random.default_rng(args.seed))
    keys = (
        "log",
        "protocol",
        "k",
        "new_comparisons",
        "rmse_anchors",
        "rmse_random_reg",
        "rmse_random_mean",
        "rmse_top_mean",
        "coverage",
        "error_ratio",
        "bound",
        "worth_top",
        "best_gain_new",
        "best_gain_all",
    )
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in keys))
    if args.out:
        with Path(args.out).open("a") as out:
            for r in rows:
                out.write(json.dumps(r) + "\n")
        plot(rows)


if __name__ == "__main__":
    main()
