"""What every decoder shares: the prologue (decoding/batch.py start) and the call recorder (DecodeStats)."""
from __future__ import annotations

from conftest import random_model, random_sources
from molspec_core.decoding.batch import cache_capacity, encode_sources, start, target_budget
from molspec_core.decoding.result import DecodeStats


def test_start_encodes_budgets_and_sizes_the_cache_once():
    model = random_model(3)
    sources = random_sources(3, 3, 14)
    memory, keep, budgets = encode_sources(model, sources, max_len=None)
    assert memory.shape[:2] == keep.shape == (3, max(len(s) for s in sources))
    assert budgets == [target_budget(len(s), model.cfg.max_positions) for s in sources]
    cache, same = start(model, sources, padding=7)
    assert same == budgets and cache.capacity == cache_capacity(max(budgets), 7)
    _, short = start(model, sources, max_len=5, max_positions=40)
    assert short == [5, 5, 5]


def test_record_call_is_the_one_definition_of_a_call():
    stats = DecodeStats()
    stats.record_call(proposed=8, accepted=3, rejected=True, emitted=4)
    stats.record_call()
    assert (stats.model_calls, stats.draft_tokens_proposed, stats.draft_tokens_accepted, stats.draft_rejections,
            stats.tokens_generated) == (2, 8, 3, 1, 5)
    assert stats.acceptance_rate == 3 / 4 and stats.tokens_per_call == 2.5
    assert DecodeStats(model_calls=3, tokens_generated=3).acceptance_rate is None  # no draft: no rate (it read 0.0)
    unrecorded = DecodeStats(rejections_recorded=False)
    unrecorded.record_call(proposed=8, accepted=3)
    assert unrecorded.acceptance_rate is None  # speculative beam search's (it read 1.0)
    stats.add(unrecorded)
    assert stats.acceptance_rate is None and stats.draft_tokens_accepted == 6 and not stats.rejections_recorded


def test_pack_drafts_pads_branches_to_the_longest_draft():
    from molspec_core.decoding.batch import pack_drafts
    from molspec_core.tokenizer import PAD_ID

    tokens, lengths = pack_drafts([7, 8], [[[0, 1, 2], [2]], []], [[10, 11, 12], [20, 21]])
    assert tokens.shape == (2, 2, 4) and lengths.tolist() == [[3, 1], [0, 0]]
    assert tokens[0].tolist() == [[7, 10, 11, 12], [7, 12, PAD_ID, PAD_ID]]
    assert tokens[1, :, 0].tolist() == [8, 8] and (tokens[1, :, 1:] == PAD_ID).all()
