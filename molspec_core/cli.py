"""python -m molspec_core {predict,evaluate,bench,train,prepare-data} (also installed as `molspec`)."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from .service import DEFAULT_TIME_LIMIT_S, METHODS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="molspec", description="MolSpec: reaction prediction with speculative decoding")
    sub = parser.add_subparsers(dest="command", required=True)

    def model_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", default="forward", help="model folder, or a shipped model name (forward, retro)")
        p.add_argument("--device", default="auto", help="auto, cpu or cuda")
        p.add_argument("--method", default="greedy", choices=METHODS)
        p.add_argument("--n-best", type=int, default=1)
        p.add_argument("--draft-len", type=int, default=None)
        p.add_argument("--n-drafts", type=int, default=None)
        p.add_argument("--batch-size", type=int, default=8)
        p.add_argument("--temperature", type=float, default=1.0, help="sampling methods")
        p.add_argument("--top-k", type=int, default=0, help="sampling methods (0: no cut)")
        p.add_argument("--beta", type=int, default=1, help="relaxed: draft within the top-beta tokens")
        p.add_argument("--tau", type=float, default=0.0, help="relaxed: and within tau nats of the top token")
        p.add_argument("--delta", type=float, default=0.0, help="mentored: KL budget per token")
        p.add_argument("--seed", type=int, default=0, help="sampling methods")

    p = sub.add_parser("predict", help="predict for one SMILES or a file of queries")
    model_args(p)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--smiles")
    group.add_argument("--input", help="TXT (one SMILES per line) or CSV with a smiles column")
    p.add_argument("--column", help="CSV column holding the queries")
    p.add_argument("--output", help="CSV to write (required with --input)")
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S,
                   help="seconds per query before it is reported as an error (default %(default)s)")

    p = sub.add_parser("evaluate", help="top-k accuracy on parallel source/target files")
    model_args(p)
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--index", help="file of 0-based line numbers selecting the queries")
    p.add_argument("--limit", type=int)
    p.add_argument("--out", help="JSON report")

    p = sub.add_parser("bench", help="time methods side by side on the same queries")
    model_args(p)
    p.add_argument("--src", required=True)
    p.add_argument("--tgt")
    p.add_argument("--index")
    p.add_argument("--limit", type=int)
    p.add_argument("--methods", default="greedy,greedy-uncached,spec-paper,spec-lookup,spec-pointer,spec-auto")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--beam-width", type=int, default=None, help="beam width = n-best for beam, sbs, sbs-exact")
    p.add_argument("--sweep", help="a lossy method's knob over values, e.g. tau=0,0.5,1,2 (with --methods relaxed) "
                   "or delta=0,0.1,0.5 (with --methods mentored)")
    p.add_argument("--out", help="JSON report (a plotly HTML is written beside it)")
    p.set_defaults(batch_size=1)

    p = sub.add_parser("prepare-data", help="tokenized train/val/test files from the USPTO data")
    p.add_argument("--task", choices=("forward", "retro"), required=True)
    p.add_argument("--data", default=None, help="the shared data folder (default ../shared/data)")
    p.add_argument("--out", required=True)
    p.add_argument("--n-val", type=int, default=2000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--augment", type=int, default=20, help="retro: root-aligned SMILES per reaction (0: canonical only)")

    from .train import add_arguments

    p = sub.add_parser("train", help="train a model on prepared data")
    add_arguments(p)
    return parser


def sampling_options(args: argparse.Namespace):
    from .decoding.sampling import SamplingOptions

    return SamplingOptions(temperature=args.temperature, top_k=args.top_k, beta=args.beta, tau=args.tau,
                           delta=args.delta, seed=args.seed)


def cmd_predict(args: argparse.Namespace) -> int:
    from .io import InputFileError, read_queries, write_csv
    from .service import Predictor

    predictor = Predictor.load(args.model, args.device)
    options = dict(method=args.method, n_best=args.n_best, draft_len=args.draft_len, n_drafts=args.n_drafts,
                   sampling=sampling_options(args), time_limit_s=args.time_limit)
    if args.smiles is not None:
        result = predictor.predict(args.smiles, **options)
        if not result.ok:
            print(f"error: {result.error}", file=sys.stderr)
            return 1
        print(f"query: {result.canonical_query}   ({result.stats.model_calls} model calls, "
              f"{result.stats.draft_tokens_accepted} draft tokens accepted, {result.stats.wall_time_s * 1000:.0f} ms)")
        print(f"{'rank':>4}  {'score':>8}  {'prob':>6}  valid  smiles")
        for p in result.predictions:
            print(f"{p.rank:>4}  {p.score:>8.3f}  {p.probability:>6.3f}  {'yes' if p.valid else 'no ':>5}  {p.smiles}")
        return 0
    if not args.output:
        print("error: --input needs --output", file=sys.stderr)
        return 2
    try:
        queries = read_queries(args.input, args.column)
    except (InputFileError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    from tqdm import tqdm

    header = ["row", "query", "rank", "smiles", "score", "probability", "valid", "method", "time_ms",
              "model_calls", "accepted_tokens", "error"]
    step = max(1, args.batch_size)
    n_bad = 0

    def rows() -> Iterator[list[object]]:  # streamed to the CSV batch by batch: memory stays bounded for 100,000 queries
        nonlocal n_bad
        for start in tqdm(range(0, len(queries), step), desc="predict", unit="batch"):
            chunk = queries[start:start + step]
            for offset, result in enumerate(predictor.predict(chunk, batch_size=step, **options)):
                row = start + offset + 1
                if not result.ok:
                    n_bad += 1
                    yield [row, result.query, "", "", "", "", "", args.method, "", "", "", result.error]
                    continue
                for p in result.predictions:
                    yield [row, result.query, p.rank, p.smiles, f"{p.score:.4f}", f"{p.probability:.4f}", p.valid,
                           args.method, f"{result.stats.wall_time_s * 1000:.1f}", result.stats.model_calls,
                           result.stats.draft_tokens_accepted, ""]

    write_csv(args.output, header, rows())
    print(f"{len(queries) - n_bad} queries predicted, {n_bad} rejected (see the error column) -> {args.output}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluate import evaluate, read_pairs
    from .service import Predictor

    predictor = Predictor.load(args.model, args.device)
    sources, targets = read_pairs(args.src, args.tgt, args.index, args.limit)
    method = "beam" if args.n_best > 1 and args.method not in ("beam", "sbs", "sbs-exact") else args.method
    report = evaluate(predictor, sources, targets or [], args.n_best, method, args.batch_size)
    report.update(model=str(predictor.path), src=args.src, tgt=args.tgt, index=args.index)
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import torch

    from .bench import markdown_table, run_bench, save_report
    from .evaluate import read_pairs
    from .service import Predictor

    if args.threads:
        torch.set_num_threads(args.threads)
    predictor = Predictor.load(args.model, args.device)
    sources, targets = read_pairs(args.src, args.tgt, args.index, args.limit)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        print(f"error: unknown methods {unknown}; choose from {', '.join(METHODS)}", file=sys.stderr)
        return 2
    if args.sweep:
        from .bench import SWEEPS, run_sweep

        knob, _, values = args.sweep.partition("=")
        lossy = [m for m in methods if m in SWEEPS]
        if len(lossy) != 1 or SWEEPS[lossy[0]] != knob.strip():
            print(f"error: --sweep needs one of {', '.join(f'{m} ({k})' for m, k in SWEEPS.items())} in --methods "
                  "and its knob, e.g. --methods relaxed --sweep tau=0,1,2", file=sys.stderr)
            return 2
        try:
            grid = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            print(f"error: --sweep values must be numbers: {values!r}", file=sys.stderr)
            return 2
        report = run_sweep(predictor, sources, targets, lossy[0], grid, sampling_options(args), args.warmup)
    else:
        report = run_bench(predictor, sources, targets, methods, args.batch_size, args.beam_width or args.n_best,
                           args.draft_len, args.n_drafts, args.warmup, sampling=sampling_options(args))
    report.update(src=args.src, tgt=args.tgt, index=args.index, limit=args.limit)
    print(markdown_table(report))
    if args.out:
        save_report(report, Path(args.out))
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    from .data import DEFAULT_DATA, prepare

    stats = prepare(args.task, Path(args.data) if args.data else DEFAULT_DATA, Path(args.out), args.n_val,
                    args.workers, args.augment)
    print(json.dumps(stats, indent=2))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .train import run

    return run(args)


COMMANDS = {"predict": cmd_predict, "evaluate": cmd_evaluate, "bench": cmd_bench,
            "prepare-data": cmd_prepare, "train": cmd_train}


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ValueError as exc:  # bad options or files: a message, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
