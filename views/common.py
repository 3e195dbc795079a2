"""What every page shares: the sidebar settings, the cached models, the examples, and formatting.

Models are loaded once per process with st.cache_resource and never mutated (a Predictor is safe
to share between sessions); everything that belongs to one user lives in st.session_state.
"""
from __future__ import annotations

import math
import os
import re
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import streamlit as st

from molspec_core import checkpoint, textbook
from molspec_core.chem import SD_RECORD_END
# percent: the pages' one rounding
from molspec_core.io import InputFileError, is_results_header, parse_upload, percent
from molspec_core.methods import METHODS, PEERS, SAMPLING_KNOBS, TASK_DEFAULTS, SamplingOptions
from molspec_core.service import (DEFAULT_TIME_LIMIT_S, LONGER_TIME_LIMIT, MAX_TIME_LIMIT_S, MODELS_DIR, DtypeRefused,
                                  Predictor, int8_unavailable)
from molspec_core.textbook import Example
from molspec_core.threads import use_threads

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_FILE = ROOT / "assets" / "examples.json"
VIEWER_JS = "/app/static/3Dmol-min.js"  # served by Streamlit from static/ (enableStaticServing)

TASKS = ("forward", "retro")
TASK_LABELS = {"forward": "Forward: predict products", "retro": "Retrosynthesis: propose reactants"}
APP_AUGMENT = 5  # writings read when the sidebar's augmentation is on: most of the 10-writing gain, half the time
# Where the sidebar's sampling knobs open. The lossy methods' open where they trade a little of the answers for
# speed: at the engine's defaults (SamplingOptions: beta 1, tau 0, delta 0) relaxed greedy is greedy and mentored
# sampling exact sampling, and a "(lossy)" method that loses nothing shows nothing of itself. The Benchmark page's
# live run gives a lossy method the sidebar does not set these too (benchmark.live_sampling).
APP_SAMPLING = SamplingOptions(beta=2, tau=1.0, delta=0.1)
# On a CPU the app computes in int8 unless the user turns it off: first answers right as often as float32's
# on the test sets, and faster (the figures: INT8_HELP's sources). The command line keeps float32 unless asked.
INT8_BY_DEFAULT = True
INT8_LABEL = "Faster arithmetic (int8)"  # the sidebar's switch, which pages name where it stands in the way
INT8_HELP = """The model's matrix products in 8-bit integers instead of 32-bit floats: with the pages' default
methods 1.8x (forward) and 1.7x (retrosynthesis) as fast on one CPU thread (README, "Measured speed"). On the
test sets its first answer is right as often as float32's; retrosynthesis lists the recorded reactants among its
ten a little less often (91.2% against 91.4%; the model cards on the Models page). Now and then an answer's score
or place differs from float32's. Off: float32 arithmetic, what the command line computes with unless given
--dtype int8."""

METHOD_HELP = """Greedy and beam search are the standard decoders; beam search's first answer is right a little
more often than greedy's, and it lists alternatives, for a few times the time (the model cards on the
Models page measure both). Every speculative method returns exactly
the greedy answer in fewer model calls: it copies windows of the query as drafts and the model
checks them in one call. Auto picks drafts for the device; pointer drafts follow the model's
attention; lookup drafts continue the query after the last generated tokens; paper drafts are 25
windows of 10 tokens (Andronov et al.). Speculative beam, exact returns beam search's n-best list;
the paper's SBS is faster but may differ. Sampling gives diverse answers; speculative sampling has
the same distribution; mentored and relaxed trade a bounded change of the answers for speed.
No cache recomputes every step (a benchmark baseline)."""


ENGINE_LABELS = {"graphs": "CUDA graphs", "native": "C engine", "numpy": "NumPy engine", "torch": "torch engine"}


def method_label(method: str) -> str:
    """A method's name for people; "greedy@graphs" (a bench row on another engine) as "Greedy (CUDA graphs)"."""
    base, _, engine = method.partition("@")
    row = METHODS.get(base) or PEERS.get(base)
    label = row.label if row else base
    return f"{label} ({ENGINE_LABELS.get(engine, engine)})" if engine else label


def method_order() -> list[str]:
    """The engine's methods in the table's order, benchmark-only baselines last."""
    return ([m for m, row in METHODS.items() if not row.benchmark_only]
            + [m for m, row in METHODS.items() if row.benchmark_only])


def reads(method: str, knob: str) -> bool:
    """Whether a method reads a setting (methods.KNOBS), so the sidebar shows it and passes it on."""
    return knob in METHODS[method].knobs


# ---- models -----------------------------------------------------------------------------------


def models_dir() -> Path:
    """Where the shipped models live; MOLSPEC_MODELS_DIR points the app elsewhere (tests)."""
    return Path(os.environ.get("MOLSPEC_MODELS_DIR") or MODELS_DIR)


def read_config(folder: Path) -> dict:
    """A model folder's config.json as the engine reads it (checkpoint.read_json: a byte-order mark, as Windows'
    Notepad writes, is read there and was refused here, so the sidebar missed the model's task), or {} where it
    cannot be read or holds no object (a list stopped every page); the Models page says what is wrong."""
    try:
        config = checkpoint.read_json(folder / "config.json")
    except checkpoint.CheckpointError:
        return {}
    return config if isinstance(config, dict) else {}


# What a page says in place of its work where the task has models but the one chosen does not load (render_sidebar
# says why): it said "No forward model is installed (models/forward/ is missing)" beside the forward model's folder
NOT_LOADED = ("The model chosen in the sidebar does not load (the sidebar says why): choose another there, or mend its "
              "folder (the Models page checks each).")


def models_for_task(task: str) -> list[str]:
    """Model folders for a task: named after it, or whose config says so."""
    root = models_dir()
    if not root.is_dir():
        return []
    names = []
    for folder in sorted(p for p in root.iterdir() if (p / "config.json").is_file()):
        if folder.name == task or read_config(folder).get("task") == task:
            names.append(folder.name)
    return names


def default_model(names: list[str], task: str) -> str:
    """The model a task's list opens on: the folder named after the task (the shipped model, which the README and its
    card describe), else the first by name. The first by name alone was the sidebar's model and the round-trip
    check's forward model: a folder of one's own (a_small, copy) beside `forward` became both without a word."""
    return task if task in names else names[0]


Kept = TypeVar("Kept")


def current(kept: Any, cls: type[Kept]) -> Kept | None:
    """`kept`, a dataclass object the session holds, as an object of `cls`, the class the page's code defines now; None
    for None, or where `cls` has a field without a default that `kept` lacks. Streamlit runs a page's file afresh at
    each click, so a server whose code changed on disk while a session held such an object (a stopped batch run)
    meets it without the fields added since, and the page stopped on an AttributeError until the server restarted.
    An object with `cls`'s fields is returned as it is; another has them carried over, those it lacks at their
    defaults."""
    if kept is None or not dataclasses.is_dataclass(kept):
        return None
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    if {f.name for f in dataclasses.fields(kept) if f.init} == set(names):
        return kept
    try:
        return cls(**{name: getattr(kept, name) for name in names if hasattr(kept, name)})
    except TypeError:  # a field added since without a default: nothing to read it as
        return None


def task_name(task: str) -> str:
    """A task as a sentence names it: 'forward', 'retrosynthesis'."""
    return TASK_LABELS[task].split(":")[0].lower()


def no_model_text(task: str) -> str:
    """Why a task has no model, naming the folder the app looks in, and what to do. The sidebar told someone on the
    forward task to choose the forward task, and with no models folder at all to choose the other task, which had
    none either."""
    root = models_dir()
    if not root.is_dir():
        return (f"No model is installed: the models folder {root} is missing. Put the model folders (forward, retro) "
                "there.")
    others = [other for other in TASKS if other != task and models_for_task(other)]
    if not others:
        return (f"No model is installed: {root} holds no forward or retrosynthesis model folder. Put the model "
                "folders (forward, retro) there.")
    return (f"No {task_name(task)} model is installed ({root / task} is missing). Choose the "
            f"{task_name(others[0])} task, or add the model folder.")


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def load_predictor(model_dir: str, dtype: str = "float32") -> Predictor:
    use_threads()  # before a model loads, as the CLI: one core left to the server, the browser, other work
    return Predictor.load(model_dir, dtype=dtype)


@st.cache_resource(show_spinner=False)
def int8_offered() -> bool:
    """Whether this machine runs int8 arithmetic (service.int8_unavailable), asked once per process: where
    the C step cannot build, asking again would try to compile it on every rerun."""
    return int8_unavailable() is None


@st.cache_resource(show_spinner="Loading the model…", max_entries=8)
def int8_refusal(model_dir: str) -> str | None:
    """Why this model folder cannot compute in int8 here (the C step takes float16 weights only), or None;
    asked once per folder, so that a refusal does not load the model again on every rerun."""
    if not int8_offered():
        return int8_unavailable()
    try:
        load_predictor(model_dir, "int8")
    except checkpoint.CheckpointError:  # the folder does not load at all: no reason of int8's, and not kept
        raise  # (kept, a folder mended while the app ran computed in float32 for the app's life, "cut short")
    except DtypeRefused as exc:  # the engine's reason, without the API's advice (leave dtype at float32)
        return exc.reason
    except ValueError as exc:
        return str(exc)
    return None


def predictor_for(model_dir: str, dtype: str) -> Predictor:
    """The cached predictor of a model folder computing in dtype, or in float32 where the folder cannot
    take int8 (int8_refusal): the answers stand either way, and Predictor.dtype says which ran."""
    if dtype == "int8" and int8_refusal(model_dir) is not None:
        dtype = "float32"
    return load_predictor(model_dir, dtype)


# ---- settings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    task: str
    model: str | None  # folder name under models_dir(); None when the task has no model
    method: str
    n_best: int
    draft_len: int | None  # None: the method's own default
    n_drafts: int | None
    sampling: SamplingOptions | None = None  # knobs of the sampling methods
    # Retrosynthesis: the forward model folder that checks each answer round trip, and the top-k it may
    # give the product back within; None: no check.
    round_trip_model: str | None = None
    round_trip_k: int = 1
    augment: int = 1  # writings of the query the model reads (Predictor.predict's augment)
    dtype: str = "float32"  # what the decoder calls compute with (Predictor.load's dtype)

    @property
    def model_dir(self) -> str | None:
        return str(models_dir() / self.model) if self.model else None

    def model_named(self, weights: str) -> tuple[str, str]:
        """The model the exports name (io.MODEL_COLUMNS): its folder and the fingerprint of the weights that gave the
        answers (Predictor.weights)."""
        return self.model or "", weights

    def checker_named(self, round_trip_weights: str) -> tuple[str, str, int] | None:
        """The forward model that checked the answers round trip, as the exports name it (io.CHECKER_COLUMNS): its
        folder, its weights' fingerprint and the top-k the product had to come back within; None where no check
        ran (no checker set, or none loaded: no fingerprint)."""
        if self.round_trip_model is None or not round_trip_weights:
            return None
        return self.round_trip_model, round_trip_weights, self.round_trip_k

    def options(self, method: str | None = None) -> dict:
        """Keyword arguments of Predictor.predict for these settings, given to `method` (the chosen
        one by default): each setting only where that method reads it."""
        method = method or self.method
        return {"method": method, "n_best": self.n_best if reads(method, "n_best") else 1,
                "draft_len": self.draft_len if reads(method, "draft_len") else None,
                "n_drafts": self.n_drafts if reads(method, "n_drafts") else None,
                "sampling": self.sampling_of(method), "augment": self.augment}

    def sampling_of(self, method: str) -> SamplingOptions | None:
        """The sampling knobs `method` reads, the others at their defaults; None where it reads none. The engine
        refuses a knob the method does not read: relaxed greedy's beta and tau given to greedy, its speedup pair's
        other side, failed the measurement."""
        read = {knob: getattr(self.sampling, knob) for knob in SAMPLING_KNOBS
                if self.sampling is not None and reads(method, knob)}
        return SamplingOptions(**read) if read else None

    def describe(self) -> str:
        text = method_label(self.method)
        if reads(self.method, "n_best"):  # the sidebar's "Samples" for a sampling method, its beam width otherwise
            text += (f", {counted(self.n_best, 'sample')}" if METHODS[self.method].family == "sampling"
                     else f", {self.n_best}-best")
        if reads(self.method, "draft_len") and self.draft_len is not None:
            text += f", {counted(self.n_drafts or 1, 'draft')} of {counted(self.draft_len, 'token')}"
        if self.augment > 1:
            text += f", {self.augment} writings"
        if self.dtype != "float32":
            text += f", {self.dtype} arithmetic"
        return text

    def predictor(self, model: str | None = None) -> Predictor:
        """The cached predictor of a model folder under models_dir() (the chosen model by default), computing
        in these settings' dtype."""
        return predictor_for(str(models_dir() / (model or self.model)), self.dtype)


BEAM_WIDTH = "beam_width"  # the session's beam width (n-best), kept while the method shown has none
SPECULATIVE_DEFAULT = "spec-auto"  # the speculative method the sidebar's caption names


def app_caption() -> str:
    """What the app does, under its name. It said 'sped up by speculative decoding', and both pages open on beam
    search (methods.TASK_DEFAULTS), which drafts nothing: it names what the pages open on and where the speculative
    method is, and claims of it only what it does (greedy's answer, in fewer model calls)."""
    opened = " and ".join(sorted({f"'{method_label(method)}'" for method, _ in TASK_DEFAULTS.values()}))
    return md_escape(f"Reaction prediction with a Molecular Transformer. The pages open on {opened}, ranked answers; "
                     f"the decoding method '{method_label(SPECULATIVE_DEFAULT)}' gives greedy search's one answer in "
                     "fewer model calls, with drafts copied from the query (speculative decoding).")


def render_sidebar() -> Settings:
    """The shared settings, drawn in the sidebar on every page."""
    sb = st.sidebar
    # The app's name, drawn as a title was but not a heading: the page's own title is its one level-1 heading, and a
    # screen reader listed two (app.py's style sizes the name: .st-key-app_name)
    sb.container(key="app_name").markdown("MolSpec")
    sb.caption(app_caption())
    task = sb.radio("Task", TASKS, format_func=TASK_LABELS.get, key="task", on_change=_open_task_on_its_defaults)
    names = models_for_task(task)
    model = None
    if names:
        chosen = f"model_{task}"  # kept through the other task's runs; a folder gone since opens on the first
        if st.session_state.get(remembered_key(chosen)) not in names:
            st.session_state[remembered_key(chosen)] = default_model(names, task)
        model = sb.selectbox("Model", names, **remembered(chosen, default_model(names, task)),
                             help=md_escape(f"Model folders found under {models_dir()}."))
    else:
        sb.warning(md_escape(no_model_text(task)), icon=":material/warning:")
    # The int8 toggle is drawn further down, but decides which predictor loads: read its state first.
    want_int8 = int8_offered() and st.session_state.get("int8", INT8_BY_DEFAULT)
    try:
        predictor = predictor_for(str(models_dir() / model), "int8" if want_int8 else "float32") if model else None
    except checkpoint.CheckpointError as exc:  # a model folder that does not load stopped every page on a traceback
        sb.error(md_escape(f"Model {model} does not load: {exc}"), icon=":material/error:")
        model = predictor = None  # the pages say no model is chosen, as when none is installed
    dtype = predictor.dtype if predictor is not None else "float32"
    has_draft_model = predictor is not None and predictor.draft_model is not None
    methods = [m for m in method_order() if METHODS[m].drafts != "model" or has_draft_model]
    # Defaults go through the session state, not the widgets' arguments: the task switch sets them there.
    default_method, default_n_best = TASK_DEFAULTS[task]
    st.session_state.setdefault("method", default_method)
    st.session_state.setdefault(BEAM_WIDTH, default_n_best)
    unoffered = st.session_state["method"] if st.session_state["method"] not in methods else None
    if unoffered:  # a draft-model method, and a model without one chosen: Streamlit took the list's first method
        st.session_state["method"] = default_method  # (sampling became greedy, Speculative, auto drafts) unsaid
    method = sb.selectbox("Decoding method", methods, format_func=method_label, key="method", help=METHOD_HELP)
    if unoffered and predictor is not None:
        sb.caption(md_escape(f"The model {model} has no draft model, so {method_label(unoffered)} is not offered "
                             f"with it: the method is now {method_label(method)}."))
    n_best = 1
    if reads(method, "n_best") and METHODS[method].family == "sampling":
        n_best = sb.slider("Samples", 1, 10, **remembered("n_samples", 5),
                           help="How many answers to draw; repeated answers are merged and ranked by score.")
    elif reads(method, "n_best"):
        n_best = sb.slider("Beam width (n-best)", 1, 10, **kept(BEAM_WIDTH, "n_best"),
                           help="How many ranked answers beam search keeps and returns.")
    sampling = _sampling_knobs(method) if any(reads(method, knob) for knob in SAMPLING_KNOBS) else None
    draft_len = n_drafts = None
    if reads(method, "draft_len"):
        drafter, default_len, default_n = predictor.resolve(method, None, None, 1) if predictor else ("", 8, 1)
        custom = sb.toggle("Set drafts by hand", **remembered("custom_drafts", False),
                           help="Off: the method's own choice (spec-auto picks per device).")
        if custom:  # each method its own (one pair of sliders for all ran the paper's drafts as lookup's 1 draft)
            draft_len = sb.slider("Draft length (tokens)", 1, 32, **remembered(f"draft_len_{method}", default_len))
            if reads(method, "n_drafts"):
                n_drafts = sb.slider("Number of drafts", 1, 32, **remembered(f"n_drafts_{method}", default_n))
        elif METHODS[method].drafts == "model":
            sb.caption(f"Drafts: {counted(default_len, 'token')} from the draft model")
        else:
            sb.caption(f"Drafts: {counted(default_n, 'draft')} of {counted(default_len, 'token')} ({drafter} drafter)")
    augment = APP_AUGMENT if predictor is not None and predictor.augmentable and sb.toggle(
        f"Read the query in {APP_AUGMENT} writings", **remembered(f"augment_{task}", True),
        help=f"The model reads the query written from {APP_AUGMENT} different atoms and pools its answers, "
             "favouring those many writings agree on: more often right (on the test sets in the model's card), "
             f"for about {APP_AUGMENT}x the time. Off: the canonical query alone.") else 1
    if int8_offered():
        sb.toggle(INT8_LABEL, value=INT8_BY_DEFAULT, key="int8", help=INT8_HELP)
        if want_int8 and predictor is not None and dtype != "int8":
            # the engine's reason alone: the API's advice ("leave dtype at float32") names no switch of the app's
            sb.caption(md_escape(f"{INT8_LABEL} cannot run this model here: it computes in float32, as with the "
                                 f"switch off. Why: {int8_refusal(str(models_dir() / model))}."))
        elif dtype == "int8" and predictor is not None and METHODS[method].benchmark_only:
            dtype = "float32"  # Predictor.decode refuses it in int8: every row of a batch failed
            predictor = predictor_for(str(models_dir() / model), dtype)
            sb.caption("This baseline recomputes every prefix in torch, in float32 arithmetic: it computes in "
                       "float32.")
    round_trip_model, round_trip_k = _round_trip_settings(task)
    if predictor is not None:
        sb.caption(f"Device: {predictor.device.type.upper()} ({predictor.device_name}) · "
                   f"engine: {predictor.engine_description} · threads: {predictor.threads}")
    return Settings(task, model, method, n_best, draft_len, n_drafts, sampling, round_trip_model, round_trip_k,
                    augment, dtype)


def _round_trip_settings(task: str) -> tuple[str | None, int]:
    """(forward model, top-k) of the round-trip check of retrosynthesis answers; (None, 1) when off."""
    if task != "retro":
        return None, 1
    sb = st.sidebar
    forward_models = models_for_task("forward")
    if not forward_models:
        sb.caption("Round-trip check: install a forward model (models/forward/) to check each answer.")
        return None, 1
    if not sb.toggle("Round-trip check", **remembered("round_trip", True),
                     help="Runs every sane answer back through the forward model: ✓ when the forward model "
                          "gives the product back within its top-k."):
        return None, 1
    k = sb.select_slider("Round trip within forward top-k", [1, 2, 3, 5], **remembered("round_trip_k", 1))
    return default_model(forward_models, "forward"), int(k)


def decodes_otherwise(before: Settings, now: Settings) -> bool:
    """Whether the sidebar's settings `now` would decode a query otherwise than `before` did: another method, beam
    width, draft, knob, number of writings, arithmetic or round-trip check (a setting the method does not read
    changes nothing: Settings.options leaves it out). The model is compared apart (the pages name it)."""
    def decoding(cfg: Settings) -> tuple:
        return cfg.options(), cfg.dtype, cfg.round_trip_model, cfg.round_trip_k if cfg.round_trip_model else None
    return decoding(before) != decoding(now)


# What the Predict page shows of a task's last query: each task keeps its own (a forward query's reactants are no
# product to take apart, and products listed under the retrosynthesis heading read as reactants).
# query_error_limit: the time limit the query that gave query_error decoded under (time_limit_hint)
PER_TASK = ("query_text", "shown", "example", "query_error", "query_error_limit", "query_retry")
# The sidebar's settings each task keeps as its own, as it keeps its query: the method and beam width, which open on
# the task's defaults (methods.TASK_DEFAULTS). Both came back on the defaults after a look at the other task: the
# answers on screen were then captioned "settings differ", and the Batch page's Run batch began its run again.
TASK_SETTINGS = ("method", BEAM_WIDTH)


def _open_task_on_its_defaults() -> None:
    """Task switch callback: the other task opens on its own last method and n-best (TASK_SETTINGS; on its first
    visit the task's defaults, methods.TASK_DEFAULTS), and on its own last query, answers and error (PER_TASK);
    the task left keeps its own for when it comes back."""
    ss = st.session_state
    task = ss["task"]
    first_visit = dict(zip(TASK_SETTINGS, TASK_DEFAULTS[task]))
    for key in PER_TASK + TASK_SETTINGS:
        for other in TASKS:
            if other != task:
                ss[f"{key}_{other}"] = ss.get(key)
        ss[key] = ss.get(f"{key}_{task}", first_visit.get(key))
    ss["query_text"] = ss["query_text"] or ""


def kept(value_key: str, widget_key: str) -> dict:
    """A widget's key and callback that keep its value under value_key through runs that do not draw it.
    Streamlit forgets a widget's state when a run leaves it out, and a widget drawn again over a value set
    through the session state in an earlier run opens on its own minimum: in the browser the beam width read
    1 after one prediction with a method that has none (session 65; AppTest does not show it). So the value
    lives under value_key, is written into the widget's key before each draw, and a change goes back."""
    st.session_state[widget_key] = st.session_state[value_key]
    return {"key": widget_key, "on_change": _keep, "args": (widget_key, value_key)}


def _keep(widget_key: str, value_key: str) -> None:
    st.session_state[value_key] = st.session_state[widget_key]


def remembered_key(widget_key: str) -> str:
    """The session key under which remembered() keeps a widget's value."""
    return f"{widget_key}__kept"


def remembered(widget_key: str, default: object) -> dict:
    """kept() for a sidebar setting, its value under remembered_key(widget_key), `default` until it is set: the
    sampling knobs and the round-trip check came back on their defaults after a method or task that does not draw
    them (temperature 0.1 set for sampling read 0.5 again after a look at greedy, and the next query sampled at
    0.5). Draw the widget without a value argument."""
    value_key = remembered_key(widget_key)
    st.session_state.setdefault(value_key, default)
    return kept(value_key, widget_key)


def kept_in_form(widget_key: str, default: object) -> str:
    """The key of a widget inside a form, its value kept through runs that do not draw it (another page's):
    Streamlit forgets it there, and the Routes form came back empty under the routes it had made. kept() cannot
    serve: a widget in a form takes no on_change callback. Its value changes only with the form's submit (or a
    callback's write), before a run that draws it; so each run saves the value Streamlit holds, and where
    Streamlit has forgotten it, writes the saved one back before the widget is drawn. Draw the widget without a
    value argument: its default is given here."""
    ss, saved = st.session_state, f"{widget_key}__kept"
    if widget_key in ss:
        ss[saved] = ss[widget_key]
    else:
        ss[widget_key] = ss.get(saved, default)
    return widget_key


# A query's time limit on the Predict and Batch pages, each its own: the engine told a query stopped at its 60 s to
# "try a longer time limit", which the pages offered nowhere. Up to ten minutes: the page waits for its query that
# long; a query that needs longer belongs to the command line, whose --time-limit takes up to a day.
APP_MAX_TIME_LIMIT_S = 600
TIME_LIMIT_LABEL = "Time limit per query (s)"


def time_limit_input(key: str) -> int:
    """A page's time-limit setting under `key`, its value kept through visits to other pages. One key for two pages'
    widgets did not serve: back from the other page, the widget opened on its minimum, 1 s. The value kept is the
    widget's default (kept_in_form's way, through the session state, left it none): a field emptied and entered
    went to its minimum, and the next query was stopped after 1 s."""
    ss, saved = st.session_state, f"{key}__kept"
    if key in ss:
        ss[saved] = ss[key]
    return int(st.number_input(TIME_LIMIT_LABEL, 1, APP_MAX_TIME_LIMIT_S, ss.get(saved, round(DEFAULT_TIME_LIMIT_S)),
                               step=30, key=key,
                               help=f"How long one query may decode, its writings together (default "
                                    f"{DEFAULT_TIME_LIMIT_S:g} s, at most {APP_MAX_TIME_LIMIT_S} s here): a query "
                                    "still decoding then is stopped, with the answers it had found by then, if any."))


def time_limit_hint(error: str, limit_s: float, how: str, again: str = "", now_s: float | None = None) -> str:
    """How to follow the advice of a query's error, stopped at the time limit `limit_s`, to try a longer time limit
    ("" where it gives none): `how` says where the setting is and what to do after ("raise it in the form above and
    run the batch again"). Where the page's setting `now_s` is longer already (the Predict page's applies at once,
    the answers on screen stay), `again` says what to do: the hint told a query stopped at 1 s, under a setting
    raised to 300 s, "For a longer time limit (now 300 s a query), raise it". At the app's most, the command line's
    limit is longer."""
    if LONGER_TIME_LIMIT not in error:
        return ""
    return longer_time_limit(limit_s, how, again, now_s)


def longer_time_limit(limit_s: float, how: str, again: str = "", now_s: float | None = None) -> str:
    """How to give a query stopped at the time limit `limit_s` longer (time_limit_hint's words, where no error
    says to): the Predict page's speedup tab, whose decoders the limit stopped while timed, said to raise it where
    it was raised already, and at the app's most."""
    if now_s is not None and now_s > limit_s:
        return f"The time limit is {now_s:g} s a query now, longer than the {limit_s:g} s it stopped at: {again}."
    if limit_s < APP_MAX_TIME_LIMIT_S:
        return f"For a longer time limit than the {limit_s:g} s a query it stopped at, {how}."
    return (f"{APP_MAX_TIME_LIMIT_S} s is the longest time limit the app gives a query: the command line's `molspec "
            f"predict --time-limit` takes up to {MAX_TIME_LIMIT_S:,.0f} s.")


def _sampling_knobs(method: str) -> SamplingOptions:
    """The sliders of the sampling knobs this method reads; the others keep the engine's defaults (a knob the
    method does not read is refused: Settings.sampling_of)."""
    sb, knobs, start = st.sidebar, {}, APP_SAMPLING
    if reads(method, "temperature"):
        knobs["temperature"] = sb.slider("Temperature", 0.1, 2.0, step=0.1, **remembered("temperature",
                                                                                             start.temperature),
                                         help="Below 1 sharpens the model's distribution, above 1 flattens it. "
                                              "Near 1 most samples of these models are not valid SMILES.")
    if reads(method, "top_k"):
        knobs["top_k"] = sb.slider("Top-k (0: all tokens)", 0, 50, **remembered("top_k", start.top_k))
    if reads(method, "beta"):
        knobs["beta"] = sb.slider("Beta: draft among the top tokens", 1, 5, **remembered("beta", start.beta))
    if reads(method, "tau"):
        knobs["tau"] = sb.slider("Tau: log-prob gap allowed (nats)", 0.0, 5.0, step=0.1,
                                 **remembered("tau", start.tau))
    if reads(method, "delta"):
        knobs["delta"] = sb.slider("Delta: KL budget per token", 0.0, 1.0, step=0.01,
                                   **remembered("delta", start.delta),
                                   help="0 is exact speculative sampling; more accepts more drafts and moves the "
                                        "answers.")
    if reads(method, "seed"):
        knobs["seed"] = int(sb.number_input("Seed", 0, 10_000, **remembered("seed", start.seed)))
    return SamplingOptions(**knobs)


def writings_key(task: str) -> str:
    """The session key of the value of the sidebar's "read the query in N writings" toggle for a task (on by default),
    kept while the other task is shown (remembered): the Routes page reads the retrosynthesis one under the forward
    task, where the toggle's own state was forgotten, and read it on when it had been turned off."""
    return remembered_key(f"augment_{task}")


def settings() -> Settings:
    """The settings app.py drew this run."""
    current = st.session_state.get("settings")
    return current if isinstance(current, Settings) else render_sidebar()


# ---- examples ---------------------------------------------------------------------------------


@st.cache_data
def load_examples() -> list[Example]:
    """The textbook reactions of assets/examples.json (molspec_core/textbook.py)."""
    return textbook.load_examples(EXAMPLES_FILE)


# ---- formatting -------------------------------------------------------------------------------


def section(title: str) -> None:
    """A section's heading under the page's title: level 2 (st.header), so that no level is skipped, drawn at the
    size of level 3 (app.py's style: .st-key-section_*), as the pages drew their sections before."""
    st.container(key="section_" + re.sub(r"\W+", "_", title.lower())).header(title)


# "/" too: Streamlit draws ":material/home:" as an icon even with both colons escaped; "&" too: markdown reads an
# entity, and a file named a&amp;b.mol was refused as a&b.mol
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~=$:/&])")
# GFM's autolink literals (remark-gfm, in Streamlit's markdown) make www.x.y, http://x and a@b.c links, and read
# them after the escapes are taken out, so a backslash does not stop them: an uploaded file named
# www.evil.example.smi became a link. A word joiner (U+2060: no width, no line break) inside each pattern does;
# where none is (SMILES: '[C@@H]' is no address), the text is left as it was.
WORD_JOINER = "\u2060"
# (a scheme's address is linked only where its host has a dot: http://a is not)
_AUTOLINK_START = re.compile(r"(?i)www(?=\.)|[a-z](?=://[-\w.]*\.)|[\w.+-](?=@[\w-]+(?:\.[\w-]+)+)")


def counted(n: int, noun: str, plural: str = "") -> str:
    """'1 token', '2 tokens': a count with its noun in the right number (`plural` where adding an s is wrong:
    'queries')."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def in_words(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def md_escape(text: str) -> str:
    """Text shown through a markdown element (st.error, st.caption) exactly as typed, and never as a link: a
    file name or a message may hold an address (www..., a scheme and host, name@host.org), and the page must not
    offer it to be clicked."""
    unlinked = _AUTOLINK_START.sub(lambda match: match.group() + WORD_JOINER, str(text))
    return _MARKDOWN_SPECIAL.sub(r"\\\1", unlinked)


def as_typed(frame: pd.DataFrame) -> pd.DataFrame:
    """A table for st.table, which renders each cell and heading as markdown: every one escaped, so it reads as
    written. ">99.9%" was a grey quote reading "99.9%", and a draft model's folder from a report file came out in
    italics or as a link."""
    return frame.rename(columns=md_escape).map(md_escape)


def format_probability(score: float) -> str:
    """exp(score) as a percentage to one decimal (io.percent: 0.9996 is ">99.9%", not "100.0%"), or in scientific
    notation when it is tiny, written from the score itself: exp() of a score below -745 is 0.0, which read
    "0.0e+00"."""
    probability = math.exp(score)
    if probability >= 0.001:
        return percent(probability, 1)
    if score == -math.inf:
        return "0"
    exponent = math.floor(score / math.log(10))
    mantissa = round(10 ** (score / math.log(10) - exponent), 1)
    if mantissa >= 10:  # 9.96e-5 rounds to 10.0e-5
        mantissa, exponent = 1.0, exponent + 1
    return f"{mantissa:.1f}e{exponent:+03d}"


def short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# A file opened as one query: a reaction's molecules, not a library (the Batch page takes those, a query a record).
MAX_FILE_MB = 1  # the uploader refuses larger files in the browser (max_upload_size); query_from_file checks too
MAX_FILE_BYTES = MAX_FILE_MB * 1024 * 1024
MAX_FILE_MOLECULES = 20
QUERY_FILE_TYPES = ["mol", "sdf", "sd"]
WORKBOOK_MIME = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
WORKBOOK_HELP = ("It opens in columns whatever Excel's language (a CSV opens in one column where Excel separates "
                 "cells with semicolons), with numbers as numbers and every SMILES as text.")
QUERY_FILE_LIMITS = (f"At most {MAX_FILE_MB} MB and {MAX_FILE_MOLECULES} molecules: the Batch page predicts larger "
                     "files, a query per record.")


def molblock_count(data: bytes) -> int:
    """How many molblocks a molfile or SD file holds: its 'M  END' lines, less those in a record's data fields
    (which follow its molblock, each headed by a line that starts with '>')."""
    count, ended, in_fields = 0, False, False
    for line in data.splitlines():
        line = line.strip()
        if line == SD_RECORD_END.encode():
            ended = in_fields = False
        elif ended and line.startswith(b">"):
            in_fields = True
        elif line == b"M  END" and not in_fields:
            count, ended = count + 1, True
    return count


def query_from_file(name: str, data: bytes, task: str) -> str:
    """The query a molfile or SD file holds: its molecules joined by '.' (reactants and reagents; a
    retrosynthesis query is one product). Raises InputFileError for a file that cannot be one query,
    its message a sentence that names the file and says why."""
    if len(data) > MAX_FILE_BYTES:
        raise InputFileError(f"{name} is larger than {MAX_FILE_MB} MB; the Batch page predicts large files, a query "
                             "per record")
    records = parse_upload(name, data)  # its own errors name the file
    if len(records.queries) > 1 and is_results_header(records.columns):  # one answer alone is the next step's query
        raise InputFileError(f"{name} is MolSpec's own answers, {len(records.queries)} records, each an answer of its "
                             "own and not a molecule of one query: paste the answer to go on from (its SMILES is "
                             "in the record's smiles field), or predict each on the Batch page, naming the column "
                             "smiles")
    problem = next((p for p in records.problems if p), None)
    if problem:
        raise InputFileError(f"Cannot read {name}: {problem}")
    # RDKit splits records at '$$$$' lines: molblocks one after another without them read as the first alone, and
    # the molecules after it were dropped without a word
    blocks = molblock_count(data)
    if blocks > len(records.queries):
        raise InputFileError(f"{name} holds {blocks} molblocks, not separated by the '$$$$' line that ends each "
                             f"record of an SD file: RDKit reads {len(records.queries)} of them and would drop the "
                             "rest; save them as an SD file, or draw them in one molfile")
    molecules = [q for q in records.queries if q]
    if not molecules:
        raise InputFileError(f"{name} holds no molecule")
    if task == "retro" and len(molecules) > 1:
        raise InputFileError(f"{name} holds {len(molecules)} molecules; retrosynthesis takes one product (the "
                             "Batch page predicts each record of a file on its own)")
    if len(molecules) > MAX_FILE_MOLECULES:
        raise InputFileError(f"{name} holds {len(molecules)} molecules; one query takes at most "
                             f"{MAX_FILE_MOLECULES} (the Batch page predicts each record of a file on its own)")
    return ".".join(molecules)
