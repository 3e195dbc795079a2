"""Write the default building-block stock of `molspec plan` (models/stock.smi.gz) from the training data.

A molecule is in stock when it is a reactant of at least --min-uses reactions of the retrosynthesis
model's own training set (USPTO-50K minus the GLN validation and test reactions, so the planning
benchmark on test products gets no answer for free). Reactants are canonical RDKit
SMILES without atom maps, counted once per reaction.

Why N = 2 by default: N = 1 keeps every reactant of every training reaction (43,651 molecules), among
them one-off advanced intermediates that no vendor sells; N = 2 keeps the 6,128 that recur, a 34 kB
file; N = 3 would keep 2,819.

Run: PYTHONPATH=. python tools/make_stock.py [--data ../shared/data] [--min-uses 2] [--out models/stock.smi.gz]
"""
from __future__ import annotations

import argparse
import gzip
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import InputFileError, check_inputs, check_outputs  # noqa: E402  (tools/_toolbox.py)

from molspec_core.argtypes import at_least  # noqa: E402
from molspec_core.chem import ChemError, canonical  # noqa: E402
from molspec_core.data import DEFAULT_DATA, GLN_TRAIN, gln_reactions  # noqa: E402
from molspec_core.io import OutputFileError  # noqa: E402

TRAIN = Path(GLN_TRAIN)


def reactant_counts(path: Path) -> tuple[Counter[str], int]:
    """(reactions each canonical reactant appears in, number of reactions). A file that cannot be read to its end, or
    without the reaction column, is a ValueError naming it (data.gln_reactions)."""
    counts: Counter[str] = Counter()
    n_reactions = 0
    for reactants, _ in gln_reactions(path):
        molecules = set()
        for smiles in reactants.split("."):
            try:
                molecules.add(canonical(smiles, strip_maps=True))
            except ChemError:
                continue
        counts.update(molecules)
        n_reactions += 1
    return counts, n_reactions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="data folder holding uspto50k/derived/ (default ../shared/data)")
    parser.add_argument("--min-uses", type=at_least(1), default=2,
                        help="keep reactants of at least this many training reactions (default 2)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "models" / "stock.smi.gz",
                        help="gzipped SMILES file to write (default models/stock.smi.gz)")
    args = parser.parse_args()
    try:
        check_inputs([("--data", args.data / TRAIN)])
        check_outputs([("--out", args.out)], [("the training reactions", args.data / TRAIN)])
    except (InputFileError, OutputFileError) as exc:
        parser.error(str(exc))
    try:
        counts, n_reactions = reactant_counts(args.data / TRAIN)
    except ValueError as exc:  # were a KeyError or gzip's traceback, naming no file
        parser.error(str(exc))
    stock = sorted(smiles for smiles, uses in counts.items() if uses >= args.min_uses)
    header = [f"# MolSpec default stock: {len(stock)} building blocks, one canonical SMILES per line.",
              f"# Reactants used in at least N = {args.min_uses} of the {n_reactions:,} reactions of",
              f"# {TRAIN.as_posix()} (the USPTO-50K training set: no GLN validation or test reaction).",
              "# Made by tools/make_stock.py; replace it with your own (--stock FILE) for real planning."]
    text = "\n".join(header + stock) + "\n"
    with open(args.out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as f:
        f.write(text.encode())  # mtime=0 and no file name: the same data give the same bytes
    print(f"{len(stock)} molecules (of {len(counts)} distinct reactants) -> {args.out} "
          f"({args.out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
