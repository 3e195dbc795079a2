"""The Routes page in a real browser: what only a browser shows (the toolbar's Stop, which AppTest cannot press).

Serves a models folder of its own (the tiny copy model as the retrosynthesis model, no forward model), so the search
is light. Skipped with a reason where Chromium or the playwright package is missing, as tests/test_browser.py is.
"""
from __future__ import annotations

import shutil

import openpyxl
import pytest

from molspec_core.planning import ROUTE_COLUMNS

from test_browser import CHROMIUM, CHROMIUM_ARGS, ROOT, WAIT_MS, app_server, settle, sync_api


def routes_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page.set_default_timeout(WAIT_MS)
    page.goto(url + "/routes")
    page.get_by_text("Skip steps whose reactants lack atoms of the product").click()  # the copy model drops carbons
    return page


@pytest.fixture(scope="module")
def routes_server(tmp_path_factory):
    """`streamlit run app.py` serving a models folder whose retrosynthesis model is the copy model."""
    models = tmp_path_factory.mktemp("models")
    shutil.copytree(ROOT / "tests" / "fixtures" / "copy_model", models / "retro")
    with app_server({"MOLSPEC_MODELS_DIR": str(models)}, models / "server.log") as url:
        yield url


def test_a_search_stopped_from_the_toolbar_says_what_it_kept_without_another_click(routes_server):
    """The toolbar's Stop left the progress bar frozen mid-search ("Searching… 4 molecules expanded, 7 of 30 s") under
    a note to press R: nothing said the search had ended, nor showed the routes it had kept, until the next click.
    The copy model's MCTS search for NCCNCCNCCO runs to its time limit (the default stock solves it in several ways
    without ending it), set here to the slider's most."""
    assert CHROMIUM.exists()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = routes_page(browser, routes_server)
            page.get_by_label("Target SMILES").fill("NCCNCCNCCO")
            page.get_by_text("MCTS (Monte Carlo tree search)").click()
            page.get_by_role("slider", name="Time budget (s)").press("End")
            settle(page)
            page.get_by_role("button", name="Find routes").click()
            bar = page.get_by_text("molecules expanded, ")  # the bar's line, once a few expansions are in
            bar.wait_for()
            page.get_by_role("button", name="Stop", exact=True).click()
            told = page.get_by_test_id("stAlert").filter(has_text="before the search was stopped")
            told.or_(page.get_by_test_id("stAlert").filter(has_text="was stopped before it ended")).wait_for()
            settle(page)
            assert bar.count() == 0
            assert told.count() == 1  # the default stock has the copy model's answers: routes were found and kept
            assert page.get_by_text("Route 1: ").count() == 1
        finally:
            browser.close()


def test_the_routes_download_as_an_excel_workbook_after_a_search(routes_server, tmp_path):
    """Download Excel (its workbook made on the click) failed after every search, the file gone (404) before the
    browser fetched it: the search's watcher, whose timer ran on after the search, dropped it with each of its runs."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = routes_page(browser, routes_server)
            page.get_by_label("Target SMILES").fill("NCCO")
            page.get_by_role("slider", name="Time budget (s)").press("Home")  # 5 s: the copy model solves it at once
            settle(page)
            page.get_by_role("button", name="Find routes").click()
            page.get_by_role("button", name="Download Excel").wait_for()
            settle(page)
            with page.expect_download() as info:
                page.get_by_role("button", name="Download Excel").click()
            info.value.save_as(tmp_path / "routes.xlsx")
        finally:
            browser.close()
    sheet = openpyxl.load_workbook(tmp_path / "routes.xlsx", read_only=True)["routes"]
    rows = [[cell.value for cell in row] for row in sheet.iter_rows()]
    assert tuple(rows[0]) == ROUTE_COLUMNS
    assert rows[1][ROUTE_COLUMNS.index("reactants")] == "NO"
