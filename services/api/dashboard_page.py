"""The dashboard's HTML: inline SVG charts and the page, from :func:`services.api.routes.dashboard.collect`.

Plain strings, every value escaped; no script and no request beyond the page (the
dashboard's Content-Security-Policy forbids both).
"""

from __future__ import annotations

import html
import math
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from evalset.colors import DECISION_COLORS

__all__ = ["COLORS", "FAVICON", "forest_svg", "judgments_svg", "outcomes_svg", "render_dashboard"]

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


# ---------------------------------------------------------------- the page


def _num(v: float | None, digits: int = 3) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def _diagnostics(diag: dict[str, Any]) -> str:
    """A snapshot's diagnostics in words: what its method has (a Laplace fit has no R-hat)."""
    shown = []
    for key, value in sorted(diag.items()):
        if value is None:
            continue
        if isinstance(value, bool):
            value = "yes" if value else "no"
        elif isinstance(value, float):
            value = _num(value)
        shown.append(f"{_e(key.replace('_', ' '))} {_e(value)}")
    return ", ".join(shown)


def _when(value: Any) -> str:
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, UTC)
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return _e(value)


def _order(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Open comparisons first, closest to a decision first; then closed ones, as they closed."""
    return sorted(
        decisions,
        key=lambda d: (
            d["decision"] != "undecided",
            d["needed"] is None,
            d["needed"] or 0,
            d["closed_at"] or 0,
            d["system_a"],
            d["system_b"],
        ),
    )


_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;
  margin:0;background:#f6f7f9}
header{background:#fff;border-bottom:1px solid #dde;padding:.8em 1.5em}
header h1{font-size:1.3em;margin:0 0 .2em}
main{display:flex;flex-direction:column;gap:1em;padding:1em 1.5em}
section{background:#fff;border:1px solid #dde;border-radius:6px;padding:.6em 1em;overflow-x:auto}
.side{display:flex;flex-wrap:wrap;gap:.5em 2em;align-items:flex-start}
.side>table{width:auto;flex:1 1 480px}
details{margin-top:.6em}
summary{cursor:pointer;color:#555}
h2{font-size:1.05em;margin:.2em 0 .5em}
.meta,.note{color:#555;font-size:.9em}
.nav a{margin-right:.6em}
.nav a.on{font-weight:600;color:#1d1d1f;text-decoration:none}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:.2em .55em;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
th{font-weight:600;background:#fafafa}
td.t,th.t{text-align:left}
td.diag{white-space:normal;min-width:18em}
.dot{display:inline-block;width:.75em;height:.75em;border-radius:50%;margin-right:.35em;
  vertical-align:-.05em}
.kpis{display:flex;flex-wrap:wrap;gap:.6em 2em;margin:.3em 0 .8em}
.kpi b{display:block;font-size:1.5em}
.kpi span{color:#555;font-size:.85em}
.bad{color:#D55E00;font-weight:600}
.legend span{margin-right:1em;white-space:nowrap}
svg.chart{display:block;margin:.4em 0;max-width:100%;height:auto}
svg .grid{stroke:#e4e4e4}
svg .tick{font-size:10px;fill:#666;text-anchor:middle}
svg .label{font-size:11px;fill:#222;text-anchor:end}
svg .value{font-size:10px;fill:#444}
svg .axis{font-size:11px;fill:#444;text-anchor:middle}
svg .inbar{font-size:12px;fill:#fff;text-anchor:middle;font-weight:600}
"""


def _legend(names: list[str]) -> str:
    return (
        '<div class="legend">'
        + "".join(
            f'<span><i class="dot" style="background:{COLORS[n]}"></i>{_e(n)}</span>' for n in names
        )
        + "</div>"
    )


def _links(
    base: str, params: dict[str, Any], key: str, values: list[Any], label: Callable[[Any], str]
) -> str:
    out = []
    for v in values:
        q = urlencode({**params, key: v})
        cls = ' class="on"' if params.get(key) == v else ""
        out.append(f'<a href="{_e(base)}?{_e(q)}"{cls}>{_e(label(v))}</a>')
    return "".join(out)


def _elo_section(elo: dict[str, Any] | None, refresh: int) -> str:
    """The Elo leaderboard (``GET .../elo``'s default answer), or why it is not shown yet."""
    if elo is None:  # no judgments of this dimension
        return ""
    head = '<section id="elo"><h2>Elo (Chatbot Arena\'s method)</h2>'
    if "error" in elo:
        return f'{head}<p class="note">No Elo ratings: {_e(elo["error"])}</p></section>'
    if "pending" in elo and "board" not in elo:
        later = "a later reload" if refresh else "reloading the page"
        return (
            f'{head}<p class="note" id="elo-pending">The Elo ratings of the {elo["pending"]} '
            f"judgments are being computed (bootstrap resamples); {later} shows them.</p></section>"
        )
    board = elo["board"]
    newer = (
        f' <span id="elo-newer">The ratings of all {elo["pending"]} judgments are being '
        "computed.</span>"
        if "pending" in elo
        else ""
    )
    rows = "".join(
        f'<tr data-system="{_e(r.system)}"><td>{r.rank}</td><td class="t">{_e(r.system)}</td>'
        f"<td>{r.elo:.0f}</td><td>[{r.ci_low:.0f}, {r.ci_high:.0f}]</td>"
        f"<td>{r.rank_best}&ndash;{r.rank_worst}</td><td>{r.n_judgments}</td></tr>"
        for r in board.rows
    )
    return (
        f'{head}<p class="meta" id="elo-meta" data-judgments="{board.num_judgments}">'
        f"Ratings of the {board.num_judgments} stored judgments (a tie half a win, the average "
        "system at 1000), 95% bootstrap intervals; rank intervals hold for every system at "
        f"once. <code>GET .../elo</code> and <code>evalset elo</code> give these rows.{newer}</p>"
        '<table><thead><tr><th>rank</th><th class="t">system</th><th>Elo</th>'
        "<th>95% interval</th><th>rank interval</th><th>judgments</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def render_dashboard(
    data: dict[str, Any], *, path: str, params: dict[str, Any], refresh: int, cards: str = ""
) -> str:
    """The dashboard page for :func:`collect`'s ``data``; ``cards``: sections after Elo's."""
    decisions = _order(data["decisions"])
    counts = Counter(d["decision"] for d in decisions)
    closed = len(decisions) - counts.get("undecided", 0)
    open_ = [d for d in decisions if d["decision"] == "undecided"]
    needed_known = [d["needed"] for d in open_ if d["needed"] is not None]
    compared = [d for d in decisions if d["n_judgments"] > 0]
    uncompared = [d for d in decisions if d["n_judgments"] == 0]
    not_compared = len(uncompared)
    out_of_sight = len(open_) - len(needed_known) - not_compared
    snap = data["snapshot"]
    board = data["leaderboard"]

    nav = [
        '<div class="nav meta">refresh every: '
        + _links(path, params, "refresh", [0, 5, 15, 60], lambda v: "off" if v == 0 else f"{v} s")
        + "</div>"
    ]
    if len(data["dimensions"]) > 1:
        nav.append(
            '<div class="nav meta">dimension: '
            + _links(path, params, "dimension", data["dimensions"], str)
            + "</div>"
        )
    head = (
        f"<header><h1>Campaign <code>{_e(data['project_id'])}</code>"
        f" &middot; {_e(data['dimension'])}</h1>"
        f'<div class="meta" id="summary" data-judgments="{data["num_judgments"]}">'
        f"{data['num_judgments']} judgments &middot; {data['num_systems']} systems &middot; "
        f"{data['num_prompts']} prompts &middot; {data['num_annotators']} annotators &middot; "
        f"rendered {_when(time.time())}"
        + (f", reloads every {refresh} s" if refresh else ", no automatic reload")
        + "</div>"
        + "".join(nav)
        + "</header>"
    )

    # progress
    sum_needed = sum(needed_known)
    progress = (
        '<section id="progress" '
        f'data-closed="{closed}" data-open="{len(open_)}" data-judgments="{data["dim_judgments"]}" '
        f'data-needed="{sum_needed}"><h2>Progress</h2><div class="kpis">'
        f'<div class="kpi"><b id="kpi-judgments">{data["dim_judgments"]}</b>'
        "<span>judgments in this dimension</span></div>"
        f'<div class="kpi"><b id="kpi-closed">{closed} / {len(decisions)}</b>'
        "<span>comparisons decided</span></div>"
        f'<div class="kpi"><b id="kpi-open">{len(open_)}</b><span>open</span></div>'
        f'<div class="kpi"><b id="kpi-needed">{"~" if needed_known else ""}{sum_needed}</b>'
        "<span>judgments likely still needed"
        + "".join(
            f"<br>+ {k} open {what}"
            for k, what in (
                (not_compared, "and not compared yet"),
                (out_of_sight, "with no closure in sight"),
            )
            if k
        )
        + "</span></div></div>"
        + outcomes_svg(counts)
        + _legend(["B better", "A better", "equivalent", "undecided"])
        + judgments_svg(compared[:MAX_BARS])
        + (
            f'<p class="note">the first {MAX_BARS} of {len(compared)} compared comparisons, '
            "in the order of the decisions table</p>"
            if len(compared) > MAX_BARS
            else ""
        )
        + f'<p class="note">{_e(data["rule"])}</p></section>'
    )

    # leaderboard
    if snap is None:
        lb = (
            '<section id="leaderboard"><h2>Leaderboard</h2><p class="note">No snapshot of this '
            "dimension yet: re-estimation runs after each accepted batch.</p></section>"
        )
    else:
        rows = "".join(
            f'<tr data-system="{_e(r["system_id"])}"><td>{r["rank"] or ""}</td>'
            f'<td class="t"><i class="dot" style="background:'
            f'{COLORS[data["standing"].get(r["system_id"], "not compared")]}"></i>'
            f"{_e(r['system_id'])}</td><td>{_num(r['mean'])}</td><td>{_num(r['sd'])}</td>"
            f"<td>[{_num(r['ci_low'])}, {_num(r['ci_high'])}]</td>"
            f"<td>{_num(r['mean_rank'], 2)}</td><td>{_num(r['p_best'], 2)}</td></tr>"
            for r in board
        )
        behind = data["dim_judgments"] - snap.num_judgments
        lb = (
            '<section id="leaderboard"><h2>Leaderboard</h2>'
            f'<p class="meta" id="leaderboard-snapshot" data-version="{snap.version}">'
            f"snapshot v{snap.version} ({_e(snap.method)}), fitted on {snap.num_judgments} "
            f"judgments at {_when(snap.created_at)}"
            + (f"; {behind} newer judgments not in it yet" if behind > 0 else "")
            + "</p>"
            + '<div class="side"><div>'
            + forest_svg(board, data["standing"])
            + _legend(
                [
                    "leader",
                    "below the leader",
                    "equivalent to the leader",
                    "undecided",
                    "not compared",
                ]
            )
            + '<p class="note" id="forest-colours">A colour is the decision of that system\'s '
            "own comparison with the leader, not its rank: a system can be decided below the "
            "leader (blue) while one ranked under it is still undecided (amber). Amber also "
            "marks a system its decision puts above the snapshot's leader (the model and the "
            "judgments disagree on the top).</p>"
            + '</div><table><thead><tr><th>rank</th><th class="t">system</th><th>skill</th>'
            "<th>sd</th><th>95% interval</th><th>mean rank</th><th>P(best)</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div></section>"
        )

    elo = _elo_section(data["elo"], refresh)

    # decisions
    def decision_row(d: dict[str, Any]) -> str:
        return (
            f'<tr data-a="{_e(d["system_a"])}" data-b="{_e(d["system_b"])}" '
            f'data-decision="{_e(d["decision"])}">'
            f'<td class="t">{_e(d["system_a"])}</td><td class="t">{_e(d["system_b"])}</td>'
            f'<td class="t decision"><i class="dot" style="background:'
            f'{COLORS.get(d["decision"], "#999")}"></i>{_e(d["decision"])}</td>'
            f"<td>{_num(d['net_preference'])}</td>"
            f"<td>[{_num(d['cs_low'])}, {_num(d['cs_high'])}]</td>"
            f"<td>{_num(d['b_share'])} [{_num(d['b_share_low'])}, {_num(d['b_share_high'])}]</td>"
            f'<td class="n">{d["n_judgments"]}</td><td>{d["n_used"]}</td><td>{d["n_prompts"]}</td>'
            f'<td>{d["closed_at"] or ""}</td><td class="needed">{"" if d["needed"] is None else d["needed"]}</td></tr>'
        )

    head_row = (
        '<thead><tr><th class="t">A</th><th class="t">B</th><th class="t">decision</th>'
        '<th>&Delta;</th><th title="the interval an equivalence decision rests on">'
        "&Delta; sequence</th>"
        '<th title="B&#39;s share of the non-tie judgments and the sign test&#39;s sequence: '
        'B better when it reaches 0.5">B share</th><th>judgments</th><th>used</th>'
        "<th>prompts</th><th>closed at</th><th>still needed</th></tr></thead>"
    )
    drows = "".join(decision_row(d) for d in compared)
    folded = (
        f"<details><summary>{len(uncompared)} comparisons without judgments yet</summary>"
        f'<table class="uncompared">{head_row}<tbody>'
        + "".join(decision_row(d) for d in uncompared)
        + "</tbody></table></details>"
        if uncompared
        else ""
    )
    dec = (
        '<section id="decisions"><h2>Decisions</h2><p class="note">Net preference &Delta;: '
        "mean over prompts of the signed judgment (+1 B, &minus;1 A, 0 tie); &Delta; &gt; 0: "
        "B better. Valid at every look (anytime-valid).</p>"
        f"<table>{head_row}<tbody>{drows}</tbody></table>{folded}</section>"
    )

    # annotators
    ann = data["annotators"]
    shown = ann[:25]
    arows = "".join(
        f'<tr><td class="t">{_e(a["annotator_id"])}</td><td>{a["n"]}</td>'
        f"<td>{a['a']:.0%}</td><td>{a['b']:.0%}</td><td>{a['tie']:.0%}</td>"
        + (
            '<td title="no display order recorded in this annotator\'s judgments">–</td></tr>'
            if a["first_won"] is None
            else f"<td>{a['first_won']:.0%}</td></tr>"
        )
        for a in shown
    )
    annotators = (
        '<section id="annotators"><h2>Annotators</h2>'
        + (
            f'<p class="note">the {len(shown)} most active of {len(ann)}</p>'
            if len(ann) > len(shown)
            else ""
        )
        + '<table><thead><tr><th class="t">annotator</th><th>judgments</th><th>A</th><th>B</th>'
        "<th>tie</th><th>first shown won</th></tr></thead>"
        f"<tbody>{arows}</tbody></table>"
        '<p class="note">"first shown won": share of non-tie judgments with a recorded display '
        "order where the response shown first won (about 50% without position bias; "
        "&ndash; where no judgment recorded which was shown first); "
        "<code>evalset annotators</code> screens them with intervals.</p></section>"
    )

    # snapshots and refit events
    srows = "".join(
        f'<tr><td class="t">{_e(m["method"])}</td><td>{m["version"]}</td>'
        f"<td>{m['num_judgments']}</td><td>{_when(m['created_at'])}</td>"
        f'<td>{m["fit_seconds"]:.2f}</td><td class="t diag">'
        + _diagnostics(m["diagnostics"])
        + "</td></tr>"
        for m in data["snapshots"]
    )
    erows = "".join(
        f'<tr><td>{e["seq"]}</td><td class="t">{_when(e["created_at"])}</td>'
        f'<td class="t{" bad" if e["kind"] in ("rejected", "failed") else ""}">{_e(e["kind"])}</td>'
        f'<td class="t">{_e(e["method"])}</td><td>{e["version"] or ""}</td>'
        f"<td>{e['num_judgments']}</td><td>{e['seconds']:.2f}</td>"
        f'<td class="t">{_e(e["detail"])}</td></tr>'
        for e in data["events"]
    )
    fits = (
        '<section id="fits"><h2>Snapshots and refits</h2>'
        + (
            '<table id="snapshots"><thead><tr><th class="t">method</th><th>version</th>'
            '<th>judgments</th><th>created</th><th>fit s</th><th class="t">diagnostics</th>'
            f"</tr></thead><tbody>{srows}</tbody></table>"
            if srows
            else '<p class="note">No snapshot of this dimension yet.</p>'
        )
        + '<h2 style="margin-top:1em">Latest refit events</h2>'
        + (
            '<table id="events"><thead><tr><th>#</th><th class="t">when</th>'
            '<th class="t">outcome</th><th class="t">method</th><th>version</th>'
            '<th>judgments</th><th>seconds</th><th class="t">detail</th></tr></thead>'
            f"<tbody>{erows}</tbody></table>"
            if erows
            else '<p class="note">No refit events yet.</p>'
        )
        + '<p class="note">All of them: <code>GET /projects/{id}/events</code>.</p></section>'
    )

    meta_refresh = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{meta_refresh}<title>{_e(data['project_id'])}: evalset dashboard</title>"
        f'<link rel="icon" href="{FAVICON}"><style>{_STYLE}</style></head><body>'
        f"{head}<main>{progress}{lb}{elo}{cards}{annotators}{dec}{fits}</main></body></html>"
    )
