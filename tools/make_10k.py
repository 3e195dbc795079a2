"""10,000 forward queries for the large-batch measurements (written to runs/big10k.csv, ignored by
git): the first 10,000 USPTO-MIT test sources, every tenth row replaced by a hostile one.

python3 tools/make_10k.py [--src SRC.txt.gz] [--out runs/big10k.csv]
"""
import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import InputFileError, check_inputs, check_outputs  # noqa: E402  (tools/_toolbox.py)

from molspec_core.data import open_text  # noqa: E402
from molspec_core.io import OutputFileError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT.parent / "shared" / "data" / "uspto_mit" / "derived" / "src-test.mixed.txt.gz"
OUT = ROOT / "runs" / "big10k.csv"
ROWS = 10_000
# queries the batch page must refuse on their own row (every tenth row is one of these): a formula among them, which
# the exported CSV neutralizes, so the file is written as it is (pandas), not through molspec_core.io's writer
HOSTILE = ["xyz", "C1CC", "", "=HYPERLINK(\"http://x\")", "C" * 2500, "c1ccccc1>>CCO", "CC[Zz]", "\u00e9\u00e9"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=SRC,
                        help="gzipped queries, one per line (default: USPTO-MIT's test sources in ../shared/data)")
    parser.add_argument("--out", type=Path, default=OUT, help="the CSV to write (default runs/big10k.csv)")
    args = parser.parse_args()
    if args.out == OUT:
        OUT.parent.mkdir(exist_ok=True)  # runs/ is ignored by git: a fresh checkout lacks it
    try:
        check_inputs([("--src", args.src)])
        check_outputs([("--out", args.out)], [("--src", args.src)])
    except (InputFileError, OutputFileError) as exc:
        parser.error(str(exc))
    import pandas as pd  # only where the file is written

    rng = random.Random(0)
    try:
        with open_text(args.src) as f:
            sources = [line.strip() for _, line in zip(range(ROWS), f)]
    except ValueError as exc:  # not gzip: gzip's traceback, naming no file
        parser.error(f"--src: {exc}")
    if len(sources) < ROWS:
        raise SystemExit(f"make_10k.py: {args.src} has {len(sources):,} lines; {ROWS:,} are needed")
    rows = [rng.choice(HOSTILE) if i % 10 == 3 else sources[i] for i in range(ROWS)]
    pd.DataFrame({"smiles": rows}).to_csv(args.out, index=False)
    print(len(rows))


if __name__ == "__main__":
    main()
