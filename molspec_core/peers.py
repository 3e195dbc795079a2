"""CTranslate2 as a benchmark peer: our checkpoint converted with its spec API, decoded by its engine.

CTranslate2 is the optimized C++ engine a practitioner converts an OpenNMT-style Transformer to, so
it is the speed anchor of `bench --peer ctranslate2`. The conversion maps our layers one to one onto
its pre-norm Transformer spec; the sinusoidal table is written out because CTranslate2's own layout
differs from ours. `ctranslate2` is an optional extra (`pip install -e .[peers]`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import checkpoint
from .decoding.batch import target_budget
from .tokenizer import BOS, EOS, UNK

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which our model uses


def _linear(spec, layer) -> None:
    spec.weight = layer.weight.detach().float().numpy()
    spec.bias = layer.bias.detach().float().numpy()


def _norm(spec, norm) -> None:
    spec.gamma = norm.weight.detach().float().numpy()
    spec.beta = norm.bias.detach().float().numpy()


def _concat_linear(spec, *layers) -> None:
    spec.weight = np.concatenate([layer.weight.detach().float().numpy() for layer in layers])
    spec.bias = np.concatenate([layer.bias.detach().float().numpy() for layer in layers])


def convert_to_ctranslate2(model_dir: str | Path, out_dir: str | Path) -> Path:
    """Write a float32 CTranslate2 model of a MolSpec model folder (int8 is chosen at load time)."""
    from ctranslate2.specs import transformer_spec

    model, vocab, _ = checkpoint.load(model_dir)
    cfg = model.cfg
    spec = transformer_spec.TransformerSpec.from_config((cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.n_heads,
                                                        pre_norm=True)
    embeddings = model.embed.weight.detach().float().numpy()
    positions = model.positions.detach().float().numpy()
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = embeddings
    encoder.position_encodings.encodings = positions
    _norm(encoder.layer_norm, model.encoder_norm)
    for layer_spec, layer in zip(encoder.layer, model.encoder):
        attention = layer_spec.self_attention
        _norm(attention.layer_norm, layer.norm1)
        _concat_linear(attention.linear[0], layer.attn.query, layer.attn.key_value)  # fused q, k, v
        _linear(attention.linear[1], layer.attn.out)
        _norm(layer_spec.ffn.layer_norm, layer.norm2)
        _linear(layer_spec.ffn.linear_0, layer.ff.up)
        _linear(layer_spec.ffn.linear_1, layer.ff.down)
    decoder.embeddings.weight = embeddings
    decoder.position_encodings.encodings = positions
    _norm(decoder.layer_norm, model.decoder_norm)
    decoder.projection.weight = embeddings  # tied output projection, no bias
    for layer_spec, layer in zip(decoder.layer, model.decoder):
        _norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _concat_linear(layer_spec.self_attention.linear[0], layer.self_attn.query, layer.self_attn.key_value)
        _linear(layer_spec.self_attention.linear[1], layer.self_attn.out)
        _norm(layer_spec.attention.layer_norm, layer.norm2)
        _linear(layer_spec.attention.linear[0], layer.cross_attn.query)
        _linear(layer_spec.attention.linear[1], layer.cross_attn.key_value)  # fused k, v
        _linear(layer_spec.attention.linear[2], layer.cross_attn.out)
        _norm(layer_spec.ffn.layer_norm, layer.norm3)
        _linear(layer_spec.ffn.linear_0, layer.ff.up)
        _linear(layer_spec.ffn.linear_1, layer.ff.down)
    spec.register_source_vocabulary(list(vocab.tokens))
    spec.register_target_vocabulary(list(vocab.tokens))
    config = spec.config
    config.bos_token, config.eos_token, config.unk_token, config.decoder_start_token = BOS, EOS, UNK, BOS
    config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.validate()
    spec.optimize()  # float32 as given
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    return out_dir


@dataclass(frozen=True)
class PeerHypothesis:
    tokens: tuple[str, ...]  # output tokens, without bos/eos
    score: float  # sum of token log-probabilities (no length normalization, as our beam search)


class CTranslate2Peer:
    """A converted model decoded by CTranslate2 on CPU, one query at a time (batch size 1)."""

    def __init__(self, ct2_dir: str | Path, compute_type: str = "float32", threads: int = 1,
                 max_positions: int = 1024):
        import ctranslate2

        self.translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type=compute_type,
                                                 inter_threads=1, intra_threads=threads)
        self.compute_type, self.max_positions = compute_type, max_positions

    def decode(self, src_tokens: list[str], width: int = 1, n_best: int = 1) -> list[PeerHypothesis]:
        """Greedy (width 1) or beam search with our length budget and ranking by summed log-probs.

        min_decoding_length=0: CTranslate2's default of 1 forbids eos at the first step and
        renormalizes, which changes that step's log-probability (our decoders allow an empty answer)."""
        result = self.translator.translate_batch(
            [src_tokens], beam_size=width, num_hypotheses=n_best, length_penalty=0.0, return_scores=True,
            min_decoding_length=0, max_decoding_length=target_budget(len(src_tokens), self.max_positions))[0]
        return [PeerHypothesis(tuple(h), float(s)) for h, s in zip(result.hypotheses, result.scores)]

