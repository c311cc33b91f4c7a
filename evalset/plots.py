"""Figures for reports: matplotlib with the Agg backend (no display needed).

Every function takes rows or frames the analyses already return, writes one
figure to ``path`` (PNG or SVG, by its suffix) and returns the path:

* :func:`plot_leaderboard`: forest plot of abilities with intervals, coloured by the
  decision against the leader;
* :func:`plot_annotators`: each annotator's position bias (interval) and agreement;
* :func:`plot_item_information`: item information curves and discrimination;
* :func:`plot_item_fit`: a prompt set's test information, and each prompt's fit;
* :func:`plot_matrices`: win-rate and judgment-count matrices;
* :func:`plot_evidence`: each comparison's evidence over its judgments, the decision
  boundary and where it closed;
* :func:`plot_progress`: campaign progress (closed / open, judgments per comparison,
  judgments likely still needed and their cost);
* :func:`plot_se_curve`: the LOCO SE-vs-k curve (Sedoc & Ungar's Figure 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from evalset._figures import IMAGE_FORMATS as IMAGE_FORMATS  # noqa: E402
from evalset._figures import _only_dimension, _rows, _save  # noqa: E402
from evalset.colors import DECISION_COLORS  # noqa: E402

# ---------------------------------------------------------------- leaderboard


def leader_decisions(
    board: list[dict[str, Any]], decisions: list[dict[str, Any]]
) -> dict[str, str]:
    """Each system's standing against the leader, from the decisions of their comparison."""
    leader = board[0]["system"]
    out = {leader: "leader"}
    by_pair = {frozenset((d["system_a"], d["system_b"])): d for d in decisions}
    for r in board[1:]:
        d = by_pair.get(frozenset((leader, r["system"])))
        if d is None:
            out[r["system"]] = "not compared"
        elif d["decision"] == "equivalent":
            out[r["system"]] = "equivalent to the leader"
        elif d["decision"] == "undecided":
            out[r["system"]] = "undecided"
        else:
            winner = d["system_b"] if d["decision"] == "B better" else d["system_a"]
            out[r["system"]] = "below the leader" if winner == leader else "undecided"
    return out


def plot_leaderboard(
    board: Any,
    decisions: Any,
    path: str | Path,
    *,
    dimension: str | None = None,
    title: str = "",
) -> Path:
    """Forest plot: each system's ability and interval, best on top, coloured by the
    decision of its comparison with the leader.

    Args:
        board: :func:`evalset.leaderboard` rows (``system, ability, ci_low, ci_high,
            scale``) or ``evalset bt --by pooled`` rows (``mean`` for ``ability``).
        decisions: :func:`evalset.decisions` rows (``system_a, system_b, decision``).
        path: ``.png`` or ``.svg``.
    """
    rows, dim = _only_dimension(_rows(board), dimension)
    for r in rows:
        r.setdefault("ability", r.get("mean"))
    rows.sort(key=lambda r: -r["ability"])
    dec, _ = _only_dimension(_rows(decisions), dim)
    status = leader_decisions(rows, dec)
    n = len(rows)
    fig, ax = plt.subplots(figsize=(6.8, 0.9 + 0.32 * n), dpi=120)
    y = np.arange(n)[::-1]
    seen = set()
    for yi, r in zip(y, rows):
        s = status[r["system"]]
        color = DECISION_COLORS[s]
        label = s if s not in seen else None
        seen.add(s)
        ax.plot([r["ci_low"], r["ci_high"]], [yi, yi], color=color, lw=2.2, solid_capstyle="butt")
        ax.plot(r["ability"], yi, "o", color=color, ms=6, label=label)
    ax.set_yticks(y, [r["system"] for r in rows], fontsize=8)
    ax.axvline(0, color="grey", lw=0.8, ls=":")
    scale = rows[0].get("scale", "")
    ax.set_xlabel(f"Bradley-Terry ability ({scale}), 95% interval" if scale else "ability")
    ax.set_title(title or f"Leaderboard ({dim})", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(
        fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
        title="vs the leader", title_fontsize=7,
    )  # fmt: skip
    return _save(fig, path)


# ---------------------------------------------------------------- annotators


def plot_annotators(
    rows: Any, path: str | Path, *, title: str = "", max_annotators: int = 40
) -> Path:
    """Left: each annotator's position intercept with its interval (> 0: the first-shown
    response preferred), vermillion when that screen flags it; right: agreement r with
    the other annotators, vermillion when the agreement screen flags it. The most
    active ``max_annotators`` are shown."""
    rows = sorted(_rows(rows), key=lambda r: -(r.get("n_judgments") or 0))[:max_annotators]
    rows.sort(key=lambda r: (r.get("position_intercept") is None, r.get("position_intercept") or 0))
    n = len(rows)
    fig, (ax1, ax2) = plt.subplots(
        1, 2, figsize=(8.5, 1.0 + 0.26 * n), dpi=120, sharey=True, layout="constrained",
        gridspec_kw={"width_ratios": [3, 2]},
    )  # fmt: skip
    y = np.arange(n)
    flag_color, ok_color = "#D55E00", "#0072B2"
    for yi, r in zip(y, rows):
        # each panel shows its own screen's flag
        if r.get("position_intercept") is not None:
            c = flag_color if r.get("position_flag") else ok_color
            ax1.plot([r["position_ci_low"], r["position_ci_high"]], [yi, yi], color=c, lw=2)
            ax1.plot(r["position_intercept"], yi, "o", color=c, ms=4)
        agr = r.get("agreement_r")
        if agr is not None and np.isfinite(agr):
            c = flag_color if r.get("agreement_flag") else ok_color
            ax2.barh(yi, agr, color=c, height=0.6)
    ax1.axvline(0, color="grey", lw=0.8, ls=":")
    ax2.axvline(0, color="grey", lw=0.8, ls=":")
    if all(r.get("position_intercept") is None for r in rows):
        ax1.text(0.5, 0.5, "position not screened:\nthe data does not say which\nresponse was shown first",
                 transform=ax1.transAxes, ha="center", va="center", fontsize=8, color="grey")  # fmt: skip
    labels = [
        f"{'* ' if r.get('flagged') else ''}{r['annotator_id']} ({r.get('n_judgments', 0)})"
        for r in rows
    ]
    ax1.set_yticks(y, labels, fontsize=7)
    ax1.set_xlabel("position intercept (> 0: first shown preferred)")
    ax2.set_xlabel("agreement r with the others")
    ax1.grid(axis="x", alpha=0.3)
    ax2.grid(axis="x", alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=ok_color, marker="o", lw=2, label="not flagged"),
        Line2D([], [], color=flag_color, marker="o", lw=2, label="flagged"),
    ]
    ax2.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
               frameon=False)  # fmt: skip
    fig.suptitle(title or "Annotators: position bias and agreement "
                 "(judgments in brackets; * flagged by either screen)", fontsize=10)  # fmt: skip
    return _save(fig, path)


# ---------------------------------------------------------------- items


def plot_item_information(
    analysis: Any, path: str | Path, *, num_curves: int = 4, title: str = ""
) -> Path:
    """Left: information I_j(theta) of the most and the least discriminating prompts
    (posterior-mean parameters); right: every prompt's discrimination alpha with
    +-1 sd, sorted."""
    from stan_free_models.information import item_information

    post, cells = analysis.posterior, analysis.cells
    alpha = post.flat("alpha")
    b = post.flat("b")
    a_mean, a_sd, b_mean = alpha.mean(0), alpha.std(0, ddof=1), b.mean(0)
    order = np.argsort(-a_mean)
    grid = np.linspace(-4, 4, 161)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    names = ["+".join(m) for m in cells.item_members]
    picks = list(order[:num_curves]) + list(order[-num_curves:])
    cmap = plt.get_cmap("viridis")
    for k, j in enumerate(picks):
        info = np.asarray(item_information(grid[:, None], a_mean[None, j], b_mean[None, j]))[:, 0]
        top = k < num_curves
        ax1.plot(grid, info, color=cmap(0.15 + 0.6 * k / max(1, len(picks) - 1)),
                 ls="-" if top else "--",
                 label=f"{names[j]} (alpha {a_mean[j]:.2f})")  # fmt: skip
    theta = post.flat("theta").mean(0)
    ax1.plot(theta, np.zeros_like(theta), "|", color="black", ms=10, label="comparisons' theta")
    ax1.set_xlabel("theta (A vs B)")
    ax1.set_ylabel("Fisher information")
    ax1.set_title("most (solid) and least (dashed) discriminating prompts", fontsize=9)
    ax1.legend(fontsize=6, loc="upper left", bbox_to_anchor=(0.0, -0.15), ncol=2, frameon=False)
    ax1.grid(alpha=0.3)
    x = np.arange(len(order))
    ax2.errorbar(x, a_mean[order], yerr=a_sd[order], fmt=".", ms=3, lw=0.6, color="#0072B2")
    ax2.set_xlabel("prompts, by discrimination")
    ax2.set_ylabel("alpha (posterior mean +- sd)")
    ax2.set_title(f"discrimination of {len(order)} prompts", fontsize=9)
    ax2.grid(alpha=0.3)
    fig.suptitle(title or f"Item information ({cells.dimension})", fontsize=10)
    return _save(fig, path)


def plot_item_fit(
    analysis: Any, info: Any, curves: Sequence[dict[str, Any]], path: str | Path, *, title: str = ""
) -> Path:
    """Left: the test information curve of every prompt and of those not flagged
    (``curves``: rows of :func:`evalset.item_fit.information_curve` with a ``set``);
    right: each prompt's observed slope over the abilities against the model's, flagged
    prompts (:func:`adaptive.estimation.item_fit.item_fit`'s ``info``) in red."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    for name, style in (("all", "-"), ("without misfits", "--")):
        mine = [
            r for r in curves if r["set"] == name and r["dimension"] == analysis.cells.dimension
        ]
        if mine:
            ax1.plot([r["theta"] for r in mine], [r["information"] for r in mine], style,
                     color="#0072B2", label=f"{name} ({mine[0]['num_prompts']} prompts)")  # fmt: skip
    ax1.set_xlabel("theta (A vs B)")
    ax1.set_ylabel("test information")
    ax1.legend(fontsize=7, frameon=False)
    ax1.grid(alpha=0.3)
    flagged = np.asarray(info.flagged)
    for mask, color, label in ((~flagged, "#999999", "fits"), (flagged, "#D55E00", "flagged")):
        ax2.plot(info.trend_model[mask], info.trend_observed[mask], ".", color=color, ms=4,
                 label=f"{label} ({int(mask.sum())})")  # fmt: skip
    ax2.axhline(0.0, color="black", lw=0.5)
    ax2.set_xlabel("model's slope of the signed judgment over theta")
    ax2.set_ylabel("observed slope")
    ax2.legend(fontsize=7, frameon=False)
    ax2.grid(alpha=0.3)
    fig.suptitle(title or f"Item fit ({analysis.cells.dimension})", fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------- matrices


def plot_matrices(
    judgments: Any, path: str | Path, *, dimension: str | None = None, title: str = ""
) -> Path:
    """Left: the row system's win rate against the column system (a tie counts half);
    right: judgments per pair. Systems ordered by overall win rate, best first."""
    import polars as pl

    frame = judgments if isinstance(judgments, pl.DataFrame) else pl.DataFrame(_rows(judgments))
    dims = frame["dimension"].unique(maintain_order=True).to_list() if "dimension" in frame else []
    dim = dimension or (dims[0] if dims else "overall")
    if "dimension" in frame.columns:
        frame = frame.filter(pl.col("dimension") == dim)
    systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
    index = {s: i for i, s in enumerate(systems)}
    n = len(systems)
    wins, count = np.zeros((n, n)), np.zeros((n, n))
    score = {"a": 1.0, "b": 0.0, "tie": 0.5}
    for a, b, w in frame.select("system_a", "system_b", "winner").iter_rows():
        i, j = index[a], index[b]
        wins[i, j] += score[w]
        wins[j, i] += 1.0 - score[w]
        count[i, j] += 1
        count[j, i] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = wins / count
        overall = wins.sum(1) / count.sum(1)
    order = np.argsort(-np.nan_to_num(overall, nan=-1))
    rate, count = rate[np.ix_(order, order)], count[np.ix_(order, order)]
    names = [systems[k] for k in order]
    size = max(5.0, 0.38 * n + 2.5)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(2 * size, size), dpi=120)
    im1 = ax1.imshow(np.ma.masked_invalid(rate), cmap="RdBu", vmin=0, vmax=1)
    im2 = ax2.imshow(np.ma.masked_where(count == 0, count), cmap="Greys")
    for ax, im, label in ((ax1, im1, "win rate of row over column"),
                          (ax2, im2, "judgments per pair")):  # fmt: skip
        ax.set_xticks(range(n), names, rotation=90, fontsize=7)
        ax.set_yticks(range(n), names, fontsize=7)
        ax.set_title(label, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if n <= 14:
        for i in range(n):
            for j in range(n):
                if count[i, j]:
                    ax1.text(j, i, f"{rate[i, j]:.2f}", ha="center", va="center", fontsize=6,
                             color="white" if abs(rate[i, j] - 0.5) > 0.3 else "black")  # fmt: skip
                    ax2.text(j, i, f"{int(count[i, j])}", ha="center", va="center", fontsize=6,
                             color="white" if count[i, j] > count.max() / 2 else "black")  # fmt: skip
    fig.suptitle(title or f"Pairwise results ({dim})", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


# the campaign's figures (progress, evidence, LOCO, replays) live in evalset.plots_campaign
from evalset.plots_campaign import plot_evidence as plot_evidence  # noqa: E402
from evalset.plots_campaign import plot_progress as plot_progress  # noqa: E402
from evalset.plots_campaign import plot_se_curve as plot_se_curve  # noqa: E402
