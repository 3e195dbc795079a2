"""The one API the app, the CLI and the benchmarks call: `Predictor.load(...).predict(...)`.

A Predictor validates and canonicalizes queries with RDKit, decodes with the chosen method and
returns ranked predictions with scores, validity, per-token provenance and decoding statistics.
Bad input never raises: it comes back as a result with `error` set, and the other queries of the
same call are unaffected. Wrong options (unknown method, n_best with greedy) raise ValueError.
The model is never mutated after loading, so one Predictor may serve many threads at once.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import numbers
import os
import re
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

import numpy
import torch
from tqdm import tqdm

from . import checkpoint
from .boundary import as_memory_error
from .calibration import Calibration, kind_of, load as load_calibration, weights_fingerprint
from .chem import (ION_WRITINGS, MAX_QUERY_CHARS, ChemError, answer_concerns, canonical, canonical_fragments,
                   canonical_or_none, holds_carbon, CXSMILES, in_ion_writing, inchi_alone, main_molecule,
                   markup_refusal, reaction_sides, product_alone, rinchi_refusal, salts_as_ions, smarts_refusal,
                   rdkit_quietly, smiles_from_cxsmiles, smiles_from_inchi, without_isotopes)
from .data import root_aligned
from .decoding.beam import beam_search
from .decoding.greedy import greedy, greedy_uncached
from .decoding.sampling import sample_decode
from .decoding.speculative_beam import speculative_beam
from .decoding.result import DecodeResult, DecodeStats
from .drafting import Drafter, make_drafter
from .graphs import GraphStep
from .limits import Abandoned, QueryTimeout, check_abandoned, time_limit
from .methods import METHODS, Method, SamplingOptions, method as method_row, readers_of, unread_knobs
from .model import Seq2SeqTransformer
from .native import BUILD_VARIABLE, DTYPES, NativeStep, NativeUnavailable, cpu_description, native_unavailable
from .rsmiles import root_views
from .tokenizer import TokenizeError, Vocab

log = logging.getLogger(__name__)

MODELS_DIR = checkpoint.MODELS_DIR
# A drawing program's CXSMILES (Marvin's copy) carries coordinates, some 20 characters an atom, and an InChI may come
# with its AuxInfo, none of which the model reads: a reaction of 100 atoms, its SMILES 300 characters, was refused
# as too long. MAX_QUERY_CHARS (chem's) bounds what is read; this bounds the whole text for RDKit's parser.
MAX_DRAWING_CHARS = 20_000
DATIVE_BONDS = ("->", "<-")  # as RDKit writes a dative bond, either way (one token each: tokenizer.SMILES_REGEX)
MAX_QUERY_TOKENS = 500  # the encoder cost grows quadratically; USPTO sources stay under 400
MAX_AUGMENT = 20  # writings of one query (Predictor.predict's augment); the retro model was trained on 20
MAX_N_BEST = 50  # answers per query (the beam width of beam search and its kin)
MAX_DRAFT_LEN = 64  # tokens in one draft
MAX_N_DRAFTS = 64  # drafts verified in one decoder call
DEFAULT_METHOD = "greedy"  # Predictor.predict's, where none is named (so the command line's and HTTP's)
DEFAULT_TIME_LIMIT_S = 60.0  # per query; a USPTO query takes well under a second with greedy on a CPU
# A day per query: past any decode; None is no limit. 1e308 (and infinity) overflowed to infinity inside the C search.
MAX_TIME_LIMIT_S = 86_400.0
MAX_TEMPERATURE = 100.0  # sampling; far past the point where the output is noise
# At 1e-40 the logits over the temperature overflow float32 and torch draws from NaNs; at 0.01 a sample is
# greedy's answer nearly always (greedy is the method for temperature 0).
MIN_TEMPERATURE = 0.01
MAX_TOKENS_KNOB = 10_000  # top_k and beta: past any vocabulary (an int this big or more overflowed torch's int64)
MAX_NATS = 1_000.0  # tau and delta: past any log-probability gap a model writes
MAX_SEED = 2**63 - 1  # what a torch generator takes; seeds seed .. seed + n_best * augment - 1 are used (_sample)
# A SMILES is printable ASCII. Anything else is refused by name, never dropped: RDKit skips some
# characters it cannot read, so a Cyrillic 'ССO' would silently become water and a full-width
# 'Ｃｌ' would vanish from chlorobenzene. ASCII whitespace is allowed here: the ends are trimmed
# and spaces inside get their own message.
FOREIGN_CHARACTER = re.compile(r"[^\x21-\x7e \t\n\r\x0b\x0c]")
# A molfile's counts-line version or its end line: text no SMILES can hold (V, vanadium, is written [V]).
# A browser's one-line field drops a pasted molfile's line breaks, so the marks are sought anywhere.
MOLFILE_MARK = re.compile(r"V[23]000|M  END")
# Four lowercase letters in a row are a word, not aromatic atoms, once one of them is outside SMILES's aromatic
# set (b c n o p s): "aspirin", "benzene", "toluene" (but not "cccc"). Such a query gets a hint that names
# are not looked up.
WORD = re.compile(r"[a-z]{4,}")
AROMATIC_LETTERS = frozenset("bcnops")
# A CAS Registry Number (ethanol's 64-17-5), as a catalogue or an inventory lists compounds: it was refused as a SMILES
# whose "ring bond 6 at position 1 has no atom before it", which sent a chemist looking for a ring
CAS_NUMBER = re.compile(r"[0-9]{2,7}-[0-9]{2}-[0-9]")
# The refusal of a query with no molecule, in words for every caller: a program (Python, HTTP) gives text, where
# "paste or draw a molecule" told a client over HTTP to use the app's field and editor
EMPTY_QUERY = "empty query: give a SMILES or an InChI (in the app, paste one or draw the structure)"


def model_folder(name_or_path: str | Path) -> Path:
    """The folder of a shipped model named by its task ("forward", "retro"), else the path as given; a name
    that is neither is refused with the shipped models' names (checkpoint.CheckpointError)."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise checkpoint.CheckpointError(f"a model is a folder's path or a shipped model's name, not "
                                         f"{type(name_or_path).__name__}")
    if str(name_or_path) == "":  # a blank setting: Path("") is the working folder, told to be a shipped model's
        raise checkpoint.CheckpointError(f"a model is a folder's path or a shipped model's name, not an empty name "
                                         f"(shipped: {shipped_names()})")
    path = Path(name_or_path).expanduser()  # "~/models/mine" from Python or --model=~/..., which no shell expands
    shipped_folder = MODELS_DIR / str(name_or_path)
    # "." and "forward/.." name the folder of the shipped models, not one of them
    shipped = shipped_folder.is_dir() and shipped_folder.resolve() != MODELS_DIR.resolve()
    if not path.is_dir() and shipped:
        return shipped_folder
    if path.is_dir() and not (path / "config.json").exists() and shipped and not path.is_absolute():
        # a folder of the shipped model's name in the working directory was read instead, "config.json is missing"
        raise checkpoint.CheckpointError(f"{path} is a folder here that holds no model (no config.json); the shipped "
                                         f"model {name_or_path} is {shipped_folder}: give that path, or run from "
                                         "another folder")
    if not path.exists():
        raise checkpoint.CheckpointError(f"model folder {path} does not exist, and no shipped model has that name "
                                         f"(shipped: {shipped_names()})")
    return path


def shipped_names() -> str:
    """The shipped models' names, for a refusal: "forward, retro" ("none" where none is installed)."""
    return ", ".join(sorted(folder.name for folder in MODELS_DIR.glob("*") if (folder / "config.json").is_file())) \
        or "none"


def model_task(name_or_path: str | Path) -> str:
    """What a model predicts ("forward" or "retro"), from its config alone: a file can be read for that task
    before the weights load."""
    return str(checkpoint.read_config(model_folder(name_or_path))[0].get("task", "forward"))


def name_hint(text: str) -> str:
    """A refusal's ending for a query that is a comment line (# first: no SMILES begins so; a TXT file's line 'made by
    hand' was told it reads like a name), reads like a chemical name (WORD) or is a CAS number, else ""."""
    if text.lstrip().startswith("#"):
        return ("; it begins with '#', as a comment line does, and no SMILES does: leave the line out (a SMILES "
                "file, .smi, skips such lines)")
    if CAS_NUMBER.fullmatch(text.strip()):
        return ("; it reads like a CAS Registry Number, and those are not looked up here: paste a SMILES or an InChI, "
                "or draw the structure")
    if any(set(word) - AROMATIC_LETTERS for word in WORD.findall(text)):
        return ("; it reads like a name, and names are not looked up here: paste a SMILES or an InChI, or draw "
                "the structure")
    return ""


# A label or a list number before a SMILES, as notes and papers' SI write one ('SMILES: CCO', 'Product: CCO', '1. CCO',
# '2) CCO'): told it reads like a name.
LEADING_LABEL = re.compile(r"(?:[A-Za-z][\w -]{0,30}:|\(?\d{1,4}[.)])\s+")


def label_hint(text: str) -> str:
    """A refusal's ending for a query that is a label or a list number and then a SMILES (LEADING_LABEL); else ""."""
    label = LEADING_LABEL.match(text)
    rest = text[label.end():] if label else ""
    if rest and canonical_or_none(rest):
        return f"; it reads as a label or a number and then a SMILES: the SMILES alone is {rest}"
    return ""


def title_hint(text: str) -> str:
    """A refusal's ending for a query that is a SMILES and then a name or a title after a space or a tab, as a line
    of a SMILES file is ('CCO ethanol'), which would be read wrongly as a name; else ""."""
    first, *rest = text.split(None, 1)
    if rest and canonical_or_none(first) and canonical_or_none("".join(rest[0].split())) is None:
        return (f"; it reads as a SMILES and then a name or title, as a line of a SMILES file does: the SMILES alone "
                f"is {first}")
    return ""


def inchis_hint(text: str) -> str:
    """A refusal's ending for a query of several InChIs (each pasted after the other, as registration systems list
    the molecules of a reaction), whose spaces were told apart only as a SMILES's; else ""."""
    count = text.casefold().count("inchi=")
    if count < 2:
        return ""
    return (f"; it holds {count} InChIs: give each as its own query, or all the molecules of one query as one InChI "
            "(a drawing program writes one for a drawing of several) or as one SMILES")


def broken_line_hint(text: str) -> str:
    """A refusal's ending for one SMILES broken across lines (as a PDF or a paper's narrow column breaks a long
    one), whose pieces are no SMILES each and which reads as one joined; else ""."""
    parts = text.split()
    joined = "".join(parts)
    if "\n" in text and any(canonical_or_none(part) is None for part in parts) and canonical_or_none(joined):
        return f"; it reads as one SMILES broken across lines: joined, it is {joined}"
    return ""


def tokenized_hint(text: str) -> str:
    """A refusal's ending for a query written as SMILES tokens with spaces between them (the Molecular Transformer's
    files: 'C C ( = O ) O'), which reads as one SMILES once joined; else ""."""
    parts = text.split()
    joined = "".join(parts)
    if len(parts) >= 3 and any(canonical_or_none(part) is None for part in parts) and canonical_or_none(joined):
        return f"; it reads as tokenized SMILES (a token a space): joined, it is {joined}"
    return ""


# A '+' between molecules or a reaction's '>' written with spaces around it, as papers and slides write a reaction
# ('CC(=O)Cl + NCc1ccccc1 >> CC(=O)NCc1ccccc1'): told it was a SMILES and then a name, the SMILES alone the first
# molecule, the others dropped.
SPACED_PLUS = re.compile(r"\s+\+\s+")
SPACED_ARROW = re.compile(r"\s*(?<!-)(>+)\s*")


def spaced_hint(text: str) -> str:
    """A refusal's ending for molecules with spaces around the '+' between them or a reaction's '>', which read as
    one query once written without them (a '+' as '.'); else ""."""
    joined = SPACED_ARROW.sub(r"\1", SPACED_PLUS.sub(".", text))
    if joined == text or any(ch.isspace() for ch in joined):
        return ""
    molecules = [m for side in reaction_sides(joined) for m in side.split(".") if m]
    if not molecules or any(canonical_or_none(m) is None for m in molecules):
        return ""
    return f"; it reads as molecules with spaces around a '+' or '>': written as one query, it is {joined}"


def spaces_refusal(text: str, one_molecule: bool = False) -> str:
    """The refusal of a query holding spaces, with what it reads as where a hint knows. Its advice is the caller's: a
    query may hold several molecules, joined with '.'; a target to plan for (`one_molecule`) is one, and the Routes
    page opened its refusal by telling it to join molecules with '.' and to use the Batch page, which planning then
    refused."""
    advice = ("give the molecule as one SMILES written without them" if one_molecule else
              "join the molecules of one query with '.' (CC(=O)Cl.NCc1ccccc1), and give several queries apart (a list "
              "in Python or over HTTP; a line each in a file, the app's Batch page)")
    return (f"a SMILES has no spaces: {advice}"
            + (inchis_hint(text) or broken_line_hint(text) or tokenized_hint(text)
               or spaced_hint(text) or label_hint(text) or title_hint(text) or name_hint(text)))


# What a character without a Unicode name is, by its general category (unicodedata.category): a lone surrogate
# (JSON's "\ud800", text cut inside a UTF-16 pair) was called a control character
UNNAMED_CHARACTERS = {"Cc": "control character", "Cs": "lone surrogate, half of a UTF-16 pair: not a character",
                      "Co": "private-use character", "Cn": "unassigned code point"}


def describe_character(ch: str) -> str:
    """'С' (U+0421 CYRILLIC CAPITAL LETTER ES): the character as Python writes it, its code and name (else what
    it is: UNNAMED_CHARACTERS)."""
    kind = UNNAMED_CHARACTERS.get(unicodedata.category(ch), "character without a name")
    return f"{ch!r} (U+{ord(ch):04X} {unicodedata.name(ch, kind)})"


def is_real(value: object) -> bool:
    """A real number that is not a bool (NumPy's floats and integers too): what a continuous knob takes."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_sampling(options: SamplingOptions) -> SamplingOptions:
    """The knobs as plain Python numbers, or a ValueError naming one that is no number of its kind or that torch
    would turn into NaNs or a crash mid-decode."""
    if not isinstance(options, SamplingOptions):  # a dict reached an AttributeError
        raise ValueError(f"sampling must be a SamplingOptions, not {type(options).__name__}")
    for name in ("top_k", "beta", "seed", "draft_len"):
        if not is_whole(getattr(options, name)):  # 2.5 and 1.5 reached torch as sizes and seeds
            raise ValueError(f"{name} must be a whole number, not {getattr(options, name)!r}")
    for name in ("temperature", "tau", "delta"):
        if not is_real(getattr(options, name)):
            raise ValueError(f"{name} must be a number, not {getattr(options, name)!r}")
    if not MIN_TEMPERATURE <= options.temperature <= MAX_TEMPERATURE:  # also false for NaN
        raise ValueError(f"temperature must be between {MIN_TEMPERATURE:g} and {MAX_TEMPERATURE:g} (greedy is the "
                         f"method for temperature 0), not {options.temperature}")
    if not 0 <= options.top_k <= MAX_TOKENS_KNOB:
        raise ValueError(f"top_k must be 0 (no cut) or more, at most {MAX_TOKENS_KNOB:,}, not {options.top_k}")
    if not 1 <= options.beta <= MAX_TOKENS_KNOB:
        raise ValueError(f"beta must be 1 or more (the draft token among the top-beta), at most {MAX_TOKENS_KNOB:,}, "
                         f"not {options.beta}")
    for name in ("tau", "delta"):
        value = getattr(options, name)
        if not 0 <= value <= MAX_NATS:  # also false for NaN and infinity
            raise ValueError(f"{name} must be a number of 0 or more, at most {MAX_NATS:g}, not {value}")
    if not 0 <= options.draft_len <= MAX_DRAFT_LEN:
        raise ValueError(f"draft_len must be between 0 and {MAX_DRAFT_LEN}, not {options.draft_len}")
    most = MAX_SEED - MAX_N_BEST * MAX_AUGMENT  # room for seed + n_best * writing + k (Predictor._sample)
    if not 0 <= options.seed <= most:
        raise ValueError(f"seed must be between 0 and {most}, not {options.seed}")
    # NumPy's numbers as Python's: torch's generator refused numpy.int64 as a seed
    return dataclasses.replace(options, **{name: int(getattr(options, name))
                                           for name in ("top_k", "beta", "seed", "draft_len")},
                               **{name: float(getattr(options, name)) for name in ("temperature", "tau", "delta")})


# Who runs a model's lean decoder calls: "auto" is C on CPU where it builds (native.py), else NumPy
# (both faster there than torch, issue 16), and torch elsewhere; "native" insists on C, "numpy" on
# NumPy, "torch" keeps every call in torch (for comparison); "graphs" replays torch's lean calls from
# CUDA graphs (graphs.py; CUDA only, not measured on a GPU yet, so not what "auto" takes there).
ENGINES = ("auto", "native", "numpy", "torch", "graphs")


def resolve_device(device: str) -> torch.device:
    """'auto', 'cpu', 'cuda', 'cuda:1' or 'mps' as a torch device that this machine has."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}; use auto, cpu, cuda or mps") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: this torch has no CUDA device; use --device cpu (or auto)")
    if resolved.type == "cuda" and (resolved.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: this torch has no MPS device; use --device cpu (or auto)")
    if resolved.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unsupported device {device!r}; use auto, cpu, cuda or mps")
    return resolved


def int8_unavailable(device: str = "auto") -> str | None:
    """Why Predictor.load cannot take dtype "int8" here, or None when it can: int8 arithmetic is the native
    engine's, so it needs a CPU device and the C step built for this machine."""
    resolved = resolve_device(device)
    if resolved.type != "cpu":
        return f"int8 arithmetic runs on the CPU's native engine, not on {resolved}"
    return native_unavailable()


# Queries decoded together when the caller does not say (predict, the CLI's --batch-size). Batches are
# cut from queries of like length (see Predictor.predict), and so cost less per query than one query a call on a
# CPU for greedy and the speculative methods, and for float32 beam search; int8 beam search on a CPU without AMX
# pays up to 18% (retro beam 10), where AMX's tiles make batch 8 1.6x as fast (README, "Batches on a CPU" and
# "Batches on a CPU again, session 90").
DEFAULT_BATCH_SIZE = 8


# A caller that streams many queries (CLI predict, evaluate, calibrate) hands `predict` this many
# batches at a time, so that predict can put queries of like length in one batch (see predict).
LENGTH_WINDOW_BATCHES = 32


def window_size(batch_size: int, augment: int = 1) -> int:
    """Queries a streaming caller hands `predict` at a time: LENGTH_WINDOW_BATCHES batches (one query at
    batch size 1, where there is nothing to group). One query where each is read in several writings (augment > 1):
    predict decodes such a query's writings as a batch of their own, grouping no queries, so a larger window decodes
    no faster, loses more to a stop (its queries are returned together) and times each query as the window's mean
    (io.predict_batch)."""
    if augment > 1:
        return 1
    return max(1, batch_size) * (LENGTH_WINDOW_BATCHES if batch_size > 1 else 1)


def windows(n: int, batch_size: int, desc: str, progress: bool = True, augment: int = 1) -> Iterator[slice]:
    """The slices of n queries that a streaming caller hands `predict`, window_size(batch_size, augment) each,
    under a progress bar that counts queries (a window is counted once the caller has used it)."""
    step = window_size(batch_size, augment)
    with tqdm(total=n, desc=desc, unit="query", disable=not progress) as bar:
        for start in range(0, n, step):
            yield slice(start, min(n, start + step))
            bar.update(min(n, start + step) - start)


def auto_drafter(device: torch.device, batch_size: int) -> tuple[str, int, int]:
    """(drafter, draft_len, n_drafts) for spec-auto, from the table measured with `bench`.

    CPU: a call costs more with every verified token, so one short lookup draft, as long as
    spec-lookup's CPU default (methods.py, where the measurement is). Lookup and pointer drafts are
    close (within 3% at D=2 on both quick sets); lookup needs no attention weights. GPU (H100,
    2026-11-25): a call costs about the same for 1 or 9 tokens; one 8-token draft made 3.6-4.1
    tokens per call on the first 30 retro quick-set queries, and the oracle puts 4 lookup drafts of 16 at 4.0 tokens
    per call against 3.4 for one (spec-auto's GPU shape is not timed yet).
    """
    if device.type == "cuda" and batch_size <= 8:
        return "lookup", 16, 4
    lookup = METHODS["spec-lookup"]
    return "lookup", lookup.default_draft_len(device.type), 1


def rest_after_miss(model: Seq2SeqTransformer) -> int:
    """greedy's `rest` for this model as loaded: the calls a row goes without drafts after a draft lost
    at its first token. Worth it only where a verify call of 9 tokens costs several one-token calls.
    Measured on the retro quick set (tools/draft_sweep.py, one CPU thread): with the NumPy step's
    fp16-weight products a 9-token call costs 1.6x a one-token call and rest 0 is fastest (rest 2
    ran 6% slower); with OpenBLAS products (3x) rest 2 was 5% faster. On a GPU a call costs about
    the same for 1 or 9 tokens: 0. The native engine computes its own products in C, whatever `packed` (whether
    torch has the fp16 kernel) says: 0, which also keeps one lookup draft a call in its C greedy loop. The graphs
    engine's calls are a GPU's (its eager form on a CPU, the tests', has no `packed`): 0."""
    step = model.numpy_step
    if isinstance(step, (NativeStep, GraphStep)):
        return 0
    slow_verify = model.device.type == "cpu" and (step is None or not step.packed)
    return 2 if slow_verify else 0


def is_whole(value: object) -> bool:
    """An int that is not a bool (NumPy's integers too): what a count option takes."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_options(method: str, n_best: int, batch_size: int, augment: int, draft_len: int | None,
                  n_drafts: int | None, time_limit_s: float | None, sampling: SamplingOptions | None = None) -> None:
    """Raise ValueError, in words that fit the API, the command line, HTTP and the app alike, for an option
    Predictor.predict cannot take (whatever the model; augment's fit with the model: Predictor.check_augment)."""
    row = method_row(method)
    for name, value in (("n_best", n_best), ("batch_size", batch_size), ("augment", augment),
                        ("draft_len", draft_len), ("n_drafts", n_drafts)):
        # 2.5 or True reached torch as a size; None, where no default stands for it, a comparison's TypeError
        if not is_whole(value) and (value is not None or name in ("n_best", "batch_size", "augment")):
            raise ValueError(f"{name} must be a whole number, not {value!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be 1 or more, not {batch_size}")
    if time_limit_s is not None and not is_real(time_limit_s):  # numpy.float32 was refused, float64 taken
        raise ValueError(f"time_limit_s must be a number of seconds (or None for no limit), not {time_limit_s!r}")
    if not 1 <= n_best <= MAX_N_BEST:
        raise ValueError(f"n_best must be between 1 and {MAX_N_BEST}, not {n_best}")
    if not row.many and n_best != 1:
        # said as the option is named everywhere (--method, method=, "method"): greedy given by default left it unknown
        unnamed = f"; {DEFAULT_METHOD} is the method taken where none is named" if method == DEFAULT_METHOD else ""
        raise ValueError(f"{method} returns one prediction; for {n_best} use beam or another method that returns "
                         f"several: {', '.join(m for m, r in METHODS.items() if r.many and not r.benchmark_only)} "
                         f"(name it as the method{unnamed})")
    # a knob given that the method does not read decoded as if not given, taken for a setting that counted
    for knob in unread_knobs(method, draft_len, n_drafts, sampling)[:1]:
        raise ValueError(f"{method} does not read {knob}; the methods that do: {readers_of(knob)}")
    if draft_len is not None and not 0 <= draft_len <= MAX_DRAFT_LEN:
        raise ValueError(f"draft_len must be between 0 and {MAX_DRAFT_LEN}, not {draft_len}")
    if n_drafts is not None and not 1 <= n_drafts <= MAX_N_DRAFTS:
        raise ValueError(f"n_drafts must be between 1 and {MAX_N_DRAFTS}, not {n_drafts}")
    # infinity, a natural "no limit", raised OverflowError from inside the C search (limits.steps_before_check)
    if time_limit_s is not None and not 0 < time_limit_s <= MAX_TIME_LIMIT_S:
        raise ValueError(f"time_limit_s must be a positive number of seconds, at most {MAX_TIME_LIMIT_S:,.0f} (None "
                         f"for no limit), not {time_limit_s:g}")


def several_products_note(task: str, canonical_query: str) -> str:
    """For a retrosynthesis query of several molecules (a salt, a product with its solvent), a sentence on what the
    model does with them and which one to predict alone (product_alone); for one molecule written with charges a
    proton explains (acetate, CC(=O)[O-]), a sentence naming its neutral form, as 86f78ba names a salt's; ""
    otherwise. The model was trained on single products, nearly all neutral."""
    molecules = canonical_query.split(".")
    if task != "retro" or not canonical_query:
        return ""
    if not holds_carbon(canonical_query):  # sodium chloride was told to predict Cl, and ammonium chloride N
        return ("No molecule of the query holds carbon: the model was trained on organic products (USPTO-50K) and "
                "its answers for an inorganic compound mean nothing.")
    if len(molecules) == 1:  # acetate alone decoded with no word, where sodium acetate was told to predict CC(=O)O
        neutral = product_alone(canonical_query)
        if neutral == canonical_query:
            return ""
        return (f"The query is written with charges a proton explains (an ion or a zwitterion), where the model's "
                f"training data write nearly every such product in its neutral form, and the model may take the "
                f"charged one apart as some other molecule. To take apart the neutral compound, predict {neutral}.")
    return (f"The query holds {len(molecules)} molecules, and retrosynthesis takes one product: the model reads them "
            "as one and proposes reactants for all of them, so a counter-ion, solvent or by-product moves into its "
            f"answers. To take apart the main product alone, predict {product_alone(canonical_query)}.")


# The advice of stopped_message that the app's pages follow with their time-limit setting (views.common.time_limit_hint)
LONGER_TIME_LIMIT = "a longer time limit"


def stopped_message(limit_s: float, writings: int = 1, method: str = "greedy", n_best: int = 1,
                    read: int = 0) -> str:
    """The error of a query still decoding at its time limit (`writings`: the writings it was read in), with the
    ways to fit it that the `method` and `n_best` it ran with leave: a greedy run was told to try greedy, and
    none was offered a longer limit. `read`: the writings read whole before the limit where they are fewer than
    `writings` and its row keeps their answers, pooled (0: no such count to tell)."""
    ways = (["greedy"] + ["a smaller n_best"] * (n_best > 1)) if method_row(method).many else []
    if writings > 1:
        ways.append("fewer writings")
    if limit_s < MAX_TIME_LIMIT_S:
        ways.append(LONGER_TIME_LIMIT)
    stopped = f"stopped after the {limit_s:g} s time limit per query"
    if writings > 1:
        stopped += f" (its {writings} writings together)"
    if 0 < read < writings:
        first = "the first" if read == 1 else f"the first {read}"  # not 'the first 1 of them'
        stopped += f", its answers pooled from {first} of them, read whole by then"
    if not ways:
        return stopped
    return f"{stopped}; try {', '.join(ways[:-1])} or {ways[-1]}" if len(ways) > 1 else f"{stopped}; try {ways[0]}"


def timed(result: DecodeResult, seconds: float | None) -> DecodeResult:
    """`result` with `seconds` as its wall time (None: the time its decoder measured)."""
    if seconds is None:
        return result
    return dataclasses.replace(result, stats=dataclasses.replace(result.stats, wall_time_s=seconds))


def copy_drafts(drafts: tuple[str, int, int]) -> Callable[[Sequence[int]], Drafter]:
    """A factory of one query's copy drafter from resolved (drafter, draft_len, n_drafts)."""
    drafter, length, count = drafts
    return lambda src: make_drafter(drafter, src, length, count)


# The concern of an answer the decoder cut off at its length budget (DecodeResult's unfinished hypothesis):
# the model never ended it, so however it reads, it is not a sane answer.
STOPPED = "stopped at the length limit"
# The concern of an answer still being written when the query's time limit stopped the search (beam search
# hands on its best live hypotheses then): not an answer the model gave, only how far it had got.
TIMED_OUT = "stopped at the time limit"


@dataclass(frozen=True)
class _Stopped:
    """A query the time limit stopped: its error, and what its decoder had found by then (None: nothing it
    could say), the answers finished and the best unfinished ones, with the calls they cost."""
    error: str
    found: DecodeResult | None


def _with_calls(result: DecodeResult | _Stopped, earlier: DecodeStats) -> DecodeResult | _Stopped:
    """A result decoded again with the counts and time of the decode the time limit cut (`earlier`) added."""
    found = result.found if isinstance(result, _Stopped) else result
    if found is None and not earlier.model_calls:
        return result
    stats = dataclasses.replace(found.stats) if found is not None else DecodeStats()
    stats.add(earlier)
    decoded = DecodeResult(found.hypotheses if found is not None else [], stats)
    return _Stopped(result.error, decoded) if isinstance(result, _Stopped) else decoded


@dataclass(frozen=True)
class Prediction:
    rank: int  # 1 = best: sane answers first, then flagged ones, then invalid ones, each in model order
    smiles: str  # canonical when valid, else the raw decoded string
    score: float  # sum of token log-probabilities
    valid: bool  # RDKit reads and sanitizes it
    tokens: tuple[str, ...]
    provenance: tuple[int, ...]  # per token: source token position copied from, or -1 (generated)
    finished: bool = True
    concerns: tuple[str, ...] = ()  # why a valid answer is not a sane one (chem.answer_concerns)
    model_rank: int = 0  # its rank in the decoder's own order (by score)
    # Retrosynthesis answers checked with the forward model (roundtrip.check_round_trip); None: not checked.
    round_trip: bool | None = None  # the forward model's top-k gives the query product back
    forward_prob: float | None = None  # the forward model's probability of that product
    confidence: float | None = None  # calibrated chance that it is right (calibration.py); None: no calibration
    # Read in several writings (Predictor.predict's augment): how many of them gave this answer, and the
    # writing its tokens' provenance points into when that is not the canonical query (its tokens).
    views: int = 1
    source_tokens: tuple[str, ...] = ()
    # How many of the decoder's strings spell this answer (fold_repeats): a beam can write the same
    # molecules twice, in two atom orders. Plain decodes only: pooled writings add such repeats'
    # probabilities (Predictor._pooled) and keep 1 here; `views` counts their writings.
    spellings: int = 1

    @property
    def probability(self) -> float:
        return math.exp(self.score)

    @property
    def sane(self) -> bool:
        """Valid and without concerns: what the app and the CSV call a chemically sane answer."""
        return self.valid and not self.concerns


def fold_repeats(predictions: Sequence[Prediction]) -> list[Prediction]:
    """One answer per molecule set, in the model's order: a repeat (the same molecules spelled another way,
    always lower in the beam) is folded into its first spelling, which keeps its place, score and
    model_rank and counts the spellings. So top-k by model_rank is the beam's own (the papers'), and
    the list a chemist reads holds no molecule twice. (Pooled writings add the repeats' probabilities
    instead: Predictor._pooled.)"""
    kept: dict[str, Prediction] = {}
    for prediction in predictions:
        first = kept.get(prediction.smiles)
        kept[prediction.smiles] = (prediction if first is None
                                   else dataclasses.replace(first, spellings=first.spellings + 1))
    return list(kept.values())


# Pooled writings are ranked by a power mean of their probabilities: the exponent below 1 weighs how
# many writings agree on an answer beside how sure each was (1 would be the plain mean, 0 a vote).
# Chosen on GLN validation products 0-499 (retro GPU-block-3 weights, beam 10, session 31) among the
# exponents 1, 0.75, 0.5, 0.35, 0.25, 0.15, 0.1 and 0.05: in 5 writings the mean (1) gave 47.8% top-1,
# 90.2% top-10; 0.25 gave 49.0% and 90.6% (0.35: 49.2%, 90.4%); 0.25-0.35 led at 10 and 20 writings too.
# On the test set: the retro model card.
POOL_POWER = 0.25


def pool_writings(answers: Sequence[Sequence[tuple[str, float]]],
                  power: float = POOL_POWER) -> list[tuple[str, float, int]]:
    """Answers to several writings of one query, pooled (test-time augmentation): each writing's answers
    as (answer, log-probability) in its beam's order -> each distinct answer with the log of the power
    mean (exponent `power`, POOL_POWER unless given) of its probabilities over the writings (a writing
    that did not give it counts 0) and how many writings gave it, best first (ties keep the order in
    which the answers were first met). A beam that spells one answer twice gives it the sum of both
    probabilities. Predictor._pooled and the GPU kit's scoring both rank with this."""
    if not power > 0:
        raise ValueError(f"the pooling exponent must be positive, not {power}")
    powered: dict[str, tuple[float, int]] = {}  # answer -> (sum of probability ** power, writings)
    for writing in answers:
        here: dict[str, float] = {}  # this writing's probability of each answer, its spellings added
        for answer, score in writing:
            here[answer] = here.get(answer, 0.0) + math.exp(score)
        for answer, probability in here.items():
            total, count = powered.get(answer, (0.0, 0))
            powered[answer] = (total + probability ** power, count + 1)
    best = sorted(powered.items(), key=lambda item: -item[1][0])
    return [(answer, math.log(total / len(answers)) / power if total > 0 else -math.inf, count)
            for answer, (total, count) in best]


def other_writings(canonical: str, n: int, vocab: Vocab, max_tokens: int) -> list[tuple[str, tuple[int, ...]]]:
    """Up to n - 1 writings of a canonical query other than itself (rsmiles.root_views), as (text, token
    ids), leaving out those this vocabulary cannot spell or longer than max_tokens."""
    writings = []
    for text in root_views(canonical, n)[1:]:
        try:
            ids = tuple(vocab.encode(text))
        except TokenizeError:
            continue
        if len(ids) <= max_tokens:
            writings.append((text, ids))
    return writings


def with_confidence(predictions: Sequence[Prediction], calibration: Calibration | None) -> list[Prediction]:
    """Answers in the model's order (one per molecule set), each valid and sane one given `calibration`'s
    confidence for its score at its place among the valid ones (Calibration.confidence's rank, as
    calibration.collect fits it); invalid and flagged ones, and all without a calibration, None: a flagged answer
    cannot be right as written (atoms no reactant has, the query itself, cut off), yet its score read as 29%."""
    if calibration is None:
        return list(predictions)  # made without a confidence (Predictor._predictions)
    given, valid = [], 0
    for prediction in predictions:
        valid += prediction.valid
        confidence = calibration.confidence(prediction.score, valid) if prediction.valid and prediction.sane else None
        given.append(dataclasses.replace(prediction, confidence=confidence))
    return given


def rank_answers(predictions: Sequence[Prediction]) -> tuple[Prediction, ...]:
    """A chemist reads the list top down: sane answers first, then flagged ones (they repeat the query,
    keep a reactant unchanged, ...), then unreadable ones; the model's order is kept within each. Given
    more answers than it lists (pooled writings: Predictor._pooled), the caller cuts after ranking, so
    that sane answers further down take the places of flagged ones."""
    ranked = sorted(predictions, key=lambda p: (not p.valid, bool(p.concerns)))
    return tuple(dataclasses.replace(p, rank=i) for i, p in enumerate(ranked, start=1))


def stopped_by_time_limit(error: object, canonical_query: object) -> bool:
    """Whether a query's outcome, its error beside the query as the model read it (a QueryResult's fields, or the
    cells of its output row: io.Outcomes), is a stop at the time limit rather than a refusal: predict gives an error
    beside the query it read only then (Predictor._stopped_writings, a batch's stopped rows); a query it refuses is
    never read. The one home of the rule that evaluate, calibrate, the command line and the Batch page count by."""
    return bool(error) and bool(canonical_query)


@dataclass(frozen=True)
class QueryResult:
    query: str  # as given
    canonical_query: str = ""  # what the model saw
    source_tokens: tuple[str, ...] = ()
    predictions: tuple[Prediction, ...] = ()  # in rank order (rank_answers): predictions[0] is rank 1
    # The decoder's counts for this query. wall_time_s: its share of the time of the batch it was decoded in (the
    # batch's time over its queries; alone in a batch, its own time), or its writings' time when pooled (augment)
    stats: DecodeStats = field(default_factory=DecodeStats)
    method: str = ""
    error: str | None = None
    dtype: str = ""  # what the decoder calls computed the answers with (Predictor.dtype); "" when none were decoded
    suggestion: str = ""  # with an error: the same molecules written so that the model can read them, if known
    # Pooled writings only: answers among the model's first n_best that the list leaves out, flagged or invalid
    # ones whose places went to sane answers from further down the pool (Predictor._pooled)
    set_aside: tuple[Prediction, ...] = ()
    task: str = ""  # the task of the model that answered (Predictor.task; check_round_trip takes retro's); "" unknown
    # The writings of the query whose answers were pooled (augment): fewer than asked for where the molecule has
    # fewer that the model can read, or where the time limit stopped it first (Predictor._stopped_writings; 0: none
    # gave answers: refused, or stopped before one was read whole)
    writings: int = 1
    # with an error: the query without its isotope labels, where this model reads that and not the labels (its
    # answers cannot say where a label goes); "" otherwise. The Predict page predicts it with one click.
    unlabelled: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def timed_out(self) -> bool:
        """Whether the time limit stopped the query (with the answers it had found, or none), rather than a refusal:
        stopped_by_time_limit's rule. A report or a page that called them all refused had a user take a slow query
        for one the model would not take."""
        return stopped_by_time_limit(self.error, self.canonical_query)

    @property
    def stopped_with_answers(self) -> bool:
        """Stopped at the time limit with the answers it had found (Predictor.predict keeps a beam search's, and
        the samples a sampling method had drawn): an error, and answers beside it that stand, those it had not
        finished marked TIMED_OUT."""
        return self.error is not None and bool(self.predictions)

    def in_model_order(self) -> list[Prediction]:
        """The model's own first answers in its order (by score), before rank_answers moved flagged ones
        down: the papers' top-k. With answers set aside, the list is full (n_best) and the sane answers
        that took their places, from beyond the model's first n_best, are not among these."""
        listed = self.predictions
        if self.set_aside:
            listed = tuple(p for p in listed if p.model_rank <= len(self.predictions))
        return sorted((*listed, *self.set_aside), key=lambda p: p.model_rank)


class PartlyDecoded(Abandoned):
    """`predict` given up by its caller (limits.abandon_when) partway through a list: `finished` holds, by the
    list's index, the result of each query done by then (its batch decoded, or refused before decoding), None
    for the others. The server, stopping or past a request's budget, dropped a window of up to 256 queries whole,
    its batches already decoded too."""

    def __init__(self, why: str, finished: Sequence[QueryResult | None]):
        super().__init__(why)
        self.finished = tuple(finished)


class DtypeRefused(ValueError):
    """Predictor.load's refusal of a dtype the native engine cannot compute this model in here: the engine's `reason`
    apart from the `advice`, which names the API's and the command line's options (dtype, engine); the app, whose
    switch is named otherwise, gives its own (the sidebar showed "leave dtype at float32" beside *Faster
    arithmetic*)."""

    def __init__(self, dtype: str, reason: str, advice: str):
        super().__init__(f"dtype {dtype} runs on the native engine, which cannot take this model here: {reason}; "
                         f"{advice}")
        self.reason = reason
        self.advice = advice


class QueryError(ValueError):
    """A query the model cannot read. suggestion: the same molecules written so that it can
    (chem.ION_WRITINGS), or "" when no such writing is known; unlabelled: the query without the isotope labels it
    cannot read, where it reads that (QueryResult.unlabelled), or ""."""

    def __init__(self, message: str, suggestion: str = "", unlabelled: str = ""):
        super().__init__(message)
        self.suggestion = suggestion
        self.unlabelled = unlabelled


@dataclass(frozen=True)
class _Query:
    text: str
    canonical: str
    ids: tuple[int, ...]


class Predictor:
    """A loaded model and the call that answers queries with it: `Predictor.load("forward")` (a shipped model's name
    or a model folder), then `predict(smiles or a list, method=..., n_best=...)`.

    One Predictor may be called from several threads at once (on the graphs engine its decodes take turns: _turn),
    and several Predictors live in one process; each call's time limit is its own. It cannot be pickled
    (__reduce__). RDKit's messages are held back while any call
    of the engine runs (chem.quiet_rdkit). RDKit's logging is the process's, and it has no switch for one thread: a
    program's other threads lose their own RDKit messages while a call runs too; a program that needs every one of
    them calls the engine from a process of its own."""

    def __init__(self, model, vocab, config: dict, device: torch.device, path: Path, draft_model=None,
                 weights: str = ""):
        self.model, self.vocab, self.config, self.device, self.path = model, vocab, config, device, path
        self.draft_model = draft_model  # small model in <model>/draft/, for spec-sample-draft
        # the fingerprint of the weights loaded (calibration.weights_fingerprint), taken as they load: a folder
        # rewritten since (a training run's export/) names other weights; "" where the model was not loaded by load
        self.weights = weights
        self.task: str = config.get("task", "forward")
        self._calibrations: dict[tuple[str, int], Calibration | None] = {}  # by (kind, writings); loaded when asked
        self._graph_turns = threading.Lock()  # the graphs engine's decodes, one at a time (_turn)

    @property
    def device_name(self) -> str:
        """The hardware the model runs on, for people: the GPU's name, or the CPU's with its vector
        instructions (native.cpu_description)."""
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        return cpu_description()

    @property
    def threads(self) -> int:
        """CPU threads a decoder call uses: torch's thread count (a process-wide setting, --threads), which
        the native engine's C calls take too where its library has OpenMP (else one)."""
        step = self.model.numpy_step
        return 1 if isinstance(step, NativeStep) and not step.threaded else torch.get_num_threads()

    @property
    def engine(self) -> str:
        """What runs the lean decoder calls: "native" (native.py), "numpy" (npstep.py), "graphs"
        (graphs.py) or "torch"."""
        step = self.model.numpy_step
        if step is None:
            return "torch"
        return "graphs" if isinstance(step, GraphStep) else "native" if isinstance(step, NativeStep) else "numpy"

    @property
    def products(self) -> str:
        """Who computes the matrix products of the NumPy step: "fbgemm-fp16" (FBGEMM's fp16-weight
        kernel, for weights that are float16 values) or "openblas"; "torch" with the torch engine; "c-fp16"
        or "c-int8" with the native engine (its own products, in C, on float16 or int8 weights), "c-int8-amx"
        where its int8 products run on AMX's tiles (the same results, faster)."""
        step = self.model.numpy_step
        if step is None or isinstance(step, GraphStep):
            return "torch"
        if isinstance(step, NativeStep):
            return "c-fp16" if step.dtype != "int8" else "c-int8-amx" if step.int8_amx else "c-int8"
        return "fbgemm-fp16" if step.packed else "openblas"

    @property
    def dtype(self) -> str:
        """What the decoder calls compute with: "int8" (native engine's option) or "float32"."""
        return getattr(self.model.numpy_step, "dtype", "float32")

    @property
    def engine_description(self) -> str:
        """The engine and its products' kernel, for people (the app's sidebar)."""
        kernels = {"fbgemm-fp16": "fp16-weight products", "openblas": "OpenBLAS products"}
        step = self.model.numpy_step
        if step is None:
            return "torch"
        if isinstance(step, GraphStep):
            return "torch, CUDA graphs"
        if isinstance(step, NativeStep):
            weights = "int8 weights and activations" if step.dtype == "int8" else "fp16 weights"
            return f"C decoder and encoder, {weights}" + (" (AMX)" if step.dtype == "int8" and step.int8_amx else "")
        return f"NumPy step, {kernels['fbgemm-fp16' if step.packed else 'openblas']}"

    @classmethod
    def load(cls, name_or_path: str | Path = "forward", device: str = "auto", engine: str = "auto",
             dtype: str = "float32") -> "Predictor":
        """A shipped model by task name ("forward", "retro") or a model folder. engine: see ENGINES;
        dtype: "float32", or "int8" on the native engine (native.NativeStep)."""
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
        # absolute: the calibrations are read when first asked for, after a change of folder too (os.chdir)
        path = model_folder(name_or_path).absolute()
        resolved = resolve_device(device)
        if engine in ("native", "numpy") and resolved.type != "cpu":
            raise ValueError(f"engine {engine} runs on CPU only, not on {resolved}; use --engine auto or torch")
        if engine == "graphs" and resolved.type != "cuda":
            raise ValueError(f"engine graphs (CUDA graphs) runs on CUDA only, not on {resolved}; use --engine auto")
        cpu = engine != "torch" and resolved.type == "cpu"
        if dtype != "float32" and not (cpu and engine in ("auto", "native")):  # before the weights are read
            raise ValueError(f"dtype {dtype} runs on the native engine (CPU) only, not engine {engine} on {resolved}")
        # the draft model's folder too, and its vocabulary against the model's, before either is read: a draft model
        # that did not load was found only once the model had loaded
        checkpoint.inspect_folder(path)
        model, vocab, config = checkpoint.load(path, resolved)
        # hashed as the weights are read, not once the engine is set up: building the C step takes a minute or more
        # the first time, and weights rewritten meanwhile (a training run's export/) were named, not those read
        weights = weights_fingerprint(path)
        try:
            if engine == "graphs":
                model.use_cuda_graphs()
            else:
                model.use_numpy_step(cpu, native=cpu and engine in ("auto", "native"), dtype=dtype)
        except NativeUnavailable as exc:
            if dtype != "float32":  # under engine auto too: the engine named is the one int8 needs, not one chosen
                also = " and engine at auto" if engine == "native" else ""
                raise DtypeRefused(dtype, str(exc), f"leave dtype at float32{also} (the NumPy step decodes it)") \
                    from None
            if engine == "native":
                raise ValueError(f"engine native cannot run here: {exc}; engine auto decodes with the NumPy step "
                                 "here") from None
            # a mistyped MOLSPEC_NATIVE_BUILD is the user's own setting gone wrong: said aloud, not at info level
            (log.warning if os.environ.get(BUILD_VARIABLE) else log.info)(
                "C decoder step unavailable (%s); the NumPy step runs the decoder calls", exc)
            model.use_numpy_step(cpu)
        draft_model = None
        if (path / checkpoint.DRAFT_DIR).is_dir():  # checked with the model above (its vocabulary too)
            draft_model, _, _ = checkpoint.load(path / checkpoint.DRAFT_DIR, resolved)
            # Its steps run on the main model's engine (float32): a torch step beside a C main call
            # would cost about as much as the call it drafts for.
            if isinstance(model.numpy_step, NativeStep):
                draft_model.use_numpy_step(True, native=True)
            elif isinstance(model.numpy_step, GraphStep):
                draft_model.use_cuda_graphs()
            elif model.numpy_step is not None:
                draft_model.use_numpy_step(True)
        return cls(model, vocab, config, resolved, path, draft_model, weights)

    # ---- input -------------------------------------------------------------------------------

    @rdkit_quietly
    def prepare(self, text: str, ion_writing: bool = False, *, one_molecule: bool = False) -> _Query:
        """Validate and canonicalize a query; raises ValueError with a message for the user. An alkali metal's salt
        written with its bond (O=C(O[K])O[K]) is read as the ions USPTO writes (chem.salts_as_ions; canonical_query
        shows them). ion_writing: a hydride written as one species (chem.ION_WRITINGS) is read as the ions USPTO
        writes, where the model reads those; otherwise such a query is refused with that writing offered
        (QueryError.suggestion). one_molecule: the caller takes one molecule (a target to plan for), so a refusal
        does not advise joining molecules with '.' (spaces_refusal)."""
        if not isinstance(text, str):
            raise ValueError(f"a query must be text, got {type(text).__name__}")
        foreign = FOREIGN_CHARACTER.search(text)  # before .strip(), which would drop a no-break space
        if foreign:
            raise ValueError(f"character {describe_character(foreign.group())} at position {foreign.start() + 1} "
                             "is not part of a SMILES, which is plain ASCII: retype it (look-alike letters "
                             "from other alphabets or full-width forms change the molecule)")
        text = text.strip()
        if not text:
            raise ValueError(EMPTY_QUERY)
        if MOLFILE_MARK.search(text):  # before the length check: a molfile is often longer than a query may be
            raise ValueError("this is a molfile, not a SMILES: open it as a file (the app's Open file tab; on the "
                             "command line, molspec predict --input F.mol)")
        markup = markup_refusal(text) or rinchi_refusal(text)  # '<b>CCO</b>' was read as a reaction SMILES
        if markup:
            raise ValueError(markup)
        if len(text) > MAX_DRAWING_CHARS:
            raise ValueError(f"query is {len(text):,} characters long; the limit is {MAX_QUERY_CHARS:,} "
                             f"({MAX_DRAWING_CHARS:,} with a CXSMILES's |...| part or an InChI's AuxInfo)")
        text = inchi_alone(text)
        cxsmiles = CXSMILES.fullmatch(text) is not None
        written = text.split(None, 1)[0] if cxsmiles else text  # what the limit bounds: no coordinates
        if len(written) > MAX_QUERY_CHARS:
            raise ValueError(f"query is {len(written):,} characters long{' before its |...| part' if cxsmiles else ''};"
                             f" the limit is {MAX_QUERY_CHARS:,}")
        smarts = smarts_refusal(written)  # before RDKit rewrites a CXSMILES's [#6] as [C]
        if smarts:
            raise ValueError(smarts)
        if cxsmiles:  # read as RDKit reads it; the result's canonical_query shows the SMILES
            try:
                text = smiles_from_cxsmiles(text)
            except ChemError as exc:
                raise ValueError(str(exc)) from None
        if any(ch.isspace() for ch in text):
            raise ValueError(spaces_refusal(text, one_molecule))
        if text[:6].casefold() == "inchi=":  # typed in lower case too: RDKit reads the prefix as the standard writes
            text = "InChI=" + text[6:]  # it; read as RDKit reads it, the result's canonical_query showing the SMILES
            try:
                text = smiles_from_inchi(text)
            except ChemError as exc:
                raise ValueError(str(exc)) from None
        reaction = text if len(reaction_sides(text)) > 1 else ""  # a complex's dative bond (->) is no arrow
        if reaction:
            text = self._from_reaction(text)
        try:
            fragments = salts_as_ions(canonical_fragments(text, strip_maps=True))
        except ChemError as exc:
            read_as = (f" (the query holds '>', so it was read as a reaction SMILES, 'reactants>reagents>', whose "
                       f"molecules are {text!r})") if reaction else ""
            raise ValueError(f"not a valid SMILES: {exc}{read_as}{name_hint(reaction or text)}") from None
        if not fragments:
            raise ValueError(EMPTY_QUERY)
        try:
            query, ids = self._encoded(fragments)
        except TokenizeError as exc:
            refusal = self._unreadable(exc, fragments)
            if not (ion_writing and refusal.suggestion):
                raise refusal from None
            query, ids = self._encoded(refusal.suggestion.split("."))
        limit = min(MAX_QUERY_TOKENS, self.model.cfg.max_positions)  # the encoder has no positions beyond
        if len(ids) > limit:
            raise ValueError(f"query has {len(ids):,} tokens; the limit is {limit:,}")
        return _Query(text, query, tuple(ids))

    def _encoded(self, fragments: list[str]) -> tuple[str, list[int]]:
        """The model's writing of a query's canonical fragments and its token ids; raises TokenizeError."""
        # Forward sources are the training data's "mixed" form: sorted canonical fragments.
        query = ".".join(sorted(fragments)) if self.task == "forward" else canonical(".".join(fragments))
        return query, self.vocab.encode(query)

    def _unreadable(self, exc: TokenizeError, fragments: list[str]) -> QueryError:
        """The refusal of a query holding a token outside the vocabulary, offering the ions USPTO writes
        for a hydride the model cannot read (chem.ION_WRITINGS) when that writing is readable. A dative bond the
        vocabulary lacks is named as the fault: C->[Fe] was refused for a token [CH4], which RDKit writes for the
        methane of that bond and the chemist never typed."""
        dative = {bond: sum(f.count(bond) for f in fragments) for bond in DATIVE_BONDS if bond not in self.vocab.index}
        if any(dative.values()):
            held = "a dative bond" if sum(dative.values()) == 1 else "dative bonds"
            return QueryError(f"the query holds {held} ({', '.join(b for b, n in dative.items() if n)}), which this "
                              "model's vocabulary lacks (USPTO writes a ligand and its metal as separate molecules)")
        unlabelled = self._unlabelled(fragments)
        message = f"{exc}; this model cannot read it" + (
            f". Without its isotope labels the query is {unlabelled}, which this model can read; its answers will not "
            "say where a label goes" if unlabelled else "")
        ions = in_ion_writing(fragments)
        if ions is None:
            return QueryError(message + self._main_product_hint(fragments), unlabelled=unlabelled)
        try:
            self._encoded(ions)
        except TokenizeError:
            return QueryError(message, unlabelled=unlabelled)
        suggestion = ".".join(ions)
        named = "; ".join(f"{f} as {ION_WRITINGS[f]}" for f in dict.fromkeys(fragments) if f in ION_WRITINGS)
        return QueryError(f"{message}. Its training data write {named}: the query so written is {suggestion}",
                          suggestion, unlabelled)

    def _unlabelled(self, fragments: list[str]) -> str:
        """For a query with isotope labels the model cannot read ([13CH3]), the query without them where that is
        readable, else "": the refusal gives it, and the chemist learns what the model can answer (the labels' fate
        is not in its data)."""
        plain = [without_isotopes(fragment) or fragment for fragment in fragments]
        if plain == fragments:
            return ""
        try:
            query, _ = self._encoded(plain)
        except TokenizeError:
            return ""
        return query

    def _main_product_hint(self, fragments: list[str]) -> str:
        """For retrosynthesis of several molecules (a salt: CC(=O)[O-].[Na+]), where the main one alone is
        readable, a sentence naming it: the counter-ion's token was refused with nothing to do instead."""
        if self.task != "retro" or len(fragments) < 2:
            return ""
        main = main_molecule(".".join(fragments))
        alone = product_alone(main)
        try:
            self._encoded([alone])
        except TokenizeError:
            return ""
        if alone != main:
            return (f". Retrosynthesis takes one product, and this query holds {len(fragments)} molecules, a salt: "
                    f"its main molecule, {main}, is an ion; predict its neutral form, {alone}, the acid or base the "
                    "salt is made from, as the model's training data write nearly every such product")
        return (f". Retrosynthesis takes one product, and this query holds {len(fragments)} molecules: its main "
                f"molecule alone, {main}, can be read")

    def _from_reaction(self, text: str) -> str:
        parts = reaction_sides(text)
        if self.task == "retro":
            if len(parts) == 3 and not parts[0] and not parts[1] and parts[2]:
                return parts[2]  # '>>product': a reaction drawn with its product alone (was refused)
            recorded = (" (the app, molspec predict and molspec serve take a recorded reaction whole, its "
                        "reactants as the known answer)") if len(parts) == 3 and parts[0] and parts[2] else ""
            raise ValueError("the retrosynthesis model reads a product, not a reaction SMILES: paste the product "
                             f"alone (or '>>product'){recorded}")
        if self.task == "forward" and len(parts) > 3:  # 'CCO>>C<b>x</b>' was told only 'reactants>reagents>' is read
            raise ValueError(f"a reaction SMILES has three parts, reactants>reagents>products, and this one has "
                             f"{len(parts)}: no '>' belongs inside a molecule's SMILES")
        if self.task == "forward" and len(parts) == 3 and not parts[0]:  # '>>CC(=O)N...' was told of the form only
            raise ValueError("the reaction SMILES has no reactants before its first '>': forward prediction reads "
                             "'reactants>reagents>' (the app, molspec predict and molspec serve also take a "
                             "recorded reaction, 'reactants>reagents>product')")
        if self.task == "forward" and len(parts) == 3 and parts[2]:  # a recorded reaction, told to paste molecules
            raise ValueError("this reaction SMILES holds its products, after its second '>': forward prediction "
                             "predicts them from 'reactants>reagents>', so leave them out (the app, molspec "
                             "predict and molspec serve take a recorded reaction whole, its products as the known "
                             "answer)")
        if self.task != "forward" or len(parts) != 3 or not parts[0]:
            raise ValueError("reaction SMILES are accepted only as 'reactants>reagents>' for forward "
                             "prediction; paste the molecule(s) alone")
        return ".".join(p for p in parts[:2] if p)

    # ---- decoding ----------------------------------------------------------------------------

    def resolve(self, method: str, draft_len: int | None, n_drafts: int | None,
                batch_size: int) -> tuple[str, int, int]:
        """(drafter, draft_len, n_drafts) a method decodes with: its row's defaults unless set, spec-auto's
        chosen per device; ("none", 0, 0) for a method without drafts, or an explicit draft_len of 0."""
        row = method_row(method)
        drafter, default_len, default_n = row.drafter, row.default_draft_len(self.device.type), row.n_drafts
        if drafter == "auto":
            drafter, default_len, default_n = auto_drafter(self.device, batch_size)
        length = draft_len if draft_len is not None else default_len
        # the sampling loop verifies one draft a call whatever n_drafts says (not among its knobs): counted as
        # asked, int8 refused relaxed and spec-sample at n_drafts 3 that float32 decoded with one
        count = n_drafts if n_drafts is not None and "n_drafts" in row.knobs else default_n
        if not row.speculative or length == 0:
            return "none", 0, 0
        return drafter, length, count

    def __repr__(self) -> str:
        """The call that loads this model so: Predictor.load('/.../models/forward', device='cpu', ...)."""
        return (f"Predictor.load({str(self.path)!r}, device={str(self.device)!r}, engine={self.engine!r}, "
                f"dtype={self.dtype!r})")

    def __reduce__(self) -> tuple:
        """Refused, whatever the engine: the C engine's loaded library cannot be pickled, and a copy of the NumPy
        engine's packed weights unpickled but failed inside torch on its first call."""
        raise TypeError(f"a Predictor cannot be pickled; load the model in each process with "
                        f"Predictor.load({str(self.path)!r}), as `molspec predict --ray` does")

    def methods(self) -> list[str]:
        """The methods this model decodes with their default settings: those of a draft model only where it has
        one; under int8 not the uncached baselines, whose calls recompute every prefix in torch (check_method)."""
        return [name for name, row in METHODS.items()
                if (row.drafts != "model" or self.draft_model is not None)
                and (self.dtype == "float32" or not row.benchmark_only)]

    def check_method(self, method: str) -> Method:
        """The method's row, or a ValueError for a method this model, so loaded, cannot decode with."""
        row = method_row(method)
        if self.dtype != "float32" and row.benchmark_only:  # it ran, float32 decoder calls labelled int8
            raise ValueError(f"{method} is the uncached baseline: its decoder calls recompute every prefix in torch, "
                             f"in float32, so they cannot compute in {self.dtype}; time it with the model in float32")
        if row.drafts == "model" and self.draft_model is None:
            raise ValueError(f"{self.path.name} has no draft model (a draft/ folder): use spec-sample")
        return row

    def decode(self, sources: Sequence[Sequence[int]], method: str, n_best: int,
               draft_len: int | None = None, n_drafts: int | None = None,
               sampling: SamplingOptions | None = None, writings: bool = False) -> list[DecodeResult]:
        """Decode token-id sources with a method; the engine-level call the benchmark times.
        writings: the sources are writings of one query, whose answers are pooled (predict's augment), so that a
        sampling method draws each writing's samples with seeds of its own (_sample)."""
        row = self.check_method(method)
        drafts = self.resolve(method, draft_len, n_drafts, len(sources))
        options = sampling or SamplingOptions()
        with self._turn():
            if row.family == "sampling":
                return self._sample(sources, row, n_best, drafts, options, writings)
            decoders = {"greedy": self._greedy, "beam": self._beam, "sbs": self._sbs}
            return decoders[row.family](sources, row, n_best, drafts, options)

    def _turn(self) -> contextlib.AbstractContextManager:
        """What a decode holds while it runs: on the graphs engine, the model's one turn. Its banks of static buffers
        (graphs.py) hold one cache's slots and one call's tokens at a time, so two decodes at once (two threads, the
        app's sessions) computed on each other's tokens and slots and gave wrong answers; they take turns. The other
        engines keep nothing between calls, and their decodes run at once."""
        return self._graph_turns if isinstance(self.model.numpy_step, GraphStep) else contextlib.nullcontext()

    # One per family: (sources, method row, n_best, (drafter, draft_len, n_drafts), sampling knobs).

    def _greedy(self, sources: Sequence[Sequence[int]], row: Method, n_best: int, drafts: tuple[str, int, int],
                options: SamplingOptions) -> list[DecodeResult]:
        if row.benchmark_only:
            return greedy_uncached(self.model, sources)
        return greedy(self.model, sources, copy_drafts(drafts), rest=rest_after_miss(self.model))

    def _beam(self, sources: Sequence[Sequence[int]], row: Method, n_best: int, drafts: tuple[str, int, int],
              options: SamplingOptions) -> list[DecodeResult]:
        return beam_search(self.model, sources, width=n_best, n_best=n_best, cached=not row.benchmark_only)

    def _sbs(self, sources: Sequence[Sequence[int]], row: Method, n_best: int, drafts: tuple[str, int, int],
             options: SamplingOptions) -> list[DecodeResult]:
        return speculative_beam(self.model, sources, n_best, copy_drafts(drafts), exact=row.lossless,
                                look_ahead=self.device.type != "cpu")

    def _sample(self, sources: Sequence[Sequence[int]], row: Method, n_best: int, drafts: tuple[str, int, int],
                options: SamplingOptions, writings: bool = False) -> list[DecodeResult]:
        """n_best independent samples per source (seeds seed, seed+1, ...), duplicates merged, best first;
        a one-answer method of this loop (relaxed) is deterministic and decoded once.
        Sources that are queries share the seeds, so that a query's samples do not hang on its batch-mates; sources
        that are writings of one query (writings) do not: writing w draws with seeds from seed + n_best * w, as
        writings drawing on the same random numbers gave samples alike, not the independent ones pooling wants."""
        drafter, length, _ = drafts
        mode = row.name
        if row.drafts == "model" and drafter == "none":
            mode = "sample"  # no draft tokens: plain sampling, which is what speculative sampling equals
        # The row alone says where drafts come from: the draft model is fed only to a method whose
        # drafts are the model's (not whenever the folder has one), and a copy drafter, which may ask
        # the model for its cross-attention, is built only for copy drafts.
        draft_model = self.draft_model if drafter == "model" else None
        factory = copy_drafts(drafts) if row.drafts == "query" else None
        options = dataclasses.replace(options, draft_len=length)
        results: list[DecodeResult] = []
        for w, src in enumerate(sources):
            stats, seen = DecodeStats(), {}
            first_seed = options.seed + (n_best * w if writings else 0)
            started = time.perf_counter()
            try:
                for k in range(n_best):
                    drawn = sample_decode(self.model, [src], mode, factory,
                                          dataclasses.replace(options, seed=first_seed + k), draft_model)[0]
                    stats.add(drawn.stats)
                    hyp = drawn.hypotheses[0]
                    seen.setdefault(hyp.tokens, hyp)
            except QueryTimeout as timeout:  # the sources before this one are whole: handed on, not decoded again
                # the draw cut short gives no sample, but its calls are counted (sample_one hands them on), as a
                # stopped beam's are
                for cut in timeout.found:
                    stats.add(cut.stats)
                stats.wall_time_s = time.perf_counter() - started
                # The last source keeps the samples it had drawn: each is whole and a true sample, so k of n_best
                # drawn are an honest answer, stopped, as beam search's search is. A source before the last is
                # handed on without them, its calls alone, as speculative_beam hands on a search cut short: the
                # later ones never began (_decode_limited decodes it and them again one by one;
                # _stopped_writings leaves out a writing not read whole but counts its calls).
                kept = seen.values() if len(results) == len(sources) - 1 else ()
                stopped = DecodeResult(sorted(kept, key=lambda h: -h.score), stats)
                raise QueryTimeout(str(timeout), found=[*results, stopped],
                                   searched=[True] * len(results) + [False]) from None
            results.append(DecodeResult(sorted(seen.values(), key=lambda h: -h.score), stats))
        return results

    def check_predict(self, method: str, n_best: int, draft_len: int | None, n_drafts: int | None, batch_size: int,
                      sampling: SamplingOptions | None, time_limit_s: float | None, augment: int,
                      ion_writing: bool) -> SamplingOptions | None:
        """predict's options (all of them, as predict passes them) checked as predict checks them before it reads a
        query: a ValueError for one it cannot take, or cannot take with this model; `sampling`'s knobs as plain
        numbers. The server checks a request's options so before the request waits its turn to decode."""
        if sampling is not None:
            sampling = check_sampling(sampling)
            # decode sets it from draft_len below (_sample): a length set only here was dropped without a word
            if sampling.draft_len not in (SamplingOptions().draft_len, draft_len):
                if "draft_len" not in method_row(method).knobs:  # sent to predict's draft_len, refused there in turn
                    raise ValueError(f"{method} does not read draft_len (SamplingOptions.draft_len); the methods "
                                     f"that do: {readers_of('draft_len')}")
                raise ValueError(f"predict reads the draft length from its own draft_len, not from "
                                 f"SamplingOptions.draft_len: give draft_len={sampling.draft_len} to predict")
        check_options(method, n_best, batch_size, augment, draft_len, n_drafts, time_limit_s, sampling)
        if not isinstance(ion_writing, (bool, numpy.bool_)):  # "no" was read as True
            raise ValueError(f"ion_writing must be True or False, not {ion_writing!r}")
        self.check_method(method)
        self.check_augment(augment)
        return sampling

    # One query gives one result, a list (any iterable of queries) a list: told apart for a type checker, which
    # refused `predict("CCO").ok` under the union alone. A str is an Iterable[str] too: the first overload wins.
    @overload
    def predict(self, smiles: str, method: str = ..., n_best: int = ..., draft_len: int | None = ...,  # type: ignore[overload-overlap]
                n_drafts: int | None = ..., batch_size: int = ..., sampling: SamplingOptions | None = ...,
                time_limit_s: float | None = ..., augment: int = ..., ion_writing: bool = ...) -> QueryResult: ...

    @overload
    def predict(self, smiles: Iterable[str], method: str = ..., n_best: int = ..., draft_len: int | None = ...,
                n_drafts: int | None = ..., batch_size: int = ..., sampling: SamplingOptions | None = ...,
                time_limit_s: float | None = ..., augment: int = ...,
                ion_writing: bool = ...) -> list[QueryResult]: ...

    @rdkit_quietly
    @as_memory_error()  # the host's memory run out inside torch is a MemoryError, as it is in Python and NumPy
    def predict(self, smiles: str | Iterable[str], method: str = DEFAULT_METHOD, n_best: int = 1,
                draft_len: int | None = None, n_drafts: int | None = None,
                batch_size: int = DEFAULT_BATCH_SIZE, sampling: SamplingOptions | None = None,
                time_limit_s: float | None = DEFAULT_TIME_LIMIT_S, augment: int = 1,
                ion_writing: bool = False) -> QueryResult | list[QueryResult]:
        """Predictions for one SMILES (-> QueryResult) or a list (-> list, same order).

        Sampling methods take their knobs (temperature, top_k, beta, tau, delta, seed) from
        `sampling`; their n_best is the number of samples drawn (duplicates merged).
        A query still decoding after `time_limit_s` seconds gets an error row; the others keep theirs. Beam search
        is stopped within a step of the limit and its row keeps, besides the error, the answers it had finished and
        its best unfinished ones (concern TIMED_OUT), with the calls they cost; a sampling method's row keeps the
        samples it had drawn (the one being drawn is lost, its calls counted); greedy's and its speculative kin's
        row keeps the calls it made, and no answer. Read in several writings (augment),
        a query's writings share its one limit; stopped, it keeps what those read by then gave, pooled
        (_stopped_writings).
        augment > 1 (models trained on many writings of each query, see `augmentable`): the model reads
        the query in up to `augment` writings (rsmiles.root_views) and the answers are pooled by a power
        mean of their probabilities over the writings (`pool_writings`); about `augment` times the decoding work.
        Batches are cut from the queries in order of their token count, so that a batch's rows are of like
        length (a batch pays for padding to its longest source and runs until its longest answer ends);
        the results keep the input order. Callers that stream hand over `window_size(batch_size, augment)` queries.
        ion_writing: read a hydride written as one species, which the model cannot read, as the ions USPTO
        writes (chem.ION_WRITINGS; canonical_query shows them); otherwise such a query gets an error that
        offers that writing (QueryResult.suggestion).
        Given up by its caller (limits.abandon_when: the server stopping), it raises PartlyDecoded, which holds the
        results done by then.
        """
        sampling = self.check_predict(method, n_best, draft_len, n_drafts, batch_size, sampling, time_limit_s,
                                      augment, ion_writing)
        # One query unless a list of them: None, a number or bytes is one query, refused as not text.
        single = isinstance(smiles, (str, bytes, bytearray)) or not isinstance(smiles, Iterable)
        texts = [smiles] if single else list(smiles)
        results: list[QueryResult | None] = [None] * len(texts)
        good: list[tuple[int, _Query]] = []
        try:
            for i, text in enumerate(texts):
                # the caller's stop (limits.abandon_when) looked at between queries too: a server's window of 1,000
                # rings of 2,000 atoms, each read in 0.8 s by RDKit and refused as too long, held the models for 13
                # minutes, past the request's budget and after its client had gone, with no decoder step to stop it
                check_abandoned()
                try:
                    good.append((i, self.prepare(text, ion_writing)))
                except ValueError as exc:
                    results[i] = QueryResult(query=str(text), method=method, error=str(exc),
                                             suggestion=getattr(exc, "suggestion", ""), writings=0,
                                             unlabelled=getattr(exc, "unlabelled", ""))
            if augment > 1:  # one batch per query: its writings, under the query's one time limit
                for i, query in good:
                    views = self._views(query, augment)
                    started = time.perf_counter()
                    try:
                        with time_limit(time_limit_s):
                            decoded_views = list(self.decode([v.ids for v in views], method, n_best, draft_len,
                                                             n_drafts, sampling, writings=True))
                    except QueryTimeout as timeout:
                        results[i] = self._stopped_writings(texts[i], query, views, list(timeout.found),
                                                            timeout.searched, method, n_best, augment,
                                                            time_limit_s,  # type: ignore[arg-type]
                                                            time.perf_counter() - started)
                        continue
                    results[i] = self._pooled(texts[i], views, decoded_views, method, n_best, augment,
                                              time.perf_counter() - started)
                good = []
            good.sort(key=lambda item: len(item[1].ids))  # stable: equal lengths keep their input order
            for start in range(0, len(good), batch_size):
                chunk = good[start:start + batch_size]
                started = time.perf_counter()
                decoded = self._decode_limited([q.ids for _, q in chunk], method, n_best, draft_len, n_drafts,
                                               sampling, time_limit_s)
                # Each query's share of its batch's time: greedy and beam search give every row the whole batch's, so
                # a list's times added up to several times the call's (and time_ms over HTTP was the batch's).
                share = (time.perf_counter() - started) / len(chunk) if len(chunk) > 1 else None
                for (i, query), result in zip(chunk, decoded):
                    if isinstance(result, DecodeResult):
                        results[i] = self._to_result(texts[i], query, timed(result, share), method, n_best)
                    elif result.found is None:
                        results[i] = QueryResult(query=texts[i], canonical_query=query.canonical, method=method,
                                                 error=result.error, writings=0)
                    else:
                        results[i] = dataclasses.replace(self._to_result(texts[i], query, timed(result.found, share),
                                                                         method, n_best, TIMED_OUT), error=result.error)
        except Abandoned as exc:  # the caller gave the call up: what was done by then is handed back with it
            raise PartlyDecoded(str(exc), [None if r is None else dataclasses.replace(r, task=self.task)
                                           for r in results]) from exc
        results = [dataclasses.replace(result, task=self.task) for result in results]  # type: ignore[type-var]
        return results[0] if single else results  # type: ignore[return-value]

    def _decode_limited(self, sources: list[tuple[int, ...]], method: str, n_best: int, draft_len: int | None,
                        n_drafts: int | None, sampling: SamplingOptions | None,
                        limit_s: float | None) -> list[DecodeResult | _Stopped]:
        """`decode` under a time limit of limit_s per query, the batch's limit being their sum; on a timeout,
        only the slow queries end stopped. A decoder that says what it found for every query (beam search, greedy
        and its speculative kin) gives each query whose search had ended its result and each other its search as it
        stood (a greedy one's calls alone): a query still searching after the batch's time, most of it alone once
        its batch-mates had ended, would not end in its own limit alone, and a retry would only run the batch past
        its time (a route planner's expansion, past its search's limit).
        A decoder that runs its queries one after another (sbs, sampling) and says which leading ones had ended
        gives those their results (stopped in its last query, that one too what it had: sbs's search, the samples
        drawn); the queries after them, and every query of a decoder that says nothing, are decoded again one at a
        time, the one stopped keeping the calls it made in the batch (they were paid for, as a stopped beam's are)."""
        try:
            with time_limit(None if limit_s is None else limit_s * len(sources)):
                return list(self.decode(sources, method, n_best, draft_len, n_drafts, sampling))
        except QueryTimeout as timeout:
            found = [result if isinstance(result, DecodeResult) else None for result in timeout.found]
            stopped = stopped_message(limit_s, 1, method, n_best)  # type: ignore[arg-type]  # a timeout had a limit
            if len(found) == len(sources):
                return [result if ended else _Stopped(stopped, result)  # type: ignore[misc]
                        for result, ended in zip(found, timeout.searched)]
            if len(sources) == 1:
                return [_Stopped(stopped, None)]
            kept: list[DecodeResult | _Stopped] = []  # the leading queries that had ended
            for result, searched in zip(found, timeout.searched):
                if result is None or not searched:
                    break
                kept.append(result)
            cut = found[len(kept)] if len(found) > len(kept) else None  # the query stopped, with its calls by then
        again = [self._decode_limited([src], method, n_best, draft_len, n_drafts, sampling, limit_s)[0]
                 for src in sources[len(kept):]]
        if cut is not None:
            again[0] = _with_calls(again[0], cut.stats)
        return kept + again

    @property
    def augmentable(self) -> bool:
        """Trained on many rooted writings of each query (prepare-data --task retro or forward --augment N
        > 1), so that reading a query in several rooted writings and pooling the answers pays: measured on
        the retro model, see its card. Data with random writings (forward-mit) records another key: reading
        rooted writings cost a forward model trained so (CPU run 13) five points of top-1."""
        return root_aligned(self.config.get("data_stats", {}))

    def check_augment(self, augment: int) -> None:
        """Refuse an augment this model cannot use, with the reason."""
        if not 1 <= augment <= MAX_AUGMENT:
            raise ValueError(f"augment must be between 1 and {MAX_AUGMENT}, not {augment}")
        if augment > 1 and not self.augmentable:
            raise ValueError(f"{self.path.name} was trained on one writing of each query (canonical SMILES), "
                             "so other writings would only confuse it: leave augment at 1, its default (--augment "
                             "on the command line)")

    def _views(self, query: _Query, n: int) -> list[_Query]:
        """The query and up to n - 1 other writings of it that this model can read."""
        limit = min(MAX_QUERY_TOKENS, self.model.cfg.max_positions)
        return [query, *(_Query(query.text, text, ids)
                         for text, ids in other_writings(query.canonical, n, self.vocab, limit))]

    def calibration_for(self, method: str, augment: int = 1, n_best: int | None = None) -> Calibration | None:
        """The calibration fitted to the answers `method` gives, `n_best` of them (calibration.kind_of: beam
        search's or greedy's, which a beam of width 1 gives) read in `augment` writings (calibrate --method
        --augment), if any: pooled scores, and greedy's against beam search's, map to right answers differently.
        None for sampling and lossy methods, and where no fit for these weights exists."""
        kind = kind_of(method, n_best)
        if kind is None:
            return None
        if (kind, augment) not in self._calibrations:
            self._calibrations[kind, augment] = load_calibration(self.path, augment, kind)
        return self._calibrations[kind, augment]

    def _pooled(self, given: str, views: list[_Query], decoded: list[DecodeResult], method: str,
                n_best: int, augment: int, seconds: float, unfinished: str = STOPPED) -> QueryResult:
        """One result from the answers to each writing of a query: each distinct answer scored by the log
        of the power mean of its probabilities over the writings read (absent: 0; pool_writings), best
        n_best kept. Its tokens and provenance are those of the first writing that gave it; its
        confidence comes from the calibration fitted to this method's answers in `augment` writings, or
        is None without one. `seconds`: the time the writings took to decode, the result's wall time.
        `unfinished`: the concern of a hypothesis the decoder had not ended (why it stopped)."""
        canonical = views[0]
        read = list(zip(views, decoded))
        first: dict[str, tuple[Prediction, _Query]] = {}  # answer -> its first prediction and that one's writing
        answers: list[list[tuple[str, float]]] = []  # per writing read, in its beam's order
        stats = DecodeStats()
        for view, result in read:
            stats.add(result.stats)
            given_here = self._predictions(view, result, canonical.canonical, unfinished)
            answers.append([(p.smiles, p.score) for p in given_here])
            for p in given_here:
                first.setdefault(p.smiles, (p, view))
        # The call's time: greedy and beam search decode the writings as one batch, each result holding the
        # batch's time, but sbs and sampling decode them one after another, each holding its own.
        stats.wall_time_s = seconds
        calibration = self.calibration_for(method, augment, n_best)
        predictions = []
        for rank, (smiles, score, count) in enumerate(pool_writings(answers), start=1):
            prediction, where = first[smiles]
            predictions.append(dataclasses.replace(
                prediction, rank=rank, model_rank=rank, score=score, views=count,
                source_tokens=() if where is canonical else tuple(self.vocab.tokens[i] for i in where.ids)))
        # The writings give up to augment x n_best answers: rank them all, then list n_best, so that sane
        # answers from beyond the model's first n_best take the places of flagged ones (measured on the
        # forward model: the model card, "Flagged answers give their places to sane ones").
        ranked = rank_answers(with_confidence(predictions, calibration))
        set_aside = tuple(p for p in ranked[n_best:] if p.model_rank <= n_best)
        return QueryResult(given, canonical.canonical, tuple(self.vocab.tokens[i] for i in canonical.ids),
                           ranked[:n_best], stats, method, dtype=self.dtype, set_aside=set_aside, writings=len(read))

    def _stopped_writings(self, given: str, query: _Query, views: list[_Query], found: list[DecodeResult],
                          searched: Sequence[bool], method: str, n_best: int, augment: int, limit_s: float,
                          seconds: float) -> QueryResult:
        """The row of a query read in several writings (`views`) and stopped at its time limit, from the results the
        decoder handed on (`found`; `searched`: whether each had ended), its error saying so. For every writing
        (beam search; sbs or sampling stopped in the last with answers): pooled, the hypotheses not ended marked
        TIMED_OUT. Where a writing stopped without answers (greedy and its speculative kin, which decode the
        writings as one batch and hand on no answer cut short; sbs or sampling stopped in a writing before the
        last, or in the last before it gave any answer, which would only have lowered every pooled score): the
        leading writings read whole, pooled as reading that many writings pools them (the same writings:
        rsmiles.root_views gives more by adding to fewer), with that many writings' calibration; none (stopped in
        the first writing): the error alone. The calls of a writing left out are counted."""
        left_out = DecodeStats()
        if any(not ended and not result.hypotheses for result, ended in zip(found, searched)):
            whole = next((k for k, ended in enumerate(searched) if not ended), len(found))
            for result in found[whole:]:
                left_out.add(result.stats)
            del found[whole:]
        read = len(found)
        error = stopped_message(limit_s, len(views), method, n_best, read)
        if not found:  # its calls, where it made some, computed in this model's dtype like any decoded row's
            left_out.wall_time_s = seconds
            return QueryResult(query=given, canonical_query=query.canonical, stats=left_out, method=method,
                               error=error, dtype=self.dtype if left_out.model_calls else "", writings=0)
        if read == len(views):
            pooled = self._pooled(given, views, found, method, n_best, augment, seconds, TIMED_OUT)
        else:
            pooled = self._pooled(given, views[:read], found, method, n_best, read, seconds)
        pooled.stats.add(left_out)  # a fresh DecodeStats of _pooled's
        pooled.stats.wall_time_s = seconds
        return dataclasses.replace(pooled, error=error)

    def _to_result(self, given: str, query: _Query, result: DecodeResult, method: str, n_best: int,
                   unfinished: str = STOPPED) -> QueryResult:
        """One writing's decode as a row. Stopped before a first answer, it read no writing (0, as _stopped_writings
        says of one stopped in its first), and before a first call it computed in no dtype ("")."""
        return QueryResult(given, query.canonical, tuple(self.vocab.tokens[i] for i in query.ids),
                           rank_answers(with_confidence(fold_repeats(self._predictions(query, result, "", unfinished)),
                                                        self.calibration_for(method, 1, n_best))),
                           result.stats, method, dtype=self.dtype if result.stats.model_calls else "",
                           writings=1 if result.hypotheses else 0)

    def _predictions(self, query: _Query, result: DecodeResult, judged_against: str = "",
                     unfinished: str = STOPPED) -> list[Prediction]:
        """A decode's hypotheses as answers, in the model's order, checked (against the canonical query,
        `judged_against` when `query` is another writing of it); no confidence yet (with_confidence).
        `unfinished`: the concern of a hypothesis the decoder had not ended (STOPPED, or TIMED_OUT)."""
        predictions = []
        for rank, hyp in enumerate(result.hypotheses, start=1):
            tokens = tuple(self.vocab.tokens[t] for t in hyp.tokens)
            raw = "".join(tokens)
            canon = canonical_or_none(raw)
            concerns = answer_concerns(canon, judged_against or query.canonical, self.task) if canon else ()
            if not hyp.finished:  # an invalid one too: a string cut short says why it is no molecule
                concerns = (*concerns, unfinished)
            predictions.append(Prediction(rank, canon or raw, hyp.score, canon is not None, tokens,
                                          hyp.provenance, hyp.finished, concerns, rank))
        return predictions
