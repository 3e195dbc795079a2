"""The README's screenshot: the Predict page after one query, taken in headless Chromium.

python3 tools/readme_screenshot.py [SMILES] [--out PNG]  ->  assets/predict_page.png (tracked: the README shows it)
Needs /usr/bin/chromium and the playwright package (no browser download).
"""
import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _toolbox import check_outputs  # noqa: E402  (tools/_toolbox.py)

from molspec_core.io import OutputFileError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "predict_page.png"
QUERY = "CC(=O)Cl.NCc1ccccc1"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("smiles", nargs="?", default=QUERY,
                        help=f"the query typed into the Predict page (default {QUERY}, the README's)")
    parser.add_argument("--out", type=Path, default=OUT, help="the PNG to write (default assets/predict_page.png, "
                        "the README's screenshot, tracked by git: it is replaced)")
    args = parser.parse_args()
    try:
        check_outputs([("--out", args.out)])  # a folder, or a missing one: refused before the server starts
    except OutputFileError as exc:
        parser.error(str(exc))
    from playwright.sync_api import sync_playwright  # only where a screenshot is taken

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                               "--server.address", "127.0.0.1", "--server.port", str(port),
                               "--browser.gatherUsageStats", "false"], cwd=ROOT,
                              env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1500})
            page.set_default_timeout(120_000)
            page.goto(url + "/")
            page.get_by_role("textbox", name="SMILES").fill(args.smiles)
            page.get_by_role("button", name="Predict").click()
            page.get_by_role("heading", name="Rank 1", exact=True).wait_for()  # the first answer's card heading
            page.wait_for_function("""() => !document.querySelector(
                '[data-testid="stStatusWidgetRunningIcon"], [data-testid="stSkeleton"]')""")
            time.sleep(2)  # structure images paint after their elements arrive
            page.screenshot(path=str(args.out))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=15)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
