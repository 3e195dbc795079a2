"""Time per query of batch sizes and of reading each query in several writings, side by side.

Each configuration BxW (B queries a batch, each read in W writings; W > 1 decodes a query's writings
as one batch, whatever B says) predicts the same queries as the CLI does: a window of batches per
predict call (service.window_size: one query where W > 1), which predict cuts into batches of like
length. BxWf takes the queries in file order instead, one batch per call. Configurations take turns
within each round, in an order that rotates from round to round, after one warm-up batch each:

    python tools/decode_cost.py --model forward --src ../shared/data/uspto_mit/derived/src-test.mixed.txt.gz \
        --index ../shared/bench/uspto_mit_test_500.idx --limit 200 --method beam --n-best 5 \
        --configs 1x1,8x1,8x1f,32x1,1x5 --threads 1 --rounds 2
"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import checked_queries, comma_list, method_name  # noqa: E402  (tools/_toolbox.py)

from molspec_core.argtypes import at_least  # noqa: E402
from molspec_core.native import DTYPES  # noqa: E402
from molspec_core.service import Predictor, window_size  # noqa: E402


Config = tuple[int, int, bool]  # batch size, writings, file order


def parse_config(text: str) -> Config:
    """An argparse type: BxW or BxWf (file order), each number 1 or more."""
    file_order = text.endswith("f")
    batch, _, writings = text.removesuffix("f").partition("x")
    try:
        return at_least(1)(batch), at_least(1)(writings or "1"), file_order
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"a configuration is BxW or BxWf, each number 1 or more, not {text!r}") \
            from None


def run(predictor: Predictor, queries: list[str], config: Config, options: dict) -> float:
    """Seconds to predict `queries` in batches of `batch`, each read in `writings` writings."""
    batch, writings, file_order = config
    step = batch if file_order else window_size(batch, writings)
    started = time.perf_counter()
    for start in range(0, len(queries), step):
        results = predictor.predict(queries[start:start + step], batch_size=batch, augment=writings,
                                    time_limit_s=None, **options)
        failed = [r for r in results if not r.ok]
        if failed:
            raise SystemExit(f"{failed[0].query}: {failed[0].error}")
    return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="forward", help="a shipped model's name or a model folder (default forward)")
    p.add_argument("--src", required=True, help="queries, one per line (.gz read as gzip)")
    p.add_argument("--index", help="file of 0-based line numbers of --src to take (default: every line)")
    p.add_argument("--limit", type=at_least(1), default=200, help="the first this many queries (default 200)")
    p.add_argument("--method", type=method_name, default="beam", help="decoding method (default beam)")
    p.add_argument("--n-best", type=at_least(1), default=5, help="answers per query (default 5)")
    p.add_argument("--configs", type=comma_list(parse_config), default="1x1,8x1,32x1",
                   help="BxW or BxWf (file order), comma-separated; the first is the baseline")
    p.add_argument("--threads", type=at_least(1), default=1, help="torch CPU threads (default 1)")
    p.add_argument("--rounds", type=at_least(1), default=2,
                   help="timed rounds over all configurations, 1 or more (default 2)")
    p.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="float32, or int8 (native engine; the app's arithmetic on a CPU)")
    args = p.parse_args()
    queries = checked_queries(p, args)  # before the model loads
    torch.set_num_threads(args.threads)
    try:
        predictor = Predictor.load(args.model, device="cpu", dtype=args.dtype)
    except ValueError as exc:  # int8 where the native engine cannot run: a traceback
        p.error(f"--dtype {args.dtype}: {exc}")
    for batch, writings, _ in args.configs:
        try:  # a model trained on one writing of each query: predict's ValueError traceback in the warm-up
            predictor.check_augment(writings)
        except ValueError as exc:
            p.error(f"--configs {batch}x{writings}: {exc}")
    options = {"method": args.method, "n_best": args.n_best}
    configs = args.configs
    for config in configs:  # warm-up: one batch each
        run(predictor, queries[:config[0]], config, options)
    totals = {config: 0.0 for config in configs}
    for r in range(args.rounds):
        for config in configs[r % len(configs):] + configs[:r % len(configs)]:
            totals[config] += run(predictor, queries, config, options)
    n = len(queries) * args.rounds
    base = totals[configs[0]]
    print(f"{predictor.path.name}, {args.method} n-best {args.n_best}, {len(queries)} queries x {args.rounds} rounds, "
          f"{args.threads} thread(s), {predictor.engine_description}")
    for (batch, writings, file_order), total in totals.items():
        order = "file order" if file_order else "by length"
        print(f"batch {batch:>3} ({order}), {writings} writing(s): {total:7.2f} s, {total / n * 1000:6.1f} ms a query, "
              f"{total / base:.2f}x the first")


if __name__ == "__main__":
    main()
