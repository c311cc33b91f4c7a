"""The persistent compilation cache shared by processes (services/jax_cache.py), in fresh
processes: JAX reads its cache settings once, at its first compile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from services.jax_cache import ATIME_SUFFIX, CACHE_SUFFIX, MIN_COMPILE_SECONDS

ROOT = Path(__file__).resolve().parents[2]

#: compile and run one program with every warning an error, as the test suite does
PROGRAM = """
import warnings
warnings.simplefilter("error")
from services.jax_cache import configure_jax
configure_jax()
import jax, jax.numpy as jnp
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # keep even this small one
print(float(jax.jit(lambda x: jnp.sin(x).sum() * 2 + 1)(jnp.arange(5.0))))
"""


def run(cache: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "EVALSET_JAX_CACHE_DIR": str(cache), **extra}
    env.pop("XLA_FLAGS", None)
    return subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_an_entry_cut_short_is_removed_and_the_cache_keeps_working(tmp_path):
    cache = tmp_path / "jax"
    cache.mkdir()
    # a writer killed between the program and its last-use file
    (cache / "jit_cut_short-0123456789abcdef-cache").write_bytes(b"\x28\xb5half")
    first = run(cache, EVALSET_JAX_CACHE_MAX_MB="64")
    assert first.returncode == 0, first.stderr
    assert not (cache / "jit_cut_short-0123456789abcdef-cache").exists()
    entries = sorted(p.name for p in cache.glob(f"*{CACHE_SUFFIX}"))
    assert entries and all(
        (cache / (n[: -len(CACHE_SUFFIX)] + ATIME_SUFFIX)).exists() for n in entries
    )
    # a second process loads the entry and computes the same number
    second = run(cache, EVALSET_JAX_CACHE_MAX_MB="64")
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    assert sorted(p.name for p in cache.glob(f"*{CACHE_SUFFIX}")) == entries


#: JAX compiles once, into another directory, before the cache is configured (JAX fixes
#: its cache at the first compile that has a directory)
LATE = """
import jax, jax.numpy as jnp
print(float(jax.jit(lambda x: jnp.cos(x).sum())(jnp.arange(3.0))))
from services.jax_cache import configure_jax
configure_jax()
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
print(float(jax.jit(lambda x: jnp.sin(x).sum() * 2 + 1)(jnp.arange(5.0))))
"""

#: before JAX is imported, the settings reach it through its own environment variables
EARLY = """
import sys
from services.jax_cache import configure_jax
configure_jax()
assert "jax" not in sys.modules
import jax
print(jax.config.jax_compilation_cache_dir, jax.config.jax_compilation_cache_max_size,
      jax.config.jax_persistent_cache_min_compile_time_secs)
"""


def run_program(program: str, cache: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "EVALSET_JAX_CACHE_DIR": str(cache), **extra}
    for name in ("XLA_FLAGS", "EVALSET_JAX_CACHE_MAX_MB", "JAX_COMPILATION_CACHE_MAX_SIZE"):
        if name not in extra:
            env.pop(name, None)
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        if name not in extra:
            env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_a_process_that_compiled_before_configuring_writes_where_it_is_told(tmp_path):
    cache, other = tmp_path / "jax", tmp_path / "other"
    done = run_program(LATE, cache, EVALSET_JAX_CACHE_MAX_MB="64")
    assert done.returncode == 0, done.stderr
    assert list(cache.glob(f"*{CACHE_SUFFIX}")), "the compile after configure_jax wrote nothing"
    done = run_program(
        LATE,
        cache,
        EVALSET_JAX_CACHE_MAX_MB="64",
        JAX_COMPILATION_CACHE_DIR=str(other),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    assert done.returncode == 0, done.stderr
    # each program (and the arange before it) goes where the settings of its compile say
    assert len(list(other.glob(f"jit__lambda-*{CACHE_SUFFIX}"))) == 1  # the first
    assert len(list(cache.glob(f"jit__lambda-*{CACHE_SUFFIX}"))) == 1  # the second


def test_settings_reach_jax_through_its_environment_before_it_is_imported(tmp_path):
    cache = tmp_path / "jax"
    done = run_program(EARLY, cache, EVALSET_JAX_CACHE_MAX_MB="64")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(cache), str(64 << 20), str(MIN_COMPILE_SECONDS)]
    # without a bound of ours, JAX's own variable is the bound
    done = run_program(EARLY, cache, JAX_COMPILATION_CACHE_MAX_SIZE="123456789")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "123456789"


def test_the_bound_is_ours_then_jaxs_then_the_default_and_must_be_positive():
    import pytest

    from services.jax_cache import DEFAULT_MAX_MB, max_bytes

    assert max_bytes({}) == DEFAULT_MAX_MB << 20
    assert max_bytes({"JAX_COMPILATION_CACHE_MAX_SIZE": "1000"}) == 1000
    both = {"EVALSET_JAX_CACHE_MAX_MB": "3", "JAX_COMPILATION_CACHE_MAX_SIZE": "1000"}
    assert max_bytes(both) == 3 << 20
    # an unbounded (-1) or disabled (0) JAX cache would not be locked between processes
    for raw in ("-1", "0", "1e9", ""):
        with pytest.raises(ValueError, match="JAX_COMPILATION_CACHE_MAX_SIZE"):
            max_bytes({"JAX_COMPILATION_CACHE_MAX_SIZE": raw})
    with pytest.raises(ValueError, match="EVALSET_JAX_CACHE_MAX_MB"):
        max_bytes({"EVALSET_JAX_CACHE_MAX_MB": "0", "JAX_COMPILATION_CACHE_MAX_SIZE": "1000"})


def python_prints(code: str) -> str:
    """What a fresh interpreter prints running ``code`` in the project."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_command_lines_flags_need_no_jax():
    """`evalset --help` and commands that fit nothing do not pay for importing JAX (nor
    scipy.stats, 0.6 s: the decisions' t and Beta quantiles come from scipy.special)."""
    assert python_prints(
        "import sys; from services.cli import build_parser; build_parser(); "
        "from adaptive.recommend import DEFAULT_BURN_IN, Request; "
        "print('jax' in sys.modules, 'scipy.stats' in sys.modules)"
    ).split() == ["False", "False"]
    # the lazily loaded names are still there, by attribute and by import
    assert python_prints(
        "import adaptive.recommend as r; from adaptive.recommend import recommend_key; "
        "print(r.recommend.__module__, r.snapshot_from_draws.__module__)"
    ).split() == ["adaptive.recommend.policy", "adaptive.recommend.prepare"]


def test_without_the_variable_the_cache_is_on_in_the_users_cache_folder(tmp_path):
    from services.jax_cache import configure_jax, default_dir

    env = {"XDG_CACHE_HOME": str(tmp_path), "EVALSET_JAX_CACHE_MAX_MB": "64"}
    assert default_dir(env) == tmp_path / "evalset" / "jax"
    # in a child process: this one's JAX is configured already
    script = "from services.jax_cache import configure_jax; print(configure_jax())"
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={k: v for k, v in os.environ.items() if k != "EVALSET_JAX_CACHE_DIR"} | env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "evalset" / "jax")
    assert configure_jax({"EVALSET_JAX_CACHE_DIR": ""}) is None  # set empty: no cache
