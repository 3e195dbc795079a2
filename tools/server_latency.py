"""What `molspec serve` adds to a query: the same predictions called in the process and over HTTP, side by side.

python3 tools/server_latency.py --model forward --src src-test.mixed.txt.gz \
    --index ../shared/bench/uspto_mit_test_500.idx --limit 200 --method spec-auto

One predictor on one thread, served on loopback from this process (molspec_core.server.serve, a thread of its
own); per query, `Predictor.predict` called directly and the same query POSTed to /predict on a kept-alive
connection, in an order that alternates, after --warmup queries each. Prints one JSON object: per way, total
seconds, median and 95th percentile (nearest rank) milliseconds a query, and the median of the per-query
differences (HTTP minus direct), which is what the server adds. Every HTTP answer is checked to equal the direct one.
"""
from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import checked_queries  # noqa: E402  (tools/_toolbox.py)

from molspec_core.argtypes import at_least  # noqa: E402
from molspec_core.bench import percentile  # noqa: E402
from molspec_core.chem import clear_caches  # noqa: E402
from molspec_core.methods import METHODS  # noqa: E402
from molspec_core.server import serve  # noqa: E402
from molspec_core.service import Predictor  # noqa: E402


def way_summary(times: list[float]) -> dict:
    """One way's line of the report, from its queries' `times` (seconds)."""
    return {"seconds": round(sum(times), 2), "median_ms": round(1000 * statistics.median(times), 2),
            "p95_ms": round(1000 * percentile(times, 0.95), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="forward", help="a shipped model's name or a model folder (default forward)")
    parser.add_argument("--src", required=True, help="queries, one per line (.gz read as gzip)")
    parser.add_argument("--index", help="file of 0-based line numbers of --src to take (default: every line)")
    parser.add_argument("--limit", type=at_least(1), default=200, help="the first this many queries (default 200)")
    parser.add_argument("--method", default="spec-auto", choices=METHODS, help="decoding method (default spec-auto)")
    parser.add_argument("--n-best", type=at_least(1), default=1, help="answers per query (default 1)")
    parser.add_argument("--warmup", type=at_least(0), default=5,
                        help="queries decoded both ways untimed first (default 5)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sources = checked_queries(parser, args)  # before the model loads
    predictor = Predictor.load(args.model, "cpu")
    server = serve([predictor], "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=120)
    options = {"method": args.method, "n_best": args.n_best}

    def direct(source: str) -> list[str]:
        result = predictor.predict(source, **options)
        return [p.smiles for p in result.predictions]

    def over_http(source: str) -> list[str]:
        connection.request("POST", "/predict", body=json.dumps({"smiles": source, **options}),
                           headers={"Content-Type": "application/json"})
        result = json.loads(connection.getresponse().read())["results"][0]
        return [p["smiles"] for p in result["predictions"]]

    ways = {"direct": direct, "http": over_http}
    for source in sources[:args.warmup]:
        for way in ways.values():
            way(source)
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    for i, source in enumerate(sources):
        answers = {}
        for name in (list(ways) if i % 2 == 0 else list(ways)[::-1]):
            clear_caches()  # each way checks the query's answers afresh
            started = time.perf_counter()
            answers[name] = ways[name](source)
            seconds[name].append(time.perf_counter() - started)
        if answers["direct"] != answers["http"]:
            raise SystemExit(f"the answers differ on {source}: {answers}")
    server.shutdown()
    n = len(sources)
    added = [h - d for h, d in zip(seconds["http"], seconds["direct"])]
    print(json.dumps({"model": args.model, "method": args.method, "n_best": args.n_best, "queries": n,
                      "ways": {name: way_summary(times) for name, times in seconds.items()},
                      "added_median_ms": round(1000 * statistics.median(added), 2)}, indent=2))


if __name__ == "__main__":
    main()
