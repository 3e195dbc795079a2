"""Reading a query in several writings (Predictor.predict's augment) and pooling the answers."""
from __future__ import annotations

import math
import time

import pytest
from rdkit import Chem

from conftest import FIXTURES, decoded_answers, decoder_clock
from molspec_core.chem import canonical
from molspec_core.cli import main
from molspec_core.evaluate import evaluate
from molspec_core.io import RESULT_COLUMNS, result_rows
from molspec_core.rsmiles import root_views
from molspec_core.service import MAX_AUGMENT, POOL_POWER, TIMED_OUT, Predictor, _Query, pool_writings


def test_root_views_are_every_distinct_writing_with_the_query_first():
    smiles = "CC(=O)Nc1ccc(O)cc1"
    mol = Chem.MolFromSmiles(smiles)
    every = {Chem.MolToSmiles(mol, rootedAtAtom=atom, canonical=True) for atom in range(mol.GetNumAtoms())}
    views = root_views(smiles, 50)
    assert views[0] == smiles and len(views) == len(set(views)) == len(every | {smiles})
    assert set(views) == every | {smiles}
    assert all(canonical(view) == smiles for view in views)
    assert root_views(smiles, 4) == views[:4] and root_views(smiles, 4) == root_views(smiles, 4)
    assert root_views("CO", 5) == ["CO", "OC"]  # a small molecule has few writings
    assert all(canonical(view) == "CCO.c1ccccc1" for view in root_views("CCO.c1ccccc1", 5))


def test_a_mapped_reaction_without_a_product_falls_back_and_does_not_stop_prepare_data():
    """Its augmentation drew a root from no atoms ("empty range for randrange()"), which no caller caught: the
    worker's error stopped prepare-data --task retro. It is a MappingError, which _retro_augmented expects."""
    import random

    from molspec_core.data import _retro_augmented
    from molspec_core.rsmiles import MappingError, augment

    with pytest.raises(MappingError, match="no product"):
        augment("[CH3:1][OH:2]>>", 3, random.Random(0))
    assert _retro_augmented(("[CH3:1][OH:2]>>", "CO>>", 3, 0)) == ([], False)  # no pair, counted as a fallback


def test_a_mapped_reaction_with_an_empty_reactant_fragment_falls_back_to_its_canonical_pair():
    """A stray dot ("A..B", ".A") split off an empty fragment, which RDKit reads as a molecule of no atoms: its rooted
    writing has no atom order, and a KeyError ('_smilesAtomOutputOrder') from a worker stopped prepare-data --task
    retro. It is a MappingError, and the reaction falls back to its canonical pair as the unmapped cell reads it."""
    import random

    from molspec_core.data import Pair, _retro_augmented
    from molspec_core.rsmiles import MappingError, augment

    for reaction in ("[CH3:1][OH:2]..[Cl:3]>>[CH3:1][OH:2]", ".[CH3:1][OH:2]>>[CH3:1][OH:2]"):
        with pytest.raises(MappingError, match="hold an empty fragment"):
            augment(reaction, 3, random.Random(0))
    mapped = "[CH3:1][OH:2]..[CH3:3][Cl:4]>>[CH3:1][O:2][CH3:3]"
    assert _retro_augmented((mapped, "CO.CCl>>COC", 3, 0)) == ([Pair("COC", "CCl.CO")], False)


def test_root_aligned_pairs_carry_no_stereo_that_only_the_atom_maps_made():
    """Training pairs are written as the service writes a query: a mark on an atom that only its map number made a
    stereocentre (isopropyl's CH, a double bond with two methyls on one end) is dropped, and a mapped
    trans-1,4-cyclohexane is written as its unmapped SMILES. Writing from the mapped perception, 56 of 7,947
    USPTO-50K training products came out with marks no canonical query has (augmentation 0 not the canonical
    SMILES the model reads at test time)."""
    import random

    from molspec_core.rsmiles import augment

    reactions = {
        "[CH3:1][C@H:2]([CH3:3])[OH:4].[Cl:5][C:6]([CH3:7])=[O:8]>>[CH3:1][C@H:2]([CH3:3])[O:4][C:6]([CH3:7])=[O:8]":
            ("CC(=O)OC(C)C", "CC(=O)Cl.CC(C)O"),
        "[CH3:1]/[C:2]([CH3:3])=[CH:4]/[C:5](=[O:6])[OH:7].[CH3:8][OH:9]>>"
        "[CH3:1]/[C:2]([CH3:3])=[CH:4]/[C:5](=[O:6])[O:9][CH3:8]": ("COC(=O)C=C(C)C", "CC(C)=CC(=O)O.CO"),
        "[NH2:1][C@H:2]1[CH2:3][CH2:4][C@H:5]([OH:6])[CH2:7][CH2:8]1.[CH3:9][C:10](=[O:11])Cl>>"
        "[CH3:9][C:10](=[O:11])[NH:1][C@H:2]1[CH2:3][CH2:4][C@H:5]([OH:6])[CH2:7][CH2:8]1":
            (canonical("CC(=O)N[C@H]1CC[C@H](O)CC1"), canonical("CC(=O)Cl.N[C@H]1CC[C@H](O)CC1")),
    }
    for mapped, (product, reactants) in reactions.items():
        pairs = augment(mapped, 4, random.Random(0))
        assert pairs[0][0] == product  # augmentation 0 is the canonical query
        for rooted_product, rooted_reactants in pairs:
            assert ("@" in rooted_product, "/" in rooted_product) == ("@" in product, "/" in product)
            assert canonical(rooted_product) == product and canonical(rooted_reactants) == reactants


@pytest.fixture(scope="module")
def copier():
    return Predictor.load(FIXTURES / "copy_model", device="cpu")


@pytest.fixture(scope="module")
def reader():
    """The copy model, marked as trained on many writings of each query, so that augment is allowed."""
    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    predictor.config = {**predictor.config, "data_stats": {"augment": 20}}
    return predictor


def _query(predictor: Predictor, writing: str) -> _Query:
    return _Query("OCCN", writing, tuple(predictor.vocab.encode(writing)))


def power_mean(*probabilities: float) -> float:
    """The pooled probability of an answer: the power mean of its probability in each writing (0: not given)."""
    return (sum(p ** POOL_POWER for p in probabilities) / len(probabilities)) ** (1 / POOL_POWER)


def test_answers_are_pooled_by_a_power_mean_of_their_probabilities_over_the_writings(reader):
    views = [_query(reader, "NCCO"), _query(reader, "OCCN")]
    decoded = [decoded_answers(reader, ("CCO", 0.5), ("CCN", 0.3), calls=4, seconds=0.2),
               decoded_answers(reader, ("NCC", 0.6), ("OCC", 0.1), ("ClCC", 0.05), calls=5, seconds=0.2)]
    result = reader._pooled("OCCN", views, decoded, "beam", 3, 2, 0.25)
    order = result.in_model_order()
    assert [p.smiles for p in order] == ["CCN", "CCO", "CCCl"]
    assert [p.score for p in order] == pytest.approx([math.log(power_mean(0.3, 0.6)), math.log(power_mean(0.5, 0.1)),
                                                      math.log(power_mean(0.05, 0))])
    assert [p.views for p in order] == [2, 2, 1]
    assert [p.model_rank for p in order] == [1, 2, 3]
    # tokens of the first writing that gave the answer; provenance points into that writing
    assert [p.tokens for p in order] == [("C", "C", "N"), ("C", "C", "O"), ("Cl", "C", "C")]
    assert order[0].source_tokens == () and order[2].source_tokens == ("O", "C", "C", "N")
    assert all(p.confidence is None for p in order)  # no calibration was fitted to pooled scores
    assert result.canonical_query == "NCCO" and result.source_tokens == ("N", "C", "C", "O")
    assert result.stats.model_calls == 9 and result.stats.wall_time_s == 0.25  # the decoding call's time
    assert ([p.smiles for p in reader._pooled("OCCN", views, decoded, "beam", 2, 2, 0.25).in_model_order()]
            == ["CCN", "CCO"])
    rows = result_rows(1, (), result)  # the CSV says how many writings gave each answer
    assert [r[RESULT_COLUMNS.index("writings")] for r in rows] == [p.views for p in result.predictions]


def test_an_answer_every_writing_gives_outranks_one_a_single_writing_is_surer_of():
    # The mean probability would put A first (0.45 against 0.35); the power mean weighs the agreement.
    pooled = pool_writings([[("A", math.log(0.9)), ("B", math.log(0.35))], [("B", math.log(0.35))]])
    assert [(answer, writings) for answer, _, writings in pooled] == [("B", 2), ("A", 1)]
    assert [score for _, score, _ in pooled] == pytest.approx([math.log(0.35), math.log(power_mean(0.9, 0))])
    one = pool_writings([[("A", math.log(0.3)), ("B", math.log(0.35)), ("A", math.log(0.1))]])
    assert [(a, round(math.exp(s), 6)) for a, s, _ in one] == [("A", 0.4), ("B", 0.35)]  # spellings added


def test_two_strings_of_one_answer_from_one_writing_count_that_writing_once(reader):
    # A beam can hold one answer twice, written differently (here from either end): its probability in
    # that writing is the sum of both, and it was given by one writing, not two (the app once said
    # "given for 6 of the 5 writings").
    views = [_query(reader, "NCCO"), _query(reader, "OCCN")]
    decoded = [decoded_answers(reader, ("CCO", 0.4), ("OCC", 0.2), ("CCN", 0.1), calls=4, seconds=0.2),
               decoded_answers(reader, ("CCN", 0.5), ("C(C)O", 0.3), calls=5, seconds=0.2)]
    order = reader._pooled("OCCN", views, decoded, "beam", 3, 2, 0.25).in_model_order()
    assert [p.smiles for p in order] == ["CCO", "CCN"]
    assert [p.score for p in order] == pytest.approx([math.log(power_mean(0.4 + 0.2, 0.3)),
                                                      math.log(power_mean(0.1, 0.5))])
    assert [p.views for p in order] == [2, 2]


def test_a_flagged_answer_gives_its_place_to_a_sane_one_further_down_the_pool(reader):
    # The writings give more answers than the list holds: ranked first, then cut, the flagged answer (the
    # query given back) makes way for the pool's next sane one. The model's own first answers (the papers'
    # top-k) still hold it, and not the answer that took its place.
    views = [_query(reader, "NCCO"), _query(reader, "OCCN")]
    decoded = [decoded_answers(reader, ("NCCO", 0.5), ("CCO", 0.3)),
               decoded_answers(reader, ("NCCO", 0.4), ("CCN", 0.2), ("CCCl", 0.1))]
    result = reader._pooled("OCCN", views, decoded, "beam", 2, 2, 0.1)
    assert [(p.smiles, p.rank, p.model_rank, p.sane) for p in result.predictions] == [
        ("CCO", 1, 2, True), ("CCN", 2, 3, True)]
    assert [(p.smiles, p.sane) for p in result.set_aside] == [("NCCO", False)]
    assert [p.smiles for p in result.in_model_order()] == ["NCCO", "CCO"]
    # with room for every sane answer and more, nothing is set aside and the flagged one is listed last
    roomy = reader._pooled("OCCN", views, decoded, "beam", 5, 2, 0.1)
    assert [p.smiles for p in roomy.predictions] == ["CCO", "CCN", "CCCl", "NCCO"] and roomy.set_aside == ()
    assert [p.smiles for p in roomy.in_model_order()] == ["NCCO", "CCO", "CCN", "CCCl"]
    # one answer (greedy's n_best): the first sane one of the pool
    single = reader._pooled("OCCN", views, decoded, "beam", 1, 2, 0.1)
    assert [p.smiles for p in single.predictions] == ["CCO"] and [p.smiles for p in single.in_model_order()] == ["NCCO"]


def test_evaluate_scores_the_models_order_on_its_own_first_answers_and_the_apps_on_the_list(reader, monkeypatch):
    views = [_query(reader, "NCCO"), _query(reader, "OCCN")]
    decoded = [decoded_answers(reader, ("NCCO", 0.5), ("CCO", 0.3)),
               decoded_answers(reader, ("NCCO", 0.4), ("CCN", 0.2), ("CCCl", 0.1))]
    pooled = reader._pooled("OCCN", views, decoded, "beam", 2, 2, 0.1)
    monkeypatch.setattr(reader, "predict", lambda sources, **options: [pooled] * len(sources))
    # right: the answer that took the flagged one's place (third in the model's order)
    report = evaluate(reader, ["OCCN"], ["CCN"], n_best=2, progress=False)
    assert (report["top2"], report["ranked_top2"], report["ranked_top1"]) == (0.0, 1.0, 0.0)
    assert report["first_right"] == {"model_order": [None], "app_order": [2]}
    assert report["flagged_rate"] == 1.0  # the model's own first answer is flagged, listed or not
    # right: the flagged answer, set aside: first in the model's order, not in the list
    report = evaluate(reader, ["OCCN"], ["NCCO"], n_best=2, progress=False)
    assert report["first_right"] == {"model_order": [1], "app_order": [None]}


def test_a_query_read_in_several_writings_has_one_time_limit_for_them_all(reader, monkeypatch):
    """The writings had the limit times their number as a batch, then each its own limit alone (about 10x in
    all), and a writing that ran out was left out of the pool without a word, its answer still calibrated as
    read in all of them. Here each writing takes 0.1 s: 5 of them outlast a 0.3 s limit."""
    import time

    from molspec_core.limits import check_deadline
    real_decode = reader.decode

    def slow_decode(sources, *args, **kwargs):
        for _ in sources:
            time.sleep(0.1)
            check_deadline()
        return real_decode(sources, *args, **kwargs)

    monkeypatch.setattr(reader, "decode", slow_decode)
    assert reader.predict("OCCOc1ccccc1", method="beam", n_best=2, augment=5, time_limit_s=2.0).ok
    result = reader.predict("OCCOc1ccccc1", method="beam", n_best=2, augment=5, time_limit_s=0.3)
    assert not result.ok and result.predictions == ()
    assert result.error.startswith("stopped after the 0.3 s time limit per query (its 5 writings together)")


def test_writings_stopped_by_the_time_limit_keep_their_pooled_beams_and_calls(reader, monkeypatch):
    """A beam search of a query's writings past its limit gave an error row with no answers and 0 model calls.
    The row keeps its error and now the pooled answers of the writings' beams as they stood, those not yet
    ended marked as stopped at the time limit, and the calls made. A fake clock: each decoder call takes 1 s."""
    decoder_clock(reader.model, monkeypatch)
    result = reader.predict("OCCOc1ccccc1", method="beam", n_best=3, augment=5, time_limit_s=3.5)
    assert result.error.startswith("stopped after the 3.5 s time limit per query (its 5 writings together)")
    assert result.stats.model_calls == 3 * 5  # the writings decode as one batch: 3 calls each, the 4th stopped
    assert result.predictions and any(not p.finished for p in result.predictions)
    assert all(TIMED_OUT in p.concerns for p in result.predictions if p.valid and not p.finished)


def test_augment_reads_several_writings_end_to_end(reader):
    result = reader.predict("OCCOc1ccccc1", method="beam", n_best=4, augment=5)
    assert result.ok and (result.stats.model_calls
                          > reader.predict("OCCOc1ccccc1", method="beam", n_best=4).stats.model_calls)
    probabilities = [p.probability for p in result.in_model_order()]
    assert probabilities == sorted(probabilities, reverse=True) and len(probabilities) <= 4
    for p in result.predictions:
        source = p.source_tokens or result.source_tokens
        assert 1 <= p.views <= 5
        assert all(source[i] == token for token, i in zip(p.tokens, p.provenance) if i >= 0)


def test_a_pooled_querys_time_is_that_of_decoding_all_its_writings(reader, monkeypatch):
    """sbs and sampling decode a query's writings one after another, each result holding its own time:
    the pooled time is the whole call's, not the longest writing's (the speedup tab showed sbs-exact in
    5 writings 4x as fast as beam search when it was slower)."""
    plain = reader.decode

    def one_after_another(sources, *args, **kwargs):
        results = []
        for source in sources:
            time.sleep(0.02)
            result = plain([source], *args, **kwargs)[0]
            result.stats.wall_time_s = 0.001  # each writing's own time, as a sequential decoder records it
            results.append(result)
        return results

    monkeypatch.setattr(reader, "decode", one_after_another)
    result = reader.predict("OCCOc1ccccc1", method="sbs-exact", n_best=3, augment=5)
    writings = len(reader._views(reader.prepare("OCCOc1ccccc1"), 5))
    assert writings > 1 and result.stats.wall_time_s >= 0.02 * writings


def test_augment_one_is_the_plain_prediction(reader):
    plain = reader.predict("OCCOc1ccccc1", method="beam", n_best=3)
    once = reader.predict("OCCOc1ccccc1", method="beam", n_best=3, augment=1)
    assert once.predictions == plain.predictions


def test_a_model_trained_on_one_writing_refuses_augment(copier):
    with pytest.raises(ValueError, match="trained on one writing"):
        copier.predict("CCO", augment=3)
    with pytest.raises(ValueError, match=f"between 1 and {MAX_AUGMENT}"):
        copier.predict("CCO", augment=MAX_AUGMENT + 1)


def test_data_of_one_writing_each_is_not_many_writings():
    # prepare-data --task retro records its root-aligned writings per reaction; 0 and 1 are one each
    predictor = Predictor.load(FIXTURES / "copy_model", device="cpu")
    for augment, allowed in ((0, False), (1, False), (2, True), (20, True)):
        predictor.config = {**predictor.config, "data_stats": {"augment": augment}}
        assert predictor.augmentable is allowed


def test_evaluate_refuses_augment_for_such_a_model_before_running(tmp_path, capsys):
    (tmp_path / "src.txt").write_text("CCO\n")
    (tmp_path / "tgt.txt").write_text("O\n")
    assert main(["evaluate", "--model", str(FIXTURES / "copy_model"), "--src", str(tmp_path / "src.txt"),
                 "--tgt", str(tmp_path / "tgt.txt"), "--augment", "3"]) == 2
    assert "trained on one writing" in capsys.readouterr().err


def test_calibrate_with_augment_fits_its_own_file_which_only_pooled_answers_use(tmp_path, capsys):
    import json
    import shutil

    model = tmp_path / "model"
    shutil.copytree(FIXTURES / "copy_model", model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "data_stats": {"augment": 20}}))
    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1", "Brc1cccnc1OCCO", "c1ccncc1", "CCN(CC)CC"]
    (tmp_path / "val.src").write_text("\n".join(queries) + "\n")
    (tmp_path / "val.tgt").write_text("\n".join(q.replace("C", "") or "O" for q in queries) + "\n")
    assert main(["calibrate", "--model", str(model), "--src", str(tmp_path / "val.src"), "--tgt",
                 str(tmp_path / "val.tgt"), "--n-best", "2", "--augment", "3", "--force"]) == 0  # 4 fitting queries
    assert "2-best, 3 writings" in capsys.readouterr().out
    assert json.loads((model / "calibration.augment3.json").read_text())["augment"] == 3
    assert not (model / "calibration.json").exists()
    predictor = Predictor.load(model, device="cpu")
    pooled = predictor.predict("CCOc1ccccc1", method="beam", n_best=2, augment=3).predictions
    assert pooled and all(p.confidence is not None for p in pooled if p.valid)
    assert all(p.confidence is None for p in predictor.predict("CCOc1ccccc1", method="beam", n_best=2).predictions)
    assert all(p.confidence is None for p in predictor.predict("CCOc1ccccc1", method="beam", n_best=2,
                                                               augment=2).predictions)
    # A pooled calibration fitted under another pooling rule (files from before the power mean hold 1.0)
    # would map scores of another kind: it is not used.
    fitted = json.loads((model / "calibration.augment3.json").read_text())
    assert fitted["pool_power"] == POOL_POWER
    (model / "calibration.augment3.json").write_text(json.dumps({**fitted, "pool_power": 1.0}))
    stale = Predictor.load(model, device="cpu").predict("CCOc1ccccc1", method="beam", n_best=2, augment=3).predictions
    assert stale and all(p.confidence is None for p in stale)
