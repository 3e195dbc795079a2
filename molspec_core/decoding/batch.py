"""Source batching shared by every decoder."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..tokenizer import PAD_ID


def pad_sources(sources: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> torch.Tensor:
    """List of token-id lists -> (B, S) int64 padded with PAD_ID."""
    width = max(len(s) for s in sources)
    src = torch.full((len(sources), width), PAD_ID, dtype=torch.long)
    for i, s in enumerate(sources):
        src[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return src.to(device)


def target_budget(src_len: int, max_positions: int) -> int:
    """Longest output we decode for a source: reactions rarely double in length; cap at positions."""
    return min(max_positions - 1, 2 * src_len + 50)
