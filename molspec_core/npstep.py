"""The lean decoder call in NumPy, for float32 inference on CPU (issue 16).

At batch size 1 a decoder call of this model is a few dozen small products and element-wise ops
on (T, 256) arrays. Through torch each of those ops costs more in dispatch than in arithmetic, so
the call runs in NumPy, and its products go to the fastest kernel measured for few rows on this
kind of CPU: FBGEMM's fp16-weight product (packed once; float32 arithmetic on weights read as
float16, which is exact for the shipped weights, stored in float16), else OpenBLAS.

`NumpyStep` computes what `Seq2SeqTransformer.decode` computes on its lean path (one branch of T
tokens per row, written in place into the caller's KVCache), up to float32 summation order, from a
snapshot of the model's weights: each layer norm's shift folded into the bias of the product that
follows it, the self-attention's query, key and value products in one. It reads and writes the
cache's own tensors through zero-copy NumPy views, so `commit`, `rollback` and `reorder` work
unchanged. It also runs the encoder and the cross-attention keys/values of a new cache
(`encode`, `cross_keys_values_of`), the other quarter of a speculative query's time.
tests/test_npstep.py pins all of it to torch, with either kernel.
"""
from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from .cache import KVCache
from .tokenizer import PAD_ID


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


# Products of at most this many rows go to FBGEMM's fp16-weight kernel when it can be used (measured on
# the 2-core AMD EPYC, one thread: 1.5-2.5x faster than OpenBLAS for 1-16 rows, the encoder of a
# 50- or 80-token query 7-15% faster); at 256 rows OpenBLAS's sgemm was 4% faster.
PACKED_MAX_ROWS = 128


def _quietly(function, *args):
    """torch marks FBGEMM's fp16-weight functions deprecated, with a warning on first use, but ships
    them; where it no longer does, the products fall back to OpenBLAS (fp16_kernel_available). The
    probe makes that first use, so the product never warns in the decoding loop."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".* is deprecated", category=UserWarning)
        return function(*args)


@functools.cache
def fp16_kernel_available() -> bool:
    """Whether this torch and CPU run FBGEMM's fp16-weight product (x86 with AVX2; torch marks the
    API deprecated, so a torch without it falls back to OpenBLAS)."""
    if not hasattr(torch, "fbgemm_linear_fp16_weight"):
        return False
    try:
        packed = _quietly(torch.fbgemm_pack_gemm_matrix_fp16, torch.eye(8))
        out = _quietly(torch.fbgemm_linear_fp16_weight, torch.ones(1, 8), packed, torch.zeros(8))
    except RuntimeError:
        return False
    return bool(torch.equal(out, torch.ones(1, 8)))


def fp16_exact(*tensors: torch.Tensor) -> bool:
    """Every value survives a round trip through float16 (as weights stored in float16 do)."""
    return all(bool(torch.equal(t.detach().half().float(), t.detach().float())) for t in tensors)


class _Affine:
    """[layer_norm](x) @ W.T + b, times `scale`, for x (M, d_in).

    The layer norm's shift and `scale` are folded into the bias and the norm's gain; W itself is used
    as the model holds it, so that weights stored in float16 stay exactly representable in float16 and
    FBGEMM's fp16-weight kernel (`packed`: weights packed once, products summed in float32) computes
    the float32 product with half the bytes to read: 1.5-2.5x faster than OpenBLAS for 1-16 rows.
    Without it: OpenBLAS's GEMV/GEMM through NumPy."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, norm: torch.nn.LayerNorm | None = None,
                 scale: float = 1.0, packed: bool = False):
        w = weight.detach().float().cpu()
        b = bias.detach().float().cpu() if bias is not None else torch.zeros(w.shape[0])
        self.gain: torch.Tensor | None = None
        self.eps = 0.0
        if norm is not None:  # layer_norm(x) @ W.T + b == (normalized(x) * gain) @ W.T + (W @ shift + b)
            b = b + w @ norm.bias.detach().float().cpu()
            self.gain, self.eps = norm.weight.detach().float().cpu() * scale, norm.eps
        elif scale != 1.0:
            raise ValueError("scale is folded into a layer norm's gain")
        self.bias_torch = (b * scale).contiguous()
        self.bias = self.bias_torch.numpy()
        self.weight = np.ascontiguousarray(w.numpy().T)  # (d_in, d_out)
        self.packed = None
        if packed:
            self.packed = _quietly(torch.fbgemm_pack_gemm_matrix_fp16, w.contiguous())

    def __call__(self, x: np.ndarray) -> np.ndarray:
        rows = torch.from_numpy(x)
        if self.gain is not None:
            rows = torch.layer_norm(rows, self.gain.shape, self.gain, None, self.eps)
        if self.packed is not None and x.shape[0] <= PACKED_MAX_ROWS:
            return torch.fbgemm_linear_fp16_weight(rows, self.packed, self.bias_torch).numpy()
        out = rows.numpy() @ self.weight
        out += self.bias
        return out


@dataclass(frozen=True)
class _Layer:
    qkv: _Affine  # norm1 + self-attention query (unscaled), keys, values
    self_out: _Affine
    cross_query: _Affine  # norm2 + cross-attention query (scaled)
    cross_out: _Affine
    up: _Affine  # norm3 + feed-forward up
    down: _Affine


@dataclass(frozen=True)
class _EncoderLayer:
    qkv: _Affine  # norm1 + self-attention query (unscaled), keys, values
    out: _Affine
    up: _Affine  # norm2 + feed-forward up
    down: _Affine


def _softmax_(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in place: torch's one fused kernel on the same memory costs a third
    of NumPy's four passes at these sizes (2.6 vs 6.2 us for one row's 8 heads, 5.5 vs 16.0 for ten
    rows; greedy 7% and spec-pointer 10% faster on 100 retro queries, outputs identical)."""
    view = torch.from_numpy(scores)
    torch.softmax(view, -1, out=view)
    return scores


def _additive(mask: torch.Tensor | None) -> np.ndarray | None:
    """A boolean may-attend mask as 0 / -inf to add to scores."""
    if mask is None:
        return None
    return np.where(mask.cpu().numpy(), np.float32(0.0), np.float32(-np.inf))


class NumpyStep:
    """The lean decoder call of one model in NumPy (see the module docstring)."""

    def __init__(self, model: torch.nn.Module):
        cfg = model.cfg
        self.d_model, self.n_heads, self.head_dim = cfg.d_model, cfg.n_heads, cfg.head_dim
        self.max_positions = cfg.max_positions
        self.scale = np.float32(1.0 / math.sqrt(cfg.head_dim))
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        # FBGEMM's fp16-weight kernel only where it computes the float32 product: weights stored in float16.
        self.packed = fp16_kernel_available() and fp16_exact(model.embed.weight, *(lin.weight for lin in linears))
        packed = self.packed
        self.encoder_layers = [_EncoderLayer(
            qkv=_Affine(torch.cat([b.attn.query.weight, b.attn.key_value.weight]),
                        torch.cat([b.attn.query.bias, b.attn.key_value.bias]), b.norm1, packed=packed),
            out=_Affine(b.attn.out.weight, b.attn.out.bias, packed=packed),
            up=_Affine(b.ff.up.weight, b.ff.up.bias, b.norm2, packed=packed),
            down=_Affine(b.ff.down.weight, b.ff.down.bias, packed=packed)) for b in model.encoder]
        self.encoder_norm = model.encoder_norm
        self.cross_keys_values = [_Affine(b.cross_attn.key_value.weight, b.cross_attn.key_value.bias, packed=packed)
                                  for b in model.decoder]
        self.layers: list[_Layer] = []
        for block in model.decoder:
            attn, cross = block.self_attn, block.cross_attn
            self.layers.append(_Layer(
                qkv=_Affine(torch.cat([attn.query.weight, attn.key_value.weight]),
                            torch.cat([attn.query.bias, attn.key_value.bias]), block.norm1, packed=packed),
                self_out=_Affine(attn.out.weight, attn.out.bias, packed=packed),
                cross_query=_Affine(cross.query.weight, cross.query.bias, block.norm2, float(self.scale), packed),
                cross_out=_Affine(cross.out.weight, cross.out.bias, packed=packed),
                up=_Affine(block.ff.up.weight, block.ff.up.bias, block.norm3, packed=packed),
                down=_Affine(block.ff.down.weight, block.ff.down.bias, packed=packed)))
        self.embed = _np(model.embed.weight) * np.float32(math.sqrt(cfg.d_model))
        self.positions = _np(model.positions).copy()
        self.output = _Affine(model.embed.weight, None, model.decoder_norm, packed=packed)  # tied projection

    def _heads(self, x: np.ndarray, batch: int) -> np.ndarray:
        """(B*L, H*hd) -> (B, H, L, hd), a view."""
        return x.reshape(batch, -1, self.n_heads, self.head_dim).transpose(0, 2, 1, 3)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """Seq2SeqTransformer.encode in NumPy: src (B, S) padded with PAD_ID -> memory (B, S, d)."""
        ids = src.cpu().numpy()
        batch, length = ids.shape
        if length > self.max_positions:
            raise ValueError(f"sequence longer than the model's {self.max_positions} positions")
        x = (self.embed[ids] + self.positions[:length]).reshape(batch * length, self.d_model)
        keep = ids != PAD_ID
        mask = None if keep.all() else _additive(torch.from_numpy(keep[:, None, None, :]))  # (B, 1, 1, S)
        for layer in self.encoder_layers:
            qkv = layer.qkv(x).reshape(batch, length, 3, self.d_model)
            query = self._heads(qkv[:, :, 0], batch) * self.scale
            scores = query @ self._heads(qkv[:, :, 1], batch).transpose(0, 1, 3, 2)  # (B, H, S, S)
            if mask is not None:
                scores += mask
            attended = _softmax_(scores) @ self._heads(qkv[:, :, 2], batch)  # (B, H, S, hd)
            x = x + layer.out(attended.transpose(0, 2, 1, 3).reshape(batch * length, self.d_model))
            hidden = layer.up(x)
            np.maximum(hidden, 0.0, out=hidden)
            x = x + layer.down(hidden)
        norm = self.encoder_norm
        return torch.layer_norm(torch.from_numpy(x), (self.d_model,), norm.weight, norm.bias,
                                norm.eps).view(batch, length, self.d_model)

    def cross_keys_values_of(self, memory: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention.keys_values of decoder layer `layer`'s cross-attention: (B, H, S, hd) each, contiguous."""
        batch, length, d = memory.shape
        kv = self.cross_keys_values[layer](
            memory.detach().reshape(batch * length, d).numpy()).reshape(batch, length, 2, d)
        return (torch.from_numpy(np.ascontiguousarray(self._heads(kv[:, :, 0], batch))),
                torch.from_numpy(np.ascontiguousarray(self._heads(kv[:, :, 1], batch))))

    def __call__(self, tokens: torch.Tensor, cache: KVCache, where, want_weights: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tokens (B, 1, T) after each row's cached prefix, placed as `where` (model.InPlace) says.
        Returns logits (B, 1, T, V) and, if asked, the last layer's head-mean cross-attention
        (B, 1, T, S); the new keys/values are in the cache's slots, pending `commit`."""
        batch, _, t_new = tokens.shape
        d, heads, hd = self.d_model, self.n_heads, self.head_dim
        ids = tokens.reshape(batch, t_new).cpu().numpy()
        if where.start is not None:
            positions = np.arange(where.start, where.upto)
            rows = slots = None
        else:
            lengths = where.lengths.cpu().numpy()
            positions = slots = lengths[:, None] + np.arange(t_new)  # (B, T)
            rows = np.arange(batch)[:, None]
        if int(positions.max()) >= self.max_positions:
            raise ValueError(f"sequence longer than the model's {self.max_positions} positions")
        x = (self.embed[ids] + self.positions[positions]).reshape(batch * t_new, d)
        self_mask = _additive(where.mask)
        src_mask = _additive(cache.src_attention_mask())
        weights = None
        new_keys, new_values = [], []
        for i, (layer, store) in enumerate(zip(self.layers, cache.layers)):
            keys_all, values_all = store.keys.numpy(), store.values.numpy()  # (B, H, capacity, hd) views
            qkv = layer.qkv(x).reshape(batch, t_new, 3, heads, hd)
            query = qkv[:, :, 0].transpose(0, 2, 1, 3) * self.scale  # (B, H, T, hd)
            keys, values = qkv[:, :, 1].transpose(0, 2, 1, 3), qkv[:, :, 2].transpose(0, 2, 1, 3)
            if rows is None:
                keys_all[:, :, where.start:where.upto] = keys
                values_all[:, :, where.start:where.upto] = values
            else:
                keys_all[rows, :, slots] = keys.transpose(0, 2, 1, 3)  # (B, T, H, hd)
                values_all[rows, :, slots] = values.transpose(0, 2, 1, 3)
                # A shorter row's slots past its new tokens, up to `upto`, were never written (the cache's slots are
                # not zeroed); masked, they weigh 0, but 0 times a NaN or infinity there (an old -inf mask's memory)
                # is NaN: the whole row's answer went NaN. Zeroed here; no row reads them as its own.
                for row, end in enumerate(lengths + t_new):
                    keys_all[row, :, end:where.upto] = 0.0
                    values_all[row, :, end:where.upto] = 0.0
            new_keys.append(keys)
            new_values.append(values)
            scores = query @ keys_all[:, :, :where.upto].transpose(0, 1, 3, 2)  # (B, H, T, upto)
            if self_mask is not None:
                scores += self_mask
            attended = _softmax_(scores) @ values_all[:, :, :where.upto]  # (B, H, T, hd)
            x = x + layer.self_out(attended.transpose(0, 2, 1, 3).reshape(batch * t_new, d))

            cross_keys, cross_values = store.cross_keys.numpy(), store.cross_values.numpy()  # (B, H, S, hd)
            query = layer.cross_query(x).reshape(batch, t_new, heads, hd).transpose(0, 2, 1, 3)
            scores = query @ cross_keys.transpose(0, 1, 3, 2)  # (B, H, T, S)
            if src_mask is not None:
                scores += src_mask
            probs = _softmax_(scores)
            if want_weights and i == len(self.layers) - 1:
                weights = probs.mean(axis=1)  # (B, T, S)
            attended = probs @ cross_values
            x = x + layer.cross_out(attended.transpose(0, 2, 1, 3).reshape(batch * t_new, d))

            hidden = layer.up(x)
            np.maximum(hidden, 0.0, out=hidden)
            x = x + layer.down(hidden)
        for store, keys, values in zip(cache.layers, new_keys, new_values):
            store.pending_keys = torch.from_numpy(keys)[:, :, None]  # (B, H, 1, T, hd)
            store.pending_values = torch.from_numpy(values)[:, :, None]
        cache.written_in_place = True
        logits = self.output(x)
        out_weights = torch.from_numpy(weights).view(batch, 1, t_new, -1) if weights is not None else None
        return torch.from_numpy(logits).view(batch, 1, t_new, -1), out_weights
