"""Encoder-decoder Transformer for SMILES-to-SMILES translation (the Molecular Transformer's shape).

Pre-norm layers, sinusoidal positions indexed per row (so rows may sit at different lengths),
one embedding matrix shared by source, target and the output projection. The model holds no
per-request state: decoding state lives in a caller-owned `KVCache`.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .cache import KVCache, LayerCache
from .graphs import GraphStep
from .limits import check_deadline
from .native import NativeStep
from .npstep import NumpyStep
from .tokenizer import PAD_ID


def plan_free_attention(device: torch.device) -> None:
    """Keep cuDNN out of scaled_dot_product_attention on a CUDA device (process-wide).

    On Hopper, torch 2.11 tries cuDNN's attention first when a mask is given. cuDNN builds an
    execution plan for every new (batch, length) shape, reported at about 0.4 s forward and 0.5 s
    backward (FunASR issue 3704, a B200 with torch 2.11). Our batches and decode steps change shape
    all the time: in GPU block 4 (session 33, H100) forward met some 125 new batch shapes a minute
    for all of its 8 minutes and ran 2.5 steps a second, while retro ran 3 a second until it had met
    its 480 shapes and then 12 (tools/gpu_train.md). The memory-efficient and flash kernels need
    no plan; on a CPU nothing changes. Called by the trainer and by `checkpoint.load`, which every
    model that decodes comes through."""
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


@dataclass(frozen=True)
class InPlace:
    """Where a lean call's T new tokens go (see Attention.self_in_place)."""

    lengths: torch.Tensor  # (B,) cached tokens per row: row b's new tokens take slots lengths[b]..+T
    start: int | None  # the length every row shares, when they do (then the writes are one slice)
    upto: int  # slots the call reads: the longest row's length + T
    mask: torch.Tensor | None  # (B, 1, T, upto) or (T, upto), True = may attend; None: all of them


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    n_encoder_layers: int = 4
    n_decoder_layers: int = 4
    d_model: int = 256
    n_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    max_positions: int = 1024  # longest source or target in tokens; USPTO SMILES stay far below

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS = {
    # The paper's sizes (Schwaller et al. 2019; Andronov et al. 2024).
    "forward": dict(n_encoder_layers=4, n_decoder_layers=4),
    "retro": dict(n_encoder_layers=6, n_decoder_layers=6),
    # A compute-matched shape for a CPU-only run of an hour or two: a third of the paper model's
    # FLOPs per token, so about three times the steps in the same wall time.
    "cpu": dict(n_encoder_layers=3, n_decoder_layers=3, d_ff=1024),
    # = "cpu": the shape of the CPU-trained retro weights (replaced by the GPU-trained 6+6 on 2026-11-25)
    "retro-cpu": dict(n_encoder_layers=3, n_decoder_layers=3, d_ff=1024),
    # The small autoregressive draft model of speculative sampling (issue 7): its own one-layer
    # encoder and one-layer decoder, d=128, trained on the same data and vocabulary.
    "draft": dict(n_encoder_layers=1, n_decoder_layers=1, d_model=128, n_heads=4, d_ff=512),
    # Small shapes for fast, exact engine tests.
    "tiny": dict(n_encoder_layers=2, n_decoder_layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0),
}


def preset(name: str, vocab_size: int, **overrides) -> ModelConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
    return ModelConfig(vocab_size=vocab_size, **{**PRESETS[name], **overrides})


def sinusoidal_table(n_positions: int, d_model: int) -> torch.Tensor:
    position = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq)
    return table


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.d_ff)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.dropout(F.relu(self.up(x))))


class Attention(nn.Module):
    """Multi-head attention; the decoder's self-attention variant reads and fills a LayerCache."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.query = nn.Linear(cfg.d_model, cfg.d_model)
        self.key_value = nn.Linear(cfg.d_model, 2 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout_p = cfg.dropout

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, L, hd)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim)

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.key_value(x).chunk(2, dim=-1)
        return self.split_heads(keys), self.split_heads(values)

    def full(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Plain attention of x over context; mask is boolean, True = may attend."""
        keys, values = self.keys_values(context)
        out = F.scaled_dot_product_attention(
            self.split_heads(self.query(x)), keys, values, attn_mask=mask,
            dropout_p=self.dropout_p if self.training else 0.0)
        return self.out(self.merge_heads(out))

    def cross_cached(self, x: torch.Tensor, layer: LayerCache, src_mask: torch.Tensor | None,
                     want_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention over the cached source memory (src_mask None: no padding); optionally also the
        head-mean weights (B, L, S)."""
        query = self.split_heads(self.query(x))
        if not want_weights:
            out = F.scaled_dot_product_attention(query, layer.cross_keys, layer.cross_values, attn_mask=src_mask)
            return self.out(self.merge_heads(out)), None
        scores = (query @ layer.cross_keys.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (B, H, L, S)
        if src_mask is not None:
            scores = scores.masked_fill(~src_mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        out = weights @ layer.cross_values
        return self.out(self.merge_heads(out)), weights.mean(dim=1)

    def self_cached(self, x: torch.Tensor, n_branches: int, layer: LayerCache, cache: KVCache) -> torch.Tensor:
        """x (B, N*T, d): N branches of T new tokens, each continuing the row's cached prefix.

        Scores over the prefix and over the branch's own tokens are computed apart and joined
        before the softmax, so the prefix is shared by all N branches without being copied.
        """
        batch, n_new, _ = x.shape
        t_new = n_new // n_branches
        scale = 1.0 / math.sqrt(self.head_dim)
        query = self.split_heads(self.query(x)) * scale  # (B, H, N*T, hd)
        keys, values = self.keys_values(x)  # (B, H, N*T, hd)
        upto = cache.max_length()
        prefix_scores = query @ layer.keys[:, :, :upto].transpose(-1, -2)  # (B, H, N*T, P)
        prefix_scores = prefix_scores.masked_fill(cache.prefix_mask(upto)[:, None, None, :], float("-inf"))
        branch_q = query.view(batch, self.n_heads, n_branches, t_new, self.head_dim)
        branch_k = keys.view(batch, self.n_heads, n_branches, t_new, self.head_dim)
        branch_v = values.view(batch, self.n_heads, n_branches, t_new, self.head_dim)
        branch_scores = branch_q @ branch_k.transpose(-1, -2)  # (B, H, N, T, T)
        causal = torch.ones(t_new, t_new, dtype=torch.bool, device=x.device).triu(1)
        branch_scores = branch_scores.masked_fill(causal, float("-inf"))
        scores = torch.cat([prefix_scores, branch_scores.view(batch, self.n_heads, n_new, t_new)], dim=-1)
        weights = scores.softmax(dim=-1)
        prefix_w, branch_w = weights.split([upto, t_new], dim=-1)
        out = prefix_w @ layer.values[:, :, :upto]  # (B, H, N*T, hd)
        out = out + (branch_w.reshape(batch, self.n_heads, n_branches, t_new, t_new) @ branch_v).view_as(out)
        layer.pending_keys, layer.pending_values = branch_k, branch_v
        return self.out(self.merge_heads(out))

    def self_in_place(self, x: torch.Tensor, layer: LayerCache, where: InPlace) -> torch.Tensor:
        """x (B, T, d): one branch of T new tokens per row, after each row's cached prefix.

        The lean call: the new keys/values go straight into the slots after each row's prefix, where
        `commit` only has to count them (slots past a row's length are masked, so unkept ones do no
        harm), and one fused attention reads the slots.
        """
        keys, values = self.keys_values(x)  # (B, H, T, hd)
        if where.start is not None:
            layer.keys[:, :, where.start:where.upto] = keys
            layer.values[:, :, where.start:where.upto] = values
        else:
            slots = where.lengths[:, None] + torch.arange(x.shape[1], device=x.device)  # (B, T)
            slots = slots[:, None, :, None].expand_as(keys)
            layer.keys.scatter_(2, slots, keys)
            layer.values.scatter_(2, slots, values)
        out = F.scaled_dot_product_attention(self.split_heads(self.query(x)), layer.keys[:, :, :where.upto],
                                             layer.values[:, :, :where.upto], attn_mask=where.mask)
        layer.pending_keys, layer.pending_values = keys.unsqueeze(2), values.unsqueeze(2)  # (B, H, 1, T, hd)
        return self.out(self.merge_heads(out))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn, self.ff = Attention(cfg), FeedForward(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.dropout(self.attn.full(h, h, mask))
        return x + self.dropout(self.ff(self.norm2(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(cfg.d_model) for _ in range(3))
        self.self_attn, self.cross_attn, self.ff = Attention(cfg), Attention(cfg), FeedForward(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor,
                src_mask: torch.Tensor) -> torch.Tensor:
        """Training / uncached path: the whole target prefix at once."""
        h = self.norm1(x)
        x = x + self.dropout(self.self_attn.full(h, h, self_mask))
        x = x + self.dropout(self.cross_attn.full(self.norm2(x), memory, src_mask))
        return x + self.dropout(self.ff(self.norm3(x)))

    def step(self, x: torch.Tensor, n_branches: int, layer: LayerCache, cache: KVCache,
             src_mask: torch.Tensor | None, want_weights: bool = False, in_place: InPlace | None = None
             ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if in_place is None:
            x = x + self.self_attn.self_cached(self.norm1(x), n_branches, layer, cache)
        else:
            x = x + self.self_attn.self_in_place(self.norm1(x), layer, in_place)
        attended, weights = self.cross_attn.cross_cached(self.norm2(x), layer, src_mask, want_weights)
        x = x + attended
        return x + self.ff(self.norm3(x)), weights


class BlasThreads:
    """NumPy's BLAS held to a thread count while MolSpec's NumPy steps compute, and given back when the last one
    ends: a plain threadpool_limits call at load set it for the whole process, an embedding program's own NumPy
    work included. One for the process, as the setting is the process's: concurrent steps, of one model or several,
    hold it together (at the first one's count), and the setting is given back once, when none runs. It is held
    per call of the step (a few microseconds, against a step's milliseconds): the model sees no decode call whole."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._libraries: list | None = None  # threadpoolctl's BLAS controllers, looked up at the first step
        self._given_back: list[tuple[object, int]] = []  # (library, its count before) of those changed

    @contextmanager
    def held(self, threads: int | None) -> Iterator[None]:
        """Hold the BLAS libraries to `threads` inside (None: leave them be)."""
        if threads is None:
            yield
            return
        with self._lock:
            if self._running == 0:
                if self._libraries is None:
                    from threadpoolctl import ThreadpoolController  # here: the GPU training machine lacks it

                    self._libraries = ThreadpoolController().select(user_api="blas").lib_controllers
                self._given_back = [(library, before) for library in self._libraries
                                    if (before := library.num_threads) != threads]
                for library, _ in self._given_back:
                    library.set_num_threads(threads)
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    for library, before in self._given_back:
                        library.set_num_threads(before)
                    self._given_back = []


NUMPY_BLAS = BlasThreads()


class Seq2SeqTransformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.embed.weight, std=cfg.d_model ** -0.5)
        self.register_buffer("positions", sinusoidal_table(cfg.max_positions, cfg.d_model), persistent=False)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        self.encoder_norm, self.decoder_norm = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.numpy_step: NumpyStep | NativeStep | GraphStep | None = None  # see use_numpy_step, use_cuda_graphs
        self.blas_threads: int | None = None  # NumPy's BLAS threads in the NumPy step's calls (use_numpy_step)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def use_numpy_step(self, on: bool = True, native: bool = False, dtype: str = "float32") -> None:
        """Take lean calls through NumPy (npstep.py), or through C (native.py: the decoder call in one
        C function, computing with `dtype`) if `native`, built from the weights as they are now; for
        float32 models on CPU only. Load new weights, then call this again. native raises
        NativeUnavailable, with the reason, where the C step cannot run."""
        if dtype != "float32" and not (on and native):
            raise ValueError(f"dtype {dtype} runs on the native engine only")
        if on and (self.device.type != "cpu" or self.embed.weight.dtype != torch.float32):
            raise ValueError("the NumPy step runs float32 models on CPU only")
        if on and native:
            self.numpy_step = NativeStep(self, dtype=dtype)
        else:
            self.numpy_step = NumpyStep(self) if on else None
        # NumPy's BLAS would otherwise use every core in the step's calls, whatever torch was told (NUMPY_BLAS)
        self.blas_threads = torch.get_num_threads() if on else None

    def use_cuda_graphs(self, capture: bool = True) -> None:
        """Take lean calls through CUDA graphs (graphs.py: engine "graphs"); capture=False runs the same
        fixed-shape call eagerly, which is how it is tested on a CPU."""
        self.numpy_step = GraphStep(self, capture)
        self.blas_threads = None

    def embed_tokens(self, tokens: torch.Tensor, positions: torch.Tensor, longest: int | None = None) -> torch.Tensor:
        """longest: the largest of `positions` when the caller knows it without reading the device
        (training's whole sequences: on a GPU each read makes the host wait for the queue)."""
        if (int(positions.max()) if longest is None else longest) >= self.cfg.max_positions:
            raise ValueError(f"sequence longer than the model's {self.cfg.max_positions} positions")
        return self.dropout(self.embed(tokens) * math.sqrt(self.cfg.d_model) + self.positions[positions])

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder_norm(hidden) @ self.embed.weight.T  # tied output projection

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """src (B, S) padded with PAD_ID -> memory (B, S, d) (in NumPy after `use_numpy_step`)."""
        if self.numpy_step is not None and not self.training:
            with NUMPY_BLAS.held(self.blas_threads):
                return self.numpy_step.encode(src)
        return self.encode_torch(src)

    def encode_torch(self, src: torch.Tensor) -> torch.Tensor:
        """`encode` in torch, whatever engine the lean calls have."""
        positions = torch.arange(src.shape[1], device=src.device).expand_as(src)
        x = self.embed_tokens(src, positions, src.shape[1] - 1)
        keep = src != PAD_ID
        # (B, 1, 1, S); None where nothing is padded, which spares CPU inference the mask. Training and
        # CUDA always pass it: asking reads the device, and on a GPU the host would wait for its queue.
        mask = keep[:, None, None, :] if self.training or src.is_cuda or not bool(keep.all()) else None
        for layer in self.encoder:
            x = layer(x, mask)
        return self.encoder_norm(x)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, T, V); also the uncached decoding reference."""
        return self.decode_full(tgt_in, self.encode(src), src != PAD_ID)

    def decode_full(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_keep: torch.Tensor) -> torch.Tensor:
        check_deadline()
        length = tgt_in.shape[1]
        positions = torch.arange(length, device=tgt_in.device).expand_as(tgt_in)
        x = self.embed_tokens(tgt_in, positions, length - 1)
        causal = torch.ones(length, length, dtype=torch.bool, device=tgt_in.device).tril()
        src_mask = src_keep[:, None, None, :]
        for layer in self.decoder:
            x = layer(x, memory, causal, src_mask)
        return self.logits(x)

    # ---- cached decoding -------------------------------------------------------------------------

    @staticmethod
    def _in_place(cache: KVCache, n_branches: int, t_new: int, masked: bool = True) -> InPlace | None:
        """Where the lean call writes and what it reads, when it applies: one branch per row, and room
        for t_new more tokens in every row; None otherwise (several branches share a row's prefix).
        masked=False leaves the mask out (None) for a step that works it out from the lengths itself."""
        if n_branches != 1:
            return None
        start = cache.uniform_length()
        upto = (start if start is not None else cache.max_length()) + t_new
        if upto > cache.capacity:
            return None
        return InPlace(cache.lengths, start, upto, cache.in_place_mask(start, upto, t_new) if masked else None)

    def new_cache(self, memory: torch.Tensor, src_keep: torch.Tensor, capacity: int, lockstep: bool = False
                  ) -> KVCache:
        """A cache for len(memory) rows with the cross-attention keys/values computed once. lockstep: every
        call reads only slots every row has written (KVCache.lockstep), so the slots need no zeroing. On the
        native engine they are not zeroed either: its lean call reads no slot past a row's length, and decode
        zeroes those before any other reader (KVCache.raw_past_lengths)."""
        cfg = self.cfg
        step = self.numpy_step if not self.training else None
        raw = not lockstep and isinstance(step, NativeStep)
        cache = KVCache.empty(cfg.n_decoder_layers, memory.shape[0], cfg.n_heads, cfg.head_dim,
                              capacity, memory.device, memory.dtype, zeroed=not (lockstep or raw))
        cache.lockstep, cache.raw_past_lengths = lockstep, raw
        with NUMPY_BLAS.held(self.blas_threads if step else None):
            for i, (layer, block) in enumerate(zip(cache.layers, self.decoder)):
                keys, values = step.cross_keys_values_of(memory, i) if step else block.cross_attn.keys_values(memory)
                layer.cross_keys, layer.cross_values = keys.contiguous(), values.contiguous()
        cache.src_pad_mask = ~src_keep
        return cache

    def log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """log_softmax of logits over the vocabulary, float32: in C on the native engine (the function of
        its beam search, NativeStep.beam_search), else torch's. Beam search and sbs-exact both take
        their log-probs from here, so on one engine they see the same values for the same logits."""
        step = self.numpy_step if not self.training else None
        if isinstance(step, NativeStep) and logits.device.type == "cpu":
            return step.log_softmax(logits)
        return logits.float().log_softmax(dim=-1)

    def decode(self, tokens: torch.Tensor, cache: KVCache, *, cross_attention: bool = False, lean: bool = True
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tokens (B, N, T): N branches of T tokens after each row's cached prefix.

        Returns logits (B, N, T, V) and, if asked, the last layer's head-mean cross-attention
        (B, N, T, S), which tells where in the source the model looks for its next token.
        The new keys/values wait in the cache until `cache.commit`. With one branch per row and room
        in the cache, the call takes the lean path (`Attention.self_in_place`, or NumPy's copy of it
        after `use_numpy_step`) unless lean=False; they compute the same function, which
        tests/test_model_cache.py and tests/test_npstep.py pin.
        """
        check_deadline()
        batch, n_branches, t_new = tokens.shape
        step = self.numpy_step if not self.training else None
        in_place = self._in_place(cache, n_branches, t_new, not getattr(step, "masks_itself", False)) if lean else None
        if cache.slot_rows is not None and (in_place is None or not isinstance(step, NativeStep)):
            raise ValueError("a row pool's view (RowPool.view) is read by the native engine's lean call only")
        if cache.cross_rows is not None and (in_place is None or not isinstance(step, NativeStep)):
            cache.own_memory()  # rows sharing their memory are read by the native engine's lean call only
        if in_place is not None and isinstance(step, NativeStep):
            with NUMPY_BLAS.held(self.blas_threads):  # its rare NumPy fallback (NativeStep.__call__)
                return step(tokens, cache, in_place, cross_attention)  # reads no slot past a row's length
        cache.zero_past_lengths()  # every other reader meets masked slots
        if in_place is not None and step is not None:
            with NUMPY_BLAS.held(self.blas_threads):
                return step(tokens, cache, in_place, cross_attention)
        if getattr(self.numpy_step, "dtype", "float32") != "float32":  # torch would compute another function
            raise ValueError(f"dtype {self.numpy_step.dtype} computes calls of one branch a row, with room in the "
                             "cache (the C step's); several drafts a row are fed as rows of their own, each on a copy "
                             "of its row's cache, by the greedy methods (decoding.greedy.verify_as_rows: spec-paper, "
                             "n_drafts above 1) and by sbs and sbs-exact (decoding.speculative_beam)")
        if in_place is not None and in_place.start is not None:
            positions = torch.arange(in_place.start, in_place.upto, device=tokens.device).expand(batch, t_new)
        else:
            offsets = torch.arange(t_new, device=tokens.device).repeat(n_branches)  # (N*T,)
            positions = cache.lengths.unsqueeze(1) + offsets  # (B, N*T)
        x = self.embed_tokens(tokens.reshape(batch, n_branches * t_new), positions)
        src_mask = cache.src_attention_mask()
        last = len(self.decoder) - 1
        weights = None
        for i, (layer, block) in enumerate(zip(cache.layers, self.decoder)):
            x, weights = block.step(x, n_branches, layer, cache, src_mask, cross_attention and i == last, in_place)
        cache.written_in_place = in_place is not None
        if weights is not None:
            weights = weights.view(batch, n_branches, t_new, -1)
        return self.logits(x).view(batch, n_branches, t_new, -1), weights
