"""The campaign's figures: its progress, each comparison's evidence, the LOCO SE-vs-k curve
and the replays' anytime curves (:func:`plot_anytime`); :mod:`evalset.plots` re-exports the
first three."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalset._figures import _only_dimension, _rows, _save, plt
from evalset.colors import DECISION_COLORS

POLICY_LABELS = {
    "random": "Random",
    "prompt": "Prompt weighted",
    "prompt_model": "Prompt and Model weighted",
    "discrimination": "Discrimination (alpha) ranked",
}


# ---------------------------------------------------------------- progress


def plot_progress(
    decisions: Any,
    path: str | Path,
    *,
    cost_per_judgment: float | None = None,
    dimension: str | None = None,
    title: str = "",
) -> Path:
    """Campaign progress from :func:`evalset.decisions` rows.

    Left: comparisons per decision (closed: B better / A better / equivalent; open:
    undecided). Right: judgments spent per comparison, and for open ones the judgments
    likely still needed (hatched; comparisons out of sight marked ``>``). The title
    gives the total likely still needed and, with ``cost_per_judgment``, its cost.
    """
    rows, dim = _only_dimension(_rows(decisions), dimension)
    rows.sort(key=lambda r: (r["decision"] != "undecided", -r["n_judgments"]))
    kinds = ["B better", "A better", "equivalent", "undecided"]
    counts = [sum(r["decision"] == k for r in rows) for k in kinds]
    n = len(rows)
    fig, (ax1, ax2) = plt.subplots(
        1, 2, figsize=(11, 1.6 + 0.26 * max(n, 6)), dpi=120, layout="constrained",
        gridspec_kw={"width_ratios": [1, 3]},
    )  # fmt: skip
    colors = [DECISION_COLORS[k] if k != "undecided" else "#E69F00" for k in kinds]
    ax1.bar(range(4), counts, color=colors)
    ax1.set_xticks(range(4), ["B\nbetter", "A\nbetter", "equiv-\nalent", "open"], fontsize=8)
    ax1.set_ylabel("comparisons")
    for k, c in enumerate(counts):
        ax1.text(k, c, str(c), ha="center", va="bottom", fontsize=8)
    ax1.set_title(f"{n - counts[3]} closed, {counts[3]} open", fontsize=9)
    y = np.arange(n)[::-1]
    # out of sight: null in the rows (inf in older ones)
    rows = [
        {**r, "needed": np.inf if r.get("needed") is None else float(r["needed"])} for r in rows
    ]
    finite = [
        r["needed"] for r in rows if r["decision"] == "undecided" and np.isfinite(r["needed"])
    ]
    cap = max([r["n_judgments"] for r in rows] + finite + [1]) * 1.05
    for yi, r in zip(y, rows):
        color = DECISION_COLORS.get(r["decision"], "#E69F00")
        ax2.barh(yi, r["n_judgments"], color=color, height=0.6)
        if r["decision"] == "undecided":
            need = r["needed"]
            shown = need if np.isfinite(need) else cap - r["n_judgments"]
            ax2.barh(yi, shown, left=r["n_judgments"], height=0.6, color="none",
                     edgecolor="#E69F00", hatch="///", lw=0.5)  # fmt: skip
            if not np.isfinite(need):
                ax2.text(r["n_judgments"] + shown, yi, " >", va="center", fontsize=7)
    ax2.set_yticks(y, [f"{r['system_a']} vs {r['system_b']}" for r in rows], fontsize=7)
    ax2.set_xlabel("judgments spent (solid) and likely still needed (hatched)")
    ax2.grid(axis="x", alpha=0.3)
    left = float(sum(finite))
    out_of_sight = sum(
        1 for r in rows if r["decision"] == "undecided" and not np.isfinite(r["needed"])
    )
    text = f"about {left:,.0f} judgments still needed"
    if cost_per_judgment is not None:
        # "\$": a bare dollar sign starts matplotlib's mathtext
        text += f" (\\${left * cost_per_judgment:,.2f} at \\${cost_per_judgment:g} each)"
    if out_of_sight:
        text += f"; {out_of_sight} comparison(s) out of sight (>)"
    ax2.set_title(text, fontsize=9)
    fig.suptitle(title or f"Campaign progress ({dim})", fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------- evidence


def plot_evidence(
    evidence: Any,
    path: str | Path,
    *,
    max_comparisons: int = 12,
    dimension: str | None = None,
    title: str = "",
) -> Path:
    """One panel per comparison: log10 e-values for "B better" and "A better" after each of
    its judgments, the level each must reach (dashed: the decision boundary) and where the
    decision closed (vertical line). Comparisons with the most judgments first."""
    rows, dim = _only_dimension(_rows(evidence), dimension)
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["system_a"], r["system_b"]), []).append(r)
    pairs = sorted(by, key=lambda p: -by[p][-1]["judgments"])[:max_comparisons]
    cols = min(3, len(pairs))
    nrows = int(np.ceil(len(pairs) / cols))
    fig, axes = plt.subplots(
        nrows, cols, figsize=(3.6 * cols, 2.5 * nrows), dpi=120, squeeze=False,
        sharey=True, layout="constrained",
    )  # fmt: skip
    for ax, pair in zip(axes.flat, pairs):
        rs = by[pair]
        x = [r["judgments"] for r in rs]
        ax.plot(x, [r["log10_e_b"] for r in rs], color=DECISION_COLORS["B better"], lw=1.2,
                label="e-value: B better")  # fmt: skip
        ax.plot(x, [r["log10_e_a"] for r in rs], color=DECISION_COLORS["A better"], lw=1.2,
                label="e-value: A better")  # fmt: skip
        ax.axhline(rs[0]["threshold"], color="black", ls="--", lw=0.8, label="decision boundary")
        closed = rs[0]["closed_at"]
        decision = rs[0]["decision"]
        if closed is not None:
            ax.axvline(closed, color=DECISION_COLORS.get(decision, "grey"), lw=1, ls=":")
            ax.text(closed, rs[0]["threshold"], f" {decision}\n at {closed}", fontsize=7,
                    va="bottom", color=DECISION_COLORS.get(decision, "grey"))  # fmt: skip
        else:
            ax.text(0.02, 0.95, "undecided", transform=ax.transAxes, fontsize=7, va="top")
        ax.set_title(f"{pair[0]} vs {pair[1]}", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=-3)
    for ax in list(axes.flat)[len(pairs) :]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("log10 e-value", fontsize=8)
    for ax in axes[-1, :]:
        ax.set_xlabel("judgments of the comparison", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle(title or f"Evidence per comparison ({dim})", fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------- LOCO


def plot_se_curve(rows: Sequence[dict[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """Sedoc & Ungar's Figure 2: held-out SE against the number of prompts, per policy.

    Args:
        rows: the LOCO summary rows (``policy, k, se_mean, draw_sd``; a ``full`` row
            is drawn as the all-prompts reference).
        path: where to write the figure (``.png`` or ``.svg``).
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    policies = [p for p in dict.fromkeys(r["policy"] for r in rows) if p != "full"]
    markers = "osD^v"
    for k, policy in enumerate(policies):
        rs = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["k"])
        ks = [r["k"] for r in rs]
        se = [r["se_mean"] for r in rs]
        (line,) = ax.plot(ks, se, marker=markers[k % len(markers)], ms=4,
                          label=POLICY_LABELS.get(policy, policy), zorder=3)  # fmt: skip
        if policy == "random":
            lo = [max(0.0, m - 2 * r["draw_sd"]) for m, r in zip(se, rs)]
            hi = [m + 2 * r["draw_sd"] for m, r in zip(se, rs)]
            ax.fill_between(ks, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0,
                            label="Random +- 2 sd over draws")  # fmt: skip
    full = [r for r in rows if r["policy"] == "full"]
    if full:
        ax.axhline(full[0]["se_mean"], color="grey", linestyle="--", label="all prompts", zorder=1)
        ax.axhline(1.05 * full[0]["se_mean"], color="grey", linestyle=":", label="all prompts +5%",
                   zorder=1)  # fmt: skip
    ax.set_xlabel("number of prompts k")
    ax.set_ylabel("mean SE of the held-out ability")
    ax.set_title(title or "Leave-one-comparison-out: SE vs number of prompts")
    ax.grid(alpha=0.3)
    # outside the axes: inside, the legend box hid the curves at small k
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return _save(fig, path)


# ---------------------------------------------------------------- replays


def plot_anytime(rows: list[dict[str, Any]], path: str, title: str = "") -> None:
    """Judgments until k comparisons are closed, one panel per dimension, one line per policy.

    A step is drawn only for the k that every seed reached (mean over seeds); written as
    ``evalset replay --plot`` always wrote it (110 dpi, not cropped).
    """
    dims = list(dict.fromkeys(r["dimension"] for r in rows))
    fig, axes = plt.subplots(1, len(dims), figsize=(5.5 * len(dims), 4), squeeze=False)
    styles = {"adaptive": "-", "uniform": "--", "round_robin": "-.", "arena": ":"}
    for ax, dim in zip(axes[0], dims):
        for r in (r for r in rows if r["dimension"] == dim):
            # only the k every seed reached, so each point averages the same replays
            pts = [
                (c["judgments_mean"], c["closed"])
                for c in r["curve"]
                if c["judgments_mean"] and c["share_of_seeds"] == 1.0
            ]
            if pts:
                xs, y = zip(*pts)
                x = np.maximum.accumulate(np.asarray(xs))
                ax.step(
                    x,
                    y,
                    where="post",
                    linestyle=styles.get(r["policy"], "-"),
                    lw=1.8,
                    label=f"{r['policy']} (all closed/exhausted: {r['judgments_mean']:.0f})",
                )
        ax.set_title(f"{title} {dim} ({rows[0]['data']}, {rows[0]['unit']} unit)", fontsize=10)
        ax.set_xlabel("judgments used")
        ax.set_ylabel("comparisons closed")
        ax.set_ylim(0, max(r["comparisons"] for r in rows) + 0.5)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize=7, framealpha=0.9)
        else:
            ax.text(
                0.5,
                0.5,
                "no comparison closed in every replay",
                ha="center",
                transform=ax.transAxes,
            )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
