"""Batch prediction on a Ray cluster: `molspec predict --input F --output F --ray [ADDRESS|auto|local]`.

The driver reads the file with io.read_queries (the one bounded reader, so both paths accept and refuse
the same files) and gives Ray Data the queries as blocks of (row, query) rows, each block a whole
number of batches. `map_batches` runs on an actor pool: each actor loads one Predictor, once, and
predicts block after block, each in one `predict` call that cuts it into batches of like length, as the
single-process path does with its (longer) windows (at batch size 1, the very same decoder calls; a query a call
where each is read in several writings, --augment > 1, as there: service.window_size). Each
query comes back with its input row number and its output rows; the driver puts the user's cells in
front and writes the rows in input order through io.write_results, the single-process path's writer.

Faults: Ray restarts an actor whose process dies and runs its blocks again. The driver keeps each row
once and writes no output at all if a row never came back. A worker that cannot load the model, or meets
wrong options, says why in its block's rows (WorkerFailure) instead of raising: raised, Ray printed the
worker's traceback and its own to the user's terminal, and the run exited 1 without a word of its own.

Ray is an optional extra (`pip install -e .[scale]`), imported only when --ray is given.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .io import (RESULT_COLUMNS, LastRow, Outcomes, QueryFile, check_output, output_header, predict_batch, result_rows,
                 write_results)
from .service import Predictor, QueryResult, window_size

if TYPE_CHECKING:
    import ray.data

    from .io import Kept
    from .known import KnownMarks

log = logging.getLogger(__name__)

# A block is what Ray runs again when its worker dies: at most 16 batches keep that redo small, and a
# small file is cut into at least 4 blocks per worker so that every worker gets some.
BLOCK_BATCHES = 16
BLOCKS_PER_WORKER = 4
# The fault test's trigger (see crash_if_asked); unset outside tests/test_scale.py.
CRASH_FILE_ENV = "MOLSPEC_TEST_CRASH_FILE"
ERROR = RESULT_COLUMNS.index("error")
ROW = RESULT_COLUMNS.index("row")
FAILED = "failed"  # the key of a WorkerFailure's JSON, in place of a query's output rows
# How long a host:port given to --ray has to answer (answers), and what it is sent: the opening of HTTP/2 (gRPC).
ANSWER_S = 10.0
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# What --ray takes besides 'auto', 'local' and Ray Client's ray://...: a head's host:port (an IPv6 host in brackets).
HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+):[0-9]{1,5}")
MAX_PORT = 65535
# What a run asked of Ray where it is not installed: an extra (pyproject's scale), as the peer's is. The command line
# asks before the model loads (cli.cluster_options), connected as the run starts (a caller of the engine).
RAY_PACKAGE_MISSING = "--ray needs Ray: pip install -e .[scale]"
# Ray's notes that tell the user of a run nothing, by the logger that writes each (hidden by quiet_ray).
RAY_NOISE = {"ray._private.worker": "SIGTERM handler is not set",  # ray.init runs in a thread on purpose (connected)
             "ray._private.authentication.authentication_token_setup": "Token authentication is enabled",
             "ray.data._internal.progress": "Progress bars disabled"}  # the run's one bar, ours, counts the queries


class WorkerFailure(Exception):
    """What stops the whole run, found on a worker: the model does not load there (a folder missing on that node,
    a device or engine it lacks), or the options are wrong. Sent to the driver in the block's rows."""


@dataclass(frozen=True)
class Cluster:
    """Where the run goes and how wide: a Ray address and the actor pool."""
    address: str = "auto"  # 'auto' (the cluster this machine joined), 'local' (start one here) or host:port
    workers: int | None = None  # actors, each with its own model; None: as many as the cluster holds
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0


def predict_on_ray(table: QueryFile, output: str | Path, cluster: Cluster, model: str, device: str,
                   batch_size: int, options: dict[str, Any], engine: str = "auto", dtype: str = "float32",
                   marks: KnownMarks | None = None, keep: Kept | None = None,
                   kept: Iterator[list[object]] | None = None, outcomes: Outcomes | None = None) -> Outcomes:
    """Predict every query of `table` on a Ray cluster and write the CSV that the single-process path
    writes (the same columns and rows, in input order; with `marks`, matches_known last; interrupted, the rows
    written so far kept at `keep`, io.write_csv). Resumed, `kept` gives the rows of records 1 to keep.held that an
    interrupted run kept (cli.kept_part, which counts them into `outcomes`); those records are not predicted again.
    Returns how the records came out (rejected, stopped at the time limit; blank records are neither): `outcomes`,
    or a new count."""
    start = keep.held if keep is not None else 0
    outcomes = Outcomes() if outcomes is None else outcomes

    def rows() -> Iterator[list[object]]:
        from tqdm import tqdm

        if kept is not None:
            yield from kept
        if start == len(table.queries):
            return
        pairs = predicted(table.queries[start:], cluster, portable(model), device, batch_size, options, engine, dtype)
        try:
            for shifted, found in tqdm(in_row_order(pairs, len(table.queries) - start), total=len(table.queries),
                                       initial=start, desc="predict (ray)", unit="query"):
                row = shifted + start
                query_rows = json.loads(found)
                if isinstance(query_rows, dict):  # the worker's WorkerFailure: the run stops, keeping the rows before
                    raise ValueError(query_rows[FAILED])
                if problem := table.problem_of(row - 1):  # its empty query's error, as result_rows writes it
                    query_rows[0][ERROR] = problem
                cells = table.cells_of(row - 1)
                for query_row in query_rows:
                    query_row[ROW] = row  # the worker numbered the queries it was given from 1
                if not table.is_blank(row - 1):  # counted by the file's record number (io.Outcomes.several)
                    outcomes.count(query_rows[0])
                # the record's last row marked, as result_rows marks it: a run stopped after it keeps the record
                yield from [[*cells, *query_row] for query_row in query_rows[:-1]]
                yield LastRow([*cells, *query_rows[-1]])
        finally:  # stopped (an error, Ctrl-C), Ray Data's iterator is closed while the cluster is still up (predicted)
            pairs.close()

    from .cli import keeping_replaced

    header = output_header(table.columns) if marks is None else marks.header
    # a failed run keeps any earlier output as it was; a whole one keeps it as <output>.bak, as predict_here does
    written = keeping_replaced(rows() if marks is None else marks.rows(rows()), check_output(output))
    if start == len(table.queries):  # nothing to predict (an empty file; every record kept): no cluster
        write_results(output, header, written, keep)
        return outcomes
    with connected(cluster.address):
        write_results(output, header, written, keep)
    return outcomes


def predicted(queries: list[str], cluster: Cluster, model: str, device: str, batch_size: int,
              options: dict[str, Any], engine: str = "auto", dtype: str = "float32") -> Iterator[tuple[int, str]]:
    """(row, the query's output rows as JSON) for every query, from an actor pool on the connected cluster.

    A query's rows travel as one JSON text, not as Arrow columns: Arrow turns a column of whole numbers
    with gaps (the rank of a rejected query) into floats, and rank 1 would come back as 1.0."""
    import ray

    workers, rows_per_block = pool_shape(len(queries), batch_size, worker_count(cluster), options.get("augment", 1))
    dataset = query_blocks(queries, rows_per_block).map_batches(
        PredictWorker, batch_size=rows_per_block, batch_format="numpy",  # a block per call, cut into batches there
        fn_constructor_kwargs=dict(model=model, device=device, threads=max(1, round(cluster.cpus_per_worker)),
                                   options=options, engine=engine, dtype=dtype, batch_size=batch_size),
        compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=cluster.cpus_per_worker,
        num_gpus=cluster.gpus_per_worker)  # Ray Data's defaults restart a dead actor and rerun its blocks
    dataset.context.execution_options.preserve_order = True  # rows come in input order; in_row_order checks
    dataset.context.enable_progress_bars = False  # one bar, ours, counting the queries written
    batches = iter(dataset.iter_batches(batch_size=None, batch_format="numpy"))
    try:
        for batch in batches:
            yield from zip(batch["row"].tolist(), batch["rows"].tolist())
    finally:  # left open, it was collected after ray.shutdown: it reached for the cluster that was gone, printed
        batches.close()  # tracebacks and waited a minute for it


def pool_shape(n_queries: int, batch_size: int, workers: int, augment: int = 1) -> tuple[int, int]:
    """(actors, rows per block) for n_queries: blocks of whole batches, at most BLOCK_BATCHES, at least
    BLOCKS_PER_WORKER per actor where the file is long enough, and no more actors than blocks (one with no block only
    loaded the model, and Ray Data warned that it could not use them all). Where each query is read in several
    writings (augment > 1) predict takes one query at a time (service.window_size), so a block holds at most
    BLOCK_BATCHES queries: blocks of batches held up to 16 * batch_size, all lost to a stop and all redone when their
    worker died, for no speed."""
    unit = min(batch_size, window_size(batch_size, augment))  # a batch; one query at augment > 1
    n_units = -(-n_queries // unit)
    rows_per_block = unit * max(1, min(BLOCK_BATCHES, n_units // (BLOCKS_PER_WORKER * workers)))
    return max(1, min(workers, -(-n_queries // rows_per_block))), rows_per_block


def query_blocks(queries: list[str], rows_per_block: int) -> ray.data.Dataset:
    """The queries as a Ray dataset of (row, query) rows, 1-based rows, in blocks of rows_per_block (the
    last may be shorter). Blocks hold whole batches, so map_batches cuts the single-process batches. The
    dataset is built from memory: a read task would wait for a CPU that the actors hold."""
    import pyarrow as pa
    import ray.data

    def block(start: int) -> pa.Table:
        chunk = queries[start:start + rows_per_block]
        return pa.table({"row": pa.array(range(start + 1, start + 1 + len(chunk)), pa.int64()),
                         "query": pa.array(chunk, pa.string())})

    return ray.data.from_arrow([block(start) for start in range(0, len(queries), rows_per_block)])


class PredictWorker:
    """One actor of the pool: loads the model once, then predicts block after block, each in batches of
    batch_size (None: a block in one batch)."""

    def __init__(self, model: str, device: str, threads: int, options: dict[str, Any], engine: str = "auto",
                 dtype: str = "float32", batch_size: int | None = None) -> None:
        import torch

        torch.set_num_threads(threads)  # the CPUs Ray gave this actor, not every core of its node
        self.predictor: Predictor | None = None
        self.failure = ""  # why the model did not load here, said by every block (__call__)
        try:
            self.predictor = Predictor.load(model, device, engine, dtype)
        except Exception as exc:  # noqa: BLE001 - raised here, Ray printed the worker's traceback, restarted it
            self.failure = f"the Ray worker on {node_name()} could not load the model: {reason(exc)}"
        self.options = options
        self.batch_size = batch_size

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = [int(row) for row in batch["row"]]
        crash_if_asked(rows)
        try:
            timed = self.predict([str(query) for query in batch["query"]])
        except WorkerFailure as failure:
            found = [json.dumps({FAILED: str(failure)})] * len(rows)
        else:
            found = [json.dumps(result_rows(row, (), result, time_ms)) for row, (result, time_ms) in zip(rows, timed)]
        return {"row": np.asarray(rows, dtype=np.int64), "rows": np.asarray(found, dtype=object)}

    def predict(self, queries: list[str]) -> list[tuple[QueryResult, float | None]]:
        """Each query's result and time_ms: the block a window at a time, as the single-process path predicts a
        file (service.window_size: the whole block in one call, or each query alone where it is read in several
        writings, so that each is timed alone); if a window's call raises (a bug, memory running out), each of its
        queries alone, so that a bad query is one error row and never fails its block. WorkerFailure where the model
        did not load or the options are wrong (a ValueError, the service's contract): the run stops, as it does
        without Ray."""
        if self.predictor is None:
            raise WorkerFailure(self.failure)
        step = window_size(self.batch_size or len(queries), int(self.options.get("augment", 1)))
        windows = [queries[start:start + step] for start in range(0, len(queries), step)]
        return [timed for window in windows for timed in self.predict_window(window)]

    def predict_window(self, queries: list[str]) -> list[tuple[QueryResult, float | None]]:
        assert self.predictor is not None  # predict checked
        try:
            results, time_ms = predict_batch(self.predictor, queries, self.batch_size, **self.options)
            return [(result, time_ms) for result in results]
        except ValueError as exc:
            raise WorkerFailure(reason(exc)) from None
        except Exception:  # noqa: BLE001
            log.exception("a batch of %d queries failed; predicting them one by one", len(queries))
            return [self.predict_alone(query) for query in queries]

    def predict_alone(self, query: str) -> tuple[QueryResult, float | None]:
        assert self.predictor is not None  # predict checked
        try:
            results, time_ms = predict_batch(self.predictor, [query], **self.options)
            return results[0], time_ms
        except ValueError as exc:
            raise WorkerFailure(reason(exc)) from None
        except Exception as exc:  # noqa: BLE001
            log.exception("query %r failed", query[:100])
            error = f"the model failed ({type(exc).__name__})"  # the app's words for the same failure
            return QueryResult(query=query, method=str(self.options.get("method", "")), error=error), None


def reason(exc: BaseException) -> str:
    """An exception in the words of the command line's `error:` line (boundary.describe)."""
    from .boundary import describe

    return describe(exc, "each Ray worker holds a model and its batch: use fewer --workers or a smaller --batch-size")


def node_name() -> str:
    """The address of the node this worker runs on, which a message on a cluster must name."""
    try:
        import ray.util

        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray (a test), or its address unknown
        return "this node"


def crash_if_asked(rows: list[int]) -> None:
    """The fault test's trigger: where MOLSPEC_TEST_CRASH_FILE names a file holding a row number, the
    actor whose batch holds that row deletes the file and kills its own process, as the kernel's
    out-of-memory killer would. Once: the retried block finds no file."""
    path = os.environ.get(CRASH_FILE_ENV)
    if not path:
        return
    try:
        if int(Path(path).read_text()) not in rows:
            return
        os.unlink(path)  # of two actors that read the file, only one removes it
    except (FileNotFoundError, ValueError):
        return
    os.kill(os.getpid(), signal.SIGKILL)


def in_row_order(pairs: Iterable[tuple[int, str]], n_rows: int) -> Iterator[tuple[int, str]]:
    """(row, output) pairs in row order 1..n_rows, each row once: a row that comes early waits, a row
    that comes again (a block run twice after its worker died) is dropped, and a row that never comes
    is an error, raised before the output file is put in place."""
    waiting: dict[int, str] = {}
    next_row, repeats = 1, 0
    for row, output in pairs:
        if row < next_row or row in waiting:
            repeats += 1
            continue
        waiting[row] = output
        while next_row in waiting:
            yield next_row, waiting.pop(next_row)
            next_row += 1
    if repeats == 1:  # not '1 rows came back twice'
        log.warning("1 row came back twice (a block run again after a worker died); it was kept once")
    elif repeats:
        log.warning("%d rows came back twice (blocks run again after a worker died); each was kept once", repeats)
    if next_row <= n_rows or waiting:
        raise RuntimeError(f"Ray returned {next_row - 1 + len(waiting)} of {n_rows} rows; row {next_row} is missing, "
                           "so no output was written")


# Cells computed in float32 whose last printed digit may differ between a Ray run and the single-process run: a
# worker cuts its block into other batches (other padding, other batch-mates) and runs its own thread count, and BLAS
# sums in an order that follows the shapes and threads. Printed as 4 decimals (score, confidence) or 4 significant
# digits (probabilities): equal to a unit of that digit, within these tolerances.
FLOAT_CELLS = frozenset({"score", "probability", "confidence", "forward_prob"})
FLOAT_REL, FLOAT_ABS = 2e-3, 2e-4


def first_difference(got: list[list[str]], expected: list[list[str]]) -> str | None:
    """Where two outputs, as records of text cells with the header first and time_ms left out, differ as predictions:
    a header, a record count, a cell (FLOAT_CELLS beyond their last printed digit); None where they agree."""
    if got[:1] != expected[:1] or len(got) != len(expected):
        return f"headers {got[:1]} and {expected[:1]}, {len(got)} and {len(expected)} records"
    header = expected[0]
    for n, (record, want) in enumerate(zip(got[1:], expected[1:]), start=1):
        for name, a, b in zip(header, record, want):
            same = a == b or (name in FLOAT_CELLS and a != "" and b != ""
                              and math.isclose(float(a), float(b), rel_tol=FLOAT_REL, abs_tol=FLOAT_ABS))
            if not same:
                return f"record {n}, {name}: {a!r} and {b!r}"
    return None


def worker_count(cluster: Cluster) -> int:
    """The actors to start: --workers, or as many as the cluster holds (fit_workers). A cluster started here ('local')
    never grows, so it gets at most what it holds, with a warning: the actors beyond waited the whole run for CPUs,
    and Ray Data warned that the job might hang forever unless the cluster scaled up."""
    if cluster.workers is not None and cluster.address != "local":
        return cluster.workers  # a cluster elsewhere may scale up to the actors asked for
    held = fit_workers(cluster)
    if cluster.workers is None:
        return held
    if cluster.workers > held:
        each = f"{cluster.gpus_per_worker:g} GPU" if cluster.gpus_per_worker else f"{cluster.cpus_per_worker:g} CPU"
        log.warning("--workers %d: the local Ray cluster holds %d (%s each); %d workers predict", cluster.workers, held,
                    each, held)
    return min(cluster.workers, held)


def fit_workers(cluster: Cluster) -> int:
    """As many actors as the cluster's GPUs (when each asks for some) or CPUs hold."""
    import ray

    resource, each = ("GPU", cluster.gpus_per_worker) if cluster.gpus_per_worker else ("CPU", cluster.cpus_per_worker)
    have = ray.cluster_resources().get(resource, 0.0)
    if have < each:  # named by the option that asks: the refusal named none, and counted '1 CPUs'
        fewer = "leave it out to predict on CPUs" if resource == "GPU" and not have else f"give at most {have:g}"
        raise ValueError(f"the Ray cluster has {have:g} {resource}{'s' * (have != 1)}, and a worker asks for {each:g} "
                         f"(--{resource.lower()}s-per-worker {each:g}): {fewer}")
    return int(have // each)


def portable(model: str) -> str:
    """The model as every node can name it: a shipped model by its name (each node has its own install),
    a folder by its absolute path (which must exist on every node)."""
    return str(Path(model).resolve()) if Path(model).is_dir() else model


def check_address(address: str) -> None:
    """Refuse, with the other options (the command line's cluster_options), an address Ray cannot read: its own words
    were 'Invalid address format: ...', naming nothing it takes, once the model had loaded and the file was read. A
    process already connected to Ray runs on that cluster, whatever the address (connected)."""
    if already_connected():
        return
    if address not in ("auto", "local") and not address.startswith("ray://") and not HOST_PORT.fullmatch(address):
        raise ValueError(f"--ray {address[:80]!r} is no Ray address: give 'auto' (the cluster this machine joined with "
                         "`ray start`; the default), the host:port of a cluster's head, ray://host:port (Ray Client) "
                         "or 'local' to start one here")
    port = address.rpartition(":")[2]
    if HOST_PORT.fullmatch(address) and not 0 < int(port) <= MAX_PORT:  # 'no cluster answers ... ray start --port=0'
        raise ValueError(f"--ray {address[:80]!r}: {port} is no port (ports run from 1 to {MAX_PORT}): give the port "
                         "of the cluster's head, 6379 unless its `ray start --head --port` set another")


def already_connected() -> bool:
    """Whether this process is connected to Ray (a notebook, a test: connected keeps its cluster), asked without
    importing Ray, which takes seconds."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def answers(address: str) -> None:
    """Refuse a host:port where no Ray cluster answers: ray.init waited minutes for it, printing a warning every half
    minute. Nothing may listen there, or a firewall may take the connection and drop what is sent: a Ray head's GCS,
    a gRPC server, answers HTTP/2's opening at once (with its settings; a TLS server with an alert), so silence for
    ANSWER_S seconds is no cluster. 'auto' is checked where RAY_ADDRESS sends ray.init; other addresses ('auto' alone,
    'local', ray://...) are left to Ray, as is every address where this process is connected already."""
    if already_connected():
        return
    given = ""
    if address == "auto" and os.environ.get("RAY_ADDRESS"):
        address, given = os.environ["RAY_ADDRESS"], "RAY_ADDRESS, "
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or "/" in host:
        return
    deadline = time.monotonic() + ANSWER_S
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=ANSWER_S) as connection:
            connection.settimeout(max(0.1, deadline - time.monotonic()))
            connection.sendall(HTTP2_PREFACE)
            connection.recv(1)  # any answer, or the connection closed (b""): someone is there; Ray says who
    except OSError as exc:
        why = f"no answer in {ANSWER_S:g} s" if isinstance(exc, TimeoutError) else exc.strerror or "no answer"
        raise ConnectionError(f"no Ray cluster answers at {address} ({given}{why}): start one there with "
                              f"`ray start --head --port={port}`, or use --ray local") from None


@contextmanager
def connected(address: str) -> Iterator[None]:
    """Connect to a Ray cluster ('auto', host:port) or start one on this machine ('local'), and leave
    it after the run. A process already connected (a notebook, a test) keeps its cluster as it is. Whether one
    answers at the address was asked before the model loaded (answers: the command line's predict).

    Ray starts and stops whole (unbroken): Ctrl-C or SIGTERM in ray.init's first seconds cut it half-way, and the
    run exited leaving Ray's dashboard and runtime-env agents running (they ignore SIGTERM), or crashed as it exited
    (SIGSEGV, not exit 130); a second Ctrl-C cut ray.shutdown so. Both run in one thread of their own, which lives
    until Ray is shut down: Ray's processes die with the thread that started them (PR_SET_PDEATHSIG), and there
    ray.init sets no SIGTERM handler of its own (it set sys.exit in place of the command line's)."""
    try:
        import ray
    except ImportError:
        raise ValueError(RAY_PACKAGE_MISSING) from None
    if ray.is_initialized():
        yield
        return
    local = {"include_dashboard": False} if address == "local" else {}
    before = set(descendants(os.getpid()))  # processes of this one that are not Ray's
    with quiet_ray() as level, stopping_once(), ThreadPoolExecutor(1, thread_name_prefix="molspec-ray") as ray_thread:
        try:
            unbroken(ray_thread, lambda: ray.init(address=address, logging_level=level, **local))
        except ConnectionError as exc:
            raise ConnectionError(f"{exc} (start a cluster with `ray start --head`, or use --ray local)") from None
        except BaseException:  # stopped while Ray started: what it started is stopped before the run stops
            unbroken(ray_thread, lambda: shut_down(before))
            raise
        try:
            yield
        finally:
            unbroken(ray_thread, lambda: shut_down(before))


@contextmanager
def quiet_ray() -> Iterator[str]:
    """Ray's own log lines below WARNING, and its notes in RAY_NOISE, kept off the terminal for the run (every run
    printed Ray Data's plan, start and end, and Ray's notes on tokens and threads, among the run's own lines); yields
    the level of ray.init's logger. Asked for, they show: RAY_LOGGER_LEVEL (Ray's setting) is ray.init's level and
    hides nothing; RAY_DATA_LOGGING_CONFIG (Ray Data's) leaves Ray Data's logging as it says. Put back after the run,
    for a process that goes on (a notebook)."""
    with suppress(ImportError):  # its import sets up its logging, changed here (without it, --ray fails later)
        import ray.data  # noqa: F401

    if asked := os.environ.get("RAY_LOGGER_LEVEL"):
        yield asked
        return
    noise = [(logging.getLogger(name), NoteFilter(note)) for name, note in RAY_NOISE.items()]
    consoles = [] if os.environ.get("RAY_DATA_LOGGING_CONFIG") else [
        (handler, handler.level) for handler in logging.getLogger("ray.data").handlers
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)]
    for logger, hidden in noise:
        logger.addFilter(hidden)
    for handler, _level in consoles:  # its files (Ray's session folder) keep every line
        handler.setLevel(max(handler.level, logging.WARNING))
    try:
        yield "warning"
    finally:
        for logger, hidden in noise:
            logger.removeFilter(hidden)
        for handler, level in consoles:
            handler.setLevel(level)


class NoteFilter(logging.Filter):
    """Drops the records whose message starts with `note`."""

    def __init__(self, note: str) -> None:
        super().__init__()
        self.note = note

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.note)


def stop_handlers() -> dict[int, Callable[[int, Any], object]]:
    """The handlers of Ctrl-C and SIGTERM that this module may stand in for: those set in Python (an ignored Ctrl-C,
    a job started with nohup, stays ignored), in the main thread, where handlers run and are set."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    return {signum: handler for signum, handler in handlers.items() if callable(handler)}


@contextmanager
def handled_by(handler: Callable[[int, Any], object],
               held: dict[int, Callable[[int, Any], object]]) -> Iterator[None]:
    """`handler` for each signal of `held` (stop_handlers) while the body runs, and their own handlers back after it,
    however it ends."""
    for signum in held:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, restored in held.items():
            signal.signal(signum, restored)


@contextmanager
def stopping_once() -> Iterator[None]:
    """Ctrl-C and SIGTERM while Ray runs here: the first stops the run as its handler does (KeyboardInterrupt; the
    command line's Terminated); those after it, while the run stops, change nothing. A second Ctrl-C cut short the
    closing of Ray Data's iterator, which then reached for Ray after ray.shutdown, and Ray ended the process with exit
    1 and not a word of the rows kept."""
    held = stop_handlers()

    def later(signum: int, frame: object) -> None:
        print("stopping: Ray Data and Ray are being stopped, so that none of their processes stay behind",
              file=sys.stderr)

    def first(signum: int, frame: object) -> None:
        for each in held:
            signal.signal(each, later)
        held[signum](signum, frame)

    with handled_by(first, held):
        yield


@contextmanager
def stops_deferred(after: str) -> Iterator[None]:
    """Ctrl-C and SIGTERM while the body runs (writing what a whole run found: `after` says so, "once the report is
    written") are noted, and raised as their handlers raise them once it has ended; a second one stops at once. A
    stop that came after the last query was decoded, before evaluate's report was written, lost the whole run."""
    held = stop_handlers()
    noted: list[int] = []

    def note(signum: int, frame: object) -> None:
        if noted:  # asked again: at once
            held[signum](signum, frame)
        noted.append(signum)
        log.warning("stopping %s (again to stop at once)", after)

    with handled_by(note, held):
        yield
    if noted:
        signal.raise_signal(noted[0])


def unbroken(thread: Executor, step: Callable[[], object]) -> None:
    """Run `step` (ray.init, ray.shutdown) to its end on `thread`, whatever signals come meanwhile. Ctrl-C and SIGTERM
    that come are noted, not raised, and raised after it as their handlers raise them (KeyboardInterrupt; the command
    line's Terminated), before what `step` raised."""
    noted: list[int] = []

    def note(signum: int, frame: object) -> None:
        if not noted:
            print("stopping once Ray has started or stopped, so that none of its processes stay behind",
                  file=sys.stderr)
        noted.append(signum)

    with handled_by(note, stop_handlers()):
        failure = thread.submit(step).exception()
    if noted:
        signal.raise_signal(noted[0])
    if failure is not None:
        raise failure


def shut_down(before: set[tuple[int, str]]) -> None:
    """ray.shutdown, and then the end of every Ray process started here (a process below this one, not one of
    `before`, that names Ray) that outlives it: the agents of a raylet stopped in its first seconds went on running
    for a minute or more, ignoring SIGTERM, after the run ended."""
    import ray

    started = [process for process in descendants(os.getpid()) if process not in before and names_ray(process[0])]
    ray.shutdown()  # the raylet's children are not below this process once it is gone: they were listed before
    if outlived(started):  # a second or two to exit on their own, as they do after a whole run
        for pid, start in started:
            if alive((pid, start)):  # not a pid that another process has taken since
                with suppress(OSError):  # it exited meanwhile
                    os.kill(pid, signal.SIGKILL)
        outlived(started)  # gone when the command ends


def outlived(processes: list[tuple[int, str]], wait_s: float = 2.0) -> bool:
    """Whether any of the processes still runs after up to wait_s seconds."""
    deadline = time.monotonic() + wait_s
    while any(alive(process) for process in processes):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    return False


def descendants(root: int) -> list[tuple[int, str]]:
    """(pid, start time) of every process below `root`, from /proc (none where there is no /proc)."""
    children: dict[int, list[tuple[int, str]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # the name, in brackets, may hold spaces
        except OSError:  # it exited meanwhile
            continue
        children.setdefault(int(fields[1]), []).append((int(stat.parent.name), fields[19]))
    found: list[tuple[int, str]] = []
    below = [root]
    while below:
        for child in children.get(below.pop(), []):
            found.append(child)
            below.append(child[0])
    return found


def names_ray(pid: int) -> bool:
    """Whether the process's command line names Ray (ray::DashboardAgent, .../ray/core/src/ray/raylet/raylet)."""
    try:
        return b"ray" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def alive(process: tuple[int, str]) -> bool:
    """Whether that process (pid, start time) still runs: not exited, not a zombie, its pid not taken since."""
    pid, start = process
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == start

