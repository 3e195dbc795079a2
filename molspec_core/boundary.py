"""The one error boundary of the command lines (`molspec ...` and `python -m molspec_core.train`, which a GPU
machine runs without RDKit, so this module imports neither RDKit nor the CLI): every expected failure becomes an
`error:` line and exit 2; Ctrl-C, an `interrupted` line and exit 130 (128 + SIGINT, as shells report it); SIGTERM,
a `terminated` line and exit 143. What a command wrote stays: its lines on stdout, and an output file it was
replacing (io.write_csv renames a finished file into place)."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator

import torch

from .entry import INTERRUPTED

OUT_OF_MEMORY = (MemoryError, torch.OutOfMemoryError)  # the host's memory, and a GPU's (a RuntimeError)
EXPECTED_FAILURES = (ValueError, OSError, *OUT_OF_MEMORY)
# What torch's CPU allocator raises when the host cannot give it the memory asked for: a bare RuntimeError in these
# words (torch 2.13), neither MemoryError nor torch.OutOfMemoryError
CPU_ALLOCATION_FAILED = "DefaultCPUAllocator: can't allocate memory"


@contextlib.contextmanager
def as_memory_error() -> Iterator[None]:
    """torch's CPU allocator failing inside the block (or the function it decorates) raised as MemoryError, one of
    OUT_OF_MEMORY, its words kept: the host's memory running out inside torch, the likeliest way it runs out, was a
    RuntimeError, which a server answered 500 'internal error' with a traceback logged, and a command line with a
    traceback, where running out is a 503 saying what to send instead, and an `error: out of memory; ...` line."""
    try:
        yield
    except RuntimeError as exc:
        if CPU_ALLOCATION_FAILED not in str(exc):
            raise
        raise MemoryError(f"the host's memory ran out: {exc}") from exc


class Terminated(BaseException):
    """SIGTERM (`kill`, a scheduler's stop), raised where the command was, as Ctrl-C raises KeyboardInterrupt: the
    file being written is removed on its way out (io._write_replacing) and the one it was replacing kept. Without
    it the process died at once and left its partial file behind."""


def terminate(signum: int, frame: object) -> None:
    raise Terminated


def describe(exc: BaseException, out_of_memory: str) -> str:
    """An expected failure in one line: `out_of_memory` (what to try) for running out of memory, an OSError's
    reason and file ("No space left on device: runs/x", not "[Errno 28] ..."), else the message."""
    if isinstance(exc, OUT_OF_MEMORY):
        return f"out of memory; {out_of_memory}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


def guarded(command: Callable[[], int], out_of_memory: str) -> int:
    """command()'s exit code, or the boundary's for what it raised (the module's docstring). SIGTERM is caught
    only in the main thread, and a handler set outside Python (None) is left alone, as it could not be put back."""
    previous = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    if previous is not None:
        signal.signal(signal.SIGTERM, terminate)
    try:
        with as_memory_error():
            return command()
    except EXPECTED_FAILURES as exc:
        print(f"error: {describe(exc, out_of_memory)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    except Terminated:
        print("terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
