"""Standard beam search with the KV cache: the reference every speculative beam variant must match.

Definition (what "identical to beam search" means in this project):
- Each query has `width` slots; decoding starts with one live slot holding bos (score 0).
- A hypothesis' score is the sum of its token log-probabilities (no length penalty).
- Every step, each live slot is extended by every token; of all width*V candidates the `width`
  best are kept, ordered by score descending, ties broken by the lower (slot, token) index
  (a stable sort over the flattened candidates).
- A kept candidate that ends in eos is finished: it is stored and its slot goes dead.
- A query stops when it has no live slot, when its live slots reach the length budget, or when it
  has at least n_best finished hypotheses and no live score exceeds the n_best-th finished score
  (log-probs are <= 0, so a live hypothesis can only lose score).
- The result lists finished hypotheses by score (ties: earlier finished first), then, if fewer than
  n_best finished, the live ones at the budget, truncated to n_best.

What the search skips without changing a result (`prune`): a query's slot whose score is at most its
n_best-th finished score (its *floor*) goes dead, and dead slots are not fed (on the native engine;
elsewhere their rows are computed and ignored). No descendant of such a slot can enter the n-best list
(log-probs are <= 0; an equal score found later ranks after the finished one). Dropping it changes the
beam only below the floor: its children could only push out candidates scoring lower still, and the
slots scoring above the floor, being ranked first, keep their places, so every step selects the same
hypotheses above the floor, in the same slots, and the stop rule (which looks above the floor only)
fires at the same step. On the retro quick set at width 10 (40 queries) 3.9% of the rows fed were
dead slots and 6.8% were below the floor.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from ..limits import QueryTimeout
from ..model import Seq2SeqTransformer
from ..native import NativeStep
from ..tokenizer import BOS_ID, EOS_ID
from .batch import cache_capacity, encode_sources
from .result import GENERATED, DecodeResult, DecodeStats, Hypothesis, longest_answer_tokens

Array = torch.Tensor | np.ndarray


# The pure pieces of one beam step, shared with speculative_beam.py so that sbs-exact's promise to
# equal beam search rests on one implementation.


def best_children(scores: Array, log_probs: Array, width: int) -> tuple[Array, Array]:
    """The `width` best one-token extensions of L hypotheses, scores (..., L) + log_probs (..., L, V):
    candidates flattened over (slot, token), sorted by score descending, ties to the lower
    slot * V + token (a stable sort). Returns (top_scores, flat_index), each (..., width) (fewer when
    L * V < width); flat_index // V is the slot, flat_index % V the token. Torch tensors or NumPy
    arrays (beam search keeps its bookkeeping in NumPy: on a CPU each torch op of a step costs more
    than its arithmetic); the same float32 sums and the same order either way."""
    if isinstance(scores, np.ndarray):
        candidates = (scores[..., None] + log_probs).reshape(*scores.shape[:-1], -1)  # (..., L*V)
        negated = -candidates  # exact
        if candidates.ndim == 1 and 0 < width < len(candidates):
            # One query (sbs-exact's case): the same first `width` of the stable sort at a third of its
            # cost, by sorting only the candidates at or above the width-th best score, in index order.
            kth = np.partition(negated, width - 1)[width - 1]
            if not np.isnan(kth):
                near = np.flatnonzero(negated <= kth)
                order = near[np.argsort(negated[near], kind="stable")[:width]]
                return candidates[order], order
        order = np.argsort(negated, axis=-1, kind="stable")[..., :width]
        return np.take_along_axis(candidates, order, axis=-1), order
    candidates = (scores.unsqueeze(-1) + log_probs).flatten(-2)  # (..., L*V)
    top_scores, top_index = torch.sort(candidates, dim=-1, descending=True, stable=True)
    return top_scores[..., :width], top_index[..., :width]


def answers_wanted(width: int, n_best: int | None) -> int:
    """The n-best list's length for a beam of `width` (n_best None: the width; more than the width: the width),
    or a ValueError for a width or n_best below 1 (width 0 and n_best -1 failed on IndexErrors)."""
    if width < 1 or (n_best is not None and n_best < 1):
        raise ValueError(f"the beam width and n_best must be 1 or more, not {width} and {n_best}")
    return min(n_best or width, width)


def floor_of(finished_scores: Sequence[float], n_best: int) -> float:
    """The n_best-th best finished score (-inf while fewer finished): no slot at or below it can matter."""
    if len(finished_scores) < n_best:
        return float("-inf")
    return sorted(finished_scores, reverse=True)[n_best - 1]


def can_stop(finished_scores: Sequence[float], best_live: float, n_best: int) -> bool:
    """No live hypothesis (best_live -inf), or n_best finished ones and no live score above the
    n_best-th (the floor): log-probs are <= 0, so a live hypothesis can only lose score."""
    return best_live == float("-inf") or best_live <= floor_of(finished_scores, n_best)


def ranked(hypotheses: Sequence[Hypothesis], n_best: int) -> list[Hypothesis]:
    """The n_best best: finished hypotheses by score, then those stopped unfinished at the budget by
    score; ties keep the order in which they were found (the sort is stable)."""
    return sorted(hypotheses, key=lambda h: (not h.finished, -h.score))[:n_best]


@torch.inference_mode()
def beam_search(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]], width: int,
                n_best: int | None = None, max_len: int | None = None, cached: bool = True,
                prune: bool = True) -> list[DecodeResult]:
    """Beam search as defined above. cached=False recomputes every hypothesis' whole prefix at each
    step (no KV cache, as the paper's baseline code does): the same results, kept as a benchmark
    reference for speculative beam search. prune=False keeps the slots below the floor alive (the
    same results; for tests and benchmarks). At the time limit (limits.py) it raises QueryTimeout with what it
    found: per query, the hypotheses finished, then its live ones, unfinished, and its real counts."""
    n_best = answers_wanted(width, n_best)
    if not sources:  # nothing to pad (max() of no lengths): no results, as every decoder gives
        return []
    start_time = time.perf_counter()
    device = model.device
    n_queries = len(sources)
    memory, keep, budgets = encode_sources(model, sources, max_len)
    # On the native engine the whole search below runs in C (NativeStep.beam_search), STEPS_PER_RUN steps a call.
    engine = model.numpy_step
    native = engine if isinstance(engine, NativeStep) and cached and not model.training else None
    cache = None
    if cached:  # the cross-attention keys/values once per query, then a row per beam slot
        # Every row takes one token a step, so no call reads a slot no row has written: new slots need
        # no zeroing, unless the engine reads every slot (graphs.GraphStep).
        cache = model.new_cache(memory, keep, cache_capacity(max(budgets)),
                                lockstep=not getattr(model.numpy_step, "reads_every_slot", False))
        slots = torch.arange(n_queries, device=device).repeat_interleave(width)
        if native is not None:  # the native engine reads each query's memory in place from all its slots
            cache.share_memory(slots)
        else:
            cache.reorder(slots)
    else:
        memory, keep = memory.repeat_interleave(width, dim=0), keep.repeat_interleave(width, dim=0)  # (Q*k, S, ...)
    vocab = model.cfg.vocab_size

    # Elsewhere the bookkeeping is NumPy on the host; only the decoder calls run on the device. It runs right
    # after each call has streamed the weights through the caches, so it is kept to few operations.
    active = list(range(n_queries))
    scores = np.full((n_queries, width), -np.inf, dtype=np.float32)
    scores[:, 0] = 0.0
    history = np.full((n_queries * width, 1), BOS_ID, dtype=np.int64)  # each slot's tokens so far
    finished: list[list[Hypothesis]] = [[] for _ in range(n_queries)]
    floors = np.full(n_queries, -np.inf, dtype=np.float32)  # each active query's floor (floor_of)
    stats = [DecodeStats() for _ in range(n_queries)]
    stopped = [False] * n_queries  # by the time limit
    step = 0
    ones = first_slot = torch.empty(0)

    def live(a: int) -> list[Hypothesis]:
        """Active query a's live slots, as they stand, as unfinished hypotheses (none before the first step: bos
        alone is no answer): what a search cut at its length budget or at the time limit found."""
        rows = history[a * width:(a + 1) * width, 1:]
        return [Hypothesis(tuple(rows[slot].tolist()), score, (GENERATED,) * rows.shape[1], False)
                for slot, score in enumerate(scores[a].tolist()) if score > float("-inf") and step > 0]
    if native is not None and cache is not None:  # the loop below, in C
        run = native.beam_search(cache, budgets, width, n_best, prune)
        for q, (hypotheses, n_calls) in enumerate(zip(run.found, run.calls)):
            finished[q] = [Hypothesis(tokens, score, (GENERATED,) * len(tokens), done)
                           for tokens, score, done in hypotheses]
            stats[q].model_calls += n_calls
        stopped = run.stopped or stopped
        active = []
    try:
        while active:
            n_act = len(active)
            if len(ones) != n_act * width:  # made again only when queries finish
                ones = torch.ones(n_act * width, dtype=torch.long, device=device)
                first_slot = np.arange(n_act)[:, None] * width  # (A, 1): each query's first row
            if cache is not None:
                logits, _ = model.decode(torch.from_numpy(history[:, -1]).to(device).view(-1, 1, 1), cache)
                cache.commit(ones)
                last = logits.reshape(n_act * width, vocab)
            else:
                last = model.decode_full(torch.from_numpy(history).to(device), memory, keep)[:, -1]  # same lengths
            log_probs = model.log_probs(last).cpu().numpy().reshape(n_act, width, vocab)
            top_scores, top_index = best_children(scores, log_probs, width)  # (A, k)
            parent, token = np.divmod(top_index, vocab)  # (A, k): slot within the query, token
            rows = (first_slot + parent).reshape(-1)
            if cache is not None:
                cache.reorder(torch.from_numpy(rows).to(device), cross=False)
            history = np.concatenate([history[rows], token.reshape(-1, 1)], axis=1)
            step += 1
            is_eos = token == EOS_ID
            scores = np.where(is_eos, np.float32(-np.inf), top_scores)

            kept = top_scores > -np.inf
            done_queries, done_slots = np.nonzero(is_eos & kept)
            for a, slot in zip(done_queries, done_slots):  # by query, then slot
                tokens = tuple(history[a * width + slot, 1:-1].tolist())
                hypothesis = Hypothesis(tokens, float(top_scores[a, slot]), (GENERATED,) * len(tokens), True)
                finished[active[a]].append(hypothesis)
            if prune:
                for a in set(done_queries.tolist()):  # a floor moves only when its query finishes something
                    floors[a] = floor_of([h.score for h in finished[active[a]]], n_best)
                scores = np.where(scores <= floors[:, None], np.float32(-np.inf), scores)
            best_live = scores.max(axis=1).tolist()
            still = []
            for a, q in enumerate(active):
                stats[q].record_call(emitted=0)  # the tokens of its answers are counted once they are ranked, below
                if can_stop([h.score for h in finished[q]], best_live[a], n_best):
                    continue
                if step >= budgets[q]:
                    finished[q] += live(a)
                    continue
                still.append(a)
            if len(still) < n_act:
                keep_rows = np.array([a * width + s for a in still for s in range(width)], dtype=np.int64)
                if cache is not None:
                    cache.reorder(torch.from_numpy(keep_rows).to(device))
                else:
                    kept_rows = torch.from_numpy(keep_rows).to(device)
                    memory, keep = memory[kept_rows], keep[kept_rows]
                history = history[keep_rows]
                scores, floors = scores[still], floors[still]
                active = [active[a] for a in still]

    except QueryTimeout:  # raised by a decoder call, before it changed anything: each active query's live
        for a, q in enumerate(active):  # slots are its best partial answers
            stopped[q] = True
            finished[q] += live(a)

    elapsed = time.perf_counter() - start_time
    results = []
    for q in range(n_queries):
        best = ranked(finished[q], n_best)
        stats[q].wall_time_s = elapsed
        # Every live beam's token, counted before session 65, put beam search at its width per call.
        stats[q].tokens_generated = longest_answer_tokens(best)
        results.append(DecodeResult(best, stats[q]))
    if any(stopped):  # the work done is handed on: the caller may keep the queries whose search ended
        raise QueryTimeout("time limit reached", found=results, searched=[not s for s in stopped])
    return results
