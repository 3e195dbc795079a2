"""Ranking pairs for a fine-tune: training reactions whose recorded product the model ranks below another answer.

python3 tools/rank_pairs.py mine --model models/forward --data data/forward_mit_rooted10 --out pairs.tsv
python3 -m molspec_core train --data data/forward_gln_mitreplay63 --init models/forward --pairs pairs.tsv \
    --pair-weight 0.5 --pair-margin 1.0 ...

The shipped forward model names the recorded product within its 5 answers far more often than first (USPTO-MIT
test, one writing: 87.6% against 75.6%), and cross-entropy on the recorded product alone never asks it to rank
the product above the answers it prefers. `mine` decodes each training reaction's first writing with beam search
(the app's method) and, where the recorded product is not first, keeps the answers ranked above it (or the first
--negatives answers when the product is not among them) as negatives: one line per writing of that reaction,
`source<TAB>recorded product<TAB>negative`, the negative as the model wrote it. `train --pairs` then adds a hinge
on the sequences' summed log-probabilities (beam search's score), so that the recorded product outscores each
negative by the margin. Answers that are the recorded product in another writing are never negatives.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import InputFileError, check_inputs, check_models, check_outputs, made_by, read_json  # noqa: E402  (tools/_toolbox.py)
from hard_examples import check_in_order, reaction_starts  # noqa: E402  (a sibling tool)

from molspec_core.argtypes import Bounds, argtype, at_least  # noqa: E402
from molspec_core.calibration import weights_fingerprint  # noqa: E402
from molspec_core.checkpoint import inspect_folder  # noqa: E402
from molspec_core.chem import canonical_or_none  # noqa: E402
from molspec_core.data import read_lines  # noqa: E402
from molspec_core.io import OutputFileError, fitted_name, write_text_file  # noqa: E402
from molspec_core.decoding.beam import beam_search  # noqa: E402
from molspec_core.service import Predictor, model_folder  # noqa: E402
from molspec_core.tokenizer import TokenizeError, Vocab  # noqa: E402


def negatives_of(answers: list[str], product: str, most: int) -> tuple[int | None, list[str]]:
    """The recorded product's rank among `answers` (0-based; None when absent) and the answers to push below it:
    those ranked above it, or the first `most` when it is absent; never one that is the product itself."""
    key = canonical_or_none(product) or product
    keys = [canonical_or_none(a) for a in answers]
    rank = next((i for i, k in enumerate(keys) if k == key), None)
    above = answers[:rank] if rank is not None else answers
    return rank, [a for a, k in zip(above, keys) if k != key][:most]


class NoPairs(ValueError):
    """A pairs file that holds no pairs."""


def summary_path(out: Path) -> Path:
    """Where `mine` and `near` write their summary: beside the pairs, named as they are but for the suffix .json, a name
    near the file system's limit cut to fit (io.fitted_name): --out <251 letters>.tsv was refused, 'File name too
    long', naming a summary its user never named."""
    return out.with_name(fitted_name(out.stem, ".json"))


def check_paths(out: Path, inputs: list[tuple[str, Path]]) -> None:
    """OutputFileError, before any work, where the pairs or their summary would replace an input, or each other
    (pairs named *.json)."""
    check_outputs([("--out", out), ("the summary (--out with the suffix .json)", summary_path(out))], inputs)


def mine(model: str, data: Path, out: Path, width: int = 5, most: int = 2, limit: int = 0,
         batch: int = 8, threads: int = 1) -> dict:
    import torch

    check_inputs([("--data", data / name) for name in ("train.src", "train.tgt", "stats.json")])
    check_paths(out, [("--data's train.src", data / "train.src"), ("--data's train.tgt", data / "train.tgt")])
    check_models([("--model", model)])
    # a retro folder's lines were mined as forward reactions (their writings grouped by target), without a word
    stats = read_json("--data", data / "stats.json")
    try:
        check_in_order(data, stats)
    except ValueError as exc:
        raise InputFileError(str(exc)) from None
    task = stats.get("task")
    if task != "forward":
        raise InputFileError(f"--data {data} holds {task} data; ranking pairs are mined from forward data")
    if (model_task := inspect_folder(model_folder(model)).config.get("task", "forward")) != "forward":
        raise InputFileError(f"--model {model} is a {model_task} model; ranking pairs are mined with a forward model")
    torch.set_num_threads(threads)
    predictor = Predictor.load(model, device="cpu", dtype="float32")
    sources, targets = read_lines(data / "train.src"), read_lines(data / "train.tgt")
    starts = reaction_starts(sources, targets)
    ends = [*starts[1:], len(targets)]
    if limit:
        starts, ends = starts[:limit], ends[:limit]
    ranks: dict[str, int] = {"first": 0, "2-5": 0, "absent": 0, "refused": 0}
    lines, began = [], time.time()
    for b in range(0, len(starts), batch):
        chunk = range(b, min(b + batch, len(starts)))
        ids, kept = [], []
        for r in chunk:
            try:
                ids.append(predictor.vocab.encode(sources[starts[r]]))
                kept.append(r)
            except ValueError:
                ranks["refused"] += 1
        for r, result in zip(kept, beam_search(predictor.model, ids, width)):
            answers = [predictor.vocab.decode(h.tokens) for h in result.hypotheses]
            rank, negatives = negatives_of(answers, targets[starts[r]], most)
            ranks["first" if rank == 0 else "absent" if rank is None else "2-5"] += 1
            for line in range(starts[r], ends[r]):
                lines += [f"{sources[line]}\t{targets[line]}\t{neg}\n" for neg in negatives]
        if b % (batch * 100) == 0:
            print(f"{b + len(chunk)} / {len(starts)} reactions, {time.time() - began:.0f} s, {ranks}", flush=True)
    write_text_file(out, "".join(lines))
    summary = {"model": model, "data": str(data), "width": width, "negatives_at_most": most,
               "reactions": len(starts), "product_rank": ranks, "pairs": len(lines),
               "minutes": round((time.time() - began) / 60, 1), "weights": weights_fingerprint(predictor.path),
               **made_by()}
    write_text_file(summary_path(out), json.dumps(summary, indent=2) + "\n")
    return summary


def gaps(model: str, lines: list[tuple[str, str, str]], batch: int = 32, threads: int = 1) -> list[float]:
    """Per line, the model's summed log-probability of the product minus that of the negative (teacher-forced)."""
    import torch

    from molspec_core.train import encode_pairs, pair_gaps

    torch.set_num_threads(threads)
    predictor = Predictor.load(model, device="cpu", engine="torch")
    net, pairs = predictor.model.eval(), encode_pairs(lines, predictor.vocab)
    out: list[float] = []
    with torch.inference_mode():
        for b in range(0, len(lines), batch):
            out += pair_gaps(net, list(range(b, min(b + batch, len(lines)))), pairs, torch.device("cpu"))[0].tolist()
    return out


def near(model: str, pairs: Path, out: Path, max_gap: float, threads: int = 1) -> dict:
    """The pairs whose product the model scores at most `max_gap` nats below the negative, judged on each
    (reaction, negative)'s first line (its mined writing): near misses, which a small change of the weights
    turns, rather than products the model finds far less likely than its answer (often noisy records).
    NoPairs, before anything is written, for a file of no pairs (mine writes one where the model already ranks
    every recorded product first)."""
    check_inputs([("--pairs", pairs)])
    check_paths(out, [("--pairs", pairs)])
    check_models([("--model", model)])
    lines = [tuple(line.split("\t")) for line in read_lines(pairs)]
    odd = next((number for number, line in enumerate(lines, 1) if len(line) != 3), None)
    if odd is not None:  # was "not enough values to unpack", naming neither file nor line
        raise InputFileError(f"--pairs {pairs}, line {odd}: a pair is source, product and negative, tab-separated "
                             "(as mine writes them)")
    if not lines:
        raise NoPairs(f"{pairs} holds no pairs (mine writes none where the model ranks every recorded product "
                      "first): no near misses to keep, nothing written")
    # a reaction is its reactants (each writing's canonical SMILES) and product: two reactions that make one product
    # and were given one negative were both judged on the first's writing
    keys = [(canonical_or_none(source) or source, product, negative) for source, product, negative in lines]
    first: dict[tuple[str, str, str], int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    vocab = Vocab.load(model_folder(model) / "vocab.json")
    for i in first.values():  # a TokenizeError traceback once the model had loaded
        try:
            for smiles in lines[i]:
                vocab.encode(smiles)
        except TokenizeError as exc:
            raise InputFileError(f"--pairs {pairs}, line {i + 1}: {exc}: score the pairs with the model that mined "
                                 "them (--model)") from None
    scored = dict(zip(first, gaps(model, [lines[i] for i in first.values()], threads=threads)))
    kept = [line for line, key in zip(lines, keys) if scored[key] >= -max_gap]
    values = sorted(scored.values())
    summary = {"model": model, "pairs": str(pairs), "max_gap": max_gap, "negatives": len(first),
               "negatives_kept": sum(v >= -max_gap for v in values), "lines": len(lines), "lines_kept": len(kept),
               "gap_quartiles": [round(values[int(q * (len(values) - 1))], 2) for q in (0.25, 0.5, 0.75)],
               "weights": weights_fingerprint(model_folder(model)), **made_by()}
    write_text_file(out, "".join("\t".join(line) + "\n" for line in kept))
    write_text_file(summary_path(out), json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("mine", help="decode each training reaction and write its ranking pairs")
    m.add_argument("--model", required=True, help="model folder to mine (its answers become the negatives)")
    m.add_argument("--data", type=Path, required=True, help="a forward prepare-data folder whose train split to read")
    m.add_argument("--out", type=Path, required=True, help="the TSV of pairs to write, not named .json (a summary "
                   "beside it, .json)")
    m.add_argument("--width", type=at_least(1), default=5, help="beam width of the mining search (default 5)")
    m.add_argument("--negatives", type=at_least(1), default=2, help="negatives per reaction at most (default 2)")
    m.add_argument("--limit", type=at_least(0), default=0, help="mine the first this many reactions (0: all)")
    m.add_argument("--batch", type=at_least(1), default=8, help="queries per beam search call (default 8)")
    m.add_argument("--threads", type=at_least(1), default=1, help="torch threads (default 1)")
    n = sub.add_parser("near", help="keep the near misses of a pairs file: products scored close below their negative")
    n.add_argument("--model", required=True, help="model folder that scores the pairs (the one mined)")
    n.add_argument("--pairs", type=Path, required=True, help="a pairs file written by mine")
    n.add_argument("--out", type=Path, required=True, help="the TSV of kept pairs, neither --pairs nor named .json (a "
                   "summary beside it, .json)")
    n.add_argument("--max-gap", type=argtype(Bounds(low=0)), default=2.5,
                   help="keep a negative the product trails by at most this many nats (default 2.5)")
    n.add_argument("--threads", type=at_least(1), default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    try:
        if args.command == "near":
            summary = near(args.model, args.pairs, args.out, args.max_gap, args.threads)
        else:
            summary = mine(args.model, args.data, args.out, args.width, args.negatives, args.limit,
                           args.batch, args.threads)
    except (InputFileError, OutputFileError) as exc:  # refused before any work
        parser.error(str(exc))
    except NoPairs as exc:
        raise SystemExit(f"rank_pairs.py near: {exc}") from None
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
