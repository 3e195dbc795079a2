"""Decoders: speculative greedy (every drafter) == greedy token for token, batched == single,
cached == uncached, beam search against its definition."""
import itertools
import random

import pytest
import torch

from conftest import COPYING_VOCAB, copying_model, needs_native, on_engine, random_model, random_sources
from molspec_core.decoding.beam import beam_search
from molspec_core.decoding.greedy import greedy, greedy_uncached, settle_lists, settle_tensors
from molspec_core.decoding.result import GENERATED
from molspec_core.drafting import make_drafter
from molspec_core.tokenizer import BOS_ID, EOS_ID

DRAFTERS = [("paper", 10, 25), ("paper", 4, 3), ("lookup", 16, 1), ("lookup", 5, 4), ("pointer", 16, 1),
            ("pointer", 6, 3)]


def factory(name, draft_len, n_drafts):
    return lambda src: make_drafter(name, src, draft_len, n_drafts)


def tokens(results):
    return [r.hypotheses[0].tokens for r in results]


def test_cached_greedy_equals_uncached_on_noisy_copy_models(engine):
    """On noisy copies of the copy model (conftest.copying_model): answers that end, of source tokens, not
    a random model's start token repeated to the length budget."""
    for seed in range(4):
        model = copying_model(seed, engine=engine)
        sources = random_sources(seed, 25, COPYING_VOCAB)
        cached = greedy(model, sources, factory("none", 0, 0), max_len=30)
        assert tokens(cached) == tokens(greedy_uncached(model, sources, max_len=30))
        assert sum(r.hypotheses[0].finished for r in cached) > 12


@pytest.mark.parametrize("name,draft_len,n_drafts", DRAFTERS)
def test_speculative_equals_greedy_on_copy_model(copy_model, engine, name, draft_len, n_drafts):
    model, vocab = on_engine(copy_model[0], engine), copy_model[1]
    sources = random_sources(7, 150, len(vocab), 1, 30)
    reference = [greedy(model, [s], factory("none", 0, 0))[0] for s in sources]
    single = [greedy(model, [s], factory(name, draft_len, n_drafts))[0] for s in sources]
    assert tokens(single) == tokens(reference)
    for ref, res in zip(reference, single):
        assert res.hypotheses[0].score == pytest.approx(ref.hypotheses[0].score, abs=1e-4)
    accepted = sum(r.stats.draft_tokens_accepted for r in single)
    assert accepted > 0.5 * sum(len(t) for t in tokens(reference))  # the drafts really are used
    assert sum(r.stats.model_calls for r in single) < sum(r.stats.model_calls for r in reference)


@pytest.mark.parametrize("name,draft_len,n_drafts", DRAFTERS)
def test_speculative_equals_greedy_on_noisy_copy_models(engine, name, draft_len, n_drafts):
    """Noisy copy models (conftest.copying_model) accept some draft tokens and reject many: both paths,
    and drafts cut short, must be exact. (A random model accepts none: it writes its start token over and
    over, so a test on it compares two plain decodes.)"""
    for seed in range(3):
        model = copying_model(seed, engine=engine)
        sources = random_sources(seed, 40, COPYING_VOCAB)
        plain = greedy(model, sources, factory("none", 0, 0), max_len=25)
        fast = greedy(model, sources, factory(name, draft_len, n_drafts), max_len=25)
        assert tokens(fast) == tokens(plain)
        for p, f in zip(plain, fast):
            assert f.hypotheses[0].finished == p.hypotheses[0].finished
            if engine == "native":  # to the bit on the C engine, several drafts a call too (verify_as_rows)
                assert f.hypotheses[0].score == p.hypotheses[0].score
            else:
                assert f.hypotheses[0].score == pytest.approx(p.hypotheses[0].score, abs=1e-4)
        assert sum(r.hypotheses[0].finished for r in plain) > 20
        accepted = sum(r.stats.draft_tokens_accepted for r in fast)
        assert 0.2 * sum(len(t) for t in tokens(plain)) < accepted < sum(r.stats.draft_tokens_proposed for r in fast)


@pytest.mark.parametrize("name,draft_len,n_drafts", DRAFTERS[::2])
def test_batch_equals_single_runs(copy_model, engine, name, draft_len, n_drafts):
    model, vocab = on_engine(copy_model[0], engine), copy_model[1]
    sources = random_sources(11, 24, len(vocab), 1, 30)
    batched = greedy(model, sources, factory(name, draft_len, n_drafts))
    single = [greedy(model, [s], factory(name, draft_len, n_drafts))[0] for s in sources]
    assert tokens(batched) == tokens(single)
    for b, s in zip(batched, single):
        assert b.hypotheses[0].provenance == s.hypotheses[0].provenance
        assert b.stats.model_calls == s.stats.model_calls


@pytest.mark.parametrize("rest", [1, 3])
def test_resting_after_a_missed_draft_keeps_the_output(copy_model, engine, rest):
    """greedy(rest=r): after a draft lost at its first token a row drafts nothing for r calls. Fewer
    draft tokens are fed, and the tokens and scores stay those of rest=0 (provenance may not: a token
    made in a rest is generated rather than copied)."""
    model, vocab = on_engine(copy_model[0], engine), copy_model[1]
    sources = random_sources(17, 40, len(vocab), 1, 30)
    for name, draft_len, n_drafts in (("pointer", 8, 1), ("lookup", 5, 2)):
        plain = greedy(model, sources, factory(name, draft_len, n_drafts))
        resting = greedy(model, sources, factory(name, draft_len, n_drafts), rest=rest)
        single = [greedy(model, [s], factory(name, draft_len, n_drafts), rest=rest)[0] for s in sources]
        assert tokens(resting) == tokens(plain) == tokens(single)
        for p, r in zip(plain, resting):
            assert r.hypotheses[0].score == pytest.approx(p.hypotheses[0].score, abs=1e-4)
        proposed = [sum(r.stats.draft_tokens_proposed for r in run) for run in (plain, resting)]
        assert proposed[1] < proposed[0]  # the rests really skip drafts


def test_resting_on_noisy_copy_models_is_exact():
    """Noisy copy models miss many drafts: rows rest often, accept drafts between rests, and stay exact."""
    for seed in range(3):
        model = copying_model(seed)
        sources = random_sources(seed, 30, COPYING_VOCAB)
        resting = greedy(model, sources, factory("lookup", 4, 1), max_len=25, rest=2)
        plain = greedy(model, sources, factory("none", 0, 0), max_len=25)
        assert tokens(resting) == tokens(plain)
        assert [r.hypotheses[0].score for r in resting] == pytest.approx([r.hypotheses[0].score for r in plain],
                                                                         abs=1e-4)
        assert sum(r.stats.draft_tokens_accepted for r in resting) > 0.2 * sum(len(t) for t in tokens(plain))


def test_provenance_points_at_equal_source_tokens(copy_model):
    model, vocab = copy_model
    sources = random_sources(3, 60, len(vocab), 5, 24)
    for src, res in zip(sources, greedy(model, sources, factory("pointer", 16, 1))):
        hyp = res.hypotheses[0]
        assert len(hyp.provenance) == len(hyp.tokens)
        copied = [(tok, pos) for tok, pos in zip(hyp.tokens, hyp.provenance) if pos != GENERATED]
        assert copied and all(src[pos] == tok for tok, pos in copied)
        assert res.stats.draft_tokens_accepted == len(copied)
        assert res.stats.tokens_generated == len(hyp.tokens) + hyp.finished  # eos counted when emitted


def test_greedy_score_is_the_sum_of_token_log_probs(copy_model):
    model, vocab = copy_model
    src = random_sources(5, 1, len(vocab), 10, 10)[0]
    hyp = greedy(model, [src], factory("pointer", 16, 1))[0].hypotheses[0]
    with torch.no_grad():
        tgt = torch.tensor([[BOS_ID, *hyp.tokens, EOS_ID]])
        log_probs = model(torch.tensor([src]), tgt[:, :-1]).log_softmax(-1)
    assert hyp.score == pytest.approx(float(log_probs.gather(-1, tgt[:, 1:, None]).sum()), abs=1e-4)


@pytest.mark.parametrize("seed", range(6))
def test_settle_lists_equals_settle_tensors(seed):
    """greedy's CPU bookkeeping (NumPy, lists) gives the tensor path's outcome: drafts that agree with
    the argmax for a random number of tokens, several branches of ragged lengths, attention or none."""
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    rows, branches, depth, vocab, src_len = rng.randint(1, 4), rng.randint(1, 3), rng.randint(1, 5), 11, 7
    logits = torch.randn(rows, branches, 1 + depth, vocab, generator=gen)
    argmax = logits.argmax(-1)
    drafts, tokens, lengths = ([], torch.full((rows, branches, 1 + depth), 0),
                               torch.zeros(rows, branches, dtype=torch.long))
    for r in range(rows):
        row = []
        for b in range(branches):
            n, agree = rng.randint(0, depth), rng.randint(0, depth)
            if b == branches - 1:  # the last branch always keeps at least its first token
                n, agree = rng.randint(1, depth), depth
            draft = [int(argmax[r, b, i]) if i < agree else (int(argmax[r, b, i]) + 1) % vocab for i in range(n)]
            row.append(draft)
            tokens[r, b, 1:1 + n] = torch.tensor(draft, dtype=torch.long)
            lengths[r, b] = n
        drafts.append(row)
    attention = torch.rand(rows, branches, 1 + depth, src_len, generator=gen) if seed % 2 else None
    expected = settle_tensors(logits, tokens, lengths, attention)
    got = settle_lists(logits.numpy(), drafts, attention.numpy() if attention is not None else None)
    assert got[:3] == expected[:3] and got[4] == expected[4]
    assert got[3] == [pytest.approx(row, abs=1e-6) for row in expected[3]]
    assert all(n > 0 for n in got[0])


def test_length_budget_stops_unfinished():
    model = random_model(0)
    res = greedy(model, [[5, 6, 7]], factory("lookup", 4, 1), max_len=7)[0]
    assert len(res.hypotheses[0].tokens) <= 7


def test_a_source_without_tokens_is_refused_by_every_decoder_before_any_query_is_decoded(copy_model, engine,
                                                                                          monkeypatch):
    """An empty source has nothing for the cross-attention to read. Engines disagreed on it: in a batch torch
    answered, NumPy and the C step wrote pad tokens for it and their beam search failed on an IndexError; alone, the
    C step said it 'could not allocate its scratch memory'. Speculative beam search and sampling decoded the queries
    before it first."""
    from molspec_core.decoding.sampling import SamplingOptions, sample_decode
    from molspec_core.decoding.speculative_beam import speculative_beam

    model = on_engine(copy_model[0], engine)
    encoded = []
    encode = model.encode
    monkeypatch.setattr(model, "encode", lambda src: encoded.append(src) or encode(src))
    decoders = [lambda s: greedy(model, s, factory("none", 0, 0)), lambda s: greedy(model, s, factory("lookup", 4, 1)),
                lambda s: greedy(model, s, factory("pointer", 4, 1)), lambda s: greedy_uncached(model, s),
                lambda s: beam_search(model, s, 3),
                lambda s: speculative_beam(model, s, 3, factory("lookup", 4, 1), exact=True),
                lambda s: speculative_beam(model, s, 3, factory("lookup", 4, 1), exact=False),
                lambda s: sample_decode(model, s, "spec-sample", factory("lookup", 4, 1), SamplingOptions())]
    for decode in decoders:
        with pytest.raises(ValueError, match="source 1 has no tokens"):
            decode([[5, 6, 7], [], [8]])
    assert encoded == []
    assert greedy(model, [[5, 6, 7]], factory("none", 0, 0))[0].hypotheses[0].tokens  # a batch without one decodes


def test_an_empty_batch_gets_no_results_from_every_decoder(copy_model, engine):
    """Greedy, its uncached reference and beam search (cached or not) failed on an empty batch with 'max() arg is
    an empty sequence' (Predictor.decode([], "greedy", 1) too), where speculative beam search and sampling gave []."""
    from molspec_core.decoding.sampling import SamplingOptions, sample_decode
    from molspec_core.decoding.speculative_beam import speculative_beam

    model = on_engine(copy_model[0], engine)
    decoders = [lambda: greedy(model, [], factory("none", 0, 0)), lambda: greedy(model, [], factory("lookup", 4, 1)),
                lambda: greedy_uncached(model, []), lambda: beam_search(model, [], 3),
                lambda: beam_search(model, [], 3, cached=False),
                lambda: speculative_beam(model, [], 3, factory("lookup", 4, 1), exact=True),
                lambda: sample_decode(model, [], "sample", None, SamplingOptions())]
    assert [decode() for decode in decoders] == [[]] * len(decoders)


def test_a_source_holding_a_decoders_own_token_or_no_token_is_refused_by_every_decoder(copy_model):
    """Vocab.encode writes no pad, bos or eos, but the decoders take ids. An eos in a source was copied by a draft:
    speculative greedy accepted it and wrote it into the answer, where greedy's answer ended there (on
    copying_model(0, noise=0.3), source [12, 15, 13, 6, 2, 8, 5]: (12, 15, 13, 6) against (12, 15, 13, 6, 2) with
    lookup drafts); a pad was taken for padding; an id past the vocabulary was an IndexError naming nothing."""
    from molspec_core.decoding.sampling import SamplingOptions, sample_decode
    from molspec_core.decoding.speculative_beam import speculative_beam

    model, vocab = copy_model
    decoders = [lambda s: greedy(model, s, factory("none", 0, 0)), lambda s: greedy(model, s, factory("lookup", 4, 1)),
                lambda s: greedy_uncached(model, s), lambda s: beam_search(model, s, 3),
                lambda s: speculative_beam(model, s, 3, factory("lookup", 4, 1), exact=True),
                lambda s: speculative_beam(model, s, 3, factory("lookup", 4, 1), exact=False),
                lambda s: sample_decode(model, s, "spec-sample", factory("lookup", 4, 1), SamplingOptions())]
    for wrong in (0, BOS_ID, EOS_ID, len(vocab), -1):
        for decode in decoders:
            with pytest.raises(ValueError, match=f"source 1 holds token id {wrong}, which is no token of a query"):
                decode([[5, 6, 7], [5, 6, 7, wrong, 8, 9]])
    unknown = greedy(model, [[5, 3, 7]], factory("lookup", 4, 1))[0].hypotheses[0]  # unk is a query's token
    assert unknown.tokens == greedy(model, [[5, 3, 7]], factory("none", 0, 0))[0].hypotheses[0].tokens



def test_a_source_longer_than_the_model_reads_is_refused_by_every_decoder_before_any_query_is_decoded(copy_model,
                                                                                                       monkeypatch):
    """A source past the model's positions failed in the encoder as 'sequence longer than the model's 128
    positions', naming no source, and speculative beam search and sampling had decoded (and then lost) the queries
    before it. A draft model with fewer positions bounds sampling's sources too (it encodes them)."""
    import dataclasses

    from molspec_core.decoding.sampling import SamplingOptions, sample_decode
    from molspec_core.decoding.speculative_beam import speculative_beam
    from molspec_core.model import Seq2SeqTransformer

    model = copy_model[0]
    positions = model.cfg.max_positions
    calls = []
    decode = model.decode
    monkeypatch.setattr(model, "decode", lambda *args, **kwargs: calls.append(1) or decode(*args, **kwargs))
    decoders = [lambda s: greedy(model, s, factory("none", 0, 0)), lambda s: greedy_uncached(model, s),
                lambda s: beam_search(model, s, 3), lambda s: beam_search(model, s, 3, cached=False),
                lambda s: speculative_beam(model, s, 3, factory("lookup", 4, 1), exact=True),
                lambda s: speculative_beam(model, s, 3, factory("lookup", 4, 1), exact=False),
                lambda s: sample_decode(model, s, "spec-sample", factory("lookup", 4, 1), SamplingOptions())]
    for decoder in decoders:
        with pytest.raises(ValueError, match=f"source 1 has {positions + 1} tokens, and the model reads at most "
                                             f"{positions}"):
            decoder([[5, 6, 7], [5] * (positions + 1)])
    assert calls == []
    short = Seq2SeqTransformer(dataclasses.replace(model.cfg, max_positions=10)).eval()
    short.load_state_dict(model.state_dict())
    with pytest.raises(ValueError, match="source 1 has 11 tokens, and the model reads at most 10"):
        sample_decode(model, [[5, 6], [5] * 11], "spec-sample-draft", None, SamplingOptions(), draft_model=short)
    assert calls == []
    assert greedy(model, [[5] * positions], factory("none", 0, 0))[0].hypotheses  # the longest it reads decodes

def brute_force_beam(model, src, width, max_len):
    """Beam search written directly from the definition in beam.py, with full recomputation."""
    live = [((BOS_ID,), 0.0)]
    finished = []
    with torch.no_grad():
        memory = model.encode(torch.tensor([src]))
        for step in range(1, max_len + 1):
            candidates = []
            for slot, (seq, score) in enumerate(live):
                logits = model.decode_full(torch.tensor([seq]), memory, torch.ones(1, len(src), dtype=torch.bool))
                for tok, lp in enumerate(logits[0, -1].log_softmax(-1).tolist()):
                    candidates.append((score + lp, slot, tok, seq))
            candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
            live = []
            for score, _, tok, seq in candidates[:width]:
                if tok == EOS_ID:
                    finished.append((seq[1:], score))
                else:
                    live.append((seq + (tok,), score))
            best_done = sorted((s for _, s in finished), reverse=True)
            if not live or (len(best_done) >= width and max(s for _, s in live) <= best_done[width - 1]):
                break
    ranked = sorted(enumerate(finished), key=lambda x: (-x[1][1], x[0]))
    result = [seq for _, (seq, _) in ranked]
    if len(result) < width:
        result += [seq[1:] for seq, _ in sorted(live, key=lambda x: -x[1])]
    return result[:width]


@pytest.mark.parametrize("width", [1, 3, 5])
def test_beam_search_matches_its_definition(copy_model, engine, width):
    model, vocab = on_engine(copy_model[0], engine), copy_model[1]
    for src in random_sources(2, 6, len(vocab), 3, 10):
        got = [h.tokens for h in beam_search(model, [src], width, max_len=14)[0].hypotheses]
        assert got == [tuple(s) for s in brute_force_beam(model, src, width, 14)]


def test_uncached_beam_equals_cached_beam(copy_model):
    """The benchmark's no-cache baseline returns the same n-best lists, batched, rows finishing apart."""
    model, vocab = copy_model
    sources = random_sources(5, 12, len(vocab), 2, 25)
    for width in (1, 4):
        cached = beam_search(model, sources, width)
        uncached = beam_search(model, sources, width, cached=False)
        for c, u in zip(cached, uncached):
            assert [h.tokens for h in u.hypotheses] == [h.tokens for h in c.hypotheses]
            assert [h.score for h in u.hypotheses] == pytest.approx([h.score for h in c.hypotheses], abs=1e-4)


def zeroed_then_nan_filled(monkeypatch, run):
    """run() with every new cache slot tensor zeroed, then again with those a cache leaves unzeroed filled with
    NaN, as uninitialized memory may be: (first result, second result, whether any unzeroed slots were made)."""
    from molspec_core import cache as cache_module

    plain = cache_module._fresh_slots
    poisoned: list[tuple[int, ...]] = []

    def nan_filled(like, shape, zeroed):
        new = plain(like, shape, zeroed)
        if not zeroed:
            new.fill_(float("nan"))
            poisoned.append(shape)
        return new

    monkeypatch.setattr(cache_module, "_fresh_slots", lambda like, shape, zeroed: plain(like, shape, True))
    want = run()
    monkeypatch.setattr(cache_module, "_fresh_slots", nan_filled)
    return want, run(), bool(poisoned)


def test_beam_search_reads_no_slot_it_left_uninitialized(engine, monkeypatch):
    """Beam search's cache runs in lockstep (cache.KVCache.lockstep), so the slots it starts with and those a
    reorder allocates are not zeroed. Filled with NaN here, as uninitialized memory may be, they change
    nothing: the same n-best lists and scores to the bit as with zeroed slots, over batches whose queries
    finish apart. A slot read before it was written would turn its row's scores to NaN, as it does on the
    graphs engine, which attends over every slot and so keeps zeroing them (graphs.GraphStep.reads_every_slot)."""
    poisoned = False
    for seed in range(3):
        model = random_model(seed, vocab_size=8, engine=engine)
        sources = random_sources(seed, 12, 8)
        want, got, made = zeroed_then_nan_filled(monkeypatch, lambda: beam_search(model, sources, 4, max_len=20))
        assert [[(h.tokens, h.score) for h in r.hypotheses] for r in got] == \
            [[(h.tokens, h.score) for h in r.hypotheses] for r in want]
        poisoned |= made
    # the uninitialized slots were made and filled with NaN, except where the engine reads every slot
    assert poisoned == (engine != "graphs")


@pytest.mark.parametrize("drafter,draft_len,n_drafts", [("none", 0, 0), ("lookup", 4, 1), ("paper", 3, 4)])
def test_greedy_search_reads_no_slot_it_left_uninitialized(copy_model, engine, drafter, draft_len, n_drafts,
                                                           monkeypatch):
    """On the native engine greedy search's cache starts unzeroed (KVCache.raw_past_lengths): its lean calls read
    no slot past a row's length. Filled with NaN here, as uninitialized memory may be, those slots change nothing:
    the same tokens and scores to the bit as with zeroed slots, plain and speculative, over a batch whose queries
    finish apart; several drafts a call go through torch's attention, which meets masked slots, and decode zeroes
    them first. On the other engines the slots start zeroed, as before."""
    model, vocab = on_engine(copy_model[0], engine), copy_model[1]
    sources = random_sources(11, 12, len(vocab), 1, 30)
    want, got, poisoned = zeroed_then_nan_filled(
        monkeypatch, lambda: greedy(model, sources, factory(drafter, draft_len, n_drafts)))
    assert [(r.hypotheses[0].tokens, r.hypotheses[0].score) for r in got] == \
        [(r.hypotheses[0].tokens, r.hypotheses[0].score) for r in want]
    assert all(r.hypotheses[0].finished for r in want) and len({len(t) for t in tokens(want)}) > 1  # apart
    assert poisoned == (engine == "native")


@pytest.mark.parametrize("width,n_best", [(5, 2), (10, 10), (10, 3)])
def test_pruned_beam_equals_unpruned_beam(engine, width, n_best, monkeypatch):
    """Slots at or below a query's n_best-th finished score go dead (beam.py's floor) and the native
    engine feeds no dead slot: the same n-best lists, scores to the bit, over a batch whose queries
    finish apart, while fewer rows are fed. A small vocabulary makes hypotheses finish early."""
    from molspec_core.native import NativeStep

    fed: list[int] = []
    plain_search = NativeStep.beam_search

    def counted(self, *args):
        run = plain_search(self, *args)
        fed.append(run.rows_fed)
        return run

    monkeypatch.setattr(NativeStep, "beam_search", counted)
    rows = {True: 0, False: 0}
    for seed in range(3):
        model = random_model(seed, vocab_size=7, engine=engine)
        sources = random_sources(seed + 40, 6, 7, 2, 12)
        results = {}
        for prune in (True, False):
            fed.clear()
            results[prune] = beam_search(model, sources, width, n_best, max_len=20, prune=prune)
            rows[prune] += sum(fed)
        for a, b in zip(results[True], results[False]):
            assert [(h.tokens, h.score, h.finished) for h in a.hypotheses] == \
                [(h.tokens, h.score, h.finished) for h in b.hypotheses]
    if engine == "native":
        assert rows[True] < rows[False]  # the floor did drop live slots


def test_native_beam_slots_read_their_querys_memory_in_place(monkeypatch):
    """Session 69: beam search gave each slot its own copy of its query's cross-attention keys and values,
    and copied the kept ones again whenever a query of the batch finished: a call read width times the
    memory. On the native engine the slots now read their query's in place (KVCache.share_memory): one
    row per query for the whole search (which since session 73 runs in C and leaves a finished query's rows
    where they are), and the same n-best lists, scores to the bit, as with a copy per slot."""
    from molspec_core.cache import KVCache
    from molspec_core.native import NativeStep

    seen: list[tuple[int, int, int]] = []  # per search: cross rows held, cache rows, distinct rows read
    plain_search = NativeStep.beam_search

    def watched(self, cache, *args):
        rows = cache.cross_rows
        seen.append((cache.layers[0].cross_keys.shape[0], cache.batch_size,
                     -1 if rows is None else len(set(rows.tolist()))))
        return plain_search(self, cache, *args)

    monkeypatch.setattr(NativeStep, "beam_search", watched)
    for seed in range(3):
        model = random_model(seed, vocab_size=7, engine="native")
        sources = random_sources(seed + 40, 6, 7, 2, 12)
        seen.clear()
        shared = beam_search(model, sources, 5, 2)
        assert seen == [(6, 30, 6)]  # the C search keeps every row in place to the end (session 73)
        with monkeypatch.context() as m:
            m.setattr(KVCache, "share_memory", lambda self, rows: self.reorder(rows))  # a copy per slot
            seen.clear()
            copied = beam_search(model, sources, 5, 2)
            assert seen == [(30, 30, -1)]
        assert [[(h.tokens, h.score, h.finished) for h in r.hypotheses] for r in shared] == \
            [[(h.tokens, h.score, h.finished) for h in r.hypotheses] for r in copied]


@pytest.mark.parametrize("drafter,draft_len,n_drafts", [("none", 0, 0), ("lookup", 4, 1), ("paper", 3, 4)])
def test_native_greedy_leaves_finished_rows_in_place(copy_model, drafter, draft_len, n_drafts, monkeypatch):
    """Session 71: on the native engine a query that finishes leaves its cache row where it is and the calls name
    the active rows (greedy_step's slot_rows) instead of moving every other row's slots down. No call moves a row:
    several drafts a call are fed as copies of the active rows (greedy.verify_as_rows; before, in torch's
    attention, they moved them down first). Each query's tokens and score equal its own search alone, to the bit."""
    from molspec_core.cache import KVCache

    model, vocab = on_engine(copy_model[0], "native"), copy_model[1]
    sources = random_sources(12, 12, len(vocab), 1, 30)
    moves: list[int] = []
    plain_reorder = KVCache.reorder

    def counted(self, rows, *, cross=True):
        if len(rows) < self.batch_size:  # rows leaving the batch
            moves.append(len(rows))
        return plain_reorder(self, rows, cross=cross)

    monkeypatch.setattr(KVCache, "reorder", counted)
    together = greedy(model, sources, factory(drafter, draft_len, n_drafts))
    assert len({len(t) for t in tokens(together)}) > 1  # the queries finished apart
    assert moves == []
    alone = [greedy(model, [source], factory(drafter, draft_len, n_drafts))[0] for source in sources]
    assert tokens(together) == tokens(alone)
    # the C call computes each row alone, several drafts a row too
    assert [r.hypotheses[0].score for r in together] == [r.hypotheses[0].score for r in alone]


def near_twin_model(seed: int, engine: str, token: int = 9, twin: int = 10):
    """A noisy copy model in which `twin` is `token` but on one feature, whose final-norm gain is float16's smallest
    normal: wherever the model writes either, the other's logit is within float32 rounding of it, so a computation
    that rounds otherwise than greedy's own may take the other one."""
    model = copying_model(seed, engine="torch", noise=0.1)
    with torch.no_grad():
        model.embed.weight[twin] = model.embed.weight[token]
        model.embed.weight[twin, 0] += 0.25
        model.decoder_norm.weight[0], model.decoder_norm.bias[0] = 2.0 ** -14, 0.0
    return on_engine(model, engine)


@needs_native
@pytest.mark.parametrize("engine", ["native", "native-int8"])
def test_several_drafts_a_call_on_the_native_engine_are_greedy_to_the_bit_at_near_ties(engine):
    """Several drafts a call (spec-paper, --n-drafts above 1) on the native engine ran in torch's attention, whose
    logits round otherwise than the C step's: where two tokens were within that rounding of each other it took the
    other one, and the answer parted from greedy's (on these models 5 of 60 queries with the paper's drafts, 1 with
    two lookup drafts); under int8 such a call was refused. Each draft is now fed as a row of its own through the C
    step (verify_as_rows): tokens, scores and finished flags are greedy's to the bit."""
    for seed in (1, 2):
        model = near_twin_model(seed, engine)
        sources = random_sources(seed, 30, COPYING_VOCAB, 3, 20)
        plain = greedy(model, sources, factory("none", 0, 0), max_len=25)
        for name, draft_len, n_drafts in (("paper", 4, 3), ("lookup", 5, 2), ("pointer", 6, 3)):
            fast = greedy(model, sources, factory(name, draft_len, n_drafts), max_len=25)
            assert [(r.hypotheses[0].tokens, r.hypotheses[0].score, r.hypotheses[0].finished) for r in fast] == \
                [(r.hypotheses[0].tokens, r.hypotheses[0].score, r.hypotheses[0].finished) for r in plain]
            assert sum(r.stats.draft_tokens_accepted for r in fast) > 0


@needs_native
def test_several_drafts_a_call_copy_rows_within_a_bound(monkeypatch):
    """verify_as_rows copies each row once per draft; past SPLIT_GATHER_BYTES of copies the rows go in several C
    calls (here each alone: a bound of 0), and the answers stay greedy's to the bit."""
    from molspec_core.cache import KVCache
    from molspec_core.decoding import greedy as greedy_module

    model = copying_model(2, engine="native", noise=0.3)
    sources = random_sources(5, 8, COPYING_VOCAB, 3, 20)
    plain = greedy(model, sources, factory("none", 0, 0))
    copied: list[int] = []
    branch_copies = KVCache.branch_copies
    monkeypatch.setattr(KVCache, "branch_copies", lambda cache, rows, extra: copied.append(len(rows)) or
                        branch_copies(cache, rows, extra))
    monkeypatch.setattr(greedy_module, "SPLIT_GATHER_BYTES", 0)
    fast = greedy(model, sources, factory("paper", 3, 4))
    assert [(r.hypotheses[0].tokens, r.hypotheses[0].score) for r in fast] == \
        [(r.hypotheses[0].tokens, r.hypotheses[0].score) for r in plain]
    assert copied and set(copied) == {4}  # one row's four drafts a call


def test_beam_width_one_is_greedy_and_batch_equals_single(copy_model, engine):
    model, vocab = on_engine(copy_model[0], engine), copy_model[1]
    sources = random_sources(9, 20, len(vocab), 2, 25)
    assert [r.hypotheses[0].tokens for r in beam_search(model, sources, 1)] == \
        tokens(greedy(model, sources, factory("none", 0, 0)))
    batched = beam_search(model, sources, 5)
    single = [beam_search(model, [s], 5)[0] for s in sources]
    for b, s in zip(batched, single):
        assert [h.tokens for h in b.hypotheses] == [h.tokens for h in s.hypotheses]
        # Sums of ~20 float32 log-probs, from kernels that differ with and without source padding.
        assert [h.score for h in b.hypotheses] == pytest.approx([h.score for h in s.hypotheses], rel=5e-5, abs=1e-4)
        scores = [h.score for h in b.hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert len(set(h.tokens for h in b.hypotheses)) == len(b.hypotheses)


def test_drafters_propose_valid_source_windows():
    src = [4, 5, 6, 4, 5, 7, 8]
    for (name, draft_len, n_drafts), generated in itertools.product(DRAFTERS, [[BOS_ID], [BOS_ID, 4, 5], [BOS_ID, 9]]):
        for draft in make_drafter(name, src, draft_len, n_drafts).propose(generated, 2):
            assert 0 < len(draft) <= draft_len
            assert draft == list(range(draft[0], draft[0] + len(draft))) and draft[-1] < len(src)


def test_lookup_continues_after_the_longest_matching_suffix():
    src = [4, 5, 6, 9, 4, 5, 7, 8]
    drafter = make_drafter("lookup", src, 3, 2)
    assert drafter.propose([BOS_ID, 6, 9, 4, 5], None) == [[6, 7]]  # "9 4 5" occurs once
    assert drafter.propose([BOS_ID, 4, 5], None) == [[2, 3, 4], [6, 7]]  # "4 5" twice, first first
    pointer = make_drafter("pointer", src, 3, 1)
    assert pointer.propose([BOS_ID, 4, 5], 5) == [[6, 7]]  # attention at position 5 picks the second "4 5"


def test_lookup_starts_match_the_longest_suffix_search():
    """LookupDrafter.starts against the plain definition: before any output, the source's start;
    then the longest k <= max_suffix for which the output's last k tokens occur in the source, and
    the position after each occurrence, in order, dropping those at the source's end (which then
    leaves no draft)."""
    rng = random.Random(7)

    def reference(src, generated, max_suffix):
        if generated == [BOS_ID]:  # nothing written yet: the source's start
            return [0]
        for k in range(min(max_suffix, len(generated)), 0, -1):
            ends = [i + k for i in range(len(src) - k + 1) if src[i:i + k] == list(generated[-k:])]
            if ends:
                return [e for e in ends if e < len(src)]
        return []

    for _ in range(600):
        alphabet = rng.randint(2, 5)  # few symbols: long repeats, so the max_suffix cap matters
        src = [rng.randrange(4, 4 + alphabet) for _ in range(rng.randint(1, 30))]
        generated = [BOS_ID] + [rng.randrange(4, 4 + alphabet) for _ in range(rng.randint(0, 20))]
        drafter = make_drafter("lookup", src, 8, 1)
        drafter.max_suffix = rng.choice([1, 2, 3, 12])
        assert drafter.starts(generated) == reference(src, generated, drafter.max_suffix), (src, generated)
