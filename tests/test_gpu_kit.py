"""tools/gpu_kit.py rehearsed on CPU: pack the data, train, collect an export into parts the device
can return, unpack it here, decode the test ids without RDKit and score the n-best file."""
import gzip
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import load_tool
from molspec_core.chem import canonical
from molspec_core.data import Pair, write_splits
from molspec_core.tokenizer import Vocab
from molspec_core.train import TrainConfig, train

ROOT = Path(__file__).resolve().parent.parent
PAIRS = [Pair("CC(=O)Cl.NC", "CNC(C)=O"), Pair("CCO.CC(=O)O", "CCOC(C)=O"), Pair("CC=O", "CCO"),
         Pair("CCN.O=CC", "CCNCC")]


@pytest.fixture
def kit(tmp_path, monkeypatch):
    module = load_tool("gpu_kit")
    monkeypatch.setattr(module, "GPU_DIR", tmp_path / "gpu")
    monkeypatch.setattr(module, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(module, "PART_BYTES", 20_000)  # several parts even for a tiny model
    return module


def test_pack_collect_unpack_decode_score(kit, tmp_path, capsys):
    data = tmp_path / "data"
    test = [Pair("CC=O", "CCO"), Pair("CC(=O)Cl.NC", "CNC(C)=O"), Pair("[Pd]", "C"),  # [Pd] is not in the vocabulary
            Pair("CCO.CC(=O)O", "CCOC(C)=O")]
    write_splits(data / "forward", {"train": PAIRS * 3, "val": PAIRS[:2], "test": test}, {"task": "forward"})
    bench = tmp_path / "bench"  # the quick set: test lines 3 and 0, as a benchmark index names them
    bench.mkdir()
    (bench / kit.QUICK_INDEX["forward"]).write_text("3\n0\n")
    kit.main(["pack", "--data", str(data), "--tasks", "forward", "--test-limit", "3", "--bench", str(bench)])
    packed = tmp_path / "gpu" / "forward"
    assert {f.name for f in packed.iterdir()} == {"train.npz", "val.npz", "vocab.json", "stats.json", "test.npz",
                                                  "quick.src", "quick.tgt"}
    assert (packed / "quick.src").read_text() == "CCO.CC(=O)O\nCC=O\n"

    train(TrainConfig(data=str(packed), out=str(tmp_path / "runs" / "gpu_forward"), preset="tiny", max_steps=3,
                      max_tokens=64, val_greedy_rows=1, threads=1))
    # `start` sends the trainer's output to train.log: log lines and a progress bar redrawn with \r.
    (tmp_path / "runs" / "gpu_forward" / "train.log").write_text(
        "INFO __main__: model forward: 0.1M parameters\n\rtrain:   0%| 1/3 [00:01, loss=1.0]\rtrain:  33%| 2/3 "
        "[00:02, loss=0.9]INFO __main__: speed at 1.0 min: 9.0 steps/s\n\rtrain: 100%| 3/3 [00:03, loss=0.8]\n"
        "INFO __main__: validation {'step': 3}\n")
    out = tmp_path / "out"
    out.mkdir()
    kit.main(["collect", "--out", str(out)])
    parts = sorted(out.glob("forward.tar.*"))
    assert len(parts) > 1 and all(p.stat().st_size <= 20_000 for p in parts)
    assert gzip.decompress((out / "train_logs.txt.gz").read_bytes()).decode().splitlines() == [
        "== forward: INFO __main__: model forward: 0.1M parameters",
        "== forward: INFO __main__: speed at 1.0 min: 9.0 steps/s",
        "== forward: INFO __main__: validation {'step': 3}"]

    # Back here: a fresh runs folder receives the export, and the next command can resume from it.
    (tmp_path / "runs" / "gpu_forward" / "export").rename(tmp_path / "old_export")
    kit.main(["unpack", str(out)])
    for folder in (tmp_path / "runs" / "gpu_forward" / "export", tmp_path / "gpu" / "resume" / "forward"):
        assert json.loads((folder / "train_state.json").read_text())["step"] == 3
        assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (tmp_path / "old_export").iterdir())

    kit.main(["decode", "--task", "forward", "--out", str(out), "--n-best", "2", "--batch-size", "2"])
    with gzip.open(out / "forward_test_nbest.tsv.gz", "rt") as f:
        lines = f.read().split("\n")[:-1]
    assert len(lines) == 3 and lines[2] == ""  # the refused query keeps its row, empty
    assert all(1 <= len(line.split("\t")) <= 2 for line in lines[:2])

    # The speed table: the project's bench on the quick set, one report per batch size (CPU here).
    # --engines: an engine this machine cannot run (CUDA graphs on a CPU) is named and left out.
    capsys.readouterr()
    kit.main(["speed", "--task", "forward", "--out", str(out), "--methods", "greedy,spec-pointer,beam",
              "--batch-size", "1,2", "--n-best", "2", "--warmup", "1", "--engines", "graphs"])
    assert "engine graphs left out: engine graphs (CUDA graphs) runs on CUDA only" in capsys.readouterr().out
    for batch_size in (1, 2):
        report = json.loads((out / f"forward_gpu_speed_b{batch_size}.json").read_text())
        assert report["task"] == "forward" and report["limit"] == 2 and report["batch_size"] == batch_size
        assert set(report["methods"]) == {"greedy", "spec-pointer", "beam"}
        assert report["methods"]["spec-pointer"]["identical_to_greedy"] == 1.0

    capsys.readouterr()
    kit.main(["score", "--task", "forward", "--pred", str(out / "forward_test_nbest.tsv.gz"), "--data", str(data)])
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 3 and report["refused"] == 1 and 0 <= report["top1"] <= report["top2"] <= 2 / 3


def test_score_counts_a_hit_at_its_rank_and_after(kit, tmp_path, capsys):
    data = tmp_path / "data" / "retro"
    data.mkdir(parents=True)
    (data / "test.tgt").write_text("CCO\nCC(=O)O\nCCN\n")
    pred = tmp_path / "pred.tsv.gz"
    with gzip.open(pred, "wt") as f:
        f.write("OCC\tCC\nCC\tOC(C)=O\n\n")  # hit at rank 1 (another SMILES of ethanol), hit at rank 2, refused
    kit.main(["score", "--task", "retro", "--pred", str(pred), "--data", str(tmp_path / "data")])
    assert json.loads(capsys.readouterr().out) == {"top1": round(1 / 3, 4), "top2": round(2 / 3, 4), "n": 3,
                                                   "refused": 1}


def test_start_trains_detached_skips_a_running_task_and_resumes_on_a_fresh_machine(kit, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(kit, "PRESET", {"forward": "tiny", "retro": "tiny"})
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    write_splits(tmp_path / "gpu" / "forward", {"train": PAIRS * 3, "val": PAIRS[:2], "test": PAIRS[:1]},
                 {"task": "forward"})
    kit.main(["start", "--minutes", "0.05", "--tasks", "forward"])
    kit.main(["start", "--minutes", "0.05", "--tasks", "forward"])
    assert "already training" in capsys.readouterr().out
    kit.main(["watch", "--seconds", "120"])
    export = tmp_path / "runs" / "gpu_forward" / "export"
    first = json.loads((export / "train_state.json").read_text())
    assert first["seconds"] >= 3 and "no training process is running" in capsys.readouterr().out

    # A fresh machine: no run folder, only the carried export. The next start resumes from it.
    (tmp_path / "gpu" / "resume").mkdir()
    export.rename(tmp_path / "gpu" / "resume" / "forward")
    for leftover in (tmp_path / "runs").iterdir():
        shutil.rmtree(leftover)
    kit.main(["start", "--minutes", "0.1", "--tasks", "forward", "--init", str(tmp_path / "unused")])
    assert "--resume" in capsys.readouterr().out  # an export to resume wins over --init
    kit.main(["watch", "--seconds", "120"])
    second = json.loads((export / "train_state.json").read_text())
    assert second["step"] > first["step"] and second["seconds"] > first["seconds"]


def test_start_from_shipped_weights_begins_a_new_schedule(kit, tmp_path, monkeypatch, capsys):
    """A later GPU block, on a fresh checkout with no resume export: --init models trains on from them."""
    monkeypatch.setattr(kit, "PRESET", {"forward": "tiny", "retro": "tiny"})
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    write_splits(tmp_path / "gpu" / "forward", {"train": PAIRS * 3, "val": PAIRS[:2], "test": PAIRS[:1]},
                 {"task": "forward"})
    train(TrainConfig(data=str(tmp_path / "gpu" / "forward"), out=str(tmp_path / "first"), preset="tiny",
                      max_steps=2, max_tokens=64, val_greedy_rows=1, threads=1))
    shipped = tmp_path / "models" / "forward"
    shipped.parent.mkdir()
    (tmp_path / "first" / "export").rename(shipped)
    kit.main(["start", "--minutes", "0.05", "--tasks", "forward", "--init", str(tmp_path / "models"),
              "--lr", "5e-4", "--warmup", "7", "--label-smoothing", "0", "--ema", "0.99"])
    out = capsys.readouterr().out
    assert f"--init {shipped}" in out and "forward: inputs read" in out
    # `start` returns only once the weights are read: the next command may sync models/ away.
    assert f"initialized from {shipped}" in (tmp_path / "runs" / "gpu_forward" / "train.log").read_text()
    kit.main(["watch", "--seconds", "120"])
    log = (tmp_path / "runs" / "gpu_forward" / "train.log").read_text()
    assert f"initialized from {shipped}" in log and "peak lr 5.00e-04" in log
    config = json.loads((tmp_path / "runs" / "gpu_forward" / "export" / "config.json").read_text())
    assert config["train_config"]["warmup"] == 7 and config["train_config"]["label_smoothing"] == 0.0
    assert config["train_config"]["ema"] == 0.99
    state = json.loads((tmp_path / "runs" / "gpu_forward" / "export" / "train_state.json").read_text())
    assert state["step"] > 0 and state["seconds"] >= 3


def test_start_reports_a_trainer_that_dies_before_reading_its_inputs(kit, tmp_path, monkeypatch):
    """Session 30: the forward run's --init folder was gone when the trainer looked; `start` had
    already returned, and the loss showed only minutes later in `watch`. Now `start` says so itself."""
    monkeypatch.setattr(kit, "PRESET", {"forward": "tiny", "retro": "tiny"})
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    write_splits(tmp_path / "gpu" / "forward", {"train": PAIRS * 3, "val": PAIRS[:2], "test": PAIRS[:1]},
                 {"task": "forward"})
    (tmp_path / "models" / "forward").mkdir(parents=True)  # synced away: the folder without its files
    with pytest.raises(SystemExit) as failed:
        kit.main(["start", "--minutes", "0.05", "--tasks", "forward", "--init", str(tmp_path / "models")])
    message = str(failed.value)
    assert "forward: the trainer exited (code 2) before reading its inputs" in message
    assert "config.json is missing" in message


def test_writings_are_packed_here_decoded_there_and_pooled_here(kit, tmp_path, capsys):
    # Test-time augmentation on the device: RDKit writes the other root writings here, the device decodes
    # every writing and keeps the scores, and the scores are pooled here as the app pools them.
    data = tmp_path / "data"
    test = [Pair("CCOC(C)=O", "CCO.CC(=O)O"), Pair("[Pd]", "C"), Pair("CC(=O)NC", "CC(=O)Cl.NC")]
    write_splits(data / "retro", {"train": PAIRS * 3, "val": PAIRS[:2], "test": test}, {"task": "retro", "augment": 20})
    kit.main(["pack", "--data", str(data), "--tasks", "retro", "--writings", "3", "--bench", str(tmp_path)])
    vocab = Vocab.load(tmp_path / "gpu" / "retro" / "vocab.json")
    with np.load(tmp_path / "gpu" / "retro" / "test.npz") as z:
        flat, offsets, owner = z["writings"], z["writing_offsets"], z["writing_query"]
    texts = [vocab.decode(flat[offsets[j]:offsets[j + 1]].tolist()) for j in range(len(owner))]
    assert owner.tolist() == [0, 0, 2, 2]  # two other writings each; none for the query the vocabulary cannot spell
    for text, i in zip(texts, owner.tolist()):
        assert text != test[i].src and canonical(text) == canonical(test[i].src)
    train(TrainConfig(data=str(tmp_path / "gpu" / "retro"), out=str(tmp_path / "runs" / "gpu_retro"), preset="tiny",
                      max_steps=2, max_tokens=64, val_greedy_rows=1, threads=1))
    out = tmp_path / "out"
    out.mkdir()
    kit.main(["decode", "--task", "retro", "--out", str(out), "--n-best", "2", "--batch-size", "2", "--writings", "3"])
    kit.main(["decode", "--task", "retro", "--out", str(out), "--n-best", "2", "--batch-size", "2"])
    with gzip.open(out / "retro_test_writings.jsonl.gz", "rt") as f:
        queries = [json.loads(line) for line in f]
    with gzip.open(out / "retro_test_nbest.tsv.gz", "rt") as f:
        plain = [line.rstrip("\n") for line in f]
    assert [len(writings) for writings in queries] == [3, 0, 3]  # the refused query: none
    for writings, line in zip(queries, plain):  # the query's own writing comes first, decoded as without writings
        assert "\t".join(answer for answer, _ in (writings[0] if writings else [])) == line
        assert all(score <= 0 for writing in writings for _, score in writing)
    capsys.readouterr()
    kit.main(["score", "--task", "retro", "--pred", str(out / "retro_test_writings.jsonl.gz"), "--data", str(data),
              "--writings", "3"])
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 3 and report["refused"] == 1 and report["writings"] == 3
    for args in (["--pred", str(out / "retro_test_writings.jsonl.gz"), "--writings", "1"],
                 ["--pred", str(out / "retro_test_nbest.tsv.gz")]):  # one writing: the plain file's figures
        kit.main(["score", "--task", "retro", "--data", str(data), *args])
    one, plain = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert one == {**plain, "writings": 1}


def test_score_pools_writings_as_the_app_does(kit, tmp_path, capsys):
    data = tmp_path / "data" / "retro"
    data.mkdir(parents=True)
    (data / "test.tgt").write_text("CCO\n")
    pred = tmp_path / "writings.jsonl.gz"
    with gzip.open(pred, "wt") as f:  # writing 1 prefers CC; writing 2 ethanol (spelled OCC): beams of width 2
        f.write(json.dumps([[["CC", math.log(0.5)], ["CCO", math.log(0.4)]],
                            [["OCC", math.log(0.6)], ["CCC", math.log(0.1)]]]) + "\n")
    # pooled: CCO 0.5, CC 0.25, CCC 0.05; the best 2 kept (the beam's width), as the app keeps n-best
    for writings, expected in ((1, {"top1": 0.0, "top2": 1.0}), (2, {"top1": 1.0, "top2": 1.0})):
        kit.main(["score", "--task", "retro", "--pred", str(pred), "--data", str(tmp_path / "data"),
                  "--writings", str(writings)])
        assert json.loads(capsys.readouterr().out) == {**expected, "n": 1, "refused": 0, "writings": writings}
