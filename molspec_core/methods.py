"""Every decoding method, one row each: the one place the service, bench, CLI, evaluation and app
ask what a method is.

Pure data: this module imports no decoder, no torch and no RDKit, so the CLI's argument parser and
the app's sidebar can read it for free. To add a method, write its decoder (or reuse a family's)
and add its row here.

The default draft shapes below were chosen by interleaved benchmarks on the shipped models; the
figures live in the model cards (models/*/MODEL_CARD.md) and in the JSON that
`python -m molspec_core bench` writes, not here, where they would go stale.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Family = Literal["greedy", "beam", "sbs", "sampling"]
Answers = Literal["one", "many"]
DraftSource = Literal["none", "query", "model"]

# Knobs a method may read. The first three are arguments of Predictor.predict; the others are
# fields of SamplingOptions.
SAMPLING_KNOBS = ("temperature", "top_k", "beta", "tau", "delta", "seed")
KNOBS = ("n_best", "draft_len", "n_drafts") + SAMPLING_KNOBS


# The default sampling temperature. The shipped models had most of their training with label
# smoothing 0.1, which spreads some of each step's probability over the whole vocabulary, and their
# fine-tunes without it have not taken all of that back: at temperature 1 many sampled answers of some
# 50 tokens take a stray token. 0.5 keeps the answers valid while still drawing varied ones (the
# measured sweeps: README, "Python API", sampling methods).
DEFAULT_TEMPERATURE = 0.5


@dataclass(frozen=True)
class SamplingOptions:
    """The knobs of the sampling-loop methods (Predictor.predict's `sampling`)."""

    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = 0  # 0 = no top-k cut
    beta: int = 1  # relaxed: draft must be among the top-beta tokens
    tau: float = 0.0  # relaxed: and within tau nats of the top token
    delta: float = 0.0  # mentored: KL budget per token
    # Draft-model tokens per step, read by the decoding loop. Predictor.predict sets it from its own
    # draft_len (the method's default when None), so that one knob means the same for every method.
    draft_len: int = 8
    seed: int = 0


@dataclass(frozen=True)
class Method:
    name: str
    label: str  # what the app shows
    # The decoding loop that runs it. relaxed runs in the sampling loop, which owns the pluggable
    # acceptance rules, although it samples nothing: `answers` and `reference` say what it is.
    family: Family
    answers: Answers  # "many": n_best ranked answers (beam width, or samples with duplicates merged)
    drafts: DraftSource  # where draft tokens come from: copied out of the query, a draft model, none
    drafter: str  # the copy drafter (drafting.DRAFTERS), "auto" (per device), "model" or "none"
    draft_len: int  # default draft length (0 with no drafts)
    n_drafts: int  # default number of drafts per step
    reference: str  # the standard method its outputs and speed are compared with
    lossless: bool  # returns what its reference returns (sampling: the same distribution)
    knobs: tuple[str, ...]  # the settings it reads, among KNOBS
    benchmark_only: bool = False  # uncached baselines: kept for benchmarks, listed last
    # Default draft length on a CPU, where a verify call costs more with every drafted token (0: draft_len).
    cpu_draft_len: int = 0

    def default_draft_len(self, device_type: str) -> int:
        """The draft length this method decodes with on a device of this type unless one is set."""
        return self.cpu_draft_len if device_type == "cpu" and self.cpu_draft_len else self.draft_len

    @property
    def speculative(self) -> bool:
        return self.drafts != "none"

    @property
    def many(self) -> bool:
        return self.answers == "many"


_COPY = ("n_best", "draft_len", "n_drafts")
# Drafted tokens per copy draft on a CPU, for the one-draft greedy and sampling methods, where a verify
# call costs more with every drafted token: tools/draft_sweep.py and `bench --draft-len` put 2 fastest
# on both GPU-trained models (the figures: the model cards' CPU speed sections).
CPU_COPY_DRAFT_LEN = 2
_SAMPLE = ("temperature", "top_k", "seed")

_ROWS = (
    # The order is the app's list: spec-auto (the fastest exact one-answer method) first, then the
    # standard decoders, their speculative versions (the lossless one before the lossy ones: a standard
    # method's speedup is shown against the first lossless speculative method of its reference),
    # benchmark baselines last.
    Method("spec-auto", "Speculative, auto drafts", "greedy", "one", "query", "auto", 8, 1, "greedy", True,
           ("draft_len", "n_drafts")),
    Method("greedy", "Greedy", "greedy", "one", "none", "none", 0, 0, "greedy", True, ()),
    Method("beam", "Beam search", "beam", "many", "none", "none", 0, 0, "beam", True, ("n_best",)),
    # One lookup or pointer draft: 8 tokens where a call costs about the same for 1 or 9 tokens (GPU),
    # CPU_COPY_DRAFT_LEN on a CPU (below).
    Method("spec-pointer", "Speculative, pointer drafts", "greedy", "one", "query", "pointer", 8, 1, "greedy", True,
           ("draft_len", "n_drafts"), cpu_draft_len=CPU_COPY_DRAFT_LEN),
    Method("spec-lookup", "Speculative, lookup drafts", "greedy", "one", "query", "lookup", 8, 1, "greedy", True,
           ("draft_len", "n_drafts"), cpu_draft_len=CPU_COPY_DRAFT_LEN),
    # The paper's N=25 windows of D=10 (Andronov et al. 2024, section 2.1).
    Method("spec-paper", "Speculative, paper drafts", "greedy", "one", "query", "paper", 10, 25, "greedy", True,
           ("draft_len", "n_drafts")),
    # Speculative beam search: one short pointer draft per hypothesis; lower beams leave their
    # drafts within a few tokens. sbs keeps D=4 because D=3 lost top-3/5 accuracy. On a CPU sbs-exact
    # drafts 1 token: each drafted token costs a CPU call about as much as a fed row's own token (the
    # sweep: the retro card's "Why 1-token drafts for sbs-exact").
    Method("sbs-exact", "Speculative beam, exact", "sbs", "many", "query", "pointer", 2, 1, "beam", True, _COPY,
           cpu_draft_len=1),
    Method("sbs", "Speculative beam (paper SBS, lossy)", "sbs", "many", "query", "pointer", 4, 1, "beam", False,
           _COPY),
    Method("sample", "Sampling", "sampling", "many", "none", "none", 0, 0, "sample", True, ("n_best",) + _SAMPLE),
    Method("spec-sample", "Speculative sampling, copy drafts", "sampling", "many", "query", "pointer", 8, 1,
           "sample", True, ("n_best", "draft_len") + _SAMPLE, cpu_draft_len=CPU_COPY_DRAFT_LEN),
    # Draft-model steps on a CPU: 6, the fastest of 2, 3, 4, 6 and 8 with the draft model of CPU run 80 on the forward
    # quick set (1.52x plain sampling against 1.39x at 2, tools/draft_compare.py; the forward card, "Draft model").
    Method("spec-sample-draft", "Speculative sampling, draft model", "sampling", "many", "model", "model", 8, 1,
           "sample", True, ("n_best", "draft_len") + _SAMPLE, cpu_draft_len=6),
    Method("mentored", "Mentored sampling (lossy)", "sampling", "many", "query", "pointer", 8, 1, "sample", False,
           ("n_best", "draft_len") + _SAMPLE + ("delta",), cpu_draft_len=CPU_COPY_DRAFT_LEN),
    # SpecDec++ relaxed verification of greedy decoding: deterministic, one answer, no temperature.
    Method("relaxed", "Relaxed greedy, SpecDec++ (lossy)", "sampling", "one", "query", "pointer", 8, 1, "greedy",
           False, ("draft_len", "beta", "tau"), cpu_draft_len=CPU_COPY_DRAFT_LEN),
    Method("greedy-uncached", "Greedy, no cache (baseline)", "greedy", "one", "none", "none", 0, 0, "greedy", True,
           (), benchmark_only=True),
    Method("beam-uncached", "Beam search, no cache (baseline)", "beam", "many", "none", "none", 0, 0, "beam", True,
           ("n_best",), benchmark_only=True),
)

METHODS: dict[str, Method] = {row.name: row for row in _ROWS}
# The exact n-best method the app, the round-trip check and the route planner use. sbs-exact returns
# the same n-best lists (tests pin it) but on a CPU it is at best as fast: a CPU call costs about as
# much per fed token as a beam step's, and no drafted token spares a beam step its token (the figures:
# the sbs-exact row above and the retro card). A GPU's speed table may change this choice.
EXACT_NBEST = "beam"
# What the app opens on per task, (method, n_best): both pages open on a ranked list from EXACT_NBEST,
# as other tools do. For forward prediction, beam search names the recorded product first more often
# than spec-auto's one answer and lists alternatives, for some 0.1 s more a query on one CPU thread
# (the forward card, "Why the page opens on beam search"); spec-auto stays a click away.
TASK_DEFAULTS: dict[str, tuple[str, int]] = {"forward": (EXACT_NBEST, 5), "retro": (EXACT_NBEST, 10)}


def method(name: str) -> Method:
    """The row of a method; a ValueError naming the choices for any other name."""
    if not isinstance(name, str) or name not in METHODS:  # ["beam"] was "unhashable type"
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name]


def readers_of(knob: str) -> str:
    """The methods that read `knob` (one of KNOBS), named in the refusal of a setting the chosen method does not read
    (`molspec predict`'s flags, the server's options)."""
    return ", ".join(name for name, row in METHODS.items() if knob in row.knobs)


def unread_knobs(method: str, draft_len: int | None = None, n_drafts: int | None = None,
                 sampling: SamplingOptions | None = None) -> list[str]:
    """The knobs (KNOBS) given for `method` that it does not read: draft_len or n_drafts given (not None), a sampling
    knob set off its default (temperature 0.8 for beam search). Every caller refuses them, naming the methods that
    do read them (readers_of): a setting that played no part would be taken for one that did."""
    given = [knob for knob, value in (("draft_len", draft_len), ("n_drafts", n_drafts)) if value is not None]
    if sampling is not None:
        given += [knob for knob in SAMPLING_KNOBS if getattr(sampling, knob) != getattr(SamplingOptions(), knob)]
    return [knob for knob in given if knob not in METHODS[method].knobs]


def of_family(*families: Family) -> tuple[str, ...]:
    return tuple(name for name, row in METHODS.items() if row.family in families)


def many_answer_methods() -> tuple[str, ...]:
    return tuple(name for name, row in METHODS.items() if row.many)


def speedup_pair(name: str) -> tuple[str, str]:
    """(standard method, speculative method) that show what speculative decoding saves for this
    choice: a speculative method beside its reference; a standard one beside the first lossless
    speculative method measured against it (in table order)."""
    row = method(name)
    if row.speculative:
        return row.reference, name
    partner = next(m.name for m in _ROWS if m.speculative and m.lossless and m.reference == row.reference)
    return row.reference, partner


def same_answers_partner(name: str) -> str | None:
    """The speculative method that returns exactly this standard method's answers (greedy's: spec-auto;
    beam search's: sbs-exact), whose drafts show which tokens of those answers came from the query; None
    for a speculative method itself and for sampling, whose speculative versions draw from the same
    distribution but not the same samples."""
    row = method(name)
    if row.speculative or row.family == "sampling":
        return None
    return speedup_pair(name)[1]


@dataclass(frozen=True)
class Peer:
    """Another engine timed beside ours in `bench --peer` (molspec_core/peers.py): not a method of ours."""

    name: str
    label: str
    compute_type: str  # CTranslate2's: float32 or int8
    beam: bool  # beam search at the bench's width (compared with our beam), else greedy


PEERS: dict[str, Peer] = {peer.name: peer for peer in (
    Peer("ct2-greedy", "CTranslate2 greedy (float32)", "float32", False),
    Peer("ct2-int8-greedy", "CTranslate2 greedy (int8)", "int8", False),
    Peer("ct2-beam", "CTranslate2 beam (float32)", "float32", True),
    Peer("ct2-int8-beam", "CTranslate2 beam (int8)", "int8", True),
)}
