"""Judgments -> integer-indexed cells (comparison, prompt) for one dimension.

A *comparison* is an unordered pair of systems with an orientation: "A vs B",
whose ability difference theta > 0 means **B is better** (the sign convention of
Sedoc & Ungar's tables). Rows judged as (B, A) are folded into the same
comparison with the winner flipped, so (A, B) and (B, A) never become two
comparisons. The orientation is the one of the first row in which the pair
appears, unless the caller names one.

Two views of the same judgments feed the graded-response model:

* per judgment: y in {0, 1, 2} = A better, tie, B better (3 categories);
* per cell: the net rating u = #B - #A over the cell's annotators (Sedoc &
  Ungar, Table 1), and the same rating rescaled to [-3, 3] when annotator
  counts vary (their footnote 2), as integer categories 0..6.

Names live here and in :class:`CellData`; every array is integer-indexed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from adaptive.core.data import DataError

#: the rescaled net rating lives in [-RATING_HALF_RANGE, RATING_HALF_RANGE]
RATING_HALF_RANGE = 3


@dataclass(frozen=True)
class CellData:
    """Judgments of one dimension as index arrays.

    Attributes:
        dimension: the dimension these cells belong to.
        systems: system names; ``pair_a``/``pair_b`` index into it.
        prompts: prompt (item) ids as in the data.
        items: the units the model sees: a prompt, or a redundancy group of
            prompts (averaged, as the paper does). ``item_of_prompt[p]`` maps.
        pair_a, pair_b: (C,) systems of each comparison in its orientation.
        judgment_*: (N,) one entry per judgment, oriented to its comparison.
        cell_*: (M,) one entry per (comparison, item) with judgments.
        judgment_screen: (N,) the ranked screen (0..S-1) of each judgment, -1 for a
            judgment from no screen; None when the data has no ``screen_id``.
    """

    dimension: str
    systems: tuple[str, ...]
    prompts: tuple[str, ...]
    items: tuple[str, ...]
    item_members: tuple[tuple[str, ...], ...]
    item_of_prompt: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    judgment_comparison: np.ndarray
    judgment_prompt: np.ndarray
    judgment_item: np.ndarray
    judgment_y: np.ndarray
    judgment_weight: np.ndarray
    judgment_annotator: np.ndarray
    annotators: tuple[str, ...]
    cell_comparison: np.ndarray
    cell_item: np.ndarray
    cell_net: np.ndarray
    cell_count: np.ndarray
    cell_rating: np.ndarray
    extras: Mapping[str, object] = field(default_factory=dict)
    judgment_screen: np.ndarray | None = None

    @property
    def num_comparisons(self) -> int:
        return int(self.pair_a.shape[0])

    @property
    def num_items(self) -> int:
        return len(self.items)

    @property
    def num_systems(self) -> int:
        return len(self.systems)

    @property
    def num_judgments(self) -> int:
        return int(self.judgment_y.shape[0])

    def comparison_names(self) -> list[tuple[str, str]]:
        return [(self.systems[a], self.systems[b]) for a, b in zip(self.pair_a, self.pair_b)]

    def comparison_index(self, system_a: str, system_b: str) -> tuple[int, int]:
        """Index of the comparison of two systems and the sign (+1 as stored, -1 flipped)."""
        for i, (a, b) in enumerate(self.comparison_names()):
            if (a, b) == (system_a, system_b):
                return i, 1
            if (a, b) == (system_b, system_a):
                return i, -1
        raise KeyError(f"no judgments compare {system_a!r} with {system_b!r}")

    def prompts_per_comparison(self) -> np.ndarray:
        counts = np.zeros(self.num_comparisons, dtype=np.int64)
        seen = np.unique(np.stack([self.judgment_comparison, self.judgment_prompt]), axis=1)
        np.add.at(counts, seen[0], 1)
        return counts

    def judgments_per_comparison(self) -> np.ndarray:
        return np.bincount(self.judgment_comparison, minlength=self.num_comparisons)


def rescale_net_rating(
    net: np.ndarray, count: np.ndarray, half_range: int = RATING_HALF_RANGE
) -> np.ndarray:
    """Rescale net ratings u in [-n, n] to integers in [-half_range, half_range].

    The paper scales u to [-3, 3] when the number of annotators varies; with
    n == half_range this is the identity. Halves round away from zero.

    Example:
        >>> rescale_net_rating(np.array([1, -1, 2]), np.array([2, 1, 6])).tolist()
        [2, -3, 1]
    """
    net = np.asarray(net, dtype=np.float64)
    count = np.asarray(count, dtype=np.float64)
    scaled = half_range * net / np.maximum(count, 1.0)
    return (np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)).astype(np.int64)


def orient_pairs(
    judgments: pl.DataFrame, orientation: Iterable[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    """The oriented comparisons of the data: first-seen order unless ``orientation`` says."""
    wanted: dict[frozenset[str], tuple[str, str]] = {}
    for a, b in orientation or ():
        wanted[frozenset((a, b))] = (a, b)
    pairs: dict[frozenset[str], tuple[str, str]] = {}
    for a, b in judgments.select("system_a", "system_b").unique(maintain_order=True).iter_rows():
        key = frozenset((a, b))
        if key not in pairs:
            pairs[key] = wanted.get(key, (a, b))
    return list(pairs.values())


def build_cells(
    judgments: pl.DataFrame,
    *,
    dimension: str | None = None,
    orientation: Iterable[tuple[str, str]] | None = None,
    groups: Sequence[Sequence[str]] | None = None,
    systems: Sequence[str] | None = None,
) -> CellData:
    """Turn validated judgments of one dimension into cells.

    Args:
        judgments: output of :func:`adaptive.core.data.read_judgments`.
        dimension: which dimension; may be omitted when the data has only one.
        orientation: (A, B) pairs fixing the orientation of those comparisons.
        groups: redundancy groups of prompt ids; each group becomes one item
            whose judgments are down-weighted so it counts as one prompt.
        systems: fix the system index order (otherwise first-seen order).

    Returns:
        The :class:`CellData`.
    """
    dims = judgments["dimension"].unique(maintain_order=True).to_list()
    if dimension is None:
        if len(dims) != 1:
            raise DataError("<cells>", message=f"the data has several dimensions {dims}; name one")
        dimension = dims[0]
    elif dimension not in dims:
        raise DataError("<cells>", message=f"unknown dimension {dimension!r}; the data has {dims}")
    df = judgments.filter(pl.col("dimension") == dimension)

    pairs = orient_pairs(df, orientation)
    seen_systems = list(dict.fromkeys(s for pair in pairs for s in pair))
    if systems is not None:
        unknown = set(seen_systems) - set(systems)
        if unknown:
            raise DataError(
                "<cells>", message=f"systems {sorted(unknown)} are not in the system list"
            )
        system_list = list(systems)
    else:
        system_list = seen_systems
    sys_index = {s: i for i, s in enumerate(system_list)}
    pair_key = {}
    for i, (a, b) in enumerate(pairs):
        pair_key[(a, b)] = (i, 1)
        pair_key[(b, a)] = (i, -1)

    prompts = df["item_id"].unique(maintain_order=True).to_list()
    prompt_index = {p: i for i, p in enumerate(prompts)}
    # items: redundancy groups first (in given order), then every ungrouped prompt
    item_members: list[tuple[str, ...]] = []
    item_of_prompt = np.full(len(prompts), -1, dtype=np.int64)
    for group in groups or ():
        members = tuple(p for p in group if p in prompt_index)
        if not members:
            continue
        for p in members:
            if item_of_prompt[prompt_index[p]] != -1:
                raise DataError("<cells>", message=f"prompt {p!r} is in two redundancy groups")
            item_of_prompt[prompt_index[p]] = len(item_members)
        item_members.append(members)
    for p in prompts:
        if item_of_prompt[prompt_index[p]] == -1:
            item_of_prompt[prompt_index[p]] = len(item_members)
            item_members.append((p,))
    items = tuple(m[0] if len(m) == 1 else "+".join(m) for m in item_members)

    # every judgment's pair, prompt and annotator as indices, vectorised (polars hash maps,
    # not a Python object per judgment: 10 million judgments in seconds)
    pair_code = _indices(
        df.select(pl.concat_str("system_a", "system_b", separator="\x00")).to_series(),
        {f"{a}\x00{b}": 2 * i + (s < 0) for (a, b), (i, s) in pair_key.items()},
    )
    comparison = pair_code // 2
    sign = 1 - 2 * (pair_code % 2)
    winner = df["winner"].to_numpy()
    raw_y = np.where(winner == "a", -1, np.where(winner == "b", 1, 0))
    signed = raw_y * sign  # -1 A better, 0 tie, +1 B better, in the comparison's orientation
    prompt = _indices(df["item_id"], prompt_index)
    item = item_of_prompt[prompt]
    annotators = df["annotator_id"].unique(maintain_order=True).to_list()
    annotator = _indices(df["annotator_id"], {a: i for i, a in enumerate(annotators)})

    # per-prompt cells: net rating and count
    num_items = len(item_members)
    num_comp = len(pairs)
    key_pc = comparison * len(prompts) + prompt
    uniq_pc, inv_pc = np.unique(key_pc, return_inverse=True)
    pc_net = np.bincount(inv_pc, weights=signed, minlength=len(uniq_pc)).astype(np.int64)
    pc_count = np.bincount(inv_pc, minlength=len(uniq_pc)).astype(np.int64)
    pc_comp = uniq_pc // len(prompts)
    pc_prompt = uniq_pc % len(prompts)
    pc_item = item_of_prompt[pc_prompt]
    pc_rating = rescale_net_rating(pc_net, pc_count)

    # item cells: average of member prompts' rescaled ratings (the paper's averaging)
    key_ci = pc_comp * num_items + pc_item
    uniq_ci, inv_ci = np.unique(key_ci, return_inverse=True)
    members_with_data = np.bincount(inv_ci, minlength=len(uniq_ci))
    mean_rating = np.bincount(inv_ci, weights=pc_rating, minlength=len(uniq_ci)) / members_with_data
    cell_rating = (np.sign(mean_rating) * np.floor(np.abs(mean_rating) + 0.5)).astype(np.int64)
    cell_net = np.bincount(inv_ci, weights=pc_net, minlength=len(uniq_ci)).astype(np.int64)
    cell_count = np.bincount(inv_ci, weights=pc_count, minlength=len(uniq_ci)).astype(np.int64)

    # per-judgment weight: a group's judgments for one comparison count as one prompt's
    key_j = comparison * num_items + item
    members_of_judgment = members_with_data[np.searchsorted(uniq_ci, key_j)]
    weight = 1.0 / members_of_judgment

    return CellData(
        dimension=dimension,
        systems=tuple(system_list),
        prompts=tuple(prompts),
        items=items,
        item_members=tuple(item_members),
        item_of_prompt=item_of_prompt,
        pair_a=np.array([sys_index[a] for a, _ in pairs], dtype=np.int64),
        pair_b=np.array([sys_index[b] for _, b in pairs], dtype=np.int64),
        judgment_comparison=comparison,
        judgment_prompt=prompt,
        judgment_item=item,
        judgment_y=(signed + 1).astype(np.int64),
        judgment_weight=weight.astype(np.float64),
        judgment_annotator=annotator,
        annotators=tuple(annotators),
        cell_comparison=(uniq_ci // num_items).astype(np.int64),
        cell_item=(uniq_ci % num_items).astype(np.int64),
        cell_net=cell_net,
        cell_count=cell_count,
        cell_rating=cell_rating,
        extras={"num_comparisons": num_comp},
        judgment_screen=_screen_index(df),
    )


def _indices(values: pl.Series, index: Mapping[object, int]) -> np.ndarray:
    """(N,) int64: each value's index in ``index`` (every value is a key), -1 for a null."""
    mapped = values.replace_strict(
        pl.Series(list(index.keys()), dtype=values.dtype),
        pl.Series(list(index.values()), dtype=pl.Int64),
        return_dtype=pl.Int64,
    )
    return mapped.fill_null(-1).to_numpy().astype(np.int64, copy=False)


def _screen_index(df: pl.DataFrame) -> np.ndarray | None:
    """(N,) each judgment's screen (0..S-1, first-seen order), -1 without; None if no screens."""
    if "screen_id" not in df.columns or df["screen_id"].null_count() == df.height:
        return None
    screen = df["screen_id"]
    index = {s: i for i, s in enumerate(screen.drop_nulls().unique(maintain_order=True).to_list())}
    return _indices(screen, index)


def prompt_rating_matrix(cells: CellData) -> tuple[np.ndarray, np.ndarray]:
    """(prompts x comparisons) matrix of rescaled net ratings and its observed mask."""
    num_p, num_c = len(cells.prompts), cells.num_comparisons
    key = cells.judgment_comparison * num_p + cells.judgment_prompt
    uniq, inv = np.unique(key, return_inverse=True)
    signed = cells.judgment_y - 1
    net = np.bincount(inv, weights=signed, minlength=len(uniq))
    count = np.bincount(inv, minlength=len(uniq))
    rating = rescale_net_rating(net, count)
    values = np.zeros((num_p, num_c))
    mask = np.zeros((num_p, num_c), dtype=bool)
    values[uniq % num_p, uniq // num_p] = rating
    mask[uniq % num_p, uniq // num_p] = True
    return values, mask
