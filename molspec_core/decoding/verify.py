"""Model-free acceptance rules: pure tensor functions, tested with hand-made logits."""
from __future__ import annotations

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


def accept_relaxed(draft_tokens: torch.Tensor, log_probs: torch.Tensor, beta: int = 1,
                   tau: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """SpecDec++-style relaxed verification for greedy decoding (Xia et al. 2023), lossy.

    Draft token i passes if it is among the model's top-beta tokens at i and
    log p(top-1) - log p(draft) <= tau; the next token after the accepted run is the argmax there.
    beta=1, tau=0 accepts exactly the argmax: plain greedy. draft_tokens (B, D), log_probs (B, D+1, V).
    """
    depth = draft_tokens.shape[1]
    top = log_probs[:, :depth].max(dim=-1).values
    drafted = log_probs[:, :depth].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
    rank = (log_probs[:, :depth] > drafted.unsqueeze(-1)).sum(dim=-1)  # tokens strictly better
    ok = (rank < beta) & (top - drafted <= tau)
    n_accepted = ok.long().cumprod(dim=-1).sum(dim=-1)
    rows = torch.arange(draft_tokens.shape[0], device=draft_tokens.device)
    return n_accepted, log_probs[rows, n_accepted].argmax(dim=-1)


def _kl(r: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    safe = r > 0
    return torch.where(safe, r * (r.clamp_min(1e-30).log() - p.clamp_min(1e-30).log()), torch.zeros_like(r)).sum(-1)


def mentored_target(target_probs: torch.Tensor, draft_probs: torch.Tensor, delta: float,
                    iterations: int = 40) -> torch.Tensor:
    """Mentored decoding: the r that maximizes acceptance sum(min(r, q)) with KL(r || p) <= delta.

    The KKT conditions give r(x) = min(max(q(x), b p(x)), a p(x)) with a >= 1 >= b; for a given a,
    normalization fixes b (sum r grows with b, found by bisection); KL grows with a, so an outer
    bisection finds the largest a with KL <= delta. delta = 0 gives r = p (exact sampling).
    Shapes (..., V); returns r of the same shape.
    """
    if delta <= 0:
        return target_probs  # exact speculative sampling
    p, q = target_probs.double(), draft_probs.double()
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)  # float32 inputs sum to 1 +- 1e-7

    def shaped(a: torch.Tensor) -> torch.Tensor:
        lo, hi = torch.zeros_like(a), torch.ones_like(a)
        for _ in range(iterations):
            b = (lo + hi) / 2
            total = torch.minimum(torch.maximum(q, b * p), a * p).sum(-1, keepdim=True)
            lo, hi = torch.where(total < 1, b, lo), torch.where(total < 1, hi, b)
        b = (lo + hi) / 2
        return torch.minimum(torch.maximum(q, b * p), a * p)

    ratio = (q / p.clamp_min(1e-30)).where(p > 0, torch.zeros_like(q))
    a_lo = torch.ones(p.shape[:-1] + (1,), dtype=p.dtype, device=p.device)
    a_hi = ratio.amax(-1, keepdim=True).clamp_min(1.0)  # beyond this, raising a changes nothing
    for _ in range(iterations):
        a = (a_lo + a_hi) / 2
        within = _kl(shaped(a), p).unsqueeze(-1) <= delta
        a_lo, a_hi = torch.where(within, a, a_lo), torch.where(within, a_hi, a)
    r = shaped(a_lo)
    return (r / r.sum(-1, keepdim=True)).to(target_probs.dtype)
