"""The training kit, rehearsed on CPU so it cannot rot between GPU runs: the time-budget schedule,
a few steps on tiny data, float16 exports, resume from an export, and loading the result."""
import dataclasses
import json
import logging
import math
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import count_device_reads
from molspec_core import checkpoint
from molspec_core.data import Pair, write_splits
from molspec_core.service import Predictor
from molspec_core.model import Seq2SeqTransformer, preset
from molspec_core.tokenizer import BOS_ID, EOS_ID, PAD_ID, Vocab
from molspec_core.decoding.beam import beam_search
from molspec_core.train import (TrainConfig, WeightAverage, collate, encode_pairs, init_from, layer_groups,
                                 learning_rate, load_pairs, load_state, pad_multiple, pair_gaps, peak_lr,
                                 ranking_hinge, rdrop_loss, row_widths, sequence_log_probs, sharpness_probe,
                                 summed_cross_entropy, teacher_kl, teacher_tv, token_batches, train)

PAIRS = [Pair("CC(=O)Cl.NC", "CNC(C)=O"), Pair("CCO.CC(=O)O", "CCOC(C)=O"), Pair("CC=O", "CCO"),
         Pair("c1ccccc1.BrBr", "Brc1ccccc1"), Pair("CCN.O=CC", "CCNCC"), Pair("CO.OC(=O)c1ccccc1", "COC(=O)c1ccccc1")]


@pytest.fixture
def tiny_data(tmp_path):
    folder = tmp_path / "data"
    write_splits(folder, {"train": PAIRS * 4, "val": PAIRS[:3], "test": PAIRS[:1]}, {"task": "forward"})
    return folder


def test_schedule_warms_up_then_reaches_zero_exactly_at_the_time_budget():
    cfg = TrainConfig(data="data/none", out="runs/none", max_minutes=10, warmup=100)  # train() refuses "" (7407559)
    peak = 1e-3
    assert learning_rate(cfg, peak, 50, 0.0) == pytest.approx(peak / 2)  # half-way through warm-up
    assert learning_rate(cfg, peak, 100, 0.0) == pytest.approx(peak)
    assert learning_rate(cfg, peak, 5000, 300.0) == pytest.approx(peak / 2)  # cosine at half the budget
    assert learning_rate(cfg, peak, 5000, 600.0) == pytest.approx(0.0, abs=1e-15)
    assert learning_rate(cfg, peak, 5000, 900.0) == pytest.approx(0.0, abs=1e-15)  # past the budget: stays 0
    # Resumed from an export at step 5000 (fresh moments), half-way through the budget: warm up again.
    assert learning_rate(cfg, peak, 5050, 300.0, warm_from=5000) == pytest.approx(peak / 4)
    assert learning_rate(cfg, peak, 5100, 300.0, warm_from=5000) == pytest.approx(peak / 2)
    linear = TrainConfig(data="", out="", max_steps=1000, warmup=0, schedule="linear")
    assert learning_rate(linear, peak, 250, 1e9) == pytest.approx(0.75 * peak)  # no budget: by steps
    constant = dataclasses.replace(cfg, schedule="constant")  # for weight averaging (--ema)
    assert [learning_rate(constant, peak, 5000, t) for t in (300.0, 599.0)] == pytest.approx([peak, peak])
    assert learning_rate(constant, peak, 50, 0.0) == pytest.approx(peak / 2)
    with pytest.raises(ValueError, match="cosine, linear, constant"):
        train(dataclasses.replace(cfg, schedule="step"))


def test_learning_rate_scales_with_the_square_root_of_the_batch_and_is_capped():
    cpu = torch.device("cpu")
    base = peak_lr(TrainConfig(data="", out="", max_tokens=4096), cpu)
    assert peak_lr(TrainConfig(data="", out="", max_tokens=4096, accum=2), cpu) == pytest.approx(base * math.sqrt(2))
    assert peak_lr(TrainConfig(data="", out="", max_tokens=1 << 20), cpu) == pytest.approx(4e-3)
    assert peak_lr(TrainConfig(data="", out="", lr=5e-4), cpu) == 5e-4


def test_training_logs_its_speed_every_interval(tiny_data, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="molspec_core.train")
    train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "run"), preset="tiny", max_steps=3, max_tokens=64,
                      val_greedy_rows=1, threads=1, log_every_seconds=0.0))
    speeds = [r.getMessage() for r in caplog.records if r.getMessage().startswith("speed at")]
    assert len(speeds) == 3 and all("steps/s" in m and "tokens/s" in m for m in speeds)
    # Each line counts the batch shapes its steps met first; together they are all the run has seen.
    shapes = [tuple(map(int, re.search(r"batch shapes new (\d+) \((\d+) seen\)", m).groups())) for m in speeds]
    assert shapes[0] == (1, 1) and sum(new for new, _ in shapes) == shapes[-1][1]
    assert [seen for _, seen in shapes] == sorted(seen for _, seen in shapes)


def test_a_training_step_reads_nothing_back_from_the_device(tiny_data, tmp_path, monkeypatch):
    """On a GPU every read of a device value (.item(), int(), bool(), float()) makes the host wait for
    the queue, so the host cannot launch the next step while this one runs: the first GPU block ran
    at a quarter of its later speed for minutes. Reads from our own code are counted; they must not
    grow with the steps (the loss is read when logged or validated, not every step)."""
    reads = count_device_reads(monkeypatch)
    counts = []
    for steps in (2, 6):
        reads.clear()
        train(TrainConfig(data=str(tiny_data), out=str(tmp_path / f"run{steps}"), preset="tiny", max_steps=steps,
                          max_tokens=64, val_greedy_rows=0, threads=1, eval_every=1000, log_every_seconds=1e9))
        counts.append(len(reads))
    assert counts[0] == counts[1], reads


def test_cuda_attention_is_kept_off_cudnn_whose_plans_cost_each_new_batch_shape(tiny_data, tmp_path, monkeypatch):
    """GPU block 4 ran forward at 2.5 steps a second, paying about 0.4 s for every new batch shape
    (tools/gpu_train.md): on CUDA the trainer and checkpoint.load (the service's and the GPU kit's
    decoding) take cuDNN out of attention; a CPU run leaves the process's attention settings as they are."""
    import molspec_core.model as model_module
    import molspec_core.train as train_module

    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        model_module.plan_free_attention(torch.device("cpu"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        model_module.plan_free_attention(torch.device("cuda"))
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)

    seen: list[torch.device] = []
    monkeypatch.setattr(train_module, "plan_free_attention", seen.append)
    monkeypatch.setattr(checkpoint, "plan_free_attention", seen.append)
    train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "run"), preset="tiny", max_steps=1, max_tokens=64,
                      val_greedy_rows=1, threads=1))
    Predictor.load(tmp_path / "run" / "export", device="cpu")
    assert seen == [torch.device("cpu"), torch.device("cpu")]  # both ask, with the device they run on


def _random_rows(n: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 120, size=n)  # targets about half as long as sources, as in reactions
    src = [rng.integers(4, 30, size=int(k), dtype=np.int64) for k in lengths]
    tgt = [np.concatenate(([BOS_ID], rng.integers(4, 30, size=int(k // 2 + rng.integers(1, 9))), [EOS_ID]))
           for k in lengths]
    return src, tgt


@pytest.mark.parametrize("multiple", [1, 8])
def test_token_batches_hold_every_row_once_within_the_budget_at_padded_widths(multiple):
    src, tgt = _random_rows(2000, 1)
    batches = token_batches(row_widths(src, tgt, multiple), 2048, random.Random(3))
    assert sorted(i for b in batches for i in b) == list(range(len(src)))
    for rows in batches:
        s, t_in, t_out = collate(rows, src, tgt, torch.device("cpu"), multiple)
        assert s.shape[1] % multiple == 0 and t_in.shape[1] % multiple == 0 and t_out.shape == t_in.shape
        assert s.numel() + t_in.numel() + len(rows) <= 2048 or len(rows) == 1  # the budget counts whole targets
        assert s.shape[1] - max(len(src[i]) for i in rows) < multiple  # no wider than the multiple needs


def test_padding_widths_to_a_multiple_cuts_batch_shapes_and_changes_no_loss():
    """On CUDA the trainer pads widths to multiples of 8 (train.AUTO_PAD): far fewer batch shapes, each
    of which may cost a kernel plan, and the padding is masked, so the loss is the same."""
    src, tgt = _random_rows(10_000, 2)

    def shapes(multiple: int) -> set[tuple[int, ...]]:
        found = set()
        for rows in token_batches(row_widths(src, tgt, multiple), 4096, random.Random(0)):
            s, t_in, _ = collate(rows, src, tgt, torch.device("cpu"), multiple)
            found.add((*s.shape, t_in.shape[1]))
        return found

    assert len(shapes(8)) * 4 < len(shapes(1))  # 36 against 229
    torch.manual_seed(0)
    model = Seq2SeqTransformer(preset("tiny", 32)).eval()
    rows = list(range(12))
    losses = []
    for multiple in (1, 8):
        s, t_in, t_out = collate(rows, src, tgt, torch.device("cpu"), multiple)
        with torch.no_grad():
            logits = model(s, t_in)
        losses.append(float(torch.nn.functional.cross_entropy(logits.reshape(-1, 32), t_out.reshape(-1),
                                                              ignore_index=PAD_ID, reduction="sum")))
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert pad_multiple(TrainConfig(data="", out=""), torch.device("cuda")) == 8
    assert pad_multiple(TrainConfig(data="", out=""), torch.device("cpu")) == 1


def test_trainer_pads_its_batches_to_the_multiple_it_is_given(tiny_data, tmp_path, monkeypatch, caplog):
    import molspec_core.train as train_module

    widths: list[tuple[int, int]] = []

    def recording(*args, **kwargs):
        s, t_in, t_out = collate(*args, **kwargs)
        widths.append((s.shape[1], t_in.shape[1]))
        return s, t_in, t_out

    monkeypatch.setattr(train_module, "collate", recording)
    caplog.set_level(logging.INFO, logger="molspec_core.train")
    train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "run"), preset="tiny", max_steps=2, max_tokens=256,
                      pad_to=8, val_greedy_rows=1, threads=1))
    assert widths and all(w % 8 == 0 for pair in widths for w in pair)
    assert any("widths padded to multiples of 8" in r.getMessage() for r in caplog.records)


def test_kit_trains_exports_float16_shards_resumes_and_loads(tiny_data, tmp_path):
    common = dict(data=str(tiny_data), preset="tiny", max_tokens=64, warmup=2, eval_every=3, val_greedy_rows=2,
                  threads=1, accum=2)
    first = train(TrainConfig(out=str(tmp_path / "run1"), max_steps=4, **common))
    export = tmp_path / "run1" / "export"
    assert first["step"] == 4 and [h["step"] for h in first["history"]] == [3, 4]
    shards = list(export.glob("model*.safetensors"))
    assert shards and all(f.stat().st_size <= checkpoint.MAX_SHARD_BYTES for f in shards)
    assert all(t.dtype == torch.float16 for t in checkpoint.load_tensors(export).values())
    saved = json.loads((export / "train_state.json").read_text())
    assert saved["step"] == 4 and saved["tokens"] > 0

    # A new machine: a fresh run folder resumes from the export alone and keeps counting.
    cfg = TrainConfig(out=str(tmp_path / "run2"), max_steps=7, resume=str(export), **{**common, "eval_every": 1})
    resumed = train(cfg)
    assert resumed["step"] == 7 and resumed["tokens"] > saved["tokens"] and resumed["warm_from"] == 4
    assert [h["step"] for h in resumed["history"]] == [3, 4, 5, 6, 7]
    # Fresh optimizer moments: step 5 is half-way through a new 2-step warm-up, step 6 is warm again.
    peak = peak_lr(cfg, torch.device("cpu"))
    assert resumed["history"][2]["lr"] == pytest.approx(learning_rate(cfg, peak, 5, 0.0) / 2)
    assert resumed["history"][3]["lr"] == pytest.approx(learning_rate(cfg, peak, 6, 0.0))

    predictor = Predictor.load(tmp_path / "run2" / "export", device="cpu")
    exported = checkpoint.load_tensors(tmp_path / "run2" / "export")
    for name, value in predictor.model.state_dict().items():
        if name in exported:
            assert torch.equal(value, exported[name].float()), name
    result = predictor.predict("CC=O", method="greedy")
    assert result.ok and result.stats.model_calls > 0  # a tiny model may emit nonsense, but it decodes


def test_weight_average_follows_its_recurrence_and_holds_the_model_only_inside_its_block():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(preset("tiny", 20))
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    average = WeightAverage(model, 0.75)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    average.update()
    raw = {n: p.detach().clone() for n, p in model.named_parameters()}
    for name, value in average.tensors().items():
        assert torch.allclose(value, 0.75 * start[name] + 0.25 * raw[name]), name
    with average.applied():
        for name, p in model.named_parameters():
            assert torch.equal(p, average.tensors()[name]), name
    for name, p in model.named_parameters():
        assert torch.equal(p, raw[name]), name
    with pytest.raises(ValueError, match="between 0 and 1"):
        WeightAverage(model, 1.0)


def test_kit_exports_the_weight_average_and_a_resumed_run_keeps_it(tiny_data, tmp_path):
    """With --ema the export holds the average, out/last the raw weights beside it, and a run resumed from
    out/last carries on from the saved average, not from the raw weights."""
    cfg = TrainConfig(data=str(tiny_data), out=str(tmp_path / "run"), preset="tiny", max_tokens=64, warmup=1,
                      eval_every=10_000, val_greedy_rows=1, threads=1, max_steps=4, ema=1 - 1e-6, seed=3,
                      lr=0.02)  # a rate at which 4 steps move the raw weights well past float16 rounding
    torch.manual_seed(cfg.seed)  # the weights train() starts from, which an average this slow barely leaves
    vocab = Vocab.load(tiny_data / "vocab.json")
    start = Seq2SeqTransformer(preset("tiny", len(vocab))).state_dict()

    def close(folder, stem, reference) -> bool:
        tensors = checkpoint.load_tensors(folder, stem=stem)
        return all(torch.allclose(tensors[n].float(), reference[n], atol=2e-3) for n in tensors if n in reference)

    train(cfg)
    raw = checkpoint.load_tensors(tmp_path / "run" / "last")
    assert close(tmp_path / "run" / "export", "model", start)
    assert close(tmp_path / "run" / "last", "ema", start)
    assert not close(tmp_path / "run" / "export", "model", raw)  # the raw weights moved; the export did not
    # A quick average lags the raw weights but leaves the start: the run updates it every step.
    train(dataclasses.replace(cfg, out=str(tmp_path / "quick"), ema=0.5))
    quick_raw = checkpoint.load_tensors(tmp_path / "quick" / "last")
    assert not close(tmp_path / "quick" / "export", "model", start)
    assert not close(tmp_path / "quick" / "export", "model", quick_raw)
    train(dataclasses.replace(cfg, max_steps=6))
    assert json.loads((tmp_path / "run" / "export" / "train_state.json").read_text())["step"] == 6
    assert close(tmp_path / "run" / "export", "model", start)  # an average restarted from raw would sit near raw
    assert not close(tmp_path / "run" / "export", "model", raw)


def test_init_carries_each_token_to_its_new_id_when_new_data_adds_tokens(tiny_data, tmp_path, caplog):
    train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "old"), preset="tiny", max_tokens=64, max_steps=2,
                      warmup=1, eval_every=10_000, val_greedy_rows=1, threads=1))
    old = checkpoint.load(tmp_path / "old" / "export")
    old_model, old_vocab = old[0], old[1]
    # New data: a reagent ion the old data lacked ([Pd] sorts among the old tokens, so ids shift), and
    # the old data's "Br" is gone.
    pairs = [pair for pair in PAIRS if "Br" not in pair.src] + [Pair("CC(=O)Cl.NC.[Pd]", "CNC(C)=O")]
    write_splits(tmp_path / "new", {"train": pairs, "val": pairs[:2], "test": pairs[:1]}, {"task": "forward"})
    vocab = Vocab.load(tmp_path / "new" / "vocab.json")
    model = Seq2SeqTransformer(preset("tiny", len(vocab)))
    fresh = model.embed.weight.detach().clone()
    with caplog.at_level(logging.WARNING, logger="molspec_core.train"):
        assert init_from(model, vocab, tmp_path / "old" / "export") == ["[Pd]"]
    # the tokens the data lost were dropped without a word (a fine-tune prepared without --vocab read fewer tokens)
    assert (f"--init {tmp_path / 'old' / 'export'} reads 1 token the data's vocabulary lacks (Br): the model "
            "trained here will not read it") in caplog.text
    assert f"prepare the data with --vocab {tmp_path / 'old' / 'export' / 'vocab.json'} to keep it" in caplog.text
    for token in vocab.tokens:
        row = model.embed.weight[vocab.index[token]]
        expected = (old_model.embed.weight[old_vocab.index[token]] if token in old_vocab.index
                    else fresh[vocab.index[token]])
        assert torch.equal(row, expected), token
    assert any(vocab.index[t] != old_vocab.index[t] for t in vocab.tokens if t in old_vocab.index)  # ids moved
    old_rest = {k: v for k, v in old_model.state_dict().items() if k != "embed.weight"}
    for name, value in old_rest.items():
        assert torch.equal(model.state_dict()[name], value), name


def test_dropout_overrides_the_presets_while_training_and_is_checked(tiny_data, tmp_path, monkeypatch):
    built = []
    real = Seq2SeqTransformer.__init__

    def spy(self, cfg):
        built.append(cfg.dropout)
        real(self, cfg)

    monkeypatch.setattr(Seq2SeqTransformer, "__init__", spy)
    common = dict(data=str(tiny_data), preset="forward", max_tokens=64, max_steps=1, eval_every=10, val_greedy_rows=1,
                  threads=1)
    train(TrainConfig(out=str(tmp_path / "off"), dropout=0.0, **common))
    train(TrainConfig(out=str(tmp_path / "preset"), **common))
    assert built == [0.0, preset("forward", 10).dropout] and built[1] == 0.1
    assert json.loads((tmp_path / "off" / "export" / "config.json").read_text())["model"]["dropout"] == 0.0
    with pytest.raises(ValueError, match="dropout"):
        train(TrainConfig(out=str(tmp_path / "bad"), dropout=1.0, **common))


def test_rdrop_reads_the_batch_twice_under_independent_dropout_and_adds_their_symmetric_kl(tiny_data):
    vocab = Vocab.load(tiny_data / "vocab.json")
    torch.manual_seed(0)
    model = Seq2SeqTransformer(dataclasses.replace(preset("tiny", len(vocab)), dropout=0.3))
    src_rows = [np.array(vocab.encode(p.src), dtype=np.int64) for p in PAIRS]
    tgt_rows = [np.array([BOS_ID, *vocab.encode(p.tgt), EOS_ID], dtype=np.int64) for p in PAIRS]
    src, tgt_in, tgt_out = collate(list(range(len(PAIRS))), src_rows, tgt_rows, torch.device("cpu"))
    model.eval()  # no dropout: the two passes agree, and the loss is the plain cross-entropy
    ce, kl = rdrop_loss(model, src, tgt_in, tgt_out, 0.1)
    logits = model(src, tgt_in)
    plain = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1),
                                              ignore_index=PAD_ID, label_smoothing=0.1, reduction="sum")
    assert ce.item() == pytest.approx(plain.item(), rel=1e-5) and kl.item() == pytest.approx(0.0, abs=1e-4)
    model.train()
    torch.manual_seed(1)
    ce, kl = rdrop_loss(model, src, tgt_in, tgt_out, 0.0)
    torch.manual_seed(1)  # the same masks, passes written out: KL(p1||p2) + KL(p2||p1) over target tokens
    first, second = torch.log_softmax(model(torch.cat([src, src]), torch.cat([tgt_in, tgt_in])), -1).chunk(2)
    mask = (tgt_out != PAD_ID).unsqueeze(-1)
    expected = ((first.exp() * (first - second) + second.exp() * (second - first)) * mask).sum()
    assert kl.item() > 0.01 and kl.item() == pytest.approx(expected.item(), rel=1e-4)
    with pytest.raises(ValueError, match="rdrop"):
        train(TrainConfig(data=str(tiny_data), out=str(tiny_data.parent / "bad"), rdrop=-1.0, max_steps=1))


def test_the_teacher_kl_is_the_kl_of_the_teachers_distribution_to_the_models_over_target_tokens():
    torch.manual_seed(0)
    own, theirs = torch.randn(2, 3, 7), torch.randn(2, 3, 7)
    tgt_out = torch.tensor([[5, 6, EOS_ID], [5, EOS_ID, PAD_ID]])
    p, q = torch.softmax(theirs, -1), torch.softmax(own, -1)
    expected = sum(float((p[i, j] * (p[i, j] / q[i, j]).log()).sum()) for i, j in [(0, 0), (0, 1), (0, 2), (1, 0),
                                                                                  (1, 1)])
    assert teacher_kl(own, theirs, tgt_out).item() == pytest.approx(expected, rel=1e-5)
    assert teacher_kl(theirs, theirs, tgt_out).item() == pytest.approx(0.0, abs=1e-5)


def test_a_distilled_run_moves_toward_its_teacher_and_leaves_the_teacher_alone(tiny_data, tmp_path):
    common = dict(data=str(tiny_data), preset="tiny", max_tokens=64, warmup=1, val_greedy_rows=1, threads=1, lr=3e-3)
    train(TrainConfig(out=str(tmp_path / "teacher"), max_steps=40, **common))
    teacher_dir = tmp_path / "teacher" / "export"
    before = checkpoint.load_tensors(teacher_dir)
    state = train(TrainConfig(out=str(tmp_path / "student"), max_steps=30, eval_every=10, seed=1,
                              teacher=str(teacher_dir), teacher_weight=1.0, **common))
    kl = [entry["teacher_kl"] for entry in state["history"]]
    assert kl[-1] < kl[0] and all(entry["train_teacher_kl"] > 0 for entry in state["history"])
    assert 0 <= state["history"][-1]["teacher_top1_agreement"] <= 1
    after = checkpoint.load_tensors(teacher_dir)
    assert all(torch.equal(before[name], after[name]) for name in before)
    plain = train(TrainConfig(out=str(tmp_path / "plain"), max_steps=2, eval_every=2, **common))
    assert "teacher_kl" not in plain["history"][-1]


def test_a_teacher_of_another_vocabulary_or_beside_rdrop_is_refused_before_any_write(tiny_data, tmp_path):
    other = tmp_path / "other"
    write_splits(other, {"train": PAIRS[:2] * 4, "val": PAIRS[:1], "test": PAIRS[:1]}, {"task": "forward"})
    common = dict(preset="tiny", max_tokens=64, max_steps=1, val_greedy_rows=1, threads=1)
    train(TrainConfig(data=str(other), out=str(tmp_path / "small"), **common))
    with pytest.raises(ValueError, match="another vocabulary"):
        train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "bad"), teacher=str(tmp_path / "small" / "export"),
                          **common))
    # a forward teacher on retro data in the same vocabulary: its distributions are of the other direction
    retro = tmp_path / "retro"
    write_splits(retro, {"train": [Pair(p.tgt, p.src) for p in PAIRS] * 4, "val": PAIRS[:3], "test": PAIRS[:1]},
                 {"task": "retro"}, Vocab.load(tiny_data / "vocab.json"))
    train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "forward"), **common))
    with pytest.raises(ValueError, match="holds a forward model, but the data hold retro data"):
        train(TrainConfig(data=str(retro), out=str(tmp_path / "bad"), teacher=str(tmp_path / "forward" / "export"),
                          **common))
    with pytest.raises(ValueError, match="--teacher and --rdrop"):
        train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "bad"), teacher=str(tmp_path / "small" / "export"),
                          rdrop=1.0, **common))
    assert not (tmp_path / "bad").exists()


def test_an_rdrop_run_trains_and_logs_the_kl(tiny_data, tmp_path):
    common = dict(data=str(tiny_data), preset="tiny", max_tokens=64, warmup=1, max_steps=4, eval_every=2,
                  val_greedy_rows=1, threads=1, dropout=0.2)
    state = train(TrainConfig(out=str(tmp_path / "rdrop"), rdrop=1.0, **common))
    plain = train(TrainConfig(out=str(tmp_path / "plain"), **common))
    assert all(entry["rdrop_kl"] > 0 for entry in state["history"])
    assert "rdrop_kl" not in plain["history"][-1]
    assert state["tokens"] == 2 * plain["tokens"]  # each batch read twice


def test_focal_loss_weights_each_target_token_by_one_minus_its_probability_to_the_gamma():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7, requires_grad=True)
    tgt_out = torch.tensor([[4, 5, EOS_ID], [6, EOS_ID, PAD_ID]])
    plain = torch.nn.functional.cross_entropy(logits.reshape(-1, 7), tgt_out.reshape(-1), ignore_index=PAD_ID,
                                              reduction="sum")
    assert summed_cross_entropy(logits, tgt_out, 0.0, focal=0.0).item() == pytest.approx(plain.item(), rel=1e-6)
    log_p = torch.log_softmax(logits, -1)
    expected = logits.new_zeros(())
    for row, col in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]:  # by hand, padding left out
        lp = log_p[row, col, tgt_out[row, col]]
        expected = expected + (1 - lp.exp()) ** 2 * -lp
    focal = summed_cross_entropy(logits, tgt_out, 0.0, focal=2.0)
    assert focal.item() == pytest.approx(expected.item(), rel=1e-5) and focal.item() < plain.item()
    grad, = torch.autograd.grad(focal, logits)  # the weight is differentiated, not held constant
    grad_expected, = torch.autograd.grad(expected, logits)
    assert torch.allclose(grad, grad_expected, atol=1e-6)
    smoothed = summed_cross_entropy(logits, tgt_out, 0.1, focal=1.0)  # the weight multiplies the smoothed term
    per_token = torch.nn.functional.cross_entropy(logits.reshape(-1, 7), tgt_out.reshape(-1), ignore_index=PAD_ID,
                                                  label_smoothing=0.1, reduction="none")
    p_target = log_p.reshape(-1, 7).gather(-1, tgt_out.reshape(-1, 1).clamp(min=0)).squeeze(-1).exp()
    assert smoothed.item() == pytest.approx(((1 - p_target) * per_token).sum().item(), rel=1e-5)


def test_a_focal_run_trains_and_a_negative_gamma_is_refused(tiny_data, tmp_path):
    common = dict(data=str(tiny_data), preset="tiny", max_tokens=64, warmup=1, max_steps=3, eval_every=3,
                  val_greedy_rows=1, threads=1, seed=3)
    focal = train(TrainConfig(out=str(tmp_path / "focal"), focal=2.0, **common))
    plain = train(TrainConfig(out=str(tmp_path / "plain"), **common))
    assert focal["step"] == plain["step"] == 3 and focal["tokens"] == plain["tokens"]
    assert focal["history"][-1]["loss"] < plain["history"][-1]["loss"]  # the same batches, each token down-weighted
    with pytest.raises(ValueError, match="focal"):
        train(TrainConfig(out=str(tmp_path / "bad"), focal=-1.0, **common))


def test_layer_groups_hold_every_parameter_once_scaled_down_from_the_output_end():
    model = Seq2SeqTransformer(preset("forward", 40))  # 4 + 4 layers
    groups = layer_groups(model, 0.5)
    assert [g["scale"] for g in groups] == [0.5 ** k for k in range(8)]
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    first = {id(p) for p in groups[0]["params"]}
    assert {id(p) for p in [model.embed.weight, *model.decoder[-1].parameters()]} <= first
    assert {id(p) for p in model.encoder[0].parameters()} == {id(p) for p in groups[-1]["params"]}
    assert {id(p) for p in model.encoder_norm.parameters()} <= {id(p) for p in groups[4]["params"]}


def test_a_layer_decay_run_moves_the_lower_layers_less_and_a_factor_outside_0_1_is_refused(tiny_data, tmp_path):
    common = dict(data=str(tiny_data), preset="tiny", max_tokens=64, warmup=1, max_steps=1, eval_every=1, lr=1e-2,
                  schedule="constant", val_greedy_rows=1, threads=1, seed=5)
    torch.manual_seed(5)  # train() seeds before it builds the model: the same starting weights
    start = Seq2SeqTransformer(preset("tiny", len(Vocab.load(tiny_data / "vocab.json"))))
    moved = {}
    for name, decay in (("plain", 1.0), ("decay", 0.1)):
        train(TrainConfig(out=str(tmp_path / name), layer_decay=decay, **common))
        model = Seq2SeqTransformer(start.cfg)
        load_state(tmp_path / name / "last", model, None)
        moved[name] = {part: max((a - b).abs().max().item() for a, b in zip(getattr(model, part)[i].parameters(),
                                                                            getattr(start, part)[i].parameters()))
                       for part, i in (("decoder", -1), ("encoder", 0))}
    assert moved["decay"]["decoder"] == pytest.approx(moved["plain"]["decoder"], rel=1e-4)  # the full rate
    assert 0 < moved["decay"]["encoder"] < moved["plain"]["encoder"] / 50  # 0.1 ** 3: three layers above it
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="layer-decay"):
            train(TrainConfig(out=str(tmp_path / "bad"), layer_decay=bad, **common))


@pytest.mark.parametrize("before,after", [(1.0, 0.5), (0.5, 1.0)])
def test_a_run_continued_with_layer_decay_switched_keeps_each_parameters_moments(before, after, tiny_data, tmp_path):
    """The optimizer moments were saved and read back by (group, place in group): continued with --layer-decay
    switched on or off, each parameter read another's (a RuntimeError at the first step where shapes differ)."""
    common = dict(data=str(tiny_data), out=str(tmp_path / "run"), preset="tiny", max_tokens=64, warmup=1,
                  eval_every=1, val_greedy_rows=1, threads=1)
    train(TrainConfig(layer_decay=before, max_steps=2, **common))
    shutil.copytree(tmp_path / "run" / "last", tmp_path / "saved")
    assert train(TrainConfig(layer_decay=after, max_steps=3, **common))["step"] == 3  # was the RuntimeError

    def grouped(model: Seq2SeqTransformer, decay: float) -> list[list[torch.nn.Parameter]]:
        return [list(model.parameters())] if decay == 1 else [g["params"] for g in layer_groups(model, decay)]

    model = Seq2SeqTransformer(preset("tiny", len(Vocab.load(tiny_data / "vocab.json"))))
    names = {id(param): name for name, param in model.named_parameters()}
    saved_as = {names[id(param)]: f"{i}.{j}" for i, params in enumerate(grouped(model, before))
                for j, param in enumerate(params)}  # save_state's numbering in the first run
    optimizer = torch.optim.AdamW([{"params": params} for params in grouped(model, after)], lr=0.0)
    load_state(tmp_path / "saved", model, optimizer, before)
    saved = checkpoint.load_tensors(tmp_path / "saved", stem="optimizer")
    for name, param in model.named_parameters():
        assert torch.equal(optimizer.state[param]["exp_avg_sq"], saved[f"{saved_as[name]}.exp_avg_sq"]), name


def test_the_sharpness_probe_moves_the_weights_rho_along_the_unit_gradient_and_back_exactly():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    before = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.randn_like(p)
    norm = torch.cat([p.grad.reshape(-1) for p in params]).norm()
    with sharpness_probe(params, 0.05):
        for p, old in zip(params, before):
            assert torch.allclose(p.detach(), old + 0.05 * p.grad / norm, atol=1e-7)
        moved = torch.cat([(p.detach() - old).reshape(-1) for p, old in zip(params, before)])
        assert moved.norm().item() == pytest.approx(0.05, rel=1e-5)
        for p in params:
            p.grad = torch.randn_like(p)  # the second pass's gradients replace the first's
    for p, old in zip(params, before):
        assert torch.allclose(p.detach(), old, atol=1e-7)


def test_a_sam_step_applies_the_gradient_taken_at_the_probed_point(tiny_data, tmp_path, monkeypatch):
    """One SAM step of the trainer (no dropout, so both passes are deterministic) against the step written
    out: the gradient at w, the probe, the gradient there; the optimizer must get that gradient, at w."""
    seen = []
    real = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm):  # called just before the optimizer steps
        params = list(params)
        seen.append({id(p): (p.detach().clone(), None if p.grad is None else p.grad.clone()) for p in params})
        return real(params, max_norm)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    common = dict(data=str(tiny_data), preset="tiny", max_tokens=4096, warmup=1, max_steps=1, eval_every=10,
                  val_greedy_rows=1, threads=1, dropout=0.0, seed=3, label_smoothing=0.0)
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: None)  # the weights stay at w
    state = train(TrainConfig(out=str(tmp_path / "sam"), sam=0.5, **common))
    plain = train(TrainConfig(out=str(tmp_path / "plain"), **common))
    assert state["tokens"] == 2 * plain["tokens"]  # each batch read twice
    vocab = Vocab.load(tiny_data / "vocab.json")
    torch.manual_seed(3)
    model = Seq2SeqTransformer(dataclasses.replace(preset("tiny", len(vocab)), dropout=0.0))
    src_rows = [np.array(vocab.encode(p.src), dtype=np.int64) for p in PAIRS * 4]
    tgt_rows = [np.array([BOS_ID, *vocab.encode(p.tgt), EOS_ID], dtype=np.int64) for p in PAIRS * 4]
    src, tgt_in, tgt_out = collate(list(range(len(src_rows))), src_rows, tgt_rows, torch.device("cpu"))

    def gradients() -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        logits = model(src, tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1),
                                                 ignore_index=PAD_ID, reduction="sum")
        (loss / (tgt_out != PAD_ID).sum()).backward()
        return [p.grad.clone() for p in model.parameters()]

    at_w = gradients()
    with sharpness_probe(list(model.parameters()), 0.5):
        probed = gradients()
    weights = [p.detach() for p in model.parameters()]
    sam_step, plain_step = list(seen[0].values()), list(seen[1].values())
    for (value, grad), (plain_value, plain_grad), w, g_w, g_probe in zip(sam_step, plain_step, weights, at_w,
                                                                         probed):
        assert torch.allclose(value, w) and torch.allclose(plain_value, w)  # stepped from w, not the probe
        assert torch.allclose(grad, g_probe, atol=1e-6) and torch.allclose(plain_grad, g_w, atol=1e-6)
    assert max((g - h).abs().max().item() for g, h in zip(at_w, probed)) > 1e-3  # the probe mattered
    with pytest.raises(ValueError, match="sam"):
        train(TrainConfig(out=str(tmp_path / "bad"), sam=-0.1, **common))


def test_freeze_encoder_trains_the_decoder_and_the_shared_embedding_and_keeps_the_encoder(tiny_data, tmp_path):
    common = dict(data=str(tiny_data), preset="tiny", max_tokens=64, warmup=1, max_steps=3, eval_every=10,
                  val_greedy_rows=1, threads=1, label_smoothing=0.0)
    torch.manual_seed(0)  # as train() seeds (seed 0) before it builds the model: both runs start here
    start = Seq2SeqTransformer(preset("tiny", len(Vocab.load(tiny_data / "vocab.json")))).state_dict()
    encoder = {name for name in start if name.startswith(("encoder.", "encoder_norm."))}
    for frozen in (True, False):
        out = tmp_path / f"frozen_{frozen}"
        train(TrainConfig(out=str(out), freeze_encoder=frozen, **common))
        trained = checkpoint.load_tensors(out / "last")
        moved = {name for name, value in trained.items() if not torch.equal(value, start[name])}
        assert "embed.weight" in moved and any(name.startswith("decoder.") for name in moved)
        assert (moved & encoder == set()) if frozen else encoder <= moved


def test_a_frozen_encoder_runs_as_at_inference_while_the_decoder_trains(tiny_data, tmp_path, monkeypatch):
    """With dropout on, a frozen encoder still computes its memory in eval mode (the memory inference reads),
    while an encoder that trains runs in training mode; the decoder trains with dropout either way."""
    seen: dict[str, list[tuple[bool, bool]]] = {"encoder": [], "decoder": []}
    encode, decode = Seq2SeqTransformer.encode_torch, Seq2SeqTransformer.decode_full

    def encode_spy(self, src):
        seen["encoder"].append((self.training, torch.is_grad_enabled()))
        return encode(self, src)

    def decode_spy(self, tgt_in, memory, src_keep):
        seen["decoder"].append((self.training, torch.is_grad_enabled()))
        return decode(self, tgt_in, memory, src_keep)

    monkeypatch.setattr(Seq2SeqTransformer, "encode_torch", encode_spy)
    monkeypatch.setattr(Seq2SeqTransformer, "decode_full", decode_spy)
    common = dict(data=str(tiny_data), preset="tiny", dropout=0.3, max_tokens=64, warmup=1, max_steps=2,
                  eval_every=10, val_greedy_rows=0, threads=1)
    for frozen in (True, False):
        seen["encoder"].clear(), seen["decoder"].clear()
        train(TrainConfig(out=str(tmp_path / f"frozen_{frozen}"), freeze_encoder=frozen, **common))
        training_steps = [mode for mode in seen["decoder"] if mode == (True, True)]
        assert len(training_steps) == 2  # one batch a step; the end's validation runs in eval mode
        encoder_modes = set(seen["encoder"]) - {(False, False)}  # validation encodes in eval mode, no grad
        assert encoder_modes == (set() if frozen else {(True, True)})


def test_time_budget_run_stops_annealed(tiny_data, tmp_path):
    state = train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "run"), preset="tiny", max_tokens=64,
                              max_minutes=0.02, warmup=1, eval_every=10_000, val_greedy_rows=1, threads=1))
    assert state["seconds"] >= 0.02 * 60
    assert state["history"][-1]["lr"] < 1e-3 * 0.05  # the last step ran at the tail of the cosine


def test_a_validation_that_runs_past_the_time_budget_ends_the_run_there(tiny_data, tmp_path, monkeypatch):
    """A validation (half a minute on the GPU) begun inside the budget and ending past it was followed by one step
    more, at a rate from before it, and a second validation of nearly the same weights: a block's run ended up to two
    validations late. The clock is the trainer's own, moved by the validation alone (no step takes time here)."""
    import types

    import molspec_core.train as train_module

    clock = [1000.0]
    monkeypatch.setattr(train_module, "time", types.SimpleNamespace(time=lambda: clock[0]))
    real = train_module.validate

    def slow(*args, **kwargs):
        clock[0] += 100  # past the 60 s budget
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "validate", slow)
    run = tmp_path / "run"
    state = train(TrainConfig(data=str(tiny_data), out=str(run), preset="tiny", max_tokens=64, max_minutes=1,
                              max_steps=6, eval_every=2, val_greedy_rows=1, threads=1))
    assert [entry["step"] for entry in state["history"]] == [2]  # was [2, 3]
    for folder in ("export", "last"):
        saved = json.loads((run / folder / "train_state.json").read_text())
        assert saved["step"] == 2 and saved["seconds"] == 100


# What the GPU machine lacks of our dependencies (it has torch, numpy, safetensors and tqdm).
NOT_ON_GPU_MACHINE = ("rdkit", "threadpoolctl", "pandas", "streamlit", "plotly", "ctranslate2", "ray", "syntheseus")


def test_training_entry_point_runs_without_rdkit(tiny_data, tmp_path):
    """The GPU machine has no RDKit (nor the app's packages): `python -m molspec_core.train` must train there."""
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in NOT_ON_GPU_MACHINE)
    code = (f"import runpy, sys; {blocked}\n"
            f"sys.argv = ['train', '--data', {str(tiny_data)!r}, '--out', {str(tmp_path / 'run')!r}, "
            "'--preset', 'tiny', '--max-steps', '2', '--max-tokens', '64', '--val-greedy-rows', '1']\n"
            "runpy.run_module('molspec_core.train', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "export" / "train_state.json").read_text())["step"] == 2


def test_the_ranking_score_is_the_score_beam_search_ranks_answers_by(tiny_data):
    """The hinge of `--pairs` compares what beam search compares: a finished answer's summed log-probability."""
    vocab = Vocab.load(tiny_data / "vocab.json")
    torch.manual_seed(3)
    model = Seq2SeqTransformer(preset("tiny", len(vocab))).eval()
    source = vocab.encode(PAIRS[0].src)
    hypotheses = [h for h in beam_search(model, [source], 4, max_len=12)[0].hypotheses if h.finished]
    assert hypotheses
    src = torch.tensor([source] * len(hypotheses))
    tgt = [np.array([BOS_ID, *h.tokens, EOS_ID]) for h in hypotheses]
    s, t_in, t_out = collate(list(range(len(tgt))), [src[0].numpy()] * len(tgt), tgt, torch.device("cpu"))
    with torch.no_grad():
        scores = sequence_log_probs(model(s, t_in), t_out)
    assert scores.tolist() == pytest.approx([h.score for h in hypotheses], abs=1e-4)


def write_ranking_pairs(path, pairs):
    path.write_text("".join(f"{p.src}\t{p.tgt}\t{p.src.split('.')[0]}\n" for p in pairs))


def product_margins(model_folder, pairs, at: str) -> list[float]:
    """Per pair, by how much the product outscores its negative where the hinge compares them."""
    predictor = Predictor.load(str(model_folder), device="cpu", engine="torch")
    lines = [(p.src, p.tgt, p.src.split(".")[0]) for p in pairs]
    with torch.no_grad():
        return pair_gaps(predictor.model.eval(), list(range(len(pairs))), encode_pairs(lines, predictor.vocab),
                         torch.device("cpu"), at=at)[0].tolist()


@pytest.mark.parametrize("at", ["sequence", "branch"])
def test_ranking_pairs_lift_the_recorded_product_above_the_negatives(tiny_data, tmp_path, at):
    """The same run with and without `--pairs` (negative: the first reactant copied, an answer a young model
    prefers): the hinge leaves the product ahead of its negative by more, and says how it went."""
    write_ranking_pairs(tmp_path / "pairs.tsv", PAIRS)
    common = dict(data=str(tiny_data), preset="tiny", max_tokens=64, warmup=1, max_steps=40, eval_every=20,
                  val_greedy_rows=0, threads=1, lr=3e-3, label_smoothing=0.0)
    train(TrainConfig(out=str(tmp_path / "plain"), **common))
    state = train(TrainConfig(out=str(tmp_path / "ranked"), pairs=str(tmp_path / "pairs.tsv"), pair_weight=1.0,
                              pair_margin=5.0, pair_rows=4, pair_at=at, **common))
    plain = product_margins(tmp_path / "plain" / "export", PAIRS, at)
    ranked = product_margins(tmp_path / "ranked" / "export", PAIRS, at)
    assert all(r > p for r, p in zip(ranked, plain)) and sum(ranked) - sum(plain) > 3.0 * len(PAIRS)
    hinges = [metrics["pair_hinge"] for metrics in state["history"]]
    assert len(hinges) == 2 and hinges[1] < hinges[0]


def test_the_branch_hinge_compares_the_two_tokens_where_product_and_negative_part(tiny_data):
    vocab = Vocab.load(tiny_data / "vocab.json")
    torch.manual_seed(5)
    model = Seq2SeqTransformer(preset("tiny", len(vocab))).eval()
    source, product, negative = vocab.encode("CC=O"), vocab.encode("CCO"), vocab.encode("CC=O")  # part at index 2
    pairs = ([np.array(source)], [np.array([BOS_ID, *product, EOS_ID])], [np.array([BOS_ID, *negative, EOS_ID])])
    with torch.no_grad():
        hinge, _ = ranking_hinge(model, [0], pairs, 100.0, torch.device("cpu"), at="branch")
        log_probs = torch.log_softmax(model(torch.tensor([source]), torch.tensor([[BOS_ID, *product[:2]]])), -1)[0, -1]
    assert float(hinge) == pytest.approx(100.0 - float(log_probs[product[2]] - log_probs[negative[2]]), abs=1e-4)
    with pytest.raises(ValueError, match="one of sequence, branch"):
        ranking_hinge(model, [0], pairs, 1.0, torch.device("cpu"), at="token")


def test_ranking_pairs_are_read_strictly(tiny_data, tmp_path):
    vocab = Vocab.load(tiny_data / "vocab.json")
    good = tmp_path / "pairs.tsv"
    good.write_text("CC=O\tCCO\tCC=O\nCC=O\tCCO\t[Rh]\n")  # the second line holds a token the model lacks
    sources, products, negatives = load_pairs(good, vocab)
    assert len(sources) == 1 and products[0].tolist() == [BOS_ID, *vocab.encode("CCO"), EOS_ID]
    bad = tmp_path / "bad.tsv"
    bad.write_text("CC=O\tCCO\n")
    with pytest.raises(ValueError, match="bad.tsv:1: a ranking pair is source, product and negative"):
        load_pairs(bad, vocab)
    with pytest.raises(ValueError, match="--pair-weight > 0"):
        train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "run"), preset="tiny", pairs=str(good),
                          pair_weight=0.0))


def test_a_ranking_pair_longer_than_the_model_reads_is_refused_before_any_work(tiny_data, tmp_path):
    """A pairs line past the model's positions failed at the step that drew it, minutes into the run: "sequence longer
    than the model's 1024 positions", naming neither the file nor the line (check_lengths does so for the data)."""
    pairs = tmp_path / "pairs.tsv"
    for line, side, length in (("C" * 1025 + "\tCCO\tCC=O", "source", 1025),
                               ("CC=O\t" + "C" * 1024 + "\tCC=O", "product", 1025)):
        pairs.write_text("CC=O\tCCO\tCC=O\n" + line + "\n")
        with pytest.raises(ValueError, match=rf"pairs.tsv:2: its {side} takes {length} positions, but the model reads "
                                             r"at most 1024; leave such pairs out$"):
            train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "run"), preset="tiny", pairs=str(pairs),
                              max_steps=2, threads=1))
        assert not (tmp_path / "run").exists()
    pairs.write_text("CC=O\tCCO\tCC=O\n" + "C" * 1024 + "\tCCO\tCC=O\n")  # the longest the model reads
    assert len(load_pairs(pairs, Vocab.load(tiny_data / "vocab.json"), 1024)[0]) == 2


def test_a_run_folder_given_as_teacher_is_named_as_one(tiny_data, tmp_path):
    """--teacher runs/a (the run folder, not its export) said only "runs/a/config.json is missing"."""
    run = tmp_path / "run"
    train(TrainConfig(data=str(tiny_data), out=str(run), preset="tiny", max_steps=1, val_greedy_rows=0, threads=1))
    with pytest.raises(ValueError, match=r"--teacher .*run is a run folder \(it holds export, last\), not a model "
                                         r"folder: give one of its folders, e.g. --teacher .*run/export$"):
        train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "student"), preset="tiny", max_steps=1,
                          teacher=str(run), threads=1))


def test_a_pairs_file_without_pairs_is_told_apart_from_one_outside_the_vocabulary(tiny_data, tmp_path):
    """A miner that found no answer ranked above a product writes an empty file; it was refused as holding "no
    ranking pair in the model's vocabulary", which sent the user to check a vocabulary that was fine."""
    vocab = Vocab.load(tiny_data / "vocab.json")
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty.tsv holds no ranking pairs \(tools/rank_pairs.py found none to "
                                         r"keep: its summary beside it, empty.json, says how the products ranked\)"):
        load_pairs(empty, vocab)
    foreign = tmp_path / "foreign.tsv"
    foreign.write_text("CC=O\tCCO\t[Rh]\nCC=O\t[Rh]\tCCO\n")
    with pytest.raises(ValueError, match=r"foreign.tsv: each of its 2 ranking pairs holds a token outside the data's "
                                         r"15-token vocabulary \(the first: token '\[Rh\]'"):
        load_pairs(foreign, vocab)


def test_a_pairs_file_that_is_not_there_or_not_text_is_refused_naming_it_before_a_model_is_built(tiny_data, tmp_path,
                                                                                                 monkeypatch):
    """A binary file was "'utf-8' codec can't decode byte 0xff", naming neither file nor flag, once the model was
    built (and loaded from --init)."""
    import molspec_core.train as train_module

    monkeypatch.setattr(train_module, "Seq2SeqTransformer", lambda *a: pytest.fail("a model was built"))
    binary = tmp_path / "binary.tsv"
    binary.write_bytes(b"\xff\xfe\x00CC")
    for path, said in ((binary, r"binary\.tsv cannot be read to its end"), (tmp_path, "--pairs .*: not a file"),
                       (tmp_path / "none.tsv", r"--pairs .*none\.tsv: no such file")):
        with pytest.raises(ValueError, match=said):
            train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "run"), preset="tiny", pairs=str(path)))
    assert not (tmp_path / "run").exists()


def test_the_teacher_tv_is_one_minus_speculative_samplings_acceptance_at_its_temperature():
    torch.manual_seed(1)
    own, theirs = torch.randn(2, 3, 7), torch.randn(2, 3, 7)
    tgt_out = torch.tensor([[5, 6, EOS_ID], [5, EOS_ID, PAD_ID]])
    for temperature in (1.0, 0.5):
        p, q = torch.softmax(theirs / temperature, -1), torch.softmax(own / temperature, -1)
        accepted = sum(float(torch.minimum(p[i, j], q[i, j]).sum()) for i, j in [(0, 0), (0, 1), (0, 2), (1, 0),
                                                                                 (1, 1)])
        assert teacher_tv(own, theirs, tgt_out, temperature).item() == pytest.approx(5 - accepted, rel=1e-5)
    assert teacher_tv(theirs, theirs, tgt_out, 0.5).item() == pytest.approx(0.0, abs=1e-6)
    sharper = teacher_tv(own, theirs, tgt_out, 0.5).item()
    assert sharper != pytest.approx(teacher_tv(own, theirs, tgt_out, 1.0).item(), rel=1e-3)


def test_a_run_distilled_by_total_variation_raises_its_acceptance_at_that_temperature(tiny_data, tmp_path):
    common = dict(data=str(tiny_data), preset="tiny", max_tokens=64, warmup=1, val_greedy_rows=1, threads=1, lr=3e-3)
    train(TrainConfig(out=str(tmp_path / "teacher"), max_steps=40, **common))
    state = train(TrainConfig(out=str(tmp_path / "student"), max_steps=30, eval_every=10, seed=1,
                              teacher=str(tmp_path / "teacher" / "export"), teacher_weight=1.0, teacher_loss="tv",
                              teacher_temperature=0.5, **common))
    accepted = [entry["teacher_acceptance"] for entry in state["history"]]
    assert accepted[-1] > accepted[0] and all(entry["train_teacher_tv"] > 0 for entry in state["history"])
    with pytest.raises(ValueError, match="--teacher-temperature"):
        train(TrainConfig(data=str(tiny_data), out=str(tmp_path / "bad"), teacher_temperature=0.0, max_steps=1))
