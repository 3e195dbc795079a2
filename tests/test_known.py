"""Known answers in a query file: which output row is the known answer, and how often it comes first."""
from molspec_core.io import output_header, result_rows
from molspec_core.known import MATCHES_KNOWN, KnownMarks, KnownSummary
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
    marks = KnownMarks(header, 1, "product")
    marked = list(marks.rows(iter(rows)))  # a stream, as the CLI writes it
    assert marks.header == [*header, MATCHES_KNOWN]
    assert [r[:-1] for r in marked] == rows  # nothing else changes
    by_query: dict[object, list[object]] = {}
    for row in marked:
        by_query.setdefault(row[0], []).append(row[-1])
    assert by_query == {"r1": [True, False], "r2": [False, True], "r3": [True], "r4": [False], "r5": [None],
                        "r6": [None], "r7": [None]}
    summary = marks.summary()
    assert summary == KnownSummary("product", queries=4, first=2, listed=3, unreadable=1, empty=1)
    assert summary.describe() == ("known answers from the column product: first for 2 (50.0%) and listed for 3 "
                                  "(75.0%) of 4 queries (canonical SMILES, stereo kept); not counted: 1 known answer "
                                  "RDKit cannot read, 1 query with no known answer")


def test_a_file_without_readable_known_answers_says_so():
    header = output_header(("product",))
    marks = KnownMarks(header, 0, "product")
    list(marks.rows(result_rows(1, ("",), answers("q", "CCO"))))
    assert marks.summary().describe() == "no predicted query has a known answer that RDKit reads in the column product"
