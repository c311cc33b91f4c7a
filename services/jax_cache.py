"""A persistent JAX compilation cache, shared by the service and the command line.

The first fit of a model shape compiles for seconds to tens of seconds; the compiled
programs are written to ``EVALSET_JAX_CACHE_DIR`` (unset: the user's cache folder,
:func:`default_dir`; empty: no cache) and a later process (a restarted replica, the
next ``evalset significance``) loads them instead.
JAX keys an entry by the program, its own version, the platform and the XLA flags, not
by the CPU model: share one directory only between machines of the same hardware.

The directory's size is bounded (``EVALSET_JAX_CACHE_MAX_MB``, in MiB; least recently
used programs go first), which also makes JAX lock it while it reads or writes an entry,
so live processes that share it never read a program another is still writing. JAX
writes an entry's ``-cache`` file and then its ``-atime`` file; a writer killed between
the two (or a directory filled without a bound) leaves entries that JAX would keep
failing to use, so :func:`configure_jax` removes them, under the same lock, when a
process starts.

Without ``EVALSET_JAX_CACHE_MAX_MB``, JAX's own ``JAX_COMPILATION_CACHE_MAX_SIZE`` (bytes)
is the bound when it is set; either must be positive, since an unbounded directory is
not locked. A process that has not imported JAX yet gets the settings as JAX's own
environment variables, read at its import, so a command that never fits never pays
for importing it; one that has compiled already re-reads them at its next compile.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

#: programs that compile faster than this are not worth a file
MIN_COMPILE_SECONDS = 0.1
#: default bound on the directory's size, MiB
DEFAULT_MAX_MB = 2048
#: JAX's names for an entry's program and its last use (jax/_src/lru_cache.py)
CACHE_SUFFIX, ATIME_SUFFIX = "-cache", "-atime"


def configure_jax(environ: Mapping[str, str] | None = None) -> str | None:
    """Point JAX at ``EVALSET_JAX_CACHE_DIR`` of ``environ`` (default: the process's; unset:
    :func:`default_dir`): in this process's JAX, or, before JAX is imported, in JAX's own
    environment variables of this process (which its child processes inherit).

    Returns the directory in use, or None when the variable is set empty (no cache); a
    size bound that is not a positive whole number is an error.

    Example:
        >>> configure_jax({"EVALSET_JAX_CACHE_DIR": ""}) is None
        True
        >>> max_bytes({"EVALSET_JAX_CACHE_MAX_MB": "64"}), max_bytes({}) == DEFAULT_MAX_MB << 20
        (67108864, True)
    """
    env = os.environ if environ is None else environ
    cache = env.get("EVALSET_JAX_CACHE_DIR")
    if cache is None:
        cache = str(default_dir(env))
    if not cache:
        return None
    settings: dict[str, str | float | int] = {
        "jax_compilation_cache_dir": cache,
        "jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_SECONDS,
        "jax_compilation_cache_max_size": max_bytes(env),
    }
    remove_unfinished_entries(Path(cache))
    if "jax" not in sys.modules:
        for name, value in settings.items():
            os.environ[name.upper()] = str(value)
        return cache
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    for name, value in settings.items():
        jax.config.update(name, value)  # type: ignore[no-untyped-call]
    # JAX reads the settings once, at its first compile; after one, this makes the next
    # compile read them again
    compilation_cache.reset_cache()
    return cache


def default_dir(environ: Mapping[str, str]) -> Path:
    """Where compiled programs go when ``EVALSET_JAX_CACHE_DIR`` is unset: the user's cache
    folder (``$XDG_CACHE_HOME``, else ``~/.cache``), ``evalset/jax``.

    Example:
        >>> default_dir({"XDG_CACHE_HOME": "/tmp/c"}).as_posix()
        '/tmp/c/evalset/jax'
    """
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "evalset" / "jax"


def max_bytes(environ: Mapping[str, str]) -> int:
    """The cache's size bound in bytes: ``EVALSET_JAX_CACHE_MAX_MB`` (MiB), else JAX's
    ``JAX_COMPILATION_CACHE_MAX_SIZE`` (bytes), else :data:`DEFAULT_MAX_MB`."""
    raw = environ.get("EVALSET_JAX_CACHE_MAX_MB")
    if raw or "JAX_COMPILATION_CACHE_MAX_SIZE" not in environ:
        raw = raw or str(DEFAULT_MAX_MB)
        if not (raw.isascii() and raw.isdigit()) or int(raw) <= 0:
            raise ValueError(
                f"EVALSET_JAX_CACHE_MAX_MB: a positive whole number of MiB, not {raw!r}"
            )
        return int(raw) << 20
    raw = environ["JAX_COMPILATION_CACHE_MAX_SIZE"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) <= 0:
        raise ValueError(
            "JAX_COMPILATION_CACHE_MAX_SIZE: a positive number of bytes with "
            f"EVALSET_JAX_CACHE_DIR (an unbounded cache is not locked), not {raw!r}; "
            "or set EVALSET_JAX_CACHE_MAX_MB"
        )
    return int(raw)


def remove_unfinished_entries(directory: Path) -> list[str]:
    """Remove the entries of ``directory`` that have a program but no last-use file, under
    JAX's lock on it; returns their names. (JAX's bounded cache stats every entry's
    last-use file before each write, so one such entry would stop all later writes.)

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> for name in ("done-cache", "done-atime", "cut-cache"):
        ...     _ = (d / name).write_bytes(b"x")
        >>> remove_unfinished_entries(d), sorted(p.name for p in d.iterdir() if p.name[0] != ".")
        (['cut-cache'], ['done-atime', 'done-cache'])
    """
    import filelock

    directory.mkdir(parents=True, exist_ok=True)
    removed = []
    with filelock.FileLock(directory / ".lockfile"):
        for entry in sorted(directory.glob(f"*{CACHE_SUFFIX}")):
            key = entry.name[: -len(CACHE_SUFFIX)]
            if not (directory / f"{key}{ATIME_SUFFIX}").exists():
                entry.unlink(missing_ok=True)
                removed.append(entry.name)
    return removed
