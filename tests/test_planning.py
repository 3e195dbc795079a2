"""Multi-step routes (molspec_core.planning): the search on a hand-written reaction table, the Predictor
wrapper and `plan` on the copy model, the stock, the exports, the CLI and the Routes page.

The copy model drops every 'C' from its input, so with hydroxylamine (NO) in the stock it 'solves'
ethanolamine (NCCO) in one step, deterministically. Multi-step search is checked on a reaction table
whose best route is known by hand.
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import math
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from syntheseus import Bag, BackwardReactionModel, Molecule, SingleProductReaction

from conftest import FIXTURES, ROOT, excel_and_csv, molfile, needs_native, record_loads, sd_file_text
from test_chem import stderr_story
from molspec_core import planning
from molspec_core.chem import missing_atoms
from molspec_core.cli import main
from molspec_core.methods import EXACT_NBEST, METHODS
from molspec_core.io import InputFileError, csv_bytes
from molspec_core.planning import ROUTE_COLUMNS, PlanSettings, PredictorModel, Stock, load_stock, plan
from molspec_core.service import Predictor, QueryResult

COPY_MODEL = FIXTURES / "copy_model"
# The copy model drops every carbon, so none of its answers keeps the atoms of its product: with the
# copy model the atom check is off, except where the check itself is tested.
COPY = PlanSettings(check_atoms=False)
TIMEOUT = 120  # seconds per AppTest run: a cold start loads torch, RDKit and the model


@pytest.fixture(scope="module")
def copy_predictor() -> Predictor:
    return Predictor.load(COPY_MODEL, "cpu")


@pytest.fixture(scope="module")
def copy_forward(tmp_path_factory) -> Predictor:
    """The copy model dressed as a forward model, for the round-trip flag."""
    folder = tmp_path_factory.mktemp("forward") / "forward"
    shutil.copytree(COPY_MODEL, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "task": "forward"}))
    return Predictor.load(folder, "cpu")


# ---- the search, on a reaction table --------------------------------------------------------------

# product -> [(reactants, probability)]: the best route to the amide is acylation of aniline, which is
# made from nitrobenzene (0.5 * 0.8 = 0.4); the other, through the ester, is worth 0.3 * 0.2 = 0.06.
TARGET = "CC(=O)Nc1ccccc1"
TABLE = {
    TARGET: [("CC(=O)Cl.Nc1ccccc1", 0.5), ("CC(=O)Oc1ccccc1.N", 0.3)],
    "Nc1ccccc1": [("O=[N+]([O-])c1ccccc1", 0.8)],
    "CC(=O)Oc1ccccc1": [("CC(=O)Cl.Oc1ccccc1", 0.2)],
}
TABLE_STOCK = Stock(["CC(=O)Cl", "O=[N+]([O-])c1ccccc1", "N", "Oc1ccccc1"], "table")


class TableModel(BackwardReactionModel):
    """A backward reaction model that answers from a table (TABLE unless told), with the metadata PredictorModel
    gives."""

    def __init__(self, table: dict[str, list[tuple[str, float]]] = TABLE):
        super().__init__(use_cache=True)
        self.table = table

    def _get_reactions(self, inputs: list[Molecule], num_results: int) -> list[Sequence[SingleProductReaction]]:
        return [[SingleProductReaction(reactants=Bag(Molecule(s) for s in reactants.split(".")), product=mol,
                                       metadata={"score": math.log(prob), "probability": prob, "model_rank": rank})
                 for rank, (reactants, prob) in enumerate(self.table.get(mol.smiles, []), start=1)]
                for mol in inputs]


@pytest.mark.parametrize("algorithm", planning.ALGORITHMS)
def test_search_finds_both_routes_best_first(algorithm):
    search = planning.search_algorithm(algorithm, TableModel(), TABLE_STOCK, time_limit_s=2.0, max_steps=3)
    graph, _ = search.run_from_mol(Molecule(TARGET))
    routes = planning.extract_routes(graph, TABLE_STOCK, max_routes=10)
    assert [round(math.exp(r.score), 6) for r in routes] == [0.4, 0.06]
    best = routes[0]
    assert (best.n_steps, best.depth) == (2, 2)
    assert sorted(m.smiles for m in best.starting_materials()) == ["CC(=O)Cl", "O=[N+]([O-])c1ccccc1"]
    assert all(m.in_stock for m in best.starting_materials())
    top = best.target.made_by
    assert best.target.smiles == TARGET and not best.target.in_stock
    reactants = {r.smiles: r for r in top.reactants}
    aniline = reactants["Nc1ccccc1"]
    assert not aniline.in_stock and aniline.made_by.reactants[0].smiles == "O=[N+]([O-])c1ccccc1"
    assert [(depth, step.product) for depth, step in best.steps()] == [(1, TARGET), (2, "Nc1ccccc1")]


def test_retro_star_respects_the_step_limit():
    search = planning.search_algorithm("retro*", TableModel(), TABLE_STOCK, time_limit_s=2.0, max_steps=1)
    graph, _ = search.run_from_mol(Molecule(TARGET))
    assert planning.extract_routes(graph, TABLE_STOCK, max_routes=10) == []  # every route needs two steps


# Paracetamol from acetyl chloride and 4-aminophenol, each made two ways: four routes, 0.6 x (0.5 or 0.4) x (0.7 or 0.2)
PARACETAMOL = "CC(=O)Nc1ccc(O)cc1"
TWO_BRANCHES = {
    PARACETAMOL: [("CC(=O)Cl.Nc1ccc(O)cc1", 0.6)],
    "CC(=O)Cl": [("CC(=O)O", 0.5), ("CC(=O)OC(C)=O", 0.4)],
    "Nc1ccc(O)cc1": [("O=[N+]([O-])c1ccc(O)cc1", 0.7), ("COc1ccc(N)cc1", 0.2)],
}
TWO_BRANCHES_STOCK = Stock(["CC(=O)O", "CC(=O)OC(C)=O", "O=[N+]([O-])c1ccc(O)cc1", "COc1ccc(N)cc1"], "table")


@pytest.mark.parametrize("algorithm", planning.ALGORITHMS)
def test_a_search_says_whether_its_step_limit_left_a_molecule_unexpanded(copy_predictor, algorithm):
    """A search that ran out of molecules at a step limit of 1 (the Routes page's, set by the chemist) was told only
    that a larger stock might help: the stats say where the limit left a molecule unexpanded, not in stock."""
    stock = Stock(["CC(=O)Cl"], "table")  # no nitrobenzene nor phenol: each branch ends in a molecule nothing makes
    for max_steps, reached in ((1, True), (5, False)):
        search = planning.search_algorithm(algorithm, TableModel(), stock, time_limit_s=5.0, max_steps=max_steps)
        graph, _ = search.run_from_mol(Molecule(TARGET))
        assert planning.reached_step_limit(search, graph) is reached
    result = plan("NCCO", copy_predictor, Stock(["Br"]), 5.0, algorithm,
                  settings=dataclasses.replace(COPY, max_steps=1))
    assert result.stats.ran_out and result.stats.step_limit_reached  # NO, not in stock, at the limit


@pytest.mark.parametrize("algorithm", planning.ALGORITHMS)
@pytest.mark.parametrize("max_routes", [2, 4])
def test_as_many_routes_as_asked_each_once_when_mcts_reaches_one_in_several_orders(algorithm, max_routes):
    """MCTS's molecule-set tree holds each two-branch route twice (acid chloride first or aminophenol first), and
    those copies used up max_routes: 2 asked, 1 given; 4 asked, 2 given."""
    search = planning.search_algorithm(algorithm, TableModel(TWO_BRANCHES), TWO_BRANCHES_STOCK, time_limit_s=5.0,
                                       max_steps=3)
    graph, _ = search.run_from_mol(Molecule(PARACETAMOL))
    routes = planning.extract_routes(graph, TWO_BRANCHES_STOCK, max_routes=max_routes)
    assert [round(math.exp(r.score), 6) for r in routes] == [0.21, 0.168, 0.06, 0.048][:max_routes]
    assert len({frozenset(m.smiles for m in r.starting_materials()) for r in routes}) == max_routes


@pytest.mark.parametrize("algorithm", planning.ALGORITHMS)
def test_routes_are_ranked_by_the_score_they_show_a_step_two_branches_share_counted_once(algorithm):
    """Diethyl succinate from ethanol twice (ethanol made from acetaldehyde, 0.1), at 0.5 x 0.5 x 0.1 = 2.5%, or in
    one step from diethyl fumarate at 2%. Retro*'s tree holds ethanol's step once per branch, and syntheseus's order
    counted it twice (0.25%): route 1 showed 2%, route 2 2.5%, and max_routes=1 gave the 2% one."""
    diester, monoester, acid, ethanol = "CCOC(=O)CCC(=O)OCC", "CCOC(=O)CCC(=O)O", "O=C(O)CCC(=O)O", "CCO"
    fumarate = "CCOC(=O)C=CC(=O)OCC"
    table = {diester: [(f"{ethanol}.{monoester}", 0.5), (fumarate, 0.02)], monoester: [(f"{ethanol}.{acid}", 0.5)],
             ethanol: [("CC=O", 0.1)]}
    stock = Stock([acid, "CC=O", fumarate], "table")
    search = planning.search_algorithm(algorithm, TableModel(table), stock, time_limit_s=5.0, max_steps=4)
    graph, _ = search.run_from_mol(Molecule(diester))
    routes = planning.extract_routes(graph, stock, max_routes=10)
    assert [(round(math.exp(r.score), 6), r.n_steps) for r in routes] == [(0.025, 3), (0.02, 1)]
    assert [r.n_steps for r in planning.extract_routes(graph, stock, max_routes=1)] == [3]
    # Ethanol's step is listed under the diester, where it is met first; its longest path runs through the monoester
    assert [(depth, step.product) for depth, step in routes[0].steps()] == [(1, diester), (2, ethanol), (2, monoester)]
    assert routes[0].depth == 3  # acetaldehyde -> ethanol -> monoester -> diester: it read 2


ANHYDRIDE, ANISIC_ACID, ANISOYL_CHLORIDE = ("COc1ccc(C(=O)OC(=O)c2ccc(OC)cc2)cc1", "COc1ccc(C(=O)O)cc1",
                                           "COc1ccc(C(=O)Cl)cc1")


def anhydride_plan_result() -> planning.PlanResult:
    """4-Anisic anhydride from the acid chloride and the acid (0.5) or, the model's fifth answer, from two anisic
    acids (0.3)."""
    table = {ANHYDRIDE: [(f"{ANISOYL_CHLORIDE}.{ANISIC_ACID}", 0.5), (f"{ANISIC_ACID}.{ANISIC_ACID}", 0.3)]}
    stock = Stock([ANISIC_ACID, ANISOYL_CHLORIDE], "table")
    search = planning.search_algorithm("retro*", TableModel(table), stock, time_limit_s=2.0, max_steps=2)
    graph, _ = search.run_from_mol(Molecule(ANHYDRIDE))
    routes = planning.extract_routes(graph, stock, max_routes=10)
    return planning.PlanResult(ANHYDRIDE, tuple(routes), planning.SearchStats("retro*", 1.0, 2.0, 1, len(graph)),
                               "table", None, "table", len(stock))


def test_a_step_that_uses_one_reactant_twice_shows_it_twice_as_the_model_wrote_it():
    """The model's fifth answer for 4-anisic anhydride is two anisic acids; the route's step read 'made from
    COc1ccc(C(=O)O)cc1' alone (syntheseus's unique_reactants): half the product's atoms, in the CSV and on the page."""
    acid, result = ANISIC_ACID, anhydride_plan_result()
    routes = result.routes
    twice = routes[1].target.made_by
    assert [r.smiles for r in twice.reactants] == [acid, acid] and all(r.in_stock for r in twice.reactants)
    assert [m.smiles for m in routes[1].starting_materials()] == [acid]  # ordered once
    row = list(planning.route_rows(result))[1]
    reactants = row[ROUTE_COLUMNS.index("reactants")]
    assert reactants == f"{acid}.{acid}" and row[ROUTE_COLUMNS.index("reactants_in_stock")] == "yes;yes"
    assert missing_atoms(reactants, ANHYDRIDE) == {}
    tree = planning.routes_json(result)["routes"][1]["tree"]
    assert [r["smiles"] for r in tree["reaction"]["reactants"]] == [acid, acid]


def test_the_compounds_to_procure_say_how_many_times_the_route_uses_each():
    """Ethyl (Z)-cinnamate's route 7 (phosphonate and two benzaldehydes, the model's ninth answer) listed its
    starting materials as route 1 did (phosphonate and one benzaldehyde), in `molspec plan`, the JSON and on the
    page: two routes that read alike. The count covers a molecule two steps use, one each, too."""
    result = anhydride_plan_result()
    assert [planning.starting_materials_text(route) for route in result.routes] == [
        f"{ANISOYL_CHLORIDE}, {ANISIC_ACID}", f"{ANISIC_ACID} (used twice)"]
    assert [route["starting_material_uses"] for route in planning.routes_json(result)["routes"]] == [
        {ANISOYL_CHLORIDE: 1, ANISIC_ACID: 1}, {ANISIC_ACID: 2}]
    diester, monoester, acid, ethanol = "CCOC(=O)CCC(=O)OCC", "CCOC(=O)CCC(=O)O", "O=C(O)CCC(=O)O", "CCO"
    table = {diester: [(f"{ethanol}.{monoester}", 0.5)], monoester: [(f"{ethanol}.{acid}", 0.5)]}
    stock = Stock([acid, ethanol], "table")
    graph, _ = planning.search_algorithm("retro*", TableModel(table), stock, 2.0, 3).run_from_mol(Molecule(diester))
    (route,) = planning.extract_routes(graph, stock, max_routes=10)
    assert route.uses() == {ethanol: 2, acid: 1}
    assert planning.starting_materials_text(route) == f"{ethanol} (used twice), {acid}"


# ---- the stereo of a step --------------------------------------------------------------------------

BOC_L_ALA, BOC2O = "C[C@H](NC(=O)OC(C)(C)C)C(=O)O", "CC(C)(C)OC(=O)OC(=O)OC(C)(C)C"
L_ALA, D_ALA = "C[C@H](N)C(=O)O", "C[C@@H](N)C(=O)O"
INVERTS_ALA = "inverts the stereocentre at atom 2 (S): traced to a reactant stereocentre arranged the other way"


@pytest.mark.parametrize("reactant, flag", [
    (L_ALA, None), ("OC(=O)[C@@H](N)C", None),  # L-alanine in another writing
    (D_ALA, INVERTS_ALA), ("OC(=O)[C@H](N)C", INVERTS_ALA),
    ("CC(N)C(=O)O", "sets the stereocentre at atom 2 (S): traced to no specified stereocentre of the reactants (a "
                    "stereoselective step or a separation)")])
def test_a_step_that_sets_or_inverts_a_stereocentre_is_flagged(reactant, flag):
    """Boc-L-alanine proposed from D-alanine, or from alanine written without stereo, was shown without a word."""
    assert planning.stereo_flags(BOC_L_ALA, (reactant, BOC2O)) == ((flag,) if flag else ())


@pytest.mark.parametrize("product, reactants, flagged", [
    ("C[C@H](N)C(=O)N[C@@H](C)C(=O)O", (L_ALA, L_ALA), ""),  # L-Ala-L-Ala: each alanine traced to its own half
    ("C[C@H](N)C(=O)N[C@H](C)C(=O)O", (L_ALA, D_ALA), ""),  # L-Ala-D-Ala, the reactants in either order
    ("C[C@H](N)C(=O)N[C@H](C)C(=O)O", (D_ALA, L_ALA), ""),
    ("C[C@H](N)C(=O)N[C@H](C)C(=O)O", (L_ALA, L_ALA), "inverts the stereocentre at atom 7 (R)"),
    ("CC[C@@H](C)N=[N+]=[N-]", ("CC[C@H](C)Br", "[N-]=[N+]=[N-]"), "inverts the stereocentre at atom 3 (R)"),  # SN2
    ("CC[C@@H](C)N=[N+]=[N-]", ("CC[C@@H](C)Br", "[N-]=[N+]=[N-]"), ""),  # the azide where the bromide stood
    ("C[C@H](O)c1ccccc1", ("CC(=O)c1ccccc1",), "sets the stereocentre at atom 2 (S)"),  # a ketone reduced
    ("CCO", ("CC=O",), ""),
])
def test_the_stereo_trace_gives_each_reactant_its_own_atoms_and_compares_arrangements(product, reactants, flagged):
    assert [flag.split(":")[0] for flag in planning.stereo_flags(product, reactants)] == ([flagged] if flagged else [])


def test_the_stereo_trace_does_not_depend_on_how_the_smiles_are_written():
    """The arrangement is compared around the atoms, not by the order a SMILES writes them in."""
    from rdkit import Chem

    glucose = "OC[C@H]1O[C@H](O)[C@H](O)[C@@H](O)[C@@H]1O"
    mirror = glucose.replace("@@", "!").replace("@", "@@").replace("!", "@")
    for root in (0, 4, 9):  # three writings, each from another atom
        written = Chem.MolToSmiles(Chem.MolFromSmiles(glucose), rootedAtAtom=root)
        assert planning.stereo_flags(glucose, (written,)) == ()
        mirrored = Chem.MolToSmiles(Chem.MolFromSmiles(mirror), rootedAtAtom=root)
        assert planning.stereo_flags(glucose, (mirrored,))[0].startswith("inverts the stereocentres at atoms ")


SETS_E = ("sets the geometry of the double bond at atoms {}={} (E): traced to no double bond of the reactants with its "
          "geometry given (an E/Z-selective step, such as a Wittig or Heck reaction, or a separation)")
ISOMERIZES = "isomerizes the double bond at atoms {}={} ({}): traced to a reactant double bond of the other geometry"


@pytest.mark.parametrize("product, reactants, flags", [
    ("CC/C=C/C(=O)OCC", ("CC/C=C/C(=O)O", "CCO"), ()),  # an ester of (E)-pent-2-enoic acid from the E acid
    ("CC/C=C/C(=O)OCC", ("CC/C=C\\C(=O)O", "CCO"), (ISOMERIZES.format(3, 4, "E"),)),  # from the Z acid
    ("CC/C=C/C(=O)OCC", ("CCC=CC(=O)O", "CCO"), (SETS_E.format(3, 4),)),  # from the acid of either geometry
    ("O=C(O)/C=C/c1ccccc1", ("C=CC(=O)O", "Brc1ccccc1"), (SETS_E.format(4, 5),)),  # a Heck reaction
    ("C/C=C/c1ccccc1", ("CC#Cc1ccccc1",), (SETS_E.format(2, 3),)),  # an alkyne reduced
    ("C/C=C/c1ccccc1", ("C/C=C/Br", "OB(O)c1ccccc1"), ()),  # a Suzuki coupling: the aryl where the bromine was
    ("C/C=C/c1ccccc1", ("C/C=C\\Br", "OB(O)c1ccccc1"), (ISOMERIZES.format(2, 3, "E"),)),
    ("F/C=C(/Cl)c1ccccc1", ("F/C=C(\\Cl)Br", "OB(O)c1ccccc1"), (ISOMERIZES.format(2, 3, "E"),)),  # 3 substituents
    ("C/C=C/C=C/C(=O)OC", ("C/C=C/C=C\\C(=O)O", "CO"), (ISOMERIZES.format(4, 5, "E"),)),  # the one of two changed
])
def test_a_step_that_sets_or_isomerizes_a_double_bonds_geometry_is_flagged(product, reactants, flags):
    """E/Z was not checked: a Z-alkene proposed for an E one, or an ester whose acid's geometry no reactant gives,
    passed without a word, where a stereocentre the same would be flagged."""
    assert planning.stereo_flags(product, reactants) == flags


def test_the_double_bond_trace_does_not_depend_on_how_the_smiles_are_written():
    from rdkit import Chem

    for root in (0, 3, 5):
        written = Chem.MolToSmiles(Chem.MolFromSmiles("C/C=C/c1ccccc1"), rootedAtAtom=root)
        assert planning.stereo_flags("C/C=C/c1ccccc1", (written,)) == ()
        assert planning.stereo_flags("C/C=C\\c1ccccc1", (written,)) == (ISOMERIZES.format(2, 3, "Z"),)


def test_a_step_too_large_to_trace_in_time_says_its_stereo_was_not_checked(monkeypatch):
    """Past its deadline a step's centres would be flagged as set for want of a trace: it says so instead."""
    monkeypatch.setattr(planning, "STEREO_DEADLINE_S", -1.0)
    assert planning.stereo_flags("C[C@H](NC(C)=O)C(=O)O", (L_ALA, "CC(=O)Cl")) == (
        "was not checked for stereo: tracing its atoms to the reactants took too long",)


def stereo_plan_result() -> planning.PlanResult:
    """Boc-L-alanine from D-alanine (0.5, its centre inverted) or from L-alanine (0.3)."""
    table = {BOC_L_ALA: [(f"{D_ALA}.{BOC2O}", 0.5), (f"{L_ALA}.{BOC2O}", 0.3)]}
    stock = Stock([D_ALA, L_ALA, BOC2O], "table")
    graph, _ = planning.search_algorithm("retro*", TableModel(table), stock, 2.0, 2).run_from_mol(Molecule(BOC_L_ALA))
    routes = planning.extract_routes(graph, stock, max_routes=10)
    return planning.PlanResult(BOC_L_ALA, tuple(routes), planning.SearchStats("retro*", 1.0, 2.0, 1, len(graph)),
                               "table", None, "table", len(stock))


def test_a_routes_stereo_flags_reach_its_json_and_csv():
    result = stereo_plan_result()
    inverted, kept = result.routes
    assert inverted.target.made_by.stereo == (INVERTS_ALA,) and kept.target.made_by.stereo == ()
    assert planning.route_stereo(inverted) == [f"step 1 ({BOC_L_ALA}) {INVERTS_ALA}"]
    trees = [route["tree"]["reaction"] for route in planning.routes_json(result)["routes"]]
    assert [tree["stereo"] for tree in trees] == [[INVERTS_ALA], []]
    rows = list(planning.route_rows(result))
    assert [row[ROUTE_COLUMNS.index("stereo")] for row in rows] == [INVERTS_ALA, ""]


def test_cli_plan_prints_the_stereo_flags_under_their_route(tmp_path, capsys, monkeypatch):
    (tmp_path / "stock.smi").write_text("NO\n")
    monkeypatch.setattr(planning, "plan", lambda *args, **kwargs: stereo_plan_result())
    assert main(["plan", "--smiles", BOC_L_ALA, "--model", str(COPY_MODEL), "--forward", "none", "--stock",
                 str(tmp_path / "stock.smi"), "--time-limit", "1", "--out", str(tmp_path / "routes.json")]) == 0
    printed = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(printed) if line.startswith("route 1:"))
    assert printed[first + 1] == f"  stereo: step 1 ({BOC_L_ALA}) {INVERTS_ALA}"
    assert printed[first + 2].startswith("route 2:")


# ---- the Predictor as a reaction model ------------------------------------------------------------


def test_wrapper_turns_sane_answers_into_reactions(copy_predictor):
    model = PredictorModel(copy_predictor, n_best=3, check_atoms=False)
    [reactions] = model([Molecule("NCCO")])
    answers = copy_predictor.predict("NCCO", method=EXACT_NBEST, n_best=3).predictions
    sane = [p for p in answers if p.sane]
    assert len(sane) < len(answers)  # the copy model's third answer is not a molecule: skipped
    assert [r.reactants_str for r in reactions] == [p.smiles for p in sane]
    first = reactions[0]
    assert first.product == Molecule("NCCO") and first.reactants_str == "NO"
    assert first.metadata["score"] == pytest.approx(sane[0].score)
    assert first.metadata["probability"] == pytest.approx(math.exp(sane[0].score))
    assert first.metadata["model_rank"] == 1 and "round_trip" not in first.metadata
    counts = model.counts
    assert (counts.molecules, counts.answers, counts.kept) == (1, len(answers), len(sane))
    model([Molecule("NCCO")])
    assert model.num_calls() == 1  # syntheseus's cache: a molecule is expanded once per search


def test_wrapper_reads_each_molecule_in_several_writings_when_asked(tmp_path):
    """augment reaches the single-step model: the expansion's reactions are the pooled answers."""
    folder = tmp_path / "reader"
    shutil.copytree(COPY_MODEL, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "data_stats": {"augment": 20}}))
    reader = Predictor.load(folder, "cpu")
    [reactions] = PredictorModel(reader, n_best=3, check_atoms=False, augment=3)([Molecule("OCCOc1ccccc1")])
    pooled = [p for p in reader.predict("OCCOc1ccccc1", method=EXACT_NBEST, n_best=3, augment=3).predictions if p.sane]
    assert [r.reactants_str for r in reactions] == [p.smiles for p in pooled]
    assert [r.metadata["score"] for r in reactions] == pytest.approx([p.score for p in pooled])


def test_plan_refuses_augment_for_a_model_trained_on_one_writing(copy_predictor):
    with pytest.raises(ValueError, match="trained on one writing"):
        plan("NCCO", copy_predictor, Stock(["NO"]), time_limit_s=1.0, settings=PlanSettings(augment=3))


def test_wrapper_carries_the_round_trip_flag(copy_predictor, copy_forward):
    model = PredictorModel(copy_predictor, copy_forward, n_best=2, check_atoms=False)
    [reactions] = model([Molecule("NCCO")])
    assert reactions and all(r.metadata["round_trip"] is False for r in reactions)  # NO does not give NCCO back
    assert all(0 <= r.metadata["forward_prob"] < 1 for r in reactions)
    result = plan("OCCN", copy_predictor, Stock(["NO"]), time_limit_s=2.0, forward=copy_forward, settings=COPY)
    assert planning.routes_json(result)["search"]["round_trips"] == result.stats.counts.round_trips > 0  # counted


def test_wrapper_skips_flagged_answers(copy_predictor):
    """The copy model's answer to dichlorine is dichlorine itself: flagged, so no reaction."""
    [reactions] = PredictorModel(copy_predictor, n_best=2, check_atoms=False)([Molecule("ClCl")])
    assert all("ClCl" not in r.reactants_str.split(".") for r in reactions)


@pytest.mark.parametrize("reactants, product, missing", [
    ("CC(=O)Cl.Nc1ccccc1", "CC(=O)Nc1ccccc1", {}),  # HCl leaves: more atoms on the left is fine
    ("CCNCC.Cc1cccc(C)c1N=C=O", "CCN(CC)CC(=O)Nc1c(C)cccc1C", {"C": 1}),  # lidocaine, one carbon short
    ("NO", "NCCO", {"C": 2}), ("[2H]C.O", "[2H]CO", {}),  # hydrogens, isotopes included, are not counted
])
def test_missing_atoms_counts_heavy_atoms_by_element(reactants, product, missing):
    assert missing_atoms(reactants, product) == missing


def test_wrapper_skips_answers_that_lack_atoms_of_the_product(copy_predictor):
    """Hydroxylamine cannot make ethanolamine: its two carbons come from nowhere."""
    model = PredictorModel(copy_predictor, n_best=3)
    [reactions] = model([Molecule("NCCO")])
    assert reactions == [] and model.counts.missing_atoms == 2 and model.counts.kept == 0
    assert not plan("NCCO", copy_predictor, Stock(["NO"]), time_limit_s=2.0).solved
    # Let through (--allow-missing-atoms), they are still counted: the count read 0 and the search used them
    model = PredictorModel(copy_predictor, n_best=3, check_atoms=False)
    [reactions] = model([Molecule("NCCO")])
    assert len(reactions) == model.counts.kept == model.counts.missing_atoms == 2


def test_a_routes_json_rounds_every_steps_figures_as_its_csv_does():
    """confidence and forward_prob came out unrounded (0.6296296296296297) beside the CSV's 0.6296."""
    from molspec_core.planning import RouteMolecule, RouteStep, _molecule_json

    step = RouteStep("NCCO", (RouteMolecule("NO", True),), -0.123456789, 1, confidence=0.6296296296296297,
                     round_trip=True, forward_prob=0.9472731093021304)
    reaction = _molecule_json(RouteMolecule("NCCO", False, step))["reaction"]
    assert (reaction["score"], reaction["confidence"], reaction["forward_prob"]) == (-0.1235, 0.6296, 0.9473)


# ---- plan and its exports --------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", planning.ALGORITHMS)
def test_plan_finds_a_route_and_exports_it(copy_predictor, algorithm):
    calls = []
    result = plan("OCCN", copy_predictor, Stock(["NO"], "mine"), time_limit_s=2.0, algorithm=algorithm,
                  settings=COPY, progress=lambda elapsed, molecules: calls.append(molecules))
    assert result.solved and result.target == "NCCO"
    best = result.routes[0]
    assert best.n_steps == 1 and [m.smiles for m in best.starting_materials()] == ["NO"]
    stats = result.stats
    assert stats.algorithm == algorithm and stats.model_calls >= 1 and stats.nodes > 1
    assert stats.time_s < 2.0 + 5.0 and calls and calls[-1] == stats.model_calls
    exported = json.loads(json.dumps(planning.routes_json(result)))
    assert exported["solved"] and exported["stock"] == {"source": "mine", "size": 1, "unreadable": 0,
                                                    "first_unreadable": None, "column": None, "sheet": None}
    tree = exported["routes"][0]["tree"]
    assert tree["smiles"] == "NCCO" and not tree["in_stock"]
    assert tree["reaction"]["reactants"] == [{"smiles": "NO", "in_stock": True}]
    assert exported["search"]["model_calls"] == stats.model_calls
    assert exported["search"]["round_trips"] is None  # no forward model checked a step (it read 0)
    rows = list(csv.DictReader(io.StringIO(csv_bytes(ROUTE_COLUMNS, planning.route_rows(result)).decode("utf-8-sig"))))
    assert rows[0]["route"] == "1" and rows[0]["product"] == "NCCO" and rows[0]["reactants"] == "NO"
    assert rows[0]["reactants_in_stock"] == "yes" and rows[0]["product_in_stock"] == "no"
    assert len(rows) == sum(route.n_steps for route in result.routes)


@pytest.mark.parametrize("target", ["NO>>OCCN", "NO>CO>OCCN"])
def test_plan_of_a_recorded_reaction_plans_for_its_product_with_a_note(copy_predictor, target):
    """The Predict page's retrosynthesis reads 'reactants>>product' for its product; plan refused it."""
    result = plan(target, copy_predictor, Stock(["NO"]), time_limit_s=2.0, settings=COPY)
    assert result.solved and result.target == "NCCO"
    assert result.target_notes == ("Read as a reaction SMILES: the routes are planned for its product, OCCN; its "
                                   "recorded reactants, NO, are not used by the search.",)
    assert planning.recorded_reaction(">>OCCN") == (">>OCCN", ())  # the service reads a product alone itself


def test_plan_without_a_route_says_so(copy_predictor):
    result = plan("ClCCCl", copy_predictor, Stock(["NO"]), time_limit_s=2.0, settings=COPY)
    assert not result.solved and result.routes == ()
    assert result.stats.model_calls >= 1
    assert planning.routes_json(result)["routes"] == [] and list(planning.route_rows(result)) == []


def test_a_search_that_runs_out_of_molecules_says_so_not_that_its_time_ran_out(copy_predictor):
    """ClCCCl: the copy model's answers lead nowhere, and the search stops long before its 20 s. It was told
    'no route within 20 s, try a longer time' (QA: a 40-unit peptide stopped at 11 s of 30)."""
    result = plan("ClCCCl", copy_predictor, Stock(["NO"]), time_limit_s=20.0, settings=COPY)
    stats = result.stats
    assert not result.solved and stats.ran_out and stats.search_s < 20.0
    message = planning.no_route(stats)
    assert "ran out of molecules to expand" in message and "more time would not help" in message
    assert "within 20 s" not in message
    assert planning.routes_json(result)["search"]["ran_out_of_molecules"] is True
    timed_out = dataclasses.replace(stats, search_s=20.01)  # a search its time limit stopped
    assert not timed_out.ran_out and planning.no_route(timed_out) == "no route to the stock was found within 20 s"



def shortened_predict(answer: str):
    """Predictor.predict as it answers a chain longer than it can write: three valid answers, each short of carbons."""
    from molspec_core.service import Prediction

    def predict(self, queries, **options):
        return [QueryResult(query, query, predictions=tuple(Prediction(rank, answer, -rank, True, ("C",), (-1,))
                                                            for rank in (1, 2, 3)), method="beam", task="retro")
                for query in ([queries] if isinstance(queries, str) else queries)]
    return predict


def test_a_target_whose_answers_all_lack_its_atoms_is_not_told_a_larger_stock_might_help(copy_predictor,
                                                                                          monkeypatch):
    """A 400-carbon chain: the model wrote every answer shorter than the chain, all skipped for lacking its atoms, and
    the search was said to have 'run out of molecules to expand (the model proposed no usable reactants that lead to
    the stock within the step limit)', the Routes page adding 'A larger stock might help': no step from the target
    was usable, so neither the step limit nor the stock had a say."""
    monkeypatch.setattr(Predictor, "predict", shortened_predict("CCCCO.CCBr"))
    result = plan("C" * 12, copy_predictor, Stock(["CCO"]), time_limit_s=20.0, settings=PlanSettings(n_best=3))
    stats = result.stats
    assert stats.ran_out and (stats.counts.answers, stats.counts.missing_atoms, stats.counts.kept) == (3, 3, 0)
    assert planning.no_route(stats) == (
        f"no route to the stock was found, and the search stopped after {stats.search_s:.1f} s of its 20 s: the model "
        "proposed no usable reactants for the target itself (all 3 of its answers lacked atoms of the target), so "
        "neither more time nor a larger stock would help")
    counts = dataclasses.replace(stats.counts, missing_atoms=1)  # the other two invalid or flagged
    assert planning.unusable(counts) == \
        " (of its 3 answers, 2 were invalid or flagged and 1 lacked atoms of the target)"
    assert planning.unusable(dataclasses.replace(counts, answers=1, missing_atoms=0)) == \
        " (its answer was invalid or flagged)"


def failing_predict(error: str):
    """Predictor.predict as it answers when every query fails (cut at the time limit per query)."""
    def predict(self, queries, **options):
        return [QueryResult(query, error=error) for query in ([queries] if isinstance(queries, str) else queries)]
    return predict


STOPPED = "stopped after the 0.1 s time limit per query; try greedy or a smaller n_best"


def test_a_failed_expansion_is_not_counted_as_expanded_and_keeps_its_reason(copy_predictor, monkeypatch):
    """A target the model failed on counted as a molecule expanded, and the reason was dropped."""
    monkeypatch.setattr(Predictor, "predict", failing_predict(STOPPED))
    model = PredictorModel(copy_predictor, n_best=3, check_atoms=False)
    assert model([Molecule("NCCO")]) == [[]]
    counts = model.counts
    assert (counts.molecules, counts.failed, counts.first_failure) == (0, 1, f"NCCO: {STOPPED}")
    result = plan("NCCO", copy_predictor, Stock(["NO"]), time_limit_s=2.0, settings=COPY)
    assert result.stats.counts.molecules == 0 and result.stats.model_calls == 1  # asked once, expanded never
    search = planning.routes_json(result)["search"]
    assert (search["molecules_expanded"], search["failed_expansions"], search["first_failure"]) == (
        0, 1, f"NCCO: {STOPPED}")


def test_an_expansion_the_searchs_time_cut_short_is_named_so_not_by_a_per_query_limit(copy_predictor, monkeypatch):
    """The last expansion of a search run to its limit failed with 'stopped after the 0.122207 s time limit per
    query', a limit no one set: it is the search's own time running out."""
    import time

    monkeypatch.setattr(Predictor, "predict", failing_predict("stopped after the 0.122207 s time limit per query"))
    model = PredictorModel(copy_predictor, n_best=3, check_atoms=False)
    model.deadline = time.monotonic() - 0.01  # the search's time has run out
    model([Molecule("NCCO")])
    counts = model.counts
    assert (counts.molecules, counts.failed, counts.cut) == (0, 1, 1)
    assert counts.first_failure == "NCCO: its expansion was cut short when the search's time ran out"


def test_a_molecule_read_in_several_writings_gets_the_searchs_time_left_not_a_share_of_it(copy_predictor, monkeypatch):
    """MCTS asks for several molecules at once, and each had a share of the search's time left as its limit (the time
    left over their number). Read in several writings (the Routes page's default), the service reads them one after
    another, each under that limit: imatinib, asked with ethanol and ethylamine 4.5 s before the search's end, was
    stopped after 1.5 s while the search had time, and the page warned that the model gave no answers for it, 'stopped
    after the 1.49988 s time limit per query; try greedy, a smaller n_best, fewer writings or a longer time limit'.
    Each is asked alone, under the time left when it starts; read in one writing, they are decoded together, their
    batch under the time left (the shares' sum)."""
    import time

    asked = []

    def predict(self, queries, **options):
        asked.append((list(queries), options["time_limit_s"]))
        return [QueryResult(query, canonical_query=query) for query in queries]

    monkeypatch.setattr(Predictor, "predict", predict)
    molecules = [Molecule("NCCO"), Molecule("NO"), Molecule("CCO")]
    for augment, batches in ((5, [["NCCO"], ["NO"], ["CCO"]]), (1, [["NCCO", "NO", "CCO"]])):
        asked.clear()
        model = PredictorModel(copy_predictor, n_best=3, check_atoms=False, augment=augment)
        model.deadline = time.monotonic() + 1000.0
        model(molecules)
        assert [queries for queries, _ in asked] == batches
        assert all(limit * len(queries) > 900 for queries, limit in asked)  # the time left, not a third of it


# Acetanilide from acetic acid and aniline, neither in stock: MCTS asks for both molecules in one expansion
ACETIC_ACID, ANILINE = "CC(=O)O", "Nc1ccccc1"
PAIR_TABLE = {TARGET: [(f"{ACETIC_ACID}.{ANILINE}", 0.6)], ACETIC_ACID: [("COC(C)=O", 0.7)],
              ANILINE: [("O=[N+]([O-])c1ccccc1", 0.8)]}
PAIR_STOCK = Stock(["COC(C)=O", "O=[N+]([O-])c1ccccc1"], "pair")


def table_predict(table: dict[str, list[tuple[str, float]]], asked: list[list[str]], steps: int = 3):
    """Predictor.predict answering from a table, each query after `steps` decoder steps that look at the caller's stop
    (limits.check_abandoned), given up as the service gives a call up (PartlyDecoded)."""
    from molspec_core.limits import Abandoned, check_abandoned
    from molspec_core.service import PartlyDecoded, Prediction

    def predict(self, queries, **options):
        asked.append(list(queries))
        results: list[QueryResult | None] = [None] * len(queries)
        try:
            for i, query in enumerate(queries):
                for _ in range(steps):
                    check_abandoned()
                results[i] = QueryResult(query, canonical_query=query, predictions=tuple(
                    Prediction(rank, smiles, math.log(prob), True, (), (), model_rank=rank)
                    for rank, (smiles, prob) in enumerate(table.get(query, []), start=1)))
        except Abandoned as exc:
            raise PartlyDecoded(str(exc), results) from exc
        return results
    return predict


def stop_at_call(number: int, calls: list[int]):
    """A progress callback that stops the search at its call `number` (1-based), each call's molecule count kept."""
    def progress(elapsed_s: float, molecules: int) -> None:
        calls.append(molecules)
        if len(calls) == number:
            raise planning.SearchStopped()
    return progress


def test_a_stop_is_heard_between_the_molecules_of_one_expansion(copy_predictor, monkeypatch):
    """The Routes page's Stop was heard only after a whole expansion: MCTS asks for several molecules at once, each
    read in 5 writings on the page, and a stop waited for all of them, seconds on a busy CPU. Read in several writings,
    the progress callback is told after each molecule: a stop there leaves the next one unasked, and the molecule read
    keeps its reactions."""
    asked: list[list[str]] = []
    monkeypatch.setattr(Predictor, "predict", table_predict(PAIR_TABLE, asked))
    monkeypatch.setattr(planning, "PROGRESS_EVERY_S", 1e9)  # no call within a molecule's decoding
    calls: list[int] = []
    model = PredictorModel(copy_predictor, check_atoms=False, augment=5, progress=stop_at_call(1, calls))
    reactions = model([Molecule(ACETIC_ACID), Molecule(ANILINE)])
    assert asked == [[ACETIC_ACID]] and calls == [1]  # told after the acid, the aniline never asked
    assert [[r.reactants_str for r in found] for found in reactions] == [["COC(C)=O"], []]
    assert model.stop is not None and model.counts.molecules == 1


def test_a_stop_is_heard_while_a_molecule_is_decoded(copy_predictor, monkeypatch):
    """Told every PROGRESS_EVERY_S between the decoder's steps too (here at every step), a stop ends the molecule's
    decoding there: it is not expanded, nor is the molecule after it."""
    asked: list[list[str]] = []
    monkeypatch.setattr(Predictor, "predict", table_predict(PAIR_TABLE, asked))
    monkeypatch.setattr(planning, "PROGRESS_EVERY_S", 0.0)
    calls: list[int] = []
    model = PredictorModel(copy_predictor, check_atoms=False, augment=5, progress=stop_at_call(2, calls))
    assert model([Molecule(ACETIC_ACID), Molecule(ANILINE)]) == [[], []]
    assert asked == [[ACETIC_ACID]] and calls == [0, 0]  # stopped at the acid's second step
    assert model.stop is not None and (model.counts.molecules, model.counts.failed) == (0, 0)


@pytest.mark.parametrize("augment", [1, 5])
def test_a_search_told_its_progress_at_every_step_finds_what_it_finds_untold(copy_predictor, monkeypatch, augment):
    """The progress callback told between molecules and decoder steps changes nothing a search that it does not stop
    asks or finds: the same molecules asked in the same calls, the same routes in the same order."""
    monkeypatch.setattr(planning, "PROGRESS_EVERY_S", 0.0)

    def search(progress) -> tuple[list[list[str]], list[list[str]]]:
        asked: list[list[str]] = []
        monkeypatch.setattr(Predictor, "predict", table_predict(PAIR_TABLE, asked))
        model = PredictorModel(copy_predictor, n_best=3, check_atoms=False, augment=augment, progress=progress)
        graph, _ = planning.search_algorithm("mcts", model, PAIR_STOCK, time_limit_s=30.0,
                                             max_steps=3).run_from_mol(Molecule(TARGET))
        routes = planning.extract_routes(graph, PAIR_STOCK, max_routes=10)
        return asked, [[step.product for _, step in route.steps()] for route in routes]

    calls: list[int] = []
    told = search(lambda elapsed_s, molecules: calls.append(molecules))
    assert told == search(None)
    asked, routes = told
    # the target, then both its reactants in one expansion: one call, or one call each where read in writings
    assert asked[0] == [TARGET] and sorted(sum(asked[1:], [])) == sorted([ACETIC_ACID, ANILINE])
    assert len(asked) == (2 if augment == 1 else 3) and len(calls) > len(asked)
    assert len(routes) == 1 and sorted(routes[0]) == sorted([TARGET, ACETIC_ACID, ANILINE])


def test_an_expansion_begun_past_the_deadline_gets_its_floor_once_not_once_per_molecule(copy_predictor, monkeypatch):
    """Read in several writings, each molecule of an expansion begun past the search's deadline was given the 0.1 s
    floor: MCTS's three molecules ran 0.3 s past the time limit the chemist set, n of them n times 0.1 s. The
    expansion gets the floor once: each molecule is asked under what is left of it, and one with none left is not
    asked, counted as cut short at the search's end. (A fake clock: each query runs to its limit.)"""
    import types

    clock = [1000.0]
    monkeypatch.setattr(planning, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    limits: list[float] = []

    def predict(self, queries, **options):
        limits.append(options["time_limit_s"])
        clock[0] += options["time_limit_s"] * len(queries)
        return [QueryResult(query, error=STOPPED) for query in queries]

    monkeypatch.setattr(Predictor, "predict", predict)
    model = PredictorModel(copy_predictor, n_best=3, check_atoms=False, augment=5)
    model.deadline = clock[0] - 0.5  # the search's time ran out half a second ago
    started = clock[0]
    assert model([Molecule("NCCO"), Molecule("NO"), Molecule("CCO")]) == [[], [], []]
    assert limits == [pytest.approx(planning.EXPANSION_FLOOR_S)]  # the first used it all: the others not asked
    assert clock[0] - started == pytest.approx(planning.EXPANSION_FLOOR_S)
    counts = model.counts
    assert (counts.molecules, counts.failed, counts.cut) == (0, 3, 3)
    assert counts.first_failure == "NCCO: its expansion was cut short when the search's time ran out"


def test_an_expansion_the_time_limit_stopped_uses_the_answers_its_beam_had_ended(copy_predictor, monkeypatch):
    """A beam search the time limit stopped hands on the answers it had ended; the planner threw them away with the
    error (and syntheseus keeps an expansion, so the molecule never got them): the ended ones are used, the
    unfinished ones (TIMED_OUT) are not. Nor are they counted as answers the model proposed: a search whose last
    expansion was cut said 'Answers used 50%' where every answer the model had finished was used, and 'Answers used
    0%' for a target it had no time to expand."""
    from molspec_core.service import TIMED_OUT, Prediction

    def stopped(self, queries, **options):
        ended = Prediction(1, "CCO.NO", -0.5, True, (), ())
        unfinished = Prediction(2, "NO", -0.7, True, (), (), finished=False, concerns=(TIMED_OUT,))
        return [QueryResult(query, error=STOPPED, predictions=(ended, unfinished))
                for query in ([queries] if isinstance(queries, str) else queries)]

    monkeypatch.setattr(Predictor, "predict", stopped)
    model = PredictorModel(copy_predictor, n_best=3, check_atoms=False)
    [reactions] = model([Molecule("NCCO")])
    assert [str(r.reactants_str) for r in reactions] == ["CCO.NO"]
    counts = model.counts
    assert (counts.failed, counts.answers, counts.kept, counts.first_failure) == (1, 1, 1, f"NCCO: {STOPPED}")


def test_the_export_records_the_settings_that_made_the_routes(copy_predictor, copy_forward):
    """routes_json's docstring promised settings; it held the model's name and the search's alone."""
    settings = PlanSettings(n_best=3, max_steps=2, round_trip_k=2, check_atoms=False)
    result = plan("OCCN", copy_predictor, Stock(["NO", "xyz"]), time_limit_s=2.0, algorithm="mcts", max_routes=4,
                  forward=copy_forward, settings=settings)
    exported = planning.routes_json(result)
    assert exported["settings"] == {
        "model": "copy_model", "forward_model": "forward", "algorithm": "mcts", "time_limit_s": 2.0, "max_routes": 4,
        "method": EXACT_NBEST, "n_best": 3, "max_steps": 2, "check_atoms": False, "augment": 1, "batch_size": 8,
        "dtype": "float32", "round_trip_k": 2}
    alone = planning.routes_json(plan("OCCN", copy_predictor, Stock(["NO"]), time_limit_s=1.0, settings=COPY))
    assert alone["settings"]["round_trip_k"] is None  # no forward model: no step checked, at any k


def test_the_export_counts_the_stocks_unreadable_entries(copy_predictor, tmp_path):
    """The CLI printed '2 unreadable entries left out'; the JSON kept the stock's name and size alone."""
    (tmp_path / "shelf.smi").write_text("NO\nC1CC\nxyz\n")
    result = plan("NCCO", copy_predictor, load_stock(tmp_path / "shelf.smi"), time_limit_s=1.0, settings=COPY)
    assert result.stock_unreadable == 2
    assert planning.routes_json(result)["stock"] == {  # and which was first, as the Routes page says it
        "source": "shelf.smi", "size": 1, "unreadable": 2,
        "first_unreadable": "RDKit cannot parse 'C1CC' as a molecule: ring bond 1 opened at position 2 is never closed",
        "column": None, "sheet": None}  # a SMILES file has no column to name


def test_the_csv_writes_every_flag_as_yes_or_no_and_an_unchecked_one_empty(copy_predictor, copy_forward):
    """round_trip came out True/False beside the stock columns' yes/no."""
    def column(result, name: str) -> set[str]:
        rows = csv.DictReader(io.StringIO(csv_bytes(ROUTE_COLUMNS, planning.route_rows(result)).decode("utf-8-sig")))
        return {row[name] for row in rows}

    checked = plan("OCCN", copy_predictor, Stock(["NO"]), time_limit_s=2.0, forward=copy_forward, settings=COPY)
    assert column(checked, "round_trip") <= {"yes", "no"} and column(checked, "round_trip")
    unchecked = plan("OCCN", copy_predictor, Stock(["NO"]), time_limit_s=2.0, settings=COPY)
    assert column(unchecked, "round_trip") == {""}  # not checked: neither yes nor no


def stop_at_expansion(monkeypatch, number: int, stop: type[BaseException] = KeyboardInterrupt) -> None:
    """The search's expansion `number` (1-based) raises `stop`, as Ctrl-C raises KeyboardInterrupt mid-search."""
    real = PredictorModel._get_reactions
    calls: list[int] = []

    def get_reactions(self, inputs, num_results):
        calls.append(len(inputs))
        if len(calls) == number:
            raise stop
        return real(self, inputs, num_results)

    monkeypatch.setattr(PredictorModel, "_get_reactions", get_reactions)


@pytest.mark.parametrize("algorithm", planning.ALGORITHMS)
def test_a_search_stopped_part_way_keeps_the_routes_it_had_found(copy_predictor, monkeypatch, algorithm):
    """Ctrl-C in a long search lost every route it had found: the stop now carries them, and says it cut the search
    short (not that it ran out of molecules, which its early end would otherwise read as)."""
    stop_at_expansion(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt) as stopped:
        plan("NCCO", copy_predictor, Stock(["NO"]), time_limit_s=60.0, algorithm=algorithm, settings=COPY)
    partial = stopped.value.partial_result
    assert [m.smiles for m in partial.routes[0].starting_materials()] == ["NO"]
    stats = partial.stats
    assert stats.stopped_by == "KeyboardInterrupt" and not stats.ran_out and stats.counts.molecules == 1
    search = planning.routes_json(partial)["search"]
    assert search["stopped_by"] == "KeyboardInterrupt" and search["ran_out_of_molecules"] is False
    stop_at_expansion(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt) as stopped:
        plan("NCCO", copy_predictor, Stock(["NO"]), time_limit_s=60.0, algorithm=algorithm, settings=COPY)
    assert stopped.value.partial_result.routes == ()
    assert "before the search was stopped" in planning.no_route(stopped.value.partial_result.stats)


@pytest.mark.parametrize("algorithm", planning.ALGORITHMS)
def test_a_progress_callback_ends_the_search_keeping_the_expansion_it_reports(copy_predictor, monkeypatch, algorithm):
    """The Routes page's Stop came through its progress callback, which raised mid-expansion: the search was lost,
    with the routes of the expansion just made. SearchStopped from the callback ends the search after that expansion,
    and plan raises it again carrying every route found, that expansion's too."""
    monkeypatch.setattr(planning, "PROGRESS_EVERY_S", 1e9)  # told after each expansion alone, not while it decodes
    reports: list[int] = []

    def stop(elapsed_s: float, molecules: int) -> None:
        reports.append(molecules)
        raise planning.SearchStopped()

    with pytest.raises(planning.SearchStopped) as stopped:
        plan("NCCO", copy_predictor, Stock(["NO"]), time_limit_s=60.0, algorithm=algorithm, settings=COPY,
             progress=stop)
    partial = stopped.value.partial_result
    assert reports == [1]  # no expansion after the stop
    assert [m.smiles for m in partial.routes[0].starting_materials()] == ["NO"]  # the one expansion's route
    assert partial.stats.stopped_by == "SearchStopped" and not partial.stats.ran_out


def test_a_search_between_expansions_still_reports_and_hears_a_stop(copy_predictor, monkeypatch):
    """MCTS walks the tree it has for many iterations between expansions, which call no model: its progress callback,
    called only after each expansion, went unheard for 20 s of the copy model's search for NCCNCCNCCO (the Routes
    page's bar stood still, its Stop did nothing), and could for the whole time limit. It is called between
    expansions too, every PROGRESS_EVERY_S (here at every check, so that the test waits for no clock)."""
    monkeypatch.setattr(planning, "PROGRESS_EVERY_S", 0.0, raising=False)
    reports: list[int] = []
    decoding = [False]  # the callback is told while a molecule decodes too: those calls are not this test's
    real = Predictor.predict

    def predict(self, *args, **options):
        decoding[0] = True
        try:
            return real(self, *args, **options)
        finally:
            decoding[0] = False

    monkeypatch.setattr(Predictor, "predict", predict)

    def stop_when_nothing_was_expanded(elapsed_s: float, molecules: int) -> None:
        if decoding[0]:
            return
        if reports and reports[-1] == molecules:  # called again with no expansion since
            raise planning.SearchStopped()
        reports.append(molecules)

    with pytest.raises(planning.SearchStopped) as stopped:
        plan("NCCNCCNCCO", copy_predictor, Stock(["Br"]), time_limit_s=30.0, algorithm="mcts", settings=COPY,
             progress=stop_when_nothing_was_expanded)
    assert stopped.value.partial_result.stats.stopped_by == "SearchStopped"


class PageStop(BaseException):
    """As Streamlit stops or reruns a page: a BaseException neither Ctrl-C nor SIGTERM."""


def test_a_page_stopped_or_rerun_mid_search_is_not_kept_waiting_for_partial_routes(copy_predictor, monkeypatch):
    stop_at_expansion(monkeypatch, 2, PageStop)
    with pytest.raises(PageStop) as stopped:
        plan("NCCO", copy_predictor, Stock(["NO"]), time_limit_s=60.0, settings=COPY)
    assert not hasattr(stopped.value, "partial_result")  # raised on at once, no routes read out of the graph


def test_cli_plan_stopped_part_way_writes_and_shows_the_routes_it_had_found(tmp_path, capsys, monkeypatch):
    """Ctrl-C (exit 130) or SIGTERM (143) mid-search wrote nothing: the routes found by then are written and shown."""
    from molspec_core.boundary import Terminated

    (tmp_path / "stock.smi").write_text("NO\n")
    out = tmp_path / "routes.json"
    args = ["plan", "--smiles", "NCCO", "--model", str(COPY_MODEL), "--forward", "none", "--stock",
            str(tmp_path / "stock.smi"), "--time-limit", "60", "--allow-missing-atoms", "--out", str(out)]
    for stop, code in ((KeyboardInterrupt, 130), (Terminated, 143)):
        stop_at_expansion(monkeypatch, 2, stop)
        assert main(args) == code
        printed = capsys.readouterr().out
        assert f"the search was stopped ({stop.__name__})" in printed and "route 1: 1 step, probability " in printed
        report = json.loads(out.read_text())
        assert report["search"]["stopped_by"] == stop.__name__ and report["routes"][0]["starting_materials"] == ["NO"]
        with open(tmp_path / "routes.csv", newline="") as f:
            assert next(csv.DictReader(f))["reactants"] == "NO"
        out.unlink()


def test_a_target_in_stock_still_gets_its_routes(copy_predictor):
    result = plan("NCCO", copy_predictor, Stock(["NO", "NCCO"]), time_limit_s=2.0, settings=COPY)
    assert result.stats.target_in_stock and result.solved
    assert list(planning.route_rows(result))[0][ROUTE_COLUMNS.index("product_in_stock")] == "yes"


@pytest.mark.parametrize("target, message", [
    ("", "empty target"), ("   ", "empty target"), ("C1CC", "not a valid SMILES"),
    ("NCCO.O", "several molecules"), ("CC[Zz]", "not a valid SMILES"), ("CCS", "vocabulary"),
])
def test_bad_targets_get_clear_errors(copy_predictor, target, message):
    with pytest.raises(ValueError, match=message):
        plan(target, copy_predictor, Stock(["NO"]), time_limit_s=1.0)


@pytest.mark.parametrize("options, message", [
    ({"time_limit_s": 0}, "time limit"), ({"time_limit_s": math.nan}, "time limit"),
    ({"algorithm": "dfs"}, "unknown search algorithm"), ({"max_routes": 0}, "max_routes"),
    ({"settings": PlanSettings(max_steps=0)}, "max_steps"),
])
def test_bad_options_get_clear_errors(copy_predictor, options, message):
    with pytest.raises(ValueError, match=message):
        plan("NCCO", copy_predictor, Stock(["NO"]), **options)


@pytest.mark.parametrize("reaction, message", [("CC(=O)O.OCC>>", "reads a product, not a reaction SMILES"),
                                               ("NCCO>>NCCO.O", "'NCCO.O' has several molecules.*NCCO")])
def test_a_reaction_smiles_is_told_it_is_one_dots_or_not(tmp_path, reaction, message):
    """A reaction SMILES with a dot was told it had several molecules, not that the model reads a product. One with a
    product is planned for it (recorded_reaction); its product, not the reaction, is then what is refused."""
    folder = tmp_path / "retro"
    shutil.copytree(COPY_MODEL, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "task": "retro"}))
    with pytest.raises(ValueError, match=message):
        plan(reaction, Predictor.load(folder, "cpu"), Stock(["NO"]), time_limit_s=1.0)


BENZOATE = "O=C([O-])c1ccccc1, a salt's ion; plan for O=C(O)c1ccccc1"


@pytest.mark.parametrize("salt, main", [("O=C([O-])c1ccccc1.[Na+]", BENZOATE), ("[Na+].O=C([O-])c1ccccc1", BENZOATE),
                                        ("OCCN.Cl", "NCCO")])
def test_a_salt_target_is_told_its_main_molecule(copy_predictor, salt, main):
    """Sodium benzoate (typed, or from its molfile) was refused with no hint of what to plan for instead; then it was
    offered the benzoate ion, which the model's training data nearly never hold (the Predict page names the acid)."""
    with pytest.raises(ValueError, match="several molecules") as refused:
        plan(salt, copy_predictor, Stock(["NO"]), time_limit_s=1.0)
    assert str(refused.value).endswith(f"its main molecule (the most heavy atoms) is {main}")


# Ethanolamine's InChI as a drawing program copies it, its AuxInfo after it (the coordinates hold decimal points),
# and its hydrochloride's, whose formula layer joins the two molecules with a dot
ETHANOLAMINE_INCHI = ("InChI=1S/C2H7NO/c3-1-2-4/h4H,1-3H2\nAuxInfo=1/0/N:2,3,1,4/rA:4NCCO/rB:s1;s2;s3;/"
                      "rC:1.9796,-.1365,0;.5994,.4508,0;-.5994,-.4508,0;-1.9796,.1365,0;")
ETHANOLAMINE_HCL_INCHI = "InChI=1S/C2H7NO.ClH/c3-1-2-4;/h4H,1-3H2;1H"


def test_an_inchi_pasted_with_its_auxinfo_is_planned_for_as_the_predict_page_reads_it(copy_predictor):
    """An InChI copied with its AuxInfo (as ChemDraw and Marvin copy one) was refused as a target of 'several
    molecules': the dots of its coordinates were taken for a SMILES's, where the Predict page reads it as the InChI."""
    result = plan(ETHANOLAMINE_INCHI, copy_predictor, Stock(["NO"]), time_limit_s=1.0, settings=COPY)
    assert result.target == "NCCO"


def test_a_salts_inchi_is_told_its_main_molecule_as_its_smiles_is(copy_predictor):
    """A hydrochloride's InChI was refused as 'several molecules' and nothing more: its main molecule was looked for
    in the InChI's text, which RDKit cannot read as a SMILES."""
    with pytest.raises(ValueError, match="several molecules") as refused:
        plan(ETHANOLAMINE_HCL_INCHI, copy_predictor, Stock(["NO"]), time_limit_s=1.0)
    assert str(refused.value).endswith("plan a route to one at a time: its main molecule (the most heavy atoms) is "
                                       "NCCO")


@pytest.mark.parametrize("target, told", [
    ("1. NCCO", "a label or a number and then a SMILES: the SMILES alone is NCCO"),
    ("NCCO (1.5 g)", "a SMILES and then a name or title")])
def test_a_target_pasted_with_a_number_or_a_note_beside_it_is_told_its_smiles_not_several_molecules(copy_predictor,
                                                                                                   target, told):
    """A line of a numbered list ('1. CCO') or a SMILES with a note holding a decimal point was refused as a target of
    'several molecules' and nothing more (its dot taken for a SMILES's), where the Predict page reads the SMILES out
    of it and names it."""
    with pytest.raises(ValueError, match="a SMILES has no spaces") as refused:
        plan(target, copy_predictor, Stock(["NO"]), time_limit_s=1.0)
    assert told in str(refused.value)


@pytest.mark.parametrize("target", ["1.NCCO", "NCCO.C1CC"])
def test_a_target_rdkit_cannot_read_is_told_why_not_that_it_has_several_molecules(copy_predictor, target):
    """A numbered line without its space ('1.CCO') or a mixture with an unclosed ring was refused as 'the target ...
    has several molecules', which the first is not, and nothing said what RDKit could not read."""
    with pytest.raises(ValueError, match="not a valid SMILES") as refused:
        plan(target, copy_predictor, Stock(["NO"]), time_limit_s=1.0)
    assert "several molecules" not in str(refused.value)


def test_an_inorganic_salt_target_is_not_offered_its_cation():
    """Sodium chloride was told to plan a route to its main molecule, [Na+]."""
    refusal = planning.several_molecules("[Na+].[Cl-]")
    assert refusal == ("the target '[Na+].[Cl-]' has several molecules, none of them holding carbon: the "
                       "retrosynthesis model was trained on organic products (USPTO-50K), and its routes to an "
                       "inorganic compound mean nothing")


def test_a_target_the_model_was_not_trained_on_the_form_of_is_noted(copy_predictor):
    """Water (no carbon) and acetate (an ion a proton explains) were searched for without a word, where the Predict page
    notes both (service.several_products_note); the neutral form is named, and a quaternary ammonium, whose charge no
    proton explains, has no note."""
    assert planning.target_form_notes("O") == [f"The target holds no carbon: {planning.INORGANIC}."]
    acetate = planning.target_form_notes("CC(=O)[O-]")
    assert len(acetate) == 1 and acetate[0].endswith("To plan for the neutral compound, give CC(=O)O.")
    assert planning.target_form_notes("C[N+](C)(C)C") == [] and planning.target_form_notes("NCCO") == []
    result = plan("O", copy_predictor, Stock(["NO"]), time_limit_s=1.0, settings=COPY)
    assert result.target_notes == (f"The target holds no carbon: {planning.INORGANIC}.",)
    assert planning.routes_json(result)["target_notes"] == list(result.target_notes)


def test_plan_refuses_a_forward_model(copy_forward):
    with pytest.raises(ValueError, match="needs a retrosynthesis model"):
        plan("NCCO", copy_forward, Stock(["NO"]), time_limit_s=1.0)


def test_plan_refuses_a_round_trip_checker_that_is_no_forward_model_before_it_searches(copy_predictor, monkeypatch):
    """--forward retro was refused only once the target's expansion had been decoded (minutes on a CPU), from
    inside the search."""
    stop_at_expansion(monkeypatch, 1, AssertionError)  # no expansion may start
    with pytest.raises(ValueError, match="the round-trip check needs a forward model; copy_model is a"):
        plan("NCCO", copy_predictor, Stock(["NO"]), time_limit_s=1.0, forward=copy_predictor, settings=COPY)


# ---- the stock --------------------------------------------------------------------------------------


def test_stock_reads_smiles_lines_with_names_comments_and_maps(tmp_path):
    path = tmp_path / "stock.smi"
    path.write_text("# my shelf\nOCC ethanol\n\nC(O)C\n[CH3:1][OH:2]\nC1CC\n")
    stock = load_stock(path)
    assert sorted(m.smiles for m in stock.to_purchasable_mols()) == ["CCO", "CO"]
    assert stock.n_unreadable == 1 and stock.source == "stock.smi"
    assert stock.is_purchasable(Molecule("OCC"))


def test_a_stock_line_too_long_to_read_is_counted_unreadable_not_a_crash(tmp_path):
    """A 30,000-character line crashed the process (a segfault in RDKit's SMILES writer), the app's server with
    it when the stock was uploaded; 200,000 characters ran for minutes."""
    (tmp_path / "stock.smi").write_text("C" * 30_000 + "\nCCO\n")
    stock = load_stock(tmp_path / "stock.smi")
    assert stock.n_unreadable == 1 and stock.is_purchasable(Molecule("CCO"))


@pytest.mark.parametrize("name", ["stock.smi", "stock.txt", "stock.smi.gz"])
def test_a_stock_of_more_molecules_than_a_batch_file_holds_is_read(tmp_path, name):
    """A vendor's catalogue of building blocks (several hundred thousand) was refused with 'split it into files of
    at most 100,000 records', which no stock can follow: plan and the page take one stock file. (Blank lines make
    the file long here; each is a record, as a molecule's line is.)"""
    from molspec_core.io import MAX_INPUT_ROWS

    text = "smiles\nNO\n" + "\n" * MAX_INPUT_ROWS + "OCC ethanol\n"
    data = gzip.compress(text.encode()) if name.endswith(".gz") else text.encode()
    (tmp_path / name).write_bytes(data)
    for stock in (load_stock(tmp_path / name), planning.stock_from_upload(name, data)):
        assert sorted(m.smiles for m in stock.to_purchasable_mols()) == ["CCO", "NO"]
        assert stock.n_unreadable == 0 and stock.source == name


def test_a_stock_table_of_more_rows_than_a_batch_file_holds_says_how_to_give_it(tmp_path):
    from molspec_core.io import MAX_INPUT_ROWS

    (tmp_path / "stock.csv").write_text("smiles\n" + "CCO\n" * (MAX_INPUT_ROWS + 1))
    with pytest.raises(ValueError, match=r"more than 100,000 records.*A larger stock is read as SMILES, one per line"):
        load_stock(tmp_path / "stock.csv")


def test_a_salt_written_with_its_charges_gives_its_acid_or_base_as_its_neutral_writing_does(tmp_path):
    """CCN(CC)CCO.Cl put the amine in stock; CC[NH+](CC)CCO.[Cl-], the same hydrochloride, did not, nor did sodium
    benzoate its acid. An ion no proton explains stays as it is, and an inorganic one gives no parent."""
    lines = ["CC[NH+](CC)CCO.[Cl-]", "[Na+].[O-]C(=O)c1ccccc1", "[NH3+]CC(=O)[O-]", "[Na+].[BH4-]",
             "C[N+](C)(C)C.[Br-]", "O=[N+]([O-])c1ccccc1", "CC(=O)O[BH-](OC(C)=O)OC(C)=O.[Na+]"]
    (tmp_path / "stock.smi").write_text("\n".join(lines) + "\n")
    stock = load_stock(tmp_path / "stock.smi")
    assert sorted(m.smiles for m in stock.to_purchasable_mols()) == sorted([
        "CC[NH+](CC)CCO", "[Cl-]", "CCN(CC)CCO", "[Na+]", "O=C([O-])c1ccccc1", "O=C(O)c1ccccc1",
        "NCC(=O)O", "[NH3+]CC(=O)[O-]", "[BH4-]", "C[N+](C)(C)C", "[Br-]", "O=[N+]([O-])c1ccccc1",
        "CC(=O)O[BH-](OC(C)=O)OC(C)=O"])  # sodium triacetoxyborohydride: its charge is its hydride's


def test_a_racemate_in_the_stock_is_no_single_enantiomer(tmp_path):
    """A CXSMILES's enhanced stereo was cut off with the name: racemic alanine, C[C@H](N)C(=O)O |&1:1|, put
    L-alanine in stock, and a route to a single enantiomer started from it, marked in stock."""
    lines = ["C[C@H](N)C(=O)O |&1:1| racemic alanine", "C[C@@H](O)C(=O)O |o1:1|", "C[C@H](N)CC(=O)O |a:1|",
             "CC[C@H](C)O"]
    (tmp_path / "stock.smi").write_text("\n".join(lines) + "\n")
    (tmp_path / "stock.csv").write_text("smiles\n" + "\n".join(f'"{line.split(" racemic")[0]}"' for line in lines))
    for name in ("stock.smi", "stock.csv"):
        stock = load_stock(tmp_path / name)
        assert sorted(m.smiles for m in stock.to_purchasable_mols()) == [  # the absolute centres keep their stereo
            "CC(N)C(=O)O", "CC(O)C(=O)O", "CC[C@H](C)O", "C[C@H](N)CC(=O)O"]
        assert not stock.is_purchasable(Molecule(L_ALA))


def test_a_stock_entry_of_several_molecules_gives_each(tmp_path):
    """A salt was kept whole, so its base never matched a reactant and procaine found no route, without a word."""
    (tmp_path / "stock.smi").write_text("CCN(CC)CCO.Cl diethylaminoethanol hydrochloride\n")
    stock = load_stock(tmp_path / "stock.smi")
    assert sorted(m.smiles for m in stock.to_purchasable_mols()) == ["CCN(CC)CCO", "Cl"]


def test_a_stock_salt_drawn_with_its_bonds_is_in_stock_as_the_model_writes_it(tmp_path):
    """Sodium ethoxide, potassium carbonate and palladium(II) acetate drawn with their metal bonds (CCO[Na], as ChemDraw
    writes them) and DMSO with separated charges were kept as drawn, a writing the model never writes its reactants
    in (USPTO writes the ions, and S=O), so no route started from them: a query is read in USPTO's writing
    (chem.salts_as_ions), a stock's entries now are too, beside the writing given."""
    lines = ["CCO[Na] sodium ethoxide", "O=C(O[K])O[K]", "CC(=O)O[Pd]OC(C)=O", "C[S+](C)[O-] DMSO", "CC[Mg]Br"]
    (tmp_path / "stock.smi").write_text("\n".join(lines) + "\n")
    stock = load_stock(tmp_path / "stock.smi")
    for ion in ("CC[O-]", "[Na+]", "CCO", "O=C([O-])[O-]", "[K+]", "CC(=O)[O-]", "CC(=O)O", "[Pd+2]", "CS(C)=O"):
        assert stock.is_purchasable(Molecule(ion)), ion
    assert stock.is_purchasable(Molecule("CC[O][Na]")) and stock.is_purchasable(Molecule("CC[Mg]Br"))  # as given
    assert not stock.is_purchasable(Molecule("[Mg+2]"))  # a Grignard keeps its bonds, as USPTO writes it


def test_each_stock_entry_is_parsed_once(tmp_path, monkeypatch):
    """Each entry was parsed, written and parsed again (an ion a third time): most of the time `molspec plan` and
    the app's first search spent reading the default stock. The molecules are the same (the tests above)."""
    from rdkit import Chem

    lines = ["OCC ethanol", "CCN(CC)CCO.Cl", "[CH3:1][C@H:2]([CH3:3])[OH:4]", "CC[NH3+].[Cl-]", "C[C@H](N)C(=O)O"]
    (tmp_path / "stock.smi").write_text("\n".join(lines) + "\n")
    parsed: list[str] = []
    read = Chem.MolFromSmiles
    monkeypatch.setattr(Chem, "MolFromSmiles", lambda smiles, *args: parsed.append(smiles) or read(smiles, *args))
    stock = load_stock(tmp_path / "stock.smi")
    assert sorted(m.smiles for m in stock.to_purchasable_mols()) == sorted([
        "CCO", "CCN(CC)CCO", "Cl", "CC(C)O", "CC[NH3+]", "[Cl-]", "CCN", "C[C@H](N)C(=O)O"])
    entries = [line.split()[0] for line in lines]
    assert parsed == [*entries[:4], "CCN", entries[4]]  # and the ion's parent, as the Uncharger writes it


def test_stock_reads_an_sd_file_and_counts_the_records_rdkit_cannot_read(tmp_path):
    (tmp_path / "shelf.sdf").write_text(sd_file_text())
    stock = load_stock(tmp_path / "shelf.sdf")
    assert sorted(m.smiles for m in stock.to_purchasable_mols()) == ["C[C@H](N)C(=O)O", "Clc1ccncc1"]
    assert stock.n_unreadable == 2


def test_an_sd_stock_without_the_field_named_is_told_so_in_words_for_a_stock(tmp_path):
    """An SD stock with a field named that it lacks was refused as 'the query column 'SMILES' names no data field':
    a stock has no queries. The refusal names the field and the file's fields, for queries and stocks alike."""
    (tmp_path / "shelf.sdf").write_text(sd_file_text())
    with pytest.raises(InputFileError) as refused:
        load_stock(tmp_path / "shelf.sdf", "SMILES")
    assert str(refused.value) == ("this SD file has no data field 'SMILES' (its fields: ID, note); leave the field "
                                  "out to read each record's molecule")


def test_stock_reads_a_gzipped_csv_with_a_smiles_column(tmp_path):
    path = tmp_path / "catalogue.csv.gz"
    path.write_bytes(gzip.compress(b"id,smiles,price\nA1,c1ccccc1N,3\nA2,OC(=O)C,1\n"))
    assert sorted(m.smiles for m in load_stock(path).to_purchasable_mols()) == ["CC(=O)O", "Nc1ccccc1"]


def test_a_table_cell_with_a_space_or_line_break_in_its_smiles_is_left_out_not_read_in_part(tmp_path):
    """A cell's SMILES pasted with a line break in it (CCOC(=O)c1ccccc1, then OC) put the ester in stock without a word:
    an entry was read to its first space, as a TXT line carrying a name is. A cell is one SMILES, whole; a TXT line
    still carries its name."""
    path = tmp_path / "shelf.csv"
    path.write_text('id,smiles\n1,"CCOC(=O)c1ccccc1\nOC"\n2,not a smiles\n3,CCN\n')
    stock = load_stock(path)
    assert sorted(m.smiles for m in stock.to_purchasable_mols()) == ["CCN"]
    assert stock.n_unreadable == 2 and stock.first_unreadable.startswith("'CCOC(=O)c1ccccc1\\nOC' holds a space")
    for name in ("shelf.txt", "shelf.smi"):  # a name after a no-break space too (a list copied from a web page)
        (tmp_path / name).write_text("CCN ethylamine\nCCO\u00a0ethanol\n")
        assert sorted(m.smiles for m in load_stock(tmp_path / name).to_purchasable_mols()) == ["CCN", "CCO"]


def test_a_vendors_smiles_file_header_is_no_unreadable_entry(tmp_path):
    """eMolecules' file opens "isosmiles version_id parent_id": the stock said '1 unreadable entry left out: RDKit
    cannot parse 'isosmiles''."""
    (tmp_path / "version.smi").write_text("isosmiles version_id parent_id\nCCO 1 1\nc1ccccc1N 2 2\n")
    stock = load_stock(tmp_path / "version.smi")
    assert len(stock) == 2 and stock.n_unreadable == 0 and not stock.first_unreadable
    (tmp_path / "shelf.txt").write_text("SMILES Name\nCCO ethanol\n")  # RDKit's header, the file renamed .txt
    stock = load_stock(tmp_path / "shelf.txt")
    assert len(stock) == 1 and stock.n_unreadable == 0


def test_stock_reads_an_excel_inventory_and_an_uploaded_one(tmp_path):
    from molspec_core.io import workbook_bytes
    from molspec_core.planning import stock_from_upload

    data = workbook_bytes(["Catalogue no.", "SMILES", "Price (EUR)"], [["A1", "c1ccccc1N", 3], ["A2", "OC(=O)C", 1.5]])
    (tmp_path / "inventory.xlsx").write_bytes(data)
    for stock in (load_stock(tmp_path / "inventory.xlsx"), stock_from_upload("inventory.xlsx", data)):
        assert sorted(m.smiles for m in stock.to_purchasable_mols()) == ["CC(=O)O", "Nc1ccccc1"]


def test_a_stock_names_the_first_entry_it_left_out_and_why(tmp_path):
    """'1 unreadable entry left out' said nothing of which, in a catalogue of thousands; a stock of none readable was
    refused without naming one."""
    (tmp_path / "stock.smi").write_text("OCC\nC1CC\nxyz\n")
    stock = load_stock(tmp_path / "stock.smi")
    assert stock.n_unreadable == 2
    assert stock.first_unreadable == ("RDKit cannot parse 'C1CC' as a molecule: ring bond 1 opened at position 2 is "
                                      "never closed")
    (tmp_path / "none.smi").write_text("C1CC\n")
    with pytest.raises(ValueError, match=r"\(1 entry is not SMILES RDKit can read: RDKit cannot parse 'C1CC'"):
        load_stock(tmp_path / "none.smi")
    (tmp_path / "shelf.sdf").write_text(sd_file_text())
    assert load_stock(tmp_path / "shelf.sdf").first_unreadable.startswith("SD record ")


@pytest.mark.parametrize("content, message", [
    ("", "holds no molecules"), ("# only a comment\n\n", "holds no molecules"),
    ("C1CC\nxyz\n", r"holds no molecules \(2 entries are not SMILES"),
    ("C1CC\n", r"holds no molecules \(1 entry is not SMILES"),  # it said '1 entries are'
])
def test_an_empty_or_unreadable_stock_is_refused(tmp_path, content, message):
    path = tmp_path / "stock.txt"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_stock(path)


def test_a_table_saved_as_txt_for_a_stock_is_told_to_be_saved_as_csv(tmp_path):
    """A vendor's list saved as .txt (ID,SMILES) was refused as holding no molecules, its header line named as an
    entry RDKit cannot read, and told to give a CSV, which it was: it is told its lines look like a table's."""
    (tmp_path / "list.txt").write_text("ID,SMILES\nA1,CCO\nA2,CCN\n")
    with pytest.raises(ValueError, match=r"lines look like a table's \(they hold commas\): save it with a \.csv name"):
        load_stock(tmp_path / "list.txt")
    (tmp_path / "odd.txt").write_text("xyz\nC1CC\n")  # no table: no such advice
    with pytest.raises(ValueError) as refused:
        load_stock(tmp_path / "odd.txt")
    assert "table" not in str(refused.value)


def test_an_unreadable_sd_stock_is_said_to_hold_unreadable_records_not_smiles(tmp_path):
    """An SD file whose records RDKit cannot read was refused as holding entries that are 'not SMILES RDKit can
    read': a chemist who gave molblocks was told of SMILES."""
    path = tmp_path / "stock.sdf"
    path.write_text("not a molblock\n$$$$\nnor this\n$$$$\n")
    unread = r"holds no molecules \(2 records are molblocks RDKit cannot read; the first: SD record 1: RDKit cannot"
    with pytest.raises(ValueError, match=unread) as refused:
        load_stock(path)
    assert "SMILES RDKit" not in str(refused.value)


def test_a_missing_file_or_a_csv_without_smiles_is_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot read the stock .*No such file"):
        load_stock(tmp_path / "nope.smi")
    (tmp_path / "stock.csv").write_text("id,name\n1,water\n")
    with pytest.raises(InputFileError, match="column named"):
        load_stock(tmp_path / "stock.csv")


def test_a_stock_with_isomeric_and_canonical_smiles_columns_is_read_from_the_isomeric_one(tmp_path):
    """PubChem's download holds isosmiles and canonicalsmiles, the latter without stereo, and the stock read it:
    L-alanine was in stock as alanine of no configuration, and a route to an L-alanine amide did not end in stock."""
    (tmp_path / "pubchem.csv").write_text("cid,cmpdname,isosmiles,canonicalsmiles\n5950,L-alanine,C[C@@H](C(=O)O)N,"
                                          "CC(C(=O)O)N\n")
    assert [m.smiles for m in load_stock(tmp_path / "pubchem.csv").to_purchasable_mols()] == ["C[C@H](N)C(=O)O"]


def test_a_stock_table_is_read_by_a_stocks_column_names_and_refused_naming_them(tmp_path):
    """A stock was read under the query file's names: a table with none of them was told to have a column
    'reactants' or 'reactants>reagents>production' (a reaction, which a building block is not), a reaction file's
    reactants column was read as building blocks, and ChEMBL's canonical_smiles needed naming."""
    from molspec_core.planning import stock_from_upload

    data = b"id,canonical_smiles\nA1,NO\n"
    (tmp_path / "chembl.csv").write_bytes(data)
    for stock in (load_stock(tmp_path / "chembl.csv"), stock_from_upload("chembl.csv", data)):
        assert [m.smiles for m in stock.to_purchasable_mols()] == ["NO"]
    (tmp_path / "reactions.csv").write_text("id,reactants,product\nR1,CC(=O)Cl.NO,CC(=O)NO\n")
    with pytest.raises(InputFileError) as refused:
        load_stock(tmp_path / "reactions.csv")
    assert "a column named 'smiles' or 'isomeric_smiles' or " in str(refused.value)
    assert "reactants" not in str(refused.value).split("its first line")[0]
    assert "rename the column smiles" in str(refused.value)
    with pytest.raises(InputFileError, match="'smiles' or 'isomeric_smiles'"):
        stock_from_upload("bought.csv", b"id,mol\nA1,NO\n")


def test_our_own_results_given_as_a_stock_are_told_which_column_gives_a_stock(tmp_path):
    """Our results file as a stock was told to name 'query, to predict its queries again' (no prediction is made of
    a stock); an SD file of them was read without a word, its answers taken as the stock."""
    from molspec_core.io import output_header, write_results
    from molspec_core.planning import stock_from_upload

    header = output_header(["id"])
    rows = [["m1", 1, "NCCO", "NCCO", rank, answer, *[None] * (len(header) - 6)]
            for rank, answer in ((1, "NO"), (2, "OCCO"))]
    for name in ("out.csv", "out.xlsx", "out.sdf"):
        write_results(tmp_path / name, header, rows)
        data = (tmp_path / name).read_bytes()
        for read in (lambda: load_stock(tmp_path / name), lambda: stock_from_upload(name, data)):
            with pytest.raises(InputFileError) as refused:
                read()
            assert "own results" in str(refused.value) and "predict" not in str(refused.value), name
            assert "smiles, for a stock of its answers, or query, for a stock of its queries" in str(refused.value)
        answers = load_stock(tmp_path / name, "smiles")
        assert sorted(m.smiles for m in answers.to_purchasable_mols()) == ["NO", "OCCO"], name
        assert [m.smiles for m in stock_from_upload(name, data, "query").to_purchasable_mols()] == ["NCCO"], name


def test_a_table_stock_says_which_column_and_sheet_its_smiles_were_read_from(copy_predictor, tmp_path):
    """The column of a table stock is chosen by preference (io.STOCK_COLUMNS), and nothing said which of a vendor's
    isosmiles and canonicalsmiles, or of a workbook's sheets, had been read: the stock, its plan and the plan's JSON
    name them."""
    from molspec_core.io import workbook_bytes
    from molspec_core.planning import stock_read_from

    (tmp_path / "pubchem.csv").write_text("cid,IsoSMILES,canonicalsmiles\n1,NO,NO\n")
    stock = load_stock(tmp_path / "pubchem.csv")
    assert (stock.column, stock.sheet) == ("IsoSMILES", "")
    assert stock_read_from(stock.source, stock.column, stock.sheet) == "the column IsoSMILES"
    result = plan("NCCO", copy_predictor, stock, time_limit_s=1.0, settings=COPY)
    assert result.stock_read_from == "the column IsoSMILES"
    assert planning.routes_json(result)["stock"]["column"] == "IsoSMILES"
    assert planning.routes_json(result)["stock"]["sheet"] is None
    # a workbook of two sheets, the SMILES on the second; an SD file read by a data field
    notes = workbook_bytes(["remark"], [["bought 2025"]], "notes")
    import openpyxl  # a second sheet, added to the one workbook_bytes writes
    book = openpyxl.load_workbook(io.BytesIO(notes))
    book.create_sheet("Blocks").append(["ID", "SMILES"])
    book["Blocks"].append(["B1", "NO"])
    book.save(tmp_path / "shelf.xlsx")
    stock = load_stock(tmp_path / "shelf.xlsx")
    assert stock_read_from(stock.source, stock.column, stock.sheet) == "the column SMILES of the sheet Blocks"
    result = plan("NCCO", copy_predictor, stock, time_limit_s=1.0, settings=COPY)
    assert (planning.routes_json(result)["stock"]["column"], planning.routes_json(result)["stock"]["sheet"]) == (
        "SMILES", "Blocks")
    (tmp_path / "shelf.sdf").write_text(molfile("NO").rstrip("\n") + "\n>  <Structure>\nNO\n\n$$$$\n")
    stock = load_stock(tmp_path / "shelf.sdf", "Structure")
    assert stock_read_from(stock.source, stock.column, stock.sheet) == "the data field Structure"
    plain = load_stock(tmp_path / "shelf.sdf")  # its molecules: no column to name, as a SMILES file has none
    assert stock_read_from(plain.source, plain.column, plain.sheet) == ""


def test_the_default_stock_is_small_shipped_and_says_how_it_was_made():
    path = planning.DEFAULT_STOCK
    assert path.is_file() and path.stat().st_size < 200_000
    header = gzip.decompress(path.read_bytes()).decode().splitlines()[:4]
    assert "at least N = 2" in " ".join(header) and "tools/make_stock.py" in " ".join(header)
    stock = load_stock()
    assert 1000 < len(stock) < 20_000 and stock.n_unreadable == 0
    if shutil.which("git") and (ROOT / ".git").exists():  # a .gitignore rule must never drop it from the checkout
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT).returncode
        assert ignored == 1, f"{path} is matched by .gitignore"


# ---- the CLI ----------------------------------------------------------------------------------------


def test_cli_plan_writes_json_and_csv(tmp_path, capsys):
    (tmp_path / "stock.smi").write_text("NO\n")
    out = tmp_path / "routes.json"
    assert main(["plan", "--smiles", "NCCO", "--model", str(COPY_MODEL), "--forward", "none", "--stock",
                 str(tmp_path / "stock.smi"), "--time-limit", "2", "--allow-missing-atoms", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "route 1: 1 step, probability " in printed and "from NO" in printed
    report = json.loads(out.read_text())
    assert report["solved"] and report["routes"][0]["tree"]["reaction"]["reactants"][0]["smiles"] == "NO"
    with open(tmp_path / "routes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["reactants"] == "NO" and list(rows[0]) == list(ROUTE_COLUMNS)


def test_cli_plan_refuses_standard_output_and_makes_no_file_named_dash(tmp_path, capsys, monkeypatch):
    """--out -, as predict takes it for standard output, wrote the routes to files named '-' and '-.csv'."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stock.smi").write_text("NO\n")
    assert main(["plan", "--smiles", "NCCO", "--model", str(COPY_MODEL), "--forward", "none", "--stock", "stock.smi",
                 "--time-limit", "1", "--allow-missing-atoms", "--out", "-"]) == 2
    assert "error: --out -: plan writes its routes to a JSON file" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["stock.smi"]


@pytest.mark.parametrize("name", ["routes.csv", "routes.xlsx", "routes.sdf", "routes.json.gz"])
def test_cli_plan_refuses_a_json_output_named_as_another_format(tmp_path, capsys, name):
    """--out routes.csv was told the CSV beside it would overwrite it; given --csv steps.csv, the JSON went into
    routes.csv (and --out routes.json.gz was plain text under a gzip name)."""
    (tmp_path / "stock.smi").write_text("NO\n")
    assert main(["plan", "--smiles", "NCCO", "--model", str(COPY_MODEL), "--forward", "none", "--stock",
                 str(tmp_path / "stock.smi"), "--time-limit", "1", "--allow-missing-atoms", "--out",
                 str(tmp_path / name), "--csv", str(tmp_path / "steps.csv")]) == 2
    assert "plan writes the routes there as JSON text" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["stock.smi"]


def test_cli_plan_reads_a_stock_whose_smiles_column_is_named_otherwise(tmp_path, capsys):
    """A vendor's CSV with a canonical_smiles column was refused, and plan had no way to name the column, which
    load_stock takes."""
    (tmp_path / "stock.csv").write_text("id,canonical_smiles\nA1,NO\n")
    out = tmp_path / "routes.json"
    base = ["plan", "--smiles", "NCCO", "--model", str(COPY_MODEL), "--forward", "none", "--time-limit", "1",
            "--allow-missing-atoms", "--out", str(out)]
    assert main(base + ["--stock", str(tmp_path / "stock.csv"), "--stock-column", "canonical_smiles"]) == 0
    assert json.loads(out.read_text())["routes"][0]["starting_materials"] == ["NO"]
    capsys.readouterr()
    assert main(base + ["--stock-column", "canonical_smiles"]) == 2
    assert ("error: --stock-column names the SMILES column (or SD data field) of a --stock file: give --stock"
            in capsys.readouterr().err)


def test_cli_plan_takes_the_round_trip_top_k_its_json_records(tmp_path, capsys, copy_forward):
    """The JSON's settings (a Routes page's too) record round_trip_k, said to be enough to run the search again with
    plan, which had no way to set it."""
    (tmp_path / "stock.smi").write_text("NO\n")
    out = tmp_path / "routes.json"
    base = ["plan", "--smiles", "NCCO", "--model", str(COPY_MODEL), "--stock", str(tmp_path / "stock.smi"),
            "--time-limit", "1", "--allow-missing-atoms", "--out", str(out), "--round-trip-k", "3"]
    assert main(base + ["--forward", str(copy_forward.path)]) == 0
    assert json.loads(out.read_text())["settings"]["round_trip_k"] == 3
    out.unlink()
    assert main(base + ["--forward", "none"]) == 2
    assert "--round-trip-k sets the round-trip check of --forward's model" in capsys.readouterr().err
    assert not out.exists()


def test_a_targets_stereo_the_model_does_not_read_is_told_in_the_json_and_by_the_cli(copy_predictor, tmp_path, capsys):
    """The Predict page and predict --smiles say where a query's stereo is not read (an @ RDKit drops, a CXSMILES's
    racemate); plan said nothing and planned for the molecule as read."""
    result = plan("NC[C@H](C)C", copy_predictor, Stock(["NO"]), time_limit_s=1.0, settings=COPY)
    assert result.target == "CC(C)CN" and len(result.target_notes) == 1
    assert result.target_notes[0].startswith("Stereo marks dropped: 1 atom marked @")
    assert planning.routes_json(result)["target_notes"] == list(result.target_notes)
    assert planning.routes_json(plan("NCCO", copy_predictor, Stock(["NO"]), 1.0, settings=COPY))["target_notes"] == []
    (tmp_path / "stock.smi").write_text("NO\n")
    assert main(["plan", "--smiles", "NC[C@H](C)C", "--model", str(COPY_MODEL), "--forward", "none", "--stock",
                 str(tmp_path / "stock.smi"), "--time-limit", "1", "--allow-missing-atoms",
                 "--out", str(tmp_path / "routes.json")]) == 0
    assert f"note: {result.target_notes[0]}" in capsys.readouterr().out


def test_cli_plan_says_when_the_search_ran_out_of_molecules_or_failed(tmp_path, capsys, monkeypatch):
    """It said 'no route to the stock found within 20 s' after 4.3 s, and nothing of expansions that failed."""
    (tmp_path / "stock.smi").write_text("NO\n")
    base = ["plan", "--model", str(COPY_MODEL), "--forward", "none", "--stock", str(tmp_path / "stock.smi"),
            "--allow-missing-atoms", "--out", str(tmp_path / "r.json")]
    assert main(base + ["--smiles", "ClCCCl", "--time-limit", "20"]) == 0
    printed = capsys.readouterr().out
    assert "ran out of molecules to expand" in printed and "within 20 s" not in printed
    assert "could not be expanded" not in printed
    monkeypatch.setattr(Predictor, "predict", failing_predict(STOPPED))
    assert main(base + ["--smiles", "NCCO", "--time-limit", "2"]) == 0
    printed = capsys.readouterr().out
    assert "0 molecules expanded" in printed
    # the Routes page's words (planning.failure_note); '1 molecule(s) ...; the first, NCCO' before, and the routine
    # last expansion cut at the search's end was told as a failure too
    assert f"warning: 1 molecule could not be expanded (the model gave no answers for it); NCCO: {STOPPED}." in printed


def test_cli_plan_tells_the_last_expansion_cut_by_the_searchs_end_calmly(tmp_path, capsys):
    """Every search that ran to its limit printed '1 molecule(s) could not be expanded; the first, ...' for its last
    expansion, cut at the search's end, which the Routes page tells calmly (the README promises the page's words)."""
    from molspec_core.cli import report_plan

    cut = "Ic1ccc(OCc2ccccc2)cc1: its expansion was cut short when the search's time ran out"
    counts = planning.ExpansionCounts(molecules=12, failed=1, cut=1, first_failure=cut)
    result = planning.PlanResult("CCO", (), planning.SearchStats("retro*", 5.0, 5.0, 3, 40, counts), "retro", None,
                                 "table", 2)
    report_plan(result, tmp_path / "r.json", tmp_path / "r.csv", False)
    printed = capsys.readouterr().out
    assert f"note: {cut} (not counted among the molecules expanded)." in printed and "warning" not in printed


def test_cli_plan_names_the_stocks_unreadable_entries_as_the_page_does(tmp_path, capsys):
    """molspec plan printed '1 unreadable entries left out' and never which, where the page and the JSON name it."""
    from molspec_core.cli import report_plan

    def printed(unreadable: int, first: str) -> str:
        result = planning.PlanResult("CCO", (), planning.SearchStats("retro*", 5.0, 5.0, 3, 40), "retro", None,
                                     "shelf.smi", 4, stock_unreadable=unreadable, stock_first_unreadable=first)
        report_plan(result, tmp_path / "r.json", tmp_path / "r.csv", False)
        return capsys.readouterr().out.splitlines()[0]

    why = "RDKit cannot parse 'C1CC' as a molecule"
    assert printed(1, why) == f"target: CCO; stock: shelf.smi (4 molecules, 1 unreadable entry left out: {why})"
    assert printed(3, why).endswith(f"(4 molecules, 3 unreadable entries left out; the first: {why})")
    assert printed(0, "").endswith("stock: shelf.smi (4 molecules)")


@needs_native
def test_cli_plan_computes_both_models_in_the_dtype_asked(tmp_path, monkeypatch):
    """--dtype int8 reaches the planning model and the forward model that checks its steps."""
    loaded = record_loads(monkeypatch)
    (tmp_path / "stock.smi").write_text("CC(=O)O\n")
    assert main(["plan", "--smiles", "CC(=O)Nc1ccc(O)cc1", "--model", "retro", "--forward", "forward",
                 "--dtype", "int8", "--stock", str(tmp_path / "stock.smi"), "--time-limit", "1",
                 "--out", str(tmp_path / "r.json")]) == 0
    assert [(p.task, p.dtype) for p in loaded] == [("retro", "int8"), ("forward", "int8")]


def test_cli_plan_bad_target_or_stock_is_an_error_line(tmp_path, capsys):
    (tmp_path / "empty.smi").write_text("")
    (tmp_path / "stock.smi").write_text("NO\n")
    out = tmp_path / "routes.json"
    base = ["plan", "--model", str(COPY_MODEL), "--forward", "none", "--out", str(out)]
    assert main(base + ["--smiles", "C1CC", "--stock", str(tmp_path / "stock.smi")]) == 2
    assert "error: not a valid SMILES" in capsys.readouterr().err
    assert main(base + ["--smiles", "NCCO", "--stock", str(tmp_path / "empty.smi")]) == 2
    assert "holds no molecules" in capsys.readouterr().err
    assert not out.exists()


# ---- the Routes page ---------------------------------------------------------------------------------


sys.path.insert(0, str(ROOT))  # `streamlit run app.py` puts the app folder on the path; so do we


def routes_page(models: Path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("MOLSPEC_MODELS_DIR", str(models))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    return at.switch_page("views/routes.py").run()


def find_routes(at, target: str):
    at.text_input(key="route_target").input(target)
    at.toggle(key="route_check_atoms").set_value(False)  # the copy model drops carbons (see COPY)
    at.slider(key="route_time").set_value(5)
    next(b for b in at.button if b.label == "Find routes").click()
    return at.run()


def shown_text(at) -> str:
    return " | ".join(str(e.value) for kind in (at.markdown, at.caption, at.success, at.warning, at.error, at.info)
                      for e in kind).replace("\\", "")


def test_routes_page_shows_routes_and_downloads(tmp_path, monkeypatch):
    """The copy model as the retro model, the default stock (which holds hydroxylamine, NO)."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "NCCO")
    assert not at.exception
    assert "route to the stock found" in shown_text(at) or "routes to the stock found" in shown_text(at)
    assert at.expander[0].label.startswith("Route 1: 1 step")
    assert "Compounds to procure:** NO" in shown_text(at)
    assert ":green-badge" in shown_text(at) and ":orange-badge" in shown_text(at)  # in stock / not in stock
    assert {m.label for m in at.metric} >= {"Search time", "Molecules expanded", "Routes"}
    used = next(m for m in at.metric if m.label == "Answers used")  # a share that fits its column; counts on hover
    assert used.value.endswith("%") and " reactant sets the model proposed could be used" in used.proto.help
    assert [b.proto.label for b in at.get("download_button")] == ["Download JSON", "Download CSV", "Download Excel"]
    import pandas as pd

    from molspec_core.io import workbook_bytes

    rows = list(planning.route_rows(at.session_state["routes"].result))  # what both downloads are made of
    assert rows  # the workbook holds the CSV's rows
    pd.testing.assert_frame_equal(*excel_and_csv(workbook_bytes(ROUTE_COLUMNS, rows), csv_bytes(ROUTE_COLUMNS, rows)))
    import openpyxl

    from views.routes import routes_workbook

    book = openpyxl.load_workbook(io.BytesIO(routes_workbook(at.session_state["routes"].result)))
    assert book.sheetnames == ["routes"]  # the Routes page's workbook called its sheet "predictions"


def test_routes_page_says_plainly_when_nothing_is_found_or_the_target_is_bad(tmp_path, monkeypatch):
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "ClCCCl")
    assert not at.exception
    assert "No route to the stock was found, and the search stopped after" in shown_text(at)  # long before 5 s
    assert "ran out of molecules to expand" in shown_text(at) and "Try a longer time" not in shown_text(at)
    assert "Molecules expanded" in {m.label for m in at.metric}  # the stats stay on screen
    at = find_routes(at, "C1CC<i")
    assert not at.exception
    # refused as markup since 2d4ed46 (chem.markup_refusal), no longer as RDKit's parse failure
    assert "Cannot plan for this target: this text holds markup ('<i' at position 5)" in \
        shown_text(at).replace("\\", "")
    assert not at.get("html")  # the typed text is never rendered as HTML
    at = find_routes(at, "NCCO")
    assert at.expander and at.expander[0].label.startswith("Route 1")
    at = find_routes(at, "C1CC")  # the routes above belong to another target: they went on showing
    assert "Cannot plan for this target" in shown_text(at) and not at.expander and not at.get("download_button")


def test_routes_page_opens_the_target_from_a_molfile_and_says_why_a_file_cannot_be_one(tmp_path, monkeypatch):
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    assert at.file_uploader(key="route_target_file").proto.max_upload_size_mb == 1
    target = molfile("OCCN")
    at.file_uploader(key="route_target_file").set_value(("target.mol", target.encode(), "chemical/x-mdl-molfile"))
    at.run()
    assert not at.exception and not at.error and at.text_input(key="route_target").value == "NCCO"
    two = (target + "$$$$\n") * 2
    at.file_uploader(key="route_target_file").set_value(("two.sdf", two.encode(), "chemical/x-mdl-sdfile"))
    at.run()
    assert "two.sdf holds 2 molecules; retrosynthesis takes one product" in shown_text(at)
    assert at.text_input(key="route_target").value == "NCCO"  # the last target stays
    at = find_routes(at, "NCCO")
    assert not at.exception and not at.error and at.expander[0].label.startswith("Route 1")


def test_routes_page_without_a_retro_model(tmp_path, monkeypatch):
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "forward")
    at = routes_page(tmp_path / "models", monkeypatch)
    assert not at.exception and "No retrosynthesis model is installed" in shown_text(at)


def test_routes_page_follows_the_sidebars_writings(tmp_path, monkeypatch):
    """A retro model trained on many writings: the sidebar reads each molecule in 5 by default, and the
    search says so and uses it; turned off there, the search reads one."""
    folder = tmp_path / "models" / "retro"
    shutil.copytree(COPY_MODEL, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "data_stats": {"augment": 20}}))
    at = routes_page(tmp_path / "models", monkeypatch)
    assert at.radio(key="task").value == "forward"  # the retro toggle's default holds on any task: it read 1
    # not '(sidebar)', where the toggle shown is the forward task's, which turned off changed nothing here
    assert "each read in 5 writings (sidebar, under the Retrosynthesis task)" in shown_text(at)
    at.radio(key="task").set_value("retro").run()
    assert "each read in 5 writings (sidebar)" in shown_text(at)
    at = find_routes(at, "NCCO")
    assert not at.exception and at.expander[0].label.startswith("Route 1")
    at.toggle(key="augment_retro").set_value(False).run()
    assert "writings" not in shown_text(at).split("Each step asks")[1].split("|")[0]
    at.radio(key="task").set_value("forward").run()  # off on the retro task stays off on another
    assert "writings" not in shown_text(at).split("Each step asks")[1].split("|")[0]


def test_routes_page_says_its_decoding_is_its_own_whatever_the_sidebar_shows(tmp_path, monkeypatch):
    """The sidebar may show the forward model's beam 5; the search still asks the retro model for 10."""
    for task in ("forward", "retro"):
        shutil.copytree(COPY_MODEL, tmp_path / "models" / task)
    at = routes_page(tmp_path / "models", monkeypatch)
    assert at.radio(key="task").value == "forward"
    caption = shown_text(at).split("Each step asks the retrosynthesis model ")[1].split("|")[0]
    assert f"{PlanSettings.n_best} answers per molecule" in caption
    assert METHODS[PlanSettings.method].label.lower() in caption
    assert "whatever task and method the sidebar shows" in caption


def _step(product: str, reactants: list[str], score: float) -> SingleProductReaction:
    return SingleProductReaction(product=Molecule(product), reactants=Bag(Molecule(r) for r in reactants),
                                 metadata={"score": score, "model_rank": 1})


# A route's shape: target T from P and M, P from Q and M, Q from C; M made one way (from CC=O) in T's branch and, in
# P's, that way or another (from CCBr and O)
SHARED_INTERMEDIATE = {"T": "CCOC(=O)CCC(=O)OCC", "P": "CCOC(=O)CCC(=O)O", "Q": "O=C(O)CCC(=O)O", "M": "CCO"}
M_ONE_WAY, M_ANOTHER = _step("CCO", ["CC=O"], -0.5), _step("CCO", ["CCBr", "O"], -2.0)


def two_branch_route(m_in_branch_two: SingleProductReaction):
    """SHARED_INTERMEDIATE's route (its synthesis graph and its Route), M made in P's branch by `m_in_branch_two`."""
    from syntheseus.search.graph.route import SynthesisGraph

    from molspec_core.planning import to_route

    target, p, q, m = (SHARED_INTERMEDIATE[name] for name in "TPQM")
    stock = Stock(["CC=O", "CCBr", "O", "C"])
    first, second, third = _step(target, [p, m], -0.1), _step(p, [q, m], -0.2), _step(q, ["C"], -0.3)
    graph = SynthesisGraph(root_node=first)
    for parent, child in ((first, second), (first, M_ONE_WAY), (second, third), (second, m_in_branch_two)):
        graph._graph.add_edge(parent, child)
    return graph, to_route(graph, stock)


def test_a_route_with_one_intermediate_in_two_branches_keeps_each_branchs_reaction_and_counts_a_shared_one_once():
    """Found by review: to_route kept one reaction per molecule, so where two branches made an intermediate two ways
    the route shown was not the route found; and a reaction two branches shared was listed (and counted in n_steps)
    twice while the route's score counted it once."""
    for m_in_branch_two, made_by in ((M_ONE_WAY, ["CC=O"]), (M_ANOTHER, ["CC=O", "CCBr.O"])):
        graph, route = two_branch_route(m_in_branch_two)
        steps = [s for _, s in route.steps()]
        assert route.n_steps == len(set(graph.nodes())) == len(steps)
        assert route.score == pytest.approx(sum(s.score for s in steps))
        made = [".".join(r.smiles for r in s.reactants) for s in steps if s.product == SHARED_INTERMEDIATE["M"]]
        assert made == made_by


def test_a_stock_from_standard_input_is_named_so(monkeypatch):
    """echo xyz | plan --stock - was refused as 'the stock - holds no molecules', and its routes' JSON recorded the
    stock's source as '-': standard input is named as predict names its --input -."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"xyz\n")))
    with pytest.raises(ValueError, match=r"^the stock standard input holds no molecules \(1 entry"):
        load_stock("-")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"CC(=O)Cl\n")))
    assert load_stock("-").source == "standard input"


def test_reading_a_stock_keeps_rdkit_quiet_and_leaves_it_on_for_the_caller(tmp_path):
    """A stock's unreadable entries are counted and the first named (Stock.first_unreadable); RDKit's own line on
    each, hundreds in a vendor's catalogue, stays out, and the caller's own RDKit messages are told after."""
    (tmp_path / "shelf.smi").write_text("CCO\nc1cc\nC1CC\n")
    story = stderr_story(f"from molspec_core.planning import load_stock, stock_from_upload\n"
                         f"told(load_stock({str(tmp_path / 'shelf.smi')!r}).n_unreadable)\n"
                         f"told(stock_from_upload('shelf.smi', b'CCO\\nc1cc\\n').n_unreadable)\n"
                         f"Chem.MolFromSmiles('c1cc')")
    assert story == ["2", "1", "rdkit"]


def test_a_step_whose_reactants_lack_atoms_of_its_product_records_which():
    """A step kept with the atom check off (check_atoms=False, --allow-missing-atoms) said nothing of the atoms its
    reactants lack, on the page or in the JSON; a sound step records none."""
    graph, route = two_branch_route(M_ANOTHER)
    steps = {step.product: step for _, step in route.steps()}
    q = SHARED_INTERMEDIATE["Q"]
    assert steps[q].missing == (("C", 3), ("O", 4))  # succinic acid 'made from' methane
    assert steps[SHARED_INTERMEDIATE["T"]].missing == ()
    assert planning.lacks_text(steps[q]) == "lacks atoms of the product (3 C, 4 O)"
    result = planning.PlanResult(route.target.smiles, (route,), planning.SearchStats("retro*", 1.0, 2.0, 1, 9),
                                 "table", None, "table", 4)
    rows = {row[ROUTE_COLUMNS.index("product")]: row for row in planning.route_rows(result)}
    assert rows[q][ROUTE_COLUMNS.index("lacks_atoms")] == "3 C, 4 O"
    assert rows[SHARED_INTERMEDIATE["T"]][ROUTE_COLUMNS.index("lacks_atoms")] == ""


def test_a_target_with_a_space_is_told_to_give_one_molecule_not_to_join_several(copy_predictor):
    """The refusal of a spaced target opened with the Predict page's advice (join molecules with '.', use the Batch
    page), which planning then refuses: the target is one molecule (service.spaces_refusal's one_molecule)."""
    with pytest.raises(ValueError) as refused:
        planning.check_target("NCCO aminoethanol", copy_predictor)
    assert "give the molecule as one SMILES" in str(refused.value)
    assert "Batch page" not in str(refused.value) and "join the molecules" not in str(refused.value)
