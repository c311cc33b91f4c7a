"""Running tallies of each project's judgments, and the running decisions of its families.

``GET /decisions`` and ``POST /next-batch`` used to read every judgment of the project
and rebuild their state on each request (a second at 22,000 judgments). Here each
(project, dimension) keeps its judgments in integer form; a request reads only the
judgments stored since the last one (by ``seq``: one project's batches commit in ``seq``
order, see :func:`services.store.repository.add_judgments`) and folds them in.

Decisions are a property of a declared comparison family (:mod:`adaptive.stopping.rule`): the
project keeps one running :class:`adaptive.stopping.decisions.DecisionState` per (rule, family)
asked for, over every comparison of the family in every dimension, so that the
multiplicity rule sees the whole family at once. Each read folds the judgments of every
dimension stored since the previous read of that state in one :func:`update`: with
``e-holm`` a read is a look (closed testing over the family's e-values), with
``bonferroni`` the decisions do not depend on the looks at all. A comparison's id within
a dimension is stable; its orientation is fixed by its first judgment (before that, the
order its pair was first named in).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from adaptive.stopping.decisions import (
    UNDECIDED,
    DecisionRule,
    Decisions,
    DecisionState,
    decisions_of,
    start,
    update,
)
from adaptive.stopping.rule import Family, comparison_family
from services.lru import LRU
from services.store import repository as repo

if TYPE_CHECKING:
    from services.store import Store

#: prompt indices of a dimension's cells are below this (keys: comparison * bound + prompt)
PROMPT_BOUND = 2**31
#: running decision states a project keeps (one per rule and family asked for)
FAMILY_STATES = 8
#: (rule, family) whose e-Holm closings a project remembers after their state is dropped
CLOSINGS = 64
#: projects whose tallies a process keeps
PROJECTS = 64
_WINNER = {"a": -1.0, "b": 1.0}


class _Column:
    """A growing 1-d array (amortised appends)."""

    def __init__(self, dtype: type) -> None:
        self.data: np.ndarray = np.zeros(1024, dtype)
        self.size = 0

    def extend(self, values: Sequence[float] | np.ndarray) -> None:
        values = np.asarray(values, self.data.dtype)
        need = self.size + values.shape[0]
        if need > self.data.shape[0]:
            grown = np.zeros(max(need, 2 * self.data.shape[0]), self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : need] = values
        self.size = need

    def view(self) -> np.ndarray:
        return self.data[: self.size]


@dataclass
class DimensionTally:
    """One dimension's judgments in arrival order, as integers.

    Attributes:
        first_seq: ``seq`` of the dimension's first judgment (0: none yet).
        pairs: unordered pair of systems -> comparison id (every pair of the systems
            registered when first read, then pairs judged or asked for later).
        orient: comparison id -> (system_a, system_b), as first judged (before that,
            as first named).
        judged: comparison id -> whether it has a judgment (its orientation is fixed).
        judged_order: comparison ids in the order of their first judgment.
        prompts, annotators: name -> id, in first-seen order.
        comparison, prompt, signed: per judgment (signed: +1 B, -1 A, 0 tie, oriented).
        shown: per judgment, 1 when the comparison's A was shown first, 2 B, 0 unknown.
        annotator: per judgment, the annotator's id.
    """

    last_seq: int = 0
    first_seq: int = 0
    pairs: dict[frozenset[str], int] = field(default_factory=dict)
    orient: list[tuple[str, str]] = field(default_factory=list)
    judged: list[bool] = field(default_factory=list)
    judged_order: list[int] = field(default_factory=list)
    prompts: dict[str, int] = field(default_factory=dict)
    annotators: dict[str, int] = field(default_factory=dict)
    comparison: _Column = field(default_factory=lambda: _Column(np.int64))
    prompt: _Column = field(default_factory=lambda: _Column(np.int64))
    signed: _Column = field(default_factory=lambda: _Column(np.float64))
    shown: _Column = field(default_factory=lambda: _Column(np.int8))
    annotator: _Column = field(default_factory=lambda: _Column(np.int64))

    @property
    def num_judgments(self) -> int:
        return self.comparison.size

    def pair_id(self, a: str, b: str) -> int:
        """The comparison id of systems ``a`` and ``b`` (a new one, oriented (a, b), if unseen)."""
        key = frozenset((a, b))
        found = self.pairs.get(key)
        if found is None:
            found = self.pairs[key] = len(self.orient)
            self.orient.append((a, b))
            self.judged.append(False)
        return found

    def register(self, systems: Sequence[str]) -> None:
        """Give every pair of ``systems`` (sorted) a comparison id."""
        for i, a in enumerate(systems):
            for b in systems[i + 1 :]:
                self.pair_id(a, b)

    def compared(self) -> list[tuple[str, str]]:
        """The judged comparisons as (system_a, system_b), in the order first judged."""
        return [self.orient[c] for c in self.judged_order]

    def fold(self, rows: Sequence[repo.JudgmentRow]) -> None:
        """Append judgments (arrival order)."""
        if not rows:
            return
        comp, prompt, signed, shown, annot = [], [], [], [], []
        for r in rows:
            a, b = r["system_a"], r["system_b"]
            c = self.pair_id(a, b)
            if not self.judged[c]:
                self.orient[c] = (a, b)
                self.judged[c] = True
                self.judged_order.append(c)
            flipped = self.orient[c][0] != a
            comp.append(c)
            prompt.append(self.prompts.setdefault(r["item_id"], len(self.prompts)))
            raw = _WINNER.get(r["winner"], 0.0)
            signed.append(-raw if flipped else raw)
            first = r.get("shown_first")
            shown.append(0 if first not in ("a", "b") else 1 + ((first == "a") == flipped))
            annot.append(self.annotators.setdefault(r["annotator_id"], len(self.annotators)))
        self.first_seq = self.first_seq or min(int(r["seq"]) for r in rows)
        self.last_seq = max(self.last_seq, max(int(r["seq"]) for r in rows))
        self.comparison.extend(comp)
        self.prompt.extend(prompt)
        self.signed.extend(signed)
        self.shown.extend(shown)
        self.annotator.extend(annot)


@dataclass
class FamilyTally:
    """The running decisions of one (rule, family): one state over all its comparisons.

    Attributes:
        state: the decision state, comparison ``f`` the family's ``f``-th.
        folded: dimension -> how many of its judgments the state has seen.
        decided: the decisions of ``state``, kept until a judgment is folded in (a read
            with nothing new is the same look: its e-values and closings do not change).
    """

    state: DecisionState
    folded: dict[str, int] = field(default_factory=dict)
    decided: Decisions | None = None


@dataclass
class ProjectTally:
    """A project's dimensions' tallies and family states; ``lock`` guards them (and every
    read of them).

    Attributes:
        systems: the registered systems.
        num_prompts: the registered prompts (the campaign's prompts).
        dimensions: dimension -> its tally.
        families: (rule, family comparisons) -> running decisions, least recently used first.
        closings: (rule, family comparisons) -> (outcome, closed_at) of an e-Holm family's
            closed comparisons, kept when its state is dropped so that a rebuilt state
            (one look over every judgment) keeps every decision it gave.
    """

    systems: tuple[str, ...] = ()
    num_prompts: int = 0
    dimensions: dict[str, DimensionTally] = field(default_factory=dict)
    #: ``projects.catalogue_version`` when systems, dimensions and the prompt count were
    #: read (None: never read); ``prompts`` caches the registered prompts of that version
    catalogue_version: int | None = None
    dimension_ids: tuple[str, ...] = ()
    #: the gold cells' keys (``repo.gold_keys``), read at every advance: never ordinary prompts
    gold: frozenset[repo.GoldKey] = frozenset()
    prompts: list[repo.PromptRow] | None = None
    families: LRU[tuple[Any, ...], FamilyTally] = field(default_factory=lambda: LRU(FAMILY_STATES))
    closings: LRU[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = field(
        default_factory=lambda: LRU(CLOSINGS)
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def num_judgments(self) -> int:
        return sum(d.num_judgments for d in self.dimensions.values())

    def judged_dimensions(self) -> list[str]:
        """The dimensions with judgments, in the order of their first judgment."""
        judged = [(t.first_seq, d) for d, t in self.dimensions.items() if t.num_judgments]
        return [d for _, d in sorted(judged)]

    def family(self, rule: DecisionRule) -> Family:
        """The family ``rule`` declares over the dimensions with judgments.

        The comparisons judged (dimensions and comparisons in the order first judged, each
        oriented as first judged), the registered systems for ``all-pairs``: as
        :func:`evalset.decide.family_judgments` finds it in a file of the same judgments.
        """
        dims = self.judged_dimensions()
        compared = [(d, a, b) for d in dims for a, b in self.dimensions[d].compared()]
        return comparison_family(rule, compared, systems=sorted(self.systems), dimensions=dims)

    def available_prompts(self, family: Family) -> np.ndarray:
        """(family size,) the campaign's prompts each comparison could be judged on: its gold
        cells are not among them (never served as ordinary cells, their judgments apart)."""
        gold: dict[tuple[str, frozenset[str]], int] = {}
        for d, _, pair in self.gold:
            gold[(d, pair)] = gold.get((d, pair), 0) + 1
        return np.array(
            [
                max(self.num_prompts, len(self.dimensions[d].prompts))
                - gold.get((d, frozenset((a, b))), 0)
                - gold.get(("", frozenset((a, b))), 0)
                for d, a, b in family.comparisons
            ],
            np.int64,
        )

    def decide(self, rule: DecisionRule, family: Family) -> Decisions:
        """The decisions of ``family``'s comparisons (in its order) under ``rule``.

        Folds the judgments stored since this (rule, family) was last read, from every
        dimension at once: one look. A family not read before (or dropped) starts from
        every judgment, and keeps the e-Holm closings it gave before.
        """
        key = (rule, family.comparisons)
        found = self.families.setdefault(
            key, lambda: FamilyTally(start(family.size, PROMPT_BOUND, rule, num_tests=family.size))
        )
        comp, prompt, signed = [], [], []
        by_dim: dict[str, list[tuple[int, str, str]]] = {}
        for f, (d, a, b) in enumerate(family.comparisons):
            by_dim.setdefault(d, []).append((f, a, b))
        for d, members in by_dim.items():
            dim = self.dimensions.get(d)
            if dim is None:
                continue
            index = np.full(len(dim.orient) + len(members), -1, np.int64)
            sign = np.ones(len(index))
            for f, a, b in members:
                c = dim.pair_id(a, b)
                index[c], sign[c] = f, 1.0 if dim.orient[c] == (a, b) else -1.0
            lo, hi = found.folded.get(d, 0), dim.num_judgments
            ids = dim.comparison.view()[lo:hi]
            keep = index[ids] >= 0
            comp.append(index[ids][keep])
            prompt.append(dim.prompt.view()[lo:hi][keep])
            signed.append(dim.signed.view()[lo:hi][keep] * sign[ids][keep])
            found.folded[d] = hi
        fresh = sum(len(c) for c in comp)
        if fresh == 0 and found.decided is not None:
            return found.decided
        if fresh:
            found.state = update(
                found.state, np.concatenate(comp), np.concatenate(prompt), np.concatenate(signed)
            )
        if rule.correction.closes_by_e_holm:
            found.state = self._keep_closings(key, found.state)
        found.decided = decisions_of(found.state)
        return found.decided

    def _keep_closings(self, key: tuple[Any, ...], state: DecisionState) -> DecisionState:
        """``state`` with the closings remembered for ``key``; remembers its own."""
        kept = self.closings.get(key)
        if kept is not None:
            outcome, closed_at = kept
            again = (state.outcome == UNDECIDED) & (outcome != UNDECIDED)
            if again.any():
                new_outcome, new_closed = state.outcome.copy(), state.closed_at.copy()
                new_outcome[again], new_closed[again] = outcome[again], closed_at[again]
                state = state._replace(outcome=new_outcome, closed_at=new_closed)
        self.closings[key] = (state.outcome.copy(), state.closed_at.copy())
        return state


class Tallies:
    """The running tallies of the projects this process was asked about (bounded, LRU)."""

    def __init__(self) -> None:
        self._projects: LRU[str, ProjectTally] = LRU(PROJECTS)
        self._lock = threading.Lock()

    def project(self, project_id: str) -> ProjectTally:
        with self._lock:
            return self._projects.setdefault(project_id, ProjectTally)

    def advance(self, store: Store, project_id: str) -> ProjectTally:
        """The project's tally with every stored judgment (call with the tally's ``lock``
        held: ``with tallies.project(p).lock: tallies.advance(store, p)``).

        Reads only the judgments after each dimension's last ``seq``.
        """
        tally = self.project(project_id)
        with store.read() as conn:
            # the catalogue is read again only when a write to it raised its version
            version = repo.catalogue_version(conn=conn, project_id=project_id)
            if version != tally.catalogue_version:
                systems = tuple(
                    r["system_id"] for r in repo.list_systems(conn=conn, project_id=project_id)
                )
                dims = tuple(
                    d["dimension_id"]
                    for d in repo.list_dimensions(conn=conn, project_id=project_id)
                )
                num_prompts = repo.count_prompts(conn=conn, project_id=project_id)
            else:
                systems, dims, num_prompts = tally.systems, tally.dimension_ids, tally.num_prompts
            gold = frozenset(repo.gold_keys(conn=conn, project_id=project_id))
            new = {
                d: repo.fetch_judgments(
                    conn=conn,
                    project_id=project_id,
                    dimension=d,
                    after_seq=tally.dimensions[d].last_seq if d in tally.dimensions else 0,
                )
                for d in dims
            }
        for d in dims:
            dim = tally.dimensions.get(d)
            if dim is None or systems != tally.systems:
                dim = tally.dimensions.setdefault(d, DimensionTally())
                dim.register(sorted(systems))
            dim.fold(new[d])
        tally.systems = systems
        tally.num_prompts = num_prompts
        tally.gold = gold
        if version != tally.catalogue_version:
            tally.catalogue_version, tally.dimension_ids, tally.prompts = version, dims, None
        return tally

    def prompts(self, store: Store, project_id: str) -> list[repo.PromptRow]:
        """The project's registered prompts (with their responses) as of the last
        :meth:`advance`, read once per catalogue version (call with the tally's lock held,
        after ``advance``)."""
        tally = self.project(project_id)
        if tally.prompts is None:
            with store.read() as conn:
                tally.prompts = repo.list_prompts(conn=conn, project_id=project_id)
        return tally.prompts


def flip(decisions: Decisions, flipped: np.ndarray) -> Decisions:
    """The same decisions with the comparisons where ``flipped`` is True read the other way
    round (A and B swapped: the sign of the effect, its interval, the two e-values)."""
    if not flipped.any():
        return decisions
    swap = {1: 2, 2: 1}
    outcome = decisions.outcome.copy()
    outcome[flipped] = [swap.get(int(o), int(o)) for o in outcome[flipped]]
    low, high = decisions.cs_low.copy(), decisions.cs_high.copy()
    low[flipped], high[flipped] = -decisions.cs_high[flipped], -decisions.cs_low[flipped]
    e_b, e_a = decisions.e_b.copy(), decisions.e_a.copy()
    e_b[flipped], e_a[flipped] = decisions.e_a[flipped], decisions.e_b[flipped]
    net = decisions.net.copy()
    net[flipped] = -net[flipped]
    extra: dict[str, Any] = {}
    if decisions.net_used is not None:
        net_used = decisions.net_used.copy()
        net_used[flipped] = -net_used[flipped]
        extra["net_used"] = net_used
    if decisions.b_share is not None:
        share = decisions.b_share.copy()
        share[flipped] = 1.0 - share[flipped]
        extra["b_share"] = share
    if decisions.share_low is not None and decisions.share_high is not None:
        s_low, s_high = decisions.share_low.copy(), decisions.share_high.copy()
        s_low[flipped] = 1.0 - decisions.share_high[flipped]
        s_high[flipped] = 1.0 - decisions.share_low[flipped]
        extra |= {"share_low": s_low, "share_high": s_high}
    return decisions._replace(
        outcome=outcome, cs_low=low, cs_high=high, e_b=e_b, e_a=e_a, net=net, **extra
    )


def take(decisions: Decisions, index: np.ndarray) -> Decisions:
    """The decisions of the comparisons ``index`` (in that order)."""
    fields: dict[str, Any] = {
        name: getattr(decisions, name)[index]
        for name in Decisions._fields
        if isinstance(getattr(decisions, name), np.ndarray)
    }
    return decisions._replace(**fields)


def concat(parts: Sequence[Decisions]) -> Decisions:
    """The decisions of several dimensions, one after the other (one family, one rule)."""
    first = parts[0]
    fields: dict[str, Any] = {
        name: np.concatenate([getattr(p, name) for p in parts])
        for name in Decisions._fields
        if isinstance(getattr(first, name), np.ndarray)
    }
    return first._replace(**fields)


__all__ = ["DimensionTally", "FamilyTally", "ProjectTally", "Tallies", "concat", "flip", "take"]
