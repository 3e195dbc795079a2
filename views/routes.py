"""Routes: a target molecule in, multi-step routes to building blocks in a stock out.

syntheseus searches (Retro* or MCTS) with the retrosynthesis model as its single-step model; the page
shows the solved routes best first as trees of structures, marks what is in stock, lists the compounds
to procure, and exports the routes as JSON and CSV.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException

from molspec_core import depict
from molspec_core.checkpoint import CheckpointError
from molspec_core.io import (CSV_SUFFIXES, DECOMPRESSORS, MACRO_WORKBOOK_SUFFIX, OLD_WORKBOOK_SUFFIX,
                             OPEN_DOCUMENT_SUFFIX, SD_FILE_SUFFIXES, SMILES_FILE_SUFFIXES, STOCK_COLUMNS,
                             WORKBOOK_SUFFIX, InputFileError, csv_bytes, query_format, workbook_bytes)
from molspec_core.planning import (ALGORITHMS, ROUTE_COLUMNS, ExpansionCounts, PlanResult, PlanSettings, Route,
                                   RouteMolecule, RouteStep, SearchStats, SearchStopped, Stock, failure_note,
                                   lacks_text, load_stock, no_route, plan, route_rows, routes_json,
                                   starting_materials_text, stock_from_upload, stock_name, stock_read_from)
from molspec_core.words import counted
from views import common

log = logging.getLogger(__name__)
ALGORITHM_LABELS = {"retro*": "Retro* (best first)", "mcts": "MCTS (Monte Carlo tree search)"}
MOLECULE_SIZE = (220, 150)  # pixels of each structure in a route
# The stock file chosen, (name, content), kept in the session for the searches to come: Streamlit cannot put a file
# back in an uploader, which comes back empty after a page switch, and Find routes then used the default stock
KEPT_STOCK = "route_stock_kept"
# The box naming the stock file's SMILES column (an SD file's data field), drawn for a file that has columns: a vendor
# CSV whose SMILES are under a name of its own was told to "give that column's name", which the page had no box for.
# Its value is kept under STOCK_COLUMN_KEPT: Streamlit forgets a widget's state on another page.
STOCK_COLUMN = "route_stock_column"
STOCK_COLUMN_KEPT = "route_stock_column_kept"
COLUMN_KINDS = ("csv", "xlsx", "sdf")  # the stock files whose SMILES a column (or data field) names (io.query_format)
StockFile = tuple[str, bytes, str | None]  # a stock file chosen: its name, content, and the column named or None
# The search under way (Unfinished); still set on a later run, the search never ended: a page visit or Stop ended the
# script run that searched (Streamlit raises no Exception there), and its routes were never made, or are in it
UNFINISHED = "route_unfinished"
# The routes on screen when a search failed (a mistyped target, a stock file that cannot be read): gone from the page
# under the error, as they belong to another target, but kept, one press away, where they were lost
ROUTES_BEFORE = "route_routes_before"
TARGET_FILE_REFUSAL = "route_target_file_refusal"  # why the target file in the uploader cannot be one (open_target)
DEFAULT_STOCK_TEXT = "the default stock, reactants of at least 2 USPTO-50K training reactions"
# What a stock may be named, as load_stock reads it (io's suffixes: the uploader refused stock.smiles and stock.sd,
# which the command line reads); .xls and .ods are let through to be told how to save them (io refuses them, saying so)
STOCK_FILE_TYPES = [suffix.lstrip(".") for suffix in (*SMILES_FILE_SUFFIXES, ".txt", *SD_FILE_SUFFIXES, *CSV_SUFFIXES,
                                                      WORKBOOK_SUFFIX, MACRO_WORKBOOK_SUFFIX, OLD_WORKBOOK_SUFFIX,
                                                      OPEN_DOCUMENT_SUFFIX, *DECOMPRESSORS)]
ROUND_TRIP_LABEL = "Round-trip check of each step with the forward model"  # the form's toggle, which a refusal names
CHECK_ATOMS_LABEL = "Skip steps whose reactants lack atoms of the product"  # the form's toggle, which a warning names
# The form's fields and what they open on; their values are kept across page switches (common.kept_in_form)
FORM_DEFAULTS = {"route_target": "", "route_time": 30, "route_algorithm": ALGORITHMS[0],
                 "route_max_steps": PlanSettings.max_steps, "route_round_trip": True, "route_check_atoms": True}
# The step limit's largest value on the page: 5 is the default; routes longer than 10 steps are rarely planned this way,
# and a search's tree grows with its depth (the command line's --max-steps takes any)
MAX_PAGE_STEPS = 10
STEP_LIMIT_LABEL = "Step limit"


@dataclass(frozen=True)
class Shown:
    """The search on screen: its result (which records how it was made, PlanResult.settings) and the model."""
    result: PlanResult
    model: str


@dataclass
class Unfinished:
    """A search under way, set in the session before it starts. Where Stop ends it, the routes it had found are put
    here (`found`) for the next run to show: a stopped run can write no session state (each write raises Streamlit's
    stop again), and they were lost. `ended`: the script run searching has left the search, its routes (if any) put
    in `found` (watch_search's cue)."""
    target: str
    found: Shown | None = None
    ended: bool = False


@st.cache_resource(show_spinner="Reading the stock…")
def default_stock() -> Stock:
    return load_stock()


@st.cache_resource(show_spinner="Reading the stock file…", max_entries=4)
def uploaded_stock(name: str, data: bytes, column: str | None = None) -> Stock:
    """An uploaded stock, read once per file content and column: a 1.3 MB file took 15 s to read, again on every
    search, under a greyed page with no word of what it was doing. Keyed by the bytes (Streamlit hashes them), so
    another file of the same name is read afresh; never changed after, so sessions may share it."""
    return stock_from_upload(name, data, column)


def retro_model(cfg: common.Settings) -> str | None:
    """The retrosynthesis model folder: the sidebar's when its task is retrosynthesis, else the one its list opens on
    (common.default_model: the shipped retro; the first by name made a_small beside it the model without a word)."""
    if cfg.task == "retro" and cfg.model:
        return cfg.model
    names = common.models_for_task("retro")
    return common.default_model(names, "retro") if names else None


def other_retro_models(model: str) -> str:
    """What to do where the retrosynthesis model the page took does not load and others are installed: choose one in
    the sidebar. The page said only that it did not load, and a user's broken copy sorted before the shipped retro
    kept every search from the page."""
    others = [name for name in common.models_for_task("retro") if name != model]
    if not others:
        return ""
    listed = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return f". To plan with another ({listed}), choose it in the sidebar under the Retrosynthesis task."


def is_stand_in(model: str) -> bool:
    """Whether the model's card calls it a stand-in (a CPU-trained model far below published accuracy)."""
    try:
        # errors="replace": a card saved in Latin-1 stopped the page once a search had found its routes
        card = (common.models_dir() / model / "MODEL_CARD.md").read_text(encoding="utf-8", errors="replace")
        return "stand-in" in card[:2000]
    except OSError:
        return False


# ---- search -------------------------------------------------------------------------------------


def forward_model() -> str | None:
    """The forward model that checks each step round trip: the one the sidebar's list opens on (common.default_model,
    the shipped forward before a_small), or None."""
    names = common.models_for_task("forward")
    return common.default_model(names, "forward") if names else None


def round_trip_note(cfg: common.Settings, on: bool) -> str:
    """What the round-trip check of the next search will be, for the caption under the form. The toggle is the
    page's own (the sidebar shows its round-trip settings on the retrosynthesis task only); its top-k is the
    sidebar's, 1 where the sidebar shows none."""
    forward = forward_model()
    if not on:
        return "No round-trip check."
    if forward is None:
        folder = common.md_escape(str(common.models_dir() / "forward"))  # the caption reads markdown
        return f"No round-trip check: no forward model is installed ({folder} is missing)."
    k = cfg.round_trip_k
    within = "as its first answer" if k == 1 else f"within its top {k}"
    source = " (the sidebar's top-k)" if cfg.task == "retro" and cfg.round_trip_model else ""
    return (f"Each step is checked round trip with the forward model {common.md_escape(forward)}: ✓ when it gives "
            f"the product back {within}{source}.")


def progress_text(elapsed_s: float, molecules: int, time_limit_s: float) -> str:
    """The progress bar's line. Before the first expansion returns (the slowest: the target is the largest
    molecule, and the model loads its caches) it said "Searching…" and nothing more for many seconds."""
    if molecules == 0:
        return f"Expanding the target: asking the model for its reactants… (time limit {time_limit_s:g} s)"
    return (f"Searching… {counted(molecules, 'molecule')} expanded, {elapsed_s:.0f} of "
            f"{time_limit_s:g} s")


def search(target: str, model: str, time_limit_s: float, algorithm: str, round_trip: bool, check_atoms: bool,
           stock_file: StockFile | None, augment: int, cfg: common.Settings,
           max_steps: int = PlanSettings.max_steps) -> None:
    """Run the search with a progress bar, in the stock file given (chosen_stock) or the default stock; the
    result (or the reason there is none) goes to the session, and the page is drawn afresh."""
    ss = st.session_state
    ss["route_error"] = None
    # From here until the search ends: a stop while the stock is read or a model loads (a first search's seconds)
    # left no word either, and "Reading the stock…" stood on the page
    ss[UNFINISHED] = unfinished = Unfinished(target)  # the routes shown before stay until this search ends
    watch_search(unfinished)
    try:
        run_search(unfinished, target, model, time_limit_s, algorithm, round_trip, check_atoms, stock_file, augment,
                   cfg, max_steps)
    finally:
        unfinished.ended = True  # after `found`: the watcher then draws the page with them
    # The page drawn afresh, by a script run that draws no watcher: its timer runs until one does, and each of its
    # runs dropped the file a download button makes on its click (Download Excel failed, the file gone: 404)
    st.rerun()


def run_search(unfinished: Unfinished, target: str, model: str, time_limit_s: float, algorithm: str,
               round_trip: bool, check_atoms: bool, stock_file: StockFile | None, augment: int,
               cfg: common.Settings, max_steps: int = PlanSettings.max_steps) -> None:
    ss = st.session_state
    try:
        stock = uploaded_stock(*stock_file) if stock_file is not None else default_stock()
    except ValueError as exc:  # a file's reason is under the stock file box (show_stock)
        failed(stock_refusal(stock_file[0]) if stock_file is not None else f"Cannot read the default stock: {exc}")
        return
    forward_name = forward_model() if round_trip else None
    try:
        predictor = cfg.predictor(model)  # in the sidebar's arithmetic
    except CheckpointError as exc:
        failed(f"Cannot search: {exc}")
        return
    try:
        forward = cfg.predictor(forward_name) if forward_name else None
    except CheckpointError as exc:  # a forward model folder that does not load stopped the search on a traceback,
        # then said 'Cannot search:' and the file's fault alone, where the check is optional (the form's toggle)
        failed(f"Cannot search with the round-trip check: the forward model {forward_name} does not load: {exc}. "
               f'Until it loads, turn off "{ROUND_TRIP_LABEL}" to search without it.')
        return
    bar = st.progress(0.0, text=progress_text(0.0, 0, time_limit_s))
    note = st.caption(STOP_NOTE)

    def progress(elapsed_s: float, molecules: int) -> None:
        try:
            bar.progress(min(1.0, elapsed_s / time_limit_s), text=progress_text(elapsed_s, molecules, time_limit_s))
        # Stop, a page visit, or a widget changed outside the form: Streamlit's BaseException, raised here, lost the
        # search and every route it had found (four minutes' of them). SearchStopped ends it keeping them.
        except ScriptControlException as stop:
            raise SearchStopped() from stop

    settings = PlanSettings(check_atoms=check_atoms, augment=augment, round_trip_k=cfg.round_trip_k,
                            max_steps=max_steps)
    try:
        shown = Shown(plan(target, predictor, stock, time_limit_s, algorithm, forward=forward, settings=settings,
                           progress=progress), model)
        # Kept for the next run before any call of Streamlit's: a Stop pressed while the routes were read out of the
        # search (the bar full) raised at the write below, and every route was lost, the page saying it made none
        unfinished.found = shown
        ss["routes"] = shown
    except SearchStopped as stopped:
        partial: PlanResult | None = getattr(stopped, "partial_result", None)
        if partial is not None and partial.routes:  # none: the routes shown before stay (show_unfinished)
            unfinished.found = Shown(partial, model)
        raise stopped.__cause__ from None  # Streamlit's own, which ends the run as it asked
    except ValueError as exc:
        failed(f"Cannot plan for this target: {exc}")
    except Exception as exc:  # noqa: BLE001  (bad input is a ValueError above; this is a bug)
        log.exception("route search failed")
        failed(f"The search failed ({type(exc).__name__}); please report it.")
    else:
        ss.pop(ROUTES_BEFORE, None)
        ss.pop(UNFINISHED, None)  # before the next st call, where a Stop would leave it, and its routes unsaid
    finally:
        bar.empty()
    note.empty()  # neither is reached where the script run was stopped


STOP_NOTE = ("Stop (top right) ends the search and keeps the routes it has found: the page then shows them, and says "
             "where the search stopped.")
WATCH_EVERY_S = 1.0  # how often a search's watcher looks whether the script run searching has ended (watch_search)


@st.fragment(run_every=WATCH_EVERY_S)
def watch_search(unfinished: Unfinished) -> None:
    """A search's watcher, drawn as it starts: once the script run searching has been stopped (its
    Unfinished ended, and still the session's: a search that ends takes it off), the whole page is drawn again,
    with the routes the search had found and where it stopped. The toolbar's Stop ends a script run and starts none
    after it: the bar stood frozen mid-search ("Searching… 4 molecules expanded, 7 of 30 s") under a note saying to
    press R, and nothing said the search had ended. Its timer ends with the next full script run (which draws no
    watcher). A fragment's timed run waits for the script run under way, so it never cuts a search short."""
    if unfinished.ended and st.session_state.get(UNFINISHED) is unfinished:
        st.rerun(scope="app")


def failed(error: str) -> None:
    """A search that fails says why, and shows no other target's routes under its error; the routes it takes off
    the page are kept for show_routes_before (a typo in the target wiped a five-minute search)."""
    ss = st.session_state
    ss.pop(UNFINISHED, None)
    if "routes" in ss:
        ss[ROUTES_BEFORE] = ss.pop("routes")
    ss["route_error"] = error


def stock_refusal(name: str) -> str:
    """Why a search refused a stock file, short: show_stock gives the reason, and the search repeated it whole,
    a second error box saying the same."""
    return f"Not searched: the stock file {name} cannot be used (why: under the stock file box above)."


def forget_stock_refusal() -> None:
    """A search's refusal of the stock file goes with the file: it stayed, naming a file no longer chosen, under the
    file chosen next."""
    ss = st.session_state
    kept = ss.get(KEPT_STOCK)
    if kept is not None and ss.get("route_error") == stock_refusal(kept[0]):
        ss["route_error"] = None


def show_routes_before() -> None:
    ss = st.session_state
    ss["routes"] = ss.pop(ROUTES_BEFORE)
    ss["route_error"] = None


def take_unfinished_routes() -> None:
    """The routes a stopped search had found (Unfinished.found) become the routes shown, as a finished search's."""
    ss = st.session_state
    unfinished: Unfinished | None = ss.get(UNFINISHED)
    if unfinished is not None and unfinished.found is not None:
        ss["routes"] = unfinished.found
        ss.pop(ROUTES_BEFORE, None)
        ss.pop(UNFINISHED)


def unfinished_message(target: str, routes_shown: bool) -> str:
    """What the page says where a search was stopped before it ended (UNFINISHED): it had said nothing, and the
    routes shown before it were gone."""
    return (f"The search for {target} was stopped before it ended (Stop, leaving the page, or changing anything "
            "outside the search's form, in the sidebar too, ends it), so it made no routes; press Find routes to "
            "search again. "
            + ("The routes below are from the search before it." if routes_shown else ""))


# ---- results ------------------------------------------------------------------------------------


def stock_badge(molecule: RouteMolecule, step_of: dict[RouteStep, int]) -> None:
    """In stock, or the number of the step that makes the molecule where it stands (its made_by: two branches may
    make one intermediate two ways, and a badge keyed by the molecule named the same step for both)."""
    if molecule.in_stock:
        st.badge("In stock", color="green", icon=":material/check:")
    elif molecule.made_by in step_of:
        st.badge(f"Not in stock: made in step {step_of[molecule.made_by]}", color="orange")
    else:
        st.badge("Not in stock", color="orange")


def show_molecule(molecule: RouteMolecule, step_of: dict[RouteStep, int],
                  colours: dict[int, str] | None = None) -> None:
    svg = depict.smiles_svg(molecule.smiles, *MOLECULE_SIZE, colours)
    if svg:
        st.image(svg, alt=depict.structure_alt(molecule.smiles, colours))
    stock_badge(molecule, step_of)
    st.caption(common.md_escape(common.short(molecule.smiles, 60)))


def step_facts(step: RouteStep) -> str:
    facts = [f"model rank {step.model_rank}", f"probability {route_probability(step.score)}"]
    if step.confidence is not None:
        facts.append(f"confidence {common.percent(step.confidence)}")
    if step.round_trip is not None:
        facts.append("round trip ✓" if step.round_trip else "round trip ✗")
    if step.stereo:
        facts.append("stereo ⚠")
    if step.missing:
        facts.append("lacks atoms ⚠")
    return " · ".join(facts)


CENTRE_KEY = ("Steps are read backwards from the target: the synthesis runs from the deepest step up. A solid red "
              "ring marks an atom whose bonds change in the step, a dashed grey ring an atom that leaves; both are "
              "estimated (the model writes no atom map: each product atom is traced to the reactant it shares the "
              "largest substructure with).")


STEREO_KEY = ("Stereo ⚠ marks a step that sets a stereocentre or a double bond's E/Z geometry of its product (one its "
              "reactants do not carry specified: it needs a stereoselective reaction or a separation), or inverts the "
              "centre or isomerizes the double bond (a reactant carries it the other way). Both are estimated by "
              "tracing the product's atoms to the reactants by the largest substructure they share; check the step's "
              "stereochemistry as a chemist.")


def made_from(step: RouteStep) -> str:
    """A step in a line of text: where a phone stacks its pictures, the arrow between them no longer says which
    molecules are made from which."""
    return f"{step.product} is made from {' + '.join(r.smiles for r in step.reactants)}"


SMALLEST_PERCENT = 1e-6  # 0.0001%: below it a route's probability reads "<0.0001%"


def route_probability(score: float) -> str:
    """A route's or step's probability as a percentage always: common.format_probability writes one below 0.1% in
    scientific notation, and a route list read "probability 0.1%" beside "probability 4.5e-04". Below 0.1% two
    significant figures ("0.045%"), below SMALLEST_PERCENT "<0.0001%"; the JSON and CSV keep the score itself."""
    probability = math.exp(score)
    if probability >= 0.001:
        return common.format_probability(score)
    if probability < SMALLEST_PERCENT:
        return f"<{SMALLEST_PERCENT * 100:.4f}%"
    return f"{float(f'{probability * 100:.2g}'):f}".rstrip("0") + "%"


def show_route(rank: int, route: Route) -> None:
    steps = route.steps()
    step_of = {step: number for number, (_, step) in enumerate(steps, start=1)}  # steps() lists each once
    flagged = sum(bool(step.stereo) for _, step in steps)
    lacking = sum(bool(step.missing) for _, step in steps)  # in the title too: routes below the first are folded
    # a step the forward model does not give back was marked in its own small caption alone
    not_back = sum(step.round_trip is False for _, step in steps)
    title = (f"Route {rank}: {counted(route.n_steps, 'step')}, "
             f"probability {route_probability(route.score)}"
             + (f" · stereo ⚠ in {counted(flagged, 'step')}" if flagged else "")
             + (f" · lacks atoms ⚠ in {counted(lacking, 'step')}" if lacking else "")
             + (f" · round trip ✗ in {counted(not_back, 'step')}" if not_back else ""))
    with st.expander(title, expanded=rank == 1):
        st.markdown("**Compounds to procure:** " + common.md_escape(starting_materials_text(route)))
        st.caption(CENTRE_KEY)
        if flagged:
            st.caption(STEREO_KEY)
        for number, (depth, step) in enumerate(steps, start=1):
            on_product, on_reactants = depict.step_centre_colours([r.smiles for r in step.reactants], step.product)
            st.caption(f"Step {number} · depth {depth} · {common.md_escape(step_facts(step))}  \n"
                       + common.md_escape(made_from(step)))
            for flag in step.stereo:
                st.warning(common.md_escape(f"Stereo: this step {flag}."), icon=":material/warning:")
            if step.missing:  # kept with the atom check off: it was shown as any other step
                st.warning(f"This step's reactant set {common.md_escape(lacks_text(step))}: as written it cannot "
                           f"make the product (kept: *{CHECK_ATOMS_LABEL}* was off).", icon=":material/warning:")
            widths = ([0.35 * (depth - 1)] if depth > 1 else []) + [1, 0.3] + [1] * len(step.reactants)
            columns = st.columns(widths, vertical_alignment="center")
            columns = columns[1:] if depth > 1 else columns  # the first one only indents the step
            with columns[0]:
                show_molecule(RouteMolecule(step.product, step.product_in_stock), {}, on_product)
            with columns[1]:  # no heading (a screen reader listed each arrow as one); app.py's style sizes it, and
                # turns it to point up where the columns stack on a phone
                st.container(key=f"made_from_{rank}_{number}").markdown("⇐")
            for column, reactant, colours in zip(columns[2:], step.reactants, on_reactants):
                with column:
                    show_molecule(reactant, step_of, colours)


def made_with(result: PlanResult) -> str:
    """How the routes on screen were made, from the result itself: the sidebar and the form may have changed
    since, and the page must not label old routes with new settings."""
    settings, stats = result.settings, result.stats
    reading = f"{common.method_label(settings.method).lower()}, {settings.n_best} answers per molecule"
    if settings.augment > 1:
        reading += f", each read in {settings.augment} writings"
    if result.dtype != "float32":
        reading += f", {result.dtype} arithmetic"
    if result.forward_model is None:
        checked = "no round-trip check"
    else:
        within = "as its first answer" if settings.round_trip_k == 1 else f"within its top {settings.round_trip_k}"
        checked = f"round trip checked by {result.forward_model} (✓: the product back {within})"
    atoms = "steps whose reactants lack atoms of the product skipped" if settings.check_atoms else \
        "steps whose reactants lack atoms of the product kept"
    stock = stock_name(result.stock, result.stock_read_from)
    return common.md_escape(f"This search: {ALGORITHM_LABELS[stats.algorithm]}, time limit {stats.time_limit_s:g} s, "
                            f"step limit {settings.max_steps}; model {result.model} "
                            f"({reading}); {checked}; {atoms}; stock {stock}.")


def show_stats(result: PlanResult) -> None:
    stats, counts = result.stats, result.stats.counts
    # side by side, wrapping where the page is narrow: in five columns, 1,024 pixels wide with the sidebar open,
    # "Molecules expanded" and "Answers used" were cut to "Molecules …" and "Answers u…" (as the Predict page's figures)
    figures = st.container(horizontal=True, wrap=True, gap="medium", key="route_figures")
    figures.metric("Search time", f"{stats.time_s:.1f} s", help=f"Time limit {stats.time_limit_s:g} s", width="content")
    unexpanded = f"; {counts.failed:,} more could not be expanded" if counts.failed else ""
    figures.metric("Molecules expanded", counts.molecules, width="content",
                   help=f"Molecules the single-step model gave answers for, one call each{unexpanded}")
    # a share, not "1081 of 1320"; never rounded to 100% where some were not used, nor to 0% where some were
    figures.metric("Answers used", common.percent(counts.kept / counts.answers) if counts.answers else "none",
                   width="content",
                   # "sane ones lacked atoms": the Predict page flags an answer that lacks atoms of the product
                   help=f"{counts.kept:,} of the {counts.answers:,} reactant sets the model proposed could be "
                        f"used: invalid answers and ones flagged for another reason are skipped; "
                        f"{counts.missing_atoms:,} lacked atoms of their product, skipped while *{CHECK_ATOMS_LABEL}* "
                        "is on")
    figures.metric("Search nodes", stats.nodes, width="content")
    figures.metric("Routes", len(result.routes), width="content",
                   help=f"The best routes the search found, {result.max_routes} at most: it may have found more")
    st.caption(f"{ALGORITHM_LABELS[stats.algorithm]} · {counted(stats.iterations, 'iteration')} · "
               f"{counted(counts.decoder_calls, 'decoder call')}{round_trip_count(counts, result.forward_model)} · "
               f"stock {common.md_escape(stock_name(result.stock, result.stock_read_from))} "
               f"({stock_size(result.stock_size, result.stock_unreadable)})")


def round_trip_count(counts: ExpansionCounts, forward_model: str | None) -> str:
    """' · round trip ✓ for 7 of the 12 usable steps' for the stats caption: steps (reactant sets the search could
    use), not decoder calls; nothing without a forward model. Where no step was kept it said '0 of the 0'."""
    if forward_model is None:
        return ""
    if counts.kept == 0:
        return " · no usable step to check round trip"
    return f" · round trip ✓ for {counts.round_trips:,} of the {counted(counts.kept, 'usable step')}"


def stock_size(molecules: int, unreadable: int) -> str:
    """'6,148 molecules', '1 molecule; 2 unreadable entries left out': a stock's size as the page says it."""
    left_out = f"; {unreadable:,} unreadable {'entry' if unreadable == 1 else 'entries'} left out" if unreadable else ""
    return f"{counted(molecules, 'molecule')}{left_out}"


def no_route_message(stats: SearchStats) -> str:
    """Why no route was found, with what might help: a longer time where the time ran out, and not where the
    search ran out of molecules to expand (it stopped at 11 s of 30 and was told to try a longer time); nothing where
    the model proposed no usable step from the target (a 400-carbon chain was told a larger stock might help)."""
    reason = no_route(stats)
    if stats.ran_out and not stats.counts.kept:  # no usable step from the target: no_route says nothing would help
        return f"{reason[0].upper()}{reason[1:]}."
    # the step limit named where it cut the search: set on the form, 1 said only 'A larger stock might help'
    advice = ("A higher step limit or a larger stock might help." if stats.ran_out and stats.step_limit_reached
              else "A larger stock might help." if stats.ran_out
              else "Try a longer time, the other search, or a larger stock.")
    return f"{reason[0].upper()}{reason[1:]}. {advice}"


def show_outcome(result: PlanResult) -> None:
    """Routes found, none, the target in stock, and molecules the model could not expand: one message each."""
    stats, counts = result.stats, result.stats.counts
    if result.routes:
        in_stock = " The target itself is in the stock; these routes make it anyway." if stats.target_in_stock else ""
        found = (f" before the search was stopped, {stats.search_s:.1f} s into its {stats.time_limit_s:g} s (Stop, "
                 "leaving the page, or changing anything outside the search's form ends it)" if stats.stopped_by
                 else "")
        # As many as the search keeps: aspirin's 8-second search found over 200, and '10 routes found' read as all
        kept = (f" These are the best {result.max_routes}, the most a search keeps: it may have found more."
                if len(result.routes) == result.max_routes else "")
        st.success(f"{counted(len(result.routes), 'route')} to the stock found{found}, best "
                   f"first (the highest product of the steps' probabilities).{kept}{in_stock}",
                   icon=":material/route:")
    elif stats.target_in_stock:
        st.info(f"The target itself is in the stock: procure it as it is. {no_route_message(stats)}",
                icon=":material/check:")
    else:
        st.warning(no_route_message(stats), icon=":material/search_off:")
    if counts.failed:
        text, alarming = failure_message(counts)
        if alarming:
            st.warning(text, icon=":material/warning:")
        else:
            st.caption(text)


def failure_message(counts: ExpansionCounts) -> tuple[str, bool]:
    """planning.failure_note, the molecule named in it escaped for the page's markdown."""
    return failure_note(counts, common.md_escape)


def routes_workbook(result: PlanResult) -> bytes:
    """The CSV's rows as an Excel workbook whose one sheet is called "routes" (it was "predictions")."""
    return workbook_bytes(ROUTE_COLUMNS, route_rows(result), "routes")


def show(shown: Shown) -> None:
    result = shown.result
    common.section("Target")
    svg = depict.smiles_svg(result.target, 420, 200)
    if svg:
        st.image(svg, alt=depict.structure_alt(result.target))
    st.code(result.target, language=None, wrap_lines=True)
    for note in result.target_notes:
        st.info(common.md_escape(note), icon=":material/info:")
    show_outcome(result)
    st.caption(made_with(result))
    if is_stand_in(shown.model):
        st.caption("The retrosynthesis model is a stand-in trained on a CPU, far below published accuracy (its card "
                   "on the Models page gives the figures): expect few routes, and check every step as a chemist.")
    show_stats(result)
    stem = "routes"
    with st.container(horizontal=True):
        st.download_button("Download JSON", data=json.dumps(routes_json(result), indent=2), file_name=f"{stem}.json",
                           mime="application/json", on_click="ignore", icon=":material/download:")
        st.download_button("Download CSV", data=csv_bytes(ROUTE_COLUMNS, route_rows(result)),
                           file_name=f"{stem}.csv", mime="text/csv", on_click="ignore", icon=":material/download:")
        st.download_button("Download Excel", data=lambda: routes_workbook(result),
                           file_name=f"{stem}.xlsx", mime=common.WORKBOOK_MIME, on_click="ignore",
                           icon=":material/download:",
                           help=f"The CSV's rows as an Excel workbook. {common.WORKBOOK_HELP}")
    for rank, route in enumerate(result.routes, start=1):
        show_route(rank, route)


def open_target() -> None:
    """The target uploader's callback: its molecule becomes the target, or the page says why it cannot."""
    ss = st.session_state
    upload = ss.get("route_target_file")
    refused = ss.pop(TARGET_FILE_REFUSAL, None)
    if upload is None:  # the file was removed, and its refusal with it: it stayed, naming a file no longer there
        if refused is not None and ss.get("route_error") == refused:
            ss["route_error"] = None
        return
    try:
        ss["route_target"] = common.query_from_file(upload.name, upload.getvalue(), "retro")
    except InputFileError as exc:
        ss["route_error"] = ss[TARGET_FILE_REFUSAL] = str(exc)
    else:
        ss["route_error"] = None


def keep_stock() -> None:
    """The stock uploader's callback: the file chosen is kept for the searches to come, also after a page switch
    empties the uploader; the file removed (its ×) leaves the default stock. The column named goes with its file:
    kept, it refused the next vendor's file, which had no column of that name."""
    ss = st.session_state
    forget_stock_refusal()
    ss.pop(STOCK_COLUMN_KEPT, None)
    upload = ss.get("route_stock")
    if upload is None:
        ss.pop(KEPT_STOCK, None)
    else:
        ss[KEPT_STOCK] = (upload.name, upload.getvalue())


def use_default_stock() -> None:
    forget_stock_refusal()
    st.session_state.pop(KEPT_STOCK, None)


def keep_stock_column() -> None:
    """The column box's callback: its value kept for the searches to come, and a search's refusal of the file read
    under the column before goes (forget_stock_refusal)."""
    ss = st.session_state
    forget_stock_refusal()
    ss[STOCK_COLUMN_KEPT] = ss[STOCK_COLUMN]


def chosen_stock() -> StockFile | None:
    """The stock file the next search uses, with the column named for it where it has columns (COLUMN_KINDS); None:
    the default stock."""
    ss = st.session_state
    kept: tuple[str, bytes] | None = ss.get(KEPT_STOCK)
    if kept is None:
        return None
    return kept[0], kept[1], ss.get(STOCK_COLUMN_KEPT, "").strip() or None  # named in the box (stock_column_box)


def stock_column_box() -> None:
    """The box naming the chosen stock file's SMILES column (an SD file's data field), under the file box, for a file
    that has columns (COLUMN_KINDS); its value kept across page switches (STOCK_COLUMN_KEPT), cleared with a new file
    (keep_stock)."""
    ss = st.session_state
    kept: tuple[str, bytes] | None = ss.get(KEPT_STOCK)
    kind = query_format(kept[0])[1] if kept is not None else None
    if kind not in COLUMN_KINDS:
        return
    ss[STOCK_COLUMN] = ss.setdefault(STOCK_COLUMN_KEPT, "")
    if kind == "sdf":
        label, automatic = "SD data field holding the stock's SMILES (optional)", "automatic: each record's molecule"
        help_text = "A data field to read each building block's SMILES from, instead of each record's molecule."
    else:
        label = "Column holding the stock's SMILES (optional)"
        automatic = f"automatic: {', '.join(STOCK_COLUMNS)}, any case"
        help_text = (f"The column that holds the SMILES, where it has a name other than {', '.join(STOCK_COLUMNS)} "
                     "(any case, read without naming them, the first of them the file has): SMILES_std, say.")
    st.text_input(label, key=STOCK_COLUMN, on_change=keep_stock_column, placeholder=automatic, help=help_text)


def show_stock() -> None:
    """Which stock the next search uses, said plainly under the uploader: the file it holds, the file chosen before
    a page switch emptied it (with a way back to the default stock), or the default stock. A file that cannot be
    read is reported here at once (the search refuses it too), never swapped for the default stock unsaid."""
    ss = st.session_state
    kept = chosen_stock()
    if kept is None:
        st.markdown(f"**Stock:** {DEFAULT_STOCK_TEXT}.")
        return
    shown = ss.get("route_stock") is not None
    try:
        stock = uploaded_stock(*kept)
        size = stock_size(len(stock), stock.n_unreadable)  # the entries left out told before a search, not after it
        # which column: chosen by preference (io.STOCK_COLUMNS), it was said nowhere
        name = common.md_escape(stock_name(kept[0], stock_read_from(kept[0], stock.column, stock.sheet)))
    except ValueError as exc:
        # named once: most reasons name the file ("results.sdf is MolSpec's own results"), a CSV's missing column not
        which = "this stock file" if kept[0] in str(exc) else f"the stock file {kept[0]}"
        st.error(common.md_escape(f"Cannot use {which}: {exc}. Choose another file, or "
                                  + ("remove this one to search the default stock." if shown else
                                     "use the default stock (the button below).")), icon=":material/error:")
    else:
        before = ("" if shown else ", chosen before you left this page. The file box above cannot show it again, "
                  "but searches use it until you choose another file")
        st.markdown(f"**Stock:** your file {name} ({size}){before}.")
        if stock.first_unreadable:  # which entry: the count alone sent a chemist searching the file
            first = "The first entry left out" if stock.n_unreadable > 1 else "The entry left out"
            st.caption(common.md_escape(f"{first}: {stock.first_unreadable}."))
    if shown:
        return
    st.button("Use the default stock instead", key="route_default_stock", on_click=use_default_stock,
              icon=":material/undo:")


def main() -> None:
    cfg = common.settings()
    st.title("Routes")
    st.caption("Multi-step retrosynthesis: syntheseus searches backwards from the target, one answer of the "
               "retrosynthesis model per step, until every starting material is in the stock.")
    model = retro_model(cfg)
    if model is None:
        # common's words, naming the folder the app reads (MOLSPEC_MODELS_DIR): it named models/retro/ wherever that was
        st.warning(common.md_escape(common.no_model_text("retro")), icon=":material/warning:")
        return
    try:  # the first installed, where the sidebar's task is forward: one that does not load stopped the page
        cfg.predictor(model)
    except CheckpointError as exc:
        st.error(common.md_escape(f"The retrosynthesis model {model} does not load: {exc}{other_retro_models(model)}"),
                 icon=":material/error:")
        return
    st.file_uploader("Open the target from a molfile or SD file (optional)", type=common.QUERY_FILE_TYPES,
                     key="route_target_file", on_change=open_target, max_upload_size=common.MAX_FILE_MB,
                     help=f"Its molecule fills the target field below, stereo taken from the wedges. At most "
                          f"{common.MAX_FILE_MB} MB.")
    # Outside the form, so that its callback tells a file removed from one a page switch emptied (keep_stock)
    st.file_uploader("Your own stock (optional)", key="route_stock", on_change=keep_stock, type=STOCK_FILE_TYPES,
                     help=f"One SMILES per line, an SD file, or a CSV or Excel workbook with a smiles column "
                          f"(another name: the column box that then shows). Without it: {DEFAULT_STOCK_TEXT}.")
    stock_column_box()
    show_stock()
    # Kept across page switches: they came back on their defaults under the routes they had made
    key = {name: common.kept_in_form(name, default) for name, default in FORM_DEFAULTS.items()}
    with st.form("route_form"):
        # No max_chars: the browser drops a paste over it whole, without a word, and Find routes then searched for
        # the target before it; the engine refuses an over-long target itself, saying how long it is
        target = st.text_input("Target SMILES", key=key["route_target"], placeholder="e.g. CC(=O)Nc1ccc(O)cc1")
        left, middle, right = st.columns([2, 1, 2])
        time_limit = left.slider("Time budget (s)", 5, 300, step=5, key=key["route_time"])
        # The page searched 5 steps deep, always: a chemist after a short route could not say "at most 2 steps"
        # (a slider: a number box emptied and entered went to its minimum, as the Predict page's time limit did)
        max_steps = middle.slider(STEP_LIMIT_LABEL, 1, MAX_PAGE_STEPS, key=key["route_max_steps"],
                                  help=f"The most reactions a route may take (default {PlanSettings.max_steps}, at "
                                       f"most {MAX_PAGE_STEPS} here): Retro* counts them along each path from the "
                                       "target to a starting material, MCTS in the whole route.")
        algorithm = right.radio("Search", ALGORITHMS, format_func=ALGORITHM_LABELS.get, key=key["route_algorithm"],
                                horizontal=True)
        round_trip = st.toggle(ROUND_TRIP_LABEL, key=key["route_round_trip"],
                               help="Marks each step ✓ when the forward model gives its product back within its "
                                    "top-k (the sidebar's *Round trip within forward top-k* on the retrosynthesis "
                                    "task; 1 on the forward task); it costs time, and the search does not drop "
                                    "steps that fail it.")
        check_atoms = st.toggle(CHECK_ATOMS_LABEL, key=key["route_check_atoms"],
                                help="Every heavy atom of a product comes from a reactant; today's model often "
                                     "proposes sets that drop a ring or a carbon.")
        submitted = st.form_submit_button("Find routes", type="primary", icon=":material/route:")
    # The sidebar's retrosynthesis "read the query in N writings" (on unless turned off there) applies here
    # whatever task the sidebar shows now: the toggle keeps its state per task.
    reads_writings = st.session_state.get(common.writings_key("retro"), True) and cfg.predictor(model).augmentable
    augment = common.APP_AUGMENT if reads_writings else 1
    # Said where: "(sidebar)" under the forward task pointed at its toggle, which turned off changed nothing here
    where = "sidebar" if cfg.task == "retro" else "sidebar, under the Retrosynthesis task"
    writings = f", each read in {augment} writings ({where})" if augment > 1 else ""
    if cfg.dtype != "float32":
        writings += f", {cfg.dtype} arithmetic (sidebar)"
    # Fixed for planning: the sidebar's method (and the forward model's beam width) belongs to the Predict page.
    st.caption(f"Each step asks the retrosynthesis model {common.md_escape(model)}: "
               f"{common.method_label(PlanSettings.method).lower()}, {PlanSettings.n_best} answers per "
               f"molecule{writings}. The search always decodes this way, whatever task and method the sidebar shows. "
               + round_trip_note(cfg, bool(round_trip)))
    take_unfinished_routes()
    if submitted:
        search(target, model, float(time_limit), algorithm, round_trip, check_atoms,
               chosen_stock(), augment, cfg, int(max_steps))
    if st.session_state.get("route_error"):
        st.error(common.md_escape(st.session_state["route_error"]), icon=":material/error:")
    before: Shown | None = st.session_state.get(ROUTES_BEFORE)
    if before is not None and "routes" not in st.session_state:
        st.button(f"Show the routes for {common.md_escape(common.short(before.result.target, 60))} again",
                  key="route_show_before", on_click=show_routes_before, icon=":material/undo:")
    shown = st.session_state.get("routes")
    if st.session_state.get(UNFINISHED):
        st.warning(common.md_escape(unfinished_message(st.session_state[UNFINISHED].target, shown is not None)),
                   icon=":material/warning:")
    if shown is not None:
        show(shown)


if __name__ == "__main__":  # Streamlit runs a page as __main__; tests import its functions
    main()
