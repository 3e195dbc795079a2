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
    monkeypatch.setattr(module, "MODELS", tmp_path / "models")  # no shipped model: any vocabulary packs
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


def test_pack_without_a_quick_set_for_a_test_split_the_benchmark_index_does_not_fit(kit, tmp_path, capsys):
    """A test split other than the benchmark's (here 2 queries; the index names line 7822) stopped pack with a
    traceback after the first task's files, and the next task was not packed; `speed` alone reads the quick set."""
    data = tmp_path / "data"
    for task, pairs in (("forward", PAIRS), ("retro", [Pair(p.tgt, p.src) for p in PAIRS])):
        write_splits(data / task, {"train": pairs * 3, "val": pairs[:2], "test": pairs[:2]}, {"task": task})
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / kit.QUICK_INDEX["forward"]).write_text("7822\n0\n")
    (tmp_path / "gpu" / "forward").mkdir(parents=True)  # an earlier pack's quick set, of another test split: kept,
    for name in ("quick.src", "quick.tgt"):  # `speed` benched it under the benchmark index's name
        (tmp_path / "gpu" / "forward" / name).write_text("CCO\n")
    kit.main(["pack", "--data", str(data), "--bench", str(bench)])
    out = capsys.readouterr().out
    assert "forward: no quick set for `speed` (" in out
    assert "line number 7822 is not among the 0-based lines 0..1" in out
    assert f"retro: no quick set for `speed` ({bench / kit.QUICK_INDEX['retro']} missing)" in out
    for task in ("forward", "retro"):
        assert {f.name for f in (tmp_path / "gpu" / task).iterdir()} == {"train.npz", "val.npz", "vocab.json",
                                                                         "stats.json", "test.npz"}


def test_a_pack_that_cannot_be_written_leaves_the_pack_before_it_whole(kit, tmp_path, monkeypatch):
    """A full disk (or Ctrl-C) mid-pack stopped with a traceback and left gpu/<task> half one pack, half the other:
    here the new data's arrays and vocabulary beside the earlier test ids, which the device would have decoded with a
    model of the new vocabulary. Each task is packed aside and swapped in whole."""
    import errno

    data, other = tmp_path / "data", tmp_path / "other"
    write_splits(data / "forward", {"train": PAIRS * 3, "val": PAIRS[:2], "test": PAIRS[:2]}, {"task": "forward"})
    write_splits(other / "forward", {"train": PAIRS[:2] * 3, "val": PAIRS[:1], "test": PAIRS[2:]}, {"task": "forward"})
    kit.main(["pack", "--data", str(data), "--tasks", "forward", "--bench", str(tmp_path)])
    packed = tmp_path / "gpu" / "forward"
    before = {f.name: f.read_bytes() for f in packed.iterdir()}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", full)  # the test ids, written after the arrays are copied
    with pytest.raises(SystemExit, match=rf"forward: the pack could not be written in {tmp_path / 'gpu'} \(No space "
                                         rf"left on device\); {packed} holds the pack before it, unchanged"):
        kit.main(["pack", "--data", str(other), "--tasks", "forward", "--bench", str(tmp_path)])
    assert {f.name: f.read_bytes() for f in packed.iterdir()} == before
    assert [f.name for f in (tmp_path / "gpu").iterdir()] == ["forward"]  # nothing begun left beside it


def test_the_device_commands_run_without_rdkit_or_the_apps_packages(kit, tmp_path):
    """The GPU machine has torch, numpy, safetensors and tqdm, and no RDKit: decode, collect and watch must run there
    first time (the trainer itself: test_train.test_training_entry_point_runs_without_rdkit). Rehearsed so in
    session 91; this keeps an import of the chemistry from creeping into their path."""
    import subprocess
    import sys

    from test_train import NOT_ON_GPU_MACHINE

    data = tmp_path / "data"
    write_splits(data / "forward", {"train": PAIRS * 3, "val": PAIRS[:2], "test": PAIRS[:2]}, {"task": "forward"})
    kit.main(["pack", "--data", str(data), "--tasks", "forward", "--bench", str(tmp_path)])
    train(TrainConfig(data=str(tmp_path / "gpu" / "forward"), out=str(tmp_path / "runs" / "gpu_forward"),
                      preset="tiny", max_steps=2, max_tokens=64, val_greedy_rows=1, threads=1))
    out = tmp_path / "out"
    out.mkdir()
    code = (f"import importlib.util, sys\nfrom pathlib import Path\n"
            f"for name in {NOT_ON_GPU_MACHINE!r}:\n    sys.modules[name] = None\n"
            f"spec = importlib.util.spec_from_file_location('gpu_kit', {str(ROOT / 'tools' / 'gpu_kit.py')!r})\n"
            "kit = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(kit)\n"
            f"kit.GPU_DIR, kit.RUNS = Path({str(tmp_path / 'gpu')!r}), Path({str(tmp_path / 'runs')!r})\n"
            f"kit.main(['decode', '--task', 'forward', '--out', {str(out)!r}, '--n-best', '2'])\n"
            f"kit.main(['collect', '--out', {str(out)!r}])\n"
            "kit.main(['watch', '--seconds', '1'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert {p.name for p in out.iterdir()} == {"forward_test_nbest.tsv.gz", "forward.tar.00"}  # one 15 MiB part


def test_decode_while_the_training_runs_reads_its_export_whole_and_says_which(kit, tmp_path, monkeypatch, capsys):
    """Where `watch` ran out before the run ended, decode loaded runs/<task>/export while the trainer could swap the
    next export into its place (no folder, or shards of two steps), and said nothing of decoding an earlier step."""
    data = tmp_path / "data"
    write_splits(data / "forward", {"train": PAIRS * 3, "val": PAIRS[:2], "test": PAIRS[:2]}, {"task": "forward"})
    kit.main(["pack", "--data", str(data), "--tasks", "forward", "--bench", str(tmp_path)])
    run = tmp_path / "runs" / "gpu_forward"
    train(TrainConfig(data=str(tmp_path / "gpu" / "forward"), out=str(run), preset="tiny", max_steps=2,
                      max_tokens=64, val_greedy_rows=1, threads=1))
    (run / "train.pid").write_text("4242")
    monkeypatch.setattr(kit, "_running", lambda folder: folder == run)
    read: list[Path] = []
    real = kit.export_tar
    monkeypatch.setattr(kit, "export_tar", lambda folder, tries=20: read.append(folder) or real(folder, tries))
    out = tmp_path / "out"
    out.mkdir()
    capsys.readouterr()
    kit.main(["decode", "--task", "forward", "--out", str(out), "--n-best", "2"])
    assert read == [run / "export"]  # the whole-folder read collect makes, not a load of the folder in place
    said = capsys.readouterr().out
    # the run is ending: its export of step 2 of --max-steps 2 is its last (it was called 'not the run's last')
    assert "forward: its training is ending (pid 4242): decoding its last export, of step 2" in said
    assert "not the run's last" not in said
    assert len(gzip.decompress((out / "forward_test_nbest.tsv.gz").read_bytes()).decode().splitlines()) == 2

    config = json.loads((run / "export" / "config.json").read_text())  # the same export of a run with steps to go
    config["train_config"]["max_steps"] = 10
    (run / "export" / "config.json").write_text(json.dumps(config))
    kit.main(["decode", "--task", "forward", "--out", str(out), "--n-best", "2"])
    assert "forward: its training still runs (pid 4242): decoding its export of step 2, not the run's last" in \
        capsys.readouterr().out


def test_decode_and_speed_refuse_what_they_lack_before_any_work(kit, tmp_path, monkeypatch):
    """decode wrote its answers to --out after the minutes of decoding, so a mistyped --out lost them in a
    FileNotFoundError; a task not packed, or packed and not trained, was a traceback at or after the model's load;
    speed without a quick set, one after the models had loaded."""
    from molspec_core import checkpoint

    data = tmp_path / "data"
    write_splits(data / "retro", {"train": [Pair(p.tgt, p.src) for p in PAIRS] * 3, "val": PAIRS[:2],
                                  "test": PAIRS[:2]}, {"task": "retro"})
    kit.main(["pack", "--data", str(data), "--tasks", "retro", "--bench", str(tmp_path)])  # no quick set
    monkeypatch.setattr(checkpoint, "load", lambda *args, **kwargs: pytest.fail("a model was loaded"))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(SystemExit, match=r"^decode --out .*nowhere: no such folder$"):
        kit.main(["decode", "--task", "retro", "--out", str(tmp_path / "nowhere")])
    with pytest.raises(SystemExit, match=r"^decode --task forward: .*gpu/forward/test.npz is missing \(`pack --tasks "
                                         r"forward` writes it here.*nothing decoded$"):
        kit.main(["decode", "--task", "forward", "--out", str(out)])
    with pytest.raises(SystemExit, match=r"^decode --task retro: .*runs/gpu_retro/export holds no export \(retro has "
                                         r"not trained on this machine.*give --model FOLDER"):
        kit.main(["decode", "--task", "retro", "--out", str(out)])
    with pytest.raises(SystemExit, match=r"^speed --task retro: .*gpu/retro/quick.src is missing: `pack` writes the "
                                         r"quick set only where the benchmark index uspto50k_test_500.idx fits"):
        kit.main(["speed", "--task", "retro", "--out", str(out)])
    assert not any(out.iterdir())


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
    watched = capsys.readouterr().out
    assert first["seconds"] >= 3 and "no training process is running" in watched
    assert "] forward: " in watched and "retro" not in watched  # only the task started here has a line

    # A fresh machine: no run folder, only the carried export. The next start resumes from it.
    (tmp_path / "gpu" / "resume").mkdir()
    export.rename(tmp_path / "gpu" / "resume" / "forward")
    for leftover in (tmp_path / "runs").iterdir():
        shutil.rmtree(leftover)
    kit.main(["start", "--minutes", "0.1", "--tasks", "forward", "--init", str(tmp_path / "unused")])
    out = capsys.readouterr().out
    assert "--resume" in out and "--init" not in out.split("started:")[1]  # an export to resume wins over --init
    resume = tmp_path / "gpu" / "resume" / "forward"
    assert (f"forward: resumes the export {resume} (step {first['step']}, {first['seconds'] / 60:.2f} min trained); "
            f"--init {tmp_path / 'unused'} is not read (remove {resume} to start from it); trains "
            f"{0.1 - first['seconds'] / 60:.2f} minutes more, to 0.1 in all") in out
    kit.main(["watch", "--seconds", "120"])
    second = json.loads((export / "train_state.json").read_text())
    assert second["step"] > first["step"] and second["seconds"] > first["seconds"]


def test_watch_says_how_each_run_ended_once_none_runs(kit, tmp_path, capsys):
    """A trainer that died (of memory, say) between two of watch's minute lines left watch saying only "no training
    process is running": why it ended took another device command to read, in a 15-minute block."""
    logs = {"forward": "INFO __main__: inputs read\n\rtrain:   1%| 20/3000 [00:05, loss=0.9]\n"
                       "error: CUDA out of memory; try a smaller --max-tokens\n",
            "retro": "INFO __main__: validation {'greedy_exact_match': 0.5, 'step': 40}\n[\n  {\n    \"step\": 40\n"
                     "  }\n]\n"}
    for task, text in logs.items():
        run = tmp_path / "runs" / f"gpu_{task}"
        run.mkdir(parents=True)
        (run / "train.log").write_text(text)
        (run / "train.pid").write_text("999999999")  # no such process
    kit.main(["watch", "--seconds", "5"])
    assert capsys.readouterr().out.splitlines() == [
        "no training process is running",
        "forward: its log ends: error: CUDA out of memory; try a smaller --max-tokens",
        "retro: its log ends: INFO __main__: validation {'greedy_exact_match': 0.5, 'step': 40}"]


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


def test_score_refuses_a_file_it_would_score_as_something_else(kit, tmp_path):
    # a writings file read as n-best lines scored "top1": 0.0 without a word; the others were tracebacks
    data = tmp_path / "data" / "retro"
    data.mkdir(parents=True)
    (data / "test.tgt").write_text("CCO\n")
    files = {"writings.jsonl.gz": json.dumps([[["CCO", -0.1]]]) + "\n", "nbest.tsv.gz": "CCO\tCC\n",
             "empty.tsv.gz": "", "two.tsv.gz": "CCO\nCC\n", "forward_test_nbest.tsv.gz": "CCO\n"}
    for name, text in files.items():
        with gzip.open(tmp_path / name, "wt") as f:
            f.write(text)
    refusals = [("writings.jsonl.gz", [], "is a writings file .*give --writings N"),
                ("nbest.tsv.gz", ["--writings", "5"], "is an n-best file .*without --writings"),
                ("empty.tsv.gz", [], "holds no answers"),
                ("two.tsv.gz", [], "answers to 2 queries, and .*test.tgt 1"),
                ("forward_test_nbest.tsv.gz", [], "holds forward answers .*--task forward"),
                ("absent.tsv.gz", [], "cannot be read")]
    for name, more, message in refusals:
        with pytest.raises(SystemExit, match=message):
            kit.main(["score", "--task", "retro", "--pred", str(tmp_path / name), "--data", str(tmp_path / "data"),
                      *more])


def test_start_refuses_a_budget_the_export_to_resume_has_spent_and_a_budget_of_0(kit, tmp_path, monkeypatch, capsys):
    """After `unpack`, a fresh machine's `start --minutes 0.1 --init models` resumed the export, whose minutes were
    already past 0.1: it trained 0 steps, wrote no export and reported only "inputs read". --minutes 0 started an
    unbounded 100,000-step run."""
    monkeypatch.setattr(kit, "PRESET", {"forward": "tiny", "retro": "tiny"})
    write_splits(tmp_path / "gpu" / "forward", {"train": PAIRS * 3, "val": PAIRS[:2], "test": PAIRS[:1]},
                 {"task": "forward"})
    train(TrainConfig(data=str(tmp_path / "gpu" / "forward"), out=str(tmp_path / "first"), preset="tiny",
                      max_steps=2, max_tokens=64, val_greedy_rows=1, threads=1))
    resume = tmp_path / "gpu" / "resume" / "forward"
    (tmp_path / "first" / "export").rename(resume.parent.mkdir(parents=True) or resume)
    state = json.loads((resume / "train_state.json").read_text())
    (resume / "train_state.json").write_text(json.dumps({**state, "seconds": 9.0}))  # 0.15 minutes trained
    with pytest.raises(SystemExit) as refused:
        kit.main(["start", "--minutes", "0.1", "--tasks", "forward", "--init", str(tmp_path / "models")])
    assert str(refused.value) == (
        f"forward: {resume} has trained 0.15 minutes, and --minutes 0.1 is the run's whole budget, the minutes trained "
        "included (tools/gpu_train.md): it would make no step; give --minutes 0.15 + the minutes to add (e.g. 6 for "
        "about 5 more); nothing was started")
    assert not (tmp_path / "runs").exists()
    for minutes in ("0", "-1", "nan"):
        with pytest.raises(SystemExit) as usage:
            kit.main(["start", "--minutes", minutes, "--tasks", "forward"])
        assert usage.value.code == 2 and "--minutes: must be a finite number above 0" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_pack_refuses_data_whose_vocabulary_the_shipped_model_and_its_draft_do_not_read(kit, tmp_path, capsys):
    data = tmp_path / "data"
    write_splits(data / "forward", {"train": PAIRS, "val": PAIRS[:1], "test": PAIRS[:1]}, {"task": "forward"})
    built = Vocab.load(data / "forward" / "vocab.json")
    shipped = Vocab.build([*built.tokens[4:], "[Si@@H]"])  # one token more: the ids after it move
    (tmp_path / "models" / "forward").mkdir(parents=True)
    shipped.save(tmp_path / "models" / "forward" / "vocab.json")
    with pytest.raises(SystemExit, match=r"differs from .*models/forward/vocab.json \(\d+ tokens against \d+, "
                                         r"\[Si@@H\] in one only\).*--vocab"):
        kit.main(["pack", "--data", str(data), "--tasks", "forward", "--bench", str(tmp_path)])
    assert not (tmp_path / "gpu").exists()  # nothing packed
    kit.main(["pack", "--data", str(data), "--tasks", "forward", "--bench", str(tmp_path), "--other-vocab"])
    assert (tmp_path / "gpu" / "forward" / "train.npz").is_file()
    shutil.rmtree(tmp_path / "gpu")
    shipped = built  # data prepared with the shipped vocabulary (prepare-data --vocab) packs
    shipped.save(tmp_path / "models" / "forward" / "vocab.json")
    kit.main(["pack", "--data", str(data), "--tasks", "forward", "--bench", str(tmp_path)])
    assert (tmp_path / "gpu" / "forward" / "train.npz").is_file()


def test_pack_and_start_refuse_an_unknown_task_and_collect_a_missing_out(kit, tmp_path, capsys):
    for command in (["pack", "--data", str(tmp_path / "data")], ["start", "--minutes", "1"]):
        with pytest.raises(SystemExit) as usage:
            kit.main([*command, "--tasks", "forwrd"])
        err = capsys.readouterr().err
        assert usage.value.code == 2 and "unknown task 'forwrd'; the tasks are forward, retro" in err
    with pytest.raises(SystemExit, match="forward: .*data/forward lacks train.npz, val.npz, vocab.json, stats.json, "
                                         "test.src"):
        kit.main(["pack", "--data", str(tmp_path / "data"), "--tasks", "forward"])
    assert not (tmp_path / "gpu").exists()
    with pytest.raises(SystemExit, match="collect --out .*nowhere: no such folder"):
        kit.main(["collect", "--out", str(tmp_path / "nowhere")])


def test_counts_out_of_range_are_usage_errors_before_any_work(kit, tmp_path, capsys):
    # pack --test-limit -5 packed all but the last 5 queries without a word; decode --batch-size 0 was a traceback
    # after the model loaded on the device; start --tokens 0 started a trainer that died
    for command, flag in ((["pack", "--data", str(tmp_path / "data"), "--test-limit", "-5"], "--test-limit"),
                          (["decode", "--task", "retro", "--out", str(tmp_path), "--batch-size", "0"], "--batch-size"),
                          (["decode", "--task", "retro", "--out", str(tmp_path), "--limit", "-1"], "--limit"),
                          (["start", "--minutes", "1", "--tokens", "0"], "--tokens"),
                          (["speed", "--task", "retro", "--out", str(tmp_path), "--n-best", "0"], "--n-best")):
        with pytest.raises(SystemExit) as usage:
            kit.main(command)
        assert usage.value.code == 2 and f"argument {flag}: must be" in capsys.readouterr().err
    assert not (tmp_path / "gpu").exists() and not (tmp_path / "runs").exists()


def test_collect_takes_one_whole_export_while_the_training_replaces_it(kit, tmp_path, monkeypatch, capsys):
    """train writes each export beside the last and renames it in (train._replace_folder); a collect that
    read across the swap took files of two exports, or found no folder and skipped the task in silence."""
    import io
    import tarfile

    from molspec_core.train import _replace_folder

    run = tmp_path / "runs" / "gpu_forward"
    export = run / "export"
    for folder, step in ((export, 1), (run / "export.tmp", 2)):
        folder.mkdir(parents=True)
        (folder / "model-00001-of-00002.safetensors").write_bytes(b"shard one of step %d" % step)
        (folder / "model-00002-of-00002.safetensors").write_bytes(b"shard two of step %d" % step)
        (folder / "train_state.json").write_text(json.dumps({"step": step}))
    reads = []
    real_read = Path.read_bytes

    def read_bytes(self):  # the run's next export lands right after collect's first read of a file in it
        reads.append(self.name)
        if len(reads) == 1:
            _replace_folder(run / "export.tmp", export)
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    out = tmp_path / "out"
    out.mkdir()
    kit.main(["collect", "--out", str(out)])
    monkeypatch.setattr(Path, "read_bytes", real_read)
    data = b"".join(part.read_bytes() for part in sorted(out.glob("forward.tar.*")))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    assert members == {"export/model-00001-of-00002.safetensors": b"shard one of step 2",
                       "export/model-00002-of-00002.safetensors": b"shard two of step 2",
                       "export/train_state.json": b'{"step": 2}'}
    assert len(reads) > 3  # the mixed read was thrown away and the folder read again
    shutil.rmtree(export)  # a run that has not exported yet is named, not skipped in silence
    kit.main(["collect", "--out", str(tmp_path / "out")])
    assert "forward: no complete export yet" in capsys.readouterr().out


def write_parts(folder, task: str, members: dict[str, bytes], part_bytes: int) -> list:
    """A tar of `members` (name: content) cut into <task>.tar.NN parts, as `collect` writes them."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    data = buf.getvalue()
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for i in range(0, len(data), part_bytes):
        parts.append(folder / f"{task}.tar.{i // part_bytes:02d}")
        parts[-1].write_bytes(data[i:i + part_bytes])
    return parts


def test_unpack_checks_every_part_before_it_replaces_the_previous_export(kit, tmp_path):
    previous = tmp_path / "runs" / "gpu_forward" / "export"
    previous.mkdir(parents=True)
    (previous / "train_state.json").write_text('{"step": 7}')
    write_splits(tmp_path / "data", {"train": PAIRS * 3, "val": PAIRS[:2], "test": PAIRS[:1]}, {"task": "forward"})
    train(TrainConfig(data=str(tmp_path / "data"), out=str(tmp_path / "run"), preset="tiny", max_steps=1,
                      max_tokens=64, val_greedy_rows=1, threads=1))
    export = {f"export/{f.name}": f.read_bytes() for f in sorted((tmp_path / "run" / "export").iterdir())}
    # no export/ in the tar: the previous export was deleted first, then a FileNotFoundError traceback
    write_parts(tmp_path / "noexport", "forward", {k.replace("export/", "other/"): v for k, v in export.items()},
                20_000)
    with pytest.raises(SystemExit, match="forward: the parts in .*noexport hold no export/ with a readable "
                                         "train_state.json .*nothing was replaced"):
        kit.main(["unpack", str(tmp_path / "noexport")])
    parts = write_parts(tmp_path / "gap", "forward", export, 20_000)
    assert len(parts) >= 3
    parts[1].unlink()  # a middle part missing: a tarfile.ReadError traceback before
    with pytest.raises(SystemExit, match="forward: forward.tar.01 missing from .*gap; nothing was replaced"):
        kit.main(["unpack", str(tmp_path / "gap")])
    for name in ("cut", "lost"):  # a middle part cut short; every part after the first missing
        parts = write_parts(tmp_path / name, "forward", export, 20_000)
        if name == "cut":
            parts[1].write_bytes(parts[1].read_bytes()[:100])
        else:
            for later in parts[1:]:
                later.unlink()
        with pytest.raises(SystemExit, match="nothing was replaced"):
            kit.main(["unpack", str(tmp_path / name)])
    assert (previous / "train_state.json").read_text() == '{"step": 7}'
    assert not (tmp_path / "gpu" / "resume").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="holds no <task>.tar.NN parts"):  # did nothing, exit 0, before
        kit.main(["unpack", str(tmp_path / "empty")])
    with pytest.raises(SystemExit, match="no such folder"):
        kit.main(["unpack", str(tmp_path / "nowhere")])
    write_parts(tmp_path / "good", "forward", export, 20_000)
    real_copytree = shutil.copytree

    def disk_full_at_resume(source, dest, **options):  # the second copy, gpu/resume/forward's: runs/ was replaced
        if "resume" in str(dest):  # and the next block resumed from the old export, after a traceback
            raise OSError(28, "No space left on device")
        return real_copytree(source, dest, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shutil, "copytree", disk_full_at_resume)
        with pytest.raises(SystemExit, match=r"good could not be copied into place \(No space left on device\); "
                                             "nothing was replaced"):
            kit.main(["unpack", str(tmp_path / "good")])
    assert (previous / "train_state.json").read_text() == '{"step": 7}'
    assert sorted(p.name for p in previous.parent.iterdir()) == ["export"]
    assert not any((tmp_path / "gpu" / "resume").iterdir())
    kit.main(["unpack", str(tmp_path / "good")])
    for folder in (previous, tmp_path / "gpu" / "resume" / "forward"):
        assert {f"export/{f.name}": f.read_bytes() for f in sorted(folder.iterdir())} == export
    assert sorted(p.name for p in previous.parent.iterdir()) == ["export"]


def test_unpack_refuses_an_earlier_export_of_the_run_it_holds_a_later_one_of(kit, tmp_path, capsys):
    """Command 1's collect (insurance) unpacked after command 2's replaced the block's final weights with those of
    its minute 6, and gpu/resume/<task> with them: the next block would have resumed from there, its minutes spent
    again. Another run's export (a new schedule from --init) still replaces it."""
    write_splits(tmp_path / "data", {"train": PAIRS * 3, "val": PAIRS[:2], "test": PAIRS[:1]}, {"task": "forward"})
    quick = dict(data=str(tmp_path / "data"), preset="tiny", max_tokens=64, val_greedy_rows=1, eval_every=1, threads=1)
    train(TrainConfig(out=str(tmp_path / "run"), max_steps=2, **quick))

    def parts(name: str, export: Path) -> Path:
        write_parts(tmp_path / name, "forward", {f"export/{f.name}": f.read_bytes() for f in export.iterdir()}, 20_000)
        return tmp_path / name

    early = parts("early", tmp_path / "run" / "export")
    train(TrainConfig(out=str(tmp_path / "run"), max_steps=4, **quick))
    kit.main(["unpack", str(parts("final", tmp_path / "run" / "export"))])
    final = {f.name: f.read_bytes() for f in (tmp_path / "runs" / "gpu_forward" / "export").iterdir()}
    with pytest.raises(SystemExit, match=r"forward: .*gpu_forward/export holds a later export of the same run \(step "
                                         r"4\) than the parts in .*early \(step 2\): .*nothing was replaced"):
        kit.main(["unpack", str(early)])
    for folder in (tmp_path / "runs" / "gpu_forward" / "export", tmp_path / "gpu" / "resume" / "forward"):
        assert {f.name: f.read_bytes() for f in folder.iterdir()} == final
    train(TrainConfig(out=str(tmp_path / "other"), max_steps=2, seed=1, **quick))
    kit.main(["unpack", str(parts("other_run", tmp_path / "other" / "export"))])
    assert "forward: step 2" in capsys.readouterr().out


def test_stage_keeps_the_shipped_weights_from_travelling_and_unstage_puts_them_back(kit, tmp_path, monkeypatch):
    """What travels with a device command is the tracked tree: `stage` takes models/ out of it (and ignores the
    folder, so it is not sent as untracked either), twice without harm; `unstage` leaves the checkout as it was."""
    import subprocess

    repo = tmp_path / "repo"
    (repo / "models" / "forward").mkdir(parents=True)
    (repo / "models" / "forward" / "model.safetensors").write_bytes(b"weights")
    (repo / "README.md").write_text("readme\n")

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("add", "README.md", "models")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "shipped")
    monkeypatch.setattr(kit, "ROOT", repo)
    monkeypatch.setattr(kit, "EXCLUDE", repo / ".git" / "info" / "exclude")
    kit.main(["stage"])
    kit.main(["stage"])
    assert git("ls-files").split() == ["README.md"]  # the weights no longer travel
    assert "models" not in git("status", "--porcelain", "--untracked-files=all").replace("D  models", "")
    assert (repo / "models" / "forward" / "model.safetensors").read_bytes() == b"weights"  # still here
    assert (repo / ".git" / "info" / "exclude").read_text().splitlines().count("/models/") == 1
    kit.main(["unstage"])
    assert git("ls-files").split() == ["README.md", "models/forward/model.safetensors"]
    assert git("status", "--porcelain", "--untracked-files=all") == ""
    assert "/models/" not in (repo / ".git" / "info" / "exclude").read_text().splitlines()


def test_stage_measures_what_a_start_command_takes_against_the_device_limit(kit, tmp_path, monkeypatch, capsys):
    """The plan quoted the tree's size as measured sessions before (6.7 MB; it had grown to 8.7 with the reports),
    and the person spending the block added up the carry by hand: `stage` now says what travels, measured."""
    import subprocess

    repo = tmp_path / "repo"
    for path, size in (("README.md", 1_000_000), ("models/forward/model.safetensors", 3_000_000),
                       ("gpu/forward/train.npz", 2_000_000), ("notes.txt", 500_000)):  # notes: untracked, travels
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(b"x" * size)
    (repo / ".gitignore").write_text("gpu/\n")
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "README.md", ".gitignore", "models"], check=True)
    monkeypatch.setattr(kit, "ROOT", repo)
    monkeypatch.setattr(kit, "EXCLUDE", repo / ".git" / "info" / "exclude")
    monkeypatch.setattr(kit, "GPU_DIR", repo / "gpu")
    monkeypatch.setattr(kit, "MODELS", repo / "models")
    kit.main(["stage"])
    out = capsys.readouterr().out
    assert "the tree that travels with every command: 1.5 MB; a command may take 67.1 MB (64 MiB)" in out
    assert "forward's start command (carry gpu/forward 2.0 MB, models/forward 3.0 MB): 6.5 MB, fits" in out
    assert "retro" not in out  # nothing packed for it
    monkeypatch.setattr(kit, "CARRY_BYTES", 6_000_000)
    assert "6.5 MB, 0.5 MB over: the device refuses it" in kit.travel_sizes()


def test_speed_leaves_out_an_engine_beside_itself_and_refuses_one_named_twice(kit, tmp_path, monkeypatch, capsys):
    """speed --engines timed an engine beside itself as a speedup where it was the one the kit's own rows run on
    (--engines torch on a GPU, where auto is torch; --engines auto anywhere), and --engines torch,torch ran one row,
    the second load replacing the first. The CLI's bench rule (cli.check_other_engine, cli.engine_names) applies:
    such an engine is named and left out, as one this machine cannot run is, and a name given twice is refused before
    anything loads."""
    import torch

    from molspec_core import bench
    from molspec_core.service import Predictor

    folder = tmp_path / "gpu" / "forward"
    folder.mkdir(parents=True)
    (folder / "quick.src").write_text("CCO\n")
    (folder / "quick.tgt").write_text("O\n")
    benched = []
    monkeypatch.setattr(bench, "run_bench", lambda *args, engines, **kwargs: benched.append(engines) or {})
    monkeypatch.setattr(bench, "markdown_table", lambda report: "")
    monkeypatch.setattr(bench, "save_report", lambda *args, **kwargs: None)
    model = ROOT / "tests" / "fixtures" / "copy_model"
    cuda = torch.cuda.is_available()  # the kit's device
    own = Predictor.load(model, "cuda" if cuda else "cpu").engine  # the kit's rows: engine auto (torch on CUDA)
    other = "graphs" if cuda else "torch"  # an engine beside auto's there
    common = ["speed", "--task", "forward", "--model", str(model), "--out", str(tmp_path), "--batch-size", "1"]
    kit.main([*common, "--engines", f"auto,{other}"])
    # named as the kit names them: it has no --engine flag, which the CLI's words named
    assert (f"engine auto left out: --engines auto runs the decoder calls on the {own} engine here, as the kit's "
            "engine auto does") in capsys.readouterr().out
    assert [list(engines) for engines in benched] == [[other]]
    with pytest.raises(SystemExit):
        kit.main([*common, "--engines", f"{other},{other}"])
    assert f"--engines names {other} twice" in capsys.readouterr().err
    assert len(benched) == 1


def test_score_keeps_rdkit_quiet_about_answers_it_cannot_read(tmp_path):
    """score and pack run here with RDKit, outside the engine's quiet calls: each answer RDKit could not read printed
    "SMILES Parse Error" above the scores (a line for each of hundreds in a block's n-best file)."""
    import subprocess
    import sys

    data = tmp_path / "data" / "forward"
    data.mkdir(parents=True)
    (data / "test.tgt").write_text("CCO\nCCN\n")
    pred = tmp_path / "forward_test_nbest.tsv.gz"
    with gzip.open(pred, "wt") as f:
        f.write("c1cc\tCCO\nCC(\tCCN\n")  # an unclosed ring and an unclosed branch before each hit
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_kit.py"), "score", "--task", "forward", "--pred",
                           str(pred), "--data", str(tmp_path / "data")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads(done.stdout) == {"top1": 0.0, "top2": 1.0, "n": 2, "refused": 0}
