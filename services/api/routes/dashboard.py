"""``GET /projects/{project_id}/dashboard``: a campaign at a glance, as one HTML page.

Server-rendered, no JavaScript, no request beyond the page itself (inline SVG
charts, inline CSS, a Content-Security-Policy that forbids anything else). It shows

* progress: comparisons closed and open, judgments per comparison coloured by
  decision, judgments likely still needed;
* the leaderboard of the newest snapshot (the numbers of ``GET .../leaderboard``),
  a forest plot coloured by each system's decision against the leader;
* the Elo leaderboard of the stored judgments (``GET .../elo`` with its defaults: the
  page reads that background answer and says so while it is being computed);
* item fit (``GET .../item-fit`` at its default level, a background answer too): the
  flagged prompts with the reason in words, and the figures of ``evalset items --plot``
  (:mod:`services.api.dashboard_item_fit`);
* the answer card (:mod:`services.api.dashboard_answer`): the campaign's question of
  ``?question=`` (default ``ranking``) answered as ``GET .../answer`` answers it: the
  statement, the groups or top set, and the comparisons still pending;
* every comparison's decision in the declared family (the rows of ``GET .../decisions``
  with the same rule: :func:`services.api.family_tally.read_family`); the judgments still
  needed count the family's comparisons only;
* annotators (judgments, A / B / tie shares, how often the response shown first won);
* the newest snapshots' diagnostics and the latest refit events.

The page reloads itself every ``refresh`` seconds (``<meta http-equiv="refresh">``),
so it follows a campaign while judgments stream in.

Authentication is the project's token, as for the API. A browser cannot send a bearer
header when it navigates, so the page also takes ``?token=<token>`` once: that visit
stores the token in an HttpOnly, SameSite=Strict cookie scoped to the dashboard's path
and redirects to the address without it. :class:`PageCredentials` (installed in front
of :class:`services.api.limits.Guard`) turns that query parameter or cookie into the
bearer header for this one path, so the Guard checks and rate-limits it like any
other request; no API route reads the cookie or the query parameter.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from adaptive.stopping.decisions import DecisionRule
from services.answers import leaderboard_rows
from services.api.dashboard_answer import answer_section, collect_answer
from services.api.dashboard_item_fit import collect_item_fit, item_fit_section
from services.api.dashboard_page import FAVICON, render_dashboard
from services.api.deps import PageProjectId, State, request_page_token
from services.api.errors import ApiError
from services.api.family_tally import read_family
from services.api.limits import PAGE_TOKEN_COOKIE
from services.api.routes.analysis import ELO_DEFAULTS
from services.api.routes.decisions import QuestionParam, Rule
from services.runtime import background
from services.runtime.background import Pending
from services.store import repository as repo

__all__ = ["PageCredentials", "install", "router"]

router = APIRouter()

_DASHBOARD_PATH = re.compile(r"^/projects/([^/]+)/dashboard/?$")

#: nothing but the page itself: inline styles, inline SVG, no script, no other origin
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_PAGE_HEADERS = {
    "Content-Security-Policy": _CSP,
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}

# ---------------------------------------------------------------- authentication


class PageCredentials:
    """For ``GET /projects/{p}/dashboard`` only: the token of ``?token=`` or the page's
    cookie becomes the bearer header, so :class:`services.api.limits.Guard` checks it.

    Without any token the browser gets a short HTML page saying how to open the
    dashboard (instead of a JSON 401). Every other path passes through untouched.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in ("GET", "HEAD")
            or _DASHBOARD_PATH.match(scope["path"]) is None
            or any(name == b"authorization" for name, _ in scope["headers"])
        ):
            await self.app(scope, receive, send)
            return
        token = request_page_token(Request(scope))
        if token is None:
            response = HTMLResponse(_LOGIN_PAGE, status_code=401, headers=_PAGE_HEADERS)
            await response(scope, receive, send)
            return
        header = (b"authorization", b"Bearer " + token.encode("latin-1", "replace"))
        await self.app({**scope, "headers": [*scope["headers"], header]}, receive, send)


_LOGIN_PAGE = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>evalset dashboard: token needed</title>
<link rel="icon" href="{FAVICON}">
<style>body{{font:15px/1.5 system-ui,sans-serif;max-width:40em;margin:3em auto;color:#222}}
code{{background:#f2f2f2;padding:0 .2em}}</style></head><body>
<h1>Token needed</h1>
<p>Open this page once as <code>/projects/&lt;project&gt;/dashboard?token=&lt;the project's
token&gt;</code>. The token is then kept in a cookie for this page only, and the address
loses it.</p></body></html>"""


def install(app: FastAPI) -> None:
    """Put :class:`PageCredentials` in front of the middleware added so far (the Guard)."""
    app.add_middleware(PageCredentials)


# ---------------------------------------------------------------- data


def _recent_events(conn: Any, project_id: str, count: int) -> list[repo.EventRow]:
    """The project's newest ``count`` events, newest first (event numbers are global)."""
    newest = repo.latest_event_seq(conn=conn, project_id=project_id)
    span = 1000
    while True:
        after = max(0, newest - span)
        # at most `span` of the project's events lie in (after, newest]: all come back
        rows = repo.list_events(conn=conn, project_id=project_id, after_seq=after, limit=span)
        if len(rows) >= count or after == 0:
            return rows[-count:][::-1]
        span *= 8


def _annotators(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per annotator: judgments, shares of A / B / tie, and how often the first shown won."""
    by: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        c = by[r["annotator_id"]]
        c["n"] += 1
        c[r["winner"]] += 1
        first = r.get("shown_first")
        if first in ("a", "b") and r["winner"] in ("a", "b"):
            c["ordered"] += 1
            c["first_won"] += int(r["winner"] == first)
    out: list[dict[str, Any]] = [
        {
            "annotator_id": name,
            "n": c["n"],
            "a": c["a"] / c["n"],
            "b": c["b"] / c["n"],
            "tie": c["tie"] / c["n"],
            "first_won": c["first_won"] / c["ordered"] if c["ordered"] else None,
        }
        for name, c in by.items()
    ]
    out.sort(key=lambda r: (-r["n"], r["annotator_id"]))
    return out


def _leader_standing(
    board: list[dict[str, Any]], decisions: list[dict[str, Any]]
) -> dict[str, str]:
    """Each judged system's standing against the leader (evalset.plots.leader_decisions)."""
    from evalset.plots import leader_decisions

    judged = [{"system": r["system_id"]} for r in board if r["judged"]]
    if not judged:
        return {}
    return leader_decisions(judged, decisions)


def _elo(state: Any, project_id: str, dimension: str) -> dict[str, Any] | None:
    """``GET .../elo``'s default answer (its rows, or the judgments it is being computed
    for, or why it has none); None without judgments. Never waits for the job."""
    try:
        source = state.load_source((project_id, dimension))
        result = background.elo(state.jobs, project_id, source, dict(ELO_DEFAULTS))
    except ValueError as exc:
        return {"error": str(exc)}
    if result is None:
        return None
    if isinstance(result, Pending):
        if result.previous is not None:  # the newest finished ratings, while newer ones run
            return {"board": result.previous, "pending": result.num_judgments}
        return {"pending": result.num_judgments}
    return {"board": result}


def collect(
    state: Any,
    project_id: str,
    dimension: str | None,
    rule: DecisionRule,
    num_events: int = 15,
    question: str | None = None,
) -> dict[str, Any]:
    """Everything the page shows, read in one transaction (decisions computed as the API does;
    the answer card's ``question``: :mod:`services.api.dashboard_answer`)."""
    with state.store.read() as conn:
        project = repo.get_project(conn=conn, project_id=project_id)
        if project is None:
            raise ApiError(404, "not_found", f"no project {project_id!r}")
        systems = [r["system_id"] for r in repo.list_systems(conn=conn, project_id=project_id)]
        dims = [d["dimension_id"] for d in repo.list_dimensions(conn=conn, project_id=project_id)]
        if dimension is None:
            # as the API for one dimension or "overall"; otherwise the first (a page shows one)
            dimension = "overall" if "overall" in dims or not dims else dims[0]
        if dimension not in dims:
            raise ApiError(
                404, "not_found", f"unknown dimension {dimension!r}; the project has {dims}"
            )
        dim_rows = repo.fetch_judgments(conn=conn, project_id=project_id, dimension=dimension)
        num_prompts = repo.count_prompts(conn=conn, project_id=project_id)
        num_annotators = len(repo.list_annotators(conn=conn, project_id=project_id))
        events = _recent_events(conn, project_id, num_events)
        metas = {
            m: repo.latest_snapshot_meta(
                conn=conn, project_id=project_id, dimension=dimension, method=m
            )
            for m in ("laplace", "nuts")
        }
    report = read_family(state, project_id, rule)
    decisions = [r for r in report.rows if r["dimension"] == dimension]
    snap = state.snapshot(project_id, dimension)
    board = leaderboard_rows(snap, level=0.95) if snap is not None else []
    return {
        "project_id": project_id,
        "dimension": dimension,
        "dimensions": dims,
        "num_systems": len(systems),
        "num_prompts": num_prompts,
        "num_annotators": num_annotators,
        "num_judgments": report.num_judgments,
        "dim_judgments": len(dim_rows),
        "rule": f"{report.decisions.rule}; family: {report.family.describe()}",
        "decisions": decisions,
        "snapshot": snap,
        "leaderboard": board,
        "standing": _leader_standing(board, decisions),
        "elo": _elo(state, project_id, dimension),
        "answer": collect_answer(state, project_id, rule, question, dimension),
        "item_fit": collect_item_fit(state, project_id, dimension),
        "snapshots": [m for m in metas.values() if m is not None],
        "annotators": _annotators(dim_rows),
        "events": events,
    }


@router.get("/projects/{project_id}/dashboard", include_in_schema=False, response_model=None)
def dashboard(
    project_id: PageProjectId,
    request: Request,
    state: State,
    rule: Rule,
    refresh: Annotated[int, Query(ge=0, le=3600, description="seconds between reloads")] = 15,
    dimension: Annotated[str | None, Query(max_length=200)] = None,
    question: QuestionParam = None,
) -> Response:
    """The campaign at a glance (HTML). ``?token=`` once sets a cookie for this page."""
    path = request.url.path
    params: dict[str, Any] = {k: v for k, v in request.query_params.items() if k != "token"}
    if "token" in request.query_params:
        # keep the token out of the address bar, history and later access-log lines
        target = path + (f"?{urlencode(params)}" if params else "")
        response = RedirectResponse(target, status_code=303, headers=_PAGE_HEADERS)
        raw = request.scope.get("raw_path")  # the browser matches a cookie's path as sent
        response.set_cookie(
            PAGE_TOKEN_COOKIE,
            request_page_token(request) or "",
            path=(raw.decode("latin-1") if raw else path).rstrip("/"),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response
    params["refresh"] = refresh
    data = collect(state, project_id, dimension, rule, question=question)
    params["dimension"] = data["dimension"]
    cards = item_fit_section(data["item_fit"], refresh)
    lead = answer_section(data["answer"], path=path, params=params, num_systems=data["num_systems"])
    page = render_dashboard(data, path=path, params=params, refresh=refresh, cards=cards, lead=lead)
    return HTMLResponse(page, headers=_PAGE_HEADERS)
