"""Benchmarks: speed and accuracy charts from the engine's bench JSON files, and a small live run.

Saved runs are read from bench/*.json at the repository root (MOLSPEC_BENCH_DIR overrides it).
The live run calls the engine's run_bench once per example query so the progress bar can move
between queries, then adds the per-query reports up into one report of the same format.
"""
from __future__ import annotations

import html
import json
import logging
import os
import re
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from molspec_core.bench import TOKENS_COUNTED, run_bench
from molspec_core.methods import METHODS, PEERS
from views import common

log = logging.getLogger(__name__)
LIVE_DEFAULT_METHODS = ["greedy", "spec-auto", "spec-lookup"]
MAX_REPORT_BYTES = 20 * 2**20  # a bench JSON is a few kB; anything huge is not ours


def bench_dir(override: str | Path | None = None) -> Path:
    """Folder of saved bench JSON files: the argument, else $MOLSPEC_BENCH_DIR, else bench/."""
    return Path(override or os.environ.get("MOLSPEC_BENCH_DIR") or common.ROOT / "bench")


def load_reports(folder: Path) -> tuple[dict[str, dict], list[str]]:
    """{file name: report} for the readable bench reports in `folder`, and a note per unreadable file."""
    reports: dict[str, dict] = {}
    problems: list[str] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            if path.stat().st_size > MAX_REPORT_BYTES:
                raise ValueError("file too large")
            report = json.loads(path.read_text())
            methods = report["methods"]
            if not methods or not all("speedup_vs_greedy" in m or "speedup_vs_beam" in m for m in methods.values()):
                raise ValueError("no per-method results")
            with_display_fields(report)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{path.name}: not a MolSpec bench report ({exc})")
            continue
        reports[path.name] = report
    return reports, problems


# ---- live run ---------------------------------------------------------------------------------


def with_display_fields(report: dict) -> dict:
    """Greedy-family methods are measured against greedy, beam-family ones against beam search (and,
    where the run timed it, CTranslate2 float32 of the same family): give every entry one `speedup`,
    one `speedup_ct2` and one `identical` field for the charts and the table."""
    for name, entry in report["methods"].items():
        if report.get("tokens_counted") != TOKENS_COUNTED and name in METHODS and METHODS[name].family == "beam":
            entry["tokens_per_call"] = None  # every live beam's token, not comparable with the others' (bench.py)
        entry["speedup"] = entry.get("speedup_vs_greedy", entry.get("speedup_vs_beam"))
        entry["speedup_ct2"] = entry.get("speedup_vs_ct2_greedy", entry.get("speedup_vs_ct2_beam"))
        entry["speedup_ct2_int8"] = entry.get("speedup_vs_ct2_int8_greedy", entry.get("speedup_vs_ct2_int8_beam"))
        entry["identical"] = entry.get("identical_to_greedy", entry.get("identical_to_beam"))
    return report


def has_peer(report: dict) -> bool:
    return any(name in PEERS for name in report["methods"])


def headline_first(reports: dict[str, dict]) -> list[str]:
    """File names with the runs that time CTranslate2 first (the comparison a user makes), sweeps last."""
    return sorted(reports, key=lambda name: (not has_peer(reports[name]), bool(reports[name].get("sweep")), name))


def headline(report: dict) -> str | None:
    """One plain sentence: our fastest lossless method against CTranslate2 float32 of its family."""
    ours = [(m.get("speedup_ct2"), name) for name, m in report["methods"].items()
            if name in METHODS and METHODS[name].lossless and m.get("speedup_ct2")]
    if not ours:
        return None
    ratio, name = max(ours)
    lead = "Our fastest exact method here" if len(ours) > 1 else "Our exact method here"  # one method is no "fastest"
    family = "beam search" if "speedup_vs_ct2_beam" in report["methods"][name] else "greedy"

    def verdict(value: float) -> str:
        return f"{value:.2f}x as fast as" if value >= 1 else f"{1 / value:.2f}x slower than"

    sentence = (f"{lead}, {common.method_label(name)}, is {verdict(ratio)} CTranslate2 float32 {family} "
                "(total time, same queries, interleaved).")
    int8_ratio = report["methods"][name].get("speedup_ct2_int8")
    if report.get("dtype") == "int8" and int8_ratio:  # like against like: int8 beside int8
        sentence += (f" This run computes in int8, as CTranslate2 int8 does: {verdict(int8_ratio)} CTranslate2 int8 "
                     f"{family} (int8 answers may differ from float32's: see the model cards).")
    elif int8_ratio and int8_ratio < 1:  # the chart beside it shows a faster bar: the sentence says so too
        sentence += (f" CTranslate2 int8 {family} is faster still: this float32 run is {verdict(int8_ratio)} it (our "
                     "int8 arithmetic, the app's default on a CPU, is the like-for-like comparison: the README).")
    return sentence


def run_live(cfg: common.Settings, n_queries: int, methods: list[str]) -> dict | None:
    predictor = cfg.predictor()
    pairs = []
    for example in common.load_examples():
        query = example.query(cfg.task)
        try:
            predictor.prepare(query)  # run_bench cannot summarize a query it skips
        except ValueError:
            continue
        pairs.append((query, example.known_answer(cfg.task)))
    pairs = pairs[:n_queries]
    if not pairs:
        st.error("None of the examples can be read by this model.")
        return None
    bar = st.progress(0.0, text="Warming up…")

    def advance(done: int, total: int) -> None:
        bar.progress(done / total, text=f"Benchmarked {done} of {_count(total, 'query', 'queries')}")

    targets = [target for _, target in pairs]
    try:
        report = run_bench(predictor, [query for query, _ in pairs], targets if all(targets) else None, list(methods),
                           n_best=cfg.n_best if cfg.n_best > 1 else 5, draft_len=cfg.draft_len,
                           n_drafts=cfg.n_drafts, warmup=1, progress=False, sampling=cfg.sampling,
                           on_progress=advance)
    finally:  # a refused or failed run's error stands alone, without an empty bar above it
        bar.empty()
    report["live"] = True
    return with_display_fields(report)


# ---- charts -----------------------------------------------------------------------------------


def chart_label(method: str) -> str:
    """A method's name for a chart axis, escaped (Plotly reads a few HTML tags) and wrapped in two lines."""
    return html.escape(common.method_label(method)).replace(", ", ",<br>").replace(" (", "<br>(")


NARROW_BARS = 9  # bars in one chart beyond which their value labels stand on end


def _bars(report: dict, fields: dict[str, str], title: str, yaxis: str, percent: bool = False) -> go.Figure | None:
    """Grouped bars, one group per method. Titles are short (a chart gets half the page's width)."""
    names = list(report["methods"])
    series = {label: [report["methods"][n].get(field) for n in names] for field, label in fields.items()}
    series = {label: values for label, values in series.items() if any(v is not None for v in values)}
    if not series:
        return None
    # In half the page's width a bar is about 20 px wide once there are a dozen: upright labels of
    # neighbouring bars ran into each other ("1.291.30"), so then they stand on end.
    upright = len(names) * len(series) <= NARROW_BARS
    figure = go.Figure()
    for label, values in series.items():
        text = [("" if v is None else f"{v:.0%}" if percent else f"{v:.2f}") for v in values]
        figure.add_bar(x=[chart_label(n) for n in names], y=values, name=label, text=text,
                       textposition="outside", textangle=0 if upright else -90, textfont={"size": 11},
                       constraintext="none", cliponaxis=False)
    figure.update_layout(title={"text": title, "font": {"size": 15}}, yaxis_title=yaxis, height=400,
                         barmode="group", margin={"t": 50, "b": 10}, legend={"orientation": "h", "y": -0.35})
    figure.update_xaxes(tickangle=-35, tickfont={"size": 11}, automargin=True)
    top = max(v for values in series.values() for v in values if v is not None)
    if percent:
        figure.update_yaxes(tickformat=".0%", range=[0, 1.15 if upright else 1.3], tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1])
    elif not upright and top > 0:
        figure.update_yaxes(range=[0, top * 1.25])  # room above the tallest bar for its label on end
    return figure


def figures(report: dict) -> list[go.Figure]:
    speedup = _bars(report, {"speedup_ct2": "vs CTranslate2 float32", "speedup_ct2_int8": "vs CTranslate2 int8",
                             "speedup": "vs our cached greedy / beam"},
                    "Speedup (total time)", "speedup (×)")
    if speedup is not None:
        speedup.add_hline(y=1, line_dash="dot", line_color="#888", layer="below")  # under the bars' labels
    charts = [
        speedup,
        _bars(report, {"top1": "top-1 accuracy", "identical": "identical to greedy / beam", "validity": "valid SMILES"},
              "Accuracy and agreement", "share of queries", percent=True),
        _bars(report, {"median_ms": "median", "p90_ms": "p90"}, "Latency per query", "ms"),
        _bars(report, {"tokens_per_call": "tokens per call", "accepted_per_call": "accepted draft tokens per call",
                       "expected_tokens_per_call": "(1 − α^(γ+1)) / (1 − α)"},
              "Tokens per model call", "tokens"),
    ]
    if report.get("sweep"):
        charts.insert(0, sweep_figure(report["sweep"]))
    return [c for c in charts if c is not None]


def sweep_figure(sweep: dict) -> go.Figure:
    """A lossy method's trade-off: top-1 and validity (left axis) and speedup (right) per knob value."""
    knob, points = str(sweep["knob"]), list(sweep["points"])
    x = [p[knob] for p in points]
    figure = go.Figure()
    for field, label in (("top1", "top-1 accuracy"), ("validity", "valid SMILES")):
        figure.add_scatter(x=x, y=[p.get(field) for p in points], name=label, mode="lines+markers")
    figure.add_scatter(x=x, y=[p.get("speedup_vs_greedy") for p in points], name="speedup vs greedy",
                       mode="lines+markers", yaxis="y2", line={"dash": "dash"})
    title = f"{common.method_label(str(sweep['method']))}: accuracy and speed vs {knob}"
    # An overlaying axis is ticked on the other axis's grid by default (plotly.js's tickmode "sync"): the speedups
    # read 0.196, 0.391, ... The right axis takes round ticks of its own and draws no second grid.
    speed_axis = {"title": "speedup (×)", "overlaying": "y", "side": "right", "rangemode": "tozero",
                  "tickmode": "auto", "nticks": 6, "showgrid": False}
    figure.update_layout(title=html.escape(title),
                         xaxis_title=html.escape(knob), height=360, margin={"t": 50, "b": 10},
                         yaxis={"title": "share of queries", "tickformat": ".0%", "range": [0, 1.05]},
                         yaxis2=speed_axis, legend={"orientation": "h", "y": -0.3})
    return figure


# The table's columns: the speed ratios and the answers' quality first, the call counts last (at 1,400 px the last
# columns need a sideways scroll; the ratio against CTranslate2 is the figure a reader comes for). (column, key, help)
COLUMNS = (("speedup", "speedup", "total time of our cached greedy (or beam) / this method's, on the same queries"),
           ("vs CT2", "speedup_ct2", "CTranslate2 float32's total time / this method's (above 1: faster than it)"),
           ("vs CT2 int8", "speedup_ct2_int8", "CTranslate2 int8's total time / this method's"),
           ("identical", "identical", "share of queries answered token for token as our cached greedy answers (beam "
                                       "methods: the whole ranked list as our beam search's; CTranslate2's beam search "
                                       "stops once as many answers as its width have finished, so its lower ranks "
                                       "may differ)"),
           ("top-1", "top1", "share of first answers that are the reference product"),
           ("valid", "validity", "share of first answers that are valid SMILES"),
           ("median ms", "median_ms", "median time of one query (one batch at batch size > 1)"),
           ("p90 ms", "p90_ms", "90th percentile time of one query"),
           ("total s", "total_s", "all queries, in seconds"),
           ("model calls", "model_calls", "decoder calls, all queries"),
           ("tokens/call", "tokens_per_call", "output tokens per decoder call (n-best methods: the longest answer's)"),
           ("accepted/call", "accepted_per_call", "draft tokens accepted per call"))


def table(report: dict) -> pd.DataFrame:
    rows = [{"method": common.method_label(name), **{column: m.get(key) for column, key, _ in COLUMNS}}
            for name, m in report["methods"].items()]
    return pd.DataFrame(rows)


def _count(n: object, one: str, many: str) -> str:
    """"1 query", "3 queries", "? queries": a count with its noun."""
    return f"1 {one}" if n == 1 else f"{n} {many}"


def _threads(n: object) -> str:
    return _count(n, "thread", "threads")


def oracle_label(key: str) -> str:
    """An oracle bound's name (bench.py's keys): a copy method's label, or "best-window-16" in words, oracle.py's
    ideal single draft: at each step the query window of up to 16 tokens that matches the reference longest."""
    window = re.fullmatch(r"best-window-(\d+)", key)
    return f"best query window of up to {window[1]} tokens" if window else common.method_label(key)


def show_report(report: dict, key: str) -> None:
    engine = f"engine {report.get('engine', 'torch')}"
    if report.get("dtype", "float32") != "float32":
        engine += f" in {report['dtype']}"
    if report.get("products"):
        engine += f" ({report['products']} products)"
    facts = [_count(report.get("n_queries", "?"), "query", "queries"), f"task {report.get('task', '?')}",
             f"device {report.get('device', '?')} ({report.get('device_name', '')})",
             f"batch size {report.get('batch_size', '?')}"
             + (", batches cut by query length" if report.get("batch_order") == "by length" else ""), engine,
             f"torch {report.get('torch', '?')}",
             _threads(report.get("threads", "?"))]
    if report.get("omp_wait_policy"):
        facts.append(f"OMP_WAIT_POLICY={report['omp_wait_policy']}")
    peer_threads = sorted({peer.get("threads") for peer in report.get("peers", {}).values()})
    if peer_threads:
        facts.append("CTranslate2 in its own process, " + " or ".join(_threads(n) for n in peer_threads))
    facts.append(str(report.get("date", "")))
    st.caption(common.md_escape(" · ".join(facts)))
    sentence = headline(report)
    if sentence:
        st.markdown(f"**{common.md_escape(sentence)}**")
    charts = figures(report)
    if report.get("sweep"):
        sweep = report["sweep"]
        last = sweep["points"][-1][sweep["knob"]] if sweep["points"] else "?"
        st.caption(common.md_escape(f"A sweep of {common.method_label(str(sweep['method']))} over {sweep['knob']}: "
                                    f"the first chart shows every value; the other charts and the table show the "
                                    f"last run ({sweep['knob']} = {last}) beside greedy."))
    per_row = 2 if len(report["methods"]) <= 6 else 1  # more bars than half a page can label
    for i in range(0, len(charts), per_row):
        for j, (column, chart) in enumerate(zip(st.columns(per_row), charts[i:i + per_row])):
            column.plotly_chart(chart, key=f"{key}_chart_{i + j}")
    st.dataframe(table(report), hide_index=True, placeholder="–", column_config={
        column: st.column_config.NumberColumn(column, help=text, format="%d" if column == "model calls" else "%.2f",
                                              width="small")
        for column, _, text in COLUMNS})
    if any(m.get("tokens_per_call") is None for m in report["methods"].values()):
        st.caption("Tokens per call: left out for beam search in runs before session 65, which counted every "
                   "beam's token (its width per call); every other method counts its answer's tokens.")
    oracle = report.get("oracle_tokens_per_call") or {}
    if oracle:
        bounds = ", ".join(f"{oracle_label(k)} {v:.2f}" for k, v in oracle.items())
        st.caption(common.md_escape(f"Oracle tokens per call (if the model wrote the reference): {bounds}"))


def main() -> None:
    cfg = common.settings()
    st.title("Benchmarks")
    st.caption("Every method on the same queries in one process, interleaved after warm-up: speed is the "
               "ratio of total times measured side by side, accuracy is top-1 against the reference.")

    st.subheader("Saved runs")
    folder = bench_dir()
    reports, problems = load_reports(folder)
    for problem in problems:
        st.warning(common.md_escape(problem), icon=":material/warning:")
    if not reports:
        st.info("No benchmark results yet. Save one with `molspec bench ... --out bench/NAME.json` "
                "and it appears here.", icon=":material/info:")
    else:
        name = st.selectbox("Benchmark file", headline_first(reports), key="bench_file")
        show_report(reports[name], key="saved")

    st.subheader("Live benchmark")
    if cfg.model_dir is None:
        st.warning("No model is installed for this task; switch the task in the sidebar.", icon=":material/warning:")
        return
    with st.form("live_bench"):
        st.caption("Runs the textbook examples on this machine with the sidebar's model. A handful of queries "
                   "gives a rough picture only; saved runs use hundreds.")
        n_queries = st.slider("Example queries", 1, len(common.load_examples()), 3)
        choices = [m for m in common.method_order() if m != "greedy"]
        methods = st.multiselect("Methods (greedy always runs as the reference)", choices,
                                 default=[m for m in LIVE_DEFAULT_METHODS if m in choices],
                                 format_func=common.method_label)
        submitted = st.form_submit_button("Run live benchmark", type="primary", icon=":material/play_arrow:")
    if submitted:
        try:
            live = run_live(cfg, n_queries, ["greedy"] + [m for m in methods if m in METHODS])
        except ValueError as exc:  # a method this model, so loaded, cannot run (int8 and the uncached baselines)
            st.error(common.md_escape(f"The live benchmark cannot run: {exc}. Saved results above are unaffected."))
        except Exception:  # noqa: BLE001
            log.exception("live benchmark failed")
            st.error("The live benchmark failed; saved results above are unaffected.")
        else:
            if live is not None:
                st.session_state["live_report"] = live
    live = st.session_state.get("live_report")
    if live is not None:
        st.caption("The last live run of this session:")
        show_report(live, key="live")
        st.download_button("Download live report (JSON)", data=json.dumps(live, indent=2), file_name="live-bench.json",
                           mime="application/json", on_click="ignore", icon=":material/download:")


if __name__ == "__main__":  # Streamlit runs a page as __main__; tests import its functions
    main()
