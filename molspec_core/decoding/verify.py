"""Model-free acceptance rules: pure tensor functions, tested with hand-made logits."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch


def accept_greedy(draft_tokens: torch.Tensor, draft_lengths: torch.Tensor,
                  argmax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Longest draft prefix equal to the model's argmax, per row, and the branch that achieves it.

    draft_tokens (B, N, D): the drafts fed after the pending token.
    draft_lengths (B, N): valid draft tokens per branch (shorter drafts are padded).
    argmax (B, N, D+1): argmax of the logits at each fed position; position i predicts the token
    after input i, so draft token i is accepted iff it equals argmax[..., i] and all before it were.
    Returns (n_accepted (B,), branch (B,)); ties go to the lowest branch index.
    """
    depth = draft_tokens.shape[-1]
    if depth == 0:
        zeros = torch.zeros(draft_tokens.shape[0], dtype=torch.long, device=draft_tokens.device)
        return zeros, zeros
    valid = torch.arange(depth, device=draft_tokens.device) < draft_lengths.unsqueeze(-1)  # (B, N, D)
    match = (draft_tokens == argmax[..., :depth]) & valid
    accepted = match.long().cumprod(dim=-1).sum(dim=-1)  # (B, N)
    n_accepted, branch = accepted.max(dim=-1)  # max returns the first index on ties
    return n_accepted, branch


def accept_greedy_lists(draft_tokens: Sequence[Sequence[Sequence[int]]],
                        argmax: Sequence[Sequence[Sequence[int]]]) -> tuple[list[int], list[int]]:
    """accept_greedy on Python lists: draft_tokens[r][b] the (unpadded) drafts of row r, argmax[r][b]
    the argmax at each fed position of that branch. For a few small rows on a CPU, where each tensor
    op costs more than this loop; tests/test_verify.py pins it to accept_greedy."""
    n_accepted, branches = [], []
    for row_drafts, row_argmax in zip(draft_tokens, argmax):
        best, best_branch = 0, 0
        for b, draft in enumerate(row_drafts):
            predicted = row_argmax[b]
            n = 0
            while n < len(draft) and draft[n] == predicted[n]:
                n += 1
            if n > best:  # ties go to the lowest branch index
                best, best_branch = n, b
        n_accepted.append(best)
        branches.append(best_branch)
    return n_accepted, branches


def adjust_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """The one place where temperature and top-k shape a distribution, for target and draft alike."""
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (use greedy decoding for temperature 0)")
    logits = logits.float() / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits.softmax(dim=-1)


def accept_sampled(draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, target_probs: torch.Tensor,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023), vectorized over B rows.

    draft_tokens (B, D); draft_probs (B, D, V), or None for copy drafts (a point mass on each draft
    token); target_probs (B, D+1, V). Draft token i is accepted with probability
    min(1, p_i(x)/q_i(x)); at the first rejection the next token is drawn from norm(max(0, p_i - q_i));
    if all D pass, a bonus token is drawn from p_D. The emitted tokens are distributed as samples
    from p. Returns (n_accepted (B,), next_token (B,)).
    """
    batch, depth = draft_tokens.shape
    if depth == 0:  # plain sampling: no uniform to draw, and the residual of an empty draft is p itself
        return (torch.zeros(batch, dtype=torch.long, device=draft_tokens.device),
                torch.multinomial(target_probs[:, 0], 1, generator=generator).squeeze(-1))
    rows = torch.arange(batch, device=draft_tokens.device)
    if draft_probs is None:
        draft_probs = torch.zeros_like(target_probs[:, :depth]).scatter_(-1, draft_tokens.unsqueeze(-1), 1.0)
    p_draft = target_probs[:, :depth].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)  # (B, D)
    q_draft = draft_probs.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
    ratio = (p_draft / q_draft.clamp_min(1e-30)).clamp(max=1.0)
    uniform = torch.rand(batch, depth, generator=generator, device=draft_tokens.device)
    passed = (uniform < ratio).long().cumprod(dim=-1)
    n_accepted = passed.sum(dim=-1)  # (B,)
    # Residual at the first rejection, or p_D itself for the bonus token (q counts as 0 there).
    padded_q = torch.cat([draft_probs, torch.zeros_like(target_probs[:, :1])], dim=1)  # (B, D+1, V)
    p_at = target_probs[rows, n_accepted]
    q_at = padded_q[rows, n_accepted]
    residual = (p_at - q_at).clamp_min(0.0)
    mass = residual.sum(dim=-1, keepdim=True)
    # p == q exactly leaves no residual; rejection then has probability 0, so p itself is right.
    residual = torch.where(mass > 0, residual, p_at)
    next_token = torch.multinomial(residual, 1, generator=generator).squeeze(-1)
    return n_accepted, next_token


def accept_relaxed(draft_tokens: torch.Tensor, logits: torch.Tensor, beta: int = 1,
                   tau: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """SpecDec++-style relaxed verification for greedy decoding (Xia et al. 2023), lossy.

    Draft token i passes if it is among the model's top-beta tokens at i in greedy's order (higher
    logit first, equal logits the lower token first) and log p(top-1) - log p(draft) <= tau; the next
    token after the accepted run is the argmax there. beta=1, tau=0 accepts exactly the argmax: plain
    greedy, ties included. draft_tokens (B, D), logits (B, D+1, V): the model's raw logits, whose
    differences are those of the log-probs; a log_softmax first would round nearly equal logits into
    ties that greedy's argmax does not see.
    """
    depth = draft_tokens.shape[1]
    scores = logits[:, :depth]
    top = scores.max(dim=-1).values
    drafted = scores.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
    lower = torch.arange(scores.shape[-1], device=scores.device) < draft_tokens.unsqueeze(-1)  # (B, D, V)
    ahead = (scores > drafted.unsqueeze(-1)) | ((scores == drafted.unsqueeze(-1)) & lower)
    rank = ahead.sum(dim=-1)  # tokens greedy's argmax would take before the draft token
    ok = (rank < beta) & (top - drafted <= tau)
    n_accepted = ok.long().cumprod(dim=-1).sum(dim=-1)
    rows = torch.arange(draft_tokens.shape[0], device=draft_tokens.device)
    return n_accepted, logits[rows, n_accepted].argmax(dim=-1)


def _kl(r: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    safe = r > 0
    return torch.where(safe, r * (r.clamp_min(1e-300).log() - p.clamp_min(1e-300).log()), torch.zeros_like(r)).sum(-1)


def _shaper(p: torch.Tensor, q: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """a -> r(x) = min(max(q(x), b p(x)), a p(x)) with b in [0, 1] chosen exactly so that sum r = 1.

    Tokens with q >= a p are capped at a p. For the others ("free", q/p < a) r = max(q, b p), which
    is piecewise linear in b with a kink at b = q/p; sorted by q/p, the free tokens are a prefix, the
    sums of r at each kink follow from running sums, the first kink where the sum reaches 1 names the
    linear piece, and b is solved on it. The sort and the running sums do not depend on a, so they
    are made once here, not in every round of mentored_target's bisection.
    """
    ratio = torch.where(p > 0, q / p.clamp_min(1e-300), torch.full_like(p, float("inf")))
    order = ratio.argsort(dim=-1)
    kinks = ratio.gather(-1, order)  # (..., V), ascending; inf for p = 0 (never free)
    p_sorted = p.gather(-1, order)
    p_cum, q_cum = p_sorted.cumsum(-1), q.gather(-1, order).cumsum(-1)
    zero = torch.zeros_like(p[..., :1])
    # p of the tokens from kink j on, summed from the top end: the capped mass as p_total - p_cum
    # would cancel to 0 for a capped token of p below float64's epsilon (1e-21 happens), and the
    # bisection would then take an r far past the KL bound for one within it.
    p_tail = torch.cat([p_sorted.flip(-1).cumsum(-1).flip(-1), zero], -1)  # (..., V + 1)

    def shaped(a: torch.Tensor) -> torch.Tensor:
        free = ratio < a
        free_sorted = kinks < a  # the same tokens in kink order: a prefix
        n_free = free_sorted.sum(-1, keepdim=True)
        last = (n_free - 1).clamp_min(0)
        q_free = torch.where(n_free > 0, q_cum.gather(-1, last), zero)
        fixed = a * p_tail.gather(-1, n_free) + q_free  # caps + free q
        # sum r at b = kink k (free tokens up to k contribute b p, the later free ones q)
        at_kink = fixed + kinks.nan_to_num(posinf=0.0) * p_cum - q_cum
        k = (at_kink < 1).logical_and(free_sorted).sum(-1, keepdim=True)  # kinks below the solution
        p_k = torch.where(k > 0, p_cum.gather(-1, (k - 1).clamp_min(0)), torch.ones_like(fixed))
        q_k = torch.where(k > 0, q_cum.gather(-1, (k - 1).clamp_min(0)), zero)
        b = torch.where(k > 0, (1 - fixed + q_k) / p_k, zero).clamp(0.0, 1.0)
        return torch.where(free, torch.maximum(q, b * p), a * p)

    return shaped


def mentored_target(target_probs: torch.Tensor, draft_probs: torch.Tensor, delta: float,
                    iterations: int = 32) -> torch.Tensor:
    """Mentored decoding: the r that maximizes acceptance sum(min(r, q)) with KL(r || p) <= delta.

    The KKT conditions give r(x) = min(max(q(x), b p(x)), a p(x)) with a >= 1 >= b; for a given a,
    normalization fixes b (solved exactly, `_shaper`); KL grows with a, so a bisection on log a
    finds the largest a with KL <= delta (the lower end, always feasible, is returned).
    delta = 0 gives r = p (exact sampling). Shapes (..., V); returns r of the same shape.
    """
    if delta <= 0:
        return target_probs  # exact speculative sampling
    p, q = target_probs.double(), draft_probs.double()
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)  # float32 inputs sum to 1 +- 1e-7
    ratio = (q / p.clamp_min(1e-300)).where(p > 0, torch.zeros_like(q))
    log_lo = torch.zeros(p.shape[:-1] + (1,), dtype=p.dtype, device=p.device)  # a = 1: r = p, KL 0
    log_hi = ratio.amax(-1, keepdim=True).clamp(1.0, 1e300).log()  # beyond the largest q/p nothing changes
    shaped = _shaper(p, q)
    for _ in range(iterations):
        mid = (log_lo + log_hi) / 2
        within = _kl(shaped(mid.exp()), p).unsqueeze(-1) <= delta
        log_lo, log_hi = torch.where(within, mid, log_lo), torch.where(within, log_hi, mid)
    r = shaped(log_lo.exp())
    return (r / r.sum(-1, keepdim=True)).to(target_probs.dtype)


def _binary_kl_bound(p: float, delta: float, rounds: int = 60) -> float:
    """The largest t in [p, 1] with binary KL(t || p) = t log(t/p) + (1-t) log((1-t)/(1-p)) <= delta
    (it grows from 0 at t = p to -log p at t = 1), by bisection to 2^-rounds."""
    if p <= 0.0:
        return 0.0
    if p >= 1.0 or -math.log(p) <= delta:
        return 1.0
    lo, hi = p, 1.0
    for _ in range(rounds):
        t = (lo + hi) / 2
        kl = t * math.log(t / p) + (1 - t) * math.log((1 - t) / (1 - p))
        lo, hi = (t, hi) if kl <= delta else (lo, t)
    return lo


def mentored_copy_target(target_probs: torch.Tensor, tokens: Sequence[int], delta: float) -> torch.Tensor:
    """mentored_target for copy drafts, whose q is a point mass on each drafted token d: the optimum is
    r(d) = t, the largest t with binary KL(t || p(d)) <= delta, and the rest of p scaled by
    (1 - t) / (1 - p(d)). The same r as the general solver's bisection (tests pin it), for a few
    scalar operations a token instead of 32 rounds of vocabulary-wide ones. target_probs (D, V)."""
    if delta <= 0:
        return target_probs  # exact speculative sampling
    p = target_probs.double()
    p = p / p.sum(-1, keepdim=True)
    drafted = (torch.arange(len(tokens)), torch.tensor(list(tokens), dtype=torch.long))
    p_drafted = p[drafted].tolist()
    bounds = [_binary_kl_bound(p_d, delta) for p_d in p_drafted]
    scales = [(1 - t) / (1 - p_d) if p_d < 1 else 1.0 for t, p_d in zip(bounds, p_drafted)]
    r = p * torch.tensor(scales, dtype=p.dtype).unsqueeze(-1)
    r[drafted] = torch.tensor(bounds, dtype=p.dtype)
    return r.to(target_probs.dtype)
