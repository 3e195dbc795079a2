"""Predict: one query in (typed, drawn or an example), ranked answers out, with the tokens that
speculative decoding copied, a 3D view, and the speedup on this very query."""
from __future__ import annotations

import html
import itertools
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from streamlit_ketcher import st_ketcher

from molspec_core import depict
from molspec_core.chem import CXSMILES, canonical_or_none, stereo_notes, without_isotopes
from molspec_core.io import (NO_CHECKER, InputFileError, csv_bytes, output_header, result_rows, sd_bytes,
                             with_checker, with_model, workbook_bytes)
from molspec_core.known import (REACTION_COLUMN, KnownMarks, is_known, known_rank, recorded_column, recorded_reaction,
                                recorded_side)
from molspec_core.bench import Speedup, compare_pair
from molspec_core.methods import METHODS, SAMPLING_KNOBS, Method, same_answers_partner, speedup_pair
from molspec_core.roundtrip import check_round_trip
from molspec_core.service import (DEFAULT_TIME_LIMIT_S, STOPPED, TIMED_OUT, Prediction, Predictor, QueryResult,
                                  several_products_note)
from views import common
from views.common import Settings

log = logging.getLogger(__name__)
SPEEDUP_REPEATS = 3  # runs per method, interleaved; the median damps one-off hiccups


@dataclass(frozen=True)
class Shown:
    """The prediction on screen: the answer, the settings that made it, and the example it came
    from (whose known answer the page compares with)."""

    settings: Settings
    result: QueryResult
    example: str | None
    recorded: str | None = None  # the known answer of a recorded reaction pasted as the query (canonical)
    typed: str = ""  # the query as typed (a recorded reaction whole), which "Show again" puts back
    unchecked: str = ""  # why the round-trip check the settings ask for could not run on these answers
    # the time limit the answers were decoded under, which the partner's decode and the speedup's take too (at 60 s,
    # a query given longer on the page could not be decoded again there)
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    weights: str = ""  # the fingerprint of the weights that gave the answers (Predictor.weights), which exports name
    round_trip_weights: str = ""  # that of the forward model that checked them round trip, where the check ran

    @property
    def model(self) -> tuple[str, str]:
        """The model the exports name (Settings.model_named)."""
        return self.settings.model_named(self.weights)

    @property
    def checker(self) -> tuple[str, str, int] | None:
        """The round-trip checker the exports name, or None (Settings.checker_named)."""
        return self.settings.checker_named(self.round_trip_weights)


# ---- input ------------------------------------------------------------------------------------


TASK_NOUN = {"forward": "forward prediction", "retro": "retrosynthesis"}  # "the last ... is kept"
TIME_LIMIT_SECTION = "Time limit"  # an expander under the query's tabs
LONGER_HOW = f"raise it under *{TIME_LIMIT_SECTION}* below the query field and press Predict again"  # time_limit_hint
LONGER_AGAIN = "press Predict again to decode the query with it"  # time_limit_hint, where the setting is longer now
QUERY_WHAT = {"forward": "the reactants (and reagents)", "retro": "the product"}  # what a query holds
QUERY_PLACEHOLDER = {"forward": "e.g. CC(=O)Cl.NCc1ccccc1", "retro": "e.g. CC(=O)NCc1ccccc1"}
QUERY_HELP = {
    "forward": "The reactants, and the reagents if you know them, separated by '.' (or 'reactants>reagents>'). "
               "Reagents are optional: on USPTO-MIT test reactions the model names the product first as often "
               "without them (model card, \"Reagents are optional\"). An InChI or a CXSMILES is read too. A recorded "
               "reaction (reactants>reagents>product) is predicted from its reactants, and its product checked "
               "against the answers.",
    "retro": "The product to make: its SMILES (or its InChI or CXSMILES). A recorded reaction (reactants>>product) "
             "is predicted from its product, and its reactants checked against the answers.",
}


def use_example(example: common.Example, task: str) -> None:
    """Button callback: put the example in the SMILES field and predict it at once."""
    st.session_state["query_text"] = example.query(task)
    st.session_state["example"] = example.name
    st.session_state["pending"] = True
    if example.featured:
        st.session_state["more_examples"] = None  # the list shows no example it did not start


def use_listed_example(task: str) -> None:
    """The list's callback: predict the example chosen in it."""
    chosen = next((e for e in common.load_examples() if e.name == st.session_state.get("more_examples")), None)
    if chosen is not None:
        use_example(chosen, task)
    # The list starts a prediction, it holds none: left on its choice, choosing that reaction again (after another
    # query, or back from the other task) changed nothing, so nothing was predicted and nothing said. The query's
    # line names the example ("example: ..."), and the check against its known answer follows.
    st.session_state["more_examples"] = None


# A refused query's one-click retry (retry_of): the button's label and help
RETRY_AS_IONS = ("Predict it with the reagent written as ions",
                 "The same molecules, the reagent written as ions, as the model's training data write it.")
RETRY_UNLABELLED = ("Predict it without its isotope labels",
                    "The query without its isotope labels, which the model reads: its answers cannot say where a "
                    "label goes.")


def retry_of(result: QueryResult, recorded: str | None = None, task: str = "forward") -> tuple[str, str, str] | None:
    """What the refusal of a query offers to predict instead, with one click: (label, help, query), or None. The same
    molecules written as the model reads them (QueryResult.suggestion), or the query without the isotope labels it
    cannot read (QueryResult.unlabelled: the refusal named that query, and only a paste predicted it). A recorded
    reaction's outcome (`recorded`, of a `task` query) goes with it, without its labels where the query loses its
    own: the retry predicted the query alone, and the check against the recorded outcome was lost."""
    if result.suggestion:
        label, help_text, query = (*RETRY_AS_IONS, result.suggestion)
    elif result.unlabelled:
        label, help_text, query = (*RETRY_UNLABELLED, result.unlabelled)
        recorded = recorded and (without_isotopes(recorded) or recorded)
    else:
        return None
    return label, help_text, reaction_text(query, recorded, task) if recorded else query


def use_retry() -> None:
    """Button callback: predict the query the refusal offers instead (retry_of)."""
    st.session_state["query_text"] = st.session_state["query_retry"][2]
    st.session_state["example"] = None
    st.session_state["pending"] = True


def use_file(task: str) -> None:
    """The uploader's callback: predict the opened file's molecules, or say why they cannot be a query."""
    ss = st.session_state
    upload = ss.get("query_file")
    if upload is None:  # the file was removed
        return
    try:
        ss["query_text"] = common.query_from_file(upload.name, upload.getvalue(), task)
    except InputFileError as exc:
        ss["query_error"], ss["query_retry"] = str(exc), None
        return
    ss["example"], ss["pending"] = None, True


def example_buttons(task: str) -> None:
    st.caption("Textbook examples: one click predicts them and checks the answer against the known one.")
    examples = common.load_examples()
    with st.container(horizontal=True):
        for i, example in enumerate(examples):
            if example.featured:
                st.button(example.name, key=f"example_{i}", help=example.description,
                          on_click=use_example, args=(example, task))
    listed = {e.name: e.description for e in examples if not e.featured}
    st.selectbox("More textbook reactions", list(listed), index=None, key="more_examples",
                 format_func=lambda name: f"{name}: {listed[name]}", placeholder=more_examples_text(len(listed)),
                 on_change=use_listed_example, args=(task,))


def more_examples_text(n: int) -> str:
    """The list's placeholder: how many more examples, and of what, in what a phone's select box shows (Chromium drew
    53 characters of it at 390 pixels: "21 more: amide couplings, protections, reductions, cross-couplings …" was cut
    after "reductions, cr")."""
    return f"{n} more: couplings, protections, reductions …"


@dataclass(frozen=True)
class Editor:
    """The molecule editor on screen: its key (a new key mounts a new editor), the query it opened on, the query
    the page had when it last drew it (the one it opened on, or its own Apply's), and the last Apply it handed back
    (a mounted editor hands it back on every run)."""

    key: str
    opened: str
    query: str
    seen: str | None = None


EDITOR_BOX = "query_editor"
# Ketcher lays itself out at least 640 px wide: in a narrower page (a phone's 358 px) its atom list (H, C, N, O, Cl,
# ...) sat past the frame's right edge, cut off, and only carbon could be drawn; the editor keeps its width and the
# page scrolls it sideways
EDITOR_STYLE = (f"<style>.st-key-{EDITOR_BOX} {{ overflow-x: auto; }} "
                f".st-key-{EDITOR_BOX} iframe {{ min-width: 640px; }}</style>")


def draw_query(task: str) -> None:
    """The molecule editor, opened on the query; its Apply makes the drawing the query."""
    ss = st.session_state
    # what to draw, by task, as the file uploader's label says what to open (retrosynthesis asked for reactants)
    st.caption(f"Draw {QUERY_WHAT[task]}, then press **Apply**: the drawing becomes the query. A drawing not applied "
               "is lost when you leave this tab or the page: the editor opens again on the query. Where the page is "
               "narrower than the editor, scroll it sideways for its list of atoms and **Apply**.")
    query = ss.get("query_text", "")
    # The editor reads its molecule once, when it mounts: a new query from elsewhere (typed, an example, a file, the
    # other task) mounts a new one, and so does opening the tab (query_inputs forgets it when the tab closes); its
    # own Apply keeps it. Keyed by the query, it mounted again after each Apply, and the next Apply, sent by the
    # editor still on screen under the old key, was lost: a drawing edited and applied again was not predicted.
    editor: Editor | None = ss.get("editor")
    if editor is None or editor.query != query:
        mounts = ss["editor_mounts"] = ss.get("editor_mounts", 0) + 1
        editor = ss["editor"] = Editor(f"ketcher-{mounts}", query, query)
    with st.container(key=EDITOR_BOX):
        st.html(EDITOR_STYLE)
        drawn = st_ketcher(editor.opened, key=editor.key, height=460)
    if drawn is None or drawn == (editor.opened if editor.seen is None else editor.seen):
        return  # no Apply since the last one seen (or since it opened)
    ss["editor"] = editor = replace(editor, seen=drawn)
    if not drawn.strip():  # Apply on an empty canvas did nothing, without a word
        st.info("The editor is empty: draw a structure, then press **Apply**. The query stays as it was.",
                icon=":material/info:")
        return
    applied = drawn_query(drawn)
    if applied is None:
        st.error(f"RDKit cannot read the drawn structure: {common.md_escape(common.short(drawn, 80))}")
    else:
        ss["query_text"], ss["example"], ss["pending"] = applied, None, True
        ss["editor"] = replace(editor, query=applied)


def drawn_query(drawn: str) -> str | None:
    """The query a drawing gives: its molecules canonical, or a drawn reaction (an arrow: 'A>>B') as the editor
    writes it, which the SMILES field reads as a recorded reaction (it was refused: RDKit reads no reaction as a
    molecule), or a CXSMILES as the editor writes it for a drawn radical or stereo group ('... |^1:3|', '|&1:1|'),
    which the SMILES field reads as typed and whose unread stereo groups the page names (it was refused as
    unreadable); None where it is none of these."""
    text = drawn.strip()
    if ">" in text or CXSMILES.fullmatch(text):
        return text
    return canonical_or_none(text)


def query_inputs(task: str) -> None:
    """The SMILES form and the molecule editor. Only the form's Predict button, an example or the
    editor's Apply start inference, so typing never reruns the model."""
    ss = st.session_state
    # The field's text outlives a visit to another page (which forgets it): the editor below opens on it
    common.kept_in_form("query_text", "")
    # Lazy tabs: the editor mounts only when its tab is open (mounted in a hidden tab, it drew atom labels
    # misplaced or not at all, and it cost the browser its load whether or not anyone drew).
    typed, drawn_tab, opened = st.tabs(["Type SMILES", "Draw structure", "Open file"], key="query_tab",
                                       on_change="rerun")
    # The editor comes first in the code so that an Apply can still fill the SMILES field below.
    if drawn_tab.open:
        with drawn_tab:
            draw_query(task)
    else:  # the editor is gone: the tab opens a new one, which hands back only its own Apply
        ss.pop("editor", None)
    with opened:
        st.file_uploader(f"A molfile or SD file of {QUERY_WHAT[task]}", type=common.QUERY_FILE_TYPES, key="query_file",
                         on_change=use_file, args=(task,), max_upload_size=common.MAX_FILE_MB,
                         help="Its molecules become the query, stereo taken from the wedges; the SMILES field shows "
                              "what was read. " + common.QUERY_FILE_LIMITS)
    with typed:
        with st.form("query_form", border=False):
            # Kept again here: an Apply in the editor above may have written a new query since. No max_chars:
            # the browser drops a paste over it whole, without a word, and Predict then ran the text before it;
            # the engine refuses an over-long query itself, saying how long it is (service.MAX_QUERY_CHARS).
            st.text_input("SMILES", key=common.kept_in_form("query_text", ""), placeholder=QUERY_PLACEHOLDER[task],
                          help=QUERY_HELP[task])
            if st.form_submit_button("Predict", type="primary"):
                ss["pending"] = True
                chosen = next((e for e in common.load_examples() if e.name == ss.get("example")), None)
                if chosen is None or chosen.query(task) != ss["query_text"]:
                    ss["example"] = None


def run_query(cfg: Settings, predictor: Predictor, time_limit_s: float) -> None:
    ss = st.session_state
    text = ss.get("query_text", "")
    ss["query_retry"] = None
    try:
        query, recorded = recorded_reaction(text, cfg.task) or (text, None)
    except ValueError as exc:
        ss["query_error"] = f"Cannot predict this query: {exc}"
        return
    try:
        with st.spinner("Predicting…"):
            result = predictor.predict(query, **cfg.options(), time_limit_s=time_limit_s)
    except Exception as exc:  # noqa: BLE001  (bad input comes back in result.error; this is a bug)
        log.exception("prediction failed")
        ss["query_error"] = f"The model failed on this query ({type(exc).__name__}); please report it."
        return
    ss["query_retry"] = retry_of(result, recorded, cfg.task)
    if not (result.ok or result.stopped_with_answers):  # stopped with answers: shown, with its error beside them
        # a slow query is no refusal: "Cannot predict this query: stopped after the 1 s time limit" read as one
        lead = "No answer within the time limit" if result.timed_out else "Cannot predict this query"
        ss["query_error"], ss["query_error_limit"] = f"{lead}: {result.error}", time_limit_s
        return
    ss["query_error"] = None
    # The check's failure is no error of the query (it was one, and the page called these answers "the last
    # successful prediction", an earlier query's): it goes with the answers, which it leaves unchecked.
    checked, unchecked, checker_weights = round_trip(cfg, result)
    ss["shown"] = Shown(cfg, checked, ss.get("example"), recorded, text, unchecked, time_limit_s, predictor.weights,
                        checker_weights)
    remember(ss["shown"])


def round_trip(cfg: Settings, result: QueryResult) -> tuple[QueryResult, str, str]:
    """The answers checked with the forward model when the settings ask for it, "", and the forward model's weights'
    fingerprint; unchanged, why, and "" when the check cannot run, so the answers are never lost to it."""
    if cfg.round_trip_model is None:
        return result, "", ""
    try:
        forward = cfg.predictor(cfg.round_trip_model)
        with st.spinner("Checking each answer with the forward model…"):
            return check_round_trip(result, forward, cfg.round_trip_k), "", forward.weights
    except Exception as exc:  # noqa: BLE001  (the answers stand without the check)
        log.exception("round-trip check failed")
        return result, (f"The round-trip check could not run ({common.short(str(exc), 160)}): these answers are not "
                        "checked."), ""


# ---- results ----------------------------------------------------------------------------------


def show_query(shown: Shown) -> None:
    result = shown.result
    common.section("Query")
    left, right = st.columns([3, 2], vertical_alignment="center")
    svg = depict.smiles_svg(result.canonical_query, 560, 220)
    if svg:
        left.image(svg, alt=depict.structure_alt(result.canonical_query))
    with right:
        st.caption("Canonical query (what the model reads)")
        st.code(result.canonical_query, language=None, wrap_lines=True)
        line = f"{common.counted(len(result.source_tokens), 'token')} · {described(shown.settings)} · "
        if result.writings < shown.settings.augment:  # a small molecule has fewer (C has 1); the time limit may stop
            line += f"{common.counted(result.writings, 'writing')} read, of the {shown.settings.augment} asked for · "
        line += f"decoded in {decode_time(result)}"
        if shown.example:
            line += f" · example: {shown.example}"
        st.caption(common.md_escape(line))
    for note in stereo_notes(result.query):
        st.info(common.md_escape(note), icon=":material/info:")
    several = several_products_note(shown.settings.task, result.canonical_query)
    if several:  # opened from a file it is refused; typed it was not
        st.warning(common.md_escape(several), icon=":material/warning:")


def described(cfg: Settings) -> str:
    """How a prediction was decoded, its sampling knobs named ("Relaxed greedy, SpecDec++ (lossy), beta 2, tau 3"):
    Settings.describe names none, so the same query sampled at two temperatures read alike in the query's line, the
    session's list and its "Show again" choices."""
    knobs = [f"{knob.replace('_', '-')} {getattr(cfg.sampling, knob):g}" for knob in SAMPLING_KNOBS
             if cfg.sampling is not None and knob in METHODS[cfg.method].knobs]
    return ", ".join([cfg.describe(), *knobs])


def merged_samples_note(shown: Shown) -> str:
    """Why a sampling method lists fewer answers than the samples asked for ("" where it does not): an answer drawn
    again is listed once, and five samples that all drew the likeliest product gave one answer without a word."""
    cfg, result = shown.settings, shown.result
    answers = len(result.predictions)
    if METHODS[cfg.method].family != "sampling" or "n_best" not in METHODS[cfg.method].knobs or answers >= cfg.n_best:
        return ""
    distinct = f"{common.counted(answers, 'distinct answer')}: an answer drawn more than once is listed once."
    if result.stopped_with_answers:  # the limit stopped the draws: fewer samples than asked for may have been drawn
        return f"The samples drawn before the time limit gave {distinct}"
    writings = f" from each of the {result.writings} writings" if result.writings > 1 else ""
    return f"{common.counted(cfg.n_best, 'sample')}{writings} gave {distinct}"


def decode_time(result: QueryResult) -> str:
    """The decoding call's wall time (every writing read), as people read it."""
    seconds = result.stats.wall_time_s
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def known_answer(shown: Shown) -> str | None:
    """The answer known for the query: the one recorded with it, or its textbook example's."""
    if shown.recorded:
        return shown.recorded
    example = next((e for e in common.load_examples() if e.name == shown.example), None)
    return example.known_answer(shown.settings.task) if example else None


def show_known_check(shown: Shown, known: str) -> None:
    what = "product" if shown.settings.task == "forward" else "reactants"
    source = "recorded with the query" if shown.recorded else "of this textbook reaction"
    rank = known_rank(shown.result, known)
    if rank == 1:
        st.success(f"Rank 1 is the known {what} {source}.", icon=":material/check_circle:")
    elif rank is not None:
        st.warning(f"Rank 1 is not the known {what}; the known {what} {'is' if what == 'product' else 'are'} at "
                   f"rank {rank}.",
                   icon=":material/info:")
    else:
        st.warning(f"Rank 1 is not the known {what} ({common.md_escape(known)}), and no other rank has it.",
                   icon=":material/info:")


SANE_HELP = ("RDKit reads and sanitizes it, it is not the query itself, not a reactant unchanged or with only its "
             "stereo changed (forward), and does not contain the product, as it is or with only its stereo "
             "changed (retrosynthesis), every heavy atom of the product has a source "
             "among the reactants, no molecule in it has unpaired electrons or an O-O-O chain, and the model "
             "ended it (not cut off at the length limit). Sane is not the same as correct.")


# A badge's icon is read out by its name ("check icon, Sane structure"): names that read as words, none that reads as
# a control ("close icon, Invalid SMILES") or as code ("sync_problem icon, Round trip ✗", whose ✗ already says it).
def sanity_badge(prediction: Prediction) -> None:
    if prediction.sane:
        st.badge("Sane structure", color="green", icon=":material/check:", help=SANE_HELP)
    elif prediction.valid:
        st.badge("Check: " + "; ".join(prediction.concerns), color="orange", icon=":material/warning:",
                 help=SANE_HELP)
    else:
        st.badge("Invalid SMILES", color="red", icon=":material/error:",
                 help="RDKit cannot read or sanitize this SMILES.")


ROUND_TRIP_RULE = "IBM RXN keeps a retrosynthesis step when this round trip holds with at least 0.6."


def round_trip_badge(prediction: Prediction) -> None:
    probability = f"{prediction.forward_prob:.2g}" if prediction.forward_prob is not None else "?"
    help_text = (f"The forward model, given these reactants, gives the product a probability of {probability}. "
                 f"{ROUND_TRIP_RULE}")
    if prediction.round_trip:
        st.badge("Round trip ✓", color="green", icon=":material/sync:", help=help_text)
    else:
        st.badge("Round trip ✗", color="gray", icon=":material/sync:", help=help_text)


BADGES_LABEL = "What the marks on each answer mean"


def badges_key(round_trip_k: int | None, known: bool) -> None:
    """What the answers' badges say, where a keyboard and a screen reader reach it: a badge's help shows on hover
    alone (no Tab stop leads to it), so what 'Sane structure' checks, and that it is not 'correct', was mouse-only.
    `round_trip_k`: the forward model's top-k of the round-trip check, where it ran; `known`: a known answer is
    compared."""
    with st.expander(BADGES_LABEL):
        st.markdown(f"**Sane structure**: {SANE_HELP} **Check**: the answer fails one of these, named on its badge. "
                    "**Invalid SMILES**: RDKit cannot read or sanitize it.")
        if round_trip_k is not None:
            st.markdown(f"**Round trip ✓**: the forward model, given the answer's reactants, gives the product back "
                        f"within its top {round_trip_k}; its probability of the product is the answer's *Forward "
                        f"prob.* {ROUND_TRIP_RULE} **Round trip ✗**: it does not. A flagged answer is not checked.")
        if known:
            st.markdown("**Known answer**: this answer is the known one, recorded with the query or of the textbook "
                        "reaction.")


def round_trip_summary(answers: list[Prediction], k: int) -> str:
    """How many of the answers the round trip gives the product back from, of those it checked: a flagged answer is
    not checked (its round_trip is None), and benzene's 10 answers, 2 of them flagged, read "from 0 of 10 answers"
    as if all ten had failed it."""
    checked = [p for p in answers if p.round_trip is not None]
    passed = sum(bool(p.round_trip) for p in checked)
    unchecked = len(answers) - len(checked)
    flagged = (f" ({common.counted(unchecked, 'flagged answer')} not checked)" if unchecked else "")
    return (f"Round trip: the forward model gives the product back from {passed} of {len(checked)} answers "
            f"(within its top {k}){flagged}.")


ORDERS = ("As ranked", "Round trip ✓ first", "Only round trip ✓")
ORDER_HELP = ("A filter, not a better ranking: the forward model fails right answers too. Measured with the forward "
              "model of session 23, which got about 70% of products right first (the shipped one gets about 77%, "
              "its model card), it failed about one right answer in six, and on 500 USPTO-50K test products "
              "putting round trip ✓ first lowered top-1 from 51% to 48% (README, \"Round trip\").")


def ordered(predictions: tuple[Prediction, ...], order: str) -> list[Prediction]:
    """The answers in the order (or the subset) the round-trip control asks for; ranks stay as they are."""
    if order == ORDERS[1]:
        return sorted(predictions, key=lambda p: not p.round_trip)
    if order == ORDERS[2]:
        return [p for p in predictions if p.round_trip]
    return list(predictions)


CENTRE_LABEL = "Mark where bonds change"
CENTRE_HELP = ("Marks the atoms whose bonds change between the reactants and the product (a solid red ring) and, on "
               "reactants, the atoms that leave (a dashed grey ring); each picture's text alternative lists them. "
               "The model writes no atom map, so this is an estimate: each product atom "
               "is traced to the reactant with which it shares the largest substructure (RDKit's maximum common "
               "substructure); symmetric atoms can be traced to the wrong twin, and an answer whose atoms cannot "
               "mostly be traced is left unmarked.")


# What the marks are, beside them (the help above is behind a hover or a focus): forward answers are products, on
# which no atom leaves
CENTRE_KEY = {"forward": "Solid red ring: an atom whose bonds change (estimated).",
              "retro": "Solid red ring: an atom whose bonds change; dashed grey ring: an atom that leaves (estimated)."}


def centre_colours(task: str, query: str, prediction: Prediction) -> dict[int, str]:
    """The reaction centre's colours on an answer's picture: the product's atoms whose bonds change (forward),
    or the reactants' atoms that do and those that leave (retrosynthesis, whose query is the product)."""
    if not prediction.valid:
        return {}
    if task == "retro":
        return depict.centre_colours(prediction.smiles, query, on="reactants")
    return depict.centre_colours(query, prediction.smiles, on="product")


def why_unfinished(prediction: Prediction) -> str:
    """Why the model had not ended an answer: its concern that says so (service.STOPPED, or TIMED_OUT where the
    query's time limit stopped the search). The badge of an unreadable one said "Stopped at the length limit"
    under the warning that the time limit had stopped the search."""
    return TIMED_OUT if TIMED_OUT in prediction.concerns else STOPPED


def show_prediction(prediction: Prediction, known: bool, writings: int = 1,
                    colours: dict[int, str] | None = None, listed: int = 0) -> None:
    """One answer's card, headed "Rank k" with its badges: a heading, so that a screen reader moves from answer to
    answer (app.py's style draws it at the size of bold text, as it was), and above the picture, which followed the
    heading of the answer before; `known`: whether it is the known answer (known.is_known); `listed`: how many
    answers the list holds (an answer the model ranked below them took a set-aside one's place:
    QueryResult.set_aside)."""
    with st.container(border=True, key=f"answer_{prediction.rank}"):
        with st.container(horizontal=True, vertical_alignment="center"):
            st.subheader(f"Rank {prediction.rank}", anchor=False, width="content")
            sanity_badge(prediction)
            if prediction.round_trip is not None:
                round_trip_badge(prediction)
            if known:
                st.badge("Known answer", color="blue", icon=":material/verified:")
            if not (prediction.finished or prediction.valid):  # a valid one's concerns say it
                st.badge(why_unfinished(prediction).capitalize(), color="orange")
        picture, facts = st.columns([2, 3], vertical_alignment="center")
        svg = depict.smiles_svg(prediction.smiles, 440, 230, colours) if prediction.valid else None
        if svg:
            picture.image(svg, alt=depict.structure_alt(prediction.smiles, colours))
        else:
            picture.info("No structure: RDKit cannot read this SMILES.", icon=":material/block:")
        with facts:
            st.code(prediction.smiles, language=None, wrap_lines=True)
            if listed and prediction.model_rank > listed:
                st.caption(f"The model's rank: {prediction.model_rank}, below the list's {listed}: this sane "
                           "answer takes the place of a flagged or invalid one the model ranked higher.")
            elif prediction.rank != prediction.model_rank:
                st.caption(f"The model's rank: {prediction.model_rank} (flagged and invalid answers are listed "
                           "after sane ones or give their places to sane ones, and an answer the model wrote "
                           "twice is listed once).")
            if prediction.spellings > 1:
                st.caption(f"The model wrote these molecules in {prediction.spellings} atom orders; this is its "
                           "best-scored string, and its score is that string's.")
            if writings > 1:
                st.caption(f"Given for {prediction.views} of the {writings} writings of the query the model read.")
            # side by side, wrapping where the card is narrow (in columns a value was cut: -10.58 showed as "-1…")
            figures = st.container(horizontal=True, wrap=True, gap="medium")
            figures.metric("Score (log-prob)", f"{prediction.score:.2f}", width="content")
            pooled = f", pooled over the {writings} writings (a power mean)," if writings > 1 else ""
            if prediction.confidence is not None:
                figures.metric("Confidence", common.percent(prediction.confidence),
                               help="The share of right answers among validation answers with a score like this "
                                    "one (first answers counted apart from the ones below them where that fits "
                                    "better; the Models page shows how well it holds). The model's own probability "
                                    f"of this answer{pooled} is {common.format_probability(prediction.score)}. "
                                    "Each answer's confidence is judged on its own, so a list's can add up to "
                                    "more than 100%.", width="content")
            elif not prediction.sane:  # given none whatever the fits (service.with_confidence)
                figures.metric("Probability", common.format_probability(prediction.score),
                               help=f"The model's probability of this answer{pooled}. A flagged answer gets no "
                                    "confidence, calibrated or not: it cannot be right as written.",
                               width="content")
            elif writings > 1:
                figures.metric("Probability", common.format_probability(prediction.score),
                               help=f"The model's probability of this answer pooled over the {writings} writings "
                                    "of the query (a power mean, which favours answers many writings give); no "
                                    "calibration was fitted to this method's pooled answers, so no confidence is "
                                    "shown. It is not the chance that the answer is right.", width="content")
            else:
                figures.metric("Probability", common.format_probability(prediction.score),
                               help="The model's own probability of this answer; no calibration was fitted to "
                                    "this method's answers, so it is not the chance that the answer is right.",
                               width="content")
            figures.metric("Tokens", len(prediction.tokens), width="content")
            if prediction.forward_prob is not None:
                figures.metric("Forward prob.", common.format_probability(math.log(prediction.forward_prob))
                               if prediction.forward_prob > 0 else "0",
                               help="The forward model's probability of the query product from these reactants",
                               width="content")


def copied_tokens_text(method_name: str, result: QueryResult, prediction: Prediction) -> str:
    """What the copied-tokens view says of an answer `method_name` gave, from where its drafts come from
    (methods.py)."""
    method = METHODS[method_name]
    if method.drafts == "none":
        return (f"{method.label} writes every token itself. Choose a speculative method in the sidebar and "
                "predict again to see which tokens are copied from the query.")
    if method.drafts == "model":
        return (f"{method.label} drafts with a small draft model, not from the query: "
                f"{result.stats.draft_tokens_accepted} draft-model tokens were accepted over every sample "
                "drawn for this query, and no token is copied from the query, so all are shown as the model's.")
    n_copied = sum(source >= 0 for source in prediction.provenance)
    share = n_copied / max(len(prediction.tokens), 1)
    runs = common.counted(len(depict.copy_spans(prediction.provenance)), "numbered run")
    return (f"{n_copied} of {len(prediction.tokens)} output tokens ({common.percent(share)}) were accepted from "
            f"drafts copied out of the query, in {runs}; "
            "the model generated the rest. Hover a token for its position, or open the list under the tokens.")


def partner_answer(shown: Shown, prediction: Prediction, partner: str) -> tuple[QueryResult, Prediction] | None:
    """For a standard method: this answer as its speculative partner gave it (methods.same_answers_partner),
    whose provenance says which tokens were drafted from the query. The partner decodes the query when asked
    (a button: it costs a second decode), and its answers are kept for the session."""
    cfg = shown.settings
    label, partner_label = common.method_label(cfg.method), common.method_label(partner)
    st.info(f"{label} writes every token itself. {partner_label} returns the same answers, drafting parts of them "
            "from the query: decode the query with it to see which tokens of this answer it copies.",
            icon=":material/info:")
    decodes: dict = st.session_state.setdefault("partner_decodes", {})
    key = (cfg.model, cfg.dtype, shown.result.query, partner, cfg.n_best, cfg.draft_len, cfg.n_drafts, cfg.augment,
           shown.time_limit_s)
    if st.button(f"Decode with {partner_label}", key="decode_partner", icon=":material/content_copy:"):
        with st.spinner(f"Decoding with {partner_label}…"):
            decodes[key] = cfg.predictor().predict(shown.result.query, **cfg.options(partner),
                                                   time_limit_s=shown.time_limit_s)
    result: QueryResult | None = decodes.get(key)
    if result is None:
        return None
    if not result.ok:  # a time limit, say: the answers above stand
        st.warning(common.md_escape(f"{partner_label} could not decode this query: {result.error}"),
                   icon=":material/warning:")
        return None
    same = next((p for p in result.predictions if p.smiles == prediction.smiles), None)
    if same is None:  # the partner's answers are the method's (tests pin it); say so if they ever are not
        st.warning(f"{partner_label} did not return this answer; please report it.", icon=":material/warning:")
        return None
    st.caption(f"{partner_label} returned this answer too, at rank {same.rank}:")
    return result, same


COPIED_ATOMS_CAPTION = "Product atoms written by copied tokens, in the colour and with the number of their run"


def show_copied_tokens(shown: Shown, prediction: Prediction) -> None:
    method, result = shown.settings.method, shown.result
    partner = same_answers_partner(method)
    if partner is not None:
        found = partner_answer(shown, prediction, partner)
        if found is None:
            return
        method, (result, prediction) = partner, found
    text = copied_tokens_text(method, result, prediction)
    if METHODS[method].drafts == "query":
        st.caption(text)
    else:
        st.info(text, icon=":material/info:")
    if prediction.source_tokens:
        st.caption("This answer came first from another writing of the query, shown here: its copied tokens point "
                   "into that writing.")
    st.html(depict.provenance_html(prediction.source_tokens or result.source_tokens, prediction.tokens,
                                   prediction.provenance))
    copied = any(origin >= 0 for origin in prediction.provenance)  # a picture of nothing coloured said nothing
    svg = depict.provenance_svg(prediction.tokens, prediction.provenance, 520, 300) if prediction.valid and copied \
        else None
    if svg:
        st.image(svg, caption=COPIED_ATOMS_CAPTION, alt=depict.provenance_alt(prediction.tokens, prediction.provenance))


# ---- export -----------------------------------------------------------------------------------


def answer_table(result: QueryResult, known: tuple[str, str] | None = None, written: str = "",
                 model: tuple[str, str] | None = None,
                 checker: tuple[str, str, int] | None = None) -> tuple[list[str], list[list[object]]]:
    """The answers as the Batch page (and `molspec predict`) exports one query: its header and rows. With a known
    answer, (its column's name, its SMILES), that column leads and `matches_known` ends each row, as the Batch page
    exports a file of recorded reactions; `written`, a recorded reaction as typed (typed_reaction), follows it in
    REACTION_COLUMN, as there. `model` (Shown.model): the model that gave them, in io.MODEL_COLUMNS at the end, as
    the Batch page's files name it (the file said nothing of which model gave its answers); `checker` (Shown.checker):
    the forward model that checked them round trip, in io.CHECKER_COLUMNS after them, as there."""
    if not known:
        header, rows = output_header(()), list(result_rows(1, (), result))
    elif written:
        header, rows = known_marked((known[0], REACTION_COLUMN), result_rows(1, (known[1], written), result),
                                    result.task)
    else:
        header, rows = known_marked(known[:1], result_rows(1, known[1:], result), result.task)
    if model is not None:
        header, rows = with_model(header, rows, itertools.repeat(model))
    return (header, rows) if checker is None else with_checker(header, rows, itertools.repeat(checker))


def known_marked(names: tuple[str, ...], rows: Iterable[list[object]],
                 task: str) -> tuple[list[str], list[list[object]]]:
    """Rows whose first cells are `names`' (the known answer first), then output_header's, with `matches_known`
    added as a `task` model's answers are matched (known.known_answers)."""
    marks = KnownMarks(output_header(names), 0, names[0], task)
    return marks.header, list(marks.rows(rows))


def answer_exports(result: QueryResult, known: tuple[str, str] | None = None, written: str = "",
                   model: tuple[str, str] | None = None,
                   checker: tuple[str, str, int] | None = None) -> tuple[bytes, bytes]:
    """answer_table as CSV and SD file, row for row."""
    header, rows = answer_table(result, known, written, model, checker)
    return csv_bytes(header, rows), sd_bytes(header, rows)


def known_column(shown: Shown) -> tuple[str, str] | None:
    """The exports' known-answer column for this query, (name, SMILES): the recorded outcome of a recorded
    reaction (named as the Batch page names it), or the textbook example's answer; None without either."""
    known = known_answer(shown)
    if known is None:
        return None
    task = shown.settings.task
    return (recorded_column(task) if shown.recorded else f"textbook_{recorded_side(task)}"), known


def typed_reaction(shown: Shown) -> str:
    """A recorded reaction as the user typed it, for the exports ("" for any other query): the query column holds
    only what the model read, and the recorded outcome only canonical, so the typed text was lost (the Batch page
    keeps it in REACTION_COLUMN)."""
    return shown.typed if shown.recorded else ""


def show_exports(shown: Shown) -> None:
    known, written = known_column(shown), typed_reaction(shown)
    csv, sdf = answer_exports(shown.result, known, written, shown.model, shown.checker)
    with st.container(horizontal=True):
        st.download_button("Download answers (CSV)", csv, file_name="molspec-answers.csv", mime="text/csv",
                           icon=":material/download:")
        st.download_button("Download structures (SDF)", sdf, file_name="molspec-answers.sdf",
                           mime="chemical/x-mdl-sdfile", icon=":material/download:",
                           help="A record per answer, with 2D coordinates and the CSV's columns as fields "
                                "(an unreadable answer keeps its fields without atoms).")
        st.download_button("Download answers (Excel)",
                           lambda: workbook_bytes(*answer_table(shown.result, known, written, shown.model,
                                                                shown.checker)),
                           file_name="molspec-answers.xlsx", mime=common.WORKBOOK_MIME, icon=":material/download:",
                           on_click="ignore", help=common.WORKBOOK_HELP)


# ---- speedup ----------------------------------------------------------------------------------


def show_speedup(shown: Shown, predictor: Predictor, time_limit: float) -> None:
    """The tab that times this query's decoders side by side; `time_limit`: the page's setting now, which may be
    longer than the one the answers were decoded with (shown.time_limit_s), which the timing runs under."""
    cfg, query = shown.settings, shown.result.canonical_query
    baseline, speculative = speedup_pair(cfg.method)
    st.caption(f"Decodes this query with {common.method_label(baseline)} and "
               f"{common.method_label(speculative)}, {SPEEDUP_REPEATS} times each, interleaved; times are "
               "medians of the decoding call.")
    records: dict = st.session_state.setdefault("speedups", {})
    cut: dict = st.session_state.setdefault("speedups_cut", {})  # {key: the decoders the time limit stopped}
    # the sampling knobs too: relaxed greedy's tau or a temperature moves the calls and the time, and the time limit,
    # which may stop a decoder; the last item, what they read as (measured_with), is the session table's
    key = (cfg.model, cfg.dtype, query, baseline, speculative, cfg.n_best, cfg.draft_len, cfg.n_drafts, cfg.augment,
           cfg.sampling, shown.time_limit_s, measured_with(cfg, speculative))
    longer = common.longer_time_limit(shown.time_limit_s, f"{LONGER_HOW}, then measure",
                                      f"{LONGER_AGAIN}, then measure", time_limit)
    if shown.result.stopped_with_answers:  # timed under the limit that stopped it, a decoder is stopped again
        st.info(f"These answers are what the search had found when the {shown.time_limit_s:g} s time limit stopped "
                "it: timed under that limit, the decoders would be stopped too, and their times would be the limit's. "
                f"{longer}", icon=":material/timer_off:")
    elif st.button("Measure speedup", key="measure_speedup", icon=":material/speed:"):
        try:
            with st.spinner("Timing both decoders…"):
                limit = {"time_limit_s": shown.time_limit_s}
                record = compare_pair(predictor, query, {**cfg.options(baseline), **limit},
                                      {**cfg.options(speculative), **limit}, SPEEDUP_REPEATS)
        except Exception:  # noqa: BLE001
            log.exception("speedup measurement failed")
            st.error("The measurement failed; the prediction above is unaffected.")
        else:
            stopped = stopped_decoders(record)
            if stopped:  # no speedup: kept apart, out of the session's chart
                records.pop(key, None)
                cut[key] = stopped
            else:
                records[key] = record
                cut.pop(key, None)
    if key in cut:
        names, (was, its) = common.in_words(cut[key]), ("was", "its") if len(cut[key]) == 1 else ("were", "their")
        st.warning(f"{names} ran into the {shown.time_limit_s:g} s time limit on this query and {was} stopped in at "
                   f"least one of {its} {SPEEDUP_REPEATS} runs: "
                   f"a stopped run's time is the limit's, not the decoder's, so no speedup is shown. {longer}",
                   icon=":material/timer_off:")
    record = records.get(key)
    if record is not None:
        show_speedup_record(record)
    if records:
        measured = list(records.values())
        st.plotly_chart(session_chart(measured), key="session_speedups")
        with st.expander(SESSION_TABLE_LABEL):  # a chart's bars are no text a screen reader reads
            st.dataframe(session_table(measured, [key[-1] for key in records]), hide_index=True)


def stopped_decoders(record: Speedup) -> list[str]:
    """The decoders of a speedup measurement that the query's time limit stopped in any of their runs, by name, as
    the measurement recorded them (Timing.stopped). Their times were shown as a speedup: beam search and its exact
    speculative partner, both stopped at 1 s, "1.00x", and "different answers" from two exact decoders."""
    return [common.method_label(timing.method) for timing in record.stopped]


DRAFT_MODEL_CALLS = ("Model calls are the model's own: the draft model's, about one for each token it drafts, are not "
                     "counted (their time is in the speculative time).")


def show_speedup_record(record: Speedup) -> None:
    # side by side, wrapping where the page is narrow (in four columns, 800 pixels wide, "Model calls saved" was cut
    # to "Model calls …" and a long time to its first digits), as an answer card's figures do
    figures = st.container(horizontal=True, wrap=True, gap="medium", key="speedup_figures")
    figures.metric("Speedup", f"{record.factor:.2f}×", help="Standard decoding time / speculative decoding time",
                   width="content")
    figures.metric("Standard time", f"{record.baseline.time_ms:.0f} ms", width="content")
    figures.metric("Speculative time", f"{record.speculative.time_ms:.0f} ms", width="content")
    saved = record.baseline.model_calls - record.speculative.model_calls
    if saved >= 0:
        figures.metric("Model calls saved", f"{saved}", help="Decoder calls of standard minus speculative decoding",
                       width="content")
    else:  # "Model calls saved: -3" read as a typo; a sampled answer of another length, say, can take more calls
        figures.metric("Extra model calls", f"{-saved}", width="content",
                       help="Decoder calls of speculative minus standard decoding: on this query the speculative "
                            "decoder called the model more often")
    row = METHODS.get(record.speculative.method)
    if row is not None and row.drafts == "model":  # "Model calls saved: 329" read as 329 calls spared outright
        st.caption(DRAFT_MODEL_CALLS)
    table = pd.DataFrame([
        {"Decoder": common.method_label(t.method), "Wall time (ms)": round(t.time_ms, 1),
         "Model calls": t.model_calls, "Accepted draft tokens per call": round(t.accepted_per_call, 2),
         "Tokens per call": round(t.tokens_per_call, 2)}
        for t in (record.baseline, record.speculative)])
    st.dataframe(table, hide_index=True)
    if record.factor < 1 and saved < 0:
        st.caption("On this query the speculative decoder took longer: it called the model more often than the "
                   "standard decoder. The model cards measure each method over many queries.")
    elif record.factor < 1:
        st.caption("On this query the speculative decoder took longer: its drafts spared too few model calls to "
                   "pay for the tokens they add to each call (on a CPU a drafted token costs a call about as much "
                   "as its own). The model cards measure each method over many queries.")
    exact = row is not None and row.lossless and row.family != "sampling"
    if record.identical and exact:
        st.caption("Both decoders returned the same answer, as this exact speculative decoder guarantees.")
    elif record.identical:  # a lossy method, or a sampled answer, that happened to agree here
        st.caption("Both decoders returned the same answer here; this pair does not guarantee it (a lossy method, "
                   "or sampling, whose exact variants keep the distribution, not each answer).")
    elif exact or row is None:
        st.warning("The two decoders returned different answers (expected only for lossy or non-greedy pairs).")
    else:  # as such a pair may: a warning read as a fault (sampling beside speculative sampling drew other samples)
        st.caption(f"The two decoders returned different answers, as this pair may: {may_differ(row)}.")


def may_differ(row: Method) -> str:
    """Why a speculative method's answers may differ from its reference's: sampled (its reference samples: relaxed
    greedy runs in the sampling loop but samples nothing), or lossy."""
    if METHODS[row.reference].family == "sampling":
        kept = "the same distribution" if row.lossless else "the model's moved a bounded way (lossy)"
        return f"each draws its answers at random, the speculative one from {kept}, not the same draws"
    return f"{row.label} is a lossy method, which trades a bounded change of the answers for speed"


SESSION_TABLE_LABEL = "The chart's bars as a table"


def measured_with(cfg: Settings, speculative: str) -> str:
    """The settings a speedup was measured under, beside its two methods ("5-best, 5 writings, int8 arithmetic";
    "beta 2, tau 3"): the same query measured in int8 and in float32, or at two knob settings, read alike in the
    table."""
    label = common.method_label(speculative)
    return described(replace(cfg, method=speculative)).removeprefix(label).removeprefix(", ") or "float32 arithmetic"


def session_table(records: list[Speedup], settings: list[str]) -> pd.DataFrame:
    """The session chart's bars in words, numbered as the chart numbers them, with the settings each was measured
    under (measured_with): a screen reader read the chart as its labels run together ('0.33× 1. CC(=O)O.CCOSpeculative
    beam, exact 0 0.2 0.4'), and the speedups of the queries measured before this one were in the chart alone."""
    return pd.DataFrame([{"#": i, "query": r.query, "speculative": common.method_label(r.speculative.method),
                          "standard": common.method_label(r.baseline.method), "settings": how,
                          "speedup": f"{r.factor:.2f}×"}
                         for i, (r, how) in enumerate(zip(records, settings), start=1)])


def session_chart(records: list[Speedup]) -> go.Figure:
    # Plotly reads a few HTML tags in labels and hover text: escape what came from the user.
    # each bar names its method under its query: the same query measured with two methods read alike
    labels = [html.escape(f"{i}. {common.short(r.query, 28)}") + "<br>" + html.escape(
        common.short(common.method_label(r.speculative.method), 28)) for i, r in enumerate(records, start=1)]
    factors = [r.factor for r in records]
    figure = go.Figure(go.Bar(
        x=labels, y=factors, text=[f"{f:.2f}×" for f in factors], textposition="outside",
        width=[0.6] * len(records) if len(records) > 3 else [0.35] * len(records), marker_color="#1f6f8b",
        customdata=[[html.escape(r.query), common.method_label(r.speculative.method),
                     common.method_label(r.baseline.method)] for r in records],
        hovertemplate="%{customdata[0]}<br>%{customdata[1]} vs %{customdata[2]}: %{y:.2f}×<extra></extra>"))
    figure.add_hline(y=1, line_dash="dot", line_color="#888", layer="below")  # under the bars' labels
    figure.update_xaxes(tickfont={"size": LABEL_FONT_PX})
    figure.update_layout(title="Speedup of every measured query in this session", yaxis_title="speedup (×)",
                         yaxis_range=[0, max(factors + [1.0]) * 1.2], height=session_chart_height(labels),
                         margin={"t": CHART_TOP_PX, "b": 10})
    return figure


LABEL_FONT_PX = 11
LABEL_CHAR_PX = 6.5  # an 11-px label's characters: Chromium drew 31 of a SMILES 163 px long, wider letters take more
CHART_TOP_PX = 50  # the title's room
BARS_PX = 220  # the bars' own room, wherever their labels go


def session_chart_height(labels: list[str]) -> int:
    """The session chart's height: the bars' room, the title's, and the labels', which stand on end as soon as they
    would run into each other (two bars do on a phone, six on a laptop): in the 340 px it had, labels on end left the
    bars of a 390-pixel-wide page about 80 px."""
    lines = [line for label in labels for line in label.split("<br>")]
    on_end = LABEL_CHAR_PX * max(len(html.unescape(line)) for line in lines) if len(labels) > 1 else 0
    beside = 2 * LABEL_FONT_PX * 1.4  # two lines side by side, where one bar leaves them room
    return round(CHART_TOP_PX + BARS_PX + max(on_end, beside) + 20)


# ---- 3D ---------------------------------------------------------------------------------------


@st.cache_data(max_entries=64, show_spinner="Building a 3D conformer…")
def viewer_page(smiles: str) -> str | None:
    """The viewer HTML for a SMILES, cached so reruns keep the same iframe (no reload, no flicker)."""
    molblock = depict.molblock_3d(smiles)
    return depict.viewer_html(molblock, common.VIEWER_JS, 420) if molblock else None


def molecules_3d(shown: Shown) -> dict[str, str]:
    """{label: SMILES} of what the 3D view offers: valid predictions, then each query molecule
    apart (a closer look than the whole query, whose molecules depict.molblock_3d sets side by side); lone
    ions are left out. Two molecules whose labels would read alike (cut at the same 40 characters) are numbered:
    one label held the other, which could not be chosen."""
    choices = {f"Prediction, rank {p.rank}": p.smiles for p in shown.result.predictions if p.valid}
    fragments = [fragment for fragment in dict.fromkeys(shown.result.canonical_query.split("."))
                 if len(depict.ATOM_TOKEN.findall(fragment)) > 1]
    labels = [common.short(fragment, 40) for fragment in fragments]
    for i, (fragment, label) in enumerate(zip(fragments, labels), start=1):
        choices[f"Query molecule {i}: {label}" if labels.count(label) > 1 else f"Query molecule: {label}"] = fragment
    return choices


def show_3d(shown: Shown, rank: int) -> None:
    choices = molecules_3d(shown)
    names = list(choices)
    if not names:
        st.info("Nothing to show in 3D: no valid prediction and no query molecule with more than one atom.")
        return
    preferred = f"Prediction, rank {rank}"
    name = st.selectbox("Molecule", names, index=names.index(preferred) if preferred in choices else 0,
                        key=f"view3d_{rank}")
    page = viewer_page(choices[name])
    if page is None:
        st.info("RDKit could not build 3D coordinates for this molecule (too large or unusual).",
                icon=":material/info:")
        return
    # its title, what a screen reader names the frame by, was "st.iframe"
    st.iframe(page, height=430, alt=viewer_title(choices[name]))
    st.caption("RDKit conformer (ETKDG, then MMFF). Drag to rotate, scroll to zoom.")


def viewer_title(smiles: str) -> str:
    """The 3D view's accessible name: what it shows (a long SMILES as its formula, depict.smiles_in_words)."""
    return f"3D model of {depict.smiles_in_words(smiles)}, as balls and sticks: a mouse rotates and zooms it"


# ---- this session's queries --------------------------------------------------------------------


HISTORY_LIMIT = 20  # predictions kept per session, newest first; each holds its answers, nothing is decoded again


def remember(shown: Shown) -> None:
    """Keep a prediction in the session's history (newest first), numbered in the order made; the same
    query with the same settings (and the same recorded outcome) again replaces its earlier entry."""
    ss = st.session_state
    ss["history_count"] = ss.get("history_count", 0) + 1

    def key(s: Shown) -> tuple:
        return s.settings, s.result.canonical_query, s.recorded

    kept = [(n, s) for n, s in ss.get("history", []) if key(s) != key(shown)]
    ss["history"] = [(ss["history_count"], shown), *kept][:HISTORY_LIMIT]


def history_of(task: str) -> list[tuple[int, Shown]]:
    return [(n, s) for n, s in st.session_state.get("history", []) if s.settings.task == task]


def show_earlier(task: str) -> None:
    """The history list's callback: show that prediction again, its query back in the SMILES field."""
    ss = st.session_state
    chosen = dict(history_of(task)).get(ss.get("earlier"))
    ss["earlier"] = None
    if chosen is not None:
        ss["shown"], ss["query_text"], ss["example"] = chosen, chosen.typed or chosen.result.query, chosen.example
        ss["query_error"], ss["query_retry"] = None, None


def entry_label(shown: Shown) -> str:
    """The query as the history lists it: what the model read, and the outcome recorded with it where one was."""
    query, recorded = shown.result.canonical_query, shown.recorded
    return reaction_text(query, recorded, shown.settings.task) if recorded else query


def reaction_text(query: str, recorded: str, task: str) -> str:
    """A `task` query and its recorded outcome written as a reaction, as recorded_reaction reads it back."""
    return f"{query}>>{recorded}" if task == "forward" else f"{recorded}>>{query}"


def history_option(n: int, shown: Shown) -> str:
    """A "Show again" choice: the query, the model and how it was decoded, as the list's settings column names them
    (the same query under other settings read alike, and so did one query decoded alike by two models)."""
    return f"#{n}: {common.short(entry_label(shown), 60)} · {history_settings(shown)}"


def history_settings(shown: Shown) -> str:
    """The model and how a prediction was decoded: 'forward · Beam search, 5-best'."""
    return f"{shown.settings.model} · {described(shown.settings)}"


def history_table(entries: list[tuple[int, Shown]]) -> pd.DataFrame:
    rows = []
    for n, shown in entries:
        first = shown.result.predictions[0] if shown.result.predictions else None
        confidence = None if first is None else first.confidence
        # in words, as the answer's card reads it (io.percent): a progress column's "%.0f%%" read 0.2% as "0%"
        rows.append({"#": n, "query": entry_label(shown), "first answer": first.smiles if first else "",
                     "confidence": "" if confidence is None else common.percent(confidence),
                     "settings": history_settings(shown)})
    return pd.DataFrame(rows)


MODEL_COLUMN = "model"  # the session's file: the model folder that gave each answer


def history_export(entries: list[tuple[int, Shown]]) -> tuple[list[str], list[list[object]]]:
    """Every answer of the listed predictions, oldest first, in the Batch page's columns, MODEL_COLUMN in front of
    them: its header and rows; `row` is the prediction's number in the list. Where any has a known answer
    (known_column: recorded with it, or its textbook example's), that column leads, empty for the others, and
    `matches_known` ends each row, as in answer_table; named as there, or known_<side> where the entries' names
    differ. Where any is a recorded reaction, REACTION_COLUMN follows, each reaction as typed (typed_reaction).
    Without MODEL_COLUMN one query's answers from two models read alike (their method and arithmetic the same). Each
    row ends with io.MODEL_COLUMNS, as the page's other files do: the folder again, and the weights' fingerprint; and
    where any was checked round trip, with io.CHECKER_COLUMNS (empty for the others)."""
    oldest = list(reversed(entries))
    header, rows = _history_table(oldest)
    if not any(s.checker for _, s in oldest):
        return header, rows
    checkers = (s.checker or NO_CHECKER for n, s in oldest for _ in result_rows(n, (), s.result))  # row for row
    return with_checker(header, rows, checkers)


def _history_table(oldest: list[tuple[int, Shown]]) -> tuple[list[str], list[list[object]]]:
    """history_export's table, oldest first, before the round-trip check's columns."""
    models = [s.model for n, s in oldest for _ in result_rows(n, (), s.result)]  # row for row
    knowns = [known_column(s) for _, s in oldest]
    names = {k[0] for k in knowns if k}
    if not names:
        return with_model(output_header((MODEL_COLUMN,)),
                          [r for n, s in oldest for r in result_rows(n, (s.settings.model,), s.result)], models)
    name = names.pop() if len(names) == 1 else f"known_{recorded_side(oldest[0][1].settings.task)}"
    written = [typed_reaction(s) for _, s in oldest]
    known_cells = (name, REACTION_COLUMN) if any(written) else (name,)
    rows = (r for (n, s), k, w in zip(oldest, knowns, written)
            for r in result_rows(n, (*((k[1] if k else ""), w)[:len(known_cells)], s.settings.model), s.result))
    return with_model(*known_marked((*known_cells, MODEL_COLUMN), rows, oldest[0][1].result.task), models)


def show_history(task: str) -> None:
    entries = history_of(task)
    if len(entries) < 2:
        return
    with st.expander(f"This session's queries ({len(entries)})", icon=":material/history:"):
        st.dataframe(history_table(entries), hide_index=True, width="stretch",
                     column_config={"query": st.column_config.TextColumn(width="medium"),
                                    "first answer": st.column_config.TextColumn(width="medium")})
        # a phone's box shows 46 characters: "Pick a query: its answers come back as they were" was cut at "they we"
        st.selectbox("Show again", [n for n, _ in entries], index=None, key="earlier", on_change=show_earlier,
                     args=(task,), placeholder="Pick a query: its answers as they were",
                     format_func=lambda n: history_option(n, dict(entries)[n]))
        described = (f"The answers of these {len(entries)} queries, oldest first, in the Batch page's columns, with "
                     f"the model that gave each (the session keeps the last {HISTORY_LIMIT}).")
        with st.container(horizontal=True):
            st.download_button("Download all answers (CSV)", csv_bytes(*history_export(entries)),
                               file_name="molspec-session.csv",
                               mime="text/csv", icon=":material/download:", help=described)
            st.download_button("Download all answers (Excel)",
                               lambda: workbook_bytes(*history_export(entries)),
                               file_name="molspec-session.xlsx", mime=common.WORKBOOK_MIME, on_click="ignore",
                               icon=":material/download:", help=f"{described} {common.WORKBOOK_HELP}")


# ---- page -------------------------------------------------------------------------------------


def read_kept() -> None:
    """The answers on screen and in the history as this code reads them (common.current): kept by a session of earlier
    code, they lacked the fields added since (weights), and the page stopped on an AttributeError. One that cannot be
    read is let go."""
    ss = st.session_state
    if ss.get("shown") is not None and (shown := common.current(ss["shown"], Shown)) is not ss["shown"]:
        ss["shown"] = shown
    history = ss.get("history", [])
    read = [(n, shown) for n, kept in history if (shown := common.current(kept, Shown)) is not None]
    if any(a is not b for (_, a), (_, b) in zip(read, history)) or len(read) != len(history):
        ss["history"] = read


def main() -> None:
    cfg = common.settings()
    read_kept()
    ss = st.session_state
    if cfg.task == "retro":
        st.title("Propose reactants")
        st.caption("Single-step retrosynthesis: paste, draw or open a product, get ranked reactant sets.")
    else:
        st.title("Predict reaction products")
        st.caption("Paste, draw or open the reactants, with the reagents if you know them (optional); the model writes "
                   "the product SMILES and ranks its alternatives. The speculative methods (sidebar) copy the "
                   "unchanged parts of the query into the answer.")
    if cfg.model_dir is None:
        if common.models_for_task(cfg.task):
            st.error(common.NOT_LOADED, icon=":material/error:")
        else:  # the sidebar's words: the other task named only where it has a model
            st.warning(common.md_escape(common.no_model_text(cfg.task)), icon=":material/warning:")
        return
    predictor = cfg.predictor()

    example_buttons(cfg.task)
    query_inputs(cfg.task)
    with st.expander(TIME_LIMIT_SECTION, icon=":material/timer:"):  # for the rare query that needs longer
        time_limit = common.time_limit_input("time_limit_predict")
    if ss.pop("pending", False):
        run_query(cfg, predictor, time_limit)
    if ss.get("query_error"):
        st.error(common.md_escape(ss["query_error"]), icon=":material/error:")
        longer = common.time_limit_hint(ss["query_error"], ss.get("query_error_limit") or time_limit, LONGER_HOW,
                                        LONGER_AGAIN, time_limit)
        if longer:
            st.caption(longer)
        if ss.get("query_retry"):
            label, help_text, _ = ss["query_retry"]
            st.button(label, key="use_retry", on_click=use_retry, help=help_text)

    show_history(cfg.task)
    shown: Shown | None = ss.get("shown")
    if shown is None:
        st.info("Pick an example, paste a SMILES and press **Predict**, draw a structure and press **Apply**, or open "
                "a molfile.",
                icon=":material/lightbulb:")
        return
    if shown.settings.task != cfg.task:  # products under a retrosynthesis heading read as reactants, or the reverse
        st.info(f"The last {TASK_NOUN[shown.settings.task]} ({common.md_escape(common.short(shown.result.query, 60))}) "
                "is kept: switch the task back to see it.", icon=":material/info:")
        return
    if shown.settings.model != cfg.model:  # "Showing the last prediction, made with the model forward" said it of an
        # earlier one picked under Show again too, and nothing of the settings, which may differ as well
        differ = "model and settings differ" if common.decodes_otherwise(shown.settings, cfg) else "model differs"
        st.caption(common.md_escape(f"Below: the answers of the model {shown.settings.model}, decoded with "
                                    f"{described(shown.settings)}. The sidebar's {differ} now ({cfg.model}): press "
                                    "Predict to decode the query with them."))
    elif ss.get("query_error"):
        st.caption("Below: the last successful prediction.")
    elif ss.get("query_text", "") != shown.typed:  # Stop pressed while the query in the field decoded: its answers
        # were never kept, and the field's query sat over the last one's answers without a word
        st.caption(common.md_escape(f"Below: the answers to {common.short(shown.typed, 80)}. The query in the field "
                                    "has not been predicted: press Predict."))
    elif common.decodes_otherwise(shown.settings, cfg):  # a method, beam width or knob changed in the sidebar: the
        # answers below stayed those of the settings before, under the new ones, without a word
        st.caption(common.md_escape(f"Below: the answers decoded with {described(shown.settings)}. The sidebar's "
                                    "settings differ now: press Predict to decode the query with them."))

    show_query(shown)
    common.section("Predictions")
    if shown.result.stopped_with_answers:
        st.warning(common.md_escape(f"The search {shown.result.error}. Below: the answers it had found by then; "
                                    f"those it had not finished are marked \"{TIMED_OUT}\"."),
                   icon=":material/timer_off:")
        longer = common.time_limit_hint(shown.result.error or "", shown.time_limit_s, LONGER_HOW, LONGER_AGAIN,
                                        time_limit)
        if longer:
            st.caption(longer)
    if shown.unchecked:
        st.warning(common.md_escape(shown.unchecked), icon=":material/warning:")
    known = known_answer(shown)
    if known:
        show_known_check(shown, known)
    listed = list(shown.result.predictions)
    spelled = [str(p.rank) for p in listed if p.spellings > 1]
    if spelled:
        strings = sum(p.spellings for p in listed)
        ranks = f"rank {spelled[0]}" if len(spelled) == 1 else f"ranks {', '.join(spelled[:-1])} and {spelled[-1]}"
        st.caption(f"The model's {strings} strings hold {len(listed)} distinct answers: it wrote {ranks} in more "
                   "than one atom order. Each answer is listed once.")
    merged = merged_samples_note(shown)
    if merged:
        st.caption(merged)
    if any(p.round_trip is not None for p in listed):
        st.caption(round_trip_summary(listed, shown.settings.round_trip_k))
        listed = ordered(shown.result.predictions, st.segmented_control(
            "Order", ORDERS, default=ORDERS[0], key="round_trip_order", help=ORDER_HELP) or ORDERS[0])
        if not listed:
            st.info("No answer passes the round trip; choose another order to see them all.", icon=":material/info:")
    if shown.result.set_aside:
        aside, n = len(shown.result.set_aside), len(shown.result.predictions)
        st.caption(f"The writings gave more answers than the list holds, so {aside} flagged or invalid "
                   f"{'answer' if aside == 1 else 'answers'} among the model's first {n} "
                   f"{'gives its place to a sane answer' if aside == 1 else 'give their places to sane answers'} "
                   "from further down the pooled list.")
    mark = st.toggle(CENTRE_LABEL, value=True, key="mark_centre", help=CENTRE_HELP)
    if mark:
        st.caption(CENTRE_KEY[shown.settings.task])
    if listed:
        checked = any(p.round_trip is not None for p in shown.result.predictions)
        badges_key(shown.settings.round_trip_k if checked else None, bool(known))
    for prediction in listed:
        colours = centre_colours(shown.settings.task, shown.result.canonical_query, prediction) if mark else None
        show_prediction(prediction, is_known(prediction.smiles, known, shown.result), shown.result.writings,
                        colours, len(shown.result.predictions))

    if not shown.result.predictions:
        st.info("The model returned no answer for this query.", icon=":material/info:")
        return
    if len(listed) < len(shown.result.predictions):
        hidden = len(shown.result.predictions) - len(listed)
        st.caption(f"The downloads hold all {len(shown.result.predictions)} answers, the {hidden} not shown here "
                   "too: their round_trip column says which pass.")
    elif [p.rank for p in listed] != [p.rank for p in shown.result.predictions]:
        st.caption("The downloads list the answers by rank, as ranked: their round_trip column says which pass.")
    show_exports(shown)

    common.section("Inspect")
    ranks = [p.rank for p in shown.result.predictions]
    if ss.get("inspect_rank") not in ranks:
        ss["inspect_rank"] = ranks[0]
    rank = ss["inspect_rank"]
    if len(ranks) > 1:
        rank = st.radio("Prediction", ranks, key="inspect_rank", horizontal=True, format_func=lambda k: f"Rank {k}")
    prediction = shown.result.predictions[ranks.index(rank)]
    # Lazy tabs: only the open one runs, so a 3D conformer is built only when someone looks at it.
    copied, speed, three_d = st.tabs(["Copied tokens", "Speedup of this query", "3D view"], key="inspect_tab",
                                     on_change="rerun")
    if copied.open:
        with copied:
            show_copied_tokens(shown, prediction)
    if speed.open:
        with speed:
            show_speedup(shown, shown.settings.predictor(), time_limit)
    if three_d.open:
        with three_d:
            show_3d(shown, rank)


if __name__ == "__main__":  # Streamlit runs a page as __main__; tests import its functions
    main()
