"""The pure pieces of one beam step (decoding/beam.py), which beam search and sbs-exact share."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from molspec_core.decoding import beam, speculative_beam
from molspec_core.decoding.result import Hypothesis


def test_speculative_beam_uses_beam_searchs_own_step():
    """sbs-exact's identity with beam search rests on one implementation, not two copies."""
    assert speculative_beam.best_children is beam.best_children
    assert speculative_beam.can_stop is beam.can_stop
    assert speculative_beam.ranked is beam.ranked
    assert speculative_beam.floor_of is beam.floor_of


def test_best_children_breaks_ties_by_slot_then_token():
    scores = torch.tensor([0.0, -1.0])
    log_probs = torch.log(torch.tensor([[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]]))  # (L=2, V=3)
    top_scores, index = beam.best_children(scores, log_probs, width=4)
    # slot 0: -0.69, -1.39, -1.39; slot 1: -1.0, -inf, -inf
    assert index.tolist() == [0, 3, 1, 2]
    assert torch.allclose(top_scores, torch.tensor([-0.6931, -1.0, -1.3863, -1.3863]), atol=1e-4)
    batched_scores, batched_index = beam.best_children(scores.expand(3, 2), log_probs.expand(3, 2, 3), width=2)
    assert batched_index.tolist() == [[0, 3]] * 3 and batched_scores.shape == (3, 2)


def test_best_children_on_numpy_breaks_ties_the_same_way():
    scores = np.array([0.0, -1.0], dtype=np.float32)
    with np.errstate(divide="ignore"):  # log(0) = -inf: a token the slot cannot take
        log_probs = np.log(np.array([[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]], dtype=np.float32))
    top_scores, index = beam.best_children(scores, log_probs, width=4)
    assert index.tolist() == [0, 3, 1, 2]
    assert np.allclose(top_scores, [-0.6931, -1.0, -1.3863, -1.3863], atol=1e-4)


@pytest.mark.parametrize("seed", range(5))
def test_best_children_numpy_equals_torch(seed):
    """Beam search's NumPy bookkeeping and sbs-exact's tensors pick the same children in the same order,
    with equal scores to the bit: rounded log-probs make many ties, -inf slots are dead ones."""
    gen = torch.Generator().manual_seed(seed)
    queries, slots, vocab, width = 3, 4, 7, 5
    log_probs = torch.log_softmax(torch.randn(queries, slots, vocab, generator=gen), -1).mul(4).round().div(4)
    scores = torch.randn(queries, slots, generator=gen).mul(2).round().div(2)
    scores[0, 2:] = float("-inf")
    expected_scores, expected_index = beam.best_children(scores, log_probs, width)
    got_scores, got_index = beam.best_children(scores.numpy(), log_probs.numpy(), width)
    assert got_index.tolist() == expected_index.tolist()
    assert got_scores.tolist() == expected_scores.tolist()


@pytest.mark.parametrize("seed", range(20))
def test_best_children_of_one_query_on_numpy_equals_torch(seed):
    """One query's NumPy selection (sbs-exact's: it sorts only the candidates at or above the width-th
    best) picks torch's stable sort's children: many ties at the cut, dead slots, every width."""
    gen = torch.Generator().manual_seed(seed)
    slots, vocab = 1 + seed % 5, 6
    log_probs = torch.log_softmax(torch.randn(slots, vocab, generator=gen), -1).mul(2).round().div(2)
    scores = torch.randn(slots, generator=gen).round()
    if seed % 3 == 0:
        scores[-1] = float("-inf")
    for width in range(1, slots * vocab + 2):
        expected_scores, expected_index = beam.best_children(scores, log_probs, width)
        got_scores, got_index = beam.best_children(scores.numpy(), log_probs.numpy(), width)
        assert got_index.tolist() == expected_index.tolist()
        assert got_scores.tolist() == expected_scores.tolist()


def test_can_stop_and_ranked():
    assert beam.can_stop([], float("-inf"), 1)  # nothing live
    assert not beam.can_stop([-1.0], -0.5, 1)  # a live hypothesis may still beat it
    assert beam.can_stop([-1.0, -0.2], -1.5, 2)  # no live score above the 2nd finished one
    assert not beam.can_stop([-1.0], -2.0, 2)  # fewer finished than n_best
    done_a, done_b = Hypothesis((1,), -3.0, (-1,)), Hypothesis((2,), -3.0, (-1,))
    cut = Hypothesis((3, 3), -0.1, (-1, -1), finished=False)
    assert beam.ranked([cut, done_a, done_b], 3) == [done_a, done_b, cut]  # unfinished last, ties in found order
    assert beam.ranked([cut, done_b, done_a], 1) == [done_b]


def test_floor_is_the_n_best_th_finished_score():
    assert beam.floor_of([], 1) == float("-inf")
    assert beam.floor_of([-1.0, -3.0], 3) == float("-inf")  # fewer finished than n_best: nothing is hopeless
    assert beam.floor_of([-3.0, -1.0, -2.0], 2) == -2.0
    assert beam.floor_of([-2.0, -2.0, -5.0], 2) == -2.0  # ties count each time
