"""The Models page after the accessibility and clarity QA pass (A8-A10, A12, B11): the query limit the app enforces,
the cards' facts checked against the bench files, a card readable without its own scroll box, the reliability
charts' points as text, every calibration fit's errors in view, and the draft models in the facts."""
from __future__ import annotations

import itertools
import json
import re

import pytest

import test_app
from test_app import FORWARD_MODEL, ROOT, app, assert_clean, needs_forward, texts

copy_models = test_app.copy_models  # the fixture: a models folder whose `forward` model is the copy model


def models_page(models=None, monkeypatch=None, card: str | bytes | None = None):
    """The app opened on the Models page (the shipped models where `models` is None), clean, after the forward
    model's MODEL_CARD.md is written as `card` where one is given (bytes as they are: another encoding, a
    byte-order mark)."""
    if isinstance(card, str):
        card = card.encode()
    if card is not None:
        (models / "forward" / "MODEL_CARD.md").write_bytes(card)
    at = app(models, monkeypatch).run()
    at.switch_page("views/models.py").run()
    assert_clean(at)
    return at


# ---- A8: the longest query is the app's limit, not the position table's size -----------------------------------


def test_the_longest_query_is_the_services_limit_or_the_position_table_where_that_is_smaller(tmp_path):
    from molspec_core.service import MAX_QUERY_TOKENS
    from views.models import facts

    shown = dict(facts(tmp_path, {"model": {"max_positions": 1024}}).values.tolist())
    assert shown["Longest query"] == f"{MAX_QUERY_TOKENS} tokens; longer queries are refused"
    assert shown["Position table (model size)"] == "1024 positions" and "Longest sequence" not in shown
    small = dict(facts(tmp_path, {"model": {"max_positions": 256}}).values.tolist())
    assert small["Longest query"].startswith("256 tokens")


@pytest.mark.parametrize("task", ["forward", "retro"])
def test_the_page_and_the_card_give_a_shipped_model_the_same_query_limit(task):
    from views.models import facts

    folder = ROOT / "models" / task
    card = folder / "MODEL_CARD.md"
    stated = re.search(r"or longer than (\d+) tokens", card.read_text()) if card.is_file() else None
    if stated is None:
        pytest.skip(f"no shipped {task} model whose card states its limit")
    shown = dict(facts(folder, json.loads((folder / "config.json").read_text())).values.tolist())
    assert shown["Longest query"].startswith(f"{stated[1]} tokens")


# ---- A9: the cards name the machine the draft-length files record ----------------------------------------------


@pytest.mark.parametrize("task, pattern", [("forward", "forward_cpu_draft80_mit200_len*.json"),
                                           ("retro", "retro_cpu_draftlen*_50k200.json")])
def test_the_cards_name_the_machine_their_draft_length_timings_ran_on(task, pattern):
    files = sorted((ROOT / "bench").glob(pattern))
    card = ROOT / "models" / task / "MODEL_CARD.md"
    if not files or not card.is_file():
        pytest.skip(f"no {pattern} or no {task} card")
    machines = {json.loads(path.read_text())["device_name"] for path in files}
    assert machines == {"Intel(R) Xeon(R) Processor with AVX-512, VNNI and AMX"}
    paragraph = next(p for p in card.read_text().split("\n\n") if "draft_compare.py" in p and "--draft-len L" in p)
    assert "an Intel Xeon with AVX-512, VNNI and AMX" in paragraph and "EPYC" not in paragraph


def test_the_forward_card_no_longer_says_the_page_opens_on_spec_auto():
    card = FORWARD_MODEL / "MODEL_CARD.md"
    if not card.is_file():
        pytest.skip("no forward card")
    assert "spec-auto among them, which the app's forward page opens on" not in card.read_text()


CHEMIST = "**For a chemist, in short**"
HISTORY = re.compile(r"\b(?:sessions?|runs?|blocks?|issue) \d|\.json|bench/|runs/", re.IGNORECASE)


@pytest.mark.parametrize("task, marks", [("forward", ("Sane structure", "Confidence")),
                                         ("retro", ("Sane structure", "Round trip ✓", "Confidence"))])
def test_a_shipped_cards_page_opens_on_plain_words_for_a_chemist_whose_figures_are_the_tables(task, marks):
    """A chemist new to the app found the card a development log ("run 40's weights, shipped before session 50",
    "issue 13's target", file paths) and could not tell how often the model is right on what chemistry. Each card
    opens, in its part the page shows whole, on a short section in plain words: no history, each figure one of the
    At-a-glance table's, and what each mark on an answer does and does not say."""
    from views.models import split_card

    card = ROOT / "models" / task / "MODEL_CARD.md"
    if not card.is_file():
        pytest.skip(f"no {task} card")
    summary, _ = split_card(card.read_text())
    assert CHEMIST in summary, "the card's opening has no section for a chemist"
    plain, table = summary[summary.index(CHEMIST):].split("## At a glance", 1)
    assert not HISTORY.search(plain), HISTORY.search(plain)
    assert "first answer" in plain and "patent" in plain and "USPTO" in plain
    assert all(f"*{mark}*" in plain for mark in marks)
    figures = re.findall(r"\d+(?:\.\d+)?%|\d{1,3}(?:,\d{3})+", plain)
    assert figures and [figure for figure in figures if figure not in table] == []


# ---- A10: the card's summary on the page, the rest folded away, one home for its text ---------------------------


def test_a_card_splits_after_its_summary_sections_and_not_at_a_heading_in_code():
    from views.models import split_card

    card = ("# Title\n\n## At a glance\n| a | b |\n```\n## not a heading\n```\n## Limitations\n- x\n"
            "## Data\nrows\n## Log\n")
    summary, rest = split_card(card)
    assert summary.endswith("## Limitations\n- x") and rest.startswith("## Data") and f"{summary}\n{rest}" == card[:-1]
    assert split_card("# Title\n\nshort") == ("# Title\n\nshort", "")


def test_comments_in_tilde_or_indented_fences_are_no_headings():
    """A card's shell comments inside a ~~~ fence, or a ``` fence indented (a list item's), were taken for headings:
    a "## not a heading" split the card there, drew a heading with an anchor, and was demoted; an image in such a
    block was escaped. CommonMark's fences: three or more backticks or tildes, indented up to 3 spaces, closed by as
    many of the same (a ``` inside a ~~~ block, or inside a ```` one, closes nothing)."""
    from views.models import card_parts, demoted, split_card, unloaded_images

    card = ("# Title\n## At a glance\n~~~bash\n# train it\n## not a heading\n```\n# nor this\n~~~\n"
            "1. Then:\n   ```\n# a comment\n   ```\n````md\n```\n## in a quad fence\n```\n````\n"
            "~~~\n![in a block](y)\n~~~\n## Data\nrows\n")
    summary, rest = split_card(card)
    assert rest == "## Data\nrows"
    assert [part for part in card_parts(card) if part[0]] == [(1, "Title"), (2, "At a glance"), (2, "Data")]
    moved = [line for line, shown in zip(card.split("\n"), demoted(card).split("\n")) if shown != line]
    assert moved == ["# Title", "## At a glance", "## Data"]
    assert "![in a block](y)" in unloaded_images(card)


def test_the_page_shows_a_cards_summary_and_folds_each_other_section_without_a_box_of_its_own(copy_models,
                                                                                                monkeypatch):
    card = ("# Copy model\n\n## At a glance\nCopies its input.\n\n## Limitations\n- none\n\n"
            "## Training log (`train`)\nrun 1\n\n## Data\nrows\n")
    at = models_page(copy_models, monkeypatch, card)
    summary = next(m.value for m in at.markdown if "Copies its input" in m.value)
    assert "Training log" not in summary
    headings = [m.value for m in at.markdown if m.value.startswith("<h")]
    assert '<h4 data-anchor="forward-limitations">Limitations</h4>' in headings
    assert '<h4 data-anchor="forward-training-log-train">Training log (<code>train</code>)</h4>' in headings
    assert [e.label for e in at.expander if e.label.startswith("Read")] == ["Read “Training log” (1 line)",
                                                                           "Read “Data” (1 line)"]
    assert not [e for e in at.get("vertical_block") if e.proto.height_config.pixel_height]  # no 520 px box


def test_a_folded_card_section_is_sent_to_the_browser_only_once_opened(copy_models, monkeypatch):
    """The cards' folded rest (300 KB of markdown, 70% of the page's 12,000 elements) was sent and laid out in the
    browser though nobody had opened it: the page took 10-15 s of the browser's time on a quiet machine, minutes
    on a busy one. Each section now opens on its own, and is sent when opened."""
    card = "# Copy model\n\n## At a glance\nCopies.\n\n## Training log\n### Run 1\nrun one\n\n## Data\nrows\n"
    at = models_page(copy_models, monkeypatch, card)
    assert not [m for m in at.markdown if "run one" in m.value or "rows" in m.value or "Run 1" in m.value]
    from views.models import section_key

    at.session_state[section_key("forward", "forward-training-log")] = True
    at.run()
    assert_clean(at)
    opened = next(e for e in at.expander if e.label.startswith("Read “Training log”"))
    assert [m.value for m in opened.markdown] == ['<h5 data-anchor="forward-run-1">Run 1</h5>', "run one"]
    assert not [m for m in at.markdown if "rows" in m.value]  # the other section is still folded


def test_the_two_cards_headings_have_anchors_of_their_own(copy_models, monkeypatch):
    """Streamlit makes a heading's id of its words alone: both cards' "At a glance", "Limitations", "Training" (...)
    shared one, so a link to the second card's landed on the first's. Each heading's anchor now starts with its
    model's name, a heading met twice in a card is numbered, and a heading's text is escaped (its code spans
    shown as code)."""
    import shutil

    shutil.copytree(copy_models / "forward", copy_models / "retro")
    card = ("# Copy model\n\n## At a glance\nCopies.\n```\n## not a heading\n```\n## Limitations\n- none\n\n"
            "## Training (`train --lr 1e-3`, <b>run</b> 1)\nrun 1\n\n## Training (`train --lr 1e-3`, <b>run</b> 1)\n")
    for model in ("forward", "retro"):
        (copy_models / model / "MODEL_CARD.md").write_text(card)
    at = models_page(copy_models, monkeypatch)
    headings = [m.value for m in at.markdown if m.value.startswith("<h")]
    anchors = [re.search(r'data-anchor="([^"]+)"', h).group(1) for h in headings]
    training = "training-train-lr-1e-3-b-run-b-1"
    assert anchors == [f"{model}-{anchor}" for model in ("forward", "retro") for anchor in
                       ("copy-model", "at-a-glance", "limitations", training, f"{training}-2")]
    assert headings[3] == (f'<h4 data-anchor="forward-{training}">Training (<code>train --lr 1e-3</code>, '
                           '&lt;b&gt;run&lt;/b&gt; 1)</h4>')
    assert any("## not a heading" in m.value for m in at.markdown)  # a heading in code stays in its block


# ---- A12 and B11: the reliability points as text, every fit's errors in view, the draft model in the facts -------


def test_the_reliability_charts_hover_and_table_read_the_same_rounded_figures():
    from molspec_core import calibration
    from views.models import reliability_chart, reliability_rows

    fit = calibration.load(FORWARD_MODEL, 1, "greedy") if FORWARD_MODEL.is_dir() else None
    if fit is None or not fit.reliability:
        pytest.skip("no shipped forward calibration")
    rows = reliability_rows(fit)
    assert list(rows.columns) == ["confidence (mean of the bin)", "share right", "answers"]
    assert all(re.fullmatch(r"(<|>)?\d+%", cell) for cell in rows.iloc[:, 0].tolist() + rows.iloc[:, 1].tolist())
    points = reliability_chart(fit).data[1]
    assert [list(row) for row in points.customdata] == rows.values.tolist()
    assert "%{customdata[0]}" in points.hovertemplate and "%{x" not in points.hovertemplate


@needs_forward
def test_every_calibration_fit_is_in_one_table_and_a_fit_worse_than_the_raw_probability_is_named():
    """The fourth tab, "Beam, 1 writing", hid behind the tab bar's scroll: the one fit whose calibrated error is worse
    than the model's own probability's (forward: 0.012 against 0.009)."""
    from molspec_core import calibration

    at = models_page()
    fits = [(kind, augment, fit) for kind in calibration.KINDS for augment in (1, 5)
            if (fit := calibration.load(FORWARD_MODEL, augment, kind))]
    table = next(t.value for t in at.table if "answers, writings" in t.value.columns)  # the forward model's
    assert len(table) == len(fits)
    worse = [f"{kind}, {augment} writing{'s' if augment > 1 else ''}: {fit.ece:.3f} against {fit.ece_raw:.3f}"
             for kind, augment, fit in fits if fit.ece > fit.ece_raw]
    shown = texts(at.markdown)
    for fit in worse:
        assert fit in shown
    assert ("Calibration does not always help" in shown) == bool(worse)
    assert any(e.label == "The chart's points as a table" for e in at.expander)  # the open tab's
    # counted as every count on the page, thousands apart: it read "fitted ... on 1333 queries"
    opened = next(fit for kind, augment, fit in fits if (kind, augment) == ("beam", 5))
    assert f"on {opened.fitted_on:,} queries, judged on {opened.judged_on:,} others" in shown


def test_a_fit_is_said_to_rest_on_the_queries_that_gave_answers_not_on_those_asked():
    """A fit's line gave n_fit and n_check, the queries asked, where since 0145a45 the file keeps how many of them
    gave answers to fit and judge it (refused ones, targets RDKit cannot read and no valid answer give none): 1,333
    queries read where 1,290 fitted it. Files from before the count say the queries asked."""
    import dataclasses

    from molspec_core.calibration import Calibration
    from views.models import fit_text

    cal = Calibration("f" * 64, "beam", 5, 1333, 667, (0.0,), (0.5,), 0.012, 0.009, ())
    said = fit_text(dataclasses.replace(cal, n_fit_answered=1290, n_check_answered=650), "For beam answers")
    assert "on 1,290 queries, judged on 650 others (of the 1,333 and 667 asked; the others gave no answer to count: " \
           "refused, a target RDKit cannot read, or no valid answer)" in said
    assert "on 1,333 queries, judged on 667 others: expected" in fit_text(cal, "For beam answers")
    assert "on 1,333 queries, judged on 667 others: expected" in fit_text(
        dataclasses.replace(cal, n_fit_answered=1333, n_check_answered=667), "For beam answers")


@needs_forward
def test_the_facts_describe_the_draft_model_the_draft_methods_use():
    from views.models import facts

    if not (FORWARD_MODEL / "draft" / "config.json").is_file():
        pytest.skip("no shipped forward draft model")
    config = json.loads((FORWARD_MODEL / "draft" / "config.json").read_text())["model"]
    shown = dict(facts(FORWARD_MODEL, {}).values.tolist())["Draft model (draft/)"]
    assert shown.startswith(f"{config['n_encoder_layers']} + {config['n_decoder_layers']} layers, width "
                            f"{config['d_model']}, ")
    assert "drafts for Speculative sampling, draft model" in shown


# ---- model folders that do not load, or whose files the page misread (session 85's audit) ----------------------


def broken_copies(models) -> dict[str, str]:
    """Copies of the copy model beside it, each broken one way, by name (after `forward`, which the sidebar loads),
    with the file its error names."""
    import shutil

    def copy(name):
        shutil.copytree(models / "forward", models / name)
        return models / name

    weights = copy("x_cut") / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])  # a copy interrupted: the page stopped on a traceback
    (copy("x_list") / "config.json").write_text("[1, 2]")  # a traceback too
    tensors = json.loads(weights.read_bytes()[8:8 + int.from_bytes(weights.read_bytes()[:8], "little")])
    index = {"weight_map": {name: "model-00001-of-00002.safetensors" for name in tensors if name != "__metadata__"}}
    (copy("x_index") / "model.safetensors.index.json").write_text(json.dumps(index))  # facts shown as if it loaded
    draft = copy("x_draft") / "draft"
    shutil.copytree(models / "forward", draft)
    vocab = json.loads((draft / "vocab.json").read_text())
    vocab["tokens"][4:6] = vocab["tokens"][5:3:-1]  # C and N swapped: the model loaded nowhere, the page said nothing
    (draft / "vocab.json").write_text(json.dumps(vocab))
    return {"x_cut": "x_cut/model.safetensors is cut short", "x_list": "x_list/config.json: expected an object",
            "x_index": "x_index/model-00001-of-00002.safetensors is missing",
            "x_draft": "x_draft/draft/vocab.json and"}


def test_a_model_folder_that_does_not_load_is_named_with_its_reason_and_the_others_still_show(copy_models,
                                                                                                monkeypatch):
    expected = broken_copies(copy_models)
    at = models_page(copy_models, monkeypatch)
    assert [h.value for h in at.header] == ["forward", *common_escaped(sorted(expected))]
    errors = [e.value.replace("\\", "") for e in at.error]
    assert len(errors) == len(expected)
    for name, error in zip(sorted(expected), errors):
        assert error.startswith("This model does not load, so the app cannot use it: ") and expected[name] in error
    assert len([t for t in at.table if "fact" in t.value.columns]) == 1  # the forward model's facts alone


def common_escaped(names: list[str]) -> list[str]:
    from views.common import md_escape

    return [md_escape(name) for name in names]


def test_the_facts_count_the_weights_the_model_is_read_from_and_nothing_beside_them(tmp_path):
    """A training run's last/ folder holds its optimizer moments beside the weights: the page counted them as
    parameters (Adam's two moments: three times the model) and as weight files."""
    from conftest import random_model
    from molspec_core import checkpoint
    from molspec_core.tokenizer import SPECIALS, Vocab
    from views.models import facts

    model = random_model(0, vocab_size=14)
    checkpoint.save(model, Vocab(list(SPECIALS) + [f"[X{i}]" for i in range(10)]), tmp_path, meta={"task": "forward"})
    weights = (tmp_path / "model.safetensors").stat().st_size
    checkpoint.save_tensors({name: 0 * tensor for name, tensor in model.state_dict().items()}, tmp_path,
                            stem="optimizer")
    shown = dict(facts(tmp_path, checkpoint.inspect_folder(tmp_path).config).values.tolist())
    n_parameters = sum(tensor.numel() for tensor in model.state_dict().values())
    assert shown["Parameters"] == f"{n_parameters / 1e6:.1f} M"
    assert shown["Weights"] == f"1 safetensors file, {weights / 1e6:.1f} MB"


def test_hand_edited_training_facts_of_the_wrong_type_are_left_out_not_a_traceback(tmp_path):
    from views.models import facts

    shown = dict(facts(tmp_path, {"task": "forward", "data_stats": {"train": "many"}, "averaged_from": 3})
                 .values.tolist())
    assert not [fact for fact in shown if fact.startswith(("Training pairs", "Weights averaged"))]


def test_a_model_folders_name_is_shown_as_typed_not_as_markdown(copy_models, monkeypatch):
    import shutil

    name = "x_[offer](https:evil.example)_*new*"
    shutil.copytree(copy_models / "forward", copy_models / name)
    at = models_page(copy_models, monkeypatch)
    assert [h.value for h in at.header] == ["forward", *common_escaped([name])]


def test_a_model_card_that_is_not_utf8_is_shown_with_a_note_not_a_traceback(copy_models, monkeypatch):
    at = models_page(copy_models, monkeypatch, "# Copy model\n\nTrained in Zürich.\n".encode("latin-1"))
    assert any("Trained in Z\ufffdrich" in m.value for m in at.markdown)
    assert any("MODEL_CARD.md is not UTF-8 text" in c.value for c in at.caption)


def test_a_config_with_a_byte_order_mark_lists_its_model_under_its_task_as_the_engine_reads_it(copy_models,
                                                                                                 monkeypatch):
    """Windows' Notepad saves UTF-8 with a byte-order mark: the engine read such a config.json, the sidebar's
    listing refused it, and a model of the task in a folder of another name was offered under no task."""
    import shutil

    from views import common

    shutil.copytree(copy_models / "forward", copy_models / "mine")
    config = json.loads((copy_models / "mine" / "config.json").read_text())
    (copy_models / "mine" / "config.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({**config, "task": "retro"})
                                                       .encode())
    monkeypatch.setenv("MOLSPEC_MODELS_DIR", str(copy_models))
    assert common.models_for_task("retro") == ["mine"]


@pytest.mark.parametrize("page", ["views/predict.py", "views/batch.py", "views/benchmark.py", "views/models.py"])
def test_choosing_a_model_that_does_not_load_says_why_in_the_sidebar_not_a_traceback(copy_models, monkeypatch, page):
    """Choosing a model folder that does not load (here its weights cut short) stopped every page on a traceback."""
    weights = test_app.FIXTURES / "copy_model" / "model.safetensors"
    import shutil

    shutil.copytree(copy_models / "forward", copy_models / "x_cut")
    config = json.loads((copy_models / "x_cut" / "config.json").read_text())
    (copy_models / "x_cut" / "config.json").write_text(json.dumps({**config, "task": "forward"}))
    (copy_models / "x_cut" / "model.safetensors").write_bytes(weights.read_bytes()[:-1000])
    at = app(copy_models, monkeypatch).run()
    at.switch_page(page).run()
    at.sidebar.selectbox(key="model_forward").select("x_cut").run()
    assert_clean(at)
    refusal = texts(at.sidebar.error)
    assert refusal.startswith("Model x_cut does not load: ") and "x_cut/model.safetensors is cut short" in refusal
    if page != "views/models.py":  # not "No forward model is installed (models/forward/ is missing)"
        assert texts(at.main.error).startswith("The model chosen in the sidebar does not load (the sidebar says why)")
        assert "is installed" not in texts(at.main.warning) + texts(at.main.error)
    at.sidebar.selectbox(key="model_forward").select("forward").run()  # the working model is chosen again
    assert_clean(at)
    assert not at.sidebar.error


def test_a_model_the_sidebar_never_offers_and_a_folder_without_a_config_are_said_so(copy_models, monkeypatch):
    """A model whose config.json names no task, in a folder of another name, was shown as any other and offered under
    no task in the sidebar; a model folder copied without its config.json was left off the page without a word."""
    import shutil

    shutil.copytree(copy_models / "forward", copy_models / "mine")
    config = json.loads((copy_models / "mine" / "config.json").read_text())
    (copy_models / "mine" / "config.json").write_text(json.dumps({"model": config["model"]}))
    (copy_models / "half").mkdir()
    shutil.copy(copy_models / "forward" / "model.safetensors", copy_models / "half")
    at = models_page(copy_models, monkeypatch)
    assert [h.value for h in at.header] == ["forward", "mine"]
    assert [w.value.startswith("The sidebar offers this model under no task") for w in at.warning] == [True]
    assert "Not models (no config.json, which every model folder holds), so not shown: half." in texts(at.caption)


def test_a_model_folder_mended_while_the_app_runs_computes_in_int8_again(copy_models, monkeypatch):
    """The int8 check read the folder's load error as the reason int8 cannot run, and kept it for the app's life:
    a model copied again after "cut short" computed in float32, the sidebar still saying it was cut short."""
    import shutil

    from molspec_core import checkpoint
    from views.common import int8_offered

    if not int8_offered():
        pytest.skip("no int8 arithmetic on this machine")
    folder = copy_models / "x_half"
    shutil.copytree(copy_models / "forward", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "task": "forward"}))
    checkpoint.save_tensors({k: v.half() for k, v in checkpoint.load_tensors(folder).items()}, folder)  # int8 reads
    whole = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(whole[:-1000])
    at = app(copy_models, monkeypatch).run()
    at.sidebar.selectbox(key="model_forward").select("x_half").run()
    assert "is cut short" in texts(at.sidebar.error)
    (folder / "model.safetensors").write_bytes(whole)  # copied again
    at.run()
    assert_clean(at)
    assert not at.sidebar.error and "cut short" not in texts(at.sidebar.caption)
    assert at.session_state["settings"].dtype == "int8"


def test_a_configs_text_in_the_facts_table_is_shown_as_typed_not_as_markdown(copy_models, monkeypatch):
    """st.table reads its cells as markdown: a config.json's task "[offer](https://evil.example)" showed as a link."""
    from views.common import md_escape

    task = "[offer](https://evil.example) **now**"
    config = json.loads((copy_models / "forward" / "config.json").read_text())
    (copy_models / "forward" / "config.json").write_text(json.dumps({**config, "task": task}))
    at = models_page(copy_models, monkeypatch)
    shown = dict(next(t.value for t in at.table if "fact" in t.value.columns).values.tolist())
    assert shown[md_escape("Task")] == md_escape(task)


def test_the_routes_page_says_a_model_that_does_not_load_does_not_load(tmp_path, monkeypatch):
    """The Routes page loads the first retrosynthesis model whatever the sidebar's task, and the forward model for
    its round-trip check: either one cut short stopped it on a traceback (the page, or the search)."""
    from test_planning import find_routes, routes_page
    from test_routes import models_with_forward

    def cut_short(folder):
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-1000])

    models = models_with_forward(tmp_path / "a")
    cut_short(models / "retro")
    at = routes_page(models, monkeypatch)
    assert_clean(at)
    refusal = texts(at.main.error)
    assert refusal.startswith("The retrosynthesis model retro does not load: ") and "is cut short" in refusal
    models = models_with_forward(tmp_path / "b")
    cut_short(models / "forward")
    at = find_routes(routes_page(models, monkeypatch), "NCCO")  # the round-trip check is on
    assert_clean(at)
    refusal = texts(at.main.error).replace("\\", "")
    # It said 'Cannot search:' and the file's fault alone: a model for an optional check, which the page's own toggle
    # leaves out, kept the chemist from any route
    assert refusal.startswith("Cannot search with the round-trip check: the forward model forward does not load: ")
    assert "forward/model.safetensors is cut short" in refusal
    assert refusal.endswith('Until it loads, turn off "Round-trip check of each step with the forward model" to '
                            'search without it.')
    at.toggle(key="route_round_trip").set_value(False)
    next(b for b in at.button if b.label == "Find routes").click()
    at = at.run()
    assert not texts(at.main.error) and at.expander and at.expander[0].label.startswith("Route 1")


def test_a_broken_retrosynthesis_model_is_refused_naming_the_ones_that_can_be_chosen(tmp_path, monkeypatch):
    """With the sidebar on the forward task the Routes page takes the retrosynthesis model the sidebar's list opens on
    (retro, not a_retro before it by name: common.default_model). One that does not load stopped the page, 'The
    retrosynthesis model retro does not load', and nothing said that another, which loads, could be chosen in the
    sidebar under the Retrosynthesis task."""
    import shutil

    from test_planning import routes_page
    from test_routes import models_with_forward

    models = models_with_forward(tmp_path)
    shutil.copytree(models / "retro", models / "a_retro")
    config = json.loads((models / "a_retro" / "config.json").read_text())
    (models / "a_retro" / "config.json").write_text(json.dumps({**config, "task": "retro"}))
    (models / "retro" / "model.safetensors").write_bytes(b"cut")
    at = routes_page(models, monkeypatch)
    refusal = texts(at.main.error).replace("\\", "")
    assert refusal.startswith("The retrosynthesis model retro does not load: ")
    assert refusal.endswith("To plan with another (a_retro), choose it in the sidebar under the Retrosynthesis task.")
    at.sidebar.radio(key="task").set_value("retro").run()
    at.sidebar.selectbox[0].set_value("a_retro").run()
    assert not texts(at.main.error) and at.button and "Find routes" in [b.label for b in at.button]


def test_a_reliability_bin_above_99_percent_reads_so_in_the_table_not_as_a_quote(copy_models, monkeypatch):
    """st.table reads its cells as markdown: a bin of mean confidence ">99%" showed as a quote reading "99%"."""
    from molspec_core import calibration
    from views.common import md_escape

    folder = copy_models / "forward"
    fit = calibration.Calibration(fingerprint=calibration.weights_fingerprint(folder), method="beam", n_best=5,
                                  n_fit=10, n_check=10, edges=(-9.0, -1.0), values=(0.2, 0.997), ece=0.01,
                                  ece_raw=0.02, reliability=((0.2, 0.25, 4), (0.997, 1.0, 6)))
    calibration.save(fit, folder)
    at = models_page(copy_models, monkeypatch)
    points = next(t.value for t in at.table if md_escape("share right") in t.value.columns)
    assert points.iloc[1, 0] == md_escape(">99%") and points.iloc[1, 1] == "100%"


def test_a_retrosynthesis_models_card_that_is_not_utf8_does_not_stop_the_routes_it_found(tmp_path, monkeypatch):
    """The Routes page reads the card for the words "stand-in": a Latin-1 card stopped the page on UnicodeDecodeError
    once a search had found its routes."""
    import shutil

    from test_planning import COPY_MODEL, find_routes, routes_page

    shutil.copytree(COPY_MODEL, tmp_path / "models" / "retro")
    (tmp_path / "models" / "retro" / "MODEL_CARD.md").write_bytes("# A stand-in, trained in Zürich\n".encode("latin-1"))
    at = find_routes(routes_page(tmp_path / "models", monkeypatch), "NCCO")
    assert_clean(at)
    assert at.expander and at.expander[0].label.startswith("Route 1")


def test_a_model_card_saved_with_a_byte_order_mark_keeps_its_title_a_heading(copy_models, monkeypatch):
    at = models_page(copy_models, monkeypatch, b"\xef\xbb\xbf# Copy model\n\nCopies its input.\n")
    assert '<h3 data-anchor="forward-copy-model">Copy model</h3>' in [m.value for m in at.markdown]


@needs_forward
def test_only_the_open_calibration_tab_is_drawn_and_another_tab_draws_when_chosen():
    """Each model's four calibration tabs drew their four plotly charts at once, three of them hidden: after the
    cards, the largest share of the browser's time on this page. The open tab alone is drawn."""
    at = models_page()
    tabs = [t.label for t in at.tabs]
    forward_tabs = tabs[:len(tabs) // 2] if len(tabs) > 4 else tabs
    assert len(forward_tabs) > 1
    assert len(at.get("plotly_chart")) == len(tabs) // len(forward_tabs)  # one chart for each model
    from views.models import fits_key

    at.session_state[fits_key("forward")] = forward_tabs[-1]
    at.run()
    assert_clean(at)
    drawn = [chart.key for chart in at.get("plotly_chart")]
    kind, augment = forward_tabs[-1].lower().split(", ")
    assert len(drawn) == len(tabs) // len(forward_tabs)
    assert f"reliability_forward_{kind}_{augment.split()[0]}" in drawn


@pytest.mark.parametrize("task", ["forward", "retro"])
def test_the_calibration_note_sends_readers_to_a_part_of_the_card_that_exists(task):
    """The note sent readers to the cards' "int8 arithmetic" sections; no card has one: it is a paragraph of the
    "Measured accuracy" section, which the note now names."""
    from views.models import CONFIDENCE_NOTE, card_parts

    card = ROOT / "models" / task / "MODEL_CARD.md"
    if not card.is_file():
        pytest.skip(f"no shipped {task} card")
    named = re.findall(r'"([^"]+)" section', CONFIDENCE_NOTE)
    parts = card_parts(card.read_text())
    sections = [text for level, text in parts if level == 2]
    assert named and all(name in sections for name in named), (named, sections)
    section = itertools.takewhile(lambda part: part[0] != 2, parts[parts.index((2, named[0])) + 1:])
    assert "int8 arithmetic" in "".join(text for _, text in section)


def test_a_cards_images_are_not_fetched_and_its_code_is_untouched(copy_models, monkeypatch):
    """A card's image (![plot](http://host/x.png), or by reference) made the browser fetch its address: a request
    beyond 127.0.0.1 from whatever card a model folder brings. It reads as written; code keeps its text."""
    card = ("# Copy model\n\n## At a glance\nSee ![plot](http://192.0.2.1/p.png) and ![ref][1], `![in code](x)`.\n\n"
            "```\n![in a block](y)\n```\n``a `![span](z)` b``\n\n[1]: http://192.0.2.1/r.png\n")
    at = models_page(copy_models, monkeypatch, card)
    shown = "\n".join(m.value for m in at.markdown)
    assert "See !\\[plot](http://192.0.2.1/p.png) and !\\[ref][1], `![in code](x)`." in shown
    assert "```\n![in a block](y)\n```\n``a `![span](z)` b``" in shown


def test_a_task_without_a_model_is_said_once_naming_the_folder_the_app_reads(copy_models, tmp_path, monkeypatch):
    """The page said "No retrosynthesis model is shipped yet ... until models/retro/ appears" wherever
    MOLSPEC_MODELS_DIR pointed, and with no model at all said it under its own "No models found" again."""
    at = models_page(copy_models, monkeypatch)
    notes = [note.value for note in at.main.info if "retrosynthesis" in note.value]
    assert notes == [common_escaped([f"No retrosynthesis model is installed ({copy_models / 'retro'} is missing). "
                                     "Choose the forward task, or add the model folder."])[0]]
    (tmp_path / "empty").mkdir()
    at = app(tmp_path / "empty", monkeypatch).run()
    at.switch_page("views/models.py").run()
    assert_clean(at)
    said = [element.value for element in [*at.main.warning, *at.main.info]]
    assert said == common_escaped([f"No model is installed: {tmp_path / 'empty'} holds no forward or retrosynthesis "
                                   "model folder. Put the model folders (forward, retro) there."])


def test_the_calibration_under_a_card_has_a_heading_of_its_own_not_the_cards_last(copy_models, monkeypatch):
    """The page's calibration (the folder's fit files: tables, tabs, charts) followed the card's last folded section,
    "Training", with no heading between: it read as part of the card's training log."""
    import shutil

    shutil.copytree(copy_models / "forward", copy_models / "retro")
    at = models_page(copy_models, monkeypatch, "# Copy model\n\n## At a glance\nCopies.\n\n## Training\nrun one\n")
    shown = [(type(e).__name__, getattr(e, "value", getattr(e, "label", None))) for e in at.main]
    after = [shown[i + 1] for i, element in enumerate(shown) if element == ("Expander", "Read “Training” (1 line)")]
    assert after == [("Subheader", "Confidence calibration")]  # the forward card's; the retro folder has no card
    anchors = [heading.proto.anchor for heading in at.subheader]
    assert anchors == ["forward--confidence-calibration", "retro--confidence-calibration"]  # one a model


def test_a_damaged_calibration_file_is_not_said_to_be_fitted_for_other_weights(copy_models, monkeypatch):
    """A calibration.json cut short (an interrupted copy) was told 'its calibration was fitted for other weights', a
    cause it did not have; a fit of other weights still reads so."""
    from molspec_core import calibration

    folder = copy_models / "forward"
    fit = calibration.Calibration(fingerprint=calibration.weights_fingerprint(folder), method="beam", n_best=5,
                                  n_fit=10, n_check=10, edges=(-9.0, -1.0), values=(0.2, 0.9), ece=0.01,
                                  ece_raw=0.02, reliability=((0.2, 0.25, 4), (0.9, 1.0, 6)))
    calibration.save(fit, folder)
    path = folder / calibration.file_name(1, "beam")
    text = path.read_text()
    path.write_text(text[:len(text) // 2])
    said = texts(models_page(copy_models, monkeypatch).caption)
    assert "fitted for other weights" not in said
    assert "calibration.json cannot be read as a calibration" in said
    path.write_text(text.replace(fit.fingerprint, "0" * len(fit.fingerprint)))
    assert "its calibration was fitted for other weights" in texts(models_page(copy_models, monkeypatch).caption)
    # saved with a byte-order mark (Windows Notepad): read as calibration.load reads it, not called unreadable
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert "its calibration was fitted for other weights" in texts(models_page(copy_models, monkeypatch).caption)
