"""Oracle bounds for copy drafters: tokens gained per model call if the model emitted the reference.

No model is called: at each step the drafter proposes, the longest draft prefix that equals the
reference continuation is accepted, plus one token. `best-window` is the ideal single draft (the
source window that matches the reference continuation longest): the ceiling a pointer drafter
that always looked at the right place would reach. DESIGN.md lists these for the bench sets.
"""
from __future__ import annotations

from collections.abc import Sequence

from .drafting import make_drafter
from .tokenizer import BOS_ID, EOS_ID


def _match(src: Sequence[int], start: int, ref: Sequence[int], at: int, limit: int) -> int:
    n = 0
    while n < limit and start + n < len(src) and at + n < len(ref) and src[start + n] == ref[at + n]:
        n += 1
    return n


def oracle_calls(src: Sequence[int], ref: Sequence[int], drafter: str, draft_len: int, n_drafts: int) -> int:
    """Model calls to emit ref (+eos) with this drafter if the model always agreed with ref."""
    target = list(ref) + [EOS_ID]
    at, calls = 0, 0
    source = make_drafter(drafter, src, draft_len, n_drafts) if drafter != "best-window" else None
    while at < len(target):
        if source is None:
            accepted = max((_match(src, s, target, at, draft_len) for s in range(len(src))), default=0)
        else:
            drafts = source.propose([BOS_ID] + target[:at], None)
            accepted = max((_match(src, d[0], target, at, len(d)) for d in drafts), default=0)
        at += accepted + 1
        calls += 1
    return calls


def oracle_tokens_per_call(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], drafter: str,
                           draft_len: int, n_drafts: int) -> float:
    tokens = sum(len(ref) + 1 for _, ref in pairs)
    calls = sum(oracle_calls(src, ref, drafter, draft_len, n_drafts) for src, ref in pairs)
    return tokens / max(calls, 1)
