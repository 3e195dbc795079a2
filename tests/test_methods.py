"""The table of decoding methods (molspec_core/methods.py): every row runs through predict, bench and
evaluate, and the bugs that came from having ten tables instead of one stay fixed.

The app's side of the table (the sidebar, the copied-tokens view) is tested in test_app.py.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import FIXTURES, ROOT
from molspec_core.methods import KNOBS, METHODS, SamplingOptions, same_answers_partner, speedup_pair
from molspec_core.service import Predictor

QUERY = "CCOc1ccccc1N"


@pytest.fixture(scope="module")
def with_draft(tmp_path_factory) -> Predictor:
    """The copy model with itself as its draft model (a draft/ folder, as both shipped models have)."""
    folder = tmp_path_factory.mktemp("models") / "m"
    shutil.copytree(FIXTURES / "copy_model", folder)
    shutil.copytree(FIXTURES / "copy_model", folder / "draft")
    return Predictor.load(folder, device="cpu")


def n_best_of(name: str) -> int:
    return 2 if METHODS[name].many else 1


def test_the_table_is_pure_data():
    """The CLI parser and the app's sidebar read it: no decoder, torch or RDKit behind it."""
    code = ("import sys; sys.modules['rdkit'] = None; sys.modules['torch'] = None\n"
            "import molspec_core.methods\n"
            "assert not [m for m in sys.modules if m.startswith('molspec_core.') and m != 'molspec_core.methods']")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_row_is_consistent():
    for name, row in METHODS.items():
        assert row.name == name and set(row.knobs) <= set(KNOBS), name
        assert row.reference in METHODS and not METHODS[row.reference].speculative, name
        assert row.many == ("n_best" in row.knobs), name  # the n-best knob is what "many" means to a user
        assert row.speculative == ("draft_len" in row.knobs) == (row.draft_len > 0), name
        baseline, speculative = speedup_pair(name)
        assert not METHODS[baseline].speculative and METHODS[speculative].speculative, name


@pytest.mark.parametrize("name", [m for m in METHODS if same_answers_partner(m)])
def test_a_standard_methods_partner_returns_its_very_answers(with_draft, name):
    """The Predict page shows a standard method's copied tokens from its partner's decode of the query,
    matched by answer (views.predict.partner_answer): the partner must give the same answers."""
    partner = same_answers_partner(name)
    row = METHODS[partner]
    assert row.speculative and row.lossless and row.reference == METHODS[name].reference
    queries = ["Oc1ccncc1Cl", "NC(=O)c1ccncc1", "CCOC(=O)c1ccccc1N", "ClCCBr"]
    n_best = n_best_of(name)
    for query in queries:
        mine, its = (with_draft.predict(query, method=m, n_best=n_best) for m in (name, partner))
        assert [p.smiles for p in its.predictions] == [p.smiles for p in mine.predictions], query
        assert any(source >= 0 for p in its.predictions for source in p.provenance)  # it does copy


def test_speculative_and_sampling_methods_have_no_partner():
    assert same_answers_partner("greedy") == "spec-auto" and same_answers_partner("beam") == "sbs-exact"
    for name, row in METHODS.items():
        if row.speculative or row.family == "sampling":
            assert same_answers_partner(name) is None, name


@pytest.mark.parametrize("name", METHODS)
def test_every_method_predicts_and_resolves_its_drafts(with_draft, name):
    """resolve answers for every method (it raised KeyError outside the greedy family, so the app
    showed sbs and sbs-exact a hand-set default of 16 while they ran at 4 and 2)."""
    row = METHODS[name]
    drafter, draft_len, n_drafts = with_draft.resolve(name, None, None, 1)
    if row.speculative:
        assert (draft_len, n_drafts) == (row.default_draft_len("cpu"), row.n_drafts) or row.drafter == "auto", name
    else:
        assert (drafter, draft_len, n_drafts) == ("none", 0, 0), name
    result = with_draft.predict(QUERY, method=name, n_best=n_best_of(name))
    assert result.ok and result.predictions, (name, result.error)
    assert (result.stats.draft_tokens_proposed > 0) == row.speculative, name


def test_copy_drafts_are_short_on_a_cpu_and_long_elsewhere():
    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    for name in ("spec-pointer", "spec-lookup", "spec-sample", "mentored", "relaxed"):
        assert predictor.resolve(name, None, None, 1)[1:] == (2, 1), name
        assert METHODS[name].default_draft_len("cuda") == METHODS[name].draft_len == 8, name
    assert predictor.resolve("spec-auto", None, None, 1) == ("lookup", 2, 1)
    assert predictor.resolve("spec-pointer", 5, None, 1)[1] == 5  # a length set by hand wins
    assert METHODS["spec-paper"].default_draft_len("cpu") == 10  # the paper's shape stays the paper's


def test_speculative_beam_defaults_are_its_own():
    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    assert predictor.resolve("sbs", None, None, 1) == ("pointer", 4, 1)
    assert predictor.resolve("sbs-exact", None, None, 1) == ("pointer", 1, 1)  # on a CPU
    assert METHODS["sbs-exact"].default_draft_len("cuda") == 2


def test_sbs_exact_looks_ahead_off_the_cpu_only(monkeypatch):
    """Look-ahead rows cost a CPU more than the calls they save (speculative_beam's docstring)."""
    from molspec_core import service

    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    seen = []
    monkeypatch.setattr(service, "speculative_beam", lambda *a, **kw: seen.append(kw["look_ahead"]) or [])
    predictor.decode([[5, 6, 7]], "sbs-exact", 2)
    predictor.device = torch.device("cuda")  # what resolve and _sbs read; nothing runs on it here
    predictor.decode([[5, 6, 7]], "sbs-exact", 2)
    assert seen == [False, True]


def test_every_method_runs_in_the_bench_and_the_evaluation(with_draft):
    from molspec_core.bench import run_bench
    from molspec_core.evaluate import evaluate

    queries, targets = ["CCOc1ccccc1N", "NC(=O)c1ccncc1"], ["Oc1ccccc1N", "NC(=O)c1ccncc1"]
    report = run_bench(with_draft, queries, targets, list(METHODS), n_best=2, warmup=0, progress=False)
    assert set(report["methods"]) == set(METHODS)
    # the draft shape each figure was measured with is in the report, not in a code comment
    assert report["methods"]["sbs"]["drafts"] == {"drafter": "pointer", "draft_len": 4, "n_drafts": 1}
    assert report["methods"]["greedy"]["drafts"] == {"drafter": "none", "draft_len": 0, "n_drafts": 0}
    for name in METHODS:
        got = evaluate(with_draft, queries, targets, n_best_of(name), name, progress=False)
        assert got["method"] == name and got["n"] == 2 and got["query_errors"] == 0, name


def test_relaxed_is_one_deterministic_answer(with_draft):
    """relaxed was a sampling method to the service: n_best=5 decoded the same greedy-like answer
    five times (five times the model calls) to return one answer."""
    once = with_draft.predict(QUERY, method="relaxed")
    assert len(once.predictions) == 1
    with pytest.raises(ValueError, match="returns one prediction"):
        with_draft.predict(QUERY, method="relaxed", n_best=5)


def test_mentored_drafts_from_the_query_even_beside_a_draft_model(with_draft):
    """mentored took the draft model whenever the folder had one, so the copied-tokens view said
    0 tokens were copied from the query."""
    calls = []
    draft_model = with_draft.draft_model
    original = draft_model.decode
    draft_model.decode = lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs)
    try:
        result = with_draft.predict(QUERY, method="mentored", n_best=2, sampling=SamplingOptions(delta=0.1))
    finally:
        del draft_model.decode
    assert not calls, "the draft model was fed"
    assert any(source >= 0 for p in result.predictions for source in p.provenance)


def test_the_draft_model_method_builds_no_copy_drafter(with_draft):
    """spec-sample-draft built a pointer drafter it never used, which asked the model for its
    cross-attention on every call (the slower attention path)."""
    asked = []
    model = with_draft.model
    original = model.decode
    model.decode = lambda *args, **kwargs: (asked.append(kwargs.get("cross_attention", False))
                                            or original(*args, **kwargs))
    try:
        result = with_draft.predict(QUERY, method="spec-sample-draft", n_best=2)
    finally:
        del model.decode
    assert result.ok and asked and not any(asked)


def test_draft_len_is_one_knob_for_every_method(with_draft):
    """predict's draft_len decides drafts for every method: 0 is none, unset the method's default.
    SamplingOptions.draft_len=0 once meant 'no drafts' for the draft model only, while copy-draft
    sampling drafted 8 tokens anyway; then predict dropped it without a word; now it is refused."""
    for name, row in METHODS.items():
        if not row.speculative:
            continue
        none = with_draft.predict(QUERY, method=name, n_best=n_best_of(name), draft_len=0)
        assert none.stats.draft_tokens_proposed == 0, name
        default = with_draft.predict(QUERY, method=name, n_best=n_best_of(name))
        assert default.stats.draft_tokens_proposed > 0, name
        with pytest.raises(ValueError, match="give draft_len=0 to predict"):
            with_draft.predict(QUERY, method=name, n_best=n_best_of(name), sampling=SamplingOptions(draft_len=0))


def test_evaluate_refuses_what_it_cannot_honour_instead_of_swapping(tmp_path, capsys):
    """`evaluate --method sample --n-best 3` quietly evaluated beam search."""
    from molspec_core.cli import main

    (tmp_path / "src.txt").write_text("CCOc1ccccc1N\nNC(=O)c1ccncc1\n")
    (tmp_path / "tgt.txt").write_text("Oc1ccccc1N\nNC(=O)c1ccncc1\n")
    files = ["--model", str(FIXTURES / "copy_model"), "--src", str(tmp_path / "src.txt"),
             "--tgt", str(tmp_path / "tgt.txt")]
    out = tmp_path / "eval.json"
    assert main(["evaluate", *files, "--method", "sample", "--n-best", "3", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["method"] == "sample"
    capsys.readouterr()
    assert main(["evaluate", *files, "--method", "spec-auto", "--n-best", "3"]) == 2
    assert "spec-auto returns one answer" in capsys.readouterr().err
    assert main(["evaluate", *files, "--n-best", "3", "--out", str(out)]) == 0  # unset: the standard n-best method
    assert json.loads(out.read_text())["method"] == "beam"


def test_compare_pair_times_two_methods_without_streamlit():
    """The predict page's speedup tab, as a bench function: speculative greedy beside greedy."""
    from molspec_core.bench import compare_pair

    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    baseline, speculative = speedup_pair("greedy")
    record = compare_pair(predictor, QUERY, {"method": baseline}, {"method": speculative}, repeats=2)
    assert (record.baseline.method, record.speculative.method) == ("greedy", "spec-auto")
    assert record.identical and record.factor > 0
    assert record.speculative.model_calls < record.baseline.model_calls
