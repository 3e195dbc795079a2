"""Speculative beam search: sbs-exact == beam search's n-best lists; the paper's SBS with draft
length 0 == beam search; batched == single."""
import pytest

from conftest import COPYING_VOCAB, FIXTURES, copying_model, decoder_clock, needs_native, on_engine, random_sources
from molspec_core.decoding.beam import beam_search
from molspec_core.cache import RowPool
from molspec_core.decoding import speculative_beam as sbs_module
from molspec_core.decoding.speculative_beam import speculative_beam
from molspec_core.drafting import make_drafter
from molspec_core.limits import QueryTimeout, time_limit
from molspec_core.service import TIMED_OUT, Predictor


def drafts(name, draft_len=10, n_drafts=1):
    return lambda src: make_drafter(name, src, draft_len, n_drafts)


def lists(results):
    return [[h.tokens for h in r.hypotheses] for r in results]


def assert_same_nbest(got, ref, to_the_bit=False):
    """Same sequences in the same order, exactly; scores equal up to float32 rounding: sbs-exact
    reads log-probs from calls that verify several tokens at once, whose matmuls round differently
    from one-token calls (seen: 1.3e-4 absolute on a score of -8.3 after ~20 steps, 1.6e-5 relative).
    to_the_bit: the C engine, where a token's logits are computed the same way in a step and in a verify call
    (README; several drafts a row are fed as rows of their own), so the scores and finished flags are beam
    search's to the bit."""
    assert lists(got) == lists(ref)
    for g, r in zip(got, ref):
        if to_the_bit:
            assert [h.score for h in g.hypotheses] == [h.score for h in r.hypotheses]
            assert [h.finished for h in g.hypotheses] == [h.finished for h in r.hypotheses]
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
    assert_same_nbest(got, ref, to_the_bit=engine == "native")
    assert_accepts_drafts(got, ref)
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


def assert_accepts_drafts(got, ref):
    """sbs-exact really ran drafted paths (its best answers hold copied tokens), and its count of accepted
    draft tokens is the best answer's copied tokens (speculative_beam._Search.result)."""
    copied = [sum(p >= 0 for p in r.hypotheses[0].provenance) for r in got]
    assert [r.stats.draft_tokens_accepted for r in got] == copied
    assert sum(copied) > 0.2 * sum(len(r.hypotheses[0].tokens) for r in ref)


@pytest.mark.parametrize("look_ahead", [True, False])
@pytest.mark.parametrize("width", [1, 3, 5, 10])
def test_exact_equals_beam_on_noisy_copy_models(engine, width, look_ahead):
    """Noisy copy models (conftest.copying_model) are less sure than the copy model: beams branch and leave
    their drafts, which exercises row copies, pool growth (width 10) and the look-ahead rows, while drafts
    are still accepted (a random model accepts none: it writes its start token over and over)."""
    for seed in range(3):
        model = copying_model(seed, engine=engine)
        sources = random_sources(seed, 12, COPYING_VOCAB, 3, 15)
        ref = beam_search(model, sources, width, max_len=16)
        got = speculative_beam(model, sources, width, drafts("lookup", 6), exact=True, max_len=16,
                               look_ahead=look_ahead)
        assert_same_nbest(got, ref, to_the_bit=engine == "native")
        assert_accepts_drafts(got, ref)



@needs_native
def test_several_drafts_on_the_native_engine_copy_rows_within_a_bound_and_still_equal_beam(monkeypatch):
    """On the native engine several drafts a row are fed as rows of their own, each a copy of its hypothesis' row;
    past SPLIT_GATHER_BYTES of copies the hypotheses go in several calls (here each alone: a bound of 0), so a
    wide beam with many drafts does not copy gigabytes at once. The lists and scores stay beam search's to the bit."""
    model = copying_model(2, engine="native", noise=0.4)
    sources = random_sources(3, 6, COPYING_VOCAB, 4, 20)
    ref = beam_search(model, sources, 4, max_len=20)
    gathered, gather = [], RowPool.gather
    monkeypatch.setattr(RowPool, "gather", lambda pool, rows, *args: gathered.append(len(rows)) or gather(pool, rows,
                                                                                                          *args))
    monkeypatch.setattr(sbs_module, "SPLIT_GATHER_BYTES", 0)
    got = speculative_beam(model, sources, 4, drafts("lookup", 3, 3), exact=True, max_len=20)
    assert_same_nbest(got, ref, to_the_bit=True)
    assert gathered and max(gathered) <= 3  # one hypothesis' drafts a call
    assert max(gathered) > 1  # and several drafts a row were fed

@pytest.mark.parametrize("n_best", [1, 2, 4])
def test_exact_equals_beam_when_fewer_answers_than_the_width_are_asked(n_best):
    """The service asks for as many answers as the beam's width; a library caller may ask fewer. The n_best-th
    finished score (the floor below which both searches drop hypotheses) then comes sooner and sits higher, and
    sbs-exact must still return beam search's lists, across the width, the look-ahead and a length budget."""
    for seed in range(2):
        model = copying_model(seed, engine="numpy", noise=0.5)
        sources = random_sources(seed + 40, 8, COPYING_VOCAB, 2, 14)
        for width, look_ahead in ((5, True), (8, False)):
            ref = beam_search(model, sources, width, n_best, max_len=12)
            got = speculative_beam(model, sources, width, drafts("pointer", 3), exact=True, n_best=n_best,
                                   max_len=12, look_ahead=look_ahead)
            assert [[(h.tokens, h.finished) for h in r.hypotheses] for r in got] == \
                [[(h.tokens, h.finished) for h in r.hypotheses] for r in ref]
            assert all(len(r.hypotheses) <= n_best for r in got)
            assert sum(r.stats.draft_tokens_accepted for r in got) > 0  # drafted paths ran


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
    """speculative_beam decodes a list's sources one after another, each in a fresh search: a list must
    give each source what it gets alone, in every field (nothing of one search leaks into the next)."""
    model, vocab = on_engine(copy_model[0], engine), copy_model[1]
    sources = random_sources(13, 8, len(vocab), 3, 22)
    for exact in (True, False):
        batched = speculative_beam(model, sources, 3, drafts("pointer"), exact=exact)
        single = [speculative_beam(model, [s], 3, drafts("pointer"), exact=exact)[0] for s in sources]
        assert lists(batched) == lists(single)
        for b, s in zip(batched, single):
            assert [(h.score, h.finished, h.provenance) for h in b.hypotheses] == \
                [(h.score, h.finished, h.provenance) for h in s.hypotheses]
            for field in ("model_calls", "tokens_generated", "draft_tokens_proposed", "draft_tokens_accepted"):
                assert getattr(b.stats, field) == getattr(s.stats, field), field
        assert sum(r.stats.draft_tokens_accepted for r in batched) > 0


def test_provenance_marks_draft_tokens(copy_model):
    model, vocab = copy_model
    src = random_sources(2, 1, len(vocab), 12, 12)[0]
    for exact in (True, False):
        best = speculative_beam(model, [src], 3, drafts("pointer"), exact=exact)[0].hypotheses[0]
        assert len(best.provenance) == len(best.tokens)
        assert all(src[p] == t for t, p in zip(best.tokens, best.provenance) if p >= 0)
        assert any(p >= 0 for p in best.provenance)


def test_a_beam_width_or_n_best_below_one_is_refused_by_beam_search_and_both_variants(copy_model):
    """Width 0 and n_best -1 failed on IndexErrors; sbs at width 0 returned no answer; n_best 0 read as "the width"."""
    model, vocab = copy_model
    runs = [lambda w, n: beam_search(model, [[5, 6, 7]], w, n),
            lambda w, n: speculative_beam(model, [[5, 6, 7]], w, drafts("lookup", 2), exact=True, n_best=n),
            lambda w, n: speculative_beam(model, [[5, 6, 7]], w, drafts("lookup", 2), exact=False, n_best=n)]
    for run in runs:
        for width, n_best in ((0, None), (3, 0), (3, -1)):
            with pytest.raises(ValueError, match=f"the beam width and n_best must be 1 or more, not {width} and"):
                run(width, n_best)
        assert len(run(2, 5)[0].hypotheses) <= 2  # more answers than the width: the width's


SLOW = "NCCOCCNCCOCCNCCOCCNCCO"  # the copy model's sbs-exact takes 6 calls on it, and 4 on "CCO"


@pytest.fixture(scope="module")
def copier():
    return Predictor.load(FIXTURES / "copy_model", device="cpu")


@pytest.mark.parametrize("method", ["sbs-exact", "sbs"])
def test_a_speculative_beam_stopped_by_the_time_limit_keeps_what_it_found_and_its_calls(copier, method, monkeypatch):
    """Past its limit, sbs-exact (beam search's answers, sooner) and sbs gave an error row with no answers and no
    model calls, where beam search keeps what it found (test_service.py). They keep it too now: the answers
    finished, then the best live ones, marked as stopped at the time limit, and the calls made."""
    clock = decoder_clock(copier.model, monkeypatch)
    result = copier.predict(SLOW, method=method, n_best=3, time_limit_s=3.5)
    assert clock["seconds"] == 4  # the fourth call found the limit passed
    assert not result.ok and "time limit" in result.error
    assert result.stats.model_calls == 3
    assert [(p.smiles, p.finished) for p in result.predictions][:2] == [("NOON", False), ("NNON", False)]
    assert all(p.concerns == (TIMED_OUT,) for p in result.predictions if not p.finished)


def test_a_batch_stopped_in_its_last_query_keeps_the_queries_before_it(copier, monkeypatch):
    """speculative_beam decodes a batch's queries one after another. Stopped in the last, the others ended, it
    said nothing of them, and every query was decoded again alone. It hands them on now, with the stopped one's
    search; stopped in an earlier query it hands on that one's calls alone, with no answers (its search not read
    whole), as the later ones never began."""
    clock = decoder_clock(copier.model, monkeypatch)
    unlimited = copier.predict("CCO", method="sbs-exact", n_best=3, time_limit_s=None)
    clock["seconds"] = 0.0
    done, stopped = copier.predict(["CCO", SLOW], method="sbs-exact", n_best=3, time_limit_s=3.5)
    assert clock["seconds"] == 8  # CCO's 4 calls, SLOW's 3 and the one that found the batch's 7 s passed; no retry
    assert done.ok and [p.tokens for p in done.predictions] == [p.tokens for p in unlimited.predictions]
    assert not stopped.ok and "time limit" in stopped.error and stopped.stats.model_calls == 3
    assert stopped.predictions and not stopped.predictions[0].finished

    ids = [copier.prepare(text, False).ids for text in (SLOW, "CCO")]
    clock["seconds"] = 0.0
    with pytest.raises(QueryTimeout) as stop, time_limit(3.5):
        speculative_beam(copier.model, ids, 3, drafts("lookup", 4), exact=True)
    assert len(stop.value.found) == 1 and stop.value.searched == (False,)
    assert stop.value.found[0].hypotheses == [] and stop.value.found[0].stats.model_calls == 3


def test_a_batch_stopped_before_its_last_query_decodes_again_only_the_queries_not_ended(copier, monkeypatch):
    """Stopped in a query before the batch's last, speculative_beam said nothing, and every query was decoded again
    alone, the ended ones included: CCO, whose 4 calls fit the batch's time but not its own limit alone, then ended
    stopped too. The ended queries are handed on now and keep their answers; only the others are decoded again."""
    clock = decoder_clock(copier.model, monkeypatch)
    unlimited = copier.predict("CCO", method="sbs-exact", n_best=3, time_limit_s=None)
    clock["seconds"] = 0.0
    done, *stopped = copier.predict(["CCO", SLOW, SLOW + "CC"], method="sbs-exact", n_best=3, time_limit_s=2.5)
    # CCO's 4 calls and SLOW's 3 and the one past the batch's 7.5 s; then SLOW alone (2.5 s: 2 calls and the one
    # that finds them passed), then SLOW + "CC" alone (the same); CCO is not decoded again
    assert clock["seconds"] == 8 + 3 + 3
    assert done.ok and [p.tokens for p in done.predictions] == [p.tokens for p in unlimited.predictions]
    assert all(not r.ok and "time limit" in r.error for r in stopped)

    ids = [copier.prepare(text, False).ids for text in ("CCO", SLOW, "CCO")]
    alone = speculative_beam(copier.model, ids[:1], 3, drafts("lookup", 4), exact=True)[0]
    clock["seconds"] = 0.0
    with pytest.raises(QueryTimeout) as stop, time_limit(6.5):
        speculative_beam(copier.model, ids, 3, drafts("lookup", 4), exact=True)
    assert len(stop.value.found) == 2 and stop.value.searched == (True, False)
    assert stop.value.found[0].hypotheses == alone.hypotheses
    # SLOW, cut short, hands on its 2 calls (CCO's 4, then 2 before the 7th found 6.5 s passed) and no answers:
    # they were lost, and a query read in several writings so stopped said fewer calls than it made
    assert stop.value.found[1].hypotheses == [] and stop.value.found[1].stats.model_calls == 2
