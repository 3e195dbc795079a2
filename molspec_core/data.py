"""Data preparation: reproducible train/val/test files from ../shared/data, and compact token arrays.

Forward (reactants and reagents "mixed" -> product): train on the USPTO-full pool plus the USPTO-50K
train set (reactions swapped) plus the USPTO-MIT valid rows after the first n_val, validate on those
first n_val rows, test on USPTO-MIT test. The USPTO-MIT train split is not in ../shared/data, and the
pool lacks the single-ion reagents that 13% of USPTO-MIT test queries hold ([H-], [Pd], [Cs+],
[BH4-], ...: Tetko et al.'s cleaning dropped them), so the MIT valid rows are the only training
reactions written the way the test set is. Every training reaction whose canonical product equals
a USPTO-MIT test product or a validation row's product is removed (leakage). With augment N > 1, each
training source also comes in up to N - 1 rooted writings, the ones the app reads a query in
(rsmiles.root_views), the product staying canonical: a model trained so can read a query in several
writings and pool the answers, as the retro model does (root_aligned).

Forward fine-tuning ("forward-mit"): only the USPTO-MIT valid rows after the first n_val, as the test
set writes its queries, optionally with other writings of each source (random, or rooted as the app
reads a query); encoded with the vocabulary of the model to be fine-tuned. The same held-out products
are removed. With rows_before N, only the rows from n_val up to row N train: with n_val below the default,
the validation rows of a model split by default, which it never trained on.

Retro (product -> reactants): USPTO-50K, GLN-compatible train (derived, atom-mapped by RXNMapper)
with root-aligned SMILES augmentation (rsmiles.py), GLN val and test with canonical products. With
val_rest, the GLN val reactions after the first n_val are training reactions too ("add"), or alone ("only": a
fine-tune folder in the model's vocabulary), leakage filtered as forward's.

Forward fine-tuning on USPTO-50K ("forward-gln"): the GLN val reactions read forward, which the forward pool
lacks (it holds 50K's train reactions only), each source in up to `augment` rooted writings; validation and
test as forward's. Left out: any whose product is a USPTO-MIT test or validation product, or a USPTO-50K test
product (the stereo check reads those reactions forward).
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import lzma
import os
import random
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from .tokenizer import BOS_ID, EOS_ID, UNK_ID, TokenizeError, Vocab, tokenize

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
MAX_SRC_TOKENS = 300  # training length caps: longer rows are rare outliers and cost memory
MAX_TGT_TOKENS = 200
UINT8_TOKENS = 256  # token ids are stored as uint8 (compact data for the GPU machine)

# The files of the shared data folder (its README) that prepare-data reads, relative to it
MIT_VALID = ("uspto_mit/derived/src-valid.mixed.txt.gz", "uspto_mit/derived/tgt-valid.txt.gz")  # (sources, targets)
MIT_TEST = ("uspto_mit/derived/src-test.mixed.txt.gz", "uspto_mit/derived/tgt-test.txt.gz")
MIT_VALID_MAPPED = "uspto_mit/raw/valid.txt.gz"  # MIT_VALID's reactions line for line, atom-mapped
FULL_POOL = ("uspto_full/uspto_valT.csv.xz", "uspto_full/uspto_testT_minus_holdout.csv.xz")
GLN_TRAIN = "uspto50k/derived/train_liu_minus_gln_valtest.csv.gz"
GLN_TRAIN_MAPPED = "uspto50k/derived/train_liu_minus_gln_valtest_rxnmapper.csv.gz"  # atom-mapped by RXNMapper
GLN_VAL = "uspto50k/gln_split/raw_val.csv"
GLN_TEST_DIR = "uspto50k/gln_split_test_unmapped_faster_ml_casp"
GLN_TEST = (f"{GLN_TEST_DIR}/products.txt", f"{GLN_TEST_DIR}/reactants.txt")
TASK_INPUTS = {"forward": (*MIT_VALID, *MIT_TEST, *FULL_POOL, GLN_TRAIN),
               "forward-mit": (*MIT_VALID, *MIT_TEST),
               "forward-gln": (*MIT_VALID, *MIT_TEST, GLN_TEST[0], GLN_VAL),
               "retro": (*GLN_TEST, GLN_TRAIN_MAPPED, GLN_VAL)}


@contextmanager
def open_text(path: Path, newline: str | None = None) -> Iterator[io.TextIOBase]:
    """A data file as text (.gz and .xz decompressed), to read inside the block. A file that cannot be read to its
    end (a truncated download, a file of another kind under the name) or a CSV without a column the block reads is
    a ValueError naming the file: they were an EOFError traceback, or "Not a gzipped file (b'no')" naming none."""
    # UTF-8, a byte-order mark (a file re-saved by a Windows editor) left out: it was read into the first row, so a CSV
    # "had no column 'input'" its first line names, and the first source was no SMILES
    text = {"encoding": "utf-8-sig", "newline": newline}
    try:
        if path.suffix == ".gz":
            f = gzip.open(path, "rt", **text)
        elif path.suffix == ".xz":
            f = lzma.open(path, "rt", **text)
        else:
            f = open(path, **text)
        with f:
            yield f
    except (EOFError, gzip.BadGzipFile, lzma.LZMAError, zlib.error, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} cannot be read to its end (truncated, or not the file its name says): "
                         f"{str(exc)[:200]}") from None
    except KeyError as exc:  # csv.DictReader's row of a file without that column
        raise ValueError(f"{path} has no column {exc} (its first line names the columns)") from None


def read_lines(path: Path) -> list[str]:
    with open_text(path) as f:
        return f.read().splitlines()


@dataclass(frozen=True)
class Pair:
    src: str
    tgt: str


def read_pairs(src_path: Path, tgt_path: Path) -> list[Pair]:
    """Line i of `src_path` with line i of `tgt_path`. Files of different lengths are refused, naming both: a
    line lost or added in one of them pairs every later source with another reaction's target (zip cut the
    longer file short without a word)."""
    sources, targets = read_lines(src_path), read_lines(tgt_path)
    if len(sources) != len(targets):
        raise ValueError(f"{src_path} has {len(sources)} lines but {tgt_path} has {len(targets)}: line i of one "
                         "must be the same reaction as line i of the other")
    return [Pair(s, t) for s, t in zip(sources, targets)]


def forward_target(sources: list[str], products: list[str]) -> str:
    """The products as the forward model is trained to write them (the Molecular Transformer's rule, which
    USPTO-MIT's targets follow): the molecules of `products` that are not among `sources` (both canonical
    fragments, chem.canonical_fragments), sorted and joined by '.'; a salt's counter-ion or HCl is kept. ""
    where every product is a source. known.recorded_reaction reads a recorded reaction's outcome by it."""
    return ".".join(sorted(f for f in products if f not in sources))


def _forward_pair(reaction: tuple[str, str]) -> Pair | None:
    """(reactant side, product side) with atom maps -> mixed source and canonical product."""
    from .chem import ChemError, canonical_fragments

    reactants, products = reaction
    try:
        src_frags = canonical_fragments(reactants)
        target = forward_target(src_frags, canonical_fragments(products))
    except ChemError:
        return None
    if not src_frags or not target:
        return None
    return Pair(".".join(sorted(src_frags)), target)


def _retro_pair(reaction: tuple[str, str]) -> Pair | None:
    pair = _forward_pair(reaction)
    return Pair(pair.tgt, pair.src) if pair else None


def forward_pool(root: Path) -> Iterator[tuple[str, str]]:
    """(reactants, product) of every pool reaction: USPTO-full val/test parts and USPTO-50K train."""
    for name in FULL_POOL:
        with open_text(root / name) as f:
            for row in csv.DictReader(f):  # a row cut short has None for its missing cells: it gives no pair
                yield row["target"] or "", row["input"] or ""
    yield from gln_reactions(root / GLN_TRAIN)


def gln_reactions(path: Path) -> Iterator[tuple[str, str]]:
    """(reactants, product) of each row's reactants>reagents>production; a row not so written is refused, naming its
    line (it was "not enough values to unpack", naming nothing)."""
    with open_text(path) as f:
        reader = csv.DictReader(f)
        for row in reader:
            reaction = row["reactants>reagents>production"] or ""
            parts = reaction.split(">")
            if len(parts) != 3:
                raise ValueError(f"{path}, line {reader.line_num}: {reaction[:80]!r} is not a reaction written "
                                 "reactants>reagents>products")
            yield parts[0], parts[2]


def convert(reactions: list[tuple[str, str]], task: str, workers: int) -> list[Pair | None]:
    return parallel_map(_forward_pair if task == "forward" else _retro_pair, reactions, workers, 2000)


def parallel_map(fn: Callable[[T], R], jobs: list[T], workers: int, chunksize: int) -> list[R]:
    """[fn(job) for job in jobs], in `workers` processes when there are more than one (RDKit work)."""
    if workers <= 1:
        return [fn(job) for job in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(fn, jobs, chunksize=chunksize))


def _max_positions() -> int:
    from .model import ModelConfig  # torch: imported only where a row's length is judged

    return ModelConfig.max_positions


def model_reads(smiles: str) -> bool:
    """Whether a model can read `smiles` as a source and write it as a target: SMILES tokens (tokenizer.tokenize), and
    fewer than its positions (ModelConfig.max_positions; a target takes its bos too)."""
    try:
        return len(tokenize(smiles)) < _max_positions()
    except TokenizeError:
        return False


def keep_short(pairs: list[Pair]) -> list[Pair]:
    return [p for p in pairs if len(tokenize(p.src)) <= MAX_SRC_TOKENS and len(tokenize(p.tgt)) <= MAX_TGT_TOKENS]


def dedupe(pairs: list[Pair]) -> list[Pair]:
    seen: set[tuple[str, str]] = set()
    out = []
    for p in pairs:
        if (p.src, p.tgt) not in seen:
            seen.add((p.src, p.tgt))
            out.append(p)
    return out


@dataclass(frozen=True)
class MitSplit:
    val: list[Pair]  # the first n_val USPTO-MIT valid rows
    train: list[Pair]  # the valid rows after them (before the leakage filter)
    test: list[Pair]
    held_out: set[str]  # products of test and validation rows (chem.leakage_key): no training row may make one


def mit_split(root: Path, n_val: int) -> MitSplit:
    # a row with an empty side teaches nothing (54 valid targets are empty), and an empty source stopped a
    # training run at its first validation ("source i has no tokens")
    rows = read_pairs(root / MIT_VALID[0], root / MIT_VALID[1])
    # a row the tokenizer cannot read (a space, a stray '%') stopped the preparation at its arrays, naming no row; a
    # validation row longer than a model's positions was written, and every training run on the folder refused it
    unreadable = [i for i, p in enumerate(rows) if p.src and p.tgt and not (model_reads(p.src) and model_reads(p.tgt))]
    if unreadable:
        first = rows[unreadable[0]]
        log.warning("%s: %d of its %d rows are no SMILES a model reads (not SMILES tokens, or longer than its %d "
                    "positions; the first, line %d: %r); they are left out", root / MIT_VALID[0], len(unreadable),
                    len(rows), _max_positions(), unreadable[0] + 1,
                    (first.src if not model_reads(first.src) else first.tgt)[:80])
    skip = set(unreadable)
    valid = [p for i, p in enumerate(rows) if p.src and p.tgt and i not in skip]
    test = read_pairs(root / MIT_TEST[0], root / MIT_TEST[1])
    if n_val > len(valid):  # it wrote the rows there were as validation and trained on none of them, without a word
        raise ValueError(f"--n-val {n_val}: {MIT_VALID[0]} has {len(valid)} usable rows (validation is the first "
                         f"--n-val of them, training the rest)")
    val = valid[:n_val]
    return MitSplit(val, valid[n_val:], test, {key for p in [*test, *val] if (key := _leakage_key(p.tgt))})


def _leakage_key(smiles: str) -> str | None:
    from .chem import leakage_key

    return leakage_key(smiles)


def made_held_out(pairs: list[Pair], held_out: set[str], workers: int) -> list[bool]:
    """Per pair, whether its product is a held-out one (held_out: chem.leakage_key's)."""
    return [key in held_out for key in parallel_map(_leakage_key, [p.tgt for p in pairs], workers, 5000)]


def _rooted_writings(job: tuple[str, int]) -> list[str]:
    from .rsmiles import root_views

    source, n = job
    try:
        return root_views(source, n)
    except ValueError:  # a source RDKit cannot read keeps its one writing
        return [source]


def in_rooted_writings(pairs: list[Pair], n: int, workers: int) -> list[Pair]:
    """Each pair's source in up to n writings, its own first, then the rooted writings the service reads
    a query in (rsmiles.root_views: the same function, so training sees the writings the app asks
    about); the target is kept; too long and repeated pairs dropped. n = 1: the pairs as given."""
    if n <= 1:
        return pairs
    writings = parallel_map(_rooted_writings, [(p.src, n) for p in pairs], workers, 2000)
    return dedupe(keep_short([Pair(w, p.tgt) for p, ws in zip(pairs, writings) for w in ws]))


def mit_mapped(root: Path) -> dict[Pair, str]:
    """Each USPTO-MIT valid pair (MIT_VALID) -> its atom-mapped reaction, the raw file's line in the same place."""
    pairs = read_pairs(root / MIT_VALID[0], root / MIT_VALID[1])
    lines = read_lines(root / MIT_VALID_MAPPED)
    if len(lines) != len(pairs):
        raise ValueError(f"{MIT_VALID_MAPPED}: {len(lines)} lines against {len(pairs)} valid pairs")
    return dict(zip(pairs, lines))


def _aligned_writings(job: tuple[str, Pair, int]) -> tuple[list[Pair], bool]:
    """A pair's source in up to n rooted writings (as in_rooted_writings), each with the target written to read
    like it (rsmiles.forward_aligned), and True; the canonical target for every writing, and False, where the
    reaction's maps cannot align them."""
    from .rsmiles import MappingError, forward_aligned

    mapped, pair, n = job
    writings = _rooted_writings((pair.src, n))
    if mapped:
        try:
            return [Pair(w, t) for w, t in zip(writings, forward_aligned(mapped, pair.tgt, writings))], True
        except MappingError:
            pass
    return [Pair(w, pair.tgt) for w in writings], False


def prepare_forward(root: Path, out: Path, n_val: int, workers: int, augment: int, vocab: Vocab | None = None) -> dict:
    """The pool and the USPTO-MIT valid rows after the first n_val, leakage filtered, each source in up to `augment`
    writings. `vocab`: encode with the model's to be trained on (the GPU kit's block from the shipped weights): a
    vocabulary built from these rows differs from the one the shipped model and its draft model read (since session
    76's leakage filter it lacks '[Si@@H]', and every token sorted after it moves), so the weights trained on it
    would no longer pair with that draft model, and the model folder would not load."""
    if augment < 1:
        raise ValueError("forward: augment is the writings of each source, at least 1")
    mit = mit_split(root, n_val)
    val, mit_train, test, held_out = mit.val, mit.train, mit.test, mit.held_out
    pool = list(forward_pool(root))
    pairs = [p for p in convert(pool, "forward", workers) if p is not None]
    n_parsed = len(pairs)
    candidates = pairs + mit_train
    leaks = made_held_out(candidates, held_out, workers)
    leaked = [p for p, leak in zip(candidates, leaks) if leak]
    pairs = dedupe(keep_short([p for p, leak in zip(candidates, leaks) if not leak]))
    reactions = len(pairs)
    pairs = in_rooted_writings(pairs, augment, workers)
    stats = {"task": "forward", "pool_reactions": len(pool), "parsed": n_parsed,
             "mit_valid_rows_for_training": len(mit_train),
             "removed_leakage_mit_test_or_val_product": len(leaked), "train_reactions": reactions,
             "augment": augment, "train": len(pairs), "val": len(val), "test": len(test)}
    write_splits(out, {"train": pairs, "val": val, "test": test}, stats, vocab)
    return stats


def prepare_forward_mit(root: Path, out: Path, n_val: int, augment: int, vocab: Vocab | None, rooted: bool = False,
                        workers: int = 2, rows_before: int = 0, aligned: bool = False) -> dict:
    """Fine-tune data: the USPTO-MIT valid rows after the first n_val only (the test set's own writing,
    reagents included), each source in up to `augment` writings, MIT's own first; the product stays
    canonical. The other writings are random ones (chem.random_writing, seeded per row), or with `rooted`
    the rooted writings the app reads a query in (as prepare_forward writes them): the data the shipped
    forward model was fine-tuned on since session 32 (its card, CPU runs 18-30). `rows_before` N > n_val: only
    the rows n_val..N-1 (rows a model validated on the first N never trained on). `aligned` (with `rooted`): each
    target, training and validation, written to read like its source (rsmiles.forward_aligned, from the reactions'
    atom maps), no longer canonical; the test rows keep MIT's targets, as scoring canonicalizes."""
    from .chem import ChemError, random_writing

    if augment < 1:
        raise ValueError("forward-mit: augment is the writings of each source, at least 1")
    if rows_before and rows_before <= n_val:
        raise ValueError(f"forward-mit: rows_before {rows_before} must lie past n_val {n_val}")
    mit = mit_split(root, n_val)
    if rows_before > n_val + len(mit.train):
        raise ValueError(f"--rows-before {rows_before}: {MIT_VALID[0]} has {n_val + len(mit.train)} usable rows")
    rows = mit.train[:rows_before - n_val] if rows_before else mit.train
    kept = [p for p, leak in zip(rows, made_held_out(rows, mit.held_out, workers)) if not leak]
    stats: dict = {"task": "forward", "data": "forward-mit, rooted writings" if rooted else "forward-mit",
                   "mit_valid_rows_for_training": len(rows),
                   "removed_leakage_mit_test_or_val_product": len(rows) - len(kept)}
    if rows_before:
        stats["mit_valid_rows"] = f"{n_val}-{n_val + len(rows) - 1}"
    val = mit.val
    if aligned:  # with rooted (prepare refuses it without)
        mapped = mit_mapped(root)
        reactions = dedupe(keep_short(kept))
        done = parallel_map(_aligned_writings, [(mapped.get(p, ""), p, augment) for p in reactions], workers, 500)
        train = dedupe(keep_short([pair for pairs, _ in done for pair in pairs]))
        val = [pairs[0] for pairs, _ in parallel_map(_aligned_writings, [(mapped.get(p, ""), p, 1) for p in val],
                                                   workers, 500)]
        stats.update(train_reactions=len(reactions), augment=augment, aligned_targets=True,
                     targets_not_aligned=sum(not ok for _, ok in done))
    elif rooted:
        reactions = dedupe(keep_short(kept))
        train = in_rooted_writings(reactions, augment, workers)
        # "augment" marks root-aligned data (root_aligned): the model can read a query in its rooted writings
        stats.update(train_reactions=len(reactions), augment=augment)
    else:
        pairs, unreadable = [], 0
        for i, pair in enumerate(kept):
            pairs.append(pair)
            rng = random.Random(i)
            try:
                pairs += [Pair(random_writing(pair.src, rng), pair.tgt) for _ in range(augment - 1)]
            except ChemError:  # a source RDKit cannot read (a few in USPTO-MIT) keeps its one writing
                unreadable += 1
        train = dedupe(keep_short(pairs))
        # not "augment": that key marks root-aligned data, whose models read a query in several rooted
        # writings (service.augmentable); a few random writings in training do not teach that (measured,
        # CPU run 13's 40-minute export: 5 writings cost 5 points of top-1 on the 500-query sample)
        # the reactions as the rooted branch counts them (tools/hard_examples.py build read 0 of such a folder)
        stats.update(train_reactions=len(dedupe(keep_short(kept))), random_writings_per_source=augment,
                     sources_rdkit_cannot_read=unreadable)
    stats.update(train=len(train), val=len(val), test=len(mit.test))
    write_splits(out, {"train": train, "val": val, "test": mit.test}, stats, vocab)
    return stats


def prepare_forward_gln(root: Path, out: Path, n_val: int, augment: int, vocab: Vocab | None,
                        workers: int = 2) -> dict:
    """Fine-tune data: the 5,001 GLN val reactions of USPTO-50K read forward (reactants -> product, as the pool's
    50K train reactions are; no reagents), each source in up to `augment` writings, its canonical writing first,
    then the rooted ones the app reads a query in; validation and test as prepare_forward's (USPTO-MIT)."""
    if augment < 1:
        raise ValueError("forward-gln: augment is the writings of each source, at least 1")
    mit = mit_split(root, n_val)
    held_out = mit.held_out | {key for s in read_lines(root / GLN_TEST[0]) if (key := _leakage_key(s))}
    reactions = list(gln_reactions(root / GLN_VAL))
    pairs = [p for p in convert(reactions, "forward", workers) if p is not None]
    leaks = made_held_out(pairs, held_out, workers)
    kept = dedupe(keep_short([p for p, leak in zip(pairs, leaks) if not leak]))
    train = in_rooted_writings(kept, augment, workers)
    stats = {"task": "forward", "data": "forward-gln: USPTO-50K GLN val reactions, rooted writings",
             "gln_val_reactions": len(reactions), "parsed": len(pairs),
             "removed_leakage_test_or_val_product": sum(leaks),
             "train_reactions": len(kept), "augment": augment, "train": len(train), "val": len(mit.val),
             "test": len(mit.test)}
    write_splits(out, {"train": train, "val": mit.val, "test": mit.test}, stats, vocab)
    return stats


def _retro_augmented(args: tuple[str, str, int, int]) -> tuple[list[Pair], bool]:
    """Root-aligned pairs of one mapped reaction; falls back to the canonical pair (False)."""
    from .rsmiles import MappingError, augment, reaction_sides

    mapped, unmapped, n, seed = args
    if n > 0:
        try:
            return [Pair(p, r) for p, r in augment(mapped, n, random.Random(seed))], True
        except MappingError:
            pass
    try:
        reactants, _, product = reaction_sides(unmapped)
    except MappingError:  # neither cell is a reaction: the row gives no pair
        return [], False
    pair = _retro_pair((reactants, product))
    return ([pair] if pair else []), False


def root_aligned(stats: dict) -> bool:
    """Whether data with these stats (stats.json; a model's config keeps them as "data_stats") held many
    rooted writings of each query (prepare_retro's root-aligned pairs or prepare_forward's rooted sources,
    "augment" > 1): a model trained on it can read a query in several rooted writings and pool the
    answers (service.Predictor.augmentable)."""
    return int(stats.get("augment", 0)) > 1


VAL_REST = ("add", "only")  # prepare_retro: the GLN val reactions after the first n_val join training, or alone


def prepare_retro(root: Path, out: Path, n_val: int, workers: int, augment: int, val_rest: str = "",
                  vocab: Vocab | None = None) -> dict:
    """USPTO-50K (GLN split): train pairs root-aligned x`augment` (0: canonical pairs only). Validation is the
    first n_val GLN val reactions; `val_rest` "add" trains on the others too (as forward trains on the USPTO-MIT
    valid rows after its first n_val), "only" on them alone (a fine-tune folder: give the model's `vocab`). Any
    whose product is a test or validation product is left out (leakage)."""
    if augment < 0:
        raise ValueError("retro: augment is the root-aligned writings of each reaction, at least 0 (0: canonical only)")
    test = read_pairs(root / GLN_TEST[0], root / GLN_TEST[1])  # checked before the minutes of work
    with open_text(root / GLN_TRAIN_MAPPED) as f:
        # a row cut short has None for its missing cells
        rows = [(r["rxnmapper_mapped"] or "", r["reactants>reagents>production"] or "") for r in csv.DictReader(f)]
    # Validation: the product as the service writes a query (canonical), the reactants aligned to it
    # where the maps allow, as the model is trained to write them; so the trainer's token-level exact
    # match (it has no RDKit) measures what the model is asked to do. Canonical pairs otherwise.
    val_rows = [f"{r}>>{p}" for r, p in gln_reactions(root / GLN_VAL)]
    # a reaction longer than a model's positions is no validation row: every training run on the folder refused it
    val_done = [(i, pairs[0], ok) for i, (pairs, ok) in enumerate(
        _retro_augmented((rxn, rxn, min(augment, 1), i)) for i, rxn in enumerate(val_rows))
        if pairs and model_reads(pairs[0].src) and model_reads(pairs[0].tgt)][:n_val]
    if len(val_done) < n_val:  # before the training rows' minutes of alignment
        raise ValueError(f"--n-val {n_val}: {GLN_VAL} has {len(val_done)} reactions RDKit reads that a model can "
                         "read")
    val = [pair for _, pair, _ in val_done]
    train: list[Pair] = []
    done: list[tuple[list[Pair], bool]] = []
    if val_rest != "only":
        jobs = [(mapped, unmapped, augment, i) for i, (mapped, unmapped) in enumerate(rows)]
        done = parallel_map(_retro_augmented, jobs, workers, 500)
        train = [pair for pairs, _ in done for pair in pairs]
    stats = {"task": "retro", "reactions": len(rows) if val_rest != "only" else 0, "augment": augment,
             "aligned_reactions": sum(ok for _, ok in done), "canonical_fallback": sum(not ok for _, ok in done),
             "val_aligned": sum(ok for _, _, ok in val_done)}
    if val_rest:
        first_rest = val_done[-1][0] + 1 if val_done else 0
        rest, removed = _val_rest(val_rows[first_rest:], augment, len(rows), workers,
                                  {p.src for p in test} | {p.src for p in val})
        train += [pair for pairs, _ in rest for pair in pairs]
        stats.update(val_rest=val_rest, val_rest_reactions=len(rest), val_rest_aligned=sum(ok for _, ok in rest),
                     removed_leakage_test_or_val_product=removed)
    train = dedupe(keep_short(train))
    stats.update(train=len(train), val=len(val), test=len(test))
    write_splits(out, {"train": train, "val": val, "test": test}, stats, vocab)
    return stats


def _val_rest(reactions: list[str], augment: int, seed0: int, workers: int,
              held_out: set[str]) -> tuple[list[tuple[list[Pair], bool]], int]:
    """Root-aligned pairs of the GLN val reactions (atom-mapped) RDKit reads whose canonical product is not in
    `held_out` (SMILES), and how many were left out for that product."""
    held = {key for s in held_out if (key := _leakage_key(s))}
    kept, leaked = [], 0
    for rxn in reactions:
        reactants, _, product = rxn.split(">")
        pair = _retro_pair((reactants, product))
        if pair is not None and _leakage_key(pair.src) in held:
            leaked += 1
        elif pair is not None:
            kept.append(rxn)
    jobs = [(rxn, rxn, augment, seed0 + i) for i, rxn in enumerate(kept)]
    return parallel_map(_retro_augmented, jobs, workers, 500), leaked


def write_splits(out: Path, splits: dict[str, list[Pair]], stats: dict, vocab: Vocab | None = None) -> None:
    """Text and uint8 token arrays of each split. `vocab`: encode with this one (fine-tuning a model,
    whose vocabulary must not change) instead of building one from the training rows. A vocabulary the
    uint8 arrays cannot hold is refused before anything is written; an empty split is warned of (a trainer
    given an empty training split once looped over empty epochs until it was killed; it refuses one now)."""
    if vocab is not None:
        check_uint8_vocab(vocab)
    # uint8 token arrays: the rarest tokens are left out (read as unknown) when there are more
    if vocab is None:
        vocab = Vocab.build((s for p in splits["train"] for s in (p.src, p.tgt)), max_size=UINT8_TOKENS)
    # A training target with a token outside the vocabulary would teach the model to write <unk>: such
    # pairs are dropped (an unknown source token only blurs what the model reads, and is kept).
    writable = [p for p in splits["train"] if UNK_ID not in vocab.encode(p.tgt, strict=False)]
    if not writable:  # written (its stats say why), but loudly: `train` refuses such a folder
        log.warning("%s: the training split is empty%s; no model can train on this folder", out,
                    f" (all {len(splits['train'])} training pairs have a target token outside the {len(vocab)}-token "
                    "vocabulary)" if splits["train"] else "")
    for name, pairs in splits.items():
        if name != "train" and not pairs:
            log.warning("%s: the %s split is empty", out, name)
    stats["train_dropped_unknown_target"] = len(splits["train"]) - len(writable)
    splits = {**splits, "train": writable}
    stats["train"] = len(writable)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    written = [out / f"{name}.{end}" for name in splits for end in ("src", "tgt")]
    written += [out / "vocab.json", out / "train.npz", out / "val.npz", out / "stats.json"]
    try:
        for name, pairs in splits.items():
            (out / f"{name}.src").write_text("".join(p.src + "\n" for p in pairs))
            (out / f"{name}.tgt").write_text("".join(p.tgt + "\n" for p in pairs))
        vocab.save(out / "vocab.json")
        unknown = {name: save_arrays(out / f"{name}.npz", splits[name], vocab) for name in ("train", "val")}
        stats["vocab_size"] = len(vocab)
        stats["train_tokens_unknown"] = unknown["train"]  # occurrences of tokens too rare for the vocabulary
        (out / "stats.json").write_text(json.dumps(stats, indent=2))
    except BaseException as exc:  # a full disk, Ctrl-C: a half-written folder was refused by the next prepare-data
        for path in written:
            path.unlink(missing_ok=True)
        if created and not any(out.iterdir()):
            out.rmdir()
        if isinstance(exc, OSError) and not exc.filename:  # numpy's zip writer names no file: "No space left on device"
            raise OSError(exc.errno, f"{exc.strerror or exc}: {out} could not be written; the files begun there are "
                          "removed (the same command runs again once there is room)") from None
        raise
    log.info("wrote %s: %s", out, stats)


def check_uint8_vocab(vocab: Vocab, what: str = "the vocabulary") -> None:
    if len(vocab) > UINT8_TOKENS:
        raise ValueError(f"{what} has {len(vocab)} tokens; the uint8 token arrays hold at most {UINT8_TOKENS}")


def pack_ids(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token-id sequences as one flat uint8 array and int64 offsets (sequence i is flat[o[i]:o[i+1]])."""
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in seqs])
    return np.fromiter((t for s in seqs for t in s), dtype=np.uint8, count=int(offsets[-1])), offsets


def save_arrays(path: Path, pairs: list[Pair], vocab: Vocab) -> int:
    """Flat uint8 token arrays with offsets, zip-compressed (they travel to the GPU machine), loadable
    without pickle. Returns how many tokens were outside the vocabulary (stored as unknown)."""
    check_uint8_vocab(vocab)
    src, src_off = pack_ids([vocab.encode(p.src, strict=False) for p in pairs])
    tgt, tgt_off = pack_ids([[BOS_ID] + vocab.encode(p.tgt, strict=False) + [EOS_ID] for p in pairs])
    np.savez_compressed(path, src=src, src_offsets=src_off, tgt=tgt, tgt_offsets=tgt_off)
    return int((src == UNK_ID).sum() + (tgt == UNK_ID).sum())


ARRAY_NAMES = ("src", "src_offsets", "tgt", "tgt_offsets")


def load_arrays(path: Path, vocab_size: int | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each row's source and target token ids from a file `save_arrays` wrote, checked first: any failure is a
    ValueError naming the file (a truncated file, a file of another kind, missing arrays, offsets that do not
    cut the flat arrays, and with `vocab_size` a token id the vocabulary lacks, which failed mid-run)."""
    import zipfile
    import zlib

    try:
        z = np.load(path, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise ValueError(f"{path} holds a single array, not the .npz archive prepare-data writes")
        with z:
            missing = [name for name in ARRAY_NAMES if name not in z.files]
            if missing:
                raise ValueError(f"{path} lacks the arrays {', '.join(missing)} (prepare-data writes "
                                 f"{', '.join(ARRAY_NAMES)})")
            src, so, tgt, to = (z[name] for name in ARRAY_NAMES)
    except FileNotFoundError:
        raise ValueError(f"{path} is missing") from None
    except IsADirectoryError:
        raise ValueError(f"{path} is a folder, not a token-array file") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, KeyError, OSError) as exc:
        raise ValueError(f"{path} is not a readable token-array file (truncated or of another kind): "
                         f"{str(exc)[:200]}") from None
    except ValueError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise ValueError(f"{path} is not a token-array file prepare-data writes: "
                         f"{str(exc).split('. ')[0][:200]}") from None
    for name, flat, offsets in (("src", src, so), ("tgt", tgt, to)):
        if flat.ndim != 1 or offsets.ndim != 1 or flat.dtype.kind not in "iu" or offsets.dtype.kind not in "iu":
            raise ValueError(f"{path}: {name} and {name}_offsets must be one-dimensional whole-number arrays")
        if (len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(flat)
                or (len(offsets) > 1 and (np.diff(offsets) < 0).any())):
            raise ValueError(f"{path}: {name}_offsets do not cut {name} into rows (they must rise from 0 to its "
                             f"length, {len(flat)})")
        if len(flat) and flat.min() < 0:
            raise ValueError(f"{path}: {name} holds negative token ids")
        if vocab_size is not None and len(flat) and int(flat.max()) >= vocab_size:
            raise ValueError(f"{path}: {name} holds token id {int(flat.max())}, but the vocabulary has "
                             f"{vocab_size} tokens (ids 0-{vocab_size - 1}): the arrays were written with "
                             "another vocab.json")
    if len(so) != len(to):
        raise ValueError(f"{path}: {len(so) - 1} sources but {len(to) - 1} targets")
    return ([src[so[i]:so[i + 1]] for i in range(len(so) - 1)],
            [tgt[to[i]:to[i + 1]] for i in range(len(to) - 1)])


TASKS = ("forward", "forward-mit", "forward-gln", "retro")
DEFAULT_AUGMENT = {"forward": 1, "forward-mit": 1, "forward-gln": 1, "retro": 20}  # writings of each training reaction
# At most this many: the retro data's 20 are the most any shipped model trained on, and its x20 arrays (15 MB) are
# already a quarter of what a GPU command may carry; forward's x5 are 23 MB.
MAX_AUGMENT = 50


def check_data_files(task: str, root: Path) -> None:
    """Refuse, before any work, a data folder that lacks a file the task reads (TASK_INPUTS): forward read and
    converted the USPTO-MIT rows (a minute of RDKit work) before it found the pool or USPTO-50K's train set missing."""
    missing = [name for name in TASK_INPUTS[task] if not (root / name).is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more of the {len(TASK_INPUTS[task])} it reads)" if len(missing) > 1 else ""
        raise ValueError(f"{root / missing[0]} is missing{more}: --data is the shared data folder, laid out as its "
                         "README says (README.md's \"Data\" says where the data sets come from)")


def check_new_out(out: Path) -> None:
    """Refuse, before any work, an --out that is a file or a folder already holding files: the data's files
    would be written among what is there (a model folder's vocab.json was replaced, and the model no longer
    loaded). Missing parent folders are made, as a fresh checkout has no data/ (checkpoint.check_new_folder's
    model folder must have its parent)."""
    from .checkpoint import refuse_filled_folder

    refuse_filled_folder(out, "the data", "prepare-data would write its train/val/test files, vocab.json and "
                         "stats.json among them")


def check_can_write(flag: str, folder: Path, at: Path) -> None:
    """Refuse, before any work, a `folder` a command could not write (`at`: where its files are made): train's first
    export made --export-dir and failed ("Not a directory") after the minutes trained, before out/last was saved;
    prepare-data read and converted the reactions for minutes, then could not make --out."""
    existing = at
    while not (existing.exists() or existing.is_symlink()) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {folder}: {existing} is a file, so nothing could be written there; give a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {folder}: {existing} is not writable; give a folder you may write in")


def prepare(task: str, root: Path, out: Path, n_val: int = 2000, workers: int = 2, augment: int | None = None,
            vocab: Vocab | None = None, rooted: bool = False, val_rest: str = "", rows_before: int = 0,
            aligned: bool = False) -> dict:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}")
    if augment is not None and augment > MAX_AUGMENT:  # --augment 100000000 ran until it was killed
        raise ValueError(f"augment {augment}: at most {MAX_AUGMENT} writings of each reaction (the shipped models "
                         f"trained on up to {DEFAULT_AUGMENT['retro']})")
    if vocab is not None:
        check_uint8_vocab(vocab, "the given vocabulary (--vocab)")
    if val_rest and val_rest not in VAL_REST:
        raise ValueError(f"val_rest {val_rest!r}: one of {', '.join(VAL_REST)}")
    if val_rest and task != "retro":
        raise ValueError(f"{task}: val_rest is for retro (forward always trains on the MIT valid rows after n_val)")
    if rows_before and task != "forward-mit":
        raise ValueError(f"{task}: rows_before is for forward-mit (retro's unused validation rows: val_rest)")
    if aligned and not rooted:
        raise ValueError("aligned targets are for forward-mit with rooted writings (rooted)")
    if rooted and task != "forward-mit":
        raise ValueError(f"{task}: rooted is for forward-mit (forward's writings are always rooted, "
                         "retro's root-aligned)")
    check_new_out(out)
    check_can_write("--out", out, out)
    check_data_files(task, root)
    augment = DEFAULT_AUGMENT.get(task, 1) if augment is None else augment
    if task == "forward":
        return prepare_forward(root, out, n_val, workers, augment, vocab)
    if task == "forward-mit":
        return prepare_forward_mit(root, out, n_val, augment, vocab, rooted, workers, rows_before, aligned)
    if task == "forward-gln":
        return prepare_forward_gln(root, out, n_val, augment, vocab, workers)
    return prepare_retro(root, out, n_val, workers, augment, val_rest, vocab)
