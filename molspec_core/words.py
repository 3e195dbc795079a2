"""Counts in words, for the messages of the engine and the command line (the app's pages may use it too: it imports
nothing). One home for the rule: the command line wrote it inline, a dozen times, beside views/common.counted and
views/routes.amount, which the engine cannot import (they import streamlit)."""
from __future__ import annotations


def counted(n: int, noun: str, plural: str = "") -> str:
    """'1 query', '2 queries', '12,345 molecules': a count, its thousands apart (views/common.counted writes
    none), its noun in the right number (`plural` where adding an s is wrong: 'queries', 'entries')."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def part_of(n: int, total: int, noun: str, plural: str = "") -> str:
    """'1 of 4 queries', '1,200 of 3,000 queries': a share of a count, both thousands apart (the caller's verb agrees
    with n: '1 of 4 queries was refused')."""
    return f"{n:,} of {counted(total, noun, plural)}"
