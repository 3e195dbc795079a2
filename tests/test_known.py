"""Known answers in a query file: which output row is the known answer, and how often it comes first."""
from dataclasses import replace

import pytest

from molspec_core.chem import canonical
from molspec_core.io import InputFileError, QueryFile, output_header, parse_upload, result_rows
from molspec_core.data import _forward_pair
from molspec_core.known import (MATCHES_KNOWN, KnownMarks, KnownSummary, answer_key, column_index, is_known,
                                known_answers, known_rank, read_known, recorded_column, recorded_reaction,
                                with_recorded)
from molspec_core.service import Prediction, QueryResult


def answers(query: str, *smiles: str, task: str = "forward") -> QueryResult:
    return QueryResult(query=query, canonical_query=query, method="beam", task=task, predictions=tuple(
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
    marks = KnownMarks(header, 1, "product", "retro")
    marked = list(marks.rows(iter(rows)))  # a stream, as the CLI writes it
    assert marks.header == [*header, MATCHES_KNOWN]
    assert [r[:-1] for r in marked] == rows  # nothing else changes
    by_query: dict[object, list[object]] = {}
    for row in marked:
        by_query.setdefault(row[0], []).append(row[-1])
    assert by_query == {"r1": [True, False], "r2": [False, True], "r3": [True], "r4": [False], "r5": [None],
                        "r6": [None], "r7": [None]}
    summary = marks.summary()
    assert summary == KnownSummary("product", queries=4, first=2, listed=3, unreadable=1, empty=1,
                                   output_column="product", task="retro")
    # a known column whose name the output takes for itself is found under the output's name for it
    assert KnownMarks(output_header(("smiles",)), 0, "smiles", "retro").summary().output_column == "input_smiles"
    assert summary.describe() == ("known answers from the column product: first for 2 (50.0%) and listed for 3 "
                                  "(75.0%) of 4 queries (canonical SMILES, stereo kept); not counted: 1 known answer "
                                  "RDKit cannot read, 1 query with no known answer")
    one = KnownSummary("product", queries=1, first=1, listed=1, unreadable=0, empty=0, output_column="product")
    assert "first for 1 (100.0%) and listed for 1 (100.0%) of 1 query (canonical" in one.describe()  # was "queries"
    # never an impossible 100% or 0%: 1,999 of 2,000 read "100.0%", 1 of 3,000 "0.0%"
    many = KnownSummary("product", queries=3000, first=1, listed=2999, unreadable=0, empty=0, output_column="product")
    assert "first for 1 (<0.1%) and listed for 2999 (>99.9%) of 3000 queries" in many.describe()


def test_a_record_goes_out_marked_as_its_last_row_passes_so_a_stopped_run_keeps_it():
    """KnownMarks held a record's rows back until the next record's first row and rebuilt them as plain lists, so a
    run with a known-answer column stopped while the next record was predicted lost the record it had finished (and
    predicted it again on --resume): the record leaves as its LastRow passes, the mark kept."""
    from molspec_core.io import LastRow

    header = output_header(("product",))
    marks = KnownMarks(header, 0, "product", "forward")
    seen: list[list[object]] = []

    def stream():
        yield from result_rows(1, ("CCO",), answers("q1", "CCO", "CCCO"))
        yield from result_rows(2, ("CCO",), answers("q2", "CCO"))
        raise KeyboardInterrupt  # while record 3 is predicted

    with pytest.raises(KeyboardInterrupt):
        for row in marks.rows(stream()):
            seen.append(row)
    assert [(row[1], row[-1], isinstance(row, LastRow)) for row in seen] == [
        (1, True, False), (1, False, True), (2, True, True)]
    # rows without the mark (as a Ray run's come back) still go out record by record
    plain = [list(row) for i in (1, 2) for row in result_rows(i, ("CCO",), answers(f"q{i}", "CCO"))]
    assert [row[-1] for row in KnownMarks(header, 0, "product", "forward").rows(iter(plain))] == [True, True]


def test_a_file_without_readable_known_answers_says_so():
    header = output_header(("product",))
    marks = KnownMarks(header, 0, "product", "forward")
    list(marks.rows(result_rows(1, ("",), answers("q", "CCO"))))
    assert marks.summary().describe() == "no predicted query has a known answer that RDKit reads in the column product"


PPH3 = "c1ccc(P(c2ccccc2)c2ccccc2)cc1"


@pytest.mark.parametrize("text, task, expected", [
    ("CC(=O)Cl.NCc1ccccc1>>CC(=O)NCc1ccccc1", "forward", ("CC(=O)Cl.NCc1ccccc1>>", "CC(=O)NCc1ccccc1")),
    ("CC(=O)Cl.NCc1ccccc1>ClCCl>O=C(C)NCc1ccccc1", "forward", ("CC(=O)Cl.NCc1ccccc1>ClCCl>", "CC(=O)NCc1ccccc1")),
    ("CC(=O)Cl.NCc1ccccc1>ClCCl>CC(=O)NCc1ccccc1", "retro", ("CC(=O)NCc1ccccc1", "CC(=O)Cl.NCc1ccccc1")),
    ("[CH3:1][C:2](=[O:3])Cl.[NH2:4]C>>[CH3:1][C:2](=[O:3])[NH:4]C", "forward",  # USPTO's atom maps are dropped
     ("[CH3:1][C:2](=[O:3])Cl.[NH2:4]C>>", "CNC(C)=O")),
    ("CC(=O)Cl.NCc1ccccc1>>CC(=O)NCc1ccccc1 |c:0|", "forward",  # a CXSMILES, as Marvin copies a reaction
     ("CC(=O)Cl.NCc1ccccc1>>", "CC(=O)NCc1ccccc1")),
    # a record listing HCl beside the main product: forward knows both, as the model was trained to write products
    # (USPTO-MIT's 375 'X.Cl'-like targets; known_answers takes the main product alone too: it knew that alone, so
    # the model's 'X.Cl' matched no record), and retrosynthesis takes the main product apart (the HCl was read as
    # part of it)
    ("CC(=O)Cl.NCc1ccccc1>>CC(=O)NCc1ccccc1.Cl", "forward", ("CC(=O)Cl.NCc1ccccc1>>", "CC(=O)NCc1ccccc1.Cl")),
    # a product that is also a reagent (the model reads it) is none of the outcome: data.forward_target's rule
    ("CC(=O)Cl.NC>ClCCl>CNC(C)=O.ClCCl", "forward", ("CC(=O)Cl.NC>ClCCl>", "CNC(C)=O")),
    # ... nor, for either task, the product: a catalyst listed among the products was the 'main' one, larger
    (f"CC(=O)Cl.NC>{PPH3}>CNC(C)=O.{PPH3}", "forward", (f"CC(=O)Cl.NC>{PPH3}>", "CNC(C)=O")),
    (f"CC(=O)Cl.NC>{PPH3}>{PPH3}.CNC(C)=O", "retro", ("CNC(C)=O", "CC(=O)Cl.CN")),
    ("CC(=O)Cl.NCc1ccccc1>>Cl.CC(=O)NCc1ccccc1", "retro", ("CC(=O)NCc1ccccc1", "CC(=O)Cl.NCc1ccccc1")),
    ("CC(=O)Cl.N>>C1CC.Cl", "retro", ("C1CC.Cl", "CC(=O)Cl.N")),  # left for Predictor.prepare to refuse
    # a salt recorded as its ions: the query is the main ion's neutral form, the acid or base the salt is made from,
    # as Predictor.prepare names it for a salt (the anion was the query, which USPTO-50K hardly writes as a product)
    ("CCOC(=O)c1ccccc1>O>O=C([O-])c1ccccc1.[Na+].CCO", "retro", ("O=C(O)c1ccccc1", "CCOC(=O)c1ccccc1")),
    ("CC(=O)Cl.NCCN>>CC(=O)NCC[NH3+].[Cl-]", "retro", ("CC(=O)NCCN", "CC(=O)Cl.NCCN")),
    # an atom-mapped record (RXNMapper's, USPTO's) that lists its base among the reactants, unmapped: the reactants
    # are those that give the product an atom, as USPTO-50K lists them (the base was a reactant no answer names);
    # forward reads the base as the model reads reagents; unmapped, nothing tells a reactant from a base
    ("[CH3:1][C:2](=[O:3])Cl.[NH2:4][CH3:5].CCN(CC)CC>>[CH3:1][C:2](=[O:3])[NH:4][CH3:5]", "retro",
     ("[CH3:1][C:2](=[O:3])[NH:4][CH3:5]", "CC(=O)Cl.CN")),
    ("CCN(CC)CC.[CH3:1][C:2](=[O:3])Cl.[NH2:4][CH3:5]>>[CH3:1][C:2](=[O:3])[NH:4][CH3:5]", "forward",
     ("CCN(CC)CC.[CH3:1][C:2](=[O:3])Cl.[NH2:4][CH3:5]>>", "CNC(C)=O")),
    ("CC(=O)Cl.NC.CCN(CC)CC>>CNC(C)=O", "retro", ("CNC(C)=O", "CC(=O)Cl.CCN(CC)CC.CN")),
    # ... but a base the products list too passed through: no reactant (no answer could name the route), nor, as
    # its salt, larger than the amide, the main product (triethylammonium was the retrosynthesis query)
    ("CC(=O)Cl.NC.CCN(CC)CC>>CNC(C)=O.CCN(CC)CC", "retro", ("CNC(C)=O", "CC(=O)Cl.CN")),
    ("CC(=O)Cl.NC.CCN(CC)CC>>CNC(C)=O.CC[NH+](CC)CC.[Cl-]", "retro", ("CNC(C)=O", "CC(=O)Cl.CN")),
    ("CC(=O)Cl.NC.CCN(CC)CC>>CNC(C)=O.CC[NH+](CC)CC.[Cl-]", "forward",
     ("CC(=O)Cl.NC.CCN(CC)CC>>", "CC[NH+](CC)CC.CNC(C)=O.[Cl-]")),  # known_answers reads the base's salt so
    # a complex's dative bond ('->', '<-': RDKit's) is no arrow: the record was no reaction (split at every '>'), and
    # Predictor.prepare then told it to leave out the products that the app and the CLI take as the known answer
    ("Cl[Pt]Cl.N>>[NH3]->[Pt](Cl)(Cl)<-[NH3]", "forward", ("Cl[Pt]Cl.N>>", "[NH3]->[Pt](<-[NH3])([Cl])[Cl]")),
    ("CC(=O)Cl.N>[NH3]->[Pt](Cl)(Cl)<-[NH3]>CC(N)=O", "retro", ("CC(N)=O", "CC(=O)Cl.N")),
    ("C1CC>>CC |c:0|", "forward", None),  # a CXSMILES RDKit cannot read: Predictor.prepare refuses it, saying why
    ("CC(=O)Cl.NCc1ccccc1>>", "forward", None),  # no outcome: an ordinary query, Predictor.prepare's to read
    ("CC(=O)Cl", "forward", None),
    ("a>b>c>d", "forward", None),
])
def test_a_recorded_reaction_splits_into_the_query_and_its_known_answer(text, task, expected):
    assert recorded_reaction(text, task) == expected


def test_a_recorded_reaction_whose_outcome_is_no_smiles_is_refused():
    with pytest.raises(ValueError, match="the recorded products are not a valid SMILES"):
        recorded_reaction("CC(=O)Cl.NC>>C1CC(", "forward")
    with pytest.raises(ValueError, match="the recorded reactants are not a valid SMILES"):
        recorded_reaction("C1CC(>>CC(=O)NC", "retro")


def test_a_recorded_side_longer_than_a_query_may_be_is_refused_before_rdkit_reads_it():
    """A recorded outcome of up to 5,000 characters was read (a 5,000-atom ring's took RDKit seconds, a query's
    length at most a fraction of one): each side is held to MAX_QUERY_CHARS, as a query is, and only its row is
    refused."""
    from molspec_core.chem import MAX_QUERY_CHARS

    chain = "C" * (MAX_QUERY_CHARS + 1)
    for text, task, side in [(f"CC(=O)Cl.NC>>{chain}", "forward", "products"),
                             (f"{chain}>>CC(=O)NC", "retro", "reactants"),
                             (f"CC(=O)Cl.NC>{chain}>CNC(C)=O", "forward", "reagents")]:
        with pytest.raises(ValueError, match=rf"^the recorded {side} are {MAX_QUERY_CHARS + 1:,} characters long; "
                                             rf"each side of a recorded reaction may hold {MAX_QUERY_CHARS:,}, as a "
                                             "query may$"):
            recorded_reaction(text, task)
    marked, column = with_recorded(QueryFile([f"CC(=O)Cl.NC>>{chain}", "CC(=O)Cl.NC>>CNC(C)=O"]), "forward")
    assert marked.problems[0].startswith(f"the recorded products are {MAX_QUERY_CHARS + 1:,} characters long")
    assert not marked.problems[1]
    assert marked.queries[1] == "CC(=O)Cl.NC>>" and column == "recorded_products"
    assert recorded_reaction("CC(=O)Cl.NC>>" + "C" * MAX_QUERY_CHARS, "forward")  # the longest side read


@pytest.mark.parametrize("task", ["forward", "retro"])
def test_markup_holding_angle_brackets_is_told_it_is_no_reaction(task):
    """'<b>bold</b> text' pasted from a web page was read as a recorded reaction and told 'the recorded products are
    not a valid SMILES: RDKit cannot parse 'text''."""
    with pytest.raises(ValueError, match=r"^this text holds markup \('<b>' at position 1\), which no SMILES holds"):
        recorded_reaction("<b>bold</b> text", task)
    # a reaction InChI of reactants, agents and products: its '<>' were read as arrows, its layers as molecules
    with pytest.raises(ValueError, match=r"^this is a reaction InChI \(RInChI\) or its key, which is not read here"):
        recorded_reaction("RInChI=1.00.1S/C2H6O/c1-2-3/h3H,2H2,1H3<>C2H4O/c1-2-3/h2H,1H3<>H2O/h1H2/d+", task)
    with pytest.raises(ValueError, match=r"^the recorded products are not a valid SMILES: .* \(the text holds '>', so "
                                         r"it was read as a recorded reaction, reactants>reagents>products\)$"):
        recorded_reaction("CC(=O)Cl.NC>>C1CC(", "forward")


def test_a_file_of_recorded_reactions_is_read_as_its_queries_with_their_outcomes_beside():
    table = QueryFile(["CC(=O)Cl.NC>ClCCl>CNC(C)=O", "CC(=O)Cl.OC", "CC(=O)Cl.N>>C1CC(", "",
                       "CC(=O)Cl>O>[CH3:1]C(=O)O"],
                      ("id",), (("a",), ("b",), ("c",), ("d",), ("e",)), ("", "", "", "no atoms", ""))
    read, column = with_recorded(table, "forward")
    assert column == recorded_column("forward") == "recorded_products"
    assert read.queries == ["CC(=O)Cl.NC>ClCCl>", "CC(=O)Cl.OC", "CC(=O)Cl.N>>C1CC(", "", "CC(=O)Cl>O>"]
    assert read.columns == ("id", "recorded_products", "recorded_reaction")  # the reaction as written kept too
    assert read.cells == (("a", "CNC(C)=O", "CC(=O)Cl.NC>ClCCl>CNC(C)=O"), ("b", "", ""), ("c", "", ""),
                          ("d", "", ""), ("e", "CC(=O)O", "CC(=O)Cl>O>[CH3:1]C(=O)O"))
    # the unreadable outcome refuses its own row only; the file's own problem stays
    assert read.problems[0] == read.problems[1] == read.problems[4] == ""
    assert "recorded products are not a valid SMILES" in read.problems[2] and read.problems[3] == "no atoms"


def test_retro_reads_the_products_and_knows_the_reactants_and_a_plain_file_is_left_alone():
    read, column = with_recorded(QueryFile(["CC(=O)Cl.NC>ClCCl>CNC(C)=O"]), "retro")
    assert (read.queries, read.columns, read.cells, column) == (
        ["CNC(C)=O"], ("recorded_reactants", "recorded_reaction"),
        (("CC(=O)Cl.CN", "CC(=O)Cl.NC>ClCCl>CNC(C)=O"),), "recorded_reactants")  # the reagents, ClCCl, kept
    plain = QueryFile(["CCO", "CC(=O)Cl.NC>>"], ("id",), (("a",), ("b",)))
    assert with_recorded(plain, "forward") == (plain, None)


def test_a_file_that_has_the_recorded_column_already_is_refused():
    with pytest.raises(InputFileError, match="column 'recorded_products' already"):
        with_recorded(QueryFile(["CC>>CC"], ("recorded_products",), (("x",),)), "forward")
    with pytest.raises(InputFileError, match="column 'recorded_reaction' already"):
        with_recorded(QueryFile(["CC>>CC"], ("recorded_reaction",), (("x",),)), "forward")


def test_a_uspto_csv_of_reactions_is_read_by_its_own_column_name():
    data = b"id,reactants>reagents>production\nUS1,CC(=O)Cl.NC>>CNC(C)=O\n"
    read, column = with_recorded(parse_upload("50k.csv", data), "retro")
    assert (read.queries, read.columns, read.cells, column) == (
        ["CNC(C)=O"], ("id", "recorded_reactants", "recorded_reaction"),
        (("US1", "CC(=O)Cl.CN", "CC(=O)Cl.NC>>CNC(C)=O"),), "recorded_reactants")


def test_a_forward_answer_matches_a_product_recorded_as_its_salt_written_as_trained_or_alone():
    """USPTO-MIT keeps an HCl salt's Cl and a counter-ion in its targets, so the model writes 'X.Cl': the record's
    outcome is so written, and the main product alone matches too; retrosynthesis answers match whole only."""
    # a USPTO-MIT test reaction: the aminopyrimidine comes as its HCl salt
    query, known = recorded_reaction("C#Cc1cccc(N)c1.Clc1ncnc2[nH]ccc12>c1ccncc1>C#Cc1cccc(Nc2ncnc3[nH]ccc23)c1.Cl",
                                     "forward")
    assert known == "C#Cc1cccc(Nc2ncnc3[nH]ccc23)c1.Cl"
    made = "C#Cc1cccc(Nc2ncnc3[nH]ccc23)c1"
    salt = answers("q", f"Cl.{made}", made, f"{made}.Br", "Cl")
    base = answers("q", "CCO", made)
    assert known_rank(salt, known) == 1  # was None: the record knew C1CNCCN1 alone
    assert known_rank(base, known) == 2
    assert known_rank(replace(base, task="retro"), known) is None  # a route lacking a reactant is not the route
    header = output_header(("known",))
    marks = KnownMarks(header, 0, "known", "forward")
    marked = list(marks.rows(result_rows(1, (known,), salt)))
    assert [row[-1] for row in marked] == [True, True, False, False]  # another salt, or the HCl alone: not it
    assert "a product recorded with a salt or by-product also matches alone" in marks.summary().describe()
    retro = KnownMarks(header, 0, "known", "retro")
    assert [row[-1] for row in retro.rows(result_rows(1, ("CC(=O)Cl.CN",), answers("q", "CC(=O)Cl", "CN.CC(=O)Cl")))
            ] == [False, True]


@pytest.mark.parametrize("reactants, products", [
    ("CC(C)(C)OC(=O)N1CCNCC1.Cl", "C1CNCCN1.Cl.Cl"),  # HCl given: the model reads it, and writes the amine alone
    ("C#Cc1cccc(N)c1.Clc1ncnc2[nH]ccc12", "C#Cc1cccc(Nc2ncnc3[nH]ccc23)c1.Cl"),
    ("[CH3:1][C:2](=[O:3])Cl.[NH2:4]C", "[CH3:1][C:2](=[O:3])[NH:4]C.Cl"),
    ("CC(=O)Cl.NC.ClCCl", "CNC(C)=O.ClCCl"),
])
def test_a_recorded_outcome_is_written_as_the_forward_model_was_trained_to_write_products(reactants, products):
    assert recorded_reaction(f"{reactants}>>{products}", "forward")[1] == _forward_pair((reactants, products)).tgt


def test_a_known_answer_written_as_a_cxsmiles_or_an_inchi_is_read_as_a_query_is():
    """A product column exported as InChI (paracetamol's: RDKit reads the standard InChI as the imidic acid, the
    amide preferred as a query's is) or copied from Marvin as a CXSMILES was counted as one RDKit cannot read."""
    header = output_header(("known",))
    marks = KnownMarks(header, 0, "known", "forward")
    cells = ["InChI=1S/C8H9NO2/c1-6(10)9-7-2-4-8(11)5-3-7/h2-5,11H,1H3,(H,9,10)", "CC(=O)Nc1ccc(O)cc1 |(0,0,;1,0,;"
             "2,0,;3,0,;4,0,;5,0,;6,0,;7,0,;8,0,;9,0,;10,0,)|", "C C ( = O ) N c 1 c c c ( O ) c c 1", "InChI=1S/x"]
    rows = [r for i, cell in enumerate(cells, start=1)
            for r in result_rows(i, (cell,), answers("q", "CC(=O)Nc1ccc(O)cc1", "CCO"))]
    assert [row[-1] for row in marks.rows(rows)] == [True, False, True, False, None, None, None, None]
    summary = marks.summary()
    assert (summary.queries, summary.first, summary.unreadable) == (2, 2, 2)  # tokenized: still not a SMILES


def test_a_known_inchi_with_its_auxinfo_or_its_prefix_in_lower_case_is_read_as_a_query_is():
    """Predictor.prepare reads an InChI with the AuxInfo and InChIKey lines an export writes after it, and one whose
    'InChI=' was typed in lower case; a known answer so written was counted as one RDKit cannot read."""
    inchi = "InChI=1S/C8H9NO2/c1-6(10)9-7-2-4-8(11)5-3-7/h2-5,11H,1H3,(H,9,10)"
    aux = "AuxInfo=1/1/N:1,10,4,5,3,6,7,2,11,9,8/E:(2,3)(4,5)/rB:;;;;;;;;;;;/rC:;;;;;;;;;;;"
    for text in (f"{inchi}\n{aux}\nInChIKey=RZVAJINKPMORJF-UHFFFAOYSA-N", f"{inchi} {aux}", "inchi=" + inchi[6:]):
        assert read_known(text) == "CC(=O)Nc1ccc(O)cc1", text


@pytest.mark.parametrize("task, known, answer", [
    ("forward", "C1CNCCN1.Cl.Cl", "Cl.C1CNCCN1"),  # a dihydrochloride: the model writes each molecule once
    ("retro", "CC(=O)Cl.CC(=O)Cl.NCCN", "NCCN.CC(=O)Cl"),  # two equivalents of the acid chloride
    ("retro", "CC(=O)Cl.NCCN", "CC(=O)Cl.CC(=O)Cl.NCCN"),
])
def test_a_molecule_recorded_twice_for_its_equivalents_matches_an_answer_that_names_it_once(task, known, answer):
    assert known_rank(answers("q", "CCO", answer, task=task), known) == 2
    marks = KnownMarks(output_header(("known",)), 0, "known", task)
    assert [row[-1] for row in marks.rows(result_rows(1, (known,), answers("q", answer)))] == [True]


@pytest.mark.parametrize("task, known, answer, matches", [
    ("forward", "CC[NH3+].[Cl-]", "CCN.Cl", True),  # an amine's HCl salt, written ionic or not
    ("forward", "CCN.Cl", "CC[NH3+].[Cl-]", True),
    ("forward", "CC[NH3+].[Cl-]", "CCN", True),  # the free base: the main product alone, as for 'CCN.Cl'
    ("forward", "CC(=O)[O-].[Na+]", "CC(=O)O", True),  # the sodium salt's acid
    ("forward", "NCC(=O)O", "[NH3+]CC(=O)[O-]", True),  # a zwitterion
    ("forward", "C[N+](C)(C)Cc1ccccc1.[Br-]", "C[N+](C)(C)Cc1ccccc1", True),  # no proton makes the N+ neutral
    ("forward", "C[N+](C)(C)Cc1ccccc1.[Br-]", "CN(C)Cc1ccccc1", False),  # ... so the amine is another molecule
    # reactants are compared as USPTO-50K lists them, a salt's alkali cation left out: sodium acetate's route is the
    # acetate's (the retro model cannot write [Na+]); a sodium the answer holds beside it changes nothing either
    ("retro", "CC(=O)[O-].[Na+].CCBr", "CC(=O)O.CCBr", True),
    ("retro", "BrCc1ccccc1.[N-]=[N+]=[N-].[Na+]", "BrCc1ccccc1.[N-]=[N+]=[N-]", True),  # sodium azide
    ("retro", "BrCc1ccccc1.[N-]=[N+]=[N-]", "BrCc1ccccc1.[N-]=[N+]=[N-].[Na+]", True),
    ("retro", "O=C1c2ccccc2C(=O)N1[K].BrCCCl", "BrCCCl.O=C1NC(=O)c2ccccc21", False),  # K bonded: another writing
    ("retro", "CC(=O)[O-].[Na+].CCBr", "CC(=O)O.CCI", False),  # the other reactant still counts
    ("forward", "CC(=O)[O-].[Na+]", "CC(=O)[O-].[K+]", False),  # a product's cation is the product's
    ("retro", "C[NH3+].[Cl-].CC(=O)Cl", "CN.Cl.CC(=O)Cl", True),
])
def test_a_salt_written_ionic_or_not_is_the_same_answer(task, known, answer, matches):
    assert (known_rank(answers("q", answer, task=task), known) == 1) is matches


@pytest.mark.parametrize("known, answer, matches", [
    ("O=Cc1ccccc1.C[Mg]Br", "O=Cc1ccccc1.C[Mg+]", True),  # the textbook Grignard addition, as the retro model writes it
    ("O=Cc1ccccc1.C[Mg+]", "O=Cc1ccccc1.C[Mg]Br", True),
    ("O=Cc1ccccc1.C[Mg]Cl", "O=Cc1ccccc1.C[Mg]Br", True),  # the halide is not written: the same reagent
    ("CC(=O)Cl.Br[Zn]Cc1ccccc1", "CC(=O)Cl.[Zn+]Cc1ccccc1", True),  # an organozinc reagent (Negishi)
    ("O=Cc1ccccc1.C[Mg]Br", "O=Cc1ccccc1.[Mg+]CC", False),  # another carbon on the metal: another reagent
    ("O=Cc1ccccc1.C[Mg]C", "O=Cc1ccccc1.C[Mg+]", False),  # dimethylmagnesium has no halide to leave out
])
def test_a_grignard_reagent_with_its_halide_or_as_uspto_50k_writes_it_is_the_same_answer(known, answer, matches):
    """USPTO-50K writes a Grignard reagent as its cation, C[Mg+] (its halide left out), and the retro model writes it
    so: its answer to 1-phenylethanol, benzaldehyde and [CH3][Mg+], was not the textbook example's known
    O=Cc1ccccc1.C[Mg]Br, and the README counted the Grignard addition as missed."""
    assert (known_rank(answers("q", answer, task="retro"), known) == 1) is matches


def test_an_hcl_salt_made_with_hcl_among_the_reagents_matches_written_either_way():
    """A Boc group taken off with HCl gives the amine's HCl salt: the record 'X.Cl' knows the amine alone, as the
    training rule writes products (HCl is among what the model reads), and the model's 'X.Cl', the record as
    written, matched no rank; the answers are read by the same rule now."""
    source = "CC(C)(C)OC(=O)N1CCNCC1.Cl"  # the canonical query: the reactant and the reagent, HCl
    query, known = recorded_reaction("CC(C)(C)OC(=O)N1CCNCC1>Cl>C1CNCCN1.Cl", "forward")
    assert (query, known) == ("CC(C)(C)OC(=O)N1CCNCC1>Cl>", "C1CNCCN1")
    result = answers(source, "C1CNCCN1.Cl", "C1CNCCN1", "CC(C)(C)OC(=O)N1CCNCC1.Cl")
    assert known_rank(result, known) == 1
    assert is_known("C1CNCCN1", known, result) and not is_known("CC(C)(C)OC(=O)N1CCNCC1.Cl", known, result)
    marks = KnownMarks(output_header(("known",)), 0, "known", "forward")
    assert [row[-1] for row in marks.rows(result_rows(1, (known,), result))] == [True, True, False]
    # a file's own known column 'X.Cl' too; the unchanged reactant, HCl beside it or not, is never the product
    marks = KnownMarks(output_header(("known",)), 0, "known", "forward")
    assert [row[-1] for row in marks.rows(result_rows(1, ("C1CNCCN1.Cl",), result))] == [True, True, False]


def test_a_known_column_is_named_in_any_case_as_a_query_column_is():
    """`--known-column product` was refused for a file whose column is Product, where `--column smiles` finds
    SMILES; an exact name still picks one of two columns alike but for case, and a missing one is still refused."""
    assert column_index(["id", "Product"], "q.csv", "product") == 1
    assert column_index(["id", "Known\nproduct"], "q.csv", "known product") == 1  # a header wrapped in Excel
    assert column_index(["product", "Product"], "q.csv", "Product") == 1
    with pytest.raises(InputFileError, match="q.csv has no column 'PRODUCT' of known answers"):
        column_index(["product", "Product"], "q.csv", "PRODUCT")  # which of the two: not guessed
    with pytest.raises(InputFileError, match="has no column 'yield'"):
        column_index(["id", "Product"], "q.csv", "yield")



def test_a_missing_known_column_is_refused_naming_the_columns_as_a_header_is_named():
    """The refusal listed a wide file's first 10 columns and no more, so that it seemed to have only those; it names
    them as a header without a query column is named (io.shown_cells): the first 12, each cut, and how many more."""
    columns = [f"assay {i} " + "x" * 50 for i in range(15)]
    with pytest.raises(InputFileError) as refused:
        column_index(columns, "q.csv", "product")
    listed = str(refused.value).split("(its other columns: ")[1]
    assert listed.startswith(f"{columns[0][:40]}..., assay 1 ") and listed.endswith("and 3 more columns)")
    assert listed.count("assay") == 12


def test_a_forward_answer_matches_a_record_that_lists_the_bases_salt_beside_the_product():
    query = canonical("CC(=O)Cl.NC.CCN(CC)CC")
    _, known = recorded_reaction("CC(=O)Cl.NC.CCN(CC)CC>>CNC(C)=O.CC[NH+](CC)CC.[Cl-]", "forward")
    assert answer_key("CNC(C)=O", "forward", query) in known_answers(known, "forward", query)


def test_reading_a_recorded_reaction_or_a_known_answer_keeps_rdkit_quiet():
    """known.recorded_reaction, read_known and answer_key, called as a library, printed RDKit's 'SMILES Parse Error'
    for an outcome it cannot read, beside the ValueError (or None) that says so; the caller's own RDKit messages
    stay on."""
    from test_chem import stderr_story

    story = stderr_story("from molspec_core.known import answer_key, read_known, recorded_reaction\n"
                         "try:\n    recorded_reaction('CCO>>C1CC', 'forward')\n"
                         "except ValueError:\n    told('refused')\n"
                         "told(read_known('C1CC'))\ntold(read_known('InChI=1S/xx'))\n"
                         "told(answer_key('C1CC', 'forward', 'CCO'))\nChem.MolFromSmiles('c1cc')")
    assert story == ["refused", "None", "None", "None", "rdkit"]
