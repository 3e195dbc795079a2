"""The round-trip check of retrosynthesis answers with the forward model (molspec_core.roundtrip)."""
import math

import numpy
import pytest

from conftest import FIXTURES
from molspec_core.roundtrip import check_round_trip, sequence_log_probs
from molspec_core.service import TIMED_OUT, Prediction, Predictor, QueryResult, stopped_message

PARACETAMOL = "CC(=O)Nc1ccc(O)cc1"


@pytest.fixture(scope="module")
def forward():
    return Predictor.load("forward", device="cpu")


def answer(rank: int, smiles: str, valid: bool = True, concerns: tuple[str, ...] = ()) -> Prediction:
    return Prediction(rank, smiles, -1.0, valid, (), (), True, concerns, rank)


def test_teacher_forced_score_equals_the_greedy_score_of_the_same_output():
    copier = Predictor.load(FIXTURES / "copy_model", device="cpu")
    queries = ["CCOc1ccccc1", "NC(=O)c1ccncc1", "OCCN1CCNCC1"]
    sources = [copier.prepare(q).ids for q in queries]
    decoded = [r.hypotheses[0] for r in copier.decode(sources, "greedy", 1)]
    outputs = [[t for t in h.tokens if t != 2] for h in decoded]  # drop eos; the score counts it
    assert sequence_log_probs(copier, sources, outputs) == pytest.approx([h.score for h in decoded], abs=1e-4)


def test_reactants_that_give_the_product_back_pass_and_others_fail(forward):
    result = QueryResult(PARACETAMOL, PARACETAMOL, predictions=(
        answer(1, "CC(=O)Cl.Nc1ccc(O)cc1"),  # acetylation of 4-aminophenol: the textbook route
        answer(2, "CCCCCCCC"),  # octane cannot give an amide
        answer(3, "CC(=O)Nc1ccc(O)cc1.O", concerns=("contains the product itself",)),
        answer(4, "C1CC1C(", valid=False)))
    checked = check_round_trip(result, forward).predictions
    assert checked[0].round_trip is True and 0 < checked[0].forward_prob <= 1
    assert checked[1].round_trip is False and checked[1].forward_prob < checked[0].forward_prob
    # flagged and invalid answers are not checked: the product itself would come back trivially
    assert checked[2].round_trip is None and checked[2].forward_prob is None
    assert checked[3].round_trip is None and checked[3].forward_prob is None


def test_forward_prob_is_the_forward_models_probability_of_the_product(forward):
    result = QueryResult(PARACETAMOL, PARACETAMOL, predictions=(answer(1, "CC(=O)Cl.Nc1ccc(O)cc1"),))
    checked = check_round_trip(result, forward).predictions[0]
    source = forward.prepare("CC(=O)Cl.Nc1ccc(O)cc1").ids
    expected = math.exp(sequence_log_probs(forward, [source], [forward.vocab.encode(PARACETAMOL)])[0])
    assert checked.forward_prob == pytest.approx(expected)


def test_a_wider_top_k_can_only_pass_more_answers(forward):
    result = Predictor.load("retro", device="cpu").predict(PARACETAMOL, method="beam", n_best=5)
    top1 = check_round_trip(result, forward, top_k=1).predictions
    top3 = check_round_trip(result, forward, top_k=3).predictions
    for one, three in zip(top1, top3):
        assert (one.round_trip is None) == (three.round_trip is None)
        assert not one.round_trip or three.round_trip
        assert one.forward_prob == three.forward_prob


def test_bad_arguments_and_failed_queries(forward):
    retro = Predictor.load("retro", device="cpu")
    result = QueryResult(PARACETAMOL, PARACETAMOL, predictions=(answer(1, "CC(=O)Cl.Nc1ccc(O)cc1"),))
    with pytest.raises(ValueError, match="needs a forward model"):
        check_round_trip(result, retro)
    with pytest.raises(ValueError, match=r"needs a loaded forward model \(Predictor.load\('forward'\)\), not NoneType"):
        check_round_trip(result, None)  # an AttributeError
    for wrong in (0, 11, 2.5, "3", True, None):  # a word or None reached a TypeError, 2.5 the decoder's n_best
        with pytest.raises(ValueError, match=f"top-k must be a whole number between 1 and 10, not {wrong!r}"):
            check_round_trip(result, forward, top_k=wrong)
    assert check_round_trip(result, forward, top_k=numpy.int64(2)).predictions[0].round_trip is True
    failed = QueryResult("xyz", error="not a valid SMILES")
    assert check_round_trip(failed, forward) is failed
    # a forward model's answers are products: checked, they were read as reactants and marked without a word
    products = forward.predict("CC(=O)Cl.Nc1ccc(O)cc1", method="beam", n_best=2)
    assert products.task == "forward" and retro.predict(PARACETAMOL).task == "retro"
    with pytest.raises(ValueError, match="takes a retrosynthesis model's answers; these are a forward model's"):
        check_round_trip(products, forward)


def test_a_list_of_results_is_checked_result_by_result(forward):
    # Predictor.predict gives a list for a list of queries: checked, it reached an AttributeError (list.task)
    first = QueryResult(PARACETAMOL, PARACETAMOL, predictions=(answer(1, "CC(=O)Cl.Nc1ccc(O)cc1"),))
    refused = QueryResult("xyz", error="not a valid SMILES")
    checked = check_round_trip([first, refused], forward)
    assert isinstance(checked, list) and len(checked) == 2
    assert checked[0].predictions[0].round_trip is True and checked[1] is refused
    assert check_round_trip([], forward) == []
    with pytest.raises(ValueError, match="QueryResult .* or a list of them, not str"):
        check_round_trip(PARACETAMOL, forward)
    with pytest.raises(ValueError, match="not dict"):  # looked at before any result is checked
        check_round_trip([first, {"smiles": PARACETAMOL}], forward)


def test_a_query_stopped_at_the_time_limit_has_its_finished_answers_checked(forward):
    # shown with its answers on the Predict page and written by `predict --round-trip`, but it went unchecked
    stopped = QueryResult(PARACETAMOL, PARACETAMOL, error=stopped_message(5.0), predictions=(
        answer(1, "CC(=O)Cl.Nc1ccc(O)cc1"), answer(2, "CC(=O)Cl.Nc1ccc(O)c", concerns=(TIMED_OUT,))))
    assert stopped.stopped_with_answers
    checked = check_round_trip(stopped, forward)
    assert checked.error == stopped.error
    assert checked.predictions[0].round_trip is True and checked.predictions[0].forward_prob > 0
    assert checked.predictions[1].round_trip is None  # unfinished: not an answer to check


def test_a_reactant_set_the_forward_model_ran_out_of_time_on_is_not_marked_failed(forward, monkeypatch):
    """A forward decode stopped at its time limit, with no answer, marked the reactant set round_trip False, the
    mark of a set that does not give the product back (the Predict page's cross); it was never checked: None. Its
    teacher-forced forward_prob is still computed."""
    def stopped(smiles, **options):
        return [QueryResult(text, text, error=stopped_message(60.0)) for text in smiles]

    monkeypatch.setattr(forward, "predict", stopped)
    result = QueryResult(PARACETAMOL, PARACETAMOL, predictions=(answer(1, "CC(=O)Cl.Nc1ccc(O)cc1"),))
    checked = check_round_trip(result, forward).predictions[0]
    assert checked.round_trip is None and 0 < checked.forward_prob <= 1
