"""The reaction centre estimated without an atom map (molspec_core/centre.py), on textbook reactions whose
centre a chemist knows."""
from __future__ import annotations

import pytest
from conftest import load_tool
from rdkit import Chem

from molspec_core import centre, depict
from molspec_core.centre import reaction_centre


def symbols(smiles: str, atoms) -> list[str]:
    mol = Chem.MolFromSmiles(smiles)
    return sorted(mol.GetAtomWithIdx(i).GetSymbol() for i in atoms)


@pytest.mark.parametrize("reactants, product, centre, leaving", [
    # amide from an acid chloride: the new C-N bond; the chloride leaves
    ("CC(=O)Cl.NCc1ccccc1", "CC(=O)NCc1ccccc1", ["C", "N"], ["Cl"]),
    # Suzuki coupling: the two ipso carbons; bromide and the boronic acid leave (the methyl sets which ring is which)
    ("Brc1ccc(C)cc1.OB(O)c1ccccc1", "Cc1ccc(-c2ccccc2)cc1", ["C", "C"], ["B", "Br", "O", "O"]),
    # Boc deprotection: the nitrogen gains a hydrogen; the whole Boc group leaves
    ("CC(C)(C)OC(=O)NCc1ccccc1", "NCc1ccccc1", ["N"], ["C", "C", "C", "C", "C", "O", "O"]),
    # nitro to amine: the nitrogen's charge and hydrogens change; both oxygens leave
    ("O=[N+]([O-])c1ccccc1", "Nc1ccccc1", ["N"], ["O", "O"]),
    # ketone reduction: the C=O becomes C-O, nothing leaves
    ("CC(=O)c1ccccc1", "CC(O)c1ccccc1", ["C", "O"], []),
    # aminolysis of an ester: the new C-N bond, and the alkoxy leaves (the ester's first fit of the shared C-C-O
    # was its ethoxy, marked as the centre with the acyl carbon and the carbonyl oxygen leaving)
    ("CCOC(C)=O.NCc1ccccc1", "CC(=O)NCc1ccccc1", ["C", "N"], ["C", "C", "O"]),
    ("CCOC(=O)c1ccccc1.NCC", "CCNC(=O)c1ccccc1", ["C", "N"], ["C", "C", "O"]),
    # esterification: the ester bond; the acid's OH leaves (which oxygen: the test below)
    ("CC(=O)O.OCC", "CCOC(C)=O", ["C", "O"], ["O"]),
])
def test_the_centre_is_where_bonds_change_and_the_rest_leaves(reactants, product, centre, leaving):
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert symbols(product, found.product_atoms) == centre
    assert symbols(reactants, found.reactant_atoms) == centre  # the same atoms, found in the reactants
    assert symbols(reactants, found.leaving_atoms) == leaving


@pytest.mark.parametrize("reactants, product, centre", [
    ("CC(=O)O.[Na+].[OH-]", "CC(=O)[O-].[Na+]", ["O"]),  # the sodium ion stands beside acetate as beside hydroxide
    ("CC(=O)Cl.O.O", "CC(=O)O.O", ["C", "O"]),  # the water that does not react
    ("[Cl-].C[N+](C)(C)C", "C[N+](C)(C)C.[Cl-]", []),
])
def test_a_counter_ion_or_water_that_comes_through_unchanged_is_no_part_of_the_centre(reactants, product, centre):
    found = reaction_centre(reactants, product)
    assert found is not None
    assert symbols(product, found.product_atoms) == centre  # (the acid's new oxygen, from a water, is untraced)


def test_a_lone_atom_that_changes_stays_in_the_centre():
    found = reaction_centre("CC(=O)O.[Na]", "CC(=O)[O-].[Na+]")  # sodium metal: its charge changes
    assert symbols("CC(=O)[O-].[Na+]", found.product_atoms) == ["Na", "O"]


@pytest.mark.parametrize("reactants, product", [
    ("CCOC(=O)c1ccccc1.NCC", "CCNC(=O)c1ccccc1"),  # aminolysis
    ("CCOC(=O)c1ccccc1", "OCc1ccccc1"),  # reduction to the alcohol: its oxygen is the carbonyl's, as the atom maps
])                                      # of USPTO-50K have it (the fewest changes alone kept the ether oxygen)
def test_of_an_ester_the_alkoxy_leaves_and_the_carbonyl_oxygen_stays(reactants, product):
    found = reaction_centre(reactants, product)
    mol = Chem.MolFromSmiles(reactants)
    carbonyl = next(b.GetEndAtomIdx() for b in mol.GetBonds() if b.GetBondType() == Chem.BondType.DOUBLE)
    assert found is not None and carbonyl not in found.leaving_atoms
    assert found.leaving_atoms == {0, 1, 2}  # C, C and O of the ethoxy


def test_the_ipso_carbons_are_the_ones_marked_not_their_symmetric_twins():
    found = reaction_centre("Brc1ccc(C)cc1.OB(O)c1ccccc1", "Cc1ccc(-c2ccccc2)cc1")
    product = Chem.MolFromSmiles("Cc1ccc(-c2ccccc2)cc1")
    biaryl = next(b for b in product.GetBonds() if not b.IsInRing() and b.GetBeginAtom().GetIsAromatic()
                  and b.GetEndAtom().GetIsAromatic())
    assert found.product_atoms == {biaryl.GetBeginAtomIdx(), biaryl.GetEndAtomIdx()}
    reactants = Chem.MolFromSmiles("Brc1ccc(C)cc1.OB(O)c1ccccc1")
    # in the reactants, the carbons that carried the bromine and the boron
    assert {n.GetSymbol() for i in found.reactant_atoms for n in reactants.GetAtomWithIdx(i).GetNeighbors()} >= {
        "Br", "B"}


def test_solvents_bases_and_salts_are_left_out():
    alone = reaction_centre("CC(=O)Cl.NCc1ccccc1", "CC(=O)NCc1ccccc1")
    among_reagents = reaction_centre("CC(=O)Cl.NCc1ccccc1.ClCCl.CCN(CC)CC.[Na+].[OH-]", "CC(=O)NCc1ccccc1")
    assert among_reagents is not None
    assert symbols("CC(=O)NCc1ccccc1", among_reagents.product_atoms) == symbols("CC(=O)NCc1ccccc1",
                                                                                   alone.product_atoms)
    reactants = "CC(=O)Cl.NCc1ccccc1.ClCCl.CCN(CC)CC.[Na+].[OH-]"
    assert symbols(reactants, among_reagents.leaving_atoms) == ["Cl"]  # the solvent's chlorines are no leaving group


def test_an_aromatic_solvent_is_not_laid_on_a_ring_the_reaction_made():
    """The app's Diels-Alder example in toluene: the solvent's ring and methyl shared seven atoms with the adduct's
    cyclohexene and ester carbon, more than the acrylate's five, so the adduct was marked nearly whole, its ester
    group included, and the toluene's methyl taken for the acyl carbon."""
    product = "COC(=O)C1CC=CCC1"
    alone = reaction_centre("C=CC=C.C=CC(=O)OC", product)
    in_toluene = reaction_centre("C=CC=C.C=CC(=O)OC.Cc1ccccc1", product)
    assert in_toluene is not None and in_toluene.traced == in_toluene.atoms
    assert in_toluene.product_atoms == alone.product_atoms
    assert {"O"}.isdisjoint(symbols(product, in_toluene.product_atoms))  # the ester is no part of it
    assert max(in_toluene.reactant_atoms) < 10 and not in_toluene.leaving_atoms  # no toluene atom (10-16) in it


@pytest.mark.parametrize("reactants, product", [
    # an arene reduced in an acid: the pyridine's ring, half counted, still outweighs the acetic acid's C-C(=O)O
    ("OC(=O)c1cccnc1.CC(=O)O", "OC(=O)C1CCCNC1"),
    # a ring made aromatic in an aromatic solvent: the benzene is no source of the phenol's ring
    ("O=C1CCCCC1.c1ccccc1", "Oc1ccccc1"),
])
def test_a_ring_reduced_or_made_aromatic_is_traced_to_its_own_reactant_not_a_solvent(reactants, product):
    found = reaction_centre(reactants, product)
    first = Chem.MolFromSmiles(reactants.split(".")[0]).GetNumAtoms()
    assert found is not None and found.traced == found.atoms
    assert max(found.reactant_atoms) < first  # the first molecule's atoms only


MCPBA = "O=C(OO)c1cccc(Cl)c1"


@pytest.mark.parametrize("reactants, product, centre, reactant_centre, leaving", [
    # Baeyer-Villiger of acetophenone: the peracid's OH oxygen goes between the acyl carbon and the phenyl, which
    # migrates; the ketone's acetyl stays (it was traced to the peracid's acyl group, the ketone's acetyl leaving)
    ("CC(=O)c1ccccc1." + MCPBA, "CC(=O)Oc1ccccc1", {1, 3, 4}, {1, 3, 12}, set(range(9, 20)) - {12}),
    # of cyclohexanone: the ring grows by that oxygen
    ("O=C1CCCCC1." + MCPBA, "O=C1CCCCCO1", {1, 6, 7}, {1, 6, 10}, set(range(7, 18)) - {10}),
    # Curtius rearrangement of an acyl azide in tert-butanol: the phenyl moves from the carbonyl carbon to the azide's
    # nitrogen, whose N2 leaves (the carbamate's C=O and N were left untraced, drawn as from nowhere)
    ("[N-]=[N+]=NC(=O)c1ccccc1.CC(C)(C)O", "CC(C)(C)OC(=O)Nc1ccccc1", {4, 5, 7, 8}, {2, 3, 5, 15}, {0, 1}),
    # Hofmann rearrangement: the aniline's nitrogen is the amide's (it was drawn as leaving), the carbonyl leaves
    ("NC(=O)c1ccccc1.BrBr", "Nc1ccccc1", {0, 1}, {0, 3}, {1, 2}),
    # Beckmann rearrangement: the ring takes the oxime's nitrogen; the lactam's oxygen is water's, untraced
    ("ON=C1CCCCC1", "O=C1CCCCCN1", {0, 1, 6, 7}, {1, 2, 7}, {0}),
])
def test_a_rearrangement_or_an_inserted_atom_keeps_the_migrating_groups_reactant(reactants, product, centre,
                                                                                reactant_centre, leaving):
    found = reaction_centre(reactants, product)
    assert found is not None
    assert (found.product_atoms, found.reactant_atoms, found.leaving_atoms) == (centre, reactant_centre, leaving)


@pytest.mark.parametrize("reactants, product, centre, leaving", [
    # ozonolysis: the alkene is cut in two; each carbonyl's oxygen is the ozone's, whose middle oxygen leaves (the
    # acetone was traced to nothing, its carbons drawn as leaving, its methyls as the centre)
    ("CC(C)=CCc1ccccc1.[O-][O+]=O", "CC(C)=O.O=CCc1ccccc1", {1, 3, 4, 5}, {12}),
    # Fries rearrangement: the acyl group moves from the oxygen to the ring (the Claisen's allyl was drawn as leaving
    # so, before a [3,3] shift traced it: below)
    ("CC(=O)Oc1ccccc1", "CC(=O)c1ccccc1O", {1, 3, 9}, set()),
])
def test_a_reactant_cut_in_two_or_rearranged_gives_both_pieces(reactants, product, centre, leaving):
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert (found.product_atoms, found.leaving_atoms) == (centre, leaving)


@pytest.mark.parametrize("reactants, product, centre, reactant_centre", [
    # Claisen rearrangement (in N,N-dimethylaniline): the allyl's far end joins the ring, its double bond moves, the
    # oxygen takes the ring carbon's hydrogen. The allyl was laid as it stood, as if its OCH2 had moved to the ring:
    # the alkene unmarked, the ring's CH2 marked.
    ("C=CCOc1ccccc1.CN(C)c1ccccc1", "C=CCc1ccccc1O", {0, 1, 2, 3, 9}, {0, 1, 2, 3, 5}),
    # aliphatic Claisen: allyl vinyl ether to pent-4-enal
    ("C=CCOC=C", "C=CCCC=O", {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}),
    # anionic oxy-Cope: every atom of hexa-1,5-dien-3-ol (the aldehyde's oxygen was drawn as from nowhere, the
    # alcohol's as leaving)
    ("C=CC(O)CC=C.[H-].[K+]", "C=CCCCC=O", set(range(7)), set(range(7))),
    # Cope rearrangement: 3-methylhexa-1,5-diene to hepta-1,5-diene; the methyl is no part of it
    ("C=CC(C)CC=C", "C=CCCC=CC", set(range(6)), {0, 1, 2, 4, 5, 6}),
    # Overman rearrangement: the imidate's nitrogen takes the allyl's far end
    ("ClC(Cl)(Cl)C(=N)OCC=C", "ClC(Cl)(Cl)C(=O)NCC=C", {4, 5, 6, 7, 8, 9}, {4, 5, 6, 7, 8, 9}),
    # no shift where the skeleton is the reactant's own: a 1,5-diene hydrogenated
    ("C=CCCC=C.[H][H]", "CCCCCC", {0, 1, 4, 5}, {0, 1, 4, 5}),
])
def test_a_sigmatropic_rearrangement_is_traced_along_its_shift(reactants, product, centre, reactant_centre):
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms and not found.leaving_atoms
    assert (found.product_atoms, found.reactant_atoms) == (centre, reactant_centre)


@pytest.mark.parametrize("reactants, product, centre, reactant_centre", [
    # a methylenation, its triphenylphosphine oxide listed: the ylide's CH2 joins the carbonyl carbon and the carbonyl's
    # oxygen the phosphorus (the CH2 and the oxygen were drawn as leaving, and the alkene's CH2 and the oxide's oxygen
    # as from nowhere)
    ("O=Cc1ccccc1.C=P(c1ccccc1)(c1ccccc1)c1ccccc1", "C=Cc1ccccc1.O=P(c1ccccc1)(c1ccccc1)c1ccccc1",
     {0, 1, 8, 9}, {0, 1, 8, 9}),
    ("CC(C)=O.C=P(c1ccccc1)(c1ccccc1)c1ccccc1", "C=C(C)C.O=P(c1ccccc1)(c1ccccc1)c1ccccc1", {0, 1, 4, 5}, {1, 3, 4, 5}),
])
def test_a_wittig_reactions_double_bonds_exchange_partners(reactants, product, centre, reactant_centre):
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms and not found.leaving_atoms
    assert (found.product_atoms, found.reactant_atoms) == (centre, reactant_centre)


def test_a_curtius_with_diphenylphosphoryl_azide_keeps_the_acids_carbonyl():
    """The acid, DPPA and tert-butanol to the Boc aniline: the carbamate's carbonyl was traced to a phenoxy of the
    DPPA (its ipso carbon for the carbonyl carbon) and the acid's whole carboxyl said to leave."""
    reactants = "O=C(O)c1ccccc1.[N-]=[N+]=NP(=O)(Oc1ccccc1)Oc1ccccc1.CC(C)(C)O"
    found = reaction_centre(reactants, "CC(C)(C)OC(=O)Nc1ccccc1")
    assert found is not None and found.traced == found.atoms
    assert found.product_atoms == {4, 5, 7, 8}  # the O-C(=O)-N-C of the new bonds
    assert 2 in found.leaving_atoms and found.leaving_atoms.isdisjoint({0, 1})  # the acid's OH leaves, its C=O stays
    assert {1, 3, 32} <= found.reactant_atoms  # the acid's carbonyl carbon and ipso carbon, the butanol's oxygen


@pytest.mark.parametrize("reactants, product, reactant_centre", [
    ("C=CC.BrBr", "CC(Br)CBr", {0, 1, 3, 4}),  # bromine added across a double bond: both its atoms
    ("C=CC.[2H][2H]", "[2H]CC([2H])C", {0, 1, 3, 4}),  # deuterium so
    # a quaternization: methyl iodide's iodide is the product's counter-ion (it was drawn as leaving)
    ("CN(C)c1ccccc1.CI", "C[N+](C)(C)c1ccccc1.[I-]", {1, 9, 10}),
    # in methanol: the iodide says the methyl is methyl iodide's, not the solvent's (it was drawn as leaving)
    ("CI.CO.CN1CCCCC1", "C[N+]1(C)CCCCC1.[I-]", {0, 1, 5}),
    # an acyl chloride's chloride is the HCl the record lists beside the amide, not the solvent's
    ("CC(=O)Cl.NCc1ccccc1.ClCCl", "CC(=O)NCc1ccccc1.Cl", {1, 3, 4}),
])
def test_an_atom_a_reactant_gives_alone_is_traced_to_it_not_drawn_as_leaving(reactants, product, reactant_centre):
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert found.reactant_atoms == reactant_centre and not found.leaving_atoms


def test_a_reagent_that_shares_one_atom_with_the_product_is_not_traced_into_it():
    # ethanol left out of the query: water (atom 4) could stand in for the ester's oxygen, one atom alone
    found = reaction_centre("CC(=O)Cl.O", "CC(=O)OCC")
    assert found is not None and found.traced == 3  # the acetyl only
    assert symbols("CC(=O)Cl.O", found.reactant_atoms) == ["C"] and 4 not in found.reactant_atoms


@pytest.mark.parametrize("reactants, product", [("CCO", "c1ccc2ccccc2c1"), ("C1CC(", "CC"), ("CC", "C1CC(")])
def test_no_centre_where_the_product_cannot_mostly_be_traced_or_read(reactants, product):
    assert reaction_centre(reactants, product) is None


def test_the_pictures_colours_mark_the_product_or_the_reactants():
    on_product = depict.centre_colours("CC(=O)Cl.NCc1ccccc1", "CC(=O)NCc1ccccc1", on="product")
    assert set(on_product.values()) == {depict.CENTRE_COLOUR}
    assert symbols("CC(=O)NCc1ccccc1", on_product) == ["C", "N"]
    on_reactants = depict.centre_colours("CC(=O)Cl.NCc1ccccc1", "CC(=O)NCc1ccccc1", on="reactants")
    assert {i: c for i, c in on_reactants.items() if c == depict.LEAVING_COLOUR}.keys() == {3}  # the Cl
    assert depict.centre_colours("CCO", "c1ccc2ccccc2c1", on="product") == {}
    svg = depict.smiles_svg("CC(=O)NCc1ccccc1", 300, 200, on_product)
    assert svg is not None and svg != depict.smiles_svg("CC(=O)NCc1ccccc1", 300, 200)


def test_a_reaction_out_of_time_gets_no_centre_rather_than_a_guess(monkeypatch):
    monkeypatch.setattr(centre, "DEADLINE_S", 0.0)
    assert centre.reaction_centre.__wrapped__("CC(=O)Cl.NCc1ccccc1", "CC(=O)NCc1ccccc1") is None


def test_a_steps_molecules_drawn_apart_each_get_their_own_atoms_marked():
    on_product, on_reactants = depict.step_centre_colours(["CC(=O)Cl", "NCc1ccccc1"], "CC(=O)NCc1ccccc1")
    assert on_product == {1: depict.CENTRE_COLOUR, 3: depict.CENTRE_COLOUR}  # the acyl carbon and the nitrogen
    assert on_reactants == [{1: depict.CENTRE_COLOUR, 3: depict.LEAVING_COLOUR},  # acyl carbon; the chloride
                            {0: depict.CENTRE_COLOUR}]  # the amine's nitrogen, by its own index
    assert depict.step_centre_colours(["NO"], "NCCO") == ({}, [{}])  # nothing traced, nothing marked


def test_a_metal_complex_with_dative_bonds_is_traced():
    """A ligand's dative bond (-> or <-) shared by reactant and product crashed the trace: its arrow went into the
    shared substructure's SMARTS, which RDKit could not read (ArgumentError on every answer's picture)."""
    found = reaction_centre("[NH3]->[Pt](Cl)(Cl)<-[NH3].O", "[NH3]->[Pt](Cl)(O)<-[NH3]")  # cisplatin's aquation
    assert found is not None and found.traced == 5  # the water's oxygen too
    assert symbols("[NH3]->[Pt](Cl)(O)<-[NH3]", found.product_atoms) == ["O", "Pt"]
    assert symbols("[NH3]->[Pt](Cl)(Cl)<-[NH3].O", found.leaving_atoms) == ["Cl"]


def test_an_atom_that_leaves_a_ring_is_traced_and_the_ring_that_holds_it_leaves():
    """USPTO-50K (Gabriel deprotection): shared substructures keep ring atoms to ring atoms, so the phthalimide's ring
    nitrogen, freed as the amine, stayed untraced: it was marked as leaving, and its carbon as a new bond's end."""
    reactants, product = "O=C1c2ccccc2C(=O)N1[C@H](CF)c1ccccc1", "N[C@H](CF)c1ccccc1"
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert symbols(product, found.product_atoms) == ["N"]
    assert symbols(reactants, found.reactant_atoms) == ["N"]
    assert symbols(reactants, found.leaving_atoms) == ["C"] * 8 + ["O"] * 2  # the phthaloyl, not the nitrogen


@pytest.mark.parametrize("reactants, product, centre, leaving", [
    # USPTO-50K, a lactam closed: no centre at all, its new ring's atoms untraced
    ("CCOC(=O)CN(CCNN1C(=O)c2ccccc2C1=O)C(=O)OCc1ccccc1", "O=C(OCc1ccccc1)N1CCN(N2C(=O)c3ccccc3C2=O)C(=O)C1",
     ["C", "N"], ["C", "C", "O"]),
    # an epoxide opened by an amine: the epoxide shared no two atoms, ring for ring, and was left out
    ("CC1CO1.NCc1ccccc1", "CC(O)CNCc1ccccc1", ["C", "N", "O"], []),
])
def test_a_ring_made_or_opened_is_traced(reactants, product, centre, leaving):
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert symbols(product, found.product_atoms) == centre
    assert symbols(reactants, found.leaving_atoms) == leaving


def test_a_diels_alder_adduct_keeps_its_nitro_group():
    """USPTO-50K: the diene's chain became ring atoms, so it shared none with the product; the nitroalkene's nitro
    group, its carbon now in the ring, was marked as leaving, and the nitro group's atoms as the centre."""
    reactants, product = "C=CC=C.COc1cc(C=C[N+](=O)[O-])ccc1O", "COc1cc([C@@H]2CC=CC[C@H]2[N+](=O)[O-])ccc1O"
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms and not found.leaving_atoms
    assert {"N", "O"}.isdisjoint(symbols(product, found.product_atoms))
    assert symbols(reactants, found.reactant_atoms).count("C") >= 4


@pytest.mark.parametrize("reactants, product, centre, leaving", [
    # USPTO-50K: the methyl of methyl iodide, the nitrogen of ammonia, the carbon of formaldehyde (a Mannich reaction)
    ("CI.O=[N+]([O-])c1ccc(O)cc1F", "COc1ccc([N+](=O)[O-])c(F)c1", ["C", "O"], ["I"]),
    ("COC(=O)CNc1c(C)cccc1C.N", "Cc1cccc(C)c1NCC(N)=O", ["C", "N"], ["C", "O"]),
    ("C=O.CC(=O)c1ccc(C)s1.CNC", "Cc1ccc(C(=O)CCN(C)C)s1", ["C", "C", "N"], ["O"]),
])
def test_a_reactant_that_gives_one_atom_is_marked_on_a_retrosynthesis_answer(reactants, product, centre, leaving):
    """A reactant sharing one atom with the product shares no substructure of two: a retrosynthesis answer's methyl
    iodide (or ammonia, or formaldehyde) was drawn unmarked, though its atom makes the new bond and the rest leaves."""
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert symbols(reactants, found.reactant_atoms) == centre
    assert symbols(reactants, found.leaving_atoms) == leaving


@pytest.mark.parametrize("reactants, product, centre, leaving", [
    ("CI.CO.Oc1ccccc1", "COc1ccccc1", ["C", "O"], ["I"]),  # methyl iodide in methanol
    ("CI.CN(C)C=O.ClCCl.Oc1ccccc1", "COc1ccccc1", ["C", "O"], ["I"]),  # in DMF or dichloromethane
    ("COS(=O)(=O)OC.CO.Oc1ccccc1", "COc1ccccc1", ["C", "O"], ["C", "O", "O", "O", "O", "S"]),  # dimethyl sulfate
    ("O=S(Cl)Cl.ClCCl.OC(=O)c1ccccc1", "O=C(Cl)c1ccccc1", ["C", "Cl"], ["Cl", "O", "O", "S"]),  # thionyl chloride
    # an organometallic's carbon, given to a carbonyl or a carbon a leaving group leaves: the Grignard's methyl in THF
    # or ether was left untraced and its MgBr unmarked
    ("O=Cc1ccccc1.C[Mg]Br.C1CCOC1", "CC(O)c1ccccc1", ["C", "C", "O"], ["Br", "Mg"]),
    ("CC(=O)c1ccccc1.CCOCC.[CH3][Mg+]", "CC(C)(O)c1ccccc1", ["C", "C", "O"], ["Mg"]),  # USPTO-50K's writing
    ("O=C(O)c1ccccc1.C1CCOC1.[Li]C", "CC(=O)c1ccccc1", ["C", "C"], ["Li", "O"]),
    ("Brc1ccccc1.CB(O)O.C1COCCO1", "Cc1ccccc1", ["C", "C"], ["B", "Br", "O", "O"]),
    # an oxidant's oxygen, bonded to an oxygen: an epoxidation with mCPBA in methanol, a sulfoxide from hydrogen
    # peroxide in acetic acid, a hydroboration-oxidation in THF (each left the new oxygen untraced, the oxidant
    # unmarked)
    ("C=Cc1ccccc1.O=C(OO)c1cccc(Cl)c1.CO", "c1ccc(C2CO2)cc1", ["C", "C", "O"],
     ["C", "C", "C", "C", "C", "C", "C", "Cl", "O", "O"]),
    ("CSc1ccccc1.OO.CC(=O)O", "CS(=O)c1ccccc1", ["O", "S"], ["O"]),
    ("C=Cc1ccccc1.B.C1CCOC1.OO.[Na+].[OH-]", "OCCc1ccccc1", ["C", "C", "O"], ["O"]),
])
def test_a_one_atom_gift_a_solvent_could_give_too_is_the_reagents(reactants, product, centre, leaving):
    """Methyl iodide in methanol (or DMF, or dichloromethane) gave an O-methyl ether whose methyl was left untraced,
    the methyl iodide unmarked, as any of them could have given it: the reagent's atom is made to be given, a carbon
    on a leaving group, a chlorine on a sulfur (centre._given_away), and the solvent's is not."""
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert symbols(reactants, found.reactant_atoms) == centre
    assert symbols(reactants, found.leaving_atoms) == leaving


def test_a_one_atom_gift_two_reactants_could_give_alike_is_not_guessed():
    found = reaction_centre("CO.CCO.Oc1ccccc1", "COc1ccccc1")  # two alcohols: neither is made to give its carbon
    assert found is not None and found.traced == found.atoms - 1
    assert symbols("CO.CCO.Oc1ccccc1", found.reactant_atoms) == ["O"] and not found.leaving_atoms
    found = reaction_centre("CI.ICI.Oc1ccccc1", "COc1ccccc1")  # two alkyl iodides: the methyl's hydrogens tell
    assert found is not None and found.traced == found.atoms
    # a Pinnick oxidation, sodium chlorite beside hydrogen peroxide (its scavenger): either oxidant could give the
    # acid's new oxygen, and which did is not guessed (the peroxide's was taken, by the rule for peroxides alone)
    found = reaction_centre("O=Cc1ccccc1.OO.[O-][Cl+][O-].[Na+].O", "O=C(O)c1ccccc1")
    assert found is not None and found.traced == found.atoms - 1
    # an arene lithiated beside its C-H (by LiTMP) takes methyl iodide's methyl, not methyllithium's: an organometallic
    # gives its carbon to an electrophile's
    reactants = "C1CCOC1.CC1(C)CCCC(C)(C)N1.Fc1ccccc1C#N.CI.C[Li]"
    found = reaction_centre(reactants, "Cc1cccc(F)c1C#N")
    assert found is not None and found.traced == found.atoms and symbols(reactants, found.leaving_atoms) == ["I"]


def test_a_ring_closed_onto_an_aniline_keeps_the_aniline_ring_unmarked():
    """USPTO-50K, a benzimidazolone from a diamine and CDI: CDI's imidazole was laid on the product's ring before the
    diamine's traced atoms grew into it, and growing, the urea carbon took the aniline's ring carbon: the whole
    benzene ring and its CF3 were marked, and the diamine's ring said to leave."""
    reactants = "CC(C)(CCNc1ccc(C(F)(F)F)cc1N)NC(=O)OC(C)(C)C.O=C(n1ccnc1)n1ccnc1"
    product = "CC(C)(CCn1c(=O)[nH]c2cc(C(F)(F)F)ccc21)NC(=O)OC(C)(C)C"
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    # the urea carbon, the two nitrogens and the two carbons whose bonds to them turned aromatic, as the maps have it
    assert symbols(product, found.product_atoms) == ["C", "C", "C", "N", "N"]
    assert symbols(reactants, found.leaving_atoms) == ["C"] * 6 + ["N"] * 4  # two imidazoles; CDI's C=O stays


@pytest.mark.parametrize("reactants, product, centre, leaving", [
    # an acid and a phenol: the phenol's oxygen joins the acyl carbon and the acid's OH leaves (the acid, the larger
    # share, gave the ester its C(=O)O whole: the phenol's oxygen was said to leave, its ring carbon to bond)
    ("OC(=O)c1ccccc1.Oc1ccccc1", "O=C(Oc1ccccc1)c1ccccc1", {1, 9}, {0}),
    ("CC(=O)O.Oc1ccccc1", "CC(=O)Oc1ccccc1", {1, 4}, {3}),
    ("OC(=O)c1ccccc1.OCC", "O=C(OCC)c1ccccc1", {1, 9}, {0}),  # and an alcohol
    ("CC(=O)O.OCC", "CCOC(C)=O", {1, 4}, {3}),
    ("OCCCC(=O)O", "O=C1CCCO1", {0, 4}, {6}),  # a lactone: the alcohol's oxygen closes the ring
    ("CC(=O)OC.OCc1ccccc1", "CC(=O)OCc1ccccc1", {1, 5}, {3, 4}),  # transesterification: the methoxy leaves
    ("OC(=O)c1ccccc1.SCC", "O=C(SCC)c1ccccc1", {1, 9}, {0}),  # a thioester
    ("CC(=O)O.NCc1ccccc1", "CC(=O)NCc1ccccc1", {1, 4}, {3}),  # an amide from the acid
    ("CC(=O)Cl.NCc1ccccc1", "CC(=O)NCc1ccccc1", {1, 4}, {3}),  # and from the acid chloride
    ("OCCO.O=Cc1ccccc1", "C1COC(c2ccccc2)O1", {0, 3, 5}, {4}),  # an acetal: both oxygens the diol's
    ("OC1CCCCC1.Oc1ccc(Br)cc1", "Brc1ccc(OC2CCCCC2)cc1", {1, 7}, {0}),  # Mitsunobu: the phenol keeps its oxygen
    ("OC(=O)c1ccccc1.CI", "COC(=O)c1ccccc1", {0, 9}, {10}),  # but methyl iodide: the acid's oxygen takes the methyl
    ("OC(=O)c1ccccc1.CCCOS(C)(=O)=O", "CCCOC(=O)c1ccccc1", {0, 11}, {12, 13, 14, 15, 16}),  # and a mesylate's alkyl
])
def test_a_nucleophile_keeps_its_heteroatom_and_the_acids_oh_leaves(reactants, product, centre, leaving):
    """Substitution at an acyl carbon makes and breaks bonds at that carbon (oxygen-18 in the alcohol ends in the
    ester, Roberts and Urey 1938), and an aryl carbon keeps its oxygen."""
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert found.reactant_atoms == centre
    assert found.leaving_atoms == leaving


@pytest.mark.parametrize("reactants, product, centre, leaving", [
    # a retrosynthesis answer's aryl ester for an acid: the acyl C-O bond breaks and the phenol leaves whole (its
    # oxygen was said to stay as the acid's OH and its ring carbon to lose the bond); the OH's oxygen, from the water
    # the answer does not show, stays untraced
    ("CC(=O)Oc1ccccc1", "CC(=O)O", {1}, {3, 4, 5, 6, 7, 8, 9}),
    ("O=C(Oc1ccccc1)c1ccccc1", "OC(=O)c1ccccc1", {1}, {2, 3, 4, 5, 6, 7, 8}),
    ("CC(=O)Oc1ccccc1", "Oc1ccccc1", {3}, {0, 1, 2}),  # for the phenol: it keeps its oxygen; the acetyl leaves
    ("CC(=O)NCc1ccccc1", "NCc1ccccc1", {3}, {0, 1, 2}),  # an amide's hydrolysis, for the amine
    ("CC(=O)NCc1ccccc1", "CC(=O)O", {1}, set(range(3, 11))),  # and for the acid
    # a methyl, ethyl or isopropyl ester for the acid: the acyl C-O bond breaks too, and the alkoxy leaves whole (the
    # oxygen stayed with the acid, as USPTO-50K's atom maps have it, and only the methyl was marked as leaving: an SN2
    # demethylation, not a saponification); with the hydroxide shown, as the app's Ester hydrolysis example has it
    ("CC(=O)OC", "CC(=O)O", {1}, {3, 4}),
    ("CCOC(=O)c1ccccc1", "O=C(O)c1ccccc1", {3}, {0, 1, 2}),
    ("CC(C)OC(=O)c1ccccc1", "O=C(O)c1ccccc1", {4}, {0, 1, 2, 3}),
    ("COC(=O)c1ccc(Br)cc1.[Li+].[OH-].C1CCOC1.O", "O=C(O)c1ccc(Br)cc1", {2}, {0, 1}),
    # but a tert-butyl ester (cleaved in acid, by its cation), a benzyl ester (by hydrogenolysis) and an allyl ester
    # (by palladium) let their alkyl go from the oxygen, which stays with the acid
    ("CC(C)(C)OC(=O)c1ccccc1.O=C(O)C(F)(F)F", "O=C(O)c1ccccc1", {4}, {0, 1, 2, 3}),
    ("O=C(OCc1ccccc1)c1ccccc1.[H][H]", "O=C(O)c1ccccc1", {2}, set(range(3, 10))),
    ("C=CCOC(=O)c1ccccc1", "O=C(O)c1ccccc1", {3}, {0, 1, 2}),
    # an acetal's carbon lets its oxygens go as an acyl carbon does (by the oxocarbenium ion): a dioxolane's or a
    # dimethyl acetal's hydrolysis gives the aldehyde water's oxygen and the diol or methanol leaves whole (one oxygen
    # was kept as the aldehyde's); an acetonide's diol keeps its oxygens, as before
    ("c1ccc(C2OCCO2)cc1.Cl.O", "O=Cc1ccccc1", {4}, {5, 6, 7, 8}),
    ("COC(OC)c1ccccc1", "O=Cc1ccccc1", {2}, {0, 1, 3, 4}),
    ("CC1(C)OC2CCCCC2O1", "OC1CCCCC1O", {3, 10}, {0, 1, 2}),
])
def test_hydrolysis_breaks_the_acyl_bond(reactants, product, centre, leaving):
    found = reaction_centre(reactants, product)
    assert found is not None
    assert found.reactant_atoms == centre
    assert found.leaving_atoms == leaving


def test_a_retrosynthesis_answers_acid_and_phenol_are_marked_the_right_way_round():
    """The app's picture of the answer: the acid's OH in the leaving colour, the phenol's oxygen in the centre's."""
    colours = depict.centre_colours("OC(=O)c1ccccc1.Oc1ccccc1", "O=C(Oc1ccccc1)c1ccccc1", on="reactants")
    assert colours == {0: depict.LEAVING_COLOUR, 1: depict.CENTRE_COLOUR, 9: depict.CENTRE_COLOUR}


@pytest.mark.parametrize("reactants, product, centre", [
    ("CI.Cc1nc2cc(Cl)c(Cl)cc2[nH]1", "Cn1c(C)nc2cc(Cl)c(Cl)cc21", {0, 1}),  # USPTO-50K: N-methylation
    ("CCCCCCBr.c1ccc(-c2nnn[nH]2)cc1", "CCCCCCn1nnnc1-c1ccccc1", {5, 6}),
])
def test_an_alkylated_azole_marks_the_nitrogen_that_took_the_bond_not_its_twin(reactants, product, centre):
    """The azole laid either way round changed one nitrogen's hydrogen either way; the turn that changed the other
    nitrogen marked both, though only one bond was made."""
    found = reaction_centre(reactants, product)
    assert found is not None and found.product_atoms == centre


@pytest.mark.parametrize("reactants, product, freed", [
    ("c1ccc(C(c2ccccc2)(c2ccccc2)n2ccnc2)cc1", "c1c[nH]cn1", 17),  # a trityl imidazole
    ("CC(C)(C)OC(=O)n1ccnc1", "c1c[nH]cn1", 7),  # a Boc imidazole
    ("Cc1ccc(S(=O)(=O)n2ccnc2)cc1", "c1c[nH]cn1", 8),  # a tosyl imidazole
])
def test_a_freed_azole_marks_the_nitrogen_that_lost_the_protecting_group(reactants, product, freed):
    """The imidazole fits the product either way round with one nitrogen's hydrogen changed; the nitrogen the
    trityl left was drawn unmarked and its twin, which kept no bond to it, marked."""
    found = reaction_centre(reactants, product)
    assert found is not None and found.reactant_atoms == {freed}


@pytest.mark.parametrize("reactants, product, given", [
    ("CSc1ccccc1.O=C(OO)c1cccc(Cl)c1", "CS(=O)c1ccccc1", 11),  # USPTO-50K: mCPBA oxidises a sulfide
    ("C=CCc1ccccc1.O=C(OO)c1cccc(Cl)c1", "c1ccc(CC2CO2)cc1", 12),  # and epoxidises an alkene
    ("CSc1ccccc1.OOS(=O)(=O)[O-].[K+]", "CS(=O)c1ccccc1", 8),  # Oxone
])
def test_an_oxidant_gives_its_peroxides_terminal_oxygen(reactants, product, given):
    """The oxygen a peracid gives is its OH's, whose O-O bond breaks; the carbonyl's (or sulfonyl's) oxygen was
    taken, for having no hydrogen to lose, and the peroxide marked as staying whole in the acid that leaves."""
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert given in found.reactant_atoms and given not in found.leaving_atoms


@pytest.mark.parametrize("reactants, product, leaving", [
    # USPTO-50K: a pyrazole from a 1,3-diketone and hydrazine; the diketone laid on the product one atom along
    ("O=C1CCCCC1C(=O)CC(F)(F)F.NN", "FC(F)(F)Cc1n[nH]c2c1CCCC2", {0, 8}),
    # a Friedlander quinoline: the aniline's nitrogen and the aldehyde's carbon were said to leave
    ("Nc1ccccc1C=O.CC(=O)c1ccccc1", "c1ccc(-c2ccc3ccccc3n2)cc1", {8, 11}),
])
def test_a_ring_made_from_chain_atoms_is_traced_whole(reactants, product, leaving):
    """Ring atoms matched only ring atoms in the first search, so a ring made of a reactant's chain was traced in
    pieces, or shifted: a CF3 group that came through untouched was marked as the centre and as leaving."""
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert found.leaving_atoms == leaving  # the two carbonyl oxygens, as water
    assert "F" not in symbols(product, found.product_atoms)


@pytest.mark.parametrize("reactants, product, keeps", [
    # USPTO-50K's map of an esterification: the acid's oxygen joins the alcohol's carbon, the alcohol's OH leaves
    ("[CH3:2][CH2:1][OH:11].[CH3:4][C:5](=[O:9])[OH:10]", "[CH3:2][CH2:1][O:10][C:5]([CH3:4])=[O:9]", True),
    ("[CH3:2][CH2:1][OH:10].[CH3:4][C:5](=[O:9])[OH:11]", "[CH3:2][CH2:1][O:10][C:5]([CH3:4])=[O:9]", False),
    ("[CH3:4][C:5](=[O:9])[OH:10].[CH3:1][O:6][S:7]([CH3:8])(=[O:11])=[O:12]", "[CH3:1][O:10][C:5]([CH3:4])=[O:9]",
     False),  # a mesylate's alkyl: the acid's oxygen does take it
])
def test_the_check_counts_maps_that_make_an_ester_with_the_acids_oxygen(reactants, product, keeps):
    """tools/centre_check.py says how many of its differences are this convention of the maps, not the estimate's."""
    assert load_tool("centre_check").map_keeps_acid_oxygen(reactants, product) is keeps


def test_the_second_search_for_a_ring_made_is_not_started_past_the_deadline(monkeypatch):
    """Where a ring is made, each reactant is searched twice; the second search started though the first had
    used the reaction's time, so a slow pair could hold a picture back twice the deadline."""
    clock, searches = [0.0], []
    shared = centre._shared

    def slow(*args, **kwargs):
        searches.append(args[4] if len(args) > 4 else kwargs.get("rings_apart", True))
        clock[0] += centre.DEADLINE_S + 1  # this search used all the reaction's time
        return shared(*args, **kwargs)

    monkeypatch.setattr(centre.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(centre, "_shared", slow)
    centre.reaction_centre.__wrapped__("O=C1CCCCC1C(=O)CC(F)(F)F.NN", "FC(F)(F)Cc1n[nH]c2c1CCCC2")
    assert searches == [True]  # the first search only, rings apart


@pytest.mark.parametrize("reactants, product, centre", [
    ("C/C=C/C(=O)O", "C/C=C\\C(=O)O", [1, 2]),  # crotonic acid to isocrotonic acid: the double bond turned
    ("C/C=C\\C(=O)O.CO", "C/C=C/C(=O)OC", [1, 2, 3, 5]),  # a retrosynthesis answer of the other geometry
    ("C/C=C/C(=O)O.CO", "C/C=C/C(=O)OC", [3, 5]),  # its geometry kept: the ester bond alone
    ("CC=CC(=O)O.CO", "C/C=C/C(=O)OC", [3, 5]),  # a reactant of no stated geometry: nothing to compare
    ("F/C(C)=C(/C)Cl", "F/C(C)=C(\\C)Cl", [1, 3]),  # a tetrasubstituted alkene, its CIP atoms compared
    ("C/C=C/c1ccccc1.[Br-]", "c1ccc(cc1)/C=C/C", []),  # unchanged, written from the other end
    ("C/C=C/c1ccccc1.[Br-]", "c1ccc(cc1)/C=C\\C", [6, 7]),
])
def test_a_double_bond_whose_geometry_turned_is_in_the_centre(reactants, product, centre):
    """An E/Z isomerization had no centre at all, and an answer that made an (E)-ester from the (Z)-acid marked the
    ester bond alone: a bond's geometry was not compared, only its order."""
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert sorted(found.product_atoms) == centre


NITROBENZOIC_ACID = "O=C(O)c1ccc([N+](=O)[O-])cc1"  # the acid of a Mitsunobu inversion


@pytest.mark.parametrize("reactants, product, centre", [
    ("C[C@H](N)C(=O)O", "C[C@@H](N)C(=O)O", [1]),  # L- to D-alanine: its alpha carbon
    ("C[C@H](N)C(=O)O", "N[C@@H](C)C(=O)O", []),  # L-alanine written from another atom: no change
    ("C[C@H]1CC[C@@H](O)CC1", "C[C@H]1CC[C@H](O)CC1", [4]),  # cis- to trans-4-methylcyclohexanol
    # a Mitsunobu inversion: the alcohol's carbon and the acid's oxygen that took it (the alcohol's oxygen leaves; the
    # acyl carbon keeps its bonds); kept (an esterification), the ester bond alone
    (f"{NITROBENZOIC_ACID}.C[C@@H](O)c1ccccc1", "C[C@H](OC(=O)c1ccc([N+](=O)[O-])cc1)c1ccccc1", [1, 2]),
    (f"{NITROBENZOIC_ACID}.C[C@@H](O)c1ccccc1", "C[C@@H](OC(=O)c1ccc([N+](=O)[O-])cc1)c1ccccc1", [2, 3]),
])
def test_a_stereocentre_whose_configuration_turned_is_in_the_centre(reactants, product, centre):
    """An epimerization had no centre at all, its bonds all kept, and a Mitsunobu inversion marked the ester bond
    alone, as an esterification that keeps the alcohol's configuration does."""
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert sorted(found.product_atoms) == centre


@pytest.mark.parametrize("reactants, product, centre", [
    # cis-3,5-dimethylmorpholine N-arylated: its nitrogen and the pyridine's carbon, not its two stereocentres
    ("C[C@@H]1COC[C@H](C)N1.Clc1ccccn1", "C[C@H]1COC[C@@H](C)N1c1ccccn1", ["C", "N"]),
    # D-glucose reduced to D-glucitol: the aldehyde's carbon and oxygen, not the four centres of a chain laid end to end
    ("O=C[C@H](O)[C@@H](O)[C@H](O)[C@H](O)CO", "OC[C@@H](O)[C@@H](O)[C@H](O)[C@@H](O)CO", ["C", "O"]),
])
def test_a_symmetric_reactant_is_laid_on_its_product_the_way_that_keeps_its_stereocentres(reactants, product, centre):
    found = reaction_centre(reactants, product)
    assert found is not None and found.traced == found.atoms
    assert symbols(product, found.product_atoms) == centre
    mol = Chem.MolFromSmiles(product)
    assert not any(mol.GetAtomWithIdx(i).GetChiralTag() != Chem.ChiralType.CHI_UNSPECIFIED for i in found.product_atoms)


@pytest.mark.parametrize("reactants, product", [
    ("C=CC=C.C=C", "C1=CCCCC1"),  # butadiene laid with its first double bond kept: a carbon that lost it unmarked
    ("C=CC=C.C=CC(=O)OC", "COC(=O)C1CC=CCC1"),  # the acrylate's C=C grown onto the wrong ring carbon
    ("C=CC=C.C=CC(=O)OC.Cc1ccccc1", "COC(=O)C1CC=CCC1"),  # the app's example: toluene's ring hid the ring made
    ("C=CC=C.O=C1OC(=O)C=C1", "O=C1OC(=O)C2CC=CCC12"),
    ("C=C(C)C=C.C=CC(=O)OC", "COC(=O)C1CC=C(C)CC1"),
])
def test_a_diels_alder_marks_all_six_carbons_of_the_ring_it_makes(reactants, product):
    """Every bond of the new cyclohexene's ring was made or changed order: the diene's two double bonds became single,
    its middle bond double, and the dienophile's double bond single; the centre missed one of the six carbons."""
    found = reaction_centre(reactants, product)
    mol = Chem.MolFromSmiles(product)
    ring = next(set(r) for r in mol.GetRingInfo().AtomRings() if len(r) == 6 and any(
        mol.GetBondBetweenAtoms(a, b).GetBondType() == Chem.BondType.DOUBLE for a in r for b in r
        if mol.GetBondBetweenAtoms(a, b)))
    assert found is not None and found.traced == found.atoms and not found.leaving_atoms
    assert found.product_atoms == ring


def test_a_mitsunobu_inversion_takes_the_acids_oxygen_and_the_alcohols_leaves():
    """The ester of an alcohol's carbon inverted was traced with the alcohol's oxygen kept and the acid's OH leaving,
    as a Fischer esterification's: the inversion says the alcohol's C-O bond broke, and its oxygen leaves (as
    triphenylphosphine oxide)."""
    reactants = f"{NITROBENZOIC_ACID}.C[C@@H](O)c1ccccc1"
    found = reaction_centre(reactants, "C[C@H](OC(=O)c1ccc([N+](=O)[O-])cc1)c1ccccc1")
    alcohol_oxygen = Chem.MolFromSmiles(NITROBENZOIC_ACID).GetNumAtoms() + 2
    assert found.leaving_atoms == {alcohol_oxygen}
    kept = reaction_centre(reactants, "C[C@@H](OC(=O)c1ccc([N+](=O)[O-])cc1)c1ccccc1")  # configuration kept
    assert symbols(reactants, kept.leaving_atoms) == ["O"] and alcohol_oxygen not in kept.leaving_atoms
