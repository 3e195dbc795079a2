"""Batch: a CSV, SMILES, SD or TXT file of queries in, every prediction out as a table, a safe CSV and an SD file.

Each row is predicted on its own so that its time is its own and the progress bar moves per row;
rows the engine rejects keep their place in the table with the reason, and the good rows go on.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from molspec_core.chem import ION_WRITINGS
from molspec_core.io import (MAX_INPUT_BYTES, MAX_INPUT_ROWS, RESULT_COLUMNS, InputFileError, QueryFile, query_columns,
                             csv_bytes, output_header, parse_upload, result_rows, sd_bytes, workbook_bytes)
from molspec_core.known import MATCHES_KNOWN, KnownMarks, KnownSummary, column_index, count_recorded, with_recorded
from molspec_core.roundtrip import check_round_trip
from molspec_core.service import QueryResult
from views import common
from views.common import TASK_LABELS, Settings

log = logging.getLogger(__name__)
# The app's row limit; the CLI takes up to MAX_INPUT_ROWS. 10,000 forward queries read in 5 writings take
# about 9 minutes with spec-auto and 35 with beam search 5 (int8, one CPU thread: 56 and 205 ms a query).
APP_MAX_ROWS = 10_000
PROGRESS_EVERY_S = 0.25  # redraw the progress bar at most this often (10,000 redraws would slow the page)
ION_WRITING_LABEL = "Read hydrides written as one species as ions"
HYDRIDES = ", ".join(ION_WRITINGS)  # [AlH4-] (LiAlH4), [NaH], [CaH2]
ION_LIST = "; ".join(f"{species} as {ions}" for species, ions in ION_WRITINGS.items())
# On screen the reason for a rejected row sits right after its query; the CSV keeps the CLI's order
# (molspec_core.io.output_header), and both put the input's other columns in front.
# Whole numbers that a rejected row leaves empty: pandas would make them floats (1.0 where the CLI writes 1).
COUNT_COLUMNS = ("rank", "model_rank", "writings", "spellings", "model_calls", "accepted_tokens")
SCREEN_ORDER = ["row", "query", "rank", "smiles", "sane", "concerns", "confidence", "score", "error", "canonical_query",
                "time_ms", "model_calls", "accepted_tokens", "method", "dtype"]
ROUND_TRIP_COLUMNS = ["round_trip", "forward_prob"]  # on screen after confidence, where the sidebar's check ran


def results_key(task: str) -> str:
    """The session key of a task's last batch: each task keeps its own, as the Predict page keeps its last query."""
    return f"batch_{task}"


@dataclass(frozen=True)
class BatchResult:
    file_name: str
    settings: Settings
    table: pd.DataFrame  # one row per (query, rank); a rejected query has one row with `error`
    n_queries: int
    n_rejected: int
    ion_writing: bool = False  # hydrides written as one species were read as USPTO's ions
    n_ion_refused: int = 0  # rejected rows that ion_writing would have read
    known: KnownSummary | None = None  # how often the file's known answers came back, where it named a column
    recorded: str = ""  # the column with_recorded added (the recorded reactions' outcomes), where it added one
    n_recorded: int = 0  # queries read as recorded reactions whose outcome is a SMILES
    round_trip_failed: str = ""  # why the round-trip check could not run, where the settings asked for it


def read_upload(name: str, data: bytes, column: str | None, task: str | None = None) -> QueryFile:
    """Queries of an uploaded file, read for `task` (a retrosynthesis file's product column, not its reactants:
    io.query_columns); raises InputFileError for a file that cannot be used whole."""
    if len(data) > MAX_INPUT_BYTES:  # the cheap check first; parse_upload counts decompressed bytes too
        raise InputFileError(f"{name} is larger than {MAX_INPUT_BYTES // 2**20} MB")
    queries = parse_upload(name, data, column or None, task=task)
    if not queries.queries:
        raise InputFileError(f"{name} holds no queries")
    if len(queries.queries) > APP_MAX_ROWS:
        raise InputFileError(f"{name} has {len(queries.queries)} rows; the app predicts at most {APP_MAX_ROWS} "
                             f"(the command line `molspec predict --input` takes up to {MAX_INPUT_ROWS})")
    return queries


def predict_all(queries: QueryFile, cfg: Settings, ion_writing: bool = False, known: str = ""
                ) -> tuple[pd.DataFrame, int, KnownSummary | None, str]:
    """The table of every prediction, in the shared output's columns (the CLI writes the same), how
    many rejected rows hold a hydride that ion_writing would have read (QueryResult.suggestion), and,
    where `known` names one of the file's columns (known.column_index), how often its answers came back:
    the table then ends with MATCHES_KNOWN. Retrosynthesis answers are checked round trip where the sidebar
    asks (Settings.round_trip_model), as on the Predict page; the last item says why the check could not run
    ("" where it ran or was not asked for), and the answers then stand without it."""
    predictor = cfg.predictor()
    forward, round_trip_failed = None, ""
    if cfg.round_trip_model is not None:
        try:
            forward = cfg.predictor(cfg.round_trip_model)
        except Exception as exc:  # noqa: BLE001  (the answers stand without the check)
            log.exception("round-trip model failed to load")
            round_trip_failed = common.short(str(exc), 160)
    n_ion_refused = 0
    total = len(queries.queries)
    bar = st.progress(0.0, text=f"Predicting {total} queries…")
    rows: list[list[object]] = []
    drawn = time.monotonic()
    for i, query in enumerate(queries.queries):
        try:
            result = predictor.predict(query, **cfg.options(), ion_writing=ion_writing)
        except Exception as exc:  # noqa: BLE001  (bad input comes back in result.error; this is a bug)
            log.exception("batch row failed")
            result = QueryResult(query=query, method=cfg.method, error=f"the model failed ({type(exc).__name__}: "
                                                                      f"{common.short(str(exc), 160)})")
        if forward is not None and result.ok:
            try:
                result = check_round_trip(result, forward, cfg.round_trip_k)
            except Exception as exc:  # noqa: BLE001  (this row's answers stand without the check)
                log.exception("round-trip check failed")
                round_trip_failed = round_trip_failed or common.short(str(exc), 160)
        n_ion_refused += bool(result.suggestion)
        rows.extend(result_rows(i + 1, queries.cells_of(i), result, problem=queries.problem_of(i)))
        if time.monotonic() - drawn > PROGRESS_EVERY_S or i + 1 == total:
            bar.progress((i + 1) / total, text=f"Predicted {i + 1} of {total} queries")
            drawn = time.monotonic()
    bar.empty()
    header = output_header(queries.columns)
    summary = None
    if known:
        marks = KnownMarks(header, queries.columns.index(known), known)  # the input's columns lead the header
        header, rows, summary = marks.header, list(marks.rows(rows)), marks.summary()
    types = {**dict.fromkeys(COUNT_COLUMNS, "Int64"), **({MATCHES_KNOWN: "boolean"} if known else {})}
    return pd.DataFrame(rows, columns=header).astype(types), n_ion_refused, summary, round_trip_failed


def safe_csv(table: pd.DataFrame) -> bytes:
    """The CSV the CLI would write for these rows: no cell can run as a spreadsheet formula, and
    numbers stay numbers."""
    return csv_bytes(table.columns, _cells(table))


def results_sdf(table: pd.DataFrame) -> bytes:
    """The SD file the CLI would write for these rows (`--output F.sdf`): a record per row."""
    return sd_bytes(list(table.columns), _cells(table))


def results_workbook(table: pd.DataFrame) -> bytes:
    """The Excel workbook the CLI would write for these rows (`--output F.xlsx`)."""
    return workbook_bytes(table.columns, _cells(table))


def _cells(table: pd.DataFrame) -> list[tuple[object, ...]]:
    """The table's rows as Python values, pandas' missing values as None (empty cells, absent fields)."""
    return list(table.astype(object).where(table.notna(), None).itertuples(index=False, name=None))


def show(batch: BatchResult) -> None:
    table = batch.table
    n_good = batch.n_queries - batch.n_rejected
    st.subheader("Results")
    ions = " · hydrides read as ions" if batch.ion_writing else ""
    settings = batch.settings
    checked = (f" · each sane answer checked round trip with {settings.round_trip_model} (within its top "
               f"{settings.round_trip_k})" if settings.round_trip_model and not batch.round_trip_failed else "")
    task = TASK_LABELS[settings.task].split(":")[0]  # "Retrosynthesis": which task's results these are
    st.caption(common.md_escape(f"{batch.file_name} · {task} with {settings.model} · {settings.describe()}{ions}"
                                f"{checked}"))
    queries, predicted, rejected = st.columns(3)
    queries.metric("Queries", batch.n_queries)
    predicted.metric("Predicted", n_good)
    rejected.metric("Rejected", batch.n_rejected)
    if batch.n_rejected:
        others = (" None was predicted." if not n_good else " The other row was predicted." if n_good == 1
                  else " The other rows were predicted.")
        st.warning(f"{batch.n_rejected} of {batch.n_queries} rows were rejected; their reason is in the "
                   f"`error` column.{others}", icon=":material/warning:")
    if batch.round_trip_failed:
        st.warning(common.md_escape(f"The round-trip check could not run ({batch.round_trip_failed}); the answers "
                                    "stand without it."), icon=":material/warning:")
    if batch.n_ion_refused:
        st.info(f"{batch.n_ion_refused} of the rejected rows hold a hydride written as one species ({HYDRIDES}), "
                f"which the model cannot read: tick *{ION_WRITING_LABEL}* and run the batch again.",
                icon=":material/lightbulb:")
    if batch.recorded:
        side = batch.recorded.removeprefix("recorded_")  # known.recorded_column: recorded_products / _reactants
        st.caption(common.md_escape(
            f"{batch.n_recorded} of {batch.n_queries} queries are recorded reactions (reactants>reagents>products): "
            f"the model was asked for their {side}, and the recorded {side} are in the column {batch.recorded}."))
    if batch.known is not None:
        show_known(batch.known)
    input_columns = [c for c in table.columns if c not in (*RESULT_COLUMNS, MATCHES_KNOWN)]  # distinct names
    order = SCREEN_ORDER
    if settings.round_trip_model and not batch.round_trip_failed:
        at = SCREEN_ORDER.index("confidence") + 1
        order = [*SCREEN_ORDER[:at], *ROUND_TRIP_COLUMNS, *SCREEN_ORDER[at:]]
    if batch.known is not None:  # the known answer beside the predicted one, where the eye compares them
        known_at = SCREEN_ORDER.index("smiles") + 1
        order = [*order[:3], MATCHES_KNOWN, *order[3:known_at], batch.known.output_column, *order[known_at:]]
        input_columns.remove(batch.known.output_column)
    st.dataframe(table, hide_index=True, placeholder="", column_order=input_columns + order, column_config={
        MATCHES_KNOWN: st.column_config.CheckboxColumn("known answer", help="This answer is the one in the file's "
                                                       "known-answer column (empty: no answer, or none to compare)"),
        "row": st.column_config.NumberColumn("row", help="The query's record number in the uploaded file"),
        "query": st.column_config.TextColumn("query", width="medium"),
        "canonical_query": st.column_config.TextColumn("canonical query", width="medium",
                                                       help="The query as the model read it (RDKit canonical)"),
        "smiles": st.column_config.TextColumn("predicted SMILES", width="medium"),
        "score": st.column_config.NumberColumn("score", format="%.3f", help="Sum of token log-probabilities"),
        "round_trip": st.column_config.CheckboxColumn("round trip", help="The forward model gives the product back "
                                                      "from this answer (empty: not checked, a flagged answer)"),
        "forward_prob": st.column_config.NumberColumn("forward prob", format="%.3f", help="The forward model's "
                                                      "probability of the product from this answer"),
        "error": st.column_config.TextColumn("error", width="large"),
        "time_ms": st.column_config.NumberColumn("time (ms)", format="%.1f"),
        "accepted_tokens": st.column_config.NumberColumn("accepted draft tokens"),
        "model_calls": st.column_config.NumberColumn("model calls"),
    })
    stem = Path(batch.file_name).stem
    with st.container(horizontal=True):
        st.download_button("Download CSV", data=safe_csv(table), file_name=f"{stem}-predictions.csv", mime="text/csv",
                           on_click="ignore", icon=":material/download:", type="primary")
        # made on the click (the 2D coordinates of 50,000 answers take a while), not on every rerun
        st.download_button("Download SDF", data=lambda: results_sdf(table), file_name=f"{stem}-predictions.sdf",
                           mime="chemical/x-mdl-sdfile", on_click="ignore", icon=":material/download:",
                           help="A record per row of the table: the answer's structure with 2D coordinates and "
                                "every column as a field; a rejected query's record has no atoms and says why.")
        st.download_button("Download Excel", data=lambda: results_workbook(table),
                           file_name=f"{stem}-predictions.xlsx", on_click="ignore", icon=":material/download:",
                           mime=common.WORKBOOK_MIME, help=f"The table as an Excel workbook. {common.WORKBOOK_HELP}")


def show_known(known: KnownSummary) -> None:
    """How often the file's known answers came back: first, and anywhere in the list."""
    described = known.describe()
    sentence = common.md_escape(described[0].upper() + described[1:] + ".")
    if not known.queries:
        st.info(sentence, icon=":material/info:")
        return
    first, listed, _ = st.columns(3)
    first.metric("Known answer first", f"{known.first / known.queries:.1%}",
                 help="Of the predicted queries with a readable known answer, the share whose rank 1 is it")
    listed.metric("Known answer listed", f"{known.listed / known.queries:.1%}",
                  help="The share with the known answer at any rank of its list")
    st.caption(sentence)


def main() -> None:
    cfg = common.settings()
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
    if cfg.model_dir is None:
        st.warning("No model is installed for this task; switch the task in the sidebar.", icon=":material/warning:")
        return
    automatic = query_columns(None, cfg.task)
    key = results_key(cfg.task)
    with st.form("batch_form"):
        upload = st.file_uploader("Query file",
                                  type=["csv", "tsv", "xlsx", "xls", "txt", "smi", "smiles", "sdf", "sd", "mol", "gz",
                                        "xz"])
        column = st.text_input("CSV or workbook column (optional)",
                               placeholder=f"automatic: {', '.join(automatic[:-1])} or {automatic[-1]}, any case",
                               help="The column that holds the SMILES, when it has another name.")
        known = st.text_input("Known-answer column (optional)", placeholder="e.g. product",
                              help="A CSV column or SD field that holds each query's recorded answer (the product, "
                                   "or the reactants for retrosynthesis): the results then say how often the model "
                                   "gives it first or among its answers, and mark the row that matches (canonical "
                                   "SMILES, stereo kept). Recorded reactions in the file bring their own.")
        ion_writing = st.checkbox(ION_WRITING_LABEL, help=f"{HYDRIDES} are not in the model's vocabulary; its "
                                  f"training data write them as ions ({ION_LIST}). The `canonical query` column "
                                  "shows what the model read.")
        submitted = st.form_submit_button("Run batch", type="primary", icon=":material/play_arrow:")
    if submitted:
        if upload is None:
            st.error("Choose a query file first: CSV, Excel workbook, SMILES, SD or TXT.", icon=":material/error:")
        else:
            task = cfg.predictor().task  # how the model reads: its own task
            try:
                queries, recorded = with_recorded(read_upload(upload.name, upload.getvalue(), column.strip(), task),
                                                  task)
                if known.strip():
                    column_index(queries.columns, upload.name, known.strip())
            except InputFileError as exc:
                st.session_state.pop(key, None)  # the last file's results under this file's error read as its own
                st.error(common.md_escape(f"Cannot read the file: {exc}"), icon=":material/error:")
            else:
                table, n_ion_refused, summary, failed = predict_all(queries, cfg, ion_writing,
                                                                    known.strip() or recorded or "")
                n_rejected = int(table.loc[table["rank"].isna()].shape[0])
                n_recorded = count_recorded(queries, recorded)
                st.session_state[key] = BatchResult(upload.name, cfg, table, len(queries.queries), n_rejected,
                                                    ion_writing, n_ion_refused, summary, recorded or "", n_recorded,
                                                    failed)
    batch = st.session_state.get(key)
    if batch is not None:
        show(batch)


if __name__ == "__main__":  # Streamlit runs a page as __main__; tests import its functions
    main()
