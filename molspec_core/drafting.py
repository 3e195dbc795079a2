"""Drafters: propose continuations of the output for the target model to verify.

Copy drafters are built per query from its source tokens. `propose(generated, attention_peak)`
returns windows: lists of source positions (the draft tokens are the source tokens there, which is
also their provenance). `generated` holds the output so far, the pending token included;
`attention_peak` is the source position the model attended most when it produced that token
(None when unknown). Greedy and speculative beam search verify every window as a branch.

The sampling loop verifies one draft per step through `StepDrafter`: `draft(...)` returns a
`Draft` (tokens, where each came from, the distribution it was drawn from) and `accept(...)` hears
how much of it the target kept. Copy drafts (`CopyDrafts`) and a small draft model
(`ModelDrafter`, which rolls its own cache back to the accepted output) sit behind it alike.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from .decoding.batch import start
from .decoding.result import GENERATED
from .decoding.verify import adjust_probs
from .methods import SamplingOptions
from .model import Seq2SeqTransformer
from .tokenizer import BOS_ID, EOS_ID

Window = list[int]  # source positions


class Drafter(Protocol):
    needs_attention: bool

    def propose(self, generated: Sequence[int], attention_peak: int | None) -> list[Window]: ...


class NullDrafter:
    """No drafts: plain greedy decoding."""

    needs_attention = False

    def __init__(self, src: Sequence[int], draft_len: int = 0, n_drafts: int = 0):
        pass

    def propose(self, generated: Sequence[int], attention_peak: int | None) -> list[Window]:
        return []


class WindowDrafter:
    """The paper's kind of drafts (Andronov et al. 2024, section 2.1): fixed windows of the source.

    All stride-1 windows of length draft_len; when there are more than n_drafts of them, n_drafts
    windows with evenly spaced starts. The same drafts are verified at every step.
    Not quite the paper's cap: its Appendix B keeps the *first* N_d windows (N_d about 25), which
    cover only a source's first N_d + draft_len - 1 tokens; spread out, the cap covers the source but
    for its last few tokens (the starts are len(starts) / N_d apart from 0, so the last one falls short
    of the last window's: 3 of 100 tokens, 5 of 150 are in no window at D=10), and a source longer than
    N_d * D tokens also between windows (50 of 300 at N=25, D=10). Measured with N=25, D=10
    on the first 30 quick-set queries (greedy, shipped models): 4.39 tokens per call against 3.57 for
    the first 25 windows (retro), 4.05 against 2.98 (forward), so spec-paper is a stronger baseline
    than the paper's own choice. Starts spaced from 0 to the last window's, which leave no token out
    up to N_d * D tokens, drafted less on the same queries: 4.26 retro, 3.84 forward (session 93).
    """

    needs_attention = False

    def __init__(self, src: Sequence[int], draft_len: int, n_drafts: int):
        starts = list(range(max(1, len(src) - draft_len + 1)))
        if len(starts) > n_drafts:
            step = len(starts) / n_drafts
            starts = sorted({starts[int(i * step)] for i in range(n_drafts)})
        self.drafts = [list(range(s, min(s + draft_len, len(src)))) for s in starts]

    def propose(self, generated: Sequence[int], attention_peak: int | None) -> list[Window]:
        return self.drafts


class LookupDrafter:
    """Continue the source after the places that match the longest suffix of the output.

    One draft (or a few) instead of the paper's many: the verify call stays small.
    """

    needs_attention = False
    max_suffix = 12  # longer suffixes almost never add information in SMILES

    def __init__(self, src: Sequence[int], draft_len: int, n_drafts: int = 1):
        self.src = list(src)
        self.draft_len, self.n_drafts = draft_len, n_drafts
        self.places: dict[int, list[int]] = defaultdict(list)  # token -> its source positions
        for position, token in enumerate(self.src):
            self.places[token].append(position)

    def starts(self, generated: Sequence[int]) -> list[int]:
        """Draft starts after the longest suffix of `generated` (at most max_suffix tokens) found in
        the source: the position after each occurrence of it, first first; none at the source's end.
        Before the first output token (`generated` is the start token alone): the source's start.
        Answers often begin as the query does (root-aligned retro answers nearly always: measured on
        100 USPTO-50K quick-set queries, the retro model's greedy answer kept 7.6 of the first 8 source
        tokens; the forward model's 3.8 of 8 on USPTO-MIT)."""
        if len(generated) == 1 and generated[0] == BOS_ID:
            return [0] if self.src else []
        if not generated or generated[-1] not in self.places:
            return []
        reach = min(self.max_suffix, len(generated))
        matched: list[tuple[int, int]] = []  # (suffix tokens matched, position after the match)
        for end in self.places[generated[-1]]:  # occurrences of the last token, in source order
            k = 1
            while k < reach and k <= end and self.src[end - k] == generated[-1 - k]:
                k += 1
            matched.append((k, end + 1))
        longest = max(k for k, _ in matched)
        return [after for k, after in matched if k == longest and after < len(self.src)]

    def window(self, start: int) -> Window:
        return list(range(start, min(start + self.draft_len, len(self.src))))

    def propose(self, generated: Sequence[int], attention_peak: int | None) -> list[Window]:
        return [self.window(s) for s in self.starts(generated)[: self.n_drafts]]


class PointerDrafter(LookupDrafter):
    """Follow the model's own cross-attention to the place in the source it is copying from.

    Among the source places that match the output's longest suffix, take those whose last matched
    token lies nearest the position the model attended when it produced the pending token; with no
    match, draft from just after the attended position.
    """

    needs_attention = True

    def propose(self, generated: Sequence[int], attention_peak: int | None) -> list[Window]:
        starts = self.starts(generated)
        if attention_peak is None:
            return [self.window(s) for s in starts[: self.n_drafts]]
        if not starts:
            starts = [attention_peak + 1] if attention_peak + 1 < len(self.src) else []
        starts = sorted(starts, key=lambda s: abs(s - 1 - attention_peak))
        return [self.window(s) for s in starts[: self.n_drafts]]


DRAFTERS: dict[str, type] = {"none": NullDrafter, "paper": WindowDrafter, "lookup": LookupDrafter,
                             "pointer": PointerDrafter}


def make_drafter(name: str, src: Sequence[int], draft_len: int, n_drafts: int) -> Drafter:
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}; choose from {sorted(DRAFTERS)}")
    if name != "none" and (draft_len < 0 or n_drafts < 1):  # paper's windows divided by n_drafts: ZeroDivisionError
        raise ValueError(f"the {name} drafter needs draft_len 0 or more and n_drafts 1 or more, not {draft_len} and "
                         f"{n_drafts}")
    return DRAFTERS[name](src, draft_len, n_drafts)


@dataclass(frozen=True)
class Draft:
    """One draft to verify: its tokens, where each came from, and the distribution it was drawn from."""

    tokens: tuple[int, ...]
    origin: tuple[int, ...]  # per token: the source position it copies, or GENERATED (a draft model's own)
    probs: torch.Tensor | None = None  # (D, V) q at each token; None for a copy (a point mass on it)

    def draft_probs(self, vocab_size: int) -> torch.Tensor:
        """q at each draft token (D, V): the draft model's, or a point mass on the copied token."""
        if self.probs is not None:
            return self.probs
        return torch.zeros(len(self.tokens), vocab_size).scatter_(-1, torch.tensor(self.tokens).view(-1, 1), 1.0)


class StepDrafter(Protocol):
    """One draft per step, then the verdict: the sampling loop's view of copy drafts and a draft model."""

    needs_attention: bool

    def draft(self, generated: Sequence[int], attention_peak: int | None, room: int) -> Draft:
        """A draft of at most `room` tokens to follow `generated` (bos and the pending token included)."""
        ...

    def accept(self, draft: Draft, n_accepted: int, next_token: int) -> None:
        """The target kept draft.tokens[:n_accepted], then next_token."""
        ...


class CopyDrafts:
    """A copy drafter as a StepDrafter: its first window, read out of the source."""

    def __init__(self, drafter: Drafter, src: Sequence[int]):
        self.drafter, self.src = drafter, list(src)
        self.needs_attention = drafter.needs_attention

    def draft(self, generated: Sequence[int], attention_peak: int | None, room: int) -> Draft:
        windows = [w for w in self.drafter.propose(generated, attention_peak) if w]
        window = windows[0][: max(room, 0)] if windows else []
        return Draft(tuple(self.src[p] for p in window), tuple(window))

    def accept(self, draft: Draft, n_accepted: int, next_token: int) -> None:
        """Nothing to do: a copy drafter reads the whole output afresh at every step."""


class ModelDrafter:
    """A small autoregressive draft model with its own KV cache, kept on the accepted output.

    It feeds the same positions as the target, so it is built with the target's budget. Each draft
    feeds the pending tokens, then every sampled token but the last (whose q is all that verifying
    it needs); `accept` rolls the cache back to what the target kept.
    """

    needs_attention = False  # its drafts are its own samples: the target's attention is not needed

    def __init__(self, model: Seq2SeqTransformer, src: Sequence[int], max_len: int | None, max_positions: int,
                 options: SamplingOptions, generator: torch.Generator):
        self.model, self.options, self.generator = model, options, generator
        self.cache, _ = start(model, [src], max_len, max_positions=max_positions)
        self.pending = [BOS_ID]  # accepted tokens not yet fed to the draft model

    def draft(self, generated: Sequence[int], attention_peak: int | None, room: int) -> Draft:
        """Sample min(draft_len, room) tokens from q (temperature and top-k as for the target), fewer where one is
        eos: an output ends there, so tokens after it would be proposed and counted for nothing."""
        device = self.model.device
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        feed = self.pending
        for _ in range(min(self.options.draft_len, room)):
            logits, _ = self.model.decode(torch.tensor([[feed]], device=device), self.cache)
            self.cache.commit(torch.tensor([len(feed)], device=device))
            draft_probs = adjust_probs(logits[0, 0, -1], self.options.temperature, self.options.top_k).cpu()  # (V,)
            token = int(torch.multinomial(draft_probs, 1, generator=self.generator))
            tokens.append(token)
            probs.append(draft_probs)
            if token == EOS_ID:
                break
            feed = [token]
        return Draft(tuple(tokens), (GENERATED,) * len(tokens), torch.stack(probs) if probs else None)

    def accept(self, draft: Draft, n_accepted: int, next_token: int) -> None:
        if not draft.tokens:  # nothing was fed
            self.pending.append(next_token)
            return
        # Fed: the pending tokens and draft.tokens[:-1]. Kept: the pending ones and the accepted fed ones.
        kept = min(n_accepted, len(draft.tokens) - 1)
        self.cache.rollback(self.cache.lengths - (len(draft.tokens) - 1 - kept))
        # An accepted last draft token was never fed, so it waits with next_token.
        self.pending = list(draft.tokens[kept:n_accepted]) + [next_token]
