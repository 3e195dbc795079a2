"""Batch: a CSV, SMILES, SD or TXT file of queries in, every prediction out as a table, a safe CSV and an SD file.

Each row is predicted on its own so that its time is its own and the progress bar moves per row;
rows the engine rejects keep their place in the table with the reason, and the good rows go on. The rows are kept
in the session as they are made (Run), so that a run cut short keeps them and can go on; blank records are skipped
and counted apart from the queries.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import threading
import time
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.runtime.uploaded_file_manager import UploadedFile

from molspec_core.chem import ION_WRITINGS
from molspec_core.io import (CSV_SUFFIXES, DECOMPRESSORS, HEADER_ROWS, MACRO_WORKBOOK_SUFFIX, MAX_INPUT_BYTES,
                             MAX_INPUT_ROWS, MOLFILE_SUFFIX, OLD_WORKBOOK_SUFFIX, OPEN_DOCUMENT_SUFFIX, RESULT_COLUMNS,
                             RESULT_TYPES, SD_FILE_SUFFIXES, SMILES_FILE_SUFFIXES, WORKBOOK_SUFFIX, InputFileError,
                             QueryFile, csv_bytes, output_header, parse_upload, query_column, query_columns,
                             query_format, refuse_unnamed_results, result_rows, row_list, sd_bytes, several_molecules,
                             several_molecules_note, with_checker, with_model, workbook_bytes)
from molspec_core.known import (MATCHES_KNOWN, KnownMarks, KnownSummary, column_index, count_recorded, recorded_side,
                                 with_recorded)
from molspec_core.roundtrip import check_round_trip
from molspec_core.service import DEFAULT_TIME_LIMIT_S, TIMED_OUT, Predictor, QueryResult
from views import common
from views.common import TASK_LABELS, Settings

log = logging.getLogger(__name__)
# The app's row limit; the CLI takes up to MAX_INPUT_ROWS. 10,000 forward queries read in 5 writings take
# about 9 minutes with spec-auto and 35 with beam search 5 (int8, one CPU thread: 56 and 205 ms a query).
APP_MAX_ROWS = 10_000
# What the uploader offers: every file read_queries reads, and the old and LibreOffice workbooks it refuses saying
# what to save them as (the list was written out here and lacked .xlsm, which the CLI reads)
BATCH_FILE_TYPES = [suffix.lstrip(".") for suffix in (*CSV_SUFFIXES, ".txt", *SMILES_FILE_SUFFIXES, *SD_FILE_SUFFIXES,
                                                      MOLFILE_SUFFIX, WORKBOOK_SUFFIX, MACRO_WORKBOOK_SUFFIX,
                                                      OLD_WORKBOOK_SUFFIX, OPEN_DOCUMENT_SUFFIX, *DECOMPRESSORS)]
PROGRESS_EVERY_S = 0.25  # redraw the progress bar at most this often (10,000 redraws would slow the page)
WATCH_EVERY_S = 1.0  # how often a run's watcher looks whether the script run predicting it has ended (watch_run)
ION_WRITING_LABEL = "Read hydrides written as one species as ions"
HYDRIDES = ", ".join(ION_WRITINGS)  # [AlH4-] (LiAlH4), [NaH], [CaH2]
ION_LIST = "; ".join(f"{species} as {ions}" for species, ions in ION_WRITINGS.items())
# On screen the reason for a rejected row sits right after its query; the CSV keeps the CLI's order
# (molspec_core.io.output_header), and both put the input's other columns in front.
# Whole numbers that a rejected row leaves empty: pandas would make them floats (1.0 where the CLI writes 1). The
# engine's list (io.RESULT_TYPES): one written out here lacked writings_read, added since, which read 5.0.
COUNT_COLUMNS = tuple(name for name, kind in RESULT_TYPES.items() if kind is int)
# "valid" before "sane": an answer RDKit cannot read (ClC(Cl)(Cl)ClCl, a chlorine with two bonds) has no concerns, and
# showed as an unticked "sane" beside an empty "concerns" cell, with nothing on screen saying why
SCREEN_ORDER = ["row", "query", "rank", "smiles", "valid", "sane", "concerns", "confidence", "score", "error",
                "canonical_query", "time_ms", "model_calls", "accepted_tokens", "method", "dtype"]
ROUND_TRIP_COLUMNS = ["round_trip", "forward_prob"]  # on screen after confidence, where the sidebar's check ran
# What Streamlit's elements cannot say themselves, for keyboard and screen-reader users: its progress bars are named
# "progress" whatever their text says, so each is named by its text (aria-labelledby; the Routes and Benchmark pages'
# bars too, once this page has been opened). A press on Stop the batch or
# Continue dropped the focus to the top of the page, as Streamlit removes the button pressed; the focus either loses
# goes to the run's Stop button, or where no run goes on, to Continue, or where the run ended, to the results'
# Download CSV. A constant: no user text is in it.
KEYBOARD_AND_READER = """<script>
(() => {
  if (window.molspecBatchKeyboard) return;
  window.molspecBatchKeyboard = true;
  const RUN_BUTTONS = '[class*="st-key-batch_stop_"], [class*="st-key-batch_continue_button_"]';
  let left = null, lost = false;  // the run's button that has the focus; whether it went with the button
  document.addEventListener("focusin", (event) => {
    left = event.target.closest(RUN_BUTTONS) ? event.target : null;
    lost = false;
  });
  new MutationObserver(() => {
    document.querySelectorAll('[data-testid="stProgress"]').forEach((bar, n) => {
      const meter = bar.querySelector('[role="progressbar"]');
      if (!meter || bar.firstElementChild === meter) return;  // a bar with no text keeps its name
      bar.firstElementChild.id = `molspec-progress-text-${n}`;
      meter.setAttribute("aria-labelledby", bar.firstElementChild.id);
    });
    const unfocused = !document.activeElement || document.activeElement === document.body;
    if (left && !left.isConnected && unfocused) lost = true;
    if (!lost || !unfocused) return;
    const next = document.querySelector('[class*="st-key-batch_stop_"] button')
      || document.querySelector('[class*="st-key-batch_continue_button_"] button')
      || [...document.querySelectorAll('[data-testid="stDownloadButton"] button')]
        .find((button) => button.innerText.includes("Download CSV"));
    if (next) next.focus();  // its focusin forgets the button lost
  }).observe(document.body, {childList: true, subtree: true});
})();
</script>"""


def results_key(task: str) -> str:
    """The session key of a task's last batch: each task keeps its own, as the Predict page keeps its last query."""
    return f"batch_{task}"


def run_key(task: str) -> str:
    """The session key of a task's batch run while it is not finished (Run)."""
    return f"batch_run_{task}"


def continue_key(task: str) -> str:
    """The session key the Continue button sets for the next script run, which takes the run up."""
    return f"batch_continue_{task}"


@dataclass
class Run:
    """A batch run, kept in the session while its rows are made: a run cut short (the toolbar's Stop, the page's
    Stop button, another page opened, Run batch pressed again) keeps the rows it made, and continues from the next
    record (Continue, or Run batch on the same file and settings). predict_rows changes it in place, so that no
    session write stands between a row and its counts: Streamlit ends a stopped run inside its next st call.

    With fast reruns (Streamlit's default) a click starts the next script run on a thread of its own at once, while
    the last one runs on to its next st call, a prediction later: two threads hold the run. Whichever script run
    touched it last owns it (claim); the other's rows are not written, under the lock, so a row is never written
    twice nor a table built from rows half written."""
    source: tuple[object, ...]  # what the run was asked for: the file (name, content digest), the form, the settings
    file_name: str
    settings: Settings
    queries: QueryFile
    ion_writing: bool = False
    time_limit_s: float = DEFAULT_TIME_LIMIT_S  # each query's (the form's)
    known: str = ""  # the column of known answers: the form's, or the recorded outcomes' (with_recorded); not in
    # `source`: a column named after the run (or its stop) marks the rows done again, and they are not predicted again
    recorded: str = ""  # the column with_recorded added, where it added one
    table_hint: str = ""  # why the file looks like a table under a TXT name (table_hint), or ""
    rows: list[list[object]] = field(default_factory=list)  # result_rows of every record done, in order
    done: int = 0  # records done: predicted, rejected or blank
    blank: list[int] = field(default_factory=list)  # the record numbers of the blank ones among them
    rejected: list[int] = field(default_factory=list)  # the record numbers of the queries the engine refused (blank
    # records are not queries)
    stopped: list[int] = field(default_factory=list)  # those of the queries stopped at the time limit, answers kept
    unanswered: list[int] = field(default_factory=list)  # those the time limit stopped before any answer: not refused
    n_ion_refused: int = 0  # rejected rows that ion_writing would have read
    round_trip_failed: str = ""
    weights: str = ""  # the fingerprint of the model's weights that predicted its rows (Predictor.weights)
    round_trip_weights: str = ""  # that of the forward model that checked them round trip, where it loaded
    owner: object = None  # the token of the script run that last claimed the run: the only one that writes rows
    running: object = None  # the token of the script run predicting its rows now (predict_rows), or None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def total(self) -> int:
        return len(self.queries.queries)

    @property
    def n_rejected(self) -> int:
        return len(self.rejected)

    def claim(self) -> object:
        """Make the calling script run the run's only writer (an earlier one still running writes no more rows);
        its token, which predict_rows checks before each row."""
        token = object()
        with self.lock:
            self.owner = token
        return token


@dataclass(frozen=True)
class BatchResult:
    file_name: str
    settings: Settings
    table: pd.DataFrame  # one row per (query, rank); a rejected query has one row with `error`
    n_queries: int  # the queries among the records done (blank records are not queries)
    rejected: tuple[int, ...]  # the record numbers of the rejected queries
    ion_writing: bool = False  # hydrides written as one species were read as USPTO's ions
    n_ion_refused: int = 0  # rejected rows that ion_writing would have read
    known: KnownSummary | None = None  # how often the file's known answers came back, where it named a column
    recorded: str = ""  # the column with_recorded added (the recorded reactions' outcomes), where it added one
    n_recorded: int = 0  # queries read as recorded reactions whose outcome is a SMILES
    round_trip_failed: str = ""  # why the round-trip check could not run, where the settings asked for it
    blank: tuple[int, ...] = ()  # the record numbers of blank records, skipped
    done: int = 0  # the file's records done
    total: int = 0  # the file's records: more than `done` where the run was cut short
    table_hint: str = ""
    file_notes: tuple[str, ...] = ()  # what reading the file left out (io.QueryFile.notes: cells past the header)
    run: Run | None = field(default=None, repr=False, compare=False)  # the run it shows: a known-answer column
    # named after it marks its rows again (run_if_asked)
    stopped: tuple[int, ...] = ()  # the record numbers of the queries stopped at the time limit, answers kept
    several: tuple[tuple[int, str], ...] = ()  # retrosynthesis: (record number, canonical query) of each answered
    # query that service.several_products_note speaks of (io.several_molecules): several molecules, an ion alone, or
    # no carbon
    # the record numbers of the queries the time limit stopped before any answer (QueryResult.timed_out): slow, not
    # refused (they were counted and warned of as rejected, "the model rejected it", where a longer limit decodes them)
    unanswered: tuple[int, ...] = ()
    weights: str = ""  # the fingerprint of the model's weights (Predictor.weights), which the exports name
    round_trip_weights: str = ""  # that of the forward model that checked the answers round trip, where it loaded

    @property
    def n_rejected(self) -> int:
        return len(self.rejected)

    @property
    def model(self) -> tuple[str, str]:
        """The model the exports name (Settings.model_named)."""
        return self.settings.model_named(self.weights)

    @property
    def checker(self) -> tuple[str, str, int] | None:
        """The round-trip checker the exports name, or None (Settings.checker_named)."""
        return self.settings.checker_named(self.round_trip_weights)

    @property
    def n_predicted(self) -> int:
        """The queries with answers: neither rejected nor stopped before any (those stopped with answers count)."""
        return self.n_queries - self.n_rejected - len(self.unanswered)

    @functools.cached_property
    def csv(self) -> bytes:
        """The table's safe CSV, written once for these results: the page is drawn again at each click in the sidebar,
        and the CSV of 50,000 rows (10,000 queries, beam search 5) took seconds each time."""
        return safe_csv(self.table, self.model, self.checker)


def read_upload(name: str, data: bytes, column: str | None, task: str | None = None) -> QueryFile:
    """Queries of an uploaded file, read for `task` (a retrosynthesis file's product column, not its reactants:
    io.query_columns); raises InputFileError for a file that cannot be used whole."""
    if len(data) > MAX_INPUT_BYTES:  # the cheap check first; parse_upload counts decompressed bytes too
        raise InputFileError(f"{name} is larger than {MAX_INPUT_BYTES // 2**20} MB")
    queries = parse_upload(name, data, column or None, task=task)
    refuse_unnamed_results(queries, name)
    if not queries.queries:
        raise InputFileError(f"{name} holds no queries")
    if queries.n_blank() == len(queries.queries):  # a CSV whose query column is empty: nothing to predict
        raise InputFileError(f"{name} holds no queries: the query cell of each of its "
                             f"{len(queries.queries):,} records is empty")
    if len(queries.queries) > APP_MAX_ROWS:
        raise InputFileError(f"{name} has {len(queries.queries):,} rows; the app predicts at most {APP_MAX_ROWS:,} "
                             f"(the command line `molspec predict --input` takes up to {MAX_INPUT_ROWS:,})")
    return queries


def table_hint(name: str, queries: QueryFile, task: str) -> str:
    """Why a file read as TXT (a whole line a query) or as a SMILES file (a SMILES, then whitespace and a name) looks
    like a table, and what to save it as, or "": a CSV saved as .txt or .smi had every line rejected, its header
    too, with no word of why. Where no line names a query column, another suffix alone reads it no better: a
    tab-separated SMILES and name, per line, is a SMILES file (.smi), and a file of commas or semicolons needs a
    header line (the advice to save it as .tsv or .csv gave "the CSV needs a column named 'smiles'" next)."""
    kind = query_format(name)[1]
    lines = [line for line in queries.queries if line.strip()]
    if kind not in ("txt", "smi") or not lines:
        return ""
    read_as = "a TXT file, a whole line a query" if kind == "txt" else "a SMILES file, a SMILES and a name a line"
    names = {n.casefold() for n in query_columns(None, task)}
    separators = ((",", "a comma"), (";", "a semicolon"), ("\t", "a tab"))
    for separator, called in separators if kind == "txt" else separators[:2]:  # a SMILES file's names follow tabs
        headed = any(separator in line and {cell.strip().strip('"').casefold() for cell in line.split(separator)}
                     & names for line in lines[:HEADER_ROWS])
        if not headed and not all(separator in line for line in lines):
            continue
        seen = f"{name} is read as {read_as}, but its lines look like a table's (they hold {called})"
        if headed:
            suffix = ".tsv" if separator == "\t" else ".csv"
            return f"{seen}: save it with a {suffix} name and run it again, so that its query column is read."
        if separator == "\t":
            return (f"{seen}, and no line names a query column: where each line is a SMILES and then its name, save "
                    "it with a .smi name (a SMILES file) and run it again.")
        return (f"{seen}, and no line names a query column: give it a first line naming its columns (its SMILES "
                "column smiles), save it with a .csv name and run it again.")
    return ""


def predict_rows(run: Run, area: DeltaGenerator, stop: DeltaGenerator) -> bool:
    """Predict the run's records from the first not done, each on its own, into the run (its bar in `area`, its
    Stop button and watcher in the container `stop`); whether this script run did them all (False: a later one
    claimed the run meanwhile).
    A blank record is skipped (io.BLANK_RECORD: the model is not asked); rows the engine rejects keep their place
    with the reason.
    Retrosynthesis answers are checked round trip where the settings ask (Settings.round_trip_model), as on the
    Predict page; where the check cannot run, run.round_trip_failed says why, and the answers stand without it."""
    token = run.claim()
    run.running = token
    try:
        return _predict_rows(run, token, area, stop)
    finally:  # however it ends: Streamlit ends a stopped script run with a StopException at its next st call
        with run.lock:
            if run.running is token:
                run.running = None


def _predict_rows(run: Run, token: object, area: DeltaGenerator, stop: DeltaGenerator) -> bool:
    cfg, queries = run.settings, run.queries
    button = stop.empty()  # the run's Stop button, gone when the run ends
    with stop:  # its watcher beside it, in a block of its own: a fragment's block replaced by an element (the
        watch_run(run, token)  # emptied button) broke the page on the watcher's next run ("'setIn' cannot be called")
    predictor = cfg.predictor()
    run.weights = run.weights or predictor.weights  # those of its first rows, as a stopped run's exports named them
    forward = None
    if cfg.round_trip_model is not None:
        try:
            forward = cfg.predictor(cfg.round_trip_model)
            run.round_trip_weights = run.round_trip_weights or forward.weights  # as run.weights: its first rows'
        except Exception as exc:  # noqa: BLE001  (the answers stand without the check)
            log.exception("round-trip model failed to load")
            run.round_trip_failed = common.short(str(exc), 160)
    # an element, not a block: a block in `area` took the results' place child by child, which stayed on screen,
    # faded, under the bar (and their Download CSV took a click) until the run ended
    bar = area.progress(run.done / run.total, text=progress_text(run))
    # A click reruns the script, which ends this run at its next st call; the next run shows the rows done.
    button.button("Stop the batch", key=f"batch_stop_{cfg.task}", icon=":material/stop:",
                help="Stops after the row being predicted: the rows done are kept, and Continue takes up the rest.")
    drawn = time.monotonic()
    for i in range(run.done, run.total):
        query, problem = queries.queries[i], queries.problem_of(i)
        blank = queries.is_blank(i)
        if blank:
            result = QueryResult(query=query, method=cfg.method, error=problem)
        else:
            result = predict_one(predictor, forward, run, query)
        rows = result_rows(i + 1, queries.cells_of(i), result, problem=problem)
        # The row and its counts go in together, before the next st call (where a Stop ends the run)
        with run.lock:
            if run.owner is not token:
                return False
            run.rows.extend(rows)
            if blank:
                run.blank.append(i + 1)
            elif result.stopped_with_answers and not problem:
                run.stopped.append(i + 1)
            elif result.timed_out and not problem:
                run.unanswered.append(i + 1)
            elif problem or not result.ok:
                run.rejected.append(i + 1)
            run.n_ion_refused += bool(result.suggestion)
            run.done = i + 1
        if time.monotonic() - drawn > PROGRESS_EVERY_S or run.done == run.total:
            bar.progress(run.done / run.total, text=progress_text(run))
            drawn = time.monotonic()
    button.empty()
    return True


def cut_short(run: Run, token: object) -> bool:
    """Whether the script run that `token` names no longer predicts the run's rows: it ended without drawing its
    end (the toolbar's Stop ends it with no next script run), or a later script run took the run over."""
    return run.running is not token


@st.fragment(run_every=WATCH_EVERY_S)
def watch_run(run: Run, token: object) -> None:
    """A run's watcher, drawn with its progress bar: once the script run predicting it has ended, the whole page is
    drawn again, which shows where the run stopped and offers Continue. The toolbar's Stop ends a script run and
    starts none after it, and Streamlit calls no code of the page on a stop: the bar and the Stop button stood
    there, frozen, until the next click. Its timer ends with the next full script run (which draws no watcher)."""
    if cut_short(run, token):
        st.rerun(scope="app")


def predict_one(predictor: Predictor, forward: Predictor | None, run: Run, query: str) -> QueryResult:
    """One query's result, checked round trip where `forward` is given; a failure of the model is the row's error
    (bad input comes back in result.error; an exception is a bug), a failure of the check leaves the answers."""
    cfg = run.settings
    try:
        result = predictor.predict(query, **cfg.options(), ion_writing=run.ion_writing,
                                   time_limit_s=run.time_limit_s)
    except Exception as exc:  # noqa: BLE001
        log.exception("batch row failed")
        return QueryResult(query=query, method=cfg.method, error=f"the model failed ({type(exc).__name__}: "
                                                                  f"{common.short(str(exc), 160)})")
    if forward is not None and (result.ok or result.stopped_with_answers):  # a stopped query's answers are shown
        try:
            result = check_round_trip(result, forward, cfg.round_trip_k)
        except Exception as exc:  # noqa: BLE001  (this row's answers stand without the check)
            log.exception("round-trip check failed")
            run.round_trip_failed = run.round_trip_failed or common.short(str(exc), 160)
    return result


def progress_text(run: Run) -> str:
    """The bar's line: records, not predictions (a rejected or blank row is done, not predicted). The rows live in
    the browser tab's session: another page of the app keeps them, a reload or a closed tab starts a new session
    without them (the line said "leaving the page keeps the rows done", and a reload lost them all)."""
    apart = [f"{run.n_rejected:,} rejected"] if run.n_rejected else []
    apart += [f"{len(run.unanswered):,} stopped by the time limit"] if run.unanswered else []
    rejected = f" ({', '.join(apart)})" if apart else ""
    return (f"{common.md_escape(run.file_name)}: {run.done:,} of {run.total:,} rows done{rejected}. Stopping, or "
            "opening another page of the app, keeps the rows done; reloading or closing the tab loses them.")


def summarize(run: Run) -> BatchResult:
    """What the page shows of a run, finished or cut short: the table of the rows done, in the shared output's
    columns (the CLI writes the same), and their counts; where the run names a known-answer column
    (known.column_index), how often its answers came back, the table then ending with MATCHES_KNOWN."""
    with run.lock:  # the rows and counts of the same records
        rows, done, blank = list(run.rows), run.done, tuple(run.blank)
        rejected, n_ion_refused, round_trip_failed = tuple(run.rejected), run.n_ion_refused, run.round_trip_failed
        stopped, unanswered, weights = tuple(run.stopped), tuple(run.unanswered), run.weights
        round_trip_weights = run.round_trip_weights
    queries = run.queries
    header, summary = output_header(queries.columns), None
    several = several_molecule_queries(rows, len(queries.columns)) if run.settings.task == "retro" else ()
    if run.known:
        # the input's columns lead; the answers matched as the model writes them (its own task, as with_recorded)
        marks = KnownMarks(header, queries.columns.index(run.known), run.known, run.settings.predictor().task)
        header, rows, summary = marks.header, list(marks.rows(rows)), marks.summary()
    types = {**dict.fromkeys(COUNT_COLUMNS, "Int64"), **({MATCHES_KNOWN: "boolean"} if run.known else {})}
    table = pd.DataFrame(rows, columns=header).astype(types)
    # The input's own columns keep their cells as read (pandas 3 made them its string type, dropping io.TypedCell's
    # value and format, so the Excel download wrote a workbook's numbers back as text)
    for at, name in enumerate(header[:len(queries.columns)]):
        table[name] = pd.Series([row[at] for row in rows], index=table.index, dtype=object)
    n_recorded = count_recorded(QueryFile(queries.queries[:done], queries.columns, queries.cells[:done]),
                                run.recorded or None)
    return BatchResult(run.file_name, run.settings, table, done - len(blank), rejected, run.ion_writing,
                       n_ion_refused, summary, run.recorded, n_recorded, round_trip_failed, blank, done, run.total,
                       run.table_hint, queries.notes, run, stopped, several, unanswered, weights, round_trip_weights)


def several_molecule_queries(rows: list[list[object]], offset: int) -> tuple[tuple[int, str], ...]:
    """(record number, canonical query) of each answered query that a retrosynthesis run notes (io.several_molecules),
    from result_rows' rows (the input's `offset` columns first): one of several molecules (a salt or a solvent the
    model builds into its answers), one molecule written as an ion (acetate alone), or one holding no carbon."""
    seen: dict[int, str] = {}
    for r in rows:
        if several := several_molecules(r, offset):
            seen.setdefault(*several)
    return tuple(seen.items())


Checker = tuple[str, str, int]  # BatchResult.checker: the round-trip check's forward model


def safe_csv(table: pd.DataFrame, model: tuple[str, str] | None = None, checker: Checker | None = None) -> bytes:
    """The CSV the CLI would write for these rows: no cell can run as a spreadsheet formula, and
    numbers stay numbers. `model` (BatchResult.model): the model that gave them, in io.MODEL_COLUMNS at the end;
    `checker` (BatchResult.checker): the forward model that checked them round trip, in io.CHECKER_COLUMNS after."""
    return csv_bytes(*_exported(table, model, checker))


def results_sdf(table: pd.DataFrame, model: tuple[str, str] | None = None, checker: Checker | None = None) -> bytes:
    """The SD file the CLI would write for these rows (`--output F.sdf`): a record per row; `model` and `checker` as
    safe_csv's."""
    return sd_bytes(*_exported(table, model, checker))


def results_workbook(table: pd.DataFrame, model: tuple[str, str] | None = None,
                     checker: Checker | None = None) -> bytes:
    """The Excel workbook the CLI would write for these rows (`--output F.xlsx`); `model` and `checker` as
    safe_csv's."""
    return workbook_bytes(*_exported(table, model, checker))


def _exported(table: pd.DataFrame, model: tuple[str, str] | None,
              checker: Checker | None = None) -> tuple[list[str], list[list[object]]]:
    """The table's header and rows as Python values, pandas' missing values as None (empty cells, absent fields),
    with the model's columns where it is given (a file sent to a colleague said nothing of which model gave it), and
    the round-trip check's where it is given."""
    rows = table.astype(object).where(table.notna(), None).itertuples(index=False, name=None)
    header, cells = list(table.columns), [list(row) for row in rows]
    if model is not None:
        header, cells = with_model(header, cells, itertools.repeat(model))
    if checker is not None:
        header, cells = with_checker(header, cells, itertools.repeat(checker))
    return header, cells


def show(batch: BatchResult, now: Settings) -> None:
    """A run's results; `now`, the sidebar's settings, where they differ from the run's, is said to."""
    table = batch.table
    n_good = batch.n_predicted
    common.section("Results")
    ions = " · hydrides read as ions" if batch.ion_writing else ""
    settings = batch.settings
    checked = (f" · each sane answer checked round trip with {settings.round_trip_model} (within its top "
               f"{settings.round_trip_k})" if settings.round_trip_model and not batch.round_trip_failed else "")
    task = TASK_LABELS[settings.task].split(":")[0]  # "Retrosynthesis": which task's results these are
    read_from = batch.run.queries.query_column if batch.run is not None else ""
    sheet = batch.run.queries.sheet if batch.run is not None else ""
    where = "field" if query_format(batch.file_name)[1] == "sdf" else "column"  # an SD file's is a data field
    column = f" · queries from the {where} {read_from}" if read_from else ""
    column += f" of the sheet {sheet}" if sheet else ""
    limit = batch.run.time_limit_s if batch.run is not None else DEFAULT_TIME_LIMIT_S
    limit_text = f" · time limit {limit:g} s a query" if limit != DEFAULT_TIME_LIMIT_S else ""
    st.caption(common.md_escape(f"{batch.file_name}{column} · {task} with {settings.model} · {settings.describe()}"
                                f"{limit_text}{ions}{checked}"))
    if settings.model != now.model or common.decodes_otherwise(settings, now):  # the sidebar changed since the run:
        # its results stayed on screen under the new settings without a word, as the Predict page's answers did
        st.caption("The sidebar's settings differ now from these results' (named above): press **Run batch** to "
                   "predict the file with them.")
    counts = st.columns(4 if batch.unanswered else 3)
    counts[0].metric("Queries", batch.n_queries)
    counts[1].metric("Predicted", n_good)
    counts[2].metric("Rejected", batch.n_rejected)
    if batch.unanswered:
        counts[3].metric("Timed out", len(batch.unanswered), help="Stopped by the time limit before any answer: not "
                         "rejected by the model, and a longer time limit decodes them")
    # A run's end is read out (a status; a rejection's warning is an alert, and a stopped run has its own warning)
    if batch.done == batch.total and not batch.n_rejected and not batch.stopped and not batch.unanswered:
        done = f"{batch.file_name}: done, {common.counted(n_good, 'query', 'queries')} predicted, none rejected."
        st.success(common.md_escape(done), icon=":material/check_circle:")
    if batch.blank:
        stay = "Its row stays" if len(batch.blank) == 1 else "Their rows stay"
        st.info(f"{common.counted(len(batch.blank), 'blank row')} skipped ({row_list(batch.blank)}): a blank line "
                f"or an empty query cell is no query, and is not counted as one. {stay} in the table, marked in the "
                "`error` column.", icon=":material/info:")
    for note in batch.file_notes:  # `molspec predict` prints them as notes
        st.warning(common.md_escape(f"{batch.file_name}: {note}."), icon=":material/warning:")
    if batch.n_rejected:
        one = batch.n_rejected == 1
        others = (" None was predicted." if not n_good
                  else f" {common.counted(n_good, 'query', 'queries')} {'was' if n_good == 1 else 'were'} predicted."
                  if batch.unanswered  # the others are not all predicted: those the time limit stopped are warned of
                  else " The other query was predicted." if n_good == 1 else " The other queries were predicted.")
        st.warning(f"{batch.n_rejected:,} of {common.counted(batch.n_queries, 'query', 'queries')} "
                   f"{'was' if one else 'were'} rejected; {'its' if one else 'their'} reason is in the `error` "
                   f"column.{others} Rejected: {row_list(batch.rejected)}.", icon=":material/warning:")
        if batch.table_hint:
            st.info(common.md_escape(batch.table_hint), icon=":material/lightbulb:")
    if batch.stopped:
        one = len(batch.stopped) == 1
        st.warning(f"{common.counted(len(batch.stopped), 'query', 'queries')} {'was' if one else 'were'} stopped at "
                   f"the time limit ({row_list(batch.stopped)}): {'its' if one else 'their'} rows hold the answers "
                   f"found by then, the `error` column says where the search stopped, and answers it had not "
                   f"finished are marked \"{TIMED_OUT}\".", icon=":material/timer_off:")
    if batch.unanswered:  # slow queries, not ones the model would not take (`molspec predict` counts them so too)
        one = len(batch.unanswered) == 1
        st.warning(f"{len(batch.unanswered):,} of {common.counted(batch.n_queries, 'query', 'queries')} "
                   f"{'was' if one else 'were'} stopped by the time limit before any answer "
                   f"({row_list(batch.unanswered)}): not rejected by the model, {'it' if one else 'they'} "
                   f"took longer than the limit; the `error` column says where the search stopped.",
                   icon=":material/timer_off:")
    longer = longer_time_limit_hint(batch)
    if longer:
        st.caption(longer)
    if batch.several:
        st.warning(common.md_escape(several_molecules_note(batch.several)), icon=":material/warning:")
    if batch.round_trip_failed:
        st.warning(common.md_escape(f"The round-trip check could not run ({batch.round_trip_failed}); the answers "
                                    "stand without it."), icon=":material/warning:")
    if batch.n_ion_refused:  # it read "1 of the rejected rows hold"
        hold = "holds" if batch.n_ion_refused == 1 else "hold"
        st.info(f"{batch.n_ion_refused} of the rejected rows {hold} a hydride written as one species ({HYDRIDES}), "
                f"which the model cannot read: tick *{ION_WRITING_LABEL}* and run the batch again.",
                icon=":material/lightbulb:")
    if batch.recorded:
        side = batch.recorded.removeprefix("recorded_")  # known.recorded_column: recorded_products / _reactants
        are = ("is a recorded reaction" if batch.n_recorded == 1 else "are recorded reactions")
        their = "its" if batch.n_recorded == 1 else "their"
        # A known-answer column named in the form is what the answers are compared with: a recorded reaction's row
        # with none there was counted "with no known answer", its recorded outcome beside it (molspec predict says so)
        compared = batch.known is not None and batch.known.column != batch.recorded
        kept = (f", kept, not compared: the answers are compared with the known-answer column named, "
                f"{batch.known.column}" if compared else "")
        st.caption(common.md_escape(
            f"{batch.n_recorded} of {common.counted(batch.n_queries, 'query', 'queries')} {are} "
            f"(reactants>reagents>products): the model was asked for {their} {side}, and the recorded {side} are in "
            f"the column {batch.recorded}{kept}."))
    if batch.known is not None:
        show_known(batch.known, n_good)
    unnamed = unnamed_known_column(batch)
    if unnamed:
        st.info(common.md_escape(unnamed), icon=":material/lightbulb:")
    input_columns = [c for c in table.columns if c not in (*RESULT_COLUMNS, MATCHES_KNOWN)]  # distinct names
    order = SCREEN_ORDER
    if settings.round_trip_model and not batch.round_trip_failed:
        at = SCREEN_ORDER.index("confidence") + 1
        order = [*SCREEN_ORDER[:at], *ROUND_TRIP_COLUMNS, *SCREEN_ORDER[at:]]
    if batch.known is not None:  # the known answer beside the predicted one, where the eye compares them
        known_at = SCREEN_ORDER.index("smiles") + 1
        order = [*order[:3], MATCHES_KNOWN, *order[3:known_at], batch.known.output_column, *order[known_at:]]
        input_columns.remove(batch.known.output_column)
    rejected_any = bool(batch.n_rejected or batch.blank or batch.unanswered)
    if rejected_any:  # the reasons beside their queries: at the end they were past the grid's right edge at 1,400 px
        order = [c for c in order if c != "error"]
        order.insert(order.index("query") + 1, "error")
    st.dataframe(table, hide_index=True, placeholder="", column_order=input_columns + order, column_config={
        MATCHES_KNOWN: st.column_config.CheckboxColumn("known answer", help="This answer is the one in the file's "
                                                       "known-answer column (empty: no answer, or none to compare)"),
        "row": st.column_config.NumberColumn("row", help="The query's record number in the uploaded file"),
        "query": st.column_config.TextColumn("query", width="medium"),
        "canonical_query": st.column_config.TextColumn("canonical query", width="medium",
                                                       help="The query as the model read it (RDKit canonical)"),
        "smiles": st.column_config.TextColumn("predicted SMILES", width="medium"),
        "valid": st.column_config.CheckboxColumn("valid", help="RDKit reads and sanitizes the predicted SMILES "
                                                 "(unticked: it is no structure, and so not sane)"),
        "score": st.column_config.NumberColumn("score", format="%.3f", help="Sum of token log-probabilities"),
        "round_trip": st.column_config.CheckboxColumn("round trip", help="The forward model gives the product back "
                                                      "from this answer (empty: not checked, a flagged answer)"),
        "forward_prob": st.column_config.NumberColumn("forward prob", format="%.3f", help="The forward model's "
                                                      "probability of the product from this answer"),
        "error": st.column_config.TextColumn("error", width="medium" if rejected_any else "large"),
        "time_ms": st.column_config.NumberColumn("time (ms)", format="%.1f"),
        "accepted_tokens": st.column_config.NumberColumn("accepted draft tokens"),
        "model_calls": st.column_config.NumberColumn("model calls"),
    })
    stem = f"{upload_stem(batch.file_name)}-predictions"
    if batch.done < batch.total:  # a stopped run's files say which rows they hold, as the CLI's .interrupted.csv does
        stem += f"-rows-1-{batch.done}-of-{batch.total}"
    with st.container(horizontal=True):
        # Its bytes go with the page, written once (BatchResult.csv). Made on the click (4e390b9), it failed a click in
        # the second after a run's end: the run's watcher draws the page again then, which replaces a deferred file,
        # and the click asked for the one replaced; bytes drawn again keep their file.
        st.download_button("Download CSV", data=batch.csv, file_name=f"{stem}.csv", mime="text/csv",
                           on_click="ignore", icon=":material/download:", type="primary")
        # made on the click (the 2D coordinates of 50,000 answers take a while), not on every rerun
        st.download_button("Download SDF", data=lambda: results_sdf(table, batch.model, batch.checker),
                           file_name=f"{stem}.sdf",
                           mime="chemical/x-mdl-sdfile", on_click="ignore", icon=":material/download:",
                           help="A record per row of the table: the answer's structure with 2D coordinates and "
                                "every column as a field; a rejected query's record has no atoms and says why.")
        st.download_button("Download Excel", data=lambda: results_workbook(table, batch.model, batch.checker),
                           file_name=f"{stem}.xlsx", on_click="ignore", icon=":material/download:",
                           mime=common.WORKBOOK_MIME, help=f"The table as an Excel workbook. {common.WORKBOOK_HELP}")


def longer_time_limit_hint(batch: BatchResult) -> str:
    """Where to set the longer time limit that the error of a query stopped at it offers (common.time_limit_hint),
    or "": the `error` column told rows stopped at 60 s to "try a longer time limit", which the page offered nowhere."""
    errors = " ".join(str(error) for error in batch.table["error"].dropna()) if "error" in batch.table else ""
    limit = batch.run.time_limit_s if batch.run is not None else DEFAULT_TIME_LIMIT_S
    return common.time_limit_hint(errors, limit, f"raise *{common.TIME_LIMIT_LABEL}* in the form above and run the "
                                                 "batch again (its rows are all predicted again)")


def upload_stem(name: str) -> str:
    """An upload's name without its suffixes, for its results' names: q.csv.gz's results were q.csv-predictions.csv."""
    compression = query_format(name)[0]
    return Path(name[:-len(compression)] if compression else name).stem


def show_known(known: KnownSummary, n_predicted: int) -> None:
    """How often the file's known answers came back: first, and anywhere in the list, beside how many queries
    that share is of (100% of 1 query is no file-wide figure)."""
    described = known.describe()
    sentence = common.md_escape(described[0].upper() + described[1:] + ".")
    if not known.queries:
        st.info(sentence, icon=":material/info:")
        return
    first, listed, compared = st.columns(3)
    first.metric("Known answer first", common.percent(known.first / known.queries, 1),
                 help="Of the predicted queries with a readable known answer, the share whose rank 1 is it")
    listed.metric("Known answer listed", common.percent(known.listed / known.queries, 1),
                  help="The share with the known answer at any rank of its list")
    compared.metric("Queries compared", f"{known.queries:,} of {n_predicted:,}",
                    help="The predicted queries with a readable known answer: the two shares are of these")
    st.caption(sentence)


def read_kept(task: str) -> None:
    """The task's run and results as this code reads them (common.current): kept by a session of earlier code, they
    lacked the fields added since, and the page stopped on an AttributeError. One that cannot be read is let go."""
    ss = st.session_state
    for key, cls in ((run_key(task), Run), (results_key(task), BatchResult)):
        kept = ss.get(key)
        read = common.current(kept, cls)
        if read is None:
            ss.pop(key, None)
        elif read is not kept:
            ss[key] = read
    batch = ss.get(results_key(task))
    if batch is not None and batch.run is not None and (run := common.current(batch.run, Run)) is not batch.run:
        ss[results_key(task)] = dataclasses.replace(batch, run=run)


def main() -> None:
    cfg = common.settings()
    read_kept(cfg.task)
    st.title("Batch prediction")
    st.caption("Upload a TXT file (one SMILES per line), a SMILES file (`.smi`: a SMILES, then optionally a "
               "name, per line), an SD file (`.sdf`: one query per record), a CSV with a `smiles` column (cells "
               "split at commas, semicolons as Excel writes them in much of Europe, or tabs: `.tsv`) or an Excel "
               "workbook (`.xlsx`: the first sheet with a `smiles` column); titles above a header are skipped; `.gz` "
               "and `.xz` archives of them are read too. Every row is predicted with the sidebar settings; rejected "
               "rows are reported next to the good ones, and the names, SD fields or a CSV's other columns (IDs, "
               "names) are kept in front of the results. Queries written as recorded reactions "
               "(`reactants>reagents>products`) are predicted from their reactants (retrosynthesis: their products), "
               "and their recorded outcome is checked against the answers. A large file goes several times "
               "faster with one answer a query (*Speculative, auto drafts* in the sidebar) than with beam search's "
               "ranked lists.")
    if cfg.model_dir is None and common.models_for_task(cfg.task):
        st.error(common.NOT_LOADED, icon=":material/error:")
        return
    if cfg.model_dir is None:
        st.warning(common.md_escape(common.no_model_text(cfg.task)), icon=":material/warning:")
        return
    automatic = query_columns(None, cfg.task)
    with st.form("batch_form"):
        upload = st.file_uploader("Query file",
                                  type=BATCH_FILE_TYPES)
        column = st.text_input("CSV or workbook column, or SD field (optional)",
                               placeholder=f"automatic: {', '.join(automatic[:-1])} or {automatic[-1]}, any case",
                               help="The column that holds the SMILES, when it has another name; in an SD file, the "
                                    "data field to read the queries from instead of each record's molecule.")
        known = st.text_input("Known-answer column (optional)", placeholder="e.g. product, any case",
                              help="A CSV column or SD field that holds each query's recorded answer (the product, "
                                   "or the reactants for retrosynthesis): the results then say how often the model "
                                   "gives it first or among its answers, and mark the row that matches (stereo kept, "
                                   "each molecule once, a salt ionic or neutral alike; forward: the products whole "
                                   "or their main molecule alone). Recorded reactions in the file bring their own.")
        ion_writing = st.checkbox(ION_WRITING_LABEL, help=f"{HYDRIDES} are not in the model's vocabulary; its "
                                  f"training data write them as ions ({ION_LIST}). The `canonical query` column "
                                  "shows what the model read.")
        time_limit = common.time_limit_input("time_limit_batch")
        submitted = st.form_submit_button("Run batch", type="primary", icon=":material/play_arrow:")
    # The run's bar, then its results, in one element: a new run's bar replaces the results on screen at once (they
    # stayed under it, faded, until the run ended, and read as the new run's). The run's Stop button has the next.
    area, stop = st.empty(), st.container()
    st.html(KEYBOARD_AND_READER, unsafe_allow_javascript=True)  # last on screen: its empty block takes no room
    error = run_if_asked(cfg, submitted, upload, column.strip(), known.strip(), ion_writing, time_limit, area, stop)
    with area.container():
        if error:
            st.error(common.md_escape(error), icon=":material/error:")
        show_last(cfg)


def run_if_asked(cfg: Settings, submitted: bool, upload: UploadedFile | None, column: str, known: str,
                 ion_writing: bool, time_limit_s: float, area: DeltaGenerator, stop: DeltaGenerator) -> str:
    """Run the form's file where it was submitted, or take up the run cut short where Continue was pressed; why
    the file cannot be run, or ""."""
    ss = st.session_state
    run: Run | None = ss.get(run_key(cfg.task))
    if not submitted:
        if ss.pop(continue_key(cfg.task), False) and run is not None and not rewritten(run):
            finish(run, area, stop)
        return ""
    if upload is None:
        return "Choose a query file first: CSV, Excel workbook, SMILES, SD or TXT."
    task = cfg.predictor().task  # how the model reads: its own task
    data = upload.getvalue()
    try:
        read = read_upload(upload.name, data, column, task)
        queries, recorded = with_recorded(read, task)
        if known:  # named as the query column is, in any case ("product" for a file's "Product")
            at = query_column(queries.columns, known)
            known = queries.columns[at] if at is not None else known
            # a name found nowhere is refused naming the file's own columns: the refusal listed the columns the page
            # adds for recorded reactions (with_recorded) among them
            column_index(queries.columns if at is not None else read.columns, upload.name, known)
    except InputFileError as exc:  # a typo in a column's name loses no run: the last results stay, named as such
        shown: BatchResult | Run | None = ss.get(results_key(cfg.task)) or run
        kept = f" The results below are still the last run's, of {shown.file_name}." if shown is not None else ""
        return f"Cannot read the file: {str(exc).rstrip('.')}.{kept}"
    source = (upload.name, hashlib.sha256(data).hexdigest(), column, ion_writing, time_limit_s, cfg)
    known = known or recorded or ""
    last: BatchResult | None = ss.get(results_key(cfg.task))
    if run is None and last is not None and last.run is not None and last.run.source == source and (
            last.run.known != known):  # the known-answer column named after the run: its rows marked, not predicted
        run = last.run
    # The same file and settings again (Run batch pressed during its run, or after a stop) take the run up where it
    # stopped, with the known-answer column named now (the answers do not depend on it); anything else starts a run
    # of its own.
    if run is None or run.source != source or rewritten(run):
        run = Run(source, upload.name, cfg, queries, ion_writing, time_limit_s, known, recorded or "",
                  table_hint(upload.name, queries, task))
    run.known = known
    ss[run_key(cfg.task)] = run
    finish(run, area, stop)
    return ""


def finish(run: Run, area: DeltaGenerator, stop: DeltaGenerator) -> None:
    """Predict the run's records not done yet; once all are done, its results replace the run in the session, and
    the page is drawn again without the run's watcher: left on the page drawn now, its timer drew the whole page
    again a second later (the table sent twice; a download made on its click, clicked then, asked for a file the
    second drawing had replaced). A full script run that draws no watcher ends its timer."""
    ss, task = st.session_state, run.settings.task
    ss.pop(results_key(task), None)  # the results on screen become this run's, whenever it ends
    if predict_rows(run, area, stop):
        ss[results_key(task)] = summarize(run)
        ss.pop(run_key(task), None)
        st.rerun(scope="app")


def show_last(now: Settings) -> None:
    """The task's last results: a finished run's, or the rows so far of a run cut short, with a way to go on; `now`:
    the sidebar's settings."""
    task = now.task
    ss, key = st.session_state, results_key(task)
    run: Run | None = ss.get(run_key(task))
    if run is not None and key not in ss:  # a run cut short: its rows so far, tabled once
        run.claim()  # the script run cut short may still be predicting a row: it writes no more
        ss[key] = summarize(run)
        if run.done == run.total:  # cut short after its last row: finished
            ss.pop(run_key(task))
            run = None
    batch = ss.get(key)
    if batch is None:
        return
    if batch.done < batch.total:
        folder = "" if run is None else rewritten(run)
        show_stopped(batch, can_continue=run is not None and not folder)
        if run is not None and folder:
            made = "came from" if folder == run.settings.model else "were checked round trip with"
            st.warning(common.md_escape(
                f"The model folder {folder} now holds other weights than the ones this run's rows {made} (it was "
                "rewritten since): continuing would mix two models' work in one file. Run batch again to predict the "
                "whole file with the weights now there; the table and downloads hold the rows done, named with the "
                "weights that gave them."), icon=":material/warning:")
    if batch.done:
        show(batch, now)


def rewritten(run: Run) -> str:
    """The model folder of the run that now loads other weights than its rows so far came from (Run.weights) or were
    checked round trip with (Run.round_trip_weights), else "": its folder was rewritten, and the app loaded it again.
    Continue predicted or checked the rest with them, and the files named the first rows' weights for every row. A
    folder that does not load is no rewrite: Continue says why it cannot run (the check, why it did not run)."""
    cfg = run.settings
    for folder, weights in ((cfg.model, run.weights), (cfg.round_trip_model, run.round_trip_weights)):
        try:
            if folder and weights and cfg.predictor(folder).weights != weights:
                return folder
        except Exception:  # noqa: BLE001  (the run's own start reports it)
            continue
    return ""


def unnamed_known_column(batch: BatchResult) -> str:
    """Where a run named no known-answer column and its file has one named as the answers ('product' or 'products'
    forward, 'reactant' or 'reactants' retrosynthesis, any case), how to check the answers against it; else "". A
    CSV of reactants and their products was predicted without a word of the check the page offers: the products sat
    in front of the answers, unmarked."""
    if batch.known is not None or batch.recorded or batch.run is None:
        return ""
    side = recorded_side(batch.settings.task)
    queries = batch.run.queries
    found = next((c for c in queries.columns if c.strip().casefold() in (side, side[:-1])
                  and c != queries.query_column), None)
    if found is None:
        return ""
    return (f"{batch.file_name} has a column {found}: to check the answers against it, name it under Known-answer "
            "column and press Run batch again (the rows done are marked, not predicted again).")


def show_stopped(batch: BatchResult, can_continue: bool) -> None:
    """Where a run was cut short: how far it got, and a button that takes it up."""
    left, task = batch.total - batch.done, batch.settings.task
    st.warning(common.md_escape(f"{batch.file_name}: stopped after {batch.done:,} of {batch.total:,} rows; the "
                                "table and downloads hold those rows."), icon=":material/pause_circle:")
    if can_continue:
        st.button(f"Continue: {left:,} {'row' if left == 1 else 'rows'} left", key=f"batch_continue_button_{task}",
                  type="primary", icon=":material/play_arrow:", on_click=_continue, args=(task,),
                  help="Predicts the rest of the file with the settings the run started with (the caption under "
                       "Results names them), and adds the rows to these.")


def _continue(task: str) -> None:
    st.session_state[continue_key(task)] = True


if __name__ == "__main__":  # Streamlit runs a page as __main__; tests import its functions
    main()
