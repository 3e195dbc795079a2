"""tools/draft_compare.py: two draft models for spec-sample-draft, timed in bench's loop on the same queries, each
run on the model it names (the model folder's own draft/, and a copy of the model whose draft/ is the other one)."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES, load_tool


def test_each_draft_model_runs_and_the_report_names_it(tmp_path, capsys):
    tool = load_tool("draft_compare")
    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    shutil.copytree(FIXTURES / "copy_model", model / "draft")  # the copy model drafting for itself
    other = tmp_path / "other_draft"
    shutil.copytree(FIXTURES / "copy_model", other)
    (tmp_path / "src.txt").write_text("CCOc1ccccc1\nNC(=O)c1ccncc1\nc1ccncc1\n")
    out = tmp_path / "report.json"
    assert tool.main(["--model", str(model), "--draft", str(other), "--src", str(tmp_path / "src.txt"),
                      "--warmup", "0", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["draft_models"] == {"spec-sample-draft": str(model / "draft"),
                                      "spec-sample-draft@new": str(other)}
    for method in ("sample", "spec-sample-draft", "spec-sample-draft@new"):
        assert report["methods"][method]["model_calls"] > 0, method
    assert "spec-sample-draft@new: acceptance" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:  # its own input is refused before any work, as a usage error
        tool.main(["--model", str(model), "--draft", str(other), "--src", str(tmp_path / "src.txt"),
                   "--out", str(tmp_path / "src.txt")])
    assert stop.value.code == 2 and "--out" in capsys.readouterr().err  # was an OutputFileError traceback


def test_both_columns_run_one_main_model_and_differ_in_the_draft_alone(tmp_path, monkeypatch):
    """The second column ran on a second copy of the main model, whose weights were cold in the cache after the
    first column's turn: 7% slower with the same draft in both (session 85), which read as the new draft's cost."""
    tool = load_tool("draft_compare")
    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    shutil.copytree(FIXTURES / "copy_model", model / "draft")
    (tmp_path / "src.txt").write_text("CCOc1ccccc1\n")
    seen = {}

    def run_bench(predictor, sources, targets, methods, engines, **options):
        seen.update(predictor=predictor, other=engines[tool.NEW])
        return {"methods": {}}

    monkeypatch.setattr(tool, "run_bench", run_bench)
    monkeypatch.setattr(tool, "save_report", lambda report, path, html: None)
    monkeypatch.setattr(tool, "markdown_table", lambda report: "")
    assert tool.main(["--model", str(model), "--draft", str(FIXTURES / "copy_model"), "--src",
                      str(tmp_path / "src.txt"), "--out", str(tmp_path / "r.json")]) == 0
    assert seen["other"].model is seen["predictor"].model
    assert seen["other"].draft_model is not seen["predictor"].draft_model


def test_no_method_runs_right_after_the_same_other_one_on_most_batches():
    """bench rotated its methods per batch, which kept their cyclic order: the new draft's column ran right after the
    shipped draft's on 3 batches in 4, warm from it, and with one draft in both columns it ran 2% faster on the retro
    quick set (session 86). Shuffled per batch, each method follows each other one on about a quarter of the batches
    (1 in 4, for 4 methods), in every place as often; and a rerun repeats the order."""
    from collections import Counter

    from molspec_core.bench import batch_order

    methods = ["greedy", "sample", "spec-sample-draft", "spec-sample-draft@new"]
    orders = [batch_order(methods, b) for b in range(200)]
    assert all(sorted(order) == sorted(methods) for order in orders) and orders == [
        batch_order(methods, b) for b in range(200)]
    follows = Counter(pair for order in orders for pair in zip(order, order[1:]))
    for first in methods:
        for then in methods:
            if first != then:
                assert 0.15 < follows[first, then] / len(orders) < 0.35, (first, then, follows[first, then])
    places = Counter((method, order.index(method)) for order in orders for method in methods)
    assert all(0.15 < count / len(orders) < 0.35 for count in places.values()), places


def test_a_draft_of_another_vocabulary_is_a_usage_error_naming_it_before_any_load(tmp_path, monkeypatch, capsys):
    """It was a CheckpointError traceback naming the temporary folder of links, after the model had loaded."""
    from molspec_core import checkpoint
    from molspec_core.tokenizer import Vocab

    tool = load_tool("draft_compare")
    monkeypatch.setattr(tool, "Predictor", None)  # nothing may be loaded
    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    shutil.copytree(FIXTURES / "copy_model", model / "draft")
    other = tmp_path / "other_draft"
    shutil.copytree(FIXTURES / "copy_model", other)
    tokens = Vocab.load(other / "vocab.json").tokens
    (other / "vocab.json").write_text(json.dumps({"tokens": [*tokens[:-2], tokens[-1], tokens[-2]]}))  # reordered
    checkpoint.inspect_folder(other)  # a model of its own
    (tmp_path / "src.txt").write_text("CCO\n")
    with pytest.raises(SystemExit) as stop:
        tool.main(["--model", str(model), "--draft", str(other), "--src", str(tmp_path / "src.txt"),
                   "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"--draft {other} cannot draft for {model}: {other}/vocab.json and " \
        f"{model}/vocab.json differ" in err, err
