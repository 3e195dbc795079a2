"""Cost ratio c of issue 7: one decoder step (1 token, cached) of the draft model over one of the main model."""
import sys
import time

import torch

from molspec_core.service import Predictor

torch.set_num_threads(1)
predictor = Predictor.load(sys.argv[1], device="cpu")
query = predictor.prepare(sys.argv[2] if len(sys.argv) > 2 else "CC(=O)Cl.NCc1ccccc1")


def step_ms(model, n_steps=40, repeats=5):
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


main_ms, draft_ms = step_ms(predictor.model), step_ms(predictor.draft_model)
params = lambda m: sum(p.numel() for p in m.parameters()) / 1e6
print(f"main {params(predictor.model):.2f}M params {main_ms:.2f} ms/step; draft {params(predictor.draft_model):.2f}M "
      f"params {draft_ms:.2f} ms/step; c = {draft_ms / main_ms:.3f}")
