"""Recommend: the next annotation batch of a judgments frame, for the command line and Python.

``evalset recommend --data`` parses its flags into a :class:`RecommendRequest` and calls
:func:`recommend_batch`; :func:`evalset.recommend` builds the same request from keyword
arguments and calls it too, so both doors give the same tasks for the same data, request
and seed (no file, no argv in between).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import polars as pl

from evalset.plan import DEFAULT_DRAWS as DEFAULT_DRAWS
from evalset.plan import RecommendRequest as RecommendRequest


def recommend_fits(
    judgments: pl.DataFrame,
    request: RecommendRequest,
    *,
    log: Callable[[str], None] | None = None,
) -> list[Any]:
    """The recommender's fit of each dimension of the judgments (fast path, the request's
    parameterization, draws and seed), as :class:`evalset.recommend_adapter.NamedFit`."""
    from adaptive.core.cells import build_cells
    from adaptive.estimation.fitting import FitConfig, fit_cells
    from evalset.recommend_adapter import NamedFit

    say = log or (lambda _: None)
    config = FitConfig(
        method="fast",
        likelihood="judgment",
        parameterization=request.parameterization,
        num_draws=request.draws,
        seed=request.seed,
        # the batch needs the decisions and the systems' order, not calibrated intervals
        exact_items=False,
        integrate_tau=False,
        robust=False,
    )
    fits = []
    for dim in judgments["dimension"].unique(maintain_order=True).to_list():
        cd = build_cells(judgments, dimension=dim)
        say(f"fitting {dim!r}: {cd.num_comparisons} comparisons, {cd.num_judgments} judgments")
        post = fit_cells(cd, config)
        skill = post.flat("skill") if "skill" in post.draws else None
        fits.append(NamedFit(dim, cd.systems, cd.pair_a, cd.pair_b, post.flat("theta"), skill))
    return fits


def recommend_state(
    fits: Sequence[Any],
    judgments: pl.DataFrame,
    request: RecommendRequest,
    *,
    responses: Mapping[tuple[str, ...], str] | None = None,
) -> tuple[Any, Any, Any, Any]:
    """The recommender's state from :func:`recommend_fits`'s fits and the judgments: the
    snapshot (its decisions under ``request.rule``, every compared comparison one family),
    the names, the cells' state (display counts, annotatable cells) and the cells
    ``request.annotator`` judged (None without one)."""
    from evalset.recommend_adapter import cell_state, prepare

    dims = judgments["dimension"].unique(maintain_order=True).to_list()
    rows = list(judgments.iter_rows(named=True))
    snapshot, names = prepare(
        fits,
        {dim: [r for r in rows if r["dimension"] == dim] for dim in dims},
        systems=[s for r in rows for s in (r["system_a"], r["system_b"])],
        prompts=[r["item_id"] for r in rows],
        rule=request.rule,
    )
    state, exclude = cell_state(
        names,
        rows,
        responses=cast(Mapping[tuple[str, str], str], responses or {}),
        annotator=request.annotator,
    )
    return snapshot, names, state, exclude


def recommend_batch(
    judgments: pl.DataFrame,
    request: RecommendRequest,
    *,
    prompt_text: Mapping[tuple[str, ...], str] | None = None,
    responses: Mapping[tuple[str, ...], str] | None = None,
    log: Callable[[str], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Fit each dimension of the judgments (fast path) and recommend a batch of tasks.

    Args:
        judgments: validated judgments in arrival order.
        request: the :class:`RecommendRequest`.
        prompt_text: prompt text by (item_id,); responses: by (item_id, system).
        log: where progress goes (default: nowhere).
        note: where the notes on what the batch leaves out go (default: ``log``).

    Returns:
        One task per row, in display order, with ``reason`` and ``needed``.

    Raises:
        ValueError: a target names a system or pair the data do not have.
    """
    from evalset.plan import NamedSnapshot, batch_targets, plan_batch
    from evalset.recommend_adapter import UnknownName

    say = log or (lambda _: None)
    tell = note or say
    prompt_text = prompt_text or {}
    responses = responses or {}
    fits = recommend_fits(judgments, request, log=say)
    snapshot, names, state, exclude = recommend_state(fits, judgments, request, responses=responses)
    named = NamedSnapshot(snapshot, names)
    asked = (
        question_targets(judgments, request, names.comparisons, tell) if request.question else None
    )
    try:
        chosen = batch_targets(named, request, asked)
    except UnknownName as exc:
        raise ValueError(exc.args[0]) from exc
    batch, left_out, info = plan_batch(named, state, request, chosen=chosen, exclude=exclude)
    say(
        f"{len(batch)} tasks from {info.num_candidates} candidate cells; "
        f"{int(info.decided.sum())}/{snapshot.num_comparisons} comparisons closed (they get "
        f"no task unless named); {info.unannotatable} cells cannot be annotated (a missing "
        f"or identical response) and are never served"
    )
    for row in left_out:
        need = "no decision in sight" if row["needed"] is None else f"~{row['needed']} judgments"
        tell(
            f"not served: {row['dimension']} {row['system_a']} vs {row['system_b']} needs "
            f"{need} and has {row['servable_prompts']} unjudged prompts to serve: "
            "the campaign's prompts "
            "cannot close it (add prompts, or decide on the judgment unit)"
        )
    if len(batch) < request.size:
        tell(f"note: only {len(batch)} of {request.size} tasks: no other open, annotatable cell")
    out = []
    for k, cell in enumerate(batch):
        item, a, b = cell["item_id"], cell["system_a"], cell["system_b"]
        first, second = (a, b) if cell["shown_first"] == "a" else (b, a)
        out.append(
            {
                "task_id": f"t{k + 1:05d}",
                "item_id": item,
                "dimension": cell["dimension"],
                "prompt": prompt_text.get((item,), ""),
                "system_first": first,
                "response_first": responses.get((item, first), ""),
                "system_second": second,
                "response_second": responses.get((item, second), ""),
                "system_a": a,
                "system_b": b,
                "shown_first": cell["shown_first"],
                "reason": cell["reason"],
                "needed": cell["needed"],
            }
        )
    return out


def question_targets(
    judgments: pl.DataFrame,
    request: RecommendRequest,
    comparisons: Sequence[tuple[str, str, str]],
    tell: Callable[[str], None],
) -> tuple[int, ...]:
    """The recommender's comparisons (indices into ``comparisons``) that the question pends on.

    The answer is read with the question's family (:func:`evalset.questions.answer_judgments`);
    its ``pending`` comparisons are the ones a judgment can still move toward an answer. A
    pending pair the judgments never compared has no cell here and is named in a note.
    """
    from evalset.questions import answer_judgments, status_lines

    asked = answer_judgments(judgments, request.rule, request.question)
    for line in status_lines(asked):
        tell(line)
    out, missing = pending_targets(asked.decisions.rows, comparisons)
    if missing:
        tell(uncompared_note(missing, "a batch from a file"))
    return out


def uncompared_note(missing: Sequence[str], door: str) -> str:
    """The note on the pending pairs a batch of the compared comparisons cannot serve."""
    more = ", ..." if len(missing) > 5 else ""
    return (
        f"note: the question also pends on {len(missing)} pairs nobody compared yet "
        f"({', '.join(missing[:5])}{more}): {door} serves compared pairs only (a served "
        "project's live batch serves them all)"
    )


def pending_targets(
    rows: Sequence[Mapping[str, Any]], comparisons: Sequence[tuple[str, str, str]]
) -> tuple[tuple[int, ...], list[str]]:
    """The indices into ``comparisons`` of the decision rows whose ``question_role`` is
    ``pending`` (:func:`evalset.questions.answer_decisions`), and the pending pairs
    ``comparisons`` lack (``"A vs B"``)."""
    where = {(d, frozenset((a, b))): c for c, (d, a, b) in enumerate(comparisons)}
    out, missing = [], []
    for r in rows:
        if r["question_role"] != "pending":
            continue
        c = where.get((r["dimension"], frozenset((r["system_a"], r["system_b"]))))
        if c is None:
            missing.append(f"{r['system_a']} vs {r['system_b']}")
        else:
            out.append(c)
    return tuple(sorted(out)), missing


Texts = dict[tuple[str, ...], str]


def side_tables(folder: Any) -> tuple[Texts, Texts]:
    """The prompt texts (``items.csv``: item_id, prompt) and responses (``responses.csv``:
    item_id, system, response) next to a judgments file; empty where missing."""
    from pathlib import Path

    def table(path: Path, key: tuple[str, ...], value: str) -> dict[tuple[str, ...], str]:
        if not path.exists():
            return {}
        frame = pl.read_csv(path, infer_schema=False)
        if not set(key + (value,)) <= set(frame.columns):
            return {}
        return {tuple(r[:-1]): r[-1] for r in frame.select(*key, value).iter_rows()}

    folder = Path(folder)
    return (
        table(folder / "items.csv", ("item_id",), "prompt"),
        table(folder / "responses.csv", ("item_id", "system"), "response"),
    )


def as_pairs(pairs: Sequence[tuple[str, str]] | Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(a, b) pairs from tuples or ``"A:B"`` strings."""
    out = []
    for p in pairs:
        a, b = p.split(":", 1) if isinstance(p, str) else p
        out.append((a.strip(), b.strip()))
    return tuple(out)
