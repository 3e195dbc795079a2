"""The `molspec` command's entry point, which imports nothing heavy itself: the command line (cli, and through it
torch and RDKit) loads for a second or more, and a Ctrl-C in that time printed a KeyboardInterrupt traceback from
deep inside torch's import, where every later Ctrl-C is boundary.guarded's `interrupted` line and exit 130."""
from __future__ import annotations

import sys
from importlib import import_module

INTERRUPTED = 130  # 128 + SIGINT, as boundary.guarded returns it


def main(argv: list[str] | None = None) -> int:
    try:
        cli = import_module("molspec_core.cli")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    # RDKit's lines on stderr for the whole run: the command says what is wrong with a SMILES itself
    import_module("molspec_core.chem").silence_rdkit()
    return cli.main(argv)
