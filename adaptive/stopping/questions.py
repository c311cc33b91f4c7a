"""The question a campaign asks, and its answer from the per-pair anytime-valid decisions.

Teams rarely need every comparison's sign. A campaign declares its question:

* ``all-pairs``: the sign of every comparison of the family (the default);
* ``top-k:K``: the set of the K best systems (or, when the data cannot separate
  the K-th from the next, the smallest set of at least K that they can);
* ``ranking``: an order of the systems in tied groups, a group being systems the
  data cannot separate;
* ``versus:REF[,REF...]``: each other system against each reference;
* ``equivalence:A,B``: whether A and B are equivalent (|Δ| < margin) or which is better.

**Every answer is a conjunction of pairwise decisions.** "{X, Y} are the top 2" is
stated only when *each* of X and Y is decided better than *each* other system
(every cross pair, by its own judgments); a ranking's cut between two groups only
when every system above is decided better than every system below; a tied group
of a ranking is "equivalent" only when each of its pairs is decided equivalent,
otherwise it is only "not separated", which claims nothing. No transitivity is
assumed: a cut needs all of its cross pairs.

**Why choosing the pairs from the data keeps the guarantee.** The decisions of
*all* pairs the answer could ever need form one family (top-k and ranking: every
pair of the systems; versus: each system against each reference; equivalence:
the one pair), and the multiplicity rule holds the probability that *any*
decision of that family is ever wrong, at any look, to at most ``alpha``
(:mod:`adaptive.stopping.rule`). On the complementary event every decision ever
made is right, so every statement built from decisions is right, whichever pairs
were sampled, whichever candidate set the data suggested and whenever the answer
is read. Hence ``P(any answer ever stated is wrong) <= alpha``. The recommender may
therefore spend only on the comparisons whose verdicts can still change the
answer (:attr:`Answer.relevant`) without breaking the bound; a smaller family
than the question needs (e.g. top-k on the ``compared`` family when some pairs
were never judged) would not hold it, which is why the question sets the family.

**Which set, which order.** Systems are put in order of decided wins minus decided
losses, then by their mean net preference. Any set that is separated from the rest
(each member decided better than each non-member) is a prefix of this order: a
member of a separated set of size i has at least K - i decided wins and at most
i - 1 losses, a non-member at most K - i - 1 wins and at least i losses. The
separated prefixes are nested, so the cuts of a ranking are well defined.

References:
    Kalyanakrishnan, Tewari, Auer & Stone (2012), LUCB (the boundary pairs first);
    Kaufmann, Cappé & Garivier (2016), "On the complexity of best-arm identification";
    Chiang et al. (2024), Chatbot Arena (rank intervals as tied groups);
    Marcus, Peritz & Gabriel (1976), closed testing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from adaptive.stopping.decisions import A_BETTER, B_BETTER, EQUIVALENT, UNDECIDED, Decisions
from adaptive.stopping.rule import DecisionRule

#: the questions a campaign may declare
QUESTIONS = ("all-pairs", "top-k", "ranking", "versus", "equivalence")
DEFAULT_QUESTION = "all-pairs"
QUESTION_FORMS = "all-pairs, top-k:K (or top-K), ranking, versus:REF[,REF...], equivalence:A,B"


@dataclass(frozen=True)
class Question:
    """A campaign's question, with system names (resolve them with :meth:`resolve`).

    Attributes:
        kind: one of :data:`QUESTIONS`.
        k: the size of the top set (``top-k``).
        references: the reference systems (``versus``).
        pair: the two systems (``equivalence``).
    """

    kind: str = DEFAULT_QUESTION
    k: int = 0
    references: tuple[str, ...] = ()
    pair: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in QUESTIONS:
            raise ValueError(f"question must be one of {QUESTION_FORMS}; not {self.kind!r}")
        refs = tuple(str(r) for r in self.references)
        object.__setattr__(self, "references", refs)
        object.__setattr__(self, "pair", tuple(str(s) for s in self.pair))
        if self.kind == "top-k" and self.k < 1:
            raise ValueError("top-k needs k >= 1, e.g. top-k:3")
        if self.kind != "top-k" and self.k:
            raise ValueError(f"k goes with top-k, not {self.kind}")
        if (self.kind == "versus") != bool(refs):
            raise ValueError("versus needs at least one reference, e.g. versus:gpt-4")
        if len(set(refs)) != len(refs):
            raise ValueError(f"a reference is named twice: {', '.join(refs)}")
        if self.kind == "equivalence":
            if len(self.pair) != 2 or self.pair[0] == self.pair[1]:
                raise ValueError("equivalence needs two different systems, e.g. equivalence:x,y")
        elif self.pair:
            raise ValueError(f"a pair goes with equivalence, not {self.kind}")

    @classmethod
    def parse(cls, text: str | Question | None) -> Question:
        """A question from its written form (:data:`QUESTION_FORMS`).

        Example:
            >>> Question.parse("top-3"), Question.parse("versus:a,b").references
            (Question(kind='top-k', k=3, references=(), pair=()), ('a', 'b'))
        """
        if isinstance(text, Question):
            return text
        text = (text or DEFAULT_QUESTION).strip()
        head, _, rest = text.partition(":")
        head = head.strip().lower()
        names = tuple(s.strip() for s in rest.split(",")) if rest.strip() else ()
        if any(not s for s in names):
            raise ValueError(f"an empty system name in question {text!r}")
        if head.startswith("top-") and head != "top-k" and not rest:
            head, names = "top-k", (head[4:],)
        if head == "top-k":
            if len(names) != 1 or not names[0].isdigit():
                raise ValueError(f"top-k needs k, e.g. top-k:3 or top-3; not {text!r}")
            return cls("top-k", k=int(names[0]))
        if head == "versus":
            return cls("versus", references=names)
        if head == "equivalence":
            return cls("equivalence", pair=names)
        if head in ("all-pairs", "ranking"):
            if names:
                raise ValueError(f"{head} takes no systems; not {text!r}")
            return cls(head)
        raise ValueError(f"question must be one of {QUESTION_FORMS}; not {text!r}")

    def __str__(self) -> str:
        if self.kind == "top-k":
            return f"top-k:{self.k}"
        if self.kind == "versus":
            return "versus:" + ",".join(self.references)
        if self.kind == "equivalence":
            return "equivalence:" + ",".join(self.pair)
        return self.kind

    def check(self, systems: Sequence[str]) -> None:
        """Raise ValueError naming what the systems cannot support."""
        known = set(systems)
        named = [*self.references, *self.pair]
        unknown = [s for s in named if s not in known]
        if unknown:
            raise ValueError(
                f"question {self}: unknown system(s) {', '.join(map(repr, unknown))}; "
                f"the systems are {', '.join(sorted(known))}"
            )
        if self.kind == "top-k" and not self.k < len(known):
            raise ValueError(f"question {self}: k must be below the {len(known)} systems")
        if self.kind == "versus" and len(set(self.references)) >= len(known):
            raise ValueError(f"question {self}: every system is a reference")

    def rule_for(self, rule: DecisionRule, systems: Sequence[str]) -> DecisionRule:
        """The rule whose family holds every pair the answer could need (module docstring)."""
        if self.kind == "all-pairs":
            return rule
        self.check(systems)
        if self.kind in ("top-k", "ranking"):
            return replace(rule, family="all-pairs", pairs=())
        if self.kind == "equivalence":
            return replace(rule, family="registered", pairs=((self.pair[0], self.pair[1]),))
        refs = set(self.references)
        pairs = tuple((s, r) for r in self.references for s in systems if s not in refs)
        return replace(rule, family="registered", pairs=pairs)


class Resolved(NamedTuple):
    """A question with system indices (the core's form)."""

    kind: str
    k: int = 0
    references: tuple[int, ...] = ()
    pair: tuple[int, ...] = ()


def resolve(question: Question, systems: Sequence[str]) -> Resolved:
    """Indices for the names of ``question`` (``systems`` gives each name's index)."""
    question.check(systems)
    index = {s: i for i, s in enumerate(systems)}
    return Resolved(
        question.kind,
        question.k,
        tuple(index[s] for s in question.references),
        tuple(index[s] for s in question.pair),
    )


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


def _cross(order: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
    return order[:t], order[t:]


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
    outcome = np.asarray(decisions.outcome)
    C, K = len(outcome), int(num_systems)
    open_ = outcome == UNDECIDED
    can = open_ if closable is None else open_ & np.asarray(closable, bool)
    if order is None:
        order = system_order(decisions, pair_a, pair_b, K)
    order = np.asarray(order, np.int64)
    beats, equal = _beats(outcome, pair_a, pair_b, K)
    index = _pair_index(pair_a, pair_b, K)
    ordered_beats = beats[np.ix_(order, order)]
    # cuts[t]: the first t + 1 are each decided better than each of the rest
    cuts = np.array([ordered_beats[: t + 1, t + 1 :].all() for t in range(K - 1)], bool)
    relevant = np.zeros(C, bool)
    claims = np.zeros(C, bool)
    kind = question.kind
    top: tuple[int, ...] = ()
    among: tuple[int, ...] = ()
    verdicts: tuple[tuple[int, int, str], ...] = ()
    if kind in ("top-k", "ranking"):
        blocked = _blocked_cuts(order, index, equal, can, open_)
        made = [int(t) + 1 for t in np.flatnonzero(cuts)]
        stated = made  # a ranking states every cut
        if kind == "top-k":
            k = question.k
            answered = bool(cuts[k - 1])
            below_k = max([t for t in made if t <= k], default=0)
            above_k = min([t for t in made if t >= k], default=0)
            top = tuple(order[:below_k].tolist())
            among = tuple(order[:above_k].tolist())
            # top-k states the set of k, or the separated sets just below and above k
            stated = [t for t in {below_k, above_k} if t]
        for t in stated:
            above, below = _cross(order, t)
            claims[index[np.ix_(above, below)].ravel()] = True
        if kind == "top-k":
            if not answered:
                # a cut with a cross pair decided the other way cannot be made in this
                # order: look at the next larger set (its decisions reorder the systems)
                upset = [bool(ordered_beats[t:, :t].any()) for t in range(1, K)]
                goal = next(
                    (t for t in range(k, K) if not blocked[t - 1] and not upset[t - 1]), None
                )
                if goal is not None:
                    above, below = _cross(order, goal)
                    comps = index[np.ix_(above, below)].ravel()
                    comps = comps[comps >= 0]
                    relevant[comps[can[comps]]] = True
        else:
            relevant = _ranking_relevant(order, index, can, cuts, blocked)
            groups_ = _groups(order, cuts)
            answered = all(
                len(g) == 1 or all(equal[x, y] for x in g for y in g if x != y) for g in groups_
            )
            for g in groups_:
                if len(g) > 1 and answered:
                    sub = index[np.ix_(g, g)].ravel()
                    claims[sub[sub >= 0]] = True
    else:
        targets = _question_comparisons(question, index, C, K)
        wanted = np.zeros(C, bool)
        wanted[targets[targets >= 0]] = True
        # a pair the question names but the comparisons lack can never be decided
        answered = bool((targets >= 0).all()) and not (wanted & open_).any()
        relevant = wanted & can
        claims = wanted & ~open_
        if kind != "all-pairs":
            verdicts = _verdicts(question, index, outcome, pair_b, K)
    groups = _groups(order, cuts)
    need = np.asarray(decisions.needed, np.float64)[relevant]
    needed = float(need.sum()) if need.size else 0.0
    settled = answered or not relevant.any()
    return Answer(
        kind, answered, settled, order, cuts, groups, top, among, relevant, claims, needed, verdicts
    )


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
