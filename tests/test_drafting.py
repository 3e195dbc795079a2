"""The sampling loop's drafter interface (drafting.StepDrafter): copy drafts and the draft model
propose a Draft (tokens, provenance, q) and hear the verdict; the draft model rolls its cache back
to the accepted output, so its next q is the one an uncached decode of that output gives."""
import random

import pytest
import torch

from conftest import random_model
from molspec_core.decoding.batch import pad_sources
from molspec_core.decoding.result import GENERATED
from molspec_core.decoding.verify import adjust_probs
from molspec_core.drafting import CopyDrafts, ModelDrafter, make_drafter
from molspec_core.methods import SamplingOptions
from molspec_core.tokenizer import BOS_ID, PAD_ID


def uncached_q(model, src, output, options) -> torch.Tensor:
    """q for the token after `output`, from a full decode of bos + output (no cache)."""
    src_t = pad_sources([src])
    logits = model.decode_full(torch.tensor([[BOS_ID, *output]]), model.encode(src_t), src_t != PAD_ID)
    return adjust_probs(logits[0, -1], options.temperature, options.top_k)


def test_a_copy_draft_is_the_first_window_cut_to_the_room():
    src = [4, 5, 6, 4, 5, 7, 8]
    drafter = CopyDrafts(make_drafter("lookup", src, 3, 2), src)
    draft = drafter.draft([BOS_ID, 4, 5], None, room=2)  # windows [2, 3, 4] and [5, 6]
    assert (draft.tokens, draft.origin, draft.probs) == ((6, 4), (2, 3), None)
    torch.testing.assert_close(draft.draft_probs(10), torch.eye(10)[[6, 4]])  # a point mass on each copy
    drafter.accept(draft, 1, 9)  # stateless: the same output gets the same draft
    assert drafter.draft([BOS_ID, 4, 5], None, room=2) == draft
    assert drafter.draft([BOS_ID, 4, 5], None, room=0).tokens == ()


@torch.inference_mode()
def test_the_draft_model_proposes_its_own_samples_and_rolls_back_to_the_accepted_output():
    model, src = random_model(3, vocab_size=12), [5, 6, 7, 8, 9]
    options = SamplingOptions(temperature=1.3, top_k=6, draft_len=4)
    drafter = ModelDrafter(model, src, None, model.cfg.max_positions, options, torch.Generator().manual_seed(0))
    # (room, n_accepted) per step: no room (nothing fed), all accepted (the last draft token was never
    # fed, so it waits), none or some accepted (the cache rolls back), room past draft_len (capped).
    steps = [(0, 0), (4, 4), (0, 0), (2, 0), (9, 2), (1, 1), (4, 0), (3, 3), (0, 0), (9, 4), (2, 1)]
    rng = random.Random(0)
    output: list[int] = []  # what the target kept so far
    for step, (room, n_accepted) in enumerate(steps):
        draft = drafter.draft([BOS_ID, *output], None, room)
        depth = min(room, options.draft_len)
        assert len(draft.tokens) == depth and draft.origin == (GENERATED,) * depth
        if depth:
            assert draft.probs.shape == (depth, 12)
            # Each q is the draft model's on the output plus the draft so far: the cache was in step.
            for i in range(depth):
                torch.testing.assert_close(draft.probs[i], uncached_q(model, src, output + list(draft.tokens[:i]),
                                                                      options), atol=1e-5, rtol=1e-4)
            assert all(draft.probs[i, t] > 0 for i, t in enumerate(draft.tokens))  # sampled from q
        else:
            assert draft.probs is None
        next_token = rng.randrange(4, 12)
        drafter.accept(draft, n_accepted, next_token)
        output += [*draft.tokens[:n_accepted], next_token]
        # The cache holds bos and the output but for the tokens still pending, which close it.
        assert int(drafter.cache.lengths[0]) + len(drafter.pending) == 1 + len(output), step
        assert drafter.pending == [BOS_ID, *output][-len(drafter.pending):], step


def test_a_drafter_with_no_drafts_or_a_negative_length_is_refused():
    """make_drafter("paper", src, 10, 0) failed on a ZeroDivisionError (its windows' spacing divides by n_drafts);
    the lookup drafter took it and never drafted. "none" drafts nothing, whatever the numbers."""
    src = [5, 6, 7, 8]
    for name in ("paper", "lookup", "pointer"):
        for draft_len, n_drafts in ((10, 0), (-1, 1)):
            with pytest.raises(ValueError, match=f"the {name} drafter needs draft_len 0 or more and n_drafts 1"):
                make_drafter(name, src, draft_len, n_drafts)
        assert make_drafter(name, src, 0, 1).propose([BOS_ID], None) in ([], [[]])
    assert make_drafter("none", src, 0, 0).propose([BOS_ID], None) == []
