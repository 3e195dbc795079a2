"""Pictures a chemist reads (depict.py): 3D models of several molecules, and atoms named in the text alternatives."""
import itertools
import re
import threading

import pytest
from rdkit import Chem

from molspec_core import depict


@pytest.mark.parametrize("smiles", ["CCO.CCO", "CC(=O)[O-].[Na+]", "[K+].[K+].[O-]C([O-])=O",
                                    "CC(=O)Cl.NCc1ccccc1.CCN(CC)CC", "C[C@H](N)C(=O)O.C/C=C/C"])
def test_the_molecules_of_a_3d_model_stand_apart_and_keep_their_stereo(smiles):
    """A reactant set or a salt in 3D: embedded together, RDKit laid the molecules over one another."""
    mol = Chem.MolFromMolBlock(depict.molblock_3d(smiles), removeHs=False)
    positions = mol.GetConformer().GetPositions()
    molecules = Chem.GetMolFrags(mol)
    assert len(molecules) == smiles.count(".") + 1
    closest = min(((positions[i] - positions[j]) ** 2).sum() ** 0.5
                  for a, b in itertools.combinations(molecules, 2) for i in a for j in b)
    assert closest > 2.0  # Å: farther than any bond, hydrogens included
    Chem.AssignStereochemistryFrom3D(mol)
    assert Chem.MolToSmiles(Chem.RemoveHs(mol)) == Chem.MolToSmiles(Chem.MolFromSmiles(smiles))


@pytest.mark.parametrize("alone, beside", [("C1CCCCC1", "C1CCCCC1.O"), ("CCCCCC", "O.CCCCCC"),
                                           ("CCO", "CCO.c1ccccc1")])
def test_a_molecule_beside_others_in_3d_is_shaped_as_it_is_alone(alone, beside):
    """Each molecule of several is optimised with MMFF as one alone is: the pieces had no ring information, MMFF
    raised on every one but an aromatic one, and cyclohexane beside water kept ETKDG's unoptimised shape."""
    def distances(smiles: str) -> list[float]:
        """The distances between the atoms of `alone` in the 3D model of `smiles`, hydrogens included."""
        pieces = Chem.GetMolFrags(Chem.MolFromMolBlock(depict.molblock_3d(smiles), removeHs=False), asMols=True)
        piece = next(p for p in pieces if Chem.MolToSmiles(Chem.RemoveHs(p)) == Chem.CanonSmiles(alone))
        positions = piece.GetConformer().GetPositions()
        return [float(((positions[i] - positions[j]) ** 2).sum() ** 0.5)
                for i, j in itertools.combinations(range(len(positions)), 2)]

    assert distances(beside) == pytest.approx(distances(alone), abs=1e-3)


@pytest.mark.parametrize("smiles", ["C1CN2CCN1CC2", "C1CN2CCC1CC2", "C1=CC2CCC1CC2", "C12C3C4C1C5C2C3C45",
                                    "C1CN2CCN1CC2.O=C(Cl)c1ccccc1"])
def test_a_bridged_or_caged_ring_system_is_drawn_with_no_ring_atom_straight(smiles):
    """DABCO and quinuclidine were drawn as a hexagon with their third bridge straight across it (two carbons at 180
    degrees, labelled C, reading as a C-C bond), cubane as three squares in a row, two of its bonds hidden."""
    mol = depict.laid_out(Chem.MolFromSmiles(smiles))
    positions = mol.GetConformer().GetPositions()
    for atom in (atom for atom in mol.GetAtoms() if atom.IsInRing()):
        centre = positions[atom.GetIdx()]
        for first, second in itertools.combinations([n.GetIdx() for n in atom.GetNeighbors()], 2):
            one, other = positions[first] - centre, positions[second] - centre
            cosine = (one * other).sum() / ((one ** 2).sum() * (other ** 2).sum()) ** 0.5
            assert cosine > -0.985, f"atom {atom.GetIdx()} drawn straight between {first} and {second}"


@pytest.mark.parametrize("smiles, atoms, words", [
    ("[2H]OC(C)=O", [0], "atom 1 (2H)"),  # deuterium, not hydrogen
    ("[13CH3]C(=O)O", [0, 1], "atoms 1 (13C) and 2 (C)"),
    ("CC(=O)[O-].[Na+]", [3, 4], "atoms 4 (O-) and 5 (Na+)"),
    ("[Mg+2].[Cl-].[Cl-]", [0], "atom 1 (Mg2+)"),
])
def test_atoms_are_named_with_their_mass_number_and_charge_as_the_picture_labels_them(smiles, atoms, words):
    assert depict.atoms_in_words(Chem.MolFromSmiles(smiles), atoms) == words


def test_a_molecule_etkdg_cannot_embed_has_no_3d_model(monkeypatch):
    monkeypatch.setattr(depict, "EMBED_DEADLINE_S", 2)  # a start of 1 s each: the test need not wait 8 s
    fullerene = ("c12c3c4c5c1c1c6c7c2c2c8c3c3c9c4c4c%10c5c5c1c1c6c6c%11c7c2c2c7c8c3c3c8c9c4c4c9c%10c5c5c1c1c6c6c%11"
                 "c2c2c7c3c3c8c4c4c9c5c1c1c6c2c3c41")
    assert depict.molblock_3d(fullerene) is None


def test_the_3d_model_is_given_up_at_its_deadline_while_rdkit_still_embeds(monkeypatch):
    """RDKit checks its embedding timeout only between attempts, and one attempt can run long: a 100-carbon ring's
    ran 7 s, and the page's spinner turned 26 s for no model (cyclosporin: 13 s). molblock_3d gives up at
    EMBED_DEADLINE_S whatever RDKit is doing; an attempt that RDKit does not cut short stands in for it here."""
    release, finished = threading.Event(), []

    def endless_attempt(mol, params):
        release.wait(5)
        finished.append(params.timeout)
        return -1

    monkeypatch.setattr(depict.AllChem, "EmbedMolecule", endless_attempt)
    monkeypatch.setattr(depict, "EMBED_DEADLINE_S", 0.2, raising=False)
    try:
        assert depict.molblock_3d("CCO") is None
        assert not finished  # it came back while the attempt went on
    finally:
        release.set()


def _drawn_extents(svg: str, mol: Chem.Mol) -> list[tuple[float, float, float, float]]:
    """Per molecule of `mol`, the box (x0, x1, y0, y1), in pixels, of everything RDKit drew for its atoms and bonds
    (labels included: each drawn path names its atoms in its class)."""
    owner = {atom: k for k, atoms in enumerate(Chem.GetMolFrags(mol)) for atom in atoms}
    points: dict[int, list[tuple[float, float]]] = {}
    for classes, path in re.findall(r"<path class='([^']*)' d='([^']*)'", svg):
        atoms = re.findall(r"atom-(\d+)", classes)
        if atoms:
            points.setdefault(owner[int(atoms[0])], []).extend(
                (float(x), float(y)) for x, y in re.findall(r"(-?[\d.]+)[ ,](-?[\d.]+)", path))
    return [(min(x for x, _ in p), max(x for x, _ in p), min(y for _, y in p), max(y for _, y in p))
            for _, p in sorted(points.items())]


@pytest.mark.parametrize("smiles", ["[13CH4].[18OH2]", "[Cu+2].O", "[Mg+2].O", "N.O", "[NH4+].[Cl-]",
                                    "O.[NH4+].[OH-].[SiH4].[PH3]",
                                    "CC(=O)Cl.Nc1ccc(Br)cc1.ClCCl", "[15NH4+].[2H]O[2H].[13CH3][13CH2]O"])
def test_the_labels_of_molecules_side_by_side_stand_apart(smiles):
    """Methane-13C beside water-18O drew as one label, '13CH4H2 18O' (1.7 px apart), and copper(II) beside water
    as 'Cu2+H2O' (1 px): the gap between molecules was measured between their atoms, not their labels."""
    mol = Chem.MolFromSmiles(smiles)
    boxes = _drawn_extents(depict.smiles_svg(smiles, 440, 230), mol)
    assert len(boxes) == len(Chem.GetMolFrags(mol))
    for a, b in itertools.combinations(boxes, 2):
        if a[2] < b[3] and b[2] < a[3]:  # on one row
            assert max(b[0] - a[1], a[0] - b[1]) >= 10, (a, b)  # pixels of white between the two labels


@pytest.mark.parametrize("smiles", ["*=*", "*1***1", "[*]1[*][*][*][*][*]1"])
def test_a_molecule_whose_embedding_raises_has_no_3d_model(smiles):
    """Wildcard atoms RDKit draws in 2D can stop its 3D embedding with an error ('upper bound not greater than lower
    bound'): the 3D tab showed a traceback where it says it could not build the molecule."""
    assert depict.smiles_svg(smiles) is not None
    assert depict.molblock_3d(smiles) is None


def _radical_dots(svg: str) -> int:
    """How many radical electrons a drawing shows: RDKit draws each as a small filled polygon, its points comma-joined
    (letters are drawn with space-joined points)."""
    return len(re.findall(r"<path class='atom-\d+' d='M [\d.]+,[\d.]+ L[^']*Z' style='fill:#", svg))


@pytest.mark.parametrize("smiles, dots", [
    ("[Cu+2].[Cl-].[Cl-]", 0),  # copper(II) chloride: drawn 'Cu2+·', a radical cation
    ("[Fe+3].[Co+2].[Mn+2]", 0),
    ("[Na].[Mg].CCO", 0),  # sodium and magnesium metal, as reagents: 'Na·' and 'Mg:'
    ("[CH3]", 1), ("[O][O]", 2), ("CC(C)(C)N([O])C(C)(C)C", 1),  # the radicals of organic chemistry keep their dots
])
def test_metal_atoms_are_drawn_without_radical_dots(smiles, dots):
    """RDKit counts the unpaired electrons of a metal in brackets as radicals (copper(II) has one, magnesium metal
    two) and drew them as dots no chemist writes; a carbon or oxygen radical keeps them."""
    assert _radical_dots(depict.smiles_svg(smiles, 440, 230)) == dots


@pytest.mark.parametrize("smiles, atom, hydrogens", [
    ("C[CH2]", 1, 2),  # the ethyl radical: drawn as a bond with a dot of a pixel at its end
    ("CC(C)(C)c1ccc(cc1)[CH]C(=O)OC", 10, 1),  # a benzylic radical
    ("c1ccc(cc1)[C](c1ccccc1)c1ccccc1", 6, 0),  # the trityl radical: its dot lost among three rings
])
def test_a_carbon_radical_is_drawn_with_its_label_beside_its_dot(smiles, atom, hydrogens):
    """RDKit draws a chain or ring carbon as a bare vertex and its unpaired electron as a dot of a pixel or two on it,
    which no one finds at the page's size: an answer flagged 'unpaired electrons (a radical)' showed no radical. The
    carbon is labelled (CH2, CH, C), as an oxygen radical is, and its dot drawn beside the label."""
    svg = depict.smiles_svg(smiles, 440, 230)
    glyphs = [d for d in re.findall(rf"<path class='atom-{atom}' d='([^']*)'", svg)]
    assert _radical_dots(svg) == 1
    assert len(glyphs) == 1 + 1 + (1 if hydrogens else 0) + (1 if hydrogens > 1 else 0)  # dot, C, H, count


@pytest.mark.parametrize("smiles, atom, glyphs", [
    ("CC(=O)O[13CH3]", 4, 5),  # 13CH3 (drawn 13C, a carbon with no hydrogen)
    ("CC[CH2+]", 2, 4),  # CH2+ (drawn C+)
    ("C[C-](C)C", 1, 2),  # C-: it has no hydrogen
])
def test_a_carbon_drawn_with_a_label_shows_its_hydrogens(smiles, atom, glyphs):
    """RDKit labels a carbon that bears an isotope or a charge but leaves its hydrogens out, and a label without them
    says there are none: a 13C-labelled methyl ester was drawn O-13C, a primary carbocation C+."""
    svg = depict.smiles_svg(smiles, 440, 230)
    assert len(re.findall(rf"<path class='atom-{atom}' d='([^']*)'", svg)) == glyphs


def _contrast_on_white(colour: str) -> float:
    """WCAG contrast ratio of a #rrggbb colour on white."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(int(colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    return 1.05 / (0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05)


def test_the_e_z_labels_of_double_bonds_read_on_white():
    """RDKit writes a double bond's (E) or (Z) in light violet, #7F7FFF, 3.3:1 on white, at a few pixels high: too
    faint to read, where the (R) and (S) beside it are black."""
    svg = depict.smiles_svg("C/C=C/C.C/C=C\\C", 300, 200)
    colours = set(re.findall(r"fill='(#[0-9A-Fa-f]{6})'", svg))  # the notes' glyphs; the atoms here draw no label
    assert colours and all(_contrast_on_white(c) >= 4.5 for c in colours), colours


def test_atom_labels_read_on_white_whatever_their_element():
    """RDKit's element colours wrote S in yellow (1.7:1 on white), Cl in green (2.0:1), F in cyan, P in orange and O
    in red (4.0:1): a sulfonyl chloride's labels were the faintest marks of its picture."""
    svg = depict.smiles_svg("OC(=O)c1ccc(F)c(Cl)c1.CS(=O)(=O)Cl.P(Cl)(Cl)Cl.Brc1ccc(I)cc1.C[Si](C)(C)N", 560, 220)
    colours = set(re.findall(r"fill='(#[0-9A-Fa-f]{6})'", svg))  # the labels' glyphs
    assert len(colours) >= 6  # one a drawn element: still told apart by colour
    assert all(_contrast_on_white(c) >= 4.5 for c in colours), {c: round(_contrast_on_white(c), 1) for c in colours}


def _stereo_labels(svg: str) -> list[str]:
    """The glyphs of a drawing's stereo labels, '(', letter, ')' each, as their paths' commands (RDKit draws text as
    paths); the letters alone, in drawing order."""
    glyphs = [re.sub(r"[^A-Za-z]", "", d) for d in re.findall(r"<path class='CIP_Code' d='([^']*)'", svg)]
    return glyphs[1::3]


def test_stereo_labels_follow_the_cip_rules():
    """RDKit's legacy ranking, which its drawing used, labelled 103 of USPTO-50K's 2,077 test and validation products
    with stereo otherwise than its CIP labeler: this pyrrolidine's (S)-centre was drawn (R), and a trans-1,4-
    disubstituted cyclohexane's (1r,4r) centres were drawn without a label."""
    letter = {_stereo_labels(depict.smiles_svg("C[C@H](N)C(=O)O"))[0]: "S",  # L- and D-alanine, labelled alike by both
              _stereo_labels(depict.smiles_svg("C[C@@H](N)C(=O)O"))[0]: "R"}
    assert len(letter) == 2
    svg = depict.smiles_svg("O=C(C1CC1)N1CC[C@@H](Cn2c(-c3ccc(-c4ccnc5[nH]ccc45)cc3)nc3cnccc32)C1", 440, 230)
    assert [letter.get(glyph, "?") for glyph in _stereo_labels(svg)] == ["S"]
    assert len(_stereo_labels(depict.smiles_svg("NCC(=O)N[C@H]1CC[C@H](O)CC1"))) == 2  # (r) and (r)


def test_a_molecule_the_cip_labeler_gives_up_on_is_drawn_with_rdkits_own_labels(monkeypatch):
    monkeypatch.setattr(depict, "CIP_COMPARISONS", 1)
    inositol = Chem.MolFromSmiles("O[C@H]1[C@H](O)[C@@H](O)[C@H](O)[C@@H](O)[C@@H]1O")
    assert depict._cip_labelled(inositol) is inositol
    assert depict.smiles_svg("O[C@H]1[C@H](O)[C@@H](O)[C@H](O)[C@@H](O)[C@@H]1O").endswith("</svg>\n")


def test_the_carbons_of_a_macrocycle_are_drawn_as_bare_vertices():
    """RDKit labels a carbon whose two bonds it draws almost in line, and it draws a ring of 20 atoms or more as a
    circle: this 30-membered lactone showed a small 'c' on each of its 28 ring carbons, read as aromatic atoms. Only
    its oxygens are labelled now; an allene's centre, truly in line, keeps its 'C'."""
    svg = depict.smiles_svg("CC1CCCCCCCCCCCCCCCCCCCC(=O)OCCCCCCCCCC1")
    labelled = {int(i) for i in re.findall(r"<path class='atom-(\d+)'", svg)}
    mol = Chem.MolFromSmiles("CC1CCCCCCCCCCCCCCCCCCCC(=O)OCCCCCCCCCC1")
    assert {mol.GetAtomWithIdx(i).GetSymbol() for i in labelled} == {"O"}
    assert re.findall(r"<path class='atom-(\d+)'", depict.smiles_svg("CC=C=CC"))  # the allene's centre: 'C'


def test_a_structure_drawn_again_is_not_laid_out_again(monkeypatch):
    """A page draws its structures at every rerun: a 20-residue peptide's layout took RDKit about 1.6 s, each time.
    The same SMILES, size and marks give the picture already drawn; other marks, a picture of their own."""
    drawn = []
    monkeypatch.setattr(depict, "mol_svg", lambda mol, *args: drawn.append(args) or f"<svg>{len(drawn)}</svg>")
    depict._smiles_svg.cache_clear()
    peptide = "N[C@@H](Cc1ccccc1)C(=O)" * 3 + "O"
    first = depict.smiles_svg(peptide, 440, 230, {1: depict.CENTRE_COLOUR})
    assert depict.smiles_svg(peptide, 440, 230, {1: depict.CENTRE_COLOUR}) == first and len(drawn) == 1
    assert depict.smiles_svg(peptide, 440, 230) != first and len(drawn) == 2
    assert depict.smiles_svg(peptide, 440, 230, {1: depict.LEAVING_COLOUR}) != first and len(drawn) == 3
    assert depict.smiles_svg("C1CC(") is None
    depict._smiles_svg.cache_clear()  # the pictures above are no real drawings


TETRAKIS = "c1ccc([P](c2ccccc2)(c2ccccc2)[Pd]([P](c2ccccc2)(c2ccccc2)c2ccccc2)([P](c2ccccc2)(c2ccccc2)c2ccccc2)" \
           "[P](c2ccccc2)(c2ccccc2)c2ccccc2)cc1"


def _nearest_unbonded(mol: Chem.Mol) -> float:
    """The least distance, in 2D units, between two atoms of a laid-out molecule that share no bond."""
    conf = mol.GetConformer()
    return min((conf.GetAtomPosition(i) - conf.GetAtomPosition(j)).Length()
               for i, j in itertools.combinations(range(mol.GetNumAtoms()), 2) if not mol.GetBondBetweenAtoms(i, j))


@pytest.mark.parametrize("smiles", [
    TETRAKIS,  # Pd(PPh3)4 as Ketcher or ChemDraw write it: RDKit laid its twelve phenyls on one another
    "c1ccc(P(->[Pd](<-P(c2ccccc2)(c2ccccc2)c2ccccc2)(<-P(c2ccccc2)(c2ccccc2)c2ccccc2)<-P(c2ccccc2)(c2ccccc2)"
    "c2ccccc2)(c2ccccc2)c2ccccc2)cc1",  # ... with dative bonds
    "Cl[Rh]([P](c1ccccc1)(c1ccccc1)c1ccccc1)([P](c1ccccc1)(c1ccccc1)c1ccccc1)[P](c1ccccc1)(c1ccccc1)c1ccccc1",
    f"CC(=O)Cl.NCc1ccccc1.{TETRAKIS}",  # beside a reaction's other molecules
])
def test_a_metals_ligands_are_drawn_apart(smiles):
    mol = Chem.MolFromSmiles(smiles)
    assert mol is not None
    assert _nearest_unbonded(depict.laid_out(mol)) >= depict.OVERLAP


@pytest.mark.parametrize("smiles", ["Cl[Pd](Cl)([P](c1ccccc1)(c1ccccc1)c1ccccc1)[P](c1ccccc1)(c1ccccc1)c1ccccc1",
                                    "c1ccc(C(c2ccccc2)(c2ccccc2)c2ccccc2)cc1", "CC(=O)O[Pd]OC(C)=O"])
def test_a_molecule_rdkit_draws_apart_keeps_its_layout(smiles):
    from rdkit.Chem import rdDepictor

    mol = Chem.MolFromSmiles(smiles)
    rdDepictor.Compute2DCoords(mol)
    laid = depict.laid_out(Chem.MolFromSmiles(smiles))
    assert laid.GetConformer().GetPositions().tolist() == mol.GetConformer().GetPositions().tolist()


def _drawn_bonds(svg: str) -> int:
    return len(set(re.findall(r"class='bond-(\d+)", svg)))


def test_triphenylphosphine_on_a_metal_is_drawn_as_chemists_write_it():
    """USPTO writes Pd(PPh3)4 with its P-Pd bonds (486 of USPTO-MIT's 40,000 test queries): drawn whole, even with
    its ligands apart, its twelve phenyls took a Suzuki query's picture over and drew the reactants a third smaller.
    Each PPh3 on a metal is now a label; a phosphonium's phenyls, and a ligand with a marked atom, are drawn whole."""
    assert _drawn_bonds(depict.smiles_svg(TETRAKIS)) == 4  # Pd and four PPh3 labels
    dichloride = "Cl[Pd](Cl)([P](c1ccccc1)(c1ccccc1)c1ccccc1)[P](c1ccccc1)(c1ccccc1)c1ccccc1"
    assert _drawn_bonds(depict.smiles_svg(dichloride)) == 4
    wittig_salt = "C[P+](c1ccccc1)(c1ccccc1)c1ccccc1.[Br-]"
    assert _drawn_bonds(depict.smiles_svg(wittig_salt)) == Chem.MolFromSmiles(wittig_salt).GetNumBonds()
    # marks name atoms by index: the ligand that holds a marked atom keeps its atoms (its Pd-P, 3 P-C and 18 ring
    # bonds), the other three are labels
    marked = depict.smiles_svg(TETRAKIS, atom_colours={0: depict.CENTRE_COLOUR})
    assert _drawn_bonds(marked) == 22 + 3 and marked.count("centre-ring") == 1


def test_a_catalysts_ligands_are_labels_on_a_picture_with_the_reaction_centre_marked():
    """The Predict page marks the centre on every query's reactants: PdCl2(PPh3)2 was then drawn whole (its marks name
    atoms by index, which the labels shift), and the Sonogashira example's iodobenzene and propargyl alcohol came out
    a quarter their size. The marks now follow the atoms to their places among the labels."""
    query = "Ic1ccccc1.C#CCO.[Cu]I.Cl[Pd](Cl)([P](c1ccccc1)(c1ccccc1)c1ccccc1)[P](c1ccccc1)(c1ccccc1)c1ccccc1.CCN(CC)CC"
    colours = depict.centre_colours(query, "OCC#Cc1ccccc1", on="reactants")
    assert colours == {0: depict.LEAVING_COLOUR, 1: depict.CENTRE_COLOUR, 7: depict.CENTRE_COLOUR}
    svg = depict.smiles_svg(query, atom_colours=colours)
    assert _drawn_bonds(svg) == 7 + 3 + 1 + 4 + 6  # the two PPh3 labels' bonds to Pd among them
    assert svg.count("centre-ring") == 3 and svg.count("stroke-dasharray") == 1  # the iodine leaving
