"""A persistent JAX compilation cache, shared by the service and the command line.

The first fit of a model shape compiles for seconds to tens of seconds; with
``EVALSET_JAX_CACHE_DIR`` set, the compiled programs are written there and a later
process (a restarted replica, the next ``evalset significance``) loads them instead.
The cache is keyed by the program, JAX's version and the machine, so a stale entry
is never used; a damaged one only costs a recompile.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: programs that compile faster than this are not worth a file
MIN_COMPILE_SECONDS = 0.5


def configure_jax(environ: Mapping[str, str] | None = None) -> str | None:
    """Point JAX at ``EVALSET_JAX_CACHE_DIR`` of ``environ`` (default: the process's), if
    set, before its first fit in this process.

    Returns the directory in use, or None when the variable is unset or empty.

    Example:
        >>> configure_jax({"EVALSET_JAX_CACHE_DIR": ""}) is None
        True
    """
    cache = (os.environ if environ is None else environ).get("EVALSET_JAX_CACHE_DIR")
    if not cache:
        return None
    import jax

    jax.config.update("jax_compilation_cache_dir", cache)  # type: ignore[no-untyped-call]
    jax.config.update(  # type: ignore[no-untyped-call]
        "jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS
    )
    return cache
