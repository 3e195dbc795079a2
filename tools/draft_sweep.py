"""Sweep the CPU draft shape of greedy-family speculative decoding: draft length x rest.

python3 tools/draft_sweep.py --model retro --src products.txt --index ../shared/bench/uspto50k_test_500.idx \
    --limit 200 --methods spec-pointer,spec-lookup --draft-lens 8,12,16 --rests 0,1,2

Both knobs trade what a verify call costs per drafted token against how many drafted tokens the
model keeps: draft_len caps a draft; `rest` is how many calls a row goes without drafts after a
draft lost at its first token (greedy's `rest`). Times each (method, draft_len, rest) over the same
queries at batch size 1, interleaved in rounds after a warm-up, and checks that every setting gives
the tokens of the first (it must: drafts only change which calls are made). Prints total seconds
(best of the rounds) and model calls. The chosen values live in methods.py (draft_len) and
service.rest_after_miss (rest).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import checked_queries, comma_list, method_name  # noqa: E402  (tools/_toolbox.py)

from molspec_core.argtypes import at_least  # noqa: E402
from molspec_core.decoding.greedy import greedy  # noqa: E402
from molspec_core.native import DTYPES  # noqa: E402
from molspec_core.service import Predictor, copy_drafts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="retro", help="a shipped model's name or a model folder (default retro)")
    parser.add_argument("--src", required=True, help="queries, one per line (.gz read as gzip)")
    parser.add_argument("--index", help="file of 0-based line numbers of --src to take (default: every line)")
    parser.add_argument("--limit", type=at_least(1), default=200, help="the first this many queries (default 200)")
    parser.add_argument("--methods", type=comma_list(method_name), default="spec-pointer,spec-auto",
                        help="greedy-family speculative methods, comma-separated (default spec-pointer,spec-auto)")
    parser.add_argument("--draft-lens", type=comma_list(at_least(1)), default="8",
                        help="comma-separated draft lengths (default 8)")
    parser.add_argument("--rests", type=comma_list(at_least(0)), default="0,1,2,3",
                        help="comma-separated rests: calls a row goes without drafts after a draft lost at its "
                        "first token (default 0,1,2,3)")
    parser.add_argument("--rounds", type=at_least(1), default=2,
                        help="timed rounds, interleaved; the best is kept (default 2)")
    parser.add_argument("--threads", type=at_least(1), default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES, help="float32, or int8 (native engine)")
    args = parser.parse_args()
    sources = checked_queries(parser, args)  # before the model loads
    torch.set_num_threads(args.threads)
    try:
        predictor = Predictor.load(args.model, "cpu", dtype=args.dtype)
    except ValueError as exc:  # int8 on weights the native engine cannot read: a traceback
        parser.error(f"--dtype {args.dtype}: {exc}")
    queries = []
    for text in sources:
        try:
            queries.append(list(predictor.prepare(text).ids))
        except ValueError:
            pass  # a query this model cannot read, as bench skips it
    methods, lengths, rests = args.methods, args.draft_lens, args.rests
    runs = list(itertools.product(methods, lengths, rests))
    factories = {(m, n): copy_drafts(predictor.resolve(m, n, None, 1)) for m in methods for n in lengths}

    def run(method: str, length: int, rest: int) -> tuple[float, int, list]:
        started = time.perf_counter()
        out = [greedy(predictor.model, [q], factories[(method, length)], rest=rest)[0] for q in queries]
        return (time.perf_counter() - started, sum(r.stats.model_calls for r in out),
                [r.hypotheses[0].tokens for r in out])

    for method, length, rest in runs:  # warm-up
        for q in queries[:3]:
            greedy(predictor.model, [q], factories[(method, length)], rest=rest)
    best: dict[tuple[str, int, int], float] = {}
    calls: dict[tuple[str, int, int], int] = {}
    tokens: dict[tuple[str, int, int], list] = {}
    for _ in range(args.rounds):
        for key in runs:
            seconds, calls[key], tokens[key] = run(*key)
            best[key] = min(best.get(key, seconds), seconds)
    first = runs[0]
    print(f"{len(queries)} queries, model {args.model}, engine {predictor.engine}, {args.threads} thread(s), "
          f"best of {args.rounds} interleaved rounds")
    print(f"| method | draft_len | rest | total s | calls | vs {first[0]} D={first[1]} rest {first[2]} | same tokens |")
    print("|---|---|---|---|---|---|---|")
    for key in runs:
        print(f"| {key[0]} | {key[1]} | {key[2]} | {best[key]:.2f} | {calls[key]} | {best[first] / best[key]:.2f}x | "
              f"{tokens[key] == tokens[first]} |")


if __name__ == "__main__":
    main()
