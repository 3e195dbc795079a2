"""The Models page in a real browser, on a phone's width: what only a browser shows (a table wider than the screen).

Serves a models folder of its own (the tiny copy model and a card written here), so the page is light. Skipped
with a reason where Chromium or the playwright package is missing, as tests/test_browser.py is.
"""
from __future__ import annotations

import shutil

import pytest

from test_browser import CHROMIUM, CHROMIUM_ARGS, ROOT, WAIT_MS, app_server, settle, sync_api

PHONE = {"width": 390, "height": 844}  # an iPhone 12-14's window in CSS pixels
WIDE_ROW = " | ".join(f"run {n} (GPU block {n}, shipped)" for n in range(8))
CARD = (f"# Copy model\n\n## At a glance\n| what | figure |\n|---|---|\n| right first | 50% |\n\n"
        f"## Measured accuracy\n| {WIDE_ROW} |\n|{'---|' * 8}\n| {' | '.join(['76.7%'] * 8)} |\n")


@pytest.fixture(scope="module")
def models_server(tmp_path_factory):
    """`streamlit run app.py` serving a models folder whose forward model is the copy model with CARD."""
    models = tmp_path_factory.mktemp("models")
    shutil.copytree(ROOT / "tests" / "fixtures" / "copy_model", models / "forward")
    (models / "forward" / "MODEL_CARD.md").write_text(CARD)
    with app_server({"MOLSPEC_MODELS_DIR": str(models)}, models / "server.log") as url:
        yield url


def test_a_cards_wide_table_scrolls_in_its_own_box_on_a_phone_not_the_whole_page(models_server):
    """At 390 px a card's tables of eight columns (the forward card's "weights | queries | top-1 ... top-5 | app
    order") ran past the screen's edge and made the whole page slide sideways, its text with it."""
    assert CHROMIUM.exists()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport=PHONE).new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(models_server + "/models")
            page.locator("[data-anchor='forward-at-a-glance']").wait_for()
            page.locator('[data-testid="stExpander"] summary', has_text="Measured accuracy").click()
            page.get_by_text("run 7 (GPU block 7, shipped)").wait_for()
            settle(page)
            main, table = page.evaluate("""() => {
                const main = document.querySelector('[data-testid="stMain"]');
                const table = [...document.querySelectorAll('table')].find(t => t.innerText.includes('run 7'));
                return [[main.scrollWidth, main.clientWidth], [table.scrollWidth, table.clientWidth]];
            }""")
        finally:
            browser.close()
    assert main[0] <= main[1], f"the page scrolls sideways: {main[0]} px of content in a {main[1]} px window"
    assert table[0] > table[1]  # the table is wider than the screen, and scrolls in its own box
