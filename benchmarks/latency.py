"""Latency summaries shared by the benchmark scripts (run them as ``python benchmarks/X.py``)."""

from __future__ import annotations

import numpy as np


def summarize_ms(
    values: list[float], *, quantiles: tuple[int, ...] = (50, 95), digits: int = 1
) -> dict[str, float | int]:
    """Count, the given percentiles and the maximum of durations in seconds, in milliseconds."""
    if not values:
        return {"n": 0}
    ms = np.asarray(values, dtype=np.float64) * 1000.0
    out: dict[str, float | int] = {"n": len(values)}
    for q in quantiles:
        out[f"p{q}_ms"] = round(float(np.percentile(ms, q)), digits)
    out["max_ms"] = round(float(ms.max()), digits)
    return out
