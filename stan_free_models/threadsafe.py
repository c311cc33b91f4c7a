"""NumPyro's effect-handler stack, one per thread.

NumPyro keeps the handlers of the model being traced (``trace``, ``substitute``,
``seed``, ``plate``, ...) in one module-level list, ``numpyro.primitives._PYRO_STACK``.
Two threads tracing models at once push onto and read from the same list, so each
sees the other's handlers: a ``trace`` handler records the other thread's sites too
and fails with "all sites must have unique names", or a site is substituted with the
other model's values. The service fits on several threads of one process (a fast
update, an items refresh and a NUTS refit), so every trace must see only its own
thread's handlers.

:func:`install` replaces that list, once, by a :class:`ThreadLocalStack`: a sequence
whose contents belong to the calling thread. NumPyro only ever mutates the stack
in place and reads it by ``len``, truth value, iteration, ``reversed``, indexing,
slicing, ``in`` and ``index``, all of which the thread-local sequence provides. The
modules that imported the list by name (``numpyro.handlers`` and the control-flow
primitives) are rebound too; those imported later take the new object from
``numpyro.primitives``. JAX's own tracing is thread-safe, so with this every fit may
trace and run on any thread. :mod:`stan_free_models.engine` installs it at import,
before any model is traced.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Iterator, MutableSequence
from typing import Any, overload


class _PerThread(threading.local):
    def __init__(self) -> None:
        self.items: list[Any] = []


class ThreadLocalStack(MutableSequence[Any]):
    """A list whose contents are the calling thread's own (every thread starts empty).

    Example:
        >>> stack = ThreadLocalStack()
        >>> stack.append("outer"); stack.append("inner")
        >>> len(stack), stack[-1], list(reversed(stack)), stack[-2:], "outer" in stack
        (2, 'inner', ['inner', 'outer'], ['outer', 'inner'], True)
        >>> seen = []
        >>> thread = threading.Thread(target=lambda: seen.append(list(stack)))
        >>> thread.start(); thread.join()
        >>> seen, stack.pop(), stack.index("outer")
        ([[]], 'inner', 0)
    """

    def __init__(self) -> None:
        self._local = _PerThread()

    def __len__(self) -> int:
        return len(self._local.items)

    def __bool__(self) -> bool:
        return bool(self._local.items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._local.items)

    def __reversed__(self) -> Iterator[Any]:
        return reversed(self._local.items)

    def __contains__(self, value: object) -> bool:
        return value in self._local.items

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self._local.items[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self._local.items[index] = value

    def __delitem__(self, index: int | slice) -> None:
        del self._local.items[index]

    def insert(self, index: int, value: Any) -> None:
        self._local.items.insert(index, value)

    def append(self, value: Any) -> None:
        self._local.items.append(value)

    def extend(self, values: Iterable[Any]) -> None:
        self._local.items.extend(values)

    def pop(self, index: int = -1) -> Any:
        return self._local.items.pop(index)

    def index(self, value: Any, start: int = 0, stop: int = sys.maxsize) -> int:
        return self._local.items.index(value, start, stop)

    def clear(self) -> None:
        self._local.items.clear()

    def __repr__(self) -> str:
        return f"ThreadLocalStack({self._local.items!r})"


def install() -> ThreadLocalStack:
    """Make NumPyro's handler stack per-thread (idempotent); returns the stack in use.

    Every module that holds NumPyro's original list under the name ``_PYRO_STACK``
    is rebound to the per-thread stack. Handlers active when it is installed (an
    import of the engine in the middle of a trace) stay on the calling thread's stack.
    """
    import numpyro.handlers  # noqa: F401  (imports the stack by name: rebound below)
    import numpyro.primitives as primitives

    current = primitives._PYRO_STACK
    if isinstance(current, ThreadLocalStack):
        return current
    stack = ThreadLocalStack()
    stack.extend(current)
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get("_PYRO_STACK") is current:
            namespace["_PYRO_STACK"] = stack
    return stack


__all__ = ["ThreadLocalStack", "install"]
