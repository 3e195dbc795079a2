"""molspec_core.evaluate without a model: how its files are read (lines, index, targets), how an answer is scored,
and what compare is told of two reports' settings."""
import dataclasses

import pytest

from molspec_core.evaluate import (PARTIAL_COUNTS, compare_reports, evaluate, hits, read_pairs, resume_problem,
                                   setting_differences, software)
from molspec_core.service import Prediction, QueryResult


def write(path, text: str) -> str:
    path.write_text(text, encoding="utf-8", newline="")
    return str(path)


def test_a_tokenized_target_is_no_hit_for_its_first_token():
    """hits(['C', 'CC(=O)O'], 'C C ( = O ) O') was [True, False]: methane right, acetic acid wrong."""
    assert hits(["C", "CC(=O)O"], "C C ( = O ) O") == [False, False]
    assert hits(["C", "CC(=O)O"], "OC(C)=O") == [False, True]


def test_a_target_with_a_space_inside_is_refused_naming_its_line(tmp_path):
    """A tokenized target file was scored 0% with every target 'readable'; the error names the line and the fix."""
    src = write(tmp_path / "src", "CCO\nCCN\nCCC\n")
    tgt = write(tmp_path / "tgt", "CCO\nC C N\nCCC\n")
    with pytest.raises(ValueError, match=r"tgt, line 2: 'C C N' holds a space, and a SMILES has none; a tokenized "):
        read_pairs(src, tgt)
    assert read_pairs(src, tgt, limit=1) == (["CCO"], ["CCO"])  # lines not selected are not judged
    write(tmp_path / "idx", "2\n0\n")
    assert read_pairs(src, tgt, str(tmp_path / "idx")) == (["CCC", "CCO"], ["CCC", "CCO"])
    write(tmp_path / "tgt", " CCO\t\nCCN \nCCC\n")  # around a SMILES, as RDKit reads it: no refusal
    assert read_pairs(src, tgt)[1] == [" CCO\t", "CCN ", "CCC"]


def test_a_target_written_as_a_cxsmiles_or_an_inchi_is_read_as_a_query_is(tmp_path):
    """evaluate reads such a query (service) and the Batch page such a known answer (known.read_known), but a
    CXSMILES target was refused as a tokenized file (whose advice, to join its tokens, made it unreadable), and an
    InChI target was a miss whatever the model answered."""
    alanine = "C[C@H](N)C(=O)O"
    cxsmiles, inchi = f"{alanine} |&1:1|", "InChI=1S/C3H7NO2/c1-2(4)3(5)6/h2H,4H2,1H3,(H,5,6)/t2-/m0/s1"
    src = write(tmp_path / "src", "CCO\nCCN\n")
    tgt = write(tmp_path / "tgt", f"{cxsmiles}\n{inchi}\n")
    assert read_pairs(src, tgt)[1] == [cxsmiles, inchi]
    for target in (cxsmiles, inchi):
        assert hits(["CC(N)C(=O)O", alanine], target) == [False, True]  # stereo kept, as from a SMILES


def test_standard_input_is_refused_saying_that_files_are_read(tmp_path):
    """predict reads '-' as standard input; evaluate said 'cannot read -: No such file or directory'."""
    tgt = write(tmp_path / "tgt", "CCO\n")
    for src, index in (("-", None), (tgt, "-")):
        with pytest.raises(ValueError, match=r"^'-' \(standard input\) is not read here: give the file's name$"):
            read_pairs(src, tgt, index)


def test_an_index_that_gives_a_line_twice_is_refused(tmp_path):
    """0 1 1 1 evaluated 4 queries, one of them three times (top-1 0.75 from 2 distinct queries)."""
    src = write(tmp_path / "src", "CCO\nCCN\nCCC\n")
    write(tmp_path / "idx", "0\n1\n2 1\n")
    with pytest.raises(ValueError, match=r"idx, line 3: line number 1 is given again \(first on line 2\)"):
        read_pairs(src, None, str(tmp_path / "idx"))


@pytest.mark.parametrize("inside", ["\x0c", "\x0b", "\x1c", "\x85", "\u2028", "\u2029"])
def test_lines_break_where_predict_breaks_them(tmp_path, inside):
    """str.splitlines broke a line at a form feed or U+2028 too: 'has 7 lines but ... has 6' where wc -l said 6."""
    src = write(tmp_path / "src", f"CCO{inside}\nCCN\r\nCCC\rCCCC\n")
    tgt = write(tmp_path / "tgt", "CCO\nCCN\nCCC\nCCCC\n")
    assert read_pairs(src, tgt)[0] == [f"CCO{inside}", "CCN", "CCC", "CCCC"]


def test_a_line_ending_in_cr_cr_lf_ends_once_as_predict_reads_it(tmp_path):
    """A file written with \\r\\n through Windows' text mode ends its lines \\r\\r\\n: predict reads its 2 queries, and
    evaluate read 3 ('has 3 lines but ... has 2'), or, both files so written, a blank query (a refused miss) after
    each one."""
    src = write(tmp_path / "src", "CCO\r\r\nCCN\r\r\n")
    tgt = write(tmp_path / "tgt", "CCO\nCCN\n")
    assert read_pairs(src, tgt) == (["CCO", "CCN"], ["CCO", "CCN"])
    assert read_pairs(src, src) == (["CCO", "CCN"], ["CCO", "CCN"])


def test_blank_lines_after_the_last_query_are_no_queries(tmp_path):
    """As predict reads a TXT file: an extra line break at the end was one more (refused) query, and a file of
    blank lines was evaluated as n = 2."""
    src = write(tmp_path / "src", "CCO\nCCN\n\n \n")
    tgt = write(tmp_path / "tgt", "CCO\nCCN\n")
    assert read_pairs(src, tgt) == (["CCO", "CCN"], ["CCO", "CCN"])
    write(tmp_path / "src", "CCO\n\nCCN\n")  # a blank line among them stays a query (a miss), its row kept
    with pytest.raises(ValueError, match="has 3 lines but"):
        read_pairs(src, tgt)
    write(tmp_path / "src", "\n\n")
    with pytest.raises(ValueError, match="is empty"):
        read_pairs(src, tgt)


def test_compare_is_told_where_two_reports_settings_differ():
    a = {"n_best": 5, "method": "beam", "dtype": "float32", "device": "cpu", "time_limit_s": 60.0, "model": "x"}
    b = {"n_best": 3, "method": "beam", "dtype": "int8", "time_limit_s": 60.0, "model": "y"}
    assert setting_differences(a, b) == ["n_best 5 against 3 (compared up to top-3; top-4 to top-5 left out)",
                                         "dtype 'float32' against 'int8'"]  # device: not in b; model: compared
    assert setting_differences(a, dict(a, n_best=4))[0].endswith("(compared up to top-4; top-5 left out)")
    assert setting_differences(a, dict(a)) == []


def test_software_names_the_package_version():
    import importlib.metadata

    found = software()
    assert found["version"] == importlib.metadata.version("molspec") and set(found) == {"version", "commit"}


class Answering:
    """A predictor without a model: each query's answers are given, by query; its `stop_at`-th predict call (one a
    window: batch size 1, a query each) is stopped as Ctrl-C stops it."""

    def __init__(self, answers: dict[str, list[str]], stop_at: int | None = None) -> None:
        self.answers, self.stop_at, self.calls = answers, stop_at, 0

    def predict(self, queries, **options):
        self.calls += 1
        if self.calls == self.stop_at:
            raise KeyboardInterrupt
        return [QueryResult(query=q, canonical_query=q, method="beam", predictions=tuple(
            Prediction(rank=rank, smiles=s, score=-rank, valid=True, tokens=(), provenance=(), model_rank=rank)
            for rank, s in enumerate(self.answers[q], start=1))) if q in self.answers
            else QueryResult(query=q, error="not a valid SMILES") for q in queries]


def test_a_stopped_evaluation_keeps_the_report_of_the_queries_it_scored_marked_partial():
    """Ctrl-C an hour into a run of 5,000 queries lost every figure: what is raised carries the report of the
    queries scored before the stop, marked partial, whose figures are those of a run of just those queries."""
    answers = {"CCO": ["CCO"], "CCN": ["CCC", "CCN"], "CCC": ["CCO"]}
    sources, targets = ["CCO", "CCN", "x", "CCC"], ["CCO", "CCN", "CCO", "CCC"]
    with pytest.raises(KeyboardInterrupt) as stopped:
        evaluate(Answering(answers, stop_at=4), sources, targets, 2, batch_size=1, progress=False)
    partial = stopped.value.partial_report
    whole = evaluate(Answering(answers), sources[:3], targets[:3], 2, batch_size=1, progress=False)
    assert partial == dict(whole, partial={"of_n": 4, "stopped_by": "KeyboardInterrupt", "decoded_left_out": 0},
                           partial_counts=PARTIAL_COUNTS)
    assert (partial["n"], partial["top1"], partial["top2"], partial["query_errors"]) == (3, 1 / 3, 2 / 3, 1)
    assert partial["first_right"] == {"model_order": [1, 2, None], "app_order": [1, 2, None]}
    full = evaluate(Answering(answers), sources, targets, 2, batch_size=1, progress=False)
    with pytest.raises(ValueError, match=r"not on the same queries: n 3 against 4 \(the first report is partial, "
                                         r"stopped after 3 of 4 queries\)"):
        compare_reports(partial, full)
    with pytest.raises(ValueError, match=r"\(the second report is partial, stopped after 3 of None queries\)"):
        compare_reports(full, dict(partial, partial={}))  # edited by hand: said so, not a KeyError
    assert compare_reports(partial, whole)["model_order"][1] == {"k": 2, "a": 2 / 3, "b": 2 / 3, "only_a": 0,
                                                                 "only_b": 0, "p": 1.0}  # the same 3 queries
    with pytest.raises(KeyboardInterrupt) as stopped:  # stopped before a query was scored: no report
        evaluate(Answering(answers, stop_at=1), sources, targets, 2, batch_size=1, progress=False)
    assert stopped.value.partial_report is None


def test_a_stopped_evaluation_of_queries_read_in_several_writings_keeps_each_query_decoded():
    """Read in several writings (augment), each query is decoded alone (service.Predictor.predict), but evaluate handed
    predict 256 of them at a time (8 batches of 32), and a stop lost every one decoded in that window: hours at
    --augment 5. It hands such queries over one at a time, which decodes them no slower."""
    answers = {"CCO": ["CCO"], "CCN": ["CCC", "CCN"], "CCC": ["CCO"]}
    sources, targets = ["CCO", "CCN", "x", "CCC"], ["CCO", "CCN", "CCO", "CCC"]
    with pytest.raises(KeyboardInterrupt) as stopped:
        evaluate(Answering(answers, stop_at=4), sources, targets, 2, batch_size=8, progress=False, augment=5)
    assert stopped.value.partial_report["n"] == 3


def test_reports_on_other_queries_are_refused_naming_what_differs_beside_the_digest():
    """Two reports of the same count on other lines were refused with their two digests alone, 64 hex digits each:
    the refusal names the files, index and limit they were run on where those differ, and says a file changed where
    none does."""
    places = {"model_order": [1, None], "app_order": [1, None]}
    a = {"n": 2, "n_best": 1, "src": "/d/src.txt", "tgt": "/d/tgt.txt", "index": None, "limit": 2,
         "queries_sha256": "a" * 64, "first_right": places}
    with pytest.raises(ValueError, match=r"not on the same queries: queries_sha256 .* \(run on --index None against "
                                         r"'/d/idx'\)$"):
        compare_reports(a, dict(a, index="/d/idx", queries_sha256="b" * 64))
    with pytest.raises(ValueError, match=r"\(run on the same --src, --tgt, --index and --limit: a file changed between "
                                         r"the two runs\)$"):
        compare_reports(a, dict(a, queries_sha256="b" * 64))


class Marking(Answering):
    """Answering, whose answers 'CCC' are flagged (a concern) and spelled twice by the model: marks a report counts."""

    def predict(self, queries, **options):
        return [dataclasses.replace(result, predictions=tuple(
            dataclasses.replace(p, concerns=("a concern",), spellings=2) if p.smiles == "CCC" else p
            for p in result.predictions)) for result in super().predict(queries, **options)]


def test_an_evaluation_resumed_from_a_stopped_report_gives_the_whole_runs_report():
    """A stopped run's report lists ten of its refused queries and keeps its marks as rates: resumed from it, the
    report counts every refused query and mark of both runs, and is the whole run's (evaluate's `earlier`)."""
    answers = {"CCO": ["CCO"], "CCN": ["CCC", "CCN"], "CCC": ["CCC", "CCO"]}
    sources = ["x"] * 11 + ["CCN", "CCO", "x", "CCC", "CCN"]
    targets = ["CCO"] * 11 + ["CCN", "CCO", "CCO", "CCC", "C1C"]
    with pytest.raises(KeyboardInterrupt) as stopped:
        evaluate(Marking(answers, stop_at=14), sources, targets, 2, batch_size=1, progress=False)
    partial = stopped.value.partial_report
    assert (partial["n"], partial["query_errors"], len(partial["query_error_examples"])) == (13, 11, 10)
    assert resume_problem(partial) is None
    asked = Marking(answers)
    resumed = evaluate(asked, sources, targets, 2, batch_size=1, progress=False, earlier=partial)
    assert asked.calls == 3  # the queries kept are not decoded again
    whole = evaluate(Marking(answers), sources, targets, 2, batch_size=1, progress=False)
    assert resumed == whole and whole["query_errors"] == 12
    assert (partial["flagged_rate"], whole["flagged_rate"], whole["repeated_rate"]) == (1 / 13, 3 / 16, 3 / 16)
    assert resume_problem(whole) == "it is the report of a whole run: nothing is left to evaluate"
    assert resume_problem(dict(partial, query_errors=9)).startswith("its refused queries")


class Slow(Answering):
    """Answering, whose query 'CCCl' the time limit stops before an answer (read, as predict reads such a query)."""

    def predict(self, queries, **options):
        return [QueryResult(query=q, canonical_query=q, method="beam", error="stopped after the 1 s time limit")
                if q == "CCCl" else result for q, result in zip(queries, super().predict(queries, **options))]


def test_queries_the_time_limit_stopped_are_counted_apart_from_those_refused_and_kept_when_resumed():
    """A query the time limit stopped was told as refused, as one the model cannot read: the report counts it apart
    (timed_out), its example says so, a resumed run keeps the count, and a run of nothing else says so."""
    answers = {"CCO": ["CCO"]}
    sources, targets = ["CCCl", "x", "CCO", "CCCl"], ["CCO"] * 4
    whole = evaluate(Slow(answers), sources, targets, 1, batch_size=1, progress=False)
    assert (whole["query_errors"], whole["timed_out"]) == (3, 2)
    assert [e.get("timed_out") for e in whole["query_error_examples"]] == [True, None, True]
    with pytest.raises(KeyboardInterrupt) as stopped:
        evaluate(Slow(answers, stop_at=3), sources, targets, 1, batch_size=1, progress=False)
    partial = stopped.value.partial_report
    assert partial["timed_out"] == 1 and resume_problem(partial) is None
    assert evaluate(Slow(answers), sources, targets, 1, batch_size=1, progress=False, earlier=partial) == whole
    assert resume_problem(dict(partial, timed_out=3)).startswith("its refused queries")
    with pytest.raises(ValueError, match="none of the 2 queries could be evaluated: each was stopped by the time "
                                         "limit"):
        evaluate(Slow(answers), ["CCCl"] * 2, ["CCO"] * 2, 1, batch_size=1, progress=False)


def test_a_resumed_runs_progress_bar_counts_only_the_queries_it_decodes_as_its_own(monkeypatch):
    """The bar of a run resumed after 2 of 4 queries counted the 2 kept as decoded in its first second, so its rate
    and time left were far too good (4,500 of 5,007 kept: its end promised in seconds). It starts at them instead."""
    import molspec_core.evaluate as evaluate_module
    import molspec_core.service as service_module

    bars = []

    class Bar:  # tqdm, recording what it was told
        def __init__(self, *args, total=None, initial=0, disable=False, **kwargs):
            self.total, self.initial, self.updates = total, initial, []
            if not disable:  # a bar shown
                bars.append(self)

        def update(self, n=1):
            self.updates.append(n)

        def close(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    answers = {"CCO": ["CCO"], "CCN": ["CCN"]}
    sources, targets = ["CCO", "CCN", "CCO", "CCN"], ["CCO", "CCN", "CCO", "CCN"]
    with pytest.raises(KeyboardInterrupt) as stopped:
        evaluate(Answering(answers, stop_at=3), sources, targets, 1, batch_size=1, progress=False)
    monkeypatch.setattr(service_module, "tqdm", Bar)
    monkeypatch.setattr(evaluate_module, "tqdm", Bar, raising=False)
    evaluate(Answering(answers), sources, targets, 1, batch_size=1, earlier=stopped.value.partial_report)
    assert [(bar.total, bar.initial, sum(bar.updates)) for bar in bars] == [(4, 2, 2)]
