"""Gold (attention-check) cells and their judgments, kept apart from the judgments.

A project registers cells with a known answer (:func:`add_gold_cells`); from then on every
judgment of such a cell is stored in ``gold_judgments`` by :func:`.judgments.add_judgments`,
never in ``judgments``, so no decision, fit or count reads it (they read ``judgments``).
A cell is matched as :func:`adaptive.annotation.gold.gold_rows` matches it: its prompt, its pair in
either order and its dimension (a gold cell without a dimension holds for every one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypedDict, cast

import polars as pl
from sqlalchemy import Connection, func, select

from adaptive.annotation.gold import GoldCellError, read_gold
from adaptive.core.data import JUDGMENT_FIELDS
from services.store import tables as t
from services.store.repository._common import (
    StoreError,
    _chunks,
    _insert,
    lock_judgments,
    utcnow,
)
from services.store.repository.catalogue import _known
from services.store.repository.leases import active_leased_cells, lock_leases
from services.store.repository.rows import JudgmentRow

#: (dimension, or "" for every dimension; item_id; {system_a, system_b})
GoldKey = tuple[str, str, frozenset[str]]

_FLIP = {"a": "b", "b": "a", "tie": "tie"}


class GoldCellRow(TypedDict):
    item_id: str
    system_a: str
    system_b: str
    dimension: str | None  # None: every dimension
    answer: str


def _key(dimension: str | None, item_id: str, system_a: str, system_b: str) -> GoldKey:
    return (dimension or "", item_id, frozenset((system_a, system_b)))


def list_gold_cells(*, conn: Connection, project_id: str) -> list[GoldCellRow]:
    """The project's gold cells in the order they were registered."""
    c = t.gold_cells.c
    rows = conn.execute(
        select(c.item_id, c.system_a, c.system_b, c.dimension, c.answer)
        .where(c.project_id == project_id)
        .order_by(c.seq)
    )
    return [
        GoldCellRow(
            item_id=r.item_id,
            system_a=r.system_a,
            system_b=r.system_b,
            dimension=r.dimension or None,
            answer=r.answer,
        )
        for r in rows
    ]


def gold_keys(*, conn: Connection, project_id: str) -> set[GoldKey]:
    """The keys of the project's gold cells (see :func:`is_gold`)."""
    c = t.gold_cells.c
    rows = conn.execute(
        select(c.dimension, c.item_id, c.system_a, c.system_b).where(c.project_id == project_id)
    )
    return {(d, i, frozenset((a, b))) for d, i, a, b in rows}


def is_gold(keys: set[GoldKey], dimension: str, item_id: str, system_a: str, system_b: str) -> bool:
    """Whether a judgment of this cell is one of a gold cell (``keys``: :func:`gold_keys`)."""
    pair = frozenset((system_a, system_b))
    return (dimension, item_id, pair) in keys or ("", item_id, pair) in keys


def _refused(code: str, what: str, problems: list[dict[str, Any]]) -> StoreError:
    problems.sort(key=lambda p: p["row"])
    return StoreError(code, f"{len(problems)} {what}; no gold cell was stored", problems=problems)


def _judged(conn: Connection, project_id: str, items: set[str]) -> dict[GoldKey, int]:
    """Stored judgments of the prompts ``items``, by (dimension, item, pair)."""
    c = t.judgments.c
    out: dict[GoldKey, int] = {}
    for chunk in _chunks(sorted(items)):
        for d, i, a, b, n in conn.execute(
            select(c.dimension, c.item_id, c.system_a, c.system_b, func.count())
            .where(c.project_id == project_id, c.item_id.in_(chunk))
            .group_by(c.dimension, c.item_id, c.system_a, c.system_b)
        ):
            key = (d, i, frozenset((a, b)))
            out[key] = out.get(key, 0) + int(n)
    return out


def _checked(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``cells`` by the gold files' own check (ids stripped, answers lowercased): the one the
    HTTP door's schema runs too, so a row is refused for the same reason through every door."""
    columns = ("item_id", "system_a", "system_b", "dimension", "answer")
    frame = pl.DataFrame(
        [{k: cell.get(k) for k in columns} for cell in cells],
        schema=dict.fromkeys(columns, pl.Utf8),
    )
    return read_gold(frame).to_dicts()


def add_gold_cells(
    *,
    conn: Connection,
    project_id: str,
    cells: Sequence[dict[str, Any]],
    now: datetime | None = None,
) -> tuple[int, int]:
    """Register gold cells, all or nothing; returns (created, unchanged).

    A cell registered before with the same answer (in either order) is a no-op. Each row
    is checked as a gold file's (:func:`adaptive.annotation.gold.read_gold`), its
    systems, prompt and dimension must be registered, and its cell must have no stored
    judgment (the running tallies counted those as ordinary ones) nor be held as an
    ordinary cell under an active lease.

    Raises:
        StoreError: ``validation_error`` (a row a gold file could not hold) or
            ``invalid_batch`` (an unknown name, a changed answer, a cell with and without a
            dimension, a judged cell, a cell served under any lease), one problem per bad
            row; nothing was written.
    """
    now = now or utcnow()
    try:
        rows = _checked(cells)
    except GoldCellError as exc:
        bad = {"row": exc.row - 1, "field": exc.column, "message": str(exc)}
        raise _refused("validation_error", "invalid gold row(s)", [bad]) from None
    # one writer with the judgment batches: no judgment of a cell lands between the check
    # that it has none and its registration as gold
    lock_judgments(conn=conn, project_id=project_id)
    problems: list[dict[str, Any]] = []

    def problem(i: int, column: str, message: str) -> None:
        problems.append({"row": i, "field": column, "message": message})

    _check_names(conn, project_id, rows, problem)
    stored = _stored_answers(conn, project_id)
    judged = _judged(conn, project_id, {r["item_id"] for r in rows})
    # a cell served as an ordinary one, under any lease (a late judgment of an expired
    # lease is accepted too), may still be judged as one: its judgment, stored as gold,
    # would silently leave the decisions (the lease lock after the judgments', the order
    # every writer takes them in)
    lock_leases(conn=conn, project_id=project_id)
    held = {
        (c["dimension"], c["item_id"], frozenset((c["system_a"], c["system_b"])))
        for c in active_leased_cells(conn=conn, project_id=project_id, now=now.replace(year=1970))
        if not c.get("gold")
    }
    new, unchanged = _new_gold_cells(rows, stored, judged, held, problem)
    if problems:
        raise _refused("invalid_batch", "problem(s) in the gold cells", problems)
    if new:
        conn.execute(
            t.gold_cells.insert(),
            [{**r, "project_id": project_id, "created_at": now} for r in new],
        )
    return len(new), unchanged


def _check_names(
    conn: Connection,
    project_id: str,
    rows: Sequence[dict[str, Any]],
    problem: Callable[[int, str, str], None],
) -> None:
    """Each row's systems, prompt and dimension (when it names one) registered."""
    for kind, table, id_column, columns in (
        ("system", t.systems, "system_id", ("system_a", "system_b")),
        ("prompt", t.prompts, "prompt_id", ("item_id",)),
        ("dimension", t.dimensions, "dimension_id", ("dimension",)),
    ):
        used = {r[col] for r in rows for col in columns if r[col] is not None}
        known = _known(conn, table, id_column, project_id, used)
        for i, r in enumerate(rows):
            for col in columns:
                if r[col] is not None and r[col] not in known:
                    problem(i, col, f"unknown {kind} {r[col]!r}; register it first")


def _stored_answers(conn: Connection, project_id: str) -> dict[GoldKey, tuple[str, str]]:
    """The project's gold cells: key -> (the system first in the registered row, answer)."""
    g = t.gold_cells.c
    stored: dict[GoldKey, tuple[str, str]] = {}
    for dim, item, a, b, answer in conn.execute(
        select(g.dimension, g.item_id, g.system_a, g.system_b, g.answer).where(
            g.project_id == project_id
        )
    ):
        stored[(dim, item, frozenset((a, b)))] = (a, answer)
    return stored


def _new_gold_cells(
    rows: Sequence[dict[str, Any]],
    stored: dict[GoldKey, tuple[str, str]],
    judged: dict[GoldKey, int],
    held: set[GoldKey],
    problem: Callable[[int, str, str], None],
) -> tuple[list[dict[str, Any]], int]:
    """The rows to register, and how many are registered already with the same answer
    (``problem`` for each that may not be registered)."""
    dims_of: dict[tuple[str, frozenset[str]], set[str]] = {}
    for dim, item, pair in stored:
        dims_of.setdefault((item, pair), set()).add(dim)
    new: list[dict[str, Any]] = []
    unchanged = 0
    for i, r in enumerate(rows):
        key = _key(r["dimension"], r["item_id"], r["system_a"], r["system_b"])
        cell = f"({r['item_id']!r}, {r['system_a']!r} vs {r['system_b']!r}"
        cell += f", {r['dimension']!r})" if r["dimension"] else ", every dimension)"
        if key in stored:
            first, answer = stored[key]
            said = r["answer"] if r["system_a"] == first else _FLIP[r["answer"]]
            if said == answer:
                unchanged += 1
            else:
                problem(
                    i,
                    "answer",
                    f"the gold cell {cell} is registered with answer {answer!r} for "
                    f"{first!r} first; a gold cell's answer cannot be changed",
                )
        elif (refusal := _unregistrable(key, cell, dims_of, judged, held)) is not None:
            problem(i, *refusal)
        else:
            new.append({**r, "dimension": r["dimension"] or ""})
    return new, unchanged


def _unregistrable(
    key: GoldKey,
    cell: str,
    dims_of: dict[tuple[str, frozenset[str]], set[str]],
    judged: dict[GoldKey, int],
    held: set[GoldKey],
) -> tuple[str, str] | None:
    """(column, why) a cell not registered yet cannot become a gold cell, or None: it is
    registered for another dimension in a way that overlaps, judged, or served as an
    ordinary cell."""
    others = dims_of.get(key[1:], set())
    if others and (not key[0] or "" in others):
        return (
            "dimension",
            f"the gold cell {cell} is registered for "
            f"{'every dimension' if '' in others else sorted(others)} already (a cell "
            "without a dimension holds for every dimension)",
        )
    count = sum(
        n
        for (d, item, pair), n in judged.items()
        if (item, pair) == key[1:] and (not key[0] or d == key[0])
    )
    if count:
        return (
            "item_id",
            f"the cell {cell} has {count} stored judgment(s), which the running "
            "decisions counted: a gold cell must be one nobody has judged yet",
        )
    if any((item, pair) == key[1:] and (not key[0] or d == key[0]) for d, item, pair in held):
        return (
            "item_id",
            f"the cell {cell} was served under a lease as an ordinary cell: its judgment "
            "may still arrive (late ones are accepted), so it cannot become a gold cell",
        )
    return None


def add_gold_judgments(
    *, conn: Connection, project_id: str, rows: Sequence[dict[str, Any]], now: datetime
) -> int:
    """Store judgments of gold cells (checked by :func:`.judgments.add_judgments`, which
    calls this); returns how many were new."""
    if not rows:
        return 0
    stmt = (
        _insert(conn, t.gold_judgments)
        .on_conflict_do_nothing(index_elements=["project_id", "judgment_id"])
        .returning(t.gold_judgments.c.seq)
    )
    params = [{**r, "project_id": project_id, "received_at": now} for r in rows]
    return len(list(conn.execute(stmt, params)))


def fetch_gold_judgments(*, conn: Connection, project_id: str) -> list[JudgmentRow]:
    """The judgments of gold cells in arrival order (with their own ``seq``)."""
    g = t.gold_judgments.c
    cols = [g.seq] + [g[k] for k in JUDGMENT_FIELDS]
    stmt = select(*cols).where(g.project_id == project_id).order_by(g.seq)
    return [cast(JudgmentRow, r._asdict()) for r in conn.execute(stmt)]


def count_gold_judgments(*, conn: Connection, project_id: str) -> int:
    """How many judgments of gold cells the project stores."""
    g = t.gold_judgments.c
    return int(conn.scalar(select(func.count()).where(g.project_id == project_id)) or 0)


def gold_cells_taken(*, conn: Connection, project_id: str, now: datetime) -> set[GoldKey]:
    """(dimension, item, pair) of the gold cells anyone judged, or holds under an active lease.

    A next batch serves none of them: a gold cell goes to one annotator, as an ordinary
    cell does, and back to the pool only when its lease expires unjudged, so a cell served
    to two annotators is no more often gold than ordinary (docs/gold.md)."""
    g = t.gold_judgments.c
    taken = {
        (d, i, frozenset((a, b)))
        for d, i, a, b in conn.execute(
            select(g.dimension, g.item_id, g.system_a, g.system_b)
            .where(g.project_id == project_id)
            .distinct()
        )
    }
    taken.update(
        _key(x["dimension"], x["item_id"], x["system_a"], x["system_b"])
        for x in active_leased_cells(conn=conn, project_id=project_id, now=now)
        if x.get("gold")
    )
    return taken


def prompt_responses(
    *, conn: Connection, project_id: str, items: set[str]
) -> dict[str, dict[str, str]]:
    """The registered responses (system -> text) of the prompts ``items``."""
    p = t.prompts.c
    out: dict[str, dict[str, str]] = {}
    for chunk in _chunks(sorted(items)):
        for prompt_id, responses in conn.execute(
            select(p.prompt_id, p.responses).where(
                p.project_id == project_id, p.prompt_id.in_(chunk)
            )
        ):
            out[prompt_id] = dict(responses or {})
    return out
