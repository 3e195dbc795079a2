"""The GPU training kit: what runs here and what runs on the lent GPU machine (tools/gpu_train.md).

Here (RDKit available):
  python3 tools/gpu_kit.py pack                 # data/<task>/ -> gpu/<task>/ (compressed arrays, test ids)
  python3 tools/gpu_kit.py stage | unstage      # keep models/ from travelling with device commands, and back
  python3 tools/gpu_kit.py unpack DIR           # <task>.tar.NN parts from the device -> runs/gpu_<task>/export
  python3 tools/gpu_kit.py score --task forward --pred DIR/forward_test_nbest.tsv.gz [--limit N]
  python3 tools/gpu_kit.py score --task retro --pred DIR/retro_test_writings.jsonl.gz --writings 5
On the GPU machine (no RDKit; run from the repository root):
  python3 tools/gpu_kit.py start --minutes 20   # forward and retro training, detached, resumed if it can
  python3 tools/gpu_kit.py watch --seconds 480  # progress lines while the training runs
  python3 tools/gpu_kit.py collect --out $OUT   # each export as tar parts of at most 15 MiB
  python3 tools/gpu_kit.py decode --task forward --out $OUT --n-best 5 --limit 5000
  python3 tools/gpu_kit.py decode --task retro --out $OUT --n-best 10 --writings 20   # packed with --writings 20
  python3 tools/gpu_kit.py speed --task retro --out $OUT --batch-size 1 --limit 50   # needs RDKit: carried wheels

Files come back from the device only through $OUT: at most 8 files of 16 MiB, 64 MiB together, so an
export (a float16 model folder) travels as a tar split into 15 MiB parts: forward 2, retro 3.
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from molspec_core.argtypes import Bounds, argtype, at_least  # noqa: E402  (plain Python: the device has what it needs)

if TYPE_CHECKING:  # annotations only: each command imports what it uses when it runs (the device has no RDKit)
    import numpy as np

    from molspec_core.tokenizer import Vocab

TASKS = ("forward", "retro")
PRESET = {"forward": "forward", "retro": "retro"}  # the paper's sizes: 4+4 and 6+6 layers

# Tokens per optimizer step on the GPU (session 23's choice, not yet measured on one). The first block's
# 32,768 left the H100 mostly idle: forward's step is about 2.3 TFLOP (6 x 11.6 M parameters x 32,768
# tokens), some 10-15 ms of GPU work by our estimate, yet it ran at 20 steps a second (50 ms a step)
# and nvidia-smi showed the GPU 14% busy at minute 8: host launches and syncs set the pace. With the
# step's syncs gone, a step of 3x the tokens should take little longer, so the same minutes would read
# about 3x the data (the paper-size runs read some 2 G tokens). Activation memory, estimated: about
# 20 GB for retro, 13 GB for forward, of 80. The "speed at" log lines will say what it gained.
GPU_TOKENS = 98_304

# The fixed benchmark samples (../shared/bench/README.md): line numbers of each task's test split,
# which prepare-data writes in the order of the files the indexes count; the first 200 are the quick set.
QUICK_INDEX = {"forward": "uspto_mit_test_500.idx", "retro": "uspto50k_test_500.idx"}
QUICK = 200
PART_BYTES = 15 * 1024 * 1024  # under the device's 16 MiB per returned file
CARRY_BYTES = 64 * 1024 * 1024  # what one device command may take: the tree that travels and its carry together
GPU_DIR = ROOT / "gpu"  # what travels as `carry`: data and resume exports
RUNS = ROOT / "runs"
MODELS = ROOT / "models"  # the shipped weights the plan trains on from (`start --init models`)
EXCLUDE = ROOT / ".git" / "info" / "exclude"


def gpu_run(task: str) -> Path:
    return RUNS / f"gpu_{task}"


def task_list(text: str) -> list[str]:
    """An argparse type: comma-separated task names, each one of TASKS (`pack --tasks forwrd` made an empty
    gpu/forwrd before it failed)."""
    tasks = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise argparse.ArgumentTypeError(f"unknown task {', '.join(map(repr, unknown)) or repr(text)}; the tasks "
                                         f"are {', '.join(TASKS)}")
    return tasks


def engine_list(text: str) -> list[str]:
    """An argparse type: speed --engines, as the CLI's bench reads its --engines (cli.engine_names), imported when
    the flag is read, for the CLI imports RDKit: only speed takes it, and speed needs RDKit anyway."""
    from molspec_core.cli import engine_names

    try:
        return engine_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ---- here -----------------------------------------------------------------------------------------

def cmd_pack(args: argparse.Namespace) -> None:
    """Copy the prepared arrays and tokenize the test sources (ids only: the device has no RDKit)."""
    from molspec_core.chem import silence_rdkit
    from molspec_core.tokenizer import Vocab

    silence_rdkit()  # a line on stderr for each test query RDKit cannot read hid the sizes and notes pack prints
    needed = ("train.npz", "val.npz", "vocab.json", "stats.json", "test.src")
    for task in args.tasks:  # every task's data checked before anything is written
        lacking = [name for name in needed if not (Path(args.data) / task / name).is_file()]
        if lacking:
            raise SystemExit(f"{task}: {Path(args.data) / task} lacks {', '.join(lacking)} (prepare-data --task "
                             f"{task} --out {Path(args.data) / task} writes them); nothing was packed")
    if not args.other_vocab:
        for task in args.tasks:
            check_shipped_vocab(task, Vocab.load(Path(args.data) / task / "vocab.json"))
    for task in args.tasks:
        dst = GPU_DIR / task
        new = _fresh_folder(dst.with_name(dst.name + ".new"))
        try:  # written aside and swapped in whole: a full disk or Ctrl-C left gpu/<task> half one pack, half another
            _pack_task(task, Path(args.data) / task, new, args)  # (new arrays beside old test ids) and a traceback
        except BaseException as exc:
            shutil.rmtree(new, ignore_errors=True)
            if not isinstance(exc, OSError):
                raise
            held = f"{dst} holds the pack before it, unchanged" if dst.is_dir() else "nothing was packed for it"
            raise SystemExit(f"{task}: the pack could not be written in {GPU_DIR} ({exc.strerror or exc}); {held}; "
                             "pack again once it can be written") from None
        _swap_in(new, dst)
        sizes = {f.name: f.stat().st_size for f in sorted(dst.iterdir())}
        print(f"{dst}: {sum(sizes.values()) / 1e6:.1f} MB {sizes}")


def _pack_task(task: str, src_dir: Path, dst: Path, args: argparse.Namespace) -> None:
    """One task's pack into the empty folder `dst`: its arrays, vocabulary and stats, its test queries as token ids
    (and their other writings, with --writings), and the benchmark's quick set where its index fits the test split."""
    import numpy as np

    from molspec_core.data import pack_ids, read_lines, root_aligned
    from molspec_core.evaluate import read_pairs
    from molspec_core.tokenizer import UNK_ID, Vocab

    for name in ("train.npz", "val.npz", "vocab.json", "stats.json"):
        shutil.copyfile(src_dir / name, dst / name)
    vocab = Vocab.load(src_dir / "vocab.json")
    sources = read_lines(src_dir / "test.src")[: args.test_limit or None]
    ids = [vocab.encode(s, strict=False) for s in sources]
    refused = np.array([UNK_ID in row or not row for row in ids])  # the service refuses these queries
    flat, offsets = pack_ids(ids)
    arrays = {"src": flat, "src_offsets": offsets, "refused": refused}
    if args.writings > 1 and root_aligned(json.loads((src_dir / "stats.json").read_text())):
        arrays.update(_pack_writings(sources, refused, args.writings, vocab))
    elif args.writings > 1:  # other writings would only confuse such a model (service.augmentable)
        print(f"{task}: trained on one writing of each query, so no other writings are packed")
    np.savez_compressed(dst / "test.npz", **arrays)
    index = Path(args.bench) / QUICK_INDEX[task]
    try:  # for `speed` on the device
        if not index.exists():
            raise ValueError(f"{index} missing")
        quick_src, quick_tgt = read_pairs(str(src_dir / "test.src"), str(src_dir / "test.tgt"), str(index), QUICK)
    except ValueError as exc:  # another test split than the benchmark's: was a traceback, the next task not packed
        print(f"{task}: no quick set for `speed` ({exc})")  # and no earlier pack's, of another split, for speed to read
    else:
        (dst / "quick.src").write_text("".join(q + "\n" for q in quick_src))
        (dst / "quick.tgt").write_text("".join(t + "\n" for t in quick_tgt or []))


def check_shipped_vocab(task: str, vocab: Vocab) -> None:
    """Refuse data whose vocabulary is not the shipped model's: the block trains on from those weights, and a
    model trained on another vocabulary no longer pairs with the shipped draft model (`models/<task>/draft`; the
    folder would not load), nor reads every token the shipped one reads. A vocabulary prepare-data builds from
    today's rows is such a one (forward lacks '[Si@@H]' since session 76's leakage filter)."""
    from molspec_core.tokenizer import Vocab

    shipped_file = MODELS / task / "vocab.json"
    if not shipped_file.is_file():
        return
    shipped = Vocab.load(shipped_file)
    if shipped.tokens == vocab.tokens:
        return
    only = sorted(set(shipped.tokens) ^ set(vocab.tokens))
    detail = f"{len(vocab)} tokens against {len(shipped)}" + (f", {', '.join(only[:3])} in one only" if only else
                                                               ", in another order")
    raise SystemExit(f"{task}: the data's vocabulary differs from {shipped_file} ({detail}): weights trained on it "
                     f"would not pair with the shipped draft model; prepare it again with --vocab {shipped_file} "
                     f"(tools/gpu_train.md), or pack it with --other-vocab to train a model of its own; nothing "
                     "was packed")


def _pack_writings(sources: list[str], refused: Sequence[bool], n: int, vocab: Vocab) -> dict[str, np.ndarray]:
    """The other root writings of each test query, as the app reads them (test-time augmentation): the
    device has no RDKit to write them. writing_query[j] is the query of writing j."""
    import numpy as np

    from molspec_core.chem import canonical_or_none
    from molspec_core.data import pack_ids
    from molspec_core.service import MAX_QUERY_TOKENS, other_writings

    ids, owner = [], []
    for i, source in enumerate(sources):
        canonical = None if refused[i] else canonical_or_none(source)
        for _, writing in other_writings(canonical, n, vocab, MAX_QUERY_TOKENS) if canonical else []:
            ids.append(list(writing))
            owner.append(i)
    flat, offsets = pack_ids(ids)
    print(f"{len(ids)} other writings of {len(sources)} queries (up to {n} writings each)")
    return {"writings": flat, "writing_offsets": offsets, "writing_query": np.array(owner, dtype=np.int64)}


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def cmd_stage(_: argparse.Namespace) -> None:
    """Take models/ out of the index and ignore it, so it does not travel (gpu/ travels as `carry`)."""
    lines = EXCLUDE.read_text().splitlines() if EXCLUDE.exists() else []
    EXCLUDE.parent.mkdir(exist_ok=True)  # a checkout may lack .git/info
    EXCLUDE.write_text("\n".join(lines + ["/models/"] * ("/models/" not in lines)) + "\n")
    _git("rm", "-r", "-q", "--cached", "--ignore-unmatch", "models")  # a second stage finds nothing to take out
    print("models/ is out of the index until `unstage`; do not commit meanwhile.")
    print(travel_sizes())


def _file_bytes(paths: list[Path]) -> int:
    return sum(path.lstat().st_size for path in paths if path.is_file() and not path.is_symlink())


def travel_sizes() -> str:
    """What a start command takes to the device, measured now (the tree grows with each session's reports): the
    tree that travels (tracked files and the untracked ones git does not ignore) and, for each packed task, with
    gpu/<task> and models/<task> carried, against the device's limit."""
    names = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    tree = _file_bytes([ROOT / name for name in names if name])
    lines = [f"the tree that travels with every command: {tree / 1e6:.1f} MB; a command may take "
             f"{CARRY_BYTES / 1e6:.1f} MB (64 MiB), its carry included"]
    for task in TASKS:
        carry = {f"{folder.parent.name}/{task}": _file_bytes(list(folder.rglob("*")))
                 for folder in (GPU_DIR / task, MODELS / task) if folder.is_dir()}
        if f"{GPU_DIR.name}/{task}" not in carry:
            continue
        total = tree + sum(carry.values())
        over = (total - CARRY_BYTES) / 1e6
        verdict = "fits" if over <= 0 else f"{over:.1f} MB over: the device refuses it"
        listed = ", ".join(f"{name} {size / 1e6:.1f} MB" for name, size in carry.items())
        lines.append(f"{task}'s start command (carry {listed}): {total / 1e6:.1f} MB, {verdict}")
    return "\n".join(lines)


def cmd_unstage(_: argparse.Namespace) -> None:
    _git("reset", "-q", "--", "models")
    lines = EXCLUDE.read_text().splitlines() if EXCLUDE.exists() else []
    EXCLUDE.write_text("\n".join(x for x in lines if x != "/models/") + "\n")
    print("models/ is back in the index.")


def cmd_unpack(args: argparse.Namespace) -> None:
    """Rejoin <task>.tar.NN parts into runs/gpu_<task>/export and gpu/resume/<task> (the next command's start).
    Every task's parts are checked first (all numbers present, one whole tar, an export with its counters in
    it); only then are the old folders replaced, each by a rename, so a bad download replaces nothing."""
    import tempfile

    from molspec_core import checkpoint
    from molspec_core.train import read_state

    folder = Path(args.dir)
    if not folder.is_dir():
        raise SystemExit(f"unpack {folder}: " + ("not a folder" if folder.exists() else "no such folder"))
    found = {task: sorted(folder.glob(f"{task}.tar.[0-9][0-9]")) for task in TASKS}
    if not any(found.values()):
        raise SystemExit(f"{folder} holds no <task>.tar.NN parts ({', '.join(f'{t}.tar.00' for t in TASKS)}, ...): "
                         "nothing to unpack")
    with tempfile.TemporaryDirectory() as tmp:
        staged: dict[str, tuple[Path, dict]] = {}
        for task, parts in found.items():
            if not parts:
                continue
            numbers = {int(p.name.rsplit(".", 1)[1]) for p in parts}
            missing = sorted(set(range(max(numbers) + 1)) - numbers)
            if missing:
                raise SystemExit(f"{task}: {', '.join(f'{task}.tar.{n:02d}' for n in missing)} missing from "
                                 f"{folder}; nothing was replaced")
            try:
                with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as tar:
                    tar.extractall(Path(tmp) / task, filter="data")
            except (tarfile.TarError, EOFError, OSError) as exc:
                raise SystemExit(f"{task}: {len(parts)} parts in {folder} do not make a whole tar ({exc}): a part "
                                 "is missing or cut short (the last one, if the numbers run on); nothing was "
                                 "replaced") from None
            export = Path(tmp) / task / "export"
            try:
                state = read_state(export)
            except ValueError as exc:
                raise SystemExit(f"{task}: the parts in {folder} hold no export/ with a readable train_state.json "
                                 f"({exc}); nothing was replaced") from None
            for dest in (gpu_run(task) / "export", GPU_DIR / "resume" / task):
                if (later := _later_step(state, dest)) is not None:  # block 1's collect unpacked after block 2's
                    raise SystemExit(f"{task}: {dest} holds a later export of the same run (step {later}) than the "
                                     f"parts in {folder} (step {state['step']}): they would replace it with older "
                                     f"weights, from which the next block would resume; nothing was replaced (move "
                                     f"{dest} away to unpack them all the same)")
            summary = f"step {state['step']}, {state['seconds'] / 60:.1f} min, last validation {state['history'][-1:]}"
            try:  # a tar cut short may still list its first members: the weights must load, every one finite
                checkpoint.load(export)
            except ValueError as exc:
                raise SystemExit(f"{task}: the export in the parts in {folder} does not load ({exc}): a part is "
                                 "missing or damaged; nothing was replaced") from None
            staged[task] = (export, summary)
        # every copy made before any folder is replaced: a full disk at gpu/resume/<task> left runs/gpu_<task>/export
        # the new export and gpu/resume/<task>, whence the next block resumes, the old one (and a traceback)
        copies: list[tuple[Path, Path]] = []
        try:
            for task, (export, _) in staged.items():
                for dest in (gpu_run(task) / "export", GPU_DIR / "resume" / task):
                    new = _fresh_folder(dest.with_name(dest.name + ".new"))
                    copies.append((new, dest))
                    shutil.copytree(export, new, dirs_exist_ok=True)
        except OSError as exc:
            for new, _ in copies:
                shutil.rmtree(new, ignore_errors=True)
            raise SystemExit(f"the parts in {folder} could not be copied into place ({exc.strerror or exc}); nothing "
                             "was replaced; unpack them again once that can be written") from None
        for new, dest in copies:
            _swap_in(new, dest)
        for task, (_, summary) in staged.items():
            print(f"{task}: {summary}")


def _later_step(state: dict, dest: Path) -> int | None:
    """The step of the export in `dest` where it is a later one of the run `state` (a train_state.json) is an export
    of: its validations begin with all of state's (one at least: a run's first exports have none, and cannot be told
    from another run's) and it has made more steps; else None."""
    from molspec_core.train import read_state

    try:
        held = read_state(dest)
    except ValueError:  # none there, or not an export
        return None
    history = state["history"]
    if history and held["history"][:len(history)] == history and held["step"] > state["step"]:
        return held["step"]
    return None


def _fresh_folder(folder: Path) -> Path:
    """`folder`, empty (a leftover of an interrupted write removed), its parents made."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _swap_in(new: Path, dest: Path) -> None:
    """Put the finished folder `new` in dest's place by renames, the old folder deleted last."""
    old = dest.with_name(dest.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        dest.rename(old)
    new.rename(dest)
    shutil.rmtree(old, ignore_errors=True)


def _is_writings_line(line: str) -> bool:
    """Whether a line of a `decode` answers file is a JSON list (decode --writings) rather than tab-separated SMILES
    (no SMILES is JSON: a bracket atom holds an element's letters)."""
    try:
        return isinstance(json.loads(line), list)
    except ValueError:
        return False


def read_answers(pred: Path, task: str, writings: int) -> list[str]:
    """The lines of a `decode` answers file, refused (SystemExit) where it cannot be what `score` is asked to read: a
    writings file scored as n-best lines gave "top1": 0.0 without a word, an n-best file scored with --writings a
    JSONDecodeError, an empty file a ZeroDivisionError, and the other task's file its queries' wrong targets."""
    from molspec_core.data import read_lines

    other = next(t for t in TASKS if t != task)
    if pred.name.startswith(f"{other}_test_"):  # decode names its file by the task it decoded
        raise SystemExit(f"{pred} holds {other} answers (decode --task {other} wrote it); score it with --task {other}")
    try:
        lines = read_lines(pred)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--pred {pred} cannot be read ({exc})") from None
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        raise SystemExit(f"--pred {pred} holds no answers")
    if _is_writings_line(first) and not writings:
        raise SystemExit(f"--pred {pred} is a writings file (decode --writings): give --writings N to pool each "
                         "query's first N writings (1: its own writing alone)")
    if writings and not _is_writings_line(first):
        raise SystemExit(f"--pred {pred} is an n-best file (decode without --writings): score it without --writings")
    return lines


def cmd_score(args: argparse.Namespace) -> None:
    """Top-k of a device n-best file against the task's test targets, canonicalized with RDKit here. A
    writings file (decode --writings) is pooled over each query's first --writings writings as the app
    pools them (service.pool_writings); with --writings 1, its own writing is scored as a plain n-best file."""
    from molspec_core.chem import canonical_or_none, silence_rdkit
    from molspec_core.data import read_lines
    from molspec_core.evaluate import hits
    from molspec_core.service import pool_writings

    silence_rdkit()  # each answer RDKit cannot read printed a "SMILES Parse Error" line above the scores
    targets_file = Path(args.data) / args.task / "test.tgt"
    lines = read_answers(Path(args.pred), args.task, args.writings)
    try:
        targets = read_lines(targets_file)
    except (OSError, ValueError) as exc:  # a FileNotFoundError traceback
        raise SystemExit(f"{targets_file} cannot be read ({exc}): --data is the folder of prepared <task>/ data "
                         f"whose test split was packed") from None
    if len(lines) > len(targets):  # zip scored the first len(targets) and divided by them all
        raise SystemExit(f"{args.pred} holds answers to {len(lines):,} queries, and {targets_file} {len(targets):,}: "
                         "they were decoded from other test queries than these")
    if args.writings:
        queries = [json.loads(line)[: args.writings] for line in lines]
    else:
        rows = [line.split("\t") if line.strip() else [] for line in lines]
    if args.writings == 1:  # the query's own writing in its beam's order, as without writings (the papers' scoring)
        rows = [[text for text, _ in writings[0]] if writings else [] for writings in queries]
    elif args.writings:  # the best n-best of the pool, as the app keeps them (n-best: the decode's beam width)
        width = max((len(writing) for writings in queries for writing in writings), default=1)
        rows = [[answer for answer, _, _ in pool_writings(
                    [[(canonical_or_none(text) or text, score) for text, score in writing]
                     for writing in writings])][:width]
                for writings in queries]
    rows = rows[: args.limit or None]
    n_best = max((len(r) for r in rows), default=1)
    correct = [0] * n_best
    for preds, target in zip(rows, targets):
        first = next((k for k, hit in enumerate(hits(preds, target)) if hit), None)
        for k in range(first if first is not None else n_best, n_best):
            correct[k] += 1
    report = {f"top{k + 1}": round(correct[k] / len(rows), 4) for k in range(n_best)}
    report.update(n=len(rows), refused=sum(not r for r in rows))
    if args.writings:
        report.update(writings=args.writings)
    print(json.dumps(report))


# ---- on the GPU machine ---------------------------------------------------------------------------

def _trained(folder: Path) -> tuple[int, float]:
    """(step, minutes) a save or export has trained, from its train_state.json."""
    from molspec_core.train import read_state

    try:
        state = read_state(folder)
    except ValueError as exc:  # read_state's message names the file
        raise SystemExit(str(exc)) from None
    return state["step"], state["seconds"] / 60


def start_plan(task: str, args: argparse.Namespace) -> tuple[list[str], str]:
    """The trainer's flags for where `task` starts (its own run folder's last/, an export to resume, --init
    weights or nothing), and a line saying what it will train. --minutes is each run's whole budget, the minutes
    already trained included (tools/gpu_train.md): a budget they have spent is refused with the numbers (it
    trained 0 steps and wrote no export)."""
    run, resume = gpu_run(task), GPU_DIR / "resume" / task
    if (run / "last" / "train_state.json").exists():
        flags, source = [], run / "last"
        origin = f"continues its own run in {source}"
    elif (resume / "train_state.json").exists():
        flags, source = ["--resume", str(resume)], resume
        origin = f"resumes the export {resume}"
    elif args.init:  # a new schedule from trained weights (models/<task>)
        flags, source = ["--init", str(Path(args.init) / task)], None
        origin = f"starts a new schedule from {Path(args.init) / task}"
    else:
        flags, source = [], None
        origin = "starts from random weights"
    step, done = _trained(source) if source is not None else (0, 0.0)
    if source is not None:
        origin += f" (step {step}, {done:.2f} min trained)"
        if args.init:
            origin += f"; --init {args.init} is not read (remove {source} to start from it)"
    if done >= args.minutes:
        raise SystemExit(f"{task}: {source} has trained {done:.2f} minutes, and --minutes {args.minutes:g} is the "
                         f"run's whole budget, the minutes trained included (tools/gpu_train.md): it would make no "
                         f"step; give --minutes {done:.2f} + the minutes to add (e.g. {math.ceil(done) + 5} for "
                         "about 5 more); nothing was started")
    plan = (f"{task}: {origin}; trains {args.minutes - done:.2f} minutes more, to {args.minutes:g} in all "
            f"(the learning rate reaches 0 there), from step {step}")
    return flags, plan


def cmd_start(args: argparse.Namespace) -> None:
    """Both trainings as detached processes (they outlive this command), resumed where possible. Every task's
    start is planned (and refused, should its budget be spent) before any trainer starts."""
    plans = {task: start_plan(task, args) for task in args.tasks if not _running(gpu_run(task))}
    for task in args.tasks:
        run = gpu_run(task)
        if task not in plans:
            print(f"{task}: already training (pid {(run / 'train.pid').read_text()})", flush=True)
            continue
        flags, plan = plans[task]
        run.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "molspec_core.train", "--data", str(GPU_DIR / task), "--out", str(run),
               "--preset", PRESET[task], "--max-minutes", str(args.minutes), "--export-every-minutes", "3",
               "--eval-every", str(args.eval_every), "--val-greedy-rows", "500", "--warmup", str(args.warmup),
               "--max-tokens", str(args.tokens)]
        if args.lr:
            cmd += ["--lr", str(args.lr)]
        if args.label_smoothing is not None:
            cmd += ["--label-smoothing", str(args.label_smoothing)]
        if args.ema:
            cmd += ["--ema", str(args.ema)]
        cmd += flags
        if args.compile:
            cmd.append("--compile")
        log_path = run / "train.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        # Every batch has its own shape: expandable segments let the allocator grow one mapping
        # instead of holding (and at times freeing and re-making) a block per size.
        env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", **os.environ, "PYTHONUNBUFFERED": "1"}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=env)
        (run / "train.pid").write_text(str(proc.pid))
        print(plan, flush=True)
        print("started:", " ".join(cmd), flush=True)
        _wait_inputs_read(task, proc, log_path, offset, args.ready_seconds)


def _wait_inputs_read(task: str, proc: subprocess.Popen, log_path: Path, offset: int, seconds: float) -> None:
    """Return once the trainer has read its data and --init/--resume weights. The device syncs the
    working tree at each command, and a path not carried by that command can vanish: session 30's
    forward run, started by a command that returned at once, found models/forward gone (the next
    command carried only models/retro) and died. A trainer that exits first is reported, not hidden."""
    from molspec_core.train import INPUTS_READ

    end = time.time() + seconds
    while time.time() < end:
        lines = _log_lines(log_path, offset)
        if any(INPUTS_READ in line for line in lines):
            print(f"{task}: inputs read", flush=True)
            return
        if proc.poll() is not None:
            tail = "\n".join(lines[-15:])
            raise SystemExit(f"{task}: the trainer exited (code {proc.returncode}) before reading its inputs:\n{tail}")
        time.sleep(0.5)
    raise SystemExit(f"{task}: the trainer has not read its inputs after {seconds:.0f} s (still running: "
                     f"pid {proc.pid}); do not sync paths it reads until {log_path} says {INPUTS_READ!r}")


def _running(run: Path) -> bool:
    """Whether the training process this run folder records is alive (a fresh machine has none)."""
    try:
        stat = Path(f"/proc/{int((run / 'train.pid').read_text())}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a finished child of this process stays a zombie


def _last_line(path: Path) -> str:
    if not path.exists():
        return "(no log yet)"
    text = path.read_bytes()[-4000:].decode(errors="replace").replace("\r", "\n")
    lines = [x for x in text.splitlines() if x.strip()]
    return lines[-1][-200:] if lines else ""


def cmd_watch(args: argparse.Namespace) -> None:
    """A progress line per task each minute, until the time is up or no training runs."""
    end, next_print = time.time() + args.seconds, 0.0
    while time.time() < end:
        if not any(_running(gpu_run(task)) for task in TASKS):
            print("no training process is running", flush=True)
            for task in [t for t in TASKS if (gpu_run(t) / "train.log").exists()]:  # why it ended, in this output
                print(f"{task}: its log ends: {_log_end(gpu_run(task) / 'train.log')}", flush=True)
            return
        if time.time() >= next_print:
            # the tasks started on this machine only: a forward-alone block printed "retro: (no log yet)" each minute
            for task in [t for t in TASKS if gpu_run(t).is_dir()]:
                print(f"[{time.strftime('%H:%M:%S')}] {task}: {_last_line(gpu_run(task) / 'train.log')}", flush=True)
            next_print = time.time() + 60
        time.sleep(min(2, max(0, end - time.time())))


def _log_end(log: Path) -> str:
    """The last line of a training log that says how it ended: an error, or its last validation or speed line (not
    the history the trainer prints as JSON at its end)."""
    said = [line for line in _log_lines(log) if line.strip() not in ("[", "]", "[]") and not line.startswith(" ")]
    return said[-1][:300] if said else "(nothing yet)"


def _log_lines(log: Path, offset: int = 0) -> list[str]:
    """A training log (from byte `offset`) without its progress bar (tqdm redraws it with carriage
    returns: most of the bytes)."""
    lines = []
    for line in log.read_bytes()[offset:].decode(errors="replace").replace("\r", "\n").splitlines():
        if line.startswith("train:"):  # a redraw; a log line may follow it on the same line, after its "]"
            line = line.partition("]")[2]
        if line.strip():
            lines.append(line)
    return lines


def export_tar(export: Path, tries: int = 20) -> bytes | None:
    """The export folder as a tar of one export, read while the training may replace it: train writes each
    export into export.tmp and renames it in place of the last (train._replace_folder), so a read that
    overlaps the swap may find no folder, or take files of two exports (shards of different steps, a model
    that loads and is wrong). The folder's inode before and after the read tells a whole read from a mixed
    one; a mixed or failed read is retried. None where no complete export is found."""
    for attempt in range(tries):
        if attempt:
            time.sleep(0.25)
        try:
            before = export.stat().st_ino
            files = {f.name: f.read_bytes() for f in sorted(export.iterdir())}
            if export.stat().st_ino != before or "train_state.json" not in files:
                continue
        except (FileNotFoundError, NotADirectoryError):
            continue
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, content in files.items():
                info = tarfile.TarInfo(f"export/{name}")
                info.size, info.mtime, info.mode = len(content), int(time.time()), 0o644
                tar.addfile(info, io.BytesIO(content))
        return buf.getvalue()
    return None


def out_folder(command: str, out: str) -> Path:
    """A command's --out, refused before any work where it is no folder: decode wrote its answers there after the
    minutes of decoding, and a mistyped --out lost them in a FileNotFoundError."""
    folder = Path(out)
    if not folder.is_dir():
        raise SystemExit(f"{command} --out {folder}: " + ("not a folder" if folder.exists() else "no such folder"))
    return folder


def cmd_collect(args: argparse.Namespace) -> None:
    """Each task's latest export as <task>.tar.NN parts in the device's output folder, and one
    train_logs.txt.gz with both tasks' log lines (speed, validation, errors) for the model cards."""
    out = out_folder("collect", args.out)
    logs = [f"== {task}: {line}" for task in TASKS if (gpu_run(task) / "train.log").exists()
            for line in _log_lines(gpu_run(task) / "train.log")]
    if logs:  # one file for both: a command may return only 8 (forward 2 parts, retro 3, two n-best files)
        (out / "train_logs.txt.gz").write_bytes(gzip.compress("".join(x + "\n" for x in logs).encode()))
    for task in TASKS:
        if not gpu_run(task).is_dir():
            continue
        data = export_tar(gpu_run(task) / "export")
        if data is None:
            print(f"{task}: no complete export yet (the run writes its first after --export-every-minutes)",
                  flush=True)
            continue
        for i in range(0, len(data), PART_BYTES):
            (out / f"{task}.tar.{i // PART_BYTES:02d}").write_bytes(data[i:i + PART_BYTES])
        print(f"{task}: {len(data) / 1e6:.1f} MB in {-(-len(data) // PART_BYTES)} parts", flush=True)


def cmd_decode(args: argparse.Namespace) -> None:
    """n-best beam search over the tokenized test sources; one line per query, tab-separated SMILES. With
    --writings N (a task packed with them), each query is read in up to N writings and every writing's
    answers are kept with their log-probabilities, one JSON line per query (a list of writings, the
    query's own first; [] for a refused one), for `score --writings` to pool here."""
    import numpy as np
    import torch

    from molspec_core import checkpoint
    from molspec_core.decoding.beam import beam_search

    out = out_folder("decode", args.out)
    packed = GPU_DIR / args.task / "test.npz"
    if not packed.is_file():
        raise SystemExit(f"decode --task {args.task}: {packed} is missing (`pack --tasks {args.task}` writes it here, "
                         f"and {GPU_DIR / args.task} travels as carry); nothing decoded")
    model_dir = Path(args.model) if args.model else gpu_run(args.task) / "export"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if not args.model and _running(gpu_run(args.task)):  # `watch` ran out before the run ended
        model, vocab = _load_running_export(args.task, device)
    elif not args.model and not (model_dir / "config.json").is_file():  # was a CheckpointError traceback
        raise SystemExit(f"decode --task {args.task}: {model_dir} holds no export ({args.task} has not trained on this "
                         "machine, or not yet for --export-every-minutes); give --model FOLDER to decode another "
                         "model; nothing decoded")
    else:
        model, vocab, _ = checkpoint.load(model_dir, device)
    with np.load(packed) as z:
        arrays = {name: z[name] for name in z.files}
    flat, offsets, refused = arrays["src"], arrays["src_offsets"], arrays["refused"]
    n = min(len(refused), args.limit or len(refused))
    rows = [flat[offsets[i]:offsets[i + 1]].tolist() for i in range(n)]
    owner = list(range(n))  # the query each row is a writing of
    if args.writings > 1:
        if "writings" not in arrays:
            raise SystemExit(f"{args.task}: test.npz holds no other writings; run `pack --writings N` here first")
        w_flat, w_offsets, w_query = arrays["writings"], arrays["writing_offsets"], arrays["writing_query"]
        per_query = [0] * n
        for j, i in enumerate(w_query.tolist()):
            if i < n and per_query[i] < args.writings - 1:
                per_query[i] += 1
                rows.append(w_flat[w_offsets[j]:w_offsets[j + 1]].tolist())
                owner.append(i)
    answers: list[list[tuple[str, float]]] = [[] for _ in rows]
    # similar lengths batch well
    todo = sorted((r for r in range(len(rows)) if not refused[owner[r]]), key=lambda r: len(rows[r]))
    started = time.time()
    with torch.inference_mode():
        for b in range(0, len(todo), args.batch_size):
            chunk = todo[b:b + args.batch_size]
            for r, result in zip(chunk, beam_search(model, [rows[r] for r in chunk], args.n_best)):
                answers[r] = [(vocab.decode(h.tokens), round(float(h.score), 4)) for h in result.hypotheses]
    if args.writings > 1:
        by_query: list[list[list]] = [[] for _ in range(n)]
        for r, i in enumerate(owner):
            if not refused[i]:
                by_query[i].append(answers[r])
        name = out / f"{args.task}_test_writings.jsonl.gz"
        text = "".join(json.dumps(writings) + "\n" for writings in by_query)
    else:
        name = out / f"{args.task}_test_nbest.tsv.gz"
        text = "".join("\t".join(answer for answer, _ in answers[i]) + "\n" for i in range(n))
    with gzip.open(name, "wt") as f:
        f.write(text)
    print(f"{args.task}: {n} queries ({int(refused[:n].sum())} refused), {len(todo)} rows decoded in "
          f"{time.time() - started:.0f} s -> {name}")


def _load_running_export(task: str, device: str) -> tuple:
    """(model, vocab) of the export a training still running last wrote, read whole as `collect` reads it (a load
    overlapping the trainer's swap of export.tmp into place found no folder, or shards of two steps), and a line
    saying which step it is and whether it is the run's last: a run that is ending has written its last export while
    it still saves out/last, and that export was called 'not the run's last'."""
    import tempfile

    from molspec_core import checkpoint
    from molspec_core.train import at_end, read_state

    data = export_tar(gpu_run(task) / "export")
    if data is None:
        raise SystemExit(f"{task}: its training still runs and has written no complete export yet; nothing decoded")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")  # the tar export_tar made here: export/<its files>
        state = read_state(Path(tmp) / "export")
        model, vocab, config = checkpoint.load(Path(tmp) / "export", device)
    recorded = config.get("train_config") if isinstance(config.get("train_config"), dict) else {}
    last = at_end(recorded.get("max_minutes") or 0, recorded.get("max_steps") or math.inf, state["step"],
                  state["seconds"])
    pid = (gpu_run(task) / "train.pid").read_text()
    print(f"{task}: its training is ending (pid {pid}): decoding its last export, of step {state['step']}" if last else
          f"{task}: its training still runs (pid {pid}): decoding its export of step {state['step']}, not the run's "
          "last", flush=True)
    return model, vocab


def cmd_speed(args: argparse.Namespace) -> None:
    """The project's own bench (every method interleaved, after warm-up) on a task's quick set, on the
    device's GPU; a JSON report per batch size in --out. Needs RDKit (queries are canonicalized as the
    service does), which the device lacks: install carried wheels first (tools/gpu_train.md)."""
    import torch

    from molspec_core.bench import markdown_table, on_engines, run_bench, save_report
    from molspec_core.cli import check_other_engine
    from molspec_core.evaluate import read_pairs
    from molspec_core.service import Predictor

    out, folder = out_folder("speed", args.out), GPU_DIR / args.task
    if not (folder / "quick.src").is_file():  # was a traceback once the models had loaded
        raise SystemExit(f"speed --task {args.task}: {folder / 'quick.src'} is missing: `pack` writes the quick set "
                         f"only where the benchmark index {QUICK_INDEX[args.task]} fits the test split (it said so); "
                         "nothing measured")
    model_dir = Path(args.model) if args.model else gpu_run(args.task) / "export"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    predictor = Predictor.load(str(model_dir), device)  # engine auto: torch on a GPU
    # The same weights on other engines (--engines graphs: CUDA graphs), each method interleaved on both; one that
    # runs the decoder calls where the kit's own rows or another of --engines' do would time an engine beside itself.
    engines: dict[str, Predictor] = {}
    for name in args.engines:
        try:
            engines[name] = Predictor.load(str(model_dir), device, engine=name)
            check_other_engine(name, engines[name].engine, "auto", predictor.engine, engines, main="the kit's engine")
        except ValueError as exc:
            engines.pop(name, None)
            print(f"engine {name} left out: {exc}", flush=True)
    methods = on_engines(args.methods.split(","), list(engines))
    sources, targets = read_pairs(str(folder / "quick.src"), str(folder / "quick.tgt"), None, args.limit or None)
    for batch_size in (int(b) for b in args.batch_size.split(",")):
        try:
            report = run_bench(predictor, sources, targets, methods, batch_size, args.n_best,
                               warmup=args.warmup, progress=False, engines=engines)
        except Exception as exc:  # a new engine's failure must not cost the block its speed table
            if not engines:
                raise
            print(f"with engines {', '.join(engines)}: {type(exc).__name__}: {exc}; measuring without them", flush=True)
            engines, methods = {}, args.methods.split(",")
            report = run_bench(predictor, sources, targets, methods, batch_size, args.n_best,
                               warmup=args.warmup, progress=False)
        report.update(task=args.task, quick_set=QUICK_INDEX[args.task], limit=len(sources),
                      gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else "none")
        save_report(report, out / f"{args.task}_gpu_speed_b{batch_size}.json", html=False)
        print(markdown_table(report), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="copy data/<task>/ arrays to gpu/<task>/ and tokenize the test queries")
    p.add_argument("--data", default=str(ROOT / "data"), help="folder of prepared <task>/ data (default <repo>/data)")
    p.add_argument("--tasks", type=task_list, default=list(TASKS),
                   help="tasks to pack, comma-separated (default forward,retro)")
    p.add_argument("--test-limit", type=at_least(0), default=0, help="first N test queries (0: all)")
    p.add_argument("--bench", default=str(ROOT.parent / "shared" / "bench"), help="the benchmark index files")
    p.add_argument("--writings", type=at_least(1), default=1, help="also the other root writings of each test query, "
                   "up to N in all, for `decode --writings` (tasks trained on root-aligned data only)")
    p.add_argument("--other-vocab", action="store_true", help="pack data whose vocabulary is not the shipped "
                   "model's (refused by default: the weights trained would not pair with its draft model)")
    sub.add_parser("stage", help="take models/ out of the git index and ignore it, so it does not travel")
    sub.add_parser("unstage", help="put models/ back in the git index and stop ignoring it")
    p = sub.add_parser("unpack", help="rejoin <task>.tar.NN parts into runs/gpu_<task>/export and gpu/resume/<task>")
    p.add_argument("dir", help="folder holding the <task>.tar.NN parts from the device")
    p = sub.add_parser("score", help="top-k of a device n-best or writings file against the test targets")
    p.add_argument("--task", choices=TASKS, required=True, help="whose test targets to score against")
    p.add_argument("--pred", required=True, help="the n-best .tsv.gz or writings .jsonl.gz file `decode` wrote")
    p.add_argument("--data", default=str(ROOT / "data"), help="folder of prepared <task>/ data (default <repo>/data)")
    p.add_argument("--limit", type=at_least(0), default=0, help="score the first N queries (0: all)")
    p.add_argument("--writings", type=at_least(0), default=0, help="a writings file (decode --writings): pool each "
                   "query's first N writings")
    p = sub.add_parser("start", help="start the trainings as detached processes, resumed where possible")
    p.add_argument("--minutes", type=argtype(Bounds(0, low_open=True)), required=True,
                   help="each run's whole time budget, above 0 (its lr reaches 0 there); a resumed run's includes "
                   "the minutes it has trained: minutes trained + minutes to add")
    p.add_argument("--tasks", type=task_list, default=list(TASKS),
                   help="tasks to train, comma-separated (default forward,retro)")
    p.add_argument("--eval-every", type=at_least(1), default=2000, help="validate every this many steps (default 2000)")
    p.add_argument("--tokens", type=at_least(1), default=GPU_TOKENS, help="tokens per optimizer step")
    p.add_argument("--lr", type=float, default=0.0, help="peak learning rate (0: the trainer's rule, 4e-3 at "
                   "these batch sizes); a short block on from trained weights wants a lower one (tools/gpu_train.md)")
    p.add_argument("--warmup", type=at_least(0), default=1000, help="warm-up steps to the peak rate")
    p.add_argument("--label-smoothing", type=float, default=None, help="the trainer's default unless given "
                   "(forward without it: tools/gpu_train.md)")
    p.add_argument("--ema", type=float, default=0.0, help="keep a moving average of the weights with this decay "
                   "per step (0: none); exports then hold it, and a run resumed from one starts from it")
    p.add_argument("--compile", action="store_true", help="torch.compile the training forward pass")
    p.add_argument("--init", default="", help="folder holding <task>/ model folders (e.g. models): a task with "
                   "nothing to resume starts a new schedule from those weights")
    p.add_argument("--ready-seconds", type=float, default=180, help="wait at most this long for each trainer to "
                   "read its data and weights (the next command's sync may remove what it has not read)")
    p = sub.add_parser("watch", help="a progress line per task each minute, until time is up or no training runs")
    p.add_argument("--seconds", type=float, required=True, help="stop watching after this many seconds")
    p = sub.add_parser("collect", help="each export as tar parts of at most 15 MiB, and the logs")
    p.add_argument("--out", required=True, help="folder for the parts and train_logs.txt.gz (the device's $OUT)")
    p = sub.add_parser("decode", help="n-best beam search over the packed test queries")
    p.add_argument("--task", choices=TASKS, required=True, help="whose packed test queries to decode")
    p.add_argument("--model", default="", help="model folder (default: runs/gpu_<task>/export)")
    p.add_argument("--out", required=True, help="folder to write the answers file to")
    p.add_argument("--n-best", type=at_least(1), default=5, help="beam width, answers per query (default 5)")
    p.add_argument("--batch-size", type=at_least(1), default=128, help="rows per beam-search batch (default 128)")
    p.add_argument("--limit", type=at_least(0), default=0, help="decode the first N test queries (0: all)")
    p.add_argument("--writings", type=at_least(1), default=1, help="read each query in up to N writings (packed with "
                   "--writings) and keep every writing's scored answers")
    p = sub.add_parser("speed", help="the project's bench on a task's quick set on the GPU (needs RDKit)")
    p.add_argument("--task", choices=TASKS, required=True, help="whose quick set to run")
    p.add_argument("--model", default="", help="model folder (default: runs/gpu_<task>/export)")
    p.add_argument("--out", required=True, help="folder to write the JSON reports to")
    p.add_argument("--methods", default="greedy,greedy-uncached,spec-auto,spec-pointer,spec-lookup,spec-paper,"
                   "beam,beam-uncached,sbs,sbs-exact", help="methods to bench, comma-separated")
    p.add_argument("--batch-size", default="1,32", help="comma-separated batch sizes, one report each")
    p.add_argument("--n-best", type=at_least(1), default=5, help="beam width of the beam methods")
    p.add_argument("--limit", type=at_least(0), default=0, help="first N quick-set queries (0: all 200)")
    p.add_argument("--warmup", type=at_least(0), default=3, help="warm-up batches before timing (default 3)")
    p.add_argument("--engines", type=engine_list, default=[], help="also run every method on these engines (e.g. "
                   "graphs: CUDA graphs), interleaved; rows named method@engine; one that runs the decoder calls on "
                   "the engine the other rows do (auto's: torch on a GPU) is left out")
    args = parser.parse_args(argv)
    globals()[f"cmd_{args.command}"](args)


if __name__ == "__main__":
    main()
