"""Batch: a CSV or TXT file of queries in, every prediction out as a table and a safe CSV.

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

from molspec_core.io import MAX_INPUT_BYTES, MAX_INPUT_ROWS, InputFileError, neutralize, parse_queries
from molspec_core.service import QueryResult
from pages import common
from pages.common import Settings

log = logging.getLogger(__name__)
APP_MAX_ROWS = 10_000  # about 5 minutes of greedy on a CPU; the CLI takes up to MAX_INPUT_ROWS
PROGRESS_EVERY_S = 0.25  # redraw the progress bar at most this often (10,000 redraws would slow the page)
COLUMNS = ["query", "rank", "smiles", "score", "method", "time_ms", "model_calls", "accepted_tokens", "error"]
# On screen the reason for a rejected row sits right after its query; the CSV keeps COLUMNS.
SCREEN_ORDER = ["query", "rank", "smiles", "score", "error", "time_ms", "model_calls", "accepted_tokens", "method"]


@dataclass(frozen=True)
class BatchResult:
    file_name: str
    settings: Settings
    table: pd.DataFrame  # one row per (query, rank); a rejected query has one row with `error`
    n_queries: int
    n_rejected: int


def read_upload(name: str, data: bytes, column: str | None) -> list[str]:
    """Queries of an uploaded file; raises InputFileError for a file that cannot be used whole."""
    if len(data) > MAX_INPUT_BYTES:
        raise InputFileError(f"{name} is larger than {MAX_INPUT_BYTES // 2**20} MB")
    try:
        text = data.decode("utf-8-sig")  # -sig: spreadsheets often prepend a byte-order mark
    except UnicodeDecodeError:
        raise InputFileError(f"{name} is not UTF-8 text") from None
    queries = parse_queries(text, csv_format=name.lower().endswith(".csv"), column=column or None)
    if not queries:
        raise InputFileError(f"{name} holds no queries")
    if len(queries) > APP_MAX_ROWS:
        raise InputFileError(f"{name} has {len(queries)} rows; the app predicts at most {APP_MAX_ROWS} "
                             f"(the command line `molspec predict --input` takes up to {MAX_INPUT_ROWS})")
    return queries


def rows_of(result: QueryResult, method: str) -> list[dict]:
    if not result.ok:
        return [{"query": result.query, "rank": None, "smiles": "", "score": None, "method": method,
                 "time_ms": None, "model_calls": None, "accepted_tokens": None, "error": result.error}]
    stats = result.stats
    return [{"query": result.query, "rank": p.rank, "smiles": p.smiles, "score": round(p.score, 4),
             "method": method, "time_ms": round(1000 * stats.wall_time_s, 2), "model_calls": stats.model_calls,
             "accepted_tokens": stats.draft_tokens_accepted, "error": ""}
            for p in result.predictions]


def predict_all(queries: list[str], cfg: Settings) -> pd.DataFrame:
    predictor = common.load_predictor(cfg.model_dir)
    bar = st.progress(0.0, text=f"Predicting {len(queries)} queries…")
    rows: list[dict] = []
    drawn = time.monotonic()
    for i, query in enumerate(queries, start=1):
        try:
            result = predictor.predict(query, **cfg.options())
        except Exception as exc:  # noqa: BLE001  (bad input comes back in result.error; this is a bug)
            log.exception("batch row failed")
            result = QueryResult(query=query, method=cfg.method, error=f"the model failed ({type(exc).__name__})")
        rows.extend(rows_of(result, cfg.method))
        if time.monotonic() - drawn > PROGRESS_EVERY_S or i == len(queries):
            bar.progress(i / len(queries), text=f"Predicted {i} of {len(queries)} queries")
            drawn = time.monotonic()
    bar.empty()
    return pd.DataFrame(rows, columns=COLUMNS).astype({"rank": "Int64", "model_calls": "Int64",
                                                        "accepted_tokens": "Int64"})


def safe_csv(table: pd.DataFrame) -> bytes:
    """CSV where no cell can run as a spreadsheet formula."""
    return table.map(neutralize).to_csv(index=False).encode("utf-8")


def show(batch: BatchResult) -> None:
    table = batch.table
    n_good = batch.n_queries - batch.n_rejected
    st.subheader("Results")
    st.caption(common.md_escape(f"{batch.file_name} · {batch.settings.describe()}"))
    queries, predicted, rejected = st.columns(3)
    queries.metric("Queries", batch.n_queries)
    predicted.metric("Predicted", n_good)
    rejected.metric("Rejected", batch.n_rejected)
    if batch.n_rejected:
        st.warning(f"{batch.n_rejected} of {batch.n_queries} rows were rejected; their reason is in the "
                   "`error` column. The other rows were predicted.", icon=":material/warning:")
    st.dataframe(table, hide_index=True, placeholder="", column_order=SCREEN_ORDER, column_config={
        "query": st.column_config.TextColumn("query", width="medium"),
        "smiles": st.column_config.TextColumn("predicted SMILES", width="medium"),
        "score": st.column_config.NumberColumn("score", format="%.3f", help="Sum of token log-probabilities"),
        "error": st.column_config.TextColumn("error", width="large"),
        "time_ms": st.column_config.NumberColumn("time (ms)", format="%.1f"),
        "accepted_tokens": st.column_config.NumberColumn("accepted draft tokens"),
        "model_calls": st.column_config.NumberColumn("model calls"),
    })
    st.download_button("Download CSV", data=safe_csv(table), file_name=f"{Path(batch.file_name).stem}-predictions.csv",
                       mime="text/csv", on_click="ignore", icon=":material/download:", type="primary")


def main() -> None:
    cfg = common.settings()
    st.title("Batch prediction")
    st.caption("Upload a TXT file (one SMILES per line) or a CSV with a `smiles` column. Every row is "
               "predicted with the sidebar settings; rejected rows are reported next to the good ones.")
    if cfg.model_dir is None:
        st.warning("No model is installed for this task; switch the task in the sidebar.", icon=":material/warning:")
        return
    with st.form("batch_form"):
        upload = st.file_uploader("Query file", type=["csv", "txt"])
        column = st.text_input("CSV column (optional)",
                               placeholder="automatic: smiles, SMILES, query, reactants or product",
                               help="The column that holds the SMILES, when it has another name.")
        submitted = st.form_submit_button("Run batch", type="primary", icon=":material/play_arrow:")
    if submitted:
        if upload is None:
            st.error("Choose a CSV or TXT file first.", icon=":material/error:")
        else:
            try:
                queries = read_upload(upload.name, upload.getvalue(), column.strip())
            except InputFileError as exc:
                st.error(common.md_escape(f"Cannot read the file: {exc}"), icon=":material/error:")
            else:
                table = predict_all(queries, cfg)
                n_rejected = int(table.loc[table["rank"].isna()].shape[0])
                st.session_state["batch"] = BatchResult(upload.name, cfg, table, len(queries), n_rejected)
    batch = st.session_state.get("batch")
    if batch is not None:
        show(batch)


if __name__ == "__main__":  # Streamlit runs a page as __main__; tests import its functions
    main()
