"""How long a row should go without drafts after a draft lost at its first token (greedy's `rest`).

python3 tools/rest_bench.py --model retro --src products.txt --index ../shared/bench/uspto50k_test_500.idx \
    --limit 200 --methods spec-pointer,spec-auto --rests 0,1,2,3

Times each (method, rest) over the same queries at batch size 1, interleaved in rounds after a
warm-up, and checks that every rest gives the same tokens as rest 0 (it must: drafts only change
which calls are made). Prints total seconds (best of the rounds) and model calls.
"""
from __future__ import annotations

import argparse
import time

import torch

from molspec_core.decoding.greedy import greedy
from molspec_core.evaluate import read_pairs
from molspec_core.service import Predictor, copy_drafts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="retro")
    parser.add_argument("--src", required=True)
    parser.add_argument("--index")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--methods", default="spec-pointer,spec-auto")
    parser.add_argument("--rests", default="0,1,2,3")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    predictor = Predictor.load(args.model, "cpu")
    sources, _ = read_pairs(args.src, None, args.index, args.limit)
    queries = []
    for text in sources:
        try:
            queries.append(list(predictor.prepare(text).ids))
        except ValueError:
            pass  # a query this model cannot read, as bench skips it
    rests = [int(r) for r in args.rests.split(",")]
    runs = [(m, r) for m in args.methods.split(",") for r in rests]
    drafts = {m: predictor.resolve(m, None, None, 1) for m in args.methods.split(",")}

    def run(method: str, rest: int) -> tuple[float, int, list]:
        started = time.perf_counter()
        out = [greedy(predictor.model, [q], copy_drafts(drafts[method]), rest=rest)[0] for q in queries]
        return time.perf_counter() - started, sum(r.stats.model_calls for r in out), [r.hypotheses[0].tokens for r in out]

    for method, rest in runs:  # warm-up
        for q in queries[:3]:
            greedy(predictor.model, [q], copy_drafts(drafts[method]), rest=rest)
    best: dict[tuple[str, int], float] = {}
    calls: dict[tuple[str, int], int] = {}
    tokens: dict[tuple[str, int], list] = {}
    for _ in range(args.rounds):
        for key in runs:
            seconds, calls[key], tokens[key] = run(*key)
            best[key] = min(best.get(key, seconds), seconds)
    print(f"{len(queries)} queries, model {args.model}, engine {predictor.engine}, {args.threads} thread(s), "
          f"best of {args.rounds} interleaved rounds")
    print("| method | rest | total s | calls | vs rest 0 | same tokens as rest 0 |\n|---|---|---|---|---|---|")
    for method, rest in runs:
        base = (method, rests[0])
        print(f"| {method} | {rest} | {best[(method, rest)]:.2f} | {calls[(method, rest)]} | "
              f"{best[base] / best[(method, rest)]:.2f}x | {tokens[(method, rest)] == tokens[base]} |")


if __name__ == "__main__":
    main()
