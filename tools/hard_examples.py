"""Fine-tune data from the training reactions a model still gets wrong, with the pool replayed beside them.

python3 tools/hard_examples.py starts --data data/forward_mit_rooted10 --out starts.txt
python3 -m molspec_core evaluate --model MODEL --src data/forward_mit_rooted10/train.src \
    --tgt data/forward_mit_rooted10/train.tgt --index starts.txt --method spec-auto --out mined.json
python3 tools/hard_examples.py build --data data/forward_mit_rooted10 --mined mined.json \
    [--replay data/forward --replay-ratio 1] --out data/forward_mit_hard_replay
python3 -m molspec_core prepare-data --task retro --val-rest only --vocab models/retro/vocab.json \
    --out data/retro_valrest
python3 tools/hard_examples.py build --data data/retro_valrest --replay data/retro --out data/retro_valrest_replay
python3 -m molspec_core prepare-data --task forward-mit --n-val 500 --rows-before 2000 --augment 10 --rooted \
    --vocab models/forward/vocab.json --out data/forward_mit_new500
python3 tools/hard_examples.py build --data data/forward_mit_new500 --replay data/forward --replay-ratio 2 \
    --out data/forward_new500_replay
python3 tools/hard_examples.py build --data data/forward_mit_new500 --also data/forward_gln10 \
    --replay data/forward_mit_rooted10 --replay-ratio 2 --out data/forward_new_mitreplay

A `prepare-data` folder writes each training reaction's writings on consecutive lines. Forward's share one
target, the reaction's product, and one set of reactants (`data.in_rooted_writings`), so a forward reaction starts
where either changes (neighbouring reactions may make one product); retro's root-aligned writings each have their own
target (the reactants aligned to that writing of the product), and the first is the product's canonical SMILES
(`rsmiles.augment`), so a retro reaction starts at a canonical source or where the product changes. `starts`
writes the first line of each reaction, the line `evaluate --index` mines from: one greedy answer per reaction,
the model's own first writing (retro: the canonical product, as the app reads a query). `build` reads the
mined report (its per-query `first_right`) and writes a folder `molspec_core.train` reads (without --mined, every
pair of --data: reactions new to the model, such as the GLN val reactions the retro model never saw):

  wrong reactions  every writing (refused queries count as wrong: a token outside the vocabulary)
  right reactions  --right-writings random writings each (3), so what the model knows stays in view
  replay           --replay-ratio times as many pairs again drawn at random from --replay's train split
                   (the whole pool, `prepare-data --task forward`), so that the pool's chemistry, most of all
                   its stereo, stays in view (the USPTO-MIT rows carry none; forward card, CPU runs 36-39)

The validation and test splits and the vocabulary are --data's, so the model's vocabulary does not change.
Sessions 46-47 did this with scratch scripts (forward card, CPU runs 36, 38 and 39); this is their recipe.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import (InputFileError, check_inputs, check_output_folder,  # noqa: E402  (tools/_toolbox.py)
                      check_outputs, read_json)

from molspec_core.argtypes import Bounds, argtype, at_least  # noqa: E402
from molspec_core.checkpoint import MODEL_TASKS  # noqa: E402
from molspec_core.data import Pair, read_lines, write_splits  # noqa: E402
from molspec_core.io import OutputFileError, write_text_file  # noqa: E402
from molspec_core.tokenizer import Vocab  # noqa: E402

# what `starts` reads of a prepare-data folder (folder_starts), and what `build` reads of each (split, Vocab.load)
STARTS_READS = ("train.src", "train.tgt", "stats.json")
BUILD_READS = (*STARTS_READS, "vocab.json")  # and --data's val and test splits, which the built folder keeps
SPLITS_KEPT = ("val.src", "val.tgt", "test.src", "test.tgt")


def reaction_starts(sources: list[str], targets: list[str]) -> list[int]:
    """First line of each forward reaction: a product, or reactants (read by RDKit), other than the line before's.
    Two neighbouring reactions may make one product (USPTO writes a compound's routes side by side); the target
    alone merged them into one. A source RDKit cannot read has one writing: its line is a reaction of its own."""
    from molspec_core.chem import canonical_or_none  # RDKit: this runs where the data is prepared

    keys = [canonical_or_none(s) for s in sources]
    return [i for i, (tgt, key) in enumerate(zip(targets, keys, strict=True))
            if i == 0 or tgt != targets[i - 1] or key is None or key != keys[i - 1]]


def retro_starts(sources: list[str]) -> list[int]:
    """First line of each retro reaction: a canonical product, or a product other than the line before's."""
    from molspec_core.chem import canonical_or_none  # RDKit: this runs where the data is prepared

    keys = [canonical_or_none(s) for s in sources]
    return [i for i, (src, key) in enumerate(zip(sources, keys))
            if i == 0 or src == key or key != keys[i - 1]]


def check_in_order(data: Path, stats: dict) -> None:
    """Refuse a folder `build` wrote: its pairs are shuffled, so a reaction's writings are no longer consecutive and
    every line was taken for a reaction of its own."""
    if "hard_pairs" in stats:  # build's stats name its hard pairs; prepare-data's never do
        raise ValueError(f"--data {data} was written by hard_examples.py build, whose pairs are shuffled: its "
                         "reactions cannot be told apart; give the prepare-data folder it was built from")


def folder_starts(data: Path, train: list[Pair]) -> list[int]:
    stats = read_json("--data", data / "stats.json")
    check_in_order(data, stats)
    task = stats.get("task")
    sources = [p.src for p in train]
    return retro_starts(sources) if task == "retro" else reaction_starts(sources, [p.tgt for p in train])


def wrong_reactions(mined: dict, data: Path, n_reactions: int) -> list[bool]:
    """Per reaction, whether the mined greedy answer missed (or the query was refused)."""
    if "src" in mined and Path(mined["src"]).resolve() != (data / "train.src").resolve():
        raise ValueError(f"the report mined {mined['src']}, not {data / 'train.src'}")
    if mined.get("augment", 1) != 1 or mined.get("n_best", 1) != 1:
        raise ValueError("mine with one answer from one writing (evaluate --method spec-auto, no --augment)")
    firsts = mined["first_right"]["model_order"]
    if len(firsts) != n_reactions:
        raise ValueError(f"the report holds {len(firsts)} queries; the folder holds {n_reactions} reactions "
                         "(mine with `starts`' index on the same folder)")
    return [first != 1 for first in firsts]


def split(folder: Path, name: str) -> list[Pair]:
    sources, targets = read_lines(folder / f"{name}.src"), read_lines(folder / f"{name}.tgt")
    return [Pair(s, t) for s, t in zip(sources, targets, strict=True)]  # files of unequal length: an error


def hard_pairs(train: list[Pair], starts: list[int], wrong: list[bool], right_writings: int,
               rng: random.Random) -> list[Pair]:
    starts = starts + [len(train)]
    out: list[Pair] = []
    for r, missed in enumerate(wrong):
        writings = train[starts[r]:starts[r + 1]]
        out += writings if missed else rng.sample(writings, min(right_writings, len(writings)))
    return out


def folder_reactions(stats: dict) -> int:
    """A prepare-data folder's training reactions: forward's stats call them train_reactions, retro's reactions
    (its GLN val reactions apart, as val_rest_reactions)."""
    return stats.get("train_reactions", stats.get("reactions", 0)) + stats.get("val_rest_reactions", 0)


def build(data: Path, mined: dict | None, out: Path, right_writings: int = 3, replay: Path | None = None,
          replay_ratio: float = 1.0, seed: int = 0, also: tuple[Path, ...] = ()) -> dict:
    """`mined` None: every reaction of `data` is new to the model (`prepare-data --task retro --val-rest only`,
    `--task forward-mit --rows-before`), so all its writings are kept, as a wrong one's; so are those of each
    folder in `also` (more new reactions for the same model: its task and vocabulary; `data`'s validation)."""
    check_output_folder("--out", out, [("--data", data), ("--replay", replay),
                                       *(("--also", folder) for folder in also)])
    train = split(data, "train")
    rng = random.Random(seed)
    folders = {folder: read_json("--data" if folder == data else "--also", folder / "stats.json")
               for folder in (data, *also)}
    untasked = next((folder for folder, stats in folders.items() if stats.get("task") not in MODEL_TASKS), None)
    if untasked is not None:  # a KeyError, or a folder written that train refuses
        raise ValueError(f"{untasked / 'stats.json'}: its \"task\" is not one of {', '.join(MODEL_TASKS)} (not a "
                         "prepare-data folder)")
    source, vocab = folders[data], Vocab.load(data / "vocab.json")
    if also and mined is not None:
        raise ValueError("--also adds new reactions: give it without --mined")
    for folder in also:
        if folders[folder]["task"] != source["task"]:
            raise ValueError(f"{folder}: not a {source['task']} folder, as {data} is")
        if Vocab.load(folder / "vocab.json").tokens != vocab.tokens:
            raise ValueError(f"{folder}: another vocabulary than {data}'s (prepare both with the model's --vocab)")
    replay_task = read_json("--replay", replay / "stats.json").get("task") if replay is not None else None
    if replay is not None and replay_task != source["task"]:  # a retro pool's pairs replayed into forward data
        raise ValueError(f"--replay {replay} holds {replay_task} data, and {data} {source['task']} data: replay a "
                         f"{source['task']} folder")
    unread = [t for t in Vocab.load(replay / "vocab.json").tokens if t not in vocab.index] if replay else []
    if unread:  # its pairs were written in --data's vocabulary: sources with <unk>, targets dropped, without a word
        raise ValueError(f"--replay {replay}: its vocabulary holds {len(unread)} tokens {data}'s lacks (e.g. "
                         f"{unread[0]!r}), so its pairs would be read with <unk> or left out; prepare both with the "
                         "model's --vocab")
    if mined is None:
        wrong, pairs = None, list(train) + [pair for folder in also for pair in split(folder, "train")]
    else:
        starts = folder_starts(data, train)
        wrong = wrong_reactions(mined, data, len(starts))
        pairs = hard_pairs(train, starts, wrong, right_writings, rng)
    n_hard = len(pairs)
    if replay is not None:
        pool = split(replay, "train")
        pairs += rng.sample(pool, min(len(pool), round(replay_ratio * n_hard)))
    rng.shuffle(pairs)
    what = "hard examples" if mined is not None else "every pair"
    of = " and ".join(map(str, folders))
    stats = {"task": source["task"], "data": f"{what} of {of}" + (f", {replay} replayed" if replay else ""),
             "mined_model": mined and mined.get("model"), "mined_weights": mined and mined.get("weights"),
             "reactions": len(wrong) if wrong is not None else sum(map(folder_reactions, folders.values())),
             "wrong_reactions": None if wrong is None else sum(wrong), "right_writings": right_writings,
             "hard_pairs": n_hard, "replay": str(replay) if replay else None, "replay_pairs": len(pairs) - n_hard,
             "seed": seed, "augment": source.get("augment", 1), "train": len(pairs)}
    splits = {"train": pairs, "val": split(data, "val"), "test": split(data, "test")}
    stats.update(val=len(splits["val"]), test=len(splits["test"]))
    write_splits(out, splits, stats, vocab)
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("starts", help="write the first line of each training reaction (for evaluate --index)")
    s.add_argument("--data", type=Path, required=True, help="the prepare-data folder whose train split to read")
    s.add_argument("--out", type=Path, required=True, help="the index file to write, one 0-based line number a line "
                   "(not a file of --data it reads)")
    b = sub.add_parser("build", help="write the hard examples (and the replay) as a training folder")
    b.add_argument("--data", type=Path, required=True, help="the prepare-data folder that was mined")
    b.add_argument("--mined", type=Path, default=None, help="evaluate's report on `starts`' index; without it "
                   "every pair of --data is kept (reactions new to the model)")
    b.add_argument("--also", type=Path, action="append", default=[], help="without --mined: another prepare-data "
                   "folder of new reactions in --data's vocabulary whose every pair joins (repeatable; the validation "
                   "split stays --data's)")
    b.add_argument("--out", type=Path, required=True, help="the training folder to write (neither an input "
                   "folder nor inside one)")
    b.add_argument("--right-writings", type=at_least(0), default=3,
                   help="random writings kept of each reaction the model got right (default 3)")
    b.add_argument("--replay", type=Path, default=None, help="a prepare-data folder whose train pairs to replay")
    b.add_argument("--replay-ratio", type=argtype(Bounds(low=0)), default=1.0,
                   help="replayed pairs per hard pair (default 1)")
    b.add_argument("--seed", type=int, default=0, help="seed of the random writings and replay draw (default 0)")
    args = parser.parse_args()
    try:  # before any reading: the inputs are there, and the output is not (nor is written into) what the run reads
        if args.command == "starts":
            check_inputs(("--data", args.data / name) for name in STARTS_READS)
            check_outputs([("--out", args.out)], [(f"--data's {name}", args.data / name) for name in STARTS_READS])
        else:
            check_inputs([*(("--data", args.data / name) for name in BUILD_READS + SPLITS_KEPT),
                          ("--mined", args.mined),
                          *(("--replay", args.replay / name) for name in BUILD_READS if args.replay),
                          *(("--also", folder / name) for folder in args.also for name in BUILD_READS)])
            check_output_folder("--out", args.out, [("--data", args.data), ("--mined", args.mined),
                                                    ("--replay", args.replay), *(("--also", f) for f in args.also)])
    except (InputFileError, OutputFileError) as exc:
        parser.error(str(exc))
    if args.command == "starts":
        try:
            starts = folder_starts(args.data, split(args.data, "train"))
        except ValueError as exc:  # a stats.json that is not JSON: json's traceback
            parser.error(str(exc))
        write_text_file(args.out, "".join(f"{i}\n" for i in starts))
        print(f"{len(starts)} reactions")
    else:
        try:
            mined = read_json("--mined", args.mined) if args.mined else None
        except InputFileError as exc:
            parser.error(str(exc))
        try:  # build's refusals come before it writes: they were tracebacks
            stats = build(args.data, mined, args.out, args.right_writings, args.replay,
                          args.replay_ratio, args.seed, tuple(args.also))
        except ValueError as exc:
            parser.error(str(exc))
        except KeyError as exc:  # a report of another kind
            parser.error(f"--mined {args.mined}: not evaluate's report on `starts`' index (it has no {exc})")
        print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
