"""MolSpec, the chemist's assistant: `streamlit run app.py`.

The entry script draws the shared sidebar (task, model, decoding) and hands over to the page the
user picked; each page in pages/ reads the settings and calls the engine's Predictor.
"""
import streamlit as st

from pages import common

st.set_page_config(page_title="MolSpec", page_icon=str(common.ROOT / "assets" / "favicon.png"), layout="wide")

navigation = st.navigation([
    st.Page("pages/predict.py", title="Predict", icon=":material/science:", default=True),
    st.Page("pages/batch.py", title="Batch", icon=":material/table_view:"),
    st.Page("pages/routes.py", title="Routes", icon=":material/route:"),
    st.Page("pages/benchmark.py", title="Benchmark", icon=":material/speed:"),
    st.Page("pages/models.py", title="Models", icon=":material/description:"),
])
st.session_state["settings"] = common.render_sidebar()
navigation.run()
