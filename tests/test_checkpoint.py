import json

import torch

from conftest import random_model
from molspec_core import checkpoint
from molspec_core.tokenizer import SPECIALS, Vocab


def test_save_load_round_trip_with_shards(tmp_path, monkeypatch):
    model = random_model(0, vocab_size=14)
    vocab = Vocab(list(SPECIALS) + [f"[X{i}]" for i in range(10)])
    monkeypatch.setattr(checkpoint, "MAX_SHARD_BYTES", 20_000)  # force several shards
    checkpoint.save(model, vocab, tmp_path, meta={"task": "forward"})
    shards = sorted(p.name for p in tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 1
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    loaded, loaded_vocab, config = checkpoint.load(tmp_path)
    assert config["task"] == "forward" and loaded_vocab.tokens == vocab.tokens
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_shipped_models_respect_the_shard_limit():
    from conftest import ROOT

    for path in (ROOT / "models").glob("*/*.safetensors"):
        assert path.stat().st_size <= checkpoint.MAX_SHARD_BYTES, path
