"""Fits on several threads of one process at once, as the re-estimation worker runs them.

NumPyro keeps its effect handlers in one module-level list; the engine makes it
per-thread (stan_free_models/threadsafe.py), so a fast update, an items refresh and a
NUTS refit may trace their models at the same moment.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import jax
import numpyro
import numpyro.distributions as dist
import numpyro.primitives
import pytest
from numpyro import handlers

import stan_free_models.engine  # noqa: F401  (importing the engine installs the per-thread stack)
from adaptive.estimation import streaming as st
from services.runtime.fit_health import fit_failures
from services.runtime.refresher import Refresher, RefreshEvent
from services.settings import Settings
from services.store import Store
from stan_free_models import threadsafe
from tests.factories import (
    SYSTEMS,
    MemoryKey,
    ThreadServer,
    add_event,
    judgments,
    simulate,
    wait_for,
)


def test_the_engine_makes_numpyros_handler_stack_per_thread() -> None:
    # the modules, not the functions of the same names their package exports
    cond = importlib.import_module("numpyro.contrib.control_flow.cond")
    scan = importlib.import_module("numpyro.contrib.control_flow.scan")
    stack = numpyro.primitives._PYRO_STACK
    assert isinstance(stack, threadsafe.ThreadLocalStack)
    # every module that imported the list by name sees the same per-thread stack
    for module in (numpyro.handlers, cond, scan):
        assert module._PYRO_STACK is stack, module
    assert threadsafe.install() is stack  # once only


#: a fresh interpreter: the engine imported in the middle of a trace (the handlers already
#: active stay on that thread's stack), and NumPyro modules imported after it
MID_TRACE = """
import importlib
import numpyro, numpyro.distributions as dist, numpyro.primitives as primitives
from numpyro import handlers
with handlers.trace() as tr, handlers.seed(rng_seed=0):
    numpyro.sample("a", dist.Normal())
    import stan_free_models.engine
    numpyro.sample("b", dist.Normal())
scan = importlib.import_module("numpyro.contrib.control_flow.scan")
assert type(primitives._PYRO_STACK).__name__ == "ThreadLocalStack"
assert scan._PYRO_STACK is handlers._PYRO_STACK is primitives._PYRO_STACK
print(list(tr), len(primitives._PYRO_STACK))
"""


def test_the_engine_installs_the_per_thread_stack_even_in_the_middle_of_a_trace() -> None:
    done = subprocess.run(
        [sys.executable, "-c", MID_TRACE],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "['a', 'b'] 0"


def test_two_threads_trace_models_with_the_same_site_names_at_once() -> None:
    inside = threading.Barrier(2, timeout=30)

    def model(loc: float) -> None:
        numpyro.sample("skill", dist.Normal(loc, 1.0))
        inside.wait()  # both threads are now inside their own trace handler
        with numpyro.plate("obs", 3):
            numpyro.sample("y", dist.Normal(loc, 1.0))

    traces: dict[float, dict] = {}
    errors: list[BaseException] = []

    def trace(loc: float) -> None:
        try:
            traces[loc] = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(loc)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
            inside.abort()

    threads = [threading.Thread(target=trace, args=(loc,)) for loc in (-5.0, 5.0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    for loc, tr in traces.items():
        assert list(tr) == ["skill", "obs", "y"], tr.keys()
        assert float(tr["skill"]["fn"].loc) == loc  # its own sites, not the other thread's
    assert sorted(traces) == [-5.0, 5.0]
    assert len(numpyro.primitives._PYRO_STACK) == 0  # every handler left this thread's stack


def test_the_per_thread_stack_behaves_like_the_list_numpyro_uses() -> None:
    stack = threadsafe.ThreadLocalStack()
    assert not stack and len(stack) == 0
    stack.extend(["a", "b", "c"])
    assert list(stack) == ["a", "b", "c"] and list(reversed(stack)) == ["c", "b", "a"]
    assert stack[-1] == "c" and stack[-2:] == ["b", "c"] and stack[::-1] == ["c", "b", "a"]
    assert "b" in stack and stack.index("b") == 1
    seen: list[list[str]] = []
    other = threading.Thread(target=lambda: (stack.append("x"), seen.append(list(stack))))
    other.start()
    other.join()
    assert seen == [["x"]] and list(stack) == ["a", "b", "c"]
    assert stack.pop() == "c" and len(stack) == 2
    stack.clear()
    assert not stack


class Campaign(MemoryKey):
    """Every key sees the same small campaign (the worker's store side, in memory)."""

    def __init__(self, num: int) -> None:
        super().__init__(simulate(num, seed=7, num_prompts=6))


#: the service's defaults but tiny: few draws, a short NUTS run, no diagnostics gate
TINY = dict(
    fast_num_draws=20,
    snapshot_max_draws=20,
    nuts_chains=1,
    nuts_warmup=10,
    nuts_samples=10,
    nuts_min_ess=0,  # one block
    nuts_max_rhat=100.0,
    nuts_max_divergences=100,
)


@pytest.mark.parametrize(
    "skill_updates",
    [
        pytest.param(False, id="default-model"),
        pytest.param(True, id="skill-updates-and-items-refreshes", marks=pytest.mark.slow),
    ],
)
def test_fast_items_and_nuts_fits_at_once_never_fail(skill_updates: bool) -> None:
    """The worker's threads at once, each tracing its model afresh: a full fast fit, an
    items refresh (a full fit on a thread of its own, when skill updates are on) and a
    NUTS refit; every fit is published, none fails. (Before NumPyro's stack was
    per-thread, the default model's fits failed here with "all sites must have unique
    names but got `skill` duplicated".)"""
    campaign = Campaign(60)
    worker = Refresher(
        load_fn=campaign.load,
        publish_fn=campaign.publish,
        latest_fn=campaign.latest,
        config=Settings(skill_updates=skill_updates, **TINY),
    )
    base = None
    if skill_updates:
        assert worker.update("items") is not None
        base = worker._states["items"].base
        assert base is not None

    def on_thread(fn: Callable[[str], object], key: str, method: str) -> threading.Thread:
        def run() -> None:
            start.wait()
            try:
                fn(key)
            except Exception as exc:  # recorded as the worker's loops record it
                worker._record(RefreshEvent(key, "failed", method, 0, 0, 0.0, repr(exc)))

        return threading.Thread(target=run)

    jax.clear_caches()  # every fit traces its model (again), as on a new shape
    threads = [
        on_thread(worker.update, "fast", st.FAST),
        on_thread(worker.refit, "nuts", st.FULL),
    ]
    if base is not None:
        # what Refresher._start_items_refresh runs on its own thread
        threads.append(on_thread(lambda key: worker._refresh_items(key, base), "items", "items"))
    start = threading.Barrier(len(threads))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not any(t.is_alive() for t in threads)
    failed = [e for e in worker.events if e.kind == "failed"]
    assert not failed, failed
    published = [e for e in worker.events if e.kind == "published"]
    assert {e.method for e in published} == {st.FAST, st.FULL}
    assert len(published) == (3 if skill_updates else 2)  # with skill updates, the base too
    if skill_updates:
        assert [e.kind for e in worker.events].count("items") == 1


# ---------------------------------------------------------------- failed fits in /health

ADMIN = "admin-s3cret"


def _new_project(client: httpx.Client) -> tuple[str, dict[str, str]]:
    project_id = f"secret-campaign-{time.monotonic_ns()}"
    r = client.post(
        "/projects",
        json={"project_id": project_id},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    r = client.post(
        f"/projects/{project_id}/systems",
        json={"systems": [{"system_id": name} for name in SYSTEMS]},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    r = client.post(
        f"/projects/{project_id}/prompts",
        json={"prompts": [{"prompt_id": f"q{i}", "text": f"prompt {i}"} for i in range(12)]},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    return project_id, headers


def test_a_failed_fit_shows_in_health_as_counts_and_by_name_only_to_the_admin(
    tmp_path: Path,
) -> None:
    """Was: 3 of 5 re-estimations failed in a load run and ``/health`` still said ``ok``."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'health.db'}",
        admin_token=ADMIN,
        streaming=True,
        worker="thread",
        nuts=False,
        poll_seconds=0.5,
    )
    with ThreadServer(settings) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        healthy = client.get("/health").json()
        assert healthy["status"] == "ok"
        assert healthy["fits"] == {"failed": 0, "failing": 0, "last_failed_at": None, "keys": None}

        def broken_fit(*args: object, **kwargs: object) -> None:
            raise RuntimeError("the fit broke (a stand-in for any error in a fit)")

        server.state.refresher._fast_fit = broken_fit  # every fast update now fails
        project_id, headers = _new_project(client)
        r = client.post(
            f"/projects/{project_id}/judgments", json={"judgments": judgments(40)}, headers=headers
        )
        assert r.status_code == 200, r.text

        def failing() -> dict | None:
            health = client.get("/health").json()
            return health if health["fits"]["failing"] else None

        health = wait_for(failing, "a failing fit in /health")
        # anonymous: degraded, with counts only (no project, dimension or error text)
        assert health["status"] == "degraded", health
        fits = health["fits"]
        assert fits["failing"] == 1 and fits["failed"] >= 1 and fits["keys"] is None
        assert fits["last_failed_at"] is not None
        assert project_id not in json.dumps(fits) and "broke" not in json.dumps(health)
        # a project's own token sees no more here (its events have the errors)
        assert client.get("/health", headers=headers).json()["fits"]["keys"] is None
        failed = client.get(
            f"/projects/{project_id}/events", params={"kind": "failed"}, headers=headers
        ).json()["events"]
        assert failed and "broke" in failed[0]["detail"]
        # the admin token: which dimension and kind of fit, and the error
        admin = client.get("/health", headers={"Authorization": f"Bearer {ADMIN}"}).json()
        [key] = admin["fits"]["keys"]
        assert (key["project_id"], key["dimension"], key["method"]) == (
            project_id,
            "overall",
            "laplace",
        )
        # (the poll retries the dimension meanwhile: each retry fails again)
        assert key["failing"] and key["failed"] == admin["fits"]["failed"] >= fits["failed"]
        assert "RuntimeError" in key["last_error"] and "broke" in key["last_error"]
        # a wrong token is anonymous
        wrong = client.get("/health", headers={"Authorization": "Bearer nope"}).json()
        assert wrong["fits"]["keys"] is None


def test_a_kind_of_fit_is_failing_until_its_own_next_fit_succeeds(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'events.db'}")
    store.migrate()
    seq = iter(range(1, 100))

    def add(dimension: str, kind: str, method: str, detail: str = "") -> None:
        add_event(
            store, dimension=dimension, kind=kind, method=method, second=next(seq), detail=detail
        )

    def failing() -> dict[tuple[str, str], tuple[int, bool, str]]:
        with store.read() as conn:
            return {
                (f.dimension, f.method): (f.failed, f.failing, f.last_error)
                for f in fit_failures(conn)
            }

    try:
        add("d", "published", st.FAST)
        assert failing() == {}
        add("d", "failed", st.FULL, "E1")
        add("d", "published", st.FAST)  # a fast update does not clear a NUTS failure
        add("d", "failed", "items", "E2")
        add("d", "failed", st.FAST, "E3")
        assert failing() == {
            ("d", st.FULL): (1, True, "E1"),
            ("d", "items"): (1, True, "E2"),
            ("d", st.FAST): (1, True, "E3"),
        }
        add("d", "rejected", st.FULL, "max R-hat 1.3")  # ran to the end: not failing
        add("d", "items", st.FAST)  # a successful items refresh is kind "items"
        add("d", "failed", st.FAST, "E4")
        add("e", "failed", st.FAST, "E5")  # another dimension is its own key
        assert failing() == {
            ("d", st.FULL): (1, False, "E1"),
            ("d", "items"): (1, False, "E2"),
            ("d", st.FAST): (2, True, "E4"),
            ("e", st.FAST): (1, True, "E5"),
        }
        add("d", "superseded", st.FAST)  # another replica published: that fit succeeded
        assert failing()[("d", st.FAST)] == (2, False, "E4")
    finally:
        store.dispose()
