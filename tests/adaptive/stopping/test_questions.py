"""A campaign's question and its answer from the per-pair decisions."""

from itertools import combinations

import numpy as np
import pytest

from adaptive.stopping.answers import answer_question, describe, system_order
from adaptive.stopping.decisions import decide
from adaptive.stopping.questions import Question, resolve
from adaptive.stopping.rule import DecisionRule, comparison_family


def test_questions_parse_and_print_back():
    for text in ("all-pairs", "top-k:3", "ranking", "versus:a,b", "equivalence:x,y"):
        assert str(Question.parse(text)) == text
    assert Question.parse("top-2") == Question("top-k", k=2)
    assert Question.parse(None) == Question()


@pytest.mark.parametrize(
    "text, words",
    [
        ("top-k", "top-k needs k"),
        ("top-k:0", "k >= 1"),
        ("versus", "at least one reference"),
        ("versus:a,a", "named twice"),
        ("equivalence:a", "two different systems"),
        ("ranking:a", "takes no systems"),
        ("best", "must be one of"),
    ],
)
def test_a_malformed_question_says_what_is_wrong(text, words):
    with pytest.raises(ValueError, match=words):
        Question.parse(text)


def test_a_question_naming_unknown_systems_lists_the_systems():
    with pytest.raises(ValueError, match="unknown system.*'z'.*a, b, c"):
        Question.parse("versus:z").check(["a", "b", "c"])
    with pytest.raises(ValueError, match="below the 3 systems"):
        Question.parse("top-3").check(["a", "b", "c"])


def test_the_question_sets_the_family_that_holds_every_pair_it_may_need():
    systems = ["a", "b", "c", "d"]
    base = DecisionRule()
    compared = [("d", "a", "b")]  # only one pair judged so far
    top = Question.parse("top-1").rule_for(base, systems)
    assert comparison_family(top, compared, systems=systems).size == 6
    versus = Question.parse("versus:a,b").rule_for(base, systems)
    fam = comparison_family(versus, compared, systems=systems)
    assert sorted((a, b) for _, a, b in fam.comparisons) == [
        ("c", "a"),
        ("c", "b"),
        ("d", "a"),
        ("d", "b"),
    ]
    assert Question.parse("equivalence:a,c").rule_for(base, systems).pairs == (("a", "c"),)
    assert Question().rule_for(base, systems) is base


def _decisions(pairs, signs, n=80, alpha=0.05):
    """Decisions of comparisons (a, b) whose judgments are all ``sign`` (0: alternating)."""
    comp, prompt, signed = [], [], []
    for c, s in enumerate(signs):
        comp += [c] * n
        prompt += list(range(n))
        signed += [s] * n if s else [1.0, -1.0] * (n // 2)
    rule = DecisionRule(alpha=alpha, margin=0.0)
    d = decide(np.array(comp), np.array(prompt), np.array(signed, float), len(pairs), rule)
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    return d, a, b


PAIRS4 = list(combinations(range(4), 2))  # (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)


def test_top_1_is_answered_when_the_best_beats_every_other():
    # system 3 beats everyone (B of every pair with 3); the rest are undecided
    signs = [0, 0, 1, 0, 1, 1]
    d, a, b = _decisions(PAIRS4, signs)
    ans = answer_question(resolve(Question.parse("top-1"), "wxyz"), d, a, b, 4)
    assert ans.answered and ans.settled and ans.top == (3,)
    assert ans.claims.tolist() == [False, False, True, False, True, True]
    assert not ans.relevant.any()
    top2 = answer_question(resolve(Question.parse("top-2"), "wxyz"), d, a, b, 4)
    assert not top2.answered and top2.top == (3,) and top2.among == ()
    # the next cut asks only for the pairs between the second place and the last two
    second = int(top2.order[1])
    wanted = {
        c for c, (x, y) in enumerate(PAIRS4) if (x == second) != (y == second) and 3 not in (x, y)
    }
    assert set(np.flatnonzero(top2.relevant).tolist()) == wanted
    text = describe(ans, Question.parse("top-1"), "wxyz", 0.05)
    assert text.startswith("{z} are the top 1") and "valid at every look" in text


def test_a_ranking_puts_the_systems_the_data_cannot_separate_in_one_group():
    # 0 < 1 decided nowhere; {0, 1} each lose to 2 and 3; 3 beats 2
    signs = [0, 1, 1, 1, 1, 1]
    d, a, b = _decisions(PAIRS4, signs)
    ans = answer_question(resolve(Question("ranking"), "wxyz"), d, a, b, 4)
    assert ans.groups == ((3,), (2,), (0, 1)) or ans.groups == ((3,), (2,), (1, 0))
    assert not ans.answered  # {0, 1} neither separated nor equivalent
    assert ans.relevant.tolist() == [True, False, False, False, False, False]
    # the same pair out of reach: the ranking is settled as far as the judgments go
    stuck = answer_question(
        resolve(Question("ranking"), "wxyz"), d, a, b, 4, closable=np.zeros(6, bool)
    )
    assert stuck.settled and not stuck.answered


def test_versus_and_equivalence_read_only_their_pairs():
    signs = [1, 0, -1, 0, 1, 0]
    d, a, b = _decisions(PAIRS4, signs)
    vs = answer_question(resolve(Question.parse("versus:w"), "wxyz"), d, a, b, 4)
    assert vs.claims.tolist() == [True, False, True, False, False, False]
    assert vs.relevant.tolist() == [False, True, False, False, False, False]
    assert not vs.answered
    eq = answer_question(resolve(Question.parse("equivalence:x,z"), "wxyz"), d, a, b, 4)
    assert eq.answered and eq.claims.tolist() == [False, False, False, False, True, False]


def _separated(beats, subset, K):
    rest = [y for y in range(K) if y not in subset]
    return all(beats[x, y] for x in subset for y in rest)


def test_every_separated_set_is_a_cut_of_the_answer_order():
    """The order by decided wins - losses puts every separated set first (brute force)."""
    rng = np.random.default_rng(3)
    K = 6
    pairs = list(combinations(range(K), 2))
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    for _ in range(40):
        truth = rng.permutation(K)  # a true order, with a random part of the pairs decided
        signs = []
        for x, y in pairs:
            decided = rng.random() < 0.6
            signs.append((1.0 if truth[y] > truth[x] else -1.0) if decided else 0)
        d, _, _ = _decisions(pairs, signs)
        beats = np.zeros((K, K), bool)
        for c, (x, y) in enumerate(pairs):
            if d.outcome[c] == 1:
                beats[y, x] = True
            elif d.outcome[c] == 2:
                beats[x, y] = True
        order = system_order(d, a, b, K)
        ans = answer_question(resolve(Question("ranking"), [str(i) for i in range(K)]), d, a, b, K)
        for size in range(1, K):
            for subset in combinations(range(K), size):
                if _separated(beats, subset, K):
                    assert set(order[:size].tolist()) == set(subset)
                    assert ans.cuts[size - 1]
