"""Training for a fixed time budget: token-budget batches, AdamW, warm-up then decay to zero exactly
at `max_minutes`, bf16 autocast on CUDA, periodic validation, float16 exports and resume.

Any run ends annealed, however fast the machine: the learning rate follows the share of the time
budget spent (or of `max_steps` when there is no budget). The exception is `schedule="constant"`, which
holds the peak rate and is meant with `ema`: an exponential moving average of the weights, which the
exports then hold, stands in for the annealing (stochastic weight averaging, Izmailov et al. 2018).
Every `export_every_minutes` the weights are written as float16 safetensors shards of at most 15 MB (a
loadable model folder plus `train_state.json`) into `export_dir`, and `resume` continues a run from such
a folder. That is the whole contract with the GPU machine, whose only way back is its output folder
(tools/gpu_train.md). A run stopped by Ctrl-C or SIGTERM first saves out/last and an export of the steps it made,
so the same command continues from there.

This module imports no RDKit: the GPU machine has none, and the data arrive tokenized.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import random
import re
import shutil
import time
from collections.abc import Callable, Iterator
from typing import TypeVar
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from . import checkpoint
from .argtypes import Bounds, Choice, argtype, file_name
from .boundary import Terminated, guarded
from .data import check_can_write, load_arrays, read_lines
from .decoding.greedy import greedy
from .drafting import NullDrafter
from .model import PRESETS, ModelConfig, Seq2SeqTransformer, plan_free_attention, preset
from .threads import use_threads
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizeError, Vocab

log = logging.getLogger(__name__)
T = TypeVar("T")
# Logged once the data and any --init/--resume weights are read: from then on the run needs no file
# but its own run folder (tools/gpu_kit.py `start` waits for it before the next command may sync the tree).
INPUTS_READ = "inputs read: data and initial weights in memory"

REFERENCE_TOKENS = 4096  # the batch size the base learning rate below was tuned for on CPU
BASE_LR = 2e-3  # peak AdamW rate at REFERENCE_TOKENS per step (the old Noam runs peaked at 2e-3)
MAX_AUTO_LR = 4e-3  # the square-root rule is capped: a guess kept conservative until a GPU run measures it
AUTO_TOKENS = {"cuda": 32768, "cpu": 4096}  # tokens per optimizer step when max_tokens is 0
# Batch widths are padded up to a multiple of this when pad_to is 0. On CUDA every new batch shape may
# cost a kernel plan (GPU block 4 lost minutes to one per shape, tools/gpu_train.md): multiples of 8 cut
# the forward data's shapes per epoch from 977 to 130 for 4.5 points more padding (session 36). A CPU
# pays nothing per shape, so there the batches stay unpadded.
AUTO_PAD = {"cuda": 8, "cpu": 1}
PAIR_AT = ("sequence", "branch")  # where the ranking hinge compares a product and its negative (ranking_hinge)
# The learning rate's factor after warm-up, by schedule, at `done` (the share of the run spent).
SCHEDULES: dict[str, Callable[[float], float]] = {
    "cosine": lambda done: 0.5 * (1 + math.cos(math.pi * done)),
    "linear": lambda done: 1.0 - done,
    "constant": lambda done: 1.0,  # meant with --ema: the average stands in for the annealing
}


def option(default: T, text: str, rule: Bounds | Choice | None = None, names: str = "") -> T:
    """A TrainConfig field and its description, which is also its flag's --help; its `rule` (argtypes.Bounds or
    Choice) is the flag's argparse type and is checked again when `train` is called from Python. `names`: a path
    like the one the field takes (path_field)."""
    return dataclasses.field(default=default, metadata={"help": text, "rule": rule, **path_field(names)})


def path_field(example: str) -> dict[str, Callable[[str], str]]:
    """The metadata of a field that names a folder (or, `example` ending in a suffix, a file): argtypes.file_name,
    which refuses an empty or blank name. Given empty, `--out ""` (--out "$RUN" with RUN unset) wrote the run into
    the current folder, and `--init ""` or `--resume ""` started from random weights, without a word; an option
    left out stays "", none."""
    if not example:
        return {}
    return {"path": file_name(example, folder=not Path(example).suffix)}


AT_LEAST_0 = Bounds(low=0)  # a finite number, 0 or more: NaN and infinity are refused with the negatives
WHOLE_0, WHOLE_1 = Bounds(low=0, whole=True), Bounds(low=1, whole=True)
SHARE = Bounds(0, 1, high_open=True)  # label smoothing, an average's decay: [0, 1)
DEVICES = Choice(("auto", "cpu", "cuda", "mps"), pattern=r"cuda:\d+", shown=" or cuda:N")


@dataclass(frozen=True)
class TrainConfig:
    data: str = dataclasses.field(metadata={"help": "folder written by prepare-data", **path_field("data/forward")})
    out: str = dataclasses.field(metadata={"help": "run folder: out/last (full state, resumed when present), "
                                                   "out/best (best greedy exact match), out/export",
                                           **path_field("runs/forward")})
    preset: str = option("forward", f"model shape: one of {', '.join(PRESETS)}", Choice(tuple(PRESETS)))
    max_minutes: float = option(0.0, "the time budget: the learning rate reaches zero exactly here (0: at max-steps); "
                                     "a resumed run's whole budget, its minutes trained included", AT_LEAST_0)
    max_steps: int = option(100_000, "optimizer steps at most", WHOLE_1)
    schedule: str = option("cosine", "after warm-up: cosine | linear (decay to zero at the end) | constant",
                           Choice(tuple(SCHEDULES)))
    lr: float = option(0.0, f"peak learning rate (0: {BASE_LR:g} scaled by sqrt(tokens per step / "
                                  f"{REFERENCE_TOKENS}), capped at {MAX_AUTO_LR:g})", AT_LEAST_0)
    warmup: int = option(500, "linear warm-up steps", WHOLE_0)
    max_tokens: int = option(0, f"tokens (source + target, padded) per batch (0: by device, {AUTO_TOKENS})", WHOLE_0)
    pad_to: int = option(0, f"pad source and decoder-input widths to a multiple of this (0: by device, {AUTO_PAD})",
                         WHOLE_0)
    accum: int = option(1, "batches per optimizer step", WHOLE_1)
    weight_decay: float = option(0.01, "AdamW weight decay", AT_LEAST_0)
    label_smoothing: float = option(0.1, "label smoothing of the cross-entropy, in [0, 1)", SHARE)
    focal: float = option(0.0, "focal loss (Lin et al. 2017; 0: off): the exponent gamma; each target token's "
                               "cross-entropy is weighted by (1 - p) ** gamma, p the probability the model gives the "
                               "recorded token, so the tokens it already gets right carry less of each step",
                          AT_LEAST_0)
    layer_decay: float = option(1.0, "layer-wise rate decay (Howard & Ruder 2018; 1: off): the output end (the "
                                     "decoder's last layer and norm, and the shared embedding, which is also the "
                                     "output projection) learns at the full rate, each layer below at this times the "
                                     "one above, the decoder's first layer above the encoder's last",
                                Bounds(0, 1, low_open=True))
    dropout: float = option(-1.0, "dropout while training (-1: the preset's, 0.1 for the paper shapes)",
                            Bounds(0, 1, high_open=True, also=(-1.0,)))
    freeze_encoder: bool = option(False, "train the decoder alone: the encoder keeps its weights and runs as at "
                                         "inference (no gradients, no dropout); the shared embedding learns from "
                                         "the decoder's side")
    compile: bool = option(False, "torch.compile the training forward pass")
    eval_every: int = option(1000, "validate every this many steps (and at the end)", WHOLE_1)
    val_greedy_rows: int = option(200, "validation rows decoded greedily for exact match (slow on CPU: a subset; 0: "
                                       "none, and no out/best, which that match chooses)", WHOLE_0)
    export_every_minutes: float = option(5.0, "write float16 shards and the full state this often (0: after every "
                                              "step)", AT_LEAST_0)
    log_every_seconds: float = option(60.0, "a 'speed' log line this often: steps and tokens a second since the last",
                                      AT_LEAST_0)
    export_dir: str = option("", "float16 shards + train_state.json ('': out/export); an existing folder must be "
                                 "empty or an export train wrote (each export replaces it whole)",
                             names="runs/forward/export")
    resume: str = option("", "continue from an export folder (weights and counters; fresh optimizer moments)",
                         names="runs/forward/export")
    init: str = option("", "start a new schedule from a model folder's weights (e.g. models/forward)",
                       names="models/forward")
    pairs: str = option("", "ranking pairs (tools/rank_pairs.py mine: source, recorded product and an answer the "
                             "model ranked above it, tab-separated); each step adds a hinge (--pair-at) so that the "
                             "product outscores the answer by --pair-margin", names="pairs.tsv")
    pair_weight: float = option(0.5, "weight of the ranking hinge (a mean over the step's pairs) beside the "
                                     "cross-entropy (a mean over the step's target tokens)", AT_LEAST_0)
    pair_margin: float = option(1.0, "nats by which the product should outscore a negative where --pair-at compares",
                                AT_LEAST_0)
    pair_rows: int = option(16, "ranking pairs per optimizer step", WHOLE_1)
    pair_at: str = option("sequence", "where the hinge compares product and negative: sequence (their summed "
                                      "log-probabilities, beam search's score; CPU run 69) or branch (the two "
                                      "tokens where they first part)", Choice(PAIR_AT))
    rdrop: float = option(0.0, "R-Drop (Liang et al. 2021; 0: off): each batch runs twice under independent "
                               "dropout, and the loss adds this weight times half the symmetric KL between the "
                               "two passes' token distributions to their mean cross-entropy; a step costs twice",
                          AT_LEAST_0)
    sam: float = option(0.0, "sharpness-aware minimization (Foret et al. 2021; 0: off): the radius rho; each step "
                             "takes its gradient where the weights, moved rho along their gradient's direction, "
                             "lose most, and applies it to the weights where they were (a --pairs hinge is taken at "
                             "the weights themselves); a step costs twice", AT_LEAST_0)
    ema: float = option(0.0, "decay per optimizer step of a moving average of the weights (0: off); when on, "
                             "validation, out/best and the exports hold the average, out/last keeps both", SHARE)
    teacher: str = option("", "distil from a model folder with this data's vocabulary (Hinton et al. 2015; e.g. "
                              "models/forward for its draft model): each target token's loss is --teacher-weight "
                              "times KL(teacher || model) of their next-token distributions plus the rest of the "
                              "weight times the cross-entropy; the teacher runs without dropout under bfloat16 "
                              "autocast, and validation adds the KL and how often the two models' top tokens agree",
                     names="models/forward")
    teacher_weight: float = option(0.5, "--teacher-loss's share of each token's loss with --teacher, in [0, 1]",
                                   Bounds(0, 1))
    teacher_loss: str = option("kl", "what --teacher's share of the loss measures: kl, KL(teacher || model), or tv, "
                                     "the total variation distance of the two next-token distributions at "
                                     "--teacher-temperature, which is one minus the share of a draft model's tokens "
                                     "speculative sampling at that temperature accepts (DistillSpec, Zhou et al. 2023)",
                               Choice(("kl", "tv")))
    teacher_temperature: float = option(1.0, "the temperature both models' distributions are taken at for --teacher's "
                                             "loss and validation's acceptance (0.5: the sampling default)",
                                        Bounds(low=0, low_open=True))
    seed: int = option(0, "random seed (weights, batch order, dropout)", Bounds(0, 2**63 - 1, whole=True))
    device: str = option("auto", "auto, cpu, cuda, cuda:N or mps", DEVICES)
    threads: int = option(0, "CPU threads (0: one fewer than the CPUs, at least 1; molspec_core/threads.py)",
                          WHOLE_0)


def check_config(cfg: TrainConfig) -> None:
    """Every option's rule (the flags' argparse types), for a TrainConfig built in Python: a NaN rate or budget
    trained and wrote NaN weights over every export, --eval-every 0 failed at the first step."""
    for spec in dataclasses.fields(TrainConfig):
        path = spec.metadata.get("path")
        if path is not None and (spec.default is dataclasses.MISSING or getattr(cfg, spec.name) != ""):
            try:  # a path given: it names one (an optional one left "" is none)
                path(getattr(cfg, spec.name))
            except argparse.ArgumentTypeError as exc:
                raise ValueError(f"--{spec.name.replace('_', '-')} {exc}") from None
        rule = spec.metadata.get("rule")
        if rule is not None:
            try:
                rule.check(getattr(cfg, spec.name))
            except ValueError as exc:
                raise ValueError(f"--{spec.name.replace('_', '-')} {exc}") from None
    if cfg.teacher and cfg.rdrop:
        raise ValueError("--teacher and --rdrop cannot be combined: each adds its own KL term to the cross-entropy")
    if cfg.pairs and not cfg.pair_weight > 0:
        raise ValueError(f"ranking pairs need --pair-weight > 0 and --pair-margin >= 0, not "
                         f"{cfg.pair_weight} and {cfg.pair_margin}")


def layer_groups(model: Seq2SeqTransformer, decay: float) -> list[dict]:
    """AdamW parameter groups for --layer-decay, each with its "scale" of the step's learning rate: the
    output end at 1, then decay ** k for the k-th layer below it (decoder layers from the last, then the
    encoder's norm with its last layer, down to its first). Every parameter is in exactly one group."""
    decoder, encoder = list(model.decoder)[::-1], list(model.encoder)[::-1]
    top = [model.embed, model.decoder_norm, decoder[0]] if decoder else [model.embed, model.decoder_norm]
    stack: list[list[torch.nn.Module]] = [top, *([layer] for layer in decoder[1:])]
    stack += [[model.encoder_norm, *encoder[:1]], *([layer] for layer in encoder[1:])]
    groups = [{"params": [p for module in modules for p in module.parameters()], "scale": decay ** k}
              for k, modules in enumerate(stack)]
    if sum(len(g["params"]) for g in groups) != len(list(model.parameters())):
        raise ValueError("layer_groups: the model has parameters outside its embedding, layers and norms")
    return groups


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available on this machine")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA devices")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name}: MPS is not available on this machine")
    return device


def tokens_per_batch(cfg: TrainConfig, device: torch.device) -> int:
    return cfg.max_tokens or AUTO_TOKENS.get(device.type, AUTO_TOKENS["cpu"])


def pad_multiple(cfg: TrainConfig, device: torch.device) -> int:
    return cfg.pad_to or AUTO_PAD.get(device.type, AUTO_PAD["cpu"])


def peak_lr(cfg: TrainConfig, device: torch.device) -> float:
    if cfg.lr:
        return cfg.lr
    scaled = BASE_LR * math.sqrt(tokens_per_batch(cfg, device) * cfg.accum / REFERENCE_TOKENS)
    return min(scaled, MAX_AUTO_LR)


def progress(cfg: TrainConfig, step: int, seconds: float) -> float:
    """Share of the run spent: of the time budget if there is one, else of max_steps."""
    if cfg.max_minutes:
        return min(seconds / (cfg.max_minutes * 60), 1.0)
    return min(step / cfg.max_steps, 1.0)


def at_end(max_minutes: float, max_steps: int, step: int, seconds: float) -> bool:
    """Whether a run has reached its end: its time budget spent (where it has one) or its max_steps made. The
    trainer stops there; a save or export whose counters say so is the run's last (one cut short by Ctrl-C is not)."""
    return step >= max_steps or bool(max_minutes) and seconds >= max_minutes * 60


def learning_rate(cfg: TrainConfig, peak: float, step: int, seconds: float, warm_from: int = 0) -> float:
    """Linear warm-up over `warmup` steps from step `warm_from`, then cosine or linear decay to zero at
    the end of the run (or the peak held, for a constant schedule). A run resumed from an export starts
    with fresh optimizer moments, so it warms up again from its resume step (to the rate its schedule has
    reached) instead of jumping there."""
    warm = min(1.0, (step - warm_from) / cfg.warmup) if cfg.warmup else 1.0
    done = progress(cfg, step, seconds)
    return peak * warm * SCHEDULES[cfg.schedule](done)


def padded_widths(src_len: int, tgt_len: int, multiple: int) -> tuple[int, int]:
    """A row's source and target widths once padded: the source to a multiple, the target so that the
    decoder's input and output (the target less one token) are."""
    return -(-src_len // multiple) * multiple, -(-(tgt_len - 1) // multiple) * multiple + 1


def row_widths(src: list[np.ndarray], tgt: list[np.ndarray], multiple: int) -> list[tuple[int, int]]:
    """Every row's padded (source, target) widths: computed once a run, not once an epoch (0.8 s for
    forward's 1.18 M pairs)."""
    return [padded_widths(len(s), len(t), multiple) for s, t in zip(src, tgt)]


def token_batches(widths: list[tuple[int, int]], max_tokens: int, rng: random.Random) -> list[list[int]]:
    """Index batches of similar length whose padded size (rows x (source + target width), the widths of
    `row_widths`, as `collate` pads them) stays within max_tokens; a row longer than that alone makes a batch."""
    order = sorted(range(len(widths)), key=lambda i: (*widths[i], rng.random()))
    batches, batch, wide_src, wide_tgt = [], [], 0, 0
    for i in order:
        s_w, t_w = max(wide_src, widths[i][0]), max(wide_tgt, widths[i][1])
        if batch and (s_w + t_w) * (len(batch) + 1) > max_tokens:
            batches.append(batch)
            batch, (s_w, t_w) = [], widths[i]
        batch.append(i)
        wide_src, wide_tgt = s_w, t_w
    if batch:
        batches.append(batch)
    rng.shuffle(batches)
    return batches


def collate(rows: list[int], src: list[np.ndarray], tgt: list[np.ndarray], device: torch.device, multiple: int = 1):
    """A batch's padded (src, tgt_in, tgt_out) on `device`, widths padded as `padded_widths` says. On CUDA
    through pinned memory: a copy from pageable memory waits for the GPU's queue to drain, and the host
    could not run a step ahead."""
    def pad(seqs: list[np.ndarray], width: int) -> torch.Tensor:
        out = np.full((len(seqs), width), PAD_ID, dtype=np.int64)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = s
        batch = torch.from_numpy(out)
        return batch.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else batch

    s_w, t_w = padded_widths(max(len(src[i]) for i in rows), max(len(tgt[i]) for i in rows), multiple)
    src_b = pad([src[i] for i in rows], s_w)
    tgt_b = pad([tgt[i] for i in rows], t_w)
    return src_b, tgt_b[:, :-1], tgt_b[:, 1:]


@torch.no_grad()
def validate(model: Seq2SeqTransformer, src: list[np.ndarray], tgt: list[np.ndarray], device: torch.device,
             greedy_rows: int, use_amp: bool, multiple: int = 1) -> dict:
    model.eval()
    correct = total = 0
    for rows in token_batches(row_widths(src, tgt, multiple), 16384, random.Random(0)):
        s, t_in, t_out = collate(rows, src, tgt, device, multiple)
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


Pairs = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]  # sources, products, negatives (token ids)


def encode_pairs(lines: list[tuple[str, str, str]], vocab: Vocab) -> Pairs:
    """Ranking pairs (source, product, negative) as token ids, the product and negative with bos and eos."""
    def target(smiles: str) -> np.ndarray:
        return np.array([BOS_ID, *vocab.encode(smiles), EOS_ID], dtype=np.uint8)

    return ([np.array(vocab.encode(src), dtype=np.uint8) for src, _, _ in lines],
            [target(pos) for _, pos, _ in lines], [target(neg) for _, _, neg in lines])


def load_pairs(path: Path, vocab: Vocab, max_positions: int | None = None) -> Pairs:
    """A pairs file (tools/rank_pairs.py) as token ids. A line holding a token outside the vocabulary is left out,
    as `prepare-data` leaves out such targets. Read before any work: a file that is not there or not text was an
    error naming neither the file nor the flag ("'utf-8' codec can't decode byte 0xff"), after the model loaded; a
    line longer than the model's `max_positions` failed at the step that drew it ("sequence longer than the model's
    1024 positions", naming no file)."""
    if not path.is_file():
        raise ValueError(f"--pairs {path}: " + ("not a file" if path.exists() else "no such file")
                         + " (tools/rank_pairs.py mine writes one)")
    lines = read_lines(path)
    kept: list[tuple[str, str, str]] = []
    first_left_out = ""
    for number, line in enumerate(lines, 1):
        fields = tuple(line.split("\t"))
        if len(fields) != 3:
            raise ValueError(f"{path}:{number}: a ranking pair is source, product and negative, tab-separated")
        try:
            lengths = [len(vocab.encode(smiles)) for smiles in fields]
        except TokenizeError as exc:
            first_left_out = first_left_out or str(exc)
            continue
        # a product or negative is read with its bos, as a training target is (check_lengths)
        for side, length in zip(("source", "product", "negative"), (lengths[0], lengths[1] + 1, lengths[2] + 1)):
            if max_positions is not None and length > max_positions:
                raise ValueError(f"{path}:{number}: its {side} takes {length} positions, but the model reads at most "
                                 f"{max_positions}; leave such pairs out")
        kept.append(fields)
    if not lines:  # was "no ranking pair in the model's vocabulary", which sent the user to a vocabulary that was fine
        raise ValueError(f"{path} holds no ranking pairs (tools/rank_pairs.py found none to keep: its summary beside "
                         f"it, {path.with_suffix('.json').name}, says how the products ranked), so there is nothing "
                         "for --pairs to teach; leave it out")
    if not kept:
        raise ValueError(f"{path}: each of its {len(lines)} ranking pairs holds a token outside the data's "
                         f"{len(vocab)}-token vocabulary (the first: {first_left_out}); mine them on this data's "
                         "vocabulary")
    return encode_pairs(kept, vocab)


def sequence_log_probs(logits: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """Each row's summed token log-probability, eos included (beam search's score of a finished answer)."""
    picked = torch.log_softmax(logits.float(), -1).gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)
    return (picked * (tgt_out != PAD_ID)).sum(-1)


def pair_gaps(logits_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], rows: list[int], pairs: Pairs,
              device: torch.device, multiple: int = 1, at: str = "sequence") -> tuple[torch.Tensor, int]:
    """Per row, by how much the product outscores its negative, and the tokens read. at="sequence": score(product)
    - score(negative), both read in one call. at="branch": the two tokens' log-probability difference where product
    and negative first part (their prefix is shared, so one distribution holds both), read from the products alone:
    a hinge on it moves the choice that decides the ranking and nothing after it."""
    if at not in PAIR_AT:
        raise ValueError(f"pair_at must be one of {', '.join(PAIR_AT)}, not {at!r}")
    sources, products, negatives = pairs
    n = len(rows)
    src = [sources[i] for i in rows] * 2
    tgt = [products[i] for i in rows] + [negatives[i] for i in rows]
    s, t_in, t_out = collate(list(range(len(src))), src, tgt, device, multiple)
    if at == "sequence":
        scores = sequence_log_probs(logits_of(s, t_in), t_out)
        return scores[:n] - scores[n:], s.numel() + t_in.numel()
    pos, neg = t_out[:n], t_out[n:]
    part = (pos != neg).int().argmax(-1)  # the first position they differ at (distinct sequences, each with eos)
    log_probs = torch.log_softmax(logits_of(s[:n], t_in[:n]).float(), -1)
    index = torch.arange(n, device=log_probs.device)
    gap = log_probs[index, part, pos[index, part]] - log_probs[index, part, neg[index, part]]
    return gap, s[:n].numel() + t_in[:n].numel()


def ranking_hinge(logits_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], rows: list[int], pairs: Pairs,
                  margin: float, device: torch.device, multiple: int = 1,
                  at: str = "sequence") -> tuple[torch.Tensor, int]:
    """The mean over `rows` of max(0, margin - gap) (`pair_gaps`), and the tokens read."""
    gap, read = pair_gaps(logits_of, rows, pairs, device, multiple, at)
    return torch.relu(margin - gap).mean(), read


def summed_cross_entropy(logits: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float,
                         focal: float = 0.0) -> torch.Tensor:
    """The cross-entropy of logits (..., V) against tgt_out, in float32, summed over the target tokens (padding
    left out). With `focal` (gamma) above 0 each token's term is weighted by (1 - p) ** gamma, p the softmax
    probability of its target; the weight is part of the graph, as in Lin et al. 2017."""
    flat, targets = logits.float().reshape(-1, logits.shape[-1]), tgt_out.reshape(-1)
    if not focal:
        return F.cross_entropy(flat, targets, ignore_index=PAD_ID, label_smoothing=label_smoothing, reduction="sum")
    per_token = F.cross_entropy(flat, targets, ignore_index=PAD_ID, label_smoothing=label_smoothing,
                                reduction="none")  # 0 at padding
    p = torch.log_softmax(flat, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1).exp()
    return ((1 - p).pow(focal) * per_token).sum()


def load_teacher(folder: Path, vocab: Vocab, device: torch.device, task: str) -> Seq2SeqTransformer:
    """A model folder's weights as a frozen teacher (no dropout, no gradients) for `vocab`'s token ids, of the
    data's `task` (a forward teacher on retro data in one vocabulary taught the other direction without a word)."""
    refuse_run_folder("--teacher", folder)
    teacher, teacher_vocab, config = checkpoint.load(folder, device)
    theirs = config.get("task")
    if theirs is not None and theirs != task:  # as check_start refuses such --init weights
        raise ValueError(f"--teacher {folder} holds a {theirs} model, but the data hold {task} data (its stats.json): "
                         f"its distributions are of the other direction; give a {task} model")
    if teacher_vocab.tokens != vocab.tokens:
        raise ValueError(f"--teacher {folder} reads another vocabulary than the data's ({len(teacher_vocab)} tokens "
                         f"against {len(vocab)}, or the same in another order): its distributions would name other "
                         "tokens; give a model trained on this data's vocabulary")
    teacher.train(False)
    teacher.requires_grad_(False)
    return teacher


def teacher_logits(teacher: Seq2SeqTransformer, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    """The teacher's logits for a batch, under bfloat16 autocast where the device has it (on this project's
    CPU host, with AMX, 0.20 s against 0.46 s in float32 for a 4,096-token batch of the forward model)."""
    amp = src.device.type in ("cpu", "cuda")
    with torch.no_grad(), torch.autocast(src.device.type, dtype=torch.bfloat16, enabled=amp):
        return teacher(src, tgt_in)


def teacher_kl(logits: torch.Tensor, teacher: torch.Tensor, tgt_out: torch.Tensor,
               temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher || model) of the next-token distributions at `temperature`, in float32, summed over the target
    tokens (padding left out): what distillation adds to the loss."""
    own = torch.log_softmax(logits.float() / temperature, -1)
    theirs = torch.log_softmax(teacher.float() / temperature, -1)
    per_token = (theirs.exp() * (theirs - own)).sum(-1)
    return (per_token * (tgt_out != PAD_ID)).sum()


def teacher_tv(logits: torch.Tensor, teacher: torch.Tensor, tgt_out: torch.Tensor,
               temperature: float = 1.0) -> torch.Tensor:
    """The total variation distance of the teacher's and the model's next-token distributions at `temperature`,
    in float32, summed over the target tokens (padding left out). Where the model drafts for the teacher, one
    minus it is the chance speculative sampling at that temperature accepts the drafted token."""
    own = torch.softmax(logits.float() / temperature, -1)
    theirs = torch.softmax(teacher.float() / temperature, -1)
    per_token = 0.5 * (theirs - own).abs().sum(-1)
    return (per_token * (tgt_out != PAD_ID)).sum()


def teacher_loss(cfg: TrainConfig, logits: torch.Tensor, teacher: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """--teacher's share of a batch's loss, summed over its target tokens: the KL or, with --teacher-loss tv,
    the total variation distance, both at --teacher-temperature."""
    divergence = teacher_tv if cfg.teacher_loss == "tv" else teacher_kl
    return divergence(logits, teacher, tgt_out, cfg.teacher_temperature)


def teacher_agreement(model: Seq2SeqTransformer, teacher: Seq2SeqTransformer, src: list[np.ndarray],
                      tgt: list[np.ndarray], device: torch.device, multiple: int = 1,
                      temperature: float = 1.0) -> dict:
    """On the validation rows, teacher-forced: the mean KL(teacher || model) a target token, how often the two
    models' most likely next tokens agree (what a greedy draft's acceptance follows), and the mean chance that
    speculative sampling at `temperature` accepts the model's drafted token (one minus teacher_tv)."""
    model.eval()
    kl = tv = agree = total = 0.0
    with torch.no_grad():
        for rows in token_batches(row_widths(src, tgt, multiple), 16384, random.Random(0)):
            s, t_in, t_out = collate(rows, src, tgt, device, multiple)
            own, theirs = model(s, t_in), teacher_logits(teacher, s, t_in)
            keep = t_out != PAD_ID
            kl += float(teacher_kl(own, theirs, t_out))
            tv += float(teacher_tv(own, theirs, t_out, temperature))
            agree += int(((own.argmax(-1) == theirs.argmax(-1)) & keep).sum())
            total += int(keep.sum())
    model.train()
    return {"teacher_kl": round(kl / max(total, 1), 4), "teacher_top1_agreement": round(agree / max(total, 1), 4),
            "teacher_acceptance": round(1 - tv / max(total, 1), 4)}


def rdrop_loss(logits_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], src: torch.Tensor,
               tgt_in: torch.Tensor, tgt_out: torch.Tensor,
               label_smoothing: float, focal: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """R-Drop's two terms, summed over the batch's target tokens: the two passes' mean cross-entropy, and
    the symmetric KL between their distributions, KL(p1||p2) + KL(p2||p1) per token. Both passes run as
    one call on the batch stacked twice, so their dropout masks are independent draws."""
    logits = logits_of(torch.cat([src, src]), torch.cat([tgt_in, tgt_in])).float()
    ce = summed_cross_entropy(logits, torch.cat([tgt_out, tgt_out]), label_smoothing, focal) / 2
    first, second = torch.log_softmax(logits, -1).chunk(2)
    per_token = ((first.exp() - second.exp()) * (first - second)).sum(-1)  # the two KLs summed
    return ce, (per_token * (tgt_out != PAD_ID)).sum()


@contextmanager
def sharpness_probe(params: list[torch.nn.Parameter], rho: float) -> Iterator[None]:
    """SAM's ascent step: inside the block each parameter is moved by rho * g / ||g||, g its present gradient
    and ||g|| the norm of all of them together (the worst nearby point, to first order); after it, by the
    same tensors back, so the optimizer steps from where the weights were. No value leaves the device."""
    with torch.no_grad():
        grads = [param.grad for param in params]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
        moves = [g * (rho / (norm + 1e-12)) for g in grads]
        torch._foreach_add_(params, moves)
    try:
        yield
    finally:
        with torch.no_grad():
            torch._foreach_sub_(params, moves)


def frozen_memory(model: Seq2SeqTransformer, src: torch.Tensor) -> torch.Tensor:
    """A frozen encoder's output, computed as inference computes it: no graph (so no backward pass through
    the encoder) and no dropout (in its layers or the source embedding), so the decoder trains on the memory
    it will read. Before session 65 the frozen encoder ran with dropout on (CPU runs 65-67)."""
    was_training = model.training
    model.train(False)
    try:
        with torch.no_grad():
            return model.encode_torch(src)
    finally:
        model.train(was_training)


def allocator_note(device: torch.device) -> str:
    """On CUDA, the caching allocator's device allocations and retries so far (each a slow call that
    waits for the GPU): what the speed log line adds to tell a slow start's causes apart."""
    if device.type != "cuda":
        return ""
    stats = torch.cuda.memory_stats(device)
    return (f"; cudaMalloc calls {stats.get('num_device_alloc', -1)}, "
            f"alloc retries {stats.get('num_alloc_retries', -1)}, "
            f"reserved {torch.cuda.memory_reserved(device) / 2**30:.1f} GiB")


class WeightAverage:
    """An exponential moving average of a model's parameters, kept in float32 beside them: after each
    optimizer step, average <- decay * average + (1 - decay) * weights. It starts from the weights it is
    given (trained ones under --init or --resume, where the average then leans on them for its first
    ~1 / (1 - decay) steps)."""

    def __init__(self, model: Seq2SeqTransformer, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"ema must lie strictly between 0 and 1, not {decay}")
        self.decay = decay
        self.names = [name for name, _ in model.named_parameters()]
        self.params = [p for _, p in model.named_parameters()]
        self.shadow = [p.detach().float().clone() for p in self.params]

    @torch.no_grad()
    def update(self) -> None:
        for a, p in zip(self.shadow, self.params):
            a.lerp_(p.detach().float(), 1.0 - self.decay)

    @contextmanager
    def applied(self) -> Iterator[None]:
        """The model holds the average inside the block and its own weights again after it."""
        with torch.no_grad():
            raw = [p.detach().clone() for p in self.params]
            for p, a in zip(self.params, self.shadow):
                p.copy_(a)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, r in zip(self.params, raw):
                    p.copy_(r)

    def tensors(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.shadow))

    def load(self, tensors: dict[str, torch.Tensor]) -> None:
        missing = [n for n in self.names if n not in tensors]
        if missing:
            raise ValueError(f"the saved weight average lacks {missing[:3]}")
        self.shadow = [tensors[n].to(a) for n, a in zip(self.names, self.shadow)]


# ---- run and export folders --------------------------------------------------------------------------------
# The shipped models (their weights, cards and calibrations): never a run's --out or --export-dir.
MODELS = checkpoint.MODELS_DIR
# The files a save (out/last) or an export writes, and nothing else: a folder holding only these, with
# train_state.json (written last), is one a run wrote and may replace whole.
RUN_FILE = re.compile(r"(config|vocab|train_state)\.json|(model|optimizer|ema)(-\d{5}-of-\d{5})?\.safetensors"
                      r"|(model|optimizer|ema)\.safetensors\.index\.json")
STATE_MARK = "train_state.json"
RUN_PARTS = ("export", "last", "best")  # the folders a run writes into its --out (export: unless --export-dir)


class TrainingDiverged(ValueError):
    """The loss or the weights are no longer finite: nothing more is written, so the last exports stand."""


def _within(path: Path, folder: Path) -> bool:
    """Whether `path` is `folder` or lies inside it (both resolved: links and `..` cannot hide it)."""
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def _overlap(a: Path, b: Path) -> bool:
    return _within(a, b) or _within(b, a)


def run_written(folder: Path) -> bool:
    """Whether a folder holds only the files a save or an export writes (complete or not)."""
    return folder.is_dir() and all(f.is_file() and not f.is_symlink() and RUN_FILE.fullmatch(f.name)
                                   for f in folder.iterdir())


def _tmp(folder: Path) -> Path:
    return folder.with_name(folder.name + ".tmp")


def _old(folder: Path) -> Path:
    return folder.with_name(folder.name + ".old")


def _replace_folder(tmp: Path, folder: Path) -> None:
    """Put the finished `tmp` in `folder`'s place: the old folder is renamed aside, `tmp` renamed in, and only
    then the old one deleted, so an interrupt at any point leaves a complete folder under one of the three
    names, which `recover_folder` puts back (files were unlinked before, and an interrupt at the rename left
    only last.tmp: the next run restarted from step 0)."""
    old = _old(folder)
    if old.exists():
        shutil.rmtree(old)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def _fresh(tmp: Path) -> Path:
    """An empty `tmp` to write a save into (a leftover of an interrupted save is the run's own: recover_folder
    checked it)."""
    if tmp.exists():
        shutil.rmtree(tmp)
    return tmp


def recover_folder(folder: Path) -> None:
    """After an interrupted save or export: put a complete folder back under `folder`'s name from its .tmp (a
    finished write, holding train_state.json) or .old (the one it replaced), and remove the leftovers. A
    leftover that holds files a run does not write is not touched: refused."""
    leftovers = [path for path in (_tmp(folder), _old(folder)) if path.exists() or path.is_symlink()]
    for path in leftovers:
        if not run_written(path):
            raise ValueError(f"{path} holds files a training run does not write; a run uses that name for its "
                             f"saves of {folder}: move it away")
    if folder.exists() or not leftovers:
        for path in leftovers:
            shutil.rmtree(path)
        return
    tmp, old = _tmp(folder), _old(folder)
    pick = tmp if (tmp / STATE_MARK).is_file() else old if (old / STATE_MARK).is_file() else None
    if pick is not None:
        pick.rename(folder)
        log.warning("%s was missing (a save was interrupted): recovered it from %s", folder, pick)
    else:
        log.warning("%s: an interrupted save left only an incomplete %s; it is removed", folder,
                    " and ".join(p.name for p in leftovers))
    for path in (tmp, old):
        if path.exists():
            shutil.rmtree(path)


def check_out(out: Path, data: Path, sources: list[tuple[str, Path]]) -> None:
    """Refuse a run folder that is a model folder, lies among the shipped models or in the data or an --init,
    --resume or --teacher folder: a run writes last/, best/ and export/ into it."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a run folder (e.g. runs/NAME)")
    if (out / "config.json").exists():
        raise ValueError(f"--out {out} is a model folder (it holds config.json); a run writes last/, best/ and "
                         "export/ into its --out: give a run folder (e.g. runs/NAME)")
    if _within(out, MODELS):
        raise ValueError(f"--out {out} lies in {MODELS}, the shipped models' folder; give a run folder "
                         "(e.g. runs/NAME)")
    for flag, folder in [("--data", data), *sources]:
        if _within(out, folder):
            raise ValueError(f"--out {out} lies in the {flag} folder {folder}; give a run folder of its own")


def check_export_dir(export_dir: Path, out: Path, data: Path, sources: list[tuple[str, Path]],
                     given: bool = True) -> None:
    """Each export replaces its folder whole: refuse one that holds anything an export did not write (a model
    folder lost its card and calibrations, the data folder was replaced by an export), or that is or holds the
    data, an --init, --resume or --teacher folder, the run's last/ or best/, or lies among the shipped models.
    `given`: --export-dir was given (else it is OUT/export, and the words name no flag the user never gave)."""
    named = f"--export-dir {export_dir}" if given else f"the export folder {export_dir} (OUT/export: no --export-dir)"
    if _within(export_dir, MODELS):
        raise ValueError(f"{named} lies in {MODELS}, the shipped models' folder; export elsewhere (the default is "
                         "OUT/export)")
    if _within(out, export_dir):
        raise ValueError(f"{named} is or holds the run folder {out}, and each export replaces its folder whole; give a "
                         "folder of its own (the default is OUT/export)")
    for flag, folder in [("the --data", data), *((f"the {flag}", path) for flag, path in sources),
                         ("the run's", out / "last"), ("the run's", out / "best")]:
        if _overlap(export_dir, folder) and not given:  # e.g. --resume OUT/export: its own run folder's export
            raise ValueError(f"{flag.removeprefix('the ')} {folder} is, holds or lies in {export_dir}, where this run "
                             f"writes its exports (OUT/export), each replacing the folder whole: give a new --out (or "
                             "an --export-dir elsewhere)")
        if _overlap(export_dir, folder):
            raise ValueError(f"{named} is, holds or lies in {flag} folder {folder}, and each export replaces its "
                             "folder whole; give a folder of its own (the default is OUT/export)")
    if export_dir.exists() and not export_dir.is_dir():
        raise ValueError(f"{named} is a file; give a folder")
    if export_dir.is_dir() and any(export_dir.iterdir()) and not (run_written(export_dir)
                                                                  and (export_dir / STATE_MARK).is_file()):
        others = sorted(f.name for f in export_dir.iterdir() if not RUN_FILE.fullmatch(f.name))
        held = f"holds {', '.join(others[:3])}{', ...' if len(others) > 3 else ''}" if others else f"lacks {STATE_MARK}"
        raise ValueError(f"{named} is not an export this trainer wrote (it {held}); each export replaces the folder "
                         "whole: give a new or empty folder")


# ---- where a run starts from -------------------------------------------------------------------------------

def read_json_file(path: Path, what: str, max_bytes: int = checkpoint.MAX_JSON_BYTES) -> dict:
    """A JSON object from `path`, any failure a ValueError that names the file."""
    if not path.is_file():
        raise ValueError(f"{path} is missing ({what})" if not path.exists() else f"{path} is not a file")
    value = checkpoint.read_json(path, max_bytes)
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object ({what}), not {type(value).__name__}")
    return value


STATE_FIELDS = {"step": int, "epoch": int, "batch_in_epoch": int, "tokens": int, "seconds": (int, float),
                "best_exact": (int, float), "history": list}


def read_state(folder: Path) -> dict:
    """A save's or an export's counters (train_state.json), checked."""
    path = folder / STATE_MARK
    state = read_json_file(path, "a training run's counters", max_bytes=64_000_000)
    for key, kind in STATE_FIELDS.items():
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise ValueError(f"{path}: not a training state ({key} is {value!r})")
        if kind is not list and not (math.isfinite(value) and (value >= 0 or key == "best_exact")):
            raise ValueError(f"{path}: not a training state ({key} is {value!r})")
    if "warm_from" in state and (isinstance(state["warm_from"], bool) or not isinstance(state["warm_from"], int)):
        raise ValueError(f"{path}: not a training state (warm_from is {state['warm_from']!r})")
    if not isinstance(state.get("batching", {}), dict):
        raise ValueError(f"{path}: not a training state (batching is {state['batching']!r})")
    return state


def run_saves(folder: Path) -> list[str]:
    """The saves a run wrote into `folder` as its --out (of RUN_PARTS), none where it is no run folder."""
    return [name for name in RUN_PARTS if (folder / name / STATE_MARK).is_file()]


def run_folder_refusal(folder: Path, role: str = "") -> str | None:
    """Why `folder`, given as a model (after `role`, an option such as --teacher), is a run folder (a train --out, not
    a model folder), naming the saves it holds and one to give, or None: it was "<run>/config.json is missing"."""
    if (folder / "config.json").exists():
        return None
    held = run_saves(folder)
    if not held:
        return None
    given = f"{role} " if role else ""
    return (f"{given}{folder} is a run folder (it holds {', '.join(held)}), not a model folder: give one of its "
            f"folders, e.g. {given}{folder / held[0]}")


def refuse_run_folder(role: str, folder: Path, more: str = "") -> None:
    """ValueError where a run folder is given as a model (run_folder_refusal), its words followed by `more`."""
    if (why := run_folder_refusal(folder, role)) is not None:
        raise ValueError(why + more)


def check_start(folder: Path, role: str, data: Path, vocab: Vocab, shape: ModelConfig, preset_name: str, task: str,
                same_vocab: bool, new_schedule: str = "") -> dict:
    """Refuse, in one line naming both folders, weights that cannot start this run: a model of the other task
    (its weights learned the other direction), of another shape than --preset builds, or (to resume, where the
    weights keep their token ids) with another vocabulary than the data's, which `new_schedule` says how to start
    from (default: --init FOLDER). Returns the folder's config.json."""
    if not folder.is_dir():
        raise ValueError(f"{role} {folder}: " + ("not a folder" if folder.exists() else "no such folder"))
    refuse_run_folder(role, folder, f", or --out {folder} to continue that run")
    models = [] if (folder / "config.json").exists() else sorted(
        sub.name for sub in folder.iterdir() if (sub / "config.json").is_file())
    if models:  # the GPU kit's `start --init models` (a folder of <task>/ model folders), given to train
        pick = (f"the one for these {task} data, {role} {folder / task}" if task in models else
                f"one of them, e.g. {role} {folder / models[0]}")
        raise ValueError(f"{role} {folder} holds model folders ({', '.join(models)}), not a model: give {pick}")
    config, saved = checkpoint.read_config(folder)
    theirs = config.get("task")
    if theirs is not None and theirs != task:
        raise ValueError(f"{role} {folder} holds a {theirs} model, but {data} holds {task} data (its stats.json): "
                         f"its weights learned the other direction; give a {task} model")
    if same_vocab:
        tokens = checkpoint.read_vocab(folder, saved).tokens
        if tokens != vocab.tokens:
            only = next((t for t in tokens if t not in vocab.index), None) or next(
                (t for t in vocab.tokens if t not in set(tokens)), None)
            detail = f"{len(tokens)} tokens against {len(vocab)}" + (f", {only!r} in one only" if only else
                                                                      ", in another order")
            raise ValueError(f"{folder / 'vocab.json'} differs from {data / 'vocab.json'} ({detail}): its weights "
                             "belong to another vocabulary, so they cannot be resumed on these data; start a new "
                             f"schedule from them with {new_schedule or f'--init {folder}'} (each token keeps its "
                             "embedding)")
    differ = [f"{name} {getattr(saved, name)} there, {getattr(shape, name)} here"
              for name in ("vocab_size", "n_encoder_layers", "n_decoder_layers", "d_model", "n_heads", "d_ff",
                           "max_positions") if getattr(saved, name) != getattr(shape, name)
              and (same_vocab or name != "vocab_size")]
    if differ:
        raise ValueError(f"{role} {folder} holds a model of another shape than --preset {preset_name} builds on "
                         f"{data} ({'; '.join(differ)}); give the --preset it was trained with")
    return config


def other_data_refusal(out: Path, data: Path, then: str) -> str:
    """Why the run in `out`, trained on the data `then` (its config's --data), cannot continue on `data`, whose
    stats.json differs from the one it recorded: other data, or the same folder prepared again (the advice was then
    to give the very --data it was given)."""
    last, anew = out / "last", f"a new --out with --init {out / 'export'} (a new schedule"
    if then and Path(then).resolve() == data.resolve():
        return (f"{out} holds a run ({last}) trained on {data} before it was prepared again (its stats.json differs "
                f"from the one the run recorded), so the run cannot continue on it; give {anew}) to train its "
                f"weights on {data} as it is now")
    same = f"--data {then}" if then else "the --data it was trained on"
    return (f"{out} holds a run ({last}) trained on {then or 'other data'}, and {data} holds other data (its "
            f"stats.json differs from the one the run recorded): give {same} to continue that run, or {anew}; "
            f"--resume: its counters too) to train its weights on {data}")


@dataclass
class Start:
    """Where a run's weights come from: `kind` "last" (this run folder's own save, optimizer included),
    "resume" (an export), "init" (a model folder) or "new"; `origin`, the init and resume the run's config
    records (what it was started from, whatever this call was given)."""
    kind: str
    folder: Path | None
    origin: dict
    trained_with: dict = dataclasses.field(default_factory=dict)  # the options the saved weights were trained with


def pick_start(cfg: TrainConfig, out: Path, data: Path, vocab: Vocab, shape: ModelConfig, stats: dict) -> Start:
    last = out / "last"
    check = {"data": data, "vocab": vocab, "shape": shape, "preset_name": cfg.preset, "task": stats["task"]}
    if (last / STATE_MARK).exists():
        role = "the run folder's saved state"
        config = check_start(last, role, same_vocab=False, **check)  # its task and shape; its vocabulary below
        recorded = config.get("train_config") if isinstance(config.get("train_config"), dict) else {}
        # Continued on other data, the run trained on both while its config named the last alone, its best/ kept the
        # best of two validation sets, and its place in an epoch counted another file's batches. The data's stats
        # (counts of what prepare-data read and wrote) tell it: the same data moved elsewhere still continues.
        # Checked before the vocabulary: data prepared again with another one were refused as weights of another
        # vocabulary, with --init OUT/last for advice, which continued OUT/last all the same and was refused again.
        trained_on = config.get("data_stats")
        if isinstance(trained_on, dict) and trained_on != stats:
            raise ValueError(other_data_refusal(out, data, str(recorded.get("data") or "")))
        check_start(last, role, same_vocab=True, new_schedule=f"a new --out and --init {out / 'export'}", **check)
        origin = {key: str(recorded.get(key) or "") for key in ("init", "resume")}
        for key, given in (("init", cfg.init), ("resume", cfg.resume)):
            if given and not (origin[key] and Path(given).resolve() == Path(origin[key]).resolve()):
                started = f"from --{key} {origin[key]}" if origin[key] else f"without --{key}"
                raise ValueError(f"{out} holds a run ({last}) started {started}: it continues from {last}, and "
                                 f"--{key} {given} would not be read; leave --{key} out to continue that run, or "
                                 f"give a new --out to start from {given}")
        return Start("last", last, origin, recorded)
    if cfg.init and cfg.resume:
        raise ValueError("give --init (a model's weights, a new schedule) or --resume (an export's weights and "
                         "counters), not both")
    if cfg.resume:
        config = check_start(Path(cfg.resume), "--resume", same_vocab=True, **check)
        if not (Path(cfg.resume) / STATE_MARK).is_file():  # a shipped or averaged model: "train_state.json is missing"
            raise ValueError(f"--resume {cfg.resume} holds no {STATE_MARK}: it is a model folder, not an export a "
                             f"run wrote, so there are no counters to continue; start a new schedule from its weights "
                             f"with --init {cfg.resume}")
        recorded = config.get("train_config") if isinstance(config.get("train_config"), dict) else {}
        return Start("resume", Path(cfg.resume), {"init": "", "resume": cfg.resume}, recorded)
    if cfg.init:
        check_start(Path(cfg.init), "--init", same_vocab=False, **check)
        return Start("init", Path(cfg.init), {"init": cfg.init, "resume": ""})
    return Start("new", None, {"init": "", "resume": ""})


def check_no_earlier_weights(out: Path, export_dir: Path, start: Start) -> None:
    """Refuse a run that starts anew (random or --init weights) in a run folder that holds an earlier run's export or
    best/ but not its last/ (an export unpacked from the GPU machine, a last/ deleted for its size): the run started
    from nothing, and its first export replaced the trained weights with those of its step 1 onwards, without a
    word. An --export-dir given elsewhere is replaced, as its help says (each export replaces it whole)."""
    written = [out / "best", *([export_dir] if export_dir == out / "export" else [])]  # what the run replaces here
    held = next((folder for folder in written if (folder / STATE_MARK).is_file()), None)
    if held is None:
        return
    step = read_state(held)["step"]
    begins = f"from --init {start.folder}" if start.kind == "init" else "from random weights"
    raise ValueError(f"{held} holds an earlier run's weights (step {step}), and {out / 'last'}, from which a run "
                     f"continues, is missing: this run would start {begins} and replace them; continue them with "
                     f"--resume {held} and a new --out, or move {held} away to start anew")


def check_budget(cfg: TrainConfig, folder: Path, state: dict) -> None:
    """A run resumed where its budget is already spent would make no step and write nothing: refuse, with the
    numbers (--max-minutes is the run's whole budget, the minutes trained included: tools/gpu_train.md)."""
    trained = state["seconds"] / 60
    if cfg.max_minutes and trained >= cfg.max_minutes:
        raise ValueError(f"nothing to train: {folder} has trained {trained:.2f} minutes, and --max-minutes "
                         f"{cfg.max_minutes:g} is the run's whole budget, the minutes trained included: give "
                         f"--max-minutes {trained:.2f} + the minutes to add (e.g. {math.ceil(trained) + 5} for "
                         "about 5 more)")
    if state["step"] >= cfg.max_steps:
        raise ValueError(f"nothing to train: {folder} is at step {state['step']}, and --max-steps {cfg.max_steps} "
                         "counts from the run's first step: give more")


def load_data(data: Path) -> tuple[Vocab, dict, tuple[list[np.ndarray], list[np.ndarray]],
                                   tuple[list[np.ndarray], list[np.ndarray]]]:
    """A prepare-data folder's vocabulary, stats and train and val arrays, each checked: any fault is one
    ValueError naming its file (they were KeyErrors, zip errors or an IndexError mid-run)."""
    if not data.is_dir():
        raise ValueError(f"--data {data}: " + ("not a folder" if data.exists() else "no such data folder")
                         + " (prepare-data writes one)")
    if (data / "config.json").exists() and not (data / "stats.json").exists():  # was "stats.json is missing"
        raise ValueError(f"--data {data} is a model folder (it holds config.json), not data: --data takes a folder "
                         "prepare-data wrote; to train from its weights, give it as --init")
    if saves := run_saves(data):  # was "vocab.json is missing"
        raise ValueError(f"--data {data} is a run folder (it holds {', '.join(saves)}), not data: --data takes a "
                         "folder prepare-data wrote")
    if not (data / "vocab.json").is_file():
        held = sorted(sub.name for sub in data.iterdir() if (sub / "stats.json").is_file() and sub.is_dir())
        if held:  # a folder of <task>/ data folders (as the GPU kit's `pack --data` reads), given to train
            raise ValueError(f"--data {data} holds data folders ({', '.join(held)}), not data: give one of them, "
                             f"e.g. --data {data / held[0]}")
        raise ValueError(f"{data / 'vocab.json'} is missing (--data takes a folder prepare-data wrote)")
    vocab = Vocab.load(data / "vocab.json")
    stats = read_json_file(data / "stats.json", "the data's stats, written by prepare-data")
    if stats.get("task") not in checkpoint.MODEL_TASKS:  # "Retro" trained, and no export of it loaded
        tasks = " or ".join(checkpoint.MODEL_TASKS)
        raise ValueError(f"{data / 'stats.json'}: expected the data's \"task\" ({tasks}), not {stats.get('task')!r}")
    train_rows = load_arrays(data / "train.npz", len(vocab))
    if not train_rows[0]:  # batch_stream looped over empty epochs until the process was killed
        raise ValueError(f"{data / 'train.npz'} holds no training pairs; prepare the data again")
    val_rows = load_arrays(data / "val.npz", len(vocab))
    for name, (sources, _) in (("train.npz", train_rows), ("val.npz", val_rows)):
        # the first validation's greedy decode refused it ("source i has no tokens"), after the run's minutes
        empty = [i for i, source in enumerate(sources) if not len(source)]
        if empty:
            raise ValueError(f"{data / name}: {len(empty)} of its {len(sources)} rows have an empty source (the first "
                             f"is row {empty[0] + 1}); every row needs a source to read: prepare the data again")
    if not val_rows[0]:
        log.warning("%s holds no validation pairs: validation will measure nothing", data / "val.npz")
    return vocab, stats, train_rows, val_rows


def check_lengths(data: Path, rows: dict[str, tuple[list[np.ndarray], list[np.ndarray]]], shape: ModelConfig,
                  preset_name: str) -> None:
    """Refuse, before any work, a row longer than the model's positions: the step that met it failed mid-run
    ("sequence longer than the model's 1024 positions", naming no file), minutes into an epoch. A target is
    stored with its bos and eos; the decoder reads it less its last token."""
    for name, (sources, targets) in rows.items():
        for side, seqs, extra in (("source", sources, 0), ("target", targets, 1)):
            if not seqs:
                continue
            longest = int(np.argmax([len(seq) for seq in seqs]))
            if len(seqs[longest]) - extra > shape.max_positions:
                raise ValueError(f"{data / name}: row {longest + 1}'s {side} takes {len(seqs[longest]) - extra} "
                                 f"positions, but --preset {preset_name} reads at most {shape.max_positions}; leave "
                                 "such rows out (prepare-data keeps training rows far shorter)")


def check_finite(model: Seq2SeqTransformer, loss: float, step: int, kept: str) -> None:
    """Before anything is written: the loss and every weight finite (one device read for the weights), else
    TrainingDiverged, so NaN weights never replace an export, out/best or out/last."""
    finite = bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all())
    if finite and math.isfinite(loss):
        return
    bad = "" if finite else next(name for name, p in model.named_parameters() if not torch.isfinite(p).all())
    raise TrainingDiverged(f"training diverged at step {step}: the loss is {loss:g}"
                           + (f" and weights are not finite (e.g. {bad})" if bad else "")
                           + f"; stopped without writing, so {kept}; try a lower --lr")


# ---- saves and exports ---------------------------------------------------------------------------------------

def init_from(model: Seq2SeqTransformer, vocab: Vocab, folder: Path) -> list[str]:
    """Copy a trained model's weights into `model`, whose vocabulary may differ (new data brought new
    tokens): each token's embedding row (also the tied output row) follows the token to its new id;
    tokens the trained model lacks keep their random rows, tokens the data lost are dropped.
    Returns the new tokens. Every other weight must have the same shape."""
    trained, trained_vocab, _ = checkpoint.load(folder)
    weights = trained.state_dict()
    own = model.state_dict()
    mismatched = [name for name, value in weights.items()
                  if name != "embed.weight" and name in own and value.shape != own[name].shape]
    if mismatched or trained.cfg.d_model != model.cfg.d_model:
        raise ValueError(f"--init {folder} holds a model of another shape (e.g. {(mismatched or ['d_model'])[0]}); "
                         "give the --preset it was trained with")
    shared = [t for t in vocab.tokens if t in trained_vocab.index]
    embed = own["embed.weight"].clone()
    embed[[vocab.index[t] for t in shared]] = weights["embed.weight"][[trained_vocab.index[t]
                                                                      for t in shared]].to(embed)
    weights["embed.weight"] = embed
    model.load_state_dict(weights)
    dropped = [t for t in trained_vocab.tokens if t not in vocab.index]
    if dropped:  # data prepared without --vocab: the fine-tuned model read fewer tokens, without a word
        log.warning("--init %s reads %d token%s the data's vocabulary lacks (%s%s): the model trained here will not "
                    "read %s (a query holding one is refused), nor pair with a draft model of %s's vocabulary; "
                    "prepare the data with --vocab %s to keep %s", folder, len(dropped), "s" * (len(dropped) > 1),
                    "e.g. " * (len(dropped) > 3), ", ".join(dropped[:3]), "them" if len(dropped) > 1 else "it",
                    folder, folder / "vocab.json", "them" if len(dropped) > 1 else "it")
    return [t for t in vocab.tokens if t not in trained_vocab.index]


def save_state(folder: Path, model: Seq2SeqTransformer, vocab: Vocab, optimizer: torch.optim.Optimizer,
               state: dict, meta: dict, average: WeightAverage | None = None) -> None:
    """Model checkpoint (raw weights) + optimizer moments + any weight average (safetensors) + counters
    (JSON, written last: its presence marks a complete save), written atomically."""
    tmp = _fresh(_tmp(folder))
    checkpoint.save(model, vocab, tmp, meta=meta)
    moments = {}
    for i, group in enumerate(optimizer.param_groups):
        for j, param in enumerate(group["params"]):
            for key, value in optimizer.state.get(param, {}).items():
                if torch.is_tensor(value):
                    moments[f"{i}.{j}.{key}"] = value
    checkpoint.save_tensors(moments, tmp, stem="optimizer")
    if average is not None:
        checkpoint.save_tensors(average.tensors(), tmp, stem="ema")
    (tmp / STATE_MARK).write_text(json.dumps(state, indent=2))
    _replace_folder(tmp, folder)


def export(folder: Path, model: Seq2SeqTransformer, vocab: Vocab, state: dict, meta: dict) -> None:
    """A loadable float16 model folder (shards of at most 15 MB) plus the run's counters, atomically."""
    tmp = _fresh(_tmp(folder))
    checkpoint.save(model, vocab, tmp, meta={**meta, "step": state["step"]}, dtype=torch.float16)
    (tmp / STATE_MARK).write_text(json.dumps(state, indent=2))
    _replace_folder(tmp, folder)


def save_best(folder: Path, model: Seq2SeqTransformer, vocab: Vocab, state: dict, meta: dict) -> None:
    """The best validation's weights (float32) plus the run's counters, atomically as export's (written in
    place, a kill mid-write left best/ without weights: the run's best model lost)."""
    tmp = _fresh(_tmp(folder))
    checkpoint.save(model, vocab, tmp, meta=meta)
    (tmp / STATE_MARK).write_text(json.dumps(state, indent=2))
    _replace_folder(tmp, folder)


def saved_steps(saves: tuple[Path, ...]) -> str:
    """What a run's saves hold, for a message: "out/last holds step 5 and out/export step 5"."""
    held = []
    for save in saves:
        try:
            held.append((save, read_state(save)["step"]))
        except ValueError:  # missing or unreadable: it holds nothing to continue from
            continue
    return " and ".join(f"{save} {'holds ' if i == 0 else ''}step {step}" for i, (save, step) in enumerate(held))


@contextmanager
def writing(folder: Path, step: int, last: Path, export_dir: Path) -> Iterator[None]:
    """A save, export or best/ that cannot be written (a full disk, a folder made read-only) stops the run with an
    OSError naming the folder and what the run's saves hold (it said only "No space left on device"); the unfinished
    .tmp is removed, as it holds the room the disk lacks (the next run's recover_folder removed it, too late)."""
    try:
        yield
    except OSError as exc:
        tmp = _tmp(folder)
        if tmp.is_dir() and not (tmp / STATE_MARK).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
        held = saved_steps((last, export_dir))
        kept = (f"{held}: the same command continues from {last} once {folder} can be written"
                if (last / STATE_MARK).is_file() else held or "nothing of this run is saved to continue from yet")
        raise OSError(exc.errno, f"{exc.strerror or exc}: {folder} could not be written at step {step}; {kept}") \
            from None


def moment_keys(model: Seq2SeqTransformer, layer_decay: float) -> dict[str, str]:
    """Each parameter's name -> the "group.index" its optimizer moments are saved under (save_state) by a run with
    this --layer-decay: 1 puts every parameter in one group, any other value groups them by layer (layer_groups)."""
    names = {id(param): name for name, param in model.named_parameters()}
    groups = ([list(model.parameters())] if layer_decay == 1 else
              [group["params"] for group in layer_groups(model, layer_decay)])
    return {names[id(param)]: f"{i}.{j}" for i, params in enumerate(groups) for j, param in enumerate(params)}


def load_state(folder: Path, model: Seq2SeqTransformer, optimizer: torch.optim.Optimizer | None,
               saved_layer_decay: float = 1.0) -> dict:
    """Weights (and optimizer moments, if the folder has them and an optimizer is given) + counters. The moments
    find their parameters by name through the grouping of the run that saved them (`saved_layer_decay`): a run
    continued with --layer-decay switched on or off gave each parameter another's moments (a RuntimeError at the
    first step where their shapes differ, wrong moments where they agree)."""
    state = read_state(folder)
    trained, _, _ = checkpoint.load(folder)
    model.load_state_dict(trained.state_dict())
    has_moments = any(folder.glob("optimizer*.safetensors"))
    if optimizer is not None and has_moments:
        moments = checkpoint.load_tensors(folder, stem="optimizer")
        saved = moment_keys(model, saved_layer_decay)
        names = {id(param): name for name, param in model.named_parameters()}
        for group in optimizer.param_groups:
            for param in group["params"]:
                prefix = saved[names[id(param)]] + "."
                entry = {k[len(prefix):]: v.to(param.device) for k, v in moments.items() if k.startswith(prefix)}
                if entry:
                    optimizer.state[param] = entry
    return state


def batch_stream(cfg: TrainConfig, src: list[np.ndarray], tgt: list[np.ndarray], max_tokens: int,
                 state: dict, multiple: int = 1) -> Iterator[list[int]]:
    """Batches forever, epoch after epoch, starting where `state` says; keeps state's position current."""
    if not src:  # every epoch would be empty, and the loop below would never yield
        raise ValueError("no training pairs to batch")
    widths = row_widths(src, tgt, multiple)
    while True:
        batches = token_batches(widths, max_tokens, random.Random(cfg.seed + state["epoch"]))
        for b in range(state.get("batch_in_epoch", 0), len(batches)):
            state["batch_in_epoch"] = b + 1
            yield batches[b]
        state["epoch"] += 1
        state["batch_in_epoch"] = 0


def new_state() -> dict:
    return {"step": 0, "epoch": 0, "batch_in_epoch": 0, "seconds": 0.0, "tokens": 0, "best_exact": -1.0, "history": []}


BATCH_ORDER = ("seed", "max_tokens", "pad_to")  # what an epoch's batches and their order are made from


def batching(cfg: TrainConfig, max_tokens: int, multiple: int) -> dict[str, int]:
    """How a run reads its data, as it ran (max_tokens and pad_to after their device defaults): the BATCH_ORDER
    fields make each epoch's batches (token_batches), accum takes that many of them a step."""
    return {"seed": cfg.seed, "max_tokens": max_tokens, "pad_to": multiple, "accum": cfg.accum}


def note_batching(state: dict, now: dict[str, int]) -> None:
    """Record `now` as the state's batching; a run continued or resumed with another one goes on (a smaller
    --max-tokens after running out of memory is tools/gpu_train.md's advice), but says so in the log and keeps
    each change in the state's "batching_changes" (the step, the batching it was and is): its place in the epoch
    was counted in the batches of the old one, so the rest of that epoch is drawn in another order."""
    was = state.get("batching")
    state["batching"] = now
    if was is None or was == now:  # a new run, or one saved before its batching was recorded
        return
    state.setdefault("batching_changes", []).append({"step": state["step"], "was": was, "now": now})
    changed = [key for key in now if was.get(key) != now[key]]
    text = ", ".join(f"--{key.replace('_', '-')} {was.get(key)} -> {now[key]}" for key in changed)
    if any(key in BATCH_ORDER for key in changed) and state["batch_in_epoch"]:
        effect = (f"epoch {state['epoch']}'s batches are made anew, and the run goes on from its batch "
                  f"{state['batch_in_epoch'] + 1} of them, so some of the epoch's rows come twice and others not "
                  "until the next epoch")
    elif any(key in BATCH_ORDER for key in changed):
        effect = f"epoch {state['epoch']}, which it starts, is batched so (no row comes twice)"
    else:
        effect = f"each step reads {now['accum']} batches, not {was.get('accum')}; their order is unchanged"
    log.warning("continued with other batching than it was trained with (%s): %s (train_state.json's "
                "batching_changes keeps it)", text, effect)


# The options that shape what a step learns (beside the batching, note_batching's): a run continued or resumed with
# others goes on with them, as it was asked, but says so (the flags left out after a Ctrl-C went on at the trainer's
# own --lr and --label-smoothing without a word, and config.json records the last call's options alone).
RECIPE = ("lr", "warmup", "schedule", "weight_decay", "label_smoothing", "focal", "layer_decay", "dropout",
          "freeze_encoder", "rdrop", "sam", "ema", "pairs", "pair_weight", "pair_margin", "pair_rows", "pair_at",
          "teacher", "teacher_weight", "teacher_loss", "teacher_temperature")


def note_options(state: dict, trained_with: dict, cfg: TrainConfig, folder: Path) -> None:
    """Log, and keep in the state's "option_changes" (the step, the options it was and is), each RECIPE option that
    differs from those the weights in `folder` were trained with, and a switch between a time and a step budget
    (--max-minutes 0 after a timed run: the schedule then runs to --max-steps, and the rate climbs back)."""
    now = asdict(cfg)

    def same(key: str, was: object) -> bool:  # a file given by another path ("./p.tsv", "p.tsv") is the same
        if key in ("pairs", "teacher") and isinstance(was, str) and was and now[key]:
            return Path(was).resolve() == Path(now[key]).resolve()
        return was == now[key]

    changed = [key for key in RECIPE if key in trained_with and not same(key, trained_with[key])]
    if "max_minutes" in trained_with and bool(trained_with["max_minutes"]) != bool(cfg.max_minutes):
        changed.append("max_minutes")
    if not changed:
        return
    state.setdefault("option_changes", []).append({"step": state["step"], "was": {k: trained_with[k] for k in changed},
                                                   "now": {k: now[k] for k in changed}})
    text = ", ".join(f"--{key.replace('_', '-')} {trained_with[key]!r} -> {now[key]!r}" for key in changed)
    log.warning("continued from %s with other options than it was trained with (%s): it goes on with these "
                "(train_state.json's option_changes keeps it); give the ones it was trained with to continue it as "
                "it was", folder, text)


def train(cfg: TrainConfig) -> dict:
    """Check everything a run needs before any work or any write (options, data files, the run and export
    folders, the weights it starts from and their fit to the data), then train. A run that fails leaves no
    empty run folder behind."""
    check_config(cfg)
    device = pick_device(cfg.device)
    data, out = Path(cfg.data), Path(cfg.out)
    export_dir = Path(cfg.export_dir) if cfg.export_dir else out / "export"
    vocab, stats, train_rows, val_rows = load_data(data)
    # the folders the run reads weights from: never written into (an --export-dir that was the --teacher export was
    # replaced by the student's weights at its first export, the teacher's lost)
    sources = [(flag, Path(value)) for flag, value in (("--resume", cfg.resume), ("--init", cfg.init),
                                                       ("--teacher", cfg.teacher)) if value]
    check_out(out, data, sources)
    check_export_dir(export_dir, out, data, sources, given=bool(cfg.export_dir))
    check_can_write("--out", out, out)
    check_can_write("--export-dir", export_dir, export_dir.parent)  # written beside its folder, then renamed in
    for folder in (out / "last", out / "best", export_dir):
        recover_folder(folder)
    shape = preset(cfg.preset, len(vocab), **({"dropout": cfg.dropout} if cfg.dropout != -1.0 else {}))
    check_lengths(data, {"train.npz": train_rows, "val.npz": val_rows}, shape, cfg.preset)
    start = pick_start(cfg, out, data, vocab, shape, stats)
    if start.kind in ("new", "init"):
        check_no_earlier_weights(out, export_dir, start)
    if start.kind in ("last", "resume"):
        check_budget(cfg, start.folder, read_state(start.folder))
    if start.kind == "last" and (cfg.init or cfg.resume):
        log.info("%s holds this run's saved state: it continues from there (--init/--resume started it)", out / "last")
    plan_free_attention(device)
    use_threads(cfg.threads)
    teacher = load_teacher(Path(cfg.teacher), vocab, device, stats["task"]) if cfg.teacher else None
    pairs = load_pairs(Path(cfg.pairs), vocab, shape.max_positions) if cfg.pairs else None
    torch.manual_seed(cfg.seed)
    created = not out.exists()
    try:
        return _fit(cfg, device, out, export_dir, vocab, stats, train_rows, val_rows, shape, start, teacher, pairs)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):  # a failed run leaves no empty run folder
            out.rmdir()
        raise


def _fit(cfg: TrainConfig, device: torch.device, out: Path, export_dir: Path, vocab: Vocab, stats: dict,
         train_rows: tuple[list[np.ndarray], list[np.ndarray]], val_rows: tuple[list[np.ndarray], list[np.ndarray]],
         shape: ModelConfig, start: Start, teacher: Seq2SeqTransformer | None = None,
         pairs: Pairs | None = None) -> dict:
    (train_src, train_tgt), (val_src, val_tgt) = train_rows, val_rows
    model = Seq2SeqTransformer(shape).to(device)
    fused = device.type == "cuda"
    params = model.parameters() if cfg.layer_decay == 1 else layer_groups(model, cfg.layer_decay)
    optimizer = torch.optim.AdamW(params, lr=0.0, betas=(0.9, 0.998), eps=1e-8,
                                  weight_decay=cfg.weight_decay, fused=fused)
    use_amp = device.type == "cuda"
    # the config records what the run started from, also when it continues from out/last without the flags
    meta = {"task": stats["task"], "preset": cfg.preset, "train_config": {**asdict(cfg), **start.origin},
            "data_stats": stats}
    state = new_state()
    if start.kind == "last":
        decay = start.trained_with.get("layer_decay", 1.0)  # a run from before --layer-decay: one group
        state = load_state(start.folder, model, optimizer, decay if isinstance(decay, (int, float)) else 1.0)
        log.info("resumed from %s at step %d", start.folder, state["step"])
    elif start.kind == "resume":
        state = load_state(start.folder, model, None)
        state["warm_from"] = state["step"]
        log.info("resumed from export %s at step %d (fresh optimizer moments: warm-up again over %d steps)",
                 start.folder, state["step"], cfg.warmup)
    elif start.kind == "init":
        added = init_from(model, vocab, start.folder)
        log.info("initialized from %s; %d tokens new to it start from random embeddings", start.folder, len(added))
    if pairs is not None:
        log.info("ranking pairs: %d from %s, %d a step, weight %g, margin %g at the %s", len(pairs[0]), cfg.pairs,
                 cfg.pair_rows, cfg.pair_weight, cfg.pair_margin, cfg.pair_at)
    if teacher is not None:
        log.info("distilling from %s (%.2fM parameters): the %s's weight %g at temperature %g, the cross-entropy's %g",
                 cfg.teacher, sum(p.numel() for p in teacher.parameters()) / 1e6, cfg.teacher_loss.upper(),
                 cfg.teacher_weight, cfg.teacher_temperature, 1 - cfg.teacher_weight)
    average = WeightAverage(model, cfg.ema) if cfg.ema else None
    if average is not None and start.kind == "last" and any(start.folder.glob("ema*.safetensors")):
        average.load(checkpoint.load_tensors(start.folder, stem="ema"))
    averaged = average.applied if average is not None else nullcontext
    max_tokens, peak, multiple = tokens_per_batch(cfg, device), peak_lr(cfg, device), pad_multiple(cfg, device)
    note_batching(state, batching(cfg, max_tokens, multiple))
    if start.folder is not None and start.kind in ("last", "resume"):
        note_options(state, start.trained_with, cfg, start.folder)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("model %s: %.2fM parameters on %s; %d training pairs; %d tokens x %d per step, widths padded to "
             "multiples of %d; peak lr %.2e", cfg.preset, n_params / 1e6, device, len(train_src), max_tokens,
             cfg.accum, multiple, peak)
    if cfg.max_minutes:
        log.info("budget: %.2f minutes in all, %.2f of them trained before (or %d steps at most)", cfg.max_minutes,
                 state["seconds"] / 60, cfg.max_steps)
    else:
        log.info("budget: %d steps in all, %d of them made before (no time budget)", cfg.max_steps, state["step"])
    log.info(INPUTS_READ)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.freeze_encoder:  # AdamW skips parameters without gradients: no update, no weight decay
        for param in [*model.encoder.parameters(), *model.encoder_norm.parameters()]:
            param.requires_grad_(False)

    def logits_of(src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        if not cfg.freeze_encoder:
            return model(src, tgt_in)
        return model.decode_full(tgt_in, frozen_memory(model, src), src != PAD_ID)

    forward = torch.compile(logits_of, dynamic=True) if cfg.compile else logits_of

    def passes(micro: list[tuple[torch.Tensor, ...]], n_target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's batches, forward and backward, gradients summed into .grad: their summed cross-entropy
        and R-Drop's or the teacher's KL (detached), and the tokens they read counted into the state."""
        loss_sum = torch.zeros((), device=device)
        kl_sum = torch.zeros((), device=device)
        for src, tgt_in, tgt_out in micro:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
                if cfg.rdrop:
                    loss, kl = rdrop_loss(forward, src, tgt_in, tgt_out, cfg.label_smoothing, cfg.focal)
                    objective = loss + cfg.rdrop / 2 * kl
                else:
                    logits = forward(src, tgt_in)
                    loss, kl = summed_cross_entropy(logits, tgt_out, cfg.label_smoothing, cfg.focal), None
                    objective = loss
                    if teacher is not None:
                        kl = teacher_loss(cfg, logits, teacher_logits(teacher, src, tgt_in), tgt_out)
                        objective = (1 - cfg.teacher_weight) * loss + cfg.teacher_weight * kl
            (objective / n_target).backward()
            if kl is not None:
                kl_sum += kl.detach()
            loss_sum += loss.detach()
            state["tokens"] += (1 + (cfg.rdrop > 0)) * (src.numel() + tgt_in.numel())
        return loss_sum, kl_sum

    model.train()
    kept = f"{export_dir}, {out / 'best'} and {out / 'last'} keep what they held"
    started = time.time() - state["seconds"]
    last_save = last_export = time.time()
    last_log, steps_then, tokens_then = time.time(), state["step"], state["tokens"]
    # Batch shapes met so far: on the H100 the first minutes ran 4-5x slower than later ones (sessions
    # 21 and 30), fast from about the end of the first epoch, so a cost paid once per new shape is a
    # suspect; the speed line says how many of its steps met a new one.
    shapes_seen: set[tuple[int, ...]] = set()
    new_shapes = 0
    hinge_sum, hinge_steps = torch.zeros((), device=device), 0  # the ranking hinge since the last validation
    # Under a time budget the run ends with it, mostly long before --max-steps: a bar towards them read "1%" and an
    # end 46 minutes away for a 30-second run, so it counts steps alone (the "budget" line gives the minutes). Its
    # lines start "train:", which tools/gpu_kit.py reads as the bar's.
    bar = tqdm(total=None if cfg.max_minutes else cfg.max_steps, initial=state["step"], desc="train", unit="step",
               dynamic_ncols=True)
    batches = batch_stream(cfg, train_src, train_tgt, max_tokens, state, multiple)
    done = at_end(cfg.max_minutes, cfg.max_steps, state["step"], state["seconds"])
    saved_step = state["step"]  # the step out/last holds
    place = ("epoch", "batch_in_epoch", "tokens")  # where the steps made have read to: an interrupt goes back here
    made = {key: state[key] for key in place}
    try:
        while not done:
            lr = learning_rate(cfg, peak, state["step"] + 1, state["seconds"], state.get("warm_from", 0))
            for group in optimizer.param_groups:
                group["lr"] = lr * group.get("scale", 1.0)
            # No host sync in a step (no .item(), int() or bool() of a device value): on a GPU the host
            # then queues the next step's kernels while this one runs. The loss is read only when logged.
            micro = [collate(next(batches), train_src, train_tgt, device, multiple) for _ in range(cfg.accum)]
            for src, tgt_in, _ in micro:  # shapes are host metadata: reading them is no device sync
                if (shape := (*src.shape, tgt_in.shape[1])) not in shapes_seen:
                    shapes_seen.add(shape)
                    new_shapes += 1
            n_target = sum((t_out != PAD_ID).sum() for _, _, t_out in micro)
            optimizer.zero_grad(set_to_none=True)
            loss_sum, kl_sum = passes(micro, n_target)  # logged: the loss where the weights are
            if cfg.sam:  # the same batches again at the probed point; their gradient is the one applied
                with sharpness_probe([p for p in model.parameters() if p.grad is not None], cfg.sam):
                    optimizer.zero_grad(set_to_none=True)
                    passes(micro, n_target)
            if pairs is not None:  # drawn by step, so a resumed run draws what it would have
                rows = random.Random(cfg.seed * 1_000_003 + state["step"]).sample(range(len(pairs[0])),
                                                                                 min(cfg.pair_rows, len(pairs[0])))
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
                    hinge, read = ranking_hinge(forward, rows, pairs, cfg.pair_margin, device, multiple, cfg.pair_at)
                (cfg.pair_weight * hinge).backward()
                hinge_sum += hinge.detach()
                hinge_steps += 1
                state["tokens"] += read
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if average is not None:
                average.update()
            state["step"] += 1
            made = {key: state[key] for key in place}
            state["seconds"] = time.time() - started
            bar.update(1)
            if time.time() - last_log >= cfg.log_every_seconds:  # greppable, unlike the bar (GPU runs' start)
                spent = time.time() - last_log
                log.info("speed at %.1f min: %.1f steps/s, %.0f tokens/s; batch shapes new %d (%d seen)%s",
                         state["seconds"] / 60, (state["step"] - steps_then) / spent,
                         (state["tokens"] - tokens_then) / spent,
                         new_shapes, len(shapes_seen), allocator_note(device))
                last_log, steps_then, tokens_then, new_shapes = time.time(), state["step"], state["tokens"], 0
                bar.set_postfix(loss=f"{float(loss_sum / n_target):.3f}", lr=f"{lr:.2e}", epoch=state["epoch"])
            done = at_end(cfg.max_minutes, cfg.max_steps, state["step"], state["seconds"])
            validating = state["step"] % cfg.eval_every == 0 or done
            exporting = done or time.time() - last_export > cfg.export_every_minutes * 60
            saving = done or time.time() - last_save > cfg.export_every_minutes * 60
            if validating or exporting or saving:  # NaN weights once went into every export, best/ and last/
                check_finite(model, float(loss_sum / n_target), state["step"], kept)
            if validating:
                with averaged():
                    metrics = validate(model, val_src, val_tgt, device, cfg.val_greedy_rows, use_amp, multiple)
                metrics.update(step=state["step"], minutes=round(state["seconds"] / 60, 1), lr=lr,
                               loss=round(float(loss_sum / n_target), 4), tokens=state["tokens"])
                if cfg.rdrop:  # the last step's, as "loss" is
                    metrics["rdrop_kl"] = round(float(kl_sum / n_target), 4)
                # the last step's KL (or TV) a token, then the validation rows' (teacher_agreement)
                if teacher is not None:
                    metrics[f"train_teacher_{cfg.teacher_loss}"] = round(float(kl_sum / n_target), 4)
                    with averaged():
                        metrics.update(teacher_agreement(model, teacher, val_src, val_tgt, device, multiple,
                                                         cfg.teacher_temperature))
                if hinge_steps:
                    metrics["pair_hinge"] = round(float(hinge_sum) / hinge_steps, 4)
                    hinge_sum, hinge_steps = torch.zeros((), device=device), 0
                state["history"].append(metrics)
                log.info("validation %s", metrics)
                # without greedy rows (--val-greedy-rows 0, or no validation rows) nothing measures a best: every
                # exact match read 0, and best/ kept the first validation's weights under its name
                if metrics["greedy_rows"] and metrics["greedy_exact_match"] > state["best_exact"]:
                    # the best is counted once best/ holds it: raised first, a Ctrl-C during the write kept the
                    # score in out/last and best/ the older weights, which no validation short of it replaced
                    best = {**state, "best_exact": metrics["greedy_exact_match"]}
                    with averaged(), writing(out / "best", state["step"], out / "last", export_dir):
                        save_best(out / "best", model, vocab, best,
                                  {**meta, "step": state["step"], "validation": metrics})
                    state["best_exact"] = best["best_exact"]
                if not done:  # a validation that ran past the time budget ends the run here, with its weights: the
                    # run made one step more at a rate from before it and validated again (twice 30 s on a GPU)
                    state["seconds"] = time.time() - started
                    done = at_end(cfg.max_minutes, cfg.max_steps, state["step"], state["seconds"])
                    exporting, saving = exporting or done, saving or done
            if exporting:
                with averaged(), writing(export_dir, state["step"], out / "last", export_dir):
                    export(export_dir, model, vocab, state, meta)
                last_export = time.time()
            if saving:
                with writing(out / "last", state["step"], out / "last", export_dir):
                    save_state(out / "last", model, vocab, optimizer, state, meta, average)
                last_save, saved_step = time.time(), state["step"]
    except (KeyboardInterrupt, Terminated):
        # Ctrl-C or SIGTERM: the steps since the last save are kept (they were lost, the whole run when it came
        # before the first save), so the same command continues from here; a second Ctrl-C stops the save, and the
        # next run recovers the folders as after any interrupted save
        bar.close()
        state.update(made)  # a step cut short drew its batches and learned nothing from them: they come again
        if state["step"] > saved_step:
            state["seconds"] = time.time() - started
            try:
                check_finite(model, 0.0, state["step"], kept)
            except TrainingDiverged as exc:
                log.warning("interrupted: %s", exc)
            else:
                log.warning("interrupted at step %d: saving %s and %s (the same command continues from %s)",
                            state["step"], out / "last", export_dir, out / "last")
                for folder in (out / "last", out / "best", export_dir):  # a save the interrupt cut short
                    recover_folder(folder)
                with writing(out / "last", state["step"], out / "last", export_dir):
                    save_state(out / "last", model, vocab, optimizer, state, meta, average)
                with averaged(), writing(export_dir, state["step"], out / "last", export_dir):
                    export(export_dir, model, vocab, state, meta)
        raise
    bar.close()
    return state


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig field, with its help (shared by `molspec train` and `python -m molspec_core.train`);
    a field's rule is its flag's type, so a value it refuses is a usage error before anything is read."""
    for spec in dataclasses.fields(TrainConfig):
        flag, text = "--" + spec.name.replace("_", "-"), spec.metadata["help"]
        path = spec.metadata.get("path")
        if spec.default is dataclasses.MISSING:  # required fields: data, out
            parser.add_argument(flag, required=True, type=path, help=text)
        elif path is not None:  # left out: None, the field's "" (a string default would be refused as given)
            parser.add_argument(flag, type=path, help=text)
        elif isinstance(spec.default, bool):  # --compile / --no-compile
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=spec.default, help=text)
        else:
            rule = spec.metadata.get("rule")  # --threads -1 was a RuntimeError traceback from torch
            parser.add_argument(flag, type=type(spec.default) if rule is None else argtype(rule),
                                default=spec.default, help=f"{text} (default {spec.default})")


def run(args: argparse.Namespace) -> int:
    given = {spec.name: getattr(args, spec.name) for spec in dataclasses.fields(TrainConfig)}
    state = train(TrainConfig(**{name: value for name, value in given.items() if value is not None}))
    print(json.dumps(state["history"][-1:], indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m molspec_core.train`: the entry the GPU machine uses, since it has no RDKit and the
    full CLI imports the service, which needs it. Its boundary is the molspec command line's (boundary.py): an
    expected failure is one `error:` line and exit 2, Ctrl-C `interrupted` and 130, SIGTERM `terminated` and 143."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m molspec_core.train", description="train a model on prepared data")
    add_arguments(parser)
    args = parser.parse_args(argv)
    return guarded(lambda: run(args), "try a smaller --max-tokens")


if __name__ == "__main__":
    raise SystemExit(main())
