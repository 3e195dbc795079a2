from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)  # tests are small; one thread keeps them predictable beside other work

from molspec_core import checkpoint
from molspec_core.model import Seq2SeqTransformer, preset

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
SHARED_DATA = ROOT.parent / "shared" / "data"
SHARED_BENCH = ROOT.parent / "shared" / "bench"
FORWARD_MODEL = ROOT / "models" / "forward"

needs_data = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"USPTO data not found at {SHARED_DATA}")


@pytest.fixture(scope="session")
def copy_model():
    """(model, vocab): a tiny model trained to copy its source minus every 'C' (tests/make_copy_model.py)."""
    model, vocab, _ = checkpoint.load(FIXTURES / "copy_model")
    return model, vocab


def random_model(seed: int, vocab_size: int = 14, **overrides) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    return Seq2SeqTransformer(preset("tiny", vocab_size, max_positions=256, **overrides)).eval()


def random_sources(seed: int, n: int, vocab_size: int, lo: int = 3, hi: int = 24) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, vocab_size) for _ in range(rng.randint(lo, hi))] for _ in range(n)]
