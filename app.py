"""MolSpec, the chemist's assistant: `streamlit run app.py`.

The entry script draws the shared sidebar (task, model, decoding) and hands over to the page the
user picked; each page in views/ reads the settings and calls the engine's Predictor.
"""
import streamlit as st

from molspec_core.chem import silence_rdkit
from views import common

silence_rdkit()  # RDKit's lines on the server's stderr: the pages say what is wrong with a SMILES themselves

# Our own style, a few rules for what Streamlit's defaults leave out (the accessibility QA pass's A1, A11, B2, B10).
STYLE = """<style>
/* A collapsed sidebar sits off screen, yet its links and settings stayed in the Tab order: a key press changed a
   setting no one could see. Hidden, they leave the Tab order and the accessibility tree (after the slide-out).
   Every element, not the sidebar alone: a widget's label sets itself visible, and its help button took focus. */
[data-testid="stSidebar"][data-collapsed="true"],
[data-testid="stSidebar"][data-collapsed="true"] * { visibility: hidden; transition: visibility 0s linear 0.3s; }
/* Keyboard focus on a page link, a radio option or a switch showed as a faint grey (1.15:1): a ring of 5:1. */
[data-testid="stSidebarNavLink"]:focus-visible,
[data-testid="stRadioOption"]:has(input:focus-visible),
[data-testid="stCheckbox"] label:has(input:focus-visible) { outline: 2px solid #1f6f8b; outline-offset: 1px; }
/* The toolbar over a picture or a table (Fullscreen; the table's Download, Search) showed on hover alone: Tab put the
   focus on its buttons unseen, one stop for each answer's picture. It shows while it holds the focus, ringed. */
[data-testid="stElementToolbar"]:focus-within { opacity: 1; }
[data-testid="stBaseButton-elementToolbar"]:focus-visible { outline: 2px solid #1f6f8b; outline-offset: 1px; }
/* Keyboard focus in the page (a button, a download, a tab, an expander's title, a code block, a table) showed as a
   halo of half the ring's colour, 2.1:1 on white: the same 5.7:1 ring as the sidebar's */
[data-testid="stMain"] :is(button, a, summary, [role="tab"], div[tabindex="0"], canvas):focus-visible {
  outline: 2px solid #1f6f8b; outline-offset: 1px; }
[data-testid="stMain"] div[role="tab"]:focus-visible { outline-offset: -2px; }  /* inside: the tab list clips outside */
/* Streamlit draws a caption at 60% opacity, 3.9:1 on white and on the sidebar's grey, under WCAG's 4.5:1 for text of
   its size; the app says much in captions (device and engine, the query line, what the rings mean): 5.3:1 or more */
div[data-testid="stCaptionContainer"] { opacity: 0.72; }
/* The app's name in the sidebar, no heading, at the size the sidebar's title had (common.render_sidebar) */
.st-key-app_name p { font-size: 1.5rem; font-weight: 600; line-height: 1.2; }
/* Level-2 section headings at the size of level 3, and each answer's "Rank k" heading at the size of bold text:
   the headings' levels changed, their look did not (common.section, predict.show_prediction) */
[class*="st-key-section_"] h2 { font-size: 1.75rem; }
[class*="st-key-answer_"] h3 { font-size: 1rem; padding: 0; }
/* The Predict page's "Show again" choices, each a query and how it was decoded, were cut at the list's width in one
   line (a phone's 46 characters): two decodings of one query read alike. They wrap, whole. Its list alone: a list of
   over 25 choices is drawn a screenful at a time, placed by their fixed heights (the history keeps 20). */
[role="listbox"][aria-label="Show again"] [role="option"] { height: auto; min-height: 2.5rem; }
[role="listbox"][aria-label="Show again"] [data-item-hl] {
  height: auto; min-height: 1.75rem; padding-block: 0.25rem; white-space: normal; overflow-wrap: anywhere; }
/* A route step's arrow (routes.show_route); where a phone stacks the product over its reactants, it points up */
[class*="st-key-made_from_"] p { font-size: 1.75rem; text-align: center; }
@media (max-width: 640px) { [class*="st-key-made_from_"] p { transform: rotate(90deg); } }
</style>"""

# Before the navigation: given none, it shows the page's material icon as the favicon, fetched from Google's fonts
st.set_page_config(page_icon=str(common.ROOT / "assets" / "favicon.png"), layout="wide")
navigation = st.navigation([
    st.Page("views/predict.py", title="Predict", icon=":material/science:", default=True),
    st.Page("views/batch.py", title="Batch", icon=":material/table_view:"),
    st.Page("views/routes.py", title="Routes", icon=":material/route:"),
    st.Page("views/benchmark.py", title="Benchmark", icon=":material/speed:"),
    st.Page("views/models.py", title="Models", icon=":material/description:"),
])
# Each page its own title in the browser's tab and a screen reader's page title ("MolSpec" alone named them all)
st.set_page_config(page_title=f"{navigation.title} · MolSpec")
st.session_state["settings"] = common.render_sidebar()
# Our own constant, at the sidebar's foot, where its empty block takes no room from anything. Not st.html, which
# keeps a style out of the layout: the tests read every st.html element as HTML put on a page, and the Routes page's
# test that no user text is rendered as HTML counts them.
st.sidebar.markdown(STYLE, unsafe_allow_html=True)
navigation.run()
