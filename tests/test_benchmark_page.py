"""The Benchmark page after the accessibility and clarity QA pass (A5-A7, A12, A14, B3-B6): what a saved run records is
named, charts and table round alike, each speedup says what it is measured against, and the page reads without
the project's jargon. AppTest drives the page through test_app.py's helpers; the saved runs in bench/ are read
where the checks are about real reports."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import test_app
from conftest import needs_native
from test_app import FIXTURES, ROOT, app, assert_clean, live_benchmark, needs_forward, submit, texts

copy_models = test_app.copy_models  # the fixture: a models folder whose `forward` model is the copy model
BENCH = ROOT / "bench"


def saved(name: str) -> dict:
    from views.benchmark import with_display_fields

    path = BENCH / name
    if not path.is_file():
        pytest.skip(f"{name} is not in bench/")
    return with_display_fields(json.loads(path.read_text()))


def entry(**figures) -> dict:
    return {"median_ms": 10.0, "p90_ms": 12.0, "total_s": 2.0, "model_calls": 100, "tokens_per_call": 1.0,
            "accepted_per_call": 0.0, **figures}


def beam_and_greedy() -> dict:
    """A run of greedy and beam search on 200 USPTO-MIT queries, each against its own reference, as the GPU runs are."""
    from views.benchmark import with_display_fields

    return with_display_fields({
        "task": "forward", "n_queries": 200, "limit": 200, "tokens_counted": "answer tokens",
        "src": "../shared/data/uspto_mit/derived/src-test.mixed.txt.gz",
        "index": "../shared/bench/uspto_mit_test_500.idx", "device": "cpu", "device_name": "x86_64",
        "methods": {"greedy": entry(speedup_vs_greedy=1.0, identical_to_greedy=1.0, top1=0.785, validity=0.995,
                                    drafts={"drafter": "none", "draft_len": 0, "n_drafts": 0}),
                    "spec-auto": entry(speedup_vs_greedy=2.04, identical_to_greedy=1.0, top1=0.785, validity=0.995,
                                       drafts={"drafter": "lookup", "draft_len": 16, "n_drafts": 4}),
                    "beam": entry(speedup_vs_beam=1.0, identical_to_beam=1.0, top1=0.79, top2=0.86, top5=0.885,
                                  validity=1.0)}})


# ---- A5: the query set, beam width, draft length, draft models and machine are named --------------------------


def test_a_run_names_its_queries_beam_width_and_draft_length():
    from views.benchmark import what_ran

    facts = " · ".join(what_ran(beam_and_greedy()))
    assert facts.startswith("200 queries: USPTO-MIT test, the first 200 of the 500-query sample "
                            "(uspto_mit_test_500.idx) · task forward")
    assert "beam width 5" in facts  # beam search's deepest top-k, which bench counts up to its width
    assert "drafts of 16 tokens a call" in facts and "each query read in 1 writing" in facts
    unrecorded = " · ".join(what_ran({"n_queries": 3, "methods": {"beam": entry()}}))
    assert "3 queries: query set not recorded" in unrecorded and "beam width not recorded" in unrecorded



def test_a_run_on_a_file_of_the_users_own_or_on_an_index_of_its_rows_names_it():
    """A bench of a user's own queries read "query set not recorded" beside the file its report records (--src), and
    one of the rows an index of another name lists (--index picked.idx) read as timed on the whole set."""
    from views.benchmark import query_set

    own = {"src": "/home/me/my_amides.txt", "index": None, "limit": 50}
    assert query_set(own) == "my_amides.txt, the first 50"
    assert query_set(dict(own, limit=None)) == "my_amides.txt"
    picked = {"src": "../shared/data/uspto_mit/derived/src-test.mixed.txt.gz", "index": "/tmp/picked.idx"}
    assert query_set(picked) == "USPTO-MIT test, the queries picked.idx lists"
    assert query_set({"src": None}) == "query set not recorded"

def test_a_run_that_skipped_queries_says_how_many_and_why(copy_models, monkeypatch, tmp_path):
    """A saved run whose file held queries the model cannot read (a token outside its vocabulary, a blank line) read
    "2 queries" beside a top-1 counted over all 4 given (bench counts a skipped query as a miss): the page said nothing
    of the 2 skipped."""
    from molspec_core.bench import run_bench
    from molspec_core.service import Predictor
    from views.benchmark import what_ran

    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    report = run_bench(predictor, ["Oc1ccncc1", "CCS", "", "NC(=O)c1ccncc1"], ["Oc1ccncc1", "CCS", "", "N"],
                       ["greedy"], warmup=0, progress=False)
    facts = what_ran(report)
    assert facts[0] == "2 of the 4 queries given: query set not recorded"
    assert facts[1] == ("2 skipped, which the model cannot read (misses in top-k): the first, query 2: token 'S' is "
                        "not in the model's vocabulary; this model cannot read it")
    assert what_ran(dict(report, skipped_queries=[]))[0] == "2 queries: query set not recorded"
    (tmp_path / "skipped.json").write_text(json.dumps(report))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    assert "2 of the 4 queries given: query set not recorded · 2 skipped, which the model cannot read" in texts(
        at.caption)


def test_a_run_of_methods_with_knobs_names_the_knobs_it_ran_at():
    """A lossy method's speed and accuracy rest on its knob: the saved sampling run timed relaxed at beta 1, tau 0
    (exact, greedy's answers) and the page did not say so; a live run under a greedy sidebar passed no knobs, its
    report recorded none ("sampling": null), and its methods ran at the engine's defaults."""
    from molspec_core.bench import run_bench
    from molspec_core.methods import SamplingOptions
    from molspec_core.service import Predictor
    from views.benchmark import what_ran

    assert "knobs: temperature 0.5, top-k 0, beta 1, tau 0, delta 0, seed 0" in what_ran(
        saved("forward_cpu_sampling_mit200.json"))
    assert not any(fact.startswith("knobs") for fact in what_ran(beam_and_greedy()))  # greedy and beam read none
    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    report = run_bench(predictor, ["Oc1ccncc1"], None, ["relaxed"], warmup=0, progress=False)
    assert report["sampling"] == SamplingOptions().__dict__  # what decode ran it with
    assert "knobs: beta 1, tau 0" in what_ran(report)
    assert "knobs not recorded (beta, tau)" in what_ran(dict(report, sampling=None))


@pytest.mark.parametrize("name, width", [("forward_cpu_ct2_beam5_mit200_b1_native_int8_avx512.json", 5),
                                         ("retro_cpu_ct2_beam10_50k200_b1_native_int8_avx512.json", 10)])
def test_the_saved_beam_runs_read_their_width_from_their_own_figures(name, width):
    """The file name says beam5 or beam10; the JSON keeps no n_best, but its beam rows count top-k up to the width."""
    from views.benchmark import beam_width, what_ran

    report = saved(name)
    assert beam_width(report) == width and f"beam width {width}" in what_ran(report)


def test_the_draft_length_runs_differ_in_their_names_and_captions():
    """forward_cpu_draft80_mit200_len2 ... len8 differ only in draft length, which the page did not show."""
    from views.benchmark import report_titles, what_ran

    reports = {f"len{n}.json": saved(f"forward_cpu_draft80_mit200_len{n}.json") for n in (2, 3, 4, 6, 8)}
    assert len(set(report_titles(reports).values())) == 5
    assert all(f"drafts of {n} tokens a call" in what_ran(reports[f"len{n}.json"]) for n in (2, 3, 4, 6, 8))


def test_a_second_draft_models_column_is_named_by_the_model_it_ran():
    """"spec-sample-draft@new" read "Speculative sampling, draft model (new)"; in the retro files both columns are
    the same model."""
    from views.benchmark import method_names

    forward = method_names(saved("forward_cpu_draft80_mit200_len6.json"))
    assert forward["spec-sample-draft"] == "Speculative sampling, draft model (models/forward/draft)"
    assert forward["spec-sample-draft@new"] == "Speculative sampling, draft model (runs/fwd_draft80/export)"
    retro = method_names(saved("retro_cpu_draftlen6_50k200.json"))
    assert retro["spec-sample-draft"] == "Speculative sampling, draft model (models/retro/draft) #1"
    assert retro["spec-sample-draft@new"] == "Speculative sampling, draft model (models/retro/draft) #2"
    assert not any("(new)" in name for name in [*forward.values(), *retro.values()])


def test_a_machine_the_report_does_not_name_is_said_to_be_unrecorded_and_so_is_the_peers_version():
    from views.benchmark import machine, where_ran

    assert machine({"device": "cpu", "device_name": "x86_64"}) == "CPU model not recorded (x86_64)"
    assert machine({"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3"}) == "NVIDIA H100 80GB HBM3"
    peer = {"device": "cpu", "device_name": "x86_64", "threads": 1, "date": "2026-11-25",
            "peers": {"ct2-greedy": {"threads": 1}}, "methods": {}}
    assert "CTranslate2 (version not recorded) in its own process, 1 thread" in where_ran(peer)
    recorded = {**peer, "peers": {"ct2-greedy": {"threads": 1, "version": "4.8.5"}}}  # bench records it now
    assert "CTranslate2 4.8.5 in its own process, 1 thread" in where_ran(recorded)


def test_a_recorded_n_best_is_the_beam_width_only_where_a_beam_method_ran():
    from views.benchmark import beam_width

    assert beam_width({"n_best": 5, "methods": {"beam": entry(), "greedy": entry()}}) == 5
    assert beam_width({"n_best": 1, "methods": {"greedy": entry()}}) is None  # a greedy run has no beam width


# ---- A6 and A12: one rounding for charts and table; the table is text a screen reader reads as shown -----------


def test_a_share_is_shown_to_one_decimal_and_never_as_an_impossible_100_or_0_percent():
    from views.benchmark import share_text

    assert [share_text(x) for x in (0.785, 0.995, 1.0, 0.26, 0.0, 0.9996, 0.0004)] == [
        "78.5%", "99.5%", "100%", "26%", "0%", ">99.9%", "<0.1%"]


def bar_texts(figure) -> list[tuple[str, str]]:
    return [(x, t) for bar in figure.data for x, t in zip(bar.x, bar.text) if t]


def test_every_chart_label_is_the_tables_figure_for_that_method_in_every_saved_run():
    """Top-1 0.785 read "78%" on the chart and "0.79" in the table; validity 0.995 "100%" and "0.99"."""
    from views.benchmark import chart_label, figures, load_reports, shown_table

    reports, _ = load_reports(BENCH)
    if not reports:
        pytest.skip("no saved runs in bench/")
    for name, report in reports.items():
        rows = {chart_label(row["method"]): set(row.values) for _, row in shown_table(report).iterrows()}
        for figure in figures(report)[1 if report.get("sweep") else 0:]:
            for x, text in bar_texts(figure):
                assert text in rows[x], (name, x, text)
    shown = shown_table(beam_and_greedy())
    assert shown.loc[0, "top-1"] == "78.5%" and shown.loc[0, "valid"] == "99.5%" and shown.loc[2, "valid"] == "100%"


def test_a_method_that_drafts_nothing_has_no_accepted_draft_tokens_to_show():
    """Beam search and CTranslate2 stood as rows of 0.00 bars in the tokens-per-call chart's accepted series."""
    from views.benchmark import figures, shown_table

    report = saved("forward_cpu_ct2_beam5_mit200_native_int8_avx512.json")  # beam, sbs-exact, CTranslate2
    accepted = next(bar for bar in figures(report)[-1].data if bar.name == "accepted draft tokens per call")
    listed = dict(zip(accepted.x, accepted.y))
    assert all(listed[x] is None for x in listed if "CTranslate2" in x or x == "Beam search")
    drafting = [x for x in listed if "exact" in x]
    assert drafting and all(listed[x] is not None and listed[x] > 0 for x in drafting)
    table = shown_table(report).set_index("method")
    assert table.loc["Beam search", "accepted/call"] == "–"


def test_the_page_shows_the_table_as_text_with_the_charts_rounding(copy_models, monkeypatch, tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(beam_and_greedy()))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    assert not at.dataframe  # the grid's cells read 0.785 to a screen reader where the screen showed 0.79
    table = as_read(at.table[0].value)
    assert table["top-1"].tolist() == ["78.5%", "78.5%", "79%"] and table["vs beam"].tolist() == ["–", "–", "1.00"]
    assert "The table holds every figure the charts show, rounded as they are" in texts(at.caption)
    assert [e.label for e in at.expander] == ["What the columns mean"]


def as_read(frame):
    """A table the page sent, as a person reads it: st.table renders each cell and heading as markdown, so the page
    escapes them; the escapes (and the word joiners that keep an address from becoming a link) are taken out."""
    def read(text: str) -> str:
        return re.sub(r"\\(.)", r"\1", str(text)).replace("\u2060", "")

    return frame.rename(columns=read).map(read)


def test_the_tables_cells_read_as_written_not_as_markdown(copy_models, monkeypatch, tmp_path):
    """st.table renders its cells as markdown: a share of ">99.9%" became a grey quote reading "99.9%" (the sign
    lost), and a draft model's folder from the report file, "runs/*new*/[here](http://evil.example)", came out in
    italics with a link to click."""
    from views.benchmark import shown_table, with_display_fields
    from views.common import md_escape

    report = beam_and_greedy()
    report["methods"]["greedy"]["validity"] = 0.9996
    report["methods"]["spec-sample-draft@new"] = entry(speedup_vs_greedy=1.5, identical_to_greedy=0.5, top1=0.5)
    report["draft_models"] = {"spec-sample-draft@new": "runs/*new*/[here](http://evil.example)"}
    (tmp_path / "run.json").write_text(json.dumps(with_display_fields(report)))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    sent, shown = at.table[0].value, shown_table(with_display_fields(report))
    assert sent.map(str).values.tolist() == shown.map(md_escape).values.tolist()
    assert list(sent.columns) == [md_escape(column) for column in shown.columns]
    assert as_read(sent).loc[0, "valid"] == ">99.9%"
    assert as_read(sent).loc[3, "method"] == "Speculative sampling, draft model (runs/*new*/[here](http://evil.example))"


@pytest.mark.parametrize("change, problem", [
    (lambda r: r["methods"]["greedy"].update(speedup_vs_greedy="1.0x"),
     "greedy's speedup_vs_greedy is '1.0x', not a number"),
    (lambda r: r["methods"]["beam"].update(drafts="none"), "beam's drafts is 'none', not a record of its drafts"),
    (lambda r: r.update(oracle_tokens_per_call={"best-window-16": "7"}),
     "oracle_tokens_per_call's best-window-16 is '7', not a number"),
    (lambda r: r.update(sweep={"method": "relaxed", "knob": "tau", "points": [{"tau": 0, "top1": "high"}]}),
     "the sweep's point 1's top1 is 'high', not a number"),
    (lambda r: r.update(sweep={"method": "relaxed", "knob": "tau", "points": [{"tau": 0}, {"top1": 0.5}]}),
     "the sweep's point 2 has no tau"),
    (lambda r: r.update(sweep={"method": "relaxed", "points": []}), "the sweep names no knob"),
    (lambda r: r.update(sweep={"knob": "tau", "points": []}), "the sweep names no method"),
    # fields the facts above the charts read: each stopped the page with a traceback
    (lambda r: r.update(peers="x"), "peers is 'x', not a record"),
    (lambda r: r.update(peers={"ct2-beam": None}), "peers' ct2-beam is None, not a record"),
    (lambda r: r.update(n_best="5"), "n_best is '5', not a whole number"),
    (lambda r: r.update(limit=[200]), "limit is [200], not a whole number"),
    (lambda r: r.update(draft_models=3), "draft_models is 3, not a record"),
    (lambda r: r.update(sweep={"method": "relaxed", "knob": "tau", "points": None}),
     "the sweep's points are None, not a list"),
    (lambda r: r["methods"]["spec-auto"]["drafts"].update(draft_len="16"),
     "spec-auto's drafts' draft_len is '16', not a whole number"),
    (lambda r: r.update(oracle_tokens_per_call={"best-window-16": None}),
     "oracle_tokens_per_call's best-window-16 is None, not a number"),
    (lambda r: r.update(draft_models={"spec-auto": None}), "draft_models' spec-auto is None, not a folder's name")])
def test_a_report_with_a_figure_that_is_no_number_is_named_and_the_page_goes_on(copy_models, monkeypatch, tmp_path,
                                                                              change, problem):
    """A hand-edited report whose speedup read "1.0x" stopped the page with a traceback where its charts were, and
    the live benchmark below was gone; it is refused with the others the page cannot read, saying which figure."""
    report = beam_and_greedy()
    change(report)
    (tmp_path / "edited.json").write_text(json.dumps(report))
    (tmp_path / "fine.json").write_text(json.dumps(beam_and_greedy()))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    assert f"edited.json: not a MolSpec bench report ({problem})" in texts(at.warning)
    assert at.selectbox(key="bench_file").options and at.selectbox(key="bench_file").value == "fine.json"
    assert "Run live benchmark" in [button.label for button in at.button]


# ---- A7: each speedup says what it is measured against ------------------------------------------------------------


def test_the_speedup_chart_keeps_greedys_and_beams_references_apart_and_always_shows_its_legend():
    """Beam search stood at 1.00 beside greedy's 1.00 though it is slower than greedy: its 1.00 is against itself, and
    the one series' legend, the only word saying so, was hidden."""
    from views.benchmark import figures

    speedup = figures(beam_and_greedy())[0]
    assert speedup.layout.showlegend is True
    assert [(bar.name, list(bar.y)) for bar in speedup.data] == [
        ("vs our greedy", [1.0, 2.04, None]), ("vs our beam search (width 5)", [None, None, 1.0])]
    assert not speedup.layout.shapes and speedup.layout.yaxis.dtick == 0.5  # a grid line at 1, not a dotted line
    accuracy = figures(beam_and_greedy())[1]
    assert [bar.name for bar in accuracy.data] == ["top-1 accuracy", "identical to our greedy",
                                                   "whole list identical to our beam search", "valid SMILES"]


def test_a_beam_peers_low_agreement_says_it_compares_whole_lists_and_gives_each_first_answers_accuracy():
    """A chemist read "identical to our beam search 26%" for CTranslate2 as the two engines disagreeing on three
    queries in four; its meaning (the whole ranked list, token for token) was folded away under the table. The note
    says so beside the charts, with each one's top-1 from the report."""
    from views.benchmark import agreement_note

    note = agreement_note(saved("forward_cpu_ct2_beam5_mit200_b1_native_int8_avx512.json"))
    assert "counts a query only where all 5 ranked answers are our beam search's, token for token" in note
    assert "CTranslate2's beam search stops once 5 answers have finished" in note
    assert note.endswith("First answers right (top-1): CTranslate2 beam (float32) 78.5%, CTranslate2 beam (int8) "
                         "78.5%; our beam search 79%.")
    assert agreement_note(beam_and_greedy()) is None  # every list is beam search's own: nothing to explain


def test_a_run_against_ctranslate2_says_what_ctranslate2_is_on_its_first_screen(copy_models, monkeypatch, tmp_path):
    report = beam_and_greedy()
    report["methods"]["ct2-beam"] = entry(speedup_vs_beam=0.34, identical_to_beam=0.26, top1=0.785, validity=0.995)
    report["methods"]["beam"]["speedup_vs_ct2_beam"] = 2.9
    (tmp_path / "peer.json").write_text(json.dumps(report))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    assert "CTranslate2 is a widely used fast inference engine for Transformer models" in texts(at.caption)
    shown = texts(at.markdown)
    assert shown.index("as fast as CTranslate2 float32 beam search") < shown.index("all 5 ranked answers")
    assert "CTranslate2 beam (float32) 78.5%; our beam search 79%." in shown


def test_the_latency_chart_of_a_batched_run_says_it_times_a_batch():
    """bench times a batch at a time: at batch size 32 the chart titled "Latency per query" showed 130 ms a bar, the
    time of 32 queries decoded together, and the table's p90 read as one query's."""
    from views.benchmark import COLUMNS, chart_caption, figures

    report = saved("forward_cpu_ct2_greedy_mit200_b32len_native_int8_avx512.json")
    latency = figures(report)[2]
    assert latency.layout.title.text == "Latency per batch of 32 queries"
    assert re.sub(r"\\(.)", r"\1", chart_caption(latency)).startswith("Chart: Latency per batch of 32 queries. ")
    assert figures(beam_and_greedy())[2].layout.title.text == "Latency per query"  # batch size 1 (not recorded: 1)
    meanings = {column: meaning for column, _, _, meaning in COLUMNS}
    assert all("one batch at batch size > 1" in meanings[column] for column in ("median ms", "p90 ms"))


def test_a_draft_model_run_shows_its_speedup_over_plain_sampling():
    """The cards quote the draft model's speedup over plain sampling (1.52x at 6 tokens); the chart showed greedy's."""
    from views.benchmark import figures

    speedup = figures(saved("forward_cpu_draft80_mit200_len6.json"))[0]
    against_sampling = next(bar for bar in speedup.data if bar.name == "vs our plain sampling")
    assert "1.52" in against_sampling.text


# ---- A14: the headline leads with int8 against int8 -----------------------------------------------------------


def test_the_headline_of_an_int8_run_leads_with_ctranslate2_int8():
    from views.benchmark import headline

    sentence = headline(saved("forward_cpu_ct2_beam5_mit200_b1_native_int8_avx512.json"))
    assert sentence.startswith("This run computes in int8, as CTranslate2 int8 does: our exact method here, Beam "
                               "search, is 1.24x as fast as CTranslate2 int8 beam search (beam width 5;")
    assert sentence.index("1.24x") < sentence.index("2.95x")
    assert "Against float32 arithmetic, not like for like, it is 2.95x as fast as CTranslate2 float32" in sentence


def test_a_run_whose_peer_ran_on_fewer_threads_says_so_in_its_headline_and_name():
    """Our methods on 2 threads against CTranslate2's process on 1 (bench --peer-threads 1): the headline's "2.80x as
    fast as CTranslate2 int8 greedy" and the picker's "2 threads" read as 2 threads each."""
    from views.benchmark import headline, report_title

    report = saved("forward_cpu_ct2_greedy_mit200_native_int8_2threads.json")
    assert "(total time, same queries, interleaved; ours on 2 threads, CTranslate2's on 1 thread)" in headline(report)
    assert " · 2 threads, CTranslate2 1 · " in report_title(report)
    alike = saved("forward_cpu_ct2_greedy_mit200_native_float32_2threads.json")  # both on 2: nothing to add
    assert "ours on" not in headline(alike) and " · 2 threads · " in report_title(alike)


def test_the_fastest_method_of_an_int8_run_is_chosen_by_the_like_for_like_ratio():
    from views.benchmark import headline, with_display_fields

    report = with_display_fields({"dtype": "int8", "methods": {
        "spec-pointer": {"speedup_vs_greedy": 2.0, "speedup_vs_ct2_greedy": 6.0, "speedup_vs_ct2_int8_greedy": 1.5},
        "spec-lookup": {"speedup_vs_greedy": 2.1, "speedup_vs_ct2_greedy": 5.0, "speedup_vs_ct2_int8_greedy": 1.8}}})
    assert "Speculative, lookup drafts, is 1.80x as fast as CTranslate2 int8 greedy" in headline(report)


def test_a_run_that_timed_both_ctranslate2_searches_names_each_ratios_own_peer():
    """bench --peer times CTranslate2 greedy beside greedy methods and beam search beside beam ones; where a run had
    both, every CTranslate2 ratio was called beam search's: "Speculative, auto drafts, is 4.50x as fast as CTranslate2
    float32 beam search" was its ratio against CTranslate2 greedy."""
    from views.benchmark import figures, headline, report_title, with_display_fields

    report = with_display_fields({"task": "forward", "n_queries": 200, "n_best": 5, "methods": {
        "greedy": entry(speedup_vs_greedy=1.0, speedup_vs_ct2_greedy=1.5, speedup_vs_ct2_int8_greedy=0.9),
        "spec-auto": entry(speedup_vs_greedy=3.0, speedup_vs_ct2_greedy=4.5, speedup_vs_ct2_int8_greedy=2.7),
        "beam": entry(speedup_vs_beam=1.0, speedup_vs_ct2_beam=2.0, speedup_vs_ct2_int8_beam=1.2),
        "ct2-greedy": entry(speedup_vs_greedy=0.66, speedup_vs_ct2_int8_greedy=0.6),
        "ct2-beam": entry(speedup_vs_beam=0.5, speedup_vs_ct2_int8_beam=0.6)}})
    assert headline(report).startswith("Our fastest exact method here, Speculative, auto drafts, is 4.50x as fast as "
                                       "CTranslate2 float32 greedy (total time, same queries, interleaved).")
    assert [bar.name for bar in figures(report)[0].data][2:] == [
        "vs CTranslate2 float32 greedy or beam search, as the method searches",
        "vs CTranslate2 int8 greedy or beam search, as the method searches"]
    assert " · greedy and beam 5 vs CTranslate2 · " in report_title(report)
    beam = entry(speedup_vs_beam=1.0, speedup_vs_ct2_beam=2.0)
    beam_only = with_display_fields({"n_best": 5, "methods": {"beam": beam}})
    assert "as fast as CTranslate2 float32 beam search (beam width 5;" in headline(beam_only)
    assert [bar.name for bar in figures(beam_only)[0].data][1] == "vs CTranslate2 float32 beam search"


def test_the_tables_ctranslate2_columns_name_the_search_the_peer_ran():
    """The table's columns read "vs CTranslate2 float32" and "vs CTranslate2 int8" whatever CTranslate2 ran, where the
    chart's legend beside them said "beam search": a reader of the table could not tell which peer spec-auto's ratio
    was against."""
    from views.benchmark import shown_table, with_display_fields

    beam_only = with_display_fields({"n_best": 5, "methods": {
        "beam": entry(speedup_vs_beam=1.0, speedup_vs_ct2_beam=2.0, speedup_vs_ct2_int8_beam=1.2)}})
    assert list(shown_table(beam_only).columns[1:3]) == ["vs CTranslate2 float32 beam search",
                                                         "vs CTranslate2 int8 beam search"]
    greedy_only = with_display_fields({"methods": {
        "spec-auto": entry(speedup_vs_greedy=3.0, speedup_vs_ct2_greedy=4.5)}})
    assert list(shown_table(greedy_only).columns[1:3]) == ["vs CTranslate2 float32 greedy", "vs greedy"]
    both = with_display_fields({"methods": {"spec-auto": entry(speedup_vs_ct2_greedy=4.5),
                                            "beam": entry(speedup_vs_ct2_beam=2.0)}})
    assert shown_table(both).columns[1] == "vs CTranslate2 float32 greedy or beam search, as the method searches"


def test_the_column_meanings_name_each_column_as_the_table_heads_it(copy_models, monkeypatch, tmp_path):
    report = beam_and_greedy()
    report["methods"]["beam"].update(speedup_vs_ct2_beam=2.0)
    (tmp_path / "run.json").write_text(json.dumps(report))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    assert "vs CTranslate2 float32 beam search" in as_read(at.table[0].value).columns
    meanings = at.expander[0].markdown[0].value
    assert "- **vs CTranslate2 float32 beam search**: CTranslate2 float32's total time" in meanings


# ---- B3: labels that do not run together ------------------------------------------------------------------------


def test_two_charts_share_a_row_only_where_each_has_room():
    from views.benchmark import CHART_MIN_WIDTH, chart_rows_style

    style = chart_rows_style("saved_charts")
    assert ".st-key-saved_charts [data-testid='stHorizontalBlock'] { flex-wrap: wrap; }" in style
    assert f"min-width: min(100%, {CHART_MIN_WIDTH})" in style


def test_long_percent_labels_stand_on_end_sooner_than_short_ratios():
    """Nine bars of "100%" and "99.5%" ran together on a 390 px phone ("100%99.5%"); nine of "1.00" fit."""
    from views.benchmark import _bars

    def report(value: float) -> dict:
        return {"methods": {f"m{i}": {"a": value, "b": value, "c": value} for i in range(3)}}

    shares = _bars(report(0.995), {"a": "A", "b": "B", "c": "C"}, "t", "y", percent=True)
    ratios = _bars(report(1.0), {"a": "A", "b": "B", "c": "C"}, "t", "y")
    assert {bar.textangle for bar in shares.data} == {-90} and {bar.textangle for bar in ratios.data} == {0}


# ---- B4 and B5: readable names, no jargon -----------------------------------------------------------------------


def test_the_picker_names_a_run_by_what_tells_it_apart(copy_models, monkeypatch):
    from views.benchmark import report_title, report_titles

    title = report_title(saved("forward_cpu_ct2_greedy_mit200_native_int8_2threads_avx2.json"))
    assert title == ("forward · greedy vs CTranslate2 · int8 · AMD EPYC AVX2 · 2 threads, CTranslate2 1 · batch 1 · "
                     "200 queries")
    twins = report_titles({"a.json": beam_and_greedy(), "b.json": beam_and_greedy()})
    assert twins["a.json"].endswith(" · a.json") and twins["b.json"].endswith(" · b.json")
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(BENCH))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert not any(option.endswith(".json") and "·" not in option for option in at.selectbox(key="bench_file").options)
    assert " · file " in texts(at.caption)  # the file name stays on the page, beside the machine


def test_the_saved_run_chosen_is_kept_across_a_page_switch(copy_models, monkeypatch, tmp_path):
    """The picker came back on the first run after a visit to another page (Streamlit forgets a widget a run does not
    draw); a run whose file has gone since is let go for the first."""
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(beam_and_greedy()))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    at.selectbox(key="bench_file").set_value("b.json").run()
    at.switch_page("views/predict.py").run()
    at.switch_page("views/benchmark.py").run()
    assert at.selectbox(key="bench_file").value == "b.json" and " · file b.json" in texts(at.caption)
    (tmp_path / "b.json").unlink()
    at.switch_page("views/predict.py").run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    assert at.selectbox(key="bench_file").value == "a.json"


def test_the_page_explains_its_notation_and_speaks_of_no_session(copy_models, monkeypatch, tmp_path):
    report = beam_and_greedy()
    del report["tokens_counted"]  # an older run: beam search's tokens per call left out
    report["methods"]["spec-auto"].update(acceptance_rate=0.7, expected_tokens_per_call=3.1)
    report["oracle_tokens_per_call"] = {"best-window-16": 7.2}
    (tmp_path / "old.json").write_text(json.dumps(report))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    shown = texts(at.caption) + texts(at.markdown)
    assert not re.search(r"session \d", shown)
    assert "left out for beam search in this older run" in shown
    assert "if the model wrote each query's reference answer" in shown and "ideal drafter" in shown
    legends = [bar["name"] for chart in at.get("plotly_chart") for bar in json.loads(chart.proto.spec)["data"]]
    assert "expected from the acceptance rate" in legends and not any("α" in name for name in legends)
    assert "where α is the share of drafted tokens accepted and γ the tokens drafted a call" in texts(at.markdown)


# ---- B6: the live run says it reads one writing ----------------------------------------------------------------


@needs_forward
def test_the_live_benchmark_says_it_reads_one_writing_where_the_sidebar_reads_five(tmp_path, monkeypatch):
    at = live_benchmark(tmp_path, monkeypatch, ["spec-auto"])
    assert_clean(at)
    captions = texts(at.caption)
    assert "does not apply to benchmarks, saved or live" in captions  # the sidebar reads 5 writings by default
    report = at.session_state["live_report"]
    assert report["augment"] == 1 and report["n_best"] == 5
    assert "1 query: the first of the app's textbook examples this model can read" in captions
    assert "each query read in 1 writing" in captions


def test_the_live_run_offers_no_draft_model_method_to_a_model_without_one(copy_models, monkeypatch, tmp_path):
    """The sidebar leaves out the draft model's methods where the model has no draft/ folder; the live run offered
    them, and one chosen failed with "forward has no draft model (a draft/ folder): use spec-sample"."""
    from views.common import method_label

    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    offered = at.multiselect[0].options
    assert method_label("spec-sample") in offered and method_label("spec-sample-draft") not in offered


def float16_copy_models(tmp_path: Path) -> Path:
    """A models folder whose `forward` and `retro` models are the copy model with its weights rounded to float16
    values, as shipped checkpoints' are, so that it computes in int8 (the app's default on a CPU) where the C step
    builds. Of the textbook examples it reads only products, the retro task's queries."""
    from safetensors.torch import load_file, save_file

    for task in ("forward", "retro"):
        folder = tmp_path / "models" / task
        test_app.shutil.copytree(FIXTURES / "copy_model", folder)
        weights = folder / "model.safetensors"
        save_file({name: tensor.half().float() for name, tensor in load_file(str(weights)).items()}, str(weights))
    return tmp_path / "models"


@needs_native
def test_int8_times_methods_of_several_drafts_a_call(tmp_path, monkeypatch):
    """Until 0151a24 the bench refused, in int8, methods that verify several drafts a call (the paper's 25, or
    --n-drafts 3); the C step now verifies each draft as a row of its own in int8 (1883bf9), and the live run on the
    page times them in the int8 it says."""
    from molspec_core.bench import run_bench
    from molspec_core.service import Predictor

    predictor = Predictor.load(float16_copy_models(tmp_path) / "forward", device="cpu", dtype="int8")
    report = run_bench(predictor, ["Oc1ccncc1Cl"], None, ["spec-auto", "spec-lookup"], n_drafts=3, progress=False)
    assert {"spec-auto", "spec-lookup"} <= set(report["methods"])

    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path / "bench"))
    at = app(float16_copy_models(tmp_path / "app"), monkeypatch).run()
    at.radio(key="task").set_value("retro").run()
    at.switch_page("views/benchmark.py").run()
    at.multiselect[0].set_value(["spec-auto", "spec-paper"])
    submit(at, "Run live benchmark")
    assert not at.error and "live_report" in at.session_state
    assert at.session_state["live_report"]["dtype"] == "int8"


def live_retro_page(tmp_path: Path, monkeypatch) -> test_app.AppTest:
    """The Benchmark page on the retro task of copy_models_for_retro, its saved runs read from tmp_path/bench."""
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path / "bench"))
    at = app(copy_models_for_retro(tmp_path), monkeypatch).run()
    at.radio(key="task").set_value("retro").run()
    return at.switch_page("views/benchmark.py").run()


def copy_models_for_retro(tmp_path: Path) -> Path:
    """A models folder whose `forward` and `retro` models are the copy model, which reads the retro task's textbook
    examples (products; the forward ones are reactant sets, whose '.' it does not know); the forward one has itself
    as its draft model."""
    for task in ("forward", "retro"):
        test_app.shutil.copytree(FIXTURES / "copy_model", tmp_path / "models" / task)
    test_app.shutil.copytree(FIXTURES / "copy_model", tmp_path / "models" / "forward" / "draft")
    return tmp_path / "models"


def test_the_live_report_downloaded_names_its_queries_and_holds_only_what_was_measured(tmp_path, monkeypatch):
    """The downloaded live report said "the first 2 of the app's textbook examples this model can read" and no more:
    which queries was not in it; and it carried the page's own fields, a null speedup_ct2 on every method, a ratio
    named without its peer's search."""
    from molspec_core.service import Predictor
    from views.common import load_examples

    at = live_retro_page(tmp_path, monkeypatch)
    at.slider[0].set_value(2)
    at.multiselect[0].set_value(["spec-auto"])
    submit(at, "Run live benchmark")
    assert_clean(at)
    report = at.session_state["live_report"]  # what the download button writes, as JSON
    predictor, readable = Predictor.load(FIXTURES / "copy_model"), []
    for query in [example.query("retro") for example in load_examples()]:
        try:
            predictor.prepare(query)
        except ValueError:
            continue
        readable.append(query)
    assert report["queries"] == readable[:2] and report["n_queries"] == 2
    assert not any(key.startswith("speedup_ct2") for entry in report["methods"].values() for key in entry)


def test_a_live_run_ended_before_its_report_says_so_when_the_page_comes_back(tmp_path, monkeypatch):
    """Stop, a page switch or a sidebar change ends the script run that benchmarks (Streamlit raises no Exception): the
    page came back with the report of the run before, or none, and nothing said the run had not finished."""
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    from molspec_core import bench

    at = live_retro_page(tmp_path, monkeypatch)
    at.slider[0].set_value(1)
    submit(at, "Run live benchmark")  # a run that ends: its report is shown
    assert "live_report" in at.session_state and "stopped before it ended" not in texts(at.info)

    def stopped(*args, **kwargs) -> dict:
        raise StopException()

    monkeypatch.setattr(bench, "run_bench", stopped)  # the page imports it when it runs
    submit(at, "Run live benchmark")
    at.switch_page("views/predict.py").run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    note = texts(at.info)
    assert "The last live run was stopped before it ended (Stop, leaving the page, or changing anything" in note
    assert "The report below is from the run before it." in note
    at.run()  # said once
    assert "stopped before it ended" not in texts(at.info)


def test_the_live_forms_choices_are_kept_across_a_page_switch(tmp_path, monkeypatch):
    """After a live run of 2 queries with beam search, a visit to the Predict page brought the form back on 3 queries
    and the default methods, under the report of the run they did not make: Run again timed something else."""
    at = live_retro_page(tmp_path, monkeypatch)
    at.slider[0].set_value(2)
    at.multiselect[0].set_value(["beam"])
    submit(at, "Run live benchmark")
    assert_clean(at)
    assert at.session_state["live_report"]["n_queries"] == 2
    at.switch_page("views/predict.py").run()
    at.switch_page("views/benchmark.py").run()
    assert at.slider[0].value == 2 and at.multiselect[0].value == ["beam"]
    at.radio(key="task").set_value("forward").run()  # a model with a draft model, whose methods the form offers
    at.multiselect[0].set_value(["spec-sample-draft", "beam"])
    submit(at, "Run live benchmark")
    at.radio(key="task").set_value("retro").run()  # none here: the kept choice it cannot offer is let go
    assert_clean(at)
    assert at.multiselect[0].value == ["beam"]


# ---- charts are named for a screen reader ------------------------------------------------------------------------


def chart_columns(at) -> list[list]:
    """The elements of each column that holds a chart, in order."""
    columns = [[column.children[k] for k in sorted(column.children)] for column in at.columns]
    return [kids for kids in columns if any(kid.type == "plotly_chart" for kid in kids)]


def test_every_chart_is_named_by_the_caption_right_above_it(copy_models, monkeypatch, tmp_path):
    """A screen reader met each Plotly chart as unnamed images (Plotly's title is text in an SVG, not a name): a
    caption right above each now names the chart and its series, and says which table holds every value."""
    (tmp_path / "run.json").write_text(json.dumps(beam_and_greedy()))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    columns = chart_columns(at)
    assert len(columns) == 4 and all([kid.type for kid in kids] == ["caption", "plotly_chart"] for kids in columns)
    captions = [re.sub(r"\\(.)", r"\1", kids[0].value) for kids in columns]
    titles = [json.loads(kids[1].proto.spec)["layout"]["title"]["text"] for kids in columns]
    assert [c.split(". ")[0] for c in captions] == [f"Chart: {title}" for title in titles]
    assert captions[2] == ("Chart: Latency per query. Bars for each method: median and p90. The table below the "
                           "charts holds every value.")
    assert "vs our greedy and vs our beam search (width 5)" in captions[0]


def test_a_sweep_charts_caption_names_its_lines_and_the_table_of_its_points():
    from views.benchmark import chart_caption, figures

    report = saved("forward_cpu_relaxed_sweep_mit100.json")
    caption = re.sub(r"\\(.)", r"\1", chart_caption(figures(report)[0], "The sweep's table"))
    assert caption.startswith("Chart: ") and ": accuracy and speed vs " in caption
    assert "Lines against " in caption and "top-1 accuracy, valid SMILES and speedup vs greedy" in caption
    assert caption.endswith("The sweep's table holds every value.")


# ---- the bench engine behind the page --------------------------------------------------------------------------


def test_the_ctranslate2_beam_peer_counts_its_longest_answers_tokens_as_our_beam_search_does():
    """Tokens per call counts an n-best method's longest answer (decoding.result.longest_answer_tokens), so that beam
    search, speculative beam search and the peer read alike; the peer counted its first answer's, and the saved runs
    showed CTranslate2 beam at 0.97 tokens a call beside beam search's 1.00 for the same search."""
    from types import SimpleNamespace

    from molspec_core.bench import _peer_decode
    from molspec_core.service import Predictor

    vocab = Predictor.load(FIXTURES / "copy_model", device="cpu").vocab

    class Peer:
        def decode_timed(self, batch, width, n_best):
            first = SimpleNamespace(tokens=["C", "O"], score=-0.1)
            return [[first, SimpleNamespace(tokens=["C", "C", "C", "O"], score=-2.0)]], 0.01

    [result], _ = _peer_decode(Peer(), vocab, [[4, 5, 6]], 2)
    assert result.stats.model_calls == 5  # one step a token of the longest answer, eos included
    assert result.stats.tokens_generated == 5


def test_the_chart_bench_writes_beside_its_report_names_each_ratios_reference(tmp_path):
    """bench --out writes a chart beside the JSON: one series titled "Speedup vs cached greedy / beam", so beam search's
    1.00 (against itself) stood beside greedy's 1.00 as though they were as fast, and CTranslate2's own rows read as
    ratios against our greedy with no word of it. Each reference is a series of its own, named, as on the page."""
    from molspec_core.bench import write_html

    report = {"n_queries": 200, "device": "cpu", "n_best": 5, "methods": {
        "greedy": entry(speedup_vs_greedy=1.0, speedup_vs_ct2_greedy=1.5),
        "beam": entry(speedup_vs_beam=1.0, speedup_vs_ct2_beam=2.0),
        "ct2-greedy": entry(speedup_vs_greedy=0.66)}}
    write_html(report, tmp_path / "bench.html")
    html = (tmp_path / "bench.html").read_text()
    figure = json.loads(re.search(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*\{', html, re.S)[1])
    assert [(bar["name"], bar["y"]) for bar in figure] == [
        ("vs our greedy", [1.0, None, 0.66]), ("vs our beam search (width 5)", [None, 1.0, None]),
        ("vs CTranslate2 greedy (float32)", [1.5, None, None]), ("vs CTranslate2 beam (float32)", [None, 2.0, None])]



def test_the_chart_bench_writes_beside_its_report_names_its_queries_task_and_arithmetic(tmp_path):
    """The chart bench --out writes beside its report, a file opened on its own, was titled "Speedup, total-time
    ratio (200 queries, cpu)": its ratios named no task, no query set, no arithmetic nor batch size. Its title names
    them as the Benchmark page does, the file names as written (Plotly reads a few HTML tags)."""
    from molspec_core.bench import speedup_figure

    report = dict(beam_and_greedy(), dtype="int8", batch_size=8, device_name="Intel(R) Xeon(R) <Platinum>")
    title = speedup_figure(report).layout.title.text
    assert title == ("Speedup, total-time ratio (forward, int8, batch size 8, Intel(R) Xeon(R) &lt;Platinum&gt;)<br>"
                     "200 queries: USPTO-MIT test, the first 200 of the 500-query sample (uspto_mit_test_500.idx)")
    stopped = speedup_figure(dict(report, n_queries=37, interrupted="stopped (Ctrl-C) after 37 of the 200 queries"))
    assert "<br>37 queries measured before the run was stopped: USPTO-MIT test, the first 200" in (
        stopped.layout.title.text)

def test_the_table_bench_prints_names_each_speedups_reference_and_the_ratios_against_ctranslate2():
    """bench's printed table had one "speedup" column: beam search's 1.00x (against itself) beside greedy's, and the
    ratios against CTranslate2 that --peer measured were in the JSON only."""
    from molspec_core.bench import markdown_table

    report = {"n_queries": 200, "methods": {
        "greedy": entry(speedup_vs_greedy=1.0, identical_to_greedy=1.0, speedup_vs_ct2_greedy=1.5,
                        speedup_vs_ct2_int8_greedy=0.9),
        "beam": entry(speedup_vs_beam=1.0, identical_to_beam=1.0),
        "ct2-greedy": entry(speedup_vs_greedy=0.66, identical_to_greedy=1.0, speedup_vs_ct2_int8_greedy=0.6)}}
    lines = markdown_table(report).splitlines()
    assert lines[0].endswith("| speedup vs | vs CTranslate2 |")
    greedy, beam, peer = (next(line for line in lines if line.startswith(f"| {name} |"))
                          for name in ("greedy", "beam", "ct2-greedy"))
    assert greedy.endswith("| greedy 1.00x | ct2-greedy 1.50x, ct2-int8-greedy 0.90x |")
    assert beam.endswith("| beam 1.00x | - |") and peer.endswith("| greedy 0.66x | ct2-int8-greedy 0.60x |")




def test_the_chart_bench_writes_beside_a_sweeps_report_names_the_value_its_bars_ran_at():
    """bench --sweep writes the chart of its last value's run beside the report, and its title said nothing of it:
    relaxed greedy's bar read as relaxed greedy's at any tau."""
    from molspec_core.bench import speedup_figure

    title = speedup_figure(saved("forward_cpu_relaxed_sweep_mit100.json")).layout.title.text
    assert "; relaxed at tau = 4)<br>100 queries: USPTO-MIT test" in title

def test_the_table_bench_prints_names_the_queries_and_arithmetic_its_ratios_are_of():
    """bench's printed table, pasted on its own (a GPU run's log, an issue), named neither the queries, the task, the
    arithmetic, the batch size nor the beam width its ratios were measured with."""
    from molspec_core.bench import markdown_table

    report = dict(beam_and_greedy(), dtype="int8", batch_size=1, n_best=5, device_name="AMD EPYC 9R14")
    assert ("\n200 queries: USPTO-MIT test, the first 200 of the 500-query sample (uspto_mit_test_500.idx); forward, "
            "int8, batch size 1, beam width 5, AMD EPYC 9R14.") in markdown_table(report)
    greedy = {"n_queries": 1, "src": "/home/me/one.txt", "methods": {"greedy": report["methods"]["greedy"]}}
    assert "\n1 query: one.txt; batch size 1." in markdown_table(greedy)  # no beam search, no width

def test_a_run_whose_peer_failed_part_way_says_so_among_where_it_ran():
    """bench.run_bench leaves a peer that failed mid-run out and records why ({"failed": ...}); the page's facts
    sorted the peers' thread counts with its None beside a number (TypeError) and said nothing of it."""
    from views.benchmark import where_ran

    report = {"peers": {"ct2-greedy": {"process": "its own", "threads": 1, "version": "4.8.5"},
                        "ct2-beam": {"failed": "the CTranslate2 peer's process ended (killed by SIGKILL)"}}}
    facts = where_ran(report)
    assert "CTranslate2 4.8.5 in its own process, 1 thread" in facts
    died = "the CTranslate2 peer's process ended (killed by SIGKILL)"
    assert f"ct2-beam failed part way and is left out ({died})" in facts


def test_a_run_stopped_part_way_says_so_in_its_name_facts_and_page(copy_models, monkeypatch, tmp_path):
    """bench keeps what a Ctrl-C'd run measured (report["interrupted"]); the page named it "200 queries: USPTO-MIT
    test, the first 200 of the 500-query sample" from its --limit, beside figures of the first 37."""
    from views.benchmark import report_title, what_ran

    report = beam_and_greedy()
    report.update(n_queries=37, interrupted="stopped (Ctrl-C) after 37 of the 200 queries: the figures are theirs, "
                                            "top-k of them alone")
    assert what_ran(report)[0] == ("37 queries measured before the run was stopped, of: USPTO-MIT test, the first 200 "
                                   "of the 500-query sample (uspto_mit_test_500.idx)")
    assert report_title(report).endswith(" · 37 queries · stopped part way")
    (tmp_path / "stopped.json").write_text(json.dumps(report))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    assert "This run was stopped (Ctrl-C) after 37 of the 200 queries" in texts(at.warning)


def test_a_run_that_timed_ctranslate2_without_recording_its_process_says_so():
    """An early report (no "peers" record) said nothing of CTranslate2's threads beside "1 thread" of ours."""
    from views.benchmark import where_ran

    facts = where_ran(saved("retro_cpu_ct2_beam10_50k100_native_int8.json"))
    assert "CTranslate2's version, process and threads not recorded" in facts


def test_a_sweeps_knob_is_named_as_swept_not_at_its_last_value():
    """A sweep of relaxed over tau 0 to 4 read "knobs: beta 5, tau 4" above a chart of every tau."""
    from views.benchmark import what_ran

    facts = what_ran(saved("forward_cpu_relaxed_sweep_mit100.json"))
    assert "knobs: beta 5, tau swept over 0, 0.5, 1, 2, 4" in facts


def test_the_torch_engine_is_not_said_to_have_torch_products():
    """A GPU run's facts read "engine torch (torch products)": the kernel named is only the engine's name again."""
    from views.benchmark import where_ran

    assert "engine torch" in where_ran(saved("forward_gpu_h100_speed_mit20_b1.json"))
    int8 = saved("forward_cpu_int8_ct2_greedy_mit200_s86.json")
    assert "engine native in int8 (c-int8-amx products)" in where_ran(int8)  # another engine's kernel stays named


@needs_forward
def test_the_live_run_times_lossy_methods_the_sidebar_does_not_set_at_the_sidebars_knobs(monkeypatch, tmp_path):
    """With the sidebar on beam search, relaxed greedy and mentored sampling chosen in the live form ran at beta 1,
    tau 0 and delta 0, the engine's defaults, where they lose nothing (relaxed: 'identical to our greedy' 100%),
    under their "(lossy)" labels, while the sidebar opens them at beta 2, tau 1 and delta 0.1. They run where the
    sidebar opens them now (common.APP_SAMPLING), and the form says so before the run; with the method chosen in the
    sidebar, its knobs are the sidebar's."""
    import molspec_core.bench
    from views.common import APP_SAMPLING, method_label

    given = []

    def run_bench(*args, sampling=None, **kwargs):
        given.append(sampling)
        raise ValueError("not timed here")

    monkeypatch.setattr(molspec_core.bench, "run_bench", run_bench)  # the page imports it on each run
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app().run()  # the shipped model, which reads the examples
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    note = next((c for c in texts(at.caption).split(" | ") if "sidebar opens them" in c), "")
    assert method_label("relaxed") in note and method_label("mentored") in note
    assert f"beta {APP_SAMPLING.beta}, tau {APP_SAMPLING.tau:g}" in note and f"delta {APP_SAMPLING.delta:g}" in note
    assert APP_SAMPLING.tau > 0 and APP_SAMPLING.delta > 0  # lossy: at 0 they are greedy and exact sampling
    at.multiselect[0].set_value(["relaxed", "mentored"])
    submit(at, "Run live benchmark")
    assert given, texts(at.error)
    assert (given[-1].beta, given[-1].tau, given[-1].delta) == (APP_SAMPLING.beta, APP_SAMPLING.tau, APP_SAMPLING.delta)
    at.sidebar.selectbox(key="method").set_value("relaxed").run()
    at.sidebar.slider(key="tau").set_value(3.0).run()
    note = next((c for c in texts(at.caption).split(" | ") if "sidebar opens them" in c), "")
    assert method_label("mentored") in note and method_label("relaxed") not in note and "tau" not in note
    submit(at, "Run live benchmark")
    assert (given[-1].tau, given[-1].delta) == (3.0, APP_SAMPLING.delta)  # the sidebar's tau, mentored's default


def test_the_sweep_charts_title_fits_a_phone_in_two_lines_and_its_caption_reads_it_whole():
    """At 390 pixels the sweep chart's one-line title, "Relaxed greedy, SpecDec++ (lossy): accuracy and speed vs tau"
    (61 characters, about 450 px of 15-px bold), was cut after "accuracy and sp" at the chart's 358 px. It breaks
    after the method's name now; the caption above the chart reads it as one sentence, without the break."""
    from views.benchmark import chart_caption, sweep_figure

    points = [{"tau": 0.0, "top1": 0.5, "validity": 1.0, "speedup_vs_greedy": 1.0}]
    figure = sweep_figure({"method": "relaxed", "knob": "tau", "points": points})
    lines = figure.layout.title.text.split("<br>")
    assert max(len(line) for line in lines) <= 40  # at about 7.5 px a character of 15-px bold: 300 px of 358
    caption = re.sub(r"\\(.)", r"\1", chart_caption(figure))
    assert "Chart: Relaxed greedy, SpecDec++ (lossy): accuracy and speed vs tau. Lines" in caption



def test_a_mentored_sweep_shows_its_speedup_against_plain_sampling_its_own_reference(copy_models, monkeypatch):
    """Mentored sampling's sweep showed its speedup against greedy alone (0.92x to 0.96x on the saved forward run:
    slower, it read), where against plain sampling, its own reference, which the sweep runs beside it, it is 1.18x
    to 1.23x as fast; the chart, its table and bench's printed table name both now. A relaxed greedy sweep, which
    runs no sampling, shows greedy's alone."""
    from molspec_core.bench import markdown_table
    from views.benchmark import sweep_figure, sweep_table

    mentored = saved("forward_cpu_mentored_sweep_mit100.json")
    assert [line.name for line in sweep_figure(mentored["sweep"]).data][2:] == [
        "speedup vs greedy", "speedup vs plain sampling"]
    assert list(sweep_table(mentored["sweep"]))[-2:] == ["speedup vs greedy", "speedup vs plain sampling"]
    assert sweep_table(mentored["sweep"])["speedup vs plain sampling"][0] == "1.23"
    printed = markdown_table(mentored)
    assert "| delta | top-1 | valid | speedup vs greedy | speedup vs sample | acceptance |" in printed
    assert "| 0 | 0.730 | 1.000 | 0.957 | 1.234 | 0.696 |" in printed
    relaxed = saved("forward_cpu_relaxed_sweep_mit100.json")
    assert [line.name for line in sweep_figure(relaxed["sweep"]).data][2:] == ["speedup vs greedy"]
    assert "speedup vs sample" not in markdown_table(relaxed)
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(BENCH))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    at.selectbox(key="bench_file").set_value("forward_cpu_mentored_sweep_mit100.json").run()
    assert_clean(at)
    assert "show the last run (delta = 1.0) beside greedy and plain sampling." in texts(at.caption)

def test_the_oracles_figures_are_not_called_a_bound_that_a_measured_method_passes():
    """The oracle's tokens a call were "an upper bound on tokens per call" beside methods that measured more (the
    saved retrosynthesis runs: pointer drafts 2.35 a call against the oracle's 1.98): the model's own answers are
    not the references. The queries the oracle left out are named, as `molspec bench` prints them."""
    from views.benchmark import oracle_text

    text = oracle_text({"spec-pointer": 1.98, "best-window-16": 5.87}, 3)
    assert "upper bound" not in text
    assert "a method's measured tokens/call can be above its figure here" in text
    assert "(3 queries whose reference is no SMILES left out): " in text
    assert "Speculative, pointer drafts 1.98, best query window of up to 16 tokens 5.87" in text
    assert "left out" not in oracle_text({"best-window-16": 5.87})
