"""The shipped models on the app's textbook reactions: where each puts the known answer, as the Predict page reads it.

python3 tools/textbook.py [--dtype int8] [--out bench/textbook/shipped_int8.json]

`assets/examples.json` holds 26 reactions of the kinds a medicinal chemist runs every week (amide couplings,
protections, reductions, cross-couplings ...), chosen and written by hand, with their reagents as USPTO writes
them; the Predict page offers them as examples (`molspec_core/textbook.py`). Forward: the query is the
reactants and reagents, the known answer the product. Retrosynthesis: the query is the product, the known
answer the reactants; a product has other sound disconnections, so known reactants ranked below them are not
a wrong answer. Each query is decoded as the pages open (methods.TASK_DEFAULTS: beam search, 5 and 10
answers; 5 writings) and each row gives the known answer's rank in the page's order (sane answers first), or
"-" when it is not listed. A small hand-picked set says which everyday chemistry the models know and which
they miss; the test-set figures in the model cards say how often they are right.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import check_outputs, made_by  # noqa: E402  (tools/_toolbox.py)

from molspec_core.argtypes import at_least  # noqa: E402
from molspec_core.calibration import weights_fingerprint  # noqa: E402
from molspec_core.io import OutputFileError, write_text_file  # noqa: E402
from molspec_core.methods import TASK_DEFAULTS  # noqa: E402
from molspec_core.service import MAX_AUGMENT, Predictor  # noqa: E402
from molspec_core.textbook import known_answer_ranks, load_examples  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "assets" / "examples.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="int8", choices=("float32", "int8"), help="the app's arithmetic: int8")
    parser.add_argument("--augment", type=at_least(1, MAX_AUGMENT), default=5,  # refused before the models load
                        help=f"writings of each query read and pooled, 1 to {MAX_AUGMENT} (the app: 5)")
    parser.add_argument("--out", help="JSON report (not the examples file it reads)")
    args = parser.parse_args()
    try:
        check_outputs([("--out", args.out)], [("the examples file", EXAMPLES)])
    except OutputFileError as exc:  # before minutes of decoding, not after
        parser.error(str(exc))
    torch.set_num_threads(1)
    examples = load_examples(EXAMPLES)
    report: dict = {"examples": "assets/examples.json", "dtype": args.dtype, "augment": args.augment, **made_by()}
    for task in ("forward", "retro"):
        predictor = Predictor.load(task, "cpu", "native" if args.dtype == "int8" else "auto", dtype=args.dtype)
        method, n_best = TASK_DEFAULTS[task]
        rows = known_answer_ranks(predictor, examples, method, n_best, args.augment)
        first, listed = sum(r["rank"] == 1 for r in rows), sum(r["rank"] is not None for r in rows)
        report[task] = {"model": str(predictor.path), "weights": weights_fingerprint(predictor.path), "method": method,
                        "n_best": n_best, "first": first, "listed": listed, "n": len(rows), "rows": rows}
        print(f"\n{task}: the known answer first for {first} of {len(rows)}, within {n_best} for {listed}")
        print("| reaction | rank | the page's first answer |\n|---|---|---|")
        for r in rows:
            print(f"| {r['name']} | {r['rank'] or '-'} | {r['error'] or r['first']} |")
    if args.out:
        write_text_file(args.out, json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
