"""What every figure shares: matplotlib's Agg backend (no display needed), rows from a frame,
one dimension's rows, and the one writer (PNG or SVG, by the path's suffix)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
# the figures' modules take pyplot from here: imported after the backend is chosen
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["IMAGE_FORMATS", "plt"]

IMAGE_FORMATS = (".png", ".svg")


def _rows(data: Any) -> list[dict[str, Any]]:
    """Rows from a polars/pandas frame or a list of dicts."""
    if hasattr(data, "to_dicts"):
        return list(data.to_dicts())
    if hasattr(data, "to_dict") and hasattr(data, "columns"):
        return list(data.to_dict("records"))
    return list(data)


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    if path.suffix.lower() not in IMAGE_FORMATS:
        plt.close(fig)
        raise ValueError(f"{path}: a figure is written as .png or .svg")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def _only_dimension(
    rows: list[dict[str, Any]], dimension: str | None
) -> tuple[list[dict[str, Any]], str]:
    dims = list(dict.fromkeys(r.get("dimension", "overall") for r in rows))
    dim = dimension or (dims[0] if dims else "overall")
    return [r for r in rows if r.get("dimension", "overall") == dim], dim
