"""Top-k accuracy of a model on parallel source/target files."""
from __future__ import annotations

from collections.abc import Sequence

from tqdm import tqdm

from .chem import canonical_or_none
from .service import Predictor


def read_pairs(src: str, tgt: str | None, index: str | None = None, limit: int | None = None) -> tuple[list[str], list[str] | None]:
    """Sources (and targets), optionally selected by a 0-based line-number index file, first `limit`."""
    from pathlib import Path

    from .data import read_lines

    sources = read_lines(Path(src))
    targets = read_lines(Path(tgt)) if tgt else None
    if targets is not None and len(targets) != len(sources):
        raise ValueError(f"{src} has {len(sources)} lines but {tgt} has {len(targets)}")
    if index:
        lines = [int(x) for x in Path(index).read_text().split()]
        sources = [sources[i] for i in lines]
        targets = [targets[i] for i in lines] if targets is not None else None
    if limit:
        sources = sources[:limit]
        targets = targets[:limit] if targets is not None else None
    return sources, targets


def hits(predicted: Sequence[str], target: str) -> list[bool]:
    """Per rank, whether the prediction equals the target after canonicalization."""
    want = canonical_or_none(target)
    return [want is not None and canonical_or_none(p) == want for p in predicted]


def evaluate(predictor: Predictor, sources: list[str], targets: list[str], n_best: int, method: str = "beam",
             batch_size: int = 16, progress: bool = True) -> dict:
    if method not in ("beam", "sbs", "sbs-exact") and n_best != 1:
        raise ValueError("top-k for k > 1 needs method 'beam', 'sbs' or 'sbs-exact'")
    correct = [0] * n_best
    invalid = errors = 0
    for start in tqdm(range(0, len(sources), batch_size), desc="evaluate", disable=not progress, unit="batch"):
        chunk = sources[start:start + batch_size]
        results = predictor.predict(chunk, method=method, n_best=n_best, batch_size=batch_size)
        for result, target in zip(results, targets[start:start + batch_size]):
            if not result.ok:
                errors += 1
                continue
            preds = [p.smiles for p in result.predictions]
            invalid += bool(preds) and not result.predictions[0].valid
            first = next((k for k, hit in enumerate(hits(preds, target)) if hit), None)
            if first is not None:
                for k in range(first, n_best):
                    correct[k] += 1
    n = len(sources)
    report = {f"top{k + 1}": correct[k] / n for k in range(n_best)}
    report.update(n=n, n_best=n_best, method=method, invalid_smiles_rate=invalid / n,
                  query_errors=errors, invalid_smiles_rate_counts="top-1 predictions that RDKit rejects / n")
    return report
