"""What every page shares: the sidebar settings, the cached models, the examples, and formatting.

Models are loaded once per process with st.cache_resource and never mutated (a Predictor is safe
to share between sessions); everything that belongs to one user lives in st.session_state.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
import torch

from molspec_core.chem import canonical_or_none
from molspec_core.decoding.sampling import SamplingOptions
from molspec_core.service import BEAM_METHODS, METHODS, MODELS_DIR, SAMPLING_METHODS, Predictor

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_FILE = ROOT / "assets" / "examples.json"
VIEWER_JS = "/app/static/3Dmol-min.js"  # served by Streamlit from static/ (enableStaticServing)

TASKS = ("forward", "retro")
TASK_LABELS = {"forward": "Forward: predict products", "retro": "Retrosynthesis: propose reactants"}

# Human names of the engine's methods, in the order the sidebar lists them; a method the engine
# adds later still appears, under its own name, before the benchmark-only baseline.
METHOD_LABELS = {
    "spec-auto": "Speculative, auto drafts",
    "greedy": "Greedy",
    "beam": "Beam search",
    "spec-pointer": "Speculative, pointer drafts",
    "spec-lookup": "Speculative, lookup drafts",
    "spec-paper": "Speculative, paper drafts",
    "sbs-exact": "Speculative beam, exact",
    "sbs": "Speculative beam (paper SBS, lossy)",
    "sample": "Sampling",
    "spec-sample": "Speculative sampling, copy drafts",
    "spec-sample-draft": "Speculative sampling, draft model",
    "mentored": "Mentored sampling (lossy)",
    "relaxed": "Relaxed greedy, SpecDec++ (lossy)",
    "greedy-uncached": "Greedy, no cache (baseline)",
    "beam-uncached": "Beam search, no cache (baseline)",
}
METHOD_HELP = """Greedy and beam search are the standard decoders. Every speculative method returns exactly
the greedy answer in fewer model calls: it copies windows of the query as drafts and the model
checks them in one call. Auto picks drafts for the device; pointer drafts follow the model's
attention; lookup drafts continue the query after the last generated tokens; paper drafts are 25
windows of 10 tokens (Andronov et al.). Speculative beam, exact returns beam search's n-best list;
the paper's SBS is faster but may differ. Sampling gives diverse answers; speculative sampling has
the same distribution; mentored and relaxed trade a bounded change of the answers for speed.
No cache recomputes every step (a benchmark baseline)."""
DEFAULT_METHOD = "spec-auto"


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def method_order() -> list[str]:
    references = ("greedy-uncached", "beam-uncached")  # benchmark baselines: last in the list
    known = [m for m in METHOD_LABELS if m in METHODS and m not in references]
    extra = [m for m in METHODS if m not in METHOD_LABELS and m not in references]
    return known + extra + [m for m in references if m in METHODS]


def is_beam_method(method: str) -> bool:
    """Methods that return several answers: beam search and its speculative kin, and sampling
    (n samples, duplicates merged); the greedy family returns one answer."""
    return method in BEAM_METHODS or method in SAMPLING_METHODS


def is_sampling(method: str) -> bool:
    return method in SAMPLING_METHODS


def is_speculative(method: str) -> bool:
    """Methods that verify drafts copied from the query (their draft length can be set)."""
    return method.startswith("spec-") or method in ("sbs", "sbs-exact", "relaxed", "mentored")


# ---- models -----------------------------------------------------------------------------------


def models_dir() -> Path:
    """Where the shipped models live; MOLSPEC_MODELS_DIR points the app elsewhere (tests)."""
    return Path(os.environ.get("MOLSPEC_MODELS_DIR") or MODELS_DIR)


def read_config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}


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


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def load_predictor(model_dir: str) -> Predictor:
    return Predictor.load(model_dir)


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

    @property
    def model_dir(self) -> str | None:
        return str(models_dir() / self.model) if self.model else None

    def options(self) -> dict:
        """Keyword arguments of Predictor.predict for these settings."""
        return {"method": self.method, "n_best": self.n_best if is_beam_method(self.method) else 1,
                "draft_len": self.draft_len if is_speculative(self.method) else None,
                "n_drafts": self.n_drafts if is_speculative(self.method) else None,
                "sampling": self.sampling}

    def describe(self) -> str:
        text = method_label(self.method)
        if is_beam_method(self.method):
            text += f", {self.n_best}-best"
        if is_speculative(self.method) and self.draft_len is not None:
            text += f", drafts {self.n_drafts}×{self.draft_len}"
        return text


def render_sidebar() -> Settings:
    """The shared settings, drawn in the sidebar on every page."""
    sb = st.sidebar
    sb.title("MolSpec")
    sb.caption("Reaction prediction with a Molecular Transformer, sped up by speculative decoding.")
    task = sb.radio("Task", TASKS, format_func=TASK_LABELS.get, key="task")
    names = models_for_task(task)
    model = None
    if names:
        model = sb.selectbox("Model", names, key=f"model_{task}",
                             help="Model folders found under models/.")
    else:
        sb.warning(f"No {TASK_LABELS[task].split(':')[0].lower()} model is installed "
                   f"(models/{task}/ is missing). Choose the forward task, or add the model folder.")
    predictor = load_predictor(str(models_dir() / model)) if model else None
    methods = [m for m in method_order()
               if m != "spec-sample-draft" or (predictor is not None and predictor.draft_model is not None)]
    default = methods.index(DEFAULT_METHOD) if DEFAULT_METHOD in methods else 0
    method = sb.selectbox("Decoding method", methods, index=default, format_func=method_label, key="method",
                          help=METHOD_HELP)
    n_best = 1
    if is_sampling(method):
        n_best = sb.slider("Samples", 1, 10, 5, key="n_samples",
                           help="How many answers to draw; repeated answers are merged and ranked by score.")
    elif is_beam_method(method):
        n_best = sb.slider("Beam width (n-best)", 1, 10, 5, key="n_best",
                           help="How many ranked answers beam search keeps and returns.")
    sampling = _sampling_knobs(method) if is_sampling(method) else None
    draft_len = n_drafts = None
    if is_speculative(method):
        auto = _default_drafts(predictor, method)
        custom = sb.toggle("Set drafts by hand", key="custom_drafts",
                           help="Off: the method's own choice (spec-auto picks per device).")
        if custom:
            draft_len = sb.slider("Draft length (tokens)", 1, 32, auto[0] if auto else 16, key="draft_len")
            n_drafts = sb.slider("Number of drafts", 1, 32, auto[1] if auto else 1, key="n_drafts")
        elif auto:
            sb.caption(f"Drafts: {auto[1]} × {auto[0]} tokens ({auto[2]} drafter)")
    if predictor is not None:
        sb.caption(f"Device: {device_name(predictor)} · torch threads: {torch.get_num_threads()}")
    return Settings(task, model, method, n_best, draft_len, n_drafts, sampling)


def _sampling_knobs(method: str) -> SamplingOptions:
    sb = st.sidebar
    temperature = sb.slider("Temperature", 0.1, 2.0, 1.0, 0.1, key="temperature",
                            help="Below 1 sharpens the model's distribution, above 1 flattens it.")
    top_k = sb.slider("Top-k (0: all tokens)", 0, 50, 0, key="top_k")
    beta, tau, delta = 1, 0.0, 0.0
    if method == "relaxed":
        beta = sb.slider("Beta: draft among the top tokens", 1, 5, 2, key="beta")
        tau = sb.slider("Tau: log-prob gap allowed (nats)", 0.0, 5.0, 1.0, 0.1, key="tau")
    if method == "mentored":
        delta = sb.slider("Delta: KL budget per token", 0.0, 1.0, 0.1, 0.01, key="delta",
                          help="0 is exact speculative sampling; more accepts more drafts and moves the answers.")
    seed = int(sb.number_input("Seed", 0, 10_000, 0, key="seed"))
    return SamplingOptions(temperature=temperature, top_k=top_k, beta=beta, tau=tau, delta=delta, seed=seed)


def _default_drafts(predictor: Predictor | None, method: str) -> tuple[int, int, str] | None:
    if predictor is None:
        return None
    try:
        drafter, length, count = predictor.resolve(method, None, None, 1)
    except (KeyError, ValueError):  # a method whose drafts the engine does not describe
        return None
    return length, count, drafter


def device_name(predictor: Predictor) -> str:
    if predictor.device.type == "cuda":
        return f"GPU ({torch.cuda.get_device_name(predictor.device)})"
    return "CPU"


def settings() -> Settings:
    """The settings app.py drew this run."""
    _leave_pages_folder_mode()
    current = st.session_state.get("settings")
    return current if isinstance(current, Settings) else render_sidebar()


def _leave_pages_folder_mode() -> None:
    """Until app.py has called st.navigation once, Streamlit guesses from the folder name pages/
    that this is an old-style app and runs a deep-linked page (/batch as a fresh server's first
    request) alone, listing every file of pages/ in the menu. Clear that guess and rerun, so
    app.py draws the real menu and sidebar for the same URL."""
    from streamlit.runtime.pages_manager import PagesManager

    if getattr(PagesManager, "uses_pages_directory", False):
        PagesManager.uses_pages_directory = False
        st.rerun()


# ---- examples ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    name: str
    description: str
    reactants: str
    reagents: str
    product: str

    def query(self, task: str) -> str:
        if task == "retro":
            return self.product
        return ".".join(part for part in (self.reactants, self.reagents) if part)

    def known_answer(self, task: str) -> str | None:
        """Canonical known answer: the product (forward) or the reactants (retro)."""
        return canonical_or_none(self.reactants if task == "retro" else self.product)


@st.cache_data
def load_examples() -> list[Example]:
    data = json.loads(EXAMPLES_FILE.read_text())
    return [Example(e["name"], e["description"], e["reactants"], e["reagents"], e["product"])
            for e in data["examples"]]


# ---- formatting -------------------------------------------------------------------------------

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~=$:])")


def md_escape(text: str) -> str:
    """Text shown through a markdown element (st.error, st.caption) exactly as typed."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", str(text))


def format_probability(score: float) -> str:
    """exp(score) as a percentage, or in scientific notation when it is tiny."""
    probability = math.exp(score)
    if probability >= 0.001:
        return f"{probability:.1%}"
    return f"{probability:.1e}"


def short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
