"""How long a fit spent compiling: XLA compiles on the calling thread, timed by JAX itself.

A fit that meets a new shape compiles its programs before it runs them; on 2 cores a
compile can take seconds, and one that takes minutes is a fault worth reporting (a
program that grew with the data instead of with its padded size). JAX reports every
backend compile's duration to its monitoring listeners; :class:`CompileClock` listens
while it is entered and keeps the compiles of the thread that entered it, so fits
running on other threads (an items refresh beside a fast update) are not counted twice.
Nothing is registered outside a ``with`` block. JAX calls its listeners from a plain list:
a clock that leaves while another thread's compile is being reported may make that
report skip the next listener, so under concurrent fits a compile can go uncounted (never
counted twice). Only XLA's compile is timed, not tracing or lowering.

Example:
    >>> import jax, jax.numpy as jnp
    >>> with CompileClock() as clock:
    ...     _ = jax.jit(lambda x: x * 3.0 + 1.0)(jnp.ones(7))
    >>> clock.count >= 1 and clock.seconds > 0
    True
"""

from __future__ import annotations

import threading
from types import TracebackType

#: JAX's event for the time XLA took to compile one program (jax/_src/dispatch.py)
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CompileClock:
    """The XLA compiles of this thread between ``__enter__`` and ``__exit__``.

    Attributes:
        seconds: their total duration, s.
        count: how many programs were compiled (a persistent-cache hit counts, briefly).
        longest: (program name, seconds) of the longest, or None.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0
        self.longest: tuple[str, float] | None = None
        self._thread = threading.get_ident()

    def _listen(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event != BACKEND_COMPILE_EVENT or threading.get_ident() != self._thread:
            return
        self.seconds += duration_secs
        self.count += 1
        if self.longest is None or duration_secs > self.longest[1]:
            self.longest = (str(kwargs.get("fun_name", "?")), duration_secs)

    def __enter__(self) -> CompileClock:
        from jax import monitoring

        self._thread = threading.get_ident()
        monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        from jax import monitoring

        try:
            monitoring.unregister_event_duration_listener(self._listen)
        except (AssertionError, ValueError):  # the listeners were cleared meanwhile (JAX's own)
            pass

    def summary(self) -> dict[str, object]:
        """``compile_s`` (total), ``compiles`` and ``longest_compile`` ([name, s] or None)."""
        return {
            "compile_s": round(self.seconds, 3),
            "compiles": self.count,
            "longest_compile": None
            if self.longest is None
            else [self.longest[0], round(self.longest[1], 3)],
        }


__all__ = ["BACKEND_COMPILE_EVENT", "CompileClock"]
