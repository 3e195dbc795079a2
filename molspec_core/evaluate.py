"""Top-k accuracy of a model on parallel source/target files."""
from __future__ import annotations

import hashlib
import importlib.metadata
import itertools
import json
import logging
import math
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from .calibration import is_count
from .chem import CXSMILES, canonical_or_none
from .known import read_known
from .limits import abandon_when
from .methods import METHODS, method as method_row
from .service import DEFAULT_BATCH_SIZE, PartlyDecoded, Predictor, QueryResult, windows

log = logging.getLogger(__name__)


def _read_lines(path: Path) -> list[str]:
    """A text file's lines (.gz and .xz too, in any case), read within the input limits of io.py, split as predict
    splits a TXT file: at line breaks only, a line ending \r\r\n ending once (io.parse_queries), blank lines after
    the last one dropped (a final line break ends the last line, and an extra one is not one more query). A file that
    cannot be read is a ValueError naming it, as is '-', which predict reads as standard input: a report names its
    files, and the queries' and the targets' are two."""
    from .io import read_text, text_lines

    if str(path) == "-":
        raise ValueError("'-' (standard input) is not read here: give the file's name")
    # io.text_lines, not io.parse_queries: that stops at io.MAX_INPUT_ROWS, and a prepare-data train file of
    # 272,552 lines is evaluated to mine hard examples (tools/hard_examples.py)
    try:
        return text_lines(read_text(path).replace("\r\r\n", "\r\n"))
    except OSError as exc:  # missing, unreadable
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_index(path: Path, n_lines: int, src: Path) -> list[int]:
    """0-based line numbers of src from an index file, each one checked: a -1 would otherwise pick the
    last line without a word, as Python's negative indexing does, and a number given twice would count its
    query twice in every top-k (and in compare's McNemar counts)."""
    numbers = []
    first_on: dict[int, int] = {}  # each number: the index line that gave it first
    for line_no, line in enumerate(_read_lines(path), start=1):
        for word in line.split():
            try:
                number = int(word)
            except ValueError:
                raise ValueError(f"{path}, line {line_no}: {word[:40]!r} is not a line number") from None
            if not 0 <= number < n_lines:
                raise ValueError(f"{path}, line {line_no}: line number {number} is not among the 0-based "
                                 f"lines 0..{n_lines - 1} of {src}")
            if number in first_on:
                raise ValueError(f"{path}, line {line_no}: line number {number} is given again (first on line "
                                 f"{first_on[number]}); each query is evaluated once, so give each number once")
            first_on[number] = line_no
            numbers.append(number)
    if not numbers:
        raise ValueError(f"{path} selects no lines: it holds no line numbers")
    return numbers


def read_pairs(src: str, tgt: str | None, index: str | None = None,
               limit: int | None = None) -> tuple[list[str], list[str] | None]:
    """Sources (and targets), optionally selected by a 0-based line-number index file, first `limit`. A selected
    target with whitespace inside is refused (check_target)."""
    return read_selected(src, tgt, index, limit)[1:]


def read_selected(src: str, tgt: str | None, index: str | None = None,
                  limit: int | None = None) -> tuple[list[int], list[str], list[str] | None]:
    """read_pairs, with the 0-based line numbers of src that the sources were read from first."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be 1 or more, not {limit}")
    sources = _read_lines(Path(src))
    if not sources:
        raise ValueError(f"{src} is empty: it needs one query per line")
    targets = _read_lines(Path(tgt)) if tgt else None
    if targets is not None and len(targets) != len(sources):
        raise ValueError(f"{src} has {len(sources)} lines but {tgt} has {len(targets)}")
    lines = read_index(Path(index), len(sources), Path(src)) if index else range(len(sources))
    lines = lines[:limit] if limit is not None else lines
    if targets is not None:
        for i in lines:
            check_target(targets[i], tgt, i + 1)
        targets = [targets[i] for i in lines]
    return list(lines), [sources[i] for i in lines], targets


def check_target(target: str, tgt: str, line_no: int) -> None:
    """Refuse a recorded answer with whitespace inside, as a query with one is refused (service): RDKit would read
    its first token alone, the rest as a name, so a tokenized file's 'C C ( = O ) O' was scored as methane, and a
    file of them as 0% with every target readable. Its tokens are not joined here, since its query would need the
    same, and a query is never rewritten. A CXSMILES (a SMILES, a space, its |...| part) is read as a query is
    (hits)."""
    if any(ch.isspace() for ch in target.strip()) and not CXSMILES.fullmatch(target.strip()):
        raise ValueError(f"{tgt}, line {line_no}: {target.strip()[:60]!r} holds a space, and a SMILES has none; a "
                         "tokenized file (the Molecular Transformer's, tokens split by spaces) needs its tokens joined "
                         "first, in the queries' file too (e.g. sed 's/ //g')")


def prepared_task(src: str) -> str | None:
    """The task a prepare-data folder's stats.json says its files are for ('forward', 'retro'), where src
    lies in such a folder; None for other files (and a stats.json that says no task)."""
    if src == "-":
        return None
    try:
        stats = json.loads((Path(src).parent / "stats.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    task = stats.get("task") if isinstance(stats, dict) else None
    return task if isinstance(task, str) else None


def hits(predicted: Sequence[str], target: str) -> list[bool]:
    """Per rank, whether the prediction equals the target after canonicalization, the target read as a query and
    a known answer are (known.read_known: a SMILES, a CXSMILES or an InChI)."""
    want = read_known(target)
    return [want is not None and canonical_or_none(p) == want for p in predicted]


def unreadable_targets(targets: Sequence[str]) -> int:
    """How many targets RDKit cannot read (hits reads none of them right), or a ValueError where none can be read:
    every answer would be scored wrong, whatever the model said."""
    unreadable = sum(read_known(target) is None for target in targets)
    if targets and unreadable == len(targets):
        raise ValueError(f"none of the {len(targets)} targets is a SMILES RDKit reads (the first: "
                         f"{targets[0][:60]!r}), so every query would be a miss: check the targets' file")
    return unreadable


def check_method(method: str, n_best: int) -> None:
    """Refuse a method that cannot give n_best answers, rather than evaluate another one in its place."""
    if n_best > 1 and not method_row(method).many:
        many = ", ".join(name for name, row in METHODS.items() if row.many)
        raise ValueError(f"{method} returns one answer, so it has no top-{n_best}: use --n-best 1, or one of {many}")


def evaluate(predictor: Predictor, sources: list[str], targets: list[str], n_best: int, method: str = "beam",
             batch_size: int = DEFAULT_BATCH_SIZE, progress: bool = True, lines: Sequence[int] | None = None,
             earlier: dict | None = None, **options) -> dict:
    """Top-1..n_best accuracy in the model's own order (comparable with the papers), and as the app ranks
    the answers (`ranked_top*`: sane answers first, see service.rank_answers); options (draft_len, n_drafts,
    sampling) go to Predictor.predict. `lines`: the 0-based line of its file each source was read from
    (read_selected), by which a refused query is named beside its place among those evaluated. A ValueError, and no
    report, where nothing could be scored: every target unreadable (before decoding) or every query refused, as
    predict fails a file whose every query is refused.
    Stopped part way (Ctrl-C, SIGTERM, a failure), what it raises carries the report of the first queries scored
    before the stop (a Ctrl-C or SIGTERM ends the batch being decoded and keeps those done: predict_window), as its
    `partial_report` (marked partial: PARTIAL), or None where none was: the caller keeps it.
    `earlier`: such a report of these queries (the caller checked that it is: resume_refusal), whose queries are kept
    and not decoded again; the rest are decoded in the windows of a whole run, and the report is a whole run's."""
    check_method(method, n_best)
    if not sources or len(targets) != len(sources):
        raise ValueError(f"evaluation needs as many targets as queries, at least one; got {len(sources)} queries "
                         f"and {len(targets)} targets")
    first, marks, refused, unlisted = _kept(earlier)
    # a target RDKit cannot read is a miss whatever the model answers (hits): counted, so a file's own faults
    # are told apart from the model's
    unreadable_targets(targets)
    done = scored = len(first["top"])  # the first queries done: what a report counts
    # the bar starts at the queries kept, so that its rate and time left are this run's: windows' own bar counted
    # them as decoded now, and a run resumed after 4,500 of 5,007 queries promised its end in seconds
    bar = tqdm(total=len(sources), initial=done, desc="evaluate", unit="query", disable=not progress)
    try:
        for window in windows(len(sources), batch_size, "evaluate", False,  # predict batches a window by length
                              options.get("augment", 1)):
            if window.stop <= done:  # kept from the earlier run
                continue
            window = slice(max(window.start, done), window.stop)
            results, stop = window_results(predictor, sources[window], method=method, n_best=n_best,
                                            batch_size=batch_size, **options)
            for number, result, target in zip(range(window.start + 1, window.stop + 1), results, targets[window]):
                line = lines[number - 1] + 1 if lines is not None else None
                _score(result, target, n_best, number, line, first, marks, refused)
            scored = window.start + len(results)
            bar.update(len(results))
            if stop is not None:
                raise stop
    except BaseException as stopped:  # the queries scored are not lost with it (the caller writes them)
        stopped.partial_report = (dict(_report(first, marks, refused, targets[:scored], n_best, method, unlisted),
                                       **{PARTIAL: {"of_n": len(sources), "stopped_by": type(stopped).__name__,
                                                    "decoded_left_out": getattr(stopped, "left_out", 0)},
                                          "partial_counts": PARTIAL_COUNTS})
                                  if scored else None)
        raise
    finally:
        bar.close()
    if len(refused) + unlisted == len(sources):  # a report of 0% would read as the model's accuracy
        stopped = sum(marks[TIMED_OUT_COUNT])
        each = ("each was stopped by the time limit" if stopped == len(sources) else "each was refused, or "
                f"stopped by the time limit ({stopped} of them)" if stopped else "each was refused")
        if len(sources) == 1:
            raise ValueError(f"the one query could not be evaluated: it {each.removeprefix('each ')} "
                             f"({refused[0]['error']})")
        raise ValueError(f"none of the {len(sources)} queries could be evaluated: {each} (the first: "
                         f"{refused[0]['error']})")
    return _report(first, marks, refused, targets, n_best, method, unlisted)


MARK_RATES = {"invalid": "invalid_smiles_rate", "flagged": "flagged_rate", "repeated": "repeated_rate"}  # _report's
TIMED_OUT_COUNT = "timed_out"  # a report's count, among its query_errors, of those the time limit stopped
# (QueryResult.timed_out)


def _kept(earlier: dict | None) -> tuple[dict[str, list[int | None]], dict[str, list[bool]], list[dict], int]:
    """evaluate's per-query lists (_score) at its start: empty, or those of an earlier report's queries (a stopped
    run's, resumed), with the count of its refused queries beyond the ten it lists."""
    # per query, in order: its first right place (1-based; None: not among the answers, or refused) in both orders,
    # what compare_reports tests two models on, query by query; and what its first answer was
    first: dict[str, list[int | None]] = {"top": [], "ranked_top": []}
    marks: dict[str, list[bool]] = {name: [] for name in (*MARK_RATES, TIMED_OUT_COUNT)}
    refused: list[dict] = []  # each refused query's place among those evaluated (1-based) and why
    if earlier is None:
        return first, marks, refused, 0
    n = earlier["n"]
    first = {"top": list(earlier["first_right"]["model_order"]),
             "ranked_top": list(earlier["first_right"]["app_order"])}
    for name, rate in MARK_RATES.items():  # a report keeps rates, not per-query marks: _report reads only the counts
        count = round(earlier[rate] * n)
        marks[name] = [True] * count + [False] * (n - count)
    stopped = earlier.get(TIMED_OUT_COUNT, 0)  # a report from before it was counted: none told apart
    marks[TIMED_OUT_COUNT] = [True] * stopped + [False] * (n - stopped)
    refused = [dict(query) for query in earlier["query_error_examples"]]
    return first, marks, refused, earlier["query_errors"] - len(refused)


def resume_problem(report: dict) -> str | None:
    """What keeps an evaluate report (report_problem passed) from being one a run can go on from, or None: it is not
    a stopped run's (PARTIAL), or its counts do not fit its n (edited by hand)."""
    if not isinstance(report.get(PARTIAL), dict):
        return "it is the report of a whole run: nothing is left to evaluate"
    n = report["n"]
    places = report.get("first_right")
    if not isinstance(places, dict) or any(len(places.get(order, ())) != n for order in ORDERS):
        return f"its per-query places (first_right) are not {n} per order"
    if not all(isinstance(report.get(rate), (int, float)) and 0 <= report[rate] <= 1 for rate in MARK_RATES.values()):
        return "its rates (" + ", ".join(MARK_RATES.values()) + ") are not each a number from 0 to 1"
    examples = report.get("query_error_examples")
    if (not isinstance(examples, list) or not all(isinstance(query, dict) and is_count(query.get("query"))
                                                  for query in examples)
            or not isinstance(report.get("query_errors"), int) or not len(examples) <= report["query_errors"] <= n
            or not isinstance(report.get(TIMED_OUT_COUNT, 0), int)
            or not 0 <= report.get(TIMED_OUT_COUNT, 0) <= report["query_errors"]):
        return "its refused queries (query_errors, timed_out, query_error_examples) do not fit its n"
    return None


PARTIAL = "partial"  # in a report of the queries scored before a stop: how many were asked for, and what stopped it
PARTIAL_COUNTS = ("of_n: the queries asked for, of which n, the first, were scored before the stop (stopped_by); "
                  "decoded_left_out: queries after those whose batch was decoded by then too (predict decodes a "
                  "window of queries by length), left out so that the report is of the first n, as a run of "
                  "--limit n is")


def window_results(predictor: Predictor, queries: list[str], **options
                   ) -> tuple[list[QueryResult], BaseException | None]:
    """predict_window's results, and None; or, where it was stopped, the results of the window's first queries done
    by then (its `finished`: none, unless a Ctrl-C or SIGTERM ended the window) and the stop, for the caller to raise
    once it has used them."""
    try:
        return predict_window(predictor, queries, **options), None
    except BaseException as stop:
        return list(getattr(stop, "finished", ())), stop


def predict_window(predictor: Predictor, queries: list[str], **options) -> list[QueryResult]:
    """predictor.predict(queries, **options) for a caller that streams a file a window at a time (evaluate,
    calibrate, the command line's predict), where Ctrl-C or SIGTERM (their handlers set in Python, in the main thread:
    scale.stop_handlers) ends the window at its next decoder step, not where it stands (which lost every batch of the
    window decoded by then, up to 256 queries), and is then raised as its handler raises it (KeyboardInterrupt; the
    command line's Terminated) with, as its `finished`, the results of the window's first queries that were done, in
    order. predict decodes a window's queries in order of their length, so the queries after the first one not done
    are left out, done or not (as its `left_out`: how many were done): a report is of a file's first queries, as a
    run of --limit is. A second signal stops at once, and the window is lost."""
    from .scale import handled_by, stop_handlers

    held = stop_handlers()
    noted: list[int] = []

    def note(signum: int, frame: object) -> None:
        if noted:  # asked again: at once, as before
            held[signum](signum, frame)
        noted.append(signum)
        log.warning("stopping once the batch being decoded ends, keeping the queries done (again to stop at once)")

    abandoned: PartlyDecoded | None = None
    with handled_by(note, held):
        try:
            with abandon_when(lambda: f"stopped by {signal.Signals(noted[0]).name}" if noted else None):
                results = predictor.predict(queries, **options)
        except PartlyDecoded as stop:
            if not noted:
                raise
            abandoned = stop
    if not noted:
        return results
    done = list(abandoned.finished) if abandoned is not None else results
    kept = list(itertools.takewhile(lambda result: result is not None, done))
    try:
        signal.raise_signal(noted[0])  # its own handler, put back: the stop it makes
        if abandoned is not None:  # a handler that raised nothing, and the window given up: it is not whole
            raise abandoned
    except BaseException as stop:
        stop.finished, stop.left_out = kept, sum(result is not None for result in done) - len(kept)
        raise
    return results


def _score(result: QueryResult, target: str, n_best: int, number: int, line: int | None,
           first: dict[str, list[int | None]], marks: dict[str, list[bool]], refused: list[dict]) -> None:
    """One query's outcome, added to evaluate's per-query lists (`number`: its place among those evaluated; `line`:
    its 1-based line in its file, where known)."""
    if not result.ok:
        stopped = result.timed_out
        refused.append({"query": number, **({"line": line} if line is not None else {}), "error": result.error,
                        **({TIMED_OUT_COUNT: True} if stopped else {})})
        for name in first:
            first[name].append(None)
        for name in marks:
            marks[name].append(name == TIMED_OUT_COUNT and stopped)
        return
    marks[TIMED_OUT_COUNT].append(False)
    model_order = result.in_model_order()
    marks["invalid"].append(bool(model_order) and not model_order[0].valid)
    marks["flagged"].append(bool(model_order) and model_order[0].valid and not model_order[0].sane)
    marks["repeated"].append(any(p.spellings > 1 for p in result.predictions))
    # In the model's order a place is one in its beam (a folded repeat kept its first spelling's
    # model_rank: service.fold_repeats), among its own first answers (those set aside included);
    # in the app's order, one in the list it shows.
    own = [p.model_rank - 1 for p, hit in zip(model_order, hits([p.smiles for p in model_order], target)) if hit]
    places = {"top": own, "ranked_top": [k for k, hit in enumerate(hits([p.smiles for p in result.predictions],
                                                                         target)) if hit]}
    for name, found in places.items():
        first[name].append(min(found) + 1 if found and min(found) < n_best else None)


def _report(first: dict[str, list[int | None]], marks: dict[str, list[bool]], refused: list[dict],
            targets: list[str], n_best: int, method: str, unlisted: int = 0) -> dict:
    """The report of the first len(targets) queries' outcomes (_score): each top-k counted from their places.
    `unlisted`: refused queries among those of an earlier report (_kept) that `refused` does not hold."""
    n = len(targets)
    refused = [query for query in refused if query["query"] <= n]
    report = {f"{name}{k}": sum(place is not None and place <= k for place in places[:n]) / n
              for name, places in first.items() for k in range(1, n_best + 1)}
    report.update(n=n, n_best=n_best, method=method, invalid_smiles_rate=sum(marks["invalid"][:n]) / n,
                  flagged_rate=sum(marks["flagged"][:n]) / n, repeated_rate=sum(marks["repeated"][:n]) / n,
                  query_errors=len(refused) + unlisted, timed_out=sum(marks[TIMED_OUT_COUNT][:n]),
                  query_error_examples=refused[:10],
                  unreadable_targets=sum(read_known(target) is None for target in targets),
                  invalid_smiles_rate_counts="the model's top-1 answers that RDKit rejects / n",
                  flagged_rate_counts="the model's top-1 answers that are valid but not sane "
                                      "(chem.answer_concerns) / n",
                  repeated_rate_counts="the queries whose answers include one the model spelled twice "
                                       "(service.fold_repeats) / n",
                  unreadable_targets_counts="the queries whose recorded target RDKit cannot read (each a miss "
                                            "in every top-k)",
                  timed_out_counts="of query_errors, the queries the time limit (time_limit_s) stopped before "
                                   "their search ended, with or without answers found by then: not refused, only "
                                   "slow (each a miss in every top-k; a longer limit decodes them whole)",
                  query_error_examples_counts="the first ten refused queries (each a miss in every top-k): its place "
                                              "among those evaluated (1-based, after --index and --limit), its line "
                                              "in --src (1-based) and why (timed_out: the time limit stopped it)",
                  first_right={"model_order": first["top"][:n], "app_order": first["ranked_top"][:n]},
                  first_right_counts="per query, in order: the first place (1-based) holding the right answer, "
                                     "null where none of the n_best does or the query was refused")
    return report


SELECTION = ("src", "tgt", "index", "limit")  # what a report records of the queries it was run on (cmd_evaluate)
ORDERS = ("model_order", "app_order")  # first_right's orders: the report's top* and ranked_top* figures
# What a report records of how, and by what code, its answers were decoded (cmd_evaluate), beside n_best: what compare
# names where two reports differ. The model is left out: two models are what compare is for.
SETTINGS = ("method", "augment", "engine", "dtype", "device", "drafter", "draft_len", "n_drafts", "sampling",
            "time_limit_s", "batch_size", "version", "commit")


# What a run that goes on from a stopped report may change (cmd_evaluate says so, and the report's "resumed" keeps the
# stopped run's): the batch size, which changes no answer but at a near-tie and is what a run stopped out of memory
# must change, and the code, since a run is not decoded again for an update.
RESUME_MAY_DIFFER = ("batch_size", "version", "commit")
# What a stopped report must share with the run that goes on from it (resume_refusal), besides its model's weights and
# its queries: what decides each query's answers, as cmd_evaluate records them, and --limit.
RESUMED = ("n_best", *(key for key in SETTINGS if key not in RESUME_MAY_DIFFER), "limit")


def resume_refusal(earlier: dict, now: dict, of_n: int) -> str | None:
    """Why the run described by `now` (its record of its own first earlier['n'] queries) cannot go on from the
    stopped report `earlier`, in words naming each difference, or None."""
    differ = [f"{key} {earlier.get(key)!r} against {now.get(key)!r}" for key in RESUMED
              if earlier.get(key) != now.get(key)]
    if earlier.get("weights") != now.get("weights"):
        differ.append(f"the model's weights ({str(earlier.get('weights'))[:12]} against {str(now['weights'])[:12]})")
    if earlier.get("queries_sha256") != now.get("queries_sha256"):
        differ.append(f"the first {earlier['n']} queries (--src, --tgt, --index: a file changed, or other files)")
    if earlier[PARTIAL].get("of_n") != of_n:
        differ.append(f"the number of queries ({earlier[PARTIAL].get('of_n')!r} against {of_n})")
    return "; ".join(differ) or None


def software() -> dict[str, str | None]:
    """What code wrote a report: the molspec package's version, and the commit of the git checkout this module runs
    from (ending -dirty where files differ from it); None where either cannot be told (no installed metadata, no
    git or no checkout)."""
    try:
        version: str | None = importlib.metadata.version("molspec")
    except importlib.metadata.PackageNotFoundError:
        version = None
    try:
        described = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40"], capture_output=True,
                                   text=True, timeout=10, cwd=Path(__file__).resolve().parent)
        commit = described.stdout.strip() if described.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"version": version, "commit": commit or None}


def setting_differences(a: dict, b: dict) -> list[str]:
    """How two reports' runs differ, in words: n_best first (compare_reports reads both up to the smaller one, so the
    longer list's last places are left out), then each of SETTINGS that both record."""
    differ = []
    if a.get("n_best") != b.get("n_best"):
        low, high = sorted((a["n_best"], b["n_best"]))
        left_out = f"top-{high}" if high == low + 1 else f"top-{low + 1} to top-{high}"
        differ.append(f"n_best {a['n_best']} against {b['n_best']} (compared up to top-{low}; {left_out} left out)")
    differ += [f"{key} {a[key]!r} against {b[key]!r}" for key in SETTINGS
               if key in a and key in b and a[key] != b[key]]
    return differ


def queries_digest(sources: list[str], targets: list[str]) -> str:
    """What identifies the queries evaluated, wherever their files lie: sha256 of the selected lines."""
    return hashlib.sha256("\n".join(sources + ["\0"] + targets).encode()).hexdigest()


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p: under "neither model is better" each query right with one model only is
    a fair coin's toss between them (binomial, n = only_a + only_b, p = 1/2)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    # each term in logs: the exact integer sum took minutes at tens of thousands of queries (17,000 / 20,000)
    log_terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
                 for i in range(min(only_a, only_b) + 1)]
    top = max(log_terms)
    return min(1.0, 2 * math.exp(top) * sum(math.exp(t - top) for t in log_terms))


def report_problem(report: dict) -> str | None:
    """What keeps a JSON object from being an evaluate report that compare_reports can read (one edited by
    hand, or of an older format), or None: n and n_best whole numbers from 1, and first_right, where
    given, a list of places per order, each null or a whole number from 1 to n_best (compare_reports counts them
    against n once it knows the two reports are on the same queries). A report without first_right is
    one from before it was kept: compare_reports asks for it to be evaluated again."""
    for key in ("n", "n_best"):
        if key not in report:
            return f"missing {key!r}"
        if not is_count(report[key]):
            return f"{key!r} is {report[key]!r:.40}, not a whole number from 1"
    if "first_right" not in report:
        return None
    places = report["first_right"]
    if not isinstance(places, dict):
        return f"'first_right' is {places!r:.40}, not the per-query places of each order"
    for order in ORDERS:
        ranks = places.get(order)
        if not isinstance(ranks, list):
            return f"first_right {order!r} is {ranks!r:.40}, not a list of per-query places"
        wrong = next((rank for rank in ranks if rank is not None and not is_count(rank)), None)
        if wrong is not None:
            return f"first_right {order!r} holds {wrong!r:.40}, not a place (a whole number from 1, or null)"
        beyond = next((rank for rank in ranks if rank is not None and rank > report["n_best"]), None)
        if beyond is not None:  # evaluate writes null there: compare would count it a miss beside a top-k of a hit
            return f"first_right {order!r} holds place {beyond}, beyond its n_best {report['n_best']}"
    return None


def first_queries(report: dict, n: int, digest: str) -> dict | None:
    """The report cut to its first n queries (its per-query places), where those are the queries `digest` names
    (queries_digest), as its files tell: read again from the --src, --tgt, --index and --limit it records, which must
    still give its own digest. None where they do not, or cannot be read. A report is of its selection's first queries
    in order (a stopped run's too: evaluate's PARTIAL), so its first n are the queries of a run of --limit n."""
    if not all(isinstance(report.get(key), str) for key in ("src", "tgt", "queries_sha256")) or n > report["n"]:
        return None
    try:
        _, sources, targets = read_selected(report["src"], report["tgt"], report.get("index"), report.get("limit"))
    except (ValueError, TypeError):  # moved, changed so that it no longer reads, or a hand-edited selection
        return None
    whole = report["n"]
    if len(sources) < whole or queries_digest(sources[:whole], (targets or [])[:whole]) != report["queries_sha256"]:
        return None  # the files changed since the run: its places are of other queries
    if queries_digest(sources[:n], (targets or [])[:n]) != digest:
        return None
    return dict(report, n=n, queries_sha256=digest,
                first_right={order: report["first_right"][order][:n] for order in ORDERS})


def compare_reports(a: dict, b: dict) -> dict:
    """Two evaluation reports (evaluate's, with first_right) on the same queries, query by query: per
    order and k, each one's top-k, the queries right only with a and only with b, and McNemar's p. Where one report
    holds more queries, and its first ones are the other's (first_queries: a run stopped part way beside a whole one,
    or two runs of another --limit), those are compared, and the table says which report was cut ("cut": "a" or "b",
    "of_n": its queries)."""
    for name, report in (("first", a), ("second", b)):
        if "first_right" not in report:
            raise ValueError(f"the {name} report has no per-query results (first_right): evaluate it again")
        problem = report_problem(report)
        if problem:
            raise ValueError(f"the {name} report is not an evaluate report ({problem})")
    cut: dict = {}
    if isinstance(a.get("queries_sha256"), str) and isinstance(b.get("queries_sha256"), str) and a["n"] != b["n"]:
        (shorter, _), (longer, name) = sorted(((a, "a"), (b, "b")), key=lambda pair: pair[0]["n"])
        first = first_queries(longer, shorter["n"], shorter["queries_sha256"])
        if first is not None:
            cut = {"cut": name, "of_n": longer["n"]}
            a, b = (first, b) if name == "a" else (a, first)
    # the same queries: by their digest where both reports have one (files may move), else by file names
    same = ("n", "queries_sha256") if "queries_sha256" in a and "queries_sha256" in b else ("n", *SELECTION[:3])
    differ = [key for key in same if a.get(key) != b.get(key)]
    if differ:
        notes = [f"the {name} report is partial, stopped after {report['n']} of {report[PARTIAL].get('of_n')} "
                 "queries" for name, report in (("first", a), ("second", b)) if isinstance(report.get(PARTIAL), dict)]
        if "queries_sha256" in differ and not notes:  # two digests say nothing a user can act on: what differed
            runs = [f"--{key} {a.get(key)!r} against {b.get(key)!r}" for key in SELECTION if a.get(key) != b.get(key)]
            notes = [f"run on {'; '.join(runs)}" if runs else "run on the same --src, --tgt, --index and --limit: "
                     "a file changed between the two runs"]
        raise ValueError("the reports are not on the same queries: " +
                         ", ".join(f"{key} {a.get(key)!r} against {b.get(key)!r}" for key in differ) +
                         "".join(f" ({why})" for why in notes))
    n, n_best = a["n"], min(a["n_best"], b["n_best"])
    table: dict = {"n": n, "n_best": n_best, **cut}
    for order in ORDERS:
        ranks_a, ranks_b = a["first_right"][order], b["first_right"][order]
        if not len(ranks_a) == len(ranks_b) == n:
            raise ValueError(f"{order}: {len(ranks_a)} and {len(ranks_b)} per-query results for {n} queries")
        rows = []
        for k in range(1, n_best + 1):
            right_a = [r is not None and r <= k for r in ranks_a]
            right_b = [r is not None and r <= k for r in ranks_b]
            only_a = sum(x and not y for x, y in zip(right_a, right_b))
            only_b = sum(y and not x for x, y in zip(right_a, right_b))
            rows.append({"k": k, "a": sum(right_a) / n, "b": sum(right_b) / n, "only_a": only_a, "only_b": only_b,
                         "p": mcnemar_p(only_a, only_b)})
        table[order] = rows
    return table
