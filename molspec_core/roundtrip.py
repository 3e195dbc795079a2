"""Round-trip check of retrosynthesis answers with the forward model.

A proposed reactant set is plausible when the forward model, given it, writes the product back: IBM
RXN keeps a retro step only when its forward model does so with a confidence of at least 0.6. Each
valid answer gets `round_trip` (the query product is among the forward model's top-k answers,
canonical and stereo-aware) and `forward_prob` (the forward model's probability of exactly that
product, teacher-forced, whatever its rank).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import overload

import torch
import torch.nn.functional as F

from .chem import rdkit_quietly
from .decoding.batch import pad_sources
from .methods import EXACT_NBEST
from .service import Prediction, Predictor, QueryResult
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizeError

SCORE_BATCH = 32  # reactant sets scored per forward pass
MAX_TOP_K = 10  # the round trip holds when the product is among the forward model's top-k, k at most this


def forward_method(top_k: int) -> str:
    """The fastest exact method for the forward model's top-k (see methods.py)."""
    return "spec-auto" if top_k == 1 else EXACT_NBEST


@torch.inference_mode()
def sequence_log_probs(predictor: Predictor, sources: Sequence[Sequence[int]],
                       targets: Sequence[Sequence[int]]) -> list[float]:
    """log P(target | source) under the model, summed over the target's tokens and its eos."""
    model, device = predictor.model, predictor.device
    scores: list[float] = []
    for start in range(0, len(sources), SCORE_BATCH):
        src = pad_sources(sources[start:start + SCORE_BATCH], device)
        rows = [[BOS_ID, *t, EOS_ID] for t in targets[start:start + SCORE_BATCH]]
        tgt = pad_sources(rows, device)  # bos .. eos, padded
        log_probs = F.log_softmax(model(src, tgt[:, :-1]).float(), dim=-1)
        wanted = tgt[:, 1:]
        picked = log_probs.gather(-1, wanted.unsqueeze(-1)).squeeze(-1).masked_fill(wanted == PAD_ID, 0.0)
        scores.extend(picked.sum(dim=-1).tolist())
    return scores


@overload
def check_round_trip(result: QueryResult, forward: Predictor, top_k: int = 1) -> QueryResult: ...


@overload
def check_round_trip(result: Sequence[QueryResult], forward: Predictor, top_k: int = 1) -> list[QueryResult]: ...


@rdkit_quietly
def check_round_trip(result: QueryResult | Sequence[QueryResult], forward: Predictor,
                     top_k: int = 1) -> QueryResult | list[QueryResult]:
    """`result` (a retrosynthesis answer list) with round_trip and forward_prob set on every sane answer
    the forward model can read; None on the others (invalid or flagged ones, unknown tokens) and where the forward
    model's decode stopped at its time limit without giving the product back (forward_prob is still set). A query
    the time limit stopped keeps the answers it had found (QueryResult.stopped_with_answers): its sane ones are
    checked too.
    A list of results, as Predictor.predict returns for a list of queries, gives a list in the same order (each
    result is looked at before any is checked)."""
    if not isinstance(forward, Predictor):  # None reached an AttributeError
        raise ValueError(f"the round-trip check needs a loaded forward model (Predictor.load('forward')), not "
                         f"{type(forward).__name__}")
    if forward.task != "forward":
        raise ValueError(f"the round-trip check needs a forward model; {forward.path} is a {forward.task} model")
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"round-trip top-k must be a whole number between 1 and {MAX_TOP_K}, not {top_k!r}")
    if isinstance(result, QueryResult):
        return _checked(_retro_result(result), forward, top_k)
    if isinstance(result, Sequence) and not isinstance(result, str):  # a list reached an AttributeError
        return [_checked(r, forward, top_k) for r in [_retro_result(r) for r in result]]
    return _retro_result(result)  # raises, naming what was given


def _retro_result(result: object) -> QueryResult:
    """`result` where it is a retrosynthesis model's QueryResult; else a ValueError that says what it is."""
    if not isinstance(result, QueryResult):
        raise ValueError("the round-trip check takes a retrosynthesis model's QueryResult (Predictor.predict's) or a "
                         f"list of them, not {type(result).__name__}")
    if result.task == "forward":  # its answers are products: the forward model would read them as reactants
        raise ValueError("the round-trip check takes a retrosynthesis model's answers; these are a forward model's")
    return result


def _checked(result: QueryResult, forward: Predictor, top_k: int) -> QueryResult:
    """check_round_trip of one result, its arguments checked."""
    if not result.predictions:  # a refused query has none; one stopped at the time limit keeps those it found
        return result
    product = result.canonical_query
    try:
        product_ids = forward.vocab.encode(product)
    except TokenizeError:
        return result
    checked: list[tuple[int, tuple[int, ...]]] = []  # (index in predictions, forward source ids)
    for i, prediction in enumerate(result.predictions):
        if prediction.sane:  # a flagged answer (the product itself, ...) would come back trivially
            try:
                checked.append((i, forward.prepare(prediction.smiles).ids))
            except ValueError:
                continue
    if not checked:
        return result
    answers = forward.predict([result.predictions[i].smiles for i, _ in checked], method=forward_method(top_k),
                              n_best=top_k, batch_size=len(checked))
    log_probs = sequence_log_probs(forward, [ids for _, ids in checked], [product_ids] * len(checked))
    updated: list[Prediction] = list(result.predictions)
    for (i, _), answer, log_prob in zip(checked, answers, log_probs):
        back = any(p.valid and p.finished and p.smiles == product for p in answer.predictions[:top_k])
        # a forward decode stopped at its time limit without the product was not checked to the end: no mark
        updated[i] = dataclasses.replace(updated[i], round_trip=back if answer.ok or back else None,
                                         forward_prob=math.exp(log_prob))
    return dataclasses.replace(result, predictions=tuple(updated))
