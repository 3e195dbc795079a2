"""Two draft models for spec-sample-draft, timed side by side on the same queries, with plain sampling beside them.

python3 tools/draft_compare.py --model forward --draft runs/fwd_draft80/export \
    --src ../shared/data/uspto_mit/derived/src-test.mixed.txt.gz \
    --tgt ../shared/data/uspto_mit/derived/tgt-test.txt.gz \
    --index ../shared/bench/uspto_mit_test_500.idx --limit 200 --out bench/forward_cpu_draft80_mit200.json

The model folder's own draft/ runs `spec-sample-draft`; --draft runs `spec-sample-draft@new`, on a copy of the
model made of links to its files with draft/ pointing at --draft instead (so that Predictor.load checks it as it
checks a shipped draft model). Both are timed by `molspec bench`'s loop (bench.run_bench), interleaved batch by batch
with `sample` (and greedy, its reference) after a warm-up, in an order shuffled per query (bench.batch_order); the
same sampling options and seed for each. Prints bench's table with each draft's acceptance rate, and writes bench's
JSON report to --out.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import InputFileError, check_inputs, check_models, check_outputs  # noqa: E402

from molspec_core.argtypes import Bounds, argtype, at_least  # noqa: E402
from molspec_core.bench import markdown_table, run_bench, save_report  # noqa: E402
from molspec_core.checkpoint import CheckpointError, inspect_folder  # noqa: E402
from molspec_core.evaluate import read_pairs  # noqa: E402
from molspec_core.methods import SamplingOptions  # noqa: E402
from molspec_core.service import (MAX_DRAFT_LEN, MAX_TEMPERATURE, MIN_TEMPERATURE, Predictor,  # noqa: E402
                                  model_folder)

NEW = "new"  # the engine name run_bench gives the model with the other draft: spec-sample-draft@new


def with_draft(model: Path, draft: Path, into: Path) -> Path:
    """A folder of links to `model`'s files whose draft/ is `draft`."""
    folder = into / model.name
    folder.mkdir()
    for item in model.iterdir():
        if item.name != "draft":
            (folder / item.name).symlink_to(item.resolve())
    (folder / "draft").symlink_to(draft.resolve(), target_is_directory=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="forward", help="a shipped model's name or a model folder with a draft/ "
                        "(default forward)")
    parser.add_argument("--draft", required=True, help="the other draft model's folder (a train --out export)")
    parser.add_argument("--src", required=True, help="queries, one per line (.gz too)")
    parser.add_argument("--tgt", help="their known answers (adds top-1 to each row)")
    parser.add_argument("--index", help="file of 0-based line numbers of --src to take")
    parser.add_argument("--limit", type=at_least(1), default=200, help="the first this many queries (default 200)")
    parser.add_argument("--warmup", type=at_least(0), default=5, help="batches each method decodes first, untimed")
    parser.add_argument("--temperature", type=argtype(Bounds(low=MIN_TEMPERATURE, high=MAX_TEMPERATURE)),
                        default=SamplingOptions.temperature,
                        help="sampling temperature, the same for every method (default %(default)s)")
    parser.add_argument("--seed", type=at_least(0), default=0, help="the sampling seed of every query (default 0)")
    parser.add_argument("--draft-len", type=at_least(1, MAX_DRAFT_LEN), default=None,
                        help="draft-model tokens per call (default: the method's, methods.py)")
    parser.add_argument("--threads", type=at_least(1), default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", required=True, help="bench's JSON report")
    args = parser.parse_args(argv)

    inputs = [("--src", args.src), ("--tgt", args.tgt), ("--index", args.index)]
    try:  # before the model loads: the queries are there and readable, and the report replaces none of them
        check_inputs([*inputs, ("--draft", args.draft)])
        check_outputs([("--out", args.out)], inputs)
        check_models([("--model", args.model)])
        sources, targets = read_pairs(args.src, args.tgt, args.index, args.limit)
    except (InputFileError, ValueError) as exc:  # OutputFileError is a ValueError; read_pairs' names the file
        parser.error(str(exc))
    torch.set_num_threads(args.threads)
    model, draft = model_folder(args.model), Path(args.draft)
    if not (model / "draft").is_dir():
        parser.error(f"{model} has no draft/ to compare with")
    if not (draft / "config.json").is_file():
        parser.error(f"{draft} is not a model folder (no config.json)")
    sampling = SamplingOptions(temperature=args.temperature, seed=args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        linked = with_draft(model, draft, Path(tmp))
        try:  # a draft of another vocabulary or fewer positions: a traceback naming the temporary folder, after a load
            inspect_folder(linked)
        except CheckpointError as exc:
            told = str(exc).replace(str(linked / "draft"), str(draft)).replace(str(linked), str(model))
            parser.error(f"--draft {draft} cannot draft for {model}: {told}")
        shipped = Predictor.load(model, device="cpu")
        other = Predictor.load(linked, device="cpu")
        # Both columns run one main model, as they differ in the draft alone: with a second copy of it the second
        # column ran 7% slower with the same draft in both (5.81 against 6.22 s, session 85), the copy's 46 MB of
        # weights cold in the cache after the other column's method in most of bench's turns
        other.model = shipped.model
        report = run_bench(shipped, sources, targets, ["sample", "spec-sample-draft", f"spec-sample-draft@{NEW}"],
                           draft_len=args.draft_len, warmup=args.warmup, sampling=sampling, engines={NEW: other})
    report["draft_models"] = {"spec-sample-draft": str(model / "draft"), f"spec-sample-draft@{NEW}": str(draft)}
    report.update(src=args.src, tgt=args.tgt, index=args.index, limit=args.limit)  # the query set, as bench records it
    save_report(report, Path(args.out), html=False)
    print(markdown_table(report))
    for name, entry in report["methods"].items():
        if "acceptance_rate" in entry:
            print(f"{name}: acceptance {entry['acceptance_rate']:.3f}, speedup vs sample "
                  f"{entry.get('speedup_vs_sample', float('nan')):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
