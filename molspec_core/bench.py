"""Benchmark: every method on the same queries in one process, interleaved, after warm-up.

Speed claims are ratios measured side by side in one run. Each query is decoded by every method in turn (in an
order shuffled per query, so no method always runs on a warm or cold cache, nor always right after the same other
method: `batch_order`), timing the engine's decode call (encoder + decoder calls + drafting). Outputs are compared
token for token with cached greedy (or, for beam methods, the n-best lists with cached beam search).
"""
from __future__ import annotations

import dataclasses
import datetime
import html
import importlib.metadata
import importlib.util
import random
import re
import json
import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from .boundary import Terminated
from .chem import canonical_or_none
from .decoding.result import GENERATED, DecodeResult, DecodeStats, Hypothesis, longest_answer_tokens
from .evaluate import hits
from .io import fitted_name, write_text_file
from .oracle import oracle_tokens_per_call
from .peers import PeerError
from .methods import METHODS, PEERS, SamplingOptions
from .service import Predictor
from .tokenizer import UNK_ID, TokenizeError
from .words import counted

log = logging.getLogger(__name__)

GREEDY_REFERENCE = "greedy"
BEAM_REFERENCE = "beam"
SAMPLE_REFERENCE = "sample"
SAMPLING_FAMILY = tuple(m for m, row in METHODS.items() if row.reference == SAMPLE_REFERENCE)
SWEEPS = {"relaxed": "tau", "mentored": "delta"}  # lossy methods and the knob that trades accuracy for speed


def base_method(method: str) -> str:
    """"greedy@graphs" (a method on another engine, run_bench's `engines`) -> "greedy"."""
    return method.partition("@")[0]


def on_engines(methods: list[str], engines: list[str]) -> list[str]:
    """methods, then each of them on each other engine ("greedy@graphs"; run_bench's `engines`)."""
    return methods + [f"{m}@{engine}" for engine in engines for m in methods]


def beam_like(method: str) -> bool:
    """Compared with beam search (and run at the bench's width) rather than with greedy decoding."""
    method = base_method(method)
    if method in PEERS:
        return PEERS[method].beam
    return METHODS[method].reference == BEAM_REFERENCE


# What a report's tokens_per_call counts (decoding.result.longest_answer_tokens): its answer's tokens, for n-best
# methods the longest answer's. Reports without this key (before session 65) counted every live beam's token for
# beam search, which put it at its width per call beside about 1 for speculative beam search.
TOKENS_COUNTED = "answer tokens"


def expected_tokens_per_call(alpha: float, gamma: float) -> float:
    """Tokens per model call when each of gamma drafted tokens is accepted independently with
    probability alpha (Leviathan et al. 2023): (1 - alpha^(gamma+1)) / (1 - alpha)."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)


def peer_ratio_key(peer: str) -> str:
    """The report key of a speedup against a CTranslate2 peer: "ct2-int8-beam" -> "speedup_vs_ct2_int8_beam"."""
    return f"speedup_vs_{peer.replace('-', '_')}"


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile: the smallest of `values` that at least `share` (0 to 1) of them do not exceed.
    The 95th of 2 values is the larger; of 20, the 19th smallest. A ValueError for no values. (bench's p90 and
    the timing tools' p95 share it; bench rounded share * (n - 1) until session 78, a rank lower for some n.)"""
    if not values:
        raise ValueError("a percentile of no values")
    if not 0 < share <= 1:
        raise ValueError(f"a percentile's share is above 0 and at most 1, not {share}")
    ordered = sorted(values)
    rank = math.ceil(round(share * len(ordered), 9))  # round: 0.95 * 60 is 57.00000000000001 in floating point
    return ordered[max(rank, 1) - 1]


# What stops a run part way and keeps what it measured, and how its report's words name each (its stopped_by: the
# type's name): Ctrl-C, and SIGTERM (a scheduler's stop, boundary.Terminated), which lost every batch measured.
STOPS = (KeyboardInterrupt, Terminated)
STOP_WORDS = {"KeyboardInterrupt": "Ctrl-C", "Terminated": "SIGTERM"}


def batch_order(methods: Sequence[str], b: int) -> list[str]:
    """The order the methods decode batch `b` in: a shuffle seeded by b, so that reruns repeat it and every method
    runs in every place, and after every other method, as often as any other does. A rotation kept the methods'
    cyclic order, so a method ran right after the same other one on nearly every batch: with one draft model in two
    columns (tools/draft_compare.py) the second ran 2% faster on the retro quick set, its main model and verify
    shapes warm from the first (session 86)."""
    return random.Random(b).sample(list(methods), len(methods))


def run_bench(predictor: Predictor, sources: list[str], targets: list[str] | None, methods: list[str],
              batch_size: int = 1, n_best: int = 1, draft_len: int | None = None, n_drafts: int | None = None,
              warmup: int = 3, progress: bool = True, sampling=None,
              on_progress: Callable[[int, int], None] | None = None, ct2_dir: str | Path | None = None,
              peer_threads: int = 0, engines: dict[str, Predictor] | None = None, by_length: bool = False) -> dict:
    """on_progress(done, total) is called after each measured batch (the app's progress bar).
    ct2_dir: a CTranslate2 conversion of the model (peers.convert_to_ctranslate2), for the ct2-* methods;
    peer_threads: their process's threads (0: torch's, as ours). engines: the same model on other
    engines (Predictor.load's engine), by name: method "greedy@graphs" runs greedy on engines["graphs"],
    interleaved with the rest and compared with `predictor`'s references. by_length: the batches are cut from the
    queries in order of token count (stable), as Predictor.predict cuts its own, not in the order given."""
    engines = engines or {}
    methods = list(dict.fromkeys(methods))  # a method named twice was decoded twice a batch, timed as one
    if GREEDY_REFERENCE not in methods and any(not beam_like(m) for m in methods):
        methods = [GREEDY_REFERENCE] + methods
    if BEAM_REFERENCE not in methods and any(beam_like(m) for m in methods):
        methods = [BEAM_REFERENCE] + methods

    def runs_on(method: str) -> Predictor:
        engine = method.partition("@")[2]
        return engines[engine] if engine else predictor

    peers = _load_peers(methods, ct2_dir, predictor, peer_threads or torch.get_num_threads())
    queries, kept_targets, skipped = [], [], []
    for i, text in enumerate(sources):
        try:
            queries.append(predictor.prepare(text))
            kept_targets.append(targets[i] if targets else None)
        except ValueError as exc:  # its place among the queries given (1-based, after --index and --limit)
            skipped.append({"query": i + 1, "error": str(exc)})
    if not queries:
        none = ("cannot read the one query (" if len(sources) == 1 else
                f"reads none of the {counted(len(sources), 'query', 'queries')} (the first, ")
        raise ValueError(f"the model {none}query 1: {skipped[0]['error'] if skipped else 'none given'})")
    if by_length:
        order = sorted(range(len(queries)), key=lambda i: len(queries[i].ids))
        queries, kept_targets = [queries[i] for i in order], [kept_targets[i] for i in order]
    batches = [list(range(i, min(i + batch_size, len(queries)))) for i in range(0, len(queries), batch_size)]

    def decode(method: str, rows: list[int]):
        ids = [queries[r].ids for r in rows]
        if method in PEERS:
            return _peer_decode(peers[method], predictor.vocab, ids, n_best if beam_like(method) else 1)
        on, base, width = runs_on(method), base_method(method), n_best if beam_like(method) else 1
        started = time.perf_counter()
        results = on.decode(ids, base, width, draft_len, n_drafts, sampling)
        return results, time.perf_counter() - started

    failed: dict[str, str] = {}  # a peer whose process failed mid-run: why; its figures are dropped, ours kept

    def measured(method: str, rows: list[int]):
        """decode(method, rows), or None where a peer fails (it is closed and left out of the rest of the run)."""
        try:
            return decode(method, rows)
        except PeerError as exc:
            if method not in peers:
                raise
            failed[method] = str(exc)
            log.warning("%s failed and is left out of this run; the other methods' figures stand: %s", method, exc)
            peers.pop(method).close()
            methods.remove(method)
            return None

    methods = list(methods)
    for rows in batches[:warmup]:
        for method in list(methods):
            measured(method, rows)

    times: dict[str, list[float]] = {m: [] for m in methods}
    outputs: dict[str, list[tuple]] = {m: [None] * len(queries) for m in methods}
    totals = {m: DecodeStats() for m in methods}
    row_calls = dict.fromkeys(methods, 0)  # each query's own decoder calls, summed (a call serves a whole batch)
    n_batches, interrupted = 0, None  # batches every method has decoded; why the run stopped short of its end
    stopped_by = None  # what stopped it, by name: a key of STOP_WORDS
    try:
        for b, rows in enumerate(tqdm(batches, desc="bench", disable=not progress, unit="batch")):
            decoded = {method: measured(method, rows) for method in batch_order(methods, b)}
            # Kept once every method has decoded the batch: a Ctrl-C inside it leaves it out whole.
            for method, done in decoded.items():
                if done is None:
                    continue
                results, seconds = done
                times[method].append(seconds)
                batch = DecodeStats()
                for r, res in zip(rows, results):
                    outputs[method][r] = tuple(h.tokens for h in res.hypotheses)
                    batch.add(res.stats)
                # One decoder call serves every row of a batch: count calls once per batch.
                row_calls[method] += batch.model_calls
                batch.model_calls = max(r.stats.model_calls for r in results)
                totals[method].add(batch)
            n_batches += 1
            if on_progress is not None:
                on_progress(b + 1, len(batches))
    except STOPS as stop:
        n_measured = sum(len(rows) for rows in batches[:n_batches])
        if not n_measured:  # nothing measured: nothing to report
            raise
        stopped_by = type(stop).__name__
        interrupted = (f"stopped ({STOP_WORDS[stopped_by]}) after {n_measured} of the {len(queries)} queries"
                       f"{', the shortest,' if by_length else ''}: the figures are theirs"
                       f"{', top-k of them alone' if targets else ''}")
        log.warning("bench %s", interrupted)
        queries, kept_targets = queries[:n_measured], kept_targets[:n_measured]
        outputs = {method: answers[:n_measured] for method, answers in outputs.items()}
    finally:
        for peer in peers.values():  # their processes end here (or, on an error, when the peers are collected)
            peer.close()
    for method in failed:  # its batches before the failure compare with nothing: no figure of it is reported
        times.pop(method, None)

    def speedup(method: str, over: str) -> float:
        return sum(times[over]) / max(sum(times[method]), 1e-12)

    report_methods = {}
    for method in methods:
        beamy = beam_like(method)
        reference = BEAM_REFERENCE if beamy else GREEDY_REFERENCE
        total = totals[method]
        calls = max(total.model_calls, 1)
        same = sum(outputs[method][i] == outputs[reference][i] if beamy else
                   outputs[method][i][:1] == outputs[reference][i][:1] for i in range(len(queries)))
        entry = {
            "median_ms": 1000 * statistics.median(times[method]),
            "p90_ms": 1000 * percentile(times[method], 0.9),
            "total_s": sum(times[method]),
            "model_calls": total.model_calls,
            "accepted_per_call": total.draft_tokens_accepted / calls,
            "tokens_per_call": total.tokens_generated / calls,
            "draft_tokens_proposed_per_call": total.draft_tokens_proposed / calls,
            "query_calls": row_calls[method],
            "tokens_per_query_call": total.tokens_generated / max(row_calls[method], 1),  # what the formula predicts
            "accepted_share_of_proposed": total.draft_tokens_accepted / max(total.draft_tokens_proposed, 1),
            f"identical_to_{reference}": same / max(len(queries), 1),
            f"speedup_vs_{reference}": speedup(method, reference),
        }
        # the draft shape these figures were measured with (methods.py defaults unless set)
        if base_method(method) in METHODS:
            entry["drafts"] = dict(zip(("drafter", "draft_len", "n_drafts"),
                                       runs_on(method).resolve(base_method(method), draft_len, n_drafts, batch_size)))
        top1_strings = [predictor.vocab.decode(outputs[method][i][0]) if outputs[method][i] else ""
                        for i in range(len(queries))]
        entry["validity"] = sum(canonical_or_none(t) is not None for t in top1_strings) / max(len(queries), 1)
        for peer in PEERS.values():
            if peer.name in times and peer.beam == beamy and method != peer.name:
                entry[peer_ratio_key(peer.name)] = speedup(method, peer.name)
        if total.draft_tokens_proposed and total.acceptance_rate is not None and not beamy:
            # alpha: accepted share of the draft tokens that were verified (a rejection ends a draft); gamma: draft
            # tokens a query's call verifies, per query as the formula reads it (at batch size 1 the same as per call)
            entry["acceptance_rate"] = total.acceptance_rate
            gamma = total.draft_tokens_proposed / max(row_calls[method], 1)
            entry["expected_tokens_per_call"] = expected_tokens_per_call(entry["acceptance_rate"], gamma)
        if base_method(method) in SAMPLING_FAMILY and SAMPLE_REFERENCE in times:
            entry["speedup_vs_sample"] = speedup(method, SAMPLE_REFERENCE)
        uncached = "beam-uncached" if beamy else "greedy-uncached"
        if uncached in times and method != uncached:
            entry[f"speedup_vs_{uncached}"] = speedup(method, uncached)
        if targets:  # of every query given, as evaluate counts: one the model cannot read is a miss
            k_max = n_best if beamy else 1
            found = [hits([predictor.vocab.decode(t) for t in outputs[method][i]] or [""], tgt)
                     for i, tgt in enumerate(kept_targets)]
            given = len(sources) if interrupted is None else len(queries)  # a stopped run never reached the rest
            for k in sorted({1, 2, 3, 5, 10, 25, 50, k_max}):
                if k <= k_max:
                    entry[f"top{k}"] = sum(any(f[:k]) for f in found) / given
        report_methods[method] = entry
    oracle: dict[str, float] = {}
    pairs = [(q.ids, ids) for q, t in zip(queries, kept_targets) if t and (ids := _reference_ids(predictor, t))]
    left_out = len(queries) - len(pairs) if targets else 0
    if pairs:  # of none, every bound would read 0
        for method in methods:
            row = METHODS.get(method)
            if row is not None and row.family == "greedy" and row.drafts == "query":  # copy drafts of greedy decoding
                drafter, length, count = predictor.resolve(method, draft_len, n_drafts, batch_size)
                oracle[method] = oracle_tokens_per_call(pairs, drafter, length, count)
        oracle["best-window-16"] = oracle_tokens_per_call(pairs, "best-window", 16, 1)
    return {
        "oracle_tokens_per_call": oracle,
        "model": str(predictor.path), "task": predictor.task, "device": str(predictor.device),
        "device_name": predictor.device_name, "engine": predictor.engine,
        "other_engines": {name: p.engine for name, p in engines.items()}, "dtype": predictor.dtype,
        "products": predictor.products, "torch": torch.__version__, "threads": predictor.threads,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "batch_size": batch_size,
        "batch_order": "by length" if by_length else "as given",
        "peers": {**{m: {"process": "its own, stopped between requests", "threads": peer.threads,
                         "omp_wait_policy": peer.wait_policy, "version": _peer_version()} for m, peer in peers.items()},
                  **{m: {"failed": why} for m, why in failed.items()}},
        "n_best": n_best,  # the beam width of beam-like methods (and the peer's), the answers compared for top-k
        "n_queries": len(queries), "n_given": len(sources), "skipped_queries": skipped,
        "warmup_batches": min(warmup, len(batches)),
        "draft_len": draft_len, "n_drafts": n_drafts,
        "sampling": (sampling or SamplingOptions()).__dict__,  # what decode ran with: the defaults where none given
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "tokens_counted": TOKENS_COUNTED,
        "calls_counted": "model_calls and the *_per_call figures: decoder calls, one per batch (a call serves every "
                         "query of its batch); query_calls: each query's own calls, summed; tokens_per_query_call and "
                         "expected_tokens_per_call: per query's call",
        "topk_counts": ("of all queries given, the skipped ones (the model cannot read them) counted as misses"
                        if interrupted is None else "of the queries measured before the run was stopped"),
        "methods": report_methods,
    } | ({"interrupted": interrupted, "stopped_by": stopped_by} if interrupted else {}) | (
        {"oracle_left_out": left_out} if left_out else {})


def _reference_ids(predictor: Predictor, target: str) -> list[int] | None:
    """The token ids of a target as the model would write it, for the oracle; None for one that is no SMILES (an
    InChI or a CXSMILES, which hits reads, or a name), which the oracle leaves out."""
    try:
        return predictor.vocab.encode(target.strip(), strict=False)
    except TokenizeError:
        return None


def _peer_version() -> str | None:
    """The installed CTranslate2's version, read from its package metadata (the peer runs in a process of its own)."""
    try:
        return importlib.metadata.version("ctranslate2")
    except importlib.metadata.PackageNotFoundError:
        return None


def _load_peers(methods: list[str], ct2_dir: str | Path | None, predictor: Predictor, threads: int) -> dict:
    wanted = [m for m in methods if m in PEERS]
    if not wanted:
        return {}
    if ct2_dir is None:
        raise ValueError(f"{', '.join(wanted)} need a CTranslate2 conversion of the model (bench --peer ctranslate2)")
    if predictor.device.type != "cpu":
        raise ValueError("the CTranslate2 peer runs on the CPU")
    from .peers import CTranslate2Peer, read_source

    read_source(ct2_dir, predictor.path)  # a conversion of other weights (a stale folder) would time another model
    return {m: CTranslate2Peer(ct2_dir, PEERS[m].compute_type, threads, predictor.model.cfg.max_positions)
            for m in wanted}


def _peer_decode(peer, vocab, ids: list[list[int]], n_best: int) -> tuple[list[DecodeResult], float]:
    """A batch of queries through CTranslate2 as one batch, timed in its own process around its decode (as ours
    is timed around our decode call), returned as our result type."""
    batch, seconds = peer.decode_timed([[vocab.tokens[i] for i in row] for row in ids], width=n_best, n_best=n_best)
    results = []
    for hypotheses in batch:
        ranked = [Hypothesis(tuple(vocab.index.get(t, UNK_ID) for t in h.tokens), h.score,
                             (GENERATED,) * len(h.tokens)) for h in hypotheses]
        steps = max(len(h.tokens) for h in ranked) + 1  # one decoder step per token, eos included
        # counted as our n-best methods count theirs: the longest answer's tokens (the first's read 0.97 a call)
        results.append(DecodeResult(ranked, DecodeStats(model_calls=steps,
                                                        tokens_generated=longest_answer_tokens(ranked))))
    return results, seconds


@dataclass(frozen=True)
class Timing:
    method: str
    time_ms: float  # median decoding wall time
    model_calls: int
    accepted_per_call: float
    tokens_per_call: float
    answers: tuple[str, ...]
    # Whether the query's time limit stopped any of its runs (an error, with the answers a search had found or with
    # none): its time is then the limit's, not the decoder's, and no speedup. False where none was set, or none ran out.
    stopped: bool = False


@dataclass(frozen=True)
class Speedup:
    query: str
    baseline: Timing
    speculative: Timing

    @property
    def factor(self) -> float:
        return self.baseline.time_ms / max(self.speculative.time_ms, 1e-9)

    @property
    def identical(self) -> bool:
        return self.baseline.answers == self.speculative.answers

    @property
    def stopped(self) -> list[Timing]:
        """Its timings that the time limit stopped: with any, the ratio is of the limit, not of the decoders."""
        return [timing for timing in (self.baseline, self.speculative) if timing.stopped]


def compare_pair(predictor: Predictor, query: str, baseline: dict, speculative: dict, repeats: int = 3) -> Speedup:
    """Two methods on one query, `repeats` times each, interleaved; median times. baseline and
    speculative are Predictor.predict keyword arguments, the method included, a time_limit_s too (the app's speedup
    tab): a timing records whether the limit stopped any of its runs. A ValueError for a query the model cannot read."""
    runs: dict[str, list] = {"baseline": [], "speculative": []}
    for _ in range(repeats):
        for side, options in (("baseline", baseline), ("speculative", speculative)):
            result = predictor.predict(query, **options)
            if result.error is not None and not result.canonical_query:  # refused before decoding: nothing timed
                raise ValueError(result.error)
            runs[side].append(result)

    def timing(side: str, method: str) -> Timing:
        results = runs[side]
        stats = results[0].stats  # calls and acceptance are the same in every run
        # a decoded query's only error is the time limit's (Predictor.predict), with or without the answers it had
        return Timing(method, 1000 * statistics.median(r.stats.wall_time_s for r in results), stats.model_calls,
                      stats.accepted_per_call, stats.tokens_per_call, tuple(p.smiles for p in results[0].predictions),
                      stopped=any(r.error is not None for r in results))

    return Speedup(query, timing("baseline", baseline["method"]), timing("speculative", speculative["method"]))


def run_sweep(predictor: Predictor, sources: list[str], targets: list[str] | None, method: str, values: list[float],
              sampling, warmup: int = 3, progress: bool = True, batch_size: int = 1, draft_len: int | None = None,
              n_drafts: int | None = None, by_length: bool = False) -> dict:
    """A lossy method at several settings of its knob (relaxed: tau, mentored: delta), each run side by
    side with cached greedy (and, for mentored, plain sampling): accuracy, validity and speed per value."""
    if method not in SWEEPS:
        raise ValueError(f"a sweep is for {', '.join(SWEEPS)}; got {method!r}")
    knob = SWEEPS[method]
    references = [GREEDY_REFERENCE] + ([SAMPLE_REFERENCE] if method in SAMPLING_FAMILY else [])
    points, report = [], {}
    for value in values:
        options = dataclasses.replace(sampling, **{knob: value})
        try:
            run = run_bench(predictor, sources, targets, references + [method], batch_size, draft_len=draft_len,
                            n_drafts=n_drafts, warmup=warmup, progress=progress, sampling=options,
                            by_length=by_length)
        except STOPS as stop:  # within the value's warm-up or first batch
            if not points:
                raise
            run, stopped_by = None, type(stop).__name__
        if points and (run is None or run.get("interrupted")):  # part of a value's queries compares with no other's
            stopped_by = stopped_by if run is None else run["stopped_by"]
            report["interrupted"] = (f"stopped ({STOP_WORDS[stopped_by]}) within its sweep's {knob} = {value:g}, "
                                     "which is left out; the values before it ran whole")
            report["stopped_by"] = stopped_by
            log.warning("bench: %s", report["interrupted"])
            break
        report = run
        entry = report["methods"][method]
        points.append({knob: value, **{k: entry.get(k) for k in (
            "top1", "validity", "speedup_vs_greedy", "speedup_vs_sample", "acceptance_rate", "tokens_per_call",
            "expected_tokens_per_call", "median_ms", "identical_to_greedy")}})
        if run.get("interrupted"):  # its first value, stopped part way: that is all there is
            break
    report["sweep"] = {"method": method, "knob": knob, "points": points}
    return report


def speedups(entry: dict, reference: str) -> str:
    """A row's speedup cell: against its reference ('greedy 1.04x'), and a sampling method's against plain sampling
    too where that ran beside it ('greedy 1.04x, sample 1.68x'): against greedy alone, speculative sampling read as
    barely faster than greedy, where it is its own reference, plain sampling, that it speeds up (the sweep table and
    the Benchmark page show both)."""
    cell = f"{reference} {entry[f'speedup_vs_{reference}']:.2f}x"
    sampled = entry.get(f"speedup_vs_{SAMPLE_REFERENCE}")
    return cell if sampled is None else f"{cell}, {SAMPLE_REFERENCE} {sampled:.2f}x"


def markdown_table(report: dict) -> str:
    lines = [("| method | median ms | p90 ms | total s | calls | tokens/call | accepted/call | "
              "identical to | top-k (k: share) | speedup vs | vs CTranslate2 |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, m in report["methods"].items():
        reference = "beam" if "identical_to_beam" in m else "greedy"
        ks = sorted((int(k[3:]) for k in m if k.startswith("top") and k[3:].isdigit()))
        tops = ", ".join(f"{k}: {m[f'top{k}']:.3f}" for k in ks)
        peers = ", ".join(f"{peer} {m[peer_ratio_key(peer)]:.2f}x" for peer in PEERS if peer_ratio_key(peer) in m)
        lines.append(f"| {name} | {m['median_ms']:.1f} | {m['p90_ms']:.1f} | {m['total_s']:.2f} | {m['model_calls']} | "
                     f"{m['tokens_per_call']:.2f} | {m['accepted_per_call']:.2f} | "
                     f"{reference} {m[f'identical_to_{reference}']:.3f} | "
                     f"{tops or '-'} | {speedups(m, reference)} | {peers or '-'} |")
    # what the ratios are of: a table pasted on its own (a GPU run's log, an issue) named neither queries nor arithmetic
    lines.append(f"\n{queries_timed(report)}; {run_facts(report)}.")
    if report.get("batch_size", 1) > 1:  # each time is one decode call's, and a call decodes a batch
        lines.append(f"\nThe median and p90 ms are those of a batch of {report['batch_size']} queries, not of one.")
    if report.get("interrupted"):
        lines.append(f"\nThis run was {report['interrupted']}.")
    if report.get("skipped_queries"):
        skipped = report["skipped_queries"]
        given = report.get("n_given", report["n_queries"] + len(skipped))  # reports from before it: a whole run's
        # a whole run's top-k counts them as misses; a stopped run's is of the queries measured (run_bench), and a run
        # without targets has none
        one = len(skipped) == 1
        in_top_k = ("" if not any("top1" in m for m in report["methods"].values()) else
                    "; not in top-k, which is of the queries measured" if report.get("interrupted") else
                    "; a miss in top-k" if one else "; misses in top-k")
        lines.append(f"\n{len(skipped):,} of the {counted(given, 'query', 'queries')} given "
                     f"{'was' if one else 'were'} skipped (the model cannot read {'it' if one else 'them'}{in_top_k}): "
                     f"{'' if one else 'the first, '}query {skipped[0]['query']}: {skipped[0]['error']}")
    if report.get("sweep"):
        sweep = report["sweep"]
        knob = sweep["knob"]
        shown = f" (the table above is its run at {knob} = {sweep['points'][-1][knob]:g})" if sweep["points"] else ""
        # mentored sampling's own reference is plain sampling, which its sweep runs too (run_sweep)
        sampled = any(point.get("speedup_vs_sample") is not None for point in sweep["points"])
        columns = ("top1", "validity", "speedup_vs_greedy", *(("speedup_vs_sample",) if sampled else ()),
                   "acceptance_rate", "tokens_per_call", "expected_tokens_per_call")
        lines.append(f"\nSweep of {sweep['method']} over {knob}{shown}:\n\n| {knob} | top-1 | valid | "
                     f"speedup vs greedy | {'speedup vs sample | ' if sampled else ''}acceptance | tokens/call | "
                     f"expected tokens/call |\n|---|---|---|---|{'---|' if sampled else ''}---|---|---|")
        for point in sweep["points"]:
            cells = [point.get(k) for k in columns]
            lines.append(f"| {point[knob]:g} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
    if report.get("oracle_tokens_per_call"):
        bounds = ", ".join(f"{k} {v:.2f}" for k, v in report["oracle_tokens_per_call"].items())
        left_out = report.get("oracle_left_out")
        note = f"; {counted(left_out, 'query', 'queries')} whose target is no SMILES left out" if left_out else ""
        lines.append(f"\nOracle tokens/call (if the model emitted the reference{note}): {bounds}")
    return "\n".join(lines)


DATASETS = {"uspto_mit": "USPTO-MIT", "uspto50k": "USPTO-50K"}  # as the bench's --src and --index paths name them


def query_set(report: dict) -> str:
    """Which queries a run timed, from the paths it records: "USPTO-MIT test, the first 200 of the 500-query
    sample (uspto_mit_test_500.idx)"; a file of the user's own by its name ("my_amides.txt, the first 50"). The
    Benchmark page and the chart bench writes beside its report name the queries their ratios are of with it."""
    if report.get("query_set"):  # a live run says it itself
        return str(report["query_set"])
    src, index = str(report.get("src") or ""), str(report.get("index") or report.get("quick_set") or "")
    where = f"{src} {index}"
    data = next((name for key, name in DATASETS.items() if key in where), None)
    if data is not None:
        data += " test" if "test" in where else ""
    elif src:  # a file of the user's own: "query set not recorded" beside the path the report holds
        data = Path(src).name
    else:
        return "query set not recorded"
    sample = re.search(r"_(\d+)\.idx$", index)
    n = report.get("limit")
    first = f", the first {n}" if n else ""
    if sample is None:  # an index of another name picks its rows: the set whole read as timed
        return f"{data}, the queries {Path(index).name} lists{first}" if index else f"{data}{first}"
    if not n or int(n) >= int(sample[1]):
        return f"{data}, the {sample[1]}-query sample ({Path(index).name})"
    return f"{data}, the first {n} of the {sample[1]}-query sample ({Path(index).name})"


def run_facts(report: dict) -> str:
    """What a run's ratios were measured under, besides its methods and queries: "forward, int8, batch size 1, beam
    width 5, AMD EPYC with AVX-512" (the table and the chart bench writes; the Benchmark page says it at length)."""
    beams = any(f"identical_to_{BEAM_REFERENCE}" in entry for entry in report["methods"].values())
    width = report.get("n_best") if beams else None
    return ", ".join(str(part) for part in (
        report.get("task"), report.get("dtype"), f"batch size {report.get('batch_size', 1)}",
        f"beam width {width}" if width else None, report.get("device_name") or report.get("device")) if part)


def queries_timed(report: dict) -> str:
    """"200 queries: USPTO-MIT test, the first 200 of the 500-query sample (uspto_mit_test_500.idx)"."""
    measured = " measured before the run was stopped" if report.get("interrupted") else ""
    n = report.get("n_queries", "?")
    return f"{counted(n, 'query', 'queries') if isinstance(n, int) else n}{measured}: {query_set(report)}"


def speedup_series(report: dict) -> dict[str, str]:
    """{ratio key: series name}: each speedup against its own reference, named (our greedy, plain sampling, beam search
    at the run's width, each CTranslate2 peer), as the Benchmark page's chart names them."""
    width = report.get("n_best")
    beam = f"our beam search (width {width})" if width and width > 1 else "our beam search"
    series = {f"speedup_vs_{GREEDY_REFERENCE}": "vs our greedy",
              f"speedup_vs_{SAMPLE_REFERENCE}": "vs our plain sampling", f"speedup_vs_{BEAM_REFERENCE}": f"vs {beam}"}
    return series | {peer_ratio_key(peer.name): f"vs {peer.label}" for peer in PEERS.values()}


def speedup_figure(report: dict):
    """The chart bench writes beside its report: one bar series per reference that some method was measured against
    (a single series put beam search's 1.00 against itself beside greedy's)."""
    import plotly.graph_objects as go

    names = list(report["methods"])
    figure = go.Figure()
    for key, label in speedup_series(report).items():
        values = [report["methods"][n].get(key) for n in names]
        if any(v is not None for v in values):
            figure.add_bar(x=names, y=values, name=label)
    # what the ratios are of, as the Benchmark page says it: the chart is a file of its own, and its title named
    # neither the task, the queries, nor the arithmetic ("Speedup, total-time ratio (200 queries, cpu)")
    # Plotly reads a few HTML tags in a title: the file names and the CPU's name are shown as written
    facts = run_facts(report)
    sweep = report.get("sweep")
    if sweep and sweep["points"]:  # its bars are one value's run, the last, which the title did not say
        facts += f"; {sweep['method']} at {sweep['knob']} = {sweep['points'][-1][sweep['knob']]:g}"
    title = f"Speedup, total-time ratio ({html.escape(facts)})<br>{html.escape(queries_timed(report))}"
    figure.update_layout(title=title,
                         yaxis_title="speedup (×, 1 = as fast)", barmode="group", showlegend=True)
    return figure


def write_html(report: dict, path: Path) -> None:
    write_text_file(path, speedup_figure(report).to_html(include_plotlyjs=True))


def chart_of(out: Path) -> Path:
    """Where save_report writes the chart of the report at `out`: beside it, its suffix .html (bench.json ->
    bench.html), a name near the file system's limit cut to fit (io.fitted_name): bench --out <253 letters> was
    refused, 'File name too long', naming a chart its user never named."""
    return out.with_name(fitted_name(out.stem, ".html"))


# The chart is drawn with plotly, an extra of the app's (pyproject's app): the engine-only install (pip install -e .)
# lacks it, and bench --out wrote its report, then stopped on a traceback without its table (session 93).
CHART_PACKAGE_MISSING = "plotly is not installed; pip install -e .[app] or pip install plotly"


def can_chart() -> bool:
    """Whether the chart bench writes beside its report can be drawn: plotly is installed (not imported: seconds)."""
    return importlib.util.find_spec("plotly") is not None


def save_report(report: dict, out: Path, html: bool = True) -> Path | None:
    """The JSON report at `out` and its chart beside it (chart_of), each written whole or not at all. Returns where
    the chart went, or None where none was written: not asked for, or plotly is missing (can_chart)."""
    write_text_file(out, json.dumps(report, indent=2))
    if not html or not can_chart():
        return None
    write_html(report, chart_of(out))
    return chart_of(out)
