"""The Benchmark and Models pages: defects of a QA pass, each pinned by a test.

Page tests drive the app with Streamlit's AppTest through the helpers and fixtures of test_app.py.
"""
from __future__ import annotations

import json
import re

import pytest

import test_app
from test_app import FIXTURES, app, assert_clean, live_benchmark, needs_forward, texts

copy_models = test_app.copy_models  # the fixture: a models folder whose `forward` model is the copy model


@needs_forward
def test_a_refused_live_benchmark_leaves_no_progress_bar_above_its_error(tmp_path, monkeypatch):
    """The uncached baseline is refused in int8 (the app's default on a CPU): the error is shown, and the
    "Warming up…" bar above it is gone (it stayed, empty, when run_bench raised)."""
    at = live_benchmark(tmp_path, monkeypatch, ["greedy-uncached"])
    assert "The live benchmark cannot run" in texts(at.error)
    assert not at.get("progress")


@needs_forward
def test_a_live_benchmark_that_fails_leaves_no_progress_bar(tmp_path, monkeypatch):
    """Any exception, not only a refusal: the page says the run failed and clears its bar."""
    from molspec_core import bench

    def broken(*args, **kwargs) -> dict:
        raise RuntimeError("out of memory")

    monkeypatch.setattr(bench, "run_bench", broken)  # the page imports it when it runs
    at = live_benchmark(tmp_path, monkeypatch, ["spec-auto"])
    assert "The live benchmark failed" in texts(at.error)
    assert not at.get("progress")


def test_a_saved_run_of_one_query_says_so_and_names_its_oracle_bounds_in_words(copy_models, monkeypatch, tmp_path):
    from molspec_core.bench import run_bench
    from molspec_core.service import Predictor

    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    report = run_bench(predictor, ["Oc1ccncc1Cl"], ["Oc1ccncc1Cl"], ["greedy", "spec-lookup"], warmup=1,
                       progress=False)
    assert "best-window-16" in report["oracle_tokens_per_call"]
    (tmp_path / "one.json").write_text(json.dumps(report))
    monkeypatch.setenv("MOLSPEC_BENCH_DIR", str(tmp_path))
    at = app(copy_models, monkeypatch).run()
    at.switch_page("views/benchmark.py").run()
    assert_clean(at)
    captions = texts(at.caption)
    assert captions.count("| 1 query: query set not recorded · task ") == 1 and "1 queries" not in captions
    assert "Speculative, lookup drafts " in captions and "best query window of up to 16 tokens " in captions
    assert "best-window" not in captions


def test_the_headline_says_fastest_only_among_several_of_our_methods():
    from views.benchmark import headline, with_display_fields

    entry = {"speedup_vs_beam": 1.0, "speedup_vs_ct2_beam": 2.95}
    alone = with_display_fields({"methods": {"beam": dict(entry), "ct2-beam": {"speedup_vs_beam": 0.34}}})
    assert headline(alone).startswith("Our exact method here, Beam search, is 2.95x as fast as CTranslate2 float32 "
                                      "beam search")
    two = with_display_fields({"methods": {"beam": dict(entry), "sbs-exact": {**entry, "speedup_vs_ct2_beam": 2.5}}})
    assert headline(two).startswith("Our fastest exact method here, Beam search, is 2.95x as fast as")


def test_a_models_weights_are_sized_in_megabytes_of_a_million_bytes(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    from views.models import facts

    save_file({"w": np.zeros(1_250_000, dtype=np.float16)}, str(tmp_path / "model.safetensors"))
    size = (tmp_path / "model.safetensors").stat().st_size  # 2.5 million bytes and a header: 2.4 MiB
    assert 2_500_000 < size < 2_550_000
    shown = dict(facts(tmp_path, {}).values.tolist())
    assert shown["Weights"] == "1 safetensors file, 2.5 MB"


def test_a_sharded_models_weights_count_their_files_in_words(tmp_path):
    """The page read '2 safetensors file(s)' where the app says counts in words (common.counted)."""
    import json

    import numpy as np
    from safetensors.numpy import save_file

    from views.models import facts

    shards = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    for name, file in shards.items():
        save_file({name: np.zeros(500_000, dtype=np.float16)}, str(tmp_path / file))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))
    shown = dict(facts(tmp_path, {}).values.tolist())
    assert shown["Weights"] == "2 safetensors files, 2.0 MB"


@pytest.mark.parametrize("task", ["forward", "retro"])
def test_the_models_page_gives_a_shipped_models_size_as_its_card_does(task):
    from views.models import facts

    folder = test_app.ROOT / "models" / task
    card = folder / "MODEL_CARD.md"
    stated = re.search(r"float16 shards \((\d+) MB\)", card.read_text()) if card.is_file() else None
    if stated is None:
        pytest.skip(f"no shipped {task} model whose card states its size")
    shown = dict(facts(folder, {}).values.tolist())["Weights"]
    assert round(float(re.search(r"([\d.]+) MB$", shown)[1])) == int(stated[1]), shown


def test_the_sweep_charts_speedup_axis_has_round_ticks_of_its_own():
    """plotly.js ticks an overlaying axis on the primary axis's grid unless told otherwise (tickmode "sync"), which
    put the speedups at 0.196, 0.391, ... beside the accuracy's 0%, 20%, ..."""
    from views.benchmark import sweep_figure

    points = [{"tau": tau, "top1": 0.8, "validity": 0.95, "speedup_vs_greedy": 1.23} for tau in (0.0, 1.0, 2.0)]
    right = sweep_figure({"method": "relaxed", "knob": "tau", "points": points}).layout.yaxis2
    assert right.overlaying == "y" and right.side == "right"
    assert right.tickmode == "auto" and right.showgrid is False
