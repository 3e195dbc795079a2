"""The app's side of the method table: the sidebar offers each method the settings it reads, and
the copied-tokens view says where the tokens came from. Driven with AppTest on the copy model,
installed as `forward` with itself as its draft model (as both shipped models have a draft/)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from test_app import FIXTURES, app, assert_clean, predict, texts

from molspec_core.methods import METHODS, TASK_DEFAULTS


@pytest.fixture()
def draft_models(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "copy_model", tmp_path / "models" / "forward")
    shutil.copytree(FIXTURES / "copy_model", tmp_path / "models" / "forward" / "draft")
    return tmp_path / "models"


def sliders(at) -> set[str]:
    return {s.key for s in at.sidebar.slider}


def test_every_method_in_the_sidebar_predicts_with_only_its_knobs(draft_models, monkeypatch):
    at = app(draft_models, monkeypatch).run()
    assert at.selectbox(key="method").options == [row.label for row in METHODS.values()]
    for name, row in METHODS.items():
        at.selectbox(key="method").set_value(name).run()
        shown = sliders(at) | {n.key for n in at.sidebar.number_input}  # the method's knobs: the sidebar's
        expected = {k for k in row.knobs if k not in ("n_best", "draft_len", "n_drafts")}
        expected |= {("n_samples" if row.family == "sampling" else "n_best")} if row.many else set()
        assert shown == expected, name
        predict(at, "Oc1ccncc1Cl")
        assert_clean(at)
        assert at.session_state["shown"].result.method == name


def test_relaxed_gets_no_sampling_sliders(draft_models, monkeypatch):
    """relaxed was offered Samples (default 5), Temperature, Top-k and Seed, which it ignored, and
    decoded the same answer five times."""
    at = app(draft_models, monkeypatch).run()
    at.selectbox(key="method").set_value("relaxed").run()
    assert sliders(at) == {"beta", "tau"}
    predict(at, "Oc1ccncc1Cl")
    once = at.session_state["shown"].result
    assert len(once.predictions) == 1
    assert once.stats.model_calls <= len(once.predictions[0].tokens) + 1  # one decode, not five


@pytest.mark.parametrize("name, shape", [("sbs", "1 draft of 4 tokens"), ("sbs-exact", "1 draft of 1 token")])
def test_speculative_beam_shows_its_own_default_drafts(draft_models, monkeypatch, name, shape):
    """The sidebar got no default for sbs and sbs-exact (resolve raised KeyError): no caption, and
    the hand-set slider started at 16 while they ran at 4 and 2 (on this CPU sbs-exact drafts 1)."""
    at = app(draft_models, monkeypatch).run()
    at.selectbox(key="method").set_value(name).run()
    assert f"Drafts: {shape} (pointer drafter)" in texts(at.caption)
    at.toggle(key="custom_drafts").set_value(True).run()
    assert at.slider(key=f"draft_len_{name}").value == METHODS[name].default_draft_len("cpu")


def test_copied_tokens_view_counts_what_was_copied(draft_models, monkeypatch):
    """mentored drafted with the draft model whenever the folder had one, and the view then said
    0 tokens were copied; spec-sample-draft was described as copying from the query."""
    at = app(draft_models, monkeypatch).run()
    at.selectbox(key="method").set_value("mentored").run()
    predict(at, "Oc1ccncc1Cl")
    top = at.session_state["shown"].result.predictions[0]
    copied = sum(source >= 0 for source in top.provenance)
    assert copied > 0
    assert f"{copied} of {len(top.tokens)} output tokens" in texts(at.caption)

    at.selectbox(key="method").set_value("spec-sample-draft").run()
    predict(at, "Oc1ccncc1Cl")
    result = at.session_state["shown"].result
    assert result.stats.draft_tokens_accepted > 0
    assert f"{result.stats.draft_tokens_accepted} draft-model tokens were accepted" in texts(at.info)
    assert "copied out of the query" not in texts(at.caption)


def test_the_sidebars_knobs_come_back_as_set_after_a_method_or_task_without_them(draft_models, monkeypatch):
    """Samples 2 and temperature 0.1 set for sampling came back as 5 and 0.5 after a look at greedy, which has no
    such sliders (Streamlit forgets a widget's state in a run that does not draw it), and the next prediction
    sampled with the defaults; a round-trip check turned off came back on after a visit to the forward task."""
    import json

    retro = draft_models / "retro"  # the copy model as a retrosynthesis model too: the round-trip check shows
    shutil.copytree(draft_models / "forward", retro)
    (retro / "config.json").write_text(json.dumps({**json.loads((retro / "config.json").read_text()),
                                                   "task": "retro"}))
    at = app(draft_models, monkeypatch).run()
    at.selectbox(key="method").set_value("mentored").run()
    set_here = {"n_samples": 2, "temperature": 0.1, "top_k": 3, "delta": 0.3}
    for key, value in set_here.items():
        at.slider(key=key).set_value(value).run()
    at.number_input(key="seed").set_value(7).run()
    at.selectbox(key="method").set_value("greedy").run()
    at.selectbox(key="method").set_value("mentored").run()
    assert_clean(at)
    assert {key: at.slider(key=key).value for key in set_here} == set_here
    assert at.number_input(key="seed").value == 7
    at.radio(key="task").set_value("retro").run()
    at.select_slider(key="round_trip_k").set_value(3).run()
    at.toggle(key="round_trip").set_value(False).run()
    at.radio(key="task").set_value("forward").run()
    at.radio(key="task").set_value("retro").run()
    assert_clean(at)
    assert at.toggle(key="round_trip").value is False
    at.toggle(key="round_trip").set_value(True).run()
    assert at.select_slider(key="round_trip_k").value == 3


def test_drafts_set_by_hand_are_each_methods_own_and_come_back_after_a_method_without_them(draft_models, monkeypatch):
    """Drafts set by hand for lookup drafts (4 tokens, 1 draft) were the sliders' values under paper drafts too: it
    ran 1 draft of 4 tokens, not its 25 of 10, without a word; and after a look at beam search the hand-set drafts
    were off again (Streamlit forgets the state of a widget a run does not draw)."""
    at = app(draft_models, monkeypatch).run()
    at.selectbox(key="method").set_value("spec-lookup").run()
    at.toggle(key="custom_drafts").set_value(True).run()
    at.slider(key="draft_len_spec-lookup").set_value(4).run()
    at.selectbox(key="method").set_value("spec-paper").run()
    paper = METHODS["spec-paper"]
    assert at.slider(key="draft_len_spec-paper").value == paper.default_draft_len("cpu")
    assert at.slider(key="n_drafts_spec-paper").value == paper.n_drafts > 1
    at.selectbox(key="method").set_value("beam").run()
    at.selectbox(key="method").set_value("spec-lookup").run()
    assert_clean(at)
    assert at.toggle(key="custom_drafts").value and at.slider(key="draft_len_spec-lookup").value == 4
    predict(at, "Oc1ccncc1Cl")
    assert at.session_state["shown"].settings.draft_len == 4


def test_the_model_and_writings_chosen_for_a_task_come_back_after_the_other_task(draft_models, monkeypatch):
    """The second forward model chosen, or its writings turned off, came back as the first model and on after a
    visit to the retrosynthesis task (Streamlit forgets an undrawn widget's state): the next query was decoded by
    another model. The Routes page reads the retrosynthesis writings under the forward task, and read them on."""
    import json

    from views.common import writings_key

    for name, task in (("forward", "forward"), ("forward_b", "forward"), ("retro", "retro")):
        folder = draft_models / name
        if not folder.exists():
            shutil.copytree(draft_models / "forward", folder)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "task": task, "data_stats": {"augment": 20}}))
    at = app(draft_models, monkeypatch).run()
    at.sidebar.selectbox(key="model_forward").select("forward_b").run()
    at.toggle(key="augment_forward").set_value(False).run()
    at.radio(key="task").set_value("retro").run()
    at.toggle(key="augment_retro").set_value(False).run()
    at.radio(key="task").set_value("forward").run()
    assert_clean(at)
    assert at.sidebar.selectbox(key="model_forward").value == "forward_b"
    assert at.toggle(key="augment_forward").value is False
    assert at.session_state[writings_key("retro")] is False  # what the Routes page reads under the forward task
    predict(at, "Oc1ccncc1Cl")
    shown = at.session_state["shown"].settings
    assert (shown.model, shown.augment) == ("forward_b", 1)


def test_a_model_without_a_draft_model_says_its_method_changed(draft_models, monkeypatch):
    """Speculative sampling with a draft model, then a model with no draft/ chosen: the method became the list's
    first, Speculative, auto drafts (greedy's answer, not samples), and nothing said why. It is the task's own
    method (methods.TASK_DEFAULTS), and the sidebar says the chosen one needs a draft model."""
    shutil.copytree(FIXTURES / "copy_model", draft_models / "forward_b")
    config = draft_models / "forward_b" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "task": "forward"}))
    at = app(draft_models, monkeypatch).run()
    at.selectbox(key="method").set_value("spec-sample-draft").run()
    at.sidebar.selectbox(key="model_forward").select("forward_b").run()
    assert_clean(at)
    assert at.selectbox(key="method").value == TASK_DEFAULTS["forward"][0]
    assert ("The model forward_b has no draft model, so Speculative sampling, draft model is not offered with it: the "
            "method is now Beam search.") in texts(at.sidebar.caption)
    predict(at, "Oc1ccncc1Cl")
    assert "has no draft model" not in texts(at.sidebar.caption)  # said once, where it changed
