"""Name-level helpers shared by the CLI and the API: which cells can be annotated at all."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TypedDict

import numpy as np


class NamedCell(TypedDict):
    """One cell of a batch, by name."""

    item_id: str
    system_a: str
    system_b: str
    dimension: str
    shown_first: str
    reason: str
    needed: int | None


def same_text(text: str) -> str:
    """A response as an annotator sees it: entities decoded, case and spacing ignored.

    Example:
        >>> same_text("I &apos;m  married .") == same_text("i 'm married .")
        True
    """
    return " ".join(html.unescape(text).casefold().split())


def annotatable_cells(
    comparisons: Sequence[tuple[str, str, str]],
    prompts: Sequence[str],
    responses: Mapping[tuple[str, str], str],
) -> np.ndarray:
    """(C, P) False where a system has no (or an empty) response to the prompt, or both are the same.

    ``comparisons`` are (dimension, system_a, system_b); ``responses`` maps
    (prompt id, system) to the response text. With no responses at all nothing
    is known and every cell counts as annotatable. Responses that differ only
    in HTML entities, case or spacing count as identical: an annotator could
    only call them a tie, so such cells are skipped, not recorded as ties (the
    net preference is then the average over the prompts where the two systems
    answer differently).

    Example:
        >>> annotatable_cells([("overall", "x", "y")], ["p1", "p2", "p3", "p4"],
        ...                   {("p1", "x"): "hi", ("p1", "y"): "Hi", ("p2", "x"): "a",
        ...                    ("p2", "y"): "b", ("p3", "x"): "c", ("p4", "x"): "d",
        ...                    ("p4", "y"): "  "}).tolist()
        [[False, True, False, False]]
    """
    out = np.ones((len(comparisons), len(prompts)), bool)
    if not responses:
        return out
    # an empty response is a missing one: there is nothing to show the annotator
    norm = {key: same_text(text) for key, text in responses.items() if text and same_text(text)}
    for c, (_dim, a, b) in enumerate(comparisons):
        for p, item in enumerate(prompts):
            ra, rb = norm.get((item, a)), norm.get((item, b))
            out[c, p] = ra is not None and rb is not None and ra != rb
    return out
