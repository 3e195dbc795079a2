"""How often the int8 decoder gives the float32 decoder's answer, and how often each is right.

python3 tools/int8_agreement.py --model retro --src products.txt --tgt reactants.txt \
    --index ../shared/bench/uspto50k_test_500.idx --limit 500 --method greedy

Both predictors run the native engine on the same queries (batch size 1, one thread), float32 and
int8 (`Predictor.load(..., dtype="int8")`); for each query the first answer of each is compared token
for token, and with the target after canonicalization (the evaluate command's measure). Prints one
JSON object: queries, agreement, top-1 accuracy of each, and each side's total seconds.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from molspec_core.chem import canonical_or_none
from molspec_core.evaluate import read_pairs
from molspec_core.service import Predictor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="retro")
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--index")
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--method", default="greedy")
    parser.add_argument("--beam-width", type=int, default=5, help="n-best of beam-family methods")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sources, targets = read_pairs(args.src, args.tgt, args.index, args.limit)
    float32 = Predictor.load(args.model, "cpu", "native")
    int8 = Predictor.load(args.model, "cpu", "native", dtype="int8")
    n_best = 1 if args.method.startswith(("greedy", "spec")) else args.beam_width
    right, seconds, counted = {"float32": 0, "int8": 0}, {"float32": 0.0, "int8": 0.0}, 0
    same = 0
    for source, target in zip(sources, targets or []):
        try:
            query = float32.prepare(source)
        except ValueError:
            continue  # a query the model cannot read: left out of both sides
        counted += 1
        firsts = {}
        for name, predictor in (("float32", float32), ("int8", int8)):
            start = time.perf_counter()
            result = predictor.decode([query.ids], args.method, n_best, None, None, None)[0]
            seconds[name] += time.perf_counter() - start
            first = result.hypotheses[0]
            firsts[name] = first.tokens
            answer = canonical_or_none(predictor.vocab.decode(first.tokens))
            right[name] += answer is not None and answer == canonical_or_none(target)
        same += firsts["float32"] == firsts["int8"]
    print(json.dumps({"model": args.model, "method": args.method, "queries": counted,
                      "first_answer_agreement": round(same / counted, 4),
                      "top1_float32": round(right["float32"] / counted, 4), "top1_int8": round(right["int8"] / counted, 4),
                      "seconds": {k: round(v, 2) for k, v in seconds.items()}}, indent=2))


if __name__ == "__main__":
    main()
