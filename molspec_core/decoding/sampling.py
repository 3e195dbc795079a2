"""Sampling and its speculative variants, one query at a time, with the KV cache.

Every step is propose -> verify -> accept: the drafter (drafting.StepDrafter) proposes one draft,
one target-model call feeds it after the pending token, an acceptance rule from verify.py decides
how much of it to keep and which token follows, and the drafter hears the verdict:
- sample: no draft; the next token is drawn from p (temperature, top-k).
- spec-sample: copy draft (a point mass q), speculative sampling; the output is distributed
  exactly as `sample`'s.
- spec-sample-draft: the draft is sampled from a small draft model q; same guarantee.
- relaxed: copy draft, SpecDec++ relaxed greedy verification (lossy; beta=1, tau=0 is greedy).
- mentored: copy or model draft, speculative sampling against the KL-bounded r of mentored
  decoding (lossy; delta=0 is `spec-sample`).
Scores are always sums of the model's own log-probs (temperature 1), so results rank alike.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from ..drafting import CopyDrafts, Draft, Drafter, ModelDrafter, NullDrafter, StepDrafter
from ..limits import QueryTimeout
from ..methods import SamplingOptions, of_family
from ..model import Seq2SeqTransformer
from ..tokenizer import BOS_ID, EOS_ID
from .batch import check_sources, draft_room, start
from .result import GENERATED, DecodeResult, DecodeStats, Hypothesis
from .verify import accept_relaxed, accept_sampled, adjust_probs, mentored_copy_target, mentored_target

SAMPLING_MODES = of_family("sampling")  # the methods this loop runs (methods.py)


def _accept(logits: torch.Tensor, draft: Draft, mode: str, options: SamplingOptions,
            generator: torch.Generator) -> tuple[int, int]:
    """The acceptance rule of `mode` on one call's logits (1+D, V): (n_accepted, next_token)."""
    draft_tokens = torch.tensor([draft.tokens], dtype=torch.long)  # (1, D)
    if mode == "relaxed":
        n_accepted, next_token = accept_relaxed(draft_tokens, logits.unsqueeze(0), options.beta, options.tau)
        return int(n_accepted[0]), int(next_token[0])
    target_probs = adjust_probs(logits, options.temperature, options.top_k)  # (1+D, V)
    draft_probs = draft.draft_probs(target_probs.shape[-1])  # (D, V)
    if mode == "mentored" and draft.tokens:  # the bonus position has no draft, so keeps p
        shaped = (mentored_copy_target(target_probs[:-1], draft.tokens, options.delta) if draft.probs is None
                  else mentored_target(target_probs[:-1], draft_probs, options.delta))
        target_probs = torch.cat([shaped, target_probs[-1:]])
    n_accepted, next_token = accept_sampled(draft_tokens, draft_probs.unsqueeze(0), target_probs.unsqueeze(0),
                                            generator)
    return int(n_accepted[0]), int(next_token[0])


@torch.inference_mode()
def sample_one(model: Seq2SeqTransformer, src: Sequence[int], mode: str, drafter: StepDrafter,
               options: SamplingOptions, generator: torch.Generator, max_len: int | None = None,
               max_positions: int | None = None) -> DecodeResult:
    """One decode of `src`: propose -> verify -> accept until eos or the budget.
    max_positions: the positions every model fed has (a draft model's may be fewer than the target's).
    At the time limit (limits.py) it raises QueryTimeout with the calls made so far and no sample: a draw cut
    short is none, but its calls were paid for (a stopped row counts them, as beam search's does)."""
    started = time.perf_counter()
    stats = DecodeStats()
    try:
        return _draw(model, src, mode, drafter, options, generator, max_len, max_positions, stats, started)
    except QueryTimeout as timeout:
        stats.wall_time_s = time.perf_counter() - started
        raise QueryTimeout(str(timeout), found=[DecodeResult([], stats)], searched=[False]) from None


def _draw(model: Seq2SeqTransformer, src: Sequence[int], mode: str, drafter: StepDrafter, options: SamplingOptions,
          generator: torch.Generator, max_len: int | None, max_positions: int | None, stats: DecodeStats,
          started: float) -> DecodeResult:
    """sample_one's loop; it counts its calls in `stats` as it makes them."""
    device = model.device
    cache, (budget,) = start(model, [src], max_len, max_positions=max_positions)
    tokens: list[int] = []
    provenance: list[int] = []
    score, pending, peak, finished = 0.0, BOS_ID, None, False
    while len(tokens) < budget:
        # One row, and a cache sized to its budget: the budget's room is all the room the call has.
        draft = drafter.draft([BOS_ID] + tokens, peak, draft_room(len(tokens), budget))
        fed = torch.tensor([[[pending, *draft.tokens]]], device=device)  # (1, 1, 1+D)
        logits, attention = model.decode(fed, cache, cross_attention=drafter.needs_attention)
        logits = logits[0, 0].float().cpu()  # (1+D, V)
        n_accepted, next_token = _accept(logits, draft, mode, options, generator)
        cache.commit(torch.tensor([1 + n_accepted], device=device))
        drafter.accept(draft, n_accepted, next_token)
        new = [*draft.tokens[:n_accepted], next_token]
        new_origin = [*draft.origin[:n_accepted], GENERATED]
        if attention is not None:
            peak = int(attention[0, 0, n_accepted].argmax())
        # A draft model's draft may end in eos (ModelDrafter.draft stops there): accepted, it ends the output,
        # and the call's bonus token after it is neither output nor score.
        ends = EOS_ID in new
        if ends:
            del new[new.index(EOS_ID) + 1:]
        stats.record_call(len(draft.tokens), n_accepted, n_accepted < len(draft.tokens), len(new))
        log_probs = logits.log_softmax(dim=-1)  # scores use the model's own log-probs, whatever the mode
        score += float(sum(log_probs[i, t] for i, t in enumerate(new)))  # eos's included, as beam search's
        if ends:
            tokens += new[:-1]
            provenance += new_origin[:len(new) - 1]
            finished = True
            break
        tokens += new
        provenance += new_origin
        pending = next_token
    stats.wall_time_s = time.perf_counter() - started
    return DecodeResult([Hypothesis(tuple(tokens), score, tuple(provenance), finished)], stats)


@torch.inference_mode()
def sample_decode(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]], mode: str,
                  drafter_factory: Callable[[Sequence[int]], Drafter] | None, options: SamplingOptions,
                  draft_model: Seq2SeqTransformer | None = None, max_len: int | None = None) -> list[DecodeResult]:
    """One sample per source; row i draws from a generator seeded with options.seed + i.

    Drafts come from the draft model for spec-sample-draft, and for mentored when one is given;
    from the copy drafter otherwise; never for plain sampling."""
    if mode not in SAMPLING_MODES:
        raise ValueError(f"unknown sampling mode {mode!r}")
    drafts_from_model = mode == "spec-sample-draft" or (mode == "mentored" and draft_model is not None)
    if drafts_from_model and draft_model is None:
        raise ValueError(f"{mode} needs a draft model")
    if drafts_from_model and draft_model is not None and draft_model.cfg.vocab_size != model.cfg.vocab_size:
        raise ValueError(f"the draft model's vocabulary has {draft_model.cfg.vocab_size} tokens and the model's "
                         f"{model.cfg.vocab_size}: a draft model must share the model's vocabulary")
    # A draft model is fed the same positions as the target, so the budget must suit both.
    fed_models = (model, draft_model) if draft_model is not None and drafts_from_model else (model,)
    max_positions = min(m.cfg.max_positions for m in fed_models)
    check_sources(sources, model.cfg.vocab_size, max_positions)  # all before the first query is decoded
    results = []
    for i, src in enumerate(sources):
        generator = torch.Generator().manual_seed(options.seed + i)
        drafter: StepDrafter
        try:
            if draft_model is not None and drafts_from_model:  # it encodes the source: a time limit may stop it
                drafter = ModelDrafter(draft_model, src, max_len, max_positions, options, generator)
            elif mode == "sample" or drafter_factory is None:
                drafter = CopyDrafts(NullDrafter(src), src)
            else:
                drafter = CopyDrafts(drafter_factory(src), src)
            results.append(sample_one(model, src, mode, drafter, options, generator, max_len, max_positions))
        except QueryTimeout as timeout:  # the sources before this one are whole, this one's draw cut short
            cut = timeout.found or [DecodeResult([], DecodeStats())]  # stopped before its first call: none counted
            raise QueryTimeout(str(timeout), found=[*results, *cut],
                               searched=[True] * len(results) + [False]) from None
    return results
