"""The length budget (issue 14): a query whose answer would not fit ends at the budget, marked
unfinished, under every decoding method; drafts never reach past the model's positions; no query
takes its batch down with it."""
import random

import pytest
import torch

from conftest import FIXTURES, random_sources
from molspec_core import checkpoint
from molspec_core.decoding.batch import fit_drafts, target_budget
from molspec_core.decoding.beam import beam_search
from molspec_core.decoding.greedy import greedy, greedy_uncached
from molspec_core.decoding.sampling import SAMPLING_MODES, SamplingOptions, sample_decode
from molspec_core.decoding.speculative_beam import speculative_beam
from molspec_core.drafting import make_drafter
from molspec_core.model import Seq2SeqTransformer, preset
from molspec_core.methods import METHODS
from molspec_core.service import Predictor
from molspec_core.tokenizer import EOS_ID, tokenize

# Small, so that an answer reaches the model's last position within a few dozen steps. Its budget,
# 59, is prime: no call's output (a draft plus one token) divides it, so some draft overshoots
# unless it is cut.
MAX_POSITIONS = 60


def endless_model(seed: int, vocab_size: int, max_positions: int = MAX_POSITIONS,
                  repeat: int | None = None) -> Seq2SeqTransformer:
    """A tiny random model that never ends its answer, so every query runs to its budget.

    Logits are h . embedding (tied). The final LayerNorm's output has zero mean over its features,
    so with that norm's bias at 1 and eos's embedding at -1 everywhere, eos scores -d_model at every
    step: it is never the argmax and is sampled with probability about e^-30. With `repeat`, that
    token's embedding is +1 everywhere: the model writes it forever, as the forward model writes
    'C' for a query of 500 'C's, so copy drafts are accepted in full and run into the budget."""
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(preset("tiny", vocab_size, max_positions=max_positions)).eval()
    with torch.no_grad():
        model.decoder_norm.bias.fill_(1.0)
        model.embed.weight[EOS_ID] = -1.0
        if repeat is not None:
            model.embed.weight[repeat] = 1.0
    return model


def endless_predictor(max_positions: int = MAX_POSITIONS, repeat: str | None = None) -> Predictor:
    """An endless model with the fixture's vocabulary. It is its own draft model, so model drafts
    are accepted in full too."""
    _, vocab, _ = checkpoint.load(FIXTURES / "copy_model")
    model = endless_model(0, len(vocab), max_positions, vocab.index[repeat] if repeat else None)
    return Predictor(model, vocab, {"task": "forward"}, torch.device("cpu"), FIXTURES / "copy_model", model)


def copy_predictor() -> Predictor:
    """The trained copy fixture (128 positions), its own draft model too."""
    model, vocab, config = checkpoint.load(FIXTURES / "copy_model")
    return Predictor(model, vocab, config, torch.device("cpu"), FIXTURES / "copy_model", model)


@pytest.fixture(scope="module")
def predictors() -> dict[str, Predictor]:
    return {"carbon": endless_predictor(repeat="C"), "random": endless_predictor(), "copy": copy_predictor()}


def n_best_of(method: str) -> int:
    return 2 if METHODS[method].many else 1


def random_smiles(rng: random.Random, n_tokens: int) -> str:
    """An acyclic molecule of about n_tokens tokens, written only with tokens the fixture's vocabulary
    has (canonicalization may move a few parentheses)."""
    pieces, length = [], 0
    while length < n_tokens:
        piece = rng.choice(["C", "C", "N", "O", "C(C)", "C(=O)", "C(Cl)", "C(N)"])
        pieces.append(piece)
        length += len(tokenize(piece))
    return "".join(pieces)


@pytest.mark.parametrize("method", METHODS)
def test_an_answer_that_would_not_fit_ends_at_the_budget_and_the_batch_keeps_its_other_query(predictors, method):
    """Failed before the fix with 'sequence longer than the model's 60 positions' for every method
    with copy drafts: near the budget, the loop still fed a whole draft past the last position."""
    carbon = predictors["carbon"]
    short, long = "CCO", "C" * 40  # budgets 56 and 59: the long one's is capped by the model's positions
    alone = carbon.predict(short, method=method, n_best=n_best_of(method))
    both = carbon.predict([short, long], method=method, n_best=n_best_of(method), batch_size=2)
    assert alone.ok and all(r.ok for r in both), [r.error for r in both]
    assert [p.tokens for p in both[0].predictions] == [p.tokens for p in alone.predictions]
    budget = target_budget(40, MAX_POSITIONS)
    assert budget == MAX_POSITIONS - 1
    assert both[1].predictions
    for prediction in both[1].predictions:
        assert len(prediction.tokens) == budget and not prediction.finished


def test_the_reported_query_with_spec_auto():
    """The issue's own case, 'C' * 500 with spec-auto, on a model of 512 positions (the report's
    model has 1024): the answer runs to the last position."""
    predictor = endless_predictor(max_positions=512, repeat="C")
    result = predictor.predict("C" * 500, method="spec-auto")
    assert result.ok, result.error
    assert len(result.predictions[0].tokens) == 511 and not result.predictions[0].finished


def test_a_query_longer_than_the_model_reads_is_refused_alone(predictors):
    """Failed before: the encoder raised for the whole list."""
    results = predictors["random"].predict(["CCO", "C" * (MAX_POSITIONS + 1)], method="greedy")
    assert results[0].ok
    assert not results[1].ok and f"the limit is {MAX_POSITIONS}" in results[1].error


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("which", ["carbon", "random", "copy"])
def test_every_method_on_random_queries_of_1_to_500_tokens_never_raises(predictors, which, method):
    """Property: any query the service takes (up to 500 tokens) gets a result or an error row of
    its own, and no answer is longer than its budget. Lengths come from the whole range, and as
    many again from the range the model reads (60 or 128 positions), where budgets bind."""
    predictor = predictors[which]
    max_positions = predictor.model.cfg.max_positions
    rng = random.Random(f"{which} {method}")
    lengths = [1, 500, rng.randint(1, 500)] + [rng.randint(1, max_positions) for _ in range(3)]
    queries = [random_smiles(rng, n) for n in lengths]
    results = predictor.predict(queries, method=method, n_best=n_best_of(method), batch_size=4)
    assert len(results) == len(queries)
    for query, result in zip(queries, results):
        if not result.ok:  # the only refusal these queries can meet: longer than the model reads
            assert f"tokens; the limit is {max_positions}" in result.error, (query, result.error)
            continue
        budget = target_budget(len(result.source_tokens), max_positions)
        for prediction in result.predictions:
            assert len(prediction.tokens) <= budget, query
            assert prediction.finished or len(prediction.tokens) == budget, query
    assert results[0].ok and not results[1].ok


def decode(name: str, model, draft_model, sources, drafts, max_len, seed: int) -> list:
    """Decode with one decoder family, straight through the engine."""
    if name == "greedy":
        return greedy(model, sources, drafts, max_len)
    if name == "beam":
        return beam_search(model, sources, 3, max_len=max_len)
    if name in ("sbs", "sbs-exact"):
        return speculative_beam(model, sources, 3, drafts, exact=name == "sbs-exact", max_len=max_len)
    return sample_decode(model, sources, name, drafts, SamplingOptions(draft_len=16, seed=seed), draft_model, max_len)


@pytest.mark.parametrize("name", ("greedy", "beam", "sbs", "sbs-exact") + SAMPLING_MODES)
def test_every_decoder_stays_inside_its_budget_and_the_model(name):
    """Property at the engine: sources of any length the model reads, budgets below, at and past
    its positions, long drafts of a random drafter: every decoder ends each endless answer exactly at
    its budget, which never passes the model's last position, and never raises."""
    rng = random.Random(name)
    for trial in range(4):
        max_positions = rng.randint(6, 40)
        model, draft_model = endless_model(trial, 12, max_positions), endless_model(trial + 100, 12, max_positions)
        sources = random_sources(trial, 3, 12, 1, max_positions)
        max_len = rng.choice([None, 1, rng.randint(1, 2 * max_positions)])
        drafter = rng.choice(["paper", "lookup", "pointer"])
        results = decode(name, model, draft_model, sources, lambda src: make_drafter(drafter, src, 16, 3), max_len,
                         trial)
        for src, result in zip(sources, results):
            budget = target_budget(len(src), max_positions, max_len)
            assert budget <= max_positions - 1
            for hyp in result.hypotheses:
                assert len(hyp.tokens) == budget and not hyp.finished, (trial, budget)



@pytest.mark.parametrize("name", ("greedy", "greedy-uncached", "beam", "beam-uncached", "sbs", "sbs-exact")
                         + SAMPLING_MODES)
@pytest.mark.parametrize("max_len", [0, -3])
def test_a_max_len_below_one_is_refused_by_every_decoder(name, max_len):
    """A library caller's max_len of 0 or less decoded one token, as if 1 had been asked, under every decoder."""
    model, draft_model = endless_model(0, 12), endless_model(1, 12)
    sources = random_sources(0, 2, 12, 2, 6)
    drafts = lambda src: make_drafter("lookup", src, 4, 1)  # noqa: E731
    with pytest.raises(ValueError, match=f"max_len must be 1 or more .*not {max_len}"):
        if name == "greedy-uncached":
            greedy_uncached(model, sources, max_len)
        elif name == "beam-uncached":
            beam_search(model, sources, 3, max_len=max_len, cached=False)
        else:
            decode(name, model, draft_model, sources, drafts, max_len, 0)


def test_fit_drafts_cuts_to_the_budget_and_to_the_row_furthest_along():
    drafts = [[[1, 2, 3, 4, 5], [6, 7]], [[8, 9, 10, 11]]]
    # Row 0 has 2 tokens of a budget of 5: a call emits accepted drafts plus one, so 2 fit.
    assert fit_drafts(drafts, [2, 0], [5, 50], slots=100) == [[[1, 2], [6, 7]], [[8, 9, 10, 11]]]
    # Row 0 sits at position 96 of 100 slots: every row of the call is padded to the longest draft,
    # so none may draft past 100 - 96 - 1 = 3 tokens, even row 1 with budget to spare.
    assert fit_drafts(drafts, [96, 0], [99, 50], slots=100) == [[[1, 2], [6, 7]], [[8, 9, 10]]]
    # No room left: no drafts at all (the call feeds the pending token alone).
    assert fit_drafts(drafts, [4, 0], [5, 50], slots=100) == [[], [[8, 9, 10, 11]]]
