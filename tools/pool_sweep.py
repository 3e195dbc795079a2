"""How the pooling exponent of test-time augmentation ranks a model's answers.

`decode` reads each query in N writings the way the app does (Predictor._views, then one decode per query),
and saves every writing's answers, as the model gave them, to a JSON-lines file whose first line names what decoded
them (the model folder and its weights' sha256, method, n-best, writings, dtype, the query files, the command and the
code's commit). `score` says so, and pools those answers offline with each exponent asked for (service.pool_writings'
rule, its exponent a parameter here) and prints top-k in the model's order and in the app's (sane answers first), and
how often the first answer is not sane.
Decoding once and pooling many ways keeps the comparison exact: every exponent ranks the same answers.

    python3 tools/pool_sweep.py decode --model forward --src S --tgt T --limit 1000 --augment 5 --dtype int8 \
        --out runs/pool_valid1000.jsonl
    python3 tools/pool_sweep.py score runs/pool_valid1000.jsonl --powers 1,0.5,0.25,0.1
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _toolbox import (InputFileError, check_inputs, check_models, check_outputs,  # noqa: E402  (tools/_toolbox.py)
                      comma_list, made_by, method_name)

from molspec_core.argtypes import Bounds, argtype, at_least  # noqa: E402
from molspec_core.calibration import weights_fingerprint  # noqa: E402
from molspec_core.chem import canonical_or_none  # noqa: E402
from molspec_core.data import read_lines  # noqa: E402
from molspec_core.evaluate import read_pairs  # noqa: E402
from molspec_core.io import OutputFileError  # noqa: E402
from molspec_core.native import DTYPES  # noqa: E402
from molspec_core.service import Predictor, pool_writings  # noqa: E402
from molspec_core.threads import use_threads  # noqa: E402

Answer = tuple[str, float, bool]  # (canonical answer or raw text, log-probability, sane)
DECODED = "decoded"  # the key of decode's first line: what decoded the answers below it


def pooled(writings: Sequence[Sequence[Answer]], power: float) -> list[tuple[str, bool]]:
    """The writings' answers pooled as the app pools them (service.pool_writings) but with exponent
    `power`, as (answer, sane), best first."""
    # sane is judged against the canonical query (Predictor._predictions), so every writing agrees on it
    sane = {answer: is_sane for writing in writings for answer, _, is_sane in writing}
    ranked = pool_writings([[(answer, score) for answer, score, _ in writing] for writing in writings], power)
    return [(answer, sane[answer]) for answer, _, _ in ranked]


def decode_rows(predictor: Predictor, sources: Sequence[str], targets: Sequence[str], augment: int,
                method: str = "beam", n_best: int = 5) -> Iterator[dict]:
    """Per query: its line, its canonical target, and each writing's answers as (answer, log-probability,
    sane) in the model's order, decoded as Predictor.predict decodes a query read in `augment` writings
    (one batch of its writings); or the error that refused it."""
    for i, (src, tgt) in enumerate(zip(sources, targets)):
        row: dict = {"line": i, "target": canonical_or_none(tgt)}
        try:
            query = predictor.prepare(src)
        except ValueError as exc:
            yield {**row, "error": str(exc)}
            continue
        views = predictor._views(query, augment)
        decoded = predictor.decode([v.ids for v in views], method, n_best, writings=True)  # seeds as predict's
        yield {**row, "writings": [[(p.smiles, p.score, p.sane)
                                    for p in predictor._predictions(view, result, query.canonical)]
                                   for view, result in zip(views, decoded)]}


def score_rows(rows: Sequence[dict], power: float, n_best: int = 5) -> dict:
    """Top-1..n_best in the model's order (`top`) and the app's (`app`: the pool's sane answers first, then
    the best n_best, as Predictor._pooled lists them) after pooling with `power`, as counts over all rows (refused ones
    count as wrong), how many pooled first answers are not sane (flagged or not valid SMILES; evaluate's
    flagged_rate counts the valid ones only), and per writing (the first is the canonical one) how many
    queries it was read for and how many of its own first answers are not sane (`writings`,
    `not_sane_each`)."""
    top, app, not_sane = [0] * n_best, [0] * n_best, 0
    read: list[int] = []
    not_sane_each: list[int] = []
    for row in rows:
        if "error" in row:
            continue
        for w, writing in enumerate(row["writings"]):
            if w == len(read):
                read.append(0)
                not_sane_each.append(0)
            read[w] += 1
            not_sane_each[w] += bool(writing) and not writing[0][2]
        every = pooled(row["writings"], power)
        answers = every[:n_best]
        not_sane += bool(answers) and not answers[0][1]
        # as Predictor._pooled lists them: the whole pool sane first (stable: the model's order within
        # each), then cut, so that sane answers from further down take flagged ones' places
        ranked = sorted(every, key=lambda answer: not answer[1])[:n_best]
        for counts, listed in ((top, answers), (app, ranked)):
            found = [k for k, (answer, _) in enumerate(listed) if answer == row["target"]]
            for k in range(min(found, default=n_best), n_best):
                counts[k] += 1
    return {"n": len(rows), "top": top, "app": app, "not_sane": not_sane, "writings": read,
            "not_sane_each": not_sane_each}


def decode(args: argparse.Namespace) -> None:
    use_threads()  # the CLI's default: one core left free
    try:  # files of unequal length, then weights the int8 engine cannot read: tracebacks, the first after the load
        sources, targets = read_pairs(args.src, args.tgt, limit=args.limit)
        predictor = Predictor.load(args.model, dtype=args.dtype)
    except ValueError as exc:
        raise SystemExit(f"pool_sweep.py decode: {exc}") from None
    try:  # a model trained on one writing of each query: the app reads it in no other, so their answers tell nothing
        predictor.check_augment(args.augment)
    except ValueError as exc:
        raise SystemExit(f"pool_sweep.py decode: --augment {args.augment}: {exc}") from None
    decoded = {"model": str(predictor.path), "method": args.method, "n_best": args.n_best, "augment": args.augment,
               "dtype": args.dtype, "src": str(args.src), "tgt": str(args.tgt), "limit": args.limit,
               "weights": weights_fingerprint(predictor.path), **made_by()}
    with open(args.out, "w") as out:
        out.write(json.dumps({DECODED: decoded}) + "\n")  # score names the answers' maker from this line
        for row in decode_rows(predictor, sources, targets or [], args.augment, args.method, args.n_best):
            out.write(json.dumps(row) + "\n")
            if row["line"] % 100 == 0:
                print(f"{row['line'] + 1} / {len(sources)}", file=sys.stderr, flush=True)


def score(args: argparse.Namespace) -> None:
    rows = []
    for number, line in enumerate(read_lines(Path(args.file)), 1):
        try:
            rows += [json.loads(line)] if line.strip() else []
        except ValueError:  # json's traceback named neither file nor line
            raise SystemExit(f"pool_sweep.py score: {args.file}, line {number}, is not JSON: not a file `decode` "
                             "wrote") from None
    made = rows.pop(0)[DECODED] if rows and DECODED in rows[0] else None
    if made:
        print(f"answers of {made['model']} ({made['method']}, {made['n_best']} a writing, {made['augment']} "
              f"writing(s), {made['dtype']}) on {made['src']}")
    else:
        print(f"{args.file} does not say what decoded its answers (written before decode recorded it)")
    if not rows:
        raise SystemExit(f"pool_sweep.py score: {args.file} holds no queries (decode writes one line a query): "
                         "nothing to score")
    k = args.n_best
    print(f"{len(rows)} queries, {sum('error' in r for r in rows)} refused (counted wrong); the best {k} kept")
    app_k = sorted({1, k})  # the app's top-1 and top-k: one column when k is 1
    print("power   " + "  ".join(f"{name}{j:<3}" for name, ks in (("top", range(1, k + 1)), ("app", app_k))
                                 for j in ks) + "  not-sane1 (%)")
    for power in args.powers:
        got = score_rows(rows, power, k)
        counts = (*got["top"], *(got["app"][j - 1] for j in app_k), got["not_sane"])
        share = [100 * c / got["n"] for c in counts]
        print(f"{power:<7g} " + "  ".join(f"{x:5.1f}" for x in share))
    each = ", ".join(f"{100 * f / r:.1f}% of {r}" for f, r in zip(got["not_sane_each"], got["writings"]))
    print(f"each writing's own first answer not sane (the canonical writing first): {each}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    d = commands.add_parser("decode", help="read queries in N writings; save each writing's answers")
    d.add_argument("--model", default="forward", help="a shipped model's name or a model folder")
    d.add_argument("--src", required=True, help="queries, one per line (.gz read as gzip)")
    d.add_argument("--tgt", required=True, help="the recorded answers, line by line")
    d.add_argument("--limit", type=at_least(1), default=None, help="the first this many lines (default: all)")
    d.add_argument("--augment", type=at_least(1), default=5, help="writings per query, the first the canonical one")
    d.add_argument("--method", type=method_name, default="beam", help="decoding method of each writing (default beam)")
    d.add_argument("--n-best", type=at_least(1), default=5, help="answers per writing (default 5, as the page opens)")
    d.add_argument("--dtype", default="int8", choices=DTYPES, help="what the decoder calls compute with (default "
                   "int8, as the app on a CPU)")
    d.add_argument("--out", required=True, help="the JSON-lines file to write")
    s = commands.add_parser("score", help="pool saved answers with each exponent and print top-k")
    s.add_argument("file", help="a file `decode` wrote")
    s.add_argument("--powers", type=comma_list(argtype(Bounds(low=0, low_open=True))),
                   default="1,0.75,0.5,0.35,0.25,0.15,0.1,0.05",
                   help="exponents to pool with, comma-separated (1: the mean of the probabilities)")
    s.add_argument("--n-best", type=at_least(1), default=5, help="answers kept after pooling (default 5)")
    args = parser.parse_args(argv)
    try:  # before the model loads: the inputs are there, and the answers replace neither queries nor targets
        if args.command == "decode":
            check_inputs([("--src", args.src), ("--tgt", args.tgt)])
            check_outputs([("--out", args.out)], [("--src", args.src), ("--tgt", args.tgt)])
            check_models([("--model", args.model)])
        else:
            check_inputs([("file", args.file)])
    except (InputFileError, OutputFileError) as exc:
        parser.error(str(exc))
    decode(args) if args.command == "decode" else score(args)


if __name__ == "__main__":
    main()
