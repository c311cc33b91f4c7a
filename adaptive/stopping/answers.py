"""A question's answer read off the per-pair decisions (:mod:`adaptive.stopping.questions`).

:func:`answer_question` builds a :class:`Board` of the decided relations between one
dimension's systems (who is decided better than whom, who is decided equivalent, which
undecided comparisons can still close), orders the systems (:func:`system_order`) and reads
the answer of each kind off it: the cuts a top-k or ranking answer states, the named pairs
of versus and equivalence, and the comparisons that can still change the answer
(``relevant``, what the recommender serves). :func:`describe` puts it in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from adaptive.stopping.decisions import A_BETTER, B_BETTER, EQUIVALENT, UNDECIDED, Decisions
from adaptive.stopping.questions import Question, Resolved


class Answer(NamedTuple):
    """A question's answer at one look (system indices; :func:`describe` puts names on it).

    Attributes:
        kind: the question's kind.
        answered: the question is answered (top-k: a separated set of exactly k).
        settled: answered, or no comparison that could change the answer can still close.
        order: (K,) systems in the answer's order (decided wins - losses, then mean net).
        cuts: (K - 1,) bool, ``cuts[t]``: the first t + 1 systems of ``order`` are each
            decided better than each of the others.
        groups: the ranking's groups in order (tuples of systems; a singleton is placed).
        top: top-k: the largest separated set of at most k systems (all of them when
            answered); empty otherwise.
        among: top-k: the smallest separated set of at least k systems (empty if none).
        relevant: (C,) bool, undecided comparisons whose verdicts can still change the
            answer and that can still close: what the recommender serves.
        claims: (C,) bool, the decided comparisons the answer's statements rest on.
        needed: judgments likely still needed by the relevant comparisons (sum; inf when
            one is out of sight).
        verdicts: versus and equivalence: (system, other, outcome) of each pair the question
            names, ``system`` the compared one (versus: not a reference), ``outcome`` one of
            ``better``, ``worse``, ``equivalent``, ``undecided``, ``never compared``.
    """

    kind: str
    answered: bool
    settled: bool
    order: np.ndarray
    cuts: np.ndarray
    groups: tuple[tuple[int, ...], ...]
    top: tuple[int, ...]
    among: tuple[int, ...]
    relevant: np.ndarray
    claims: np.ndarray
    needed: float
    verdicts: tuple[tuple[int, int, str], ...] = ()


def _pair_index(pair_a: np.ndarray, pair_b: np.ndarray, num_systems: int) -> np.ndarray:
    """(K, K) the comparison of each pair of systems (either orientation), -1 when none."""
    index = np.full((num_systems, num_systems), -1, np.int64)
    comps = np.arange(len(pair_a))
    # the first comparison of a pair wins (reversed assignment keeps the first)
    index[pair_a[::-1], pair_b[::-1]] = comps[::-1]
    index[pair_b[::-1], pair_a[::-1]] = comps[::-1]
    return index


def _beats(outcome: np.ndarray, pair_a, pair_b, num_systems: int) -> tuple[np.ndarray, np.ndarray]:
    """(K, K) decided "row better than column", and decided equivalent."""
    beats = np.zeros((num_systems, num_systems), bool)
    b, a = outcome == B_BETTER, outcome == A_BETTER
    beats[pair_b[b], pair_a[b]] = True
    beats[pair_a[a], pair_b[a]] = True
    equal = np.zeros_like(beats)
    e = outcome == EQUIVALENT
    equal[pair_a[e], pair_b[e]] = True
    equal[pair_b[e], pair_a[e]] = True
    return beats, equal


def system_order(
    decisions: Decisions, pair_a: np.ndarray, pair_b: np.ndarray, num_systems: int
) -> np.ndarray:
    """(K,) systems by decided wins minus decided losses, then by mean net preference.

    Example:
        >>> from adaptive.stopping.decisions import decide
        >>> d = decide(np.zeros(60, int), np.arange(60), np.ones(60), 1)
        >>> system_order(d, np.array([0]), np.array([1]), 2).tolist()  # B (1) decided better
        [1, 0]
    """
    beats, _ = _beats(decisions.outcome, pair_a, pair_b, num_systems)
    margin = beats.sum(axis=1) - beats.sum(axis=0)
    net = np.nan_to_num(np.asarray(decisions.net, np.float64))
    total = np.bincount(pair_b, weights=net, minlength=num_systems) - np.bincount(
        pair_a, weights=net, minlength=num_systems
    )
    seen = np.bincount(pair_a, minlength=num_systems) + np.bincount(pair_b, minlength=num_systems)
    score = total / np.maximum(seen, 1)
    return np.lexsort((np.arange(num_systems), -score, -margin)).astype(np.int64)


class Board(NamedTuple):
    """The decided relations of one dimension's systems, in the answer's order."""

    order: np.ndarray  # (K,) systems
    pairs: np.ndarray  # (K, K) comparison of each pair of systems, -1 when none
    beats: np.ndarray  # (K, K) decided "row better than column"
    equal: np.ndarray  # (K, K) decided equivalent
    open_: np.ndarray  # (C,) undecided
    can: np.ndarray  # (C,) undecided and able to close
    cuts: np.ndarray  # (K - 1,) cuts[t]: the first t + 1 each decided better than the rest

    @property
    def ordered_beats(self) -> np.ndarray:
        return self.beats[np.ix_(self.order, self.order)]

    def cross(self, t: int) -> np.ndarray:
        """The comparisons between the first ``t`` systems and the rest (-1: never compared)."""
        return self.pairs[np.ix_(self.order[:t], self.order[t:])].ravel()


def board(decisions: Decisions, pair_a, pair_b, num_systems: int, closable, order) -> Board:
    """The :class:`Board` of the decisions (``order`` default :func:`system_order`)."""
    outcome = np.asarray(decisions.outcome)
    open_ = outcome == UNDECIDED
    can = open_ if closable is None else open_ & np.asarray(closable, bool)
    if order is None:
        order = system_order(decisions, pair_a, pair_b, num_systems)
    order = np.asarray(order, np.int64)
    beats, equal = _beats(outcome, pair_a, pair_b, num_systems)
    ordered = beats[np.ix_(order, order)]
    cuts = np.array([ordered[: t + 1, t + 1 :].all() for t in range(num_systems - 1)], bool)
    index = _pair_index(pair_a, pair_b, num_systems)
    return Board(order, index, beats, equal, open_, can, cuts)


def answer_question(
    question: Resolved,
    decisions: Decisions,
    pair_a: np.ndarray,
    pair_b: np.ndarray,
    num_systems: int,
    *,
    closable: np.ndarray | None = None,
    order: np.ndarray | None = None,
) -> Answer:
    """The answer to ``question`` from the decisions of one dimension's comparisons.

    Args:
        question: the :class:`Resolved` question.
        decisions: the comparisons' :class:`Decisions` (made with the question's family,
            :meth:`Question.rule_for`).
        pair_a, pair_b: (C,) the systems of each comparison, in its orientation.
        num_systems: K.
        closable: (C,) bool, undecided comparisons that can still close (default: all);
            one that cannot blocks the statements it would complete.
        order: the systems' order to read the answer in (default :func:`system_order`;
            a replay's oracle passes the true order).

    Returns:
        :class:`Answer`.
    """
    pair_a = np.asarray(pair_a, np.int64)
    pair_b = np.asarray(pair_b, np.int64)
    b = board(decisions, pair_a, pair_b, int(num_systems), closable, order)
    if question.kind == "top-k":
        answer = _top_k(question.k, b)
    elif question.kind == "ranking":
        answer = _ranking(b)
    else:
        answer = _named_pairs(question, b, decisions.outcome, pair_b)
    need = np.asarray(decisions.needed, np.float64)[answer.relevant]
    return answer._replace(
        settled=answer.answered or not answer.relevant.any(),
        needed=float(need.sum()) if need.size else 0.0,
    )


def _answer(
    kind: str,
    b: Board,
    answered: bool,
    relevant: np.ndarray,
    claims: np.ndarray,
    *,
    top: tuple[int, ...] = (),
    among: tuple[int, ...] = (),
    verdicts: tuple[tuple[int, int, str], ...] = (),
) -> Answer:
    """An :class:`Answer` on the board (``settled`` and ``needed`` are filled in after)."""
    groups = _groups(b.order, b.cuts)
    return Answer(
        kind, answered, answered, b.order, b.cuts, groups, top, among, relevant, claims, 0.0,
        verdicts,
    )  # fmt: skip


def _top_k(k: int, b: Board) -> Answer:
    """Top-k: the cut after k; else the separated sets just below and above it."""
    C, K = len(b.open_), len(b.order)
    made = [int(t) + 1 for t in np.flatnonzero(b.cuts)]
    answered = bool(b.cuts[k - 1])
    below_k = max([t for t in made if t <= k], default=0)
    above_k = min([t for t in made if t >= k], default=0)
    claims = np.zeros(C, bool)
    for t in {below_k, above_k} - {0}:
        claims[b.cross(t)] = True  # a made cut's cross pairs all exist
    relevant = np.zeros(C, bool)
    if not answered:
        blocked = _blocked_cuts(b.order, b.pairs, b.equal, b.can, b.open_)
        # a cut with a cross pair decided the other way cannot be made in this order:
        # look at the next larger set (its decisions reorder the systems)
        upset = [bool(b.ordered_beats[t:, :t].any()) for t in range(1, K)]
        goal = next((t for t in range(k, K) if not blocked[t - 1] and not upset[t - 1]), None)
        if goal is not None:
            comps = b.cross(goal)
            comps = comps[comps >= 0]
            relevant[comps[b.can[comps]]] = True
    top, among = tuple(b.order[:below_k].tolist()), tuple(b.order[:above_k].tolist())
    return _answer("top-k", b, answered, relevant, claims, top=top, among=among)


def _ranking(b: Board) -> Answer:
    """Ranking: every made cut; answered when each group is one system or all equivalent."""
    C = len(b.open_)
    claims = np.zeros(C, bool)
    for t in np.flatnonzero(b.cuts):
        claims[b.cross(int(t) + 1)] = True
    blocked = _blocked_cuts(b.order, b.pairs, b.equal, b.can, b.open_)
    relevant = _ranking_relevant(b.order, b.pairs, b.can, b.cuts, blocked)
    groups = _groups(b.order, b.cuts)
    answered = all(
        len(g) == 1 or all(b.equal[x, y] for x in g for y in g if x != y) for g in groups
    )
    if answered:
        for g in groups:
            sub = b.pairs[np.ix_(g, g)].ravel()
            claims[sub[sub >= 0]] = True
    return _answer("ranking", b, answered, relevant, claims)


def _named_pairs(question: Resolved, b: Board, outcome, pair_b) -> Answer:
    """All-pairs, versus and equivalence: the decisions of the pairs the question names."""
    C, K = len(b.open_), len(b.order)
    targets = _question_comparisons(question, b.pairs, C, K)
    wanted = np.zeros(C, bool)
    wanted[targets[targets >= 0]] = True
    # a pair the question names but the comparisons lack can never be decided
    answered = bool((targets >= 0).all()) and not (wanted & b.open_).any()
    verdicts: tuple[tuple[int, int, str], ...] = ()
    if question.kind != "all-pairs":
        verdicts = _verdicts(question, b.pairs, np.asarray(outcome), pair_b, K)
    return _answer(question.kind, b, answered, wanted & b.can, wanted & ~b.open_, verdicts=verdicts)


def _question_comparisons(question: Resolved, index: np.ndarray, C: int, K: int) -> np.ndarray:
    """The comparisons an all-pairs, versus or equivalence answer reads (-1: never compared)."""
    if question.kind == "all-pairs":
        return np.arange(C, dtype=np.int64)
    if question.kind == "equivalence":
        x, y = question.pair
        return np.array([index[x, y]], np.int64)
    refs = set(question.references)
    out = [index[s, r] for r in question.references for s in range(K) if s not in refs]
    return np.asarray(out, np.int64)


def _verdicts(question: Resolved, index, outcome, pair_b, K: int):
    """(system, other, outcome in words) for each pair a versus or equivalence question names."""
    if question.kind == "equivalence":
        named = [tuple(question.pair)]
    else:
        refs = set(question.references)
        named = [(s, r) for r in question.references for s in range(K) if s not in refs]
    out = []
    for x, y in named:
        c = index[x, y]
        if c < 0:
            word = "never compared"
        elif outcome[c] == EQUIVALENT:
            word = "equivalent"
        elif outcome[c] == UNDECIDED:
            word = "undecided"
        else:
            # B_BETTER: pair_b better; x is better when it is the winner
            winner_b = outcome[c] == B_BETTER
            word = "better" if (pair_b[c] == x) == winner_b else "worse"
        out.append((int(x), int(y), word))
    return tuple(out)


def _groups(order: np.ndarray, cuts: np.ndarray) -> tuple[tuple[int, ...], ...]:
    bounds = [0, *(np.flatnonzero(cuts) + 1).tolist(), len(order)]
    return tuple(tuple(order[s:e].tolist()) for s, e in zip(bounds[:-1], bounds[1:]))


def _blocked_cuts(order, index, equal, can, open_) -> np.ndarray:
    """(K - 1,) cuts no further judgment can make in this order.

    A cut is blocked by a cross pair decided equivalent, or an undecided cross pair that
    cannot close (or was never compared). A cross pair decided the other way does not
    block it: more decisions may reorder the systems.
    """
    K = len(order)
    pos = np.empty(K, np.int64)
    pos[order] = np.arange(K)
    hits = np.zeros(K + 1, np.int64)
    for x in range(K):
        for y in range(x + 1, K):
            c = index[x, y]
            stuck = equal[x, y] or c < 0 or (open_[c] and not can[c])
            if stuck:
                lo, hi = sorted((pos[x], pos[y]))
                hits[lo] += 1  # blocks cuts lo .. hi - 1 (cut t is after position t)
                hits[hi] -= 1
    return np.cumsum(hits)[: K - 1] > 0


def _ranking_relevant(order, index, can, cuts, blocked) -> np.ndarray:
    """Undecided closable pairs crossing a cut that is neither made nor blocked."""
    K = len(order)
    open_cut = ~cuts & ~blocked
    before = np.concatenate([[0], np.cumsum(open_cut)])  # open cuts among 0 .. t - 1
    relevant = np.zeros(len(can), bool)
    for i in range(K):
        for j in range(i + 1, K):
            c = index[order[i], order[j]]
            # cuts i .. j - 1 separate positions i and j
            if c >= 0 and can[c] and before[j] - before[i] > 0:
                relevant[c] = True
    return relevant


def describe(answer: Answer, question: Question, systems: Sequence[str], alpha: float) -> str:
    """The answer in one sentence, with its error bound.

    Example: ``{X, Y} are the top 2 (each decided better than each of the other 8), at
    level 0.05, valid at every look``.
    """

    def names(ids: Sequence[int]) -> str:
        return "{" + ", ".join(systems[i] for i in ids) + "}"

    bound = f"at level {alpha:g}, valid at every look"
    K = len(systems)
    if answer.kind == "top-k":
        k = question.k
        if answer.answered:
            return (
                f"{names(answer.top)} are the top {k} (each decided better than each of the "
                f"other {K - k}), {bound}"
            )
        parts = [f"top {k} not yet separated"]
        if answer.top:
            parts.append(f"{names(answer.top)} are the top {len(answer.top)}")
        if answer.among:
            parts.append(f"the top {k} are among {names(answer.among)}")
        if answer.top or answer.among:
            parts[-1] += f", {bound}"
        return "; ".join(parts)
    if answer.kind == "ranking":
        text = " > ".join(names(g) if len(g) > 1 else systems[g[0]] for g in answer.groups)
        state = "ranked" if answer.answered else "ranking so far"
        tied = "groups in braces are not separated (or decided equivalent when ranked)"
        return f"{state}: {text} ({tied}), {bound}"
    if answer.kind in ("equivalence", "versus"):
        words = {
            "better": "better than",
            "worse": "worse than",
            "equivalent": "equivalent to",
            "undecided": "undecided against",
            "never compared": "never compared with",
        }
        text = "; ".join(f"{systems[x]} {words[w]} {systems[y]}" for x, y, w in answer.verdicts)
        return f"{text} ({'answered' if answer.answered else 'not yet answered'}), {bound}"
    done = "every comparison decided" if answer.answered else "not every comparison decided"
    return f"all pairs: {done}, {bound}"
