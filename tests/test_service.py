"""Predictor: validation, canonicalization, ranked results, provenance, errors, threads."""
import math
import re
import threading
import time

import pytest
import torch

from conftest import FIXTURES, FORWARD_MODEL, decoded_answers, decoder_clock, molfile, needs_native
from test_chem import stderr_story
from molspec_core.chem import smiles_from_inchi
from molspec_core.checkpoint import CheckpointError
from molspec_core.evaluate import evaluate
from molspec_core.io import RESULT_COLUMNS, output_header, result_rows
from molspec_core.methods import METHODS, SamplingOptions, of_family, readers_of
from molspec_core.service import (MAX_QUERY_CHARS, MAX_TIME_LIMIT_S, TIMED_OUT, Prediction, Predictor, QueryResult,
                                  rank_answers, several_products_note, stopped_message)

GREEDY_METHODS = of_family("greedy")


@pytest.fixture(scope="module")
def copier():
    return Predictor.load(FIXTURES / "copy_model", device="cpu")


@pytest.fixture(scope="module")
def forward():
    return Predictor.load("forward", device="cpu")


def test_load_by_name_finds_the_shipped_forward_model(forward):
    assert forward.path == FORWARD_MODEL and forward.task == "forward"


def test_the_api_is_imported_from_the_package_and_only_when_asked_for():
    """`from molspec_core import Predictor` raised ImportError: the names lived in their modules alone. Importing the
    package still loads none of them: the training path (molspec_core.threads, ...) runs without RDKit."""
    import subprocess
    import sys

    import molspec_core
    from molspec_core import methods, service, threads

    assert (molspec_core.Predictor, molspec_core.QueryResult, molspec_core.Prediction) == (
        service.Predictor, service.QueryResult, service.Prediction)
    assert molspec_core.SamplingOptions is methods.SamplingOptions and molspec_core.use_threads is threads.use_threads
    with pytest.raises(ImportError, match="cannot import name 'Predicter'"):
        from molspec_core import Predicter  # noqa: F401
    loaded = subprocess.run([sys.executable, "-c", "import sys, molspec_core.threads; "
                             "print(sorted({'rdkit', 'molspec_core.service'} & set(sys.modules)))"],
                            capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_the_readmes_module_paths_work_after_importing_the_package_alone():
    """The README calls molspec_core.roundtrip.check_round_trip and molspec_core.centre.reaction_centre; after
    `import molspec_core` both raised AttributeError (module 'molspec_core' has no attribute 'roundtrip') until the
    submodule was imported by name. A submodule is imported when first asked for, as the exported names are."""
    import subprocess
    import sys

    code = ("import molspec_core, sys; print(molspec_core.roundtrip.check_round_trip.__name__, "
            "molspec_core.centre.reaction_centre.__name__, 'molspec_core.bench' in sys.modules)\n"
            "try:\n    molspec_core.no_such_module\nexcept AttributeError as exc:\n    print(exc)")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.splitlines() == ["check_round_trip reaction_centre False",
                                  "module 'molspec_core' has no attribute 'no_such_module'"]


@pytest.mark.parametrize("engine", ["numpy", "torch"])
def test_int8_on_an_engine_without_it_is_refused_before_the_weights_are_read(monkeypatch, engine):
    """Predictor.load(..., engine="numpy", dtype="int8") read and built the whole model (seconds for the retro model)
    before it said that int8 is the native engine's; the options are checked first, as the device is."""
    from molspec_core import checkpoint

    def refuse(*args, **kwargs):
        raise AssertionError("the weights were read")

    monkeypatch.setattr(checkpoint, "load", refuse)
    with pytest.raises(ValueError, match=f"dtype int8 runs on the native engine \\(CPU\\) only, not engine {engine}"):
        Predictor.load(FIXTURES / "copy_model", device="cpu", engine=engine, dtype="int8")


@pytest.mark.parametrize("engine, dtype, refusal", [
    ("auto", "int8", r"dtype int8 runs on the native engine, which cannot take this model here: .+; leave dtype at "
                     r"float32 \(the NumPy step decodes it\)$"),
    ("native", "int8", r"dtype int8 runs on the native engine, which cannot take this model here: .+; leave dtype at "
                       r"float32 and engine at auto \(the NumPy step decodes it\)$"),
    ("native", "float32", r"engine native cannot run here: .+; engine auto decodes with the NumPy step here$")])
def test_a_model_the_native_engine_cannot_take_is_refused_naming_the_setting_chosen(engine, dtype, refusal):
    """The copy model's float32 weights (or a machine without the C step): dtype int8 under engine auto was refused
    as 'engine native cannot run here', an engine the user never chose. The refusal names the setting asked for and
    the one that decodes."""
    with pytest.raises(ValueError, match=refusal):
        Predictor.load(FIXTURES / "copy_model", device="cpu", engine=engine, dtype=dtype)


def test_an_int8_refusal_gives_its_reason_apart_from_the_apis_advice():
    """The app's sidebar showed the API's advice, "leave dtype at float32", beside a switch named *Faster arithmetic*:
    the refusal holds the engine's reason and the advice apart, for a caller that names its own setting."""
    from molspec_core.service import DtypeRefused

    with pytest.raises(DtypeRefused) as refused:
        Predictor.load(FIXTURES / "copy_model", device="cpu", dtype="int8")
    assert str(refused.value).endswith(f"{refused.value.reason}; {refused.value.advice}")
    assert "dtype" not in refused.value.reason and refused.value.advice.startswith("leave dtype at float32")


def test_a_model_loaded_by_a_relative_path_keeps_its_confidence_after_a_change_of_folder(monkeypatch, tmp_path):
    """Predictor.load("models/forward") kept the path as typed, and the calibration, read at the first call that asks
    for it, was looked for under the working folder of that moment: after os.chdir (a notebook's %cd) every answer
    came back without a confidence, without a word. The path is made absolute at load."""
    monkeypatch.chdir(FORWARD_MODEL.parent.parent)
    predictor = Predictor.load("models/forward", device="cpu")
    assert predictor.path == FORWARD_MODEL
    monkeypatch.chdir(tmp_path)
    result = predictor.predict("CC(=O)Cl.NCc1ccccc1", method="beam", n_best=2)
    assert result.ok and result.predictions[0].confidence is not None


def test_predicts_type_hints_say_one_query_gives_one_result_and_a_list_a_list():
    """predict was hinted -> QueryResult | list[QueryResult] whatever it was given, so a type checker refused
    `predictor.predict("CCO").ok` and `for r in predictor.predict([...])` (roundtrip.py's own call among them)."""
    import typing
    from collections.abc import Iterable

    overloads = [typing.get_type_hints(f) for f in typing.get_overloads(Predictor.predict)]
    assert [(hints["smiles"], hints["return"]) for hints in overloads] == [(str, QueryResult),
                                                                          (Iterable[str], list[QueryResult])]


def test_a_predictor_prints_as_the_call_that_loads_it(copier):
    """It printed as <molspec_core.service.Predictor object at 0x...>: which model, where, computing how?"""
    assert repr(copier) == (f"Predictor.load({str(FIXTURES / 'copy_model')!r}, device='cpu', engine='numpy', "
                            "dtype='float32')")


def test_decodes_on_the_graphs_engine_take_turns_and_keep_their_own_answers(monkeypatch):
    """The graphs engine's banks hold one call's tokens and one cache's slots at a time (graphs.py): a decode that
    began while another was inside a call (two threads, two of the app's sessions) put its tokens and slots in the
    bank that call computed from, and both got wrong answers. Here the first decode waits inside its first call
    (up to 2 s) for the second to end; taking turns, the second waits for the first instead."""
    from molspec_core import graphs

    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu", engine="torch")
    predictor.model.use_cuda_graphs(capture=False)  # the engine's static call, run eagerly (capture needs a GPU)
    queries = ["CCOc1ccncc1Br", "CC(=O)Nc1ccccc1"]
    alone = [predictor.predict(q, method="beam", n_best=2).predictions for q in queries]
    assert alone[0] != alone[1]
    call, inside, second_ended = graphs._Graph.__call__, threading.Event(), threading.Event()

    def waiting_once(graph):  # the first decode's first call, its tokens in the bank
        if threading.current_thread().name == "first" and not inside.is_set():
            inside.set()
            second_ended.wait(2)
        return call(graph)

    monkeypatch.setattr(graphs._Graph, "__call__", waiting_once)
    got: dict[str, object] = {}

    def decode(name: str, query: str) -> None:
        got[name] = predictor.predict(query, method="beam", n_best=2).predictions
        if name == "second":
            second_ended.set()

    first = threading.Thread(target=decode, args=("first", queries[0]), name="first")
    first.start()
    assert inside.wait(30)
    second = threading.Thread(target=decode, args=("second", queries[1]), name="second")
    second.start()
    first.join(60)
    second.join(60)
    assert [got["first"], got["second"]] == alone


def test_query_is_canonicalized_before_decoding(copier):
    result = copier.predict("OCC")
    assert result.ok and result.canonical_query == "CCO"
    assert result.source_tokens == ("C", "C", "O")


@pytest.mark.parametrize("text,message", [
    # a program's caller was told to "paste or draw a molecule", the app's words, over HTTP too
    ("", "empty query: give a SMILES or an InChI (in the app, paste one or draw the structure)"),
    ("   ", "empty query"),
    (".", "empty query: give a SMILES or an InChI"),
    ("xyz", "not a valid SMILES"),
    ("C1CC", "not a valid SMILES: RDKit cannot parse 'C1CC' as a molecule: ring bond 1 opened at position 2 is never "
             "closed"),
    ("CN(C)(C)(C)C.CCO", "'CN(C)(C)(C)C' as a molecule: the N at position 2 has more bonds than it can (RDKit: "
                         "Explicit valence for atom # 1 N, 5, is greater than permitted, counting atoms from 0)"),
    ("C" * (MAX_QUERY_CHARS + 1), "limit is"),
    ("CC[Na]", "not in the model's vocabulary"),
    ("CC O", "no spaces"),
    (molfile("CCO"), "this is a molfile, not a SMILES: open it as a file"),
    (molfile("C" * 400).replace("\n", ""), "this is a molfile"),  # pasted in a browser's field: one long line
    ("CC>>CO", "reaction SMILES"),
    ("aspirin", ("not a valid SMILES: RDKit cannot parse 'aspirin' as a molecule; it reads like a name, and names "
                 "are not looked up here: paste a SMILES or an InChI, or draw the structure")),
    # a CAS number (ethanol's), as catalogues list compounds: told of a ring bond with no atom before it, alone
    ("64-17-5", ("not a valid SMILES: RDKit cannot parse '64-17-5' as a molecule: ring bond 6 at position 1 has no "
                 "atom before it; it reads like a CAS Registry Number, and those are not looked up here")),
    ("acetic anhydride", "several queries apart (a list in Python or over HTTP; a line each in a file, the "
                         "app's Batch page); it reads like a name"),
    ("CC(=O)Cl NCc1ccccc1", "no spaces: join the molecules of one query with '.'"),  # two lines pasted into one box
    # a comment line of a TXT file of queries: told it read like a name, or of a bond without an atom before it alone
    ("# made by hand", "no spaces: join the molecules of one query with '.' (CC(=O)Cl.NCc1ccccc1), and give several "
                       "queries apart (a list in Python or over HTTP; a line each in a file, the app's Batch page); it "
                       "begins with '#', as a comment line does, and no SMILES does: leave the line out (a SMILES "
                       "file, .smi, skips such lines)"),
    ("#CCN", "the bond '#' at position 1 has no atom before it; it begins with '#', as a comment line does"),
    # a line of the Molecular Transformer's tokenized files: told it reads as tokens, and what they join to
    ("C C ( = O ) Cl . N c 1 c c n c c 1", "; it reads as tokenized SMILES (a token a space): joined, it is "
                                            "CC(=O)Cl.Nc1ccncc1"),
    # a reaction as papers write it, spaces around its '+' and '>>': told it was a SMILES and then a name or title,
    # the SMILES alone the first molecule, the amine dropped
    ("CC(=O)Cl + NCc1ccccc1", "; it reads as molecules with spaces around a '+' or '>': written as one query, it is "
                              "CC(=O)Cl.NCc1ccccc1"),
    ("CC(=O)Cl + NCc1ccccc1 >> CC(=O)NCc1ccccc1", "written as one query, it is CC(=O)Cl.NCc1ccccc1>>CC(=O)NCc1ccccc1"),
    ("CC(=O)Cl.NCc1ccccc1 > ClCCl >", "written as one query, it is CC(=O)Cl.NCc1ccccc1>ClCCl>"),
    # two InChIs, a line each (the line break a space in a one-line field): told only of a SMILES's spaces
    ("InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3\nInChI=1S/C2H4O2/c1-2(3)4/h1H3,(H,3,4)",
     "the app's Batch page); it holds 2 InChIs: give each as its own query, or all the molecules of one query as one "
     "InChI (a drawing program writes one for a drawing of several) or as one SMILES"),
    # a long SMILES broken across lines, copied from a PDF's column: told only of a SMILES's spaces
    ("CC(=O)NCc1cc\r\nccc1", "the app's Batch page); it reads as one SMILES broken across lines: joined, it is "
                               "CC(=O)NCc1ccccc1"),
    # a label or a list number before the SMILES, as notes and a paper's SI write them: told it reads like a name
    ("SMILES: CC(=O)NCc1ccccc1", "; it reads as a label or a number and then a SMILES: the SMILES alone is "
                                 "CC(=O)NCc1ccccc1"),
    ("12) CCO", "; it reads as a label or a number and then a SMILES: the SMILES alone is CCO"),
    ("InChI=1S/garbage", "RDKit cannot read 'InChI=1S/garbage' as an InChI"),
    ("C1CC |c:1|", "RDKit cannot read 'C1CC |c:1|' as a CXSMILES"),
])
def test_bad_queries_give_clear_errors(copier, text, message):
    result = copier.predict(text)
    assert not result.ok and message in result.error
    assert result.predictions == ()


@pytest.mark.parametrize("text, hint", [("CCO CCN", ""),
                                        ("NCCO aminoethanol", "; it reads as a SMILES and then a name or title")])
def test_a_caller_of_one_molecule_is_not_told_to_join_molecules(copier, text, hint):
    """The Routes page plans for one molecule, and its refusal of a target holding spaces opened with a query's advice:
    join the molecules with '.', use the Batch page, which planning then refused. A caller of one molecule
    (one_molecule) is told to give it as one SMILES, with what the text reads as where that is known."""
    with pytest.raises(ValueError) as refused:
        copier.prepare(text, one_molecule=True)
    assert str(refused.value).startswith("a SMILES has no spaces: give the molecule as one SMILES written without "
                                         "them" + hint)
    assert "'.'" not in str(refused.value) and "Batch" not in str(refused.value)
    with pytest.raises(ValueError, match="join the molecules of one query with '.'"):  # a query may hold several
        copier.prepare(text)


def test_a_query_read_as_a_reaction_says_so_and_a_retro_model_asks_for_the_product(forward):
    """A query with a '>' is read as a reaction SMILES, and a refusal of its molecules says so ('<b>bold</b>' was
    refused as "cannot parse '<b'", a piece the user never typed alone; markup is now named first). A
    retrosynthesis model given a reaction was told of forward prediction's form."""
    refused = forward.predict("CCX>O>")
    assert not refused.ok and "RDKit cannot parse 'CCX'" in refused.error
    assert "the query holds '>', so it was read as a reaction SMILES, 'reactants>reagents>', whose molecules are " \
        "'CCX.O'" in refused.error
    assert forward.predict("CC(=O)O.OCC>>").ok
    # a client over HTTP was told that the app and `molspec predict` take a recorded reaction, not that the server does
    assert forward.predict(">>CC(=O)NCc1ccccc1").error == (
        "the reaction SMILES has no reactants before its first '>': forward prediction reads 'reactants>reagents>' "
        "(the app, molspec predict and molspec serve also take a recorded reaction, 'reactants>reagents>product')")
    assert forward.predict("CCO>>C>O>C").error == (
        "a reaction SMILES has three parts, reactants>reagents>products, and this one has 5: no '>' belongs inside a "
        "molecule's SMILES")
    # a recorded reaction pasted whole was told to paste the molecules alone, not that its products are the trouble
    assert forward.predict("CC(=O)Cl.NCc1ccccc1>>CC(=O)NCc1ccccc1").error.startswith(
        "this reaction SMILES holds its products, after its second '>': forward prediction predicts them from "
        "'reactants>reagents>', so leave them out")
    retro = Predictor.load("retro", device="cpu")
    for text in (">CCN(CC)CC>CC(=O)Nc1ccc(O)cc1", "CCO>>"):
        assert retro.predict(text).error == ("the retrosynthesis model reads a product, not a reaction SMILES: "
                                             "paste the product alone (or '>>product')")
    # a recorded reaction pasted whole through the API was not told that the app and the CLI take one, as forward is
    assert retro.predict("CC(=O)Cl.Nc1ccc(O)cc1>>CC(=O)Nc1ccc(O)cc1").error == (
        "the retrosynthesis model reads a product, not a reaction SMILES: paste the product alone (or '>>product') "
        "(the app, molspec predict and molspec serve take a recorded reaction whole, its reactants as the known "
        "answer)")
    alone = retro.predict(">>CC(=O)Nc1ccc(O)cc1")  # a reaction drawn with its product alone: that product
    assert alone.ok and alone.predictions == retro.predict("CC(=O)Nc1ccc(O)cc1").predictions


@pytest.mark.parametrize("task", ["forward", "retro"])
def test_a_query_holding_markup_is_told_so_on_either_task(task):
    """'<b>CCO</b>', copied from a web page, was read as a reaction SMILES and told "RDKit cannot parse '<b'" (forward)
    or to paste the product, not a reaction (retro); '<script>...' too. Markup is named on every task; a dative bond
    written '<-' (RDKit's) is no markup."""
    predictor = Predictor.load(task, device="cpu")
    told = ("this text holds markup ('<b>' at position 1), which no SMILES holds: it reads as HTML or XML copied "
            "from a web page or a document; paste the SMILES alone")
    assert predictor.predict("<b>CCO</b>").error == told
    assert predictor.predict(" CC(=O)O<sub>2</sub>").error.startswith("this text holds markup ('<sub>' at position 8)")
    assert predictor.predict("<script>alert(1)</script>").error.startswith("this text holds markup ('<script>'")
    assert "markup" not in (predictor.predict("[NH3]->[Pt](Cl)(Cl)<-[NH3]").error or "")


@pytest.mark.parametrize("text", ["RInChI=1.00.1S/C2H6O/c1-2-3/h3H,2H2,1H3<>C2H4O/c1-2-3/h2H,1H3/d+",
                                  "Long-RInChIKey=SA-FUHFF-LFQSCWFLJHTTHZ-UHFFFAOYSA-N"])
def test_a_reaction_inchi_is_told_it_is_not_read(copier, text):
    """A reaction InChI, as ChemDraw and Marvin export a reaction, was read as a reaction SMILES at its '<>' and told
    that forward prediction reads 'reactants>reagents>' only; its key was told its 'R' is no atom."""
    assert copier.predict(text).error == (
        "this is a reaction InChI (RInChI) or its key, which is not read here: paste the reaction SMILES (forward "
        "prediction reads 'reactants>reagents>'), or each molecule's SMILES or InChI")


def test_a_smarts_pattern_pasted_as_a_query_is_refused_not_read_as_radicals_or_an_unknown_token(forward):
    """'[#6]-[#8]', a SMARTS pattern for any C-O, was read by RDKit as the diradical [C][O] and decoded to nonsense;
    an atom given by atomic number is refused (in a CXSMILES too, whose [#6] RDKit would rewrite as [C])."""
    told = ("the bracket atom [#6] at position 1 gives its element by atomic number, as a SMARTS pattern does (C is "
            "#6): read as a SMILES it is an atom with no hydrogens (a radical), not any atom of that element; paste "
            "the molecule's SMILES, each element by its symbol")
    assert forward.predict("[#6]-[#8]").error == told
    assert forward.predict("[#6]-[#8] |$;$|").error == told
    assert forward.predict("CC(=O)[13#7]").error.startswith("the bracket atom [13#7] at position 7 gives its element "
                                                            "by atomic number, as a SMARTS pattern does (N is #7)")
    assert forward.predict("CC(=O)O.OC#C").ok  # a triple bond's '#' outside brackets is SMILES
    # SMARTS's any bond, read by RDKit as a bond of no type: told only that '~' is not in the model's vocabulary
    assert forward.predict("c1ccccc1~O").error == (
        "the '~' at position 9 is a SMARTS pattern's any bond, which no molecule has: paste the molecule's SMILES, "
        "each bond single, double (=), triple (#) or aromatic")


def test_a_retro_salt_with_a_token_outside_the_vocabulary_names_the_acid_or_base_it_is_made_from():
    """Sodium acetate got the vocabulary error for [Na+] with nothing to do instead (the chemistry QA); then it was
    told to predict the anion, CC(=O)[O-], which USPTO-50K hardly writes as a product (11 of 39,964 training products
    hold a carboxylate, 4,184 a carboxylic acid) and which the retro model took apart as an anilide's sulfonylation.
    A salt's ion is named with its neutral form, the acid (or base) the salt is made from; a quaternary ammonium,
    whose charge no proton explains, is named as it is."""
    retro = Predictor.load("retro", device="cpu")
    told = ("token '[Na+]' is not in the model's vocabulary; this model cannot read it. Retrosynthesis takes one "
            "product, and this query holds 2 molecules, a salt: its main molecule, CC(=O)[O-], is an ion; predict its "
            "neutral form, CC(=O)O, the acid or base the salt is made from, as the model's training data write nearly "
            "every such product")
    assert retro.predict("CC(=O)[O-].[Na+]").error == told
    assert retro.predict("CC(=O)O[Na]").error == told  # read as its ions (chem.salts_as_ions)
    assert "its main molecule, CC[NH3+], is an ion; predict its neutral form, CCN," in retro.predict(
        "CC[NH3+].[Cl-]").error
    assert retro.predict("C[N+](C)(C)CCc1ccccc1.[I-]").error.endswith(
        "this query holds 2 molecules: its main molecule alone, C[N+](C)(C)CCc1ccccc1, can be read")
    # readable whole (acetate beside ammonium): the note names the acid too
    assert several_products_note("retro", retro.predict("CC(=O)[O-].[NH4+]").canonical_query).endswith(
        "To take apart the main product alone, predict CC(=O)O.")
    assert several_products_note("retro", "CCN.Cl").endswith("predict CCN.")
    # one ion alone (acetate, no counter-ion) decoded with no word, where its salt was told to predict the acid
    assert several_products_note("retro", retro.predict("CC(=O)[O-]").canonical_query) == (
        "The query is written with charges a proton explains (an ion or a zwitterion), where the model's training "
        "data write nearly every such product in its neutral form, and the model may take the charged one apart as "
        "some other molecule. To take apart the neutral compound, predict CC(=O)O.")
    assert several_products_note("retro", "[NH3+]CC(=O)[O-]").endswith("predict NCC(=O)O.")  # glycine's zwitterion
    assert several_products_note("retro", "C[N+](C)(C)C") == ""  # no proton explains its charge
    # no carbon: sodium chloride was told to predict Cl, ammonium chloride N, sulfate sulfuric acid
    inorganic = ("No molecule of the query holds carbon: the model was trained on organic products (USPTO-50K) and its "
                 "answers for an inorganic compound mean nothing.")
    assert {several_products_note("retro", q) for q in ("[Cl-].[Na+]", "[Cl-].[NH4+]", "O=S(=O)([O-])[O-]")} == {
        inorganic}
    assert several_products_note("forward", "CC(=O)[O-]") == several_products_note("retro", "CC(=O)O") == ""
    assert retro.predict("CC(=O)O").ok
    unreadable = "token '[Cl-]' is not in the model's vocabulary; this model cannot read it"
    assert retro.predict("[Na+].[Cl-]").error == unreadable  # no molecule of it readable alone: nothing named


def test_an_answer_cut_off_at_the_length_limit_is_flagged_and_says_so_in_the_export():
    """It counted as valid and sane, with a calibrated confidence, and the CSV had nothing to mark it (only the
    app showed a badge); planning took it as a reaction."""
    retro = Predictor.load("retro", device="cpu")
    result = retro.predict("C" * 100)  # greedy runs to its budget, writing carbons
    answer = result.predictions[0]
    assert not answer.finished and answer.valid and not answer.sane
    assert answer.concerns == ("stopped at the length limit",)
    row = dict(zip(output_header(["smiles"]), result_rows(1, ("C" * 100,), result)[0]))
    assert (row["sane"], row["concerns"]) == (False, "stopped at the length limit")


def test_a_model_name_that_is_neither_a_folder_nor_shipped_lists_the_shipped_ones():
    """Predictor.load("Forward") said only that the folder did not exist; Predictor.load(None) raised TypeError."""
    with pytest.raises(CheckpointError, match=r"model folder Forward does not exist, and no shipped model has that "
                                              r"name \(shipped: forward, retro\)"):
        Predictor.load("Forward")
    with pytest.raises(CheckpointError, match="a folder's path or a shipped model's name, not NoneType"):
        Predictor.load(None)


def test_an_inchi_is_read_as_its_smiles_and_kept_as_given(copier):
    aspirin = "InChI=1S/C9H8O4/c1-6(10)13-8-5-3-2-4-7(8)9(11)12/h2-5H,1H3,(H,11,12)"
    result = copier.predict(aspirin)
    assert result.ok and result.query == aspirin and result.canonical_query == "CC(=O)Oc1ccccc1C(=O)O"
    alanine = smiles_from_inchi("InChI=1S/C3H7NO2/c1-2(4)3(5)6/h2H,4H2,1H3,(H,5,6)/t2-/m0/s1")
    assert alanine == "C[C@H](N)C(=O)O"  # its stereo layer kept: L-alanine (the copy model lacks [C@H])


def test_an_inchi_with_its_auxinfo_and_inchikey_lines_is_read_as_the_inchi(copier):
    """The InChI software and Marvin's InChI export write an AuxInfo line (atom numbers, coordinates) after the InChI,
    and an InChIKey line may follow: pasted so, it was refused as 'a SMILES has no spaces', and with the line breaks
    dropped (a one-line field) as an InChI RDKit cannot read. Two InChIs are still two queries, refused as one."""
    aspirin = "InChI=1S/C9H8O4/c1-6(10)13-8-5-3-2-4-7(8)9(11)12/h2-5H,1H3,(H,11,12)"
    pasted = (f"{aspirin}\nAuxInfo=1/1/N:1,11,2,12,3,4,10,5,13,7,9,6,8/E:(12,13)/rA:13nCCOOCCCCCCOCO/rB:s1;d2;s2;s4;d5;"
              "s6;d7;s8;s5;d10;s10;\r\nInChIKey=BSYNRYMUTXBXSQ-UHFFFAOYSA-N\n")
    result = copier.predict(pasted)
    assert result.ok and result.query == pasted and result.canonical_query == "CC(=O)Oc1ccccc1C(=O)O"
    joined = "".join(pasted.split())  # a browser's one-line field drops the line breaks
    assert copier.predict(joined).canonical_query == "CC(=O)Oc1ccccc1C(=O)O"
    assert copier.predict(f"{aspirin}\nAuxInfo=1/1/N:1\n{aspirin}").error.startswith("a SMILES has no spaces")


def test_a_cxsmiles_is_read_as_its_smiles_and_kept_as_given(forward):
    """Marvin and ChemDraw copy a drawing as a CXSMILES, 'SMILES |...|'; it was refused for its space."""
    cx = "CC(=O)Cl.NCc1ccccc1 |(0,0,;1,0,;1,1,;2,0,;3,0,;4,0,;5,0,;6,0,;7,0,;8,0,;9,0,;10,0,)|"
    result = forward.predict(cx)
    assert result.ok and result.query == cx and result.canonical_query == "CC(=O)Cl.NCc1ccccc1"
    plain = forward.predict("CC(=O)Cl.NCc1ccccc1")
    assert [p.tokens for p in result.predictions] == [p.tokens for p in plain.predictions]


def test_a_cxsmiles_is_held_to_the_length_limit_by_its_smiles_not_its_coordinates(forward):
    """Marvin copies a drawing as a CXSMILES with each atom's coordinates, some 20 characters an atom: an amide
    coupling of 100 atoms drawn so (its SMILES some 240 characters) was refused, 'query is 2,1xx characters long;
    the limit is 2000'. The limit holds the SMILES part; the whole text has a bound of its own."""
    from rdkit import Chem
    from rdkit.Chem import AllChem

    from molspec_core.service import MAX_DRAWING_CHARS

    smiles = ("CC(C)(C)OC(=O)NCCCC[C@H](NC(=O)OCC1c2ccccc2-c2ccccc21)C(=O)O.NC1CCN(Cc2ccccc2)CC1."
              "CN(C)C(=[N+](C)C)On1nnc2cccnc21.F[P-](F)(F)(F)(F)F.On1nnc2cccnc21.CCN(C(C)C)C(C)C.CN1CCOCC1."
              "O=C(O)C(F)(F)F.CN(C)C=O.CCOC(C)=O.ClCCl")
    mol = Chem.MolFromSmiles(smiles)
    AllChem.Compute2DCoords(mol)
    drawn = Chem.MolToCXSmiles(mol)
    assert len(drawn.split()[0]) < MAX_QUERY_CHARS < len(drawn)
    assert forward.prepare(drawn).canonical == forward.prepare(smiles).canonical
    too_long = f"C{'C' * MAX_QUERY_CHARS} |$_R1;;$|"
    assert forward.predict(too_long).error == (f"query is {MAX_QUERY_CHARS + 1:,} characters long before its |...| "
                                               f"part; the limit is {MAX_QUERY_CHARS:,}")
    assert forward.predict(drawn + " " * 2 + "C" * MAX_DRAWING_CHARS).error.startswith(
        f"query is {len(drawn) + 2 + MAX_DRAWING_CHARS:,} characters long; the limit is {MAX_QUERY_CHARS:,} (20,000 "
        "with")


def test_a_long_query_and_an_augment_the_model_cannot_use_are_refused_in_words_every_caller_reads(copier):
    """'query is 3145728 characters long' (a pasted file) gave its count without thousands separators, beside
    '(20,000 with ...)' with them; and a model trained on one writing told the command line, whose flag is --augment,
    and HTTP and Python callers alike to 'use augment 1'."""
    assert copier.predict("C" * 3 * 2**20).error == (f"query is 3,145,728 characters long; the limit is "
                                                     f"{MAX_QUERY_CHARS:,} (20,000 with a CXSMILES's |...| part or an "
                                                     "InChI's AuxInfo)")
    with pytest.raises(ValueError, match=r"^copy_model was trained on one writing of each query \(canonical SMILES\), "
                                         r"so other writings would only confuse it: leave augment at 1, its default "
                                         r"\(--augment on the command line\)$"):
        copier.check_augment(3)


@pytest.mark.parametrize("text", ["cccc", "C1=CC=CC=C1Cl", "CCN(CC)CC"])  # aromatic atoms are no word
def test_a_smiles_is_not_taken_for_a_name(copier, text):
    try:
        copier.prepare(text)
    except ValueError as exc:
        assert "name" not in str(exc)


def test_a_hydride_written_as_one_species_is_refused_with_the_ions_the_model_reads(forward):
    """LiAlH4 as PubChem writes it, [Li+].[AlH4-], holds a token the vocabulary lacks; the refusal offers
    the ions USPTO writes (chem.ION_WRITINGS), and the model reads that query."""
    result = forward.predict("CCOC(=O)c1ccccc1.[Li+].[AlH4-].C1CCOC1")
    assert not result.ok and "'[AlH4-]' is not in the model's vocabulary" in result.error
    assert result.suggestion == "CCOC(=O)c1ccccc1.[Li+].[Al+3].[H-].[H-].[H-].[H-].C1CCOC1"
    assert result.suggestion in result.error
    assert forward.predict(result.suggestion).predictions[0].smiles == "OCc1ccccc1"  # the ester reduced


def test_an_isotope_label_the_model_cannot_read_is_refused_with_the_unlabelled_query(forward):
    """[13CH3]C(=O)Cl was refused for its token with nothing to do instead; the unlabelled query, which the model
    reads, is named, with what it cannot tell, and given apart (unlabelled), not as the suggestion (the same molecules
    written otherwise, which ion_writing reads): its answers are the unlabelled query's."""
    result = forward.predict("[13CH3]C(=O)Cl.NCc1ccccc1")
    assert result.error.startswith("token '[13CH3]' (an atom with an isotope label) is not in the model's vocabulary")
    assert ("Without its isotope labels the query is CC(=O)Cl.NCc1ccccc1, which this model can read; its answers "
            "will not say where a label goes") in result.error and result.suggestion == ""
    assert result.unlabelled == "CC(=O)Cl.NCc1ccccc1" and forward.predict(result.unlabelled).ok
    refused = forward.predict("CC(=O)Cl.[Og]")
    assert "isotope" not in refused.error and refused.unlabelled == ""  # no label, no hint


def test_ion_writing_reads_the_hydride_as_the_ions_and_keeps_the_query_as_given(forward):
    query = "CCOC(=O)c1ccccc1.[Li+].[AlH4-].C1CCOC1"
    result = forward.predict(query, ion_writing=True)
    assert result.ok and result.query == query and result.suggestion == ""
    assert result.canonical_query == "C1CCOC1.CCOC(=O)c1ccccc1.[Al+3].[H-].[H-].[H-].[H-].[Li+]"
    offered = forward.predict(forward.predict(query).suggestion)
    assert [p.tokens for p in result.predictions] == [p.tokens for p in offered.predictions]
    assert not forward.predict("CC.[Ir]", ion_writing=True).ok  # a token with no ion writing stays refused


# 54 common reagents as PubChem writes them (chem.ION_WRITINGS's comment and the forward card count them).
COMMON_REAGENTS = {
    "TBAF": "CCCC[N+](CCCC)(CCCC)CCCC.[F-]",
    "NaBH3CN": "[BH3-]C#N.[Na+]",
    "DIBAL-H": "CC(C)C[AlH]CC(C)C",
    "L-Selectride": "[Li+].CCC(C)[BH-](C(C)CC)C(C)CC",
    "LDA": "CC(C)[N-]C(C)C.[Li+]",
    "LiHMDS": "C[Si](C)(C)[N-][Si](C)(C)C.[Li+]",
    "n-BuLi (ionic)": "[Li+].CCC[CH2-]",
    "n-BuLi": "[Li]CCCC",
    "t-BuLi": "[Li+].C[C-](C)C",
    "MeLi (ionic)": "[Li+].[CH3-]",
    "MeLi": "C[Li]",
    "MeMgBr": "C[Mg]Br",
    "Pd(OAc)2": "CC(=O)[O-].CC(=O)[O-].[Pd+2]",
    "Pd/C": "[Pd]",
    "PtO2": "O=[Pt]=O",
    "KMnO4": "[O-][Mn](=O)(=O)=O.[K+]",
    "OsO4": "O=[Os](=O)(=O)=O",
    "CrO3": "O=[Cr](=O)=O",
    "PCC": "c1cc[nH+]cc1.[O-][Cr](=O)(=O)Cl",
    "mCPBA": "O=C(OO)c1cccc(Cl)c1",
    "NBS": "O=C1CCC(=O)N1Br",
    "DMAP": "CN(C)c1ccncc1",
    "DCC": "C1CCC(N=C=NC2CCCCC2)CC1",
    "TMSCl": "C[Si](C)(C)Cl",
    "TBSCl": "CC(C)(C)[Si](C)(C)Cl",
    "Tf2O": "O=S(=O)(OS(=O)(=O)C(F)(F)F)C(F)(F)F",
    "NaH (ionic)": "[H-].[Na+]",
    "NaH": "[NaH]",
    "LiAlH4": "[Li+].[AlH4-]",
    "NaBH4": "[Na+].[BH4-]",
    "LiBH4": "[Li+].[BH4-]",
    "CuI": "[Cu]I",
    "Zn": "[Zn]",
    "Fe": "[Fe]",
    "SnCl2": "Cl[Sn]Cl",
    "Cs2CO3": "O=C([O-])[O-].[Cs+].[Cs+]",
    "K3PO4": "[O-]P(=O)([O-])[O-].[K+].[K+].[K+]",
    "KOtBu": "CC(C)(C)[O-].[K+]",
    "BBr3": "BrB(Br)Br",
    "BH3-THF": "B.C1CCOC1",
    "NaN3": "[N-]=[N+]=[N-].[Na+]",
    "AgNO3": "[Ag+].[O-][N+](=O)[O-]",
    "TiCl4": "Cl[Ti](Cl)(Cl)Cl",
    "AlCl3": "Cl[Al](Cl)Cl",
    "CAN": ("[NH4+].[NH4+].[Ce+4].[O-][N+](=O)[O-]."
            "[O-][N+](=O)[O-].[O-][N+](=O)[O-].[O-][N+](=O)[O-].[O-][N+](=O)[O-].[O-][N+](=O)[O-]"),
    "CaH2": "[CaH2]",
    "KH": "[KH]",
    "Raney Ni": "[Ni]",
    "Grubbs II": "CC1=CC(C)=C(N2CCN(C3=C(C)C=C(C)C=C3C)C2=[Ru](Cl)(Cl)=CC2=CC=CC=C2)C(C)=C1",
    "Pd(PPh3)4 (PubChem)": "c1ccc(P(c2ccccc2)c2ccccc2)cc1.[Pd]",
    "Pd2(dba)3": "O=C(C=Cc1ccccc1)C=Cc1ccccc1.[Pd]",
    "HATU": "CN(C)C(On1nnc2cccnc21)=[N+](C)C.F[P-](F)(F)(F)(F)F",
    "EDC": "CCN=C=NCCCN(C)C",
    "TFA": "O=C(O)C(F)(F)F",
}


def test_the_forward_model_reads_common_reagents_or_offers_their_ion_writing(forward):
    refused, offered = [], []
    for name, reagent in COMMON_REAGENTS.items():
        try:
            forward.prepare("CCO." + reagent)
        except ValueError as exc:
            (offered if getattr(exc, "suggestion", "") else refused).append(name)
    assert len(COMMON_REAGENTS) == 54
    assert sorted(offered) == ["CaH2", "LiAlH4", "NaH"]  # hydrides in one species: the ions are offered
    assert sorted(refused) == ["CAN", "MeLi (ionic)"]  # [Ce+4], [CH3-]: no rewriting of one molecule mends them


def test_a_salt_drawn_with_its_bond_is_read_as_the_ions_the_model_learned(forward):
    """Potassium carbonate drawn with its bonds (ChemDraw's O=C(O[K])O[K]) reached the model so: a benzyl ester of a
    carboxylated phenol came first for phenol and benzyl bromide, where the ions gave benzyl phenyl ether."""
    drawn = forward.prepare("Oc1ccccc1.BrCc1ccccc1.O=C(O[K])O[K]")
    assert drawn.canonical == "BrCc1ccccc1.O=C([O-])[O-].Oc1ccccc1.[K+].[K+]"
    assert drawn.ids == forward.prepare("Oc1ccccc1.BrCc1ccccc1.O=C([O-])[O-].[K+].[K+]").ids


@pytest.mark.parametrize("query", ["CC(=O)c1ccccc1.[Ir]", "CCO.[Na+].[H-]"])
def test_no_suggestion_where_no_ion_writing_applies(forward, query):
    result = forward.predict(query)
    assert result.suggestion == ""
    assert result.ok == (query == "CCO.[Na+].[H-]")


def test_no_suggestion_where_the_model_cannot_read_the_ions_either(copier):
    result = copier.predict("[NaH]")  # the copy model has neither [H-] nor [Na+]
    assert not result.ok and "'[NaH]' is not in the model's vocabulary" in result.error
    assert result.suggestion == "" and "as ions" not in result.error and "[H-]" not in result.error


def test_a_list_keeps_good_rows_beside_bad_ones(copier):
    results = copier.predict(["CCO", "xyz", "", "c1ccccc1N", "CC[Na]"], batch_size=2)
    assert [r.ok for r in results] == [True, False, False, True, False]
    assert results[3].canonical_query == "Nc1ccccc1"
    assert all(r.predictions for r in results if r.ok)


def test_batches_hold_queries_of_like_length_and_results_keep_the_input_order(copier, monkeypatch):
    """A batch pays for padding to its longest source and runs until its longest answer ends, so predict
    cuts batches from the queries in order of token count (README "Batches on a CPU": at batch 32, 1.1-1.9x
    less time a query than batches in file order); every answer still lands on its own query, and equals
    its answer decoded alone."""
    queries = ["CCOc1ccccc1OCCO", "CO", "NC(=O)c1ccncc1", "xyz", "CCN", "OCCN1CCNCC1", "CCO", "Brc1cccnc1OCCOC"]
    batches: list[list[int]] = []
    decode = Predictor.decode

    def recorded(self, sources, *args, **kwargs):
        batches.append([len(s) for s in sources])
        return decode(self, sources, *args, **kwargs)

    alone = [copier.predict(q, method="beam", n_best=2) for q in queries]
    monkeypatch.setattr(Predictor, "decode", recorded)
    results = copier.predict(queries, method="beam", n_best=2, batch_size=3)
    assert batches == [[2, 3, 3], [11, 14, 14], [15]]  # the 7 good queries' token counts, in order
    assert [r.query for r in results] == queries and not results[3].ok
    assert [[p.smiles for p in r.predictions] for r in results] == [[p.smiles for p in r.predictions] for r in alone]


def test_wrong_options_raise(copier):
    with pytest.raises(ValueError, match="unknown method"):
        copier.predict("CCO", method="magic")
    with pytest.raises(ValueError, match="greedy returns one prediction; for 3 use beam"):
        copier.predict("CCO", method="greedy", n_best=3)


@pytest.mark.parametrize(("method", "said"), [
    ("greedy", "(name it as the method; greedy is the method taken where none is named)"),
    ("spec-lookup", "(name it as the method)"),
])
def test_a_one_answer_method_asked_for_several_is_told_how_to_change_it(copier, method, said):
    """Asked for 5 answers with greedy only by default, a user read "greedy returns one prediction; for 5 use beam"
    and was not told that the method is the option to set; the list also offered beam-uncached, a timing baseline.
    Worded for every front end, the option as each names it (--method, method=, "method")."""
    with pytest.raises(ValueError) as refused:
        copier.predict("CCO", method=method, n_best=5)
    several = ", ".join(m for m, row in METHODS.items() if row.many and not row.benchmark_only)
    assert str(refused.value) == f"{method} returns one prediction; for 5 use beam or another method that returns " \
                                 f"several: {several} {said}"
    assert "beam-uncached" not in str(refused.value)


@pytest.mark.parametrize("options, message", [
    ({"method": "beam", "n_best": 1.5}, "n_best must be a whole number, not 1.5"),
    ({"method": "beam", "n_best": True}, "n_best must be a whole number, not True"),
    ({"batch_size": 2.5}, "batch_size must be a whole number, not 2.5"),
    ({"batch_size": 0}, "batch_size must be 1 or more, not 0"),
    ({"draft_len": 2.5}, "draft_len must be a whole number"),
    ({"n_drafts": 1.5}, "n_drafts must be a whole number"),
    ({"augment": 2.5}, "augment must be a whole number, not 2.5"),
    ({"augment": 25}, "augment must be between 1 and 20, not 25"),  # the number given was not said
    ({"time_limit_s": "5"}, "time_limit_s must be a number of seconds (or None for no limit), not '5'")])
def test_options_of_the_wrong_type_raise_a_clear_value_error(copier, options, message):
    """They reached torch (repeat_interleave's TypeError), or ran: batch_size 0 as 1, augment 2.5 with a
    calibration 'augment2.5' looked for."""
    with pytest.raises(ValueError, match=re.escape(message)):
        copier.predict("CCO", **options)


@pytest.mark.parametrize("query, kind", [(None, "NoneType"), (123, "int"), (b"CCO", "bytes")])
def test_one_query_that_is_not_text_comes_back_as_an_error(copier, query, kind):
    """None and 123 raised TypeError from list(); b"CCO" was read as a list of three queries (its bytes)."""
    result = copier.predict(query)
    assert isinstance(result, QueryResult) and result.error == f"a query must be text, got {kind}"


@needs_native
def test_the_uncached_baselines_are_refused_in_int8():
    """Their decoder calls ran in torch float32 while the result said int8 (only the encoder was int8)."""
    int8 = Predictor.load(FORWARD_MODEL, dtype="int8")
    for method in ("greedy-uncached", "beam-uncached"):
        for queries in ("CCO", [], ["xyz"]):  # refused before any query is read, as other wrong options are
            with pytest.raises(ValueError, match=f"{method} is the uncached baseline: .* cannot compute in int8"):
                int8.predict(queries, method=method)


def test_a_method_the_model_cannot_decode_is_refused_before_any_query_is_read(copier):
    """spec-sample-draft without a draft model was refused only once a query decoded: a list of unreadable queries
    came back as their errors, and `molspec predict --ray`'s check, predict([]), passed, each worker then failing."""
    for queries in ("CCO", [], ["xyz", ""]):
        with pytest.raises(ValueError, match=r"copy_model has no draft model \(a draft/ folder\): use spec-sample"):
            copier.predict(queries, method="spec-sample-draft", n_best=2)


def test_every_greedy_method_gives_the_same_prediction(copier):
    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO"]
    reference = [r.predictions[0].tokens for r in copier.predict(queries, method="greedy")]
    for method in GREEDY_METHODS:
        got = [r.predictions[0].tokens for r in copier.predict(queries, method=method)]
        assert got == reference, method


def test_beam_returns_n_best_ranked_with_probabilities(copier):
    result = copier.predict("CCOc1ccccc1", method="beam", n_best=3)
    assert [p.rank for p in result.predictions] == [1, 2, 3]
    by_model = sorted(result.predictions, key=lambda p: p.model_rank)
    assert [p.model_rank for p in by_model] == [1, 2, 3]
    scores = [p.score for p in by_model]
    assert scores == sorted(scores, reverse=True)
    assert all(0 < p.probability <= 1 for p in result.predictions)


def test_an_answer_that_repeats_the_query_is_flagged(copier):
    """The copy model's best answer to benzene is benzene: valid, but not a sane answer."""
    echo = copier.predict("c1ccccc1", method="beam", n_best=5).predictions[0]
    assert echo.smiles == "c1ccccc1" and echo.valid and not echo.sane
    assert echo.concerns == ("same as the query",)


def test_ranking_puts_sane_answers_first_and_keeps_model_order_within_groups():
    def answer(model_rank, valid, concerns=()):
        return Prediction(model_rank, f"C{model_rank}", -float(model_rank), valid, (), (), True, concerns, model_rank)

    given = [answer(1, True, ("same as the query",)), answer(2, False), answer(3, True), answer(4, True),
             answer(5, True, ("an O-O-O chain",))]
    ranked = rank_answers(given)
    assert [p.model_rank for p in ranked] == [3, 4, 1, 5, 2]
    assert [p.rank for p in ranked] == [1, 2, 3, 4, 5]


def test_an_answer_the_beam_spells_twice_is_listed_once_in_its_first_place(copier):
    # A beam can hold the same molecules in two strings (the shipped forward model: 21 of 60 USPTO-MIT test
    # queries had one in their top 5); a chemist should not read one product as ranks 1 and 2.
    query = copier.prepare("OCCN")
    beam = decoded_answers(copier, ("CCO", 0.5), ("CCN", 0.3), ("OCC", 0.1), ("NCC", 0.05), ("ClCC", 0.01))
    result = copier._to_result("OCCN", query, beam, "beam", 5)
    assert [p.smiles for p in result.predictions] == ["CCO", "CCN", "CCCl"]
    assert [p.model_rank for p in result.predictions] == [1, 2, 5]  # places in the beam
    assert [p.rank for p in result.predictions] == [1, 2, 3]
    assert [p.spellings for p in result.predictions] == [2, 2, 1]
    assert [p.score for p in result.predictions] == pytest.approx([math.log(0.5), math.log(0.3), math.log(0.01)])
    assert [p.tokens for p in result.predictions][:2] == [("C", "C", "O"), ("C", "C", "N")]  # the first spelling's
    rows = result_rows(1, (), result)
    assert [r[RESULT_COLUMNS.index("spellings")] for r in rows] == [2, 2, 1]


class _Answers:
    """A stand-in predictor that gives every query the same result."""

    def __init__(self, result):
        self.result = result

    def predict(self, queries, **_options):
        return [self.result] * len(queries)


def test_evaluate_counts_the_beams_places_in_model_order_and_the_listed_ones_in_the_apps(copier):
    # In the model's order top-k stays the papers' (places in the beam, repeats included); the app's order
    # counts the distinct answers it lists.
    beam = decoded_answers(copier, ("CCO", 0.5), ("OCC", 0.3), ("CCN", 0.1), ("NCC", 0.05), ("ClCC", 0.01))
    result = copier._to_result("OCCN", copier.prepare("OCCN"), beam, "beam", 5)
    found = evaluate(_Answers(result), ["OCCN"] * 3, ["ClCC", "NCC", "OCC"], n_best=5, progress=False)
    assert [found[f"top{k}"] for k in range(1, 6)] == pytest.approx([1 / 3, 1 / 3, 2 / 3, 2 / 3, 1])
    assert [found[f"ranked_top{k}"] for k in range(1, 6)] == pytest.approx([1 / 3, 2 / 3, 1, 1, 1])
    assert found["repeated_rate"] == 1
    # each query's first right place, per order: what `compare` tests query by query
    assert found["first_right"] == {"model_order": [5, 3, 1], "app_order": [3, 2, 1]}
    once = copier._to_result("OCCN", copier.prepare("OCCN"), decoded_answers(copier, ("CCO", 0.5), ("CCN", 0.3)),
                             "beam", 2)
    assert evaluate(_Answers(once), ["OCCN"], ["CCO"], n_best=2, progress=False)["repeated_rate"] == 0


def test_provenance_and_stats_are_reported(copier):
    result = copier.predict("NCCOc1ccccc1OCCN", method="spec-pointer")
    best = result.predictions[0]
    assert len(best.provenance) == len(best.tokens)
    copied = [i for i in best.provenance if i >= 0]
    assert copied and all(result.source_tokens[i] == best.tokens[k] for k, i in enumerate(best.provenance) if i >= 0)
    assert result.stats.model_calls < len(best.tokens)
    assert result.stats.draft_tokens_accepted == len(copied)


def test_each_query_of_a_batch_holds_its_share_of_the_batchs_time(copier, monkeypatch):
    """Greedy and beam search give every query of a batch the whole batch's time: a list's wall_time_s added up to
    several times the call's, and over HTTP each query's time_ms (the CSV's "share of its batch") was the batch's."""
    def decode(self, sources, *args):  # each row told the batch's time, 100 s, as those decoders tell it
        return [decoded_answers(self, ("CO", 0.5), seconds=100.0) for _ in sources]

    monkeypatch.setattr(Predictor, "decode", decode)
    started = time.perf_counter()
    results = copier.predict(["CCO", "xyz", "CCN", "CCCO"], batch_size=3)
    elapsed = time.perf_counter() - started
    times = [r.stats.wall_time_s for r in results if r.ok]
    assert len(times) == 3 and len(set(times)) == 1 and sum(times) <= elapsed
    assert copier.predict("CCO").stats.wall_time_s == 100.0  # alone in its batch: its own time, as measured


def test_concurrent_calls_match_serial(copier):
    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO", "C=CC(=O)OCC"] * 2
    serial = [r.predictions[0].smiles for r in copier.predict(queries, method="spec-pointer", batch_size=1)]
    answers: dict[int, list[str]] = {}

    def work(k: int) -> None:
        method = ("greedy", "spec-pointer", "spec-lookup", "spec-paper")[k % 4]
        answers[k] = [r.predictions[0].smiles for r in copier.predict(queries, method=method, batch_size=1 + k % 3)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(answers[k] == serial for k in range(8))


def test_missing_or_unsafe_model_folders_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        Predictor.load(tmp_path / "nope")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "weights.pt").write_bytes(b"not really a pickle")
    with pytest.raises(CheckpointError, match="pickle"):
        Predictor.load(tmp_path)


def test_forward_model_predicts_a_textbook_amide_coupling(forward):
    result = forward.predict("CC(=O)Cl.NCc1ccccc1", method="spec-auto")
    assert result.ok and result.predictions[0].valid
    assert result.stats.draft_tokens_accepted > 0
    assert result.predictions[0].tokens == forward.predict("CC(=O)Cl.NCc1ccccc1").predictions[0].tokens


def test_forward_model_accepts_reactants_reagents_arrow_form(forward):
    a = forward.predict("CC(=O)Cl.NCc1ccccc1>CCN(CC)CC>")
    b = forward.predict("CC(=O)Cl.CCN(CC)CC.NCc1ccccc1")
    assert a.ok and a.canonical_query == b.canonical_query


def test_sampling_methods_through_the_service(copier):
    from molspec_core.decoding.sampling import SamplingOptions

    for method in ("sample", "spec-sample", "mentored"):  # relaxed returns one answer: see test_methods.py
        delta = 0.1 if method == "mentored" else 0.0  # the one of them that reads it (the others refuse it)
        result = copier.predict("CCOc1ccccc1N", method=method, n_best=3,
                                sampling=SamplingOptions(temperature=1.5, delta=delta))
        assert result.ok and 1 <= len(result.predictions) <= 3
        assert len({p.smiles for p in result.predictions}) == len(result.predictions)
    with pytest.raises(ValueError, match="no draft model"):
        copier.predict("CCO", method="spec-sample-draft")


def test_time_limit_fails_only_the_slow_query(copier, monkeypatch):
    """A query whose decoding outlasts the per-query limit gets an error row; its batch-mates keep
    their predictions. The slow query is made slow by an encoder that sleeps when it sees nitrogen."""
    import time

    slow_id = copier.vocab.encode("N")[0]
    real_encode = copier.model.encode

    def encode(src):
        if (src == slow_id).any():  # 0.7 s: past the batch's 3 x 0.2 s, and past 0.2 s alone
            time.sleep(0.7)
            from molspec_core.limits import check_deadline
            check_deadline()
        return real_encode(src)

    unlimited = copier.predict(["CCO", "CCCC"], method="spec-lookup", time_limit_s=None)
    monkeypatch.setattr(copier.model, "encode", encode)
    results = copier.predict(["CCO", "CCN", "CCCC"], method="spec-lookup", time_limit_s=0.2)
    assert [r.ok for r in results] == [True, False, True]
    assert "time limit" in results[1].error and results[1].canonical_query == "CCN"
    tokens = [[p.tokens for p in r.predictions] for r in (results[0], results[2])]
    assert tokens == [[p.tokens for p in r.predictions] for r in unlimited]  # scores differ by padding rounding


@pytest.fixture(name="decoder_clock")
def copier_decoder_clock(copier, monkeypatch):
    """conftest.decoder_clock on the copy model's decoder."""
    return decoder_clock(copier.model, monkeypatch)


SLOW = "NCCOCCNCCOCCNCCOCCNCCO"  # the copy model's beam (NONOON, ...) takes 8 steps


def test_a_beam_stopped_by_the_time_limit_keeps_what_it_found_and_its_calls(copier, decoder_clock):
    """A beam search past its limit gave an error row with no answers and 0 model calls: the route planner counted
    none of the calls it paid for, and an API caller lost the beam. The row keeps its error and now also the best
    unfinished answers, marked as stopped at the time limit, and the calls made."""
    result = copier.predict(SLOW, method="beam", n_best=3, time_limit_s=4.5)
    assert not result.ok and "time limit" in result.error
    assert result.stats.model_calls == 4  # the fifth call found the limit passed
    # Two live hypotheses of 4 tokens, marked, and one the model had ended (an empty answer: it is a small model)
    assert [(p.smiles, p.finished, p.concerns) for p in result.predictions] == [
        ("NOON", False, (TIMED_OUT,)), ("NNON", False, (TIMED_OUT,)), ("", True, ())]


@pytest.mark.parametrize("method", ["greedy", "spec-lookup", "spec-paper"])
def test_a_greedy_query_stopped_by_the_time_limit_keeps_its_calls(copier, decoder_clock, method):
    """A greedy query (or a speculative one) stopped at its time limit said 0 model calls, where a stopped beam's row
    counts its calls: a user reading a stopped batch's calls and speedup was told wrong counts. The row keeps the
    calls made (and no answer: greedy's answer cut short is none)."""
    result = copier.predict(SLOW, method=method, time_limit_s=2.5)
    assert not result.ok and "time limit" in result.error
    assert result.predictions == () and result.stats.model_calls == 2  # the third call found the limit passed


def test_a_query_the_time_limit_stopped_is_told_from_one_refused(copier, decoder_clock):
    """QueryResult.timed_out, the one rule evaluate, calibrate, `molspec predict`'s counts (io.Outcomes) and the Batch
    page tell a slow query from one the model would not take by, with answers found or none."""
    from molspec_core.io import Outcomes, result_rows

    greedy = copier.predict(SLOW, method="greedy", time_limit_s=2.5)
    beam = copier.predict(SLOW, method="beam", n_best=2, time_limit_s=2.5)
    refused, answered = copier.predict(["xyz", "CCO"])
    assert [r.timed_out for r in (greedy, beam, refused, answered)] == [True, True, False, False]
    outcomes = Outcomes()
    for number, result in enumerate((greedy, beam, refused, answered), start=1):
        outcomes.count(result_rows(number, (), result)[0])
    assert (outcomes.unanswered, outcomes.stopped, outcomes.rejected) == (1, 1, 1)


def test_the_uncached_greedy_baseline_stopped_by_the_time_limit_keeps_its_calls(copier, monkeypatch):
    """greedy-uncached, greedy's benchmark baseline (its calls recompute every prefix: decode_full), said 0 calls
    when stopped, as greedy did; it keeps them too, and a batch-mate that had ended keeps its answer."""
    from molspec_core import limits

    clock = {"seconds": 0.0}
    real = copier.model.decode_full

    def decode_full(*args, **kwargs):
        clock["seconds"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(copier.model, "decode_full", decode_full)
    monkeypatch.setattr(limits, "now", lambda: clock["seconds"])
    done, stopped = copier.predict(["CCO", SLOW], method="greedy-uncached", time_limit_s=2.5)
    assert clock["seconds"] == 6 and done.ok and done.stats.model_calls == 3  # no retry
    assert not stopped.ok and stopped.predictions == () and stopped.stats.model_calls == 5


@pytest.mark.parametrize("method", ["greedy", "spec-lookup"])
def test_a_greedy_batch_past_its_limit_keeps_the_queries_that_ended(copier, decoder_clock, method):
    """A greedy batch past its limit was decoded again one query at a time: CCO, which had ended in the batch, was
    decoded twice, and the slow query, which had not ended in the batch's time, was stopped again alone, the batch
    taking twice its limit, with 0 calls. Each query now keeps what the batch found, as a beam search batch does."""
    unlimited = copier.predict("CCO", method=method, time_limit_s=None)
    decoder_clock["seconds"] = 0.0
    done, stopped = copier.predict(["CCO", SLOW], method=method, time_limit_s=2.5)
    assert decoder_clock["seconds"] == 6  # the batch's 5 calls and the one that found its 5 s passed; no retry
    assert done.ok and done.stats.model_calls == 3  # its tokens alone: scores differ by padding rounding
    assert [p.tokens for p in done.predictions] == [p.tokens for p in unlimited.predictions]
    assert not stopped.ok and "time limit" in stopped.error
    assert stopped.predictions == () and stopped.stats.model_calls == 5


@pytest.mark.parametrize(("method", "n_best", "advice"), [
    ("greedy", 1, "try a longer time limit"),  # it said "try greedy or a smaller n_best" to greedy at n_best 1
    ("spec-lookup", 1, "try a longer time limit"),
    ("beam", 3, "try greedy, a smaller n_best or a longer time limit"),
    ("beam", 1, "try greedy or a longer time limit"),
])
def test_a_query_past_its_time_limit_is_told_what_would_fit_its_method(copier, decoder_clock, method, n_best, advice):
    """The error of a query past its time limit offered greedy and a smaller n_best to a greedy run, whatever it
    ran with, and never a longer time limit, the one way left to a greedy query."""
    result = copier.predict(SLOW, method=method, n_best=n_best, time_limit_s=2)
    assert result.error == f"stopped after the 2 s time limit per query; {advice}"


def test_a_time_limit_at_its_most_is_not_told_to_grow():
    """A longer limit than the most there is cannot be given; with nothing else left the message says only why."""
    assert stopped_message(MAX_TIME_LIMIT_S) == f"stopped after the {MAX_TIME_LIMIT_S:g} s time limit per query"
    assert stopped_message(5, writings=4, method="sample", n_best=2) == (
        "stopped after the 5 s time limit per query (its 4 writings together); try greedy, a smaller n_best, fewer "
        "writings or a longer time limit")


def test_a_query_stopped_after_one_writing_read_whole_says_the_first_of_them():
    """'its answers pooled from the first 1 of them' (a query read in 3 writings, stopped in its second)."""
    assert stopped_message(5, writings=3, method="sample", n_best=2, read=1).startswith(
        "stopped after the 5 s time limit per query (its 3 writings together), its answers pooled from the first of "
        "them, read whole by then; try greedy")
    assert ", its answers pooled from the first 2 of them, read" in stopped_message(5, 3, "sample", 2, read=2)


def test_a_beam_stopped_at_its_first_call_has_no_empty_answer(copier, decoder_clock):
    """Stopped at its first decoder call, the search handed on its live slot holding bos alone, which the row
    listed as an invalid empty answer. The row has its error and no answers now."""
    result = copier.predict(SLOW, method="beam", n_best=3, time_limit_s=0.5)
    assert not result.ok and "time limit" in result.error
    assert result.predictions == () and result.stats.model_calls == 0


def test_a_batch_past_its_limit_keeps_the_searches_that_ended(copier, decoder_clock):
    """A beam search batch past its limit (per query x queries) was decoded again one query at a time, the ones
    whose search had ended included, and the slow one, which had not ended in the batch's time, was stopped again
    alone: the batch took up to twice its limit (a route planner's expansion ran past its search's limit) and lost
    the search it had. Each query now keeps what the batch found."""
    unlimited = copier.predict("CCO", method="beam", n_best=3, time_limit_s=None)
    decoder_clock["seconds"] = 0.0
    done, stopped = copier.predict(["CCO", SLOW], method="beam", n_best=3, time_limit_s=2.5)
    assert decoder_clock["seconds"] == 6  # the batch's 5 calls and the one that found its 5 s passed; no retry
    assert done.ok and [p.tokens for p in done.predictions] == [p.tokens for p in unlimited.predictions]
    assert not stopped.ok and "time limit" in stopped.error
    assert stopped.stats.model_calls == 5 and [p.finished for p in stopped.predictions] == [False, False, True]


@pytest.mark.parametrize("method", ["sample", "spec-sample"])
def test_a_sampling_batch_stopped_by_the_time_limit_decodes_again_only_the_queries_not_ended(copier, decoder_clock,
                                                                                              method):
    """A sampling method draws a batch's queries one after another. Stopped at all, it said nothing, and every query
    was decoded again alone, the ended ones included: CCO, whose 9 calls fit the batch's time but not its own limit
    alone, then ended stopped too. The ended queries keep their samples now; only the others are decoded again."""
    options = SamplingOptions(seed=1)
    unlimited = copier.predict("CCO", method=method, n_best=3, sampling=options, time_limit_s=None)
    decoder_clock["seconds"] = 0.0
    done, *stopped = copier.predict(["CCO", SLOW, SLOW + "CC"], method=method, n_best=3, sampling=options,
                                    time_limit_s=4)
    assert unlimited.stats.model_calls == 9 and done.stats.model_calls == 9
    # CCO's 9 calls, SLOW's 3 and the one past the batch's 12 s; then SLOW alone (4 s: 4 calls and the one that
    # finds them passed), then SLOW + "CC" alone (the same); CCO is not decoded again
    assert decoder_clock["seconds"] == 13 + 5 + 5
    assert done.ok and done.predictions == unlimited.predictions
    assert all(not r.ok and "time limit" in r.error for r in stopped)


@pytest.mark.parametrize("method", ["sample", "spec-sample"])
def test_a_query_stopped_in_a_batch_before_its_last_counts_the_calls_made_before_the_cut(copier, decoder_clock,
                                                                                          method):
    """A sampling batch, drawn query by query, stopped in a query before its last, hands that query on with the
    calls it made; they were dropped, and its row counted only those of its decode again alone. The row counts
    both now: the calls paid for, as a stopped beam's row counts its search's."""
    options = SamplingOptions(seed=1)
    decoder_clock["seconds"] = 0.0
    stopped, after = copier.predict([SLOW, SLOW + "CC"], method=method, n_best=3, sampling=options, time_limit_s=4)
    assert not stopped.ok and "time limit" in stopped.error
    # the batch's 8 s: SLOW's 8 calls and the one that found them passed; then SLOW alone (4 s: 4 calls and the one
    # that found them passed); then SLOW + "CC" alone, the same. The call that found the time passed is not counted.
    assert decoder_clock["seconds"] == 9 + 5 + 5
    assert stopped.stats.model_calls == 8 + 4
    assert not after.ok and after.stats.model_calls == 4


@pytest.mark.parametrize(("method", "delta"), [("sample", 0.0), ("spec-sample", 0.0), ("mentored", 0.1)])
def test_a_sampling_query_stopped_by_the_time_limit_keeps_the_samples_it_had_drawn(copier, decoder_clock, method,
                                                                                    delta):
    """A sampling query stopped alone at its time limit threw away the samples it had drawn: `molspec predict
    --method sample --n-best 5 --time-limit 0.001` gave error-only rows. Each sample drawn is whole and a true one,
    so the row keeps them beside its error (stopped with answers), as a beam search's row keeps its search."""
    options = SamplingOptions(seed=1, temperature=1.5, delta=delta)
    two = copier.predict("CCO", method=method, n_best=2, sampling=options, time_limit_s=None)
    # past the two samples' calls by half a call: the third sample is stopped at its first call
    stopped = copier.predict("CCO", method=method, n_best=3, sampling=options,
                             time_limit_s=two.stats.model_calls + 0.5)
    assert stopped.error.startswith("stopped after the") and stopped.stopped_with_answers
    assert stopped.predictions == two.predictions and stopped.stats.model_calls == two.stats.model_calls
    # Stopped in a batch's last query (the batch's limit: its queries' together), the ones before it are whole
    one = copier.predict("CCCO", method=method, n_best=1, sampling=options, time_limit_s=None)
    done, last = copier.predict(["CCO", "CCCO"], method=method, n_best=2, sampling=options,
                                time_limit_s=(two.stats.model_calls + one.stats.model_calls + 0.5) / 2)
    assert done.ok and done.predictions == two.predictions
    assert last.stopped_with_answers and last.predictions == one.predictions


@pytest.mark.parametrize("augment", [3, 4])
@pytest.mark.parametrize("method", ["sbs", "sbs-exact", "sample"])
def test_a_query_read_in_several_writings_stopped_in_a_later_one_keeps_those_read(monkeypatch, method, augment):
    """Read in 4 writings with sbs or sampling, which decode them one after another, a query stopped in its third
    writing gave an error-only row, losing the two writings read whole. The row keeps their answers now, pooled as
    reading 2 writings pools them, and its error says so. Stopped in its last writing (of 3) before that gave any
    answer, the empty writing was pooled with the others, lowering every score: it is left out now."""
    reader = Predictor.load(FIXTURES / "copy_model", device="cpu")
    reader.config = {**reader.config, "data_stats": {"augment": 20}}  # as if trained on many writings
    decoder_clock(reader.model, monkeypatch)
    options = SamplingOptions(seed=3, temperature=1.5) if method == "sample" else None
    query = "OCCOc1ccccc1"
    two = reader.predict(query, method=method, n_best=2, sampling=options, augment=2, time_limit_s=None)
    limit = two.stats.model_calls + 0.5  # the third writing's first call is past it
    stopped = reader.predict(query, method=method, n_best=2, sampling=options, augment=augment, time_limit_s=limit)
    assert stopped.error.startswith(f"stopped after the {limit:g} s time limit per query (its {augment} writings "
                                    "together), its answers pooled from the first 2 of them, read whole by then; try ")
    assert stopped.stopped_with_answers and stopped.predictions == two.predictions
    assert stopped.stats.model_calls == two.stats.model_calls
    assert (two.writings, stopped.writings) == (2, 2)  # the app's "given for 1 of the 4 writings the model read"


@pytest.mark.parametrize("augment", [3, 4])
@pytest.mark.parametrize("method", ["sample", "spec-sample"])
def test_a_query_read_in_several_writings_stopped_counts_the_calls_of_the_writing_left_out(monkeypatch, method,
                                                                                           augment):
    """Sampling a query in 4 writings, stopped in its third, left that writing out (not read whole) and its model
    calls uncounted: the row said fewer calls than were made. Stopped in the last of 3, they were counted."""
    reader = Predictor.load(FIXTURES / "copy_model", device="cpu")
    reader.config = {**reader.config, "data_stats": {"augment": 20}}  # as if trained on many writings
    decoder_clock(reader.model, monkeypatch)
    options = SamplingOptions(seed=3, temperature=1.5)
    query = "OCCOc1ccccc1"
    two = reader.predict(query, method=method, n_best=2, sampling=options, augment=2, time_limit_s=None)
    limit = two.stats.model_calls + 1.5  # the third writing makes one call and is stopped at its second
    stopped = reader.predict(query, method=method, n_best=2, sampling=options, augment=augment, time_limit_s=limit)
    assert stopped.stopped_with_answers and stopped.predictions == two.predictions and stopped.writings == 2
    assert stopped.stats.model_calls == two.stats.model_calls + 1


def test_a_greedy_query_read_in_several_writings_stopped_keeps_the_leading_ones_read_whole(monkeypatch):
    """Greedy reads a query's writings as one batch. Stopped at the time limit, the row had its error alone and 0
    model calls, though its first writing had ended. It keeps that writing's answer now, pooled as reading one writing
    pools it, and counts every call made; the writings stopped give no answer (greedy's answer cut short is none)."""
    reader = Predictor.load(FIXTURES / "copy_model", device="cpu")
    reader.config = {**reader.config, "data_stats": {"augment": 20}}  # as if trained on many writings
    clock = decoder_clock(reader.model, monkeypatch)
    query = "OCCOc1ccccc1"  # its canonical writing ends in 11 calls, the three others in 13
    one = reader.predict(query, method="greedy", augment=1, time_limit_s=None)
    clock["seconds"] = 0.0
    stopped = reader.predict(query, method="greedy", augment=4, time_limit_s=12.5)
    assert stopped.error.startswith("stopped after the 12.5 s time limit per query (its 4 writings together), its "
                                    "answers pooled from the first of them, read whole by then; try ")
    assert stopped.stopped_with_answers and stopped.writings == 1
    assert [p.tokens for p in stopped.predictions] == [p.tokens for p in one.predictions]
    assert stopped.stats.model_calls == one.stats.model_calls + 3 * 12


def test_a_query_stopped_in_its_first_writing_says_the_dtype_of_the_calls_it_counts(monkeypatch):
    """Read in several writings and stopped before its first writing ended, a row counted the calls made and said
    they were computed in no dtype ("" is a row decoded by no call), where every other row with calls names it."""
    reader = Predictor.load(FIXTURES / "copy_model", device="cpu")
    reader.config = {**reader.config, "data_stats": {"augment": 20}}  # as if trained on many writings
    decoder_clock(reader.model, monkeypatch)
    stopped = reader.predict("OCCOc1ccccc1", method="greedy", augment=4, time_limit_s=5.5)
    assert not stopped.ok and stopped.predictions == () and stopped.stats.model_calls == 4 * 5
    assert stopped.dtype == "float32"
    # and that it pooled no writing: it said 1 (over HTTP, "writings": 1), as if one had been read whole
    assert stopped.writings == 0


def test_rows_that_read_no_writing_say_0_writings_and_rows_no_call_decoded_no_dtype(monkeypatch):
    """0ba8e43 and 313cb9a's rules held for a query read in several writings alone: a refused query said writings 1
    (over HTTP too, with augment 4), and so did a query stopped before its first answer; sbs, sampling and beam
    stopped before their first call said dtype 'float32' for the calls they had not made."""
    reader = Predictor.load(FIXTURES / "copy_model", device="cpu")
    reader.config = {**reader.config, "data_stats": {"augment": 20}}  # as if trained on many writings
    assert reader.predict("C1CC(", augment=4).writings == 0
    decoder_clock(reader.model, monkeypatch)
    for method in ("sbs", "sample", "beam"):
        stopped = reader.predict(["OCCOc1ccccc1", "CCO"], method=method, n_best=2, time_limit_s=0.001)
        assert [(r.stats.model_calls, r.predictions, r.dtype, r.writings) for r in stopped] == [(0, (), "", 0)] * 2
    # stopped after some calls without answers: the dtype of its calls, no writing; with answers, its one writing
    without = reader.predict(["OCCOc1ccccc1", "CCO"], method="sbs", n_best=2, time_limit_s=0.5)[1]
    assert (without.stats.model_calls, without.predictions, without.dtype, without.writings) == (1, (), "float32", 0)
    stopped = reader.predict("OCCOc1ccccc1", method="beam", n_best=2, time_limit_s=1.5)
    assert stopped.stopped_with_answers and (stopped.dtype, stopped.writings) == ("float32", 1)


def test_a_pooled_result_says_how_many_writings_it_pooled():
    """Asked for 5 writings, a small molecule has 3 (CCO, OCC, C(C)O): a result's answers said in how many writings
    they were given (Prediction.views), but not of how many, and the app said 'of the 5 writings the model read'."""
    reader = Predictor.load(FIXTURES / "copy_model", device="cpu")
    reader.config = {**reader.config, "data_stats": {"augment": 20}}  # as if trained on many writings
    assert reader.predict("CCO", method="beam", n_best=2, augment=5).writings == 3
    assert reader.predict("OCCOc1ccccc1", method="beam", n_best=2, augment=5).writings == 5
    assert reader.predict("CCO", method="beam", n_best=2).writings == 1


@pytest.mark.parametrize(("method", "delta"), [("sample", 0.0), ("spec-sample", 0.0), ("mentored", 0.1)])
def test_a_sampling_query_stopped_by_the_time_limit_counts_the_calls_of_the_draw_cut_short(copier, decoder_clock,
                                                                                         method, delta):
    """The draw the time limit cut short gives no sample, but its model calls were made: a stopped sampling row
    did not count them (sample_decode raised a plain timeout), where a stopped beam's row counts all of its."""
    options = SamplingOptions(seed=1, temperature=1.5, delta=delta)
    two = copier.predict(SLOW, method=method, n_best=2, sampling=options, time_limit_s=None)
    # past the two samples' calls by a call and a half: the third draw makes one call and is stopped at its second
    stopped = copier.predict(SLOW, method=method, n_best=3, sampling=options,
                             time_limit_s=two.stats.model_calls + 1.5)
    assert stopped.stopped_with_answers and stopped.predictions == two.predictions
    assert stopped.stats.model_calls == two.stats.model_calls + 1


def test_time_limit_must_be_positive(copier):
    with pytest.raises(ValueError, match="time_limit_s"):
        copier.predict("CCO", time_limit_s=0)


@pytest.mark.parametrize("method", ["greedy", "beam"])
@pytest.mark.parametrize("limit", [math.inf, 1e308])
def test_an_endless_time_limit_is_refused_with_none_offered(forward, method, limit):
    """float("inf"), a natural 'no limit', passed the positive check and raised OverflowError from inside the C search
    (limits.steps_before_check's int() of the time left), and so did 1e308 (a batch's limit, or the time left over a
    step's, overflowed to infinity); None is the API's no limit, and a limit is at most a day."""
    with pytest.raises(ValueError, match=re.escape(f"time_limit_s must be a positive number of seconds, at most "
                                                   f"86,400 (None for no limit), not {limit:g}")):
        forward.predict(["CCO.CC(=O)O", "CC(=O)Cl.NCc1ccccc1"], method=method, time_limit_s=limit)


# ---- issue 14: look-alike characters, sampling options, devices, draft_len=0, draft folders -------

@pytest.mark.parametrize("text,named", [
    ("ССO", "'С' (U+0421 CYRILLIC CAPITAL LETTER ES) at position 1"),  # once predicted as water
    ("c1ccccc1Ｃｌ", "'Ｃ' (U+FF23 FULLWIDTH LATIN CAPITAL LETTER C) at position 9"),  # once as benzene
    ("éCCO", "'é' (U+00E9 LATIN SMALL LETTER E WITH ACUTE) at position 1"),  # once as ethanol
    ("CCO\u00a0", "'\\xa0' (U+00A0 NO-BREAK SPACE) at position 4"),  # .strip() would drop it
    ("\u200bCCO", "'\\u200b' (U+200B ZERO WIDTH SPACE) at position 1"),
    ("\x01CCO", "'\\x01' (U+0001 control character) at position 1"),  # RDKit skips it too
    ("CC\x7fO", "'\\x7f' (U+007F control character) at position 3"),
    ("CC\ud800O", "'\\ud800' (U+D800 lone surrogate, half of a UTF-16 pair: not a character) at position 3"),
    ("\ue000CCO", "'\\ue000' (U+E000 private-use character) at position 1"),
])
def test_a_character_outside_printable_ascii_is_named_with_its_position(copier, text, named):
    result = copier.predict(text)
    assert not result.ok and named in result.error, result.error
    assert result.predictions == () and result.canonical_query == ""


def test_surrounding_ascii_whitespace_is_still_trimmed(copier):
    assert copier.predict(" \tCCO\r\n").canonical_query == "CCO"


@pytest.mark.parametrize("options,message", [
    (dict(temperature=float("nan")), "temperature"),  # once a torch RuntimeError escaped predict
    (dict(temperature=0.0), "temperature"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(top_k=-1), "top_k"),
    (dict(beta=0), "beta"),
    (dict(tau=float("nan")), "tau"),
    (dict(tau=-1.0), "tau"),
    (dict(delta=-0.5), "delta"),
    (dict(seed=2**64), "seed"),  # torch: "Overflow when unpacking long long"
    (dict(temperature=1e-40), "temperature"),  # the logits over it overflowed float32: torch drew from NaNs
    (dict(beta=2**64), "beta"),  # "int too big to convert" mid-decode
    (dict(top_k=2**64), "top_k"),
    (dict(tau=10**309), "tau"),  # a JSON integer: finite, and no float
    (dict(delta=1e300), "delta"),
])
def test_bad_sampling_options_raise_a_clear_value_error(copier, options, message):
    from molspec_core.decoding.sampling import SamplingOptions

    with pytest.raises(ValueError, match=message):
        copier.predict("CCO", method="sample", sampling=SamplingOptions(**options))


@pytest.mark.parametrize("options,message", [
    (dict(top_k=2.5), "top_k must be a whole number, not 2.5"),  # a TypeError inside verify
    (dict(seed=1.5), "seed must be a whole number, not 1.5"),  # a RuntimeError from torch's generator
    (dict(temperature="1"), "temperature must be a number, not '1'"),
    (dict(beta=True), "beta must be a whole number, not True"),
])
def test_sampling_knobs_of_the_wrong_type_are_named(copier, options, message):
    from molspec_core.decoding.sampling import SamplingOptions

    with pytest.raises(ValueError, match=re.escape(message)):
        copier.predict("CCO", method="sample", sampling=SamplingOptions(**options))
    with pytest.raises(ValueError, match="sampling must be a SamplingOptions, not dict"):  # an AttributeError
        copier.predict("CCO", method="sample", sampling={"temperature": 0.5})


def test_numpy_numbers_are_taken_wherever_python_numbers_are(copier):
    """numpy.int64 seeds raised "an integer is required" in torch; a numpy.float32 time limit was refused."""
    import numpy as np

    from molspec_core.decoding.sampling import SamplingOptions

    plain = copier.predict("CCO", method="sample", n_best=2, sampling=SamplingOptions(seed=3, temperature=0.7))
    numpy = copier.predict("CCO", method="sample", n_best=np.int64(2), time_limit_s=np.float32(5),
                           sampling=SamplingOptions(seed=np.int64(3), temperature=np.float32(0.7)))
    assert numpy.ok and [p.smiles for p in numpy.predictions] == [p.smiles for p in plain.predictions]


@pytest.mark.parametrize("options,message", [
    (dict(n_best=None), "n_best must be a whole number, not None"),  # comparison TypeErrors
    (dict(batch_size=None), "batch_size must be a whole number, not None"),
    (dict(augment=None), "augment must be a whole number, not None"),
    (dict(method=["beam"]), "unknown method ['beam']"),  # "unhashable type"
    (dict(ion_writing="no"), "ion_writing must be True or False, not 'no'"),  # read as True
    (dict(ion_writing=None), "ion_writing must be True or False, not None"),
])
def test_options_of_the_wrong_type_are_named(copier, options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        copier.predict("CCO", **options)


@pytest.mark.parametrize("method, options, knob", [
    ("beam", {"n_best": 3, "draft_len": 4}, "draft_len"),
    ("greedy", {"draft_len": 0}, "draft_len"),
    ("spec-sample", {"n_best": 2, "n_drafts": 1}, "n_drafts"),
    ("sample", {"n_best": 2, "draft_len": 2}, "draft_len"),
])
def test_a_draft_setting_the_method_does_not_read_is_refused_naming_those_that_do(copier, method, options, knob):
    """predict(method="beam", draft_len=4) decoded plain beam search as if told nothing of drafts, where `molspec
    predict` and the server refuse such a setting, naming the methods that read it."""
    with pytest.raises(ValueError, match=re.escape(f"{method} does not read {knob}; the methods that do: "
                                                   f"{readers_of(knob)}")):
        copier.predict("CCO", method=method, **options)


@pytest.mark.parametrize("method, sampling, knob", [
    ("greedy", SamplingOptions(temperature=0.8), "temperature"),
    ("beam", SamplingOptions(seed=3), "seed"),
    ("sample", SamplingOptions(tau=1.0), "tau"),
    ("spec-sample", SamplingOptions(beta=2), "beta"),
])
def test_a_sampling_knob_the_method_does_not_read_is_refused_naming_those_that_do(copier, method, sampling, knob):
    """predict(method="greedy", sampling=SamplingOptions(temperature=0.8)) decoded greedy as if told nothing, where
    `molspec predict --temperature` and the server refuse it; knobs left at their defaults stay welcome."""
    n_best = 2 if METHODS[method].many else 1
    with pytest.raises(ValueError, match=re.escape(f"{method} does not read {knob}; the methods that do: "
                                                   f"{readers_of(knob)}")):
        copier.predict("CCO", method=method, n_best=n_best, sampling=sampling)
    assert copier.predict("CCO", method=method, n_best=n_best, sampling=SamplingOptions()).ok


@pytest.mark.parametrize("method", ["spec-sample", "mentored"])  # they read draft_len (sample: the test below)
def test_a_draft_length_set_in_sampling_options_is_refused_pointing_to_predicts_own(copier, method):
    """SamplingOptions(draft_len=1), a field beside the other knobs, was replaced by predict's draft_len (the method's
    default of 8 or 2 where None): the sample was drafted as if told nothing. predict's draft_len is the one knob."""
    with pytest.raises(ValueError, match=re.escape("predict reads the draft length from its own draft_len, not from "
                                                   "SamplingOptions.draft_len: give draft_len=1 to predict")):
        copier.predict("CCO", method=method, n_best=2, sampling=SamplingOptions(draft_len=1))
    assert copier.predict("CCO", method="spec-sample", n_best=2, draft_len=1,
                          sampling=SamplingOptions(draft_len=1)).ok  # the same length in both: no conflict


@pytest.mark.parametrize("method, n_best", [("sample", 2), ("beam", 2), ("greedy", 1)])
def test_a_draft_length_in_sampling_options_for_a_method_without_drafts_says_the_method_reads_none(copier, method,
                                                                                                   n_best):
    """SamplingOptions(draft_len=4) with a method that drafts nothing was told to give draft_len=4 to predict, which
    then refused it: the method does not read it. The refusal says so at once, naming the methods that do."""
    with pytest.raises(ValueError, match=re.escape(f"{method} does not read draft_len (SamplingOptions.draft_len); "
                                                   "the methods that do: spec-auto")):
        copier.predict("CCO", method=method, n_best=n_best, sampling=SamplingOptions(draft_len=4))


def test_n_drafts_is_read_only_by_the_methods_that_verify_several():
    """The sampling loop verifies one draft a call: n_drafts=3 changed nothing in float32, and int8 refused it."""
    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    for method in ("relaxed", "spec-sample", "mentored"):
        assert predictor.resolve(method, None, 3, 1)[2] == 1
    assert predictor.resolve("spec-pointer", None, 3, 1)[2] == 3


@pytest.mark.parametrize("engine", ["numpy", "torch"])
def test_a_predictor_refuses_pickling_saying_how_to_share_it(engine):
    """The NumPy engine's copy unpickled and then failed inside torch on its first predict."""
    import pickle

    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu", engine=engine)
    with pytest.raises(TypeError, match=r"a Predictor cannot be pickled; load the model in each process"):
        pickle.dumps(predictor)


def test_a_draft_vocabulary_that_differs_names_both_files(tmp_path):
    """An edited main vocab.json was blamed on draft/vocab.json alone."""
    import json
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", folder)
    shutil.copytree(FIXTURES / "copy_model", folder / "draft")
    vocab = json.loads((folder / "vocab.json").read_text())
    vocab["tokens"][4], vocab["tokens"][5] = vocab["tokens"][5], vocab["tokens"][4]
    (folder / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(CheckpointError, match=re.escape(f"{folder / 'draft' / 'vocab.json'} and "
                                                        f"{folder / 'vocab.json'} differ")):
        Predictor.load(folder, device="cpu")


def test_a_folder_of_a_shipped_models_name_here_is_named_as_the_cause(tmp_path, monkeypatch):
    """A folder called forward in the working directory shadowed the shipped model: "config.json is missing"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "forward").mkdir()
    with pytest.raises(CheckpointError, match=r"forward is a folder here that holds no model .* the shipped model "
                                              r"forward is \S+models/forward"):
        Predictor.load("forward", device="cpu")


def test_an_empty_name_or_the_working_folder_is_not_taken_for_the_shipped_models_folder(tmp_path, monkeypatch):
    """Predictor.load("") (a blank setting) and Predictor.load(".") in a folder without a model were told that "the
    shipped model . is .../models: give that path", the folder holding the shipped models, which is no model."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match=r"^a model is a folder's path or a shipped model's name, not an empty "
                                              r"name \(shipped: forward, retro\)$"):
        Predictor.load("")
    with pytest.raises(CheckpointError, match="config.json is missing") as refused:
        Predictor.load(".")
    assert "shipped model" not in str(refused.value)


def test_a_mistyped_native_build_is_warned_of_when_the_numpy_step_stands_in(monkeypatch, caplog):
    """MOLSPEC_NATIVE_BUILD=foo dropped float32 to the NumPy step with a line at info level only."""
    import logging

    monkeypatch.setenv("MOLSPEC_NATIVE_BUILD", "foo")
    with caplog.at_level(logging.WARNING, logger="molspec_core.service"):
        predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    assert predictor.engine == "numpy"
    assert any("MOLSPEC_NATIVE_BUILD='foo' names no build" in r.getMessage() for r in caplog.records)


def test_an_unavailable_device_is_a_clear_error():
    import torch

    with pytest.raises(ValueError, match="device"):
        Predictor.load(FIXTURES / "copy_model", device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            Predictor.load(FIXTURES / "copy_model", device="cuda")


def test_draft_len_zero_means_no_drafts_for_every_greedy_method(copier):
    """spec-auto once read draft_len=0 as 'unset' (`draft_len or auto_len`) and drafted anyway."""
    greedy = copier.predict("CCOc1ccccc1N")
    for method in (m for m in GREEDY_METHODS if "draft_len" in METHODS[m].knobs):
        result = copier.predict("CCOc1ccccc1N", method=method, draft_len=0)
        assert result.stats.draft_tokens_proposed == 0, method
        assert result.predictions[0].tokens == greedy.predictions[0].tokens, method


def test_a_hostile_draft_folder_is_checked_like_the_model(tmp_path):
    import json
    import shutil

    shutil.copytree(FIXTURES / "copy_model", tmp_path / "m")
    shutil.copytree(FIXTURES / "copy_model", tmp_path / "m" / "draft")
    assert Predictor.load(tmp_path / "m").draft_model is not None
    config = json.loads((tmp_path / "m" / "draft" / "config.json").read_text())
    config["model"]["max_positions"] = 100_000
    (tmp_path / "m" / "draft" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"draft/config\.json: model\.max_positions"):
        Predictor.load(tmp_path / "m")


def test_draft_len_zero_with_a_draft_model_is_plain_sampling(tmp_path):
    """draft_len=0 was read as 'unset' here too (`draft_len or options.draft_len`): 8 drafted tokens."""
    import shutil

    shutil.copytree(FIXTURES / "copy_model", tmp_path / "m")
    shutil.copytree(FIXTURES / "copy_model", tmp_path / "m" / "draft")
    predictor = Predictor.load(tmp_path / "m")
    result = predictor.predict("CCOc1ccccc1N", method="spec-sample-draft", draft_len=0, n_best=2)
    assert result.ok and result.stats.draft_tokens_proposed == 0
    assert predictor.predict("CCOc1ccccc1N", method="spec-sample-draft").stats.draft_tokens_proposed > 0


def test_cpu_description_names_the_vector_instructions(monkeypatch):
    """A CPU speed figure depends on AVX-512 against AVX2 (the C step is built for either): the device
    name that the sidebar and every bench report carry says which."""
    from molspec_core import native

    info = {"model name": "AMD EPYC 9B14", "flags": "fpu avx avx2 fma f16c avx512f avx512_vnni"}
    monkeypatch.setattr(native, "_cpuinfo", lambda field: info.get(field, ""))
    assert native.cpu_description() == "AMD EPYC 9B14 with AVX-512 and VNNI"
    info.update({"model name": "Intel(R) Xeon(R) Processor", "flags": info["flags"] + " amx_tile amx_int8 amx_bf16"})
    assert native.cpu_description() == "Intel(R) Xeon(R) Processor with AVX-512, VNNI and AMX"
    info.update({"model name": "AMD EPYC 9B14", "flags": "fpu avx avx2 fma f16c"})
    assert native.cpu_description() == "AMD EPYC 9B14 with AVX2"
    info.clear()
    assert native.cpu_description()  # no /proc/cpuinfo: the platform's name
    assert Predictor.load(FORWARD_MODEL, device="cpu").device_name == native.cpu_description()


def test_a_flagged_answer_gets_no_confidence():
    """Carbon tetrachloride from [Na+].[Cl-] (atoms no reactant has) read 29% on the Predict page: a flagged answer
    cannot be right as written, so its score says nothing a calibration could turn into a chance."""
    from molspec_core.calibration import Calibration
    from molspec_core.service import Prediction, with_confidence

    fit = Calibration("w", "beam", 2, 10, 5, (-50.0, -1.0), (0.1, 0.6), 0.0, 0.0, ())
    answers = [Prediction(1, "ClC(Cl)(Cl)Cl", -0.5, True, (), (), concerns=("atoms no reactant has (1 C)",),
                          model_rank=1),
               Prediction(2, "CCO", -2.0, True, (), (), model_rank=2), Prediction(3, "C1CC", -3.0, False, (), ())]
    assert [p.confidence for p in with_confidence(answers, fit)] == [None, 0.1, None]


@pytest.fixture(scope="module")
def copier_float16(tmp_path_factory):
    """The copy model saved as float16, as shipped checkpoints are: Predictor.load gives it the C engine (the
    `copier` fixture's weights are not float16 values, so it falls back to the NumPy step)."""
    from molspec_core import checkpoint

    model, vocab, _ = checkpoint.load(FIXTURES / "copy_model")
    folder = tmp_path_factory.mktemp("copy_model_float16")
    checkpoint.save(model, vocab, folder, meta={"task": "copy-test-fixture"}, dtype=torch.float16)
    return folder


@needs_native
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_partner_methods_equal_their_plain_method_to_the_bit_on_the_c_engine(copier_float16, dtype):
    """What users get on a CPU: the C engine, float32 or int8 (the app's default). One draft a call equals the
    plain decoder to the bit (README): spec-* greedy's answers, sbs-exact beam's n-best list, scores included,
    with drafts accepted; and a batch gives each query what it gets alone."""
    predictor = Predictor.load(copier_float16, "cpu", dtype=dtype)
    assert (predictor.engine, predictor.dtype) == ("native", dtype)
    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO", "O=C(O)c1ccc(N)cc1"]

    def answers(results):
        return [[(p.smiles, p.tokens, p.score) for p in r.predictions] for r in results]
    for plain, partners, n_best in (("greedy", ("spec-auto", "spec-pointer", "spec-lookup"), 1),
                                    ("beam", ("sbs-exact",), 3)):
        reference = predictor.predict(queries, method=plain, n_best=n_best, batch_size=1)
        assert all(r.ok for r in reference)
        for method in partners:
            got = predictor.predict(queries, method=method, n_best=n_best, batch_size=3)
            assert answers(got) == answers(reference), method
            assert sum(r.stats.draft_tokens_accepted for r in got) > 0, method


@pytest.mark.parametrize("method", ["sample", "spec-sample"])
def test_a_querys_samples_do_not_depend_on_its_batch_mates(copier, method):
    """Seeds are per query: the same query and seed give the same samples whatever list it is in, wherever
    in it, and at any batch size."""
    from molspec_core.decoding.sampling import SamplingOptions

    queries = ["CCOc1ccccc1N", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO"]
    options = SamplingOptions(seed=7, temperature=1.5)

    def samples(results):
        return [[(p.smiles, p.score) for p in r.predictions] for r in results]
    alone = [samples(copier.predict([q], method=method, n_best=3, sampling=options))[0] for q in queries]
    assert len({tuple(a) for a in alone}) == len(queries)
    for order, batch_size in ((queries, 4), (queries[::-1], 3), (queries[1:] + queries[:1], 2)):
        got = dict(zip(order, samples(copier.predict(order, method=method, n_best=3, sampling=options,
                                                     batch_size=batch_size))))
        assert [got[q] for q in queries] == alone, batch_size


def test_the_writings_of_one_query_draw_their_samples_with_seeds_of_their_own(copier, monkeypatch):
    """Read in several writings (augment), a query's writings are the sources of one decode, and every writing drew
    sample k with seed + k: the same random numbers for each, so the pooled samples were alike, not independent.
    Writing w draws from seed + n_best * w now; the first writing keeps the seeds it has alone, and a query's seeds
    still hang on nothing but the seed given."""
    import molspec_core.service as service
    from molspec_core.service import MAX_AUGMENT, MAX_N_BEST, MAX_SEED

    reader = Predictor.load(FIXTURES / "copy_model", device="cpu")
    reader.config = {**reader.config, "data_stats": {"augment": 20}}  # as if trained on many writings
    seeds: list[int] = []
    real = service.sample_decode

    def recording(model, sources, mode, factory, options, draft_model=None):
        seeds.append(options.seed)
        return real(model, sources, mode, factory, options, draft_model)
    monkeypatch.setattr(service, "sample_decode", recording)
    options = SamplingOptions(seed=7, temperature=1.5)
    first = reader.predict("OCCOc1ccccc1", method="sample", n_best=2, sampling=options, augment=3)
    assert first.ok and len(seeds) == 6
    assert seeds == [7, 8, 9, 10, 11, 12]
    seeds.clear()
    again = reader.predict("OCCOc1ccccc1", method="sample", n_best=2, sampling=options, augment=3)
    assert again.predictions == first.predictions  # the same seed, the same answers
    assert seeds == [7, 8, 9, 10, 11, 12]
    seeds.clear()
    reader.predict("OCCOc1ccccc1", method="sample", n_best=2, sampling=options)
    assert seeds == [7, 8]

    highest = MAX_SEED - MAX_N_BEST * MAX_AUGMENT  # its last writing's last sample draws with at most MAX_SEED
    assert reader.predict("CCO", method="sample", sampling=SamplingOptions(seed=highest)).ok
    with pytest.raises(ValueError, match=f"seed must be between 0 and {highest}, not {highest + 1}"):
        reader.predict("CCO", method="sample", sampling=SamplingOptions(seed=highest + 1))


def test_a_smiles_and_then_its_name_is_told_the_smiles_alone_and_a_lower_case_inchi_is_read(copier):
    """A line of a SMILES file pasted whole ('CCO ethanol') was told it reads like a name and to paste a SMILES,
    which it holds; and 'inchi=1S/...' typed in lower case was no InChI."""
    for text in ("OCCN ethanolamine", "OCCN\t2-aminoethanol", "  OCCN  my compound 7  "):
        result = copier.predict(text)
        assert result.error.endswith("it reads as a SMILES and then a name or title, as a line of a SMILES file "
                                     "does: the SMILES alone is OCCN"), text
    assert "reads like a name" in copier.predict("ethanol amine").error
    assert "SMILES and then a name" not in copier.predict("OCCN CCO").error  # two molecules: join with '.'
    lower = copier.predict("inchi=1S/C2H7NO/c3-1-2-4/h4H,1-3H2")
    assert lower.ok and lower.canonical_query == copier.predict("NCCO").canonical_query


DATIVE_LACKED = ("which this model's vocabulary lacks (USPTO writes a ligand and its metal as separate "
                 "molecules)")


def test_a_dative_bond_is_no_reaction_arrow(copier):
    """'[NH3]->[Pt]', a complex's dative bond, was refused as a reaction SMILES; it is read as the molecule it is
    (which this model's vocabulary then refuses, naming the bond)."""
    error = copier.predict("[NH3]->[Pt]").error
    assert "reaction" not in error and error == f"the query holds a dative bond (->), {DATIVE_LACKED}"
    assert "reaction SMILES" in copier.predict("CCO>>CC").error


@pytest.mark.parametrize("query, bonds", [("C->[Fe]", "a dative bond (->)"), ("CC(=O)O.[Fe]<-N", "a dative bond (->)"),
                                          ("[NH3]->[Pt]<-[NH3]", "dative bonds (->, <-)"),
                                          ("N->[Pt](<-N)(Cl)Cl", "dative bonds (->, <-)")])
def test_a_dative_bond_the_vocabulary_lacks_is_named_not_the_bracket_atom_rdkit_writes_beside_it(forward, query,
                                                                                                  bonds):
    """C->[Fe] was refused for a token '[CH4]', which the chemist never typed (RDKit writes the methane of a dative
    bond in brackets). The shipped models' vocabularies hold no dative bond: it is named."""
    assert "->" not in forward.vocab.index
    result = forward.predict(query)
    assert result.error == f"the query holds {bonds}, {DATIVE_LACKED}" and not result.suggestion


@pytest.mark.parametrize("method", ["sbs", "sbs-exact"])
def test_an_sbs_query_read_in_several_writings_stopped_counts_the_calls_of_the_writing_cut_short(monkeypatch,
                                                                                                 method):
    """sbs read a query's writings one after another and, stopped in one before its last, handed on only those
    before it: the cut writing's model calls were lost (over HTTP a retro sbs-exact request, augment 3 and a
    0.05 s limit, said model_calls 0). They are counted now, and the answers kept are those of the writings read."""
    reader = Predictor.load(FIXTURES / "copy_model", device="cpu")
    reader.config = {**reader.config, "data_stats": {"augment": 20}}  # as if trained on many writings
    clock = decoder_clock(reader.model, monkeypatch)
    query = "OCCOc1ccccc1"
    two = reader.predict(query, method=method, n_best=2, augment=2, time_limit_s=None)
    # the third writing of 4 makes one call and is stopped at its second
    stopped = reader.predict(query, method=method, n_best=2, augment=4, time_limit_s=two.stats.model_calls + 1.5)
    assert stopped.stopped_with_answers and stopped.predictions == two.predictions and stopped.writings == 2
    assert stopped.stats.model_calls == two.stats.model_calls + 1
    # stopped in the first writing of 3 after one call: no answers, the call counted
    clock["seconds"] = 0.0
    first = reader.predict(query, method=method, n_best=2, augment=3, time_limit_s=1.5)
    assert not first.ok and not first.predictions and first.stats.model_calls == 1


def test_a_predict_keeps_rdkit_quiet_and_leaves_it_on_for_the_caller():
    """RDKit's line on an unreadable query stays out (the result's error says it), and a library caller's own RDKit
    messages are still told after a predict (importing the engine turned them off for good)."""
    story = stderr_story("import logging\nlogging.disable()\nfrom molspec_core import Predictor\n"
                         "predictor = Predictor.load('tests/fixtures/copy_model', device='cpu')\n"
                         "told(predictor.predict(['c1cc', 'C1CC'])[0].error)\n"
                         "Chem.MolFromSmiles('c1cc')")
    assert story == ["not a valid SMILES: RDKit cannot parse 'c1cc' as a molecule: ring bond 1 opened at position 2 is "
                     "never closed", "rdkit"]


def test_the_host_running_out_of_memory_inside_torch_is_a_memory_error_and_the_command_lines_error_line(capsys):
    """torch's CPU allocator raises a RuntimeError where the host has not the memory asked for (2**60 bytes here, past
    any machine's): predict raised it as it came, a command line printed its traceback, and a server answered 500.
    It is a MemoryError, as Python's and NumPy's are, and the command lines' `error: out of memory; ...` line."""
    from molspec_core import boundary

    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    predictor.decode = lambda *args, **kwargs: torch.empty(2**60, dtype=torch.uint8)  # type: ignore[method-assign]
    with pytest.raises(MemoryError, match="^the host's memory ran out: .*DefaultCPUAllocator: can't allocate memory"):
        predictor.predict("CCO")
    assert boundary.guarded(lambda: torch.empty(2**60, dtype=torch.uint8) and 0, "try less") == 2
    assert capsys.readouterr().err == "error: out of memory; try less\n"

    def failing() -> int:
        raise RuntimeError("another failure")

    with pytest.raises(RuntimeError, match="^another failure$"):  # torch's other RuntimeErrors go on as they are
        boundary.guarded(failing, "try less")


def test_the_weights_fingerprint_names_the_weights_read_though_the_folder_changes_while_the_engine_is_set_up(
        tmp_path, monkeypatch):
    """Predictor.weights was hashed once the engine was set up, after the C step was built (a minute or more the first
    time a model loads): weights rewritten in that time (a training run's export/) were named in the files, the CLI's
    reports and the app's Continue check, not those read and decoded with. It is taken as the weights are read."""
    import shutil

    from molspec_core.calibration import weights_fingerprint
    from molspec_core.model import Seq2SeqTransformer

    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    read = weights_fingerprint(model)
    set_up = Seq2SeqTransformer.use_numpy_step

    def rewritten_meanwhile(self, *args, **kwargs):  # the folder's weights replaced while the engine is set up
        with open(next(model.glob("*.safetensors")), "ab") as weights:
            weights.write(b"\0")
        return set_up(self, *args, **kwargs)

    monkeypatch.setattr(Seq2SeqTransformer, "use_numpy_step", rewritten_meanwhile)
    predictor = Predictor.load(model, device="cpu", engine="numpy")
    assert weights_fingerprint(model) != read
    assert predictor.weights == read
