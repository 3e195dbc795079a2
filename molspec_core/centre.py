"""Where a reaction happens: the atoms whose bonds change between reactants and product.

The model writes SMILES, not an atom map, so the centre is estimated from the molecules alone. A product molecule
that is one reactant rearranged by a [3,3] sigmatropic shift (a Claisen or Cope rearrangement) is traced along the
shift; otherwise each product atom is traced to a reactant by the largest substructure the two share (RDKit's maximum
common substructure, elements matched, any bond order), the reactant with the largest share first (an aromatic atom
laid on one out of an aromatic ring counted half: a solvent's benzene is no source of a ring the reaction made), then
the next on the product atoms still untraced (or a second piece of a reactant laid: one cut in two, as by an
ozonolysis, or rearranged, or split by an atom put into one of its bonds, as a Baeyer-Villiger's oxygen or a
Curtius's nitrogen); then bond by bond from traced atoms into their reactants' untraced neighbours, and once more by
shared substructures with ring atoms free to match chain atoms (an atom that joined or left a ring: a lactam closed,
an epoxide or a phthalimide opened, a Diels-Alder adduct). A heteroatom between two carbons is then the one whose
carbon keeps it, as chemistry has it (an ester's oxygen is the alcohol's or the phenol's, and the acid's OH leaves;
an aryl ether's is the phenol's; an ester or acetal hydrolysed leaves its oxygen with the alcohol, the acid's or
carbonyl's new one water's, a tert-butyl, benzyl or allyl ester aside). A lone atom a reagent gives is traced to the
reagent made to give it (an alkylating agent's carbon, an organometallic's, an oxidant's oxygen), and the ends of two
double bonds that exchanged partners (a Wittig reaction's) to each other's reactant. A product atom is in the centre
where one of its bonds joins atoms of two reactants, joins a traced atom to an untraced one, or has no bond of the
same order between the reactant's atoms, or is a double bond whose geometry (E or Z) is the other of its reactant
bond's; or where its hydrogen count or charge differs from its reactant atom's, or it is a stereocentre whose
configuration is the other of its reactant atom's (an epimer, a Mitsunobu inversion). Reactant atoms that do not
reach the product leave (a chloride, a Boc group, a boronic acid's boron). Reactants that share fewer than two atoms
with the product (solvents, bases, catalysts) are left out.

It is an estimate: symmetric atoms can be traced to the wrong twin, and a product whose atoms are mostly
untraced gets no centre at all (None) rather than a misleading one. The app marks it on the answers.
"""
from __future__ import annotations

import functools
import re
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from rdkit import Chem
from rdkit.Chem import rdFMCS

from .chem import NONMETALS, rdkit_quietly

MCS_TIMEOUT_S = 1  # per pair of molecules (RDKit counts whole seconds); drug-sized pairs take about a millisecond
DEADLINE_S = 2.0  # no new pair is started after this long for one reaction (what is traced by then stands)
MAX_PLACEMENTS = 256  # ways of laying a shared substructure on the product compared (a benzene ring has 12)
MAX_FITS = 8  # places a shared substructure fits in the reactant compared (an ester's C-C-O: acyl or alkoxy)
RING_FREE_GAIN = 2  # atoms more that a substructure shared with ring atoms free must hold, where a ring was made
MIN_TRACED = 0.5  # below this share of the product's atoms traced, no centre is given
MAX_TIES = 4  # sets of product atoms a reactant fits alike that are each traced on (a symmetric diene's two ends)


@dataclass(frozen=True)
class ReactionCentre:
    product_atoms: frozenset[int]  # product atoms whose bonds change (indices as RDKit reads the product SMILES)
    reactant_atoms: frozenset[int]  # their reactant atoms (indices in the reactants' SMILES read as one molecule)
    leaving_atoms: frozenset[int]  # atoms of the reactants used that do not reach the product
    traced: int  # product atoms traced to a reactant
    atoms: int  # product atoms


def untraced_part(product: Chem.Mol, owner: Collection[int]) -> tuple[Chem.Mol, list[int]]:
    """The product without its traced atoms (`owner`'s), and each remaining atom's index in the product, ascending
    (planning's stereo trace takes it too)."""
    part = Chem.RWMol(product)
    for index in sorted(owner, reverse=True):
        part.RemoveAtom(index)
    kept = [i for i in range(product.GetNumAtoms()) if i not in owner]
    mol = part.GetMol()
    mol.UpdatePropertyCache(strict=False)
    Chem.FastFindRings(mol)
    return mol, kept


def _any_order(smarts: str) -> str:
    """An MCS SMARTS with every bond of any order, its ring or chain rule kept. FindMCS compares any order but
    writes the orders of the one pairing it found (`-` where a product's C-O met an ester's C-O), so the other
    fits (the ester's C=O) did not match its query."""
    def bond(run: re.Match) -> str:
        return "~&!@" if "!@" in run[0] else "~&@" if "@" in run[0] else "~"
    # a dative bond is two characters, -> or <- (a metal's ligand): its arrow alone left a SMARTS RDKit cannot read
    return "".join(piece if piece.startswith("[") else re.sub(r"(?:->|<-|[-=#:~,;&!@/\\])+", bond, piece)
                   for piece in re.split(r"(\[[^\]]*\])", smarts))


Pairing = tuple[tuple[int, ...], tuple[int, ...]]  # product atoms and the reactant atoms laid on them, pair by pair


def _shared(part: Chem.Mol, kept: list[int], product: Chem.Mol, reactant: Chem.Mol, rings_apart: bool = True,
            reached: Collection[int] = ()) -> list[Pairing]:
    """The product atoms (indices in `product`) and the reactant atoms of the largest substructure that
    `part` (the product's untraced atoms, `kept`) and `reactant` share, pair by pair. Of the ways to lay
    it on the product (a ring can be turned, an acid's two oxygens swapped) and the places it fits in the
    reactant (an ester's C-C-O is its acyl group or its alkoxy), the pair that changes the hydrogens or charge of
    the fewest atoms, then the fewest atoms (a bond's order too), then the one that keeps more of the reactant's
    double bonds (an ester reduced to an alcohol keeps its carbonyl oxygen, as the atom maps have it, not its ether
    oxygen). Hydrogens first: a Diels-Alder moves none, its diene's double bonds shift; butadiene laid on
    cyclohexene with its first double bond kept changed fewer atoms, but took two hydrogens from one carbon and gave
    one to another, and a carbon that lost its double bond went unmarked. Empty where they share fewer than two atoms;
    otherwise the best pairs, one for each set of product atoms they cover (a symmetric reactant fits a product two
    ways alike; _trace_by_mcs chooses by what the other reactants make of the rest). `reached`: the reactant's atoms
    already traced, left out of the search (its second piece: _second_piece).
    (The reactant's first fit was taken as it came: an aminolysis of ethyl acetate marked the ethoxy as the
    centre and the acyl carbon as leaving.)"""
    rest, rest_kept = untraced_part(reactant, reached) if reached else (reactant, list(range(reactant.GetNumAtoms())))
    found = rdFMCS.FindMCS([part, rest], timeout=MCS_TIMEOUT_S, ringMatchesRingOnly=rings_apart,
                           atomCompare=rdFMCS.AtomCompare.CompareElements, bondCompare=rdFMCS.BondCompare.CompareAny)
    if found.numAtoms < 2:
        return []
    query = Chem.MolFromSmarts(_any_order(found.smartsString))
    # Every turn of a fit is among the product's placements, so the reactant's fits need one per atom set.
    fits = [tuple(rest_kept[r] for r in fit) for fit in rest.GetSubstructMatches(query, maxMatches=MAX_FITS)]
    placements = part.GetSubstructMatches(query, uniquify=False, maxMatches=MAX_PLACEMENTS)
    if not fits or not placements:
        return []
    bonds = [(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()) for bond in query.GetBonds()]

    def cost(pair: Pairing) -> tuple[int, int, int, int, int]:
        """(atoms whose hydrogens or charge changed; atoms changed: hydrogens, charge or a bond's order; the reactant's
        multiple bonds not kept; atoms changed that have no bond out of the substructure, in the product and in the
        reactant; stereocentres turned). The fourth: an azole's NH alkylated, its ring laid either way round on a
        symmetric product, changed one nitrogen's hydrogens either way; the one that took the new bond is the centre
        anyway, but the turn that changed its twin marked both. So too a trityl imidazole freed: the nitrogen that kept
        no bond to the trityl was marked, not the one that lost it. The last: cis-3,5-dimethylmorpholine, laid on its
        N-aryl product the other way round, turned both its centres (_configuration_turned), and an aldose's chain, laid
        end to end on its alditol, four."""
        placement, fit = pair
        inside, fitted = {kept[p] for p in placement}, set(fit)
        changed = {i for i, (p, r) in enumerate(zip(placement, fit))
                   if _atom_changed(product.GetAtomWithIdx(kept[p]), reactant.GetAtomWithIdx(r))}
        hydrogens = len(changed)
        for a, b in bonds:
            after = product.GetBondBetweenAtoms(kept[placement[a]], kept[placement[b]])
            before = reactant.GetBondBetweenAtoms(fit[a], fit[b])
            if after.GetBondType() != before.GetBondType():
                changed.update((a, b))
        enclosed = sum(all(n.GetIdx() in inside for n in product.GetAtomWithIdx(kept[placement[i]]).GetNeighbors())
                       + all(n.GetIdx() in fitted for n in reactant.GetAtomWithIdx(fit[i]).GetNeighbors())
                       for i in changed)
        pairs = {kept[p]: r for p, r in zip(placement, fit)}
        turned = sum(_turned(product.GetAtomWithIdx(a), reactant.GetAtomWithIdx(r), pairs) for a, r in pairs.items()
                     if product.GetAtomWithIdx(a).GetChiralTag() in TETRAHEDRAL)
        return hydrogens, len(changed), -sum(multiple[r] for r in fit), enclosed, turned

    multiple = [sum(bond.GetBondTypeAsDouble() > 1 and not bond.GetIsAromatic() for bond in atom.GetBonds())
                for atom in reactant.GetAtoms()]
    costs = {(p, f): cost((p, f)) for f in fits for p in placements}
    lowest = min(costs.values())
    best: dict[frozenset[int], Pairing] = {}
    for (placement, fit), pair_cost in costs.items():
        if pair_cost == lowest:
            best.setdefault(frozenset(placement), (tuple(kept[i] for i in placement), fit))
    return list(best.values())[:MAX_TIES]


@functools.lru_cache(maxsize=4096)
@rdkit_quietly  # inside the cache: a centre known already parses nothing
def reaction_centre(reactants: str, product: str) -> ReactionCentre | None:
    """The centre of reactants >> product (SMILES), or None where RDKit cannot read them or traces fewer than
    MIN_TRACED of the product's atoms."""
    product_mol, reactants_mol = Chem.MolFromSmiles(product), Chem.MolFromSmiles(reactants)
    if product_mol is None or reactants_mol is None or product_mol.GetNumAtoms() == 0:
        return None
    whole: list[tuple[int, ...]] = []  # each reactant's atoms' indices in reactants_mol
    molecules = Chem.GetMolFrags(reactants_mol, asMols=True, fragsMolAtomMapping=whole)
    owner: dict[int, tuple[int, int]] = {}  # product atom -> (reactant, its atom there)
    unused, started = set(range(len(molecules))), time.monotonic()
    _trace_sigmatropic(product_mol, molecules, owner, unused)
    _trace_by_mcs(product_mol, molecules, owner, unused, started, rings_apart=True)
    # A ring made or broken: a diene whose chain became a ring's atoms shares none with the product, ring for ring.
    _trace_by_mcs(product_mol, molecules, owner, unused, started, rings_apart=False)
    _trace_lone_atoms(product_mol, molecules, owner, unused)
    _trace_bonded_lone_atoms(product_mol, molecules, owner, unused)
    _trace_exchanged_partners(product_mol, molecules, owner)
    _keep_the_nucleophiles_heteroatom(product_mol, molecules, owner)
    if len(owner) < MIN_TRACED * product_mol.GetNumAtoms():
        return None
    centre = {a.GetIdx() for a in product_mol.GetAtoms() if a.GetIdx() not in owner or _atom_changed(
        a, molecules[owner[a.GetIdx()][0]].GetAtomWithIdx(owner[a.GetIdx()][1]))
        or _configuration_turned(a, owner, molecules)}
    for bond in product_mol.GetBonds():
        ends = (bond.GetBeginAtomIdx(), bond.GetEndAtomIdx())
        if _bond_changed(bond, [owner.get(i) for i in ends], molecules) or _geometry_turned(bond, owner, molecules):
            centre.update(ends)
    used = {k for k, _ in owner.values()}
    reached = {whole[k][r] for k, r in owner.values()}
    return ReactionCentre(frozenset(centre), frozenset(whole[k][r] for i, (k, r) in owner.items() if i in centre),
                          frozenset(i for k in used for i in whole[k] if i not in reached), len(owner),
                          product_mol.GetNumAtoms())


def _trace_by_mcs(product: Chem.Mol, molecules: tuple[Chem.Mol, ...], owner: dict[int, tuple[int, int]],
                  unused: set[int], started: float, rings_apart: bool, look_ahead: bool = True) -> None:
    """Trace the product's untraced atoms to the unused reactants by their largest shared substructures, the largest
    first, until none shares two atoms, or time is up. `rings_apart`: ring atoms and bonds match only ring ones.

    Where the product has more rings than the reactants together (a ring was made), a reactant's substructure shared
    with ring atoms free is taken instead where it is RING_FREE_GAIN atoms larger: a 1,3-diketone and hydrazine make a
    pyrazole whose carbons were chain atoms, and rings apart, the diketone's ring and chain were laid on the product
    one atom along (its CH2 on the pyrazole's carbon, the CF3's carbon on the CH2), so the CF3 was marked as leaving
    and as the centre. (Not for every reaction: it costs a second search per reactant.)

    Where a reactant fits two sets of product atoms alike (`look_ahead`), the rest is traced on each and the one that
    leaves the fewest atoms untraced, then the fewest whose hydrogens or charge changed, is kept: methyl acrylate's
    C=C fits either ring carbon beside the ester's, and the one taken left butadiene laid on the adduct with its
    double bond at an end, a carbon whose bonds changed unmarked."""
    ring_made = rings_apart and any(_rings(product, aromatic) > sum(_rings(m, aromatic) for m in molecules)
                                    for aromatic in (False, True))
    while product.GetNumAtoms() - len(owner) >= 2 and time.monotonic() - started < DEADLINE_S:
        part, kept = untraced_part(product, owner)
        best: tuple[int, int, list[Pairing]] | None = None
        for k in sorted(unused):
            if time.monotonic() - started > DEADLINE_S:
                break
            shared = _shared(part, kept, product, molecules[k], rings_apart)
            if ring_made and time.monotonic() - started < DEADLINE_S:  # a second search, not started past the deadline
                free = _shared(part, kept, product, molecules[k], rings_apart=False)
                if free and len(free[0][0]) >= (len(shared[0][0]) if shared else 0) + RING_FREE_GAIN:
                    shared = free
            if shared:
                evidence = _evidence(product, molecules[k], *shared[0])
                if best is None or evidence > best[0]:
                    best = (evidence, k, shared)
        for k in sorted({j for j, _ in owner.values()}):
            if time.monotonic() - started > DEADLINE_S:
                break
            shared, inserted = _second_piece(part, kept, product, molecules[k], owner, k, rings_apart)
            if shared:  # an insertion's geometry is evidence too: it wins a tie with an unused reactant
                evidence = _evidence(product, molecules[k], *shared[0])
                if best is None or evidence > best[0] or (inserted and evidence == best[0]):
                    best = (evidence, k, shared)
        if best is None:
            break
        _, k, ties = best
        if look_ahead and len(ties) > 1:
            ties = sorted(ties, key=lambda pair: _left_over(product, molecules, owner, unused, started, rings_apart,
                                                            k, pair))
        _lay(product, molecules, owner, unused, k, ties[0])


# A [3,3] sigmatropic shift's six atoms, 1=2-3-4-5=6 (a double bond or an arene's at each end): the bond 3-4 breaks and
# 1-6 is made, the double bonds move to 2=3 and 4=5. The Claisen rearrangement (an allyl vinyl or aryl ether), the
# Cope and oxy-Cope rearrangements, the aza-Claisen, the Overman.
SIGMATROPIC_33 = Chem.MolFromSmarts("[*]=,:[*]-[*]-[*]-[*]=,:[*]")
MAX_SHIFTS = 64  # places in one reactant a [3,3] shift is tried (its 1,5-dienes and allyl ethers)


def _trace_sigmatropic(product: Chem.Mol, molecules: tuple[Chem.Mol, ...], owner: dict[int, tuple[int, int]],
                       unused: set[int]) -> None:
    """Trace a product molecule that is one reactant rearranged by a [3,3] sigmatropic shift atom for atom along the
    shift: its skeleton (atoms by element, bonds of any order) is the reactant's with one shift's bond 3-4 moved to
    1-6 (SIGMATROPIC_33), and not the reactant's own. Traced by shared substructures instead, the allyl group of an
    allyl phenyl ether's Claisen rearrangement kept its double bond where it was, as if its CH2 had moved from the
    oxygen to the ring carbon beside (a [1,3] shift, which orbital symmetry forbids a carbon: Woodward and Hoffmann),
    and an oxy-Cope's aldehyde oxygen was drawn as from nowhere, the alcohol's as leaving. Of the ways to lay the
    product on the shifted reactant (a phenyl's two ortho carbons), the one that changes the fewest atoms' hydrogens
    or charge, then the fewest bonds' orders."""
    for atoms, piece in zip(Chem.GetMolFrags(product), Chem.GetMolFrags(product, asMols=True)):
        target = _skeleton(piece)
        if any(_alike_in_size(piece, molecules[k]) and _skeleton(molecules[k]).HasSubstructMatch(target)
               for k in unused):
            continue  # a reactant that is the product's skeleton already (an allylphenol hydrogenated beside its ether)
        for k in sorted(unused):
            mapping = _shifted_onto(piece, target, molecules[k])
            if mapping is not None:
                owner.update((atoms[p], (k, r)) for p, r in enumerate(mapping))
                unused.discard(k)
                break


def _alike_in_size(piece: Chem.Mol, reactant: Chem.Mol) -> bool:
    """Whether two molecules have the same atoms by element and as many bonds (a rearrangement keeps both)."""
    def elements(mol: Chem.Mol) -> Counter[int]:
        return Counter(atom.GetAtomicNum() for atom in mol.GetAtoms())

    return piece.GetNumBonds() == reactant.GetNumBonds() and elements(piece) == elements(reactant)


def _shifted_onto(piece: Chem.Mol, target: Chem.Mol, reactant: Chem.Mol) -> tuple[int, ...] | None:
    """For each atom of `piece` (one product molecule; `target` its _skeleton), the reactant atom it is by a [3,3]
    shift of `reactant`, or None where no shift makes its skeleton."""
    if not _alike_in_size(piece, reactant):
        return None
    before = _skeleton(reactant)
    costs: dict[tuple[int, ...], tuple[int, int]] = {}
    for one, _, three, four, _, six in reactant.GetSubstructMatches(SIGMATROPIC_33, maxMatches=MAX_SHIFTS):
        if reactant.GetBondBetweenAtoms(one, six) is not None:
            continue
        shifted = Chem.RWMol(before)
        shifted.RemoveBond(three, four)
        shifted.AddBond(one, six, Chem.BondType.SINGLE)
        Chem.FastFindRings(shifted)
        for mapping in shifted.GetSubstructMatches(target, uniquify=False, maxMatches=MAX_PLACEMENTS):
            costs[mapping] = (sum(_atom_changed(atom, reactant.GetAtomWithIdx(mapping[atom.GetIdx()]))
                                  for atom in piece.GetAtoms()),
                              sum(_bond_changed(bond, [(0, mapping[bond.GetBeginAtomIdx()]),
                                                       (0, mapping[bond.GetEndAtomIdx()])], (reactant,))
                                  for bond in piece.GetBonds()))
    return min(costs, key=costs.__getitem__) if costs else None


def _skeleton(mol: Chem.Mol) -> Chem.Mol:
    """A molecule's atoms by element alone and its bonds all single: what two molecules share whose bonds' orders and
    hydrogens a rearrangement moved."""
    bare = Chem.RWMol()
    for atom in mol.GetAtoms():
        bare.AddAtom(Chem.Atom(atom.GetAtomicNum()))
    for bond in mol.GetBonds():
        bare.AddBond(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx(), Chem.BondType.SINGLE)
    bare.UpdatePropertyCache(strict=False)
    Chem.FastFindRings(bare)
    return bare


def _second_piece(part: Chem.Mol, kept: list[int], product: Chem.Mol, reactant: Chem.Mol,
                  owner: dict[int, tuple[int, int]], k: int, rings_apart: bool) -> tuple[list[Pairing], bool]:
    """A second piece of reactant `k`, already laid on the product: the substructure its untraced atoms share with the
    product's (`part`, `kept`), as _shared's pairs, and whether an atom was put between the two pieces (True: the pairs
    in which an atom is bonded in the reactant to one of the reactant's traced atoms and two bonds from it in the
    product; _trace_by_mcs lets these win a tie with an unused reactant). A reactant gave one piece otherwise, so an
    oxygen or nitrogen inserted into one of its bonds split it, and the smaller side went to another reactant or none:
    a Baeyer-Villiger oxidation of acetophenone traced the phenyl acetate's acetyl to the peracid's acyl group (the
    ketone's acetyl leaving), a Curtius rearrangement's carbamate carbon to the phenyl of diphenylphosphoryl azide; and
    a reactant cut in two (an ozonolysis's alkene, its acetone said to come from nowhere and to leave) or rearranged
    (an allyl aryl ether's Claisen rearrangement, its allyl group so) lost the second piece."""
    reached = {r: p for p, (j, r) in owner.items() if j == k}
    if reactant.GetNumAtoms() - len(reached) < 2:
        return [], False
    pairs = _shared(part, kept, product, reactant, rings_apart, reached)
    inserted = [(placement, fit) for placement, fit in pairs
                if any(n.GetIdx() in reached and _two_bonds_apart(product, p, reached[n.GetIdx()])
                       for p, r in zip(placement, fit) for n in reactant.GetAtomWithIdx(r).GetNeighbors())]
    return (inserted, True) if inserted else (pairs, False)


def _two_bonds_apart(mol: Chem.Mol, first: int, second: int) -> bool:
    """Whether two atoms are not bonded but share a neighbour."""
    return mol.GetBondBetweenAtoms(first, second) is None and any(
        mol.GetBondBetweenAtoms(n.GetIdx(), second) is not None for n in mol.GetAtomWithIdx(first).GetNeighbors())


def _rings(mol: Chem.Mol, aromatic: bool) -> int:
    """How many of the molecule's rings are aromatic (or not). Counted apart, so that a solvent's benzene ring does
    not hide the cyclohexene a Diels-Alder made (toluene's ring stood in for it, and the acrylate was laid on the
    adduct rings apart, its C=C grown onto whichever ring carbon came first)."""
    return sum(all(mol.GetBondWithIdx(b).GetIsAromatic() for b in ring) == aromatic
               for ring in mol.GetRingInfo().BondRings())


def _lay(product: Chem.Mol, molecules: tuple[Chem.Mol, ...], owner: dict[int, tuple[int, int]], unused: set[int],
         k: int, pair: Pairing) -> None:
    """Trace the product atoms of `pair` to reactant `k`'s, and grow from them."""
    owner.update((p, (k, r)) for p, r in zip(*pair))
    unused.discard(k)
    _grow(product, molecules, owner)  # what this reactant gave, before the next one is laid on the rest


def _left_over(product: Chem.Mol, molecules: tuple[Chem.Mol, ...], owner: dict[int, tuple[int, int]],
               unused: set[int], started: float, rings_apart: bool, k: int, pair: Pairing) -> tuple[int, int]:
    """(product atoms untraced, traced atoms whose hydrogens or charge changed) once `pair` is laid and the rest
    traced by shared substructures as _trace_by_mcs goes on (ring atoms free after), on copies."""
    owner, unused = dict(owner), set(unused)
    _lay(product, molecules, owner, unused, k, pair)
    for apart in (True, False) if rings_apart else (False,):
        _trace_by_mcs(product, molecules, owner, unused, started, apart, look_ahead=False)
    changed = sum(_atom_changed(product.GetAtomWithIdx(i), molecules[j].GetAtomWithIdx(r))
                  for i, (j, r) in owner.items())
    return product.GetNumAtoms() - len(owner), changed


def _evidence(product: Chem.Mol, molecule: Chem.Mol, in_product: tuple[int, ...], in_reactant: tuple[int, ...]
              ) -> int:
    """How surely a shared substructure traces the product's atoms to `molecule`: twice its size, less its
    reactant's aromatic atoms laid on atoms the product has out of an aromatic ring. A forward query's aromatic
    solvent shares a ring with a ring the reaction made: toluene's seven carbons, laid on a Diels-Alder adduct's
    cyclohexene and its ester carbon, came before the acrylate's five, and the adduct was marked nearly whole. An
    arene reduced (a pyridine hydrogenated in acetic acid) keeps its own ring's share, half counted, ahead of a
    solvent's smaller one; a ring made aromatic (a cyclohexanone to a phenol) loses nothing, so an aromatic solvent
    that shares the new ring does not take it."""
    lost = sum(molecule.GetAtomWithIdx(r).GetIsAromatic() and not product.GetAtomWithIdx(p).GetIsAromatic()
               for p, r in zip(in_product, in_reactant))
    return 2 * len(in_product) - lost


def _grow(product: Chem.Mol, molecules: tuple[Chem.Mol, ...], owner: dict[int, tuple[int, int]]) -> None:
    """Trace an untraced product atom bonded to a traced one to the traced atom's untraced neighbour of its element in
    the reactant, bond by bond, the pair that keeps its bond's order and its atom's hydrogens and charge first. A
    shared substructure keeps ring atoms to ring atoms, so an atom that joined or left a ring stayed untraced: a
    phthalimide's nitrogen, freed as an amine, was marked as leaving and the carbon that kept it as a new bond's end.
    (Best pair first, not atom by atom: a lactam's new ring took its carbonyl carbon for the amine's CH2 neighbour.)"""
    reached = set(owner.values())
    while True:
        candidates = [(bond.GetBondType() != product.GetBondBetweenAtoms(atom.GetIdx(), q.GetIdx()).GetBondType(),
                       _atom_changed(atom, n), -_neighbours_alike(atom, n), atom.GetIdx(), k, n.GetIdx())
                      for atom in product.GetAtoms() if atom.GetIdx() not in owner
                      for q in atom.GetNeighbors() if q.GetIdx() in owner
                      for k, r in [owner[q.GetIdx()]]
                      for bond in molecules[k].GetAtomWithIdx(r).GetBonds()
                      for n in [bond.GetOtherAtom(molecules[k].GetAtomWithIdx(r))]
                      if n.GetAtomicNum() == atom.GetAtomicNum() and (k, n.GetIdx()) not in reached]
        if not candidates:
            return
        *_, atom, k, r = min(candidates)
        owner[atom] = (k, r)
        reached.add((k, r))


HETEROATOMS = (7, 8, 16)  # N, O, S: the atoms a nucleophile joins by


def _holds_on(atom: Chem.Atom) -> int:
    """How firmly a reactant's carbon (or sulfur, phosphorus) keeps its bond to a heteroatom: 0 at an acyl-like
    centre, an atom with a double bond to N, O or S (a carbonyl, imine, sulfonyl), where substitution goes by
    addition, then elimination, and an aldehyde's oxygen leaves as water when it becomes an acetal, or a carbon of
    an acetal's level, single-bonded to two of them (an acetal, aminal, orthoester), where it goes by the cation they
    stabilise: a dioxolane's hydrolysis gives the aldehyde the water's oxygen, and the diol leaves with both of its
    own (one was kept as the aldehyde's, the rest of the diol drawn as leaving); 2 on an aromatic ring, whose bond to
    a phenol's oxygen no esterification, Mitsunobu reaction or hydrolysis breaks; 1 otherwise."""
    if atom.GetIsAromatic():
        return 2
    to_heteroatoms = [bond.GetBondType() for bond in atom.GetBonds()
                      if bond.GetOtherAtom(atom).GetAtomicNum() in HETEROATOMS]
    return 0 if Chem.BondType.DOUBLE in to_heteroatoms or (
        atom.GetAtomicNum() == 6 and to_heteroatoms.count(Chem.BondType.SINGLE) >= 2) else 1


def _keep_the_nucleophiles_heteroatom(product: Chem.Mol, molecules: tuple[Chem.Mol, ...],
                                      owner: dict[int, tuple[int, int]]) -> None:
    """Retrace a product heteroatom (N, O, S) between two carbons to the reactant whose carbon keeps it.

    Where a heteroatom joins two carbons and both carbons' reactants hold one of its element there, the largest
    shared substructure says which bond was made, often wrongly: an acid's C(=O)O, laid whole on an ester, said the
    acid's oxygen stayed and the phenol's or alcohol's left. Chemistry says the bond is made and broken at the carbon
    that holds its heteroatom less firmly (_holds_on): an acid and an alcohol, phenol, amine or thiol join by the
    nucleophile's heteroatom and the acid's OH leaves as water (Fischer esterification, the coupling reagents; shown
    with oxygen-18 by Roberts and Urey, 1938); an aldehyde and a diol make an acetal with both of the diol's oxygens;
    a phenol and an alcohol make an aryl ether with the phenol's oxygen (the Mitsunobu reaction). So the heteroatom,
    traced to one carbon's reactant, is retraced to the other carbon's untraced heteroatom where that carbon holds on
    more firmly. (Where both hold on alike, as two alcohols, nothing is changed: the molecules alone cannot tell. Nor
    where the other heteroatom is bonded to an acyl-like atom: a mesylate's oxygen leaves with its sulfonyl, and an
    acid takes the alkyl by its own oxygen.) A carbon whose configuration turned (_configuration_turned, its
    heteroatom traced to its own) let its heteroatom go, however firmly it held it: an alcohol and an acid that make
    an ester of the alcohol's carbon inverted (the Mitsunobu reaction) join by the acid's oxygen, and the alcohol's
    leaves as triphenylphosphine oxide; the acyl carbon, whose bonds are all kept, was marked as the centre.

    Read back as hydrolysis (an acid from its ester, or a retrosynthesis answer's ester for an acid): the alcohol's or
    phenol's carbon keeps its oxygen, so the acid's OH is not the ester's (it comes from the hydroxide or water, which
    the answer may not show) and the alkoxy group leaves whole, as oxygen-18 showed of a saponification (Polanyi and
    Szabo, 1934). So the acyl carbon is the centre: a methyl ester's saponification marked only the acid's oxygen, and
    the methyl as leaving alone, as if it were an SN2 demethylation (USPTO-50K's atom maps have it so). Not where the
    alkyl carbon gives its oxygen up itself (_gives_up_oxygen): a tert-butyl ester's in acid, a benzyl ester's by
    hydrogenolysis; the oxygen stays with the acid."""
    reached = set(owner.values())

    def reactant_atom(index: int) -> Chem.Atom:
        k, r = owner[index]
        return molecules[k].GetAtomWithIdx(r)

    for atom in product.GetAtoms():
        if atom.GetAtomicNum() not in HETEROATOMS or atom.GetIdx() not in owner:
            continue
        k, x = owner[atom.GetIdx()]
        traced = [n.GetIdx() for n in atom.GetNeighbors() if n.GetIdx() in owner]
        kept = [n for n in traced if owner[n][0] == k and molecules[k].GetBondBetweenAtoms(owner[n][1], x)]
        made = [n for n in traced if n not in kept]
        # a kept carbon whose configuration turned let its heteroatom go (inverted, as by a Mitsunobu reaction), and
        # a made one that would turn, given its own heteroatom back, did
        inverted = any(_configuration_turned(product.GetAtomWithIdx(c), owner, molecules) for c in kept)
        own = [(owner[n][0], y.GetIdx()) for c in kept for n in made
               if inverted or _holds_on(reactant_atom(n)) > _holds_on(reactant_atom(c))
               for y in reactant_atom(n).GetNeighbors()
               if y.GetAtomicNum() == atom.GetAtomicNum() and (owner[n][0], y.GetIdx()) not in reached
               and (inverted or all(_holds_on(z) for z in y.GetNeighbors()))
               and not _configuration_turned(product.GetAtomWithIdx(n), {**owner, atom.GetIdx(): (owner[n][0],
                                                                                                     y.GetIdx())},
                                             molecules)]
        # an ester or acetal hydrolysed: its acyl or acetal carbon lets the oxygen go with the alcohol (leaving)
        hydrolysed = (atom.GetDegree() == 1 and any(reactant_atom(c).GetAtomicNum() == 6
                                                    and _holds_on(reactant_atom(c)) == 0 for c in kept)
                      and any(n.GetAtomicNum() == 6 and (k, n.GetIdx()) not in reached and not _gives_up_oxygen(n)
                              for n in molecules[k].GetAtomWithIdx(x).GetNeighbors()))
        if own or hydrolysed:
            reached.discard((k, x))
            del owner[atom.GetIdx()]
        if own:
            owner[atom.GetIdx()] = own[0]
            reached.add(own[0])


def _gives_up_oxygen(carbon: Chem.Atom) -> bool:
    """Whether an ester's alkyl carbon lets its oxygen go to the acid when the ester is cleaved: a tertiary one (a
    tert-butyl ester in acid, by its cation), a benzylic or allylic one (a benzyl ester by hydrogenolysis, an allyl
    ester by palladium). Not an aryl carbon, nor a methyl's or ethyl's (a saponification breaks the acyl C-O bond)."""
    carbons = [n for n in carbon.GetNeighbors() if n.GetAtomicNum() == 6]
    return not carbon.GetIsAromatic() and (len(carbons) >= 3 or any(
        n.GetIsAromatic() or any(bond.GetBondType() == Chem.BondType.DOUBLE for bond in n.GetBonds())
        for n in carbons))


def _neighbours_alike(atom: Chem.Atom, other: Chem.Atom) -> int:
    """How many of two atoms' neighbours pair off by element: a benzimidazolone's ring-fusion carbon, not its urea
    carbon, is the aniline's ring carbon beside the nitrogen (the urea carbon took it, and the ring was marked)."""
    return sum((Counter(n.GetAtomicNum() for n in atom.GetNeighbors())
                & Counter(n.GetAtomicNum() for n in other.GetNeighbors())).values())


def _trace_bonded_lone_atoms(product: Chem.Mol, molecules: tuple[Chem.Mol, ...], owner: dict[int, tuple[int, int]],
                             unused: set[int]) -> None:
    """Trace an untraced product atom whose neighbours are all traced to the one unused reactant that holds its
    element (the methyl of methyl iodide, the nitrogen of ammonia, the carbon of formaldehyde), which shares one atom
    with the product and so no substructure of two: a retrosynthesis answer's methyl iodide was drawn unmarked. Where
    several unused reactants hold the element, the one whose atom is made to be given (_given_away: methyl iodide in
    methanol, thionyl chloride in dichloromethane) gives it, and where none or several are, which did is not guessed.
    Of the reactant's atoms of that element, the one with the fewest bonds to break goes (a peracid's or Oxone's
    terminal OH oxygen, not the carbonyl's or the sulfonyl's, which was taken for having no hydrogen to lose, the
    peroxide's O-O bond said to stay and the peracid to leave without its acid group); then one bonded to its own
    element (the peroxide's O-O, the weak bond), then one whose hydrogens and charge change least. A reactant that
    gave one atom so (or a counter-ion: _trace_lone_atoms) may give another, and is asked first: bromine or deuterium
    added across a double bond (the second atom was drawn as leaving), methyl iodide in methanol whose iodide is the
    product's.

    Where no unused reactant holds the element, a group moved onto it (_migrated_to): a Hofmann rearrangement's
    aniline nitrogen, the benzamide's, was drawn as leaving and the aniline's as from nowhere."""
    reached = set(owner.values())
    given = {k for k in unused if any(j == k for j, _ in reached)}  # reactants that gave atoms by these rules

    def untraced(k: int, element: int) -> list[Chem.Atom]:
        return [a for a in molecules[k].GetAtoms() if a.GetAtomicNum() == element and (k, a.GetIdx()) not in reached]

    for atom in product.GetAtoms():
        if atom.GetIdx() in owner or not atom.GetDegree() or any(n.GetIdx() not in owner for n in atom.GetNeighbors()):
            continue
        holders = ([k for k in sorted(given) if untraced(k, atom.GetAtomicNum())]
                   or [k for k in sorted(unused | given) if untraced(k, atom.GetAtomicNum())])
        if len(holders) > 1:  # the one whose atom is made to be given (_given_away), where one is
            partners = [molecules[owner[n.GetIdx()][0]].GetAtomWithIdx(owner[n.GetIdx()][1])
                        for n in atom.GetNeighbors()]
            giving = [k for k in holders
                      if any(_given_away(a, atom, partners) for a in untraced(k, atom.GetAtomicNum()))]
            holders = giving if len(giving) == 1 else holders
        if not holders and (migrated := _migrated_to(atom, molecules, owner, reached)) is not None:
            owner[atom.GetIdx()] = migrated
            reached.add(migrated)
        if len(holders) != 1:
            continue
        k = holders[0]
        owner[atom.GetIdx()] = (k, min(untraced(k, atom.GetAtomicNum()), key=lambda a: (
            sum(bond.GetBondTypeAsDouble() for bond in a.GetBonds()),
            all(n.GetAtomicNum() != a.GetAtomicNum() for n in a.GetNeighbors()), _atom_changed(atom, a))).GetIdx())
        reached.add(owner[atom.GetIdx()])
        given.add(k)
        unused.discard(k)


def _trace_exchanged_partners(product: Chem.Mol, molecules: tuple[Chem.Mol, ...], owner: dict[int, tuple[int, int]]
                              ) -> None:
    """Trace the ends of two double bonds that exchanged partners (a Wittig reaction's C=O and P=C giving C=C and P=O,
    an olefin metathesis): two untraced product atoms, X and Y, each bonded only, and doubly, to a traced atom (A and
    B), where A's reactant atom has one untraced doubly bonded neighbour of Y's element and B's one of X's: X is B's,
    Y is A's. A methylenation's phosphine oxide listed beside the alkene drew the ylide's CH2 as leaving and the
    alkene's as from nowhere, and the aldehyde's oxygen and the oxide's alike."""
    reached = set(owner.values())

    def partner(atom: Chem.Atom) -> tuple[int, int] | None:
        bonds = atom.GetBonds()
        if atom.GetIdx() in owner or len(bonds) != 1 or bonds[0].GetBondType() != Chem.BondType.DOUBLE:
            return None
        return owner.get(bonds[0].GetOtherAtomIdx(atom.GetIdx()))

    def doubly_bonded(k: int, r: int, element: int) -> list[int]:
        ends = [bond.GetOtherAtom(molecules[k].GetAtomWithIdx(r)) for bond in molecules[k].GetAtomWithIdx(r).GetBonds()
                if bond.GetBondType() == Chem.BondType.DOUBLE]
        return [n.GetIdx() for n in ends if n.GetAtomicNum() == element and (k, n.GetIdx()) not in reached]

    ends = [(atom, found) for atom in product.GetAtoms() if (found := partner(atom)) is not None]
    for x, (k_a, r_a) in ends:
        for y, (k_b, r_b) in ends:
            if x.GetIdx() == y.GetIdx() or x.GetIdx() in owner or y.GetIdx() in owner:
                continue
            from_b, from_a = doubly_bonded(k_b, r_b, x.GetAtomicNum()), doubly_bonded(k_a, r_a, y.GetAtomicNum())
            if len(from_b) == 1 and len(from_a) == 1:
                owner[x.GetIdx()], owner[y.GetIdx()] = (k_b, from_b[0]), (k_a, from_a[0])
                reached.update((owner[x.GetIdx()], owner[y.GetIdx()]))


LEAVING_HALOGENS = (17, 35, 53)  # Cl, Br, I: a leaving group on a carbon; a halogen a reagent gives off another atom
# a carbon bonded to boron or a metal is a nucleophile's, made to be given (a Grignard reagent, an organolithium, a
# boronic acid): every element but the nonmetals, and boron
CARBON_DONORS = frozenset(range(1, 119)) - NONMETALS | {5}


def _given_away(atom: Chem.Atom, given: Chem.Atom, partners: list[Chem.Atom]) -> bool:
    """Whether a reactant's atom is one a reagent is made to give, as the product atom `given`, bonded in the product to
    the reactant atoms `partners`: an alkylating agent's carbon, bonded to a leaving group (_leaves_from_carbon), with
    the hydrogens it has in the product (the CH3 of methyl iodide, methyl tosylate or dimethyl sulfate for a methyl,
    not dichloromethane's CH2); an organometallic's carbon so, bonded to a metal or boron (CARBON_DONORS), given to an
    electrophile's carbon: an acyl-like one (_holds_on 0) or one a leaving group leaves (methylmagnesium bromide's
    methyl to an aldehyde, methylboronic acid's to an aryl chloride; not methyllithium's to the arene that lithium
    tetramethylpiperidide lithiated beside methyl iodide: a Grignard addition in THF left the Grignard's methyl
    untraced, and its MgBr unmarked); a halogen bonded to an atom other than carbon or to an acyl-like carbon
    (_holds_on 0: thionyl chloride, NBS, oxalyl chloride); an oxygen bonded to an oxygen or a halogen, an oxidant's
    (hydrogen peroxide's, mCPBA's, sodium chlorite's: an epoxide, sulfoxide, N-oxide or hydroboration's alcohol made
    beside water, methanol or acetic acid left its oxygen untraced; a Pinnick oxidation, chlorite beside hydrogen
    peroxide, is not guessed). A solvent's atoms are none of these (methanol's, DMF's,
    THF's carbon; dichloromethane's or chloroform's chlorine, on a carbon that keeps it), and where a solvent and a
    reagent could give a methyl or a chlorine, the reagent did: the two were left untraced (_trace_bonded_lone_atoms).
    (Nor is a halide ion or a hydrogen halide: a workup's chloride beside hexachloroethane, the chlorine a lithiated
    arene takes, would have been taken.)"""
    bonded = atom.GetNeighbors()
    if atom.GetAtomicNum() == 8:  # an oxidant's: a peroxide's, a peracid's, ozone's, Oxone's; chlorite's, periodate's
        return any(n.GetAtomicNum() == 8 or n.GetAtomicNum() in LEAVING_HALOGENS for n in bonded)
    if atom.GetAtomicNum() == 6:
        electrophile = any(partner.GetAtomicNum() == 6 and (
            not _holds_on(partner) or any(map(_leaves_from_carbon, partner.GetNeighbors()))) for partner in partners)
        return atom.GetTotalNumHs() == given.GetTotalNumHs() and any(
            _leaves_from_carbon(n) or (electrophile and n.GetAtomicNum() in CARBON_DONORS) for n in bonded)
    return atom.GetAtomicNum() in LEAVING_HALOGENS and bool(bonded) and all(n.GetAtomicNum() != 6 or not _holds_on(n)
                                                                    for n in bonded)


def _leaves_from_carbon(atom: Chem.Atom) -> bool:
    """Whether a carbon's neighbour is a leaving group's atom: a chlorine, bromine or iodine, or a sulfonate's or
    sulfate's oxygen (a tosylate, a triflate, dimethyl sulfate)."""
    return atom.GetAtomicNum() in LEAVING_HALOGENS or (atom.GetAtomicNum() == 8 and any(
        n.GetAtomicNum() == 16 for n in atom.GetNeighbors()))


def _migrated_to(atom: Chem.Atom, molecules: tuple[Chem.Mol, ...], owner: dict[int, tuple[int, int]],
                 reached: set[tuple[int, int]]) -> tuple[int, int] | None:
    """The one untraced reactant atom of `atom`'s element two bonds from the reactant atom of one of `atom`'s (traced)
    neighbours, by an atom that leaves, as (reactant, atom), or None where there is none or more than one: a 1,2-shift
    in which a group moves onto its neighbour from an atom that then leaves (the Hofmann and Lossen rearrangements'
    carbonyl, as carbon dioxide). (Not where the atom between stays: a Beckmann lactam's oxygen, from water, is no
    oxime oxygen moved from the nitrogen to the carbon.)"""
    found = {(k, a.GetIdx()) for n in atom.GetNeighbors() for k, q in [owner[n.GetIdx()]]
             for a in molecules[k].GetAtoms() if a.GetAtomicNum() == atom.GetAtomicNum()
             and (k, a.GetIdx()) not in reached and not molecules[k].GetBondBetweenAtoms(a.GetIdx(), q)
             and any((k, m.GetIdx()) not in reached and molecules[k].GetBondBetweenAtoms(m.GetIdx(), q)
                     for m in a.GetNeighbors())}
    return found.pop() if len(found) == 1 else None


def _trace_lone_atoms(product: Chem.Mol, molecules: tuple[Chem.Mol, ...], owner: dict[int, tuple[int, int]],
                      unused: set[int]) -> None:
    """Trace each untraced molecule of one atom in the product (a counter-ion, water) to an unused one-atom reactant
    alike (element, isotope, charge, hydrogens), which no shared substructure of two atoms can find: a sodium ion
    that stood beside hydroxide and stands beside acetate was marked as an atom whose bonds change. Where none is
    alike, to the one untraced reactant atom of its element and isotope that a reactant laid on the product holds (the
    leaving group that stays as the counter-ion or acid: the chloride of an acyl chloride, as HCl), or else an unused
    one (methyl iodide's iodide in a quaternization): that atom was drawn as leaving, and the ion as from nowhere."""
    reached = set(owner.values())
    laid = {k for k, _ in owner.values()}
    for atom in product.GetAtoms():
        if atom.GetDegree() or atom.GetIdx() in owner:
            continue
        twin = next((k for k in sorted(unused) if molecules[k].GetNumAtoms() == 1
                     and _alike(atom, molecules[k].GetAtomWithIdx(0))), None)
        if twin is not None:
            owner[atom.GetIdx()] = (twin, 0)
            unused.discard(twin)
            continue
        for reactants in (laid, unused):
            sources = [(k, a.GetIdx()) for k in sorted(reactants) for a in molecules[k].GetAtoms()
                       if (a.GetAtomicNum(), a.GetIsotope()) == (atom.GetAtomicNum(), atom.GetIsotope())
                       and (k, a.GetIdx()) not in reached]
            if sources:
                if len(sources) == 1:
                    owner[atom.GetIdx()] = sources[0]
                    reached.add(sources[0])
                break


def _alike(atom: Chem.Atom, other: Chem.Atom) -> bool:
    return (atom.GetAtomicNum(), atom.GetIsotope()) == (other.GetAtomicNum(), other.GetIsotope()) and not _atom_changed(
        atom, other)


def _atom_changed(atom: Chem.Atom, before: Chem.Atom) -> bool:
    return atom.GetTotalNumHs() != before.GetTotalNumHs() or atom.GetFormalCharge() != before.GetFormalCharge()


CIS = (Chem.BondStereo.STEREOZ, Chem.BondStereo.STEREOCIS)
TRANS = (Chem.BondStereo.STEREOE, Chem.BondStereo.STEREOTRANS)


def _cis(bond: Chem.Bond, end: int, first: int, second: int) -> bool | None:
    """Whether `first`, a neighbour of the double bond's atom `end`, and `second`, a neighbour of its other atom,
    stand on one side of it (None where the bond has no stated geometry). RDKit states E or Z of its stereo atoms,
    one neighbour of each end (the CIP-first); the other neighbour of an end stands on the other side."""
    if bond.GetStereo() not in CIS + TRANS:
        return None
    at_end, at_other = bond.GetStereoAtoms()
    if bond.GetBeginAtomIdx() != end:
        at_end, at_other = at_other, at_end
    return (bond.GetStereo() in CIS) == ((first == at_end) == (second == at_other))


def _geometry_turned(bond: Chem.Bond, owner: dict[int, tuple[int, int]], molecules: tuple[Chem.Mol, ...]) -> bool:
    """A product double bond of stated geometry (E or Z) whose reactant bond, also stated, has the other: two
    neighbours that the product and the reactant share stand on one side of it in one and apart in the other. An
    E/Z isomerization had no centre, its bonds' orders all kept."""
    end, other = bond.GetBeginAtom(), bond.GetEndAtom()
    if bond.GetStereo() not in CIS + TRANS or end.GetIdx() not in owner or other.GetIdx() not in owner:
        return False
    (k, r_end), (k_other, r_other) = owner[end.GetIdx()], owner[other.GetIdx()]
    before = molecules[k].GetBondBetweenAtoms(r_end, r_other) if k == k_other else None
    if before is None:
        return False

    def shared_neighbour(atom: Chem.Atom, partner: int, r_atom: int) -> tuple[int, int] | None:
        """A neighbour of `atom` beside the bond, traced to a neighbour of its reactant atom: (its index, the
        reactant atom's)."""
        for n in atom.GetNeighbors():
            k_n, r_n = owner.get(n.GetIdx(), (-1, -1))
            if n.GetIdx() != partner and k_n == k and molecules[k].GetBondBetweenAtoms(r_atom, r_n) is not None:
                return n.GetIdx(), r_n
        return None

    first, second = shared_neighbour(end, other.GetIdx(), r_end), shared_neighbour(other, end.GetIdx(), r_other)
    if first is None or second is None:
        return False
    after = _cis(bond, end.GetIdx(), first[0], second[0])
    was = _cis(before, r_end, first[1], second[1])
    return after is not None and was is not None and after != was


TETRAHEDRAL = (Chem.ChiralType.CHI_TETRAHEDRAL_CW, Chem.ChiralType.CHI_TETRAHEDRAL_CCW)


def _turned(atom: Chem.Atom, before: Chem.Atom, pairs: dict[int, int]) -> bool:
    """Whether a product atom and its reactant atom, both stereocentres (@ or @@), have the other configuration, the
    product atom's neighbours paired with the reactant atom's by `pairs` (product atom -> reactant atom); False where
    either is unmarked, or a neighbour is unpaired or paired outside the reactant atom's. RDKit's mark is the turn of
    an atom's neighbours in the order of its bonds, so the two marks are compared with the neighbours in one order (an
    implicit hydrogen stands in the same place in both)."""
    if atom.GetChiralTag() not in TETRAHEDRAL or before.GetChiralTag() not in TETRAHEDRAL \
            or atom.GetDegree() != before.GetDegree():
        return False
    order = [n.GetIdx() for n in before.GetNeighbors()]
    paired = [pairs.get(n.GetIdx(), -1) for n in atom.GetNeighbors()]
    if any(r not in order for r in paired):
        return False
    turn = [order.index(r) for r in paired]
    odd = sum(turn[i] > turn[j] for i in range(len(turn)) for j in range(i + 1, len(turn))) % 2 == 1
    return (atom.GetChiralTag() == before.GetChiralTag()) == odd


def _configuration_turned(atom: Chem.Atom, owner: dict[int, tuple[int, int]], molecules: tuple[Chem.Mol, ...]
                          ) -> bool:
    """A product stereocentre whose reactant atom has the other configuration, its neighbours traced to the reactant
    atom's (_turned): an epimerization, or an inversion at a carbon traced so (a Mitsunobu reaction's alcohol carbon
    before its oxygen is retraced to the acid's: _keep_the_nucleophiles_heteroatom). An epimer had no centre, its
    bonds all kept."""
    if atom.GetChiralTag() not in TETRAHEDRAL or atom.GetIdx() not in owner:
        return False
    k, r = owner[atom.GetIdx()]
    return _turned(atom, molecules[k].GetAtomWithIdx(r), {p: q for p, (j, q) in owner.items() if j == k})


def _bond_changed(bond: Chem.Bond, owners: list[tuple[int, int] | None], molecules: tuple[Chem.Mol, ...]) -> bool:
    """A product bond that no reactant had: between two reactants, to an untraced atom, or of another order."""
    first, second = owners
    if first is None or second is None or first[0] != second[0]:
        return True
    before = molecules[first[0]].GetBondBetweenAtoms(first[1], second[1])
    return before is None or before.GetBondType() != bond.GetBondType()
