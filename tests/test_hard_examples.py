"""tools/hard_examples.py: which pairs the hard-example folder holds, on a tiny prepare-data folder (the mining
itself is `evaluate --index`, tested with evaluate)."""
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import load_tool
from molspec_core.data import Pair, load_arrays, write_splits


@pytest.fixture(scope="module")
def tool():
    return load_tool("hard_examples")


# three reactions (product: its writings) in 4, 2 and 3 writings
REACTIONS = {"CCO": ["CC.O", "O.CC", "C(C).O", "O.C(C)"], "CCN": ["CC.N", "N.CC"],
             "CCCl": ["CC.Cl", "Cl.CC", "C(C).Cl"]}


def folder(path: Path, train: list[Pair], augment: int = 4) -> Path:
    write_splits(path, {"train": train, "val": train[:2], "test": train[:1]}, {"task": "forward", "augment": augment})
    return path


@pytest.fixture()
def mit(tmp_path: Path) -> Path:
    return folder(tmp_path / "mit", [Pair(s, t) for t, srcs in REACTIONS.items() for s in srcs])


def mined(firsts: list[int | None]) -> dict:
    return {"model": "m", "n_best": 1, "augment": 1, "first_right": {"model_order": firsts}}


def test_starts_are_the_first_line_of_each_reaction(tool):
    sources = [s for srcs in REACTIONS.values() for s in srcs]
    targets = [t for t, srcs in REACTIONS.items() for _ in srcs]
    assert tool.reaction_starts(sources, targets) == [0, 4, 6]
    assert tool.reaction_starts([], []) == []


def test_neighbouring_reactions_that_make_one_product_are_two_reactions(tool):
    # an amide from the acid, then from the acid chloride: one product, two reactions (its target alone merged them)
    sources = ["CC(=O)O.CN", "CN.CC(=O)O", "CC(=O)Cl.CN", "CN.CC(=O)Cl", "C(C)(=O)Cl.CN"]
    assert tool.reaction_starts(sources, ["CNC(C)=O"] * 5) == [0, 2]
    # a source RDKit cannot read keeps its one writing: a reaction of its own, even beside its twin
    assert tool.reaction_starts(["C1CC", "C1CC", "CC.O"], ["CCC"] * 3) == [0, 1, 2]


def test_wrong_reactions_keep_every_writing_and_right_ones_a_few(tool, mit, tmp_path):
    # reaction 1 right, 2 refused (counts as wrong), 3 right
    stats = tool.build(mit, mined([1, None, 1]), tmp_path / "hard", right_writings=2)
    got = Counter(Pair(s, t) for s, t in zip((tmp_path / "hard/train.src").read_text().split(),
                                             (tmp_path / "hard/train.tgt").read_text().split()))
    assert all(got[Pair(s, "CCN")] == 1 for s in REACTIONS["CCN"])
    by_target = Counter(p.tgt for p in got.elements())
    assert by_target == {"CCO": 2, "CCN": 2, "CCCl": 2}
    assert all(p.src in REACTIONS[p.tgt] for p in got)
    assert (stats["reactions"], stats["wrong_reactions"], stats["hard_pairs"], stats["replay_pairs"]) == (3, 1, 6, 0)
    # the folder trains: the same vocabulary, arrays of every pair, the source's validation split
    assert (tmp_path / "hard/vocab.json").read_text() == (mit / "vocab.json").read_text()
    assert len(load_arrays(tmp_path / "hard/train.npz")[0]) == 6
    assert (tmp_path / "hard/val.src").read_text() == (mit / "val.src").read_text()
    assert json.loads((tmp_path / "hard/stats.json").read_text())["augment"] == 4


def test_replay_adds_pool_pairs_in_the_given_ratio(tool, mit, tmp_path):
    pool = folder(tmp_path / "pool", [Pair("C" * (i + 5) + ".O", "CCO") for i in range(40)], augment=5)
    stats = tool.build(mit, mined([None, None, 1]), tmp_path / "hard", right_writings=1, replay=pool,
                       replay_ratio=2.0, seed=3)
    srcs = (tmp_path / "hard/train.src").read_text().split()
    assert (stats["hard_pairs"], stats["replay_pairs"], stats["train"]) == (7, 14, 21)
    replayed = [s for s in srcs if s.startswith("CCCCC")]  # the pool's sources, none of them the reactions'
    assert len(replayed) == len(set(replayed)) == 14  # drawn without putting back
    assert len(srcs) - len(replayed) == 7


def test_a_report_of_other_queries_is_refused(tool, mit, tmp_path):
    with pytest.raises(ValueError, match="holds 2 queries"):
        tool.build(mit, mined([1, 1]), tmp_path / "hard")
    with pytest.raises(ValueError, match="one answer from one writing"):
        tool.build(mit, {**mined([1, 1, 1]), "augment": 5}, tmp_path / "hard")
    with pytest.raises(ValueError, match="not .*train.src"):
        tool.build(mit, {**mined([1, 1, 1]), "src": str(mit / "val.src")}, tmp_path / "hard")
    tool.build(mit, {**mined([1, 1, 1]), "src": str(mit / "train.src")}, tmp_path / "hard")  # its own: accepted


def test_the_same_seed_writes_the_same_folder(tool, mit, tmp_path):
    for name in ("a", "b"):
        tool.build(mit, mined([1, None, 1]), tmp_path / name, right_writings=2, seed=7)
    assert (tmp_path / "a/train.src").read_text() == (tmp_path / "b/train.src").read_text()


# retro: three reactions, each writing of the product with its own aligned target; the first writing is the
# canonical product. The last two share a product (USPTO-50K has such reactions): the canonical writing
# starts the second one.
RETRO = [Pair("CCO", "CC.O"), Pair("OCC", "O.CC"), Pair("C(C)O", "C(C).O"),
         Pair("c1ccncc1", "c1ccncc1.Cl"), Pair("C1=CC=NC=C1", "C1=CC=NC=C1.Cl"),
         Pair("c1ccncc1", "c1cccnc1.Br"), Pair("n1ccccc1", "n1ccccc1.Br")]


def test_retro_reactions_start_at_the_canonical_product_or_a_new_one(tool):
    assert tool.retro_starts([p.src for p in RETRO]) == [0, 3, 5]
    # a first writing that is not canonical still starts its reaction where the product changes
    assert tool.retro_starts(["OCC", "CCO", "C1=CC=NC=C1", "c1ccncc1"]) == [0, 1, 2, 3]
    assert tool.retro_starts(["OCC", "C(C)O", "C1=CC=NC=C1"]) == [0, 2]


def test_a_retro_folder_keeps_every_writing_of_its_wrong_reactions(tool, tmp_path):
    data = tmp_path / "retro"
    write_splits(data, {"train": RETRO, "val": RETRO[:1], "test": RETRO[:1]}, {"task": "retro", "augment": 20})
    stats = tool.build(data, mined([1, None, 1]), tmp_path / "hard", right_writings=1, seed=1)
    hard = tmp_path / "hard"
    got = list(zip((hard / "train.src").read_text().split(), (hard / "train.tgt").read_text().split()))
    assert (stats["reactions"], stats["wrong_reactions"], stats["hard_pairs"]) == (3, 1, 4)
    assert sorted(pair for pair in got if pair[1].endswith("Cl")) == sorted(
        (p.src, p.tgt) for p in RETRO[3:5])  # the wrong one whole
    assert sum(t.endswith(".O") for _, t in got) == sum(t.endswith(".Br") for _, t in got) == 1


def test_without_a_report_every_pair_is_kept_beside_the_replay(tool, tmp_path):
    # `prepare-data --task retro --val-rest only`: reactions the model never saw, so none is known to be right
    data = tmp_path / "new"
    write_splits(data, {"train": RETRO, "val": RETRO[:1], "test": RETRO[:1]},
                 {"task": "retro", "augment": 20, "val_rest_reactions": 3})
    pool = tmp_path / "pool"  # the model's own retro training pairs
    write_splits(pool, {"train": [Pair("C" * (i + 5) + ".O", "CCO") for i in range(40)], "val": RETRO[:1],
                        "test": RETRO[:1]}, {"task": "retro", "augment": 5})
    stats = tool.build(data, None, tmp_path / "mix", replay=pool, replay_ratio=1.0, seed=2)
    got = list(zip((tmp_path / "mix/train.src").read_text().split(), (tmp_path / "mix/train.tgt").read_text().split()))
    assert sorted(pair for pair in got if not pair[0].startswith("CCCCC")) == sorted((p.src, p.tgt) for p in RETRO)
    assert (stats["hard_pairs"], stats["replay_pairs"], stats["reactions"]) == (len(RETRO), len(RETRO), 3)
    assert stats["wrong_reactions"] is None and stats["data"].startswith("every pair of")
    # forward's stats name the count train_reactions (`prepare-data --task forward-mit --rows-before`)
    write_splits(tmp_path / "fwd", {"train": RETRO, "val": RETRO[:1], "test": RETRO[:1]},
                 {"task": "forward", "augment": 10, "train_reactions": 4})
    assert tool.build(tmp_path / "fwd", None, tmp_path / "fwd_mix")["reactions"] == 4


def test_a_folder_build_wrote_is_refused_for_starts_and_mining(tool, mit, tmp_path):
    # its pairs are shuffled: every line was taken for a reaction of its own
    tool.build(mit, None, tmp_path / "built")
    with pytest.raises(ValueError, match="built was written by hard_examples.py build, whose pairs are shuffled"):
        tool.folder_starts(tmp_path / "built", tool.split(tmp_path / "built", "train"))
    with pytest.raises(ValueError, match="whose pairs are shuffled"):
        tool.build(tmp_path / "built", mined([1, 1, 1]), tmp_path / "again")
    assert tool.folder_starts(mit, tool.split(mit, "train")) == [0, 4, 6]  # a prepare-data folder: its reactions
    assert not (tmp_path / "again").exists()


def test_a_replay_folder_in_a_vocabulary_with_tokens_the_data_lack_is_refused(tool, mit, tmp_path):
    # its pairs were encoded in --data's vocabulary: their sources read '<unk>', their targets left out, unsaid
    pool = folder(tmp_path / "pool", [Pair("CC.Br", "CCBr"), Pair("CCO.Br", "CCBr")])
    with pytest.raises(ValueError, match="pool: its vocabulary holds 1 tokens .* lacks \\(e.g. 'Br'\\)"):
        tool.build(mit, mined([1, None, 1]), tmp_path / "hard", replay=pool)
    assert not (tmp_path / "hard").exists()


def test_a_replay_folder_of_the_other_task_is_refused_before_anything_is_written(tool, mit, tmp_path):
    """A retro pool's pairs (product -> reactants) were replayed into forward training data without a word."""
    pool = tmp_path / "retro_pool"
    write_splits(pool, {"train": RETRO, "val": RETRO[:1], "test": RETRO[:1]}, {"task": "retro", "augment": 20})
    with pytest.raises(ValueError, match=r"--replay .*retro_pool holds retro data, and .*mit forward data"):
        tool.build(mit, None, tmp_path / "mix", replay=pool)
    assert not (tmp_path / "mix").exists()


def test_also_adds_every_pair_of_more_new_reactions_keeping_the_first_folders_validation(tool, tmp_path):
    # two folders of reactions new to the model (`--task forward-mit --rows-before`, `--task forward-gln`), written
    # in the model's vocabulary, mixed with replay as one
    from molspec_core.tokenizer import Vocab

    vocab = Vocab.build(["CC.O.N.Cl.Br"])
    stats = {"task": "forward", "augment": 10, "train_reactions": 1}
    new500, gln = tmp_path / "new500", tmp_path / "gln"
    amine, bromide = [Pair("CC.N", "CCN")], [Pair("CC.Br", "CCBr")]
    write_splits(new500, {"train": [Pair("CC.O", "CCO"), Pair("O.CC", "CCO")], "val": amine, "test": amine},
                 dict(stats), vocab)
    write_splits(gln, {"train": [Pair("CC.Cl", "CCCl")], "val": bromide, "test": bromide}, dict(stats), vocab)
    pool = folder(tmp_path / "pool", [Pair("C" * (i + 5) + ".O", "CCO") for i in range(40)], augment=5)
    stats = tool.build(new500, None, tmp_path / "mix", replay=pool, replay_ratio=2.0, seed=3, also=(gln,))
    mix = tmp_path / "mix"
    got = list(zip((mix / "train.src").read_text().split(), (mix / "train.tgt").read_text().split()))
    assert sorted(pair for pair in got if not pair[0].startswith("CCCCC")) == [
        ("CC.Cl", "CCCl"), ("CC.O", "CCO"), ("O.CC", "CCO")]
    assert (stats["hard_pairs"], stats["replay_pairs"], stats["reactions"]) == (3, 6, 2)
    assert str(gln) in stats["data"] and (mix / "val.tgt").read_text().split() == ["CCN"]  # the first folder's
    other_vocab = folder(tmp_path / "other", [Pair("CC.S", "CCS")])
    with pytest.raises(ValueError, match="another vocabulary"):
        tool.build(new500, None, tmp_path / "bad", also=(other_vocab,))
    write_splits(tmp_path / "retro", {"train": [Pair("CCO", "CC.O")], "val": [], "test": []}, {"task": "retro"}, vocab)
    with pytest.raises(ValueError, match="not a forward folder"):
        tool.build(new500, None, tmp_path / "bad", also=(tmp_path / "retro",))
    with pytest.raises(ValueError, match="without --mined"):
        tool.build(new500, mined([1]), tmp_path / "bad", also=(gln,))
