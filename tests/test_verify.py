"""Acceptance rule on hand-made argmax tensors (no model)."""
import random

import torch

from molspec_core.decoding.verify import accept_greedy, accept_greedy_lists


def test_longest_matching_prefix_and_best_branch():
    drafts = torch.tensor([[[5, 6, 7], [5, 9, 7], [8, 8, 8]]])  # (B=1, N=3, D=3)
    lengths = torch.tensor([[3, 3, 3]])
    argmax = torch.tensor([[[5, 6, 1, 4], [5, 9, 7, 2], [1, 1, 1, 1]]])  # (1, 3, 4)
    n_accepted, branch = accept_greedy(drafts, lengths, argmax)
    assert n_accepted.tolist() == [3] and branch.tolist() == [1]


def test_draft_lengths_cap_acceptance_and_ties_go_to_first_branch():
    drafts = torch.tensor([[[5, 6, 0], [5, 6, 7]], [[3, 3, 3], [4, 4, 4]]])
    lengths = torch.tensor([[2, 2], [3, 3]])
    argmax = torch.tensor([[[5, 6, 0, 1], [5, 6, 7, 1]], [[9, 9, 9, 9], [9, 9, 9, 9]]])
    n_accepted, branch = accept_greedy(drafts, lengths, argmax)
    assert n_accepted.tolist() == [2, 0]
    assert branch.tolist() == [0, 0]


def test_a_mismatch_stops_acceptance_even_if_later_tokens_match():
    drafts = torch.tensor([[[5, 6, 7]]])
    argmax = torch.tensor([[[5, 0, 7, 1]]])
    n_accepted, _ = accept_greedy(drafts, torch.tensor([[3]]), argmax)
    assert n_accepted.tolist() == [1]


def test_no_drafts():
    n_accepted, branch = accept_greedy(torch.zeros(2, 1, 0, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long),
                                       torch.zeros(2, 1, 1, dtype=torch.long))
    assert n_accepted.tolist() == [0, 0] and branch.tolist() == [0, 0]


def test_the_list_rule_equals_the_tensor_rule():
    """accept_greedy_lists (greedy's CPU path) decides as accept_greedy on random drafts: ragged
    lengths, rows without drafts, ties between branches."""
    rng = random.Random(3)
    for _ in range(300):
        rows, branches, depth = rng.randint(1, 4), rng.randint(1, 3), rng.randint(0, 5)
        drafts = [[[rng.randrange(3) for _ in range(rng.randint(1, depth))] for _ in range(rng.randint(0, branches))]
                  if depth else [] for _ in range(rows)]
        argmax = [[[rng.randrange(3) for _ in range(depth + 1)] for _ in range(branches)] for _ in range(rows)]
        padded = torch.zeros(rows, branches, depth, dtype=torch.long)
        lengths = torch.zeros(rows, branches, dtype=torch.long)
        for r, row in enumerate(drafts):
            for b, draft in enumerate(row):
                padded[r, b, :len(draft)] = torch.tensor(draft)
                lengths[r, b] = len(draft)
        n_accepted, branch = accept_greedy(padded, lengths, torch.tensor(argmax))
        assert accept_greedy_lists(drafts, argmax) == (n_accepted.tolist(), branch.tolist()), (drafts, argmax)
