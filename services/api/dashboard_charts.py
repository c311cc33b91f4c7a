"""The dashboard's inline SVG charts (:mod:`services.api.dashboard_page` lays out the page).

Plain strings, every value escaped; no script and no request beyond the page (the
dashboard's Content-Security-Policy forbids both).
"""

from __future__ import annotations

import html
import math
from typing import Any

from evalset.colors import DECISION_COLORS

__all__ = ["COLORS", "FAVICON", "MAX_BARS", "forest_svg", "judgments_svg", "outcomes_svg"]

#: the decision colours of every figure (evalset.colors)
COLORS = DECISION_COLORS
#: comparisons drawn in the judgments chart (open ones closest to a decision first)
MAX_BARS = 60

FAVICON = (
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
    "%3Crect width='16' height='16' rx='3' fill='%230072B2'/%3E%3C/svg%3E"
)


# ---------------------------------------------------------------- charts (inline SVG)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _label(text: str, limit: int = 44) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _label_width(labels: list[str]) -> int:
    """Room for right-aligned 11px labels (about 6.3 px a character), within bounds."""
    longest = max((len(_label(t)) for t in labels), default=0)
    return int(min(300, max(70, 6.3 * longest + 14)))


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    span = high - low
    if span <= 0:
        return [low]
    raw = span / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if step * m >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _fmt_tick(x: float) -> str:
    return f"{x:g}" if abs(x) >= 1e-9 else "0"


def forest_svg(board: list[dict[str, Any]], standing: dict[str, str]) -> str:
    """Each system's skill and 95% interval, best on top, coloured by its decision
    against the leader."""
    if not board:
        return ""
    label_w = _label_width([r["system_id"] for r in board])
    plot_w, row_h, top, bottom = 430, 22, 10, 34
    low = min(r["ci_low"] for r in board)
    high = max(r["ci_high"] for r in board)
    pad = 0.05 * (high - low or 1.0)
    low, high = low - pad, high + pad
    width, height = label_w + plot_w + 20, top + row_h * len(board) + bottom

    def x(v: float) -> float:
        return float(label_w + (v - low) / (high - low) * plot_w)

    parts = [
        f'<svg class="chart" id="forest" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        "<title>Leaderboard: skill and 95% interval per system</title>",
    ]
    axis_y = top + row_h * len(board) + 4
    for t in _ticks(low, high):
        parts.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{axis_y}" class="grid"/>'
            f'<text x="{x(t):.1f}" y="{axis_y + 14}" class="tick">{_fmt_tick(t)}</text>'
        )
    for i, r in enumerate(board):
        y = top + row_h * i + row_h / 2
        status = standing.get(r["system_id"], "not compared")
        color = COLORS[status]
        parts.append(
            f'<g data-system="{_e(r["system_id"])}"><title>{_e(r["system_id"])}: '
            f"{r['mean']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}], {_e(status)}</title>"
            f'<text x="{label_w - 8}" y="{y + 4:.1f}" class="label">{_e(_label(r["system_id"]))}</text>'
            f'<line x1="{x(r["ci_low"]):.1f}" x2="{x(r["ci_high"]):.1f}" y1="{y:.1f}" '
            f'y2="{y:.1f}" stroke="{color}" stroke-width="2.5"/>'
            f'<circle cx="{x(r["mean"]):.1f}" cy="{y:.1f}" r="4.5" fill="{color}"/></g>'
        )
    parts.append(
        f'<text x="{label_w + plot_w / 2:.0f}" y="{height - 2}" class="axis">'
        "skill (newest snapshot), 95% interval</text></svg>"
    )
    return "".join(parts)


def judgments_svg(decisions: list[dict[str, Any]]) -> str:
    """Judgments per comparison, coloured by decision; an open comparison's judgments
    likely still needed as a hatched extension."""
    if not decisions:
        return ""
    label_w = _label_width([f"{d['system_a']} vs {d['system_b']}" for d in decisions])
    plot_w, row_h, top, bottom = 560, 18, 8, 34
    top_n = max(
        (
            d["n_judgments"] + (d["needed"] or 0)
            if d["decision"] == "undecided"
            else d["n_judgments"]
        )
        for d in decisions
    )
    top_n = max(top_n, 1)
    width, height = label_w + plot_w + 70, top + row_h * len(decisions) + bottom

    def x(v: float) -> float:
        return float(label_w + v / top_n * plot_w)

    parts = [
        f'<svg class="chart" id="judgment-bars" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        "<title>Judgments per comparison, coloured by decision</title>",
        '<defs><pattern id="needed" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fdf0d5"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#E69F00" stroke-width="2"/></pattern></defs>',
    ]
    axis_y = top + row_h * len(decisions) + 2
    for t in _ticks(0, top_n, 4):
        parts.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{axis_y}" class="grid"/>'
            f'<text x="{x(t):.1f}" y="{axis_y + 14}" class="tick">{_fmt_tick(t)}</text>'
        )
    for i, d in enumerate(decisions):
        y = top + row_h * i
        n = d["n_judgments"]
        color = COLORS.get(d["decision"], "#999999")
        label = f"{d['system_a']} vs {d['system_b']}"
        needed = d["needed"] if d["decision"] == "undecided" else None
        tip = f"{label}: {d['decision']}, {n} judgments" + (
            f", about {needed} more needed" if needed else ""
        )
        bar = (
            f'<rect x="{label_w}" y="{y + 3}" width="{x(n) - label_w:.1f}" height="{row_h - 6}" '
            f'fill="{color}"/>'
        )
        if needed:
            bar += (
                f'<rect x="{x(n):.1f}" y="{y + 3}" width="{x(n + needed) - x(n):.1f}" '
                f'height="{row_h - 6}" fill="url(#needed)" stroke="#E69F00" stroke-width="0.5"/>'
            )
        end = x(n + (needed or 0))
        parts.append(
            f'<g data-a="{_e(d["system_a"])}" data-b="{_e(d["system_b"])}" data-n="{n}">'
            f"<title>{_e(tip)}</title>"
            f'<text x="{label_w - 8}" y="{y + row_h / 2 + 4:.1f}" class="label">{_e(_label(label))}</text>'
            f'{bar}<text x="{end + 4:.1f}" y="{y + row_h / 2 + 4:.1f}" class="value">{n}'
            f"{f' + {needed}' if needed else ''}</text></g>"
        )
    parts.append(
        f'<text x="{label_w + plot_w / 2:.0f}" y="{height - 2}" class="axis">'
        "judgments (hatched: likely still needed)</text></svg>"
    )
    return "".join(parts)


def outcomes_svg(counts: dict[str, int]) -> str:
    """One stacked bar: comparisons by decision."""
    total = sum(counts.values())
    if not total:
        return ""
    width, height = 600, 26
    parts = [
        f'<svg class="chart" id="outcomes" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
        "<title>Comparisons by decision</title>"
    ]
    x = 0.0
    for name in ("B better", "A better", "equivalent", "undecided"):
        k = counts.get(name, 0)
        if not k:
            continue
        w = k / total * width
        parts.append(
            f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" fill="{COLORS[name]}">'
            f"<title>{_e(name)}: {k}</title></rect>"
        )
        if w > 28:
            parts.append(f'<text x="{x + w / 2:.1f}" y="{height / 2 + 5}" class="inbar">{k}</text>')
        x += w
    parts.append("</svg>")
    return "".join(parts)
