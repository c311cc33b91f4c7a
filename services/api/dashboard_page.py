"""The dashboard's page: its sections laid out from :func:`services.api.routes.dashboard.collect`.

Plain strings, every value escaped; no script and no request beyond the page (the
dashboard's Content-Security-Policy forbids both). The charts are
:mod:`services.api.dashboard_charts`'.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from services.api.dashboard_charts import (
    COLORS,
    FAVICON,
    MAX_BARS,
    _e,
    forest_svg,
    judgments_svg,
    outcomes_svg,
)

__all__ = ["COLORS", "FAVICON", "render_dashboard"]


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
        f"<td>{r.rank_best}&ndash;{r.rank_worst}</td><td>{r.n_judgments}</td>"
        f'<td title="{_e(r.note)}">{_e(r.decided_ranks or "")}{" *" if r.note else ""}</td></tr>'
        for r in board.rows
    )
    return (
        f'{head}<p class="meta" id="elo-meta" data-judgments="{board.num_judgments}">'
        f"Ratings of the {board.num_judgments} stored judgments (a tie half a win, the average "
        "system at 1000), 95% bootstrap intervals; rank intervals hold for every system at "
        f"once. <code>GET .../elo</code> and <code>evalset elo</code> give these rows.{newer}</p>"
        '<table><thead><tr><th>rank</th><th class="t">system</th><th>Elo</th>'
        "<th>95% interval</th><th>rank interval</th><th>judgments</th>"
        "<th title=\"the ranks of its group in the decisions' ranking (the ranking question "
        'at the same level); * where the two differ: the note says why">decided ranks</th>'
        "</tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def render_dashboard(
    data: dict[str, Any],
    *,
    path: str,
    params: dict[str, Any],
    refresh: int,
    cards: str = "",
    lead: str = "",
) -> str:
    """The dashboard page for :func:`collect`'s ``data``; ``lead``: sections after the
    progress (the answer card), ``cards``: sections after Elo's."""
    decisions = _order(data["decisions"])
    sections = (
        _header(data, path, params, refresh),
        "<main>",
        _progress(data, decisions),
        lead,
        _leaderboard(data),
        _elo_section(data["elo"], refresh),
        cards,
        _annotators(data["annotators"]),
        _decisions(decisions),
        _fits(data),
        "</main>",
    )
    meta_refresh = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{meta_refresh}<title>{_e(data['project_id'])}: evalset dashboard</title>"
        f'<link rel="icon" href="{FAVICON}"><style>{_STYLE}</style></head><body>'
        + "".join(sections)
        + "</body></html>"
    )


def _header(data: dict[str, Any], path: str, params: dict[str, Any], refresh: int) -> str:
    """The campaign's name and counts, and the links that change what the page shows."""
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
    return (
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


def _progress(data: dict[str, Any], decisions: list[dict[str, Any]]) -> str:
    """Comparisons closed and open, judgments per comparison, judgments likely still needed."""
    counts = Counter(d["decision"] for d in decisions)
    closed = len(decisions) - counts.get("undecided", 0)
    open_ = [d for d in decisions if d["decision"] == "undecided"]
    needed_known = [d["needed"] for d in open_ if d["needed"] is not None]
    compared = [d for d in decisions if d["n_judgments"] > 0]
    not_compared = len(decisions) - len(compared)
    out_of_sight = len(open_) - len(needed_known) - not_compared
    sum_needed = sum(needed_known)
    return (
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


def _leaderboard(data: dict[str, Any]) -> str:
    """The newest snapshot's leaderboard: a forest plot and its table."""
    snap, board = data["snapshot"], data["leaderboard"]
    if snap is None:
        return (
            '<section id="leaderboard"><h2>Leaderboard</h2><p class="note">No snapshot of this '
            "dimension yet: re-estimation runs after each accepted batch.</p></section>"
        )
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
    legend = ["leader", "below the leader", "equivalent to the leader", "undecided", "not compared"]
    return (
        '<section id="leaderboard"><h2>Leaderboard</h2>'
        f'<p class="meta" id="leaderboard-snapshot" data-version="{snap.version}">'
        f"snapshot v{snap.version} ({_e(snap.method)}), fitted on {snap.num_judgments} "
        f"judgments at {_when(snap.created_at)}"
        + (f"; {behind} newer judgments not in it yet" if behind > 0 else "")
        + "</p>"
        + '<div class="side"><div>'
        + forest_svg(board, data["standing"])
        + _legend(legend)
        + '<p class="note" id="forest-colours">A colour is the decision of that system\'s '
        "own comparison with the leader, not its rank: a system can be decided below the "
        "leader (blue) while one ranked under it is still undecided (amber). Amber also "
        "marks a system its decision puts above the snapshot's leader (the model and the "
        "judgments disagree on the top).</p>"
        + '</div><table><thead><tr><th>rank</th><th class="t">system</th><th>skill</th>'
        "<th>sd</th><th>95% interval</th><th>mean rank</th><th>P(best)</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div></section>"
    )


def decision_row(d: dict[str, Any]) -> str:
    """A decisions table row (the answer card's pending comparisons use it too)."""
    needed = "" if d["needed"] is None else d["needed"]
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
        f'<td>{d["closed_at"] or ""}</td><td class="needed">{needed}</td></tr>'
    )


#: the decisions table's head
DECISION_HEAD = (
    '<thead><tr><th class="t">A</th><th class="t">B</th><th class="t">decision</th>'
    '<th>&Delta;</th><th title="the interval an equivalence decision rests on">'
    "&Delta; sequence</th>"
    '<th title="B&#39;s share of the non-tie judgments and the sign test&#39;s sequence: '
    'B better when it reaches 0.5">B share</th><th>judgments</th><th>used</th>'
    "<th>prompts</th><th>closed at</th><th>still needed</th></tr></thead>"
)


def _decisions(decisions: list[dict[str, Any]]) -> str:
    """Every comparison's decision; those without judgments folded away."""
    compared = [d for d in decisions if d["n_judgments"] > 0]
    uncompared = [d for d in decisions if d["n_judgments"] == 0]
    drows = "".join(decision_row(d) for d in compared)
    folded = (
        f"<details><summary>{len(uncompared)} comparisons without judgments yet</summary>"
        f'<table class="uncompared">{DECISION_HEAD}<tbody>'
        + "".join(decision_row(d) for d in uncompared)
        + "</tbody></table></details>"
        if uncompared
        else ""
    )
    return (
        '<section id="decisions"><h2>Decisions</h2><p class="note">Net preference &Delta;: '
        "mean over prompts of the signed judgment (+1 B, &minus;1 A, 0 tie); &Delta; &gt; 0: "
        "B better. Valid at every look (anytime-valid).</p>"
        f"<table>{DECISION_HEAD}<tbody>{drows}</tbody></table>{folded}</section>"
    )


def _annotators(ann: list[dict[str, Any]]) -> str:
    """The most active annotators: judgments, A / B / tie shares, first shown won."""
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
    return (
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


def _fits(data: dict[str, Any]) -> str:
    """The newest snapshots' diagnostics and the latest refit events."""
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
    return (
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
