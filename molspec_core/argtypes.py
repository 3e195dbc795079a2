"""argparse types shared by the command line (cli.py) and the training entry point (train.py), which runs on the
GPU machine without RDKit and so cannot import the command line."""
from __future__ import annotations

import argparse
from collections.abc import Callable


def at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number >= minimum, and <= maximum where one is given (argparse reports anything
    else as a usage error, before a model loads)."""
    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
        if maximum is not None and not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be between {minimum} and {maximum}, not {value}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, not {value}")
        return value
    return whole_number


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 (a time limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text}")
    return value
