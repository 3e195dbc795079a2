"""prepare-data on a miniature copy of the shared data layout."""
import csv
import gzip
import io
import json
import lzma

from molspec_core.data import load_arrays, prepare
from molspec_core.tokenizer import Vocab


def write_gz(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(text)


def csv_text(header, rows):
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def make_tree(root):
    full = root / "uspto_full"
    full.mkdir(parents=True)
    pool = [  # (product, reactants), atom-mapped as in the pool
        ("[CH3:1][C:2](=[O:3])[NH:4][CH3:5]", "[CH3:1][C:2](=[O:3])Cl.[NH2:4][CH3:5]"),
        ("[CH3:1][O:2][C:3](=[O:4])[CH3:5]", "[CH3:1][OH:2].[C:3](=[O:4])([CH3:5])O"),  # leaks: MIT test product
        ("[CH3:1][CH2:2][OH:3]", "[CH3:1][CH:2]=[O:3].[BH4-].[Na+]"),
    ]
    for name in ("uspto_valT.csv.xz", "uspto_testT_minus_holdout.csv.xz"):
        with lzma.open(full / name, "wt") as f:
            f.write(csv_text(["input", "target"], pool if "val" in name else pool[:1]))
    write_gz(root / "uspto50k/derived/train_liu_minus_gln_valtest.csv.gz",
             csv_text(["liu_split", "liu_index", "class", "reactants>reagents>production"],
                      [["train", 0, 1, "CC(=O)O.OCC>>CCOC(C)=O"]]))
    mit = root / "uspto_mit/derived"
    write_gz(mit / "src-test.mixed.txt.gz", "CC(=O)O.CO\n")
    write_gz(mit / "tgt-test.txt.gz", "COC(C)=O\n")
    write_gz(mit / "src-valid.mixed.txt.gz", "CCN.O=CC\n")
    write_gz(mit / "tgt-valid.txt.gz", "CCNCC\n")


def test_prepare_forward_removes_leaked_products_and_writes_arrays(tmp_path):
    make_tree(tmp_path / "data")
    stats = prepare("forward", tmp_path / "data", tmp_path / "out", n_val=10, workers=1)
    assert stats["removed_leakage_mit_valid_test_product"] == 1
    src = (tmp_path / "out/train.src").read_text().splitlines()
    tgt = (tmp_path / "out/train.tgt").read_text().splitlines()
    assert "COC(C)=O" not in tgt
    # mixed source: sorted canonical fragments, reagents included; duplicates dropped
    assert sorted(zip(src, tgt)) == sorted([("CC(=O)Cl.CN", "CNC(C)=O"), ("CC=O.[BH4-].[Na+]", "CCO"),
                                            ("CC(=O)O.CCO", "CCOC(C)=O")])
    vocab = Vocab.load(tmp_path / "out/vocab.json")
    arrays_src, arrays_tgt = load_arrays(tmp_path / "out/train.npz")
    assert [vocab.decode(a) for a in arrays_src] == src
    assert [vocab.decode(a) for a in arrays_tgt] == tgt
    assert json.loads((tmp_path / "out/stats.json").read_text())["train"] == 3
