"""The scripts of tools/ that drive the app in Chromium, run as a user runs them (slow: a Streamlit server and a
browser each). They skip where no browser is installed, as tests/test_browser.py does."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"no browser: {CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)
pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")


def test_the_readme_screenshot_is_taken_once_the_first_answer_shows(tmp_path):
    """It waited for a bold 'Rank 1' that the Predict page no longer draws (each answer's rank became a heading) and
    ended after two minutes in Playwright's TimeoutError, writing nothing."""
    shot = tmp_path / "predict.png"
    done = subprocess.run([sys.executable, "tools/readme_screenshot.py", "--out", str(shot)], cwd=ROOT,
                          capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {shot}" in done.stdout


def test_the_batch_page_measure_ends_when_the_run_ends_before_its_first_look(tmp_path):
    """A file predicted in under a minute left no progress bar to read at the tool's look after 60 s, and the tool
    waited for one for an hour (its page timeout)."""
    import os
    import signal

    queries = tmp_path / "small.csv"
    queries.write_text("smiles\nCCO.CC(=O)O\nxyz\n")
    tool = subprocess.Popen([sys.executable, "tools/measure_batch_page.py", str(queries)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = tool.communicate(timeout=360)
    except subprocess.TimeoutExpired:
        os.killpg(tool.pid, signal.SIGKILL)  # the tool, its Streamlit server and its browser
        tool.communicate()
        raise
    assert tool.returncode == 0, out[-2000:]
    assert "after 60 s: the run had ended (no progress bar)" in out and "done in" in out
