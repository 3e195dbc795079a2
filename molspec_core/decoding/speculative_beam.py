"""Speculative beam search: the paper's SBS (lossy) and an exact variant (`sbs-exact`).

Both keep one KV-cache row per live hypothesis, and rows may sit at different lengths (per-row
positions replace the paper's left padding). A "fed" call gives each hypothesis that needs it its
pending last token followed by copy drafts, (R, N, 1+D), and keeps the log-probs at every position
of the draft branch it chose (the one whose prefix agrees longest with the argmax): a *path*.

sbs (Andronov et al. 2024, Appendix B): every step feeds every live hypothesis; the candidates are
the hypothesis extended along its accepted draft prefix of each length i = 0..a, branching at i
into its top-`width` tokens (the token that continues the accepted prefix excluded for i < a);
all candidates of all hypotheses, of different lengths, are ranked by score and the best `width`
kept. With draft length 0 this is exactly beam search. It is not guaranteed to equal beam search,
because it compares hypotheses of different lengths.

sbs-exact returns beam search's n-best lists (beam.py defines beam search). It replays standard
beam steps, each extending every live hypothesis by one token, without the model as long as every
hypothesis that can matter knows its next-token log-probs. A hypothesis knows them when it lies on
a path: it was fed, or it descends from a fed hypothesis only through the path's draft tokens.
A child that leaves its parent's path does not know them. Before a step, the width-th best child
score among the knowing hypotheses is a bar: log-probs are <= 0, so a hypothesis whose score is
below the bar cannot have a child in the next beam and is dropped unexpanded (beam search would
drop its children too). If some not-knowing hypothesis reaches the bar, all such hypotheses are fed
in one call, with fresh drafts, which also gives them new paths. Selection is the same stable sort
over (slot, token) as beam search, on the same float32 sums, so ties break the same way; scores
differ from beam search only by the float rounding of logits computed in a longer call.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..drafting import Drafter
from ..model import Seq2SeqTransformer
from ..tokenizer import BOS_ID, EOS_ID, PAD_ID
from .batch import pad_sources, target_budget
from .result import GENERATED, DecodeResult, DecodeStats, Hypothesis
from .verify import accept_greedy

DrafterFactory = Callable[[Sequence[int]], Drafter]


@dataclass(frozen=True)
class _Path:
    """Log-probs along one fed branch: position j predicts the token after base + draft[:j]."""

    base_len: int  # tokens (bos included) of the hypothesis when it was fed
    draft: tuple[int, ...]
    draft_src: tuple[int, ...]  # source position of each draft token
    log_probs: torch.Tensor  # (1+D, V) float32
    peaks: tuple[int, ...] | None  # cross-attention argmax per position (pointer drafter)


@dataclass
class _Hyp:
    tokens: list[int]  # bos included
    provenance: list[int]  # per output token
    score: torch.Tensor  # float32 scalar: the same arithmetic as beam search
    fed: int  # tokens whose keys/values are in this hypothesis' cache row
    extent: int  # valid slots in the row (fed plus the rest of its path)
    path: _Path | None = None  # set while the hypothesis lies on a path
    peak: int | None = None  # where the model looked when it produced the last token

    def next_log_probs(self) -> torch.Tensor | None:
        if self.path is None:
            return None
        return self.path.log_probs[len(self.tokens) - self.path.base_len]

    def child(self, token: int, score: torch.Tensor) -> "_Hyp":
        """One-token extension; it stays on the path if the token is the path's next draft token."""
        path, j = self.path, len(self.tokens) - (self.path.base_len if self.path else 0)
        on_path = path is not None and j < len(path.draft) and path.draft[j] == token
        peak = path.peaks[j] if path is not None and path.peaks is not None else None
        return _Hyp(self.tokens + [token], self.provenance + [path.draft_src[j] if on_path else GENERATED], score,
                    fed=len(self.tokens) + 1 if on_path else len(self.tokens), extent=self.extent,
                    path=path if on_path else None, peak=peak)


class _Search:
    """State shared by both variants for one query: cache rows, feeding, finished list."""

    def __init__(self, model: Seq2SeqTransformer, src: Sequence[int], drafter: Drafter, width: int,
                 n_best: int, budget: int, max_draft: int):
        self.model, self.src, self.drafter, self.width, self.n_best, self.budget = model, src, drafter, width, n_best, budget
        device = model.embed.weight.device
        src_t = pad_sources([src], device)
        memory = model.encode(src_t)
        self.cache = model.new_cache(memory, src_t != PAD_ID, budget + max_draft + 2)
        self.device = device
        zero = torch.zeros((), dtype=torch.float32)
        self.live = [_Hyp([BOS_ID], [], zero, fed=0, extent=0)]
        self.finished: list[tuple[float, int, Hypothesis]] = []
        self.stats = DecodeStats()

    # -- cache rows follow the live list: row i belongs to live[i] --------------------------------

    def regroup(self, parents: list[int], children: list[_Hyp]) -> None:
        self.cache.set_lengths(torch.tensor([h.extent for h in self.live], dtype=torch.long))
        self.cache.reorder(torch.tensor(parents, dtype=torch.long, device=self.device), cross=False)
        self.live = children

    def feed(self, which: list[int]) -> None:
        """One decoder call for live[i], i in which: pending token + drafts; sets their paths."""
        want_attention = self.drafter.needs_attention
        drafts = {i: self.drafter.propose(self.live[i].tokens, self.live[i].peak) for i in which}
        n_branches = max(1, max(len(d) for d in drafts.values()))
        depth = max((len(p) for d in drafts.values() for p in d), default=0)
        rows = len(self.live)
        tokens = torch.full((rows, n_branches, 1 + depth), PAD_ID, dtype=torch.long)
        lengths = torch.zeros(rows, n_branches, dtype=torch.long)
        for i, row_drafts in drafts.items():
            tokens[i, :, 0] = self.live[i].tokens[-1]
            for b, positions in enumerate(row_drafts):
                tokens[i, b, 1:1 + len(positions)] = torch.as_tensor([self.src[p] for p in positions])
                lengths[i, b] = len(positions)
        # Rows not fed get placeholder tokens at length 0 and are not committed.
        self.cache.set_lengths(torch.tensor([self.live[i].fed if i in drafts else 0 for i in range(rows)]))
        logits, attention = self.model.decode(tokens.to(self.device), self.cache, cross_attention=want_attention)
        log_probs = logits.float().log_softmax(dim=-1).cpu()  # (R, N, 1+D, V)
        _, branch = accept_greedy(tokens[:, :, 1:], lengths, log_probs.argmax(dim=-1))  # first best branch
        keep = torch.zeros(rows, dtype=torch.long)
        for i in which:
            b = int(branch[i])
            positions = drafts[i][b] if drafts[i] else []
            peaks = tuple(attention[i, b, : 1 + len(positions)].argmax(-1).tolist()) if attention is not None else None
            hyp = self.live[i]
            hyp.path = _Path(len(hyp.tokens), tuple(self.src[p] for p in positions), tuple(positions),
                             log_probs[i, b, : 1 + len(positions)], peaks)
            keep[i] = 1 + len(positions)
            self.stats.draft_tokens_proposed += int(lengths[i].sum())
        self.cache.commit(keep.to(self.device), branch.to(self.device))
        for i in range(rows):
            hyp = self.live[i]
            if i in drafts:
                hyp.extent = hyp.fed + int(keep[i])
                hyp.fed = len(hyp.tokens)
        self.cache.set_lengths(torch.tensor([h.extent for h in self.live], dtype=torch.long))
        self.stats.model_calls += 1

    def finish(self, hyp: _Hyp, score: float, done: bool) -> None:
        tokens = hyp.tokens[1:-1] if done else hyp.tokens[1:]  # bos and eos are not output tokens
        result = Hypothesis(tuple(tokens), score, tuple(hyp.provenance[: len(tokens)]), done)
        self.finished.append((score if done else score - 1e9, len(self.finished), result))

    def should_stop(self) -> bool:
        if not self.live:
            return True
        best_live = max(float(h.score) for h in self.live)
        ranked = sorted((f[0] for f in self.finished), reverse=True)
        if len(ranked) >= self.n_best and best_live <= ranked[self.n_best - 1]:
            return True
        return False

    def result(self, started: float) -> DecodeResult:
        self.stats.wall_time_s = time.perf_counter() - started
        ranked = [h for _, _, h in sorted(self.finished, key=lambda x: (-x[0], x[1]))][: self.n_best]
        if ranked:
            self.stats.tokens_generated = max(len(h.tokens) for h in ranked) + 1
            self.stats.draft_tokens_accepted = sum(p >= 0 for p in ranked[0].provenance)
        return DecodeResult(ranked, self.stats)


def _exact_one(search: _Search) -> None:
    width = search.width
    step = 0
    while True:
        # 1. Make sure every hypothesis that can place in the next beam knows its log-probs.
        while True:
            knowing = [i for i, h in enumerate(search.live) if h.next_log_probs() is not None]
            blind = [i for i, h in enumerate(search.live) if h.next_log_probs() is None]
            if not blind:
                break
            bar = float("-inf")
            if knowing:
                children = torch.stack([search.live[i].score + search.live[i].next_log_probs() for i in knowing])
                bar = float(children.flatten().topk(min(width, children.numel())).values[-1])
            must = [i for i in blind if float(search.live[i].score) >= bar]
            if not must:
                keep = knowing
                search.regroup(keep, [search.live[i] for i in keep])
                break
            search.feed(must)
        # 2. One standard beam step from the known log-probs, no model call.
        scores = torch.stack([h.score for h in search.live])  # (L,) float32
        log_probs = torch.stack([h.next_log_probs() for h in search.live])  # (L, V)
        vocab = log_probs.shape[1]
        candidates = (scores.unsqueeze(-1) + log_probs).view(-1)
        top_scores, top_index = torch.sort(candidates, descending=True, stable=True)
        top_scores, top_index = top_scores[:width], top_index[:width]
        parents, children = [], []
        for score, index in zip(top_scores, top_index.tolist()):
            if score == float("-inf"):
                continue
            parent, token = divmod(index, vocab)
            child = search.live[parent].child(token, score)
            if token == EOS_ID:
                search.finish(child, float(score), True)
            else:
                parents.append(parent)
                children.append(child)
        step += 1
        search.regroup(parents, children)
        if search.should_stop():
            return
        if step >= search.budget:
            for h in search.live:
                search.finish(h, float(h.score), False)
            return


def _paper_one(search: _Search) -> None:
    width = search.width
    while True:
        search.feed(list(range(len(search.live))))
        candidates: list[tuple[float, int, int, _Hyp]] = []  # (score, order, parent, child)
        for parent, hyp in enumerate(search.live):
            path = hyp.path
            assert path is not None
            argmax = path.log_probs.argmax(-1).tolist()
            accepted = 0
            while accepted < len(path.draft) and path.draft[accepted] == argmax[accepted]:
                accepted += 1
            node, score = hyp, hyp.score
            for i in range(accepted + 1):
                ranked = torch.sort(path.log_probs[i], descending=True, stable=True)
                for lp, token in zip(ranked.values[:width + 1].tolist(), ranked.indices[:width + 1].tolist()):
                    if i < accepted and token == path.draft[i]:
                        continue
                    child_score = score + path.log_probs[i, token]
                    candidates.append((float(child_score), len(candidates), parent, node.child(token, child_score)))
                if i < accepted:
                    score = score + path.log_probs[i, path.draft[i]]
                    node = node.child(path.draft[i], score)
        candidates.sort(key=lambda c: (-c[0], c[1]))
        parents, children = [], []
        for score, _, parent, child in candidates[:width]:
            if child.tokens[-1] == EOS_ID:
                search.finish(child, score, True)
            elif len(child.tokens) - 1 >= search.budget:
                search.finish(child, score, False)
            else:
                child.fed = len(child.tokens) - 1  # the paper feeds every hypothesis every step
                child.path = None
                parents.append(parent)
                children.append(child)
        search.regroup(parents, children)
        if search.should_stop():
            return


@torch.inference_mode()
def speculative_beam(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]], width: int,
                     drafter_factory: DrafterFactory, *, exact: bool, n_best: int | None = None,
                     max_len: int | None = None, max_draft: int = 64) -> list[DecodeResult]:
    """Speculative beam search per query (queries run one after another)."""
    results = []
    for src in sources:
        started = time.perf_counter()
        budget = max_len or target_budget(len(src), model.cfg.max_positions)
        search = _Search(model, src, drafter_factory(src), width, min(n_best or width, width), budget,
                         max(max_draft, len(src)) + 1)
        (_exact_one if exact else _paper_one)(search)
        results.append(search.result(started))
    return results
