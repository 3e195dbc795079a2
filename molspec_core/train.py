"""Training: token-budget batches, label smoothing, warm-up + inverse-sqrt schedule, AMP on CUDA,
periodic validation (token accuracy, greedy exact match), resumable safetensors checkpoints."""
from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from . import checkpoint
from .data import load_arrays
from .decoding.greedy import greedy
from .drafting import NullDrafter
from .model import Seq2SeqTransformer, preset
from .tokenizer import EOS_ID, PAD_ID, Vocab

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainConfig:
    data: str  # folder written by prepare-data
    out: str  # run folder: checkpoints land in out/last and out/best
    preset: str = "forward"
    max_tokens: int = 8192  # tokens (src + tgt, padded) per batch
    lr: float = 2.0  # Noam scale: lr_t = lr * d^-0.5 * min(t^-0.5, t * warmup^-1.5)
    warmup: int = 4000
    label_smoothing: float = 0.1
    max_steps: int = 100_000
    max_minutes: float = 0.0  # stop after this wall time (0 = no limit)
    eval_every: int = 1000
    save_every_minutes: float = 5.0
    val_greedy_rows: int = 200  # greedy exact match is slow on CPU: a fixed subset
    seed: int = 0
    device: str = "auto"
    threads: int = 0  # torch CPU threads (0 = torch's default)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def token_batches(src: list[np.ndarray], tgt: list[np.ndarray], max_tokens: int, rng: random.Random) -> list[list[int]]:
    """Index batches of similar length whose padded size stays within max_tokens."""
    order = sorted(range(len(src)), key=lambda i: (len(src[i]), len(tgt[i]), rng.random()))
    batches, batch, widest = [], [], 0
    for i in order:
        width = max(widest, len(src[i]) + len(tgt[i]))
        if batch and width * (len(batch) + 1) > max_tokens:
            batches.append(batch)
            batch, width = [], len(src[i]) + len(tgt[i])
        batch.append(i)
        widest = width
    if batch:
        batches.append(batch)
    rng.shuffle(batches)
    return batches


def collate(rows: list[int], src: list[np.ndarray], tgt: list[np.ndarray], device: torch.device):
    def pad(seqs: list[np.ndarray]) -> torch.Tensor:
        out = np.full((len(seqs), max(len(s) for s in seqs)), PAD_ID, dtype=np.int64)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = s
        return torch.from_numpy(out).to(device, non_blocking=True)

    src_b = pad([src[i] for i in rows])
    tgt_b = pad([tgt[i] for i in rows])
    return src_b, tgt_b[:, :-1], tgt_b[:, 1:]


def noam(step: int, cfg: TrainConfig, d_model: int) -> float:
    step = max(step, 1)
    return cfg.lr * d_model ** -0.5 * min(step ** -0.5, step * cfg.warmup ** -1.5)


@torch.no_grad()
def validate(model: Seq2SeqTransformer, src: list[np.ndarray], tgt: list[np.ndarray], device: torch.device,
             greedy_rows: int, use_amp: bool) -> dict:
    model.eval()
    correct = total = 0
    for rows in token_batches(src, tgt, 16384, random.Random(0)):
        s, t_in, t_out = collate(rows, src, tgt, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            pred = model(s, t_in).argmax(-1)
        keep = t_out != PAD_ID
        correct += int(((pred == t_out) & keep).sum())
        total += int(keep.sum())
    exact = 0
    n = min(greedy_rows, len(src))
    for i in range(0, n, 32):
        chunk = range(i, min(i + 32, n))
        results = greedy(model, [src[j].tolist() for j in chunk], NullDrafter)
        for j, res in zip(chunk, results):
            ref = tgt[j].tolist()[1:]
            ref = ref[: ref.index(EOS_ID)] if EOS_ID in ref else ref
            exact += list(res.hypotheses[0].tokens) == ref
    model.train()
    return {"token_accuracy": correct / max(total, 1), "greedy_exact_match": exact / max(n, 1), "greedy_rows": n}


def save_state(folder: Path, model: Seq2SeqTransformer, vocab: Vocab, optimizer: torch.optim.Optimizer,
               state: dict, meta: dict) -> None:
    """Model checkpoint + optimizer moments (safetensors) + counters (JSON), written atomically."""
    tmp = folder.with_name(folder.name + ".tmp")
    checkpoint.save(model, vocab, tmp, meta=meta)
    moments = {}
    for i, group in enumerate(optimizer.param_groups):
        for j, param in enumerate(group["params"]):
            for key, value in optimizer.state.get(param, {}).items():
                if torch.is_tensor(value):
                    moments[f"{i}.{j}.{key}"] = value
    checkpoint.save_tensors(moments, tmp, stem="optimizer")
    (tmp / "train_state.json").write_text(json.dumps(state, indent=2))
    if folder.exists():
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    tmp.rename(folder)


def load_state(folder: Path, model: Seq2SeqTransformer, optimizer: torch.optim.Optimizer) -> dict:
    trained, _, _ = checkpoint.load(folder)
    model.load_state_dict(trained.state_dict())
    moments = checkpoint.load_tensors(folder, stem="optimizer")
    for i, group in enumerate(optimizer.param_groups):
        for j, param in enumerate(group["params"]):
            entry = {k.split(".", 2)[2]: v.to(param.device) for k, v in moments.items() if k.startswith(f"{i}.{j}.")}
            if entry:
                optimizer.state[param] = entry
    return json.loads((folder / "train_state.json").read_text())


def train(cfg: TrainConfig) -> dict:
    device = pick_device(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    data, out = Path(cfg.data), Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    vocab = Vocab.load(data / "vocab.json")
    stats = json.loads((data / "stats.json").read_text())
    train_src, train_tgt = load_arrays(data / "train.npz")
    val_src, val_tgt = load_arrays(data / "val.npz")
    model = Seq2SeqTransformer(preset(cfg.preset, len(vocab))).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.998), eps=1e-9)
    use_amp = device.type == "cuda"
    meta = {"task": stats["task"], "preset": cfg.preset, "train_config": asdict(cfg), "data_stats": stats}
    state = {"step": 0, "epoch": 0, "seconds": 0.0, "best_exact": -1.0, "history": []}
    if (out / "last" / "train_state.json").exists():
        state = load_state(out / "last", model, optimizer)
        log.info("resumed from step %d", state["step"])
    n_params = sum(p.numel() for p in model.parameters())
    log.info("model %s: %.2fM parameters on %s; %d training pairs", cfg.preset, n_params / 1e6, device, len(train_src))

    model.train()
    started = time.time() - state["seconds"]
    last_save = time.time()
    bar = tqdm(total=cfg.max_steps, initial=state["step"], desc="train", unit="step", dynamic_ncols=True)
    done = False
    while not done:
        batches = token_batches(train_src, train_tgt, cfg.max_tokens, random.Random(cfg.seed + state["epoch"]))
        skip = state.get("batch_in_epoch", 0)
        for b, rows in enumerate(batches):
            if b < skip:
                continue
            src, tgt_in, tgt_out = collate(rows, train_src, train_tgt, device)
            lr = noam(state["step"] + 1, cfg, model.cfg.d_model)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
                logits = model(src, tgt_in)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt_out.reshape(-1),
                                   ignore_index=PAD_ID, label_smoothing=cfg.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            state["step"] += 1
            state["batch_in_epoch"] = b + 1
            state["seconds"] = time.time() - started
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{lr:.2e}", epoch=state["epoch"])
            out_of_time = cfg.max_minutes and state["seconds"] > cfg.max_minutes * 60
            done = state["step"] >= cfg.max_steps or bool(out_of_time)
            if state["step"] % cfg.eval_every == 0 or done:
                metrics = validate(model, val_src, val_tgt, device, cfg.val_greedy_rows, use_amp)
                metrics.update(step=state["step"], minutes=round(state["seconds"] / 60, 1), loss=round(loss.item(), 4))
                state["history"].append(metrics)
                log.info("validation %s", metrics)
                if metrics["greedy_exact_match"] > state["best_exact"]:
                    state["best_exact"] = metrics["greedy_exact_match"]
                    checkpoint.save(model, vocab, out / "best", meta={**meta, "step": state["step"], "validation": metrics})
            if done or time.time() - last_save > cfg.save_every_minutes * 60:
                save_state(out / "last", model, vocab, optimizer, state, meta)
                last_save = time.time()
            if done:
                break
        else:
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
    bar.close()
    return state
