"""How long one delivery took, and how much of that was helm: the figures of its ``answered`` log line.

``shared.delivery.http`` opens a :func:`delivery` clock around each request; ``shared.adapters.helm`` wraps each
operation in :func:`helm`, which adds the operation's wall time to the open clock. Nested
operations (the chart pull inside an install) count once, by the outermost. Outside a delivery
(resync's helm-free pass, a test calling a step directly) there is no clock and nothing is kept.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Clock:
    """One delivery's time so far (mutable: the request's context holds the one instance)."""

    started: float
    helm_seconds: float = 0.0
    helm_operations: int = 0
    _depth: int = 0

    def seconds(self) -> float:
        return time.monotonic() - self.started


_CLOCK: contextvars.ContextVar[Clock | None] = contextvars.ContextVar("kubeopera_delivery_clock", default=None)


@contextmanager
def delivery() -> Iterator[Clock]:
    clock = Clock(started=time.monotonic())
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextmanager
def helm() -> Iterator[None]:
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    started = time.monotonic()
    clock._depth += 1
    try:
        yield
    finally:
        clock._depth -= 1
        if clock._depth == 0:
            clock.helm_seconds += time.monotonic() - started
            clock.helm_operations += 1
