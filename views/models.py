"""Models: the model card and the configuration facts of every installed model."""
from __future__ import annotations

import html
import itertools
import math
import re
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from molspec_core import calibration, checkpoint
from molspec_core.methods import METHODS, TASK_DEFAULTS
from molspec_core.service import MAX_QUERY_TOKENS
from views import common

TASK_CAPTIONS = {"forward": "Forward prediction: reactants and reagents in, product out.",
                 "retro": "Single-step retrosynthesis: product in, reactant sets out."}
MB = 10**6  # bytes, the model cards' unit (2**20 showed models/forward's 23 MB as 22.2)


def stored_weights(folder: Path) -> tuple[list[Path], int] | None:
    """The weight files a model is read from and the parameters they hold, from their headers (no weight is read):
    the files its shard index names, not every .safetensors file beside them (a stale one, a training run's
    optimizer moments, which were counted as 23 M more parameters); None where they cannot be read."""
    try:
        headers = checkpoint.read_headers(folder)
    except checkpoint.CheckpointError:
        return None
    return sorted({header.file for header in headers.values()}), sum(math.prod(h.shape) for h in headers.values())


def _layers(model: dict) -> str:
    return f"{model.get('n_encoder_layers', '?')} + {model.get('n_decoder_layers', '?')}"


def query_limit(model: dict) -> str:
    """The longest query the app gives this model: its own limit (service.MAX_QUERY_TOKENS), or the model's
    position table where that is smaller (the encoder has no positions beyond it)."""
    positions = model.get("max_positions")
    limit = min(MAX_QUERY_TOKENS, positions) if isinstance(positions, int) else MAX_QUERY_TOKENS
    return f"{limit} tokens; longer queries are refused"


def draft_facts(folder: Path) -> str | None:
    """The draft model in `folder`/draft, which the draft-model methods draft with; None where there is none."""
    draft = folder / checkpoint.DRAFT_DIR
    if not (draft / "config.json").is_file():
        return None
    model = common.read_config(draft).get("model", {})
    stored = stored_weights(draft)
    users = ", ".join(common.method_label(name) for name, row in METHODS.items() if row.drafts == "model")
    size = f", {stored[1] / 1e6:.1f} M parameters" if stored else ""
    return f"{_layers(model)} layers, width {model.get('d_model', '?')}{size}; drafts for {users} (see the card)"


def facts(folder: Path, config: dict) -> pd.DataFrame:
    """The model's facts from its config (as checkpoint.inspect_folder passed it) and its weight files' headers."""
    model = config.get("model", {})
    stored = stored_weights(folder)
    files, params = stored or ([], 0)
    rows = [
        ("Task", config.get("task", "unknown")),
        ("Layers (encoder + decoder)", _layers(model)),
        ("Model width / heads / feed-forward", f"{model.get('d_model', '?')} / {model.get('n_heads', '?')} / "
                                                f"{model.get('d_ff', '?')}"),
        ("Vocabulary", f"{model.get('vocab_size', '?')} tokens"),
        ("Longest query", query_limit(model)),
        ("Position table (model size)", f"{model.get('max_positions', '?')} positions"),
        ("Parameters", f"{params / 1e6:.1f} M" if params else "unknown"),
        ("Weights", f"{common.counted(len(files), 'safetensors file')}, "
                    f"{sum(p.stat().st_size for p in files) / MB:.1f} MB" if stored else "unknown"),
    ]
    draft = draft_facts(folder)
    if draft:
        rows.append(("Draft model (draft/)", draft))
    data = config.get("data_stats") or {}
    # checkpoint checks neither: a hand-edited "train": "many" or "averaged_from": 3 stopped the page
    averaged = config.get("averaged_from") if isinstance(config.get("averaged_from"), list) else []
    if type(data.get("train")) is int:
        run = "first averaged run" if averaged else "last run"
        rows.append((f"Training pairs, {run} (see the card)", f"{data['train']:,}"))
    if averaged:
        rows.append(("Weights averaged", f"the mean of {len(averaged)} models' weights (see the card)"))
    return pd.DataFrame(rows, columns=["fact", "value"])


CARD_HEADING_SHIFT = 2  # a card's "# Title" shows as a level-3 heading under the model's own header


# A card's long file names (bench/accuracy/...json) in its tables' cells would not wrap, and the table ran past the
# card's column, its right column cut off (session 65's audit): let code in the cards break anywhere. A table wider
# than the screen (eight columns on a phone) made the whole page slide sideways: it scrolls in a box of its own.
CARD_STYLE = ("<style>[class*='st-key-card_'] code { overflow-wrap: anywhere; }"
              " [class*='st-key-card_'] table { display: block; max-width: 100%; overflow-x: auto; }</style>")
SUMMARY_SECTIONS = ("At a glance", "Limitations")  # the card's opening sections, shown whole; the rest folds away


# A code fence as CommonMark reads one: three or more backticks or tildes, indented at most 3 spaces, then its info
FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


def in_code(lines: list[str]) -> list[bool]:
    """Which of a card's lines are in a fenced code block, its fences included: a `#` line there is no heading. Only
    ``` at the line's start was a fence, and a comment in a ~~~ block, or in an indented ``` one (a list item's), was
    taken for a heading. A fence closes on a run of its own character at least as long, with nothing after it."""
    flags, opened = [], ""
    for line in lines:
        fence = FENCE.fullmatch(line.rstrip())
        if opened:
            flags.append(True)
            if fence and fence[1][0] == opened[0] and len(fence[1]) >= len(opened) and not fence[2].strip():
                opened = ""
        else:
            # a backtick fence's info holds no backtick (```a``` is a code span)
            opened = fence[1] if fence and not (fence[1][0] == "`" and "`" in fence[2]) else ""
            flags.append(bool(opened))
    return flags


def split_card(markdown: str) -> tuple[str, str]:
    """A card's summary (its title and opening sections, SUMMARY_SECTIONS) and the rest, from its first other
    level-2 heading on (headings inside code blocks are no headings)."""
    lines = markdown.splitlines()
    for i, (line, code) in enumerate(zip(lines, in_code(lines))):
        if not code and line.startswith("## ") and line[3:].strip() not in SUMMARY_SECTIONS:
            return "\n".join(lines[:i]), "\n".join(lines[i:])
    return markdown, ""


def show_card(folder: Path, card: Path) -> None:
    """The card's summary on the page, then each other section (measurements, speed, data, the training log) under
    its heading, folded, and sent to the browser only once opened: folded but sent, the two cards' 300 KB of markdown
    were 70% of the page's elements and kept the browser busy for 10-15 s, minutes on a busy machine. No box of its
    own to scroll, which at 200% zoom showed two table rows and on a phone one cell."""
    try:  # utf-8-sig: a byte-order mark (Windows' Notepad) left the title a line reading "# Title"
        text = card.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:  # a card saved in another encoding stopped the page
        text = card.read_bytes().decode("utf-8-sig", errors="replace")
        st.caption("MODEL_CARD.md is not UTF-8 text: the characters that could not be read show as \ufffd.")
    summary, rest = split_card(unloaded_images(text))
    anchors: set[str] = set()
    with st.container(key=f"card_{folder.name}"):
        st.html(CARD_STYLE)
        show_card_text(anchored(card_parts(demoted(summary)), folder.name, anchors))
        for heading, body in card_sections(anchored(card_parts(demoted(rest)), folder.name, anchors)):
            show_card_text([heading])
            if not body:
                continue
            with st.expander(section_label(heading[1], body), key=section_key(folder.name, heading[2]),
                             on_change="rerun") as section:
                if section.open:
                    show_card_text(body)


SECTION_LEVEL = 2 + CARD_HEADING_SHIFT  # a card's "## Section" as the page draws it
Part = tuple[int, str, str]  # a card's piece: (heading level, its text, its anchor), or (0, markdown, "")


def card_sections(parts: list[Part]) -> list[tuple[Part, list[Part]]]:
    """The rest of a card (split_card) as its sections: each section's heading and the parts under it."""
    sections: list[tuple[Part, list[Part]]] = []
    for part in parts:
        if part[0] == SECTION_LEVEL or not sections:  # the rest opens on a section's heading (split_card)
            sections.append((part, []))
        else:
            sections[-1][1].append(part)
    return sections


def section_label(heading: str, body: list[Part]) -> str:
    """The folded section's label: its heading's first words, the part before any parenthesis ("Training (GPU block
    1, ...; CPU runs 27, 28, 31, 40 and 42, the last two averaged)" reads "Training"), and its length."""
    lines = sum(len(text.strip().splitlines()) if level == 0 else 1 for level, text, _ in body)
    return f"Read “{common.md_escape(heading.split(' (')[0] or heading)}” ({common.counted(lines, 'line')})"


def section_key(model: str, anchor: str) -> str:
    """The widget key of a card section's expander, which Streamlit keeps its open or closed state under."""
    return f"card_{model}_section_{anchor}"


def unloaded_images(markdown: str) -> str:
    """Markdown whose images (![alt](address), ![alt][ref]) read as written, code blocks and spans untouched: a
    card's image made the browser fetch its address, a request beyond 127.0.0.1 from whatever card a model folder
    brings (its raw HTML, <img> too, Streamlit shows as text)."""
    lines = markdown.split("\n")
    runs = itertools.groupby(zip(in_code(lines), lines), key=lambda pair: pair[0])  # prose, a fenced block, ...
    blocks = (("\n".join(line for _, line in run), code) for code, run in runs)
    return "\n".join(block if code else _images_outside_code_spans(block) for block, code in blocks)


def _images_outside_code_spans(text: str) -> str:
    """`text` with "![" escaped outside its code spans: a run of backticks opens one, the next run of as many
    closes it; a run never closed is text."""
    pieces = re.split(r"(`+)", text)  # text, a run of backticks, text, ...
    out, i = [], 0
    while i < len(pieces):
        run = pieces[i]
        close = next((j for j in range(i + 2, len(pieces), 2) if pieces[j] == run), None) if i % 2 else None
        if close is not None:  # a code span, as written
            out.append("".join(pieces[i:close + 1]))
            i = close + 1
        else:
            out.append(run if i % 2 else run.replace("![", "!\\["))
            i += 1
    return "".join(out)


HEADING = re.compile(r"(#{1,6}) (.+)")


def card_parts(markdown: str) -> list[tuple[int, str]]:
    """A card cut at its headings (headings inside code blocks are no headings): (level, text) for a heading,
    (0, markdown) for what stands between two."""
    parts: list[tuple[int, str]] = []
    text: list[str] = []
    lines = markdown.splitlines()
    for line, code in zip(lines, in_code(lines)):
        heading = None if code else HEADING.fullmatch(line.rstrip())
        if heading is None:
            text.append(line)
            continue
        if "".join(text).strip():
            parts.append((0, "\n".join(text)))
        text = []
        parts.append((len(heading.group(1)), heading.group(2).strip().rstrip("#").strip()))
    if "".join(text).strip():
        parts.append((0, "\n".join(text)))
    return parts


def card_anchor(model: str, heading: str, taken: set[str]) -> str:
    """A heading's anchor, the model's name in front: Streamlit makes one of a heading's words alone, and the two
    cards' "At a glance", "Limitations", "Model" (...) had one id each for both, so a link to the second card's
    landed on the first's. A heading met twice in one card gets -2, -3."""
    slug = "-".join(re.findall(r"[a-z0-9]+", f"{model} {heading}".lower()))
    anchor, n = slug, 1
    while anchor in taken:
        n += 1
        anchor = f"{slug}-{n}"
    taken.add(anchor)
    return anchor


def heading_html(level: int, text: str, anchor: str) -> str:
    """A card's heading as HTML, with its anchor (data-anchor: the id Streamlit gives it), the text escaped and
    its code spans as code (the only markdown the cards' headings hold)."""
    inner = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))
    return f'<h{level} data-anchor="{html.escape(anchor)}">{inner}</h{level}>'


def anchored(parts: list[tuple[int, str]], model: str, taken: set[str]) -> list[Part]:
    """Each heading of card_parts with its anchor, unique on the page (card_anchor); text parts with none."""
    return [(level, text, card_anchor(model, text, taken) if level else "") for level, text in parts]


def show_card_text(parts: list[Part]) -> None:
    """A card's parts: each heading drawn on its own with its anchor, the text between as markdown (no HTML)."""
    for level, text, anchor in parts:
        if level:
            st.markdown(heading_html(level, text, anchor), unsafe_allow_html=True)
        else:
            st.markdown(text)


def demoted(markdown: str, by: int = CARD_HEADING_SHIFT) -> str:
    """Markdown with every heading `by` levels down (at most level 6), code blocks untouched: a
    model card's title is written for a page of its own, and at level 1 it filled the card's box."""
    lines, given = [], markdown.splitlines()
    for line, code in zip(given, in_code(given)):
        if not code and line.startswith("#"):
            marks = len(line) - len(line.lstrip("#"))
            if line[marks:marks + 1] == " ":
                line = "#" * min(6, marks + by) + line[marks:]
        lines.append(line)
    return "\n".join(lines)


def reliability_rows(cal: calibration.Calibration) -> pd.DataFrame:
    """The reliability chart's points in words, the chart's hover text and this table rounded alike."""
    return pd.DataFrame([{"confidence (mean of the bin)": common.percent(mean), "share right": common.percent(share),
                          "answers": f"{count:,}"} for mean, share, count in cal.reliability])


def reliability_chart(cal: calibration.Calibration) -> go.Figure:
    """Confidence against the share of right answers, per bin of the check queries: on the diagonal
    when the confidence means what it says."""
    mean, share, count = zip(*cal.reliability)
    rows = reliability_rows(cal)
    figure = go.Figure([
        go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line={"dash": "dot", "color": "#888"}, name="perfect"),
        go.Scatter(x=mean, y=share, mode="lines+markers", marker={"size": [6 + 14 * c / max(count) for c in count]},
                   name="confidence", customdata=rows.values.tolist(),
                   hovertemplate="confidence %{customdata[0]}: %{customdata[1]} right of %{customdata[2]} answers"
                                 "<extra></extra>")])
    figure.update_layout(title={"text": "Reliability (held-out queries)", "font": {"size": 14}},
                         xaxis_title="confidence", yaxis_title="share right",
                         height=340, margin={"t": 50, "b": 10}, showlegend=False)
    # ticks every 0.2 on both axes, each range a little past 1 so that its last tick is drawn (in a narrow column
    # plotly ticked the x axis at 0 and 0.5 only)
    figure.update_xaxes(dtick=0.2, range=[0, 1.03])
    figure.update_yaxes(dtick=0.2, range=[0, 1.03])
    return figure


# calibration.KINDS, as the Models page names them
KIND_LABELS = {"greedy": "greedy's answer (greedy, the exact speculative methods and a beam of width 1)",
               "beam": "beam search's answers (beam, sbs-exact)"}


def fit_label(kind: str, augment: int) -> str:
    return f"{kind.capitalize()}, {writings(augment)}"


def fits_table(found: list[tuple[str, int, calibration.Calibration]]) -> pd.DataFrame:
    """Every fit's errors side by side, so that none hides behind a tab: the calibrated confidence's and the model's
    own probability's, and which is lower."""
    return pd.DataFrame([{"answers, writings": fit_label(kind, augment), "calibrated": f"{cal.ece:.3f}",
                          "model's own probability": f"{cal.ece_raw:.3f}",
                          "lower error": "calibrated" if cal.ece < cal.ece_raw else
                          "model's own" if cal.ece > cal.ece_raw else "the same"}
                         for kind, augment, cal in found])


# The int8 check is a paragraph of the cards' "Measured accuracy" section: "sections" sent readers to look for a
# heading no card has
CONFIDENCE_NOTE = ("**Confidence** is calibrated on the validation split, on its own for each kind of answers and for "
                   "answers pooled over writings, whose scores map to right answers differently. The fits were made "
                   "on float32 answers and, judged again on int8 answers (*Faster arithmetic*), they hold: the "
                   "paragraph \"int8 arithmetic\" of the card's \"Measured accuracy\" section. Sampling and lossy "
                   "methods show the model's probability instead.")


def show_calibration(folder: Path, task: str) -> None:
    """Each fit the app uses: per kind of answers (calibration.kind_of) and writings read, its errors in one table
    and its figures and reliability chart in a tab of its own, the one the Predict page opens on for `task` first."""
    # The page's own, from the folder's fit files: without a heading it read as more of the card's last section
    # ("Training", whose folded log ends just above)
    st.subheader("Confidence calibration", anchor=calibration_anchor(folder.name))
    fits = [(kind, augment, calibration.load(folder, augment, kind))
            for kind in calibration.KINDS for augment in (1, common.APP_AUGMENT)]
    found = [(kind, augment, cal) for kind, augment, cal in fits if cal is not None]
    opens_on = (calibration.kind_of(TASK_DEFAULTS[task][0]), common.APP_AUGMENT) if task in TASK_DEFAULTS else None
    found.sort(key=lambda fit: fit[:2] != opens_on)  # the fit of what the Predict page opens on first
    if not found:
        st.caption(f"Confidence: not calibrated ({unused_fits_note(folder, fits)}). The app shows the model's own "
                   "probability instead.")
        return
    st.markdown(CONFIDENCE_NOTE)
    worse = [(kind, augment, cal) for kind, augment, cal in found if cal.ece > cal.ece_raw]
    if worse:
        which = "; ".join(f"{fit_label(kind, augment).lower()}: {cal.ece:.3f} against {cal.ece_raw:.3f}"
                          for kind, augment, cal in worse)
        st.markdown(f"Calibration does not always help: where the model's own probability already fits, the "
                    f"calibrated confidence judged on other queries can be a little further off ({which}).")
    st.caption("Expected calibration error of each fit, judged on held-out queries (lower is better):")
    st.table(common.as_typed(fits_table(found)), hide_index=True)
    missing = [f"{KIND_LABELS[kind]}, {writings(augment)}" for kind, augment, cal in fits if cal is None]
    if missing:
        st.caption("Not calibrated (these show the model's probability): " + "; ".join(missing) + ".")
    # The open tab alone is drawn (a tab chosen reruns the page): the hidden tabs' charts, three a model, were the
    # largest share of the browser's time on this page after the cards' folded sections
    tabs = st.tabs([fit_label(kind, augment) for kind, augment, _ in found], key=fits_key(folder.name),
                   on_change="rerun")
    for tab, (kind, augment, cal) in zip(tabs, found):
        if tab.open:
            with tab:
                show_fit(folder, cal, f"For {KIND_LABELS[kind]} read in {writings(augment)}")


def unused_fits_note(folder: Path, fits: list[tuple[str, int, calibration.Calibration | None]]) -> str:
    """Why a model with no usable fit has none, and what to do: its fit files (none, or ones calibration.load passed
    over) were fitted for other weights, or cannot be read as a fit (a file cut short by an interrupted copy was said to
    be fitted for other weights)."""
    files = [folder / calibration.file_name(augment, kind) for kind, augment, _ in fits]
    files = [path for path in files if path.is_file()]
    if not files:
        return "run `molspec calibrate` to fit one"
    weights = calibration.weights_fingerprint(folder)
    unread = [path.name for path in files if calibration.recorded_fingerprint(path) in (None, weights)]
    if not unread:
        return "its calibration was fitted for other weights; run `molspec calibrate` again"
    which = ", ".join(unread)
    return (f"{common.md_escape(which)} cannot be read as a calibration of this model's answers (damaged, or written "
            "for other answers or by another version); run `molspec calibrate` again")


def calibration_anchor(model: str) -> str:
    """The calibration heading's anchor: the model's name first, as the cards' (card_anchor), and "--", which no
    card heading's anchor holds, so that a card's own "Confidence calibration" cannot take it."""
    return f"{model}--confidence-calibration"


def fits_key(model: str) -> str:
    """The widget key of a model's calibration tabs, which Streamlit keeps the chosen tab under."""
    return f"fits_{model}"


def writings(augment: int) -> str:
    return "1 writing" if augment == 1 else f"{augment} writings"


def fit_text(cal: calibration.Calibration, opening: str) -> str:
    """A fit's line: the queries whose answers fitted and judged it (fitted_on, judged_on), and those asked where
    some gave no answer; the queries asked alone (n_fit, n_check) read as if every one had counted."""
    asked = ("" if (cal.fitted_on, cal.judged_on) == (cal.n_fit, cal.n_check) else
             f" (of the {cal.n_fit:,} and {cal.n_check:,} asked; the others gave no answer to count: refused, a "
             "target RDKit cannot read, or no valid answer)")
    return (f"{opening}, fitted with {common.method_label(cal.method)} ({cal.n_best}-best) on {cal.fitted_on:,} "
            f"queries, judged on {cal.judged_on:,} others{asked}: expected calibration error {cal.ece:.3f}, "
            f"against {cal.ece_raw:.3f} for the model's own probability.")


def show_fit(folder: Path, cal: calibration.Calibration, opening: str) -> None:
    st.markdown(fit_text(cal, opening))
    first, rest = cal.ece_by_rank
    if cal.rest_edges and first is not None and rest is not None:
        st.markdown(f"The first answer to a query and the ones below it have a map each (their scores mean "
                    f"different chances): expected calibration error {first:.3f} for first answers, {rest:.3f} "
                    f"for the rest.")
    if cal.reliability:
        st.plotly_chart(reliability_chart(cal), key=f"reliability_{folder.name}_{calibration.kind_of(cal.method)}_"
                                                      f"{cal.augment}")
        with st.expander("The chart's points as a table"):
            st.table(common.as_typed(reliability_rows(cal)), hide_index=True)  # ">99%" was a quote


# A model the page showed and the sidebar never offered (a config.json naming no task, in a folder of another name)
NOT_OFFERED = ("The sidebar offers this model under no task: it offers a model under the task its config.json names "
               "(\"task\": \"forward\" or \"retro\") or its folder is named after.")


def main() -> None:
    st.title("Models")
    st.caption("The checkpoints this app serves: what they were trained on and how well they do.")
    root = common.models_dir()
    subfolders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []
    folders = [folder for folder in subfolders if (folder / "config.json").is_file()]
    if not folders:  # said once: the note on each task's missing model below would say it again
        st.warning(common.md_escape(common.no_model_text(common.TASKS[0])), icon=":material/warning:")
    for folder in folders:
        st.header(common.md_escape(folder.name), divider="gray")  # a folder's name is anyone's text
        try:  # what the sidebar's loading would refuse, said here rather than shown as a working model's facts
            config = checkpoint.inspect_folder(folder).config
        except checkpoint.CheckpointError as exc:
            st.error(f"This model does not load, so the app cannot use it: {common.md_escape(str(exc))}",
                     icon=":material/error:")
            continue
        task = config.get("task", "")
        st.caption(TASK_CAPTIONS.get(task, f"Task: {common.md_escape(task or 'unknown')}"))
        if not any(folder.name in common.models_for_task(name) for name in checkpoint.MODEL_TASKS):
            st.warning(NOT_OFFERED, icon=":material/warning:")
        # One column: the card's summary beside the facts left the facts' column empty for a screen's height, and
        # the calibration's four tabs did not fit in a column of their own
        # st.table reads its cells as markdown: a config's task "[offer](a web address)" showed as a link
        st.table(common.as_typed(facts(folder, config)), hide_index=True, hide_header=True, border="horizontal")
        card = folder / "MODEL_CARD.md"
        if card.is_file():
            show_card(folder, card)
        else:
            st.info("This model has no model card yet (MODEL_CARD.md is missing from its folder).",
                    icon=":material/info:")
        show_calibration(folder, task)
    strays = [folder.name for folder in subfolders if folder not in folders]
    if strays:  # a model folder copied without its config.json was missing from the page, and no word said why
        st.caption(common.md_escape(f"Not models (no config.json, which every model folder holds), so not shown: "
                                    f"{', '.join(strays)}."))
    # Each task without a model, in the folder the app reads (MOLSPEC_MODELS_DIR): it said "no retrosynthesis model is
    # shipped yet ... until models/retro/ appears" wherever the models were, and under "No models found" said it again
    missing = dict.fromkeys(common.no_model_text(task) for task in common.TASKS
                            if folders and not common.models_for_task(task))
    for text in missing:
        st.info(common.md_escape(text), icon=":material/info:")


if __name__ == "__main__":  # Streamlit runs a page as __main__; tests import its functions
    main()
