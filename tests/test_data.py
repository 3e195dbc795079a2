"""prepare-data on a miniature copy of the shared data layout."""
import csv
import gzip
import io
import json
import logging
import lzma
import random

import pytest

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


def test_a_pool_row_empty_cut_short_unreadable_or_huge_gives_no_pair_and_stops_nothing(tmp_path):
    """A pool row cut short ("CCO" alone: csv reads its missing cell as None) stopped prepare-data with an
    AttributeError traceback from RDKit's side of the work."""
    root = tmp_path / "data"
    make_tree(root)
    with lzma.open(root / "uspto_full/uspto_valT.csv.xz", "wt") as f:
        f.write("input,target\n[CH3:1][CH2:2][OH:3],[CH3:1][CH:2]=[O:3].[BH4-].[Na+]\n,\nCCO\nC1CC,CC\n"
                + "C" * 400 + ",CC\n")
    stats = prepare("forward", root, tmp_path / "out", n_val=1, workers=1)
    assert stats["pool_reactions"] == 7 and stats["parsed"] == 4  # the good row, the huge one, testT and 50K train
    assert "CC=O.[BH4-].[Na+]\tCCO" in {f"{s}\t{t}" for s, t in zip(
        (tmp_path / "out/train.src").read_text().split(), (tmp_path / "out/train.tgt").read_text().split())}
    assert "C" * 400 not in (tmp_path / "out/train.src").read_text()  # too long to train on


def tree_with_mit_valid(tmp_path, src: str, tgt: str):
    """make_tree with three MIT valid rows: a validation row (with n_val=1), a row making a test
    product (leakage) and the given one."""
    root = tmp_path / "data"
    make_tree(root)
    mit = root / "uspto_mit/derived"
    write_gz(mit / "src-valid.mixed.txt.gz", f"CCN.O=CC\nCC(=O)O.CO.[H-].[Na+]\n{src}\n")
    write_gz(mit / "tgt-valid.txt.gz", f"CCNCC\nCOC(C)=O\n{tgt}\n")
    return root


def test_prepare_forward_removes_leaked_products_and_writes_arrays(tmp_path):
    make_tree(tmp_path / "data")
    stats = prepare("forward", tmp_path / "data", tmp_path / "out", n_val=1, workers=1)
    assert stats["removed_leakage_mit_test_or_val_product"] == 1
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


def test_the_leakage_filter_reads_a_held_out_product_through_stereo_marks_and_atom_maps(tmp_path):
    """USPTO-MIT writes no stereo and the pool does: a pool product with its marks passed the filter, which compared
    strings (1,813 of the 40,000 test products were in the pool so, session 76's audit)."""
    root = tree_with_mit_valid(tmp_path, "C[C@H](N)C(=O)OC.O", "C[C@H](N)C(=O)O")  # a training row: its product...
    mit = root / "uspto_mit/derived"
    write_gz(mit / "src-test.mixed.txt.gz", "CC(=O)O.CO\nCC(N)C(=O)OC.O\n")
    write_gz(mit / "tgt-test.txt.gz", "COC(C)=O\nCC(N)C(=O)O\n")  # ... is this test product, written without stereo
    stats = prepare("forward", root, tmp_path / "out", n_val=1, workers=1)
    targets = (tmp_path / "out/train.tgt").read_text().splitlines()
    assert "C[C@H](N)C(=O)O" not in targets and stats["removed_leakage_mit_test_or_val_product"] == 3
    stats = prepare("forward-mit", root, tmp_path / "mit", n_val=1, workers=1)
    assert stats["removed_leakage_mit_test_or_val_product"] == 2 and stats["train"] == 0


def test_prepare_forward_keeps_a_given_vocabulary_so_the_model_still_pairs_with_its_draft(tmp_path):
    # The GPU kit trains on from the shipped weights; a vocabulary built from the rows drops tokens the shipped
    # model reads, renumbers the rest, and the draft model beside it no longer loads with the weights trained.
    make_tree(tmp_path / "data")
    built = prepare("forward", tmp_path / "data", tmp_path / "built", n_val=1, workers=1)
    shipped = Vocab.build(["[Si@@H]", *(tmp_path / "built/train.src").read_text().splitlines(),
                           *(tmp_path / "built/train.tgt").read_text().splitlines()])
    stats = prepare("forward", tmp_path / "data", tmp_path / "out", n_val=1, workers=1, vocab=shipped)
    assert "[Si@@H]" not in Vocab.load(tmp_path / "built/vocab.json").tokens
    assert Vocab.load(tmp_path / "out/vocab.json").tokens == shipped.tokens
    assert stats["vocab_size"] == len(shipped) == built["vocab_size"] + 1
    _, tgt = load_arrays(tmp_path / "out/train.npz")
    assert [shipped.decode(a[1:-1]) for a in tgt] == (tmp_path / "out/train.tgt").read_text().splitlines()


def test_prepare_forward_trains_on_mit_valid_rows_after_the_validation_rows(tmp_path):
    root = tree_with_mit_valid(tmp_path, "CC(=O)Cl.CN.[Pd]", "CNC(C)=O")
    stats = prepare("forward", root, tmp_path / "out", n_val=1, workers=1)
    pairs = list(zip((tmp_path / "out/train.src").read_text().splitlines(),
                     (tmp_path / "out/train.tgt").read_text().splitlines()))
    assert (tmp_path / "out/val.tgt").read_text().splitlines() == ["CCNCC"]  # the first n_val rows validate
    assert stats["mit_valid_rows_for_training"] == 2
    # the second valid row makes a test product (leakage, with the pool's ester): both removed
    assert stats["removed_leakage_mit_test_or_val_product"] == 2
    assert all(tgt != "COC(C)=O" for _, tgt in pairs)
    # the third is new training data written as the test set is, with its reagent ion; the pool's
    # reaction with the same product is not leakage (it is a training product, not a held-out one)
    assert ("CC(=O)Cl.CN.[Pd]", "CNC(C)=O") in pairs and ("CC(=O)Cl.CN", "CNC(C)=O") in pairs
    assert "[Pd]" in Vocab.load(tmp_path / "out/vocab.json").tokens


def test_prepare_forward_in_rooted_writings_teaches_the_writings_the_app_reads(tmp_path):
    from molspec_core.chem import canonical
    from molspec_core.data import root_aligned
    from molspec_core.rsmiles import root_views

    make_tree(tmp_path / "data")
    plain = prepare("forward", tmp_path / "data", tmp_path / "plain", n_val=1, workers=1)
    assert plain["augment"] == 1 and not root_aligned(plain)  # canonical data: the app reads one writing
    stats = prepare("forward", tmp_path / "data", tmp_path / "out", n_val=1, workers=1, augment=3)
    assert root_aligned(stats) and stats["train_reactions"] == plain["train"] == 3
    src = (tmp_path / "out/train.src").read_text().splitlines()
    tgt = (tmp_path / "out/train.tgt").read_text().splitlines()
    canonical_pairs = list(zip((tmp_path / "plain/train.src").read_text().splitlines(),
                               (tmp_path / "plain/train.tgt").read_text().splitlines()))
    assert stats["train"] == len(src) > len(canonical_pairs)
    for source, product in canonical_pairs:
        writings = [s for s, t in zip(src, tgt) if t == product]
        # its own writing first, then exactly the rooted writings the service reads it in; product canonical
        assert writings == root_views(source, 3) and writings[0] == source and len(writings) > 1
        assert {".".join(sorted(canonical(f) for f in w.split("."))) for w in writings} == {source}
    vocab = Vocab.load(tmp_path / "out/vocab.json")
    assert [vocab.decode(a) for a in load_arrays(tmp_path / "out/train.npz")[0]] == src
    assert (tmp_path / "out/val.src").read_text() == (tmp_path / "plain/val.src").read_text()  # validated as before


def test_root_aligned_pairs_keep_the_molecules_and_start_alike():
    import random

    from molspec_core.chem import canonical
    from molspec_core.rsmiles import augment

    mapped = ("[CH3:1][C:2](=[O:3])Cl.[NH2:4][CH2:5][c:6]1[cH:7][cH:8][cH:9][cH:10][cH:11]1"
              ">>[CH3:1][C:2](=[O:3])[NH:4][CH2:5][c:6]1[cH:7][cH:8][cH:9][cH:10][cH:11]1")
    pairs = augment(mapped, 5, random.Random(0))
    assert len(pairs) == 5 and pairs[0][0] == canonical("CC(=O)NCc1ccccc1")
    for product, reactants in pairs:
        assert canonical(product) == canonical("CC(=O)NCc1ccccc1")
        assert canonical(reactants) == canonical("CC(=O)Cl.NCc1ccccc1")
        assert product[0] == reactants[0]  # both start from the same (mapped) atom


def test_prepare_retro_falls_back_to_canonical_pairs_for_bad_maps(tmp_path):
    from molspec_core.chem import canonical
    from molspec_core.data import prepare

    root = tmp_path / "data"
    write_gz(root / "uspto50k/derived/train_liu_minus_gln_valtest_rxnmapper.csv.gz", csv_text(
        ["liu_split", "liu_index", "class", "reactants>reagents>production", "rxnmapper_mapped",
         "rxnmapper_confidence"],
        [["train", 0, 1, "CC(=O)Cl.NC>>CNC(C)=O",
          "[CH3:1][C:2](=[O:3])Cl.[NH2:4][CH3:5]>>[CH3:1][C:2](=[O:3])[NH:4][CH3:5]", 0.9],
         ["train", 1, 1, "CO.OC(C)=O>>COC(C)=O",
          "[CH3:1][OH:2].O[C:3](=[O:4])[CH3:5]>>[CH3:1][O:2][C:3](=[O:4])[CH3:9]", 0.2]]))
    (root / "uspto50k/gln_split").mkdir(parents=True)
    (root / "uspto50k/gln_split/raw_val.csv").write_text(  # one unmapped row, one mapped
        "id,class,reactants>reagents>production\nX,1,CCO.CC(=O)O>>CCOC(C)=O\n"
        "Y,1,[CH3:1][C:2](=[O:3])Cl.[NH2:4][CH3:5]>>[CH3:5][NH:4][C:2](=[O:3])[CH3:1]\n")
    test_dir = root / "uspto50k/gln_split_test_unmapped_faster_ml_casp"
    test_dir.mkdir(parents=True)
    (test_dir / "products.txt").write_text("CCOC(C)=O")
    (test_dir / "reactants.txt").write_text("CC(=O)O.CCO")
    stats = prepare("retro", root, tmp_path / "out", n_val=2, workers=1, augment=3)
    assert stats["aligned_reactions"] == 1 and stats["canonical_fallback"] == 1  # map 9 is not in the reactants
    pairs = set(zip((tmp_path / "out/train.src").read_text().split(), (tmp_path / "out/train.tgt").read_text().split()))
    assert ("COC(C)=O", "CC(=O)O.CO") in pairs  # the canonical pair of the badly mapped row
    assert 2 <= stats["train"] <= 3 + 1 and stats["test"] == 1  # random roots may repeat: duplicates are dropped
    # Validation: the product canonical, as the service writes a query; the reactants aligned to it
    # where the row is mapped (as the model is trained to answer), canonical where not.
    val = list(zip((tmp_path / "out/val.src").read_text().split(), (tmp_path / "out/val.tgt").read_text().split()))
    assert stats["val"] == 2 and stats["val_aligned"] == 1
    assert val[0] == ("CCOC(C)=O", "CC(=O)O.CCO")
    product, reactants = val[1]
    assert product == canonical("CNC(C)=O") and canonical(reactants) == canonical("CC(=O)Cl.CN")
    assert product[0] == reactants[0] == "C" and reactants != canonical(reactants)  # aligned: both start at a methyl


def test_prepare_retro_reads_a_mapped_row_that_is_no_reaction_or_empty_or_short_from_its_unmapped_one(tmp_path):
    """A train row whose mapped cell was not reactants>reagents>products (empty, cut short, text) stopped prepare-data
    with "not enough values to unpack (expected 3, got 1)", naming no file or row, or a traceback for a short row."""
    from molspec_core.rsmiles import MappingError, augment, forward_aligned

    for text in ("", "CCO", "CC>>CC>>CC"):
        with pytest.raises(MappingError, match="not a reaction written reactants>reagents>products"):
            augment(text, 2, random.Random(0))
        with pytest.raises(MappingError, match="not a reaction written reactants>reagents>products"):
            forward_aligned(text, "CC", ["CC"])
    root = retro_tree(tmp_path / "data")
    good = ["train", 0, 1, "CC(=O)Cl.NC>>CNC(C)=O",
            "[CH3:1][C:2](=[O:3])Cl.[NH2:4][CH3:5]>>[CH3:1][C:2](=[O:3])[NH:4][CH3:5]", 0.9]
    text = csv_text(["liu_split", "liu_index", "class", "reactants>reagents>production", "rxnmapper_mapped",
                     "rxnmapper_confidence"],
                    [good, ["train", 1, 1, "CCO.CC(=O)O>>CCOC(C)=O", "garbage", 0.1], ["train", 2, 1, "", "", ""]])
    write_gz(root / "uspto50k/derived/train_liu_minus_gln_valtest_rxnmapper.csv.gz", text + "train,3,1\n")
    stats = prepare("retro", root, tmp_path / "out", n_val=1, workers=1, augment=2)
    assert stats["reactions"] == 4 and stats["aligned_reactions"] == 1 and stats["canonical_fallback"] == 3
    pairs = set(zip((tmp_path / "out/train.src").read_text().split(), (tmp_path / "out/train.tgt").read_text().split()))
    assert ("CCOC(C)=O", "CC(=O)O.CCO") in pairs  # the unmapped reaction of the row whose mapped cell is text


def retro_tree(root):
    """One mapped GLN train reaction; four GLN val reactions: the first is validation (n_val=1), the second
    and third are left over, the fourth's product is the test product (leakage)."""
    write_gz(root / "uspto50k/derived/train_liu_minus_gln_valtest_rxnmapper.csv.gz", csv_text(
        ["liu_split", "liu_index", "class", "reactants>reagents>production", "rxnmapper_mapped",
         "rxnmapper_confidence"],
        [["train", 0, 1, "CC(=O)Cl.NC>>CNC(C)=O",
          "[CH3:1][C:2](=[O:3])Cl.[NH2:4][CH3:5]>>[CH3:1][C:2](=[O:3])[NH:4][CH3:5]", 0.9]]))
    (root / "uspto50k/gln_split").mkdir(parents=True)
    (root / "uspto50k/gln_split/raw_val.csv").write_text(
        "id,class,reactants>reagents>production\n"
        "V,1,[CH3:1][C:2](=[O:3])Cl.[NH2:4][CH2:5][CH3:6]>>[CH3:1][C:2](=[O:3])[NH:4][CH2:5][CH3:6]\n"
        "A,1,[CH3:1][CH2:2][C:3](=[O:4])Cl.[NH2:5][CH3:6]>>[CH3:1][CH2:2][C:3](=[O:4])[NH:5][CH3:6]\n"
        "B,2,[CH3:1][CH2:2][OH:3].[CH3:4][C:5](=[O:6])Cl>>[CH3:4][C:5](=[O:6])[O:3][CH2:2][CH3:1]\n"
        "L,2,[CH3:1][OH:2].[CH3:3][C:4](=[O:5])Cl>>[CH3:3][C:4](=[O:5])[O:2][CH3:1]\n")
    test_dir = root / "uspto50k/gln_split_test_unmapped_faster_ml_casp"
    test_dir.mkdir(parents=True)
    (test_dir / "products.txt").write_text("O=C(C)OC")  # the leaked reaction's product, written otherwise
    (test_dir / "reactants.txt").write_text("CC(=O)Cl.CO")
    return root


def test_prepare_retro_leaves_a_validation_reaction_longer_than_a_models_positions_out(tmp_path):
    """Written as a validation row, it made every training run on the folder refuse it."""
    root = retro_tree(tmp_path / "data")
    rows = (root / "uspto50k/gln_split/raw_val.csv").read_text().splitlines()
    huge = "C" * 1100
    rows.insert(1, f"H,1,{huge}Cl.[NH3:1]>>{huge}[NH2:1]")
    (root / "uspto50k/gln_split/raw_val.csv").write_text("\n".join(rows) + "\n")
    stats = prepare("retro", root, tmp_path / "out", n_val=1, workers=1, augment=1)
    assert stats["val"] == 1 and huge not in (tmp_path / "out/val.src").read_text()


def test_prepare_retro_val_rest_trains_on_the_val_reactions_after_n_val_without_leaks(tmp_path):
    from molspec_core.chem import canonical

    root = retro_tree(tmp_path / "data")

    def products(folder):
        return {canonical(s) for s in (tmp_path / folder / "train.src").read_text().split()}

    plain = prepare("retro", root, tmp_path / "plain", n_val=1, workers=1, augment=3)
    assert products("plain") == {"CNC(C)=O"} and "val_rest" not in plain
    added = prepare("retro", root, tmp_path / "add", n_val=1, workers=1, augment=3, val_rest="add")
    # the validation reaction stays out, as does the one whose product is the test product
    assert products("add") == {"CNC(C)=O", "CCC(=O)NC", "CCOC(C)=O"}
    assert added["val_rest_reactions"] == 2 and added["removed_leakage_test_or_val_product"] == 1
    assert added["val"] == 1 and added["reactions"] == 1 and added["val_rest_aligned"] == 2
    vocab = Vocab.load(tmp_path / "add/vocab.json")
    only = prepare("retro", root, tmp_path / "only", n_val=1, workers=1, augment=3, val_rest="only", vocab=vocab)
    assert products("only") == {"CCC(=O)NC", "CCOC(C)=O"} and only["reactions"] == 0
    assert Vocab.load(tmp_path / "only/vocab.json").tokens == vocab.tokens  # the given vocabulary, kept
    assert (tmp_path / "only/val.src").read_text() == (tmp_path / "plain/val.src").read_text()
    only_src, only_tgt = ((tmp_path / f"only/train.{end}").read_text().split() for end in ("src", "tgt"))
    for src, tgt in zip(only_src, only_tgt, strict=True):
        assert src[0] == tgt[0]  # root-aligned, as the GLN train reactions are
    # all validation rows are validation: nothing is left over
    assert prepare("retro", root, tmp_path / "all", n_val=4, workers=1, augment=3, val_rest="only")["train"] == 0


def test_prepare_forward_mit_fine_tune_data_is_the_mit_rows_in_several_writings(tmp_path):
    from molspec_core.chem import canonical

    root = tree_with_mit_valid(tmp_path, "CC(=O)Cl.Nc1ccccc1.[Pd]", "CC(=O)Nc1ccccc1")
    vocab = Vocab.build(["CC(=O)Cl.Nc1ccccc1.[Pd]", "CC(=O)Nc1ccccc1", "CCN.O=CC.CCNCC", "[H-].[Na+]"])
    stats = prepare("forward-mit", root, tmp_path / "out", n_val=1, augment=4, vocab=vocab)
    src = (tmp_path / "out/train.src").read_text().splitlines()
    tgt = (tmp_path / "out/train.tgt").read_text().splitlines()
    # the pool is not used; the second valid row makes a test product (leakage) and is removed
    assert stats["removed_leakage_mit_test_or_val_product"] == 1
    assert stats["task"] == "forward"  # the trainer writes it into the model's config: a forward model
    assert "augment" not in stats  # random writings do not make a model that reads rooted ones (augmentable)
    assert stats["train_reactions"] == 1  # in several writings (tools/hard_examples.py build counted none)
    assert set(tgt) == {"CC(=O)Nc1ccccc1"}
    # MIT's own writing first, then other writings of the same molecules (at most augment, distinct)
    assert src[0] == "CC(=O)Cl.Nc1ccccc1.[Pd]" and 2 <= len(src) <= 4 and len(set(src)) == len(src)
    assert {".".join(sorted(canonical(f) for f in s.split("."))) for s in src} == {"CC(=O)Cl.Nc1ccccc1.[Pd]"}
    assert Vocab.load(tmp_path / "out/vocab.json").tokens == vocab.tokens  # the model's vocabulary, kept
    assert (tmp_path / "out/val.tgt").read_text().splitlines() == ["CCNCC"]
    again = prepare("forward-mit", root, tmp_path / "again", n_val=1, augment=4, vocab=vocab)
    assert again == stats and (tmp_path / "again/train.src").read_text() == "\n".join(src) + "\n"  # reproducible


def test_prepare_forward_mit_rooted_writes_the_writings_the_app_reads_and_marks_them(tmp_path):
    from molspec_core.data import root_aligned
    from molspec_core.rsmiles import root_views

    source = "CC(=O)Cl.Nc1ccccc1.[Pd]"
    root = tree_with_mit_valid(tmp_path, source, "CC(=O)Nc1ccccc1")
    vocab = Vocab.build([source, "CC(=O)Nc1ccccc1", "CCN.O=CC.CCNCC", "[H-].[Na+]"])
    stats = prepare("forward-mit", root, tmp_path / "out", n_val=1, workers=1, augment=4, vocab=vocab, rooted=True)
    src = (tmp_path / "out/train.src").read_text().splitlines()
    tgt = (tmp_path / "out/train.tgt").read_text().splitlines()
    # MIT's own writing first, then exactly the rooted writings the service reads the query in
    assert src == root_views(source, 4) and src[0] == source and len(src) > 1 and set(tgt) == {"CC(=O)Nc1ccccc1"}
    assert stats["removed_leakage_mit_test_or_val_product"] == 1 and stats["train_reactions"] == 1
    # marked root-aligned: the trained model reads a query in its rooted writings (random ones are not)
    assert root_aligned(stats) and stats["train"] == len(src) and stats["data"] == "forward-mit, rooted writings"
    assert not root_aligned(prepare("forward-mit", root, tmp_path / "random", n_val=1, augment=4, vocab=vocab))
    assert [vocab.decode(a) for a in load_arrays(tmp_path / "out/train.npz")[0]] == src
    one = prepare("forward-mit", root, tmp_path / "one", n_val=1, workers=1, augment=1, vocab=vocab, rooted=True)
    assert (tmp_path / "one/train.src").read_text() == source + "\n" and not root_aligned(one)


def test_prepare_forward_mit_rows_before_trains_on_the_validation_rows_a_default_split_held_back(tmp_path):
    # four MIT valid rows: validation with n_val=1; rows 1 and 2 are validation rows of a split at 3 (a test
    # product, then a new reaction); row 3 a training row of both
    root = tmp_path / "data"
    make_tree(root)
    mit = root / "uspto_mit/derived"
    write_gz(mit / "src-valid.mixed.txt.gz", "CCN.O=CC\nCC(=O)O.CO.[H-].[Na+]\nCC(=O)Cl.Nc1ccccc1\nCC=O.[BH4-].[Na+]\n")
    write_gz(mit / "tgt-valid.txt.gz", "CCNCC\nCOC(C)=O\nCC(=O)Nc1ccccc1\nCCO\n")
    vocab = Vocab.build(["CC(=O)Cl.Nc1ccccc1.CCN.O=CC.CCNCC", "[H-].[Na+].[BH4-]"])
    stats = prepare("forward-mit", root, tmp_path / "new", n_val=1, augment=1, vocab=vocab, rows_before=3)
    assert (tmp_path / "new/train.tgt").read_text().splitlines() == ["CC(=O)Nc1ccccc1"]  # not row 3's CCO
    assert (stats["mit_valid_rows"], stats["mit_valid_rows_for_training"]) == ("1-2", 2)
    assert stats["removed_leakage_mit_test_or_val_product"] == 1  # row 1 still makes a test product
    assert (tmp_path / "new/val.tgt").read_text().splitlines() == ["CCNCC"]
    everything = prepare("forward-mit", root, tmp_path / "all", n_val=1, augment=1, vocab=vocab)
    assert (tmp_path / "all/train.tgt").read_text().splitlines() == ["CC(=O)Nc1ccccc1", "CCO"]
    assert "mit_valid_rows" not in everything
    import pytest

    with pytest.raises(ValueError, match="must lie past n_val"):
        prepare("forward-mit", root, tmp_path / "none", n_val=3, vocab=vocab, rows_before=3)
    with pytest.raises(ValueError, match="rows_before is for forward-mit"):
        prepare("retro", root, tmp_path / "retro", rows_before=3)


def test_prepare_forward_gln_reads_the_50k_val_reactions_forward_without_test_products(tmp_path):
    from molspec_core.data import root_aligned
    from molspec_core.rsmiles import root_views

    # GLN val (retro_tree's four and a reductive amination): two new reactions (V, A); one making the USPTO-50K
    # test product (B: ethyl acetate, written otherwise), one the USPTO-MIT test product (L: methyl acetate),
    # one the USPTO-MIT validation product (M: diethylamine); forward validates on USPTO-MIT, not on GLN val
    root = retro_tree(tmp_path / "data")
    make_tree(root)
    (root / "uspto50k/gln_split_test_unmapped_faster_ml_casp/products.txt").write_text("O=C(C)OCC")
    raw_val = root / "uspto50k/gln_split/raw_val.csv"
    raw_val.write_text(raw_val.read_text()
                       + "M,1,[CH3:1][CH:2]=[O:3].[NH2:4][CH2:5][CH3:6]>>[CH3:1][CH2:2][NH:4][CH2:5][CH3:6]\n")
    vocab = Vocab.build(["CC(=O)Cl.CCN.CCC(=O)Cl.CN.CCO.CC=O.C(=O)N.CCNCC.O=CC.CC(=O)NCC", "COC(C)=O"])
    stats = prepare("forward-gln", root, tmp_path / "out", n_val=1, workers=1, augment=3, vocab=vocab)
    src = (tmp_path / "out/train.src").read_text().splitlines()
    tgt = (tmp_path / "out/train.tgt").read_text().splitlines()
    assert set(tgt) == {"CCNC(C)=O", "CCC(=O)NC"}
    assert stats["gln_val_reactions"] == 5 and stats["removed_leakage_test_or_val_product"] == 3
    assert stats["train_reactions"] == 2 and stats["task"] == "forward" and root_aligned(stats)
    # each source canonical (fragments sorted, as the pool's), then its rooted writings
    first = src[:tgt.count(tgt[0])]
    assert first == root_views("CC(=O)Cl.CCN", 3) and len(first) > 1
    assert (tmp_path / "out/val.tgt").read_text().splitlines() == ["CCNCC"]  # USPTO-MIT's first valid row
    assert Vocab.load(tmp_path / "out/vocab.json").tokens == vocab.tokens


def test_prepare_drops_training_pairs_whose_target_the_vocabulary_cannot_write(tmp_path):
    # MIT valid rows: validation (n_val=1); a source with a token the model's vocabulary lacks ([Pd]); a
    # product with one ([Si], through its reactant); a plain one
    root = tmp_path / "data"
    make_tree(root)
    mit = root / "uspto_mit/derived"
    write_gz(mit / "src-valid.mixed.txt.gz",
             "CCN.O=CC\nCC(=O)Cl.Nc1ccccc1.[Pd]\nC[Si](C)(C)Cl.OCC\nCC=O.[BH4-].[Na+]\n")
    write_gz(mit / "tgt-valid.txt.gz", "CCNCC\nCC(=O)Nc1ccccc1\nCCO[Si](C)(C)C\nCCO\n")
    vocab = Vocab.build(["CC(=O)Cl.Nc1ccccc1.CCN.O=CC.CCNCC", "[H-].[Na+].[BH4-]"])
    stats = prepare("forward-mit", root, tmp_path / "out", n_val=1, augment=1, vocab=vocab)
    src = (tmp_path / "out/train.src").read_text().splitlines()
    tgt = (tmp_path / "out/train.tgt").read_text().splitlines()
    # the silyl ether would teach the model to write <unk>: dropped; the unknown reagent is only read, and kept
    assert tgt == ["CC(=O)Nc1ccccc1", "CCO"] and src[0] == "CC(=O)Cl.Nc1ccccc1.[Pd]"
    assert stats["train_dropped_unknown_target"] == 1 and stats["train"] == 2
    assert stats["train_tokens_unknown"] == 1  # [Pd], in the kept source
    arrays_src, arrays_tgt = load_arrays(tmp_path / "out/train.npz")
    assert [vocab.decode(a) for a in arrays_tgt] == tgt and len(arrays_src) == 2
    assert json.loads((tmp_path / "out/stats.json").read_text())["train"] == 2


def test_prepare_refuses_options_its_task_does_not_use(tmp_path):
    import pytest

    make_tree(tmp_path / "data")
    with pytest.raises(ValueError, match="at least 1"):
        prepare("forward", tmp_path / "data", tmp_path / "out", augment=0)
    with pytest.raises(ValueError, match="val_rest is for retro"):
        prepare("forward-mit", tmp_path / "data", tmp_path / "out", val_rest="add")
    with pytest.raises(ValueError, match="one of add, only"):
        prepare("retro", retro_tree(tmp_path / "retro"), tmp_path / "out", workers=1, val_rest="all")
    with pytest.raises(ValueError, match="at least 1"):
        prepare("forward-mit", tmp_path / "data", tmp_path / "out", augment=0)
    with pytest.raises(ValueError, match="at least 0"):  # the CLI refuses it; prepare() once wrote canonical pairs
        prepare("retro", tmp_path / "retro", tmp_path / "out", workers=1, augment=-1)
    for task in ("forward", "retro"):
        with pytest.raises(ValueError, match="rooted is for forward-mit"):
            prepare(task, tmp_path / "data", tmp_path / "out", rooted=True)


def test_source_and_target_files_of_different_lengths_are_refused_naming_both(tmp_path):
    import pytest

    root = tmp_path / "data"
    make_tree(root)
    mit = root / "uspto_mit/derived"
    write_gz(mit / "src-valid.mixed.txt.gz", "CCN.O=CC\nCC=O\n")  # a source line lost: every later row shifted
    write_gz(mit / "tgt-valid.txt.gz", "CCNCC\nCCO\nCCCC\n")
    with pytest.raises(ValueError, match=r"src-valid.mixed.txt.gz has 2 lines but .*tgt-valid.txt.gz has 3"):
        prepare("forward", root, tmp_path / "out", n_val=1, workers=1)
    retro = retro_tree(tmp_path / "retro")
    (retro / "uspto50k/gln_split_test_unmapped_faster_ml_casp/reactants.txt").write_text("CC(=O)Cl.CO\nCCO\n")
    with pytest.raises(ValueError, match=r"products.txt has 1 lines but .*reactants.txt has 2"):
        prepare("retro", retro, tmp_path / "out", n_val=1, workers=1, augment=0)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task", ["forward", "forward-mit"])
def test_a_mit_valid_row_no_model_reads_is_left_out_with_a_warning_naming_it(task, tmp_path, caplog):
    """A source with a space in it (or a stray '%') stopped prepare-data with "not a SMILES token at character 14:
    '  '", naming no file or row, after the minutes of RDKit work; a validation row longer than a model's positions
    was written, and every training run on the folder refused it."""
    root = tree_with_mit_valid(tmp_path, "c1ccccc1.BrBr  ", "Brc1ccccc1")
    mit = root / "uspto_mit/derived"
    huge = "C" * 1100  # a validation row longer than a model's positions: written, then refused by every run
    write_gz(mit / "src-valid.mixed.txt.gz", f"{huge}.O\nCCN.O=CC\nCC O\nc1ccccc1.BrBr  \nCC=O.[BH4-].[Na+]\n")
    write_gz(mit / "tgt-valid.txt.gz", f"{huge}O\nCCNCC\nCC\nBrc1ccccc1\nCC%O\n")
    caplog.set_level(logging.WARNING, logger="molspec_core.data")
    stats = prepare(task, root, tmp_path / "out", n_val=1, workers=1)
    assert stats["val"] == 1 and stats["mit_valid_rows_for_training"] == 0
    assert (tmp_path / "out/val.src").read_text() == "CCN.O=CC\n"
    assert ("4 of its 5 rows are no SMILES a model reads (not SMILES tokens, or longer than its 1024 positions; the "
            f"first, line 1: '{huge[:80]}'); they are left out") in caplog.text


def test_a_mit_valid_row_with_an_empty_source_trains_nowhere(tmp_path):
    root = tree_with_mit_valid(tmp_path, "", "CCOCC")  # an empty source: a trainer's validation refused it
    prepare("forward-mit", root, tmp_path / "out", n_val=1, augment=1, vocab=None, workers=1)
    for split in ("train", "val"):
        assert "" not in (tmp_path / f"out/{split}.src").read_text().splitlines()
    assert "CCOCC" not in (tmp_path / "out/train.tgt").read_text().splitlines()


ACETANILIDE_MAPPED = ("[CH3:1][C:2](=[O:3])[Cl:4].[NH2:5][c:6]1[cH:7][cH:8][cH:9][cH:10][cH:11]1>>"
                      "[CH3:1][C:2](=[O:3])[NH:5][c:6]1[cH:7][cH:8][cH:9][cH:10][cH:11]1 2-4;2-5")


def test_forward_aligned_writes_the_product_from_the_first_atom_of_each_writing_that_reaches_it():
    from rdkit import Chem

    from molspec_core.chem import canonical
    from molspec_core.rsmiles import forward_aligned

    product = "CC(=O)Nc1ccccc1"
    mol = Chem.MolFromSmiles(product)  # atoms: 0 methyl, 1 carbonyl C, 2 O, 3 N, 4 the ipso c, then the ring
    written = forward_aligned(ACETANILIDE_MAPPED, product, ["CC(=O)Cl.Nc1ccccc1", "ClC(C)=O.Nc1ccccc1",
                                                             "O=C(C)Cl.Nc1ccccc1", "c1ccc(N)cc1.CC(=O)Cl"])
    assert written[0] == product  # the methyl starts both
    assert written[1] == Chem.MolToSmiles(mol, rootedAtAtom=1)  # Cl leaves: the carbonyl C starts it
    assert written[2] == Chem.MolToSmiles(mol, rootedAtAtom=2)  # the carbonyl O stays: it starts it
    assert written[3].startswith("c1ccc(NC(C)=O)cc1")  # the ring carbon para to N: either symmetric one
    assert all(canonical(w) == product for w in written)
    assert len(set(written)) == 4


def test_forward_aligned_refuses_a_writing_that_is_not_the_reactions_reactant_side():
    from molspec_core.rsmiles import MappingError, forward_aligned

    with pytest.raises(MappingError, match="not the mapped reaction's reactant side"):
        forward_aligned(ACETANILIDE_MAPPED, "CC(=O)Nc1ccccc1", ["CC(=O)Cl.Nc1ccccc1C"])
    with pytest.raises(MappingError, match="not among"):
        forward_aligned(ACETANILIDE_MAPPED, "CC(=O)Oc1ccccc1", ["CC(=O)Cl.Nc1ccccc1"])


def test_prepare_forward_mit_aligned_writes_each_target_to_read_like_its_source(tmp_path):
    from molspec_core.chem import canonical
    from molspec_core.data import MIT_VALID_MAPPED
    from molspec_core.rsmiles import forward_aligned

    source, product = "CC(=O)Cl.Nc1ccccc1", "CC(=O)Nc1ccccc1"
    root = tree_with_mit_valid(tmp_path, source, product)
    # the raw file: the three valid rows' reactions, atom-mapped, line for line (the second is the leaked row)
    write_gz(root / MIT_VALID_MAPPED, "[CH3:1][CH2:2][NH2:3].[O:4]=[CH:5][CH3:6]>>[CH3:1][CH2:2][NH:3][CH2:5][CH3:6]\n"
             "[CH3:1][C:2](=[O:3])[OH:4].[CH3:5][OH:6]>>[CH3:1][C:2](=[O:3])[O:6][CH3:5]\n" + ACETANILIDE_MAPPED + "\n")
    vocab = Vocab.build([source, product, "ClC(C)=O.c1ccc(N)cc1", "CCN.O=CC.CCNCC", "[H-].[Na+]", "O=C(C)N(c1ccccc1)"])
    stats = prepare("forward-mit", root, tmp_path / "out", n_val=1, workers=1, augment=6, vocab=vocab, rooted=True,
                    aligned=True)
    src = (tmp_path / "out/train.src").read_text().splitlines()
    tgt = (tmp_path / "out/train.tgt").read_text().splitlines()
    assert src[0] == source and len(src) == 6
    assert tgt == forward_aligned(ACETANILIDE_MAPPED, product, src)
    # the writing that starts at the carbonyl carbon gets the product written from it
    assert [t for s, t in zip(src, tgt) if s.startswith("C(C)(=O)Cl")] == ["C(C)(=O)Nc1ccccc1"]
    assert {canonical(t) for t in tgt} == {product}
    assert stats["aligned_targets"] is True and stats["targets_not_aligned"] == 0
    # validation aligned too, so the run's greedy exact match is measured on the writing it learns
    assert (tmp_path / "out/val.src").read_text() == "CCN.O=CC\n"
    assert (tmp_path / "out/val.tgt").read_text() == "CCNCC\n"
    assert [vocab.decode(a) for a in load_arrays(tmp_path / "out/train.npz")[1]] == tgt
    # a reaction whose maps cannot align it keeps the canonical target, counted
    write_gz(root / MIT_VALID_MAPPED, "C>>C\nC>>C\nC>>C\n")
    stats = prepare("forward-mit", root, tmp_path / "bad", n_val=1, workers=1, augment=4, vocab=vocab, rooted=True,
                    aligned=True)
    assert set((tmp_path / "bad/train.tgt").read_text().splitlines()) == {product}
    assert stats["targets_not_aligned"] == 1
    with pytest.raises(ValueError, match="rooted"):
        prepare("forward-mit", root, tmp_path / "notrooted", n_val=1, workers=1, augment=4, vocab=vocab, aligned=True)


def test_an_n_val_above_the_rows_there_are_is_refused_not_cut_short(tmp_path):
    """--n-val above the usable validation rows wrote the rows there were as validation and, for forward-mit, trained
    on none of them, without a word; a retro refusal comes before the training rows' alignment."""
    root = tree_with_mit_valid(tmp_path, "CC(=O)Cl.Nc1ccccc1", "CC(=O)Nc1ccccc1")  # three usable MIT valid rows
    for task in ("forward", "forward-mit"):
        with pytest.raises(ValueError, match=r"--n-val 4: uspto_mit/derived/src-valid.mixed.txt.gz has 3 usable rows"):
            prepare(task, root, tmp_path / task, n_val=4, workers=1)
    with pytest.raises(ValueError, match="--rows-before 5: .* has 3 usable rows"):
        prepare("forward-mit", root, tmp_path / "rows", n_val=1, workers=1, rows_before=5)
    assert prepare("forward-mit", root, tmp_path / "three", n_val=3, workers=1)["val"] == 3
    retro_tree(tmp_path / "gln")
    with pytest.raises(ValueError, match="--n-val 5: uspto50k/gln_split/raw_val.csv has 4 reactions RDKit reads"):
        prepare("retro", tmp_path / "gln", tmp_path / "retro", n_val=5, workers=1, augment=1)
