"""Calibrated confidence: the chance that an answer is right, given its score.

A model's raw probability of an answer (exp of its summed log-probs) says little about how often such
answers are right: a correct reactant set may get a few percent. So each answer's score is mapped to
the share of right answers among validation answers with similar scores, by isotonic regression
(pool adjacent violators: a non-decreasing step function of the score). It is fitted on the first
part of the validation split and judged on the rest (reliability bins and expected calibration error,
ECE), never on test. The fit lives in the model folder as calibration.json, with a fingerprint of the
weights it was fitted for: a calibration whose weights were replaced is not used. Answers read in N
writings of the query (Predictor.predict's augment) have pooled scores of another kind; their fit is
calibration.augment<N>.json (`file_name`), which also records the pooling rule (service.POOL_POWER) it
was fitted under: one fitted under another rule is not used either.

A fit holds for the answers it was fitted on: beam search's n-best lists, or greedy decoding's one
answer (`kind_of`). Their scores map to right answers differently, most of all when pooled: a greedy
answer that some writings did not give scores 0 there, where beam search's lists usually hold it lower
down (session 43: the beam fit of the forward model's pooled answers judged greedy's with an ECE of
0.105, its answers a fifth less sure than they were right). So each kind has its own files
(`file_name`), and sampling and lossy methods, whose answers no fit was made for, get none.

A score also maps to right answers differently at the top of a list than below it: one map for all answers
made the forward model's first answers a little too unsure and its second ones too sure (session 50, beam 5 in
5 writings: rank 1 said 0.755 where 0.767 were right, rank 2 0.088 for 0.062), and half its lists added up to
more than 100%. So a fit may hold two maps: one for the first valid answer in the model's order, one for the
rest (`Calibration.confidence`'s rank), where there are enough of the rest (MIN_REST) and two maps predict
held-out fitting queries better than one (second_map_pays; from one writing they did not). Files from
before hold one map, used for every rank.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import json
import logging
import math
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .methods import method as method_row
from .words import part_of

if TYPE_CHECKING:  # the service loads a model's calibration, so this module cannot import it at run time
    from .service import Predictor

log = logging.getLogger(__name__)
FILE = "calibration.json"
FIT_SHARE = 2 / 3  # of the validation queries fit the map; the rest judge it
N_BINS = 10
MIN_REST = 100  # fitted answers below rank 1 needed for a map of their own; with fewer, one map serves all
FOLDS = 5  # of the fitting queries, to choose between one map and two (second_map_pays)


@dataclass(frozen=True)
class Calibration:
    fingerprint: str  # of the weights it was fitted for (weights_fingerprint)
    method: str
    n_best: int
    n_fit: int  # queries that fitted the map
    n_check: int  # queries that judged it
    edges: tuple[float, ...]  # step starts: scores from edges[i] up map to values[i]
    values: tuple[float, ...]
    ece: float  # expected calibration error of the confidence on the check queries
    ece_raw: float  # the same for the raw probability exp(score)
    reliability: tuple[tuple[float, float, int], ...]  # per bin: (mean confidence, share right, answers)
    augment: int = 1  # writings of each query read (1: the query alone); files from before it hold 1
    pool_power: float = 1.0  # the pooling rule of those writings (service.POOL_POWER); before it: 1, the mean
    # The map for answers below the first (rank 2 on); empty: edges/values serve every rank (files from before it).
    rest_edges: tuple[float, ...] = ()
    rest_values: tuple[float, ...] = ()
    ece_by_rank: tuple[float | None, float | None] = (None, None)  # ECE of first answers and of the rest, checked
    # What identifies the queries that judged it (evaluate.queries_digest of theirs and their answers), so that judge
    # re-judges it on those alone; "" in files from before it, which judge tells by their count only.
    check_sha256: str = ""
    # What it was made from (cmd_calibrate), which --judge asks for again: the validation files' absolute paths and
    # --limit; empty in files from before it (and from callers of fit that name no files).
    src: str = ""
    tgt: str = ""
    limit: int = 0
    # Of the n_fit and the n_check queries, those whose answers fitted and judged it (answered): a refused query, one
    # whose target RDKit cannot read and one with no valid answer give none (collect). None in files from before them.
    n_fit_answered: int | None = None
    n_check_answered: int | None = None

    @property
    def fitted_on(self) -> int:
        """The queries whose answers fitted the map (n_fit in files from before the count was kept)."""
        return self.n_fit if self.n_fit_answered is None else self.n_fit_answered

    @property
    def judged_on(self) -> int:
        """The queries whose answers judged it (n_check in files from before the count was kept)."""
        return self.n_check if self.n_check_answered is None else self.n_check_answered

    def confidence(self, score: float, rank: int = 1) -> float:
        """The calibrated chance that an answer with this summed log-prob is right, where `rank` is its place
        among the valid answers to its query in the model's order (1: the first; QueryResult.in_model_order)."""
        edges, values = ((self.rest_edges, self.rest_values) if rank > 1 and self.rest_edges
                         else (self.edges, self.values))
        i = bisect.bisect_right(edges, score) - 1
        return values[max(i, 0)]


def isotonic_steps(scores: Sequence[float], right: Sequence[bool], shrink: bool = False
                   ) -> tuple[list[float], list[float]]:
    """(edges, values) of the non-decreasing step function closest in squared error to `right` (as 0/1)
    over `scores`: pool adjacent violators, with tied scores pooled first. Only the top step can be all
    right and only the bottom one all wrong (equal shares pool). With `shrink`, such a step says
    (answers + 1) / (answers + 2) or 1 / (answers + 2) (the rule of succession) instead of 100% or 0%,
    kept within its neighbour's value: a top step of 2 validation answers, both right, would otherwise
    show a chemist 100%. The other steps keep their share: shrinking every step, or raising the ones
    above a shrunk bottom step, cost calibration error on held-out answers (retro 0.010 -> 0.020)."""
    if not scores:
        raise ValueError("calibration needs at least one answer")
    tied: dict[float, list[float]] = {}  # score -> [sum right, count]: one score, one value
    for score, hit in zip(scores, right):
        group = tied.setdefault(score, [0.0, 0.0])
        group[0] += hit
        group[1] += 1
    blocks: list[list[float]] = []  # [start score, sum right, count]
    for score in sorted(tied):
        blocks.append([score, *tied[score]])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            start, total, count = blocks.pop(-2)
            blocks[-1] = [start, total + blocks[-1][1], count + blocks[-1][2]]
    values = [b[1] / b[2] for b in blocks]
    if shrink and values[-1] == 1.0:
        values[-1] = max((blocks[-1][2] + 1) / (blocks[-1][2] + 2), values[-2] if len(values) > 1 else 0.0)
    if shrink and values[0] == 0.0:
        values[0] = min(1 / (blocks[0][2] + 2), values[1] if len(values) > 1 else 1.0)
    return [b[0] for b in blocks], values


def reliability(confidences: Sequence[float], right: Sequence[bool], n_bins: int = N_BINS
                ) -> tuple[float, list[tuple[float, float, int]]]:
    """(ECE, bins): answers binned by confidence in equal-width bins; per non-empty bin its mean
    confidence, its share of right answers and its size. ECE weighs each bin's gap by its size."""
    bins: list[list[float]] = [[0.0, 0.0, 0] for _ in range(n_bins)]
    for confidence, hit in zip(confidences, right):
        b = bins[min(int(confidence * n_bins), n_bins - 1)]
        b[0] += confidence
        b[1] += hit
        b[2] += 1
    n = max(len(confidences), 1)
    table = [(total / count, hits / count, int(count)) for total, hits, count in bins if count]
    return sum(count / n * abs(mean - share) for mean, share, count in table), table


def weights_fingerprint(folder: str | Path) -> str:
    """sha256 of the model's weight files, in name order (the vocabulary and config cannot change
    without changing the weights' shapes or the answers' tokens, and are checked at load). Hashed once
    while the files keep their sizes and modification times: a model has up to four fits to check (kinds
    times writings), and the Models page checks them all on every rerun."""
    stats = [(path, path.stat()) for path in sorted(Path(folder).glob("*.safetensors"))]
    return _fingerprint(tuple((str(path), stat.st_size, stat.st_mtime_ns) for path, stat in stats))


@functools.lru_cache(maxsize=16)
def _fingerprint(files: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in files:
        path = Path(name)
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


KINDS = ("greedy", "beam")  # the answers a fit is made for: greedy's one answer, beam search's n-best lists


def kind_of(method: str, n_best: int | None = None) -> str | None:
    """The answers a fit made with `method` (giving `n_best` answers; None: any number) holds for, and so the
    methods it applies to: "beam" (exact beam search's n-best lists: beam, sbs-exact and the uncached baseline) or
    "greedy" (greedy's one answer: greedy and the exact speculative methods). None for sampling and lossy methods:
    no fit is made for their answers. A beam of width 1 writes greedy's one answer (the same answers and scores on
    500 test queries of each task, 5 writings), so greedy's fit holds for it: beam's, made on lists of 5 or 10,
    stated them far less sure than they were (session 80, sidebar width 1: ECE 0.101 forward, 0.180 retro, against
    0.031 and 0.046 with greedy's)."""
    row = method_row(method)
    kind = row.reference if row.lossless and row.reference in KINDS else None
    return "greedy" if kind == "beam" and n_best == 1 else kind


def require_kind(method: str, n_best: int | None = None) -> str:
    """kind_of(method, n_best), or a ValueError saying which methods a calibration can be fitted with."""
    kind = kind_of(method, n_best)
    if kind is None:
        raise ValueError(f"{method}'s answers are sampled or lossy, so no calibration is fitted for them; fit one "
                         "with beam (beam search's answers) or greedy (greedy's, which spec-auto gives faster)")
    return kind


def file_name(augment: int = 1, kind: str = "beam") -> str:
    """The calibration file of `kind` answers read in `augment` writings of each query (beam search's keep
    the names they had before kinds: calibration.json, calibration.augment<N>.json)."""
    stem = FILE.removesuffix(".json") + ("" if kind == "beam" else f".{kind}")
    return f"{stem}.json" if augment == 1 else f"{stem}.augment{augment}.json"


def collect(predictor: Predictor, sources: Sequence[str], targets: Sequence[str], method: str, n_best: int,
            batch_size: int | None = None, progress: bool = True, augment: int = 1,
            time_limit_s: float | None = None) -> list[list[tuple[float, bool]]]:
    """Per query, (score, right) of each valid answer in the model's order, as the app lists them (a repeat
    folded into its first spelling: service.fold_repeats); a refused query gives [], as does one stopped at its time
    limit (its answers, some unfinished, are no list the model gave: evaluate counts it refused too), and one whose
    target RDKit cannot read (whether its answers are right is not known: fitted as wrong, they made every confidence
    lower), each counted in a warning; a ValueError where no target can be read. batch_size and time_limit_s (per
    query) None: the service's defaults. Stopped part way (Ctrl-C, SIGTERM, a failure), what it raises carries the
    answers of the first queries decoded before the stop (a Ctrl-C or SIGTERM ends the batch being decoded and keeps
    those done: evaluate.predict_window), as its `collected` (fit_collected fits them)."""
    from .evaluate import hits, unreadable_targets, window_results
    from .known import read_known
    from .service import DEFAULT_BATCH_SIZE, DEFAULT_TIME_LIMIT_S, windows

    batch_size = batch_size or DEFAULT_BATCH_SIZE
    time_limit_s = time_limit_s or DEFAULT_TIME_LIMIT_S
    unreadable = unreadable_targets(targets)
    if unreadable:
        one = unreadable == 1
        log.warning("%s %s RDKit cannot read: %s left out (whether %s right is not known)",
                    part_of(unreadable, len(targets), "target"), "is a SMILES" if one else "are SMILES",
                    "its query is" if one else "their queries are", "its answers are" if one else "their answers are")

    answers: list[list[tuple[float, bool]]] = []
    refused: list[tuple[int, str]] = []  # each refused query's place (1-based) and why
    slow: list[int] = []  # the place of each query the time limit stopped (QueryResult.timed_out): no refusal
    done = 0  # the first queries done
    try:
        for window in windows(len(sources), batch_size, "calibrate", progress, augment):  # batched by length
            results, stop = window_results(predictor, list(sources[window]), method=method, n_best=n_best,
                                           batch_size=batch_size, augment=augment, time_limit_s=time_limit_s)
            for number, result, target in zip(range(window.start + 1, window.stop + 1), results, targets[window]):
                if result.timed_out:
                    slow.append(number)
                elif not result.ok:
                    refused.append((number, result.error or ""))
                # Only valid answers get a confidence, so only they fit it (an invalid one is never right).
                ordered = [p for p in result.in_model_order() if p.valid] if result.ok and read_known(target) else []
                answers.append(list(zip([p.score for p in ordered], hits([p.smiles for p in ordered], target))))
            done = window.start + len(results)
            if stop is not None:
                raise stop
    except BaseException as stopped:  # minutes of decoding are not lost with it (the caller fits them: fit_collected)
        stopped.collected = answers[:done]
        raise
    if refused:  # a fit without them says so
        one = len(refused) == 1
        log.warning("%s %s refused: %s fits or judges (%squery %d of those decoded: %s)",
                    part_of(len(refused), len(sources), "query", "queries"), "was" if one else "were",
                    "none of its answers" if one else "no answer of theirs", "" if one else "the first, ", *refused[0])
    if slow:  # the slowest queries: told apart from those refused, which a user fixes otherwise
        one = len(slow) == 1
        log.warning("%s %s stopped by the time limit (%g s a query) before %s search ended: %s fits or judges "
                    "(%squery %d of those decoded); a longer time limit decodes %s whole",
                    part_of(len(slow), len(sources), "query", "queries"), "was" if one else "were", time_limit_s,
                    "its" if one else "their", "none of its answers" if one else "no answer of theirs",
                    "" if one else "the first, ", slow[0], "it" if one else "them")
    return answers


def fit(predictor: Predictor, sources: Sequence[str], targets: Sequence[str], method: str = "beam",
        n_best: int = 5, batch_size: int | None = None, progress: bool = True, augment: int = 1) -> Calibration:
    """Fit on the first FIT_SHARE of the queries, judge on the rest (each read in `augment` writings)."""
    return refit(predictor, sources, targets, method, n_best, batch_size, progress, augment)[0]


def refit(predictor: Predictor, sources: Sequence[str], targets: Sequence[str], method: str = "beam",
          n_best: int = 5, batch_size: int | None = None, progress: bool = True, augment: int = 1,
          earlier: Calibration | None = None, time_limit_s: float | None = None) -> tuple[Calibration, float | None]:
    """fit, and the expected calibration error of `earlier` (the fit it would replace) on the new fit's check
    answers, None without one: the two judged on the same answers, where each fit's own ece was judged on its
    own check queries, which may be other ones or fewer. time_limit_s: collect's."""
    require_pairs(sources, targets, "calibration")
    require_kind(method)
    # those loaded and decoded with (fit_collected): Predictor.weights, taken as they load; a predictor built by hand
    # has none, and its folder's are hashed
    weights = predictor.weights or weights_fingerprint(predictor.path)
    answers = collect(predictor, sources, targets, method, n_best, batch_size, progress, augment, time_limit_s)
    return refit_collected(weights, sources, targets, answers, method, n_best, augment, earlier)


def refit_collected(weights: str, sources: Sequence[str], targets: Sequence[str],
                    answers: Sequence[Sequence[tuple[float, bool]]], method: str, n_best: int, augment: int = 1,
                    earlier: Calibration | None = None) -> tuple[Calibration, float | None]:
    """refit's fit and judgement of `earlier`, of answers collected for every query (collect)."""
    fitted = fit_collected(weights, sources, targets, answers, method, n_best, augment)
    return fitted, ece_on(earlier, answers[fitted.n_fit:]) if earlier is not None else None


def fit_collected(weights: str, sources: Sequence[str], targets: Sequence[str],
                  answers: Sequence[Sequence[tuple[float, bool]]], method: str, n_best: int, augment: int = 1
                  ) -> Calibration:
    """The fit of the answers collected for the first len(answers) queries (all of them, or those decoded before a
    stop: collect's `collected`), as a run on those queries alone makes it, and judge finds its check queries again.
    `weights`: the fingerprint (weights_fingerprint) of the weights the answers were decoded with, taken before the
    decoding: hashed once it had ended, a training run's export/, rewritten every few minutes, gave the fit the
    fingerprint of other weights, which then used it."""
    from .evaluate import queries_digest

    require_pairs(sources[:len(answers)], targets[:len(answers)], "calibration")
    fitted = fit_answers(answers, weights, method, n_best, augment)
    checks = slice(fitted.n_fit, len(answers))
    return dataclasses.replace(fitted, check_sha256=queries_digest(list(sources[checks]), list(targets[checks])))


def ece_on(calibration: Calibration, answers: Sequence[Sequence[tuple[float, bool]]]) -> float:
    """A fit's expected calibration error on collected answers (collect: per query, (score, right) in the model's
    order), each answer given the confidence of its rank."""
    flat = [(rank, a) for query in answers for rank, a in enumerate(query, start=1)]
    if not flat:
        raise ValueError("the model gave no answer to judge a calibration with")
    return reliability([calibration.confidence(s, rank) for rank, (s, _) in flat], [r for _, (_, r) in flat])[0]


def fit_answers(answers: Sequence[Sequence[tuple[float, bool]]], fingerprint: str, method: str, n_best: int,
                augment: int = 1) -> Calibration:
    """The fit of collected answers (collect: per query, (score, right) in the model's order): the first
    FIT_SHARE of the queries fit it, the rest judge it. Answers below the first get a map of their own where
    it pays (second_map_pays)."""
    n_fit = check_share(len(answers))
    fitting = answers[:n_fit]
    checked = [(rank, a) for query in answers[n_fit:] for rank, a in enumerate(query, start=1)]
    if not any(fitting) or not checked:
        raise ValueError("the model gave no answer to fit or to judge a calibration with")
    if not any(right for query in fitting for _, right in query):  # every step would read (near) 0%
        raise ValueError(f"none of the answers to the {n_fit} fitting queries is right, so a fit would call every "
                         "answer wrong: check that --tgt holds the answers of --src, line by line, and that the "
                         "model reads these queries")
    from .service import POOL_POWER

    edges, values, rest_edges, rest_values = maps(fitting, second_map_pays(fitting))
    draft = Calibration(fingerprint, method, n_best, n_fit, len(answers) - n_fit,
                        tuple(edges), tuple(values), 0.0, 0.0, (), augment, POOL_POWER if augment > 1 else 1.0,
                        tuple(rest_edges), tuple(rest_values), n_fit_answered=answered(fitting),
                        n_check_answered=answered(answers[n_fit:]))
    confidences = [draft.confidence(s, rank) for rank, (s, _) in checked]
    right = [r for _, (_, r) in checked]
    ece, table = reliability(confidences, right)
    ece_raw, _ = reliability([math.exp(s) for _, (s, _) in checked], right)
    firsts = [(c, r) for c, r, (rank, _) in zip(confidences, right, checked) if rank == 1]
    below = [(c, r) for c, r, (rank, _) in zip(confidences, right, checked) if rank > 1]
    by_rank = tuple(reliability([c for c, _ in rows], [r for _, r in rows])[0] if rows else None
                    for rows in (firsts, below))
    return Calibration(**{**asdict(draft), "ece": ece, "ece_raw": ece_raw, "ece_by_rank": by_rank,
                          "reliability": tuple(tuple(row) for row in table)})


def answered(answers: Sequence[Sequence[tuple[float, bool]]]) -> int:
    """Of collected answers (collect: per query), the queries that gave any: those a fit rests on."""
    return sum(bool(query) for query in answers)


def steps(answers: Sequence[tuple[float, bool]]) -> tuple[list[float], list[float]]:
    """The shrunk isotonic map (isotonic_steps) of (score, right) answers."""
    return isotonic_steps([s for s, _ in answers], [r for _, r in answers], shrink=True)


Maps = tuple[list[float], list[float], list[float], list[float]]  # edges, values, rest_edges, rest_values


def maps(queries: Sequence[Sequence[tuple[float, bool]]], two: bool) -> Maps:
    """One map for every answer of these queries, or (`two`, where any answer lies below a first one) one
    for first answers and one for the rest."""
    rest = [a for query in queries for a in query[1:]]
    if not two or not rest:
        return *steps([a for query in queries for a in query]), [], []
    return *steps([query[0] for query in queries if query]), *steps(rest)


def second_map_pays(queries: Sequence[Sequence[tuple[float, bool]]]) -> bool:
    """Whether answers below the first should get a map of their own: at least MIN_REST of them, and two
    maps predict held-out queries better than one (lower Brier score, FOLDS-fold cross-validation over these
    queries, never the ones that judge the fit). What it chose for the shipped fits, and why: the cards'
    calibration sections."""
    if sum(max(len(query) - 1, 0) for query in queries) < MIN_REST:
        return False
    brier = {False: 0.0, True: 0.0}
    for fold in range(FOLDS):
        fitting = [q for i, q in enumerate(queries) if i % FOLDS != fold]
        held = [(rank, a) for i, q in enumerate(queries) if i % FOLDS == fold for rank, a in enumerate(q, start=1)]
        if not any(fitting) or not held:
            return False
        for two in brier:
            edges, values, rest_edges, rest_values = maps(fitting, two)
            fitted = Calibration("", "", 0, 0, 0, tuple(edges), tuple(values), 0.0, 0.0, (),
                                 rest_edges=tuple(rest_edges), rest_values=tuple(rest_values))
            brier[two] += sum((fitted.confidence(s, rank) - r) ** 2 for rank, (s, r) in held)
    return brier[True] < brier[False]


def require_pairs(sources: Sequence[str], targets: Sequence[str], what: str) -> None:
    """A ValueError unless every query has its target and there are enough to fit on and judge with."""
    if len(sources) != len(targets) or len(sources) < 3:
        raise ValueError(f"{what} needs at least 3 queries with targets; got {len(sources)} queries and "
                         f"{len(targets)} targets")


def check_share(n: int) -> int:
    """Of n queries, how many fit the map (the first ones; fit); the rest judge it."""
    return max(1, min(n - 1, round(n * FIT_SHARE)))


def judge(predictor: Predictor, sources: Sequence[str], targets: Sequence[str], method: str, n_best: int,
          batch_size: int | None = None, progress: bool = True, augment: int = 1,
          time_limit_s: float | None = None) -> tuple[Calibration, float, int]:
    """The model's saved fit for these answers, judged again on the queries that judged it when it was made
    (the last share of the same validation files and limit), decoded by this predictor: another dtype or
    engine, say. (fit, its expected calibration error on these answers, queries whose answers judged it: answered);
    nothing is written."""
    require_pairs(sources, targets, "judging a calibration")
    kind = require_kind(method, n_best)
    fitted = predictor.calibration_for(method, augment, n_best)
    if fitted is None:
        writings = f", {augment} writings" if augment > 1 else ""
        raise ValueError(f"{predictor.path} has no calibration for {kind} answers{writings} to judge "
                         f"({file_name(augment, kind)}, fitted for these weights)")
    from .evaluate import queries_digest

    n_fit = check_share(len(sources))
    made_with = "judge it on the files and --limit it was made with" + (
        f": --src {fitted.src} --tgt {fitted.tgt} --limit {fitted.limit}" if fitted.src else "")
    if len(sources) - n_fit != fitted.n_check:  # other queries: an error not comparable with the fit's own
        raise ValueError(f"the saved fit was judged on {fitted.n_check} queries, the last of those it was made from; "
                         f"these {len(sources)} give {len(sources) - n_fit}: {made_with}")
    if fitted.check_sha256 and queries_digest(list(sources[n_fit:]), list(targets[n_fit:])) != fitted.check_sha256:
        raise ValueError(f"these are not the {fitted.n_check} queries the saved fit was judged on (their SMILES or "
                         f"answers differ): {made_with}")
    answers = collect(predictor, sources[n_fit:], targets[n_fit:], method, n_best, batch_size, progress, augment,
                      time_limit_s)
    return fitted, ece_on(fitted, answers), answered(answers)


def path_of(folder: str | Path, augment: int, method: str, n_best: int | None = None) -> Path:
    """Where a model folder keeps its fit for `method`'s `n_best` answers read in `augment` writings (file_name)."""
    return Path(folder) / file_name(augment, require_kind(method, n_best))


def backup_of(path: Path) -> Path:
    """Where save keeps the fit it replaces: beside it, '.bak' added (calibration.json.bak). One backup: the fit
    before the last one saved; load never reads it. The CLI keeps a report or an output it replaces so too: a name
    near the file system's limit is cut to fit (io.fitted_name), or replacing predict --output <83 Japanese
    characters>.csv failed, once decoded, with 'File name too long', and the new results were not written."""
    from .io import fitted_name

    return path.with_name(fitted_name(path.name, ".bak"))


def refused_of(path: Path) -> Path:
    """Where calibrate keeps a new fit it refused as worse than the one at `path` (calibration.json.refused):
    minutes of decoding, which renaming it over `path` takes without decoding again; load never reads it."""
    return path.with_name(path.name + ".refused")


def partial_of(path: Path) -> Path:
    """Where calibrate keeps the fit of the queries decoded before it was stopped (calibration.json.partial), not in
    use (a stop asks for no fit), and not lost; load never reads it."""
    return path.with_name(path.name + ".partial")


def keep_refused(calibration: Calibration, path: Path) -> Path:
    """Write a fit refused in favour of the one at `path` beside it (refused_of), not over it."""
    return _write(calibration, refused_of(path))


def keep_partial(calibration: Calibration, path: Path) -> Path:
    """Write the fit of a stopped run beside the fit file at `path` (partial_of), not over it."""
    return _write(calibration, partial_of(path))


def _write(calibration: Calibration, path: Path) -> Path:
    from .io import write_text_file

    write_text_file(path, json.dumps(asdict(calibration), indent=1) + "\n")  # a failed write keeps the old file
    return path


def save(calibration: Calibration, folder: str | Path) -> Path:
    """Write the fit into the model folder, the fit it replaces (if any) kept first at backup_of(path): a fit is
    minutes of decoding, and a user's model has no other copy of it."""
    path = path_of(folder, calibration.augment, calibration.method, calibration.n_best)
    if path.is_file():  # copied as bytes, with its time: a damaged fit is kept as it was, and when it was made
        shutil.copy2(path, backup_of(path))
    _write(calibration, path)
    return path


def check_maps(calibration: Calibration) -> None:
    """A ValueError naming what is wrong with a fit read back from a file (hand-edited, damaged), unless its method
    is known and each map is what isotonic_steps makes: scores that rise, chances within [0, 1] that never fall, as
    many of one as of the other. Any other map would show a chemist 170% or "nan%", stop a query at an index out of
    range, or make a higher score less sure."""
    method_row(calibration.method)
    for name, edges, values in (("", calibration.edges, calibration.values),
                                ("rest_", calibration.rest_edges, calibration.rest_values)):
        if name and not edges and not values:  # one map for every rank (rest_ empty)
            continue
        if not edges or len(edges) != len(values):
            raise ValueError(f"{name}edges and {name}values need as many steps as each other, at least one: "
                             f"{len(edges)} and {len(values)}")
        if not all(isinstance(x, int | float) for x in (*edges, *values)):
            raise ValueError(f"{name}edges and {name}values must be numbers")
        if any(math.isnan(edge) for edge in edges) or any(a >= b for a, b in zip(edges, edges[1:])):
            raise ValueError(f"{name}edges must rise from step to step")
        if not all(0.0 <= value <= 1.0 for value in values) or any(a > b for a, b in zip(values, values[1:])):
            raise ValueError(f"{name}values must be chances between 0 and 1 that never fall from step to step")


def _is_chance(value: object) -> bool:
    """A number within [0, 1] (not NaN, not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value <= 1.0


def is_count(value: object) -> bool:
    """A whole number from 1 (not a bool): what a fit's counts and an evaluate report's are."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_figures(calibration: Calibration) -> None:
    """A ValueError naming what is wrong with the figures a fit read back from a file reports of itself (the Models
    page shows them): counts that are whole numbers, errors and reliability points that are chances, each
    reliability bin (mean confidence, share right, answers). A string there, or a bin of two, stopped the page."""
    for name in ("n_best", "n_fit", "n_check", "augment", "n_fit_answered", "n_check_answered"):
        value = getattr(calibration, name)
        if not is_count(value) and not (name.endswith("_answered") and value is None):
            raise ValueError(f"{name} must be a whole number from 1, not {value!r:.40}")
    for answered_name, of_name in (("n_fit_answered", "n_fit"), ("n_check_answered", "n_check")):
        if (getattr(calibration, answered_name) or 0) > getattr(calibration, of_name):
            raise ValueError(f"{answered_name} must be at most {of_name}, the queries it counts among")
    for name in ("ece", "ece_raw"):
        if not _is_chance(getattr(calibration, name)):
            raise ValueError(f"{name} must be an error between 0 and 1, not {getattr(calibration, name)!r:.40}")
    if len(calibration.ece_by_rank) != 2 or not all(e is None or _is_chance(e) for e in calibration.ece_by_rank):
        raise ValueError(f"ece_by_rank must be two errors between 0 and 1 (or null), not "
                         f"{calibration.ece_by_rank!r:.60}")
    for row in calibration.reliability:
        if len(row) != 3 or not (_is_chance(row[0]) and _is_chance(row[1]) and is_count(row[2])):
            raise ValueError(f"reliability rows must be (mean confidence, share right, answers), not {row!r:.60}")


def read_fit_file(path: Path) -> object:
    """The JSON a fit file holds, read as bytes, as checkpoint.read_json reads a model folder's: json takes UTF-8 with
    or without a byte-order mark so (read as text, a fit saved by an editor that writes one, such as Windows Notepad,
    was set aside and the answers lost their confidence). A ValueError for a file that is not JSON, one nested too
    deep (json's RecursionError, which stopped the query) among them; OSError where it cannot be read."""
    data = path.read_bytes()
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("its JSON is nested too deep") from None


def recorded_fingerprint(path: Path) -> str | None:
    """The weights' fingerprint (weights_fingerprint) the fit file at `path` records, or None where it cannot be read
    as one: the Models page tells a fit for other weights from a file it cannot read by it."""
    try:
        data = read_fit_file(path)
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    fingerprint = data.get("fingerprint") if isinstance(data, dict) else None
    return fingerprint if isinstance(fingerprint, str) else None


TUPLES = ("edges", "values", "rest_edges", "rest_values", "ece_by_rank")  # JSON lists read back as the tuples they were


def load(folder: str | Path, augment: int = 1, kind: str = "beam") -> Calibration | None:
    """The model folder's calibration for `kind` answers (kind_of) read in `augment` writings, or None when it
    has none, or it was fitted for other weights, to other answers or (augment > 1) under another pooling rule."""
    from .service import POOL_POWER

    path = Path(folder) / file_name(augment, kind)
    if not path.exists():
        return None
    if not path.is_file():  # a folder of that name was passed over unsaid, as if no fit had been made (a pipe: never
        # read, it would wait for a writer)
        log.warning("%s is not a file, so not a calibration; answers get no calibrated confidence", path)
        return None
    try:  # an optional file: a damaged one costs the answers their confidence, not the queries their answers
        data = read_fit_file(path)
        calibration = Calibration(**{**data, **{key: tuple(data[key]) for key in TUPLES if key in data},
                                     "reliability": tuple(tuple(row) for row in data["reliability"])})
        check_maps(calibration)
        check_figures(calibration)
    except OSError as exc:  # unreadable (its permissions): it stopped every query of the methods it serves
        log.warning("%s cannot be read (%s); answers get no calibrated confidence", path, exc.strerror or exc)
        return None
    except (ValueError, KeyError, TypeError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        log.warning("%s is not a calibration this version reads (%s: %s); answers get no calibrated confidence",
                    path, type(exc).__name__, exc)
        return None
    fitted_kind = kind_of(calibration.method, calibration.n_best)
    if fitted_kind != kind or calibration.augment != augment:  # a fit copied under another name
        log.warning("%s holds a fit for %s answers in %d writing(s), not %s answers in %d; answers get no calibrated "
                    "confidence", path, fitted_kind, calibration.augment, kind, augment)
        return None
    if calibration.fingerprint != weights_fingerprint(folder):
        return None
    if augment > 1 and calibration.pool_power != POOL_POWER:
        return None
    return calibration
