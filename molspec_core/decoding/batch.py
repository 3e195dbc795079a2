"""What every decoder shares: source batching, the prologue (encode, budgets, cache) and the length budget.

Length budget: decoding feeds bos at position 0 and output token k at position k; a call for a
hypothesis of n output tokens feeds its pending token at position n and its draft after it. The
budget (`target_budget`) is the longest output a query may get, below the model's last position.
Drafts are cut to what the call could keep and what it can hold (`fit_drafts`), so no fed token
ever lands past the model's positions or the cache. A query that reaches its budget ends there,
marked unfinished (`Hypothesis.finished` False), never with an error, and the same under every
decoder, so no method fails where another answers.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import torch

from ..cache import KVCache
from ..model import Seq2SeqTransformer
from ..tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

Item = TypeVar("Item")

# On the native engine a call of several drafts a row copies each fed row once per draft, so that each draft is fed
# as a row of its own (greedy's calls, speculative_beam._Search.feed); where those copies would pass this many bytes
# the rows are fed in several calls. The retro model's rows at width 50 and 64 drafts of 100 slots would copy 4 GB;
# at width 10 and 3 drafts they copy some 40 MB.
SPLIT_GATHER_BYTES = 64 * 2 ** 20


def pad_sources(sources: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> torch.Tensor:
    """List of token-id lists -> (B, S) int64 padded with PAD_ID."""
    width = max(len(s) for s in sources)
    src = torch.full((len(sources), width), PAD_ID, dtype=torch.long)
    for i, s in enumerate(sources):
        src[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return src.to(device)


def target_budget(src_len: int, max_positions: int, max_len: int | None = None) -> int:
    """Most output tokens decoded for a source (eos counts as one), at least one: `max_len` if given,
    else room to double the source (reactions rarely do); capped so that every fed token has a
    position, with one to spare for sbs-exact, which may feed a hypothesis that has just reached
    the budget. A max_len below 1 is refused: it decoded one token, as if 1 had been asked."""
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be 1 or more (eos counts as a token), not {max_len}")
    wanted = max_len if max_len is not None else 2 * src_len + 50
    return max(1, min(wanted, max_positions - 1))


def draft_room(n_generated: int, budget: int) -> int:
    """Draft tokens worth feeding after a hypothesis of n_generated output tokens: a call emits its
    accepted draft tokens plus one token of the model's own, and all of them must fit the budget."""
    return max(0, budget - n_generated - 1)


def cache_capacity(budget: int, padding: int = 0) -> int:
    """KV-cache slots for hypotheses decoded within `budget`. With drafts fitted, a call fills slots
    up to the budget; sbs-exact may feed a hypothesis that has just reached it (one more). A call
    that feeds several rows pads them all to its longest draft, so it asks for `padding` more: the
    longest draft a row may propose, lest a row near its budget cut the drafts of all the others."""
    return budget + 1 + padding


def fit_drafts(drafts: Sequence[Sequence[Sequence[Item]]], n_generated: Sequence[int], budgets: Sequence[int],
               slots: int) -> list[list[list[Item]]]:
    """Each row's drafts cut to the room of its budget and of the call; drafts cut to nothing dropped.

    One call feeds every row as many tokens as the longest draft (shorter ones are padded), and a
    padded slot needs a position and a cache slot too. So besides its own budget, no row may draft
    more than the row furthest along has room for: `slots` (the model's positions, or the cache's
    capacity when smaller) less that row's n_generated and its pending token.
    """
    shared = slots - max(n_generated) - 1
    fitted = []
    for row_drafts, n, budget in zip(drafts, n_generated, budgets):
        room = min(draft_room(n, budget), shared)
        fitted.append([list(d[:room]) for d in row_drafts if room > 0 and len(d) > 0])
    return fitted


def check_sources(sources: Sequence[Sequence[int]], vocab_size: int, max_positions: int | None = None) -> None:
    """Refuse a batch holding a source without tokens, before any query of it is decoded: its cross-attention
    has nothing to attend to, and the engines disagreed on it (an answer, pad tokens, or an error naming
    something else), some spoiling the other rows of its batch.

    And one holding an id that is no token of a query: pad, bos or eos (Vocab.encode writes none of them; unk
    stands for a token outside the vocabulary) or one outside the model's vocabulary. A pad was taken for
    padding, the query decoded without it; an eos copied by a draft was accepted mid-answer and the answer
    went on past it where greedy's ended; an id past the vocabulary failed as an IndexError naming nothing.

    And one holding a source longer than the model's positions (max_positions, when given): the encoder failed on
    it naming no source, and sbs and the sampling methods, which decode a query at a time, had thrown away the
    queries decoded before it."""
    for i, src in enumerate(sources):
        if len(src) == 0:
            raise ValueError(f"source {i} has no tokens: every query needs at least one")
        if max_positions is not None and len(src) > max_positions:
            raise ValueError(f"source {i} has {len(src)} tokens, and the model reads at most {max_positions}")
        wrong = [int(t) for t in src if not UNK_ID <= t < vocab_size]
        if wrong:
            raise ValueError(f"source {i} holds token id {wrong[0]}, which is no token of a query: a query's ids run "
                             f"from {UNK_ID} (unk) to {vocab_size - 1}; pad, bos and eos ({PAD_ID}, {BOS_ID}, "
                             f"{EOS_ID}) are the decoder's own")


def encode_sources(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]], max_len: int | None = None,
                   max_positions: int | None = None) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The prologue of every decoder: (memory (B, S, d), keep (B, S): true on source tokens, budgets).
    max_positions: the positions every model fed alongside has (a draft model's may be fewer)."""
    positions = max_positions if max_positions is not None else model.cfg.max_positions
    check_sources(sources, model.cfg.vocab_size, positions)
    src = pad_sources(sources, model.device)
    return model.encode(src), src != PAD_ID, [target_budget(len(s), positions, max_len) for s in sources]


def start(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]], max_len: int | None = None,
          padding: int = 0, max_positions: int | None = None) -> tuple[KVCache, list[int]]:
    """encode_sources, then a KV cache that holds every row to its budget (cache_capacity's padding:
    the longest draft a row may propose)."""
    memory, keep, budgets = encode_sources(model, sources, max_len, max_positions)
    return model.new_cache(memory, keep, cache_capacity(max(budgets), padding)), budgets


def pack_drafts(pending: Sequence[int], drafts: Sequence[Sequence[Sequence[int]]],
                sources: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """One call's input: row r's pending token then each of its drafts (source positions, read from
    sources[r]) as a branch, padded with PAD_ID to the longest draft. Returns tokens (R, N, 1+D) and
    the draft lengths (R, N); a row without drafts gets one branch of its pending token alone.
    Built as lists and made a tensor once: per-row tensor writes cost more than the call's arithmetic."""
    n_branches = max(1, max(len(d) for d in drafts))
    depth = max((len(d) for row in drafts for d in row), default=0)
    tokens: list[list[list[int]]] = []
    lengths: list[list[int]] = []
    for first, row_drafts, src in zip(pending, drafts, sources):
        branches = [[first] + [src[p] for p in positions] + [PAD_ID] * (depth - len(positions))
                    for positions in row_drafts]
        branches += [[first] + [PAD_ID] * depth for _ in range(n_branches - len(row_drafts))]
        tokens.append(branches)
        lengths.append([len(positions) for positions in row_drafts] + [0] * (n_branches - len(row_drafts)))
    # through NumPy: torch.tensor of nested lists costs twice as much (7 vs 3 us a call, measured)
    return torch.from_numpy(np.array(tokens, dtype=np.int64)), torch.from_numpy(np.array(lengths, dtype=np.int64))
