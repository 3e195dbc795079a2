"""Does a model keep stereochemistry? USPTO-50K test reactions, read as the Predict page reads them.

python3 tools/stereo_check.py --train-tgt data/forward/train.tgt [--model forward] [--out REPORT.json]
    [--against bench/accuracy/forward_50k_stereo_int8.json]
python3 tools/stereo_check.py --lines-from bench/accuracy/forward_50k_stereo_int8.json --model runs/X/export \
    --train-tgt data/FINE_TUNE/train.tgt --against bench/accuracy/forward_50k_stereo_int8.json
python3 tools/stereo_check.py --task retro [--model retro] [--plain 300] [--out REPORT.json]

The USPTO-MIT test set holds no stereocentres, so the forward model's test figures say nothing about them.
USPTO-50K's test reactions (GLN split, 5,007) do. Forward, the reactants are the query and the product the
known answer; a reaction whose product is among the model's training targets (--train-tgt: the `prepare-data
--task forward` folder's train.tgt, the pool and the USPTO-MIT rows) is left out. Retro (--task retro), the
product is the query and the reactants the known answer; the split is the retro model's own, so nothing is
left out. With --lines-from (an earlier report) the reactions that report decoded are decoded again, without
the pool's folder: for a fine-tune of that model, whose --train-tgt (its fine-tune folder's) must then make
none of their known answers. The reactions fall in three groups by the known answer:

  kept     the answer has stereo (@, /, \\) and so does the query: the model has to carry it over
  created  the answer has stereo the query lacks (forward: an asymmetric step or a resolution the reaction
           SMILES do not show): the query does not show it
  none     no stereo in the answer (the first --plain of them, in file order, as a reference)

Per group: the first answer (the page's order) equal to the known one, equal to it once stereo is removed from
both (the right molecules, perhaps the wrong stereo), and the known answer within the answers. Beam search and
5 writings, as the page opens (methods.TASK_DEFAULTS: 5 answers forward, 10 retro). Prints one JSON object.
The report also keeps each group's test lines and, per line, whether the first answer was the known one, so
that --against (another model's report) compares the two reaction by reaction: per group, the first answers
exact with one model only, and the exact McNemar p, as `molspec compare` does for evaluate reports.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from rdkit import Chem

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import InputFileError, check_inputs, check_models, check_outputs, made_by, read_json  # noqa: E402  (tools/_toolbox.py)

from molspec_core.argtypes import at_least  # noqa: E402
from molspec_core.calibration import weights_fingerprint  # noqa: E402
from molspec_core.checkpoint import MODEL_TASKS, inspect_folder  # noqa: E402
from molspec_core.chem import canonical_or_none  # noqa: E402
from molspec_core.data import DEFAULT_DATA, GLN_TEST_DIR, read_lines  # noqa: E402
from molspec_core.evaluate import mcnemar_p, read_pairs  # noqa: E402
from molspec_core.io import OutputFileError, write_text_file  # noqa: E402
from molspec_core.methods import TASK_DEFAULTS  # noqa: E402
from molspec_core.service import MAX_AUGMENT, Predictor, model_folder  # noqa: E402

TEST = DEFAULT_DATA / GLN_TEST_DIR


def has_stereo(smiles: str) -> bool:
    return any(mark in smiles for mark in "@/\\")


def without_stereo(smiles: str | None) -> str | None:
    mol = Chem.MolFromSmiles(smiles) if smiles else None
    if mol is None:
        return None
    Chem.RemoveStereochemistry(mol)
    return Chem.MolToSmiles(mol)


def training_targets(path: Path) -> set[str]:
    return {c for c in (canonical_or_none(line.strip()) for line in read_lines(path)) if c}


GROUPS = ("kept", "created", "none")  # the module docstring says which reactions each holds


def group_lines(queries: list[str], knowns: list[str], seen: set[str]) -> dict[str, list[int]]:
    """The test lines of each group (module docstring), leaving out those whose known answer is in seen."""
    groups: dict[str, list[int]] = {group: [] for group in GROUPS}
    for i, (query, known) in enumerate(zip(queries, knowns)):
        if canonical_or_none(known) in seen:
            continue
        group = "none" if not has_stereo(known) else "kept" if has_stereo(query) else "created"
        groups[group].append(i)
    return groups


def lines_of(earlier: dict, knowns: list[str], seen: set[str]) -> dict[str, list[int]]:
    """The test lines of each group an earlier report decoded; a ValueError where the known answer of any is in
    seen (a fine-tune trained on it: the comparison would not be fair)."""
    groups = {group: list(earlier[group]["lines"]) for group in GROUPS}
    trained = [i for lines in groups.values() for i in lines if canonical_or_none(knowns[i]) in seen]
    if trained:
        raise ValueError(f"{len(trained)} of the reactions to decode (test lines {trained[:5]}...) have a known "
                         "answer among the training targets")
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="forward", choices=tuple(TASK_DEFAULTS), help="forward: reactants to "
                        "product; retro: product to reactants (default %(default)s)")
    parser.add_argument("--model", help="model folder, or the shipped model's name (default: the task's)")
    parser.add_argument("--train-tgt", help="forward: the model's training targets, to leave out (required "
                        "without --lines-from; with it, a fine-tune's targets, which none of those reactions may make)")
    parser.add_argument("--lines-from", help="an earlier report (this tool's, same --task and --test): decode the "
                        "reactions it decoded")
    parser.add_argument("--test", default=str(TEST), help="folder of reactants.txt and products.txt")
    parser.add_argument("--plain", type=at_least(0), default=900,
                        help="reactions without stereo decoded as the reference (default %(default)s)")
    parser.add_argument("--augment", type=at_least(1, MAX_AUGMENT), default=5,
                        help="writings of each query, pooled, as the Predict page reads it (default %(default)s)")
    parser.add_argument("--dtype", default="int8", choices=("float32", "int8"), help="what the decoder calls compute "
                        "with (default %(default)s, as the app on a CPU)")
    parser.add_argument("--out", help="JSON report (none of the files it reads)")
    parser.add_argument("--against", help="another model's report (this tool's, same --task, --test and --plain)")
    args = parser.parse_args()
    if args.task == "forward" and not (args.train_tgt or args.lines_from):
        parser.error("--train-tgt (or --lines-from) is required for the forward model")
    try:  # before any reading or decoding: the report replaces none of the inputs, which are there
        check_outputs([("--out", args.out)], [("--lines-from", args.lines_from), ("--against", args.against),
                                              ("--train-tgt", args.train_tgt),
                                              ("--test's reactants", Path(args.test) / "reactants.txt"),
                                              ("--test's products", Path(args.test) / "products.txt")])
        check_inputs([("--test", Path(args.test) / "reactants.txt"), ("--test", Path(args.test) / "products.txt"),
                      ("--train-tgt", args.train_tgt), ("--lines-from", args.lines_from), ("--against", args.against)])
        check_models([("--model", args.model or args.task)])
    except (InputFileError, OutputFileError) as exc:
        parser.error(str(exc))
    model_task = inspect_folder(model_folder(args.model or args.task)).config.get("task", "forward")
    if model_task in MODEL_TASKS and model_task != args.task:  # a forward model read the products as queries
        parser.error(f"--model {args.model} is a {model_task} model, and --task is {args.task}")
    model = args.model or args.task
    torch.set_num_threads(1)
    test = Path(args.test).name
    try:  # before decoding, not after minutes of it
        reactants, products = read_pairs(f"{args.test}/reactants.txt", f"{args.test}/products.txt")
        queries, knowns = (reactants, products) if args.task == "forward" else (products, reactants)
        seen = training_targets(Path(args.train_tgt)) if args.train_tgt else set()
        against = read_json("--against", args.against) if args.against else None
        if args.lines_from:
            earlier = read_json("--lines-from", args.lines_from)
            check_comparable(earlier, f"--lines-from {args.lines_from}", args.task, test)
            groups = lines_of(earlier, knowns, seen)
            left_out = earlier["left_out_as_trained_on"]
        else:
            groups = group_lines(queries, knowns, seen)
            left_out = len(knowns) - sum(map(len, groups.values()))
            groups["none"] = groups["none"][:args.plain]
        if against:
            check_comparable(against, f"--against {args.against}", args.task, test)
            check_same_reactions(against, groups)
    except ValueError as exc:  # InputFileError is one; read_pairs' and data.read_lines' name the file
        parser.error(str(exc))
    except KeyError as exc:
        parser.error(f"--lines-from or --against: not a report of this tool (it has no {exc})")
    report: dict = {"task": args.task, "model": model, "test": test,
                    "left_out_as_trained_on": left_out, "augment": args.augment, "dtype": args.dtype}
    try:
        predictor = Predictor.load(model, "cpu", "native" if args.dtype == "int8" else "auto", dtype=args.dtype)
    except ValueError as exc:  # int8 on weights the native engine cannot read (a run's float32 best/): a traceback
        parser.error(f"--dtype {args.dtype}: {exc}")
    try:  # a model trained on one writing of each query: predict's ValueError traceback at the first group
        predictor.check_augment(args.augment)
    except ValueError as exc:
        parser.error(f"--augment {args.augment}: {exc}")
    report.update(weights=weights_fingerprint(predictor.path), **made_by())  # the model's path may hold others later
    method, n_best = TASK_DEFAULTS[args.task]
    for name, lines in groups.items():
        results = predictor.predict([queries[i] for i in lines], method=method, n_best=n_best,
                                    augment=args.augment)
        exact_each: list[int] = []
        molecule = listed = 0
        for i, result in zip(lines, results):
            known = canonical_or_none(knowns[i])
            answers = result.predictions  # in rank order: the page's
            first = answers[0].smiles if answers else None
            exact_each.append(int(first == known))
            molecule += first is not None and without_stereo(first) == without_stereo(known)
            listed += any(p.smiles == known for p in answers)
        report[name] = {"n": len(lines), "first_exact": sum(exact_each), "first_right_molecule": molecule,
                        f"within_{n_best}": listed, "refused": sum(not r.ok for r in results),
                        "lines": lines, "first_exact_each": exact_each}
    print(json.dumps({key: {k: v for k, v in value.items() if not isinstance(v, list)} if isinstance(value, dict)
                      else value for key, value in report.items()}, indent=1))
    if args.out:
        write_text_file(args.out, report_text(report))
    if against:
        print(json.dumps(paired(against, report), indent=1))


def check_comparable(old: dict, given: str, task: str, test: str) -> None:
    """A ValueError unless the report `given` (its flag and path) is this tool's on the same task and test set (one
    without a task was written before --task, for the forward model)."""
    if old.get("task", "forward") != task:
        raise ValueError(f"{given} is a {old.get('task', 'forward')} report, and this run is {task}")
    if old.get("test") != test:
        raise ValueError(f"{given} decoded {old.get('test')}, and this run decodes {test}")


def check_same_reactions(old: dict, groups: dict[str, list[int]]) -> None:
    """A ValueError unless the old report decoded these test lines in each group."""
    for group in GROUPS:
        if old[group]["lines"] != groups[group]:
            raise ValueError(f"the reports decoded other reactions in group {group!r}")


def paired(old: dict, new: dict) -> dict:
    """Two reports on the same reactions, group by group: first answers exact with the old model only and with
    the new one only, and the exact McNemar p of the difference."""
    check_same_reactions(old, {group: new[group]["lines"] for group in GROUPS})
    out = {}
    for group in GROUPS:
        pairs = list(zip(old[group]["first_exact_each"], new[group]["first_exact_each"]))
        only_old = sum(a and not b for a, b in pairs)
        only_new = sum(b and not a for a, b in pairs)
        out[group] = {"only_old": only_old, "only_new": only_new, "p": mcnemar_p(only_old, only_new)}
    return out


def report_text(report: dict) -> str:
    """The report as indented JSON, each per-reaction list on one line."""
    def item(key: str, value: object) -> str:
        if isinstance(value, dict):
            inner = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items())
            return f" {json.dumps(key)}: {{\n{inner}\n }}"
        return f" {json.dumps(key)}: {json.dumps(value)}"

    return "{\n" + ",\n".join(item(key, value) for key, value in report.items()) + "\n}\n"


if __name__ == "__main__":
    main()
