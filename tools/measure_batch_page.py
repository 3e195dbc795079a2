"""The app's batch page with a 10,000-row CSV in headless Chromium: time, the progress bar, and the
Streamlit server's peak RSS (VmHWM). Writes screenshots to runs/shots/.

python3 tools/measure_batch_page.py runs/big10k.csv   (tools/make_10k.py writes that file)
"""
import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "runs" / "shots"


def rss_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path, help="the CSV to upload, relative to the repository root or absolute "
                        "(tools/make_10k.py writes runs/big10k.csv)")
    args = parser.parse_args()
    upload = ROOT / args.csv
    if not upload.is_file():  # before the server starts, not after
        parser.error(f"{upload} is not a file")
    from playwright.sync_api import sync_playwright  # only where the page is measured

    SHOTS.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                               "--server.address", "127.0.0.1", "--server.port", str(port),
                               "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
                              cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(url + "/_stcore/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1200})
            page.set_default_timeout(3_600_000)
            page.goto(url + "/batch")
            page.locator('input[type="file"]').set_input_files(str(upload))
            page.get_by_text(upload.name).wait_for()
            started = time.monotonic()
            page.get_by_role("button", name="Run batch").click()
            time.sleep(60)
            page.screenshot(path=str(SHOTS / "batch10k_progress.png"))
            bar = page.locator('[data-testid="stProgress"]')  # gone once the run has ended: its text waited an hour
            print("after 60 s:", bar.inner_text() if bar.count() else "the run had ended (no progress bar)", flush=True)
            page.get_by_role("button", name="Download CSV").wait_for()
            elapsed = time.monotonic() - started
            time.sleep(2)
            page.screenshot(path=str(SHOTS / "batch10k_done.png"))
            metrics = page.locator('[data-testid="stMetric"]').all_inner_texts()
            print(f"done in {elapsed:.0f} s; metrics {metrics}; server peak RSS {rss_mb(server.pid, 'VmHWM'):.0f} MB, "
                  f"now {rss_mb(server.pid, 'VmRSS'):.0f} MB")
            browser.close()
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
