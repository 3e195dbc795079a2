"""Batch prediction on Ray (molspec_core/scale.py, issue 18): the CSV of `predict --ray` is the
single-process CLI's (the same rows and answers; the float cells to a unit of their last printed digit, see
scale.FLOAT_CELLS), and a worker process killed mid-run loses no row and repeats none.

The Ray tests share one local cluster, started here: 2 CPUs, no dashboard, a small object store. They
skip where Ray is absent (it is the optional extra `scale`); the tests above them need no Ray.
"""
import csv
import re
import sys

import numpy as np
import pytest

from conftest import FIXTURES, sd_file_text
from molspec_core.cli import main
from molspec_core.io import read_queries
from molspec_core.scale import CRASH_FILE_ENV, PredictWorker, first_difference, in_row_order, pool_shape

MODEL = str(FIXTURES / "copy_model")
N_ROWS = 2000
# Queries the copy model reads, and ones it must reject (not a SMILES, empty, a token it lacks, a formula).
QUERIES = ["CCO", "OCC", "c1ccncc1", "CC(=O)O", "ClCCBr", "NCC(=O)N", "xyz", "", "C[Si](C)C", "=1+cmd|' /C calc'!A0",
           "OC1CCNCC1", "Brc1cccnc1OCCO", "CCOc1ccccc1", "N#N"]


def write_queries(path, n_rows: int) -> None:
    """A CSV with an ID and a note beside the SMILES, so that the input's cells must come back in front."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "smiles", "note"])
        for i in range(n_rows):
            writer.writerow([f"M{i:05d}", QUERIES[i * 5 % len(QUERIES)], "-2" if i % 3 else "x,y"])


def records_without_time(path) -> list[list[str]]:
    """The CSV's records as text, time_ms left out: it is a measurement, not part of the answer."""
    with open(path, newline="") as f:
        records = list(csv.reader(f))
    drop = records[0].index("time_ms")
    return [record[:drop] + record[drop + 1:] for record in records]


def assert_same_predictions(got: list[list[str]], expected: list[list[str]]) -> None:
    """Two outputs agree: the same header, rows, answers, ranks, flags and errors, cell for cell as text; the float
    cells equal to a unit of their last printed digit (scale.FLOAT_CELLS)."""
    assert "score" in expected[0]  # the names are ours (an SD file's records hold fewer of them)
    assert first_difference(got, expected) is None


# ---- without Ray --------------------------------------------------------------------------------------


def test_outputs_differ_only_beyond_the_last_printed_digit_of_a_float_cell():
    """tools/ray_throughput.py compared Ray's output with the single process's cell for cell, so a probability of
    0.0006987 against 0.0006988 (75 of 3,287 rows on an AMD EPYC host, README) stopped it: 'the output differs'."""
    header = ["row", "query", "rank", "smiles", "score", "probability", "error"]
    one = [header, ["1", "CCO", "1", "CC=O", "-0.1234", "0.0006988", ""]]
    assert first_difference([header, ["1", "CCO", "1", "CC=O", "-0.1235", "0.0006987", ""]], one) is None
    assert first_difference([header, ["1", "CCO", "1", "CC=O", "-0.1300", "0.0006988", ""]], one) == (
        "record 1, score: '-0.1300' and '-0.1234'")
    assert first_difference([header, ["1", "CCO", "1", "C=CO", "-0.1234", "0.0006988", ""]], one) == (
        "record 1, smiles: 'C=CO' and 'CC=O'")
    assert first_difference([header, ["1", "CCO", "1", "CC=O", "", "0.0006988", ""]], one) is not None
    assert first_difference([header], one) is not None


def test_a_stop_while_output_is_written_waits_for_it_and_a_second_stops_at_once(caplog):
    """scale.stops_deferred (evaluate's report, bench's, calibrate's fit, plan's routes once the work is done): a
    Ctrl-C inside is raised once the body has ended, the handler put back; a second one inside stops at once."""
    import signal

    from molspec_core.scale import stops_deferred

    handler, done = signal.getsignal(signal.SIGINT), []
    with pytest.raises(KeyboardInterrupt):
        with stops_deferred("once the report is written"):
            signal.raise_signal(signal.SIGINT)
            done.append("written")
    assert done == ["written"] and signal.getsignal(signal.SIGINT) is handler
    assert "stopping once the report is written (again to stop at once)" in caplog.text
    with pytest.raises(KeyboardInterrupt):
        with stops_deferred("once the report is written"):
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            done.append("never")
    assert done == ["written"] and signal.getsignal(signal.SIGINT) is handler


def test_rows_come_out_in_order_once_each(caplog):
    pairs = [(2, "b"), (1, "a"), (1, "a"), (4, "d"), (3, "c"), (2, "b")]
    assert list(in_row_order(pairs, 4)) == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    assert "2 rows came back twice (blocks run again after a worker died); each was kept once" in caplog.text
    caplog.clear()  # one was '1 rows came back twice'
    assert list(in_row_order([(1, "a"), (1, "a")], 1)) == [(1, "a")]
    assert "1 row came back twice (a block run again after a worker died); it was kept once" in caplog.text


def test_a_missing_row_writes_no_output():
    with pytest.raises(RuntimeError, match="3 of 4 rows; row 3 is missing"):
        list(in_row_order([(1, "a"), (2, "b"), (4, "d")], 4))


@pytest.mark.parametrize("n_queries,batch_size,workers,shape", [
    (4, 32, 2, (1, 32)),  # one block: one actor (the second loaded the model for nothing, and Ray Data warned)
    (40, 8, 4, (4, 8)),  # 5 blocks of a batch each
    (100_000, 32, 2, (2, 16 * 32)),  # blocks of at most 16 batches
])
def test_the_pool_has_no_more_actors_than_blocks(n_queries, batch_size, workers, shape):
    assert pool_shape(n_queries, batch_size, workers) == shape


@pytest.mark.parametrize("address,asked,workers", [
    ("local", 4, 2),  # a cluster started here cannot grow: the 2 its CPUs hold, not 2 more waiting for CPUs
    ("local", None, 2), ("local", 1, 1),
    ("10.0.0.1:6379", 4, 4),  # a cluster elsewhere may scale up: as asked
    ("auto", None, 2),
])
def test_a_local_cluster_gets_no_more_workers_than_its_cpus_hold(address, asked, workers, monkeypatch, caplog):
    """--workers 4 with --ray local on 2 CPUs: 2 actors waited the whole run for CPUs that a cluster started on this
    machine never gets; --workers N --gpus-per-worker 1 on a machine without a GPU waited for ever (no actor could
    start, and Ray Data only warned that the job 'may hang forever unless the cluster scales up')."""
    pytest.importorskip("ray", reason="Ray is the optional extra 'scale': pip install -e .[scale]")
    import ray

    from molspec_core.scale import Cluster, worker_count

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    assert worker_count(Cluster(address, asked)) == workers
    assert ("--workers 4: the local Ray cluster holds 2" in caplog.text) == (address == "local" and asked == 4)
    if address == "local":
        # the refusal named no option, and counted '1 CPUs'
        with pytest.raises(ValueError, match=re.escape("the Ray cluster has 0 GPUs, and a worker asks for 1 "
                                                       "(--gpus-per-worker 1): leave it out to predict on CPUs")):
            worker_count(Cluster(address, asked, gpus_per_worker=1.0))
        monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 1.0})
        with pytest.raises(ValueError, match=re.escape("the Ray cluster has 1 CPU, and a worker asks for 2 "
                                                       "(--cpus-per-worker 2): give at most 1")):
            worker_count(Cluster(address, asked, cpus_per_worker=2.0))


@pytest.fixture(scope="module")
def ray_consoles():
    """Ray imported before any test's capsys: its console handlers keep the stream that was stderr when they were
    made (ray._private.log.PlainRayHandler), and one closed with a test's capture broke the later tests' logging."""
    pytest.importorskip("ray.data", reason="Ray is the optional extra 'scale': pip install -e .[scale]")
    import logging

    return [handler for name in ("ray", "ray.data") for handler in logging.getLogger(name).handlers
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)]


def test_rays_own_log_lines_are_kept_off_the_terminal_unless_asked(ray_consoles, monkeypatch):
    """Every --ray run printed Ray Data's plan, start and end of the run and Ray's notes on tokens and threads among
    its own lines. RAY_LOGGER_LEVEL (Ray's setting) asks for them."""
    import io
    import logging

    from molspec_core.scale import quiet_ray

    terminal = io.StringIO()
    for handler in ray_consoles:
        monkeypatch.setattr(handler, "stream", terminal)

    def shown() -> str:
        text = terminal.getvalue()
        terminal.seek(0)
        terminal.truncate()
        return text

    def log_as_ray() -> None:
        logging.getLogger("ray.data._internal.execution.streaming_executor").info("Starting execution of Dataset")
        logging.getLogger("ray.data._internal.execution.streaming_executor").warning("Ray Data ran out of memory")
        logging.getLogger("ray._private.authentication.authentication_token_setup").warning(
            "Token authentication is enabled for this Ray cluster")

    monkeypatch.delenv("RAY_LOGGER_LEVEL", raising=False)
    monkeypatch.delenv("RAY_DATA_LOGGING_CONFIG", raising=False)
    with quiet_ray() as level:
        log_as_ray()
    err = shown()
    assert level == "warning" and "Ray Data ran out of memory" in err
    assert "Starting execution" not in err and "Token authentication" not in err
    log_as_ray()  # put back after the run
    err = shown()
    assert "Starting execution" in err and "Token authentication" in err
    monkeypatch.setenv("RAY_LOGGER_LEVEL", "info")
    with quiet_ray() as level:
        logging.getLogger("ray._private.authentication.authentication_token_setup").warning("Token authentication")
    assert level == "info" and "Token authentication" in shown()


def test_a_query_that_breaks_its_batch_is_one_error_row(monkeypatch):
    """A bad row never fails a block: when the batch's call raises, the worker predicts each query alone."""
    import json

    from molspec_core.service import Predictor

    predict = Predictor.predict

    def breaks_on_propanol(self, queries, *args, **kwargs):
        if "CCCO" in queries:
            raise RuntimeError("a bug met on one query")
        return predict(self, queries, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", breaks_on_propanol)
    worker = PredictWorker(MODEL, "cpu", threads=1, options={"method": "greedy"})
    out = worker({"row": np.array([7, 8, 9]), "query": np.array(["CCO", "CCCO", "xyz"], dtype=object)})
    assert out["row"].tolist() == [7, 8, 9]
    errors = [json.loads(found)[0][-1] for found in out["rows"]]
    assert errors[0] == "" and errors[1] == "the model failed (RuntimeError)" and "not a valid SMILES" in errors[2]


def test_a_worker_predicts_its_block_in_one_call_cut_into_batches(monkeypatch):
    """So that predict can put queries of like length together (service.Predictor.predict), as the
    single-process path's windows do."""
    from molspec_core.service import Predictor

    calls: list[tuple[int, int]] = []
    predict = Predictor.predict

    def counted(self, queries, *args, **kwargs):
        calls.append((len(queries), kwargs["batch_size"]))
        return predict(self, queries, *args, **kwargs)

    monkeypatch.setattr(Predictor, "predict", counted)
    worker = PredictWorker(MODEL, "cpu", threads=1, options={"method": "greedy"}, batch_size=2)
    out = worker({"row": np.arange(1, 6), "query": np.array(["CCO", "CCCO", "c1ccncc1", "CN", "OCC"], dtype=object)})
    assert calls == [(5, 2)] and out["row"].tolist() == [1, 2, 3, 4, 5]


def test_queries_read_in_several_writings_go_to_predict_one_at_a_time_in_small_blocks(monkeypatch):
    """At --augment > 1 predict decodes each query's writings as a batch of their own (service.window_size), as the
    single-process path hands them over: a worker predicted its whole block (up to 16 batches) in one call, each
    query timed as the block's mean, and a stop or a dead worker lost the whole block."""
    from molspec_core.service import Predictor, QueryResult

    assert pool_shape(100_000, 32, 2, augment=2) == (2, 16)  # was (2, 16 * 32), as at augment 1
    assert pool_shape(100_000, 32, 2, augment=1) == (2, 16 * 32)
    calls: list[int] = []

    def counted(self, queries, *args, **kwargs):  # the copy model refuses augment: the call is what is checked
        calls.append(len(queries))
        return [QueryResult(query=query, method="greedy") for query in queries]

    monkeypatch.setattr(Predictor, "predict", counted)
    worker = PredictWorker(MODEL, "cpu", threads=1, options={"method": "greedy", "augment": 2}, batch_size=2)
    out = worker({"row": np.arange(1, 4), "query": np.array(["CCO", "CCCO", "c1ccncc1"], dtype=object)})
    assert calls == [1, 1, 1] and out["row"].tolist() == [1, 2, 3]


def test_a_worker_that_cannot_load_the_model_says_why_in_its_rows():
    """Raised in the actor's constructor, the load's error reached the user as Ray's traceback of the worker and one
    of the driver, exit 1 (the Ray worker dump); now every block the worker gets carries the reason, and the driver
    stops the run with it (next test)."""
    import json

    worker = PredictWorker(MODEL, "cpu", threads=1, options={"method": "greedy"}, engine="graphs")  # CUDA only
    out = worker({"row": np.array([3, 4]), "query": np.array(["CCO", "OCC"], dtype=object)})
    assert out["row"].tolist() == [3, 4]
    failures = [json.loads(found) for found in out["rows"]]
    assert failures[0] == failures[1] and "could not load the model: engine graphs" in failures[0]["failed"]


def test_wrong_options_met_on_a_worker_stop_the_run_with_their_message(monkeypatch):
    """A ValueError from predict (the service's word for wrong options) ends the run, as without Ray: the worker
    sends its message, not Ray's dump of its traceback."""
    import json

    from molspec_core.service import Predictor

    def refuses(self, *args, **kwargs):
        raise ValueError("n_best must be at least 1")

    monkeypatch.setattr(Predictor, "predict", refuses)
    worker = PredictWorker(MODEL, "cpu", threads=1, options={"method": "greedy"})
    out = worker({"row": np.array([1]), "query": np.array(["CCO"], dtype=object)})
    assert json.loads(out["rows"][0]) == {"failed": "n_best must be at least 1"}


def refused(queries, *_):
    """Ray's part played here: each query comes back refused."""
    import json

    from molspec_core.io import result_rows
    from molspec_core.service import QueryResult

    for row, query in enumerate(queries, start=1):
        yield row, json.dumps(result_rows(row, (), QueryResult(query=query, method="greedy", error="refused")))


def predict_four_on_ray(tmp_path) -> int:
    """`molspec predict --ray local` on a file of four queries, to o.csv beside it; its exit status."""
    (tmp_path / "q.txt").write_text("CCO\nCCN\nCCCl\nCCBr\n")
    return main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output", str(tmp_path / "o.csv"),
                 "--ray", "local"])


def fake_ray(monkeypatch, events: list[str], init=lambda **_: None) -> None:
    """`import ray` gives a stand-in that starts no cluster and notes its shutdown in `events`."""
    import types

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: False, init=init,
                                                                  shutdown=lambda: events.append("shutdown")))


def test_a_worker_failure_is_one_error_line_and_keeps_the_rows_before_it(tmp_path, capsys, monkeypatch):
    """The driver stops at the first row a WorkerFailure took, with the reason as the boundary's `error:` line (exit
    2), the rows before it kept as a stopped run keeps them; Ray Data's iterator is closed before Ray shuts down:
    left to the garbage collector after ray.shutdown, it printed tracebacks and waited a minute for the cluster."""
    import json

    from molspec_core import scale

    events: list[str] = []

    def predicted(queries, *_):
        try:
            for row, found in refused(queries):
                yield row, found if row < 4 else json.dumps({scale.FAILED: "the Ray worker on n2 could not load it"})
        finally:
            events.append("closed")

    fake_ray(monkeypatch, events)
    monkeypatch.setattr(scale, "predicted", predicted)
    assert predict_four_on_ray(tmp_path) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-2].startswith("stopped: the rows of records 1-3 of 4 are kept in ")  # every record before it
    assert err[-1] == "error: the Ray worker on n2 could not load it"
    assert events == ["closed", "shutdown"] and not (tmp_path / "o.csv").exists()


def test_a_ray_run_keeps_the_file_its_output_replaces(tmp_path, capsys, monkeypatch):
    """As the single-process run keeps it (cli.keeping_replaced): the earlier file as <output>.bak, once the new one
    is whole."""
    from molspec_core import scale

    fake_ray(monkeypatch, [])
    monkeypatch.setattr(scale, "predicted", refused)
    (tmp_path / "o.csv").write_text("the earlier results\n")
    assert predict_four_on_ray(tmp_path) == 2  # every query refused: written, and an error
    assert (tmp_path / "o.csv.bak").read_text() == "the earlier results\n"
    assert len(read_queries(tmp_path / "o.csv", "query").queries) == 4
    capsys.readouterr()


def test_a_ray_runs_retrosynthesis_queries_of_several_molecules_are_named_by_their_records(tmp_path, capsys,
                                                                                            monkeypatch):
    """The note on salts (io.several_molecules_note) names the file's records: each worker numbers the queries it was
    given from 1, and the driver counted a record before it gave the row its number in the file."""
    import json

    from molspec_core import scale
    from molspec_core.io import result_rows
    from molspec_core.service import Prediction, QueryResult

    def predicted(queries, *_):
        for row, query in enumerate(queries, start=1):
            answered = QueryResult(query=query, canonical_query=query, method="greedy", task="retro",
                                   predictions=(Prediction(1, "CC", -1.0, True, ("C",), (-1,)),))
            yield row, json.dumps(result_rows(1, (), answered))  # as a worker given one query numbers it

    fake_ray(monkeypatch, [])
    monkeypatch.setattr(scale, "predicted", predicted)
    (tmp_path / "q.txt").write_text("CCO\nCCN.Cl\nCCCl\nCCBr.Br\n")
    assert main(["predict", "--model", "retro", "--input", str(tmp_path / "q.txt"), "--output",
                 str(tmp_path / "o.csv"), "--method", "greedy", "--ray", "local"]) == 0
    assert "note: 2 queries hold several molecules (rows 2 and 4). Row 2: " in capsys.readouterr().out


def test_a_stopped_ray_run_resumes_on_ray_from_the_rows_it_kept(tmp_path, capsys, monkeypatch):
    """Its last line says to run the same command with --resume, which was refused with --ray: the rest of a file
    had to be finished in one process. Now the cluster predicts the records not kept (its workers number them
    from 1) and the output is the single-process run's."""
    from molspec_core import scale

    given: list[list[str]] = []

    def in_process(queries, cluster, model, device, batch_size, options, engine, dtype, stop_at=0):
        """Ray's part played by one PredictWorker here; Ctrl-C when it hands over row `stop_at`."""
        given.append(list(queries))
        worker = PredictWorker(model, device, 1, options, engine, dtype, batch_size)
        out = worker({"row": np.arange(1, len(queries) + 1), "query": np.array(queries, dtype=object)})
        for pair in zip(out["row"].tolist(), out["rows"].tolist()):
            if pair[0] == stop_at:
                raise KeyboardInterrupt
            yield pair

    fake_ray(monkeypatch, [])
    write_queries(tmp_path / "q.csv", 30)
    run = ["predict", "--model", MODEL, "--input", str(tmp_path / "q.csv"), "--method", "beam", "--n-best", "2"]
    assert main([*run, "--output", str(tmp_path / "one.csv")]) == 0
    counts = capsys.readouterr().out.splitlines()[-1].split(" -> ")[0]  # 8 of the 28 queries rejected, 2 blank
    monkeypatch.setattr(scale, "predicted", lambda *args: in_process(*args, stop_at=12))
    assert main([*run, "--output", str(tmp_path / "ray.csv"), "--ray", "local"]) == 130
    assert "records 1-11 of 30 are kept" in capsys.readouterr().err  # 1-10 until session 84: record 11 was lost
    monkeypatch.setattr(scale, "predicted", in_process)
    assert main([*run, "--output", str(tmp_path / "ray.csv"), "--ray", "local", "--resume"]) == 0
    assert given[-1] == read_queries(tmp_path / "q.csv").queries[11:]
    assert capsys.readouterr().out.splitlines()[-1].split(" -> ")[0] == counts
    assert_same_predictions(records_without_time(tmp_path / "ray.csv"), records_without_time(tmp_path / "one.csv"))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["one.csv", "q.csv", "ray.csv"]


def test_workers_load_the_engine_asked_for():
    """--engine reaches the Ray workers (each loads its own copy of the model)."""
    assert PredictWorker(MODEL, "cpu", threads=1, options={}, engine="torch").predictor.engine == "torch"
    assert PredictWorker(MODEL, "cpu", threads=1, options={}, engine="numpy").predictor.engine == "numpy"


@pytest.mark.parametrize("argv,message", [
    (["--input", "q.csv", "--output", "o.csv", "--workers", "2"], "--workers goes with --ray"),
    (["--smiles", "CCO", "--ray", "local"], "--ray predicts files"),
])
def test_ray_options_are_checked_before_anything_runs(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.csv").write_text("smiles\nCCO\n")
    assert main(["predict", "--model", MODEL, *argv]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "o.csv").exists()


def test_without_ray_installed_the_message_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails, as where it is not installed
    (tmp_path / "q.csv").write_text("smiles\nCCO\n")
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.csv"), "--output",
                 str(tmp_path / "o.csv"), "--ray", "local"]) == 2
    assert "pip install -e .[scale]" in capsys.readouterr().err
    # the engine's own refusal (a caller of predict_on_ray that did not ask first) is in the command line's words
    from molspec_core.cli import RAY_PACKAGE_MISSING
    from molspec_core.scale import connected

    with pytest.raises(ValueError) as refused, connected("local"):
        pass
    assert str(refused.value) == RAY_PACKAGE_MISSING


def test_sigterm_during_a_ray_run_is_reported_and_keeps_the_rows_written(tmp_path, capsys, monkeypatch):
    """ray.init put its own SIGTERM handler (sys.exit) in place of the command line's: a stopped --ray run exited 15
    (or 1) without the `terminated` line or a word of its rows. It runs in a thread now, where it sets none."""
    import signal
    import threading
    import types

    from molspec_core import scale

    def init(**_):  # what ray.init does to the driver's SIGTERM, in the main thread only
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))

    def predicted(queries, *_):
        for row, found in refused(queries):
            if row == 4:  # what SIGTERM runs in the main thread
                signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
            yield row, found

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: False, init=init,
                                                                  shutdown=lambda: None))
    monkeypatch.setattr(scale, "predicted", predicted)
    before = signal.getsignal(signal.SIGTERM)
    assert predict_four_on_ray(tmp_path) == 143
    err = capsys.readouterr().err.splitlines()
    assert err[-2].startswith("stopped: the rows of records 1-3 of 4 are kept in ") and err[-1] == "terminated"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.interrupted.csv", "o.interrupted.json", "q.txt"]
    assert signal.getsignal(signal.SIGTERM) is before


def starting_ray(events: list[str], signum: int):
    """A stand-in for ray.init that gets `signum` half-way, as a run stopped in Ray's first seconds does, and goes on
    to its end only if that does not stop it (it sets Ray's SIGTERM handler, sys.exit, where it runs in the main
    thread)."""
    import os
    import signal
    import threading
    import time

    def init(**_):
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        events.append("starting")
        os.kill(os.getpid(), signum)
        time.sleep(0.5)  # the signal's handler runs meanwhile (in the main thread)
        events.append("started")

    return init


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C as an interactive run gets it: a suite started in the background (`nohup pytest &`) inherits SIGINT
    ignored, Python then installs no KeyboardInterrupt handler, and these tests' own Ctrl-C did nothing (session 87)."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("ctrl_c_raises")
@pytest.mark.parametrize("signame,code,line", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_a_run_stopped_while_ray_starts_stops_the_ray_it_started(tmp_path, capsys, monkeypatch, signame, code, line):
    """Ctrl-C or SIGTERM in ray.init's first seconds cut it half-way, and Ray's dashboard and runtime-env agents stayed
    running after the run (they ignore SIGTERM), or the run crashed as it exited (SIGSEGV); with SIGTERM Ray's own
    handler took it and the run exited 15 without the `terminated` line. Now Ray finishes starting, is shut down, and
    the run stops as a stopped run does."""
    import signal

    events: list[str] = []
    fake_ray(monkeypatch, events, starting_ray(events, getattr(signal, signame)))
    (tmp_path / "q.txt").write_text("CCO\n")
    before = signal.getsignal(signal.SIGTERM)
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output", str(tmp_path / "o.csv"),
                 "--ray", "local"]) == code
    assert capsys.readouterr().err.splitlines()[-3:] == [
        "stopping once Ray has started or stopped, so that none of its processes stay behind",
        f"stopped: no record finished; {tmp_path / 'o.csv'} was not written", line]
    assert events == ["starting", "started", "shutdown"] and signal.getsignal(signal.SIGTERM) is before


@pytest.mark.usefixtures("ctrl_c_raises")
def test_a_second_ctrl_c_does_not_cut_short_the_stopping_of_a_run(tmp_path, capsys, monkeypatch):
    """The second Ctrl-C cut short the closing of Ray Data's iterator (it takes a second or two), which then reached
    for Ray after ray.shutdown; Ray ended the process with exit 1 and not a word of the rows kept."""
    import os
    import signal

    from molspec_core import scale

    events: list[str] = []

    def predicted(queries, *_):
        try:
            yield from refused(queries[:2])
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C ...
            yield from refused(queries[2:])
        finally:  # ... and Ctrl-C again while Ray Data's iterator closes
            os.kill(os.getpid(), signal.SIGINT)
            events.append("closed")

    fake_ray(monkeypatch, events)
    monkeypatch.setattr(scale, "predicted", predicted)
    before = signal.getsignal(signal.SIGINT)
    assert predict_four_on_ray(tmp_path) == 130
    err = capsys.readouterr().err.splitlines()
    assert err[-2].startswith("stopped: the rows of records 1-2 of 4 are kept in ") and err[-1] == "interrupted"
    assert events == ["closed", "shutdown"] and signal.getsignal(signal.SIGINT) is before


def test_ray_starts_and_stops_in_one_thread_that_outlives_it(tmp_path, monkeypatch):
    """Ray's processes die with the thread that started them (PR_SET_PDEATHSIG): started in a thread that ended, the
    local cluster died under the run. The thread that starts it stops it, and is not the main thread, where ray.init
    puts its own SIGTERM handler in place of the command line's."""
    import threading

    events: list[str] = []
    threads: list[threading.Thread] = []
    fake_ray(monkeypatch, events, init=lambda **_: threads.append(threading.current_thread()))
    monkeypatch.setitem(sys.modules["ray"].__dict__, "shutdown", lambda: threads.append(threading.current_thread()))
    from molspec_core import scale
    monkeypatch.setattr(scale, "predicted", refused)
    (tmp_path / "q.txt").write_text("CCO\n")
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output",
                 str(tmp_path / "o.csv"), "--ray", "local"]) == 2  # every query refused
    assert len(threads) == 2 and threads[0] is threads[1] and threads[0] is not threading.main_thread()


def test_ray_processes_that_outlive_its_shutdown_are_ended(tmp_path, monkeypatch):
    """A raylet stopped in its first seconds left its agents running for a minute or more after the run (they ignore
    SIGTERM); what Ray started below this process and still runs after ray.shutdown is ended."""
    import subprocess

    agents: list[subprocess.Popen] = []
    ignores_sigterm = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"

    def init(**_):
        agents.append(subprocess.Popen([sys.executable, "-c", ignores_sigterm, "ray::RuntimeEnvAgent"]))

    fake_ray(monkeypatch, [], init)
    from molspec_core import scale
    monkeypatch.setattr(scale, "predicted", refused)
    (tmp_path / "q.txt").write_text("CCO\n")
    try:
        assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output",
                     str(tmp_path / "o.csv"), "--ray", "local"]) == 2  # every query refused
        assert agents[0].poll() is not None
    finally:
        agents[0].kill()
        agents[0].wait()


def test_an_address_where_no_cluster_listens_is_refused_at_once(tmp_path, capsys, monkeypatch):
    """ray.init waited minutes for it (a warning every half minute) before it failed; and it was told only once the
    model had loaded (seconds for a shipped one on a CPU)."""
    import socket

    from molspec_core.service import Predictor

    events: list[str] = []
    fake_ray(monkeypatch, events, init=lambda **_: events.append("init"))
    monkeypatch.setattr(Predictor, "load", lambda *a, **k: pytest.fail("the model loaded before the address was asked"))
    with socket.socket() as closed:  # a port that was free a moment ago: nothing listens there
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    (tmp_path / "q.txt").write_text("CCO\n")
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output", str(tmp_path / "o.csv"),
                 "--ray", f"127.0.0.1:{port}"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: no Ray cluster answers at 127.0.0.1:{port} (Connection refused): start one there with "
        f"`ray start --head --port={port}`, or use --ray local")
    assert events == []


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1", "head:port", "http://head:6379", "head: 6379"])
def test_an_address_ray_cannot_read_is_refused_with_the_options_and_says_what_it_takes(tmp_path, capsys, monkeypatch,
                                                                                       address):
    """Ray's own 'Invalid address format: nonsense' came once the model had loaded and the file was read, and named
    nothing --ray takes."""
    from molspec_core.service import Predictor

    events: list[str] = []
    fake_ray(monkeypatch, events, init=lambda **_: events.append("init"))
    monkeypatch.setattr(Predictor, "load", lambda *a, **k: pytest.fail("the model loaded before the address was read"))
    (tmp_path / "q.txt").write_text("CCO\n")
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output", str(tmp_path / "o.csv"),
                 "--ray", address]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --ray {address!r} is no Ray address: give 'auto' (the cluster this machine joined with `ray start`; "
        "the default), the host:port of a cluster's head, ray://host:port (Ray Client) or 'local' to start one here")
    assert events == []


def test_the_ray_help_names_every_address_it_takes():
    """--ray's help named 'auto', host:port and 'local'; Ray Client's ray://host:port is taken too (check_address),
    and the refusal of any other names it."""
    import argparse

    from molspec_core.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    text = " ".join(next(a for a in commands["predict"]._actions if a.dest == "ray").help.split())
    assert all(name in text for name in ("'auto'", "host:port", "ray://host:port (Ray Client)", "'local'"))


@pytest.mark.parametrize("address", ["head:99999", "127.0.0.1:0", "[::1]:65536"])
def test_an_address_whose_port_is_no_port_is_refused_before_the_model_loads(tmp_path, capsys, monkeypatch, address):
    """--ray head:99999 was told 'no Ray cluster answers at head:99999 (...): start one there with `ray start --head
    --port=99999`', advice no port takes."""
    from molspec_core.service import Predictor

    events: list[str] = []
    fake_ray(monkeypatch, events, init=lambda **_: events.append("init"))
    monkeypatch.setattr(Predictor, "load", lambda *a, **k: pytest.fail("the model loaded before the address was read"))
    (tmp_path / "q.txt").write_text("CCO\n")
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output", str(tmp_path / "o.csv"),
                 "--ray", address]) == 2
    port = address.rpartition(":")[2]
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: --ray {address!r}: {port} is no port (ports run from 1 to 65535): give the port of the cluster's "
        "head, 6379 unless its `ray start --head --port` set another")
    assert events == []


def test_a_process_connected_to_ray_runs_on_its_cluster_whatever_the_address(tmp_path, monkeypatch):
    """As the README says: the address is neither read nor asked (a notebook's cluster, a test's)."""
    import types

    from molspec_core import scale

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setattr(scale, "predicted", refused)
    (tmp_path / "q.txt").write_text("CCO\n")
    for address in ("nonsense", "127.0.0.1:1"):
        assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output",
                     str(tmp_path / "o.csv"), "--ray", address]) == 2  # all refused: the run was made
        assert (tmp_path / "o.csv").exists()
        (tmp_path / "o.csv").unlink()


def test_the_addresses_ray_takes_pass_the_check():
    from molspec_core.scale import check_address

    for address in ("auto", "local", "10.0.0.5:6379", "head-node.example.org:6379", "[::1]:6379", "ray://head:10001"):
        check_address(address)


def test_an_address_that_takes_the_connection_and_never_answers_is_refused(tmp_path, capsys, monkeypatch):
    """A firewall (or any server but Ray's) that accepts the connection and drops what is sent passed the check that
    something listens, and ray.init then waited minutes, a warning every half minute. Here a port that listens and
    never reads: the kernel takes the connection, nobody answers."""
    import socket

    from molspec_core import scale

    events: list[str] = []
    fake_ray(monkeypatch, events, init=lambda **_: events.append("init"))
    monkeypatch.setattr(scale, "ANSWER_S", 0.5)
    (tmp_path / "q.txt").write_text("CCO\n")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output",
                     str(tmp_path / "o.csv"), "--ray", f"127.0.0.1:{port}"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: no Ray cluster answers at 127.0.0.1:{port} (no answer in 0.5 s): start one there with "
        f"`ray start --head --port={port}`, or use --ray local")
    assert events == []


def test_auto_is_checked_where_ray_address_sends_it(tmp_path, capsys, monkeypatch):
    """ray.init('auto') connects to RAY_ADDRESS where it is set: one that never answered waited minutes too."""
    import socket

    from molspec_core import scale

    events: list[str] = []
    fake_ray(monkeypatch, events, init=lambda **_: events.append("init"))
    monkeypatch.setattr(scale, "ANSWER_S", 0.5)
    (tmp_path / "q.txt").write_text("CCO\n")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv("RAY_ADDRESS", address)
        assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output",
                     str(tmp_path / "o.csv"), "--ray"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        f"error: no Ray cluster answers at {address} (RAY_ADDRESS, no answer in 0.5 s)")
    assert events == []


def test_an_address_that_answers_is_left_to_ray(tmp_path, monkeypatch):
    """What a Ray head's GCS does on a connection: it sends its HTTP/2 settings at once."""
    import socket
    import threading

    events: list[str] = []
    fake_ray(monkeypatch, events, init=lambda **_: events.append("init"))
    from molspec_core import scale
    monkeypatch.setattr(scale, "predicted", refused)
    (tmp_path / "q.txt").write_text("CCO\n")
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()

        def settings() -> None:
            connection, _ = head.accept()
            with connection:
                connection.sendall(bytes.fromhex("000000040000000000"))  # an empty SETTINGS frame
                connection.recv(64)

        answering = threading.Thread(target=settings)
        answering.start()
        assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.txt"), "--output",
                     str(tmp_path / "o.csv"), "--ray", f"127.0.0.1:{head.getsockname()[1]}"]) == 2  # all refused
        answering.join()
    assert events == ["init", "shutdown"] and (tmp_path / "o.csv").exists()


# ---- on a local Ray cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local cluster for this file's Ray tests; yields the crash file its workers watch (see
    scale.crash_if_asked): writing a row number there kills the worker that gets that row, once."""
    pytest.importorskip("ray.data", reason="Ray is the optional extra 'scale': pip install -e .[scale]")
    import ray

    crash_file = tmp_path_factory.mktemp("faults") / "kill-at-row"
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, logging_level="WARNING",
             runtime_env={"env_vars": {CRASH_FILE_ENV: str(crash_file)}})
    yield crash_file
    ray.shutdown()


@pytest.fixture(scope="module")
def single_process(tmp_path_factory):
    """(query file, the single-process CLI's output of it): 2,000 rows, batches of 8."""
    folder = tmp_path_factory.mktemp("single")
    write_queries(folder / "q.csv", N_ROWS)
    assert main(["predict", "--model", MODEL, "--input", str(folder / "q.csv"), "--output", str(folder / "out.csv"),
                 "--method", "beam", "--n-best", "2"]) == 0
    return folder / "q.csv", folder / "out.csv"


def predict_on_ray(source, out) -> int:
    return main(["predict", "--model", MODEL, "--input", str(source), "--output", str(out), "--method", "beam",
                 "--n-best", "2", "--ray", "local", "--workers", "2"])


def test_ray_writes_the_single_process_csv(cluster, single_process, tmp_path):
    """The same columns, cells and row order; compared as text, every cell but time_ms and FLOAT_CELLS."""
    source, expected = single_process
    assert predict_on_ray(source, tmp_path / "ray.csv") == 0
    assert_same_predictions(records_without_time(tmp_path / "ray.csv"), records_without_time(expected))


def test_a_killed_worker_loses_no_row_and_repeats_none(cluster, single_process, tmp_path):
    """Issue 18's fault test: the worker that gets row 1,100 kills its own process (SIGKILL) part-way
    through the run; Ray starts another and runs the lost blocks again."""
    source, expected = single_process
    cluster.write_text("1100")
    assert predict_on_ray(source, tmp_path / "ray.csv") == 0
    assert not cluster.exists()  # the worker took the trigger, so it died
    records = records_without_time(tmp_path / "ray.csv")
    row, rank = records[0].index("row"), records[0].index("rank")
    firsts = [int(record[row]) for record in records[1:] if record[rank] in ("", "1")]  # a query's rank 1 or error
    assert firsts == list(range(1, N_ROWS + 1))
    assert_same_predictions(records, records_without_time(expected))


def test_a_model_the_workers_cannot_load_is_one_error_line(cluster, tmp_path, capsys):
    """The driver loads the model on its CPU with the default engine; a worker's load can still fail (here CUDA
    graphs on a CPU worker; on a cluster, a folder missing on a node): exit 2 and one `error:` line, no traceback."""
    write_queries(tmp_path / "q.csv", 40)
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "q.csv"), "--output", str(tmp_path / "o.csv"),
                 "--engine", "graphs", "--ray", "local", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "could not load the model: engine graphs (CUDA graphs) runs on CUDA only" in err.splitlines()[-1]
    assert "Traceback" not in err and not (tmp_path / "o.csv").exists()


def test_ray_reports_an_sd_records_problem_as_the_single_process_does(cluster, tmp_path):
    (tmp_path / "drawn.sdf").write_text(sd_file_text())
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "drawn.sdf"), "--output",
                 str(tmp_path / "one.csv"), "--method", "beam", "--n-best", "2"]) == 0
    assert predict_on_ray(tmp_path / "drawn.sdf", tmp_path / "ray.csv") == 0
    records = records_without_time(tmp_path / "ray.csv")
    assert_same_predictions(records, records_without_time(tmp_path / "one.csv"))
    assert "SD record 2: RDKit cannot read its molblock" in records[2]


def test_ray_marks_known_answers_as_the_single_process_does(cluster, tmp_path):
    (tmp_path / "in.csv").write_text("smiles,expected\n" + "".join(f"Oc1ccncc1,{known}\n" for known in
                                                                     ("Oc1cccnc1", "Oc1ccncc1", "", "xyz") * 5))
    outputs = []
    for ray in ([], ["--ray", "local", "--workers", "2"]):
        assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "in.csv"), "--output",
                     str(tmp_path / f"out{len(ray)}.csv"), "--method", "beam", "--n-best", "2", "--known-column",
                     "expected", *ray]) == 0
        outputs.append(records_without_time(tmp_path / f"out{len(ray)}.csv"))
    assert_same_predictions(outputs[1], outputs[0])
    from pathlib import Path

    from molspec_core.calibration import weights_fingerprint

    # the model's columns after matches_known on Ray too (cli.Named), as the app's files end (io.MODEL_COLUMNS)
    assert outputs[1][0][-3:] == ["matches_known", "model_folder", "model_weights"]
    assert {tuple(row[-2:]) for row in outputs[1][1:]} == {(Path(MODEL).name, weights_fingerprint(MODEL))}


def test_ray_writes_the_single_process_sd_file(cluster, tmp_path):
    """--output F.sdf on Ray: the records the single-process path writes, in its order, time_ms aside."""
    (tmp_path / "drawn.sdf").write_text(sd_file_text())
    assert main(["predict", "--model", MODEL, "--input", str(tmp_path / "drawn.sdf"), "--output",
                 str(tmp_path / "one.sdf"), "--method", "beam", "--n-best", "2"]) == 0
    assert predict_on_ray(tmp_path / "drawn.sdf", tmp_path / "ray.sdf") == 0
    one, ray = read_queries(tmp_path / "one.sdf"), read_queries(tmp_path / "ray.sdf")
    assert ray.queries == one.queries and ray.columns == one.columns and len(one.queries) > 4
    drop = one.columns.index("time_ms")
    header = one.columns[:drop] + one.columns[drop + 1:]
    assert_same_predictions([header, *(c[:drop] + c[drop + 1:] for c in ray.cells)],
                            [header, *(c[:drop] + c[drop + 1:] for c in one.cells)])
