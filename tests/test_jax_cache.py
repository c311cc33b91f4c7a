"""The persistent compilation cache shared by processes (services/jax_cache.py), in fresh
processes: JAX reads its cache settings once, at its first compile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from services.jax_cache import ATIME_SUFFIX, CACHE_SUFFIX

ROOT = Path(__file__).resolve().parents[1]

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
