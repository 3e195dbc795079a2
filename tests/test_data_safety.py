"""What prepare-data refuses before any work, and what it warns of (QA pass on the commands that make data)."""
import json
import logging

import pytest

from molspec_core.data import MAX_AUGMENT, UINT8_TOKENS, Pair, load_arrays, prepare, save_arrays, write_splits
from molspec_core.tokenizer import SPECIALS, Vocab

PAIRS = [Pair("CC(=O)Cl.NC", "CNC(C)=O"), Pair("CC=O", "CCO"), Pair("CCN.O=CC", "CCNCC")]


@pytest.mark.parametrize("task", ["forward", "forward-mit", "retro"])
def test_prepare_refuses_an_out_that_holds_files_before_any_work(task, tmp_path):
    model = tmp_path / "model"  # a model folder: its vocab.json was replaced, and the model no longer loaded
    model.mkdir()
    (model / "vocab.json").write_text('{"tokens": ["<pad>"]}')
    (model / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds files; give a new or empty folder"):
        prepare(task, tmp_path / "no_shared_data", model, n_val=1, workers=1)  # refused before the data are read
    assert (model / "vocab.json").read_text() == '{"tokens": ["<pad>"]}'
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        prepare(task, tmp_path / "no_shared_data", tmp_path / "file", n_val=1, workers=1)


def test_prepare_refuses_a_vocabulary_over_256_tokens_and_an_augment_past_the_cap_before_writing(tmp_path):
    big = Vocab([*SPECIALS, *(f"[{n}Xe]" for n in range(UINT8_TOKENS))])
    with pytest.raises(ValueError, match=r"the given vocabulary \(--vocab\) has 260 tokens; the uint8 token arrays "
                                         r"hold at most 256"):
        prepare("forward-mit", tmp_path / "no_shared_data", tmp_path / "out", n_val=1, workers=1, vocab=big)
    with pytest.raises(ValueError, match=f"augment {MAX_AUGMENT + 1}: at most {MAX_AUGMENT} writings"):
        prepare("retro", tmp_path / "no_shared_data", tmp_path / "out", n_val=1, workers=1, augment=MAX_AUGMENT + 1)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="has 260 tokens"):  # an assertion before, and a half-written folder
        write_splits(tmp_path / "out", {"train": PAIRS, "val": PAIRS, "test": PAIRS}, {"task": "forward"}, big)
    with pytest.raises(ValueError, match="has 260 tokens"):
        save_arrays(tmp_path / "x.npz", PAIRS, big)
    assert not (tmp_path / "out").exists()


def test_an_empty_training_split_is_warned_of(tmp_path, caplog):
    small = Vocab([*SPECIALS, "C", "="])  # no target here is written with these tokens alone
    caplog.set_level(logging.WARNING, logger="molspec_core.data")
    write_splits(tmp_path / "out", {"train": PAIRS, "val": PAIRS[:1], "test": []}, {"task": "forward"}, small)
    assert "the training split is empty (all 3 training pairs have a target token outside the 6-token vocabulary)" \
        in caplog.text and "the test split is empty" in caplog.text
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["train"] == 0
    assert load_arrays(tmp_path / "out" / "train.npz") == ([], [])


@pytest.mark.parametrize("task", ["forward", "retro"])
def test_prepare_refuses_an_out_it_could_not_make_before_any_work(task, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")  # minutes of work, then "Not a directory" at the first write
    with pytest.raises(ValueError, match=r"--out .*notes.txt/data: .*notes.txt is a file, so nothing could be "
                                         "written there"):
        prepare(task, tmp_path / "no_shared_data", tmp_path / "notes.txt" / "data", n_val=1, workers=1)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_truncated_or_foreign_data_file_or_a_missing_column_is_one_error_naming_the_file(tmp_path):
    import gzip
    import lzma

    from test_data import make_tree

    root = tmp_path / "data"
    make_tree(root)
    valid = root / "uspto_mit/derived/src-valid.mixed.txt.gz"
    whole = gzip.compress(b"CCN.O=CC\n" * 2000)
    valid.write_bytes(whole[: len(whole) // 2])  # a download cut short: an EOFError traceback before
    with pytest.raises(ValueError, match=r"src-valid.mixed.txt.gz cannot be read to its end \(truncated"):
        prepare("forward", root, tmp_path / "out", n_val=1, workers=1)
    valid.write_text("CCN.O=CC\n")  # not gzip under a .gz name: "Not a gzipped file (b'CC')", naming no file
    with pytest.raises(ValueError, match=r"src-valid.mixed.txt.gz cannot be read to its end .*Not a gzipped file"):
        prepare("forward", root, tmp_path / "out", n_val=1, workers=1)
    valid.write_bytes(gzip.compress(b"CCN.O=CC\n"))
    with lzma.open(root / "uspto_full/uspto_valT.csv.xz", "wt") as f:
        f.write("reactants,target\nCC,CC\n")  # a KeyError traceback before
    with pytest.raises(ValueError, match=r"uspto_valT.csv.xz has no column 'input'"):
        prepare("forward", root, tmp_path / "out", n_val=1, workers=1)
    assert not (tmp_path / "out").exists()


def test_data_files_saved_with_a_byte_order_mark_read_as_without_one(tmp_path):
    """A shared file re-saved by a Windows editor starts with a byte-order mark: the pool's CSV "had no column 'input'"
    that its first line names, and the first USPTO-MIT row read '\\ufeffCCN.O=CC', no SMILES, and was left out."""
    import gzip
    import lzma

    from test_data import make_tree

    root = tmp_path / "data"
    make_tree(root)
    for path, opener in ((root / "uspto_full/uspto_valT.csv.xz", lzma.open),
                         (root / "uspto_mit/derived/src-valid.mixed.txt.gz", gzip.open)):
        text = opener(path, "rt").read()
        with opener(path, "wt") as f:
            f.write("\ufeff" + text)
    stats = prepare("forward", root, tmp_path / "out", n_val=1, workers=1)
    assert stats["pool_reactions"] == 5 and (tmp_path / "out/val.src").read_text() == "CCN.O=CC\n"


def test_a_reaction_not_written_reactants_reagents_products_is_named_with_its_line(tmp_path):
    from test_data import csv_text, make_tree, write_gz

    root = tmp_path / "data"
    make_tree(root)
    write_gz(root / "uspto50k/derived/train_liu_minus_gln_valtest.csv.gz",
             csv_text(["liu_split", "liu_index", "class", "reactants>reagents>production"],
                      [["train", 0, 1, "CC(=O)O.OCC>>CCOC(C)=O"], ["train", 1, 1, "CCO"]]))
    with pytest.raises(ValueError, match=r"train_liu_minus_gln_valtest.csv.gz, line 3: 'CCO' is not a reaction "
                                         "written reactants>reagents>products"):
        prepare("forward", root, tmp_path / "out", n_val=1, workers=1)  # "not enough values to unpack" before
    assert not (tmp_path / "out").exists()


def test_a_write_cut_short_leaves_no_half_folder_and_the_same_command_runs_again(tmp_path, monkeypatch):
    import errno

    import molspec_core.data as data_module

    real = data_module.save_arrays

    def disk_full_at_val(path, pairs, vocab):
        if path.name == "val.npz":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, pairs, vocab)

    monkeypatch.setattr(data_module, "save_arrays", disk_full_at_val)
    splits = {"train": PAIRS, "val": PAIRS[:1], "test": PAIRS[:1]}
    with pytest.raises(OSError, match="No space left"):
        write_splits(tmp_path / "out", splits, {"task": "forward"})
    assert not (tmp_path / "out").exists()  # was left with train.* and vocab.json: prepare-data refused it
    (tmp_path / "empty").mkdir()
    with pytest.raises(OSError, match="No space left"):
        write_splits(tmp_path / "empty", splits, {"task": "forward"})
    assert (tmp_path / "empty").is_dir() and not any((tmp_path / "empty").iterdir())
    monkeypatch.setattr(data_module, "save_arrays", real)
    write_splits(tmp_path / "out", splits, {"task": "forward"})
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["train"] == 3


@pytest.mark.parametrize("task", ["forward", "forward-gln", "retro"])
def test_prepare_refuses_a_data_folder_lacking_a_file_its_task_reads_before_any_work(task, tmp_path, monkeypatch):
    """forward converted the USPTO-MIT rows (a minute of RDKit work) before it found the pool missing."""
    from molspec_core import data as data_module

    root = tmp_path / "shared_data"
    for name in data_module.MIT_VALID + data_module.MIT_TEST:  # the files forward-mit reads, and no other
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    monkeypatch.setattr(data_module, "read_pairs", lambda *args: pytest.fail("a data file was read"))
    there = data_module.MIT_VALID + data_module.MIT_TEST
    missing = [name for name in data_module.TASK_INPUTS[task] if name not in there]
    with pytest.raises(ValueError, match=rf"{root / missing[0]} is missing( \(and {len(missing) - 1} more of the "
                                         rf"{len(data_module.TASK_INPUTS[task])} it reads\))?: --data is the shared"):
        prepare(task, root, tmp_path / "out", n_val=1, workers=1)
    assert not (tmp_path / "out").exists()


def test_a_full_disk_names_the_folder_it_could_not_write(tmp_path, monkeypatch):
    """numpy's zip writer fails without a file name: prepare-data said only "error: No space left on device"."""
    import errno

    import molspec_core.data as data_module

    def disk_full(path, pairs, vocab):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(data_module, "save_arrays", disk_full)
    with pytest.raises(OSError, match=r"No space left on device: .*out could not be written; the files begun there "
                                      r"are removed") as caught:
        write_splits(tmp_path / "out", {"train": PAIRS, "val": PAIRS[:1], "test": PAIRS[:1]}, {"task": "forward"})
    assert caught.value.errno == errno.ENOSPC and not (tmp_path / "out").exists()
