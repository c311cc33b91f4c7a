"""Shared fixtures: store URLs (SQLite file, fresh PostgreSQL database) and live API servers.

The helpers behind them live in tests/factories.py, which test modules import.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Several CPU devices let NUTS run its chains in parallel, as the command line does; and the
# tests' programs compile with XLA's cheapest CPU optimisation (level 0, LLVM's expensive passes
# off, one code-generation unit): the default suite's shapes are small, so compiling, not
# running, is most of its time (XLA's compiler took 671 of its 1,089 test-seconds at level 1);
# level 0 and one unit take 27% off the compiler's time (tests/stan_free_models/
# test_incremental.py: 18.5 s -> 13.5 s). The slow suite runs NUTS at the paper's size, where
# running dominates and level 0 runs about 3x slower (recovery with NUTS 224 s -> 735 s), so
# ./run gives it level 1 (EVALSET_TEST_XLA_LEVEL). The programs compute the same functions;
# the product and its benchmarks compile with XLA's defaults. This must happen before
# anything imports JAX; subprocesses (CLI runs, served APIs) inherit it.
_XLA_LEVEL = os.environ.get("EVALSET_TEST_XLA_LEVEL", "0")
os.environ.setdefault(
    "XLA_FLAGS",
    f"--xla_force_host_platform_device_count=4 --xla_backend_optimization_level={_XLA_LEVEL}"
    " --xla_llvm_disable_expensive_passes=true"
    + (" --xla_cpu_parallel_codegen_split_count=1" if _XLA_LEVEL == "0" else ""),
)

from services.jax_cache import configure_jax  # noqa: E402

# Every worker imports ArviZ at about the same moment; its first import of the day races
# on one temporary file unless the day's stamp is already there (stan_free_models/arviz_safe.py).
from stan_free_models.arviz_safe import stamp_today  # noqa: E402

stamp_today()

# Programs compiled by one test or its subprocess (a CLI run, a served API) are loaded,
# not recompiled, by the next: one cache directory per test run, made by the first process
# (the xdist controller, whose environment its workers inherit) and removed at its end.
# A directory the caller already set is used as it is and kept.
_OWN_JAX_CACHE = None
if not os.environ.get("EVALSET_JAX_CACHE_DIR"):
    _OWN_JAX_CACHE = os.environ["EVALSET_JAX_CACHE_DIR"] = tempfile.mkdtemp(
        prefix="evalset-test-jax-"
    )
# and the tests' own fits share it too (JAX locks the directory: services/jax_cache.py)
configure_jax()
# no fit is read from an earlier one's (evalset/fit_cache.py) unless a test sets its own folder
os.environ["EVALSET_FIT_CACHE_DIR"] = ""

from tests.factories import ThreadServer, fresh_pg_database  # noqa: E402


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_JAX_CACHE and not hasattr(config, "workerinput"):
        shutil.rmtree(_OWN_JAX_CACHE, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL: a SQLite file, then a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'evalset.db'}"
    else:
        with fresh_pg_database() as url:
            yield url


@pytest.fixture
def thread_server():
    """Factory: ``with thread_server(settings) as srv: httpx.get(srv.url + ...)``."""
    return ThreadServer


#: the test files that took longest in a measured default run (--durations), started first:
#: ``--dist loadfile`` hands whole files to the workers in collection order, and the
#: alphabetical order left the longest files (whitened_nuts, inference) for the end, where one
#: worker ran them while the other waited. Longest first keeps both busy to the end.
LONGEST_FIRST = (
    "test_inference.py",
    "test_whitened_nuts.py",
    "test_fit_threads.py",
    "test_graded_response.py",
    "test_doors_same_rows.py",
    "test_engine.py",
    "test_replay.py",
    "test_incremental.py",
    "test_cli.py",
    "test_calibration.py",
    "test_loco.py",
    "test_streaming.py",
    "test_api.py",
    "test_prepare_shape.py",
    "test_replicas.py",
    # the slow suite's longest files (measured on a clean clone's .ci/run)
    "test_packaging.py",
    "test_fuzz_api.py",
    "test_recovery.py",
    "test_paper_table.py",
    "test_hardening_replicas.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest test files first, each file's own order kept (a stable sort)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


#: the most memory one test process may hold (its peak resident set, MB); a run above it fails
MAX_RSS_MB = float(os.environ.get("EVALSET_TEST_MAX_RSS_MB", "8192"))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """The suite's peak memory per process, measured and bounded (:data:`MAX_RSS_MB`).

    ru_maxrss of this process and of its reaped children (the xdist workers, which have
    exited by now, and the servers they started and waited for), in KiB on Linux.
    """
    import resource

    if hasattr(config, "workerinput"):
        return
    peak = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    peak_mb = peak / 1024.0
    terminalreporter.write_line(
        f"peak memory of one test process: {peak_mb:,.0f} MB "
        f"(bound {MAX_RSS_MB:,.0f} MB: EVALSET_TEST_MAX_RSS_MB)"
    )
    if peak_mb > MAX_RSS_MB:
        terminalreporter.write_line("the suite went past its memory bound", red=True)
        terminalreporter._session.exitstatus = pytest.ExitCode.TESTS_FAILED
