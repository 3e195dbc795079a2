"""Speculative beam search: the paper's SBS (lossy) and an exact variant (`sbs-exact`).

Cache rows form a pool owned by hypotheses, not by beam slots: a hypothesis keeps its row while it
is extended, a second child of the same parent gets a copy of the parent's row (copy on write, made
when it is first fed), and a call feeds only the rows that need it (gathered into a small cache and
written back), so rows may sit at different lengths (per-row positions replace the paper's left
padding). A fed row receives its pending last token followed by copy drafts, (R, N, 1+D), and keeps
the log-probs at every position of the draft branch it chose (the one whose prefix agrees longest
with the argmax): a *path*.

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
A child that leaves its parent's path does not know them (it is *blind*). Before a step, the
width-th best child score among the knowing hypotheses is a bar: log-probs are <= 0, so a blind
hypothesis whose score is below the bar cannot have a child in the next beam and is dropped
unexpanded (beam search would drop its children too), and so is one at or below the n_best-th
finished score (beam.py's floor: beam search skips it too). If some blind hypothesis reaches the bar,
all such hypotheses are fed in one call, with fresh drafts, which also gives them new paths.

Look-ahead: a call that is made anyway also feeds, as extra rows, the children the next step may
select that would be blind: the off-path children of knowing hypotheses among the width best
knowing children (only they can be selected, since the bar is a lower bound on the next step's
cut), and of those only tokens within AHEAD_MARGIN nats of the parent's best token: on the retro
model an argmax child fed ahead was selected 61-91% of the time, any other child 19%, and each
fed row costs time. When the step selects such a child it already knows its log-probs, so the step
after needs no call for it. This changes only which calls are made, never what a step selects.
The service turns it off on a CPU: there a row fed ahead costs a call about as much as any other fed
token, and each child fed ahead first copies its parent's row; on the retro quick set at width 10
(40 queries, D=1) it saved 16% of the calls and cost 11% more time (5.40 s against 4.82 s, twice).

Selection is beam search's own step (beam.best_children: the stable sort over (slot, token)), and the
stop rule and the ranking are beam.py's too, so wherever both searches hold the same float32 log-probs
they select, and break ties, alike. They hold the same ones, to the bit, on the native engine: the C
step computes each fed token's logits alone, the same in a one-token step and in a verify call
(tests/test_native.py), and several drafts a row are fed as rows of their own, each a copy of its
hypothesis' row (in torch, a call of several branches a row rounds otherwise). On the other engines a
token's logits depend on the call's shape (the rows and tokens fed: the products' blocking and
summation order), so sbs-exact's scores differ from beam search's by float rounding (up to 1.6e-5
relative seen, tests/test_speculative_beam.py), and where two alternatives are within that rounding
of each other the two searches may order them, or keep them at the width's cut, differently. That
includes exact ties of the model (two tokens with the same embedding row, say): two hypotheses that descend from tied
parents by the same token have their next log-probs computed in different rows or calls, and can come
out equal in one search and an ulp or so apart in the other. No shared tie rule (by token id, then
draft order, say) can mend this, as a search that sees no tie has none to break; treating scores
within some tolerance as tied would not either: two scores either side of the tolerance in one search
and within it in the other still part, and beam search itself would then no longer rank by score.
Only logits that do not depend on the call's shape (the C step's) make the two equal.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..cache import RowPool
from ..drafting import Drafter
from ..limits import QueryTimeout
from ..model import Seq2SeqTransformer
from ..native import NativeStep
from ..tokenizer import BOS_ID, EOS_ID
from .batch import SPLIT_GATHER_BYTES, check_sources, fit_drafts, pack_drafts, start
from .beam import answers_wanted, best_children, can_stop, floor_of, ranked
from .result import GENERATED, DecodeResult, DecodeStats, Hypothesis, longest_answer_tokens
from .verify import accept_greedy

DrafterFactory = Callable[[Sequence[int]], Drafter]
AHEAD_MARGIN = 1.0  # nats; see the module docstring


@dataclass(frozen=True)
class _Path:
    """Log-probs along one fed branch: position j predicts the token after base + draft[:j]."""

    base_len: int  # tokens (bos included) of the hypothesis when it was fed
    draft: tuple[int, ...]
    draft_src: tuple[int, ...]  # source position of each draft token
    log_probs: np.ndarray  # (1+D, V) float32
    peaks: tuple[int, ...] | None  # cross-attention argmax per position (pointer drafter)

    @property
    def end(self) -> int:
        """Slots of the row that hold keys/values of this path (base and draft)."""
        return self.base_len + len(self.draft)


@dataclass
class _Hyp:
    """A hypothesis. Its row holds keys/values of all its tokens but the last (the pending one);
    on a path the row holds the whole path, the last token included."""

    tokens: list[int]  # bos included
    provenance: list[int]  # per output token
    score: np.float32  # the same float32 arithmetic as beam search (NumPy scalars: a tenth of torch's cost)
    row: int = -1  # pool row; -1 until the hypothesis is placed
    path: _Path | None = None  # set while the hypothesis lies on a path
    peak: int | None = None  # where the model looked when it produced the last token
    ahead: dict[int, "_Hyp"] = field(default_factory=dict)  # children fed before a step selects them
    copy_from: tuple[int, int] | None = None  # (row, slots) to copy into its row before it is first fed

    def next_log_probs(self) -> np.ndarray | None:
        if self.path is None:
            return None
        return self.path.log_probs[len(self.tokens) - self.path.base_len]

    def on_path(self, token: int) -> bool:
        path = self.path
        if path is None:
            return False
        j = len(self.tokens) - path.base_len
        return j < len(path.draft) and path.draft[j] == token

    def child(self, token: int, score: np.float32) -> "_Hyp":
        """One-token extension; it stays on the path if the token is the path's next draft token."""
        if token in self.ahead:
            known = self.ahead.pop(token)
            known.score = score
            return known
        path = self.path
        if path is None:
            return _Hyp(self.tokens + [token], self.provenance + [GENERATED], score)
        j = len(self.tokens) - path.base_len
        on_path = self.on_path(token)
        peak = path.peaks[j] if path.peaks is not None else None
        return _Hyp(self.tokens + [token], self.provenance + [path.draft_src[j] if on_path else GENERATED],
                    score, path=path if on_path else None, peak=peak)


class _Search:
    """State shared by both variants for one query: the row pool, feeding, the finished list."""

    def __init__(self, model: Seq2SeqTransformer, src: Sequence[int], drafter: Drafter, width: int,
                 n_best: int, max_len: int | None):
        self.model, self.src, self.drafter, self.width, self.n_best = model, src, drafter, width, n_best
        self.device = model.device
        # A call feeds hypotheses of different lengths padded to the longest draft, a source window.
        cache, (self.budget,) = start(model, [src], max_len, padding=len(src))
        self.native = isinstance(model.numpy_step, NativeStep) and not model.training
        self.pool = RowPool(cache, 0, zeroed=not self.native)
        self.slots = min(model.cfg.max_positions, cache.capacity)
        self.free: list[int] = []  # free pool rows, the lowest last (taken first)
        self.live = [_Hyp([BOS_ID], [], np.float32(0.0), row=self.take_row())]
        self.finished: list[Hypothesis] = []
        self.stats = DecodeStats(rejections_recorded=False)  # see result(): no rate of acceptance to give

    # -- the row pool ------------------------------------------------------------------------------

    def take_row(self) -> int:
        if not self.free:  # grow by about a beam's worth: width live rows plus look-ahead and copies
            start = self.pool.rows
            self.pool.add_rows(2 * self.width + 1 if start == 0 else self.width + 1)
            self.free = list(range(self.pool.rows - 1, start - 1, -1))
        return self.free.pop()

    def branch_off(self, parent: _Hyp, child: _Hyp) -> None:
        """Give a child a row of its own holding the parent's keys/values."""
        child.row = self.take_row()
        assert parent.path is not None
        self.pool.copy_row(parent.row, child.row, parent.path.end)

    def place(self, parents: list[_Hyp], children: list[_Hyp]) -> None:
        """children[i] (of parents[i]) become the live list; rows nobody holds any more go back to the pool.

        A parent's row goes to its child on the path, if it has one (that child reads the draft's slots
        and is not fed), else to its first child. The other children take new rows, filled from the
        parent's row only when they are first fed (copy_from): a child dropped unfed costs no copy.
        The copy is safe then: no row is written but by a call, which makes its copies first, and a
        blind child is fed or dropped at the very next step, before which the parent's row is not
        freed (a holder on the path is not dropped; a blind holder ranks above its siblings, so it
        is dropped only with them)."""
        held = {child.row for child in children if child.row >= 0}
        for parent, child in zip(parents, children):
            if child.row < 0 and child.path is not None and parent.row not in held:
                child.row = parent.row
                held.add(child.row)
        for parent, child in zip(parents, children):
            if child.row >= 0:
                continue
            if parent.row not in held:
                child.row = parent.row
            elif child.path is not None:  # on the path, which another child's row holds already
                self.branch_off(parent, child)
            else:
                child.row = self.take_row()
                child.copy_from = (parent.row, len(child.tokens) - 1)
            held.add(child.row)
        for hyp in self.live:
            rows = [hyp.row] + [h.row for h in hyp.ahead.values()]
            self.free.extend(r for r in rows if r not in held)
            hyp.ahead.clear()
        self.live = children

    # -- the model call ----------------------------------------------------------------------------

    def feed(self, hyps: list[_Hyp]) -> None:
        """One decoder call for these hypotheses' rows only: pending token + drafts; sets paths."""
        for hyp in hyps:
            if hyp.copy_from is not None:
                source, slots = hyp.copy_from
                self.pool.copy_row(source, hyp.row, slots)
                hyp.copy_from = None
        want_attention = self.drafter.needs_attention
        n_cached = [len(h.tokens) - 1 for h in hyps]
        drafts = fit_drafts([self.drafter.propose(h.tokens, h.peak) for h in hyps], n_cached,
                            [self.budget] * len(hyps), self.slots)
        tokens, lengths = pack_drafts([h.tokens[-1] for h in hyps], drafts, [self.src] * len(hyps))  # (R, N, 1+D)
        rows = torch.from_numpy(np.array([h.row for h in hyps], dtype=np.int64)).to(self.device)
        starts = torch.from_numpy(np.array(n_cached, dtype=np.int64)).to(self.device)
        n_rows, n_branches, depth = tokens.shape
        # On the native engine one draft a row is fed on the pool's own rows (no gather, no write-back), and several
        # drafts a row each as a row of its own, gathered from its hypothesis' row, so that the C step computes them
        # as beam search's steps do (a call of several branches a row runs in torch, which rounds otherwise).
        in_pool = self.native and n_branches == 1 and max(n_cached) + depth <= self.pool.capacity
        split = self.native and n_branches > 1
        if split and n_rows > 1 and \
                self.pool.gather_bytes(n_rows * n_branches, max(n_cached) + depth) > SPLIT_GATHER_BYTES:
            self.feed(hyps[:n_rows // 2])
            self.feed(hyps[n_rows // 2:])
            return
        if in_pool:
            cache = self.pool.view(rows, starts)
        elif split:
            cache = self.pool.gather(rows.repeat_interleave(n_branches), starts.repeat_interleave(n_branches), depth)
        else:
            cache = self.pool.gather(rows, starts, depth)
        fed = tokens.view(n_rows * n_branches, 1, depth) if split else tokens
        logits, attention = self.model.decode(fed.to(self.device), cache, cross_attention=want_attention)
        if split:  # (R*N, 1, 1+D, ...) -> (R, N, 1+D, ...)
            logits = logits.view(n_rows, n_branches, depth, -1)
            attention = attention.view(n_rows, n_branches, depth, -1) if attention is not None else None
        log_probs = self.model.log_probs(logits).cpu().numpy()  # (R, N, 1+D, V)
        branch: torch.Tensor | None = None
        if n_branches == 1:  # one branch a row (the CPU's case): it is the path, nothing to choose
            branch_list = [0] * len(hyps)
        else:  # the first branch that agrees longest with the argmax
            _, branch = accept_greedy(tokens[:, :, 1:], lengths, torch.from_numpy(log_probs.argmax(-1)))
            branch_list = branch.tolist()
        # cross-attention argmax (R, N, 1+D) at every fed position in one op (the first maximum, as torch's)
        peaks_all = attention.float().cpu().numpy().argmax(-1).tolist() if attention is not None else None
        for i, hyp in enumerate(hyps):
            b = branch_list[i]
            positions = drafts[i][b] if drafts[i] else []
            peaks = tuple(peaks_all[i][b][: 1 + len(positions)]) if peaks_all is not None else None
            hyp.path = _Path(len(hyp.tokens), tuple(self.src[p] for p in positions), tuple(positions),
                             log_probs[i, b, : 1 + len(positions)], peaks)
        if not in_pool:
            chosen = branch if branch is not None else torch.zeros(len(hyps), dtype=torch.long)
            if split:  # row r's chosen branch b was fed as gathered row r * N + b, its one branch
                fed_rows = torch.arange(n_rows) * n_branches + chosen
                self.pool.write(rows, cache, torch.zeros_like(chosen), fed_rows)
            else:
                self.pool.write(rows, cache, chosen.to(self.device))
        # Acceptance and output tokens are counted once the search ends (result), from the n-best.
        self.stats.record_call(proposed=sum(len(d) for row in drafts for d in row), emitted=0)

    # -- results -----------------------------------------------------------------------------------

    def finish(self, hyp: _Hyp, score: float, done: bool) -> None:
        tokens = hyp.tokens[1:-1] if done else hyp.tokens[1:]  # bos and eos are not output tokens
        self.finished.append(Hypothesis(tuple(tokens), score, tuple(hyp.provenance[: len(tokens)]), done))

    def floor(self) -> float:
        return floor_of([h.score for h in self.finished if h.finished], self.n_best)

    def should_stop(self) -> bool:
        best_live = max((float(h.score) for h in self.live), default=float("-inf"))
        return can_stop([h.score for h in self.finished if h.finished], best_live, self.n_best)

    def stopped(self, started: float) -> DecodeResult:
        """The result of a search stopped by the time limit: the hypotheses finished, then the live ones as
        unfinished (none before the first step: bos alone is no answer)."""
        for hyp in self.live:
            if len(hyp.tokens) > 1:
                self.finish(hyp, float(hyp.score), False)
        return self.result(started)

    def result(self, started: float) -> DecodeResult:
        self.stats.wall_time_s = time.perf_counter() - started
        best = ranked(self.finished, self.n_best)
        if best:
            self.stats.tokens_generated = longest_answer_tokens(best)
            self.stats.draft_tokens_accepted = sum(p >= 0 for p in best[0].provenance)
        return DecodeResult(best, self.stats)


def _best_children(hyps: list[_Hyp], width: int) -> tuple[np.ndarray, np.ndarray]:
    """beam.best_children over hypotheses that know their next-token log-probs."""
    scores = np.array([h.score for h in hyps], dtype=np.float32)  # (L,)
    log_probs = np.stack([h.next_log_probs() for h in hyps])  # (L, V) float32
    return best_children(scores, log_probs, width)


def _make_known(search: _Search, look_ahead: bool) -> None:
    """Feed the blind hypotheses that can place in the next beam; drop the others."""
    width, vocab = search.width, search.model.cfg.vocab_size
    while True:
        knowing = [h for h in search.live if h.path is not None]
        blind = [h for h in search.live if h.path is None]
        if not blind:
            return
        bar = float("-inf")
        if knowing:
            top_scores, top_index = _best_children(knowing, width)
            if len(top_scores) == width:
                bar = float(top_scores[-1])
        floor = search.floor()  # no hypothesis at or below it can matter (beam.py)
        must = [h for h in blind if float(h.score) >= bar and float(h.score) > floor]
        if not must:
            search.free.extend(h.row for h in blind)
            search.live = knowing  # the relative order of slots, and so tie-breaking, is kept
            return
        ahead = []
        if look_ahead and knowing:
            for score, index in zip(top_scores, top_index.tolist()):
                parent, token = knowing[index // vocab], index % vocab
                if token == EOS_ID or score == float("-inf") or parent.on_path(token) or token in parent.ahead:
                    continue
                lp = parent.next_log_probs()
                if float(lp[token]) < float(lp.max()) - AHEAD_MARGIN:
                    continue
                child = parent.child(token, score)
                search.branch_off(parent, child)
                parent.ahead[token] = child
                ahead.append(child)
        search.feed(must + ahead)


def _exact_one(search: _Search, look_ahead: bool = True) -> None:
    width, vocab = search.width, search.model.cfg.vocab_size
    step = 0
    while True:
        _make_known(search, look_ahead)
        # One standard beam step from the known log-probs, no model call.
        top_scores, top_index = _best_children(search.live, width)
        parents, children = [], []
        for score, index in zip(top_scores, top_index.tolist()):
            if score == float("-inf"):
                continue
            parent, token = search.live[index // vocab], index % vocab
            if token == EOS_ID:
                search.finish(_Hyp(parent.tokens + [token], parent.provenance + [GENERATED], score), float(score), True)
            else:
                parents.append(parent)
                children.append(parent.child(token, score))
        step += 1
        search.place(parents, children)
        if search.should_stop():
            return
        if step >= search.budget:
            for h in search.live:
                search.finish(h, float(h.score), False)
            return


def _paper_one(search: _Search) -> None:
    width = search.width
    while True:
        search.feed(search.live)
        candidates: list[tuple[float, int, _Hyp, _Hyp]] = []  # (score, order, parent, child)
        for hyp in search.live:
            path = hyp.path
            assert path is not None
            argmax = path.log_probs.argmax(-1).tolist()
            accepted = 0
            while accepted < len(path.draft) and path.draft[accepted] == argmax[accepted]:
                accepted += 1
            node, score = hyp, hyp.score
            for i in range(accepted + 1):
                ranked = np.argsort(-path.log_probs[i], kind="stable")  # descending, ties to the lower token
                for token in ranked[:width + 1].tolist():
                    if i < accepted and token == path.draft[i]:
                        continue
                    child_score = score + path.log_probs[i, token]
                    candidates.append((float(child_score), len(candidates), hyp, node.child(token, child_score)))
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
                child.path = None  # the paper feeds every hypothesis every step
                parents.append(parent)
                children.append(child)
        search.place(parents, children)
        if search.should_stop():
            return


@torch.inference_mode()
def speculative_beam(model: Seq2SeqTransformer, sources: Sequence[Sequence[int]], width: int,
                     drafter_factory: DrafterFactory, *, exact: bool, n_best: int | None = None,
                     max_len: int | None = None, look_ahead: bool = True) -> list[DecodeResult]:
    """Speculative beam search per query (queries run one after another). look_ahead (sbs-exact
    only) feeds the next step's would-be-blind children in calls made anyway; off, for benchmarks.
    At the time limit (limits.py) in the last query, the one of a call of one, it raises QueryTimeout with what
    was found, as beam search does: the queries before it whole, and its finished hypotheses, then its live ones,
    unfinished, with its real counts. Stopped in an earlier query, it hands on the queries before it, whole, and
    that one's calls with no answers (its search not read whole, as a sampling draw cut short): the later ones never
    began."""
    check_sources(sources, model.cfg.vocab_size, model.cfg.max_positions)  # all before the first query is decoded
    n_best = answers_wanted(width, n_best)
    results: list[DecodeResult] = []
    for src in sources:
        started = time.perf_counter()
        search: _Search | None = None
        try:
            search = _Search(model, src, drafter_factory(src), width, n_best, max_len)
            if exact:
                _exact_one(search, look_ahead)
            else:
                _paper_one(search)
            results.append(search.result(started))
        except QueryTimeout as timeout:
            if len(results) < len(sources) - 1:  # its calls were made: counted (service._stopped_writings)
                cut = search.stats if search is not None else DecodeStats(rejections_recorded=False)
                cut.wall_time_s = time.perf_counter() - started
                found = DecodeResult([], cut)
            else:
                found = search.stopped(started) if search is not None else DecodeResult([])
            raise QueryTimeout(str(timeout), found=[*results, found], searched=[True] * len(results) + [False]) \
                from None
    return results
