"""Checkpoints: config.json + safetensors shards (<= 15 MB each, with an index) + vocab.json.

Nothing is unpickled: weights load through safetensors, everything else is JSON. A model folder
that holds a pickle-bearing file (.pt, .pth, .bin, .pkl, .ckpt) is refused.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .model import ModelConfig, Seq2SeqTransformer
from .tokenizer import Vocab

MAX_SHARD_BYTES = 15 * 1000 * 1000  # per file, header included
HEADER_ROOM = 64 * 1024  # the safetensors JSON header (names, shapes, offsets) sits in the same file
INDEX_NAME = "model.safetensors.index.json"
PICKLE_SUFFIXES = {".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt"}


class CheckpointError(ValueError):
    """A model folder that is incomplete, malformed or unsafe to load."""


def save_tensors(tensors: dict[str, torch.Tensor], folder: Path, stem: str = "model") -> list[str]:
    """Write tensors as one safetensors file or shards of at most 15 MB with an index."""
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > MAX_SHARD_BYTES - HEADER_ROOM:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    if len(shards) == 1:
        names = [f"{stem}.safetensors"]
    else:
        names = [f"{stem}-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
        weight_map = {name: file for file, shard in zip(names, shards) for name in shard}
        (folder / f"{stem}.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}, indent=1))
    for file, shard in zip(names, shards):
        save_file(shard, str(folder / file))
    return names


def load_tensors(folder: Path, stem: str = "model") -> dict[str, torch.Tensor]:
    index = folder / f"{stem}.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (folder / f"{stem}.safetensors").exists():
        files = [f"{stem}.safetensors"]
    else:
        raise CheckpointError(f"{folder}: no {stem}.safetensors or {index.name}")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        if Path(file).name != file:
            raise CheckpointError(f"{index}: shard name {file!r} must be a plain file name")
        tensors.update(load_file(str(folder / file)))
    return tensors


def save(model: Seq2SeqTransformer, vocab: Vocab, folder: str | Path, *, meta: dict | None = None,
         dtype: torch.dtype = torch.float32) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("model*.safetensors*"):
        old.unlink()
    config = {"model": model.cfg.to_dict(), **(meta or {})}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    vocab.save(folder / "vocab.json")
    save_tensors({k: v.to(dtype) for k, v in model.state_dict().items()}, folder)


def check_safe(folder: Path) -> None:
    unsafe = [p.name for p in folder.iterdir() if p.suffix.lower() in PICKLE_SUFFIXES]
    if unsafe:
        raise CheckpointError(f"{folder}: refusing to load a folder with pickle-format files {unsafe}; "
                              "MolSpec models are safetensors + JSON only")


def load(folder: str | Path, device: str | torch.device = "cpu") -> tuple[Seq2SeqTransformer, Vocab, dict]:
    """(model in eval mode, vocab, config dict) from a model folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"model folder {folder} does not exist")
    check_safe(folder)
    try:
        config = json.loads((folder / "config.json").read_text())
        cfg = ModelConfig(**config["model"])
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{folder}/config.json is missing or malformed: {exc}") from exc
    vocab = Vocab.load(folder / "vocab.json")
    if len(vocab) != cfg.vocab_size:
        raise CheckpointError(f"{folder}: vocab.json has {len(vocab)} tokens, config says {cfg.vocab_size}")
    model = Seq2SeqTransformer(cfg)
    state = {k: v.float() for k, v in load_tensors(folder).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{folder}: weights do not match the config (missing {missing}, unexpected {unexpected})")
    return model.to(device).eval(), vocab, config
