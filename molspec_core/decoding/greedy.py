"""Greedy decoding, plain and speculative, with the KV cache; and the uncached reference.

One loop serves both: each step feeds every active row its pending token followed by its drafts
as N branches of D tokens, (R, N, 1+D), in one decoder call. Position i's argmax is the model's
next token after input i, so a draft is accepted up to its first disagreement with the argmax,
and the argmax right after the accepted run is a free extra token. With no drafts (D=0) this is
exactly standard greedy decoding; with drafts it emits the same tokens in fewer calls.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..cache import KVCache
from ..drafting import Drafter, LookupDrafter, NullDrafter
from ..limits import QueryTimeout
from ..model import Seq2SeqTransformer
from ..native import NativeStep
from ..tokenizer import BOS_ID, EOS_ID
from .batch import SPLIT_GATHER_BYTES, encode_sources, fit_drafts, pack_drafts, pad_sources, start
from .result import GENERATED, DecodeResult, DecodeStats, Hypothesis
from .verify import accept_greedy, accept_greedy_lists

DrafterFactory = Callable[[Sequence[int]], Drafter]


class _Row:
    """Output state of one query."""

    def __init__(self, budget: int):
        self.budget = budget
        self.tokens: list[int] = []
        self.provenance: list[int] = []
        self.score = 0.0
        self.finished = False
        self.peak: int | None = None
        self.resting = 0  # calls left without drafts (see greedy's `rest`)
        self.stats = DecodeStats()

    def context(self) -> list[int]:
        return [BOS_ID] + self.tokens


Settled = tuple[list[int], list[int], list[list[int]], list[list[float]], list[int] | None]


def settle_tensors(logits: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor,
                   attention: torch.Tensor | None) -> Settled:
    """One call's outcome per row, from tensors on the model's device: (accepted draft tokens, chosen
    branch, the branch's argmax at each fed position, the log-probability of each, where the model
    attended after the accepted run (None without attention)). Position i's argmax is the model's
    token after input i, so the first n_accepted + 1 of them are the output."""
    argmax = logits.argmax(dim=-1)  # (R, N, 1+D)
    n_accepted, branch = accept_greedy(tokens[:, :, 1:], lengths, argmax)
    rows = torch.arange(len(branch), device=logits.device)
    best_log_probs = logits[rows, branch].log_softmax(dim=-1).amax(dim=-1)  # (R, 1+D)
    peaks = attention[rows, branch, n_accepted].argmax(dim=-1).tolist() if attention is not None else None
    return n_accepted.tolist(), branch.tolist(), argmax[rows, branch].tolist(), best_log_probs.tolist(), peaks


def settle_lists(logits: np.ndarray, draft_tokens: Sequence[Sequence[Sequence[int]]],
                 attention: np.ndarray | None) -> Settled:
    """settle_tensors for logits on the CPU, in NumPy and lists; draft_tokens[r][b] are row r's branch b
    drafts, unpadded. tests/test_decoding.py pins it to settle_tensors."""
    argmax = logits.argmax(axis=-1)  # (R, N, 1+D)
    n_accepted, branch = accept_greedy_lists(draft_tokens, argmax.tolist())
    rows = np.arange(len(branch))
    chosen = logits[rows, branch] if logits.shape[1] > 1 else logits[:, 0]  # (R, 1+D, V)
    top = chosen.max(axis=-1, keepdims=True)
    best_log_probs = -np.log(np.exp(chosen - top).sum(axis=-1))  # the largest log-softmax value
    peaks = attention[rows, branch, n_accepted].argmax(axis=-1).tolist() if attention is not None else None
    return n_accepted, branch, argmax[rows, branch].tolist(), best_log_probs.tolist(), peaks


def verify_as_rows(native: NativeStep, cache: KVCache, tokens: torch.Tensor, draft_lengths: np.ndarray,
                   rows: np.ndarray, want_attention: bool) -> Settled:
    """settle_lists's outcome of one call of several drafts a row on the native engine, tokens (R, N, 1+D) and
    draft_lengths (R, N) as pack_drafts makes them, rows (R,) the cache row of each call row. Each draft is fed as
    a row of its own through the C step, on a copy of its row's slots (KVCache.branch_copies), so that every
    token's logits are computed as in a one-draft call and the output is greedy's to the bit; the chosen branch is
    then kept in the row's own slots (keep_branches). In torch's attention, as before, a token within rounding of
    greedy's could be taken for it, and int8 could not run the call at all. Rows go in several C calls where their
    copies would pass SPLIT_GATHER_BYTES."""
    n_rows, n_branches, depth = tokens.shape
    slots = cache.slots
    if slots is None:
        raise RuntimeError("verify_as_rows needs the cache's slots tensor")
    upto = int(cache.lengths[torch.from_numpy(rows)].max()) + depth
    row_bytes = slots[:, :1, :, :upto].numel() * slots.element_size() * n_branches  # a call row's copies
    per_call = max(1, SPLIT_GATHER_BYTES // row_bytes)
    n_accepted: list[int] = []
    branches: list[int] = []
    chosen: list[list[int]] = []
    log_probs: list[list[float]] = []
    peaks: list[int] = []
    for first in range(0, n_rows, per_call):
        part = slice(first, first + per_call)
        part_rows = torch.from_numpy(np.ascontiguousarray(rows[part], dtype=np.int64))
        copies = cache.branch_copies(part_rows.repeat_interleave(n_branches), depth)
        accepted, argmax, best, part_peaks = native.greedy_step(
            tokens[part].reshape(-1, 1, depth), np.ascontiguousarray(draft_lengths[part].reshape(-1)), copies,
            want_attention)
        per_branch = np.array(accepted).reshape(-1, n_branches)
        branch = per_branch.argmax(axis=1)  # the first branch that accepts the most (accept_greedy_lists' rule)
        fed = np.arange(len(branch)) * n_branches + branch  # each call row's chosen copy
        cache.keep_branches(part_rows, copies, torch.from_numpy(fed))
        n_accepted += per_branch[np.arange(len(branch)), branch].tolist()
        branches += branch.tolist()
        chosen += [argmax[f] for f in fed]
        log_probs += [best[f] for f in fed]
        peaks += [part_peaks[f] for f in fed] if part_peaks is not None else []
    return n_accepted, branches, chosen, log_probs, peaks if want_attention else None


@torch.inference_mode()
def greedy(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]], drafter_factory: DrafterFactory,
           max_len: int | None = None, rest: int = 0) -> list[DecodeResult]:
    """Greedy decoding of a batch of sources (token ids, no bos/eos); rows finish independently.

    rest: after a call whose draft lost at its very first token (the model is writing something the
    source does not hold, as at a reaction centre), a row's next `rest` calls go without drafts. Where
    a call costs more with every token it verifies (CPU), those drafts would mostly be paid for and
    thrown away. The output is the same for any rest.

    At the time limit (limits.py) it raises QueryTimeout with a result per source (handed_on): whole for a row
    that had ended, and for a row still decoding the counts of the calls it made, which were paid for."""
    if not sources:  # nothing to pad (max() of no lengths): no results, as every decoder gives
        return []
    start_time = time.perf_counter()
    device = model.device
    # Drafts are windows of the source, so no draft is longer than the longest source.
    cache, budgets = start(model, sources, max_len, padding=max(len(s) for s in sources))
    out = [_Row(budget) for budget in budgets]
    drafters = [drafter_factory(s) for s in sources]
    slots = min(model.cfg.max_positions, cache.capacity)
    want_attention = any(d.needs_attention for d in drafters)
    active = list(range(len(sources)))  # original row index of each cache row
    on_cpu = device.type == "cpu"
    # On the native engine a call with one draft a row and its settling are one C call (greedy_step).
    engine = model.numpy_step
    native = engine if isinstance(engine, NativeStep) and on_cpu and not model.training else None
    if native is not None:  # finished rows leave the batch without copying the others' memory
        cache.share_memory(torch.arange(len(sources), device=device))
    # On the native engine a finished row's slots stay where they are, and each call names the cache rows of the
    # active ones (NativeStep.greedy_step's slot_rows): moving the others' slots down each time a query finished
    # took 4% of a forward greedy search at batch 32 (cache._compacted, session 71). None: active row r is cache
    # row r. Every call there is the C step's (one draft a row, or several as rows of their own: verify_as_rows).
    slot_rows: np.ndarray | None = None
    pending = [BOS_ID] * len(sources)  # each active row's next input token
    # The loop below in C where every row drafts as the C code can: no drafts, or one lookup draft (spec-lookup,
    # and spec-auto on a CPU) with no rest after a miss.
    lookup = rest == 0 and all(type(d) is LookupDrafter and d.n_drafts == 1 for d in drafters) and \
        len({(d.draft_len, d.max_suffix) for d in drafters}) == 1
    stopped: list[int] = []  # the rows the time limit stopped
    if native is not None and (lookup or all(type(d) is NullDrafter for d in drafters)):
        shape = dict(draft_len=drafters[0].draft_len, max_suffix=drafters[0].max_suffix) if lookup else {}
        for i, (state, found) in enumerate(zip(out, native.greedy_search(cache, sources, budgets, slots, **shape))):
            state.tokens, state.provenance = list(found.tokens), list(found.provenance)
            state.score, state.finished = found.score, found.finished
            state.stats.add(found.stats)
            stopped += [i] * found.stopped
        active = []

    try:
        while active:
            drafts = fit_drafts([drafters[i].propose(out[i].context(), out[i].peak) if not out[i].resting else []
                                 for i in active],
                                [len(out[i].tokens) for i in active], [out[i].budget for i in active], slots)
            tokens, lengths = pack_drafts(pending, drafts, [sources[i] for i in active])  # (R, N, 1+D), (R, N)
            if native is not None and tokens.shape[1] == 1:
                n_acc_list, chosen_list, log_prob_list, peaks = native.greedy_step(tokens, lengths.numpy()[:, 0], cache,
                                                                                   want_attention, slot_rows)
                branch_list = [0] * len(active)
            elif native is not None:
                n_acc_list, branch_list, chosen_list, log_prob_list, peaks = verify_as_rows(
                    native, cache, tokens, lengths.numpy(), np.arange(len(active)) if slot_rows is None else slot_rows,
                    want_attention)
            else:
                tokens = tokens.to(device)
                logits, attention = model.decode(tokens, cache, cross_attention=want_attention)
                if on_cpu:  # a few small rows: NumPy and lists cost less than tensor ops
                    draft_tokens = [[[sources[i][p] for p in d] for d in row] for i, row in zip(active, drafts)]
                    weights = attention.float().numpy() if attention is not None else None
                    n_acc_list, branch_list, chosen_list, log_prob_list, peaks = settle_lists(
                        logits.float().numpy(), draft_tokens, weights)
                else:
                    n_acc_list, branch_list, chosen_list, log_prob_list, peaks = settle_tensors(
                        logits, tokens, lengths.to(device), attention)
                cache.commit(torch.from_numpy(np.array(n_acc_list, dtype=np.int64) + 1).to(device),
                             torch.tensor(branch_list, device=device) if any(branch_list) else None)
            still = []
            for row, i in enumerate(active):
                state, n_acc = out[i], n_acc_list[row]
                missed = bool(drafts[row]) and n_acc == 0
                state.resting = rest if missed else max(0, state.resting - 1)
                new = chosen_list[row][: n_acc + 1]
                origin = drafts[row][branch_list[row]][:n_acc] + [GENERATED] if n_acc else [GENERATED]
                state.stats.record_call(sum(map(len, drafts[row])), n_acc,
                                        bool(drafts[row]) and n_acc < len(drafts[row][branch_list[row]]), len(new))
                state.score += sum(log_prob_list[row][: len(new)])
                if new and new[-1] == EOS_ID:
                    state.tokens += new[:-1]
                    state.provenance += origin[:-1]
                    state.finished = True
                    continue
                state.tokens += new
                state.provenance += origin
                if len(state.tokens) >= state.budget:
                    continue
                state.peak = peaks[row] if peaks is not None else None
                still.append(row)
            if not still:
                break
            if len(still) < len(active):
                if native is not None:
                    slot_rows = (np.arange(len(active)) if slot_rows is None else slot_rows)[still]
                else:
                    cache.reorder(torch.tensor(still, dtype=torch.long, device=device))
                active = [active[row] for row in still]
            pending = [chosen_list[row][n_acc_list[row]] for row in still]

    except QueryTimeout:  # raised by a call before it changed any row's output: the rows it was to feed stopped
        stopped = active
    return handed_on(out, time.perf_counter() - start_time, stopped)


@torch.inference_mode()
def greedy_uncached(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]],
                    max_len: int | None = None) -> list[DecodeResult]:
    """Reference greedy decoding that recomputes the whole prefix at every step (the paper's
    baseline). Kept for benchmarks and equivalence tests only. At the time limit it hands on what it found as
    greedy does."""
    if not sources:
        return []
    start_time = time.perf_counter()
    device = model.device
    memory, keep, budgets = encode_sources(model, sources, max_len)
    out = [_Row(budget) for budget in budgets]
    active = list(range(len(sources)))
    try:
        while active:
            prefix = pad_sources([out[i].context() for i in active], device)
            lengths = torch.tensor([len(out[i].tokens) for i in active], device=device)
            rows = torch.tensor(active, device=device)
            logits = model.decode_full(prefix, memory[rows], keep[rows])
            last = logits[torch.arange(len(active), device=device), lengths]  # (R, V)
            log_probs, next_tokens = last.log_softmax(dim=-1).max(dim=-1)
            still = []
            for row, i in enumerate(active):
                state, token = out[i], int(next_tokens[row])
                state.stats.record_call()
                state.score += float(log_probs[row])
                if token == EOS_ID:
                    state.finished = True
                    continue
                state.tokens.append(token)
                state.provenance.append(GENERATED)
                if len(state.tokens) < state.budget:
                    still.append(i)
            active = still
    except QueryTimeout:  # raised by a call before it changed any row's output: the rows it was to feed stopped
        return handed_on(out, time.perf_counter() - start_time, active)
    return handed_on(out, time.perf_counter() - start_time)


def handed_on(out: Sequence[_Row], elapsed: float, stopped: Sequence[int] = ()) -> list[DecodeResult]:
    """Each row's result, timed `elapsed`. Where the time limit stopped rows (`stopped`, original indices), a
    QueryTimeout that hands every row's result on (limits.py), a stopped row's with the counts of its calls and no
    answer: greedy's answer cut short is none."""
    results = []
    for i, state in enumerate(out):
        state.stats.wall_time_s = elapsed
        hyp = Hypothesis(tuple(state.tokens), state.score, tuple(state.provenance), state.finished)
        results.append(DecodeResult([] if i in stopped else [hyp], state.stats))
    if stopped:
        raise QueryTimeout("time limit reached", found=results, searched=[i not in stopped for i in range(len(out))])
    return results
