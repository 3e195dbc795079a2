import json
import re

import pytest
import torch
from safetensors.torch import save_file

from conftest import random_model
from molspec_core import checkpoint
from molspec_core.model import Seq2SeqTransformer, preset
from molspec_core.tokenizer import SPECIALS, Vocab


def test_save_load_round_trip_with_shards(tmp_path, monkeypatch):
    model = random_model(0, vocab_size=14)
    vocab = Vocab(list(SPECIALS) + [f"[X{i}]" for i in range(10)])
    monkeypatch.setattr(checkpoint, "MAX_SHARD_BYTES", 20_000)  # force several shards
    checkpoint.save(model, vocab, tmp_path, meta={"task": "forward"})
    shards = sorted(p.name for p in tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 1
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    loaded, loaded_vocab, config = checkpoint.load(tmp_path)
    assert config["task"] == "forward" and loaded_vocab.tokens == vocab.tokens
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_weight_files_get_the_permissions_of_the_json_files_beside_them(tmp_path, monkeypatch):
    """safetensors' save_file wrote every weight file 0600: a model another user trained or averaged did not load."""
    folder = tiny_folder(tmp_path / "m", shards=True, monkeypatch=monkeypatch)
    mode = (folder / "config.json").stat().st_mode
    weights = sorted(folder.glob("model*.safetensors*"))
    assert len(weights) > 2 and {path.stat().st_mode for path in weights} == {mode}


def test_shipped_models_respect_the_shard_limit():
    from conftest import ROOT

    for path in (ROOT / "models").glob("*/*.safetensors"):
        assert path.stat().st_size <= checkpoint.MAX_SHARD_BYTES, path


# ---- hostile and malformed model folders (issue 14, items 6 and 8) --------------------------------


def tiny_folder(folder, shards: bool = False, monkeypatch=None):
    """A loadable tiny model folder (14 tokens, d_model 32), sharded when asked."""
    model = random_model(0, vocab_size=14)
    vocab = Vocab(list(SPECIALS) + [f"[X{i}]" for i in range(10)])
    if shards:
        monkeypatch.setattr(checkpoint, "MAX_SHARD_BYTES", checkpoint.HEADER_ROOM + 20_000)  # a few tensors each
    checkpoint.save(model, vocab, folder, meta={"task": "forward"})
    return folder


def edit_json(path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.fixture
def no_model_built(monkeypatch):
    """Fails the test if the loader builds a model: a hostile folder must be refused before that."""
    def refuse(cfg):
        raise AssertionError(f"a model was built for {cfg}")
    monkeypatch.setattr(checkpoint, "Seq2SeqTransformer", refuse)


@pytest.mark.parametrize("name,value", [
    ("max_positions", 100_000),  # 3,000,000 once took 4.6 GB before any weight was read
    ("n_encoder_layers", 2000),
    ("n_decoder_layers", 0),
    ("d_model", 100_000),
    ("d_ff", -1),
    ("n_heads", 0),
    ("vocab_size", 10_000_000),
    ("n_heads", 4.0),
    ("d_model", True),
    ("max_positions", "1024"),
    ("dropout", 1.5),
])
def test_config_sizes_beyond_the_maxima_are_refused_before_building(tmp_path, no_model_built, name, value):
    folder = tiny_folder(tmp_path)
    edit_json(folder / "config.json", lambda c: c["model"].update({name: value}))
    with pytest.raises(checkpoint.CheckpointError, match=rf"config\.json.*model\.{name}"):
        checkpoint.load(folder)


def test_n_heads_must_divide_d_model(tmp_path, no_model_built):
    """Once this loaded and every prediction then raised."""
    folder = tiny_folder(tmp_path)
    edit_json(folder / "config.json", lambda c: c["model"].update(n_heads=3))
    with pytest.raises(checkpoint.CheckpointError, match=r"config\.json: n_heads \(3\) must divide d_model \(32\)"):
        checkpoint.load(folder)


@pytest.mark.parametrize("content,message", [
    (None, r"vocab\.json is missing"),
    ("{not json", r"vocab\.json is not valid JSON"),
    ('{"tokens": "abc"}', r"vocab\.json: expected"),
    ("[" * 100_000 + "]" * 100_000, r"vocab\.json is not valid JSON"),
    (json.dumps({"tokens": [f"[X{i}]" for i in range(200_000)]}), r"vocab\.json is larger than"),
    (json.dumps({"tokens": list(SPECIALS) + ["C"] * 10}), r"vocab\.json: vocabulary has duplicate"),
    (json.dumps({"tokens": list(SPECIALS) + ["C"]}), r"vocab\.json has 5 tokens, config\.json says vocab_size 14"),
    (json.dumps({"tokens": list(SPECIALS) + [f"[X{i}]" for i in range(9)] + ["CC"]}),
     r"vocab\.json: token 13, 'CC', is not one SMILES token"),  # loaded; the tokenizer never writes it
    (json.dumps({"tokens": list(SPECIALS) + [""] + [f"[X{i}]" for i in range(9)]}),
     r"vocab\.json: token 4, '', is not one SMILES token"),
], ids=["missing", "not-json", "not-a-list", "deep-nesting", "too-large", "duplicates", "wrong-count", "two-atoms",
        "empty"])
def test_vocab_json_problems_name_the_file(tmp_path, no_model_built, content, message):
    folder = tiny_folder(tmp_path)
    if content is None:
        (folder / "vocab.json").unlink()
    else:
        (folder / "vocab.json").write_text(content)
    with pytest.raises(checkpoint.CheckpointError, match=message):
        checkpoint.load(folder)


def test_config_json_problems_name_the_file(tmp_path, no_model_built):
    folder = tiny_folder(tmp_path)
    for content, message in [("", r"config\.json is not valid JSON"), ("[1, 2]", r"config\.json: expected"),
                             ('{"model": {"vocab_size": 14, "colour": 1}}', r"config\.json: unknown model settings")]:
        (folder / "config.json").write_text(content)
        with pytest.raises(checkpoint.CheckpointError, match=message):
            checkpoint.load(folder)
    (folder / "config.json").unlink()
    (folder / "config.json").mkdir()
    with pytest.raises(checkpoint.CheckpointError, match=r"config\.json is not a regular file"):
        checkpoint.load(folder)


def test_a_task_or_data_stats_the_engine_does_not_know_is_refused(tmp_path, no_model_built):
    """'Forward' loaded as a task of its own, and every answer check, which reads the task, was skipped."""
    folder = tiny_folder(tmp_path)
    for key, value, message in (("task", "Forward", r"config\.json: task must be one of forward, retro, not "
                                 "'Forward'"),
                                ("data_stats", "x", r"config\.json: data_stats must be an object"),
                                # loaded, then every augmented predict and the server's /models raised TypeError
                                ("data_stats", {"augment": None}, r"config\.json: data_stats\.augment must be a whole "
                                 r"number, 0 or more \(the writings of each query in the training data\), not None"),
                                ("data_stats", {"augment": "10"}, r"data_stats\.augment must be .*, not '10'"),
                                ("data_stats", {"augment": True}, r"data_stats\.augment must be .*, not True")):
        edit_json(folder / "config.json", lambda c: c.update({key: value}))
        with pytest.raises(checkpoint.CheckpointError, match=message):
            checkpoint.load(folder)
        edit_json(folder / "config.json", lambda c: c.pop(key))
    edit_json(folder / "config.json", lambda c: c.update({"data_stats": {"augment": 20}}))
    checkpoint.inspect_folder(folder)  # as the shipped retro model's


def test_weights_that_are_not_finite_are_refused(tmp_path):
    """A NaN in the weights loaded: greedy answered '<pad><pad>...', beam nothing, sampling raised from torch."""
    folder = tiny_folder(tmp_path)
    tensors = checkpoint.load_tensors(folder)
    name = sorted(tensors)[3]
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(checkpoint.CheckpointError, match=f"tensor {name} holds values that are not finite"):
        checkpoint.load(folder)


def test_weights_are_checked_against_the_config_from_the_headers(tmp_path, no_model_built):
    folder = tiny_folder(tmp_path)
    edit_json(folder / "config.json", lambda c: c["model"].update(d_ff=128))  # the weights have d_ff 64
    with pytest.raises(checkpoint.CheckpointError,
                       match=r"model\.safetensors: tensor \S+ff\S+ has shape \[64(, 32)?\]"):
        checkpoint.load(folder)
    edit_json(folder / "config.json", lambda c: c["model"].update(d_ff=64, n_decoder_layers=3))
    with pytest.raises(checkpoint.CheckpointError, match=r"model\.safetensors lacks \d+ tensors .* decoder\.2\."):
        checkpoint.load(folder)


def test_a_tensor_of_the_wrong_shape_or_type_in_the_file_is_refused(tmp_path, no_model_built):
    folder = tiny_folder(tmp_path)
    tensors = checkpoint.load_tensors(folder)
    tensors["embed.weight"] = tensors["embed.weight"][:, :16].contiguous()
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(checkpoint.CheckpointError,
                       match=r"model\.safetensors: tensor embed\.weight has shape \[14, 16\]"):
        checkpoint.load(folder)
    tensors["embed.weight"] = torch.zeros(14, 32, dtype=torch.int64)
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(checkpoint.CheckpointError, match=r"tensor embed\.weight is I64"):
        checkpoint.load(folder)
    tensors["embed.weight"] = torch.zeros(14, 32)
    tensors["extra"] = torch.zeros(1)
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(checkpoint.CheckpointError, match=r"model\.safetensors holds tensors .* 'extra'"):
        checkpoint.load(folder)
    (folder / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(checkpoint.CheckpointError, match=r"model\.safetensors is not a safetensors file"):
        checkpoint.load(folder)


def test_shard_index_problems_name_the_file(tmp_path, monkeypatch, no_model_built):
    folder = tiny_folder(tmp_path, shards=True, monkeypatch=monkeypatch)
    index = folder / checkpoint.INDEX_NAME
    shards = sorted(folder.glob("model-*.safetensors"))
    good = index.read_text()
    shards[-1].rename(folder / "gone")
    with pytest.raises(checkpoint.CheckpointError, match=rf"{shards[-1].name} is missing"):
        checkpoint.load(folder)
    (folder / "gone").rename(shards[-1])
    edit_json(index, lambda i: i["weight_map"].update({"embed.weight": "../../etc/passwd.safetensors"}))
    with pytest.raises(checkpoint.CheckpointError, match=r"index\.json: shard name .* plain"):
        checkpoint.load(folder)
    index.write_text(good)
    edit_json(index, lambda i: i["weight_map"].update({"ghost": shards[0].name}))
    with pytest.raises(checkpoint.CheckpointError,
                       match=r"index\.json lists 1 tensors in shards that do not hold them"):
        checkpoint.load(folder)
    index.write_text(good)
    edit_json(index, lambda i: i["weight_map"].update({"embed.weight": shards[-1].name if
                                                        i["weight_map"]["embed.weight"] != shards[-1].name
                                                        else shards[0].name}))
    with pytest.raises(checkpoint.CheckpointError, match=r"index\.json does not list tensor 'embed\.weight'"):
        checkpoint.load(folder)
    index.write_text('{"weight_map": []}')
    with pytest.raises(checkpoint.CheckpointError, match=r"index\.json: expected"):
        checkpoint.load(folder)


def test_expected_shapes_match_the_model():
    """The loader's shapes come from a formula (fast, allocates nothing); it must agree with the model."""
    for name in ("tiny", "forward", "retro", "cpu", "draft"):
        cfg = preset(name, vocab_size=23, max_positions=16)
        model_shapes = {k: tuple(v.shape) for k, v in Seq2SeqTransformer(cfg).state_dict().items()}
        assert checkpoint.expected_shapes(cfg) == model_shapes, name


def test_shipped_models_pass_the_checks():
    from conftest import ROOT

    folders = [*(ROOT / "models").glob("*"), *(ROOT / "models").glob("*/draft")]
    folders = [f for f in folders if f.is_dir()]  # models/ also holds the route planner's stock file
    assert {f.name for f in folders} >= {"forward", "retro", "draft"}
    for folder in folders:
        _, cfg = checkpoint.read_config(folder)
        checkpoint.check_weights(folder, cfg, checkpoint.read_headers(folder))


# ---- averaging fine-tuned models (molspec average) -----------------------------------------------

def two_models(folder, meta: dict | None = None) -> Vocab:
    """Two small models of one vocabulary saved as folder/m1 and folder/m2, as average's tests take them; the
    vocabulary."""
    vocab = Vocab(list(SPECIALS) + [f"[X{i}]" for i in range(10)])
    for seed in (1, 2):
        checkpoint.save(random_model(seed, vocab_size=14), vocab, folder / f"m{seed}", meta=meta)
    return vocab


def test_average_writes_the_mean_of_the_weights(tmp_path):
    vocab = Vocab(list(SPECIALS) + [f"[X{i}]" for i in range(10)])
    models = [random_model(seed, vocab_size=14) for seed in (1, 2, 3)]
    for i, model in enumerate(models):  # as train writes best/: the step and validation of one run
        checkpoint.save(model, vocab, tmp_path / f"m{i}", meta={"task": "retro", "step": 100 * i,
                                                                 "validation": {"greedy_exact_match": i / 10}})
    config = checkpoint.average([tmp_path / f"m{i}" for i in range(3)], tmp_path / "mean")
    mean, mean_vocab, saved = checkpoint.load(tmp_path / "mean")
    assert saved == config and saved["task"] == "retro" and len(saved["averaged_from"]) == 3
    assert "step" not in saved and "validation" not in saved  # the first model's, not the mean's
    assert mean_vocab.tokens == vocab.tokens
    states = [model.state_dict() for model in models]
    for name, tensor in mean.state_dict().items():
        expected = sum(state[name] for state in states) / 3
        assert torch.allclose(tensor, expected, atol=1e-6), name


@pytest.mark.parametrize("given_empty", [False, True])
def test_an_average_stopped_while_writing_leaves_no_half_written_model(tmp_path, monkeypatch, given_empty):
    """Ctrl-C while the mean was written left --out with config.json and vocab.json but no weights: a folder that
    did not load, and that the rerun refused as one that already holds files."""
    two_models(tmp_path)
    out = tmp_path / "mean"
    if given_empty:
        out.mkdir()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(checkpoint, "save_tensors", interrupted)
        with pytest.raises(KeyboardInterrupt):
            checkpoint.average([tmp_path / "m1", tmp_path / "m2"], out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m1", "m2", *(["mean"] if given_empty else [])])
    assert not given_empty or not any(out.iterdir())
    checkpoint.average([tmp_path / "m1", tmp_path / "m2"], out)  # the rerun is not refused
    assert checkpoint.load(out)[0].cfg == checkpoint.load(tmp_path / "m1")[0].cfg


@pytest.mark.parametrize("given_empty", [False, True])
def test_an_average_the_disk_cannot_hold_names_its_folder_and_what_was_removed(tmp_path, monkeypatch, given_empty):
    """A full disk said only 'error: No space left on device', naming neither --out nor what was left there."""
    two_models(tmp_path)
    out = tmp_path / "mean"
    if given_empty:
        out.mkdir()

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "save_tensors", full)
    with pytest.raises(OSError) as caught:
        checkpoint.average([tmp_path / "m1", tmp_path / "m2"], out)
    assert caught.value.errno == 28
    left = f"{out} is left empty" if given_empty else f"{out} was not created"
    assert caught.value.strerror == (f"No space left on device: the mean could not be written to {out}; its unfinished "
                                     f"copy was removed and {left}: the same command writes it once {tmp_path} can "
                                     "be written")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m1", "m2", *(["mean"] if given_empty else [])])


def test_an_average_whose_copy_cannot_be_made_names_out_not_the_hidden_copy(tmp_path, monkeypatch):
    """The folder the mean is written into first could not be made on a full disk: the error named that hidden
    folder ('No space left on device: .../.mean.partial-k2j3'), not --out."""
    two_models(tmp_path)
    out = tmp_path / "mean"

    def full(prefix, dir):
        raise OSError(28, "No space left on device", f"{dir}/{prefix}k2j3")

    monkeypatch.setattr(checkpoint.tempfile, "mkdtemp", full)
    with pytest.raises(OSError) as caught:
        checkpoint.average([tmp_path / "m1", tmp_path / "m2"], out)
    assert (caught.value.errno, caught.value.filename) == (28, None)
    assert caught.value.strerror == (f"No space left on device: the mean could not be written to {out}; {out} was not "
                                     f"created: the same command writes it once {tmp_path} can be written")


def test_a_run_folder_given_as_a_model_is_named_as_one(tmp_path, no_model_built):
    """A training run's --out (runs/a, holding last/ and export/) said '<run>/config.json is missing'."""
    run = tmp_path / "run"
    for part in ("last", "export"):
        tiny_folder(run / part)
        (run / part / "train_state.json").write_text("{}")
    with pytest.raises(checkpoint.CheckpointError) as caught:
        checkpoint.load(run)
    assert str(caught.value) == (f"{run} is a run folder (it holds export, last), not a model folder: give one of its "
                                 f"folders, e.g. {run / 'export'}")
    (run / "last" / "train_state.json").unlink()
    (run / "export" / "train_state.json").unlink()  # not a run's saves: a folder of model folders
    with pytest.raises(checkpoint.CheckpointError, match=r"holds model folders \(export, last\)"):
        checkpoint.inspect_folder(run)


def test_a_folder_of_model_folders_given_as_a_model_names_them(tmp_path, no_model_built, monkeypatch):
    """The shipped models' folder (models/, holding forward/ and retro/) given as a model said only
    'models/config.json is missing'. A model folder that lost its config.json, its draft/ still there, says that."""
    models = tmp_path / "models"
    for name in ("retro", "forward"):
        tiny_folder(models / name)
    (models / "stock.smi").write_text("CCO\n")
    with pytest.raises(checkpoint.CheckpointError) as caught:
        checkpoint.load(models)
    assert str(caught.value) == (f"{models} holds model folders (forward, retro), not a model: give one of them, "
                                 f"e.g. {models / 'forward'}")
    for i in range(6):
        tiny_folder(models / f"m{i}")
    with pytest.raises(checkpoint.CheckpointError, match=r"\(forward, m0, m1, m2, m3 and 3 more\)"):
        checkpoint.inspect_folder(models)
    private = tmp_path / "shared" / "private"  # another user's folder, closed to this one (as /tmp's are)
    private.mkdir(parents=True)
    is_file = type(private).is_file

    def closed(path):
        if path.parent == private:
            raise PermissionError(13, "Permission denied", str(path))
        return is_file(path)

    with monkeypatch.context() as patched, pytest.raises(checkpoint.CheckpointError,
                                                         match=r"shared/config\.json is missing$"):
        patched.setattr(type(private), "is_file", closed)
        checkpoint.inspect_folder(tmp_path / "shared")
    model = models / "forward"
    tiny_folder(model / checkpoint.DRAFT_DIR)
    (model / "config.json").unlink()
    with pytest.raises(checkpoint.CheckpointError, match=r"forward/config\.json is missing$"):
        checkpoint.inspect_folder(model)


def test_a_model_trained_without_dropout_averages_with_its_parent(tmp_path):
    """train --dropout 0 records dropout 0.0 in its config; that is how it trained, not a size (the mean of the
    shipped forward weights and CPU run 50's was refused before)."""
    vocab = Vocab(list(SPECIALS) + [f"[X{i}]" for i in range(10)])
    checkpoint.save(random_model(1, vocab_size=14, dropout=0.1), vocab, tmp_path / "parent")
    checkpoint.save(random_model(2, vocab_size=14, dropout=0.0), vocab, tmp_path / "no_dropout")
    checkpoint.average([tmp_path / "parent", tmp_path / "no_dropout"], tmp_path / "mean")
    assert checkpoint.load(tmp_path / "mean")[0].cfg == checkpoint.load(tmp_path / "parent")[0].cfg


def test_average_refuses_models_that_do_not_match(tmp_path):
    vocab = Vocab(list(SPECIALS) + [f"[X{i}]" for i in range(10)])
    checkpoint.save(random_model(1, vocab_size=14), vocab, tmp_path / "a")
    checkpoint.save(random_model(2, vocab_size=14), Vocab(list(SPECIALS) + [f"[Y{i}]" for i in range(10)]),
                    tmp_path / "other_vocab")
    checkpoint.save(random_model(3, vocab_size=14, n_decoder_layers=1), vocab, tmp_path / "other_size")
    with pytest.raises(checkpoint.CheckpointError, match="vocabulary differs"):
        checkpoint.average([tmp_path / "a", tmp_path / "other_vocab"], tmp_path / "out")
    with pytest.raises(checkpoint.CheckpointError, match=r"model sizes differ .*\(n_decoder_layers 1 against 2\)"):
        checkpoint.average([tmp_path / "a", tmp_path / "other_size"], tmp_path / "out")
    # a retro model of the same sizes was averaged into a model config.json called forward
    checkpoint.save(random_model(4, vocab_size=14), vocab, tmp_path / "retro", meta={"task": "retro"})
    with pytest.raises(checkpoint.CheckpointError, match=r"retro is a retro model and .*a a forward model"):
        checkpoint.average([tmp_path / "a", tmp_path / "retro"], tmp_path / "out")
    # written inside a model averaged, the mean became part of its folder (as draft/, its draft model)
    with pytest.raises(checkpoint.CheckpointError, match=r"draft lies inside .*a, one of the folders being averaged"):
        checkpoint.average([tmp_path / "a", tmp_path / "retro"], tmp_path / "a" / "draft")
    assert not (tmp_path / "a" / "draft").exists()
    with pytest.raises(checkpoint.CheckpointError, match="at least two"):
        checkpoint.average([tmp_path / "a"], tmp_path / "out")
    with pytest.raises(checkpoint.CheckpointError, match="one of the folders"):
        checkpoint.average([tmp_path / "a", tmp_path / "a"], tmp_path / "a")
    assert not (tmp_path / "out").exists()


def test_cli_average_refuses_a_folder_holding_files_a_missing_parent_and_a_model_given_twice(tmp_path, capsys,
                                                                                             monkeypatch):
    """Audit finding 1: --out an existing model folder replaced its weights, config and vocabulary and kept its
    card, calibration and draft/, so the folder no longer loaded; a missing parent folder was created; the
    same model given twice was weighed double. All refused before any model is read."""
    from molspec_core.cli import main

    vocab = two_models(tmp_path, meta={"task": "forward"})
    victim = tmp_path / "victim"
    checkpoint.save(random_model(3, vocab_size=14), vocab, victim, meta={"task": "retro"})
    (victim / "MODEL_CARD.md").write_text("the shipped model\n")
    before = {path.name: path.read_bytes() for path in victim.iterdir()}
    models = ["--model", str(tmp_path / "m1"), "--model", str(tmp_path / "m2")]
    with monkeypatch.context() as refused_first:
        refused_first.setattr(checkpoint, "load", lambda *args, **kwargs: pytest.fail("a model was read"))
        for argv, message in [
                ([*models, "--out", str(victim)], f"{victim} already holds files; give a new or empty folder"),
                ([*models, "--out", str(tmp_path / "missing" / "soup")], f"the folder {tmp_path / 'missing'} does "
                                                                         "not exist"),
                (["--model", str(tmp_path / "m1"), "--model", str(tmp_path / "." / "m1"), "--out",
                  str(tmp_path / "soup")], "is given twice")]:
            assert main(["average", *argv]) == 2
            err = capsys.readouterr().err
            assert err.startswith("error: ") and message in err, err
    assert {path.name: path.read_bytes() for path in victim.iterdir()} == before
    assert not (tmp_path / "missing").exists() and not (tmp_path / "soup").exists()
    (tmp_path / "empty").mkdir()  # a new folder made for it is written into
    assert main(["average", *models, "--out", str(tmp_path / "empty")]) == 0
    assert checkpoint.load(tmp_path / "empty")[2]["task"] == "forward"


def test_cli_average_writes_float16_shards(tmp_path, capsys):
    from molspec_core.cli import main

    two_models(tmp_path, meta={"task": "forward"})
    assert main(["average", "--model", str(tmp_path / "m1"), "--model", str(tmp_path / "m2"),
                 "--out", str(tmp_path / "mean"), "--float16"]) == 0
    assert "mean of 2 models (forward)" in capsys.readouterr().out
    headers = checkpoint.read_headers(tmp_path / "mean")
    assert {header.dtype for header in headers.values()} == {"F16"}
    assert main(["average", "--model", str(tmp_path / "m1"), "--model", str(tmp_path / "nowhere"),
                 "--out", str(tmp_path / "bad")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_average_takes_shipped_models_by_name_as_every_other_command_does(tmp_path, capsys, monkeypatch):
    """'average --model forward' was 'model folder forward does not exist' where predict takes the name."""
    from molspec_core import service
    from molspec_core.cli import main

    vocab = Vocab(list(SPECIALS) + [f"[X{i}]" for i in range(10)])
    for name, seed in (("one", 1), ("two", 2)):
        checkpoint.save(random_model(seed, vocab_size=14), vocab, tmp_path / "models" / name, meta={"task": "forward"})
    monkeypatch.setattr(service, "MODELS_DIR", tmp_path / "models")
    monkeypatch.chdir(tmp_path)  # no folder named one or two here: the names are the shipped models'
    assert main(["average", "--model", "one", "--model", "two", "--out", str(tmp_path / "mean")]) == 0
    assert "mean of 2 models (forward)" in capsys.readouterr().out


# ---- session 85's audit: cut-short files, and a model folder checked as the app loads it ---------------------------

def test_a_cut_short_or_lengthened_weight_file_is_named_so(tmp_path, monkeypatch, no_model_built):
    """An interrupted copy of a shard was refused as "incomplete metadata, file not fully covered", which sent the
    user to the header; the message now says the file is cut short, by how much, and to copy it again."""
    folder = tiny_folder(tmp_path, shards=True, monkeypatch=monkeypatch)
    shard = sorted(folder.glob("model-*.safetensors"))[1]
    whole = shard.read_bytes()
    shard.write_bytes(whole[:-1000])
    cut = rf"{shard.name} is cut short: {len(whole) - 1000:,} bytes where its header describes {len(whole):,} \(an"
    with pytest.raises(checkpoint.CheckpointError, match=cut):
        checkpoint.load(folder)
    shard.write_bytes(whole + b"\0" * 8)
    with pytest.raises(checkpoint.CheckpointError, match=rf"{shard.name} has 8 bytes past the {len(whole):,} its "
                                                         "header describes"):
        checkpoint.load(folder)


def test_a_weight_file_whose_header_is_nested_too_deeply_is_refused_as_unreadable(tmp_path, no_model_built):
    """A header of arrays nested 500,000 deep (within the header's size limit) stopped the load, the app's model list
    and `molspec serve` with a RecursionError, not the CheckpointError that names the file."""
    folder = tiny_folder(tmp_path)
    header = b"[" * 500_000
    (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(checkpoint.CheckpointError, match="model.safetensors is not a readable safetensors file"):
        checkpoint.inspect_folder(folder)


def test_inspecting_a_folder_checks_its_draft_model_as_the_app_loads_it(tmp_path, no_model_built):
    """The Models page showed a model whose draft model (draft/, which the app loads with it) could not load, or read
    another vocabulary, as a working model; inspect_folder makes the checks the app's load makes, from the headers."""
    folder = tiny_folder(tmp_path / "model")
    found = checkpoint.inspect_folder(folder)
    assert found.config["task"] == "forward" and len(found.vocab.tokens) == 14 and "embed.weight" in found.headers
    tiny_folder(folder / "draft")
    assert checkpoint.inspect_folder(folder).cfg == found.cfg
    edit_json(folder / "draft" / "vocab.json", lambda v: v.update(tokens=v["tokens"][:4] + v["tokens"][:3:-1]))
    with pytest.raises(checkpoint.CheckpointError, match=r"draft/vocab\.json and \S+/model/vocab\.json differ"):
        checkpoint.inspect_folder(folder)
    (folder / "draft" / "model.safetensors").unlink()
    with pytest.raises(checkpoint.CheckpointError, match=r"draft: no model\.safetensors"):
        checkpoint.inspect_folder(folder)
    assert checkpoint.inspect_folder(folder, with_draft=False).vocab.tokens == found.vocab.tokens


@pytest.mark.parametrize("name", ["n_heads", "max_positions", "d_model"])
def test_a_size_left_out_of_the_config_is_refused_not_taken_from_the_defaults(tmp_path, no_model_built, name):
    """n_heads left out loaded the tests' 4-head copy model as 8 heads (the default; no weight's shape shows it),
    and its answers changed silently; a left-out d_model was refused as a shape 'config.json implies' (256)."""
    folder = tiny_folder(tmp_path)
    edit_json(folder / "config.json", lambda c: c["model"].pop(name))
    with pytest.raises(checkpoint.CheckpointError, match=rf"config\.json: model\.{name} is missing; a model's "
                                                         "config gives every one of vocab_size, n_encoder_layers"):
        checkpoint.load(folder)


def test_a_model_folder_given_under_the_home_folder_as_tilde_is_found(tmp_path, monkeypatch):
    """Predictor.load("~/models/mine"), or --model=~/models/mine (no shell expands a ~ after '='), was refused as
    'model folder ~/models/mine does not exist'."""
    from molspec_core.service import model_folder

    tiny_folder(tmp_path / "models" / "mine")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert model_folder("~/models/mine/") == tmp_path / "models" / "mine"


def test_a_draft_model_that_does_not_load_is_refused_before_the_model_is_built(tmp_path, no_model_built):
    """Predictor.load read the whole model (seconds for the shipped ones) before it found its draft model cut short;
    the draft's folder is now checked with the model's, as the Models page checks it (inspect_folder)."""
    from molspec_core.service import Predictor

    folder = tiny_folder(tmp_path / "model")
    tiny_folder(folder / "draft")
    weights = folder / "draft" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(checkpoint.CheckpointError, match=r"draft/model\.safetensors is cut short"):
        Predictor.load(folder, device="cpu")


def test_a_folder_holding_both_a_single_weights_file_and_a_shard_index_is_refused(tmp_path, monkeypatch,
                                                                                    no_model_built):
    """A model.safetensors copied into a folder of sharded weights (another run's, beside its index) was passed over
    without a word: the index's shards loaded, and the model answered with weights other than the ones copied in."""
    single = tiny_folder(tmp_path / "single")  # before the shards' size is set, which holds for the test
    folder = tiny_folder(tmp_path / "model", shards=True, monkeypatch=monkeypatch)
    (folder / "model.safetensors").write_bytes((single / "model.safetensors").read_bytes())
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(
            f"{folder} holds both model.safetensors and {checkpoint.INDEX_NAME} (with its shards): two sets of "
            "weights; keep the model's own and remove the other")):
        checkpoint.inspect_folder(folder)


def test_a_broken_draft_model_is_named_as_one_the_model_loads_without(tmp_path, no_model_built):
    """An empty draft/ folder (its files removed) stopped its model loading with '.../draft/config.json is missing',
    read as the model's own file missing, with no word that the model loads without its draft model."""
    folder = tiny_folder(tmp_path / "model")
    (folder / "draft").mkdir()
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(
            f"{folder / 'draft' / 'config.json'} is missing; {folder / 'draft'} is the draft model of {folder}, "
            f"which loads with it: mend it, or remove {folder / 'draft'} to load the model without one")):
        checkpoint.inspect_folder(folder)


@pytest.mark.parametrize("file", ["config.json", "model.safetensors"])
def test_a_file_of_a_model_folder_given_as_the_model_is_refused_naming_its_folder(tmp_path, no_model_built, file):
    """Predictor.load("models/mine/config.json") said only '... is not a model folder'; the folder that holds the file
    is the model, and the refusal now gives it."""
    from molspec_core.service import Predictor

    folder = tiny_folder(tmp_path / "mine")
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(f"{folder / file} is a file, not a model folder: "
                                                                   f"the model is the folder that holds it, {folder}")):
        Predictor.load(folder / file, device="cpu")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(checkpoint.CheckpointError, match=r"notes\.txt is a file, not a model folder$"):
        Predictor.load(tmp_path / "notes.txt", device="cpu")


def test_a_draft_model_with_fewer_positions_than_its_model_is_refused(tmp_path, no_model_built):
    """A draft model of 24 positions beside a model of 256 loaded, and spec-sample-draft on a query of more than 24
    tokens raised ValueError from inside the draft's encoder, failing the whole list of queries; with a few more
    positions it would have cut answers short that plain sampling, which it must equal, lets run on."""
    folder = tiny_folder(tmp_path / "model")
    tiny_folder(folder / "draft")
    edit_json(folder / "draft" / "config.json", lambda c: c["model"].update(max_positions=24))
    with pytest.raises(checkpoint.CheckpointError, match=r"draft/config\.json: model\.max_positions is 24, fewer than "
                                                         r"the 256 of \S+/model/config\.json; a draft model"):
        checkpoint.inspect_folder(folder)
    edit_json(folder / "draft" / "config.json", lambda c: c["model"].update(max_positions=512))
    assert checkpoint.inspect_folder(folder).cfg.max_positions == 256  # more than its model's is no harm


def test_another_programs_pickle_checkpoint_is_named_not_a_molspec_model_folder(tmp_path):
    """A folder of pytorch_model.bin without config.json was told only that pickle files are refused, as if it were a
    MolSpec model folder with a stray file; it is not one."""
    (tmp_path / "pytorch_model.bin").write_bytes(b"not really a pickle")
    with pytest.raises(checkpoint.CheckpointError, match=r"is not a MolSpec model folder \(no config.json\); it holds "
                       r"pickle-format files \['pytorch_model.bin'\], which MolSpec never loads"):
        checkpoint.inspect_folder(tmp_path)
    (tmp_path / "config.json").write_text("{}")  # one of ours with a stray pickle: refused as before
    with pytest.raises(checkpoint.CheckpointError, match="refusing to load a folder with pickle-format files"):
        checkpoint.inspect_folder(tmp_path)
