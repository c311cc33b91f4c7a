"""What the sign test's confidence sequence (B's share of the non-ties) costs the decisions.

Runs :func:`adaptive.stopping.decisions.decide` on a whole campaign and the streaming update (50
judgments a batch, then a read) with the share bounds and, as the baseline measured in
the same run, with them switched off. Prints milliseconds and the ratio.

    python benchmarks/decisions_cost.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from adaptive.stopping import decisions


def _best(fn: Callable[[], object], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _campaign(num_comparisons: int, num_judgments: int, seed: int = 0):  # noqa: ANN202
    rng = np.random.default_rng(seed)
    comparison = rng.integers(0, num_comparisons, num_judgments)
    prompt = rng.integers(0, 500, num_judgments)
    p_b = rng.uniform(0.35, 0.65, num_comparisons)
    decisive = rng.random(num_judgments) >= 0.2
    signed = np.where(decisive, np.where(rng.random(num_judgments) < p_b[comparison], 1, -1), 0)
    return comparison, prompt, signed


def measure(num_comparisons: int, num_judgments: int) -> dict[str, float]:
    comparison, prompt, signed = _campaign(num_comparisons, num_judgments)

    def whole() -> object:
        return decisions.decide(comparison, prompt, signed, num_comparisons)

    def streaming() -> object:
        state = decisions.start(num_comparisons, 500)
        for i in range(0, 5000, 50):
            part = slice(i, i + 50)
            state = decisions.update(state, comparison[part], prompt[part], signed[part])
            decisions.decisions_of(state)
        return state

    out = {"decide_ms": _best(whole) * 1e3, "batch_ms": _best(streaming) * 1e3 / 100}
    kept = decisions._share_bounds
    decisions._share_bounds = lambda *args: None  # the baseline: no share sequence
    try:
        out["decide_base_ms"] = _best(whole) * 1e3
        out["batch_base_ms"] = _best(streaming) * 1e3 / 100
    finally:
        decisions._share_bounds = kept
    return out


def main() -> None:
    for num_comparisons, num_judgments in ((17, 10_000), (45, 100_000)):
        r = measure(num_comparisons, num_judgments)
        print(
            f"{num_comparisons} comparisons, {num_judgments:,} judgments: "
            f"decide {r['decide_ms']:.0f} ms vs {r['decide_base_ms']:.0f} ms without the share "
            f"sequence ({r['decide_ms'] / r['decide_base_ms']:.1f}x); a 50-judgment update and "
            f"read {r['batch_ms']:.1f} ms vs {r['batch_base_ms']:.1f} ms "
            f"({r['batch_ms'] / r['batch_base_ms']:.2f}x)"
        )


if __name__ == "__main__":
    main()
