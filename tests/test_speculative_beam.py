"""Speculative beam search: sbs-exact == beam search's n-best lists; the paper's SBS with draft
length 0 == beam search; batched == single."""
import pytest

from conftest import on_engine, random_model, random_sources
from molspec_core.decoding.beam import beam_search
from molspec_core.decoding.speculative_beam import speculative_beam
from molspec_core.drafting import make_drafter


def drafts(name, draft_len=10, n_drafts=1):
    return lambda src: make_drafter(name, src, draft_len, n_drafts)


def lists(results):
    return [[h.tokens for h in r.hypotheses] for r in results]


def assert_same_nbest(got, ref):
    """Same sequences in the same order, exactly; scores equal up to float32 rounding: sbs-exact
    reads log-probs from calls that verify several tokens at once, whose matmuls round differently
    from one-token calls (seen: 1.3e-4 absolute on a score of -8.3 after ~20 steps, 1.6e-5 relative)."""
    assert lists(got) == lists(ref)
    for g, r in zip(got, ref):
        assert [h.score for h in g.hypotheses] == pytest.approx([h.score for h in r.hypotheses], rel=1e-4, abs=1e-4)
        # tokens per call reads alike: both count their longest answer's tokens (beam counted every beam's before)
        longest = max((len(h.tokens) + h.finished for h in r.hypotheses), default=0)
        assert g.stats.tokens_generated == r.stats.tokens_generated == longest


@pytest.mark.parametrize("width", [1, 3, 5, 10])
@pytest.mark.parametrize("drafter", ["pointer", "lookup", "paper"])
def test_exact_equals_beam_on_copy_model(copy_model, engine, width, drafter):
    model, vocab = on_engine(copy_model[0], engine), copy_model[1]
    sources = random_sources(21, 25, len(vocab), 3, 22)
    ref = beam_search(model, sources, width)
    got = speculative_beam(model, sources, width, drafts(drafter, 10, 4 if drafter == "paper" else 1), exact=True)
    assert_same_nbest(got, ref)
    if width == 1:  # with one beam every step follows the draft: fewer calls than beam search
        assert sum(r.stats.model_calls for r in got) < sum(r.stats.model_calls for r in ref)


def test_look_ahead_saves_calls_on_copy_model(copy_model):
    """Feeding the next step's would-be-blind children in calls made anyway saves later calls
    (model calls are counted, not timed: on this model 300 vs 317 calls at width 5, beam 353)."""
    model, vocab = copy_model
    sources = random_sources(21, 25, len(vocab), 3, 22)
    calls = {la: sum(r.stats.model_calls for r in speculative_beam(model, sources, 5, drafts("pointer", 4), exact=True,
                                                                   look_ahead=la)) for la in (True, False)}
    assert calls[True] < calls[False] < sum(r.stats.model_calls for r in beam_search(model, sources, 5))


@pytest.mark.parametrize("look_ahead", [True, False])
@pytest.mark.parametrize("width", [1, 3, 5, 10])
def test_exact_equals_beam_on_random_models(engine, width, look_ahead):
    """Random models have flat distributions: beams branch and leave their drafts all the time,
    which exercises row copies, pool growth (width 10) and the look-ahead rows."""
    for seed in range(3):
        model = random_model(seed, vocab_size=8, engine=engine)
        sources = random_sources(seed, 12, 8, 3, 15)
        ref = beam_search(model, sources, width, max_len=16)
        got = speculative_beam(model, sources, width, drafts("lookup", 6), exact=True, max_len=16,
                               look_ahead=look_ahead)
        assert_same_nbest(got, ref)


@pytest.mark.parametrize("width", [1, 3, 5])
def test_paper_sbs_with_draft_length_zero_is_beam_search(copy_model, width):
    model, vocab = copy_model
    sources = random_sources(5, 20, len(vocab), 3, 22)
    assert_same_nbest(speculative_beam(model, sources, width, drafts("none", 0, 0), exact=False),
                      beam_search(model, sources, width))


def test_paper_sbs_top1_and_calls_on_copy_model(copy_model):
    """SBS is lossy in general; on this low-entropy model its best hypothesis matches beam search."""
    model, vocab = copy_model
    sources = random_sources(8, 25, len(vocab), 3, 22)
    ref = beam_search(model, sources, 5)
    got = speculative_beam(model, sources, 5, drafts("pointer", 10), exact=False)
    assert [r.hypotheses[0].tokens for r in got] == [r.hypotheses[0].tokens for r in ref]
    assert sum(r.stats.model_calls for r in got) < sum(r.stats.model_calls for r in ref)
    # it records no rejection, so it gives no acceptance rate (1.0 was read as "every draft token accepted")
    assert any(r.stats.draft_tokens_accepted for r in got) and all(r.stats.acceptance_rate is None for r in got)


def test_batched_equals_single(copy_model, engine):
    model, vocab = on_engine(copy_model[0], engine), copy_model[1]
    sources = random_sources(13, 8, len(vocab), 3, 22)
    for exact in (True, False):
        batched = speculative_beam(model, sources, 3, drafts("pointer"), exact=exact)
        single = [speculative_beam(model, [s], 3, drafts("pointer"), exact=exact)[0] for s in sources]
        assert lists(batched) == lists(single)


def test_provenance_marks_draft_tokens(copy_model):
    model, vocab = copy_model
    src = random_sources(2, 1, len(vocab), 12, 12)[0]
    for exact in (True, False):
        best = speculative_beam(model, [src], 3, drafts("pointer"), exact=exact)[0].hypotheses[0]
        assert len(best.provenance) == len(best.tokens)
        assert all(src[p] == t for t, p in zip(best.tokens, best.provenance) if p >= 0)
        assert any(p >= 0 for p in best.provenance)
