"""What the scripts of tools/ share: the checks that keep a run from writing over what it reads (the CLI's
molspec_core.io.check_output, for several inputs and outputs at once), the checks that its inputs and models are
there and readable, and argparse types for lists and method names; each makes a fault a usage error naming the flag,
before any work.

A module, not a script: tests/test_tools_help.py leaves out tools/_*.py. A script imports it after putting its own
folder on sys.path (a script run as `python3 tools/NAME.py` has it there; tests load the scripts by path).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from molspec_core.chem import silence_rdkit
from molspec_core.data import DEFAULT_DATA
from molspec_core.io import OutputFileError, check_output

# The scripts are programs, as the molspec command is: RDKit's messages off for their process (since 48c8374 the
# engine quiets them only inside its own calls, and centre_check's or stereo_check's own parsing printed them)
silence_rdkit()

T = TypeVar("T")


def comma_list(item: Callable[[str], T]) -> Callable[[str], list[T]]:
    """An argparse type: comma-separated items, each read by the argparse type `item`. A bad one is a usage error
    naming it; `--draft-lens a` and the like were ValueError tracebacks, most of them after the model loaded."""
    def items(text: str) -> list[T]:
        return [item(part.strip()) for part in text.split(",")]
    return items


def method_name(text: str) -> str:
    """An argparse type: the name of a decoding method (molspec_core.methods), else a usage error naming them all."""
    from molspec_core.methods import method

    try:
        method(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def made_by() -> dict[str, str | None]:
    """What wrote a report, beside the weights each tool records (calibration.weights_fingerprint): the command line
    and the code (evaluate.software: the package version, the git commit), as evaluate's and bench's reports do."""
    from molspec_core.evaluate import software

    return {"command": shlex.join(["python3", *sys.argv]), **software()}


# (what the command line calls a path, the path); a path of None (an option not given) is skipped
Named = tuple[str, "str | Path | None"]


class InputFileError(ValueError):
    """A file, folder or model a tool reads that is not there, or not of the kind it reads."""


def check_inputs(inputs: Iterable[Named]) -> None:
    """Refuse (InputFileError, naming the path and the flag that gives it) before any work an input that does not
    exist. Several tools read ../shared/data by default, which a fresh clone lacks: each ended in a
    FileNotFoundError traceback that named no flag."""
    for name, path in inputs:
        if path is None or Path(path).exists():
            continue
        where = f"{name}: {path} does not exist"
        if Path(os.path.realpath(DEFAULT_DATA)) in Path(os.path.realpath(path)).parents:  # the default, or in it
            where += ("; the USPTO data sets are not part of this repository: README.md's \"Data\" says where they "
                      "come from")
        raise InputFileError(where)


def read_json(name: str, path: str | Path) -> dict:
    """The JSON object in a file a tool reads (an earlier report, a prepare-data folder's stats.json), or an
    InputFileError naming the flag and the file: a file of another kind was json's traceback, naming neither."""
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: json.JSONDecodeError
        raise InputFileError(f"{name} {path} cannot be read as JSON: {str(exc)[:200]}") from None
    if not isinstance(value, dict):
        raise InputFileError(f"{name} {path}: expected a JSON object, not {type(value).__name__}")
    return value


def check_models(models: Iterable[Named]) -> None:
    """Refuse (InputFileError, naming the flag) before any work a model that would not load: a mistyped name or
    folder ended in a CheckpointError traceback, several tools' after reading and checking their queries. Reads the
    JSON files and safetensors headers alone (checkpoint.inspect_folder: milliseconds)."""
    from molspec_core.checkpoint import CheckpointError, inspect_folder
    from molspec_core.service import model_folder

    for name, model in models:
        if model is None:
            continue
        try:
            inspect_folder(model_folder(model))
        except CheckpointError as exc:
            raise InputFileError(f"{name} {model}: {exc}") from None


def checked_queries(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The queries of a tool that decodes --src (lines of --index, the first --limit) with --model, read before the
    model loads; an input or model that is not there, or a file read_pairs refuses, is the parser's usage error."""
    from molspec_core.evaluate import read_pairs

    try:
        check_inputs([("--src", args.src), ("--index", args.index)])
        check_models([("--model", args.model)])
        return read_pairs(args.src, None, args.index, args.limit)[0]
    except (InputFileError, ValueError) as exc:  # read_pairs' ValueError names the file
        parser.error(str(exc))


def _same(a: Path, b: Path) -> bool:
    """Whether two resolved paths are one file or folder (hard links and bind mounts included)."""
    try:
        return a == b or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def check_outputs(outputs: Iterable[Named], inputs: Iterable[Named] = ()) -> None:
    """Refuse (OutputFileError, naming both paths) before any work: an output file that is one of the run's
    inputs (check_output's test: the same file, through a link too), two outputs that are one file (one would
    replace the other), and an output check_output refuses on its own (a folder, a device, a missing folder)."""
    inputs = [(name, path) for name, path in inputs if path is not None]
    written: list[tuple[str, str | Path, Path]] = []
    for name, output in outputs:
        if output is None:
            continue
        try:
            target = check_output(output)
        except OutputFileError as exc:
            raise OutputFileError(f"{name}: {exc}") from None
        for other_name, other, other_target in written:
            if _same(target, other_target):
                raise OutputFileError(f"{other_name} {other} and {name} {output} are one file, and the run writes "
                                      f"both: one would replace the other; choose another name for {other_name}")
        for input_name, source in inputs:
            try:
                check_output(output, source)  # passed once without the input: this refuses the input only
            except OutputFileError:
                raise OutputFileError(f"{name} {output} is {input_name} {source}, which this run reads: writing "
                                      f"it would replace that input; choose another name for {name}") from None
        written.append((name, output, target))


def check_output_folder(name: str, folder: str | Path, inputs: Iterable[Named]) -> None:
    """Refuse (OutputFileError, naming both paths) before any work: an output folder that is one of the run's
    input folders or lies inside one, one that holds an input (file or folder), an existing file, and a folder that
    already holds files (what is there would be mixed with what the run writes, as prepare-data refuses it)."""
    target = Path(os.path.realpath(folder))
    if target.exists() and not target.is_dir():
        raise OutputFileError(f"{name} {folder} is a file, not a folder; give a folder for the output")
    for input_name, source in inputs:
        if source is None:
            continue
        path = Path(os.path.realpath(source))
        if _same(target, path):
            raise OutputFileError(f"{name} {folder} is {input_name} {source}, which this run reads: writing it would "
                                  f"replace the files it reads; choose another folder for {name}")
        if any(_same(parent, path) for parent in target.parents):
            raise OutputFileError(f"{name} {folder} lies inside {input_name} {source}, a folder this run reads; "
                                  f"choose a folder for {name} outside it")
        if any(_same(parent, target) for parent in path.parents):
            raise OutputFileError(f"{name} {folder} holds {input_name} {source}, which this run reads; choose a "
                                  f"folder for {name} that holds none of the inputs")
    if target.is_dir() and any(target.iterdir()):
        raise OutputFileError(f"{name} {folder} already holds files; give a new or empty folder (the run would write "
                              "its files among them, replacing some)")
