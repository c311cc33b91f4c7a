"""CompileClock counts this thread's XLA compiles, not another thread's, and unregisters."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
from jax._src import monitoring as jax_monitoring

from adaptive.estimation.compile_clock import CompileClock


def _new_program(scale: float) -> None:
    # a fresh closure constant is a new program: JAX compiles it
    jax.jit(lambda x: jnp.sin(x) * scale + jnp.cos(x) ** 2)(jnp.ones(13)).block_until_ready()


def test_a_compile_on_this_thread_is_timed() -> None:
    with CompileClock() as clock:
        _new_program(3.25)
    assert clock.count >= 1 and clock.seconds > 0
    assert clock.longest is not None and clock.longest[1] <= clock.seconds + 1e-12
    summary = clock.summary()
    assert summary["compiles"] == clock.count and summary["compile_s"] >= 0


def test_a_compile_of_another_thread_is_not_counted() -> None:
    with CompileClock() as clock:
        worker = threading.Thread(target=_new_program, args=(4.75,))
        worker.start()
        worker.join()
    assert clock.count == 0 and clock.seconds == 0.0 and clock.longest is None


def test_nothing_listens_outside_the_block() -> None:
    before = list(jax_monitoring._event_duration_secs_listeners)
    with CompileClock() as clock:
        assert len(jax_monitoring._event_duration_secs_listeners) == len(before) + 1
    assert jax_monitoring._event_duration_secs_listeners == before
    _new_program(5.5)
    assert clock.count == 0
