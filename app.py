"""MolSpec, the chemist's assistant: `streamlit run app.py`.

The entry script draws the shared sidebar (task, model, decoding) and hands over to the page the
user picked; each page in views/ reads the settings and calls the engine's Predictor.
"""
import streamlit as st

from views import common

st.set_page_config(page_title="MolSpec", page_icon=str(common.ROOT / "assets" / "favicon.png"), layout="wide")

navigation = st.navigation([
    st.Page("views/predict.py", title="Predict", icon=":material/science:", default=True),
    st.Page("views/batch.py", title="Batch", icon=":material/table_view:"),
    st.Page("views/routes.py", title="Routes", icon=":material/route:"),
    st.Page("views/benchmark.py", title="Benchmark", icon=":material/speed:"),
    st.Page("views/models.py", title="Models", icon=":material/description:"),
])
st.session_state["settings"] = common.render_sidebar()
navigation.run()
