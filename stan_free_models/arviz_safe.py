"""ArviZ, imported so that processes starting together do not race on its daily stamp.

ArviZ 0.23.4 writes ``daily_warning`` in its cache directory on the first import of each day
through one fixed temporary name (``daily_warning.tmp``), so two processes importing it in
the same instant (pytest-xdist workers, Ray workers) can fail with FileNotFoundError
(arviz-devs/arviz#2530 and #2583; no release fixes it). Writing today's stamp first, through
a temporary file of this process's own, makes ArviZ skip its write (and its FutureWarning
about a coming refactor).

Example:
    >>> az = import_arviz()
    >>> az.__name__
    'arviz'
"""

from __future__ import annotations

import datetime
import os
import uuid
from pathlib import Path
from types import ModuleType

_STAMPED: set[str] = set()


def stamp_today() -> None:
    """Write today's date to ArviZ's daily-warning stamp, atomically, once a day per process."""
    today = datetime.date.today().isoformat()
    if today in _STAMPED:
        return
    try:
        from platformdirs import user_cache_dir  # ArviZ's own choice of directory
    except ImportError:  # no ArviZ either
        return
    directory = Path(user_cache_dir("arviz", "arviz"))
    stamp = directory / "daily_warning"
    _STAMPED.add(today)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f"daily_warning.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(today)
        os.replace(tmp, stamp)
    except OSError:  # an unwritable cache: ArviZ's own write fails there as well
        pass


def import_arviz() -> ModuleType:
    """``import arviz``, after :func:`stamp_today`."""
    stamp_today()
    import arviz

    return arviz
