"""The CUDA-graph engine (graphs.py). Its fixed-shape call runs eagerly on a CPU: the exactness tests
of every decoder take it as engine "graphs" (conftest.engine); here, what a capture needs (no
device reads), the banks' ownership of cache slots, the cross-attention weights, and on a GPU the
capture itself."""
import pytest
import torch

from conftest import count_device_reads, random_model, random_sources
from molspec_core.graphs import GraphStep, _rows, _steps
from molspec_core.service import Predictor
from molspec_core.tokenizer import BOS_ID, PAD_ID


def caches(model, batches, seed=0):
    """One fresh cache per batch size, over random padded sources."""
    out = []
    for i, batch in enumerate(batches):
        torch.manual_seed(seed + i)
        src = torch.randint(4, 14, (batch, 7 + 3 * i))
        src[0, -2:] = PAD_ID
        with torch.inference_mode():
            out.append(model.new_cache(model.encode(src), src != PAD_ID, capacity=40 + 10 * i))
    return out


def step_tokens(batch, t_new, seed):
    torch.manual_seed(seed)
    tokens = torch.randint(4, 14, (batch, 1, t_new))
    tokens[:, 0, 0] = BOS_ID
    return tokens


@torch.inference_mode()
def test_interleaved_caches_keep_their_own_slots():
    """Two caches in one bank (3 and 4 rows both take a 4-row bank) and one in another, decoded in
    turns of 1-3 tokens (3 padded to 4): every call's logits and cross-attention equal the torch engine's on the same
    sequence of calls, so a cache the bank was taken from got its slots back intact."""
    plain, graphed = random_model(5), random_model(5)
    graphed.use_cuda_graphs(capture=False)
    assert _rows(3) == _rows(4) == 4 and _rows(1) == 1
    assert [_steps(n) for n in (1, 2, 3, 5, 17, 32, 33)] == [1, 2, 4, 8, 32, 32, 33]  # 3 tokens run padded to 4
    pairs = list(zip(caches(plain, [3, 4, 1]), caches(graphed, [3, 4, 1])))
    for turn in range(9):
        reference, cache = pairs[turn % 3]
        tokens = step_tokens(reference.batch_size, 1 + turn % 3, turn)
        want, want_weights = plain.decode(tokens, reference, cross_attention=True)
        got, got_weights = graphed.decode(tokens, cache, cross_attention=True)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got_weights, want_weights, atol=1e-6, rtol=1e-5)
        keep = torch.arange(reference.batch_size) % 2 + 1  # rows keep different numbers of tokens
        reference.commit(keep)
        cache.commit(keep)
    step = graphed.numpy_step
    assert isinstance(step, GraphStep) and len(step.banks) == 2


@torch.inference_mode()
def test_a_reordered_cache_never_writes_into_a_bank_it_lost():
    """A beam step's reorder keeps the old slot tensor as its spare for the next one; when that is
    the bank's memory and another cache has taken the bank since, the reorder must not write there.
    (float64: on a CPU float32 rows move in place, with no spare; a GPU's reorder takes the spare.)"""
    plain, graphed = random_model(6).double(), random_model(6).double()
    graphed.use_cuda_graphs(capture=False)
    (ref_a, ref_b), (a, b) = caches(plain, [3, 4]), caches(graphed, [3, 4])
    perm = torch.tensor([2, 0, 0])
    for turn, (reference, cache) in enumerate([(ref_a, a), (ref_a, a), (ref_b, b), (ref_a, a), (ref_b, b)]):
        tokens = step_tokens(reference.batch_size, 2, turn)
        torch.testing.assert_close(graphed.decode(tokens, cache)[0], plain.decode(tokens, reference)[0],
                                   atol=1e-5, rtol=1e-5)
        keep = torch.full((reference.batch_size,), 2)
        reference.commit(keep)
        cache.commit(keep)
        if reference is ref_a:  # a beam step's row moves, into the spare from the second one on
            reference.reorder(perm, cross=False)
            cache.reorder(perm, cross=False)


@torch.inference_mode()
def test_a_call_reads_nothing_back_from_the_device(monkeypatch):
    """A CUDA graph cannot record a read of a device value (.item(), int(), bool()...), and the
    host would wait on one: the graphs engine's call makes none, in its own code or the model's."""
    model = random_model(2)
    model.use_cuda_graphs(capture=False)
    cache = caches(model, [3])[0]
    tokens = step_tokens(3, 2, 0)
    where = model._in_place(cache, 1, 2, masked=False)
    model.numpy_step(tokens, cache, where, True)  # the first call makes the bank and its graph
    cache.commit(torch.tensor([2, 1, 2]))
    where = model._in_place(cache, 1, 2, masked=False)
    reads = count_device_reads(monkeypatch)
    model.numpy_step(tokens, cache, where, True)
    assert reads == []
    cache.max_length()  # the counter sees a read where there is one
    assert reads


def test_greedy_on_the_graphs_engine_equals_the_torch_engine_on_many_batch_sizes():
    """Batches of 1-9 rows, which finish at different steps, through banks of 1, 2, 4, 8 and 16 rows."""
    from molspec_core.decoding.greedy import greedy
    from molspec_core.drafting import make_drafter

    plain, graphed = random_model(3, vocab_size=8), random_model(3, vocab_size=8)
    graphed.use_cuda_graphs(capture=False)

    def lookup(src):
        return make_drafter("lookup", src, 4, 2)
    for batch in range(1, 10):
        sources = random_sources(batch, batch, 8)
        want = [r.hypotheses[0].tokens for r in greedy(plain, sources, lookup, max_len=20)]
        assert [r.hypotheses[0].tokens for r in greedy(graphed, sources, lookup, max_len=20)] == want


def test_beam_and_sbs_exact_on_the_gpu_reorder_path():
    """In float64 a CPU cache reorders rows as on a GPU (into a new tensor or its spare, not in place),
    so beam search moves every cache between bank views and spares each step."""
    from molspec_core.decoding.beam import beam_search
    from molspec_core.decoding.speculative_beam import speculative_beam
    from molspec_core.drafting import make_drafter

    def pointer(src):
        return make_drafter("pointer", src, 6, 1)

    plain, graphed = random_model(1, vocab_size=8).double(), random_model(1, vocab_size=8).double()
    graphed.use_cuda_graphs(capture=False)
    sources = random_sources(1, 8, 8)
    want = [[h.tokens for h in r.hypotheses] for r in beam_search(plain, sources, 4, max_len=20)]
    assert [[h.tokens for h in r.hypotheses] for r in beam_search(graphed, sources, 4, max_len=20)] == want
    exact = speculative_beam(graphed, sources, 4, pointer, exact=True, max_len=20)
    assert [[h.tokens for h in r.hypotheses] for r in exact] == want


def test_the_least_recently_used_bank_goes_with_its_graphs(monkeypatch):
    """Beyond MAX_BANKS the oldest bank is dropped; a cache that held it keeps its slots and decodes
    on, in a new bank, as the torch engine does."""
    monkeypatch.setattr("molspec_core.graphs.MAX_BANKS", 2)
    plain, graphed = random_model(7), random_model(7)
    graphed.use_cuda_graphs(capture=False)
    pairs = list(zip(caches(plain, [1, 2, 3]), caches(graphed, [1, 2, 3])))  # three banks: 1, 2 and 4 rows
    step = graphed.numpy_step
    with torch.inference_mode():
        for turn in range(6):
            reference, cache = pairs[turn % 3]
            tokens = step_tokens(reference.batch_size, 1, turn)
            torch.testing.assert_close(graphed.decode(tokens, cache)[0], plain.decode(tokens, reference)[0],
                                       atol=1e-5, rtol=1e-5)
            reference.commit(torch.ones(reference.batch_size, dtype=torch.long))
            cache.commit(torch.ones(reference.batch_size, dtype=torch.long))
            assert len(step.banks) <= 2 and {k[:3] for k in step.graphs} <= set(step.banks)
    assert [k[0] for k in step.banks] == [2, 4]  # the 1-row bank, used least recently, went


def test_the_engine_needs_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        random_model(0).use_cuda_graphs()
    with pytest.raises(ValueError, match="CUDA only"):
        Predictor.load("retro", "cpu", engine="graphs")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs are captured on a GPU only")
def test_captured_graphs_decode_as_the_eager_torch_engine():
    from molspec_core.decoding.beam import beam_search
    from molspec_core.decoding.greedy import greedy
    from molspec_core.drafting import make_drafter

    plain, graphed = random_model(4).cuda(), random_model(4).cuda()
    graphed.use_cuda_graphs()
    sources = random_sources(4, 12, 14)

    def pointer(src):
        return make_drafter("pointer", src, 6, 1)
    assert [r.hypotheses[0].tokens for r in greedy(graphed, sources, pointer, max_len=25)] == \
        [r.hypotheses[0].tokens for r in greedy(plain, sources, pointer, max_len=25)]
    assert [[h.tokens for h in r.hypotheses] for r in beam_search(graphed, sources[:4], 5, max_len=25)] == \
        [[h.tokens for h in r.hypotheses] for r in beam_search(plain, sources[:4], 5, max_len=25)]
    assert all(g.graph is not None for g in graphed.numpy_step.graphs.values())
