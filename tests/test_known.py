"""Known answers in a query file: which output row is the known answer, and how often it comes first."""
from molspec_core.io import output_header, result_rows
from molspec_core.known import MATCHES_KNOWN, KnownSummary, known_summary, mark_known
from molspec_core.service import Prediction, QueryResult


def answers(query: str, *smiles: str) -> QueryResult:
    return QueryResult(query=query, canonical_query=query, method="beam", predictions=tuple(
        Prediction(rank=rank, smiles=s, score=-float(rank), valid=True, tokens=(), provenance=(), model_rank=rank)
        for rank, s in enumerate(smiles, start=1)))


def test_each_answer_row_says_whether_it_is_the_known_answer_and_the_summary_counts_queries():
    queries = [  # (known cell, result)
        ("OCC", answers("CCO.x", "CCO", "CCCO")),  # first: the known answer written another way
        ("C[C@H](N)C(=O)O", answers("q2", "CC(N)C(=O)O", "C[C@H](N)C(=O)O")),  # second; stereo tells them apart
        ("Cl.CCN", answers("q3", "CCN.Cl")),  # fragments in another order: the same answer
        ("CCO", answers("q4", "CCCl")),  # not listed
        ("CCO", QueryResult(query="xyz", error="not a valid SMILES")),  # rejected: nothing to judge
        ("", answers("q6", "CCO")),  # no known answer
        ("not a smiles", answers("q7", "CCO")),  # one RDKit cannot read
    ]
    header = output_header(("id", "product"))
    rows = [r for i, (known, result) in enumerate(queries, start=1) for r in result_rows(i, (f"r{i}", known), result)]
    marked_header, marked = mark_known(header, rows, known_at=1)
    assert marked_header == [*header, MATCHES_KNOWN]
    assert [r[:-1] for r in marked] == rows  # nothing else changes
    by_query: dict[object, list[object]] = {}
    for row in marked:
        by_query.setdefault(row[0], []).append(row[-1])
    assert by_query == {"r1": [True, False], "r2": [False, True], "r3": [True], "r4": [False], "r5": [None],
                        "r6": [None], "r7": [None]}
    summary = known_summary("product", marked_header, marked, known_at=1)
    assert summary == KnownSummary("product", queries=4, first=2, listed=3, unreadable=1, empty=1)
