"""What several test modules share: simulated judgments, API campaigns, LOCO data, live servers
and a real browser.

Test modules import from here (never from one another, nor from conftest.py), so a test file
can be run, moved or split on its own; tests/test_architecture.py checks it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
import polars as pl
import pytest

from adaptive.prompts.loco import LocoConfig, LocoData

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")

# ---------------------------------------------------------------- the environment


def missing(reason: str) -> None:
    """Skip a test whose tool (a browser, a server) is absent; under CI (``CI`` set) fail
    instead, so CI cannot pass by checking less."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: this test must run here)", pytrace=False)
    pytest.skip(reason)


# ---------------------------------------------------------------- the worker's store side


class MemoryKey:
    """One key's judgments and published snapshots in memory: a refresher's ``load_fn``,
    ``publish_fn`` and ``latest_fn`` without a store."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = frame
        self.published: list[Any] = []

    def load(self, key: object) -> Any:
        from adaptive.estimation.source import Source

        return Source(self.frame, "overall", SYSTEMS, self.frame.height, self.frame.height)

    def publish(self, key: object, snapshot: Any) -> int:
        self.published.append(snapshot)
        return len(self.published)

    def latest(self, key: object) -> None:
        return None


def add_event(
    store: Any,
    *,
    dimension: str,
    kind: str,
    method: str,
    second: int,
    detail: str = "",
    seconds: float = 1.0,
) -> None:
    """Store one refit event of project ``p``, created ``second`` s into 2025-01-01."""
    from datetime import UTC, datetime

    from services.store import repository as repo

    with store.write() as conn:
        repo.add_events(
            conn=conn,
            events=[
                {
                    "project_id": "p",
                    "dimension": dimension,
                    "created_at": datetime(2025, 1, 1, 0, second // 60, second % 60, tzinfo=UTC),
                    "kind": kind,
                    "method": method,
                    "version": 0,
                    "num_judgments": 10,
                    "seconds": seconds,
                    "detail": detail,
                    "replica": "test",
                }
            ],
        )


# ---------------------------------------------------------------- simulated judgments

#: five judged systems; the last one is registered but never judged
SYSTEMS = (*(f"s{i}" for i in range(5)), "never_judged")
TRUE_SKILL = np.array([-1.5, -0.5, 0.0, 0.5, 1.5])


def same_rows(got: list[dict], want: list[dict], *, columns: tuple[str, ...] | None = None) -> None:
    """The same rows through two doors: the same columns in the same order (or those
    ``columns``), the same values (numbers to 1e-9)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if columns is None:
            assert list(g) == list(w)
        for key in columns or w:
            value = w[key]
            if isinstance(value, float) and isinstance(g[key], float):
                assert g[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (key, g, w)
            else:
                assert g[key] == value, (key, g, w)


#: how long a test waits on background work before it calls the work stuck: a guard against a
#: hang, not the work's expected time (on two cores shared with other jobs a fit takes many
#: times what it takes alone); EVALSET_TEST_STUCK_SECONDS sets it
STUCK_SECONDS = float(os.environ.get("EVALSET_TEST_STUCK_SECONDS", "1800"))


def wait_for(condition: Callable[[], T], what: str, *, every: float = 0.05) -> T:
    """The first truthy value of ``condition()``, asked every ``every`` seconds: a test waits
    for the background work's own sign that it is done (an event, an answer), however long
    a loaded machine takes; past :data:`STUCK_SECONDS` it fails saying ``what`` never came."""
    stuck = time.monotonic() + STUCK_SECONDS
    while not (value := condition()):
        assert time.monotonic() < stuck, f"{what}: not within {STUCK_SECONDS:g} s (stuck?)"
        time.sleep(every)
    return value


def when_ready(call: Callable[[], httpx.Response], code: str) -> httpx.Response:
    """``call()`` again while it answers 409 ``code`` (a background answer being computed);
    its first other answer (:func:`wait_for`: no deadline sized for a quiet machine)."""

    def answered() -> httpx.Response | None:
        r = call()
        if r.status_code != 409:
            return r
        assert r.json()["error"]["code"] == code, r.text
        return None

    return wait_for(answered, f"an answer other than 409 {code}", every=0.2)


def simulate(num: int, *, seed: int = 0, num_prompts: int = 12) -> pl.DataFrame:
    """Judgments of every pair on every prompt in turn (so all pairs and prompts appear early)."""
    rng = np.random.default_rng(seed)
    pairs = list(itertools.combinations(range(len(TRUE_SKILL)), 2))
    rows = []
    for k in range(num):
        a, b = pairs[k % len(pairs)]
        if rng.random() < 0.5:
            a, b = b, a
        u = TRUE_SKILL[b] - TRUE_SKILL[a] + rng.logistic()
        winner = "b" if u > 0.5 else "a" if u < -0.5 else "tie"
        rows.append((f"q{k % num_prompts}", SYSTEMS[a], SYSTEMS[b], f"w{k % 7}", winner))
    return pl.DataFrame(
        rows, schema=["item_id", "system_a", "system_b", "annotator_id", "winner"], orient="row"
    ).with_columns(pl.lit("overall").alias("dimension"))


def judgments(num: int, *, start: int = 0, seed: int = 0) -> list[dict]:
    """Judgments ``start .. start + num`` of :func:`simulate` as the API's request rows."""
    frame = simulate(start + num, seed=seed).slice(start, num)
    return [
        {"judgment_id": f"j{start + i}", **{k: v for k, v in row.items() if k != "dimension"}}
        for i, row in enumerate(frame.to_dicts())
    ]


def new_project(api: httpx.Client, *, systems=SYSTEMS, prompts: int = 12) -> tuple[str, dict]:
    """A project with ``systems`` and ``prompts`` registered; returns its id and auth headers."""
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = api.post("/projects", json={"project_id": project_id, "name": "test campaign"})
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    r = api.post(
        f"/projects/{project_id}/systems",
        json={"systems": [{"system_id": s} for s in systems]},
        headers=headers,
    )
    assert r.json() == {"created": len(systems), "updated": 0}
    r = api.post(
        f"/projects/{project_id}/prompts",
        json={
            "prompts": [
                {"prompt_id": f"q{i}", "text": f"prompt {i}", "responses": {"s0": "hello"}}
                for i in range(prompts)
            ]
        },
        headers=headers,
    )
    assert r.json()["created"] == prompts
    return project_id, headers


# ---------------------------------------------------------------- LOCO inputs

LOCO_PAIRS_A = np.array([0, 1, 2, 3, 0, 1, 0])
LOCO_PAIRS_B = np.array([1, 2, 3, 4, 2, 3, 4])


#: the smallest LOCO settings the fold tests use (a few grid points, 100 draws)
TINY_LOCO = LocoConfig(
    grid=(3, 6, 100), num_random=3, num_draws=100, num_info_draws=20, min_tier_comparisons=1
)


def loco_from_ratings(
    y: np.ndarray, observed: np.ndarray, pair_a: np.ndarray, pair_b: np.ndarray, *, num_systems: int
) -> LocoData:
    """LOCO inputs from a (C, P) matrix of net-rating categories (0..6) and what was observed."""
    comp, prompt = np.nonzero(observed)
    rating = np.zeros((y.shape[1], y.shape[0]))
    rating[prompt, comp] = y[comp, prompt] - 3
    return LocoData(
        cell_comparison=comp.astype(np.int32),
        cell_prompt=prompt.astype(np.int32),
        cell_y=y[comp, prompt].astype(np.int32),
        pair_a=pair_a,
        pair_b=pair_b,
        num_systems=num_systems,
        num_prompts=y.shape[1],
        num_categories=7,
        rating=rating,
        rating_mask=observed.T.copy(),
    )


def tiny_loco_data(seed: int = 0, num_prompts: int = 24) -> LocoData:
    """Net ratings (7 categories) simulated from the graded response model, 5 systems, 7 comparisons."""
    rng = np.random.default_rng(seed)
    skill = np.array([1.2, 0.6, 0.0, -0.6, -1.2])
    theta = skill[LOCO_PAIRS_B] - skill[LOCO_PAIRS_A]
    alpha = np.exp(rng.normal(0, 0.8, num_prompts))
    b = np.sort(rng.normal(0, 1.5, (num_prompts, 6)), axis=1)
    cum = 1 / (1 + np.exp(-alpha[None, :, None] * (theta[:, None, None] - b[None])))
    y = (rng.uniform(size=cum.shape[:2])[..., None] < cum).sum(axis=-1)  # (C, P)
    observed = rng.uniform(size=y.shape) > 0.1
    return loco_from_ratings(y, observed, LOCO_PAIRS_A, LOCO_PAIRS_B, num_systems=5)


def two_tier_data(seed: int = 0) -> LocoData:
    """Two tiers of three close systems; 12 prompts discriminate near theta = 0 (within a tier),
    12 only far from it (across tiers), where 9 of the 15 comparisons sit."""
    rng = np.random.default_rng(seed)
    skill = np.array([1.5, 1.4, 1.3, -1.3, -1.4, -1.5])
    within = [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5)]
    across = [(a, b) for a in range(3) for b in range(3, 6)]
    pa, pb = np.array([p[0] for p in within + across]), np.array([p[1] for p in within + across])
    theta = skill[pb] - skill[pa]
    near = np.tile([-0.9, -0.6, -0.3, 0.3, 0.6, 0.9], (12, 1))
    far = np.tile([-3.5, -3.0, -2.5, 2.5, 3.0, 3.5], (12, 1))
    b = np.concatenate([near, far]) + rng.normal(0, 0.05, (24, 6))
    alpha = np.full(24, 2.0)
    num_prompts, num_c = 24, len(theta)
    cum = 1 / (1 + np.exp(-alpha[None, :, None] * (theta[:, None, None] - b[None])))
    # one net rating (7 categories) per comparison and prompt
    y = (rng.uniform(size=cum.shape[:2])[..., None] < cum).sum(axis=-1)
    return loco_from_ratings(y, np.ones((num_c, num_prompts), bool), pa, pb, num_systems=6)


# ---------------------------------------------------------------- PostgreSQL

PG_ADMIN_URL = os.environ.get(
    "EVALSET_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _pg_reason() -> str | None:
    try:
        import psycopg

        dsn = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, connect_timeout=3):
            return None
    except Exception as exc:  # the server is not running or not reachable
        return f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}"


_PG_SKIP: list[str | None] = []


def pg_skip_reason() -> str | None:
    """Why PostgreSQL tests cannot run here (None when the server answers); asked once."""
    if not _PG_SKIP:
        _PG_SKIP.append(_pg_reason())
    return _PG_SKIP[0]


@contextlib.contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A uniquely named PostgreSQL database, dropped afterwards; yields its URL."""
    import psycopg

    reason = pg_skip_reason()
    if reason:
        pytest.skip(reason)
    name = f"evalset_test_{uuid.uuid4().hex[:12]}"
    dsn = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ---------------------------------------------------------------- live servers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThreadServer:
    """The API served by uvicorn on a loopback port, on a thread of this process."""

    def __init__(self, settings: object) -> None:
        import uvicorn

        from services.api import create_app

        self.port = free_port()
        self.app = create_app(settings)  # type: ignore[arg-type]
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the API server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(60)

    @property
    def state(self):  # noqa: ANN201
        return self.app.state.service


class ProcessServer:
    """``evalset serve`` in a child process (can be SIGKILLed and restarted on the same port)."""

    def __init__(self, database_url: str, *, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "EVALSET_DATABASE_URL": database_url,
            "EVALSET_PORT": str(self.port),
            "JAX_PLATFORMS": "cpu",
            # tests create projects anonymously (served mode refuses that unless open)
            "EVALSET_OPEN": "true",
            **(env or {}),
        }
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0) -> None:
        import httpx

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "serve", "--log-level", "error"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"server exited with {self.proc.returncode}: {err[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the server did not become healthy")

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers run."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()


# ---------------------------------------------------------------- a real browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Debian's chromium driven by Playwright (a module fixture of the browser tests yields
    it); without it the test skips, and under CI fails (:func:`missing`)."""
    if not CHROMIUM.exists():
        missing(f"{CHROMIUM} is absent (apt-get install chromium): no browser to drive")
    try:
        import playwright.sync_api as playwright_api
    except ImportError:
        missing("playwright is not installed (pip install -e '.[dev]')")
    with playwright_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Watch:
    """A page's console errors, uncaught exceptions and requests to anything but the server."""

    def __init__(self, context, server_url: str) -> None:  # noqa: ANN001
        self.errors: list[str] = []
        self.foreign: list[str] = []
        self.requests = 0
        self.host = urlsplit(server_url).netloc

        def route(r) -> None:  # noqa: ANN001
            self.requests += 1
            url = urlsplit(r.request.url)
            if url.scheme in ("data", "blob") or url.netloc == self.host:
                r.continue_()
            else:
                self.foreign.append(r.request.url)
                r.abort()

        context.route("**/*", route)

    def attach(self, page) -> None:  # noqa: ANN001
        page.on(
            "console",
            lambda m: (
                self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None
            ),
        )
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
