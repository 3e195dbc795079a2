"""Rows per second of `molspec predict --input` on one machine: the single-process CLI against
`--ray local` with 1 and 2 workers, on the same queries, and what Ray adds per row (issue 18, part 3).

Every run is a fresh `molspec predict` process (with --ray local, a fresh cluster too), timed end to end
as a user sees it. Each mode also runs on the first --small-rows queries: the difference between the
two runs is the cost of the extra rows alone, so Ray's overhead per row is not blurred by the fixed
start-up (process, model load, cluster). The single-process run gets --threads torch threads; a Ray
worker always gets one per CPU it is given (one here), so 1 worker against --threads 1 is like for like.
The script also checks that every Ray output equals the single-process one (time_ms left out; a
score or probability to a unit of its last printed digit, scale.first_difference).

    python3 tools/ray_throughput.py                      # forward model, 2,000 USPTO-MIT test queries
    python3 tools/ray_throughput.py --rows 64 --small-rows 16   # a quick check that it runs
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import InputFileError, check_inputs, comma_list, method_name  # noqa: E402  (tools/_toolbox.py)

from molspec_core.argtypes import at_least  # noqa: E402
from molspec_core.cli import RAY_PACKAGE_MISSING, installed  # noqa: E402
from molspec_core.data import open_text  # noqa: E402
from molspec_core.scale import first_difference  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SRC = ROOT.parent / "shared" / "data" / "uspto_mit" / "derived" / "src-test.mixed.txt.gz"


def write_queries(src: Path, n_rows: int, out: Path) -> None:
    """The first n_rows lines of src (plain or .gz), one SMILES per line."""
    with open_text(src) as f:  # .gz and .xz too; a file it cannot read is a ValueError naming it
        lines = [line.rstrip("\n") for _, line in zip(range(n_rows), f)]
    if len(lines) < n_rows:
        raise SystemExit(f"{src} has {len(lines)} lines; asked for {n_rows}")
    out.write_text("\n".join(lines) + "\n")


def run(queries: Path, output: Path, args: argparse.Namespace, workers: int | None) -> float:
    """Wall seconds of one `molspec predict` process."""
    command = [sys.executable, "-m", "molspec_core", "predict", "--model", args.model, "--device", "cpu",
               "--method", args.method, "--batch-size", str(args.batch_size),
               "--input", str(queries), "--output", str(output)]
    if workers:
        command += ["--ray", args.ray, "--workers", str(workers)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return seconds


def per_row_seconds(name: str, small: float, full: float, small_rows: int, rows: int) -> float:
    """Seconds each row past the first small_rows took in mode `name`: the two runs' difference over the extra rows.
    A ValueError where the longer run took no longer: the start-up's noise hides what the rows cost, and the
    figures derived from it (per row, start-up, overhead) came out negative or far too large."""
    if full <= small:
        raise ValueError(f"{name}: its {rows} rows took no longer than its {small_rows} rows ({full:.1f} s against "
                         f"{small:.1f} s), so the cost of a row is lost in the start-up's noise; give more --rows")
    return (full - small) / (rows - small_rows)


def without_time(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        records = list(csv.reader(f))
    drop = records[0].index("time_ms")
    return [record[:drop] + record[drop + 1:] for record in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC, help="queries, one per line (.gz read)")
    parser.add_argument("--rows", type=at_least(2), default=2000,
                        help="the first this many queries of --src (default 2000)")
    parser.add_argument("--small-rows", type=at_least(1), default=200, help="the short run that measures start-up")
    parser.add_argument("--model", default="forward", help="a shipped model's name or a model folder (default forward)")
    parser.add_argument("--method", type=method_name, default="greedy", help="decoding method (default greedy)")
    parser.add_argument("--batch-size", type=at_least(1), default=8,
                        help="the predict command's --batch-size (default 8)")
    parser.add_argument("--threads", type=at_least(1), default=1, help="torch threads of the single-process run")
    parser.add_argument("--workers", type=comma_list(at_least(1)), default="1,2",
                        help="Ray worker counts to time, comma-separated (default 1,2)")
    parser.add_argument("--ray", default="local", help="the --ray address (local: a fresh cluster per run)")
    args = parser.parse_args()
    if not 0 < args.small_rows < args.rows:
        raise SystemExit("--small-rows must be above 0 and below --rows")
    try:
        check_inputs([("--src", args.src)])
    except InputFileError as exc:
        parser.error(str(exc))
    if not installed("ray"):  # found only at the first Ray run, after the single process's minutes, and lost them
        parser.error(f"this tool times molspec predict --ray: {RAY_PACKAGE_MISSING}")

    modes: list[tuple[str, int | None]] = [("single process", None)]
    modes += [(f"ray, {n} worker{'s' if n > 1 else ''}", n) for n in args.workers]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        try:
            write_queries(args.src, args.rows, folder / "all.txt")
            write_queries(args.src, args.small_rows, folder / "small.txt")
        except ValueError as exc:
            parser.error(f"--src: {exc}")
        timings = {}
        for name, workers in modes:
            tag = f"w{workers or 0}"
            small = run(folder / "small.txt", folder / f"small-{tag}.csv", args, workers)
            full = run(folder / "all.txt", folder / f"all-{tag}.csv", args, workers)
            timings[name] = (small, full)
            if workers and (where := first_difference(without_time(folder / f"all-{tag}.csv"),
                                                      without_time(folder / "all-w0.csv"))):
                raise SystemExit(f"{name}: the output differs from the single-process output ({where})")
            print(f"{name:<16} {args.rows} rows {full:7.1f} s ({args.rows / full:6.1f} rows/s); "
                  f"{args.small_rows} rows {small:6.1f} s", flush=True)

    try:
        per_row = {name: per_row_seconds(name, small, full, args.small_rows, args.rows)
                   for name, (small, full) in timings.items()}
    except ValueError as exc:
        raise SystemExit(f"ray_throughput.py: {exc}") from None
    single_small, single_per_row = timings["single process"][0], per_row["single process"]
    print(f"\n{args.model}, {args.method}, batch size {args.batch_size}, single process with {args.threads} "
          f"thread(s); outputs identical (time_ms aside)")
    print("| run | rows/s, end to end | start-up (s) | ms per row after start-up | rows/s after start-up |")
    print("|---|---|---|---|---|")
    for name, (small, full) in timings.items():
        startup = small - per_row[name] * args.small_rows
        print(f"| {name} | {args.rows / full:.1f} | {startup:.1f} | {per_row[name] * 1000:.2f} | "
              f"{1 / per_row[name]:.1f} |")
    one_worker = next((name for name in timings if name.endswith(" 1 worker")), None)
    if one_worker:
        overhead = (per_row[one_worker] - single_per_row) * 1000
        print(f"\nRay's overhead per row (1 worker, 1 thread, against the single process, {args.threads} thread(s)): "
              f"{overhead:+.2f} ms; "
              f"its start-up: {timings[one_worker][0] - per_row[one_worker] * args.small_rows:.1f} s against "
              f"{single_small - single_per_row * args.small_rows:.1f} s")


if __name__ == "__main__":
    main()
