"""The CTranslate2 peer's own process (peers.CTranslate2Peer starts it): one request a line on stdin,
one answer a line on stdout, JSON, with the decode timed here.

Why a process of its own: beside torch and our C engine, CTranslate2 shares the CPU with two more
OpenMP runtimes whose idle threads spin or sleep-and-wake around every parallel region, and at two
threads it ran several times slower than alone (the measurements: the README's "CTranslate2 in a
process of its own"). So this module imports neither torch nor numpy, only the standard library and
ctranslate2, and the parent stops this process (SIGSTOP) between requests so that its idle threads
take nothing from ours.

Request: {"src": [[tokens], ...], "width": k, "n_best": n, "max_len": m}: a batch of queries, decoded as one
batch in the order given (no re-batching). Answer: {"hypotheses": [[[tokens]], ...], "scores": [[float], ...],
"seconds": float}, one list per query, or {"error": text}. The first line is {"ready": true}, or {"error": text}
where the model cannot be loaded (then the process ends).
"""
from __future__ import annotations

import json
import sys
import time


def serve(ct2_dir: str, compute_type: str, threads: int) -> None:
    try:
        import ctranslate2

        translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type, inter_threads=1,
                                            intra_threads=threads)
    except Exception as exc:  # noqa: BLE001  (a missing package, an unreadable model: the parent raises it)
        print(json.dumps({"error": f"cannot load {ct2_dir}: {type(exc).__name__}: {exc}"}), flush=True)
        return
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            started = time.perf_counter()
            # min_decoding_length=0: CTranslate2's default of 1 forbids eos at the first step and
            # renormalizes, which changes that step's log-probability (our decoders allow an empty answer).
            # max_batch_size=0 (the default): the batch as given, neither sorted nor split. max_input_length=0:
            # the whole source, as our encoder reads it (CTranslate2's default cut it at 1,024 tokens, silently).
            results = translator.translate_batch(
                request["src"], beam_size=request["width"], num_hypotheses=request["n_best"], length_penalty=0.0,
                return_scores=True, min_decoding_length=0, max_decoding_length=request["max_len"], max_input_length=0)
            seconds = time.perf_counter() - started
            answer = {"hypotheses": [r.hypotheses for r in results], "scores": [r.scores for r in results],
                      "seconds": seconds}
        except Exception as exc:  # noqa: BLE001  (reported to the parent, which raises it)
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))
