"""Textbook reactions (the app's `assets/examples.json`): the Predict page's examples, the Benchmark
page's live benchmark, and tools/textbook.py's check of the shipped models on everyday chemistry."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .chem import canonical_or_none
from .known import known_rank
from .service import Predictor


@dataclass(frozen=True)
class Example:
    name: str
    kind: str  # reaction class: acylation, reduction, C-C coupling ...
    description: str  # in words: "Acetyl chloride + benzylamine → N-benzylacetamide"
    reactants: str  # the molecules giving atoms to the product, as USPTO-50K lists them
    reagents: str  # "" when none
    product: str
    featured: bool = False  # one of the Predict page's buttons

    def query(self, task: str) -> str:
        if task == "retro":
            return self.product
        return ".".join(part for part in (self.reactants, self.reagents) if part)

    def known_answer(self, task: str) -> str | None:
        """Canonical known answer: the product (forward) or the reactants (retro)."""
        return canonical_or_none(self.reactants if task == "retro" else self.product)


def load_examples(path: Path) -> list[Example]:
    data = json.loads(Path(path).read_text())
    return [Example(e["name"], e["kind"], e["description"], e["reactants"], e["reagents"], e["product"],
                    bool(e.get("featured", False))) for e in data["examples"]]


def known_answer_ranks(predictor: Predictor, examples: list[Example], method: str, n_best: int,
                       augment: int) -> list[dict]:
    """Per example: the rank of its known answer among the predictor's (the page's order, sane answers
    first; None: not listed), the first answer, and the error of a query the model refused."""
    task = predictor.task
    results = predictor.predict([e.query(task) for e in examples], method=method, n_best=n_best, augment=augment)
    rows = []
    for example, result in zip(examples, results):
        rank = known_rank(result, example.known_answer(task))
        first = result.predictions[0].smiles if result.predictions else None  # predictions come in rank order
        rows.append({"name": example.name, "kind": example.kind, "rank": rank, "first": first, "error": result.error})
    return rows
