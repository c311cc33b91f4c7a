"""A disk cache of fit results, so several commands on one judgments file pay for one fit.

``evalset significance`` and ``evalset items`` fit the same graded-response analysis of each
dimension; ``evalset prune`` its tiers' fits; ``evalset loco`` its folds. Each result is
kept in ``EVALSET_FIT_CACHE_DIR`` (unset: the user's cache folder, :func:`default_dir`,
beside the compiled programs of ``EVALSET_JAX_CACHE_DIR``; empty: no cache), so the next
command on the same judgments with the same settings reads it instead of fitting again.
The command line uses it, Python through the use cases' ``cache`` argument
(:func:`evalset.analyses.analyze`, :func:`evalset.pruning.prune_judgments`,
:func:`evalset.loco.loco_folds` with :func:`default_cache`); the service does not (its
snapshots are its own).

An entry's key (:meth:`FitCache.key`) is a digest of everything the result depends on: the
judgments' content (:func:`frame_digest`: the dimension's rows in their order, which
numbers the cells; or :func:`arrays_digest` of the cells' arrays), the dimension, the
whole configuration (its ``repr``: model, priors, approximation's settings, seed) and the
code that fits (:func:`code_fingerprint`: the package's and its numerical libraries'
versions and a hash of the ``adaptive/`` and ``stan_free_models/`` sources), so a changed
judgment, setting or line of the fitting code never reads a stale fit.

An entry is written to a temporary file and renamed into place, so a reader never sees
half of one; an entry that cannot be read (cut short, from another Python, not a fit of
its key) is removed and fitted again, never an error. The folder's size is bounded
(``EVALSET_FIT_CACHE_MAX_MB``, MiB, default :data:`DEFAULT_MAX_MB`): after each write the
least recently used entries (by the time a hit touches) go until it fits. Entries are
pickles, so the folder must be the user's own: one another user could write to is not
used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

#: default bound on the folder's size, MiB
DEFAULT_MAX_MB = 1024
#: an entry's file name ends so; a write in progress is a hidden ``.tmp`` file
SUFFIX, TEMP_SUFFIX = ".fit", ".tmp"
#: a temporary file older than this is a killed writer's, and goes at the next bound check
STALE_TEMP_SECONDS = 3600.0
#: the packages whose versions are part of :func:`code_fingerprint`
LIBRARIES = ("adaptive-evalset", "jax", "jaxlib", "numpyro", "optax", "numpy", "scipy", "polars")
#: the sources (beside this file's package) whose text is part of :func:`code_fingerprint`
SOURCES = ("adaptive", "stan_free_models")
FORMAT = 1


class FitCache:
    """The entries of one folder, bounded to ``max_bytes`` (least recently used out first).

    Example:
        >>> import tempfile
        >>> cache = FitCache(Path(tempfile.mkdtemp()), max_bytes=1 << 20)
        >>> cache.fetch("k", lambda: [1, 2])
        ([1, 2], False)
        >>> cache.fetch("k", lambda: [3])
        ([1, 2], True)
    """

    def __init__(self, directory: Path, *, max_bytes: int) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._code: str | None = None  # the code's fingerprint, read at the first key

    def key(self, kind: str, *parts: Any) -> str:
        """The digest of a fit's kind, the ``repr`` of each of its inputs and the code
        (:func:`code_fingerprint`).

        Example:
            >>> cache = FitCache(Path("unused"), max_bytes=1)
            >>> cache.key("a", 1) == cache.key("a", 1) != cache.key("a", 2)
            True
        """
        if self._code is None:
            self._code = code_fingerprint()
        digest = hashlib.sha256(f"{kind}\0{self._code}".encode())
        for part in parts:
            digest.update(b"\0" + repr(part).encode())
        return digest.hexdigest()

    def __repr__(self) -> str:
        return f"FitCache({str(self.directory)!r}, max_bytes={self.max_bytes})"

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{SUFFIX}"

    def get(self, key: str) -> Any | None:
        """The value stored under ``key``, or None (none, or unreadable: then removed)."""
        path = self.path(key)
        try:
            with path.open("rb") as file:
                entry = pickle.load(file)
            if not (isinstance(entry, dict) and entry.get("format") == FORMAT):
                raise ValueError("not an entry of this format")
            if entry.get("key") != key:
                raise ValueError("an entry of another key")
        except FileNotFoundError:
            return None
        except Exception:  # cut short, another Python's, garbage: fit again
            path.unlink(missing_ok=True)
            return None
        try:
            os.utime(path)  # its last use, for the bound
        except OSError:
            pass
        return entry["value"]

    def put(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` (atomically), then keep the folder within its bound.
        A folder that cannot be written, or a value that cannot be pickled, is not kept: the
        command goes on."""
        try:
            data = pickle.dumps(
                {"format": FORMAT, "key": key, "value": value}, protocol=pickle.HIGHEST_PROTOCOL
            )
        except Exception:  # a value that cannot be pickled is not kept
            return
        if len(data) > self.max_bytes:
            return
        try:
            _private_dir(self.directory)
            fd, temp = tempfile.mkstemp(prefix=f".{key}.", suffix=TEMP_SUFFIX, dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(data)
                os.replace(temp, self.path(key))
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
            self.evict()
        except OSError:
            return

    def fetch(self, key: str, compute: Callable[[], T]) -> tuple[T, bool]:
        """(the value under ``key``, True), or (``compute()``, stored, False)."""
        found = self.get(key) if self.usable() else None
        if found is not None:
            return found, True
        value = compute()
        if self.usable():
            self.put(key, value)
        return value, False

    def usable(self) -> bool:
        """The folder is absent (it will be made private) or the user's own, writable by no
        one else: another's could hold a pickle that runs code when read."""
        try:
            info = self.directory.stat()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        if not hasattr(os, "getuid"):
            return True
        return info.st_uid == os.getuid() and not info.st_mode & 0o022

    def evict(self) -> list[str]:
        """Remove the least recently used entries until the folder fits its bound (and
        the temporary files of killed writers); returns the names removed."""
        now = time.time()
        entries = []
        removed = []
        for path in self.directory.iterdir():
            try:
                info = path.stat()
            except OSError:
                continue
            if path.name.endswith(TEMP_SUFFIX):
                if now - info.st_mtime > STALE_TEMP_SECONDS:
                    path.unlink(missing_ok=True)
                continue
            if path.name.endswith(SUFFIX):
                entries.append((info.st_mtime, path.name, info.st_size))
        total = sum(size for _, _, size in entries)
        for _, name, size in sorted(entries):
            if total <= self.max_bytes:
                break
            (self.directory / name).unlink(missing_ok=True)
            total -= size
            removed.append(name)
        return removed


def default_cache(environ: Mapping[str, str] | None = None) -> FitCache | None:
    """The cache of ``EVALSET_FIT_CACHE_DIR`` and ``EVALSET_FIT_CACHE_MAX_MB`` of ``environ``
    (default: the process's), or None when the folder is set empty (no cache).

    Example:
        >>> default_cache({"EVALSET_FIT_CACHE_DIR": ""}) is None
        True
        >>> default_cache({"EVALSET_FIT_CACHE_DIR": "/tmp/f", "EVALSET_FIT_CACHE_MAX_MB": "2"})
        FitCache('/tmp/f', max_bytes=2097152)
    """
    env = os.environ if environ is None else environ
    directory = env.get("EVALSET_FIT_CACHE_DIR")
    if directory is None:
        directory = str(default_dir(env))
    if not directory:
        return None
    raw = env.get("EVALSET_FIT_CACHE_MAX_MB") or str(DEFAULT_MAX_MB)
    if not (raw.isascii() and raw.isdigit()) or int(raw) <= 0:
        raise ValueError(f"EVALSET_FIT_CACHE_MAX_MB: a positive whole number of MiB, not {raw!r}")
    return FitCache(Path(directory), max_bytes=int(raw) << 20)


def default_dir(environ: Mapping[str, str]) -> Path:
    """Where fits go when ``EVALSET_FIT_CACHE_DIR`` is unset: the user's cache folder
    (``$XDG_CACHE_HOME``, else ``~/.cache``), ``evalset/fits``, beside the compiled
    programs' ``evalset/jax``.

    Example:
        >>> default_dir({"XDG_CACHE_HOME": "/tmp/c"}).as_posix()
        '/tmp/c/evalset/fits'
    """
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base, "evalset/fits")


def fetch(
    cache: FitCache | None,
    kind: str,
    parts: Callable[[], tuple[Any, ...]],
    compute: Callable[[], T],
    *,
    log: Callable[[str], None] | None = None,
) -> T:
    """``compute()``, or its value from ``cache`` under the key of ``kind`` and ``parts()``
    (:meth:`FitCache.key`; digested only with a cache), saying so to ``log`` when it came
    from the cache or the cache's folder is not the user's own."""
    if cache is None:
        return compute()
    if not cache.usable():
        if log is not None:
            log(f"fit cache {cache.directory} not used: others can write to it")
        return compute()
    value, hit = cache.fetch(cache.key(kind, *parts()), compute)
    if hit and log is not None:
        log(f"{kind}: read from the fit cache {cache.directory} (EVALSET_FIT_CACHE_DIR)")
    return value


def config_repr(config: Any, **fixed: Any) -> str:
    """A dataclass configuration's ``repr`` with ``fixed`` fields set (those that do not
    change the fit: progress bars, what is planned from it), for :meth:`FitCache.key`."""
    return repr(dataclasses.replace(config, **fixed)) if fixed else repr(config)


def frame_digest(frame: Any) -> str:
    """A digest of a judgments frame's content: its columns by name (without ``row``, the
    file's line) and every row in its order, which numbers systems, prompts and cells.

    Example:
        >>> import polars as pl
        >>> a = pl.DataFrame({"x": [1, 2], "y": ["u", "v"]})
        >>> frame_digest(a) == frame_digest(a.select("y", "x")) != frame_digest(a.reverse())
        True
    """
    columns = sorted(c for c in frame.columns if c != "row")
    table = frame.select(columns)
    digest = hashlib.sha256(repr(table.schema).encode())
    digest.update(table.write_csv().encode())
    return digest.hexdigest()


def arrays_digest(value: Any) -> str:
    """A digest of a dataclass of arrays and numbers (cells' arrays), field by field."""
    digest = hashlib.sha256(type(value).__qualname__.encode())
    for item in dataclasses.fields(value):
        field = getattr(value, item.name)
        digest.update(b"\0" + item.name.encode())
        if isinstance(field, np.ndarray):
            array = np.ascontiguousarray(field)
            digest.update(f"{array.dtype.str}{array.shape}".encode())
            digest.update(array.tobytes())
        else:
            digest.update(repr(field).encode())
    return digest.hexdigest()


def code_fingerprint() -> str:
    """A digest of the code a fit depends on: the versions of :data:`LIBRARIES` and Python,
    and the text of every Python source of :data:`SOURCES`."""
    digest = hashlib.sha256(sys.version.encode())
    for name in LIBRARIES:
        try:
            digest.update(f"{name}={metadata.version(name)}\0".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name}=?\0".encode())
    for package in SOURCES:
        spec = find_spec(package)
        if spec is None or spec.origin is None:
            digest.update(f"{package}: not found\0".encode())
            continue
        folder = Path(spec.origin).parent
        for source in sorted(folder.rglob("*.py")):
            digest.update(f"{package}/{source.relative_to(folder).as_posix()}\0".encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()


def _private_dir(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)


__all__ = [
    "DEFAULT_MAX_MB",
    "FitCache",
    "arrays_digest",
    "code_fingerprint",
    "config_repr",
    "default_cache",
    "default_dir",
    "fetch",
    "frame_digest",
]
