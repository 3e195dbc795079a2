"""A per-query time limit that every decoder honours without knowing about it.

`Predictor.predict` runs each decode inside `time_limit(seconds)`; the model's decoder calls
`check_deadline()` before each step, and so do the native engine's encoder and whole-step calls
(greedy_step; beam_search between its C runs of steps), which the decoding loops make without the model's
decoder, so any decoding method (greedy, beam, speculative, sampling) stops with `QueryTimeout` once the
limit has passed. The deadline lives in a context variable, so threads sharing one model each keep their own.
A search in C runs several steps a call: `steps_before_check` sizes each call to the time left, so that the limit
is kept to within one decoder step. A decoder that can say what it found before the limit raises QueryTimeout with
it (`found`), so that the work paid for is not lost: beam search; greedy and its speculative kin (the rows that had
ended whole, the others their calls and no answer); and sbs and sbs-exact when stopped in a call's last
query (a call of one included), and the sampling methods so stopped (the samples drawn by then). Decoders that run
a call's queries one after another (sbs, sbs-exact, sampling) and are stopped before its last hand on the queries
that had ended and the one stopped, with its model calls and no answers (searched False), the later ones never having
begun.
A caller that may give a whole call up (the server: its client gone, or the server stopping) names why in
`abandon_when`; the same checks then raise `Abandoned`, which ends the call rather than one query.
"""
from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("molspec_deadline", default=None)
_abandon: contextvars.ContextVar[Callable[[], str | None] | None] = contextvars.ContextVar("molspec_abandon",
                                                                                           default=None)


def now() -> float:
    """The clock the time limit reads (tests replace it with a fake one)."""
    return time.monotonic()


class QueryTimeout(RuntimeError):
    """Decoding ran past its time limit. found: what a decoder that can say so had by then, one entry per
    source (its DecodeResult: the hypotheses finished, then the best live ones unfinished, and the real counts),
    or, for a decoder that runs them one after another, per leading source and the one stopped (no answers, its
    calls), or () when it cannot;
    searched: per entry of found, whether its search had ended before the limit (its result whole)."""

    def __init__(self, message: str = "time limit reached", found: Sequence[object] = (),
                 searched: Sequence[bool] = ()):
        super().__init__(message)
        self.found, self.searched = tuple(found), tuple(searched)


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
    token = _deadline.set(None if seconds is None else now() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def steps_before_check(seconds_per_step: float | None, last_steps: int, most: int) -> int:
    """How many steps a search in C may take before the limit is checked again: `most` without a limit; under
    one, as many as fit in the time left at the pace measured (seconds_per_step; None: not yet, one step), at
    least one, so that the limit is passed by less than a step, and at most twice `last_steps`, the run
    before's, so that a pace that grows (more rows fed) is learnt before a long run."""
    deadline = _deadline.get()
    if deadline is None:
        return most
    if seconds_per_step is None:
        return 1
    most = min(most, 2 * last_steps)
    if seconds_per_step <= 0:  # faster than the clock can tell
        return most
    return max(1, min(most, int((deadline - now()) / seconds_per_step)))


def check_deadline() -> None:
    deadline = _deadline.get()
    if deadline is not None and now() > deadline:
        raise QueryTimeout("time limit reached")
    check_abandoned()


def check_abandoned() -> None:
    """Raise Abandoned once the caller's reason (abandon_when) names one: looked at by each decoder step
    (check_deadline), and between queries where no step runs (Predictor.predict reading a call's queries with RDKit,
    up to a second each)."""
    reason = _abandon.get()
    why = reason() if reason is not None else None
    if why is not None:
        raise Abandoned(why)
