"""The dashboard's item-fit card: the prompts the model fits badly, and two small figures.

It reads ``GET .../item-fit``'s answer at its default level (:func:`services.api.routes.item_fit.item_fit_answer`,
a background job, never waited for; the newest finished answer while a newer one runs): the flagged prompts with the reason in words (the
``misfit_reason`` ``evalset items --fit`` prints), how many of all prompts are flagged and at
which level, the test information curve of every prompt and of those not flagged, and each
prompt's observed slope over the abilities against the model's (flagged ones in red), the
two panels of ``evalset items --plot`` drawn as inline SVG.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adaptive.estimation.item_fit import DEFAULT_LEVEL
from services.api.dashboard_charts import _e, _fmt_tick, _label, _ticks
from services.api.routes.item_fit import item_fit_answer
from services.runtime.background import Pending

__all__ = ["collect_item_fit", "information_svg", "item_fit_section", "slopes_svg"]

#: flagged prompts listed on the card at most (worst fit first)
MAX_FLAGGED = 25
#: the flag colour of ``evalset.plots.plot_item_fit``
FLAGGED = "#D55E00"
FITS = "#999999"
CURVE = "#0072B2"

#: x low, x high, y low, y high of a plot; a map from a value to its pixel
Ranges = tuple[float, float, float, float]
Scale = Callable[[float], float]


def collect_item_fit(state: Any, project_id: str, dimension: str) -> dict[str, Any] | None:
    """``GET .../item-fit``'s answer at the default level (or the judgments it is being
    computed for, with the newest finished answer, or why it has none); None without judgments."""
    try:
        result = item_fit_answer(state, project_id, dimension, DEFAULT_LEVEL)
    except ValueError as exc:
        return {"error": str(exc)}
    if result is None:
        return None
    if isinstance(result, Pending):
        if result.previous is not None:
            return {"answer": result.previous, "pending": result.num_judgments}
        return {"pending": result.num_judgments}
    return {"answer": result}


def _frame(
    width: int, height: int, left: int, bottom: int, xs: list[float], ys: list[float]
) -> tuple[Ranges, Scale, Scale]:
    """Axis ranges and the pixel maps of a plot area (10 px margins top and right)."""
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    x_pad, y_pad = 0.05 * (x_hi - x_lo or 1.0), 0.08 * (y_hi - y_lo or 1.0)
    x_lo, x_hi, y_lo, y_hi = x_lo - x_pad, x_hi + x_pad, y_lo - y_pad, y_hi + y_pad

    def x(v: float) -> float:
        return left + (v - x_lo) / (x_hi - x_lo) * (width - left - 10)

    def y(v: float) -> float:
        return 10 + (y_hi - v) / (y_hi - y_lo) * (height - bottom - 10)

    return (x_lo, x_hi, y_lo, y_hi), x, y


def _axes(
    size: tuple[int, int, int, int], ranges: Ranges, x: Scale, y: Scale, xlabel: str, ylabel: str
) -> list[str]:
    """Grid lines, ticks and axis labels; ``size``: width, height, left and bottom margins."""
    width, height, left, bottom = size
    x_lo, x_hi, y_lo, y_hi = ranges
    parts = []
    for t in _ticks(x_lo, x_hi, 4):
        parts.append(
            f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="10" y2="{height - bottom}" class="grid"/>'
            f'<text x="{x(t):.1f}" y="{height - bottom + 14}" class="tick">{_fmt_tick(t)}</text>'
        )
    for t in _ticks(y_lo, y_hi, 4):
        parts.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y(t) + 3:.1f}" class="label">{_fmt_tick(t)}</text>'
        )
    parts.append(
        f'<text x="{(left + width - 10) / 2:.0f}" y="{height - 4}" class="axis">{_e(xlabel)}</text>'
        f'<text transform="translate(12 {(height - bottom) / 2 + 5:.0f}) rotate(-90)" '
        f'class="axis">{_e(ylabel)}</text>'
    )
    return parts


def information_svg(points: list[Any]) -> str:
    """The test information over theta of every prompt (solid) and of the prompts not
    flagged (dashed): what dropping the flagged prompts would cost."""
    if not points:
        return ""
    width, height, left, bottom = 440, 230, 46, 34
    ranges, x, y = _frame(
        width,
        height,
        left,
        bottom,
        [p.theta for p in points],
        [0.0, *(p.information for p in points)],
    )
    parts = [
        f'<svg class="chart" id="item-fit-information" role="img" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        "<title>Test information of every prompt and of those not flagged</title>",
        *_axes((width, height, left, bottom), ranges, x, y, "theta (A vs B)", "test information"),
    ]
    for k, (name, dash) in enumerate((("all", ""), ("without misfits", ' stroke-dasharray="5 3"'))):
        mine = [p for p in points if p.set == name]
        if not mine:
            continue
        line = " ".join(f"{x(p.theta):.1f},{y(p.information):.1f}" for p in mine)
        label = f"{name} ({mine[0].num_prompts} prompts)"
        parts.append(
            f'<g data-set="{_e(name)}" data-prompts="{mine[0].num_prompts}"><title>{_e(label)}'
            f'</title><polyline points="{line}" fill="none" stroke="{CURVE}" stroke-width="2"{dash}/>'
            f'<line x1="{left + 10}" x2="{left + 34}" y1="{22 + 15 * k}" y2="{22 + 15 * k}" '
            f'stroke="{CURVE}" stroke-width="2"{dash}/>'
            f'<text x="{left + 40}" y="{26 + 15 * k}" class="value">{_e(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def slopes_svg(rows: list[Any]) -> str:
    """Each prompt's observed slope of the signed judgment over the abilities against the
    model's; flagged prompts in red. A reversed prompt lies below the zero line."""
    if not rows:
        return ""
    width, height, left, bottom = 440, 230, 46, 34
    xs, ys = [r.trend_model for r in rows], [r.trend_observed for r in rows]
    ranges, x, y = _frame(width, height, left, bottom, [*xs, 0.0], [*ys, 0.0])
    parts = [
        f'<svg class="chart" id="item-fit-slopes" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        "<title>Each prompt's observed slope against the model's; flagged prompts in red</title>",
        *_axes((width, height, left, bottom), ranges, x, y, "the model's slope", "observed slope"),
        f'<line x1="{left}" x2="{width - 10}" y1="{y(0.0):.1f}" y2="{y(0.0):.1f}" '
        'stroke="#444" stroke-width="0.8"/>',
    ]
    # flagged prompts drawn last, on top
    for r in sorted(rows, key=lambda r: r.misfit):
        color = FLAGGED if r.misfit else FITS
        tip = f"{r.item_id}: observed {r.trend_observed:+.2f}, model {r.trend_model:+.2f}, p {r.fit_p:.2g}"
        parts.append(
            f'<circle cx="{x(r.trend_model):.1f}" cy="{y(r.trend_observed):.1f}" '
            f'r="{4 if r.misfit else 3}" fill="{color}" fill-opacity="0.8" '
            f'data-item="{_e(r.item_id)}" data-misfit="{str(r.misfit).lower()}">'
            f"<title>{_e(tip)}</title></circle>"
        )
    flagged = sum(r.misfit for r in rows)
    parts.append(
        f'<circle cx="{left + 16}" cy="20" r="4" fill="{FLAGGED}"/><text x="{left + 24}" y="24" '
        f'class="value">flagged ({flagged})</text><circle cx="{left + 16}" cy="35" r="3" '
        f'fill="{FITS}"/><text x="{left + 24}" y="39" class="value">fits ({len(rows) - flagged})'
        "</text></svg>"
    )
    return "".join(parts)


def item_fit_section(card: dict[str, Any] | None, refresh: int) -> str:
    """The item-fit card for :func:`collect_item_fit`'s ``card``, or why it is not shown yet."""
    if card is None:  # no judgments of this dimension
        return ""
    head = '<section id="item-fit"><h2>Item fit: prompts the model fits badly</h2>'
    if "error" in card:
        return f'{head}<p class="note">No item fit: {_e(card["error"])}</p></section>'
    if "answer" not in card:
        later = "a later reload" if refresh else "reloading the page"
        return (
            f'{head}<p class="note" id="item-fit-pending">The item fit of the {card["pending"]} '
            "judgments is being computed (the default model's fit, then each prompt's "
            f"posterior predictive check); {later} shows it.</p></section>"
        )
    answer = card["answer"]
    rows = answer.rows
    flagged = [r for r in rows if r.misfit]
    flagged.sort(key=lambda r: (r.fit_p, r.trend_observed))
    newer = (
        f' <span id="item-fit-newer">The item fit of all {card["pending"]} judgments is being '
        "computed.</span>"
        if "pending" in card
        else ""
    )
    meta = (
        f'<p class="meta" id="item-fit-meta" data-judgments="{answer.num_judgments}" '
        f'data-flagged="{len(flagged)}" data-prompts="{len(rows)}" data-level="{answer.level:g}">'
        f'<b id="item-fit-count">{len(flagged)} of {len(rows)} prompts flagged</b> at level '
        f"{answer.level:g} (posterior predictive p &lt; {answer.level:g} per prompt, "
        f"{answer.num_draws} draws) under the default model fitted on the "
        f"{answer.num_judgments} stored judgments. <code>GET .../item-fit</code> and "
        f"<code>evalset items --fit</code> give these rows.{newer}</p>"
    )
    figures = f'<div class="side">{information_svg(answer.information)}{slopes_svg(rows)}</div>'
    if flagged:
        shown = flagged[:MAX_FLAGGED]
        body = "".join(
            f'<tr data-item="{_e(r.item_id)}"><td class="t">{_e(_label(r.group or r.item_id))}</td>'
            f"<td>{r.fit_p:.2g}</td><td>{r.trend_observed:+.2f}</td><td>{r.trend_model:+.2f}</td>"
            f"<td>{r.alpha_mean:.2f}</td><td>{r.n_comparisons}</td>"
            f'<td class="t diag">{_e(r.misfit_reason)}</td></tr>'
            for r in shown
        )
        more = (
            f'<p class="note">the {len(shown)} worst of {len(flagged)} flagged prompts</p>'
            if len(flagged) > len(shown)
            else ""
        )
        table = (
            '<table id="item-fit-flagged"><thead><tr><th class="t">prompt</th><th>fit p</th>'
            "<th>observed slope</th><th>model's slope</th><th>&alpha;</th><th>comparisons</th>"
            f'<th class="t">why</th></tr></thead><tbody>{body}</tbody></table>{more}'
        )
    else:
        table = (
            f'<p class="note" id="item-fit-none">No prompt flagged at level {answer.level:g}.</p>'
        )
    note = (
        "<p class=\"note\">A flagged prompt's judgments follow the comparisons' abilities less "
        "than the model allows, usually against them: a candidate for a broken, ambiguous or "
        "reversed prompt, to read before keeping it. The level is per prompt, so a few "
        "well-fitting prompts are flagged by chance: about the level or below on "
        "well-specified data, above it on sparse campaigns with dependent or noisy judgments "
        "(up to 7.5% of them at level 0.05 with 18 judgments per prompt, 9.0% with 6), and "
        "few judgments per prompt find fewer of the bad ones "
        '(docs/selection.md, "Item fit").</p>'
    )
    return f"{head}{meta}{figures}{table}{note}</section>"
