"""What `train` refuses, and what it never overwrites (QA pass on the commands that make data and models):
options out of range, corrupt data files, folders it did not write, weights that do not fit the data, a
spent budget, a run that diverged, and an interrupted save. Tiny data and a few steps of the tiny preset."""
import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import molspec_core.train as train_module
from molspec_core import checkpoint
from molspec_core.boundary import Terminated
from molspec_core.data import Pair, save_arrays, write_splits
from molspec_core.tokenizer import Vocab
from molspec_core.train import TrainConfig, TrainingDiverged, add_arguments, main, train

PAIRS = [Pair("CC(=O)Cl.NC", "CNC(C)=O"), Pair("CCO.CC(=O)O", "CCOC(C)=O"), Pair("CC=O", "CCO"),
         Pair("c1ccccc1.BrBr", "Brc1ccccc1"), Pair("CCN.O=CC", "CCNCC"), Pair("CO.OC(=O)c1ccccc1", "COC(=O)c1ccccc1")]
QUICK = dict(preset="tiny", max_tokens=64, warmup=1, eval_every=10_000, val_greedy_rows=1, threads=1)


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "data"
    write_splits(folder, {"train": PAIRS * 2, "val": PAIRS[:2], "test": PAIRS[:1]}, {"task": "forward"})
    return folder


def run(data, out, **options) -> dict:
    return train(TrainConfig(data=str(data), out=str(out), **{**QUICK, **options}))


def files(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()}


# ---- options (items 7 and 8) --------------------------------------------------------------------------------

BAD_FLAGS = [("--lr", "nan"), ("--lr", "inf"), ("--lr", "-1"), ("--warmup", "-5"), ("--max-minutes", "nan"),
             ("--max-minutes", "-1"), ("--rdrop", "nan"), ("--sam", "nan"), ("--focal", "nan"), ("--max-steps", "0"),
             ("--max-steps", "-3"), ("--eval-every", "0"), ("--eval-every", "-1"), ("--label-smoothing", "1.5"),
             ("--label-smoothing", "1"), ("--label-smoothing", "-0.1"), ("--device", "gpu"), ("--accum", "-1"),
             ("--accum", "0"), ("--max-tokens", "-5"), ("--pad-to", "-8"), ("--val-greedy-rows", "-1"),
             ("--weight-decay", "nan"), ("--ema", "1"), ("--dropout", "1"), ("--preset", "huge"),
             ("--teacher-weight", "1.5"), ("--teacher-weight", "nan")]


@pytest.mark.parametrize("flag,value", BAD_FLAGS)
def test_an_option_out_of_range_is_a_usage_error_at_parse_time(flag, value, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--data", str(tmp_path / "d"), "--out", str(tmp_path / "run"), flag, value])
    assert done.value.code == 2 and f"argument {flag}: must be" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag", ["--data", "--out", "--export-dir", "--resume", "--init", "--teacher", "--pairs"])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_path_is_a_usage_error_not_none(flag, value, tmp_path, capsys, monkeypatch):
    """train --out "" (--out "$RUN" with RUN unset) wrote the run into the current folder, and --init "" or --resume
    "" started from random weights, all without a word (an empty name read as none given); from Python, a blank
    name, or an empty --data or --out."""
    monkeypatch.chdir(tmp_path)
    paths = {"--data": str(tmp_path / "d"), "--out": str(tmp_path / "run"), flag: value}
    with pytest.raises(SystemExit) as done:
        main([item for pair in paths.items() for item in pair])
    what = "file" if flag == "--pairs" else "folder"
    assert done.value.code == 2 and f"argument {flag}: must name a {what}" in capsys.readouterr().err
    if value or flag in ("--data", "--out"):  # in Python an optional path left "" is none given, as its default
        with pytest.raises(ValueError, match=f"{flag} must name a {what}"):
            train(TrainConfig(**{"data": str(tmp_path / "d"), "out": str(tmp_path / "run"),
                                 flag[2:].replace("-", "_"): value}))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("field,value", [("lr", float("nan")), ("max_minutes", float("inf")), ("eval_every", 0),
                                         ("label_smoothing", 1.0), ("device", "gpu"), ("accum", 0),
                                         ("max_steps", 0), ("warmup", -5)])
def test_a_config_built_in_python_is_checked_by_the_same_rules(field, value, data, tmp_path):
    with pytest.raises(ValueError, match=f"--{field.replace('_', '-')} must be"):
        run(data, tmp_path / "run", **{field: value})
    assert not (tmp_path / "run").exists()


def test_the_good_values_still_parse():
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--data", "d", "--out", "o", "--lr", "0", "--dropout", "-1", "--device", "cuda:1",
                              "--label-smoothing", "0", "--max-minutes", "0", "--ema", "0.99", "--layer-decay", "1"])
    assert (args.lr, args.dropout, args.device, args.max_minutes, args.ema) == (0.0, -1.0, "cuda:1", 0.0, 0.99)


# ---- the error boundary of python -m molspec_core.train (item 10) ------------------------------------------

def test_the_training_entry_point_answers_an_error_line_and_exit_2(tmp_path, capsys):
    assert main(["--data", str(tmp_path / "nope"), "--out", str(tmp_path / "run"), "--preset", "tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --data {tmp_path / 'nope'}: no such data folder (prepare-data writes one)"]
    assert not (tmp_path / "run").exists()


# ---- corrupt data folders (items 4 and 9) --------------------------------------------------------------------

def corrupt(folder: Path, how: str) -> str:
    """Damage a data folder as the QA pass did; returns the file the error must name."""
    if how == "stats {}":
        (folder / "stats.json").write_text("{}")
        return "stats.json"
    if how == "stats [1]":
        (folder / "stats.json").write_text("[1]")
        return "stats.json"
    if how == "stats task Retro":  # every export of it was refused at load ("task must be one of forward, retro")
        (folder / "stats.json").write_text('{"task": "Retro"}')
        return "stats.json"
    if how == "stats not JSON":
        (folder / "stats.json").write_text("{'task': 1")
        return "stats.json"
    if how == "truncated npz":
        (folder / "train.npz").write_bytes((folder / "train.npz").read_bytes()[:100])
        return "train.npz"
    if how == "npz without the arrays":
        np.savez(folder / "train.npz", other=np.zeros(3))
        return "train.npz"
    if how == "text as npz":
        (folder / "train.npz").write_text("not an archive\n" * 50)
        return "train.npz"
    if how == "offsets past the end":
        with np.load(folder / "train.npz") as z:
            arrays = {name: z[name] for name in z.files}
        arrays["src_offsets"][-1] += 5
        np.savez_compressed(folder / "train.npz", **arrays)
        return "train.npz"
    if how == "vocab too small":
        tokens = json.loads((folder / "vocab.json").read_text())["tokens"]
        (folder / "vocab.json").write_text(json.dumps({"tokens": tokens[:6]}))
        return "train.npz"
    if how == "empty train split":
        np.savez_compressed(folder / "train.npz", src=np.zeros(0, np.uint8), src_offsets=np.zeros(1, np.int64),
                            tgt=np.zeros(0, np.uint8), tgt_offsets=np.zeros(1, np.int64))
        return "train.npz"
    if how == "empty source in val":  # trained the whole budget, then failed at the first validation
        save_arrays(folder / "val.npz", [PAIRS[0], Pair("", "CCO")], Vocab.load(folder / "vocab.json"))
        return "val.npz"
    if how == "source past the positions":  # failed at the step that met it, minutes into an epoch
        save_arrays(folder / "train.npz", [*PAIRS, Pair("C" * 1100, "CCO")], Vocab.load(folder / "vocab.json"))
        return "train.npz"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["stats {}", "stats [1]", "stats task Retro", "stats not JSON", "truncated npz",
                                 "npz without the arrays",
                                 "text as npz", "offsets past the end", "vocab too small", "empty train split",
                                 "empty source in val", "source past the positions"])
def test_a_corrupt_data_folder_is_one_error_naming_its_file(how, data, tmp_path, capsys):
    name = corrupt(data, how)
    assert main(["--data", str(data), "--out", str(tmp_path / "run"), "--preset", "tiny", "--max-steps", "2",
                 "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and str(data / name) in err[0], err
    assert not (tmp_path / "run").exists()


def test_a_malformed_train_state_is_named(data, tmp_path):
    run(data, tmp_path / "first", max_steps=2)
    (tmp_path / "first" / "export" / "train_state.json").write_text('{"step": "two"}')
    with pytest.raises(ValueError, match=r"export/train_state.json: not a training state \(step is 'two'\)"):
        run(data, tmp_path / "second", max_steps=4, resume=str(tmp_path / "first" / "export"))
    (tmp_path / "first" / "export" / "train_state.json").write_text("{")
    with pytest.raises(ValueError, match="export/train_state.json is not valid JSON"):
        run(data, tmp_path / "second", max_steps=4, resume=str(tmp_path / "first" / "export"))
    assert not (tmp_path / "second").exists()


# ---- folders train writes into (items 1, 11, 14) ----------------------------------------------------------

def test_an_export_dir_train_did_not_write_is_refused_and_left_as_it_was(data, tmp_path, monkeypatch):
    run(data, tmp_path / "first", max_steps=2)
    model = tmp_path / "model"  # a model folder: weights, card, calibration
    shutil.copytree(tmp_path / "first" / "export", model)
    (model / "MODEL_CARD.md").write_text("card")
    (model / "calibration.json").write_text("{}")
    before = files(model)
    with pytest.raises(ValueError, match="is not an export this trainer wrote .*MODEL_CARD.md"):
        run(data, tmp_path / "run", max_steps=2, export_dir=str(model))
    assert files(model) == before and not (tmp_path / "run").exists()
    before = files(data)
    with pytest.raises(ValueError, match="the --data folder"):
        run(data, tmp_path / "run", max_steps=2, export_dir=str(data))
    assert files(data) == before
    with pytest.raises(ValueError, match="the --init folder"):
        run(data, tmp_path / "run", max_steps=2, init=str(tmp_path / "first" / "export"),
            export_dir=str(tmp_path / "first" / "export"))
    with pytest.raises(ValueError, match="is or holds the run folder"):
        run(data, tmp_path / "run", max_steps=2, export_dir=str(tmp_path))
    shipped = tmp_path / "shipped"
    monkeypatch.setattr(train_module, "MODELS", shipped)
    with pytest.raises(ValueError, match="shipped models' folder"):
        run(data, tmp_path / "run", max_steps=2, export_dir=str(shipped / "forward" / "new"))
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds notes.txt"):
        run(data, tmp_path / "run", max_steps=2, export_dir=str(tmp_path / "plain"))
    # An export this trainer wrote is replaced, and an empty folder is written into.
    run(data, tmp_path / "run", max_steps=2, export_dir=str(tmp_path / "first" / "export"))
    (tmp_path / "empty").mkdir()
    run(data, tmp_path / "run2", max_steps=2, export_dir=str(tmp_path / "empty"))
    assert json.loads((tmp_path / "empty" / "train_state.json").read_text())["step"] == 2


def test_the_teacher_folder_is_neither_the_export_dir_nor_holds_the_run(data, tmp_path):
    """A teacher that is an export (config, vocabulary, weights and train_state.json only) passed as --export-dir
    was replaced by the student's weights at its first export: the teacher's weights were lost."""
    run(data, tmp_path / "big", max_steps=1)
    teacher = tmp_path / "big" / "export"
    before = files(teacher)
    with pytest.raises(ValueError, match=rf"--export-dir {teacher} is, holds or lies in the --teacher folder "
                                         rf"{teacher}, and each export replaces its folder whole"):
        run(data, tmp_path / "student", max_steps=2, teacher=str(teacher), export_dir=str(teacher))
    with pytest.raises(ValueError, match=rf"--out {teacher / 'run'} lies in the --teacher folder {teacher}; give a "
                                         "run folder of its own"):
        run(data, teacher / "run", max_steps=2, teacher=str(teacher))
    assert files(teacher) == before and not (tmp_path / "student").exists()


def test_a_new_start_in_a_run_folder_holding_earlier_weights_but_no_last_is_refused_and_replaces_nothing(data,
                                                                                                         tmp_path):
    # an export unpacked from the GPU machine (no last/), or a last/ deleted: the same command started from random
    # weights, and its first export replaced the trained ones
    run(data, tmp_path / "first", max_steps=3, eval_every=3)
    shutil.rmtree(tmp_path / "first" / "last")
    before = files(tmp_path / "first")
    for options in ({}, {"init": str(tmp_path / "first" / "best")}):
        with pytest.raises(ValueError, match=r"first/(best|export) holds an earlier run's weights \(step 3\), and "
                                             r".*first/last, from which a run continues, is missing: .*--resume"):
            run(data, tmp_path / "first", max_steps=6, **options)
    assert files(tmp_path / "first") == before
    shutil.rmtree(tmp_path / "first" / "best")  # the export alone (as gpu_kit unpack leaves it)
    with pytest.raises(ValueError, match=r"first/export holds an earlier run's weights \(step 3\)"):
        run(data, tmp_path / "first", max_steps=6)
    # resumed in its own run folder: was "--export-dir first/export is, holds or lies in the --resume folder", a flag
    export = tmp_path / "first" / "export"  # never given, with "(the default is OUT/export)", which it was
    with pytest.raises(ValueError, match=rf"^--resume {export} is, holds or lies in {export}, where this run writes "
                                         r"its exports \(OUT/export\), each replacing the folder whole: give a new "
                                         r"--out"):
        run(data, tmp_path / "first", max_steps=6, resume=str(export))
    (tmp_path / "first" / "export" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=rf"^the export folder {export} \(OUT/export: no --export-dir\) is not an "
                                         r"export this trainer wrote \(it holds notes.txt\)"):
        run(data, tmp_path / "first", max_steps=6)
    (tmp_path / "first" / "export" / "notes.txt").unlink()
    resumed = run(data, tmp_path / "second", max_steps=6, resume=str(tmp_path / "first" / "export"))  # as it says
    assert resumed["step"] == 6


def test_an_export_dir_or_out_that_cannot_be_made_is_refused_before_any_work(data, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")  # a file where a folder of the path should be
    with pytest.raises(ValueError, match=r"--export-dir .*notes.txt/export: .*notes.txt is a file"):
        run(data, tmp_path / "run", max_steps=2, export_dir=str(tmp_path / "notes.txt" / "export"))
    assert not (tmp_path / "run").exists()  # it trained, then the first export failed, and out/last was never saved
    with pytest.raises(ValueError, match=r"--out .*notes.txt/run: .*notes.txt is a file"):
        run(data, tmp_path / "notes.txt" / "run", max_steps=2)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_an_out_that_is_a_model_folder_or_among_the_shipped_models_is_refused(data, tmp_path, monkeypatch):
    run(data, tmp_path / "first", max_steps=2)
    model = tmp_path / "first" / "export"
    before = files(model)
    with pytest.raises(ValueError, match="is a model folder"):
        run(data, model, max_steps=2)
    assert files(model) == before
    monkeypatch.setattr(train_module, "MODELS", tmp_path / "models")
    with pytest.raises(ValueError, match="shipped models' folder"):
        run(data, tmp_path / "models" / "run", max_steps=2)
    with pytest.raises(ValueError, match="lies in the --data folder"):
        run(data, data / "run", max_steps=2)
    assert not (tmp_path / "models").exists() and not (data / "run").exists()


# ---- weights that do not fit (items 3, 11, 12) ---------------------------------------------------------------

def other_vocabulary_data(tmp_path) -> Path:
    pairs = [Pair("CCO.[Pd]", "CCO"), *PAIRS]  # [Pd]: one token more, so every id after it moves
    write_splits(tmp_path / "other", {"train": pairs * 2, "val": pairs[:2], "test": pairs[:1]}, {"task": "forward"})
    return tmp_path / "other"


def test_resuming_with_another_vocabulary_or_shape_is_refused_in_one_line(data, tmp_path):
    run(data, tmp_path / "first", max_steps=2)
    export = tmp_path / "first" / "export"
    other = other_vocabulary_data(tmp_path)
    with pytest.raises(ValueError) as refused:
        run(other, tmp_path / "run", max_steps=4, resume=str(export))
    assert str(refused.value).startswith(f"{export / 'vocab.json'} differs from {other / 'vocab.json'}")
    assert f"--init {export}" in str(refused.value)
    for options, where in ((dict(resume=str(export)), f"--resume {export}"),
                           (dict(init=str(export)), f"--init {export}")):
        with pytest.raises(ValueError) as refused:
            run(data, tmp_path / "run", max_steps=4, preset="draft", **options)
        assert str(refused.value).startswith(f"{where} holds a model of another shape than --preset draft")
        assert "d_model 32 there, 128 here" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="the run folder's saved state .*first/last holds a model of another shape"):
        run(data, tmp_path / "first", max_steps=4, preset="draft")
    # other data: told as such before their vocabulary (whose advice, --init first/last, continued first/last again)
    with pytest.raises(ValueError, match=f"first holds a run .* trained on {data}, and {other} holds other data"):
        run(other, tmp_path / "first", max_steps=4)
    assert not (tmp_path / "run").exists()
    run(other, tmp_path / "run", max_steps=3, init=str(export))  # --init carries the tokens: allowed


def test_a_run_folder_given_to_resume_or_init_is_named_as_one_with_its_folders(data, tmp_path):
    run(data, tmp_path / "first", max_steps=2)
    for flag in ("resume", "init"):  # was "first/config.json is missing"
        with pytest.raises(ValueError, match=rf"--{flag} .*first is a run folder \(it holds export, last, best\), "
                                             rf"not a model folder: give one of its folders, e.g. --{flag} "
                                             rf".*first/export, or --out .*first to continue that run"):
            run(data, tmp_path / "second", max_steps=4, **{flag: str(tmp_path / "first")})
    # a model folder without a run's counters (shipped, averaged): was "train_state.json is missing"
    model = tmp_path / "model"
    shutil.copytree(tmp_path / "first" / "export", model)
    (model / "train_state.json").unlink()
    with pytest.raises(ValueError, match=r"--resume .*model holds no train_state.json: it is a model folder, .* with "
                                         r"--init .*model$"):
        run(data, tmp_path / "second", max_steps=4, resume=str(model))
    assert not (tmp_path / "second").exists()
    run(data, tmp_path / "second", max_steps=4, init=str(model))  # as the refusal says


def test_a_folder_of_model_folders_given_to_init_names_the_one_for_the_datas_task(data, tmp_path):
    """The GPU kit's `start --init models` takes the folder of <task>/ model folders; copied to `train`, whose
    --init is one model folder, it said only "models/config.json is missing"."""
    run(data, tmp_path / "first", max_steps=2)
    models = tmp_path / "models"
    for task in ("forward", "retro"):
        shutil.copytree(tmp_path / "first" / "export", models / task)
    with pytest.raises(ValueError, match=rf"--init {models} holds model folders \(forward, retro\), not a model: "
                                         rf"give the one for these forward data, --init {models / 'forward'}$"):
        run(data, tmp_path / "second", max_steps=4, init=str(models))
    assert not (tmp_path / "second").exists()


def test_init_from_a_model_of_the_other_task_is_refused(data, tmp_path):
    retro = tmp_path / "retro"
    write_splits(retro, {"train": [Pair(p.tgt, p.src) for p in PAIRS] * 2, "val": PAIRS[:2], "test": PAIRS[:1]},
                 {"task": "retro"})
    run(retro, tmp_path / "retro_run", max_steps=2)
    with pytest.raises(ValueError, match="holds a retro model, but .*data holds forward data"):
        run(data, tmp_path / "run", max_steps=2, init=str(tmp_path / "retro_run" / "export"))
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="holds a retro model, but .*data holds forward data"):  # told so before
        run(data, tmp_path / "retro_run", max_steps=4)  # its other data: continuing it on them, the same refusal


def test_a_run_folder_with_a_saved_state_refuses_another_start_and_records_the_real_one(data, tmp_path):
    run(data, tmp_path / "first", max_steps=2)
    init = tmp_path / "first" / "export"
    run(data, tmp_path / "run", max_steps=2, init=str(init))
    with pytest.raises(ValueError, match=r"started from --init .*first/export: .*--init .*other would not be read"):
        run(data, tmp_path / "run", max_steps=4, init=str(tmp_path / "other"))
    with pytest.raises(ValueError, match="started without --resume"):
        run(data, tmp_path / "run", max_steps=4, resume=str(init))
    state = run(data, tmp_path / "run", max_steps=4)  # continues; the config still says where the run started
    assert state["step"] == 4
    assert json.loads((tmp_path / "run" / "export" / "config.json").read_text())["train_config"]["init"] == str(init)
    state = run(data, tmp_path / "run", max_steps=5, init=str(init))  # the same start: continues
    assert state["step"] == 5


def test_a_run_continued_on_its_data_prepared_again_with_another_vocabulary_is_told_how_to_go_on(data, tmp_path):
    """The data folder prepared again (here with a vocabulary of its own, as prepare-data without --vocab builds): the
    run was refused as weights of another vocabulary, 'start a new schedule from them with --init RUN/last', and that
    command continued RUN/last all the same and was refused again. It is told the data were prepared again, and its
    advice (a new --out with --init) runs."""
    run(data, tmp_path / "run", max_steps=2)
    shutil.rmtree(data)
    write_splits(data, {"train": PAIRS[:3] * 2, "val": PAIRS[:2], "test": PAIRS[:1]}, {"task": "forward"})
    assert len(Vocab.load(data / "vocab.json")) != len(Vocab.load(tmp_path / "run" / "last" / "vocab.json"))
    before = files(tmp_path / "run")
    advice = rf"a new --out with --init {tmp_path / 'run' / 'export'} \(a new schedule\)"
    with pytest.raises(ValueError, match=rf"run holds a run .* trained on {data} before it was prepared again .*"
                                         rf"give {advice} to train its weights on {data} as it is now"):
        run(data, tmp_path / "run", max_steps=4)
    assert files(tmp_path / "run") == before
    assert run(data, tmp_path / "anew", max_steps=2, init=str(tmp_path / "run" / "export"))["step"] == 2
    config = json.loads((tmp_path / "run" / "last" / "config.json").read_text())  # counts that happen to agree: the
    config["data_stats"] = json.loads((data / "stats.json").read_text())  # vocabularies still differ, told alike
    (tmp_path / "run" / "last" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=rf"another vocabulary, .* start a new schedule from them with a new --out "
                                         rf"and --init {tmp_path / 'run' / 'export'} \(each token"):
        run(data, tmp_path / "run", max_steps=4)


def test_a_run_continued_on_other_data_is_refused_and_the_same_data_elsewhere_continues(data, tmp_path):
    """Continued with another --data, the run trained on both while its config named the second alone, and best/
    compared exact matches on two validation sets."""
    other = tmp_path / "other"
    write_splits(other, {"train": PAIRS[::-1], "val": PAIRS[2:4], "test": PAIRS[:1]}, {"task": "forward"},
                 Vocab.load(data / "vocab.json"))  # the same vocabulary: nothing else told the two apart
    run(data, tmp_path / "run", max_steps=2)
    before = files(tmp_path / "run")
    with pytest.raises(ValueError, match=rf"run holds a run .* trained on {data}, and {other} holds other data "
                                         rf".*give --data {data} to continue that run, or a new --out with --init"):
        run(other, tmp_path / "run", max_steps=4)
    assert files(tmp_path / "run") == before
    moved = tmp_path / "moved"
    shutil.copytree(data, moved)  # the same data in another folder (a device's checkout): it continues
    assert run(moved, tmp_path / "run", max_steps=3)["step"] == 3


def test_a_run_continued_with_other_batching_says_so_in_its_log_and_its_state(data, tmp_path, caplog):
    """--seed, --max-tokens and --pad-to make an epoch's batches and their order, and a run goes on from its place
    in the epoch: continued with other ones, it drew the rest of the epoch in another order without a word (some rows
    twice, others not until the next epoch). It still goes on (a smaller --max-tokens after running out of memory is
    the kit's advice), and says so in the log and in train_state.json; --accum changes the step, not the order."""
    first = run(data, tmp_path / "run", max_steps=2)
    assert first["batching"] == {"seed": 0, "max_tokens": 64, "pad_to": 1, "accum": 1}
    with caplog.at_level(logging.WARNING, logger="molspec_core.train"):
        same = run(data, tmp_path / "run", max_steps=3)
        assert "batching" not in caplog.text and "batching_changes" not in same
        other = run(data, tmp_path / "run", max_steps=5, seed=7, max_tokens=96)
    assert "other batching than it was trained with (--seed 0 -> 7, --max-tokens 64 -> 96)" in caplog.text
    assert "epoch 0's batches are made anew, and the run goes on from its batch" in caplog.text
    change = {"step": 3, "was": first["batching"], "now": {"seed": 7, "max_tokens": 96, "pad_to": 1, "accum": 1}}
    assert other["batching"] == change["now"] and other["batching_changes"] == [change]
    saved = json.loads((tmp_path / "run" / "export" / "train_state.json").read_text())
    assert saved["batching_changes"] == [change]  # the run's record travels with its export

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="molspec_core.train"):  # an export resumed on another machine
        resumed = run(data, tmp_path / "second", max_steps=6, seed=7, max_tokens=96, accum=2,
                      resume=str(tmp_path / "run" / "export"))
    assert "(--accum 1 -> 2): each step reads 2 batches, not 1; their order is unchanged" in caplog.text
    assert [c["step"] for c in resumed["batching_changes"]] == [3, 5] and resumed["batching"]["accum"] == 2


def test_a_run_continued_or_resumed_with_other_options_says_so_in_its_log_and_its_state(data, tmp_path, caplog):
    """A run interrupted and continued with flags left out went on at the trainer's own --lr, --label-smoothing
    and a step budget (its rate back near the peak) without a word, and config.json named the last call's options
    alone. It goes on as asked, and the log and train_state.json say what changed."""
    run(data, tmp_path / "run", max_steps=2, max_minutes=60.0, lr=1e-3, label_smoothing=0.0)
    with caplog.at_level(logging.WARNING, logger="molspec_core.train"):
        same = run(data, tmp_path / "run", max_steps=3, max_minutes=90.0, lr=1e-3, label_smoothing=0.0)
        assert "other options" not in caplog.text and "option_changes" not in same
        other = run(data, tmp_path / "run", max_steps=4)
    assert (f"continued from {tmp_path / 'run' / 'last'} with other options than it was trained with (--lr 0.001 -> "
            "0.0, --label-smoothing 0.0 -> 0.1, --max-minutes 90.0 -> 0.0)") in caplog.text
    change = {"step": 3, "was": {"lr": 1e-3, "label_smoothing": 0.0, "max_minutes": 90.0},
              "now": {"lr": 0.0, "label_smoothing": 0.1, "max_minutes": 0.0}}
    assert other["option_changes"] == [change]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="molspec_core.train"):  # an export resumed with the first flags
        resumed = run(data, tmp_path / "second", max_steps=5, lr=1e-3, resume=str(tmp_path / "run" / "export"))
    assert "(--lr 0.0 -> 0.001)" in caplog.text and [c["step"] for c in resumed["option_changes"]] == [3, 4]
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("CC=O\tCCO\tCC\n")
    run(data, tmp_path / "third", max_steps=1, pairs=str(pairs))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="molspec_core.train"):  # the same file by another path
        assert "option_changes" not in run(data, tmp_path / "third", max_steps=2, pairs=os.path.relpath(pairs))
    assert "other options" not in caplog.text


def test_a_spent_budget_is_refused_with_the_numbers_not_run_for_0_steps(data, tmp_path):
    run(data, tmp_path / "first", max_steps=3)
    with pytest.raises(ValueError, match="nothing to train: .*first/last is at step 3, and --max-steps 3"):
        run(data, tmp_path / "first", max_steps=3)
    state = json.loads((tmp_path / "first" / "export" / "train_state.json").read_text())
    state["seconds"] = 120.0
    (tmp_path / "first" / "export" / "train_state.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match=r"has trained 2.00 minutes, and --max-minutes 1.5 is the run's whole budget"):
        run(data, tmp_path / "second", max_minutes=1.5, resume=str(tmp_path / "first" / "export"))
    assert not (tmp_path / "second").exists()


def test_a_failed_run_leaves_no_empty_run_folder(data, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(train_module, "validate", broken)
    with pytest.raises(OSError):
        run(data, tmp_path / "run", max_steps=1)
    assert not (tmp_path / "run").exists()


def test_a_save_the_disk_cannot_hold_names_its_folder_and_what_the_run_keeps(data, tmp_path, monkeypatch):
    """A full disk mid-run said only "No space left on device", naming no folder and not what was saved, and left the
    unfinished export.tmp taking the room."""
    run(data, tmp_path / "run", max_steps=3)
    real = checkpoint.save_tensors

    def full(tensors, folder, **options):
        if Path(folder).name == "export.tmp":
            raise OSError(28, "No space left on device")
        return real(tensors, folder, **options)

    monkeypatch.setattr(checkpoint, "save_tensors", full)
    with pytest.raises(OSError, match=r"No space left on device: .*export could not be written at step 6; "
                                      r".*last holds step 3 and .*export step 3: the same command continues "
                                      r"from .*last once .*export can be written") as caught:
        run(data, tmp_path / "run", max_steps=6)
    assert caught.value.errno == 28
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["best", "export", "last"]
    with pytest.raises(OSError, match=r"could not be written at step 2; nothing of this run is saved to continue "
                                      r"from yet"):
        run(data, tmp_path / "new", max_steps=2)


def test_a_time_budgets_progress_bar_shows_no_share_or_end_of_max_steps(data, tmp_path, capsys):
    """Under --max-minutes the bar counted towards --max-steps (100,000 by default): a 30-second run read "1%" and
    an end 46 minutes away."""
    run(data, tmp_path / "run", max_minutes=1e-9, max_steps=100_000)
    bar = capsys.readouterr().err
    assert "1/100000" not in bar and "1step" in bar
    run(data, tmp_path / "steps", max_steps=2)  # without a budget, max-steps is the end
    assert "2/2" in capsys.readouterr().err


def test_without_greedy_rows_no_best_is_written_as_nothing_measured_it(data, tmp_path):
    """With --val-greedy-rows 0 every validation's exact match read 0, so best/ kept the first validation's weights
    for good, labelled the best greedy exact match, though nothing had measured one."""
    run(data, tmp_path / "run", max_steps=3, eval_every=1, val_greedy_rows=0)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["export", "last"]
    run(data, tmp_path / "measured", max_steps=3, eval_every=1, val_greedy_rows=1)
    assert (tmp_path / "measured" / "best" / "train_state.json").is_file()


# ---- non-finite training (item 7) ----------------------------------------------------------------------------

def test_a_diverged_run_stops_before_writing_and_keeps_the_last_good_export(data, tmp_path, monkeypatch):
    run(data, tmp_path / "run", max_steps=2, eval_every=1)
    kept = {name: files(tmp_path / "run" / name) for name in ("export", "best", "last")}
    real = train_module.summed_cross_entropy
    monkeypatch.setattr(train_module, "summed_cross_entropy", lambda *a, **k: real(*a, **k) * float("nan"))
    with pytest.raises(TrainingDiverged, match=r"training diverged at step 3: the loss is nan and weights are not "
                                               r"finite .*stopped without writing"):
        run(data, tmp_path / "run", max_steps=4, eval_every=1)
    assert {name: files(tmp_path / "run" / name) for name in kept} == kept
    checkpoint.load(tmp_path / "run" / "export")  # still finite, still loads
    with pytest.raises(TrainingDiverged):  # a new run: nothing was written, so no run folder is left
        run(data, tmp_path / "new", max_steps=4)
    assert not (tmp_path / "new").exists()


# ---- interrupted saves (item 13) -----------------------------------------------------------------------------

def test_a_save_interrupted_between_its_renames_is_recovered_not_restarted(data, tmp_path, monkeypatch, caplog):
    run(data, tmp_path / "run", max_steps=3)
    real = Path.rename

    def interrupted(self, target):
        if Path(target).name == "last":
            raise KeyboardInterrupt
        return real(self, target)

    monkeypatch.setattr(Path, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(data, tmp_path / "run", max_steps=6)
    monkeypatch.setattr(Path, "rename", real)
    assert not (tmp_path / "run" / "last").exists()
    assert {"last.old", "last.tmp"} <= {p.name for p in (tmp_path / "run").iterdir()}
    caplog.set_level(logging.INFO, logger="molspec_core.train")
    state = run(data, tmp_path / "run", max_steps=8)
    assert "recovered it from" in caplog.text and "resumed from" in caplog.text
    assert state["step"] == 8 and json.loads((tmp_path / "run" / "last" / "train_state.json").read_text())["step"] == 8
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["best", "export", "last"]


@pytest.mark.parametrize("signal", [KeyboardInterrupt, Terminated])
def test_ctrl_c_or_sigterm_saves_the_steps_made_and_the_same_command_goes_on(signal, data, tmp_path, monkeypatch):
    real = train_module.learning_rate

    def stop_at_step_4(cfg, peak, step, *rest):
        if step == 4:
            raise signal
        return real(cfg, peak, step, *rest)

    monkeypatch.setattr(train_module, "learning_rate", stop_at_step_4)
    with pytest.raises(signal):  # before the first save (every 5 minutes): the run was lost, its folder removed
        run(data, tmp_path / "run", max_steps=6)
    for folder in ("last", "export"):
        assert json.loads((tmp_path / "run" / folder / "train_state.json").read_text())["step"] == 3
    monkeypatch.setattr(train_module, "learning_rate", real)
    assert run(data, tmp_path / "run", max_steps=6)["step"] == 6
    assert json.loads((tmp_path / "run" / "last" / "train_state.json").read_text())["step"] == 6


def test_an_interrupt_mid_step_saves_the_place_in_the_data_of_the_steps_made(data, tmp_path, monkeypatch):
    """Ctrl-C comes mostly during a step's forward and backward passes, after its batches were drawn: the save
    recorded the place past them (and their tokens), so the run went on without ever learning from them."""
    made = run(data, tmp_path / "made", max_steps=3, accum=2)
    real, calls = train_module.summed_cross_entropy, []

    def stop_in_step_4(*args, **kwargs):
        calls.append(1)
        if len(calls) == 8:  # the second batch of step 4 (two a step)
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "summed_cross_entropy", stop_in_step_4)
    with pytest.raises(KeyboardInterrupt):
        run(data, tmp_path / "run", max_steps=6, accum=2)
    saved = json.loads((tmp_path / "run" / "last" / "train_state.json").read_text())
    assert saved["step"] == 3
    assert [saved[key] for key in ("epoch", "batch_in_epoch", "tokens")] == [made[key] for key in
                                                                             ("epoch", "batch_in_epoch", "tokens")]


def test_best_is_replaced_whole_or_not_at_all(data, tmp_path, monkeypatch, caplog):
    """best/ was written in place: its weights were unlinked first, so a kill mid-write lost the run's best."""
    run(data, tmp_path / "run", max_steps=3)
    best = tmp_path / "run" / "best"
    model, vocab, config = checkpoint.load(best)
    real = checkpoint.save_tensors

    def killed(tensors, folder, **options):
        if Path(folder).name == "best.tmp":
            raise KeyboardInterrupt
        return real(tensors, folder, **options)

    monkeypatch.setattr(checkpoint, "save_tensors", killed)
    with pytest.raises(KeyboardInterrupt):
        train_module.save_best(best, model, vocab, {"step": 99}, {**config, "step": 99})
    monkeypatch.setattr(checkpoint, "save_tensors", real)
    assert checkpoint.load(best)[2]["step"] == config["step"]  # the old best, whole
    train_module.save_best(best, model, vocab, {"step": 99}, {**config, "step": 99})
    best.rename(best.parent / "best.tmp")  # a finished write the last rename never moved in: best/ gone
    caplog.set_level(logging.INFO, logger="molspec_core.train")
    run(data, tmp_path / "run", max_steps=5)  # the next run puts it back before it trains on
    assert "best was missing" in caplog.text
    assert (best / "train_state.json").is_file() and not (best.parent / "best.tmp").exists()


def test_an_interrupt_while_best_is_written_leaves_its_score_to_be_reached_again(data, tmp_path, monkeypatch):
    """Ctrl-C while best/ was written: out/last kept the new best score and best/ the weights before it (or none), so
    no later validation short of that score replaced them; this tiny model's greedy score stays 0, and the run ended
    without a best/ at all."""
    real = train_module.save_best

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "save_best", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(data, tmp_path / "run", max_steps=6, eval_every=2)
    saved = json.loads((tmp_path / "run" / "last" / "train_state.json").read_text())
    assert saved["step"] == 2 and saved["best_exact"] == -1.0 and not (tmp_path / "run" / "best").exists()
    monkeypatch.setattr(train_module, "save_best", real)
    run(data, tmp_path / "run", max_steps=6, eval_every=2)
    assert json.loads((tmp_path / "run" / "best" / "train_state.json").read_text())["step"] == 4


def test_recovery_prefers_a_complete_tmp_then_the_old_folder(tmp_path):
    def folder(name: str, step: int | None) -> Path:
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text("{}")
        if step is not None:
            (path / "train_state.json").write_text(json.dumps({"step": step}))
        return path

    folder("last.old", 3)
    folder("last.tmp", None)  # interrupted while written: no train_state.json yet
    train_module.recover_folder(tmp_path / "last")
    assert json.loads((tmp_path / "last" / "train_state.json").read_text())["step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]
    folder("last.tmp", 6)  # a finished write beside a complete folder: the folder stands
    train_module.recover_folder(tmp_path / "last")
    assert json.loads((tmp_path / "last" / "train_state.json").read_text())["step"] == 3
    (tmp_path / "last.old").mkdir()
    (tmp_path / "last.old" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="last.old holds files a training run does not write"):
        train_module.recover_folder(tmp_path / "last")
    assert (tmp_path / "last.old" / "notes.txt").read_text() == "mine"


def test_replacing_a_folder_keeps_a_complete_one_under_some_name_at_every_step(tmp_path):
    for name, step in (("export", 1), ("export.tmp", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train_state.json").write_text(json.dumps({"step": step}))
    train_module._replace_folder(tmp_path / "export.tmp", tmp_path / "export")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    assert json.loads((tmp_path / "export" / "train_state.json").read_text())["step"] == 2


def test_a_float16_export_still_resumes_past_the_new_checks(data, tmp_path):
    """The checks read config.json and vocab.json only: a float16 export still resumes and trains on."""
    run(data, tmp_path / "first", max_steps=2)
    assert all(t.dtype == torch.float16 for t in checkpoint.load_tensors(tmp_path / "first" / "export").values())
    state = run(data, tmp_path / "second", max_steps=3, resume=str(tmp_path / "first" / "export"))
    assert state["step"] == 3 and state["warm_from"] == 2


def test_dataclass_rules_cover_every_number_option():
    numbers = [spec.name for spec in dataclasses.fields(TrainConfig)
               if isinstance(spec.default, (int, float)) and not isinstance(spec.default, bool)]
    assert numbers and all(spec.metadata.get("rule") is not None for spec in dataclasses.fields(TrainConfig)
                           if spec.name in numbers)


def test_a_model_run_or_data_parent_folder_given_as_data_is_named_as_such(data, tmp_path):
    """`train --data models/forward` said "models/forward/stats.json is missing", a run folder "vocab.json is
    missing", and the folder of <task>/ data folders the same: none said what --data takes instead."""
    run(data, tmp_path / "first", max_steps=2)
    cases = {tmp_path / "first" / "export": r"is a model folder \(it holds config.json\), not data: --data takes "
                                             r"a folder prepare-data wrote; to train from its weights, give it as "
                                             r"--init$",
             tmp_path / "first": r"is a run folder \(it holds export, last, best\), not data: --data takes a folder "
                                 r"prepare-data wrote$",
             tmp_path: rf"holds data folders \(data\), not data: give one of them, e.g. --data {data}$"}
    for given, words in cases.items():
        with pytest.raises(ValueError, match=rf"^--data {given} {words}"):
            run(given, tmp_path / "second", max_steps=2)
    assert not (tmp_path / "second").exists()
