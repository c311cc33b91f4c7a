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

:mod:`adaptive.stopping.answers` reads the answer off the decisions.

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
