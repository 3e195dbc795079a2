"""`python3 tools/NAME.py --help` is the reference a user of a tool reads: no flag may be a bare name
(test_cli's test of the `molspec` commands, for the scripts of tools/). Each script runs in a subprocess,
as a user runs it, and its help text is read as argparse prints it: an option without help is a line
holding the flag and its metavar and nothing after them."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

TOOLS = ROOT / "tools"

# Every script of tools/ has a parser whose --help prints its help and exits, with no side effect (four once took
# --help as a model, a query or nothing and did their work). tools/_*.py are modules the scripts share, not scripts.
SCRIPTS = sorted(path.stem for path in TOOLS.glob("*.py") if not path.stem.startswith("_"))
MODULES = sorted(path.stem for path in TOOLS.glob("_*.py"))
HEADINGS = {"positional arguments:", "options:", "optional arguments:"}  # "optional": Python before 3.10
TIMEOUT_S = 60  # --help imports what the script imports (torch for most: seconds on a busy CPU)


def help_text(*args: str) -> str:
    env = dict(os.environ, COLUMNS="80")  # argparse wraps to the terminal's width: the same layout everywhere
    done = subprocess.run([sys.executable, *args, "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return done.stdout


def listed(text: str) -> tuple[list[list[str]], list[str]]:
    """([name, help] of each option, positional and subcommand the help text lists, the subcommands its
    `{a,b,...}` names). An entry starts at an indent of 2 (of 4 for a subcommand below its `{a,b,...}`); its
    help follows two or more spaces later on the same line or on deeper-indented lines after it. A
    subcommand without help is not listed at all: the caller compares the two."""
    entries: list[list[str]] = []
    commands: list[str] = []
    in_section = below_commands = False
    for line in text.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:  # a heading, or the description's text
            in_section, below_commands = line.strip() in HEADINGS, False
            continue
        if not in_section:
            continue
        body = line.strip()
        if indent == 2 and body.startswith("{"):  # the subcommands: each listed below, with its help
            commands = body.split()[0].strip("{}").split(",")
            below_commands = True
        elif indent == 2 or (indent == 4 and below_commands):
            below_commands = below_commands and indent == 4
            name, _, help = body.partition("  ")
            entries.append([name, help.strip()])
        elif entries:  # help continued on its own line(s), indented to the help column
            entries[-1][1] = f"{entries[-1][1]} {body}".strip()
    return entries, commands


def usage_flags(text: str) -> set[str]:
    """The option strings of the usage lines (up to the first blank line)."""
    usage = text.split("\n\n", 1)[0]
    return set(re.findall(r"(?<=[\[ ])(--?[A-Za-z][\w-]*)", usage))


def bare_entries(text: str, where: str) -> tuple[list[str], list[str]]:
    """(the entries of the help text with no help, its subcommands) after checking that the text was read:
    every flag of its usage line is among the entries, and every subcommand is listed (so with help)."""
    entries, commands = listed(text)
    names = {flag for name, _ in entries for flag in re.findall(r"--?[A-Za-z][\w-]*", name)}
    assert "--help" in names, f"{where}: no options section read from\n{text}"
    assert usage_flags(text) <= names, f"{where}: usage flags not among the entries read: {usage_flags(text) - names}"
    unlisted = [f"{where} {command} (a subcommand with no help)" for command in commands
                if command not in {name for name, _ in entries}]
    return unlisted + [f"{where} {name}" for name, help in entries if not help], commands


def test_the_reader_finds_a_bare_flag():
    text = ("usage: x.py [-h] [--data DATA] [--limit LIMIT] {a,b}\n\npositional arguments:\n  {a,b}\n"
            "    a                   does a\n\noptions:\n  -h, --help            show this help message and exit\n"
            "  --data DATA\n  --limit LIMIT         the first this many\n")
    assert bare_entries(text, "x.py") == (["x.py b (a subcommand with no help)", "x.py --data DATA"], ["a", "b"])
    wrapped = "usage: x.py [-h] [--long-name LONG_NAME]\n\noptions:\n  -h, --help  show help\n  --long-name LONG_NAME\n"
    assert bare_entries(wrapped, "x.py")[0] == ["x.py --long-name LONG_NAME"]
    wrapped += "                        its help, on the next line\n"
    assert bare_entries(wrapped, "x.py")[0] == []


def test_every_script_is_read_and_the_shared_modules_are_no_scripts():
    assert {"cost_ratio", "make_10k", "measure_batch_page", "readme_screenshot"} <= set(SCRIPTS)
    assert len(SCRIPTS) >= 18
    for name in MODULES:  # left out of the help test: nothing to run
        assert "__main__" not in (TOOLS / f"{name}.py").read_text(), f"tools/{name}.py runs: name it without the _"


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_option_of_every_tool_says_what_it_does(name):
    script = f"tools/{name}.py"
    bare, commands = bare_entries(help_text(script), script)
    for command in commands:
        bare += bare_entries(help_text(script, command), f"{script} {command}")[0]
    assert bare == []
