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
