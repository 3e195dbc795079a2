"""Sampling and its speculative variants, one query at a time, with the KV cache.

Every step feeds the pending token and a draft in one target-model call, then an acceptance rule
from verify.py decides how much of the draft to keep and which token follows:
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

from ..drafting import Drafter, NullDrafter
from ..methods import SamplingOptions, of_family
from ..model import Seq2SeqTransformer
from ..tokenizer import BOS_ID, EOS_ID
from .batch import draft_room, fit_drafts, start
from .result import GENERATED, DecodeResult, DecodeStats, Hypothesis
from .verify import accept_relaxed, accept_sampled, adjust_probs, mentored_target

SAMPLING_MODES = of_family("sampling")  # the methods this loop runs (methods.py)


class _DraftModel:
    """A small autoregressive draft model with its own cache, kept in step with the output."""

    def __init__(self, model: Seq2SeqTransformer, src: Sequence[int], max_len: int | None, max_positions: int,
                 options: SamplingOptions, generator: torch.Generator):
        self.model, self.options, self.generator = model, options, generator
        self.cache, _ = start(model, [src], max_len, max_positions=max_positions)  # the target's budget
        self.pending = [BOS_ID]  # accepted tokens not yet fed to the draft model

    def propose(self, depth: int) -> tuple[list[int], torch.Tensor]:
        """Sample `depth` tokens from q; returns them and q at each (depth, V)."""
        device = self.model.device
        tokens, probs = [], []
        feed = self.pending
        for _ in range(depth):
            logits, _ = self.model.decode(torch.tensor([[feed]], device=device), self.cache)
            self.cache.commit(torch.tensor([len(feed)], device=device))
            q = adjust_probs(logits[0, 0, -1], self.options.temperature, self.options.top_k)
            token = int(torch.multinomial(q.cpu(), 1, generator=self.generator))
            tokens.append(token)
            probs.append(q.cpu())
            feed = [token]
        return tokens, torch.stack(probs) if probs else torch.zeros(0, self.model.cfg.vocab_size)

    def accept(self, drafted: list[int], n_accepted: int, next_token: int) -> None:
        """Keep the draft model's cache on the accepted prefix; what it has not fed stays pending."""
        if not drafted:  # nothing was proposed (no room left), so nothing was fed
            self.pending = self.pending + [next_token]
            return
        fed = len(self.pending) + max(len(drafted) - 1, 0)  # tokens fed during propose
        keep = len(self.pending) + min(n_accepted, max(len(drafted) - 1, 0))
        self.cache.rollback(self.cache.lengths - (fed - keep))
        self.pending = ([drafted[-1]] if drafted and n_accepted == len(drafted) else []) + [next_token]


@torch.inference_mode()
def sample_one(model: Seq2SeqTransformer, src: Sequence[int], mode: str, drafter: Drafter,
               options: SamplingOptions, generator: torch.Generator, draft_model: Seq2SeqTransformer | None = None,
               max_len: int | None = None) -> DecodeResult:
    if mode not in SAMPLING_MODES:
        raise ValueError(f"unknown sampling mode {mode!r}")
    started = time.perf_counter()
    device = model.device
    drafts_from_model = mode == "spec-sample-draft" or (mode == "mentored" and draft_model is not None)
    if drafts_from_model and draft_model is None:
        raise ValueError(f"{mode} needs a draft model")
    draft_model = draft_model if drafts_from_model else None  # the other modes never feed it
    # A draft model is fed the same positions as the target, so the budget must suit both.
    max_positions = min(m.cfg.max_positions for m in (model, draft_model) if m is not None)
    cache, (budget,) = start(model, [src], max_len, max_positions=max_positions)
    slots = min(max_positions, cache.capacity)
    helper = None
    if draft_model is not None:
        helper = _DraftModel(draft_model, src, max_len, max_positions, options, generator)
    tokens: list[int] = []
    provenance: list[int] = []
    score, stats, pending, peak, finished = 0.0, DecodeStats(), BOS_ID, None, False
    while len(tokens) < budget:
        draft_probs = None
        if mode == "sample":
            draft, origin = [], []
        elif helper is not None:
            draft, draft_probs = helper.propose(min(options.draft_len, draft_room(len(tokens), budget)))
            origin = [GENERATED] * len(draft)
        else:
            proposals = fit_drafts([drafter.propose([BOS_ID] + tokens, peak)], [len(tokens)], [budget], slots)[0]
            origin = proposals[0] if proposals else []
            draft = [src[p] for p in origin]
        fed = torch.tensor([[[pending] + draft]], device=device)
        logits, attention = model.decode(fed, cache, cross_attention=drafter.needs_attention)
        logits = logits[0, 0].float().cpu()  # (1+D, V)
        log_probs = logits.log_softmax(dim=-1)
        draft_t = torch.tensor([draft], dtype=torch.long)
        if mode == "relaxed":
            n_acc, nxt = accept_relaxed(draft_t, log_probs.unsqueeze(0), options.beta, options.tau)
        else:
            target = adjust_probs(logits, options.temperature, options.top_k)  # (1+D, V)
            if mode == "mentored" and draft:
                q = draft_probs if draft_probs is not None else torch.zeros_like(target[:-1]).scatter_(
                    -1, draft_t.T, 1.0)
                target = torch.cat([mentored_target(target[:-1], q, options.delta), target[-1:]])
            n_acc, nxt = accept_sampled(draft_t, draft_probs.unsqueeze(0) if draft_probs is not None else None,
                                        target.unsqueeze(0), generator)
        n_accepted, next_token = int(n_acc[0]), int(nxt[0])
        cache.commit(torch.tensor([1 + n_accepted], device=device))
        if helper is not None:
            helper.accept(draft, n_accepted, next_token)
        new = draft[:n_accepted] + [next_token]
        new_origin = origin[:n_accepted] + [GENERATED]
        if attention is not None:
            peak = int(attention[0, 0, n_accepted].argmax())
        stats.record_call(len(draft), n_accepted, n_accepted < len(draft), len(new))
        score += float(sum(log_probs[i, t] for i, t in enumerate(new)))
        if EOS_ID in new:
            cut = new.index(EOS_ID)
            tokens += new[:cut]
            provenance += new_origin[:cut]
            finished = True
            break
        tokens += new
        provenance += new_origin
        pending = next_token
    stats.wall_time_s = time.perf_counter() - started
    return DecodeResult([Hypothesis(tuple(tokens), score, tuple(provenance), finished)], stats)


def sample_decode(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]], mode: str,
                  drafter_factory: Callable[[Sequence[int]], Drafter] | None, options: SamplingOptions,
                  draft_model: Seq2SeqTransformer | None = None, max_len: int | None = None) -> list[DecodeResult]:
    """One sample per source; row i draws from a generator seeded with options.seed + i."""
    results = []
    for i, src in enumerate(sources):
        generator = torch.Generator().manual_seed(options.seed + i)
        drafter = drafter_factory(src) if drafter_factory is not None else NullDrafter(src)
        results.append(sample_one(model, src, mode, drafter, options, generator, draft_model, max_len))
    return results
