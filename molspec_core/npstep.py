"""The lean decoder call in NumPy, for float32 inference on CPU (issue 16).

At batch size 1 a decoder call of this model is a few dozen small products and element-wise ops
on (T, 256) arrays. Through torch each of those ops costs more in dispatch than in arithmetic, and
its one-row GEMM (M=1) is slower than OpenBLAS's GEMV: the same call in NumPy takes well under half
the time (measured: molspec bench --engine). Products of several rows (M > 1) go to torch's GEMM
(zero-copy), which is the faster of the two there on this kind of CPU.

`NumpyStep` computes exactly what `Seq2SeqTransformer.decode` computes on its lean path (one branch
of T tokens per row, written in place into the caller's KVCache), from a snapshot of the model's
weights, packed for it: each layer norm's gain and bias folded into the product that follows it,
the attention scale folded into the query weights, the self-attention's query, key and value
products in one. It reads and writes the cache's own tensors through zero-copy NumPy views, so
`commit`, `rollback` and `reorder` work unchanged. tests/test_npstep.py pins it to the torch call.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .cache import KVCache

def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


class _Affine:
    """x @ weight + bias, with the weight stored (d_in, d_out) for NumPy and viewed by torch."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, norm: torch.nn.LayerNorm | None = None):
        """weight (d_out, d_in) as nn.Linear keeps it; with `norm`, the map applies to the output of
        that layer norm: layer_norm(x) @ W.T + b == normalized(x) @ (gain * W).T + (W @ shift + b)."""
        w = _np(weight)
        b = _np(bias) if bias is not None else np.zeros(w.shape[0], np.float32)
        if norm is not None:
            b = b + w @ _np(norm.bias)
            w = w * _np(norm.weight)
        self.weight = np.ascontiguousarray(w.T)
        self.bias = b.astype(np.float32)
        self.weight_torch, self.bias_torch = torch.from_numpy(self.weight), torch.from_numpy(self.bias)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x (M, d_in): OpenBLAS's GEMV for one row, torch's GEMM for several (the faster of the two for each)."""
        if x.shape[0] == 1:
            out = x @ self.weight
            out += self.bias
            return out
        return torch.addmm(self.bias_torch, torch.from_numpy(x), self.weight_torch).numpy()


@dataclass(frozen=True)
class _Layer:
    qkv: _Affine  # norm1 + self-attention query (scaled), keys, values
    self_out: _Affine
    cross_query: _Affine  # norm2 + cross-attention query (scaled)
    cross_out: _Affine
    up: _Affine  # norm3 + feed-forward up
    down: _Affine


def _normalized(x: np.ndarray, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) over the last axis, without gain or bias (they are folded);
    torch's one fused op, zero-copy, costs a third of NumPy's ten."""
    return torch.layer_norm(torch.from_numpy(x), x.shape[-1:], None, None, eps).numpy()


def _softmax_(scores: np.ndarray) -> np.ndarray:
    scores -= scores.max(-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(-1, keepdims=True)
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
        self.eps = model.decoder_norm.eps  # every layer norm of the model has the same
        scale = 1.0 / math.sqrt(cfg.head_dim)
        self.layers: list[_Layer] = []
        for block in model.decoder:
            attn, cross = block.self_attn, block.cross_attn
            qkv_weight = torch.cat([attn.query.weight * scale, attn.key_value.weight])
            qkv_bias = torch.cat([attn.query.bias * scale, attn.key_value.bias])
            self.layers.append(_Layer(
                qkv=_Affine(qkv_weight, qkv_bias, block.norm1),
                self_out=_Affine(attn.out.weight, attn.out.bias),
                cross_query=_Affine(cross.query.weight * scale, cross.query.bias * scale, block.norm2),
                cross_out=_Affine(cross.out.weight, cross.out.bias),
                up=_Affine(block.ff.up.weight, block.ff.up.bias, block.norm3),
                down=_Affine(block.ff.down.weight, block.ff.down.bias)))
        self.embed = _np(model.embed.weight) * np.float32(math.sqrt(cfg.d_model))
        self.positions = _np(model.positions).copy()
        self.output = _Affine(model.embed.weight, None, model.decoder_norm)  # tied projection

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
            qkv = layer.qkv(_normalized(x, self.eps)).reshape(batch, t_new, 3, heads, hd)
            query = qkv[:, :, 0].transpose(0, 2, 1, 3)  # (B, H, T, hd)
            keys, values = qkv[:, :, 1].transpose(0, 2, 1, 3), qkv[:, :, 2].transpose(0, 2, 1, 3)
            if rows is None:
                keys_all[:, :, where.start:where.upto] = keys
                values_all[:, :, where.start:where.upto] = values
            else:
                keys_all[rows, :, slots] = keys.transpose(0, 2, 1, 3)  # (B, T, H, hd)
                values_all[rows, :, slots] = values.transpose(0, 2, 1, 3)
            new_keys.append(keys)
            new_values.append(values)
            scores = query @ keys_all[:, :, :where.upto].transpose(0, 1, 3, 2)  # (B, H, T, upto)
            if self_mask is not None:
                scores += self_mask
            attended = _softmax_(scores) @ values_all[:, :, :where.upto]  # (B, H, T, hd)
            x = x + layer.self_out(attended.transpose(0, 2, 1, 3).reshape(batch * t_new, d))

            cross_keys, cross_values = store.cross_keys.numpy(), store.cross_values.numpy()  # (B, H, S, hd)
            query = layer.cross_query(_normalized(x, self.eps)).reshape(batch, t_new, heads, hd).transpose(0, 2, 1, 3)
            scores = query @ cross_keys.transpose(0, 1, 3, 2)  # (B, H, T, S)
            if src_mask is not None:
                scores += src_mask
            probs = _softmax_(scores)
            if want_weights and i == len(self.layers) - 1:
                weights = probs.mean(axis=1)  # (B, T, S)
            attended = probs @ cross_values
            x = x + layer.cross_out(attended.transpose(0, 2, 1, 3).reshape(batch * t_new, d))

            hidden = layer.up(_normalized(x, self.eps))
            np.maximum(hidden, 0.0, out=hidden)
            x = x + layer.down(hidden)
        for store, keys, values in zip(cache.layers, new_keys, new_values):
            store.pending_keys = torch.from_numpy(keys)[:, :, None]  # (B, H, 1, T, hd)
            store.pending_values = torch.from_numpy(values)[:, :, None]
        cache.written_in_place = True
        logits = self.output(_normalized(x, self.eps))
        out_weights = torch.from_numpy(weights).view(batch, 1, t_new, -1) if weights is not None else None
        return torch.from_numpy(logits).view(batch, 1, t_new, -1), out_weights
