"""Cost ratio c of issue 7: one decoder step (1 token, cached) of the draft model over one of the main model.

python3 tools/cost_ratio.py MODEL [SMILES]
"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import InputFileError, check_models  # noqa: E402  (tools/_toolbox.py)

from molspec_core.service import Predictor  # noqa: E402

QUERY = "CC(=O)Cl.NCc1ccccc1"


def step_ms(model, query, n_steps=40, repeats=5):
    src = torch.tensor([query.ids])
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            memory = model.encode(src)
            cache = model.new_cache(memory, src != 0, n_steps + 2)
            token = torch.ones(1, 1, 1, dtype=torch.long)
            started = time.perf_counter()
            for _ in range(n_steps):
                model.decode(token, cache)
                cache.commit(torch.ones(1, dtype=torch.long))
            best = min(best, (time.perf_counter() - started) / n_steps * 1000)
    return best


def params(model) -> float:
    return sum(p.numel() for p in model.parameters()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a shipped model's name or a model folder, with a draft model")
    parser.add_argument("smiles", nargs="?", default=QUERY, help=f"the query whose steps are timed (default {QUERY})")
    args = parser.parse_args()
    try:
        check_models([("model", args.model)])
    except InputFileError as exc:
        parser.error(str(exc))
    torch.set_num_threads(1)
    predictor = Predictor.load(args.model, device="cpu")
    if predictor.draft_model is None:
        parser.error(f"{args.model} has no draft model: nothing to compare its steps with")
    try:
        query = predictor.prepare(args.smiles)
    except ValueError as exc:  # the service's message for the query, not its traceback
        parser.error(f"{args.smiles}: {exc}")
    main_ms, draft_ms = step_ms(predictor.model, query), step_ms(predictor.draft_model, query)
    print(f"main {params(predictor.model):.2f}M params {main_ms:.2f} ms/step; "
          f"draft {params(predictor.draft_model):.2f}M params {draft_ms:.2f} ms/step; c = {draft_ms / main_ms:.3f}")


if __name__ == "__main__":
    main()
