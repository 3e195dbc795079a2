"""tools/rank_pairs.py: which answers become a training reaction's negatives, and the pairs file `train --pairs`
reads, mined with a tiny untrained model on a tiny prepare-data folder."""
import json
from pathlib import Path

import pytest
import torch

from conftest import load_tool
from molspec_core import checkpoint
from molspec_core.calibration import weights_fingerprint
from molspec_core.chem import canonical_or_none
from molspec_core.data import Pair, write_splits
from molspec_core.model import Seq2SeqTransformer, preset
from molspec_core.tokenizer import Vocab
from molspec_core.train import load_pairs


@pytest.fixture(scope="module")
def tool():
    return load_tool("rank_pairs")


def test_the_answers_above_the_product_are_its_negatives_never_the_product_written_otherwise(tool):
    answers = ["CCCl", "ClCC", "CCO", "CCN", "CCBr"]  # ClCC is the first answer written otherwise
    assert tool.negatives_of(answers, "CCO", most=5) == (2, ["CCCl", "ClCC"])
    assert tool.negatives_of(answers, "OCC", most=1) == (2, ["CCCl"])  # the product in another writing
    assert tool.negatives_of(answers, "CCCl", most=2) == (0, [])  # first already (ClCC is the same molecule)
    assert tool.negatives_of(answers, "CCI", most=2) == (None, ["CCCl", "ClCC"])  # absent: the first answers
    assert tool.negatives_of(["CC(", "CCO"], "OCC", most=2) == (1, ["CC("])  # an invalid answer is a negative


def test_mined_pairs_hold_every_writing_of_each_missed_reaction_and_train_reads_them(tool, tmp_path: Path):
    reactions = {"CCO": ["CC.O", "O.CC", "C(C).O"], "CCN": ["CC.N", "N.CC"]}
    train = [Pair(s, t) for t, sources in reactions.items() for s in sources]
    data = tmp_path / "data"
    write_splits(data, {"train": train, "val": train[:1], "test": train[:1]}, {"task": "forward", "augment": 3})
    vocab = Vocab.load(data / "vocab.json")
    torch.manual_seed(0)
    checkpoint.save(Seq2SeqTransformer(preset("tiny", len(vocab))), vocab, tmp_path / "model",
                    meta={"task": "forward", "preset": "tiny"})
    summary = tool.mine(str(tmp_path / "model"), data, tmp_path / "pairs.tsv", width=3, most=2)
    ranks = summary["product_rank"]
    assert summary["reactions"] == 2 and sum(ranks.values()) == 2 and ranks["refused"] == 0
    lines = [line.split("\t") for line in (tmp_path / "pairs.tsv").read_text().splitlines()]
    assert len(lines) == summary["pairs"] > 0  # an untrained model misses
    for product, sources in reactions.items():
        mine = [line for line in lines if line[1] == product]
        if mine:  # each missed reaction: all its writings, each with the same negatives
            negatives = {line[2] for line in mine}
            assert sorted(line[0] for line in mine) == sorted(sources * len(negatives))
            assert all(canonical_or_none(n) != canonical_or_none(product) for n in negatives)
    assert len(load_pairs(tmp_path / "pairs.tsv", vocab)[0]) == len(lines)
    # the summary names the weights mined and the code that mined them, as evaluate's reports do
    saved = json.loads((tmp_path / "pairs.json").read_text())
    assert saved["weights"] == weights_fingerprint(tmp_path / "model") and "commit" in saved and "command" in saved


def test_mining_refuses_retro_data_or_a_retro_model_before_any_decoding(tool, tmp_path: Path, monkeypatch):
    """A retro folder's lines were mined as forward reactions with whatever model was given, without a word."""
    monkeypatch.setattr(tool, "Predictor", None)  # nothing may be loaded
    train = [Pair("CCO", "CC.O"), Pair("CCN", "CC.N")]
    for task in ("forward", "retro"):
        write_splits(tmp_path / task, {"train": train, "val": train[:1], "test": train[:1]}, {"task": task})
        vocab = Vocab.load(tmp_path / task / "vocab.json")
        checkpoint.save(Seq2SeqTransformer(preset("tiny", len(vocab))), vocab, tmp_path / f"{task}_model",
                        meta={"task": task, "preset": "tiny"})
    with pytest.raises(tool.InputFileError, match=r"--data .*retro holds retro data; ranking pairs are mined from "
                                                  "forward data"):
        tool.mine(str(tmp_path / "forward_model"), tmp_path / "retro", tmp_path / "pairs.tsv")
    with pytest.raises(tool.InputFileError, match=r"--model .*retro_model is a retro model"):
        tool.mine(str(tmp_path / "retro_model"), tmp_path / "forward", tmp_path / "pairs.tsv")
    # a folder hard_examples.py build wrote: shuffled, so every line was mined as a reaction of its own
    write_splits(tmp_path / "built", {"train": train, "val": train[:1], "test": train[:1]},
                 {"task": "forward", "hard_pairs": 2})
    with pytest.raises(tool.InputFileError, match=r"built was written by hard_examples.py build"):
        tool.mine(str(tmp_path / "forward_model"), tmp_path / "built", tmp_path / "pairs.tsv")
    assert not (tmp_path / "pairs.tsv").exists()


def test_near_judges_each_reaction_on_its_own_writing_where_two_make_one_product(tool, tmp_path: Path, monkeypatch):
    # an amide from the acid and from the acid chloride, one negative each: the second was judged on the first's gap
    vocab = Vocab.build(["CC(=O)O.CN", "CC(=O)Cl.CN", "CNC(C)=O", "CCN"])
    checkpoint.save(Seq2SeqTransformer(preset("tiny", len(vocab))), vocab, tmp_path / "model",
                    meta={"task": "forward", "preset": "tiny"})
    lines = [("CC(=O)O.CN", "CNC(C)=O", "CCN"), ("CN.CC(=O)O", "CNC(C)=O", "CCN"),
             ("CC(=O)Cl.CN", "CNC(C)=O", "CCN"), ("CN.CC(=O)Cl", "CNC(C)=O", "CCN")]
    (tmp_path / "pairs.tsv").write_text("".join("\t".join(line) + "\n" for line in lines))
    judged: list[str] = []

    def gaps(model, pairs, threads=1):  # the acid's product trails by little, the chloride's by far
        judged.extend(source for source, _, _ in pairs)
        return [-0.5 if "Cl" not in source else -9.0 for source, _, _ in pairs]

    monkeypatch.setattr(tool, "gaps", gaps)
    summary = tool.near(str(tmp_path / "model"), tmp_path / "pairs.tsv", tmp_path / "near.tsv", max_gap=2.5)
    assert judged == ["CC(=O)O.CN", "CC(=O)Cl.CN"]  # each reaction on its first (mined) writing
    kept = [tuple(line.split("\t")) for line in (tmp_path / "near.tsv").read_text().splitlines()]
    assert kept == lines[:2] and (summary["negatives"], summary["lines_kept"]) == (2, 2)
