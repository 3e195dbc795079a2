"""Benchmarks: speed and accuracy charts from the engine's bench JSON files, and a small live run.

Saved runs are read from bench/*.json at the repository root (MOLSPEC_BENCH_DIR overrides it).
The live run calls the engine's run_bench once on the first textbook examples the model reads, its progress bar
moved after each query by run_bench's on_progress, and shows its report as a saved run's.
"""
from __future__ import annotations

import copy
import html
import json
import logging
import os
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from molspec_core.bench import TOKENS_COUNTED, beam_like, query_set, run_bench
from molspec_core.io import percent
from molspec_core.methods import METHODS, PEERS, SAMPLING_KNOBS, SamplingOptions
from views import common

log = logging.getLogger(__name__)
LIVE_DEFAULT_METHODS = ["greedy", "spec-auto", "spec-lookup"]
MAX_REPORT_BYTES = 20 * 2**20  # a bench JSON is a few kB; anything huge is not ours
SAVED_RUN = "bench_saved_run"  # the saved run chosen, kept while another page shows (common.kept)
# Set while a live run is under way; still set on a later run, the run never ended: Stop, a page visit or a change
# outside its form ended the script run that benchmarked (Streamlit raises no Exception there), and it made no report
LIVE_UNFINISHED = "bench_live_unfinished"


def bench_dir(override: str | Path | None = None) -> Path:
    """Folder of saved bench JSON files: the argument, else $MOLSPEC_BENCH_DIR, else bench/."""
    return Path(override or os.environ.get("MOLSPEC_BENCH_DIR") or common.ROOT / "bench")


def load_reports(folder: Path) -> tuple[dict[str, dict], list[str]]:
    """{file name: report} for the readable bench reports in `folder`, and a note per unreadable file."""
    reports: dict[str, dict] = {}
    problems: list[str] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            if path.stat().st_size > MAX_REPORT_BYTES:
                raise ValueError("file too large")
            report = json.loads(path.read_text())
            methods = report["methods"]
            if not methods or not all("speedup_vs_greedy" in m or "speedup_vs_beam" in m for m in methods.values()):
                raise ValueError("no per-method results")
            with_display_fields(report)
            problem = figure_problem(report)
            if problem:
                raise ValueError(problem)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{path.name}: not a MolSpec bench report ({exc})")
            continue
        reports[path.name] = report
    return reports, problems


def _not_a_number(value: object) -> bool:
    return value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)))


# The fields the page's facts read beside the figures, by what each must be where a report has it (bench.run_bench
# writes them so): a hand-edited one of another kind stopped the page with a traceback.
WHOLE_NUMBER_FIELDS = ("n_queries", "n_best", "limit", "batch_size", "threads", "augment")
RECORD_FIELDS = ("peers", "draft_models", "sampling", "oracle_tokens_per_call", "sweep")


def _not_whole(value: object) -> bool:
    return value is not None and (isinstance(value, bool) or not isinstance(value, int))


def figure_problem(report: dict) -> str | None:
    """The first figure of a report that the page would draw as a number and that is none ("greedy's
    speedup_vs_greedy is '1.0x', not a number"), or a field its facts read that is not of its kind ("n_best is '5',
    not a whole number"), or None: a hand-edited file stopped the page with a traceback."""
    for key in WHOLE_NUMBER_FIELDS:
        if _not_whole(report.get(key)):
            return f"{key} is {report[key]!r}, not a whole number"
    for key in RECORD_FIELDS:
        if report.get(key) is not None and not isinstance(report[key], dict):
            return f"{key} is {report[key]!r}, not a record"
    for name, peer in (report.get("peers") or {}).items():
        if not isinstance(peer, dict):
            return f"peers' {name} is {peer!r}, not a record"
    for name, entry in report["methods"].items():
        if not isinstance(entry, dict):
            return f"{name}'s results are {entry!r}, not a record of figures"
        for _, key, unit, _ in COLUMNS:
            if unit != "text" and _not_a_number(entry.get(key)):
                return f"{name}'s {key} is {entry[key]!r}, not a number"
        drafts = entry.get("drafts") or {}
        if not isinstance(drafts, dict):
            return f"{name}'s drafts is {entry['drafts']!r}, not a record of its drafts"
        for key in ("draft_len", "n_drafts"):
            if _not_whole(drafts.get(key)):
                return f"{name}'s drafts' {key} is {drafts[key]!r}, not a whole number"
    for key, value in (report.get("oracle_tokens_per_call") or {}).items():
        if value is None or _not_a_number(value):  # each bound is printed as a number
            return f"oracle_tokens_per_call's {key} is {value!r}, not a number"
    for method, folder in (report.get("draft_models") or {}).items():
        if not isinstance(folder, str):
            return f"draft_models' {method} is {folder!r}, not a folder's name"
    sweep = report.get("sweep") or {}
    for field in ("method", "knob"):
        if sweep and not sweep.get(field):
            return f"the sweep names no {field}"
    if sweep and not isinstance(sweep.get("points"), list):
        return f"the sweep's points are {sweep.get('points')!r}, not a list"
    for i, point in enumerate(sweep.get("points") or [], 1):
        if not isinstance(point, dict):
            return f"the sweep's point {i} is {point!r}, not a record of figures"
        if sweep["knob"] not in point:
            return f"the sweep's point {i} has no {sweep['knob']}"
        for key in ("top1", "validity", *SWEEP_SPEEDUPS):
            if _not_a_number(point.get(key)):
                return f"the sweep's point {i}'s {key} is {point[key]!r}, not a number"
    return None


# ---- live run ---------------------------------------------------------------------------------


def with_display_fields(report: dict) -> dict:
    """A run times CTranslate2 greedy or beam search, not both: give every entry one `speedup_ct2` and one
    `speedup_ct2_int8` field, whichever family it is (the ratios against our own references stay apart: greedy,
    plain sampling and beam search are three baselines). Beam search's tokens per call is left out of reports
    that counted every live beam's token."""
    for name, entry in report["methods"].items():
        if report.get("tokens_counted") != TOKENS_COUNTED and name in METHODS and METHODS[name].family == "beam":
            entry["tokens_per_call"] = None  # every live beam's token, not comparable with the others' (bench.py)
        entry["speedup_ct2"] = entry.get("speedup_vs_ct2_greedy", entry.get("speedup_vs_ct2_beam"))
        entry["speedup_ct2_int8"] = entry.get("speedup_vs_ct2_int8_greedy", entry.get("speedup_vs_ct2_int8_beam"))
    return report


def has_peer(report: dict) -> bool:
    return any(name in PEERS for name in report["methods"])


def headline_first(reports: dict[str, dict]) -> list[str]:
    """File names with the runs that time CTranslate2 first (the comparison a user makes), sweeps last."""
    return sorted(reports, key=lambda name: (not has_peer(reports[name]), bool(reports[name].get("sweep")), name))


# ---- what a report records, in words -----------------------------------------------------------------

UNNAMED_MACHINES = {"", "x86_64", "amd64", "aarch64", "arm64"}  # platform.machine(): an architecture, not a model
INSTRUCTION_SETS = ("AMX", "AVX-512", "AVX2")  # the best one a CPU's name lists tells its runs apart


def machine(report: dict) -> str:
    """The processor a run timed on, or that the report does not name it (early reports kept only x86_64)."""
    name = str(report.get("device_name") or "")
    if name.lower() in UNNAMED_MACHINES:
        device = str(report.get("device", "cpu"))
        return f"{'CPU' if device == 'cpu' else device} model not recorded" + (f" ({name})" if name else "")
    return name


def machine_short(report: dict) -> str:
    """A few words that tell the saved runs' machines apart: "Intel Xeon AMX", "AMD EPYC AVX2", "NVIDIA H100"."""
    name = str(report.get("device_name") or "").replace("(R)", "")
    if name.lower() in UNNAMED_MACHINES:
        return "CPU not recorded" if report.get("device", "cpu") == "cpu" else "device not recorded"
    best = next((isa for isa in INSTRUCTION_SETS if isa in name), None)
    return " ".join(name.split()[:2] + ([best] if best else []))


def _beam_like(method: str) -> bool:
    base = method.partition("@")[0]
    return (base in METHODS or base in PEERS) and beam_like(base)


def beam_width(report: dict) -> int | None:
    """The run's beam width: recorded by a live run; in a saved one its beam methods' deepest top-k, which bench
    counts up to the width (run_bench's k_max). None where it has no beam method or no references."""
    beams = [entry for name, entry in report["methods"].items() if _beam_like(name)]
    if beams and report.get("n_best"):  # recorded since session 78 (and by a live run)
        return int(report["n_best"])
    depths = [int(key[3:]) for entry in beams for key in entry if re.fullmatch(r"top\d+", key)]
    return max(depths, default=None)


def drafts_text(entry: dict) -> str | None:
    """A method's drafts a call: "6 tokens", "4 × 16 tokens" (4 drafts); None for a method that drafts nothing."""
    drafts = entry.get("drafts") or {}
    length, count = drafts.get("draft_len") or 0, drafts.get("n_drafts") or 1
    if not length:
        return None
    tokens = common.counted(length, "token")
    return f"{count} × {tokens}" if count > 1 else tokens


def _draft_lengths(report: dict) -> list[int]:
    """The draft lengths a run's methods used, each once, smallest first."""
    return sorted({(entry.get("drafts") or {}).get("draft_len") or 0 for entry in report["methods"].values()} - {0})


def _repo_path(path: str) -> str:
    """A draft model's folder as the repository names it: "/work/main/models/retro/draft" -> "models/retro/draft"."""
    inside = re.search(r"(?:^|/)((?:models|runs)/.+)$", path)
    return inside[1] if inside else path


def method_names(report: dict) -> dict[str, str]:
    """Each method's name for people. A second draft model's column ("spec-sample-draft@new") is named by the
    draft model the report records; where two columns ran the same model, they are numbered."""
    draft_models = report.get("draft_models") or {}
    names = {}
    for method in report["methods"]:
        if method in draft_models:
            names[method] = f"{common.method_label(method.partition('@')[0])} ({_repo_path(draft_models[method])})"
        else:
            names[method] = common.method_label(method)
    counts = Counter(names.values())
    seen: Counter[str] = Counter()
    for method, name in names.items():
        if counts[name] > 1:
            seen[name] += 1
            names[method] = f"{name} #{seen[name]}"
    return names


def peer_families(report: dict) -> list[str]:
    """What the CTranslate2 peer ran, "greedy" and/or "beam search" in that order: bench --peer times each beside
    the methods of its own family, so a run of both families has both."""
    beams = {PEERS[name].beam for name in report["methods"] if name in PEERS}
    beams |= {key.endswith("_beam") for entry in report["methods"].values() for key in entry
              if key.startswith("speedup_vs_ct2_")}
    return [family for beam, family in ((False, "greedy"), (True, "beam search")) if beam in beams]


def peer_search(report: dict) -> str:
    """The CTranslate2 search a run's ratios against it are measured with, for a series' name."""
    families = peer_families(report) or ["greedy"]
    return families[0] if len(families) == 1 else f"{' or '.join(families)}, as the method searches"


def what_ran(report: dict) -> list[str]:
    """The facts that tell one run from another: its queries, task, beam width, drafts and writings."""
    n_read, skipped = report.get("n_queries", "?"), report.get("skipped_queries") or []
    if report.get("interrupted"):  # bench kept the batches measured before a Ctrl-C: top-k is of them alone
        facts = [f"{_count(n_read, 'query', 'queries')} measured before the run was stopped, of: {query_set(report)}"]
        if isinstance(skipped, list) and skipped:
            facts.append(f"{len(skipped)} skipped, which the model cannot read (not in top-k)")
    elif isinstance(skipped, list) and skipped and isinstance(n_read, int):  # top-k counts them as misses
        first = skipped[0] if isinstance(skipped[0], dict) else {}
        facts = [f"{n_read} of the {n_read + len(skipped)} queries given: {query_set(report)}",
                 f"{len(skipped)} skipped, which the model cannot read (misses in top-k): the first, query "
                 f"{first.get('query', '?')}: {first.get('error', 'no reason recorded')}"]
    else:
        facts = [f"{_count(n_read, 'query', 'queries')}: {query_set(report)}"]
    facts.append(f"task {report.get('task', '?')}")
    if any(_beam_like(name) for name in report["methods"]):
        width = beam_width(report)
        facts.append(f"beam width {width}" if width else "beam width not recorded")
    lengths = _draft_lengths(report)
    if lengths:
        facts.append(f"drafts of {common.counted(lengths[0], 'token')} a call" if len(lengths) == 1 else
                     f"drafts of {lengths[0]} to {lengths[-1]} tokens a call (per method: the table)")
    knobs = knobs_text(report)
    if knobs:
        facts.append(knobs)
    writings = int(report.get("augment") or 1)  # run_bench reads one writing of each query
    facts.append(f"each query read in {'1 writing' if writings == 1 else f'{writings} writings'}")
    return facts


def knob_name(knob: str) -> str:
    """A sampling knob (methods.SAMPLING_KNOBS) as the page names it: top_k is "top-k"."""
    return knob.replace("_", "-")


def knobs_text(report: dict) -> str | None:
    """The sampling knobs the run's methods read, at the values they ran with ("knobs: beta 1, tau 0"): a lossy
    method's figures rest on them (relaxed at tau 0 is greedy's answers). None where no method reads one."""
    read = {knob for name in report["methods"] if name.partition("@")[0] in METHODS
            for knob in METHODS[name.partition("@")[0]].knobs}
    names = [knob for knob in SAMPLING_KNOBS if knob in read]
    if not names:
        return None
    values = report.get("sampling")
    if not isinstance(values, dict):  # older reports recorded none where their caller (the live run) passed none
        return f"knobs not recorded ({', '.join(knob_name(knob) for knob in names)})"

    def shown(value: object) -> str:
        return f"{value:g}" if isinstance(value, (int, float)) else "?"

    sweep = report.get("sweep") or {}
    swept = [point.get(sweep.get("knob")) for point in sweep.get("points") or []]

    def value(knob: str) -> str:  # a sweep's last value ran last; the sweep chart shows every one
        return f"swept over {', '.join(map(shown, swept))}" if swept and knob == sweep["knob"] else \
            shown(values.get(knob))

    return "knobs: " + ", ".join(f"{knob_name(knob)} {value(knob)}" for knob in names)


def report_title(report: dict) -> str:
    """A saved run's name in the picker, most telling first: "forward · beam 5 vs CTranslate2 · int8 · Intel Xeon
    AMX · 1 thread · batch 1 · 200 queries"."""
    if report.get("sweep"):
        sweep = report["sweep"]
        what = f"sweep of {common.method_label(str(sweep['method']))} over {sweep['knob']}"
    else:
        width = beam_width(report)
        beam = f"beam {width}" if width else "beam"
        families = [beam if _beam_like(name) else METHODS[name.partition("@")[0]].family
                    for name in report["methods"] if name.partition("@")[0] in METHODS]
        families = list(dict.fromkeys(families))  # their first order, each once
        if has_peer(report):
            searches = [beam if family == "beam search" else family for family in peer_families(report)]
            what = f"{' and '.join(searches) or 'greedy'} vs CTranslate2"
        elif report.get("draft_models"):
            lengths = _draft_lengths(report)
            what = "draft models" + (f", drafts of {lengths[0]}" if len(lengths) == 1 else "")
        else:
            what = " and ".join(families)
    batch = f"batch {report.get('batch_size', '?')}"
    batch += " by length" if report.get("batch_order") == "by length" else ""
    threads = _threads(report.get("threads", "?"))
    apart = threads_apart(report)
    if apart:
        threads += f", CTranslate2 {' or '.join(map(str, apart[1]))}"
    return " · ".join([str(report.get("task", "?")), what, str(report.get("dtype", "float32")), machine_short(report),
                       threads, batch,
                       _count(report.get("n_queries", "?"), "query", "queries")]
                      + (["stopped part way"] if report.get("interrupted") else []))


def report_titles(reports: dict[str, dict]) -> dict[str, str]:
    """{file name: title}; runs whose titles would be the same carry their file name too."""
    titles = {name: report_title(report) for name, report in reports.items()}
    counts = Counter(titles.values())
    return {name: f"{title} · {name}" if counts[title] > 1 else title for name, title in titles.items()}


def headline(report: dict) -> str | None:
    """One plain sentence on our fastest lossless method against CTranslate2 of its family, leading with the
    like-for-like comparison: int8 against CTranslate2 int8 where the run computes in int8, float32 against float32
    otherwise; the other arithmetic's ratio follows, named as such."""
    int8 = report.get("dtype") == "int8"
    keys = ("speedup_ct2_int8", "speedup_ct2") if int8 else ("speedup_ct2", "speedup_ct2_int8")
    lossless = {name: m for name, m in report["methods"].items() if name in METHODS and METHODS[name].lossless}
    key = next((k for k in keys if any(m.get(k) for m in lossless.values())), None)
    if key is None:
        return None
    ours = [(m[key], name) for name, m in lossless.items() if m.get(key)]
    ratio, name = max(ours)
    lead = "our fastest exact method here" if len(ours) > 1 else "our exact method here"  # one method is no "fastest"
    family = "beam search" if _beam_like(name) else "greedy"  # the peer bench timed beside this method
    width = beam_width(report) if family == "beam search" else None
    how = f"{f'beam width {width}; ' if width else ''}total time, same queries, interleaved"
    apart = threads_apart(report)
    if apart:  # bench --peer-threads: the ratio is of the two sides as they ran
        how += f"; ours on {_threads(apart[0])}, CTranslate2's on {' or '.join(_threads(n) for n in apart[1])}"
    label = method_names(report)[name]

    def verdict(value: float) -> str:
        return f"{value:.2f}x as fast as" if value >= 1 else f"{1 / value:.2f}x slower than"

    other = report["methods"][name].get(keys[1] if key == keys[0] else keys[0])
    if int8 and key == "speedup_ct2_int8":  # like against like: int8 beside int8, then float32 named as the other
        sentence = (f"This run computes in int8, as CTranslate2 int8 does: {lead}, {label}, is {verdict(ratio)} "
                    f"CTranslate2 int8 {family} ({how}).")
        if other:
            sentence += (f" Against float32 arithmetic, not like for like, it is {verdict(other)} CTranslate2 float32 "
                         f"{family} (int8 answers may differ from float32's: see the model cards).")
        return sentence
    arithmetic = "int8 against float32 arithmetic, " if int8 else ""  # an int8 run without an int8 peer timed
    sentence = (f"{lead[0].upper()}{lead[1:]}, {label}, is {verdict(ratio)} CTranslate2 float32 {family} "
                f"({arithmetic}{how}).")
    if not int8 and other and other < 1:  # the chart beside it shows a faster bar: the sentence says so too
        sentence += (f" CTranslate2 int8 {family} is faster still: this float32 run is {verdict(other)} it (our "
                     "int8 arithmetic, the app's default on a CPU, is the like-for-like comparison: the README).")
    return sentence


# What the peer is, for a chemist who has not met it: the page opened on ratios against "CTranslate2" unexplained.
PEER_TEXT = ("CTranslate2 is a widely used fast inference engine for Transformer models: the engine a practitioner "
             "would convert a model like this one to and run instead of ours. Here it runs this model's own weights, "
             "converted, so the runs compare the two engines alone.")


WHOLE_LIST = "whole list identical to our beam search"  # the agreement chart's series, which agreement_note explains


def agreement_note(report: dict) -> str | None:
    """What "identical to our beam search" compares, where a method's share is below 100%: the whole ranked list,
    token for token. CTranslate2's 26% read as if the two engines disagreed on three queries in four, where their
    first answers are right about equally often; the note gives each one's top-1 beside ours. None where every
    method's lists are our beam search's, or none was compared."""
    methods, names = report["methods"], method_names(report)
    differ = [name for name, m in methods.items() if m.get("identical_to_beam", 1) is not None
              and m.get("identical_to_beam", 1) < 1]
    if not differ:
        return None
    width = beam_width(report)
    answers = f"{width} answers" if width else "answers"
    every = f"all {width} ranked answers" if width else "all the ranked answers"
    note = (f"{WHOLE_LIST.capitalize()} (the table's \"identical to beam\") counts a query only where {every} are "
            "our beam search's, token for token and in order.")
    if any(name in PEERS for name in differ):
        note += (f" CTranslate2's beam search stops once {answers} have finished, where ours searches on until no "
                 "other answer can still enter the list, so its lower ranks often differ.")
    firsts = [(names[name], methods[name]["top1"]) for name in differ if methods[name].get("top1") is not None]
    ours = methods.get("beam", {}).get("top1")
    if firsts and ours is not None:
        shares = ", ".join(f"{name} {share_text(top1)}" for name, top1 in firsts)
        note += f" First answers right (top-1): {shares}; our beam search {share_text(ours)}."
    return note


def live_sampling(cfg: common.Settings) -> SamplingOptions:
    """The knobs the live run decodes every method with: the sidebar's where its method reads them, the others where
    the sidebar opens them (common.APP_SAMPLING). At the engine's defaults a lossy method chosen in the form but not
    in the sidebar lost nothing (relaxed at beta 1 and tau 0 is greedy), and was timed as such under its "(lossy)"
    label."""
    set_here = {knob: getattr(cfg.sampling, knob) for knob in SAMPLING_KNOBS
                if cfg.sampling is not None and common.reads(cfg.method, knob)}
    return replace(common.APP_SAMPLING, **set_here)


def unset_knobs_note(cfg: common.Settings, choices: list[str]) -> str | None:
    """What the live run gives the lossy methods among `choices` whose knobs the sidebar's method does not read, and
    so the sidebar does not show: where the sidebar opens them (live_sampling). None where every such method's knobs
    are the sidebar's."""
    shown = set(METHODS[cfg.method].knobs)
    lossy = [m for m in choices if not METHODS[m].lossless and set(METHODS[m].knobs) & set(SAMPLING_KNOBS) - shown]
    if not lossy:
        return None
    given = live_sampling(cfg)
    knobs = [knob for knob in SAMPLING_KNOBS if knob not in shown and any(knob in METHODS[m].knobs for m in lossy)]
    values = ", ".join(f"{knob_name(knob)} {getattr(given, knob):g}" for knob in knobs)
    reads, run = ("reads", "it runs") if len(lossy) == 1 else ("read", "they run")
    names = common.in_words([common.method_label(m) for m in lossy])
    return (f"{names} {reads} knobs the sidebar does not show for its method: chosen here, {run} with those where "
            f"the sidebar opens them ({values}). To time one at other knobs, choose it in the sidebar and set them "
            "there.")


def run_live(cfg: common.Settings, n_queries: int, methods: list[str]) -> dict | None:
    predictor = cfg.predictor()
    pairs = []
    for example in common.load_examples():
        query = example.query(cfg.task)
        try:
            predictor.prepare(query)  # run_bench cannot summarize a query it skips
        except ValueError:
            continue
        pairs.append((query, example.known_answer(cfg.task)))
    pairs = pairs[:n_queries]
    if not pairs:
        st.error("None of the examples can be read by this model.")
        return None
    bar = st.progress(0.0, text="Warming up…")

    def advance(done: int, total: int) -> None:
        bar.progress(done / total, text=f"Benchmarked {done} of {_count(total, 'query', 'queries')}")

    targets = [target for _, target in pairs]
    width = cfg.n_best if cfg.n_best > 1 else 5
    try:
        report = run_bench(predictor, [query for query, _ in pairs], targets if all(targets) else None, list(methods),
                           n_best=width, draft_len=cfg.draft_len, n_drafts=cfg.n_drafts, warmup=1, progress=False,
                           sampling=live_sampling(cfg), on_progress=advance)
    finally:  # a refused or failed run's error stands alone, without an empty bar above it
        bar.empty()
    # What the page knows and run_bench does not record: the beam width, the queries, one writing of each. The page's
    # own fields (with_display_fields) are added to a copy where it is shown: the download holds what was measured.
    report.update(live=True, n_best=width, augment=1, queries=[query for query, _ in pairs],
                  query_set=f"the first {'' if len(pairs) == 1 else f'{len(pairs)} '}of the app's textbook examples "
                            "this model can read")  # one read "the first 1 of"
    return report


# ---- charts and table: one rounding for both -------------------------------------------------------


def share_text(share: float) -> str:
    """A share of queries in percent to one decimal where it has one (200 queries go in steps of 0.5%: "78.5%",
    "26%"), never an impossible 100% or 0%: 199 of 200 valid is 99.5%, where a whole percent showed "100%" beside
    the table's 0.99."""
    return percent(share, 1).replace(".0%", "%")


def value_text(value: object, unit: str) -> str:
    """A chart's or the table's figure: "share" in percent, "count" whole, "text" as it is, others to 2 decimals;
    "–" for none."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "–"
    if unit == "share":
        return share_text(float(value))
    if unit == "count":
        return f"{int(value):,}"
    return str(value) if unit == "text" else f"{float(value):.2f}"


def chart_label(name: str) -> str:
    """A method's name for a chart axis, escaped (Plotly reads a few HTML tags) and wrapped in two lines."""
    return html.escape(name).replace(", ", ",<br>").replace(" (", "<br>(")


NARROW_BARS = 9  # bars in one chart beyond which their value labels stand on end
LABEL_CHARS = 40  # nor upright where bars x their longest label pass this: a chart is 358 px wide on a 390 px phone


def figure_of(method: dict, key: str) -> object:
    """A method's figure under `key`, None where it has none to give: accepted draft tokens of a method that drafted
    nothing (beam search, CTranslate2) were a row of 0.00 bars beside the drafting methods'."""
    if key == "accepted_per_call" and not method.get("draft_tokens_proposed_per_call"):
        return None
    return method.get(key)


def _bars(report: dict, fields: dict[str, str], title: str, yaxis: str, percent: bool = False) -> go.Figure | None:
    """Grouped bars, one group per method and one series per field. Titles are short (a chart may get half the
    page's width). The legend always shows: it says what each bar is measured against."""
    names, labels = list(report["methods"]), method_names(report)
    series = {label: [figure_of(report["methods"][n], field) for n in names] for field, label in fields.items()}
    series = {label: values for label, values in series.items() if any(v is not None for v in values)}
    if not series:
        return None
    texts = {label: [value_text(v, "share" if percent else "ratio") if v is not None else "" for v in values]
             for label, values in series.items()}
    # In half the page's width a bar is about 20 px wide once there are a dozen: upright labels of
    # neighbouring bars ran into each other ("1.291.30", on a phone "100%99.5%"), so then they stand on end.
    bars, longest = len(names) * len(series), max(len(t) for text in texts.values() for t in text)
    upright = bars <= NARROW_BARS and bars * longest <= LABEL_CHARS
    figure = go.Figure()
    for label, values in series.items():
        figure.add_bar(x=[chart_label(labels[n]) for n in names], y=values, name=label, text=texts[label],
                       textposition="outside", textangle=0 if upright else -90, textfont={"size": 11},
                       constraintext="none", cliponaxis=False)
    figure.update_layout(title={"text": title, "font": {"size": 15}}, yaxis_title=yaxis, height=400,
                         barmode="group", margin={"t": 50, "b": 10}, showlegend=True,
                         legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom"})
    figure.update_xaxes(tickangle=-35, tickfont={"size": 11}, automargin=True)
    top = max(v for values in series.values() for v in values if v is not None)
    if percent:
        figure.update_yaxes(tickformat=".0%", range=[0, 1.15 if upright else 1.3], tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1])
    elif not upright and top > 0:
        figure.update_yaxes(range=[0, top * 1.25])  # room above the tallest bar for its label on end
    return figure


def speed_step(top: float) -> float | None:
    """A tick step for the speedup axis that puts a grid line at 1 (as fast as the reference); None: too tall."""
    return next((step for step, most in ((0.25, 6), (0.5, 8), (1.0, 12)) if top / step <= most), None)


def speedup_fields(report: dict) -> dict[str, str]:
    """The speedup chart's series, each against one reference: our greedy for the greedy family, plain sampling for
    the sampling methods, our beam search for the beam family, and CTranslate2 of the method's family."""
    peer, width = peer_search(report), beam_width(report)
    beam = f"our beam search (width {width})" if width else "our beam search"
    return {"speedup_vs_greedy": "vs our greedy", "speedup_vs_sample": "vs our plain sampling",
            "speedup_vs_beam": f"vs {beam}", "speedup_ct2": f"vs CTranslate2 float32 {peer}",
            "speedup_ct2_int8": f"vs CTranslate2 int8 {peer}"}


def timed_unit(report: dict) -> str:
    """What one of a run's times is: bench times a batch at a time ("batch of 32 queries"); at batch size 1, a query."""
    batch = report.get("batch_size")
    return f"batch of {batch} queries" if isinstance(batch, int) and batch > 1 else "query"


def figures(report: dict) -> list[go.Figure]:
    speedup = _bars(report, speedup_fields(report), "Speedup (total time)", "speedup (×, 1 = as fast)")
    if speedup is not None:  # a grid line at 1 marks "as fast"; a dotted line of its own crossed the bars' labels
        top = max(y for bar in speedup.data for y in bar.y if y is not None)
        step = speed_step(top)
        if step:
            speedup.update_yaxes(tick0=0, dtick=step)
    charts = [
        speedup,
        _bars(report, {"top1": "top-1 accuracy", "identical_to_greedy": "identical to our greedy",
                       "identical_to_beam": WHOLE_LIST, "validity": "valid SMILES"},
              "Accuracy and agreement", "share of queries", percent=True),
        _bars(report, {"median_ms": "median", "p90_ms": "p90"}, f"Latency per {timed_unit(report)}", "ms"),
        _bars(report, {"tokens_per_call": "tokens per call", "accepted_per_call": "accepted draft tokens per call",
                       "expected_tokens_per_call": "expected from the acceptance rate"},
              "Tokens per model call", "tokens"),
    ]
    if report.get("sweep"):
        charts.insert(0, sweep_figure(report["sweep"]))
    return [c for c in charts if c is not None]


# A sweep's speedups, each against a reference run_sweep ran beside it: our greedy, and for mentored sampling plain
# sampling too, its own reference (methods.py), against which it is 1.2x as fast where it is 0.93x greedy's speed;
# its chart showed the ratio against greedy alone.
SWEEP_SPEEDUPS = {"speedup_vs_greedy": "speedup vs greedy", "speedup_vs_sample": "speedup vs plain sampling"}


def sweep_speedups(sweep: dict) -> dict[str, str]:
    """{point key: name} of the speedups a sweep's points hold (a relaxed greedy sweep ran no plain sampling)."""
    held = {key: name for key, name in SWEEP_SPEEDUPS.items()
            if any(point.get(key) is not None for point in sweep["points"])}
    return held or {"speedup_vs_greedy": SWEEP_SPEEDUPS["speedup_vs_greedy"]}  # no point yet: greedy's, empty


def sweep_figure(sweep: dict) -> go.Figure:
    """A lossy method's trade-off: top-1 and validity (left axis) and speedup (right) per knob value."""
    knob, points = str(sweep["knob"]), list(sweep["points"])
    x = [p[knob] for p in points]
    figure = go.Figure()
    for field, label in (("top1", "top-1 accuracy"), ("validity", "valid SMILES")):
        figure.add_scatter(x=x, y=[p.get(field) for p in points], name=label, mode="lines+markers")
    for (field, label), dash in zip(sweep_speedups(sweep).items(), ("dash", "dot")):
        figure.add_scatter(x=x, y=[p.get(field) for p in points], name=label, mode="lines+markers", yaxis="y2",
                           line={"dash": dash})
    # in two lines: in one, a phone's 358-px chart cut it after "Relaxed greedy, SpecDec++ (lossy): accuracy and sp"
    label = common.method_label(str(sweep["method"]))
    title = f"{html.escape(label)}:<br>accuracy and speed vs {html.escape(knob)}"
    # An overlaying axis is ticked on the other axis's grid by default (plotly.js's tickmode "sync"): the speedups
    # read 0.196, 0.391, ... The right axis takes round ticks of its own and draws no second grid.
    speed_axis = {"title": "speedup (×)", "overlaying": "y", "side": "right", "rangemode": "tozero",
                  "tickmode": "auto", "nticks": 6, "showgrid": False}
    figure.update_layout(title={"text": title, "font": {"size": 15}},
                         xaxis_title=html.escape(knob), height=380, margin={"t": 70, "b": 10},
                         yaxis={"title": "share of queries", "tickformat": ".0%", "range": [0, 1.05]},
                         yaxis2=speed_axis, legend={"orientation": "h", "y": -0.3})
    return figure


def sweep_table(sweep: dict) -> pd.DataFrame:
    """The sweep chart's points in words, rounded as the chart's axes and the table below read."""
    knob = str(sweep["knob"])
    speedups = sweep_speedups(sweep)
    return pd.DataFrame([{knob: str(p.get(knob)), "top-1": value_text(p.get("top1"), "share"),
                          "valid": value_text(p.get("validity"), "share"),
                          **{name: value_text(p.get(field), "ratio") for field, name in speedups.items()}}
                         for p in sweep["points"]])


# The table's columns, which hold every figure the charts show: the ratios against CTranslate2 first (the figure a
# reader comes for), then against our own references, the answers' quality, times, and the call counts last (at
# 1,400 px the last columns may need a sideways scroll). (column, key, unit, meaning)
COLUMNS = (("vs CTranslate2 float32", "speedup_ct2", "ratio", "CTranslate2 float32's total time / this method's, on "
                                                               "the same queries (above 1: faster than it); "
                                                               "CTranslate2 runs the method's own search: greedy "
                                                               "beside greedy-family methods, beam search at the "
                                                               "run's beam width beside beam-family ones"),
           ("vs CTranslate2 int8", "speedup_ct2_int8", "ratio", "CTranslate2 int8's total time / this method's"),
           ("vs greedy", "speedup_vs_greedy", "ratio", "our cached greedy's total time / this method's (greedy-family "
                                                       "methods)"),
           ("vs sampling", "speedup_vs_sample", "ratio", "plain sampling's total time / this method's (sampling "
                                                         "methods)"),
           ("vs beam", "speedup_vs_beam", "ratio", "our beam search's total time / this method's (beam-family "
                                                   "methods, at the run's beam width)"),
           ("identical to greedy", "identical_to_greedy", "share", "share of queries answered token for token as our "
                                                                   "cached greedy answers them"),
           ("identical to beam", "identical_to_beam", "share", "share of queries whose whole ranked list is our beam "
                                                               "search's (CTranslate2's beam search stops once as "
                                                               "many answers as its width have finished, so its "
                                                               "lower ranks may differ)"),
           ("top-1", "top1", "share", "share of first answers that are the reference answer"),
           ("valid", "validity", "share", "share of first answers that are valid SMILES"),
           ("median ms", "median_ms", "ratio", "median time of one query (one batch at batch size > 1)"),
           ("p90 ms", "p90_ms", "ratio", "90th percentile time of one query (one batch at batch size > 1)"),
           ("total s", "total_s", "ratio", "all queries, in seconds"),
           ("model calls", "model_calls", "count", "decoder calls, all queries"),
           ("drafts", "drafts", "text", "tokens drafted a call (drafts × tokens where it proposes several)"),
           ("tokens/call", "tokens_per_call", "ratio", "output tokens per decoder call (n-best methods: the longest "
                                                       "answer's)"),
           ("accepted/call", "accepted_per_call", "ratio", "draft tokens accepted per call"),
           ("expected/call", "expected_tokens_per_call", "ratio", "tokens a call expected from the acceptance rate: "
                                                                  "(1 − α^(γ+1)) / (1 − α), where α is the share of "
                                                                  "drafted tokens accepted and γ the tokens drafted "
                                                                  "a call"))


def table(report: dict) -> pd.DataFrame:
    """The run's figures, one row per method, unrounded."""
    names = method_names(report)
    rows = [{"method": names[name], **{column: drafts_text(m) if key == "drafts" else figure_of(m, key)
                                       for column, key, _, _ in COLUMNS}}
            for name, m in report["methods"].items()]
    return pd.DataFrame(rows)


def shown_columns(report: dict) -> dict[str, str]:
    """{column: its heading in this run's table}: the ratios against CTranslate2 name the search it ran, as the speedup
    chart's legend does ("vs CTranslate2 float32 beam search"); a bare "vs CTranslate2 float32" left a reader of the
    table to guess whether spec-auto was set against its greedy or its beam search."""
    peer = peer_search(report)
    return {column: f"{column} {peer}" if key in ("speedup_ct2", "speedup_ct2_int8") else column
            for column, key, _, _ in COLUMNS}


def shown_table(report: dict) -> pd.DataFrame:
    """The table as the page shows it: each figure rounded as the charts round it, the columns no method has left
    out. Text, so a screen reader reads what the screen shows ("78.5%", not 0.785)."""
    numbers, headings = table(report), shown_columns(report)
    shown = {"method": numbers["method"].tolist()}
    for column, _, unit, _ in COLUMNS:
        if numbers[column].notna().any():
            shown[headings[column]] = [value_text(v, unit) for v in numbers[column]]
    return pd.DataFrame(shown)


def _count(n: object, one: str, many: str) -> str:
    """"1 query", "3 queries", "? queries": a count with its noun."""
    return f"1 {one}" if n == 1 else f"{n} {many}"


def _threads(n: object) -> str:
    return _count(n, "thread", "threads")


def oracle_label(key: str) -> str:
    """An oracle bound's name (bench.py's keys): a copy method's label, or "best-window-16" in words, oracle.py's
    ideal single draft: at each step the query window of up to 16 tokens that matches the reference longest."""
    window = re.fullmatch(r"best-window-(\d+)", key)
    return f"best query window of up to {window[1]} tokens" if window else common.method_label(key)


def peers_threads(report: dict) -> list[int]:
    """The thread counts of the CTranslate2 peers' processes that ran to the end, each once (bench --peer-threads)."""
    peers = [peer for peer in (report.get("peers") or {}).values() if "failed" not in peer]
    return sorted({peer["threads"] for peer in peers if isinstance(peer.get("threads"), int)})


def threads_apart(report: dict) -> tuple[object, list[int]] | None:
    """(our threads, the peers' threads) where CTranslate2's process ran on other thread counts than our methods
    (bench --peer-threads 1 beside --threads 2), else None."""
    ours, theirs = report.get("threads"), peers_threads(report)
    return (ours, theirs) if theirs and theirs != [ours] else None


def where_ran(report: dict) -> list[str]:
    """The facts of the machine and the engine a run timed on."""
    engine = f"engine {report.get('engine', 'torch')}"
    if report.get("dtype", "float32") != "float32":
        engine += f" in {report['dtype']}"
    if report.get("products") and report["products"] != report.get("engine"):  # torch's products: torch's own
        engine += f" ({report['products']} products)"
    facts = [f"machine: {machine(report)}",
             f"batch size {report.get('batch_size', '?')}"
             + (", batches cut by query length" if report.get("batch_order") == "by length" else ""), engine,
             f"torch {report.get('torch', '?')}", _threads(report.get("threads", "?"))]
    if report.get("omp_wait_policy"):
        facts.append(f"OMP_WAIT_POLICY={report['omp_wait_policy']}")
    peers = [peer for peer in (report.get("peers") or {}).values() if "failed" not in peer]
    peer_threads = peers_threads(report)
    if peer_threads:
        version = next((peer["version"] for peer in peers if peer.get("version")), None)
        facts.append(f"CTranslate2 {version or '(version not recorded)'} in its own process, "
                     + " or ".join(_threads(n) for n in peer_threads))
    elif has_peer(report) and not report.get("peers"):  # reports before bench recorded its peers
        facts.append("CTranslate2's version, process and threads not recorded")
    for name, peer in (report.get("peers") or {}).items():  # bench.run_bench left it out, keeping the other figures
        if "failed" in peer:
            facts.append(f"{name} failed part way and is left out ({peer['failed']})")
    facts.append(str(report.get("date", "")))
    return facts


# Two charts share a row where the page is wide; a column narrower than this takes a row of its own (at 640-1,000 px
# of window, 200% zoom of a laptop's, two charts of about 260 px ran their labels into each other).
CHART_MIN_WIDTH = "26rem"
TABLE_BELOW = "The table below the charts"
SWEEP_TABLE = "The table under the charts, \"The sweep chart's points as a table\","


def chart_caption(figure: go.Figure, values_at: str = TABLE_BELOW) -> str:
    """What a chart plots, in words, for the caption right above it: a screen reader met each Plotly chart as
    unnamed images (its title is text in an SVG, no name), so the caption names the chart and its series and says
    which table holds every value. Plain text, escaped (a method's name comes from the report file)."""
    title = html.unescape((figure.layout.title.text or "").replace("<br>", " "))  # a title in two lines reads as one
    series = [html.unescape(trace.name) for trace in figure.data if trace.name]
    if all(trace.type == "scatter" for trace in figure.data):
        plotted = f"Lines against {html.unescape(figure.layout.xaxis.title.text or 'the knob')}"
    else:
        plotted = "Bars for each method"
    return common.md_escape(f"Chart: {title}. {plotted}: {common.in_words(series)}. {values_at} holds every value.")


def chart_rows_style(key: str) -> str:
    return (f"<style>.st-key-{key} [data-testid='stHorizontalBlock'] {{ flex-wrap: wrap; }} "
            f".st-key-{key} [data-testid='stColumn'] {{ min-width: min(100%, {CHART_MIN_WIDTH}); }}</style>")


def show_report(report: dict, key: str, source: str | None = None) -> None:
    if report.get("interrupted"):
        st.warning(common.md_escape(f"This run was {report['interrupted']}. Its figures are of the queries measured "
                                    "before it stopped, not of the whole set it was given."),
                   icon=":material/warning:")
    st.caption(common.md_escape(" · ".join(what_ran(report))))
    st.caption(common.md_escape(" · ".join(where_ran(report) + ([f"file {source}"] if source else []))))
    if has_peer(report):
        st.caption(PEER_TEXT)
    sentence = headline(report)
    if sentence:
        st.markdown(f"**{common.md_escape(sentence)}**")
    agreement = agreement_note(report)
    if agreement:
        st.markdown(common.md_escape(agreement))
    names = method_names(report)
    repeated = sorted({name.rpartition(" #")[0] for name in names.values() if re.search(r" #\d+$", name)})
    if repeated:
        st.caption(common.md_escape(f"{', '.join(repeated)}: the same draft model timed in two columns of one run; "
                                    "their difference is the run's noise."))
    charts = figures(report)
    if report.get("sweep"):
        sweep = report["sweep"]
        last = sweep["points"][-1][sweep["knob"]] if sweep["points"] else "?"
        beside = common.in_words([name for name, ran in (("greedy", True), ("plain sampling", "sample" in names))
                                  if ran])
        st.caption(common.md_escape(f"A sweep of {common.method_label(str(sweep['method']))} over {sweep['knob']}: "
                                    f"the first chart shows every value; the other charts and the table show the "
                                    f"last run ({sweep['knob']} = {last}) beside {beside}."))
    per_row = 2 if len(report["methods"]) <= 6 else 1  # more bars than half a page can label
    with st.container(key=f"{key}_charts"):
        st.html(chart_rows_style(f"{key}_charts"))
        for i in range(0, len(charts), per_row):
            for j, (column, chart) in enumerate(zip(st.columns(per_row), charts[i:i + per_row])):
                sweep_chart = report.get("sweep") and i + j == 0  # figures puts the sweep's first
                column.caption(chart_caption(chart, SWEEP_TABLE if sweep_chart else TABLE_BELOW))
                column.plotly_chart(chart, key=f"{key}_chart_{i + j}")
    if report.get("sweep"):
        with st.expander("The sweep chart's points as a table"):
            st.table(common.as_typed(sweep_table(report["sweep"])), hide_index=True)
    st.caption("The table holds every figure the charts show, rounded as they are; – where a method has none.")
    shown = shown_table(report)
    st.table(common.as_typed(shown), hide_index=True)
    with st.expander("What the columns mean"):
        headings = shown_columns(report)
        st.markdown("\n".join(f"- **{headings[column]}**: {meaning}" for column, _, _, meaning in COLUMNS
                               if headings[column] in shown.columns))
    if any(m.get("tokens_per_call") is None for m in report["methods"].values()):
        st.caption("Tokens per call: left out for beam search in this older run, which counted every live beam's "
                   "token (its width a call) rather than its answer's; every other method counts its answer's "
                   "tokens.")
    oracle = report.get("oracle_tokens_per_call") or {}
    if oracle:
        st.caption(common.md_escape(oracle_text(oracle, report.get("oracle_left_out"))))


def oracle_text(oracle: dict[str, float], left_out: object = None) -> str:
    """What the oracle's tokens a call (bench: no model called, the reference answers written) say. They were called
    "an upper bound on tokens per call" beside methods that measured more (retrosynthesis pointer drafts 2.35 a call
    against 1.98): the model's own answers are not the references, and copy more of the query or less."""
    bounds = ", ".join(f"{oracle_label(k)} {v:.2f}" for k, v in oracle.items())
    skipped = (f" ({_count(left_out, 'query', 'queries')} whose reference is no SMILES left out)"
               if isinstance(left_out, int) and left_out else "")
    return (f"Tokens a call if the model wrote each query's reference answer and each drafter drafted for it{skipped}: "
            f"{bounds}. The model's own answers are not the references and may copy more of the query or less, so a "
            "method's measured tokens/call can be above its figure here. The best query window is an ideal drafter "
            "that copies, at each step, the stretch of the query that matches the reference longest: the most one "
            "draft of up to 16 tokens gives on the references.")


def main() -> None:
    cfg = common.settings()
    st.title("Benchmarks")
    st.caption("Every method on the same queries in one process, interleaved after warm-up: speed is the "
               "ratio of total times measured side by side, accuracy is top-1 against the reference.")

    common.section("Saved runs")
    folder = bench_dir()
    reports, problems = load_reports(folder)
    for problem in problems:
        st.warning(common.md_escape(problem), icon=":material/warning:")
    if not reports:
        st.info("No benchmark results yet. Save one with `molspec bench ... --out bench/NAME.json` "
                "and it appears here.", icon=":material/info:")
    else:
        titles = report_titles(reports)  # a file name was cut off on a phone before its telling end
        order = headline_first(reports)
        if st.session_state.get(SAVED_RUN) not in reports:  # none chosen yet, or its file has gone
            st.session_state[SAVED_RUN] = order[0]
        name = st.selectbox("Benchmark run", order, format_func=titles.get, **common.kept(SAVED_RUN, "bench_file"))
        show_report(reports[name], key="saved", source=name)

    common.section("Live benchmark")
    if cfg.model_dir is None and common.models_for_task(cfg.task):
        st.error(common.NOT_LOADED, icon=":material/error:")
        return
    if cfg.model_dir is None:
        st.warning(common.md_escape(common.no_model_text(cfg.task)), icon=":material/warning:")
        return
    with st.form("live_bench"):
        st.caption("Runs the textbook examples on this machine with the sidebar's model, method settings and "
                   "arithmetic. A handful of queries gives a rough picture only; saved runs use hundreds.")
        if cfg.augment > 1:  # run_bench reads the one writing it is given
            st.caption(f"It reads each query in one writing: the sidebar's \"Read the query in {cfg.augment} "
                       "writings\" does not apply to benchmarks, saved or live.")
        # The choices are kept across page switches (kept_in_form): they came back on their defaults, under the
        # report of a run they did not make.
        n_queries = st.slider("Example queries", 1, len(common.load_examples()),
                              key=common.kept_in_form("bench_queries", 3))
        drafts_by_model = cfg.predictor().draft_model is not None  # the sidebar offers the draft model's methods so
        choices = [m for m in common.method_order()
                   if m != "greedy" and (METHODS[m].drafts != "model" or drafts_by_model)]
        methods_key = common.kept_in_form("bench_methods", [m for m in LIVE_DEFAULT_METHODS if m in choices])
        methods = st.multiselect("Methods (greedy always runs as the reference)", choices, key=methods_key,
                                 format_func=common.method_label)
        unset = unset_knobs_note(cfg, choices)
        if unset:
            st.caption(common.md_escape(unset))
        submitted = st.form_submit_button("Run live benchmark", type="primary", icon=":material/play_arrow:")
    baselines = [common.method_label(m) for m in methods if m in METHODS and METHODS[m].benchmark_only]
    if submitted and baselines and cfg.dtype != "float32":  # the engine refused them by their ids, saying to time
        # them "with the model in float32", which the page sets with the sidebar's switch
        it = "it" if len(baselines) == 1 else "them"
        st.error(common.md_escape(f"The live benchmark cannot run {common.in_words(baselines)} in int8 arithmetic: "
                                  f"{'it recomputes' if it == 'it' else 'they recompute'} every prefix in torch, in "
                                  f"float32. To time {it}, turn off \"{common.INT8_LABEL}\" in the sidebar, or leave "
                                  f"{it} out. Saved results above are unaffected."), icon=":material/error:")
    elif submitted:
        st.session_state[LIVE_UNFINISHED] = True
        try:
            live = run_live(cfg, n_queries, ["greedy"] + [m for m in methods if m in METHODS])
        except ValueError as exc:  # a method this model, so loaded, cannot run
            st.error(common.md_escape(f"The live benchmark cannot run: {exc}. Saved results above are unaffected."))
        except Exception:  # noqa: BLE001
            log.exception("live benchmark failed")
            st.error("The live benchmark failed; saved results above are unaffected.")
        else:
            if live is not None:
                st.session_state["live_report"] = live
        del st.session_state[LIVE_UNFINISHED]
    elif st.session_state.pop(LIVE_UNFINISHED, False):
        st.info("The last live run was stopped before it ended (Stop, leaving the page, or changing anything outside "
                "its form, in the sidebar too, ends it), so it made no report; press Run live benchmark to run it "
                "again." + (" The report below is from the run before it." if "live_report" in st.session_state
                            else ""), icon=":material/info:")
    live = st.session_state.get("live_report")
    if live is not None:
        st.caption("The last live run of this session:")
        show_report(with_display_fields(copy.deepcopy(live)), key="live")
        task = re.sub(r"[^\w-]+", "_", str(live.get("task", "")))  # a file name: the model's config says the task
        st.download_button("Download live report (JSON)", data=json.dumps(live, indent=2),
                           file_name=f"live-bench-{task}.json", mime="application/json", on_click="ignore",
                           icon=":material/download:")


if __name__ == "__main__":  # Streamlit runs a page as __main__; tests import its functions
    main()
