"""What every decoder returns: ranked hypotheses with per-token provenance, and call statistics."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

GENERATED = -1  # provenance of a token the model produced itself (not accepted from a draft)


@dataclass(frozen=True)
class Hypothesis:
    tokens: tuple[int, ...]  # output token ids, without bos/eos
    score: float  # sum of token log-probabilities, eos included when the hypothesis finished
    provenance: tuple[int, ...]  # per token: source position it was copied from, or GENERATED
    finished: bool = True  # False when it hit the length limit before eos


@dataclass
class DecodeStats:
    model_calls: int = 0  # decoder forward passes (the encoder pass is not counted)
    draft_tokens_proposed: int = 0  # draft tokens fed for verification (all branches)
    draft_tokens_accepted: int = 0
    # Calls whose (chosen) draft was cut short by a rejected token. Draft tokens verified in a call
    # are its accepted ones plus that one rejected token, so the per-token acceptance probability of
    # the speculative-sampling analysis is accepted / (accepted + rejections).
    draft_rejections: int = 0
    tokens_generated: int = 0  # output tokens, eos included
    wall_time_s: float = 0.0
    # False for speculative beam search: its accepted tokens are the best answer's copied ones, counted once the
    # search ends, and no rejection is recorded, so there is no acceptance rate to give (it read 1.0)
    rejections_recorded: bool = True

    def record_call(self, proposed: int = 0, accepted: int = 0, rejected: bool = False, emitted: int = 1) -> None:
        """One decoder call for this output: draft tokens fed, how many were accepted, whether the
        chosen draft was cut short by a rejected token, and the output tokens the call produced."""
        self.model_calls += 1
        self.draft_tokens_proposed += proposed
        self.draft_tokens_accepted += accepted
        self.draft_rejections += int(rejected)
        self.tokens_generated += emitted

    def add(self, other: "DecodeStats") -> None:
        """Add another decode's counts and time to these (several samples of one query)."""
        for f in fields(self):
            if f.name == "rejections_recorded":  # a rate only where every decode added recorded them
                self.rejections_recorded = self.rejections_recorded and other.rejections_recorded
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def accepted_per_call(self) -> float:
        return self.draft_tokens_accepted / self.model_calls if self.model_calls else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Share of verified draft tokens that were accepted (tokens after a rejection are not verified); None where
        no draft token was verified (a method without drafts) or rejections are not recorded (rejections_recorded)."""
        verified = self.draft_tokens_accepted + self.draft_rejections
        return self.draft_tokens_accepted / verified if verified and self.rejections_recorded else None

    @property
    def tokens_per_call(self) -> float:
        return self.tokens_generated / self.model_calls if self.model_calls else 0.0


@dataclass
class DecodeResult:
    hypotheses: list[Hypothesis]  # best first
    stats: DecodeStats = field(default_factory=DecodeStats)


def longest_answer_tokens(hypotheses: Sequence[Hypothesis]) -> int:
    """An n-best method's tokens_generated: the longest answer's output tokens, eos included where it ended (not
    every beam's token at every step), so that tokens per call reads alike for beam search, speculative beam
    search and the CTranslate2 peer."""
    return max((len(h.tokens) + h.finished for h in hypotheses), default=0)
