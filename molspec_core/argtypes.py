"""argparse types shared by the command line (cli.py) and the training entry point (train.py), which runs on the
GPU machine without RDKit and so cannot import the command line."""
from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass


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


def file_name(example: str, folder: bool = False) -> Callable[[str], str]:
    """An argparse type: a file a flag names, to write or to read (a folder, where `folder`), refused where it names
    none: empty or blank (--out "$OUT" with OUT unset ran a whole evaluation and wrote no report, without a word;
    prepare-data's became the current folder; --index "" or --init "" was read as none given), or, for a file, ending
    in a folder's separator (--out reports/ wrote a file named reports). `example`: a name the refusal offers
    ("report.json")."""
    def name(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"must name a {'folder' if folder else 'file'}, such as {example}, not "
                                             f"{text!r}")
        if not folder and text.endswith(("/", os.sep)):
            raise argparse.ArgumentTypeError(f"{text} names a folder (it ends in {text[-1]}); give a file in it, such "
                                             f"as {text}{example}")
        return text
    return name


def column_name(text: str) -> str:
    """An argparse type: a column's (or SD data field's) name, refused empty or blank: --column "$COL" with COL unset
    was read as none given, and the file's own column read instead, without a word."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must name a column, not {text!r}")
    return text


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0 (a time limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text}")
    return value


def seconds_up_to(maximum: float) -> Callable[[str], float]:
    """An argparse type: positive_seconds, at most `maximum` (a library's cap, refused here under the flag's name)."""
    def seconds(text: str) -> float:
        value = positive_seconds(text)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {maximum:,g}, not "
                                             f"{text}")
        return value
    return seconds


@dataclass(frozen=True)
class Bounds:
    """The values a number option takes: finite, a whole number where `whole`, from `low` to `high` (either end
    left out where None, open where `low_open` / `high_open`), or one of `also` (dropout's -1: the preset's). Its
    `check` raises a ValueError that says so (a training run called from Python), and `argtype` makes it an argparse
    type (a usage error at parse time: `--lr nan` once trained and wrote NaN weights over every export)."""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    whole: bool = False
    also: tuple[float, ...] = ()

    def describe(self) -> str:
        if self.whole and self.high is None and self.low is not None:  # at_least's wording
            text = f"{self.low + self.low_open:g} or more"
        elif self.low is not None and self.high is not None:
            text = (f"{'a whole number' if self.whole else 'a number'} in {'(' if self.low_open else '['}"
                    f"{self.low:g}, {self.high:g}{')' if self.high_open else ']'}")
        else:
            text = "a whole number" if self.whole else "a finite number"
            if self.low is not None:
                text += f" {'above' if self.low_open else 'at least'} {self.low:g}"
            if self.high is not None:
                text += f" {'below' if self.high_open else 'at most'} {self.high:g}"
        if self.also:
            text += ", or " + " or ".join(f"{value:g}" for value in self.also)
        return text

    def parse(self, text: str) -> int | float:
        try:
            return int(text) if self.whole else float(text)
        except ValueError:
            raise ValueError(f"must be {'a whole number' if self.whole else 'a number'}, not {text!r}") from None

    def check(self, value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int if self.whole else (int, float)):
            raise ValueError(f"must be {self.describe()}, not {value!r}")
        if value in self.also:
            return
        fits = math.isfinite(value)
        if fits and self.low is not None:
            fits = value > self.low if self.low_open else value >= self.low
        if fits and self.high is not None:
            fits = value < self.high if self.high_open else value <= self.high
        if not fits:
            raise ValueError(f"must be {self.describe()}, not {value}")


@dataclass(frozen=True)
class Choice:
    """The names a text option takes, and any that match `pattern` in full (`cuda:N`), shown as `shown`."""
    names: tuple[str, ...]
    pattern: str = ""
    shown: str = ""

    def parse(self, text: str) -> str:
        return text

    def check(self, value: object) -> None:
        if not isinstance(value, str) or not (value in self.names or (self.pattern and re.fullmatch(self.pattern,
                                                                                                        value))):
            raise ValueError(f"must be one of {', '.join(self.names)}{self.shown}, not {value!r}")


def argtype(rule: Bounds | Choice) -> Callable[[str], object]:
    """An argparse type that parses a flag's text as `rule` says and refuses what its check refuses."""
    def parse(text: str) -> object:
        try:
            value = rule.parse(text)
            rule.check(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value
    return parse
