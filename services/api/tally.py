"""Running tallies of each project's judgments, advanced by every stored batch.

``GET /decisions`` and ``POST /next-batch`` used to read every judgment of the project
and rebuild their state on each request (a second at 22,000 judgments). Here each
(project, dimension) keeps its judgments in integer form and the running
:class:`adaptive.decisions.DecisionState` of each rule asked for; a request reads only
the judgments stored since the last one (by ``seq``: one project's batches commit in
``seq`` order, see :func:`services.store.repository.add_judgments`), folds them in, and
reads the decisions off the state in proportion to the comparisons.

Comparisons are the pairs of the project's registered systems (sorted by id), each
oriented as first judged (as ``campaign_comparisons`` and the fits orient them); a
dimension keeps one decision state per (rule, number of tests), rebuilt from its
integer judgments when the number of comparisons changes (a system registered).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from adaptive.decisions import DecisionRule, Decisions, DecisionState, decisions_of, start, update
from services.store import repository as repo

if TYPE_CHECKING:
    from services.store import Store

#: prompt indices of a dimension's cells are below this (keys: comparison * bound + prompt)
PROMPT_BOUND = 2**31
#: decision states kept per dimension (one per rule and number of tests asked for)
STATES_PER_DIMENSION = 4
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
    """One dimension's judgments in arrival order, as integers, and its decision states.

    Attributes:
        pairs: unordered pair of systems -> comparison id (every pair of the systems
            registered when first read, then pairs judged later, in that order).
        orient: comparison id -> (system_a, system_b), as first judged (before that,
            in the systems' sorted order).
        judged: comparison id -> whether it has a judgment (its orientation is fixed).
        prompts, annotators: name -> id, in first-seen order.
        comparison, prompt, signed: per judgment (signed: +1 B, -1 A, 0 tie, oriented).
        shown: per judgment, 1 when the comparison's A was shown first, 2 B, 0 unknown.
        annotator: per judgment, the annotator's id.
    """

    last_seq: int = 0
    pairs: dict[frozenset[str], int] = field(default_factory=dict)
    orient: list[tuple[str, str]] = field(default_factory=list)
    judged: list[bool] = field(default_factory=list)
    prompts: dict[str, int] = field(default_factory=dict)
    annotators: dict[str, int] = field(default_factory=dict)
    comparison: _Column = field(default_factory=lambda: _Column(np.int64))
    prompt: _Column = field(default_factory=lambda: _Column(np.int64))
    signed: _Column = field(default_factory=lambda: _Column(np.float64))
    shown: _Column = field(default_factory=lambda: _Column(np.int8))
    annotator: _Column = field(default_factory=lambda: _Column(np.int64))
    states: OrderedDict[tuple[DecisionRule, int], DecisionState] = field(
        default_factory=OrderedDict
    )

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

    def fold(self, rows: Sequence[repo.JudgmentRow]) -> None:
        """Append judgments (arrival order) and advance every decision state by them."""
        if not rows:
            return
        comp, prompt, signed, shown, annot = [], [], [], [], []
        for r in rows:
            a, b = r["system_a"], r["system_b"]
            c = self.pair_id(a, b)
            if not self.judged[c]:
                self.orient[c] = (a, b)
                self.judged[c] = True
            flipped = self.orient[c][0] != a
            comp.append(c)
            prompt.append(self.prompts.setdefault(r["item_id"], len(self.prompts)))
            raw = _WINNER.get(r["winner"], 0.0)
            signed.append(-raw if flipped else raw)
            first = r.get("shown_first")
            shown.append(0 if first not in ("a", "b") else 1 + ((first == "a") == flipped))
            annot.append(self.annotators.setdefault(r["annotator_id"], len(self.annotators)))
        self.last_seq = max(self.last_seq, max(int(r["seq"]) for r in rows))
        self.comparison.extend(comp)
        self.prompt.extend(prompt)
        self.signed.extend(signed)
        self.shown.extend(shown)
        self.annotator.extend(annot)
        for key, state in list(self.states.items()):
            if state.outcome.shape[0] != len(self.orient):
                del self.states[key]  # new comparisons: rebuilt when next asked for
            else:
                self.states[key] = update(
                    state, np.asarray(comp), np.asarray(prompt), np.asarray(signed)
                )

    def decisions(self, rule: DecisionRule, num_tests: int) -> Decisions:
        """Every comparison's decision (by comparison id) under ``rule`` and ``num_tests``."""
        key = (rule, int(num_tests))
        state = self.states.get(key)
        if state is None or state.outcome.shape[0] != len(self.orient):
            state = start(len(self.orient), PROMPT_BOUND, rule, num_tests=num_tests)
            state = update(state, self.comparison.view(), self.prompt.view(), self.signed.view())
            self.states[key] = state
            while len(self.states) > STATES_PER_DIMENSION:
                self.states.popitem(last=False)
        self.states.move_to_end(key)
        return decisions_of(state)


@dataclass
class ProjectTally:
    """A project's dimensions' tallies; ``lock`` guards them (and every read of them)."""

    systems: tuple[str, ...] = ()
    dimensions: dict[str, DimensionTally] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def num_judgments(self) -> int:
        return sum(d.num_judgments for d in self.dimensions.values())


class Tallies:
    """The running tallies of the projects this process was asked about (bounded, LRU)."""

    def __init__(self) -> None:
        self._projects: OrderedDict[str, ProjectTally] = OrderedDict()
        self._lock = threading.Lock()

    def project(self, project_id: str) -> ProjectTally:
        with self._lock:
            found = self._projects.get(project_id)
            if found is None:
                found = self._projects[project_id] = ProjectTally()
                while len(self._projects) > PROJECTS:
                    self._projects.popitem(last=False)
            self._projects.move_to_end(project_id)
            return found

    def advance(self, store: Store, project_id: str) -> ProjectTally:
        """The project's tally with every stored judgment (call with the tally's ``lock``
        held: ``with tallies.project(p).lock: tallies.advance(store, p)``).

        Reads only the judgments after each dimension's last ``seq``.
        """
        tally = self.project(project_id)
        with store.read() as conn:
            systems = tuple(
                r["system_id"] for r in repo.list_systems(conn=conn, project_id=project_id)
            )
            dims = [
                d["dimension_id"] for d in repo.list_dimensions(conn=conn, project_id=project_id)
            ]
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
        return tally


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
    return decisions._replace(outcome=outcome, cs_low=low, cs_high=high, e_b=e_b, e_a=e_a, net=net)


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


__all__ = ["DimensionTally", "ProjectTally", "Tallies", "concat", "flip", "take"]
