"""The lean decoder call in C (csrc/decoder_step.c), for float32 inference on CPU (issue 16).

NumpyStep's call is ~25 interpreter round trips per layer, and at the few rows of a greedy step or
a verify call they cost more than the arithmetic (session-17 profile: a one-token retro call 0.43 ms,
its products 0.15 ms). `NativeStep` does the whole call (every layer and the output projection) in
one C function, called through ctypes, on the same folded weights; the encoder and the cross
keys/values of a new cache run in C too.

The C file is compiled at first use with the machine's C compiler for this CPU (AVX2, FMA and F16C
are required; AVX-512, VNNI and AMX used where it has them) into a per-user cache, keyed by the source's
hash; with OpenMP where the compiler has it, so that a call's products and attention use torch's thread
count (results do not depend on it). MOLSPEC_NATIVE_BUILD picks another build (chosen_build).
Where that cannot happen (no compiler, another CPU, weights not float16 values), `native_unavailable`
says why and the engine "auto" takes the NumPy step.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .cache import KVCache
from .decoding.result import GENERATED, DecodeStats
from . import limits
from .limits import QueryTimeout, check_deadline
from .npstep import NumpyStep, _Affine, _np, fp16_exact
from .tokenizer import BOS_ID, EOS_ID, PAD_ID

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "decoder_step.c"
# native: AVX-512 where the CPU has it
CFLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-std=c11", "-pthread", "-Werror=implicit-function-declaration")
# Threads: the C call splits its work among OpenMP threads where the compiler has OpenMP; a compiler
# without it (clang without libomp, say) builds the single-threaded library instead.
OPENMP = "-fopenmp"
# Instruction sets the C step can be built for: "native" is this CPU's best (AVX-512 or AVX2); "avx2"
# leaves AVX-512 out, so that a machine with it also builds and tests the AVX2 code other CPUs run.
# "plain-int8" also leaves out the int8 kernels (VNNI, AVX2) for the plain loop they must equal (tests);
# "no-amx" leaves out AMX's tiles, for the VNNI kernel an AVX-512 CPU without them runs (tests, benchmarks).
ISA_FLAGS = {"native": (), "avx2": ("-mno-avx512f",), "plain-int8": ("-mno-avx512f", "-DINT8_PLAIN"),
             "no-amx": ("-mno-amx-tile", "-mno-amx-int8")}
CPU_FLAGS = ("avx2", "fma", "f16c")
# The build the native engine loads: "native", unless this environment variable names another of ISA_FLAGS
# (MOLSPEC_NATIVE_BUILD=no-amx times the VNNI kernel beside AMX on one machine; the README's figures do so).
BUILD_VARIABLE = "MOLSPEC_NATIVE_BUILD"


def chosen_build() -> str:
    """The instruction set the native engine is built for here: "native" or BUILD_VARIABLE's choice."""
    isa = os.environ.get(BUILD_VARIABLE) or "native"
    if isa not in ISA_FLAGS:
        raise NativeUnavailable(f"{BUILD_VARIABLE}={isa!r} names no build of the C step; choose from "
                                f"{', '.join(ISA_FLAGS)}")
    return isa


@functools.lru_cache(maxsize=1)
def _cpuinfo_text() -> str:
    """Linux's /proc/cpuinfo, read once ("" elsewhere): the app's sidebar names the CPU on every rerun."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _cpuinfo(field: str) -> str:
    """The first value of `field` in Linux's /proc/cpuinfo ("" where there is none)."""
    for line in _cpuinfo_text().splitlines():
        name, _, value = line.partition(":")
        if name.strip() == field:
            return value.strip()
    return ""


def _cpu_flags() -> set[str]:
    """The x86 feature flags of this CPU as Linux reports them; empty elsewhere."""
    return set(_cpuinfo("flags").split())


def cpu_description() -> str:
    """This CPU for people: its model name and its widest vector instructions, which the C step is
    built for and every CPU speed figure depends on ("AMD EPYC with AVX-512 and VNNI", "AMD EPYC with AVX2",
    "Intel Xeon with AVX-512, VNNI and AMX": int8 products run on AMX's tiles where the AVX-512 build has them).
    VNNI is named only in its AVX-512 form, the one the int8 products use (csrc: int8_vnni): a CPU with AVX-VNNI, its
    256-bit form, and no AVX-512 runs them on the AVX2 kernel."""
    name = _cpuinfo("model name") or platform.processor() or platform.machine()
    flags = _cpu_flags()
    vector = ["AVX-512"] if "avx512f" in flags else ["AVX2"] if "avx2" in flags else []
    vector += ["VNNI"] if "AVX-512" in vector and "avx512_vnni" in flags else []
    vector += ["AMX"] if "AVX-512" in vector and {"amx_tile", "amx_int8"} <= flags else []
    if len(vector) > 2:
        return f"{name} with {', '.join(vector[:-1])} and {vector[-1]}"
    return f"{name} with {' and '.join(vector)}" if vector else name


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "molspec"


class NativeUnavailable(RuntimeError):
    """The C step cannot run here; the message says why."""


@functools.cache
def _library(isa: str = "native") -> ctypes.CDLL:
    """The compiled decoder step, built once per source version, CPU kind and instruction set."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise NativeUnavailable(f"the C step is written for x86-64 with AVX2; this machine is {platform.machine()}")
    if not _cpu_flags():  # an x86-64 Mac with AVX2 was told 'this CPU lacks avx2, fma, f16c'
        raise NativeUnavailable("this CPU's features could not be read (the C step reads them from Linux's "
                                "/proc/cpuinfo, absent here or without a flags line), so whether it has "
                                f"{', '.join(CPU_FLAGS)}, which the C step needs, is not known")
    missing = [flag for flag in CPU_FLAGS if flag not in _cpu_flags()]
    if missing:
        raise NativeUnavailable(f"this CPU lacks {', '.join(missing)}, which the C step needs")
    source = SOURCE.read_bytes()
    cpu = " ".join(sorted(_cpu_flags()))  # -march=native builds for this CPU kind
    compiler: list[str] | None = None
    for flags in (CFLAGS + ISA_FLAGS[isa] + (OPENMP,), CFLAGS + ISA_FLAGS[isa]):
        key = hashlib.sha256(source + " ".join(flags).encode() + cpu.encode()).hexdigest()[:16]
        target = _cache_dir() / f"decoder_step-{key}.so"
        if target.exists():
            break
        try:
            # looked for only to build: a build in the cache, single-threaded too, loads without one (an image that
            # built it, then dropped gcc, was refused the C step)
            compiler = compiler or _compiler()
            _build(compiler, flags, target)
        except OSError as exc:  # an unwritable cache folder (_compiler checked that the compiler can be run)
            raise NativeUnavailable(f"building the C step into {target.parent} failed: {exc}; set XDG_CACHE_HOME to "
                                    "a folder that can be written (the build goes into its molspec/ folder)") from None
        except NativeUnavailable as exc:
            if OPENMP not in flags:
                raise
            log.info("the C step with OpenMP cannot be built here (%s); taking it single-threaded", exc)
            continue
        log.info("built the C decoder step: %s", target)
        break
    try:
        library = ctypes.CDLL(str(target))
    except OSError as exc:
        raise NativeUnavailable(f"loading the built C step failed: {exc}") from None
    library.decoder_step.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    library.encode.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_void_p]
    library.cross_keys_values.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    library.decoder_step.restype = ctypes.c_int
    library.beam_run.argtypes = [ctypes.c_void_p] * 3
    library.beam_run.restype = ctypes.c_int
    library.greedy_step.argtypes = [ctypes.c_void_p] * 3
    library.greedy_step.restype = ctypes.c_int
    library.greedy_run.argtypes = [ctypes.c_void_p] * 3
    library.greedy_run.restype = ctypes.c_int
    library.beam_select.argtypes = [ctypes.c_int32] * 4 + [ctypes.c_void_p] * 4
    library.beam_select.restype = None
    library.log_softmax_rows.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p]
    library.log_softmax_rows.restype = None
    library.int8_vnni.restype = ctypes.c_int
    library.int8_amx.restype = ctypes.c_int
    library.has_threads.restype = ctypes.c_int
    return library


def _compiler() -> list[str]:
    """The C compiler's command: $CC read as a command line, as make reads it ("ccache gcc", "gcc -m64"), else cc or
    gcc. CC="ccache gcc" was run as one program of that name, and a CC naming no program was told as a failure of
    the cache folder ("building the C step into ~/.cache/molspec failed"), whose remedy is another."""
    named = os.environ.get("CC", "").strip()
    if not named:
        found = shutil.which("cc") or shutil.which("gcc")
        if found is None:
            raise NativeUnavailable("no C compiler found (cc or gcc; or set CC)")
        return [found]
    try:
        command = shlex.split(named)
    except ValueError as exc:  # an unclosed quote: it escaped native_unavailable, and a CPU Predictor.load failed
        raise NativeUnavailable(f"CC={named!r} cannot be read as a command line ({exc}); set CC to a C compiler (or "
                                "leave it unset: cc or gcc is taken)") from None
    if shutil.which(command[0]) is None:
        raise NativeUnavailable(f"CC={named!r} names no program that can be run here; set CC to a C compiler (or "
                                "leave it unset: cc or gcc is taken)")
    return command


def _build(compiler: list[str], flags: tuple[str, ...], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:  # built aside, then renamed: atomic
        built = Path(tmp) / target.name
        result = subprocess.run([*compiler, *flags, str(SOURCE), "-o", str(built), "-lm"],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise NativeUnavailable(f"compiling {SOURCE.name} failed: {result.stderr.strip()[:500]}")
        built.replace(target)


def native_unavailable(isa: str | None = None) -> str | None:
    """Why the C step cannot run on this machine, or None when it can (isa None: chosen_build())."""
    try:
        _library(isa or chosen_build())
    except NativeUnavailable as exc:
        return str(exc)
    return None


class _CAffine(ctypes.Structure):
    _fields_ = [("weight", ctypes.c_void_p), ("bias", ctypes.c_void_p), ("gain", ctypes.c_void_p),
                ("eps", ctypes.c_float), ("k", ctypes.c_int32), ("n", ctypes.c_int32), ("n_pad", ctypes.c_int32),
                ("q", ctypes.c_void_p), ("q_scale", ctypes.c_void_p), ("q_sum", ctypes.c_void_p),
                ("k4", ctypes.c_int32)]


class _CLayer(ctypes.Structure):
    _fields_ = [(name, _CAffine) for name in ("qkv", "self_out", "cross_query", "cross_out", "up", "down")]


class _CEncoderLayer(ctypes.Structure):
    _fields_ = [(name, _CAffine) for name in ("qkv", "out", "up", "down")]


class _CModel(ctypes.Structure):
    _fields_ = [("n_layers", ctypes.c_int32), ("d", ctypes.c_int32), ("heads", ctypes.c_int32),
                ("head_dim", ctypes.c_int32), ("d_ff", ctypes.c_int32), ("vocab", ctypes.c_int32),
                ("max_positions", ctypes.c_int32), ("query_scale", ctypes.c_float), ("threads", ctypes.c_int32),
                ("layers", ctypes.POINTER(_CLayer)), ("output", ctypes.POINTER(_CAffine)),
                ("embed", ctypes.c_void_p), ("positions", ctypes.c_void_p),
                ("n_encoder_layers", ctypes.c_int32), ("encoder_layers", ctypes.POINTER(_CEncoderLayer)),
                ("encoder_gain", ctypes.c_void_p), ("encoder_shift", ctypes.c_void_p), ("encoder_eps", ctypes.c_float),
                ("cross_keys_values", ctypes.POINTER(_CAffine))]


class _CCall(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int32), ("t_new", ctypes.c_int32), ("capacity", ctypes.c_int32),
                ("upto", ctypes.c_int32), ("src_len", ctypes.c_int32), ("cross_batch", ctypes.c_int32),
                ("pad_batch", ctypes.c_int32), ("tokens", ctypes.c_void_p), ("lengths", ctypes.c_void_p),
                ("keys", ctypes.c_void_p), ("values", ctypes.c_void_p), ("cross_keys", ctypes.c_void_p),
                ("cross_values", ctypes.c_void_p), ("src_pad", ctypes.c_void_p), ("pending", ctypes.c_void_p),
                ("logits", ctypes.c_void_p), ("weights", ctypes.c_void_p), ("rows", ctypes.c_void_p),
                ("cross_rows", ctypes.c_void_p)]


class GreedyFound(NamedTuple):
    """What NativeStep.greedy_search found for a query: its tokens (eos left out), where each came from (a
    source position, or GENERATED), its score, whether it finished (else it stopped at its budget, or at the time
    limit: `stopped`), and the calls' counts."""
    tokens: tuple[int, ...]
    provenance: tuple[int, ...]
    score: float
    finished: bool
    stats: DecodeStats
    stopped: bool = False  # by the time limit: its tokens are as far as it had got, its counts those of its calls


class BeamFound(NamedTuple):
    """What NativeStep.beam_search found: per query, its hypotheses in the order found (tokens, score,
    finished), the unfinished ones being its live slots when it stopped at its step budget or at the time
    limit; the steps (decoder calls) each query took part in; the rows the calls were fed, all queries
    together; per query, whether the time limit stopped its search (None: no query was stopped)."""
    found: list[list[tuple[tuple[int, ...], float, bool]]]
    calls: list[int]
    rows_fed: int
    stopped: list[bool] | None = None


class _CBeamRun(ctypes.Structure):
    _fields_ = ([(name, ctypes.c_int32) for name in ("queries", "width", "n_best", "prune", "eos", "steps", "step",
                                                     "history_width")]
                + [(name, ctypes.c_void_p) for name in (
                    "budgets", "active", "scores", "finished_top", "finished_count", "calls")]
                + [("rows_fed", ctypes.c_int64)]
                + [(name, ctypes.c_void_p) for name in ("history", "logits",
                    "log_probs", "top_scores", "top_index", "parents", "fed", "fed_tokens", "fed_lengths", "moved",
                    "slots")]
                + [("n_found", ctypes.c_int64), ("n_found_tokens", ctypes.c_int64)]
                + [(name, ctypes.c_void_p) for name in ("found", "found_scores", "found_tokens")])


class _CGreedy(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p)
                for name in ("drafts", "accepted", "argmax", "best_log_probs", "peaks", "lengths")]


class _CGreedyRun(ctypes.Structure):
    _fields_ = ([(name, ctypes.c_int32) for name in ("rows", "bos", "eos", "pad", "generated", "steps", "history_width",
                                                     "draft_len", "max_suffix", "slots", "src_width")]
                + [(name, ctypes.c_void_p) for name in (
                    "sources", "source_lengths", "budgets", "active", "finished", "pending", "lengths", "tokens",
                    "origins", "written", "scores", "calls", "proposed", "accepted_total", "rejections", "emitted",
                    "fed", "fed_lengths", "draft_counts", "accepted", "new_lengths", "draft_starts", "fed_tokens",
                    "argmax", "best", "logits")])


class _Binding:
    """A cache's tensors as the C call reads them: pointer tables made once per cache, and again only
    after a reorder or a gather puts new tensors in it (each call checks that they are the same)."""

    def __init__(self, cache: KVCache):
        self.tensors = _tensors_of(cache)
        layers = cache.layers
        pointers = ctypes.c_void_p * len(layers)
        cross_keys = [layer.cross_keys.contiguous() for layer in layers]
        cross_values = [layer.cross_values.contiguous() for layer in layers]
        self.tables = [pointers(*(t.data_ptr() for t in group)) for group in (
            [layer.keys for layer in layers], [layer.values for layer in layers], cross_keys, cross_values)]
        pad = cache.src_pad_mask.contiguous() if cache.src_attention_mask() is not None else None
        self.held = cross_keys + cross_values + [pad]  # contiguous copies, if any were made, live as long
        self.call = _CCall()
        call, first = self.call, layers[0]
        call.capacity, call.src_len = int(first.keys.shape[2]), int(first.cross_keys.shape[2])
        call.cross_batch = int(first.cross_keys.shape[0])
        call.pad_batch = 1 if pad is None else int(pad.shape[0])
        call.keys, call.values, call.cross_keys, call.cross_values = (ctypes.addressof(t) for t in self.tables)
        call.src_pad = None if pad is None else pad.data_ptr()
        # The pending keys/values buffer and its per-layer views, by (batch, t_new): each call overwrites
        # them, and pending means "of the last call", so making them once per shape saves ~8 view ops a call.
        self.pending: dict[tuple[int, int], tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = {}
        self.greedy = _CGreedy()

    def pending_of(self, n_layers: int, batch: int, heads: int, t_new: int, head_dim: int
                   ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """(2, n_layers, batch, heads, t_new, head_dim) for the call to fill, and its 2 * n_layers
        views (batch, heads, 1, t_new, head_dim): the layers' keys, then their values."""
        made = self.pending.get((batch, t_new))
        if made is None:
            buffer = torch.empty(2, n_layers, batch, heads, t_new, head_dim)
            made = self.pending[batch, t_new] = (buffer,
                                                 buffer.view(2 * n_layers, batch, heads, 1, t_new, head_dim).unbind(0))
        return made


def _tensors_of(cache: KVCache) -> list[torch.Tensor | None]:
    return [t for layer in cache.layers for t in (layer.keys, layer.values, layer.cross_keys, layer.cross_values)
            ] + [cache.src_pad_mask]


DTYPES = ("float32", "int8")  # what the decoder call computes with (see NativeStep)
STEPS_PER_RUN = 16  # steps per C call of a search in C (NativeStep.beam_search, greedy_search), at most: the time
# limit is checked between them, and under a limit a call takes no more steps than fit in the time left
CAPACITY_REACHED = 4  # what a search run in C returns when the cache is full (csrc: CAPACITY_REACHED)


def _panels(affine: _Affine) -> tuple[np.ndarray, np.ndarray, int]:
    """W (k, n) as float16 panels of 16 output columns, (n_pad / 16, k, 16), and the bias padded to n_pad."""
    k, n = affine.weight.shape
    n_pad = -(-n // 16) * 16
    weight = np.zeros((k, n_pad), dtype=np.float16)
    weight[:, :n] = affine.weight
    panels = np.ascontiguousarray(weight.reshape(k, n_pad // 16, 16).transpose(1, 0, 2)).view(np.uint16)
    bias = np.zeros(n_pad, dtype=np.float32)
    bias[:n] = affine.bias
    return panels, bias, n_pad


def _int8_panels(affine: _Affine) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """W (k, n) as int8 per output column, W ~ q * scale with q in [-127, 127], in panels of 16 columns
    by 4 rows of k, (n_pad / 16, k4 / 4, 16, 4) (k4: k rounded up to 4, zero rows added), with the
    scales and the column sums of q, each padded to n_pad."""
    k, n = affine.weight.shape
    n_pad, k4 = -(-n // 16) * 16, -(-k // 4) * 4
    top = np.abs(affine.weight).max(axis=0)
    scale = np.where(top > 0, top / 127.0, 1.0).astype(np.float32)
    q = np.zeros((k4, n_pad), dtype=np.int8)
    q[:k, :n] = np.clip(np.rint(affine.weight / scale), -127, 127)
    panels = np.ascontiguousarray(q.reshape(k4 // 4, 4, n_pad // 16, 16).transpose(2, 0, 3, 1))
    scales = np.ones(n_pad, dtype=np.float32)
    scales[:n] = scale
    return panels, scales, q.sum(axis=0, dtype=np.int32), k4


class NativeStep(NumpyStep):
    """NumpyStep whose decoder call, encoder and cross keys/values of a new cache run in C (see the
    module docstring); it keeps NumpyStep's folded weights and its Python path for the rare call the
    C one does not take (cache slots that are not contiguous).

    dtype "int8" (issue 16's option): the products of the encoder and decoder layers take int8 weights
    (per output column scales) and int8 activations (per row, quantized at each product), summed in
    int32: a quarter of float32's weight bytes, and with VNNI (AVX-512) four products per instruction
    lane, with AVX2 alone the same sums through 16-bit pairs (csrc: int8_block); on AMX's tiles a block of
    16 rows by 16 columns by 64 of k per instruction (csrc: amx_sums; products of 3 rows or more). The tied output
    projection and everything between products stay float32. The int32 sums are exact, so the result
    is the same on every CPU and a token's logits still do not depend on the rest of the call. It
    computes another function than float32: its answers differ where the model is nearly undecided
    (the model cards give the agreement measured)."""

    masks_itself = True  # model.decode need not build the InPlace mask: the C call works it out from the lengths

    def __init__(self, model: torch.nn.Module, isa: str | None = None, dtype: str = "float32"):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
        self.dtype = dtype
        reason = native_unavailable(isa)
        if reason is not None:
            raise NativeUnavailable(reason)
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        if not fp16_exact(model.embed.weight, *(lin.weight for lin in linears)):
            raise NativeUnavailable("the C step reads weights as float16, and these weights are not float16 values; "
                                    "a model folder written in float16 has them: the shipped models, a training run's "
                                    "export/ folder (its last/ and best/ are float32), average --float16's output")
        if model.cfg.d_model % 16:
            raise NativeUnavailable(f"the C step needs a model width that is a multiple of 16, not {model.cfg.d_model}")
        super().__init__(model)
        self._library = _library(isa or chosen_build())
        self._keep: list[object] = []  # every array the C structures point into
        n_layers = len(self.layers)
        c_layers = (_CLayer * n_layers)()
        for c_layer, layer in zip(c_layers, self.layers):
            for name in ("qkv", "self_out", "cross_query", "cross_out", "up", "down"):
                setattr(c_layer, name, self._c_affine(getattr(layer, name), int8=dtype == "int8"))
        self._output = self._c_affine(self.output)
        c_encoder = (_CEncoderLayer * len(self.encoder_layers))()
        for c_layer, layer in zip(c_encoder, self.encoder_layers):
            for name in ("qkv", "out", "up", "down"):
                setattr(c_layer, name, self._c_affine(getattr(layer, name), int8=dtype == "int8"))
        c_cross = (_CAffine * n_layers)(*(self._c_affine(a, int8=dtype == "int8") for a in self.cross_keys_values))
        embed, positions = np.ascontiguousarray(self.embed), np.ascontiguousarray(self.positions)
        norm = model.encoder_norm
        gain, shift = _np(norm.weight).copy(), _np(norm.bias).copy()
        self._keep += [c_layers, c_encoder, c_cross, embed, positions, gain, shift]
        cfg = model.cfg
        self._model = _CModel(n_layers, cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.d_ff, cfg.vocab_size,
                              cfg.max_positions, float(self.scale), 1, c_layers, ctypes.pointer(self._output),
                              embed.ctypes.data, positions.ctypes.data, len(self.encoder_layers), c_encoder,
                              gain.ctypes.data, shift.ctypes.data, norm.eps, c_cross)

    def _c_affine(self, affine: _Affine, int8: bool = False) -> _CAffine:
        panels, bias, n_pad = _panels(affine)
        gain = None if affine.gain is None else np.ascontiguousarray(affine.gain.numpy(), dtype=np.float32)
        self._keep += [panels, bias, gain]
        k, n = affine.weight.shape
        c_affine = _CAffine(panels.ctypes.data, bias.ctypes.data, None if gain is None else gain.ctypes.data,
                            affine.eps, k, n, n_pad)
        if int8:
            q, scales, sums, k4 = _int8_panels(affine)
            self._keep += [q, scales, sums]
            c_affine.q, c_affine.q_scale, c_affine.q_sum, c_affine.k4 = (q.ctypes.data, scales.ctypes.data,
                                                                         sums.ctypes.data, k4)
        return c_affine

    def _c_model(self) -> object:
        """The C model for one call, told the threads it may use: torch's thread count (what --threads
        sets), as every torch operation of the process takes; one where the library has no OpenMP."""
        self._model.threads = torch.get_num_threads()
        return ctypes.byref(self._model)

    @property
    def threaded(self) -> bool:
        """Whether the C calls can use several threads here (the library was built with OpenMP)."""
        return bool(self._library.has_threads())

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """Seq2SeqTransformer.encode in C: src (B, S) padded with PAD_ID -> memory (B, S, d)."""
        check_deadline()  # the per-query time limit (limits.py): model.encode hands over without a check
        batch, length = src.shape
        if length > self.max_positions:
            raise ValueError(f"sequence longer than the model's {self.max_positions} positions")
        ids = src.to(torch.int64).contiguous()
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < self.embed.shape[0]:
            raise ValueError("token id outside the model's vocabulary")  # C would read past the table
        keep = (ids != PAD_ID).to(torch.uint8)
        memory = torch.empty(batch, length, self.d_model)
        if self._library.encode(self._c_model(), batch, length, ids.data_ptr(),
                                None if bool(keep.all()) else keep.data_ptr(), memory.data_ptr()) != 0:
            raise MemoryError("the C encoder could not allocate its scratch memory")
        return memory

    def cross_keys_values_of(self, memory: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Decoder layer `layer`'s cross-attention keys and values of memory: (B, H, S, hd) each, contiguous."""
        batch, length, _ = memory.shape
        memory = memory.detach().float().contiguous()
        keys = torch.empty(batch, self.n_heads, length, self.head_dim)
        values = torch.empty_like(keys)
        if self._library.cross_keys_values(self._c_model(), layer, batch, length, memory.data_ptr(),
                                           keys.data_ptr(), values.data_ptr()) != 0:
            raise MemoryError("the C step could not allocate its scratch memory")
        return keys, values

    @property
    def int8_vnni(self) -> bool:
        """Whether int8 products run on VNNI here (else on the AVX2 kernel: the same results, slower)."""
        return bool(self._library.int8_vnni())

    @property
    def int8_amx(self) -> bool:
        """Whether int8 products of 3 rows or more whose k is a multiple of 64 run on AMX's tiles here (csrc:
        amx_sums; the same results as VNNI): the CPU has them, the C step was built for them and Linux lent them
        to this process."""
        return bool(self._library.int8_amx())

    def log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-softmax over the last dimension in C (log_softmax_rows: each row alone, alike in any call),
        the log-probs of this engine's beam search (Seq2SeqTransformer.log_probs)."""
        x = logits.detach().float().contiguous()
        out = torch.empty_like(x)
        vocab = x.shape[-1]
        self._library.log_softmax_rows(x.data_ptr(), x.numel() // vocab if vocab else 0, vocab, out.data_ptr())
        return out

    def _binding(self, cache: KVCache) -> _Binding | None:
        """The cache's tensors as the C call reads them, bound again when the cache holds new ones; None
        when its slots are not contiguous (then the NumPy step runs the call)."""
        binding = cache.engine_state
        if isinstance(binding, _Binding) and all(a is b for a, b in zip(binding.tensors, _tensors_of(cache))):
            return binding
        if not all(t.is_contiguous() for layer in cache.layers for t in (layer.keys, layer.values)):
            return None
        binding = cache.engine_state = _Binding(cache)
        return binding

    def _set_call(self, binding: _Binding, cache: KVCache, ids: int, lengths: torch.Tensor, batch: int, t_new: int,
                  upto: int, logits: int, weights: int | None) -> tuple[torch.Tensor, ...]:
        """Fill the binding's call for `batch` rows of t_new tokens (ids and logits: addresses) and return
        the pending keys/values views it writes."""
        if upto > self.max_positions:
            raise ValueError(f"sequence longer than the model's {self.max_positions} positions")
        if lengths.dtype != torch.int64 or not lengths.is_contiguous():
            raise TypeError("cache lengths must be contiguous int64")
        shared = cache.cross_rows
        if shared is not None and (shared.dtype != torch.int64 or not shared.is_contiguous()
                                   or shared.shape != (cache.batch_size,)):
            raise TypeError("the cache's cross_rows must be contiguous int64, one per row")
        pending, views = binding.pending_of(len(self.layers), batch, self.n_heads, t_new, self.head_dim)
        call = binding.call
        call.batch, call.t_new, call.upto = batch, t_new, upto
        call.tokens, call.lengths, call.pending = ids, lengths.data_ptr(), pending.data_ptr()
        call.logits, call.weights, call.rows = logits, weights, None
        call.cross_rows = None if shared is None else shared.data_ptr()
        return views

    def __call__(self, tokens: torch.Tensor, cache: KVCache, where, want_weights: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """NumpyStep.__call__'s contract, in one C call."""
        batch, _, t_new = tokens.shape
        binding = self._binding(cache)
        rows = cache.slot_rows
        if rows is not None and (binding is None or rows.dtype != torch.int64 or not rows.is_contiguous()
                                 or rows.shape != (batch,)):
            raise ValueError("a row pool's view needs contiguous slots and one int64 pool row per call row")
        if binding is None:
            cache.own_memory()  # the NumPy step reads rows of the memory as rows of the cache
            cache.zero_past_lengths()  # and masked slots
            where = dataclasses.replace(where, mask=cache.in_place_mask(where.start, where.upto, t_new))
            return super().__call__(tokens, cache, where, want_weights)  # the NumPy step reads the mask
        ids = tokens.reshape(batch * t_new).contiguous()
        if ids.dtype != torch.int64:
            raise TypeError("token ids must be int64")
        logits = torch.empty(batch * t_new, self.embed.shape[0])
        weights = torch.empty(batch, t_new, binding.call.src_len) if want_weights else None
        views = self._set_call(binding, cache, ids.data_ptr(), where.lengths.contiguous(), batch, t_new, where.upto,
                               logits.data_ptr(), None if weights is None else weights.data_ptr())
        binding.call.rows = None if rows is None else rows.data_ptr()
        if self._library.decoder_step(self._c_model(), ctypes.byref(binding.call)) != 0:
            raise MemoryError("the C decoder step could not allocate its scratch memory")
        n_layers = len(cache.layers)
        for layer, keys, values in zip(cache.layers, views[:n_layers], views[n_layers:]):
            layer.pending_keys, layer.pending_values = keys, values
        cache.written_in_place = True
        out_weights = weights.view(batch, 1, t_new, -1) if weights is not None else None
        return logits.view(batch, 1, t_new, -1), out_weights

    def greedy_step(self, tokens: torch.Tensor, drafts: np.ndarray, cache: KVCache, want_peaks: bool,
                    slot_rows: np.ndarray | None = None
                    ) -> tuple[list[int], list[list[int]], list[list[float]], list[int] | None]:
        """One call of greedy.greedy in one C call (csrc greedy_step), one branch a row: feed tokens
        (R, 1, 1+D), each row's pending token and drafts[r] draft tokens (padded past them), and keep
        what it accepts. Returns greedy.settle_lists's outcome less the branch (always 0): accepted
        drafts, the argmax at every position, its log-probability, and the cross-attention peaks
        after the accepted runs (None unless want_peaks). The cache then holds the accepted run and
        the next token's input slot, as commit(accepted + 1) leaves it. slot_rows (R,) int64, distinct:
        the cache row each call row reads and writes (the rows of finished queries are left where they are,
        not fed); None: call row r is cache row r, every row fed."""
        check_deadline()  # the per-query time limit (limits.py): this call bypasses model.decode
        rows, branches, t_new = tokens.shape
        if slot_rows is not None:
            slot_rows = np.ascontiguousarray(slot_rows, dtype=np.int64)
            if slot_rows.shape != (rows,) or (rows and not 0 <= slot_rows.min() <= slot_rows.max() < cache.batch_size):
                raise ValueError("greedy_step needs one cache row, in range, for each call row")
        lengths = cache.lengths if slot_rows is None else cache.lengths[torch.from_numpy(slot_rows)]
        if branches != 1 or drafts.shape != (rows,) or (slot_rows is None and cache.batch_size != rows):
            raise ValueError("greedy_step feeds one branch to each row of the cache")
        binding = self._binding(cache)
        upto = int(lengths.numpy().max()) + t_new if rows else t_new
        if binding is None or upto > cache.capacity:
            raise ValueError("greedy_step needs contiguous cache slots with room for the call")
        ids = tokens.reshape(rows * t_new).contiguous()
        if ids.dtype != torch.int64:
            raise TypeError("token ids must be int64")
        vocab = int(self.embed.shape[0])
        logits = np.empty((rows * t_new, vocab), dtype=np.float32)
        weights = np.empty((rows, t_new, binding.call.src_len), dtype=np.float32) if want_peaks else None
        self._set_call(binding, cache, ids.data_ptr(), lengths, rows, t_new, upto, logits.ctypes.data,
                       None if weights is None else weights.ctypes.data)
        binding.call.rows = None if slot_rows is None else slot_rows.ctypes.data
        drafts = np.ascontiguousarray(drafts, dtype=np.int64)
        accepted, new_lengths = np.empty(rows, dtype=np.int64), np.empty(rows, dtype=np.int64)
        argmax, best = np.empty((rows, t_new), dtype=np.int64), np.empty((rows, t_new), dtype=np.float32)
        peaks = np.empty(rows, dtype=np.int64) if want_peaks else None
        out = binding.greedy
        out.drafts, out.accepted, out.argmax = drafts.ctypes.data, accepted.ctypes.data, argmax.ctypes.data
        out.best_log_probs, out.lengths = best.ctypes.data, new_lengths.ctypes.data
        out.peaks = None if peaks is None else peaks.ctypes.data
        if self._library.greedy_step(self._c_model(), ctypes.byref(binding.call), ctypes.byref(out)) != 0:
            raise MemoryError("the C greedy step could not allocate its scratch memory")
        if slot_rows is None:
            cache.lengths = torch.from_numpy(new_lengths)
        else:
            cache.lengths[torch.from_numpy(slot_rows)] = torch.from_numpy(new_lengths)
        return accepted.tolist(), argmax.tolist(), best.tolist(), None if peaks is None else peaks.tolist()

    def _runs(self, entry: Callable[..., int], binding: _Binding, run: ctypes.Structure, active: np.ndarray,
              cache: KVCache) -> Iterator[None]:
        """Call a search run in C (beam_run, greedy_run) until no query is active, the time limit checked before
        each call (limits.py: these calls bypass model.decode); yields after each, for what it found to be read.
        Under a time limit a run takes as many steps as fit in the time left at the slowest pace seen so far, and
        at most twice the steps of the run before (one first), so that the limit is passed by about a step: 16
        steps of a retro beam on a loaded CPU took seconds past a 1 s limit. The pace is learnt as it goes: a
        beam's first step feeds one row a query, its next ones `width` (on a loaded CPU, 0.001 s and 0.2 s)."""
        seconds_per_step: float | None = None
        while active.any():
            check_deadline()
            run.steps = limits.steps_before_check(seconds_per_step, run.steps, STEPS_PER_RUN)
            started = limits.now()
            failed = entry(self._c_model(), ctypes.byref(binding.call), ctypes.byref(run))
            if failed == CAPACITY_REACHED:
                raise RuntimeError(f"KV cache capacity {cache.capacity} exceeded")
            if failed:
                raise MemoryError("the C search could not allocate its scratch memory")
            pace = (limits.now() - started) / run.steps
            seconds_per_step = pace if seconds_per_step is None else max(seconds_per_step, pace)
            yield

    def greedy_search(self, cache: KVCache, sources: Sequence[Sequence[int]], budgets: list[int], slots: int,
                      draft_len: int = 0, max_suffix: int = 0) -> list[GreedyFound]:
        """greedy.greedy's loop in C (csrc greedy_run) without drafts (draft_len 0) or with one lookup draft of
        at most draft_len tokens a call (drafting.LookupDrafter, max_suffix its longest suffix), over a new
        cache of one row a query, holding nothing yet (bos is the first token fed); slots: the positions a row
        may fill (greedy.fit_drafts). STEPS_PER_RUN calls a C call: the time limit is checked between them.
        At the time limit it returns what it found, each query still decoding marked `stopped`, rather than raising
        (as beam_search does). At one query the Python loop's bookkeeping was 30% of a forward greedy search
        (session 73)."""
        # No draft is longer than its source or than a row's room (fit_drafts: slots less the pending token): a
        # longer draft_len would only widen the scratch, and past the model's positions be refused as a sequence.
        draft_len = max(0, min(draft_len, max(len(s) for s in sources), slots - 1))
        rows, vocab, depth = len(budgets), int(self.embed.shape[0]), 1 + draft_len
        if cache.batch_size != rows or len(sources) != rows or int(cache.lengths.max()) != 0:
            raise ValueError(f"greedy_search needs a new cache of {rows} rows, not {cache.batch_size} holding tokens")
        binding = self._binding(cache)
        if binding is None:
            raise ValueError("greedy_search needs contiguous cache slots")
        history_width, src_width = max(budgets) + 1, max(1, max(len(s) for s in sources))
        source_array = np.full((rows, src_width), PAD_ID, dtype=np.int64)
        for row, source in zip(source_array, sources):
            row[:len(source)] = source
        source_lengths = np.array([len(s) for s in sources], dtype=np.int64)
        budget_array = np.ascontiguousarray(budgets, dtype=np.int32)
        active, finished = np.ones(rows, dtype=np.uint8), np.zeros(rows, dtype=np.uint8)
        pending = np.full(rows, BOS_ID, dtype=np.int64)
        counts = {name: np.zeros(rows, dtype=np.int64) for name in (
            "lengths", "written", "calls", "proposed", "accepted_total", "rejections", "emitted")}
        tokens, origins = (np.zeros((rows, history_width), dtype=np.int64) for _ in range(2))
        scores = np.zeros(rows, dtype=np.float64)
        scratch = dict(best=np.empty((rows, depth), dtype=np.float32),
                       logits=np.empty((rows * depth, vocab), dtype=np.float32),
                       fed_tokens=np.empty((rows, depth), dtype=np.int64), argmax=np.empty((rows, depth), np.int64),
                       **{name: np.empty(rows, dtype=np.int64) for name in (
                           "fed", "fed_lengths", "draft_counts", "accepted", "new_lengths", "draft_starts")})
        run = _CGreedyRun(rows=rows, bos=BOS_ID, eos=EOS_ID, pad=PAD_ID, generated=GENERATED, steps=STEPS_PER_RUN,
                          history_width=history_width, draft_len=draft_len, max_suffix=max_suffix, slots=slots,
                          src_width=src_width,
                          **{name: array.ctypes.data for name, array in (
                              ("sources", source_array), ("source_lengths", source_lengths),
                              ("budgets", budget_array), ("active", active), ("finished", finished),
                              ("pending", pending), ("tokens", tokens), ("origins", origins), ("scores", scores),
                              *counts.items(), *scratch.items())})
        # The call's cache tables and pending buffer (for the widest call); greedy_run sets its rows, tokens, lengths.
        self._set_call(binding, cache, 0, cache.lengths, rows, depth, depth, scratch["logits"].ctypes.data, None)
        stopped = [False] * rows
        try:
            for _ in self._runs(self._library.greedy_run, binding, run, active, cache):
                pass
        except QueryTimeout:  # checked between runs: the arrays hold the state after the last one
            stopped = active.astype(bool).tolist()
        stats = [DecodeStats(model_calls=c, draft_tokens_proposed=p, draft_tokens_accepted=a, draft_rejections=r,
                             tokens_generated=e) for c, p, a, r, e in zip(*(counts[name].tolist() for name in (
                                 "calls", "proposed", "accepted_total", "rejections", "emitted")))]
        return [GreedyFound(tuple(t[:n]), tuple(o[:n]), score, bool(done), counted, cut)
                for t, o, n, score, done, counted, cut in zip(tokens.tolist(), origins.tolist(),
                                                               counts["written"].tolist(), scores.tolist(),
                                                               finished.tolist(), stats, stopped)]

    def beam_search(self, cache: KVCache, budgets: list[int], width: int, n_best: int, prune: bool) -> BeamFound:
        """beam.beam_search's loop in C (csrc beam_run), over a new cache whose rows are the beam slots of
        len(budgets) queries, `width` each, holding nothing yet (bos is the first token fed). The C code runs
        STEPS_PER_RUN steps a call: the time limit is checked between calls. At the limit it returns what it found
        with each stopped query's live slots as unfinished hypotheses (BeamFound.stopped), rather than raising.

        In Python the loop did a few dozen NumPy calls a step, each slowed several times by running
        right after the decoder call had streamed the weights through the caches: at one query, width 5,
        30% of a forward search (session 73)."""
        queries, vocab = len(budgets), int(self.embed.shape[0])
        rows = queries * width
        if cache.batch_size != rows or int(cache.lengths.max()) != 0:
            raise ValueError(f"beam_search needs a new cache of {queries} queries x {width} slots, "
                             f"not {cache.batch_size} rows holding tokens")
        binding, slots = self._binding(cache), cache.slots
        if binding is None or slots is None or slots.dtype != torch.float32 or not slots.is_contiguous() \
                or slots.data_ptr() != cache.layers[0].keys.data_ptr():
            raise ValueError("beam_search needs the cache's keys and values in one contiguous float32 slots tensor")
        history_width = max(budgets) + 1
        scores = np.full((queries, width), -np.inf, dtype=np.float32)
        scores[:, 0] = 0.0
        history = np.zeros((rows, history_width), dtype=np.int64)
        history[:, 0] = BOS_ID
        active, calls = np.ones(queries, dtype=np.uint8), np.zeros(queries, dtype=np.int64)
        finished_top, finished_count = np.empty((queries, n_best), dtype=np.float32), np.zeros(queries, dtype=np.int32)
        budget_array = np.ascontiguousarray(budgets, dtype=np.int32)
        room = STEPS_PER_RUN * rows  # a step finds at most one hypothesis a slot
        found_meta, found_scores = np.empty((room, 4), dtype=np.int64), np.empty(room, dtype=np.float32)
        found_tokens = np.empty(room * history_width, dtype=np.int64)
        scratch = dict(logits=np.empty((rows, vocab), dtype=np.float32),
                       log_probs=np.empty((rows, vocab), dtype=np.float32),
                       top_scores=np.empty(rows, dtype=np.float32), moved=np.empty((width, history_width), np.int64),
                       **{name: np.empty(rows, dtype=np.int64)
                          for name in ("top_index", "parents", "fed", "fed_tokens", "fed_lengths")})
        run = _CBeamRun(queries=queries, width=width, n_best=n_best, prune=int(prune), eos=EOS_ID,
                        steps=STEPS_PER_RUN, step=0, history_width=history_width, slots=slots.data_ptr(),
                        **{name: array.ctypes.data for name, array in (
                            ("budgets", budget_array), ("active", active), ("scores", scores),
                            ("finished_top", finished_top), ("finished_count", finished_count), ("calls", calls),
                            ("history", history), ("found", found_meta), ("found_scores", found_scores),
                            ("found_tokens", found_tokens), *scratch.items())})
        # The call's cache tables and pending buffer (for every row); beam_run sets its rows, tokens and lengths.
        self._set_call(binding, cache, 0, cache.lengths, rows, 1, 1, scratch["logits"].ctypes.data, None)
        found: list[list[tuple[tuple[int, ...], float, bool]]] = [[] for _ in range(queries)]
        try:
            for _ in self._runs(self._library.beam_run, binding, run, active, cache):
                tokens = found_tokens[:run.n_found_tokens].tolist()
                for (query, finished, start, length), score in zip(found_meta[:run.n_found].tolist(),
                                                                   found_scores[:run.n_found].tolist()):
                    found[query].append((tuple(tokens[start:start + length]), score, bool(finished)))
        except QueryTimeout:  # checked between runs: the arrays hold the state after the last one
            stopped = active.astype(bool).tolist()
            for query in np.flatnonzero(active).tolist():  # its live slots, each holding bos and run.step tokens
                for slot, score in enumerate(scores[query].tolist()):
                    if score > float("-inf") and run.step > 0:  # before the first step: bos alone, no answer
                        found[query].append((tuple(history[query * width + slot, 1:run.step + 1].tolist()), score,
                                             False))
            return BeamFound(found, calls.tolist(), run.rows_fed, stopped)
        return BeamFound(found, calls.tolist(), run.rows_fed)
