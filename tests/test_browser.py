"""The app in a real browser: Playwright drives Debian's Chromium against `streamlit run app.py`.

What only a browser shows: the molecule editor (Ketcher) and its Apply, the 3D canvas, the CSV
download, and that no request leaves 127.0.0.1. Skipped with a reason where Chromium or the
playwright package is missing (CI installs Chromium). Screenshots go to $MOLSPEC_SHOTS (default:
a molspec-shots folder in the temp directory) so a person can look at them.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = Path(os.environ.get("MOLSPEC_SHOTS") or Path(tempfile.gettempdir()) / "molspec-shots")
LOCAL_HOSTS = {"127.0.0.1"}
WAIT_MS = 90_000  # a cold first prediction loads the model; CI machines are slow

if not CHROMIUM.exists():
    pytest.skip(f"no browser: {CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
sync_api.expect.set_options(timeout=WAIT_MS)
if not (ROOT / "models" / "forward" / "config.json").is_file():
    pytest.skip("the shipped forward model (models/forward) is missing", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def app_server(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """`streamlit run app.py` on a free local port with `env` added to this process's, its output to `log_path`;
    yields its base URL, and stops it after."""
    port = free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
             "--server.address", "127.0.0.1", "--server.port", str(port), "--server.fileWatcherType", "none",
             "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1", **env), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The app on a free local port; yields its base URL."""
    log_path = tmp_path_factory.mktemp("streamlit") / "server.log"
    with app_server({"MOLSPEC_BENCH_DIR": str(log_path.parent)}, log_path) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture()
def page(browser, server):
    """A fresh page that records every request; after the test, all of them must have gone to
    127.0.0.1 (no CDN, no fonts, no telemetry)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1400}, accept_downloads=True)
    hosts: dict[str, str] = {}

    def record(request):
        scheme = urlparse(request.url).scheme
        if scheme in ("http", "https", "ws", "wss"):
            hosts.setdefault(urlparse(request.url).hostname or "", request.url)

    context.on("request", record)
    tab = context.new_page()
    tab.set_default_timeout(WAIT_MS)
    tab.base_url = server  # type: ignore[attr-defined]
    yield tab
    context.close()
    outside = {host: url for host, url in hosts.items() if host not in LOCAL_HOSTS}
    assert not outside, f"requests left 127.0.0.1: {outside}"


def settle(page) -> None:
    """Wait until the script run has finished and no element is still a loading placeholder."""
    page.wait_for_function("""() => !document.querySelector(
        '[data-testid="stStatusWidgetRunningIcon"], [data-testid="stStatusWidgetRunningManIcon"], '
        + '[data-testid="stSkeleton"]')""")
    time.sleep(0.5)  # images and charts paint after their elements arrive


def shot(page, name: str) -> None:
    settle(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def predict_page(page) -> None:
    page.goto(page.base_url + "/")
    page.get_by_role("textbox", name="SMILES").wait_for()


def test_a_deep_link_as_the_first_request_shows_the_app(page):
    # Runs first in this module: a fresh server whose first request is /models. With the pages in a
    # folder named pages/, Streamlit ran such a request as an old-style app: the page alone, and a
    # menu listing every file of the folder, common.py too (session 24).
    page.goto(page.base_url + "/models")
    page.get_by_role("heading", name="Models").wait_for()
    nav = page.get_by_test_id("stSidebarNav")
    nav.get_by_text("Benchmark").wait_for()
    assert nav.get_by_text("common", exact=True).count() == 0 and nav.get_by_text("models", exact=True).count() == 0
    sync_api.expect(page.get_by_text("Decoding method", exact=True)).to_have_count(1)  # the shared sidebar
    page.goto(page.base_url + "/batch")
    page.get_by_role("heading", name="Batch prediction").wait_for()
    page.goto(page.base_url + "/common")  # the helper module is no page: the app opens on Predict
    page.get_by_role("textbox", name="SMILES").wait_for()


def test_paste_smiles_and_get_ranked_predictions(page):
    predict_page(page)
    page.get_by_text("Beam width (n-best)").wait_for()  # the forward page opens on beam search (TASK_DEFAULTS)
    page.get_by_role("textbox", name="SMILES").fill("CC(=O)Cl.NCc1ccccc1")
    page.get_by_role("button", name="Predict").click()
    for rank in range(1, 6):  # beam width 5 by default: five ranked answers
        page.get_by_role("heading", name=f"Rank {rank}", exact=True).wait_for()  # the card heading, not the rank picker
    sync_api.expect(page.get_by_text("Score (log-prob)")).to_have_count(5)
    page.set_viewport_size({"width": 1400, "height": 3000})
    shot(page, "browser_ranked_predictions")


def test_a_refused_query_is_shown_as_typed_not_as_markup(page):
    """md_escape escaped both colons of ':material/home:' and Streamlit still drew a house icon in the error."""
    predict_page(page)
    page.get_by_role("textbox", name="SMILES").fill("C:material/home:C**b**")
    page.get_by_role("button", name="Predict").click()
    alert = page.get_by_test_id("stAlert").filter(has_text="cannot parse")
    sync_api.expect(alert).to_contain_text("'C:material/home:C**b**'")


def test_a_refused_files_name_is_shown_as_typed_with_an_html_entity_in_it(page, tmp_path):
    """md_escape left '&' as it was, and the page's markdown read an entity in a name: a file 'a&amp;b.mol' was
    refused as 'a&b.mol', a name the user's folder does not hold."""
    opened = tmp_path / "a&amp;b&lt;1&gt;.mol"
    opened.write_text("no molfile\n")
    predict_page(page)
    page.get_by_role("tab", name="Open file").click()
    page.get_by_test_id("stMain").locator('input[type="file"]').set_input_files(str(opened))
    alert = page.get_by_test_id("stAlert").filter(has_text="a&")
    sync_api.expect(alert).to_contain_text("a&amp;b&lt;1&gt;.mol")


def choose_method(page, label: str) -> None:
    page.locator('input[role="combobox"][aria-label="Decoding method"]').click()
    page.get_by_role("option", name=label, exact=True).click()
    settle(page)


def start_greedy_batch(page, queries: Path, copies: int) -> None:
    """Run the Batch page on a file of `copies` times four queries (one refused), greedy, one writing each: long
    enough to stop, or to press a key on Stop the batch, while it runs."""
    queries.write_text("\n".join(["CC(=O)Cl.NCc1ccccc1", "CCO.CC(=O)O", "xyz", "CN.O=C(O)c1ccccc1"] * copies) + "\n")
    page.goto(page.base_url + "/batch")
    choose_method(page, "Greedy")
    page.get_by_text("Read the query in 5 writings").click()
    settle(page)
    page.locator('input[type="file"]').set_input_files(str(queries))
    page.get_by_text(queries.name).wait_for()
    page.get_by_role("button", name="Run batch").click()


def test_the_beam_width_comes_back_after_a_query_with_greedy(page):
    # Session 65: after one prediction with a method without a width, beam search came back at width 1 (the
    # slider's minimum) and listed one answer; AppTest never showed it (views/common.kept).
    predict_page(page)
    width = page.locator('input[aria-label="Beam width (n-best)"]')
    sync_api.expect(width).to_have_attribute("aria-valuetext", "5")
    choose_method(page, "Greedy")
    page.get_by_role("textbox", name="SMILES").fill("CC(=O)Cl.NCc1ccccc1")
    page.get_by_role("button", name="Predict").click()
    page.get_by_role("heading", name="Rank 1", exact=True).wait_for()
    settle(page)
    choose_method(page, "Beam search")
    sync_api.expect(width).to_have_attribute("aria-valuetext", "5")


# Each choice of an open list: its text, and whether the box it is drawn in cuts it (wider or taller than the box)
CHOICES_DRAWN = """list => [...document.querySelectorAll(`[role="listbox"][aria-label="${list}"] [data-item-hl]`)].map(
    e => [e.innerText, e.scrollWidth > e.clientWidth || e.scrollHeight > e.clientHeight])"""


def test_show_again_choices_on_a_phone_are_whole(page):
    """The "Show again" list drew each choice in one line cut at the list's width: on a phone two decodings of one
    long query both read "#2: COC(=O)[C@H](CC(C)C)NC(=O)[C@H](Cc1ccccc1)…", their settings cut off."""
    predict_page(page)
    choose_method(page, "Greedy")
    query = "CC(C)(C)OC(=O)N[C@@H](Cc1ccccc1)C(=O)N[C@@H](CC(C)C)C(=O)OC"
    for _ in range(2):  # read in 5 writings, then in one
        page.get_by_role("textbox", name="SMILES").fill(query)
        page.get_by_role("button", name="Predict").click()
        page.get_by_role("heading", name="Rank 1", exact=True).wait_for()
        settle(page)
        page.get_by_text("Read the query in 5 writings").click()
        settle(page)
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_function("""() => document.querySelector('[data-testid="stSidebar"]')
        .getAttribute('data-collapsed') === 'true'""")  # on a phone the sidebar closes, sliding out over the page
    time.sleep(0.5)
    page.get_by_text("This session's queries (2)").click()
    for _ in range(4):  # a click on the list just after its expander opened leaves it shut now and then (seen in one
        page.locator('input[role="combobox"][aria-label="Show again"]').click()  # run of three); the next opens it
        with contextlib.suppress(sync_api.TimeoutError):
            page.get_by_role("option").first.wait_for(timeout=3_000)
            break
        page.keyboard.press("Escape")
    time.sleep(0.5)
    choices = page.evaluate(CHOICES_DRAWN, "Show again")
    shot(page, "browser_show_again_390")
    assert len(choices) == 2 and not any(cut for _, cut in choices), choices
    assert "5 writings" in choices[1][0] and "5 writings" not in choices[0][0], choices


def test_the_editor_opens_on_the_query_predicted(page):
    """The editor read its molecule once, when it first mounted (in its hidden tab, with the page's empty query):
    after a prediction an opened editor showed nothing; it now mounts when its tab opens, on the query."""
    predict_page(page)
    page.get_by_role("textbox", name="SMILES").fill("CC(=O)Cl.NCc1ccccc1")
    page.get_by_role("button", name="Predict").click()
    page.get_by_role("heading", name="Rank 1", exact=True).wait_for()
    settle(page)
    page.get_by_role("tab", name="Draw structure").click()
    editor = page.frame_locator('iframe[title="streamlit_ketcher.streamlit_ketcher"]')
    drawing = editor.locator('[class*="StructEditor-module_canvas"] svg').first
    sync_api.expect(drawing).to_contain_text("Cl")  # acetyl chloride's label, drawn (not empty, not misplaced)
    sync_api.expect(drawing).to_contain_text("NH2")
    shot(page, "browser_editor_opens_on_query")


def test_draw_in_ketcher_and_apply(page):
    predict_page(page)
    page.get_by_role("tab", name="Draw structure").click()
    editor = page.frame_locator('iframe[title="streamlit_ketcher.streamlit_ketcher"]')
    editor.get_by_title("Benzene (T)").first.click()
    canvas = editor.locator('[class*="StructEditor-module_canvas"]').first
    box = canvas.bounding_box()
    centre_x, centre_y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.click(centre_x, centre_y)  # a benzene ring, centred where we click
    editor.get_by_title("Bromine (B)").first.click()
    # Drag from the top ring atom (one bond length, about 40 px, above the centre) to add a Br.
    page.mouse.move(centre_x, centre_y - 41)
    page.mouse.down()
    page.mouse.move(centre_x, centre_y - 70, steps=5)
    page.mouse.move(centre_x, centre_y - 92, steps=5)
    page.mouse.up()
    editor.get_by_role("button", name="Apply").click()
    page.get_by_role("heading", name="Rank 1", exact=True).wait_for()  # the card heading, not the rank picker
    shot(page, "browser_ketcher_apply")
    page.get_by_role("tab", name="Type SMILES").click()  # the drawing became the query
    sync_api.expect(page.get_by_role("textbox", name="SMILES")).to_have_value("Brc1ccccc1")


def paste_in_editor(editor, smiles: str) -> None:
    """Open a SMILES in the editor as a new drawing (its Open dialog, "Paste from clipboard"), as if drawn."""
    editor.locator('[class*="StructEditor-module_canvas"]').first.wait_for()  # the editor has loaded
    editor.get_by_title("Open... (Ctrl+O)").first.click()
    editor.get_by_text("Paste from clipboard").first.click()
    pasted = editor.locator("textarea").last
    pasted.click()
    pasted.press_sequentially(smiles)
    opened = editor.get_by_role("button", name="Open as New Project")
    sync_api.expect(opened).to_be_enabled()
    opened.click()
    sync_api.expect(opened).to_be_hidden()  # the dialog closed: the molecule is on the canvas


def test_a_drawing_edited_and_applied_again_is_predicted(page):
    """Keyed by the query, the editor was mounted anew in the run after an Apply, and the next Apply, sent by the
    editor still on screen, was lost: the drawing with a base added was not predicted, without a word."""
    predict_page(page)
    page.get_by_role("tab", name="Draw structure").click()
    editor = page.frame_locator('iframe[title="streamlit_ketcher.streamlit_ketcher"]')
    query = page.locator('[data-testid="stCode"]').first  # the canonical query, first code block on the page
    for drawn, read in (("CC(=O)Cl.NCc1ccccc1", "CC(=O)Cl.NCc1ccccc1"),
                        ("CC(=O)Cl.NCc1ccccc1.CCN(CC)CC", "CC(=O)Cl.CCN(CC)CC.NCc1ccccc1")):
        paste_in_editor(editor, drawn)
        editor.get_by_role("button", name="Apply").click()
        sync_api.expect(query).to_have_text(read)
        settle(page)
    shot(page, "browser_ketcher_apply_twice")


def test_3d_view_draws_on_its_canvas(page):
    predict_page(page)
    page.get_by_role("button", name="Esterification").click()
    page.get_by_role("heading", name="Rank 1", exact=True).wait_for()  # the card heading, not the rank picker
    page.get_by_role("tab", name="3D view").click()
    page.get_by_text("Drag to rotate").wait_for()
    viewer = page.frame_locator('iframe[title^="3D model of"]').first  # named by what it shows (587c448)
    canvas = viewer.locator("canvas").first
    canvas.wait_for()
    time.sleep(1.5)  # let 3Dmol.js draw its first frame
    png = canvas.screenshot()
    from PIL import Image

    pixels = Image.open(io.BytesIO(png)).convert("L")
    dark = sum(pixels.histogram()[:200])  # pixels darker than the white background
    assert dark > 500, "the 3D canvas is blank"
    shot(page, "browser_3d_view")


def test_batch_csv_downloads_and_parses(page, tmp_path):
    queries = tmp_path / "queries.csv"
    queries.write_text('smiles\nCCO.CC(=O)O\nxyz\n=HYPERLINK("http://x")\n')
    page.goto(page.base_url + "/batch")
    page.locator('input[type="file"]').set_input_files(str(queries))
    page.get_by_text("queries.csv").wait_for()
    page.get_by_role("button", name="Run batch").click()
    download_button = page.get_by_role("button", name="Download CSV")
    download_button.wait_for()
    shot(page, "browser_batch")
    with page.expect_download() as info:
        download_button.click()
    saved = tmp_path / "predictions.csv"
    info.value.save_as(saved)
    table = pd.read_csv(saved, keep_default_na=False, dtype=str)
    from molspec_core.calibration import weights_fingerprint
    from molspec_core.io import MODEL_COLUMNS, RESULT_COLUMNS

    # the CLI's columns (the upload has no others), then the model that gave the answers
    assert list(table.columns) == [*RESULT_COLUMNS, *MODEL_COLUMNS]
    assert set(zip(table["model_folder"], table["model_weights"])) == {
        ("forward", weights_fingerprint(ROOT / "models" / "forward"))}
    firsts = table.drop_duplicates("row").reset_index(drop=True)  # each query's first answer, or its error
    assert firsts["row"].tolist() == ["1", "2", "3"] and table["row"].tolist() == sorted(table["row"].tolist())
    assert firsts["query"].tolist() == ["CCO.CC(=O)O", "xyz", "'=HYPERLINK(\"http://x\")"]
    assert firsts["rank"].tolist() == ["1", "", ""] and firsts["smiles"][0]
    assert firsts["error"][1].startswith("not a valid SMILES") and firsts["error"][0] == ""


def test_a_stopped_batch_keeps_its_rows_and_continues_without_doubling_one(page, tmp_path):
    """Stop, or leaving the page, threw away every row of a batch. Streamlit starts the next script run on a thread
    of its own while the stopped one runs on to its next call (fast reruns), which AppTest does not do: here both
    touch the rows kept in the session, and the CSV after two stops must still hold each row once, in order."""
    queries = tmp_path / "many.txt"
    start_greedy_batch(page, queries, 400)
    page.get_by_role("button", name="Stop the batch").click()
    stopped = page.get_by_test_id("stAlert").filter(has_text="many.txt: stopped after")
    stopped.wait_for()
    shot(page, "browser_batch_stopped")
    page.get_by_role("button", name="Continue").click()
    time.sleep(1)
    page.get_by_test_id("stSidebarNav").get_by_text("Models").click()  # away, mid-run, and back
    page.get_by_role("heading", name="Models").wait_for()
    page.get_by_test_id("stSidebarNav").get_by_text("Batch").click()
    stopped.wait_for()
    page.get_by_role("button", name="Continue").click()
    download_button = page.get_by_role("button", name="Download CSV")
    download_button.wait_for()
    settle(page)
    assert stopped.count() == 0
    with page.expect_download() as info:
        download_button.click()
    saved = tmp_path / "predictions.csv"
    info.value.save_as(saved)
    rows = pd.read_csv(saved, keep_default_na=False, dtype=str, encoding="utf-8-sig")["row"].astype(int).tolist()
    assert rows == list(range(1, 1601))  # greedy: one row a query, each once


FOCUSED = """() => { const e = document.activeElement, r = e.getBoundingClientRect();
    return {name: e.getAttribute('aria-label') || e.innerText.slice(0, 40), left: r.left, right: r.right}; }"""


@pytest.mark.parametrize("width, height", [(700, 500), (390, 844)])  # 200% zoom of a 1,400 px window; a phone
def test_a_collapsed_sidebar_keeps_its_controls_out_of_the_tab_order(page, width, height):
    """The collapsed sidebar's 17 controls sat at x = -298 in the Tab order: focus went where nothing showed it, and
    an arrow key on the hidden Task radio switched the app to retrosynthesis (accessibility QA A1)."""
    page.set_viewport_size({"width": width, "height": height})
    predict_page(page)
    settle(page)
    assert page.get_by_test_id("stSidebar").get_attribute("data-collapsed") == "true"
    time.sleep(0.5)  # the sidebar hides when its slide-out ends
    for _ in range(20):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        assert focused["right"] > 0 and focused["left"] < width, focused
    page.get_by_test_id("stExpandSidebarButton").click()  # opened, its controls take focus again
    routes = page.get_by_test_id("stSidebar").get_by_role("link", name="Routes")
    routes.focus()
    assert page.evaluate(FOCUSED)["name"].endswith("Routes")


def contrast(foreground: str, background: str) -> float:
    """WCAG's contrast ratio of two CSS colours given as 'rgb(r, g, b)' or 'rgba(r, g, b, a)' (alpha ignored)."""
    def luminance(colour: str) -> float:
        channels = [int(c) / 255 for c in re.findall(r"\d+", colour)[:3]]
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


# Each caption's text colour, the opacity it is drawn at (its own and its containers'), and the colour behind it
CAPTIONS_DRAWN = """() => [...document.querySelectorAll('[data-testid="stCaptionContainer"] p')].map(p => {
    let opacity = 1, back = null;
    for (let e = p; e; e = e.parentElement) {
        const style = getComputedStyle(e);
        opacity *= Number(style.opacity);
        const fill = style.backgroundColor.match(/[\\d.]+/g).map(Number);
        if (!back && (fill.length < 4 || fill[3] > 0.5)) back = fill.slice(0, 3);
    }
    return [p.innerText.slice(0, 40), getComputedStyle(p).color.match(/[\\d.]+/g).map(Number).slice(0, 3), opacity,
            back || [255, 255, 255]];
})"""


def test_captions_read_at_4_5_to_1_on_the_page_and_in_the_sidebar(page):
    """Streamlit draws a caption at 60% opacity: 3.9:1 on white and on the sidebar's grey, under the 4.5:1 that
    WCAG asks of text of this size. This app says much in captions (the model's device and engine, why it computes
    in float32, the query line with its decoding time, what the rings mean), so they are drawn darker."""
    predict_page(page)
    page.get_by_role("button", name="Esterification").click()
    page.get_by_role("heading", name="Rank 1", exact=True).wait_for()
    settle(page)
    drawn = page.evaluate(CAPTIONS_DRAWN)
    assert any(text.startswith("Device: ") for text, *_ in drawn) and len(drawn) > 5, drawn
    for text, colour, opacity, back in drawn:
        seen = [round(opacity * c + (1 - opacity) * b) for c, b in zip(colour, back)]
        ratio = contrast("rgb({}, {}, {})".format(*seen), "rgb({}, {}, {})".format(*back))
        assert ratio >= 4.5, (text, colour, opacity, back, ratio)


def test_keyboard_focus_in_the_sidebar_shows_a_ring(page):
    """Focus on a page link, a radio option or a switch showed as a faint grey (1.15:1), and on the current page's
    link as nothing at all (accessibility QA A11)."""
    predict_page(page)
    settle(page)
    sidebar = page.get_by_test_id("stSidebar")
    background = sidebar.evaluate("e => getComputedStyle(e).backgroundColor")
    targets = {"the current page's link": (sidebar.get_by_role("link", name="Predict"), "self"),
               "a radio option": (sidebar.get_by_role("radio").first, "label"),
               "a switch": (sidebar.get_by_role("switch").first, "label")}
    for what, (control, ringed) in targets.items():
        control.focus()
        page.keyboard.press("Shift+Tab")  # focus by keyboard: what :focus-visible answers
        page.keyboard.press("Tab")
        assert control.evaluate("e => e === document.activeElement"), what
        style = control.evaluate("(e, ringed) => { const r = ringed === 'self' ? e : e.closest('label'); "
                                 "const c = getComputedStyle(r); return [c.outlineStyle, c.outlineWidth, "
                                 "c.outlineColor]; }", ringed)
        assert style[0] == "solid" and float(style[1].removesuffix("px")) >= 2, (what, style)
        assert contrast(style[2], background) >= 3, (what, style, background)
    shot(page, "browser_focus_ring_switch")


def test_each_page_has_its_own_title_one_level_1_heading_and_described_pictures(page):
    """Every page was titled "MolSpec"; every page had two level-1 headings (the sidebar's first); Predict went from
    level 1 to 3; no structure picture had a text alternative (accessibility QA B1, B2, A3)."""
    levels = "() => [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')].map(h => Number(h.tagName[1]))"
    for path, name, heading in (("/", "Predict", "Predict reaction products"), ("/batch", "Batch", "Batch prediction"),
                                ("/routes", "Routes", "Routes"), ("/benchmark", "Benchmark", "Benchmarks"),
                                ("/models", "Models", "Models")):
        page.goto(page.base_url + path)
        page.get_by_role("heading", name=heading, exact=True).wait_for()
        settle(page)
        sync_api.expect(page).to_have_title(f"{name} · MolSpec")
        assert page.evaluate(levels).count(1) == 1, path
    predict_page(page)
    page.get_by_role("button", name="Esterification").click()
    page.get_by_role("heading", name="Rank 1", exact=True).wait_for()
    settle(page)
    shown = page.evaluate(levels)
    assert shown[0] == 1 and all(b <= a + 1 for a, b in zip(shown, shown[1:])), shown  # no level skipped
    main = page.get_by_test_id("stMain")
    snapshot = main.aria_snapshot()
    assert "heading \"Predictions\" [level=2]" in snapshot and "heading \"Rank 1\" [level=3]" in snapshot
    pictures = main.locator("img")
    assert pictures.count() >= 2
    for alt in pictures.evaluate_all("images => images.map(i => i.getAttribute('alt'))"):
        assert alt and alt.startswith("Structure of "), alt


def test_other_pages_render(page):
    for path, heading in (("/benchmark", "Benchmarks"), ("/models", "Models")):
        page.goto(page.base_url + path)
        page.get_by_role("heading", name=heading).wait_for()
        assert page.get_by_test_id("stException").count() == 0
        shot(page, f"browser{path.replace('/', '_')}")


def test_four_sessions_at_once_each_get_their_own_answer(browser, server):
    """Four browser sessions press Predict together; the server runs their scripts side by side
    and every session shows the prediction for its own query, none of another's."""
    from molspec_core.service import Predictor
    from views.common import APP_AUGMENT

    queries = ["CC(=O)Cl.NCc1ccccc1", "CCO.CC(=O)O", "CN.O=C(O)c1ccccc1", "CC(=O)OC(C)=O.Oc1ccccc1"]
    predictor = Predictor.load("forward", device="cpu")
    augment = APP_AUGMENT if predictor.augmentable else 1  # as the app reads a query by default
    expected = [predictor.predict(q, method="greedy", augment=augment).predictions[0].smiles for q in queries]
    assert len(set(expected)) == len(queries), "the check needs four different answers"
    contexts = [browser.new_context(viewport={"width": 1400, "height": 1400}) for _ in queries]
    try:
        pages = [context.new_page() for context in contexts]
        for tab, query in zip(pages, queries):
            tab.set_default_timeout(WAIT_MS)
            tab.goto(server + "/")
            tab.get_by_role("textbox", name="SMILES").fill(query)
        for tab in pages:  # all four clicks before any answer is awaited
            tab.get_by_role("button", name="Predict").click()
        for i, (tab, answer) in enumerate(zip(pages, expected)):
            tab.get_by_role("heading", name="Rank 1", exact=True).wait_for()  # the card heading, not the rank picker
            settle(tab)
            shown = tab.locator('[data-testid="stCode"] code').all_inner_texts()
            assert answer in [text.strip() for text in shown], f"session {i}: {answer} not in {shown}"
            others = set(expected) - {answer}
            assert not others & {text.strip() for text in shown}, f"session {i} shows another session's answer"
        shot(pages[0], "browser_concurrent_session_0")
    finally:
        for context in contexts:
            context.close()
