"""How close is the estimated reaction centre (molspec_core/centre.py) to the one an atom map gives?

python3 tools/centre_check.py [--data ../shared/data] [--limit N]

USPTO-50K's test reactions (GLN split, 5,007) come atom-mapped. From the map, a product atom is in the centre where
its hydrogen count or charge differs from its mapped reactant atom's, or one of its bonds was made, broken or
changed order (a bond between two mapped atoms that the reactants lack or have of another order, a bond the
reactants had that the product lacks), or it is a stereocentre whose configuration turned, its neighbours the same
(centre._turned: the estimate marks one too). The estimate sees the same reaction without the map (the maps are in
the SMILES it reads, but it compares elements only, so they do not guide it). Prints one JSON object: how often the
two centres are the same atoms, how often the estimate holds the whole mapped centre, the mean Jaccard overlap, how
often the reactant atoms it says leave are the ones the map leaves out of the product, and how often no centre was
estimated; and how many maps join an acid and an alcohol by the acid's oxygen (map_keeps_acid_oxygen), which the
estimate does not: the alcohol's oxygen joins the acyl carbon and the acid's OH leaves as water, as oxygen-18
showed (centre._keep_the_nucleophiles_heteroatom), so those reactions count as different; and, the mirror case, how
many maps hydrolyse an ester to its acid keeping the alkoxy oxygen as the acid's (map_keeps_alkoxy_oxygen), where
the estimate breaks the acyl C-O bond and the alkoxy leaves whole, as oxygen-18 showed of a saponification (a
tert-butyl, benzyl or allyl ester, cleaved at its alkyl C-O bond, is not counted). differ_where_map_keeps_oxygen:
how many of the reactions whose centres differ are one of these two.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from rdkit import Chem

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import InputFileError, check_inputs  # noqa: E402  (tools/_toolbox.py)

from molspec_core.argtypes import at_least  # noqa: E402
from molspec_core.bench import percentile  # noqa: E402
from molspec_core.centre import _gives_up_oxygen, _turned, reaction_centre  # noqa: E402
from molspec_core.data import DEFAULT_DATA, gln_reactions  # noqa: E402


def mapped_centre(reactants: str, product: str) -> set[int] | None:
    """Product atom indices in the centre the atom map gives, or None where the map does not cover the product."""
    before, after = Chem.MolFromSmiles(reactants), Chem.MolFromSmiles(product)
    if before is None or after is None:
        return None
    atom_of = {a.GetAtomMapNum(): a for a in before.GetAtoms() if a.GetAtomMapNum()}
    index_of = {a.GetAtomMapNum(): a.GetIdx() for a in after.GetAtoms()}
    if 0 in index_of or not set(index_of) <= set(atom_of):
        return None
    centre = {a.GetIdx() for a in after.GetAtoms() if a.GetTotalNumHs() != atom_of[a.GetAtomMapNum()].GetTotalNumHs()
              or a.GetFormalCharge() != atom_of[a.GetAtomMapNum()].GetFormalCharge()}
    for bond in after.GetBonds():
        a, b = bond.GetBeginAtom(), bond.GetEndAtom()
        was = before.GetBondBetweenAtoms(atom_of[a.GetAtomMapNum()].GetIdx(), atom_of[b.GetAtomMapNum()].GetIdx())
        if was is None or was.GetBondType() != bond.GetBondType():
            centre.update((a.GetIdx(), b.GetIdx()))
    for bond in before.GetBonds():  # broken between two atoms that both reach the product
        ends = (bond.GetBeginAtom().GetAtomMapNum(), bond.GetEndAtom().GetAtomMapNum())
        if all(end in index_of for end in ends) and after.GetBondBetweenAtoms(*(index_of[e] for e in ends)) is None:
            centre.update(index_of[e] for e in ends)
    pairs = {a.GetIdx(): atom_of[a.GetAtomMapNum()].GetIdx() for a in after.GetAtoms()}
    centre.update(a.GetIdx() for a in after.GetAtoms()
                  if _turned(a, atom_of[a.GetAtomMapNum()], pairs) and not _paired_by_choice(a, after)
                  and not _paired_by_choice(atom_of[a.GetAtomMapNum()], before))
    return centre


def _paired_by_choice(atom: Chem.Atom, molecules: Chem.Mol) -> bool:
    """Whether a map may pair an atom, or two of its neighbours, either way round, its bonds and elements alike
    (tied in the molecules' ranks, stereo aside): a meso ring's two stereocentres (cis-2,6-dimethylmorpholine's, a
    cis-2,5-dimethylpiperazine's before one nitrogen is alkylated), a 1,4-cyclohexane's two arms. A map that pairs
    them mirrored turns the atom's configuration though it stays."""
    plain = Chem.Mol(molecules)
    for each in plain.GetAtoms():
        each.SetAtomMapNum(0)
    rank = list(Chem.CanonicalRankAtoms(plain, breakTies=False, includeChirality=False))
    around = [rank[n.GetIdx()] for n in atom.GetNeighbors()]
    return rank.count(rank[atom.GetIdx()]) > 1 or len(set(around)) < len(around)


def mapped_leaving(reactants: str, product: str) -> set[int]:
    """Reactant atom indices whose map number the product lacks (or that carry none): the atoms that leave."""
    before, after = Chem.MolFromSmiles(reactants), Chem.MolFromSmiles(product)
    kept = {a.GetAtomMapNum() for a in after.GetAtoms()}
    return {a.GetIdx() for a in before.GetAtoms() if not a.GetAtomMapNum() or a.GetAtomMapNum() not in kept}


def _acyl(atom: Chem.Atom) -> bool:
    """Whether a reactant's atom is acyl-like: it has a double bond to N, O or S (a carbonyl, imine, sulfonyl)."""
    return any(b.GetBondType() == Chem.BondType.DOUBLE and b.GetOtherAtom(atom).GetAtomicNum() in (7, 8, 16)
               for b in atom.GetBonds())


def map_keeps_acid_oxygen(reactants: str, product: str) -> bool:
    """Whether the map makes an ester from an acid and an alcohol (or phenol) with the acid's oxygen: a product
    oxygen between an acyl carbon and another carbon, mapped to the acid's oxygen, whose other carbon had in the
    reactants an oxygen (not an acyl or sulfonyl one: a mesylate's alkyl is taken by the acid's oxygen) that the
    product lacks."""
    before, after = Chem.MolFromSmiles(reactants), Chem.MolFromSmiles(product)
    atom_of = {a.GetAtomMapNum(): a for a in before.GetAtoms() if a.GetAtomMapNum()}
    kept = {a.GetAtomMapNum() for a in after.GetAtoms()}

    for oxygen in after.GetAtoms():
        was = atom_of.get(oxygen.GetAtomMapNum())
        if oxygen.GetAtomicNum() != 8 or oxygen.GetDegree() != 2 or was is None:
            continue
        ends = [atom_of.get(n.GetAtomMapNum()) for n in oxygen.GetNeighbors()]
        if None in ends:
            continue
        for carbon, other in (ends, ends[::-1]):
            if (_acyl(carbon) and before.GetBondBetweenAtoms(carbon.GetIdx(), was.GetIdx())
                    and not before.GetBondBetweenAtoms(other.GetIdx(), was.GetIdx())
                    and any(n.GetAtomicNum() == 8 and n.GetAtomMapNum() not in kept
                            and not any(_acyl(m) for m in n.GetNeighbors()) for n in other.GetNeighbors())):
                return True
    return False


def map_keeps_alkoxy_oxygen(reactants: str, product: str) -> bool:
    """Whether the map makes an acid (or its salt) from an ester with the ester's alkoxy oxygen: a product oxygen
    bonded to one atom, an acyl carbon that held it in the reactants, mapped to an oxygen whose other carbon the
    product lacks and which does not give its oxygen up itself (centre._gives_up_oxygen: a tert-butyl, benzylic or
    allylic carbon, whose ester is cleaved at the alkyl C-O bond and whose map rightly keeps the oxygen)."""
    before, after = Chem.MolFromSmiles(reactants), Chem.MolFromSmiles(product)
    atom_of = {a.GetAtomMapNum(): a for a in before.GetAtoms() if a.GetAtomMapNum()}
    kept = {a.GetAtomMapNum() for a in after.GetAtoms()}
    for oxygen in after.GetAtoms():
        was = atom_of.get(oxygen.GetAtomMapNum())
        if oxygen.GetAtomicNum() != 8 or oxygen.GetDegree() != 1 or was is None:
            continue
        carbon = atom_of.get(oxygen.GetNeighbors()[0].GetAtomMapNum())
        bond = None if carbon is None else before.GetBondBetweenAtoms(carbon.GetIdx(), was.GetIdx())
        if bond is None or bond.GetBondType() != Chem.BondType.SINGLE or not _acyl(carbon):
            continue
        if any(n.GetAtomicNum() == 6 and n.GetIdx() != carbon.GetIdx()
               and (not n.GetAtomMapNum() or n.GetAtomMapNum() not in kept)
               and not _gives_up_oxygen(n) for n in was.GetNeighbors()):
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="data folder holding uspto50k/gln_split/raw_test.csv (default ../shared/data)")
    parser.add_argument("--limit", type=at_least(1), default=None,
                        help="the first this many test reactions, 1 or more (default: all)")
    args = parser.parse_args()
    test = args.data / "uspto50k" / "gln_split" / "raw_test.csv"
    try:
        check_inputs([("--data", test)])
        # a file without the column, or a row that is no reaction: a KeyError or unpacking traceback, naming nothing
        rows = list(itertools.islice(gln_reactions(test), args.limit))
    except (InputFileError, ValueError) as exc:
        parser.error(str(exc))
    counts = dict(reactions=0, no_map=0, no_estimate=0, same=0, holds_mapped=0, same_leaving=0,
                  map_keeps_acid_oxygen=0, map_keeps_alkoxy_oxygen=0, differ_where_map_keeps_oxygen=0)
    overlap, seconds = 0.0, []
    for reactants, product in rows:
        truth = mapped_centre(reactants, product)
        if truth is None:
            counts["no_map"] += 1
            continue
        counts["reactions"] += 1
        keeps_acid = map_keeps_acid_oxygen(reactants, product)
        keeps_alkoxy = map_keeps_alkoxy_oxygen(reactants, product)
        counts["map_keeps_acid_oxygen"] += keeps_acid
        counts["map_keeps_alkoxy_oxygen"] += keeps_alkoxy
        started = time.perf_counter()
        estimate = reaction_centre(reactants, product)
        seconds.append(time.perf_counter() - started)
        if estimate is None:
            counts["no_estimate"] += 1
            continue
        found = set(estimate.product_atoms)
        counts["same"] += found == truth
        counts["differ_where_map_keeps_oxygen"] += found != truth and (keeps_acid or keeps_alkoxy)
        counts["holds_mapped"] += truth <= found
        overlap += len(found & truth) / len(found | truth) if found | truth else 1.0
        counts["same_leaving"] += set(estimate.leaving_atoms) == mapped_leaving(reactants, product)
    seconds.sort()
    n = counts["reactions"]
    if not n:
        raise SystemExit(f"centre_check.py: none of the {len(rows)} reactions read has an atom map covering its "
                         f"product: no centre to compare ({counts['no_map']} without one)")
    print(json.dumps({**counts, "same_share": round(counts["same"] / n, 4),
                      "holds_mapped_share": round(counts["holds_mapped"] / n, 4),
                      "mean_jaccard": round(overlap / n, 4),
                      "same_leaving_share": round(counts["same_leaving"] / n, 4),
                      "ms_median": round(1000 * seconds[len(seconds) // 2], 2),
                      "ms_p99": round(1000 * percentile(seconds, 0.99), 1),
                      "ms_max": round(1000 * seconds[-1], 1)}, indent=2))


if __name__ == "__main__":
    main()
