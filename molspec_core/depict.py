"""Pictures for the app: 2D SVG depictions, 3D molblocks and viewer HTML, and the provenance view
(which output tokens were copied from the query, and which atoms they became), and the reaction centre marked on
an answer (centre.py); and each picture in words, for a screen reader and anyone who cannot tell its colours apart.

Pure functions over RDKit and the standard library (py3Dmol is imported only by `viewer_html`);
the engine never imports this module and this module never imports streamlit.
"""
from __future__ import annotations

import functools
import html
import itertools
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future

from rdkit import Chem
from rdkit.Chem import AllChem, rdAbbreviations, rdCIPLabeler, rdDepictor
from rdkit.Chem.Draw import rdMolDraw2D
from rdkit.Geometry import Point2D, Point3D

from .chem import NONMETALS, RING_TEMPLATES
from .centre import reaction_centre

# One SMILES token that is an atom: a bracket atom, an organic-subset atom (two-letter halogens
# first), an aromatic atom or the wildcard. Everything else (bonds, branches, ring closures, dots)
# is not an atom.
ATOM_TOKEN = re.compile(r"\[[^\]]+\]|Br|Cl|B|C|N|O|P|S|F|I|b|c|n|o|s|p|\*")

# Span colours, light enough for dark text on top and distinct from each other (Okabe-Ito hues,
# lightened). The same colour marks a copied span in the prediction, its origin in the query and
# its atoms in the depiction.
SPAN_COLOURS = ("#f6c27a", "#8fd3f4", "#9be0b8", "#f5a3c7", "#c6b3f0", "#f2e58c", "#a9c8f0", "#f3b49a")
GENERATED_COLOUR = "#eceff3"
# The reaction centre on an answer (centre.py): atoms whose bonds change, and reactant atoms that leave.
CENTRE_COLOUR = "#f4a29a"  # Okabe-Ito vermillion, lightened
LEAVING_COLOUR = "#cfd4da"
# The light fills above are 2.0:1 and 1.5:1 on white and 1.3:1 apart: each mark also gets a ring that is at least
# 3:1 on white (WCAG 1.4.11), solid around an atom whose bonds change, dashed around one that leaves, so that the
# two read apart without their colours. Fill colour -> (ring colour, SVG dash pattern; "" for a solid ring).
RINGS = {CENTRE_COLOUR: ("#c0392b", ""), LEAVING_COLOUR: ("#5b6770", "3,2")}
# A double bond's (E) or (Z): RDKit's light violet (#7F7FFF) is 3.3:1 on white, faint at its few pixels; this is 7.8:1
BOND_NOTE_COLOUR = "#4040bf"
RING_RADIUS = 0.45  # 2D units (a bond is 1.5): just outside RDKit's highlight (0.3), clear of the next atom's
PIXELS_PER_UNIT = 28  # at most (RDKit's fixedBondLength; a bond is 1.5 units): small molecules are not blown up
FRAGMENT_GAP = 2.0  # 2D units between the atoms of two molecules side by side
LABEL_GAP = 0.8  # and between their atom labels (13CH4 beside H2 18O drew as one label, 2 px apart)
# A metal's ligands drawn over one another (two atoms of two ligands nearer than OVERLAP) are moved out along their
# bonds to it, LIGAND_STEP at a time, until each ligand's atoms are CLEAR of the others' or the bonds are
# LIGAND_STRETCH longer (2D units; a bond is 1.5)
OVERLAP, CLEAR = 0.5, 1.0
LIGAND_STEP, LIGAND_STRETCH = 0.25, 5.0
# Widths of an atom label's characters in 2D units, as RDKit draws them at any scale (measured: H2O 0.86,
# NH4+ 1.04): the element and its H, and the small isotope, H count and charge
LABEL_CHAR, LABEL_SMALL_CHAR = 0.35, 0.18
MAX_LAYOUTS = 64  # row wrappings tried for a query of many molecules (each costs a pass over them)
MAX_3D_HEAVY_ATOMS = 100  # bounds embedding time (about 2 s on a CPU at 100); larger predictions are not shown in 3D
# How long the 3D view waits for a model, all of a query's molecules together. A molecule ETKDG cannot embed took it
# long to give up (C60: 17 s from random coordinates, then 12 s from the eigenvalue start, all for no picture), and
# RDKit checks its own timeout only between attempts: one attempt on a 100-carbon ring ran 7 s, and the view waited
# 26 s for no model. Each start gets half of it as RDKit's timeout (or the time left); an attempt still running at
# the deadline is left to end in the background, and no start is begun after it. (With 2 s a start, as before,
# erythromycin and rapamycin, which ETKDG embedded in 2 to 3 s on a busy 2-core machine, got no model.)
EMBED_DEADLINE_S = 8


def is_atom_token(token: str) -> bool:
    return ATOM_TOKEN.fullmatch(token) is not None


def parse_in_order(smiles: str):
    """RDKit molecule whose atom i is the i-th atom written in `smiles`, or None if invalid.

    RDKit numbers atoms in the order the parser meets them; keeping explicit [H] atoms (which the
    default parser would remove) keeps that numbering aligned with the atom tokens.
    """
    params = Chem.SmilesParserParams()
    params.removeHs = False
    return Chem.MolFromSmiles(smiles, params) if smiles else None


def token_atom_indices(tokens: Sequence[str]) -> list[int | None] | None:
    """Per token, the RDKit atom index of `parse_in_order("".join(tokens))`, None for non-atoms.

    Returns None when the tokens do not parse or the atom count disagrees (then no atom can be
    attributed safely).
    """
    mol = parse_in_order("".join(tokens))
    if mol is None:
        return None
    indices: list[int | None] = []
    n_atoms = 0
    for token in tokens:
        if is_atom_token(token):
            indices.append(n_atoms)
            n_atoms += 1
        else:
            indices.append(None)
    return indices if n_atoms == mol.GetNumAtoms() else None


# ---- provenance ---------------------------------------------------------------------------------


def copy_spans(provenance: Sequence[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of copied tokens as (start, end, source_start): a run continues while each
    token was copied from the query position right after the previous token's."""
    spans: list[tuple[int, int, int]] = []
    for i, source in enumerate(provenance):
        if source < 0:
            continue
        if spans and spans[-1][1] == i and provenance[i - 1] + 1 == source:
            start, _, source_start = spans[-1]
            spans[-1] = (start, i + 1, source_start)
        else:
            spans.append((i, i + 1, source))
    return spans


def span_of_tokens(provenance: Sequence[int]) -> list[int | None]:
    """Per output token, the index of its copy span (None for generated tokens)."""
    owner: list[int | None] = [None] * len(provenance)
    for k, (start, end, _) in enumerate(copy_spans(provenance)):
        for i in range(start, end):
            owner[i] = k
    return owner


def span_colour(k: int) -> str:
    return SPAN_COLOURS[k % len(SPAN_COLOURS)]


def copied_atom_runs(tokens: Sequence[str], provenance: Sequence[int]) -> dict[int, int]:
    """Atom index -> the number (from 1) of the copied run that wrote it ({} when unmappable)."""
    atoms = token_atom_indices(tokens)
    if atoms is None:
        return {}
    owner = span_of_tokens(provenance)
    return {atom: k + 1 for atom, k in zip(atoms, owner) if atom is not None and k is not None}


def copied_atom_colours(tokens: Sequence[str], provenance: Sequence[int]) -> dict[int, str]:
    """Atom index -> span colour for the atoms written by copied tokens ({} when unmappable)."""
    return {atom: span_colour(run - 1) for atom, run in copied_atom_runs(tokens, provenance).items()}


# Text that a screen reader reads and the screen does not show (the usual clip pattern)
VISUALLY_HIDDEN = ("position:absolute;width:1px;height:1px;margin:-1px;padding:0;border:0;overflow:hidden;"
                   "clip:rect(0,0,0,0);white-space:nowrap")
RUN_BORDER = "#4a5560"  # 7.6:1 on white: a copied run's box reads without its colour (in greyscale, say)


def _token_box(token: str, background: str, title: str) -> str:
    return (f'<span title="{html.escape(title)}" style="background:{background};border-radius:3px;'
            f'padding:1px 3px;margin:1px;display:inline-block;font-family:monospace;font-size:0.95rem">'
            f"{html.escape(token)}</span>")


def _run_box(run: int | None, boxes: Sequence[str], unowned: str) -> str:
    """Consecutive token boxes of one copied run (numbered from 1), boxed and led by the run's number, or tokens of
    no run (None), led by the words `unowned` for a screen reader alone."""
    if run is None:
        return f'<span style="{VISUALLY_HIDDEN}">{unowned}: </span>' + "".join(boxes)
    number = (f'<span style="font-size:0.7rem;font-weight:600;vertical-align:top;margin:0 2px 0 1px">'
              f'<span style="{VISUALLY_HIDDEN}">run </span>{run}</span>')
    return (f'<span style="display:inline-block;border:1.5px solid {RUN_BORDER};border-radius:4px;'
            f'padding:0 1px;margin:1px 2px">{number}{"".join(boxes)}</span>')


def _row(boxes: Sequence[str], runs: Sequence[int | None], unowned: str) -> str:
    """A row of token boxes, each stretch of the same run (or of none) grouped by _run_box."""
    grouped = itertools.groupby(zip(runs, boxes), key=lambda pair: pair[0])
    return "".join(_run_box(run, [box for _, box in pairs], unowned) for run, pairs in grouped)


def _positions(first: int, end: int) -> str:
    """Positions first..end-1 (from 0) as people count them: 'token 3', 'tokens 1–2'."""
    return f"token {first + 1}" if end - first == 1 else f"tokens {first + 1}–{end}"


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def provenance_lines(tokens: Sequence[str], provenance: Sequence[int]) -> list[str]:
    """The copied runs and the generated tokens in words, positions counted from 1 (plain text, not escaped):
    'Run 1: tokens 1–2 (C C), copied from query tokens 1–2', then 'Generated by the model: tokens 3 and 6–7'."""
    lines = [f"Run {k}: {_positions(start, end)} ({' '.join(tokens[start:end])}), copied from query "
             f"{_positions(source, source + end - start)}"
             for k, (start, end, source) in enumerate(copy_spans(provenance), start=1)]
    generated = [i for i, source in enumerate(provenance) if source < 0]
    if generated:
        lines.append(f"Generated by the model: {'token' if len(generated) == 1 else 'tokens'} "
                     f"{_listed(_stretches(i + 1 for i in generated))}")
    return lines


def _stretches(numbers: Iterable[int]) -> list[str]:
    """Ascending numbers with each stretch of consecutive ones joined: 3, 6, 7, 8 -> ['3', '6–8']."""
    stretches = []
    for _, group in itertools.groupby(enumerate(numbers), key=lambda pair: pair[1] - pair[0]):
        run = [n for _, n in group]
        stretches.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
    return stretches


def provenance_html(source_tokens: Sequence[str], tokens: Sequence[str], provenance: Sequence[int]) -> str:
    """An HTML block: the query tokens and the prediction tokens, each copied run in its own colour and, for a
    reader who cannot tell colours apart, boxed and numbered alike in both rows; generated tokens grey and unboxed.
    A screen reader hears each run's number and 'generated' before the others; the positions every token's hover
    gives are also listed in words (provenance_lines) under a disclosure that a keyboard opens. Every token is
    escaped; only our own markup is raw."""
    owner = span_of_tokens(provenance)
    source_owner: dict[int, int] = {}
    for i, k in enumerate(owner):
        if k is not None and 0 <= provenance[i] < len(source_tokens):
            source_owner.setdefault(provenance[i], k)
    query_boxes, query_runs = [], []
    for j, token in enumerate(source_tokens):
        k = source_owner.get(j)
        query_runs.append(None if k is None else k + 1)
        if k is None:
            query_boxes.append(_token_box(token, "transparent", f"query token {j + 1}"))
        else:
            query_boxes.append(_token_box(token, span_colour(k), f"query token {j + 1}, copied into the prediction"))
    output_boxes = []
    for i, token in enumerate(tokens):
        k = owner[i]
        if k is None:
            output_boxes.append(_token_box(token, GENERATED_COLOUR, f"token {i + 1}: generated by the model"))
        else:
            output_boxes.append(_token_box(token, span_colour(k),
                                           f"token {i + 1}: copied from query token {provenance[i] + 1}"))
    output_runs = [None if k is None else k + 1 for k in owner]
    label = 'style="font-size:0.8rem;color:#555;margin:0.4rem 0 0.1rem 0"'
    listed = "".join(f"<li>{html.escape(line)}</li>" for line in provenance_lines(tokens, provenance))
    return (f'<div><div {label}>Query tokens (copied runs boxed and numbered)</div>'
            f'<div style="line-height:2.1">{_row(query_boxes, query_runs, "not copied")}</div>'
            f'<div {label}>Prediction tokens (boxed and numbered: copied from the query, run by run; grey, unboxed: '
            f'generated)</div>'
            f'<div style="line-height:2.1">{_row(output_boxes, output_runs, "generated")}</div>'
            f'<details style="font-size:0.85rem;margin-top:0.4rem"><summary>Every run and generated token in '
            f'words</summary><ul style="margin:0.2rem 0">{listed}</ul></details></div>')


# ---- 2D -------------------------------------------------------------------------------------------


def _rgb(colour: str) -> tuple[float, float, float]:
    value = colour.lstrip("#")
    return tuple(int(value[i:i + 2], 16) / 255 for i in (0, 2, 4))  # type: ignore[return-value]


def contrast_on_white(rgb: Sequence[float]) -> float:
    """The WCAG contrast ratio of a colour (red, green, blue from 0 to 1) on white."""
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb[:3])
    return 1.05 / (0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05)


LABEL_CONTRAST = 4.5  # WCAG 1.4.3 for text: what an atom label's colour has on white at least


def _readable_palette() -> dict[int, tuple[float, float, float]]:
    """RDKit's element colours, each too faint for text on white (S yellow 1.7:1, Cl green 2.0:1, O red 4.0:1)
    darkened, its hue kept, until it reads (LABEL_CONTRAST)."""
    palette = {}
    for element, colour in rdMolDraw2D.MolDraw2DSVG(1, 1).drawOptions().getAtomPalette().items():
        rgb = tuple(colour[:3])
        while contrast_on_white(rgb) < LABEL_CONTRAST:
            rgb = tuple(0.95 * c for c in rgb)
        palette[element] = rgb
    return palette


READABLE_PALETTE = _readable_palette()


def _wrapped(widths: Sequence[float], limit: float) -> list[list[int]]:
    """Items of these widths (each with its share of the room between items), in order, in rows no wider than
    `limit`, a new row only where the next item would not fit."""
    rows: list[list[int]] = [[]]
    used = 0.0
    for k, width in enumerate(widths):
        if rows[-1] and used + width > limit + 1e-9:  # (a limit is a sum of the same widths)
            rows.append([])
            used = 0.0
        used += width
        rows[-1].append(k)
    return rows


def label_reach(atom: Chem.Atom) -> float:
    """How far, in 2D units, the label RDKit draws for an atom can reach from its centre, either way (its H may
    go either side): 0 for a carbon drawn as a bare vertex. A ligand drawn as a label (LIGAND_LABELS) reaches as far
    as its label's characters, its subscripts small."""
    if atom.HasProp("atomLabel") and atom.GetProp("atomLabel") in LIGAND_LABELS:
        small = "".join(re.findall(r"<sub>(.*?)</sub>", LIGAND_LABELS[atom.GetProp("atomLabel")][0]))
        return (len(atom.GetProp("atomLabel")) - len(small)) * LABEL_CHAR + len(small) * LABEL_SMALL_CHAR \
            - LABEL_CHAR / 2
    plain = not (atom.GetIsotope() or atom.GetFormalCharge() or atom.GetNumRadicalElectrons())
    if atom.GetAtomicNum() == 6 and atom.GetDegree() and plain:
        return 0.0
    hydrogens = atom.GetTotalNumHs()
    small = len(atom_label(atom)) - len(atom.GetSymbol()) + (len(str(hydrogens)) if hydrogens > 1 else 0)
    large = len(atom.GetSymbol()) + (1 if hydrogens else 0)
    return large * LABEL_CHAR + small * LABEL_SMALL_CHAR + atom.GetNumRadicalElectrons() * LABEL_SMALL_CHAR \
        - LABEL_CHAR / 2


def laid_out(mol: Chem.Mol, width: int = 360, height: int = 240) -> Chem.Mol:
    """A copy of `mol` with 2D coordinates in which its molecules (the fragments of a SMILES with
    dots) stand apart in centred rows, in the order written, wrapped so that a picture of width x
    height pixels draws them about as large as it can, in as few rows as that allows. RDKit's own
    packing can set one molecule's atom labels on another's (a solvent drawn over an amine's NH2);
    each molecule keeps RDKit's layout and is only moved."""
    mol = Chem.Mol(mol)
    fragments: list[list[int]] = []
    pieces = Chem.GetMolFrags(mol, asMols=True, sanitizeFrags=False, fragsMolAtomMapping=fragments)
    if len(pieces) < 2:
        rdDepictor.Compute2DCoords(mol, useRingTemplates=RING_TEMPLATES)
        _ligands_spread(mol)
        return mol
    # each molecule laid out alone: RDKit's packing of them all took 5 s for 300 small ones
    conf = Chem.Conformer(mol.GetNumAtoms())
    for piece, atoms in zip(pieces, fragments):
        rdDepictor.Compute2DCoords(piece, useRingTemplates=RING_TEMPLATES)
        _ligands_spread(piece)
        for local, atom in enumerate(atoms):
            conf.SetAtomPosition(atom, piece.GetConformer().GetAtomPosition(local))
    conf.Set3D(False)
    mol.RemoveAllConformers()
    conf = mol.GetConformer(mol.AddConformer(conf, assignId=True))  # (the molecule keeps a copy)
    # each molecule's box, and the room beside it on either side that it takes from its neighbour's: half
    # FRAGMENT_GAP, or more where its labels reach out past its atoms (label_reach), to keep LABEL_GAP between labels
    boxes, sides = [], []
    for atoms in fragments:
        xs = [conf.GetAtomPosition(i).x for i in atoms]
        ys = [conf.GetAtomPosition(i).y for i in atoms]
        boxes.append((min(xs), max(xs), min(ys), max(ys)))
        reach = [label_reach(mol.GetAtomWithIdx(i)) for i in atoms]
        sides.append((max(FRAGMENT_GAP, 2 * (min(xs) - min(x - r for x, r in zip(xs, reach))) + LABEL_GAP) / 2,
                      max(FRAGMENT_GAP, 2 * (max(x + r for x, r in zip(xs, reach)) - max(xs)) + LABEL_GAP) / 2))
    widths = [x1 - x0 + left + right for (x0, x1, _, _), (left, right) in zip(boxes, sides)]  # room included
    heights = [y1 - y0 for _, _, y0, y1 in boxes]

    def row_width(row: list[int]) -> float:  # from its first atom to its last
        return sum(widths[k] for k in row) - sides[row[0]][0] - sides[row[-1]][1]

    def scale(rows: list[list[int]]) -> float:  # pixels per 2D unit these rows are drawn at
        tall = sum(max(heights[k] for k in row) for row in rows) + FRAGMENT_GAP * (len(rows) - 1)
        wide = max(map(row_width, rows))
        return min(PIXELS_PER_UNIT, 0.9 * width / max(wide, 1e-9), 0.9 * height / max(tall, 1e-9))

    # every row width a run of consecutive molecules can have is a wrapping to try, widest first (at most
    # MAX_LAYOUTS of them, evenly spread); the fewest rows that draw within 10% of the largest win (A + B
    # on one line reads as a reaction does)
    ends = list(itertools.accumulate(widths, initial=0.0))
    limits = sorted({ends[j] - ends[i] for i in range(len(widths)) for j in range(i + 1, len(widths) + 1)},
                    reverse=True)
    layouts = [_wrapped(widths, limit) for limit in limits[::math.ceil(len(limits) / MAX_LAYOUTS)]]
    largest = max(map(scale, layouts))
    rows = next(layout for layout in layouts if scale(layout) >= 0.9 * largest)
    widest = max(map(row_width, rows))
    top = 0.0
    for row in rows:
        row_height = max(heights[k] for k in row)
        left = (widest - row_width(row)) / 2  # rows centred under each other
        left -= sides[row[0]][0]  # (the room left of the first molecule)
        for k in row:
            x0, _, y0, y1 = boxes[k]
            dx, dy = left + sides[k][0] - x0, top - row_height / 2 - (y0 + y1) / 2  # centred on the row's middle line
            for i in fragments[k]:
                p = conf.GetAtomPosition(i)
                conf.SetAtomPosition(i, Point3D(p.x + dx, p.y + dy, 0.0))
            left += widths[k]
        top -= row_height + FRAGMENT_GAP
    return mol


def _ligands(mol: Chem.Mol) -> list[tuple[int, int, list[int]]]:
    """Each ligand of each metal atom (not in chem.NONMETALS) bonded to it by one bond (no chelate): (the metal, the
    ligand's atom bonded to it, the ligand's atoms: all those reached from that one but through the metal)."""
    found = []
    for metal in mol.GetAtoms():
        if metal.GetAtomicNum() in NONMETALS:
            continue
        for first in (n.GetIdx() for n in metal.GetNeighbors()):
            atoms, todo, ring = [first], [first], False
            while todo:
                at = todo.pop()
                for n in mol.GetAtomWithIdx(at).GetNeighbors():
                    ring |= n.GetIdx() == metal.GetIdx() and at != first  # a chelate: it moves with its metal
                    if n.GetIdx() != metal.GetIdx() and n.GetIdx() not in atoms:
                        atoms.append(n.GetIdx())
                        todo.append(n.GetIdx())
            if not ring:
                found.append((metal.GetIdx(), first, atoms))
    return found


def _nearest_apart(points: Sequence[Point3D], groups: Sequence[int]) -> float:
    """The least distance between two points of different groups (inf where there are none)."""
    return min((math.dist((a.x, a.y), (b.x, b.y)) for (a, g), (b, h) in itertools.combinations(zip(points, groups), 2)
                if g != h), default=math.inf)


def _ligands_spread(mol: Chem.Mol) -> None:
    """Move a metal's ligands out along their bonds to it where RDKit laid them over one another (OVERLAP): it lays
    four PPh3 bonded to a square-planar palladium (Pd(PPh3)4 as Ketcher or ChemDraw write it) a bond's length from
    it, and their twelve phenyls fell on one another, as Wilkinson's catalyst's nine. All ligands move out alike,
    LIGAND_STEP at a time, until no two ligands' atoms are nearer than CLEAR (or LIGAND_STRETCH); the metal's
    bonds are drawn longer, and each ligand keeps RDKit's layout. In place, on the molecule's 2D conformer."""
    ligands = _ligands(mol)
    if len(ligands) < 2:
        return
    groups = [-1] * mol.GetNumAtoms()
    for k, (_, _, atoms) in enumerate(ligands):
        for i in atoms:
            groups[i] = k
    conf = mol.GetConformer()
    start = [Point3D(*conf.GetAtomPosition(i)) for i in range(mol.GetNumAtoms())]
    if _nearest_apart(start, groups) >= OVERLAP:
        return
    moved = list(start)
    for step in range(1, round(LIGAND_STRETCH / LIGAND_STEP) + 1):
        for metal, first, atoms in ligands:
            along = start[first] - start[metal]
            along *= step * LIGAND_STEP / max(along.Length(), 1e-9)
            for i in atoms:
                moved[i] = start[i] + along
        if _nearest_apart(moved, groups) >= CLEAR:
            break
    for i, point in enumerate(moved):
        conf.SetAtomPosition(i, point)


# Triphenylphosphine bonded to a metal, drawn as chemists write it: USPTO writes Pd(PPh3)4 with its four P-Pd bonds
# (486 of USPTO-MIT's 40,000 test queries), and its twelve phenyls, drawn whole, took a query's picture over
LIGAND_ABBREVIATIONS = rdAbbreviations.ParseAbbreviations("PPh3 *P(c1ccccc1)(c1ccccc1)c1ccccc1")
LIGAND_LABELS = {"PPh3": ("PPh<sub>3</sub>", "Ph<sub>3</sub>P")}  # each label as drawn facing right, and left


ORIGINAL_INDEX = "molspec_index"  # an atom's index before a ligand's atoms were drawn as one label


def _ligands_abbreviated(mol: Chem.Mol, atom_colours: Mapping[int, str]) -> tuple[Chem.Mol, dict[int, str]]:
    """A copy of `mol` with each triphenylphosphine bonded to a metal (not in chem.NONMETALS) drawn as one label,
    PPh3 (LIGAND_ABBREVIATIONS), and `atom_colours` by the copy's atom indices; `mol` itself where none is (a
    phosphonium salt's PPh3 keeps its atoms), or each ligand holds a coloured atom. The marks of a reaction centre
    name atoms by index, and a Sonogashira query's PdCl2(PPh3)2, drawn whole where any atom was marked (as the
    Predict page marks every answer's reactants), drew iodobenzene and the alkyne a quarter of their size."""
    labelled = rdAbbreviations.LabelMolAbbreviations(mol, LIGAND_ABBREVIATIONS, 1.0)

    def on_metal(group: Chem.SubstanceGroup) -> bool:
        atoms = set(group.GetAtoms())
        return any(labelled.GetAtomWithIdx(end).GetAtomicNum() not in NONMETALS
                   for b in group.GetBonds() for bond in [labelled.GetBondWithIdx(b)]
                   for end in (bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()) if end not in atoms)

    groups = [group for group in Chem.GetMolSubstanceGroups(labelled)
              if on_metal(group) and not set(group.GetAtoms()) & set(atom_colours)]
    if not groups:
        return mol, dict(atom_colours)
    Chem.ClearMolSubstanceGroups(labelled)
    for group in groups:
        Chem.AddMolSubstanceGroup(labelled, group)
    for atom in labelled.GetAtoms():
        atom.SetIntProp(ORIGINAL_INDEX, atom.GetIdx())
    condensed = rdAbbreviations.CondenseAbbreviationSubstanceGroups(labelled)
    for atom in condensed.GetAtoms():
        if atom.HasProp("atomLabel") and atom.GetProp("atomLabel") in LIGAND_LABELS:
            atom.SetNumRadicalElectrons(0)  # a label's atom is drawn without dots
            right, left = LIGAND_LABELS[atom.GetProp("atomLabel")]
            atom.SetProp("_displayLabel", right)
            atom.SetProp("_displayLabelW", left)
    condensed.UpdatePropertyCache(strict=False)
    Chem.FastFindRings(condensed)
    return condensed, {atom.GetIdx(): atom_colours[atom.GetIntProp(ORIGINAL_INDEX)] for atom in condensed.GetAtoms()
                       if atom.HasProp(ORIGINAL_INDEX) and atom.GetIntProp(ORIGINAL_INDEX) in atom_colours}


def _without_metal_radicals(mol: Chem.Mol) -> Chem.Mol:
    """A copy of `mol` whose metal atoms (not in chem.NONMETALS) have no radical electrons, which RDKit counts for
    them (copper(II) one, magnesium metal two) and no chemist draws (Cu2+ with a radical dot); `mol` itself where
    none has any."""
    metals = [a.GetIdx() for a in mol.GetAtoms() if a.GetNumRadicalElectrons() and a.GetAtomicNum() not in NONMETALS]
    if not metals:
        return mol
    mol = Chem.Mol(mol)
    for i in metals:
        mol.GetAtomWithIdx(i).SetNumRadicalElectrons(0)
    return mol


def _carbons_labelled(mol: Chem.Mol) -> Chem.Mol:
    """A copy of `mol` in which each bonded carbon RDKit would draw as a bare vertex but for its unpaired electrons,
    or that it labels (an isotope or a charge) without its hydrogens, is labelled with them, as CH2, 13CH3 or CH2+;
    `mol` itself where none is. On a bare vertex a radical's dot was a pixel or two at the page's size: an answer
    flagged as a radical (chem.answer_concerns) showed none, an ethyl radical a plain bond. A label without its
    hydrogens says the atom has none: a 13C-labelled methyl ester was drawn O-13C, a primary carbocation C+."""
    marked = [a for a in mol.GetAtoms() if a.GetAtomicNum() == 6 and a.GetDegree() and (
        (a.GetNumRadicalElectrons() and not (a.GetIsotope() or a.GetFormalCharge()))
        or ((a.GetIsotope() or a.GetFormalCharge()) and a.GetTotalNumHs()))]
    if not marked:
        return mol
    mol = Chem.Mol(mol)
    for atom in marked:
        hydrogens, charge = atom.GetTotalNumHs(), atom.GetFormalCharge()
        h = ("H" + (f"<sub>{hydrogens}</sub>" if hydrogens > 1 else "")) if hydrogens else ""
        mass = f"<sup>{atom.GetIsotope()}</sup>" if atom.GetIsotope() else ""
        sign = f"<sup>{abs(charge) if abs(charge) > 1 else ''}{'+' if charge > 0 else '-'}</sup>" if charge else ""
        drawn = mol.GetAtomWithIdx(atom.GetIdx())
        drawn.SetProp("_displayLabel", f"{mass}C{h}{sign}")
        drawn.SetProp("_displayLabelW", f"{h}{mass}C{sign}")  # the label as RDKit writes it facing left
    return mol


def _ring_carbons_unlabelled(mol: Chem.Mol) -> Chem.Mol:
    """A copy of `mol` whose plain ring carbons of two bonds, none of them sp, are drawn as bare vertices, as every
    chemist draws them; `mol` itself where it has none. RDKit writes 'C' on a carbon whose two bonds it draws almost
    in line (within 18 degrees: meant for an allene's centre), and it draws a ring of 20 atoms or more as a circle,
    each angle 162 degrees or wider: a macrocyclic lactone came out with a small 'c' on each of its 28 ring carbons,
    read as aromatic. An sp carbon (a cyclooctyne's, an allene's in a ring) keeps RDKit's label."""
    bare = [a.GetIdx() for a in mol.GetAtoms() if a.GetAtomicNum() == 6 and a.IsInRing() and a.GetDegree() == 2
            and a.GetHybridization() != Chem.HybridizationType.SP and not a.HasProp("_displayLabel")
            and not (a.GetIsotope() or a.GetFormalCharge() or a.GetNumRadicalElectrons())]
    if not bare:
        return mol
    mol = Chem.Mol(mol)
    for i in bare:
        mol.GetAtomWithIdx(i).SetProp("_displayLabel", "")  # RDKit draws no label for an empty one
    return mol


# The CIP labeler's recursive comparisons at most (RDKit: 1,250,000 take about a second; most molecules need fewer
# than 10,000): a highly symmetric one is drawn with RDKit's legacy labels rather than hold the page.
CIP_COMPARISONS = 250_000


def _cip_labelled(mol: Chem.Mol) -> Chem.Mol:
    """A copy of `mol` with its stereo labels (R/S, r/s, E/Z) from RDKit's CIP labeler, which the drawing's
    annotations then show; `mol` itself where the labeler gives up (CIP_COMPARISONS), drawn with RDKit's legacy labels.
    Those rank neighbours by an approximation of the CIP rules: 103 of USPTO-50K's 2,077 test and validation products
    with stereo were labelled otherwise, a pyrrolidine's (S)-centre drawn as (R), and a trans-1,4-cyclohexane's
    (1r,4r) centres not at all."""
    labelled = Chem.Mol(mol)
    try:
        rdCIPLabeler.AssignCIPLabels(labelled, maxRecursiveIterations=CIP_COMPARISONS)
    except RuntimeError:  # "Max Iterations Exceeded in CIP label calculation"
        return mol
    return labelled


def mol_svg(mol, width: int = 360, height: int = 240, atom_colours: dict[int, str] | None = None) -> str:
    """SVG of a molecule, its fragments apart (laid_out), its stereo labelled by the CIP rules (_cip_labelled), its
    metal atoms without radical dots, its carbon radicals and labelled carbons shown with their hydrogens
    (_carbons_labelled) and its ring carbons unlabelled (_ring_carbons_unlabelled); atoms in `atom_colours` (and
    bonds between two of them) are highlighted."""
    mol = _ring_carbons_unlabelled(_carbons_labelled(_without_metal_radicals(_cip_labelled(mol))))
    mol, atom_colours = _ligands_abbreviated(mol, atom_colours or {})
    mol = laid_out(mol, width, height)
    drawer = rdMolDraw2D.MolDraw2DSVG(width, height)
    options = drawer.drawOptions()
    options.addStereoAnnotation = True
    options.fixedBondLength = PIXELS_PER_UNIT
    options.bondNoteColour = _rgb(BOND_NOTE_COLOUR)
    options.updateAtomPalette(READABLE_PALETTE)
    atoms = {i: _rgb(c) for i, c in atom_colours.items()}
    bonds = {}
    for bond in mol.GetBonds():
        a, b = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        if a in atom_colours and atom_colours[a] == atom_colours.get(b):
            bonds[bond.GetIdx()] = atoms[a]
    rdMolDraw2D.PrepareAndDrawMolecule(drawer, mol, highlightAtoms=list(atoms), highlightAtomColors=atoms,
                                       highlightBonds=list(bonds), highlightBondColors=bonds)
    rings = _rings(drawer, atom_colours)
    drawer.FinishDrawing()
    text = drawer.GetDrawingText()
    return text.replace("</svg>", rings + "</svg>") if rings else text


def _rings(drawer: rdMolDraw2D.MolDraw2DSVG, atom_colours: dict[int, str]) -> str:
    """SVG circles around the drawn atoms whose colour is a reaction-centre colour (RINGS), "" for none."""
    marked = sorted((i, RINGS[colour]) for i, colour in atom_colours.items() if colour in RINGS)
    if not marked:
        return ""
    origin, unit = drawer.GetDrawCoords(Point2D(0, 0)), drawer.GetDrawCoords(Point2D(1, 0))
    radius = RING_RADIUS * math.hypot(unit.x - origin.x, unit.y - origin.y)  # the drawing's scale, in pixels
    circles = []
    for atom, (stroke, dashes) in marked:
        centre = drawer.GetDrawCoords(atom)
        dashed = f";stroke-dasharray:{dashes}" if dashes else ""
        circles.append(f"<circle class='centre-ring' cx='{centre.x:.1f}' cy='{centre.y:.1f}' r='{radius:.1f}' "
                       f"style='fill:none;stroke:{stroke};stroke-width:2px{dashed}'/>")
    return "\n".join(circles) + "\n"


def smiles_svg(smiles: str, width: int = 360, height: int = 240, atom_colours: dict[int, str] | None = None
               ) -> str | None:
    """SVG of a SMILES (several molecules apart, in rows: laid_out), or None when RDKit cannot read it;
    `atom_colours` as mol_svg's, by atom index as RDKit reads the SMILES. The last SVG_CACHE pictures are kept: a
    page draws its structures again at every rerun (any widget touched), and RDKit lays out a 20-residue peptide
    (221 atoms) in about 1.6 s, so a query and five answers of that size held each rerun some 10 s."""
    return _smiles_svg(smiles, width, height, tuple(sorted((atom_colours or {}).items())))


SVG_CACHE = 128  # pictures: a page of 50 answers and its query, twice over (about 20 KB each, a large one 300 KB)


@functools.lru_cache(maxsize=SVG_CACHE)
def _smiles_svg(smiles: str, width: int, height: int, atom_colours: tuple[tuple[int, str], ...]) -> str | None:
    mol = Chem.MolFromSmiles(smiles) if smiles else None
    return mol_svg(mol, width, height, dict(atom_colours)) if mol is not None else None


def centre_colours(reactants: str, product: str, on: str) -> dict[int, str]:
    """Atom index -> colour marking the reaction centre of reactants >> product (centre.reaction_centre) on
    the product (`on` "product": its atoms whose bonds change) or on the reactants ("reactants": theirs,
    and the atoms that leave); {} where no centre is traced."""
    centre = reaction_centre(reactants, product)
    if centre is None:
        return {}
    if on == "product":
        return dict.fromkeys(centre.product_atoms, CENTRE_COLOUR)
    leaving = dict.fromkeys(centre.leaving_atoms, LEAVING_COLOUR)
    return {**leaving, **dict.fromkeys(centre.reactant_atoms, CENTRE_COLOUR)}


def step_centre_colours(reactants: Sequence[str], product: str) -> tuple[dict[int, str], list[dict[int, str]]]:
    """centre_colours for a reaction whose molecules are drawn one by one: the product's, and each reactant's
    by its own atom indices."""
    joined = ".".join(reactants)
    on_product = centre_colours(joined, product, on="product")
    on_reactants = centre_colours(joined, product, on="reactants")
    each, start = [], 0
    for smiles in reactants:
        mol = Chem.MolFromSmiles(smiles)
        atoms = mol.GetNumAtoms() if mol is not None else 0
        each.append({i - start: c for i, c in on_reactants.items() if start <= i < start + atoms})
        start += atoms
    return on_product, each


def provenance_svg(tokens: Sequence[str], provenance: Sequence[int], width: int = 420,
                   height: int = 300) -> str | None:
    """SVG of the raw predicted SMILES with its copied atoms in their span colours, each labelled with its run's
    number (the token boxes' numbers)."""
    mol = parse_in_order("".join(tokens))
    if mol is None:
        return None
    for atom, run in copied_atom_runs(tokens, provenance).items():  # the run's number, as the token boxes show it
        mol.GetAtomWithIdx(atom).SetProp("atomNote", str(run))
    return mol_svg(mol, width, height, copied_atom_colours(tokens, provenance))


# ---- text alternatives ----------------------------------------------------------------------------


def atoms_in_words(mol: Chem.Mol, atoms: Iterable[int]) -> str:
    """'atom 2 (C)', 'atoms 2 (C) and 4 (N)': atoms numbered from 1 in the order the SMILES writes them (RDKit's),
    each with its element as the picture labels it (atom_label: 2H, Na+)."""
    named = [f"{i + 1} ({atom_label(mol.GetAtomWithIdx(i))})" for i in sorted(atoms)]
    return f"atom {named[0]}" if len(named) == 1 else f"atoms {_listed(named)}"


def atom_label(atom: Chem.Atom) -> str:
    """An atom's element with its mass number and charge as chemists write them: C, 2H, 13C, Na+, O-, Mg2+. The
    element alone named a deuterium that leaves 'H' and a sodium ion 'Na'."""
    charge = atom.GetFormalCharge()
    sign = "" if not charge else f"{abs(charge) if abs(charge) > 1 else ''}{'+' if charge > 0 else '-'}"
    return f"{atom.GetIsotope() or ''}{atom.GetSymbol()}{sign}"


def centre_in_words(smiles: str, atom_colours: dict[int, str]) -> str:
    """The reaction-centre marks of centre_colours in words, for a picture's text alternative: 'reaction centre
    (estimated): bonds change at atoms 2 (C) and 4 (N), and atom 3 (Cl) leaves'; "" where none is marked."""
    mol = Chem.MolFromSmiles(smiles) if smiles else None
    if mol is None:
        return ""
    change = [i for i, c in atom_colours.items() if c == CENTRE_COLOUR and i < mol.GetNumAtoms()]
    leave = [i for i, c in atom_colours.items() if c == LEAVING_COLOUR and i < mol.GetNumAtoms()]
    parts = [f"bonds change at {centre_atoms_in_words(mol, change)}"] if change else []
    if leave:
        parts.append(f"{centre_atoms_in_words(mol, leave)} {'leaves' if len(leave) == 1 else 'leave'}")
    return f"reaction centre (estimated): {', and '.join(parts)}" if parts else ""


def centre_atoms_in_words(mol: Chem.Mol, atoms: Sequence[int]) -> str:
    """Marked atoms for a text alternative: each with its element where few (atoms_in_words); over ALT_CENTRE_ATOMS,
    their count, numbers in stretches and elements counted: '17 atoms, numbers 39–41 and 47–60 (12 C, 5 N)'. Each
    named, a peptide answer's 17 atoms made a text alternative of over 300 characters, heard at every answer."""
    if len(atoms) <= ALT_CENTRE_ATOMS:
        return atoms_in_words(mol, atoms)
    counts = Counter(atom_label(mol.GetAtomWithIdx(i)) for i in atoms)
    elements = ", ".join(f"{n} {label}" for label, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    return f"{len(atoms)} atoms, numbers {_listed(_stretches(sorted(i + 1 for i in atoms)))} ({elements})"


ALT_SMILES_CHARS = 80  # a SMILES longer than this is not read out whole in a picture's text alternative
ALT_SMILES_START = 40  # characters of it read out, then its formula and size
ALT_RUN_ATOMS = 8  # a copied run of more atoms is read as its size and its first and last atoms
ALT_CENTRE_ATOMS = 6  # more marked atoms of a reaction centre are read as their count, numbers and elements


def smiles_in_words(smiles: str) -> str:
    """A SMILES for a text alternative: itself where short; a long one (a 300-character peptide was read out whole)
    as its molecular formula, its heavy atoms and its first characters, cut after a bracket atom, not inside."""
    if len(smiles) <= ALT_SMILES_CHARS:
        return smiles
    start = smiles[:ALT_SMILES_START]
    if start.rfind("[") > start.rfind("]"):
        start = smiles[:smiles.index("]", ALT_SMILES_START) + 1] if "]" in smiles[ALT_SMILES_START:] else start
    mol = Chem.MolFromSmiles(smiles)
    size = (f"{AllChem.CalcMolFormula(mol)}, {mol.GetNumHeavyAtoms()} heavy atoms" if mol is not None
            else "a SMILES RDKit cannot read")
    return f"{size} (SMILES of {len(smiles)} characters, starting {start}…)"


def structure_alt(smiles: str, atom_colours: dict[int, str] | None = None) -> str:
    """The text alternative of smiles_svg's picture: the SMILES it draws (smiles_in_words: a long one as its
    formula), and the reaction centre marked on it in words ('Structure of CCOC(C)=O; reaction centre (estimated):
    ...'; no full stop, which a SMILES could be read to end with). Plain text: the page hands it to the image as an
    attribute value, never as markup."""
    marks = centre_in_words(smiles, atom_colours or {})
    return f"Structure of {smiles_in_words(smiles)}" + (f"; {marks}" if marks else "")


def provenance_alt(tokens: Sequence[str], provenance: Sequence[int]) -> str:
    """The text alternative of provenance_svg's picture: the answer as written, and which atoms each copied run
    wrote (by the runs' numbers, as the token boxes and the picture's labels show them); a long answer as its
    formula (smiles_in_words), a run of many atoms as its size and its first and last atoms."""
    smiles = "".join(tokens)
    mol = parse_in_order(smiles)
    runs = copied_atom_runs(tokens, provenance)
    if mol is None or not runs:
        return f"Structure of {smiles_in_words(smiles)}"
    by_run = []
    for run in sorted(set(runs.values())):
        atoms = sorted(a for a, r in runs.items() if r == run)
        if len(atoms) > ALT_RUN_ATOMS:
            first, last = (f"{a + 1} ({atom_label(mol.GetAtomWithIdx(a))})" for a in (atoms[0], atoms[-1]))
            by_run.append(f"run {run}, {len(atoms)} atoms from atom {first} to atom {last}")
        else:
            by_run.append(f"run {run}, {atoms_in_words(mol, atoms)}")
    return (f"Structure of {smiles_in_words(smiles)} as written; atoms written by copied tokens, by run: "
            f"{'; '.join(by_run)}")


# ---- 3D -------------------------------------------------------------------------------------------


MOLECULE_GAP_3D = 3.0  # Å between the boxes of two molecules in 3D: clear of each other's hydrogens


def molblock_3d(smiles: str, seed: int = 0xC0FFEE) -> str | None:
    """MDL molblock with 3D coordinates (hydrogens added, ETKDG then MMFF), or None when the
    molecule cannot be read, is too large, or cannot be embedded by EMBED_DEADLINE_S. The molecules of a SMILES with
    dots (a reactant set, a salt) are embedded one by one and set side by side along x: embedded together, RDKit
    laid them over one another (two ethanols' atoms on the same points)."""
    deadline = time.monotonic() + EMBED_DEADLINE_S
    return _by_deadline(lambda: _molblock_3d(smiles, seed, deadline), EMBED_DEADLINE_S)


def _by_deadline(work: Callable[[], str | None], timeout: float) -> str | None:
    """work()'s result (or what it raised), or None where it has not ended `timeout` seconds on: it runs on in a
    thread of its own until it ends (RDKit's embedding lets other threads run meanwhile)."""
    future: Future[str | None] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # noqa: BLE001  (handed to the caller, as a direct call would raise it)
            future.set_exception(exc)

    threading.Thread(target=run, name="molspec-3d", daemon=True).start()
    try:
        return future.result(timeout)
    except TimeoutError:
        return None


def _molblock_3d(smiles: str, seed: int, deadline: float) -> str | None:
    mol = Chem.MolFromSmiles(smiles) if smiles else None
    if mol is None or mol.GetNumHeavyAtoms() > MAX_3D_HEAVY_ATOMS:
        return None
    mol = Chem.AddHs(mol)
    fragments: list[tuple[int, ...]] = []
    pieces = Chem.GetMolFrags(mol, asMols=True, sanitizeFrags=False, fragsMolAtomMapping=fragments)
    conf = Chem.Conformer(mol.GetNumAtoms())
    left = 0.0
    for piece, atoms in zip(pieces, fragments):
        # a piece left unsanitized has no ring information, and MMFF raised on each molecule of several but an
        # aromatic one ('RingInfo not initialized'): ethanol beside benzene kept ETKDG's rough geometry unsaid
        Chem.GetSymmSSSR(piece)
        positions = _embedded(piece, seed, deadline)
        if positions is None:
            return None
        x0 = min(p.x for p in positions)
        for atom, p in zip(atoms, positions):
            conf.SetAtomPosition(atom, Point3D(p.x - x0 + left, p.y, p.z))
        left += max(p.x for p in positions) - x0 + MOLECULE_GAP_3D
    mol.AddConformer(conf, assignId=True)
    return Chem.MolToMolBlock(mol)


def _embedded(mol: Chem.Mol, seed: int, deadline: float) -> list[Point3D] | None:
    """3D positions of one molecule's atoms (hydrogens included), centred on the origin, or None when it
    cannot be embedded (ETKDG gives up, or raises, as it does on rings of wildcard atoms) before `deadline`
    (time.monotonic)."""
    large = mol.GetNumHeavyAtoms() > 50
    params = AllChem.ETKDGv3()
    params.randomSeed = seed
    # Random starting coordinates embed large molecules faster and more reliably than the default
    # eigenvalue start; each start is the fallback of the other.
    for random_start in (large, not large):
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        params.useRandomCoords = random_start
        params.timeout = max(1, math.ceil(min(left, EMBED_DEADLINE_S / 2)))  # whole seconds; the other start's too
        try:
            if AllChem.EmbedMolecule(mol, params) == 0:
                break
        except RuntimeError:  # an invariant of its own broken (wildcard rings: "upper bound not greater than lower")
            return None
    else:
        return None
    try:
        AllChem.MMFFOptimizeMolecule(mol, maxIters=200)
    except Exception:  # noqa: BLE001  (no MMFF parameters for an atom type: keep ETKDG geometry)
        pass
    positions = list(mol.GetConformer().GetPositions())
    centre = [sum(axis) / len(positions) for axis in zip(*positions)]
    return [Point3D(*(float(v - c) for v, c in zip(p, centre))) for p in positions]


def viewer_html(molblock: str, js_url: str, height: int = 400) -> str:
    """A self-contained page that shows a molblock as balls and sticks with 3Dmol.js loaded from `js_url`.

    The molblock goes into a script as JSON; RDKit molblocks hold no '<', and we refuse any that
    does so no text can close the script tag.
    """
    import py3Dmol

    if "<" in molblock:
        raise ValueError("molblock contains '<'")
    view = py3Dmol.view(width="100%", height=f"{height}px", js=js_url)
    view.addModel(molblock, "sdf")
    view.setStyle({"stick": {"radius": 0.16}, "sphere": {"scale": 0.22}})
    view.zoomTo()
    body = view.write_html()
    return (f"<!doctype html><html><head><meta charset='utf-8'></head>"
            f"<body style='margin:0;overflow:hidden'>{body}</body></html>")
