"""Train the tiny test fixture model: it learns to copy its source, dropping every token 'C'.

Speculative decoding needs a model that copies for its drafts to be accepted; this one copies
long runs and breaks them where a 'C' is dropped, so tests see full, partial and zero acceptance.
Run: python tests/make_copy_model.py  (about a minute on one CPU core; writes tests/fixtures/copy_model)
"""
from __future__ import annotations

import random
from pathlib import Path

import torch
import torch.nn.functional as F

from molspec_core import checkpoint
from molspec_core.model import preset, Seq2SeqTransformer
from molspec_core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIALS, Vocab

TOKENS = ["C", "N", "O", "c", "n", "(", ")", "=", "1", "2", "Cl", "Br"]
OUT = Path(__file__).parent / "fixtures" / "copy_model"


def rule(src: list[int], vocab: Vocab) -> list[int]:
    return [t for t in src if t != vocab.index["C"]]


def sample(rng: random.Random, vocab: Vocab) -> list[int]:
    return [rng.randrange(len(SPECIALS), len(vocab)) for _ in range(rng.randint(4, 24))]


def batch(rng: random.Random, vocab: Vocab, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    srcs = [sample(rng, vocab) for _ in range(size)]
    tgts = [[BOS_ID] + rule(s, vocab) + [EOS_ID] for s in srcs]

    def pad(rows):
        out = torch.full((len(rows), max(map(len, rows))), PAD_ID)
        for i, r in enumerate(rows):
            out[i, : len(r)] = torch.tensor(r)
        return out
    return pad(srcs), pad(tgts)


def main(steps: int = 2500) -> None:
    torch.manual_seed(0)
    rng = random.Random(0)
    vocab = Vocab(list(SPECIALS) + TOKENS)
    model = Seq2SeqTransformer(preset("tiny", len(vocab), d_model=64, d_ff=128, max_positions=128))
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(steps):
        src, tgt = batch(rng, vocab, 64)
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, len(vocab)), tgt[:, 1:].reshape(-1), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 500 == 0:
            print(step, round(loss.item(), 4))
    checkpoint.save(model.eval(), vocab, OUT,
                    meta={"task": "copy-test-fixture", "rule": "copy, drop 'C'", "steps": steps})
    print("saved", OUT)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
