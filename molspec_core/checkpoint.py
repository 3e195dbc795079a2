"""Checkpoints: config.json + safetensors shards (<= 15 MB each, with an index) + vocab.json.

Nothing is unpickled: weights load through safetensors, everything else is JSON. A model folder
that holds a pickle-bearing file (.pt, .pth, .bin, .pkl, .ckpt) is refused.

A model folder is as untrusted as a pickle: its config.json decides how much memory the model
takes. So `load` checks it before anything is allocated, in this order: the JSON files' sizes, the
config's sizes against the maxima below, vocab.json against the config, and every tensor's name,
shape and dtype in the safetensors headers (read without reading the tensors) against the shapes
the config implies. Only then is the model built and the weights read. Every failure is a
CheckpointError that names the file at fault.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save as safetensors_bytes

from .model import ModelConfig, Seq2SeqTransformer, plan_free_attention
from .tokenizer import SPECIALS, Vocab

MAX_SHARD_BYTES = 15 * 1000 * 1000  # per file, header included
HEADER_ROOM = 64 * 1024  # the safetensors JSON header (names, shapes, offsets) sits in the same file
INDEX_NAME = "model.safetensors.index.json"
PICKLE_SUFFIXES = {".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt"}
MODELS_DIR = Path(__file__).resolve().parent.parent / "models"  # the shipped models, by task name
DRAFT_DIR = "draft"  # a model's own draft model (a small model with its vocabulary), in a folder inside its own
ONE_RUNS_FACTS = ("step", "validation")  # config.json keys train writes of the weights of one run at one step
MODEL_TASKS = ("forward", "retro")  # the tasks whose answers are checked (config.json's task; forward when unset)
MAX_NAMED = 5  # model folders a refusal names, of a folder holding many

# Maxima for a model folder, far above the shipped models (forward: 4+4 layers, d_model 256,
# 8 heads, d_ff 2048, 232 tokens, 1024 positions, 11.6 M parameters) and the paper's retro model
# (6+6 layers), low enough that a hostile config.json cannot ask for gigabytes.
MAX_JSON_BYTES = 1_000_000  # config.json, vocab.json, the shard index; the shipped ones are under 11 kB
MAX_HEADER_BYTES = 1_000_000  # one safetensors header; the shipped ones are about 10 kB
MAX_VOCAB_TOKENS = 10_000
MAX_POSITIONS = 4096  # queries stop at 500 tokens (service.MAX_QUERY_TOKENS)
MAX_LAYERS = 24  # per stack, encoder and decoder alike
MAX_D_MODEL = 2048
MAX_HEADS = 64
MAX_D_FF = 16_384
MAX_PARAMETERS = 200_000_000  # 0.8 GB in float32
WEIGHT_DTYPES = {"F16", "BF16", "F32"}  # what `save` writes (float16 exports, float32 models), and bfloat16

# (lowest, highest) for each whole-number size in config.json's "model" object.
SIZE_LIMITS = {
    "vocab_size": (len(SPECIALS), MAX_VOCAB_TOKENS),
    "n_encoder_layers": (1, MAX_LAYERS),
    "n_decoder_layers": (1, MAX_LAYERS),
    "d_model": (2, MAX_D_MODEL),
    "n_heads": (1, MAX_HEADS),
    "d_ff": (1, MAX_D_FF),
    "max_positions": (2, MAX_POSITIONS),  # at least bos + one token
}


class CheckpointError(ValueError):
    """A model folder that is incomplete, malformed or unsafe to load."""


@dataclass(frozen=True)
class TensorHeader:
    """One tensor as a safetensors header describes it (its data is not read)."""
    file: Path
    shape: tuple[int, ...]
    dtype: str  # safetensors' names: "F16", "F32", "I64", ...


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
        # written by Python, as the JSON files are: save_file made every weight file readable by its owner alone
        # (0600), so a model trained or averaged by one user failed to load for another, its config readable
        (folder / file).write_bytes(safetensors_bytes(shard))
    return names


def _short(value: object) -> str:
    """A hostile value's repr, cut short enough for one error line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def refuse_run_folder(folder: Path) -> None:
    """Refuse a training run's folder (train's --out, which holds its saves: last/, export/, best/) given as a model,
    in train.run_folder_refusal's words: it was "<run>/config.json is missing"."""
    if (folder / "config.json").exists():  # a model folder, as every load's is: train is not imported for it
        return
    from .train import run_folder_refusal  # here: train imports this module

    if (why := run_folder_refusal(folder)) is not None:
        raise CheckpointError(why)


def refuse_folder_of_models(folder: Path) -> None:
    """Refuse a folder that holds model folders (the shipped models/, with forward/ and retro/), given as a model,
    naming them and one to give: it was "models/config.json is missing", though the models were one level down. A
    draft/ is not named: a model folder that lost its config.json still holds its draft model, not a model to give."""
    if (folder / "config.json").exists():
        return
    held = sorted(sub.name for sub in folder.iterdir() if sub.name != DRAFT_DIR and _holds_config(sub))
    if held:
        named = ", ".join(held[:MAX_NAMED]) + (f" and {len(held) - MAX_NAMED:,} more" if len(held) > MAX_NAMED else "")
        raise CheckpointError(f"{folder} holds model folders ({named}), not a model: give one of them, e.g. "
                              f"{folder / held[0]}")


def _holds_config(folder: Path) -> bool:
    """Whether `folder` holds a config.json; False where it cannot be looked into (another user's private folder
    beside the one given: /tmp's): its PermissionError stopped the load of the folder given."""
    try:
        return (folder / "config.json").is_file()
    except OSError:
        return False


def _require_file(path: Path) -> None:
    if not path.exists():
        raise CheckpointError(f"{path} is missing")
    if not path.is_file():  # a folder, a device, a pipe: nothing a checkpoint holds
        raise CheckpointError(f"{path} is not a regular file")


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES) -> object:
    """A small JSON file, read no further than max_bytes."""
    _require_file(path)
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise CheckpointError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise CheckpointError(f"{path} is larger than the {max_bytes:,}-byte limit for a checkpoint's JSON files")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, 5000-digit numbers, deep nesting
        raise CheckpointError(f"{path} is not valid JSON: {str(exc)[:200]}") from None


def read_config(folder: Path) -> tuple[dict, ModelConfig]:
    """config.json and its model sizes, each checked against SIZE_LIMITS."""
    path = folder / "config.json"
    config = read_json(path)
    sizes = config.get("model") if isinstance(config, dict) else None
    if not isinstance(sizes, dict):
        raise CheckpointError(f"{path}: expected an object with a \"model\" object of sizes")
    unknown = sorted(set(sizes) - set(ModelConfig.__dataclass_fields__))
    if unknown:
        raise CheckpointError(f"{path}: unknown model settings {_short(unknown)}")
    # A size left out took ModelConfig's default: n_heads, which no weight's shape shows, loaded a 4-head model as
    # 8 heads, and its answers changed without a word
    missing = [name for name in SIZE_LIMITS if name not in sizes]
    if missing:
        raise CheckpointError(f"{path}: model.{missing[0]} is missing; a model's config gives every one of "
                              f"{', '.join(SIZE_LIMITS)}")
    for name, (lowest, highest) in SIZE_LIMITS.items():
        value = sizes[name]
        # type() rather than isinstance: JSON's true is a bool, an int subclass; 4.0 is not a count
        if type(value) is not int or not lowest <= value <= highest:
            raise CheckpointError(f"{path}: model.{name} must be a whole number from {lowest} to {highest:,}, "
                                  f"not {_short(value)}")
    dropout = sizes.get("dropout", 0.0)
    if type(dropout) not in (int, float) or not 0 <= dropout < 1:
        raise CheckpointError(f"{path}: model.dropout must be a number in [0, 1), not {_short(dropout)}")
    cfg = ModelConfig(**sizes)
    if cfg.d_model % cfg.n_heads:  # attention splits d_model into n_heads equal parts
        raise CheckpointError(f"{path}: n_heads ({cfg.n_heads}) must divide d_model ({cfg.d_model})")
    if cfg.d_model % 2:  # the sinusoidal table pairs a sine and a cosine column per frequency
        raise CheckpointError(f"{path}: d_model must be even, not {cfg.d_model}")
    # "Forward" loaded as a task of its own, and every answer check (which reads the task) was skipped. A task
    # of another name loads as a generic model whose answers get no chemistry checks (the tests' copy model).
    task = config.get("task", "forward")
    if not isinstance(task, str) or (task not in MODEL_TASKS and task.strip().lower() in MODEL_TASKS):
        raise CheckpointError(f"{path}: task must be one of {', '.join(MODEL_TASKS)}, not {_short(task)}")
    if not isinstance(config.get("data_stats", {}), dict):
        raise CheckpointError(f"{path}: data_stats must be an object (the data's stats.json), not "
                              f"{_short(config['data_stats'])}")
    # whether the model reads several writings of a query (service.Predictor.augmentable): null or "yes" loaded, then
    # failed every augmented predict, the server's /models and the app's sidebar with a TypeError or a bare ValueError
    augment = config.get("data_stats", {}).get("augment", 0)
    if type(augment) is not int or augment < 0:
        raise CheckpointError(f"{path}: data_stats.augment must be a whole number, 0 or more (the writings of each "
                              f"query in the training data), not {_short(augment)}")
    return config, cfg


def read_vocab(folder: Path, cfg: ModelConfig) -> Vocab:
    path = folder / "vocab.json"
    data = read_json(path)
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise CheckpointError(f"{path}: expected {{\"tokens\": [str, ...]}}")
    if len(tokens) != cfg.vocab_size:
        raise CheckpointError(f"{path} has {len(tokens)} tokens, config.json says vocab_size {cfg.vocab_size}")
    try:
        return Vocab(tokens)
    except ValueError as exc:  # duplicates, the special tokens not first, a token the tokenizer never writes
        raise CheckpointError(f"{path}: {exc}") from None


def _declared_bytes(path: Path, header_bytes: int) -> int | None:
    """The size a safetensors file's header says the file has (the length prefix, the header, the data its last
    tensor ends at), or None where the header cannot say."""
    try:
        with path.open("rb") as f:
            header = json.loads(f.read(8 + header_bytes)[8:])
        ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
    # RecursionError: a header of arrays nested 500,000 deep (safetensors refuses it) stopped the load with it
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
        return None
    return 8 + header_bytes + max(ends) if ends and all(type(end) is int for end in ends) else None


def read_header(path: Path) -> dict[str, TensorHeader]:
    """The tensors a safetensors file declares, from its header alone."""
    _require_file(path)
    try:
        with path.open("rb") as f:
            prefix = f.read(8)  # the header's length, little-endian, then the JSON header
    except OSError as exc:
        raise CheckpointError(f"{path} cannot be read: {exc.strerror or exc}") from None
    header_bytes = int.from_bytes(prefix, "little") if len(prefix) == 8 else 0
    if not 0 < header_bytes <= MAX_HEADER_BYTES:
        raise CheckpointError(f"{path} is not a safetensors file, or its header is over {MAX_HEADER_BYTES:,} bytes")
    try:
        with safe_open(str(path), framework="pt") as f:  # maps the file; checks offsets against its size
            tensors = {name: f.get_slice(name) for name in f.keys()}
            return {name: TensorHeader(path, tuple(t.get_shape()), t.get_dtype()) for name, t in tensors.items()}
    except (OSError, SafetensorError) as exc:
        declared, size = _declared_bytes(path, header_bytes), path.stat().st_size
        # safetensors says "incomplete metadata" of both, which sent a user to the header of a cut-short copy
        if declared is not None and size < declared:
            raise CheckpointError(f"{path} is cut short: {size:,} bytes where its header describes {declared:,} "
                                  "(an interrupted copy or download?); copy it again") from None
        if declared is not None and size > declared:
            raise CheckpointError(f"{path} has {size - declared:,} bytes past the {declared:,} its header "
                                  "describes; a safetensors file ends with its last tensor") from None
        raise CheckpointError(f"{path} is not a readable safetensors file: {str(exc)[:200]}") from None


def read_weight_map(index: Path) -> dict[str, str]:
    data = read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index}: expected {{\"weight_map\": {{tensor name: shard file name}}}}")
    for file in set(weight_map.values()):
        if Path(file).name != file or not file.endswith(".safetensors"):  # no paths out of the folder
            raise CheckpointError(f"{index}: shard name {_short(file)} must be a plain .safetensors file name")
    return weight_map


def read_headers(folder: Path, stem: str = "model") -> dict[str, TensorHeader]:
    """Every tensor of a checkpoint (one file, or the shards its index lists), from the headers."""
    index = folder / f"{stem}.safetensors.index.json"
    if index.exists():
        weight_map: dict[str, str] | None = read_weight_map(index)
        files = sorted(set(weight_map.values()))
    elif (folder / f"{stem}.safetensors").exists():
        weight_map, files = None, [f"{stem}.safetensors"]
    else:
        raise CheckpointError(f"{folder}: no {stem}.safetensors or {index.name}")
    headers: dict[str, TensorHeader] = {}
    for file in files:
        for name, header in read_header(folder / file).items():
            if name in headers:
                raise CheckpointError(f"{folder / file}: tensor {_short(name)} is also in {headers[name].file.name}")
            if weight_map is not None and weight_map.get(name) != file:
                raise CheckpointError(f"{index} does not list tensor {_short(name)} in {file}, which holds it")
            headers[name] = header
    unheld = sorted(set(weight_map or ()) - set(headers))
    if unheld:
        raise CheckpointError(f"{index} lists {len(unheld)} tensors in shards that do not hold them, "
                              f"e.g. {_short(unheld[0])}")
    if weight_map is not None and (folder / f"{stem}.safetensors").exists():  # the shards loaded, the file unread
        raise CheckpointError(f"{folder} holds both {stem}.safetensors and {index.name} (with its shards): two sets of "
                              "weights; keep the model's own and remove the other")
    return headers


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The state-dict shapes of Seq2SeqTransformer(cfg), computed without building it.

    (Building it on the meta device would do, but its normal_ init costs 2.5 s on first use.)
    tests/test_checkpoint.py checks this against the real model so the two cannot drift apart.
    """
    d, ff = cfg.d_model, cfg.d_ff

    def norm(prefix: str) -> dict[str, tuple[int, ...]]:
        return {f"{prefix}.weight": (d,), f"{prefix}.bias": (d,)}

    def linear(prefix: str, n_out: int, n_in: int) -> dict[str, tuple[int, ...]]:
        return {f"{prefix}.weight": (n_out, n_in), f"{prefix}.bias": (n_out,)}

    def attention(prefix: str) -> dict[str, tuple[int, ...]]:
        return {**linear(f"{prefix}.query", d, d), **linear(f"{prefix}.key_value", 2 * d, d),
                **linear(f"{prefix}.out", d, d)}

    def feed_forward(prefix: str) -> dict[str, tuple[int, ...]]:
        return {**linear(f"{prefix}.up", ff, d), **linear(f"{prefix}.down", d, ff)}

    shapes = {"embed.weight": (cfg.vocab_size, d)}
    for i in range(cfg.n_encoder_layers):
        layer = f"encoder.{i}"
        shapes |= {**norm(f"{layer}.norm1"), **norm(f"{layer}.norm2"), **attention(f"{layer}.attn"),
                   **feed_forward(f"{layer}.ff")}
    for i in range(cfg.n_decoder_layers):
        layer = f"decoder.{i}"
        shapes |= {**norm(f"{layer}.norm1"), **norm(f"{layer}.norm2"), **norm(f"{layer}.norm3"),
                   **attention(f"{layer}.self_attn"), **attention(f"{layer}.cross_attn"),
                   **feed_forward(f"{layer}.ff")}
    return shapes | norm("encoder_norm") | norm("decoder_norm")


def check_weights(folder: Path, cfg: ModelConfig, headers: dict[str, TensorHeader]) -> None:
    """The headers hold exactly the tensors the config implies, in those shapes, as floats."""
    shapes = expected_shapes(cfg)
    n_parameters = sum(math.prod(shape) for shape in shapes.values())
    if n_parameters > MAX_PARAMETERS:
        raise CheckpointError(f"{folder / 'config.json'}: its sizes make {n_parameters:,} parameters; "
                              f"the limit is {MAX_PARAMETERS:,}")
    weights = folder / (INDEX_NAME if (folder / INDEX_NAME).exists() else "model.safetensors")
    missing = sorted(set(shapes) - set(headers))
    if missing:
        raise CheckpointError(f"{weights} lacks {len(missing)} tensors that config.json implies, e.g. {missing[0]}")
    unexpected = sorted(set(headers) - set(shapes))
    if unexpected:
        raise CheckpointError(f"{headers[unexpected[0]].file} holds tensors that config.json does not imply, "
                              f"e.g. {_short(unexpected[0])}")
    for name, shape in shapes.items():
        header = headers[name]
        if header.shape != shape:
            raise CheckpointError(f"{header.file}: tensor {name} has shape {list(header.shape)}; "
                                  f"config.json implies {list(shape)}")
        if header.dtype not in WEIGHT_DTYPES:
            raise CheckpointError(f"{header.file}: tensor {name} is {header.dtype}; "
                                  f"weights are one of {sorted(WEIGHT_DTYPES)}")


def load_tensors(folder: Path, stem: str = "model") -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted({header.file for header in read_headers(folder, stem).values()}):
        try:
            tensors.update(load_file(str(file)))
        except (OSError, SafetensorError) as exc:
            raise CheckpointError(f"{file} cannot be read: {str(exc)[:200]}") from None
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
    if unsafe and not (folder / "config.json").is_file():  # another program's checkpoint, not one of ours
        raise CheckpointError(f"{folder} is not a MolSpec model folder (no config.json); it holds pickle-format files "
                              f"{unsafe}, which MolSpec never loads: its models are safetensors + JSON only")
    if unsafe:
        raise CheckpointError(f"{folder}: refusing to load a folder with pickle-format files {unsafe}; "
                              "MolSpec models are safetensors + JSON only")


@dataclass(frozen=True)
class Inspection:
    """A model folder as `load` checks it before reading a weight: the config, its sizes, the vocabulary and the
    tensors the headers declare (exactly those the sizes imply)."""
    config: dict
    cfg: ModelConfig
    vocab: Vocab
    headers: dict[str, TensorHeader]


def inspect_folder(folder: str | Path, with_draft: bool = True) -> Inspection:
    """Every check `load` makes before it builds the model, reading the JSON files and the safetensors headers
    only (milliseconds), and with_draft, those of the draft model in DRAFT_DIR (if any), which the app loads with
    it, and its vocabulary against the model's: a CheckpointError naming the file at fault."""
    folder = Path(folder)
    if not folder.exists():
        raise CheckpointError(f"model folder {folder} does not exist")
    if not folder.is_dir():  # config.json or a shard given for its folder: name the folder
        holds_model = (folder.parent / "config.json").is_file()
        holder = f": the model is the folder that holds it, {folder.parent}" if holds_model else ""
        raise CheckpointError(f"{folder} is a file, not a model folder{holder}")
    check_safe(folder)
    refuse_run_folder(folder)
    refuse_folder_of_models(folder)
    config, cfg = read_config(folder)
    vocab = read_vocab(folder, cfg)
    headers = read_headers(folder)
    check_weights(folder, cfg, headers)
    draft = folder / DRAFT_DIR
    if with_draft and draft.is_dir():  # the service loads it with the model: a broken one stops the model loading
        # said of the draft model, which the model loads without: an emptied draft/ read as the model's own file missing
        its_draft = (f"; {draft} is the draft model of {folder}, which loads with it: mend it, or remove {draft} to "
                     "load the model without one")
        try:
            drafted = inspect_folder(draft, with_draft=False)
        except CheckpointError as exc:
            raise CheckpointError(f"{exc}{its_draft}") from None
        if drafted.vocab.tokens != vocab.tokens:
            raise CheckpointError(f"{draft / 'vocab.json'} and {folder / 'vocab.json'} differ; a draft model reads "
                                  "its model's vocabulary (one of the two was edited, or comes from another model)")
        # fewer failed a longer query inside the draft's encoder, and cut answers short that its model writes on
        if drafted.cfg.max_positions < cfg.max_positions:
            raise CheckpointError(f"{draft / 'config.json'}: model.max_positions is {drafted.cfg.max_positions}, "
                                  f"fewer than the {cfg.max_positions} of {folder / 'config.json'}; a draft model "
                                  "reads every query its model reads and drafts as far as it writes")
    return Inspection(config, cfg, vocab, headers)


def load(folder: str | Path, device: str | torch.device = "cpu") -> tuple[Seq2SeqTransformer, Vocab, dict]:
    """(model in eval mode, vocab, config dict) from a model folder, checked before it is built. Its draft model is
    not read (service.Predictor.load loads it as a model of its own; training and averaging never use it)."""
    folder = Path(folder)
    found = inspect_folder(folder, with_draft=False)
    tensors = {k: v.float() for k, v in load_tensors(folder).items()}
    broken = next((name for name, tensor in tensors.items() if not torch.isfinite(tensor).all()), None)
    if broken is not None:  # greedy wrote '<pad>' answers, beam none, sampling raised from torch
        raise CheckpointError(f"{folder}: tensor {broken} holds values that are not finite (NaN or infinity); "
                              "the weights are damaged")
    model = Seq2SeqTransformer(found.cfg)
    model.load_state_dict(tensors)
    plan_free_attention(torch.device(device))
    return model.to(device).eval(), found.vocab, found.config


def refuse_filled_folder(out: Path, what: str, why: str) -> None:
    """Refuse, before any work, an output folder for `what` ("the model", "the data") that is a file or already
    holds files; `why` says what writing among them would do."""
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"{out} is a file; give a new folder for {what}")
    if out.is_dir() and any(out.iterdir()):
        raise CheckpointError(f"{out} already holds files; give a new or empty folder ({why})")


def check_new_folder(out: Path) -> None:
    """Refuse a folder to write a new model into unless it is new or empty, before any work: `save` replaces
    only the weights, config and vocabulary, so a model folder written into would keep its own card,
    calibration and draft model beside another model's weights, and no longer load. Its parent must
    exist, as the folder of every other command's output must: a mistyped path is not created."""
    refuse_filled_folder(out, "the model", "writing into it would mix the new model with what is there")
    if not out.parent.is_dir():
        raise CheckpointError(f"cannot write {out}: the folder {out.parent} does not exist")


def average(folders: list[str | Path], out: str | Path, dtype: torch.dtype = torch.float32) -> dict:
    """Write the mean of several models' weights (a uniform "model soup") as a model folder.

    The models must share their task, sizes and vocabulary, and should be fine-tuned from one parent: the
    mean of unrelated models is not a model. Each folder is checked by `load` before it is read; the
    mean is taken in float32 and written in dtype. config.json is the first folder's, less its step and
    validation (ONE_RUNS_FACTS), with "averaged_from" listing the folders. `out` must be a new or empty folder
    (check_new_folder) outside the model folders, and each model folder is given once. Returns that config.
    """
    if len(folders) < 2:
        raise CheckpointError("averaging needs at least two model folders")
    out = Path(out)
    resolved = [Path(folder).resolve() for folder in folders]
    if out.resolve() in resolved:
        raise CheckpointError(f"{out} is one of the folders being averaged; write the mean elsewhere")
    holder = next((folder for folder, path in zip(folders, resolved) if path in out.resolve().parents), None)
    if holder is not None:  # inside it, the mean becomes part of that model's folder (as draft/, its draft model)
        raise CheckpointError(f"{out} lies inside {holder}, one of the folders being averaged; write the mean "
                              "elsewhere")
    twice = next((folder for folder, path in zip(folders, resolved) if resolved.count(path) > 1), None)
    if twice is not None:  # the mean would weigh that model double
        raise CheckpointError(f"{twice} is given twice; give each model folder once")
    check_new_folder(out)
    first_model, vocab, config = load(folders[0])
    total = {name: tensor.clone() for name, tensor in first_model.state_dict().items()}
    task = config.get("task", "forward")
    for folder in folders[1:]:
        model, other_vocab, other_config = load(folder)
        # Dropout is how a model was trained, not its shape: a run with --dropout 0 averages with its parent.
        sizes, first_sizes = model.cfg.to_dict(), first_model.cfg.to_dict()
        differ = [f"{name} {sizes[name]} against {first_sizes[name]}" for name in sizes
                  if name != "dropout" and sizes[name] != first_sizes[name]]
        if differ:
            raise CheckpointError(f"{folder}: model sizes differ from {folders[0]}'s ({'; '.join(differ)})")
        if other_vocab.tokens != vocab.tokens:
            raise CheckpointError(f"{folder}: vocabulary differs from {folders[0]}'s")
        other_task = other_config.get("task", "forward")
        if other_task != task:  # config.json would call the mean a model of the first task
            raise CheckpointError(f"{folder} is a {other_task} model and {folders[0]} a {task} model; the mean of "
                                  "the two is a model of neither")
        for name, tensor in model.state_dict().items():
            total[name] += tensor
    first_model.load_state_dict({name: tensor / len(folders) for name, tensor in total.items()})
    # the first model's step and validation (train's export and best/ record them) are no facts of the mean: the
    # shipped forward mean's config.json said "step": 451, its first run's
    meta = {key: value for key, value in config.items() if key not in ("model", *ONE_RUNS_FACTS)}
    meta["averaged_from"] = [str(folder) for folder in folders]
    # Written aside and renamed into place: a Ctrl-C or a full disk mid-write left `out` holding a config and
    # vocabulary without (all) weights, which does not load and which the next run refused as a filled folder.
    partial: Path | None = None
    try:
        partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
        partial.chmod(0o755)  # mkdtemp's 0700 would follow it into place
        save(first_model, vocab, partial, meta=meta, dtype=dtype)
        os.replace(partial, out)  # a rename replaces the empty folder check_new_folder let through
    except OSError as exc:  # a full disk said only "No space left on device", naming no folder (or the hidden copy)
        removed = "its unfinished copy was removed and " if partial is not None else ""
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        left = f"{out} is left empty" if out.is_dir() else f"{out} was not created"
        raise OSError(exc.errno, f"{exc.strerror or exc}: the mean could not be written to {out}; {removed}{left}: "
                                 f"the same command writes it once {out.parent} can be written") from None
    except BaseException:
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    return {"model": first_model.cfg.to_dict(), **meta}
