"""bench.run_bench and `molspec bench` where a run does not go to its end: Ctrl-C part way."""
from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from molspec_core.bench import markdown_table, run_bench, run_sweep
from molspec_core.boundary import Terminated
from molspec_core.cli import main
from molspec_core.methods import SamplingOptions
from molspec_core.service import Predictor

MODEL = str(FIXTURES / "copy_model")
QUERIES = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO", "c1ccncc1"]


def ctrl_c_at_call(monkeypatch, call: int, stop: type[BaseException] = KeyboardInterrupt) -> None:
    """Predictor.decode raises KeyboardInterrupt (Ctrl-C), or `stop`, at its `call`-th call, from 1."""
    decode, calls = Predictor.decode, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise stop
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(Predictor, "decode", interrupted)


def test_ctrl_c_part_way_keeps_the_batches_measured_whole(monkeypatch):
    """Ctrl-C at the 149th of 200 queries lost the whole run: no table, no report. The batches every method
    decoded are kept, and the report says it stopped; the batch under way when it stopped is left out whole (one
    method's figures of it would compare with nothing)."""
    predictor = Predictor.load(MODEL)
    whole = run_bench(predictor, QUERIES[:2], [q.replace("C", "") for q in QUERIES[:2]], ["greedy", "spec-lookup"],
                      warmup=0, progress=False)
    ctrl_c_at_call(monkeypatch, 6)  # batch 3's second method: its first has decoded it
    report = run_bench(predictor, QUERIES, [q.replace("C", "") for q in QUERIES], ["greedy", "spec-lookup"],
                       warmup=0, progress=False)
    assert report["n_queries"] == 2
    assert "after 2 of the 5 queries" in report["interrupted"]
    for method in ("greedy", "spec-lookup"):
        assert report["methods"][method]["model_calls"] == whole["methods"][method]["model_calls"]
        assert report["methods"][method]["top1"] == whole["methods"][method]["top1"]  # of the queries measured
    assert "after 2 of the 5 queries" in markdown_table(report)


def test_a_run_stopped_part_way_counts_the_skipped_queries_among_those_given(monkeypatch):
    """Stopped part way, the table said '1 of the 3 queries given were skipped' of 6 given: it counted the queries
    measured, not those given."""
    ctrl_c_at_call(monkeypatch, 5)  # batch 3's first method: batches 1 and 2 measured
    report = run_bench(Predictor.load(MODEL), [*QUERIES[:2], "xyz", *QUERIES[2:]], None, ["greedy", "spec-lookup"],
                       warmup=0, progress=False)
    assert report["n_queries"] == 2 and report["n_given"] == 6
    assert "1 of the 6 queries given was skipped (the model cannot read it): query " in markdown_table(report)


def test_the_table_says_skipped_queries_are_misses_only_where_top_k_counts_them(monkeypatch):
    """A stopped run's top-k is of the queries measured, and a run without targets has none, yet the table said the
    skipped queries were 'misses in top-k' under both."""
    queries = [*QUERIES[:2], "xyz", *QUERIES[2:]]
    targets = [q.replace("C", "") or "O" for q in queries]
    whole = run_bench(Predictor.load(MODEL), queries, targets, ["greedy"], warmup=0, progress=False)
    assert ("1 of the 6 queries given was skipped (the model cannot read it; a miss in top-k): query 3"
            in markdown_table(whole))
    ctrl_c_at_call(monkeypatch, 5)  # batch 3's first method: batches 1 and 2 measured
    stopped = run_bench(Predictor.load(MODEL), queries, targets, ["greedy", "spec-lookup"], warmup=0, progress=False)
    assert stopped["topk_counts"] == "of the queries measured before the run was stopped"
    assert ("1 of the 6 queries given was skipped (the model cannot read it; not in top-k, which is of the queries "
            "measured)") in markdown_table(stopped)


def test_ctrl_c_before_a_batch_is_measured_stops_the_run(monkeypatch):
    """Nothing measured, nothing to report: the Ctrl-C goes on to the command line's `interrupted`."""
    ctrl_c_at_call(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        run_bench(Predictor.load(MODEL), QUERIES, None, ["greedy", "spec-lookup"], warmup=0, progress=False)


def test_ctrl_c_in_a_sweep_keeps_the_values_run_whole(monkeypatch):
    """A sweep stopped within its second value went on to the third, timing it and reporting the sweep as whole."""
    ctrl_c_at_call(monkeypatch, 2 * len(QUERIES) + 3)  # the second value's second batch
    report = run_sweep(Predictor.load(MODEL), QUERIES, None, "relaxed", [0.0, 1.0, 2.0], SamplingOptions(), warmup=0,
                       progress=False)
    assert [point["tau"] for point in report["sweep"]["points"]] == [0.0]
    assert report["n_queries"] == len(QUERIES)  # the figures shown beside the sweep are its first value's, whole
    assert "tau = 1" in report["interrupted"]


def test_bench_command_writes_the_report_of_a_run_stopped_part_way(tmp_path, monkeypatch, capsys):
    (tmp_path / "src.txt").write_text("\n".join(QUERIES) + "\n")
    out = tmp_path / "bench.json"
    ctrl_c_at_call(monkeypatch, 5)
    # exit 130, as a stopped predict: a pipeline took a part run's report for a whole one (exit 0)
    assert main(["bench", "--model", MODEL, "--src", str(tmp_path / "src.txt"), "--methods", "greedy,spec-lookup",
                 "--warmup", "0", "--out", str(out)]) == 130
    report = json.loads(out.read_text())
    assert report["n_queries"] == 2 and "after 2 of the 5 queries" in report["interrupted"]
    assert out.with_suffix(".html").is_file()
    printed = capsys.readouterr()
    assert "after 2 of the 5 queries" in printed.out
    assert "\nerror: the run stopped (Ctrl-C) after 2 of the 5 queries" in printed.err


def test_bench_stopped_by_sigterm_keeps_the_batches_measured_and_exits_143(tmp_path, monkeypatch, capsys):
    """SIGTERM (a scheduler's stop) 20 batches into a bench of 30 printed 'terminated' and nothing else: no table, no
    report. It keeps what it measured, as Ctrl-C does, says SIGTERM stopped it, and exits 143; a sweep too."""
    (tmp_path / "src.txt").write_text("\n".join(QUERIES) + "\n")
    out = tmp_path / "bench.json"
    ctrl_c_at_call(monkeypatch, 5, Terminated)
    assert main(["bench", "--model", MODEL, "--src", str(tmp_path / "src.txt"), "--methods", "greedy,spec-lookup",
                 "--warmup", "0", "--out", str(out)]) == 143
    report = json.loads(out.read_text())
    assert report["n_queries"] == 2 and report["stopped_by"] == "Terminated"
    assert "\nerror: the run stopped (SIGTERM) after 2 of the 5 queries" in capsys.readouterr().err
    ctrl_c_at_call(monkeypatch, 2 * len(QUERIES) + 3, Terminated)  # the second value's second batch
    report = run_sweep(Predictor.load(MODEL), QUERIES, None, "relaxed", [0.0, 1.0], SamplingOptions(), warmup=0,
                       progress=False)
    assert report["interrupted"].startswith("stopped (SIGTERM) within its sweep's tau = 1")


def test_a_sigterm_after_the_last_batch_is_measured_writes_the_whole_report_first(tmp_path, monkeypatch, caplog):
    """SIGTERM after every batch was measured, while the report was made (the commit asked of git) or written, lost
    the whole run: no table, no report. Both are written, then the stop is obeyed (exit 143)."""
    import signal

    import molspec_core.evaluate as evaluate_module

    real = evaluate_module.software

    def software():  # asked once the run is measured, to record what code made the report
        signal.raise_signal(signal.SIGTERM)
        return real()

    monkeypatch.setattr(evaluate_module, "software", software)
    (tmp_path / "src.txt").write_text("\n".join(QUERIES[:2]) + "\n")
    out = tmp_path / "bench.json"
    assert main(["bench", "--model", MODEL, "--src", str(tmp_path / "src.txt"), "--methods", "greedy",
                 "--warmup", "0", "--out", str(out)]) == 143
    report = json.loads(out.read_text())
    assert report["n_queries"] == 2 and "interrupted" not in report and report["commit"] == real()["commit"]
    assert "stopping once the report is written" in caplog.text


def test_bench_says_where_it_wrote_the_report_and_its_chart(tmp_path, capsys):
    """The report and its chart were written without a word of where: the chart's name is made from --out's (--out
    .json put it at .json.html), and the user was left to find it."""
    (tmp_path / "src.txt").write_text(QUERIES[0] + "\n")
    out = tmp_path / ".json"
    assert main(["bench", "--model", MODEL, "--src", str(tmp_path / "src.txt"), "--methods", "greedy", "--warmup",
                 "0", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"-> {out} (its chart: {tmp_path / '.json.html'})" in printed.err and "->" not in printed.out
    assert (tmp_path / ".json.html").is_file()


def test_a_method_named_twice_is_timed_once_a_batch(monkeypatch):
    """--methods greedy,spec-lookup,spec-lookup decoded spec-lookup twice a batch and kept one of the two times,
    the second, on a cache warm from the first: its speedup over greedy read 2.58x where it was 1.56x."""
    decode, seen = Predictor.decode, []
    monkeypatch.setattr(Predictor, "decode", lambda self, sources, method, *a, **k: seen.append(method)
                        or decode(self, sources, method, *a, **k))
    report = run_bench(Predictor.load(MODEL), QUERIES[:2], None, ["greedy", "spec-lookup", "spec-lookup"], warmup=0,
                       progress=False)
    assert sorted(seen) == ["greedy", "greedy", "spec-lookup", "spec-lookup"]
    assert list(report["methods"]) == ["greedy", "spec-lookup"]


def test_a_target_that_is_no_smiles_is_left_out_of_the_oracle_not_the_run():
    """An InChI target (which evaluate and bench's top-k read), a name, or one with a tab after it (read_pairs keeps
    it) stopped the run after every method had been timed, with 'not a SMILES token': the oracle's reference
    tokens are read from a target's SMILES, and a target without one is left out of the oracle, and counted."""
    predictor = Predictor.load(MODEL)
    targets = [q.replace("C", "") for q in QUERIES]
    whole = run_bench(predictor, QUERIES[1:4], targets[1:4], ["greedy"], warmup=0, progress=False)
    inchi = "InChI=1S/C6H6O/c7-6-4-2-1-3-5-6/h1-5,7H"  # phenol, the copy model's answer to the first query
    report = run_bench(predictor, QUERIES, [inchi, targets[1], targets[2], f"{targets[3]}\t", "pyridine"],
                       ["greedy"], warmup=0, progress=False)
    # the InChI and the tabbed target read right; the name, and the third (no molecule RDKit reads), misses
    assert report["methods"]["greedy"]["top1"] == 0.6
    assert report["oracle_tokens_per_call"] == whole["oracle_tokens_per_call"]  # of the three targets with SMILES
    assert report["oracle_left_out"] == 2
    assert "2 queries whose target is no SMILES left out" in markdown_table(report)
    assert "; 1 query whose target is no SMILES left out)" in markdown_table(dict(report, oracle_left_out=1))


def test_the_table_says_its_times_are_a_batchs_where_batches_hold_several_queries():
    """At --batch-size 8 the table's 'median ms' and 'p90 ms' are a batch's times, eight queries', which it did not
    say (the Benchmark page does): read as a query's, they made a method look eight times slower than it is."""
    predictor = Predictor.load(MODEL)
    batched = run_bench(predictor, QUERIES[:4], None, ["greedy"], batch_size=2, warmup=0, progress=False)
    assert "median and p90 ms are those of a batch of 2 queries" in markdown_table(batched)
    alone = run_bench(predictor, QUERIES[:2], None, ["greedy"], warmup=0, progress=False)
    assert "of a batch" not in markdown_table(alone)


def test_a_sweeps_table_says_which_value_its_rows_were_run_at():
    """The table above a sweep's is one value's run, the last, which it did not say: its relaxed row read as relaxed's
    at every tau, or at the default."""
    report = run_sweep(Predictor.load(MODEL), QUERIES[:2], None, "relaxed", [0.0, 2.0], SamplingOptions(), warmup=0,
                       progress=False)
    assert "the table above is its run at tau = 2" in markdown_table(report)


def test_compare_pair_records_a_run_the_time_limit_stopped_and_not_one_that_ended_at_it(monkeypatch):
    """The Predict page told a stopped decoder from its median time reaching the limit or from it giving no answer:
    beam search stopped with the answers it had found, its time a few real milliseconds beside a clock that stopped
    it, read as a measurement. Each timing records whether the limit stopped any of its runs; one that ends as the
    limit falls due (its calls on the limit's clock, one second each, equal to it) is not stopped."""
    from conftest import decoder_clock
    from molspec_core.bench import compare_pair

    predictor = Predictor.load(MODEL)
    decoder_clock(predictor.model, monkeypatch)  # on this clock, greedy takes 10 calls on QUERIES[0], beam 10
    beam = {"method": "beam", "n_best": 3}
    ended = compare_pair(predictor, QUERIES[0], {**beam, "time_limit_s": 10}, {"method": "greedy", "time_limit_s": 10},
                         repeats=2)
    assert not ended.baseline.stopped and not ended.speculative.stopped and not ended.stopped
    cut = compare_pair(predictor, QUERIES[0], {**beam, "time_limit_s": 9}, {"method": "greedy", "time_limit_s": 9},
                       repeats=2)
    assert cut.baseline.stopped and cut.baseline.answers  # stopped with the answers its search had found
    assert cut.speculative.stopped and not cut.speculative.answers  # greedy stopped hands on none
    assert cut.stopped == [cut.baseline, cut.speculative]
    with pytest.raises(ValueError, match="not a valid SMILES"):  # refused, not recorded as stopped
        compare_pair(predictor, "xyz", {"method": "greedy"}, {"method": "spec-lookup"}, repeats=1)
