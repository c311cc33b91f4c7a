"""Figures for reports: matplotlib with the Agg backend (no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

POLICY_LABELS = {
    "random": "Random",
    "prompt": "Prompt weighted",
    "prompt_model": "Prompt and Model weighted",
    "discrimination": "Discrimination (alpha) ranked",
}


def plot_se_curve(rows: Sequence[dict], path: str | Path, *, title: str = "") -> Path:
    """Sedoc & Ungar's Figure 2: held-out SE against the number of prompts, per policy.

    Args:
        rows: the LOCO summary rows (``policy, k, se_mean, draw_sd``; a ``full`` row
            is drawn as the all-prompts reference).
        path: where to write the PNG.
    """
    path = Path(path)
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    policies = [p for p in dict.fromkeys(r["policy"] for r in rows) if p != "full"]
    for policy in policies:
        rs = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["k"])
        ks = [r["k"] for r in rs]
        se = [r["se_mean"] for r in rs]
        (line,) = ax.plot(ks, se, marker="o", label=POLICY_LABELS.get(policy, policy))
        if policy == "random":
            lo = [m - 2 * r["draw_sd"] for m, r in zip(se, rs)]
            hi = [m + 2 * r["draw_sd"] for m, r in zip(se, rs)]
            ax.fill_between(ks, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    full = [r for r in rows if r["policy"] == "full"]
    if full:
        ax.axhline(full[0]["se_mean"], color="grey", linestyle="--", label="all prompts")
        ax.axhline(1.05 * full[0]["se_mean"], color="grey", linestyle=":", label="all prompts +5%")
    ax.set_xlabel("number of prompts k")
    ax.set_ylabel("mean SE of the held-out ability")
    ax.set_title(title or "Leave-one-comparison-out: SE vs number of prompts")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
