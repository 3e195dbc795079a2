"""The KV cache: cached decoding equals the uncached model, for single tokens, multi-token appends,
shared-prefix branches, rollback and reorder."""
import torch

from conftest import random_model
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


@torch.no_grad()
def test_one_token_at_a_time_matches_uncached():
    model, _, tgt, reference, cache = setup()
    for t in range(tgt.shape[1]):
        logits, _ = model.decode(tgt[:, None, t:t + 1], cache)
        cache.commit(torch.ones(3, dtype=torch.long))
        torch.testing.assert_close(logits[:, 0, 0], reference[:, t], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_append_several_tokens_in_one_call():
    model, _, tgt, reference, cache = setup(1)
    logits, _ = model.decode(tgt[:, None, :5], cache)
    cache.commit(torch.full((3,), 5))
    torch.testing.assert_close(logits[:, 0], reference[:, :5], atol=1e-5, rtol=1e-5)
    logits, _ = model.decode(tgt[:, None, 5:], cache)
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
    cache.reorder(torch.tensor([1, 0, 2]))
    for layer in cache.layers:
        assert torch.isfinite(layer.keys).all() and torch.isfinite(layer.values).all()
    logits, _ = model.decode(tgt[[1]][:, None, 2:4].expand(3, 1, 2), cache)  # row 0 (old 1) refeeds 2 tokens
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
