"""Run a spec, draw its run report with `orchestrate report`, and screenshot the page in headless Chromium.

    .venv/bin/python docs/render_report.py                      # examples/polyfit.yaml -> docs/run-report.png
    .venv/bin/python docs/render_report.py examples/towers.yaml --png /tmp/towers.png --html /tmp/towers.html
    .venv/bin/python docs/render_report.py --report run.json    # an existing report: no run

This is how docs/run-report.png is made, and the check that the page really renders
in a browser with nothing but the file (Chromium gets no network: every script and style
must be inline). Without Chromium (Debian: `apt-get install chromium`; or set CHROMIUM to
its path) it says so and exits 0: the tests (tests/test_report_html.py) need no browser.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from browser import find_chromium  # noqa: E402  (one lookup of $CHROMIUM or the browser on PATH: tests/browser.py)


def _relative(path: Path) -> Path:
    """``path`` relative to the current folder when it is inside it: the page shows the spec's name as given."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def make_report(spec: Path, where: Path) -> Path:
    """Run ``spec`` on an embedded cluster (simulated GPUs without CUDA); its run report's path."""
    sys.path.insert(0, str(spec.resolve().parent))  # the spec's `call` functions sit beside it
    from orchestrator import run_file

    report = where / "run.json"
    run_file(spec, output_dir=str(where), report_path=str(report), progress=False, echo=lambda _: None)
    return report


def screenshot(browser: str, page: Path, png: Path, width: int, height: int) -> None:
    """Load ``page`` in headless Chromium and write what a ``width`` x ``height`` window shows."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [
            browser, "--headless", "--disable-gpu",
            # containers run this as root, where Chromium's sandbox cannot start; the page is our own file
            "--no-sandbox",
            # no network at all: a resource the page failed to inline would show as missing
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
            "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
            f"--user-data-dir={profile}", "--hide-scrollbars",
            "--enable-logging=stderr", "--v=0",  # the page's console, to catch a script that failed
            # bokeh draws after the document loads: let the page's timers run before the picture is taken
            "--virtual-time-budget=10000",
            f"--window-size={width},{height}", f"--screenshot={png}", page.resolve().as_uri(),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    if done.returncode != 0 or not png.is_file():
        raise SystemExit(f"chromium failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    failed = [line for line in console if "error" in line.lower()]
    if failed:
        raise SystemExit("the page logged errors in Chromium:\n" + "\n".join(failed))
    if not any("document idle" in line for line in console):  # bokeh's own "drawn" message
        print("warning: bokeh did not say the document was drawn; look at the picture", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", nargs="?", default=os.path.relpath(ROOT / "examples" / "polyfit.yaml"),
                        help="the spec to run (default: examples/polyfit.yaml)")
    parser.add_argument("--report", metavar="RUN.json", help="draw this run report instead of running a spec")
    parser.add_argument("--png", default=str(ROOT / "docs" / "run-report.png"), help="the screenshot to write")
    parser.add_argument("--html", metavar="FILE", help="also keep the HTML page here")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1075, help="window height: how much of the page is shown")
    args = parser.parse_args(argv)

    browser = find_chromium()
    if browser is None:
        print("skipped: no Chromium found (apt-get install chromium, or set CHROMIUM=/path/to/chrome)",
              file=sys.stderr)
        return 0
    from orchestrator.cli import run_cli

    png = Path(args.png).resolve()
    keep = Path(args.html).resolve() if args.html else None
    with tempfile.TemporaryDirectory(prefix="render-report-") as tmp:
        where = Path(tmp)
        report = Path(args.report).resolve() if args.report else make_report(_relative(Path(args.spec)), where)
        page = keep or where / "run.html"
        # from the report's folder: the page's header names the report as "run.json", not a temporary path
        os.chdir(report.parent)
        code = run_cli(["report", report.name, "--html", str(page)])
        if code != 0:
            return code
        screenshot(browser, page, png, args.width, args.height)
    print(f"wrote {png} ({png.stat().st_size} bytes) with {browser}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
