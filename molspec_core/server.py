"""`molspec serve`: the service over HTTP, for programs in other processes and languages.

A tree search (CASP) or a lab system asks one long-lived process that holds the models, instead of
loading them for every call: `POST /predict` with a JSON body, the answers as JSON. The standard
library's threading HTTP server, no framework: the API is three routes.

    GET  /health    {"status": "ok"}
    GET  /models    the loaded models: name, task, device, engine, dtype, whether they read several writings
    POST /predict   {"smiles": "CC(=O)Cl.NCc1ccccc1" or a list, "model": "forward", "method": "beam",
                     "n_best": 5, ...}  ->  {"results": [one per query, in order]}

A request's options are `Predictor.predict`'s keyword arguments (`OPTIONS`, with the same defaults as
`molspec predict`: greedy, one answer, one writing), the sampling knobs (`SAMPLING_KEYS`) and
`round_trip`, the name of a loaded forward model that checks retrosynthesis answers (as `predict
--round-trip`). A query the model cannot read gets its `error` in its own result and the others are
answered; a request that cannot be answered at all (not JSON, an unknown option, a wrong type, a bad
value) gets status 400 and `{"error": "..."}`.

Safety: it listens on loopback unless told otherwise and has no authentication, so bind it elsewhere only
on a network you trust. On loopback it answers only requests addressed to a loopback name (a web page
cannot reach it through DNS rebinding), and it takes only `Content-Type: application/json` (which a web
page cannot send across origins without a preflight this server never grants). Bodies, queries per
request, open connections (MAX_CONNECTIONS; past it a probe of /health is still answered), the time to send a
whole request (READ_TIMEOUT_S) and the time a request decodes are bounded (MAX_REQUEST_S: the queries not begun
by then come back with an error, the others with their answers); a query stops at its time limit. A body is
framed by one Content-Length or comes in chunks (Transfer-Encoding: chunked), never both, and a connection whose
request left a body unread closes after its answer (none is read as the next request).
"""
from __future__ import annotations

import codecs
import contextlib
import dataclasses
import email.utils
import inspect
import io
import ipaddress
import json
import logging
import math
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import SplitResult, urlsplit

from .boundary import OUT_OF_MEMORY
from .chem import rdkit_quietly, stereo_notes
from .io import QueryFile
from .known import known_rank, with_recorded
from .limits import Abandoned, abandon_when, check_abandoned
from .methods import METHODS, SamplingOptions, readers_of, unread_knobs
from .roundtrip import check_round_trip
from .service import (DEFAULT_BATCH_SIZE, DEFAULT_TIME_LIMIT_S, MAX_QUERY_CHARS, PartlyDecoded, Prediction,
                      Predictor, QueryResult, several_products_note, windows)

log = logging.getLogger(__name__)

MAX_QUERIES = 1_000  # per request: retro beam 10, one writing, one CPU thread, about 4 minutes (README, Measured speed)
MAX_BODY_BYTES = 2 * MAX_QUERIES * MAX_QUERY_CHARS  # room for that many of the longest queries, JSON escapes and all
MAX_REQUEST_S = 600.0  # one request holds the models no longer (a query decodes for at most its time_limit_s more)
MAX_BATCH_SIZE = 256  # a window of batches (service.window_size) stays a small part of a full request
# A connection's whole next request (its request line, headers and body) arrives within this from its first byte,
# or its reading is stopped: a client dripping a byte at a time holds a thread no longer; a connection silent this
# long before a request begins is closed.
READ_TIMEOUT_S = 30.0
# An answer leaves in parts of this size, each within READ_TIMEOUT_S, and at this rate in all (or within
# READ_TIMEOUT_S, whichever is longer): a live client on a slow link reads a large answer whole (20 MB in 5 minutes);
# one that stops reading, or reads a trickle, is cut.
WRITE_PART_BYTES = 64 * 1024
WRITE_MIN_RATE = 64 * 1024  # bytes a second
MAX_CONNECTIONS = 64  # open at once, each a thread; one more is answered 503 and closed
MAX_REFUSING = 16  # connections past MAX_CONNECTIONS whose 503 waits, on a thread, for their request to be read
MAX_REFUSED_HEAD = 8192  # bytes of such a request read to see whether it is a probe of /health (Server._refuse)
LINGER_S = 2.0  # after a body refused unread, how long its rest is read and dropped (the client reads the answer)
LINGER_BYTES = 2 * MAX_BODY_BYTES
# A client that has stopped sending is sent a 100 Continue at most this often while its request decodes; one that
# has closed answers it with a reset, awaited this long (loopback and a LAN: well within it; a slower one is seen
# at the next look, a decoder step later).
PROBE_EVERY_S = 5.0
PROBE_WAIT_S = 0.05
# Once the server is stopping, the window of queries decoding has this long to end before it is stopped where it is
# (its batches not yet decoded lost); a service manager waits longer before it kills the process (Kubernetes 30 s,
# systemd 90 s).
STOP_GRACE_S = 10.0
STOPPING = "the server is stopping; send the request again once it is back"
CLIENT_GONE = "the client has gone"  # why a request's decoding was abandoned (Service.predict)
# A request that ran out (503). A decoder call holds n_best rows for each query of its batch, or, read in several
# writings, for each writing of one query; each row's self-attention cache is 2 x decoder layers x d_model float32
# values a slot, its slots twice the query's tokens and 50 more (decoding.batch.target_budget; at most the model's
# positions). No cap on rows is set before decoding: what a request may hold depends on its queries' lengths, which
# are read only as its window begins, and on the host. The README's limits (n_best 50 x augment 20, 1,000 rows; batch
# 256 x n_best 50) fit a USPTO query on a large host (1,000 rows of a 150-token product's retro cache, some 4 GB)
# and not a 30-residue peptide (9 GB asked in one allocation, session 93); the app asks 50 rows at most (n_best 10,
# 5 writings). So the server decodes, and a request that runs out is told which settings hold the rows.
OUT_OF_MEMORY_ADVICE = ("out of memory; send fewer queries, or a smaller n_best, augment or batch_size (a decoder call "
                        "holds n_best rows for each query of its batch, or for each writing of one query)")
# a client's text in the log, its control characters (C0, DEL, C1) written as \xNN: a terminal does not act on them
CONTROL_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))}
LOOPBACK_NAMES = ("localhost",)  # and every loopback address (is_loopback)
# A request on loopback addressed to another host (DNS rebinding's, or a reverse proxy's passing its client's Host on:
# Caddy's and Traefik's default), in JSON; `host` is the name refused, quoted
NOT_LOOPBACK = ("this server listens on loopback and answers requests addressed to localhost or a loopback address "
                "only, not to {host} (a web page could reach it so, by DNS rebinding); a reverse proxy in front of it "
                "must send Host: localhost (nginx sends the host its proxy_pass names: http://127.0.0.1:8000 does, an "
                "upstream block's name does not, nor does proxy_set_header Host $host; Caddy and Traefik pass the "
                "client's Host on unless told not to)")
DIGITS = re.compile(r"[0-9]{1,20}")
HEX_DIGITS = re.compile(rb"[0-9A-Fa-f]{1,16}")  # a chunk's size
MAX_REQUEST_LINE = 65536  # bytes, as the standard library reads a request line (longer: 414)
MAX_CHUNK_LINE = 4096  # bytes in a chunk's size line (with its extensions) or a trailer field
MAX_TRAILER_LINES = 100
MAX_DIGITS = 100  # in a JSON whole number (a seed takes 19); Python reads no more than 4,300
# each path and the methods it takes (the Allow header)
ROUTES = {"/health": "GET, HEAD", "/models": "GET, HEAD", "/predict": "POST"}
HEALTHY = {"status": "ok"}  # GET /health's answer
# The Server header: the standard library's "BaseHTTP/0.6 Python/3.11.7" told every client (with --host, the
# network's) which Python release, and so which of its published flaws, answered it.
SERVER_NAME = "molspec"
# Every answer's body is JSON, and a browser must not sniff it for another type (HTML a page could run)
JSON_HEADERS = {"Content-Type": "application/json", "X-Content-Type-Options": "nosniff"}

# Predictor.predict's options, by the JSON types a request may give them in (bool is not taken for a number).
OPTIONS: dict[str, tuple[type, ...]] = {"method": (str,), "n_best": (int,), "draft_len": (int,), "n_drafts": (int,),
                                        "batch_size": (int,), "augment": (int,), "ion_writing": (bool,),
                                        "time_limit_s": (int, float)}
SAMPLING_KEYS = tuple(f.name for f in dataclasses.fields(SamplingOptions) if f.name != "draft_len")  # draft_len above
# Predictor.predict's defaults of the options Predictor.check_predict checks, for those a request leaves out
PREDICT_DEFAULTS = {name: inspect.signature(Predictor.predict).parameters[name].default
                    for name in inspect.signature(Predictor.check_predict).parameters if name != "self"}
DEFAULT_METHOD = PREDICT_DEFAULTS["method"]  # a request that names none
REQUEST_KEYS = ("smiles", "model", "round_trip", "round_trip_k", *OPTIONS, *SAMPLING_KEYS)


class ClientGone(Exception):
    """The client closed its connection while its request waited or decoded: no one is left to answer."""


class RequestError(ValueError):
    """A request that cannot be answered; `status` is the HTTP status it gets."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class Request:
    predictor: Predictor
    smiles: list[str]
    options: dict  # Predictor.predict's keyword arguments
    round_trip: Predictor | None = None  # the forward model that checks the answers
    round_trip_k: int = 1


def _typed(body: Mapping, key: str, types: tuple[type, ...]) -> object:
    value = body[key]
    if isinstance(value, bool) != (bool in types) or not isinstance(value, types):
        # a number: a whole one or not ('must be a whole number or a number' said it twice)
        names = "a number" if float in types else " or ".join(
            {"str": "a string", "int": "a whole number", "bool": "true or false"}[t.__name__] for t in types)
        raise RequestError(f"{key!r} must be {names}, not {_shown(value)}")
    return value


def _shown(value: object) -> str:
    """A value of the body as a refusal quotes it: its JSON, cut at 40 characters."""
    try:
        return json.dumps(value)[:40]
    except RecursionError:  # nested nearly as deep as the body's parser reads: writing it back recurses deeper
        return "a value nested too deeply"


def parse_request(body: object, models: Mapping[str, Predictor]) -> Request:
    """A /predict body checked against the loaded models (by name); RequestError says what is wrong."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object, such as {\"smiles\": \"CCO\"}")
    unknown = sorted(set(body) - set(REQUEST_KEYS))
    if unknown:
        raise RequestError(f"unknown option {unknown[0][:40]!r}; the options are {', '.join(REQUEST_KEYS)}")
    if "smiles" not in body:
        raise RequestError("'smiles' is missing: give a SMILES or a list of them")
    smiles = body["smiles"] if isinstance(body["smiles"], list) else [body["smiles"]]
    if not smiles:
        raise RequestError("'smiles' must be a SMILES string or a non-empty list of them")
    other = next((n for n, s in enumerate(smiles, start=1) if not isinstance(s, str)), None)
    if other is not None:  # which one: a list of 1,000 left the client to search it
        raise RequestError(f"'smiles' must be a SMILES string or a non-empty list of them: item {other:,} is "
                           f"{_shown(smiles[other - 1])}")
    if len(smiles) > MAX_QUERIES:
        raise RequestError(f"{len(smiles)} queries in one request; at most {MAX_QUERIES}: send them in parts, "
                           "or use `molspec predict --input` for a file", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    predictor = _model(body, "model", models, None)
    if "time_limit_s" in body and body["time_limit_s"] is None:  # JSON's null for Python's None, which is no limit
        raise RequestError(f"'time_limit_s' must be a number of seconds, above 0 and at most {MAX_REQUEST_S:g} (null, "
                           f"the library's no limit, is not taken here: a request decodes for at most "
                           f"{MAX_REQUEST_S:g} s)")
    options = {key: _typed(body, key, types) for key, types in OPTIONS.items() if key in body}
    if options.get("time_limit_s", 1) <= 0:  # the library's own message offers None, which JSON's null is not here
        raise RequestError(f"'time_limit_s' must be above 0 (and at most {MAX_REQUEST_S:g}), not "
                           f"{options['time_limit_s']}")
    if options.get("time_limit_s", 0) > MAX_REQUEST_S:
        raise RequestError(f"'time_limit_s' is at most {MAX_REQUEST_S:g} here, the time one request may decode")
    if options.get("batch_size", 1) > MAX_BATCH_SIZE:  # the request's budget is checked between windows of batches
        raise RequestError(f"'batch_size' is at most {MAX_BATCH_SIZE} here")
    if options.get("batch_size", 1) < 1:  # as `predict --batch-size` refuses it
        raise RequestError(f"'batch_size' must be 1 or more, not {options['batch_size']}")
    if "method" in options and options["method"] not in METHODS:  # unset: Predictor.predict's default
        raise RequestError(f"unknown method {options['method'][:40]!r}; choose from {', '.join(METHODS)}")
    knobs = {key: _typed(body, key, (int,) if key in ("top_k", "beta", "seed") else (int, float))
             for key in SAMPLING_KEYS if key in body}
    if knobs:
        options["sampling"] = SamplingOptions(**knobs)
    _refuse_unread(options, options.get("method", DEFAULT_METHOD))
    round_trip = _model(body, "round_trip", models, "forward") if "round_trip" in body else None
    if round_trip is not None and predictor.task != "retro":
        raise RequestError(f"'round_trip' checks retrosynthesis answers; {predictor.path.name} is a "
                           f"{predictor.task} model")
    if "round_trip_k" in body and round_trip is None:
        raise RequestError("'round_trip_k' goes with 'round_trip', the forward model that checks the answers")
    round_trip_k = _typed(body, "round_trip_k", (int,)) if "round_trip_k" in body else 1
    try:
        # Every option checked as Predictor.predict checks them (n_best's range, augment on this model, a method it
        # cannot run): a request with one out of range waited its turn behind the request decoding (minutes) for
        # its 400, and a ValueError of a bug mid-decode was taken for one (400, nothing logged)
        predictor.check_predict(**{**PREDICT_DEFAULTS, **options})
        if round_trip is not None:  # its settings too: they were checked on the first window's answers, a minute
            check_round_trip([], round_trip, round_trip_k)  # of decoding lost before the 400
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    return Request(predictor, smiles, options, round_trip, round_trip_k)  # type: ignore[arg-type]


def _refuse_unread(options: Mapping, method: str) -> None:
    """Refuse draft_len or n_drafts, or a sampling knob off its default (temperature 0.8 for beam search), that
    `method` does not read (methods.unread_knobs), naming the methods that do, as `molspec predict` refuses its
    flags: a setting that played no part was taken for one that did."""
    for knob in unread_knobs(method, options.get("draft_len"), options.get("n_drafts"), options.get("sampling"))[:1]:
        raise RequestError(f"{method} does not read {knob!r}; the methods that do: {readers_of(knob)}")


def _model(body: Mapping, key: str, models: Mapping[str, Predictor], task: str | None) -> Predictor:
    """The loaded model that body[key] names (or the only one, where `key` is "model" and not given), of
    `task` where given."""
    loaded = ", ".join(models)
    if key not in body:
        if len(models) > 1:
            raise RequestError(f"'model' is missing: this server holds {loaded}")
        return next(iter(models.values()))
    name = _typed(body, key, (str,))
    if name not in models:
        raise RequestError(f"{key!r}: no model {str(name)[:40]!r} is loaded here; loaded: {loaded}")
    predictor = models[name]  # type: ignore[index]
    if task is not None and predictor.task != task:
        raise RequestError(f"{key!r} names {name}, a {predictor.task} model; it needs a {task} model")
    return predictor


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None  # JSON has no infinity


def query_notes(read: str, task: str, result: QueryResult) -> list[str]:
    """What a chemist should know of how the model read a query it answered, a sentence each, as `molspec predict`
    prints them and the Predict page shows them: stereo marks or enhanced stereo it does not read (chem.stereo_notes;
    `read` is the text the model predicted from) and several molecules given to retrosynthesis
    (service.several_products_note); none for a query it did not answer (an error and no answers)."""
    if result.error and not result.predictions:
        return []
    return [note for note in (*stereo_notes(read), several_products_note(task, result.canonical_query)) if note]


def result_json(result: QueryResult, recorded: str | None = None, notes: Sequence[str] = ()) -> dict:
    """One query's result as JSON: the answers in rank order with their checks, and the decoder's counts.
    `copied_from` is each output token's source position in `source_tokens` (-1: written by the model),
    the provenance the app draws; `set_aside`, the model's own first answers that pooled writings left out
    of the list for sane ones (QueryResult.set_aside), in the same form. A query sent as a recorded reaction
    has its `recorded` outcome (canonical) and the rank of the answer that is it (`recorded_rank`, null where
    none is); other queries null in both. `query` is the text sent (Service.predict), `canonical_query` what the
    model read of it (of a recorded reaction, the side it predicts from); `notes`, what it did not read (query_notes:
    an allene's stereo marks were dropped, and a client over HTTP was not told, where `molspec predict` said so);
    `writings`, how many writings of the query its answers were pooled from (QueryResult.writings: with augment,
    fewer than asked for where the molecule has fewer, or the time limit stopped it first), of which each answer's
    own `writings` gave it. `unlabelled`: of a query refused for isotope labels the model has no token for, the query
    without them where the model reads that (QueryResult.unlabelled; its answers cannot say where a label goes),
    else "", as `suggestion` gives the ion writing of a hydride the model reads as ions."""
    stats = result.stats

    def answer(p: Prediction) -> dict:
        return {"rank": p.rank, "smiles": p.smiles, "score": _finite(p.score), "probability": p.probability,
                "valid": p.valid, "sane": p.sane, "concerns": list(p.concerns), "model_rank": p.model_rank,
                "confidence": p.confidence, "writings": p.views, "spellings": p.spellings,
                "round_trip": p.round_trip, "forward_prob": p.forward_prob, "tokens": list(p.tokens),
                "copied_from": list(p.provenance), "source_tokens": list(p.source_tokens or result.source_tokens)}

    return {"query": result.query, "canonical_query": result.canonical_query, "error": result.error,
            "suggestion": result.suggestion, "unlabelled": result.unlabelled, "method": result.method,
            "dtype": result.dtype,
            "time_ms": round(stats.wall_time_s * 1000, 2), "model_calls": stats.model_calls,
            "accepted_tokens": stats.draft_tokens_accepted, "predictions": [answer(p) for p in result.predictions],
            "set_aside": [answer(p) for p in result.set_aside], "writings": result.writings,
            "recorded": recorded,
            "recorded_rank": known_rank(result, recorded) if recorded else None, "notes": list(notes)}


@dataclasses.dataclass(frozen=True)
class Read:
    """One query of a request as read before it decodes (known.with_recorded): the text the model reads (of a recorded
    reaction, the side it predicts from), why the query cannot be answered ("": no reason yet; a recorded outcome that
    is no SMILES) and the recorded outcome (canonical; None where the query records none)."""
    text: str
    problem: str = ""
    recorded: str | None = None


def read_query(text: str, task: str) -> Read:
    """A query of a request read as a file's row is (known.with_recorded), on its own."""
    table, column = with_recorded(QueryFile([text]), task)
    recorded = (table.cells_of(0)[table.columns.index(column)] or None) if column else None
    # an empty query keeps the service's own error (it was told of a file's blank record, "skipped, not counted as a
    # query")
    return Read(table.queries[0], "" if table.is_blank(0) else table.problem_of(0), recorded)


def model_json(name: str, predictor: Predictor) -> dict:
    """A loaded model as /models lists it; `weights`, its weights' fingerprint (Predictor.weights, as evaluate's
    reports and the app's files name them): a folder's name alone did not say which weights answered."""
    return {"name": name, "task": predictor.task, "weights": predictor.weights, "device": predictor.device_name,
            "engine": predictor.engine, "dtype": predictor.dtype, "augmentable": predictor.augmentable,
            "methods": predictor.methods()}


def is_loopback(host: str) -> bool:
    """Whether a host name or address (IPv6 in brackets or not) is this machine's loopback."""
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Service:
    """What the handlers share: the loaded models by name and the lock that lets one request decode at a time
    (torch's threads are process-wide, so two decodes at once would only share the cores)."""

    def __init__(self, models: Mapping[str, Predictor], budget_s: float = MAX_REQUEST_S):
        if not models:
            raise ValueError("serve needs at least one model")
        self.models = dict(models)
        self.budget_s = budget_s
        self.stop_grace_s = STOP_GRACE_S
        self.clock: Callable[[], float] = time.monotonic  # the budget's and the stop's (tests give their own)
        self.decoding = threading.Lock()
        self.stopping = threading.Event()  # set as the server stops: no request begins, the one decoding ends early

    @rdkit_quietly
    def predict(self, body: object, gone: Callable[[], bool] = lambda: False) -> dict:
        """The answers to a /predict body, a window of queries at a time (service.windows); once the request
        has decoded for budget_s, the windows not begun get an error saying so, and the rest stand; a window still
        decoding once the request has decoded for budget_s and a query's time limit more stops at its next decoder
        step (limits.abandon_when), its queries not yet decoded with that error (a window of 256 queries, each within
        its time limit, ran for hours past the budget; its batches decoded by then stand: service.PartlyDecoded).
        Once the server is stopping, the window decoding has stop_grace_s to end, then stops so, and the windows
        after get an error too; the windows before stand (a request whose
        turn comes once the server is stopping gets 503). `gone` says whether the client has left, looked at
        before each window and each decoder step: then ClientGone, and the rest is not decoded (a client that
        gave up, and perhaps sent its request again, held the models for minutes to no one).
        RDKit's messages are held back for the whole call, as inside Predictor.predict (chem.rdkit_quietly): reading a
        recorded reaction's outcome and checking the answers against it printed RDKit's lines to a program that runs
        the server itself (`molspec serve` turns them off for its process)."""
        request = parse_request(body, self.models)
        task = request.predictor.task
        # each query read as its window begins (read_query): a recorded reaction predicted from the side the model
        # reads, its outcome kept to check the answers. All were read as the request came, before its turn, with no
        # look at the client, the budget or a stop: RDKit reads the outcome of a 5,000-atom ring in 3-5 s, and 20 such
        # queries kept a core busy for a minute beside the request decoding, after their client had gone (800, a
        # body's most, about an hour)
        read: list[Read] = []
        results: list[QueryResult] = []
        method = request.options.get("method", DEFAULT_METHOD)

        def not_decoded(part: slice, why: str) -> list[QueryResult]:
            return [QueryResult(query=text, method=method, error=f"not decoded: {why}; send this query again",
                                writings=0) for text in request.smiles[part]]

        past_budget = f"the request ran past its {self.budget_s:g} s"
        overrun_s = self.budget_s + request.options.get("time_limit_s", DEFAULT_TIME_LIMIT_S)
        stop_seen: list[float] = []  # when the window decoding first saw the server stopping

        def abandon() -> str | None:  # why the window decoding ends now, if it does
            if gone():
                return CLIENT_GONE
            now = self.clock()
            if now - started > overrun_s:
                return past_budget
            if self.stopping.is_set():
                stop_seen[:] = stop_seen or [now]
                if now - stop_seen[0] >= self.stop_grace_s:
                    return "the server is stopping"
            return None

        with self.decoding:
            if self.stopping.is_set():
                raise RequestError(STOPPING, HTTPStatus.SERVICE_UNAVAILABLE)
            started = self.clock()
            # a query at a time where each is read in several writings (window_size): a window of 256 such queries
            # went on past the budget until a query's time limit more (up to 600 s) had passed
            for part in windows(len(request.smiles), request.options.get("batch_size", DEFAULT_BATCH_SIZE), "serve",
                                progress=False, augment=request.options.get("augment", 1)):
                if gone():
                    raise ClientGone(f"{len(request.smiles) - part.start} of {len(request.smiles)} queries not decoded")
                late = self.clock() - started > self.budget_s
                if results and (late or self.stopping.is_set()):
                    results += not_decoded(part, past_budget if late else "the server is stopping")
                    continue
                # what stands of the window if it is abandoned: its batches decoded by then (and checked, where a
                # round trip was asked for); the window of up to 256 queries was dropped whole
                kept: list[QueryResult | None] = [None] * len(request.smiles[part])
                try:
                    with abandon_when(abandon):
                        window: list[Read] = []
                        for text in request.smiles[part]:
                            check_abandoned()
                            window.append(read_query(text, task))
                        read += window  # (a window stopped while it is read is not added: it is not decoded)
                        try:
                            answered = request.predictor.predict([r.text for r in window], **request.options)
                        except PartlyDecoded as exc:
                            kept = list(exc.finished) if request.round_trip is None else kept
                            raise
                        if request.round_trip is not None:
                            for i, result in enumerate(answered):
                                answered[i] = kept[i] = check_round_trip(result, request.round_trip,
                                                                         request.round_trip_k)
                except Abandoned as exc:
                    if str(exc) == CLIENT_GONE:
                        raise ClientGone(f"{len(request.smiles) - part.start} of {len(request.smiles)} queries not "
                                         "decoded, some begun") from None
                    answered = [missed if result is None else result
                                for result, missed in zip(kept, not_decoded(part, str(exc)))]
                except OUT_OF_MEMORY:
                    if not results:  # nothing decoded: the request is refused whole (the handler's 503)
                        raise
                    # the windows decoded stand (the 503 dropped minutes of answers); this one and the rest do not
                    results += not_decoded(slice(part.start, len(request.smiles)), OUT_OF_MEMORY_ADVICE)
                    break
                results += answered
        # each query as the client sent it (a recorded reaction's came back as the side the model read, which
        # canonical_query shows); a recorded outcome that is no SMILES: that query's error. A query not read (its
        # window not begun, or stopped as it was read) keeps its 'not decoded' error
        read += [Read(text) for text in request.smiles[len(read):]]
        results = [dataclasses.replace(r, query=sent, **({"error": q.problem, "predictions": ()} if q.problem else {}))
                   for r, sent, q in zip(results, request.smiles, read, strict=True)]
        return {"results": [result_json(r, q.recorded, query_notes(q.text, task, r)) for r, q in zip(results, read)]}


class DeadlineReader(io.RawIOBase):
    """A handler's connection read up to its deadline: each read waits no longer than the time left, and past
    it the stream ends (the handler's read_stopped says why), as if the client had stopped sending."""

    def __init__(self, handler: Handler):
        super().__init__()
        self.handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        handler, connection = self.handler, self.handler.connection
        left = handler.deadline - time.monotonic()
        if left <= 0:
            handler.read_stopped = True
            return 0
        connection.settimeout(left)
        try:
            return connection.recv_into(buffer)
        except TimeoutError:
            handler.read_stopped = True
            return 0
        finally:
            connection.settimeout(handler.timeout)  # writes keep the whole timeout


class Handler(BaseHTTPRequestHandler):
    server: Server
    timeout = READ_TIMEOUT_S  # the default; setup() takes the server's
    protocol_version = "HTTP/1.1"
    # The headers and the body leave in two writes; with Nagle's algorithm the second waits for the client's
    # delayed acknowledgement of the first, which added about 30 ms to every answer on loopback.
    disable_nagle_algorithm = True

    def version_string(self) -> str:
        return SERVER_NAME

    def setup(self) -> None:
        self.timeout = self.server.read_timeout_s  # StreamRequestHandler.setup sets it on the socket
        self.deadline = math.inf  # when the request being read must have arrived whole (handle_one_request)
        self.read_stopped = False  # set once the request took past its time to arrive (DeadlineReader)
        self.unread_body = False  # a body left unread when the answer went: finish() reads and drops it
        self.probed = -math.inf  # when a half-closed client was last sent a 100 Continue (_client_gone)
        super().setup()
        self.rfile.close()  # the socket's own reader, whose reads the socket's timeout bounds each alone
        self.rfile = io.BufferedReader(DeadlineReader(self))

    def handle_one_request(self) -> None:
        """One request, which must arrive whole (its line, headers and body) within read_timeout_s: the socket's
        own timeout bounds each read alone, so a client sending a byte every few seconds held a thread for as
        long as it liked. Past the deadline, reading stops (DeadlineReader) and the request is refused. (A timer
        thread stopped the reading before: two threads a connection, and one more started for every request.)
        The time counts from the request's first byte; a connection silent for read_timeout_s before it is closed
        (a request sent on a connection a pool had kept idle for 25 s had 5 s to arrive, and a large one got 408)."""
        self.deadline = time.monotonic() + self.server.read_timeout_s  # the wait for the request to begin
        try:
            if self.rfile.peek(1):  # it has begun (or was there already)
                self.deadline = time.monotonic() + self.server.read_timeout_s
            super().handle_one_request()
        except ConnectionError as exc:  # reset while its request line or headers were read (a pool closing an
            self.close_connection = True  # idle connection): the socketserver printed a traceback
            log.info("%s: the client reset the connection before a whole request (%s)", self.address_string(), exc)
        if self.read_stopped:  # the rest of the stream is not read: no next request can be found in it
            self.close_connection = True

    def parse_request(self) -> bool:
        """The request line and headers, read whole: a request line or headers cut off at the deadline (the rest
        never came) are the request that did not arrive, 408, not a request of their own. A line cut short was read
        as an HTTP/0.9 request (answered without a status line) or a bad version (400), and headers cut short as
        whole: a POST cut before its Content-Length got 411, a GET its answer, read_timeout_s late. One empty line
        before the request line is passed over."""
        if self.raw_requestline in (b"\r\n", b"\n"):  # RFC 9112, 2.2: a client may send one after a body; it
            # closed the connection unanswered, and the request after it on a kept-alive connection was lost
            self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if not self.raw_requestline:
                self.close_connection = True
                return False
            if len(self.raw_requestline) > MAX_REQUEST_LINE:  # as handle_one_request refuses a first line
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return False
        read = super().parse_request()
        if read and self.read_stopped:  # a refusal (read False) went as 408 already (send_error)
            self.send_error(HTTPStatus.REQUEST_TIMEOUT)
            return False
        return read

    def finish(self) -> None:
        if self.unread_body:
            self._linger()
        super().finish()

    def _linger(self) -> None:
        """After an answer that left the request's body unread, the body's rest is read and dropped (drain)."""
        try:
            self.wfile.flush()
        except OSError:
            return  # the client has gone: nothing left to save
        drain(self.connection)

    def do_GET(self) -> None:
        if not self._host_allowed():
            return
        if self._carries_body():  # left unread: it must not be read as the next request on this connection, and
            self.close_connection = self.unread_body = True  # its rest is read and dropped (finish) before closing
        service = self.server.service
        path = self._route()
        if path == "/health":
            self._send(HTTPStatus.OK, HEALTHY)
        elif path == "/models":
            self._send(HTTPStatus.OK, {"models": [model_json(n, p) for n, p in service.models.items()]})
        elif path == "/predict":
            self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "POST a JSON body to /predict"}, {"Allow": "POST"})
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": no_route(path)})

    def do_HEAD(self) -> None:
        """GET's answer without its body (HTTP requires HEAD wherever GET is taken): a monitor's probe of
        /health. _send writes no body after HEAD."""
        self.do_GET()

    def handle_expect_100(self) -> bool:
        """`Expect: 100-continue`: the client sends its body only when told to go on, so the head is checked
        first; a request refused from its head is answered at once, not invited to send a body to no purpose."""
        if self.read_stopped:  # headers cut off at the deadline: parse_request answers 408
            return True
        if self.command != "POST" or self._route() != "/predict":
            return True  # do_<METHOD> answers without reading a body: the client is not invited to send one
        if not self._host_allowed():
            return False  # answered
        try:
            self._check_head()
        except RequestError as exc:
            self._send(exc.status, {"error": str(exc)})
            return False
        return super().handle_expect_100()

    def do_POST(self) -> None:
        if not self._host_allowed():
            return
        if self._route() != "/predict":  # 405 for /health and /models (they take GET), 404 elsewhere
            self._not_allowed()
            return
        # In hand from its head to its answer, whichever it is: a server stopping waited neither for a body still
        # arriving (its client reset as the process ended) nor for a refusal to be sent (a 503 lost so).
        with self.server.in_hand():
            self._answer_predict()

    def _answer_predict(self) -> None:
        try:
            self._check_head()
            body = self._body()
            self._send(HTTPStatus.OK, self.server.service.predict(body, self._client_gone))
        except RequestError as exc:
            self._send(exc.status, {"error": str(exc)})
        except ClientGone as exc:
            self.close_connection = True
            log.info("%s POST /predict: the client went away before its answer (%s)", self.address_string(), exc)
        except OUT_OF_MEMORY:  # a GPU's too: CUDA's out of memory was a 500 'internal error' with a traceback logged
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, {"error": OUT_OF_MEMORY_ADVICE})
        except Exception:  # a bug: logged with its traceback here, and the client is not shown it
            log.exception("POST /predict failed")
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error; the server's log has the details"})

    def _client_gone(self) -> bool:
        """Whether the client has closed (or reset) its connection since its request arrived, looked at without
        taking anything from the stream. A client that has only stopped sending (shut its side for writing, as
        `curl` with a body read from a pipe, `nc -N` or a script's shutdown(SHUT_WR) do) looks the same until a
        byte is sent it: an HTTP/1.1 client is then sent an interim `100 Continue`, which every HTTP/1.1 client
        reads past (RFC 9110, 15.2), at most every PROBE_EVERY_S: one that has closed resets the connection and
        has gone; one still reading waits on for its answer. An HTTP/1.0 client, which may be sent no interim
        answer, is taken to have gone when it stops sending, as before."""
        state = self._peer()
        if state != "closed":
            return state == "reset"
        if self.request_version != "HTTP/1.1":
            return True
        if time.monotonic() - self.probed < PROBE_EVERY_S:
            return False  # sent a probe lately, and no reset since
        self.probed = time.monotonic()
        try:
            self.connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        except OSError:
            return True
        deadline = time.monotonic() + PROBE_WAIT_S  # the reset of a client that has closed, on its way back
        while time.monotonic() < deadline:
            if self._peer() == "reset":
                return True
            time.sleep(0.005)
        return False

    def _peer(self) -> str:
        """The connection's state as the client left it, without waiting or taking anything from the stream:
        'waiting' (nothing to read: it waits for its answer), 'sent' (data ahead: a next request), 'closed' (it
        stopped sending: gone, or only half-closed) or 'reset'."""
        try:
            self.connection.settimeout(0)
            if self.connection.recv(1, socket.MSG_PEEK):
                return "sent"
            # after the client's FIN a read finds the end of the stream, not a reset that came since (our probe's)
            return "reset" if self.connection.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) else "closed"
        except BlockingIOError:
            return "waiting"
        except OSError:
            return "reset"
        finally:
            self.connection.settimeout(self.timeout)

    def do_OPTIONS(self) -> None:
        """A browser's cross-origin preflight: never granted (no Access-Control-Allow-* header). Allow names the
        methods the path takes (`*`, the server's: all of them); a path that is no route gets 404."""
        self.close_connection = True
        self.unread_body = self._carries_body()
        path = self._route()
        if path != "*" and path not in ROUTES:
            self._send(HTTPStatus.NOT_FOUND, {"error": no_route(path)})
            return
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "this server takes no cross-origin requests"},
                   {"Allow": ROUTES.get(path, "GET, HEAD, POST")})

    def _not_allowed(self) -> None:
        """A method no route takes (any without a do_<METHOD>: PUT, DELETE, TRACE, ...): 405 in JSON with
        the path's method, not the standard library's HTML 501."""
        if not self._host_allowed():
            return
        self.close_connection = True  # a body it carries is left unread
        self.unread_body = self._carries_body()
        path = self._route()
        if path not in ROUTES:
            self._send(HTTPStatus.NOT_FOUND, {"error": no_route(path)})
            return
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"{path} takes {ROUTES[path]}, not {self.command}"},
                   {"Allow": ROUTES[path]})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What the standard library answers itself, in JSON like every other answer here, never its HTML page:
        a request line or headers it cannot read (400, 414, 431, 505), and its 501 for a method without a
        do_<METHOD> (handle_one_request; nothing else sends 501), which is _not_allowed's 405. The connection
        closes: after such a request the stream cannot be trusted to hold the next one where it seems to."""
        if self.read_stopped:  # the line or headers were cut off at the deadline: whatever was wrong with them
            code = HTTPStatus.REQUEST_TIMEOUT
            message = f"the request did not arrive within {self.server.read_timeout_s:g} s"
        elif code == HTTPStatus.NOT_IMPLEMENTED:
            self._not_allowed()
            return
        self.log_error("code %d, message %s", code, message)
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # still the default: the version was never read, and HTTP/0.9's
            self.request_version = self.protocol_version  # answer is a bare body, with no status a client can read
        status = HTTPStatus(code)
        self._send(status, {"error": message or status.phrase})

    def _route(self) -> str:
        """The path asked for, without its query string (routes take none); of an absolute target
        (`GET http://localhost:8000/health`, which a server must take) its path."""
        absolute = self._absolute_target()
        if absolute is not None:
            return absolute.path or "/"
        return self.path.split("?", 1)[0]

    def _absolute_target(self) -> SplitResult | None:
        """The request target split, where it is absolute (scheme and host); None for a path."""
        return urlsplit(self.path) if self.path.lower().startswith(("http://", "https://")) else None

    def _carries_body(self) -> bool:
        return self.headers.get("Content-Length", "0").strip() != "0" or "Transfer-Encoding" in self.headers

    def _check_head(self) -> int | None:
        """A /predict request's Content-Length (None: its body comes in chunks), once its headers show a JSON body
        this server reads; a RequestError (the connection to close, the body unread) where they do not."""
        try:
            kind = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                raise RequestError("send the body as JSON with Content-Type: application/json",
                                   HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
            encodings = [c.strip().lower() for v in self.headers.get_all("Content-Encoding") or []
                         for c in v.split(",")]
            if any(c not in ("", "identity") for c in encodings):  # a gzipped body was 'not UTF-8 (byte 0x8b ...)'
                raise RequestError(f"Content-Encoding {', '.join(encodings)[:60]!r}: the body is read as sent; send "
                                   "the JSON uncompressed", HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
            lengths = self.headers.get_all("Content-Length") or []
            if "Transfer-Encoding" in self.headers:  # with a Content-Length beside it, which one frames the body?
                if lengths:                          # (request smuggling's way in)
                    raise RequestError("Transfer-Encoding and Content-Length together; send the body with one "
                                       "of them")
                codings = [c.strip().lower() for v in self.headers.get_all("Transfer-Encoding") or [] for c in
                           v.split(",")]
                if codings != ["chunked"]:
                    raise RequestError(f"Transfer-Encoding {', '.join(codings)[:60]!r}: only chunked is read",
                                       HTTPStatus.NOT_IMPLEMENTED)
                if self.request_version != "HTTP/1.1":  # HTTP/1.0 has no chunked bodies (RFC 9112, 6.1)
                    raise RequestError(f"a chunked body in an {self.request_version} request; send it with a "
                                       "Content-Length")
                return None
            if not lengths:
                raise RequestError("a body needs a Content-Length", HTTPStatus.LENGTH_REQUIRED)
            if len(set(lengths)) > 1:
                raise RequestError(f"{len(lengths)} different Content-Length headers; send one")
            if not DIGITS.fullmatch(lengths[0].strip()):  # int() took '+34', '3_4' and '-5'
                raise RequestError(f"Content-Length {lengths[0][:40]!r} is not a number of bytes")
            length = int(lengths[0])
            if length > MAX_BODY_BYTES:
                raise RequestError(f"a body of {length:,} bytes; at most {MAX_BODY_BYTES:,}",
                                   HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
            return length
        except RequestError:
            self.close_connection = True
            self.unread_body = self._carries_body()
            raise

    def _body(self) -> object:
        length = self._check_head()
        data = self._chunked() if length is None else self._framed(length)
        start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0  # a Windows editor's byte order
        try:                                                                      # mark, which RFC 8259 lets go
            text = data[start:].decode("utf-8")
        except UnicodeDecodeError as exc:  # Latin-1, UTF-16: the codec's own words named no way out
            at = start + exc.start
            raise RequestError(f"the body is not UTF-8 (byte 0x{data[at]:02x} at position {at}); send the JSON as "
                               "UTF-8") from None
        if not text.strip():
            raise RequestError('the body is empty: send a JSON object, such as {"smiles": "CCO"}')
        try:
            return json.loads(text, parse_constant=_no_constant, parse_int=_whole_number, object_pairs_hook=_once)
        except RequestError:
            raise
        except json.JSONDecodeError as exc:
            if exc.msg == "Extra data":  # JSON Lines, or objects one after another: 'not JSON: Extra data: line 2'
                raise RequestError(f"the body goes on after its JSON value, at line {exc.lineno}, column "
                                   f"{exc.colno}; send one object, its queries as a list: "
                                   '{"smiles": ["CCO", "CCN"]}') from None
            raise RequestError(f"the body is not JSON: {exc}") from None
        except ValueError as exc:  # a constant JSON does not allow (_no_constant)
            raise RequestError(f"the body is not JSON: {exc}") from None
        except RecursionError:  # json reads arrays and objects within each other recursively
            raise RequestError("the body's JSON is nested too deeply") from None

    def _framed(self, length: int) -> bytes:
        """A body of `length` bytes (its Content-Length)."""
        try:
            data = self.rfile.read(length)
        except ConnectionError as exc:  # the client went away mid-body: no bug of ours
            self.close_connection = True
            raise RequestError(f"the body stopped short of its {length:,} bytes ({exc})",
                               HTTPStatus.REQUEST_TIMEOUT) from None
        if len(data) < length:  # the client closed its side, or took past its time to send the rest
            self.close_connection = True
            raise self._stopped_short(f"the body stopped short of its {length:,} bytes", len(data))
        return data

    def _stopped_short(self, what: str, came: int) -> RequestError:
        """The error for a body whose sending stopped: its client closed its side, or took past its time."""
        if self.read_stopped:
            return RequestError(f"{what}: the request did not arrive within {self.server.read_timeout_s:g} s",
                                HTTPStatus.REQUEST_TIMEOUT)
        return RequestError(f"{what} ({came:,} came before the client stopped sending)")

    def _chunked(self) -> bytes:
        """A body sent in chunks (Transfer-Encoding: chunked, RFC 9112, 7.1: what a client sends for a body whose
        length it does not know beforehand), whole: its chunks' data in order, at most MAX_BODY_BYTES. Chunk
        extensions and trailer fields are read past. A body that breaks off or breaks the format is refused and
        the connection closes (where the next request would begin is unknown)."""
        parts: list[bytes] = []
        size = 0

        def line(what: str) -> bytes:
            read = self.rfile.readline(MAX_CHUNK_LINE + 1)
            if read.endswith(b"\n"):
                return read
            if len(read) > MAX_CHUNK_LINE:
                raise RequestError(f"{what} is a line of more than {MAX_CHUNK_LINE} bytes")
            raise self._stopped_short("the chunked body stopped short of its last chunk", size)

        try:
            while True:
                digits = line("a chunk's size").split(b";", 1)[0].strip()
                if not HEX_DIGITS.fullmatch(digits):
                    raise RequestError(f"a chunk's size {digits[:20].decode('latin-1')!r} is not a hexadecimal "
                                       "number of bytes")
                count = int(digits, 16)
                if count == 0:
                    break
                size += count
                if size > MAX_BODY_BYTES:
                    raise RequestError(f"a chunked body of more than {MAX_BODY_BYTES:,} bytes; at most "
                                       f"{MAX_BODY_BYTES:,}", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
                data = self.rfile.read(count)
                parts.append(data)
                if len(data) < count:
                    raise self._stopped_short("the chunked body stopped short of its last chunk",
                                              size - count + len(data))
                if line("a chunk's end").strip(b"\r\n"):
                    raise RequestError(f"a chunk ran past the {count:,} bytes its size gave")
            for _ in range(MAX_TRAILER_LINES):  # the trailer: fields, up to an empty line
                if not line("a trailer field").strip(b"\r\n"):
                    return b"".join(parts)
            raise RequestError(f"a chunked body's trailer of more than {MAX_TRAILER_LINES} fields")
        except ConnectionError as exc:  # the client went away mid-body: no bug of ours
            self.close_connection = True
            raise RequestError(f"the chunked body stopped short of its last chunk ({exc})",
                               HTTPStatus.REQUEST_TIMEOUT) from None
        except RequestError:
            self.close_connection = True
            self.unread_body = not self.read_stopped  # a client still sending reads its answer (finish)
            raise

    def _host_allowed(self) -> bool:
        """An HTTP/1.1 request names one Host (400 otherwise, as RFC 9112 asks); on loopback, only requests
        addressed to a loopback name or address are answered (DNS rebinding). An absolute target's host is
        the one addressed."""
        hosts = self.headers.get_all("Host") or []
        if len(hosts) > 1 or (not hosts and self.request_version != "HTTP/1.0"):
            self.close_connection = True
            self.unread_body = self._carries_body()
            self._send(HTTPStatus.BAD_REQUEST, {"error": "a request names its Host, once"})
            return False
        if not self.server.loopback:
            return True
        absolute = self._absolute_target()
        if absolute is not None:
            name = absolute.hostname or ""
        elif hosts:
            name = host_name(hosts[0])
        else:
            return True  # HTTP/1.0 without a Host: no browser's request, which always names one
        if is_loopback(name):
            return True
        self.close_connection = True
        self.unread_body = self._carries_body()
        self._send(HTTPStatus.FORBIDDEN, {"error": NOT_LOOPBACK.format(host=repr(name[:80]))})
        return False

    def _send(self, status: HTTPStatus, payload: dict, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload, allow_nan=False).encode("utf-8")
        if self.server.service.stopping.is_set():  # no next request will be answered on this connection
            self.close_connection = True
        self.send_response(status)  # with Server and Date
        for key, value in JSON_HEADERS.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:  # the client learns it must open a new connection for its next request
            self.send_header("Connection", "close")
        elif self.request_version == "HTTP/1.0":  # kept open as it asked (keep-alive): without this header an
            self.send_header("Connection", "keep-alive")  # HTTP/1.0 client waits for the close that ends an answer
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        try:
            self.end_headers()
            if self.command != "HEAD":  # an answer to HEAD has headers alone
                self._write(data)
        except (ConnectionError, TimeoutError) as exc:  # the client went away (closed, reset) before its answer, or
            self.close_connection = True                  # stopped reading it (the buffers full): no bug of ours
            why = (f"did not read its answer of {len(data):,} bytes (a part every {self.timeout:g} s, "
                   f"{WRITE_MIN_RATE // 1024} KiB/s in all)" if isinstance(exc, TimeoutError)
                   else f"went away before its answer ({exc})")
            asked = f"{self.command} {getattr(self, 'path', '')[:80]}"  # no path where the line could not be read
            log.info("%s %s: the client %s", self.address_string(), asked.translate(CONTROL_ESCAPES), why)

    def _write(self, data: bytes) -> None:
        """An answer's body, in parts, each sent within the timeout (one send's timeout bounded it whole, and cut a
        slow but steady reader of a large answer), and all of it at WRITE_MIN_RATE or within the timeout, whichever
        is longer (a reader taking a part every timeout held its thread for hours); TimeoutError past either."""
        deadline = time.monotonic() + max(self.timeout, len(data) / WRITE_MIN_RATE)
        view = memoryview(data)
        try:
            for start in range(0, len(view), WRITE_PART_BYTES):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the answer's time is up")
                self.connection.settimeout(min(self.timeout, left))
                self.wfile.write(view[start:start + WRITE_PART_BYTES])
        finally:
            self.connection.settimeout(self.timeout)

    def log_message(self, format: str, *args: object) -> None:
        """Every line the standard library logs (each request, each error), its control characters escaped: a
        request line's ESC and CR went to the operator's terminal as sent (colours, a line overwritten by a
        forged one), which the standard library's own log_message, replaced here, escapes."""
        log.info("%s %s", self.address_string(), (format % args).translate(CONTROL_ESCAPES))


def no_route(path: str) -> str:
    """The 404 of a path that is no route; of one that ends in a route (/molspec/predict), that a reverse proxy
    forwarding its path prefix must strip it (it was only 'try /health, /models, /predict')."""
    routes = f"the routes are {', '.join(list(ROUTES)[:-1])} and {list(ROUTES)[-1]}"
    prefix = next((path[:-len(route)] for route in ROUTES if path.endswith(route) and path != route), None)
    if prefix and prefix.startswith("/"):
        return (f"no route {path[:80]!r}; {routes}, at the root: a reverse proxy in front of this server strips its "
                f"path prefix {prefix[:80]!r} before it forwards")
    return f"no route {path[:80]!r}; {routes}"


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def _once(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are each given once: of {"smiles": "CCO", "smiles": "CCN"} the last was taken
    without a word (which one a sender meant, and which one a proxy or another reader takes, is anyone's guess)."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise RequestError(f"{key[:40]!r} is given twice in one object; give it once")
        seen[key] = value
    return seen


def _whole_number(digits: str) -> int:
    """A JSON whole number; one too long for Python to read was 'not JSON', with advice for the server's code."""
    if len(digits.lstrip("-")) > MAX_DIGITS:
        raise RequestError(f"a whole number of {len(digits.lstrip('-')):,} digits in the body; no option takes one "
                           f"of more than {MAX_DIGITS}")
    return int(digits)


def drain(connection: socket.socket) -> None:
    """Shut a connection for writing once its answer has gone, then read and drop what the client still sends,
    for LINGER_S (LINGER_BYTES) at most, before it closes: closed at once with a request unread, the connection
    was reset, and a client still sending (Python's http.client) hit a broken pipe and never read its answer."""
    try:
        connection.shutdown(socket.SHUT_WR)
        connection.settimeout(LINGER_S)
        deadline, dropped = time.monotonic() + LINGER_S, 0
        while time.monotonic() < deadline and dropped < LINGER_BYTES:
            chunk = connection.recv(65536)
            if not chunk:
                break
            dropped += len(chunk)
    except OSError:
        pass  # the client has gone: nothing left to save


def closing_answer(status: HTTPStatus, payload: dict, headers: Mapping[str, str] | None = None,
                   head_only: bool = False) -> bytes:
    """An answer written whole, for a connection past the limit that no Handler reads, which then closes: the headers
    Handler._send's carry (Server and Date as send_response writes them, JSON_HEADERS), then `headers`. The health
    probe's 200 lacked X-Content-Type-Options, Date and Server."""
    body = json.dumps(payload).encode()
    fields = {"Server": SERVER_NAME, "Date": email.utils.formatdate(usegmt=True), **JSON_HEADERS,
              "Content-Length": str(len(body)), "Connection": "close", **(headers or {})}
    head = f"HTTP/1.1 {status.value} {status.phrase}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    return (head + "\r\n").encode() + (b"" if head_only else body)


def busy_answer(limit: int) -> bytes:
    """The 503 a connection past the limit gets, whole, before it closes (no handler reads its request: drain
    drops it)."""
    return closing_answer(HTTPStatus.SERVICE_UNAVAILABLE,
                          {"error": f"the server holds {limit} connections; try again shortly"}, {"Retry-After": "1"})


def host_name(host: str) -> str:
    """A Host header's name or address without its port (an IPv6 address without its brackets)."""
    host = host.strip()
    return host[1:host.find("]")] if host.startswith("[") else host.rsplit(":", 1)[0]


def read_head(connection: socket.socket, seconds: float) -> bytes:
    """What a connection sends of its request within `seconds`, up to the end of its headers (MAX_REFUSED_HEAD bytes
    at most), taken from the stream; what came by then where it stops short."""
    head = b""
    deadline, before = time.monotonic() + seconds, connection.gettimeout()
    try:
        while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) < MAX_REFUSED_HEAD:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            connection.settimeout(left)
            chunk = connection.recv(MAX_REFUSED_HEAD - len(head))
            if not chunk:
                break
            head += chunk
    except OSError:  # timed out, or the client has gone
        pass
    finally:
        with contextlib.suppress(OSError):
            connection.settimeout(before)
    return head


def health_probe(head: bytes, loopback: bool) -> str | None:
    """The method of a request head that asks GET or HEAD /health (whatever its query string), addressed as the
    server answers it (Handler._host_allowed: one Host, a loopback one where the server listens on loopback);
    None for any other."""
    lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
    words = lines[0].split()
    if len(words) != 3 or words[0] not in ("GET", "HEAD") or words[1].split("?", 1)[0] != "/health":
        return None
    hosts = [value for name, _, value in (line.partition(":") for line in lines[1:]) if name.strip().lower() == "host"]
    if len(hosts) > 1 or (not hosts and words[2] != "HTTP/1.0"):
        return None
    if loopback and hosts and not is_loopback(host_name(hosts[0])):
        return None
    return words[0]


def health_answer(method: str) -> bytes:
    """GET /health's answer, whole (HEAD: its head alone), for a connection past the limit, which then closes."""
    return closing_answer(HTTPStatus.OK, HEALTHY, head_only=method == "HEAD")


def address_family(host: str) -> socket.AddressFamily:
    """IPv6 for an address written with colons ('::1' was refused as IPv4), else IPv4."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def check_can_listen(host: str, port: int) -> None:
    """Binds host:port as Server does (address reuse on, as HTTPServer sets it) and lets it go, raising the OSError
    that Server would: `molspec serve` says a port in use or a host that does not resolve before it spends its
    minutes loading the models."""
    with socket.socket(address_family(host)) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a client still connected does not keep the process from ending
    # Connections the system completes while the server is busy accepting (listen's backlog): the standard
    # library's 5 reset about one client in four of 40 that asked at once while a request decoded.
    request_queue_size = 2 * MAX_CONNECTIONS

    def __init__(self, address: tuple[str, int], service: Service, read_timeout_s: float = READ_TIMEOUT_S):
        self.address_family = address_family(address[0])
        super().__init__(address, Handler)
        self.service = service
        self.read_timeout_s = read_timeout_s
        self.loopback = is_loopback(address[0])
        self.max_connections = MAX_CONNECTIONS
        self.connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.refusing = threading.BoundedSemaphore(MAX_REFUSING)  # 503s reading their requests' rest (drain)
        self.requests = 0  # /predict requests in hand: their heads read, not yet answered (a body arriving, waiting
        # its turn, decoding, its answer leaving)
        self.settled = threading.Condition()  # notified as each is answered

    @contextlib.contextmanager
    def in_hand(self) -> Iterator[None]:
        """A /predict request from its head to its answer, counted so that a stopping server answers it first."""
        with self.settled:
            self.requests += 1
        try:
            yield
        finally:
            with self.settled:
                self.requests -= 1
                self.settled.notify_all()

    def process_request(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        """A thread for the connection, while fewer than MAX_CONNECTIONS are open; else a 503 and it closes, once
        the request it sends meanwhile is read and dropped (drain, on a thread of its own while fewer than
        MAX_REFUSING are; past that at once): closed at once, Python's http.client, still sending its request,
        hit a broken pipe and never read the 503. On that thread, a probe of /health is answered instead
        (health_probe): clients queued for their turn made it a 503, and a liveness probe restarted a server that
        was only busy, losing the request it was decoding."""
        if not self.connections.acquire(blocking=False):
            if self.refusing.acquire(blocking=False):
                threading.Thread(target=self._refuse, args=(request, True), name="refusing", daemon=True).start()
            else:
                self._refuse(request, False)
            return
        super().process_request(request, client_address)

    def _refuse(self, request: socket.socket, drained: bool) -> None:
        try:
            probe = health_probe(read_head(request, LINGER_S), self.loopback) if drained else None
            request.sendall(busy_answer(self.max_connections) if probe is None else health_answer(probe))
            if drained:
                drain(request)
        except OSError:
            pass
        finally:
            self.shutdown_request(request)
            if drained:
                self.refusing.release()

    def process_request_thread(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def stop_taking(self) -> None:
        """No request begins from now on: the listening socket closes, the request decoding stops at its next
        window, or inside one still decoding after Service.stop_grace_s, keeping the batches decoded by then (the
        rest of its queries: 'not decoded: the server is stopping'), and every request whose turn
        comes after, or that a kept-alive connection sends, gets 503. Call it once serve_forever has returned."""
        self.service.stopping.set()
        self.server_close()


def run(server: Server) -> None:
    """Serves until Ctrl-C or SIGTERM (a service manager's stop), then answers the requests in hand before it
    returns: the one decoding with the queries it has decoded, those waiting their turn, and those whose bodies are
    still arriving (within the read timeout), with 503 (they lost their connections without an answer when the
    process ended at once). A second Ctrl-C or SIGTERM returns at once.
    The main thread's call: the signals are taken there, and only set an event (an exception raised wherever
    the accepting loop happened to be could close a connection a handler had begun on)."""
    signalled = threading.Event()
    before = {number: signal.signal(number, lambda *_: signalled.set()) for number in (signal.SIGINT, signal.SIGTERM)
              if signal.getsignal(number) != signal.SIG_IGN}  # one ignored (a background job's Ctrl-C) stays so
    threading.Thread(target=server.serve_forever, name="accepting", daemon=True).start()
    try:
        while not signalled.wait(0.5):  # in steps: the handlers run between them
            pass
        signalled.clear()
        server.shutdown()  # the accepting loop ends
        server.stop_taking()
        with server.settled:
            if server.requests:
                print(f"stopping: answering the {server.requests} request{'s' if server.requests > 1 else ''} in "
                      "hand (the one decoding with what it has decoded); Ctrl-C again stops at once",
                      file=sys.stderr, flush=True)
            while server.requests and not signalled.is_set():
                server.settled.wait(0.5)
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
        server.server_close()


def serve(models: Sequence[Predictor], host: str = "127.0.0.1", port: int = 8000,
          budget_s: float = MAX_REQUEST_S, read_timeout_s: float = READ_TIMEOUT_S) -> Server:
    """A server for `models` (named by their folders) bound to host:port (port 0: any free one); call its
    serve_forever(). Refuses two models of one name. budget_s: Service's, per request; read_timeout_s: how long
    a client may leave its connection silent (before and within a request; tests make it short)."""
    named: dict[str, Predictor] = {}
    for predictor in models:
        if predictor.path.name in named:
            raise ValueError(f"two models named {predictor.path.name}; give folders of different names")
        named[predictor.path.name] = predictor
    return Server((host, port), Service(named, budget_s), read_timeout_s)
