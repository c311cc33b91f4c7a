"""The posterior snapshot: one immutable, versioned fit of one dimension, and its bytes.

A :class:`Snapshot` is what crosses from re-estimation to every answer: draws of
the skills and item parameters (float32, at most ``max_draws``), the names the
indices stand for, how many judgments it saw up to which sequence number, how it
was fitted and its diagnostics. :func:`encode_snapshot` / :func:`decode_snapshot`
turn it into the npz blob the store keeps (no pickle).
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # JAX is imported on first fit, so a process that only reads starts fast
    from adaptive.core.cells import CellData
    from stan_free_models.posterior import Posterior

FAST = "laplace"
FULL = "nuts"


@dataclass(frozen=True)
class Snapshot:
    """One immutable posterior of one dimension, with the names its indices stand for.

    Attributes:
        dimension: what was judged.
        version: the store's version number (0 until published).
        num_judgments, last_seq: how many judgments the fit saw, up to which sequence number.
        method: ``laplace`` (fast update) or ``nuts`` (full refit).
        created_at: Unix time the fit finished.
        fit_seconds: wall time of the fit.
        diagnostics: :meth:`Diagnostics.summary` of the fit (+ ``passed``).
        systems, items: names of the skill and item axes.
        pair_a, pair_b: (C,) the compared pairs, oriented as first judged.
        pair_judgments, pair_prompts: (C,) judgments and prompts per compared pair.
        skill: (D, S) draws; alpha: (D', P); b: (D', P, K) thresholds (D' <= D draws).
        mode: unconstrained optimum (fast path) for the next warm start, or None.
        pair_observed, pair_observed_p: (C,) each compared pair's observed net preference
            (its mean signed judgment over prompts, the stored orientation) and the
            two-sided p-value of its prompts-as-units t-test
            (:func:`adaptive.estimation.significance.observed_net`): the data's half of
            the significance verdict. None in snapshots stored before they were kept.
        pair_observed_se: (C,) that mean's standard error (NaN with fewer than two
            prompts), for its interval. None in snapshots stored before it was kept.
    """

    dimension: str
    version: int
    num_judgments: int
    last_seq: int
    method: str
    created_at: float
    fit_seconds: float
    diagnostics: dict[str, Any]
    systems: tuple[str, ...]
    items: tuple[str, ...]
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_judgments: np.ndarray
    pair_prompts: np.ndarray
    skill: np.ndarray
    alpha: np.ndarray
    b: np.ndarray
    mode: dict[str, np.ndarray] | None = None
    tau: np.ndarray | None = None  # (D',) sd of the prompt-by-comparison effect, if modelled
    pair_observed: np.ndarray | None = None
    pair_observed_p: np.ndarray | None = None
    pair_observed_se: np.ndarray | None = None

    @property
    def num_draws(self) -> int:
        return int(self.skill.shape[0])

    def meta(self) -> dict[str, Any]:
        """What every answer cites: version, judgments seen, method, time."""
        return {
            "dimension": self.dimension,
            "version": self.version,
            "num_judgments": self.num_judgments,
            "method": self.method,
            "created_at": self.created_at,
            "fit_seconds": self.fit_seconds,
            "num_draws": self.num_draws,
            "diagnostics": self.diagnostics,
        }


def _thin(x: np.ndarray, max_draws: int) -> np.ndarray:
    if x.shape[0] <= max_draws:
        return x
    keep = np.linspace(0, x.shape[0] - 1, max_draws).round().astype(np.int64)
    return x[keep]


def snapshot_from_posterior(
    posterior: Posterior,
    cells: CellData,
    *,
    num_judgments: int,
    last_seq: int,
    max_draws: int = 1000,
    max_item_draws: int = 200,
) -> Snapshot:
    """Pack a per-system fit of ``cells`` into a snapshot with at most ``max_draws`` draws.

    Item parameters (alpha, b) keep at most ``max_item_draws`` draws: they are only
    summarised, and with 1,000 prompts they would otherwise dominate the payload.
    """
    diagnostics: dict[str, Any] = dict(posterior.diagnostics.summary())
    diagnostics["passed"] = bool(posterior.diagnostics.passed())
    diagnostics = {
        k: (None if isinstance(v, float) and not np.isfinite(v) else v)
        for k, v in diagnostics.items()
    }
    from adaptive.estimation.significance import observed_of_cells

    observed = observed_of_cells(cells)
    return Snapshot(
        dimension=cells.dimension,
        version=0,
        num_judgments=num_judgments,
        last_seq=last_seq,
        method=posterior.method,
        created_at=time.time(),
        fit_seconds=float(posterior.diagnostics.seconds),
        diagnostics=diagnostics,
        systems=tuple(cells.systems),
        items=tuple(cells.items),
        pair_a=cells.pair_a.astype(np.int32),
        pair_b=cells.pair_b.astype(np.int32),
        pair_judgments=cells.judgments_per_comparison().astype(np.int64),
        pair_prompts=cells.prompts_per_comparison().astype(np.int64),
        skill=_thin(posterior.flat("skill"), max_draws).astype(np.float32),
        alpha=_thin(posterior.flat("alpha"), min(max_draws, max_item_draws)).astype(np.float32),
        b=_thin(posterior.flat("b"), min(max_draws, max_item_draws)).astype(np.float32),
        mode=None
        if posterior.mode is None
        else {k: np.asarray(v, dtype=np.float32) for k, v in posterior.mode.items()},
        tau=None
        if "tau" not in posterior.draws
        else _thin(posterior.flat("tau"), min(max_draws, max_item_draws)).astype(np.float32),
        pair_observed=observed.mean.astype(np.float64),
        pair_observed_p=observed.p.astype(np.float64),
        pair_observed_se=observed.se.astype(np.float64),
    )


_ARRAYS = ("pair_a", "pair_b", "pair_judgments", "pair_prompts", "skill", "alpha", "b")
#: arrays a snapshot may lack (a model without the cell effect; a blob stored by an older version)
_OPTIONAL = ("tau", "pair_observed", "pair_observed_p", "pair_observed_se")


def encode_snapshot(snapshot: Snapshot) -> bytes:
    """The snapshot as an uncompressed npz blob (float32 draws, names as JSON)."""
    names = json.dumps({"systems": list(snapshot.systems), "items": list(snapshot.items)})
    arrays: dict[str, np.ndarray] = {k: getattr(snapshot, k) for k in _ARRAYS}
    arrays["names"] = np.frombuffer(names.encode(), dtype=np.uint8)
    if snapshot.mode is not None:
        arrays["mode_global"] = snapshot.mode["global"]
        arrays["mode_items"] = snapshot.mode["items"]
        if "log_tau" in snapshot.mode:
            arrays["mode_log_tau"] = snapshot.mode["log_tau"]
        if "logit_lapse" in snapshot.mode:
            arrays["mode_logit_lapse"] = snapshot.mode["logit_lapse"]
    for name in _OPTIONAL:
        if getattr(snapshot, name) is not None:
            arrays[name] = getattr(snapshot, name)
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def decode_snapshot(
    payload: bytes,
    *,
    dimension: str,
    version: int,
    num_judgments: int,
    last_seq: int,
    method: str,
    created_at: float,
    fit_seconds: float,
    diagnostics: dict[str, Any],
) -> Snapshot:
    """Inverse of :func:`encode_snapshot`; the metadata comes from the store's columns."""
    with np.load(io.BytesIO(payload), allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    names = json.loads(arrays.pop("names").tobytes().decode())
    mode = None
    if "mode_global" in arrays:
        mode = {"global": arrays.pop("mode_global"), "items": arrays.pop("mode_items")}
        if "mode_log_tau" in arrays:
            mode["log_tau"] = arrays.pop("mode_log_tau")
        if "mode_logit_lapse" in arrays:
            mode["logit_lapse"] = arrays.pop("mode_logit_lapse")
    return Snapshot(
        dimension=dimension,
        version=version,
        num_judgments=num_judgments,
        last_seq=last_seq,
        method=method,
        created_at=created_at,
        fit_seconds=fit_seconds,
        diagnostics=diagnostics,
        systems=tuple(names["systems"]),
        items=tuple(names["items"]),
        mode=mode,
        tau=arrays.get("tau"),
        pair_observed=arrays.get("pair_observed"),
        pair_observed_p=arrays.get("pair_observed_p"),
        pair_observed_se=arrays.get("pair_observed_se"),
        **{k: arrays[k] for k in _ARRAYS},
    )


__all__ = [
    "FAST",
    "FULL",
    "Snapshot",
    "decode_snapshot",
    "encode_snapshot",
    "snapshot_from_posterior",
]
