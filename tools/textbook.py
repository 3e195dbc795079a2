"""The shipped models on textbook reactions: where each puts the textbook answer, as the Predict page reads it.

python3 tools/textbook.py [--dtype int8] [--out bench/textbook/shipped_int8.json]

`bench/textbook/reactions.csv` holds 26 reactions of the kinds a medicinal chemist runs every week (amide
couplings, protections, reductions, cross-couplings ...), chosen and written by hand for this check, with
their reagents as USPTO writes them. Forward: the query is the reactants and reagents, the answer the
product. Retrosynthesis: the query is the product, the answer the reactants (the molecules giving atoms
to the product, as USPTO-50K lists them); a product has other sound disconnections, so a textbook
reactant set ranked below them is not a wrong answer. Each query is decoded as the page opens (beam
search, 5 and 10 answers, 5 writings) and each row gives the textbook answer's rank in the page's order
(sane answers first), or "-" when it is not listed. A small hand-picked set says which common
chemistry the models know and which they miss; the test-set figures in the model cards say how often
they are right.
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import NamedTuple

import torch

from molspec_core.chem import canonical_or_none
from molspec_core.methods import TASK_DEFAULTS
from molspec_core.service import Predictor

REACTIONS = Path(__file__).resolve().parents[1] / "bench" / "textbook" / "reactions.csv"


class Reaction(NamedTuple):
    name: str
    kind: str
    reactants: str
    reagents: str
    product: str

    def query(self, task: str) -> str:
        if task == "retro":
            return self.product
        return ".".join(part for part in (self.reactants, self.reagents) if part)

    def answer(self, task: str) -> str:
        return self.reactants if task == "retro" else self.product


def load_reactions(path: Path = REACTIONS) -> list[Reaction]:
    with path.open(newline="") as handle:
        return [Reaction(row["name"], row["class"], row["reactants"], row["reagents"], row["product"])
                for row in csv.DictReader(handle)]


def answer_ranks(predictor: Predictor, task: str, reactions: list[Reaction], augment: int = 5) -> list[dict]:
    """Per reaction: the page's rank of the textbook answer (None: not listed) and the page's first answer."""
    method, n_best = TASK_DEFAULTS[task]
    results = predictor.predict([r.query(task) for r in reactions], method=method, n_best=n_best, augment=augment)
    rows = []
    for reaction, result in zip(reactions, results):
        wanted = canonical_or_none(reaction.answer(task))
        rank = next((p.rank for p in result.predictions if p.smiles == wanted), None)
        first = min(result.predictions, key=lambda p: p.rank).smiles if result.predictions else None
        rows.append({"name": reaction.name, "class": reaction.kind, "rank": rank, "first": first,
                     "error": result.error})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="int8", choices=("float32", "int8"), help="the app's arithmetic: int8")
    parser.add_argument("--augment", type=int, default=5, help="writings of each query read and pooled (the app: 5)")
    parser.add_argument("--out", help="JSON report")
    args = parser.parse_args()
    torch.set_num_threads(1)
    reactions = load_reactions()
    report: dict = {"dtype": args.dtype, "augment": args.augment, "reactions": str(REACTIONS.name)}
    for task in ("forward", "retro"):
        predictor = Predictor.load(task, "cpu", "native" if args.dtype == "int8" else "auto", dtype=args.dtype)
        rows = answer_ranks(predictor, task, reactions, args.augment)
        n_best = TASK_DEFAULTS[task][1]
        report[task] = {"n_best": n_best, "first": sum(r["rank"] == 1 for r in rows),
                        "listed": sum(r["rank"] is not None for r in rows), "n": len(rows), "rows": rows}
        print(f"\n{task}: textbook answer first for {report[task]['first']} of {len(rows)}, "
              f"within {n_best} for {report[task]['listed']}")
        print("| reaction | rank | the page's first answer |\n|---|---|---|")
        for r in rows:
            print(f"| {r['name']} | {r['rank'] or '-'} | {r['error'] or r['first']} |")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
