"""What the accessibility QA pass (scratch/qa_a11y.md) found, each fix pinned: text alternatives of the structure
pictures (A3), the copied tokens told apart without colour and listed in words (A2), reaction-centre rings (A4), the
pages' titles (B1), their headings (B2), the Routes step in words (B10) and the Batch page's error column (B12).

The pages run in Streamlit's AppTest with the tiny copy model (through test_app.py's helpers); what only a browser
shows (the collapsed sidebar out of the Tab order, focus rings, the headings' levels in the page) is checked in
test_browser.py, and what the keyboard reaches among the answers at the end of this file, with its fixtures.
"""
from __future__ import annotations

import re
import shutil

import pytest
import streamlit as st

import test_app
from conftest import as_forward_and_retro
from molspec_core import depict
from molspec_core.tokenizer import tokenize
from test_app import app, assert_clean, batch_page, measure_speedup, predict, submit, texts
from test_planning import COPY_MODEL, find_routes, routes_page

copy_models = test_app.copy_models  # the fixture: a models folder whose `forward` model is the copy model
bench_folder = test_app.bench_folder  # the fixture: a folder of saved bench reports
PAGES = {"views/predict.py": "Predict", "views/batch.py": "Batch", "views/routes.py": "Routes",
         "views/benchmark.py": "Benchmark", "views/models.py": "Models"}


def contrast(colour: str, background: str = "#ffffff") -> float:
    """WCAG's contrast ratio of two sRGB colours written #rrggbb."""
    def luminance(hex_colour: str) -> float:
        channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(colour), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def alts(at) -> list[str]:
    """The text alternative of every picture st.image draws on the page."""
    return [img.alt for image in at.get("image") for img in image.proto.imgs]


# ---- A3: text alternatives ------------------------------------------------------------------------


def test_every_structure_picture_on_the_predict_page_has_a_text_alternative(copy_models, monkeypatch):
    at = app(copy_models, monkeypatch).run()
    at.selectbox(key="method").set_value("spec-auto").run()
    predict(at, "Oc1ccncc1Cl")
    assert_clean(at)
    shown = at.session_state["shown"]
    described = alts(at)
    # the query, each valid answer, and the copied atoms of the answer inspected
    assert len(described) == 2 + sum(p.valid for p in shown.result.predictions), described
    assert all(alt.startswith("Structure of ") for alt in described), described
    assert f"Structure of {shown.result.canonical_query}" in described
    written = "".join(shown.result.predictions[0].tokens)  # the answer inspected, as the model wrote it
    assert any(alt.startswith(f"Structure of {written} as written; atoms written by copied tokens, by run: run 1, ")
               for alt in described), described


def test_the_3d_view_is_named_by_what_it_shows(copy_models, monkeypatch):
    """A screen reader named the 3D view's frame "st.iframe"."""
    at = app(copy_models, monkeypatch).run()
    predict(at, "Oc1ccncc1Cl")
    at.session_state["inspect_tab"] = "3D view"
    at.run()
    assert_clean(at)
    answer = at.session_state["shown"].result.predictions[0].smiles
    [frame] = at.get("iframe")
    assert frame.proto.alt == f"3D model of {answer}, as balls and sticks: a mouse rotates and zooms it"
    at.selectbox(key="view3d_1").set_value("Query molecule: Oc1ccncc1Cl").run()
    assert at.get("iframe")[0].proto.alt.startswith("3D model of Oc1ccncc1Cl,")


def test_a_pictures_text_alternative_names_the_atoms_the_reaction_centre_marks():
    marks = {1: depict.CENTRE_COLOUR, 3: depict.CENTRE_COLOUR}
    assert depict.structure_alt("CC(=O)NCc1ccccc1", marks) == (
        "Structure of CC(=O)NCc1ccccc1; reaction centre (estimated): bonds change at atoms 2 (C) and 4 (N)")
    reactants = {1: depict.CENTRE_COLOUR, 3: depict.LEAVING_COLOUR}
    assert depict.structure_alt("CC(=O)Cl", reactants) == (
        "Structure of CC(=O)Cl; reaction centre (estimated): bonds change at atom 2 (C), and atom 4 (Cl) leaves")
    assert depict.structure_alt("CCO") == "Structure of CCO"
    assert depict.structure_alt("CCO", {0: depict.span_colour(0)}) == "Structure of CCO"  # no centre, no words


PEPTIDE = ("CC(C)C[C@H](NC(=O)[C@H](CC(=O)O)NC(=O)[C@@H](N)Cc1ccccc1)C(=O)N[C@@H](CCCNC(=N)N)C(=O)N[C@@H]"
           "(Cc1c[nH]c2ccccc12)C(=O)N[C@@H](CO)C(=O)N[C@@H](CC(N)=O)C(=O)N[C@@H](CCSC)C(=O)N[C@@H](C(C)C)C(=O)O")


def test_a_long_smiles_is_read_as_its_formula_and_first_characters_a_short_one_whole():
    """A picture of a peptide had its whole SMILES (192 characters here, 300 and more for larger ones) as its text
    alternative, read out character by character; it is now its formula, size and first characters."""
    marks = {0: depict.CENTRE_COLOUR}
    assert depict.structure_alt(PEPTIDE, marks) == (
        "Structure of C53H78N14O14S, 82 heavy atoms (SMILES of 192 characters, starting "
        "CC(C)C[C@H](NC(=O)[C@H](CC(=O)O)NC(=O)[C@@H]…); reaction centre (estimated): bonds change at atom 1 (C)")
    cut_in_a_bracket = "C" * 38 + "[C@@H](N)" + "C" * 60
    assert depict.structure_alt(cut_in_a_bracket).endswith(f"starting {'C' * 38}[C@@H]…)")
    assert "a SMILES RDKit cannot read (SMILES of 100 characters" in depict.structure_alt("C1" + "C" * 98)
    short = "CC(C)C[C@H](NC(=O)[C@H](CC(=O)O)NC(=O)[C@@H](N)Cc1ccccc1)C(=O)O"
    assert depict.structure_alt(short) == f"Structure of {short}"


def test_a_large_reaction_centre_is_read_as_its_count_numbers_and_elements():
    """A peptide answer's 17 marked atoms were each named ('atoms 39 (C), 40 (C), 41 (C), ...'): its text alternative
    ran past 300 characters, heard at every answer and again on its Fullscreen button."""
    mol_atoms = [38, 39, 40, 46, 47, 48, 49, 50, 51, 64, 65, 72, 73, 74, 75, 76, 77]  # from 0, as RDKit counts
    marks = dict.fromkeys(mol_atoms, depict.CENTRE_COLOUR) | {0: depict.LEAVING_COLOUR}
    alt = depict.structure_alt(PEPTIDE, marks)
    centre = alt.split("; reaction centre (estimated): ")[1]
    assert centre == ("bonds change at 17 atoms, numbers 39–41, 47–52, 65–66 and 73–78 (12 C, 3 O, 2 N), and atom 1 "
                      "(C) leaves")
    few = dict.fromkeys(mol_atoms[:depict.ALT_CENTRE_ATOMS], depict.CENTRE_COLOUR)
    assert depict.structure_alt(PEPTIDE, few).endswith("bonds change at atoms 39 (N), 40 (C), 41 (C), 47 (C), 48 (C) "
                                                       "and 49 (C)")  # six or fewer: each named


def test_a_long_copied_run_is_read_as_its_size_and_ends():
    from molspec_core.tokenizer import tokenize

    tokens = tokenize(PEPTIDE)
    provenance = list(range(40)) + [-1] * 10 + list(range(100, 100 + len(tokens) - 50))
    assert depict.provenance_alt(tokens, provenance) == (
        "Structure of C53H78N14O14S, 82 heavy atoms (SMILES of 192 characters, starting "
        "CC(C)C[C@H](NC(=O)[C@H](CC(=O)O)NC(=O)[C@@H]…) as written; atoms written by copied tokens, by run: "
        "run 1, 23 atoms from atom 1 (C) to atom 23 (C); run 2, 54 atoms from atom 29 (C) to atom 82 (O)")


def test_the_routes_pictures_have_text_alternatives_and_each_step_reads_in_words(tmp_path, monkeypatch):
    """B2, B10: each step's arrow was a level-3 heading ("left double arrow, heading level 3" per step), and on a
    phone, where the columns stack, nothing said which molecules a step makes from which."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "NCCO")
    assert not at.exception and at.expander
    described = alts(at)
    assert described and all(alt.startswith("Structure of ") for alt in described), described
    assert "Structure of NCCO" in described  # the target
    assert "⇐" not in texts(at.subheader) + texts(at.header) and "Target" in texts(at.header)
    step = at.session_state["routes"].result.routes[0].steps()[0][1]
    made = f"{step.product} is made from {' + '.join(r.smiles for r in step.reactants)}"
    assert made in texts(at.caption)
    key = texts(at.caption)
    assert "solid red ring" in key and "dashed grey ring" in key and "README" not in key


def test_each_answers_badge_icon_is_read_as_a_word_not_a_control_or_code(monkeypatch):
    """A screen reader reads a badge's icon by its name: "close icon, Invalid SMILES" sounded like a close button, and
    "sync_problem icon, Round trip ✗" like code."""
    from molspec_core.service import Prediction
    from views import predict as page

    icons: dict[str, str] = {}
    monkeypatch.setattr(page.st, "badge", lambda label, icon=None, **_: icons.__setitem__(label, icon))
    answers = [Prediction(1, "CCO", -1.0, True, (), (), round_trip=True),
               Prediction(2, "CC=O", -2.0, True, (), (), concerns=("the query itself",), round_trip=False),
               Prediction(3, "C1CC", -3.0, False, (), ())]
    for answer in answers:
        page.sanity_badge(answer)
        if answer.round_trip is not None:
            page.round_trip_badge(answer)
    assert set(icons) == {"Sane structure", "Check: the query itself", "Invalid SMILES", "Round trip ✓", "Round trip ✗"}
    for label, icon in icons.items():
        assert re.fullmatch(r":material/[a-z]+:", icon) and icon not in (":material/close:", ":material/cancel:"), \
            (label, icon)


def test_the_in_stock_badge_icon_is_read_as_a_word(monkeypatch):
    """The Routes page's "In stock" badge was read "inventory_2 icon, In stock"."""
    from molspec_core.planning import RouteMolecule
    from views import routes as page

    icons: dict[str, str] = {}
    monkeypatch.setattr(page.st, "badge", lambda label, icon=None, **_: icons.__setitem__(label, icon))
    page.stock_badge(RouteMolecule("CCO", True), {})
    assert re.fullmatch(r":material/[a-z]+:", icons["In stock"]), icons


# ---- A4: reaction-centre marks ---------------------------------------------------------------------


def test_the_reaction_centre_is_ringed_solid_or_dashed_at_3_to_1_on_white():
    """The marks were light fills alone, 2.0:1 and 1.5:1 on white and 1.3:1 apart."""
    svg = depict.smiles_svg("CC(=O)Cl", 220, 150, {1: depict.CENTRE_COLOUR, 3: depict.LEAVING_COLOUR})
    rings = re.findall(r"<circle class='centre-ring'[^>]*style='([^']*)'", svg)
    assert len(rings) == 2, svg[-800:]
    change, leave = sorted(rings, key=lambda style: "dasharray" in style)
    assert "dasharray" not in change and "stroke-dasharray" in leave
    for style in rings:
        stroke = re.search(r"stroke:(#[0-9a-f]{6})", style).group(1)
        assert contrast(stroke) >= 3, stroke
    assert "centre-ring" not in depict.smiles_svg("CC(=O)Cl", 220, 150, {1: depict.span_colour(0)})  # copied atoms
    assert "centre-ring" not in depict.smiles_svg("CC(=O)Cl", 220, 150)


def test_the_predict_page_says_what_its_rings_mean_beside_them(copy_models, monkeypatch):
    """The meaning of the marks was only in the toggle's help, behind a hover or a focus, and read "red", "grey"."""
    from views.predict import CENTRE_HELP, CENTRE_KEY

    at = app(copy_models, monkeypatch).run()
    predict(at, "Oc1ccncc1Cl")
    assert CENTRE_KEY["forward"] in texts(at.caption)
    at.toggle(key="mark_centre").set_value(False).run()
    assert CENTRE_KEY["forward"] not in texts(at.caption)
    assert "ring" in CENTRE_HELP and "(red)" not in CENTRE_HELP


def test_what_the_answers_badges_mean_is_on_the_page_not_on_hover_alone(copy_models, monkeypatch):
    """A badge's help shows on hover alone: no Tab stop leads to it, so what "Sane structure" checks (and that it is
    not "correct") and what a round trip holds reached neither a keyboard nor a screen reader."""
    from views.predict import BADGES_LABEL, ROUND_TRIP_RULE, SANE_HELP

    as_forward_and_retro(copy_models)  # a model of each task (check_round_trip asks)
    at = app(copy_models, monkeypatch).run()
    predict(at, "Oc1ccncc1Cl")
    assert_clean(at)
    [key] = [e for e in at.expander if e.label == BADGES_LABEL]
    assert SANE_HELP in texts(key.markdown) and ROUND_TRIP_RULE not in texts(key.markdown)
    at.radio(key="task").set_value("retro").run()
    assert at.toggle(key="round_trip").value
    predict(at, "Oc1ccncc1")
    assert_clean(at)
    assert any(p.round_trip is not None for p in at.session_state["shown"].result.predictions)
    [key] = [e for e in at.expander if e.label == BADGES_LABEL]
    assert SANE_HELP in texts(key.markdown) and ROUND_TRIP_RULE in texts(key.markdown)
    assert "within its top 1;" in texts(key.markdown)


# ---- A2: copied tokens -------------------------------------------------------------------------------


def test_copied_runs_are_boxed_and_numbered_and_listed_in_words():
    """Copied and generated tokens differed by their background colour alone, and each token's position was in a
    hover text that no keyboard or touch screen reaches."""
    source = tokenize("CC(=O)Cl.NCc1ccccc1")
    tokens = tokenize("CC(=O)NCc1ccccc1")
    provenance = [0, 1, -1, 3, 4, -1, -1, 10, 11, -1, 13, 14, -1, 16, 17, -1]
    block = depict.provenance_html(source, tokens, provenance)
    assert block.count(f"border:1.5px solid {depict.RUN_BORDER}") == 10  # 5 runs, in each row
    assert contrast(depict.RUN_BORDER) >= 3
    assert ">run </span>1<" in block and ">run </span>5<" in block  # each box leads with its run's number
    assert ">generated: </span>" in block and ">not copied: </span>" in block  # what a screen reader hears
    assert depict.provenance_lines(tokens, provenance) == [
        "Run 1: tokens 1–2 (C C), copied from query tokens 1–2",
        "Run 2: tokens 4–5 (= O), copied from query tokens 4–5",
        "Run 3: tokens 8–9 (C c), copied from query tokens 11–12",
        "Run 4: tokens 11–12 (c c), copied from query tokens 14–15",
        "Run 5: tokens 14–15 (c c), copied from query tokens 17–18",
        "Generated by the model: tokens 3, 6–7, 10, 13 and 16"]
    assert "<details" in block and "<li>Run 3: tokens 8–9 (C c), copied from query tokens 11–12</li>" in block
    assert depict.provenance_lines(["C", "O"], [0, -1])[-1] == "Generated by the model: token 2"


@pytest.mark.parametrize("hostile, raw, escaped", [
    ('"><script>alert(1)</script>', '"><script>', "&quot;&gt;&lt;script&gt;"),
    ("<img src=x onerror=alert(1)>", "<img", "&lt;img src=x onerror=alert(1)&gt;"),
    ("' onmouseover='alert(1)", "' onmouseover", "&#x27; onmouseover=&#x27;alert(1)"),
    ("&amp;", ">&amp;<", "&amp;amp;"),
])
def test_the_copied_tokens_view_escapes_every_token_in_every_place(hostile, raw, escaped):
    """Tokens come from the query: in the boxes, their hover texts and the list in words alike, none is markup."""
    block = depict.provenance_html([hostile, "C"], [hostile, "C", hostile], [0, -1, 0])
    assert raw not in block
    assert block.count(escaped) == 5  # in the query's box, the prediction's two, and the two lines of the list
    assert block.count("<span") == block.count("</span>") and block.count("<li>") == 3  # no tag left open or added


def test_the_picture_of_copied_atoms_numbers_them_by_run_and_says_so_in_words():
    tokens = tokenize("CC(=O)NC")
    provenance = [0, 1, -1, 3, 4, -1, -1, 9]  # C C ( = O ) N C: runs C C, = O and the last C
    assert depict.copied_atom_runs(tokens, provenance) == {0: 1, 1: 1, 2: 2, 4: 3}
    svg = depict.provenance_svg(tokens, provenance)
    assert svg is not None and svg.count("class='note'") == 4  # the run's number by each copied atom
    assert depict.provenance_alt(tokens, provenance) == (
        "Structure of CC(=O)NC as written; atoms written by copied tokens, by run: run 1, atoms 1 (C) and 2 (C); "
        "run 2, atom 3 (O); run 3, atom 5 (C)")


def test_the_copied_tokens_tab_says_how_to_reach_the_positions_without_a_mouse(copy_models, monkeypatch):
    at = app(copy_models, monkeypatch).run()
    at.selectbox(key="method").set_value("spec-auto").run()
    predict(at, "Oc1ccncc1Cl")
    assert "or open the list under the tokens" in texts(at.caption)
    assert re.search(r"in \d+ numbered runs?;", texts(at.caption))
    [block] = [h.proto.body for h in at.get("html")]
    assert "Every run and generated token in words" in block


# ---- charts -------------------------------------------------------------------------------------------------------


def test_the_session_speedup_charts_bars_are_listed_in_words(copy_models, monkeypatch):
    """A screen reader read the chart of this session's speedups as its labels run together ('0.33× 1. CC(=O)O.CCO
    Speculative beam, exact 0 0.2 0.4'), and the queries measured before the one on screen were in the chart alone."""
    from views.predict import SESSION_TABLE_LABEL

    at = app(copy_models, monkeypatch).run()
    at.selectbox(key="method").set_value("spec-auto").run()
    for query in ("Oc1ccncc1Cl", "Clc1ccncc1"):
        predict(at, query)
        measure_speedup(at)
    assert_clean(at)
    [listed] = [e for e in at.expander if e.label == SESSION_TABLE_LABEL]
    table = listed.dataframe[0].value
    factors = [f"{r.factor:.2f}×" for r in at.session_state["speedups"].values()]
    assert table.to_dict("list") == {"#": [1, 2], "query": ["Oc1ccncc1Cl", "Clc1ccncc1"],
                                     "speculative": ["Speculative, auto drafts"] * 2,
                                     "standard": ["Greedy"] * 2, "settings": ["float32 arithmetic"] * 2,
                                     "speedup": factors}


# ---- B1, B2: titles and headings ------------------------------------------------------------------------


def test_every_page_has_a_title_of_its_own(copy_models, monkeypatch):
    """The browser's tab and a screen reader's page title read "MolSpec" on every page."""
    titles: list[str] = []
    real = st.set_page_config

    def recording(*args, **kwargs):
        titles.append(kwargs.get("page_title"))
        return real(*args, **kwargs)

    monkeypatch.setattr(st, "set_page_config", recording)
    at = app(copy_models, monkeypatch).run()
    seen = {}
    for page, name in PAGES.items():
        at = at.switch_page(page).run()
        seen[name] = titles[-1]
    assert seen == {name: f"{name} · MolSpec" for name in PAGES.values()}


def test_the_sidebar_names_the_app_without_a_heading_and_sections_are_level_2(copy_models, monkeypatch):
    """Two level-1 headings on every page (the sidebar's "MolSpec" first); Predict went from level 1 to level 3;
    its answers' "Rank k" were bold text, which a screen reader cannot move between."""
    at = app(copy_models, monkeypatch).run()
    predict(at, "Oc1ccncc1Cl")
    assert_clean(at)
    sidebar = at.sidebar
    assert not sidebar.title and not sidebar.header and not sidebar.subheader
    assert "MolSpec" in texts(sidebar.markdown)
    assert [t.value for t in at.title] == ["Predict reaction products"]
    assert [h.value for h in at.header] == ["Query", "Predictions", "Inspect"]
    ranks = [p.rank for p in at.session_state["shown"].result.predictions]
    assert [h.value for h in at.subheader] == [f"Rank {rank}" for rank in ranks]


def test_the_batch_and_benchmark_sections_are_level_2_under_the_title(copy_models, monkeypatch, bench_folder):
    """Batch's 'Results' and Benchmark's 'Saved runs' and 'Live benchmark' were level 3 under a level-1 title."""
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(bench_folder))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert [h.value for h in at.header] == ["Saved runs", "Live benchmark"] and not at.subheader


# ---- B12: the Batch page's error column -----------------------------------------------------------------


def test_a_rejected_rows_reason_stands_beside_its_query(copy_models, monkeypatch):
    """At 1,400 px the error column was past the grid's right edge: only a sideways scroll reached it."""
    at = batch_page(monkeypatch, copy_models)
    at.file_uploader[0].set_value(("q.txt", b"Oc1ccncc1\nxyz\n", "text/plain"))
    submit(at, "Run batch")
    assert_clean(at)
    order = list(at.dataframe[0].proto.column_order)
    assert order[:3] == ["row", "query", "error"]
    at.file_uploader[0].set_value(("good.txt", b"Oc1ccncc1\n", "text/plain"))
    submit(at, "Run batch")
    order = list(at.dataframe[0].proto.column_order)
    assert order[:3] == ["row", "query", "rank"] and "error" in order  # where nothing was rejected, at the end


# ---- in a browser: what the keyboard reaches ----------------------------------------------------------------------
# test_browser's server, browser and page fixtures; where it cannot run (no Chromium, no playwright, no shipped
# model), these tests are skipped for its reason, and the ones above still run.

try:
    from test_browser import browser, page, predict_page, server, settle  # noqa: F401  (fixtures)
    BROWSER_MISSING = ""
except pytest.skip.Exception as missing:
    BROWSER_MISSING = str(missing)
needs_browser = pytest.mark.skipif(bool(BROWSER_MISSING), reason=BROWSER_MISSING)

# Whether the focused element and everything around it is drawn (a faded-in toolbar may take a moment)
FOCUS_SHOWN = """() => { let e = document.activeElement;
    for (; e && e !== document.body; e = e.parentElement) if (getComputedStyle(e).opacity !== '1') return false;
    return true; }"""
FOCUS_RING = """() => { const c = getComputedStyle(document.activeElement);
    return [c.outlineStyle, parseFloat(c.outlineWidth), c.outlineColor]; }"""


def tab_to(page, name: str, presses: int = 40) -> None:
    """Press Tab until the focused element's accessible label starts with `name`."""
    for _ in range(presses):
        page.keyboard.press("Tab")
        if (page.evaluate("() => document.activeElement.getAttribute('aria-label') || ''")).startswith(name):
            return
    pytest.fail(f"Tab never reached {name!r}")


@needs_browser
def test_the_toolbars_over_pictures_and_tables_show_while_the_keyboard_is_on_them(page, tmp_path):
    """Each answer's picture and the Batch table have a toolbar (Fullscreen; the table's Download, Search) that shows
    on hover: Tab put the focus on its buttons while they were drawn at opacity 0, one unseen stop per answer."""
    from test_browser import contrast

    predict_page(page)
    page.get_by_role("button", name="Esterification").click()
    page.get_by_role("heading", name="Rank 1", exact=True).wait_for()
    settle(page)
    page.get_by_role("switch", name="Mark where bonds change").focus()
    tab_to(page, "Fullscreen: Structure of ")
    page.wait_for_function(FOCUS_SHOWN, timeout=3000)
    style, width, colour = page.evaluate(FOCUS_RING)
    assert style == "solid" and width >= 2 and contrast(colour, "rgb(255, 255, 255)") >= 3, (style, width, colour)

    queries = tmp_path / "one.txt"
    queries.write_text("CCO.CC(=O)O\n")
    page.goto(page.base_url + "/batch")
    page.locator('input[type="file"]').set_input_files(str(queries))
    page.get_by_text("one.txt").wait_for()
    page.get_by_role("button", name="Run batch").click()
    page.get_by_role("button", name="Download CSV").wait_for()
    settle(page)
    page.get_by_role("button", name="Run batch").focus()
    tab_to(page, "Download as CSV")  # the table's own toolbar
    page.wait_for_function(FOCUS_SHOWN, timeout=3000)


@needs_browser
def test_keyboard_focus_among_the_answers_shows_a_ring_of_3_to_1(page):
    """Focus on a download, a tab, an expander's title or an answer's SMILES box showed as a halo of half the ring's
    colour, 2.1:1 on white (the sidebar's controls were given a ring of their own, accessibility QA A11)."""
    from test_browser import contrast

    predict_page(page)
    page.get_by_role("button", name="Esterification").click()
    page.get_by_role("heading", name="Rank 1", exact=True).wait_for()
    settle(page)
    main = page.get_by_test_id("stMain")
    targets = {"a download": main.get_by_role("button", name="Download answers (CSV)"),
               "a tab": main.get_by_role("tab", name="Copied tokens"),
               "an expander's title": main.locator("summary").first,
               "an answer's SMILES box": page.locator(".st-key-answer_1 [data-testid='stCode']").first}
    for what, control in targets.items():
        control.focus()
        page.keyboard.press("Shift+Tab")  # focus by keyboard: what :focus-visible answers
        page.keyboard.press("Tab")
        assert control.evaluate("e => e === document.activeElement"), what
        style, width, colour = page.evaluate(FOCUS_RING)
        assert style == "solid" and width >= 2 and contrast(colour, "rgb(255, 255, 255)") >= 3, (what, style, colour)
