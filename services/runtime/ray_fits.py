"""The re-estimation fits as Ray tasks (``EVALSET_REFITS=ray``): one task, one CPU, per fit.

The refresher's fit is a pure module-level function of picklable inputs (the key's
judgments as a polars frame, the previous snapshot's NumPy arrays, the fit's options), so
:func:`fit_on_ray` sends that same function and the same arguments to a Ray worker and
returns the same result: a :class:`~adaptive.estimation.snapshot.Snapshot`, or a
``(Snapshot, SkillBase | None)`` pair. The worker's JAX arrays never cross: the result
is converted to NumPy in the worker (:func:`to_host`). What it adds is where the fit ran:
``diagnostics["fitted_on"]``, the Ray node id of the worker's node.

Tasks are placed with Ray's SPREAD strategy (different nodes when the cluster has
several) and named after the key's dimension and method (``fit[overall:fast]``) in
Ray's dashboard and state API. A worker keeps its compiled programs between tasks, and
reads and writes the persistent JAX compilation cache (:mod:`services.jax_cache`, its
node's ``EVALSET_JAX_CACHE_DIR``), so a shape compiles once per node, not once per task.

Where Ray runs (:func:`connect`): a runtime this process already joined is used as is;
otherwise the ``address`` given (``EVALSET_RAY_ADDRESS``), else ``RAY_ADDRESS``, names
the cluster to join; with neither, Ray starts on this machine. Ray is the ``ray``
extra: without it only ``refits=local`` runs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from adaptive.estimation.skill_update import SkillBase
from adaptive.estimation.snapshot import Snapshot
from adaptive.estimation.streaming import with_diagnostics

try:
    import ray
except ModuleNotFoundError:  # without the `ray` extra only refits=local runs
    ray = None  # type: ignore[assignment]

#: why refits=ray cannot run here
RAY_MISSING = (
    "EVALSET_REFITS=ray needs Ray: pip install 'adaptive-evalset[ray]' (or EVALSET_REFITS=local)"
)

FitResult = Snapshot | tuple[Snapshot, SkillBase | None]


def to_host(value: Any) -> Any:
    """``value`` with every JAX array in it (in dataclasses, dicts, lists and tuples) a NumPy
    array; ``value`` itself when it holds none.

    Example:
        >>> to_host({"a": [1, (2.0, "x")]})
        {'a': [1, (2.0, 'x')]}
    """
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(value, jax.Array):
        return np.asarray(value)
    if isinstance(value, dict):
        items = {k: to_host(v) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    if type(value) in (list, tuple):
        converted = [to_host(v) for v in value]
        same = all(c is v for c, v in zip(converted, value))
        return value if same else type(value)(converted)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f.name for f in dataclasses.fields(value) if f.init]
        changed = {n: to_host(getattr(value, n)) for n in fields}
        if any(changed[n] is not getattr(value, n) for n in fields):
            return dataclasses.replace(value, **changed)
    return value


def with_node(result: FitResult, node_id: str) -> FitResult:
    """``result`` with ``diagnostics["fitted_on"] = node_id`` in its snapshot (and in its
    skill base's, which is the same fit)."""
    return with_diagnostics(result, fitted_on=node_id)


if ray is not None:

    @ray.remote(num_cpus=1)
    def _fit_task(fit_fn: Callable[..., FitResult], kwargs: dict[str, Any]) -> tuple[Any, str]:
        if "jax" not in sys.modules:  # this worker's first fit: share the node's compiled programs
            from services.jax_cache import configure_jax

            configure_jax()
        result = to_host(fit_fn(**kwargs))
        return result, ray.get_runtime_context().get_node_id()


def connect(address: str | None = None, *, num_cpus: int | None = None) -> None:
    """Join Ray (see the module's docstring) unless this process has already.

    Args:
        address: the cluster to join; default: ``RAY_ADDRESS``, else start Ray here.
        num_cpus: CPUs of a Ray started here (default: Ray's, every CPU of the machine).
    """
    if ray is None:
        raise ModuleNotFoundError(RAY_MISSING, name="ray")
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)


def cluster_cpus() -> int:
    """The CPUs of the Ray cluster this process joined (at least 1)."""
    if ray is None:
        raise ModuleNotFoundError(RAY_MISSING, name="ray")
    return max(1, int(ray.cluster_resources().get("CPU", 1)))  # type: ignore[no-untyped-call]


def fit_on_ray(fit_fn: Callable[..., FitResult], /, **kwargs: Any) -> FitResult:
    """``fit_fn(**kwargs)`` as a Ray task (one CPU, SPREAD); its result, with the node it
    ran on as ``diagnostics["fitted_on"]`` (:func:`with_node`). ``fit_fn`` must be a
    module-level function (workers import it by name); Ray must be joined (:func:`connect`)."""
    if ray is None:
        raise ModuleNotFoundError(RAY_MISSING, name="ray")
    source = kwargs.get("source")
    name = f"fit[{getattr(source, 'dimension', '?')}:{kwargs.get('method', '?')}]"
    task = _fit_task.options(scheduling_strategy="SPREAD", name=name)
    result, node_id = ray.get(task.remote(fit_fn, kwargs))
    return with_node(result, node_id)


__all__ = ["RAY_MISSING", "cluster_cpus", "connect", "fit_on_ray", "to_host", "with_node"]
