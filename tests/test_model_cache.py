"""The KV cache: cached decoding equals the uncached model, for single tokens, multi-token appends,
shared-prefix branches, rollback and reorder."""
import pytest
import torch

from conftest import random_model
from molspec_core.cache import KVCache
from molspec_core.tokenizer import BOS_ID, PAD_ID


def setup(seed=0, batch=3):
    model = random_model(seed)
    torch.manual_seed(seed + 100)
    src = torch.randint(4, 14, (batch, 9))
    src[1, 6:] = PAD_ID  # a padded row
    tgt = torch.randint(4, 14, (batch, 12))
    tgt[:, 0] = BOS_ID
    with torch.no_grad():
        reference = model(src, tgt)  # (B, T, V) uncached, teacher forced
        memory = model.encode(src)
    cache = model.new_cache(memory, src != PAD_ID, capacity=32)
    return model, src, tgt, reference, cache


@pytest.mark.parametrize("lean", [True, False])
@torch.no_grad()
def test_one_token_at_a_time_matches_uncached(lean):
    model, _, tgt, reference, cache = setup()
    for t in range(tgt.shape[1]):
        logits, _ = model.decode(tgt[:, None, t:t + 1], cache, lean=lean)
        cache.commit(torch.ones(3, dtype=torch.long))
        torch.testing.assert_close(logits[:, 0, 0], reference[:, t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("lean", [True, False])
@torch.no_grad()
def test_append_several_tokens_in_one_call(lean):
    model, _, tgt, reference, cache = setup(1)
    logits, _ = model.decode(tgt[:, None, :5], cache, lean=lean)
    cache.commit(torch.full((3,), 5))
    torch.testing.assert_close(logits[:, 0], reference[:, :5], atol=1e-5, rtol=1e-5)
    logits, _ = model.decode(tgt[:, None, 5:], cache, lean=lean)
    torch.testing.assert_close(logits[:, 0], reference[:, 5:], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_branches_share_the_prefix_and_commit_the_chosen_one():
    model, _, tgt, reference, cache = setup(2)
    model.decode(tgt[:, None, :4], cache)
    cache.commit(torch.full((3,), 4))
    branches = torch.randint(4, 14, (3, 5, 3))
    chosen = torch.tensor([4, 0, 2])
    branches[torch.arange(3), chosen] = tgt[:, 4:7]
    logits, _ = model.decode(branches, cache)
    torch.testing.assert_close(logits[torch.arange(3), chosen], reference[:, 4:7], atol=1e-5, rtol=1e-5)
    # keep only 2 of the 3 tokens: the third slot is written but masked (rollback by length)
    cache.commit(torch.full((3,), 2), chosen)
    logits, _ = model.decode(tgt[:, None, 6:], cache)
    torch.testing.assert_close(logits[:, 0], reference[:, 6:], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_lean_call_equals_the_general_one():
    """A single-branch call on rows of equal length takes the lean path (keys written into their
    slots at once, commit only counts them). Through partial commits, a call whose tokens are all
    dropped, and cross-attention weights, it gives what the general path gives, and leaves the
    same prefix in the cache."""
    model, _, tgt, _, lean_cache = setup(7)
    _, _, _, _, general_cache = setup(7)
    steps = [(0, 5, 3), (3, 7, 0), (3, 7, 4), (7, 8, 1)]  # (from, to, tokens kept) of tgt per call
    for first, last, keep in steps:
        lean, lean_w = model.decode(tgt[:, None, first:last], lean_cache, cross_attention=True)
        assert lean_cache.written_in_place
        general, general_w = model.decode(tgt[:, None, first:last], general_cache, cross_attention=True,
                                          lean=False)
        assert not general_cache.written_in_place
        torch.testing.assert_close(lean, general, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lean_w, general_w, atol=1e-6, rtol=1e-5)
        for cache in (lean_cache, general_cache):
            cache.commit(torch.full((3,), keep))
    assert lean_cache.lengths.tolist() == general_cache.lengths.tolist() == [8, 8, 8]
    for lean_layer, general_layer in zip(lean_cache.layers, general_cache.layers):
        torch.testing.assert_close(lean_layer.keys[:, :, :8], general_layer.keys[:, :, :8], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lean_layer.values[:, :, :8], general_layer.values[:, :, :8], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_lean_call_on_rows_of_different_lengths_equals_the_general_one():
    """Rows at their own lengths (speculative beam search's hypotheses): each row's new keys go to
    its own slots and attend to its own prefix only."""
    model, _, tgt, reference, lean_cache = setup(8)
    _, _, _, _, general_cache = setup(8)
    for cache, lean in ((lean_cache, True), (general_cache, False)):
        model.decode(tgt[:, None, :4], cache, lean=lean)
        cache.commit(torch.tensor([4, 2, 3]))
    assert lean_cache.uniform_length() is None
    feed = torch.stack([tgt[0, 4:7], tgt[1, 2:5], tgt[2, 3:6]])[:, None]  # each row's next 3 tokens
    lean, lean_w = model.decode(feed, lean_cache, cross_attention=True)
    assert lean_cache.written_in_place
    general, general_w = model.decode(feed, general_cache, cross_attention=True, lean=False)
    torch.testing.assert_close(lean, general, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lean_w, general_w, atol=1e-6, rtol=1e-5)
    for row, start in enumerate([4, 2, 3]):
        torch.testing.assert_close(lean[row, 0], reference[row, start:start + 3], atol=1e-5, rtol=1e-5)
    for cache in (lean_cache, general_cache):
        cache.commit(torch.tensor([3, 0, 2]))  # row 1 keeps none of its tokens
    assert lean_cache.lengths.tolist() == general_cache.lengths.tolist() == [7, 2, 5]
    feed = torch.stack([tgt[0, 7:8], tgt[1, 2:3], tgt[2, 5:6]])[:, None]
    lean, _ = model.decode(feed, lean_cache)
    general, _ = model.decode(feed, general_cache, lean=False)
    torch.testing.assert_close(lean, general, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_calls_with_several_branches_take_the_general_path():
    model, _, tgt, _, cache = setup(9)
    model.decode(tgt[:, None, :3], cache)
    cache.commit(torch.tensor([3, 3, 3]))
    model.decode(tgt[:, None, 3:4].expand(3, 2, 1), cache)  # two branches share each row's prefix
    assert not cache.written_in_place


@torch.no_grad()
def test_rollback_then_refeed():
    model, _, tgt, reference, cache = setup(3)
    wrong = torch.randint(4, 14, (3, 1, 6))
    model.decode(tgt[:, None, :3], cache)
    cache.commit(torch.full((3,), 3))
    model.decode(wrong, cache)
    cache.commit(torch.full((3,), 6))
    cache.rollback(torch.tensor([3, 3, 3]))
    logits, _ = model.decode(tgt[:, None, 3:], cache)
    torch.testing.assert_close(logits[:, 0], reference[:, 3:], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_reorder_rows_moves_prefix_and_memory():
    model, _, tgt, reference, cache = setup(4)
    model.decode(tgt[:, None, :4], cache)
    cache.commit(torch.full((3,), 4))
    order = torch.tensor([2, 0, 0])
    cache.reorder(order)
    logits, _ = model.decode(tgt[order][:, None, 4:], cache)
    torch.testing.assert_close(logits[:, 0], reference[order][:, 4:], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_rows_that_share_their_memory_keep_it_in_place_and_only_the_native_engine_reads_them():
    """KVCache.share_memory (beam and greedy search on the native engine): reorders move the rows' pointers
    into the memory (cross_rows), never the memory; the native engine decodes such a cache as one whose
    rows hold copies, and the torch engine, which cannot read the pointers, gives the rows copies first
    (KVCache.own_memory) and decodes the same."""
    from conftest import on_engine

    model, _, tgt, reference, cache = setup(4)
    native = on_engine(model, "native")
    cache.share_memory(torch.tensor([2, 0, 0, 1]))  # 4 rows over the 3 queries' memory, as beam slots
    keys = cache.layers[0].cross_keys
    cache.reorder(torch.tensor([0, 1, 3]))  # a row leaves: the memory stays
    assert cache.layers[0].cross_keys is keys and cache.cross_rows.tolist() == [2, 0, 1]
    order = torch.tensor([2, 0, 1])
    logits, _ = native.decode(tgt[order][:, None, :4], cache)
    torch.testing.assert_close(logits[:, 0], reference[order][:, :4], atol=1e-5, rtol=1e-5)
    cache.commit(torch.full((3,), 4))
    logits, _ = model.decode(tgt[order][:, None, 4:6], cache)  # torch: copies first
    assert cache.cross_rows is None and cache.layers[0].cross_keys.shape[0] == 3
    torch.testing.assert_close(logits[:, 0], reference[order][:, 4:6], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_dropping_finished_rows_moves_the_rest_down_in_the_same_memory():
    """Queries leaving a batch (beam and greedy search drop finished rows): on CPU the kept rows move
    down in the slots' own memory, which stay one contiguous tensor; decoding goes on as before."""
    model, _, tgt, reference, cache = setup(5, batch=4)
    model.decode(tgt[:, None, :4], cache)
    cache.commit(torch.full((4,), 4))
    start = cache.slots.data_ptr()
    for kept, original in (([0, 2, 3], [0, 2, 3]), ([1, 2], [2, 3]), ([], [])):
        cache.reorder(torch.tensor(kept, dtype=torch.long))
        assert cache.slots.is_contiguous() and (not kept or cache.slots.data_ptr() == start)  # empty: pointer 0
        assert cache.slots.shape[1] == len(kept) == cache.batch_size
        assert all(layer.keys.data_ptr() == cache.slots[2 * i].data_ptr() for i, layer in enumerate(cache.layers))
        if original:
            logits, _ = model.decode(tgt[original][:, None, 4:7], cache)
            torch.testing.assert_close(logits[:, 0], reference[original][:, 4:7], atol=1e-5, rtol=1e-5)
            cache.rollback(torch.full((len(kept),), 4))


@torch.no_grad()
def test_reorders_of_the_same_batch_allocate_nothing_and_stay_right():
    """Beam search reorders every step: on CPU the rows that move are copied in place, and nothing is
    allocated (the same slot tensors stay); elsewhere a reorder writes into the slots the previous one
    replaced (tests/test_model_cache.py's bfloat16 case runs that path on CPU)."""
    model, _, tgt, reference, cache = setup(4)
    order = torch.arange(3)
    for step, perm in enumerate(([2, 0, 1], [1, 1, 0], [0, 1, 2], [0, 2, 1])):
        model.decode(tgt[order][:, None, step:step + 1], cache)
        cache.commit(torch.ones(3, dtype=torch.long))
        before = [layer.keys for layer in cache.layers]
        cache.reorder(torch.tensor(perm))
        order = order[perm]
        assert all(layer.keys is old for layer, old in zip(cache.layers, before))
    logits, _ = model.decode(tgt[order][:, None, 4:7], cache)
    torch.testing.assert_close(logits[:, 0], reference[order][:, 4:7], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_reorders_off_the_numpy_path_reuse_spare_slots():
    cache = KVCache.empty(2, 3, 2, 3, 10, torch.device("cpu"), torch.bfloat16)  # torch's copy, as on a GPU
    for layer in cache.layers:
        layer.keys.copy_(torch.randn(layer.keys.shape))
    cache.lengths = torch.tensor([4, 4, 4])
    reference = [layer.keys.clone() for layer in cache.layers]
    order = torch.arange(3)
    first = cache.slots.data_ptr()
    for perm, reused in (([2, 0, 1], False), ([1, 1, 0], True)):  # the second writes into the first's spare
        cache.reorder(torch.tensor(perm), cross=False)
        order = order[perm]
        assert (cache.slots.data_ptr() == first) == reused
        assert all(layer.keys.data_ptr() == cache.slots[2 * i].data_ptr() for i, layer in enumerate(cache.layers))
    for layer, keys in zip(cache.layers, reference):
        assert torch.equal(layer.keys[:, :, :4], keys[order, :, :4])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # NumPy's copy; torch's (as on a GPU)
def test_reorder_copies_the_used_slots_of_the_chosen_rows(dtype):
    cache = KVCache.empty(2, 4, 2, 3, 10, torch.device("cpu"), dtype)
    for layer in cache.layers:
        layer.keys.copy_(torch.randn(layer.keys.shape))
        layer.values.copy_(torch.randn(layer.values.shape))
    cache.lengths = torch.tensor([5, 6, 2, 4])
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    rows = torch.tensor([3, 3, 0, 1])
    cache.reorder(rows, cross=False)
    for layer, (keys, values) in zip(cache.layers, before):
        assert torch.equal(layer.keys[:, :, :6], keys[rows, :, :6])
        assert torch.equal(layer.values[:, :, :6], values[rows, :, :6])
    assert cache.lengths.tolist() == [4, 4, 5, 6]


@torch.no_grad()
def test_cross_attention_weights_are_a_distribution_over_real_source_tokens():
    model, src, tgt, _, cache = setup(5)
    _, weights = model.decode(tgt[:, None, :2], cache, cross_attention=True)
    assert weights.shape == (3, 1, 2, src.shape[1])
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 1, 2))
    assert float(weights[1, 0, :, 6:].abs().max()) == 0.0  # padding gets no attention


@torch.no_grad()
def test_reorder_leaves_no_garbage_in_slots():
    """Slots are read up to the longest row and masked per row; a masked slot still meets the
    values matmul with weight 0, so it must hold finite numbers. Poison the unused region, reorder,
    and every row must still match the uncached reference."""
    model, _, tgt, reference, cache = setup(6)
    model.decode(tgt[:, None, :4], cache)
    cache.commit(torch.tensor([4, 4, 4]))
    for layer in cache.layers:
        layer.keys[:, :, 4:] = float("nan")
        layer.values[:, :, 4:] = float("nan")
    cache.rollback(torch.tensor([4, 2, 4]))
    cache.reorder(torch.tensor([1, 0, 2, 2]))  # a new batch size: new slot tensors
    for layer in cache.layers:
        assert torch.isfinite(layer.keys).all() and torch.isfinite(layer.values).all()
    logits, _ = model.decode(tgt[[1]][:, None, 2:4].expand(4, 1, 2), cache)  # row 0 (old 1) refeeds 2 tokens
    torch.testing.assert_close(logits[0, 0], reference[1, 2:4], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_row_pool_feeds_a_subset_of_rows_at_their_own_lengths():
    """Rows of one query at different lengths, fed a few at a time through gather/write, and a row
    copied to branch a hypothesis: every logit equals the uncached model's."""
    from molspec_core.cache import RowPool

    model = random_model(4)
    torch.manual_seed(104)
    src = torch.randint(4, 14, (1, 9))
    targets = torch.randint(4, 14, (3, 12))
    targets[:, 0] = BOS_ID
    targets[2, :5] = targets[0, :5]  # row 2 branches off row 0 after 5 tokens
    reference = model(src.expand(3, -1), targets)
    pool = RowPool(model.new_cache(model.encode(src), src != PAD_ID, capacity=32), rows=2)
    pool.add_rows(1)  # grows without disturbing rows already there
    fed = [0, 0, 0]

    def feed(rows: list[int], counts: list[int], branch_rows: list[int] | None = None) -> None:
        starts = torch.tensor([fed[r] for r in rows])
        width = max(counts)
        tokens = torch.full((len(rows), 2, width), PAD_ID, dtype=torch.long)
        chosen = torch.tensor(branch_rows or [0] * len(rows))
        for i, (r, n) in enumerate(zip(rows, counts)):
            tokens[i, :, :n] = torch.randint(4, 14, (2, n))  # a decoy branch beside the real one
            tokens[i, chosen[i], :n] = targets[r, fed[r]:fed[r] + n]
        cache = pool.gather(torch.tensor(rows), starts, width)
        logits, _ = model.decode(tokens, cache)
        for i, (r, n) in enumerate(zip(rows, counts)):
            torch.testing.assert_close(logits[i, chosen[i], :n], reference[r, fed[r]:fed[r] + n], atol=1e-5, rtol=1e-5)
        pool.write(torch.tensor(rows), cache, chosen)
        for r, n in zip(rows, counts):
            fed[r] += n

    feed([0], [3])
    feed([1, 0], [4, 2], branch_rows=[1, 0])
    pool.copy_row(0, 2, 5)
    fed[2] = 5
    feed([2, 1], [3, 1], branch_rows=[0, 1])
    feed([0, 2, 1], [4, 4, 7])


def test_branch_copies_and_keep_branches_move_only_the_chosen_branchs_new_slots():
    """KVCache.branch_copies gives each named row a copy of its slots (a row named twice, two copies), reading the
    cache's memory in place; keep_branches writes back only the slots that the chosen copy wrote past its row's
    length, and its new length: the other rows and the slots before the lengths are untouched."""
    cache = KVCache.empty(2, 3, 2, 4, capacity=10, device=torch.device("cpu"), dtype=torch.float32)
    cache.slots.copy_(torch.randn(cache.slots.shape))
    cache.lengths = torch.tensor([3, 5, 2])
    cache.cross_rows = torch.tensor([2, 1, 0])
    before = cache.slots.clone()
    rows = torch.tensor([1, 1, 2])
    copies = cache.branch_copies(rows, extra=3)
    assert copies.capacity == 5 + 3 and copies.lengths.tolist() == [5, 5, 2]
    assert copies.cross_rows.tolist() == [1, 1, 0]  # the memory each row reads stays its own
    assert torch.equal(copies.slots[:, 0], before[:, 1, :, :8]) and torch.equal(copies.slots[:, 1], before[:, 1, :, :8])
    assert torch.equal(copies.slots[:, 2], before[:, 2, :, :8])
    copies.slots[:, :, :, 5:] = 7.0  # what a call of 3 tokens writes past the rows' lengths (row 2's from slot 2 on)
    copies.slots[:, 2, :, 2:5] = 9.0
    copies.lengths = torch.tensor([7, 6, 4])  # the first copy kept 2 tokens, the second 1, the third 2
    cache.keep_branches(torch.tensor([1, 2]), copies, torch.tensor([1, 2]))
    assert cache.lengths.tolist() == [3, 6, 4]
    assert torch.equal(cache.slots[:, 1, :, 5], torch.full_like(cache.slots[:, 1, :, 5], 7.0))
    assert torch.equal(cache.slots[:, 2, :, 2:4], torch.full_like(cache.slots[:, 2, :, 2:4], 9.0))
    assert torch.equal(cache.slots[:, 1, :, :5], before[:, 1, :, :5]) and torch.equal(cache.slots[:, 0], before[:, 0])
    assert torch.equal(cache.slots[:, 2, :, :2], before[:, 2, :, :2])
    assert torch.equal(cache.slots[:, 1, :, 7:], before[:, 1, :, 7:])  # past what any copy could write
