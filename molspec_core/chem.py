"""RDKit helpers: canonical SMILES, validity, SD files, and when RDKit's own messages are shown."""
from __future__ import annotations

import functools
import io
import random
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import IO, Any, TypeVar

from rdkit import Chem, RDLogger, rdBase
from rdkit.Chem import rdinchi
from rdkit.Chem.MolStandardize import rdMolStandardize

from .io import visible_controls


# RDKit prints a line on stderr for each SMILES it cannot read; MolSpec says what is wrong itself. Its programs (the
# molspec command, the app) turn those lines off for their whole process (silence_rdkit); the engine, which others'
# programs import, turns them off only while one of its calls runs (quiet_rdkit), and leaves the program's own on.
def silence_rdkit() -> None:
    """Turn RDKit's messages off for the rest of this process: for programs, never for a library to call."""
    RDLogger.DisableLog("rdApp.*")


class _QuietRDKit:
    """RDKit's messages held back while any thread is inside, by one rdBase.BlockLogs for them all. One BlockLogs
    each would not do: each restores what it found on, so where two overlap and the first ends first, the messages
    come back while the second still runs. Re-entrant (predict inside plan). RDKit's logging is the process's, so a
    caller's other threads are quiet too while one is inside."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0  # callers inside now
        self._block: rdBase.BlockLogs | None = None  # held while _inside > 0; let go, it turns on what it turned off

    def __enter__(self) -> None:
        with self._lock:
            if self._inside == 0:
                self._block = rdBase.BlockLogs()
            self._inside += 1

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                self._block = None


_QUIET = _QuietRDKit()


def quiet_rdkit() -> _QuietRDKit:
    """`with quiet_rdkit():` RDKit's messages held back inside, as they were after (_QuietRDKit)."""
    return _QUIET


Call = TypeVar("Call", bound=Callable[..., Any])


def rdkit_quietly(function: Call) -> Call:
    """`function` with RDKit's messages held back for the whole call (once a call: not once a molecule). For calls
    that return their answer, not a generator, which would run after the quiet had ended."""
    @functools.wraps(function)
    def quietly(*args: Any, **kwargs: Any) -> Any:
        with quiet_rdkit():
            return function(*args, **kwargs)
    return quietly  # type: ignore[return-value]


class ChemError(ValueError):
    """A SMILES that RDKit cannot read."""


# The longest SMILES read here. RDKit writes a long chain's SMILES by recursion: a 20,000-atom chain (a line of a
# stock file) crashed the process with a segfault and a 10,000-atom one took 4 s (5,000: 0.7 s). Queries stop at
# MAX_QUERY_CHARS; answers at the decoder's length budget, far below this.
MAX_SMILES_CHARS = 5000
# The longest query read (Predictor.prepare; a CXSMILES's |...| part and an InChI's AuxInfo are not counted): longer
# than any USPTO query, it bounds tokenizer and RDKit time. Each side of a recorded reaction is held to it too
# (known.recorded_reaction): the longest in USPTO-MIT's and USPTO-50K's atom-mapped records holds 1,197 characters.
MAX_QUERY_CHARS = 2000


def mol_from_smiles(smiles: str):
    if len(smiles) > MAX_SMILES_CHARS:
        raise ChemError(f"a SMILES of {len(smiles):,} characters is longer than the {MAX_SMILES_CHARS:,} read here")
    mol = Chem.MolFromSmiles(smiles) if smiles.isascii() else None  # RDKit skips some other characters unsaid
    if mol is None:
        raise _unparsed(smiles)
    return mol


def _unparsed(smiles: str) -> ChemError:
    """The refusal of a SMILES that RDKit cannot parse, with what to mend (why_unreadable) where that is known."""
    reason = why_unreadable(smiles)
    return ChemError(f"RDKit cannot parse {smiles[:80]!r} as a molecule" + (f": {reason}" if reason else ""))


# Outside brackets, a ring bond's label: one digit, or '%' and two digits, or '%(' digits ')' (RDKit reads all three).
RING_LABEL = re.compile(r"%\(\d+\)|%\d\d|\d")
# Outside brackets, an atom: the organic subset (two-letter halogens first), aromatic or not, or the wildcard.
ORGANIC_ATOM = re.compile(r"Cl|Br|[BCNOPSFIbcnops*]")
BOND_SYMBOLS = "-=#$:/\\~"
# An R-group in brackets, as drawing programs write one: [R], [R1], [R#], [R'].
R_GROUP = re.compile(r"\[R[0-9#']*\]")
# Deuterium and tritium by the symbols chemists write (D, T: '[D]C([D])([D])O' was told only that [D] is no atom
# RDKit reads), and how a SMILES writes them: hydrogen with its mass.
HYDROGEN_ISOTOPES = {"D": ("deuterium", "[2H]"), "T": ("tritium", "[3H]")}
HYDROGEN_ISOTOPE_ATOM = re.compile(r"\[([DT])\]")
# A chemist's shorthand for a group or a common solvent or base, which no SMILES holds outside brackets: its name and
# its atoms in SMILES.
ABBREVIATIONS = {
    "THF": ("tetrahydrofuran", "C1CCOC1"), "DMF": ("dimethylformamide", "CN(C)C=O"),
    "DMSO": ("dimethyl sulfoxide", "CS(C)=O"), "DCM": ("dichloromethane", "ClCCl"),
    "TFA": ("trifluoroacetic acid", "O=C(O)C(F)(F)F"), "TEA": ("triethylamine", "CCN(CC)CC"),
    "DIPEA": ("N,N-diisopropylethylamine", "CCN(C(C)C)C(C)C"), "DMAP": ("4-dimethylaminopyridine", "CN(C)c1ccncc1"),
    "Me": ("methyl", "C"), "Et": ("ethyl", "CC"), "iPr": ("isopropyl", "C(C)C"), "Pr": ("propyl", "CCC"),
    "tBu": ("tert-butyl", "C(C)(C)C"), "Bu": ("butyl", "CCCC"), "Ph": ("phenyl", "c1ccccc1"),
    "Ac": ("acetyl", "C(C)=O"), "Ts": ("tosyl", "S(=O)(=O)c1ccc(C)cc1"), "Ms": ("mesyl", "S(C)(=O)=O"),
    "Tf": ("triflyl", "S(=O)(=O)C(F)(F)F"), "TMS": ("trimethylsilyl", "[Si](C)(C)C"),
}
# What a chemist may put between the molecules of one query, for a SMILES's '.': CCO,CCN or CC(=O)Cl+NCc1ccccc1 were
# told only that the ',' is no part of a SMILES, or that the '+' is a charge outside brackets.
MOLECULE_SEPARATORS = ",;+"
# Other notations pasted for a SMILES: an InChIKey (14, 10 and 1 capitals), and an InChI that lost its "InChI=".
INCHI_KEY = re.compile(r"(InChIKey=)?[A-Z]{14}-[A-Z]{10}-[A-Z]")
BARE_INCHI = re.compile(r"1S?/[0-9]*[A-Z][A-Za-z0-9.]*(/|$)")


# A markup tag's start, as text copied from a web page or a paper's HTML holds one (<b>, </sub>, <!-- , <?xml): no
# SMILES holds '<' but in a dative bond ('<-', RDKit's), which no letter, '/', '!' or '?' follows.
MARKUP_TAG = re.compile(r"<[A-Za-z/!?]")


# A reaction InChI (RInChI) or one of its keys, as ChemDraw, Marvin and reaction databases export a reaction: its
# '<>' between reactants and products read as a reaction SMILES's '>', and was told of the form 'reactants>reagents>'.
RINCHI = re.compile(r"(?:Long-|Short-|Web-)?RInChI(?:Key)?=", re.IGNORECASE)


def rinchi_refusal(text: str) -> str:
    """The refusal of a reaction InChI or a key of one (RINCHI), which are not read here; "" for any other text."""
    if not RINCHI.match(text):
        return ""
    return ("this is a reaction InChI (RInChI) or its key, which is not read here: paste the reaction SMILES (forward "
            "prediction reads 'reactants>reagents>'), or each molecule's SMILES or InChI")


def markup_refusal(text: str) -> str:
    """The refusal of a text holding markup (MARKUP_TAG), which names the first tag; "" for any other text."""
    tag = MARKUP_TAG.search(text)
    if tag is None:
        return ""
    shown = text[tag.start():text.find(">", tag.start()) + 1 or tag.end()][:40]
    return (f"this text holds markup ({shown!r} at position {tag.start() + 1}), which no SMILES holds: it reads as "
            "HTML or XML copied from a web page or a document; paste the SMILES alone")


# A bracket atom that gives its element by atomic number ([#6], [#8-], [13#6]), as SMARTS patterns write atoms. RDKit
# reads it in a SMILES too, as a bracket atom with the hydrogens written (none): '[#6]-[#8]', pasted as a pattern
# for any C-O, was read as the diradical [C][O] and decoded to nonsense.
ATOMIC_NUMBER_ATOM = re.compile(r"\[\d*#(\d+)[^\]]*\]")
# SMARTS's any bond, which RDKit reads in a SMILES as a bond of no type (a query bond): 'c1ccccc1~O' was told only
# that '~' is not in the model's vocabulary.
ANY_BOND = re.compile(r"~")


def smarts_refusal(smiles: str) -> str:
    """The refusal of a SMILES holding what only a SMARTS pattern writes: a bracket atom by atomic number
    (ATOMIC_NUMBER_ATOM) or an any bond (ANY_BOND); "" for any other."""
    atom = ATOMIC_NUMBER_ATOM.search(smiles)
    if atom is not None:
        number = int(atom.group(1))
        symbol = Chem.GetPeriodicTable().GetElementSymbol(number) if 0 < number <= 118 else ""
        named = f" ({symbol} is #{number})" if symbol else ""
        return (f"the bracket atom {atom.group()} at position {atom.start() + 1} gives its element by atomic number, "
                f"as a SMARTS pattern does{named}: read as a SMILES it is an atom with no hydrogens (a radical), not "
                "any atom of that element; paste the molecule's SMILES, each element by its symbol")
    bond = ANY_BOND.search(smiles)
    if bond is not None:
        return (f"the '~' at position {bond.start() + 1} is a SMARTS pattern's any bond, which no molecule has: paste "
                "the molecule's SMILES, each bond single, double (=), triple (#) or aromatic")
    return ""


def why_unreadable(smiles: str) -> str:
    """What to mend in a SMILES that RDKit refuses, in a chemist's words: the first character that no SMILES holds
    there (a letter that is no atom outside brackets, a charge outside brackets, a bracket atom RDKit cannot read, a
    bond or '.' with nothing to join, an empty branch, a ring bond closed on its own atom or on a pair bonded already),
    or the first parenthesis, bracket or ring bond left open, or closed where none is open (positions count characters
    from 1), else RDKit's own account of a molecule it reads but cannot accept (an atom's valence, an aromatic ring it
    cannot kekulize); "" when it is none of these. A character outside ASCII is named first, wherever it stands: RDKit
    skips some of them without a word (a Cyrillic 'ССO' read as water, 'Cl−' with a minus sign as HCl)."""
    foreign = next((i for i, char in enumerate(smiles) if not char.isascii()), None)
    if foreign is not None:
        return f"the {smiles[foreign]!r} at position {foreign + 1} {_not_smiles(smiles[foreign])}"
    if other := _other_notation(smiles):
        return other
    opened: list[int] = []  # positions of the unclosed "("
    rings: dict[str, tuple[int, int | None]] = {}  # each open ring bond label: its position, the atom it opened on
    # The atoms as RDKit numbers them: how many so far, the one a following atom bonds to (none after a '.'), those
    # each open '(' branches from, and the pairs bonded (a ring bond may not bond an atom to itself, nor a pair twice)
    atoms, current = 0, None
    roots: list[int | None] = []
    bonded: set[frozenset[int]] = set()
    last, last_at = "start", 0  # what the previous token was (start, atom, bond, dot, open, close, ring), its position
    i = 0
    while i < len(smiles):
        char, at = smiles[i], i + 1
        kind = "atom"
        if char == "[":
            end = smiles.find("]", i)
            if end < 0:
                return f"the '[' at position {at} is never closed"
            if R_GROUP.fullmatch(smiles, i, end + 1):
                return (f"the bracket atom {smiles[i:end + 1]} at position {at} is an R-group, a placeholder that "
                        "stands for no one molecule: draw the group in its place")
            if isotope := HYDROGEN_ISOTOPE_ATOM.fullmatch(smiles, i, end + 1):
                name, written = HYDROGEN_ISOTOPES[isotope.group(1)]
                return (f"the bracket atom {isotope.group()} at position {at} is {name}, which a SMILES writes as "
                        f"hydrogen with its mass: {written}")
            if Chem.MolFromSmiles(smiles[i:end + 1], sanitize=False) is None:
                return (f"the bracket atom {smiles[i:end + 1]} at position {at} is not one RDKit reads: an element "
                        "symbol, then its hydrogens and charge, as [Na+], [NH4+] or [13CH3]")
            i = end + 1
        elif char == "]":
            return f"the ']' at position {at} closes no '['"
        elif (atom := ORGANIC_ATOM.match(smiles, i)) is not None:
            i = atom.end()
        elif char in BOND_SYMBOLS or smiles.startswith("<-", i):
            if last in ("start", "dot"):
                return f"the bond '{char}' at position {at} has no atom before it"
            if last == "bond" and not (char == smiles[i - 1] == "\\"):
                return f"the bond '{char}' at position {at} follows another bond"
            kind, i = "bond", i + (2 if smiles.startswith(("->", "<-"), i) else 1)  # a dative bond is two characters
        elif char in ".()":
            if last == "bond":
                return _dangling_bond(smiles, last_at)
            if char == "." and last in ("start", "dot", "open"):
                return f"the '.' at position {at} has no molecule before it"
            if char == ")" and last == "dot":
                return f"the '.' at position {last_at} has no molecule after it"
            if char == "(" and last in ("start", "dot"):
                return f"the '(' at position {at} opens a branch with no atom before it"
            if char == "(" and last == "open":
                return f"the '(' at position {at} follows another '(': a branch begins with an atom or a bond"
            if char == ")" and last == "open":
                return f"the branch '()' at position {at - 1} is empty"
            if char == "(":
                opened.append(at)
                roots.append(current)
            elif char == ")":
                if not opened:
                    return f"the ')' at position {at} closes no '('"
                opened.pop()
                current = roots.pop()
            else:
                current = None  # the next atom begins a molecule
            kind, i = {".": "dot", "(": "open", ")": "close"}[char], i + 1
        elif (label := RING_LABEL.match(smiles, i)) is not None:
            name = label[0]
            if last in ("start", "dot", "open"):
                return f"ring bond {name} at position {at} has no atom before it"
            opener = rings.pop(name, None)
            if opener is None:
                rings[name] = (at, current)
            elif opener[1] == current:
                return (f"ring bond {name} at position {at} closes on the atom it was opened on at position "
                        f"{opener[0]}: a ring bond joins two atoms")
            elif frozenset((opener[1], current)) in bonded:
                return (f"ring bond {name} at position {at} joins two atoms that are bonded already (ring bond {name} "
                        f"opened at position {opener[0]})")
            else:
                bonded.add(frozenset((opener[1], current)))
            kind, i = "ring", label.end()
        elif char.isalpha() and _in_word(smiles, i):
            return ""  # a name ("aspirin", "Cyclohexane"): the caller says that names are not read
        elif char in MOLECULE_SEPARATORS and last in ("atom", "close", "ring") and (
                smiles.startswith("[", i + 1) or ORGANIC_ATOM.match(smiles, i + 1)):
            what = "a charge outside brackets or a plus between molecules" if char == "+" else "not part of a SMILES"
            charge = "a charge goes in its atom's brackets, as [NH4+], and " if char == "+" else ""
            return (f"the {char!r} at position {at} is {what}: {charge}the molecules of one query are joined with '.', "
                    "as CC(=O)Cl.NCc1ccccc1")
        elif (short := _abbreviation_at(smiles, i)) is not None:
            start, name = short
            meaning, atoms_of = ABBREVIATIONS[name]
            return (f"the '{name}' at position {start + 1} is an abbreviation ({meaning}), which a SMILES does not "
                    f"hold: write its atoms, as {atoms_of}")
        elif (element := _element_at(smiles, i)) is not None:
            start, symbol = element
            return (f"the '{symbol}' at position {start + 1} is {ELEMENT_NAMES[symbol]}, which a SMILES writes in "
                    f"brackets: [{symbol}] (outside them only B, C, N, O, P, S, F, Cl, Br and I)")
        else:
            return f"the {char!r} at position {at} {_not_smiles(char)}"
        if kind == "atom":
            if current is not None:
                bonded.add(frozenset((current, atoms)))
            current, atoms = atoms, atoms + 1
        last, last_at = kind, at
    if last == "bond":
        return _dangling_bond(smiles, last_at)
    if last == "dot":
        return f"the '.' at position {last_at} has no molecule after it"
    if opened:
        return f"the '(' at position {opened[0]} is never closed"
    if rings:
        name, (at, _) = min(rings.items(), key=lambda item: item[1][0])
        return f"ring bond {name} opened at position {at} is never closed"
    mol = Chem.MolFromSmiles(smiles, sanitize=False)
    problems = Chem.DetectChemistryProblems(mol) if mol is not None else ()
    return _problem_in_words(problems[0], smiles, mol) if problems else ""


def _problem_in_words(problem, smiles: str, mol) -> str:
    """RDKit's account of a molecule it parses but cannot accept (DetectChemistryProblems), its atoms named as the
    SMILES writes them and where: RDKit's "atom # 1" counts atoms from 0, and a chemist counting letters in
    [13CH3]C(C)... did not find it."""
    said = " ".join(problem.Message().split())
    spans = _atom_spans(smiles)
    if len(spans) != mol.GetNumAtoms():  # not counted as RDKit counts: its words alone
        return f"{said} (RDKit counts atoms from 0)"
    if problem.GetType() == "KekulizeException":
        written = [smiles[start:end] for start, end in (spans[i] for i in problem.GetAtomIndices())]
        positions = ", ".join(str(spans[i][0] + 1) for i in problem.GetAtomIndices())
        hint = (": an aromatic nitrogen that bears a hydrogen is written [nH], as in pyrrole, c1cc[nH]c1"
                if "n" in written else "")
        return (f"the aromatic atoms at positions {positions} (written lowercase) cannot take alternating single and "
                f"double bonds{hint} (RDKit: {said})")
    start, end = spans[problem.GetAtomIdx()]
    atom = f"the {smiles[start:end]} at position {start + 1}"
    if problem.GetType() == "AtomValenceException":
        crowded = mol.GetAtomWithIdx(problem.GetAtomIdx())
        why = _dative_acceptor(crowded) or _uncharged_onium(crowded) or _ions_bonded(crowded, smiles, spans)
        return f"{atom} has more bonds than it can{why} (RDKit: {said}, counting atoms from 0)"
    if problem.GetType() == "AtomKekulizeException":
        return f"{atom} is written aromatic (lowercase) but is in no ring (RDKit: {said}, counting atoms from 0)"
    return f"{atom}: {said} (RDKit counts atoms from 0)"


# Atoms that one bond more than their valence makes ions, written without the charge: an ammonium's N, an oxonium's
# O, a phosphonium's P, a borate's B. Each: its name, its bonds so, its charge.
ONIUMS = {"N": ("a nitrogen", 4, "+"), "O": ("an oxygen", 3, "+"), "P": ("a phosphorus", 4, "+"),
          "B": ("a boron", 4, "-")}


def _uncharged_onium(atom) -> str:
    """For an atom of an onium or a borate written uncharged (CN(C)(C)C), a clause naming its charged writing, else
    "". The atom is unsanitized: its bonds are counted as written, with its bracket hydrogens."""
    if atom.GetSymbol() not in ONIUMS or atom.GetFormalCharge() or atom.GetIsAromatic():
        return ""
    name, bonds, sign = ONIUMS[atom.GetSymbol()]
    hydrogens = atom.GetNumExplicitHs()
    if sum(bond.GetBondTypeAsDouble() for bond in atom.GetBonds()) + hydrogens != bonds:
        return ""
    written = f"[{atom.GetSymbol()}{'H' if hydrogens else ''}{hydrogens if hydrogens > 1 else ''}{sign}]"
    return f": {name} with {bonds} bonds is charged, as {written}"


def _dative_acceptor(atom) -> str:
    """For an atom with too many bonds at the head of a dative bond (C1CCOC1->[BH3], n1ccccc1->[BH3]: a borane complex),
    a clause saying that RDKit counts that bond among its bonds, with the complex's molecules written apart where
    RDKit reads that (as USPTO writes borane-THF: B.C1CCOC1), else "". Without it the chemist was told that a boron
    of 4 bonds is charged, [BH3-]. The atom is unsanitized."""
    dative = [bond for bond in atom.GetBonds()
              if bond.GetBondType() == Chem.BondType.DATIVE and bond.GetEndAtomIdx() == atom.GetIdx()]
    if not dative:
        return ""
    apart = Chem.RWMol(atom.GetOwningMol())
    for bond in dative:
        apart.RemoveBond(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx())
    written = Chem.MolFromSmiles(Chem.MolToSmiles(apart))
    mended = f", as {Chem.MolToSmiles(written)}" if written is not None else ""
    return (": RDKit counts the dative bond (->) to it among its bonds, and a complex's molecules are written apart "
            f"with '.'{mended}")


def _ions_bonded(atom, smiles: str, spans: list[tuple[int, int]]) -> str:
    """For a charged atom bonded to one of the opposite charge ([Na+][Cl-], [NH4+][Cl-]: a salt's ions written side by
    side), a clause saying that the two are bonded, with the SMILES written with the two apart where RDKit reads that,
    else "". The atom is unsanitized, numbered as `spans` are."""
    charge = atom.GetFormalCharge()
    other = next((n for n in atom.GetNeighbors() if n.GetFormalCharge() * charge < 0), None)
    if other is None:
        return ""
    start, end = spans[other.GetIdx()]
    apart = Chem.RWMol(atom.GetOwningMol())
    # every such pair of the SMILES apart ([Ca+2]([Cl-])[Cl-] has two), where one of them has too many bonds (a nitro
    # group's N+ and O- are bonded rightly)
    crowded = {problem.GetAtomIdx() for problem in Chem.DetectChemistryProblems(apart)
               if problem.GetType() == "AtomValenceException"}
    for bond in list(apart.GetBonds()):
        if bond.GetBeginAtom().GetFormalCharge() * bond.GetEndAtom().GetFormalCharge() < 0 and crowded & {
                bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()}:
            apart.RemoveBond(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx())
    written = Chem.MolToSmiles(apart)
    mended = f", as {written}" if Chem.MolFromSmiles(written) is not None else ""
    return (f": written beside the {smiles[start:end]} at position {start + 1} with no '.' between, the two ions are "
            f"bonded; a salt's ions are joined with '.'{mended}")


def _atom_spans(smiles: str) -> list[tuple[int, int]]:
    """Where each atom of a SMILES is written, (start, end) in the text, in the order RDKit numbers its atoms."""
    spans = []
    i = 0
    while i < len(smiles):
        if smiles[i] == "[":
            end = smiles.find("]", i) + 1 or len(smiles)
        elif (atom := ORGANIC_ATOM.match(smiles, i)) is not None:
            end = atom.end()
        else:
            i += 1
            continue
        spans.append((i, end))
        i = end
    return spans


def _other_notation(text: str) -> str:
    """What to paste instead of an InChIKey or an InChI without its prefix (text no SMILES), else ""."""
    if INCHI_KEY.fullmatch(text) and set(text) - set("BCNOPSFI-"):  # FFF...-FFF...-F is a SMILES, if a wrong one
        return ("this is an InChIKey, a hashed key from which no structure can be read back: paste the structure's "
                "SMILES or InChI (PubChem gives both beside the key)")
    if BARE_INCHI.match(text):
        return f"this reads as an InChI without its prefix: an InChI begins 'InChI=', as InChI={text[:80]}"
    if _is_formula(text):
        return ("this reads as a molecular formula, which gives a molecule's atoms but not how they are bonded: paste "
                "its SMILES (water is O, carbon dioxide O=C=O, sodium hydroxide [Na+].[OH-]) or draw it")
    return ""


# A molecular formula's part: an element symbol and its count (none for one: a formula writes no 1, as C1 in a SMILES)
FORMULA_PART = re.compile(r"([A-Z][a-z]?)([1-9][0-9]+|[2-9])?")


def _is_formula(text: str) -> bool:
    """Whether text that no SMILES is reads as a molecular formula: element symbols, each once, with counts of 2 or
    more, two elements or more, and a count or a hydrogen among them (CO2, H2O, NaOH, K2CO3; CCo is no cobalt
    compound, nor C11 undecacarbon, but typos). CO2 was told that ring bond 2 is never closed. An abbreviation is
    said as one (AcOH: Ac is actinium too)."""
    parts = [(part[1], part[2]) for part in FORMULA_PART.finditer(text)]
    if "".join(symbol + (count or "") for symbol, count in parts) != text:
        return False
    symbols = [symbol for symbol, _ in parts]
    table = Chem.GetPeriodicTable()
    if len(symbols) < 2 or len(set(symbols)) != len(symbols) or any(symbol in ABBREVIATIONS for symbol in symbols):
        return False
    try:
        elements = [table.GetAtomicNumber(symbol) for symbol in symbols]
    except RuntimeError:  # not an element's symbol: RDKit's table raises
        return False
    return 0 not in elements and any(count or symbol == "H" for symbol, count in parts)


def _dangling_bond(smiles: str, at: int) -> str:
    """Of the bond at position `at`, which no atom follows; a '-' may be a charge written as in a formula."""
    bond = smiles[at - 1:at + 1] if smiles.startswith(("->", "<-"), at - 1) else smiles[at - 1]  # dative: two
    charge = ": if it is a charge, it goes in its atom's brackets, as [O-]" if bond == "-" else ""
    return f"the bond '{bond}' at position {at} has no atom after it{charge}"


def _abbreviation_at(text: str, i: int) -> tuple[int, str] | None:
    """(where it starts, which) of the abbreviation (ABBREVIATIONS) that text[i], no atom there, is part of, or None:
    Ph's P reads as phosphorus, so its 'h' is the character refused."""
    for name in ABBREVIATIONS:
        start = next((s for s in range(i - len(name) + 1, i + 1) if s >= 0 and text.startswith(name, s)), None)
        if start is not None:
            return start, name
    return None


# Element symbols and their names, lower case: a metal written outside brackets (CCCCLi, C[Mg]Br as CMgBr) was told
# only that its 'L' or 'g' is no atom.
ELEMENT_NAMES = {Chem.GetPeriodicTable().GetElementSymbol(n): Chem.GetPeriodicTable().GetElementName(n).lower()
                 for n in range(1, 119)}


def _element_at(text: str, i: int) -> tuple[int, str] | None:
    """(where it starts, which) of the element symbol that text[i], no atom there, begins or ends (the 'L' of Li, the
    'a' of Na after an N read as nitrogen), or None: a capital and a lower-case letter where the two are a symbol,
    else a capital alone (not H: a hydrogen outside brackets is left implicit, _not_smiles says)."""
    if text[i].isupper():
        if text[i + 1:i + 2].islower() and text[i:i + 2] in ELEMENT_NAMES:
            return i, text[i:i + 2]
        return (i, text[i]) if text[i] in ELEMENT_NAMES and text[i] != "H" else None
    if text[i].islower() and i > 0 and text[i - 1:i + 1] in ELEMENT_NAMES:
        return i - 1, text[i - 1:i + 1]
    return None


def _in_word(text: str, i: int) -> bool:
    """Whether text[i] is among four lowercase letters or more in a row, one of them no aromatic atom's: a word, as
    a chemical name has ("aspirin", not "cccc"; the service's name hint reads words so). text[i] itself may be a
    capital ("Aspirin"), but is not the letter that makes it a word: the H of c1ccHcc1 was taken for a name's."""
    start, end = i, i + 1
    while start > 0 and "a" <= text[start - 1] <= "z":
        start -= 1
    while end < len(text) and "a" <= text[end] <= "z":
        end += 1
    return end - start >= 4 and bool({c for c in text[start:end] if "a" <= c <= "z"} - set("bcnops"))


def _not_smiles(char: str) -> str:
    """Why a character outside brackets is no part of a SMILES (why_unreadable), to follow "the 'X' at position N"."""
    if not char.isascii():
        return (f"is not plain ASCII (U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}), as a SMILES is: retype "
                "it (look-alike letters from other alphabets, full-width forms and typographic dashes or minus signs "
                "change the molecule)")
    if char.isspace():
        return "is a space: a SMILES has none, and RDKit reads what follows one as the molecule's name"
    if char == "H":
        return "is a hydrogen outside brackets: hydrogens are left implicit, or written in an atom's brackets, as [CH3]"
    if char.isalpha():
        return ("is no atom: outside brackets a SMILES writes B, C, N, O, P, S, F, Cl, Br and I (aromatic: b, c, n, o, "
                "p, s), and every other element in brackets, as [Na] or [Si]")
    if char == "+":
        return "is a charge outside brackets: a charge goes in its atom's brackets, as [NH4+]"
    if char == "%":
        return "starts no ring bond label: '%' takes two digits, as %12, or digits in parentheses, as %(123)"
    return "is not part of a SMILES"


def canonical(smiles: str, *, strip_maps: bool = False) -> str:
    """RDKit canonical isomeric SMILES; raises ChemError when the SMILES is invalid."""
    mol = mol_from_smiles(smiles)
    if strip_maps:
        clear_maps(mol)
    return Chem.MolToSmiles(mol)


def without_isotopes(smiles: str) -> str | None:
    """`smiles` with its isotope labels removed, as RDKit's canonical SMILES; None where it has none (raises ChemError
    for an invalid SMILES). A centre or a double bond that only its label made stereo ([2H][C@@H](C)O, [2H]/C=C/C)
    loses its mark, being none (the double bond's deuterium was kept as [H]/C=C/C)."""
    mol = mol_from_smiles(smiles)
    labelled = [atom for atom in mol.GetAtoms() if atom.GetIsotope()]
    if not labelled:
        return None
    for atom in labelled:
        atom.SetIsotope(0)
    mol = Chem.RemoveHs(mol)  # a deuterium, [2H], is a hydrogen atom of its own until unlabelled
    # RDKit keeps an [H] that a double bond's marks were written against; where its atom holds another hydrogen, the
    # bond is no stereo bond, and it goes too (an imine's N-H, the one hydrogen of its atom, keeps its geometry)
    if any(atom.GetAtomicNum() == 1 and atom.GetNeighbors()[0].GetTotalNumHs(includeNeighbors=True) > 1
           for atom in mol.GetAtoms() if atom.GetDegree() == 1):
        params = Chem.RemoveHsParameters()
        params.removeDefiningBondStereo = True
        mol = Chem.RemoveHs(mol, params)
    Chem.AssignStereochemistry(mol, cleanIt=True, force=True)
    return Chem.MolToSmiles(mol)


def clear_maps(mol) -> None:
    """Remove `mol`'s atom-map numbers, and its stereo marks where only they made an atom a stereocentre. RDKit
    perceives stereo as it reads a SMILES, and map numbers tell otherwise alike neighbours apart: a recorded
    [CH3:1][C@H:2]([CH3:3])[OH:4] kept its mark (C[C@H](C)O, which no model answer CC(C)O equals), and a mapped
    trans-1,4-cyclohexane came out as N[C@@H]1CC[C@@H](O)CC1 where its unmapped writings give N[C@H]1CC[C@H](O)CC1
    (47 of USPTO-50K's 10,014 test molecules). Perceived again without the maps, it writes as its unmapped SMILES.
    A map number 0 (mappers write an unmapped atom as [CH3:0]) is removed too: RDKit keeps and writes it."""
    if any(atom.HasProp("molAtomMapNumber") for atom in mol.GetAtoms()):
        for atom in mol.GetAtoms():
            atom.SetAtomMapNum(0)
        Chem.AssignStereochemistry(mol, cleanIt=True, force=True)


@lru_cache(maxsize=4096)
def canonical_or_none(smiles: str) -> str | None:
    """Canonical SMILES without atom-map numbers, or None for invalid (used to score predictions, where
    invalid is data, against recorded answers, which USPTO's raw files write with their atom maps). Cached:
    a query read in several writings gets many of the same answers back."""
    mol = _unmapped_mol(smiles)
    return Chem.MolToSmiles(mol) if mol is not None else None


@lru_cache(maxsize=4096)
def uncharged(molecule: str) -> str:
    """A molecule's canonical SMILES with the charges that a proton given or taken explains removed (RDKit's
    Uncharger): CC[NH3+] is CCN, CC(=O)[O-] is CC(=O)O, [Cl-] is Cl, a zwitterion its neutral form; a charge no
    proton explains stays (a quaternary ammonium, [Na+], a nitro group). ChemError where RDKit cannot read it.
    known.answer_key compares the forms of a salt so."""
    return Chem.MolToSmiles(rdMolStandardize.Uncharger().uncharge(mol_from_smiles(molecule)))


# A Grignard or organozinc reagent's carbon-metal-halogen end. USPTO-50K writes such a reagent as its cation, the halide
# left out (C[Mg+]: 234 of the 237 magnesium reagents among its training reactants; [Zn+] 50 of 56), and the retro
# model writes it so; chemists, textbooks and USPTO-MIT's queries write C[Mg]Br.
_METAL_HALIDE_END = Chem.MolFromSmarts("[#6]-[Mg,Zn;+0;D2]-[Cl,Br,I;+0;D1]")


@lru_cache(maxsize=4096)
def organometal_cation(molecule: str) -> str:
    """A Grignard or organozinc reagent (one molecule, canonical) written R-M-X, as USPTO-50K writes it: its cation,
    R[M+] (C[Mg]Br is [CH3][Mg+]); any other molecule, or one RDKit cannot read, as it is."""
    mol = Chem.MolFromSmiles(molecule) if "Mg" in molecule or "Zn" in molecule else None
    matches = mol.GetSubstructMatches(_METAL_HALIDE_END) if mol is not None else ()
    if len(matches) != 1:
        return molecule
    _, metal, halide = matches[0]
    cation = Chem.RWMol(mol)
    cation.GetAtomWithIdx(metal).SetFormalCharge(1)
    cation.RemoveAtom(halide)
    return Chem.MolToSmiles(cation)


def _unmapped_mol(smiles: str):
    """The molecule of a SMILES RDKit reads, its atom maps cleared, or None (also for one longer than it writes
    safely): what canonical_or_none and leakage_key write out. A text with whitespace inside is None too: RDKit
    reads what follows the first space as the molecule's name, so a tokenized answer 'C C ( = O ) O' read as
    methane, and evaluate scored a model's 'C' right against it."""
    if not smiles or len(smiles) > MAX_SMILES_CHARS or any(ch.isspace() for ch in smiles.strip()):
        return None
    if not smiles.isascii():  # RDKit skips some other characters unsaid: a Cyrillic 'ССO' was water
        return None
    mol = Chem.MolFromSmiles(smiles)
    if mol is not None and ":" in smiles:  # only a bracket atom's map (or an aromatic bond) writes one
        clear_maps(mol)
    return mol


def leakage_key(smiles: str) -> str | None:
    """What the leakage filters compare a training product with a held-out one by: the canonical SMILES without
    stereo marks or atom maps, or None where RDKit cannot read it. USPTO-MIT writes no stereo, and the training pool
    does: with its marks kept, 1,813 of the 40,000 USPTO-MIT test products were in the pool (session 76's audit).
    Written from the parsed molecule, so it does not depend on how the string was first written (a mark RDKit
    drops on a second reading, on an atom that is no stereocentre, let one reaction through)."""
    mol = _unmapped_mol(smiles)
    return Chem.MolToSmiles(mol, isomericSmiles=False) if mol is not None else None


# The lines that the InChI software, and programs that export InChI (Marvin's, by default), write after an InChI: its
# AuxInfo (atom numbers and coordinates, no structure) and its InChIKey (a hash of the InChI). An InChI pasted with
# them was refused as "a SMILES has no spaces" (where a one-line field dropped the line breaks, as an unreadable
# InChI). Neither can be part of an InChI, whose layers are "/" and a letter; each ends where another InChI begins.
INCHI_COMPANION = re.compile(r"\s*(?:AuxInfo|InChIKey)=(?:(?!InChI=)\S)*", re.IGNORECASE)


def inchi_alone(text: str) -> str:
    """An InChI query (a stripped text) without the AuxInfo and InChIKey that follow it (INCHI_COMPANION); any other
    text as it is. Several InChIs stay several queries, refused as one."""
    return INCHI_COMPANION.sub("", text) if text[:6].casefold() == "inchi=" else text


def smiles_from_inchi(inchi: str) -> str:
    """The isomeric SMILES of an InChI (stereo layers kept); raises ChemError when RDKit cannot read it.

    A standard InChI ("InChI=1S/") does not say where its mobile hydrogens sit, and RDKit puts them where
    its reader lands: paracetamol's InChI comes back as the imidic acid CC(O)=Nc1ccc(O)cc1, and so does
    every amide's, which the models (trained on SMILES as chemists write them) read as another molecule.
    So of the tautomers with the same standard InChI, the one RDKit's tautomer scoring prefers is taken
    (amides, ketones, pyridones). A non-standard InChI with a fixed-hydrogen layer says where they sit,
    and is kept as read.

    A standard InChI also writes a metal apart from the atoms it is bonded to: butyllithium's reads back as a butyl
    radical beside a lithium atom, [CH2]CCC.[Li]. Such an InChI (an unpaired electron beside a metal atom bonded to
    nothing) is refused, as the model would read radicals.

    An InChI whose layers the InChI software finds at odds with the structure it builds from them (a charge layer
    /q+1 on ethanol, which has no atom to carry it; a proton layer /p-1 that removes no proton) is refused with the
    software's words: RDKit read such an InChI as the neutral compound, the charge dropped unsaid.

    An InChI longer than MAX_SMILES_CHARS is refused unread, as such a SMILES is: a known answer's InChI (a file's
    cell) of a 10,000-carbon chain took RDKit 7 s, and the InChI software reads chains of more atoms still."""
    if len(inchi) > MAX_SMILES_CHARS:
        raise ChemError(f"an InChI of {len(inchi):,} characters is longer than the {MAX_SMILES_CHARS:,} read here")
    try:
        mol, code, message, _ = rdinchi.InchiToMol(inchi, True, True)  # sanitized, hydrogens removed
    except ValueError as exc:  # a structure RDKit cannot sanitize: sodium chlorite's, bromate's and periodate's
        raise ChemError(f"the InChI software builds from {inchi[:80]!r} a structure RDKit refuses (RDKit: "  # InChIs
                        f"{' '.join(str(exc).split())[:120]}), as it does the standard InChI of some inorganic "
                        "oxoanions (chlorite, bromate, periodate): paste the compound's SMILES") from None
    if mol is None or mol.GetNumAtoms() == 0 or code >= INCHI_ERROR:
        raise ChemError(f"RDKit cannot read {inchi[:80]!r} as an InChI")
    if inchi.startswith("InChI=1S/"):
        mol = _preferred_tautomer(mol)
    smiles = Chem.MolToSmiles(mol)
    if code == INCHI_WARNING:  # of 10,000 InChIs written from USPTO's molecules, none read back with one
        raise ChemError(f"this InChI's layers do not fit together: the InChI software builds {smiles[:80]} from it "
                        f"and reports {' '.join(message.split())!r}, a charge (/q) or proton (/p) layer that "
                        "structure does not carry; check those layers, or paste the compound's SMILES")
    metals = sorted({atom.GetSymbol() for atom in mol.GetAtoms()
                     if atom.GetDegree() == 0 and atom.GetAtomicNum() not in NONMETALS})
    if metals and any(atom.GetNumRadicalElectrons() and atom.GetAtomicNum() in NONMETALS for atom in mol.GetAtoms()):
        raise ChemError(f"this InChI writes its metal ({', '.join(metals)}) apart from the atoms it is bonded to, as "
                        f"a standard InChI does, and read back, it is {smiles[:80]}: an unpaired electron (a radical) "
                        "beside a lone metal atom, not the compound drawn; paste its SMILES (butyllithium: [Li]CCCC) "
                        "or draw it")
    return smiles


# The InChI software's return codes (inchi_api.h's inchi_Ret): a warning (the layers do not match the structure they
# give) and the first of the errors, from which no structure comes.
INCHI_WARNING, INCHI_ERROR = 1, 2


# Atomic numbers of the elements that are no metal (the wildcard 0 with them): hydrogen, the noble gases, the
# non-metals and the metalloids (B, Si, Ge, As, Sb, Te). depict draws no radical dots on the others, and
# answer_concerns finds no radical in them.
NONMETALS = frozenset({0, 1, 2, 5, 6, 7, 8, 9, 10, 14, 15, 16, 17, 18, 32, 33, 34, 35, 36, 51, 52, 53, 54, 85, 86})


TAUTOMERS_TRIED = 200  # a tetrapeptide has more; reading one InChI stays under 0.1 s (92 ms for that one)


@lru_cache(maxsize=1)
def _tautomer_enumerator():
    params = rdMolStandardize.CleanupParameters()
    params.maxTautomers = TAUTOMERS_TRIED
    # a hydrogen's move must not lose the InChI's stereo layers (RDKit drops them near a moved H by default)
    params.tautomerRemoveSp3Stereo = False
    params.tautomerRemoveBondStereo = False
    params.tautomerReassignStereo = False
    return rdMolStandardize.TautomerEnumerator(params)


def _preferred_tautomer(mol):
    """Of the tautomers of `mol` with its standard InChI, the best by RDKit's tautomer score (`mol` itself
    first among equals)."""
    key = Chem.MolToInchi(mol)
    enumerator = _tautomer_enumerator()
    same = [mol] + [t for t in enumerator.Enumerate(mol) if Chem.MolToInchi(t) == key]
    return max(same, key=enumerator.ScoreTautomer)


# A reaction SMILES's arrow: a '>' that is not the head of a dative bond's '->'.
REACTION_ARROW = re.compile(r"(?<!-)>")


def reaction_sides(text: str) -> list[str]:
    """A reaction SMILES's parts, 'reactants>agents>products', split at its arrows alone; a molecule's SMILES (a
    complex's dative bonds, [NH3]->[Pt], included) is one part."""
    return REACTION_ARROW.split(text)


# ChemAxon's extended SMILES (CXSMILES), as Marvin, ChemDraw's "Copy As CXSMILES" and RDKit write it: a SMILES, a
# space, then one |...| part holding coordinates, radicals, atom labels, enhanced-stereo groups and the like.
CXSMILES = re.compile(r"[^\s|]+[ \t]+\|[^|\r\n]*\|")


def smiles_from_cxsmiles(text: str) -> str:
    """A CXSMILES (CXSMILES.fullmatch) as the plain SMILES the models read: RDKit reads its |...| part (radicals
    and the like change the atoms) and writes isomeric SMILES, which hold no coordinates, atom labels or
    enhanced-stereo groups (as a molfile's SMILES, sd_records, holds none); a reaction keeps its three parts,
    'reactants>agents>products'. Raises ChemError when RDKit cannot read it."""
    if not text.isascii():  # RDKit skips some other characters unsaid (why_unreadable)
        raise _unparsed(text)
    written = text.split()[0]
    if len(written) > MAX_SMILES_CHARS:  # a reaction of a 19,000-atom chain, as a recorded reaction, segfaulted
        raise ChemError(f"a CXSMILES whose SMILES is {len(written):,} characters long is longer than the "
                        f"{MAX_SMILES_CHARS:,} read here")
    if len(reaction_sides(written)) > 1:
        from rdkit.Chem import rdChemReactions
        try:
            reaction = rdChemReactions.ReactionFromSmarts(text, useSmiles=True)
            sides = [reaction.GetReactants(), reaction.GetAgents(), reaction.GetProducts()]
            for mol in (m for side in sides for m in side):
                Chem.SanitizeMol(mol)
        except Exception as exc:  # noqa: BLE001  (RDKit raises several kinds; the caller names the query)
            raise ChemError(f"RDKit cannot read {text[:80]!r} as a CXSMILES reaction") from exc
        return ">".join(".".join(Chem.MolToSmiles(m) for m in side) for side in sides)
    mol = Chem.MolFromSmiles(text)  # RDKit's SMILES parser reads the |...| part too
    if mol is None:
        raise ChemError(f"RDKit cannot read {text[:80]!r} as a CXSMILES")
    return Chem.MolToSmiles(mol)


_TETRAHEDRAL_MARK = re.compile(r"\[[^\]]*@")  # a bracket atom marked @ or @@


def dropped_stereo(text: str) -> str:
    """A sentence where stereo marks of a query's SMILES (or reaction SMILES) are not in what the model reads, ""
    where none is lost. RDKit drops an @ on an atom it does not take for a stereocentre (two like groups, as
    isopropanol's CH; an allene's ends, whose axial stereo it cannot represent) and / or \\ around a double bond
    it does not take for a stereo bond (two like groups on one end; in a ring of fewer than 8 atoms): the canonical
    query, and the answers, lack them without a word. Counted as the model reads the query, without its atom maps
    (clear_maps): a mapped [CH3:1][C@H:2]([CH3:3])[OH:4] kept its mark here, the maps telling the methyls apart, and
    lost it unsaid."""
    smiles = ".".join(part for part in reaction_sides(text.strip().split(" ")[0]) if part)
    mol = Chem.MolFromSmiles(smiles) if smiles else None
    if mol is None:
        return ""
    clear_maps(mol)
    raw = Chem.MolFromSmiles(smiles, sanitize=False)
    marked_runs = _marked_double_bonds(raw)
    marked_bonds = [run[0] for run in marked_runs]
    lost = [(len(_TETRAHEDRAL_MARK.findall(smiles)) - sum(
                atom.GetChiralTag() != Chem.ChiralType.CHI_UNSPECIFIED for atom in mol.GetAtoms()), "atom", "@"),
            (len(marked_bonds) - sum(bond.GetStereo() != Chem.BondStereo.STEREONONE for bond in mol.GetBonds()),
             "double bond", "/ or \\")]
    said = [f"{n} {what}{'s' if n > 1 else ''} marked {mark}" for n, what, mark in lost if n > 0]
    if not said:
        return ""
    # cis-cycloheptene's marks were said to be dropped for like groups or axial stereo, neither of which it has: a
    # marked double bond in so small a ring is always among those dropped (the raw atoms count an [H] as RDKit's do not)
    Chem.GetSymmSSSR(raw)
    small_ring = any(any(map(bond.IsInRingSize, range(3, 8))) for bond in marked_bonds)
    ring = ", a double bond in a ring of fewer than 8 atoms (cis perforce)" if small_ring else ""
    amine = ", an amine's nitrogen, which inverts (no configuration of it lasts)" if _inverting_marked(smiles) else ""
    cumulene = (", a cumulene's (C=C=C=C) E or Z, which RDKit does not keep" if any(len(run) % 2 == 1 < len(run)
                                                                                       for run in marked_runs) else "")
    return (f"Stereo marks dropped: {' and '.join(said)} that RDKit does not read as stereo (two like groups{ring}"
            f"{amine}{cumulene}, or an allene's or a biaryl's axial stereo, which SMILES as RDKit reads it cannot "
            "hold). The model reads the query without them, and its answers carry none of that stereo.")


def _marked_double_bonds(raw: Chem.Mol) -> list[list[Chem.Bond]]:
    """The double bonds of an unsanitized molecule marked / or \\ at both ends, each a list of one; and each run of
    cumulated double bonds (an allene's C=C=C, a cumulene's C=C=C=C) so marked at its two outer atoms, the run's
    bonds in a list. RDKit drops marks written around a run (C/C=C=C/C, C/C=C=C=C/C): counted bond by bond, neither
    end of a bond in it had marks of its own, and the loss went unsaid."""
    directed = (Chem.BondDir.ENDUPRIGHT, Chem.BondDir.ENDDOWNRIGHT)

    def doubles(atom: Chem.Atom) -> list[Chem.Bond]:
        return [bond for bond in atom.GetBonds() if bond.GetBondType() == Chem.BondType.DOUBLE]

    runs, seen = [], set()
    for bond in raw.GetBonds():
        if bond.GetBondType() != Chem.BondType.DOUBLE or bond.GetIdx() in seen:
            continue
        run, ends = [bond], []
        for atom in (bond.GetBeginAtom(), bond.GetEndAtom()):  # along the run each way, through atoms of two
            last = bond
            while len(both := doubles(atom)) == 2 and (
                    last := both[both[0].GetIdx() == last.GetIdx()]).GetIdx() not in {b.GetIdx() for b in run}:
                run.append(last)
                atom = last.GetOtherAtom(atom)
            ends.append(atom)
        seen.update(b.GetIdx() for b in run)
        if all(any(b.GetBondDir() in directed for b in end.GetBonds()) for end in ends):
            runs.append(run)
    return runs


def _inverting_marked(smiles: str) -> bool:
    """Whether a neutral nitrogen of three bonds is marked @ in `smiles` (a valid SMILES) and RDKit reads it without
    the mark: an amine's nitrogen inverts, and RDKit keeps a configuration only where a small ring or a bridgehead
    holds it. C[N@](CC)c1ccccc1 lost its mark, and the note named like groups and axial stereo, of which it has none."""
    params = Chem.SmilesParserParams()
    params.removeHs = False  # its atoms numbered as the unsanitized reading numbers them
    read, raw = Chem.MolFromSmiles(smiles, params), Chem.MolFromSmiles(smiles, sanitize=False)
    return read is not None and any(
        atom.GetAtomicNum() == 7 and not atom.GetFormalCharge() and atom.GetTotalDegree() == 3
        and atom.GetChiralTag() == Chem.ChiralType.CHI_UNSPECIFIED
        and raw.GetAtomWithIdx(atom.GetIdx()).GetChiralTag() != Chem.ChiralType.CHI_UNSPECIFIED
        for atom in read.GetAtoms())


def stereo_notes(text: str) -> list[str]:
    """What a query's stereo says that the model does not read, a sentence each: enhanced stereo
    (unread_stereo_groups) and marks RDKit drops (dropped_stereo)."""
    return [note for note in (unread_stereo_groups(text), dropped_stereo(text)) if note]


def unread_stereo_groups(text: str) -> str:
    """What a CXSMILES's enhanced stereo says that the models do not read, as a sentence; "" where it says nothing
    more than the SMILES (no |...| part, no AND or OR group, or a reaction). An AND group (&n) marks centres of a
    mixture of both configurations (a racemate), an OR group (orn) centres of one configuration not known; the
    SMILES the models read (smiles_from_cxsmiles) draws each centre as one configuration, and USPTO's reactions
    hold nothing else."""
    if not CXSMILES.fullmatch(text.strip()) or len(reaction_sides(text.split()[0])) > 1:
        return ""
    params = Chem.SmilesParserParams()
    params.removeHs = False  # the CXSMILES counts its [H] atoms: atoms numbered as it numbers them
    mol = Chem.MolFromSmiles(text.strip(), params)
    if mol is None:
        return ""
    kinds = {Chem.StereoGroupType.STEREO_AND: ("&", "both configurations, a mixture"),
             Chem.StereoGroupType.STEREO_OR: ("or", "one configuration, not known which")}
    said = []
    for group in mol.GetStereoGroups():
        if group.GetGroupType() in kinds:
            mark, meaning = kinds[group.GetGroupType()]
            atoms = sorted(atom.GetIdx() for atom in group.GetAtoms())
            said.append(f"{mark}{group.GetReadId() or ''} ({meaning}) at {_atoms_named(atoms)}")
    grouped = {atom.GetIdx() for group in mol.GetStereoGroups() for atom in group.GetAtoms()}
    ungrouped = [atom.GetIdx() for atom in mol.GetAtoms()
                 if atom.GetChiralTag() in _TETRAHEDRAL and atom.GetIdx() not in grouped]
    if ungrouped and _chiral_flag_unset(text):
        said.append(f"r (the chiral flag unset: the configurations drawn are relative, both enantiomers, a racemate) "
                    f"at {_atoms_named(ungrouped)}")
    if not said:
        return ""
    return (f"Enhanced stereo is not read: {'; '.join(said)} (atoms counted from 0, as in the CXSMILES). The model "
            "reads each of these centres as drawn, as one configuration, and its answers carry that configuration.")


_TETRAHEDRAL = (Chem.ChiralType.CHI_TETRAHEDRAL_CW, Chem.ChiralType.CHI_TETRAHEDRAL_CCW)


def _atoms_named(atoms: list[int]) -> str:
    return f"atom{'s' if len(atoms) > 1 else ''} {', '.join(map(str, atoms))}"


def _chiral_flag_unset(cxsmiles: str) -> bool:
    """Whether a CXSMILES (CXSMILES.fullmatch) carries the flag 'r': its chiral flag unset, as Marvin copies a drawing
    whose stereo is relative; its stereocentres in no group then stand for both enantiomers (an AND group). RDKit
    reads no such flag, and says nothing of it. Atom labels ($...$) and coordinates ((...)) hold free text and
    commas, so the flag is looked for among the other fields."""
    extension = cxsmiles.strip().split(None, 1)[1][1:-1]  # inside the |...|
    return "r" in re.sub(r"\$[^$]*\$|\([^)]*\)", "", extension).split(",")


def canonical_fragments(smiles: str, *, strip_maps: bool = True) -> list[str]:
    """Canonical SMILES of each '.'-separated fragment (atom maps removed), in input order. A ring bond may join
    atoms across a '.' (C1CC.C1 is butane): where a piece alone is no SMILES and the whole is one, each of the
    whole's molecules, in the order their first atoms are written (C1CC.C1 was refused: 'ring bond 1 ... is never
    closed'). Where neither reads, ChemError names the first piece at fault, or the whole where a ring bond joins
    pieces (C1CC.C1CC(C)(C)(C)(C)C was refused for its ring bond, not its carbon of six bonds). The ends are trimmed;
    a space inside is refused (CCO.O Cl was read as ethanol and water, the Cl taken for a name)."""
    smiles = smiles.strip()
    # RDKit would read what follows a space as a name, and skip some characters outside ASCII, unsaid
    if any(char.isspace() for char in smiles) or not smiles.isascii():
        raise _unparsed(smiles)
    parts = [part for part in smiles.split(".") if part]
    try:
        return [canonical(part, strip_maps=strip_maps) for part in parts]
    except ChemError:
        joined = ".".join(parts)
        if len(parts) < 2 or len(joined) > MAX_SMILES_CHARS:  # RDKit reads no longer SMILES safely
            raise
        whole = Chem.MolFromSmiles(joined)
        if whole is None:
            if not all(_ring_bonds_paired(part) for part in parts):  # a piece's "never closed" may be closed after
                raise _unparsed(joined) from None
            raise
    return [canonical(Chem.MolToSmiles(molecule), strip_maps=strip_maps)
            for molecule in Chem.GetMolFrags(whole, asMols=True)]


def _ring_bonds_paired(smiles: str) -> bool:
    """Whether each ring bond label outside brackets comes an even number of times (opened and closed in `smiles`)."""
    labels = Counter(RING_LABEL.findall(re.sub(r"\[[^\]]*\]", "", smiles)))
    return all(n % 2 == 0 for n in labels.values())


# Hydrides that PubChem and drawing programs write as one species and USPTO's reactions as ions. The
# models' vocabularies lack the one-species token, so a query holding it is refused, and the refusal
# offers the USPTO writing (Predictor.prepare). In USPTO-MIT's 30,000 validation rows lithium aluminium
# hydride is [Al+3] with four [H-] in 290 rows, [AlH4-] in 3 (of the 70,000 validation and test rows);
# [H-] stands beside [Na+] in 1,304 rows and [NaH] in none; beside [Ca+2] in 2 and [CaH2] in none. Of 54
# common reagents written as PubChem writes them, these three were the hydrides the forward model refused
# (session 46); it also refuses MeLi as [Li+].[CH3-] (USPTO: [Li][CH3], one species, as RDKit writes C[Li])
# and ceric ammonium nitrate ([Ce+4]), which no per-molecule rewriting mends.
ION_WRITINGS: dict[str, str] = {
    "[AlH4-]": "[Al+3].[H-].[H-].[H-].[H-]",  # LiAlH4, NaAlH4
    "[NaH]": "[H-].[Na+]",
    "[CaH2]": "[Ca+2].[H-].[H-]",
}


# Salts of the alkali metals (Li, Na, K, Rb, Cs) as USPTO's reactions write them: as ions. 24,229 of USPTO-MIT's
# 70,000 validation and test queries hold an alkali cation; 44 a bond from one to an N, O, S or halogen: sodium and
# potassium cyanate (36, never written as ions there: COVALENT_SALTS), potassium and sodium tert-butoxide (7, beside
# 639 as ions) and LDA (1). A drawing program writes such a salt with its bond (ChemDraw's potassium carbonate,
# O=C(O[K])O[K]), and the forward model, which reads that writing unlike its training, gave phenol and benzyl bromide
# with it a benzyl ester of a carboxylated phenol first, and benzyl phenyl ether with its ions.
ALKALI_METALS = frozenset({3, 11, 19, 37, 55})
SALT_ANIONS = frozenset({7, 8, 9, 16, 17, 35, 53})  # N, O, F, S, Cl, Br, I
COVALENT_SALTS = frozenset({"N#C[O][Na]", "N#C[O][K]"})  # written with the bond, as USPTO writes them
# The other metals' salts of an oxoacid (carboxylates, sulfonates, nitrates, phosphates) USPTO writes as ions too:
# palladium(II) acetate is CC(=O)[O-].CC(=O)[O-].[Pd+2] in 970 of the forward training set's rows and
# CC(=O)[O][Pd][O]C(C)=O (as Ketcher and ChemDraw write it) in none; copper(II) acetate [Cu+2] in 190 and bonded in
# none. Read with its bonds, copper(II) acetate, p-toluidine and phenylboronic acid in pyridine (a Chan-Lam
# coupling) gave an amide first (the acetate taken for an acylating agent); read as ions, the diarylamine. An
# organometallic's (tributyltin acetate's) bond stays: USPTO writes it so. Most halides (PdCl2 is [Cl][Pd][Cl] in 592
# rows; HALIDE_SALT_CATIONS below) and alkoxides (titanium isopropoxide) stay bonded too, as USPTO writes them. Only
# to a cation USPTO writes (the forward model's vocabulary holds each of these): cobalt(II) acetate as ions is [Co+2],
# which it never saw, and a query it read bonded would be refused.
OXOACID_SALT_CATIONS = frozenset({
    "[Ag+]", "[Al+3]", "[Ba+2]", "[Ca+2]", "[Ce+3]", "[Cu+]", "[Cu+2]", "[Fe+2]", "[Fe+3]", "[Hg+2]", "[Mg+2]",
    "[Mn+2]", "[Ni+2]", "[Pb+2]", "[Pb+4]", "[Pd+2]", "[Rh+2]", "[Rh+3]", "[Sc+3]", "[Sn+2]", "[Ti+4]", "[Yb+3]",
    "[Zn+2]", "[Zr+4]"})


# The halides (F, Cl, Br, I) of five metals USPTO writes as ions too. Of USPTO-MIT's 70,000 validation and test
# queries, those whose only anions are halide ions hold [Zn+2] in 68 (ZnCl2 or ZnBr2 bonded: none), [Ti+4] in 37
# (none), [Ca+2] in 25 (none), [Mg+2] in 17 (none) and [Al+3] in 321 (AlCl3 bonded: 11). The halides of copper,
# palladium, tin, nickel, iron, cobalt, ruthenium and mercury it writes bonded ([Cu][I] 513 times, [Cl][Pd][Cl] 318,
# [Cl][Sn][Cl] 143), and they stay so. Drawn with their bonds, the five's halides gave the forward model's recorded
# product first (beam search) in 158 of 332 USPTO-MIT test reactions that hold one as ions; as ions, in 176 (24 right
# only as ions, 9 only bonded). Only a metal bonded to halogens alone: a Grignard reagent's C-Mg-Br keeps its bonds.
HALIDE_SALT_CATIONS = frozenset({"[Al+3]", "[Ca+2]", "[Mg+2]", "[Ti+4]", "[Zn+2]"})
HALOGENS = frozenset({9, 17, 35, 53})


def salts_as_ions(fragments: Iterable[str]) -> list[str]:
    """Canonical fragments with each single bond of an alkali metal to an N, O, S or halogen, of another metal
    bonded to no carbon to an oxoacid's oxygen (where its cation is one of OXOACID_SALT_CATIONS), and of a metal bonded
    to halogens alone to them (where its cation is one of HALIDE_SALT_CATIONS), written as the ions USPTO writes ([Na+]
    and CC[O-] for CC[O][Na], [Pd+2] and two CC(=O)[O-] for CC(=O)[O][Pd][O]C(C)=O, [Zn+2] and two [Cl-] for
    [Cl][Zn][Cl]), save COVALENT_SALTS; a salt's ions written side by side, which RDKit reads as joined by a dative
    bond, apart (_ions_apart); and a sulfur's or phosphorus's oxide or a phosphorus ylide drawn with separated charges
    written with its double bond, as USPTO writes it (_double_bonded); the others as they are. (The query's molecules
    in USPTO's writing: Predictor.prepare reads every query through it.)"""
    return [part for fragment in fragments for piece in _ions_apart(fragment)
            for part in _salt_as_ions(_double_bonded(piece))]


def _ions_apart(fragment: str) -> list[str]:
    """A canonical fragment's ions apart where it was written with a metal cation beside an anion and no '.' between
    (CC(=O)[O-][Na+], as some drawing programs copy a salt): RDKit reads most such pairs as joined by a dative bond,
    CC(=O)[O-]->[Na+], and the query was refused for the '->' token, which no one had written; the others ([O-][Na+],
    CC[N-][Li+]) by a single bond, which salts_as_ions then charged once more, as [Na+2] and [O-2]. Each dative or
    single bond from a negatively charged atom to a positively charged metal is left out, the charges as written; a
    ligand's bond to a metal ([NH3]->[Pt]) stays. `fragment` itself where it has none."""
    if "+" not in fragment or "-" not in fragment:  # no cation, or neither an anion nor a dative bond
        return [fragment]
    mol = Chem.RWMol(mol_from_smiles(fragment))
    pairs = [(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()) for bond in mol.GetBonds()
             if bond.GetBondType() in (Chem.BondType.DATIVE, Chem.BondType.SINGLE)
             and sorted((bond.GetBeginAtom().GetFormalCharge() > 0 and _is_metal(bond.GetBeginAtom()),
                         bond.GetEndAtom().GetFormalCharge() > 0 and _is_metal(bond.GetEndAtom()))) == [False, True]
             and min(bond.GetBeginAtom().GetFormalCharge(), bond.GetEndAtom().GetFormalCharge()) < 0]
    if not pairs:
        return [fragment]
    for begin, end in pairs:
        mol.RemoveBond(begin, end)
    Chem.SanitizeMol(mol)
    return [canonical(part) for part in Chem.MolToSmiles(mol).split(".")]


# A sulfoxide, sulfone or phosphine oxide drawn with separated charges, S+ and O- (as Marvin and some drawings write
# them): USPTO writes them with the double bond, DMSO as CS(C)=O in 3,242 of the forward training set's rows and as
# C[S+](C)[O-] in none, and the retrosynthesis training set no sulfoxide charge-separated. So written, the
# retrosynthesis model took 4-(methylsulfinyl)benzoic acid for an organosilicon compound, and with S=O proposed the
# sulfide and an oxidant. (An amine or pyridine oxide keeps its charges: nitrogen has no double bond to give.) So too
# a Wittig reagent drawn Ph3P+-CH2-: USPTO writes it C=P(c1ccccc1)(c1ccccc1)c1ccccc1, with the double bond, in 1,016
# forward training rows and charge-separated in none, and the forward model so read it was unsure of the Wittig
# product (ethyl 4-chlorocinnamate at -1.6, beside 4-chlorostyrene at -1.6; at -0.45 with P=C).
_CHARGE_SEPARATED = tuple(map(Chem.MolFromSmarts, ("[S+,S+2,P+]-[O-;X1]", "[P+]-[#6-]")))
_MADE_DOUBLE = Chem.MolFromSmarts("[S,P]=[O,#6]")  # what _double_bonded makes, its valences checked


def _double_bonded(fragment: str) -> str:
    """`fragment` (canonical) with each S+-O-, P+-O- or P+-C- single bond made a double bond, its charges gone;
    `fragment` itself where it has none, or where that would give an atom more bonds than it can have (a sulfur of
    three carbons and an O-)."""
    if "+" not in fragment:  # no S+ or P+ to give a charge back: every query's fragments but a few, read once less
        return fragment
    mol = mol_from_smiles(fragment)
    if not any(mol.HasSubstructMatch(pattern) for pattern in _CHARGE_SEPARATED):
        return fragment
    mol = Chem.RWMol(mol)
    for centre, partner in (pair for pattern in _CHARGE_SEPARATED for pair in mol.GetSubstructMatches(pattern)):
        atom, other = mol.GetAtomWithIdx(centre), mol.GetAtomWithIdx(partner)
        if atom.GetFormalCharge() < 1 or other.GetFormalCharge() > -1:  # one charge already given to another bond
            continue
        mol.GetBondBetweenAtoms(centre, partner).SetBondType(Chem.BondType.DOUBLE)
        atom.SetFormalCharge(atom.GetFormalCharge() - 1)
        other.SetFormalCharge(other.GetFormalCharge() + 1)
    try:
        Chem.SanitizeMol(mol)
    except Chem.rdchem.MolSanitizeException:
        return fragment
    valences = Chem.GetPeriodicTable().GetValenceList
    if any(mol.GetAtomWithIdx(centre).GetTotalValence() not in valences(mol.GetAtomWithIdx(centre).GetAtomicNum())
           for centre, _ in mol.GetSubstructMatches(_MADE_DOUBLE)):
        return fragment
    return Chem.MolToSmiles(mol)


def _is_metal(atom: Chem.Atom) -> bool:
    return atom.GetAtomicNum() not in NONMETALS


def _cation(metal: Chem.Atom, bonds: int) -> str:
    """The cation a metal atom makes, as a SMILES writes it, where `bonds` of its bonds become ionic ([Pd+2])."""
    charge = metal.GetFormalCharge() + bonds
    return f"[{metal.GetSymbol()}{'+' if charge > 0 else '-'}{abs(charge) if abs(charge) > 1 else ''}]" if charge \
        else f"[{metal.GetSymbol()}]"


def _halide_only(metal: Chem.Atom) -> bool:
    """Whether a metal atom is bonded to halogens and nothing else (a metal halide: ZnCl2 drawn Cl[Zn]Cl)."""
    return metal.GetDegree() > 0 and all(n.GetAtomicNum() in HALOGENS for n in metal.GetNeighbors())


def _ionic(bond: Chem.Bond) -> bool:
    """Whether a single bond may be one USPTO writes as ions: an alkali metal's to an N, O, S or halogen, another
    metal's (bonded to no carbon) to an oxygen whose other neighbour has a double bond to an oxygen (an oxoacid's), or
    a metal's bonded to halogens alone (_halide_only) to one of them. (Which cations USPTO so writes: _salt_as_ions.)
    The anion's atom is uncharged, as a salt drawn with its bonds has it, and an alkali metal is too, with this bond
    alone: sodium with two (Cl[Na]Cl) or a charge already ([Na+]O, [Na][O-]) was charged once more, [Na+2] beside
    [Cl-] or [OH-], or [O-2]; such a drawing is left as it is."""
    if bond.GetBondType() != Chem.BondType.SINGLE:
        return False
    for metal, anion in ((bond.GetBeginAtom(), bond.GetEndAtom()), (bond.GetEndAtom(), bond.GetBeginAtom())):
        if anion.GetFormalCharge():
            continue
        if metal.GetAtomicNum() in ALKALI_METALS and anion.GetAtomicNum() in SALT_ANIONS:
            return not metal.GetFormalCharge() and metal.GetDegree() == 1
        if _is_metal(metal) and anion.GetAtomicNum() in HALOGENS and _halide_only(metal):
            return True
        if (_is_metal(metal) and metal.GetAtomicNum() not in ALKALI_METALS and anion.GetAtomicNum() == 8
                and anion.GetDegree() == 2 and all(n.GetAtomicNum() != 6 for n in metal.GetNeighbors())
                and any(n.GetIdx() != metal.GetIdx() and any(
                    b.GetBondType() == Chem.BondType.DOUBLE and b.GetOtherAtom(n).GetAtomicNum() == 8
                    for b in n.GetBonds()) for n in anion.GetNeighbors())):
            return True
    return False


def _salt_as_ions(fragment: str) -> list[str]:
    mol = Chem.RWMol(mol_from_smiles(fragment))
    bonds = [bond for bond in mol.GetBonds() if _ionic(bond)]
    split = Counter(atom.GetIdx() for bond in bonds for atom in (bond.GetBeginAtom(), bond.GetEndAtom())
                    if _is_metal(atom) and atom.GetAtomicNum() not in ALKALI_METALS)
    kept = {i for i, n in split.items() if _cation(mol.GetAtomWithIdx(i), n) not in (
        HALIDE_SALT_CATIONS if _halide_only(mol.GetAtomWithIdx(i)) else OXOACID_SALT_CATIONS)}
    bonds = [bond for bond in bonds if not {bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()} & kept]
    if not bonds or fragment in COVALENT_SALTS:
        return [fragment]
    # Two metals that both become cations keep no bond to each other: rhodium(II) acetate drawn with its Rh-Rh bond
    # (CC(=O)O[Rh](OC(C)=O)[Rh](OC(C)=O)OC(C)=O) was read as four acetates beside [Rh+2][Rh+2], one molecule
    cations = set(split) - kept
    paired = [(bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()) for bond in mol.GetBonds()
              if {bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()} <= cations]
    for bond in bonds:
        metal, anion = sorted((bond.GetBeginAtom(), bond.GetEndAtom()), key=lambda atom: not _is_metal(atom))
        for atom, charge in ((metal, 1), (anion, -1)):
            atom.SetNumExplicitHs(atom.GetTotalNumHs())  # the hydrogens it had: [OH-] from [Na][OH], CC[O-] ...
            atom.SetNoImplicit(True)
            atom.SetFormalCharge(atom.GetFormalCharge() + charge)
        mol.RemoveBond(metal.GetIdx(), anion.GetIdx())
    for begin, end in paired:
        mol.RemoveBond(begin, end)
    Chem.SanitizeMol(mol)
    return [canonical(part) for part in Chem.MolToSmiles(mol).split(".")]


def in_ion_writing(fragments: Iterable[str]) -> list[str] | None:
    """Canonical fragments with each one ION_WRITINGS names written as USPTO writes it (its ions), or
    None when the query holds none of them."""
    fragments = list(fragments)
    if not any(f in ION_WRITINGS for f in fragments):
        return None
    return [part for f in fragments for part in ION_WRITINGS.get(f, f).split(".")]


def random_writing(smiles: str, rng: random.Random) -> str:
    """The same molecules in another valid SMILES: atoms visited in a random order (so the fragments
    come in a random order too), reproducible from `rng`. Training-data augmentation."""
    mol = mol_from_smiles(smiles)
    order = list(range(mol.GetNumAtoms()))
    rng.shuffle(order)
    return Chem.MolToSmiles(Chem.RenumberAtoms(mol, order), canonical=False)


# An O-O-O chain: ozonide-like fragments such as "OOO" are a known failure of undertrained models and
# are not a reaction's product or a purchasable reactant.
_OXYGEN_CHAIN = Chem.MolFromSmarts("[OX2]-[OX2]-[OX2]")


# An acid that makes a salt of a drug's basic nitrogen as it stands beside it in a SMILES: a hydrogen halide, or an
# OH on a sulfur or phosphorus with a double bond to oxygen (sulfuric, a sulfonic, phosphoric acid), or nitric acid.
_SALT_ACID = Chem.MolFromSmarts("[$([OX2H1][S,P]=O),$([OX2H1][N+](=O)[O-]),$([F,Cl,Br,I;H1;D0])]")


LACKS_ATOMS = "lacks atoms of the product"  # the start of that concern (planning may let it pass)


@lru_cache(maxsize=4096)  # the answers of a query's writings repeat one another
def answer_concerns(answer: str, query: str, task: str) -> tuple[str, ...]:
    """Why a valid (canonical) answer is not a sane answer to `query` (canonical), or () when none:
    it repeats the query, it is an unchanged reactant (forward; the query's base beside a strong acid of it is the
    salt they make, _salt_formed; a salt's ions the acid and base they are, _salt_apart), it contains the product
    (retro), either
    of the last two but for stereo marks, its atoms cannot balance (a product atom no reactant has), a
    molecule in it has unpaired electrons on a non-metal (a radical) or an O-O-O chain, or (forward) it carries a net
    charge."""
    concerns = []
    # forward: a salt's ions read as its acid and base, as the query may write them (_salt_apart)
    read, query_read = (_salt_apart(answer), _salt_apart(query)) if task == "forward" else (answer, query)
    parts = set(read.split("."))
    query_parts = set(query_read.split("."))
    if answer == query or sorted(read.split(".")) == sorted(query_read.split(".")):
        concerns.append("same as the query")
    elif task == "forward" and parts <= query_parts:
        if not _salt_formed(parts, query_read):  # the query's base and acid side by side: the salt they make
            concerns.append("an unchanged reactant")
    elif task == "retro" and query_parts <= parts:  # every molecule of the product (a salt has several)
        concerns.append("contains the product itself")
    # A reactant with its stereo lost or turned, given as the product (or the product so, as a reactant): no
    # recorded reaction of USPTO-50K's test set is one, and the retro model listed the enantiomer of
    # N[C@H](CF)c1ccccc1 as its precursor, sane.
    elif task == "forward" and _stereo_free(parts) <= _stereo_free(query_parts):
        concerns.append("an unchanged reactant but for its stereo")
    elif task == "retro" and _stereo_free(query_parts) <= _stereo_free(parts):
        concerns.append("contains the product itself but for its stereo")
    if task in ("forward", "retro"):
        reactants, product = (answer, query) if task == "retro" else (query, answer)
        lacking = missing_atoms(reactants, product)
        if lacking:
            atoms = ", ".join(f"{n} {element}" for element, n in sorted(lacking.items()))
            concerns.append(f"{LACKS_ATOMS} ({atoms})" if task == "retro" else f"atoms no reactant has ({atoms})")
    mol = Chem.MolFromSmiles(answer)
    if mol is not None:
        # a metal's unpaired electrons, which RDKit counts ([Mg] two, [Cu+2] one), make no radical (nor are they drawn)
        if any(atom.GetNumRadicalElectrons() and atom.GetAtomicNum() in NONMETALS for atom in mol.GetAtoms()):
            concerns.append("unpaired electrons (a radical)")
        if mol.HasSubstructMatch(_OXYGEN_CHAIN):
            concerns.append("an O-O-O chain")
        # A product in a flask carries no net charge: USPTO-MIT writes a salt's both ions (0.2% of its recorded test
        # products, its noise, carry one), and the forward model gave a saponification's carboxylate alone, sane.
        # (USPTO-50K's reactants leave a Grignard's or an azide's counter-ion out: not for retrosynthesis.)
        if task == "forward" and (charge := Chem.GetFormalCharge(mol)):
            concerns.append(f"a net charge of {charge:+d} (an ion without its counter-ion)")
    return tuple(concerns)


def _salt_formed(molecules: set[str], query: str) -> bool:
    """Whether a forward answer's molecules are a salt made of the query's: its main molecule (main_molecule), a base
    that holds a nitrogen, beside an acid that salts it (_SALT_ACID). USPTO-MIT records a salt's formation so (imatinib
    and methanesulfonic acid give CS(=O)(=O)O.Cc1ccc(NC(=O)...)), and 37 of its 40,000 test reactions were flagged
    'an unchanged reactant', the right answer ranked below the sane ones. (The whole query given back stays 'same as
    the query': a Boc-amine and HCl answered so is the reactant, not its deprotection.)"""
    main = main_molecule(query)
    return main in molecules and _heavy_atoms(main)["N"] > 0 and any(
        Chem.MolFromSmiles(part).HasSubstructMatch(_SALT_ACID) for part in molecules - {main})


def _salt_apart(molecules: str) -> str:
    """The molecules of a valid (canonical) SMILES, a salt's ions among them as the acid and base they are made of
    (uncharged), where protons alone moved between them: triethylamine hydrochloride written as ions,
    CC[NH+](CC)CC.[Cl-], is CCN(CC)CC and Cl, as USPTO and the queries write it. A forward answer that gave the query
    back so escaped 'same as the query' (and a reactant given back so, 'an unchanged reactant'). Where the protons do
    not balance, the molecules stay as written: sodium acetate beside no acid (CC(=O)[O-].[Na+], acetic acid's proton
    gone to a hydroxide) is no acetic acid."""
    if not _CHARGED_ATOM.search(molecules):
        return molecules
    fragments = molecules.split(".")
    neutral = [_neutral_form(fragment) for fragment in fragments]
    return molecules if _charge_and_hydrogens(neutral) != _charge_and_hydrogens(fragments) else ".".join(neutral)


_CHARGED_ATOM = re.compile(r"\[[^\]]*[+-]")


def _neutral_form(molecule: str) -> str:
    """A molecule uncharged (a proton given or taken), or as it is where RDKit cannot read that form back: the
    Uncharger puts a proton on hexafluorophosphate's phosphorus (F[PH](F)(F)(F)(F)F)."""
    try:
        return canonical(uncharged(molecule))
    except ChemError:
        return molecule


def _charge_and_hydrogens(fragments: list[str]) -> tuple[int, int]:
    """The net charge of some molecules and their hydrogens: both are kept where protons alone move between them
    (borohydride made borane, a hydride lost, is no proton moved)."""
    mols = [mol_from_smiles(fragment) for fragment in fragments]
    return (sum(Chem.GetFormalCharge(mol) for mol in mols),
            sum(atom.GetTotalNumHs() for mol in mols for atom in mol.GetAtoms()))


def _stereo_free(molecules: set[str]) -> set[str | None]:
    return {leakage_key(smiles) for smiles in molecules}


def clear_caches() -> None:
    """Forget the answers checked so far (canonical_or_none, answer_concerns, heavy atoms): for timings
    in which several methods decode the same query, lest the later ones find its answers checked."""
    for cached in (canonical_or_none, answer_concerns, _heavy_atoms, _balanced_atoms):
        cached.cache_clear()


def missing_atoms(reactants: str, product: str) -> dict[str, int]:
    """Heavy atoms of `product` that `reactants` cannot supply, by element ({} when they can supply all).

    Every heavy atom of a product comes from a reactant (USPTO-50K lists as reactants exactly the
    molecules that give atoms to the product), so a proposed set that lacks some cannot make it:
    an undertrained retrosynthesis model writes such sets, dropping a ring or a carbon.

    An isotope-labelled atom is its own kind ('13C', '2H': _balanced_atoms), as no reaction makes or unmakes a label:
    a forward answer carrying a 13C or a deuterium the query lacks was not flagged."""
    return dict(_balanced_atoms(product) - _balanced_atoms(reactants))


@lru_cache(maxsize=4096)
def _balanced_atoms(smiles: str) -> Counter[str]:
    """The atoms of a SMILES that a reaction's balance counts, by nuclide: its heavy atoms by element, or as '13C'
    where labelled, and its labelled hydrogens ('2H', '3H'; a SMILES writes no other hydrogen as an atom that RDKit
    keeps). Raises ChemError for an invalid SMILES; cached and shared as _heavy_atoms."""
    return Counter(f"{atom.GetIsotope() or ''}{atom.GetSymbol()}" for atom in mol_from_smiles(smiles).GetAtoms()
                   if atom.GetAtomicNum() > 1 or atom.GetIsotope())


def main_molecule(smiles: str) -> str:
    """The molecule of a valid SMILES with the most heavy atoms (the first of equals): a reaction's main product
    beside its by-products (HCl, water, a salt's counter-ion), or a salt's organic ion."""
    return max(smiles.split("."), key=lambda part: sum(_heavy_atoms(part).values()))


def holds_carbon(smiles: str) -> bool:
    """Whether any molecule of `smiles` (valid SMILES) holds a carbon atom: the models know organic chemistry only."""
    return any(atom.GetAtomicNum() == 6 for atom in mol_from_smiles(smiles).GetAtoms())


def product_alone(molecules: str) -> str:
    """The molecule of a retrosynthesis query of several (valid SMILES) to take apart alone: its main molecule, or
    where that is a salt's ion (sodium acetate's CC(=O)[O-]) its neutral form (CC(=O)O, uncharged), the acid or
    base the salt is made from. USPTO-50K writes its products so: 4,184 of its 39,964 training products hold a
    carboxylic acid, 11 a carboxylate, and the retro model took the ions apart as if they were other molecules
    (acetate: an anilide's sulfonylation). A charge no proton explains (a quaternary ammonium, a nitro group)
    stays."""
    main = main_molecule(molecules)
    try:
        return uncharged(main)
    except ChemError:  # RDKit reads what canonical wrote; a caller's own text may not be
        return main


@lru_cache(maxsize=4096)
def _heavy_atoms(smiles: str) -> Counter[str]:
    """Heavy atoms of a SMILES by element; raises ChemError for an invalid one. Cached: a query's
    answers are all checked against it, and its writings give many of the same answers. The Counter
    is shared, so callers must not change it (subtraction makes a new one)."""
    return Counter(atom.GetSymbol() for atom in mol_from_smiles(smiles).GetAtoms() if atom.GetAtomicNum() > 1)


# A line that begins so ends the record in every SD reader, wherever it stands.
SD_RECORD_END = "$$$$"
# RDKit's templates for bridged and caged ring systems, in every 2D layout MolSpec makes (the app's pictures, an SD
# file's coordinates). Without them DABCO and quinuclidine were drawn as a hexagon with their third bridge straight
# across it (its carbons labelled C, at 180 degrees), and cubane as three squares in a row, two of its bonds hidden
# under others; 15 of USPTO-50K's first 1,500 test products are drawn otherwise with them (bridged bicycles, a
# tropane, a porphyrin), none of the others.
RING_TEMPLATES = True


@rdkit_quietly
def write_sd(stream: IO[str], records: Iterable[tuple[str, str, Mapping[str, object]]]) -> None:
    """Write (SMILES, title, properties) records to `stream` as an SD file, one record each and in order.

    The molecule gets 2D coordinates (stereo as wedges); a SMILES that RDKit cannot read, "" included,
    gives a record without atoms, so that its title and properties keep their place. The title line is
    `title`, or the SMILES where it is "". Properties that are None or "" are left out, the others written
    as text on one line (a line break as a space; spaces and tabs inside kept). A title or value that would
    begin with $$$$ gets a leading quote, lest a reader end the record there. Names go on one line, without
    < or > (which would end the name early in most readers), and stay distinct; a name that begins with _ gets
    an input_ prefix, as RDKit reads such a field as its own: _Name replaced the title, _id was hidden and
    __computedProps made the record unreadable. The data items are written here, not by RDKit's SDWriter,
    which stored such names among the molecule's own properties (and failed on some)."""
    for number, (smiles, title, properties) in enumerate(records, start=1):
        stream.write(_sd_record(number, smiles, title, properties))


def _sd_record(number: int, smiles: str, title: str, properties: Mapping[str, object]) -> str:
    from rdkit.Chem import AllChem

    mol = Chem.MolFromSmiles(smiles) if smiles else None
    if mol is None:
        mol = Chem.Mol()
    else:
        AllChem.Compute2DCoords(mol, useRingTemplates=RING_TEMPLATES)
    mol.SetProp("_Name", _sd_line(title) or _sd_line(smiles))  # a title of spaces is none
    lines = [Chem.MolToMolBlock(mol).rstrip("\n")]  # the header, the atoms and bonds, up to M  END
    taken: set[str] = set()
    for name, value in properties.items():
        text = "" if value is None else _sd_line(str(value))
        if not text:
            continue
        name = visible_controls(_one_line(name)).replace("<", "_").replace(">", "_") or "unnamed"
        while name in taken or name.startswith("_"):
            name = "input_" + name
        taken.add(name)
        lines += [f">  <{name}>  ({number}) ", text, ""]
    return "\n".join([*lines, SD_RECORD_END]) + "\n"


def _one_line(text: str) -> str:
    """Text on one line: its line breaks spaces, the spaces at its ends dropped (a value of spaces would be a blank
    line, which ends a data item)."""
    return " ".join(text.splitlines()).strip()


def _sd_line(text: str) -> str:
    line = visible_controls(_one_line(text))  # a NUL went into the file raw
    return "'" + line if line.startswith(SD_RECORD_END) else line


def sdf_text(records: Iterable[tuple[str, str, Mapping[str, object]]]) -> str:
    """The SD file of write_sd's records, in memory (a download)."""
    buffer = io.StringIO(newline="")
    write_sd(buffer, records)
    return buffer.getvalue()


# The most atoms, hydrogens included, an SD record may hold to be read: read unsanitized, a record costs little, but
# RDKit then removes its hydrogens and writes its SMILES in time that grows with the square of its atoms (a chain of
# 4,000 carbons with its 8,002 hydrogens 1.5 s; of 30,000 with theirs over two minutes), and writes a chain of 20,000
# atoms or more by a recursion that crashed the process (a 1.6 MB SD file of one 30,000-atom chain took the app down
# for every user). Its SMILES would hold a character per heavy atom at least, and none longer than MAX_SMILES_CHARS
# is read.
MAX_SD_ATOMS = MAX_SMILES_CHARS


@dataclass(frozen=True)
class SdRecord:
    """One record of an SD file: its molecule as SMILES ("" when RDKit cannot read it, and `problem`
    says why), its title line and its data fields as text, in the file's order."""
    smiles: str
    title: str
    fields: dict[str, str]
    problem: str = ""


@rdkit_quietly
def sd_records(text: str) -> list[SdRecord]:
    """An SD file's records in order. Each is read on its own, so one that RDKit cannot read (or whose
    valences it refuses) costs only itself; its title and fields are kept when RDKit can read them.
    The SMILES is RDKit's isomeric SMILES of the molblock, stereo taken from its wedges or coordinates."""
    blocks = re.split(rf"^{re.escape(SD_RECORD_END)}[ \t]*\r?$\n?", text, flags=re.MULTILINE)
    if blocks and not blocks[-1].strip():
        blocks.pop()  # after the last record's $$$$
    supplier = Chem.SDMolSupplier()
    records = []
    for number, block in enumerate(blocks, start=1):
        title = (block.splitlines() or [""])[0].strip()
        supplier.SetData(block + "\n\n$$$$\n", sanitize=False, removeHs=False)
        raw = next(supplier, None)
        if raw is None:
            why = (" is a reaction (an RXN file's $RXN block), not a molecule: paste the reaction as SMILES, "
                   "reactants>>product" if block.lstrip().startswith(("$RXN", "$RDFILE")) else
                   ": RDKit cannot read its molblock")
            records.append(SdRecord("", title, {}, f"SD record {number}{why}"))
            continue
        fields = {name: raw.GetProp(name) for name in raw.GetPropNames()}
        if raw.GetNumAtoms() > MAX_SD_ATOMS:
            records.append(SdRecord("", title, fields, f"SD record {number} holds {raw.GetNumAtoms():,} atoms "
                                    f"(hydrogens included), more than the {MAX_SD_ATOMS:,} read from one record: no "
                                    "model here reads a molecule that large"))
            continue
        supplier.SetData(block + "\n\n$$$$\n")  # sanitized, hydrogens removed, stereo perceived
        mol = next(supplier, None)
        if mol is None:
            records.append(SdRecord("", title, fields, f"SD record {number}: {_sanitize_error(raw)}"))
            continue
        records.append(SdRecord(Chem.MolToSmiles(mol), title, fields))
    return records


def _sanitize_error(mol) -> str:
    try:
        Chem.SanitizeMol(Chem.Mol(mol))
    except Exception as exc:  # noqa: BLE001  (RDKit raises several kinds; only the message matters here)
        return f"RDKit cannot sanitize it: {str(exc).strip()[:200]}"
    return "RDKit cannot read it"
