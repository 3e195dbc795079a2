"""Known answers in a query file: how often the model gives them.

A chemist who uploads reactions with their recorded outcome (a CSV with a reactants and a product
column, say) wants to know how the model does on their own chemistry before trusting it. Output rows
(io.output_header's columns) get a last column, `matches_known`: whether the row's answer is the one
in the input's known-answer column, both canonical with stereo kept, as `molspec evaluate` compares
them. A summary counts the queries whose known answer comes first, or anywhere in the list.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from .chem import canonical_or_none
from .io import InputFileError

MATCHES_KNOWN = "matches_known"


def column_index(columns: Sequence[str], file_name: str, column: str) -> int:
    """Where a file's known answers are among its other columns (QueryFile.columns); InputFileError,
    naming the columns it has, where it has no such column."""
    if column in columns:
        return list(columns).index(column)
    listed = ", ".join(c if len(c) <= 30 else c[:29] + "…" for c in columns[:10]) or "none besides its queries"
    raise InputFileError(f"{file_name} has no column {column!r} of known answers (its other columns: {listed})")


@dataclass(frozen=True)
class KnownSummary:
    column: str  # the input column that holds the known answers
    queries: int  # predicted queries whose known answer is a readable SMILES: the denominator
    first: int  # of those, the known answer is rank 1 (the app's order: sane answers first)
    listed: int  # ... is among the answers at any rank
    unreadable: int  # predicted queries whose known cell is not a SMILES RDKit reads
    empty: int  # predicted queries with nothing in the known column

    def describe(self) -> str:
        """One line for a person: the counts, and what was left out."""
        if not self.queries:
            return f"no predicted query has a known answer that RDKit reads in the column {self.column}"
        text = (f"known answers from the column {self.column}: first for {self.first} ({self.first / self.queries:.1%})"
                f" and listed for {self.listed} ({self.listed / self.queries:.1%}) of {self.queries} queries "
                "(canonical SMILES, stereo kept)")
        left_out = []
        if self.unreadable:
            left_out.append(f"{self.unreadable} known answer{'s' * (self.unreadable > 1)} RDKit cannot read")
        if self.empty:
            left_out.append(f"{self.empty} quer{'ies' if self.empty > 1 else 'y'} with no known answer")
        return text + (f"; not counted: {', '.join(left_out)}" if left_out else "")


class KnownMarks:
    """Marks output rows as they stream past (a file of 100,000 queries is never held whole) and counts
    the queries. A query's rows come together and share `row` (io.result_rows)."""

    def __init__(self, header: Sequence[str], known_at: int, column: str) -> None:
        self.header = [*header, MATCHES_KNOWN]
        self.known_at, self.column = known_at, column  # the known cells' index in a row; their input name
        self._row_at, self._rank_at, self._answer_at = header.index("row"), header.index("rank"), header.index("smiles")
        self._counts = dict(queries=0, first=0, listed=0, unreadable=0, empty=0)

    def rows(self, rows: Iterable[Sequence[object]]) -> Iterator[list[object]]:
        """The rows with MATCHES_KNOWN after their last column: True where the row's answer is the known
        answer, False where another, None (empty) where the row has no answer (a rejected query) or the
        known cell is empty or not a SMILES."""
        for _, group in itertools.groupby(rows, key=lambda row: row[self._row_at]):
            answers = list(group)
            known = str(answers[0][self.known_at] or "").strip()
            want = canonical_or_none(known) if known else None
            marked = [[*row, None if want is None or row[self._rank_at] is None
                       else canonical_or_none(str(row[self._answer_at])) == want] for row in answers]
            self._count(marked, known, want)
            yield from marked

    def _count(self, marked: list[list[object]], known: str, want: str | None) -> None:
        if marked[0][self._rank_at] is None:  # rejected: no answers to judge
            return
        if not known:
            self._counts["empty"] += 1
        elif want is None:
            self._counts["unreadable"] += 1
        else:
            self._counts["queries"] += 1
            self._counts["first"] += any(row[-1] and row[self._rank_at] == 1 for row in marked)
            self._counts["listed"] += any(row[-1] for row in marked)

    def summary(self) -> KnownSummary:
        """The counts of the rows marked so far."""
        return KnownSummary(self.column, **self._counts)
