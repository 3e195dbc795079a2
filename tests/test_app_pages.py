"""The Benchmark and Models pages: defects of a QA pass, each pinned by a test.

Page tests drive the app with Streamlit's AppTest through the helpers and fixtures of test_app.py.
"""
from __future__ import annotations

from test_app import live_benchmark, needs_forward, texts


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
