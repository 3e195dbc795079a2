"""Which valid answers a chemist must not be shown as sane (chem.answer_concerns)."""
import os
import re

import pytest
from rdkit import Chem

from molspec_core.chem import (CXSMILES, ION_WRITINGS, ChemError, answer_concerns, canonical, canonical_fragments,
                               in_ion_writing, mol_from_smiles, salts_as_ions, smiles_from_cxsmiles, smiles_from_inchi,
                               why_unreadable, without_isotopes)


@pytest.mark.parametrize("answer, query, task, concerns", [
    ("CC(=O)OCC", "CC(=O)O.CCO", "forward", ()),  # a real product
    ("CC(=O)O.CCO", "CC(=O)O.CCO", "forward", ("same as the query",)),
    ("CCO", "CC(=O)O.CCO", "forward", ("an unchanged reactant",)),
    ("CC(=O)O.CCO", "CCOC(C)=O", "retro", ()),  # real reactants
    ("CCOC(C)=O", "CCOC(C)=O", "retro", ("same as the query",)),
    ("CCOC(C)=O.O", "CCOC(C)=O", "retro", ("contains the product itself",)),
    # a salt: every molecule of the product among the answer's (the whole product was never one of them)
    ("CO.O=C([O-])c1ccccc1.[Na+]", "O=C([O-])c1ccccc1.[Na+]", "retro", ("contains the product itself",)),
    ("O=C(O)c1ccccc1.[Na+].[OH-]", "O=C([O-])c1ccccc1.[Na+]", "retro", ()),  # the counter-ion alone is no repeat
    ("OOO", "CCOC(C)=O", "retro", ("lacks atoms of the product (4 C)", "an O-O-O chain")),
    ("CC(=O)OO", "CC(=O)O.OO", "forward", ()),  # a peroxy acid is a real product: one O-O bond is fine
    ("CC(=O)O.N", "CC(=O)Nc1ccccc1", "retro", ("lacks atoms of the product (6 C)",)),  # the ring from nowhere
    ("Brc1ccccc1", "c1ccccc1", "forward", ("atoms no reactant has (1 Br)",)),
    # an isotope label is its own kind of atom: one the query lacks comes from nowhere (was no concern)
    ("CO[13CH3]", "CI.O", "forward", ("atoms no reactant has (1 13C)",)),
    ("COC([2H])([2H])[2H]", "CI.CO", "forward", ("atoms no reactant has (3 2H)",)),
    ("CI.Oc1ccccc1", "[13CH3]Oc1ccccc1", "retro", ("lacks atoms of the product (1 13C)",)),
    ("[13CH3]I.Oc1ccccc1", "[13CH3]Oc1ccccc1", "retro", ()), ("COC(C)=O.[2H]Cl", "CC(=O)Cl.[2H]OC", "forward", ()),
    ("[CH3]", "C", "forward", ("unpaired electrons (a radical)",)),
    # a metal's unpaired electrons, which RDKit counts (magnesium metal two, copper(II) one), make no radical: a
    # Grignard reagent's magnesium and a copper(II) salt were flagged so
    ("BrCc1ccccc1.[Mg]", "Br[Mg]Cc1ccccc1", "retro", ()),
    ("CC(=O)[O-].CC(=O)[O-].[Cu+2]", "CC(=O)O.CC(=O)O.[Cu+2].[O-2]", "forward", ()),
    # a reactant whose stereo alone changed is no product, and the product's enantiomer no precursor of it
    ("CC(N)C(=O)O", "CC(=O)Cl.C[C@H](N)C(=O)O", "forward", ("an unchanged reactant but for its stereo",)),
    ("C/C=C\\C", "C/C=C/C.[H][H]", "forward", ("an unchanged reactant but for its stereo",)),
    ("N[C@@H](CF)c1ccccc1", "N[C@H](CF)c1ccccc1", "retro", ("contains the product itself but for its stereo",)),
    ("CI.CC1CCCCC1N", "C[C@@H]1CCCC[C@H]1N", "retro", ("contains the product itself but for its stereo",)),
    ("CC(=O)N[C@@H](C)C(=O)O", "CC(=O)Cl.C[C@H](N)C(=O)O", "forward", ()),  # a new molecule, whatever its stereo
    ("C[C@H](N)C(=O)O.CC(=O)O", "C[C@H](NC(C)=O)C(=O)O", "retro", ()),
    # a salt of the query's base and a strong acid is its formation, as USPTO-MIT records it (imatinib mesylate), not a
    # reactant given back: such answers were flagged 'an unchanged reactant'
    ("CN1CCN(Cc2ccccc2)CC1.CS(=O)(=O)O", "CCO.CN1CCN(Cc2ccccc2)CC1.CS(=O)(=O)O", "forward", ()),
    ("CN1CCN(Cc2ccccc2)CC1.Cl", "CN1CCN(Cc2ccccc2)CC1.Cl.ClCCl", "forward", ()),
    ("CN1CCN(Cc2ccccc2)CC1.O=P(O)(O)O", "CN1CCN(Cc2ccccc2)CC1.CO.O=P(O)(O)O", "forward", ()),
    # the whole query given back is none (a Boc-amine and HCl), nor the product itself
    ("CC(C)(C)OC(=O)N1CCNCC1.Cl", "CC(C)(C)OC(=O)N1CCNCC1.Cl", "forward", ("same as the query",)),
    ("CN1CCN(Cc2ccccc2)CC1.Cl", "CN1CCN(Cc2ccccc2)CC1.Cl", "retro", ("same as the query",)),
    # but not a by-product's salt (the base not the query's main molecule), a base without nitrogen, a weak acid
    ("CCN(CC)CC.Cl", "CC(=O)Cl.CCN(CC)CC.Cl.NCc1ccccc1", "forward", ("an unchanged reactant",)),
    # a salt's ions, protons alone moved between the query's molecules, are those molecules (they escaped both flags)
    ("[Cl-].[NH3+]Cc1ccccc1", "Cl.NCc1ccccc1", "forward", ("same as the query",)),
    ("C[C@H]([NH3+])C(=O)[O-]", "C[C@H](N)C(=O)O", "forward", ("same as the query",)),
    ("CC[NH+](CC)CC.[Cl-]", "CC(=O)Cl.CCN(CC)CC.Cl.NCc1ccccc1", "forward", ("an unchanged reactant",)),
    # but not a salt whose protons do not balance so (acetic acid's went to the hydroxide), nor one the query's base
    # and strong acid make, written as ions; hexafluorophosphate, which the Uncharger protonates unreadably, stays
    ("CC(=O)[O-].[Na+]", "CC(=O)O.[Na+].[OH-]", "forward", ()),
    ("CS(=O)(=O)[O-].C[NH+]1CCN(Cc2ccccc2)CC1", "CCO.CN1CCN(Cc2ccccc2)CC1.CS(=O)(=O)O", "forward", ()),
    ("CC[N+](CC)(CC)CC.F[P-](F)(F)(F)(F)F", "CCBr.CCN(CC)CC.F[P-](F)(F)(F)(F)F.[K+]", "forward", ()),
    ("B.N", "[BH4-].[NH4+]", "forward", ()),  # borohydride made borane lost a hydride, not a proton
    ("CC(=O)Oc1ccccc1.CS(=O)(=O)O", "CC(=O)Oc1ccccc1.CCO.CS(=O)(=O)O", "forward", ("an unchanged reactant",)),
    ("CC(=O)O.NCc1ccccc1", "CC(=O)O.CCN(CC)CC.NCc1ccccc1", "forward", ("an unchanged reactant",)),
    # a product carries no net charge: a saponification's carboxylate alone (the forward model's, sane), or a
    # quaternary ammonium without its iodide; a reactant set may (USPTO-50K leaves an azide's counter-ion out)
    ("CC(C)(CC(F)(F)F)C(=O)[O-]", "CCOC(=O)C(C)(C)CC(F)(F)F.CO.O.[Li+].[OH-]", "forward",
     ("a net charge of -1 (an ion without its counter-ion)",)),
    ("C[N+](C)(C)C", "CI.CN(C)C", "forward", ("a net charge of +1 (an ion without its counter-ion)",)),
    ("C[N+](C)(C)C.[I-]", "CI.CN(C)C", "forward", ()),
    ("ClCc1ccccc1.[N-]=[N+]=[N-]", "[N-]=[N+]=NCc1ccccc1", "retro", ()),
])
def test_answer_concerns(answer, query, task, concerns):
    assert answer_concerns(answer, query, task) == concerns


def test_a_smiles_longer_than_rdkit_writes_safely_is_refused_in_words():
    from molspec_core.chem import MAX_SMILES_CHARS, ChemError, canonical, canonical_or_none

    assert canonical("C" * MAX_SMILES_CHARS) == "C" * MAX_SMILES_CHARS
    with pytest.raises(ChemError, match="a SMILES of 5,001 characters is longer than the 5,000 read here"):
        canonical("C" * (MAX_SMILES_CHARS + 1))
    assert canonical_or_none("C" * (MAX_SMILES_CHARS + 1)) is None


def test_canonical_or_none_leaves_out_atom_maps_as_recorded_answers_carry_them():
    from molspec_core.chem import canonical_or_none

    assert canonical_or_none("[CH3:1][CH2:2][OH:3]") == canonical_or_none("OCC") == "CCO"
    assert canonical_or_none("[C@@H:4](F)(Cl)Br") == canonical_or_none("[C@@H](F)(Cl)Br")  # stereo is kept
    assert canonical_or_none("[2H:1]C") == "[2H]C" and canonical_or_none("c1:c:c:c:c:c:1") == "c1ccccc1"


def test_a_map_number_0_is_no_map_and_is_left_out_as_the_others_are():
    """Mappers write an unmapped atom as [CH3:0]: it was kept, so such a query was refused for the token '[CH3:0]'
    and a recorded answer so written never matched the model's."""
    from molspec_core.chem import canonical_fragments, canonical_or_none, leakage_key

    assert canonical_or_none("[CH3:0][OH:0]") == leakage_key("[CH3:0][OH:0]") == "CO"
    assert canonical_fragments("[CH3:1][C:0](=[O:0])[OH:2].[Na+:0]") == ["CC(=O)O", "[Na+]"]


@pytest.mark.parametrize("mapped, unmapped", [
    ("[CH3:1][C@H:2]([CH3:3])[OH:4]", "CC(C)O"),  # the maps alone told the two methyls apart
    # a trans-1,4-cyclohexane (USPTO-50K test): RDKit writes it one way mapped, another way unmapped
    ("[CH2:1]([C:2](=[O:3])[NH:4][C@H:5]1[CH2:6][CH2:7][C@H:8]([OH:9])[CH2:10][CH2:11]1)[NH2:12]",
     "O[C@H]1CC[C@H](NC(=O)CN)CC1"),
    ("[CH3:1][C@H:2]([NH2:3])[C:4](=[O:5])[OH:6]", "N[C@@H](C)C(=O)O"),  # a real stereocentre keeps its mark
    ("[CH3:1]/[CH:2]=[CH:3]/[CH3:4]", "C/C=C/C"),
])
def test_a_mapped_smiles_is_canonical_as_its_unmapped_writing_is(mapped, unmapped):
    """A recorded answer (atom-mapped, as USPTO's files write it) and a model's answer (unmapped) of one molecule
    must be one string, or the hit is missed."""
    from molspec_core.chem import canonical_fragments, canonical_or_none

    assert canonical_or_none(mapped) == canonical_or_none(unmapped) == canonical(unmapped)
    assert canonical(mapped, strip_maps=True) == canonical(unmapped)
    assert canonical_fragments(mapped) == [canonical(unmapped)]


def test_a_text_with_whitespace_inside_is_no_smiles_however_rdkit_reads_its_first_token():
    """RDKit reads what follows a space as a name: a tokenized answer 'C C ( = O ) O' was methane, and scored
    methane right (evaluate.hits, calibration.collect, known.KnownMarks)."""
    from molspec_core.chem import canonical_or_none, leakage_key

    for text in ("C C ( = O ) O", "CC(=O)O acetic acid", "CC(=O)O\tCCO", "CC(=O)\x0cO"):
        assert canonical_or_none(text) is None and leakage_key(text) is None
    assert canonical_or_none(" CC(=O)O\t") == canonical_or_none("OC(C)=O") == "CC(=O)O"  # around it: one SMILES


def test_the_leakage_key_leaves_out_stereo_and_atom_maps():
    from molspec_core.chem import leakage_key

    assert leakage_key("C[C@H](N)C(=O)O") == leakage_key("CC(N)C(=O)O") == leakage_key("[CH3:1][CH:2](N)C(=O)O")
    assert leakage_key("F/C=C/F") == leakage_key("FC=CF") and leakage_key("C1CC") is None
    # a mark on an atom that is no stereocentre, which RDKit drops only on a second reading
    assert leakage_key("O=C(N[C@@H]1C2CC3CC1CN(C3)C2)c1ccc2ccccc2c1") == leakage_key(
        "O=C(NC1C2CC3CC1CN(C3)C2)c1ccc2ccccc2c1")


def test_a_retro_set_may_share_a_reactant_with_nothing_flagged():
    # Reactant sets that merely contain a common reagent (water) are not trivial.
    assert answer_concerns("CC(=O)Cl.O", "CC(=O)O", "retro") == ()


def test_sdf_keeps_every_record_in_order_with_its_title_and_properties():
    from molspec_core.chem import sdf_text

    text = sdf_text([("CCO", "ethanol", {"rank": 1, "score": -0.5, "note": "two\nlines", "absent": None, "empty": ""}),
                     ("C1CC", "", {"rank": 2, "error": "unclosed ring"}),  # unreadable: a record without atoms
                     ("c1ccccc1", "", {"rank": 3})])
    supplier = Chem.SDMolSupplier()
    supplier.SetData(text)
    mols = list(supplier)
    assert [Chem.MolToSmiles(m) for m in mols] == ["CCO", "", "c1ccccc1"]
    assert [m.GetProp("_Name") for m in mols] == ["ethanol", "C1CC", "c1ccccc1"]  # no title: the SMILES
    assert mols[0].GetProp("rank") == "1" and mols[0].GetProp("note") == "two lines"
    assert not mols[0].HasProp("absent") and not mols[0].HasProp("empty")
    assert mols[1].GetProp("error") == "unclosed ring" and mols[2].GetProp("rank") == "3"
    assert mols[0].GetConformer().Is3D() is False


def test_sdf_draws_a_bridged_ring_system_as_a_chemist_does():
    """DABCO's SD record had its third bridge laid straight across a hexagon (two carbons at 180 degrees), as the app's
    pictures had it (chem.RING_TEMPLATES)."""
    from molspec_core.chem import sdf_text

    supplier = Chem.SDMolSupplier()
    supplier.SetData(sdf_text([("C1CN2CCN1CC2", "DABCO", {})]))
    mol = next(supplier)
    positions = mol.GetConformer().GetPositions()
    for atom in mol.GetAtoms():
        vectors = [positions[n.GetIdx()] - positions[atom.GetIdx()] for n in atom.GetNeighbors()]
        assert all((one * other).sum() / ((one ** 2).sum() * (other ** 2).sum()) ** 0.5 > -0.985
                   for i, one in enumerate(vectors) for other in vectors[i + 1:])


def test_sdf_keeps_stereo_and_no_name_or_value_can_end_a_record_early():
    from molspec_core.chem import sd_records, sdf_text

    text = sdf_text([("C[C@H](N)C(=O)O", "$$$$ title", {"IC50 <nM>": "$$$$", "IC50 >nM<": "> <x>", "a\nb": "v"}),
                     ("CCO", "", {})])
    records = sd_records(text)  # ours splits records at $$$$ lines, as most readers do
    assert [r.smiles for r in records] == ["C[C@H](N)C(=O)O", "CCO"] and not any(r.problem for r in records)
    assert records[0].title == "'$$$$ title"
    assert records[0].fields == {"IC50 _nM_": "'$$$$", "input_IC50 _nM_": "> <x>", "a b": "v"}


def test_an_inchi_longer_than_any_smiles_read_is_refused_unread():
    """A known answer's InChI was read at any length: a 10,000-carbon chain's (60 kB, a file's cell) took RDKit 7 s.
    An InChI is held to MAX_SMILES_CHARS, as a SMILES is; a query's is held to MAX_QUERY_CHARS before this."""
    from molspec_core.chem import MAX_SMILES_CHARS
    from molspec_core.known import read_known

    carbons = 1300  # the standard InChI of an unbranched alkane numbers its chain from both ends inward
    chain = [*range(1, carbons + 1, 2), *range(carbons, 0, -2)]
    inchi = f"InChI=1S/C{carbons}H{2 * carbons + 2}/c{'-'.join(map(str, chain))}/h3-{carbons}H2,1-2H3"
    assert len(inchi) > MAX_SMILES_CHARS
    with pytest.raises(ChemError, match=f"^an InChI of {len(inchi):,} characters is longer than the "
                                        f"{MAX_SMILES_CHARS:,} read here$"):
        smiles_from_inchi(inchi)
    assert read_known(inchi) is None
    assert smiles_from_inchi("InChI=1S/C9H20/c1-3-5-7-9-8-6-4-2/h3-9H2,1-2H3") == "CCCCCCCCC"


def _v3000_record(title: str, atoms: list[str], bonds: list[tuple[int, int]], fields: dict[str, str]) -> str:
    """An SD record in V3000 (which has no 999-atom limit): atoms by symbol, bonds single, 1-based."""
    atom_lines = [f"M  V30 {i} {symbol} {i * 1.5:.1f} 0 0 0" for i, symbol in enumerate(atoms, start=1)]
    bond_lines = [f"M  V30 {i} 1 {a} {b}" for i, (a, b) in enumerate(bonds, start=1)]
    data = [f">  <{name}>\n{value}\n" for name, value in fields.items()]
    return "\n".join([title, "  probe", "", "  0  0  0     0  0            999 V3000", "M  V30 BEGIN CTAB",
                      f"M  V30 COUNTS {len(atoms)} {len(bonds)} 0 0 0", "M  V30 BEGIN ATOM", *atom_lines,
                      "M  V30 END ATOM", "M  V30 BEGIN BOND", *bond_lines, "M  V30 END BOND", "M  V30 END CTAB",
                      "M  END", *data, "$$$$", ""])


def test_an_sd_record_of_more_atoms_than_any_smiles_read_is_refused_before_rdkit_sanitizes_it():
    """A 1.6 MB SD file of one 30,000-atom chain crashed the process (a segfault in RDKit's SMILES writer), taking the
    app down for every user; with its hydrogens drawn, removing them took minutes. Such a record is refused by its
    atom count, hydrogens included, and costs only itself."""
    from molspec_core.chem import MAX_SD_ATOMS, sd_records

    carbons = MAX_SD_ATOMS // 3 + 1  # a chain with its hydrogens drawn: 3 atoms a carbon, 2 more at the ends
    bearers = [c for c in range(1, carbons + 1) for _ in (0, 1)] + [1, carbons]  # the carbon each hydrogen is on
    chain = _v3000_record("chain", ["C"] * carbons + ["H"] * len(bearers),
                          [(c, c + 1) for c in range(1, carbons)]
                          + [(c, carbons + h) for h, c in enumerate(bearers, start=1)], {"id": "A1"})
    methane = _v3000_record("methane", ["C", "H", "H", "H", "H"], [(1, 2), (1, 3), (1, 4), (1, 5)], {"id": "A2"})
    big, small = sd_records(chain + methane)
    assert big.smiles == "" and big.fields == {"id": "A1"} and big.title == "chain"
    assert big.problem == (f"SD record 1 holds {3 * carbons + 2:,} atoms (hydrogens included), more than the "
                           f"{MAX_SD_ATOMS:,} read from one record: no model here reads a molecule that large")
    assert (small.smiles, small.problem, small.fields) == ("C", "", {"id": "A2"})


def test_sdf_field_names_rdkit_keeps_for_itself_are_written_as_input_fields_and_every_record_reads_back():
    """A column named _Name replaced the record's title, _id was hidden from RDKit's readers, and __computedProps or
    _MolFileChiralFlag stopped the export with RDKit's 'bad any_cast'."""
    from molspec_core.chem import sdf_text

    fields = {"_Name": "over", "_id": "A1", "__computedProps": "q", "_MolFileChiralFlag": "x", "id\x00": "B  2\tc"}
    text = sdf_text([("CCO", "ethanol", fields), ("", "refused", {"_id": "A2", "error": "no query"})])
    supplier = Chem.SDMolSupplier()
    supplier.SetData(text)
    mols = list(supplier)
    assert all(m is not None for m in mols) and [m.GetNumAtoms() for m in mols] == [3, 0]
    assert [m.GetProp("_Name") for m in mols] == ["ethanol", "refused"]
    assert mols[0].GetPropsAsDict() == {"input__Name": "over", "input__id": "A1", "input___computedProps": "q",
                                        "input__MolFileChiralFlag": "x", "id\\x00": "B  2\tc"}
    assert mols[1].GetPropsAsDict() == {"input__id": "A2", "error": "no query"}
    untitled = Chem.SDMolSupplier()
    untitled.SetData(sdf_text([("CCO", " \t", {}), ("CCN", "\n", {})]))
    assert [m.GetProp("_Name") for m in untitled] == ["CCO", "CCN"]  # a title of spaces is none: the SMILES


def test_clear_caches_forgets_the_answers_checked():
    """Timings that decode one query with several methods empty the caches between them (tools/page_latency.py)."""
    from molspec_core.chem import _heavy_atoms, canonical_or_none, clear_caches

    answer_concerns("CCO", "CC=O.[H][H]", "forward")
    canonical_or_none("OCC")
    assert canonical_or_none.cache_info().currsize and answer_concerns.cache_info().currsize
    clear_caches()
    assert not any(f.cache_info().currsize for f in (canonical_or_none, answer_concerns, _heavy_atoms))


def test_a_hydride_in_one_species_is_written_as_the_ions_uspto_writes_and_nothing_else_changes():
    fragments = ["CCOC(=O)c1ccccc1", "[Li+]", "[AlH4-]", "C1CCOC1"]
    assert in_ion_writing(fragments) == ["CCOC(=O)c1ccccc1", "[Li+]", "[Al+3]", "[H-]", "[H-]", "[H-]", "[H-]",
                                         "C1CCOC1"]
    assert in_ion_writing(["[NaH]", "CI"]) == ["[H-]", "[Na+]", "CI"]
    assert in_ion_writing(["CCO", "[Na+]", "[H-]"]) is None


@pytest.mark.parametrize("species", sorted(ION_WRITINGS))
def test_each_ion_writing_is_canonical_and_keeps_the_charge(species):
    """The table's keys are canonical, as query fragments are, and the ions carry the species' charge."""
    assert canonical(species) == species
    charge = sum(Chem.GetFormalCharge(Chem.MolFromSmiles(f)) for f in ION_WRITINGS[species].split("."))
    assert charge == Chem.GetFormalCharge(Chem.MolFromSmiles(species))


@pytest.mark.parametrize("text, smiles", [
    ("CCO |(0,0,;1.3,0.75,;2.6,0,)|", "CCO"),  # coordinates, as Marvin copies a drawing
    ("C1=CC=CC=C1Cl |c:0,2,4|", "Clc1ccccc1"),  # ring double bonds marked cis
    ("C[CH2] |^1:1|", "[CH2]C"),  # a radical: the |...| part changes the atom, so it is read, not cut off
    ("C[C@H](N)C(=O)O |&1:1|", "C[C@H](N)C(=O)O"),  # an enhanced-stereo group: dropped, the stereo as drawn kept
    ("CC(=O)Cl.NC>ClCCl>CC(=O)NC |c:0|", "CC(=O)Cl.CN>ClCCl>CNC(C)=O"),  # a reaction keeps its three parts
    ("C[CH2].O>>CCO |^1:1|", "[CH2]C.O>>CCO"),
])
def test_a_cxsmiles_is_read_as_rdkit_reads_it_and_written_as_plain_smiles(text, smiles):
    assert CXSMILES.fullmatch(text) and smiles_from_cxsmiles(text) == smiles


def test_a_dative_bond_is_no_reaction_arrow():
    """A complex's '->' was taken for a reaction's '>': its CXSMILES refused as "a CXSMILES reaction", and a mark
    RDKit drops beside it went unsaid (the text, cut at the '>', read as no SMILES)."""
    from molspec_core.chem import dropped_stereo, reaction_sides

    assert reaction_sides("[NH3]->[Pt](Cl)Cl") == ["[NH3]->[Pt](Cl)Cl"]
    assert reaction_sides("C<-N.CC>O>C") == ["C<-N.CC", "O", "C"]
    assert smiles_from_cxsmiles("[NH3]->[Pt](Cl)Cl |$;;;$|") == "[NH3]->[Pt]([Cl])[Cl]"
    assert dropped_stereo("C[C@H](C)O.[NH3]->[Pt](Cl)Cl").startswith("Stereo marks dropped: 1 atom marked @")


@pytest.mark.parametrize("text, said", [
    ("C[C@H](N)C(=O)O |&1:1|", "&1 (both configurations, a mixture) at atom 1 (atoms counted from 0"),
    ("C[C@H](O)[C@@H](N)C.OC[C@@H]1CCCN1 |o1:1,3,&2:8|",
     "or1 (one configuration, not known which) at atoms 1, 3; &2 (both configurations, a mixture) at atom 8"),
    ("C[C@H](N)C(=O)O |a:1|", ""),  # absolute: as drawn, which is what the model reads
    ("C[C@H](N)C(=O)O", ""), ("CCO |(0,0,;1.3,0.75,;2.6,0,)|", ""),
    ("C[C@H](N)C>>C[C@H](N)C |&1:1|", ""),  # a reaction's groups are not looked at
    # a CXSMILES counts its [H] atoms, which RDKit removes as it reads: the note said "atom 0" for the CXSMILES's 1
    ("[H][C@](C)(N)C(=O)O |&1:1|", "&1 (both configurations, a mixture) at atom 1 (atoms counted from 0"),
    # the flag r (the chiral flag unset, as Marvin copies a racemate drawn with wedges) was read as one enantiomer
    ("C[C@H](O)CC |r|", "r (the chiral flag unset: the configurations drawn are relative, both enantiomers, a "
                        "racemate) at atom 1 (atoms counted from 0"),
    ("C[C@@H](O)[C@H](C)N |(0,0,;1,1,;2,0,;3,1,;4,0,;5,1,),r|",
     "r (the chiral flag unset: the configurations drawn are relative, both enantiomers, a racemate) at atoms 1, 3"),
    ("C[C@H](N)[C@@H](C)O |&1:1,r|", "&1 (both configurations, a mixture) at atom 1; r (the chiral flag unset: the "
                                     "configurations drawn are relative, both enantiomers, a racemate) at atom 3"),
    ("C[C@H](N)C(=O)O |&1:1,r|", "&1 (both configurations, a mixture) at atom 1 (atoms"),  # no centre left for r
    ("C[C@H](N)C(=O)O |a:1,r|", ""),  # an explicit absolute centre stays absolute
    ("CCO |r|", ""), ("CCO |$r;;$|", ""),  # no stereocentre; an atom labelled r
])
def test_a_cxsmiles_says_which_enhanced_stereo_the_model_does_not_read(text, said):
    from molspec_core.chem import unread_stereo_groups

    note = unread_stereo_groups(text)
    assert (said in note and note.startswith("Enhanced stereo is not read: ")) if said else note == ""


@pytest.mark.parametrize("text, said", [
    ("C[C@H]=C=[C@H]C", "2 atoms marked @"),  # an allene's axial stereo: RDKit writes CC=C=CC
    ("C[C@H](C)O", "1 atom marked @"),  # isopropanol's CH is no stereocentre
    ("CC/C(C)=C(/C)C", "1 double bond marked / or \\"),  # two methyls on one end
    ("C[C@H](C)O.CC/C(C)=C(/C)C>CCO>", "1 atom marked @ and 1 double bond marked / or \\"),
    # the atom maps alone told the like groups apart, and the model reads the query without them: were not said
    ("[CH3:1][C@H:2]([CH3:3])[OH:4]", "1 atom marked @"),
    ("[CH3:1]/[CH:2]=[C:3](/[CH3:4])[CH3:5]>>", "1 double bond marked / or \\"),
    ("[CH3:1][C@H:2]([NH2:3])[C:4](=[O:5])[OH:6]", ""),  # a real stereocentre, mapped
    ("N[C@H]1CC[C@H](O)CC1", ""), ("F/C=C/F.C[C@@H](N)O", ""), ("C[C@H](N)C(=O)O |&1:1|", ""),  # all kept
    # marks around an allene or a cumulene, whose inner atoms carry none: RDKit writes CC=C=CC, and nothing was said
    ("C/C=C=C/C", "1 double bond marked / or \\"), ("C/C=C=C=C\\C", "1 double bond marked / or \\"),
    ("C/C=C/S(=O)(=O)C", ""), ("C/C=C/C=C=C", ""),  # a sulfone's S=O pair is no run; an allene marked at one end
    ("CCO", ""), ("C1CC", ""), ("", ""),
])
def test_stereo_marks_rdkit_drops_are_said(text, said):
    """An allene's stereo vanished from the query (C[C@H]=C=[C@H]C read as CC=C=CC) without a word."""
    from molspec_core.chem import dropped_stereo

    note = dropped_stereo(text)
    assert (note.startswith(f"Stereo marks dropped: {said} that RDKit") if said else note == ""), note


def test_a_small_rings_double_bond_marked_cis_is_said_to_be_dropped_for_its_ring():
    """cis-Cycloheptene written with its marks lost them, and the note named only like groups and axial stereo,
    neither of which it has: RDKit reads no geometry on a double bond in a ring of fewer than 8 atoms (cis perforce)."""
    from molspec_core.chem import dropped_stereo

    note = dropped_stereo("C1CC/C=C\\CC1")
    assert note.startswith("Stereo marks dropped: 1 double bond marked / or \\") and "ring of fewer than 8" in note
    assert dropped_stereo("C1CCC/C=C/CC1") == ""  # trans-cyclooctene keeps its geometry
    assert "ring of fewer than 8" in dropped_stereo("[H]/C(C)=C/C.C1CC/C=C\\CC1")  # an [H] counted as an atom first
    assert "ring" not in dropped_stereo("CC/C(C)=C(/C)C")


def test_a_cumulenes_marks_are_said_to_be_dropped_for_being_a_cumulenes():
    """A butatriene's E or Z (C/C=C=C=C/C), which RDKit does not keep, was dropped without a word."""
    from molspec_core.chem import dropped_stereo

    assert "a cumulene's (C=C=C=C) E or Z" in dropped_stereo("C/C=C=C=C/C")
    assert "cumulene" not in dropped_stereo("C/C=C=C/C")  # an allene's stereo is axial, said as such


@pytest.mark.parametrize("text", ["CCO", "CC O", "CCO |c:1| ethanol", "CCO ||x", "CC|c:1|", "| |"])
def test_text_that_is_no_cxsmiles_is_not_taken_for_one(text):
    assert CXSMILES.fullmatch(text) is None


@pytest.mark.parametrize("text", ["C1CC |c:1|", "CC |^9:0|", "C1CC>>CC |c:0|"])
def test_a_cxsmiles_rdkit_cannot_read_is_refused(text):
    with pytest.raises(ChemError, match="RDKit cannot read .* as a CXSMILES"):
        smiles_from_cxsmiles(text)


PARACETAMOL_INCHI = "InChI=1S/C8H9NO2/c1-6(10)9-7-2-4-8(11)5-3-7/h2-5,11H,1H3,(H,9,10)"


@pytest.mark.parametrize("smiles", [
    "CC(=O)Nc1ccc(O)cc1",  # paracetamol: RDKit alone reads its InChI as the imidic acid CC(O)=Nc1ccc(O)cc1
    "NC(N)=O", "NC(=O)c1ccccc1",
    "CC(=O)N[C@@H](C)C(=O)N[C@@H](Cc1ccccc1)C(=O)O",  # two amides beside stereocentres, which stay
    "C/C=C\\NC(C)=O",  # an amide on a double bond, whose geometry stays
    "O=c1cccc[nH]1",  # 2-pyridone (the same InChI as 2-hydroxypyridine)
    "C[C@H](N)C(=O)O", "CC(=O)Oc1ccccc1C(=O)O", "CC(=O)CC(C)=O",  # no mobile hydrogen between forms to choose
])
def test_a_standard_inchi_is_read_as_the_tautomer_chemists_write(smiles):
    """A standard InChI leaves its mobile hydrogens unplaced: of its tautomers the preferred one is read, not
    the one RDKit's reader lands on (for every amide, its imidic acid, which the models read as another molecule)."""
    inchi = Chem.MolToInchi(Chem.MolFromSmiles(smiles))
    assert inchi.startswith("InChI=1S/") and smiles_from_inchi(inchi) == canonical(smiles)


def test_rdkit_alone_reads_an_amide_inchi_as_its_imidic_acid():
    """Why smiles_from_inchi chooses a tautomer (were RDKit to change, the choice could go)."""
    assert Chem.MolToSmiles(Chem.MolFromInchi(PARACETAMOL_INCHI)) == "CC(O)=Nc1ccc(O)cc1"
    assert smiles_from_inchi(PARACETAMOL_INCHI) == "CC(=O)Nc1ccc(O)cc1"


@pytest.mark.parametrize("organometallic, read_back", [
    ("CCCC[Li]", "[CH2]CCC.[Li]"), ("C[Mg]Br", "[Br-].[CH3].[Mg+]"), ("C[Zn]C", "[CH3].[CH3].[Zn]")])
def test_an_inchi_that_reads_back_as_radicals_beside_a_lone_metal_is_refused(organometallic, read_back):
    """A standard InChI writes a metal apart from the carbon it is bonded to: butyllithium's was read as a butyl
    radical beside a lithium atom, and a Grignard reagent's as a methyl radical, which the model read unsaid."""
    inchi = Chem.MolToInchi(Chem.MolFromSmiles(organometallic))
    with pytest.raises(ChemError, match=f"read back, it is {re.escape(read_back)}: .* unpaired electron"):
        smiles_from_inchi(inchi)


@pytest.mark.parametrize("inchi, smiles", [
    ("InChI=1S/NO/c1-2", "[N]=O"),  # nitric oxide is a radical, with no metal
    ("InChI=1S/2C2H4O2.Pd/c2*1-2(3)4;/h2*1H3,(H,3,4);/q;;+2/p-2", "CC(=O)[O-].CC(=O)[O-].[Pd+2]"),  # as USPTO writes
])
def test_an_inchi_with_a_radical_or_a_metal_alone_is_read(inchi, smiles):
    assert smiles_from_inchi(inchi) == smiles


@pytest.mark.parametrize("inchi, report", [
    ("InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3/q+99", "Charge(s): Do not match"),  # ethanol with a charge no atom carries
    ("InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3/q-1", "Charge(s): Do not match"),
    ("InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3/p-1", "Proton balance: Does not match"),  # a proton removed from nowhere
])
def test_an_inchi_whose_charge_or_proton_layer_the_structure_cannot_carry_is_refused(inchi, report):
    """RDKit read ethanol's InChI with a charge layer of +99 (or -1) as plain ethanol, the layer dropped unsaid:
    the query was predicted as ethanol. The InChI software's own report of the mismatch is named."""
    with pytest.raises(ChemError, match=f"builds CCO from it and reports .*{re.escape(report)}.* charge \\(/q\\)"):
        smiles_from_inchi(inchi)


@pytest.mark.parametrize("inchi, smiles", [
    ("InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3/p+1", "CC[OH2+]"),  # a proton layer the structure takes: read
    ("InChI=1S/C2H5O/c1-2-3/h2H2,1H3/q-1", "CC[O-]"),  # ethoxide
    ("InChI=1S/C2H4O2.Na/c1-2(3)4;/h1H3,(H,3,4);/q;+1/p-1", "CC(=O)[O-].[Na+]"),  # sodium acetate
])
def test_an_inchi_with_charge_and_proton_layers_its_structure_carries_is_read(inchi, smiles):
    assert smiles_from_inchi(inchi) == smiles


@pytest.mark.parametrize("salt", ["[O-]Cl=O.[Na+]", "[O-]I(=O)(=O)=O.[Na+]"])  # Pinnick; diol cleavage
def test_an_inchi_whose_structure_rdkit_refuses_is_told_so(salt):
    """Sodium chlorite's and periodate's standard InChIs (as PubChem gives them) were told only that RDKit cannot
    read them as InChIs, as if they were broken: RDKit refuses the structure the InChI software builds."""
    with pytest.raises(ChemError, match=r"builds from .* a structure RDKit refuses \(RDKit: Explicit valence .*SMILES"):
        smiles_from_inchi(Chem.MolToInchi(Chem.MolFromSmiles(salt)))


def test_an_inchi_with_fixed_hydrogens_is_read_where_they_are_fixed():
    imidic = Chem.MolToInchi(Chem.MolFromSmiles("CC(O)=Nc1ccc(O)cc1"), options="/FixedH")
    assert imidic.startswith("InChI=1/") and "/f" in imidic
    assert smiles_from_inchi(imidic) == "CC(O)=Nc1ccc(O)cc1"


@pytest.mark.parametrize("smiles, reason", [
    ("C1CC", "ring bond 1 opened at position 2 is never closed"),
    ("C%12CC.C1CC1", "ring bond %12 opened at position 2 is never closed"),
    ("CC(C(C)C", "the '(' at position 3 is never closed"),
    ("CC)C", "the ')' at position 3 closes no '('"),
    ("C[NH3", "the '[' at position 2 is never closed"),
    ("CC]", "the ']' at position 3 closes no '['"),
    # RDKit's atoms named where the text writes them: its "atom # 1" counts from 0, and [H] and [13CH3] count one each
    ("c1cccc1", "the aromatic atoms at positions 1, 3, 4, 5, 6 (written lowercase) cannot take alternating single and "
                "double bonds (RDKit: Can't kekulize mol. Unkekulized atoms: 0 1 2 3 4)"),
    ("CCO.c1ccnc1", "the aromatic atoms at positions 5, 7, 8, 9, 10 (written lowercase) cannot take alternating single "
                    "and double bonds: an aromatic nitrogen that bears a hydrogen is written [nH], as in pyrrole, "
                    "c1cc[nH]c1 (RDKit: Can't kekulize mol. Unkekulized atoms: 3 4 5 6 7)"),
    ("[13CH3]1CC1", "the [13CH3] at position 1 has more bonds than it can (RDKit: Explicit valence for atom # 0 C, 5, "
                    "is greater than permitted, counting atoms from 0)"),
    ("[H]C(C)(C)(C)(C)C", "the C at position 4 has more bonds than it can (RDKit: Explicit valence for atom # 1 C, 6, "
                          "is greater than permitted, counting atoms from 0)"),
    # an onium or a borate written without its charge: told of too many bonds, not of the charge
    ("CN(C)(C)C.[Cl-]", "the N at position 2 has more bonds than it can: a nitrogen with 4 bonds is charged, as "
                        "[N+] (RDKit: Explicit valence for atom # 1 N, 4, is greater than permitted, counting atoms "
                        "from 0)"),
    ("C[O](C)C", "the [O] at position 2 has more bonds than it can: an oxygen with 3 bonds is charged, as [O+] (RDKit: "
                 "Explicit valence for atom # 1 O, 3, is greater than permitted, counting atoms from 0)"),
    ("C[NH](C)C", "the [NH] at position 2 has more bonds than it can: a nitrogen with 4 bonds is charged, as [NH+] "
                  "(RDKit: Explicit valence for atom # 1 N, 4, is greater than permitted, counting atoms from 0)"),
    ("CCo", "the o at position 3 is written aromatic (lowercase) but is in no ring (RDKit: non-ring atom 2 marked "
            "aromatic, counting atoms from 0)"),
    # a borane complex with its dative bond: told that a boron of 4 bonds is charged, [BH3-]
    ("C1CCOC1->[BH3]", "the [BH3] at position 10 has more bonds than it can: RDKit counts the dative bond (->) to it "
                       "among its bonds, and a complex's molecules are written apart with '.', as B.C1CCOC1 (RDKit: "
                       "Explicit valence for atom # 5 B, 4, is greater than permitted, counting atoms from 0)"),
    # a salt's ions written side by side: told of too many bonds, not that the two were bonded
    ("[Na+][Cl-]", "the [Cl-] at position 6 has more bonds than it can: written beside the [Na+] at position 1 with "
                   "no '.' between, the two ions are bonded; a salt's ions are joined with '.', as [Cl-].[Na+] "
                   "(RDKit: Explicit valence for atom # 1 Cl, 1, is greater than permitted, counting atoms from 0)"),
    ("CC[N+](CC)(CC)[Br-]", "the [Br-] at position 15 has more bonds than it can: written beside the [N+] at position "
                            "3 with no '.' between, the two ions are bonded; a salt's ions are joined with '.', as "
                            "CC[N+](CC)CC.[Br-] (RDKit: Explicit valence for atom # 7 Br, 1, is greater than "
                            "permitted, counting atoms from 0)"),
    # each of these was "RDKit cannot parse ... as a molecule" alone
    ("C==C", "the bond '=' at position 3 follows another bond"),
    ("CC(=O)O.", "the '.' at position 8 has no molecule after it"),
    ("CCO..CC", "the '.' at position 5 has no molecule before it"),
    ("C(=)C", "the bond '=' at position 3 has no atom after it"),
    # a charge written as in a formula, outside brackets, was told only of a bond with no atom after it
    ("CC(=O)O-.[Na+]", "the bond '-' at position 8 has no atom after it: if it is a charge, it goes in its atom's "
                       "brackets, as [O-]"),
    ("CC(=O)O-", "the bond '-' at position 8 has no atom after it: if it is a charge, it goes in its atom's brackets, "
                 "as [O-]"),
    ("C()C", "the branch '()' at position 2 is empty"),
    ("CC((C)C)", "the '(' at position 4 follows another '(': a branch begins with an atom or a bond"),  # said nothing
    ("1CC1", "ring bond 1 at position 1 has no atom before it"),
    ("[Xx]", "the bracket atom [Xx] at position 1 is not one RDKit reads: an element symbol, then its hydrogens and "
             "charge, as [Na+], [NH4+] or [13CH3]"),
    ("[NH4]+", "the '+' at position 6 is a charge outside brackets: a charge goes in its atom's brackets, as [NH4+]"),
    ("CH3CH2OH", "the 'H' at position 2 is a hydrogen outside brackets: hydrogens are left implicit, or written in an "
                 "atom's brackets, as [CH3]"),  # was told of ring bond 3, which the text never meant
    ("c1ccHcc1", "the 'H' at position 5 is a hydrogen outside brackets: hydrogens are left implicit, or written in an "
                 "atom's brackets, as [CH3]"),  # said nothing: the H among aromatic atoms was taken for a name's letter
    ("C%1CC%1", "the '%' at position 2 starts no ring bond label: '%' takes two digits, as %12, or digits in "
                "parentheses, as %(123)"),  # was told ring bond 1 is never closed
    ("CQ", "the 'Q' at position 2 is no atom: outside brackets a SMILES writes B, C, N, O, P, S, F, Cl, Br and I "
           "(aromatic: b, c, n, o, p, s), and every other element in brackets, as [Na] or [Si]"),
    # an element outside brackets, which was told only that its 'a', 'L' or 'g' is no atom
    ("CNa", "the 'Na' at position 2 is sodium, which a SMILES writes in brackets: [Na] (outside them only B, C, N, O, "
            "P, S, F, Cl, Br and I)"),
    ("CCCCLi", "the 'Li' at position 5 is lithium, which a SMILES writes in brackets: [Li] (outside them only B, C, N, "
               "O, P, S, F, Cl, Br and I)"),
    ("CMgBr", "the 'Mg' at position 2 is magnesium, which a SMILES writes in brackets: [Mg] (outside them only B, C, "
              "N, O, P, S, F, Cl, Br and I)"),
    ("KOC(C)(C)C", "the 'K' at position 1 is potassium, which a SMILES writes in brackets: [K] (outside them only B, "
                   "C, N, O, P, S, F, Cl, Br and I)"),
    ("C[Si](C)(C)OCSi(C)(C)C", "the 'Si' at position 14 is silicon, which a SMILES writes in brackets: [Si] (outside "
                               "them only B, C, N, O, P, S, F, Cl, Br and I)"),
    ("C{C}", "the '{' at position 2 is not part of a SMILES"),
    # two molecules given as a list or a sum, told only that the ',' is no part of a SMILES or the '+' a charge
    ("CCO,CCN", "the ',' at position 4 is not part of a SMILES: the molecules of one query are joined with '.', as "
                "CC(=O)Cl.NCc1ccccc1"),
    ("CC(=O)Cl+NCc1ccccc1", "the '+' at position 9 is a charge outside brackets or a plus between molecules: a "
                            "charge goes in its atom's brackets, as [NH4+], and the molecules of one query are joined "
                            "with '.', as CC(=O)Cl.NCc1ccccc1"),
    ("CCO,", "the ',' at position 4 is not part of a SMILES"),  # nothing after it: no list
    # a molecular formula, told of a ring bond never closed (CO2), of a hydrogen or a letter outside brackets
    *[(formula, "this reads as a molecular formula, which gives a molecule's atoms but not how they are bonded: paste "
                "its SMILES (water is O, carbon dioxide O=C=O, sodium hydroxide [Na+].[OH-]) or draw it")
      for formula in ("CO2", "H2O", "NaOH", "K2CO3", "C12H22O11")],
    ("OC1", "ring bond 1 opened at position 3 is never closed"),  # a formula writes no count of 1
    ("C1CCCCC2", "ring bond 1 opened at position 2 is never closed"),  # nor an element twice
    ("AcOH", "the 'Ac' at position 1 is an abbreviation (acetyl), which a SMILES does not hold: write its atoms, as "
             "C(C)=O"),  # actinium, but the chemist's acetyl
    # each of these was "RDKit cannot parse ... as a molecule" alone
    ("C11", "ring bond 1 at position 3 closes on the atom it was opened on at position 2: a ring bond joins two atoms"),
    ("C12CC12", "ring bond 2 at position 7 joins two atoms that are bonded already (ring bond 2 opened at position 3)"),
    ("C1C1", "ring bond 1 at position 4 joins two atoms that are bonded already (ring bond 1 opened at position 2)"),
    ("aspirin", ""),  # a name: the service says names are not read
    # a chemist's shorthand, which was told of an 'h' or an 'M' that is no atom
    ("PhC(=O)Cl", "the 'Ph' at position 1 is an abbreviation (phenyl), which a SMILES does not hold: write its atoms, "
                  "as c1ccccc1"),
    ("CC(=O)OMe", "the 'Me' at position 8 is an abbreviation (methyl), which a SMILES does not hold: write its atoms, "
                  "as C"),
    ("Et3N", "the 'Et' at position 1 is an abbreviation (ethyl), which a SMILES does not hold: write its atoms, as CC"),
    ("CC(=O)Cl.NC.DMF", "the 'DMF' at position 13 is an abbreviation (dimethylformamide), which a SMILES does not "
                        "hold: write its atoms, as CN(C)C=O"),  # a solvent as the reaction's writers name it
    ("[R1]CC", "the bracket atom [R1] at position 1 is an R-group, a placeholder that stands for no one molecule: "
               "draw the group in its place"),
    # deuterium as chemists write it: told only that [D] is no bracket atom RDKit reads
    ("[D]C([D])([D])O", "the bracket atom [D] at position 1 is deuterium, which a SMILES writes as hydrogen with its "
                        "mass: [2H]"),
    ("CC[T]", "the bracket atom [T] at position 3 is tritium, which a SMILES writes as hydrogen with its mass: [3H]"),
    # were told of an 'L' or an 'h' that is no atom, or of ring bond 1 with no atom before it
    ("LFQSCWFLJHTTHZ-UHFFFAOYSA-N", "this is an InChIKey, a hashed key from which no structure can be read back: "
                                    "paste the structure's SMILES or InChI (PubChem gives both beside the key)"),
    ("InChIKey=LFQSCWFLJHTTHZ-UHFFFAOYSA-N", "this is an InChIKey, a hashed key from which no structure can be read "
                                             "back: paste the structure's SMILES or InChI (PubChem gives both beside "
                                             "the key)"),
    ("FFFFFFFFFFFFFF-FFFFFFFFFF-F", "the F at position 2 has more bonds than it can (RDKit: Explicit valence for "
                                    "atom # 1 F, 2, is greater than permitted, counting atoms from 0)"),  # no InChIKey
    ("1S/C2H6O/c1-2-3/h3H,2H2,1H3", "this reads as an InChI without its prefix: an InChI begins 'InChI=', as "
                                    "InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3"),
    ("1S/2C2H4O2.Pd/c2*1-2(3)4;/h2*1H3,(H,3,4);/q;;+2/p-2", "this reads as an InChI without its prefix: an InChI "
     "begins 'InChI=', as InChI=1S/2C2H4O2.Pd/c2*1-2(3)4;/h2*1H3,(H,3,4);/q;;+2/p-2"),  # a formula of 2 molecules
])
def test_a_refused_smiles_says_what_to_mend(smiles, reason):
    """A chemist's typo was refused as "RDKit cannot parse 'C1CC' as a molecule" alone (session 70)."""
    assert why_unreadable(smiles) == reason
    with pytest.raises(ChemError) as refused:
        mol_from_smiles(smiles)
    assert str(refused.value) == f"RDKit cannot parse {smiles!r} as a molecule" + (f": {reason}" if reason else "")


@pytest.mark.parametrize("smiles", ["C1CC1", "C%(123)CC%(123)", "[13CH3]C1CC1", "[NH3+]CC(=O)[O-]", "C1CC.C1",
                                    "c1ccccc1N(=O)=O", "C12CC1C2", "C(C.C)", "C\\\\C", "C=1CC=1", "C$C", "C~C",
                                    "Cl[Pd](Cl)(<-N)<-N", "[NH3]->[Pt](Cl)Cl", "C(C)1CC1", "*C", "c1ccc2ccccc2c1",
                                    "C12(CC1)CC2", "C1CC(CC1)C1CC1", "C1.C1", "C%10CC%10C1CC1"])
def test_every_smiles_rdkit_reads_has_no_reason_to_mend(smiles):
    assert mol_from_smiles(smiles) is not None and why_unreadable(smiles) == ""


@pytest.mark.parametrize("smiles, fragments", [
    ("C1CC.C1", ["CCCC"]),  # butane, its ring bond across the '.'
    ("CCO.C1CC.C1N", ["CCO", "CCCCN"]),
    ("[CH3:1][CH2:2]1.[CH2:3]1[OH:4]", ["CCCO"]),
    ("CCO.CCO", ["CCO", "CCO"]),  # a duplicate stays, as written
])
def test_a_ring_bond_across_a_dot_joins_the_molecules_as_rdkit_reads_them(smiles, fragments):
    from molspec_core.chem import canonical_fragments

    assert canonical_fragments(smiles) == fragments
    assert canonical(".".join(fragments)) == canonical(smiles, strip_maps=True)  # the same molecules


def test_a_piece_that_is_no_smiles_alone_nor_with_the_others_is_refused():
    from molspec_core.chem import canonical_fragments

    with pytest.raises(ChemError, match="ring bond 1 opened at position 2 is never closed"):
        canonical_fragments("C1CC.CC")


@pytest.mark.parametrize("text, at, named", [
    ("\u0421\u0421O", 1, "U+0421 CYRILLIC CAPITAL LETTER ES"),  # was read as water: RDKit skipped both
    ("CC(=O)[O-].Cl\u2212", 14, "U+2212 MINUS SIGN"),  # a chloride from a PDF, read as hydrogen chloride
    ("CCO\u200b", 4, "U+200B ZERO WIDTH SPACE"),
])
def test_a_character_outside_ascii_is_refused_by_name_on_every_path_not_skipped(text, at, named):
    """The service refused such a query, but a recorded reaction's outcome, a known answer or a stock line reach
    RDKit here, and RDKit skips some of these characters without a word."""
    from molspec_core.chem import canonical_fragments, canonical_or_none, leakage_key

    assert canonical_or_none(text) is None and leakage_key(text) is None
    for read in (canonical, canonical_fragments, mol_from_smiles, lambda t: smiles_from_cxsmiles(t + " |$$|")):
        with pytest.raises(ChemError, match=re.escape(f"at position {at} is not plain ASCII ({named})")):
            read(text)


def test_a_cxsmiles_longer_than_rdkit_reads_safely_is_refused_before_rdkit_reads_it():
    """A recorded reaction as a CXSMILES of a 19,000-atom chain (pasted on the Predict page, read by
    known.recorded_reaction before any length check) crashed the process with a segfault: RDKit writes it by
    recursion. The SMILES part is held to MAX_SMILES_CHARS, as mol_from_smiles holds a SMILES."""
    from molspec_core.chem import MAX_SMILES_CHARS
    from molspec_core.known import recorded_reaction

    text = "C" * MAX_SMILES_CHARS + ">>CC |c:0|"
    with pytest.raises(ChemError, match=f"^a CXSMILES whose SMILES is {MAX_SMILES_CHARS + 4:,} characters long is "
                                        f"longer than the {MAX_SMILES_CHARS:,} read here$"):
        smiles_from_cxsmiles(text)
    assert recorded_reaction(text, "forward") is None  # Predictor.prepare refuses it, saying why


def test_a_space_inside_a_smiles_of_several_molecules_is_refused_not_read_as_a_name():
    """RDKit reads what follows a space as the molecule's name: 'CCO.O Cl' was read as ethanol and water, its Cl
    lost, and a recorded reaction 'CCO>>CC O' was known to give ethane (canonical_or_none refused both)."""
    from molspec_core.chem import canonical_fragments

    for text, at in (("CCO.O Cl", 6), ("CC\tO", 3)):
        with pytest.raises(ChemError, match=f"at position {at} is a space: a SMILES has none"):
            canonical_fragments(text)
    assert canonical_fragments(" CCO.O\n") == ["CCO", "O"]  # the ends are trimmed


def test_a_query_whose_ring_bond_joins_its_pieces_is_refused_for_what_is_wrong_with_the_whole():
    """C1CC.C1CC(C)(C)(C)(C)C was refused as "RDKit cannot parse 'C1CC' ...: ring bond 1 opened at position 2 is never
    closed", which the next piece closes; its carbon with six bonds went unsaid."""
    from molspec_core.chem import canonical_fragments

    with pytest.raises(ChemError) as refused:
        canonical_fragments("C1CC.C1CC(C)(C)(C)(C)C")
    assert str(refused.value).startswith("RDKit cannot parse 'C1CC.C1CC(C)(C)(C)(C)C' as a molecule: ")
    assert "valence" in str(refused.value) and "never closed" not in str(refused.value)
    with pytest.raises(ChemError, match="^RDKit cannot parse '[(]C[)]' as a molecule: the '[(]' at position 1 "):
        canonical_fragments("CCO.(C)")  # no ring bond across the '.': the piece at fault is named


@pytest.mark.parametrize("smiles, unlabelled", [
    ("[13CH3]C(=O)Cl", "CC(=O)Cl"),
    ("O=[14C]=O", "O=C=O"),
    ("[2H]C([2H])([2H])O", "CO"),  # deuterium atoms become the implicit hydrogens they are
    ("[2H][C@@H](C)O", "CCO"),  # a centre only its label made loses its mark
    ("N[C@@H]([13CH3])C(=O)O", "C[C@H](N)C(=O)O"),  # a real centre keeps it: L-alanine
    ("[2H]/C=C/C", "C=CC"),  # a double bond only its label made stereo loses its mark (was [H]/C=C/C)
    ("[2H]/C(F)=C/C", "C/C=C\\F"),  # one whose other atoms make it stereo keeps its geometry: (Z)
    ("[2H]/N=C/C", "[H]/N=C/C"),  # and an imine's N-H, its nitrogen's one hydrogen
    ("CCO", None),
])
def test_without_isotopes(smiles, unlabelled):
    assert without_isotopes(smiles) == unlabelled


@pytest.mark.parametrize("text", ["C[N@](CC)c1ccccc1", "CC[N@@](C)[C@H](C)c1ccccc1"])
def test_a_marked_amine_nitrogen_is_said_to_be_dropped_for_its_inversion(text):
    """An amine's nitrogen marked @ lost its mark (RDKit keeps none on a nitrogen that inverts), and the note named
    like groups and axial stereo, neither of which N-ethyl-N-methylaniline has."""
    from molspec_core.chem import dropped_stereo

    note = dropped_stereo(text)
    assert note.startswith("Stereo marks dropped: 1 atom marked @") and "an amine's nitrogen, which inverts" in note
    assert "nitrogen" not in dropped_stereo("C[C@H](C)O.CCN(C)c1ccccc1")  # like groups, and no nitrogen marked
    assert dropped_stereo("C[N@]1CC1c1ccccc1") == ""  # an aziridine's nitrogen keeps its configuration


@pytest.mark.parametrize("drawn", ["Cl[Na]Cl", "[Na+]O", "[Na][O-]", "[Li+]OC(C)=O", "[K](F)F"])
def test_an_alkali_metal_drawn_with_a_charge_or_two_bonds_is_left_as_drawn(drawn):
    """The alkali rule charged such drawings once more: [Na+2] beside [Cl-] or [OH-], [Na+] beside [O-2], [Li+2]."""
    assert salts_as_ions(canonical_fragments(drawn)) == canonical_fragments(drawn)


@pytest.mark.parametrize("drawn, ions", [
    ("O=C(O[K])O[K]", "O=C([O-])[O-].[K+].[K+]"),  # potassium carbonate as ChemDraw copies it
    ("CCO[Na]", "CC[O-].[Na+]"),
    ("[Na]O", "[OH-].[Na+]"),  # the hydroxide keeps its hydrogen
    ("O=C(O)O[Na]", "O=C([O-])O.[Na+]"),
    ("CC(C)N([Li])C(C)C", "CC(C)[N-]C(C)C.[Li+]"),  # LDA, as USPTO writes it 186 times
    ("[Cs]F", "[Cs+].[F-]"),
    ("N#CO[Na]", "N#C[O][Na]"),  # sodium cyanate: USPTO writes it with its bond, never as ions
    ("CCCC[Li]", "[Li][CH2]CCC"),  # an organolithium's carbon keeps its bond, as USPTO writes n-BuLi
    ("C[Mg]Br", "[CH3][Mg][Br]"),  # no alkali metal
    ("CC(=O)[O-].[Na+]", "CC(=O)[O-].[Na+]"),
])
def test_an_alkali_metals_salt_drawn_with_its_bond_is_read_as_its_ions(drawn, ions):
    """The forward model learned alkali salts as USPTO writes them, as ions; drawn with the bond (O=C(O[K])O[K]), a
    query was read as written, and the model gave phenol and benzyl bromide with K2CO3 a carboxylated ester first."""
    assert sorted(salts_as_ions(canonical_fragments(drawn))) == sorted(canonical_fragments(ions))


@pytest.mark.parametrize("drawn, written", [
    ("C[S+](C)[O-]", "CS(C)=O"),  # DMSO, as USPTO writes it 3,242 times and never charge-separated
    ("C[S+]([O-])c1ccc(C(=O)O)cc1", "CS(=O)c1ccc(C(=O)O)cc1"),  # retrosynthesis took it for an organosilicon
    ("C[S@+]([O-])c1ccccc1", "C[S@](=O)c1ccccc1"),  # a chiral sulfoxide keeps its configuration
    ("C[S+2]([O-])([O-])c1ccccc1", "CS(=O)(=O)c1ccccc1"),  # a sulfone
    ("C[P+](C)(C)[O-]", "CP(C)(C)=O"),  # a phosphine oxide
    ("C[N+](C)(C)[O-]", "C[N+](C)(C)[O-]"),  # an amine oxide keeps its charges: nitrogen has no fifth bond
    ("[O-][n+]1ccccc1", "[O-][n+]1ccccc1"),
    ("C[S+](C)(C)[O-]", "C[S+](C)(C)[O-]"),  # no valence for the double bond: as drawn
    # a Wittig reagent, as USPTO writes it 1,016 times and never charge-separated
    ("CCOC(=O)[CH-][P+](c1ccccc1)(c1ccccc1)c1ccccc1", "CCOC(=O)C=P(c1ccccc1)(c1ccccc1)c1ccccc1"),
    ("[CH2-][P+](c1ccccc1)(c1ccccc1)c1ccccc1", "C=P(c1ccccc1)(c1ccccc1)c1ccccc1"),
])
def test_an_oxide_or_ylide_of_sulfur_or_phosphorus_drawn_charge_separated_is_read_with_its_double_bond(drawn, written):
    """A sulfoxide drawn S+-O- (or a Wittig reagent P+-C-) was read so, a writing neither model saw: the
    retrosynthesis model answered 4-(methylsulfinyl)benzoic acid with silicon compounds, and the sulfide with an
    oxidant when written S=O."""
    assert salts_as_ions(canonical_fragments(drawn)) == canonical_fragments(written)


@pytest.mark.parametrize("drawn, ions", [
    ("CC(=O)O[Pd]OC(C)=O", "CC(=O)[O-].CC(=O)[O-].[Pd+2]"),  # palladium(II) acetate, as USPTO writes it 970 times
    ("CC(=O)O[Cu]OC(C)=O", "CC(=O)[O-].CC(=O)[O-].[Cu+2]"),
    ("O=C(O[Pd]OC(=O)C(F)(F)F)C(F)(F)F", "O=C([O-])C(F)(F)F.O=C([O-])C(F)(F)F.[Pd+2]"),  # the trifluoroacetate
    ("O=S(=O)(O[Cu]OS(=O)(=O)C(F)(F)F)C(F)(F)F", "O=S(=O)([O-])C(F)(F)F.O=S(=O)([O-])C(F)(F)F.[Cu+2]"),  # triflate
    ("O=[N+]([O-])O[Ag]", "O=[N+]([O-])[O-].[Ag+]"),  # silver nitrate
    ("Cl[Pd]Cl", "[Cl][Pd][Cl]"),  # a halide keeps its bond, as USPTO writes PdCl2
    ("O[Pd]O", "[OH][Pd][OH]"),  # so does Pearlman's catalyst, a hydroxide
    ("CC(C)O[Ti](OC(C)C)(OC(C)C)OC(C)C", "CC(C)[O][Ti]([O]C(C)C)([O]C(C)C)[O]C(C)C"),  # and an alkoxide
    ("CC(=O)O[Sn](CCCC)(CCCC)CCCC", "CCC[CH2][Sn]([CH2]CCC)([CH2]CCC)[O]C(C)=O"),  # an organotin ester: covalent
    ("CC(=O)OI(OC(C)=O)c1ccccc1", "CC(=O)OI(OC(C)=O)c1ccccc1"),  # no metal: iodobenzene diacetate
    # a cation USPTO never writes (no [Co+2] in the forward model's vocabulary): as ions, the query was refused
    ("CC(=O)O[Co]OC(C)=O", "CC(=O)[O][Co][O]C(C)=O"),
    ("CC(=O)O[Mn](OC(C)=O)OC(C)=O", "CC(=O)[O][Mn]([O]C(C)=O)[O]C(C)=O"),  # manganese(III) acetate
    # rhodium(II) acetate drawn with its Rh-Rh bond: two cations, not [Rh+2][Rh+2] bonded (USPTO: [Rh+2])
    ("CC(=O)O[Rh](OC(C)=O)[Rh](OC(C)=O)OC(C)=O", "CC(=O)[O-].CC(=O)[O-].CC(=O)[O-].CC(=O)[O-].[Rh+2].[Rh+2]"),
    ("CC(=O)O[Mo](OC(C)=O)[Mo](OC(C)=O)OC(C)=O", "CC(=O)[O][Mo]([O]C(C)=O)[Mo]([O]C(C)=O)[O]C(C)=O"),  # no Mo ion
])
def test_another_metals_salt_of_an_oxoacid_drawn_with_its_bonds_is_read_as_its_ions(drawn, ions):
    """Palladium(II) and copper(II) acetate drawn with their bonds (as Ketcher and ChemDraw write them) were read as
    written, a writing the forward model never saw: with copper(II) acetate so, p-toluidine and phenylboronic acid in
    pyridine (a Chan-Lam coupling) gave an amide first, and as ions the diarylamine."""
    assert sorted(salts_as_ions(canonical_fragments(drawn))) == sorted(canonical_fragments(ions))


@pytest.mark.parametrize("drawn, ions", [
    ("Cl[Zn]Cl", "[Zn+2].[Cl-].[Cl-]"),  # zinc chloride, as USPTO-MIT writes it (bonded: never)
    ("Br[Zn]Br", "[Zn+2].[Br-].[Br-]"),
    ("Cl[Ti](Cl)(Cl)Cl", "[Ti+4].[Cl-].[Cl-].[Cl-].[Cl-]"),  # a Rieche formylation's TiCl4
    ("Cl[Al](Cl)Cl", "[Al+3].[Cl-].[Cl-].[Cl-]"),  # a Friedel-Crafts acylation's AlCl3
    ("Cl[Ca]Cl", "[Ca+2].[Cl-].[Cl-]"),
    ("Br[Mg]Br", "[Mg+2].[Br-].[Br-]"),
    ("C[Mg]Br", "[CH3][Mg][Br]"),  # a Grignard reagent's metal is bonded to carbon: as drawn
    ("Cl[Zn]N(C)C", "C[N](C)[Zn][Cl]"),  # not a metal bonded to halogens alone
    ("Cl[Pd]Cl", "[Cl][Pd][Cl]"),  # the halides USPTO writes bonded stay so
    ("[Cu]I", "[Cu][I]"),
    ("Cl[Sn]Cl", "[Cl][Sn][Cl]"),
    ("Cl[Fe](Cl)Cl", "[Cl][Fe]([Cl])[Cl]"),
])
def test_a_metal_halide_that_uspto_writes_as_ions_drawn_with_its_bonds_is_read_as_its_ions(drawn, ions):
    """ZnCl2, TiCl4, AlCl3, CaCl2 and MgBr2 drawn with their bonds were read as written, which USPTO-MIT never (or,
    AlCl3, in 11 of 332 queries) does; the forward model gave the recorded product first less often so (HALIDE_SALT_
    CATIONS). Copper, palladium, tin and iron halides, which USPTO writes bonded, keep their bonds."""
    assert sorted(salts_as_ions(canonical_fragments(drawn))) == sorted(canonical_fragments(ions))


@pytest.mark.parametrize("written, ions", [
    ("CC(=O)[O-][Na+]", "CC(=O)[O-].[Na+]"),  # RDKit reads CC(=O)[O-]->[Na+], a dative bond
    ("[K+][O-]C(=O)[O-][K+]", "O=C([O-])[O-].[K+].[K+]"),
    ("CC(=O)[O-][Pd+2][O-]C(C)=O", "CC(=O)[O-].CC(=O)[O-].[Pd+2]"),
    ("[NH3]->[Pt](Cl)(Cl)<-[NH3]", "[NH3]->[Pt](Cl)(Cl)<-[NH3]"),  # a ligand's dative bond stays
    # read with a single bond, which the alkali rule charged once more: [Na+2] and [O-2], CC[N-2] and [Li+2]
    ("[O-][Na+]", "[O-].[Na+]"), ("CC[N-][Li+]", "CC[N-].[Li+]"),
])
def test_a_salts_ions_written_side_by_side_are_read_apart(written, ions):
    """Sodium acetate written with its ions side by side, as some drawing programs copy a salt, was read as
    CC(=O)[O-]->[Na+] and refused for the '->' token, which the chemist had not written."""
    assert sorted(salts_as_ions(canonical_fragments(written))) == sorted(canonical_fragments(ions))


# RDKit's own messages on stderr, each stamped with the time ('[20:05:21] SMILES Parse Error: unclosed ring ...')
RDKIT_MESSAGE = re.compile(r"\[\d\d:\d\d:\d\d\] ")


def stderr_story(code: str) -> list[str]:
    """What a fresh Python process running `code` wrote on stderr, line by line: its own lines (from `told`) as
    written, and each of RDKit's messages as 'rdkit'. A process of its own: RDKit's logging is the process's."""
    import subprocess
    import sys

    prologue = ("import sys\nfrom rdkit import Chem\n"
                "def told(line):\n    print(line, file=sys.stderr, flush=True)\n")
    err = subprocess.run([sys.executable, "-c", prologue + code], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}).stderr
    return ["rdkit" if RDKIT_MESSAGE.match(line) else line for line in err.splitlines()]


def test_importing_molspec_leaves_a_programs_own_rdkit_messages_on():
    """chem turned RDKit's logging off for the whole process as it was imported: a program that imported
    molspec_core lost every RDKit warning and error of its own. Only programs (the molspec command, the app) do."""
    story = stderr_story("import molspec_core.service\ntold('imported')\nChem.MolFromSmiles('c1cc')")
    assert story == ["imported", "rdkit"]


def test_quiet_rdkit_holds_rdkit_quiet_while_any_caller_is_inside():
    """Two callers' quiet spans (two threads' predict calls) that end out of order: RDKit's own BlockLogs let its
    messages through once the first had ended; they stay quiet until the last ends, and are on again after."""
    story = stderr_story("from molspec_core.chem import quiet_rdkit\n"
                         "with quiet_rdkit():\n    told('inside')\n    Chem.MolFromSmiles('c1cc')\n"
                         "first, second = quiet_rdkit(), quiet_rdkit()\n"
                         "first.__enter__(); second.__enter__(); first.__exit__(None, None, None)\n"
                         "told('the second inside'); Chem.MolFromSmiles('c1cc')\n"
                         "second.__exit__(None, None, None)\n"
                         "told('both out'); Chem.MolFromSmiles('c1cc')")
    assert story == ["inside", "the second inside", "both out", "rdkit"]


def test_the_molspec_command_keeps_rdkit_quiet_for_its_whole_run():
    """The command line says what is wrong with a SMILES itself; RDKit's lines around its own would be noise."""
    story = stderr_story("from molspec_core.entry import main\n"
                         "told(main(['predict', '--model', 'tests/fixtures/copy_model', '--smiles', 'c1cc']))\n"
                         "Chem.MolFromSmiles('c1cc')")
    assert "rdkit" not in story and story[-2:] == [
        "error: not a valid SMILES: RDKit cannot parse 'c1cc' as a molecule: ring bond 1 opened at position 2 is "
        "never closed", "2"]


def test_reaction_centre_keeps_rdkit_quiet_and_leaves_it_on_for_the_caller():
    """centre.reaction_centre, which the README offers, on a SMILES RDKit cannot read: None, without RDKit's line."""
    story = stderr_story("from molspec_core.centre import reaction_centre\n"
                         "told(reaction_centre('c1cc.CC(=O)Cl', 'CC(=O)c1ccccc1'))\nChem.MolFromSmiles('c1cc')")
    assert story == ["None", "rdkit"]


def test_reading_and_writing_sd_files_keeps_rdkit_quiet():
    """An SD file's unreadable record has its `problem`, and an answer RDKit cannot read its record without atoms;
    RDKit's own lines on each (through io: a batch's file, the results' SD export) stay out."""
    story = stderr_story("import io\nfrom molspec_core.chem import sd_records, write_sd\n"
                         "told(sd_records('bad\\n\\n\\n  1  0  0  0  0  0  0  0  0  0999 V2000\\n"
                         "    0.0    0.0    0.0 Q   0  0\\nM  END\\n$$$$\\n')[0].problem)\n"
                         "write_sd(io.StringIO(), [('c1cc', 't', {})])\ntold('written')\nChem.MolFromSmiles('c1cc')")
    assert story == ["SD record 1: RDKit cannot read its molblock", "written", "rdkit"]
