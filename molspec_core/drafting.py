"""Copy drafters: propose continuations of the output as runs of source positions.

A drafter is built per query from its source tokens. `propose(generated, attention_peak)` returns
drafts as lists of source positions (the draft tokens are the source tokens there, which is also
their provenance). `generated` holds the output so far, the pending token included;
`attention_peak` is the source position the model attended most when it produced that token
(None when unknown).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

Draft = list[int]  # source positions


class Drafter(Protocol):
    needs_attention: bool

    def propose(self, generated: Sequence[int], attention_peak: int | None) -> list[Draft]: ...


class NullDrafter:
    """No drafts: plain greedy decoding."""

    needs_attention = False

    def __init__(self, src: Sequence[int], draft_len: int = 0, n_drafts: int = 0):
        pass

    def propose(self, generated: Sequence[int], attention_peak: int | None) -> list[Draft]:
        return []


class WindowDrafter:
    """The paper's drafts (Andronov et al. 2024, section 2.1): fixed windows of the source.

    All stride-1 windows of length draft_len; when there are more than n_drafts of them, n_drafts
    windows with evenly spaced starts. The same drafts are verified at every step.
    """

    needs_attention = False

    def __init__(self, src: Sequence[int], draft_len: int, n_drafts: int):
        starts = list(range(max(1, len(src) - draft_len + 1)))
        if len(starts) > n_drafts:
            step = len(starts) / n_drafts
            starts = sorted({starts[int(i * step)] for i in range(n_drafts)})
        self.drafts = [list(range(s, min(s + draft_len, len(src)))) for s in starts]

    def propose(self, generated: Sequence[int], attention_peak: int | None) -> list[Draft]:
        return self.drafts


class LookupDrafter:
    """Continue the source after the places that match the longest suffix of the output.

    One draft (or a few) instead of the paper's many: the verify call stays small.
    """

    needs_attention = False
    max_suffix = 12  # longer suffixes almost never add information in SMILES

    def __init__(self, src: Sequence[int], draft_len: int, n_drafts: int = 1):
        self.src = list(src)
        self.draft_len, self.n_drafts = draft_len, n_drafts
        # ends[k][ngram] = source positions just after each occurrence of the k-gram
        self.ends: list[dict[tuple[int, ...], list[int]]] = [defaultdict(list) for _ in range(self.max_suffix + 1)]
        for k in range(1, self.max_suffix + 1):
            for i in range(len(self.src) - k + 1):
                self.ends[k][tuple(self.src[i:i + k])].append(i + k)

    def starts(self, generated: Sequence[int]) -> list[int]:
        """Draft starts after the longest suffix of `generated` found in the source (first first)."""
        for k in range(min(self.max_suffix, len(generated)), 0, -1):
            found = self.ends[k].get(tuple(generated[-k:]))
            if found:
                return [s for s in found if s < len(self.src)]
        return []

    def window(self, start: int) -> Draft:
        return list(range(start, min(start + self.draft_len, len(self.src))))

    def propose(self, generated: Sequence[int], attention_peak: int | None) -> list[Draft]:
        return [self.window(s) for s in self.starts(generated)[: self.n_drafts]]


class PointerDrafter(LookupDrafter):
    """Follow the model's own cross-attention to the place in the source it is copying from.

    Among the source places that match the output's longest suffix, take those whose last matched
    token lies nearest the position the model attended when it produced the pending token; with no
    match, draft from just after the attended position.
    """

    needs_attention = True

    def propose(self, generated: Sequence[int], attention_peak: int | None) -> list[Draft]:
        starts = self.starts(generated)
        if attention_peak is None:
            return [self.window(s) for s in starts[: self.n_drafts]]
        if not starts:
            starts = [attention_peak + 1] if attention_peak + 1 < len(self.src) else []
        starts = sorted(starts, key=lambda s: abs(s - 1 - attention_peak))
        return [self.window(s) for s in starts[: self.n_drafts]]


DRAFTERS: dict[str, type] = {"none": NullDrafter, "paper": WindowDrafter, "lookup": LookupDrafter,
                             "pointer": PointerDrafter}


def make_drafter(name: str, src: Sequence[int], draft_len: int, n_drafts: int) -> Drafter:
    if name not in DRAFTERS:
        raise ValueError(f"unknown drafter {name!r}; choose from {sorted(DRAFTERS)}")
    return DRAFTERS[name](src, draft_len, n_drafts)
