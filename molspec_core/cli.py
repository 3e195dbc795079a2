"""python -m molspec_core {predict,evaluate,compare,calibrate,bench,plan,prepare-data,average,serve,train} (also
installed as `molspec`)."""
from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import functools
import importlib.util
import io
import itertools
import json
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

import torch

from .argtypes import at_least, column_name, file_name, positive_seconds, seconds_up_to
from .boundary import describe, guarded
from .data import DEFAULT_AUGMENT, GLN_TEST, MAX_AUGMENT as DATA_MAX_AUGMENT, MIT_TEST, MIT_VALID, TASKS, VAL_REST
from .io import (DECOMPRESSORS, READ_AS, STDIN, STDOUT, STOCK_COLUMNS, Outcomes, check_output, fitted_name,
                 query_format, write_text_file)
from .methods import EXACT_NBEST, KNOBS, METHODS, SamplingOptions, readers_of, unread_knobs
from .native import DTYPES
from .roundtrip import MAX_TOP_K as MAX_ROUND_TRIP_K
from .scale import RAY_PACKAGE_MISSING
from .service import (DEFAULT_BATCH_SIZE, DEFAULT_TIME_LIMIT_S, ENGINES, MAX_AUGMENT, MAX_DRAFT_LEN, MAX_N_BEST,
                      MAX_N_DRAFTS, MAX_TIME_LIMIT_S, TIMED_OUT, windows)
from .threads import use_threads
from .words import counted, part_of

if TYPE_CHECKING:
    from .calibration import Calibration
    from .io import InputFileError, Kept, MissingColumn, QueryFile
    from .known import KnownMarks
    from .planning import PlanResult, Route
    from .scale import Cluster
    from .service import Predictor, QueryResult

log = logging.getLogger(__name__)


def number_at_least(minimum: float, above: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number >= minimum (> minimum when `above`)."""
    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
        if not (value > minimum if above else value >= minimum) or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be {'above' if above else 'at least'} {minimum:g}, not {text}")
        return value
    return number


# calibrate refuses, without --force, a fit on fewer fitting queries: its confidences would be a few coarse steps
# (2 fitting queries once replaced the shipped forward fit's 1,333, with 13 times its calibration error)
MIN_FIT_QUERIES = 100
CALIBRATE_LIMIT = 2000  # calibrate's default --limit: the whole val split prepare-data writes, as the shipped fits took


def check_report_path(path: str, *inputs: str | None, model: str | None = None) -> Path:
    """Refuse, before any work is done, a report's --out that io.check_output refuses (a missing folder, a
    folder, a device, one of the run's own input files: `inputs`), that is '-' (STDOUT), that lies in the folder of
    the `model` run (outside_model), or whose name promises a compression the plain JSON written there does not have
    (a bench run once finished, then lost its report to a missing folder); and the same for where the file it
    replaces is kept (keep_replaced)."""
    if path == STDOUT:  # predict's way to standard output: here it named a file '-'
        raise ValueError("--out -: the report is written to a file, and standard output gets its summary with or "
                         "without --out; give --out a file name, such as report.json")
    if path.lower().endswith(tuple(DECOMPRESSORS)):
        raise ValueError(f"{path}: the report is written as plain JSON; give a name without {Path(path).suffix}")
    if query_format(path)[1] != "txt":  # evaluate --out results.csv wrote JSON text under a table's name (plan's too,
        # until f8ffa35), which a spreadsheet then opened as a column of JSON lines
        raise ValueError(f"{path}: the report is written as JSON text, not as the {Path(path).suffix} name says; give "
                         "it a name such as report.json")
    for given in inputs:
        if given:
            check_output(path, given)
    out = check_output(path)
    check_backup(path, out, *inputs)
    if model is not None:
        outside_model(path, out, model)
    return out


def check_backup(given: str, out: Path, *inputs: str | None) -> None:
    """Refuse, as io.check_output refuses an output, where keep_replaced would keep the file at `out` (resolved from
    `given`, the name the user gave) when it is replaced: a folder, one of the run's `inputs`. The refusal names the
    output given: predict --input q.csv.bak --output q.csv was told 'q.csv.bak is the input file'."""
    from .calibration import backup_of
    from .io import OutputFileError

    backup = backup_of(out)
    try:
        for given_input in [*filter(None, inputs)] or [None]:
            check_output(backup, given_input)
    except OutputFileError as exc:
        raise OutputFileError(f"{given}: the file there would be kept as {backup} when it is replaced, and {exc}"
                              ) from None


def outside_model(given: str, out: Path, model: str) -> None:
    """Refuse an output path (`out`, resolved by io.check_output: a report, predictions, routes) inside the folder of
    the model run, a shipped one named by its task too: evaluate --out <model>/config.json replaced the config with
    the report, and the model no longer loaded (its weights, vocabulary and calibration files were as open to it)."""
    from .service import model_folder

    folder = Path(os.path.realpath(model_folder(model)))
    if out == folder or folder in out.parents:
        raise ValueError(f"{given} lies in the folder of the model being run, {folder}: it could replace the model's "
                         "config, weights, vocabulary or calibration; write it outside the model folder")


def check_draft_knobs(method: str, draft_len: int | None, n_drafts: int | None,
                      sampling: SamplingOptions | None = None) -> None:
    """Refuse --draft-len or --n-drafts, or a sampling knob set off its default (--temperature 0.8 for beam
    search), for a method that does not read it (methods.unread_knobs), naming those that do."""
    for knob in unread_knobs(method, draft_len, n_drafts, sampling)[:1]:
        raise ValueError(f"{method} does not read --{knob.replace('_', '-')}; the methods that do: {readers_of(knob)}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="molspec",
                                     description="MolSpec: reaction prediction with speculative decoding")
    sub = parser.add_subparsers(dest="command", required=True)

    def threads_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--threads", type=at_least(0), default=0, help="CPU threads of this process (0: one fewer "
                       "than its CPUs, at least 1, or OMP_NUM_THREADS where set); beside other busy work, fewer "
                       "threads than free cores run far faster (README, \"Command line\")")

    def model_args(p: argparse.ArgumentParser, batches: str = "cut from queries of like length") -> None:
        p.add_argument("--model", default="forward", help="model folder, or a shipped model name (forward, retro)")
        p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
        p.add_argument("--engine", default="auto", choices=ENGINES, help="who runs the lean decoder calls: "
                       "auto = C on CPU where it builds, else NumPy; torch elsewhere; "
                       "torch = always torch (for comparison); "
                       "graphs = torch's calls replayed from CUDA graphs (CUDA only)")
        p.add_argument("--dtype", default="float32", choices=DTYPES, help="what the decoder calls compute with: "
                       "int8 = int8 weights and activations (native engine only; answers may differ, "
                       "see the model cards)")
        p.add_argument("--method", default="greedy", choices=METHODS, metavar="METHOD",
                       help=f"decoding method: {', '.join(METHODS)} (molspec_core/methods.py; predict: greedy "
                       "unless given; evaluate: beam with --n-best over 1, else greedy; calibrate: beam; bench "
                       "times --methods, and refuses it)")
        # each knob's help names the methods that read it (the others refuse it: check_draft_knobs)
        p.add_argument("--n-best", type=at_least(1, MAX_N_BEST), default=1, help=f"answers per query "
                       f"({readers_of('n_best')}; calibrate: 5 for those, else 1, unless given; bench: beam, sbs and "
                       "sbs-exact only, its sampling methods are timed on one sample a query)")
        # calibrate refuses both: it decodes with each method's own drafts (cmd_calibrate)
        p.add_argument("--draft-len", type=at_least(0, MAX_DRAFT_LEN), default=None, help=f"tokens in a draft "
                       f"({readers_of('draft_len')}; default: the method's; 0: no drafts; calibrate refuses it)")
        p.add_argument("--n-drafts", type=at_least(1, MAX_N_DRAFTS), default=None, help=f"drafts verified per call "
                       f"({readers_of('n_drafts')}; default: the method's; calibrate refuses it)")
        p.add_argument("--batch-size", type=at_least(1), default=DEFAULT_BATCH_SIZE, help="queries decoded "
                       f"together, {batches} (default %(default)s)")
        p.add_argument("--temperature", type=float, default=SamplingOptions.temperature,
                       help=f"sampling temperature ({readers_of('temperature')}; default %(default)s)")
        p.add_argument("--top-k", type=at_least(0), default=0, help=f"sample among the k likeliest tokens "
                       f"({readers_of('top_k')}; 0: no cut)")
        p.add_argument("--beta", type=at_least(1), default=1, help=f"draft tokens within the top-beta tokens are "
                       f"accepted ({readers_of('beta')})")
        p.add_argument("--tau", type=float, default=0.0, help=f"and within tau nats of the top token "
                       f"({readers_of('tau')})")
        p.add_argument("--delta", type=float, default=0.0, help=f"KL budget per token ({readers_of('delta')})")
        p.add_argument("--seed", type=at_least(0), default=0, help=f"random seed ({readers_of('seed')})")
        threads_arg(p)

    def augment_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--augment", type=at_least(1, MAX_AUGMENT), default=1,
                       help="read each query in up to N writings and pool the answers (models trained on "
                       "root-aligned data: both shipped ones); a query's writings are decoded as one batch: about N "
                       "times one writing's time (5 writings, one query at a time on a CPU: 4.4-4.6x, "
                       "tools/decode_cost.py)")

    def time_limit_arg(p: argparse.ArgumentParser, then: str) -> None:
        p.add_argument("--time-limit", type=seconds_up_to(MAX_TIME_LIMIT_S), default=DEFAULT_TIME_LIMIT_S,
                       help=f"seconds per query before {then} (default %(default)s)")

    p = sub.add_parser("predict", help="predict for one SMILES or a file of queries")
    model_args(p)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--smiles", help="one query: reactants (forward) or a product (retro), or a recorded "
                       "reaction reactants>reagents>products")
    group.add_argument("--input", type=file_name("queries.csv"), help="TXT (one SMILES per line), SMILES file "
                       "(.smi: SMILES, then optionally a name, per line), SD file (.sdf), CSV with a smiles column "
                       "(cells split at commas, or at semicolons or tabs where the header shows them; .tsv too) or "
                       "Excel workbook (.xlsx: the first sheet naming the column), by its name's ending unless "
                       "--input-format says; a header may sit under titles; .gz and .xz too; - reads standard input "
                       "(TXT unless --input-format says)")
    p.add_argument("--input-format", choices=READ_AS, help="read --input as this, whatever its name says (a CSV "
                   "named .dat, or standard input)")
    p.add_argument("--column", type=column_name, help="CSV or workbook column, or SD file data field, holding the "
                   "queries")
    p.add_argument("--known-column", metavar="COLUMN", type=column_name, help="a CSV column or SD field holding "
                   "each query's known answer (the recorded product, or reactants): a matches_known column marks "
                   "the row that gives it, and a line says how often it comes first or among the answers. Queries "
                   "written as recorded reactions (reactants>reagents>products) bring their own: each is predicted "
                   "from its reactants (retro: its products) and its recorded outcome marks the answers")
    augment_arg(p)
    p.add_argument("--ion-writing", action="store_true", help="read a hydride written as one species, which the "
                   "model cannot read ([AlH4-] of LiAlH4, [NaH]), as the ions USPTO writes; the canonical_query "
                   "column shows them (without it such a query is an error that names that writing)")
    p.add_argument("--output", type=file_name("out.csv"), help="CSV to write, a name ending .csv (required with "
                   "--input; with --smiles the answers are printed and written); a name ending .sdf "
                   "(or .sd) writes an SD file instead: one record per CSV row, the answer's structure with every "
                   "column as a field; a name ending .xlsx an Excel workbook of one sheet (numbers as numbers, text as "
                   "text); - writes the CSV to standard output, row by row, and every other line to standard error; "
                   "other names (.csv.gz) are refused; a file there is kept as <output>.bak once the new one is whole")
    p.add_argument("--resume", action="store_true", help="go on from the rows a run that stopped (Ctrl-C, SIGTERM, "
                   "an error such as a full disk) of the same command kept beside its output (out.interrupted.csv "
                   "for out.csv; out.interrupted.xlsx.csv for out.xlsx, out.interrupted.sdf.csv for out.sdf): their "
                   "records are not predicted again, and a run with other options that shape answers "
                   "(out.interrupted.json) is refused; without such a file the run starts at the first record")
    time_limit_arg(p, "it is stopped: the answers it had found are kept, those unfinished marked (stopped at the "
                   "time limit), and its error column says so; one stopped before any answer is counted apart from "
                   "those rejected")
    # an empty name ("$FWD" unset) named no model, and the answers were written without their round trip
    p.add_argument("--round-trip", metavar="FORWARD_MODEL", type=file_name("forward", folder=True),
                   help="retrosynthesis: check every sane answer with this forward model (e.g. forward): round_trip "
                   "and forward_prob columns")
    p.add_argument("--round-trip-k", type=at_least(1, MAX_ROUND_TRIP_K), help="with --round-trip: the product must "
                   f"come back within the forward model's top-k (default 1, at most {MAX_ROUND_TRIP_K})")
    p.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                   help="predict --input on a Ray cluster (pip install -e .[scale]): 'auto' (the default: the "
                   "cluster this machine joined with `ray start`), its head's host:port, ray://host:port (Ray "
                   "Client), or 'local' to start one here")
    p.add_argument("--workers", type=at_least(1), help="with --ray: actors, each with its own copy of the model "
                   "(default: as many as the cluster's CPUs, or GPUs with --gpus-per-worker, hold)")
    p.add_argument("--cpus-per-worker", type=number_at_least(0, above=True), help="with --ray (default 1)")
    p.add_argument("--gpus-per-worker", type=number_at_least(0), help="with --ray (default 0; 1: a GPU each)")

    p = sub.add_parser("evaluate", help="top-k accuracy on parallel source/target files")
    model_args(p)
    p.add_argument("--src", required=True, type=file_name("src.txt"), help="queries, one SMILES a line (.gz too)")
    p.add_argument("--tgt", required=True, type=file_name("tgt.txt"), help="their known answers, line by line")
    p.add_argument("--index", type=file_name("test.idx"), help="file of 0-based line numbers selecting the queries")
    p.add_argument("--limit", type=at_least(1), help="the first N queries (after --index)")
    p.add_argument("--out", type=file_name("report.json"), help="JSON report (a report there is kept as <out>.bak, "
                   "and a partial one is refused "
                   "without --resume; stopped by Ctrl-C or SIGTERM, the report of the queries scored by then, marked "
                   "partial)")
    p.add_argument("--resume", action="store_true", help="go on from the partial report at --out of a run that "
                   "stopped (Ctrl-C, SIGTERM), given the same options and files: its queries are not decoded again, "
                   "and the report is the one a whole run writes (the partial one is not kept as <out>.bak); one of "
                   "another model, method or queries is refused, while --batch-size may change (a run stopped out of "
                   "memory); without a report there the run starts at the first query")
    augment_arg(p)
    time_limit_arg(p, "it is stopped: a miss in every top-k, counted apart from those refused (timed_out)")
    p.set_defaults(method=None)  # cmd_evaluate: beam when --n-best > 1, else greedy

    p = sub.add_parser("compare", help="two evaluate --out reports on the same queries, query by query (McNemar)")
    p.add_argument("first", type=file_name("eval.json"), help="evaluate --out JSON report (a)")
    p.add_argument("second", type=file_name("eval.json"), help="evaluate --out JSON report (b), on the same --src, "
                   "--tgt, --index and --limit; or on fewer (a run stopped part way, or a lower --limit): the other "
                   "report's first queries are compared, where its files still give them")

    p = sub.add_parser("calibrate", help="fit a model's confidence on validation files (calibration.json; for "
                       "greedy's answers, --method greedy or spec-auto: calibration.greedy.json)")
    model_args(p)
    p.add_argument("--src", required=True, type=file_name("val.src"), help="validation queries (never test; a "
                   "prepare-data folder's test.src and train.src, and the USPTO data's own test sets, are refused)")
    p.add_argument("--tgt", required=True, type=file_name("tgt.txt"), help="their known answers, line by line")
    p.add_argument("--limit", type=at_least(3), default=CALIBRATE_LIMIT, help="the first N queries (default "
                   "%(default)s)")
    augment_arg(p)  # its fit goes to calibration[.greedy].augment<N>.json
    time_limit_arg(p, "it is stopped: it fits nothing, and a warning counts it")
    p.add_argument("--judge", action="store_true", help="fit nothing: judge the model's saved fit for these answers "
                   "on the queries that judged it (same --src, --tgt, --limit), decoded with these options, e.g. "
                   "--dtype int8; writes nothing")
    p.add_argument("--force", action="store_true", help=f"write the fit even where it rests on fewer than "
                   f"{MIN_FIT_QUERIES} fitting queries (two thirds of --limit, less those refused, with a target RDKit "
                   "cannot read or no valid answer) or than the fit it replaces, or judges worse than that fit on its "
                   "own check queries; without it such a fit is refused (one refused after decoding is written to "
                   "<file>.refused; a replaced file is kept as <file>.bak; stopped by Ctrl-C or SIGTERM, the fit of "
                   "the queries decoded by then is written to <file>.partial, not in use)")
    p.set_defaults(method="beam", n_best=None)  # cmd_calibrate: 5 for an n-best method, else 1

    p = sub.add_parser("bench", help="time methods side by side on the same queries")
    model_args(p, batches="cut in file order (--by-length: of like length)")
    p.add_argument("--src", required=True, type=file_name("src.txt"), help="queries, one SMILES a line (.gz too)")
    p.add_argument("--tgt", type=file_name("tgt.txt"), help="their known answers: adds each method's accuracy to its "
                   "row")
    p.add_argument("--index", type=file_name("test.idx"), help="file of 0-based line numbers selecting the queries")
    p.add_argument("--limit", type=at_least(1), help="the first N queries (after --index)")
    p.add_argument("--methods", default="greedy,greedy-uncached,spec-paper,spec-lookup,spec-pointer,spec-auto",
                   help="comma-separated, timed interleaved on the same queries (default %(default)s)")
    p.add_argument("--warmup", type=at_least(0), default=3, help="batches each method decodes untimed first "
                   "(default %(default)s)")
    p.add_argument("--beam-width", type=at_least(1, MAX_N_BEST), default=None,
                   help="beam width = n-best for beam, sbs, sbs-exact")
    p.add_argument("--sweep", help="a lossy method's knob over values, e.g. tau=0,0.5,1,2 (with --methods relaxed) "
                   "or delta=0,0.1,0.5 (with --methods mentored)")
    p.add_argument("--peer", choices=("ctranslate2",), help="also time CTranslate2 (float32 and int8) on the same "
                   "queries, interleaved: greedy beside greedy-family methods, beam beside beam-family ones")
    p.add_argument("--peer-threads", type=at_least(0), default=0,
                   help="threads of the peer's process (0: the bench's); CTranslate2 int8 at batch size 1 can be "
                        "fastest on fewer threads (README, \"Measured speed\")")
    p.add_argument("--engines", default="", help="also run every method with the same model on these engines "
                   "(comma-separated, from --engine's choices; graphs needs CUDA), interleaved: rows method@engine, "
                   "compared with --engine's greedy and beam")
    p.add_argument("--by-length", action="store_true", help="cut the batches (--batch-size) from the queries in "
                   "order of token count, as predict, evaluate and calibrate cut theirs, not in file order")
    p.add_argument("--out", type=file_name("bench.json"), help="JSON report (its chart, a plotly HTML, is written "
                   "beside it where plotly is installed: pip install -e .[app]; a report or chart there is kept "
                   "beside it, .bak added; stopped by Ctrl-C or SIGTERM, the report of the batches measured by "
                   "then, marked interrupted)")
    p.set_defaults(batch_size=1, method=None)  # cmd_bench refuses a --method: it times --methods

    p = sub.add_parser("plan", help="multi-step retrosynthesis routes to building blocks in a stock (syntheseus)")
    p.add_argument("--smiles", required=True, help="the target molecule")
    p.add_argument("--time-limit", type=positive_seconds, default=30.0, help="seconds of search (default %(default)s)")
    p.add_argument("--stock", type=file_name("stock.smi"), help="building blocks: one SMILES per line, an SD file, "
                   "or a CSV or Excel workbook (.xlsx) with a smiles column; .gz and .xz too; - reads standard input, "
                   "one SMILES per line (default: models/stock.smi.gz, reactants of at least 2 training reactions)")
    p.add_argument("--stock-column", type=column_name, help="the column of a CSV or workbook --stock that holds the "
                   f"SMILES, where its name is none of {', '.join(STOCK_COLUMNS)} (in any case), which are read "
                   "without naming them (SMILES_std, say); or the data field of an SD file --stock whose SMILES are "
                   "read instead of its records' molecules")
    p.add_argument("--algorithm", choices=("retro*", "mcts"), default="retro*", help="search (syntheseus's; "
                   "default %(default)s)")
    p.add_argument("--model", default="retro", help="retrosynthesis model folder, or a shipped model name")
    p.add_argument("--forward", default="forward", help="forward model that checks each step round trip, or none")
    p.add_argument("--round-trip-k", type=at_least(1, MAX_ROUND_TRIP_K), help="the product must come back within "
                   "the forward model's top-k for a step's round-trip flag (default 1; the Routes page's sidebar sets "
                   "it)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--dtype", default="float32", choices=DTYPES, help="what both models' decoder calls compute with: "
                   "int8 = int8 weights and activations (CPU, native engine; answers may differ, see the model cards)")
    p.add_argument("--n-best", type=at_least(1, MAX_N_BEST), default=10,
                   help=f"answers per expansion ({EXACT_NBEST}; default %(default)s)")
    p.add_argument("--max-steps", type=at_least(1), default=5, help="Retro*: reactions on a path; MCTS: in all "
                   "(default %(default)s)")
    p.add_argument("--max-routes", type=at_least(1), default=10, help="routes kept, best first (default "
                   "%(default)s)")
    augment_arg(p)
    p.add_argument("--allow-missing-atoms", action="store_true",
                   help="keep steps whose reactants lack heavy atoms of the product (skipped by default)")
    p.add_argument("--out", required=True, type=file_name("routes.json"), help="JSON of the routes (trees) and the "
                   "search statistics (a file there "
                   "is kept as <out>.bak)")
    p.add_argument("--csv", type=file_name("steps.csv"), help="CSV, one row per reaction step (default: --out with "
                   "the suffix .csv; a file there is kept as <csv>.bak)")
    threads_arg(p)

    p = sub.add_parser("prepare-data", help="tokenized train/val/test files from the USPTO data")
    p.add_argument("--task", choices=TASKS, required=True,
                   help="forward-mit: fine-tune data, the USPTO-MIT valid rows alone; forward-gln: fine-tune "
                   "data, USPTO-50K's GLN val reactions read forward (use both with --vocab)")
    p.add_argument("--data", default=None, type=file_name("../shared/data", folder=True),
                   help="the shared data folder (default ../shared/data)")
    p.add_argument("--out", required=True, type=file_name("data/forward", folder=True),
                   help="the folder to write (train/val/test, vocab.json, stats.json)")
    # at least 1: --n-val -5 made all but 5 of the USPTO-MIT valid rows validation rows (data.mit_split)
    p.add_argument("--n-val", type=at_least(1), default=2000, help="validation reactions (default %(default)s)")
    p.add_argument("--workers", type=at_least(1), default=2, help="processes for the RDKit work of reading the "
                   "reactions (default %(default)s)")
    # at least 0, not 1: retro's 0 (canonical pairs only) is a mode; the forward tasks refuse 0 (data.py)
    p.add_argument("--augment", type=at_least(0, DATA_MAX_AUGMENT), default=None,
                   help=f"retro: root-aligned SMILES per reaction (default {DEFAULT_AUGMENT['retro']}; 0: canonical "
                        f"only); forward: writings of each source, the first as given, the others rooted as the "
                        f"app reads a query (default {DEFAULT_AUGMENT['forward']}); forward-mit: writings of each "
                        f"source, the others random or --rooted (default {DEFAULT_AUGMENT['forward-mit']}); "
                        f"forward-gln: the same, the others rooted (default {DEFAULT_AUGMENT['forward-gln']})")
    p.add_argument("--rooted", action="store_true",
                   help="forward-mit: the other writings rooted as the app reads a query, not random (a model "
                        "trained so reads a query in several writings; the shipped forward model's fine-tune data)")
    p.add_argument("--vocab", default=None, type=file_name("models/forward/vocab.json"), help="encode with this "
                   "vocabulary.json (the model to train on, e.g. models/forward/vocab.json: its draft model reads that "
                   "one), not a new one built from the rows")
    p.add_argument("--val-rest", choices=VAL_REST, default="",
                   help="retro: the GLN val reactions after the first --n-val (3,001 of 5,001 by default) join the "
                   "training reactions (add) or are the training split alone (only: fine-tune data, with --vocab)")
    p.add_argument("--rows-before", type=at_least(0), default=0,
                   help="forward-mit: train only on the USPTO-MIT valid rows from --n-val up to this row: with "
                   "--n-val 500 --rows-before 2000, the 1,500 rows a model split by default validated on and never "
                   "trained on (fine-tune data, with --vocab)")

    p = sub.add_parser("average", help="the mean of fine-tuned models' weights, written as a new model folder")
    p.add_argument("--model", action="append", required=True, dest="models",
                   help="a model folder; give two or more, all fine-tuned from one parent")
    p.add_argument("--out", required=True, type=file_name("models/averaged", folder=True),
                   help="the new model folder")
    p.add_argument("--float16", action="store_true", help="write float16 shards (as the shipped models are)")

    p = sub.add_parser("serve", help="answer predictions over HTTP as JSON (POST /predict; molspec_core/server.py)")
    p.add_argument("--model", action="append", help="a model folder or shipped name to load; repeat for more "
                   "(default: forward and retro); a request names one by its folder's name")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--engine", default="auto", choices=ENGINES, help="who runs the lean decoder calls (as predict)")
    p.add_argument("--dtype", default="float32", choices=DTYPES, help="what the decoder calls compute with (as "
                   "predict)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default loopback; the server has "
                   "no authentication: listen elsewhere only on a network you trust)")
    p.add_argument("--port", type=at_least(0), default=8000, help="default %(default)s; 0: any free port")
    threads_arg(p)

    from .train import add_arguments

    p = sub.add_parser("train", help="train a model on prepared data")
    add_arguments(p)
    return parser


def sampling_options(args: argparse.Namespace) -> SamplingOptions:
    """The sampling knobs, checked (a NaN temperature is refused here, not deep inside torch)."""
    from .service import check_sampling

    options = SamplingOptions(temperature=args.temperature, top_k=args.top_k, beta=args.beta, tau=args.tau,
                              delta=args.delta, seed=args.seed)
    check_sampling(options)
    return options


def installed(package: str) -> bool:
    """Whether an optional package (ray, ctranslate2) can be imported, asked without importing it (Ray takes seconds).
    One imported already counts, a stand-in without a spec too (find_spec raised ValueError on a test's fake Ray);
    one set to None in sys.modules, as `import` then fails, does not."""
    if package in sys.modules:
        return sys.modules[package] is not None
    return importlib.util.find_spec(package) is not None


def cluster_options(args: argparse.Namespace) -> Cluster | None:
    """The Ray cluster and actor pool of --ray, or None without it (its options are then refused)."""
    given = [name for name in ("workers", "cpus_per_worker", "gpus_per_worker") if getattr(args, name) is not None]
    if args.ray is None:
        if given:
            raise ValueError(f"--{given[0].replace('_', '-')} goes with --ray")
        return None
    if args.input is None:
        raise ValueError("--ray predicts files: give --input and --output")
    if not installed("ray"):  # refused once the model had loaded and the file was read
        raise ValueError(RAY_PACKAGE_MISSING)
    from .scale import Cluster, check_address  # Ray itself is imported only once the run starts

    check_address(args.ray)
    return Cluster(args.ray, args.workers, args.cpus_per_worker or 1.0, args.gpus_per_worker or 0.0)


def cmd_predict(args: argparse.Namespace) -> int:
    """predict_command, with --output - (STDOUT): the CSV rows go to standard output as they come, and every line
    that is no row (progress, counts, notes) to standard error, so that a pipeline reads the rows alone."""
    if args.output != STDOUT:
        return predict_command(args)
    if args.resume:
        raise ValueError("--resume goes on from the rows kept beside an output file; standard output keeps none")
    if args.ray is not None:
        raise ValueError("--ray writes its rows to a file: give --output out.csv")
    rows_out = sys.stdout
    if rows_out is None:  # started with standard output closed (>&-)
        raise ValueError("--output - writes to standard output, which is closed: give --output out.csv")
    if isinstance(rows_out, io.TextIOWrapper):  # UTF-8, as every output file is, whatever the terminal's locale
        rows_out.reconfigure(encoding="utf-8")
    with contextlib.redirect_stdout(sys.stderr):
        try:
            return predict_command(args, rows_out)
        except BrokenPipeError:  # the reader stopped reading (| head): no error of the run's, said on one line
            with contextlib.suppress(OSError, ValueError, AttributeError):  # no flush to the closed pipe at exit
                os.dup2(os.open(os.devnull, os.O_WRONLY), rows_out.fileno())
            print("stopped: standard output was closed by its reader before every row was written", file=sys.stderr)
            return 128 + 13  # SIGPIPE's, as a shell reports a writer its reader left


def check_predict_output(args: argparse.Namespace, max_rows: int | None = None) -> None:
    """predict's --output checked before the model loads (io.check_output, io.check_results_name, outside_model);
    standard output (STDOUT) needs no check."""
    from .io import check_results_name

    if args.output == STDOUT:
        return
    given = None if args.input in (None, STDIN) else args.input
    out = check_output(args.output, given)
    outside_model(args.output, out, args.model)
    check_backup(args.output, out, given)
    check_results_name(args.output, max_rows)


def predict_command(args: argparse.Namespace, rows_out: IO[str] | None = None) -> int:
    """predict; `rows_out`: the stream the CSV rows go to where --output is STDOUT (cmd_predict)."""
    from .io import (InputFileError, MissingColumn, check_results_name, check_room, is_sd_name, least_output_bytes,
                     model_cells, read_queries, refuse_unnamed_results)
    from .known import count_recorded, known_rank, recorded_reaction, recorded_side, with_recorded
    from .service import Predictor, check_options, model_task

    cluster = cluster_options(args)
    if args.round_trip_k is not None and not args.round_trip:
        raise ValueError("--round-trip-k goes with --round-trip FORWARD_MODEL")
    sampling = sampling_options(args)
    check_draft_knobs(args.method, args.draft_len, args.n_drafts, sampling)
    # what Predictor.predict refuses whatever the model (--n-best 2 for greedy), before the model loads and a file is
    # read: a file run refused at its first batch said 'stopped: no record finished' above the error
    check_options(args.method, args.n_best, args.batch_size, args.augment, args.draft_len, args.n_drafts,
                  args.time_limit, sampling)
    marks, keep = None, None
    if args.smiles is None:  # files are checked before the model loads: a refused file costs nothing
        if not args.output:
            print("error: --input needs --output", file=sys.stderr)
            return 2
        # InputFileError, OutputFileError and OSError reach main's boundary: an error line, exit 2
        check_predict_output(args)
        task = model_task(args.model)
        try:
            read = read_queries(args.input, args.column, args.input_format, task=task)
            refuse_unnamed_results(read, input_name(args.input))  # our own SD results: their answers, as queries
        except MissingColumn as missing:
            raise column_refusal("--input", args.input, "--column", missing) from None
        # which of a workbook's sheets and which column were taken, where it has several and none was named
        where = [f"the sheet {read.sheet!r}"] if read.sheet else []
        if read.query_column and not args.column:
            where.append(f"the column {read.query_column!r} (--column names another)")
        if where:
            print(f"{input_name(args.input)}: the queries are read from {', '.join(where)}")
        for note in read.notes:
            print(f"note: {input_name(args.input)}: {note}")
        table, recorded = with_recorded(read, task)
        if not table.queries:  # as a file of blank lines is, and evaluate's empty --src: no run of nothing
            raise InputFileError(f"{input_name(args.input)} holds no records to predict: it is empty, or holds a "
                                 "header and nothing under it")
        if args.output != STDOUT:
            check_results_name(args.output, len(table.queries) * args.n_best)  # a workbook's rows, before predicting
        # the column of known answers before the line that names it; a name found nowhere is refused listing the
        # file's own columns, not those with_recorded adds
        marks = known_marks(table, input_name(args.input), args.known_column or recorded, task, read.columns)
        if recorded:
            given = "reactants" if recorded_side(task) == "products" else "products"
            n_recorded, n_records = count_recorded(table, recorded), len(table.queries)
            of_file = f"the file's {queries(n_records)}"
            if not n_recorded:  # every query written as a reaction has an outcome that is no SMILES: refused
                print(f"none of {of_file} is a recorded reaction whose recorded {recorded_side(task)} RDKit reads: "
                      f"those written as reactions are refused (see the error "
                      f"{'field' if is_sd_name(args.output) else 'column'})")
            else:
                print(f"{n_recorded:,} of {of_file} "
                      + ("is a recorded reaction: it is" if n_recorded == 1 else "are recorded reactions: each is")
                      + f" predicted from its {given}, and its recorded {recorded_side(task)} (column {recorded}) "
                      + (f"are kept; --known-column {args.known_column} marks the answers" if args.known_column
                         else "mark the answers"))
        keep = interrupted_keep(args, table, marks)
        if args.output != STDOUT:  # an SD file's rows go to a kept CSV too as they pass (a workbook's zip is less)
            check_room(args.output, least_output_bytes(table) * (2 if is_sd_name(args.output) else 1))
    else:
        if args.resume:
            raise ValueError("--resume goes on from an interrupted --input run: give --input")
        if args.known_column or args.column:
            raise ValueError(f"--{'known-' if args.known_column else ''}column reads a file's column: give --input")
        if args.input_format:
            raise ValueError("--input-format says how to read --input: give --input")
        if args.output:  # the one query's answers are written too, as --input writes a file's
            check_predict_output(args, args.n_best)
    # With --ray the workers load their own copies (on --device); this one checks the folder and the options
    # here, before a cluster starts, on a machine that may have no GPU.
    if args.round_trip and cluster:
        raise ValueError("--round-trip runs in this process only; leave out --ray")
    if cluster:  # before the model loads: no cluster there was told once a shipped model had loaded
        from .scale import answers

        answers(cluster.address)
    predictor = Predictor.load(args.model, "cpu" if cluster else args.device, "auto" if cluster else args.engine,
                               "float32" if cluster else args.dtype)
    # and what it refuses of this model (writings it cannot read, a draft model it lacks): one error line here, before
    # any query, and with --ray not a failure on every worker
    predictor.check_method(args.method)
    predictor.check_augment(args.augment)
    check, checker = round_trip_check(args, predictor)
    cells = (*model_cells(predictor.path, predictor.weights), *checker)  # what each row ends with (Named)
    if args.smiles is None and predictor.calibration_for(args.method, args.augment, args.n_best) is None:
        pooled = f" pooled over {args.augment} writings" if args.augment > 1 else ""
        print(f"note: {args.method}'s answers{pooled} have no calibration in {predictor.path} (sampling and lossy "
              "methods never do; molspec calibrate fits the others): the confidence column stays empty")
    options = dict(method=args.method, n_best=args.n_best, draft_len=args.draft_len, n_drafts=args.n_drafts,
                   sampling=sampling, time_limit_s=args.time_limit, augment=args.augment,
                   ion_writing=args.ion_writing)
    if args.smiles is not None:
        query, known = recorded_reaction(args.smiles, predictor.task) or (args.smiles, None)
        result = check(predictor.predict(query, **options))
        if not (result.ok or result.stopped_with_answers):  # a refused query is the user's input: main's boundary,
            # an `error:` line and exit 2, as a recorded outcome that is no SMILES is; a hydride's ions (the one
            # suggestion there is) are read by a flag, which the refusal offering them to paste did not name
            raise ValueError(result.error + ("; --ion-writing reads it so" if result.suggestion else ""))
        read = f"read in {result.writings} of the {args.augment} writings asked for, " \
            if 1 < args.augment and result.writings < args.augment else ""  # a small molecule has fewer (CCO: 3)
        print(f"query: {result.canonical_query}   ({read}{result.stats.model_calls} model calls, "
              f"{result.stats.draft_tokens_accepted} draft tokens accepted, {result.stats.wall_time_s * 1000:.0f} ms)")
        from .chem import stereo_notes
        from .service import several_products_note

        for note in [*stereo_notes(query), several_products_note(predictor.task, result.canonical_query)]:
            if note:
                print(f"note: {note}")
        if result.stopped_with_answers:
            print(f"note: the search {result.error}; below, the answers it had found, those it had not finished "
                  f"marked ({TIMED_OUT})")
        print(f"{'rank':>4}  {'score':>8}  {'prob':>6}  {'conf':>5}  {'check':<8}  smiles")
        for p in result.predictions:
            confidence = f"{p.confidence:>5.2f}" if p.confidence is not None else f"{'-':>5}"
            check = "sane" if p.sane else "flagged" if p.valid else "invalid"
            note = f"   ({'; '.join(p.concerns)})" if p.concerns else ""
            if p.spellings > 1:
                note += f"   (written {p.spellings} ways)"
            if p.round_trip is not None:
                note += f"   round trip {'yes' if p.round_trip else 'no'} (forward prob {p.forward_prob:.3g})"
            print(f"{p.rank:>4}  {p.score:>8.3f}  {p.probability:>6.3f}  {confidence}  {check:<8}  {p.smiles}{note}")
        if known is not None:
            rank = known_rank(result, known)
            print(f"recorded outcome {known}: " + (f"rank {rank}" if rank else
                                                   f"not among the {len(result.predictions)} answers"))
        if args.output:
            from .io import QueryFile, result_rows

            table, recorded = with_recorded(QueryFile([args.smiles]), predictor.task)
            marks = known_marks(table, "--smiles", recorded, predictor.task)
            write_marked(args.output, result_rows(1, table.cells_of(0), result),
                         Named(answer_header(table, marks, bool(args.round_trip)), marks, cells), stream=rows_out)
            print(f"-> {output_name(args.output)}")
        return 0
    named = Named(answer_header(table, marks, bool(args.round_trip)), marks, cells)
    try:
        if cluster:
            from .scale import predict_on_ray

            outcomes = Outcomes()  # kept_part counts the resumed records into it, predict_on_ray the rest
            kept = kept_part(resumed(args, table, marks, keep), table, outcomes)
            # named as its marks: predict_on_ray asks of them the header and rows() alone, and so the model's columns
            # come after matches_known, as predict_here writes them
            predict_on_ray(table, args.output, cluster, args.model, args.device, args.batch_size, options, args.engine,
                           args.dtype, named, keep, kept, outcomes)  # type: ignore[arg-type]
        else:
            outcomes = predict_here(predictor, table, args.output, args.batch_size, options, named, check, keep,
                                    resumed(args, table, marks, keep), rows_out)
    except BaseException as stop:  # Ctrl-C, SIGTERM, a full disk, a failed prediction: the boundary's line follows
        if keep is not None and keep.last_row > keep.held:  # this run wrote the kept rows: they are made so
            with contextlib.suppress(OSError):  # on a full disk too; without it --resume checks --method alone
                made_with = {**answer_settings(args), "weights": predictor.weights}  # those loaded: check_settings
                write_text_file(settings_name(keep), json.dumps(made_with, indent=1) + "\n")
        if not (args.output == STDOUT and isinstance(stop, BrokenPipeError)):  # cmd_predict's one line says that
            print(f"stopped: {stopped(args.output, len(table.queries), keep, getattr(stop, 'records_out', 0))}",
                  file=sys.stderr)
        raise
    if keep is not None and keep.held:  # its rows are in the output now
        keep.path.unlink(missing_ok=True)
        settings_name(keep).unlink(missing_ok=True)
    n_blank = table.n_blank()  # blank lines and empty cells: no queries, neither predicted nor rejected
    n_queries = len(table.queries) - n_blank
    n_bad, n_stopped, n_unanswered = outcomes.rejected, outcomes.stopped, outcomes.unanswered
    n_predicted = n_queries - n_bad - n_unanswered
    stopped_note = (f" ({n_stopped} of them stopped at the time limit, with the answers found by then)"
                    if n_stopped else "")
    unanswered_note = (f", {n_unanswered} stopped by the time limit (--time-limit {args.time_limit:g} s) before any "
                       "answer" if n_unanswered else "")
    see = f" (see the error {'field' if is_sd_name(args.output) else 'column'})" if n_bad or n_unanswered else ""
    print(f"{queries(n_predicted)} predicted{stopped_note}{unanswered_note}, "
          f"{n_bad} rejected{see}"
          + (f", {counted(n_blank, 'blank record')} skipped" if n_blank else "")
          + f" -> {output_name(args.output)}")
    if marks is not None:
        print(marks.summary().describe())
    if predictor.task == "retro" and outcomes.several:  # the Predict page and --smiles say it of one query
        from .io import several_molecules_note

        print(f"note: {several_molecules_note(sorted(outcomes.several))}")
    if table.queries and not n_predicted:  # a pipeline must not take a file of errors for answers
        if not n_queries:  # 'none of the 0 queries could be predicted'
            print(f"error: {input_name(args.input)} holds no query to predict: its {n_blank} record"
                  f"{'s are' if n_blank != 1 else ' is'} blank", file=sys.stderr)
            return 2
        blank = (f" ({counted(n_blank, 'blank record')} hold{'s' * (n_blank == 1)} none)"
                 if n_blank else "")
        if n_unanswered:  # slow queries, not ones the model would not take
            which = "it" if n_queries == 1 else "each" if not n_bad else f"{n_unanswered} of them"
            refused = f", and {n_bad} {'was' if n_bad == 1 else 'were'} refused" if n_bad else ""
            none = "the file's one query could not" if n_queries == 1 else f"none of the {n_queries} queries could"
            print(f"error: {none} be predicted{blank}: the time limit stopped {which} before any answer{refused}; a "
                  f"longer --time-limit decodes {'it' if n_unanswered == 1 else 'them'}", file=sys.stderr)
            return 2
        print(("error: none of the file's queries could be predicted: it holds one, which was refused" if n_queries == 1
               else f"error: none of the {n_queries} queries could be predicted") + blank
              + f"{read_as_hint(args.input, args.input_format, table)}", file=sys.stderr)
        return 2
    return 0


def interrupted_keep(args: argparse.Namespace, table: QueryFile, marks: KnownMarks | None) -> Kept | None:
    """Where an output's run keeps its finished rows if it stops (io.write_results: out.interrupted.csv, or for an SD
    file or workbook out.interrupted.sdf.csv, out.interrupted.xlsx.csv), with --resume the records kept there by the
    run that was (Kept.held; io.check_kept), checked before the model loads. A file of kept rows is refused without
    --resume: this run, stopped in turn, would replace it with fewer. None for standard output."""
    from .io import Kept, check_kept, interrupted_name, is_sd_name, is_workbook_name

    if args.output == STDOUT:  # its rows are out as they come (cmd_predict)
        return None
    journal = is_sd_name(args.output) or is_workbook_name(args.output)
    keep = Kept(check_output(interrupted_name(args.output), None if args.input == STDIN else args.input),
                journal=journal)
    if not keep.path.exists():
        if args.resume:
            print(f"nothing to resume ({keep.path.name} does not exist): starting at the first record")
        return keep
    if not args.resume:
        raise ValueError(f"{keep.path} holds the rows of an interrupted run: give --resume to go on from them, or "
                         "delete it to start again")
    check_settings(args, keep)
    check_kept(keep, kept_header(keep, table, marks, bool(args.round_trip)), table.queries, args.method)
    print(f"resuming: {first_records(keep.held, len(table.queries))} come{'s' * (keep.held == 1)} from "
          f"{keep.path.name}")
    return keep


# predict's options that shape its answers: a run resumed with another of these would join its rows to rows it
# did not make (the batch size, threads, device and engine change no answer; the columns are checked in the rows)
ANSWER_OPTIONS = ("model", "dtype", "method", *KNOBS, "augment", "ion_writing", "time_limit", "round_trip",
                  "round_trip_k")


def answer_settings(args: argparse.Namespace) -> dict[str, object]:
    """The options of ANSWER_OPTIONS as this run was given them, models by the folder they name."""
    from .service import model_folder

    settings: dict[str, object] = {name: getattr(args, name) for name in ANSWER_OPTIONS}
    for name in ("model", "round_trip"):
        if settings[name] is not None:
            settings[name] = os.path.realpath(model_folder(str(settings[name])))
    return settings


def settings_name(keep: Kept) -> Path:
    """Where an interrupted run records its answer_settings beside its kept rows: out.interrupted.json, a name near the
    file system's limit cut to fit (io.fitted_name) as the kept rows' is: swapping .csv for .json added a byte, and an
    output of 240 letters had its options left unrecorded and its resumed run fail with 'File name too long'."""
    return keep.path.with_name(fitted_name(keep.path.stem, ".json"))


def check_settings(args: argparse.Namespace, keep: Kept) -> None:
    """Refuse --resume where the kept rows were made with other answer_settings than this run's (--n-best 5 rows
    followed by --n-best 10 rows, float32 by int8, one model's by another's); rows kept before the settings were
    recorded are checked for --method alone (io.kept_rows)."""
    from .calibration import weights_fingerprint
    from .io import read_text
    from .service import model_folder

    path = settings_name(keep)
    if not path.is_file():
        return
    try:
        kept = json.loads(read_text(path))
    except (ValueError, OSError) as exc:
        raise ValueError(f"{path} cannot be read ({exc}): delete it to resume checking --method alone") from None
    now = answer_settings(args)
    differ = [f"--{name.replace('_', '-')} {kept.get(name)!r} there, {now[name]!r} here" for name in ANSWER_OPTIONS
              if kept.get(name) != now[name]]
    if differ:
        raise ValueError(f"the rows kept in {keep.path.name} were made with other options ({'; '.join(differ)}): "
                         "resume with the options that were interrupted")
    # one folder, other weights: a training run's export/ is rewritten every few minutes (rows kept before the weights
    # were recorded are not checked for them)
    weights = kept.get("weights")
    if isinstance(weights, str) and weights and weights != weights_fingerprint(model_folder(str(args.model))):
        raise ValueError(f"the rows kept in {keep.path.name} were made with other weights than those now in --model "
                         f"{args.model} (its weight files were replaced since, as a training run's export/ is): this "
                         "run's answers would be joined to another model's; delete the kept rows to start again")


def resumed(args: argparse.Namespace, table: QueryFile, marks: KnownMarks | None, keep: Kept | None
            ) -> Iterable[list[object]]:
    """The rows of the records an interrupted run kept (io.kept_rows), read as the output is written; none where
    this run starts at the first record."""
    from .io import kept_rows, output_header

    if keep is None or not keep.held:
        return ()
    rows = kept_rows(keep, kept_header(keep, table, marks, bool(args.round_trip)), table.queries, args.method,
                     table.cells)
    cut = len(output_header(table.columns))  # matches_known and the model's cells are added again (Named)
    return (row[:cut] for row in rows)


def answer_header(table: QueryFile, marks: KnownMarks | None, round_trip: bool, named: bool = True) -> list[str]:
    """predict's columns: the input's and RESULT_COLUMNS (io.output_header), matches_known where `marks` mark the
    answers, then io.MODEL_COLUMNS, and with --round-trip io.CHECKER_COLUMNS, as the app's files of answers end
    (Named). named=False: the columns of the rows a run kept before predict wrote the model's (kept_header)."""
    from .io import CHECKER_COLUMNS, MODEL_COLUMNS, output_header

    added = (*MODEL_COLUMNS, *(CHECKER_COLUMNS if round_trip else ())) if named else ()
    return [*(output_header(table.columns) if marks is None else marks.header), *added]


def kept_header(keep: Kept, table: QueryFile, marks: KnownMarks | None, round_trip: bool) -> list[str]:
    """The columns of the rows an interrupted run kept at keep.path: answer_header's, or where they name no model (a
    run from before predict wrote io.MODEL_COLUMNS) those without the model's, resumed as they are and named by this
    run's model (check_settings holds it to the interrupted run's folder, and its weights where they were recorded)."""
    from .io import MODEL_COLUMNS, open_regular

    with open_regular(keep.path, bounded=False) as raw:  # as io.kept_rows reads them: no device, FIFO or folder
        first = next(csv.reader(io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")), [])
    return answer_header(table, marks, round_trip, named=MODEL_COLUMNS[0] in first)  # an input's is input_model_...


@dataclasses.dataclass(frozen=True)
class Named:
    """What predict writes after each answer row's RESULT_COLUMNS: matches_known where `marks` mark them, then `cells`,
    the model's (io.MODEL_COLUMNS: io.model_cells) and with --round-trip the checker's (io.CHECKER_COLUMNS). The app's
    files of answers name the model since 23c693d, and a file of predict's, sent on, could not be told from another
    model's answers. `header`: answer_header's."""
    header: list[str]
    marks: KnownMarks | None
    cells: tuple[object, ...]

    def rows(self, rows: Iterable[list[object]]) -> Iterator[list[object]]:
        """The rows marked (KnownMarks.rows) and named, a record's last row still marked so (io.LastRow: a run stopped
        after it keeps the record)."""
        from .io import LastRow

        for row in rows if self.marks is None else self.marks.rows(rows):
            yield (LastRow if isinstance(row, LastRow) else list)([*row, *self.cells])


def stopped(output: str, n_records: int, keep: Kept | None, records_out: int = 0) -> str:
    """What a file run that stopped before its output was written did with its work (the line before the
    boundary's `interrupted`, `terminated` or `error:` line); `records_out`: the first records whose rows had all
    gone to standard output (predict_here), which a pipeline goes on after."""
    from .io import interrupted_name

    if output == STDOUT or keep is None:
        if not records_out:
            return "no record finished; standard output holds the header alone"
        return f"standard output holds the rows of {first_records(records_out, n_records)}, not every record's"
    if keep.last_row <= keep.held:
        if keep.moved:
            return f"the rows this run finished could not be kept: {keep.moved}"
        return (f"no further record finished; {keep.path} holds {first_records(keep.held, n_records)} as before"
                if keep.held else f"no record finished; {output} was not written")
    where = (f"{keep.path.parent} ({keep.moved}); move the files there to {interrupted_name(output).parent} and run "
             if keep.moved else f"{keep.path}; run ")
    return (f"the rows of {first_records(keep.last_row, n_records)} are kept in {where}the same command with "
            f"--resume to go on from there ({output} is written once every record is done)")


def first_records(n: int, n_records: int) -> str:
    """The first `n` of a file's `n_records` records: 'records 1-4 of 6', 'record 1 of 6' (not 'records 1-1')."""
    return f"{'record 1' if n == 1 else f'records 1-{n:,}'} of {n_records:,}"


def output_name(path: str) -> str:
    """How messages name an --output: its path, or standard output."""
    return "standard output" if path == STDOUT else path


def input_name(path: str) -> str:
    """How messages name an --input: its file name, or standard input."""
    from .io import STDIN_NAME

    return STDIN_NAME if path == STDIN else Path(path).name


def read_as_hint(path: str, read_as: str | None, table: QueryFile) -> str:
    """Why a file may have given no query that can be predicted: a CSV read as lines of text."""
    from .io import input_kind

    if input_kind(path, read_as) == "txt" and any(mark in table.queries[0] for mark in ",;\t"):
        return (f"; {input_name(path)} was read as TXT, one query a line, and its first line holds commas, "
                "semicolons or tabs: if it is a CSV, give --input-format csv (or name the file .csv or .tsv)")
    return ""


def known_marks(table: QueryFile, name: str, column: str | None, task: str,
                own_columns: Sequence[str] | None = None) -> KnownMarks | None:
    """What marks the rows of `table` against its known answers in `column`, as a `task` model's answers are
    matched (known.known_answers); None without one. `own_columns`: the file's, where `table` is known.with_recorded's,
    which adds columns of its own: a `column` found nowhere is refused listing the file's (the Batch page's f7e0c41)."""
    from .io import output_header, query_column
    from .known import KnownMarks, column_index

    if not column:
        return None
    found = query_column(table.columns, column) is not None
    at = column_index(table.columns if found or own_columns is None else own_columns, Path(name).name, column)
    return KnownMarks(output_header(table.columns), at, table.columns[at], task)  # named in any case: the file's name


def round_trip_check(args: argparse.Namespace, predictor: Predictor
                     ) -> tuple[Callable[[QueryResult], QueryResult], tuple[object, ...]]:
    """What each result goes through before it is written: the round-trip check with --round-trip, else nothing; and
    the cells of io.CHECKER_COLUMNS that name the forward model that checks (none without a check)."""
    if not args.round_trip:
        return (lambda result: result), ()
    from .io import model_cells
    from .roundtrip import check_round_trip
    from .service import Predictor

    if predictor.task != "retro":
        raise ValueError(f"--round-trip checks retrosynthesis answers; {predictor.path} is a {predictor.task} model")
    forward = Predictor.load(args.round_trip, args.device, args.engine, args.dtype)  # the answers' arithmetic
    k = args.round_trip_k or 1
    return (lambda result: check_round_trip(result, forward, k)), (*model_cells(forward.path, forward.weights), k)


def predict_here(predictor: Predictor, table: QueryFile, output: str, batch_size: int, options: dict, named: Named,
                 check: Callable[[QueryResult], QueryResult] = lambda result: result,
                 keep: Kept | None = None, kept: Iterable[list[object]] = (),
                 stream: IO[str] | None = None) -> Outcomes:
    """Predict a query file in this process, a window of batches at a time (service.window_size),
    streaming the CSV (memory stays bounded for 100,000 queries); each result goes through `check` (the
    round trip) first, and each row through `named` (matches_known, the model's columns). An interrupted CSV keeps its
    rows at `keep` (io.write_csv), those of the stopped window's first records done too (predicted_window); `kept`,
    the rows of records 1 to keep.held that an interrupted run kept (io.kept_rows), come first, and those records are
    not predicted again. `stream`: where the CSV goes instead of `output` (write_marked). Returns how its records
    came out (rejected, stopped at the time limit)."""
    from .io import result_rows

    queries = table.queries
    start = keep.held if keep is not None else 0
    outcomes = Outcomes()
    records_out = start  # the first records whose rows have all been written (asked for the next: gone out)

    def rows() -> Iterator[list[object]]:
        nonlocal records_out
        yield from kept_part(kept, table, outcomes)
        # predict batches a window by length; read in writings (augment), each query is a window, timed alone
        for shifted in windows(len(queries) - start, batch_size, "predict", augment=options.get("augment", 1)):
            window = slice(shifted.start + start, shifted.stop + start)
            results, time_ms, stop = predicted_window(predictor, queries[window], batch_size, options)
            for i, result in enumerate(results, start=window.start):
                record = result_rows(i + 1, table.cells_of(i), check(result), time_ms, table.problem_of(i))
                if not table.is_blank(i):
                    outcomes.count(record[0], len(table.columns))
                yield from record
                records_out = i + 1
            if stop is not None:
                raise stop

    try:
        write_marked(output, rows(), named, keep, stream)
    except BaseException as stop:  # standard output's stop line says how far its rows go ('stopped' reads it)
        stop.records_out = records_out
        raise
    return outcomes


def predicted_window(predictor: Predictor, queries: list[str], batch_size: int, options: dict
                     ) -> tuple[list[QueryResult], float | None, BaseException | None]:
    """io.predict_batch's results and time_ms of a window, and None; or, where a Ctrl-C or SIGTERM ended the window
    at its next batch (evaluate.predict_window: a stop lost every batch of up to 256 queries decoded by then), the
    results of its first queries done, with no time_ms (each its share of its batch: io.result_rows), and the stop,
    for the caller to raise once their rows are out; or, for any other stop, no result and it."""
    from .evaluate import predict_window
    from .io import predict_batch

    try:
        return (*predict_batch(predictor, queries, batch_size, functools.partial(predict_window, predictor), **options),
                None)
    except BaseException as stop:
        return list(getattr(stop, "finished", ())), None, stop


def kept_part(kept: Iterable[list[object]], table: QueryFile, outcomes: Outcomes) -> Iterator[list[object]]:
    """The rows an interrupted run kept (resumed: matches_known left off, marked again and counted in the summary),
    their records counted into `outcomes` as they pass (blank records are not)."""
    from .io import RESULT_COLUMNS

    at = len(table.columns) + RESULT_COLUMNS.index("row")
    last = 0  # the record of the last kept row
    for row in kept:
        if row[at] != last and not table.is_blank(int(row[at]) - 1):
            outcomes.count(row, len(table.columns))
        last = row[at]
        yield row


def write_marked(output: str, rows: Iterable[list[object]], named: Named, keep: Kept | None = None,
                 stream: IO[str] | None = None) -> None:
    """Output rows to `output`, each marked against its known answer and named by its model (Named); interrupted, a CSV
    keeps its rows at `keep` (io.write_csv). With `stream` (standard output) the CSV goes there instead, each row as it
    comes."""
    from .io import write_results, write_rows

    header, marked = named.header, named.rows(rows)
    if stream is not None:
        write_rows(stream, header, marked)
        stream.flush()
    else:  # a failed run keeps any earlier output as it was; a whole one keeps it as <output>.bak
        write_results(output, header, keeping_replaced(marked, check_output(output)), keep)


def keeping_replaced(rows: Iterable[list[object]], out: Path) -> Iterator[list[object]]:
    """`rows`, then the file at `out` kept (keep_replaced) once the last has passed: io.write_results renames the
    whole new file into place next, and a run that stops before replaces nothing, so keeps nothing."""
    yield from rows
    keep_replaced(out)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluate import (RESUME_MAY_DIFFER, check_method, evaluate, queries_digest, read_selected, resume_refusal,
                           software)
    from .scale import stops_deferred
    from .service import Predictor

    # files and options first: a refused one costs no model load and no run
    out = check_report_path(args.out, args.src, args.tgt, args.index, model=args.model) if args.out else None
    earlier = stopped_report(out, args.resume)
    lines, sources, targets = read_selected(args.src, args.tgt, args.index, args.limit)
    warn_short_limit(args, len(sources), "evaluates")
    sampling = sampling_options(args)
    # Unset, the method is the standard one for the n-best asked; a method that is set is evaluated
    # as asked, or refused, never swapped for another.
    method = args.method or ("beam" if args.n_best > 1 else "greedy")
    check_method(method, args.n_best)
    check_draft_knobs(method, args.draft_len, args.n_drafts, sampling)
    predictor = Predictor.load(args.model, args.device, args.engine, args.dtype)
    # those loaded (Predictor.weights, taken as they load), not those found once the run ends: a training run's
    # export/ is rewritten every few minutes, and the report named weights its answers were never decoded with
    weights = predictor.weights
    predictor.check_augment(args.augment)  # before the run, not on every query
    warn_task_mismatch(args.src, predictor.task)
    knobs = METHODS[method].knobs
    drafter, draft_len, n_drafts = predictor.resolve(method, args.draft_len, args.n_drafts, args.batch_size)

    def described(report: dict) -> dict:
        """What reproduces the run, from any folder: every option it was decoded with (the sampling knobs and the
        drafts only for a method reading them, the drafts as decoded with, defaults included: those of a full
        batch, the shape spec-auto picks by batch size), absolute paths, the device and the code; the digest of the
        queries it scored (a stopped run's first n, which `compare` sets beside a run of --limit n)."""
        n = report["n"]
        report.update(model=os.path.realpath(predictor.path), device=str(predictor.device),
                      device_name=predictor.device_name, engine=predictor.engine, dtype=predictor.dtype,
                      src=os.path.abspath(args.src), tgt=os.path.abspath(args.tgt),
                      index=os.path.abspath(args.index) if args.index else None, limit=args.limit,
                      augment=args.augment, batch_size=args.batch_size, drafter=drafter,
                      draft_len=draft_len if "draft_len" in knobs else None,
                      n_drafts=n_drafts if "n_drafts" in knobs else None, time_limit_s=args.time_limit,
                      sampling={k: v for k, v in dataclasses.asdict(sampling).items()
                                if k in knobs and k != "draft_len"} or None,
                      queries_sha256=queries_digest(sources[:n], (targets or [])[:n]), weights=weights,
                      **software())
        return report

    if earlier is not None:  # checked against this run's own record of those queries
        refusal = resume_refusal(earlier, described({"n": earlier["n"], "n_best": args.n_best, "method": method}),
                                 len(sources))
        if refusal:
            raise ValueError(f"--resume: {out} is the report of another run, which differs in {refusal}; run with its "
                             "options, or remove it (or give another --out) to start again")
        now = {"batch_size": args.batch_size, **software()}
        changed = [f"{key} {earlier.get(key)!r} against {now[key]!r}" for key in RESUME_MAY_DIFFER
                   if earlier.get(key) != now[key]]
        if changed:
            log.warning("--resume: %s differ from the stopped run's: the %s it holds were decoded so, the rest with "
                        "this run's (the report's \"resumed\" keeps the stopped run's)", "; ".join(changed),
                        queries(earlier["n"]))
        log.warning("--resume: %s of %s kept from %s; decoding the rest", f"{earlier['n']:,}", queries(len(sources)),
                    out)

    def resumed(report: dict) -> dict:
        """The report described, with, for a run resumed, the queries kept and what the stopped run may have decoded
        them with otherwise (RESUME_MAY_DIFFER)."""
        report = described(report)
        if earlier is not None:
            report["resumed"] = {"after": earlier["n"], **{key: earlier.get(key) for key in RESUME_MAY_DIFFER}}
        return report

    try:
        scored = evaluate(predictor, sources, targets or [], args.n_best, method, args.batch_size, lines=lines,
                          earlier=earlier, draft_len=args.draft_len, n_drafts=args.n_drafts, sampling=sampling,
                          augment=args.augment, time_limit_s=args.time_limit)
    except BaseException as stop:  # Ctrl-C, SIGTERM, out of memory: the queries scored keep their report
        partial = getattr(stop, "partial_report", None)
        if partial is not None:  # on the screen too (after the file: tell_report): without --out it was lost
            partial = resumed(partial)
            written = out
            if out:
                try:
                    write_report(out, partial, keep=earlier is None)
                except OSError as exc:  # said, and the stop's exit code kept
                    log.error("%s", describe(exc, ""))
                    written = getattr(exc, "kept_as", None)
            show_report(partial)
            left_out = partial["partial"]["decoded_left_out"]
            log.warning("stopped after %s of %s: their report, marked partial, is %s%s%s", f"{partial['n']:,}",
                        queries(len(sources)), f"in {written}" if written else "above",
                        f" ({left_out:,} more decoded, after a query that was not, are left out: a report is of the "
                        "first queries)" if left_out else "",
                        "; the same command with --resume goes on from there" if out and written == out else "")
        raise  # the boundary's line and exit code follow
    with stops_deferred("once the report is written"):  # every query is scored: a stop now would lose them all
        tell_report(args, resumed(scored), out, predictor.task, keep=earlier is None)
    return 0


def tell_report(args: argparse.Namespace, report: dict, out: Path | None, task: str, keep: bool) -> None:
    """A whole evaluate run's report to `out`, then on the screen, with warnings of what it counts: shown first, it
    was lost where the screen could not take it (evaluate ... | head, whose reader had gone: a broken pipe)."""
    if out:
        write_report(out, report, keep=keep)
    show_report(report)
    listed = "; the report lists the first ten" if args.out else ""
    refused = [query for query in report["query_error_examples"] if not query.get("timed_out")]
    n_refused = report["query_errors"] - report["timed_out"]
    if n_refused:  # on stderr, as the next: stdout stays one JSON object
        first = (f" ({'' if n_refused == 1 else 'the first, '}query {refused[0]['query']} of those evaluated, line "
                 f"{refused[0]['line']} of {args.src}: {refused[0]['error']})" if refused else "")
        log.warning("%s %s refused, %s miss in every top-k%s%s", part_of(n_refused, report["n"], "query", "queries"),
                    "was" if n_refused == 1 else "were", "a" if n_refused == 1 else "each a", first, listed)
    if report["timed_out"]:  # not the model's refusal: slow queries, which a longer limit decodes
        one = report["timed_out"] == 1
        log.warning("%s %s stopped by the time limit (--time-limit %g s) before %s search ended, %s miss in every "
                    "top-k: %s not refused; a longer --time-limit decodes %s whole%s",
                    part_of(report["timed_out"], report["n"], "query", "queries"), "was" if one else "were",
                    args.time_limit, "its" if one else "their", "a" if one else "each a",
                    "it was" if one else "they were", "it" if one else "them", listed)
    if report["unreadable_targets"]:
        log.warning("%s", unreadable_line(report["unreadable_targets"], report["n"], args.tgt))
    if not any(report["first_right"]["model_order"]):  # 0% reads as the model's accuracy; files of another task?
        log.warning("%s its target in its top-%d: check that %s holds the answers to %s, line by line, and that "
                    "they are for a %s model", "the one query does not have" if report["n"] == 1 else
                    f"none of the {report['n']} queries has", args.n_best, args.tgt, args.src, task)


def unreadable_line(n: int, total: int, tgt: str) -> str:
    """'2 of 5 targets in t.txt are SMILES RDKit cannot read: those queries count as misses' (evaluate's and bench's
    warning), '1 of 5 targets ... is a SMILES ...: that query counts as a miss'."""
    one = n == 1
    return (f"{part_of(n, total, 'target')} in {tgt} {'is a SMILES' if one else 'are SMILES'} RDKit cannot read: "
            f"{'that query counts as a miss' if one else 'those queries count as misses'}")


def warn_short_limit(args: argparse.Namespace, n: int, does: str) -> None:
    """A warning where --limit asks for more queries than --src (or the lines --index selects) holds: the run was
    silent, and its user believed the number asked for had been read."""
    if args.limit is not None and args.limit > n:
        held = f"{args.index} selects" if args.index else f"{args.src} holds"
        log.warning("--limit %d: %s only %s; the run %s %s", args.limit, held, queries(n), does,
                    "it" if n == 1 else "all of them")


def stopped_report(out: Path | None, resume: bool) -> dict | None:
    """With --resume, the partial report at --out that the run goes on from (evaluate.resume_problem), or None where
    there is none yet (the run starts at the first query). None without --resume, where a partial report at --out is
    refused, as predict refuses its interrupted rows: run again without --resume, then stopped in turn, it left hours
    of decoding in <out>.bak, and --resume went on from its own few queries."""
    from .evaluate import PARTIAL, resume_problem
    from .io import read_text

    if not resume:
        if out is None or not out.is_file():
            return None
        try:  # read as --resume reads it (read_report): one saved with a byte-order mark was replaced, not refused
            there = json.loads(read_text(out))
        except (OSError, ValueError):  # not a report: replaced, and kept as <out>.bak
            return None
        stop = there.get(PARTIAL) if isinstance(there, dict) else None
        if isinstance(stop, dict):
            raise ValueError(f"{out} holds the report of a run stopped after {there.get('n')} of {stop.get('of_n')} "
                             "queries: give --resume to go on from it, or remove it (or give another --out) to start "
                             "again")
        return None
    if out is None:
        raise ValueError("--resume goes on from the partial report at --out: give --out")
    if not out.exists():
        log.warning("--resume: nothing to resume (%s does not exist): starting at the first query", out)
        return None
    from .calibration import backup_of

    kept = backup_of(out).name  # a name near the file system's limit is cut to fit: the one written, not out.name.bak
    report = read_report(str(out), f"--resume goes on from the partial report of a stopped evaluate: give another "
                         f"--out (without --resume the run replaces it, and keeps it as {kept})")
    problem = resume_problem(report)
    if problem:
        raise ValueError(f"--resume: {out} cannot be resumed: {problem} (without --resume a run replaces it, "
                         f"and keeps it as {kept})")
    return report


def write_report(out: Path, report: dict, keep: bool = True) -> None:
    """An evaluate report to `out`, the file it replaces kept first (keep_replaced) unless not `keep`: a run resumed
    from the partial report there, whose queries the new one holds. Where `out` cannot be written (its folder removed,
    or the disk full, while the run went on), the report goes to a new folder in the system's temporary folder, and
    an OSError says where (as its `kept_as`): the per-query places of hours of decoding, which the screen does not
    show, were lost with the file (io keeps predict's rows so)."""
    from .io import OutputFileError

    text = report_json(report)
    try:
        if keep:
            keep_replaced(out)
        write_text_file(out, text)
        return
    except (OSError, OutputFileError) as exc:  # the latter: its folder is gone, or a folder took its name
        failed = exc
    reason = failed.strerror if isinstance(failed, OSError) and failed.strerror else str(failed)
    folder = None
    try:
        folder = Path(tempfile.mkdtemp(prefix="molspec-"))
        write_text_file(folder / out.name, text)
    except (OSError, OutputFileError):  # a full disk, most likely: the first failure is the one to tell
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise failed from None
    kept = folder / out.name
    moved = OSError(f"{out} could not be written ({reason}): the report is kept as {kept}")
    moved.kept_as = kept
    raise moved


def keep_replaced(out: Path) -> None:
    """Keep the file a report (evaluate's, bench's), predict's output or plan's routes are about to replace beside it
    (calibration.backup_of), as calibrate keeps the fit it replaces, and say so: a run stopped two queries in once
    replaced a whole earlier report, hours of decoding, with its partial one. check_report_path (check_predict_output,
    cmd_plan) checked the backup's name before the run."""
    from .calibration import backup_of

    if out.is_file():  # copied as bytes, with its time
        shutil.copy2(out, backup_of(out))
        log.warning("%s: the file it replaces is kept as %s", out, backup_of(out))


def show_report(report: dict) -> None:
    """An evaluate report on standard output, one JSON object, without the per-query places: they go to the file
    (for `compare`), not the screen."""
    print(json.dumps({key: value for key, value in report.items() if not key.startswith("first_right")}, indent=2),
          flush=True)


def warn_task_mismatch(src: str, model_task: str) -> None:
    """A warning, before the run, where src lies in a prepare-data folder made for the other task: a
    retrosynthesis model read forward queries (or the reverse) and every answer would be a miss."""
    from .evaluate import prepared_task

    task = prepared_task(src)
    if task is not None and task != model_task:
        log.warning("%s was prepared for the %s task (its folder's stats.json) but the model is a %s model: "
                    "expect every answer to miss", src, task, model_task)


def report_json(report: dict) -> str:
    """An evaluate report as indented JSON, each order's per-query places (first_right) on one line."""
    def item(key: str, value: object) -> str:
        if key == "first_right" and isinstance(value, dict):
            orders = ",\n".join(f"    {json.dumps(order)}: {json.dumps(places)}" for order, places in value.items())
            return f"  {json.dumps(key)}: {{\n{orders}\n  }}"
        return f"  {json.dumps(key)}: " + json.dumps(value, indent=2).replace("\n", "\n  ")

    return "{\n" + ",\n".join(item(key, value) for key, value in report.items()) + "\n}\n"


def read_report(path: str, reader: str = "compare reads the reports of evaluate --out, a model's answers query by "
                                          "query") -> dict:
    """An evaluate report at `path`, or a ValueError that names it and what is wrong; `reader`: who reads it and
    what it needs, for a report of another command (evaluate --resume was told what compare reads)."""
    from .evaluate import report_problem
    from .io import read_text

    text = read_text(path)
    if not text.strip():  # json's own words, 'Expecting value: line 1 column 1 (char 0)', said nothing of that
        raise ValueError(f"{path} is empty: no JSON report is in it (an evaluate run that wrote none, or a file "
                         "emptied since)")
    try:
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not a JSON report: {exc}") from None
    if not isinstance(report, dict):
        raise ValueError(f"{path} is not an evaluate report")
    if "n" not in report and isinstance(report.get("methods"), dict):  # bench's: 'missing n' said nothing of that
        raise ValueError(f"{path} is a bench report, which times methods on queries; {reader}")
    # an edited or old report: its name and what is wrong, not a KeyError (nor compare's header a TypeError)
    problem = report_problem(report) or counts_problem(report)
    if problem:
        raise ValueError(f"{path} is not an evaluate report ({problem})")
    return report


def counts_problem(report: dict) -> str | None:
    """What keeps the counts compare's header puts in words (counted) from being whole numbers from 1, or None:
    'augment', the writings each query was read in, and a stopped run's partial.of_n, the queries it was asked for.
    Edited by hand, they stopped compare on a TypeError."""
    from .calibration import is_count
    from .evaluate import PARTIAL

    if "augment" in report and not is_count(report["augment"]):
        return f"'augment' is {report['augment']!r:.40}, not a whole number from 1"
    stop = report.get(PARTIAL)
    if stop is not None and not (isinstance(stop, dict) and is_count(stop.get("of_n"))):
        return f"{PARTIAL!r} is {stop!r:.60}, not how many queries the stopped run was asked for (of_n)"
    return None


def cmd_compare(args: argparse.Namespace) -> int:
    from .evaluate import ORDERS, compare_reports, setting_differences
    from .io import percent

    a, b = read_report(args.first), read_report(args.second)
    if os.path.samefile(args.first, args.second):  # a name typed twice: a table of no differences, p 1 throughout
        raise ValueError(f"{args.first} and {args.second} are one file: give two reports")
    table = compare_reports(a, b)
    for name, path, report in (("a", args.first, a), ("b", args.second, b)):
        device = f" on {report['device']}" if "device" in report else ""  # not in reports from before it
        stop = report.get("partial")  # counts_problem: of_n a count
        partial = f"; partial: stopped after {report['n']:,} of {queries(stop['of_n'])}" if stop else ""
        weights = f", weights {report['weights'][:12]}" if isinstance(report.get("weights"), str) else ""
        writings = report.get("augment", 1)
        print(f"{name}: {path} (model {report.get('model')}{weights}, {counted(writings, 'writing')}, "
              f"method {report.get('method')}, {report.get('dtype', 'dtype not recorded')}{device}{partial})")
    differ = setting_differences(a, b)
    if differ:  # on stderr: a difference that was not meant is read beside the figures, not lost in them
        log.warning("the reports differ in %s", "; ".join(differ))
    source = f" ({a['src']})" if a.get("src") else ""
    if "cut" in table:  # a stopped run beside a whole one: the whole one's first queries, which its files still give
        other = "b" if table["cut"] == "a" else "a"
        source += (f"; {table['cut']} cut to its first {table['n']:,} of {queries(table['of_n'])}, those of {other}, "
                   "as its --src and --tgt give them")
    print(f"{queries(table['n'])}{source}; right only with a / only with b, exact McNemar p")
    for order in ORDERS:
        print(f"{order.replace('_', ' ')}:")
        for row in table[order]:
            print(f"  top-{row['k']}: a {percent(row['a'], 1)}  b {percent(row['b'], 1)}  only a {row['only_a']}  "
                  f"only b {row['only_b']}  p {row['p']:.3g}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from . import calibration
    from .evaluate import read_pairs
    from .scale import stops_deferred
    from .service import Predictor, model_folder

    if args.draft_len is not None or args.n_drafts is not None:  # fit() decodes with the method's own drafts
        raise ValueError("calibrate decodes with each method's own drafts, which change no answer of the exact "
                         "methods a fit is made for: leave out --draft-len and --n-drafts")
    check_draft_knobs(args.method, None, None, sampling_options(args))  # its methods are exact: no sampling knob
    if args.force and args.judge:
        raise ValueError("--judge writes nothing, so --force has nothing to force: give one of the two")
    if not args.judge:  # a saved fit is judged on the queries it was judged on, whichever they are
        check_validation_split(args.src)
    sources, targets = read_pairs(args.src, args.tgt, None, args.limit)
    n_best = args.n_best or (5 if METHODS[args.method].many else 1)
    if n_best > 1 and not METHODS[args.method].many:  # evaluate.check_method's words offered sampling methods too,
        # which calibrate refuses next
        fits = ", ".join(name for name in METHODS if calibration.kind_of(name, n_best) == "beam")
        raise ValueError(f"{args.method} returns one answer, so it has no top-{n_best}: use --n-best 1 (a fit of "
                         f"greedy's answers), or one of {fits}")
    kind = calibration.require_kind(args.method, n_best)  # refused before the model loads; width 1: greedy's
    folder = model_folder(args.model)
    path = calibration.path_of(folder, args.augment, args.method, n_best)
    # the fit a new one replaces (for these weights), if any
    earlier = None if args.judge else calibration.load(folder, args.augment, kind)
    if not args.judge:  # what would refuse the fit's writing, before minutes of decoding
        check_fit_size(len(sources), earlier, args.force, args.src if len(sources) < args.limit else None)
        if earlier is not None and earlier.n_best != n_best and not args.force:
            raise ValueError(f"the fit in the folder ({path.name}) was made on {earlier.n_best}-best lists, and one "
                             f"fit serves every beam width: a fit on {n_best}-best lists would replace it for all of "
                             f"them; give --n-best {earlier.n_best}, or --force to replace it")
        check_output(path)
        check_output(calibration.backup_of(path))
        check_output(calibration.refused_of(path))
        check_output(calibration.partial_of(path))
    predictor = Predictor.load(args.model, args.device, args.engine, args.dtype)
    weights = predictor.weights  # those loaded and decoded with (calibration.fit_collected)
    predictor.check_augment(args.augment)
    warn_task_mismatch(args.src, predictor.task)
    writings = f", {args.augment} writings" if args.augment > 1 else ""
    if args.judge:
        fitted, ece, n = calibration.judge(predictor, sources, targets or [], args.method, n_best, args.batch_size,
                                           augment=args.augment, time_limit_s=args.time_limit)
        print(f"calibration of {predictor.path} for {kind} answers{writings} "
              f"(fitted with {fitted.method}, {fitted.n_best}-best; its own expected calibration error "
              f"{fitted.ece:.4f}), judged on {fit_counts(n, fitted.n_check)} decoded by {args.method}, "
              f"{n_best}-best, {predictor.dtype} on the {predictor.engine} engine: expected calibration error "
              f"{ece:.4f}")
        return 0
    try:
        answers = calibration.collect(predictor, sources, targets or [], args.method, n_best, args.batch_size,
                                      augment=args.augment, time_limit_s=args.time_limit)
    except BaseException as stop:  # Ctrl-C, SIGTERM, out of memory: the queries decoded keep their fit
        keep_partial_fit(getattr(stop, "collected", None), weights, sources, targets or [], args, n_best, path)
        raise  # the boundary's line and exit code follow
    with stops_deferred("once the fit is written"):  # every query is decoded: a stop now would lose them all
        write_fit(args, predictor, calibration.refit_collected(weights, sources, targets or [], answers,
                                                               args.method, n_best, args.augment, earlier),
                  earlier, path, writings)
    return 0


def write_fit(args: argparse.Namespace, predictor: Predictor, refitted: tuple[Calibration, float | None],
              earlier: Calibration | None, path: Path, writings: str) -> None:
    """calibrate's new fit (and `earlier`'s error on its check answers: calibration.refit_collected) told, and
    written to `path` unless it rests on too few queries or judges worse than `earlier`, unforced (then kept beside
    it: calibration.keep_refused)."""
    from . import calibration

    fitted, earlier_ece = refitted
    n_best = fitted.n_best
    fitted = dataclasses.replace(fitted, src=os.path.abspath(args.src), tgt=os.path.abspath(args.tgt),
                                 limit=args.limit)  # what --judge asks for again
    worse = earlier is not None and earlier_ece is not None and fitted.ece > earlier_ece and not args.force
    too_few = None if args.force else answered_fit_problem(fitted, earlier)  # check_fit_size counted those asked for
    # written (or kept beside the fit file) before a word is printed: printed first, the fit was lost where the screen
    # could not take it (calibrate ... | head, whose reader had gone: a broken pipe)
    replaced = path.is_file()  # a fit for these weights or not: save keeps it either way
    if worse or too_few:  # the decoding is not thrown away: renamed, it is the fit
        kept = calibration.keep_refused(fitted, path)
    else:
        saved = calibration.save(fitted, predictor.path)
    print(f"calibration of {predictor.path} ({args.method}, {n_best}-best{writings}): "
          f"fitted on {fit_counts(fitted.fitted_on, fitted.n_fit)}, judged on "
          f"{fit_counts(fitted.judged_on, fitted.n_check)}; expected calibration error {fitted.ece:.4f} (raw "
          f"probability {fitted.ece_raw:.4f})")
    if earlier is not None:
        print(f"the fit in the folder (fitted on {earlier.fitted_on} queries, judged on {earlier.judged_on} with "
              f"error {earlier.ece:.4f}) judged on the same {queries(fitted.judged_on)}: error {earlier_ece:.4f}")
    if worse:
        raise ValueError(f"the new fit judges worse than the fit in the folder on its own check queries "
                         f"({fitted.ece:.4f} against {earlier_ece:.4f}), so {path} is kept and the new fit is "
                         f"written to {kept}: rename it to {path.name} to use it anyway (the earlier fit may have "
                         "been fitted on some of these queries, which favours it)")
    if too_few:
        raise ValueError(f"{too_few}, so {path} is not written and the new fit is written to {kept}: rename it to "
                         f"{path.name} to use it anyway, or give more queries (--limit), or --force")
    print(f"-> {saved}" + (f" (the file it replaces is kept as {calibration.backup_of(saved)})" if replaced else ""))
    if fitted.fitted_on < MIN_FIT_QUERIES:  # written with --force
        log.warning("the fit rests on %s: its confidences are coarse steps (the default --limit, %d, fits on %s)",
                    queries(fitted.fitted_on), CALIBRATE_LIMIT, f"{calibration.check_share(CALIBRATE_LIMIT):,}")


def queries(n: int) -> str:
    """'1 query', 'N queries'."""
    return counted(n, "query", "queries")


def fit_counts(answered: int, of: int) -> str:
    """queries(answered), and how many of the `of` queries of its share gave no answer to count, where any did not."""
    return queries(answered) + (
        f" ({of - answered} of {of} gave no answer to count: refused, a target RDKit cannot read, or no valid answer)"
        if answered < of else "")


def answered_fit_problem(fitted: Calibration, earlier: Calibration | None) -> str | None:
    """Why a new fit rests on too few queries, counted by those whose answers fitted it (calibration.answered), as
    check_fit_size counts, before decoding, those asked for; or None. Queries refused, with targets RDKit cannot
    read or no valid answer fit nothing: 150 queries of which 60 timed out passed that check and fitted on 40."""
    why = []
    if fitted.fitted_on < MIN_FIT_QUERIES:
        why.append(f"below {MIN_FIT_QUERIES} its confidences are a few coarse steps")
    # a fit from before the count (the shipped ones) counts its fitting queries, answered or not: so this one is counted
    like_earlier = fitted.n_fit if earlier is not None and earlier.n_fit_answered is None else fitted.fitted_on
    if earlier is not None and like_earlier < earlier.fitted_on:
        why.append(f"the fit it would replace rests on {earlier.fitted_on}")
    return (f"the answers of {fitted.fitted_on} of the {fitted.n_fit} fitting queries fitted the calibration: "
            + "; ".join(why)) if why else None


def check_validation_split(src: str) -> None:
    """Refuse a fit on the test or train split of a prepare-data folder (one with a stats.json naming its task:
    evaluate.prepared_task), or on a test set of the USPTO data read in place (data.MIT_TEST, data.GLN_TEST): its
    confidences would flatter every later test of them on those queries, or, on queries the model learned, run too
    high; the folder's val split is the one to fit on."""
    from .evaluate import prepared_task

    resolved = Path(os.path.realpath(src)).as_posix()  # the file a link leads to: a link of another name was fitted on
    split = Path(resolved).name.partition(".")[0]
    if split in ("test", "train") and prepared_task(resolved) is not None:
        folder = Path(resolved).parent
        raise ValueError(f"{src} is the {split} split of the prepare-data folder {folder}: a fit belongs on validation "
                         f"queries, which the model neither learned nor is tested on; give --src {folder / 'val.src'} "
                         f"--tgt {folder / 'val.tgt'}")
    # the USPTO data's own test files (data.py's, which the model cards test on), where a user reads them in place:
    # a fit on them was made without a word
    test = next((name for name in (*MIT_TEST, *GLN_TEST) if resolved.endswith(f"/{name}")), None)
    if test is not None:
        root = Path(resolved[:-len(test) - 1])
        valid = (f"give --src {root / MIT_VALID[0]} --tgt {root / MIT_VALID[1]}" if test in MIT_TEST else
                 "give the val.src and val.tgt of a prepare-data --task retro folder")
        raise ValueError(f"{src} is a test set of the USPTO data ({test}), which the model cards test on: a fit "
                         f"belongs on validation queries, which the model neither learned nor is tested on; {valid}")


def keep_partial_fit(collected: list | None, weights: str, sources: list[str], targets: list[str],
                     args: argparse.Namespace, n_best: int, path: Path) -> None:
    """Where calibrate was stopped after decoding some queries (calibration.collect's `collected`), write the fit of
    those, as --limit with their number makes it, beside the fit file (calibration.partial_of: not in use, for a stop
    asks for no fit), and say where and how to take it: a Ctrl-C an hour into a run lost every query decoded."""
    from . import calibration

    if not collected:  # stopped before a window was decoded, or by no part of the decoding
        return
    n = len(collected)
    try:
        fitted = calibration.fit_collected(weights, sources, targets, collected, args.method, n_best, args.augment)
    except ValueError as exc:  # too few queries, or none of them gave a right answer
        log.warning("stopped after %s, which %s no fit (%s): nothing is written",
                    part_of(n, len(sources), "query", "queries"), "gives" if n == 1 else "give", exc)
        return
    fitted = dataclasses.replace(fitted, src=os.path.abspath(args.src), tgt=os.path.abspath(args.tgt), limit=n)
    try:
        kept = calibration.keep_partial(fitted, path)
    except OSError as exc:  # a full disk: the stop's own line follows
        log.warning("stopped after %s; their fit could not be written: %s",
                    part_of(n, len(sources), "query", "queries"), exc)
        return
    coarse = f" (below {MIN_FIT_QUERIES}: coarse steps)" if fitted.fitted_on < MIN_FIT_QUERIES else ""
    log.warning("stopped after %s: their fit, as --limit %d makes it (fitted on %s%s, judged on %s, "
                "expected calibration error %.4f), is written to %s and not used; rename it to %s to use it",
                part_of(n, len(sources), "query", "queries"), n, f"{fitted.fitted_on:,}", coarse,
                f"{fitted.judged_on:,}", fitted.ece, kept, path.name)


def check_fit_size(n_queries: int, earlier: Calibration | None, force: bool, ran_out: str | None = None) -> None:
    """Refuse, unless forced, before any decoding, a fit on fewer than MIN_FIT_QUERIES fitting queries (of n_queries,
    calibration.check_share fit it), or on fewer than the `earlier` fit it would replace rests on: judged on a few
    dozen check queries, a fit on 100 queries came out better than the shipped one on 1,333 by chance alone.
    `ran_out`: the queries' file, where it holds no more than n_queries (a higher --limit would not help)."""
    from .calibration import check_share

    n_fit = check_share(n_queries)
    wanted = max(MIN_FIT_QUERIES, earlier.fitted_on if earlier is not None else 0)
    if n_fit >= wanted or force:
        return
    needed = next(n for n in itertools.count(n_queries) if check_share(n) >= wanted)
    why = []
    if n_fit < MIN_FIT_QUERIES:
        why.append(f"below {MIN_FIT_QUERIES} its confidences are a few coarse steps, and every answer would get one")
    if earlier is not None and n_fit < earlier.fitted_on:
        why.append(f"the fit it would replace rests on {earlier.fitted_on}")
    more = (f"{ran_out} holds no more: give a file of at least {needed} validation queries" if ran_out else
            f"give at least {needed} queries (--limit, default {CALIBRATE_LIMIT})")
    raise ValueError(f"{n_queries} validation queries would fit the calibration on {n_fit} (the rest judge it): "
                     f"{'; '.join(why)}; {more}, or --force to fit on these")


def bench_methods(text: str) -> list[str]:
    """--methods' names, each one of ours: a CTranslate2 peer's name is refused, naming the flag that times it."""
    from .methods import PEERS

    methods = [m.strip() for m in text.split(",") if m.strip()]
    if not methods:
        raise ValueError(f"--methods names no method; choose from {', '.join(METHODS)}")
    peers = [m for m in methods if m in PEERS]
    if peers:  # --peer adds the peers of the families asked for (peer_methods)
        raise ValueError(f"{peers[0]} is CTranslate2's, timed with --peer ctranslate2, which adds "
                         f"{' and '.join(peer_methods(['greedy']))} beside greedy-family methods, "
                         f"{' and '.join(peer_methods(['beam']))} beside beam-family ones: leave {peers[0]} out of "
                         "--methods and give --peer ctranslate2")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    return methods


def peer_methods(methods: list[str]) -> list[str]:
    """The CTranslate2 methods that match the families asked for (greedy and/or beam search)."""
    from .bench import beam_like
    from .methods import PEERS

    families = {beam_like(m) for m in methods}
    return [peer.name for peer in PEERS.values() if peer.beam in families]


PEER_PACKAGE_MISSING = "--peer ctranslate2 needs the ctranslate2 package (pip install -e .[peers])"


def convert_peer(model_dir: Path, out: Path) -> Path:
    try:
        from .peers import convert_to_ctranslate2
        return convert_to_ctranslate2(model_dir, out)
    except ImportError as exc:
        raise ValueError(f"{PEER_PACKAGE_MISSING}: {exc}") from exc


def check_bench_knobs(methods: list[str], width: tuple[str, int], draft_len: int | None, n_drafts: int | None,
                      sampling: SamplingOptions) -> None:
    """Refuse a setting that none of the bench's methods reads, as check_draft_knobs refuses one for predict's
    method: a beam width (`width`: the flag that gave it, and its value) without a beam-like method, whose others
    give one answer a query, and a draft or sampling knob (methods.unread_knobs)."""
    from .bench import beam_like

    flag, value = width
    if value > 1 and not any(beam_like(m) for m in methods):
        wide = ", ".join(name for name in METHODS if beam_like(name))
        raise ValueError(f"{flag} {value} sets the beam width of {wide}, and --methods names none of them: its "
                         "methods give one answer a query")
    for knob in unread_knobs(methods[0], draft_len, n_drafts, sampling):
        if all(knob in unread_knobs(m, draft_len, n_drafts, sampling) for m in methods):
            raise ValueError(f"none of --methods ({', '.join(methods)}) reads --{knob.replace('_', '-')}; the methods "
                             f"that do: {readers_of(knob)}")


def sweep_grid(text: str, methods: list[str], sampling) -> tuple[str, list[float]]:
    """(the lossy method, its knob's values) from --sweep KNOB=V1,V2,..., each value checked."""
    from .bench import SWEEPS
    from .service import check_sampling

    knob, _, values = text.partition("=")
    lossy = [m for m in methods if m in SWEEPS]
    if len(lossy) != 1 or SWEEPS[lossy[0]] != knob.strip():
        raise ValueError(f"--sweep needs one of {', '.join(f'{m} ({k})' for m, k in SWEEPS.items())} in --methods "
                         "and its knob, e.g. --methods relaxed --sweep tau=0,1,2")
    try:
        grid = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--sweep values must be numbers: {values!r}") from None
    if not grid:
        raise ValueError(f"--sweep {text!r} has no values; e.g. {knob.strip()}=0,0.5,1")
    given = getattr(sampling, knob.strip())
    if given != getattr(SamplingOptions(), knob.strip()):  # each point sets it: the flag would be ignored
        raise ValueError(f"--{knob.strip()} {given:g} and --sweep {text}: the sweep sets {knob.strip()} at each of its "
                         "values; give one of the two")
    for value in grid:  # a NaN or negative tau would fail only once the run reached it
        check_sampling(dataclasses.replace(sampling, **{knob.strip(): value}))
    return lossy[0], grid


# Why, with the measurement: peer_worker.py and the README's "Measured speed".
PEER_THREADS_WARNING = (
    "OMP_WAIT_POLICY=active with several threads beside the CTranslate2 peer: our idle OpenMP threads "
    "would spin on the cores while the peer's process decodes. The peer runs in a process of its own with "
    "its own policy; leave OMP_WAIT_POLICY unset for this run.")


def engine_names(text: str) -> list[str]:
    """The engines of --engines (comma-separated; bench's, and tools/gpu_kit.py speed's), refused before any load
    where one is unknown or named twice (its rows ran once: the second load replaced the first)."""
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in ENGINES]
    if unknown:
        raise ValueError(f"unknown engines {unknown}; choose from {', '.join(ENGINES)}")
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice:
        raise ValueError(f"--engines names {twice} twice: name each engine once")
    return names


def check_other_engine(name: str, runs_on: str, main_name: str, main_runs_on: str,
                       loaded: dict[str, Predictor], main: str = "--engine") -> None:
    """Refuse an engine of --engines (`name`, whose decoder calls run on `runs_on`) that runs them on the engine
    --engine's do (`main_name`, `main_runs_on`; `main` names them where no --engine flag does: tools/gpu_kit.py) or
    another of --engines' (`loaded`, itself among them): its rows timed an engine beside itself as a speedup
    (--engines auto beside --engine auto, greedy@auto '1.15x' greedy)."""
    same = [f"{main} {main_name}"] if runs_on == main_runs_on else []
    same += [f"--engines' {other}" for other, each in loaded.items() if other != name and each.engine == runs_on]
    if same:
        raise ValueError(f"--engines {name} runs the decoder calls on the {runs_on} engine here, as {same[0]} does, so "
                         f"its rows would time an engine beside itself: give --engines engines other than {main}'s "
                         f"and each other's ({main} {main_name} runs on {main_runs_on})")


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import (CHART_PACKAGE_MISSING, can_chart, chart_of, markdown_table, on_engines, run_bench, run_sweep,
                        save_report)
    from .evaluate import queries_digest, read_pairs, software, unreadable_targets
    from .scale import stops_deferred
    from .service import Predictor

    # everything that can be refused is refused before the model loads and the run starts
    out = check_report_path(args.out, args.src, args.tgt, args.index, model=args.model) if args.out else None
    if out:
        if out.suffix.lower() == ".html":
            raise ValueError(f"--out {args.out}: the JSON report, whose chart is written beside it as .html; give the "
                             "report a name of its own, such as bench.json")
        if can_chart():  # without plotly none is written (below)
            check_report_path(str(chart_of(out)), args.src, args.tgt, args.index)  # the chart beside it
    if args.method is not None:  # it was ignored, and the default methods timed in its place
        raise ValueError(f"bench times the methods of --methods (comma-separated), not --method: give --methods "
                         f"{args.method}")
    methods = bench_methods(args.methods)
    if args.beam_width and args.n_best not in (1, args.beam_width):  # one of them was used, the other ignored
        raise ValueError(f"--beam-width {args.beam_width} and --n-best {args.n_best}: the bench's beam searches list "
                         "as many answers as their width; give one of the two")
    sampling = sampling_options(args)
    check_bench_knobs(methods, ("--beam-width", args.beam_width) if args.beam_width else ("--n-best", args.n_best),
                      args.draft_len, args.n_drafts, sampling)
    sweep = sweep_grid(args.sweep, methods, sampling) if args.sweep is not None else None  # "": refused, not none
    if args.peer and sweep:
        raise ValueError("--peer and --sweep do not go together: a sweep compares a method with itself")
    if args.peer_threads and not args.peer:  # no peer runs: the threads would be ignored
        raise ValueError("--peer-threads sets the threads of the CTranslate2 peer's process: give --peer ctranslate2 "
                         "too")
    other_engines = engine_names(args.engines)
    if other_engines and sweep:
        raise ValueError("--engines and --sweep do not go together: a sweep compares a method with itself")
    if args.peer and not installed("ctranslate2"):  # before the model loads (minutes on a CPU)
        raise ValueError(PEER_PACKAGE_MISSING)
    sources, targets = read_pairs(args.src, args.tgt, args.index, args.limit)
    warn_short_limit(args, len(sources), "times")
    # none readable: refused, as evaluate refuses it (every query a miss, whatever the model says); some: told
    unreadable = unreadable_targets(targets) if targets else 0
    if unreadable:
        log.warning("%s in top-k", unreadable_line(unreadable, len(sources), args.tgt))
    if out and not can_chart():  # said before the run, which may be long; the report and the table are written
        log.warning("--out %s: no chart will be written beside the report: %s", out, CHART_PACKAGE_MISSING)
    predictor = Predictor.load(args.model, args.device, args.engine, args.dtype)
    weights = predictor.weights  # those loaded and timed, as evaluate records them (cmd_evaluate)
    engines: dict[str, Predictor] = {}
    for name in other_engines:
        engines[name] = Predictor.load(args.model, args.device, name, args.dtype)
        check_other_engine(name, engines[name].engine, args.engine, predictor.engine, engines)
    methods = on_engines(methods, list(engines))
    if args.peer and torch.get_num_threads() > 1 and os.environ.get("OMP_WAIT_POLICY", "").lower() == "active":
        log.warning(PEER_THREADS_WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        ct2_dir = None
        if args.peer:
            methods = methods + peer_methods([m for m in methods if "@" not in m])
            ct2_dir = convert_peer(predictor.path, Path(tmp) / "ct2")
        if sweep:
            report = run_sweep(predictor, sources, targets, sweep[0], sweep[1], sampling, args.warmup,
                               batch_size=args.batch_size, draft_len=args.draft_len, n_drafts=args.n_drafts,
                               by_length=args.by_length)
        else:
            report = run_bench(predictor, sources, targets, methods, args.batch_size, args.beam_width or args.n_best,
                               args.draft_len, args.n_drafts, args.warmup, sampling=sampling, ct2_dir=ct2_dir,
                               peer_threads=args.peer_threads, engines=engines, by_length=args.by_length)
    with stops_deferred("once the report is written"):  # the run is measured: a stop now would lose it all
        # what made it, as an evaluate report records it: the files from any folder, the weights, the code, the queries
        report.update(src=os.path.abspath(args.src), tgt=args.tgt and os.path.abspath(args.tgt),
                      index=args.index and os.path.abspath(args.index), limit=args.limit,
                      queries_sha256=queries_digest(sources, targets or []),
                      weights=weights, **software())
        if out:  # first: shown first, the report was lost where the screen could not take the table (a broken pipe)
            keep_replaced(out)
            if can_chart():  # the chart it replaces, as the report: kept (without plotly it is left as it is)
                keep_replaced(chart_of(out))
            chart = save_report(report, out)
        print(markdown_table(report))
        if out:  # on stderr, as the warnings: standard output stays the markdown table
            earlier = f"; {chart_of(out)} is an earlier run's chart" if chart_of(out).exists() else ""
            print(f"-> {out} ({f'its chart: {chart}' if chart else f'no chart: {CHART_PACKAGE_MISSING}{earlier}'})",
                  file=sys.stderr)
    failed = {name: peer["failed"] for name, peer in report.get("peers", {}).items() if "failed" in peer}
    kept = "the table and the report hold" if out else "the table holds"
    for name, why in failed.items():  # the peer asked for is missing from the figures: not a success
        print(f"error: {why} ({name} is left out; {kept} the other methods' figures)", file=sys.stderr)
    if report.get("interrupted"):  # a pipeline must not take a part run for a whole one: exit as a stopped predict
        from .entry import INTERRUPTED

        print(f"error: the run {report['interrupted']}; {kept} the batches measured by then", file=sys.stderr)
        return 128 + signal.SIGTERM if report.get("stopped_by") == "Terminated" else INTERRUPTED
    return 2 if failed else 0


def column_refusal(file_option: str, path: str, column_option: str, missing: MissingColumn) -> InputFileError:
    """io's refusal of a file without the column (or SD data field) of its SMILES, which names neither the file nor
    the option that names a column ('the CSV needs a column named ...'): plan's --stock, predict's --input."""
    from .io import InputFileError

    how = "" if missing.column else f". {column_option} names the column to read"
    which = "" if Path(path).name in str(missing) else f"{file_option} {path}: "  # named once: 'r.sdf is MolSpec's'
    return InputFileError(f"{which}{missing}{how}")


def cmd_plan(args: argparse.Namespace) -> int:
    from .io import MissingColumn, OutputFileError, check_output
    from .planning import DEFAULT_STOCK, PlanSettings, check_time_limit, load_stock, plan
    from .scale import stops_deferred
    from .service import Predictor

    # the time limit, outputs and the stock first: a refused one costs no model load and no search
    check_time_limit(args.time_limit)
    if args.out == STDOUT:  # predict's way to standard output made files named '-' and '-.csv' here
        raise ValueError("--out -: plan writes its routes to a JSON file and its steps to a CSV beside it, and its "
                         "summary to the screen; give --out a file name, such as routes.json")
    if query_format(args.out) != (None, "txt"):  # --out routes.csv --csv steps.csv wrote JSON text into routes.csv
        raise ValueError(f"--out {args.out}: plan writes the routes there as JSON text, not compressed, and the steps "
                         "as CSV beside it (--csv); give --out a name such as routes.json")
    out = check_output(args.out, args.stock, "the stock")  # neither may replace the stock, nor a file of either model
    # beside --out, its suffix .csv, a name near the file system's limit cut to fit (io.fitted_name, as bench's chart):
    # --out <253 letters> was refused with 'File name too long' naming a CSV its user never named
    csv_given = args.csv or str(out.with_name(fitted_name(out.stem, ".csv")))
    if not csv_given.lower().endswith(".csv"):  # routes.xlsx was CSV text under a workbook's name
        raise ValueError(f"{csv_given}: plan writes its steps as CSV; give --csv a name ending in .csv")
    try:
        csv_out = check_output(csv_given, args.stock, "the stock")
    except OutputFileError as refused:  # a name never given: --stock r.csv --out r.json
        if args.csv:
            raise
        raise OutputFileError(f"{refused} (there plan writes its steps, beside --out {args.out}: --csv names another "
                              "place)") from None
    if csv_out == out:
        raise ValueError(f"the CSV would overwrite the JSON {args.out}: give --csv another name")
    for given, written in ((args.out, out), (csv_given, csv_out)):
        check_backup(given, written, args.stock)
    for model in (args.model, None if args.forward.lower() == "none" else args.forward):
        if model is not None:
            outside_model(args.out, out, model)
            outside_model(csv_given, csv_out, model)
    if args.round_trip_k is not None and args.forward.lower() == "none":  # a flag no step would carry
        raise ValueError("--round-trip-k sets the round-trip check of --forward's model: not with --forward none")
    if args.stock_column and not args.stock:  # the default stock is one SMILES per line
        raise ValueError("--stock-column names the SMILES column (or SD data field) of a --stock file: give --stock")
    try:
        stock = load_stock(args.stock or DEFAULT_STOCK, args.stock_column)
    except MissingColumn as missing:
        raise column_refusal("--stock", args.stock, "--stock-column", missing) from None
    predictor = Predictor.load(args.model, args.device, dtype=args.dtype)
    forward = None if args.forward.lower() == "none" else Predictor.load(args.forward, args.device, dtype=args.dtype)
    try:
        result = plan(args.smiles, predictor, stock, args.time_limit, args.algorithm, args.max_routes,
                      forward=forward, settings=PlanSettings(n_best=args.n_best, max_steps=args.max_steps,
                                                             check_atoms=not args.allow_missing_atoms,
                                                             augment=args.augment, round_trip_k=args.round_trip_k or 1))
    except BaseException as stop:  # Ctrl-C, SIGTERM, a failure: the routes found by then are written and shown
        partial = getattr(stop, "partial_result", None)
        if partial is not None:
            report_plan(partial, out, csv_out, args.allow_missing_atoms)
        raise  # the boundary's line and exit code follow
    with stops_deferred("once the routes are written"):  # the search is done: a stop now would lose its routes
        report_plan(result, out, csv_out, args.allow_missing_atoms)
    return 0


def report_plan(result: PlanResult, out: Path, csv_out: Path, allow_missing_atoms: bool) -> None:
    """A plan's routes to its JSON and CSV, the files they replace kept (keep_replaced: a stopped search's routes
    replaced a whole one's), and its summary on the screen (a stopped search's too)."""
    from .io import write_csv
    from .planning import (ROUTE_COLUMNS, failure_note, no_route, route_rows, route_stereo, routes_json,
                           starting_materials_text, stock_name)

    text, rows = json.dumps(routes_json(result), indent=2), list(route_rows(result))
    keep_replaced(out)
    write_text_file(out, text)
    keep_replaced(csv_out)
    write_csv(csv_out, ROUTE_COLUMNS, rows)
    stats, counts = result.stats, result.stats.counts
    in_stock = " (itself in the stock)" if stats.target_in_stock else ""
    n_unreadable = result.stock_unreadable  # the Routes page's words, and which entry, as it names it
    left_out = (f", {counted(n_unreadable, 'unreadable entry', 'unreadable entries')} left out"
                f"{'; the first: ' if n_unreadable > 1 else ': '}{result.stock_first_unreadable}"
                if n_unreadable else "")
    # the column read, as the Routes page names it; --stock - as predict names its --input -
    stock = stock_name(input_name(result.stock), result.stock_read_from)
    molecules = counted(result.stock_size, "molecule")
    print(f"target: {result.target}{in_stock}; stock: {stock} ({molecules}{left_out})")
    for note in result.target_notes:
        print(f"note: {note}")
    expanded = f"{counted(counts.molecules, 'molecule')} expanded"
    calls = counted(counts.decoder_calls, "decoder call")
    # the Routes page's words: an answer lacking atoms of its product is flagged, not sane (b1ca962); a search
    # stopped before its first answers had none to count
    used = (f", {counts.kept:,} of {counted(counts.answers, 'proposed reactant set')} used "
            f"({counts.missing_atoms} lacked atoms of their product: "
            f"{'used, --allow-missing-atoms' if allow_missing_atoms else 'skipped'})" if counts.answers else "")
    nodes = counted(stats.nodes, "search node")
    print(f"{stats.algorithm}, {stats.time_s:.1f} s: {expanded} ({calls}){used}, {nodes}")
    if stats.stopped_by:  # no_route says it of a search stopped before its first route
        print(f"the search was stopped ({stats.stopped_by}) {stats.search_s:.1f} s into its {stats.time_limit_s:g} s"
              + ("; the routes it had found are kept" if result.routes else ""))
    if counts.failed:  # not expanded: the model gave no answers for them, or the search's end cut one short
        text, alarming = failure_note(counts)
        print(f"{'warning' if alarming else 'note'}: {text}")
    if not result.routes:  # the Routes page's words for a target in the stock: no route is needed to have it
        procure = "the target itself is in the stock: procure it as it is; " if stats.target_in_stock else ""
        print(f"{procure}{no_route(stats)}")
    if result.routes and len(result.routes) == result.max_routes:  # as many as it keeps: '10 routes' read as all
        shown = "this is the best route" if result.max_routes == 1 else f"these are the best {result.max_routes:,}"
        print(f"{shown}, as many as --max-routes {result.max_routes} keeps: the search may have found more")
    for rank, route in enumerate(result.routes, start=1):
        starting = starting_materials_text(route)  # 'O=Cc1ccccc1 (used twice)': route 7 read as route 1
        steps = counted(route.n_steps, "step")
        print(f"route {rank}: {steps}, probability {math.exp(route.score):.3g} (score {route.score:.2f}); from "
              f"{starting}")
        for line in route_stereo(route):  # planning.stereo_flags: a centre set or inverted, a double bond's geometry
            # set or isomerized: a chemist checks it
            print(f"  stereo: {line}")
        for line in failed_round_trips(route, result.settings.round_trip_k):
            print(f"  round trip: {line}")
        for line in lacking_steps(route):
            print(f"  lacks atoms: {line}")
    print(f"-> {out}, {csv_out}")


def failed_round_trips(route: Route, top_k: int) -> list[str]:
    """The steps of `route` whose product the forward model did not give back from their reactants, a line each,
    numbered as planning.route_stereo numbers them: only the CSV and JSON said so, and such a route's summary read as
    sound as the rest."""
    within = "as its first answer" if top_k == 1 else f"within its top {top_k}"
    return [f"step {number} ({step.product}) fails: the forward model does not give it back from "
            f"{'.'.join(reactant.smiles for reactant in step.reactants)} {within}"
            + ("" if step.forward_prob is None else f" (its probability {step.forward_prob:.3g})")
            for number, (_, step) in enumerate(route.steps(), start=1) if step.round_trip is False]


def lacking_steps(route: Route) -> list[str]:
    """The steps of `route` whose reactants lack atoms of their product (kept by --allow-missing-atoms), a line each,
    numbered as failed_round_trips numbers them: the JSON and CSV said so, and the summary showed them as sound."""
    from .planning import lacks_text

    return [f"step {number} ({step.product}): its reactant set {lacks_text(step)}, so as written it cannot make it"
            for number, (_, step) in enumerate(route.steps(), start=1) if step.missing]


def cmd_prepare(args: argparse.Namespace) -> int:
    from .data import DEFAULT_DATA, prepare
    from .tokenizer import Vocab

    if args.vocab and not Path(args.vocab).exists():  # said only 'No such file or directory: nothere.json'
        raise ValueError(f"--vocab {args.vocab}: does not exist (a model's vocab.json, e.g. models/forward/vocab.json)")
    vocab = Vocab.load(Path(args.vocab)) if args.vocab else None
    stats = prepare(args.task, Path(args.data) if args.data else DEFAULT_DATA, Path(args.out), args.n_val,
                    args.workers, args.augment, vocab, args.rooted, args.val_rest, args.rows_before)
    print(json.dumps(stats, indent=2))
    return 0


def cmd_average(args: argparse.Namespace) -> int:
    from .checkpoint import average
    from .service import model_folder

    from .train import refuse_run_folder

    folders = [model_folder(name) for name in args.models]  # a shipped model by its name too, as --model elsewhere
    for folder in folders:
        refuse_run_folder("--model", folder)
    config = average(folders, args.out, torch.float16 if args.float16 else torch.float32)
    print(f"wrote the mean of {len(args.models)} models ({config.get('task', 'task unknown')}) to {args.out}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .server import check_can_listen, run, serve
    from .service import Predictor

    if args.port > 65535:
        raise ValueError(f"--port {args.port}: a port is at most 65535")

    @contextlib.contextmanager
    def listening() -> Iterator[None]:
        try:
            yield
        except OSError as exc:  # a port in use, a host name that does not resolve: the message named neither
            raise OSError(exc.errno, f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None

    names = args.model or ["forward", "retro"]
    check_model_names(names)
    with listening():  # before the models' load (minutes on a CPU), not after it
        check_can_listen(args.host, args.port)
    models = [Predictor.load(name, args.device, args.engine, args.dtype) for name in names]
    with listening():
        server = serve(models, args.host, args.port)
    host, port = server.server_address[:2]
    if not server.loopback:
        log.warning("listening on %s, beyond this machine, without authentication", host)
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    print(f"serving {', '.join(server.service.models)} on http://{shown}:{port} (POST /predict, GET /models); "
          "Ctrl-C stops", flush=True)
    run(server)  # until Ctrl-C or SIGTERM; the requests in hand are answered first
    return 0


def check_model_names(names: list[str]) -> None:
    """Refuse, before any loads, two --model of one folder name (runs/a/export and runs/b/export): a request names a
    model by it, and server.serve refused them only once every model had loaded."""
    from .service import model_folder

    seen: dict[str, str] = {}
    for name in names:
        folder = model_folder(name).absolute().name  # as Predictor.path names it
        if folder in seen and os.path.realpath(model_folder(seen[folder])) == os.path.realpath(model_folder(name)):
            raise ValueError(f"--model {name} is given twice (as --model {seen[folder]} too): give each model once")
        if folder in seen:
            raise ValueError(f"--model {seen[folder]} and --model {name} are both named {folder}, and a request names "
                             "a model by its folder's name: give folders of different names")
        seen[folder] = name


def cmd_train(args: argparse.Namespace) -> int:
    from .train import run

    return run(args)


COMMANDS = {"predict": cmd_predict, "evaluate": cmd_evaluate, "compare": cmd_compare, "calibrate": cmd_calibrate,
            "bench": cmd_bench, "plan": cmd_plan, "prepare-data": cmd_prepare, "average": cmd_average,
            "serve": cmd_serve, "train": cmd_train}


def main(argv: list[str] | None = None) -> int:
    """Every command behind the one boundary (boundary.guarded): an expected failure is an `error:` line and exit
    2, Ctrl-C exit 130, SIGTERM exit 143."""
    args = build_parser().parse_args(argv)
    # A server's log (each request, each failure) is read afterwards, by when: its lines carry the time, to the second
    # with the zone; a command's own lines, read as it runs, do not
    stamped = args.command == "serve"
    logging.basicConfig(level=logging.INFO, format=("%(asctime)s " if stamped else "") + "%(levelname)s %(name)s: "
                        "%(message)s", datefmt="%Y-%m-%dT%H:%M:%S%z")
    use_threads(getattr(args, "threads", 0))  # before any model loads
    return guarded(lambda: COMMANDS[args.command](args),
                   "try a smaller --batch-size or --n-best, or fewer queries")
