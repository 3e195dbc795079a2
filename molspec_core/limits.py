"""A per-query time limit that every decoder honours without knowing about it.

`Predictor.predict` runs each decode inside `time_limit(seconds)`; the model's decoder calls
`check_deadline()` before each step, and so do the native engine's encoder and whole-step calls
(greedy_step; beam_search between its C runs of steps), which the decoding loops make without the model's
decoder, so any decoding method (greedy, beam, speculative, sampling) stops with `QueryTimeout` once the
limit has passed. The deadline lives in a context variable, so threads sharing one model each keep their own.
A caller that may give a whole call up (the server: its client gone, or the server stopping) names why in
`abandon_when`; the same checks then raise `Abandoned`, which ends the call rather than one query.
"""
from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("molspec_deadline", default=None)
_abandon: contextvars.ContextVar[Callable[[], str | None] | None] = contextvars.ContextVar("molspec_abandon",
                                                                                           default=None)


class QueryTimeout(RuntimeError):
    """Decoding ran past its time limit."""


class Abandoned(RuntimeError):
    """The caller gave the whole call up (abandon_when); the message says why."""


@contextmanager
def abandon_when(reason: Callable[[], str | None]) -> Iterator[None]:
    """Decoder steps inside this block raise Abandoned once reason() names one (None: go on)."""
    token = _abandon.set(reason)
    try:
        yield
    finally:
        _abandon.reset(token)


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Decoder steps inside this block raise QueryTimeout once `seconds` have passed (None: no limit)."""
    token = _deadline.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def check_deadline() -> None:
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() > deadline:
        raise QueryTimeout("time limit reached")
    reason = _abandon.get()
    why = reason() if reason is not None else None
    if why is not None:
        raise Abandoned(why)
