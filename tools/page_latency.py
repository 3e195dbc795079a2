"""The Predict page's time per query for several methods, side by side, and how often each is right first.

python3 tools/page_latency.py --model forward --src src-test.mixed.txt.gz --tgt tgt-test.txt.gz \
    --index ../shared/bench/uspto_mit_test_500.idx --limit 200 --methods spec-auto,beam,sbs-exact --n-best 5 \
    --augment 5 --dtype int8

One predictor, one thread; per query the whole `Predictor.predict` call the page makes (the query read in --augment
writings and pooled), without the page's time limit: each query is decoded and timed whole (under predict's default
60 s limit a stopped query's time was counted as its latency, unsaid). The methods take turns query by query, in an
order that alternates, after --warmup queries each; the answer checks' caches are emptied before each call, so no
method finds the query's answers checked by another. Prints one JSON object: per method the total seconds, the
mean, 95th percentile (nearest rank) and slowest milliseconds a query, and the share of first answers equal to the
target after canonicalization (the model's order, as `evaluate` counts top-1). tools/int8_agreement.py compares two
dtypes of one method.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import (InputFileError, check_inputs, check_models, comma_list,  # noqa: E402  (tools/_toolbox.py)
                      method_name)

from molspec_core.argtypes import at_least  # noqa: E402
from molspec_core.bench import percentile  # noqa: E402
from molspec_core.chem import canonical_or_none, clear_caches  # noqa: E402
from molspec_core.evaluate import read_pairs  # noqa: E402
from molspec_core.methods import METHODS  # noqa: E402
from molspec_core.service import Predictor  # noqa: E402


def method_summary(times: list[float], right: int) -> dict:
    """One method's line of the report: its queries' `times` (seconds) and how many first answers were `right`."""
    n = len(times)
    return {"seconds": round(sum(times), 2), "mean_ms": round(1000 * sum(times) / n, 1),
            "p95_ms": round(1000 * percentile(times, 0.95), 1), "max_ms": round(1000 * max(times), 1),
            "top1": round(right / n, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="forward", help="a shipped model's name or a model folder (default forward)")
    parser.add_argument("--src", required=True, help="queries, one per line (.gz read as gzip)")
    parser.add_argument("--tgt", required=True, help="the recorded answers, line by line")
    parser.add_argument("--index", help="file of 0-based line numbers of --src to take (default: every line)")
    parser.add_argument("--limit", type=at_least(1), default=200, help="the first this many queries (default 200)")
    parser.add_argument("--methods", type=comma_list(method_name), default="spec-auto,beam,sbs-exact",
                        help="comma-separated (default spec-auto,beam,sbs-exact)")
    parser.add_argument("--n-best", type=at_least(1), default=5, help="n-best of the methods that list several answers")
    parser.add_argument("--augment", type=at_least(1), default=5,
                        help="writings of each query read and pooled (the app: 5)")
    parser.add_argument("--dtype", default="int8", choices=("float32", "int8"),
                        help="what the native engine's decoder calls compute (default int8)")
    parser.add_argument("--warmup", type=at_least(0), default=3, help="queries each method decodes untimed first")
    args = parser.parse_args()
    torch.set_num_threads(1)
    methods = args.methods  # an unknown name was refused by argparse, naming the choices
    try:  # before the model loads: the queries are there and readable, and the model loads
        check_inputs([("--src", args.src), ("--tgt", args.tgt), ("--index", args.index)])
        check_models([("--model", args.model)])
        sources, targets = read_pairs(args.src, args.tgt, args.index, args.limit)
    except (InputFileError, ValueError) as exc:  # read_pairs' ValueError names the file
        parser.error(str(exc))
    try:
        predictor = Predictor.load(args.model, "cpu", "native", dtype=args.dtype)
    except ValueError as exc:  # weights the native engine cannot read (a run's float32 best/): a traceback
        parser.error(f"--model {args.model}: {exc}")
    try:  # a model trained on one writing of each query: predict's ValueError traceback in the warm-up
        predictor.check_augment(args.augment)
    except ValueError as exc:
        parser.error(f"--augment {args.augment}: {exc}")
    readable = []
    for source, target in zip(sources, targets or []):
        try:
            predictor.prepare(source)
        except ValueError:  # a query the model refuses is left out of every method
            continue
        readable.append((source, canonical_or_none(target)))
    if not readable:
        raise SystemExit("page_latency.py: the model reads none of the queries: nothing to time")

    def options(name: str) -> dict:
        return {"method": name, "n_best": args.n_best if METHODS[name].many else 1, "augment": args.augment,
                "time_limit_s": None}  # a stopped query's time is no latency: each is timed whole

    for name in methods:
        for source, _ in readable[:args.warmup]:
            predictor.predict(source, **options(name))
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    right = dict.fromkeys(methods, 0)
    for i, (source, target) in enumerate(readable):
        for name in methods if i % 2 == 0 else methods[::-1]:
            clear_caches()  # each method checks this query's answers afresh, as the page's one call does
            start = time.perf_counter()
            result = predictor.predict(source, **options(name))
            seconds[name].append(time.perf_counter() - start)
            first = result.in_model_order()[0].smiles if result.ok and result.predictions else None
            right[name] += first is not None and first == target
    print(json.dumps({
        "model": args.model, "dtype": args.dtype, "augment": args.augment, "n_best": args.n_best,
        "queries": len(readable),
        "methods": {name: method_summary(times, right[name]) for name, times in seconds.items()}}, indent=2))


if __name__ == "__main__":
    main()
