"""Pictures a chemist reads (depict.py): 3D models of several molecules, and atoms named in the text alternatives."""
import itertools

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


@pytest.mark.parametrize("smiles, atoms, words", [
    ("[2H]OC(C)=O", [0], "atom 1 (2H)"),  # deuterium, not hydrogen
    ("[13CH3]C(=O)O", [0, 1], "atoms 1 (13C) and 2 (C)"),
    ("CC(=O)[O-].[Na+]", [3, 4], "atoms 4 (O-) and 5 (Na+)"),
    ("[Mg+2].[Cl-].[Cl-]", [0], "atom 1 (Mg2+)"),
])
def test_atoms_are_named_with_their_mass_number_and_charge_as_the_picture_labels_them(smiles, atoms, words):
    assert depict.atoms_in_words(Chem.MolFromSmiles(smiles), atoms) == words


def test_a_molecule_etkdg_cannot_embed_gives_up_soon():
    """C60 took about 30 s (two starts) to come back without a model, the page's spinner turning all that while."""
    import time

    fullerene = ("c12c3c4c5c1c1c6c7c2c2c8c3c3c9c4c4c%10c5c5c1c1c6c6c%11c7c2c2c7c8c3c3c8c9c4c4c9c%10c5c5c1c1c6c6c%11"
                 "c2c2c7c3c3c8c4c4c9c5c1c1c6c2c3c41")
    started = time.perf_counter()
    assert depict.molblock_3d(fullerene) is None
    assert time.perf_counter() - started < 4 * depict.EMBED_TIMEOUT_S + 5  # two starts, each cut off, and slack
