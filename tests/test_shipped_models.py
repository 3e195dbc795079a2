"""The shipped models decode identically with every exact speculative method (issues 2, 4, 6).

Queries are USPTO-50K test products (retro) and USPTO-MIT-like reactant sets (forward), typed in
here so the check needs no data folder."""
import pytest

from conftest import ROOT
from molspec_core.methods import TASK_DEFAULTS
from molspec_core.roundtrip import sequence_log_probs
from molspec_core.service import Predictor
from molspec_core.textbook import known_answer_ranks, load_examples

QUERIES = {
    "forward": ["CC(=O)Cl.NCc1ccccc1", "CCO.O=C(O)c1ccccc1", "CN.O=C(Cl)c1ccc([N+](=O)[O-])cc1",
                "Brc1ccccc1.OB(O)c1ccccc1", "CC(C)(C)OC(=O)N1CCC(CO)CC1.O=C(O)C(F)(F)F"],
    "retro": ["CC(=O)c1ccc2c(ccn2C(=O)OC(C)(C)C)c1", "CCOC(=O)c1nn(-c2ccc(Cl)cc2Cl)c(-c2ccc(OC)cc2)c1CBr",
              "COc1ccc(CNC(=O)c2ccccc2)cc1", "O=C(O)c1ccc(-c2ccccc2)cc1", "CC(C)(C)OC(=O)N1CCC(CO)CC1"],
}


@pytest.fixture(scope="module", params=["forward", "retro"])
def shipped(request):
    assert (ROOT / "models" / request.param / "config.json").is_file(), f"models/{request.param} is not shipped"
    return Predictor.load(request.param, device="cpu"), QUERIES[request.param]


def test_every_speculative_greedy_method_equals_greedy(shipped):
    predictor, queries = shipped
    reference = [r.predictions[0].tokens for r in predictor.predict(queries, method="greedy", time_limit_s=None)]
    for method in ("spec-paper", "spec-lookup", "spec-pointer", "spec-auto", "relaxed"):
        got = [r.predictions[0].tokens for r in predictor.predict(queries, method=method, time_limit_s=None)]
        assert got == reference, method


def test_exact_speculative_beam_equals_beam(shipped):
    predictor, queries = shipped
    for width in (3, 5):
        beam = predictor.predict(queries, method="beam", n_best=width, time_limit_s=None)
        exact = predictor.predict(queries, method="sbs-exact", n_best=width, time_limit_s=None)
        for b, e in zip(beam, exact):
            assert [p.tokens for p in e.predictions] == [p.tokens for p in b.predictions]
            assert [p.score for p in e.predictions] == pytest.approx([p.score for p in b.predictions], rel=1e-3)


def test_draft_model_is_shipped_with_the_model(shipped):
    predictor, queries = shipped
    assert predictor.draft_model is not None
    result = predictor.predict(queries[0], method="spec-sample-draft", n_best=2, time_limit_s=None)
    assert result.ok and result.stats.draft_tokens_proposed > 0


@pytest.mark.parametrize("method", ["sample", "spec-sample", "spec-sample-draft"])
def test_a_sampled_answers_score_is_the_models_log_probability_of_it(shipped, method):
    """spec-sample-draft added the log-probs of what a call accepted past a drafted eos: paracetamol's
    forward answer scored -0.0456 where the model gives it -0.0311, and retro samples came out of order."""
    predictor, queries = shipped
    for result in predictor.predict(queries, method=method, n_best=3, time_limit_s=None):
        answers = [p for p in result.predictions if p.finished]
        source = predictor.prepare(result.query).ids
        truth = sequence_log_probs(predictor, [source] * len(answers),
                                   [predictor.vocab.encode("".join(p.tokens)) for p in answers])
        assert [p.score for p in answers] == pytest.approx(truth, abs=2e-3), result.query


def test_sampling_at_the_default_temperature_gives_valid_answers(shipped):
    """At temperature 1 these models, trained mostly with label smoothing, sample a stray token into
    many answers (methods.DEFAULT_TEMPERATURE); the default keeps a plain sample's answers valid SMILES."""
    predictor, queries = shipped
    results = predictor.predict(queries, method="sample", n_best=3, time_limit_s=None)
    answers = [p for r in results for p in r.predictions]
    assert len(answers) >= len(queries)
    assert sum(p.valid for p in answers) >= 0.8 * len(answers)


# How many of the app's 26 textbook reactions (assets/examples.json) the shipped models get as the pages open;
# measured with tools/textbook.py (README "Textbook reactions"): forward 25 first, retro 24 within its ten (23
# until c146a85 read a known answer's Grignard as USPTO-50K writes it). A model shipped later must not know less
# of this everyday chemistry; one reaction of slack each.
TEXTBOOK_FLOOR = {"forward": ("first", 24), "retro": ("listed", 23)}


def test_textbook_reactions_as_the_pages_read_them(shipped):
    predictor, _ = shipped
    examples = load_examples(ROOT / "assets" / "examples.json")
    method, n_best = TASK_DEFAULTS[predictor.task]
    rows = known_answer_ranks(predictor, examples, method, n_best, augment=5)
    assert len(rows) == 26 and not [r["error"] for r in rows if r["error"]]
    measure, floor = TEXTBOOK_FLOOR[predictor.task]
    got = sum(r["rank"] == 1 for r in rows) if measure == "first" else sum(r["rank"] is not None for r in rows)
    assert got >= floor, [(r["name"], r["rank"], r["first"]) for r in rows if r["rank"] != 1]
