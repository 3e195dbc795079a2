"""The lean decoder call replayed from CUDA graphs (engine "graphs"; issue 16).

On a GPU at batch size 1 an eager decoder call costs 3-5 ms, almost all of it the host launching
a few hundred small kernels (README, "GPU"). A CUDA graph records those launches once and replays
them as one. A graph holds fixed shapes and fixed memory, so the call it records is the lean call
(`Attention.self_in_place`) at fixed sizes, reading nothing back to the host:

- a `_Bank` of static buffers per (rows, slot capacity, source length), each rounded up
  (`_rows`, `_round`): the cache's self-attention slots, its cross-attention keys and values, the
  source mask and the row lengths. The call attends over every slot of the bank and masks those
  past each row's length, so the same graph serves every step;
- one `_Graph` per (bank, new tokens per row, cross-attention weights or not), made on its first
  use: a few eager runs on a side stream, the capture, and a check that the replay gives the eager
  logits. New tokens are padded to a power of two (`_steps`), so a speculative method's drafts of
  every length share five graphs: a padded token comes after the call's real ones, which do not
  attend to it, and writes its keys past them, into slots no row has reached (the bank has
  `PAD_MAX` slots more than the cache for them).

One cache owns a bank's slots at a time: binding a cache copies its slots in and points the cache
at the bank's memory (`KVCache.slots` and its layers' keys/values become views of it), so its later
calls copy nothing; a cache the bank is taken from gets a copy of its slots back first. A beam step
reorders rows into a new tensor, which the next call copies in (a few MB, microseconds on a GPU).

With capture=False the same static call runs eagerly: that is how the CPU tests check it (equal to
the plain decoders, no device reads, ownership moves) where no GPU is.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch

from .cache import KVCache, LayerCache

ROUND_TO = 64  # slot capacity and source length of a bank are rounded up to a multiple of this
PAD_MAX = 32  # new tokens per row are padded up to a power of two up to this; longer calls are not padded
CAPTURE_WARMUPS = 3  # eager runs on a side stream before a capture (as torch's CUDA graph notes ask)
MAX_BANKS = 16  # banks kept (with their graphs), the least recently used dropped first: each holds MBs


def _round(n: int) -> int:
    return -(-n // ROUND_TO) * ROUND_TO


def _steps(n: int) -> int:
    """The new tokens a graph takes for a call of n a row (see the module docstring)."""
    padded = 1 << (n - 1).bit_length()
    return padded if padded <= PAD_MAX else n


def _rows(n: int) -> int:
    """A bank's rows for a batch of n: n itself up to 2, else the next power of two (a batch loses
    rows as they finish, and each bank holds graphs of its own)."""
    return n if n <= 2 else 1 << (n - 1).bit_length()


@dataclass(eq=False)
class _Bank:
    slots: torch.Tensor  # (2L, R, H, C, hd)
    cross_keys: torch.Tensor  # (L, R, H, S, hd)
    cross_values: torch.Tensor
    keep: torch.Tensor  # (R, S) True where a source token may be attended
    lengths: torch.Tensor  # (R,) int64
    layers: list[LayerCache] = field(default_factory=list)
    owner: weakref.ref | None = None  # the cache whose slots are in this bank
    cross_from: list[torch.Tensor] = field(default_factory=list)  # what `cross_keys`/`keep` hold, for
    cross_rows: int = 0  # this many rows (see bind)

    @classmethod
    def new(cls, n_layers: int, rows: int, heads: int, capacity: int, head_dim: int, src_len: int,
            device: torch.device, dtype: torch.dtype) -> _Bank:
        # Zeros: slots past a row's length meet the attention with weight 0, and 0 * NaN would poison it.
        slots = torch.zeros(2 * n_layers, rows, heads, capacity, head_dim, device=device, dtype=dtype)
        cross_keys = torch.zeros(n_layers, rows, heads, src_len, head_dim, device=device, dtype=dtype)
        cross_values = torch.zeros_like(cross_keys)
        keep = torch.zeros(rows, src_len, dtype=torch.bool, device=device)
        keep[:, 0] = True  # rows no cache uses attend somewhere (an all-masked row would be NaN)
        bank = cls(slots, cross_keys, cross_values, keep, torch.zeros(rows, dtype=torch.long, device=device))
        bank.layers = [LayerCache(slots[2 * i], slots[2 * i + 1], cross_keys[i], cross_values[i])
                       for i in range(n_layers)]
        return bank

    def holds(self, tensor: torch.Tensor | None) -> bool:
        """Whether tensor lives in this bank's slot memory (any view of it)."""
        return tensor is not None and tensor.untyped_storage().data_ptr() == self.slots.untyped_storage().data_ptr()

    def bind(self, cache: KVCache) -> None:
        """Put the cache's slots, source memory and lengths in the bank, the slots only when the bank
        does not hold them already. Only the bank's owner refers to its memory: a cache the bank is
        taken from gets a copy of its slots, and loses a spare (KVCache.reorder) that is the bank's."""
        rows, capacity = cache.batch_size, cache.slots.shape[3]
        owner = self.owner() if self.owner is not None else None
        if owner is not cache or not self.holds(cache.slots):
            if owner is not None and owner is not cache:
                if self.holds(owner.slots):
                    owner.point_at(owner.slots.clone())
                if self.holds(owner._spare):  # its next reorder would write over the new owner's rows
                    owner._spare = None
            view = self.slots[:, :rows, :, :capacity]
            view.copy_(cache.slots)
            cache.point_at(view)
            self.owner = weakref.ref(cache)
        sources = [t for layer in cache.layers for t in (layer.cross_keys, layer.cross_values)]
        sources.append(cache.src_pad_mask)
        # The source memory may have one row for all the cache's rows (speculative beam search's row
        # pool), so what the bank holds depends on the rows too.
        if rows != self.cross_rows or len(sources) != len(self.cross_from) \
                or any(a is not b for a, b in zip(sources, self.cross_from)):
            src_len = cache.src_pad_mask.shape[1]
            for i, layer in enumerate(cache.layers):
                self.cross_keys[i, :rows, :, :src_len].copy_(layer.cross_keys)
                self.cross_values[i, :rows, :, :src_len].copy_(layer.cross_values)
            self.keep[:rows].fill_(False)
            self.keep[:rows, :src_len].copy_(~cache.src_pad_mask)
            self.cross_from, self.cross_rows = sources, rows
        self.lengths[:rows].copy_(cache.lengths)
        self.lengths[rows:].zero_()


class _Graph:
    """One static decoder call: T new tokens for each row of a bank."""

    def __init__(self, model: torch.nn.Module, bank: _Bank, t_new: int, want_weights: bool):
        self.model, self.bank, self.want_weights = model, bank, want_weights
        self.tokens = torch.zeros(bank.lengths.shape[0], t_new, dtype=torch.long, device=bank.lengths.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []

    def run(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The call, eagerly: fixed shapes, no read of a device value (a capture would fail on one)."""
        from .model import InPlace  # here: model.py imports this module

        model, bank = self.model, self.bank
        capacity, t_new = bank.slots.shape[3], self.tokens.shape[1]
        positions = bank.lengths[:, None] + torch.arange(t_new, device=self.tokens.device)  # (R, T)
        # The caller checks that the call's real tokens are within the model's positions; padding
        # tokens past them take the last position (their outputs are thrown away).
        last_position = model.cfg.max_positions - 1
        x = model.embed_tokens(self.tokens, positions.clamp(max=last_position), longest=last_position)
        may_see = torch.arange(capacity, device=positions.device) <= positions[:, :, None]  # (R, T, C)
        where = InPlace(bank.lengths, None, capacity, may_see.unsqueeze(1))
        src_mask = bank.keep[:, None, None, :]
        weights = None
        last = len(model.decoder) - 1
        for i, (layer, block) in enumerate(zip(bank.layers, model.decoder)):
            x, weights = block.step(x, 1, layer, None, src_mask, self.want_weights and i == last, where)
        self.pending = [(layer.pending_keys, layer.pending_values) for layer in bank.layers]
        return model.logits(x), weights

    def capture(self) -> None:
        """Record the call (CUDA only), after eager runs on a side stream; its replay must give the
        eager logits, else the engine is not used."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(CAPTURE_WARMUPS):
                eager = self.run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # a private memory pool: graphs replay in any order
            self.out = self.run()
        graph.replay()
        if not torch.allclose(self.out[0], eager[0], rtol=1e-4, atol=1e-4):
            raise RuntimeError("a CUDA graph's replay differs from the eager decoder call; use --engine torch")
        self.graph = graph

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.graph is None:
            return self.run()
        self.graph.replay()
        assert self.out is not None
        logits, weights = self.out  # the graph's memory: the next replay writes over it
        return logits.clone(), None if weights is None else weights.clone()


class GraphStep:
    """The engine step of `Seq2SeqTransformer.use_cuda_graphs` (see the module docstring): lean calls
    in CUDA graphs; the encoder and every other call stay eager torch."""

    dtype = "float32"
    masks_itself = True  # model.decode need not build the InPlace mask: the call makes its own
    # The call attends over every slot of its bank, masking those past each row's length with weight 0:
    # a cache's slots must hold finite values everywhere (0 * NaN is NaN), so none runs in lockstep.
    reads_every_slot = True

    def __init__(self, model: torch.nn.Module, capture: bool = True):
        if capture and model.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, not {model.device}")
        self.model, self.capture = model, capture
        self.banks: dict[tuple[int, int, int], _Bank] = {}
        self.graphs: dict[tuple[int, int, int, int, bool], _Graph] = {}

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        return self.model.encode_torch(src)

    def cross_keys_values_of(self, memory: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.decoder[layer].cross_attn.keys_values(memory)

    def _bank(self, cache: KVCache) -> tuple[tuple[int, int, int], _Bank]:
        cfg = self.model.cfg
        capacity, src_len = cache.slots.shape[3], cache.src_pad_mask.shape[1]
        key = (_rows(cache.batch_size), _round(capacity + PAD_MAX), _round(src_len))
        bank = self.banks.pop(key, None)  # put back last: the dict runs from least to most recently used
        if bank is None:
            bank = _Bank.new(cfg.n_decoder_layers, key[0], cfg.n_heads, key[1], cfg.head_dim, key[2],
                             cache.slots.device, cache.slots.dtype)
            if len(self.banks) >= MAX_BANKS:  # its owner, if any, keeps its memory as a tensor of its own
                dropped = next(iter(self.banks))
                del self.banks[dropped]
                self.graphs = {k: g for k, g in self.graphs.items() if k[:3] != dropped}
        self.banks[key] = bank
        return key, bank

    @torch.inference_mode()
    def __call__(self, tokens: torch.Tensor, cache: KVCache, where, want_weights: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tokens (B, 1, T) after each row's cached prefix (`where`: model.InPlace). Returns logits
        (B, 1, T, V) and, if asked, the last layer's head-mean cross-attention (B, 1, T, S); the new
        keys/values are in the cache's slots (the bank's), pending `commit`. Always in inference mode,
        as the decoders run: the banks are made, captured and replayed in one mode (torch refuses an
        in-place update of an inference tensor outside it)."""
        if cache.slot_rows is not None or cache.slots is None:
            raise ValueError("the graphs engine decodes caches with a slots tensor of their own rows")
        if where.upto > self.model.cfg.max_positions:
            raise ValueError(f"sequence longer than the model's {self.model.cfg.max_positions} positions")
        batch, _, t_new = tokens.shape
        key, bank = self._bank(cache)
        bank.bind(cache)
        graph_key = key + (_steps(t_new), want_weights)
        graph = self.graphs.get(graph_key)
        fresh = graph is None
        if graph is None:
            graph = _Graph(self.model, bank, _steps(t_new), want_weights)
        graph.tokens[:batch, :t_new].copy_(tokens.view(batch, t_new))
        if fresh and self.capture:
            graph.capture()  # its eager runs and its check compute this very call
        self.graphs[graph_key] = graph  # kept only once captured
        logits, weights = graph()
        for layer, (keys, values) in zip(cache.layers, graph.pending):  # (R, H, 1, T, hd)
            layer.pending_keys, layer.pending_values = keys[:batch, :, :, :t_new], values[:batch, :, :, :t_new]
        cache.written_in_place = True
        src_len = cache.src_pad_mask.shape[1]
        out_weights = None if weights is None else weights[:batch, :t_new, :src_len].reshape(batch, 1, t_new, src_len)
        return logits[:batch, :t_new].reshape(batch, 1, t_new, -1), out_weights
