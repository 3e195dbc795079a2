"""The Batch page (views/batch.py): what a QA pass in a browser found wrong, each pinned by a test. A run cut short
kept none of its rows; blank records counted as rejected queries; some counts read wrong or ungrammatical.

Pages are driven with Streamlit's AppTest and the tiny copy model, through test_app.py's helpers. A Stop, or a click
during a run (Streamlit's fast reruns stop the running script and start the next), ends the script run inside its
next Streamlit call with a StopException; the tests raise one from the model's predict, which ends the run the same
way, mid-file.
"""
from __future__ import annotations

import dataclasses
import io
import re

import pandas as pd
import pytest
import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import StopException

import test_app
from conftest import as_forward_and_retro
from molspec_core.io import QueryFile, parse_upload
from molspec_core.service import Predictor
from test_app import BATCH, assert_clean, batch_page, submit, texts
from views.batch import results_key, safe_csv, table_hint

copy_models = test_app.copy_models  # the fixture: a models folder whose `forward` model is the copy model

BLANK = "blank: this record holds no query (skipped, not counted as a query)"  # a blank row's error
# Rows 2 and 6 are blank, row 4 is no SMILES: 7 records, 5 queries (the copy model reads these)
QUERIES = b"Oc1ccncc1\n\nc1ccncc1Cl\nxyz\nOCC\n  \nOc1ccncc1\n"


class Asked(list):
    """The queries the model is asked, in order; at the query numbered stop_at (1-based; 0: never) it ends the
    script run as a Stop or a click on another page does at the page's next Streamlit call."""
    stop_at = 0


@pytest.fixture()
def asked(monkeypatch) -> Asked:
    calls = Asked()
    real = Predictor.predict

    def predict(self, query: str, **options):
        calls.append(query)
        if len(calls) == calls.stop_at:
            raise StopException()
        return real(self, query, **options)

    monkeypatch.setattr(Predictor, "predict", predict)
    return calls


def untimed(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns="time_ms").reset_index(drop=True)


def whole_run(copy_models, monkeypatch) -> pd.DataFrame:
    """QUERIES' table from a run nobody stopped."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")
    return at.session_state[BATCH].table


def test_a_stopped_run_keeps_its_rows_and_continue_predicts_the_rest(copy_models, monkeypatch, asked):
    """Stop, another page opened, or Run batch pressed again threw away every row predicted: the rows lived in a
    local variable until the loop ended. The rows done now stay in the session, the page says how far the run got
    and offers Continue, also after a visit to another page (whose return empties the uploader)."""
    expected = whole_run(copy_models, monkeypatch)
    asked.clear()
    at = batch_page(monkeypatch, copy_models)
    asked.stop_at = 3  # the run stops in row 4 (the third query; row 2 is blank)
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")
    at.run()  # the page drawn again, as any click after a Stop does
    assert_clean(at)
    assert "q.txt: stopped after 3 of 7 rows; the table and downloads hold those rows." in texts(at.warning)
    assert not at.get("progress")
    assert at.session_state[BATCH].table["row"].drop_duplicates().tolist() == [1, 2, 3]
    assert [b.label for b in at.get("download_button")] == ["Download CSV", "Download SDF", "Download Excel"]
    assert {m.label: m.value for m in at.metric}["Queries"] == "2"
    at = at.switch_page("views/predict.py").run()
    at = at.switch_page("views/batch.py").run()
    assert_clean(at)
    assert "stopped after 3 of 7 rows" in texts(at.warning)
    asked.stop_at = 0
    asked.clear()
    next(b for b in at.button if b.label == "Continue: 4 rows left").click()
    at.run()
    assert_clean(at)
    assert asked == ["xyz", "OCC", "Oc1ccncc1"]  # from where it stopped; the blank row 6 is not asked
    assert "stopped after" not in texts(at.warning) and not [b for b in at.button if b.label.startswith("Continue")]
    pd.testing.assert_frame_equal(untimed(at.session_state[BATCH].table), untimed(expected))


def test_run_batch_pressed_again_on_the_same_file_takes_the_run_up(copy_models, monkeypatch, asked):
    """Pressing Run batch during a run started it over from row 1; the same file with the same settings now goes
    on from the row where the run stopped, and another file or other settings start a run of their own."""
    at = batch_page(monkeypatch, copy_models)
    asked.stop_at = 2
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")
    asked.stop_at = 0
    asked.clear()
    submit(at, "Run batch")
    assert_clean(at)
    assert asked == ["c1ccncc1Cl", "xyz", "OCC", "Oc1ccncc1"]
    assert at.session_state[BATCH].table["row"].drop_duplicates().tolist() == list(range(1, 8))
    asked.clear()
    at.checkbox[0].check()  # another form: a run of its own, from row 1
    submit(at, "Run batch")
    assert asked == ["Oc1ccncc1", "c1ccncc1Cl", "xyz", "OCC", "Oc1ccncc1"]


def test_the_progress_line_counts_rows_done_not_predicted():
    """The bar read "Predicted 4 of 7 queries" with a rejected row among the 4. It said that leaving the page kept the
    rows done, and a reload of the tab (seen in Chromium) lost every one: it names what keeps them and what not."""
    from views.batch import Run, progress_text

    run = Run((), "q.txt", None, QueryFile(["CCO", "", "xyz", "CCN"] + [""] * 3), done=4, rejected=[3])
    assert progress_text(run) == ("q\\.txt: 4 of 7 rows done (1 rejected). Stopping, or opening another page of "
                                  "the app, keeps the rows done; reloading or closing the tab loses them.")


def test_blank_rows_are_skipped_and_counted_apart_from_rejected_queries(copy_models, monkeypatch, asked):
    """Blank lines and empty cells counted as rejected queries, with the Predict page's "empty query: paste or draw
    a molecule"."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Queries"], metrics["Predicted"], metrics["Rejected"]) == ("5", "4", "1")
    assert "1 of 5 queries was rejected; its reason is in the `error` column." in texts(at.warning)
    assert "The other queries were predicted. Rejected: row 4." in texts(at.warning)  # found without scrolling
    assert ("2 blank rows skipped (rows 2 and 6): a blank line or an empty query cell is no query, and is not counted "
            "as one. Their rows stay in the table") in texts(at.info)
    assert "" not in asked and "  " not in asked  # the model is not asked about them
    firsts = at.session_state[BATCH].table.drop_duplicates("row")
    assert firsts["row"].tolist() == list(range(1, 8))  # every record keeps its number
    assert firsts["error"].tolist()[1] == firsts["error"].tolist()[5] == BLANK
    at.file_uploader[0].set_value(("ids.csv", b"id,smiles\nA,Oc1ccncc1\nB,\nC,xyz\n", "text/csv"))  # an empty cell
    submit(at, "Run batch")
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Queries"], metrics["Rejected"]) == ("2", "1")
    assert "1 blank row skipped (row 2): " in texts(at.info) and "Its row stays in the table" in texts(at.info)
    exported = pd.read_csv(io.BytesIO(safe_csv(at.session_state[BATCH].table)), keep_default_na=False,
                           dtype=str).drop_duplicates("row")
    assert exported["id"].tolist() == ["A", "B", "C"] and exported["error"].tolist()[1] == BLANK


def test_counts_of_one_read_as_one(copy_models, monkeypatch):
    """ "1 of 1 rows were rejected", "1 of 2 queries are recorded reactions", "of 1 queries"; and a known-answer
    share of one query stood as a headline figure with nothing beside it to say so."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("bad.txt", b"xyz\n", "text/plain"))
    submit(at, "Run batch")
    assert ("1 of 1 query was rejected; its reason is in the `error` column. None was predicted. Rejected: row 1."
            in texts(at.warning))
    # The copy fixture is no forward model: it is asked for a recorded reaction's reactants, from its products
    at.file_uploader[0].set_value(("one.txt", b"Oc1cccnc1>>Oc1ccncc1\nOc1ccncc1\n", "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    captions = texts(at.caption)
    assert ("1 of 2 queries is a recorded reaction (reactants>reagents>products): the model was asked for its "
            "reactants") in captions
    assert "of 1 query (canonical SMILES" in captions and "1 queries" not in captions
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Known answer first"], metrics["Queries compared"]) == ("100.0%", "1 of 2")


def test_a_csv_saved_as_txt_is_named_as_one(copy_models, monkeypatch):
    """Every line of a CSV named .txt was rejected, its header too, with no word of why."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("list.txt", b"smiles,name\nOc1ccncc1,hydroxypyridine\nOCC,ethanol\n",
                                   "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    assert ("list.txt is read as a TXT file, a whole line a query, but its lines look like a table's (they hold a "
            "comma): save it with a .csv name and run it again") in texts(at.info)
    at.file_uploader[0].set_value(("plain.txt", b"Oc1ccncc1\nxyz\n", "text/plain"))  # no table: no hint
    submit(at, "Run batch")
    assert "look like a table" not in texts(at.info)


def test_a_txt_file_of_a_smiles_and_a_name_a_line_is_told_to_be_a_smi_file_not_a_tsv():
    """A TXT file of a SMILES, a tab and a name per line (no header) had every line rejected and the advice to save it
    as .tsv, which then was refused for naming no smiles column; a comma-separated one was told to be saved as .csv,
    refused so too. A header naming the query column keeps the advice to save it as a table."""
    def hint(name: str, text: str) -> str:
        return table_hint(name, QueryFile(text.splitlines()), "forward")

    named = hint("names.txt", "Oc1ccncc1\thydroxypyridine\nOCC\tethanol\n")
    assert ".smi name (a SMILES file)" in named and ".tsv" not in named
    commas = hint("names.txt", "Oc1ccncc1,hydroxypyridine\nOCC,ethanol\n")
    assert "give it a first line naming its columns (its SMILES column smiles), save it with a .csv name" in commas
    titled = hint("t.txt", "Exported 2026-01-02\nid;SMILES\n1;OCC\n")  # a title above the header
    assert titled.endswith("(they hold a semicolon): save it with a .csv name and run it again, so that its query "
                           "column is read.")
    assert hint("plain.txt", "Oc1ccncc1\nOCC\n") == ""


def test_a_csv_saved_as_smi_is_named_as_one():
    """A CSV named .smi (a SMILES file) had every line rejected, its header too, with no hint at all (the hint looked at
    TXT files only). A SMILES file's tabs are its own: a tab before each name is no table."""
    def hint(name: str, text: str) -> str:
        return table_hint(name, parse_upload(name, text.encode()), "forward")

    assert hint("list.smi", "smiles,name\nOc1ccncc1,hydroxypyridine\nOCC,ethanol\n") == (
        "list.smi is read as a SMILES file, a SMILES and a name a line, but its lines look like a table's (they hold "
        "a comma): save it with a .csv name and run it again, so that its query column is read.")
    assert hint("names.smi", "Oc1ccncc1\thydroxypyridine\nOCC\tethanol\n") == ""


def test_cells_past_the_header_are_named_on_the_page_as_the_cli_names_them(copy_models, monkeypatch):
    """A note with an unquoted comma moved its rest past the header's last column, which is not read: `molspec
    predict` said so (io.QueryFile.notes), the page dropped it in silence."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("ids.csv", b"smiles,note\nOc1ccncc1,dry, then cool\nOCC,ok\n", "text/csv"))
    submit(at, "Run batch")
    assert_clean(at)
    assert ("ids.csv: 1 record (row 1) holds cells past the header's 2 names, which are not read: a cell that holds "
            "the delimiter (a comma, say) must be quoted") in texts(at.warning)
    at.file_uploader[0].set_value(("fine.csv", b"smiles,note\nOc1ccncc1,\"dry, then cool\"\n", "text/csv"))
    submit(at, "Run batch")
    assert "past the header" not in texts(at.warning)


def test_a_script_run_that_a_later_one_took_over_writes_no_more_rows(copy_models, monkeypatch):
    """Streamlit's fast reruns start the next script run on a thread of its own while the last one runs on to its
    next st call: both held the rows, and the page built its table from rows still being written (pandas: "Length
    of values (394) does not match length of index (395)"). The later run claims the run; the earlier one's row in
    flight is not written, nor are its results."""
    from views.batch import run_key

    real = Predictor.predict

    def taken_over(self, query: str, **options):
        if query == "xyz":  # row 4: a later script run claims the run while this one predicts it
            st.session_state[run_key("forward")].claim()
        return real(self, query, **options)

    monkeypatch.setattr(Predictor, "predict", taken_over)
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    assert "q.txt: stopped after 3 of 7 rows" in texts(at.warning)
    assert at.session_state[BATCH].table["row"].drop_duplicates().tolist() == [1, 2, 3]


def test_a_run_ended_by_the_toolbar_stop_draws_its_stopped_state_unclicked(copy_models, monkeypatch, asked):
    """The toolbar's Stop ends the script run and starts none after it: the bar and the page's Stop button stood
    there, frozen, until the next click. A run now draws a watcher with its bar, a fragment Streamlit reruns on a
    timer; once the script run predicting has ended, the watcher redraws the whole page, which shows the stopped
    state. AppTest runs no timers: the fragment decorator is recorded, and the watcher called as the timer would."""
    watchers = []

    def fragment(func=None, *, run_every=None, **kwargs):
        def decorate(body):
            def watcher(*args):
                watchers.append((run_every, body, args, cut_short(*args)))
                return body(*args)
            return watcher
        return decorate if func is None else decorate(func)

    from views.batch import cut_short
    monkeypatch.setattr(st, "fragment", fragment)
    at = batch_page(monkeypatch, copy_models)
    asked.stop_at = 3
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")  # ended as a Stop ends it, and no script run after it
    [(run_every, body, args, at_start)] = watchers
    assert run_every and not at_start  # drawn with the bar, on a timer; while the rows are predicted, it waits
    reruns = []
    monkeypatch.setattr(st, "rerun", lambda **kwargs: reruns.append(kwargs))
    body(*args)  # the timer's next tick
    assert reruns == [{"scope": "app"}]


def test_a_batch_that_ends_without_rejections_says_so(copy_models, monkeypatch, asked):
    """A batch's end was read out only where a row was rejected (its warning is an alert): a clean one ended in
    silence for a screen reader. It now ends with a status line; a run with rejections keeps its warning alone, and a
    stopped run its own."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("ids.csv", b"id,smiles\nA,Oc1ccncc1\nB,\nC,OCC\n", "text/csv"))
    submit(at, "Run batch")
    assert_clean(at)
    assert texts(at.success) == "ids.csv: done, 2 queries predicted, none rejected."
    at.file_uploader[0].set_value(("one.txt", b"OCC\n", "text/plain"))
    submit(at, "Run batch")
    assert texts(at.success) == "one.txt: done, 1 query predicted, none rejected."
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))  # one row rejected: its warning says so
    submit(at, "Run batch")
    assert not at.success and "was rejected" in texts(at.warning)
    asked.clear()
    asked.stop_at = 2
    at.file_uploader[0].set_value(("good.txt", b"OCC\nOc1ccncc1\nOCC\n", "text/plain"))
    submit(at, "Run batch")
    at.run()
    assert not at.success and "good.txt: stopped after 1 of 3 rows" in texts(at.warning)


def test_a_files_answers_column_not_named_as_known_answers_is_pointed_out(copy_models, monkeypatch, asked):
    """A CSV of reactants beside their recorded products was predicted without a word of the check the page offers:
    the products sat unmarked in front of the answers. The page names the column and how to check against it; named,
    the rows are marked, not predicted again, and the hint goes."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("ids.csv", b"id,smiles,Product\nA,Oc1ccncc1,Oc1ccncc1\nB,OCC,CCO\n", "text/csv"))
    submit(at, "Run batch")
    assert_clean(at)
    hint = ("ids.csv has a column Product: to check the answers against it, name it under Known-answer column and "
            "press Run batch again")
    assert hint in texts(at.info)
    predicted = len(asked)
    at.text_input[1].input("Product")
    submit(at, "Run batch")
    assert_clean(at)
    assert len(asked) == predicted and hint not in texts(at.info)  # marked, not predicted again
    assert at.session_state[BATCH].known is not None
    at.file_uploader[0].set_value(("plain.csv", b"id,smiles\nA,OCC\n", "text/csv"))  # no such column: no hint
    submit(at, "Run batch")
    assert "Known-answer column" not in texts(at.info)


def test_a_file_that_cannot_be_read_keeps_the_last_results_and_says_whose_they_are(copy_models, monkeypatch):
    """A typo in the known-answer or query column's name threw the last run's results away (a 10,000-row file
    takes half an hour); before that, they stayed under the new file's error as if they were its results. They stay,
    and the error says whose they are; a file with no last run says nothing of results."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("odd.csv", b"id,Reactant SMILES\n1,CCO\n", "text/csv"))
    submit(at, "Run batch")
    assert "needs a column" in texts(at.error) and "results" not in texts(at.error)
    at.file_uploader[0].set_value(("ids.csv", b"id,smiles,product\nA,Oc1ccncc1,Oc1ccncc1\nB,OCC,OCC\n", "text/csv"))
    submit(at, "Run batch")
    at.text_input[1].input("prodcut")
    submit(at, "Run batch")
    assert_clean(at)
    assert ("Cannot read the file: ids.csv has no column 'prodcut' of known answers (its other columns: id, product). "
            "The results below are still the last run's, of ids.csv.") in texts(at.error)
    assert {m.label: m.value for m in at.metric}["Queries"] == "2" and at.get("download_button")
    assert at.session_state[BATCH].table["id"].drop_duplicates().tolist() == ["A", "B"]


@pytest.fixture
def download_names(monkeypatch) -> list[str]:
    """The file names of the page's download buttons, as they are drawn (cleared by the test between runs)."""
    names: list[str] = []
    real = st.download_button

    def recording(*args, **kwargs):
        names.append(kwargs["file_name"])
        return real(*args, **kwargs)

    monkeypatch.setattr(st, "download_button", recording)
    return names


def test_a_stopped_runs_downloads_say_which_rows_they_hold(copy_models, monkeypatch, asked, download_names):
    """A stopped run's files were named as the whole file's (q-predictions.csv), and its rows filed away as the
    results; they now name the rows they hold, as `molspec predict` keeps a stopped run's rows in .interrupted.csv,
    and a finished run's keep the plain name."""
    at = batch_page(monkeypatch, copy_models)
    asked.stop_at = 3
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")
    download_names.clear()
    at.run()
    assert download_names == ["q-predictions-rows-1-3-of-7.csv", "q-predictions-rows-1-3-of-7.sdf",
                     "q-predictions-rows-1-3-of-7.xlsx"]
    asked.stop_at = 0
    download_names.clear()
    next(b for b in at.button if b.label == "Continue: 4 rows left").click()
    at.run()
    assert download_names == ["q-predictions.csv", "q-predictions.sdf", "q-predictions.xlsx"]


def test_a_compressed_uploads_results_are_named_without_its_suffixes(copy_models, monkeypatch, download_names):
    """queries.txt.gz gave queries.txt-predictions.csv (and .sdf, .xlsx)."""
    import gzip

    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("Q.TXT.GZ", gzip.compress(QUERIES), "application/gzip"))
    submit(at, "Run batch")
    assert_clean(at)
    assert download_names[-3:] == ["Q-predictions.csv", "Q-predictions.sdf", "Q-predictions.xlsx"]


def test_the_sheet_a_workbooks_queries_are_read_from_is_named(copy_models, monkeypatch):
    """A workbook's first sheet naming a query column is read, and where it had several sheets nothing said which:
    a Summary sheet with a SMILES column ahead of the data read as the queries without a word. Recorded reactions
    (known.with_recorded) keep the name too."""
    import openpyxl

    book = openpyxl.Workbook()
    book.active.title = "Notes"
    book.active.append(["made by", "me"])
    data = book.create_sheet("Data")
    data.append(["id", "reaction"])
    data.append(["r1", "Oc1cccnc1>>Oc1ccncc1"])
    buffer = io.BytesIO()
    book.save(buffer)
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("two.xlsx", buffer.getvalue(), "application/octet-stream"))
    submit(at, "Run batch")
    assert_clean(at)
    assert "two.xlsx · queries from the column reaction of the sheet Data · Forward" in texts(at.caption)
    one = openpyxl.Workbook()
    one.active.append(["smiles"])
    one.active.append(["Oc1ccncc1"])
    buffer = io.BytesIO()
    one.save(buffer)
    at.file_uploader[0].set_value(("one.xlsx", buffer.getvalue(), "application/octet-stream"))
    submit(at, "Run batch")
    assert "one.xlsx · queries from the column smiles · Forward" in texts(at.caption)


def test_a_file_over_the_apps_row_limit_is_refused_in_numbers_as_the_page_writes_them():
    """The refusal read "has 10001 rows; the app predicts at most 10000 (... up to 100000)", where every other count
    on the page has its thousands separated."""
    from molspec_core.io import InputFileError
    from views.batch import read_upload

    with pytest.raises(InputFileError, match=r"has 10,001 rows; the app predicts at most 10,000 \(the command line "
                       r"`molspec predict --input` takes up to 100,000\)"):
        read_upload("big.txt", b"C\n" * 10_001, None)


def test_the_known_answer_column_is_named_in_any_case_as_the_query_column_is(copy_models, monkeypatch):
    """The field's own example, "product", was refused for a file whose header says "Product" ("has no column
    'product' of known answers (its other columns: id, Product)"), where the query column is found in any case."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("ids.csv", b"id,SMILES,Product\nA,Oc1ccncc1,Oc1ccncc1\nB,OCC,CCO\n", "text/csv"))
    at.text_input[1].input(" product ")
    submit(at, "Run batch")
    assert_clean(at)
    assert not at.error
    assert {m.label: m.value for m in at.metric}["Queries compared"] == "2 of 2"
    assert "Known answers from the column Product: " in texts(at.caption)
    assert at.session_state[BATCH].table.columns[:2].tolist() == ["id", "Product"]


def test_a_wrong_known_answer_column_lists_the_files_own_columns_not_those_the_page_adds(copy_models, monkeypatch):
    """A file of recorded reactions with the known-answer column misspelt was told its other columns were 'id,
    recorded_products, recorded_reaction': the last two are the page's (known.with_recorded), not the file's. Naming
    the column the page adds still marks the answers with it."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("rxn.csv", b"id,smiles\nA,Oc1ccncc1>>Oc1ccncc1\n", "text/csv"))
    at.text_input[1].input("prodcut")
    submit(at, "Run batch")
    assert_clean(at)
    assert "Cannot read the file: rxn.csv has no column 'prodcut' of known answers (its other columns: id)." in texts(
        at.error)
    at.file_uploader[0].set_value(("rxn.txt", b"Oc1ccncc1>>Oc1ccncc1\n", "text/plain"))
    submit(at, "Run batch")
    assert "rxn.txt has no column 'prodcut' of known answers (its other columns: none besides its queries)" in texts(
        at.error)
    at.text_input[1].input("Recorded_Reactants")  # the copy model's task is no forward one: it predicts reactants
    submit(at, "Run batch")
    assert not at.error
    assert {m.label: m.value for m in at.metric}["Queries compared"] == "1 of 1"


def test_a_known_answer_column_named_after_the_run_marks_its_rows_without_predicting_them_again(
        copy_models, monkeypatch, asked):
    """Naming the known-answer column after a run (forgotten at first) predicted the whole file again, half an hour
    for 10,000 rows, and after a stop started it over from row 1: the answers do not depend on it. The rows done are
    marked with it; a stopped run goes on from where it stopped; the same form again is still a run of its own."""
    data = b"id,smiles,product\nA,Oc1ccncc1,Oc1ccncc1\nB,xyz,CCO\nC,OCC,OCC\nD,Oc1ccncc1,CCO\n"
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("ids.csv", data, "text/csv"))
    submit(at, "Run batch")
    assert "Known answer first" not in [m.label for m in at.metric]
    asked.clear()
    at.text_input[1].input("product")
    submit(at, "Run batch")
    assert_clean(at)
    assert asked == []  # nothing predicted again
    assert {m.label: m.value for m in at.metric}["Queries compared"] == "3 of 3"
    marked = untimed(at.session_state[BATCH].table)
    submit(at, "Run batch")  # the same form again: a run of its own, as before, whose marks are the same
    assert asked == ["Oc1ccncc1", "xyz", "OCC", "Oc1ccncc1"]
    pd.testing.assert_frame_equal(untimed(at.session_state[BATCH].table), marked)
    asked.clear()
    asked.stop_at = 2  # a stopped run (of another file), then the column named: it goes on from row 2 with it
    at.file_uploader[0].set_value(("more.csv", data, "text/csv"))
    at.text_input[1].input("")
    submit(at, "Run batch")
    at.run()
    assert "more.csv: stopped after 1 of 4 rows" in texts(at.warning)
    asked.clear()
    asked.stop_at = 0
    at.text_input[1].input("product")
    submit(at, "Run batch")
    assert asked == ["xyz", "OCC", "Oc1ccncc1"]
    assert {m.label: m.value for m in at.metric}["Queries compared"] == "3 of 3"
    assert at.session_state[BATCH].table["id"].drop_duplicates().tolist() == ["A", "B", "C", "D"]


def test_the_rejected_rows_are_named_where_their_count_is(copy_models, monkeypatch):
    """ "3 of 59 queries were rejected; their reason is in the `error` column" sent a chemist down a table of 280
    rows (five answers a query) to find them; the warning names them, as the blank rows' note names those."""
    at = batch_page(monkeypatch, copy_models)
    data = "\n".join(["OCC", "xyz", "Oc1ccncc1", "", "C1CC", "OCC", "xyz", "OCC", "=C=", "xyz", "xyz", "OCC"]) + "\n"
    at.file_uploader[0].set_value(("q.txt", data.encode(), "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    assert ("6 of 11 queries were rejected; their reason is in the `error` column. The other queries were predicted. "
            "Rejected: rows 2, 5, 7, 9, 10 and 11.") in texts(at.warning)
    at.file_uploader[0].set_value(("more.txt", data.encode() + b"xyz\n", "text/plain"))
    submit(at, "Run batch")
    assert "Rejected: rows 2, 5, 7, 9, 10 and 2 more." in texts(at.warning)


def test_a_table_whose_query_cells_are_all_empty_is_refused_as_a_file_of_no_queries(copy_models, monkeypatch):
    """A TXT file of blank lines was refused ("holds no queries"), but a CSV whose query column is empty ran, and
    ended "done, 0 queries predicted, none rejected", with an empty table to download."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("ids.csv", b"id,smiles,name\nA,,x\nB, ,y\n", "text/csv"))
    submit(at, "Run batch")
    assert_clean(at)
    assert ("Cannot read the file: ids.csv holds no queries: the query cell of each of its 2 records is empty."
            == texts(at.error))
    assert BATCH not in at.session_state and not at.get("download_button")


# ---- in a browser: what the keyboard and a screen reader meet ------------------------------------------------------
# test_browser's server, browser and page fixtures; where it cannot run (no Chromium, no playwright, no shipped
# model), these tests are skipped for its reason, and the ones above still run.

try:
    from test_browser import browser, page, server, start_greedy_batch  # noqa: F401  (fixtures)
    BROWSER_MISSING = ""
except pytest.skip.Exception as missing:
    BROWSER_MISSING = str(missing)
needs_browser = pytest.mark.skipif(bool(BROWSER_MISSING), reason=BROWSER_MISSING)
# The focused button's text ("" where no button has the focus: the page's body, whose text holds every button's)
FOCUSED = "() => document.activeElement.tagName === 'BUTTON' ? document.activeElement.innerText : ''"


@needs_browser
def test_the_bar_is_named_by_its_text_and_stop_and_continue_keep_the_focus(page, tmp_path):
    """Streamlit names every progress bar "progress", whatever its text says; and a press on Stop the batch (or on
    Continue) dropped the keyboard's focus to the top of the page, as Streamlit removes the button pressed. The bar
    is named by its line, Stop hands the focus to Continue, and Continue to the run's Stop button."""
    from playwright.sync_api import expect

    start_greedy_batch(page, tmp_path / "many.txt", 400)
    expect(page.get_by_role("progressbar", name=re.compile(r"^many\.txt: [\d,]+ of 1,600 rows done"))).to_have_count(1)
    page.get_by_role("button", name="Stop the batch").focus()
    page.keyboard.press("Enter")
    page.get_by_role("button", name=re.compile("^Continue")).wait_for()
    page.wait_for_function(f"() => ({FOCUSED})().includes('Continue:')", timeout=10_000)
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Stop the batch").wait_for()
    page.wait_for_function(f"() => ({FOCUSED})().includes('Stop the batch')", timeout=10_000)
    page.keyboard.press("Enter")  # and the next Stop hands it to Continue again
    page.wait_for_function(f"() => ({FOCUSED})().includes('Continue:')", timeout=10_000)
    page.get_by_test_id("stSidebarNav").get_by_text("Models").click()  # away and back: Continue on a fresh page
    page.get_by_role("heading", name="Models").wait_for()
    page.get_by_test_id("stSidebarNav").get_by_text("Batch").click()
    page.get_by_role("button", name=re.compile("^Continue")).click()
    page.get_by_role("button", name="Stop the batch").wait_for()
    assert page.get_by_role("button", name="Download CSV").count() == 0  # the stopped run's results left with it


@needs_browser
def test_the_focus_on_stop_goes_to_the_results_when_the_run_ends(page, tmp_path):
    """Where the run ended with the keyboard's focus on Stop the batch, the button went and the focus fell to the top
    of the page; it goes to the results' Download CSV. 1,600 rows, as in the test above, and a wait as long as the
    whole run: 200 rows ended in 2-3 s, at times before Stop could be focused."""
    start_greedy_batch(page, tmp_path / "many.txt", 400)
    page.get_by_role("button", name="Stop the batch").focus()
    page.wait_for_function(f"() => ({FOCUSED})().includes('Stop the batch')", timeout=10_000)
    page.get_by_role("button", name="Download CSV").wait_for(timeout=300_000)  # the whole run, on a busy machine
    page.wait_for_function(f"() => ({FOCUSED})().includes('Download CSV')", timeout=10_000)


def test_the_uploader_offers_every_file_the_command_line_reads():
    """The uploader's list was written out by hand and lacked .xlsm, which `molspec predict` and the Routes page's
    stock read: a chemist's macro workbook could not be chosen."""
    from views.batch import BATCH_FILE_TYPES
    from views.routes import STOCK_FILE_TYPES

    assert "xlsm" in BATCH_FILE_TYPES and set(STOCK_FILE_TYPES) <= set(BATCH_FILE_TYPES)


def test_the_results_say_which_column_the_queries_were_read_from(copy_models, monkeypatch):
    """A file holding both a reactants and a product column: the page said nowhere which one it had read."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("both.csv", b"id,Product,Reactants\n1,CCO,CC=O\n", "text/csv"))
    submit(at, "Run batch")
    assert_clean(at)
    assert "both.csv · queries from the column Reactants · " in texts(at.caption)
    at.file_uploader[0].set_value(("made.csv", b"id,Reaction\n1,CC=O>>CCO\n", "text/csv"))  # a recorded reaction
    submit(at, "Run batch")
    assert "made.csv · queries from the column Reaction · " in texts(at.caption)


def test_a_query_stopped_at_the_time_limit_keeps_its_answers_and_is_not_called_rejected(copy_models, monkeypatch):
    """A query stopped at its time limit with answers found was written as one error row and counted, and warned
    of, as rejected. Its rows hold the answers with the error beside them, and the page says it was stopped."""
    from conftest import decoder_clock

    real = Predictor.predict

    def predict(self, query: str, **options):  # this query's decoder calls take a second each, its limit 3.5 s
        if query == "OCCOc1ccccc1":
            decoder_clock(self.model, monkeypatch)
            options = {**options, "time_limit_s": 3.5}
        return real(self, query, **options)

    monkeypatch.setattr(Predictor, "predict", predict)
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("q.txt", b"Oc1ccncc1\nOCCOc1ccccc1\nxyz\n", "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Queries"], metrics["Predicted"], metrics["Rejected"]) == ("3", "2", "1")
    assert "1 query was stopped at the time limit (row 2): its rows hold the answers found by then" in texts(
        at.warning)
    assert "1 of 3 queries was rejected" in texts(at.warning) and "Rejected: row 3." in texts(at.warning)
    table = at.session_state[BATCH].table
    stopped = table[table["row"] == 2]
    assert stopped["rank"].notna().all() and stopped["error"].str.startswith("stopped after the 3.5 s").all()
    assert not at.success


def test_a_query_stopped_with_answers_has_them_checked_round_trip(monkeypatch):
    """A retrosynthesis row stopped at the time limit keeps and shows its answers, but only rows without an error went
    through the round-trip check: its round_trip and forward_prob columns stayed empty (the Predict page, the CLI
    and the server check them)."""
    from molspec_core.service import Prediction, QueryResult
    from views import batch, common

    stopped = QueryResult(query="CCO", method="beam", error="stopped after the 1 s time limit per query",
                          predictions=(Prediction(1, "CC=O.O", -1.0, True, ("C",), (-1,)),), task="retro")
    checked = []
    monkeypatch.setattr(batch, "check_round_trip", lambda result, forward, k: checked.append(result) or result)

    class Stopper:
        def predict(self, query, **options):
            return stopped

    settings = common.Settings("retro", "retro", "beam", 1, None, None, None, "forward", 1)
    run = batch.Run((), "q.txt", settings, QueryFile(["CCO"]))
    assert batch.predict_one(Stopper(), object(), run, "CCO") is stopped and checked == [stopped]


def test_retrosynthesis_queries_of_several_molecules_are_named_with_the_predict_pages_note():
    """A file of hydrochlorides read for retrosynthesis: the model takes the salt as one product and builds the Cl
    into its answers. The Predict page and `predict --smiles` say so; the Batch page said nothing."""
    from molspec_core.io import result_rows, several_molecules_note
    from molspec_core.service import Prediction, QueryResult, several_products_note
    from views import batch, common

    def answered(query: str, canonical: str) -> QueryResult:
        return QueryResult(query=query, canonical_query=canonical, method="beam", task="retro",
                           predictions=(Prediction(1, "CC(=O)Cl.CN", -1.0, True, ("C",), (-1,)),))

    salt = "CN1CCN(C(=O)c2ccccc2)CC1.Cl"
    settings = common.Settings("retro", "retro", "beam", 1, None, None, None, "forward", 1)
    run = batch.Run((), "salts.csv", settings, QueryFile(["CNC(C)=O", salt, "CC.", salt], ["smiles", "name"],
                                                           [("CNC(C)=O", "a"), (salt, "b"), ("CC.", "c"), (salt, "d")]))
    rejected = QueryResult(query="CC.", canonical_query="CC.C", method="beam", error="refused", task="retro")
    run.rows = [*result_rows(1, ("CNC(C)=O", "a"), answered("CNC(C)=O", "CNC(C)=O")),
                *result_rows(2, (salt, "b"), answered(salt, salt)),
                *result_rows(3, ("CC.", "c"), rejected),  # no answers: nothing built the second molecule in
                *result_rows(4, (salt, "d"), answered(salt, salt))]
    run.done = 4
    summary = batch.summarize(run)
    assert summary.several == ((2, salt), (4, salt))
    text = several_molecules_note(summary.several)
    assert text.startswith("2 queries hold several molecules (rows 2 and 4). Row 2: ")
    assert text.endswith(several_products_note("retro", salt)) and "CN1CCN(C(=O)c2ccccc2)CC1" in text
    forward = common.Settings("forward", "forward", "beam", 1, None, None, None, "", 1)
    assert batch.summarize(batch.Run((), "f.csv", forward, run.queries, rows=run.rows, done=4)).several == ()


def test_the_pages_own_results_uploaded_again_ask_which_column_to_read(copy_models, monkeypatch):
    """The page's CSV download, uploaded again, was read with its smiles column, the answers, as the queries: it is
    refused, saying which column to name, and naming query predicts its queries again."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("ids.csv", b"id,smiles\nA,Oc1ccncc1\n", "text/csv"))
    submit(at, "Run batch")
    assert_clean(at)
    assert at.session_state[BATCH].table["smiles"].str.len().min() > 0  # answers, below their query
    results = safe_csv(at.session_state[BATCH].table)
    reupload_is_refused_until_query_is_named(at, ("ids-results.csv", results, "text/csv"))


def reupload_is_refused_until_query_is_named(at, upload: tuple[str, bytes, str]) -> None:
    """Our own results uploaded again are refused, saying which column to name; naming query reads the queries."""
    at.file_uploader[0].set_value(upload)
    submit(at, "Run batch")
    assert "MolSpec's own results" in texts(at.error) and "query, to predict its queries again" in texts(at.error)
    at.text_input[0].input("query")
    submit(at, "Run batch")
    assert_clean(at)
    read = at.session_state[BATCH].run.queries
    assert read.query_column == "query" and set(read.queries) == {"Oc1ccncc1"}


def test_the_pages_own_sd_download_uploaded_again_asks_which_field_to_read(copy_models, monkeypatch):
    """The page's Download SDF, uploaded again, was read with each record's molecule, an answer, as the query; an SD
    file has no column to name, and the page refused one. It is refused as the CSV is, and naming the field query
    predicts its queries again."""
    from views.batch import results_sdf

    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("ids.csv", b"id,smiles\nA,Oc1ccncc1\n", "text/csv"))
    submit(at, "Run batch")
    reupload_is_refused_until_query_is_named(
        at, ("ids-results.sdf", results_sdf(at.session_state[BATCH].table), "chemical/x-mdl-sdfile"))
    assert "ids-results.sdf · queries from the field query · " in texts(at.caption)


def test_a_batchs_time_limit_is_set_in_its_form_and_a_stopped_row_says_where(copy_models, monkeypatch):
    """A row stopped at the 60 s time limit was told in its `error` cell to "try a longer time limit", and the page
    had no time limit to set. The form sets it; the run keeps it (its caption names one not the default), the page
    says where to set a longer one, and the same file with another limit is a run of its own."""
    from conftest import decoder_clock

    real, limits = Predictor.predict, []

    def predict(self, query: str, **options):  # every decoder call takes a second on the time limit's clock
        decoder_clock(self.model, monkeypatch)
        limits.append(options.get("time_limit_s"))
        return real(self, query, **options)

    monkeypatch.setattr(Predictor, "predict", predict)
    at = batch_page(monkeypatch, copy_models)
    at.selectbox(key="method").set_value("greedy").run()  # stopped with no answer: a row of its error
    at.number_input(key="time_limit_batch").set_value(3)
    at.file_uploader[0].set_value(("q.txt", b"OCCOc1ccccc1\n", "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    assert limits == [3] and at.session_state[BATCH].table["error"][0].startswith("stopped after the 3 s time limit")
    assert at.session_state[BATCH].table["model_calls"][0] == 3  # the calls it made (io.result_rows), not an empty cell
    assert "time limit 3 s a query" in texts(at.caption)
    assert ("For a longer time limit than the 3 s a query it stopped at, raise *Time limit per query (s)* in the form "
            "above and run "
            "the batch again") in texts(at.caption)
    at.number_input(key="time_limit_batch").set_value(60)
    submit(at, "Run batch")
    assert limits == [3, 60] and not at.session_state[BATCH].n_rejected
    assert "time limit" not in texts(at.caption)


def test_a_query_the_time_limit_stopped_before_any_answer_is_not_called_rejected(copy_models, monkeypatch, asked):
    """A greedy query stopped by the time limit before any answer was counted "Rejected" and the page said the model
    had rejected it (`molspec predict`, evaluate and calibrate count it apart): a user took a slow query for one the
    model would not take. It is counted and warned of as timed out, and a run stopped and continued keeps the count."""
    from conftest import decoder_clock

    real = Predictor.predict

    def predict(self, query: str, **options):  # this query's decoder calls take a second each, its limit 3 s
        if query != "OCCOc1ccccc1":
            return real(self, query, **options)
        with monkeypatch.context() as clocked:  # the next queries decode on the real clock
            decoder_clock(self.model, clocked)
            return real(self, query, **options)

    monkeypatch.setattr(Predictor, "predict", predict)  # under `asked`'s, which stops the run at the third query
    at = batch_page(monkeypatch, copy_models)
    at.selectbox(key="method").set_value("greedy").run()
    at.number_input(key="time_limit_batch").set_value(3)
    asked.stop_at = 3
    at.file_uploader[0].set_value(("q.txt", b"Oc1ccncc1\nOCCOc1ccccc1\nxyz\nc1ccncc1Cl\n", "text/plain"))
    submit(at, "Run batch")
    at.run()
    assert "q.txt: stopped after 2 of 4 rows; the table and downloads hold those rows." in texts(at.warning)
    asked.stop_at = 0
    next(b for b in at.button if b.label == "Continue: 2 rows left").click()
    at.run()
    assert_clean(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"Queries": "4", "Predicted": "2", "Rejected": "1", "Timed out": "1"}
    warned = texts(at.warning)
    assert ("1 of 4 queries was stopped by the time limit before any answer (row 2): not rejected by the model"
            in warned), warned
    assert "1 of 4 queries was rejected; its reason is in the `error` column. 2 queries were predicted. Rejected: " \
           "row 3." in warned, warned
    assert not at.success
    batch = at.session_state[BATCH]
    assert batch.rejected == (3,) and batch.unanswered == (2,)
    assert batch.table["error"][batch.table["row"] == 2].str.startswith("stopped after the 3 s time limit").all()


def test_an_answer_rdkit_cannot_read_says_so_on_screen(copy_models, monkeypatch):
    """An answer RDKit cannot read (ClC(Cl)(Cl)ClCl, the shipped model's fifth answer for [Na+].[Cl-]) showed as an
    unticked "sane" beside an empty "concerns" cell: the table on screen left out the CSV's `valid` column, which
    says why. It stands before `sane` now."""
    import dataclasses

    real = Predictor.predict

    def predict(self, query: str, **options):  # the first answer written as the model might, unreadable
        result = real(self, query, **options)
        unreadable = dataclasses.replace(result.predictions[0], smiles="ClC(Cl)(Cl)ClCl", valid=False, concerns=())
        return dataclasses.replace(result, predictions=(unreadable, *result.predictions[1:]))

    monkeypatch.setattr(Predictor, "predict", predict)
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("q.txt", b"Oc1ccncc1\n", "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    order = list(at.dataframe[0].proto.column_order)
    assert order[order.index("smiles") + 1:order.index("smiles") + 4] == ["valid", "sane", "concerns"]
    first = at.session_state[BATCH].table.iloc[0]
    assert (first["smiles"], first["valid"], first["concerns"]) == ("ClC(Cl)(Cl)ClCl", False, "")


def test_results_say_when_the_sidebar_has_changed_since_their_run(copy_models, monkeypatch):
    """A run's results stayed on screen, under their own caption, after the sidebar's method changed, with nothing
    to say they are not the new settings' (the Predict page says so of its answers). A setting the method does not
    read changes nothing and is not named; the same settings again remove the note."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("q.txt", b"Oc1ccncc1\n", "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    differ = "The sidebar's settings differ now from these results'"
    assert differ not in texts(at.caption)
    at.selectbox(key="method").set_value("greedy").run()
    assert differ in texts(at.caption) and "Beam search" in texts(at.caption)  # the results' own settings named
    at.selectbox(key="method").set_value("beam").run()
    assert differ not in texts(at.caption)


def test_the_writings_read_column_holds_whole_numbers_beside_a_rejected_row(copy_models, monkeypatch):
    """The CSV and workbook of a batch with a rejected row wrote writings_read as 5.0 where `molspec predict` writes
    5: the page typed the whole-number columns it listed, and writings_read, added since, was not among them."""
    import json

    from molspec_core.io import RESULT_TYPES

    config = copy_models / "forward" / "config.json"  # the copy model, read in several writings
    config.write_text(json.dumps({**json.loads(config.read_text()), "data_stats": {"augment": 20}}))
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("q.txt", b"OCCOc1ccccc1\nxyz\n", "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    exported = pd.read_csv(io.BytesIO(safe_csv(at.session_state[BATCH].table)), keep_default_na=False, dtype=str)
    whole = [name for name, kind in RESULT_TYPES.items() if kind is int]
    assert "writings_read" in whole and exported["writings_read"].iloc[0] == "5"
    for name in whole:  # every whole-number column, on the answers' rows and the rejected one's
        assert all(re.fullmatch(r"\d*", cell) for cell in exported[name]), (name, exported[name].tolist())


def test_recorded_reactions_beside_a_named_known_answer_column_say_their_outcomes_are_not_compared(
        copy_models, monkeypatch):
    """A file of plain queries with a `product` column named as the known answers, and a recorded reaction among them
    (its product cell empty): the results said the recorded products "are in the column recorded_products", and then
    "not counted: 1 query with no known answer", without a word that its recorded product was not compared."""
    at = batch_page(monkeypatch, copy_models)
    data = b"smiles,product\nOc1ccncc1,Oc1ccncc1\nOc1cccnc1>>Oc1ccncc1,\n"
    at.file_uploader[0].set_value(("mixed.csv", data, "text/csv"))
    at.text_input[1].input("product")
    submit(at, "Run batch")
    assert_clean(at)
    captions = texts(at.caption)
    assert ("the recorded reactants are in the column recorded_reactants, kept, not compared: the answers are "
            "compared with the known-answer column named, product.") in captions
    assert "not counted: 1 query with no known answer" in captions
    at.text_input[1].input("")  # the recorded outcomes are the known answers: nothing to say
    submit(at, "Run batch")
    assert "not compared" not in texts(at.caption)


def test_one_rejected_hydride_row_holds_one(copy_models, monkeypatch):
    """ "1 of the rejected rows hold a hydride written as one species"."""
    from molspec_core.service import Predictor, QueryResult

    real = Predictor.predict

    def refused(self, query, **options):  # the copy model's vocabulary has no ion writing to offer
        if query == "[NaH]":
            return QueryResult(query=query, method=options["method"], error="token '[NaH]'", suggestion="[H-].[Na+]")
        return real(self, query, **options)

    monkeypatch.setattr(Predictor, "predict", refused)
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("one.txt", b"[NaH]\nOc1ccncc1\n", "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    assert "1 of the rejected rows holds a hydride written as one species" in texts(at.info)


def test_the_results_csv_is_written_once_and_goes_with_the_page(copy_models, monkeypatch):
    """The CSV download's bytes were written whenever the page was drawn with results on it: after 10,000 queries
    of beam search (50,000 rows), every click in the sidebar or return to the page wrote the whole file again,
    seconds each. Made on its click instead (4e390b9), a click in the second after a run's end got nothing: the run's
    watcher draws the page again then, which replaces a file made on the click, and the click asked for the old one.
    The CSV is written once for the results and drawn with the page as bytes, whose file a redraw keeps."""
    import molspec_core.io as molspec_io

    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")
    written, offered = [], {}
    real_csv, real_button = molspec_io.csv_bytes, st.download_button

    def counting(*args, **kwargs):
        written.append(args)
        return real_csv(*args, **kwargs)

    def recording(label, data, **kwargs):
        offered[label] = data
        return real_button(label, data, **kwargs)

    monkeypatch.setattr(molspec_io, "csv_bytes", counting)
    monkeypatch.setattr(st, "download_button", recording)
    at.run()  # the page drawn again, as a click in the sidebar draws it
    assert_clean(at)
    assert written == []
    batch = at.session_state[BATCH]
    assert offered["Download CSV"] == safe_csv(batch.table, batch.model)  # bytes, not a callable made on click


def test_a_batchs_downloads_name_the_model_that_gave_them(copy_models, monkeypatch):
    """The CSV, SD file and workbook said which answers and nothing of which model gave them: a file sent to a
    colleague could not be told from another model's. Each ends with the model's folder and its weights' fingerprint
    (io.MODEL_COLUMNS), after the columns it had, in their order."""
    from molspec_core.calibration import weights_fingerprint
    from molspec_core.chem import sd_records
    from molspec_core.io import MODEL_COLUMNS
    from views.batch import results_sdf, results_workbook

    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("ids.csv", b"id,smiles,model_folder\nA,Oc1ccncc1,mine\nB,xyz,mine\n", "text/csv"))
    submit(at, "Run batch")
    assert_clean(at)
    batch = at.session_state[BATCH]
    model = ("forward", weights_fingerprint(copy_models / "forward"))
    assert batch.model == model and len(model[1]) == 64
    exported = pd.read_csv(io.BytesIO(batch.csv), keep_default_na=False, dtype=str)
    before = pd.read_csv(io.BytesIO(safe_csv(batch.table)), keep_default_na=False, dtype=str)  # the CLI's columns
    assert list(exported.columns) == [*before.columns, *MODEL_COLUMNS]
    assert before.columns[1] == "input_model_folder"  # the file's own column of that name keeps its cells apart
    pd.testing.assert_frame_equal(exported[list(before.columns)], before)
    assert set(zip(exported["model_folder"], exported["model_weights"])) == {model}  # a rejected row's too
    records = sd_records(results_sdf(batch.table, batch.model).decode())
    assert {(r.fields["model_folder"], r.fields["model_weights"]) for r in records} == {model}
    sheet = pd.read_excel(io.BytesIO(results_workbook(batch.table, batch.model)), dtype=str)
    assert list(sheet.columns[-2:]) == list(MODEL_COLUMNS) and set(sheet["model_weights"]) == {model[1]}


def test_a_run_that_ends_on_its_own_leaves_no_watcher_to_draw_the_page_again(copy_models, monkeypatch):
    """The run's watcher (above) stayed on the page a run that ended on its own had drawn, and its timer drew the
    whole page again a second later (seen in the browser): the results' table sent twice, and a click on a download
    made on its click (SDF, Excel) in that second asked for a file the second drawing had replaced. The page is drawn
    once after the last row, without the watcher, whose timer ends with it; a run stopped keeps its watcher."""
    drawn: list[str] = []
    real_title = st.title

    def fragment(func=None, *, run_every=None, **kwargs):
        def decorate(body):
            def watcher(*args):
                drawn.append("watcher")
                return body(*args)
            return watcher
        return decorate if func is None else decorate(func)

    def title(*args, **kwargs):  # each script run of the page draws its title first
        drawn.append("page")
        return real_title(*args, **kwargs)

    monkeypatch.setattr(st, "fragment", fragment)
    monkeypatch.setattr(st, "title", title)
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    drawn.clear()
    submit(at, "Run batch")
    assert_clean(at)
    assert "q.txt: stopped" not in texts(at.warning) and at.get("download_button")
    assert drawn[-1] == "page" and "watcher" in drawn  # the last drawing holds no watcher


def older(obj: object, *gone: str) -> object:
    """`obj` as an object of its class before the fields `gone` were added: a session of a server that ran the page's
    earlier code holds such objects, and the page's code changed on disk meets them at the next click."""
    cls = type(obj)
    kept = [(f.name, f.type, f) for f in dataclasses.fields(cls) if f.name not in gone]
    methods = {name: value for name, value in vars(cls).items() if isinstance(value, property) or name == "claim"}
    old = dataclasses.make_dataclass(cls.__name__, kept, namespace=methods, frozen=cls.__dataclass_params__.frozen)
    return old(**{name: getattr(obj, name) for name, *_ in kept})


def test_a_run_kept_by_the_pages_earlier_code_is_shown_and_continued(copy_models, monkeypatch, asked):
    """Streamlit runs a page's file afresh at each click, so a server whose code was updated while a batch stood
    stopped met that run, an object of the earlier code without the fields added since (unanswered, weights), and
    the page stopped on an AttributeError until the server was restarted. Such objects are read with those fields at
    their defaults: the rows done are shown, and Continue predicts the rest."""
    from views.batch import run_key

    at = batch_page(monkeypatch, copy_models)
    asked.stop_at = 3
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")
    at.run()
    run = at.session_state[run_key("forward")]
    at.session_state[run_key("forward")] = older(run, "unanswered", "weights")
    at.session_state[BATCH] = older(at.session_state[BATCH], "unanswered", "weights")
    at.run()
    assert_clean(at)
    assert "stopped after 3 of 7 rows" in texts(at.warning)
    asked.stop_at = 0
    next(b for b in at.button if b.label == "Continue: 4 rows left").click()
    at.run()
    assert_clean(at)
    assert at.session_state[BATCH].table["row"].drop_duplicates().tolist() == list(range(1, 8))
    assert {m.label: m.value for m in at.metric}["Queries"] == "5"


def test_a_stopped_run_whose_model_was_rewritten_is_not_continued_with_other_weights(copy_models, monkeypatch, asked):
    """A run stopped, its model folder rewritten (retrained into the same folder) and loaded again: Continue predicted
    the rest with the new weights, and the files named the first rows' weights for every row. Continue is no longer
    offered, the page says why, and Run batch predicts the whole file again with the weights now there."""
    from safetensors.torch import load_file, save_file

    from molspec_core.calibration import weights_fingerprint
    from views import common

    at = batch_page(monkeypatch, copy_models)
    asked.stop_at = 3
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")
    at.run()
    assert [b for b in at.button if b.label == "Continue: 4 rows left"]
    first = at.session_state[BATCH].weights
    weights = copy_models / "forward" / "model.safetensors"
    save_file(load_file(weights), weights, metadata={"format": "pt", "retrained": "yes"})  # other bytes: other weights
    common.load_predictor.clear()  # loaded again, as after the cache let it go
    at.run()
    assert_clean(at)
    assert not [b for b in at.button if b.label.startswith("Continue")]
    assert "The model folder forward now holds other weights than the ones this run's rows came from" in texts(
        at.warning)
    asked.stop_at = 0
    asked.clear()
    submit(at, "Run batch")
    assert_clean(at)
    assert asked == ["Oc1ccncc1", "c1ccncc1Cl", "xyz", "OCC", "Oc1ccncc1"]  # the whole file, from row 1
    batch = at.session_state[BATCH]
    assert batch.weights == weights_fingerprint(copy_models / "forward") != first
    assert "now holds other weights" not in texts(at.warning)


def test_a_stopped_run_whose_round_trip_model_was_rewritten_is_not_continued_with_other_weights(copy_models,
                                                                                                 monkeypatch, asked):
    """A retrosynthesis run checked round trip, stopped, the forward model's folder rewritten and loaded again:
    Continue checked the rest with the new weights, and the files named the first rows' checker for every row (only
    the model that predicted was compared). Continue is not offered, and the page names the checker's folder."""
    from safetensors.torch import load_file, save_file

    from views import common

    as_forward_and_retro(copy_models)  # a model of each task (check_round_trip asks)
    at = batch_page(monkeypatch, copy_models)
    at.radio(key="task").set_value("retro").run()
    asked.stop_at = 3
    at.file_uploader[0].set_value(("q.txt", QUERIES, "text/plain"))
    submit(at, "Run batch")
    at.run()
    assert [b for b in at.button if b.label.startswith("Continue")]
    assert at.session_state[results_key("retro")].round_trip_weights
    weights = copy_models / "forward" / "model.safetensors"
    save_file(load_file(weights), weights, metadata={"format": "pt", "retrained": "yes"})  # other bytes: other weights
    common.load_predictor.clear()  # loaded again, as after the cache let it go
    at.run()
    assert_clean(at)
    assert not [b for b in at.button if b.label.startswith("Continue")]
    assert ("The model folder forward now holds other weights than the ones this run's rows were checked round trip "
            "with") in texts(at.warning)
