"""Time per query of batch sizes and of reading each query in several writings, side by side.

Each configuration BxW (B queries a batch, each read in W writings; W > 1 decodes a query's writings
as one batch, whatever B says) predicts the same queries; configurations take turns within each round,
in an order that rotates from round to round, after one warm-up batch each:

    python tools/decode_cost.py --model forward --src ../shared/data/uspto_mit/derived/src-test.mixed.txt.gz \
        --index ../shared/bench/uspto_mit_test_500.idx --limit 200 --method beam --n-best 5 \
        --configs 1x1,8x1,32x1,1x5 --threads 1 --rounds 2
"""
import argparse
import time

import torch

from molspec_core.evaluate import read_pairs
from molspec_core.service import Predictor


def parse_config(text: str) -> tuple[int, int]:
    batch, _, writings = text.partition("x")
    return int(batch), int(writings or 1)


def run(predictor: Predictor, queries: list[str], batch: int, writings: int, options: dict) -> float:
    """Seconds to predict `queries` in batches of `batch`, each read in `writings` writings."""
    started = time.perf_counter()
    for start in range(0, len(queries), batch):
        results = predictor.predict(queries[start:start + batch], batch_size=batch, augment=writings,
                                    time_limit_s=None, **options)
        failed = [r for r in results if not r.ok]
        if failed:
            raise SystemExit(f"{failed[0].query}: {failed[0].error}")
    return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="forward")
    p.add_argument("--src", required=True)
    p.add_argument("--index")
    p.add_argument("--limit", type=int, default=200)
    p.add_argument("--method", default="beam")
    p.add_argument("--n-best", type=int, default=5)
    p.add_argument("--configs", default="1x1,8x1,32x1", help="BxW, comma-separated; the first is the baseline")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    predictor = Predictor.load(args.model, device="cpu")
    queries, _ = read_pairs(args.src, None, args.index, args.limit)
    options = {"method": args.method, "n_best": args.n_best}
    configs = [parse_config(c) for c in args.configs.split(",")]
    for batch, writings in configs:  # warm-up: one batch each
        run(predictor, queries[:batch], batch, writings, options)
    totals = {config: 0.0 for config in configs}
    for r in range(args.rounds):
        for config in configs[r % len(configs):] + configs[:r % len(configs)]:
            totals[config] += run(predictor, queries, *config, options)
    n = len(queries) * args.rounds
    base = totals[configs[0]]
    print(f"{predictor.path.name}, {args.method} n-best {args.n_best}, {len(queries)} queries x {args.rounds} rounds, "
          f"{args.threads} thread(s), {predictor.engine_description}")
    for (batch, writings), total in totals.items():
        print(f"batch {batch:>3}, {writings} writing(s): {total:7.2f} s, {total / n * 1000:6.1f} ms a query, "
              f"{total / base:.2f}x the first")


if __name__ == "__main__":
    main()
