"""A persistent JAX compilation cache, shared by the service and the command line.

The first fit of a model shape compiles for seconds to tens of seconds; with
``EVALSET_JAX_CACHE_DIR`` set, the compiled programs are written there and a later
process (a restarted replica, the next ``evalset significance``) loads them instead.
The cache is keyed by the program, JAX's version and the machine, so a stale entry
is never used; a damaged one only costs a recompile. Its size is bounded
(``EVALSET_JAX_CACHE_MAX_MB``, least recently used programs go first), which also makes
JAX lock the directory while it reads or writes an entry: processes and replicas that
share it never read a program another is still writing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: programs that compile faster than this are not worth a file
MIN_COMPILE_SECONDS = 0.5
#: default bound on the directory's size
DEFAULT_MAX_MB = 2048


def configure_jax(environ: Mapping[str, str] | None = None) -> str | None:
    """Point JAX at ``EVALSET_JAX_CACHE_DIR`` of ``environ`` (default: the process's), if
    set, before its first fit in this process.

    Returns the directory in use, or None when the variable is unset or empty; a size
    bound that is not a positive whole number of MB is an error.

    Example:
        >>> configure_jax({"EVALSET_JAX_CACHE_DIR": ""}) is None
        True
    """
    env = os.environ if environ is None else environ
    cache = env.get("EVALSET_JAX_CACHE_DIR")
    if not cache:
        return None
    raw = env.get("EVALSET_JAX_CACHE_MAX_MB") or str(DEFAULT_MAX_MB)
    if not raw.isdigit() or int(raw) <= 0:
        raise ValueError(f"EVALSET_JAX_CACHE_MAX_MB: a positive whole number of MB, not {raw!r}")
    import jax

    jax.config.update("jax_compilation_cache_dir", cache)  # type: ignore[no-untyped-call]
    jax.config.update(  # type: ignore[no-untyped-call]
        "jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS
    )
    jax.config.update("jax_compilation_cache_max_size", int(raw) << 20)  # type: ignore[no-untyped-call]
    return cache
