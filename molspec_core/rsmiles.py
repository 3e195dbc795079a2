"""Root-aligned SMILES (Zhong et al. 2022) for retrosynthesis training data.

The product is written starting from a chosen root atom; each reactant is written starting from
the atom mapped to the first product atom (in the product string's order) that belongs to it,
and the reactants are ordered by where their atoms first appear in the product string. Product
and reactants then read alike from the start, which minimizes their edit distance, makes the task
easier to learn and gives copy drafts long runs to copy. Augmentation 0 roots the product where
canonical SMILES starts it (what the model sees at test time); the others use random roots.
"""
from __future__ import annotations

import random
import zlib

from rdkit import Chem

from .chem import clear_maps


def root_views(smiles: str, n: int) -> list[str]:
    """Up to n writings of a query: `smiles` itself (canonical, as the service passes it) first, then
    the same molecules rooted at other atoms, in an order fixed by the text (the same query gets the
    same writings in every run). A model trained on root-aligned data reads them all as its own
    (test-time augmentation, Zhong et al. 2022); small molecules may have fewer than n writings."""
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"RDKit cannot read {smiles!r}")
    views = [smiles]
    roots = list(range(mol.GetNumAtoms()))
    random.Random(zlib.crc32(smiles.encode())).shuffle(roots)
    for root in roots:
        if len(views) >= n:
            break
        view = Chem.MolToSmiles(mol, rootedAtAtom=root, canonical=True)
        if view not in views:
            views.append(view)
    return views


class MappingError(ValueError):
    """A reaction whose atom maps cannot align product and reactants."""


def reaction_sides(reaction: str) -> tuple[str, str, str]:
    """(reactants, reagents, products) of a reaction written reactants>reagents>products; else MappingError, so a
    caller falls back to the unmapped reaction (an empty or text cell stopped prepare-data with "not enough values
    to unpack", naming no row)."""
    parts = reaction.split(">")
    if len(parts) != 3:
        raise MappingError(f"{reaction[:80]!r} is not a reaction written reactants>reagents>products")
    return parts[0], parts[1], parts[2]


def _strip_maps(mol: Chem.Mol) -> Chem.Mol:
    """A copy of `mol` without its atom maps, its stereo perceived again as the service reads a query (clear_maps):
    with the maps' marks kept, an isopropyl CH kept its @ and a trans-1,4-cyclohexane its mapped writing, and
    56 of 7,947 USPTO-50K training products were written with marks that no canonical query has."""
    mol = Chem.Mol(mol)
    clear_maps(mol)
    return mol


def _rooted(mol: Chem.Mol, root: int) -> tuple[str, list[int]]:
    """SMILES rooted at atom `root` (-1: canonical start) and the atom indices in output order."""
    smiles = Chem.MolToSmiles(mol, rootedAtAtom=root, canonical=True)
    order = list(mol.GetPropsAsDict(includePrivate=True, includeComputed=True)["_smilesAtomOutputOrder"])
    return smiles, order


def aligned_pair(product: Chem.Mol, reactants: list[Chem.Mol], root: int) -> tuple[str, str]:
    """(product SMILES rooted at `root`, reactant SMILES aligned to it), atom maps removed."""
    where: dict[int, tuple[int, int]] = {}  # map number -> (reactant index, atom index)
    for r, mol in enumerate(reactants):
        for atom in mol.GetAtoms():
            if atom.GetAtomMapNum():
                where[atom.GetAtomMapNum()] = (r, atom.GetIdx())
    maps = [atom.GetAtomMapNum() for atom in product.GetAtoms()]
    if any(m == 0 or m not in where for m in maps):
        raise MappingError("a product atom has no map number found in the reactants")
    product_smiles, order = _rooted(_strip_maps(product), root)
    first_seen: dict[int, tuple[int, int]] = {}  # reactant -> (position in product string, its atom)
    for position, atom in enumerate(order):
        r, idx = where[maps[atom]]
        first_seen.setdefault(r, (position, idx))
    parts = []
    for r, mol in enumerate(reactants):
        position, idx = first_seen.get(r, (len(order), -1))
        parts.append((position, _rooted(_strip_maps(mol), idx)[0]))
    parts.sort(key=lambda p: (p[0], p[1]))
    return product_smiles, ".".join(s for _, s in parts)


def augment(mapped_reaction: str, n: int, rng: random.Random) -> list[tuple[str, str]]:
    """n root-aligned (product, reactants) pairs; the first is rooted like canonical SMILES."""
    reactant_text, _, product_text = reaction_sides(mapped_reaction)
    fragments = reactant_text.split(".")
    if not all(fragments):  # RDKit reads "" as a molecule of no atoms, and its rooted writing has no atom order
        raise MappingError(f"the reactants {reactant_text[:80]!r} hold an empty fragment")
    product = Chem.MolFromSmiles(product_text)
    reactants = [Chem.MolFromSmiles(s) for s in fragments]
    if product is None or any(m is None for m in reactants):
        raise MappingError("RDKit cannot parse the mapped reaction")
    n_atoms = product.GetNumAtoms()
    if not n_atoms:  # no root to draw: "empty range for randrange()" stopped prepare-data in its worker
        raise MappingError("the reaction has no product")
    roots = [-1] + rng.sample(range(n_atoms), min(n - 1, n_atoms)) if n > 1 else [-1]
    while len(roots) < n:  # small products: repeat roots
        roots.append(rng.randrange(n_atoms))
    return [aligned_pair(product, reactants, root) for root in roots]


def forward_aligned(mapped_reaction: str, target: str, sources: list[str]) -> list[str]:
    """`target`, the recorded product, written once for each writing of the query in `sources` so that it reads like
    that writing (root alignment for forward prediction, Zhong et al. 2022): rooted at the product atom mapped to the
    first atom of the writing, in its string's order, that reaches the product. `mapped_reaction` is the reaction
    with atom maps (USPTO-MIT's raw line: reactants>reagents>products, edits after a space). Raises MappingError
    where the maps cannot align them (each writing must be the mapped reactant side's molecules)."""
    reactant_text, _, product_text = reaction_sides(mapped_reaction.split(" ")[0])
    reactants, products = Chem.MolFromSmiles(reactant_text), Chem.MolFromSmiles(product_text)
    product = Chem.MolFromSmiles(target)
    if reactants is None or products is None or product is None:
        raise MappingError("RDKit cannot parse the mapped reaction or its target")
    in_products = _strip_maps(products).GetSubstructMatch(product)
    if len(in_products) != product.GetNumAtoms():
        raise MappingError("the target is not among the mapped reaction's products")
    maps = {products.GetAtomWithIdx(j).GetAtomMapNum(): i for i, j in enumerate(in_products)}
    maps.pop(0, None)
    # atoms are matched by their canonical rank (symmetry class), not by a substructure search, which ran for
    # minutes on some USPTO-MIT reactant sides; symmetric atoms give equivalent roots
    text, order = _rooted(_strip_maps(reactants), -1)
    reread = Chem.MolFromSmiles(text)
    reach: dict[int, int] = {}  # rank class -> a product atom that a reactant atom of that class becomes
    for atom, rank in zip(order, Chem.CanonicalRankAtoms(reread, breakTies=False)):
        root = maps.get(reactants.GetAtomWithIdx(atom).GetAtomMapNum())
        if root is not None:
            reach.setdefault(rank, root)
    written = []
    for source in sources:
        query = Chem.MolFromSmiles(source)
        if query is None or query.GetNumAtoms() != reactants.GetNumAtoms():
            raise MappingError(f"the writing {source!r} is not the mapped reaction's reactant side")
        ranks = Chem.CanonicalRankAtoms(query, breakTies=False)
        root = next((reach[r] for r in ranks if r in reach), None)
        if root is None:
            raise MappingError("no reactant atom reaches the product")
        written.append(Chem.MolToSmiles(product, rootedAtAtom=root, canonical=True))
    return written
