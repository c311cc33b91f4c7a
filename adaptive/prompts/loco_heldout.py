"""The LOCO curve measured on the held-out comparison's own judgments.

A LOCO fold ranks the prompts on the other comparisons, so the held-out comparison's
judgments never entered its selection: they are fresh for it. The in-sample curve
(:func:`adaptive.prompts.loco.summarize_folds`) reads the held-out ability's posterior sd
with the item parameters fixed at the training estimates, which the selection favours
(the kept prompts' discriminations are the luckiest). Here the same kept prompts are
measured as the pruning's held-out check measures them
(:mod:`adaptive.prompts.prune_folds`): per fold, the SNR of the comparison's net
preference with all its judged prompts over that with the policy's top k, the median over
the folds whose comparison is clearly signed; random sets take the median SNR of
``num_random`` draws.
"""

from __future__ import annotations

import numpy as np

from adaptive.prompts.prune_folds import CellTable, clearly_signed, se_ratios, snr


def _column(table: CellTable, c: int) -> CellTable:
    return CellTable(table.total[:, [c]], table.squares[:, [c]], table.count[:, [c]])


def heldout_curve(
    results,  # type: ignore[no-untyped-def]
    table: CellTable,
    policies: tuple[str, ...],
    grid: tuple[int, ...],
    rng: np.random.Generator,
    *,
    num_random: int = 200,
) -> list[dict]:
    """Rows ``policy, k, heldout_se_ratio, heldout_folds`` (module doc).

    Args:
        results: the folds (:class:`~adaptive.prompts.loco.FoldResult`), ``fold`` the
            held-out comparison.
        table: every judgment of the dimension per (prompt, comparison) cell.
        policies: the LOCO policies; ``random`` draws, the others use the fold's order.
        grid: the numbers of prompts k.
    """
    num_p = table.count.shape[0]
    ratios: dict[tuple[str, int], list[float]] = {}
    for r in results:
        column = _column(table, r.fold)
        judged = column.count[:, 0] > 0
        full = snr(column, judged)
        if not clearly_signed(full)[0]:
            continue
        available = np.flatnonzero(judged)
        for policy in policies:
            for k in grid:
                k_eff = min(int(k), len(available))
                if policy == "random":
                    picks = np.argsort(rng.random((num_random, len(available))), axis=1)
                    masks = np.zeros((num_random, num_p), dtype=bool)
                    np.put_along_axis(masks, available[picks[:, :k_eff]], True, axis=1)
                    kept = np.nanmedian(np.sign(full) * snr(column, masks)[:, 0]) * np.sign(full)
                else:
                    order = [p for p in r.order[policy] if judged[p]][:k_eff]
                    mask = np.zeros(num_p, dtype=bool)
                    mask[order] = True
                    kept = snr(column, mask)
                ratios.setdefault((policy, int(k)), []).append(float(se_ratios(full, kept)[0]))
    return [
        {
            "policy": policy,
            "k": int(k),
            "heldout_se_ratio": float(np.median(ratios[(policy, int(k))]))
            if (policy, int(k)) in ratios
            else float("nan"),
            "heldout_folds": len(ratios.get((policy, int(k)), [])),
        }
        for policy in policies
        for k in grid
    ]


__all__ = ["heldout_curve"]
