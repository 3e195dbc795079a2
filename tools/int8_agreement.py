"""How often the int8 decoder gives the float32 decoder's answer, how often each is right, and the time of each.

python3 tools/int8_agreement.py --model retro --src products.txt --tgt reactants.txt \
    --index ../shared/bench/uspto50k_test_500.idx --limit 100 --method beam --beam-width 10 --augment 5

Both predictors run the native engine on the same queries, one thread, float32 and int8
(`Predictor.load(..., dtype="int8")`), each query by the call the app makes (`Predictor.predict` of one
query, read in --augment writings and pooled). The two take turns query by query, in an order that
alternates, after --warmup queries each, the answer checks' caches emptied before each call. For each
query the first answers are compared, and each is checked against the target after canonicalization (the
evaluate command's measure). No time limit stops a query (predict's default 60 s one did, and its time was kept
in the seconds and the ratio): each is decoded and timed whole. A query one side answers with none is a
disagreement, and one both answer with none is left out of the agreement, which counts the queries either side
answered. Prints one JSON object: queries compared (and those the model cannot read, left out), agreement, the
queries each side answered with none ("refused"), top-1 accuracy of each, each side's total seconds and the ratio.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import InputFileError, check_inputs, check_models  # noqa: E402  (tools/_toolbox.py)

from molspec_core.argtypes import at_least  # noqa: E402
from molspec_core.chem import clear_caches  # noqa: E402
from molspec_core.evaluate import hits, read_pairs  # noqa: E402
from molspec_core.methods import METHODS  # noqa: E402
from molspec_core.service import MAX_AUGMENT, MAX_N_BEST, Predictor  # noqa: E402

DTYPES = ("float32", "int8")


def can_read(predictor: Predictor, source: str) -> bool:
    """Whether the model can read the query; one it refuses is left out of both sides."""
    try:
        predictor.prepare(source)
    except ValueError:
        return False
    return True


def load(parser: argparse.ArgumentParser, model: str, dtype: str) -> Predictor:
    """The model on the native engine in `dtype`, or the parser's usage error naming --model and the engine's reason
    (float32 weights, as a run's best/ holds, which the native engine cannot read: a ValueError traceback)."""
    try:
        return Predictor.load(model, "cpu", "native", dtype=dtype)
    except ValueError as exc:
        parser.error(f"--model {model}: {exc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="retro", help="a shipped model's name or a model folder (default retro)")
    parser.add_argument("--src", required=True, help="queries, one per line (.gz read as gzip)")
    parser.add_argument("--tgt", required=True, help="the recorded answers, line by line")
    parser.add_argument("--index", help="file of 0-based line numbers of --src to take (default: every line)")
    parser.add_argument("--limit", type=at_least(1), default=500, help="the first this many queries (default 500)")
    parser.add_argument("--method", default="greedy", choices=tuple(METHODS), help="decoding method (default greedy)")
    parser.add_argument("--beam-width", type=at_least(1, MAX_N_BEST), default=5, help="n-best of beam-family methods")
    parser.add_argument("--augment", type=at_least(1, MAX_AUGMENT), default=1,
                        help="writings of each query read and pooled (the app: 5)")
    parser.add_argument("--warmup", type=at_least(0), default=3, help="queries each predictor decodes untimed first")
    args = parser.parse_args()
    torch.set_num_threads(1)
    try:  # before the models load: the queries are there and readable, and the model's folder is one
        check_inputs([("--src", args.src), ("--tgt", args.tgt), ("--index", args.index)])
        check_models([("--model", args.model)])
        sources, targets = read_pairs(args.src, args.tgt, args.index, args.limit)
    except (InputFileError, ValueError) as exc:  # read_pairs' ValueError names the file
        parser.error(str(exc))
    predictors = {"int8": load(parser, args.model, "int8")}
    # before the float32 model loads: a method int8 cannot decode (an uncached baseline) was predict's ValueError
    # traceback, once both models had loaded
    can = predictors["int8"].methods()
    if args.method not in can:
        parser.error(f"--method {args.method}: {args.model} in int8 cannot decode it (int8 arithmetic runs no uncached "
                     f"baseline); it decodes {', '.join(can)}")
    try:  # a model trained on one writing of each query: predict's ValueError traceback in the warm-up
        predictors["int8"].check_augment(args.augment)
    except ValueError as exc:
        parser.error(f"--augment {args.augment}: {exc}")
    predictors["float32"] = load(parser, args.model, "float32")
    options = {"method": args.method, "n_best": args.beam_width if METHODS[args.method].many else 1,
               "augment": args.augment, "time_limit_s": None}  # each query timed whole: a stopped one's time is none
    readable = [(source, target) for source, target in zip(sources, targets or [])
                if can_read(predictors["float32"], source)]
    if not readable:
        raise SystemExit("int8_agreement.py: the model reads none of the queries: nothing to compare")
    for predictor in predictors.values():
        for source, _ in readable[:args.warmup]:
            predictor.predict(source, **options)
    right = dict.fromkeys(DTYPES, 0)
    refused = dict.fromkeys(DTYPES, 0)
    seconds = dict.fromkeys(DTYPES, 0.0)
    counted = same = both_refused = 0
    for i, (source, target) in enumerate(readable):
        firsts = {}
        for dtype in DTYPES if i % 2 == 0 else DTYPES[::-1]:
            clear_caches()  # each side checks this query's answers afresh, as the app's one call does
            start = time.perf_counter()
            result = predictors[dtype].predict(source, **options)
            seconds[dtype] += time.perf_counter() - start
            firsts[dtype] = result.predictions[0].smiles if result.ok and result.predictions else None
            refused[dtype] += firsts[dtype] is None
            right[dtype] += firsts[dtype] is not None and hits([firsts[dtype]], target)[0]
        counted += 1
        both_refused += firsts["float32"] is None and firsts["int8"] is None  # no answer to agree on
        same += firsts["float32"] is not None and firsts["float32"] == firsts["int8"]
    answered = counted - both_refused
    print(json.dumps({"model": args.model, "method": args.method, "n_best": options["n_best"], "augment": args.augment,
                      "queries": counted, "unreadable": len(sources) - len(readable),
                      "first_answer_agreement": round(same / answered, 4) if answered else None,
                      "refused": {**refused, "both": both_refused},
                      "top1_float32": round(right["float32"] / counted, 4),
                      "top1_int8": round(right["int8"] / counted, 4),
                      "seconds": {k: round(v, 2) for k, v in seconds.items()},
                      "int8_speedup": round(seconds["float32"] / seconds["int8"], 2)}, indent=2))


if __name__ == "__main__":
    main()
