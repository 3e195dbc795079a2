"""Known answers in a query file: how often the model gives them.

A chemist who uploads reactions with their recorded outcome (a CSV with a reactants and a product
column, say) wants to know how the model does on their own chemistry before trusting it. Output rows
(io.output_header's columns) get a last column, `matches_known`: whether the row's answer is the one
in the input's known-answer column, both canonical with stereo kept, as `molspec evaluate` compares
them. A summary counts the queries whose known answer comes first, or anywhere in the list.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .chem import canonical_or_none

MATCHES_KNOWN = "matches_known"


@dataclass(frozen=True)
class KnownSummary:
    column: str  # the input column that holds the known answers
    queries: int  # predicted queries whose known answer is a readable SMILES: the denominator
    first: int  # of those, the known answer is rank 1 (the app's order: sane answers first)
    listed: int  # ... is among the answers at any rank
    unreadable: int  # predicted queries whose known cell is not a SMILES RDKit reads
    empty: int  # predicted queries with nothing in the known column


def mark_known(header: Sequence[str], rows: Iterable[Sequence[object]], known_at: int
               ) -> tuple[list[str], list[list[object]]]:
    """The rows with MATCHES_KNOWN after their last column: True where the row's answer is the known
    answer in column `known_at`, False where another, None (empty) where the row has no answer (a rejected
    query) or the known cell is empty or not a SMILES."""
    answer_at, rank_at = header.index("smiles"), header.index("rank")
    wanted: dict[str, str | None] = {}  # known text -> its canonical SMILES: a query's rows share one
    marked = []
    for row in rows:
        known = str(row[known_at] or "").strip()
        if known not in wanted:
            wanted[known] = canonical_or_none(known) if known else None
        want = wanted[known]
        match = None if want is None or row[rank_at] is None else canonical_or_none(str(row[answer_at])) == want
        marked.append([*row, match])
    return [*header, MATCHES_KNOWN], marked


def known_summary(column: str, header: Sequence[str], rows: Iterable[Sequence[object]], known_at: int
                  ) -> KnownSummary:
    """The counts of mark_known's rows (known answers in column `known_at`, named `column` in the input),
    a query at a time (its rows share `row`)."""
    row_at, rank_at, match_at = header.index("row"), header.index("rank"), header.index(MATCHES_KNOWN)
    by_query: dict[object, list[Sequence[object]]] = {}
    for row in rows:
        by_query.setdefault(row[row_at], []).append(row)
    queries = first = listed = unreadable = empty = 0
    for answers in by_query.values():
        if answers[0][rank_at] is None:  # rejected: no answers to judge
            continue
        if not str(answers[0][known_at] or "").strip():
            empty += 1
        elif answers[0][match_at] is None:
            unreadable += 1
        else:
            queries += 1
            first += any(r[match_at] and r[rank_at] == 1 for r in answers)
            listed += any(r[match_at] for r in answers)
    return KnownSummary(column, queries, first, listed, unreadable, empty)
