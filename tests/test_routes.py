"""The Routes page (views/routes.py) beyond tests/test_planning.py's: what it keeps across page switches, how it
reads an uploaded stock, and what it says of a search (how it was made, why it found nothing, what failed); and
md_escape, which keeps the names it shows (an uploaded file's) from becoming links."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from molspec_core import planning
from test_planning import COPY_MODEL, find_routes, routes_page, shown_text
from views import common
from views.routes import STOP_NOTE


def models_with_forward(tmp_path):
    """A models folder of the copy model as the retrosynthesis model and, dressed as one, the forward model."""
    models = tmp_path / "models"
    shutil.copytree(COPY_MODEL, models / "retro")
    shutil.copytree(COPY_MODEL, models / "forward")
    config = json.loads((models / "forward" / "config.json").read_text())
    (models / "forward" / "config.json").write_text(json.dumps({**config, "task": "forward"}))
    return models


def test_routes_page_keeps_its_form_across_a_page_switch(tmp_path, monkeypatch):
    """Back from another page the form was empty under the routes it had made, and Find routes then refused the
    empty target and wiped them."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    at.radio(key="route_algorithm").set_value("mcts")
    at = find_routes(at, "NCCO")
    assert at.expander and at.expander[0].label.startswith("Route 1")
    at = at.switch_page("views/predict.py").run()
    at = at.switch_page("views/routes.py").run()
    assert not at.exception
    assert at.text_input(key="route_target").value == "NCCO" and at.slider(key="route_time").value == 5
    assert at.radio(key="route_algorithm").value == "mcts" and at.toggle(key="route_check_atoms").value is False
    assert at.expander and at.expander[0].label.startswith("Route 1")  # the routes they made, still shown
    next(b for b in at.button if b.label == "Find routes").click()
    at.run()
    assert not at.exception and not at.error and at.expander[0].label.startswith("Route 1")


def test_the_step_limit_set_on_the_page_is_searched_with_recorded_and_kept(tmp_path, monkeypatch):
    """The page always searched 5 steps deep (`molspec plan` has --max-steps): a chemist wanting a route of at most 2
    steps could not say so. The form's step limit reaches the search's settings, the JSON's settings.max_steps and the
    caption of how the routes were made, and is kept across a page switch as the form's other fields are."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    assert at.slider(key="route_max_steps").value == planning.PlanSettings.max_steps  # 5, as before
    at.slider(key="route_max_steps").set_value(2)
    at = find_routes(at, "NCCO")
    assert not at.exception and at.expander[0].label.startswith("Route 1")
    result = at.session_state["routes"].result
    assert result.settings.max_steps == 2 and planning.routes_json(result)["settings"]["max_steps"] == 2
    assert "step limit 2;" in shown_text(at)
    at = at.switch_page("views/predict.py").run()
    at = at.switch_page("views/routes.py").run()
    assert not at.exception and at.slider(key="route_max_steps").value == 2


def test_a_search_that_ran_out_at_its_step_limit_is_told_a_higher_one_might_help():
    """With the step limit on the form, a search limited to 1 step that ran out of molecules was told only 'A larger
    stock might help'; where the limit left a molecule unexpanded the page names it, and only there."""
    from views.routes import no_route_message

    counts = planning.ExpansionCounts(molecules=1, answers=3, kept=2)
    for reached, advice in ((True, "A higher step limit or a larger stock might help."),
                            (False, "A larger stock might help.")):
        stats = planning.SearchStats("retro*", 0.5, 30.0, 2, 5, counts, search_s=0.5, step_limit_reached=reached)
        message = no_route_message(stats)
        assert message.endswith(". " + advice) and "within the step limit" in message


def test_a_search_stopped_by_a_page_visit_is_told_and_keeps_the_routes_before_it(tmp_path, monkeypatch):
    """Leaving the page mid-search (or Stop) ended it without a word, and the routes shown before it were gone."""
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "NCCO")
    assert at.expander and at.expander[0].label.startswith("Route 1")

    def stopped(*args, **kwargs):  # what Streamlit raises in the search's progress call once the user has left
        raise StopException()

    with monkeypatch.context() as patch:
        patch.setattr(planning, "plan", stopped)
        at = find_routes(at, "NCCCO")
    at = at.switch_page("views/predict.py").run()
    at = at.switch_page("views/routes.py").run()
    assert not at.exception and not at.error
    assert "The search for NCCCO was stopped before it ended" in shown_text(at)
    assert "The routes below are from the search before it." in shown_text(at)
    assert at.expander and at.expander[0].label.startswith("Route 1")  # NCCO's, kept
    at = find_routes(at, "NCCO")  # a search that ends says no more of the one that did not
    assert not at.exception and "was stopped before it ended" not in shown_text(at)


def upload_stock(at, name: str, data: bytes):
    at.file_uploader(key="route_stock").set_value((name, data, "text/plain"))
    return at


def test_routes_page_reads_an_uploaded_stock_once_and_counts_what_it_left_out(tmp_path, monkeypatch):
    """A 1.3 MB stock file was read again on every search (15 s of a greyed page each), and the entries RDKit
    could not read were left out without a word (the command line counts them)."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    reads = []
    real = planning.stock_from_upload
    monkeypatch.setattr(planning, "stock_from_upload",
                        lambda name, data, column=None: reads.append(name) or real(name, data, column))
    data = f"# {tmp_path.name}: a file no other test uploads\nNO\nC1CC\nxyz\n".encode()
    at = upload_stock(routes_page(tmp_path / "models", monkeypatch), "shelf.smi", data)
    at = find_routes(at, "NCCO")
    assert not at.exception and at.expander[0].label.startswith("Route 1")
    assert "stock shelf.smi (1 molecule; 2 unreadable entries left out)" in shown_text(at)
    at = find_routes(at, "NCCO")  # the same file again
    assert not at.exception and at.expander and reads == ["shelf.smi"]
    exported = planning.routes_json(at.session_state["routes"].result)
    assert exported["stock"] == {"source": "shelf.smi", "size": 1, "unreadable": 2, "first_unreadable": (
        "RDKit cannot parse 'C1CC' as a molecule: ring bond 1 opened at position 2 is never closed"),
        "column": None, "sheet": None}


def stock_line(at) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("**Stock:**")).replace("\\", "")


def test_a_vendor_stock_whose_smiles_column_has_its_own_name_is_read_by_naming_it_on_the_page(tmp_path, monkeypatch):
    """A vendor CSV whose SMILES column had a name of its own was told to "give that column's name", which only
    plan --stock-column could take; and the stock line said nowhere which column a table stock was read from. The
    page has a column box for a stock file with columns, kept across a page switch, and says the column read."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    assert not [t for t in at.text_input if t.key == "route_stock_column"]  # the default stock: no column to name
    at = upload_stock(at, "vendor.csv", f"ID,Structure\n{tmp_path.name},NO\n".encode()).run()
    assert "give that column's name" in " ".join(e.value for e in at.error)
    at.text_input(key="route_stock_column").input("structure").run()  # any case, as the names read without one
    assert not at.error
    assert stock_line(at) == "**Stock:** your file vendor.csv, SMILES from the column Structure (1 molecule)."
    at = find_routes(at, "NCCO")
    assert not at.exception and at.expander[0].label.startswith("Route 1")
    assert "stock vendor.csv, SMILES from the column Structure (1 molecule)" in shown_text(at)
    assert "; stock vendor.csv, SMILES from the column Structure." in shown_text(at)  # how the routes were made
    assert planning.routes_json(at.session_state["routes"].result)["stock"]["column"] == "Structure"
    at = at.switch_page("views/predict.py").run().switch_page("views/routes.py").run()
    assert at.text_input(key="route_stock_column").value == "structure"
    assert stock_line(at).startswith("**Stock:** your file vendor.csv, SMILES from the column Structure (1 molecule)")
    at = upload_stock(at, "shelf.smi", f"NO {tmp_path.name}\n".encode()).run()  # no columns: no box, none named
    assert not at.error and not [t for t in at.text_input if t.key == "route_stock_column"]
    assert stock_line(at) == "**Stock:** your file shelf.smi (1 molecule)."
    # The column named belongs to its file: another vendor's file was refused for lacking the first one's Structure
    at = upload_stock(at, "vendor.csv", f"ID,Structure\n{tmp_path.name},NO\n".encode()).run()
    at.text_input(key="route_stock_column").input("Structure").run()
    at = upload_stock(at, "pubchem.csv", f"cid,isosmiles,canonicalsmiles\n{tmp_path.name},NO,NO\n".encode()).run()
    assert not at.error and at.text_input(key="route_stock_column").value == ""  # the stock's names: isomeric first
    assert stock_line(at) == "**Stock:** your file pubchem.csv, SMILES from the column isosmiles (1 molecule)."


def test_an_sd_stocks_box_asks_for_a_data_field_and_says_what_is_read_without_one(tmp_path, monkeypatch):
    """An SD stock's box read "automatic: each record's molecule, any case": the case is of a column's name, and an
    SD file without a field named gives its molecules."""
    from conftest import molfile

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    data = (molfile("NO", tmp_path.name).rstrip("\n") + "\n>  <Structure>\nOCCO\n\n$$$$\n").encode()
    at = upload_stock(routes_page(tmp_path / "models", monkeypatch), "shelf.sdf", data).run()
    box = at.text_input(key="route_stock_column")
    assert box.label == "SD data field holding the stock's SMILES (optional)"
    assert box.placeholder == "automatic: each record's molecule"
    assert stock_line(at) == "**Stock:** your file shelf.sdf (1 molecule)."
    box.input("Structure").run()
    assert stock_line(at) == "**Stock:** your file shelf.sdf, SMILES from the data field Structure (1 molecule)."


def test_a_stock_file_refused_is_named_once(tmp_path, monkeypatch):
    """'Cannot use the stock file shelf.smi: the stock shelf.smi holds no molecules ...': the refusal named the file
    and the reason named it again. It is named once, by the reason where that names it, by the opening otherwise."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = upload_stock(routes_page(tmp_path / "models", monkeypatch), "shelf.smi", f"# {tmp_path.name}\nxyz\n".encode())
    refused = " ".join(e.value for e in at.run().error).replace("\\", "")
    assert refused.startswith("Cannot use this stock file: the stock shelf.smi holds no molecules"), refused
    assert refused.count("shelf.smi") == 1, refused
    at = upload_stock(at, "vendor.csv", f"ID,Structure\n{tmp_path.name},NO\n".encode()).run()
    refused = " ".join(e.value for e in at.error).replace("\\", "")
    assert refused.startswith("Cannot use the stock file vendor.csv: the CSV needs a column named"), refused


def test_our_own_results_as_a_stock_are_told_to_name_a_column_in_the_box(tmp_path, monkeypatch):
    """Our results file as a stock was told to name a column "to predict its queries again", on a page with no
    column box and no prediction to make."""
    from molspec_core.io import csv_bytes, output_header

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    header = output_header([])
    rows = [[1, tmp_path.name, "NCCO", 1, "NO", *[None] * (len(header) - 5)]]
    at = upload_stock(routes_page(tmp_path / "models", monkeypatch), "results.csv", csv_bytes(header, rows)).run()
    refused = " ".join(e.value for e in at.error).replace("\\", "")
    assert "own results" in refused and "predict" not in refused
    assert "smiles, for a stock of its answers, or query, for a stock of its queries" in refused
    at.text_input(key="route_stock_column").input("smiles").run()
    assert not at.error
    assert stock_line(at) == "**Stock:** your file results.csv, SMILES from the column smiles (1 molecule)."


def test_routes_page_keeps_an_uploaded_stock_across_a_page_switch_and_says_which_is_in_use(tmp_path, monkeypatch):
    """Back from another page the stock uploader was empty (Streamlit cannot put a file back in one), the page said
    nothing of a stock, and Find routes searched the default stock in silence. The file chosen is kept and named
    as the stock in use, until another is chosen, it is removed, or the default stock is asked for."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    assert stock_line(at).startswith("**Stock:** the default stock")
    at = upload_stock(at, "shelf.smi", f"NO {tmp_path.name}\n".encode()).run()
    assert stock_line(at) == "**Stock:** your file shelf.smi (1 molecule)."
    at = at.switch_page("views/predict.py").run()
    at = at.switch_page("views/routes.py").run()
    assert at.file_uploader(key="route_stock").value is None  # what Streamlit gives back
    assert stock_line(at).startswith("**Stock:** your file shelf.smi (1 molecule), chosen before you left this page.")
    at = find_routes(at, "NCCO")
    assert not at.exception and at.session_state["routes"].result.stock == "shelf.smi"
    next(b for b in at.button if b.label == "Use the default stock instead").click()
    at = find_routes(at.run(), "NCCO")
    assert stock_line(at).startswith("**Stock:** the default stock")
    assert at.session_state["routes"].result.stock == planning.DEFAULT_STOCK.name
    at = upload_stock(at, "shelf.smi", f"NO {tmp_path.name}\n".encode()).run()
    at.file_uploader(key="route_stock").set_value(None)  # its ×: the default stock again
    at = find_routes(at.run(), "NCCO")
    assert stock_line(at).startswith("**Stock:** the default stock")
    assert at.session_state["routes"].result.stock == planning.DEFAULT_STOCK.name


def test_routes_page_uses_the_sidebars_round_trip_top_k_and_labels_the_routes_by_their_own(tmp_path, monkeypatch):
    """The sidebar's round-trip top-k was ignored (every search checked top 1), the caption counted steps
    with round trip ✓ as decoder calls, and the routes shown were labelled with the sidebar of the moment."""
    at = routes_page(models_with_forward(tmp_path), monkeypatch)
    assert "gives the product back as its first answer." in shown_text(at)  # the forward task: no top-k shown
    at.radio(key="task").set_value("retro").run()
    at.select_slider(key="round_trip_k").set_value(3).run()
    assert "within its top 3 (the sidebar's top-k)" in shown_text(at)
    at = find_routes(at, "NCCO")
    assert not at.exception and at.expander
    result = at.session_state["routes"].result
    assert result.settings.round_trip_k == 3 and result.forward_model == "forward"
    counts = result.stats.counts
    text = shown_text(at)
    assert f"round trip ✓ for {counts.round_trips} of the {counts.kept} usable steps" in text
    assert "of them round trip" not in text
    made = next(c.value for c in at.caption if c.value.startswith("This search"))
    assert "time limit 5 s" in made.replace("\\", "") and "the product back within its top 3" in made.replace("\\", "")
    at.select_slider(key="round_trip_k").set_value(1).run()  # the sidebar changes; the routes on screen do not
    at.slider(key="route_time").set_value(60).run()
    assert next(c.value for c in at.caption if c.value.startswith("This search")) == made


def test_routes_page_says_where_the_targets_stereo_is_not_read(tmp_path, monkeypatch):
    """The Predict page says so; the Routes page showed the target without its @ and said nothing."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "NC[C@H](C)C")
    assert not at.exception
    assert [str(i.value).replace("\\", "") for i in at.info][:1] == [  # then: the target is in the default stock
        "Stereo marks dropped: 1 atom marked @ that RDKit does not read as stereo (two like groups, or an allene's "
        "or a biaryl's axial stereo, which SMILES as RDKit reads it cannot hold). The model reads the query without "
        "them, and its answers carry none of that stereo."]
    at = find_routes(at, "NCCO")
    assert not any("Stereo" in str(i.value) for i in at.info)


def test_routes_page_says_the_target_is_in_the_stock_when_no_route_makes_it(tmp_path, monkeypatch):
    """It said both 'the routes below make it anyway' and 'No route…', over no routes; and '(1 molecules)'."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = upload_stock(routes_page(tmp_path / "models", monkeypatch), "mine.smi", f"ClCCCl {tmp_path.name}\n".encode())
    at = find_routes(at, "ClCCCl")
    assert not at.exception and not at.expander
    text = shown_text(at)
    assert [i.value for i in at.info][0].startswith("The target itself is in the stock: procure it as it is.")
    # one message; the page's own warnings (the sidebar's may name the models folder, whose path holds this test's name)
    assert "make it anyway" not in text and not [w for w in at.main.warning if "route" in w.value]
    assert "(1 molecule)" in text and "1 molecules" not in text and " 1 iterations" not in text


def test_routes_page_shows_the_expansions_that_failed_and_why(tmp_path, monkeypatch):
    """A target the model failed on counted as expanded, and the reason was in the JSON alone."""
    from molspec_core.service import Predictor
    from test_planning import STOPPED, failing_predict

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    monkeypatch.setattr(Predictor, "predict", failing_predict(STOPPED))
    at = find_routes(at, "NCCO")
    assert not at.exception
    assert next(m for m in at.metric if m.label == "Molecules expanded").value == "0"
    failed = [w.value.replace("\\", "") for w in at.warning if "could not be expanded" in w.value]
    assert failed == [f"1 molecule could not be expanded (the model gave no answers for it); NCCO: {STOPPED}."]


def test_a_search_whose_last_expansion_its_time_cut_short_is_told_so_calmly():
    """Every search that ran to its limit warned of 'a molecule that could not be expanded: stopped after the
    0.122207 s time limit per query': the last expansion, cut at the search's end, which no one had set."""
    from molspec_core.planning import ExpansionCounts
    from views import routes

    cut = "Ic1ccc(OCc2ccccc2)cc1: its expansion was cut short when the search's time ran out"
    text, alarming = routes.failure_message(ExpansionCounts(molecules=88, failed=1, cut=1, first_failure=cut))
    assert not alarming and text.replace("\\", "").startswith(cut)
    # the target's own expansion cut short: nothing was expanded, and that is worth a warning, which said the model
    # 'gave no answers for it', as if it could not read the target, and gave no advice
    text, alarming = routes.failure_message(ExpansionCounts(molecules=0, failed=1, cut=1, first_failure=cut))
    assert alarming and text == ("The search's time ran out while the model was still proposing reactants for the "
                                 "target, so nothing was expanded: give the search more time (the larger the target, "
                                 "the longer the model takes).")
    # One failed, one cut: it said the model 'gave no answers for them', and named the one cut as the first
    text, alarming = routes.failure_message(ExpansionCounts(molecules=3, failed=2, cut=1, first_failure=cut))
    assert alarming and text.replace("\\", "").startswith(
        "2 molecules could not be expanded (the model gave no answers for 1, and the search's time ran out while it "
        f"was proposing reactants for 1); the first, {cut}")


def test_a_last_expansion_of_several_molecules_cut_by_the_searchs_end_is_told_calmly_too():
    """MCTS asks for the molecules of a set at once (imatinib's two halves): its last expansion, cut at the search's
    end, gave 'warning: 2 molecules could not be expanded (the model gave no answers for them); the first, ...: its
    expansion was cut short when the search's time ran out', on the page and in molspec plan."""
    from molspec_core.planning import ExpansionCounts, failure_note

    cut = "Cc1ccc(NC(=O)c2ccc(CN3CCN(C)CC3)cc2)cc1N: its expansion was cut short when the search's time ran out"
    assert failure_note(ExpansionCounts(molecules=1, failed=2, cut=2, first_failure=cut)) == (
        f"{cut}; so were those of 1 more molecule asked for with it (none of them counted among the molecules "
        "expanded).", False)


def test_the_progress_bar_says_what_the_search_does_before_its_first_expansion_returns():
    from views import routes

    assert routes.progress_text(0.0, 0, 30.0).startswith("Expanding the target: asking the model for its reactants")
    assert routes.progress_text(12.4, 1, 30.0) == "Searching… 1 molecule expanded, 12 of 30 s"


# ---- md_escape: nothing a user gave becomes a link ---------------------------------------------------

# GFM's autolink literals as remark-gfm (Streamlit's markdown) finds them in text, escapes already read; \w is
# ASCII in JavaScript
_GFM_WWW_OR_URL = re.compile(r"(https?://|www(?=\.))[-.\w]+", re.IGNORECASE | re.ASCII)
_GFM_EMAIL = re.compile(r"[-.\w+]+@[-\w]+(?:\.[-\w]+)+", re.ASCII)


def as_rendered(markdown: str) -> str:
    """The text markdown shows for md_escape's output: each backslash escape read."""
    return re.sub(r"\\(.)", r"\1", markdown)


@pytest.mark.parametrize("text", [
    "www.evil.example.smi", "WWW.Evil.Example", "see https://evil.example/x.smi", "http://evil.example",
    "ftp://files.example/stock.smi", "stock from chemist@evil.example.org", "mailto:a.b+c@evil-example.co.uk",
    "Cannot read www.evil.example.smi: see https://evil.example/help",
])
def test_md_escape_never_makes_an_address_a_link(text):
    """An uploaded stock named www.evil.example.smi was drawn as a link: GFM autolinks survive backslashes."""
    rendered = as_rendered(common.md_escape(text))
    assert not _GFM_WWW_OR_URL.search(rendered) and not _GFM_EMAIL.search(rendered)
    assert rendered.replace(common.WORD_JOINER, "") == text  # shown as typed: the joiner has no width


@pytest.mark.parametrize("text", ["C[C@@H](N)C(=O)O", "N[C@H](C)C(=O)O.[Na+]", "stock.smi", "a:b/c", "wwwx.smi"])
def test_md_escape_leaves_text_without_an_address_as_it_was(text):
    """SMILES (chirality is written with @) are shown, and copied, without a hidden character."""
    escaped = common.md_escape(text)
    assert common.WORD_JOINER not in escaped and as_rendered(escaped) == text


def test_routes_page_flags_a_step_that_inverts_a_stereocentre_and_says_what_the_flag_means(tmp_path, monkeypatch):
    """Boc-L-alanine from D-alanine was shown as a route like any other."""
    from test_planning import BOC_L_ALA, INVERTS_ALA, stereo_plan_result

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    monkeypatch.setattr(planning, "plan", lambda *args, **kwargs: stereo_plan_result())
    at = find_routes(at, BOC_L_ALA)
    assert not at.exception
    assert [e.label.split(", ")[-1] for e in at.expander] == ["probability 50.0% · stereo ⚠ in 1 step",
                                                               "probability 30.0%"]
    warned = [w.value.replace("\\", "") for w in at.expander[0].warning]
    assert warned == [f"Stereo: this step {INVERTS_ALA}."]
    assert not at.expander[1].warning
    assert any(c.value.startswith("Stereo ⚠ marks a step that sets a stereocentre") for c in at.expander[0].caption)
    assert any("stereo ⚠" in c.value for c in at.expander[0].caption if c.value.startswith("Step 1"))


@pytest.mark.parametrize("name", ["stock.smiles", "stock.sd", "stock.xlsm", "stock.smi.gz", "stock.TSV"])
def test_routes_page_takes_every_stock_file_the_command_line_reads(tmp_path, monkeypatch, name):
    """The uploader refused stock.smiles, stock.sd and a macro workbook, which load_stock (plan --stock) reads."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    accepted = at.file_uploader(key="route_stock").proto.type
    assert any(name.lower().endswith(suffix) for suffix in accepted)


def test_routes_page_plans_for_a_cxsmiles_with_the_coordinates_a_drawing_program_writes(tmp_path, monkeypatch):
    """A CXSMILES copied from a drawing program carries its atoms' coordinates, |(0,0,;1.3,0.75,;...)|: the dots
    between their digits had the target refused as 'several molecules; plan a route to one at a time'."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "NCCO |(0,0,;1.3,0.75,;2.6,0,;3.9,0.75,)|")
    assert not at.exception and not at.error
    assert at.session_state["routes"].result.target == "NCCO"
    assert at.expander and at.expander[0].label.startswith("Route 1")


def test_a_mistyped_target_keeps_the_routes_before_it_one_press_away(tmp_path, monkeypatch):
    """A typo in the next target (or a stock file that cannot be read) wiped the routes on screen, which a search of
    minutes had made: they leave the page under the error, as they belong to another target, and come back on a
    press."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "NCCO")
    assert at.expander and at.expander[0].label.startswith("Route 1")
    at = find_routes(at, "NCC(O")
    assert "Cannot plan for this target" in shown_text(at) and not at.expander and not at.get("download_button")
    at = find_routes(at, "C1CC")  # a second typo keeps them too
    assert not at.expander
    back = at.button(key="route_show_before")
    assert back.label == "Show the routes for NCCO again"
    back.click()
    at.run()
    assert not at.exception and not at.error
    assert at.session_state["routes"].result.target == "NCCO" and at.expander[0].label.startswith("Route 1")
    assert not [b for b in at.button if b.key == "route_show_before"]
    at = find_routes(at, "NCC(O")  # and after a search that ends, the ones before it are not kept on
    at = find_routes(at, "NCCCO")
    assert not [b for b in at.button if b.key == "route_show_before"]


def test_a_search_stopped_while_a_model_loads_is_told(tmp_path, monkeypatch):
    """Stop (or leaving the page) while the stock was read or a model loaded, the first search's seconds, ended the
    search without a word: the page showed the form as if Find routes had never been pressed."""
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    at = routes_page(models_with_forward(tmp_path), monkeypatch)
    real = common.Settings.predictor

    def loading(self, model=None):  # what Streamlit raises in the forward model's load once the user has left
        if model == "forward":
            raise StopException()
        return real(self, model)

    with monkeypatch.context() as patch:
        patch.setattr(common.Settings, "predictor", loading)
        at = find_routes(at, "NCCCO")
    at = at.switch_page("views/predict.py").run()
    at = at.switch_page("views/routes.py").run()
    assert not at.exception
    assert "The search for NCCCO was stopped before it ended" in shown_text(at)


def test_a_stock_file_that_cannot_be_used_is_told_once_and_its_refusal_goes_with_it(tmp_path, monkeypatch):
    """Find routes with a stock file that cannot be read showed its reason twice, in two error boxes; and the
    search's one stayed, naming that file, under the next file chosen (a good one, or the default stock)."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = upload_stock(routes_page(tmp_path / "models", monkeypatch), "bad.smi", f"xyz {tmp_path.name}\n".encode())
    at = find_routes(at.run(), "NCCO")
    errors = [e.value.replace("\\", "") for e in at.error]
    assert sum("holds no molecules" in e for e in errors) == 1
    assert "Not searched: the stock file bad.smi cannot be used (why: under the stock file box above)." in errors
    at = upload_stock(at, "good.smi", f"NO {tmp_path.name}\n".encode()).run()
    assert not at.exception and not at.error
    at = find_routes(upload_stock(at, "bad.smi", f"xyz {tmp_path.name}\n".encode()).run(), "NCCO")
    at.file_uploader(key="route_stock").set_value(None)  # its ×: the default stock
    at.run()
    assert not at.error


def test_a_target_pasted_over_the_length_limit_is_refused_not_swapped_for_the_one_before(tmp_path, monkeypatch):
    """The field took at most 2,000 characters: the browser drops a longer paste whole, without a word (as AppTest's
    input does), and Find routes searched the target typed before it again, under the new one's name in no place."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "NCCO")
    assert at.expander
    at = find_routes(at, "C" * 2050)
    assert not at.exception and not at.expander
    assert "Cannot plan for this target: query is 2,050 characters long; the limit is 2,000" in shown_text(at)


def test_a_search_a_sidebar_change_ended_says_what_ended_it(tmp_path, monkeypatch):
    """A change in the sidebar mid-search ends it (Streamlit reruns the page), and the page then said it was ended by
    'leaving the page or Stop', neither of which the user had done."""
    from streamlit.runtime.scriptrunner_utils.exceptions import RerunException
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)

    def rerun(*args, **kwargs):  # what Streamlit raises in the search's progress call after a sidebar change
        raise RerunException(RerunData())

    with monkeypatch.context() as patch:
        patch.setattr(planning, "plan", rerun)
        at = find_routes(at, "NCCCO")
    at = at.switch_page("views/routes.py").run()  # AppTest's rerun opens the first page
    assert not at.exception
    assert "The search for NCCCO was stopped before it ended (Stop, leaving the page, or changing anything outside " \
           "the search's form, in the sidebar too, ends it)" in shown_text(at)


@pytest.mark.parametrize("kept, answers, shown", [(1081, 1085, ">99%"), (2, 1000, "<1%"), (150, 160, "94%"),
                                                  (70, 70, "100%")])
def test_answers_used_is_never_rounded_to_all_or_none_where_it_is_neither(tmp_path, monkeypatch, kept, answers, shown):
    """'Answers used' read 100% where the search had skipped 4 of 1,085 answers, and 0% where it had used 2."""
    import dataclasses

    from test_planning import stereo_plan_result

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    result = stereo_plan_result()
    counts = planning.ExpansionCounts(molecules=1, answers=answers, kept=kept)
    result = dataclasses.replace(result, stats=dataclasses.replace(result.stats, counts=counts))
    monkeypatch.setattr(planning, "plan", lambda *args, **kwargs: result)
    at = find_routes(at, "NCCO")
    assert not at.exception
    assert next(m for m in at.metric if m.label == "Answers used").value == shown


def test_the_stock_line_counts_the_entries_it_left_out_before_any_search(tmp_path, monkeypatch):
    """A stock file with lines RDKit cannot read was named 'your file shelf.smi (1 molecule)' until a search had run:
    a chemist checking the file before a long search saw nothing of the entries left out."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    at = upload_stock(at, "shelf.smi", f"NO {tmp_path.name}\nC1CC\nxyz\n".encode()).run()
    assert stock_line(at) == "**Stock:** your file shelf.smi (1 molecule; 2 unreadable entries left out)."
    # and which: the count alone sent a chemist through a catalogue to find them
    assert ("The first entry left out: RDKit cannot parse 'C1CC' as a molecule: ring bond 1 opened at position 2 is "
            "never closed.") in shown_text(at)


def test_the_downloads_give_each_routes_probability_as_the_page_titles_it():
    """The page titles each route with its probability (Route 1: 1 step, probability 50.0%); the JSON, CSV and Excel
    gave its log alone (route_score -0.6931), which no chemist reads as 50%."""
    from test_planning import stereo_plan_result

    result = stereo_plan_result()
    assert [route["probability"] for route in planning.routes_json(result)["routes"]] == [0.5, 0.3]
    column = planning.ROUTE_COLUMNS.index("route_probability")
    assert [row[column] for row in planning.route_rows(result)] == [0.5, 0.3]


def test_a_target_files_refusal_goes_when_the_file_is_removed(tmp_path, monkeypatch):
    """'two.sdf holds 2 molecules; ...' stayed on the page after the file's × had removed it, until the next search."""
    from test_planning import molfile

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    two = (molfile("OCCN") + "$$$$\n") * 2
    at.file_uploader(key="route_target_file").set_value(("two.sdf", two.encode(), "chemical/x-mdl-sdfile"))
    at.run()
    assert "two.sdf holds 2 molecules" in shown_text(at)
    at.file_uploader(key="route_target_file").set_value(None)
    at.run()
    assert not at.exception and not at.error


def test_the_searchs_figures_wrap_where_the_page_is_narrow(tmp_path, monkeypatch):
    """At 1,024 pixels with the sidebar open the five figures, in five columns, read 'Molecules …' and 'Answers u…';
    they sit side by side and wrap, as the Predict page's do."""
    from test_predict_page import metric_parent as metric_block

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "NCCO")
    assert not at.exception
    block = metric_block(at.main, "Molecules expanded")
    assert block is not None and all(metric_block(block, label) is block for label in
                                     ("Search time", "Answers used", "Search nodes", "Routes"))
    assert block.type != "column", "in columns a narrow page cuts the figures"
    flex = block.proto.flex_container
    assert flex.direction == flex.Direction.HORIZONTAL and flex.wrap


def test_a_search_stopped_part_way_keeps_the_routes_it_had_found(tmp_path, monkeypatch):
    """Stop (or a page visit, or a sidebar change) mid-search threw away every route the search had found, where
    Ctrl-C on the command line keeps them: after a four-minute search the page showed the routes before it, or none.
    The routes found before the stop are shown, said to be from a stopped search."""
    from streamlit.delta_generator import DeltaGenerator
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    real = DeltaGenerator.progress

    def stop_after_an_expansion(self, value, text=None, **kwargs):
        if text is not None and text.startswith("Searching…"):  # Stop pressed during the first expansion: from
            get_script_run_ctx().script_requests.request_stop()  # here each call of Streamlit's raises, a session
        return real(self, value, text, **kwargs)  # state write too

    with monkeypatch.context() as patch:
        patch.setattr(DeltaGenerator, "progress", stop_after_an_expansion)
        at = find_routes(at, "NCCO")  # the copy model solves it in its first expansion
    # The stopped run draws nothing more: its progress bar stands frozen, and this note beside it says what happened
    assert STOP_NOTE in [caption.value for caption in at.caption]
    at = at.run()  # the next thing the user does
    assert STOP_NOTE not in [caption.value for caption in at.caption]
    assert not at.exception and not at.error
    assert at.expander and at.expander[0].label.startswith("Route 1")
    result = at.session_state["routes"].result
    assert result.target == "NCCO" and result.stats.stopped_by
    assert "found before the search was stopped" in shown_text(at)
    assert "was stopped before it ended" not in shown_text(at)  # it made routes, which that message denied


def test_a_search_stopped_while_the_stock_is_read_is_marked_ended_for_its_watcher(tmp_path, monkeypatch):
    """Stop while a first search read the stock (or loaded a model) left "Reading the stock…" on the page, and nothing
    said the search had ended until the next click: the search's watcher (routes.watch_search), which draws the page
    again once the search's Unfinished has ended, was drawn with the progress bar, after those seconds, and the
    Unfinished was marked ended only where the search itself stopped."""
    import streamlit as st
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    from views.routes import UNFINISHED

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    real = planning.load_stock

    def stop_while_reading(*args, **kwargs):
        get_script_run_ctx().script_requests.request_stop()  # Stop pressed: the next call of Streamlit's raises
        return real(*args, **kwargs)

    st.cache_resource.clear()  # the default stock is read afresh, as by a server's first search
    with monkeypatch.context() as patch:
        patch.setattr(planning, "load_stock", stop_while_reading)
        at = find_routes(at, "NCCO")
    unfinished = at.session_state[UNFINISHED]
    assert unfinished.target == "NCCO" and unfinished.ended and unfinished.found is None
    at = at.run()  # what the watcher's rerun draws
    assert not at.exception and "The search for NCCO was stopped before it ended" in shown_text(at)


def test_the_round_trip_count_says_plainly_that_no_step_was_there_to_check():
    """A search that kept no step (every answer lacked atoms of its product) said 'round trip ✓ for 0 of the 0
    usable steps'."""
    from molspec_core.planning import ExpansionCounts
    from views import routes

    assert routes.round_trip_count(ExpansionCounts(kept=12, round_trips=7), "forward") == (
        " · round trip ✓ for 7 of the 12 usable steps")
    assert routes.round_trip_count(ExpansionCounts(kept=1, round_trips=1), "forward") == (
        " · round trip ✓ for 1 of the 1 usable step")
    assert routes.round_trip_count(ExpansionCounts(answers=30), "forward") == (
        " · no usable step to check round trip")
    assert routes.round_trip_count(ExpansionCounts(kept=3), None) == ""  # no forward model: nothing checked


def test_the_page_names_the_models_folder_it_reads_where_a_model_is_missing(tmp_path, monkeypatch):
    """It said "models/retro/ is missing" and "(models/forward/)" wherever MOLSPEC_MODELS_DIR pointed."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")  # no forward model: no round-trip check
    at = routes_page(tmp_path / "models", monkeypatch)
    assert not at.exception
    assert f"no forward model is installed ({tmp_path / 'models' / 'forward'} is missing)" in shown_text(at)
    shutil.move(tmp_path / "models" / "retro", tmp_path / "models" / "forward")  # a forward model alone
    at = routes_page(tmp_path / "models", monkeypatch)
    assert not at.exception
    assert [w.value.replace("\\", "") for w in at.main.warning] == [
        f"No retrosynthesis model is installed ({tmp_path / 'models' / 'retro'} is missing). Choose the forward task, "
        "or add the model folder."]


def test_the_compounds_to_procure_say_how_many_times_the_route_uses_each(tmp_path, monkeypatch):
    """A route whose one step takes two anisic acids read 'Compounds to procure: COc1ccc(C(=O)O)cc1', as if one made
    the anhydride."""
    from test_planning import ANISIC_ACID, ANISOYL_CHLORIDE, anhydride_plan_result

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    monkeypatch.setattr(planning, "plan", lambda *args, **kwargs: anhydride_plan_result())
    at = find_routes(at, "NCCO")
    assert not at.exception
    procure = [next(m.value for m in e.markdown if "Compounds to procure" in m.value).replace("\\", "")
               for e in at.expander]
    assert procure == [f"**Compounds to procure:** {ANISOYL_CHLORIDE}, {ANISIC_ACID}",
                       f"**Compounds to procure:** {ANISIC_ACID} (used twice)"]


def test_a_stopped_searchs_time_reads_as_its_search_time_does(tmp_path, monkeypatch):
    """Left 18.6 s into its 30 s, the search's routes read 'found before the search was stopped, 19 s into its 30 s'
    above 'Search time 18.7 s' (which adds the reading of its routes): the part longer than the whole."""
    import dataclasses

    from test_planning import stereo_plan_result

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    result = stereo_plan_result()
    stats = dataclasses.replace(result.stats, time_s=18.7, search_s=18.6, time_limit_s=30.0, stopped_by="SearchStopped")
    monkeypatch.setattr(planning, "plan", lambda *args, **kwargs: dataclasses.replace(result, stats=stats))
    at = find_routes(at, "NCCO")
    assert not at.exception
    assert "found before the search was stopped, 18.6 s into its 30 s" in at.success[0].value
    assert next(m for m in at.metric if m.label == "Search time").value == "18.7 s"



def test_routes_page_offers_no_larger_stock_where_no_answer_for_the_target_was_usable(tmp_path, monkeypatch):
    """A 400-carbon chain, every answer shorter than the chain and skipped for lacking its atoms, was told that the
    search ran out of molecules 'within the step limit' and that 'A larger stock might help', beside Answers used 0%."""
    from molspec_core.service import Predictor
    from test_planning import shortened_predict

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    monkeypatch.setattr(Predictor, "predict", shortened_predict("CCCCO.CCBr"))
    at.text_input(key="route_target").input("C" * 12)
    at.slider(key="route_time").set_value(30)  # the atom check stays on, as the page starts
    at = next(b for b in at.button if b.label == "Find routes").click().run()
    assert not at.exception
    said = [w.value.replace("\\", "") for w in at.main.warning if "No route" in w.value]
    assert len(said) == 1 and said[0].endswith("the model proposed no usable reactants for the target itself (all 3 "
                                               "of its answers lacked atoms of the target), so neither more time nor "
                                               "a larger stock would help.")
    assert "larger stock might help" not in shown_text(at) and "within the step limit" not in shown_text(at)
    used = next(m for m in at.metric if m.label == "Answers used")  # the Predict page flags such answers: not sane
    assert used.value == "0%" and "3 lacked atoms of their product" in used.proto.help and "sane" not in used.proto.help


def test_a_stop_pressed_as_the_search_reads_out_its_routes_keeps_them(tmp_path, monkeypatch):
    """Stop pressed after the search's last expansion, while its routes were read out of the search graph (the bar
    full, the page not yet showing them), lost every route: storing them in the session raised Streamlit's stop, and
    the page said the search 'was stopped before it ended ..., so it made no routes'. They are shown, as a search's
    that ended."""
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    real = planning.plan

    def stopped_as_it_ends(*args, **kwargs):
        result = real(*args, **kwargs)
        get_script_run_ctx().script_requests.request_stop()  # from here each call of Streamlit's raises
        return result

    with monkeypatch.context() as patch:
        patch.setattr(planning, "plan", stopped_as_it_ends)
        at = find_routes(at, "NCCO")
    at = at.run()  # what the search's watcher draws
    assert not at.exception and not at.error
    assert "was stopped before it ended" not in shown_text(at)
    assert at.expander and at.expander[0].label.startswith("Route 1")
    result = at.session_state["routes"].result
    assert result.target == "NCCO" and result.stats.stopped_by is None


def test_an_intermediate_two_branches_make_two_ways_is_badged_with_the_step_that_makes_it_there(tmp_path,
                                                                                                  monkeypatch):
    """Where two branches of a route made one intermediate two ways, each reactant's badge named the step listed last
    that makes that molecule: ethanol in the target's step, made from acetaldehyde in step 2, read 'made in step 4',
    the step making it from bromoethane and water for the other branch."""
    from test_planning import M_ANOTHER, SHARED_INTERMEDIATE, two_branch_route

    _, route = two_branch_route(M_ANOTHER)
    result = planning.PlanResult(route.target.smiles, (route,), planning.SearchStats("retro*", 1.0, 2.0, 1, 9),
                                 "retro", None, "table", 4)
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    monkeypatch.setattr(planning, "plan", lambda *args, **kwargs: result)
    at = find_routes(at, "NCCO")
    assert not at.exception
    steps = [c.value.replace("\\", "") for c in at.expander[0].caption if c.value.startswith("Step ")]
    assert [step.split("  \n")[1] for step in steps] == [
        f"{SHARED_INTERMEDIATE['T']} is made from CCO + {SHARED_INTERMEDIATE['P']}", "CCO is made from CC=O",
        f"{SHARED_INTERMEDIATE['P']} is made from CCO + {SHARED_INTERMEDIATE['Q']}", "CCO is made from CCBr + O",
        f"{SHARED_INTERMEDIATE['Q']} is made from C"]
    badges = [m.value for m in at.expander[0].markdown if "made in step" in m.value]
    assert [re.search(r"made in step \d", badge)[0] for badge in badges] == ["made in step 2", "made in step 3",
                                                                             "made in step 4", "made in step 5"]


def test_a_search_that_found_as_many_routes_as_it_keeps_says_it_may_have_found_more(tmp_path, monkeypatch):
    """Aspirin's 8-second search found over 200 routes, and the page said '10 routes to the stock found': it keeps the
    10 best (PlanResult.max_routes), and nothing said there could be more."""
    import dataclasses

    from test_planning import anhydride_plan_result

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = routes_page(tmp_path / "models", monkeypatch)
    for max_routes, said in ((2, True), (10, False)):
        result = dataclasses.replace(anhydride_plan_result(), max_routes=max_routes)  # 2 routes
        monkeypatch.setattr(planning, "plan", lambda *args, result=result, **kwargs: result)
        at = find_routes(at, "NCCO")
        assert not at.exception
        success = at.success[0].value
        assert success.startswith("2 routes to the stock found")
        assert ("These are the best 2, the most a search keeps: it may have found more." in success) is said
        assert next(m for m in at.metric if m.label == "Routes").help.startswith(f"The best routes the search found, "
                                                                                  f"{max_routes} at most")


def test_a_step_kept_though_its_reactants_lack_atoms_of_its_product_says_so(tmp_path, monkeypatch):
    """With *Skip steps whose reactants lack atoms of the product* off, ethanolamine 'made from NO' (hydroxylamine,
    two carbons short) was shown as any other step: nothing said which steps cannot make their product as written, as
    the Predict page flags such an answer."""
    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "NCCO")  # the toggle off: the copy model's NO
    assert not at.exception
    step = next(c.value for c in at.expander[0].caption if c.value.startswith("Step 1"))
    assert "lacks atoms ⚠" in step and at.expander[0].label.endswith(" · lacks atoms ⚠ in 1 step")
    warned = [w.value.replace("\\", "") for w in at.expander[0].warning]
    assert warned == ["This step's reactant set lacks atoms of the product (2 C): as written it cannot make the "
                      "product (kept: *Skip steps whose reactants lack atoms of the product* was off)."]
    tree = planning.routes_json(at.session_state["routes"].result)["routes"][0]["tree"]
    assert tree["reaction"]["lacks_atoms"] == {"C": 2}


def test_the_page_takes_the_shipped_models_not_a_copy_named_before_them(tmp_path, monkeypatch):
    """The page took the first retrosynthesis and forward models by name: a folder of one's own (a_small) beside the
    shipped retro and forward became the search's model and the round-trip check's without a word, where the
    sidebar's lists open on the shipped ones (common.default_model)."""
    models = models_with_forward(tmp_path)
    for task in ("retro", "forward"):
        shutil.copytree(models / task, models / f"a_small_{task}")
    at = routes_page(models, monkeypatch)
    caption = shown_text(at)
    assert "the retrosynthesis model retro:" in caption and "with the forward model forward:" in caption
    assert "a_small" not in caption


def test_a_route_whose_steps_fail_the_round_trip_says_so_in_its_title(tmp_path, monkeypatch):
    """A step the forward model does not give back was marked ✗ in its own small caption alone, and every route but
    the first opens folded: the title counts such steps, as it counts those lacking atoms."""
    at = find_routes(routes_page(models_with_forward(tmp_path), monkeypatch), "NCCO")  # the copy model: NO gives NO
    assert not at.exception
    step = next(c.value for c in at.expander[0].caption if c.value.startswith("Step 1"))
    assert "round trip ✗" in step and at.expander[0].label.endswith(" · round trip ✗ in 1 step")


@pytest.mark.parametrize("probability, shown", [(0.5, "50.0%"), (0.001, "0.1%"), (0.00045, "0.045%"),
                                                (1.23e-5, "0.0012%"), (9.9e-7, "<0.0001%")])
def test_a_route_probability_reads_as_a_percentage_however_small(probability, shown):
    """A route list read "probability 0.1%" beside "probability 4.5e-04": below 0.1% the page wrote scientific
    notation (common.format_probability). Routes and steps read in percent, two significant figures below 0.1%."""
    import math

    from views.routes import route_probability

    assert route_probability(math.log(probability)) == shown
