"""`molspec serve` (molspec_core/server.py): the service over HTTP answers what Predictor.predict answers, and a
request it cannot answer gets a status and a reason while the server goes on."""
from __future__ import annotations

import contextlib
import email.utils
import gzip
import http.client
import json
import logging
import os
import re
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
import torch

from conftest import FIXTURES, needs_native
from molspec_core import chem, cli, server
from molspec_core.calibration import weights_fingerprint
from molspec_core.known import with_recorded
from molspec_core.roundtrip import check_round_trip
from molspec_core.service import Predictor, several_products_note

PARACETAMOL = "CC(=O)Nc1ccc(O)cc1"
AMIDE = "CC(=O)Cl.NCc1ccccc1"


@pytest.fixture(scope="module")
def models():
    return {"forward": Predictor.load("forward", device="cpu"), "retro": Predictor.load("retro", device="cpu")}


@pytest.fixture(scope="module")
def address(models):
    running = server.serve(list(models.values()), "127.0.0.1", 0)
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running.server_address[:2]
    running.shutdown()
    running.server_close()


def call(address, method: str, path: str, body: object = None, headers: dict | None = None,
         raw: bytes | None = None) -> tuple[int, dict]:
    connection = http.client.HTTPConnection(*address, timeout=60)
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})} if data is not None else dict(headers or {})
    connection.request(method, path, body=data, headers=sent)
    response = connection.getresponse()
    status, payload = response.status, json.loads(response.read())
    assert response.getheader("Content-Type") == "application/json"
    connection.close()
    return status, payload


def answers(result) -> list[tuple]:
    return [(p["rank"], p["smiles"], pytest.approx(p["score"], abs=1e-6), p["sane"], p["confidence"])
            for p in result["predictions"]]


def test_answers_are_the_services_in_the_order_asked_and_a_bad_query_costs_only_its_own(address, models):
    queries = [AMIDE, "C1CC(", "CC(=O)O.OCC"]
    status, payload = call(address, "POST", "/predict",
                           {"model": "forward", "smiles": queries, "method": "beam", "n_best": 3})
    assert status == 200
    expected = models["forward"].predict(queries, method="beam", n_best=3)
    results = payload["results"]
    assert [r["query"] for r in results] == queries
    for got, want in zip(results, expected):
        assert got["error"] == want.error and got["canonical_query"] == want.canonical_query
        assert answers(got) == [(p.rank, p.smiles, p.score, p.sane, p.confidence) for p in want.predictions]
    assert "not a valid SMILES" in results[1]["error"] and results[1]["predictions"] == []
    first = results[0]["predictions"][0]
    assert first["smiles"] == "CC(=O)NCc1ccccc1" and len(first["tokens"]) == len(first["copied_from"])


def test_each_result_says_what_the_model_did_not_read_of_its_query(address):
    """An allene's stereo marks, which RDKit drops, and a salt given to retrosynthesis were said by `molspec predict`
    and the Predict page, and not to a client over HTTP, which got answers without that stereo and without a word."""
    allene = "C[C@H]=C=[C@H]C.BrBr"
    _, payload = call(address, "POST", "/predict", {"model": "forward", "smiles": [allene, f"{allene}>>CC", AMIDE]})
    dropped, recorded, plain = payload["results"]
    assert dropped["predictions"] and dropped["notes"] == [chem.dropped_stereo(allene)] == recorded["notes"]
    assert dropped["notes"][0].startswith("Stereo marks dropped: 2 atoms marked @") and plain["notes"] == []
    _, payload = call(address, "POST", "/predict", {"model": "retro", "smiles": ["CC(=O)NCc1ccccc1.Cl", "C1CC("]})
    salt, bad = payload["results"]
    assert salt["notes"] == [several_products_note("retro", salt["canonical_query"])] and salt["notes"][0]
    assert bad["error"] and bad["notes"] == []


def test_a_query_refused_for_an_isotope_label_gives_the_unlabelled_query_apart(address, models):
    """A query the model refuses for an isotope label it has no token for ([13CH3]) names the query without its labels,
    which the model reads: the Python API gives it apart (QueryResult.unlabelled, the Predict page's one-click retry),
    and a client over HTTP had it only inside the error's words. It is `unlabelled`, beside `suggestion`; "" for any
    other query."""
    labelled = "[13CH3]C(=O)Cl.NCc1ccccc1"
    _, payload = call(address, "POST", "/predict", {"model": "forward", "smiles": [labelled, AMIDE, "C1CC("]})
    refused, answered, unreadable = payload["results"]
    want = models["forward"].predict(labelled)
    assert refused["error"] == want.error and refused["suggestion"] == ""
    assert refused["unlabelled"] == want.unlabelled == "CC(=O)Cl.NCc1ccccc1"
    assert answered["unlabelled"] == unreadable["unlabelled"] == "" and answered["predictions"]
    _, payload = call(address, "POST", "/predict", {"model": "forward", "smiles": refused["unlabelled"]})
    assert payload["results"][0]["error"] is None and payload["results"][0]["predictions"]


def test_an_empty_query_gets_the_services_error_not_a_files(address, models):
    """An empty query was told "blank: this record holds no query (skipped, not counted as a query)", the Batch
    page's words for a file's blank line, with a recorded reaction beside it or not."""
    for queries in (["", "  ", AMIDE], ["", f"{AMIDE}>>CC(=O)NCc1ccccc1"]):
        status, payload = call(address, "POST", "/predict", {"model": "forward", "smiles": queries})
        assert status == 200
        empty = [r for r in payload["results"] if not r["query"].strip()]
        assert [(r["query"], r["error"]) for r in empty] == [
            (want.query, want.error) for want in models["forward"].predict([r["query"] for r in empty])]
        assert empty[0]["error"].startswith("empty query") and payload["results"][-1]["predictions"]


def test_a_request_keeps_rdkit_quiet_and_leaves_it_on_for_the_program_that_serves():
    """A recorded reaction whose outcome RDKit cannot read printed RDKit's 'SMILES Parse Error' lines, three of them,
    to a program running the server itself (its result's error says it). A process of its own: RDKit's logging is
    the process's."""
    import subprocess
    import sys

    code = ("import logging, sys\nlogging.disable()\nfrom rdkit import Chem\n"
            "from molspec_core.server import Service\nfrom molspec_core.service import Predictor\n"
            f"predictor = Predictor.load({str(FIXTURES / 'copy_model')!r}, device='cpu')\n"
            "answered = Service({'copy': predictor}).predict({'smiles': ['CC>>C1CC', 'CCO>>CC']})['results']\n"
            "print([r['error'] is None for r in answered], file=sys.stderr, flush=True)\n"
            "Chem.MolFromSmiles('c1cc')")
    told = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}).stderr.splitlines()
    assert told[0] == "[False, True]"
    assert len(told) == 2 and "SMILES Parse Error" in told[1]  # the program's own, after the request


def test_answers_pooled_writings_set_aside_come_in_their_own_list(address, models):
    # The shipped forward model's pool for this cyclodehydration (the Predict page's test, tests/test_app.py)
    # ranks the unchanged serine ester fourth; the list gives its place to the oxazoline, sixth.
    query = "C1CCOC1.CCOC(=O)C(CO)NC(=O)C(CCCC1CCCCC1)CC(=O)OC(C)(C)C"
    status, payload = call(address, "POST", "/predict",
                           {"model": "forward", "smiles": [query], "method": "beam", "n_best": 5, "augment": 5})
    assert status == 200
    want = models["forward"].predict(query, method="beam", n_best=5, augment=5)
    got = payload["results"][0]
    assert want.set_aside and answers({"predictions": got["set_aside"]}) == [
        (p.rank, p.smiles, p.score, p.sane, p.confidence) for p in want.set_aside]
    assert [p["model_rank"] for p in got["set_aside"]] == [4] and got["set_aside"][0]["concerns"]
    assert max(p["model_rank"] for p in got["predictions"]) == 6
    assert all(r["set_aside"] == [] for r in call(address, "POST", "/predict", {"model": "forward",
                                                                                 "smiles": [AMIDE]})[1]["results"])


def test_a_result_says_how_many_writings_its_answers_were_pooled_from(models):
    """QueryResult.writings (a small molecule has fewer writings than asked for: CCO 3 of 5) was not in a result's
    JSON, so a client read each answer's `writings` against the augment it asked for, not the writings read."""
    service = server.Service({"forward": models["forward"]})
    small, large = service.predict({"smiles": ["CCO", AMIDE], "method": "beam", "n_best": 2, "augment": 5})["results"]
    want = models["forward"].predict(["CCO", AMIDE], method="beam", n_best=2, augment=5)
    assert (small["writings"], large["writings"]) == (want[0].writings, want[1].writings) == (3, 5)
    assert all(p["writings"] <= small["writings"] for p in small["predictions"])
    assert service.predict({"smiles": [AMIDE]})["results"][0]["writings"] == 1


def test_speculative_answers_come_with_what_they_copied(address, models):
    status, payload = call(address, "POST", "/predict", {"model": "forward", "smiles": AMIDE, "method": "spec-auto"})
    result, = payload["results"]
    prediction = result["predictions"][0]
    want = models["forward"].predict(AMIDE, method="spec-auto").predictions[0]
    assert status == 200 and prediction["copied_from"] == list(want.provenance)
    assert result["accepted_tokens"] > 0 and any(position >= 0 for position in prediction["copied_from"])
    copied = [(prediction["tokens"][i], prediction["source_tokens"][at])
              for i, at in enumerate(prediction["copied_from"]) if at >= 0]
    assert all(token == source for token, source in copied)  # each copied token is the source's at its position


def test_a_recorded_reaction_is_predicted_from_its_reactants_and_its_outcome_ranked(address, models):
    queries = [f"{AMIDE}>ClCCl>CC(=O)NCc1ccccc1", f"{AMIDE}>>CCO", AMIDE, f"{AMIDE}>>C1CC("]
    status, payload = call(address, "POST", "/predict", {"model": "forward", "smiles": queries, "method": "beam",
                                                         "n_best": 3})
    assert status == 200
    recorded, other, plain, bad = payload["results"]
    want = models["forward"].predict(f"{AMIDE}>ClCCl>", method="beam", n_best=3)
    assert [r["query"] for r in payload["results"]] == queries  # each as sent, not the side the model read
    assert recorded["canonical_query"] == "CC(=O)Cl.ClCCl.NCc1ccccc1" and answers(recorded) == [
        (p.rank, p.smiles, p.score, p.sane, p.confidence) for p in want.predictions]
    assert (recorded["recorded"], recorded["recorded_rank"]) == ("CC(=O)NCc1ccccc1", 1)
    assert (other["recorded"], other["recorded_rank"]) == ("CCO", None) and other["predictions"]
    assert (plain["recorded"], plain["recorded_rank"]) == (None, None)
    assert "the recorded products are not a valid SMILES" in bad["error"] and bad["predictions"] == []
    _, payload = call(address, "POST", "/predict", {"model": "retro", "smiles": "CC(=O)Cl.NCc1ccccc1>>CC(=O)NCc1ccccc1",
                                                    "n_best": 3, "method": "beam"})
    retro, = payload["results"]
    assert retro["query"] == "CC(=O)Cl.NCc1ccccc1>>CC(=O)NCc1ccccc1"
    assert retro["canonical_query"] == "CC(=O)NCc1ccccc1" and retro["recorded"] == "CC(=O)Cl.NCc1ccccc1"
    assert retro["recorded_rank"] == next((p["rank"] for p in retro["predictions"]
                                           if p["smiles"] == "CC(=O)Cl.NCc1ccccc1"), None)


def test_round_trip_names_the_forward_model_and_checks_as_the_cli_does(address, models):
    status, payload = call(address, "POST", "/predict", {"model": "retro", "smiles": PARACETAMOL, "method": "beam",
                                                         "n_best": 3, "round_trip": "forward"})
    assert status == 200
    want = check_round_trip(models["retro"].predict(PARACETAMOL, method="beam", n_best=3), models["forward"])
    got = payload["results"][0]["predictions"]
    assert [(p["round_trip"], p["forward_prob"]) for p in got] == [
        (p.round_trip, pytest.approx(p.forward_prob) if p.forward_prob is not None else None)
        for p in want.predictions]
    assert any(p["round_trip"] is not None for p in got)


def test_models_lists_what_is_loaded(address, models):
    """Each model by name, task and arithmetic, and by its weights' fingerprint (Predictor.weights, as evaluate's
    reports and the app's files name them): a folder's name alone did not say which weights answered, a training
    run's export/ rewritten between two starts of the server."""
    status, payload = call(address, "GET", "/models")
    assert status == 200
    assert [(m["name"], m["task"], m["dtype"]) for m in payload["models"]] == [("forward", "forward", "float32"),
                                                                                ("retro", "retro", "float32")]
    assert [m["weights"] for m in payload["models"]] == [models["forward"].weights, models["retro"].weights]
    assert models["forward"].weights == weights_fingerprint(models["forward"].path) != models["retro"].weights
    assert "beam" in payload["models"][0]["methods"]
    assert call(address, "GET", "/health") == (200, {"status": "ok"})


@pytest.mark.parametrize("body, status, says", [
    ({"smiles": AMIDE}, 400, "'model' is missing: this server holds forward, retro"),
    ({"model": "forward"}, 400, "'smiles' is missing"),
    ({"model": "forward", "smiles": []}, 400, "non-empty list"),
    ({"model": "forward", "smiles": [AMIDE, 3]}, 400, "a SMILES string or a non-empty list of them: item 2 is 3"),
    ({"model": "forward", "smiles": [AMIDE, AMIDE, None]}, 400, "non-empty list of them: item 3 is null"),
    ({"model": "nope", "smiles": AMIDE}, 400, "no model 'nope' is loaded here; loaded: forward, retro"),
    ({"model": "forward", "smiles": AMIDE, "nbest": 3}, 400, "unknown option 'nbest'"),
    ({"model": "forward", "smiles": AMIDE, "n_best": True}, 400, "'n_best' must be a whole number, not true"),
    ({"model": "forward", "smiles": AMIDE, "n_best": 2.5}, 400, "'n_best' must be a whole number"),
    ({"model": "forward", "smiles": AMIDE, "method": "fastest"}, 400, "unknown method 'fastest'"),
    ({"model": "forward", "smiles": AMIDE, "method": "beam", "n_best": 99}, 400, "n_best must be between 1 and 50"),
    ({"model": "forward", "smiles": AMIDE, "n_best": 3}, 400, "greedy returns one prediction"),
    ({"model": "forward", "smiles": AMIDE, "method": "sample", "temperature": -1}, 400, "temperature must be"),
    # knobs the method does not read were ignored, as `molspec predict` refuses them
    ({"model": "forward", "smiles": AMIDE, "method": "beam", "temperature": 0.8}, 400,
     "beam does not read 'temperature'; the methods that do: sample, spec-sample, spec-sample-draft, mentored"),
    ({"model": "forward", "smiles": AMIDE, "draft_len": 4}, 400, "greedy does not read 'draft_len'; the methods"),
    ({"model": "forward", "smiles": AMIDE, "method": "spec-lookup", "tau": 1}, 400, "does not read 'tau'"),
    ({"model": "forward", "smiles": AMIDE, "round_trip": "forward"}, 400, "checks retrosynthesis answers"),
    ({"model": "retro", "smiles": PARACETAMOL, "round_trip": "retro"}, 400, "it needs a forward model"),
    ({"model": "retro", "smiles": PARACETAMOL, "round_trip": "forward", "round_trip_k": 0}, 400, "between 1 and 10"),
    # round_trip_k without round_trip was ignored
    ({"model": "retro", "smiles": PARACETAMOL, "round_trip_k": 3}, 400, "'round_trip_k' goes with 'round_trip'"),
    ({"model": "forward", "smiles": AMIDE, "time_limit_s": 1e9}, 400, "'time_limit_s' is at most 600"),
    # null, the library's no limit, was told "must be a whole number or a number": every request here has a limit
    ({"model": "forward", "smiles": AMIDE, "time_limit_s": None}, 400,
     "'time_limit_s' must be a number of seconds, above 0 and at most 600 (null, the library's no limit, is not taken "
     "here: a request decodes for at most 600 s)"),
    ({"model": "forward", "smiles": AMIDE, "time_limit_s": "5"}, 400, "'time_limit_s' must be a number, not \"5\""),
    ({"model": "forward", "smiles": AMIDE, "method": "sample", "temperature": "hot"}, 400,
     "'temperature' must be a number, not \"hot\""),
    ({"model": "forward", "smiles": AMIDE, "time_limit_s": 0}, 400, "'time_limit_s' must be above 0 (and at most 600)"),
    ({"model": "forward", "smiles": AMIDE, "batch_size": 10_000}, 400, "'batch_size' is at most 256"),
    ({"model": "forward", "smiles": AMIDE, "batch_size": 0}, 400, "'batch_size' must be 1 or more, not 0"),
    ({"model": "forward", "smiles": AMIDE, "batch_size": -5}, 400, "'batch_size' must be 1 or more, not -5"),
    ([AMIDE], 400, "must be a JSON object"),
    ({"model": "forward", "smiles": [AMIDE] * (server.MAX_QUERIES + 1)}, 413, f"at most {server.MAX_QUERIES}"),
])
def test_a_request_that_cannot_be_answered_says_why_and_the_server_goes_on(address, body, status, says):
    got_status, payload = call(address, "POST", "/predict", body)
    assert got_status == status and says in payload["error"]
    assert call(address, "GET", "/health") == (200, {"status": "ok"})


@pytest.mark.parametrize("raw, says", [(b'{"smiles": "CCO", "model": "forward"', "not JSON"),
                                       # JSON Lines: 'the body is not JSON: Extra data: line 2 column 1 (char 18)'
                                       (b'{"smiles": "CCO"}\n{"smiles": "CCN"}\n',
                                        "the body goes on after its JSON value, at line 2, column 1; "
                                        'send one object, its queries as a list: {"smiles": ["CCO", "CCN"]}'),
                                       # curl -d '' (or a client that lost its body): 'Expecting value: line 1 ...'
                                       (b"", 'the body is empty: send a JSON object, such as {"smiles": "CCO"}'),
                                       (b" \r\n", "the body is empty"),
                                       (b'{"smiles": "CCO", "model": "forward", "temperature": NaN}',
                                        "NaN is not a number JSON allows"),
                                       # a Windows editor's or .NET's UTF-16 ('utf-8' codec can't decode byte 0xff)
                                       (b"\xff\xfe{\x00}\x00", "the body is not UTF-8 (byte 0xff at position 0); "
                                                               "send the JSON as UTF-8"),
                                       ('{"smiles": "caf\xe9"}'.encode("latin-1"),
                                        "the body is not UTF-8 (byte 0xe9 at position 15)"),
                                       (b"\xef\xbb\xbf" + '{"smiles": "caf\xe9"}'.encode("latin-1"),
                                        "the body is not UTF-8 (byte 0xe9 at position 18)"),
                                       # json reads nesting recursively: 100,000 levels raised RecursionError (500)
                                       (b'{"smiles": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                                        "nested too deeply")])
def test_a_body_that_is_not_json_is_refused(address, raw, says):
    status, payload = call(address, "POST", "/predict", raw=raw)
    assert status == 400 and says in payload["error"]


def test_a_number_too_long_to_read_is_refused_without_advice_for_the_servers_code(address):
    """It was 'not JSON: Exceeds the limit (4300 digits) ...; use sys.set_int_max_str_digits() to increase the
    limit'."""
    status, payload = call(address, "POST", "/predict", raw=b'{"model": "forward", "smiles": "CCO", "seed": %s}'
                           % (b"9" * 5000))
    assert (status, payload) == (400, {"error": "a whole number of 5,000 digits in the body; no option takes one of "
                                                "more than 100"})


@pytest.mark.parametrize("body", [{"model": "forward", "smiles": AMIDE, "x" * 100_000: 1},
                                  {"model": "forward", "smiles": AMIDE, "method": "x" * 100_000}])
def test_a_long_unknown_name_is_not_sent_back_whole(address, body):
    """An unknown option or method was quoted whole in the error: a 100,000-character one came back in full."""
    status, payload = call(address, "POST", "/predict", body)
    assert status == 400 and "'xxxxxxxxxx" in payload["error"] and len(payload["error"]) < 400


def test_an_option_given_twice_is_refused(address):
    """The last was taken without a word: {"smiles": "CCO", "smiles": "CCN"} answered CCN alone."""
    status, payload = call(address, "POST", "/predict", raw=b'{"model": "forward", "smiles": "CCO", "smiles": "CCN"}')
    assert (status, payload) == (400, {"error": "'smiles' is given twice in one object; give it once"})


def test_a_body_that_begins_with_a_byte_order_mark_is_read(address):
    """JSON saved by a Windows editor begins with a UTF-8 byte order mark, which JSON's RFC lets a reader ignore:
    it was refused, 'Unexpected UTF-8 BOM (decode using utf-8-sig)'."""
    body = json.dumps({"model": "forward", "smiles": AMIDE}).encode()
    status, payload = call(address, "POST", "/predict", raw=b"\xef\xbb\xbf" + body)
    assert status == 200 and answers(payload["results"][0]) == answers(call(address, "POST", "/predict",
                                                                           raw=body)[1]["results"][0])


def test_a_round_trip_k_out_of_range_is_refused_before_any_decoding(models, monkeypatch):
    """It was checked on the first window's answers: up to 256 queries' retrosynthesis decoded before the 400."""
    decoded: list[list[str]] = []
    monkeypatch.setattr(models["retro"], "predict", lambda queries, **options: decoded.append(queries) or [])
    with pytest.raises(server.RequestError, match="round-trip top-k must be a whole number between 1 and 10, not 11"):
        server.Service(models).predict({"model": "retro", "smiles": [PARACETAMOL] * 3, "round_trip": "forward",
                                        "round_trip_k": 11})
    assert decoded == []


def test_a_value_nested_too_deeply_to_quote_is_refused(models):
    deep: list = []  # a body nested just under the parser's limit reads, and quoting it back recursed past it (500)
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(server.RequestError, match="'n_best' must be a whole number, not a value nested too deeply"):
        server.parse_request({"smiles": AMIDE, "model": "forward", "n_best": deep}, models)


def test_the_transport_is_checked_before_any_work(address):
    body = json.dumps({"model": "forward", "smiles": AMIDE}).encode()
    # a web page can post text/plain across origins without asking first; JSON needs a preflight never granted
    assert call(address, "POST", "/predict", raw=body, headers={"Content-Type": "text/plain"})[0] == 415
    # a compressed body was read as it came: 'the body is not UTF-8 (byte 0x8b at position 1)'
    assert call(address, "POST", "/predict", raw=gzip.compress(body), headers={"Content-Encoding": "gzip"}) == (
        415, {"error": "Content-Encoding 'gzip': the body is read as sent; send the JSON uncompressed"})
    assert call(address, "POST", "/predict", raw=body, headers={"Content-Encoding": "identity"})[0] == 200
    # a web page reaching loopback through a name it controls (DNS rebinding) sends that name as its Host
    status, payload = call(address, "POST", "/predict", raw=body, headers={"Host": "evil.example:80"})
    assert status == 403 and "localhost or a loopback address only, not to 'evil.example'" in payload["error"]
    assert call(address, "GET", "/models", headers={"Host": "evil.example"})[0] == 403
    assert call(address, "GET", "/health", headers={"Host": f"localhost:{address[1]}"})[0] == 200
    assert call(address, "GET", "/health", headers={"Host": f"[::1]:{address[1]}"})[0] == 200
    connection = http.client.HTTPConnection(*address, timeout=30)  # a page's preflight for a JSON post
    connection.request("OPTIONS", "/predict", headers={"Origin": "https://evil.example",
                                                       "Access-Control-Request-Method": "POST"})
    response = connection.getresponse()
    assert response.status == 405 and response.getheader("Access-Control-Allow-Origin") is None
    connection.close()
    assert call(address, "GET", "/predict")[0] == 405


def test_a_request_refused_for_its_host_names_it_and_tells_a_reverse_proxy_what_to_send(address):
    """Caddy and Traefik pass the client's Host on to the server behind them, by default: every request through them
    got 403 'this server answers requests to localhost only', naming neither the host refused nor how to get past."""
    status, payload = call(address, "GET", "/health", headers={"Host": "api.example.com", "X-Forwarded-Proto": "https"})
    assert (status, payload) == (403, {"error": server.NOT_LOOPBACK.format(host="'api.example.com'")})
    assert "Host: localhost" in payload["error"] and "reverse proxy" in payload["error"]
    # nginx sends the host its proxy_pass names (proxy_pass http://molspec; an upstream block's name): told 'nginx does
    # by default' of a proxy that was nginx with its defaults
    status, payload = call(address, "GET", "/health", headers={"Host": "molspec"})
    assert status == 403 and ("nginx sends the host its proxy_pass names: http://127.0.0.1:8000 does, an upstream "
                              "block's name does not, nor does proxy_set_header Host $host") in payload["error"]
    status, payload = call(address, "GET", "http://lab.example:8000/health")  # an absolute target names its host
    assert status == 403 and "not to 'lab.example' " in payload["error"]
    assert call(address, "GET", "/nothing")[0] == 404
    assert call(address, "POST", "/elsewhere", {"smiles": AMIDE})[0] == 404


def test_the_server_header_names_no_python_release(address):
    """It was the standard library's "BaseHTTP/0.6 Python/3.11.7": which release (and so which published flaws)."""
    connection = http.client.HTTPConnection(*address, timeout=30)
    connection.request("GET", "/health")
    response = connection.getresponse()
    response.read()
    connection.close()
    assert response.getheader("Server") == "molspec"


@pytest.mark.parametrize("method, path, allow", [("PUT", "/predict", "POST"), ("DELETE", "/predict", "POST"),
                                                 ("PATCH", "/predict", "POST"), ("HEAD", "/predict", "POST"),
                                                 # these three still did, after the four above had handlers
                                                 ("TRACE", "/health", "GET, HEAD"), ("CONNECT", "/predict", "POST"),
                                                 ("BREW", "/models", "GET, HEAD"),
                                                 ("POST", "/health", "GET, HEAD"), ("POST", "/models", "GET, HEAD")])
def test_a_method_a_route_does_not_take_gets_405_in_json_with_the_method_it_takes(address, method, path, allow):
    connection = http.client.HTTPConnection(*address, timeout=30)  # these got the standard library's HTML 501
    connection.request(method, path)
    response = connection.getresponse()
    data = response.read()  # none for HEAD
    assert (response.status, response.getheader("Allow"), response.getheader("Content-Type")) == (
        405, allow, "application/json")
    assert (data == b"") if method == "HEAD" else (f"{path} takes {allow}, not {method}" in json.loads(data)["error"])
    connection.close()
    if method == "HEAD":  # http.client reads no body after HEAD: read what the server sent, the headers and no more
        with socket.create_connection(address, timeout=30) as raw:
            raw.sendall(f"HEAD {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
            received = b""
            while b"\r\n\r\n" not in received and (chunk := raw.recv(65536)):
                received += chunk
            raw.settimeout(0.5)  # the connection may stay open for the next request (it did wait for the server's
            try:                 # 30 s idle close, and lost that race now and then: a 30 s test that failed)
                received += raw.recv(65536)
            except TimeoutError:
                pass
        assert received.startswith(b"HTTP/1.1 405") and received.endswith(b"\r\n\r\n")  # headers alone
    assert call(address, "PUT", "/nothing", {"smiles": AMIDE})[0] == 404


@pytest.mark.parametrize("path, status, allow", [("/health", 405, "GET, HEAD"), ("/predict", 405, "POST"),
                                                 ("*", 405, "GET, HEAD, POST"), ("/nothing", 404, None)])
def test_options_names_the_methods_the_path_takes(address, path, status, allow):
    """Allow said GET, HEAD, POST for every path, /health (which refuses POST) and paths that are no route alike."""
    answers = exchange(address, f"OPTIONS {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    assert [(line.split()[1], fields.get("allow")) for line, fields, _ in answers] == [(str(status), allow)]


@pytest.mark.parametrize("path", ["/health", "/models"])
def test_head_answers_what_get_answers_without_the_body(address, path):
    """A monitor's HEAD /health got 405 (HTTP wants HEAD wherever GET is taken)."""
    connection = http.client.HTTPConnection(*address, timeout=30)
    connection.request("GET", path)
    got = connection.getresponse()
    body = got.read()
    connection.request("HEAD", path)  # the same connection: HEAD must leave it in step for the next request
    head = connection.getresponse()
    assert (head.status, head.read(), head.getheader("Content-Length")) == (200, b"", str(len(body)))
    connection.request("GET", "/health")
    assert connection.getresponse().status == 200
    connection.close()


@pytest.mark.parametrize("request_head, status", [
    (b"NONSENSE\r\n\r\n", 400),  # a request line of one word
    (b"GET /health HTTP/1.1x\r\nHost: localhost\r\n\r\n", 400),
    (b"GET /health HTTP/2.0\r\nHost: localhost\r\n\r\n", 505),
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n", 414),
    (b"GET /health HTTP/1.1\r\nHost: localhost\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", 431)],
    ids=["one-word", "bad-version", "http2", "long-path", "many-headers"])
def test_a_request_the_server_cannot_read_gets_its_error_in_json_and_the_connection_closes(address, request_head,
                                                                                          status):
    with socket.create_connection(address, timeout=30) as raw:  # these got the standard library's HTML page
        raw.sendall(request_head)
        received = b"".join(iter(lambda: raw.recv(65536), b""))  # the server closes when it has answered
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert lines[0].startswith(f"HTTP/1.1 {status} ") or lines[0].startswith(f"HTTP/1.0 {status} ")
    assert (fields["content-type"], fields["connection"], int(fields["content-length"])) == (
        "application/json", "close", len(body))
    assert json.loads(body)["error"] and b"<" not in body
    assert call(address, "GET", "/health") == (200, {"status": "ok"})


def test_a_query_string_does_not_change_the_route(address):
    assert call(address, "GET", "/models?x=1") == call(address, "GET", "/models")
    assert call(address, "GET", "/health?x") == (200, {"status": "ok"})
    assert call(address, "GET", "/predict?x=1")[0] == 405


def test_a_body_left_unread_does_not_become_the_next_request(address):
    connection = http.client.HTTPConnection(*address, timeout=30)  # one connection, kept alive where it can be
    body = json.dumps({"model": "forward", "smiles": AMIDE}).encode()
    for path, kind in (("/elsewhere", "application/json"), ("/predict", "text/plain")):
        connection.request("POST", path, body=body, headers={"Content-Type": kind})
        response = connection.getresponse()
        assert response.status in (404, 415)
        response.read()
        connection.request("GET", "/health")  # the refused body must not be read as this request
        response = connection.getresponse()
        assert (response.status, json.loads(response.read())) == (200, {"status": "ok"})
    connection.close()


def test_a_body_over_the_limit_is_refused_unread(address):
    connection = http.client.HTTPConnection(*address, timeout=30)
    connection.putrequest("POST", "/predict")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(server.MAX_BODY_BYTES + 1))
    connection.endheaders()  # nothing of the body is sent: the server answers from the headers
    response = connection.getresponse()
    assert response.status == 413 and "at most" in json.loads(response.read())["error"]
    connection.close()
    assert call(address, "GET", "/health")[0] == 200


@pytest.mark.parametrize("lengths, status, message", [
    (["-5"], 400, "Content-Length '-5' is not a number of bytes"),  # was 413, "too large"
    (["+34"], 400, "Content-Length '+34' is not a number of bytes"),  # int() read it as 34
    (["3_4"], 400, "Content-Length '3_4' is not a number of bytes"),
    (["abc"], 400, "Content-Length 'abc' is not a number of bytes"),  # was 411, "a body needs a Content-Length"
    (["5", "17"], 400, "2 different Content-Length headers; send one"),  # the first framed the body, read as JSON
    ([], 411, "a body needs a Content-Length"),
])
def test_a_content_length_that_frames_no_body_is_refused_saying_why(address, lengths, status, message):
    body = json.dumps({"smiles": "CCO"}).encode()
    with socket.create_connection(address, timeout=30) as raw:
        headers = "".join(f"Content-Length: {n}\r\n" for n in lengths)
        raw.sendall(f"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{headers}"
                    "\r\n".encode() + body)
        received = b"".join(iter(lambda: raw.recv(65536), b""))  # the server closes after a refusal
    head, _, payload = received.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status}".encode()) and message in json.loads(payload)["error"]


def test_a_body_that_stops_short_gets_408_and_closes_without_a_traceback(models, caplog):
    running = server.serve([models["forward"]], "127.0.0.1", 0, read_timeout_s=0.5)  # not 30 s: the test waits it
    threading.Thread(target=running.serve_forever, daemon=True).start()
    with caplog.at_level(logging.INFO, logger="molspec_core.server"):
        connection = http.client.HTTPConnection(*running.server_address[:2], timeout=30)
        connection.putrequest("POST", "/predict")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", "100")
        connection.endheaders(b"{")  # 1 byte of the 100, then silence
        response = connection.getresponse()
        status, payload, closing = response.status, json.loads(response.read()), response.getheader("Connection")
        connection.close()
    running.shutdown()
    running.server_close()
    assert status == 408 and "stopped short of its 100 bytes" in payload["error"] and closing == "close"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]  # was a 500 and two tracebacks


def test_a_clients_control_characters_reach_the_log_escaped(address, caplog):
    """The log took a request line as sent: its ESC sequences coloured the operator's terminal, and a CR let a forged
    line overwrite the real one."""
    with caplog.at_level(logging.INFO, logger="molspec_core.server"):
        with socket.create_connection(address, timeout=30) as raw:
            raw.sendall(b"GET /x\x1b[31m\rforged HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            assert b"".join(iter(lambda: raw.recv(65536), b"")).startswith(b"HTTP/1.1 400 ")
    logged = [r.getMessage() for r in caplog.records]
    assert any('"GET /x\\x1b[31m\\x0dforged HTTP/1.1" 400' in line for line in logged), logged
    assert not [line for line in logged if "\x1b" in line or "\r" in line]


def test_a_client_that_goes_away_before_its_answer_is_logged_quietly(models, caplog):
    running = server.serve([models["forward"]], "127.0.0.1", 0)
    asked, answer = threading.Event(), threading.Event()
    decode = running.service.predict

    def predict(body: object, gone) -> dict:  # type: ignore[no-untyped-def]  # held until the client has gone
        asked.set()
        answer.wait(30)
        return decode(body, gone)

    running.service.predict = predict  # type: ignore[method-assign]
    threading.Thread(target=running.serve_forever, daemon=True).start()
    body = json.dumps({"smiles": AMIDE}).encode()
    with caplog.at_level(logging.INFO, logger="molspec_core.server"):
        client = socket.create_connection(running.server_address[:2], timeout=30)
        client.sendall(b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert asked.wait(30)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        client.close()
        answer.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not [r for r in caplog.records
                                                    if "went away" in r.getMessage() or r.levelno >= logging.ERROR]:
            time.sleep(0.02)
    running.shutdown()
    running.server_close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]  # was "POST /predict failed"
    assert [r.levelno for r in caplog.records if "the client went away before its answer" in r.getMessage()] == [
        logging.INFO]


def test_a_request_whose_client_has_gone_is_not_decoded(models, monkeypatch, caplog):
    """A client that gave up waiting (its own timeout, a Ctrl-C) left its request to decode in full: minutes of
    the models held for no one, ahead of the requests still waited for."""
    running = server.serve([models["forward"]], "127.0.0.1", 0)
    decoded: list[list[str]] = []
    decode = models["forward"].predict

    def predict(queries, **options):  # type: ignore[no-untyped-def]
        decoded.append(list(queries))
        return decode(queries, **options)

    monkeypatch.setattr(models["forward"], "predict", predict)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    body = json.dumps({"smiles": [AMIDE, "CC(=O)O.OCC"], "batch_size": 1}).encode()
    with caplog.at_level(logging.INFO, logger="molspec_core.server"):
        with running.service.decoding:  # another request decodes: this one waits its turn
            with socket.create_connection(running.server_address[:2], timeout=30) as client:
                client.sendall(b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 30  # its turn comes: it finds the client gone
        while time.monotonic() < deadline and not [r for r in caplog.records if "went away" in r.getMessage()]:
            time.sleep(0.02)
    assert call(running.server_address[:2], "POST", "/predict", {"smiles": AMIDE})[0] == 200  # the next is answered
    running.shutdown()
    running.server_close()
    assert decoded == [[AMIDE]]  # the next request's alone
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records if "went away" in r.getMessage()] == [
        "the client went away before its answer (2 of 2 queries not decoded)"]


class Taken:
    """A decoding lock that fails the test once taken: what is refused must be refused before its turn comes."""

    def __enter__(self):
        raise AssertionError("the request waited its turn to decode")

    def __exit__(self, *exc_info):
        return False


@pytest.mark.parametrize("options, refusal", [
    ({"method": "beam", "n_best": 51}, "n_best must be between 1 and 50, not 51"),
    ({"method": "spec-lookup", "draft_len": 65}, "draft_len must be between 0 and 64, not 65"),
    ({"augment": 21}, "augment must be between 1 and 20, not 21"),
    ({"method": "spec-sample", "temperature": 0}, "temperature must be between 0.01 and 100"),
], ids=["n_best", "draft_len", "augment", "temperature"])
def test_an_option_out_of_range_is_refused_before_the_request_waits_its_turn(models, options, refusal):
    """n_best 51, say, was refused by Predictor.predict inside the decoding lock: a client waited behind the request
    decoding (minutes, for a large retro beam search) for its 400."""
    service = server.Service({"forward": models["forward"]})
    service.decoding = Taken()  # type: ignore[assignment]
    with pytest.raises(server.RequestError, match=f"^{re.escape(refusal)}"):
        service.predict({"smiles": AMIDE, **options})


def test_a_value_error_from_inside_the_decoder_is_a_logged_500_not_the_clients_400(models, monkeypatch, caplog):
    """A ValueError raised while decoding (a bug: NumPy's 'operands could not be broadcast', say) was taken for an
    option refused: the client got 400 and its words, and the server's log had nothing of it."""
    forward = models["forward"]
    running = server.serve([forward], "127.0.0.1", 0)
    threading.Thread(target=running.serve_forever, daemon=True).start()

    def broken(*args, **kwargs):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(forward, "decode", broken)
    with caplog.at_level(logging.INFO, logger="molspec_core.server"):
        status, payload = call(running.server_address[:2], "POST", "/predict", {"smiles": AMIDE})
    running.shutdown()
    running.server_close()
    assert (status, payload) == (500, {"error": "internal error; the server's log has the details"})
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [ValueError]


def allocating_too_much() -> None:
    """What torch does where the host has not the memory asked for (here 2**60 bytes, past any machine's): its CPU
    allocator raises a RuntimeError."""
    torch.empty(2**60, dtype=torch.uint8)


# The 503 of a request out of memory names each setting that holds a decoder call's rows: n_best 50 read in 20
# writings (1,000 rows) ran a 30-residue peptide out of memory, and the advice named n_best and fewer queries alone.
OUT_OF_MEMORY = ("out of memory; send fewer queries, or a smaller n_best, augment or batch_size (a decoder call holds "
                 "n_best rows for each query of its batch, or for each writing of one query)")


def raising(exc: BaseException):  # type: ignore[no-untyped-def]
    def exhausting() -> None:
        raise exc
    return exhausting


@pytest.mark.parametrize("exhausting", [raising(MemoryError()), allocating_too_much,
                                        raising(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 "
                                                                       "GiB"))], ids=["host", "host-in-torch", "gpu"])
def test_a_request_that_runs_out_of_memory_gets_503_and_what_to_send(models, monkeypatch, exhausting, caplog):
    """A GPU's out of memory (torch.OutOfMemoryError, a RuntimeError, not a MemoryError) was a 500 'internal error'
    with a traceback in the log, where the host's got 503 and what to send instead; so was the host's memory run out
    inside torch (its CPU allocator's RuntimeError), the likeliest way a CPU server runs out."""
    forward = models["forward"]
    running = server.serve([forward], "127.0.0.1", 0)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    monkeypatch.setattr(forward, "decode", lambda *args, **kwargs: exhausting())

    status, payload = call(running.server_address[:2], "POST", "/predict", {"smiles": AMIDE})
    running.shutdown()
    running.server_close()
    assert (status, payload) == (503, {"error": OUT_OF_MEMORY})
    assert not [r for r in caplog.records if r.exc_info]  # no traceback logged: no bug


def test_a_request_out_of_memory_after_its_first_window_keeps_the_windows_decoded(models, monkeypatch):
    """Out of memory in a later window, the whole request got 503, the answers of the windows decoded before it
    (minutes of a GPU's beam search) dropped. They stand; this window's queries and the rest say why they were not
    decoded. Out of memory in the first window, it is refused whole (503), as before."""
    forward = models["forward"]
    decode, windows = forward.predict, []

    def out_in_the_second(queries, **options):  # type: ignore[no-untyped-def]
        windows.append(list(queries))
        if len(windows) == 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return decode(queries, **options)

    monkeypatch.setattr(forward, "predict", out_in_the_second)
    queries = [AMIDE, "CC(=O)O.OCC", "Brc1ccccc1.OB(O)c1ccccc1"]
    result = server.Service({"forward": forward}).predict({"smiles": queries, "batch_size": 1})["results"]
    assert windows == [[q] for q in queries[:2]]
    assert [r["query"] for r in result] == queries and result[0]["predictions"][0]["smiles"] == "CC(=O)NCc1ccccc1"
    assert [r["error"] for r in result] == [None] + [f"not decoded: {OUT_OF_MEMORY}; send this query again"] * 2
    windows[:] = [["a window"]]  # the next is the second: out of memory in the request's first window
    with pytest.raises(torch.OutOfMemoryError):
        server.Service({"forward": forward}).predict({"smiles": queries, "batch_size": 1})


def test_a_client_still_waiting_is_not_taken_for_gone(models):
    service = server.Service({"forward": models["forward"]})
    looked: list[int] = []

    def gone() -> bool:
        looked.append(1)
        return False

    result = service.predict({"smiles": [AMIDE, "CC(=O)O.OCC"], "batch_size": 1}, gone)["results"]
    assert [r["error"] for r in result] == [None, None] and len(looked) > 2  # before each window and decoder step


def test_a_client_that_leaves_while_a_window_decodes_stops_it_at_the_next_step(models):
    """'gone' was looked at between windows of queries alone, and a window (256 queries at batch size 8; a minute
    and more for retro beam search) decoded in full for a client that had left."""
    service = server.Service({"forward": models["forward"]})
    looked: list[int] = []

    def gone() -> bool:  # still there as the window begins, gone from its first decoder step
        looked.append(1)
        return len(looked) > 1

    with pytest.raises(server.ClientGone, match="^3 of 3 queries not decoded, some begun$"):
        service.predict({"smiles": [AMIDE, "CC(=O)O.OCC", "Brc1ccccc1.OB(O)c1ccccc1"]}, gone)
    assert len(looked) == 2


def test_a_client_that_leaves_while_a_windows_queries_are_read_stops_it_at_the_next_query(models, monkeypatch):
    """'gone' and the budget were looked at between windows and at decoder steps alone; reading a window's queries
    with RDKit runs no step: 100 rings of 2,000 atoms, each refused as too long after 0.4 s of RDKit, held the
    models for 42 s after their client had left (1,000 of them, a request's most, 13 minutes)."""
    forward = models["forward"]
    service = server.Service({"forward": forward})
    read: list[str] = []
    prepare = forward.prepare

    def counted(text: str, ion_writing: bool = False):
        read.append(text)
        return prepare(text, ion_writing)

    monkeypatch.setattr(forward, "prepare", counted)
    too_long = "C1" + "C" * 500 + "C1"  # refused after RDKit has read it: no decoder step follows
    with pytest.raises(server.ClientGone, match="^3 of 3 queries not decoded"):
        service.predict({"smiles": [too_long] * 3}, lambda: len(read) >= 1)  # gone once the first is read
    assert read == [too_long]


def test_a_client_that_leaves_while_recorded_reactions_are_read_stops_them_at_the_next_query(models, monkeypatch):
    """A request's recorded reactions were all read (RDKit: 3-5 s for an outcome of a 5,000-atom ring) as it arrived,
    before its turn, with no look at its client: 800 such queries in a body read for an hour after it had gone."""
    read: list[str] = []

    def counted(table, task):  # type: ignore[no-untyped-def]
        read.extend(table.queries)
        return with_recorded(table, task)

    monkeypatch.setattr(server, "with_recorded", counted)
    service = server.Service({"forward": models["forward"]})
    reactions = [f"{AMIDE}>>CC(=O)NCc1ccccc1", "CC(=O)O.OCC>>CCOC(C)=O", "CCO>>CC=O"]
    with pytest.raises(server.ClientGone, match="^3 of 3 queries not decoded"):
        service.predict({"smiles": reactions}, lambda: len(read) >= 1)  # gone once the first has been read
    assert read == reactions[:1]


def test_a_window_whose_queries_are_read_past_the_budget_and_a_time_limit_stops_there(models):
    """The same for the budget: the queries read by then keep their own refusals, the rest are not read."""
    service = server.Service({"forward": models["forward"]}, budget_s=0.0)
    ticks = iter(range(1000))
    # a second a look: the four queries looked at for recorded outcomes (read_query) by 5 s, past 0 + 6 s as the
    # model's service is to read the second
    service.clock = lambda: float(next(ticks))
    too_long = "C1" + "C" * 500 + "C1"
    result = service.predict({"smiles": [too_long] * 4, "time_limit_s": 6})["results"]
    assert [r["error"].split(";")[0] for r in result] == ["query has 504 tokens"] + [
        "not decoded: the request ran past its 0 s"] * 3


def test_a_server_stopping_while_a_window_decodes_stops_it_and_says_so(models):
    """The stop was looked at between windows alone: a SIGTERM waited for the whole window (a minute and more
    for retro beam search) before the server could stop. Now the window has stop_grace_s (0 here) to end."""
    service = server.Service({"forward": models["forward"]})
    service.stop_grace_s = 0.0
    looked: list[int] = []

    def gone() -> bool:  # the server is told to stop once the window has begun
        looked.append(1)
        if len(looked) > 1:
            service.stopping.set()
        return False

    queries = [AMIDE, "CC(=O)O.OCC", "Brc1ccccc1.OB(O)c1ccccc1"]
    result = service.predict({"smiles": queries, "batch_size": 2}, gone)["results"]
    assert [r["query"] for r in result] == queries and len(looked) == 2
    assert all(r["error"] == "not decoded: the server is stopping; send this query again" and not r["predictions"]
               for r in result)


def test_a_window_stopped_keeps_the_batches_it_had_decoded(models, monkeypatch):
    """A window stopped (the server stopping, or past a request's budget) was dropped whole, its batches already
    decoded too: 300 beam-5 queries stopped 3 s in came back all 'not decoded'. Its batches decoded by then (of
    like length: the two shorter queries here) stand."""
    forward = models["forward"]
    service = server.Service({"forward": forward})
    service.stop_grace_s = 0.0
    decode = forward._decode_limited

    def first_batch_then_stop(*args, **kwargs):
        decoded = decode(*args, **kwargs)
        service.stopping.set()
        return decoded

    monkeypatch.setattr(forward, "_decode_limited", first_batch_then_stop)
    queries = [AMIDE, "CC(=O)O.OCC", "Brc1ccccc1.OB(O)c1ccccc1"]
    result = service.predict({"smiles": queries, "batch_size": 2})["results"]
    assert [r["query"] for r in result] == queries
    assert [r["error"] for r in result] == [None, None, "not decoded: the server is stopping; send this query again"]
    assert result[0]["predictions"][0]["smiles"] == "CC(=O)NCc1ccccc1" and result[1]["predictions"]


def test_a_window_stopped_in_its_round_trips_keeps_the_answers_checked(models, monkeypatch):
    """With a round trip, an answer stands once its check is done; the rest of the window says it was stopped."""
    service = server.Service({"retro": models["retro"], "forward": models["forward"]})
    service.stop_grace_s = 0.0

    def check_then_stop(result, *args, **kwargs):
        checked = check_round_trip(result, *args, **kwargs)
        if result != []:  # parse_request checks the options on no answers first
            service.stopping.set()
        return checked

    monkeypatch.setattr(server, "check_round_trip", check_then_stop)
    queries = [PARACETAMOL, "CCOC(C)=O", "CC(=O)NCc1ccccc1"]
    result = service.predict({"model": "retro", "smiles": queries, "round_trip": "forward", "batch_size": 2})
    first, *rest = result["results"]
    assert first["error"] is None and first["predictions"] and first["predictions"][0]["round_trip"] is not None
    assert [r["error"] for r in rest] == ["not decoded: the server is stopping; send this query again"] * 2


def test_a_client_that_stops_sending_but_reads_on_gets_its_answer(address):
    """A client that shut its side for writing once its request was sent (curl with a body from a pipe, nc -N, a
    script's shutdown(SHUT_WR)) was taken for gone and got no answer: it is sent an interim 100 Continue, which a
    client that has closed resets and one still reading reads past."""
    body = json.dumps({"model": "forward", "smiles": AMIDE}).encode()
    answers = exchange(address, b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body), half_close=True)
    assert [line.split()[1] for line, _, _ in answers] == ["100", "200"]
    assert json.loads(answers[-1][2])["results"][0]["predictions"][0]["smiles"] == "CC(=O)NCc1ccccc1"


def test_a_kept_alive_connection_reset_by_its_client_is_logged_quietly(models, monkeypatch, caplog):
    """A client (a connection pool) resetting a kept-alive connection between requests printed a traceback to the
    server's console: the read of its next request line raised ConnectionResetError."""
    running = server.serve([models["forward"]], "127.0.0.1", 0)
    failures: list[object] = []
    monkeypatch.setattr(running, "handle_error", lambda request, address: failures.append(address))
    threading.Thread(target=running.serve_forever, daemon=True).start()
    with caplog.at_level(logging.INFO, logger="molspec_core.server"):
        client = socket.create_connection(running.server_address[:2], timeout=30)
        client.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        received = b""
        while not received.endswith(b'{"status": "ok"}'):  # the whole answer (headers and body leave apart)
            received += client.recv(65536)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        client.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not failures and not [r for r in caplog.records
                                                                    if "reset" in r.getMessage()]:
            time.sleep(0.02)
    running.shutdown()
    running.server_close()
    assert failures == []
    assert [r.levelno for r in caplog.records if "the client reset the connection" in r.getMessage()] == [logging.INFO]


@contextlib.contextmanager
def answering_a_slow_reader(models, answer: dict, read_timeout_s: float, buffer: int,
                            close: bool = False) -> Iterator[socket.socket]:
    """A server whose /predict answers `answer` (its write timeout read_timeout_s), and a client connected to it that
    has sent a request (asking to close after the answer where `close`) and takes the answer only as fast as it reads
    (a receive buffer of `buffer` bytes); both closed after."""
    running = server.serve([models["forward"]], "127.0.0.1", 0, read_timeout_s=read_timeout_s)
    running.service.predict = lambda body, gone: answer  # type: ignore[method-assign]
    threading.Thread(target=running.serve_forever, daemon=True).start()
    body = json.dumps({"smiles": AMIDE}).encode()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
    client.connect(running.server_address[:2])
    client.settimeout(30)
    try:
        client.sendall(b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n%s"
                       b"Content-Length: %d\r\n\r\n%s" % (b"Connection: close\r\n" * close, len(body), body))
        yield client
    finally:
        client.close()
        running.shutdown()
        running.server_close()


def test_a_client_that_does_not_read_its_answer_is_logged_quietly(models, caplog):
    """A client that stopped reading (its answer filling the socket's buffers) was logged as a bug, 'POST /predict
    failed' with a traceback, and a 500 was written into the middle of the 200's body."""
    with caplog.at_level(logging.INFO, logger="molspec_core.server"), \
            answering_a_slow_reader(models, {"results": ["x" * 30_000_000]}, 0.5, 4096):  # and reads nothing
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not [r for r in caplog.records
                                                    if "its answer" in r.getMessage() or r.levelno >= logging.ERROR]:
            time.sleep(0.02)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert [(r.levelno, r.getMessage().split(": ", 1)[1]) for r in caplog.records if "its answer" in r.getMessage()] \
        == [(logging.INFO, "the client did not read its answer of 30,000,017 bytes (a part every 0.5 s, 64 KiB/s in "
                           "all)")]
    assert not [r for r in caplog.records if '" 500 ' in r.getMessage()]


def test_a_client_reading_a_large_answer_slowly_but_steadily_reads_it_whole(models):
    """The write timeout bounded the whole answer: a live client reading a large answer (a thousand queries' lists)
    more slowly than it took to send was cut off mid-body. Now each part of the answer has the timeout."""
    answer = {"results": ["x" * 8_000_000]}
    received = b""
    with answering_a_slow_reader(models, answer, 0.5, 65536, close=True) as client:
        while chunk := client.recv(65536):  # at most 64 KiB in 0.02 s: 2.5 s for the whole, past the timeout
            received += chunk
            time.sleep(0.02)
    assert json.loads(received.partition(b"\r\n\r\n")[2]) == answer


def test_a_client_reading_an_answer_in_a_trickle_is_cut_at_the_rate_the_answer_needs(models, monkeypatch, caplog):
    """A part every timeout (64 KiB in 30 s) kept a large answer's connection, and its thread, for hours."""
    monkeypatch.setattr(server, "WRITE_MIN_RATE", 4_000_000)  # bytes a second: 2 s for this answer
    with caplog.at_level(logging.INFO, logger="molspec_core.server"), \
            answering_a_slow_reader(models, {"results": ["x" * 8_000_000]}, 1.0, 65536) as client:
        received = 0
        while chunk := client.recv(65536):  # at most 64 KiB in 0.05 s, a part well within the timeout: 6 s in all
            received += len(chunk)
            time.sleep(0.05)
    assert received < 8_000_000
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records if "its answer" in r.getMessage()] == [
        "the client did not read its answer of 8,000,017 bytes (a part every 1 s, 3906 KiB/s in all)"]


def test_requests_at_once_are_each_answered(address, models):
    queries = [AMIDE, "CC(=O)O.OCC", "Brc1ccccc1.OB(O)c1ccccc1"]
    got: dict[str, dict] = {}

    def ask(query: str) -> None:
        got[query] = call(address, "POST", "/predict", {"model": "forward", "smiles": query})[1]

    threads = [threading.Thread(target=ask, args=(q,)) for q in queries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for query in queries:
        want = models["forward"].predict(query)
        assert got[query]["results"][0]["predictions"][0]["smiles"] == want.predictions[0].smiles


def test_a_request_past_its_budget_keeps_its_answers_and_says_which_queries_were_not_decoded(models):
    running = server.serve([models["forward"]], "127.0.0.1", 0, budget_s=0.0)  # the first window only
    threading.Thread(target=running.serve_forever, daemon=True).start()
    queries = [AMIDE, "CC(=O)O.OCC", "Brc1ccccc1.OB(O)c1ccccc1"]
    status, payload = call(running.server_address[:2], "POST", "/predict", {"smiles": queries, "batch_size": 1})
    running.shutdown()
    running.server_close()
    first, *rest = payload["results"]
    assert status == 200 and [r["query"] for r in payload["results"]] == queries
    assert first["error"] is None and first["predictions"][0]["smiles"] == "CC(=O)NCc1ccccc1"
    assert all("ran past its 0 s; send this query again" in r["error"] and not r["predictions"] for r in rest)
    assert [r["method"] for r in payload["results"]] == ["greedy"] * 3  # the queries not decoded said ""


def test_queries_read_in_several_writings_are_decoded_a_window_each_so_the_budget_is_kept_between_them(models):
    """Read in several writings, a request's queries went in windows of 256 (service.window_size without augment):
    past its budget, it decoded on until a query's time limit more had passed, not stopping between queries."""
    service = server.Service({"forward": models["forward"]}, budget_s=0.0)  # the first window only
    queries = [AMIDE, "CC(=O)O.OCC", "Brc1ccccc1.OB(O)c1ccccc1"]
    first, *rest = service.predict({"smiles": queries, "augment": 2})["results"]
    assert first["error"] is None and first["predictions"]
    assert all(r["error"] == "not decoded: the request ran past its 0 s; send this query again" for r in rest)
    # a query not decoded read no writing: it said "writings": 1, as if one writing's answers had been pooled
    assert (first["writings"], [r["writings"] for r in rest]) == (2, [0, 0])


def test_a_window_still_decoding_past_the_budget_and_a_time_limit_stops_there(models):
    """The budget was looked at between windows alone: a window of 256 queries, each within its own time limit,
    held the models for hours past the request's 600 s."""
    service = server.Service({"forward": models["forward"]}, budget_s=0.0)
    ticks = iter(range(1000))
    service.clock = lambda: float(next(ticks))  # a second a look: past 0 + 5 s within the window's first steps
    queries = [AMIDE, "CC(=O)O.OCC", "Brc1ccccc1.OB(O)c1ccccc1"]
    result = service.predict({"smiles": queries, "batch_size": 2, "time_limit_s": 5})["results"]
    assert [r["query"] for r in result] == queries
    assert all(r["error"] == "not decoded: the request ran past its 0 s; send this query again" for r in result)


def test_sigterm_answers_the_requests_in_hand_before_the_server_stops(models, monkeypatch):
    """SIGTERM (a service manager's stop) ended the process at once and Ctrl-C closed it: the request decoding
    and those waiting their turn lost their connections without an answer. Now the one decoding answers what it
    has decoded, the ones waiting get 503, and run() returns."""
    running = server.serve([models["forward"]], "127.0.0.1", 0)
    address = running.server_address[:2]
    decoding, go = threading.Event(), threading.Event()
    decode = models["forward"].predict

    def predict(queries, **options):  # type: ignore[no-untyped-def]  # the first window waits for the signal
        decoding.set()
        go.wait(30)
        return decode(queries, **options)

    monkeypatch.setattr(models["forward"], "predict", predict)
    got: dict[str, tuple[int, dict]] = {}

    def ask(name: str, queries: list[str]) -> None:
        got[name] = call(address, "POST", "/predict", {"smiles": queries, "batch_size": 1})

    clients = [threading.Thread(target=ask, args=("decoding", [AMIDE, "CC(=O)O.OCC"])),
               threading.Thread(target=ask, args=("waiting", [AMIDE]))]

    def stop() -> None:  # once one request decodes and another waits its turn: SIGTERM, and the decode goes on
        clients[0].start()
        decoding.wait(30)
        clients[1].start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and running.requests < 2:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)
        while time.monotonic() < deadline and not running.service.stopping.is_set():
            time.sleep(0.02)
        go.set()

    threading.Thread(target=stop, daemon=True).start()
    handlers = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))  # another test's (Ray's) too
    server.run(running)  # in the main thread, where signals are taken; returns once both are answered
    for client in clients:
        client.join(30)
    status, payload = got["decoding"]
    first, second = payload["results"]
    assert status == 200 and first["predictions"][0]["smiles"] == "CC(=O)NCc1ccccc1"
    assert second["error"] == "not decoded: the server is stopping; send this query again"
    assert got["waiting"] == (503, {"error": server.STOPPING})
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers  # as run() found them
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=5)  # no longer listening


def test_sigterm_waits_for_a_body_still_arriving_and_answers_it(models):
    """A request counted as in hand only once its body had arrived: a client still sending its body as SIGTERM
    came was not waited for, and lost its connection without an answer as the process ended."""
    running = server.serve([models["forward"]], "127.0.0.1", 0)
    body = json.dumps({"smiles": AMIDE}).encode()
    rest_sent = threading.Event()
    received: list[bytes] = []

    def client() -> None:
        with socket.create_connection(running.server_address[:2], timeout=30) as raw:
            raw.sendall(f"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:5])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not running.requests:  # the head read
                time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGTERM)
            while time.monotonic() < deadline and not running.service.stopping.is_set():
                time.sleep(0.02)
            time.sleep(0.3)  # the body's rest comes after run() has looked for requests in hand
            rest_sent.set()
            raw.sendall(body[5:])
            received.append(b"".join(iter(lambda: raw.recv(65536), b"")))

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    server.run(running)
    assert rest_sent.is_set()  # run() returned only once the request had come whole and been answered
    thread.join(30)
    assert received[0].startswith(b"HTTP/1.1 503 ") and json.dumps({"error": server.STOPPING}).encode() in received[0]


def test_a_second_sigterm_stops_the_server_at_once(models, monkeypatch):
    """While it answers the requests in hand, a second Ctrl-C or SIGTERM does not wait for them."""
    running = server.serve([models["forward"]], "127.0.0.1", 0)
    decoding, go = threading.Event(), threading.Event()
    decode = models["forward"].predict

    def predict(queries, **options):  # type: ignore[no-untyped-def]
        decoding.set()
        go.wait(30)
        return decode(queries, **options)

    monkeypatch.setattr(models["forward"], "predict", predict)

    def stop() -> None:
        try:
            call(running.server_address[:2], "POST", "/predict", {"smiles": AMIDE})
        except OSError:
            pass  # this process may end before the answer: not this test's concern

    def signal_twice() -> None:
        threading.Thread(target=stop, daemon=True).start()
        decoding.wait(30)
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not running.service.stopping.is_set():
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=signal_twice, daemon=True).start()
    server.run(running)
    assert running.requests == 1  # still decoding: run() did not wait for it
    go.set()


def test_two_models_of_one_name_are_refused(models):
    with pytest.raises(ValueError, match="two models named forward"):
        server.serve([models["forward"], models["forward"]], "127.0.0.1", 0)


def test_only_a_loopback_server_checks_the_host(models):
    for host, loopback in (("127.0.0.1", True), ("0.0.0.0", False)):
        running = server.serve([models["forward"]], host, 0)
        assert running.loopback is loopback
        running.server_close()


def test_the_command_refuses_a_port_out_of_range_before_loading(capsys):
    assert cli.main(["serve", "--port", "70000"]) == 2
    assert "a port is at most 65535" in capsys.readouterr().err


def test_answers_leave_without_waiting_for_the_clients_acknowledgement():
    # Headers and body are two writes: with Nagle's algorithm on, each answer waited ~30 ms for the client's
    # delayed ACK on loopback (tools/server_latency.py measured 31 ms added a query before, 1.3 ms after).
    assert server.Handler.disable_nagle_algorithm is True


def exchange(address, data: bytes, half_close: bool = False) -> list[tuple[str, dict, bytes]]:
    """Raw bytes sent on one connection, and every answer read back until the server closes it: (status
    line, headers, body) each."""
    with socket.create_connection(address, timeout=30) as raw:
        raw.sendall(data)
        if half_close:
            raw.shutdown(socket.SHUT_WR)
        received = b"".join(iter(lambda: raw.recv(65536), b""))
    answers = []
    while received:
        head, _, rest = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(fields.get("content-length", 0))
        answers.append((lines[0], fields, rest[:length]))
        received = rest[length:]
    return answers


def test_a_body_sent_with_a_get_never_becomes_a_request_of_its_own(address):
    """GET /predict with a JSON body (a common slip) left the body unread, read next as a request: it broke the
    next request on the connection, and a request hidden in it was answered."""
    hidden = b"GET /models HTTP/1.1\r\nHost: localhost\r\n\r\n"
    answers = exchange(address, b"GET /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n"
                       % len(hidden) + hidden)
    assert [(line.split()[1], fields.get("connection")) for line, fields, _ in answers] == [("200", "close")]


def test_transfer_encoding_beside_a_content_length_is_refused_and_closes(address):
    """The Content-Length framed the body while Transfer-Encoding was ignored: a request after it was answered."""
    body = json.dumps({"model": "forward", "smiles": "CCO"}).encode()
    head = (f"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: "
            f"chunked\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    answers = exchange(address, head + body + b"GET /models HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert len(answers) == 1 and answers[0][0].startswith("HTTP/1.1 400")
    assert "Transfer-Encoding and Content-Length together" in json.loads(answers[0][2])["error"]


def test_a_body_sent_in_chunks_is_read(address):
    """A body of a length not known beforehand comes in chunks (http.client and requests for a generator, Go and
    Java clients for a stream): it was refused, 411 'chunked bodies are not read'."""
    connection = http.client.HTTPConnection(*address, timeout=60)
    connection.request("POST", "/predict", body=iter([b'{"model": "forward", ', b'"smiles": "CC(=O)Cl.NCc1ccccc1"}']),
                       headers={"Content-Type": "application/json"})  # http.client sends a generator in chunks
    response = connection.getresponse()
    payload = json.loads(response.read())
    assert response.status == 200 and payload["results"][0]["predictions"][0]["smiles"] == "CC(=O)NCc1ccccc1"
    assert call(address, "GET", "/health")[0] == 200
    body = b'{"model": "forward", "smiles": "CCO"}'
    chunks = b"10;name=value\r\n%s\r\n%x\r\n%s\r\n0\r\nChecksum: none\r\n\r\n" % (body[:16], len(body) - 16, body[16:])
    answers = exchange(address, b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"GET /health HTTP/1.1\r\nHost: localhost\r\n"
                       b"Connection: close\r\n\r\n")  # the next request on the connection is read where it begins
    assert [line.split()[1] for line, _, _ in answers] == ["200", "200"]
    assert json.loads(answers[0][2])["results"][0]["canonical_query"] == "CCO" and answers[1][2] == b'{"status": "ok"}'
    old = exchange(address, b"POST /predict HTTP/1.0\r\nContent-Type: application/json\r\nTransfer-Encoding: "
                   b"chunked\r\n\r\n" + chunks)  # HTTP/1.0 has no chunked bodies: its framing is not to be trusted
    assert [line.split()[1] for line, _, _ in old] == ["400"]
    assert json.loads(old[0][2])["error"] == "a chunked body in an HTTP/1.0 request; send it with a Content-Length"


@pytest.mark.parametrize("encoding, chunks, status, says", [
    ("chunked", b"zz\r\n{}\r\n0\r\n\r\n", 400, "a chunk's size 'zz' is not a hexadecimal number of bytes"),
    ("chunked", b"2\r\n{}}\r\n0\r\n\r\n", 400, "a chunk ran past the 2 bytes its size gave"),
    ("chunked", b"%x\r\n" % (server.MAX_BODY_BYTES + 1), 413, "a chunked body of more than"),
    ("chunked", b"9" * 5000, 400, "a chunk's size is a line of more than 4096 bytes"),
    ("chunked", b"40\r\n{}", 400, "the chunked body stopped short of its last chunk (2 came before the client"),
    ("gzip, chunked", b"", 501, "Transfer-Encoding 'gzip, chunked': only chunked is read"),
], ids=["not hexadecimal", "longer than its size", "too large", "size line too long", "stops short", "gzip"])
def test_a_chunked_body_that_breaks_the_format_is_refused_saying_why(address, encoding, chunks, status, says):
    answers = exchange(address, b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                       b"Transfer-Encoding: %s\r\n\r\n%s" % (encoding.encode(), chunks), half_close=True)
    assert [(line.split()[1], fields["connection"]) for line, fields, _ in answers] == [(str(status), "close")]
    assert says in json.loads(answers[0][2])["error"]


def test_a_body_shorter_than_its_content_length_is_refused(address):
    """A client that closed its side after 34 of 1,000 bytes was answered as if the 34 were the body."""
    body = json.dumps({"smiles": "CCO", "model": "forward"}).encode()
    answers = exchange(address, b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 1000\r\n\r\n" + body, half_close=True)
    assert len(answers) == 1 and answers[0][0].startswith("HTTP/1.1 400")
    assert json.loads(answers[0][2])["error"] == (f"the body stopped short of its 1,000 bytes ({len(body)} came "
                                                  "before the client stopped sending)")


def test_an_http_1_0_client_that_asks_to_keep_its_connection_is_told_it_is_kept(address):
    """The connection was kept open without saying so: an HTTP/1.0 client (ab -k) takes an answer without
    'Connection: keep-alive' to end at the close, and waited the 30 s read timeout for it."""
    answers = exchange(address, b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /models HTTP/1.0\r\n\r\n")
    assert [(line.split()[1], fields.get("connection")) for line, fields, _ in answers] == [("200", "keep-alive"),
                                                                                            ("200", "close")]


def test_a_request_must_name_one_host_and_any_loopback_name_will_do(address):
    assert exchange(address, b"GET /health HTTP/1.1\r\n\r\n")[0][0].startswith("HTTP/1.1 400")  # was 403
    two = exchange(address, b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n")
    assert two[0][0].startswith("HTTP/1.1 400") and "Host, once" in json.loads(two[0][2])["error"]  # was 200
    assert exchange(address, b"GET /health HTTP/1.0\r\n\r\n")[0][0].split()[1] == "200"  # 1.0 needs none
    assert call(address, "GET", "/health", headers={"Host": f"127.0.0.2:{address[1]}"})[0] == 200  # was 403
    absolute = exchange(address, f"GET http://localhost:{address[1]}/health HTTP/1.1\r\nHost: localhost\r\n"
                        "Connection: close\r\n\r\n".encode())
    assert absolute[0][0].split()[1] == "200"  # was 404: a server takes an absolute target
    elsewhere = exchange(address, b"GET http://evil.example/health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert elsewhere[0][0].split()[1] == "403"


def test_a_client_still_sending_a_refused_body_reads_its_answer(address):
    """The server closed on a 413 without reading on: Python's http.client, still sending, hit a broken pipe and
    never saw the answer."""
    connection = http.client.HTTPConnection(*address, timeout=30)
    connection.request("POST", "/predict", body=b" " * (server.MAX_BODY_BYTES + 1),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 413 and "at most" in json.loads(response.read())["error"]
    connection.close()


@pytest.mark.parametrize("method, path, host, status", [("GET", "/predict", "localhost", 405),
                                                        ("GET", "/health", "localhost", 200),
                                                        ("HEAD", "/models", "localhost", 200),
                                                        ("OPTIONS", "/predict", "localhost", 405),
                                                        ("POST", "/predict", "evil.example", 403)])
def test_a_client_still_sending_a_body_the_server_does_not_read_reads_its_answer(address, method, path, host, status):
    """A body sent with GET (requests.get(url, json=...), a common slip), HEAD or OPTIONS, or to a Host refused,
    was left unread and the connection closed at once: a client still sending a large one hit a broken pipe and
    never saw the answer ('POST a JSON body to /predict')."""
    connection = http.client.HTTPConnection(*address, timeout=30)
    connection.request(method, path, body=b" " * server.MAX_BODY_BYTES,
                       headers={"Content-Type": "application/json", "Host": host})
    response = connection.getresponse()
    assert (response.status, response.getheader("Connection")) == (status, "close")
    response.read()
    connection.close()


def test_a_request_expecting_100_continue_is_refused_from_its_head(address):
    """It was invited to send the body (100 Continue) that the answer then refused."""
    with socket.create_connection(address, timeout=30) as raw:
        raw.sendall(f"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: "
                    f"{server.MAX_BODY_BYTES + 1}\r\nExpect: 100-continue\r\n\r\n".encode())
        first = raw.recv(65536)
    assert first.startswith(b"HTTP/1.1 413")
    body = json.dumps({"model": "forward", "smiles": "CCO"}).encode()
    with socket.create_connection(address, timeout=30) as raw:  # a request it takes is told to go on
        raw.sendall(f"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: "
                    f"{len(body)}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n".encode())
        assert raw.recv(65536).startswith(b"HTTP/1.1 100 Continue")
        raw.sendall(body)
        assert b"".join(iter(lambda: raw.recv(65536), b"")).startswith(b"HTTP/1.1 200")


def test_a_request_sent_a_byte_at_a_time_is_cut_off_at_the_read_timeout(models):
    """The read timeout bounded each read alone: a byte every half second held the connection for as long as the
    client liked. Now the whole request arrives within it, or the connection is answered 408 and closed."""
    running = server.serve([models["forward"]], "127.0.0.1", 0, read_timeout_s=1.0)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    body = json.dumps({"model": "forward", "smiles": "CCO"}).encode()
    request = (f"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: "
               f"{len(body)}\r\n\r\n").encode() + body
    started = time.monotonic()
    with socket.create_connection(running.server_address[:2], timeout=30) as raw:
        raw.sendall(request[:-len(body) + 2])  # the head and two bytes of the body, then a byte every 0.3 s
        received = b""
        for byte in request[-len(body) + 2:]:
            time.sleep(0.3)
            try:
                raw.sendall(bytes([byte]))
            except OSError:
                break
            if time.monotonic() - started > 3:
                break
        received = b"".join(iter(lambda: raw.recv(65536), b""))
    running.shutdown()
    running.server_close()
    assert received.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in received
    assert time.monotonic() - started < 4  # the drip would have taken 0.3 s x 30 bytes


def test_a_request_has_the_read_timeout_from_its_first_byte_not_from_the_connections_last_answer(models):
    """The time counted from the previous answer (or the connection's opening): a request sent on a connection that
    had been kept idle most of that time got 408, though it arrived in a fraction of it."""
    running = server.serve([models["forward"]], "127.0.0.1", 0, read_timeout_s=2.0)
    running.service.predict = lambda body, gone: {"results": []}  # type: ignore[method-assign]
    threading.Thread(target=running.serve_forever, daemon=True).start()
    body = json.dumps({"smiles": AMIDE}).encode()
    with socket.create_connection(running.server_address[:2], timeout=30) as raw:
        time.sleep(1.4)  # idle, as a pool keeps a connection between requests
        raw.sendall(f"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: "
                    f"{len(body)}\r\nConnection: close\r\n\r\n".encode())
        time.sleep(1.2)  # the body follows: 2.6 s after the connection opened, 1.2 s after the request began
        raw.sendall(body)
        received = b"".join(iter(lambda: raw.recv(65536), b""))
    running.shutdown()
    running.server_close()
    assert received.startswith(b"HTTP/1.1 200 ") and received.endswith(b'{"results": []}')


@pytest.mark.parametrize("head", [
    b"GET /hea",  # read as an HTTP/0.9 request, answered without a status line ('a request names its Host, once')
    b"POST /predict HTT",  # 400, 'Bad request version'
    b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n",  # 411: no Content-Length
    b"GET /health HTTP/1.1\r\nHost: localhost\r\n",  # answered 200, as if the headers had ended
    b"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"],
    ids=["line", "line-version", "post-headers", "get-headers", "expect-headers"])
def test_a_request_line_or_headers_cut_off_at_the_read_timeout_get_408(models, head):
    running = server.serve([models["forward"]], "127.0.0.1", 0, read_timeout_s=0.5)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    with socket.create_connection(running.server_address[:2], timeout=30) as raw:
        raw.sendall(head)  # and nothing more
        received = b"".join(iter(lambda: raw.recv(65536), b""))
    running.shutdown()
    running.server_close()
    assert received.startswith(b"HTTP/1.1 408 ") and b"Connection: close\r\n" in received
    assert received.endswith(b'{"error": "the request did not arrive within 0.5 s"}')


def test_an_empty_line_after_a_body_does_not_lose_the_next_request(address):
    """RFC 9112, 2.2: a client may send an empty line after a body, and a server passes over one before a request
    line. It closed the kept-alive connection without a word, and the request after it was never answered."""
    body = json.dumps({"model": "forward", "smiles": "CCO"}).encode()
    with socket.create_connection(address, timeout=60) as raw:
        raw.sendall(f"POST /predict HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: "
                    f"{len(body)}\r\n\r\n".encode() + body + b"\r\n"
                    b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        received = b"".join(iter(lambda: raw.recv(65536), b""))
    assert received.startswith(b"HTTP/1.1 200 ") and received.count(b"HTTP/1.1 200 ") == 2
    assert received.endswith(b'{"status": "ok"}')


def test_a_kept_alive_connection_holds_one_thread_however_many_requests_it_sends(address, monkeypatch):
    """Each request started a timer thread of its own to cut its reading off at the read timeout: two threads a
    connection, and a thread started and ended for every request."""
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    connection = http.client.HTTPConnection(*address, timeout=30)
    for _ in range(20):
        connection.request("GET", "/health")
        response = connection.getresponse()
        assert (response.status, json.loads(response.read())) == (200, {"status": "ok"})
    connection.close()
    assert len(started) == 1, started  # the connection's own


def test_connections_past_the_limit_are_answered_503(models, monkeypatch):
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 2)
    running = server.serve([models["forward"]], "127.0.0.1", 0)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    address = running.server_address[:2]
    idle = [socket.create_connection(address, timeout=30) for _ in range(2)]  # each holds a thread, sending nothing
    time.sleep(0.2)
    answers = exchange(address, b"GET /models HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert answers[0][0].startswith("HTTP/1.1 503") and "2 connections" in json.loads(answers[0][2])["error"]
    for connection in idle:
        connection.close()
    time.sleep(0.2)
    assert call(address, "GET", "/health") == (200, {"status": "ok"})
    running.shutdown()
    running.server_close()


def test_a_route_under_a_path_prefix_is_told_to_shed_it(address):
    """A reverse proxy that forwards its path prefix (nginx's `location /molspec/ { proxy_pass
    http://127.0.0.1:8000; }`, Traefik's PathPrefix without StripPrefix) sent /molspec/predict, told only 'no route
    ...; try /health, /models, /predict'. The 404 names the prefix to strip; another path keeps the short words."""
    assert call(address, "POST", "/molspec/predict", {"smiles": AMIDE}) == (404, {"error": (
        "no route '/molspec/predict'; the routes are /health, /models and /predict, at the root: a reverse proxy in "
        "front of this server strips its path prefix '/molspec' before it forwards")})
    assert call(address, "GET", "/api/v1/health?x=1")[1]["error"].endswith("strips its path prefix '/api/v1' before "
                                                                           "it forwards")
    assert call(address, "GET", "/nothing") == (404, {"error": "no route '/nothing'; the routes are /health, /models "
                                                               "and /predict"})
    assert call(address, "GET", "/healthz")[1]["error"] == ("no route '/healthz'; the routes are /health, /models "
                                                             "and /predict")


def test_health_is_answered_past_the_connection_limit(models, monkeypatch):
    """Clients queued for their turn (or a pool's idle connections) holding every connection made GET /health a 503:
    a liveness probe (Kubernetes takes any status of 400 or more for a failure) restarted a server that was only
    busy, and lost the request it was decoding. Past the limit, GET and HEAD /health are answered (the connection
    then closes); every other request, and one addressed to another host on loopback, still gets the 503."""
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 1)
    running = server.serve([models["forward"]], "127.0.0.1", 0)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    address = running.server_address[:2]
    probe = b"GET /health?probe=1 HTTP/1.1\r\nHost: localhost:80\r\nConnection: close\r\n\r\n"
    (_, normal, _), = exchange(address, probe)
    with socket.create_connection(address, timeout=30):  # holds the one thread, sending nothing
        time.sleep(0.2)
        (line, fields, body), = exchange(address, probe)
        assert (line, json.loads(body), fields["connection"]) == ("HTTP/1.1 200 OK", {"status": "ok"}, "close")
        # the headers the answer within the limit carries (it lacked X-Content-Type-Options, Date and Server)
        assert sorted(fields) == sorted(normal)
        assert {name: fields[name] for name in normal if name != "date"} == {
            name: value for name, value in normal.items() if name != "date"}
        assert email.utils.parsedate_to_datetime(fields["date"]).tzinfo is not None
        (line, fields, body), = exchange(address, b"HEAD /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (line, body, fields["content-length"]) == ("HTTP/1.1 200 OK", b"", "16")
        for refused in (b"GET /models HTTP/1.1\r\nHost: localhost\r\n\r\n",
                        b"POST /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
                        b"GET /health HTTP/1.1\r\nHost: evil.example\r\n\r\n",
                        b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n"):
            (line, fields, _), = exchange(address, refused)
            assert line.startswith("HTTP/1.1 503") and fields["retry-after"] == "1", refused
            assert {"date", "server", "x-content-type-options", "content-type"} <= set(fields), refused
    running.shutdown()
    running.server_close()


def test_a_client_past_the_limit_reads_its_503_while_still_sending_its_request(models, monkeypatch):
    """The connection closed as the 503 left: Python's http.client, still sending its request, hit a broken pipe
    and never read it (nor its Retry-After), a body of 100 bytes or of a megabyte alike."""
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 1)
    running = server.serve([models["forward"]], "127.0.0.1", 0)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    address = running.server_address[:2]
    with socket.create_connection(address, timeout=30):  # holds the one thread, sending nothing
        time.sleep(0.2)
        for size in (100, 1_000_000):
            connection = http.client.HTTPConnection(*address, timeout=30)
            connection.request("POST", "/predict", body=b" " * size, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            assert (response.status, response.getheader("Retry-After")) == (503, "1")
            assert "1 connections" in json.loads(response.read())["error"]
            connection.close()
    running.shutdown()
    running.server_close()


def test_clients_connecting_at_once_wait_to_be_accepted_rather_than_being_refused(models):
    """The listening socket's backlog was the standard library's 5: clients that connected while the server was
    busy accepting others (40 at once, a request decoding) were reset, or waited seconds for a retried handshake."""
    running = server.serve([models["forward"]], "127.0.0.1", 0)  # not accepting yet: all wait in the backlog
    address = running.server_address[:2]
    clients = [socket.create_connection(address, timeout=5) for _ in range(20)]  # the 7th waited past 5 s
    threading.Thread(target=running.serve_forever, daemon=True).start()
    for client in clients:
        client.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    answers = [b"".join(iter(lambda: client.recv(65536), b"")) for client in clients]
    for client in clients:
        client.close()
    running.shutdown()
    running.server_close()
    assert all(answer.startswith(b"HTTP/1.1 200") for answer in answers)


def test_the_server_listens_on_ipv6_loopback():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        running = server.serve([Predictor.load(FIXTURES / "copy_model", device="cpu")], "::1", 0)
    except OSError as exc:  # was refused: "Address family for hostname not supported"
        pytest.skip(f"IPv6 loopback cannot be bound here: {exc}")
    threading.Thread(target=running.serve_forever, daemon=True).start()
    assert running.loopback
    connection = http.client.HTTPConnection("::1", running.server_address[1], timeout=30)
    connection.request("GET", "/health")
    response = connection.getresponse()
    assert (response.status, json.loads(response.read())) == (200, {"status": "ok"})
    connection.close()
    running.shutdown()
    running.server_close()


@needs_native
def test_models_lists_only_the_methods_an_int8_model_decodes():
    """Under int8 /models listed the uncached baselines, which it refused; spec-paper (25 drafts a call), refused until
    0151a24, is listed and decodes, each draft a row of its own through the C step."""
    int8 = Predictor.load("forward", device="cpu", dtype="int8")
    listed = server.model_json("forward", int8)["methods"]
    assert not {"greedy-uncached", "beam-uncached"} & set(listed) and "spec-paper" in listed
    service = server.Service({"forward": int8})
    for method in listed:
        result = service.predict({"smiles": AMIDE, "method": method})["results"][0]
        assert result["error"] is None and result["predictions"], method
    # sbs-exact and sbs feed each of several drafts as a row of its own (were refused: '3 drafts per call here')
    for method in ("sbs-exact", "sbs"):
        result = service.predict({"smiles": AMIDE, "method": method, "n_drafts": 3})["results"][0]
        assert result["error"] is None and result["predictions"] and result["dtype"] == "int8", method
